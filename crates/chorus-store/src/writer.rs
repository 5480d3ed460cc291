//! What one write transaction does with a batch of records: the protocol log,
//! the ledger and its chain, checkpoints and truncation. Everything runs inside
//! one redb transaction, so a failure or a crash leaves none of it behind.

use crate::error::{Result, StoreError};
use crate::schema::{
    corrupt, decode, decode_hash, decode_ledger_head, encode, AcceptedHead, ChainState, CheckpointRef,
    Layout, LedgerEntryRef, LogEntry, LogEntryRef, CHAIN, CHECKPOINTS, CHECKPOINTS_KEPT, LEDGER, LOG, META,
    META_CHAIN, META_WAL,
};
use bytes::Bytes;
use chorus_core::{Batch, Cell, CheckpointCert, Digest, LaneId, View};
use chorus_order::PersistRecord;
use redb::{ReadableTable, ReadableTableMetadata, Table, WriteTransaction};
use std::collections::BTreeMap;

/// The committed state the store caches between transactions. A writer works
/// on a copy; the store adopts it only once the transaction committed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct WriteState {
    /// Key of the next protocol-log entry (keys only grow, never reused).
    pub next_log_key: u64,
    /// Sequence number of the latest stable checkpoint.
    pub stable_seq: Option<u64>,
    pub chain: ChainState,
}

impl WriteState {
    /// Whether position `seq` is covered by the stable checkpoint (PBFT §4.3:
    /// messages below the low watermark are discarded).
    fn below_stable(&self, seq: u64) -> bool {
        self.stable_seq.is_some_and(|s| seq < s)
    }
}

/// Records that were not written because they carried nothing new.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SkipCounts {
    /// Below the stable checkpoint (or the ledger base) on arrival.
    pub obsolete: u64,
    /// A decided cell already in the ledger with the same digest.
    pub duplicate: u64,
    /// Decided cells below a stable checkpoint that came in the same
    /// hand-over, written to the ledger without their batch (the chain needs
    /// only cell and digest) and pruned before the commit (`Writer::plan`;
    /// only where the ledger is pruned at stable checkpoints).
    pub superseded: u64,
}

pub(crate) struct Writer<'txn> {
    layout: Layout,
    /// Prune the ledger below each new stable checkpoint.
    prune_at_stable: bool,
    pub state: WriteState,
    pub skipped: SkipCounts,
    /// Cells this transaction decides, and their digests: an accepted batch
    /// among them is stored once, in the ledger (`plan`).
    decided_here: BTreeMap<Cell, Digest>,
    /// The highest stable checkpoint this transaction installs (0: none):
    /// log entries below it would be truncated by the same transaction, and
    /// (pruning) the ledger's batches below it removed (`plan`).
    superseded_below: u64,
    log: Table<'txn, u64, &'static [u8]>,
    checkpoints: Table<'txn, u64, &'static [u8]>,
    ledger: Table<'txn, u64, &'static [u8]>,
    chain: Table<'txn, u64, &'static [u8]>,
    meta: Table<'txn, &'static str, &'static [u8]>,
}

impl<'txn> Writer<'txn> {
    pub fn open(
        txn: &'txn WriteTransaction,
        layout: Layout,
        state: WriteState,
        prune_at_stable: bool,
    ) -> Result<Writer<'txn>> {
        Ok(Writer {
            layout,
            prune_at_stable,
            state,
            skipped: SkipCounts::default(),
            decided_here: BTreeMap::new(),
            superseded_below: 0,
            log: txn.open_table(LOG)?,
            checkpoints: txn.open_table(CHECKPOINTS)?,
            ledger: txn.open_table(LEDGER)?,
            chain: txn.open_table(CHAIN)?,
            meta: txn.open_table(META)?,
        })
    }

    /// Look at this transaction's `records` before applying them.
    ///
    /// An `Accepted` record of a cell they decide with the same digest is
    /// logged as a reference to the ledger entry the same transaction writes
    /// (`LogEntry::AcceptedDecided`). A `Decided` that turns out obsolete
    /// writes no entry, but then its cell is below the stable checkpoint and
    /// the reference is truncated with it (the ledger's base never passes
    /// the stable checkpoint).
    ///
    /// A stable checkpoint among them supersedes what lies below it. The
    /// materializer already drops the `Accepted` and `Prepared` records it
    /// would truncate (`drop_superseded`); a `Decided` one must still extend
    /// the ledger's hash chain, but when pruning, its ledger entry is removed
    /// before the transaction commits, so it is written with the cell and
    /// digest the chain needs and without its batch. A replica hands its
    /// records over at each checkpoint, so in the steady state nearly every
    /// batch is written once, to the write-ahead log (issue 13 item 2).
    pub fn plan(&mut self, records: &[PersistRecord]) {
        let stable = self.state.stable_seq.unwrap_or(0);
        for r in records {
            match r {
                PersistRecord::Decided { cell, digest, .. } => {
                    self.decided_here.insert(*cell, *digest);
                }
                PersistRecord::Stable { cert, .. } if cert.seq.0 > stable => {
                    self.superseded_below = self.superseded_below.max(cert.seq.0);
                }
                _ => {}
            }
        }
    }

    /// Whether this transaction's own checkpoint covers `seq` (`plan`).
    fn superseded(&self, seq: u64) -> bool {
        seq < self.superseded_below
    }

    /// Record that the write-ahead log's segments below `segment` are in the
    /// tables once this transaction commits.
    pub fn set_wal_segment(&mut self, segment: u64) -> Result<()> {
        self.meta.insert(META_WAL, segment.to_le_bytes().as_slice())?;
        Ok(())
    }

    /// Persist the chain position with the entries it describes.
    pub fn finish(mut self) -> Result<(WriteState, SkipCounts)> {
        if self.prune_at_stable && self.superseded_below > 0 {
            // The batches `decide` left out must have been pruned with their
            // cells: one committed would replay as an empty batch. Checked in
            // release too (one range seek per hand-over); aborts the commit.
            if let Some(left) = self.ledger.range(..self.superseded_below)?.next() {
                let seq = left?.0.value();
                debug_assert!(
                    false,
                    "ledger entry #{seq} without its batch outlived the checkpoint"
                );
                return Err(corrupt(
                    "ledger",
                    seq,
                    "an entry written without its batch outlived its checkpoint",
                ));
            }
        }
        debug_assert!(self.state.chain.base_seq <= self.state.chain.next_seq);
        debug_assert!(self.state.stable_seq.unwrap_or(0) <= self.state.chain.next_seq);
        let chain = encode(&self.state.chain);
        self.meta.insert(META_CHAIN, chain.as_slice())?;
        Ok((self.state, self.skipped))
    }

    pub fn apply(&mut self, r: &PersistRecord) -> Result<()> {
        match r {
            PersistRecord::View { .. }
            | PersistRecord::DispelSnapshot { .. }
            | PersistRecord::DispelInput { .. }
            | PersistRecord::TimeoutCert { .. } => self.push_log(&LogEntryRef::Record(r)),
            PersistRecord::Accepted {
                lane,
                view,
                slot,
                digest,
                ..
            } => {
                let seq = self.layout.seq_of(*lane, *slot)?;
                let cell = Cell {
                    lane: *lane,
                    slot: *slot,
                };
                if self.state.below_stable(seq) || self.decided_here.get(&cell) != Some(digest) {
                    return self.push_log_unless_obsolete(seq, r);
                }
                self.push_log(&LogEntryRef::AcceptedDecided(AcceptedHead {
                    lane: *lane,
                    view: *view,
                    slot: *slot,
                    digest: *digest,
                }))
            }
            PersistRecord::Prepared { cert } => {
                let seq = self.layout.seq_of(cert.lane, cert.slot)?;
                self.push_log_unless_obsolete(seq, r)
            }
            PersistRecord::Decided { cell, digest, batch } => self.decide(*cell, *digest, batch),
            PersistRecord::Stable { cert, snapshot } => self.stabilize(cert, snapshot),
        }
    }

    fn push_log_unless_obsolete(&mut self, seq: u64, r: &PersistRecord) -> Result<()> {
        if self.state.below_stable(seq) {
            self.skipped.obsolete += 1;
            return Ok(());
        }
        self.push_log(&LogEntryRef::Record(r))
    }

    fn push_log(&mut self, e: &LogEntryRef<'_>) -> Result<()> {
        let key = self.state.next_log_key;
        self.log.insert(key, encode(e).as_slice())?;
        self.state.next_log_key = key
            .checked_add(1)
            .ok_or_else(|| corrupt("log", key, "log key space exhausted"))?;
        Ok(())
    }

    /// A decided cell goes to the ledger once (the batch is stored there only);
    /// the log keeps a reference so replay sees it in its original place.
    fn decide(&mut self, cell: Cell, digest: Digest, batch: &Batch) -> Result<()> {
        debug_assert_eq!(batch.digest(), digest, "decided batch does not match its digest");
        let seq = self.layout.seq_of_cell(cell)?;
        if let Some(v) = self.ledger.get(seq)? {
            let (stored_cell, stored) = decode_ledger_head(seq, v.value())?;
            if stored_cell != cell {
                return Err(corrupt(
                    "ledger",
                    seq,
                    format!("holds {stored_cell:?}, expected {cell:?}"),
                ));
            }
            if stored != digest {
                return Err(StoreError::LedgerConflict {
                    seq,
                    stored,
                    new: digest,
                });
            }
            self.skipped.duplicate += 1;
            return Ok(());
        }
        let chain = self.state.chain;
        if seq < chain.base_seq {
            // Pruned, or below a checkpoint reached by state transfer.
            self.skipped.obsolete += 1;
            return Ok(());
        }
        if seq < chain.next_seq {
            return Err(corrupt("ledger", seq, "chained position has no entry"));
        }
        // Below this transaction's own checkpoint the prune removes the
        // entry before the commit: the chain needs its cell and digest only.
        let none = Batch::noop();
        let stored = if self.prune_at_stable && self.superseded(seq) {
            self.skipped.superseded += 1;
            &none
        } else {
            batch
        };
        let entry = encode(&LedgerEntryRef {
            cell,
            digest,
            batch: stored,
        });
        self.ledger.insert(seq, entry.as_slice())?;
        self.advance_chain()?;
        if self.state.below_stable(seq) || self.superseded(seq) {
            return Ok(());
        }
        self.push_log(&LogEntryRef::Decided { cell, digest })
    }

    /// Chain every entry that is now contiguous with the head.
    fn advance_chain(&mut self) -> Result<()> {
        loop {
            let next = self.state.chain.next_seq;
            let (cell, digest) = match self.ledger.get(next)? {
                Some(v) => decode_ledger_head(next, v.value())?,
                None => return Ok(()),
            };
            let h = self.state.chain.push(cell, &digest);
            self.chain.insert(next, h.as_bytes().as_slice())?;
        }
    }

    /// A stable checkpoint: keep it (and the previous one), then drop what it
    /// makes obsolete (PBFT §4.3 garbage collection).
    fn stabilize(&mut self, cert: &CheckpointCert, snapshot: &Bytes) -> Result<()> {
        let seq = cert.seq.0;
        if self.state.stable_seq.is_some_and(|s| s >= seq) {
            // Never move the checkpoint backwards.
            self.skipped.obsolete += 1;
            return Ok(());
        }
        self.checkpoints
            .insert(seq, encode(&CheckpointRef { cert, snapshot }).as_slice())?;
        while self.checkpoints.len()? > CHECKPOINTS_KEPT {
            self.checkpoints.pop_first()?;
        }
        self.state.stable_seq = Some(seq);
        self.truncate_log(seq)?;
        if self.state.chain.next_seq < seq {
            self.jump_chain(cert)?;
        } else if self.prune_at_stable {
            // The checkpoint's state covers these cells; recovery replays
            // only the cells above it.
            self.prune_below(seq)?;
        }
        Ok(())
    }

    /// Drop log entries for cells below `stable`, every `View` record but
    /// the highest per lane (a lane's view only grows; the highest is its
    /// state), and every `TimeoutCert` but the latest per lane.
    fn truncate_log(&mut self, stable: u64) -> Result<()> {
        let mut drop_keys = Vec::new();
        let mut latest_view: BTreeMap<LaneId, (View, u64)> = BTreeMap::new();
        let mut latest_cert: BTreeMap<LaneId, u64> = BTreeMap::new();
        // `dispel`: the latest DBFT snapshot covers every earlier DBFT record.
        let mut dispel_keys: Vec<u64> = Vec::new();
        let mut latest_snapshot: Option<u64> = None;
        for item in self.log.iter()? {
            let (k, v) = item?;
            let key = k.value();
            let seq = match decode::<LogEntry>("log", key, v.value())? {
                LogEntry::Record(PersistRecord::View { lane, view }) => {
                    match latest_view.insert(lane, (view, key)) {
                        Some((old, old_key)) if old > view => {
                            latest_view.insert(lane, (old, old_key));
                            drop_keys.push(key);
                        }
                        Some((_, old_key)) => drop_keys.push(old_key),
                        None => {}
                    }
                    continue;
                }
                // Statements only grow: the latest certificate of a lane
                // covers the earlier ones.
                LogEntry::Record(PersistRecord::TimeoutCert { lane, .. }) => {
                    if let Some(old_key) = latest_cert.insert(lane, key) {
                        drop_keys.push(old_key);
                    }
                    continue;
                }
                LogEntry::Record(PersistRecord::DispelSnapshot { .. }) => {
                    latest_snapshot = Some(key);
                    dispel_keys.push(key);
                    continue;
                }
                LogEntry::Record(PersistRecord::DispelInput { .. }) => {
                    dispel_keys.push(key);
                    continue;
                }
                LogEntry::Record(PersistRecord::Accepted { lane, slot, .. }) => {
                    self.layout.seq_of(lane, slot)?
                }
                LogEntry::Record(PersistRecord::Prepared { cert }) => {
                    self.layout.seq_of(cert.lane, cert.slot)?
                }
                LogEntry::Decided { cell, .. } => self.layout.seq_of_cell(cell)?,
                LogEntry::AcceptedDecided(a) => self.layout.seq_of(a.lane, a.slot)?,
                LogEntry::Record(PersistRecord::Decided { .. } | PersistRecord::Stable { .. }) => {
                    return Err(corrupt("log", key, "record kind never stored in the log"));
                }
            };
            if seq < stable {
                drop_keys.push(key);
            }
        }
        if let Some(last) = latest_snapshot {
            drop_keys.extend(dispel_keys.into_iter().filter(|k| *k < last));
        }
        for key in drop_keys {
            self.log.remove(key)?;
        }
        Ok(())
    }

    /// State transfer jumped over cells this replica never decided: the
    /// contiguous history ends, so the ledger restarts at the checkpoint,
    /// chained from an anchor of the certified state.
    fn jump_chain(&mut self, cert: &CheckpointCert) -> Result<()> {
        let seq = cert.seq.0;
        tracing::info!(
            from = self.state.chain.next_seq,
            to = seq,
            "ledger restarts at a checkpoint reached by state transfer"
        );
        self.remove_below(seq)?;
        self.state.chain = ChainState::anchored(cert);
        self.advance_chain()
    }

    /// Drop decided cells below `seq`, keeping the chain verifiable from there.
    /// Only up to the stable checkpoint: recovery still needs the cells above.
    pub fn prune_below(&mut self, seq: u64) -> Result<u64> {
        let stable = self.state.stable_seq.unwrap_or(0);
        if seq > stable {
            return Err(StoreError::PruneAboveStable {
                requested: seq,
                stable,
            });
        }
        let chain = self.state.chain;
        if seq <= chain.base_seq {
            return Ok(0);
        }
        debug_assert!(
            seq <= chain.next_seq,
            "the chain always reaches the stable checkpoint"
        );
        let prev = match self.chain.get(seq - 1)? {
            Some(v) => decode_hash("chain", seq - 1, v.value())?,
            None => return Err(corrupt("chain", seq - 1, "chained position has no hash")),
        };
        let removed = self.remove_below(seq)?;
        self.state.chain.base_seq = seq;
        self.state.chain.base_hash = prev;
        Ok(removed)
    }

    /// Remove ledger and chain entries below `seq`; returns the ledger entries removed.
    fn remove_below(&mut self, seq: u64) -> Result<u64> {
        let mut removed = 0;
        for item in self.ledger.extract_from_if(..seq, |_, _| true)? {
            item?;
            removed += 1;
        }
        for item in self.chain.extract_from_if(..seq, |_, _| true)? {
            item?;
        }
        Ok(removed)
    }
}
