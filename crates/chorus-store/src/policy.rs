//! When appends become durable (DESIGN §3: "the fsync policy is configurable
//! (`always` | `batch` | `off`)").
//!
//! The protocol rule is "persist, then send" (DESIGN §2): a record must be on
//! disk before any message that depends on it leaves the process. The three
//! policies differ only in *when* the fsync happens. Every append is one
//! checksummed frame of the write-ahead log under all three: a crash never
//! tears a record or an append, it can only lose a suffix of appends that
//! were not yet durable.
//!
//! - `always`: every `append` is durable when it returns (one `fdatasync`
//!   of the log per append). Safe without any help from the caller; `sync`
//!   has nothing to do.
//! - `batch` (group commit): an `append` is written without fsync (in the
//!   page cache: it survives a crash of the process, not of the machine).
//!   Everything appended so far becomes durable, with one `fdatasync`, when
//!   `Store::sync` is called and when an append is the
//!   `batch_appends_max`-th unsynced one (that append is durable on return).
//!   The runtime appends the records of one step of actions, calls `sync`,
//!   and only then sends the step's messages; the rule then holds with one
//!   fsync per step instead of one per record, and a crash loses only appends
//!   no sent message depends on.
//! - `off`: no fsync on the write path and `sync` is a no-op. Appends still
//!   reach the page cache at once (a killed process loses nothing), and the
//!   tables are committed durably at every materialization (each stable
//!   checkpoint, at least every `MATERIALIZE_EVERY_APPENDS` appends, or up
//!   to `DEFER_HAND_OVER_FACTOR` times that while the previous one is still
//!   committing) and on
//!   `close` or drop; the log is also fsynced every
//!   `OFF_DURABLE_EVERY_APPENDS`-th append of a segment, not when it moves
//!   on to the next (a machine crash may then keep pages of a later segment
//!   and not of an earlier one: replay ends the log at its first damage,
//!   `wal::Damage::EndOfLog`). A machine crash loses the appends
//!   since the last of these, so a replica that crashes under `off` may
//!   contradict what it sent before: it must be counted among the `f` faulty
//!   replicas. For benchmarks only.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FsyncPolicy {
    #[default]
    Always,
    Batch,
    Off,
}

impl FsyncPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            FsyncPolicy::Always => "always",
            FsyncPolicy::Batch => "batch",
            FsyncPolicy::Off => "off",
        }
    }
}

impl FromStr for FsyncPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "always" => Ok(FsyncPolicy::Always),
            "batch" => Ok(FsyncPolicy::Batch),
            "off" => Ok(FsyncPolicy::Off),
            other => Err(format!(
                "unknown fsync policy {other:?} (expected always, batch or off)"
            )),
        }
    }
}

impl fmt::Display for FsyncPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Under `off`, the log is fsynced every this many appends (bounds what a
/// machine crash loses when materializations are rarer).
pub const OFF_DURABLE_EVERY_APPENDS: u32 = 1024;

/// Largest lane count a store accepts (the configuration allows 64 pillars).
pub const LANES_MAX: u32 = 1024;

/// Everything `Store::open_with` needs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    pub fsync: FsyncPolicy,
    /// Lanes of the ordering mode (`ClusterConfig::lanes()`): fixes the COP
    /// mapping `seq = slot * lanes + lane` (COP §4.1) used for ledger keys and
    /// for truncation at a stable checkpoint. Recorded at creation, checked at
    /// every reopen.
    pub lanes: u32,
    /// `batch` only: the N-th unsynced append is made durable (N ≥ 1).
    pub batch_appends_max: u32,
    /// Keep every decided cell in the ledger (an audit trail growing without
    /// bound) instead of pruning it at each stable checkpoint. Off by
    /// default: storage stays proportional to the state plus the log since
    /// the stable checkpoint (PBFT §4.3 garbage collection).
    pub keep_ledger: bool,
    /// redb's page cache. Bounded so that reading a large log after a
    /// restart does not leave the process that much larger for good.
    pub cache_bytes: usize,
}

impl StoreOptions {
    pub const BATCH_APPENDS_MAX_DEFAULT: u32 = 64;
    pub const CACHE_BYTES_DEFAULT: usize = 16 << 20;

    pub fn new(fsync: FsyncPolicy, lanes: u32) -> StoreOptions {
        StoreOptions {
            fsync,
            lanes,
            batch_appends_max: Self::BATCH_APPENDS_MAX_DEFAULT,
            keep_ledger: false,
            cache_bytes: Self::CACHE_BYTES_DEFAULT,
        }
    }

    /// Appends after which the store forces a durable commit by itself.
    pub(crate) fn durable_every(&self) -> u32 {
        match self.fsync {
            FsyncPolicy::Always => 1,
            FsyncPolicy::Batch => self.batch_appends_max.max(1),
            FsyncPolicy::Off => OFF_DURABLE_EVERY_APPENDS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_print_back() {
        for p in [FsyncPolicy::Always, FsyncPolicy::Batch, FsyncPolicy::Off] {
            assert_eq!(p.as_str().parse::<FsyncPolicy>(), Ok(p));
            assert_eq!(p.to_string(), p.as_str());
        }
        assert!("Always".parse::<FsyncPolicy>().is_err());
        assert!("".parse::<FsyncPolicy>().is_err());
        assert!("sometimes"
            .parse::<FsyncPolicy>()
            .unwrap_err()
            .contains("sometimes"));
    }

    #[test]
    fn policies_deserialize_lowercase() {
        use serde::de::value::{Error, StrDeserializer};
        use serde::de::IntoDeserializer;
        let d: StrDeserializer<'_, Error> = "batch".into_deserializer();
        assert_eq!(FsyncPolicy::deserialize(d), Ok(FsyncPolicy::Batch));
        let d: StrDeserializer<'_, Error> = "Batch".into_deserializer();
        assert!(FsyncPolicy::deserialize(d).is_err());
    }

    #[test]
    fn durable_every_follows_the_policy() {
        let mut o = StoreOptions::new(FsyncPolicy::Always, 2);
        assert_eq!(o.durable_every(), 1);
        o.fsync = FsyncPolicy::Batch;
        o.batch_appends_max = 8;
        assert_eq!(o.durable_every(), 8);
        o.batch_appends_max = 0;
        assert_eq!(o.durable_every(), 1);
        o.fsync = FsyncPolicy::Off;
        assert_eq!(o.durable_every(), OFF_DURABLE_EVERY_APPENDS);
    }
}
