//! The shared half of the parallel executor: CBASE's parallelizer (the
//! dependency graph) behind one lock, and the worker threads that draw ready
//! requests from it (CBASE §5: "a pool of worker threads each draws a request
//! out of the parallelizer, executes it on the application state machine, and
//! informs the parallelizer of request completion").
//!
//! Workers never touch the client table or the result list: they report
//! completions in `done`, and the executor front (the thread that submits)
//! folds them in. So every exactly-once decision stays on the front, in
//! delivery order.

use crate::sync::{Condvar, Mutex, MutexGuard};
use bytes::Bytes;
use chorus_core::{ClientId, RequestSeq, Seq};
use chorus_exec::{DependencyGraph, ExecContext, NodeId, ResultsWaker, Service};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// What a worker runs.
pub(crate) enum Task {
    /// A delivered request admitted as fresh by the client table.
    Ordered {
        op: Bytes,
        ctx: ExecContext,
        few_replies: bool,
    },
    /// A read-only fast-path operation; its result goes to `read_only[token]`.
    ReadOnly { op: Bytes, ctx: ExecContext, token: u64 },
}

/// A completed ordered request, waiting for the front to fold it in.
pub(crate) struct Done {
    pub client: ClientId,
    pub request_seq: RequestSeq,
    pub delivered_at: Seq,
    pub result: Bytes,
    pub few_replies: bool,
}

pub(crate) struct Sched {
    pub graph: DependencyGraph<Task>,
    pub done: Vec<Done>,
    pub read_only: BTreeMap<u64, Bytes>,
    pub next_token: u64,
    pub shutdown: bool,
    /// A service call panicked: the state is unknown, the executor stops.
    pub failure: Option<String>,
    /// Workers blocked on `work`, and front calls blocked on `progress`:
    /// a condvar is only signalled when someone waits (a signal is a syscall).
    pub idle_workers: usize,
    pub front_waiting: usize,
    /// Told when `done` goes from empty to non-empty (see `ResultsWaker`).
    pub waker: Option<ResultsWaker>,
    /// Moving average of one service call, in nanoseconds: decides whether
    /// the front runs ready work itself (see `INLINE_BUDGET_NS`).
    pub avg_exec_ns: u64,
}

/// Ready work estimated below this is run by the front itself right after
/// `submit`, instead of waking a worker and later the front again: for cheap
/// operations (null, kv) the two thread hops cost more than the work. The
/// estimate starts pessimistic, so slow services are never run inline.
pub(crate) const INLINE_BUDGET_NS: u64 = 50_000;
const AVG_EXEC_NS_INITIAL: u64 = 1_000_000;

impl Sched {
    /// Fold a measured chunk into the moving average (weight 1/8).
    pub fn observe(&mut self, ops: usize, elapsed: std::time::Duration) {
        if ops == 0 {
            return;
        }
        let per_op = (elapsed.as_nanos() / ops as u128).min(u128::from(u64::MAX / 8)) as u64;
        self.avg_exec_ns = (self.avg_exec_ns.saturating_mul(7) + per_op) / 8;
    }

    /// Is the ready work cheap enough for the front to run now?
    pub fn inline_worthy(&self) -> bool {
        let ready = self.graph.ready_len() as u64;
        ready > 0 && self.graph.has_ready() && ready.saturating_mul(self.avg_exec_ns) <= INLINE_BUDGET_NS
    }

    /// Record a finished task (the graph node was handed out to the caller).
    pub fn complete(&mut self, id: NodeId, task: Task, result: Bytes) {
        self.graph
            .remove(id)
            .expect("a handed-out request is removed once, by whoever ran it");
        match task {
            Task::Ordered { ctx, few_replies, .. } => self.done.push(Done {
                client: ctx.client,
                request_seq: ctx.request_seq,
                delivered_at: ctx.seq,
                result,
                few_replies,
            }),
            Task::ReadOnly { token, .. } => {
                self.read_only.insert(token, result);
            }
        }
    }
}

/// Hand out up to `max` ready requests, oldest first (CBASE fairness).
pub(crate) fn take_ready(g: &mut Sched, chunk: &mut Vec<(NodeId, Task)>, max: usize) {
    while chunk.len() < max {
        match g.graph.next_ready() {
            Some(item) => chunk.push(item),
            None => break,
        }
    }
}

/// Run a handed-out chunk on the calling thread without the lock, then
/// record it; returns the lock again. Requests handed out together are all
/// ready, so none conflicts with another (or with anything running): any
/// order gives the same result. Also says whether `done` was empty just
/// before these results went in (the edge the results waker fires on).
pub(crate) fn run_chunk<'a>(
    shared: &'a Shared,
    g: MutexGuard<'a, Sched>,
    chunk: &mut Vec<(NodeId, Task)>,
) -> (MutexGuard<'a, Sched>, bool) {
    drop(g);
    let started = std::time::Instant::now();
    let results: Vec<Bytes> = chunk
        .iter()
        .map(|(_, task)| match task {
            Task::Ordered { op, ctx, .. } | Task::ReadOnly { op, ctx, .. } => shared.service.execute(op, ctx),
        })
        .collect();
    let elapsed = started.elapsed();
    let mut g = shared.lock();
    g.observe(chunk.len(), elapsed);
    let was_empty = g.done.is_empty();
    for ((id, task), result) in chunk.drain(..).zip(results) {
        g.complete(id, task, result);
    }
    (g, was_empty)
}

pub(crate) struct Shared {
    pub sched: Mutex<Sched>,
    /// Workers wait here for a ready request.
    pub work: Condvar,
    /// The front waits here for completions (room in the graph, a barrier,
    /// a read-only result).
    pub progress: Condvar,
    pub service: Arc<dyn Service>,
    /// Worker threads, for sizing the chunks they take.
    pub workers: usize,
}

/// Most requests a worker takes at once.
pub(crate) const CHUNK_MAX: usize = 32;

/// How many ready requests one worker takes: an equal share of what is
/// ready now, so all workers get work when requests are slow (sleep: one
/// each), while cheap requests (null, kv) cost one lock round trip and one
/// wake-up per chunk instead of per request — on a loaded machine those
/// thread hops, not the service, were the parallel executor's cost.
pub(crate) fn chunk_size(ready: usize, workers: usize) -> usize {
    ready.div_ceil(workers.max(1)).clamp(1, CHUNK_MAX)
}

impl Shared {
    pub fn new(service: Arc<dyn Service>, capacity: usize, workers: usize) -> Shared {
        Shared {
            sched: Mutex::new(Sched {
                graph: DependencyGraph::new(capacity),
                done: Vec::new(),
                read_only: BTreeMap::new(),
                next_token: 0,
                shutdown: false,
                failure: None,
                idle_workers: 0,
                front_waiting: 0,
                waker: None,
                avg_exec_ns: AVG_EXEC_NS_INITIAL,
            }),
            work: Condvar::new(),
            progress: Condvar::new(),
            service,
            workers: workers.max(1),
        }
    }

    /// Poisoning is ignored: a panic under the lock is either the front
    /// reporting `failure` (already recorded) or a worker's broken invariant,
    /// which `worker` records as `failure` before it exits.
    pub fn lock(&self) -> MutexGuard<'_, Sched> {
        self.sched.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn wait_progress<'a>(&self, mut g: MutexGuard<'a, Sched>) -> MutexGuard<'a, Sched> {
        g.front_waiting += 1;
        let mut g = self.progress.wait(g).unwrap_or_else(|e| e.into_inner());
        g.front_waiting -= 1;
        g
    }

    fn wait_work<'a>(&self, mut g: MutexGuard<'a, Sched>) -> MutexGuard<'a, Sched> {
        g.idle_workers += 1;
        let mut g = self.work.wait(g).unwrap_or_else(|e| e.into_inner());
        g.idle_workers -= 1;
        g
    }

    pub fn signal_progress(&self, g: &Sched) {
        if g.front_waiting > 0 {
            self.progress.notify_all();
        }
    }

    fn fail(&self, msg: String) {
        let mut g = self.lock();
        g.failure.get_or_insert(msg);
        self.work.notify_all();
        self.progress.notify_all();
    }

    /// After inserting: wake one worker if something can run.
    pub fn wake_worker(&self, g: &Sched) {
        if g.idle_workers > 0 && g.graph.has_ready() {
            self.work.notify_one();
        }
    }
}

/// A worker thread: run the loop; if anything panics (the service, or a
/// broken invariant), record it so the front stops instead of waiting forever.
pub(crate) fn worker(shared: Arc<Shared>) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| worker_loop(&shared))) {
        let msg = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic".into());
        shared.fail(msg);
    }
}

fn worker_loop(shared: &Shared) {
    let mut chunk: Vec<(NodeId, Task)> = Vec::with_capacity(CHUNK_MAX);
    let mut g = shared.lock();
    loop {
        if g.shutdown || g.failure.is_some() {
            return;
        }
        let share = chunk_size(g.graph.ready_len(), shared.workers);
        take_ready(&mut g, &mut chunk, share);
        if chunk.is_empty() {
            g = shared.wait_work(g);
            continue;
        }
        // Chain the wake-up: another worker takes the next ready requests.
        shared.wake_worker(&g);
        let (guard, was_empty) = run_chunk(shared, g, &mut chunk);
        g = guard;
        shared.signal_progress(&g);
        // Edge-triggered: the front drains everything at once, so one wake
        // per drain is enough. Called without the lock (the waker takes the
        // driving thread's queue lock).
        if was_empty && !g.done.is_empty() && g.front_waiting == 0 {
            if let Some(waker) = g.waker.clone() {
                drop(g);
                waker();
                g = shared.lock();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_share_ready_work_among_workers() {
        assert_eq!(chunk_size(0, 4), 1);
        assert_eq!(chunk_size(1, 64), 1);
        assert_eq!(chunk_size(64, 64), 1);
        assert_eq!(chunk_size(50, 4), 13);
        assert_eq!(chunk_size(10_000, 1), CHUNK_MAX);
        assert_eq!(chunk_size(5, 0), 5);
    }
}
