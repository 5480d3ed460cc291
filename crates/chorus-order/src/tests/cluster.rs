//! Whole clusters on the perfect (or lossy) in-memory network.

use super::harness::Cluster;
use super::util::params;
use chorus_core::{LeaderRotation, OrderingMode, ProtocolParams, Seq, View};

/// Submit `per_client` requests from each client, a few ms apart.
fn load(c: &mut Cluster, clients: usize, seqs: std::ops::RangeInclusive<u64>) -> Vec<(usize, u64)> {
    let mut reqs = Vec::new();
    for s in seqs {
        for cl in 0..clients {
            c.submit(cl, s);
            reqs.push((cl, s));
        }
        c.run_for(2);
    }
    reqs
}

fn happy(n: usize, mode: OrderingMode, pillars: u32, clients: usize) -> Cluster {
    let mut c = Cluster::new(n, clients, params(mode, pillars));
    let reqs = load(&mut c, clients, 1..=12);
    assert!(
        c.run_until(20_000, |c| c.all_executed(&reqs)),
        "not every request executed"
    );
    c.run_for(200);
    c.check_agreement();
    // Identical delivery sequences.
    let first = c.delivered[0].clone();
    for i in 1..n {
        assert_eq!(
            c.delivered[i], first,
            "replica {i} delivered a different sequence"
        );
    }
    for i in 0..n {
        let st = c.replica(i).status();
        assert_eq!(st.counters.view_changes, 0, "no view change on the happy path");
        assert!(st.stable_seq > Seq(0), "checkpoints become stable");
        assert_eq!(st.counters.rejected_total(), 0, "{:?}", st.counters.rejected);
        assert_eq!(st.pool_len, 0);
        // Per-lane counters (metrics) add up to the replica's totals.
        let lanes = &st.counters.per_lane;
        assert!(lanes.keys().all(|l| (*l as usize) < st.views.len()));
        assert_eq!(
            lanes.values().map(|l| l.proposals).sum::<u64>(),
            st.counters.proposals
        );
        assert_eq!(
            lanes.values().map(|l| l.decided).sum::<u64>(),
            st.counters.decided
        );
    }
    c
}

#[test]
fn pbft_n4_happy_path() {
    happy(4, OrderingMode::Pbft, 1, 3);
}

#[test]
fn pbft_n7_happy_path() {
    happy(7, OrderingMode::Pbft, 1, 3);
}

#[test]
fn cop_p4_n4_happy_path() {
    happy(4, OrderingMode::Cop, 4, 6);
}

#[test]
fn cop_idle_lanes_propose_noops_so_delivery_never_stalls() {
    // Two clients: only lanes 0 and 1 have requests.
    let c = happy(4, OrderingMode::Cop, 4, 2);
    // Lanes with fewer clients were filled with no-ops, never stalling delivery.
    let noops: u64 = (0..4).map(|i| c.replica(i).counters().noop_proposals).sum();
    assert!(noops > 0);
}

#[test]
fn cop_p4_n7_happy_path() {
    happy(7, OrderingMode::Cop, 4, 8);
}

fn leader_crash(mode: OrderingMode, pillars: u32, rotation: LeaderRotation, crashed: usize) {
    let p = ProtocolParams {
        leader_rotation: rotation,
        ..params(mode, pillars)
    };
    let clients = 2 * pillars as usize;
    let mut c = Cluster::new(4, clients, p);
    c.crash(crashed);
    let reqs = load(&mut c, clients, 1..=10);
    assert!(
        c.run_until(60_000, |c| c.all_executed(&reqs)),
        "no progress after the leader crashed"
    );
    c.check_agreement();
    let st = c.replica((crashed + 1) % 4).status();
    assert!(
        st.views.iter().any(|v| *v > View(0)),
        "a view change happened: {:?}",
        st.views
    );
    assert!(st.counters.new_views > 0);
}

#[test]
fn pbft_leader_crash_view_change_then_progress() {
    leader_crash(OrderingMode::Pbft, 1, LeaderRotation::Fixed, 0);
}

#[test]
fn pbft_blockwise_crashed_replica_view_changes_then_progress() {
    leader_crash(OrderingMode::Pbft, 1, LeaderRotation::BlockWise, 1);
}

#[test]
fn cop_leader_crash_view_change_then_progress() {
    leader_crash(OrderingMode::Cop, 2, LeaderRotation::BlockWise, 0);
}

#[test]
fn lossy_network_still_delivers_everything() {
    let mut c = Cluster::new(4, 4, params(OrderingMode::Cop, 2));
    c.loss = 0.05;
    let reqs = load(&mut c, 4, 1..=10);
    assert!(
        c.run_until(60_000, |c| c.all_executed(&reqs)),
        "retransmission did not recover"
    );
    c.check_agreement();
    let retrans: u64 = (0..4).map(|i| c.replica(i).counters().retransmissions).sum();
    assert!(retrans > 0);
}

#[test]
fn restarted_replica_recovers_from_its_records_and_catches_up_by_state_transfer() {
    let mut c = Cluster::new(4, 3, params(OrderingMode::Pbft, 1));
    let first = load(&mut c, 3, 1..=4);
    assert!(c.run_until(20_000, |c| c.all_executed(&first)));
    c.crash(3);
    // The others move several checkpoints (and windows) ahead.
    let second = load(&mut c, 3, 5..=40);
    assert!(c.run_until(30_000, |c| c.all_executed(&second)));
    let stable = c.replica(0).status().stable_seq;
    assert!(
        stable.0 > 16 + 4,
        "the others moved more than a window ahead: {stable:?}"
    );
    c.restart(3);
    let third = load(&mut c, 3, 41..=44);
    let all: Vec<_> = first.iter().chain(&second).chain(&third).copied().collect();
    assert!(
        c.run_until(30_000, |c| c.all_executed(&all)),
        "restarted replica did not catch up"
    );
    c.check_agreement();
    let st = c.replica(3).status();
    assert!(st.counters.state_transfers > 0);
    // Same state as the others at the same position.
    c.run_for(500);
    let nexts: Vec<Seq> = (0..4).map(|i| c.execs[i].next).collect();
    assert!(nexts.iter().all(|n| *n == nexts[0]), "{nexts:?}");
    let chains: Vec<_> = (0..4).map(|i| c.execs[i].chain).collect();
    assert!(chains.iter().all(|d| *d == chains[0]));
}

#[test]
fn restart_without_losing_anything_replays_the_ledger() {
    let mut c = Cluster::new(4, 2, params(OrderingMode::Cop, 2));
    let reqs = load(&mut c, 2, 1..=6);
    assert!(c.run_until(20_000, |c| c.all_executed(&reqs)));
    c.run_for(100);
    let before = c.execs[2].clone();
    c.crash(2);
    c.restart(2);
    // InstallState of the last stable checkpoint, then every decided position.
    assert_eq!(c.execs[2].next, before.next);
    assert_eq!(c.execs[2].chain, before.chain);
    let more = load(&mut c, 2, 7..=10);
    assert!(c.run_until(20_000, |c| c.all_executed(&more)));
    c.check_agreement();
}

#[test]
fn a_request_only_one_replica_got_is_ordered_without_a_view_change() {
    let mut c = Cluster::new(4, 1, params(OrderingMode::Pbft, 1));
    // Slot 0 is replica 0's; only replica 2 (leader of slot 2) has the request.
    c.submit_to(0, 1, &[2]);
    assert!(c.run_until(2_000, |c| c.all_executed(&[(0, 1)])));
    c.check_agreement();
    for i in 0..4 {
        let st = c.replica(i).status();
        assert_eq!(st.counters.view_changes, 0);
        assert_eq!(st.next_delivery, Seq(3), "slots 0 and 1 were filled with no-ops");
    }
    assert_eq!(c.replica(0).counters().noop_proposals, 1);
}
