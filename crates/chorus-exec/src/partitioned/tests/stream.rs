//! The partitioned executor behind the `Executor` contract, fed by
//! per-partition streams (`SarekExecutor`): checkpoint cuts equal on every
//! interleaving of the streams, restore-and-continue equals the original,
//! re-ordered copies executed once, and the audit catching the SYNC-skipping
//! fault.

use super::*;
use chorus_core::Cell;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `Kv` with a working `restore`, for state transfer.
#[derive(Default)]
struct RKv(Kv);

impl Service for RKv {
    fn execute(&self, op: &[u8], ctx: &ExecContext) -> Bytes {
        self.0.execute(op, ctx)
    }
    fn access(&self, op: &[u8]) -> Access {
        self.0.access(op)
    }
    fn snapshot(&self) -> Bytes {
        self.0.snapshot()
    }
    fn restore(&self, s: &[u8]) -> Result<(), String> {
        self.0.restore_registers(s)
    }
}

const K: u16 = 3;
const PER_CUT: u64 = 2;

/// Per partition, the batches of its slots: every request placed once in
/// each predicted partition at a random slot; streams padded with empty
/// batches to a whole number of cuts.
fn streams(seed: u64, n: usize) -> Vec<Vec<Arc<Batch>>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut per: Vec<Vec<Request>> = vec![Vec::new(); K as usize];
    for i in 0..n {
        let mut parts: Vec<u16> = (0..K).filter(|_| rng.gen_bool(0.4)).collect();
        if parts.is_empty() {
            parts.push(rng.gen_range(0..K));
        }
        let mut r = (*req(i as u64 + 1, &parts, K, i as u8)).clone();
        r.seq = RequestSeq(1 + (i % 3) as u64);
        r.client = ClientId(i as u64 / 3);
        for p in &parts {
            let at = rng.gen_range(0..=per[*p as usize].len());
            per[*p as usize].insert(at, r.clone());
        }
    }
    // A recovered leader re-ordering a request its partition already has.
    if let Some(r) = per[0].first().cloned() {
        per[0].push(r);
    }
    let mut out: Vec<Vec<Arc<Batch>>> = per
        .into_iter()
        .map(|reqs| {
            reqs.chunks(2)
                .map(|c| {
                    Arc::new(Batch {
                        requests: c.to_vec(),
                        time_ms: 0,
                    })
                })
                .collect()
        })
        .collect();
    let slots = out.iter().map(Vec::len).max().unwrap_or(0) as u64;
    let slots = slots.div_ceil(PER_CUT).max(1) * PER_CUT;
    for s in &mut out {
        s.resize(slots as usize, Arc::new(Batch::noop()));
    }
    out
}

fn cells(streams: &[Vec<Arc<Batch>>], order_seed: u64) -> Vec<(Cell, Arc<Batch>)> {
    // A random interleaving that keeps each stream in order.
    let mut rng = ChaCha8Rng::seed_from_u64(order_seed);
    let mut tags: Vec<usize> = streams
        .iter()
        .enumerate()
        .flat_map(|(p, s)| std::iter::repeat_n(p, s.len()))
        .collect();
    tags.shuffle(&mut rng);
    let mut next = vec![0usize; streams.len()];
    tags.into_iter()
        .map(|p| {
            let slot = next[p];
            next[p] += 1;
            let cell = Cell {
                lane: chorus_core::LaneId(p as u32),
                slot: chorus_core::Slot(slot as u64),
            };
            (cell, streams[p][slot].clone())
        })
        .collect()
}

fn exec() -> SarekExecutor {
    SarekExecutor::new(Arc::new(RKv::default()), K, PER_CUT, 1024).recording()
}

fn results(e: &mut SarekExecutor) -> Vec<ExecResult> {
    let mut v = Vec::new();
    e.drain_results(&mut v);
    v.sort();
    v
}

#[test]
fn sarek_executor_cuts_and_results_do_not_depend_on_stream_interleaving() {
    for seed in 0..40 {
        let s = streams(seed, 14);
        let mut runs = Vec::new();
        for order in 0..3 {
            let mut e = exec();
            // Every cut's state, as the ordering side would ask for it.
            let mut cuts = vec![e.checkpoint().state_digest];
            for (cell, b) in cells(&s, seed * 10 + order) {
                assert!(e.submit_stream(cell, b));
                if e.next_seq().0 / u64::from(K) / PER_CUT >= cuts.len() as u64 {
                    cuts.push(e.checkpoint().state_digest);
                }
            }
            assert!(cuts.len() > 2, "several cuts");
            assert_eq!(
                e.audit(),
                Some(vec![]),
                "seed {seed}: the run is serially equivalent"
            );
            assert_eq!(e.pending(), vec![0; K as usize], "seed {seed}: everything ran");
            assert!(e.stats().duplicate_copies >= 1, "the re-ordered copy was dropped");
            let cp = e.checkpoint();
            runs.push((cp.next_seq, cuts, results(&mut e)));
        }
        assert!(runs[0].0 > Seq(0));
        assert!(
            runs.windows(2).all(|w| w[0] == w[1]),
            "seed {seed}: replicas diverge"
        );
        let fresh = runs[0].2.iter().filter(|r| !r.duplicate).count();
        let keys: BTreeSet<_> = runs[0].2.iter().map(|r| (r.client, r.request_seq)).collect();
        assert_eq!(fresh, keys.len(), "seed {seed}: each (client, seq) executed once");
    }
}

use std::collections::BTreeSet;

/// State transfer at a cut, then the rest of the streams: the same state
/// as the replica that executed everything (waiting cross-border
/// sub-requests below the cut travel in the snapshot).
#[test]
fn sarek_executor_restored_at_a_cut_continues_like_the_original() {
    let mut straddled = 0;
    for seed in 0..40 {
        let s = streams(seed, 14);
        let all = cells(&s, seed);
        let mut a = exec();
        for (cell, b) in all.clone() {
            a.submit_stream(cell, b);
        }
        let mut b = exec();
        let first_cut = PER_CUT;
        for (cell, batch) in all.iter().filter(|(c, _)| c.slot.0 < first_cut) {
            b.submit_stream(*cell, batch.clone());
        }
        let cp = b.checkpoint();
        assert_eq!(cp.next_seq, Seq(first_cut * u64::from(K)));
        if b.pending().iter().sum::<usize>() > 0 {
            straddled += 1;
        }
        let mut c = exec();
        let wrong = Digest::of(b"not it");
        assert!(
            c.install(cp.next_seq, &cp.snapshot, wrong).is_err(),
            "verified before installed"
        );
        assert_eq!(
            c.install(cp.next_seq, &cp.snapshot, cp.state_digest),
            Ok(cp.state_digest)
        );
        for (cell, batch) in all.iter().filter(|(c, _)| c.slot.0 >= first_cut) {
            assert!(c.submit_stream(*cell, batch.clone()));
        }
        assert_eq!(c.checkpoint(), a.checkpoint(), "seed {seed}");
    }
    assert!(straddled > 0, "some snapshot carried waiting sub-requests");
}

#[test]
fn sarek_executor_refuses_gaps_and_foreign_streams() {
    let mut e = exec();
    let b = Arc::new(Batch::noop());
    let cell = |l, s| Cell {
        lane: chorus_core::LaneId(l),
        slot: chorus_core::Slot(s),
    };
    assert!(!e.submit_stream(cell(0, 1), b.clone()), "gap");
    assert!(!e.submit_stream(cell(7, 0), b.clone()), "no such partition");
    assert!(e.submit_stream(cell(0, 0), b));
    assert_eq!(e.stats().out_of_order, 2);
}

/// The checker bites: with the SYNC wait skipped, some run's audit
/// reports the EXEC running ahead of its partitions.
#[test]
fn sarek_executor_audit_catches_the_skipped_sync_wait() {
    let caught = (0..20).any(|seed| {
        let s = streams(seed, 14);
        let mut e = exec();
        e.set_skip_sync_wait(true);
        for (cell, b) in cells(&s, seed) {
            e.submit_stream(cell, b);
        }
        e.audit().is_some_and(|v| !v.is_empty())
    });
    assert!(caught);
}

/// Partition `p`'s slot `s`.
fn at(p: u32, s: u64) -> Cell {
    Cell {
        lane: chorus_core::LaneId(p),
        slot: chorus_core::Slot(s),
    }
}

/// A cross-partition request ordered in one partition only (the other's
/// copy was lost: a crash before the hand-on, a full pool) heads that
/// partition's schedule for ever unless its copy is ordered again: the
/// executor reports it once it lacked the copy at two calls in a row (a copy
/// in transit arrives in between), names only the missing partition, and
/// stops once the copy arrived and the request ran.
#[test]
fn a_request_lacking_another_partitions_copy_is_reported_until_it_arrives() {
    let mut e = exec();
    let r = req(1, &[0, 2], K, 7);
    assert!(e.submit_stream(at(0, 0), batch_of(vec![(*r).clone()])));
    assert!(e.missing_copies().is_empty(), "in transit at the first look");
    let report = e.missing_copies();
    assert_eq!(report.len(), 1, "{report:?}");
    assert_eq!(report[0].0.digest(), r.digest());
    assert_eq!(
        report[0].1,
        vec![chorus_core::LaneId(2)],
        "only partition 2 lacks it"
    );
    assert!(
        results(&mut e).is_empty(),
        "it cannot run without partition 2's copy"
    );
    // Partition 2 orders it (handed on again): it runs, nothing is missing.
    assert!(e.submit_stream(at(2, 0), batch_of(vec![(*r).clone()])));
    assert_eq!(results(&mut e).len(), 1);
    assert!(e.missing_copies().is_empty());
    assert!(e.missing_copies().is_empty());
    // A request of one partition never lacks a copy.
    let single = req(2, &[1], K, 8);
    assert!(e.submit_stream(at(1, 0), batch_of(vec![(*single).clone()])));
    assert!(e.missing_copies().is_empty());
    assert!(e.missing_copies().is_empty());
}

/// A copy the executor holds back above the next cut (its stream is ahead
/// of the others) is there already: not reported as missing. Without the
/// held-back check partition 1 would be named every interval.
#[test]
fn a_copy_held_back_above_the_cut_is_not_missing() {
    let mut e = exec();
    let r = req(1, &[0, 1], K, 7);
    assert!(e.submit_stream(at(0, 0), batch_of(vec![(*r).clone()])));
    assert!(e.submit_stream(at(1, 0), batch_of(vec![])));
    assert!(e.submit_stream(at(1, 1), batch_of(vec![])));
    // Slot 2 is the next cut (2 slots per cut): held until every stream
    // reached it, and stream 2 has delivered nothing.
    assert!(e.submit_stream(at(1, 2), batch_of(vec![(*r).clone()])));
    assert!(e.missing_copies().is_empty());
    assert!(e.missing_copies().is_empty());
    assert!(results(&mut e).is_empty());
}
