//! The smart part of a seed's fault plan (issue 9): which smart adversaries
//! run, on which replicas, whether they keep attacking after the network
//! heals, and the harsher crash schedules of `outage`.
//!
//! Everything here is drawn from a second ChaCha stream of the seed's RNG
//! (`SMART_STREAM`), after the classic plan was drawn from the first one, so
//! a seed that draws no smart kind runs exactly as it did before these kinds
//! existed (`--faults classic` replays any older `--faults all` seed).

use crate::faults::{FaultKind, FaultSet};
use crate::options::SimOptions;
use crate::plan::{CrashPlan, Plan};
use crate::queue::Micros;
use chorus_core::{OrderingMode, ReplicaId};
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// The ChaCha stream the smart draws come from (the classic plan uses stream 0).
pub const SMART_STREAM: u64 = 0x5a17;

/// Long outages last this long (inside the fault window).
const LONG_DOWN_MIN_US: Micros = 2_000_000;
const LONG_DOWN_MAX_US: Micros = 8_000_000;
/// A replica that stays down past healing comes back this long after it.
const PAST_HEAL_MIN_US: Micros = 1_000_000;
const PAST_HEAL_MAX_US: Micros = 6_000_000;
/// Crashes triggered by a view change or a state transfer, at most, per run.
pub const TRIGGERED_CRASHES_MAX: u32 = 4;
/// Chance that a victim crashes when it sends a VIEW-CHANGE or STATE-REQUEST.
pub const TRIGGER_PPM: u32 = 250_000;
/// A triggered crash keeps the replica down this long.
pub const TRIGGERED_DOWN_MIN_US: Micros = 200_000;
pub const TRIGGERED_DOWN_MAX_US: Micros = 2_000_000;

#[derive(Clone, Debug, Default)]
pub struct SmartPlan {
    /// Smart kinds this seed drew (also in `Plan::drawn`).
    pub drawn: FaultSet,
    /// Smart Byzantine replicas keep attacking after the network heals
    /// (drawn per seed; when clear they behave correctly from then on).
    pub persist: bool,
    /// Outages of correct replicas (a restart may come after healing).
    pub outages: Vec<CrashPlan>,
    /// Correct replicas that may crash when they send a VIEW-CHANGE or a
    /// STATE-REQUEST before the network heals.
    pub trigger_victims: Vec<ReplicaId>,
}

impl SmartPlan {
    /// ` smart=nv-forge,outage persist=yes`, or nothing when no smart kind was drawn.
    pub fn describe(&self) -> String {
        if self.drawn.is_empty() {
            return String::new();
        }
        format!(
            " smart={} persist={}",
            self.drawn,
            if self.persist { "yes" } else { "no" }
        )
    }

    /// The latest restart of any outage (0 when there is none).
    pub fn last_restart_us(&self) -> Micros {
        self.outages.iter().map(|c| c.restart_us).max().unwrap_or(0)
    }
}

/// Draw the smart kinds of `opts.faults` into `plan`.
pub fn draw_smart(opts: &SimOptions, plan: &mut Plan, rng: &mut ChaCha8Rng) {
    let allowed: Vec<FaultKind> = opts.faults.intersect(FaultSet::smart()).iter().collect();
    if allowed.is_empty() {
        return;
    }
    let mut drawn = FaultSet::none();
    for k in &allowed {
        if !opts.swarm || rng.gen_bool(0.5) {
            drawn.insert(*k);
        }
    }
    if drawn.is_empty() && plan.drawn.is_empty() {
        drawn.insert(*allowed.choose(rng).expect("non-empty"));
    }
    plan.drawn = plan.drawn.union(drawn);
    plan.smart.drawn = drawn;
    assign_byzantine(opts, plan, drawn, rng);
    plan.smart.persist = rng.gen_bool(0.5);
    if drawn.contains(FaultKind::Outage) {
        draw_outages(opts, plan, rng);
    }
}

/// Give the smart Byzantine kinds replicas. With classic Byzantine replicas
/// already drawn, a coin decides whether the smart kinds take them over (so
/// classic kinds stay active in about half the seeds).
fn assign_byzantine(opts: &SimOptions, plan: &mut Plan, drawn: FaultSet, rng: &mut ChaCha8Rng) {
    let mut kinds: Vec<FaultKind> = drawn.iter().filter(|k| k.is_byzantine_replica()).collect();
    let count = opts.byzantine_replicas();
    if kinds.is_empty() || count == 0 {
        return;
    }
    kinds.shuffle(rng);
    if !plan.byzantine.is_empty() {
        if rng.gen_bool(0.5) {
            let len = plan.byzantine.len();
            for (i, entry) in plan.byzantine.iter_mut().enumerate() {
                entry.1 = if i < kinds.len() {
                    kinds[i]
                } else {
                    *kinds.choose(rng).expect("non-empty")
                };
            }
            debug_assert_eq!(plan.byzantine.len(), len);
        }
        return;
    }
    // Replicas that crash are correct by construction: never pick them.
    let crashing: Vec<ReplicaId> = plan.crashes.iter().map(|c| c.replica).collect();
    let mut free: Vec<ReplicaId> = (0..opts.n as u32)
        .map(ReplicaId)
        .filter(|r| !crashing.contains(r))
        .collect();
    free.shuffle(rng);
    let mut chosen: Vec<(ReplicaId, FaultKind)> = Vec::new();
    let mut take = |want: Option<ReplicaId>, kind: FaultKind, free: &mut Vec<ReplicaId>| {
        let pos = want.and_then(|w| free.iter().position(|r| *r == w)).unwrap_or(0);
        if !free.is_empty() {
            chosen.push((free.remove(pos), kind));
        }
    };
    for i in 0..count {
        let kind = if i < kinds.len() {
            kinds[i]
        } else {
            *kinds.choose(rng).expect("non-empty")
        };
        // The attack works best where the role is: replica 1 assembles the
        // first NEW-VIEW (lane 0, view 1), replica 0 leads view 0.
        let want = match kind {
            FaultKind::NvForge if rng.gen_bool(0.7) => Some(ReplicaId(1)),
            FaultKind::WithholdPace if opts.mode == OrderingMode::Pbft && rng.gen_bool(0.7) => {
                Some(ReplicaId(0))
            }
            _ => None,
        };
        take(want, kind, &mut free);
    }
    plan.byzantine = chosen;
}

/// Long outages, outages past healing (only while Byzantine plus down
/// replicas stay within f after healing, so liveness can still be asserted),
/// and the victims of crashes triggered by view changes and state transfers.
fn draw_outages(opts: &SimOptions, plan: &mut Plan, rng: &mut ChaCha8Rng) {
    let heal = plan.heal_at_us;
    let f = opts.f().max(1);
    let byzantine: Vec<ReplicaId> = plan.byzantine.iter().map(|(r, _)| *r).collect();
    let crashing: Vec<ReplicaId> = plan.crashes.iter().map(|c| c.replica).collect();
    let mut victims: Vec<ReplicaId> = (0..opts.n as u32)
        .map(ReplicaId)
        .filter(|r| !byzantine.contains(r) && !crashing.contains(r))
        .collect();
    victims.shuffle(rng);
    victims.truncate(rng.gen_range(1..=f));
    let mut past_heal_left = opts.f().saturating_sub(byzantine.len());
    for &replica in &victims {
        let torn_after = rng.gen_bool(0.5).then(|| rng.gen_range(0..6));
        if past_heal_left > 0 && rng.gen_bool(0.5) {
            past_heal_left -= 1;
            let at_us = rng.gen_range(heal / 2..=heal.max(1));
            let restart_us = heal + rng.gen_range(PAST_HEAL_MIN_US..=PAST_HEAL_MAX_US);
            plan.smart.outages.push(CrashPlan {
                replica,
                at_us,
                restart_us,
                torn_after,
            });
        } else if heal > LONG_DOWN_MIN_US + 200_000 {
            let down = rng
                .gen_range(LONG_DOWN_MIN_US..=LONG_DOWN_MAX_US)
                .min(heal - 200_000);
            let at_us = rng.gen_range(100_000..=heal - down - 100_000);
            plan.smart.outages.push(CrashPlan {
                replica,
                at_us,
                restart_us: at_us + down,
                torn_after,
            });
        }
    }
    plan.smart.trigger_victims = victims;
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn draw(opts: &SimOptions, seed: u64) -> Plan {
        Plan::draw(opts, &mut ChaCha8Rng::seed_from_u64(seed))
    }

    #[test]
    fn classic_draws_are_unchanged_by_the_smart_stream() {
        // `all` and `classic` agree on everything classic for every seed.
        // (`fake-answer` takes replica 0 over: `first_contact_plan.rs` has
        // its own test that it changes nothing else.)
        let mut everything_but = FaultSet::all();
        everything_but.remove(crate::faults::FaultKind::FakeAnswer);
        let all = SimOptions::new(OrderingMode::Cop, 4, 7).with_faults(everything_but);
        let classic = all.clone().with_faults(FaultSet::classic());
        for seed in 0..200 {
            let (a, c) = (draw(&all, seed), draw(&classic, seed));
            assert_eq!(a.drawn.intersect(FaultSet::classic()), c.drawn);
            let setup = a.setup();
            let classic_part = setup
                .split(" smart=")
                .next()
                .and_then(|s| s.split(" restart=").next());
            assert_eq!(classic_part, Some(c.setup().as_str()));
            assert_eq!(format!("{:?}", a.crashes), format!("{:?}", c.crashes));
            assert_eq!(format!("{:?}", a.partitions), format!("{:?}", c.partitions));
            if a.smart.drawn.iter().all(|k| !k.is_byzantine_replica()) {
                assert_eq!(a.byzantine, c.byzantine);
            } else if !c.byzantine.is_empty() {
                // Smart kinds may take the classic Byzantine replicas over.
                let ids = |p: &Plan| p.byzantine.iter().map(|(r, _)| *r).collect::<Vec<_>>();
                assert_eq!(ids(&a), ids(&c));
            }
        }
    }

    #[test]
    fn smart_plans_stay_within_the_fault_model() {
        for n in [4, 7] {
            let opts = SimOptions::new(OrderingMode::Pbft, 1, n).with_faults(FaultSet::all());
            let mut smart_seen = FaultSet::none();
            for seed in 0..300 {
                let p = draw(&opts, seed);
                smart_seen = smart_seen.union(p.smart.drawn);
                assert!(p.byzantine.len() <= opts.f());
                let byz: Vec<ReplicaId> = p.byzantine.iter().map(|(r, _)| *r).collect();
                for c in p.crashes.iter().chain(&p.smart.outages) {
                    assert!(!byz.contains(&c.replica), "only correct replicas crash");
                    assert!(c.at_us < c.restart_us);
                }
                for v in &p.smart.trigger_victims {
                    assert!(!byz.contains(v));
                }
                let past_heal = p
                    .smart
                    .outages
                    .iter()
                    .filter(|c| c.restart_us > p.heal_at_us)
                    .count();
                assert!(byz.len() + past_heal <= opts.f(), "seed {seed}");
            }
            assert_eq!(smart_seen, FaultSet::smart());
        }
    }

    #[test]
    fn outages_include_long_and_past_heal_ones() {
        let mut opts = SimOptions::new(OrderingMode::Cop, 4, 7).with_faults("outage".parse().unwrap());
        opts.fault_window_ms = 20_000;
        let (mut long, mut past) = (0, 0);
        for seed in 0..100 {
            let p = draw(&opts, seed);
            for c in &p.smart.outages {
                if c.restart_us > p.heal_at_us {
                    past += 1;
                } else if c.restart_us - c.at_us >= LONG_DOWN_MIN_US {
                    long += 1;
                }
            }
        }
        assert!(long > 20 && past > 20, "long {long} past-heal {past}");
    }
}
