//! The store: opening (and checking) the database, appending records under the
//! fsync policy, and the read paths the runtime needs.

use crate::error::{Result, StoreError};
use crate::materializer::{Context, Job, Materializer, SharedDb};
use crate::policy::{FsyncPolicy, StoreOptions, LANES_MAX};
use crate::read;
use crate::schema::{
    corrupt, decode, decode_ledger_head, decode_u32, encode, ChainState, Layout, CHAIN, CHECKPOINTS,
    FORMAT_VERSION, FORMAT_VERSION_PRE_ACCEPTED_REF, FORMAT_VERSION_PRE_SEGMENT_START,
    FORMAT_VERSION_PRE_SHA256, FORMAT_VERSION_PRE_TIMEOUT_CERT, FORMAT_VERSION_PRE_WAL, LEDGER, LOG, META,
    META_CHAIN, META_LANES, META_VERSION, META_WAL,
};
use crate::wal::{Damage, Wal};
use crate::writer::{SkipCounts, WriteState, Writer};
use bytes::Bytes;
use chorus_core::{Batch, Cell, CheckpointCert, Digest, Seq};
use chorus_order::PersistRecord;
use redb::{Database, Durability, ReadableTable, ReadableTableMetadata, WriteTransaction};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// The database file inside the replica's data directory.
pub const DB_FILE_NAME: &str = "chorus.redb";

/// Sizes and counters, for metrics and `chorus status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreStats {
    /// Size of the database file.
    pub file_bytes: u64,
    /// Protocol-log entries (records since the stable checkpoint).
    pub log_records: u64,
    /// Decided cells held by the ledger.
    pub ledger_entries: u64,
    /// Stable checkpoints held (at most 2).
    pub checkpoints: u64,
    pub stable_seq: Option<Seq>,
    /// `append` calls written to the log, since open.
    pub appends: u64,
    /// `fdatasync`s of the log, since open (materializations, each a durable
    /// commit of the tables, are counted in `materializations`).
    pub durable_commits: u64,
    /// Appends written but not yet durable (lost by a machine crash).
    pub unsynced_appends: u32,
    /// Records not written to the tables because they carried nothing new,
    /// since open (counted when the write-ahead log reaches the tables).
    pub skipped: SkipCounts,
    /// Times the file was compacted, since open.
    pub compactions: u64,
    /// Bytes of the write-ahead segment files.
    pub wal_bytes: u64,
    /// Appends in the write-ahead log not yet in the tables (`log_records`,
    /// `ledger_entries` and `checkpoints` count the tables only).
    pub wal_pending_appends: u64,
    /// Times the write-ahead log was brought into the tables, since open.
    pub materializations: u64,
    /// Hand-overs put off because the previous one was still being
    /// brought into the tables (the writer did not wait), since open.
    pub deferred_hand_overs: u64,
}

/// Durable storage of one replica (DESIGN §3 "Storage"). Not shared between
/// threads: the runtime owns it and serialises appends.
pub struct Store {
    db: SharedDb,
    path: PathBuf,
    dir: PathBuf,
    /// Every append goes here first (one `write`); the tables follow in bulk.
    wal: Wal,
    /// Records of the current segment, in append order (not in the tables).
    pending: Vec<PersistRecord>,
    pending_appends: u64,
    /// Decided digests among `pending`, by global position: an append that
    /// contradicts one is refused before it reaches the log.
    pending_decided: HashMap<u64, Digest>,
    /// The same for the previous segment while the materializer commits it.
    in_flight_decided: HashMap<u64, Digest>,
    in_flight_appends: u64,
    /// Commits segments' records to the tables off this thread.
    materializer: Materializer,
    materializations: u64,
    deferred_hand_overs: u64,
    /// Set by a failed write, sync or commit after records reached the log:
    /// from then on every call that writes is refused.
    failed: Option<String>,
    opts: StoreOptions,
    layout: Layout,
    state: WriteState,
    unsynced: u32,
    appends: u64,
    durable_commits: u64,
    skipped: SkipCounts,
    compactions: u64,
}

/// Files smaller than this are never compacted (not worth a rewrite).
pub const COMPACT_MIN_BYTES: u64 = 4 << 20;

/// The write-ahead log moves on to a new segment, and the materializer
/// brings the old one into the tables, after this many appends (or at a
/// stable checkpoint, or past `MATERIALIZE_BYTES`, whichever comes first):
/// bounds the records held in memory and the replay after a crash.
pub const MATERIALIZE_EVERY_APPENDS: u64 = 512;
/// ... or once the current segment holds this many bytes.
pub const MATERIALIZE_BYTES: u64 = 64 << 20;
/// A hand-over due while the previous one still materializes waits until
/// the log holds this many times the thresholds above (`after_write`).
pub const DEFER_HAND_OVER_FACTOR: u64 = 2;

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .field("opts", &self.opts)
            .field("state", &self.state)
            .field("unsynced", &self.unsynced)
            .finish()
    }
}

impl Store {
    /// Open or create the store in `dir` (created if missing) for an ordering
    /// mode with `lanes` lanes (`ClusterConfig::lanes()`).
    pub fn open(dir: &Path, fsync: FsyncPolicy, lanes: u32) -> Result<Store> {
        Store::open_with(dir, StoreOptions::new(fsync, lanes))
    }

    pub fn open_with(dir: &Path, opts: StoreOptions) -> Result<Store> {
        if opts.lanes == 0 || opts.lanes > LANES_MAX {
            return Err(StoreError::InvalidLanes {
                got: opts.lanes,
                max: LANES_MAX,
            });
        }
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join(DB_FILE_NAME);
        let exists = path.try_exists().map_err(|source| StoreError::Io {
            path: path.clone(),
            source,
        })?;
        if !exists {
            create_initialized(dir, &path, Layout { lanes: opts.lanes })?;
        }
        // `create` opens an existing file, repairing it after a crash: redb
        // falls back to the last commit whose checksums verify. A file it
        // cannot make sense of (truncated) trips an assertion inside redb:
        // turned into an error naming the file, never a panic of the caller.
        let created = std::panic::catch_unwind(|| {
            redb::Builder::new()
                .set_cache_size(opts.cache_bytes)
                .create(&path)
        });
        let db = match created {
            Ok(Ok(db)) => db,
            Ok(Err(redb::DatabaseError::Storage(redb::StorageError::Corrupted(reason)))) => {
                return Err(StoreError::CorruptFile { path, reason });
            }
            Ok(Err(e)) => return Err(e.into()),
            Err(panic) => {
                let reason = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "redb could not read it".into());
                return Err(StoreError::CorruptFile { path, reason });
            }
        };
        let layout = Layout { lanes: opts.lanes };
        let txn = db.begin_write()?;
        let (state, wal_from, fresh) = init_or_check(&txn, layout)?;
        if fresh && Wal::any_segment(dir)? {
            // Dropping `txn` aborts the creation.
            return Err(StoreError::CorruptFile {
                path: Wal::dir_of(dir),
                reason: format!(
                    "write-ahead log segments without the database they belong to ({DB_FILE_NAME} is new or from before them)"
                ),
            });
        }
        txn.commit()?;
        // Records appended after the last materialization (a crash or a
        // kill came first) go into the tables now, durably, before their
        // segment is deleted; `load` and every read then see them.
        let damage = if opts.fsync == FsyncPolicy::Off {
            Damage::EndOfLog
        } else {
            Damage::Corruption
        };
        let replayed = Wal::replay(dir, wal_from, damage)?;
        // After the last segment replayed, or the one the tables name when
        // there is none: a first open killed between creating its segment
        // and recording it in the tables then finds the segment they name
        // (review: creating `wal_from + 1` left one the next open refused as
        // out of sequence).
        let next_segment = match replayed.last_segment {
            Some(last) => last
                .checked_add(1)
                .ok_or_else(|| corrupt("meta", META_WAL, "segment numbers exhausted"))?,
            None => wal_from,
        };
        // The new segment continues the last one replayed, if that one is
        // still on disk (its records go into the tables below and it is
        // deleted after; a crash before then replays it again).
        let previous = replayed
            .end
            .filter(|e| e.segment.checked_add(1) == Some(next_segment));
        let wal = Wal::create(dir, next_segment, opts.fsync != FsyncPolicy::Off, previous)?;
        let (state, skipped) = commit_to_tables(
            &db,
            layout,
            state,
            !opts.keep_ledger,
            &replayed.records,
            next_segment,
        )?;
        Wal::delete_below(dir, next_segment);
        if !replayed.records.is_empty() || replayed.torn_bytes > 0 {
            tracing::info!(
                records = replayed.records.len(),
                torn_bytes = replayed.torn_bytes,
                "store: write-ahead log replayed into the tables"
            );
        }
        let db: SharedDb = Arc::new(RwLock::new(db));
        let materializer = Materializer::spawn(Context {
            db: Arc::clone(&db),
            db_path: path.clone(),
            data_dir: dir.to_path_buf(),
            layout,
            prune_at_stable: !opts.keep_ledger,
        })?;
        let store = Store {
            db,
            path,
            dir: dir.to_path_buf(),
            wal,
            pending: Vec::new(),
            pending_appends: 0,
            pending_decided: HashMap::new(),
            in_flight_decided: HashMap::new(),
            in_flight_appends: 0,
            materializer,
            materializations: 0,
            deferred_hand_overs: 0,
            failed: None,
            opts,
            layout,
            state,
            unsynced: 0,
            appends: 0,
            durable_commits: 0,
            skipped,
            compactions: 0,
        };
        tracing::debug!(path = ?store.path, state = ?store.state, fsync = %opts.fsync, "store opened");
        Ok(store)
    }

    /// Write `records`, in order, with one `write` to the write-ahead log.
    /// Durable on return under `always`; under `batch` durable once `sync` is
    /// called or the `batch_appends_max`-th unsynced append returns; see
    /// `FsyncPolicy`. Refused records (a lane out of range, a second digest
    /// for a decided position) are refused before the log sees them:
    /// nothing of the call is written. An I/O error once the frame is
    /// written stops the store (`StoreError::Failed` from then on): the
    /// caller must treat it as fatal, as the runtime does.
    pub fn append(&mut self, records: &[PersistRecord]) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let decided = self.write_ahead(records)?;
        self.pending.extend(records.iter().cloned());
        self.pending_decided.extend(decided);
        self.after_write(has_checkpoint(records))
    }

    /// `append`, moving the records out of `records` instead of copying
    /// them (the runtime's hot path: no batch is cloned). `records` is
    /// empty once they are in the log, untouched if they were refused.
    pub fn append_drain(&mut self, records: &mut Vec<PersistRecord>) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let decided = self.write_ahead(records)?;
        let checkpoint = has_checkpoint(records);
        self.pending.append(records);
        self.pending_decided.extend(decided);
        self.after_write(checkpoint)
    }

    /// Check the records and write them to the log (one frame, one `write`);
    /// returns their decided positions.
    fn write_ahead(&mut self, records: &[PersistRecord]) -> Result<Vec<(u64, Digest)>> {
        // A failed earlier hand-over is reported before this append is
        // written, not after.
        self.collect(false)?;
        self.check_usable()?;
        let decided = match self.check_append(records) {
            Ok(decided) => decided,
            Err(e @ StoreError::Db(_)) => return Err(self.read_error(e)),
            Err(e) => return Err(e),
        };
        match self.wal.append(records) {
            Ok(()) => {}
            Err(e @ StoreError::AppendTooLarge { .. }) => return Err(e),
            Err(e) => return Err(self.fail(e)),
        }
        self.appends += 1;
        self.pending_appends += 1;
        Ok(decided)
    }

    /// The fsync policy's durable point, then the tables if it is time.
    fn after_write(&mut self, checkpoint: bool) -> Result<()> {
        if self.unsynced + 1 >= self.opts.durable_every() {
            if let Err(e) = self.wal.sync() {
                return Err(self.fail(e));
            }
            self.unsynced = 0;
            self.durable_commits += 1;
        } else {
            self.unsynced += 1;
        }
        if checkpoint
            || self.pending_appends >= MATERIALIZE_EVERY_APPENDS
            || self.wal.len() >= MATERIALIZE_BYTES
        {
            // The append is in the log already: a failure from here on
            // stops the store rather than report the append as not written.
            self.collect(false)?;
            // The previous hand-over still materializing: go on in this
            // segment instead of waiting for its tables' commit (the writer
            // may be a pillar thread serving connections: docs/known-issues.md),
            // until the log is far behind, where waiting is the back-pressure.
            // Not at a checkpoint: its truncation of the tables is what keeps
            // them bounded (tests/growth.rs), and the count and size
            // thresholds are checked again on every append, a checkpoint not.
            let far_behind = self.pending_appends >= DEFER_HAND_OVER_FACTOR * MATERIALIZE_EVERY_APPENDS
                || self.wal.len() >= DEFER_HAND_OVER_FACTOR * MATERIALIZE_BYTES;
            if self.materializer.in_flight() && !far_behind && !checkpoint {
                self.deferred_hand_overs += 1;
                return Ok(());
            }
            if let Err(e) = self.hand_over() {
                return Err(if self.failed.is_some() { e } else { self.fail(e) });
            }
        }
        Ok(())
    }

    /// What the tables' writer would refuse, refused before the log: a lane
    /// the store was not opened for, or a decided position given a second
    /// digest (in this call, in the log, or in the ledger). Returns the
    /// call's decided positions.
    fn check_append(&self, records: &[PersistRecord]) -> Result<Vec<(u64, Digest)>> {
        let mut decided: Vec<(u64, Digest)> = Vec::new();
        // Taken only if needed; the guard outlives the read transaction
        // (declared first, dropped last): the materializer's compaction,
        // under the write lock, needs no read open (redb).
        let mut guard = None;
        let mut ledger = None;
        for r in records {
            match r {
                PersistRecord::Accepted { lane, slot, .. } => {
                    self.layout.seq_of(*lane, *slot)?;
                }
                PersistRecord::Prepared { cert } => {
                    self.layout.seq_of(cert.lane, cert.slot)?;
                }
                PersistRecord::Decided { cell, digest, .. } => {
                    let seq = self.layout.seq_of_cell(*cell)?;
                    let earlier = decided
                        .iter()
                        .find(|(s, _)| *s == seq)
                        .map(|(_, d)| *d)
                        .or_else(|| self.pending_decided.get(&seq).copied())
                        .or_else(|| self.in_flight_decided.get(&seq).copied());
                    let stored = match earlier {
                        Some(d) => Some(d),
                        None => {
                            if ledger.is_none() {
                                let db = guard.insert(self.db.read().unwrap_or_else(|p| p.into_inner()));
                                ledger = Some(db.begin_read()?.open_table(LEDGER)?);
                            }
                            let table = ledger.as_ref().expect("opened above");
                            match table.get(seq)? {
                                Some(v) => Some(decode_ledger_head(seq, v.value())?.1),
                                None => None,
                            }
                        }
                    };
                    if let Some(stored) = stored.filter(|s| s != digest) {
                        return Err(StoreError::LedgerConflict {
                            seq,
                            stored,
                            new: *digest,
                        });
                    }
                    decided.push((seq, *digest));
                }
                PersistRecord::View { .. }
                | PersistRecord::Stable { .. }
                | PersistRecord::DispelSnapshot { .. }
                | PersistRecord::DispelInput { .. }
                | PersistRecord::TimeoutCert { .. } => {}
            }
        }
        Ok(decided)
    }

    /// Refuse to write after a failure (see `failed`).
    fn check_usable(&self) -> Result<()> {
        match &self.failed {
            Some(reason) => Err(StoreError::Failed {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// A read of the tables failed. The materializer shares the database:
    /// a commit of its failing (a full disk) makes redb refuse every later
    /// transaction with "previous I/O error", which names no cause, and the
    /// read can see that before the hand-over's own error arrives. Its error
    /// is the cause, so it wins (the operator's hint depends on it: seen in
    /// CI, a full disk reported as "Previous I/O error occurred").
    fn read_error(&mut self, e: StoreError) -> StoreError {
        match self.collect(true) {
            Err(cause) => cause,
            Ok(()) => e,
        }
    }

    fn fail(&mut self, e: StoreError) -> StoreError {
        tracing::error!(error = %e, "store: write failed, refusing further appends");
        self.failed = Some(e.to_string());
        e
    }

    /// Move the log on to a new segment and hand the current one's records
    /// to the materializer (after the previous hand-over finished: at most
    /// one in flight, the back-pressure when the disk falls behind).
    fn hand_over(&mut self) -> Result<()> {
        self.check_usable()?;
        if self.pending.is_empty() {
            return Ok(());
        }
        self.collect(true)?;
        // `sync` covers the current segment only: the old one's frames must
        // be durable before the log moves on, or a machine crash could keep
        // frames of the next segment and lose this one's (a non-prefix).
        // Not under `off`: nothing is synced there, so even one segment's
        // pages may reach the disk out of order, and replay ends the log at
        // its first damage instead (`Damage::EndOfLog`). This sync, of a
        // whole segment's dirty pages on the writer's thread (the pillar's
        // under `off`), was 0.3–7 ms at every checkpoint and most of the
        // p99 at half of peak (BENCHMARKS.md 2026-11-28 (night)).
        if self.unsynced > 0 {
            if self.opts.fsync != FsyncPolicy::Off {
                if let Err(e) = self.wal.sync() {
                    return Err(self.fail(e));
                }
                self.durable_commits += 1;
            }
            // Counts the appends of the current segment since its last sync.
            self.unsynced = 0;
        }
        let next = self
            .wal
            .segment()
            .checked_add(1)
            .ok_or_else(|| corrupt("meta", META_WAL, "segment numbers exhausted"))?;
        self.wal = Wal::create(&self.dir, next, self.wal.syncs_dir(), Some(self.wal.end()))?;
        let job = Job {
            records: std::mem::take(&mut self.pending),
            state: self.state,
            next_segment: next,
        };
        self.in_flight_decided = std::mem::take(&mut self.pending_decided);
        self.in_flight_appends = std::mem::take(&mut self.pending_appends);
        if let Err(e) = self.materializer.submit(job) {
            return Err(self.fail(e));
        }
        Ok(())
    }

    /// Take in the finished hand-over, if any (waiting for it if `block`).
    fn collect(&mut self, block: bool) -> Result<()> {
        match self.materializer.collect(block) {
            None => Ok(()),
            Some(Ok((state, skipped, compacted))) => {
                self.state = state;
                self.skipped.obsolete += skipped.obsolete;
                self.skipped.duplicate += skipped.duplicate;
                self.skipped.superseded += skipped.superseded;
                self.in_flight_decided.clear();
                self.in_flight_appends = 0;
                self.materializations += 1;
                self.compactions += u64::from(compacted);
                Ok(())
            }
            Some(Err(e)) => Err(self.fail(e)),
        }
    }

    /// Everything appended is in the tables (the log holds no record, only
    /// its `SegmentStart`).
    fn materialize(&mut self) -> Result<()> {
        self.hand_over()?;
        self.collect(true)
    }

    fn file_bytes(&self) -> Result<u64> {
        std::fs::metadata(&self.path)
            .map(|m| m.len())
            .map_err(|source| StoreError::Io {
                path: self.path.clone(),
                source,
            })
    }

    /// Make every append durable (one `fdatasync` of the log) unless the
    /// policy is `off`. The runtime calls it before sending messages that
    /// depend on appended records. Cheap when nothing is pending.
    pub fn sync(&mut self) -> Result<()> {
        if self.opts.fsync == FsyncPolicy::Off {
            return Ok(());
        }
        self.flush()
    }

    /// Close cleanly: everything appended becomes durable, under any policy,
    /// and the tables hold it all (the log holds no record).
    pub fn close(mut self) -> Result<()> {
        self.materialize()?;
        self.flush()
    }

    /// The records `Replica::recover` replays to rebuild its protocol state:
    /// the latest `Stable` first (if any), then, in their original order, the
    /// records still relevant above it: the highest `View` per lane,
    /// `Accepted`/`Prepared` for cells at or above the checkpoint, and the
    /// `Decided` cells at or above it (with their batches).
    pub fn load(&mut self) -> Result<Vec<PersistRecord>> {
        self.materialize()?;
        self.with_read(|t| read::load(t, self.layout))
    }

    /// The latest stable checkpoint and its snapshot (served to lagging peers).
    pub fn stable_checkpoint(&mut self) -> Result<Option<(CheckpointCert, Bytes)>> {
        self.materialize()?;
        self.with_read(read::latest_checkpoint)
    }

    /// The decided cell at global position `seq`, if the ledger holds it.
    pub fn ledger_entry(&mut self, seq: Seq) -> Result<Option<(Cell, Digest, Batch)>> {
        self.materialize()?;
        self.with_read(|t| read::ledger_entry(t, seq.0))
    }

    /// `(length, head)`: every position below `length` is decided and chained
    /// (pruned positions included), and `head` is the chain hash of position
    /// `length - 1` (the genesis hash for an empty ledger). Replicas with the
    /// same history from genesis agree on the head at equal lengths.
    pub fn ledger_head(&mut self) -> Result<(u64, Digest)> {
        self.materialize()?;
        Ok((self.state.chain.next_seq, self.state.chain.head))
    }

    /// Recompute the ledger's hash chain and check every entry against it.
    /// Returns the number of chained entries checked; tampering is
    /// `StoreError::LedgerTampered` naming the first bad position.
    pub fn verify_ledger(&mut self) -> Result<u64> {
        self.materialize()?;
        self.with_read(|t| read::verify_ledger(t, self.layout, self.state.chain))
    }

    /// Drop decided cells below `seq` (at most the stable checkpoint, since
    /// recovery replays the cells above it). The chain stays verifiable from
    /// `seq`. Returns the number of entries removed.
    pub fn prune_ledger_below(&mut self, seq: Seq) -> Result<u64> {
        self.materialize()?;
        // No hand-over is in flight (`materialize` waited for it).
        let db = self.db.read().unwrap_or_else(|p| p.into_inner());
        let mut txn = db.begin_write()?;
        txn.set_durability(Durability::Immediate);
        let mut w = Writer::open(&txn, self.layout, self.state, !self.opts.keep_ledger)?;
        let removed = w.prune_below(seq.0)?;
        let (state, _) = w.finish()?;
        // On any error above, dropping `txn` aborts it: nothing is written.
        txn.commit()?;
        self.state = state;
        Ok(removed)
    }

    /// Sizes and counters. The table counts (`log_records`,
    /// `ledger_entries`, `checkpoints`) are as of the last materialization;
    /// `wal_pending_appends` says how many appends the log holds beyond them.
    pub fn stats(&self) -> Result<StoreStats> {
        let file_bytes = self.file_bytes()?;
        let (log_records, ledger_entries, checkpoints) = self.with_read(|txn| {
            Ok((
                txn.open_table(LOG)?.len()?,
                txn.open_table(LEDGER)?.len()?,
                txn.open_table(CHECKPOINTS)?.len()?,
            ))
        })?;
        Ok(StoreStats {
            file_bytes,
            log_records,
            ledger_entries,
            checkpoints,
            stable_seq: self.state.stable_seq.map(Seq),
            appends: self.appends,
            durable_commits: self.durable_commits,
            unsynced_appends: self.unsynced,
            skipped: self.skipped,
            compactions: self.compactions,
            wal_bytes: self.wal.disk_bytes(),
            wal_pending_appends: self.pending_appends + self.in_flight_appends,
            materializations: self.materializations,
            deferred_hand_overs: self.deferred_hand_overs,
        })
    }

    /// Appends written but not yet durable: what a crash of the machine would
    /// lose now. Zero right after `sync` (except under `off`) and always
    /// under `always`. Under `off` it counts only the current segment's
    /// appends since its last periodic sync: a segment handed over is not
    /// synced, and is durable once the materializer's commit of it is
    /// (`StoreStats::wal_pending_appends` counts both).
    pub fn unsynced_appends(&self) -> u32 {
        self.unsynced
    }

    pub fn options(&self) -> StoreOptions {
        self.opts
    }

    /// A read of the tables; the lock guard outlives the transaction (the
    /// materializer's compaction needs no read open).
    fn with_read<T>(&self, f: impl FnOnce(&redb::ReadTransaction) -> Result<T>) -> Result<T> {
        let db = self.db.read().unwrap_or_else(|p| p.into_inner());
        let txn = db.begin_read()?;
        let out = f(&txn);
        drop(txn);
        out
    }

    /// Bytes on disk: the database file plus the write-ahead log's segments.
    pub fn disk_bytes(&self) -> Result<u64> {
        Ok(self.file_bytes()? + self.wal.disk_bytes())
    }

    /// The database file (the tables).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One `fdatasync` of the log makes every earlier append durable.
    fn flush(&mut self) -> Result<()> {
        self.check_usable()?;
        if self.unsynced == 0 {
            return Ok(());
        }
        if let Err(e) = self.wal.sync() {
            return Err(self.fail(e));
        }
        self.unsynced = 0;
        self.durable_commits += 1;
        Ok(())
    }
}

fn has_checkpoint(records: &[PersistRecord]) -> bool {
    records.iter().any(|r| matches!(r, PersistRecord::Stable { .. }))
}

/// Apply `records` to the tables in one durable transaction that also
/// records `next_segment` as the first segment of the log not in them.
pub(crate) fn commit_to_tables(
    db: &Database,
    layout: Layout,
    state: WriteState,
    prune_at_stable: bool,
    records: &[PersistRecord],
    next_segment: u64,
) -> Result<(WriteState, SkipCounts)> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate);
    let mut w = Writer::open(&txn, layout, state, prune_at_stable)?;
    w.plan(records);
    for r in records {
        w.apply(r)?;
    }
    w.set_wal_segment(next_segment)?;
    let out = w.finish()?;
    // On any error above, dropping `txn` aborts it: nothing is written.
    txn.commit()?;
    Ok(out)
}

impl Drop for Store {
    /// A clean shutdown persists what was appended and leaves the tables
    /// complete (a crash does not run this; the log's replay covers it).
    fn drop(&mut self) {
        if std::thread::panicking() || self.failed.is_some() {
            return;
        }
        if let Err(e) = self.materialize().and_then(|()| self.flush()) {
            tracing::warn!(error = %e, path = ?self.path, "store: final sync failed");
        }
    }
}

/// A new database is made under a temporary name and put into place once
/// initialized and durable. A replica killed while redb wrote a new file's
/// header left a file no later start could open ("invalid data"), so a
/// crash in the first second of a replica's life needed its data directory
/// wiped by hand (found 2026-11-28 by a test that replaced freshly started
/// replicas; a file half-written that way by an older build still does). A
/// leftover temporary file is such a crash's, and is started over. The file
/// is linked into place, never renamed over one: a second process opening
/// the same directory must not replace a live database (redb's file lock
/// refuses it the database itself).
fn create_initialized(dir: &Path, path: &Path, layout: Layout) -> Result<()> {
    if Wal::any_segment(dir)? {
        return Err(StoreError::CorruptFile {
            path: Wal::dir_of(dir),
            reason: format!(
                "write-ahead log segments without the database they belong to ({DB_FILE_NAME} is missing)"
            ),
        });
    }
    let tmp = dir.join(format!("{DB_FILE_NAME}.new"));
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| StoreError::Io { path: p, source }
    };
    match std::fs::remove_file(&tmp) {
        Ok(()) => tracing::info!(file = %tmp.display(), "removed a database left half-created by a crash"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&tmp)(e)),
    }
    {
        let db = redb::Database::create(&tmp)?;
        let txn = db.begin_write()?;
        init_or_check(&txn, layout)?;
        // redb's default durability: the commit is synced before it returns.
        txn.commit()?;
    }
    std::fs::hard_link(&tmp, path).map_err(io(path))?;
    std::fs::remove_file(&tmp).map_err(io(&tmp))?;
    crate::wal::sync_directory(dir)
}

/// Create the tables and metadata of a new store, or check those of an
/// existing one; returns the committed state to continue from and the first
/// segment of the write-ahead log not yet in the tables.
pub(crate) fn init_or_check(txn: &WriteTransaction, layout: Layout) -> Result<(WriteState, u64, bool)> {
    let mut meta = txn.open_table(META)?;
    let version = meta.get(META_VERSION)?.map(|v| v.value().to_vec());
    // New, or from before the write-ahead log: no segment may exist yet.
    let mut fresh = false;
    let chain = match version {
        None => {
            fresh = true;
            let chain = ChainState::genesis();
            meta.insert(META_VERSION, FORMAT_VERSION.to_le_bytes().as_slice())?;
            meta.insert(META_LANES, layout.lanes.to_le_bytes().as_slice())?;
            meta.insert(META_CHAIN, encode(&chain).as_slice())?;
            chain
        }
        Some(v) => {
            let found = decode_u32("meta", META_VERSION, &v)?;
            if found == FORMAT_VERSION_PRE_WAL {
                fresh = true;
                // Written before the segment log existed: the tables hold
                // everything, so the log simply starts at segment 0.
                meta.insert(META_VERSION, FORMAT_VERSION.to_le_bytes().as_slice())?;
                tracing::info!(from = found, to = FORMAT_VERSION, "store format upgraded");
            } else if [
                FORMAT_VERSION_PRE_TIMEOUT_CERT,
                FORMAT_VERSION_PRE_ACCEPTED_REF,
                FORMAT_VERSION_PRE_SHA256,
                FORMAT_VERSION_PRE_SEGMENT_START,
            ]
            .contains(&found)
            {
                // Every version-2 to -5 record means the same in version 6
                // (segments without a `SegmentStart` replay as before).
                meta.insert(META_VERSION, FORMAT_VERSION.to_le_bytes().as_slice())?;
                tracing::info!(from = found, to = FORMAT_VERSION, "store format upgraded");
            } else if found != FORMAT_VERSION {
                return Err(StoreError::FormatVersion {
                    found,
                    expected: FORMAT_VERSION,
                });
            }
            let stored = match meta.get(META_LANES)? {
                Some(l) => decode_u32("meta", META_LANES, l.value())?,
                None => return Err(corrupt("meta", META_LANES, "missing")),
            };
            if stored != layout.lanes {
                return Err(StoreError::LanesMismatch {
                    stored,
                    requested: layout.lanes,
                });
            }
            match meta.get(META_CHAIN)? {
                Some(c) => decode::<ChainState>("meta", META_CHAIN, c.value())?,
                None => return Err(corrupt("meta", META_CHAIN, "missing")),
            }
        }
    };
    let next_log_key = match txn.open_table(LOG)?.last()? {
        Some((k, _)) => k.value() + 1,
        None => 0,
    };
    let stable_seq = txn.open_table(CHECKPOINTS)?.last()?.map(|(k, _)| k.value());
    txn.open_table(LEDGER)?;
    txn.open_table(CHAIN)?;
    if chain.base_seq > chain.next_seq || stable_seq.is_some_and(|s| s > chain.next_seq) {
        return Err(corrupt(
            "meta",
            META_CHAIN,
            format!("chain {chain:?} inconsistent with stable checkpoint {stable_seq:?}"),
        ));
    }
    let wal_from = match meta.get(META_WAL)? {
        Some(v) => {
            let arr: [u8; 8] = v
                .value()
                .try_into()
                .map_err(|_| corrupt("meta", META_WAL, "expected 8 bytes"))?;
            u64::from_le_bytes(arr)
        }
        None => 0,
    };
    Ok((
        WriteState {
            next_log_key,
            stable_seq,
            chain,
        },
        wal_from,
        fresh,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_records::{accepted, decided};

    /// CI, failstop.rs: a full disk failed the materializer's commit, and
    /// the next append's ledger read saw redb's "previous I/O error" before
    /// the hand-over's outcome arrived; that uninformative error stopped the
    /// replica. A failed read while a hand-over is in flight reports the
    /// hand-over's error, and the store refuses further work.
    #[test]
    fn a_read_failing_behind_a_failed_hand_over_reports_the_hand_overs_error() {
        let d = tempfile::tempdir().unwrap();
        let mut s = Store::open(d.path(), FsyncPolicy::Batch, 1).unwrap();
        let full = StoreError::Io {
            path: d.path().to_path_buf(),
            source: std::io::Error::from(std::io::ErrorKind::StorageFull),
        };
        s.materializer = Materializer::finished_with(Err(full));
        // A database without the ledger table: the read of it fails the way
        // a poisoned one does, with a database error naming no cause.
        let empty = tempfile::tempdir().unwrap();
        s.db = Arc::new(RwLock::new(
            redb::Database::create(empty.path().join("e.redb")).unwrap(),
        ));
        let e = s.read_error(s.check_append(&[decided(0)]).unwrap_err());
        assert!(e.is_disk_full(), "{e}");
        let e = s.append(&[decided(0)]).unwrap_err();
        assert!(matches!(e, StoreError::Failed { .. }), "{e}");
        assert!(e.to_string().contains("no storage space"), "{e}");
    }

    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                copy_dir(&e.path(), &to.join(e.file_name()));
            } else {
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        }
    }

    /// A hand-over due while the previous one is still being committed to
    /// the tables does not wait for it (docs/known-issues.md: with the core
    /// inline, the writer is a pillar thread): the log goes on in its
    /// segment, and nothing is lost once the commit finishes. The
    /// materializer is held by the tables' write lock (a commit waits on it).
    #[test]
    fn an_append_does_not_wait_for_the_materialization_in_flight() {
        let d = tempfile::tempdir().unwrap();
        let mut s = Store::open(d.path(), FsyncPolicy::Off, 1).unwrap();
        let hold = Arc::clone(&s.db);
        let guard = hold.write().unwrap();
        let n = MATERIALIZE_EVERY_APPENDS;
        // The n-th append hands the log over; that job waits on the lock.
        for slot in 0..n {
            s.append(&[accepted(slot)]).unwrap();
        }
        let segment = s.wal.segment();
        // Another n: the next hand-over is due while the first is in flight.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for slot in n..2 * n {
                s.append(&[accepted(slot)]).unwrap();
            }
            let _ = tx.send(s);
        });
        let mut s = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("an append waited for the materialization in flight");
        assert_eq!(
            s.wal.segment(),
            segment,
            "no second hand-over while one is in flight"
        );
        assert_eq!(s.deferred_hand_overs, 1, "the hand-over was put off once");
        drop(guard);
        // The put-off hand-over is made by the next append once the first
        // is in (the count threshold is checked on every append).
        s.collect(true).unwrap();
        s.append(&[accepted(2 * n)]).unwrap();
        assert!(s.wal.segment() > segment, "the put-off hand-over was not made");
        assert_eq!(s.load().unwrap(), (0..=2 * n).map(accepted).collect::<Vec<_>>());
    }

    /// A fresh store's first segment is the one its tables name before any
    /// commit (`META_WAL` absent: 0), so a first open killed between
    /// creating the segment and recording it finds the segment it expects
    /// (review: segment 1 was created, and that open was refused as "out of
    /// sequence").
    #[test]
    fn a_fresh_stores_first_segment_is_the_one_its_tables_name() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), FsyncPolicy::Batch, 1).unwrap();
        assert_eq!(s.wal.segment(), 0);
        // What that kill leaves: initialised tables that name no segment,
        // and the segment.
        let image = tempfile::tempdir().unwrap();
        create_initialized(
            image.path(),
            &image.path().join(DB_FILE_NAME),
            Layout { lanes: 1 },
        )
        .unwrap();
        drop(Wal::create(image.path(), s.wal.segment(), false, None).unwrap());
        drop(s);
        let mut r = Store::open(image.path(), FsyncPolicy::Batch, 1).unwrap();
        assert_eq!(r.load().unwrap(), vec![]);
        r.append(&[accepted(0)]).unwrap();
    }

    /// Under `off` moving the log to the next segment syncs nothing (the
    /// sync, on the writer's thread, was most of the p99 at half of peak);
    /// under `batch` the old segment is synced first, as before. A machine
    /// crash under `off` that kept the second segment and lost the end of
    /// the first ends the log at the damage (the second is dropped); the
    /// same image under `batch` is corruption (it cannot come from a crash).
    #[test]
    fn under_off_a_hand_over_syncs_nothing_and_replay_ends_at_the_first_damage() {
        for policy in [FsyncPolicy::Batch, FsyncPolicy::Off] {
            let d = tempfile::tempdir().unwrap();
            let mut s = Store::open(d.path(), policy, 1).unwrap();
            s.append(&[accepted(0)]).unwrap();
            let boundary = s.wal.len() as usize;
            s.append(&[accepted(1)]).unwrap();
            let hold = Arc::clone(&s.db);
            let guard = hold.write().unwrap();
            let before = s.durable_commits;
            s.hand_over().unwrap();
            let synced = s.durable_commits - before;
            assert_eq!(synced, u64::from(policy != FsyncPolicy::Off), "{policy}");
            s.append(&[accepted(2)]).unwrap();
            let image = tempfile::tempdir().unwrap();
            copy_dir(d.path(), image.path());
            drop(guard);
            s.close().unwrap();

            // The first segment's second frame did not reach the disk
            // (damaged, or the file cut at the frame boundary before it);
            // the second segment did.
            let segs = Wal::segments(&Wal::dir_of(image.path())).unwrap();
            assert_eq!(segs.len(), 2, "{policy}: {segs:?}");
            let first = Wal::dir_of(image.path()).join(format!("{:016x}.log", segs[0]));
            let whole = std::fs::read(&first).unwrap();
            let mut damaged = whole.clone();
            let at = damaged.len() - 1;
            damaged[at] ^= 0xff;
            let cut = whole[..boundary].to_vec();
            for (how, bytes) in [("damaged", damaged), ("cut", cut)] {
                let image2 = tempfile::tempdir().unwrap();
                copy_dir(image.path(), image2.path());
                std::fs::write(
                    Wal::dir_of(image2.path()).join(format!("{:016x}.log", segs[0])),
                    &bytes,
                )
                .unwrap();
                match policy {
                    FsyncPolicy::Off => {
                        let mut r = Store::open(image2.path(), policy, 1).unwrap();
                        assert_eq!(r.load().unwrap(), vec![accepted(0)], "{how}: ends there");
                        r.append(&[accepted(1)]).unwrap();
                        assert_eq!(r.load().unwrap(), vec![accepted(0), accepted(1)]);
                    }
                    _ => {
                        let e = Store::open(image2.path(), policy, 1).expect_err("corruption");
                        assert!(e.is_corruption(), "{how}: {e}");
                    }
                }
            }
        }
    }

    /// A crash while a segment is on its way into the tables (held there by
    /// the lock) leaves two segments from the recorded one on: both replay,
    /// in order; a torn tail of the second cuts only its last append.
    #[test]
    fn a_crash_during_a_hand_over_replays_both_segments_in_order() {
        for policy in [FsyncPolicy::Batch, FsyncPolicy::Off] {
            let d = tempfile::tempdir().unwrap();
            let mut s = Store::open(d.path(), policy, 1).unwrap();
            s.append(&[accepted(0)]).unwrap();
            s.append(&[accepted(1)]).unwrap();
            let hold = Arc::clone(&s.db);
            let guard = hold.write().unwrap();
            s.hand_over().unwrap();
            s.append(&[accepted(2)]).unwrap();
            s.append(&[accepted(3)]).unwrap();
            s.sync().unwrap();
            let crashed = tempfile::tempdir().unwrap();
            copy_dir(d.path(), crashed.path());
            let torn = tempfile::tempdir().unwrap();
            copy_dir(d.path(), torn.path());
            drop(guard);
            s.close().unwrap();

            let segs = Wal::segments(&Wal::dir_of(crashed.path())).unwrap();
            assert_eq!(segs.len(), 2, "{policy}: {segs:?}");
            let mut r = Store::open(crashed.path(), policy, 1).unwrap();
            assert_eq!(
                r.load().unwrap(),
                (0..4).map(accepted).collect::<Vec<_>>(),
                "{policy}"
            );

            let last = Wal::dir_of(torn.path()).join(format!("{:016x}.log", segs[1]));
            let len = std::fs::metadata(&last).unwrap().len();
            std::fs::OpenOptions::new()
                .write(true)
                .open(&last)
                .unwrap()
                .set_len(len - 1)
                .unwrap();
            let mut r = Store::open(torn.path(), policy, 1).unwrap();
            assert_eq!(
                r.load().unwrap(),
                (0..3).map(accepted).collect::<Vec<_>>(),
                "{policy}"
            );
        }
    }
}
