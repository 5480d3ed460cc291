//! Request cycles (SAREK Algorithm 3) with one worker thread per partition
//! and one delivery thread per partition stream, under `shuttle`'s
//! exhaustive (DFS), randomised and PCT schedulers. In every interleaving the
//! cycle must be resolved the same way: the same effective schedules, the
//! same replies and state digest as the single-threaded canonical run, every
//! request executed exactly once, and the checker satisfied. The service
//! yields inside every call and panics if two running requests share a key.

use super::*;
use shuttle::sync::{Condvar, Mutex as SMutex};
use shuttle::thread;
use std::collections::BTreeSet;

/// [`Kv`] that yields to the scheduler inside every call and checks that no
/// two running calls touch the same key.
#[derive(Default)]
struct CheckedKv {
    inner: Kv,
    running: SMutex<BTreeSet<Bytes>>,
    /// Off for the exhaustive search: each yield multiplies its state space.
    yields: bool,
    /// Panic when two running requests share a key (off only for the
    /// faulty scheduler, whose run the checker must catch by itself).
    strict: bool,
}

impl CheckedKv {
    fn keys(&self, op: &[u8]) -> Vec<Bytes> {
        match self.inner.access(op) {
            Access::Keys { reads, writes } => reads.into_iter().chain(writes).collect(),
            Access::Everything => unreachable!("the test service declares keys"),
        }
    }
}

impl Service for CheckedKv {
    fn execute(&self, op: &[u8], ctx: &ExecContext) -> Bytes {
        let keys = self.keys(op);
        {
            let mut r = self.running.lock().unwrap();
            for k in &keys {
                let fresh = r.insert(k.clone());
                assert!(fresh || !self.strict, "two running requests share key {k:?}");
            }
        }
        if self.yields {
            thread::yield_now();
        }
        let out = self.inner.execute(op, ctx);
        if self.yields {
            thread::yield_now();
        }
        let mut r = self.running.lock().unwrap();
        for k in &keys {
            r.remove(k);
        }
        out
    }
    fn access(&self, op: &[u8]) -> Access {
        self.inner.access(op)
    }
    fn snapshot(&self) -> Bytes {
        self.inner.snapshot()
    }
    fn restore(&self, s: &[u8]) -> Result<(), String> {
        self.inner.restore(s)
    }
}

struct Shared {
    sched: RequestScheduler<Arc<Request>>,
    delivering: usize,
    results: Vec<PartitionedResult>,
}

/// Algorithm 2's loop for partition `p`, the scheduler behind one mutex (the
/// paper's lock around the request scheduler).
fn worker(p: PartitionId, shared: &(SMutex<Shared>, Condvar), svc: &CheckedKv) {
    let (m, cv) = shared;
    let mut g = m.lock().unwrap();
    loop {
        let before = g.sched.generation();
        match g.sched.next(p) {
            Step::Run(job) => {
                drop(g);
                let r = run_job(svc, &job);
                g = m.lock().unwrap();
                g.sched.complete(&job);
                g.results.push(r);
                cv.notify_all();
            }
            Step::Wait => {
                if g.sched.generation() != before {
                    cv.notify_all();
                    continue;
                }
                if g.delivering == 0 && g.sched.is_idle() {
                    cv.notify_all();
                    return;
                }
                g = cv.wait(g).unwrap();
            }
        }
    }
}

/// One threaded run: K workers, and K delivery threads (one per lane) if
/// `concurrent_delivery`, else everything is delivered before they start
/// (small enough for shuttle's exhaustive search).
fn threaded_run(s: &Scenario, concurrent_delivery: bool) -> Outcome {
    threaded_run_with(s, concurrent_delivery, false)
}

fn threaded_run_with(s: &Scenario, concurrent_delivery: bool, skip_sync: bool) -> Outcome {
    let svc = Arc::new(CheckedKv {
        yields: concurrent_delivery,
        strict: !skip_sync,
        ..CheckedKv::default()
    });
    let k = s.k;
    let shared = Arc::new((
        SMutex::new(Shared {
            sched: {
                let mut sc = RequestScheduler::new(k, 64);
                sc.set_skip_sync_wait(skip_sync);
                sc
            },
            delivering: if concurrent_delivery { k as usize } else { 0 },
            results: Vec::new(),
        }),
        Condvar::new(),
    ));
    let mut handles = Vec::new();
    for p in 0..k {
        let (shared, svc) = (shared.clone(), svc.clone());
        let entries: Vec<Entry<Arc<Request>>> = s.streams[p as usize]
            .iter()
            .map(|&i| entry_for(&*svc, k, s.reqs[i].clone()))
            .collect();
        if !concurrent_delivery {
            let mut g = shared.0.lock().unwrap();
            for e in entries {
                g.sched.deliver(PartitionId(p), e).unwrap();
            }
            continue;
        }
        handles.push(thread::spawn(move || {
            let (m, cv) = &*shared;
            for e in entries {
                m.lock().unwrap().sched.deliver(PartitionId(p), e).unwrap();
                cv.notify_all();
            }
            m.lock().unwrap().delivering -= 1;
            cv.notify_all();
        }));
    }
    for p in 0..k {
        let (shared, svc) = (shared.clone(), svc.clone());
        handles.push(thread::spawn(move || worker(PartitionId(p), &shared, &svc)));
    }
    for h in handles {
        h.join().unwrap();
    }
    let mut g = shared.0.lock().unwrap();
    let mut out = Outcome {
        log: vec![],
        results: std::mem::take(&mut g.results),
        digest: svc.state_digest(),
    };
    g.sched.drain_log(&mut out.log);
    out
}

/// The body every schedule runs: compare with the canonical run.
fn same_as_canonical(s: &Scenario, concurrent_delivery: bool) {
    let canonical = run_canonical(s);
    let o = threaded_run(s, concurrent_delivery);
    assert_serially_equivalent(s, &o);
    assert_eq!(
        effective_schedules(s.k, &o.log),
        effective_schedules(s.k, &canonical.log)
    );
    assert_eq!(o.digest, canonical.digest);
    let sorted = |o: &Outcome| {
        let mut r = o.results.clone();
        r.sort();
        r
    };
    assert_eq!(sorted(&o), sorted(&canonical));
}

#[test]
fn two_partition_cycle_every_interleaving() {
    let s = Arc::new(alg2::two_cycle());
    shuttle::check_dfs(move || same_as_canonical(&s, false), None);
}

#[test]
fn two_partition_cycle_with_concurrent_delivery() {
    let s = Arc::new(alg2::two_cycle());
    let s2 = s.clone();
    shuttle::check_random(move || same_as_canonical(&s, true), 1500);
    shuttle::check_pct(move || same_as_canonical(&s2, true), 1500, 3);
}

#[test]
fn three_partition_cycle_random_and_pct() {
    let s = Arc::new(alg2::three_cycle());
    let s2 = s.clone();
    shuttle::check_random(move || same_as_canonical(&s, true), 1500);
    shuttle::check_pct(move || same_as_canonical(&s2, true), 1500, 3);
}

/// Cycles mixed with single-partition requests behind the SYNCs:
/// 0: [R0(0,1), R5, R2(0,2)], 1: [R1(1,2), R3, R0], 2: [R2, R4, R1].
fn mixed() -> Scenario {
    Scenario::new(
        3,
        &[&[0, 1], &[1, 2], &[0, 2], &[1], &[2], &[0]],
        vec![vec![0, 5, 2], vec![1, 3, 0], vec![2, 4, 1]],
    )
}

#[test]
fn cycles_among_single_partition_requests() {
    let s = Arc::new(mixed());
    shuttle::check_random(move || same_as_canonical(&s, true), 1500);
}

/// The harness bites: with the SYNC wait skipped, the checker reports a
/// violation in every schedule.
#[test]
fn skipping_the_sync_wait_is_caught_under_shuttle() {
    let s = Arc::new(Scenario::new(2, &[&[0, 1], &[1]], vec![vec![0], vec![1, 0]]));
    shuttle::check_random(
        move || {
            let o = threaded_run_with(&s, true, true);
            let v = check_serial_order(&s.stream_entries(), &o.log, true).expect_err("the checker must bite");
            assert!(v
                .iter()
                .any(|x| matches!(x, Violation::WrongSubRequests { id, .. } if *id == s.id(0))));
        },
        300,
    );
}
