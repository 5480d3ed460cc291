//! Catch-up: periodic status, retransmission to lagging peers, `Decided`
//! notices (f+1 matching = at least one correct replica decided), and
//! fetching batches by digest. The simulator loses messages; these paths are
//! what turns "eventually delivered" back into "delivered".

use super::{
    Lane, LaneEnv, LaneOutput, SlotState, Want, WantReason, DECIDED_ABOVE_GAP_PER_STATUS, DECIDED_PER_STATUS,
    RETRANSMIT_SLOTS,
};
use crate::counters::Cx;
use chorus_core::{
    Batch, BatchReply, Commit, Decided, Digest, FetchBatch, LaneProgress, PrePrepare, ReplicaId, ReplicaMsg,
    Seq, Slot, Status,
};
use std::sync::Arc;

impl Lane {
    /// Status tick: re-send our VIEW-CHANGE while the view change lasts,
    /// give up on a view f+1 peers gave up on, and retry batch fetches. Where
    /// we are goes out in the replica's status bundle (`Lane::progress`).
    pub fn on_status_tick(&mut self, cx: &mut Cx, env: &LaneEnv) -> LaneOutput {
        let mut lo = LaneOutput::default();
        if self.give_up_with_f_plus_one(cx) {
            self.leave_on_certificate(cx, env, &mut lo);
        }
        if !self.active {
            if let Some(vc) = &self.own_vc {
                cx.counters.retransmissions += 1;
                cx.out.broadcast(ReplicaMsg::ViewChange(vc.clone()));
            } else if self.vc_withheld {
                // Withheld until the window reached recovered records
                // (`send_own_view_change`).
                self.send_own_view_change(cx, env);
                if self.own_vc.is_some() {
                    self.try_new_view(cx, env, &mut lo);
                }
            }
        }
        // Our signed timeout, while it may still be missing from a
        // certificate (we wait for one, or we left the view before ours):
        // peers may have lost the first broadcast (`timeout_cert.rs`).
        if self.suspecting || !self.active {
            if let Some(t) = &self.timeouts[self.me.index()] {
                cx.counters.retransmissions += 1;
                cx.out.broadcast(ReplicaMsg::Timeout(t.clone()));
            }
        }
        self.retry_wants(cx);
        // Leaving on a certificate may have installed a NEW-VIEW that moved
        // the window: parked messages, and recovered decisions it reached,
        // go out now, not at the lane's next message.
        self.replay(cx, env, &mut lo);
        lo
    }

    /// This lane's entry of the periodic status bundle.
    pub(crate) fn progress(&self) -> LaneProgress {
        LaneProgress {
            lane: self.id,
            view: self.view,
            next_undecided: self.next_undecided,
            suspects: self.suspecting,
            awaits_new_view: self.vc_withheld,
        }
    }

    pub(crate) fn broadcast_status(&mut self, cx: &mut Cx, stable_seq: Seq) {
        cx.out.broadcast(ReplicaMsg::Status(Status {
            lane: self.id,
            view: self.view,
            next_undecided: self.next_undecided,
            stable_seq,
            suspects: self.suspecting,
            awaits_new_view: self.vc_withheld,
        }));
    }

    /// f+1 peers committed `digest` at `slot` (so a correct one prepared it
    /// and the slot is about to be decided) but we never got its
    /// pre-prepare: its leader cannot reach us, or dropped us. Tell those
    /// peers where we are now, so they answer with `Decided` notices at once
    /// rather than at our next status tick (a leader cut off from one peer
    /// otherwise learns each slot of that peer a status interval late, and
    /// proposes its own slots that much later: seed 3000270). Sent once per
    /// slot, when the f+1-th commit arrives; only the committers get it.
    pub(crate) fn ask_committers_for_decision(
        &mut self,
        cx: &mut Cx,
        slot: Slot,
        digest: Digest,
        stable_seq: Seq,
    ) {
        let (view, f) = (self.view, self.cfg.f());
        let Some(st) = self.slots.get(&slot) else {
            return;
        };
        if slot < self.next_undecided || st.decided.is_some() || st.accepted_in(view).is_some() {
            return;
        }
        let committers: Vec<ReplicaId> = st
            .commits
            .iter()
            .filter(|(_, d)| **d == digest)
            .map(|(r, _)| *r)
            .collect();
        if committers.len() != f + 1 {
            return;
        }
        let status = Status {
            lane: self.id,
            view,
            next_undecided: self.next_undecided,
            stable_seq,
            suspects: self.suspecting,
            awaits_new_view: self.vc_withheld,
        };
        for r in committers {
            cx.out.send(r, ReplicaMsg::Status(status.clone()));
        }
    }

    pub(crate) fn on_status(&mut self, cx: &mut Cx, from: ReplicaId, st: Status) {
        self.note_peer_progress(cx, from, st.view, st.next_undecided);
        // Behind us, or in our view without its NEW-VIEW and unable to ask
        // for it with a VIEW-CHANGE (`send_own_view_change`).
        if self.active && (st.view < self.view || (st.view == self.view && st.awaits_new_view)) {
            self.resend_new_view(cx, from);
        }
        // A peer still in a view that 2f+1 gave up on (it lost the
        // statements): the certificate moves it on (`timeout_cert.rs`).
        self.relay_certificate(cx, from, st.view);
        let start = st.next_undecided.max(self.low);
        // Every slot we decided from the peer's first undecided one on. Above
        // our own first undecided slot too, while the peer is behind it: a
        // peer that cannot reach one leader (a twin's copy, a cut link)
        // otherwise learns that leader's slots only while we have no gap
        // below them, and our gap may be the peer's own next slot, which it
        // proposes only once it has seen the slots before it
        // (`proposal_slot`). By the time our gap closes the next checkpoint
        // covers those slots and only a state transfer, two status ticks
        // later, moves the peer (seed 502047: r2's twin led every 4th slot
        // ~500 ms late). Only while it is behind, and fewer: a peer at or
        // past our gap has usually decided what we decided out of order.
        let decided = |(slot, s): (&Slot, &SlotState)| s.decided.map(|d| (*slot, d));
        let mut notices: Vec<(Slot, Digest)> = Vec::new();
        if start < self.next_undecided {
            notices.extend(
                self.slots
                    .range(start..self.next_undecided)
                    .filter_map(decided)
                    .take(DECIDED_PER_STATUS),
            );
            notices.extend(
                self.slots
                    .range(self.next_undecided..)
                    .filter_map(decided)
                    .take(DECIDED_ABOVE_GAP_PER_STATUS),
            );
        }
        for (slot, digest) in notices {
            cx.out.send(
                from,
                ReplicaMsg::Decided(Decided {
                    lane: self.id,
                    slot,
                    digest,
                }),
            );
        }
        if st.view == self.view && self.active {
            self.retransmit(cx, from, start);
        }
    }

    /// Re-send our own pre-prepare / prepare / commit of the current view for
    /// slots the peer has not decided, if they have been out for at least one
    /// status interval (a fresher message may simply still be in flight).
    fn retransmit(&mut self, cx: &mut Cx, to: ReplicaId, start: Slot) {
        let interval = self.cfg.params.status_interval_ms;
        let (view, me, lane) = (self.view, self.me, self.id);
        for (slot, s) in self.slots.range(start..).take(RETRANSMIT_SLOTS) {
            let Some(pp) = s.accepted_in(view) else {
                continue;
            };
            if cx.now.0.saturating_sub(pp.at.0) < interval {
                continue;
            }
            let mut sent = false;
            if pp.proposer == Some(me) {
                if let (Some(sig), Some(batch)) = (pp.sig, s.batch(&pp.digest)) {
                    cx.out.send(
                        to,
                        ReplicaMsg::PrePrepare(PrePrepare {
                            lane,
                            view,
                            slot: *slot,
                            digest: pp.digest,
                            batch: (**batch).clone(),
                            sig,
                        }),
                    );
                    sent = true;
                }
            }
            if let Some(p) = s.prepares.get(&me) {
                cx.out.send(to, ReplicaMsg::Prepare(p.clone()));
                sent = true;
            }
            if let Some(d) = s.commits.get(&me) {
                cx.out.send(
                    to,
                    ReplicaMsg::Commit(Commit {
                        lane,
                        view,
                        slot: *slot,
                        digest: *d,
                        replica: me,
                    }),
                );
                sent = true;
            }
            if sent {
                cx.counters.retransmissions += 1;
            }
        }
    }

    pub(crate) fn on_decided_notice(
        &mut self,
        cx: &mut Cx,
        from: ReplicaId,
        d: Decided,
        lo: &mut LaneOutput,
    ) {
        if d.slot < self.low {
            return cx.counters.stale += 1;
        }
        if d.slot >= self.high() {
            return cx.counters.stale += 1;
        }
        if self.slots.get(&d.slot).is_some_and(|s| s.decided.is_some()) {
            return;
        }
        let notices = self.notices.entry(d.slot).or_default();
        // A sender's newer notice replaces its older one: a Byzantine
        // sender's garbage first notice must not shut out its later correct
        // ones (with one correct replica ahead, f+1 would never match). Safe:
        // a correct replica's notice never changes, so f+1 current matching
        // notices still include one from a correct replica that decided.
        if notices.get(&from) == Some(&d.digest) {
            return;
        }
        notices.insert(from, d.digest);
        let senders: Vec<ReplicaId> = notices
            .iter()
            .filter(|(_, dg)| **dg == d.digest)
            .map(|(r, _)| *r)
            .collect();
        // f+1 matching notices include one from a correct replica that decided.
        if senders.len() <= self.cfg.f() {
            return;
        }
        if d.digest == Batch::noop_digest() {
            self.slot_mut(d.slot)
                .store_batch(d.digest, Arc::new(Batch::noop()));
        }
        if self
            .slots
            .get(&d.slot)
            .is_some_and(|s| s.batch(&d.digest).is_some())
        {
            return self.decide(cx, d.slot, d.digest, lo);
        }
        if self.wants.get(&d.slot).is_some_and(|w| w.digest == d.digest) {
            return;
        }
        self.want(cx, d.slot, d.digest, WantReason::Decided, senders);
    }

    /// Start fetching the batch behind `digest` for `slot`.
    pub(crate) fn want(
        &mut self,
        cx: &mut Cx,
        slot: Slot,
        digest: Digest,
        reason: WantReason,
        candidates: Vec<ReplicaId>,
    ) {
        let mut w = Want {
            digest,
            reason,
            candidates,
            tries: 0,
            last: cx.now,
        };
        let to = self.fetch_target(&w);
        w.tries = 1;
        self.wants.insert(slot, w);
        if let Some(to) = to {
            cx.out.send(
                to,
                ReplicaMsg::FetchBatch(FetchBatch {
                    lane: self.id,
                    slot,
                    digest,
                }),
            );
        }
    }

    /// Round-robin over the replicas said to hold the batch, then over all:
    /// those named may all be Byzantine (under `PrepareAuth::Mac` a
    /// re-proposal can rest on one Byzantine claim and correct replicas' Q
    /// entries), and every correct replica that pre-prepared it keeps it.
    fn fetch_target(&self, w: &Want) -> Option<ReplicaId> {
        let pool: Vec<ReplicaId> = w
            .candidates
            .iter()
            .copied()
            .chain(self.cfg.replica_ids().filter(|r| *r != self.me))
            .collect();
        (!pool.is_empty()).then(|| pool[w.tries as usize % pool.len()])
    }

    fn retry_wants(&mut self, cx: &mut Cx) {
        let interval = self.cfg.params.status_interval_ms;
        let due: Vec<Slot> = self
            .wants
            .iter()
            .filter(|(_, w)| cx.now.0.saturating_sub(w.last.0) >= interval)
            .map(|(s, _)| *s)
            .collect();
        for slot in due {
            let Some(w) = self.wants.get(&slot) else {
                continue;
            };
            let to = self.fetch_target(w);
            let digest = w.digest;
            if let Some(w) = self.wants.get_mut(&slot) {
                w.tries = w.tries.saturating_add(1);
                w.last = cx.now;
            }
            if let Some(to) = to {
                cx.out.send(
                    to,
                    ReplicaMsg::FetchBatch(FetchBatch {
                        lane: self.id,
                        slot,
                        digest,
                    }),
                );
            }
        }
    }

    pub(crate) fn on_fetch(&mut self, cx: &mut Cx, from: ReplicaId, f: FetchBatch) {
        if f.slot < self.low || f.slot >= self.high() {
            return;
        }
        let batch = self.slots.get(&f.slot).and_then(|s| s.batch(&f.digest)).cloned();
        if let Some(b) = batch {
            cx.out.send(
                from,
                ReplicaMsg::BatchReply(BatchReply {
                    lane: self.id,
                    slot: f.slot,
                    batch: (*b).clone(),
                }),
            );
        }
    }

    pub(crate) fn on_batch_reply(
        &mut self,
        cx: &mut Cx,
        _from: ReplicaId,
        r: BatchReply,
        lo: &mut LaneOutput,
    ) {
        if r.slot < self.low {
            return cx.counters.stale += 1;
        }
        let Some(w) = self.wants.get(&r.slot) else {
            return cx.reject("unsolicited-batch");
        };
        let digest = r.batch.digest();
        if digest != w.digest {
            return cx.reject("bad-digest");
        }
        let reason = w.reason;
        self.wants.remove(&r.slot);
        let slot = r.slot;
        self.slot_mut(slot).store_batch(digest, Arc::new(r.batch));
        match reason {
            WantReason::Decided => self.decide(cx, slot, digest, lo),
            WantReason::Reproposal => {
                let still_ours = self.active
                    && self.proposer_of(slot) == Some(self.me)
                    && self.reproposal_digest(slot) == Some(digest)
                    && self
                        .slots
                        .get(&slot)
                        .is_some_and(|s| s.accepted_in(self.view).is_none());
                if still_ours {
                    let batch = self.slots.get(&slot).and_then(|s| s.batch(&digest)).cloned();
                    if let Some(b) = batch {
                        self.send_pre_prepare(cx, slot, digest, b, lo);
                    }
                }
            }
        }
    }

    /// Exposed for the composite's tests and metrics: batches being fetched.
    pub fn fetches_in_progress(&self) -> usize {
        self.wants.len()
    }
}
