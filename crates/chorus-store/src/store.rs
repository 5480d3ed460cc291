//! The store: opening (and checking) the database, appending records under the
//! fsync policy, and the read paths the runtime needs.

use crate::error::{Result, StoreError};
use crate::policy::{FsyncPolicy, StoreOptions, LANES_MAX};
use crate::read;
use crate::schema::{
    corrupt, decode, decode_u32, encode, ChainState, Layout, CHAIN, CHECKPOINTS, FORMAT_VERSION, LEDGER, LOG,
    META, META_CHAIN, META_LANES, META_VERSION,
};
use crate::writer::{SkipCounts, WriteState, Writer};
use bytes::Bytes;
use chorus_core::{Batch, Cell, CheckpointCert, Digest, Seq};
use chorus_order::PersistRecord;
use redb::{Database, Durability, ReadableTable, ReadableTableMetadata, WriteTransaction};
use std::path::{Path, PathBuf};

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
    /// `append` calls that wrote a transaction, since open.
    pub appends: u64,
    /// Transactions made durable with an fsync, since open.
    pub durable_commits: u64,
    /// Appends committed but not yet fsynced (lost by a crash).
    pub unsynced_appends: u32,
    /// Records not written because they carried nothing new, since open.
    pub skipped: SkipCounts,
    /// Times the file was compacted, since open.
    pub compactions: u64,
}

/// Durable storage of one replica (DESIGN §3 "Storage"). Not shared between
/// threads: the runtime owns it and serialises appends.
pub struct Store {
    db: Database,
    path: PathBuf,
    opts: StoreOptions,
    layout: Layout,
    state: WriteState,
    unsynced: u32,
    appends: u64,
    durable_commits: u64,
    skipped: SkipCounts,
    /// File size right after the last compaction (0: none since open).
    compacted_bytes: u64,
    compactions: u64,
}

/// Files smaller than this are never compacted (not worth a rewrite).
pub const COMPACT_MIN_BYTES: u64 = 4 << 20;

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
        let state = init_or_check(&txn, layout)?;
        txn.commit()?;
        tracing::debug!(?path, ?state, fsync = %opts.fsync, "store opened");
        Ok(Store {
            db,
            path,
            opts,
            layout,
            state,
            unsynced: 0,
            appends: 0,
            durable_commits: 0,
            skipped: SkipCounts::default(),
            compacted_bytes: 0,
            compactions: 0,
        })
    }

    /// Write `records` in one transaction, in order. Durable on return under
    /// `always`; under `batch` durable once `sync` is called or the
    /// `batch_appends_max`-th unsynced append returns; see `FsyncPolicy`.
    /// On error nothing of the call is written.
    pub fn append(&mut self, records: &[PersistRecord]) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let stable_before = self.state.stable_seq;
        self.write(|w| records.iter().try_for_each(|r| w.apply(r)))?;
        self.appends += 1;
        if self.state.stable_seq != stable_before {
            self.compact_if_bloated()?;
        }
        Ok(())
    }

    /// redb reuses freed pages but never gives them back to the file system;
    /// after a burst (a catch-up writing a large snapshot and many cells,
    /// then truncating them) the file would stay at its peak for ever. At a
    /// stable checkpoint, once the file has doubled since the last
    /// compaction, rewrite it to its live size (amortised: each compaction
    /// follows at least as many bytes of growth as it rewrites).
    fn compact_if_bloated(&mut self) -> Result<()> {
        let bytes = self.file_bytes()?;
        if bytes < COMPACT_MIN_BYTES.max(self.compacted_bytes.saturating_mul(2)) {
            return Ok(());
        }
        // redb frees pages only at a durable commit, and refuses to compact
        // while a non-durable one pins the last durable state.
        self.flush()?;
        if let Err(e) = self.db.compact() {
            // Nothing lost: the file just stays large until the next try.
            tracing::warn!(error = %e, "store compaction failed");
            self.compacted_bytes = bytes;
            return Ok(());
        }
        self.durable_commits += 1;
        self.compactions += 1;
        self.compacted_bytes = self.file_bytes()?;
        tracing::debug!(before = bytes, after = self.compacted_bytes, "store compacted");
        Ok(())
    }

    fn file_bytes(&self) -> Result<u64> {
        std::fs::metadata(&self.path)
            .map(|m| m.len())
            .map_err(|source| StoreError::Io {
                path: self.path.clone(),
                source,
            })
    }

    /// Make every committed append durable (one fsync) unless the policy is
    /// `off`. The runtime calls it before sending messages that depend on
    /// appended records. Cheap when nothing is pending.
    pub fn sync(&mut self) -> Result<()> {
        if self.opts.fsync == FsyncPolicy::Off {
            return Ok(());
        }
        self.flush()
    }

    /// Close cleanly: everything appended becomes durable, under any policy.
    pub fn close(mut self) -> Result<()> {
        self.flush()
    }

    /// The records `Replica::recover` replays to rebuild its protocol state:
    /// the latest `Stable` first (if any), then, in their original order, the
    /// records still relevant above it: the highest `View` per lane,
    /// `Accepted`/`Prepared` for cells at or above the checkpoint, and the
    /// `Decided` cells at or above it (with their batches).
    pub fn load(&self) -> Result<Vec<PersistRecord>> {
        read::load(&self.db.begin_read()?, self.layout)
    }

    /// The latest stable checkpoint and its snapshot (served to lagging peers).
    pub fn stable_checkpoint(&self) -> Result<Option<(CheckpointCert, Bytes)>> {
        read::latest_checkpoint(&self.db.begin_read()?)
    }

    /// The decided cell at global position `seq`, if the ledger holds it.
    pub fn ledger_entry(&self, seq: Seq) -> Result<Option<(Cell, Digest, Batch)>> {
        read::ledger_entry(&self.db.begin_read()?, seq.0)
    }

    /// `(length, head)`: every position below `length` is decided and chained
    /// (pruned positions included), and `head` is the chain hash of position
    /// `length - 1` (the genesis hash for an empty ledger). Replicas with the
    /// same history from genesis agree on the head at equal lengths.
    pub fn ledger_head(&self) -> (u64, Digest) {
        (self.state.chain.next_seq, self.state.chain.head)
    }

    /// Recompute the ledger's hash chain and check every entry against it.
    /// Returns the number of chained entries checked; tampering is
    /// `StoreError::LedgerTampered` naming the first bad position.
    pub fn verify_ledger(&self) -> Result<u64> {
        read::verify_ledger(&self.db.begin_read()?, self.layout, self.state.chain)
    }

    /// Drop decided cells below `seq` (at most the stable checkpoint, since
    /// recovery replays the cells above it). The chain stays verifiable from
    /// `seq`. Returns the number of entries removed.
    pub fn prune_ledger_below(&mut self, seq: Seq) -> Result<u64> {
        self.write(|w| w.prune_below(seq.0))
    }

    pub fn stats(&self) -> Result<StoreStats> {
        let file_bytes = self.file_bytes()?;
        let txn = self.db.begin_read()?;
        Ok(StoreStats {
            file_bytes,
            log_records: txn.open_table(LOG)?.len()?,
            ledger_entries: txn.open_table(LEDGER)?.len()?,
            checkpoints: txn.open_table(CHECKPOINTS)?.len()?,
            stable_seq: self.state.stable_seq.map(Seq),
            appends: self.appends,
            durable_commits: self.durable_commits,
            unsynced_appends: self.unsynced,
            skipped: self.skipped,
            compactions: self.compactions,
        })
    }

    /// Appends committed but not yet durable: what a crash would lose now.
    /// Zero right after `sync` (except under `off`) and always under `always`.
    pub fn unsynced_appends(&self) -> u32 {
        self.unsynced
    }

    pub fn options(&self) -> StoreOptions {
        self.opts
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One write transaction: durable if the policy's budget of unsynced
    /// appends is spent, otherwise committed without fsync.
    fn write<T>(&mut self, f: impl FnOnce(&mut Writer<'_>) -> Result<T>) -> Result<T> {
        let durable = self.unsynced + 1 >= self.opts.durable_every();
        let mut txn = self.db.begin_write()?;
        txn.set_durability(if durable {
            Durability::Immediate
        } else {
            Durability::None
        });
        let mut w = Writer::open(&txn, self.layout, self.state, !self.opts.keep_ledger)?;
        let out = f(&mut w)?;
        let (state, skipped) = w.finish()?;
        // On any error above, dropping `txn` aborts it: nothing is written.
        txn.commit()?;
        self.state = state;
        self.skipped.obsolete += skipped.obsolete;
        self.skipped.duplicate += skipped.duplicate;
        if durable {
            self.unsynced = 0;
            self.durable_commits += 1;
        } else {
            self.unsynced += 1;
        }
        Ok(out)
    }

    /// An empty durable commit persists every earlier non-durable one.
    fn flush(&mut self) -> Result<()> {
        if self.unsynced == 0 {
            return Ok(());
        }
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::Immediate);
        txn.commit()?;
        self.unsynced = 0;
        self.durable_commits += 1;
        Ok(())
    }
}

impl Drop for Store {
    /// A clean shutdown persists what was appended (a crash does not run this).
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Err(e) = self.flush() {
            tracing::warn!(error = %e, path = ?self.path, "store: final sync failed");
        }
    }
}

/// Create the tables and metadata of a new store, or check those of an
/// existing one; returns the committed state to continue from.
fn init_or_check(txn: &WriteTransaction, layout: Layout) -> Result<WriteState> {
    let mut meta = txn.open_table(META)?;
    let version = meta.get(META_VERSION)?.map(|v| v.value().to_vec());
    let chain = match version {
        None => {
            let chain = ChainState::genesis();
            meta.insert(META_VERSION, FORMAT_VERSION.to_le_bytes().as_slice())?;
            meta.insert(META_LANES, layout.lanes.to_le_bytes().as_slice())?;
            meta.insert(META_CHAIN, encode(&chain).as_slice())?;
            chain
        }
        Some(v) => {
            let found = decode_u32("meta", META_VERSION, &v)?;
            if found != FORMAT_VERSION {
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
    Ok(WriteState {
        next_log_key,
        stable_seq,
        chain,
    })
}
