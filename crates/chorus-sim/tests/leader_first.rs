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
/// new client tries first, attacks every request sent to it alone while it
/// proposes everything the backups also hold, so no view change ever
/// replaces it. Even clients get a fake result or a lone "busy" at once;
/// odd ones get their probes proposed and everything else sent alone
/// dropped in silence (the lure). One answer must not count as the primary
/// answering, and one accepted probe must not earn it a window: each
/// client loses about one request per cooling-off period (which doubles).
/// Measured on these seeds (pbft, n = 4): 5.2 per client to the fake
/// answers; a client that accepted a probe on its first reply lost 11.2 to
/// them, and one without slow start (its whole window, 3, to the primary
/// after one accepted probe) 12.0 to the lure.
#[test]
fn a_primary_that_fakes_answers_or_lures_costs_a_request_per_cooling_off() {
    for (mode, pillars) in [(OrderingMode::Pbft, 1), (OrderingMode::Cop, 2)] {
        for (n, seeds) in [(4, 12), (7, 4)] {
            let mut o = leader_first(mode, pillars, n, "fake-answer").with_seeds(44_000, seeds);
            o.swarm = false;
            o.clients = 4;
            o.requests_per_client = 120;
            o.fault_window_ms = 20_000;
            let s = run_many(&o);
            assert!(s.failures.is_empty(), "{mode:?} n={n}:\n{s}");
            assert_eq!(s.requests_committed, s.requests_issued, "{s}");
            let fault = |k: &str| s.counters.faults.get(k).copied().unwrap_or(0);
            assert_eq!(fault("byzantine-replica-fake-answer"), seeds, "{s}");
            // Two clients of each kind per seed, ~21 s each: cooling-off
            // periods end 1, 3, 7 and 15 s after the first silence.
            let per_client = |lost: u64| lost as f64 / 2.0 / seeds as f64;
            let faked = per_client(fault("byz-fake-result") + fault("byz-fake-busy"));
            let lured = per_client(fault("byz-lure-drop"));
            assert!(fault("byz-lure-probe") > 0, "{s}");
            for (what, lost) in [("fake answers", faked), ("the lure", lured)] {
                assert!(
                    (1.0..=8.0).contains(&lost),
                    "{mode:?} n={n}: {lost:.2} requests per client lost to {what}:\n{s}"
                );
            }
        }
    }
}
