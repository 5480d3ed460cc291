//! When appends become durable under each fsync policy.

mod common;

use chorus_store::{FsyncPolicy, Store, StoreOptions};
use common::*;

fn counters(s: &Store) -> (u32, u64) {
    let st = s.stats().unwrap();
    assert_eq!(st.unsynced_appends, s.unsynced_appends());
    (st.unsynced_appends, st.durable_commits)
}

#[test]
fn always_makes_every_append_durable() {
    let d = dir();
    let mut s = Store::open(d.path(), FsyncPolicy::Always, 1).unwrap();
    for slot in 0..3 {
        s.append(&[accepted(0, 1, slot)]).unwrap();
        assert_eq!(counters(&s), (0, slot + 1));
    }
    s.sync().unwrap();
    assert_eq!(counters(&s), (0, 3));
}

#[test]
fn batch_is_durable_on_the_nth_append_or_on_sync() {
    let d = dir();
    let opts = StoreOptions {
        batch_appends_max: 4,
        ..StoreOptions::new(FsyncPolicy::Batch, 1)
    };
    let mut s = Store::open_with(d.path(), opts).unwrap();
    for slot in 0..3 {
        s.append(&[accepted(0, 1, slot)]).unwrap();
        assert_eq!(counters(&s), (slot as u32 + 1, 0));
    }
    s.append(&[accepted(0, 1, 3)]).unwrap();
    assert_eq!(counters(&s), (0, 1));
    s.sync().unwrap();
    assert_eq!(counters(&s), (0, 1), "nothing pending: no fsync");
    s.append(&[accepted(0, 1, 4)]).unwrap();
    assert_eq!(counters(&s), (1, 1));
    s.sync().unwrap();
    assert_eq!(counters(&s), (0, 2));
    assert_eq!(s.load().unwrap().len(), 5);
}

#[test]
fn off_ignores_sync_but_close_and_drop_persist() {
    let d = dir();
    let mut s = Store::open(d.path(), FsyncPolicy::Off, 1).unwrap();
    s.append(&[view(0, 1)]).unwrap();
    s.append(&[accepted(0, 1, 0)]).unwrap();
    s.sync().unwrap();
    assert_eq!(counters(&s), (2, 0));
    s.close().unwrap();

    let mut s = Store::open(d.path(), FsyncPolicy::Off, 1).unwrap();
    assert_eq!(s.load().unwrap(), vec![view(0, 1), accepted(0, 1, 0)]);
    s.append(&[decided(0, 0)]).unwrap();
    drop(s);
    let mut s = Store::open(d.path(), FsyncPolicy::Off, 1).unwrap();
    assert_eq!(s.load().unwrap().len(), 3);
}

#[test]
fn policies_parse_from_their_config_names() {
    assert_eq!("always".parse(), Ok(FsyncPolicy::Always));
    assert_eq!("batch".parse(), Ok(FsyncPolicy::Batch));
    assert_eq!("off".parse(), Ok(FsyncPolicy::Off));
    assert!("fsync".parse::<FsyncPolicy>().is_err());
}
