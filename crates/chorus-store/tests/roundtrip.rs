//! Records come back as they went in, across reopen.

mod common;

use chorus_core::Seq;
use chorus_order::PersistRecord;
use chorus_store::{FsyncPolicy, Store, StoreError};
use common::*;

#[test]
fn every_record_kind_roundtrips_in_order() {
    let d = dir();
    let records = vec![
        view(0, 1),
        accepted(0, 1, 0),
        view(1, 1),
        prepared(0, 1, 0),
        accepted(1, 1, 0),
        decided(0, 0),
        prepared(1, 1, 0),
        decided(1, 0),
    ];
    let mut s = Store::open(d.path(), FsyncPolicy::Always, 2).unwrap();
    s.append(&records[..3]).unwrap();
    s.append(&records[3..]).unwrap();
    assert_eq!(s.load().unwrap(), records);
    drop(s);

    let mut s = Store::open(d.path(), FsyncPolicy::Always, 2).unwrap();
    assert_eq!(s.load().unwrap(), records);
    assert_eq!(s.ledger_head().unwrap().0, 2);
    assert_eq!(s.verify_ledger().unwrap(), 2);
    let (cell, digest, batch) = s.ledger_entry(Seq(1)).unwrap().unwrap();
    assert_eq!(
        PersistRecord::Decided {
            cell,
            digest,
            batch: std::sync::Arc::new(batch)
        },
        records[7]
    );
    assert_eq!(s.ledger_entry(Seq(2)).unwrap(), None);
}

#[test]
fn stable_comes_first_then_the_records_above_it() {
    let d = dir();
    let mut s = Store::open(d.path(), FsyncPolicy::Always, 2).unwrap();
    let above = vec![view(0, 3), accepted(0, 3, 1), prepared(0, 3, 1), decided(0, 1)];
    s.append(&[stable(2)]).unwrap();
    s.append(&above).unwrap();
    let mut expect = vec![stable(2)];
    expect.extend(above);
    assert_eq!(s.load().unwrap(), expect);
    let (cert, snapshot) = s.stable_checkpoint().unwrap().unwrap();
    assert_eq!(PersistRecord::Stable { cert, snapshot }, expect[0]);
}

#[test]
fn reopen_after_drop_continues_the_log() {
    let d = dir();
    let mut s = Store::open(d.path(), FsyncPolicy::Batch, 1).unwrap();
    s.append(&[view(0, 1), accepted(0, 1, 0)]).unwrap();
    assert_eq!(s.stats().unwrap().unsynced_appends, 1);
    drop(s); // no close: Drop alone must leave a loadable store

    let mut s = Store::open(d.path(), FsyncPolicy::Batch, 1).unwrap();
    s.append(&[decided(0, 0), accepted(0, 1, 1)]).unwrap();
    drop(s);
    let mut s = Store::open(d.path(), FsyncPolicy::Always, 1).unwrap();
    assert_eq!(
        s.load().unwrap(),
        vec![view(0, 1), accepted(0, 1, 0), decided(0, 0), accepted(0, 1, 1)]
    );
}

#[test]
fn a_duplicate_decision_is_skipped_and_a_conflicting_one_rejected_whole() {
    let d = dir();
    let mut s = Store::open(d.path(), FsyncPolicy::Always, 1).unwrap();
    s.append(&[decided(0, 0)]).unwrap();
    let head = s.ledger_head().unwrap();
    s.append(&[decided(0, 0)]).unwrap();
    assert_eq!(s.load().unwrap(), vec![decided(0, 0)]);
    assert_eq!(s.stats().unwrap().skipped.duplicate, 1);

    let other = decided_with(0, 0, batch(999, 1));
    let err = s.append(&[view(0, 5), other]).unwrap_err();
    assert!(matches!(err, StoreError::LedgerConflict { seq: 0, .. }), "{err}");
    // The view in the same call was rolled back with it.
    assert_eq!(s.load().unwrap(), vec![decided(0, 0)]);
    assert_eq!(s.ledger_head().unwrap(), head);
}

#[test]
fn a_record_for_a_foreign_lane_rejects_the_whole_append() {
    let d = dir();
    let mut s = Store::open(d.path(), FsyncPolicy::Always, 2).unwrap();
    let err = s.append(&[view(0, 1), accepted(2, 1, 0)]).unwrap_err();
    assert!(
        matches!(err, StoreError::LaneOutOfRange { lane: 2, lanes: 2 }),
        "{err}"
    );
    assert!(s.load().unwrap().is_empty());
    // The store stays usable.
    s.append(&[view(1, 1)]).unwrap();
    assert_eq!(s.load().unwrap(), vec![view(1, 1)]);
}

#[test]
fn the_lane_count_is_fixed_at_creation() {
    let d = dir();
    drop(Store::open(d.path(), FsyncPolicy::Always, 4).unwrap());
    let err = Store::open(d.path(), FsyncPolicy::Always, 2).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::LanesMismatch {
                stored: 4,
                requested: 2
            }
        ),
        "{err}"
    );
    assert!(matches!(
        Store::open(&d.path().join("x"), FsyncPolicy::Always, 0),
        Err(StoreError::InvalidLanes { got: 0, .. })
    ));
    assert!(Store::open(d.path(), FsyncPolicy::Off, 4).is_ok());
}

#[test]
fn empty_append_writes_nothing() {
    let d = dir();
    let mut s = Store::open(d.path(), FsyncPolicy::Always, 1).unwrap();
    s.append(&[]).unwrap();
    let st = s.stats().unwrap();
    assert_eq!((st.appends, st.log_records, st.durable_commits), (0, 0, 0));
    assert!(st.file_bytes > 0);
}

/// The sizes of the protocol log's entries in the tables (read once the
/// store is closed, so every record has been brought into them).
fn log_entry_sizes(dir: &std::path::Path) -> Vec<usize> {
    use redb::ReadableTable;
    let db = redb::Database::create(dir.join(chorus_store::DB_FILE_NAME)).unwrap();
    let txn = db.begin_read().unwrap();
    let log = txn
        .open_table(redb::TableDefinition::<u64, &[u8]>::new("log"))
        .unwrap();
    log.iter().unwrap().map(|e| e.unwrap().1.value().len()).collect()
}

/// An accepted batch brought into the tables together with its decision is
/// stored once, in the ledger: the log refers to it, and replay gives the
/// `Accepted` record back whole. An accepted batch decided with another
/// digest (a view change chose another), or not yet decided, keeps its own
/// copy. Before, the log held a second copy of every decided batch.
#[test]
fn an_accepted_batch_decided_in_the_same_transaction_is_stored_once() {
    let d = dir();
    let big = |tag| batch(tag, 40);
    let accepted_with = |slot: u64, b: chorus_core::Batch| PersistRecord::Accepted {
        lane: chorus_core::LaneId(0),
        view: chorus_core::View(1),
        slot: chorus_core::Slot(slot),
        digest: b.digest(),
        batch: std::sync::Arc::new(b),
    };
    let records = vec![
        accepted_with(0, big(0)),
        prepared(0, 1, 0),
        decided_with(0, 0, big(0)),
        // Accepted in view 1, decided with another batch (view 2).
        accepted_with(1, big(1)),
        decided_with(0, 1, big(11)),
        // Accepted, not decided.
        accepted_with(2, big(2)),
    ];
    let mut s = Store::open(d.path(), FsyncPolicy::Always, 1).unwrap();
    s.append(&records).unwrap();
    drop(s);
    let sizes = log_entry_sizes(d.path());
    assert_eq!(sizes.len(), 6, "{sizes:?}");
    // 40 signed requests take ~3 KB; a reference ~40 bytes.
    let references = sizes.iter().filter(|&&n| n < 100).count();
    let whole = sizes.iter().filter(|&&n| n > 2_000).count();
    // References: slot 0's accepted and decided, slot 1's decided (the
    // ledger holds its batch); whole: slot 1's and slot 2's accepted.
    assert_eq!((references, whole), (3, 2), "log entry sizes {sizes:?}");
    let mut s = Store::open(d.path(), FsyncPolicy::Always, 1).unwrap();
    assert_eq!(s.load().unwrap(), records, "replay gives every record back whole");
}

/// A reference whose ledger entry is gone is corruption, reported as such
/// on replay, never an `Accepted` record without its batch.
#[test]
fn an_accepted_reference_without_its_ledger_entry_is_corruption() {
    let d = dir();
    let mut s = Store::open(d.path(), FsyncPolicy::Always, 1).unwrap();
    s.append(&[accepted(0, 1, 0), decided(0, 0)]).unwrap();
    drop(s);
    {
        let db = redb::Database::create(d.path().join(chorus_store::DB_FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(redb::TableDefinition::<u64, &[u8]>::new("ledger"))
            .unwrap()
            .remove(0)
            .unwrap();
        txn.commit().unwrap();
    }
    let mut s = Store::open(d.path(), FsyncPolicy::Always, 1).unwrap();
    let err = s.load().unwrap_err();
    // Log entry 0 is the accepted record's reference (entry 1, the decided
    // one's, would fail the same way after it).
    assert!(
        matches!(&err, StoreError::Corrupt { table: "log", key, .. } if key == "0"),
        "{err:?}"
    );
}

/// What a store holds once `records` and then a stable checkpoint at 8 are
/// in the tables: replayed records, ledger head, ledger entries, log sizes.
type AfterCheckpoint = (
    Vec<PersistRecord>,
    (u64, chorus_core::Digest),
    Vec<String>,
    Vec<usize>,
    u64,
);

fn after_checkpoint(one_hand_over: bool, lanes: u32) -> AfterCheckpoint {
    let d = dir();
    let records: Vec<_> = (0..6)
        .flat_map(|slot| {
            (0..lanes).flat_map(move |lane| {
                [
                    accepted(lane, 1, slot),
                    prepared(lane, 1, slot),
                    decided(lane, slot),
                ]
            })
        })
        .collect();
    let mut s = Store::open(d.path(), FsyncPolicy::Always, lanes).unwrap();
    s.append(&records).unwrap();
    if !one_hand_over {
        drop(s); // the records reach the tables before the checkpoint does
        s = Store::open(d.path(), FsyncPolicy::Always, lanes).unwrap();
    }
    s.append(&[stable(8)]).unwrap();
    s.load().unwrap(); // brings everything into the tables
    let superseded = s.stats().unwrap().skipped.superseded;
    s.close().unwrap();
    let sizes = log_entry_sizes(d.path());
    let mut s = Store::open(d.path(), FsyncPolicy::Always, lanes).unwrap();
    let entries = (0..6 * u64::from(lanes))
        .map(|seq| format!("{:?}", s.ledger_entry(Seq(seq)).unwrap()))
        .collect();
    (
        s.load().unwrap(),
        s.ledger_head().unwrap(),
        entries,
        sizes,
        superseded,
    )
}

/// A checkpoint brought into the tables in the same transaction as the
/// records below it (what a replica does: it hands its records over at each
/// checkpoint) leaves exactly the store it leaves when those records were
/// in the tables before it, without writing what it truncates: no batch of
/// a cell below the checkpoint is written to the tables at all (the
/// materializer drops the accepted and prepared records, `Writer::plan`
/// the decided batches).
#[test]
fn a_checkpoint_in_the_same_hand_over_leaves_the_same_store() {
    for lanes in [1, 2] {
        let (records_a, head_a, entries_a, sizes_a, superseded_a) = after_checkpoint(true, lanes);
        let (records_b, head_b, entries_b, _, superseded_b) = after_checkpoint(false, lanes);
        // Below 8, each decided cell's batch is left out of the ledger.
        let below = 8u64.min(6 * u64::from(lanes));
        assert_eq!((superseded_a, superseded_b), (below, 0), "{lanes} lane(s)");
        assert_eq!(records_a, records_b, "{lanes} lane(s)");
        assert_eq!(head_a, head_b, "{lanes} lane(s): the chain is the same");
        assert_eq!(entries_a, entries_b, "{lanes} lane(s)");
        let expect_above: Vec<_> = records_a.iter().skip(1).cloned().collect();
        assert_eq!(records_a[0], stable(8));
        assert!(
            expect_above.iter().all(|r| match r {
                PersistRecord::Accepted { lane, slot, .. }
                | PersistRecord::Decided {
                    cell: chorus_core::Cell { lane, slot },
                    ..
                } => slot.0 * u64::from(lanes) + u64::from(lane.0) >= 8,
                PersistRecord::Prepared { cert } =>
                    cert.slot.0 * u64::from(lanes) + u64::from(cert.lane.0) >= 8,
                _ => true,
            }),
            "only records above the checkpoint are replayed"
        );
        // Above the checkpoint: each cell's accepted is a reference, its
        // prepared certificate and decided small; nothing holds a batch.
        assert!(
            sizes_a.iter().all(|&n| n < 400),
            "{lanes} lane(s): log entry sizes {sizes_a:?}"
        );
    }
}
