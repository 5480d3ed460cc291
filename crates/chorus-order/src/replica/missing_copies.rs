//! `sarek`: cross-partition requests the executor holds in one partition
//! but not in another (SAREK §IV-B 1: a request is executed once every
//! predicted partition ordered it). A live decision hands its requests to
//! the other partitions' pools (`forward_decided`), but a hand-on can be
//! lost: the replica crashed between the decision and the other
//! partition's ordering (recovery replays decisions, not hand-ons), the
//! other pool was full, or the hub dropped it for a backed-up group. Then
//! the partition that holds the request waits for the copy until the
//! client retransmits, and for ever if it never does. So once per status
//! interval the hub asks the executor (`Action::FindMissingCopies`) and
//! hands what is still missing on again, as a decision would.

use super::{group, Replica};
use crate::io::{Action, Outbox};
use chorus_core::{LaneId, Millis, Request};

/// Hand-ons one answer may cause at most (the executor reports one request
/// per partition head; this bounds a driver's bug).
const MISSING_HAND_ONS_MAX: usize = 256;

impl Replica {
    pub(super) fn find_missing_copies(&mut self, out: &mut Outbox) {
        if self.hub.repredictions.is_some() {
            out.push(Action::FindMissingCopies);
        }
    }

    pub(super) fn on_missing_copies(
        &mut self,
        now: Millis,
        copies: Vec<(Request, Vec<LaneId>)>,
        out: &mut Outbox,
    ) {
        if self.hub.repredictions.is_none() {
            tracing::error!("missing copies reported outside sarek mode");
            return self.counters.reject("missing-copies-not-sarek");
        }
        let mut handed = 0;
        for (req, lanes) in copies {
            // A re-prediction certificate is ordered exactly in the lanes it
            // adds, each from its own certificate (`repredict.rs`), never
            // handed on.
            if req.is_reprediction() {
                self.counters.reject("missing-copy-not-handed-on");
                continue;
            }
            // Only partitions PREDICT() names for the request: a copy
            // elsewhere would be ordered where nothing waits for it.
            let predicted = match self.predictor.as_ref() {
                Some(p) => p.lanes(&self.cfg, &req.op),
                None => (0..self.cfg.lanes()).map(LaneId).collect(),
            };
            for lane in lanes {
                if !predicted.contains(&lane) || handed >= MISSING_HAND_ONS_MAX {
                    self.counters.reject("missing-copy-not-handed-on");
                    continue;
                }
                handed += 1;
                let g = self.group_of(lane);
                let msg = group::ToGroup::ForLane {
                    lane,
                    req: req.clone(),
                    at: now,
                    admitted: false,
                };
                self.send_to_group(now, g, msg, out);
            }
        }
    }
}
