//! The partitioned executor behind the [`Executor`] contract (SAREK §IV-B,
//! Algorithms 2–3), fed by the ordering side's per-partition delivery
//! streams (`Action::DeliverStream`): stream `k` is partition `k`'s lane.
//!
//! - Each delivered batch's requests are appended to their partition's
//!   schedule; PREDICT() is recomputed from the service's access set, never
//!   taken from the proposer, so an EXEC and its SYNCs match on every replica.
//! - Exactly once: a request's copy already delivered in a partition (same
//!   digest) is dropped there, and `(client, seq)` is decided by the client
//!   table of the request's *execution* partition (its lowest), in that
//!   partition's effective order — a function of the streams, not of timing.
//!   A correct client's retransmission has the same digest, hence the same
//!   execution partition and table.
//! - Checkpoints at *cuts* (docs/decisions.md "SAREK ordering and checkpoint
//!   cuts"): every `slots_per_cut` slots of every stream there is an implicit
//!   create-checkpoint point (SAREK Algorithms 4–5 order an explicit
//!   create-checkpoint request in every partition; here its position is fixed
//!   by the slot number, so it needs no message). Entries at or above the
//!   next cut are held back until every stream reached the cut and
//!   everything executable below it ran; the snapshot then holds the service
//!   state, the client tables, the dedup memory and the sub-requests below
//!   the cut still waiting (a cross-border request whose other sub-request
//!   lies above the cut) — a function of the streams below the cut only.
//! - Agreed time (issue 17): there is no global order, so each stream has its
//!   own: `max(previous, batch time)` over the stream's batches in slot
//!   order. A request runs with the time its execution partition's stream
//!   gave the batch that delivered it there. Part of the snapshot (version 2).

use super::checker::{check_serial_order, StreamEntry};
use super::predict::{predict, PartitionId, Prediction, MAX_PARTITIONS};
use super::scheduler::{Entry, Job, LogEvent, RequestScheduler, SchedulerStats, Step};
use crate::client_table::{Admission, CachedReply, ClientTable, ReplyLookup, TableSnapshot};
use crate::executor::{rejected_result, ExecCheckpoint, ExecError, ExecResult, Executor};
use crate::sequential::read_only_context;
use crate::service::{ExecContext, Service};
use bytes::Bytes;
use chorus_core::{
    Batch, Cell, ClientId, Digest, LaneId, RePrediction, RePredictionCert, Request, RequestSeq, Seq, Slot,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// Request digests a partition remembers to drop re-ordered copies (a
/// recovered leader re-proposing a retransmission, a Byzantine leader
/// replaying). Part of the snapshot; FIFO, so every replica forgets alike.
pub const SEEN_PER_PARTITION: usize = 8_192;

/// The result of a request that, at execution, accessed a partition below
/// the highest one predicted for it. A re-prediction may only add higher
/// partitions (SAREK §IV-D 2: otherwise two re-predictions could wait for
/// each other), so it is executed as this error instead, identically on
/// every replica; nothing of it ran. The cure is a conservative
/// `Service::access` that names that partition.
pub const MISPREDICTED_BELOW_RESULT: &[u8] =
    b"chorus error: the operation accessed a partition below its highest predicted one; declare it in Service::access (SAREK re-predicts only higher partitions)";

/// Requests `missing_copies` reports at most per call (one per partition
/// head, so at most `k` anyway; a bound for the ordering side's hand-ons).
const MISSING_COPIES_REPORTED_MAX: usize = 64;

/// Sub-requests a partition schedule may hold. The barrier bounds it by a
/// cut's worth of batches plus the waiting leftovers; this is a safety net,
/// never reached by correct streams.
const SCHEDULE_CAPACITY: usize = 1 << 20;

/// A sub-request: the request, the position of the cell that ordered it and
/// that cell's agreed time in its stream.
#[derive(Clone, Debug)]
struct Sub {
    req: Arc<Request>,
    at: Seq,
    time_ms: u64,
    /// The prediction a restored entry had in the snapshot's schedule (a
    /// suspended request's is extended); `None`: PREDICT() at admission.
    restored: Option<Prediction>,
}

#[derive(Default, Debug, Clone)]
struct Seen {
    set: BTreeSet<Digest>,
    fifo: VecDeque<Digest>,
}

impl Seen {
    fn insert(&mut self, d: Digest) -> bool {
        if !self.set.insert(d) {
            return false;
        }
        self.fifo.push_back(d);
        if self.fifo.len() > SEEN_PER_PARTITION {
            if let Some(old) = self.fifo.pop_front() {
                self.set.remove(&old);
            }
        }
        true
    }
}

#[derive(Serialize, Deserialize)]
struct Snapshot {
    version: u8,
    partitions: u16,
    cut_slot: u64,
    tables: Vec<TableSnapshot>,
    service: Bytes,
    seen: Vec<Vec<Digest>>,
    /// Per partition, the waiting sub-requests below the cut, in schedule
    /// order, with their agreed times.
    waiting: Vec<Vec<(Request, Seq, u64)>>,
    /// Per stream, its agreed time at the cut.
    times: Vec<u64>,
    /// Requests suspended for a re-prediction below the cut (version 3).
    suspended: Vec<(Digest, Suspension)>,
    /// Per waiting entry (same shape as `waiting`), the prediction it has in
    /// its schedule (a suspended request's is extended); `None` for entries
    /// held back behind a re-prediction SYNC (version 3).
    predictions: Vec<Vec<Option<Vec<u16>>>>,
}

/// Version 2: before re-predictions.
#[derive(Serialize, Deserialize)]
struct SnapshotV2 {
    version: u8,
    partitions: u16,
    cut_slot: u64,
    tables: Vec<TableSnapshot>,
    service: Bytes,
    seen: Vec<Vec<Digest>>,
    waiting: Vec<Vec<(Request, Seq, u64)>>,
    times: Vec<u64>,
}

/// A request suspended for a re-prediction (SAREK §IV-D): its new
/// prediction, and the added partitions whose SYNC was delivered already.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Suspension {
    prediction: Prediction,
    delivered: BTreeSet<PartitionId>,
    /// What this replica proposed (sent again after a restore).
    body: RePrediction,
}

/// Version 1: before agreed times (decoded with every time 0).
#[derive(Serialize, Deserialize)]
struct SnapshotV1 {
    version: u8,
    partitions: u16,
    cut_slot: u64,
    tables: Vec<TableSnapshot>,
    service: Bytes,
    seen: Vec<Vec<Digest>>,
    waiting: Vec<Vec<(Request, Seq)>>,
}

const SNAPSHOT_VERSION: u8 = 3;
const SNAPSHOT_VERSION_2: u8 = 2;
const SNAPSHOT_VERSION_1: u8 = 1;

/// Counters of what the executor dropped or refused, for status and checks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SarekExecStats {
    pub duplicate_copies: u64,
    pub out_of_order: u64,
    pub scheduler: SchedulerStats,
    pub cuts: u64,
    /// Re-prediction SYNCs dropped: a second one for the same request and
    /// partition, or one for a request already executed.
    pub stale_repredictions: u64,
    /// Cross-partition requests reported as lacking another partition's
    /// copy (`missing_copies`), to be handed to it again.
    pub missing_copies_reported: u64,
    /// Re-prediction SYNCs whose prediction differs from the one this
    /// replica computed when it suspended the request: the service is not
    /// deterministic (`Service::execution_access`). Dropped.
    pub reprediction_mismatches: u64,
    /// Re-prediction SYNCs that arrived before their request was suspended
    /// here and held their stream back until it was.
    pub gated_syncs: u64,
}

/// What the serial-order checker replays (the simulator keeps it per life).
#[derive(Default)]
struct Record {
    streams: Vec<Vec<StreamEntry>>,
    log: Vec<LogEvent>,
    /// Requests that ran while accessing a partition they did not hold
    /// (SAREK §IV-D: they must have been suspended and re-predicted).
    outside: Vec<Digest>,
}

pub struct SarekExecutor {
    service: Arc<dyn Service>,
    k: u16,
    slots_per_cut: u64,
    max_inflight: u32,
    scheduler: RequestScheduler<Sub>,
    tables: Vec<ClientTable>,
    seen: Vec<Seen>,
    next_slot: Vec<u64>,
    /// Per stream, the agreed time of the last batch fed.
    times: Vec<u64>,
    /// The slot of the next cut; entries at or above it wait in `held`.
    barrier: u64,
    held: Vec<VecDeque<(Slot, Arc<Batch>)>>,
    /// SAREK §IV-D: requests suspended for a re-prediction, until they run.
    suspended: BTreeMap<Digest, Suspension>,
    /// Per partition, the stream held back at a re-prediction SYNC whose
    /// request is not suspended here yet (first entry), and what followed.
    /// Gating keeps the schedules a function of the streams: every replica
    /// sees the SYNC only once it suspended the request, as the replicas
    /// that certified the re-prediction did.
    gated: Vec<VecDeque<Sub>>,
    /// Re-predictions to hand to the ordering side.
    repredictions: Vec<RePrediction>,
    /// What `missing_copies` found lacking at its previous call: reported
    /// only when still lacking (a copy merely in transit arrives meanwhile).
    lacking_before: BTreeSet<(Digest, PartitionId)>,
    last: ExecCheckpoint,
    results: Vec<ExecResult>,
    stats: SarekExecStats,
    record: Option<Record>,
    #[cfg(any(test, feature = "skip-sync-wait-for-tests"))]
    skip_reprediction: bool,
}

impl SarekExecutor {
    /// `partitions` streams; a checkpoint cut every `slots_per_cut` slots of
    /// each (the configuration's `checkpoint_interval / lanes`).
    pub fn new(
        service: Arc<dyn Service>,
        partitions: u16,
        slots_per_cut: u64,
        max_inflight: u32,
    ) -> SarekExecutor {
        assert!((1..=MAX_PARTITIONS).contains(&partitions));
        assert!(slots_per_cut >= 1);
        let k = partitions as usize;
        let mut e = SarekExecutor {
            service,
            k: partitions,
            slots_per_cut,
            max_inflight,
            scheduler: RequestScheduler::new(partitions, SCHEDULE_CAPACITY),
            tables: (0..k).map(|_| ClientTable::new(max_inflight)).collect(),
            seen: vec![Seen::default(); k],
            next_slot: vec![0; k],
            times: vec![0; k],
            barrier: slots_per_cut,
            held: vec![VecDeque::new(); k],
            suspended: BTreeMap::new(),
            gated: vec![VecDeque::new(); k],
            lacking_before: BTreeSet::new(),
            repredictions: Vec::new(),
            last: ExecCheckpoint {
                next_seq: Seq(0),
                state_digest: Digest::default(),
                snapshot: Bytes::new(),
            },
            results: Vec::new(),
            stats: SarekExecStats::default(),
            record: None,
            #[cfg(any(test, feature = "skip-sync-wait-for-tests"))]
            skip_reprediction: false,
        };
        e.last = e.snapshot_at(0);
        e
    }

    /// Keep the streams and the scheduler log for [`Executor::audit`].
    pub fn recording(mut self) -> SarekExecutor {
        self.record = Some(Record {
            streams: vec![Vec::new(); self.k as usize],
            log: Vec::new(),
            outside: Vec::new(),
        });
        self
    }

    /// Test-only fault: run a mis-predicted request without suspending it
    /// (as if its prediction were exact). Exists so the audit can be shown
    /// to catch it.
    #[cfg(any(test, feature = "skip-sync-wait-for-tests"))]
    pub fn set_skip_reprediction(&mut self, on: bool) {
        self.skip_reprediction = on;
    }

    fn skips_reprediction(&self) -> bool {
        #[cfg(any(test, feature = "skip-sync-wait-for-tests"))]
        if self.skip_reprediction {
            return true;
        }
        false
    }

    /// Test-only fault: a CROSS-BORDER-EXEC runs without waiting for its SYNCs.
    #[cfg(any(test, feature = "skip-sync-wait-for-tests"))]
    pub fn set_skip_sync_wait(&mut self, on: bool) {
        self.scheduler.set_skip_sync_wait(on);
    }

    pub fn stats(&self) -> SarekExecStats {
        let mut s = self.stats.clone();
        s.scheduler = self.scheduler.stats().clone();
        s
    }

    /// Sub-requests waiting in each partition's schedule.
    pub fn pending(&self) -> Vec<usize> {
        (0..self.k)
            .map(|p| self.scheduler.pending(PartitionId(p)))
            .collect()
    }

    /// Stream `p`'s next batch, in slot order (held ones once released).
    fn feed(&mut self, p: usize, cell: Cell, batch: &Batch) {
        let at = Seq(cell.slot.0 * u64::from(self.k) + p as u64);
        self.times[p] = self.times[p].max(batch.time_ms);
        let time_ms = self.times[p];
        for r in &batch.requests {
            let id = r.digest();
            if !self.seen[p].insert(id) {
                self.stats.duplicate_copies += 1;
                continue;
            }
            self.append(p, Arc::new(r.clone()), at, time_ms);
        }
    }

    fn append(&mut self, p: usize, req: Arc<Request>, at: Seq, time_ms: u64) {
        self.append_sub(
            p,
            Sub {
                req,
                at,
                time_ms,
                restored: None,
            },
        );
    }

    fn append_sub(&mut self, p: usize, sub: Sub) {
        if !self.gated[p].is_empty() {
            self.gated[p].push_back(sub);
            return;
        }
        self.admit(p, sub);
    }

    /// Hand one stream entry to the scheduler, or hold the stream back at a
    /// re-prediction SYNC whose request is not suspended yet.
    fn admit(&mut self, p: usize, sub: Sub) {
        let (id, prediction, reprediction) = if sub.req.is_reprediction() {
            // The ordering side verified the certificate; a batch that got
            // here with a malformed one was decided, so every replica drops
            // it alike.
            let Some(cert) = RePredictionCert::from_request(&sub.req) else {
                self.stats.stale_repredictions += 1;
                return;
            };
            let b = cert.body;
            let exec = b.partitions.first().copied().unwrap_or(0) as usize;
            if exec >= self.k as usize || self.tables[exec].is_executed(b.client, b.seq) {
                self.stats.stale_repredictions += 1;
                return;
            }
            let here: Option<Vec<u16>> = self
                .suspended
                .get(&b.request)
                .map(|s| s.prediction.partitions().iter().map(|q| q.0).collect());
            // Held back until this replica suspended the request with this
            // prediction: not suspended yet, or suspended for an earlier
            // re-prediction of which this one is the next (§IV-D 2 allows
            // several, each adding higher partitions).
            let later = |mine: &[u16]| {
                mine.len() < b.partitions.len() && mine.iter().all(|q| b.partitions.contains(q))
            };
            match &here {
                None => {
                    self.stats.gated_syncs += 1;
                    self.gated[p].push_back(sub);
                    return;
                }
                Some(mine) if later(mine) => {
                    self.stats.gated_syncs += 1;
                    self.gated[p].push_back(sub);
                    return;
                }
                Some(mine) if *mine != b.partitions => {
                    // Not a later one: an earlier re-prediction's second
                    // copy (its SYNC is in already) or, from a
                    // non-deterministic service, another one.
                    if b.partitions.iter().all(|q| mine.contains(q)) {
                        self.stats.stale_repredictions += 1;
                    } else {
                        self.stats.reprediction_mismatches += 1;
                    }
                    return;
                }
                Some(_) => {}
            }
            let s = self.suspended.get_mut(&b.request).expect("checked above");
            let part = PartitionId(p as u16);
            if !s.delivered.insert(part) {
                self.stats.stale_repredictions += 1;
                return;
            }
            (b.request, s.prediction.clone(), true)
        } else {
            // PREDICT() alone, never the local suspension state: a copy of a
            // suspended request (a retransmission ordered again) must get
            // the same prediction on every replica, whenever it arrives.
            let prediction = sub
                .restored
                .clone()
                .unwrap_or_else(|| predict(&self.service.access(&sub.req.op), self.k));
            (sub.req.digest(), prediction, false)
        };
        let entry = Entry {
            id,
            prediction: prediction.clone(),
            payload: sub,
        };
        // Refusals (not predicted here, full) are counted by the scheduler
        // and are the same on every replica: they depend on the entry only.
        if self.scheduler.deliver(PartitionId(p as u16), entry).is_ok() {
            if let Some(rec) = self.record.as_mut() {
                rec.streams[p].push(StreamEntry {
                    id,
                    prediction,
                    reprediction,
                });
            }
        }
    }

    /// A request was suspended: feed again what its gates held back, in
    /// order (a later re-prediction SYNC may close a gate again).
    fn open_gates(&mut self) {
        for p in 0..self.k as usize {
            for sub in std::mem::take(&mut self.gated[p]) {
                self.append_sub(p, sub);
            }
        }
    }

    /// Algorithm 2, every partition in turn, until none can move.
    fn run_until_blocked(&mut self) {
        loop {
            let mut moved = false;
            for p in 0..self.k {
                loop {
                    let before = self.scheduler.generation();
                    match self.scheduler.next(PartitionId(p)) {
                        Step::Run(job) => {
                            if self.repredict(&job) {
                                self.open_gates();
                            } else {
                                self.run(&job);
                                self.scheduler.complete(&job);
                                self.suspended.remove(&job.id);
                            }
                            moved = true;
                        }
                        Step::Wait => {
                            if self.scheduler.generation() == before {
                                break;
                            }
                            moved = true;
                        }
                    }
                }
            }
            if let Some(rec) = self.record.as_mut() {
                self.scheduler.drain_log(&mut rec.log);
            } else {
                let mut sink = Vec::new();
                self.scheduler.drain_log(&mut sink);
            }
            if !moved {
                return;
            }
        }
    }

    /// SAREK §IV-D: does the request, about to run with its partitions
    /// held, access partitions outside its prediction? Then it is suspended
    /// (nothing ran, so nothing is rolled back) and its re-prediction goes
    /// to the ordering side; returns true. A request already executed, or
    /// one that accessed a partition below its highest predicted one (a
    /// re-prediction may not add it, §IV-D 2), runs as usual; the latter is
    /// refused in [`SarekExecutor::run`].
    fn repredict(&mut self, job: &Job<Sub>) -> bool {
        if self.skips_reprediction() {
            return false;
        }
        let req = &job.payload.req;
        let Some(access) = self.service.execution_access(&req.op) else {
            return false;
        };
        let table = &self.tables[job.partition.0 as usize];
        if req.seq.0 == 0
            || table.is_executed(req.client, req.seq)
            || table.request_digest(req.client, req.seq).is_some()
        {
            return false;
        }
        let needed = predict(&access, self.k);
        let added: Vec<PartitionId> = needed
            .partitions()
            .iter()
            .copied()
            .filter(|q| !job.prediction.contains(*q))
            .collect();
        let highest = *job
            .prediction
            .partitions()
            .last()
            .expect("a prediction is never empty");
        if added.is_empty() || added[0] < highest {
            return false;
        }
        let mut all = job.prediction.partitions().to_vec();
        all.extend(&added);
        let prediction = Prediction::new(all, self.k).expect("partitions of a prediction");
        self.scheduler.suspend(job, prediction.clone());
        let body = RePrediction {
            request: job.id,
            client: req.client,
            seq: req.seq,
            partitions: prediction.partitions().iter().map(|q| q.0).collect(),
            added: added.iter().map(|q| q.0).collect(),
        };
        self.repredictions.push(body.clone());
        // A second re-prediction keeps the SYNCs the first one delivered.
        let delivered = self
            .suspended
            .remove(&job.id)
            .map(|s| s.delivered)
            .unwrap_or_default();
        self.suspended.insert(
            job.id,
            Suspension {
                prediction,
                delivered,
                body,
            },
        );
        true
    }

    /// Did the service, asked at execution, access a partition below the
    /// highest predicted one (SAREK §IV-D 2)?
    fn mispredicted_below(&self, op: &[u8], prediction: &Prediction) -> bool {
        let Some(access) = self.service.execution_access(op) else {
            return false;
        };
        predict(&access, self.k)
            .partitions()
            .iter()
            .any(|q| !prediction.contains(*q))
    }

    /// Execute one request in its execution partition, exactly once per
    /// `(client, seq)` by that partition's client table.
    fn run(&mut self, job: &Job<Sub>) {
        let (p, sub) = (job.partition, &job.payload);
        let req = &sub.req;
        let digest = req.digest();
        let outside = self.mispredicted_below(&req.op, &job.prediction);
        let below = outside && !self.skips_reprediction();
        if outside && !below {
            if let Some(rec) = self.record.as_mut() {
                rec.outside.push(digest);
            }
        }
        let table = &mut self.tables[p.0 as usize];
        let result = |result: Bytes, duplicate: bool| ExecResult {
            client: req.client,
            request_seq: req.seq,
            delivered_at: sub.at,
            result,
            duplicate,
            request: digest,
            few_replies: req.flags & chorus_core::flags::FEW_REPLIES != 0,
        };
        match table.admit_request(req.client, req.seq, digest) {
            Admission::Fresh => {
                let ctx = ExecContext {
                    seq: sub.at,
                    index: u32::from(p.0),
                    client: req.client,
                    request_seq: req.seq,
                    time_ms: sub.time_ms,
                };
                let reply = if below {
                    Bytes::from_static(MISPREDICTED_BELOW_RESULT)
                } else {
                    self.service.execute(&req.op, &ctx)
                };
                table.complete(req.client, req.seq, reply.clone());
                self.results.push(result(reply, false));
            }
            Admission::Duplicate(CachedReply::Ready(reply)) => self.results.push(result(reply, true)),
            Admission::Duplicate(CachedReply::Forgotten | CachedReply::Pending) => {}
            Admission::Rejected(kind) => self.results.push(result(rejected_result(kind), false)),
        }
    }

    /// Every stream reached the barrier and everything runnable below it
    /// ran: snapshot, move the barrier, release what waited for it.
    fn advance(&mut self) {
        loop {
            self.run_until_blocked();
            if self.next_slot.iter().any(|&s| s < self.barrier) {
                return;
            }
            self.last = self.snapshot_at(self.barrier);
            self.stats.cuts += 1;
            self.release_held();
        }
    }

    /// Move the barrier to the next cut and feed what waited below it.
    fn release_held(&mut self) {
        self.barrier += self.slots_per_cut;
        for p in 0..self.k as usize {
            while self.held[p].front().is_some_and(|(s, _)| s.0 < self.barrier) {
                let (slot, batch) = self.held[p].pop_front().expect("checked");
                let cell = Cell {
                    lane: LaneId(p as u32),
                    slot,
                };
                self.feed(p, cell, &batch);
            }
        }
    }

    fn waiting(&self) -> Vec<Vec<(Request, Seq, u64)>> {
        (0..self.k)
            .map(|p| {
                self.scheduler
                    .pending_payloads(PartitionId(p))
                    .chain(self.gated[p as usize].iter())
                    .map(|s| ((*s.req).clone(), s.at, s.time_ms))
                    .collect()
            })
            .collect()
    }

    /// `waiting`'s predictions: the scheduler's, then `None` for held-back.
    fn waiting_predictions(&self) -> Vec<Vec<Option<Vec<u16>>>> {
        (0..self.k)
            .map(|p| {
                self.scheduler
                    .pending_predictions(PartitionId(p))
                    .map(|pr| Some(pr.partitions().iter().map(|q| q.0).collect()))
                    .chain(self.gated[p as usize].iter().map(|_| None))
                    .collect()
            })
            .collect()
    }

    fn snapshot_at(&self, cut_slot: u64) -> ExecCheckpoint {
        let s = Snapshot {
            version: SNAPSHOT_VERSION,
            partitions: self.k,
            cut_slot,
            tables: self.tables.iter().map(ClientTable::to_snapshot).collect(),
            service: self.service.snapshot(),
            seen: self
                .seen
                .iter()
                .map(|s| s.fifo.iter().copied().collect())
                .collect(),
            waiting: self.waiting(),
            times: self.times.clone(),
            suspended: self.suspended.iter().map(|(d, s)| (*d, s.clone())).collect(),
            predictions: self.waiting_predictions(),
        };
        let bytes = Bytes::from(postcard::to_allocvec(&s).expect("encoding a snapshot cannot fail"));
        ExecCheckpoint {
            next_seq: Seq(cut_slot * u64::from(self.k)),
            state_digest: Digest::of_parts("chorus sarek exec state v1", &[&bytes]),
            snapshot: bytes,
        }
    }

    fn decode(&self, next_seq: Seq, bytes: &[u8]) -> Result<Snapshot, ExecError> {
        let malformed = |e: postcard::Error| ExecError::Malformed(e.to_string());
        let (s, rest): (Snapshot, &[u8]) = match bytes.first() {
            Some(&SNAPSHOT_VERSION_1) => {
                let (v1, rest): (SnapshotV1, &[u8]) = postcard::take_from_bytes(bytes).map_err(malformed)?;
                let s = Snapshot {
                    version: v1.version,
                    partitions: v1.partitions,
                    cut_slot: v1.cut_slot,
                    tables: v1.tables,
                    service: v1.service,
                    seen: v1.seen,
                    waiting: v1
                        .waiting
                        .into_iter()
                        .map(|w| w.into_iter().map(|(r, at)| (r, at, 0)).collect())
                        .collect(),
                    times: vec![0; self.k as usize],
                    suspended: Vec::new(),
                    predictions: Vec::new(),
                };
                (s, rest)
            }
            Some(&SNAPSHOT_VERSION_2) => {
                let (v2, rest): (SnapshotV2, &[u8]) = postcard::take_from_bytes(bytes).map_err(malformed)?;
                let s = Snapshot {
                    version: v2.version,
                    partitions: v2.partitions,
                    cut_slot: v2.cut_slot,
                    tables: v2.tables,
                    service: v2.service,
                    seen: v2.seen,
                    waiting: v2.waiting,
                    times: v2.times,
                    suspended: Vec::new(),
                    predictions: Vec::new(),
                };
                (s, rest)
            }
            _ => postcard::take_from_bytes(bytes).map_err(malformed)?,
        };
        if !rest.is_empty() {
            return Err(ExecError::Malformed(format!("{} trailing bytes", rest.len())));
        }
        let k = self.k as usize;
        let known = [SNAPSHOT_VERSION_1, SNAPSHOT_VERSION_2, SNAPSHOT_VERSION].contains(&s.version);
        if !known || s.partitions != self.k {
            return Err(ExecError::Invalid("unknown snapshot version or partition count"));
        }
        if s.cut_slot.checked_mul(u64::from(self.k)) != Some(next_seq.0) {
            return Err(ExecError::Invalid("snapshot is not at this cut"));
        }
        let shaped = s.predictions.is_empty()
            || (s.predictions.len() == k
                && s.predictions
                    .iter()
                    .zip(&s.waiting)
                    .all(|(a, b)| a.len() == b.len()));
        if s.tables.len() != k || s.seen.len() != k || s.waiting.len() != k || s.times.len() != k || !shaped {
            return Err(ExecError::Invalid("per-partition parts missing"));
        }
        if s.seen.iter().any(|v| v.len() > SEEN_PER_PARTITION) {
            return Err(ExecError::Invalid("dedup memory too large"));
        }
        let waiting: usize = s.waiting.iter().map(Vec::len).sum();
        if s.suspended.len() > waiting
            || s.suspended
                .iter()
                .any(|(_, x)| x.prediction.partitions().iter().any(|q| q.0 >= self.k))
        {
            return Err(ExecError::Invalid(
                "suspended requests do not match the schedules",
            ));
        }
        Ok(s)
    }

    /// Replace everything by a decoded snapshot (the service first: if it
    /// refuses, nothing else changed).
    fn adopt(&mut self, s: Snapshot, bytes: &[u8]) -> Result<Digest, ExecError> {
        let tables = s
            .tables
            .iter()
            .map(|t| ClientTable::from_snapshot(t, self.max_inflight))
            .collect::<Result<Vec<_>, _>>()
            .map_err(ExecError::Invalid)?;
        self.service.restore(&s.service).map_err(ExecError::Service)?;
        self.tables = tables;
        self.seen = s
            .seen
            .iter()
            .map(|v| {
                let mut seen = Seen::default();
                for d in v {
                    seen.insert(*d);
                }
                seen
            })
            .collect();
        self.scheduler = RequestScheduler::new(self.k, SCHEDULE_CAPACITY);
        if let Some(rec) = self.record.as_mut() {
            *rec = Record {
                streams: vec![Vec::new(); self.k as usize],
                log: Vec::new(),
                outside: Vec::new(),
            };
        }
        self.times = s.times;
        // The SYNCs of suspended requests delivered below the cut are in the
        // waiting lists and are delivered again just below: start from none
        // (a suspended request has consumed none of them).
        // Our proposals may have been lost with the old state: propose again
        // the ones whose SYNCs are not all in yet (the ordering side counts
        // one vote per replica).
        self.repredictions = s
            .suspended
            .iter()
            .filter(|(_, x)| {
                x.body
                    .added
                    .iter()
                    .any(|q| !x.delivered.contains(&PartitionId(*q)))
            })
            .map(|(_, x)| x.body.clone())
            .collect();
        // The SYNCs of suspended requests delivered below the cut are in the
        // waiting lists and are delivered again just below: start from none
        // (a suspended request has consumed none of them).
        self.suspended = s
            .suspended
            .into_iter()
            .map(|(d, mut x)| {
                x.delivered.clear();
                (d, x)
            })
            .collect();
        self.gated = vec![VecDeque::new(); self.k as usize];
        let k = self.k;
        for (p, waiting) in s.waiting.into_iter().enumerate() {
            let predictions = s.predictions.get(p);
            for (i, (req, at, time_ms)) in waiting.into_iter().enumerate() {
                let restored = predictions
                    .and_then(|v| v.get(i).cloned().flatten())
                    .and_then(|v| Prediction::new(v.into_iter().map(PartitionId).collect(), k));
                self.append_sub(
                    p,
                    Sub {
                        req: Arc::new(req),
                        at,
                        time_ms,
                        restored,
                    },
                );
            }
        }
        // Streams go on where they are: a stream already delivered past the
        // cut (the ordering side's streams never rewind, `Streams::jump_to`)
        // keeps what it delivered above the cut. This executor was behind the
        // cut, so all of that waits in `held` (at or above its old barrier).
        for (p, held) in self.held.iter_mut().enumerate() {
            held.retain(|(slot, _)| slot.0 >= s.cut_slot);
            self.next_slot[p] = self.next_slot[p].max(s.cut_slot);
            debug_assert!(held.front().is_none_or(|(slot, _)| slot.0 == s.cut_slot));
        }
        self.barrier = s.cut_slot;
        self.last = ExecCheckpoint {
            next_seq: Seq(s.cut_slot * u64::from(self.k)),
            state_digest: Digest::of_parts("chorus sarek exec state v1", &[bytes]),
            snapshot: Bytes::copy_from_slice(bytes),
        };
        let digest = self.last.state_digest;
        self.release_held();
        self.advance();
        Ok(digest)
    }

    fn lookup_any(&self, client: ClientId, seq: RequestSeq) -> ReplyLookup {
        let mut best = ReplyLookup::Unknown;
        for t in &self.tables {
            match t.lookup(client, seq) {
                ReplyLookup::Ready(r) => return ReplyLookup::Ready(r),
                ReplyLookup::Unknown => {}
                other => best = other,
            }
        }
        best
    }
}

impl Executor for SarekExecutor {
    fn cached_reply(&self, client: ClientId, seq: RequestSeq) -> Option<Bytes> {
        self.tables.iter().find_map(|t| t.cached_reply(client, seq))
    }

    fn request_digest(&self, client: ClientId, seq: RequestSeq) -> Option<Digest> {
        self.tables.iter().find_map(|t| t.request_digest(client, seq))
    }

    fn reply_lookup(&self, client: ClientId, seq: RequestSeq) -> ReplyLookup {
        self.lookup_any(client, seq)
    }

    /// A global position is cell `(seq mod K, seq div K)` (`seq_of`), so a
    /// driver with one global order still feeds the right streams.
    fn submit(&mut self, seq: Seq, batch: Arc<Batch>) {
        let k = u64::from(self.k);
        let cell = Cell {
            lane: LaneId((seq.0 % k) as u32),
            slot: Slot(seq.0 / k),
        };
        self.submit_stream(cell, batch);
    }

    fn submit_stream(&mut self, cell: Cell, batch: Arc<Batch>) -> bool {
        let p = cell.lane.index();
        if p >= self.k as usize || cell.slot.0 != self.next_slot[p] {
            // Streams are delivered in order without gaps; anything else is
            // a driver bug, refused without touching the state.
            self.stats.out_of_order += 1;
            return false;
        }
        self.next_slot[p] += 1;
        if cell.slot.0 >= self.barrier {
            self.held[p].push_back((cell.slot, batch));
            return true;
        }
        self.feed(p, cell, &batch);
        self.advance();
        true
    }

    fn drain_results(&mut self, out: &mut Vec<ExecResult>) {
        out.append(&mut self.results);
    }

    fn drain_repredictions(&mut self, out: &mut Vec<RePrediction>) {
        out.append(&mut self.repredictions);
    }

    fn missing_copies(&mut self) -> Vec<(Request, Vec<LaneId>)> {
        let mut now = BTreeSet::new();
        let mut report = Vec::new();
        for p in 0..self.k {
            let part = PartitionId(p);
            let Some((sub, lacking)) = self.scheduler.head_lacking_copies(part) else {
                continue;
            };
            // The scheduler's id: a re-prediction SYNC's entry carries the
            // certificate's request, whose digest is not the request's.
            let Some(id) = self.scheduler.head_id_of(part) else {
                continue;
            };
            // A suspended request's added partitions get their sub-requests
            // from its re-prediction certificate (SAREK §IV-D), and a
            // certificate is ordered only where it adds a partition, never
            // handed on (`forward_decided`).
            if sub.req.is_reprediction() || self.suspended.contains_key(&id) {
                continue;
            }
            // A copy held back (at a re-prediction SYNC, or above the next
            // cut) is there already; it reaches the schedule in its turn.
            let held_back = |q: &PartitionId| {
                let q = q.0 as usize;
                self.gated[q].iter().any(|s| s.req.digest() == id)
                    || self.held[q]
                        .iter()
                        .any(|(_, b)| b.requests.iter().any(|r| r.digest() == id))
            };
            let lacking: Vec<PartitionId> = lacking.into_iter().filter(|q| !held_back(q)).collect();
            let mut stuck = Vec::new();
            for q in lacking {
                now.insert((id, q));
                if self.lacking_before.contains(&(id, q)) {
                    stuck.push(LaneId(u32::from(q.0)));
                }
            }
            if !stuck.is_empty() && report.len() < MISSING_COPIES_REPORTED_MAX {
                report.push(((*sub.req).clone(), stuck));
            }
        }
        self.lacking_before = now;
        self.stats.missing_copies_reported += report.len() as u64;
        report
    }

    fn partition_detail(&self) -> Vec<chorus_core::status_report::PartitionExecDetail> {
        (0..self.k)
            .map(|p| {
                let part = PartitionId(p);
                let suspended = self
                    .scheduler
                    .head_id_of(part)
                    .is_some_and(|id| self.suspended.contains_key(&id));
                let head = match self.scheduler.head_state(part) {
                    None => "idle",
                    Some("exec-waits-for-syncs") if suspended => "suspended",
                    Some(s) => s,
                };
                chorus_core::status_report::PartitionExecDetail {
                    pending: self.scheduler.pending(part),
                    head: head.to_string(),
                    held_back: self.gated[p as usize].len(),
                }
            })
            .collect()
    }

    /// The snapshot at the latest cut (taken when every stream reached it).
    fn checkpoint(&mut self) -> ExecCheckpoint {
        self.last.clone()
    }

    fn restore(&mut self, next_seq: Seq, snapshot: &[u8]) -> Result<Digest, ExecError> {
        let s = self.decode(next_seq, snapshot)?;
        self.adopt(s, snapshot)
    }

    fn install(&mut self, next_seq: Seq, snapshot: &[u8], expected: Digest) -> Result<Digest, ExecError> {
        // Verify before anything changes (issue 8, finding 6).
        let got = Digest::of_parts("chorus sarek exec state v1", &[snapshot]);
        if got != expected {
            return Err(ExecError::DigestMismatch { expected, got });
        }
        let s = self.decode(next_seq, snapshot)?;
        self.adopt(s, snapshot)
    }

    fn execute_read_only(&self, op: &[u8]) -> Option<Bytes> {
        if !self.service.is_read_only(op) {
            return None;
        }
        Some(self.service.execute(
            op,
            &read_only_context(self.last.next_seq, self.times.iter().copied().max().unwrap_or(0)),
        ))
    }

    /// The latest cut: every stream's cells below it are in the state.
    fn next_seq(&self) -> Seq {
        self.last.next_seq
    }

    /// The state at [`Executor::next_seq`] (the latest cut).
    fn state_digest(&mut self) -> Digest {
        self.last.state_digest
    }

    fn audit(&self) -> Option<Vec<String>> {
        let rec = self.record.as_ref()?;
        let mut found: Vec<String> = match check_serial_order(&rec.streams, &rec.log, false) {
            Ok(_) => Vec::new(),
            Err(v) => v.iter().map(|x| format!("{x:?}")).collect(),
        };
        found.extend(
            rec.outside
                .iter()
                .map(|d| format!("AccessOutsidePrediction {{ id: {d:?} }}")),
        );
        Some(found)
    }
}
