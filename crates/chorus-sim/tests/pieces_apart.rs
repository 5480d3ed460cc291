//! The lane split's step B2 (docs/lane-split.md): each replica's hub and
//! lane groups run apart, every message between them arriving after a hop
//! and a seeded jitter (as between a replica's threads), in order per
//! channel. Every mode but dispel (which keeps its engine with the hub)
//! must stay safe and live under every fault kind: a group acting on a
//! stale copy of the hub's facts may propose less and fill later, never
//! stall or fork. `CHORUS_SIM_SEEDS` widens the sweep (default 12 per
//! configuration).

use chorus_core::OrderingMode;
use chorus_sim::{run_many, run_one, SimOptions};

fn seeds() -> u64 {
    std::env::var("CHORUS_SIM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12)
}

fn apart(mode: OrderingMode, pillars: u32, n: usize, hop_us: u64, jitter_us: u64) -> SimOptions {
    let mut o = SimOptions::new(mode, pillars, n).with_seeds(500, seeds());
    o.pillar_hop_us = Some(hop_us);
    o.pillar_jitter_us = jitter_us;
    if n >= 7 {
        o.requests_per_client = 8;
    }
    o
}

fn sweep(mode: OrderingMode, pillars: u32, n: usize) {
    for (hop, jitter) in [(0, 0), (50, 0), (100, 2_000)] {
        let summary = run_many(&apart(mode, pillars, n, hop, jitter));
        assert!(
            summary.failures.is_empty(),
            "{mode:?} p{pillars} n{n} hop {hop} µs jitter {jitter} µs:\n{summary}"
        );
    }
}

#[test]
fn cop_four_pillars_apart() {
    sweep(OrderingMode::Cop, 4, 4);
}

#[test]
fn cop_n7_apart() {
    sweep(OrderingMode::Cop, 2, 7);
}

#[test]
fn pbft_rcc_and_sarek_apart() {
    sweep(OrderingMode::Pbft, 1, 4);
    sweep(OrderingMode::Rcc, 2, 4);
    sweep(OrderingMode::Sarek, 4, 4);
}

/// The option is not a no-op: the hub and the groups do exchange messages,
/// and a hop far above the protocol's timeouts slows a run down.
#[test]
fn the_pieces_really_run_apart() {
    let mut o = apart(OrderingMode::Cop, 4, 4, 100, 0);
    o.faults = chorus_sim::FaultSet::none();
    let r = run_one(&o, 1);
    assert!(r.ok(), "{r}");
    let hops = r.counters.notes.get("hub-group-message").copied().unwrap_or(0);
    assert!(hops > 100, "only {hops} hub-group messages");
    let together = {
        let mut t = o.clone();
        t.pillar_hop_us = None;
        run_one(&t, 1)
    };
    assert!(!together.counters.notes.contains_key("hub-group-message"));
    // A whole second per hop: a round trip between a group and the hub
    // (decide, deliver, facts) takes two, far slower than together.
    let mut slow = o.clone();
    slow.pillar_hop_us = Some(1_000_000);
    let slow = run_one(&slow, 1);
    assert!(
        slow.virtual_us > together.virtual_us,
        "slow {} µs vs together {} µs",
        slow.virtual_us,
        together.virtual_us
    );
}
