//! Read paths: what recovery replays, the ledger check, and lookups. All run in
//! one read transaction, so they see one committed state.

use crate::chain::entry_hash;
use crate::error::{Result, StoreError};
use crate::schema::{
    corrupt, decode, decode_hash, AcceptedHead, ChainState, CheckpointEntry, Layout, LedgerEntry, LogEntry,
    CHAIN, CHECKPOINTS, LEDGER, LOG,
};
use bytes::Bytes;
use chorus_core::{Batch, Cell, CheckpointCert, Digest};
use chorus_order::PersistRecord;
use redb::{ReadTransaction, ReadableTable};
use std::sync::Arc;

/// What `Replica::recover` replays: the latest stable checkpoint first, then
/// the protocol log in append order, decided cells filled in from the ledger.
pub(crate) fn load(txn: &ReadTransaction, layout: Layout) -> Result<Vec<PersistRecord>> {
    let mut out = Vec::new();
    if let Some((cert, snapshot)) = latest_checkpoint(txn)? {
        out.push(PersistRecord::Stable { cert, snapshot });
    }
    let log = txn.open_table(LOG)?;
    let ledger = txn.open_table(LEDGER)?;
    for item in log.iter()? {
        let (k, v) = item?;
        let key = k.value();
        match decode::<LogEntry>("log", key, v.value())? {
            LogEntry::Record(
                r @ (PersistRecord::View { .. }
                | PersistRecord::Accepted { .. }
                | PersistRecord::Prepared { .. }
                | PersistRecord::DispelSnapshot { .. }
                | PersistRecord::DispelInput { .. }
                | PersistRecord::TimeoutCert { .. }),
            ) => out.push(r),
            LogEntry::Record(_) => return Err(corrupt("log", key, "record kind never stored in the log")),
            LogEntry::Decided { cell, digest } => {
                let batch = Arc::new(decided_batch(&ledger, layout, key, cell, digest)?);
                out.push(PersistRecord::Decided { cell, digest, batch });
            }
            LogEntry::AcceptedDecided(AcceptedHead {
                lane,
                view,
                slot,
                digest,
            }) => {
                let batch = Arc::new(decided_batch(&ledger, layout, key, Cell { lane, slot }, digest)?);
                out.push(PersistRecord::Accepted {
                    lane,
                    view,
                    slot,
                    digest,
                    batch,
                });
            }
        }
    }
    Ok(out)
}

/// The batch the ledger holds for `cell`, which log entry `key` refers to;
/// a missing or different entry is corruption.
fn decided_batch(
    ledger: &redb::ReadOnlyTable<u64, &[u8]>,
    layout: Layout,
    key: u64,
    cell: Cell,
    digest: Digest,
) -> Result<Batch> {
    let seq = layout
        .seq_of_cell(cell)
        .map_err(|e| corrupt("log", key, format!("bad cell: {e}")))?;
    let Some(v) = ledger.get(seq)? else {
        return Err(corrupt(
            "log",
            key,
            format!("decided #{seq} is missing from the ledger"),
        ));
    };
    let e: LedgerEntry = decode("ledger", seq, v.value())?;
    if e.cell != cell || e.digest != digest {
        return Err(corrupt("ledger", seq, format!("does not match log entry {key}")));
    }
    Ok(e.batch)
}

pub(crate) fn latest_checkpoint(txn: &ReadTransaction) -> Result<Option<(CheckpointCert, Bytes)>> {
    let table = txn.open_table(CHECKPOINTS)?;
    let Some((k, v)) = table.last()? else {
        return Ok(None);
    };
    let key = k.value();
    let e: CheckpointEntry = decode("checkpoints", key, v.value())?;
    if e.cert.seq.0 != key {
        return Err(corrupt(
            "checkpoints",
            key,
            format!("holds the checkpoint of {:?}", e.cert.seq),
        ));
    }
    Ok(Some((e.cert, e.snapshot)))
}

pub(crate) fn ledger_entry(txn: &ReadTransaction, seq: u64) -> Result<Option<(Cell, Digest, Batch)>> {
    let ledger = txn.open_table(LEDGER)?;
    let Some(v) = ledger.get(seq)? else {
        return Ok(None);
    };
    let e: LedgerEntry = decode("ledger", seq, v.value())?;
    Ok(Some((e.cell, e.digest, e.batch)))
}

fn tampered(seq: u64, reason: impl Into<String>) -> StoreError {
    StoreError::LedgerTampered {
        seq,
        reason: reason.into(),
    }
}

/// Recompute the hash chain over `[base_seq, next_seq)` and check every entry
/// against it, its position and its batch; entries not yet chained (decided
/// above a gap) must sit at their position and match their batch too.
/// Returns the number of chained entries checked.
pub(crate) fn verify_ledger(txn: &ReadTransaction, layout: Layout, chain: ChainState) -> Result<u64> {
    let ledger = txn.open_table(LEDGER)?;
    let hashes = txn.open_table(CHAIN)?;
    if let Some((k, _)) = ledger.first()? {
        if k.value() < chain.base_seq {
            return Err(tampered(k.value(), "entry below the ledger base"));
        }
    }
    if let Some((k, _)) = hashes.first()? {
        if k.value() < chain.base_seq {
            return Err(tampered(k.value(), "hash below the ledger base"));
        }
    }
    if let Some((k, _)) = hashes.last()? {
        if k.value() >= chain.next_seq {
            return Err(tampered(k.value(), "hash beyond the chain head"));
        }
    }
    let mut prev = chain.base_hash;
    let mut seen = 0u64;
    for item in ledger.iter()? {
        let (k, v) = item?;
        let seq = k.value();
        let e: LedgerEntry = decode("ledger", seq, v.value())?;
        if layout.seq_of_cell(e.cell).ok() != Some(seq) {
            return Err(tampered(
                seq,
                format!("{:?} stored at the wrong position", e.cell),
            ));
        }
        if e.batch.digest() != e.digest {
            return Err(tampered(seq, "batch does not match its digest"));
        }
        if seq >= chain.next_seq {
            continue;
        }
        if seq != chain.base_seq + seen {
            return Err(tampered(chain.base_seq + seen, "chained entry missing"));
        }
        let Some(h) = hashes.get(seq)? else {
            return Err(tampered(seq, "chained entry has no hash"));
        };
        let stored = decode_hash("chain", seq, h.value())?;
        let expect = entry_hash(&prev, e.cell, &e.digest);
        if stored != expect {
            return Err(tampered(seq, "hash chain broken"));
        }
        prev = expect;
        seen += 1;
    }
    if chain.base_seq + seen != chain.next_seq {
        return Err(tampered(chain.base_seq + seen, "chained entry missing"));
    }
    if prev != chain.head {
        return Err(tampered(chain.next_seq, "chain head does not match the entries"));
    }
    Ok(seen)
}
