//! chorus-store: what a replica must not lose (DESIGN §3 "Storage"), in one
//! embedded `redb` database in the replica's data directory:
//!
//! - the **protocol log**: `View`, `Accepted`, `Prepared` and `Decided`
//!   records since the last stable checkpoint, in append order;
//! - the last two **stable checkpoints** with their certificates and snapshots;
//! - the **decided ledger**: every decided cell keyed by its global position,
//!   hash-chained in that order so tampering is detectable (`verify_ledger`);
//! - **metadata**: format version, lane count, chain position.
//!
//! The replica emits `Action::Persist(record)`; the runtime collects the
//! records of one step, calls `Store::append` once (one transaction), then
//! `Store::sync` before sending the step's messages (PBFT's "log before
//! send"; see `FsyncPolicy` for what each policy guarantees). After a crash,
//! `Store::load` gives `Replica::recover` the records to replay.
//!
//! Every transaction is atomic: a process killed at any point leaves the store
//! at the last durable transaction, which `open` repairs to and `load` reads.
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
//!   log holds a reference) until `prune_ledger_below`, which may not go
//!   above the stable checkpoint. It is hash-chained in global order, so two
//!   replicas with the same history from genesis have the same head.
//! - When a stable checkpoint arrives above the chain head (state transfer
//!   over cells never decided here), the ledger restarts at the checkpoint,
//!   chained from an anchor hash of the certified state.
//! - Two decisions with different digests for one position are refused
//!   (`StoreError::LedgerConflict`) and the whole append is rolled back.

mod chain;
mod error;
mod policy;
mod read;
mod schema;
mod store;
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
