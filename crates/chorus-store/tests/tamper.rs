//! Bytes changed behind the store's back are caught: by the ledger's hash
//! chain, or as a typed corruption error naming the entry, never a panic.

mod common;

use chorus_core::Digest;
use chorus_store::{FsyncPolicy, Store, StoreError, DB_FILE_NAME, FORMAT_VERSION};
use common::*;
use redb::{Database, ReadableTable, TableDefinition};
use std::path::Path;

// The store's table layout, spelled out independently of its private schema.
const LEDGER: TableDefinition<u64, &[u8]> = TableDefinition::new("ledger");
const CHAIN: TableDefinition<u64, &[u8]> = TableDefinition::new("chain");
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// A closed store with one lane and positions 0..5 decided.
fn ledger_of_five(dir: &Path) {
    let mut s = Store::open(dir, FsyncPolicy::Always, 1).unwrap();
    for slot in 0..5 {
        s.append(&[decided(0, slot)]).unwrap();
    }
    assert_eq!(s.verify_ledger().unwrap(), 5);
    s.close().unwrap();
}

fn raw(dir: &Path, f: impl FnOnce(&redb::WriteTransaction)) {
    let db = Database::create(dir.join(DB_FILE_NAME)).unwrap();
    let txn = db.begin_write().unwrap();
    f(&txn);
    txn.commit().unwrap();
}

fn put(txn: &redb::WriteTransaction, t: TableDefinition<u64, &[u8]>, key: u64, value: &[u8]) {
    txn.open_table(t).unwrap().insert(key, value).unwrap();
}

fn tampered_at(dir: &Path) -> (u64, String) {
    let mut s = Store::open(dir, FsyncPolicy::Always, 1).unwrap();
    match s.verify_ledger() {
        Err(StoreError::LedgerTampered { seq, reason }) => (seq, reason),
        other => panic!("tampering not detected: {other:?}"),
    }
}

#[test]
fn a_rewritten_decision_breaks_the_chain() {
    let d = dir();
    ledger_of_five(d.path());
    // A self-consistent entry (batch matches digest) that was never decided.
    let b = batch(999, 1);
    let forged = postcard::to_allocvec(&(cell(0, 2), b.digest(), &b)).unwrap();
    raw(d.path(), |t| put(t, LEDGER, 2, &forged));
    let (seq, reason) = tampered_at(d.path());
    assert_eq!(seq, 2);
    assert!(reason.contains("chain"), "{reason}");
}

#[test]
fn a_swapped_batch_no_longer_matches_its_digest() {
    let d = dir();
    ledger_of_five(d.path());
    // `decided(0, 3)` decides `batch(30, 2)`.
    let digest = batch(30, 2).digest();
    let forged = postcard::to_allocvec(&(cell(0, 3), digest, batch(7, 3))).unwrap();
    raw(d.path(), |t| put(t, LEDGER, 3, &forged));
    let (seq, reason) = tampered_at(d.path());
    assert_eq!(seq, 3);
    assert!(reason.contains("batch"), "{reason}");
}

#[test]
fn a_removed_entry_or_rewritten_hash_is_detected() {
    let d = dir();
    ledger_of_five(d.path());
    raw(d.path(), |t| {
        t.open_table(LEDGER).unwrap().remove(1).unwrap();
    });
    assert_eq!(tampered_at(d.path()).0, 1);

    let d = dir();
    ledger_of_five(d.path());
    raw(d.path(), |t| put(t, CHAIN, 4, Digest::of(b"forged").as_bytes()));
    assert_eq!(tampered_at(d.path()).0, 4);

    let d = dir();
    ledger_of_five(d.path());
    raw(d.path(), |t| {
        put(
            t,
            LEDGER,
            9,
            &postcard::to_allocvec(&(cell(0, 8), Digest::default(), batch(1, 0))).unwrap(),
        )
    });
    assert_eq!(tampered_at(d.path()).0, 9);
}

#[test]
fn undecodable_values_are_reported_with_table_and_key() {
    let d = dir();
    ledger_of_five(d.path());
    raw(d.path(), |t| put(t, LEDGER, 1, &[0xff; 5]));
    let mut s = Store::open(d.path(), FsyncPolicy::Always, 1).unwrap();
    for err in [s.load().unwrap_err(), s.verify_ledger().unwrap_err()] {
        match err {
            StoreError::Corrupt { table, key, .. } => assert_eq!((table, key.as_str()), ("ledger", "1")),
            other => panic!("expected corruption, got {other:?}"),
        }
    }
    drop(s);

    let d = dir();
    ledger_of_five(d.path());
    raw(d.path(), |t| put(t, LOG, 3, &[0x09, 0x01]));
    let mut s = Store::open(d.path(), FsyncPolicy::Always, 1).unwrap();
    match s.load().unwrap_err() {
        StoreError::Corrupt { table, key, .. } => assert_eq!((table, key.as_str()), ("log", "3")),
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn a_store_of_another_format_version_is_refused() {
    let d = dir();
    ledger_of_five(d.path());
    raw(d.path(), |t| {
        let v = (FORMAT_VERSION + 1).to_le_bytes();
        t.open_table(META)
            .unwrap()
            .insert("format_version", v.as_slice())
            .unwrap();
    });
    let err = Store::open(d.path(), FsyncPolicy::Always, 1).unwrap_err();
    assert!(
        matches!(err, StoreError::FormatVersion { found, expected } if found == FORMAT_VERSION + 1 && expected == FORMAT_VERSION)
    );
}

/// A version-2 store (before `TimeoutCert` records), version-3 store
/// (before accepted batches referred to the ledger), version-4 store
/// (before SHA-256 request digests) or version-5 store (before segments
/// started with a `SegmentStart`) opens, keeps its records, and is marked
/// version 6, so an older binary refuses it cleanly.
#[test]
fn version_2_to_5_stores_open_and_are_marked_version_6() {
    for old in [2u32, 3, 4, 5] {
        let d = dir();
        ledger_of_five(d.path());
        let before = Store::open(d.path(), FsyncPolicy::Always, 1)
            .unwrap()
            .load()
            .unwrap();
        raw(d.path(), |t| {
            t.open_table(META)
                .unwrap()
                .insert("format_version", old.to_le_bytes().as_slice())
                .unwrap();
        });
        let mut s = Store::open(d.path(), FsyncPolicy::Always, 1).unwrap();
        assert_eq!(s.load().unwrap(), before);
        drop(s);
        let mut version = 0;
        raw(d.path(), |t| {
            let meta = t.open_table(META).unwrap();
            let v = meta.get("format_version").unwrap().unwrap();
            version = u32::from_le_bytes(v.value().try_into().unwrap());
        });
        assert_eq!(version, FORMAT_VERSION, "from version {old}");
    }
    assert_eq!(FORMAT_VERSION, 6);
}

/// Issue 14 item 1: a truncated database file tripped an assertion inside
/// redb (a panic of whoever opened it); it is a typed error naming the file.
#[test]
fn a_truncated_database_file_is_an_error_naming_the_file_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    ledger_of_five(dir.path());
    let file = dir.path().join(DB_FILE_NAME);
    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.set_len(4096).unwrap();
    drop(f);
    let err = Store::open(dir.path(), FsyncPolicy::Always, 1).unwrap_err();
    assert!(err.is_corruption(), "{err}");
    assert!(!err.is_disk_full(), "{err}");
    match &err {
        StoreError::CorruptFile { path, .. } => assert_eq!(path, &file),
        other => panic!("expected CorruptFile, got {other:?}"),
    }
    assert!(err.to_string().contains(DB_FILE_NAME), "{err}");
}
