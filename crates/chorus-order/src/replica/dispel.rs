//! `Replica` glue of the `dispel` mode: the DBFT lanes (`DispelCore`) take
//! the place of the PBFT lanes; the pool, merger, checkpointer and state
//! transfer are shared with the other modes.

use super::Replica;
use crate::counters::Cx;
use crate::dispel::pipeline::{spawn_now, SpawnView};
use crate::dispel::{DispelOutput, DispelStatus};
use crate::io::Outbox;
use crate::pool::Readiness;
use chorus_core::{Batch, Cell, DbftWire, LaneId, Millis, ReplicaId, ReplicaMsg, Slot};

// Dispel keeps its engine, pool and merger together on the hub's side
// (docs/lane-split.md §4): its pool and batch timer are those of the one
// lane group, which has no PBFT lanes in this mode.
impl Replica {
    pub(crate) fn dispel_on_message(&mut self, now: Millis, from: ReplicaId, w: DbftWire, out: &mut Outbox) {
        let Some(d) = self.dispel.as_mut() else {
            return self.counters.reject("dbft-not-in-mode");
        };
        let mut cx = Cx::new(now, out, &mut self.counters);
        let o = d.on_message(&mut cx, from, &w, &self.groups[0].pool, self.wall_ms);
        self.dispel_absorb(now, o, out);
    }

    /// The driver handles events in bursts (all its inbox holds) and calls
    /// `end_of_burst` after each: `dispel` then holds the small DBFT
    /// messages of the whole burst and sends them as one bundle per peer
    /// (issue 15: O(n²) frames per epoch instead of O(n³) messages). Off by
    /// default: each step's messages leave at its end. Other modes send as
    /// they always did.
    pub fn set_burst_mode(&mut self, on: bool) {
        if let Some(d) = self.dispel.as_mut() {
            d.set_burst_mode(on);
        }
    }

    /// Messages wait for `end_of_burst`. Leave burst mode only after an
    /// `end_of_burst`: turning it off sends nothing held.
    pub fn holds_messages(&self) -> bool {
        self.dispel.as_ref().is_some_and(|d| d.holds_messages())
    }

    /// The driver's burst is over (its inbox is empty, or it handled as
    /// much as it handles before writing): send what waits.
    pub fn end_of_burst(&mut self, now: Millis, out: &mut Outbox) {
        let Some(d) = self.dispel.as_mut() else { return };
        let mut cx = Cx::new(now, out, &mut self.counters);
        d.end_of_burst(&mut cx);
    }

    /// A lane message in `dispel`: only STATUS means something (stable
    /// checkpoints for state transfer, checkpoint votes, epoch progress).
    pub(crate) fn dispel_on_other(
        &mut self,
        now: Millis,
        from: ReplicaId,
        msg: ReplicaMsg,
        out: &mut Outbox,
    ) {
        let ReplicaMsg::Status(st) = msg else {
            return self.counters.reject("not-in-dispel-mode");
        };
        self.hub.transfer.note_peer_stable(from, st.stable_seq, now);
        self.send_votes_to_peer(now, from, st.stable_seq, out);
        if let Some(d) = self.dispel.as_mut() {
            let mut cx = Cx::new(now, out, &mut self.counters);
            d.on_peer_status(&mut cx, from, st.next_undecided.0, st.suspects);
        }
    }

    pub(crate) fn dispel_on_timer(&mut self, now: Millis, out: &mut Outbox) {
        let Some(d) = self.dispel.as_mut() else {
            return self.counters.reject("bad-timer");
        };
        let mut cx = Cx::new(now, out, &mut self.counters);
        let o = d.on_timer(&mut cx);
        self.dispel_absorb(now, o, out);
    }

    pub(crate) fn dispel_status_tick(&mut self, now: Millis, out: &mut Outbox) {
        let stable = self.hub.stable_seq();
        if let Some(d) = self.dispel.as_mut() {
            let mut cx = Cx::new(now, out, &mut self.counters);
            d.on_status_tick(&mut cx, stable);
        }
    }

    /// Free epochs below `low` (stable checkpoint or installed snapshot).
    pub(crate) fn dispel_collect(&mut self, now: Millis, low: Slot, out: &mut Outbox) {
        let Some(d) = self.dispel.as_mut() else { return };
        let mut cx = Cx::new(now, out, &mut self.counters);
        let o = d.collect(&mut cx, low.0);
        self.dispel_absorb(now, o, out);
    }

    /// `Replica::recover`: rebuild the DBFT lanes from their snapshot and
    /// logged inputs; hand what they decided to the pool and the merger and
    /// answer joins left unanswered by the crash.
    pub(crate) fn dispel_recover(
        &mut self,
        now: Millis,
        snapshot: Option<bytes::Bytes>,
        inputs: Vec<(Millis, bytes::Bytes)>,
        out: &mut Outbox,
    ) {
        let Some(d) = self.dispel.as_mut() else { return };
        let mut cx = Cx::new(now, out, &mut self.counters);
        let o = d.recover(&mut cx, snapshot, inputs);
        self.dispel_absorb(now, o, out);
    }

    /// Decisions to the pool and the merger; join answers with our pool batch.
    fn dispel_absorb(&mut self, now: Millis, mut o: DispelOutput, out: &mut Outbox) {
        // Each join is a distinct epoch inside the engine window, so the
        // window bounds the chain; one bundle can join many epochs at once
        // (a cap of 64 dropped the oldest joins: a review of 2026-11-26).
        let window = self.dispel.as_ref().map_or(self.cfg.params.window_slots, |d| {
            d.engine().config().window_epochs
        });
        let max_joins = usize::try_from(window).unwrap_or(usize::MAX);
        for _ in 0..max_joins {
            self.dispel_take_decided(now, &mut o);
            let Some(e) = o.joins.pop() else { return };
            let batch = self.dispel_cut(now, e);
            let more = self.dispel_propose_batch(now, e, batch, out);
            o.decided.extend(more.decided);
            o.joins.extend(more.joins);
            o.bits.extend(more.bits);
        }
        // The joins left are cut, not what the last proposal decided (a
        // decided epoch dropped here would stall the merger for ever).
        self.dispel_take_decided(now, &mut o);
        self.counters.reject("dbft-join-chain-cut");
    }

    fn dispel_take_decided(&mut self, now: Millis, o: &mut DispelOutput) {
        for (cell, batch) in o.decided.drain(..) {
            // Our own instance decided 0 before our INIT gathered 2f+1
            // echoes weighs more towards dropping a reported request
            // (`Pool::voided_for_good`) than a loss after it had: a
            // Byzantine replica can report any request it holds, and a
            // late INIT that delivered says little about its requests.
            let void = if cell.lane.0 != self.me.0 {
                crate::pool::Void::None
            } else if self
                .dispel
                .as_ref()
                .is_some_and(|d| d.lost_undelivered(cell.slot.0))
            {
                crate::pool::Void::BeforeDelivery
            } else {
                crate::pool::Void::AfterDelivery
            };
            let dropped = self.groups[0]
                .pool
                .on_decided_counting_voids(now, cell, &batch, void);
            self.counters.voided_requests_dropped += dropped as u64;
            self.counters.decided += 1;
            self.hub.merger.insert(cell, batch);
        }
        for bits in std::mem::take(&mut o.bits) {
            self.dispel_note_bits(&bits);
        }
    }

    fn dispel_cut(&mut self, now: Millis, e: u64) -> Batch {
        let me = LaneId(self.me.0);
        let cell = Cell {
            lane: me,
            slot: Slot(e),
        };
        // Our bit in `e` may be decided (0) already: the others decided
        // without our INIT, which comes late (a join answered after the
        // decision in the same call, or a slow spawn). Requests cut into it
        // would stay in flight at a cell whose decision has passed, and
        // nothing would release them: their clients waited for the 2 s
        // rescue (a dispel n = 32 perf run, 2026-11-26). Propose nothing then.
        if self
            .dispel
            .as_ref()
            .and_then(|d| d.engine().epoch(e))
            .is_some_and(|s| s.binary(me.index()).decided().is_some())
        {
            let mut batch = Batch::noop();
            batch.time_ms = self.groups[0].batch_time(&batch);
            return batch;
        }
        let before = self.rescue_before(now);
        let extra: Vec<LaneId> = (0..self.cfg.lanes())
            .map(LaneId)
            .filter(|l| *l != me)
            .filter(|l| before.is_some_and(|b| self.groups[0].pool.rescue_due(*l, b)))
            .collect();
        let (mut batch, rescued_from) =
            self.groups[0]
                .pool
                .cut_with_rescue(cell, &extra, before.unwrap_or(Millis(0)));
        // Their proposers left their clients' requests to the rescue: they
        // look silent (or censoring) until they serve their own clients
        // again (`pool/dispel_standin.rs`).
        for l in rescued_from.into_iter().filter(|l| l.0 != self.me.0) {
            if self.groups[0].pool.set_silent(l, true) {
                self.counters.dispel_standins += 1;
            }
        }
        batch.time_ms = self.groups[0].batch_time(&batch);
        batch
    }

    /// One decided epoch's bits: a proposer that looks silent (its
    /// requests had to be rescued, `dispel_cut`) is heard again once a
    /// decided batch of it serves its own clients (`pool/dispel_standin.rs`).
    /// Bits of 0 are no sign of silence: a late joiner's bit often decides
    /// 0 at light load, and a replica joins only the epochs it would have
    /// spawned (a review of 2026-11-26 found a healthy lightly loaded
    /// cluster marking proposers silent by missed bits).
    fn dispel_note_bits(&mut self, bits: &[crate::dispel::ProposerBit]) {
        for (l, bit) in bits.iter().enumerate() {
            if bit.selected && bit.served_own_clients {
                self.groups[0].pool.set_silent(LaneId(l as u32), false);
            }
        }
    }

    fn dispel_propose_batch(&mut self, now: Millis, e: u64, batch: Batch, out: &mut Outbox) -> DispelOutput {
        self.counters.proposals += 1;
        if batch.requests.is_empty() {
            self.counters.noop_proposals += 1;
        }
        let Some(d) = self.dispel.as_mut() else {
            return DispelOutput::default();
        };
        let mut cx = Cx::new(now, out, &mut self.counters);
        d.propose(&mut cx, e, batch)
    }

    /// Another proposer's request this old is proposed by us too (its
    /// proposer may be silent; no view change will hand its lane over).
    fn rescue_ms(&self) -> u64 {
        self.cfg.params.view_change_timeout_ms
    }

    /// Requests that arrived at or before this waited the rescue timeout;
    /// `None` in the first `rescue_ms` of our clock (before, the bound
    /// saturated to 0 and requests arriving at time 0 were rescued at once,
    /// by every replica: a review of 2026-11-26).
    fn rescue_before(&self, now: Millis) -> Option<Millis> {
        now.0.checked_sub(self.rescue_ms()).map(Millis)
    }

    /// The pipeline (Dispel §4.1–4.3, `dispel::pipeline`): spawn our next
    /// epoch when a batch is due, the link is idle and the budget allows.
    pub(crate) fn dispel_propose(&mut self, now: Millis, out: &mut Outbox) -> bool {
        let Some(d) = self.dispel.as_ref() else {
            return false;
        };
        let me = LaneId(self.me.0);
        let (next_spawn, next_epoch) = (d.spawnable(), d.next_epoch());
        let idle = d.link_idle(now);
        let before = self.rescue_before(now);
        let rescue = (0..self.cfg.lanes())
            .map(LaneId)
            .filter(|l| *l != me)
            .any(|l| before.is_some_and(|b| self.groups[0].pool.rescue_due(l, b)));
        let due = match self.groups[0].pool.readiness(me, now) {
            Readiness::Ready => true,
            Readiness::WaitUntil(at) => {
                if self.groups[0].batch_deadline[me.index()] != Some(at) {
                    self.groups[0].batch_deadline[me.index()] = Some(at);
                    out.set_timer(crate::io::TimerId::Batch(me), at);
                }
                false
            }
            Readiness::Empty => false,
        } || rescue;
        let view = SpawnView {
            next_spawn,
            next_epoch,
            max_depth: self.cfg.params.max_lane_drift_slots,
            link_idle: idle.is_ok(),
            batch_due: due,
        };
        let Some(e) = spawn_now(view) else {
            // Only the link held a due epoch back: look again when the
            // meter's window moves.
            if let (Err(at), true) = (
                idle,
                spawn_now(SpawnView {
                    link_idle: true,
                    ..view
                })
                .is_some(),
            ) {
                if self.groups[0].batch_deadline[me.index()].is_none_or(|d| d > at) {
                    self.groups[0].batch_deadline[me.index()] = Some(at);
                    out.set_timer(crate::io::TimerId::Batch(me), at);
                }
            }
            return false;
        };
        let batch = self.dispel_cut(now, e);
        let o = self.dispel_propose_batch(now, e, batch, out);
        self.dispel_absorb(now, o, out);
        true
    }

    /// Live epochs, pipeline depth and binary-consensus rounds (`chorus status`).
    pub fn dispel_status(&self) -> Option<DispelStatus> {
        self.dispel.as_ref().map(|d| d.status())
    }
}
