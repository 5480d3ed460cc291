//! Issue 13 item 2: a crash can tear the last append in the write-ahead log
//! at any byte. Cut (or scramble) the log at every offset of the last
//! frame: the store reopens, loads exactly the appends before it (an append
//! is all or nothing), and goes on appending after them.

mod common;

use chorus_order::PersistRecord;
use chorus_store::{FsyncPolicy, Store, WAL_DIR_NAME};
use common::*;
use std::path::{Path, PathBuf};

/// The only segment file of the log in `dir`.
fn segment(dir: &Path) -> PathBuf {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(WAL_DIR_NAME))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.pop().unwrap()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// Appends `rounds` as a replica would, and leaves the store open (as a
/// crash would: nothing is brought into the tables on the way out).
/// Returns the store, the records of all rounds but the last, and the
/// log's length before the last round.
fn rounds_then_crash(d: &Path) -> (Store, Vec<PersistRecord>, Vec<PersistRecord>, u64) {
    let mut s = Store::open(d, FsyncPolicy::Batch, 2).unwrap();
    let rounds: Vec<Vec<PersistRecord>> = vec![
        vec![view(0, 1), view(1, 1)],
        vec![accepted(0, 1, 0), accepted(1, 1, 0)],
        vec![prepared(0, 1, 0), decided(0, 0)],
        vec![
            prepared(1, 1, 0),
            decided(1, 0),
            accepted(0, 1, 1),
            prepared(0, 1, 1),
        ],
        // Small (its batch went out with the `Accepted`), so that cutting
        // at each of its offsets stays a quick test.
        vec![decided(0, 1), view(1, 2)],
    ];
    let mut before = Vec::new();
    let mut cut_from = 0;
    for (i, r) in rounds.iter().enumerate() {
        if i + 1 == rounds.len() {
            s.sync().unwrap();
            cut_from = std::fs::metadata(segment(d)).unwrap().len();
        } else {
            before.extend(r.iter().cloned());
        }
        s.append(r).unwrap();
    }
    s.sync().unwrap();
    let last = rounds.last().unwrap().clone();
    (s, before, last, cut_from)
}

#[test]
fn a_log_torn_at_every_offset_of_the_last_append_reopens_to_the_appends_before_it() {
    let d = dir();
    let (s, before, last, cut_from) = rounds_then_crash(d.path());
    let full = std::fs::metadata(segment(d.path())).unwrap().len();
    assert!(full > cut_from + 12, "the last append is one frame of some size");
    let mut everything = before.clone();
    everything.extend(last.iter().cloned());
    for cut in cut_from..=full {
        for scramble in [false, true] {
            let copy = tempfile::tempdir().unwrap();
            copy_dir(d.path(), copy.path());
            let seg = segment(copy.path());
            let mut bytes = std::fs::read(&seg).unwrap();
            bytes.truncate(cut as usize);
            if scramble && cut > cut_from {
                // A torn sector: the tail's last byte is garbage.
                let i = bytes.len() - 1;
                bytes[i] ^= 0x5a;
            }
            std::fs::write(&seg, &bytes).unwrap();
            let mut r = Store::open(copy.path(), FsyncPolicy::Batch, 2)
                .unwrap_or_else(|e| panic!("cut at {cut} (scramble {scramble}): {e}"));
            let expect = if cut == full && !scramble {
                &everything
            } else {
                &before
            };
            assert_eq!(&r.load().unwrap(), expect, "cut at {cut}, scramble {scramble}");
            if cut % 8 != 0 && cut != full {
                continue;
            }
            // The cut tail is gone from disk, and appends go on after it.
            r.append(&[view(0, 9)]).unwrap();
            drop(r);
            let mut r = Store::open(copy.path(), FsyncPolicy::Batch, 2).unwrap();
            let mut then = expect.clone();
            then.push(view(0, 9));
            assert_eq!(r.load().unwrap(), then, "after reopening the cut at {cut}");
        }
    }
    drop(s);
}

/// The most a segment holding only its `SegmentStart` frame takes (a
/// 16-byte header and the previous segment's end, three varints).
const START_FRAME_MAX: u64 = 64;

#[test]
fn a_crash_leaves_the_log_for_replay_and_a_clean_close_leaves_it_empty() {
    let d = dir();
    let (s, before, last, _) = rounds_then_crash(d.path());
    let mut everything = before;
    everything.extend(last);
    // A copy taken while the store is open is what a crash leaves.
    let crashed = tempfile::tempdir().unwrap();
    copy_dir(d.path(), crashed.path());
    s.close().unwrap();
    assert!(std::fs::metadata(segment(d.path())).unwrap().len() <= START_FRAME_MAX);
    let mut closed = Store::open(d.path(), FsyncPolicy::Batch, 2).unwrap();
    assert_eq!(closed.load().unwrap(), everything);

    assert!(std::fs::metadata(segment(crashed.path())).unwrap().len() > START_FRAME_MAX);
    let mut replayed = Store::open(crashed.path(), FsyncPolicy::Batch, 2).unwrap();
    assert_eq!(replayed.load().unwrap(), everything);
    assert!(
        std::fs::metadata(segment(crashed.path())).unwrap().len() <= START_FRAME_MAX,
        "replayed into the tables on open"
    );
    assert_eq!(replayed.verify_ledger().unwrap(), closed.verify_ledger().unwrap());
}

#[test]
fn the_log_reaches_the_tables_at_a_checkpoint_or_after_enough_appends() {
    let d = dir();
    let mut s = Store::open(d.path(), FsyncPolicy::Off, 1).unwrap();
    let mut records = vec![accepted(0, 1, 0), decided(0, 0)];
    s.append_drain(&mut records).unwrap();
    assert!(records.is_empty(), "moved into the store");
    let st = s.stats().unwrap();
    assert_eq!(
        (st.wal_pending_appends, st.materializations, st.ledger_entries),
        (1, 0, 0)
    );
    s.append(&[stable(1)]).unwrap();
    // A checkpoint hands the segment to the materializer: the log moves on
    // to a new segment at once; `ledger_head` waits for the tables.
    let segments = std::fs::read_dir(d.path().join(WAL_DIR_NAME)).unwrap().count();
    assert!(
        (1..=2).contains(&segments),
        "the new one, and the old one until committed"
    );
    s.ledger_head().unwrap();
    let st = s.stats().unwrap();
    assert_eq!(
        (st.wal_pending_appends, st.materializations, st.ledger_entries),
        (0, 1, 0),
        "in the tables, and pruned at the checkpoint"
    );
    assert_eq!(st.stable_seq, Some(chorus_core::Seq(1)));
    for slot in 1..=chorus_store::MATERIALIZE_EVERY_APPENDS {
        s.append(&[view(0, slot)]).unwrap();
    }
    s.ledger_head().unwrap();
    let st = s.stats().unwrap();
    assert_eq!(
        (st.wal_pending_appends, st.materializations),
        (0, 2),
        "so does the append budget (not a third time: nothing was pending)"
    );
    // The stable checkpoint and every view since (views are compacted at
    // the next checkpoint).
    assert_eq!(
        s.load().unwrap().len(),
        1 + chorus_store::MATERIALIZE_EVERY_APPENDS as usize
    );
}

#[test]
fn a_decision_contradicting_one_still_in_the_log_is_refused_whole() {
    let d = dir();
    let mut s = Store::open(d.path(), FsyncPolicy::Batch, 1).unwrap();
    s.append(&[decided(0, 0)]).unwrap();
    let other = decided_with(0, 0, batch(999, 1));
    let mut records = vec![view(0, 5), other];
    let err = s.append_drain(&mut records).unwrap_err();
    assert!(
        matches!(err, chorus_store::StoreError::LedgerConflict { seq: 0, .. }),
        "{err}"
    );
    assert_eq!(records.len(), 2, "refused records stay with the caller");
    assert_eq!(
        s.stats().unwrap().wal_pending_appends,
        1,
        "nothing of it reached the log"
    );
    drop(s);
    let mut s = Store::open(d.path(), FsyncPolicy::Batch, 1).unwrap();
    assert_eq!(s.load().unwrap(), vec![decided(0, 0)]);
}

#[test]
fn log_segments_without_their_database_are_refused_not_replayed_into_a_new_one() {
    let d = dir();
    let (s, _, _, _) = rounds_then_crash(d.path());
    let crashed = tempfile::tempdir().unwrap();
    copy_dir(d.path(), crashed.path());
    drop(s);
    // The operator deletes only the database file: its log must not be
    // replayed into a fresh, empty one.
    std::fs::remove_file(crashed.path().join(chorus_store::DB_FILE_NAME)).unwrap();
    let e = Store::open(crashed.path(), FsyncPolicy::Batch, 2).unwrap_err();
    assert!(e.is_corruption(), "{e}");
}
