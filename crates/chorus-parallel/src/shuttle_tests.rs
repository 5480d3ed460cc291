//! The scheduler under shuttle's randomised and PCT schedulers: thousands of
//! thread interleavings of the front, the workers and the service. In every
//! one, conflicting requests must never overlap (the service below checks it
//! at run time), nothing may deadlock, and results, snapshot and digest must
//! equal sequential execution of the same delivery order.

use crate::sync::Mutex;
use crate::ParallelExecutor;
use bytes::Bytes;
use chorus_core::{Authenticator, Batch, ClientId, Request, RequestSeq, Seq};
use chorus_exec::{Access, ExecContext, ExecResult, Executor, SequentialExecutor, Service};
use shuttle::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const KEYS: usize = 3;

/// Counters `0..KEYS`. op [0, k]: read k; [1, k]: increment k, reply the new
/// value; [2]: touch everything, reply the sum. Each call registers what it
/// touches and panics if a conflicting call is running at the same time.
struct Checked {
    values: Vec<AtomicU64>,
    /// Per key: (running readers, running writers); plus `everything` running.
    busy: Mutex<(Vec<(u32, u32)>, u32)>,
}

impl Checked {
    fn new() -> Checked {
        Checked {
            values: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
            busy: Mutex::new((vec![(0, 0); KEYS], 0)),
        }
    }

    fn enter(&self, op: &[u8], delta: i32) {
        let mut b = self.busy.lock().unwrap();
        let (keys, all) = &mut *b;
        let clash = match op {
            [0, k] => *all > 0 || keys[*k as usize].1 > 0,
            [1, k] => *all > 0 || keys[*k as usize] != (0, 0),
            [2] => *all > 0 || keys.iter().any(|&k| k != (0, 0)),
            _ => false,
        };
        assert!(delta < 0 || !clash, "conflicting operations overlap: {op:?}");
        let add = |x: &mut u32| *x = x.checked_add_signed(delta).unwrap();
        match op {
            [0, k] => add(&mut keys[*k as usize].0),
            [1, k] => add(&mut keys[*k as usize].1),
            [2] => add(all),
            _ => {}
        }
    }
}

impl Service for Checked {
    fn execute(&self, op: &[u8], _ctx: &ExecContext) -> Bytes {
        self.enter(op, 1);
        shuttle::thread::yield_now();
        let v = match op {
            [0, k] => self.values[*k as usize].load(Ordering::SeqCst),
            [1, k] => {
                // A split read-modify-write: overlapping writers would lose updates.
                let v = self.values[*k as usize].load(Ordering::SeqCst) + 1;
                shuttle::thread::yield_now();
                self.values[*k as usize].store(v, Ordering::SeqCst);
                v
            }
            [2] => self.values.iter().map(|v| v.load(Ordering::SeqCst)).sum(),
            _ => u64::MAX,
        };
        self.enter(op, -1);
        Bytes::copy_from_slice(&v.to_le_bytes())
    }
    fn access(&self, op: &[u8]) -> Access {
        let key = |k: u8| vec![Bytes::from(vec![k])];
        match op {
            [0, k] => Access::Keys {
                reads: key(*k),
                writes: vec![],
            },
            [1, k] => Access::Keys {
                reads: vec![],
                writes: key(*k),
            },
            [2] => Access::Everything,
            _ => Access::Keys {
                reads: vec![],
                writes: vec![],
            },
        }
    }
    fn is_read_only(&self, op: &[u8]) -> bool {
        matches!(op, [0, _])
    }
    fn snapshot(&self) -> Bytes {
        Bytes::from(
            self.values
                .iter()
                .flat_map(|v| v.load(Ordering::SeqCst).to_le_bytes())
                .collect::<Vec<_>>(),
        )
    }
    fn restore(&self, s: &[u8]) -> Result<(), String> {
        if s.len() != KEYS * 8 {
            return Err("bad snapshot".into());
        }
        for (v, c) in self.values.iter().zip(s.chunks(8)) {
            v.store(u64::from_le_bytes(c.try_into().unwrap()), Ordering::SeqCst);
        }
        Ok(())
    }
}

fn req(client: u64, seq: u64, op: &[u8]) -> Request {
    Request {
        memo: Default::default(),
        client: ClientId(client),
        seq: RequestSeq(seq),
        flags: 0,
        op: Bytes::copy_from_slice(op),
        auth: Authenticator::Macs(Default::default()),
    }
}

/// Conflicts on key 0, a reader group, a barrier, duplicates of requests that
/// may still be running, a rejection (window 4) and a no-op batch.
fn workload() -> Vec<Arc<Batch>> {
    let b = |r: Vec<Request>| {
        Arc::new(Batch {
            requests: r,
            time_ms: 0,
        })
    };
    vec![
        b(vec![
            req(1, 1, &[1, 0]),
            req(2, 1, &[1, 0]),
            req(3, 1, &[1, 1]),
            req(1, 1, &[1, 0]),
        ]),
        b(vec![
            req(1, 2, &[0, 0]),
            req(2, 2, &[0, 0]),
            req(3, 2, &[1, 0]),
            req(2, 9, &[1, 2]),
            req(3, 0, &[1, 1]),
        ]),
        b(vec![]),
        b(vec![
            req(1, 3, &[2]),
            req(3, 1, &[1, 1]),
            req(2, 3, &[1, 2]),
            req(2, 4, &[0, 1]),
        ]),
    ]
}

fn run(
    e: &mut dyn Executor,
    batches: &[Arc<Batch>],
) -> (Vec<ExecResult>, Vec<Bytes>, chorus_exec::ExecCheckpoint) {
    let mut results = Vec::new();
    let mut reads = Vec::new();
    for (i, b) in batches.iter().enumerate() {
        e.submit(Seq(i as u64), b.clone());
        if i == 1 {
            // Fast-path reads see everything submitted so far.
            reads.push(e.execute_read_only(&[0, 0]).unwrap());
            e.drain_results(&mut results);
            reads.push(e.checkpoint().snapshot);
        }
    }
    let cp = e.checkpoint();
    e.drain_results(&mut results);
    results.sort();
    (results, reads, cp)
}

fn check_against_sequential(workers: usize, capacity: usize) {
    let batches = workload();
    let mut seq = SequentialExecutor::new(Arc::new(Checked::new()), 4);
    let expected = run(&mut seq, &batches);
    let mut par = ParallelExecutor::new(Arc::new(Checked::new()), workers, capacity, 4);
    let got = run(&mut par, &batches);
    assert_eq!(got, expected);
    assert!(
        expected.0.iter().any(|r| r.duplicate),
        "the workload has duplicates"
    );
    assert!(
        expected.0.iter().any(|r| r.is_rejected()),
        "the workload has a rejection"
    );
}

#[test]
fn shuttle_random_schedules_match_sequential() {
    shuttle::check_random(|| check_against_sequential(3, 4), 1500);
}

#[test]
fn shuttle_pct_schedules_match_sequential() {
    shuttle::check_pct(|| check_against_sequential(2, 3), 1000, 3);
}

#[test]
fn shuttle_capacity_one_does_not_deadlock() {
    // Capacity 1: every insert and every duplicate waiting for its original
    // goes through the back-pressure gate.
    shuttle::check_random(|| check_against_sequential(2, 1), 500);
}

#[test]
fn shuttle_drop_while_busy_does_not_hang() {
    shuttle::check_random(
        || {
            let mut par = ParallelExecutor::new(Arc::new(Checked::new()), 2, 8, 4);
            for (i, b) in workload().into_iter().enumerate() {
                par.submit(Seq(i as u64), b);
            }
            drop(par);
        },
        500,
    );
}
