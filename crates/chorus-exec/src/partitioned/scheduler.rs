//! SAREK's request scheduler (SAREK §IV-B 2, Algorithms 2 and 3) as a pure
//! data structure: K partition schedules, fed by K delivery streams, and the
//! rules for what the worker of each partition may run next.
//!
//! The paper's instances share `blocked_by` under a mutex; here the whole
//! scheduler is the state behind that mutex. A worker (thread, task, or a
//! loop in the simulator) for partition `p` calls [`RequestScheduler::next`]
//! and gets either a [`Job`] to run or [`Step::Wait`]; after running a job it
//! calls [`RequestScheduler::complete`]. Sans-IO: no threads, no clocks.
//!
//! Algorithm 2, per head of partition `p`:
//! - EXECUTE runs at once (line 7).
//! - CROSS-BORDER-EXEC runs when every one of its SYNCs heads its own
//!   schedule and no partition involved is busy (line 11); the job holds all
//!   its partitions, and `complete` dequeues the EXEC and its SYNCs together
//!   (lines 13–18), so a SYNC is released only after the EXEC finished.
//! - CROSS-BORDER-SYNC makes `p` wait for its EXEC (line 34).
//!
//! Algorithm 3: when a head cannot run, the request cycles among the heads
//! are found (`cycle.rs`) and a cycle is resolved by moving the head of its
//! lowest partition to the head of every schedule it is in (lines 43–45),
//! but only once every jumped head is permanently stuck, the moved request
//! is delivered everywhere, and no other cycle it depends on is pending
//! (the sink rule in `cycle.rs`); until then the cycle just stays as it is.
//! The schedules after these moves (the *effective* schedules) are a
//! function of the delivery streams alone, whatever the workers' timing.

use super::cycle::{resolvable, Head};
use super::predict::{EntryKind, PartitionId, Prediction, MAX_PARTITIONS};
use chorus_core::Digest;
use std::collections::VecDeque;

/// A sub-request as a partition's delivery stream hands it over. Every
/// sub-request carries the whole request (§IV-B 1); `id` names the request
/// (its digest), so an EXEC and its SYNCs match.
#[derive(Clone, Debug)]
pub struct Entry<T> {
    pub id: Digest,
    pub prediction: Prediction,
    pub payload: T,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeliverError {
    #[error("no such partition")]
    NoSuchPartition,
    /// The request's prediction does not include the partition that ordered
    /// it: PREDICT is deterministic, so a correct leader never does this.
    #[error("request not predicted for this partition")]
    NotPredicted,
    #[error("prediction names a partition beyond the configured count")]
    PredictionOutOfRange,
    /// Back-pressure: the partition's schedule is at capacity.
    #[error("partition schedule full")]
    Full,
}

/// Work handed to the worker of `partition`.
#[derive(Clone, Debug)]
pub struct Job<T> {
    pub id: Digest,
    pub partition: PartitionId,
    pub prediction: Prediction,
    pub payload: T,
    /// Stream position of the EXECUTE/EXEC entry in `partition`.
    pub position: u64,
    /// The sub-requests this job consumes, `(partition, stream position)`.
    pub consumed: Vec<(PartitionId, u64)>,
}

#[derive(Debug)]
pub enum Step<T> {
    Run(Job<T>),
    /// Nothing for this partition now; wait for a delivery or a completion.
    Wait,
}

/// What happened, in the order the scheduler decided it. Jobs handed out
/// between two events never share a partition, so this order is a serial
/// order equivalent to the concurrent run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogEvent {
    /// A request was handed out for execution, consuming these sub-requests.
    Executed {
        id: Digest,
        consumed: Vec<(PartitionId, u64)>,
    },
    /// A request cycle was resolved by moving `moved` to the heads of its
    /// partitions; `cycle` lists the looped partitions from the lowest.
    Resolved { moved: Digest, cycle: Vec<PartitionId> },
    /// Only with the test-only SYNC-skipping fault: a SYNC whose EXEC had
    /// already run was dropped when it reached its head.
    Released { partition: PartitionId, position: u64 },
    /// SAREK §IV-D: a handed-out request accessed partitions outside its
    /// prediction and was suspended before it ran; it keeps the heads of its
    /// partitions and now also needs a sub-request in each added partition.
    Suspended { id: Digest, prediction: Prediction },
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    pub delivered: u64,
    pub executed: u64,
    pub cross_border: u64,
    pub cycles_resolved: u64,
    /// Requests suspended for a re-prediction (SAREK §IV-D).
    pub suspended: u64,
    pub rejected_no_such_partition: u64,
    pub rejected_not_predicted: u64,
    pub rejected_out_of_range: u64,
    pub rejected_full: u64,
}

#[derive(Debug)]
struct Slot<T> {
    pos: u64,
    entry: Entry<T>,
}

pub struct RequestScheduler<T> {
    schedules: Vec<VecDeque<Slot<T>>>,
    next_pos: Vec<u64>,
    /// The request a running job holds each partition for.
    busy: Vec<Option<Digest>>,
    capacity: usize,
    log: Vec<LogEvent>,
    stats: SchedulerStats,
    /// Bumped on every change a waiting worker could care about.
    generation: u64,
    #[cfg(any(test, feature = "skip-sync-wait-for-tests"))]
    skip_sync_wait: bool,
    #[cfg(any(test, feature = "skip-sync-wait-for-tests"))]
    ran_early: Vec<Digest>,
}

impl<T: Clone> RequestScheduler<T> {
    /// `partitions` schedules of at most `capacity` pending sub-requests each.
    pub fn new(partitions: u16, capacity: usize) -> RequestScheduler<T> {
        assert!((1..=MAX_PARTITIONS).contains(&partitions));
        assert!(capacity >= 1);
        let k = partitions as usize;
        RequestScheduler {
            schedules: (0..k).map(|_| VecDeque::new()).collect(),
            next_pos: vec![0; k],
            busy: vec![None; k],
            capacity,
            log: Vec::new(),
            stats: SchedulerStats::default(),
            generation: 0,
            #[cfg(any(test, feature = "skip-sync-wait-for-tests"))]
            skip_sync_wait: false,
            #[cfg(any(test, feature = "skip-sync-wait-for-tests"))]
            ran_early: Vec::new(),
        }
    }

    /// Test-only fault: run a CROSS-BORDER-EXEC as soon as it heads its own
    /// schedule, without waiting for its SYNCs. Exists so the serial-order
    /// checker can be shown to catch it.
    #[cfg(any(test, feature = "skip-sync-wait-for-tests"))]
    pub fn set_skip_sync_wait(&mut self, on: bool) {
        self.skip_sync_wait = on;
    }

    pub fn partitions(&self) -> u16 {
        self.schedules.len() as u16
    }

    pub fn stats(&self) -> &SchedulerStats {
        &self.stats
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Sub-requests waiting or running in partition `p`.
    pub fn pending(&self, p: PartitionId) -> usize {
        self.schedules[p.0 as usize].len()
    }

    /// Nothing pending or running anywhere.
    pub fn is_idle(&self) -> bool {
        self.schedules.iter().all(VecDeque::is_empty)
    }

    /// The predictions of the entries waiting in `p`'s schedule, head first
    /// (a suspended request's is its extended one).
    pub fn pending_predictions(&self, p: PartitionId) -> impl Iterator<Item = &Prediction> + '_ {
        self.schedules[p.0 as usize].iter().map(|s| &s.entry.prediction)
    }

    /// The payloads waiting in partition `p`'s schedule, head first.
    pub fn pending_payloads(&self, p: PartitionId) -> impl Iterator<Item = &T> + '_ {
        self.schedules[p.0 as usize].iter().map(|s| &s.entry.payload)
    }

    /// What the head of `p` waits for (`chorus status`): `None` when empty.
    pub fn head_state(&self, p: PartitionId) -> Option<&'static str> {
        let i = p.0 as usize;
        let head = self.schedules[i].front()?;
        if self.busy[i].is_some() {
            return Some("running");
        }
        Some(match head.entry.prediction.kind_in(p) {
            Some(EntryKind::Execute) => "runnable",
            Some(EntryKind::CrossBorderExec) if self.ready(i) => "runnable",
            Some(EntryKind::CrossBorderExec) => "exec-waits-for-syncs",
            _ => "sync-waits-for-exec",
        })
    }

    /// The head of `p` if it is a cross-border request some of whose
    /// predicted partitions hold no sub-request of it (not delivered there
    /// yet, or never ordered there): those partitions, with the head's
    /// payload. A head can only run once every sub-request arrived.
    pub fn head_lacking_copies(&self, p: PartitionId) -> Option<(&T, Vec<PartitionId>)> {
        let head = self.schedules.get(p.0 as usize)?.front()?;
        let id = head.entry.id;
        let lacking: Vec<PartitionId> = head
            .entry
            .prediction
            .partitions()
            .iter()
            .copied()
            .filter(|q| *q != p && !self.schedules[q.0 as usize].iter().any(|s| s.entry.id == id))
            .collect();
        (!lacking.is_empty()).then_some((&head.entry.payload, lacking))
    }

    /// The request heading `p`, if any.
    pub fn head_id_of(&self, p: PartitionId) -> Option<Digest> {
        self.head_id(p.0 as usize)
    }

    pub fn is_busy(&self, p: PartitionId) -> bool {
        self.busy[p.0 as usize].is_some()
    }

    pub fn drain_log(&mut self, out: &mut Vec<LogEvent>) {
        out.append(&mut self.log);
    }

    /// Append the next entry of partition `p`'s delivery stream. The checks
    /// depend only on the entry, so every replica accepts the same entries.
    pub fn deliver(&mut self, p: PartitionId, entry: Entry<T>) -> Result<u64, DeliverError> {
        let k = self.schedules.len();
        let reject = |stats: &mut SchedulerStats, e: DeliverError| {
            match e {
                DeliverError::NoSuchPartition => stats.rejected_no_such_partition += 1,
                DeliverError::NotPredicted => stats.rejected_not_predicted += 1,
                DeliverError::PredictionOutOfRange => stats.rejected_out_of_range += 1,
                DeliverError::Full => stats.rejected_full += 1,
            }
            Err(e)
        };
        if p.0 as usize >= k {
            return reject(&mut self.stats, DeliverError::NoSuchPartition);
        }
        if entry.prediction.partitions().iter().any(|q| q.0 as usize >= k) {
            return reject(&mut self.stats, DeliverError::PredictionOutOfRange);
        }
        if !entry.prediction.contains(p) {
            return reject(&mut self.stats, DeliverError::NotPredicted);
        }
        let i = p.0 as usize;
        if self.schedules[i].len() >= self.capacity {
            return reject(&mut self.stats, DeliverError::Full);
        }
        let pos = self.next_pos[i];
        self.next_pos[i] += 1;
        self.schedules[i].push_back(Slot { pos, entry });
        self.stats.delivered += 1;
        self.generation += 1;
        Ok(pos)
    }

    fn head_id(&self, q: usize) -> Option<Digest> {
        self.schedules[q].front().map(|s| s.entry.id)
    }

    /// Algorithm 2 line 11: every sub-request of the head of `p` heads its
    /// schedule and no partition involved is held by a running job.
    fn ready(&self, p: usize) -> bool {
        let Some(h) = self.schedules[p].front() else {
            return false;
        };
        h.entry
            .prediction
            .partitions()
            .iter()
            .all(|q| self.busy[q.0 as usize].is_none() && self.head_id(q.0 as usize) == Some(h.entry.id))
    }

    /// One step of Algorithm 2 for the worker of partition `p`.
    pub fn next(&mut self, p: PartitionId) -> Step<T> {
        let i = p.0 as usize;
        assert!(i < self.schedules.len(), "no such partition");
        if self.busy[i].is_some() {
            return Step::Wait;
        }
        #[cfg(any(test, feature = "skip-sync-wait-for-tests"))]
        if self.release_early_sync(i) {
            return Step::Wait;
        }
        // Each pass either hands out a job, waits, or resolved a cycle (which
        // may change this partition's head, so look again). Resolutions move
        // a request that then is ready, so this ends.
        loop {
            let Some(head) = self.schedules[i].front() else {
                return Step::Wait;
            };
            match head.entry.prediction.kind_in(p).expect("checked at delivery") {
                EntryKind::Execute => return Step::Run(self.hand_out(i)),
                EntryKind::CrossBorderExec => {
                    #[cfg(any(test, feature = "skip-sync-wait-for-tests"))]
                    if self.skip_sync_wait {
                        return Step::Run(self.hand_out_alone(i));
                    }
                    if self.ready(i) {
                        return Step::Run(self.hand_out(i));
                    }
                    // Algorithm 2 line 21: try to break a request cycle.
                    if !self.resolve_cycles() {
                        return Step::Wait;
                    }
                }
                EntryKind::CrossBorderSync => {
                    // The EXEC's worker runs the request; detecting cycles
                    // from here too means no cycle waits for one worker.
                    if !self.resolve_cycles() {
                        return Step::Wait;
                    }
                }
            }
        }
    }

    fn hand_out(&mut self, i: usize) -> Job<T> {
        let head = &self.schedules[i].front().expect("a head to hand out").entry;
        // A request runs on its own partition's worker only (§IV-B 2).
        assert_eq!(
            head.prediction.exec_partition().0 as usize,
            i,
            "handed out by a SYNC's worker"
        );
        let (id, prediction, payload) = (head.id, head.prediction.clone(), head.payload.clone());
        let mut consumed = Vec::with_capacity(prediction.partitions().len());
        for q in prediction.partitions() {
            let qi = q.0 as usize;
            debug_assert!(self.busy[qi].is_none());
            debug_assert_eq!(self.head_id(qi), Some(id));
            self.busy[qi] = Some(id);
            consumed.push((*q, self.schedules[qi].front().expect("ready").pos));
        }
        let position = self.schedules[i].front().expect("head").pos;
        self.stats.executed += 1;
        if prediction.is_cross_border() {
            self.stats.cross_border += 1;
        }
        self.log.push(LogEvent::Executed {
            id,
            consumed: consumed.clone(),
        });
        self.generation += 1;
        Job {
            id,
            partition: PartitionId(i as u16),
            prediction,
            payload,
            position,
            consumed,
        }
    }

    /// Algorithm 2 lines 13–19: dequeue the request and its SYNCs, free the
    /// partitions, and let their workers go on.
    pub fn complete(&mut self, job: &Job<T>) {
        for (q, pos) in &job.consumed {
            let qi = q.0 as usize;
            assert_eq!(
                self.busy[qi],
                Some(job.id),
                "completing a job that does not hold {q:?}"
            );
            let slot = self.schedules[qi]
                .pop_front()
                .expect("the job's sub-request heads its schedule");
            assert_eq!((slot.pos, slot.entry.id), (*pos, job.id));
            self.busy[qi] = None;
        }
        self.generation += 1;
    }

    /// SAREK §IV-D: `job` accessed partitions its prediction did not name,
    /// so it is not run. It stays at the head of every schedule it holds
    /// (no rollback: nothing ran), frees them, and from now on needs
    /// `prediction` (its own plus partitions above its highest, §IV-D 2),
    /// so it runs once a sub-request of each added partition heads that
    /// partition's schedule (the re-prediction's CROSS-BORDER-SYNC). Called
    /// instead of [`RequestScheduler::complete`].
    pub fn suspend(&mut self, job: &Job<T>, prediction: Prediction) {
        let old = job.prediction.partitions();
        let new = prediction.partitions();
        assert!(
            old.iter().all(|p| prediction.contains(*p))
                && new.len() > old.len()
                && new
                    .iter()
                    .filter(|p| !job.prediction.contains(**p))
                    .all(|p| Some(p) > old.last()),
            "a re-prediction only adds partitions above the highest predicted"
        );
        assert_eq!(
            self.log.last(),
            Some(&LogEvent::Executed {
                id: job.id,
                consumed: job.consumed.clone()
            }),
            "suspend right after the hand-out"
        );
        self.log.pop();
        self.stats.executed -= 1;
        if job.prediction.is_cross_border() {
            self.stats.cross_border -= 1;
        }
        for (q, pos) in &job.consumed {
            let qi = q.0 as usize;
            assert_eq!(
                self.busy[qi],
                Some(job.id),
                "suspending a job that does not hold {q:?}"
            );
            self.busy[qi] = None;
            let head = self.schedules[qi]
                .front_mut()
                .expect("the job's sub-request heads its schedule");
            assert_eq!((head.pos, head.entry.id), (*pos, job.id));
            head.entry.prediction = prediction.clone();
        }
        self.stats.suspended += 1;
        self.log.push(LogEvent::Suspended {
            id: job.id,
            prediction,
        });
        self.generation += 1;
    }

    /// Algorithm 3: find the request cycles that may be resolved now (see
    /// [`super::cycle`] for which) and move the head of each one's lowest
    /// partition (line 43) to the head of every schedule it is in (lines
    /// 44–45). Returns whether anything moved.
    fn resolve_cycles(&mut self) -> bool {
        let ready: Vec<bool> = (0..self.schedules.len()).map(|q| self.ready(q)).collect();
        let to_resolve = {
            let heads: Vec<Option<Head<'_>>> = self
                .schedules
                .iter()
                .enumerate()
                .map(|(q, s)| {
                    s.front().map(|h| Head {
                        id: h.entry.id,
                        partitions: h.entry.prediction.partitions(),
                        waiting: self.busy[q].is_none() && h.entry.prediction.is_cross_border() && !ready[q],
                    })
                })
                .collect();
            let schedules = &self.schedules;
            let delivered = |p: usize| {
                let h = &schedules[p].front().expect("looped partitions have heads").entry;
                h.prediction
                    .partitions()
                    .iter()
                    .all(|q| schedules[q.0 as usize].iter().any(|s| s.entry.id == h.id))
            };
            resolvable(&heads, &delivered)
        };
        let mut moved_any = false;
        for cycle in to_resolve {
            let head = &self.schedules[cycle[0]]
                .front()
                .expect("looped partitions have heads")
                .entry;
            let (id, prediction) = (head.id, head.prediction.clone());
            for q in prediction.partitions() {
                let qi = q.0 as usize;
                // Every partition of the request is fixed, hence idle.
                assert!(self.busy[qi].is_none(), "a fixed partition is idle");
                let at = self.schedules[qi]
                    .iter()
                    .position(|s| s.entry.id == id)
                    .expect("resolvable only once delivered everywhere");
                let slot = self.schedules[qi].remove(at).expect("found above");
                self.schedules[qi].push_front(slot);
            }
            debug_assert!(self.ready(prediction.exec_partition().0 as usize));
            self.stats.cycles_resolved += 1;
            self.log.push(LogEvent::Resolved {
                moved: id,
                cycle: cycle.iter().map(|&q| PartitionId(q as u16)).collect(),
            });
            self.generation += 1;
            moved_any = true;
        }
        moved_any
    }

    #[cfg(any(test, feature = "skip-sync-wait-for-tests"))]
    fn hand_out_alone(&mut self, i: usize) -> Job<T> {
        let slot = self.schedules[i].front().expect("head");
        let (id, prediction, payload, pos) = (
            slot.entry.id,
            slot.entry.prediction.clone(),
            slot.entry.payload.clone(),
            slot.pos,
        );
        self.busy[i] = Some(id);
        let p = PartitionId(i as u16);
        self.ran_early.push(id);
        self.stats.executed += 1;
        self.stats.cross_border += 1;
        self.log.push(LogEvent::Executed {
            id,
            consumed: vec![(p, pos)],
        });
        self.generation += 1;
        Job {
            id,
            partition: p,
            prediction,
            payload,
            position: pos,
            consumed: vec![(p, pos)],
        }
    }

    /// With the fault on, a SYNC whose EXEC already ran is just dropped.
    #[cfg(any(test, feature = "skip-sync-wait-for-tests"))]
    fn release_early_sync(&mut self, i: usize) -> bool {
        let Some(head) = self.schedules[i].front() else {
            return false;
        };
        let id = head.entry.id;
        if head.entry.prediction.kind_in(PartitionId(i as u16)) != Some(EntryKind::CrossBorderSync) {
            return false;
        }
        if !self.ran_early.contains(&id) {
            return false;
        }
        if self.busy.contains(&Some(id)) {
            return false;
        }
        let slot = self.schedules[i].pop_front().expect("head");
        self.log.push(LogEvent::Released {
            partition: PartitionId(i as u16),
            position: slot.pos,
        });
        self.generation += 1;
        true
    }
}
