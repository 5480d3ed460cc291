//! A replica's durable storage in the simulator: the `PersistRecord`s it
//! emitted, in order. This is the only thing that survives a crash. The
//! simulator performs a replica's actions in the order emitted, so a record is
//! durable before any later send of the same outbox leaves (persist-before-send).

use chorus_core::{Cell, ClusterConfig, LaneId, Seq};
use chorus_order::PersistRecord;

#[derive(Clone, Debug, Default)]
pub struct Store {
    records: Vec<PersistRecord>,
    /// When set, records below a stable checkpoint are discarded as the
    /// contract allows; otherwise the whole log is replayed on recovery (both
    /// must work, so the simulator picks one per seed).
    compact: bool,
    /// `false`: a resource-model run without crashes, which never replays:
    /// count appends, keep nothing (`measuring`).
    keep: bool,
    appended: u64,
}

impl Store {
    pub fn new(compact: bool) -> Store {
        Store {
            records: Vec::new(),
            compact,
            keep: true,
            appended: 0,
        }
    }

    /// For resource-model runs without crashes: nothing is ever replayed, so
    /// nothing is kept. A dispel replica logs every DBFT input, and at
    /// n = 31 that log was most of a 1 GB run (n = 64: over 10 GB).
    pub fn measuring() -> Store {
        Store {
            keep: false,
            ..Store::new(true)
        }
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Records appended over the whole run (compaction does not lower it).
    pub fn appended(&self) -> u64 {
        self.appended
    }

    /// The records `Replica::recover` replays, in the order they were written.
    pub fn records(&self) -> Vec<PersistRecord> {
        assert!(
            self.keep,
            "a measuring store is never replayed (no crash in the plan)"
        );
        self.records.clone()
    }

    pub fn append(&mut self, record: PersistRecord, config: &ClusterConfig) {
        self.appended += 1;
        if !self.keep {
            return;
        }
        if self.compact {
            match &record {
                PersistRecord::Stable { cert, .. } => self.discard_below(cert.seq, config),
                PersistRecord::View { lane, .. } => self.discard_older_view(*lane),
                PersistRecord::TimeoutCert { lane, .. } => self
                    .records
                    .retain(|r| !matches!(r, PersistRecord::TimeoutCert { lane: l, .. } if l == lane)),
                // A DBFT snapshot covers every earlier DBFT record.
                PersistRecord::DispelSnapshot { .. } => self.records.retain(|r| {
                    !matches!(
                        r,
                        PersistRecord::DispelSnapshot { .. } | PersistRecord::DispelInput { .. }
                    )
                }),
                _ => {}
            }
        }
        self.records.push(record);
    }

    /// Everything below a stable checkpoint may be discarded (io.rs).
    fn discard_below(&mut self, stable: Seq, config: &ClusterConfig) {
        let seq_of = |lane: LaneId, slot| config.seq_of(Cell { lane, slot });
        self.records.retain(|r| match r {
            PersistRecord::View { .. }
            | PersistRecord::DispelSnapshot { .. }
            | PersistRecord::DispelInput { .. }
            | PersistRecord::TimeoutCert { .. } => true,
            PersistRecord::Accepted { lane, slot, .. } => seq_of(*lane, *slot) >= stable,
            PersistRecord::Prepared { cert } => seq_of(cert.lane, cert.slot) >= stable,
            PersistRecord::Decided { cell, .. } => config.seq_of(*cell) >= stable,
            PersistRecord::Stable { cert, .. } => cert.seq > stable,
        });
    }

    /// Only the latest view of a lane matters on replay.
    fn discard_older_view(&mut self, lane: LaneId) {
        self.records
            .retain(|r| !matches!(r, PersistRecord::View { lane: l, .. } if *l == lane));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use chorus_core::{Batch, CheckpointCert, Digest, ProtocolParams, Slot, View};

    fn config() -> ClusterConfig {
        let params = ProtocolParams {
            pillars: 2,
            checkpoint_interval: 4,
            window_slots: 8,
            ..ProtocolParams::default()
        };
        ClusterConfig::for_testing(4, 1, params, 1).0
    }

    fn decided(lane: u32, slot: u64) -> PersistRecord {
        PersistRecord::Decided {
            cell: Cell {
                lane: LaneId(lane),
                slot: Slot(slot),
            },
            digest: Batch::noop_digest(),
            batch: std::sync::Arc::new(Batch::noop()),
        }
    }

    fn stable(seq: u64) -> PersistRecord {
        PersistRecord::Stable {
            cert: CheckpointCert {
                seq: Seq(seq),
                state_digest: Digest::of(b"s"),
                votes: vec![],
            },
            snapshot: Bytes::new(),
        }
    }

    #[test]
    fn compaction_drops_records_below_the_stable_checkpoint() {
        let c = config();
        let mut s = Store::new(true);
        for slot in 0..4 {
            s.append(decided(0, slot), &c);
            s.append(decided(1, slot), &c);
        }
        s.append(stable(4), &c);
        // Seqs 0..4 are slots 0 and 1 of both lanes: gone; 4..8 stay.
        assert_eq!(s.len(), 5);
        s.append(stable(8), &c);
        assert_eq!(s.records(), vec![stable(8)]);
        assert_eq!(s.appended(), 10);
    }

    #[test]
    fn compaction_keeps_latest_view_per_lane() {
        let c = config();
        let mut s = Store::new(true);
        let v = |lane, view| PersistRecord::View {
            lane: LaneId(lane),
            view: View(view),
        };
        s.append(v(0, 1), &c);
        s.append(v(1, 1), &c);
        s.append(v(0, 2), &c);
        assert_eq!(s.records(), vec![v(1, 1), v(0, 2)]);
    }

    #[test]
    fn without_compaction_everything_is_kept_in_order() {
        let c = config();
        let mut s = Store::new(false);
        s.append(decided(0, 0), &c);
        s.append(stable(4), &c);
        s.append(decided(0, 9), &c);
        assert_eq!(s.records(), vec![decided(0, 0), stable(4), decided(0, 9)]);
    }

    /// A resource-model run without crashes keeps nothing, only counts, and
    /// replaying it would be a bug in the simulator: it says so loudly.
    #[test]
    fn a_measuring_store_counts_and_keeps_nothing() {
        let mut s = Store::measuring();
        for slot in 0..100 {
            s.append(decided(0, slot), &config());
        }
        assert_eq!(s.appended(), 100);
        assert!(s.is_empty());
        let replay = std::panic::catch_unwind(|| s.records());
        assert!(replay.is_err());
    }
}
