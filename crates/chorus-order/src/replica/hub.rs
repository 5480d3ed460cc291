//! The replica-wide part of the ordering core: what every lane's decisions
//! feed and what every lane reads back (docs/lane-split.md, "Hub"). Lanes
//! never hold a reference to it; `Replica` hands them what they need per
//! call (`LaneEnv`, `OwnerView`). Once consensus runs in the pillars, this
//! is the part that stays on one thread and talks to the pillars' lane
//! groups by bounded messages (COP §4: merger and checkpoints are
//! cross-lane work).

use crate::checkpoint::Checkpointer;
use crate::merger::Merger;
use crate::rcc_switch::OwnerView;
use crate::transfer::StateTransfer;
use chorus_core::{
    Assignments, CheckpointCert, ClusterConfig, Identity, LaneId, Millis, ReplicaId, Seq, Slot,
};
use std::sync::Arc;

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub(crate) struct Hub {
    /// Decided cells into one total order (pbft / cop positions, rcc
    /// rounds, dispel epochs, sarek streams).
    pub(crate) merger: Merger,
    pub(crate) checkpointer: Checkpointer,
    pub(crate) transfer: StateTransfer,
    /// RCC §III-E: instance assignments, from delivered switches.
    pub(crate) assignments: Assignments,
    /// Per peer: when we last re-sent it our checkpoint votes (`status_bundle.rs`).
    pub(crate) votes_sent: Vec<Option<Millis>>,
}

impl Hub {
    pub(crate) fn new(cfg: &Arc<ClusterConfig>, me: ReplicaId, identity: Identity) -> Hub {
        Hub {
            merger: Merger::new(cfg.clone()),
            checkpointer: Checkpointer::new(cfg.clone(), me, identity),
            transfer: StateTransfer::new(cfg.clone(), me),
            assignments: Assignments::default(),
            votes_sent: vec![None; cfg.n()],
        }
    }

    // What the rest of the replica reads of the hub. After the split these
    // are the facts a pillar's lanes hold a copy of (`HubView`,
    // docs/lane-split.md §1): each only grows, so a stale copy is "less".

    /// The next global position to deliver.
    pub(crate) fn delivered(&self) -> Seq {
        self.merger.next()
    }

    /// Whole rounds delivered (every lane's slot of each): RCC's round
    /// counter, which instance switches take effect by (RCC §III-E).
    pub(crate) fn delivered_rounds(&self, cfg: &ClusterConfig) -> u64 {
        self.merger.next().0 / cfg.lanes() as u64
    }

    /// The stable checkpoint's position (0 at genesis).
    pub(crate) fn stable_seq(&self) -> Seq {
        self.checkpointer.stable_seq()
    }

    /// Who owns which client's requests, as the lanes see it: the
    /// assignment table and the rounds delivered so far (RCC §III-E).
    pub(crate) fn owner_view<'a>(&'a self, cfg: &'a ClusterConfig) -> OwnerView<'a> {
        OwnerView {
            cfg,
            table: &self.assignments,
            delivered_rounds: self.delivered_rounds(cfg),
        }
    }

    /// Everything a lane group reads of the hub, taken at one instant.
    pub(crate) fn view<'a>(&'a self, cfg: &'a ClusterConfig) -> HubView<'a> {
        HubView {
            stable: self.checkpointer.stable_cert(),
            stable_seq: self.stable_seq(),
            owners: self.owner_view(cfg),
            merger: &self.merger,
            frontier: None,
        }
    }
}

/// The hub's facts a lane group acts on (docs/lane-split.md §1, "read by
/// both"), one consistent snapshot: the stable checkpoint, and the delivery
/// point together with the assignment table it belongs to (the
/// SWITCHINSTANCE argument in `rcc_switch.rs` holds for a stale but
/// consistent pair, not for a mixed one). Each fact only grows, so a
/// group acting on an older view does less, never something unsafe. Built
/// by reference, per call: the certificate and the table are not copied
/// on the hot path; once groups run on their own threads the view becomes
/// the group's own copy, replaced when the hub's facts change.
pub(crate) struct HubView<'a> {
    /// The stable checkpoint certificate (carried in VIEW-CHANGE).
    pub(crate) stable: Option<&'a CheckpointCert>,
    pub(crate) stable_seq: Seq,
    /// Ownership at the rounds delivered so far (RCC §III-E); its
    /// `delivered_rounds` is the delivery point in rounds.
    pub(crate) owners: OwnerView<'a>,
    /// Read only for the delivery point (`delivered_round`, `stream_next`).
    merger: &'a Merger,
    /// The highest position any lane of the replica pre-prepared or decided
    /// (`LaneGroup::frontier`): set by the replica from every group's lanes.
    pub(crate) frontier: Option<Seq>,
}

impl HubView<'_> {
    /// `sarek`: the next slot lane `lane`'s delivery stream hands out.
    pub(crate) fn stream_next(&self, lane: LaneId) -> Option<Slot> {
        self.merger.stream_next(lane)
    }

    /// The round (slot) delivery of lane `lane` has reached: in `sarek`
    /// its own stream's, elsewhere the merger's.
    pub(crate) fn delivered_round(&self, lane: LaneId) -> u64 {
        match self.stream_next(lane) {
            Some(s) => s.0,
            None => self.owners.delivered_rounds,
        }
    }
}
