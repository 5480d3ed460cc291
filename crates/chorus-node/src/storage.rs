//! Opening the replica's store, and storage errors an operator can act on:
//! which file, and what to do (issue 14 item 1).

use chorus_order::PersistRecord;
use chorus_store::{FsyncPolicy, Store, StoreError};
use std::path::Path;

/// Open (or create) the store in `data_dir` and read what `Replica::recover`
/// replays. A damaged file is an error naming it, never a panic: redb
/// asserts on some damage (a truncated file, garbage in its pages) instead
/// of returning an error; the store turns that into
/// `StoreError::CorruptFile` on open, this does for the load, and the
/// default hook's panic report is silenced meanwhile so the operator sees
/// one clear message.
pub fn open(data_dir: &Path, fsync: FsyncPolicy, lanes: u32) -> anyhow::Result<(Store, Vec<PersistRecord>)> {
    // Only called before the replica starts its threads: the hook is
    // process-wide, and no other thread can panic while it is swapped.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let opened = std::panic::catch_unwind(|| {
        let mut store = Store::open(data_dir, fsync, lanes)?;
        let records = store.load()?;
        Ok((store, records))
    });
    std::panic::set_hook(hook);
    match opened {
        Ok(r) => r.map_err(|e| explain(e, data_dir)),
        Err(panic) => Err(explain(
            StoreError::CorruptFile {
                path: data_dir.join(chorus_store::DB_FILE_NAME),
                reason: crate::fatal::panic_message(panic.as_ref()),
            },
            data_dir,
        )),
    }
}

/// The error with the advice that fits it.
pub fn explain(e: StoreError, data_dir: &Path) -> anyhow::Error {
    let file = data_dir.join(chorus_store::DB_FILE_NAME);
    let advice = if let StoreError::FormatVersion { found, expected } = &e {
        // Not damage: a newer binary wrote it (a downgrade). Deleting it
        // on every replica of a downgraded cluster would lose the state.
        format!(
            "the store in {} has format version {found}, this binary reads {expected}: it was written by a newer              chorus; run that version (or newer) on this replica rather than deleting the data directory",
            data_dir.display()
        )
    } else if e.is_disk_full() {
        format!(
            "the file system holding {} is full: free space (or move the data directory), then restart the replica",
            data_dir.display()
        )
    } else if e.is_corruption() {
        format!(
            "the database is corrupt: stop this replica, delete its data directory {} and restart it; \
             it rebuilds its state from its peers by state transfer (safe while the other replicas are up)",
            data_dir.display()
        )
    } else {
        format!(
            "check the disk and the permissions of {}; if the database is damaged, delete the data directory \
             and restart: state transfer rebuilds it",
            data_dir.display()
        )
    };
    anyhow::anyhow!("storage error on {}: {e}\n  hint: {advice}", file.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store from a newer binary is a downgrade, not damage: the hint
    /// must not tell the operator to delete the data directory.
    #[test]
    fn a_newer_format_is_explained_as_a_downgrade_not_as_damage() {
        let e = explain(
            StoreError::FormatVersion {
                found: 4,
                expected: 3,
            },
            Path::new("/var/lib/chorus/r0"),
        )
        .to_string();
        assert!(e.contains("format version 4") && e.contains("newer"), "{e}");
        assert!(!e.contains("delete its data directory"), "{e}");
        assert!(e.contains("rather than deleting"), "{e}");
    }
}
