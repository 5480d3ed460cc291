//! The replica's side of RCC §III-E SWITCHINSTANCE (`crate::rcc_switch`):
//! applying delivered switches, cutting batches under the hand-over rule,
//! holding pre-prepares until their owners are known, and taking the table
//! back from a snapshot.

use super::Replica;
use crate::io::Outbox;
use crate::rcc_switch;
use bytes::Bytes;
use chorus_core::{
    Assignments, Batch, Cell, Millis, OrderingMode, PrePrepare, ReplicaId, ReplicaMsg, Seq, Slot,
    SwitchOutcome,
};

impl Replica {
    fn delivered_rounds(&self) -> u64 {
        self.hub.delivered_rounds(&self.cfg)
    }

    /// Cut a batch for `cell` with only the requests its lane may carry in
    /// that round (the current owner, once the hand-over allows it).
    /// A batch with requests carries our wall clock (`Batch::time_ms`).
    pub(super) fn cut(&mut self, cell: Cell) -> Batch {
        let mut batch = if self.sarek.is_some() {
            self.pool_of_mut(cell.lane).cut(cell)
        } else {
            let view = self.hub.owner_view(&self.cfg);
            self.pool
                .cut_where(cell, |r| rcc_switch::may_propose(&view, cell.lane, cell.slot, r))
        };
        batch.time_ms = self.batch_time(&batch);
        batch
    }

    /// No-ops carry no time (0), so a filler never moves the agreed time.
    pub(super) fn batch_time(&self, batch: &Batch) -> u64 {
        if batch.is_noop() {
            0
        } else {
            self.wall_ms
        }
    }

    /// RCC §III-E: a switch is agreed by delivering it. Every correct
    /// replica applies it here at the same round; the executor applies the
    /// same rule to the same requests (`chorus_exec::switch`).
    pub(super) fn apply_switches(&mut self, seq: Seq, batch: &Batch) {
        if self.cfg.params.mode != OrderingMode::Rcc {
            return;
        }
        let p = rcc_switch::policy(&self.cfg);
        for req in batch.requests.iter().filter(|r| r.is_switch()) {
            let outcome = self.hub.assignments.apply(&p, req, p.round_of(seq.0));
            *self.counters.switches.entry(outcome.name()).or_insert(0) += 1;
            if let SwitchOutcome::Applied(h) = outcome {
                tracing::debug!(client = ?req.client, ?h, "client switched instance");
                self.pool.reassign(req.client, chorus_core::LaneId(h.to));
                self.handing_over.retain(|(c, _, _)| *c != req.client);
                self.handing_over
                    .push((req.client, chorus_core::LaneId(h.to), h.round));
            }
        }
    }

    /// A client's requests moved to its new owner wait there without
    /// counting against it until that owner may propose them (rounds above
    /// `r_d + σ`, once delivery allows that slot): otherwise requests that
    /// waited a timeout at the censoring old owner would make every correct
    /// replica suspect the correct new one at once and stop it (review of
    /// SWITCHINSTANCE, finding 1). Their wait restarts each time until then.
    pub(super) fn restart_handover_waits(&mut self, now: Millis) {
        if self.handing_over.is_empty() {
            return;
        }
        let sigma = self.cfg.params.max_lane_drift_slots;
        let mut pending = std::mem::take(&mut self.handing_over);
        pending.retain(|(client, lane, round)| {
            let first = Slot(round.saturating_add(sigma).saturating_add(1));
            let waiting = self.proposal_limit(lane.index()) <= first;
            if waiting {
                self.pool.restart_wait(*client, *lane, now);
            }
            waiting
        });
        self.handing_over = pending;
    }

    pub(super) fn hold_for_owner(&mut self, from: ReplicaId, pp: PrePrepare) {
        // One per cell of every lane's window.
        let cap = self.lanes.len() * self.cfg.params.window_slots as usize;
        let held = self.switch_gate.hold(cap, from, pp);
        let key = if held { "held" } else { "hold-dropped" };
        *self.counters.switches.entry(key).or_insert(0) += 1;
    }

    /// Hand the held pre-prepares whose owners are known now back to their
    /// lanes (which check them again from the start).
    pub(super) fn release_owner_held(&mut self, now: Millis, out: &mut Outbox) -> bool {
        if self.switch_gate.is_empty() {
            return false;
        }
        let ready = self
            .switch_gate
            .release(self.delivered_rounds(), self.cfg.params.max_lane_drift_slots);
        let any = !ready.is_empty();
        for (from, pp) in ready {
            let lane = pp.lane;
            let lo = self.with_lane(now, lane.index(), out, |l, cx, env| {
                l.handle_message(cx, from, ReplicaMsg::PrePrepare(pp), env)
            });
            self.absorb(now, lane, lo);
        }
        any
    }

    /// A snapshot (state transfer, or our own stable one after a crash)
    /// replaces the table: it is the executor's copy at the snapshot's
    /// position (`Assignments::from_exec_snapshot`).
    pub(super) fn adopt_assignments(&mut self, snapshot: &Bytes) {
        if self.cfg.params.mode != OrderingMode::Rcc {
            return;
        }
        self.switch_gate.clear();
        let table = match Assignments::from_exec_snapshot(snapshot) {
            Some(t) => t,
            // Version 1: written while no client had switched.
            None if snapshot.first() == Some(&1) => Assignments::default(),
            None => {
                // Not an executor snapshot of this version: the state digest
                // matched, so the cluster runs without switches in it.
                self.counters.reject("snapshot-without-assignments");
                Assignments::default()
            }
        };
        self.pool.reset_owners(rcc_switch::overrides(&self.cfg, &table));
        // Hand-overs still under way at the installed state (the stale ones
        // drop out at the next timer refresh).
        self.handing_over = table
            .iter()
            .map(|(c, h)| (*c, chorus_core::LaneId(h.to), h.round))
            .collect();
        self.hub.assignments = table;
    }
}
