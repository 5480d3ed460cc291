//! The on-disk layout: table definitions, what each value holds, and the
//! total decoders for them. Every value is postcard (the wire codec's format).
//!
//! | table         | key                  | value                                   |
//! | ------------- | -------------------- | --------------------------------------- |
//! | `meta`        | name                 | format version, lane count, chain state, first unmaterialized WAL segment |
//! | `log`         | u64, append order    | `LogEntry`                              |
//! | `checkpoints` | checkpoint seq       | `(CheckpointCert, snapshot)`            |
//! | `ledger`      | global seq of a cell | `LedgerEntry` (cell, digest, batch)     |
//! | `chain`       | global seq of a cell | 32-byte chained entry hash              |

use crate::error::{Result, StoreError};
use bytes::Bytes;
use chorus_core::{Batch, Cell, CheckpointCert, Digest, LaneId, Slot, View};
use chorus_order::PersistRecord;
use redb::TableDefinition;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt::Display;

/// Bumped whenever the meaning of a stored byte changes. 2: the write-ahead
/// segment log (`wal.rs`) holds what the tables do not yet; a version-1
/// store (no segments) opens and is upgraded in place. 3: records an older
/// binary cannot decode may appear (`PersistRecord::TimeoutCert`); a
/// version-2 store opens and is marked 3, so an older binary refuses it by
/// its version instead of failing on the first such record as corrupt. 4:
/// an accepted batch that is also decided is kept once, in the ledger, and
/// the log refers to it (`LogEntry::AcceptedDecided`); a version-3 store
/// opens and is marked 4. 5: requests may carry `flags::DIGEST_SHA256`,
/// whose digests an older binary would recompute with BLAKE3 and report as
/// tampering; a version-2, -3 or -4 store opens and is marked 5. 6: every
/// log segment starts with a `SegmentStart` frame naming where the one
/// before it ended (an older binary cannot read it); a version-2 to -5
/// store opens and is marked 6, its segments without one replay as before.
pub const FORMAT_VERSION: u32 = 6;
/// The version before the segment log, upgraded on open.
pub(crate) const FORMAT_VERSION_PRE_WAL: u32 = 1;
/// The version before `TimeoutCert` records, upgraded on open.
pub(crate) const FORMAT_VERSION_PRE_TIMEOUT_CERT: u32 = 2;
/// The version before `LogEntry::AcceptedDecided`, upgraded on open.
pub(crate) const FORMAT_VERSION_PRE_ACCEPTED_REF: u32 = 3;
/// The version before SHA-256 request digests, upgraded on open.
pub(crate) const FORMAT_VERSION_PRE_SHA256: u32 = 4;
/// The version before `SegmentStart` frames, upgraded on open.
pub(crate) const FORMAT_VERSION_PRE_SEGMENT_START: u32 = 5;

pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
pub(crate) const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
pub(crate) const CHECKPOINTS: TableDefinition<u64, &[u8]> = TableDefinition::new("checkpoints");
pub(crate) const LEDGER: TableDefinition<u64, &[u8]> = TableDefinition::new("ledger");
pub(crate) const CHAIN: TableDefinition<u64, &[u8]> = TableDefinition::new("chain");

pub(crate) const META_VERSION: &str = "format_version";
pub(crate) const META_LANES: &str = "lanes";
pub(crate) const META_CHAIN: &str = "chain";
/// The first segment of the write-ahead log whose records are not yet in
/// the tables (segments below it are materialized and may be deleted).
pub(crate) const META_WAL: &str = "wal_segment";

/// Stable checkpoints kept: the latest, plus the one before it so a peer
/// that asked for the previous one can still be served while it catches up.
pub(crate) const CHECKPOINTS_KEPT: u64 = 2;

/// One protocol-log entry. `Record` never holds `Stable` (those live in
/// `checkpoints`) nor `Decided` (whose batch lives once, in `ledger`; the log
/// keeps only a reference so replay order is preserved).
#[derive(Debug, Deserialize)]
pub(crate) enum LogEntry {
    Record(PersistRecord),
    Decided {
        cell: Cell,
        digest: Digest,
    },
    /// A `PersistRecord::Accepted` whose batch the ledger holds (the same
    /// cell decided that digest): stored without the batch, which replay
    /// takes from the ledger. Before, the log held a second copy of every
    /// decided batch (docs/decisions.md, "The store writes a batch once").
    AcceptedDecided(AcceptedHead),
}

/// An `Accepted` record without its batch (`LogEntry::AcceptedDecided`).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct AcceptedHead {
    pub lane: LaneId,
    pub view: View,
    pub slot: Slot,
    pub digest: Digest,
}

/// Serialises exactly like `LogEntry`, without cloning the record's batch.
#[derive(Serialize)]
pub(crate) enum LogEntryRef<'a> {
    Record(&'a PersistRecord),
    Decided { cell: Cell, digest: Digest },
    AcceptedDecided(AcceptedHead),
}

/// One decided cell. Field order matters: `decode_ledger_head` reads only
/// the `(cell, digest)` prefix.
#[derive(Debug, Deserialize)]
pub(crate) struct LedgerEntry {
    pub cell: Cell,
    pub digest: Digest,
    pub batch: Batch,
}

#[derive(Serialize)]
pub(crate) struct LedgerEntryRef<'a> {
    pub cell: Cell,
    pub digest: Digest,
    pub batch: &'a Batch,
}

#[derive(Serialize)]
pub(crate) struct CheckpointRef<'a> {
    pub cert: &'a CheckpointCert,
    pub snapshot: &'a Bytes,
}

#[derive(Debug, Deserialize)]
pub(crate) struct CheckpointEntry {
    pub cert: CheckpointCert,
    pub snapshot: Bytes,
}

/// Where the hash chain over the ledger stands. Positions `[base_seq,
/// next_seq)` are present in `ledger` and `chain`; `base_hash` is the hash
/// the entry at `base_seq` chains from (genesis, the last pruned entry, or an
/// anchor derived from a checkpoint the replica jumped to).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ChainState {
    pub base_seq: u64,
    pub base_hash: Digest,
    pub next_seq: u64,
    pub head: Digest,
}

/// The COP mapping of a cell to its global position (COP §4.1: global seq `c`
/// is decided in lane `c mod P`, slot `c div P`); agrees with
/// `ClusterConfig::seq_of`, and with the single lane of `pbft` (P = 1).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub lanes: u32,
}

impl Layout {
    pub fn seq_of(&self, lane: LaneId, slot: Slot) -> Result<u64> {
        if lane.0 >= self.lanes {
            return Err(StoreError::LaneOutOfRange {
                lane: lane.0,
                lanes: self.lanes,
            });
        }
        slot.0
            .checked_mul(u64::from(self.lanes))
            .and_then(|s| s.checked_add(u64::from(lane.0)))
            .ok_or(StoreError::SeqOverflow {
                lane: lane.0,
                slot: slot.0,
            })
    }

    pub fn seq_of_cell(&self, cell: Cell) -> Result<u64> {
        self.seq_of(cell.lane, cell.slot)
    }
}

pub(crate) fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    chorus_core::encode(v)
}

/// Decode exactly one `T`; anything else is corruption of `table[key]`.
pub(crate) fn decode<T: DeserializeOwned>(table: &'static str, key: impl Display, bytes: &[u8]) -> Result<T> {
    match postcard::take_from_bytes::<T>(bytes) {
        Ok((v, [])) => Ok(v),
        Ok((_, rest)) => Err(corrupt(table, key, format!("{} trailing bytes", rest.len()))),
        Err(e) => Err(corrupt(table, key, format!("does not decode: {e}"))),
    }
}

/// The `(cell, digest)` prefix of a ledger value, without decoding the batch.
pub(crate) fn decode_ledger_head(key: u64, bytes: &[u8]) -> Result<(Cell, Digest)> {
    postcard::take_from_bytes::<(Cell, Digest)>(bytes)
        .map(|(v, _)| v)
        .map_err(|e| corrupt("ledger", key, format!("does not decode: {e}")))
}

pub(crate) fn decode_hash(table: &'static str, key: u64, bytes: &[u8]) -> Result<Digest> {
    let arr: [u8; 32] = bytes
        .try_into()
        .map_err(|_| corrupt(table, key, format!("hash of {} bytes, expected 32", bytes.len())))?;
    Ok(Digest(arr))
}

pub(crate) fn decode_u32(table: &'static str, key: &str, bytes: &[u8]) -> Result<u32> {
    let arr: [u8; 4] = bytes
        .try_into()
        .map_err(|_| corrupt(table, key, format!("{} bytes, expected 4", bytes.len())))?;
    Ok(u32::from_le_bytes(arr))
}

pub(crate) fn corrupt(table: &'static str, key: impl Display, reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        table,
        key: key.to_string(),
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{ClusterConfig, OrderingMode, ProtocolParams, Seq};

    #[test]
    fn layout_agrees_with_the_cluster_mapping() {
        for (mode, pillars) in [(OrderingMode::Pbft, 1), (OrderingMode::Cop, 4)] {
            let cfg = ClusterConfig {
                params: ProtocolParams {
                    mode,
                    pillars,
                    ..ProtocolParams::default()
                },
                replicas: vec![],
                clients: vec![],
            };
            let layout = Layout { lanes: cfg.lanes() };
            for s in 0..50 {
                let cell = cfg.cell_of(Seq(s));
                assert_eq!(layout.seq_of_cell(cell).unwrap(), cfg.seq_of(cell).0);
            }
        }
    }

    #[test]
    fn layout_rejects_foreign_lanes_and_overflow() {
        let layout = Layout { lanes: 3 };
        assert!(matches!(
            layout.seq_of(LaneId(3), Slot(0)),
            Err(StoreError::LaneOutOfRange { lane: 3, lanes: 3 })
        ));
        assert!(matches!(
            layout.seq_of(LaneId(1), Slot(u64::MAX / 2)),
            Err(StoreError::SeqOverflow { .. })
        ));
    }

    #[test]
    fn ledger_head_prefix_decodes_from_a_full_entry() {
        let cell = Cell {
            lane: LaneId(1),
            slot: Slot(7),
        };
        let digest = Digest::of(b"x");
        let batch = Batch::noop();
        let bytes = encode(&LedgerEntryRef {
            cell,
            digest,
            batch: &batch,
        });
        assert_eq!(decode_ledger_head(9, &bytes).unwrap(), (cell, digest));
        let full: LedgerEntry = decode("ledger", 9, &bytes).unwrap();
        assert_eq!((full.cell, full.digest, full.batch), (cell, digest, batch));
    }

    /// What a version-3 store holds decodes the same, and the reference
    /// entry is a new variant after them (a version-3 binary refuses the
    /// store by its version before it could misread one). Pinned bytes: a
    /// change here breaks stores already written.
    #[test]
    fn log_entries_keep_their_encoding() {
        let digest = Digest([7; 32]);
        let cell = Cell {
            lane: LaneId(1),
            slot: Slot(2),
        };
        let decided = encode(&LogEntryRef::Decided { cell, digest });
        assert_eq!(&decided[..3], &[1, 1, 2], "variant 1, cell (1, 2)");
        assert!(
            matches!(decode("log", 0, &decided).unwrap(), LogEntry::Decided { cell: c, digest: d } if c == cell && d == digest)
        );
        let head = || AcceptedHead {
            lane: LaneId(1),
            view: View(3),
            slot: Slot(2),
            digest,
        };
        let reference = encode(&LogEntryRef::AcceptedDecided(head()));
        assert_eq!(&reference[..4], &[2, 1, 3, 2], "variant 2, lane, view, slot");
        assert_eq!(reference.len(), 4 + 32);
        match decode("log", 0, &reference).unwrap() {
            LogEntry::AcceptedDecided(a) => {
                assert_eq!(
                    (a.lane, a.view, a.slot, a.digest),
                    (LaneId(1), View(3), Slot(2), digest)
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn garbage_is_reported_with_its_key() {
        let e = decode::<LedgerEntry>("ledger", 42, &[0xff, 0xff, 0xff]).unwrap_err();
        match e {
            StoreError::Corrupt { table, key, .. } => assert_eq!((table, key.as_str()), ("ledger", "42")),
            other => panic!("unexpected {other:?}"),
        }
        let mut bytes = encode(&7u32);
        bytes.push(0);
        assert!(matches!(
            decode::<u32>("meta", "x", &bytes),
            Err(StoreError::Corrupt { .. })
        ));
        assert!(decode_hash("chain", 1, &[0; 31]).is_err());
        assert!(decode_u32("meta", "lanes", &[0; 3]).is_err());
    }
}
