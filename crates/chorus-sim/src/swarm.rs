//! Long runs (VOPR-style swarm): keep drawing fresh seeds for a wall-clock
//! budget, every seed with its own random subset of the fault kinds, and stop
//! at the first violation with its replay command.

use crate::node::SimReplica;
use crate::options::SimOptions;
use crate::report::{RunReport, SimSummary};
use crate::run::run_one_with;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct SwarmOutcome {
    pub summary: SimSummary,
    /// The first seed that violated an invariant (the run stopped there).
    pub failure: Option<RunReport>,
    pub wall: Duration,
}

impl SwarmOutcome {
    /// Events processed per wall-clock second.
    pub fn events_per_second(&self) -> f64 {
        self.summary.events as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// Run seeds `opts.first_seed, first_seed + 1, …` until `budget` has passed
/// (checked between seeds; `opts.seeds` is ignored) or one fails.
pub fn run_for_with<R: SimReplica>(
    opts: &SimOptions,
    budget: Duration,
    mut progress: impl FnMut(&RunReport),
) -> SwarmOutcome {
    let started = Instant::now();
    let mut summary = SimSummary {
        setup: opts.describe(),
        ..SimSummary::default()
    };
    let mut failure = None;
    let mut seed = opts.first_seed;
    while started.elapsed() < budget {
        let report = run_one_with::<R>(opts, seed);
        progress(&report);
        let failed = !report.ok();
        if failed {
            failure = Some(report.clone());
        }
        summary.add(report);
        if failed {
            break;
        }
        seed = seed.wrapping_add(1);
    }
    SwarmOutcome {
        summary,
        failure,
        wall: started.elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toy::Sequencer;
    use chorus_core::OrderingMode;

    #[test]
    fn runs_until_the_budget_and_counts_events() {
        let opts = SimOptions::new(OrderingMode::Pbft, 1, 4)
            .with_faults("loss".parse().unwrap())
            .with_seeds(5, 1);
        let mut seen = Vec::new();
        let out = run_for_with::<Sequencer>(&opts, Duration::from_millis(300), |r| seen.push(r.seed));
        assert!(out.failure.is_none(), "{:?}", out.failure);
        assert!(seen.len() >= 2, "{seen:?}");
        assert_eq!(seen[0], 5);
        assert!(seen.windows(2).all(|w| w[1] == w[0] + 1));
        assert!(out.summary.events > 0 && out.events_per_second() > 0.0);
    }
}
