//! `cluster-restart`: every correct replica's process stops (all at once,
//! or one after the other) and starts again from its store, with a process
//! clock that starts again near 0, as the runtime's does.
//!
//! Found on the real replica first (2026-11-26): a restarted dispel replica
//! armed its DBFT timers on the previous process's clock, so after a whole
//! cluster was restarted under load every epoch that needed a round-3 timer
//! waited an old uptime. The simulator could not see it: its replicas' clocks
//! ran on across restarts, and only one replica restarted at a time while the
//! others decided without it. These seeds failed (liveness) with the fix
//! reverted (`DispelCore::recover` leaving `clock_offset` at 0).

use chorus_core::OrderingMode;
use chorus_sim::{run_one, FaultSet, RunReport, SimOptions};

fn restarts(mode: OrderingMode, pillars: u32) -> SimOptions {
    let mut o = SimOptions::new(mode, pillars, 4).with_faults(
        "cluster-restart,delay,reorder,dup"
            .parse::<FaultSet>()
            .expect("fault set"),
    );
    o.swarm = false;
    o.clients = 8;
    o.requests_per_client = 150;
    o.fault_window_ms = 30_000;
    // Tight enough that a timer waiting an old uptime (10-15 s here) is
    // seen; the passing runs finish well within it.
    o.liveness_timeout_ms = 8_000;
    o
}

fn assert_ok(r: &RunReport) {
    assert!(r.ok(), "{r}");
    assert!(
        r.setup.contains(" restart="),
        "no cluster restart drawn: {}",
        r.setup
    );
}

#[test]
fn dispel_runs_on_after_a_whole_cluster_restarts_on_fresh_clocks() {
    for seed in [72_002, 72_003, 72_011] {
        assert_ok(&run_one(&restarts(OrderingMode::Dispel, 4), seed));
    }
}

/// The PBFT-lane modes through the same restarts (rolling and power loss).
#[test]
fn pbft_lane_modes_run_on_after_a_whole_cluster_restarts() {
    for (mode, pillars) in [
        (OrderingMode::Pbft, 1),
        (OrderingMode::Cop, 4),
        (OrderingMode::Rcc, 4),
        (OrderingMode::Sarek, 4),
    ] {
        for seed in [72_002, 72_003] {
            assert_ok(&run_one(&restarts(mode, pillars), seed));
        }
    }
}

/// `sarek`: a whole-cluster restart loses the hand-ons of cross-partition
/// requests that one partition had decided and the other not yet ordered
/// (recovery replays decisions, not hand-ons), and the partition holding
/// such a request waited for its client's retransmission (back-off up to
/// 3.2 s), for ever had the client gone. The executor now reports the
/// copies it lacks every status interval and the hub hands them on again
/// (`Action::FindMissingCopies`). Same seeds with the reports ignored: the
/// clients must retransmit more to get the same requests done (summed over
/// the seeds; the runs are deterministic).
#[test]
fn sarek_hands_on_again_the_cross_partition_copies_a_cluster_restart_lost() {
    let notes = |r: &RunReport, what: &str| r.counters.notes.get(what).copied().unwrap_or(0);
    let (mut handed, mut resent_with, mut resent_without) = (0, 0, 0);
    for seed in [72_002, 72_003, 72_011, 11] {
        let mut o = restarts(OrderingMode::Sarek, 4);
        o.pillar_hop_us = Some(100);
        o.pillar_jitter_us = 1_500;
        let with = run_one(&o, seed);
        assert_ok(&with);
        o.find_missing_copies = false;
        let without = run_one(&o, seed);
        assert_ok(&without);
        assert_eq!(notes(&without, "missing-copies-handed-on"), 0);
        handed += notes(&with, "missing-copies-handed-on");
        resent_with += notes(&with, "client-retransmission");
        resent_without += notes(&without, "client-retransmission");
    }
    assert!(handed > 0, "no seed lost a hand-on: the test no longer bites");
    assert!(
        resent_with < resent_without,
        "{resent_with} retransmissions with the hand-ons, {resent_without} without"
    );
}
