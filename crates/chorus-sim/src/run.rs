//! The library entry points the CLI calls: one seed, or many.

use crate::faults::FaultSet;
use crate::node::SimReplica;
use crate::options::SimOptions;
use crate::plan::Plan;
use crate::report::{RunReport, SimSummary, Violation, ViolationKind};
use crate::stats::Counters;
use crate::world::{World, NOW_US};
use chorus_core::Digest;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Run one seed against any replica state machine. A panic in the code under
/// test is reported as a violation (with its replay command), not propagated.
/// Signature verdicts memoised per simulator thread (about 45 MiB when
/// full; a prepare's signature is wanted by its peers within a round trip).
const SIGNATURE_MEMO_ENTRIES: usize = 1 << 18;

pub fn run_one_with<R: SimReplica>(opts: &SimOptions, seed: u64) -> RunReport {
    if let Err(e) = opts.validate() {
        NOW_US.with(|c| c.set(0));
        return failed(opts, seed, ViolationKind::Panic, format!("invalid options: {e}"));
    }
    // Every replica runs on this thread and verifies the same signatures:
    // memoise the verdicts (a pure function, `chorus_core::verify_memo`).
    chorus_core::verify_memo::memoize_verifications(SIGNATURE_MEMO_ENTRIES);
    match catch_unwind(AssertUnwindSafe(|| World::<R>::new(opts, seed).run())) {
        Ok(report) => report,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "non-string panic payload".into());
            failed(opts, seed, ViolationKind::Panic, format!("panicked: {msg}"))
        }
    }
}

fn failed(opts: &SimOptions, seed: u64, kind: ViolationKind, detail: String) -> RunReport {
    // The plan is the first thing a run draws from its RNG: drawing it again
    // tells what the failed run was doing.
    let plan = opts
        .validate()
        .is_ok()
        .then(|| Plan::draw(opts, &mut ChaCha8Rng::seed_from_u64(seed)));
    let at_us = NOW_US.with(|c| c.get());
    RunReport {
        perf: None,
        seed,
        faults_drawn: plan.as_ref().map_or(FaultSet::none(), |p| p.drawn),
        faults_active: FaultSet::none(),
        events: 0,
        setup: plan.as_ref().map_or(String::new(), Plan::setup),
        byzantine: plan.as_ref().map_or(vec![], Plan::byzantine_names),
        virtual_us: at_us,
        counters: Counters::default(),
        requests_issued: 0,
        requests_committed: 0,
        delivered_positions: 0,
        violations: vec![Violation { kind, at_us, detail }],
        violations_dropped: 0,
        replay: opts.replay_command(seed),
        trace: Digest::default(),
        rcc: Default::default(),
    }
}

/// Run `opts.seeds` seeds from `opts.first_seed`, one after the other,
/// against any replica state machine, calling `progress` after every seed.
pub fn run_many_with<R: SimReplica>(opts: &SimOptions, mut progress: impl FnMut(&RunReport)) -> SimSummary {
    let mut summary = SimSummary {
        setup: opts.describe(),
        ..SimSummary::default()
    };
    for seed in opts.first_seed..opts.first_seed.saturating_add(opts.seeds) {
        let report = run_one_with::<R>(opts, seed);
        progress(&report);
        summary.add(report);
    }
    summary
}
