//! The replica's side of SAREK §IV-D re-prediction (`crate::sarek::repredict`):
//! signing what the executor suspended, counting peers' votes, and handing
//! certificates to the added partitions' pools. The votes and certificates
//! are the hub's (`Hub::repredictions`); the pools are the lane group's,
//! reached by `ToGroup::Adopt`.

use super::group::ToGroup;
use super::Replica;
use crate::io::Outbox;
use crate::sarek::repredict::VoteOutcome;
use chorus_core::{LaneId, Millis, RePrediction, RePredictionVote, ReplicaMsg, Request};

impl Replica {
    pub(super) fn on_mispredicted(&mut self, now: Millis, body: RePrediction, out: &mut Outbox) {
        let Some(rp) = self.hub.repredictions.as_mut() else {
            // Only the partitioned executor suspends requests: a driver bug.
            tracing::error!("a re-prediction outside sarek mode");
            return self.counters.reject("reprediction-not-sarek");
        };
        let (vote, outcome) = rp.propose(&self.cfg, body);
        if let Some(v) = vote {
            self.counters.sarek_repredictions_proposed += 1;
            out.broadcast(ReplicaMsg::RePredict(v));
        }
        self.on_reprediction_outcome(now, outcome, out);
    }

    pub(super) fn on_reprediction_vote(&mut self, now: Millis, vote: RePredictionVote, out: &mut Outbox) {
        let Some(rp) = self.hub.repredictions.as_mut() else {
            return self.counters.reject("reprediction-not-sarek");
        };
        let outcome = rp.on_vote(&self.cfg, vote);
        self.on_reprediction_outcome(now, outcome, out);
    }

    fn on_reprediction_outcome(&mut self, now: Millis, outcome: VoteOutcome, out: &mut Outbox) {
        match outcome {
            VoteOutcome::Rejected(reason) => self.counters.reject(reason),
            VoteOutcome::Counted => {}
            VoteOutcome::Certified(req, lanes) => {
                self.counters.sarek_repredictions_certified += 1;
                for lane in lanes {
                    self.offer_reprediction(now, lane, &req, out);
                }
            }
        }
    }

    /// Pending in `lane`'s pool: its leader proposes it, the others time it
    /// like any request (a leader that never orders it is replaced).
    fn offer_reprediction(&mut self, now: Millis, lane: LaneId, req: &Request, out: &mut Outbox) {
        if lane.0 < self.cfg.lanes() {
            let g = self.group_of(lane);
            let msg = ToGroup::Adopt {
                lane,
                req: req.clone(),
            };
            self.send_to_group(now, g, msg, out);
        }
    }

    /// Every status round: our votes again, and certificates not decided
    /// yet offered again (a lost vote or a cleared pool must not leave a
    /// request suspended forever).
    pub(super) fn reprediction_tick(&mut self, now: Millis, out: &mut Outbox) {
        let Some(rp) = self.hub.repredictions.as_ref() else {
            return;
        };
        for v in rp.own_votes() {
            out.broadcast(ReplicaMsg::RePredict(v.clone()));
        }
        let undecided: Vec<(LaneId, Request)> = rp.undecided().map(|(l, r)| (l, r.clone())).collect();
        for (lane, req) in undecided {
            self.offer_reprediction(now, lane, &req, out);
        }
    }
}
