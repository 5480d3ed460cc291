//! The replica's side of SAREK §IV-D re-prediction (`crate::sarek::repredict`):
//! signing what the executor suspended, counting peers' votes, and handing
//! certificates to the added partitions' pools.

use super::Replica;
use crate::io::Outbox;
use crate::sarek::repredict::VoteOutcome;
use chorus_core::{LaneId, Millis, RePrediction, RePredictionVote, ReplicaMsg, Request};

impl Replica {
    pub(super) fn on_mispredicted(&mut self, now: Millis, body: RePrediction, out: &mut Outbox) {
        let Some(s) = self.groups.first_mut().and_then(|g| g.sarek.as_mut()) else {
            // Only the partitioned executor suspends requests: a driver bug.
            tracing::error!("a re-prediction outside sarek mode");
            return self.counters.reject("reprediction-not-sarek");
        };
        let (vote, outcome) = s.repredictions.propose(&self.cfg, body);
        if let Some(v) = vote {
            self.counters.sarek_repredictions_proposed += 1;
            out.broadcast(ReplicaMsg::RePredict(v));
        }
        self.on_reprediction_outcome(now, outcome);
    }

    pub(super) fn on_reprediction_vote(&mut self, now: Millis, vote: RePredictionVote, _out: &mut Outbox) {
        let Some(s) = self.groups.first_mut().and_then(|g| g.sarek.as_mut()) else {
            return self.counters.reject("reprediction-not-sarek");
        };
        let outcome = s.repredictions.on_vote(&self.cfg, vote);
        self.on_reprediction_outcome(now, outcome);
    }

    fn on_reprediction_outcome(&mut self, now: Millis, outcome: VoteOutcome) {
        match outcome {
            VoteOutcome::Rejected(reason) => self.counters.reject(reason),
            VoteOutcome::Counted => {}
            VoteOutcome::Certified(req, lanes) => {
                self.counters.sarek_repredictions_certified += 1;
                for lane in lanes {
                    self.offer_reprediction(now, lane, &req);
                }
            }
        }
    }

    /// Pending in `lane`'s pool: its leader proposes it, the others time it
    /// like any request (a leader that never orders it is replaced).
    fn offer_reprediction(&mut self, now: Millis, lane: LaneId, req: &Request) {
        if let Some(s) = self.groups.first_mut().and_then(|g| g.sarek.as_mut()) {
            if lane.0 < self.cfg.lanes() {
                s.pool_mut(lane).adopt(now, req);
            }
        }
    }

    /// Every status round: our votes again, and certificates not decided
    /// yet offered again (a lost vote or a cleared pool must not leave a
    /// request suspended forever).
    pub(super) fn reprediction_tick(&mut self, now: Millis, out: &mut Outbox) {
        let Some(s) = self.groups.first().and_then(|g| g.sarek.as_ref()) else {
            return;
        };
        for v in s.repredictions.own_votes() {
            out.broadcast(ReplicaMsg::RePredict(v.clone()));
        }
        let undecided: Vec<(LaneId, Request)> =
            s.repredictions.undecided().map(|(l, r)| (l, r.clone())).collect();
        for (lane, req) in undecided {
            self.offer_reprediction(now, lane, &req);
        }
    }
}
