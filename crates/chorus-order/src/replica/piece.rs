//! `GroupPiece`: one lane group on its own, talking to the hub only by
//! `Internal` messages (docs/lane-split.md steps B2 and C). With the
//! pieces apart (`Replica::set_pieces_apart`) the replica keeps one per
//! group and hands each the events `Replica::piece_of` names; the runtime
//! takes them out (`Replica::split_groups`) and runs each on its pillar's
//! thread (COP §4: a pillar runs whole instances of its lanes and talks to
//! the in-order stage by messages).

use super::group::{LaneGroup, ToHub};
use super::{Internal, InternalKind};
use crate::counters::{Counters, Cx};
use crate::io::{Action, Event, Outbox, TimerId};
use crate::lane::Lane;
use crate::verify::reject_reason_name;
use chorus_core::{ClusterConfig, LaneId, Limits, Millis, ReplicaId, ReplicaMsg, Request};
use std::sync::Arc;

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub struct GroupPiece {
    cfg: Arc<ClusterConfig>,
    me: ReplicaId,
    limits: Limits,
    /// Which group of the replica this is (`Internal::channel`).
    index: usize,
    pub(crate) group: LaneGroup,
    pub(crate) counters: Counters,
    /// Messages for the hub, in the order made (`take_internal`).
    internal: Vec<Internal>,
    /// When this group's lanes next announce their state (the hub's status
    /// tick does it for groups that are not apart).
    status_deadline: Option<Millis>,
    /// Peers' statuses not yet reported to the hub (latest stable seq, and
    /// whether one came from their lane 0), and when each peer's was last
    /// reported: at most one report per peer per `PEER_STATUS_EVERY`, so a
    /// peer sending statuses in a loop is not relayed one-for-one.
    peer_pending: std::collections::BTreeMap<ReplicaId, (chorus_core::Seq, bool, Millis)>,
    peer_reported: std::collections::BTreeMap<ReplicaId, Millis>,
}

/// A quarter of the status interval between two reports of one peer's status.
fn peer_status_every(cfg: &ClusterConfig) -> u64 {
    cfg.params.status_interval_ms / 4
}

impl GroupPiece {
    pub(crate) fn new(cfg: Arc<ClusterConfig>, me: ReplicaId, index: usize, group: LaneGroup) -> GroupPiece {
        GroupPiece {
            limits: Limits::from_config(&cfg),
            cfg,
            me,
            index,
            group,
            counters: Counters::default(),
            internal: Vec::new(),
            status_deadline: None,
            peer_pending: Default::default(),
            peer_reported: Default::default(),
        }
    }

    /// Start this group's own status timer.
    pub fn start(&mut self, now: Millis, out: &mut Outbox) {
        self.arm_status(now, out);
    }

    pub fn index(&self) -> usize {
        self.index
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Read-only access to one of this group's lanes.
    pub fn lane(&self, lane: LaneId) -> Option<&Lane> {
        self.group.holds(lane).then(|| self.group.lane(lane))
    }

    pub fn lanes(&self) -> impl Iterator<Item = &Lane> {
        self.group.lanes.iter()
    }

    /// The driver's wall clock (`Replica::set_wall_clock`).
    pub fn set_wall_clock(&mut self, ms: u64) {
        self.group.wall_ms = ms;
    }

    /// This piece's lanes and counters, for the hub's `Replica::status_with`
    /// (each lane's limits as this group sees them).
    pub fn status_part(&self) -> super::PieceStatus {
        let orphaned = self.group.orphaned_in_flight();
        let view = self.group.facts.view(&self.cfg);
        super::PieceStatus {
            lanes: self
                .lanes()
                .map(|l| super::PieceLane {
                    lane: l.id(),
                    view: l.view(),
                    view_changing: !l.is_active(),
                    status: self.group.lane_status(l.id(), &view, orphaned),
                })
                .collect(),
            pool_len: self.group.pool_len(),
            orphaned,
            counters: self.counters.clone(),
        }
    }

    /// Messages for the hub since the last call.
    pub fn take_internal(&mut self) -> Vec<Internal> {
        std::mem::take(&mut self.internal)
    }

    /// Pool entries in flight at a decided slot or at a cell that does not
    /// list them (`Replica::leaked_pool_entries`).
    pub fn leaked_pool_entries(&self) -> usize {
        self.group.in_flight_at_decided() + self.group.orphaned_in_flight()
    }

    /// An event `Replica::piece_of` routes to this group: one of its lanes'
    /// messages, a request of a client its lanes own, one of its timers.
    pub fn handle(&mut self, now: Millis, event: Event, out: &mut Outbox) {
        match event {
            Event::Message { from, msg } => self.on_message(now, from, msg, out),
            Event::Request(req) => self.admit(now, req, true, out),
            Event::Timer(id) => self.on_timer(now, id, out),
            Event::Checkpointed { .. }
            | Event::StateInstalled { .. }
            | Event::Mispredicted(_)
            | Event::MissingCopies(_) => {
                debug_assert!(false, "an executor event at a lane group");
                self.counters.reject("hub-event-at-group");
            }
        }
        self.settle(now, out);
    }

    /// `handle(now, Event::Request(req), out)` for a request whose
    /// authenticator the driver verified already (`Replica::handle_verified_request`).
    pub fn handle_verified_request(&mut self, now: Millis, req: Request, out: &mut Outbox) {
        self.admit(now, req, false, out);
        self.settle(now, out);
    }

    /// A message from the hub.
    pub fn handle_internal(&mut self, now: Millis, msg: Internal, out: &mut Outbox) {
        match msg.0 {
            InternalKind::ToGroup { to, msg, facts } => {
                debug_assert_eq!(to, self.index, "a message for another group");
                if let Some(f) = facts {
                    self.group.facts = *f;
                }
                match msg {
                    super::group::ToGroup::Facts(f) => self.group.facts = f,
                    msg => {
                        let counters = &mut self.counters;
                        self.group.run(|g, hub| g.on_hub(now, msg, hub, counters, out));
                    }
                }
            }
            InternalKind::ToHub { .. } => {
                debug_assert!(false, "a hub message at a lane group");
                self.counters.reject("hub-message-at-group");
            }
        }
        self.settle(now, out);
    }

    fn on_message(&mut self, now: Millis, from: ReplicaId, msg: ReplicaMsg, out: &mut Outbox) {
        let mut cx = Cx::new(now, out, &mut self.counters);
        if let Err(reason) = super::check_peer_message(&self.cfg, self.me, &self.limits, from, &msg) {
            return cx.reject(reason);
        }
        let Some(lane) = msg.lane().filter(|l| self.group.holds(*l)) else {
            return cx.reject("bad-lane");
        };
        match msg {
            ReplicaMsg::Unverifiable(hint) => {
                let f = self.cfg.f();
                if self
                    .group
                    .pool_of_mut(lane)
                    .note_unverifiable(now, from, &hint, f)
                {
                    self.counters.clients_proven_partial += 1;
                }
            }
            ReplicaMsg::Statuses(b) => {
                if !super::status_bundle::well_formed(&self.cfg, &b)
                    || !b.lanes.iter().all(|e| self.group.holds(e.lane))
                {
                    return cx.reject("bad-status-bundle");
                }
                self.report_peer_status(now, from, b.stable_seq, b.lanes[0].lane);
                let counters = &mut self.counters;
                self.group.run(|g, hub| {
                    for st in b.statuses() {
                        g.on_lane_message(now, from, ReplicaMsg::Status(st), hub, counters, out);
                    }
                });
            }
            other => {
                if let ReplicaMsg::Status(st) = &other {
                    self.report_peer_status(now, from, st.stable_seq, st.lane);
                }
                let counters = &mut self.counters;
                self.group
                    .run(|g, hub| g.on_lane_message(now, from, other, hub, counters, out));
            }
        }
    }

    /// A peer's status names its stable checkpoint: state transfer and the
    /// checkpoint votes it may lack are the hub's (`flush_peer_statuses`).
    fn report_peer_status(
        &mut self,
        now: Millis,
        from: ReplicaId,
        stable_seq: chorus_core::Seq,
        lane: LaneId,
    ) {
        let e = self.peer_pending.entry(from).or_insert((stable_seq, false, now));
        e.0 = stable_seq;
        e.1 |= lane.0 == 0;
        e.2 = now;
    }

    fn flush_peer_statuses(&mut self, now: Millis) {
        let every = peer_status_every(&self.cfg);
        let due: Vec<ReplicaId> = self
            .peer_pending
            .keys()
            .filter(|p| {
                self.peer_reported
                    .get(p)
                    .is_none_or(|t| now.0.saturating_sub(t.0) >= every)
            })
            .copied()
            .collect();
        for from in due {
            let Some((stable_seq, lane0, at)) = self.peer_pending.remove(&from) else {
                continue;
            };
            self.peer_reported.insert(from, now);
            self.internal.push(Internal(InternalKind::ToHub {
                from: self.index,
                msg: ToHub::PeerStatus {
                    from,
                    stable_seq,
                    lane0,
                    at,
                },
            }));
        }
    }

    fn admit(&mut self, now: Millis, req: Request, verify: bool, out: &mut Outbox) {
        let (client, seq) = (req.client, req.seq);
        if !self.group.takes_request(&req) {
            debug_assert!(false, "a request for another group's lane");
            return self.counters.reject("request-for-other-group");
        }
        let admitted = self.group.run(|g, hub| g.admit(now, req, verify, hub));
        match admitted {
            Ok(crate::pool::Admitted::New) => self.counters.requests_admitted += 1,
            Ok(crate::pool::Admitted::Duplicate) => {}
            Err(reason) => {
                tracing::debug!(?client, ?seq, ?reason, "request rejected");
                self.counters.reject_request(reject_reason_name(&reason));
                out.push(Action::Reject { client, seq, reason });
            }
        }
    }

    fn on_timer(&mut self, now: Millis, id: TimerId, out: &mut Outbox) {
        let counters = &mut self.counters;
        match id {
            TimerId::ViewChange(l) if self.group.holds(l) => self
                .group
                .run(|g, hub| g.on_view_change_timer(now, l, hub, counters, out)),
            TimerId::Batch(l) if self.group.holds(l) => self.group.on_batch_timer(now, l),
            TimerId::GroupStatus(g) if g as usize == self.index => {
                if self.status_deadline.is_some_and(|d| now >= d) {
                    self.status_tick(now, out);
                }
            }
            _ => self.counters.reject("bad-timer"),
        }
    }

    fn arm_status(&mut self, now: Millis, out: &mut Outbox) {
        let at = now.plus(self.cfg.params.status_interval_ms);
        self.status_deadline = Some(at);
        out.set_timer(TimerId::GroupStatus(self.index as u32), at);
    }

    /// Every status interval: the lanes retry what they wait for and
    /// announce their state (one bundle per pillar, `status_bundle.rs`).
    fn status_tick(&mut self, now: Millis, out: &mut Outbox) {
        let counters = &mut self.counters;
        let cfg = self.cfg.clone();
        self.group.run(|g, hub| {
            let progress = g.status_tick(now, hub, counters, out);
            for b in super::status_bundle::bundles(&cfg, hub.stable_seq, progress) {
                out.broadcast(ReplicaMsg::Statuses(b));
            }
        });
        self.arm_status(now, out);
    }

    /// What `Replica::settle` does for a group: hand held pre-prepares back,
    /// propose what may be proposed, then planned returns and timers; then
    /// report to the hub.
    fn settle(&mut self, now: Millis, out: &mut Outbox) {
        let counters = &mut self.counters;
        let bound = self.group.lanes.len() * self.cfg.params.window_slots as usize + 8;
        self.group.run(|g, hub| {
            for _ in 0..bound {
                let released = g.release_owner_held(now, hub, counters, out);
                let proposed = g.propose_all(now, hub, counters, out);
                if !released && !proposed {
                    break;
                }
            }
            g.preferred_returns(now, hub, counters, out);
            g.refresh_timers(now, hub, counters, out);
        });
        self.flush_peer_statuses(now);
        self.group.report_frontier();
        for msg in self.group.take_to_hub() {
            self.internal.push(Internal(InternalKind::ToHub {
                from: self.index,
                msg,
            }));
        }
    }
}
