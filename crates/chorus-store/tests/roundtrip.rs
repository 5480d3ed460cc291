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
    assert_eq!(PersistRecord::Decided { cell, digest, batch }, records[7]);
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
