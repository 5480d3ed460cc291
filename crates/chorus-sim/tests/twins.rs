//! Twins (Diem's `consensus/src/twins/`): f+1 replicas run as two copies each,
//! with the same identity and keys, each copy talking to a different half of
//! the correct replicas. That exceeds the fault model, so the checkers must
//! report a safety violation; the search over seeds is bounded.

use chorus_core::OrderingMode;
use chorus_sim::{run_one, FaultKind, FaultSet, RunReport, SimOptions};

/// Seeds tried before the test gives up.
const SEARCH_MAX: u64 = 60;

fn f_plus_one_twins(mode: OrderingMode, pillars: u32) -> SimOptions {
    let mut o = SimOptions::new(mode, pillars, 4).with_faults(FaultSet::from_kinds(&[FaultKind::Twins]));
    o.byzantine = Some(2);
    o
}

fn first_fork(o: &SimOptions) -> RunReport {
    (0..SEARCH_MAX)
        .map(|seed| run_one(o, seed))
        .find(RunReport::safety_violated)
        .unwrap_or_else(|| panic!("no safety violation in {SEARCH_MAX} seeds with f+1 twins"))
}

#[test]
fn pbft_n4_with_f_plus_one_twins_forks() {
    let o = f_plus_one_twins(OrderingMode::Pbft, 1);
    let r = first_fork(&o);
    eprint!("{r}");
    assert_eq!(r.byzantine.len(), 2);
    assert!(
        r.replay.contains("--byzantine 2") && r.replay.contains("--faults twins"),
        "{}",
        r.replay
    );
    // The replay command's seed reproduces the very same run.
    assert_eq!(run_one(&o, r.seed).trace, r.trace);
}

#[test]
fn cop_n4_with_f_plus_one_twins_forks() {
    let r = first_fork(&f_plus_one_twins(OrderingMode::Cop, 4));
    eprint!("{r}");
}

#[test]
fn f_twins_are_tolerated() {
    for (mode, pillars) in [(OrderingMode::Pbft, 1), (OrderingMode::Cop, 4)] {
        let mut o = f_plus_one_twins(mode, pillars);
        o.byzantine = Some(1);
        // Issue 8 finding 7 (a replica left alone in another view) is
        // unfixed on this branch; check views again once its fix is merged.
        o.check_views = false;
        for seed in 0..20 {
            let r = run_one(&o, seed);
            assert!(r.ok(), "{r}");
        }
    }
}
