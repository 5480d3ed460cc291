//! A lane: one PBFT instance over the slots of one lane (PBFT §4.2–§4.5,
//! COP §4.2.1).
//!
//! * Normal case (`normal.rs`): the leader of a cell, `config.leader(cell,
//!   view)` (COP §4.3.2), pre-prepares a batch; backups verify it and
//!   broadcast signed prepares; 2f matching prepares make it prepared, 2f+1
//!   matching commits decide it.
//! * View change (`view_change.rs`, `plan.rs`, `timer.rs`): PBFT §4.4 per lane,
//!   with the §4.5.2 liveness rules (exponential back-off, joining when f+1
//!   replicas ask for a higher view).
//! * Watermarks (`watermarks.rs`): slots in `[low, low + window_slots)`; `low`
//!   follows the stable checkpoint.
//! * Catch-up (`catchup.rs`): status exchange, retransmission, `Decided`
//!   notices and batch fetch.
//! * Recovery (`recovery.rs`): rebuilding from persisted records without ever
//!   sending something that contradicts what was sent before the crash.
//!
//! A lane talks to the rest of the replica only through its method arguments
//! (`Cx`, `LaneEnv`) and return values (`LaneOutput`), so the runtime can run
//! each lane on its own pillar thread.

mod catchup;
mod normal;
mod penalty;
mod plan;
mod preferred;
mod recovery;
mod restart_probe;
pub(crate) mod slot;
mod throttle;
mod timeout_cert;
mod timer;
mod view_change;
mod watermarks;

pub use plan::{plan_new_view, NewViewPlan};

use crate::buffer::FutureBuffer;
use crate::counters::Cx;
use crate::sigkeys::ReplicaKeys;
use crate::verify::{RequestVerifier, VerifiedHint};
use chorus_core::{
    Batch, Cell, CheckpointCert, ClusterConfig, ClusterTag, Digest, Exclusion, Identity, LaneId, Millis,
    NewView, PublicIdentity, ReplicaId, ReplicaMsg, Seq, Slot, View, ViewChange,
};
use penalty::Penalties;
use slot::SlotState;
use std::collections::BTreeMap;
use std::sync::Arc;
use timer::ProgressTimer;

/// Views at or above this are refused, so `view + 1` never overflows.
pub const MAX_VIEW: u64 = u64::MAX / 4;
/// Slots whose messages are re-sent to one lagging peer per status message.
pub const RETRANSMIT_SLOTS: usize = 16;
/// `Decided` notices sent to one lagging peer per status message.
pub const DECIDED_PER_STATUS: usize = 64;
/// Of those, at most this many for slots above our own first undecided
/// one (`Lane::on_status`).
pub const DECIDED_ABOVE_GAP_PER_STATUS: usize = 16;

/// Read-only facts the lane needs from other components, passed in by the
/// composite for each call.
pub struct LaneEnv<'a> {
    /// The stable checkpoint certificate (carried in VIEW-CHANGE).
    pub stable: Option<&'a CheckpointCert>,
    pub stable_seq: Seq,
    /// Requests the pool already verified.
    pub hint: &'a dyn VerifiedHint,
    /// Which lane may carry a client's request in a round (RCC §III-E).
    pub owners: &'a dyn crate::rcc_switch::OwnerOracle,
    /// The replica's wall clock (`Replica::set_wall_clock`): a fresh batch
    /// may carry a time at most `max_clock_skew_ms` above it.
    pub wall_ms: u64,
}

/// A decided cell of this lane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub slot: Slot,
    pub digest: Digest,
    pub batch: Arc<Batch>,
}

/// What a lane call produced for the other components.
#[derive(Default, Debug)]
pub struct LaneOutput {
    /// Newly decided slots, in the order decided (for the merger and the pool).
    pub decided: Vec<Decision>,
    /// Batches accepted in a pre-prepare: their requests are in flight.
    pub pre_prepared: Vec<(Slot, Arc<Batch>)>,
    /// A new view voided every earlier proposal at or above this slot.
    pub release_from: Option<Slot>,
    /// A valid stable checkpoint above ours, learnt from a NEW-VIEW.
    pub higher_stable: Option<CheckpointCert>,
    /// RCC §III-E: authentic pre-prepares whose requests' owner is not known
    /// here yet; the replica holds them until delivery catches up.
    pub owner_held: Vec<(ReplicaId, chorus_core::PrePrepare)>,
}

impl LaneOutput {
    pub fn is_empty(&self) -> bool {
        self.decided.is_empty()
            && self.pre_prepared.is_empty()
            && self.release_from.is_none()
            && self.higher_stable.is_none()
            && self.owner_held.is_empty()
    }
}

/// The re-proposal range of the current view: slot `low + i` carries
/// `digests[i]`, pre-prepared by the new-view primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NvRange {
    pub low: Slot,
    pub digests: Vec<Digest>,
}

impl NvRange {
    pub fn end(&self) -> Slot {
        Slot(self.low.0 + self.digests.len() as u64)
    }

    pub fn digest(&self, slot: Slot) -> Option<Digest> {
        if slot < self.low {
            return None;
        }
        self.digests.get((slot.0 - self.low.0) as usize).copied()
    }
}

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub(crate) struct StoredVc {
    pub vc: ViewChange,
    /// Full validation is deferred until the view change is used.
    pub valid: Option<bool>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum WantReason {
    /// f+1 replicas said the slot is decided with this digest.
    Decided,
    /// We are the new-view primary and must pre-prepare this digest.
    Reproposal,
}

/// A batch we need and are fetching.
#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub(crate) struct Want {
    pub digest: Digest,
    pub reason: WantReason,
    pub candidates: Vec<ReplicaId>,
    pub tries: u32,
    pub last: Millis,
}

/// Whether a normal-case message can be handled now.
pub(crate) enum Admit {
    Now,
    /// Future view (or we are changing view), or above the window.
    Buffer,
    /// Older view or below the window.
    Stale,
}

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub struct Lane {
    pub(crate) id: LaneId,
    pub(crate) cfg: Arc<ClusterConfig>,
    pub(crate) me: ReplicaId,
    pub(crate) identity: Identity,
    /// What every signature this lane makes or checks is bound to (`domain.rs`).
    pub(crate) tag: ClusterTag,
    pub(crate) verifier: RequestVerifier,
    /// Replica keys, parsed once (normal-case signature checks).
    pub(crate) keys: ReplicaKeys,
    /// The view we are in, or changing to when `!active`.
    pub(crate) view: View,
    pub(crate) active: bool,
    pub(crate) nv: Option<NvRange>,
    /// The NEW-VIEW of the current view, re-sent to replicas still behind.
    pub(crate) nv_msg: Option<NewView>,
    /// After recovery we never assemble a NEW-VIEW for the view we recovered
    /// into: we may have sent one before the crash and must not send another.
    pub(crate) nv_forbidden: Option<View>,
    /// Recovery: our own records of slots above the replayed window, applied
    /// once the window reaches them (`recovery.rs`).
    pub(crate) recovered_above: std::collections::BTreeMap<Slot, Vec<recovery::Deferred>>,
    /// Deferred `Decided` records the window reached: handed to the merger
    /// with the next lane output (`replay`, `finish_recovery`).
    pub(crate) recovered_decisions: Vec<Decision>,
    pub(crate) low: Slot,
    pub(crate) slots: BTreeMap<Slot, SlotState>,
    pub(crate) next_undecided: Slot,
    pub(crate) max_seen: Option<Slot>,
    pub(crate) buffer: FutureBuffer,
    pub(crate) needs_replay: bool,
    pub(crate) vcs: BTreeMap<ReplicaId, StoredVc>,
    pub(crate) own_vc: Option<ViewChange>,
    /// Our VIEW-CHANGE for the current view waits for the window to reach
    /// recovered records (`view_change.rs`, `send_own_view_change`).
    pub(crate) vc_withheld: bool,
    pub(crate) timer: ProgressTimer,
    /// When the current view became active: a waiting request gets a full
    /// timeout in each view before it counts as censored.
    pub(crate) view_started: Millis,
    pub(crate) progressed: bool,
    pub(crate) notices: BTreeMap<Slot, BTreeMap<ReplicaId, Digest>>,
    pub(crate) wants: BTreeMap<Slot, Want>,
    pub(crate) nv_sent: Vec<Option<Millis>>,
    /// Whom we blamed for view changes, merged with what NEW-VIEWs excluded.
    pub(crate) penalties: Penalties,
    /// The current view's excluded leaders (from its NEW-VIEW; none in view 0).
    pub(crate) excluded: Vec<Exclusion>,
    /// Each peer's last reported `next_undecided` of this lane, its view,
    /// and when.
    pub(crate) peer_next: Vec<Option<(Slot, View, Millis)>>,
    /// The highest slot in `peer_next` (never lowered): while ours is at or
    /// above it no peer is ahead, and `catching_up` need not look at each
    /// (it ran for every lane after every event: O(n²) per event in rcc).
    pub(crate) peer_next_max: Slot,
    /// Each replica's (ours included) highest verified signed statement
    /// that it gave up on this lane's views up to some view
    /// (`timeout_cert.rs`).
    pub(crate) timeouts: Vec<Option<chorus_core::Timeout>>,
    /// When we last relayed a timeout certificate to each peer.
    pub(crate) tc_sent: Vec<Option<Millis>>,
    /// Our timer expired in this view: we signed a timeout for it and wait
    /// for a certificate (2f+1 of them, `timeout_cert.rs`).
    pub(crate) suspecting: bool,
    /// Recovered and not yet heard from f+1 peers: the timer waits.
    pub(crate) awaiting_peers: bool,
    /// A stable checkpoint above `env.stable` that a NEW-VIEW proved and our
    /// low follows (see `install_new_view`); our VIEW-CHANGEs carry it.
    pub(crate) learnt_stable: Option<CheckpointCert>,
}

impl Lane {
    pub fn new(cfg: Arc<ClusterConfig>, id: LaneId, me: ReplicaId, identity: Identity) -> Lane {
        assert!(id.0 < cfg.lanes(), "lane {id:?} out of range");
        assert!(me.index() < cfg.n(), "replica {me:?} out of range");
        let n = cfg.n();
        Lane {
            id,
            verifier: RequestVerifier::new(cfg.clone(), me, identity.clone()),
            keys: ReplicaKeys::new(&cfg),
            tag: ClusterTag::of(&cfg),
            buffer: FutureBuffer::new(n, cfg.params.future_msgs_per_peer as usize),
            cfg,
            me,
            identity,
            view: View(0),
            active: true,
            nv: None,
            nv_msg: None,
            nv_forbidden: None,
            recovered_above: std::collections::BTreeMap::new(),
            recovered_decisions: Vec::new(),
            low: Slot(0),
            slots: BTreeMap::new(),
            next_undecided: Slot(0),
            max_seen: None,
            needs_replay: false,
            vcs: BTreeMap::new(),
            own_vc: None,
            vc_withheld: false,
            timer: ProgressTimer::default(),
            view_started: Millis(0),
            progressed: false,
            notices: BTreeMap::new(),
            wants: BTreeMap::new(),
            nv_sent: vec![None; n],
            penalties: Penalties::new(n),
            excluded: Vec::new(),
            peer_next: vec![None; n],
            peer_next_max: Slot(0),
            timeouts: vec![None; n],
            tc_sent: vec![None; n],
            suspecting: false,
            awaiting_peers: false,
            learnt_stable: None,
        }
    }

    pub fn id(&self) -> LaneId {
        self.id
    }

    pub fn view(&self) -> View {
        self.view
    }

    /// `false` while a view change is in progress.
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// The low watermark: the first slot above the stable checkpoint.
    pub fn low(&self) -> Slot {
        self.low
    }

    /// First slot above the window.
    pub fn high(&self) -> Slot {
        Slot(self.low.0.saturating_add(self.cfg.params.window_slots))
    }

    pub fn next_undecided(&self) -> Slot {
        self.next_undecided
    }

    /// The highest slot with a pre-prepare or a decision we know of.
    pub fn max_seen_slot(&self) -> Option<Slot> {
        self.max_seen
    }

    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    pub(crate) fn cell(&self, slot: Slot) -> Cell {
        Cell { lane: self.id, slot }
    }

    pub(crate) fn seq_of(&self, slot: Slot) -> Seq {
        self.cfg.seq_of(self.cell(slot))
    }

    pub(crate) fn key(&self, r: ReplicaId) -> Option<PublicIdentity> {
        self.cfg.replica(r).map(|i| i.identity)
    }

    pub(crate) fn slot_mut(&mut self, slot: Slot) -> &mut SlotState {
        debug_assert!(
            slot >= self.low && slot < self.high(),
            "slot {slot:?} outside the window"
        );
        self.slots.entry(slot).or_default()
    }

    pub(crate) fn note_seen(&mut self, slot: Slot) {
        self.max_seen = Some(self.max_seen.map_or(slot, |m| m.max(slot)));
    }

    pub(crate) fn advance_next_undecided(&mut self) {
        while self
            .slots
            .get(&self.next_undecided)
            .is_some_and(|s| s.decided.is_some())
        {
            self.next_undecided = self.next_undecided.next();
        }
    }

    /// PBFT §4.2 accepts normal-case messages only in the current view and
    /// inside the window; later ones wait, older ones are useless.
    pub(crate) fn classify(&self, view: View, slot: Slot) -> Admit {
        if view < self.view || slot < self.low {
            return Admit::Stale;
        }
        if view > self.view || !self.active || slot >= self.high() {
            return Admit::Buffer;
        }
        Admit::Now
    }

    pub(crate) fn park(&mut self, cx: &mut Cx, from: ReplicaId, msg: ReplicaMsg) {
        if self.buffer.push(from, msg) {
            cx.counters.buffered += 1;
        } else {
            cx.reject("buffer-full");
        }
    }

    /// Handle one message addressed to this lane. `from` is the authenticated
    /// channel's peer, never a claimed id.
    pub fn handle_message(
        &mut self,
        cx: &mut Cx,
        from: ReplicaId,
        msg: ReplicaMsg,
        env: &LaneEnv,
    ) -> LaneOutput {
        let mut lo = LaneOutput::default();
        if from.index() >= self.cfg.n() || from == self.me {
            cx.reject("bad-sender");
            return lo;
        }
        if msg.lane() != Some(self.id) {
            cx.reject("bad-lane");
            return lo;
        }
        self.dispatch(cx, from, msg, env, &mut lo);
        self.replay(cx, env, &mut lo);
        lo
    }

    pub(crate) fn dispatch(
        &mut self,
        cx: &mut Cx,
        from: ReplicaId,
        msg: ReplicaMsg,
        env: &LaneEnv,
        lo: &mut LaneOutput,
    ) {
        match msg {
            ReplicaMsg::PrePrepare(m) => self.on_pre_prepare(cx, from, m, env, lo),
            ReplicaMsg::Prepare(m) => self.on_prepare(cx, from, m, lo),
            ReplicaMsg::Commit(m) => {
                let (slot, digest) = (m.slot, m.digest);
                let known = |l: &Lane| l.slots.get(&slot).is_some_and(|s| s.commits.contains_key(&from));
                let new = !known(self);
                self.on_commit(cx, from, m, lo);
                // Only a commit that counted can ask (a retransmitted one
                // must not, or the answers' retransmissions would loop).
                if new && known(self) {
                    self.ask_committers_for_decision(cx, slot, digest, env.stable_seq);
                }
            }
            ReplicaMsg::ViewChange(m) => self.on_view_change(cx, from, m, env, lo),
            ReplicaMsg::NewView(m) => self.on_new_view(cx, from, m, env, lo),
            ReplicaMsg::Status(m) => self.on_status(cx, from, m),
            ReplicaMsg::Decided(m) => self.on_decided_notice(cx, from, m, lo),
            ReplicaMsg::FetchBatch(m) => self.on_fetch(cx, from, m),
            ReplicaMsg::BatchReply(m) => self.on_batch_reply(cx, from, m, lo),
            ReplicaMsg::Timeout(m) => self.on_timeout(cx, m, env, lo),
            ReplicaMsg::Checkpoint(_)
            | ReplicaMsg::StateRequest(_)
            | ReplicaMsg::StateChunk(_)
            | ReplicaMsg::Dbft(_)
            | ReplicaMsg::RePredict(_)
            | ReplicaMsg::Unverifiable(_)
            | ReplicaMsg::Statuses(_) => cx.reject("not-a-lane-message"),
        }
    }

    /// Re-handle parked messages after the view or the window moved.
    pub(crate) fn replay(&mut self, cx: &mut Cx, env: &LaneEnv, lo: &mut LaneOutput) {
        // Each round is triggered by a view or window change, which only move
        // forward; a handful of rounds is plenty, the bound keeps it obvious.
        for _ in 0..8 {
            if !self.needs_replay {
                break;
            }
            self.needs_replay = false;
            for (from, msg) in self.buffer.drain() {
                self.dispatch(cx, from, msg, env, lo);
            }
        }
        // A window move may have reached recovered decisions (`recovery.rs`).
        lo.decided.append(&mut self.recovered_decisions);
    }
}
