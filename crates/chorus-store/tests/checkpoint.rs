//! Stable checkpoints: truncation of the protocol log, retention, pruning and
//! the ledger restart after state transfer.

mod common;

use chorus_core::Seq;
use chorus_order::PersistRecord;
use chorus_store::{FsyncPolicy, Store, StoreError, StoreOptions};
use common::*;

/// Two lanes, slots 0..4 each accepted, prepared and decided; views move on.
fn history() -> Vec<PersistRecord> {
    let mut h = vec![view(0, 1), view(1, 1)];
    for slot in 0..4 {
        if slot == 2 {
            h.push(view(0, 2));
        }
        for lane in 0..2 {
            let v = if lane == 0 && slot >= 2 { 2 } else { 1 };
            h.push(accepted(lane, v, slot));
            h.push(prepared(lane, v, slot));
            h.push(decided(lane, slot));
        }
    }
    h
}

/// A store that keeps the whole ledger (these tests are about the ledger
/// itself; by default it is pruned at each stable checkpoint, see `growth.rs`).
fn open_keeping(path: &std::path::Path, lanes: u32) -> Store {
    let opts = StoreOptions {
        keep_ledger: true,
        ..StoreOptions::new(FsyncPolicy::Always, lanes)
    };
    Store::open_with(path, opts).unwrap()
}

#[test]
fn stable_truncates_the_log_below_it_and_keeps_the_ledger() {
    let d = dir();
    let mut s = open_keeping(d.path(), 2);
    let h = history();
    for r in &h {
        s.append(std::slice::from_ref(r)).unwrap();
    }
    let before = s.ledger_head().unwrap();
    assert_eq!(before.0, 8);
    // seq = slot * 2 + lane: the checkpoint at #4 covers slots 0 and 1 of both lanes.
    s.append(&[stable(4)]).unwrap();

    let mut expect = vec![stable(4), view(1, 1), view(0, 2)];
    for slot in 2..4 {
        for lane in 0..2 {
            let v = if lane == 0 { 2 } else { 1 };
            expect.extend([
                accepted(lane, v, slot),
                prepared(lane, v, slot),
                decided(lane, slot),
            ]);
        }
    }
    assert_eq!(s.load().unwrap(), expect);
    let st = s.stats().unwrap();
    assert_eq!(st.log_records, expect.len() as u64 - 1);
    assert_eq!(
        (st.ledger_entries, st.checkpoints, st.stable_seq),
        (8, 1, Some(Seq(4)))
    );
    assert_eq!(s.ledger_head().unwrap(), before);
    assert_eq!(s.verify_ledger().unwrap(), 8);

    // The same after a reopen, and later appends go after the survivors.
    drop(s);
    let mut s = open_keeping(d.path(), 2);
    assert_eq!(s.load().unwrap(), expect);
    s.append(&[view(1, 4)]).unwrap();
    expect.push(view(1, 4));
    assert_eq!(s.load().unwrap(), expect);
}

#[test]
fn records_below_the_checkpoint_are_skipped_on_arrival() {
    let d = dir();
    let mut s = open_keeping(d.path(), 2);
    s.append(&[decided(0, 0), decided(1, 0), stable(2)]).unwrap();
    s.append(&[accepted(0, 1, 0), prepared(1, 1, 0), decided(0, 0)])
        .unwrap();
    // Skips are counted when the records reach the tables (`load` brings
    // the write-ahead log there).
    assert_eq!(s.load().unwrap(), vec![stable(2)]);
    let st = s.stats().unwrap();
    assert_eq!((st.skipped.obsolete, st.skipped.duplicate), (2, 1));
}

#[test]
fn the_last_two_checkpoints_are_kept_and_the_stable_one_never_goes_back() {
    let d = dir();
    let mut s = Store::open(d.path(), FsyncPolicy::Always, 1).unwrap();
    for seq in 0..6 {
        s.append(&[decided(0, seq)]).unwrap();
    }
    s.append(&[stable(2)]).unwrap();
    s.append(&[stable(4), stable(6)]).unwrap();
    // The tables follow the log on another thread; `load` waits for them.
    s.load().unwrap();
    assert_eq!(s.stats().unwrap().checkpoints, 2);
    s.append(&[stable(4)]).unwrap();
    assert_eq!(s.load().unwrap(), vec![stable(6)]);
    assert_eq!(s.stats().unwrap().stable_seq, Some(Seq(6)));
}

#[test]
fn the_ledger_prunes_up_to_the_stable_checkpoint_only() {
    let d = dir();
    let mut s = open_keeping(d.path(), 2);
    assert!(matches!(
        s.prune_ledger_below(Seq(1)),
        Err(StoreError::PruneAboveStable {
            requested: 1,
            stable: 0
        })
    ));
    s.append(&history()).unwrap();
    s.append(&[stable(4)]).unwrap();
    let head = s.ledger_head().unwrap();
    let loaded = s.load().unwrap();

    let err = s.prune_ledger_below(Seq(6)).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::PruneAboveStable {
                requested: 6,
                stable: 4
            }
        ),
        "{err}"
    );
    assert_eq!(s.prune_ledger_below(Seq(3)).unwrap(), 3);
    assert_eq!(s.prune_ledger_below(Seq(4)).unwrap(), 1);
    assert_eq!(s.prune_ledger_below(Seq(2)).unwrap(), 0);
    assert_eq!(s.ledger_entry(Seq(3)).unwrap(), None);
    assert!(s.ledger_entry(Seq(4)).unwrap().is_some());
    assert_eq!(s.ledger_head().unwrap(), head);
    assert_eq!(s.verify_ledger().unwrap(), 4);
    assert_eq!(s.load().unwrap(), loaded);

    // A late decision below the pruned base is not resurrected.
    s.append(&[decided(0, 0)]).unwrap();
    assert_eq!(s.ledger_entry(Seq(0)).unwrap(), None);
    drop(s);
    let mut s = open_keeping(d.path(), 2);
    assert_eq!(s.verify_ledger().unwrap(), 4);
    assert_eq!(s.ledger_head().unwrap(), head);
}

#[test]
fn a_checkpoint_reached_over_a_gap_restarts_the_ledger_there() {
    let d = dir();
    let mut s = Store::open(d.path(), FsyncPolicy::Always, 2).unwrap();
    // #0 decided, #7 decided early, #1..#6 never decided locally.
    s.append(&[decided(0, 0), decided(1, 3)]).unwrap();
    assert_eq!(s.ledger_head().unwrap().0, 1);
    let genesis_chain = s.ledger_head().unwrap().1;
    // State transfer installs the checkpoint at #6.
    s.append(&[stable(6)]).unwrap();
    let (len, anchor) = s.ledger_head().unwrap();
    assert_eq!(len, 6);
    assert_ne!(anchor, genesis_chain);
    assert_eq!(s.ledger_entry(Seq(0)).unwrap(), None);
    assert_eq!(s.verify_ledger().unwrap(), 0);

    s.append(&[decided(0, 3)]).unwrap();
    assert_eq!(s.ledger_head().unwrap().0, 8);
    assert_eq!(s.verify_ledger().unwrap(), 2);
    assert_eq!(s.load().unwrap(), vec![stable(6), decided(1, 3), decided(0, 3)]);
}

#[test]
fn the_chain_follows_global_order_not_decision_order() {
    let (d1, d2) = (dir(), dir());
    let mut a = Store::open(d1.path(), FsyncPolicy::Off, 2).unwrap();
    let mut b = Store::open(d2.path(), FsyncPolicy::Off, 2).unwrap();
    let cells = [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2)];
    for &(l, s) in &cells {
        a.append(&[decided(l, s)]).unwrap();
    }
    for &(l, s) in cells.iter().rev() {
        b.append(&[decided(l, s)]).unwrap();
    }
    assert_eq!(a.ledger_head().unwrap(), b.ledger_head().unwrap());
    assert_eq!(a.ledger_head().unwrap().0, 5);

    let d3 = dir();
    let mut c = Store::open(d3.path(), FsyncPolicy::Off, 2).unwrap();
    for &(l, s) in &cells[..4] {
        c.append(&[decided(l, s)]).unwrap();
    }
    c.append(&[decided_with(0, 2, batch(12345, 1))]).unwrap();
    assert_eq!(c.ledger_head().unwrap().0, 5);
    assert_ne!(c.ledger_head().unwrap().1, a.ledger_head().unwrap().1);
}

fn timeout_cert(lane: u32, view: u64) -> PersistRecord {
    PersistRecord::TimeoutCert {
        lane: chorus_core::LaneId(lane),
        statements: (0..3)
            .map(|r| chorus_core::Timeout {
                lane: chorus_core::LaneId(lane),
                view: chorus_core::View(view),
                replica: chorus_core::ReplicaId(r),
                sig: chorus_core::Signature([r as u8; 64]),
            })
            .collect(),
    }
}

/// Timeout certificates (`PersistRecord::TimeoutCert`) load back as
/// written, across a reopen, and a stable checkpoint's truncation keeps the
/// latest per lane only (statements only grow).
#[test]
fn timeout_certificates_reload_and_truncation_keeps_the_latest_per_lane() {
    let d = dir();
    let mut s = open_keeping(d.path(), 2);
    let h = history();
    for r in &h {
        s.append(std::slice::from_ref(r)).unwrap();
    }
    let certs = [timeout_cert(0, 0), timeout_cert(1, 3), timeout_cert(0, 1)];
    s.append(&certs).unwrap();
    drop(s);
    let mut s = open_keeping(d.path(), 2);
    let loaded = s.load().unwrap();
    for c in &certs {
        assert!(loaded.contains(c), "{c:?} lost");
    }
    s.append(&[stable(4)]).unwrap();
    let loaded = s.load().unwrap();
    let kept: Vec<&PersistRecord> = loaded
        .iter()
        .filter(|r| matches!(r, PersistRecord::TimeoutCert { .. }))
        .collect();
    assert_eq!(
        kept,
        vec![&certs[1], &certs[2]],
        "the latest per lane, in write order"
    );
}
