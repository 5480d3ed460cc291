//! Issue 17 in SAREK: no global order, so each stream has its own agreed
//! time, the running maximum of its batches' times in slot order; it does
//! not depend on how the streams interleave, and it travels in the snapshot.

use super::*;
use chorus_core::{Cell, LaneId, Slot};

/// `Kv`'s ops and access sets; replies with the agreed time it was given.
#[derive(Default)]
struct TimeKv(Kv);

impl Service for TimeKv {
    fn execute(&self, op: &[u8], ctx: &ExecContext) -> Bytes {
        self.0.execute(op, ctx);
        Bytes::copy_from_slice(&ctx.time_ms.to_le_bytes())
    }
    fn access(&self, op: &[u8]) -> Access {
        self.0.access(op)
    }
    fn snapshot(&self) -> Bytes {
        self.0.snapshot()
    }
    fn restore(&self, s: &[u8]) -> Result<(), String> {
        let mut m = self.0 .0.lock().unwrap();
        m.clear();
        for c in s.chunks(9) {
            m.insert(c[0], u64::from_le_bytes(c[1..].try_into().map_err(|_| "bad")?));
        }
        Ok(())
    }
}

const K: u16 = 2;
const PER_CUT: u64 = 2;
/// Per stream, its batches' proposer times; stream 1's slot 2 is below
/// what its slot 1 agreed, across the first cut.
const TIMES: [[u64; 4]; 2] = [[1_000, 500, 2_000, 1_500], [300, 4_000, 0, 100]];
const AGREED: [[u64; 4]; 2] = [[1_000, 1_000, 2_000, 2_000], [300, 4_000, 4_000, 4_000]];

/// Stream `p`, slot `s`: one request of its own client on a key of `p`.
fn cell(p: usize, s: usize) -> (Cell, Arc<Batch>) {
    let mut r = (*req(10 * p as u64 + 1, &[p as u16], K, s as u8)).clone();
    r.seq = RequestSeq(s as u64 + 1);
    let c = Cell {
        lane: LaneId(p as u32),
        slot: Slot(s as u64),
    };
    (c, Arc::new(Batch::new(vec![r], TIMES[p][s])))
}

/// (position, agreed time) of every result, sorted.
fn times(e: &mut SarekExecutor) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    e.drain_results(&mut v);
    let mut t: Vec<_> = v
        .iter()
        .map(|r| {
            (
                r.delivered_at.0,
                u64::from_le_bytes(r.result[..].try_into().unwrap()),
            )
        })
        .collect();
    t.sort();
    t
}

fn expected(from_slot: usize) -> Vec<(u64, u64)> {
    let mut v: Vec<_> = (0..K as usize)
        .flat_map(|p| (from_slot..4).map(move |s| ((s * K as usize + p) as u64, AGREED[p][s])))
        .collect();
    v.sort();
    v
}

fn exec() -> SarekExecutor {
    SarekExecutor::new(Arc::new(TimeKv::default()), K, PER_CUT, 1024)
}

#[test]
fn each_stream_agrees_on_its_running_maximum_whatever_the_interleaving() {
    // Stream 0 first, stream 1 first, and alternating.
    let orders: [Vec<(usize, usize)>; 3] = [
        (0..2).flat_map(|p| (0..4).map(move |s| (p, s))).collect(),
        (0..2).rev().flat_map(|p| (0..4).map(move |s| (p, s))).collect(),
        (0..4).flat_map(|s| (0..2).map(move |p| (p, s))).collect(),
    ];
    for order in orders {
        let mut e = exec();
        for (p, s) in order {
            let (c, b) = cell(p, s);
            assert!(e.submit_stream(c, b));
        }
        assert_eq!(times(&mut e), expected(0));
    }
}

#[test]
fn a_restored_sarek_executor_continues_with_the_streams_agreed_times() {
    let mut b = exec();
    for s in 0..PER_CUT as usize {
        for p in 0..K as usize {
            let (c, batch) = cell(p, s);
            b.submit_stream(c, batch);
        }
    }
    let cp = b.checkpoint();
    assert_eq!(cp.next_seq, Seq(PER_CUT * u64::from(K)));
    let mut c = exec();
    assert_eq!(
        c.install(cp.next_seq, &cp.snapshot, cp.state_digest),
        Ok(cp.state_digest)
    );
    for s in PER_CUT as usize..4 {
        for p in 0..K as usize {
            let (cl, batch) = cell(p, s);
            assert!(c.submit_stream(cl, batch));
        }
    }
    assert_eq!(times(&mut c), expected(PER_CUT as usize));
}
