//! The rcc part of a seed's fault plan (issue 10 item 6): which RCC-specific
//! Byzantine primaries run (`throttle`, `in-the-dark`, `censor`,
//! `order-attack`, `failure-spam`), on which replicas, and whether they keep
//! attacking after the network heals.
//!
//! Drawn only in rcc mode, from a third ChaCha stream of the seed's RNG
//! (`RCC_STREAM`), after the classic and the smart draws: seeds of the other
//! modes, and rcc seeds that draw none of these kinds, run exactly as before.

use crate::faults::{FaultKind, FaultSet};
use crate::options::SimOptions;
use crate::plan::Plan;
use chorus_core::{OrderingMode, ReplicaId};
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// The ChaCha stream the rcc draws come from (classic: 0, smart: `SMART_STREAM`).
pub const RCC_STREAM: u64 = 0x7cc0;
/// The stream the rcc adversaries draw from while the run goes on.
pub const RCC_ADVERSARY_STREAM: u64 = RCC_STREAM + 1;

#[derive(Clone, Debug, Default)]
pub struct RccPlan {
    /// Rcc kinds this seed drew (also in `Plan::drawn`).
    pub drawn: FaultSet,
    /// The rcc adversaries keep attacking after the network heals.
    pub persist: bool,
}

impl RccPlan {
    /// ` rcc=throttle,censor persist=no`, or nothing when no rcc kind was drawn.
    pub fn describe(&self) -> String {
        if self.drawn.is_empty() {
            return String::new();
        }
        format!(
            " rcc={} rcc-persist={}",
            self.drawn,
            if self.persist { "yes" } else { "no" }
        )
    }
}

/// The attacks on one client need the attacker to be the instance primary
/// that owns a correct client (`owner_lane(c) = c mod n`, RCC §III-B).
fn needs_client(kind: FaultKind) -> bool {
    matches!(kind, FaultKind::Censor | FaultKind::OrderAttack)
}

/// Draw the rcc kinds of `opts.faults` into `plan` (rcc mode only).
pub fn draw_rcc(opts: &SimOptions, plan: &mut Plan, rng: &mut ChaCha8Rng) {
    if opts.mode != OrderingMode::Rcc {
        return;
    }
    draw_rcc_replicas(opts, plan, rng);
    // After the replica kinds: their draws stay what they were before the
    // client kind existed.
    draw_rcc_clients(opts, plan, rng);
}

/// `switch-spam` (RCC §III-E): some of the seed's Byzantine clients (all of
/// them if no classic client kind was drawn) keep switching instance.
fn draw_rcc_clients(opts: &SimOptions, plan: &mut Plan, rng: &mut ChaCha8Rng) {
    let k = FaultKind::SwitchSpam;
    // Swarm testing draws each kind with a coin, but never an empty set.
    let skip = opts.swarm && !plan.drawn.is_empty() && !rng.gen_bool(0.5);
    if !opts.faults.contains(k) || opts.byzantine_clients == 0 || skip {
        return;
    }
    if plan.byz_clients.is_empty() {
        plan.byz_clients = vec![k; opts.byzantine_clients as usize];
    } else {
        for c in plan.byz_clients.iter_mut() {
            if rng.gen_bool(0.5) {
                *c = k;
            }
        }
        if !plan.byz_clients.contains(&k) {
            plan.byz_clients[0] = k;
        }
    }
    plan.drawn.insert(k);
    plan.rcc.drawn.insert(k);
}

fn draw_rcc_replicas(opts: &SimOptions, plan: &mut Plan, rng: &mut ChaCha8Rng) {
    let allowed: Vec<FaultKind> = opts
        .faults
        .intersect(FaultSet::rcc())
        .iter()
        .filter(|k| !k.is_byzantine_client())
        .collect();
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
    plan.rcc.persist = rng.gen_bool(0.5);
    let mut kinds: Vec<FaultKind> = drawn.iter().collect();
    if kinds.is_empty() {
        return;
    }
    kinds.shuffle(rng);
    let assigned = assign(opts, plan, &kinds, rng);
    // A kind that found no replica is not drawn (so `active` stays honest).
    let drawn = FaultSet::from_kinds(&assigned);
    plan.drawn = plan.drawn.union(drawn);
    plan.rcc.drawn = drawn;
}

/// Give the rcc kinds replicas; returns the kinds that got one. With
/// Byzantine replicas already drawn, a coin decides whether the rcc kinds
/// take them over; otherwise they take replicas that no crash or outage
/// schedule uses, within f together with the outages that outlast healing.
fn assign(opts: &SimOptions, plan: &mut Plan, kinds: &[FaultKind], rng: &mut ChaCha8Rng) -> Vec<FaultKind> {
    let owns_client = |r: ReplicaId| (r.0 as usize) < opts.clients as usize;
    let mut out = Vec::new();
    if !plan.byzantine.is_empty() {
        if !rng.gen_bool(0.5) {
            return out;
        }
        let mut free: Vec<usize> = (0..plan.byzantine.len()).collect();
        for &k in kinds {
            let pos = if needs_client(k) {
                free.iter()
                    .position(|&i| owns_client(plan.byzantine[i].0))
                    .unwrap_or(0)
            } else {
                free.iter()
                    .position(|&i| !owns_client(plan.byzantine[i].0))
                    .unwrap_or(0)
            };
            if free.is_empty() {
                break;
            }
            let i = free.remove(pos);
            plan.byzantine[i].1 = k;
            out.push(k);
        }
        for i in free {
            let k = *kinds.choose(rng).expect("non-empty");
            plan.byzantine[i].1 = k;
        }
        return out;
    }
    let busy = plan.scheduled_down();
    let count = plan.byzantine_room(opts);
    let mut free: Vec<ReplicaId> = (0..opts.n as u32)
        .map(ReplicaId)
        .filter(|r| !busy.contains(r))
        .collect();
    free.shuffle(rng);
    for i in 0..count {
        if free.is_empty() {
            break;
        }
        let k = if i < kinds.len() {
            kinds[i]
        } else {
            *kinds.choose(rng).expect("non-empty")
        };
        let pos = if needs_client(k) {
            free.iter().position(|r| owns_client(*r)).unwrap_or(0)
        } else {
            0
        };
        plan.byzantine.push((free.remove(pos), k));
        out.push(k);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn draw(opts: &SimOptions, seed: u64) -> Plan {
        Plan::draw(opts, &mut ChaCha8Rng::seed_from_u64(seed))
    }

    #[test]
    fn other_modes_and_non_rcc_draws_are_unchanged() {
        let rcc = SimOptions::new(OrderingMode::Rcc, 1, 4);
        let without = rcc
            .clone()
            .with_faults(FaultSet::classic().union(FaultSet::smart()));
        for seed in 0..200 {
            let (a, b) = (draw(&rcc, seed), draw(&without, seed));
            assert_eq!(format!("{:?}", a.crashes), format!("{:?}", b.crashes));
            assert_eq!(format!("{:?}", a.smart.outages), format!("{:?}", b.smart.outages));
            assert_eq!(a.drawn.intersect(FaultSet::rcc()), a.rcc.drawn);
            if a.rcc.drawn.is_empty() {
                assert_eq!(a.byzantine, b.byzantine, "seed {seed}");
            }
        }
        let cop = SimOptions::new(OrderingMode::Cop, 4, 4);
        for seed in 0..50 {
            assert!(draw(&cop, seed).rcc.drawn.is_empty());
        }
    }

    #[test]
    fn rcc_plans_stay_within_the_fault_model_and_draw_every_kind() {
        for n in [4, 7] {
            let opts = SimOptions::new(OrderingMode::Rcc, 1, n);
            let mut seen = FaultSet::none();
            for seed in 0..300 {
                let p = draw(&opts, seed);
                seen = seen.union(p.rcc.drawn);
                assert!(p.byzantine.len() <= opts.f(), "seed {seed}");
                for k in p.rcc.drawn.iter().filter(|k| !k.is_byzantine_client()) {
                    assert!(
                        p.byzantine.iter().any(|(_, b)| *b == k),
                        "seed {seed}: {k} unassigned"
                    );
                }
                let byz: Vec<ReplicaId> = p.byzantine.iter().map(|(r, _)| *r).collect();
                for c in p.crashes.iter().chain(&p.smart.outages) {
                    assert!(
                        !byz.contains(&c.replica),
                        "seed {seed}: only correct replicas crash"
                    );
                }
            }
            assert_eq!(seen, FaultSet::rcc(), "n={n}");
        }
    }

    #[test]
    fn a_single_rcc_kind_always_gets_a_client_owning_replica() {
        let opts = SimOptions::new(OrderingMode::Rcc, 1, 4).with_faults("censor".parse().unwrap());
        for seed in 0..50 {
            let p = draw(&opts, seed);
            assert_eq!(p.byzantine.len(), 1);
            assert_eq!(p.byzantine[0].1, FaultKind::Censor);
            assert!((p.byzantine[0].0 .0 as usize) < opts.clients as usize);
        }
    }
}
