//! chorus-store: what a replica must not lose (DESIGN §3 "Storage"): a
//! write-ahead segment log (`wal/`, see `wal.rs`) in front of one embedded
//! `redb` database in the replica's data directory, which holds:
//!
//! - the **protocol log**: `View`, `Accepted`, `Prepared` and `Decided`
//!   records since the last stable checkpoint, in append order;
//! - the last two **stable checkpoints** with their certificates and snapshots;
//! - the **decided ledger**: every decided cell keyed by its global position,
//!   hash-chained in that order so tampering is detectable (`verify_ledger`);
//! - **metadata**: format version, lane count, chain position.
//!
//! The replica emits `Action::Persist(record)`; the runtime collects the
//! records of one step, calls `Store::append_drain` once (one checksummed
//! frame, one `write` to the current log segment), then `Store::sync` (at
//! most one `fdatasync`) before sending the step's messages (PBFT's "log
//! before send"; see `FsyncPolicy` for what each policy guarantees). At each
//! stable checkpoint (or every `MATERIALIZE_EVERY_APPENDS` appends) the log
//! moves on to a new segment and a thread of the store's own
//! (`materializer.rs`) brings the old one into the tables in one durable
//! redb transaction, which also records where the log continues; the old
//! segment is then deleted
//! (issue 13 item 2: a B-tree transaction per round cost 27 % of a
//! replica's CPU). After a crash, `open` replays the log into the tables and
//! `Store::load` gives `Replica::recover` the records to replay.
//!
//! Every append is atomic (one frame with a checksum): a process killed at
//! any point, or a machine that lost power, leaves the store at a prefix of
//! its appends; a torn last frame is cut off on open, damage followed by a
//! whole frame is reported as corruption (under `fsync = off`, which syncs
//! nothing, a machine crash instead ends the log at its first damage:
//! `wal::Damage`). Decided records whose batch the
//! same segment already holds (from the `Accepted`) refer to it by digest,
//! so a batch is written to the log once; in the tables, the cells below a
//! checkpoint brought in with them keep no batch (pruned in the same
//! transaction), so in the steady state that is the only write of a batch
//! (docs/decisions.md, "The store writes a batch once").
//!
//! Decisions this crate makes (DESIGN is silent on them):
//!
//! - Cells are keyed by their global position `seq = slot * lanes + lane`
//!   (COP §4.1; `pbft` is one lane), so the store is opened with the lane
//!   count, which is recorded and checked on every reopen.
//! - A stable checkpoint at `S` covers every cell with `seq < S`: its
//!   `Accepted`, `Prepared` and `Decided` log entries are deleted, and of the
//!   `View` records only the highest per lane is kept (PBFT §4.3). Such records
//!   arriving later are skipped and counted. A checkpoint never moves back.
//! - The ledger keeps every decided cell (the batch is stored there once; the
//!   log holds a reference, also for an `Accepted` record of that batch
//!   brought into the tables together with its decision) until
//!   `prune_ledger_below`, which may not go
//!   above the stable checkpoint. It is hash-chained in global order, so two
//!   replicas with the same history from genesis have the same head.
//! - When a stable checkpoint arrives above the chain head (state transfer
//!   over cells never decided here), the ledger restarts at the checkpoint,
//!   chained from an anchor hash of the certified state.
//! - Two decisions with different digests for one position are refused
//!   (`StoreError::LedgerConflict`) before the append reaches the log:
//!   nothing of it is written.
//! - A failed write or sync of the log stops the store
//!   (`StoreError::Failed`): after a failed fsync the kernel may have
//!   dropped the dirty pages, so nothing written since can be trusted as
//!   durable ("fsyncgate"); reopening replays what is on disk.

mod chain;
mod error;
mod materializer;
mod policy;
mod read;
mod schema;
mod store;
#[cfg(test)]
mod test_records;
mod wal;
mod writer;

pub use error::{Result, StoreError};
pub use policy::{FsyncPolicy, StoreOptions, LANES_MAX, OFF_DURABLE_EVERY_APPENDS};
pub use schema::FORMAT_VERSION;
pub use store::{
    Store, StoreStats, COMPACT_MIN_BYTES, DB_FILE_NAME, MATERIALIZE_BYTES, MATERIALIZE_EVERY_APPENDS,
};
pub use wal::WAL_DIR_NAME;
pub use writer::SkipCounts;
