//! `Replica`: the composite the simulator and the runtime drive.
//!
//! It owns one `Lane` per lane, the `Pool`, and the replica-wide `Hub`
//! (`Merger`, `Checkpointer`, `StateTransfer`, RCC assignments: the part
//! that stays in one place when the lanes move into their pillars,
//! docs/lane-split.md), and wires them together with plain method calls:
//! lanes return `LaneOutput`s (decisions, in-flight batches) that the replica
//! hands to the pool and the merger; the merger yields deliveries that tell
//! the checkpointer when to snapshot; stable checkpoints move every lane's
//! watermark. No component holds a reference to another.
//!
//! After every event the replica *settles*: leaders propose what they may,
//! the merger delivers what is contiguous, and the lane timers are refreshed.

mod dispel;
mod group;
mod hub;
mod missing_copies;
mod piece;
mod recover;
mod repredict;
mod status_bundle;
mod switch;

use crate::checkpoint::{StableCheckpoint, VoteOutcome};
use crate::counters::{Counters, Cx};
use crate::io::{Action, Event, Outbox, PersistRecord, TimerId};
use crate::lane::Lane;
use crate::pool::Admitted;
use crate::sarek::Predictor;
use crate::transfer::Installed;
use crate::verify::reject_reason_name;
use bytes::Bytes;
use chorus_core::{
    CheckpointCert, ClusterConfig, Digest, Identity, LaneId, Limits, Millis, OrderingMode, ReplicaId,
    ReplicaMsg, Request, Seq, Slot, Validate, View,
};
use std::sync::Arc;

/// A snapshot of where a replica stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaStatus {
    pub me: ReplicaId,
    /// The next global position to deliver.
    pub next_delivery: Seq,
    /// The stable checkpoint (0 = genesis).
    pub stable_seq: Seq,
    /// Each lane's view (the target view while changing).
    pub views: Vec<View>,
    /// Each lane: is a view change in progress?
    pub view_changing: Vec<bool>,
    /// Each lane's first undecided slot.
    pub next_undecided: Vec<Slot>,
    /// Requests held by the pool.
    pub pool_len: usize,
    /// Per lane, what decides whether it proposes: why a lane is idle.
    pub lanes: Vec<LaneStatus>,
    pub counters: Counters,
    /// Checkpoints whose stable certificate disagreed with our own state
    /// digest (the executor diverged; state transfer repairs it).
    pub state_divergences: u64,
}

/// One lane's proposal state (`chorus status --json`, debugging a stall).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaneStatus {
    /// Requests waiting to be proposed in this lane.
    pub pending: usize,
    /// The next slot this replica would propose in, and the bound on it.
    pub next_free_slot: Slot,
    pub proposal_limit: Slot,
    /// Pre-prepared, undecided slots of the current view (up to the pipeline depth).
    pub open_slots: usize,
    /// When the progress timer fires (virtual/real ms), if armed.
    pub timer_deadline: Option<u64>,
    /// Pool requests in flight in this lane, and the slots they sit at.
    pub in_flight: (usize, Option<Slot>, Option<Slot>),
    pub next_undecided: Slot,
    /// Pool entries in flight at a cell that does not list them (all lanes).
    pub orphaned: usize,
    /// Who proposes the lane's next free slot in its current view.
    pub proposer: ReplicaId,
    /// RCC §III-C: the round the stopped instance resumes at, while stopped.
    pub stopped_until: Option<Slot>,
    /// Who assembles the NEW-VIEW of the lane's current view (RCC: the
    /// coordinating leader `L_i` that proposes the stop).
    pub new_view_primary: ReplicaId,
    /// `sarek`: the next slot the lane's delivery stream hands out.
    pub stream_next: Option<Slot>,
}

/// `Debug` covers the whole protocol state of every component (and is what
/// the fuzz tests compare before and after a rejected message, so a field
/// added anywhere is covered without touching them). `Clone` exists only in
/// tests: two live copies of one replica could sign conflicting messages.
#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub struct Replica {
    pub(crate) cfg: Arc<ClusterConfig>,
    pub(crate) me: ReplicaId,
    pub(crate) limits: Limits,
    /// The lanes, their pools and timers (`group.rs`): in `cop` and `sarek`
    /// one group per lane (a pillar's, COP §4), in the other modes one group
    /// with every lane (docs/lane-split.md §4). Group `g` holds the lanes
    /// `l ≡ g (mod groups)`.
    pub(crate) groups: Vec<group::LaneGroup>,
    /// Merger, checkpoints, state transfer, RCC assignments: the
    /// replica-wide part (`hub.rs`).
    pub(crate) hub: hub::Hub,
    /// The hub and the groups run apart (`set_pieces_apart`): they talk
    /// only through `internal`, which the driver carries (with a delay, as
    /// between threads). Otherwise every message is handled at once and a
    /// group reads the hub's facts as they are.
    pub(crate) apart: bool,
    pub(crate) internal: Vec<Internal>,
    /// Apart: each group's last reported frontier, and the facts last sent it.
    pub(crate) group_frontiers: Vec<Option<Seq>>,
    pub(crate) facts_sent: Vec<hub::HubFacts>,
    /// Apart (every mode but dispel): the groups as pieces of
    /// their own (`groups` is empty then), handed the events `piece_of`
    /// names; and how many `split_groups` took out to run elsewhere.
    pub(crate) pieces: Vec<GroupPiece>,
    pub(crate) detached: usize,
    pub(crate) counters: Counters,
    pub(crate) status_deadline: Option<Millis>,
    /// `dispel` only: the DBFT lanes, in place of the PBFT `lanes` (empty then).
    pub(crate) dispel: Option<Box<crate::dispel::DispelCore>>,
    /// The driver's wall clock (ms since the Unix epoch), `set_wall_clock`:
    /// stamped on the batches we cut and bounding the time of the ones we
    /// accept. Not `now`, which is local and monotonic (DESIGN §2).
    pub(crate) wall_ms: u64,
    /// `sarek`: PREDICT(), to hand a request to the group of a partition it
    /// touches (`request_group`).
    pub(crate) predictor: Option<Predictor>,
}

/// Lane groups of a replica (`Replica::groups`). In `cop` every lane is a
/// pillar's (COP §4: a pillar runs whole instances of its lane), so each
/// gets its own group, and so does every `sarek` partition (SAREK §IV:
/// one PBFT leader per partition; a request several partitions order
/// reaches the others' groups through the hub, `ToHub::ForLane`). The
/// other modes keep one group for now: `rcc` moves clients between lanes
/// (SWITCHINSTANCE), which crosses groups (docs/lane-split.md §4); `dispel`
/// has no PBFT lanes; `pbft` has one.
fn group_count(cfg: &ClusterConfig) -> usize {
    match cfg.params.mode {
        OrderingMode::Cop | OrderingMode::Sarek => cfg.lanes().max(1) as usize,
        _ => 1,
    }
}

/// The lane whose group admits a client's request: its client's owner
/// lane, or in `sarek` a partition `predictor` names (none: every
/// partition, as for a service without access sets; `sarek::entry_lane`).
/// The runtime's pillars hand a request to that lane's group
/// (`Replica::request_lane`).
pub fn request_lane(cfg: &ClusterConfig, predictor: Option<&Predictor>, req: &Request) -> LaneId {
    let owner = cfg.owner_lane(req.client);
    if cfg.params.mode != OrderingMode::Sarek {
        return owner;
    }
    let predicted = match predictor {
        Some(p) => p.lanes(cfg, &req.op),
        None => Predictor::everything().lanes(cfg, &req.op),
    };
    crate::sarek::entry_lane(&predicted, owner)
}

/// What every peer message must pass before any part of the replica reads
/// it: a sender of the configuration other than us, and the codec's bounds.
pub(crate) fn check_peer_message(
    cfg: &ClusterConfig,
    me: ReplicaId,
    limits: &Limits,
    from: ReplicaId,
    msg: &ReplicaMsg,
) -> Result<(), &'static str> {
    if from.index() >= cfg.n() {
        return Err("bad-sender");
    }
    if from == me {
        return Err("self-message");
    }
    if let Err(e) = msg.validate(limits) {
        tracing::debug!(?from, error = %e, "invalid message");
        return Err("invalid-bounds");
    }
    Ok(())
}

/// The highest position pre-prepared or decided in any group's lanes.
fn frontier_of(groups: &[group::LaneGroup]) -> Option<Seq> {
    groups.iter().filter_map(|g| g.own_frontier()).max()
}

/// A message between the hub and a lane group of one replica while they
/// run apart (`Replica::set_pieces_apart`).
#[derive(Clone, Debug)]
pub struct Internal(InternalKind);

#[derive(Clone, Debug)]
enum InternalKind {
    ToHub {
        from: usize,
        msg: group::ToHub,
    },
    /// `facts`: the hub's facts as of this message, when they changed since
    /// the last ones the group was sent, applied together with it (an
    /// `Installed` must not meet a group that saw the jump but not the
    /// install).
    ToGroup {
        to: usize,
        msg: group::ToGroup,
        facts: Option<Box<hub::HubFacts>>,
    },
}

impl Internal {
    /// Who sends and who receives it: `None` is the hub, `Some(g)` group `g`.
    /// Messages of one channel must arrive in the order they were sent.
    pub fn channel(&self) -> (Option<usize>, Option<usize>) {
        match &self.0 {
            InternalKind::ToHub { from, .. } => (Some(*from), None),
            InternalKind::ToGroup { to, .. } => (None, Some(*to)),
        }
    }

    /// Whether a driver whose channel to the group is backed up may drop
    /// this message: a `sarek` hand-on of a client's request to another
    /// partition (`ToGroup::ForLane`, admitted), which the request's
    /// decision or the client's retransmission hands on again; not a
    /// decided one (nothing else would), and not one that carries the
    /// hub's facts (counted as sent, they would not be sent again).
    pub fn may_drop(&self) -> bool {
        matches!(
            &self.0,
            InternalKind::ToGroup {
                msg: group::ToGroup::ForLane { admitted: true, .. },
                facts: None,
                ..
            }
        )
    }

    /// Whether `later`, sent right after this message on the same channel,
    /// makes it redundant: this one only hands the group the hub's facts
    /// and `later` hands it newer ones (a whole snapshot the group takes in
    /// place of its copy), so a driver whose channel is full may keep just
    /// `later`.
    pub fn superseded_by(&self, later: &Internal) -> bool {
        match (&self.0, &later.0) {
            (
                InternalKind::ToGroup {
                    to,
                    msg: group::ToGroup::Facts(_),
                    ..
                },
                InternalKind::ToGroup {
                    to: later_to,
                    msg,
                    facts,
                },
            ) => to == later_to && (matches!(msg, group::ToGroup::Facts(_)) || facts.is_some()),
            _ => false,
        }
    }

    /// `self`, a facts-only message waiting for its group, folded into
    /// `later`, sent right after it on the same channel and relying on the
    /// facts it carries (`facts: None`): `later` then carries them itself
    /// (applied before its message, as they would have been), and
    /// `self` is no longer needed. Both back, unchanged, when this does
    /// not apply.
    pub fn fold_into(self, later: Internal) -> Result<Internal, Box<(Internal, Internal)>> {
        match (self.0, later.0) {
            (
                InternalKind::ToGroup {
                    to,
                    msg: group::ToGroup::Facts(f),
                    facts: None,
                },
                InternalKind::ToGroup {
                    to: later_to,
                    msg,
                    facts: None,
                },
            ) if to == later_to && !matches!(msg, group::ToGroup::Facts(_)) => {
                Ok(Internal(InternalKind::ToGroup {
                    to,
                    msg,
                    facts: Some(Box::new(f)),
                }))
            }
            (earlier, later) => Err(Box::new((Internal(earlier), Internal(later)))),
        }
    }
}

pub use piece::GroupPiece;

/// One piece's share of `ReplicaStatus` (`GroupPiece::status_part`), which
/// the runtime carries from the piece's thread to the hub's
/// (`Replica::status_with`).
#[derive(Clone, Debug, Default)]
pub struct PieceStatus {
    pub lanes: Vec<PieceLane>,
    pub pool_len: usize,
    /// Pool entries in flight at a cell that does not list them.
    pub orphaned: usize,
    pub counters: Counters,
}

/// One lane of a `PieceStatus`.
#[derive(Clone, Debug)]
pub struct PieceLane {
    pub lane: LaneId,
    pub view: View,
    pub view_changing: bool,
    pub status: LaneStatus,
}

impl Replica {
    fn build(cfg: Arc<ClusterConfig>, me: ReplicaId, identity: Identity) -> Replica {
        assert!(me.index() < cfg.n(), "replica {me:?} is not in the configuration");
        let lanes = cfg.lanes();
        let dispel = (cfg.params.mode == OrderingMode::Dispel)
            .then(|| Box::new(crate::dispel::DispelCore::new(cfg.clone(), me, identity.clone())));
        let pbft_lanes = if dispel.is_some() { 0 } else { lanes };
        Replica {
            limits: Limits::from_config(&cfg),
            groups: {
                let count = group_count(&cfg);
                (0..count)
                    .map(|g| group::LaneGroup::new(&cfg, me, &identity, pbft_lanes, g, count))
                    .collect()
            },
            dispel,
            hub: hub::Hub::new(&cfg, me, identity),
            apart: false,
            internal: Vec::new(),
            group_frontiers: Vec::new(),
            facts_sent: Vec::new(),
            pieces: Vec::new(),
            detached: 0,
            counters: Counters::default(),
            status_deadline: None,
            wall_ms: 0,
            predictor: None,
            cfg,
            me,
        }
    }

    /// A fresh replica at genesis. Emits its initial timers.
    pub fn new(
        config: Arc<ClusterConfig>,
        me: ReplicaId,
        identity: Identity,
        now: Millis,
        out: &mut Outbox,
    ) -> Replica {
        let mut r = Replica::build(config, me, identity);
        r.arm_status(now, out);
        // `dispel`: the DBFT parameters the first inputs are handled under
        // are those of this snapshot, whatever the cluster file says when
        // the log is replayed (`DispelCore::recover`).
        if let Some(d) = r.dispel.as_ref() {
            out.persist(d.snapshot_record());
        }
        r
    }

    pub fn handle(&mut self, now: Millis, event: Event, out: &mut Outbox) {
        if let Some(g) = self.piece_of(&event) {
            return match self.pieces.get_mut(g) {
                Some(p) => p.handle(now, event, out),
                // Split (`split_groups`): the driver hands these to the piece.
                None => self.counters.reject("event-for-detached-group"),
            };
        }
        match event {
            Event::Message { from, msg } => self.on_message(now, from, msg, out),
            Event::Request(req) => self.on_request(now, req, out),
            Event::Timer(id) => self.on_timer(now, id, out),
            Event::Checkpointed {
                seq,
                state_digest,
                snapshot,
            } => self.on_checkpointed(now, seq, state_digest, snapshot, out),
            Event::StateInstalled { seq, state_digest } => {
                self.on_state_installed(now, seq, state_digest, out)
            }
            Event::Mispredicted(body) => self.on_mispredicted(now, body, out),
            Event::MissingCopies(copies) => self.on_missing_copies(now, copies, out),
        }
        self.settle(now, out);
    }

    /// `handle(now, Event::Request(req), out)` for a request whose
    /// authenticator the driver already verified at this replica with
    /// `Request::verify` (DESIGN §6 still holds: this replica checked it).
    /// Saves the pool's second MAC check on the protocol thread.
    pub fn handle_verified_request(&mut self, now: Millis, req: Request, out: &mut Outbox) {
        if !self.pieces.is_empty() || self.detached > 0 {
            let g = self.group_of(self.request_lane(&req));
            return match self.pieces.get_mut(g) {
                Some(p) => p.handle_verified_request(now, req, out),
                None => self.counters.reject("event-for-detached-group"),
            };
        }
        self.admit_request(now, req, out, false);
        self.settle(now, out);
    }

    /// The wall clock (ms since the Unix epoch) the driver read before
    /// handing the next events in. The core has no clock of its own (sans-IO):
    /// this is an input like `now`, only used for batch times
    /// (`Batch::time_ms`, the executor's agreed `ExecContext::time_ms`).
    /// A driver that never sets it proposes time 0 and accepts only batches
    /// within `max_clock_skew_ms` of the epoch.
    pub fn set_wall_clock(&mut self, ms: u64) {
        self.wall_ms = ms;
        for g in &mut self.groups {
            g.wall_ms = ms;
        }
        for p in &mut self.pieces {
            p.set_wall_clock(ms);
        }
    }

    /// `sarek`: PREDICT() from the service's access sets (SAREK Algorithm
    /// 1). Without it every request is predicted to touch every partition,
    /// which is what a service without access sets declares.
    pub fn set_predictor(&mut self, p: Predictor) {
        self.predictor = Some(p.clone());
        let groups = self
            .groups
            .iter_mut()
            .chain(self.pieces.iter_mut().map(|p| &mut p.group));
        for s in groups.filter_map(|g| g.sarek.as_mut()) {
            s.set_predictor(p.clone());
        }
    }

    pub fn status(&self) -> ReplicaStatus {
        if !self.pieces.is_empty() {
            return self.status_of_pieces();
        }
        let hub = self.view();
        let orphaned = self.groups.iter().map(|g| g.orphaned_in_flight()).sum();
        let lanes = self.lanes_in_order();
        ReplicaStatus {
            me: self.me,
            next_delivery: self.hub.delivered(),
            stable_seq: self.hub.stable_seq(),
            views: lanes.iter().map(|l| l.view()).collect(),
            view_changing: lanes.iter().map(|l| !l.is_active()).collect(),
            next_undecided: lanes.iter().map(|l| l.next_undecided()).collect(),
            pool_len: self.groups.iter().map(|g| g.pool_len()).sum(),
            lanes: lanes
                .iter()
                .map(|l| self.groups[self.group_of(l.id())].lane_status(l.id(), &hub, orphaned))
                .collect(),
            counters: self.counters.clone(),
            state_divergences: self.hub.checkpointer.divergences(),
        }
    }

    /// Pool entries that can never leave the pool: in flight at a decided
    /// slot, or in flight at a cell that does not list them. Always 0 in a
    /// correct replica; the simulator checks it after every run.
    pub fn leaked_pool_entries(&self) -> usize {
        self.groups
            .iter()
            .map(|g| g.in_flight_at_decided() + g.orphaned_in_flight())
            .sum::<usize>()
            + self.pieces.iter().map(|p| p.leaked_pool_entries()).sum::<usize>()
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn me(&self) -> ReplicaId {
        self.me
    }

    pub fn config(&self) -> &Arc<ClusterConfig> {
        &self.cfg
    }

    /// Read-only access to a lane (tests, metrics).
    pub fn lane(&self, lane: LaneId) -> Option<&Lane> {
        if let Some(p) = self.pieces.get(self.group_of(lane)) {
            return p.lane(lane);
        }
        let g = self.groups.get(self.group_of(lane))?;
        g.holds(lane).then(|| g.lane(lane))
    }

    /// Lane `lane` to change (recovery, tests).
    pub(crate) fn lane_mut(&mut self, lane: LaneId) -> Option<&mut Lane> {
        let g = self.group_of(lane);
        if !self.pieces.is_empty() {
            return self.pieces.get_mut(g)?.group.lane_mut(lane);
        }
        self.groups.get_mut(g)?.lane_mut(lane)
    }

    /// Every lane, ascending.
    fn lanes_in_order(&self) -> Vec<&Lane> {
        let mut lanes: Vec<&Lane> = self.groups.iter().flat_map(|g| g.lanes.iter()).collect();
        lanes.sort_by_key(|l| l.id());
        lanes
    }

    /// The lane whose group admits `req`: its client's owner lane, or in
    /// `sarek` a partition PREDICT() names (its group hands the request to
    /// the others' groups; `request_lane`).
    pub fn request_lane(&self, req: &Request) -> LaneId {
        request_lane(&self.cfg, self.predictor.as_ref(), req)
    }

    /// The group holding lane `lane`.
    fn group_of(&self, lane: LaneId) -> usize {
        lane.index() % self.group_total()
    }

    /// Groups of this replica, wherever they run.
    fn group_total(&self) -> usize {
        self.groups.len() + self.pieces.len() + self.detached
    }

    /// Apart: the group an event is for (one of its lanes' messages or
    /// timers, a request of a client one of its lanes owns, its status
    /// tick), or `None` for the hub's. Together: always `None`.
    pub fn piece_of(&self, event: &Event) -> Option<usize> {
        if self.pieces.is_empty() && self.detached == 0 {
            return None;
        }
        let lane = match event {
            Event::Message { msg, .. } => msg.lane()?,
            Event::Request(req) => self.request_lane(req),
            Event::Timer(TimerId::ViewChange(l) | TimerId::Batch(l)) => *l,
            Event::Timer(TimerId::GroupStatus(g)) => return Some(*g as usize % self.group_total()),
            _ => return None,
        };
        (lane.0 < self.cfg.lanes()).then(|| self.group_of(lane))
    }

    /// Take the groups out to run elsewhere (the runtime: each on its
    /// pillar's thread). Apart only; from then on the driver hands each
    /// piece its events (`piece_of`) and carries `Internal` messages both
    /// ways (`take_internal` here and at each piece, `handle_internal`).
    pub fn split_groups(&mut self) -> Vec<GroupPiece> {
        let pieces = std::mem::take(&mut self.pieces);
        self.detached += pieces.len();
        pieces
    }

    /// `status` while the groups are pieces: the hub's part, with every
    /// piece's lanes and counters (each lane's limits as its group sees them).
    fn status_of_pieces(&self) -> ReplicaStatus {
        let parts: Vec<PieceStatus> = self.pieces.iter().map(|p| p.status_part()).collect();
        self.status_with(&parts)
    }

    /// `status` of a replica whose groups run elsewhere (`split_groups`):
    /// the hub's part, with the parts the pieces published
    /// (`GroupPiece::status_part`). A piece that has not published yet
    /// (the default part) is missing from `views` and `lanes`.
    pub fn status_with(&self, parts: &[PieceStatus]) -> ReplicaStatus {
        let mut lanes: Vec<&PieceLane> = parts.iter().flat_map(|p| &p.lanes).collect();
        lanes.sort_by_key(|l| l.lane);
        let orphaned = parts.iter().map(|p| p.orphaned).sum();
        let mut counters = self.counters.clone();
        for p in parts {
            counters.merge(&p.counters);
        }
        ReplicaStatus {
            me: self.me,
            next_delivery: self.hub.delivered(),
            stable_seq: self.hub.stable_seq(),
            views: lanes.iter().map(|l| l.view).collect(),
            view_changing: lanes.iter().map(|l| l.view_changing).collect(),
            next_undecided: lanes.iter().map(|l| l.status.next_undecided).collect(),
            pool_len: parts.iter().map(|p| p.pool_len).sum(),
            lanes: lanes
                .iter()
                .map(|l| LaneStatus {
                    orphaned,
                    ..l.status.clone()
                })
                .collect(),
            counters,
            state_divergences: self.hub.checkpointer.divergences(),
        }
    }

    /// The one group of a mode that keeps every lane in one (rcc, dispel,
    /// pbft: `group_count`).
    fn sole_group(&mut self) -> &mut group::LaneGroup {
        debug_assert_eq!(self.groups.len(), 1, "a one-group path in a mode with several");
        &mut self.groups[0]
    }

    /// The hub's facts for a group, with the frontier over every group's lanes.
    fn view(&self) -> hub::HubView<'_> {
        let mut v = self.hub.view(&self.cfg);
        v.frontier = frontier_of(&self.groups);
        v
    }

    /// Run `f` on the lane group with a view of the hub, then hand the
    /// hub what the group reported (decisions, learnt checkpoints). Every
    /// call into the group goes through here, so the hub never misses a
    /// report and the group never sees the hub other than through its view.
    fn in_group<R>(
        &mut self,
        g: usize,
        out: &mut Outbox,
        f: impl FnOnce(&mut group::LaneGroup, &hub::HubView, &mut Counters, &mut Outbox) -> R,
    ) -> R {
        if !self.apart {
            // One group reads its own lanes' frontier (`LaneGroup::frontier`).
            let frontier = if self.groups.len() > 1 {
                frontier_of(&self.groups)
            } else {
                None
            };
            self.hub
                .update_facts(&self.cfg, &mut self.groups[g].facts, frontier);
        }
        let counters = &mut self.counters;
        let r = self.groups[g].run(|group, view| f(group, view, counters, out));
        if self.apart {
            self.groups[g].report_frontier();
            for msg in self.groups[g].take_to_hub() {
                self.internal.push(Internal(InternalKind::ToHub { from: g, msg }));
            }
        } else {
            self.take_group_reports(g);
        }
        r
    }

    /// Hand group `g` a message from the hub: at once, or (apart) through
    /// `internal`, after the facts it was sent with.
    fn send_to_group(&mut self, now: Millis, g: usize, msg: group::ToGroup, out: &mut Outbox) {
        if self.apart {
            let facts = self.fresh_facts(g).map(Box::new);
            self.internal
                .push(Internal(InternalKind::ToGroup { to: g, msg, facts }));
            return;
        }
        self.group_hears(now, g, msg, out);
    }

    fn send_to_groups(&mut self, now: Millis, msg: group::ToGroup, out: &mut Outbox) {
        for g in 0..self.group_total() {
            self.send_to_group(now, g, msg.clone(), out);
        }
    }

    fn group_hears(&mut self, now: Millis, g: usize, msg: group::ToGroup, out: &mut Outbox) {
        if let group::ToGroup::Facts(f) = msg {
            self.groups[g].facts = f;
            return;
        }
        self.in_group(g, out, |grp, hub, counters, out| {
            grp.on_hub(now, msg, hub, counters, out)
        });
    }

    /// Apart: send each group the hub's facts where they changed since the
    /// last copy it was sent (one message per change, latest wins).
    fn publish_facts(&mut self) {
        for g in 0..self.facts_sent.len() {
            if let Some(facts) = self.fresh_facts(g) {
                self.internal.push(Internal(InternalKind::ToGroup {
                    to: g,
                    msg: group::ToGroup::Facts(facts),
                    facts: None,
                }));
            }
        }
    }

    /// The hub's facts for group `g` if they changed since the last ones it
    /// was sent (now counted as sent).
    fn fresh_facts(&mut self, g: usize) -> Option<hub::HubFacts> {
        let frontier = self.group_frontiers.iter().flatten().copied().max();
        let mut facts = self.facts_sent.get(g)?.clone();
        self.hub.update_facts(&self.cfg, &mut facts, frontier);
        if facts == self.facts_sent[g] {
            return None;
        }
        self.facts_sent[g] = facts.clone();
        Some(facts)
    }

    /// Run the hub and the lane groups apart (docs/lane-split.md step B):
    /// from now on they exchange `Internal` messages the driver takes with
    /// `take_internal` and hands back with `handle_internal`, in order per
    /// (sender, receiver), after whatever delay it models. `dispel` keeps
    /// its engine and pool together with the hub, so it stays as it is.
    pub fn set_pieces_apart(&mut self, on: bool, now: Millis, out: &mut Outbox) {
        if self.dispel.is_some() || !on || self.apart {
            return;
        }
        debug_assert!(self.internal.is_empty(), "switched with messages in flight");
        let frontier = frontier_of(&self.groups);
        self.group_frontiers = self.groups.iter().map(|g| g.own_frontier()).collect();
        self.facts_sent.clear();
        for g in &mut self.groups {
            self.hub.update_facts(&self.cfg, &mut g.facts, frontier);
            g.report_frontier();
            let _ = g.take_to_hub();
            self.facts_sent.push(g.facts.clone());
        }
        self.apart = on;
        {
            let cfg = self.cfg.clone();
            let me = self.me;
            self.pieces = std::mem::take(&mut self.groups)
                .into_iter()
                .enumerate()
                .map(|(i, g)| GroupPiece::new(cfg.clone(), me, i, g))
                .collect();
            for p in &mut self.pieces {
                p.start(now, out);
            }
        }
    }

    /// Messages between the hub and the groups since the last call (apart only).
    pub fn take_internal(&mut self) -> Vec<Internal> {
        for p in &mut self.pieces {
            self.internal.extend(p.take_internal());
        }
        std::mem::take(&mut self.internal)
    }

    /// A message `take_internal` returned, arriving at its receiver.
    pub fn handle_internal(&mut self, now: Millis, msg: Internal, out: &mut Outbox) {
        match msg.0 {
            InternalKind::ToGroup { to, .. } if !self.pieces.is_empty() || self.detached > 0 => {
                match self.pieces.get_mut(to) {
                    Some(p) => p.handle_internal(now, msg, out),
                    None => self.counters.reject("message-for-detached-group"),
                }
                return;
            }
            InternalKind::ToHub { from, msg } => self.hub_hears(now, from, msg, out),
            InternalKind::ToGroup { to, msg, facts } => {
                if let Some(f) = facts {
                    self.groups[to].facts = *f;
                }
                self.group_hears(now, to, msg, out)
            }
        }
        self.settle(now, out);
    }

    fn hub_hears(&mut self, now: Millis, from: usize, msg: group::ToHub, out: &mut Outbox) {
        match msg {
            group::ToHub::Decided { cell, batch } => {
                if let Some(rp) = self.hub.repredictions.as_mut() {
                    rp.on_decided(cell.lane, &batch);
                }
                self.hub.merger.insert(cell, batch)
            }
            group::ToHub::LearntStable(c) => {
                // Verified with the NEW-VIEW; adopted at the next status tick if
                // it certifies a state we hold (`Checkpointer::take_learnt`).
                self.hub.checkpointer.learn_cert(&c);
                self.note_cert(&c);
            }
            group::ToHub::ForLane {
                lane,
                req,
                at,
                admitted,
            } => {
                if lane.0 < self.cfg.lanes() {
                    let g = self.group_of(lane);
                    let msg = group::ToGroup::ForLane {
                        lane,
                        req,
                        at,
                        admitted,
                    };
                    self.send_to_group(now, g, msg, out);
                }
            }
            group::ToHub::Frontier(f) => {
                if let Some(slot) = self.group_frontiers.get_mut(from) {
                    *slot = f;
                }
            }
            group::ToHub::PeerStatus {
                from,
                stable_seq,
                lane0,
                at,
            } => {
                self.hub.transfer.note_peer_stable(from, stable_seq, at);
                if lane0 {
                    self.send_votes_to_peer(now, from, stable_seq, out);
                }
            }
        }
    }

    /// `in_group` for every group in turn, each with a fresh view (so a
    /// group sees what the groups before it proposed, as one set of lanes
    /// did); whether any returned true.
    fn in_groups(
        &mut self,
        out: &mut Outbox,
        mut f: impl FnMut(&mut group::LaneGroup, &hub::HubView, &mut Counters, &mut Outbox) -> bool,
    ) -> bool {
        let mut any = false;
        for g in 0..self.groups.len() {
            any |= self.in_group(g, out, &mut f);
        }
        any
    }

    /// Group `g`'s reports, in the order its lanes made them.
    fn take_group_reports(&mut self, g: usize) {
        if !self.groups[g].has_reports() {
            return;
        }
        for report in self.groups[g].take_to_hub() {
            // Only a piece reports peers' statuses (`piece.rs`): together
            // the hub reads them itself (`on_message`), so one here is a bug.
            if matches!(report, group::ToHub::PeerStatus { .. }) {
                debug_assert!(false, "a peer status reported by a group that is not apart");
                self.counters.reject("peer-status-from-group");
                continue;
            }
            self.hub_hears(Millis(0), g, report, &mut Outbox::new());
        }
    }

    fn note_cert(&mut self, c: &CheckpointCert) {
        if c.seq > self.hub.delivered() {
            self.hub.transfer.note_cert(c.seq);
        }
    }

    fn on_message(&mut self, now: Millis, from: ReplicaId, msg: ReplicaMsg, out: &mut Outbox) {
        let mut cx = Cx::new(now, out, &mut self.counters);
        if let Err(reason) = check_peer_message(&self.cfg, self.me, &self.limits, from, &msg) {
            return cx.reject(reason);
        }
        match msg {
            ReplicaMsg::Checkpoint(vote) => {
                let outcome = self.hub.checkpointer.on_vote(&mut cx, from, vote);
                self.on_vote_outcome(now, outcome, out);
            }
            ReplicaMsg::StateRequest(req) => {
                self.hub
                    .transfer
                    .on_request(&mut cx, from, req, self.hub.checkpointer.stable_state());
            }
            ReplicaMsg::StateChunk(chunk) => {
                if let Some((cert, snapshot)) =
                    self.hub
                        .transfer
                        .on_chunk(&mut cx, from, chunk, self.hub.delivered())
                {
                    self.begin_install(cert, snapshot, out);
                }
            }
            ReplicaMsg::Dbft(w) => self.dispel_on_message(now, from, w, out),
            ReplicaMsg::Statuses(b) => self.on_status_bundle(now, from, b, out),
            ReplicaMsg::RePredict(vote) => self.on_reprediction_vote(now, vote, out),
            ReplicaMsg::Unverifiable(hint) => {
                // In dispel, `lane` is the proposer whose INIT carried the
                // request (`DispelCore::init_acceptable`); the pool is one.
                if hint.lane.0 >= self.cfg.lanes() {
                    return cx.reject("bad-lane");
                }
                let f = self.cfg.f();
                let g = self.group_of(hint.lane);
                if self.groups[g]
                    .pool_of_mut(hint.lane)
                    .note_unverifiable(now, from, &hint, f)
                {
                    self.counters.clients_proven_partial += 1;
                }
            }
            other if self.dispel.is_some() => self.dispel_on_other(now, from, other, out),
            other => {
                if other.lane().is_none_or(|l| l.0 >= self.cfg.lanes()) {
                    return cx.reject("bad-lane");
                }
                if let ReplicaMsg::Status(st) = &other {
                    self.hub.transfer.note_peer_stable(from, st.stable_seq, now);
                    if st.lane.0 == 0 {
                        self.send_votes_to_peer(now, from, st.stable_seq, out);
                    }
                }
                let g = other.lane().map_or(0, |l| self.group_of(l));
                self.in_group(g, out, |g, hub, counters, out| {
                    g.on_lane_message(now, from, other, hub, counters, out)
                });
            }
        }
    }

    fn on_request(&mut self, now: Millis, req: Request, out: &mut Outbox) {
        self.admit_request(now, req, out, true);
    }

    fn admit_request(&mut self, now: Millis, req: Request, out: &mut Outbox, verify: bool) {
        let (client, seq) = (req.client, req.seq);
        // A client's requests wait in its owner lane's group (in rcc and
        // pbft there is one group); in sarek in its entry partition's
        // (`request_lane`), which hands it to the others.
        let g = self.group_of(self.request_lane(&req));
        let admitted = self.in_group(g, out, |grp, hub, _, _| grp.admit(now, req, verify, hub));
        match admitted {
            Ok(Admitted::New) => self.counters.requests_admitted += 1,
            Ok(Admitted::Duplicate) => {}
            Err(reason) => {
                tracing::debug!(?client, ?seq, ?reason, "request rejected");
                self.counters.reject_request(reject_reason_name(&reason));
                out.push(Action::Reject { client, seq, reason });
            }
        }
    }

    fn on_timer(&mut self, now: Millis, id: TimerId, out: &mut Outbox) {
        match id {
            TimerId::ViewChange(l) if l.0 < self.cfg.lanes() => {
                let g = self.group_of(l);
                self.in_group(g, out, |g, hub, counters, out| {
                    g.on_view_change_timer(now, l, hub, counters, out)
                });
            }
            TimerId::Batch(l) if l.0 < self.cfg.lanes() => {
                let g = self.group_of(l);
                self.groups[g].on_batch_timer(now, l)
            }
            TimerId::Status => {
                if self.status_deadline.is_some_and(|d| now >= d) {
                    self.status_tick(now, out);
                }
            }
            TimerId::Dispel => self.dispel_on_timer(now, out),
            TimerId::GroupStatus(_) => self.counters.reject("bad-timer"),
            TimerId::ViewChange(_) | TimerId::Batch(_) => self.counters.reject("bad-timer"),
        }
    }

    fn arm_status(&mut self, now: Millis, out: &mut Outbox) {
        let at = now.plus(self.cfg.params.status_interval_ms);
        self.status_deadline = Some(at);
        out.set_timer(TimerId::Status, at);
    }

    /// Every `status_interval_ms`: lanes announce their state (and retry),
    /// checkpoint votes are re-sent, state transfer checks whether we are stuck.
    fn status_tick(&mut self, now: Millis, out: &mut Outbox) {
        let mut progress = Vec::new();
        for g in 0..self.groups.len() {
            progress.extend(self.in_group(g, out, |g, hub, counters, out| {
                g.status_tick(now, hub, counters, out)
            }));
        }
        if !progress.is_empty() {
            self.broadcast_status_bundles(progress, out);
        }
        self.dispel_status_tick(now, out);
        self.reprediction_tick(now, out);
        self.find_missing_copies(out);
        for v in self.hub.checkpointer.pending_votes() {
            out.broadcast(ReplicaMsg::Checkpoint(v));
        }
        if let Some(s) = self.hub.checkpointer.take_learnt() {
            self.apply_stable(now, s, out);
        }
        let mut cx = Cx::new(now, out, &mut self.counters);
        self.hub.transfer.on_tick(&mut cx, self.hub.delivered());
        self.arm_status(now, out);
    }

    fn on_checkpointed(&mut self, now: Millis, seq: Seq, digest: Digest, snapshot: Bytes, out: &mut Outbox) {
        let mut cx = Cx::new(now, out, &mut self.counters);
        let outcome = self
            .hub
            .checkpointer
            .on_checkpointed(&mut cx, seq, digest, snapshot);
        self.on_vote_outcome(now, outcome, out);
    }

    fn on_vote_outcome(&mut self, now: Millis, outcome: VoteOutcome, out: &mut Outbox) {
        match outcome {
            VoteOutcome::Nothing => {}
            VoteOutcome::Stable(s) => self.apply_stable(now, s, out),
            VoteOutcome::CertWithoutState(cert) => self.note_cert(&cert),
        }
    }

    /// PBFT §4.3: persist the certificate with our snapshot, then truncate
    /// every lane below it (COP §4.2.2: the stable checkpoint is propagated to
    /// all pillars, which also keeps them in step).
    fn apply_stable(&mut self, now: Millis, s: StableCheckpoint, out: &mut Outbox) {
        tracing::debug!(seq = ?s.cert.seq, "checkpoint stable");
        let low = Slot(s.cert.seq.0 / self.cfg.lanes() as u64);
        out.persist(PersistRecord::Stable {
            cert: s.cert,
            snapshot: s.snapshot,
        });
        self.counters.checkpoints_stable += 1;
        self.advance_lanes(now, low, out);
    }

    fn advance_lanes(&mut self, now: Millis, low: Slot, out: &mut Outbox) {
        self.dispel_collect(now, low, out);
        self.send_to_groups(now, group::ToGroup::Advance { low }, out);
    }

    /// A complete, certified snapshot from a peer: hand it to the driver and
    /// hold delivery until the driver confirms the state digest.
    ///
    /// Nothing else changes yet. The snapshot may not match its certificate
    /// (a Byzantine sender can pair garbage with a valid one): until the
    /// driver confirms it, our stable checkpoint is the old one, and a
    /// VIEW-CHANGE must carry every prepared certificate above *that*
    /// checkpoint (PBFT §4.4). Truncating the log now would let a VIEW-CHANGE
    /// omit slots we prepared, and a new view could fill a committed slot with
    /// a no-op (issue 8, finding 1). So the jump, the pool reset and the
    /// truncation all wait for `Installed::Done`.
    fn begin_install(&mut self, cert: CheckpointCert, snapshot: Bytes, out: &mut Outbox) {
        tracing::debug!(seq = ?cert.seq, "installing state from a peer");
        debug_assert!(
            cert.seq > self.hub.delivered(),
            "installing a state we have passed"
        );
        out.push(Action::InstallState { cert, snapshot });
        self.counters.state_transfers += 1;
        // The executor is replacing its state: deliver nothing meanwhile.
        self.hub.merger.pause();
    }

    fn on_state_installed(&mut self, now: Millis, seq: Seq, digest: Digest, out: &mut Outbox) {
        match self.hub.transfer.on_installed(seq, digest) {
            Installed::Done(cert, snapshot) => {
                // Adopt, then truncate (as `apply_stable` does): every lane's
                // low is covered by the stable checkpoint at all times.
                let low = Slot(cert.seq.0 / self.cfg.lanes() as u64);
                out.persist(PersistRecord::Stable {
                    cert: cert.clone(),
                    snapshot: snapshot.clone(),
                });
                let table = self.adopt_assignments(&snapshot);
                self.hub.checkpointer.install(cert, snapshot);
                debug_assert!(self.hub.stable_seq() >= seq);
                self.hub.merger.jump_to(seq);
                // The groups clear their pools before dispel's engine
                // collects (dispel's pool is the one group's).
                let announce = self.apart;
                self.send_to_groups(now, group::ToGroup::Installed { low, table, announce }, out);
                self.dispel_collect(now, low, out);
                self.hub.merger.resume();
                if !announce {
                    self.announce_progress(now, out);
                }
            }
            Installed::Mismatch => {
                // The executor kept its state (it swaps only a verified one):
                // carry on from where we were; state transfer asks another peer.
                self.hub.merger.resume();
                let mut cx = Cx::new(now, out, &mut self.counters);
                cx.reject("bad-installed-state");
            }
            Installed::NotOurs => {
                let ours = self
                    .hub
                    .checkpointer
                    .stable_cert()
                    .is_some_and(|c| c.seq == seq && c.state_digest == digest);
                if !ours {
                    self.counters.reject("unexpected-state-installed");
                }
            }
        }
    }

    fn settle(&mut self, now: Millis, out: &mut Outbox) {
        // Each round either proposes or delivers something; both are bounded by
        // the windows, so this terminates long before the bound.
        let lanes: usize = self.groups.iter().map(|g| g.lanes.len()).sum();
        let bound = lanes * self.cfg.params.window_slots as usize + 8;
        for _ in 0..bound {
            // Deliver first: a leader proposes with what it just delivered
            // (RCC §III-E: a delivered SWITCHINSTANCE moves its client's
            // pending requests to the new owner before we would propose them).
            let delivered = self.deliver(now, out);
            // (The gate is empty but in rcc: no call into the groups then.)
            let released = delivered
                && self.groups.iter().any(|g| g.holds_owner_held())
                && self.in_groups(out, |g, hub, counters, out| {
                    g.release_owner_held(now, hub, counters, out)
                });
            let proposed = self.in_groups(out, |g, hub, counters, out| {
                g.propose_all(now, hub, counters, out)
            }) | self.dispel_propose(now, out);
            if !proposed && !delivered && !released {
                break;
            }
        }
        // Planned returns exist only in sarek, one lane per group: each
        // lane's return comes before its own timers are refreshed.
        self.in_groups(out, |g, hub, counters, out| {
            g.preferred_returns(now, hub, counters, out);
            g.refresh_timers(now, hub, counters, out);
            false
        });
        if self.apart {
            self.publish_facts();
        }
    }

    /// Deliver every contiguous decided position; ask for a checkpoint right
    /// after the position that completes one (before the next delivery, so
    /// the executor snapshots exactly there).
    fn deliver(&mut self, now: Millis, out: &mut Outbox) -> bool {
        if self.cfg.params.mode == OrderingMode::Sarek {
            return self.deliver_streams(out);
        }
        let mut any = false;
        while let Some((seq, cell, batch)) = self.hub.merger.pop_next() {
            self.apply_switches(now, seq, &batch, out);
            out.push(Action::Deliver { seq, cell, batch });
            self.counters.delivered += 1;
            any = true;
            if let Some(c) = self.hub.checkpointer.on_delivered(seq) {
                out.push(Action::TakeCheckpoint { seq: c });
            }
        }
        any
    }

    /// SAREK: every stream's next decided cells, each lane on its own. A
    /// checkpoint is due when the cut passes a multiple of K; it is asked for
    /// right after the delivery that completed it, so the executor snapshots
    /// exactly at the cut (docs/decisions.md "SAREK ordering and checkpoint
    /// cuts"). One delivery moves the cut by at most one slot of every lane,
    /// i.e. at most `lanes` positions, and K is a multiple of `lanes`, so at
    /// most one checkpoint falls due per delivery.
    fn deliver_streams(&mut self, out: &mut Outbox) -> bool {
        let mut any = false;
        let mut cut = self.hub.delivered();
        while let Some((cell, batch)) = self.hub.merger.pop_stream() {
            out.push(Action::DeliverStream { cell, batch });
            self.counters.delivered += 1;
            any = true;
            let now_cut = self.hub.delivered();
            debug_assert!(now_cut.0 - cut.0 <= self.cfg.lanes() as u64);
            if now_cut > cut {
                if let Some(c) = self.hub.checkpointer.on_delivered(Seq(now_cut.0 - 1)) {
                    out.push(Action::TakeCheckpoint { seq: c });
                }
                cut = now_cut;
            }
        }
        any
    }
}

#[cfg(test)]
mod internal_tests {
    use super::*;

    fn facts(to: usize) -> Internal {
        Internal(InternalKind::ToGroup {
            to,
            msg: group::ToGroup::Facts(hub::HubFacts::default()),
            facts: None,
        })
    }

    fn advance(to: usize, with_facts: bool) -> Internal {
        Internal(InternalKind::ToGroup {
            to,
            msg: group::ToGroup::Advance { low: Slot(4) },
            facts: with_facts.then(|| Box::new(hub::HubFacts::default())),
        })
    }

    /// A waiting facts update may give way only to a message that hands
    /// the same group newer facts; never to one that relies on it
    /// (`facts: None` means "the facts you were last sent").
    #[test]
    fn only_newer_facts_for_the_same_group_supersede_a_facts_update() {
        assert!(facts(0).superseded_by(&facts(0)));
        assert!(facts(0).superseded_by(&advance(0, true)));
        assert!(!facts(0).superseded_by(&advance(0, false)));
        assert!(!facts(0).superseded_by(&facts(1)));
        assert!(!advance(0, true).superseded_by(&facts(0)));
        let to_hub = Internal(InternalKind::ToHub {
            from: 0,
            msg: group::ToHub::Frontier(None),
        });
        assert!(!to_hub.superseded_by(&to_hub.clone()));
    }

    /// Only a sarek hand-on of a request to another partition may be
    /// dropped by a backed-up channel: facts, checkpoints and reports may not.
    #[test]
    fn only_a_request_handed_on_to_another_partition_may_be_dropped() {
        let (_, _, clients) = ClusterConfig::for_testing(4, 1, chorus_core::ProtocolParams::default(), 1);
        let req = Request::with_macs(
            &chorus_core::ClusterTag::of(
                &ClusterConfig::for_testing(4, 1, chorus_core::ProtocolParams::default(), 1).0,
            ),
            chorus_core::ClientId(0),
            chorus_core::RequestSeq(1),
            0,
            bytes::Bytes::from_static(b"x"),
            &[clients[0].pairwise_key(&clients[0].public())],
        );
        let hand_on = Internal(InternalKind::ToGroup {
            to: 1,
            msg: group::ToGroup::ForLane {
                lane: LaneId(1),
                req,
                at: Millis(0),
                admitted: true,
            },
            facts: None,
        });
        assert!(hand_on.may_drop());
        let InternalKind::ToGroup { to, msg, .. } = hand_on.0.clone() else {
            unreachable!()
        };
        let with_facts = Internal(InternalKind::ToGroup {
            to,
            msg: msg.clone(),
            facts: Some(Box::new(hub::HubFacts::default())),
        });
        assert!(!with_facts.may_drop(), "the facts it carries would be lost");
        let group::ToGroup::ForLane { lane, req, at, .. } = msg else {
            unreachable!()
        };
        let decided = Internal(InternalKind::ToGroup {
            to,
            msg: group::ToGroup::ForLane {
                lane,
                req,
                at,
                admitted: false,
            },
            facts: None,
        });
        assert!(!decided.may_drop(), "nothing else hands a decided request on");
        assert!(!facts(0).may_drop());
        assert!(!advance(0, true).may_drop());
        let to_hub = Internal(InternalKind::ToHub {
            from: 0,
            msg: group::ToHub::Frontier(None),
        });
        assert!(!to_hub.may_drop());
    }

    /// A message relying on a waiting facts update (`facts: None`) takes
    /// it along; nothing else folds, and a refused fold loses nothing.
    #[test]
    fn a_message_relying_on_waiting_facts_takes_them_along() {
        let folded = facts(0).fold_into(advance(0, false)).expect("folds");
        assert!(matches!(
            &folded.0,
            InternalKind::ToGroup {
                to: 0,
                msg: group::ToGroup::Advance { .. },
                facts: Some(_)
            }
        ));
        for (earlier, later) in [
            (facts(0), advance(1, false)),
            (facts(0), facts(0)),
            (advance(0, false), advance(0, false)),
            (facts(0), advance(0, true)),
        ] {
            let (e, l) = (format!("{earlier:?}"), format!("{later:?}"));
            let Err(both) = earlier.fold_into(later) else {
                panic!("folded {e} into {l}");
            };
            let (earlier, later) = *both;
            assert_eq!((format!("{earlier:?}"), format!("{later:?}")), (e, l));
        }
    }
}
