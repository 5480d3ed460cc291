//! `LaneGroup`: lanes and what only they need (docs/lane-split.md,
//! "LaneGroup"): their state machines, the pool of the requests they
//! propose, batch timers, pre-prepares held until their owner is known
//! (RCC §III-E) and hand-overs under way. Once consensus runs in the
//! pillars, a group is what a pillar thread owns (COP §4: a pillar runs
//! whole instances): in `cop` and `sarek` each lane is a group, in the
//! other modes one group holds every lane.
//!
//! A group reads the replica-wide part only through a [`HubView`] and
//! reports to it only through [`ToHub`]: the two calls that will become
//! messages between a pillar and the hub. Nothing here holds a reference to
//! the hub.

use super::hub::{HubFacts, HubView};
use crate::counters::{Counters, Cx};
use crate::io::{Outbox, TimerId};
use crate::lane::{Lane, LaneEnv, LaneOutput};
use crate::pool::{Pool, Readiness};
use crate::rcc_switch::{self, SwitchGate};
use crate::sarek::SarekPools;
use chorus_core::{
    Assignments, Batch, Cell, CheckpointCert, ClientId, ClusterConfig, Identity, LaneId, Millis,
    OrderingMode, PrePrepare, ReplicaId, ReplicaMsg, Request, Seq, Slot,
};
use std::sync::Arc;

/// What a group's lanes tell the hub.
#[derive(Clone, Debug)]
pub(crate) enum ToHub {
    /// A decided cell for the merger (COP §4.2.1: pillars hand decisions
    /// to the in-order execution stage).
    Decided { cell: Cell, batch: Arc<Batch> },
    /// A NEW-VIEW proved a stable checkpoint above ours (PBFT §4.4).
    LearntStable(CheckpointCert),
    /// The group's frontier moved (`own_frontier`): the other groups' idle
    /// lanes fill up to it (COP §4.2.1), relayed in their `HubFacts`.
    Frontier(Option<Seq>),
    /// SAREK §IV-B 1: a request another group's partition `lane` must order
    /// too, admitted here at `at` (`admitted`: the client's copy, verified
    /// at this replica) or decided here (then adopted there, like any
    /// cross-partition request a partition ordered first).
    ForLane {
        lane: LaneId,
        req: Request,
        at: Millis,
        admitted: bool,
    },
    /// A peer's status reached the group (apart only): its stable
    /// checkpoint, for state transfer and, from its lane 0, the checkpoint
    /// votes it may lack (`Replica::send_votes_to_peer`).
    PeerStatus {
        from: ReplicaId,
        stable_seq: Seq,
        lane0: bool,
        /// When the group read it (the claim's age counts from then).
        at: Millis,
    },
}

/// Retransmitted requests a `sarek` group remembers handing on (within
/// one status interval); beyond it a retransmission is not handed on again
/// until older entries expire (the decision hands it on anyway).
const RESHARED_MAX: usize = 4_096;

/// What the hub tells a group, besides its facts.
#[derive(Clone, Debug)]
pub(crate) enum ToGroup {
    /// A newer copy of the hub's facts (latest wins).
    Facts(HubFacts),
    /// A stable checkpoint moved every lane's low watermark (COP §4.2.2).
    Advance { low: Slot },
    /// A state transfer installed a checkpoint at `low`'s round: what waited
    /// for the old state is gone, the lanes move on (and, in `rcc`, the
    /// snapshot's assignment table replaces ours); with `announce` the
    /// group then tells its peers where its lanes stand
    /// (`Replica::announce_progress`).
    Installed {
        low: Slot,
        table: Option<Arc<Assignments>>,
        announce: bool,
    },
    /// RCC §III-E: a delivered switch moved `client` to lane `to` from round `round` on.
    Switched {
        client: ClientId,
        to: LaneId,
        round: u64,
    },
    /// SAREK §IV-D: a certified re-prediction waits in `lane`'s pool.
    Adopt { lane: LaneId, req: Request },
    /// SAREK §IV-B 1: another partition's group admitted (`admitted`) or
    /// decided a request this partition orders too (`ToHub::ForLane`).
    ForLane {
        lane: LaneId,
        req: Request,
        at: Millis,
        admitted: bool,
    },
}

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub(crate) struct LaneGroup {
    cfg: Arc<ClusterConfig>,
    /// This group's lanes, ascending: `lanes[i]` is lane `index + i × groups`.
    pub(crate) lanes: Vec<Lane>,
    index: usize,
    groups: usize,
    /// The requests the lanes propose (cop, pbft, rcc; dispel's too, which
    /// has no PBFT lanes: `replica/dispel.rs`).
    pub(crate) pool: Pool,
    /// `sarek`: one pool per partition lane (then `pool` stays empty).
    pub(crate) sarek: Option<SarekPools>,
    pub(crate) batch_deadline: Vec<Option<Millis>>,
    /// When each lane last cut a batch of requests (`propose_one`).
    last_cut: Vec<Option<Millis>>,
    pub(crate) switch_gate: SwitchGate,
    /// RCC §III-E: hand-overs whose new owner may not propose the client
    /// yet: (client, new owner, delivery round). Bounded by the clients.
    pub(crate) handing_over: Vec<(ClientId, LaneId, u64)>,
    /// The driver's wall clock (`Replica::set_wall_clock`).
    pub(crate) wall_ms: u64,
    /// Reports not yet taken by the hub (`take_to_hub`); empty between calls.
    to_hub: Vec<ToHub>,
    /// `sarek`: when a retransmitted request was last handed on to its
    /// other partitions (once per status interval at most; bounded).
    reshared: std::collections::HashMap<(ClientId, chorus_core::RequestSeq), Millis>,
    /// The frontier last reported to the hub (`ToHub::Frontier`).
    reported_frontier: Option<Seq>,
    /// The group's copy of what it reads of the hub (`Hub::update_facts`).
    pub(crate) facts: HubFacts,
}

impl LaneGroup {
    /// Group `index` of `groups`: lanes `index`, `index + groups`, … below
    /// `pbft_lanes` (`chorus_core::config::pillar_of_lane` when the groups
    /// are the pillars).
    pub(crate) fn new(
        cfg: &Arc<ClusterConfig>,
        me: ReplicaId,
        identity: &Identity,
        pbft_lanes: u32,
        index: usize,
        groups: usize,
    ) -> LaneGroup {
        assert!(index < groups, "group {index} of {groups}");
        let own: Vec<LaneId> = (index as u32..pbft_lanes).step_by(groups).map(LaneId).collect();
        let sarek = (cfg.params.mode == OrderingMode::Sarek)
            .then(|| SarekPools::new(cfg.clone(), me, identity.clone(), &own));
        LaneGroup {
            lanes: own
                .iter()
                .map(|l| Lane::new(cfg.clone(), *l, me, identity.clone()))
                .collect(),
            index,
            groups,
            pool: Pool::with_share(cfg.clone(), me, identity.clone(), groups),
            sarek,
            batch_deadline: vec![None; cfg.lanes() as usize],
            last_cut: vec![None; cfg.lanes() as usize],
            switch_gate: SwitchGate::default(),
            handing_over: Vec::new(),
            wall_ms: 0,
            to_hub: Vec::new(),
            reshared: std::collections::HashMap::new(),
            reported_frontier: None,
            facts: HubFacts::default(),
            cfg: cfg.clone(),
        }
    }
    /// Does lane `lane` belong to this group?
    pub(crate) fn holds(&self, lane: LaneId) -> bool {
        lane.index() % self.groups == self.index && lane.index() / self.groups < self.lanes.len()
    }

    /// `lane`'s index in `lanes` (the caller checked `holds`).
    fn local(&self, lane: LaneId) -> usize {
        debug_assert!(self.holds(lane), "lane {lane:?} is not in group {}", self.index);
        lane.index() / self.groups
    }

    /// Lane `lane` (the caller checked `holds`).
    pub(crate) fn lane(&self, lane: LaneId) -> &Lane {
        &self.lanes[self.local(lane)]
    }

    /// Lane `lane`, if this group holds it.
    pub(crate) fn lane_mut(&mut self, lane: LaneId) -> Option<&mut Lane> {
        if !self.holds(lane) {
            return None;
        }
        let l = self.local(lane);
        Some(&mut self.lanes[l])
    }

    /// Run `f` on the group with a view of its copy of the hub's facts.
    pub(crate) fn run<R>(&mut self, f: impl FnOnce(&mut LaneGroup, &HubView) -> R) -> R {
        let facts = std::mem::take(&mut self.facts);
        let cfg = self.cfg.clone();
        let r = f(self, &facts.view(&cfg));
        debug_assert_eq!(self.facts, HubFacts::default(), "facts changed while in use");
        self.facts = facts;
        r
    }

    /// Report the frontier if it moved since the last report.
    pub(crate) fn report_frontier(&mut self) {
        let f = self.own_frontier();
        if f != self.reported_frontier {
            self.reported_frontier = f;
            self.to_hub.push(ToHub::Frontier(f));
        }
    }

    /// A message from the hub.
    pub(crate) fn on_hub(
        &mut self,
        now: Millis,
        msg: ToGroup,
        hub: &HubView,
        counters: &mut Counters,
        out: &mut Outbox,
    ) {
        match msg {
            // Replaced by the caller before the view was taken (`Replica::to_group`).
            ToGroup::Facts(_) => {}
            ToGroup::Advance { low } => self.advance_lanes(now, low, hub, counters, out),
            ToGroup::Installed { low, table, announce } => {
                if let Some(t) = table {
                    self.adopt_assignments(&t);
                }
                self.clear_pools();
                self.advance_lanes(now, low, hub, counters, out);
                if announce {
                    for b in super::status_bundle::bundles(&self.cfg, hub.stable_seq, self.progress()) {
                        out.broadcast(ReplicaMsg::Statuses(b));
                    }
                }
            }
            ToGroup::Switched { client, to, round } => self.on_switched(client, to, round),
            ToGroup::Adopt { lane, req } => {
                if let Some(s) = self.sarek.as_mut() {
                    s.pool_mut(lane).adopt(now, &req);
                }
            }
            ToGroup::ForLane {
                lane,
                req,
                at,
                admitted,
            } => {
                let Some(s) = self.sarek.as_mut().filter(|s| s.owns(lane)) else {
                    return counters.reject("for-lane-of-another-group");
                };
                // Refused when known (nothing to do), or when full or the
                // client is penalised here (counted): a partition that
                // orders it first hands it here again, decided
                // (`forward_decided`).
                let pool = s.pool_mut(lane);
                let refusal = if pool.knows(&req) {
                    None
                } else {
                    pool.adopt_refusal(at, &req, admitted)
                };
                let taken = if admitted {
                    pool.adopt_verified(at, &req)
                } else {
                    pool.adopt(at, &req)
                };
                if taken && !admitted {
                    counters.sarek_forwarded += 1;
                }
                if let (false, Some(why)) = (taken, refusal) {
                    counters.reject(match why {
                        "client-penalised" => "for-lane-client-penalised",
                        _ => "for-lane-pool-full",
                    });
                }
            }
        }
    }

    /// A client's request (its authenticator checked by the driver when
    /// `verify` is false): into the pool of its owner lane, which is this
    /// group's (`Replica::admit_request`).
    pub(crate) fn admit(
        &mut self,
        now: Millis,
        req: Request,
        verify: bool,
        hub: &HubView,
    ) -> Result<crate::pool::Admitted, crate::RejectReason> {
        rcc_switch::admission_check(&self.cfg, hub.owners.table, &req)?;
        match self.sarek.as_mut() {
            Some(s) => {
                let others = s.others_of(&req.op);
                let entry = crate::sarek::entry_lane(&s.lanes_of(&req.op), self.cfg.owner_lane(req.client));
                let admitted = s.admit(now, req.clone(), verify)?;
                // The other partitions' groups take it as verified at this
                // replica: a new one passed its pool's check; a duplicate
                // (the client's retransmission) is checked now, since a
                // partition that lost its copy gets it again only this way
                // or once another partition decides it.
                let verified = match admitted {
                    crate::pool::Admitted::New => true,
                    crate::pool::Admitted::Duplicate => {
                        // Once per status interval per request: a client
                        // resending in a loop must not flood the hub.
                        let key = (req.client, req.seq);
                        let interval = self.cfg.params.status_interval_ms;
                        let due = self
                            .reshared
                            .get(&key)
                            .is_none_or(|t| now.0.saturating_sub(t.0) >= interval);
                        let ok =
                            !others.is_empty() && due && (!verify || s.pool_mut(entry).verify(&req).is_ok());
                        if ok {
                            if self.reshared.len() >= RESHARED_MAX {
                                self.reshared.retain(|_, t| now.0.saturating_sub(t.0) < interval);
                            }
                            if self.reshared.len() < RESHARED_MAX {
                                self.reshared.insert(key, now);
                                true
                            } else {
                                false
                            }
                        } else {
                            false
                        }
                    }
                };
                if verified {
                    for lane in others {
                        self.to_hub.push(ToHub::ForLane {
                            lane,
                            req: req.clone(),
                            at: now,
                            admitted: true,
                        });
                    }
                }
                Ok(admitted)
            }
            None if verify => self.pool.admit(now, req),
            None => self.pool.admit_verified(now, req),
        }
    }

    /// Whether a client's request is this group's to admit: its owner
    /// lane is one of ours, or in `sarek` its entry partition
    /// (`Replica::request_lane`), whose group hands it to the others.
    pub(crate) fn takes_request(&self, req: &Request) -> bool {
        match &self.sarek {
            Some(s) => self.holds(crate::sarek::entry_lane(
                &s.lanes_of(&req.op),
                self.cfg.owner_lane(req.client),
            )),
            None => self.holds(self.cfg.owner_lane(req.client)),
        }
    }

    /// What the lanes reported since the last call, in order.
    pub(crate) fn take_to_hub(&mut self) -> Vec<ToHub> {
        std::mem::take(&mut self.to_hub)
    }

    pub(crate) fn has_reports(&self) -> bool {
        !self.to_hub.is_empty()
    }

    /// The pool that holds `lane`'s requests.
    pub(crate) fn pool_of(&self, lane: LaneId) -> &Pool {
        match &self.sarek {
            Some(s) => s.pool(lane),
            None => &self.pool,
        }
    }

    pub(crate) fn pool_of_mut(&mut self, lane: LaneId) -> &mut Pool {
        match &mut self.sarek {
            Some(s) => s.pool_mut(lane),
            None => &mut self.pool,
        }
    }

    pub(crate) fn pool_len(&self) -> usize {
        self.pool.len() + self.sarek.as_ref().map_or(0, |s| s.len())
    }

    pub(crate) fn orphaned_in_flight(&self) -> usize {
        self.pool.orphaned_in_flight() + self.sarek.as_ref().map_or(0, |s| s.orphaned_in_flight())
    }

    /// Pool entries in flight at a slot their lane already decided.
    pub(crate) fn in_flight_at_decided(&self) -> usize {
        self.lanes
            .iter()
            .map(|l| {
                self.pool_of(l.id())
                    .in_flight_at_decided(l.id(), l.next_undecided())
            })
            .sum()
    }

    /// Run `f` on lane `l` with a context and the read-only environment,
    /// then take its output.
    pub(crate) fn with_lane(
        &mut self,
        now: Millis,
        l: usize,
        hub: &HubView,
        counters: &mut Counters,
        out: &mut Outbox,
        f: impl FnOnce(&mut Lane, &mut Cx, &LaneEnv) -> LaneOutput,
    ) {
        let lo = self.with_lane_ret(now, l, hub, counters, out, f);
        let lane = self.lanes[l].id();
        self.absorb(now, lane, lo, counters);
    }

    /// `with_lane` for a call that returns something else than an output.
    pub(crate) fn with_lane_ret<R>(
        &mut self,
        now: Millis,
        l: usize,
        hub: &HubView,
        counters: &mut Counters,
        out: &mut Outbox,
        f: impl FnOnce(&mut Lane, &mut Cx, &LaneEnv) -> R,
    ) -> R {
        let env = LaneEnv {
            stable: hub.stable,
            stable_seq: hub.stable_seq,
            hint: match &self.sarek {
                Some(s) => s.pool(self.lanes[l].id()),
                None => &self.pool,
            },
            owners: &hub.owners,
            wall_ms: self.wall_ms,
        };
        let mut cx = Cx::new(now, out, counters);
        f(&mut self.lanes[l], &mut cx, &env)
    }

    /// Hand a lane's output to the pool, and what the hub needs to `to_hub`.
    fn absorb(&mut self, now: Millis, lane: LaneId, lo: LaneOutput, counters: &mut Counters) {
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
                let (adopted, elsewhere) = s.forward_decided(now, lane, &d.batch);
                counters.sarek_forwarded += adopted as u64;
                for (lane, req) in elsewhere {
                    self.to_hub.push(ToHub::ForLane {
                        lane,
                        req,
                        at: now,
                        admitted: false,
                    });
                }
            }
            self.to_hub.push(ToHub::Decided { cell, batch: d.batch });
        }
        for (from, pp) in lo.owner_held {
            self.hold_for_owner(from, pp, counters);
        }
        if let Some(c) = lo.higher_stable {
            self.to_hub.push(ToHub::LearntStable(c));
        }
    }

    /// A message of one of the group's lanes (the caller checked that its
    /// lane exists).
    pub(crate) fn on_lane_message(
        &mut self,
        now: Millis,
        from: ReplicaId,
        msg: ReplicaMsg,
        hub: &HubView,
        counters: &mut Counters,
        out: &mut Outbox,
    ) {
        let Some(lane) = msg.lane().filter(|l| self.holds(*l)) else {
            debug_assert!(false, "a lane message for no lane of the group");
            return counters.reject("bad-lane");
        };
        let l = self.local(lane);
        self.with_lane(now, l, hub, counters, out, |l, cx, env| {
            l.handle_message(cx, from, msg, env)
        });
    }

    pub(crate) fn on_view_change_timer(
        &mut self,
        now: Millis,
        lane: LaneId,
        hub: &HubView,
        counters: &mut Counters,
        out: &mut Outbox,
    ) {
        let l = self.local(lane);
        self.with_lane(now, l, hub, counters, out, |l, cx, env| l.on_timer(cx, env));
    }

    pub(crate) fn on_batch_timer(&mut self, now: Millis, lane: LaneId) {
        if self.batch_deadline[lane.index()].is_some_and(|d| now >= d) {
            self.batch_deadline[lane.index()] = None;
        }
    }

    /// Every status interval: each lane retries what it waits for; returns
    /// the lanes' progress for the status bundles.
    pub(crate) fn status_tick(
        &mut self,
        now: Millis,
        hub: &HubView,
        counters: &mut Counters,
        out: &mut Outbox,
    ) -> Vec<chorus_core::LaneProgress> {
        let mut progress = Vec::with_capacity(self.lanes.len());
        for l in 0..self.lanes.len() {
            self.with_lane(now, l, hub, counters, out, |lane, cx, env| {
                lane.on_status_tick(cx, env)
            });
            progress.push(self.lanes[l].progress());
        }
        progress
    }

    /// After recovery: each lane resumes (`lane/recovery.rs`).
    pub(crate) fn finish_recovery(
        &mut self,
        now: Millis,
        hub: &HubView,
        counters: &mut Counters,
        out: &mut Outbox,
    ) {
        for l in 0..self.lanes.len() {
            self.with_lane(now, l, hub, counters, out, |lane, cx, env| {
                lane.finish_recovery(cx, env)
            });
        }
    }

    pub(crate) fn progress(&self) -> Vec<chorus_core::LaneProgress> {
        self.lanes.iter().map(|l| l.progress()).collect()
    }

    /// COP §4.2.2: a stable checkpoint moves every lane's window.
    pub(crate) fn advance_lanes(
        &mut self,
        now: Millis,
        low: Slot,
        hub: &HubView,
        counters: &mut Counters,
        out: &mut Outbox,
    ) {
        for l in 0..self.lanes.len() {
            self.with_lane(now, l, hub, counters, out, |lane, cx, env| {
                lane.advance_low(cx, low, env)
            });
        }
    }

    /// A state transfer replaced the state: what waited for the old one is gone.
    pub(crate) fn clear_pools(&mut self) {
        self.pool.clear();
        if let Some(s) = self.sarek.as_mut() {
            s.clear();
        }
    }

    /// Highest global position pre-prepared or decided in any lane of the
    /// replica: the hub's view of every group's (`Replica::view`), and our
    /// own lanes as they are now (they may have proposed since the view).
    pub(crate) fn frontier(&self, hub: &HubView) -> Option<Seq> {
        self.own_frontier().max(hub.frontier)
    }

    /// Highest global position pre-prepared or decided in this group's
    /// lanes. In `rcc` the position just above the highest such round: an
    /// instance is behind as soon as another one proposed for its round
    /// (RCC §III-E: an idle primary proposes a no-op when it sees proposals
    /// for the round).
    pub(crate) fn own_frontier(&self) -> Option<Seq> {
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

    /// `frontier`, but no further than a correct leader may propose now (the
    /// delivery point's round + σ − 1) in `cop` and `rcc`: a Byzantine
    /// pre-prepare deep in the window must not make every correct lane
    /// fill up to the drift bound at once (third review).
    fn proposable_frontier(&self, hub: &HubView) -> Option<Seq> {
        let f = self.frontier(hub)?;
        let m = self.cfg.lanes().max(1) as u64;
        let top = hub
            .delivered_round(LaneId(0))
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

    /// Proposals of a lane stay below its window and at most
    /// `max_lane_drift_slots` above the delivery point (COP §4.2.2: pillars may
    /// not drift apart; a lane ahead stops proposing).
    pub(crate) fn proposal_limit(&self, l: usize, hub: &HubView) -> Slot {
        // SAREK: a partition's drift is measured against its own stream, so
        // a stalled partition does not stop the others (the window and the
        // checkpoint cuts still bound how far they run ahead).
        let drift = Slot(
            hub.delivered_round(self.lanes[l].id())
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
    fn throttle_top(&self, l: usize, frontier: Option<Seq>, hub: &HubView) -> Option<Slot> {
        let delivered = hub.delivered_round(self.lanes[l].id());
        let sigma = self.cfg.params.max_lane_drift_slots;
        let drift_top = delivered.saturating_add(sigma.saturating_sub(1));
        self.top_round(frontier).map(|r| Slot(r.min(drift_top)))
    }

    /// SAREK §IV-A: start the planned view changes back to preferred leaders
    /// that are due (`lane/preferred.rs`).
    pub(crate) fn preferred_returns(
        &mut self,
        now: Millis,
        hub: &HubView,
        counters: &mut Counters,
        out: &mut Outbox,
    ) {
        for l in 0..self.lanes.len() {
            let Some(target) = self.lanes[l].preferred_return_due() else {
                continue;
            };
            self.with_lane(now, l, hub, counters, out, |ln, cx, env| {
                ln.start_preferred_return(cx, env, target)
            });
        }
    }

    /// A request waited a status interval while the lane sat idle: the
    /// leaders before us evidently lack it. (Not while the lane is busy: under
    /// a backlog every leader would then cut the same oldest requests.)
    fn eager(&mut self, now: Millis, lane: LaneId) -> bool {
        let wait = self.cfg.params.status_interval_ms;
        !self.lanes[self.local(lane)].has_open_slots()
            && self
                .pool_of_mut(lane)
                .oldest_pending(lane)
                .is_some_and(|t| now.0.saturating_sub(t.0) >= wait)
    }

    pub(crate) fn propose_all(
        &mut self,
        now: Millis,
        hub: &HubView,
        counters: &mut Counters,
        out: &mut Outbox,
    ) -> bool {
        let mut any = false;
        for l in 0..self.lanes.len() {
            for _ in 0..self.cfg.params.window_slots {
                if !self.propose_one(now, l, hub, counters, out) {
                    break;
                }
                any = true;
            }
        }
        any
    }

    /// Undecided proposals of its own lane above which a leader proposes
    /// only full batches (`ProtocolParams::proposal_depth`).
    pub(crate) fn proposal_depth(&self) -> usize {
        self.cfg.params.proposal_depth as usize
    }

    /// COP §4.2.1: a leader proposes a batch when one is ready, and a no-op
    /// when it has nothing but another lane is ahead (the merger would wait).
    fn propose_one(
        &mut self,
        now: Millis,
        l: usize,
        hub: &HubView,
        counters: &mut Counters,
        out: &mut Outbox,
    ) -> bool {
        let lane = self.lanes[l].id();
        let limit = self.proposal_limit(l, hub);
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
        let frontier = self.proposable_frontier(hub);
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
        //
        // With one lane, "at once" waits until the lane's last batch is
        // `batch_delay_ms` old: a slot costs ~400 µs of CPU per replica
        // whatever it carries (BENCHMARKS.md 2026-11-28 afternoon), so at a
        // moderate rate a slot per request or two spent the CPU that then
        // queued every request behind it. Where several lanes interleave, a
        // round waits for its slowest lane, so holding one lane back holds
        // every lane's requests: there the lane proposes at once.
        let next_space = if self.cfg.lanes() == 1 {
            self.last_cut[lane.index()].map(|t| t.plus(self.cfg.params.batch_delay_ms))
        } else {
            None
        };
        let idle = open == 0 && next_space.is_none_or(|t| now >= t);
        let batch = match self.pool_of_mut(lane).readiness(lane, now) {
            Readiness::Ready => self.cut_noting(cell, now, hub),
            Readiness::WaitUntil(_) if behind || idle => self.cut_noting(cell, now, hub),
            Readiness::WaitUntil(at) => {
                // An idle lane held back only by the spacing goes when it ends.
                let at = match next_space {
                    Some(t) if open == 0 => t.min(at),
                    _ => at,
                };
                self.arm_batch_timer(lane, at, out);
                return false;
            }
            Readiness::Empty if behind => Batch::noop(),
            Readiness::Empty => return false,
        };
        // A no-op here means every pending request of the lane waits for a
        // SWITCHINSTANCE hand-over (`rcc_switch`): proposing it moves the
        // rounds on (the others follow with no-ops), up to the drift bound,
        // so the hand-over round comes even in an idle cluster.
        self.with_lane(now, l, hub, counters, out, |ln, cx, _| {
            ln.propose(cx, slot, batch)
        });
        true
    }

    fn cut_noting(&mut self, cell: Cell, now: Millis, hub: &HubView) -> Batch {
        self.last_cut[cell.lane.index()] = Some(now);
        self.cut(cell, hub)
    }

    fn arm_batch_timer(&mut self, lane: LaneId, at: Millis, out: &mut Outbox) {
        if self.batch_deadline[lane.index()] == Some(at) {
            return;
        }
        self.batch_deadline[lane.index()] = Some(at);
        out.set_timer(TimerId::Batch(lane), at);
    }

    pub(crate) fn refresh_timers(
        &mut self,
        now: Millis,
        hub: &HubView,
        counters: &mut Counters,
        out: &mut Outbox,
    ) {
        self.restart_handover_waits(now, hub);
        let frontier = self.frontier(hub);
        for l in 0..self.lanes.len() {
            let lane = self.lanes[l].id();
            let may_propose = self.lanes[l].next_free_slot() < self.proposal_limit(l, hub);
            let oldest = if may_propose {
                self.pool_of_mut(lane).oldest_pending(lane)
            } else {
                None
            };
            let top = self.throttle_top(l, frontier, hub);
            self.with_lane_ret(now, l, hub, counters, out, |ln, cx, _| {
                ln.refresh_timer(cx, oldest, frontier, top)
            });
        }
    }

    /// Cut a batch for `cell` with only the requests its lane may carry in
    /// that round (the current owner, once the hand-over allows it).
    /// A batch with requests carries our wall clock (`Batch::time_ms`).
    fn cut(&mut self, cell: Cell, hub: &HubView) -> Batch {
        let mut batch = if self.sarek.is_some() {
            self.pool_of_mut(cell.lane).cut(cell)
        } else {
            let view = &hub.owners;
            self.pool
                .cut_where(cell, |r| rcc_switch::may_propose(view, cell.lane, cell.slot, r))
        };
        batch.time_ms = self.batch_time(&batch);
        batch
    }

    /// No-ops carry no time (0), so a filler never moves the agreed time.
    pub(crate) fn batch_time(&self, batch: &Batch) -> u64 {
        if batch.is_noop() {
            0
        } else {
            self.wall_ms
        }
    }

    /// RCC §III-E: a delivered switch moved `client` to lane `to` from
    /// round `round` on: its pending requests follow it.
    pub(crate) fn on_switched(&mut self, client: ClientId, to: LaneId, round: u64) {
        self.pool.reassign(client, to);
        self.handing_over.retain(|(c, _, _)| *c != client);
        self.handing_over.push((client, to, round));
    }

    /// A client's requests moved to its new owner wait there without
    /// counting against it until that owner may propose them (rounds above
    /// `r_d + σ`, once delivery allows that slot): otherwise requests that
    /// waited a timeout at the censoring old owner would make every correct
    /// replica suspect the correct new one at once and stop it (review of
    /// SWITCHINSTANCE, finding 1). Their wait restarts each time until then.
    fn restart_handover_waits(&mut self, now: Millis, hub: &HubView) {
        if self.handing_over.is_empty() {
            return;
        }
        let sigma = self.cfg.params.max_lane_drift_slots;
        let mut pending = std::mem::take(&mut self.handing_over);
        pending.retain(|(client, lane, round)| {
            let first = Slot(round.saturating_add(sigma).saturating_add(1));
            // A hand-over to a lane of another group is that group's to time.
            let waiting = self.holds(*lane) && self.proposal_limit(self.local(*lane), hub) <= first;
            if waiting {
                self.pool.restart_wait(*client, *lane, now);
            }
            waiting
        });
        self.handing_over = pending;
    }

    fn hold_for_owner(&mut self, from: ReplicaId, pp: PrePrepare, counters: &mut Counters) {
        // One per cell of every lane's window.
        let cap = self.lanes.len() * self.cfg.params.window_slots as usize;
        let held = self.switch_gate.hold(cap, from, pp);
        let key = if held { "held" } else { "hold-dropped" };
        *counters.switches.entry(key).or_insert(0) += 1;
    }

    /// Pre-prepares wait for their owner to be known (RCC §III-E).
    pub(crate) fn holds_owner_held(&self) -> bool {
        !self.switch_gate.is_empty()
    }

    /// Hand the held pre-prepares whose owners are known now back to their
    /// lanes (which check them again from the start).
    pub(crate) fn release_owner_held(
        &mut self,
        now: Millis,
        hub: &HubView,
        counters: &mut Counters,
        out: &mut Outbox,
    ) -> bool {
        if self.switch_gate.is_empty() {
            return false;
        }
        let ready = self
            .switch_gate
            .release(hub.owners.delivered_rounds, self.cfg.params.max_lane_drift_slots);
        let any = !ready.is_empty();
        for (from, pp) in ready {
            self.on_lane_message(now, from, ReplicaMsg::PrePrepare(pp), hub, counters, out);
        }
        any
    }

    /// An installed snapshot's assignment table (`Replica::adopt_assignments`):
    /// held pre-prepares are checked again from scratch, the pool's owners
    /// and the hand-overs under way follow the table.
    pub(crate) fn adopt_assignments(&mut self, table: &chorus_core::Assignments) {
        self.switch_gate.clear();
        self.pool.reset_owners(rcc_switch::overrides(&self.cfg, table));
        // Hand-overs still under way at the installed state (the stale ones
        // drop out at the next timer refresh).
        self.handing_over = table.iter().map(|(c, h)| (*c, LaneId(h.to), h.round)).collect();
    }

    /// A lane's status for `chorus status` (`Replica::status`).
    pub(crate) fn lane_status(&self, lane: LaneId, hub: &HubView, orphaned: usize) -> super::LaneStatus {
        let l = self.local(lane);
        super::LaneStatus {
            pending: self.pool_of(lane).pending_len(lane),
            next_free_slot: self.lanes[l].next_free_slot(),
            proposal_limit: self.proposal_limit(l, hub),
            open_slots: self.lanes[l].open_slots(self.proposal_depth()),
            timer_deadline: self.lanes[l].timer_deadline().map(|m| m.0),
            in_flight: self.pool_of(lane).in_flight_summary(lane),
            next_undecided: self.lanes[l].next_undecided(),
            orphaned,
            proposer: self.lanes[l].leader_of(self.lanes[l].next_free_slot()),
            stopped_until: self.lanes[l].rcc_stopped_until(),
            new_view_primary: crate::roles::new_view_primary(&self.cfg, lane, self.lanes[l].view()),
            stream_next: hub.stream_next(lane),
        }
    }
}
