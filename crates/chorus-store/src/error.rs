//! Every way the store can fail, typed. Decoding never panics: a value that does
//! not decode is reported as `Corrupt`, naming the table and key, so an
//! operator knows which entry to inspect (DESIGN §6: decoding is total).

use chorus_core::Digest;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("i/o on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Boxed: redb's error is large and most results here are small.
    #[error("database: {0}")]
    Db(Box<redb::Error>),
    /// A stored value does not decode, or contradicts another stored value.
    #[error("corrupt entry {table}[{key}]: {reason}")]
    Corrupt {
        table: &'static str,
        key: String,
        reason: String,
    },
    #[error("store format version {found} is not the supported version {expected}")]
    FormatVersion { found: u32, expected: u32 },
    /// The lane count fixes the cell ↔ global sequence mapping of every stored
    /// key; reopening with another count would misread the ledger.
    #[error("store was created for {stored} lanes, opened with {requested}")]
    LanesMismatch { stored: u32, requested: u32 },
    #[error("lane count must be between 1 and {max}, got {got}")]
    InvalidLanes { got: u32, max: u32 },
    /// A record names a lane the store was not opened for (a caller bug): the
    /// whole append is rejected, nothing of it is written.
    #[error("record names lane {lane} but the store has {lanes} lanes")]
    LaneOutOfRange { lane: u32, lanes: u32 },
    #[error("slot {slot} of lane {lane} overflows the global sequence")]
    SeqOverflow { lane: u32, slot: u64 },
    /// Two different digests decided for one position: agreement is broken
    /// locally (a bug). The append is rejected, the ledger keeps the first.
    #[error("position #{seq} already decided with {stored}, refusing {new}")]
    LedgerConflict { seq: u64, stored: Digest, new: Digest },
    /// `verify_ledger` found an entry that does not match its hash chain.
    #[error("ledger tampered at #{seq}: {reason}")]
    LedgerTampered { seq: u64, reason: String },
    /// Pruning above the stable checkpoint would drop decided cells that
    /// recovery still needs.
    #[error("cannot prune the ledger below #{requested}: the stable checkpoint is #{stable}")]
    PruneAboveStable { requested: u64, stable: u64 },
    /// The database file could not be opened because it is damaged (redb
    /// refused it, or asserted on it: a truncated file trips an assertion
    /// inside `redb::Builder::create` instead of returning an error).
    #[error("database file {path} is corrupt: {reason}")]
    CorruptFile { path: PathBuf, reason: String },
    /// One append is larger than a write-ahead frame can hold. Nothing of
    /// it is written.
    #[error("an append of {bytes} bytes exceeds the write-ahead log's frame limit of {max} bytes")]
    AppendTooLarge { bytes: u64, max: u64 },
    /// An earlier write or sync of the write-ahead log failed: what reached
    /// the disk is unknown (a failed fsync may have dropped dirty pages), so
    /// the store refuses further work; reopening replays what is there.
    #[error("the store stopped after an earlier failure: {reason}")]
    Failed { reason: String },
}

impl StoreError {
    /// The file system is full (`ENOSPC`) or over quota: freeing space and
    /// restarting fixes it; the database itself is fine.
    pub fn is_disk_full(&self) -> bool {
        let io = match self {
            StoreError::Io { source, .. } => Some(source),
            StoreError::Db(e) => match e.as_ref() {
                redb::Error::Io(io) => Some(io),
                _ => None,
            },
            _ => None,
        };
        io.is_some_and(|e| {
            matches!(
                e.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            )
        })
    }

    /// The stored bytes are damaged (as opposed to the disk being full, an
    /// I/O error, or a caller bug): only wiping the data directory and letting
    /// state transfer rebuild it helps.
    pub fn is_corruption(&self) -> bool {
        match self {
            StoreError::Corrupt { .. }
            | StoreError::CorruptFile { .. }
            | StoreError::LedgerTampered { .. } => true,
            StoreError::Db(e) => matches!(e.as_ref(), redb::Error::Corrupted(_)),
            _ => false,
        }
    }
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self {
                StoreError::Db(Box::new(redb::Error::from(e)))
            }
        }
    )*};
}

impl From<redb::Error> for StoreError {
    fn from(e: redb::Error) -> Self {
        StoreError::Db(Box::new(e))
    }
}

from_redb!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::CompactionError
);

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
