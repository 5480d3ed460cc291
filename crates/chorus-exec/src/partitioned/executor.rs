//! The partitioned executor (SAREK §IV-B, Algorithm 2): a [`Service`] behind
//! a [`RequestScheduler`]. This is the sans-IO form: [`PartitionedExecutor::step`]
//! is one iteration of partition `p`'s execution loop, run on the caller's
//! thread. A threaded driver runs [`run_job`] on one worker per partition
//! with the scheduler behind a mutex (the tests do so under `shuttle`);
//! requests running at the same time hold disjoint partitions, so they touch
//! disjoint keys and the service sees a serial execution.

use super::predict::{predict, PartitionId};
use super::scheduler::{DeliverError, Entry, Job, LogEvent, RequestScheduler, Step};
use crate::service::{ExecContext, Service};
use bytes::Bytes;
use chorus_core::{ClientId, Digest, Request, RequestSeq, Seq};
use std::sync::Arc;

/// The reply to one executed request.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PartitionedResult {
    pub client: ClientId,
    pub request_seq: RequestSeq,
    pub request: Digest,
    /// Where it ran: its EXECUTE or CROSS-BORDER-EXEC sub-request.
    pub partition: PartitionId,
    pub position: u64,
    pub result: Bytes,
}

/// The sub-request of `req` a partition's stream delivers: the prediction is
/// recomputed from the service's access set, never taken from the sender.
pub fn entry_for(service: &dyn Service, partitions: u16, req: Arc<Request>) -> Entry<Arc<Request>> {
    Entry {
        id: req.digest(),
        prediction: predict(&service.access(&req.op), partitions),
        payload: req,
    }
}

/// Run one job against the service. The context names the request's place
/// in its execution partition's stream: `seq` is the stream position and
/// `index` the partition (there is no global sequence in SAREK). Jobs come
/// without their batch, so there is no agreed time (`time_ms` 0); drivers use
/// the stream executor (`SarekExecutor`), which has one per stream.
pub fn run_job(service: &dyn Service, job: &Job<Arc<Request>>) -> PartitionedResult {
    let req = &job.payload;
    let ctx = ExecContext {
        seq: Seq(job.position),
        index: u32::from(job.partition.0),
        client: req.client,
        request_seq: req.seq,
        time_ms: 0,
    };
    PartitionedResult {
        client: req.client,
        request_seq: req.seq,
        request: job.id,
        partition: job.partition,
        position: job.position,
        result: service.execute(&req.op, &ctx),
    }
}

pub struct PartitionedExecutor {
    service: Arc<dyn Service>,
    scheduler: RequestScheduler<Arc<Request>>,
    results: Vec<PartitionedResult>,
}

impl PartitionedExecutor {
    /// `partitions` schedules of at most `capacity` pending sub-requests each.
    pub fn new(service: Arc<dyn Service>, partitions: u16, capacity: usize) -> PartitionedExecutor {
        PartitionedExecutor {
            service,
            scheduler: RequestScheduler::new(partitions, capacity),
            results: Vec::new(),
        }
    }

    pub fn partitions(&self) -> u16 {
        self.scheduler.partitions()
    }

    /// Append `req` to partition `p`'s stream.
    pub fn deliver(&mut self, p: PartitionId, req: Arc<Request>) -> Result<u64, DeliverError> {
        let entry = entry_for(&*self.service, self.scheduler.partitions(), req);
        self.scheduler.deliver(p, entry)
    }

    /// One iteration of Algorithm 2 for partition `p`; whether anything
    /// changed (a request ran, a cycle was resolved).
    pub fn step(&mut self, p: PartitionId) -> bool {
        let before = self.scheduler.generation();
        match self.scheduler.next(p) {
            Step::Run(job) => {
                self.results.push(run_job(&*self.service, &job));
                self.scheduler.complete(&job);
                true
            }
            Step::Wait => self.scheduler.generation() != before,
        }
    }

    /// Step every partition in turn until none can move.
    pub fn run_until_blocked(&mut self) {
        let k = self.scheduler.partitions();
        loop {
            let mut moved = false;
            for p in 0..k {
                while self.step(PartitionId(p)) {
                    moved = true;
                }
            }
            if !moved {
                return;
            }
        }
    }

    pub fn is_idle(&self) -> bool {
        self.scheduler.is_idle()
    }

    pub fn drain_results(&mut self, out: &mut Vec<PartitionedResult>) {
        out.append(&mut self.results);
    }

    pub fn drain_log(&mut self, out: &mut Vec<LogEvent>) {
        self.scheduler.drain_log(out);
    }

    pub fn scheduler(&self) -> &RequestScheduler<Arc<Request>> {
        &self.scheduler
    }

    /// Test-only fault, see [`RequestScheduler::set_skip_sync_wait`].
    #[cfg(any(test, feature = "skip-sync-wait-for-tests"))]
    pub fn set_skip_sync_wait(&mut self, on: bool) {
        self.scheduler.set_skip_sync_wait(on);
    }

    pub fn service_digest(&self) -> Digest {
        self.service.state_digest()
    }
}
