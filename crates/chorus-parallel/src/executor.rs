//! The CBASE parallel executor (CBASE §4–§5): the front that the runtime and
//! the simulator drive through [`Executor`], a dependency graph, and a pool of
//! worker threads.
//!
//! Determinism. Everything that decides a result is done on the front, in
//! delivery order: the client table admits each request when it is submitted
//! (fresh, duplicate or rejected), and the graph orders every pair of
//! conflicting requests as the delivery order does (CBASE's partial-order
//! property, §4.1). Requests that do not conflict commute (CBASE §4.1 safety
//! proof), so results, replies and the state digest equal those of
//! [`chorus_exec::SequentialExecutor`] on the same delivery order; only the
//! order in which results come out differs.
//!
//! A duplicate of a request that is still executing waits for the original's
//! reply (it is what sequential execution would have cached by then).
//!
//! Bounds and back-pressure: the graph holds at most `graph_capacity` pending
//! requests, and duplicates waiting for their original count against the same
//! budget; `submit` blocks until there is room. `checkpoint`, `restore` and
//! `state_digest` first wait until everything submitted has executed — a
//! barrier exactly at `next_seq`, since only the front submits (CBASE's
//! `sync()`).
//!
//! The caller must drain results regularly: they are kept until drained.

use crate::scheduler::{run_chunk, take_ready, worker, Done, Sched, Shared, Task, CHUNK_MAX};
use crate::sync::{Builder, JoinHandle, MutexGuard};
use bytes::Bytes;
use chorus_core::{Batch, ClientId, Digest, RequestSeq, Seq};
use chorus_exec::{
    encode_snapshot, install_verified, read_only_context, rejected_result, restore_snapshot, state_digest,
    Admission, CachedReply, ClientTable, ExecCheckpoint, ExecContext, ExecError, ExecResult, Executor,
    ResultsWaker, Service, TableStats,
};
use std::collections::BTreeMap;
use std::sync::Arc;

pub struct ParallelExecutor {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    table: ClientTable,
    next_seq: Seq,
    results: Vec<ExecResult>,
    /// Duplicates of still-executing requests: the positions they were delivered at.
    waiters: BTreeMap<(ClientId, RequestSeq), Vec<Seq>>,
    waiting: usize,
    capacity: usize,
    /// `Some` in an `rcc` cluster (`with_switch_policy`).
    switch_policy: Option<chorus_core::SwitchPolicy>,
}

impl ParallelExecutor {
    /// `workers` threads (at least 1), a graph of `graph_capacity` pending
    /// requests (at least 1), and the client table's in-flight window.
    pub fn new(
        service: Arc<dyn Service>,
        workers: usize,
        graph_capacity: usize,
        max_inflight_per_client: u32,
    ) -> ParallelExecutor {
        let capacity = graph_capacity.max(1);
        let shared = Arc::new(Shared::new(service, capacity, workers));
        let workers = (0..workers.max(1))
            .map(|i| {
                let s = shared.clone();
                Builder::new()
                    .name(format!("chorus-exec-{i}"))
                    .spawn(move || worker(s))
                    .expect("spawning an executor worker thread")
            })
            .collect();
        ParallelExecutor {
            shared,
            workers,
            table: ClientTable::new(max_inflight_per_client),
            next_seq: Seq(0),
            results: Vec::new(),
            waiters: BTreeMap::new(),
            waiting: 0,
            capacity,
            switch_policy: None,
        }
    }

    /// An executor of an `rcc` cluster: RCC §III-E switch requests move
    /// clients between instances (`chorus_exec::switch`).
    pub fn with_switch_policy(mut self, policy: chorus_core::SwitchPolicy) -> ParallelExecutor {
        self.switch_policy = Some(policy);
        self
    }

    /// Start at `next_seq` instead of 0.
    pub fn starting_at(mut self, next_seq: Seq) -> ParallelExecutor {
        self.next_seq = next_seq;
        self
    }

    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Requests submitted and not yet executed (graph nodes).
    pub fn pending(&self) -> usize {
        self.shared.lock().graph.len()
    }

    pub fn client_table(&self) -> &ClientTable {
        &self.table
    }

    pub fn stats(&self) -> &TableStats {
        self.table.stats()
    }

    fn check_failure(g: &Sched) {
        if let Some(msg) = &g.failure {
            panic!("a service call panicked in an executor worker: {msg}");
        }
    }

    /// Fold completions reported by the workers into the table and results.
    fn absorb(&mut self, done: Vec<Done>) {
        for d in done {
            self.table.complete(d.client, d.request_seq, d.result.clone());
            // Admitted through `admit_request`, so the table knows the digest.
            let request = self
                .table
                .request_digest(d.client, d.request_seq)
                .unwrap_or_default();
            if let Some(at) = self.waiters.remove(&(d.client, d.request_seq)) {
                self.waiting -= at.len();
                for delivered_at in at {
                    self.results.push(ExecResult {
                        client: d.client,
                        request_seq: d.request_seq,
                        delivered_at,
                        result: d.result.clone(),
                        duplicate: true,
                        request,
                        few_replies: d.few_replies,
                    });
                }
            }
            self.results.push(ExecResult {
                client: d.client,
                request_seq: d.request_seq,
                delivered_at: d.delivered_at,
                result: d.result,
                duplicate: false,
                request,
                few_replies: d.few_replies,
            });
        }
    }

    /// Wait, absorbing completions, until `ok(graph pending, waiting)` holds.
    /// Returns the guard so the caller can act under the same lock.
    fn wait_until<'a>(
        &mut self,
        shared: &'a Shared,
        ok: impl Fn(usize, usize) -> bool,
    ) -> MutexGuard<'a, Sched> {
        let g = shared.lock();
        self.wait_locked(shared, g, ok)
    }

    /// `wait_until` for a caller that already holds the lock. Before
    /// sleeping it wakes a worker, since the front may have inserted
    /// requests it has not announced yet.
    fn wait_locked<'a>(
        &mut self,
        shared: &'a Shared,
        mut g: MutexGuard<'a, Sched>,
        ok: impl Fn(usize, usize) -> bool,
    ) -> MutexGuard<'a, Sched> {
        loop {
            Self::check_failure(&g);
            let done = std::mem::take(&mut g.done);
            self.absorb(done);
            if ok(g.graph.len(), self.waiting) {
                return g;
            }
            shared.wake_worker(&g);
            g = shared.wait_progress(g);
        }
    }

    /// CBASE `sync()`: wait until everything submitted has executed.
    fn barrier(&mut self) {
        let shared = self.shared.clone();
        let g = self.wait_until(&shared, |pending, waiting| pending == 0 && waiting == 0);
        debug_assert!(g.done.is_empty());
        drop(g);
        assert!(self.waiters.is_empty(), "duplicates outlived their originals");
        assert_eq!(self.table.pending(), 0, "a reply slot is pending at a barrier");
    }

    /// Run ready work on this thread while it is cheap (`Sched::inline_worthy`):
    /// the results are then drained in the same round, with no worker woken
    /// and no poke back. Whoever runs a request, it was handed out by the
    /// graph, so conflicting requests still never overlap.
    fn run_cheap_work<'a>(shared: &'a Shared, mut g: MutexGuard<'a, Sched>) -> MutexGuard<'a, Sched> {
        let mut chunk = Vec::new();
        while g.inline_worthy() {
            take_ready(&mut g, &mut chunk, CHUNK_MAX);
            g = run_chunk(shared, g, &mut chunk).0;
        }
        g
    }

    fn push(&mut self, req: &chorus_core::Request, at: Seq, result: Bytes, duplicate: bool) {
        self.results.push(ExecResult {
            client: req.client,
            request_seq: req.seq,
            delivered_at: at,
            result,
            duplicate,
            request: req.digest(),
            few_replies: req.flags & chorus_core::flags::FEW_REPLIES != 0,
        });
    }
}

impl Executor for ParallelExecutor {
    fn cached_reply(
        &self,
        client: chorus_core::ClientId,
        seq: chorus_core::RequestSeq,
    ) -> Option<bytes::Bytes> {
        self.table.cached_reply(client, seq)
    }

    fn request_digest(
        &self,
        client: chorus_core::ClientId,
        seq: chorus_core::RequestSeq,
    ) -> Option<chorus_core::Digest> {
        self.table.request_digest(client, seq)
    }

    fn reply_lookup(
        &self,
        client: chorus_core::ClientId,
        seq: chorus_core::RequestSeq,
    ) -> chorus_exec::ReplyLookup {
        self.table.lookup(client, seq)
    }

    /// The whole batch is admitted and inserted under one hold of the lock
    /// and the workers are woken once at the end (and whenever the front must
    /// wait for room): per-request lock round trips and wake-ups were what
    /// made the parallel executor slower than the sequential one on cheap
    /// requests (CBASE Fig. 4 asks for at most 5%).
    fn submit(&mut self, seq: Seq, batch: Arc<Batch>) {
        assert_eq!(
            seq, self.next_seq,
            "batches must be submitted in delivery order without gaps"
        );
        let shared = self.shared.clone();
        let capacity = self.capacity;
        let mut g = shared.lock();
        // Issue 17: computed here, in delivery order, not in the workers.
        let time_ms = self.table.agree_time(batch.time_ms);
        for (index, req) in batch.requests.iter().enumerate() {
            let switched = chorus_exec::apply_switch(&mut self.table, self.switch_policy.as_ref(), req, seq);
            match self.table.admit_request(req.client, req.seq, req.digest()) {
                // A system op: touches no service state, completes here.
                Admission::Fresh if switched.is_some() => {
                    let reply = switched.unwrap_or_default();
                    self.table.complete(req.client, req.seq, reply.clone());
                    self.push(req, seq, reply, false);
                }
                Admission::Fresh => {
                    let ctx = ExecContext {
                        seq,
                        index: index as u32,
                        client: req.client,
                        request_seq: req.seq,
                        time_ms,
                    };
                    let access = shared.service.access(&req.op);
                    g = self.wait_locked(&shared, g, |pending, waiting| pending + waiting < capacity);
                    let inserted = g.graph.insert(
                        Task::Ordered {
                            op: req.op.clone(),
                            ctx,
                            few_replies: req.flags & chorus_core::flags::FEW_REPLIES != 0,
                        },
                        &access,
                    );
                    assert!(inserted.is_ok(), "room was checked under the same lock");
                }
                Admission::Duplicate(CachedReply::Ready(reply)) => self.push(req, seq, reply, true),
                Admission::Duplicate(CachedReply::Pending) => {
                    // The original is in the graph or in `done`; only `absorb`
                    // (on this thread) resolves waiters, so none is missed.
                    self.waiters.entry((req.client, req.seq)).or_default().push(seq);
                    self.waiting += 1;
                    g = self.wait_locked(&shared, g, |pending, waiting| pending + waiting <= capacity);
                }
                Admission::Duplicate(CachedReply::Forgotten) => {}
                Admission::Rejected(kind) => self.push(req, seq, rejected_result(kind), false),
            }
        }
        let g = Self::run_cheap_work(&shared, g);
        shared.wake_worker(&g);
        drop(g);
        self.next_seq = seq.next();
    }

    fn drain_results(&mut self, out: &mut Vec<ExecResult>) {
        let done = {
            let mut g = self.shared.lock();
            Self::check_failure(&g);
            std::mem::take(&mut g.done)
        };
        self.absorb(done);
        out.append(&mut self.results);
    }

    fn checkpoint(&mut self) -> ExecCheckpoint {
        self.barrier();
        let service = &*self.shared.service;
        ExecCheckpoint {
            next_seq: self.next_seq,
            state_digest: state_digest(self.next_seq, &self.table, service),
            snapshot: encode_snapshot(&self.table, service),
        }
    }

    fn restore(&mut self, next_seq: Seq, snapshot: &[u8]) -> Result<Digest, ExecError> {
        self.barrier();
        let (table, digest) = restore_snapshot(
            &*self.shared.service,
            next_seq,
            snapshot,
            self.table.max_inflight(),
        )?;
        self.table = table;
        self.next_seq = next_seq;
        Ok(digest)
    }

    fn install(&mut self, next_seq: Seq, snapshot: &[u8], expected: Digest) -> Result<Digest, ExecError> {
        self.barrier();
        let table = install_verified(
            &*self.shared.service,
            next_seq,
            snapshot,
            expected,
            self.table.max_inflight(),
        )?;
        self.table = table;
        self.next_seq = next_seq;
        Ok(expected)
    }

    /// Runs through the graph like an ordered request (but without a place
    /// in the order), so it never overlaps a conflicting write: the service's
    /// "never two conflicting operations at once" promise holds here too.
    fn execute_read_only(&self, op: &[u8]) -> Option<Bytes> {
        let service = &*self.shared.service;
        if !service.is_read_only(op) {
            return None;
        }
        let access = service.access(op);
        let ctx = read_only_context(self.next_seq, self.table.agreed_time());
        let shared = &*self.shared;
        let mut g = shared.lock();
        while g.graph.is_full() {
            Self::check_failure(&g);
            g = shared.wait_progress(g);
        }
        let token = g.next_token;
        g.next_token += 1;
        let task = Task::ReadOnly {
            op: Bytes::copy_from_slice(op),
            ctx,
            token,
        };
        let id = match g.graph.insert(task, &access) {
            Ok(id) => id,
            Err(_) => unreachable!("room was checked under the same lock"),
        };
        // Nothing pending conflicts with the read (it is ready): run it here.
        // It stays in the graph while it runs, so no conflicting write can be
        // handed out meanwhile. This saves two thread hops per read, which is
        // most of a read's cost on a loaded machine.
        if let Some(Task::ReadOnly { op, ctx, .. }) = g.graph.take(id) {
            drop(g);
            let result = service.execute(&op, &ctx);
            let mut g = shared.lock();
            g.graph
                .remove(id)
                .expect("the read taken by this thread is removed once, by it");
            shared.wake_worker(&g);
            shared.signal_progress(&g);
            return Some(result);
        }
        shared.wake_worker(&g);
        loop {
            Self::check_failure(&g);
            if let Some(r) = g.read_only.remove(&token) {
                return Some(r);
            }
            g = shared.wait_progress(g);
        }
    }

    fn next_seq(&self) -> Seq {
        self.next_seq
    }

    fn set_switch_policy(&mut self, policy: chorus_core::SwitchPolicy) -> bool {
        self.switch_policy = Some(policy);
        true
    }

    fn state_digest(&mut self) -> Digest {
        self.barrier();
        state_digest(self.next_seq, &self.table, &*self.shared.service)
    }

    fn set_results_waker(&mut self, waker: ResultsWaker) {
        self.shared.lock().waker = Some(waker);
    }
}

impl Drop for ParallelExecutor {
    fn drop(&mut self) {
        {
            let mut g = self.shared.lock();
            g.shutdown = true;
            self.shared.work.notify_all();
        }
        for w in self.workers.drain(..) {
            // A worker that panicked outside the service call has nothing to tell us.
            let _ = w.join();
        }
    }
}
