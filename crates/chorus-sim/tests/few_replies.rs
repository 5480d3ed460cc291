//! Few-replies clients (`chorus_core::reply_fanout`): while every replica
//! answers, a client asks only f + 1 designated replicas for the reply to
//! each request. The simulator's Byzantine replicas withhold exactly the
//! replies they are designated for and answer everything else (the lure:
//! the client keeps hearing from them). Every mode must stay safe and live,
//! and a client must lose at most one retransmission per cooling-off period.

use chorus_core::OrderingMode;
use chorus_sim::{run_many, SimOptions, SimSummary};

fn note(s: &SimSummary, name: &str) -> u64 {
    s.counters.notes.get(name).copied().unwrap_or(0)
}

#[test]
fn every_mode_with_few_replies_clients_is_safe_and_live_under_every_fault() {
    for (mode, pillars) in [
        (OrderingMode::Pbft, 1),
        (OrderingMode::Cop, 4),
        (OrderingMode::Rcc, 4),
        (OrderingMode::Dispel, 4),
        (OrderingMode::Sarek, 4),
    ] {
        let mut o = SimOptions::new(mode, pillars, 4)
            .with_faults("all".parse().expect("fault set"))
            .with_seeds(43_000, 12);
        o.few_replies = true;
        let s = run_many(&o);
        assert!(s.failures.is_empty(), "{mode:?}:\n{s}");
        assert_eq!(s.requests_committed, s.requests_issued, "{s}");
        assert!(
            note(&s, "client-few-replies") > 0,
            "{mode:?}: nobody asked for few:\n{s}"
        );
    }
}

/// One Byzantine replica (equivocating in the protocol, withholding the
/// replies it is designated for) over a long run: every request commits,
/// and the shortfalls stay within the cooling-off periods' doubling (2, 4,
/// 8, … s) — a client that went back to few replies after each one would
/// fall short on a large share of its requests instead.
#[test]
fn a_replica_withholding_its_designated_replies_costs_a_resend_per_cooling_off_period() {
    let mut o = SimOptions::new(OrderingMode::Pbft, 1, 4)
        .with_faults("equivocate".parse().expect("fault set"))
        .with_seeds(44_000, 4);
    o.few_replies = true;
    o.requests_per_client = 300;
    o.fault_window_ms = 40_000;
    let s = run_many(&o);
    assert!(s.failures.is_empty(), "{s}");
    assert_eq!(s.requests_committed, s.requests_issued, "{s}");
    let withheld = s
        .counters
        .faults
        .get("withhold-designated-reply")
        .copied()
        .unwrap_or(0);
    let shortfalls = note(&s, "client-reply-shortfall");
    let clients = u64::from(o.clients) * o.seeds;
    assert!(withheld > 0, "the attack ran:\n{s}");
    assert!(shortfalls >= 1, "{s}");
    // 2 + 4 + 8 + 16 + 32 s of cooling off fill any run under 62 s.
    assert!(
        shortfalls <= 5 * clients,
        "{shortfalls} shortfalls for {clients} clients, {withheld} replies withheld:\n{s}"
    );
    assert!(note(&s, "client-few-replies") > 0, "{s}");
}
