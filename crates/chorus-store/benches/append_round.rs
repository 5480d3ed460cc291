//! What the store costs per consensus round, as the replica's core thread
//! drives it: one `append` of the round's records (an `Accepted` carrying
//! the batch, a `Prepared`, a `Decided` carrying the same batch), then `sync`,
//! with a stable checkpoint every `CHECKPOINT_EVERY` rounds (issue 13 item 2).
//!
//! `cargo bench -p chorus-store --bench append_round` prints µs per round
//! for each fsync policy. Plain timing (no criterion): a round's cost is
//! dominated by system calls, and the figure compared is the ratio of two
//! binaries run alternately (BENCHMARKS.md).

use bytes::Bytes;
use chorus_core::{
    Batch, Cell, ClientId, ClusterTag, Digest, Identity, LaneId, Prepare, PreparedCert, ReplicaId, Request,
    RequestSeq, Slot, View,
};
use chorus_order::PersistRecord;
use chorus_store::{FsyncPolicy, Store};

#[path = "../tests/common/mod.rs"]
mod common;
use std::time::Instant;

/// Requests per batch and bytes per request: the profile's average batch
/// (docs/performance.md) with the 512-byte requests.
const BATCH_REQUESTS: usize = 23;
const REQUEST_BYTES: usize = 512;
const CHECKPOINT_EVERY: u64 = 128;

/// Distinct request sets signed once (signing dominates otherwise); each
/// slot's batch is still distinct (`time_ms`), as the store sees it.
const REQUEST_SETS: u64 = 32;

fn request_set(set: u64) -> Vec<Request> {
    let id = Identity::from_seed(b"bench client");
    let cluster = ClusterTag::from_digest(Digest::of(b"bench"));
    (0..BATCH_REQUESTS)
        .map(|i| {
            let mut op = vec![0u8; REQUEST_BYTES];
            op[..8].copy_from_slice(&set.to_le_bytes());
            op[8] = i as u8;
            Request::with_signature(
                &cluster,
                ClientId(1),
                RequestSeq(set * 100 + i as u64),
                0,
                Bytes::from(op),
                &id,
            )
        })
        .collect()
}

fn batch(sets: &[Vec<Request>], slot: u64) -> Batch {
    Batch {
        requests: sets[(slot % REQUEST_SETS) as usize].clone(),
        time_ms: slot,
    }
}

fn prepared(slot: u64, digest: Digest, signer: &Identity) -> PersistRecord {
    let prepares = (1..3)
        .map(|r| Prepare {
            lane: LaneId(0),
            view: View(0),
            slot: Slot(slot),
            digest,
            replica: ReplicaId(r),
            sig: signer.sign(b"prepare"),
        })
        .collect();
    PersistRecord::Prepared {
        cert: PreparedCert {
            lane: LaneId(0),
            view: View(0),
            slot: Slot(slot),
            digest,
            pre_prepare_sig: signer.sign(b"pre-prepare"),
            prepares,
        },
    }
}

fn stable(seq: u64) -> PersistRecord {
    PersistRecord::Stable {
        cert: common::cert(seq),
        snapshot: Bytes::from(vec![7u8; 64 << 10]),
    }
}

fn main() {
    let rounds: u64 = std::env::var("ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4096);
    let signer = Identity::from_seed(b"bench replica");
    let sets: Vec<Vec<Request>> = (0..REQUEST_SETS).map(request_set).collect();
    // Built before timing: the store's cost only.
    let rounds_records: Vec<Vec<PersistRecord>> = (0..rounds)
        .map(|slot| {
            let b = std::sync::Arc::new(batch(&sets, slot));
            let d = b.digest();
            let mut rs = vec![
                PersistRecord::Accepted {
                    lane: LaneId(0),
                    view: View(0),
                    slot: Slot(slot),
                    digest: d,
                    batch: b.clone(),
                },
                prepared(slot, d, &signer),
                PersistRecord::Decided {
                    cell: Cell {
                        lane: LaneId(0),
                        slot: Slot(slot),
                    },
                    digest: d,
                    batch: b,
                },
            ];
            if slot > 0 && slot % CHECKPOINT_EVERY == 0 {
                rs.push(stable(slot));
            }
            rs
        })
        .collect();
    for policy in [FsyncPolicy::Off, FsyncPolicy::Batch] {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut store = Store::open(dir.path(), policy, 1).expect("open");
        let start = Instant::now();
        let mut worst = std::time::Duration::ZERO;
        for rs in &rounds_records {
            let round = Instant::now();
            store.append(rs).expect("append");
            store.sync().expect("sync");
            worst = worst.max(round.elapsed());
        }
        let elapsed = start.elapsed();
        store.close().expect("close");
        println!(
            "fsync={policy}: {rounds} rounds, {:.1} µs per round, slowest {:.1} ms ({} requests of {} B per batch)",
            elapsed.as_secs_f64() * 1e6 / rounds as f64,
            worst.as_secs_f64() * 1e3,
            BATCH_REQUESTS,
            REQUEST_BYTES
        );
    }
}
