//! The rcc adversaries and checkers (issue 10 item 6): each RCC-specific
//! Byzantine primary runs clean at n = 4, the ordering defence keeps the
//! order attacker's rank uniform under light load, and wait-freedom holds
//! when an instance primary crashes under steady load. The checkers bite:
//! f+1 crashed replicas break wait-freedom, and a batch with room to grind
//! lets the order attacker win rank 0 (a finding, `#[ignore]`d below).
//!
//! Longer sweeps: `cargo test --release -p chorus-sim --test rcc -- --ignored`.

use chorus_core::{OrderingMode, ReplicaId};
use chorus_order::Replica;
use chorus_sim::rcc_stats::{chi_square, chi_square_critical_001, lane_rate, wait_free, WAIT_FREE_MIN_RATIO};
use chorus_sim::world::World;
use chorus_sim::{run_many, run_one, FaultKind, FaultSet, RunReport, SimOptions, SimSummary, ViolationKind};

fn rcc(n: usize, faults: &str) -> SimOptions {
    let mut o = SimOptions::new(OrderingMode::Rcc, 1, n).with_faults(faults.parse().expect("fault set"));
    // View splits are another helper's subject (docs/known-issues.md).
    o.check_views = false;
    o
}

fn assert_clean(s: &SimSummary, kind: FaultKind) {
    assert!(s.ok(), "{s}");
    assert_eq!(
        s.active.get(&kind).copied(),
        Some(s.seeds_run),
        "{kind} must act in every seed:\n{s}"
    );
}

macro_rules! clean_kind {
    ($name:ident, $kind:literal, $k:expr) => {
        #[test]
        fn $name() {
            let o = rcc(4, $kind).with_seeds(0, 3);
            assert_clean(&run_many(&o), $k);
        }
    };
}

clean_kind!(throttle_runs_clean, "throttle", FaultKind::Throttle);
clean_kind!(in_the_dark_runs_clean, "in-the-dark", FaultKind::InTheDark);
clean_kind!(censor_runs_clean, "censor", FaultKind::Censor);
clean_kind!(order_attack_runs_clean, "order-attack", FaultKind::OrderAttack);
clean_kind!(failure_spam_runs_clean, "failure-spam", FaultKind::FailureSpam);

/// The rank statistic of the order attacker over `seeds`.
fn ranks(o: &SimOptions) -> (Vec<u64>, f64, f64) {
    let s = run_many(o);
    assert!(s.ok(), "{s}");
    let counts = s.attacker_ranks.clone();
    assert_eq!(counts.len(), o.n, "{s}");
    let chi2 = chi_square(&counts);
    let critical = chi_square_critical_001(counts.len() - 1);
    eprintln!(
        "order-attack ranks {counts:?} over {} rounds: chi² {chi2:.2} (0.1% critical {critical:.2})",
        counts.iter().sum::<u64>()
    );
    (counts, chi2, critical)
}

/// RCC §IV: with the simulator's usual load the attacker's batches hold one
/// request, so it has nothing to grind and lands at every rank alike.
#[test]
fn ordering_defence_holds_under_light_load() {
    let (counts, chi2, critical) = ranks(&rcc(4, "order-attack").with_seeds(0, 12));
    assert!(counts.iter().sum::<u64>() >= 100);
    assert!(chi2 < critical);
}

/// The same over ≥ 1000 rounds at n = 4 and n = 7 (docs/sim.md, "rcc").
#[test]
#[ignore = "sweep: run with --release -- --ignored"]
fn ordering_defence_holds_under_light_load_over_1000_rounds() {
    for (n, seeds) in [(4, 100), (7, 100)] {
        let (counts, chi2, critical) = ranks(&rcc(n, "order-attack").with_seeds(0, seeds));
        assert!(counts.iter().sum::<u64>() >= 1000, "n={n}: {counts:?}");
        assert!(chi2 < critical, "n={n}");
    }
}

/// Finding (issue 10 item 6): the round order is seeded with the round's
/// batch digests (RCC §IV), and the instance primary that proposes last in
/// a round knows the others' digests from their pre-prepares. With several
/// requests in its batch it tries their orders (validly: each request is
/// still its client's) until its lane draws rank 0 (up to 4! = 24 orders
/// here). With 32 clients its batches fill up, and over 10 seeds it lands
/// first in 292 of 684 rounds (chi² 115.8, 0.1% critical 16.27). Not a bug in chorus-order's code but in the defence: the
/// seed must not be something the last proposer can choose (e.g. a
/// canonical request order inside a batch plus a seed no proposer controls,
/// such as a threshold signature over the round, or commit-reveal).
/// Fails until chorus-order changes the seed; the checker bites.
#[test]
#[ignore = "finding: RCC's round-order seed is grindable by the last proposer (docs/sim.md, rcc)"]
fn ordering_defence_under_heavy_load() {
    let mut o = rcc(4, "order-attack").with_seeds(0, 10);
    o.clients = 32;
    o.requests_per_client = 30;
    o.client_window = 8;
    let (counts, chi2, critical) = ranks(&o);
    assert!(
        chi2 < critical,
        "the order attacker's rank is not uniform: {counts:?}"
    );
}

/// The checker bites: the heavy-load run above shows a biased rank.
#[test]
#[ignore = "sweep: run with --release -- --ignored"]
fn order_attacker_wins_rank_zero_when_it_can_grind() {
    let mut o = rcc(4, "order-attack").with_seeds(0, 10);
    o.clients = 32;
    o.requests_per_client = 30;
    o.client_window = 8;
    let (counts, chi2, critical) = ranks(&o);
    assert!(chi2 > critical && counts[0] == *counts.iter().max().unwrap());
}

/// Steady load: one client per instance, paced over `window_ms`.
fn steady(n: usize, window_ms: u64) -> SimOptions {
    let mut o = rcc(n, "none");
    o.clients = n as u32;
    o.requests_per_client = (window_ms / 50) as u32;
    o.client_window = 4;
    o.fault_window_ms = window_ms;
    o.check_wait_free = true;
    o
}

fn crash_run(o: &SimOptions, crashed: &[u32], at_us: u64, restart_us: u64) -> RunReport {
    let mut w = World::<Replica>::new(o, 1);
    for r in crashed {
        w = w.with_crash(ReplicaId(*r), at_us, restart_us);
    }
    w.run()
}

/// RCC §III-C: replica 0 crashes under steady load; its instance is
/// stopped (the coordinating leader fills its rounds) and the other
/// instances keep deciding at their earlier rate while it is halted.
#[test]
fn wait_free_when_an_instance_primary_crashes() {
    let o = steady(4, 6_000);
    let r = crash_run(&o, &[0], 2_000_000, 4_500_000);
    let w = wait_free(&r.rcc.samples).expect("a baseline");
    let outage = lane_rate(&r.rcc.samples, &[1, 2, 3], 2_000_000, 4_500_000).unwrap();
    eprintln!(
        "{w:?}: ratio {:.2}; over the whole outage {outage:.1}/s per lane, {:.2} of the baseline",
        w.ratio().unwrap(),
        outage / w.baseline
    );
    assert!(r.ok(), "{r}");
    assert!(w.stopped_windows >= 5, "lane 0 was stopped: {w:?}");
    assert!(w.ratio().unwrap() >= WAIT_FREE_MIN_RATIO);
}

/// Finding: until the FAILUREs time out (one view-change timeout after the
/// crash, and again whenever the stop's penalty ends with the primary still
/// down), lane 0 is neither stopped nor changing view, and the other lanes
/// stall once they are `max_lane_drift_slots` (σ) rounds ahead of the
/// delivery point, which waits for lane 0. Over the whole outage they
/// decide at about 3/4 of their earlier rate. RCC's instances buffer
/// without bound instead (§III-C); chorus bounds the drift for memory.
#[test]
#[ignore = "finding: other lanes stall for a timeout per failure detection (drift bound σ), docs/sim.md rcc"]
fn wait_free_over_the_whole_outage() {
    let o = steady(4, 6_000);
    let r = crash_run(&o, &[0], 2_000_000, 4_500_000);
    let w = wait_free(&r.rcc.samples).expect("a baseline");
    let outage = lane_rate(&r.rcc.samples, &[1, 2, 3], 2_000_000, 4_500_000).unwrap();
    assert!(
        outage / w.baseline >= WAIT_FREE_MIN_RATIO,
        "{outage:.1} vs {:.1}",
        w.baseline
    );
}

/// The checker bites: with f+1 = 2 of 4 replicas down no quorum is left,
/// nothing decides while they are down, and the run reports it.
///
/// Open since timeout certificates (chorus-order `lane/timeout_cert.rs`):
/// with only 2f replicas up no lane can leave its view (a certificate needs
/// 2f+1 signed timeouts, and a view change could not complete anyway), so
/// no lane is ever stopped or changing view, no window counts as halted,
/// and the checker has nothing to measure; the run recovers after the
/// restarts (liveness holds). Crashing replica 1 after lane 0 was stopped
/// did not help either (the live replicas then see lane 0 running). The
/// checker's own arithmetic is tested in `rcc_stats.rs`; it needs a notion
/// of "halted" that includes "no lane decides" to bite here again.
#[test]
#[ignore = "the wait-free checker measures only halted windows; with timeout certificates f+1 crashes halt no lane (docs/known-issues.md)"]
fn wait_free_checker_bites_with_f_plus_one_crashes() {
    let o = steady(4, 6_000);
    let r = crash_run(&o, &[0, 1], 2_000_000, 4_500_000);
    eprint!("{r}");
    assert!(r.has(ViolationKind::WaitFree), "{r}");
    assert!(!r.safety_violated(), "{r}");
}

/// `--faults all` in rcc mode draws the rcc kinds (and other modes never do).
#[test]
fn all_draws_the_rcc_kinds_in_rcc_mode_only() {
    let o = rcc(4, "all").with_seeds(0, 6);
    let s = run_many(&o);
    assert!(
        s.violations() == 0 || s.failures.iter().all(|r| !r.safety_violated()),
        "{s}"
    );
    assert!(FaultSet::rcc().iter().any(|k| s.drawn.contains_key(&k)), "{s}");
    let r = run_one(&SimOptions::new(OrderingMode::Pbft, 1, 4), 3);
    assert!(r.faults_drawn.intersect(FaultSet::rcc()).is_empty());
}

/// RCC §III-E: Byzantine clients switching back and forth (to valid,
/// current and absent instances, with replayed seqs) break nothing: every
/// checker, exactly-once included, stays clean.
#[test]
fn switch_spam_clients_run_clean() {
    let o = rcc(4, "switch-spam").with_seeds(0, 4);
    assert_clean(&run_many(&o), FaultKind::SwitchSpam);
}
