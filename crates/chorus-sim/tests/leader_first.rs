//! Leader-first clients (`chorus_core::first_contact`, PBFT §4.1): a new
//! request goes to the primary of the client's lane (rcc: of its instance)
//! alone and to every replica when its replies are late; views are learnt from f + 1 status
//! answers, which the simulator's Byzantine replicas inflate. Every fault,
//! including silent and equivocating primaries, must leave the runs safe and
//! live, and the clients must really have sent to the primary alone.

use chorus_core::{LeaderRotation, OrderingMode};
use chorus_sim::{run_many, SimOptions};

fn leader_first(mode: OrderingMode, pillars: u32, n: usize, faults: &str) -> SimOptions {
    let mut o = SimOptions::new(mode, pillars, n).with_faults(faults.parse().expect("fault set"));
    o.leader_first = true;
    // cop draws its rotation per seed; leader-first applies to the fixed one.
    o.rotation = Some(LeaderRotation::Fixed);
    o
}

fn sent_to_primary(s: &chorus_sim::SimSummary) -> u64 {
    s.counters
        .notes
        .get("client-sent-to-primary")
        .copied()
        .unwrap_or(0)
}

#[test]
fn pbft_cop_and_rcc_with_leader_first_clients_are_safe_and_live_under_every_fault() {
    for (mode, pillars) in [
        (OrderingMode::Pbft, 1),
        (OrderingMode::Cop, 4),
        (OrderingMode::Rcc, 4),
    ] {
        for (n, seeds) in [(4, 30), (7, 10)] {
            let o = leader_first(mode, pillars, n, "all").with_seeds(41_000, seeds);
            let s = run_many(&o);
            assert!(s.failures.is_empty(), "{mode:?} n={n}:\n{s}");
            assert_eq!(s.requests_committed, s.requests_issued, "{s}");
            assert!(
                sent_to_primary(&s) > 0,
                "the clients sent to a primary alone:\n{s}"
            );
            // rcc's instance primaries are the same in every view.
            let asked = s.counters.notes.get("client-view-question").copied().unwrap_or(0);
            assert_eq!(
                asked > 0,
                mode != OrderingMode::Rcc,
                "views asked for {asked} times:\n{s}"
            );
        }
    }
}

/// Without faults every request goes to the primary alone, but a client's
/// first window, sent to every replica while it learns the view.
#[test]
fn without_faults_the_primary_alone_gets_the_requests() {
    let o = leader_first(OrderingMode::Pbft, 1, 4, "none").with_seeds(42_000, 3);
    let s = run_many(&o);
    assert!(s.failures.is_empty(), "{s}");
    let learning = u64::from(o.clients * o.client_window) * o.seeds;
    let alone = sent_to_primary(&s);
    assert!(
        alone < s.requests_issued && alone + learning >= s.requests_issued,
        "{alone} of {} alone, {learning} at most while learning: {s}",
        s.requests_issued
    );
    let asked = s.counters.notes.get("client-view-question").copied().unwrap_or(0);
    assert!(
        asked >= u64::from(o.clients) * o.seeds && asked <= 2 * u64::from(o.clients) * o.seeds,
        "each client asks once or twice: {asked}"
    );
}

/// A silent or equivocating primary, with the lying view reports of the
/// Byzantine replica, over many seeds.
#[test]
fn byzantine_primaries_and_lying_view_reports_do_not_stall_leader_first_clients() {
    for (mode, pillars) in [(OrderingMode::Pbft, 1), (OrderingMode::Cop, 2)] {
        let o = leader_first(mode, pillars, 4, "silent,equivocate,withhold-pace,delay,loss")
            .with_seeds(43_000, 60);
        let s = run_many(&o);
        assert!(s.failures.is_empty(), "{mode:?}:\n{s}");
        assert_eq!(s.requests_committed, s.requests_issued, "{s}");
    }
}

/// `fake-answer` (`first_contact_plan.rs`): replica 0, the primary every
/// new client tries first, answers every request sent to it alone at once
/// with a fake result or a lone "busy" and proposes none of them, while it
/// proposes everything the backups also hold, so no view change ever
/// replaces it. One answer must not count as the primary answering: each
/// client sends to it alone only its probes, one per cooling-off period
/// (which doubles) and one more after each "busy". A client that took a
/// fake result for an answer sent to it alone again after every probe:
/// ~13 requests per client, each retransmitted, against ~5 (measured by
/// accepting a probe on its first reply).
#[test]
fn a_primary_that_fakes_answers_gets_only_probes() {
    for (mode, pillars) in [(OrderingMode::Pbft, 1), (OrderingMode::Cop, 2)] {
        for (n, seeds) in [(4, 12), (7, 4)] {
            let mut o = leader_first(mode, pillars, n, "fake-answer").with_seeds(44_000, seeds);
            o.swarm = false;
            o.requests_per_client = 120;
            o.fault_window_ms = 20_000;
            let s = run_many(&o);
            assert!(s.failures.is_empty(), "{mode:?} n={n}:\n{s}");
            assert_eq!(s.requests_committed, s.requests_issued, "{s}");
            let fault = |k: &str| s.counters.faults.get(k).copied().unwrap_or(0);
            assert_eq!(fault("byzantine-replica-fake-answer"), seeds, "{s}");
            assert!(fault("byz-fake-result") > 0 && fault("byz-fake-busy") > 0, "{s}");
            // ~21 s: periods end at 1, 3, 7, 15 s after the first silence,
            // plus a probe after each "busy" (one answer in three).
            let per_client = sent_to_primary(&s) as f64 / f64::from(o.clients) / seeds as f64;
            assert!(
                (1.0..=8.0).contains(&per_client),
                "{mode:?} n={n}: {per_client:.2} requests per client sent to the faker alone \
                 (~5 expected; a client fooled by one answer sends ~13):\n{s}"
            );
        }
    }
}
