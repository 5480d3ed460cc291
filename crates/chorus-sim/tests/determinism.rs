//! A run is a pure function of (options, seed): the same seed replays the
//! same events in the same order, even inside one process (so nothing in the
//! code under test may depend on hash-map iteration order or the wall clock).

use chorus_core::OrderingMode;
use chorus_sim::{run_one, SimOptions};

#[test]
fn same_seed_same_trace_in_both_modes() {
    for (mode, pillars, n) in [(OrderingMode::Pbft, 1, 4), (OrderingMode::Cop, 4, 7)] {
        let o = SimOptions::new(mode, pillars, n);
        for seed in [1, 42] {
            let a = run_one(&o, seed);
            let b = run_one(&o, seed);
            assert_eq!(a.trace, b.trace, "{mode:?} seed {seed} did not replay exactly");
            assert_eq!(a.to_string(), b.to_string());
            assert_eq!(a.counters, b.counters);
        }
    }
}
