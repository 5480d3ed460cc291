//! Small records for the crate's unit tests (the integration tests have
//! their own builders in `tests/common`).

use bytes::Bytes;
use chorus_core::{Batch, Cell, CheckpointCert, Digest, LaneId, Seq, Slot, View};
use chorus_order::PersistRecord;

/// A batch distinct per slot (its digest covers `time_ms`).
pub(crate) fn batch_of(slot: u64) -> Batch {
    Batch {
        requests: vec![],
        time_ms: slot + 1,
    }
}

pub(crate) fn accepted(slot: u64) -> PersistRecord {
    let b = batch_of(slot);
    PersistRecord::Accepted {
        lane: LaneId(0),
        view: View(0),
        slot: Slot(slot),
        digest: b.digest(),
        batch: std::sync::Arc::new(b),
    }
}

pub(crate) fn decided(slot: u64) -> PersistRecord {
    let b = batch_of(slot);
    PersistRecord::Decided {
        cell: Cell {
            lane: LaneId(0),
            slot: Slot(slot),
        },
        digest: b.digest(),
        batch: std::sync::Arc::new(b),
    }
}

/// A stable checkpoint at `seq` (the store does not check its votes).
pub(crate) fn stable(seq: u64) -> PersistRecord {
    PersistRecord::Stable {
        cert: CheckpointCert {
            seq: Seq(seq),
            state_digest: Digest::of(b"s"),
            votes: vec![],
        },
        snapshot: Bytes::new(),
    }
}
