//! `dispel`: a proposer's batch is its own lane's requests plus requests of
//! other proposers' lanes that waited past the rescue timeout. Every replica
//! proposes in every epoch, so a silent or crashed proposer's clients would
//! otherwise starve (there is no view change to hand its lane over). A
//! request proposed by two replicas executes once: the executor's client
//! table drops the second copy.

use super::{Pool, State};
use chorus_core::{Batch, Cell, LaneId, Millis};

impl Pool {
    /// Requests of `lane` other than ours pending since `before` or earlier.
    pub fn rescue_due(&mut self, lane: LaneId, before: Millis) -> bool {
        self.oldest_pending(lane).is_some_and(|t| t <= before)
    }

    /// Cut our batch for `cell` (its lane is ours), then fill it up with
    /// requests of `extra` lanes that arrived at or before `before`, oldest
    /// first. All of them become in flight at `cell`. Also returns the lanes
    /// it rescued requests from.
    pub fn cut_with_rescue(&mut self, cell: Cell, extra: &[LaneId], before: Millis) -> (Batch, Vec<LaneId>) {
        let mut batch = self.cut(cell);
        let max_requests = self.cfg.params.batch_max_requests as usize;
        let max_bytes = self.cfg.params.batch_max_bytes as usize;
        let mut bytes: usize = batch.requests.iter().map(|r| r.op.len()).sum();
        let mut keys = Vec::new();
        let mut rescued_from = Vec::new();
        for &lane in extra {
            if lane == cell.lane || lane.index() >= self.queues.len() {
                continue;
            }
            while batch.requests.len() < max_requests && bytes < max_bytes {
                let Some(&k) = self.queues[lane.index()].front() else {
                    break;
                };
                let Some(e) = self.entries.get_mut(&k) else {
                    self.queues[lane.index()].pop_front();
                    continue;
                };
                // A key left behind by a move (`dispel_standin.rs`) is stale.
                if e.state != State::Pending || e.lane != lane {
                    self.queues[lane.index()].pop_front();
                    continue;
                }
                if e.arrived > before {
                    break;
                }
                self.queues[lane.index()].pop_front();
                e.state = State::InFlight(cell);
                let len = e.req.op.len();
                bytes += len;
                batch.requests.push(e.req.clone());
                keys.push(k);
                self.sub_load(lane, len);
                if rescued_from.last() != Some(&lane) {
                    rescued_from.push(lane);
                }
            }
        }
        if !keys.is_empty() {
            self.in_flight.entry(cell).or_default().extend(keys);
            self.own.insert(cell);
        }
        debug_assert!(batch.requests.len() <= max_requests);
        (batch, rescued_from)
    }
}
