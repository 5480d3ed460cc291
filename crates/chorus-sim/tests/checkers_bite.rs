//! The checkers must bite. Built only with the `weak-quorum` feature, which
//! lowers chorus-order's lane quorum by one (prepared certificates and commit
//! quorums of 2f instead of 2f+1): then two quorums need not share a correct
//! replica, and f Byzantine replicas — an equivocating primary, or a twin —
//! can make correct replicas decide different batches (PBFT §4.5 needs the
//! intersection). The simulator must report it.
//!
//! CI runs it as a separate step (scripts/test.sh):
//! `cargo test -p chorus-sim --features weak-quorum --test checkers_bite`.
#![cfg(feature = "weak-quorum")]

use chorus_core::OrderingMode;
use chorus_sim::{run_one, FaultKind, FaultSet, RunReport, SimOptions, ViolationKind};

/// Seeds tried before the test gives up.
const SEARCH_MAX: u64 = 100;

fn first_safety_violation(o: &SimOptions) -> RunReport {
    (0..SEARCH_MAX)
        .map(|seed| run_one(o, seed))
        .find(RunReport::safety_violated)
        .unwrap_or_else(|| {
            panic!("the weakened quorum survived {SEARCH_MAX} seeds: the checkers do not bite")
        })
}

fn byzantine_within_f(mode: OrderingMode, pillars: u32, kinds: &[FaultKind]) -> SimOptions {
    // One Byzantine replica (f at n = 4) with the given fault model.
    SimOptions::new(mode, pillars, 4).with_faults(FaultSet::from_kinds(kinds))
}

#[test]
fn weak_quorum_pbft_equivocating_primary_forks() {
    let o = byzantine_within_f(OrderingMode::Pbft, 1, &[FaultKind::Equivocate]);
    let r = first_safety_violation(&o);
    eprint!("{r}");
    assert!(
        r.has(ViolationKind::Agreement) || r.has(ViolationKind::StateDigest),
        "{r}"
    );
    assert!(
        r.replay.contains("--features chorus-sim/weak-quorum"),
        "{}",
        r.replay
    );
}

#[test]
fn weak_quorum_cop_twin_forks() {
    let o = byzantine_within_f(OrderingMode::Cop, 4, &[FaultKind::Twins]);
    let r = first_safety_violation(&o);
    eprint!("{r}");
}

/// rcc: every replica is an instance primary; an equivocating one forks
/// its own instance under the weakened quorum, and the rcc-aware delivery
/// checks (a round's lanes in a drawn order) still see the fork.
#[test]
fn weak_quorum_rcc_equivocating_instance_primary_forks() {
    let mut o = byzantine_within_f(OrderingMode::Rcc, 1, &[FaultKind::Equivocate]);
    o.check_views = false;
    let r = first_safety_violation(&o);
    eprint!("{r}");
    assert!(
        r.has(ViolationKind::Agreement) || r.has(ViolationKind::StateDigest),
        "{r}"
    );
}

/// dispel: with every DBFT quorum one short (chorus-dbft's share of the
/// feature), an RB-equivocating proposer gets two digests delivered for its
/// slot (two echo quorums no longer share a correct replica), so correct
/// replicas execute different batches at the same position.
#[test]
fn weak_quorum_dispel_rb_equivocator_forks() {
    let o = byzantine_within_f(OrderingMode::Dispel, 4, &[FaultKind::Equivocate]);
    let r = first_safety_violation(&o);
    eprint!("{r}");
    assert!(
        r.has(ViolationKind::Agreement) || r.has(ViolationKind::StateDigest),
        "{r}"
    );
}

/// dispel: twins (one identity, two copies talking to different halves)
/// fork the weakened DBFT quorums too.
#[test]
fn weak_quorum_dispel_twin_forks() {
    let o = byzantine_within_f(OrderingMode::Dispel, 4, &[FaultKind::Twins]);
    let r = first_safety_violation(&o);
    eprint!("{r}");
}
