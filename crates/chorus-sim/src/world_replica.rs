//! The world's replica side: feeding events to a `Replica` and performing the
//! actions it emits, in order (io.rs: every `Persist` is durable before any
//! later send of the same outbox leaves), plus the driver duties of the
//! contract: executing deliveries, taking checkpoints when the executor
//! reaches them, installing transferred state, and answering clients.

use crate::net::Endpoint;
use crate::node::Live;
use crate::node::SimReplica;
use crate::options::ExecutorChoice;
use crate::report::ViolationKind;
use crate::world::{Ev, World};
use bytes::Bytes;
use chorus_core::{
    decode, encode, Batch, Cell, ClientId, Digest, ReplicaId, ReplicaMsg, Reply, ReplyBody, Request,
    RequestSeq, Seq, REJECT_ABANDONED,
};
use chorus_exec::{ExecResult, ReplyLookup};
use chorus_order::{Action, Event, Outbox, RejectReason, TimerId};
use std::collections::VecDeque;
use std::sync::Arc;

/// Follow-up events (checkpoints taken, state installed) one step may chain.
const FOLLOW_UPS_MAX: usize = 10_000;

/// Batches a custom (parallel) executor may run at once before the
/// simulator waits for them (issue 9: overlapping batches, as the runtime).
const EXEC_OVERLAP: u32 = 4;
/// …and how long after the first of them it waits at the latest.
const EXEC_FLUSH_US: crate::queue::Micros = 500;
/// The runtime's core loop handles at most this many queued inputs before
/// it writes (`chorus-node` `core_thread.rs`: the first plus 256).
const BURST_MAX_EVENTS: u32 = 257;

impl<R: SimReplica> World<R> {
    /// Boot a replica at the start of the run.
    pub(crate) fn start_node(&mut self, i: usize) {
        let now = self.nodes[i].process_ms(self.now_us());
        let node = &self.nodes[i];
        let mut out = Outbox::new();
        let replica = R::start(
            self.config.clone(),
            node.replica_id,
            node.identity.clone(),
            now,
            &mut out,
        );
        let executor = self.make_executor(i);
        self.nodes[i].live = Some(Live::new(replica, executor));
        self.set_predictor(i);
        self.set_burst_mode(i);
        self.set_pieces_apart(i, &mut out);
        self.perform(i, out);
        self.note_held(i);
    }

    fn set_pieces_apart(&mut self, i: usize, out: &mut Outbox) {
        if self.opts.pillar_hop_us.is_none() {
            return;
        }
        let now = self.nodes[i].process_ms(self.now_us());
        if let Some(live) = self.nodes[i].live.as_mut() {
            live.replica.set_pieces_apart(true, now, out);
        }
    }

    /// Queue what the replica's hub and groups sent each other, each due
    /// a hop (and a seeded jitter) later but never before an earlier
    /// message of its channel.
    fn collect_internal(&mut self, i: usize) {
        let Some(hop) = self.opts.pillar_hop_us else {
            return;
        };
        let jitter = self.opts.pillar_jitter_us;
        let now = self.now_us();
        let Some(msgs) = self.nodes[i].live.as_mut().map(|l| l.replica.take_internal()) else {
            return;
        };
        if msgs.is_empty() {
            // A wake-up a full event queue dropped is tried again here.
            return self.schedule_internal(i);
        }
        for msg in msgs {
            let extra = if jitter > 0 {
                rand::Rng::gen_range(&mut self.rng, 0..=jitter)
            } else {
                0
            };
            let Some(live) = self.nodes[i].live.as_mut() else {
                return;
            };
            let last = live.internal_last.entry(msg.channel()).or_insert(0);
            let due = (now + hop + extra).max(*last);
            *last = due;
            // Keep `internal` sorted by due time, FIFO among equals.
            let at = live.internal.partition_point(|(t, _)| *t <= due);
            live.internal.insert(at, (due, msg));
        }
        self.schedule_internal(i);
    }

    fn schedule_internal(&mut self, i: usize) {
        let incarnation = self.nodes[i].incarnation;
        let Some(live) = self.nodes[i].live.as_mut() else {
            return;
        };
        let Some(&(due, _)) = live.internal.front() else {
            return;
        };
        // A wake-up at or before the head is due is enough (one that fires
        // early finds nothing due and schedules again).
        if live.internal_wake.is_some_and(|w| w <= due) {
            return;
        }
        live.internal_wake = Some(due);
        if !self.schedule(due, Ev::InternalDue { node: i, incarnation }) {
            // Dropped (a full event queue): the next message tries again.
            if let Some(live) = self.nodes[i].live.as_mut() {
                live.internal_wake = None;
            }
        }
    }

    /// Hand the replica every hub–group message due by now, in order.
    pub(crate) fn on_internal_due(&mut self, i: usize, incarnation: u64) {
        if self.nodes[i].incarnation != incarnation {
            return;
        }
        let now = self.now_us();
        if let Some(live) = self.nodes[i].live.as_mut() {
            // A wake-up scheduled for a later head may still come: it finds
            // nothing due, which is harmless.
            if live.internal_wake.is_some_and(|w| w <= now) {
                live.internal_wake = None;
            }
        }
        loop {
            let Some(live) = self.nodes[i].live.as_mut() else {
                return;
            };
            if live.internal.front().is_none_or(|(t, _)| *t > now) {
                break;
            }
            let Some((_, msg)) = live.internal.pop_front() else {
                break;
            };
            self.counters.note("hub-group-message");
            let ms = self.nodes[i].process_ms(now);
            let wall = self.nodes[i].wall_ms(now);
            let Some(live) = self.nodes[i].live.as_mut() else {
                return;
            };
            let mut out = Outbox::new();
            live.replica.set_wall_clock(wall);
            live.replica.handle_internal(ms, msg, &mut out);
            self.perform(i, out);
            self.note_held(i);
        }
        self.schedule_internal(i);
    }

    /// The simulator ends every burst (`schedule_burst_ends`), as the
    /// runtime's core loop does.
    fn set_burst_mode(&mut self, i: usize) {
        if let Some(live) = self.nodes[i].live.as_mut() {
            live.replica.set_burst_mode(true);
        }
    }

    /// After a step: if the replica holds messages, its burst needs an end.
    fn note_held(&mut self, i: usize) {
        let Some(live) = self.nodes[i].live.as_mut() else {
            return;
        };
        if !live.replica.holds_messages() {
            return;
        }
        live.burst_events += 1;
        if !live.burst_scheduled {
            live.burst_scheduled = true;
            self.burst_dirty.push(i);
        }
    }

    /// Schedule the end of every burst the dispatched event began: at once
    /// without the resource model (after the events already due now), else
    /// when the node's core has done the work queued so far (the runtime
    /// handles what its inbox holds, then writes).
    pub(crate) fn schedule_burst_ends(&mut self) {
        for i in std::mem::take(&mut self.burst_dirty) {
            let incarnation = self.nodes[i].incarnation;
            let at = self.burst_end_at(i);
            if !self.schedule(at, Ev::BurstEnd { node: i, incarnation }) {
                // Dropped: the next step that holds messages tries again.
                if let Some(live) = self.nodes[i].live.as_mut() {
                    live.burst_scheduled = false;
                }
            }
        }
    }

    fn burst_end_at(&self, i: usize) -> crate::queue::Micros {
        let now = self.now_us();
        match self.perf.as_ref() {
            Some(p) => {
                let core = p.core_for(i, None, self.config.lanes());
                p.start_at(i, core, now)
            }
            None => now,
        }
    }

    pub(crate) fn on_burst_end(&mut self, i: usize, incarnation: u64) {
        if self.nodes[i].incarnation != incarnation {
            return;
        }
        let at = self.burst_end_at(i);
        let now = self.now_us();
        let Some(events) = self.nodes[i].live.as_ref().map(|l| l.burst_events) else {
            return;
        };
        // Events that arrived meanwhile still wait for the core (if the
        // queue is full, the burst ends now rather than never).
        if at > now && events < BURST_MAX_EVENTS && self.schedule(at, Ev::BurstEnd { node: i, incarnation }) {
            return;
        }
        let Some(live) = self.nodes[i].live.as_mut() else {
            return;
        };
        live.burst_scheduled = false;
        live.burst_events = 0;
        let ms = self.nodes[i].process_ms(now);
        let Some(live) = self.nodes[i].live.as_mut() else {
            return;
        };
        let mut out = Outbox::new();
        live.replica.end_of_burst(ms, &mut out);
        self.perform(i, out);
        self.note_held(i);
    }

    /// sarek: the replica routes requests by the service's PREDICT().
    fn set_predictor(&mut self, i: usize) {
        if self.opts.mode != chorus_core::OrderingMode::Sarek {
            return;
        }
        let p = crate::sarek_sim::predictor(&self.opts.service, self.config.lanes() as u16);
        if let Some(live) = self.nodes[i].live.as_mut() {
            live.replica.set_predictor(p);
        }
    }

    pub(crate) fn on_crash(&mut self, i: usize, torn_after: Option<u32>, cluster_restart: bool) {
        if !self.nodes[i].is_live() {
            return;
        }
        if cluster_restart {
            self.counters.fault("cluster-restart-crash");
        }
        match torn_after {
            Some(k) => self.nodes[i].torn_after = Some(k),
            None => self.crash_now(i),
        }
    }

    fn crash_now(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        node.live = None;
        node.torn_after = None;
        node.incarnation += 1;
        self.counters.fault("crash");
        self.trace_words(&[0xc4a5, i as u64]);
    }

    /// Restart from the persisted records only; the executor starts empty.
    pub(crate) fn on_restart(&mut self, i: usize) {
        if self.nodes[i].torn_after.is_some() {
            // The torn crash never found a step to tear: crash now.
            self.crash_now(i);
        }
        if self.nodes[i].is_live() {
            return;
        }
        // A new process: its clock starts again (the runtime's `now` is
        // the time since the process started), its wall clock runs on.
        let local = self.nodes[i].clock.local_ms(self.now_us());
        self.nodes[i].boot = local;
        let now = self.nodes[i].process_ms(self.now_us());
        let node = &self.nodes[i];
        let records = node.store.records();
        let mut out = Outbox::new();
        let replica = R::recover(
            self.config.clone(),
            node.replica_id,
            node.identity.clone(),
            records,
            now,
            &mut out,
        );
        let executor = self.make_executor(i);
        self.nodes[i].live = Some(Live::new(replica, executor));
        self.set_predictor(i);
        self.set_burst_mode(i);
        self.set_pieces_apart(i, &mut out);
        self.checker.restarted(self.nodes[i].replica_id);
        self.streams.reset(self.nodes[i].replica_id);
        self.extra.executor_reset(self.nodes[i].replica_id);
        self.counters.note("restart");
        self.perform(i, out);
        self.note_held(i);
    }

    pub(crate) fn on_message(&mut self, i: usize, from: ReplicaId, msg: ReplicaMsg) {
        if !self.nodes[i].is_live() {
            return;
        }
        self.counters.messages_delivered += 1;
        if let Some(adv) = self.nodes[i].adversary.as_mut() {
            adv.observe(&msg);
        }
        if let Some(adv) = self.nodes[i].smart.as_mut() {
            adv.observe(&msg);
        }
        if let Some(adv) = self.nodes[i].rcc.as_mut() {
            adv.observe(&msg);
        }
        self.handle(i, Event::Message { from, msg });
        self.rcc_release(i);
    }

    pub(crate) fn on_request(&mut self, i: usize, request: Request) {
        // The executor answers retransmissions below: only from a barrier.
        if self.nodes[i].live.as_ref().is_some_and(|l| l.exec_unflushed > 0) {
            self.exec_barrier(i);
        }
        if self.nodes[i].live.is_none() {
            return;
        }
        if let Some(adv) = self.nodes[i].smart.as_mut() {
            adv.observe_request(&request);
        }
        if self.fake_answer(i, &request) {
            self.counters.messages_delivered += 1;
            return;
        }
        let Some(live) = self.nodes[i].live.as_ref() else {
            return;
        };
        self.counters.messages_delivered += 1;
        let now = self.now_us();
        if let Some(adv) = self.nodes[i].rcc.as_ref() {
            if adv.drops_request(now, &request, &mut self.counters) {
                return;
            }
        }
        let d = request.digest();
        // A reused seq with another operation never gets the first one's reply.
        if live
            .executor
            .request_digest(request.client, request.seq)
            .is_some_and(|x| x != d)
        {
            let body = ReplyBody::Rejected(chorus_exec::RejectKind::SeqReused.as_str().into());
            return self.send_reply(i, request.client, request.seq, Some(d), body);
        }
        // A retransmission of an executed request: answered from the
        // executor's client table, as the runtime's execution thread does
        // (`chorus-node` `ExecInput::Retransmit`), so a table restored from a
        // snapshot answers here as it would there (issue 8 finding 6). Unlike
        // the runtime, which answers only seqs its connection saw before,
        // this also answers a first arrival from the table.
        match live.executor.reply_lookup(request.client, request.seq) {
            ReplyLookup::Ready(result) => {
                self.send_reply(i, request.client, request.seq, Some(d), ReplyBody::Full(result));
            }
            ReplyLookup::Gone => {
                // Counted as executed, nothing to re-send: it will never run, and
                // silence would leave the client retransmitting for ever.
                let body = ReplyBody::Rejected(REJECT_ABANDONED.into());
                return self.send_reply(i, request.client, request.seq, Some(d), body);
            }
            ReplyLookup::Unknown | ReplyLookup::Pending => {
                let key = (request.client, request.seq);
                if self.resent.contains(&key) {
                    if let Some(live) = self.nodes[i].live.as_mut() {
                        live.resent.insert(key);
                    }
                }
            }
        }
        self.handle(i, Event::Request(request));
    }

    /// `fake-answer` (`first_contact_plan.rs`): a request sent to the
    /// attacker alone is dropped and answered at once with a fake result
    /// or a lone "busy", or (the lure) proposed if it is a probe and
    /// dropped in silence if not. Returns whether it was dropped.
    fn fake_answer(&mut self, i: usize, request: &Request) -> bool {
        use crate::first_contact_plan::FakeAnswer;
        if self.nodes[i]
            .adversary
            .as_ref()
            .is_none_or(|a| a.kind != crate::FaultKind::FakeAnswer)
        {
            return false;
        }
        let Some(live) = self.nodes[i].live.as_ref() else {
            return false;
        };
        // Omniscient: what the backups hold too is proposed honestly, so
        // their timers never replace this primary.
        let Some(&probe) = self.sent_alone.get(&(request.client, request.seq)) else {
            return false;
        };
        if live
            .executor
            .request_digest(request.client, request.seq)
            .is_some()
        {
            return false;
        }
        let body = match FakeAnswer::for_request(request.client.0, request.seq.0, probe) {
            FakeAnswer::Honest => {
                self.counters.fault("byz-lure-probe");
                return false;
            }
            FakeAnswer::Drop => {
                self.counters.fault("byz-lure-drop");
                return true;
            }
            FakeAnswer::FakeResult => {
                self.counters.fault("byz-fake-result");
                ReplyBody::Full(bytes::Bytes::from_static(b"computed by nobody"))
            }
            FakeAnswer::Busy => {
                self.counters.fault("byz-fake-busy");
                ReplyBody::Busy
            }
        };
        let c = request.client.0 as usize;
        if c < self.clients.len() + self.byz_clients.len() && self.client_linked(c, i) {
            self.transmit_reply(i, c, request.seq, Some(request.digest()), body);
        }
        true
    }

    /// Node `i`'s reply to client `c` (linked), over the network.
    fn transmit_reply(
        &mut self,
        i: usize,
        c: usize,
        seq: RequestSeq,
        request: Option<chorus_core::Digest>,
        body: ReplyBody,
    ) {
        let reply = Reply {
            client: ClientId(c as u64),
            seq,
            request,
            replica: self.nodes[i].replica_id,
            read_only: false,
            body,
        };
        self.transmit(Endpoint::Node(i), Endpoint::Client(c), || Ev::Reply {
            client: c,
            reply: reply.clone(),
        });
    }

    pub(crate) fn on_timer(&mut self, i: usize, incarnation: u64, id: TimerId, generation: u64) {
        let node = &mut self.nodes[i];
        if node.incarnation != incarnation {
            return;
        }
        let Some(live) = node.live.as_mut() else { return };
        if live.timers.get(&id) != Some(&generation) {
            return;
        }
        live.timers.remove(&id);
        self.handle(i, Event::Timer(id));
    }

    fn handle(&mut self, i: usize, event: Event) {
        let now = self.nodes[i].process_ms(self.now_us());
        let wall = self.nodes[i].wall_ms(self.now_us());
        if self.log_replica == Some(self.nodes[i].replica_id) {
            eprintln!(
                "{:>10}us node{i} <- {}",
                self.queue.now_us(),
                crate::sim_log::event(&event, &self.limits)
            );
        }
        let Some(live) = self.nodes[i].live.as_mut() else {
            return;
        };
        let mut out = Outbox::new();
        live.replica.set_wall_clock(wall);
        live.replica.handle(now, event, &mut out);
        self.perform(i, out);
        self.note_held(i);
    }

    /// Perform the actions in order, then feed the follow-up events they
    /// produced (each with its own actions), until nothing is left.
    fn perform(&mut self, i: usize, out: Outbox) {
        self.perform_chain(i, out);
        self.check_new_views(i);
        self.collect_internal(i);
    }

    /// PBFT §4.4: the primary of a new view pre-prepares every re-proposal
    /// of its NEW-VIEW, so each must lie inside the window it has once it
    /// entered the view. One it cannot send leaves the view without progress
    /// until it changes again (issue 8 finding 8: a primary behind the
    /// NEW-VIEW's checkpoint kept its old window).
    fn check_new_views(&mut self, i: usize) {
        if self.sent_new_views.is_empty() {
            return;
        }
        let sent = std::mem::take(&mut self.sent_new_views);
        let Some(live) = self.nodes[i].live.as_ref() else {
            return;
        };
        let id = self.nodes[i].replica_id;
        for (lane, view, top) in sent {
            let Some(top) = top else { continue };
            let Some((now_view, low, high)) = live.replica.lane_window(lane) else {
                continue;
            };
            // Below the low is fine: those slots are under its stable checkpoint.
            if now_view == view && top >= high {
                let now = self.now_us();
                self.checker.violate(
                    ViolationKind::NewViewWindow,
                    now,
                    format!(
                        "{id:?} sent the NEW-VIEW of {lane:?} v{view} re-proposing up to s{top}, above its window [s{low}, s{high}): it can never pre-prepare it"
                    ),
                );
            }
        }
    }

    fn perform_chain(&mut self, i: usize, out: Outbox) {
        let mut actions: VecDeque<Action> = out.actions.into();
        let mut follow_ups: VecDeque<Event> = VecDeque::new();
        let mut chained = 0;
        loop {
            while let Some(action) = actions.pop_front() {
                if let Some(k) = self.nodes[i].torn_after.as_mut() {
                    if *k == 0 {
                        // Crash in the middle of the outbox: later actions never happen.
                        self.counters.fault("torn-crash");
                        self.crash_now(i);
                        return;
                    }
                    *k -= 1;
                }
                self.perform_one(i, action, &mut follow_ups);
                if !self.nodes[i].is_live() {
                    return;
                }
                // SAREK §IV-D: requests the executor suspended go to the
                // replica as re-predictions.
                if let Some(live) = self.nodes[i].live.as_mut() {
                    let mut bodies = Vec::new();
                    live.executor.drain_repredictions(&mut bodies);
                    for body in bodies {
                        self.counters.note("reprediction");
                        follow_ups.push_back(Event::Mispredicted(body));
                    }
                }
            }
            let Some(event) = follow_ups.pop_front() else {
                return;
            };
            chained += 1;
            if chained > FOLLOW_UPS_MAX {
                let id = self.nodes[i].replica_id;
                self.checker.violate(
                    ViolationKind::Delivery,
                    self.now_us(),
                    format!("{id:?} chained more than {FOLLOW_UPS_MAX} follow-up events in one step"),
                );
                return;
            }
            let now = self.nodes[i].process_ms(self.now_us());
            let wall = self.nodes[i].wall_ms(self.now_us());
            let Some(live) = self.nodes[i].live.as_mut() else {
                return;
            };
            let mut out = Outbox::new();
            live.replica.set_wall_clock(wall);
            live.replica.handle(now, event, &mut out);
            actions.extend(out.actions);
        }
    }

    fn perform_one(&mut self, i: usize, action: Action, follow_ups: &mut VecDeque<Event>) {
        if self.log_replica == Some(self.nodes[i].replica_id) {
            eprintln!(
                "{:>10}us node{i} -> {}",
                self.queue.now_us(),
                crate::sim_log::action(&action, &self.limits)
            );
        }
        match action {
            Action::Persist(record) => {
                let config = self.config.clone();
                self.nodes[i].store.append(record, &config);
            }
            Action::Send { to, msg } => self.send_replica(i, to, msg),
            Action::Broadcast { msg } => {
                let me = self.nodes[i].replica_id;
                if let ReplicaMsg::NewView(nv) = &msg {
                    if self.nodes[i].correct && nv.replica == me {
                        let top = nv.reproposals.iter().map(|r| r.slot.0).max();
                        self.sent_new_views.push((nv.lane, nv.view.0, top));
                    }
                }
                for r in 0..self.config.n() as u32 {
                    if ReplicaId(r) != me {
                        self.send_replica(i, ReplicaId(r), msg.clone());
                    }
                }
            }
            Action::Deliver { seq, cell, batch } => self.deliver(i, seq, cell, batch, follow_ups),
            Action::DeliverStream { cell, batch } => self.deliver_stream(i, cell, batch, follow_ups),
            Action::SetTimer { id, at } => {
                let node = &mut self.nodes[i];
                let Some(live) = node.live.as_mut() else { return };
                self.next_timer_generation += 1;
                let generation = self.next_timer_generation;
                live.timers.insert(id, generation);
                let at_us = node.global_us_at(at);
                let incarnation = node.incarnation;
                self.schedule(
                    at_us,
                    Ev::Timer {
                        node: i,
                        incarnation,
                        id,
                        generation,
                    },
                );
            }
            Action::CancelTimer { id } => {
                if let Some(live) = self.nodes[i].live.as_mut() {
                    live.timers.remove(&id);
                }
            }
            Action::TakeCheckpoint { seq } => self.request_checkpoint(i, seq, follow_ups),
            Action::FindMissingCopies => {
                if !self.opts.find_missing_copies {
                    return;
                }
                if let Some(live) = self.nodes[i].live.as_mut() {
                    let copies = live.executor.missing_copies();
                    if !copies.is_empty() {
                        self.counters.note("missing-copies-handed-on");
                        follow_ups.push_back(Event::MissingCopies(copies));
                    }
                }
            }
            Action::InstallState { cert, snapshot } => self.install_state(i, cert, snapshot, follow_ups),
            Action::Reject { client, seq, reason } => {
                let body = match reason {
                    RejectReason::Busy => ReplyBody::Busy,
                    other => ReplyBody::Rejected(format!("{other:?}")),
                };
                self.send_reply(i, client, seq, None, body);
            }
        }
    }

    /// To every instance of replica `to` this node is linked with, through the
    /// adversary when this node is Byzantine, and through the wire codec: a
    /// message the codec refuses would be dropped by the real transport, so a
    /// correct replica emitting one is a bug.
    fn send_replica(&mut self, i: usize, to: ReplicaId, msg: ReplicaMsg) {
        let now = self.now_us();
        self.smart_hooks(i, &msg);
        if let Some(adv) = self.nodes[i].rcc.as_mut() {
            for (delay, m) in adv.outgoing(&mut self.rng, now, to, msg, &mut self.counters) {
                if delay == 0 {
                    self.emit(i, to, m);
                } else {
                    self.schedule(now + delay, Ev::Delayed { node: i, to, msg: m });
                }
            }
            return self.rcc_release(i);
        }
        if let Some(adv) = self.nodes[i].smart.as_mut() {
            for (delay, m) in adv.outgoing(&mut self.rng, now, to, msg, &mut self.counters) {
                if delay == 0 {
                    self.emit(i, to, m);
                } else {
                    self.schedule(now + delay, Ev::Delayed { node: i, to, msg: m });
                }
            }
            return;
        }
        let msgs = match self.nodes[i].adversary.as_mut() {
            Some(adv) => adv.outgoing(&mut self.rng, now, to, msg, &mut self.counters),
            None => vec![msg],
        };
        for m in msgs {
            self.emit(i, to, m);
        }
    }

    /// What the rcc adversary on node `i` has due now goes out, and its
    /// next wake-up is scheduled.
    fn rcc_release(&mut self, i: usize) {
        let now = self.now_us();
        let Some(adv) = self.nodes[i].rcc.as_mut() else {
            return;
        };
        let due = adv.take_due(now, &mut self.counters);
        let wake = adv.wake_at();
        for (to, m) in due {
            self.emit(i, to, m);
        }
        if let Some(at) = wake.filter(|at| self.nodes[i].rcc_wake != Some(*at)) {
            self.nodes[i].rcc_wake = Some(at);
            self.schedule(at.max(now), Ev::RccWake { node: i });
        }
    }

    pub(crate) fn on_rcc_wake(&mut self, i: usize) {
        self.nodes[i].rcc_wake = None;
        if self.nodes[i].is_live() {
            self.rcc_release(i);
        }
    }

    /// A message a smart adversary held back goes out now.
    pub(crate) fn on_delayed(&mut self, i: usize, to: ReplicaId, msg: ReplicaMsg) {
        if self.nodes[i].is_live() {
            self.emit(i, to, msg);
        }
    }

    /// Onto the network, to every instance of `to` that node `i` is linked
    /// with, through the wire codec.
    fn emit(&mut self, i: usize, to: ReplicaId, m: ReplicaMsg) {
        let from = self.nodes[i].replica_id;
        let now = self.now_us();
        let targets: Vec<usize> = self.by_replica[to.index()]
            .iter()
            .copied()
            .filter(|&j| j != i && self.linked(i, j))
            .collect();
        let m = match decode::<ReplicaMsg>(&encode(&m), &self.limits) {
            Ok(m) => m,
            Err(e) => {
                if self.nodes[i].correct {
                    self.checker.violate(
                        ViolationKind::Delivery,
                        now,
                        format!("{from:?} sent a {} the wire codec refuses: {e}", m.kind()),
                    );
                }
                self.counters.fault("codec-reject");
                return;
            }
        };
        *self.counters.by_kind.entry(m.kind()).or_insert(0) += targets.len() as u64;
        self.perf_charge_broadcast(&m);
        for &j in &targets {
            self.transmit(Endpoint::Node(i), Endpoint::Node(j), || Ev::Message {
                to: j,
                from,
                msg: m.clone(),
            });
        }
    }

    /// What the smart plan does around a message node `i` sends: `outage`
    /// crashes a victim in the middle of a view change or a state transfer;
    /// `twins-resplit` draws the twins' split anew when a new view forms.
    fn smart_hooks(&mut self, i: usize, msg: &ReplicaMsg) {
        if self.plan.smart.drawn.is_empty() {
            return;
        }
        let now = self.now_us();
        if let ReplicaMsg::NewView(nv) = msg {
            let resplit = self
                .plan
                .byzantine
                .iter()
                .any(|(_, k)| *k == crate::faults::FaultKind::TwinsResplit);
            if resplit && self.extra.new_view_formed(nv.lane, nv.view) {
                self.resplit_twins();
            }
        }
        let trigger = matches!(msg, ReplicaMsg::ViewChange(_) | ReplicaMsg::StateRequest(_));
        let node = &self.nodes[i];
        if !trigger
            || !node.correct
            || node.torn_after.is_some()
            || now >= self.plan.heal_at_us
            || !self.plan.smart.trigger_victims.contains(&node.replica_id)
            || !self.extra.may_trigger_crash()
        {
            return;
        }
        use crate::smart_plan::{TRIGGERED_DOWN_MAX_US, TRIGGERED_DOWN_MIN_US, TRIGGER_PPM};
        use rand::Rng;
        if self.rng.gen_range(0..1_000_000) >= TRIGGER_PPM {
            return;
        }
        self.extra.triggered_crash();
        self.counters.fault(if matches!(msg, ReplicaMsg::ViewChange(_)) {
            "crash-in-view-change"
        } else {
            "crash-in-state-transfer"
        });
        // Crash a few actions later, inside this very step.
        self.nodes[i].torn_after = Some(self.rng.gen_range(0..3));
        let down = self.rng.gen_range(TRIGGERED_DOWN_MIN_US..=TRIGGERED_DOWN_MAX_US);
        self.schedule(now + down, Ev::Restart { node: i });
    }

    /// Twins: every correct replica (and client) picks a side anew.
    fn resplit_twins(&mut self) {
        use rand::Rng;
        self.counters.fault("twins-resplit");
        for j in 0..self.nodes.len() {
            if !self.nodes[j].twin {
                self.nodes[j].side = self.rng.gen_range(0..2);
            }
        }
    }

    pub(crate) fn send_reply(
        &mut self,
        i: usize,
        client: ClientId,
        seq: RequestSeq,
        request: Option<chorus_core::Digest>,
        body: ReplyBody,
    ) {
        let c = client.0 as usize;
        if c >= self.clients.len() + self.byz_clients.len() || !self.client_linked(c, i) {
            return;
        }
        // Replies to correct clients from correct replicas must carry what
        // was computed; refusals are not results.
        if let ReplyBody::Full(result) = &body {
            if c < self.clients.len() && !result.starts_with(chorus_exec::REJECTED_PREFIX) {
                let now = self.now_us();
                let id = self.nodes[i].replica_id;
                self.checker.replied(now, id, (client, seq), Digest::of(result));
            }
        }
        let body = match (body, self.nodes[i].adversary.as_mut()) {
            (ReplyBody::Full(result), Some(adv)) => {
                match adv.reply(&mut self.rng, result, &mut self.counters) {
                    Some(r) => ReplyBody::Full(r),
                    None => return,
                }
            }
            (body, _) => body,
        };
        self.transmit_reply(i, c, seq, request, body);
    }

    fn deliver(
        &mut self,
        i: usize,
        seq: Seq,
        cell: Cell,
        batch: Arc<Batch>,
        follow_ups: &mut VecDeque<Event>,
    ) {
        let now = self.now_us();
        let id = self.nodes[i].replica_id;
        let digest = batch.digest();
        self.trace_words(&[0xde11, i as u64, seq.0]);
        self.trace.update(digest.as_bytes());
        self.checker.delivered(now, &self.config, id, seq, cell, &batch);
        if self.nodes[i].correct {
            self.count_attacker_rank(seq, cell, &batch);
        }
        let Some(live) = self.nodes[i].live.as_mut() else {
            return;
        };
        let next = live.executor.next_seq();
        if seq != next {
            if self.nodes[i].correct {
                self.checker.violate(
                    ViolationKind::Delivery,
                    now,
                    format!("{id:?} delivered {seq:?} but its executor is at {next:?}"),
                );
            }
            return;
        }
        self.perf_execute(i, &batch);
        let Some(live) = self.nodes[i].live.as_mut() else {
            return;
        };
        live.executor.submit(seq, batch);
        if matches!(self.opts.executor, ExecutorChoice::Custom { .. }) {
            // Issue 9: the parallel executor runs up to EXEC_OVERLAP batches
            // at once, as in the runtime (no barrier per batch). Their results
            // are handed out only at a barrier, so the run stays a function of
            // the seed whatever the worker threads did: every EXEC_OVERLAP
            // batches, EXEC_FLUSH_US after the first one, before a request is
            // answered from the executor, and at checkpoints.
            live.exec_unflushed += 1;
            if live.exec_unflushed >= EXEC_OVERLAP {
                self.exec_barrier(i);
            } else if live.exec_unflushed == 1 {
                let incarnation = self.nodes[i].incarnation;
                let at = self.now_us() + EXEC_FLUSH_US;
                self.schedule(at, Ev::ExecFlush { node: i, incarnation });
            }
        } else {
            self.drain_results(i);
        }
        self.checkpoint_if_due(i, seq.next(), follow_ups);
    }

    /// RCC §IV: where the order attacker's own batches land in their rounds.
    fn count_attacker_rank(&mut self, seq: Seq, cell: Cell, batch: &Batch) {
        let Some(adv) = self
            .nodes
            .iter()
            .filter_map(|nd| nd.rcc.as_ref())
            .find(|a| a.kind == crate::faults::FaultKind::OrderAttack)
        else {
            return;
        };
        let own = adv.proposed(&batch.digest());
        let lane = adv.lane().0;
        let m = self.config.lanes() as u64;
        self.rcc_obs.delivered(seq, cell, batch, m, lane, own);
    }

    /// Wait for every batch the executor has, then hand out the results.
    fn exec_barrier(&mut self, i: usize) {
        let Some(live) = self.nodes[i].live.as_mut() else {
            return;
        };
        live.executor.state_digest();
        if live.exec_unflushed > 1 {
            // Batches that ran at the same time (what the barrier per batch
            // never allowed).
            *self.counters.notes.entry("exec-overlapped-batches").or_insert(0) +=
                u64::from(live.exec_unflushed);
        }
        live.exec_unflushed = 0;
        self.drain_results(i);
    }

    pub(crate) fn on_exec_flush(&mut self, i: usize, incarnation: u64) {
        if self.nodes[i].incarnation == incarnation
            && self.nodes[i].live.as_ref().is_some_and(|l| l.exec_unflushed > 0)
        {
            self.exec_barrier(i);
        }
    }

    pub(crate) fn drain_results(&mut self, i: usize) {
        let now = self.now_us();
        let id = self.nodes[i].replica_id;
        let Some(live) = self.nodes[i].live.as_mut() else {
            return;
        };
        let mut results: Vec<ExecResult> = Vec::new();
        live.executor.drain_results(&mut results);
        // Non-conflicting requests may finish in any order: fix one.
        results.sort_by_key(|r| (r.delivered_at, r.client, r.request_seq, r.duplicate));
        let correct = self.nodes[i].correct;
        for r in results {
            let resent = self.nodes[i]
                .live
                .as_mut()
                .is_some_and(|l| l.resent.remove(&(r.client, r.request_seq)));
            let asked_us = resent || r.duplicate;
            let key = self.exactly_once_key(r.client, r.request_seq, r.delivered_at);
            let result_digest = Digest::of(&r.result);
            self.trace.update(result_digest.as_bytes());
            if correct && !r.is_rejected() {
                self.extra.executed(now, id, key, r.delivered_at, r.duplicate);
            }
            if !r.is_rejected() {
                self.checker
                    .executed(now, id, key, r.delivered_at, result_digest, r.duplicate);
            }
            if r.few_replies {
                let (n, f) = (self.config.n(), self.config.f());
                let designated = chorus_core::designated_replier(r.client, r.request_seq, id, n, f);
                // As `chorus-node`'s execution thread: the client asked others.
                if !designated && !asked_us {
                    self.counters.note("reply-left-to-others");
                    continue;
                }
                // A Byzantine designated replier withholds exactly these (also
                // once resent) and answers everything else, so the client keeps
                // hearing from it (`chorus_core::reply_fanout`): only the
                // correct replicas' answers to the resend get it through.
                if designated && !correct {
                    self.counters.fault("withhold-designated-reply");
                    continue;
                }
            }
            self.send_reply(
                i,
                r.client,
                r.request_seq,
                Some(r.request),
                ReplyBody::Full(r.result),
            );
        }
    }

    fn request_checkpoint(&mut self, i: usize, seq: Seq, follow_ups: &mut VecDeque<Event>) {
        let now = self.now_us();
        let id = self.nodes[i].replica_id;
        let Some(live) = self.nodes[i].live.as_mut() else {
            return;
        };
        let next = live.executor.next_seq();
        if next < seq {
            live.pending_checkpoints.insert(seq);
        } else if next == seq {
            self.take_checkpoint(i, seq, follow_ups);
        } else if self.nodes[i].correct {
            self.checker.violate(
                ViolationKind::Delivery,
                now,
                format!(
                    "{id:?} asked for a checkpoint at {seq:?} after its executor passed it (at {next:?})"
                ),
            );
        }
    }

    pub(crate) fn checkpoint_if_due(&mut self, i: usize, seq: Seq, follow_ups: &mut VecDeque<Event>) {
        let Some(live) = self.nodes[i].live.as_mut() else {
            return;
        };
        if live.executor.next_seq() == seq && live.pending_checkpoints.remove(&seq) {
            self.take_checkpoint(i, seq, follow_ups);
        }
    }

    fn take_checkpoint(&mut self, i: usize, seq: Seq, follow_ups: &mut VecDeque<Event>) {
        let now = self.now_us();
        let id = self.nodes[i].replica_id;
        let Some(live) = self.nodes[i].live.as_mut() else {
            return;
        };
        let cp = live.executor.checkpoint();
        live.exec_unflushed = 0;
        // Everything submitted has executed now (CBASE sync): flush the results.
        self.drain_results(i);
        assert_eq!(cp.next_seq, seq, "the executor checkpoints where it stands");
        self.checker.state_at(now, id, seq, cp.state_digest);
        follow_ups.push_back(Event::Checkpointed {
            seq,
            state_digest: cp.state_digest,
            snapshot: cp.snapshot,
        });
    }

    fn install_state(
        &mut self,
        i: usize,
        cert: chorus_core::CheckpointCert,
        snapshot: Bytes,
        follow_ups: &mut VecDeque<Event>,
    ) {
        let now = self.now_us();
        let id = self.nodes[i].replica_id;
        // Results of batches still running go out before the state is replaced.
        if self.nodes[i].live.as_ref().is_some_and(|l| l.exec_unflushed > 0) {
            self.exec_barrier(i);
        }
        let Some(live) = self.nodes[i].live.as_mut() else {
            return;
        };
        self.counters.note("state-install");
        // The runtime's code path (`chorus-node` exec thread): install only a
        // verified state, and always answer the core.
        let outcome = live.executor.install(cert.seq, &snapshot, cert.state_digest);
        match &outcome {
            Ok(digest) => {
                live.pending_checkpoints.retain(|s| *s > cert.seq);
                // A new executor life for the exactly-once count.
                self.extra.executor_reset(id);
                self.streams.reset(id);
                self.checker
                    .installed(now, id, cert.seq, *digest, cert.state_digest);
            }
            Err(chorus_exec::ExecError::DigestMismatch { .. }) => self.counters.note("snapshot-mismatch"),
            Err(_) => self.counters.note("snapshot-restore-failed"),
        }
        let digest = chorus_exec::installed_digest(&outcome, &cert.state_digest);
        follow_ups.push_back(Event::StateInstalled {
            seq: cert.seq,
            state_digest: digest,
        });
    }
}
