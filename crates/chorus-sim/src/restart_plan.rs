//! Whole-cluster restarts (`cluster-restart`): what operators do to every
//! replica at once. Either every correct replica's process stops at one
//! moment (a power loss, a botched deploy) and they come back over the next
//! seconds, or they are restarted one after the other (a rolling upgrade,
//! never more than one down). Each comes back from its store with a fresh
//! process clock (`SimNode::boot`), as the runtime does: state whose times
//! were logged by the previous process (timers, epochs, leases) must not be
//! read on the new clock. The classic `crash` restarts one replica at a
//! time while the others run on, which never finds that class.
//!
//! Drawn from a ChaCha stream of its own (`RESTART_STREAM`), after the
//! classic, smart and rcc draws, so seeds that draw no `cluster-restart`
//! draw the same faults as before it existed. (Seeds with any restart run
//! differently since the same change: restarted clocks start near 0.)

use crate::faults::FaultKind;
use crate::options::SimOptions;
use crate::plan::{CrashPlan, Plan};
use crate::queue::Micros;
use chorus_core::ReplicaId;
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// The ChaCha stream the restart draws come from.
pub const RESTART_STREAM: u64 = 0x0e57;

/// A power loss: each replica comes back this long after it (staggered, as
/// machines boot at different speeds).
const POWER_BACK_MIN_US: Micros = 100_000;
const POWER_BACK_MAX_US: Micros = 2_500_000;
/// A rolling upgrade: each replica is down this long, and the next one is
/// stopped this long after the previous one is back.
const ROLL_DOWN_MIN_US: Micros = 200_000;
const ROLL_DOWN_MAX_US: Micros = 1_500_000;
const ROLL_GAP_MIN_US: Micros = 200_000;
const ROLL_GAP_MAX_US: Micros = 1_500_000;
/// The plan needs a fault window at least this long.
const WINDOW_MIN_US: Micros = 1_000_000;

/// Draw `cluster-restart` into `plan` (one coin under the swarm).
pub fn draw_cluster_restart(opts: &SimOptions, plan: &mut Plan, rng: &mut ChaCha8Rng) {
    let k = FaultKind::ClusterRestart;
    if !opts.faults.contains(k) || plan.heal_at_us < WINDOW_MIN_US {
        return;
    }
    if opts.swarm && !rng.gen_bool(0.5) {
        return;
    }
    // Byzantine replicas run the adversary's code, not ours: only the
    // correct ones are restarted.
    let mut correct: Vec<ReplicaId> = (0..opts.n as u32)
        .map(ReplicaId)
        .filter(|r| !plan.byzantine.iter().any(|(b, _)| b == r))
        .collect();
    correct.shuffle(rng);
    let heal = plan.heal_at_us;
    let mut at_us = rng.gen_range(heal / 4..=heal / 2);
    let rolling = rng.gen_bool(0.5);
    for replica in correct {
        let torn_after = rng.gen_bool(0.5).then(|| rng.gen_range(0..6));
        let restart_us = if rolling {
            at_us + rng.gen_range(ROLL_DOWN_MIN_US..=ROLL_DOWN_MAX_US)
        } else {
            at_us + rng.gen_range(POWER_BACK_MIN_US..=POWER_BACK_MAX_US)
        };
        plan.restarts.push(CrashPlan {
            replica,
            at_us,
            restart_us,
            torn_after,
        });
        if rolling {
            at_us = restart_us + rng.gen_range(ROLL_GAP_MIN_US..=ROLL_GAP_MAX_US);
        }
    }
    plan.rolling_restart = rolling;
    plan.drawn.insert(k);
}

/// ` restart=power-loss` / ` restart=rolling`, or nothing.
pub fn describe(plan: &Plan) -> String {
    match (plan.restarts.is_empty(), plan.rolling_restart) {
        (true, _) => String::new(),
        (false, true) => " restart=rolling".into(),
        (false, false) => " restart=power-loss".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::FaultSet;
    use chorus_core::OrderingMode;
    use rand::SeedableRng;

    fn draw(opts: &SimOptions, seed: u64) -> Plan {
        Plan::draw(opts, &mut ChaCha8Rng::seed_from_u64(seed))
    }

    #[test]
    fn seeds_without_a_cluster_restart_draw_as_before_it_existed() {
        let others: Vec<FaultKind> = FaultKind::ALL
            .into_iter()
            .filter(|k| *k != FaultKind::ClusterRestart)
            .collect();
        let others = FaultSet::from_kinds(&others);
        let without = SimOptions::new(OrderingMode::Cop, 4, 7).with_faults(others);
        let with = SimOptions::new(OrderingMode::Cop, 4, 7);
        for seed in 0..200 {
            let (a, b) = (draw(&without, seed), draw(&with, seed));
            assert_eq!(format!("{:?}", a.crashes), format!("{:?}", b.crashes));
            assert_eq!(format!("{:?}", a.smart.outages), format!("{:?}", b.smart.outages));
            assert_eq!(a.byzantine, b.byzantine);
            assert_eq!(a.drawn, b.drawn.intersect(others));
        }
    }

    #[test]
    fn every_correct_replica_restarts_and_a_rolling_upgrade_keeps_one_down_at_most() {
        let opts = SimOptions::new(OrderingMode::Pbft, 4, 7).with_faults(FaultSet::from_kinds(&[
            FaultKind::ClusterRestart,
            FaultKind::Silent,
        ]));
        let (mut rolling, mut power) = (0, 0);
        for seed in 0..100 {
            let p = draw(&opts, seed);
            if p.restarts.is_empty() {
                continue;
            }
            let correct = opts.n - p.byzantine.len();
            assert_eq!(p.restarts.len(), correct, "seed {seed}");
            for c in &p.restarts {
                assert!(c.at_us < c.restart_us, "seed {seed}");
                assert!(!p.byzantine.iter().any(|(b, _)| *b == c.replica));
            }
            if p.rolling_restart {
                rolling += 1;
                for w in p.restarts.windows(2) {
                    assert!(w[0].restart_us < w[1].at_us, "seed {seed}: two down at once");
                }
            } else {
                power += 1;
                assert!(p.restarts.iter().all(|c| c.at_us == p.restarts[0].at_us));
            }
        }
        assert!(
            rolling > 10 && power > 10,
            "both shapes drawn: {rolling} / {power}"
        );
    }
}
