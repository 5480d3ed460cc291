//! The fault plan of one seed, drawn from the seed's RNG before the run
//! starts: which kinds are active (swarm testing), which replicas are
//! Byzantine and how, when replicas crash and restart, which partitions form
//! and heal, how clocks drift. Everything ends by `heal_at_us`, except a
//! `cluster-restart` (`restart_plan.rs`), whose last replica may come back
//! after it (liveness deadlines start then).

use crate::clock::Clock;
use crate::faults::{FaultKind, FaultSet};
use crate::net::{LinkFaults, Partition, PartitionKind};
use crate::options::SimOptions;
use crate::queue::Micros;
pub use crate::smart_plan::SmartPlan;
use chorus_core::{ClientAuthKind, LeaderRotation, OrderingMode, ReplicaId};
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// A crash of a correct replica and its restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrashPlan {
    pub replica: ReplicaId,
    pub at_us: Micros,
    pub restart_us: Micros,
    /// `Some(k)`: the crash tears the next batch of actions after `k` of them
    /// (persist-before-send must make that safe); `None`: between events.
    pub torn_after: Option<u32>,
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub drawn: FaultSet,
    pub client_auth: ClientAuthKind,
    /// pbft: fixed (the view's primary); cop: fixed or block-wise (COP §4.3.2).
    pub leader_rotation: LeaderRotation,
    pub compact_store: bool,
    pub heal_at_us: Micros,
    pub link_faults: LinkFaults,
    pub partitions: Vec<Partition>,
    pub crashes: Vec<CrashPlan>,
    /// Clock of each replica id.
    pub clocks: Vec<Clock>,
    /// Byzantine replicas and their fault model (`Twins` = two copies).
    pub byzantine: Vec<(ReplicaId, FaultKind)>,
    /// Fault model of each Byzantine client.
    pub byz_clients: Vec<FaultKind>,
    /// The smart draws (`smart_plan.rs`): empty unless a smart kind is allowed.
    pub smart: SmartPlan,
    /// The rcc draws (`rcc_plan.rs`): empty unless the mode is rcc and an rcc kind is allowed.
    pub rcc: crate::rcc_plan::RccPlan,
    /// `cluster-restart` (`restart_plan.rs`): every correct replica's
    /// crash and restart, empty unless drawn.
    pub restarts: Vec<CrashPlan>,
    /// …one after the other (a rolling upgrade) rather than all at once.
    pub rolling_restart: bool,
}

/// Crashes start no earlier than this and restart at least this long before heal.
const CRASH_MARGIN_US: Micros = 100_000;
const DOWNTIME_MIN_US: Micros = 100_000;
const DOWNTIME_MAX_US: Micros = 1_000_000;

/// The plan of `seed`, as a run draws it (for the draw modules' tests).
#[cfg(test)]
pub(crate) fn draw_seed(opts: &SimOptions, seed: u64) -> Plan {
    use rand::SeedableRng;
    Plan::draw(opts, &mut ChaCha8Rng::seed_from_u64(seed))
}

impl Plan {
    pub fn draw(opts: &SimOptions, rng: &mut ChaCha8Rng) -> Plan {
        // The classic kinds are drawn from `rng` exactly as before the smart
        // kinds existed, the smart ones from a second stream of the same seed.
        let mut smart_rng = rng.clone();
        smart_rng.set_stream(crate::smart_plan::SMART_STREAM);
        let classic_opts = SimOptions {
            faults: opts.faults.intersect(FaultSet::classic()),
            ..opts.clone()
        };
        let mut plan = Plan::draw_classic(&classic_opts, rng);
        crate::smart_plan::draw_smart(opts, &mut plan, &mut smart_rng);
        let mut rcc_rng = rng.clone();
        rcc_rng.set_stream(crate::rcc_plan::RCC_STREAM);
        crate::rcc_plan::draw_rcc(opts, &mut plan, &mut rcc_rng);
        let mut first_contact_rng = rng.clone();
        first_contact_rng.set_stream(crate::first_contact_plan::FIRST_CONTACT_STREAM);
        crate::first_contact_plan::draw_fake_answer(opts, &mut plan, &mut first_contact_rng);
        let mut restart_rng = rng.clone();
        restart_rng.set_stream(crate::restart_plan::RESTART_STREAM);
        crate::restart_plan::draw_cluster_restart(opts, &mut plan, &mut restart_rng);
        plan
    }

    fn draw_classic(opts: &SimOptions, rng: &mut ChaCha8Rng) -> Plan {
        let heal_at_us = opts.fault_window_ms * 1_000;
        let drawn = draw_kinds(opts, rng);
        let n = opts.n;
        let byzantine = draw_byzantine(opts, drawn, rng);
        let correct: Vec<ReplicaId> = (0..n as u32)
            .map(ReplicaId)
            .filter(|r| !byzantine.iter().any(|(b, _)| b == r))
            .collect();
        // Drawn even when overridden, so the rest of the seed stays the same.
        let drawn_auth = if rng.gen_bool(0.25) {
            ClientAuthKind::Signature
        } else {
            ClientAuthKind::MacVector
        };
        let client_auth = opts.client_auth.unwrap_or(drawn_auth);
        let compact_store = rng.gen_bool(0.5);
        let drawn_rotation = match opts.mode {
            OrderingMode::Cop if rng.gen_bool(0.5) => LeaderRotation::BlockWise,
            _ => LeaderRotation::Fixed,
        };
        // Drawn even when overridden, so the rest of the seed stays the same.
        let leader_rotation = match opts.mode {
            OrderingMode::Cop => opts.rotation.unwrap_or(drawn_rotation),
            // RCC's leaders are fixed by instance; rotation does not apply.
            // Dispel has no leaders at all.
            OrderingMode::Pbft | OrderingMode::Rcc | OrderingMode::Dispel => drawn_rotation,
            // SAREK §IV-A: one (preferred) leader per partition and view.
            OrderingMode::Sarek => chorus_core::LeaderRotation::Fixed,
        };
        let link_faults = LinkFaults {
            loss_ppm: ppm_if(drawn, FaultKind::Loss, rng, 5_000..=50_000),
            dup_ppm: ppm_if(drawn, FaultKind::Duplicate, rng, 5_000..=50_000),
            reorder_ppm: ppm_if(drawn, FaultKind::Reorder, rng, 50_000..=200_000),
            spike_ppm: ppm_if(drawn, FaultKind::Delay, rng, 5_000..=20_000),
            slow_link_ppm: ppm_if(drawn, FaultKind::Delay, rng, 100_000..=300_000),
        };
        let mut partitions = Vec::new();
        for (kind, fault) in [(FaultKind::Partition, false), (FaultKind::AsymPartition, true)] {
            if drawn.contains(kind) {
                for _ in 0..rng.gen_range(1..=2) {
                    partitions.push(draw_partition(n, heal_at_us, fault, rng));
                }
            }
        }
        let crashes = if drawn.contains(FaultKind::Crash) {
            draw_crashes(opts.f().max(1), &correct, heal_at_us, rng)
        } else {
            vec![]
        };
        let clocks = (0..n)
            .map(|_| {
                if drawn.contains(FaultKind::Skew) {
                    Clock::skewed(rng.gen_range(0..=500_000), rng.gen_range(950_000..=1_050_000))
                } else {
                    Clock::exact()
                }
            })
            .collect();
        let client_kinds: Vec<FaultKind> = drawn.iter().filter(|k| k.is_byzantine_client()).collect();
        let byz_clients = if client_kinds.is_empty() {
            vec![]
        } else {
            (0..opts.byzantine_clients)
                .map(|_| *client_kinds.choose(rng).expect("non-empty"))
                .collect()
        };
        Plan {
            drawn,
            client_auth,
            leader_rotation,
            compact_store,
            heal_at_us,
            link_faults,
            partitions,
            crashes,
            clocks,
            byzantine,
            byz_clients,
            smart: SmartPlan::default(),
            rcc: Default::default(),
            restarts: Vec::new(),
            rolling_restart: false,
        }
    }

    pub fn is_byzantine(&self, r: ReplicaId) -> Option<FaultKind> {
        self.byzantine.iter().find(|(b, _)| *b == r).map(|(_, k)| *k)
    }

    /// Replicas a crash or outage schedule (or a smart trigger) uses: the
    /// later draws make none of them Byzantine.
    pub(crate) fn scheduled_down(&self) -> Vec<ReplicaId> {
        self.crashes
            .iter()
            .chain(&self.smart.outages)
            .map(|c| c.replica)
            .chain(self.smart.trigger_victims.iter().copied())
            .collect()
    }

    /// How many Byzantine replicas the later draws may have in all: within
    /// f together with the outages that outlast healing.
    pub(crate) fn byzantine_room(&self, opts: &SimOptions) -> usize {
        let past_heal = self
            .smart
            .outages
            .iter()
            .filter(|c| c.restart_us > self.heal_at_us)
            .count();
        opts.byzantine_replicas().min(opts.f().saturating_sub(past_heal))
    }

    /// The drawn setup that is not a fault, e.g. `auth=mac-vector rotation=fixed storage=compacting`.
    pub fn setup(&self) -> String {
        let smart = self.smart.describe() + &self.rcc.describe() + &crate::restart_plan::describe(self);
        let auth = match self.client_auth {
            ClientAuthKind::MacVector => "mac-vector",
            ClientAuthKind::Signature => "signature",
        };
        let rotation = match self.leader_rotation {
            LeaderRotation::Fixed => "fixed",
            LeaderRotation::BlockWise => "block-wise",
        };
        let storage = if self.compact_store {
            "compacting"
        } else {
            "full-log"
        };
        format!("auth={auth} rotation={rotation} storage={storage}{smart}")
    }

    /// When the last replica of a `cluster-restart` is back (0 without one).
    pub fn last_cluster_restart_us(&self) -> Micros {
        self.restarts.iter().map(|c| c.restart_us).max().unwrap_or(0)
    }

    /// `r1=equivocate` strings for reports.
    pub fn byzantine_names(&self) -> Vec<String> {
        self.byzantine.iter().map(|(r, k)| format!("{r:?}={k}")).collect()
    }
}

fn ppm_if(
    drawn: FaultSet,
    kind: FaultKind,
    rng: &mut ChaCha8Rng,
    range: std::ops::RangeInclusive<u32>,
) -> u32 {
    if drawn.contains(kind) {
        rng.gen_range(range)
    } else {
        0
    }
}

/// Swarm testing: a random non-empty subset of the allowed kinds.
fn draw_kinds(opts: &SimOptions, rng: &mut ChaCha8Rng) -> FaultSet {
    let allowed: Vec<FaultKind> = opts.faults.iter().collect();
    if allowed.is_empty() {
        return FaultSet::none();
    }
    if !opts.swarm || allowed.len() <= 1 {
        return opts.faults;
    }
    let mut set = FaultSet::none();
    for k in &allowed {
        if rng.gen_bool(0.5) {
            set.insert(*k);
        }
    }
    if set.is_empty() {
        set.insert(*allowed.choose(rng).expect("non-empty"));
    }
    set
}

pub(crate) fn draw_byzantine(
    opts: &SimOptions,
    drawn: FaultSet,
    rng: &mut ChaCha8Rng,
) -> Vec<(ReplicaId, FaultKind)> {
    let kinds: Vec<FaultKind> = drawn.iter().filter(|k| k.is_byzantine_replica()).collect();
    let count = opts.byzantine_replicas();
    if kinds.is_empty() || count == 0 {
        return vec![];
    }
    let mut ids: Vec<ReplicaId> = (0..opts.n as u32).map(ReplicaId).collect();
    ids.shuffle(rng);
    // The first primary leads most of a short pbft run: make it Byzantine often.
    if opts.mode == OrderingMode::Pbft && rng.gen_bool(0.5) {
        let pos = ids
            .iter()
            .position(|r| *r == ReplicaId(0))
            .expect("replica 0 exists");
        ids.swap(0, pos);
    }
    // Each drawn kind gets a replica before any kind gets a second one.
    let mut order = kinds.clone();
    order.shuffle(rng);
    ids.into_iter()
        .take(count)
        .enumerate()
        .map(|(i, r)| {
            (
                r,
                if i < order.len() {
                    order[i]
                } else {
                    *kinds.choose(rng).expect("non-empty")
                },
            )
        })
        .collect()
}

fn draw_partition(n: usize, heal_at_us: Micros, asymmetric: bool, rng: &mut ChaCha8Rng) -> Partition {
    let mut ids: Vec<u32> = (0..n as u32).collect();
    ids.shuffle(rng);
    let size = rng.gen_range(1..=(n / 2).max(1));
    let from_us = rng.gen_range(0..heal_at_us / 2 + 1);
    let until_us = rng.gen_range(from_us..=heal_at_us);
    let kind = if !asymmetric {
        PartitionKind::Symmetric
    } else if rng.gen_bool(0.5) {
        PartitionKind::OutboundBlocked
    } else {
        PartitionKind::InboundBlocked
    };
    Partition {
        group: ids[..size].to_vec(),
        kind,
        from_us,
        until_us,
    }
}

/// Up to `max_down` distinct correct replicas crash (so at most that many are
/// down at once), each once or twice, and are back before the network heals.
pub(crate) fn draw_crashes(
    max_down: usize,
    correct: &[ReplicaId],
    heal_at_us: Micros,
    rng: &mut ChaCha8Rng,
) -> Vec<CrashPlan> {
    let latest_restart = heal_at_us.saturating_sub(CRASH_MARGIN_US);
    if latest_restart < CRASH_MARGIN_US + DOWNTIME_MIN_US || correct.is_empty() {
        return vec![];
    }
    let mut victims = correct.to_vec();
    victims.shuffle(rng);
    let count = rng.gen_range(1..=max_down.min(victims.len()));
    let mut plans = Vec::new();
    for &replica in &victims[..count] {
        let mut t = CRASH_MARGIN_US;
        for _ in 0..rng.gen_range(1..=2) {
            if t + DOWNTIME_MIN_US > latest_restart {
                break;
            }
            let at_us = rng.gen_range(t..=latest_restart - DOWNTIME_MIN_US);
            let restart_us = (at_us + rng.gen_range(DOWNTIME_MIN_US..=DOWNTIME_MAX_US)).min(latest_restart);
            let torn_after = rng.gen_bool(0.5).then(|| rng.gen_range(0..6));
            plans.push(CrashPlan {
                replica,
                at_us,
                restart_us,
                torn_after,
            });
            t = restart_us + CRASH_MARGIN_US;
        }
    }
    plans
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn plans_respect_bounds() {
        for seed in 0..300 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let opts = SimOptions::new(OrderingMode::Cop, 4, 7);
            let plan = Plan::draw(&opts, &mut rng);
            assert!(!plan.drawn.is_empty());
            assert!(plan.byzantine.len() <= opts.f());
            for (r, k) in &plan.byzantine {
                assert!(k.is_byzantine_replica() && plan.drawn.contains(*k));
                assert!(
                    plan.crashes.iter().all(|c| c.replica != *r),
                    "only correct replicas crash"
                );
            }
            let mut per_replica: std::collections::BTreeMap<ReplicaId, Micros> = Default::default();
            for c in &plan.crashes {
                assert!(c.at_us < c.restart_us && c.restart_us < plan.heal_at_us);
                let last = per_replica.entry(c.replica).or_insert(0);
                assert!(c.at_us >= *last, "a replica's crashes do not overlap");
                *last = c.restart_us;
            }
            assert!(per_replica.len() <= opts.f());
            for p in &plan.partitions {
                assert!(p.until_us <= plan.heal_at_us && !p.group.is_empty() && p.group.len() <= 3);
            }
            assert_eq!(plan.clocks.len(), 7);
        }
    }

    #[test]
    fn swarm_draws_vary_and_no_swarm_takes_everything() {
        let opts = SimOptions::new(OrderingMode::Pbft, 1, 4);
        let draws: std::collections::BTreeSet<_> = (0..50)
            .map(|s| {
                Plan::draw(&opts, &mut ChaCha8Rng::seed_from_u64(s))
                    .drawn
                    .to_string()
            })
            .collect();
        assert!(draws.len() > 40);
        let mut all = opts.clone();
        all.swarm = false;
        let p = Plan::draw(&all, &mut ChaCha8Rng::seed_from_u64(1));
        // The rcc kinds are drawn in rcc mode only.
        assert_eq!(
            p.drawn,
            FaultSet::classic()
                .union(FaultSet::smart())
                .union(FaultSet::ops()),
            "fake-answer too if replica 0 is Byzantine or there is room (not at this seed)"
        );
        assert_eq!(p.byzantine.len(), 1);
        assert_eq!(p.byz_clients.len(), 2);
    }

    /// `--client-auth` overrides the drawn authenticator and nothing else:
    /// the seed's faults, crashes and Byzantine replicas stay the same.
    #[test]
    fn a_chosen_client_auth_leaves_the_rest_of_the_seed_alone() {
        for seed in 0..40 {
            let opts = SimOptions::new(OrderingMode::Cop, 4, 7);
            let drawn = Plan::draw(&opts, &mut ChaCha8Rng::seed_from_u64(seed));
            for auth in [ClientAuthKind::MacVector, ClientAuthKind::Signature] {
                let chosen = SimOptions {
                    client_auth: Some(auth),
                    ..opts.clone()
                };
                let p = Plan::draw(&chosen, &mut ChaCha8Rng::seed_from_u64(seed));
                assert_eq!(p.client_auth, auth);
                assert_eq!(
                    format!(
                        "{:?}",
                        Plan {
                            client_auth: drawn.client_auth,
                            ..p
                        }
                    ),
                    format!("{drawn:?}")
                );
            }
        }
    }

    #[test]
    fn f_plus_one_twins_when_asked() {
        let mut opts = SimOptions::new(OrderingMode::Pbft, 1, 4).with_faults("twins".parse().unwrap());
        opts.byzantine = Some(2);
        let p = Plan::draw(&opts, &mut ChaCha8Rng::seed_from_u64(3));
        assert_eq!(p.byzantine.len(), 2);
        assert!(p.byzantine.iter().all(|(_, k)| *k == FaultKind::Twins));
    }

    #[test]
    fn same_seed_same_plan() {
        let opts = SimOptions::new(OrderingMode::Cop, 4, 4);
        let a = Plan::draw(&opts, &mut ChaCha8Rng::seed_from_u64(77));
        let b = Plan::draw(&opts, &mut ChaCha8Rng::seed_from_u64(77));
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
    }
}
