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
use chorus_core::{Assignments, ClusterConfig, Identity, Millis, ReplicaId};
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

    /// Who owns which client's requests, as the lanes see it: the
    /// assignment table and the rounds delivered so far (RCC §III-E).
    pub(crate) fn owner_view<'a>(&'a self, cfg: &'a ClusterConfig) -> OwnerView<'a> {
        OwnerView {
            cfg,
            table: &self.assignments,
            delivered_rounds: self.merger.next().0 / cfg.lanes() as u64,
        }
    }
}
