//! Storage stays proportional to the state plus the log since the stable
//! checkpoint (issue 8, finding 9): repeated checkpoints and catch-ups by
//! state transfer must not leave the ledger, the log or the file growing.

mod common;

use bytes::Bytes;
use chorus_order::PersistRecord;
use chorus_store::{FsyncPolicy, Store, StoreOptions, COMPACT_MIN_BYTES};
use common::*;

/// Positions between two checkpoints.
const K: u64 = 16;

fn snapshot(tag: u64, len: usize) -> Bytes {
    // Incompressible enough and different every time.
    let mut x = tag.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    Bytes::from(
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect::<Vec<u8>>(),
    )
}

fn stable_with(seq: u64, snapshot: Bytes) -> PersistRecord {
    PersistRecord::Stable {
        cert: cert(seq),
        snapshot,
    }
}

/// `rounds` rounds at one replica: K positions accepted, prepared and decided
/// (big batches), then a stable checkpoint; every fourth round instead a
/// catch-up, a large snapshot installed far ahead. Returns the stats after
/// each round.
fn run(s: &mut Store, rounds: u64) -> Vec<chorus_store::StoreStats> {
    let mut pos = 0;
    let mut stats = Vec::new();
    for r in 0..rounds {
        if r % 4 == 3 {
            pos += 10 * K;
            s.append(&[stable_with(pos, snapshot(r, 1 << 20))]).unwrap();
        } else {
            for seq in pos..pos + K {
                let b = std::sync::Arc::new(batch(seq, 16));
                s.append(&[
                    PersistRecord::Accepted {
                        lane: chorus_core::LaneId(0),
                        view: chorus_core::View(0),
                        slot: chorus_core::Slot(seq),
                        digest: b.digest(),
                        batch: b.clone(),
                    },
                    prepared(0, 0, seq),
                ])
                .unwrap();
                s.append(&[decided_with(0, seq, (*b).clone())]).unwrap();
            }
            pos += K;
            s.append(&[stable_with(pos, snapshot(r, 64 << 10))]).unwrap();
        }
        stats.push(s.stats().unwrap());
    }
    stats
}

#[test]
fn repeated_checkpoints_and_installs_keep_storage_bounded() {
    let d = dir();
    let opts = StoreOptions::new(FsyncPolicy::Batch, 1);
    let mut s = Store::open_with(d.path(), opts).unwrap();
    let stats = run(&mut s, 120);
    // Rows, after every round: nothing below the stable checkpoint is kept.
    let ledger = stats.iter().map(|s| s.ledger_entries).max().unwrap();
    assert!(ledger <= K, "the ledger reached {ledger} cells");
    let log = stats.iter().map(|s| s.log_records).max().unwrap();
    assert!(log <= 2 * K, "the log reached {log} records");
    assert_eq!(stats.last().unwrap().checkpoints, 2);
    // File: two checkpoints (1 MiB at most each) plus a log of K cells,
    // doubled for the compaction policy's slack, whatever the history.
    let peak_late = stats[60..].iter().map(|s| s.file_bytes).max().unwrap();
    let bound = (4 << 20) + 2 * COMPACT_MIN_BYTES;
    assert!(
        peak_late <= bound,
        "file reached {peak_late} bytes (bound {bound}); sizes: {:?}",
        stats.iter().map(|s| s.file_bytes).collect::<Vec<_>>()
    );
    // Still a working store: recovery sees the latest checkpoint and the
    // chain verifies from its base.
    let records = s.load().unwrap();
    assert!(matches!(records.first(), Some(PersistRecord::Stable { .. })));
    s.verify_ledger().unwrap();
    drop(s);
    let mut s = Store::open_with(d.path(), opts).unwrap();
    assert_eq!(s.load().unwrap(), records);
}

#[test]
fn keep_ledger_keeps_every_decided_cell() {
    let d = dir();
    let opts = StoreOptions {
        keep_ledger: true,
        ..StoreOptions::new(FsyncPolicy::Batch, 1)
    };
    let mut s = Store::open_with(d.path(), opts).unwrap();
    run(&mut s, 3);
    // `verify_ledger` waits for the tables to hold the whole log.
    assert_eq!(s.verify_ledger().unwrap(), 3 * K);
    assert_eq!(s.stats().unwrap().ledger_entries, 3 * K);
}
