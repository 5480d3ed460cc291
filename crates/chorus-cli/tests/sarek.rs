//! SAREK re-prediction on real processes (issue 12, SAREK §IV-D): a 4-replica
//! `sarek` cluster with 4 partitions runs `kv-mispredicting`, whose `PutAll`
//! declares only its first key. A two-partition `PutAll` with the lower
//! partition first is suspended at execution on every replica, re-predicted
//! (2f+1 signed proposals, ordered in the other partition) and then
//! executed once: both keys are written. One with the higher partition
//! first cannot be re-predicted (§IV-D 2) and is answered with the error.
//! All replicas end with the same state.

mod common;

use bytes::Bytes;
use chorus_apps::kv_op::{KvOp, KvReply};
use chorus_core::OrderingMode;
use chorus_exec::partitioned::{partition_of_key, MISPREDICTED_BELOW_RESULT};
use common::{rt, ServiceSpec, TestCluster};
use std::time::Duration;

const K: u16 = 4;

/// Two keys, the first in a lower partition than the second.
fn key_pair(i: u64) -> (Bytes, Bytes) {
    let keys = (0..).map(|j: u64| Bytes::from(format!("sarek-{i}-{j}")));
    let mut first = None;
    for k in keys {
        let p = partition_of_key(&k, K);
        match &first {
            None if p.0 + 1 < K => first = Some((k, p)),
            Some((a, pa)) if p > *pa => return (a.clone(), k),
            _ => {}
        }
    }
    unreachable!()
}

#[test]
fn mispredicted_requests_are_repredicted_and_executed_once_on_every_replica() {
    let c = TestCluster::new_service_in_range(
        14_000,
        10,
        OrderingMode::Sarek,
        K as u32,
        2,
        ServiceSpec {
            service: "kv-mispredicting",
            ..ServiceSpec::default()
        },
        |_| {},
    );
    c.wait_up(&[0, 1, 2, 3], Duration::from_secs(20));
    let rt = rt();
    rt.block_on(async {
        let client = c.client(0).await;
        for i in 0..20u64 {
            let (low, high) = key_pair(i);
            let v = Bytes::from(format!("v{i}"));
            // Lower partition first: predicted {low}, re-predicted {low, high}.
            let op = KvOp::put_all(vec![(low.clone(), v.clone()), (high.clone(), v.clone())]);
            let reply = client.invoke(op).await.expect("re-predicted put_all");
            // The old values: nothing, since every pair is fresh.
            let KvReply::Entries { entries, .. } = KvReply::decode(&reply).expect("a kv reply") else {
                panic!("put_all {i} answered {reply:?}");
            };
            assert!(entries.iter().all(|(_, old)| old.is_empty()), "{entries:?}");
            for k in [&low, &high] {
                let got = client.invoke(KvOp::get(k.clone())).await.expect("get");
                assert_eq!(
                    KvReply::decode(&got).unwrap(),
                    KvReply::Value(Some(v.clone())),
                    "key {k:?}"
                );
            }
            // Higher partition first: a re-prediction may only add higher
            // partitions, so it is executed as the error, writing nothing.
            let w = Bytes::from(format!("w{i}"));
            let op = KvOp::put_all(vec![(high.clone(), w.clone()), (low.clone(), w)]);
            let reply = client.invoke(op).await.expect("an answer");
            assert_eq!(&reply[..], MISPREDICTED_BELOW_RESULT);
            let got = client.invoke(KvOp::get(high.clone())).await.expect("get");
            assert_eq!(
                KvReply::decode(&got).unwrap(),
                KvReply::Value(Some(v)),
                "unchanged"
            );
        }
    });
    c.wait_converged(Duration::from_secs(60));
    // Each partition's consensus ran on its pillar's thread (SAREK §IV, one
    // PBFT leader per partition; COP §4), cross-partition requests and
    // re-predictions reaching the other partitions through the hub.
    assert!(
        c.log(0).contains("lanes on their pillars"),
        "{}",
        common::tail(&c.log(0), 20)
    );
    // `chorus status`: every partition's executor schedule, drained.
    let s = c.status(2).expect("replica 2 up");
    let parts = s["partitions"].as_array().expect("per-partition executor detail");
    assert_eq!(parts.len(), K as usize, "{s}");
    assert!(
        parts.iter().all(|p| p["head"] == "idle" && p["pending"] == 0),
        "{s}"
    );
}
