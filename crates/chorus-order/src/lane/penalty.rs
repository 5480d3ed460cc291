//! Leaders that cost a view change leave the block-wise rotation for a while
//! (RCC §III-C: a primary that failed is replaced for a period that doubles
//! with every repeated failure; SAREK's preferred leader in spirit).
//!
//! With block-wise rotation a silent replica leads every n-th slot of every
//! lane, and each of those slots costs a view-change timeout. Each replica
//! keeps a local record of whom it blamed for leaving a view (the leader of
//! the slot the lane was stuck at, or the new-view primary that never sent
//! NEW-VIEW). The local record never decides a leader by itself: the
//! new-view primary copies its record into the NEW-VIEW (`excluded`, at most
//! f entries), which is signed and validated with the rest, so every replica
//! that enters the view through that NEW-VIEW computes the same leader for
//! every slot (`roles::slot_leader_in`). Replicas merge the exclusions of
//! every NEW-VIEW they accept into their record, so the next primary knows
//! them even if it did not see the failures itself.
//!
//! Safety does not depend on who leads: a correct replica pre-prepares or
//! prepares at most one digest per (view, slot), whoever it believes leads,
//! and a prepared certificate is checked against its actual signer
//! (`certs::pre_prepare_signer`). A Byzantine primary that names correct
//! replicas only moves load for a bounded number of slots.

use chorus_core::{ClusterConfig, Exclusion, LaneId, LeaderRotation, ReplicaId, Slot, View};

/// RCC's restart penalty grows as `2^k` rounds; beyond `2^20` (a million
/// rounds of no-ops) it stops growing, so the arithmetic stays bounded.
pub(crate) const RCC_MAX_STOP_SHIFT: u32 = 20;

/// RCC §III-C, Fig. 4 (lines 9–12): what `stop(i; E)` decides besides the
/// recovered proposals. Our NEW-VIEW for lane `i` in view `v` is the stop:
/// its 2f+1 VIEW-CHANGEs are `E` (each a FAILURE carrying the sender's
/// prepared state), its re-proposals the recovered state up to round `ρ`
/// (the last re-proposed slot), and instance `i` resumes at round
/// `ρ + σ · 2^k` (`rcc_round_unit`) with `k = v`, the number of stops of `i` so far (each view of an RCC lane
/// above 0 began with one). Until then the instance is stopped: the
/// coordinating leader proposes its rounds (the requests of the instance's
/// clients, or no-ops when other instances are ahead), so neither the round
/// merge nor those clients wait for the stopped primary
/// (`roles::slot_leader_in`; docs/decisions.md, "RCC").
///
/// `fresh` is the first slot after the re-proposals, `ρ + 1`. A pure
/// function of the NEW-VIEW, so every replica that accepts it computes the
/// same stop; a Byzantine leader that sends different NEW-VIEWs to different
/// replicas only changes who may pre-prepare which slot, which PBFT's
/// one-digest-per-(view, slot) rule makes harmless (module comment).
pub(crate) fn rcc_stop(cfg: &ClusterConfig, lane: LaneId, view: View, fresh: Slot) -> Exclusion {
    debug_assert!(view.0 >= 1, "view 0 has no stop");
    let k = view.0.clamp(1, RCC_MAX_STOP_SHIFT as u64) as u32;
    let rounds = rcc_round_unit(cfg).saturating_mul(1u64 << k);
    Exclusion {
        replica: cfg.instance_primary(lane),
        failures: k,
        until: Slot(fresh.0.saturating_add(rounds - 1)),
    }
}

/// The penalty's unit: `σ` rounds (`max_lane_drift_slots`) rather than one.
/// A stop costs a failure-detection timeout, during which the other
/// instances run at most `σ` rounds ahead; restarting a crashed primary
/// after 2 rounds would only buy another timeout at once. With `σ · 2^k`
/// a primary that stays down costs O(log t) timeouts over a time t, as in
/// the paper, but the first ones are not wasted on a handful of rounds
/// (docs/decisions.md, "RCC").
pub(crate) fn rcc_round_unit(cfg: &ClusterConfig) -> u64 {
    cfg.params.max_lane_drift_slots.max(1)
}

/// The exclusion doubles with each failure up to 2^6 windows.
pub(crate) const MAX_PENALTY_SHIFT: u32 = 6;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Penalty {
    /// View changes this replica was blamed for (saturating).
    pub failures: u32,
    /// Excluded from leading slots below this one.
    pub until: Slot,
}

#[derive(Debug, Default)]
#[cfg_attr(test, derive(Clone))]
pub(crate) struct Penalties {
    pub by_replica: Vec<Penalty>,
}

/// Slots a replica is excluded for after its `failures`-th failure.
pub(crate) fn penalty_slots(cfg: &ClusterConfig, failures: u32) -> u64 {
    let shift = failures.saturating_sub(1).min(MAX_PENALTY_SHIFT);
    cfg.params.window_slots.max(1).saturating_mul(1 << shift)
}

/// The furthest an exclusion may reach above the first fresh slot of a view.
pub(crate) fn max_exclusion_reach(cfg: &ClusterConfig) -> u64 {
    penalty_slots(cfg, MAX_PENALTY_SHIFT + 1).saturating_add(cfg.params.window_slots)
}

impl Penalties {
    pub fn new(n: usize) -> Penalties {
        Penalties {
            by_replica: vec![Penalty::default(); n],
        }
    }

    /// `r` cost a view change while the lane was stuck at `at`.
    pub fn blame(&mut self, cfg: &ClusterConfig, r: ReplicaId, at: Slot) {
        let Some(p) = self.by_replica.get_mut(r.index()) else {
            return;
        };
        p.failures = p.failures.saturating_add(1).min(MAX_PENALTY_SHIFT + 1);
        let until = Slot(at.0.saturating_add(penalty_slots(cfg, p.failures)));
        p.until = p.until.max(until);
    }

    /// Merge the exclusions of a NEW-VIEW we accepted.
    pub fn adopt(&mut self, excluded: &[Exclusion]) {
        for e in excluded {
            if let Some(p) = self.by_replica.get_mut(e.replica.index()) {
                p.failures = p.failures.max(e.failures.min(MAX_PENALTY_SHIFT + 1));
                p.until = p.until.max(e.until);
            }
        }
    }

    /// Should a view whose new-view primary is `primary` get only a short
    /// wait, the lane being stuck at `at`? Yes when the primary is among the
    /// (at most f) replicas our next NEW-VIEW would exclude there
    /// (`exclusions`; block-wise rotation only). Never more than f: a record
    /// that blames correct replicas too (a partition) must not cycle through
    /// views without giving any primary time. (Seed 3100075, cop n=7: after
    /// the slot leader r0 failed, the next two new-view primaries were the
    /// silent r6 and r0 itself, and waiting out each with the full back-off
    /// stalled every lane 3.6 s.)
    pub fn short_wait_for(&self, cfg: &ClusterConfig, primary: ReplicaId, at: Slot) -> bool {
        self.exclusions(cfg, at).iter().any(|e| e.replica == primary)
    }

    /// What a NEW-VIEW whose fresh slots start at `from` excludes: the (at
    /// most f) replicas still penalised there, most-failed first. Only
    /// block-wise rotation has per-slot leaders to skip.
    pub fn exclusions(&self, cfg: &ClusterConfig, from: Slot) -> Vec<Exclusion> {
        if cfg.params.leader_rotation != LeaderRotation::BlockWise {
            return Vec::new();
        }
        let reach = Slot(from.0.saturating_add(max_exclusion_reach(cfg)));
        let mut out: Vec<Exclusion> = self
            .by_replica
            .iter()
            .enumerate()
            .filter(|(_, p)| p.until > from)
            .map(|(i, p)| Exclusion {
                replica: ReplicaId(i as u32),
                failures: p.failures,
                until: p.until.min(reach),
            })
            .collect();
        out.sort_by(|a, b| (b.failures, b.until, a.replica).cmp(&(a.failures, a.until, b.replica)));
        out.truncate(cfg.f());
        out.sort_by_key(|e| e.replica);
        out
    }
}

/// A NEW-VIEW's exclusions are well-formed: at most f distinct replicas, only
/// with block-wise rotation, none reaching further than a primary could have
/// blamed (a Byzantine primary cannot exclude anyone for ever).
pub(crate) fn check_exclusions(
    cfg: &ClusterConfig,
    excluded: &[Exclusion],
    from: Slot,
) -> Result<(), &'static str> {
    if excluded.is_empty() {
        return Ok(());
    }
    if cfg.params.leader_rotation != LeaderRotation::BlockWise || excluded.len() > cfg.f() {
        return Err("nv-bad-exclusions");
    }
    let reach = from.0.saturating_add(max_exclusion_reach(cfg));
    let mut last: Option<ReplicaId> = None;
    for e in excluded {
        if e.replica.index() >= cfg.n()
            || last.is_some_and(|l| e.replica <= l)
            || e.failures == 0
            || e.failures > MAX_PENALTY_SHIFT + 1
            || e.until.0 > reach
        {
            return Err("nv-bad-exclusions");
        }
        last = Some(e.replica);
    }
    Ok(())
}
