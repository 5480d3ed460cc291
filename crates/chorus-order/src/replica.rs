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
mod hub;
mod recover;
mod repredict;
mod status_bundle;
mod switch;

use crate::checkpoint::{StableCheckpoint, VoteOutcome};
use crate::counters::{Counters, Cx};
use crate::io::{Action, Event, Outbox, PersistRecord, TimerId};
use crate::lane::{Lane, LaneEnv, LaneOutput};
use crate::pool::{Admitted, Pool, Readiness};
use crate::rcc_switch::{self, SwitchGate};
use crate::sarek::{Predictor, SarekPools};
use crate::transfer::Installed;
use crate::verify::reject_reason_name;
use bytes::Bytes;
use chorus_core::{
    Batch, Cell, CheckpointCert, ClusterConfig, Digest, Identity, LaneId, Limits, Millis, OrderingMode,
    ReplicaId, ReplicaMsg, Request, Seq, Slot, Validate, View,
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
    pub(crate) lanes: Vec<Lane>,
    pub(crate) pool: Pool,
    /// Merger, checkpoints, state transfer, RCC assignments: the
    /// replica-wide part (`hub.rs`).
    pub(crate) hub: hub::Hub,
    pub(crate) counters: Counters,
    pub(crate) status_deadline: Option<Millis>,
    pub(crate) batch_deadline: Vec<Option<Millis>>,
    pub(crate) switch_gate: SwitchGate,
    /// RCC §III-E: hand-overs whose new owner may not propose the client
    /// yet: (client, new owner, delivery round). Bounded by the clients.
    pub(crate) handing_over: Vec<(chorus_core::ClientId, LaneId, u64)>,
    /// `dispel` only: the DBFT lanes, in place of the PBFT `lanes` (empty then).
    pub(crate) dispel: Option<Box<crate::dispel::DispelCore>>,
    /// `sarek`: one pool per partition lane (then `pool` stays empty).
    pub(crate) sarek: Option<SarekPools>,
    /// The driver's wall clock (ms since the Unix epoch), `set_wall_clock`:
    /// stamped on the batches we cut and bounding the time of the ones we
    /// accept. Not `now`, which is local and monotonic (DESIGN §2).
    pub(crate) wall_ms: u64,
}

impl Replica {
    fn build(cfg: Arc<ClusterConfig>, me: ReplicaId, identity: Identity) -> Replica {
        assert!(me.index() < cfg.n(), "replica {me:?} is not in the configuration");
        let lanes = cfg.lanes();
        let dispel = (cfg.params.mode == OrderingMode::Dispel)
            .then(|| Box::new(crate::dispel::DispelCore::new(cfg.clone(), me, identity.clone())));
        let pbft_lanes = if dispel.is_some() { 0 } else { lanes };
        let sarek = (cfg.params.mode == OrderingMode::Sarek)
            .then(|| SarekPools::new(cfg.clone(), me, identity.clone()));
        Replica {
            limits: Limits::from_config(&cfg),
            lanes: (0..pbft_lanes)
                .map(|l| Lane::new(cfg.clone(), LaneId(l), me, identity.clone()))
                .collect(),
            dispel,
            pool: Pool::new(cfg.clone(), me, identity.clone()),
            hub: hub::Hub::new(&cfg, me, identity),
            counters: Counters::default(),
            status_deadline: None,
            batch_deadline: vec![None; lanes as usize],
            switch_gate: SwitchGate::default(),
            handing_over: Vec::new(),
            sarek,
            wall_ms: 0,
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
        }
        self.settle(now, out);
    }

    /// `handle(now, Event::Request(req), out)` for a request whose
    /// authenticator the driver already verified at this replica with
    /// `Request::verify` (DESIGN §6 still holds: this replica checked it).
    /// Saves the pool's second MAC check on the protocol thread.
    pub fn handle_verified_request(&mut self, now: Millis, req: Request, out: &mut Outbox) {
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
    }

    /// `sarek`: PREDICT() from the service's access sets (SAREK Algorithm
    /// 1). Without it every request is predicted to touch every partition,
    /// which is what a service without access sets declares.
    pub fn set_predictor(&mut self, p: Predictor) {
        if let Some(s) = self.sarek.as_mut() {
            s.set_predictor(p);
        }
    }

    /// The pool that holds `lane`'s requests.
    fn pool_of(&self, lane: LaneId) -> &Pool {
        match &self.sarek {
            Some(s) => s.pool(lane),
            None => &self.pool,
        }
    }

    fn pool_of_mut(&mut self, lane: LaneId) -> &mut Pool {
        match &mut self.sarek {
            Some(s) => s.pool_mut(lane),
            None => &mut self.pool,
        }
    }

    fn orphaned_in_flight(&self) -> usize {
        self.pool.orphaned_in_flight() + self.sarek.as_ref().map_or(0, |s| s.orphaned_in_flight())
    }

    pub fn status(&self) -> ReplicaStatus {
        ReplicaStatus {
            me: self.me,
            next_delivery: self.hub.delivered(),
            stable_seq: self.hub.stable_seq(),
            views: self.lanes.iter().map(|l| l.view()).collect(),
            view_changing: self.lanes.iter().map(|l| !l.is_active()).collect(),
            next_undecided: self.lanes.iter().map(|l| l.next_undecided()).collect(),
            pool_len: self.pool.len() + self.sarek.as_ref().map_or(0, |s| s.len()),
            lanes: (0..self.lanes.len())
                .map(|l| LaneStatus {
                    pending: self.pool_of(LaneId(l as u32)).pending_len(LaneId(l as u32)),
                    next_free_slot: self.lanes[l].next_free_slot(),
                    proposal_limit: self.proposal_limit(l),
                    open_slots: self.lanes[l].open_slots(self.proposal_depth()),
                    timer_deadline: self.lanes[l].timer_deadline().map(|m| m.0),
                    in_flight: self.pool_of(LaneId(l as u32)).in_flight_summary(LaneId(l as u32)),
                    next_undecided: self.lanes[l].next_undecided(),
                    orphaned: self.orphaned_in_flight(),
                    proposer: self.lanes[l].leader_of(self.lanes[l].next_free_slot()),
                    stopped_until: self.lanes[l].rcc_stopped_until(),
                    new_view_primary: crate::roles::new_view_primary(
                        &self.cfg,
                        LaneId(l as u32),
                        self.lanes[l].view(),
                    ),
                    stream_next: self.hub.stream_next(LaneId(l as u32)),
                })
                .collect(),
            counters: self.counters.clone(),
            state_divergences: self.hub.checkpointer.divergences(),
        }
    }

    /// Pool entries that can never leave the pool: in flight at a decided
    /// slot, or in flight at a cell that does not list them. Always 0 in a
    /// correct replica; the simulator checks it after every run.
    pub fn leaked_pool_entries(&self) -> usize {
        let at_decided: usize = self
            .lanes
            .iter()
            .map(|l| {
                self.pool_of(l.id())
                    .in_flight_at_decided(l.id(), l.next_undecided())
            })
            .sum();
        at_decided + self.orphaned_in_flight()
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
        self.lanes.get(lane.index())
    }

    /// Run `f` on lane `l` with a context and the read-only environment.
    fn with_lane<R>(
        &mut self,
        now: Millis,
        l: usize,
        out: &mut Outbox,
        f: impl FnOnce(&mut Lane, &mut Cx, &LaneEnv) -> R,
    ) -> R {
        let owners = self.hub.owner_view(&self.cfg);
        let env = LaneEnv {
            stable: self.hub.checkpointer.stable_cert(),
            stable_seq: self.hub.stable_seq(),
            hint: match &self.sarek {
                Some(s) => s.pool(LaneId(l as u32)),
                None => &self.pool,
            },
            owners: &owners,
            wall_ms: self.wall_ms,
        };
        let mut cx = Cx::new(now, out, &mut self.counters);
        f(&mut self.lanes[l], &mut cx, &env)
    }

    /// Hand a lane's output to the pool, the merger and state transfer.
    fn absorb(&mut self, now: Millis, lane: LaneId, lo: LaneOutput) {
        if let Some(slot) = lo.release_from {
            self.pool_of_mut(lane).release_from(now, lane, slot);
        }
        for (slot, batch) in &lo.pre_prepared {
            self.pool_of_mut(lane)
                .mark_in_flight(now, Cell { lane, slot: *slot }, batch);
        }
        for d in lo.decided {
            let cell = Cell { lane, slot: d.slot };
            self.pool_of_mut(lane).on_decided(now, cell, &d.batch);
            if let Some(s) = self.sarek.as_mut() {
                self.counters.sarek_forwarded += s.forward_decided(now, lane, &d.batch) as u64;
                s.repredictions.on_decided(lane, &d.batch);
            }
            self.hub.merger.insert(cell, d.batch);
        }
        for (from, pp) in lo.owner_held {
            self.hold_for_owner(from, pp);
        }
        if let Some(c) = lo.higher_stable {
            // Verified with the NEW-VIEW; adopted at the next status tick if
            // it certifies a state we hold (`Checkpointer::take_learnt`).
            self.hub.checkpointer.learn_cert(&c);
            self.note_cert(&c);
        }
    }

    fn note_cert(&mut self, c: &CheckpointCert) {
        if c.seq > self.hub.delivered() {
            self.hub.transfer.note_cert(c.seq);
        }
    }

    fn on_message(&mut self, now: Millis, from: ReplicaId, msg: ReplicaMsg, out: &mut Outbox) {
        let mut cx = Cx::new(now, out, &mut self.counters);
        if from.index() >= self.cfg.n() {
            return cx.reject("bad-sender");
        }
        if from == self.me {
            return cx.reject("self-message");
        }
        if let Err(e) = msg.validate(&self.limits) {
            tracing::debug!(?from, error = %e, "invalid message");
            return cx.reject("invalid-bounds");
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
                if self.pool_of_mut(hint.lane).note_unverifiable(now, from, &hint, f) {
                    self.counters.clients_proven_partial += 1;
                }
            }
            other if self.dispel.is_some() => self.dispel_on_other(now, from, other, out),
            other => {
                let Some(lane) = other.lane().filter(|l| l.0 < self.cfg.lanes()) else {
                    return cx.reject("bad-lane");
                };
                if let ReplicaMsg::Status(st) = &other {
                    self.hub.transfer.note_peer_stable(from, st.stable_seq, now);
                    if st.lane.0 == 0 {
                        self.send_votes_to_peer(now, from, st.stable_seq, out);
                    }
                }
                let lo = self.with_lane(now, lane.index(), out, |l, cx, env| {
                    l.handle_message(cx, from, other, env)
                });
                self.absorb(now, lane, lo);
            }
        }
    }

    fn on_request(&mut self, now: Millis, req: Request, out: &mut Outbox) {
        self.admit_request(now, req, out, true);
    }

    fn admit_request(&mut self, now: Millis, req: Request, out: &mut Outbox, verify: bool) {
        let (client, seq) = (req.client, req.seq);
        let admitted = if let Err(e) = rcc_switch::admission_check(&self.cfg, &self.hub.assignments, &req) {
            Err(e)
        } else {
            match self.sarek.as_mut() {
                Some(s) => s.admit(now, req, verify),
                None if verify => self.pool.admit(now, req),
                None => self.pool.admit_verified(now, req),
            }
        };
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
                let lo = self.with_lane(now, l.index(), out, |lane, cx, env| lane.on_timer(cx, env));
                self.absorb(now, l, lo);
            }
            TimerId::Batch(l) if l.0 < self.cfg.lanes() => {
                if self.batch_deadline[l.index()].is_some_and(|d| now >= d) {
                    self.batch_deadline[l.index()] = None;
                }
            }
            TimerId::Status => {
                if self.status_deadline.is_some_and(|d| now >= d) {
                    self.status_tick(now, out);
                }
            }
            TimerId::Dispel => self.dispel_on_timer(now, out),
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
        let mut progress = Vec::with_capacity(self.lanes.len());
        for l in 0..self.lanes.len() {
            let lo = self.with_lane(now, l, out, |lane, cx, env| lane.on_status_tick(cx, env));
            self.absorb(now, LaneId(l as u32), lo);
            progress.push(self.lanes[l].progress());
        }
        if !progress.is_empty() {
            self.broadcast_status_bundles(progress, out);
        }
        self.dispel_status_tick(now, out);
        self.reprediction_tick(now, out);
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
        for l in 0..self.lanes.len() {
            let lo = self.with_lane(now, l, out, |lane, cx, env| lane.advance_low(cx, low, env));
            self.absorb(now, LaneId(l as u32), lo);
        }
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
                self.adopt_assignments(&snapshot);
                self.hub.checkpointer.install(cert, snapshot);
                debug_assert!(self.hub.stable_seq() >= seq);
                self.hub.merger.jump_to(seq);
                self.pool.clear();
                if let Some(s) = self.sarek.as_mut() {
                    s.clear();
                }
                self.advance_lanes(now, low, out);
                self.hub.merger.resume();
                self.announce_progress(now, out);
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

    /// `frontier`, but no further than a correct leader may propose now (the
    /// delivery point's round + σ − 1) in `cop` and `rcc`: a Byzantine
    /// pre-prepare deep in the window must not make every correct lane
    /// fill up to the drift bound at once (third review).
    fn proposable_frontier(&self) -> Option<Seq> {
        let f = self.frontier()?;
        let m = self.cfg.lanes().max(1) as u64;
        let top = self
            .delivered_round(0)
            .saturating_add(self.cfg.params.max_lane_drift_slots.saturating_sub(1));
        let cap = match self.cfg.params.mode {
            // Just above the highest round.
            OrderingMode::Rcc => top.saturating_add(1).saturating_mul(m),
            // The last position of the highest round.
            OrderingMode::Cop => top.saturating_mul(m).saturating_add(m - 1),
            _ => return Some(f),
        };
        Some(Seq(f.0.min(cap)))
    }

    /// The highest round (slot) pre-prepared or decided in any lane, from
    /// `frontier`.
    pub(crate) fn top_round(&self, frontier: Option<Seq>) -> Option<u64> {
        let m = self.cfg.lanes().max(1) as u64;
        match self.cfg.params.mode {
            OrderingMode::Rcc => frontier.map(|f| (f.0 / m).saturating_sub(1)),
            _ => frontier.map(|f| f.0 / m),
        }
    }

    /// Highest global position pre-prepared or decided in any lane. In `rcc`
    /// the position just above the highest such round: an instance is behind
    /// as soon as another one proposed for its round (RCC §III-E: an idle
    /// primary proposes a no-op when it sees proposals for the round).
    fn frontier(&self) -> Option<Seq> {
        if self.cfg.params.mode == OrderingMode::Rcc {
            let m = self.cfg.lanes() as u64;
            return self
                .lanes
                .iter()
                .filter_map(|l| l.max_seen_slot())
                .max()
                .map(|r| Seq(r.0.saturating_add(1).saturating_mul(m)));
        }
        self.lanes
            .iter()
            .filter_map(|l| {
                l.max_seen_slot().map(|s| {
                    self.cfg.seq_of(Cell {
                        lane: l.id(),
                        slot: s,
                    })
                })
            })
            .max()
    }

    /// The round (slot) delivery of lane `l` has reached: in `sarek` its own
    /// stream's, elsewhere the merger's.
    fn delivered_round(&self, l: usize) -> u64 {
        match self.hub.stream_next(LaneId(l as u32)) {
            Some(s) => s.0,
            None => self.hub.delivered_rounds(&self.cfg),
        }
    }

    /// Proposals of a lane stay below its window and at most
    /// `max_lane_drift_slots` above the delivery point (COP §4.2.2: pillars may
    /// not drift apart; a lane ahead stops proposing).
    fn proposal_limit(&self, l: usize) -> Slot {
        // SAREK: a partition's drift is measured against its own stream, so
        // a stalled partition does not stop the others (the window and the
        // checkpoint cuts still bound how far they run ahead).
        let drift = Slot(
            self.delivered_round(l)
                .saturating_add(self.cfg.params.max_lane_drift_slots),
        );
        let limit = drift.min(self.lanes[l].high());
        // SAREK §IV-A: no proposal past a planned return to the preferred leader.
        match self.lanes[l].preferred_return_boundary() {
            Some(b) => limit.min(b),
            None => limit,
        }
    }

    /// The round the throttling rule measures lane `l` against: the highest
    /// seen (`top_round`), but at most the highest a correct leader may
    /// propose now, one below the drift bound (`proposal_limit`): a
    /// Byzantine leader may pre-prepare anywhere in the window.
    fn throttle_top(&self, l: usize, frontier: Option<Seq>) -> Option<Slot> {
        let delivered = self.delivered_round(l);
        let sigma = self.cfg.params.max_lane_drift_slots;
        let drift_top = delivered.saturating_add(sigma.saturating_sub(1));
        self.top_round(frontier).map(|r| Slot(r.min(drift_top)))
    }

    /// SAREK §IV-A: start the planned view changes back to preferred leaders
    /// that are due (`lane/preferred.rs`).
    fn preferred_returns(&mut self, now: Millis, out: &mut Outbox) {
        for l in 0..self.lanes.len() {
            let Some(target) = self.lanes[l].preferred_return_due() else {
                continue;
            };
            let lo = self.with_lane(now, l, out, |ln, cx, env| {
                ln.start_preferred_return(cx, env, target)
            });
            self.absorb(now, LaneId(l as u32), lo);
        }
    }

    /// A request waited a status interval while the lane sat idle: the
    /// leaders before us evidently lack it. (Not while the lane is busy: under
    /// a backlog every leader would then cut the same oldest requests.)
    fn eager(&mut self, now: Millis, lane: LaneId) -> bool {
        let wait = self.cfg.params.status_interval_ms;
        !self.lanes[lane.index()].has_open_slots()
            && self
                .pool_of_mut(lane)
                .oldest_pending(lane)
                .is_some_and(|t| now.0.saturating_sub(t.0) >= wait)
    }

    fn settle(&mut self, now: Millis, out: &mut Outbox) {
        // Each round either proposes or delivers something; both are bounded by
        // the windows, so this terminates long before the bound.
        let bound = self.lanes.len() * self.cfg.params.window_slots as usize + 8;
        for _ in 0..bound {
            // Deliver first: a leader proposes with what it just delivered
            // (RCC §III-E: a delivered SWITCHINSTANCE moves its client's
            // pending requests to the new owner before we would propose them).
            let delivered = self.deliver(out);
            let released = delivered && self.release_owner_held(now, out);
            let proposed = self.propose_all(now, out) | self.dispel_propose(now, out);
            if !proposed && !delivered && !released {
                break;
            }
        }
        self.preferred_returns(now, out);
        self.refresh_timers(now, out);
    }

    fn propose_all(&mut self, now: Millis, out: &mut Outbox) -> bool {
        let mut any = false;
        for l in 0..self.lanes.len() {
            for _ in 0..self.cfg.params.window_slots {
                if !self.propose_one(now, l, out) {
                    break;
                }
                any = true;
            }
        }
        any
    }

    /// Undecided proposals of its own lane above which a leader proposes
    /// only full batches (`ProtocolParams::proposal_depth`).
    fn proposal_depth(&self) -> usize {
        self.cfg.params.proposal_depth as usize
    }

    /// COP §4.2.1: a leader proposes a batch when one is ready, and a no-op
    /// when it has nothing but another lane is ahead (the merger would wait).
    fn propose_one(&mut self, now: Millis, l: usize, out: &mut Outbox) -> bool {
        let lane = LaneId(l as u32);
        let limit = self.proposal_limit(l);
        let eager = self.eager(now, lane);
        let Some(slot) = self.lanes[l].proposal_slot(limit, eager) else {
            return false;
        };
        // Adaptive batching: with `proposal_depth` proposals of this lane still
        // undecided, a partial batch waits for one of them to decide instead
        // of going out as one more tiny batch; the requests that arrive
        // meanwhile join it. Each slot costs signatures, messages and storage
        // writes whatever its size, so under load this trades nothing in
        // latency (the pipeline is busy anyway) for far fewer slots. A full
        // batch always goes, up to the window.
        let depth = self.proposal_depth();
        let open = self.lanes[l].open_slots(depth);
        let cell = Cell { lane, slot };
        let frontier = self.proposable_frontier();
        let behind = frontier.is_some_and(|f| self.cfg.seq_of(cell) < f);
        // A lane behind fills every position up to the frontier at once,
        // its pipeline depth notwithstanding: those slots are what delivery
        // waits for (every round needs one of each lane, so this adds no
        // slot, it only fills them sooner), and filling two per round trip
        // left a lane with little load at the drift bound behind one loaded
        // lane, where the throttling rule (`lane/throttle.rs`) would suspect
        // its correct leader once a round trip exceeds timeout / (σ/2)
        // (found by review). Ahead of the frontier the depth rules as
        // adaptive batching wants. Only where rounds interleave: a `sarek`
        // partition's stream is delivered on its own, so there the argument
        // does not hold and its batching stays as it was.
        let interleaved = matches!(self.cfg.params.mode, OrderingMode::Cop | OrderingMode::Rcc);
        let fill = behind && interleaved;
        if open >= depth && !fill && !self.pool_of(lane).full_batch_pending(lane) {
            return false;
        }
        // With none of this lane's proposals undecided the pipeline is idle:
        // waiting `batch_delay_ms` for more requests would only add that
        // delay to these (2.5 ms of a 5 ms request at 1k ops/s on loopback,
        // docs/performance.md); under load a slot is nearly always open and
        // partial batches wait as before.
        let idle = open == 0;
        let batch = match self.pool_of_mut(lane).readiness(lane, now) {
            Readiness::Ready => self.cut(cell),
            Readiness::WaitUntil(_) if behind || idle => self.cut(cell),
            Readiness::WaitUntil(at) => {
                self.arm_batch_timer(l, at, out);
                return false;
            }
            Readiness::Empty if behind => Batch::noop(),
            Readiness::Empty => return false,
        };
        // A no-op here means every pending request of the lane waits for a
        // SWITCHINSTANCE hand-over (`rcc_switch`): proposing it moves the
        // rounds on (the others follow with no-ops), up to the drift bound,
        // so the hand-over round comes even in an idle cluster.
        let lo = self.with_lane(now, l, out, |ln, cx, _| ln.propose(cx, slot, batch));
        self.absorb(now, lane, lo);
        true
    }

    fn arm_batch_timer(&mut self, l: usize, at: Millis, out: &mut Outbox) {
        if self.batch_deadline[l] == Some(at) {
            return;
        }
        self.batch_deadline[l] = Some(at);
        out.set_timer(TimerId::Batch(LaneId(l as u32)), at);
    }

    /// Deliver every contiguous decided position; ask for a checkpoint right
    /// after the position that completes one (before the next delivery, so
    /// the executor snapshots exactly there).
    fn deliver(&mut self, out: &mut Outbox) -> bool {
        if self.sarek.is_some() {
            return self.deliver_streams(out);
        }
        let mut any = false;
        while let Some((seq, cell, batch)) = self.hub.merger.pop_next() {
            self.apply_switches(seq, &batch);
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

    fn refresh_timers(&mut self, now: Millis, out: &mut Outbox) {
        self.restart_handover_waits(now);
        let frontier = self.frontier();
        for l in 0..self.lanes.len() {
            let lane = LaneId(l as u32);
            let may_propose = self.lanes[l].next_free_slot() < self.proposal_limit(l);
            let oldest = if may_propose {
                self.pool_of_mut(lane).oldest_pending(lane)
            } else {
                None
            };
            let top = self.throttle_top(l, frontier);
            self.with_lane(now, l, out, |ln, cx, _| {
                ln.refresh_timer(cx, oldest, frontier, top)
            });
        }
    }
}
