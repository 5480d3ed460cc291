//! The replica's side of RCC §III-E SWITCHINSTANCE (`crate::rcc_switch`):
//! applying delivered switches and taking the table back from a snapshot.
//! Cutting batches under the hand-over rule and holding pre-prepares until
//! their owners are known are the lane group's (`group.rs`).

use super::group::ToGroup;
use super::Replica;
use crate::io::Outbox;
use bytes::Bytes;
use chorus_core::{Assignments, Batch, LaneId, Millis, OrderingMode, Seq, SwitchOutcome};
use std::sync::Arc;

impl Replica {
    /// RCC §III-E: a switch is agreed by delivering it. Every correct
    /// replica applies it here at the same round; the executor applies the
    /// same rule to the same requests (`chorus_exec::switch`).
    pub(super) fn apply_switches(&mut self, now: Millis, seq: Seq, batch: &Batch, out: &mut Outbox) {
        if self.cfg.params.mode != OrderingMode::Rcc {
            return;
        }
        let p = crate::rcc_switch::policy(&self.cfg);
        for req in batch.requests.iter().filter(|r| r.is_switch()) {
            let outcome = Arc::make_mut(&mut self.hub.assignments).apply(&p, req, p.round_of(seq.0));
            *self.counters.switches.entry(outcome.name()).or_insert(0) += 1;
            if let SwitchOutcome::Applied(h) = outcome {
                tracing::debug!(client = ?req.client, ?h, "client switched instance");
                // rcc keeps every lane in one group (`group_count`).
                let msg = ToGroup::Switched {
                    client: req.client,
                    to: LaneId(h.to),
                    round: h.round,
                };
                self.send_to_group(now, 0, msg, out);
            }
        }
    }

    /// A snapshot (state transfer, or our own stable one after a crash)
    /// replaces the table: it is the executor's copy at the snapshot's
    /// position (`Assignments::from_exec_snapshot`). Returns it for the
    /// lane groups (rcc only).
    pub(super) fn adopt_assignments(&mut self, snapshot: &Bytes) -> Option<Arc<Assignments>> {
        if self.cfg.params.mode != OrderingMode::Rcc {
            return None;
        }
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
        self.hub.assignments = Arc::new(table);
        Some(self.hub.assignments.clone())
    }
}
