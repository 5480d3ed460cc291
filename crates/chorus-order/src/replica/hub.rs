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
    /// RCC §III-E: instance assignments, from delivered switches. Shared
    /// with the groups' `HubFacts` (copied on write: switches are rare).
    pub(crate) assignments: Arc<Assignments>,
    /// Per peer: when we last re-sent it our checkpoint votes (`status_bundle.rs`).
    pub(crate) votes_sent: Vec<Option<Millis>>,
    /// `sarek` (SAREK §IV-D): re-prediction votes and certificates; they
    /// follow decisions of every partition (`ToHub::Decided`).
    pub(crate) repredictions: Option<crate::sarek::repredict::RePredictions>,
}

impl Hub {
    pub(crate) fn new(cfg: &Arc<ClusterConfig>, me: ReplicaId, identity: Identity) -> Hub {
        Hub {
            repredictions: (cfg.params.mode == chorus_core::OrderingMode::Sarek)
                .then(|| crate::sarek::repredict::RePredictions::new(cfg, me, identity.clone())),
            merger: Merger::new(cfg.clone()),
            checkpointer: Checkpointer::new(cfg.clone(), me, identity),
            transfer: StateTransfer::new(cfg.clone(), me),
            assignments: Arc::default(),
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
            streams: self.merger.stream_positions(),
            frontier: None,
        }
    }

    /// Bring a group's copy of the hub's facts up to date (what a
    /// `ToGroup` message will carry once groups run on their own threads):
    /// each part is copied only when it changed.
    pub(crate) fn update_facts(&self, cfg: &ClusterConfig, facts: &mut HubFacts, frontier: Option<Seq>) {
        let stable_seq = self.stable_seq();
        // The stable checkpoint only moves forward (`Checkpointer::adopt`),
        // so its position names the certificate.
        if facts.stable_seq != stable_seq
            || facts.stable.is_none() != self.checkpointer.stable_cert().is_none()
        {
            facts.stable = self.checkpointer.stable_cert().map(|c| Arc::new(c.clone()));
            facts.stable_seq = stable_seq;
        }
        facts.delivered_rounds = self.delivered_rounds(cfg);
        if facts
            .assignments
            .as_ref()
            .is_none_or(|a| !Arc::ptr_eq(a, &self.assignments))
        {
            facts.assignments = Some(self.assignments.clone());
        }
        match self.merger.stream_positions() {
            Some(p) if facts.streams.as_deref() != Some(p) => facts.streams = Some(p.to_vec()),
            Some(_) => {}
            None => facts.streams = None,
        }
        facts.frontier = frontier;
    }
}

/// A lane group's own copy of the hub's facts (`HubView` is built from it),
/// refreshed by `Hub::update_facts`. Every part only grows, so acting on an
/// older copy means proposing less, filling later, holding longer, never
/// something unsafe, provided the delivery point and the assignment table
/// come from the same instant (they are refreshed together).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct HubFacts {
    stable: Option<Arc<CheckpointCert>>,
    stable_seq: Seq,
    delivered_rounds: u64,
    /// `None` only before the first update (`Default` allocates nothing:
    /// `LaneGroup::run` swaps the facts out on every call).
    assignments: Option<Arc<Assignments>>,
    streams: Option<Vec<Slot>>,
    frontier: Option<Seq>,
}

/// The table before any switch, for facts not updated yet.
fn no_assignments() -> &'static Assignments {
    static NONE: std::sync::OnceLock<Assignments> = std::sync::OnceLock::new();
    NONE.get_or_init(Assignments::default)
}

impl HubFacts {
    pub(crate) fn view<'a>(&'a self, cfg: &'a ClusterConfig) -> HubView<'a> {
        HubView {
            stable: self.stable.as_deref(),
            stable_seq: self.stable_seq,
            owners: OwnerView {
                cfg,
                table: self.assignments.as_deref().unwrap_or_else(|| no_assignments()),
                delivered_rounds: self.delivered_rounds,
            },
            streams: self.streams.as_deref(),
            frontier: self.frontier,
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
    /// `sarek`: every lane's next slot to deliver (`delivered_round`, `stream_next`).
    streams: Option<&'a [Slot]>,
    /// The highest position any lane of the replica pre-prepared or decided
    /// (`LaneGroup::frontier`): set by the replica from every group's lanes.
    pub(crate) frontier: Option<Seq>,
}

impl HubView<'_> {
    /// `sarek`: the next slot lane `lane`'s delivery stream hands out.
    pub(crate) fn stream_next(&self, lane: LaneId) -> Option<Slot> {
        self.streams
            .map(|s| s.get(lane.index()).copied().unwrap_or(Slot(0)))
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
