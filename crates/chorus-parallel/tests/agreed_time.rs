//! Issue 17: `ExecContext::time_ms` is the running maximum of the delivered
//! batches' times, the same from the sequential and the parallel executor
//! (computed in delivery order, not in the workers), and it survives a
//! checkpoint and restore.

mod common;

use bytes::Bytes;
use chorus_core::{Batch, Seq};
use chorus_exec::{Access, ExecContext, ExecResult, Executor, SequentialExecutor, Service};
use chorus_parallel::ParallelExecutor;
use common::req;
use std::sync::Arc;

/// op = [k]: touches only key k (so the parallel executor runs different
/// keys at once); replies with the agreed time it was given.
struct TimeEcho;

impl Service for TimeEcho {
    fn execute(&self, _op: &[u8], ctx: &ExecContext) -> Bytes {
        Bytes::copy_from_slice(&ctx.time_ms.to_le_bytes())
    }
    fn access(&self, op: &[u8]) -> Access {
        Access::Keys {
            reads: vec![],
            writes: vec![Bytes::copy_from_slice(op)],
        }
    }
    fn snapshot(&self) -> Bytes {
        Bytes::new()
    }
    fn restore(&self, s: &[u8]) -> Result<(), String> {
        s.is_empty().then_some(()).ok_or_else(|| "not empty".into())
    }
}

/// Batch `i` (from 0) at time `t`: four requests of four clients on four keys.
fn timed(i: u64, t: u64) -> Arc<Batch> {
    let requests = (0..4u8)
        .map(|k| req(u64::from(k), i + 1, Bytes::from(vec![k])))
        .collect();
    Arc::new(Batch::new(requests, t))
}

/// (position, client, time the service was given), sorted.
fn times(e: &mut dyn Executor) -> Vec<(u64, u64, u64)> {
    e.checkpoint(); // a barrier: everything submitted has run
    let mut out: Vec<ExecResult> = Vec::new();
    e.drain_results(&mut out);
    let mut v: Vec<_> = out
        .iter()
        .map(|r| {
            let t = u64::from_le_bytes(r.result[..].try_into().expect("8 bytes"));
            (r.delivered_at.0, r.client.0, t)
        })
        .collect();
    v.sort();
    v
}

const TIMES: [u64; 6] = [1_000, 400, 2_500, 0, 2_499, 3_000];
const AGREED: [u64; 6] = [1_000, 1_000, 2_500, 2_500, 2_500, 3_000];

fn expected(from: usize) -> Vec<(u64, u64, u64)> {
    (from..TIMES.len())
        .flat_map(|i| (0..4).map(move |c| (i as u64, c, AGREED[i])))
        .collect()
}

#[test]
fn the_agreed_time_is_the_running_maximum_and_equal_in_both_executors() {
    let mut seq = SequentialExecutor::new(Arc::new(TimeEcho), 16);
    let mut par = ParallelExecutor::new(Arc::new(TimeEcho), 4, 64, 16);
    for (i, t) in TIMES.iter().enumerate() {
        seq.submit(Seq(i as u64), timed(i as u64, *t));
        par.submit(Seq(i as u64), timed(i as u64, *t));
    }
    let s = times(&mut seq);
    assert_eq!(s, expected(0));
    assert_eq!(times(&mut par), s);
    assert_eq!(seq.state_digest(), par.state_digest());
    // A read-only op sees the last agreed time too.
    assert_eq!(seq.client_table().agreed_time(), 3_000);
}

#[test]
fn the_agreed_time_survives_a_checkpoint_and_restore() {
    for parallel in [false, true] {
        let make = || -> Box<dyn Executor> {
            if parallel {
                Box::new(ParallelExecutor::new(Arc::new(TimeEcho), 4, 64, 16))
            } else {
                Box::new(SequentialExecutor::new(Arc::new(TimeEcho), 16))
            }
        };
        let mut a = make();
        for (i, t) in TIMES.iter().enumerate().take(3) {
            a.submit(Seq(i as u64), timed(i as u64, *t));
        }
        let cp = a.checkpoint();
        let mut b = make();
        let digest = b.restore(cp.next_seq, &cp.snapshot).expect("restores");
        assert_eq!(digest, cp.state_digest);
        let mut drained = Vec::new();
        a.drain_results(&mut drained);
        for (i, t) in TIMES.iter().enumerate().skip(3) {
            a.submit(Seq(i as u64), timed(i as u64, *t));
            b.submit(Seq(i as u64), timed(i as u64, *t));
        }
        // Batches 3 and 4 carry times below 2_500: the restored executor
        // must still give 2_500, as the one that never stopped does.
        assert_eq!(times(&mut *b), expected(3), "parallel: {parallel}");
        assert_eq!(times(&mut *a), expected(3), "parallel: {parallel}");
        assert_eq!(a.state_digest(), b.state_digest());
    }
}

/// The time is part of the state digest: two replicas that agreed on
/// different times do not certify the same checkpoint (even when nothing
/// else differs: batches without requests, so equal tables and replies).
#[test]
fn the_agreed_time_is_covered_by_the_state_digest() {
    let mut a = SequentialExecutor::new(Arc::new(TimeEcho), 16);
    let mut b = SequentialExecutor::new(Arc::new(TimeEcho), 16);
    a.submit(Seq(0), Arc::new(Batch::new(vec![], 1_000)));
    b.submit(Seq(0), Arc::new(Batch::new(vec![], 1_001)));
    assert_ne!(a.state_digest(), b.state_digest());
    assert_ne!(a.checkpoint().snapshot, b.checkpoint().snapshot);
}
