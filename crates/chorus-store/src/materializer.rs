//! Bringing the write-ahead log into the tables on a thread of its own, so
//! that the replica's core thread never waits for a B-tree transaction (or
//! its fsyncs) in the normal case: it writes a frame, at most fsyncs it, and
//! hands a full segment's records over here (issue 13 item 2: one write and
//! at most one fdatasync per round on the hot path).
//!
//! At most one job is in flight. A hand-over the append count or size makes
//! due meanwhile is put off (the writer keeps appending to its segment)
//! until the log is `DEFER_HAND_OVER_FACTOR` times past those thresholds; a
//! checkpoint's, or one that far behind, waits for the job: that bounds
//! memory at two segments' records (the pending one up to that factor
//! larger) and is the back-pressure when the disk cannot keep up.

use crate::error::{Result, StoreError};
use crate::schema::Layout;
use crate::store::commit_to_tables;
use crate::wal::Wal;
use crate::writer::{SkipCounts, WriteState};
use chorus_order::PersistRecord;
use redb::Database;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;

/// The database, shared by the store (reads, rare writes while no job is in
/// flight) and the materializer (its commits); the write lock is taken only
/// to compact the file (redb needs `&mut` for that).
pub(crate) type SharedDb = Arc<RwLock<Database>>;

/// Records to commit, the state to commit them on, and the segment the log
/// continues in (recorded in the same transaction).
pub(crate) struct Job {
    pub records: Vec<PersistRecord>,
    pub state: WriteState,
    pub next_segment: u64,
}

/// What a job did: the new state, what it skipped, whether it compacted.
pub(crate) type Done = Result<(WriteState, SkipCounts, bool)>;

pub(crate) struct Materializer {
    jobs: Option<SyncSender<Job>>,
    done: Receiver<Done>,
    thread: Option<JoinHandle<()>>,
    in_flight: bool,
}

/// What the thread needs besides its jobs.
pub(crate) struct Context {
    pub db: SharedDb,
    pub db_path: PathBuf,
    pub data_dir: PathBuf,
    pub layout: Layout,
    pub prune_at_stable: bool,
}

/// The materializer's nice value (Linux: per thread). Its work is off the
/// protocol's path (the log already holds every record), but its bursts at
/// each stable checkpoint (one redb transaction for the whole interval, at
/// the same moment on every replica) took the CPU from the pillars when the
/// machine was busy: at half of peak on dev-2c, p95 12.4–12.9 ms → 9.0–9.9
/// ms with 10 (BENCHMARKS.md 2026-11-28 (night)). Not 19: a hand-over at a
/// checkpoint waits for the previous job, and at 10 the thread still gets
/// ~1 % of a saturated two-core machine per eight busy threads (CFS weights
/// 110 vs 1024), more than the ~18 ms a second it needs at peak.
const MATERIALIZER_NICE: i32 = 10;

/// Lower the calling thread's scheduling priority to `MATERIALIZER_NICE`;
/// best effort (a failure leaves it where it was, and is logged).
fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `gettid` has no preconditions; `setpriority` on our own
        // thread id changes only that thread's nice value.
        let rc = unsafe {
            let tid = libc::gettid();
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, MATERIALIZER_NICE)
        };
        if rc != 0 {
            tracing::warn!(
                error = %std::io::Error::last_os_error(),
                "store: could not lower the materializer's priority"
            );
        }
    }
}

impl Materializer {
    pub fn spawn(ctx: Context) -> Result<Materializer> {
        let (jobs, job_rx) = mpsc::sync_channel::<Job>(1);
        let (done_tx, done) = mpsc::sync_channel::<Done>(1);
        let thread = std::thread::Builder::new()
            .name("store-materialize".into())
            .spawn(move || {
                lower_this_threads_priority();
                run(ctx, job_rx, done_tx)
            })
            .map_err(|source| StoreError::Io {
                path: PathBuf::from("store-materialize thread"),
                source,
            })?;
        Ok(Materializer {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
            in_flight: false,
        })
    }

    /// A job was handed over and its outcome not collected yet.
    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// Hand a job over; the previous one must have been collected.
    pub fn submit(&mut self, job: Job) -> Result<()> {
        assert!(!self.in_flight, "one materialization at a time");
        let sent = match &self.jobs {
            Some(j) => j.send(job).is_ok(),
            None => false,
        };
        if !sent {
            return Err(StoreError::Failed {
                reason: "the materializer thread is gone".into(),
            });
        }
        self.in_flight = true;
        Ok(())
    }

    /// The in-flight job's outcome: waits for it if `block`, else `None`
    /// while it runs. `None` too when nothing is in flight.
    pub fn collect(&mut self, block: bool) -> Option<Done> {
        if !self.in_flight {
            return None;
        }
        let got = if block {
            self.done.recv().map_err(|_| TryRecvError::Disconnected)
        } else {
            self.done.try_recv()
        };
        match got {
            Ok(done) => {
                self.in_flight = false;
                Some(done)
            }
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => {
                self.in_flight = false;
                Some(Err(StoreError::Failed {
                    reason: "the materializer thread stopped (panicked?)".into(),
                }))
            }
        }
    }
}

#[cfg(test)]
impl Materializer {
    /// A materializer whose in-flight job already ended with `done`.
    pub fn finished_with(done: Done) -> Materializer {
        let (done_tx, done_rx) = mpsc::sync_channel::<Done>(1);
        done_tx.send(done).expect("room for one outcome");
        Materializer {
            jobs: None,
            done: done_rx,
            thread: None,
            in_flight: true,
        }
    }
}

impl Drop for Materializer {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop.
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(ctx: Context, jobs: Receiver<Job>, done: SyncSender<Done>) {
    let mut compacted_bytes = 0u64;
    while let Ok(job) = jobs.recv() {
        let out = one_job(&ctx, job, &mut compacted_bytes);
        if done.send(out).is_err() {
            return;
        }
    }
}

fn one_job(ctx: &Context, mut job: Job, compacted_bytes: &mut u64) -> Done {
    drop_superseded(ctx.layout, &mut job.records);
    let stable_before = job.state.stable_seq;
    let (state, skipped) = {
        let db = ctx.db.read().unwrap_or_else(|p| p.into_inner());
        commit_to_tables(
            &db,
            ctx.layout,
            job.state,
            ctx.prune_at_stable,
            &job.records,
            job.next_segment,
        )?
    };
    // Durable in the tables: the segments before `next_segment` are done.
    Wal::delete_below(&ctx.data_dir, job.next_segment);
    let compacted = state.stable_seq != stable_before && compact_if_bloated(ctx, compacted_bytes);
    Ok((state, skipped, compacted))
}

/// `Accepted` and `Prepared` records for positions below a stable checkpoint
/// that comes later in the same job: the checkpoint's truncation would
/// delete them in the same transaction (PBFT §4.3), so writing them into the
/// protocol-log table first is wasted work (most of a job's bytes: each
/// `Accepted` carries its batch). `Decided` records stay: they extend the
/// ledger's hash chain even when pruned right after.
fn drop_superseded(layout: Layout, records: &mut Vec<PersistRecord>) {
    let Some(last_stable) = records
        .iter()
        .rposition(|r| matches!(r, PersistRecord::Stable { .. }))
    else {
        return;
    };
    let PersistRecord::Stable { cert, .. } = &records[last_stable] else {
        unreachable!("found as Stable above");
    };
    let stable = cert.seq.0;
    let mut i = 0;
    records.retain(|r| {
        let before = i < last_stable;
        i += 1;
        let seq = match r {
            PersistRecord::Accepted { lane, slot, .. } => layout.seq_of(*lane, *slot).ok(),
            PersistRecord::Prepared { cert } => layout.seq_of(cert.lane, cert.slot).ok(),
            _ => None,
        };
        !(before && seq.is_some_and(|s| s < stable))
    });
}

/// redb reuses freed pages but never gives them back to the file system;
/// after a burst (a catch-up writing a large snapshot and many cells, then
/// truncating them) the file would stay at its peak for ever. At a stable
/// checkpoint, once the file has doubled since the last compaction, rewrite
/// it to its live size (amortised: each compaction follows at least as many
/// bytes of growth as it rewrites).
fn compact_if_bloated(ctx: &Context, compacted_bytes: &mut u64) -> bool {
    let Ok(bytes) = std::fs::metadata(&ctx.db_path).map(|m| m.len()) else {
        return false;
    };
    if bytes < crate::store::COMPACT_MIN_BYTES.max(compacted_bytes.saturating_mul(2)) {
        return false;
    }
    // The write lock waits out the store's reads (each holds the read lock
    // for as long as its transaction); every commit of the tables is
    // durable, so nothing else pins old pages.
    let mut db = ctx.db.write().unwrap_or_else(|p| p.into_inner());
    match db.compact() {
        Ok(_) => {
            *compacted_bytes = std::fs::metadata(&ctx.db_path).map_or(bytes, |m| m.len());
            tracing::debug!(before = bytes, after = *compacted_bytes, "store compacted");
            true
        }
        Err(e) => {
            // Nothing lost: the file stays large, and the next checkpoint
            // tries again.
            tracing::warn!(error = %e, "store compaction failed");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_records::{accepted, decided, stable};
    use chorus_core::{LaneId, View};

    /// Applies `records` (all of them, or without the superseded ones) to a
    /// fresh database; returns what recovery would load and the chain.
    fn applied(
        records: &[PersistRecord],
        filter: bool,
    ) -> (Vec<PersistRecord>, crate::schema::ChainState, Option<u64>) {
        let layout = Layout { lanes: 1 };
        let d = tempfile::tempdir().unwrap();
        let db = Database::create(d.path().join("t.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        let (state, _, _) = crate::store::init_or_check(&txn, layout).unwrap();
        txn.commit().unwrap();
        let mut records = records.to_vec();
        if filter {
            drop_superseded(layout, &mut records);
        }
        let (state, _) = commit_to_tables(&db, layout, state, true, &records, 1).unwrap();
        let txn = db.begin_read().unwrap();
        crate::read::verify_ledger(&txn, layout, state.chain).unwrap();
        (
            crate::read::load(&txn, layout).unwrap(),
            state.chain,
            state.stable_seq,
        )
    }

    /// Whatever the order of a job's records (several checkpoints, obsolete
    /// ones, records before and after them), skipping the superseded ones
    /// leaves what applying all of them leaves.
    #[test]
    fn dropping_superseded_records_changes_nothing_recovery_sees() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for _ in 0..150 {
            let records: Vec<PersistRecord> = (0..30)
                .map(|_| match next(8) {
                    0..=2 => accepted(next(12)),
                    3..=4 => decided(next(12)),
                    5 => PersistRecord::View {
                        lane: LaneId(0),
                        view: View(next(4)),
                    },
                    _ => stable(next(12)),
                })
                .collect();
            assert_eq!(applied(&records, false), applied(&records, true), "{records:?}");
        }
    }

    #[test]
    fn only_records_a_later_checkpoint_in_the_job_covers_are_dropped() {
        let layout = Layout { lanes: 1 };
        let view = PersistRecord::View {
            lane: LaneId(0),
            view: View(1),
        };
        let mut records = vec![
            accepted(0),
            accepted(1),
            view.clone(),
            accepted(2),
            stable(2),
            accepted(1),
            accepted(3),
        ];
        drop_superseded(layout, &mut records);
        // Below 2 and before the checkpoint: dropped. After it, or at or
        // above it: kept (the writer counts the late one as obsolete).
        assert_eq!(
            records,
            vec![view, accepted(2), stable(2), accepted(1), accepted(3)]
        );
        let mut none = vec![accepted(0)];
        drop_superseded(layout, &mut none);
        assert_eq!(none, vec![accepted(0)]);
    }

    /// The materializer runs at `MATERIALIZER_NICE` (Linux): every
    /// `store-materialize` thread of this test process does once it has
    /// started, whichever test opened its store.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_materializer_runs_at_a_lower_priority() {
        let nices = || -> Vec<i32> {
            let mut out = Vec::new();
            for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
                let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
                if comm.trim() != "store-materiali" {
                    continue;
                }
                let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
                // Field 19 is the nice value; fields from 3 on follow the ")".
                if let Some((_, rest)) = stat.rsplit_once(") ") {
                    out.push(rest.split(' ').nth(16).unwrap().parse().unwrap());
                }
            }
            out
        };
        let d = tempfile::tempdir().unwrap();
        let _store = crate::Store::open(d.path(), crate::FsyncPolicy::Off, 1).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            // A thread takes its name once it runs: until then it has none here.
            let n = nices();
            if !n.is_empty() && n.iter().all(|&x| x == MATERIALIZER_NICE) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "nice values {n:?}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
