//! Record builders shared by the integration tests.
#![allow(dead_code)]

use bytes::Bytes;
use chorus_core::{
    Batch, Cell, CheckpointCert, CheckpointVote, ClientId, Digest, Identity, LaneId, Prepare, PreparedCert,
    ReplicaId, Request, RequestSeq, Seq, Slot, View,
};
use chorus_order::PersistRecord;

pub fn cell(lane: u32, slot: u64) -> Cell {
    Cell {
        lane: LaneId(lane),
        slot: Slot(slot),
    }
}

/// A batch of `n` signed requests whose content depends on `tag`.
pub fn batch(tag: u64, n: usize) -> Batch {
    let id = Identity::from_seed(b"client");
    let requests = (0..n)
        .map(|i| {
            let op = Bytes::from(format!("op-{tag}-{i}").into_bytes());
            let cluster = chorus_core::ClusterTag::from_digest(chorus_core::Digest::of(b"store tests"));
            Request::with_signature(
                &cluster,
                ClientId(tag % 7),
                RequestSeq(tag * 100 + i as u64),
                0,
                op,
                &id,
            )
        })
        .collect();
    Batch { requests, time_ms: 0 }
}

pub fn view(lane: u32, v: u64) -> PersistRecord {
    PersistRecord::View {
        lane: LaneId(lane),
        view: View(v),
    }
}

pub fn accepted(lane: u32, v: u64, slot: u64) -> PersistRecord {
    let b = batch(slot * 10 + u64::from(lane), 2);
    PersistRecord::Accepted {
        lane: LaneId(lane),
        view: View(v),
        slot: Slot(slot),
        digest: b.digest(),
        batch: std::sync::Arc::new(b),
    }
}

pub fn prepared(lane: u32, v: u64, slot: u64) -> PersistRecord {
    let signer = Identity::from_seed(b"replica");
    let digest = batch(slot * 10 + u64::from(lane), 2).digest();
    let prepares = (1..3)
        .map(|r| Prepare {
            lane: LaneId(lane),
            view: View(v),
            slot: Slot(slot),
            digest,
            replica: ReplicaId(r),
            sig: signer.sign(b"prepare"),
        })
        .collect();
    PersistRecord::Prepared {
        cert: PreparedCert {
            lane: LaneId(lane),
            view: View(v),
            slot: Slot(slot),
            digest,
            pre_prepare_sig: signer.sign(b"pre-prepare"),
            prepares,
        },
    }
}

/// The decided record of `cell`, with the batch `accepted` used for it.
pub fn decided(lane: u32, slot: u64) -> PersistRecord {
    decided_with(lane, slot, batch(slot * 10 + u64::from(lane), 2))
}

pub fn decided_with(lane: u32, slot: u64, b: Batch) -> PersistRecord {
    PersistRecord::Decided {
        cell: cell(lane, slot),
        digest: b.digest(),
        batch: std::sync::Arc::new(b),
    }
}

pub fn cert(seq: u64) -> CheckpointCert {
    let state_digest = Digest::of(&seq.to_le_bytes());
    let votes = (0..3)
        .map(|r| {
            let id = Identity::from_seed(&[r as u8]);
            CheckpointVote {
                seq: Seq(seq),
                state_digest,
                replica: ReplicaId(r),
                sig: id
                    .sign(CheckpointVote::signing_digest(Seq(seq), &state_digest, ReplicaId(r)).as_bytes()),
            }
        })
        .collect();
    CheckpointCert {
        seq: Seq(seq),
        state_digest,
        votes,
    }
}

pub fn stable(seq: u64) -> PersistRecord {
    PersistRecord::Stable {
        cert: cert(seq),
        snapshot: Bytes::from(format!("state at {seq}").into_bytes()),
    }
}

pub fn dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}
