//! Parallel execution is indistinguishable from sequential execution of the
//! same delivery order (CBASE §4.1 safety): same results (as multisets; the
//! order across non-conflicting requests is free), same replies to
//! duplicates and rejections, same checkpoints (snapshot and state digest),
//! same fast-path reads — over random workloads with random conflict
//! patterns, random executor sizes, and a restore in the middle.

mod common;

use bytes::Bytes;
use chorus_apps::{KvOp, KvService, SleepService};
use chorus_core::{Request, Seq};
use chorus_exec::{Executor, SequentialExecutor, Service};
use chorus_parallel::ParallelExecutor;
use common::{batch, drain_sorted, req, Guarded};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How a generated request picks its seq.
#[derive(Clone, Debug)]
enum SeqChoice {
    Next,
    /// Re-send one of the client's earlier seqs (a duplicate).
    Repeat(usize),
    /// Skip ahead (out-of-order, possibly beyond the window → rejected).
    Skip(u64),
}

#[derive(Clone, Debug)]
struct Gen {
    client: u64,
    seq: SeqChoice,
    op: Bytes,
}

fn key(k: u8) -> Bytes {
    Bytes::from(format!("k{k}"))
}

fn kv_op() -> impl Strategy<Value = Bytes> {
    let k = 0u8..5;
    prop_oneof![
        4 => k.clone().prop_map(|k| KvOp::Get { key: key(k) }.encode()),
        4 => (k.clone(), any::<u8>()).prop_map(|(k, v)| KvOp::Put { key: key(k), value: Bytes::from(vec![v]) }.encode()),
        1 => k.clone().prop_map(|k| KvOp::Delete { key: key(k) }.encode()),
        1 => (k.clone(), 0u32..4).prop_map(|(k, l)| KvOp::Scan { start: key(k), limit: l }.encode()),
        2 => k.clone().prop_map(|k| KvOp::Read { key: key(k) }.encode()),
        2 => (k.clone(), any::<u8>()).prop_map(|(k, v)| KvOp::Update { key: key(k), value: Bytes::from(vec![v]) }.encode()),
        2 => (k.clone(), any::<u8>()).prop_map(|(k, v)| KvOp::Insert { key: key(k), value: Bytes::from(vec![v]) }.encode()),
        3 => (k, any::<u8>()).prop_map(|(k, v)| KvOp::ReadModifyWrite { key: key(k), value: Bytes::from(vec![v]) }.encode()),
        1 => proptest::collection::vec(any::<u8>(), 0..4).prop_map(Bytes::from),
    ]
}

fn sleep_op() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        9 => (0u32..8).prop_map(SleepService::op),
        1 => Just(Bytes::from_static(b"?")),
    ]
}

fn gen(op: impl Strategy<Value = Bytes>) -> impl Strategy<Value = Gen> {
    let seq = prop_oneof![
        8 => Just(SeqChoice::Next),
        2 => any::<usize>().prop_map(SeqChoice::Repeat),
        1 => (2u64..12).prop_map(SeqChoice::Skip),
    ];
    (1u64..5, seq, op).prop_map(|(client, seq, op)| Gen { client, seq, op })
}

#[derive(Clone, Debug)]
struct Case {
    batches: Vec<Vec<Gen>>,
    workers: usize,
    capacity: usize,
    max_inflight: u32,
    /// After this batch: checkpoint both and continue the parallel side from a
    /// fresh executor restored from the sequential checkpoint.
    restore_after: Option<usize>,
}

fn case(op: impl Strategy<Value = Bytes>) -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec(proptest::collection::vec(gen(op), 0..10), 1..10),
        1usize..6,
        1usize..12,
        2u32..10,
        proptest::option::of(0usize..10),
    )
        .prop_map(|(batches, workers, capacity, max_inflight, restore_after)| Case {
            batches,
            workers,
            capacity,
            max_inflight,
            restore_after,
        })
}

/// Turn seq choices into concrete request seqs (per client history).
fn build(batches: &[Vec<Gen>]) -> Vec<Vec<Request>> {
    let mut next: BTreeMap<u64, u64> = BTreeMap::new();
    let mut used: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    batches
        .iter()
        .map(|b| {
            b.iter()
                .map(|g| {
                    let n = next.entry(g.client).or_insert(1);
                    let hist = used.entry(g.client).or_default();
                    let seq = match g.seq {
                        SeqChoice::Repeat(i) if !hist.is_empty() => hist[i % hist.len()],
                        SeqChoice::Skip(d) => *n + d,
                        _ => {
                            *n += 1;
                            *n - 1
                        }
                    };
                    hist.push(seq);
                    req(g.client, seq, g.op.clone())
                })
                .collect()
        })
        .collect()
}

fn check<S: Service>(c: &Case, make: impl Fn() -> S, probe: Option<Bytes>) -> Result<(), TestCaseError> {
    let batches = build(&c.batches);
    let mut seq = SequentialExecutor::new(Arc::new(make()), c.max_inflight);
    let mut par: Box<dyn Executor> = Box::new(ParallelExecutor::new(
        Arc::new(Guarded::new(make())),
        c.workers,
        c.capacity,
        c.max_inflight,
    ));
    let mut all_seq = Vec::new();
    let mut all_par = Vec::new();
    for (i, b) in batches.into_iter().enumerate() {
        let b = batch(b);
        seq.submit(Seq(i as u64), b.clone());
        par.submit(Seq(i as u64), b);
        if let Some(p) = &probe {
            prop_assert_eq!(seq.execute_read_only(p), par.execute_read_only(p));
        }
        if c.restore_after == Some(i) {
            let cs = seq.checkpoint();
            prop_assert_eq!(&par.checkpoint(), &cs);
            all_par.extend(drain_sorted(&mut *par));
            let mut fresh = ParallelExecutor::new(
                Arc::new(Guarded::new(make())),
                c.workers,
                c.capacity,
                c.max_inflight,
            );
            prop_assert_eq!(fresh.restore(cs.next_seq, &cs.snapshot), Ok(cs.state_digest));
            par = Box::new(fresh);
        }
        all_seq.extend(drain_sorted(&mut seq));
        all_par.extend(drain_sorted(&mut *par));
    }
    prop_assert_eq!(par.checkpoint(), seq.checkpoint());
    prop_assert_eq!(par.state_digest(), seq.state_digest());
    all_par.extend(drain_sorted(&mut *par));
    all_seq.sort();
    all_par.sort();
    prop_assert_eq!(all_par, all_seq);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn kv_parallel_equals_sequential(c in case(kv_op())) {
        check(&c, || KvService::new(4), Some(KvOp::get(key(1))))?;
    }

    #[test]
    fn sleep_buckets_parallel_equals_sequential(c in case(sleep_op()), buckets in 0u32..4) {
        check(&c, || SleepService::new(Duration::ZERO, buckets), None)?;
    }
}
