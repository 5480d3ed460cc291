//! `sarek`: one PBFT lane per partition with preferred leader `k mod n`, a
//! request ordered once in each partition PREDICT() names, one delivery
//! stream per lane (SAREK §IV-A/B).

use super::harness::Cluster;
use super::util::params;
use crate::sarek::Predictor;
use chorus_core::{ClientId, OrderingMode, ProtocolParams, RequestSeq, View};
use std::sync::Arc;

/// Test ops name their partitions after an `@`: `"c0s3@02"` touches 0 and 2.
fn predictor() -> Predictor {
    Predictor::new(Arc::new(|op: &[u8]| {
        let at = op.iter().position(|&b| b == b'@').map_or(op.len(), |i| i + 1);
        op[at..].iter().map(|b| u16::from(b - b'0')).collect()
    }))
}

fn sarek(n: usize, k: u32, clients: usize) -> Cluster {
    sarek_returning_after(n, k, clients, 0)
}

/// `preferred_return_slots` = `return_slots` (0: never, as the other tests
/// here expect leadership to stay where a view change put it).
fn sarek_returning_after(n: usize, k: u32, clients: usize, return_slots: u64) -> Cluster {
    let p = ProtocolParams {
        leader_rotation: chorus_core::LeaderRotation::Fixed,
        preferred_return_slots: return_slots,
        ..params(OrderingMode::Sarek, k)
    };
    let mut c = Cluster::new(n, clients, p);
    for node in c.nodes.iter_mut().flatten() {
        node.set_predictor(predictor());
    }
    c
}

fn submit(c: &mut Cluster, client: usize, seq: u64, parts: &str, to: Option<&[usize]>) -> (usize, u64) {
    let req =
        c.s.request(client, seq, format!("c{client}s{seq}@{parts}").as_bytes());
    match to {
        None => c.submit_request(req),
        Some(to) => {
            for i in to {
                c.push_event(*i, crate::io::Event::Request(req.clone()));
            }
        }
    }
    (client, seq)
}

fn ordered_in(c: &Cluster, i: usize, (client, seq): (usize, u64)) -> Vec<u32> {
    let mut v = c.sexecs[i]
        .ordered_in
        .get(&(ClientId(client as u64), RequestSeq(seq)))
        .cloned()
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// SAREK §IV-B 1: a request is ordered exactly once in each predicted
/// partition and nowhere else; every lane is led by its preferred leader;
/// checkpoints become stable at cuts.
#[test]
fn sarek_orders_each_request_once_per_predicted_partition() {
    let mut c = sarek(4, 3, 3);
    let mut reqs = Vec::new();
    let parts = ["0", "1", "2", "01", "12", "012", "02"];
    for s in 1..=14u64 {
        for cl in 0..3 {
            let p = parts[(s as usize + cl) % parts.len()];
            reqs.push((submit(&mut c, cl, s, p, None), p));
        }
        c.run_for(2);
    }
    let keys: Vec<(usize, u64)> = reqs.iter().map(|(k, _)| *k).collect();
    let ok = c.run_until(20_000, |c| c.all_executed(&keys));
    if !ok {
        for i in 0..4 {
            eprintln!("{:#?}", c.replica(i).status());
        }
    }
    assert!(ok, "not every request delivered");
    c.run_for(300);
    c.check_agreement();
    for i in 0..4 {
        for (k, p) in &reqs {
            let want: Vec<u32> = p.bytes().map(|b| u32::from(b - b'0')).collect();
            assert_eq!(ordered_in(&c, i, *k), want, "replica {i}, request {k:?}");
        }
        let st = c.replica(i).status();
        assert_eq!(st.counters.view_changes, 0);
        assert!(st.stable_seq.0 > 0, "checkpoints become stable at cuts");
        assert_eq!(st.pool_len, 0, "replica {i} holds {} requests", st.pool_len);
        assert_eq!(st.counters.rejected_total(), 0, "{:?}", st.counters.rejected);
        for l in 0..3 {
            assert_eq!(
                st.lanes[l].proposer.0, l as u32,
                "partition {l} is led by {l} mod n"
            );
        }
    }
    // Replica 3 leads no partition (K = 3 < n = 4): it proposed nothing.
    assert_eq!(c.replica(3).counters().proposals, 0);
}

/// SAREK §IV: a partition whose leader crashed pauses for its own view
/// change only; the other partitions' streams keep delivering meanwhile.
/// (With one global merger, lane 0's slots would wait for lane 1's.)
#[test]
fn sarek_a_stalled_partition_does_not_stop_the_others() {
    let mut c = sarek(4, 2, 2);
    c.crash(1); // preferred leader of partition 1
    let mut p0 = Vec::new();
    let mut p1 = Vec::new();
    for s in 1..=6u64 {
        p0.push(submit(&mut c, 0, s, "0", None));
        p1.push(submit(&mut c, 1, s, "1", None));
        c.run_for(2);
    }
    // Well before the view-change timeout (400 ms).
    assert!(
        c.run_until(200, |c| c.all_executed(&p0)),
        "partition 0 delivered without partition 1"
    );
    assert!(!c.all_executed(&p1[..1]), "partition 1 has no leader yet");
    assert!(
        c.run_until(10_000, |c| c.all_executed(&p1)),
        "partition 1 recovers by its view change"
    );
    for i in [0, 2, 3] {
        let st = c.replica(i).status();
        assert_eq!(st.views[0], View(0), "partition 0 never changed view");
        assert!(st.views[1] >= View(1));
        assert_ne!(st.lanes[1].proposer.0, 1);
    }
}

/// SAREK §IV-B 1: a cross-partition request that reached only partition 0's
/// leader is still ordered by partition 1 once partition 0 ordered it (the
/// other replicas hand it to their partition-1 pools).
#[test]
fn sarek_cross_partition_request_reaching_one_leader_is_ordered_everywhere() {
    let mut c = sarek(4, 2, 1);
    let k = submit(&mut c, 0, 1, "01", Some(&[0]));
    assert!(c.run_until(5_000, |c| c.all_executed(&[k])));
    c.run_for(100);
    for i in 0..4 {
        assert_eq!(ordered_in(&c, i, k), vec![0, 1], "replica {i}");
        assert!(c.replica(i).status().counters.view_changes == 0);
    }
    assert!(c.replica(1).counters().sarek_forwarded >= 1);
}

/// SAREK §IV-A preferred leader: after r1 (preferred leader of partition 1)
/// crashed, partition 1 moved to view 1 under r2. Once r1 is back and the
/// lane decided `preferred_return_slots` slots in view 1, every replica
/// starts the planned view change to view 4 (4 ≡ 0 mod n: r1 again), which
/// blames nobody and leaves the back-off alone; r2 proposes nothing past the
/// boundary.
#[test]
fn sarek_partition_returns_to_its_preferred_leader_after_the_planned_slots() {
    let mut c = sarek_returning_after(4, 2, 2, 4);
    c.crash(1);
    let mut reqs = Vec::new();
    for s in 1..=2u64 {
        reqs.push(submit(&mut c, 1, s, "1", None));
    }
    assert!(
        c.run_until(10_000, |c| c.all_executed(&reqs)),
        "partition 1 changes view without r1"
    );
    assert_eq!(c.replica(0).status().views[1], View(1), "r2 leads view 1");
    c.restart(1);
    c.run_for(1_000);
    // Enough requests for 4 fresh slots in view 1 (batches of 1: one every 5 ms).
    for s in 3..=12u64 {
        reqs.push(submit(&mut c, 1, s, "1", None));
        c.run_for(5);
    }
    assert!(
        c.run_until(20_000, |c| c.all_executed(&reqs)),
        "every request executes across the planned return"
    );
    c.check_agreement();
    for i in 0..4 {
        let st = c.replica(i).status();
        assert_eq!(
            st.views[1],
            View(4),
            "r{i}: partition 1 is back with its preferred leader"
        );
        assert_eq!(st.lanes[1].proposer.0, 1, "r{i}");
        assert_eq!(st.views[0], View(0), "partition 0 never changed view");
    }
    let causes = &c.replica(0).status().counters.view_change_causes;
    assert_eq!(causes.get("preferred-return"), Some(&1), "{causes:?}");
}

/// SAREK §IV-D (Fig. 5): a request that mis-predicted at execution is ordered
/// in the added partition once 2f+1 replicas proposed the same
/// re-prediction, and only there, once. 2f proposals order nothing, and a
/// Byzantine replica's different proposal does not count towards them.
#[test]
fn sarek_a_reprediction_is_ordered_in_the_added_partition_after_2f_plus_1_proposals() {
    use chorus_core::RePrediction;
    let mut c = sarek(4, 3, 1);
    let req = c.s.request(0, 1, b"c0s1@0");
    c.submit_request(req.clone());
    let r = (0, 1);
    assert!(c.run_until(5_000, |c| c.all_executed(&[r])));
    let body = RePrediction {
        request: req.digest(),
        client: ClientId(0),
        seq: RequestSeq(1),
        partitions: vec![0, 2],
        added: vec![2],
    };
    let mut false_body = body.clone();
    false_body.partitions = vec![0, 1];
    false_body.added = vec![1];
    // Two correct replicas (2f) and a Byzantine one with another body.
    c.push_event(0, crate::io::Event::Mispredicted(body.clone()));
    c.push_event(1, crate::io::Event::Mispredicted(body.clone()));
    c.push_event(3, crate::io::Event::Mispredicted(false_body));
    // The certificate is filed under its own pool key, not the client's.
    let sync = |c: &Cluster, i: usize| -> Vec<u32> {
        let key = (chorus_core::REPREDICTION_CLIENT, body.pool_seq());
        c.sexecs[i].ordered_in.get(&key).cloned().unwrap_or_default()
    };
    c.run_for(2_000);
    for i in 0..4 {
        assert!(sync(&c, i).is_empty(), "replica {i}: nothing re-predicted yet");
    }
    c.push_event(2, crate::io::Event::Mispredicted(body.clone()));
    assert!(c.run_until(5_000, |c| (0..4).all(|i| sync(c, i) == vec![2])));
    c.run_for(2_000);
    for i in 0..4 {
        assert_eq!(ordered_in(&c, i, r), vec![0], "replica {i}");
        assert_eq!(sync(&c, i), vec![2], "replica {i}: ordered once, in lane 2 only");
        let st = c.replica(i).status();
        assert_eq!(st.counters.sarek_repredictions_certified, 1, "replica {i}");
        assert_eq!(
            st.pool_len, 0,
            "replica {i}: the certificate left the pool once ordered"
        );
    }
    assert_eq!(c.replica(3).status().counters.sarek_repredictions_proposed, 1);
    c.check_agreement();
}

/// SAREK §IV-C: a leader cannot order a re-prediction without a valid
/// certificate: backups refuse the pre-prepare (`bad-reprediction`), also
/// one whose certificate is valid but for another partition.
#[test]
fn sarek_backups_refuse_a_reprediction_without_a_valid_certificate() {
    use chorus_core::{
        ClusterTag, LaneId, PrePrepare, RePrediction, RePredictionCert, ReplicaId, ReplicaMsg, Slot,
    };
    let mut c = sarek(4, 3, 1);
    let tag = ClusterTag::of(&c.s.cfg);
    let body = RePrediction {
        request: chorus_core::Digest::of(b"r"),
        client: ClientId(0),
        seq: RequestSeq(1),
        partitions: vec![0, 2],
        added: vec![2],
    };
    let vote = |i: usize, b: &RePrediction| {
        let v = b.sign(&tag, ReplicaId(i as u32), &c.s.keys[i]);
        (v.replica, v.sig)
    };
    // 2f valid votes and one signed by a replica for a different body.
    let mut other = body.clone();
    other.request = chorus_core::Digest::of(b"other");
    let short = RePredictionCert {
        body: body.clone(),
        votes: vec![vote(0, &body), vote(1, &body), vote(2, &other)],
    };
    // A valid certificate, but proposed in lane 1, which it does not add.
    let valid = RePredictionCert {
        body: body.clone(),
        votes: vec![vote(0, &body), vote(1, &body), vote(2, &body)],
    };
    for (lane, cert) in [(2u32, short), (1u32, valid)] {
        let batch = chorus_core::Batch::new(vec![cert.to_request()], 0);
        // Lane `lane` is led by replica `lane` in view 0.
        let leader = lane as usize;
        let mut pp = PrePrepare {
            lane: LaneId(lane),
            view: View(0),
            slot: Slot(0),
            digest: batch.digest(),
            batch,
            sig: chorus_core::Signature([0; 64]),
        };
        let d = PrePrepare::signing_digest(pp.lane, pp.view, pp.slot, &pp.digest);
        pp.sig = c.s.keys[leader].sign_bound(&tag, chorus_core::SigKind::PrePrepare, &d);
        let to = (leader + 1) % 4;
        c.push_event(
            to,
            crate::io::Event::Message {
                from: ReplicaId(leader as u32),
                msg: ReplicaMsg::PrePrepare(pp),
            },
        );
        c.run_for(10);
        assert_eq!(
            c.replica(to).counters().rejected("bad-reprediction"),
            1,
            "lane {lane}: {:?}",
            c.replica(to).counters().rejected
        );
    }
}

/// Review finding: a Byzantine client cannot block its re-prediction by
/// getting another request with the same seq ordered in the added partition
/// first (the certificate has its own pool key, not the client's).
#[test]
fn sarek_a_client_seq_reused_in_the_added_partition_does_not_block_the_reprediction() {
    use chorus_core::RePrediction;
    let mut c = sarek(4, 3, 1);
    let req = c.s.request(0, 1, b"c0s1@0");
    let other = c.s.request(0, 1, b"c0s1-other@2");
    c.submit_request(other);
    c.submit_request(req.clone());
    assert!(c.run_until(5_000, |c| (0..4).all(|i| ordered_in(c, i, (0, 1)) == vec![0, 2])));
    let body = RePrediction {
        request: req.digest(),
        client: ClientId(0),
        seq: RequestSeq(1),
        partitions: vec![0, 2],
        added: vec![2],
    };
    for i in 0..3 {
        c.push_event(i, crate::io::Event::Mispredicted(body.clone()));
    }
    let key = (chorus_core::REPREDICTION_CLIENT, body.pool_seq());
    assert!(c.run_until(5_000, |c| (0..4)
        .all(|i| c.sexecs[i].ordered_in.get(&key) == Some(&vec![2]))));
}
