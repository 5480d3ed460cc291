//! RCC §III-E `SWITCHINSTANCE(c, j)` in the ordering layer.
//!
//! The switch is agreed by delivering it: every correct replica applies the
//! delivered request to the same `Assignments` table at the same round `r`
//! (`chorus_core::switch`). Ownership of client `c` in round `ρ` is then a
//! pure function of delivered history, `owner_at(c, ρ)`: the old lane for
//! `ρ <= r + σ`, the new one above.
//!
//! * A proposer in lane `L` cuts a request of `c` into round `ρ` only if `L`
//!   is `c`'s owner after every switch it delivered (the old primary stops at
//!   once, as the paper asks) *and* `owner_at(c, ρ) = L` (the new one waits
//!   for `ρ > r + σ`). A correct primary proposes `ρ` only after delivering
//!   every round `<= ρ - σ` (`Replica::proposal_limit`), so it knows every
//!   switch that can decide `owner_at(c, ρ)`.
//! * A backup checking round `ρ` of lane `L` knows the answer once it
//!   delivered every round `<= ρ - σ - 1`; before that a switch still to be
//!   delivered could change it, so the pre-prepare is *held* (never held
//!   against the primary) and re-examined as delivery advances
//!   (`SwitchGate::release`).
//!
//! No overlap: a switch delivered at `r` was not delivered by a correct old
//! primary before it proposed rounds `<= r - 1 + σ`, and those are `<= r + σ`
//! (old owner); the new primary proposes only rounds `> r + σ`.

use crate::io::RejectReason;
use chorus_core::{
    switch_target, Assignments, ClientId, ClusterConfig, LaneId, OrderingMode, PrePrepare, ReplicaId,
    Request, Slot, SwitchPolicy,
};
use std::collections::BTreeMap;

/// May `lane` carry this request in `round`, as far as this replica knows?
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    Owned,
    NotOwned(&'static str),
    /// A switch not yet delivered here could still decide it.
    Unknown,
}

/// The ownership question a lane asks about a proposed request.
pub trait OwnerOracle {
    fn ownership(&self, lane: LaneId, round: Slot, req: &Request) -> Ownership;
}

/// The policy of a configuration: `m` and `σ`.
pub fn policy(cfg: &ClusterConfig) -> SwitchPolicy {
    // The executor uses `SwitchPolicy::of`: the same two numbers.
    SwitchPolicy {
        lanes: cfg.lanes(),
        sigma: cfg.params.max_lane_drift_slots,
    }
}

fn is_rcc(cfg: &ClusterConfig) -> bool {
    cfg.params.mode == OrderingMode::Rcc
}

/// The lane a request is queued and proposed in: a switch in its target
/// (never in the old owner, which may be the censor), any other request in
/// its client's current owner.
pub fn request_lane(cfg: &ClusterConfig, table: &Assignments, req: &Request) -> LaneId {
    if is_rcc(cfg) {
        if let Some(j) = switch_target(req).filter(|j| *j < cfg.lanes()) {
            return LaneId(j);
        }
        return table.owner(&policy(cfg), req.client);
    }
    cfg.owner_lane(req.client)
}

/// Admission of a switch request (before the pool): only in `rcc`, to an
/// existing instance that is not the client's owner already.
pub fn admission_check(cfg: &ClusterConfig, table: &Assignments, req: &Request) -> Result<(), RejectReason> {
    if !req.is_switch() {
        return Ok(());
    }
    if !is_rcc(cfg) {
        return Err(RejectReason::BadSwitch);
    }
    match switch_target(req) {
        Some(j) if j < cfg.lanes() && LaneId(j) != table.owner(&policy(cfg), req.client) => Ok(()),
        _ => Err(RejectReason::BadSwitch),
    }
}

/// Ownership as known at a replica that delivered `delivered_rounds` rounds
/// (rounds `0 .. delivered_rounds`).
pub struct OwnerView<'a> {
    pub cfg: &'a ClusterConfig,
    pub table: &'a Assignments,
    pub delivered_rounds: u64,
}

impl OwnerOracle for OwnerView<'_> {
    fn ownership(&self, lane: LaneId, round: Slot, req: &Request) -> Ownership {
        if !is_rcc(self.cfg) {
            if req.is_switch() {
                return Ownership::NotOwned("switch-not-rcc");
            }
            return if self.cfg.owner_lane(req.client) == lane {
                Ownership::Owned
            } else {
                Ownership::NotOwned("wrong-lane-request")
            };
        }
        if req.is_switch() {
            return match switch_target(req) {
                Some(j) if j == lane.0 && j < self.cfg.lanes() => Ownership::Owned,
                _ => Ownership::NotOwned("wrong-lane-switch"),
            };
        }
        let p = policy(self.cfg);
        // Every switch delivered at a round <= ρ - σ - 1 is known here.
        if self.delivered_rounds.saturating_add(p.sigma) < round.0 {
            return Ownership::Unknown;
        }
        if self.table.owner_at(&p, req.client, round) == lane {
            Ownership::Owned
        } else {
            Ownership::NotOwned("wrong-lane-request")
        }
    }
}

/// May the proposer of `lane` put `req` into `round`? (See the module doc:
/// the current owner only, and only once `owner_at` agrees.)
pub fn may_propose(view: &OwnerView, lane: LaneId, round: Slot, req: &Request) -> bool {
    let owned = view.ownership(lane, round, req);
    debug_assert!(
        owned != Ownership::Unknown,
        "a correct primary proposes only rounds whose owners it knows"
    );
    if owned != Ownership::Owned {
        return false;
    }
    req.is_switch() || !is_rcc(view.cfg) || view.table.owner(&policy(view.cfg), req.client) == lane
}

/// Pre-prepares held until this replica knows who owns their requests.
/// At most one per (lane, slot): bounded by lanes × window.
#[derive(Debug, Default)]
#[cfg_attr(test, derive(Clone))]
pub struct SwitchGate {
    held: BTreeMap<(LaneId, Slot), (ReplicaId, PrePrepare)>,
}

impl SwitchGate {
    /// Hold `pp` (already authenticated as the slot's proposer's by the
    /// lane). One of a newer view replaces the held one (the old view's is
    /// void); another of the same view is dropped: the lane sees the first
    /// on release and detects an equivocation when the second comes again.
    pub fn hold(&mut self, cap: usize, from: ReplicaId, pp: PrePrepare) -> bool {
        let key = (pp.lane, pp.slot);
        match self.held.get(&key) {
            Some((_, old)) if old.view >= pp.view => return false,
            Some(_) => {}
            None if self.held.len() >= cap => return false,
            None => {}
        }
        self.held.insert(key, (from, pp));
        true
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// The held pre-prepares whose rounds are now decidable (delivered
    /// `delivered_rounds` rounds): `ρ <= delivered_rounds + σ`.
    pub fn release(&mut self, delivered_rounds: u64, sigma: u64) -> Vec<(ReplicaId, PrePrepare)> {
        let known = delivered_rounds.saturating_add(sigma);
        let ready: Vec<(LaneId, Slot)> = self
            .held
            .keys()
            .filter(|(_, slot)| slot.0 <= known)
            .copied()
            .collect();
        ready.into_iter().filter_map(|k| self.held.remove(&k)).collect()
    }

    /// State transfer or a fresh start: what was held belongs to the old
    /// position; the primaries retransmit.
    pub fn clear(&mut self) {
        self.held.clear();
    }
}

/// Clients whose current owner differs from the default, for the pool.
pub fn overrides(cfg: &ClusterConfig, table: &Assignments) -> Vec<(ClientId, LaneId)> {
    let p = policy(cfg);
    table
        .iter()
        .map(|(c, h)| (*c, LaneId(h.to)))
        .filter(|(c, l)| *l != p.default_owner(*c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{Batch, Signature, View};

    fn pp(lane: u32, view: u64, slot: u64) -> PrePrepare {
        let batch = Batch::noop();
        PrePrepare {
            lane: LaneId(lane),
            view: View(view),
            slot: Slot(slot),
            digest: batch.digest(),
            batch,
            sig: Signature([0; 64]),
        }
    }

    /// Bounded, one per cell, a newer view replaces an older one, and a
    /// cell is released once `ρ <= delivered + σ`.
    #[test]
    fn the_gate_is_bounded_and_releases_by_round() {
        let mut g = SwitchGate::default();
        let r = ReplicaId(1);
        assert!(g.hold(2, r, pp(1, 0, 9)));
        assert!(!g.hold(2, r, pp(1, 0, 9)), "same view: the first stays");
        assert!(g.hold(2, r, pp(1, 1, 9)), "a newer view replaces it");
        assert!(g.hold(2, r, pp(2, 0, 7)));
        assert!(!g.hold(2, r, pp(3, 0, 7)), "at the cap");
        assert_eq!(g.len(), 2);
        assert!(g.release(2, 4).is_empty());
        let out = g.release(3, 4);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].1.lane, out[0].1.slot), (LaneId(2), Slot(7)));
        let out = g.release(5, 4);
        assert_eq!(out[0].1.view, View(1));
        assert!(g.is_empty());
    }
}
