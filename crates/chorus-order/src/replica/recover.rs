//! `Replica::recover`: rebuild a replica from its persisted records.
//!
//! The records are replayed in the order they were emitted (a driver may
//! have discarded records below a stable checkpoint, and older `View` records
//! of a lane; both are fine). Then the replica emits `InstallState` for the
//! last stable checkpoint (if any) and `Deliver` for every decided position
//! after it, so a fresh executor catches up; lanes resume as described in
//! `lane/recovery.rs`.

use super::Replica;
use crate::io::{Action, Outbox, PersistRecord};
use bytes::Bytes;
use chorus_core::{Batch, Cell, CheckpointCert, ClusterConfig, Identity, Millis, ReplicaId, Seq, Slot};
use std::collections::BTreeMap;
use std::sync::Arc;

impl Replica {
    pub fn recover(
        config: Arc<ClusterConfig>,
        me: ReplicaId,
        identity: Identity,
        records: Vec<PersistRecord>,
        now: Millis,
        out: &mut Outbox,
    ) -> Replica {
        let mut r = Replica::build(config, me, identity);
        let lanes = r.cfg.lanes();
        let mut decided: BTreeMap<Seq, (Cell, Arc<Batch>)> = BTreeMap::new();
        let mut stable: Option<(CheckpointCert, Bytes)> = None;
        let mut ignored = 0u64;
        // `dispel`: the latest DBFT snapshot and the engine inputs after it.
        let mut dispel_snapshot: Option<Bytes> = None;
        let mut dispel_inputs: Vec<(Millis, Bytes)> = Vec::new();
        // Move every lane's window to the newest stable checkpoint before
        // replaying. Records are in the order written, and a compacted log
        // (io.rs allows dropping what a stable checkpoint covers) can start
        // with slots decided *before* the checkpoint below them became
        // stable: replayed into the initial window [0, W) they were dropped,
        // and the replica came back at its checkpoint with those decisions
        // forgotten. Peers that had moved on then left it to fetch state only
        // a Byzantine replica still served (pbft n=4 seed 40100128; the
        // simulator's store keeps write order, chorus-store replays the
        // latest `Stable` first; recovery must work with both).
        let newest_stable = records
            .iter()
            .filter_map(|rec| match rec {
                PersistRecord::Stable { cert, .. } => Some(cert.seq),
                _ => None,
            })
            .max();
        if let Some(seq) = newest_stable {
            let low = Slot(seq.0 / lanes as u64);
            for lane in r.groups.iter_mut().flat_map(|g| g.lanes.iter_mut()) {
                lane.truncate_below(low);
            }
        }
        for rec in records {
            match rec {
                PersistRecord::View { lane, view } if r.lane(lane).is_some() => {
                    r.lane_mut(lane).expect("checked lane").restore_view(view)
                }
                PersistRecord::TimeoutCert { lane, statements } if r.lane(lane).is_some() => r
                    .lane_mut(lane)
                    .expect("checked lane")
                    .restore_timeouts(statements),
                PersistRecord::Accepted {
                    lane,
                    view,
                    slot,
                    digest,
                    batch,
                } if r.lane(lane).is_some() => r
                    .lane_mut(lane)
                    .expect("checked lane")
                    .restore_accepted(now, view, slot, digest, batch),
                PersistRecord::Prepared { cert } if r.lane(cert.lane).is_some() => {
                    r.lane_mut(cert.lane)
                        .expect("checked lane")
                        .restore_prepared(cert);
                }
                PersistRecord::Decided { cell, digest, batch } if r.lane(cell.lane).is_some() => {
                    if let Some(b) = r
                        .lane_mut(cell.lane)
                        .expect("checked lane")
                        .restore_decided(cell.slot, digest, batch)
                    {
                        decided.insert(r.cfg.seq_of(cell), (cell, b));
                    }
                }
                PersistRecord::Stable { cert, snapshot } => {
                    if stable.as_ref().is_none_or(|(c, _)| cert.seq > c.seq) {
                        let low = Slot(cert.seq.0 / lanes as u64);
                        for lane in r.groups.iter_mut().flat_map(|g| g.lanes.iter_mut()) {
                            lane.truncate_below(low);
                        }
                        decided = decided.split_off(&cert.seq);
                        stable = Some((cert, snapshot));
                    }
                }
                PersistRecord::DispelSnapshot { state, .. } if r.dispel.is_some() => {
                    dispel_snapshot = Some(state);
                    dispel_inputs.clear();
                }
                PersistRecord::DispelInput { now, input } if r.dispel.is_some() => {
                    dispel_inputs.push((now, input));
                }
                _ => ignored += 1,
            }
        }
        if ignored > 0 {
            tracing::warn!(
                ignored,
                "persisted records for lanes that do not exist were ignored"
            );
            *r.counters.rejected.entry("bad-persisted-record").or_insert(0) += ignored;
        }
        if let Some((cert, snapshot)) = stable {
            let seq = cert.seq;
            out.push(Action::InstallState {
                cert: cert.clone(),
                snapshot: snapshot.clone(),
            });
            if let Some(t) = r.adopt_assignments(&snapshot) {
                r.sole_group().adopt_assignments(&t);
            }
            r.hub.checkpointer.install(cert, snapshot);
            r.hub.merger.jump_to(seq);
        }
        for (_, (cell, batch)) in decided {
            let g = r.group_of(cell.lane);
            r.groups[g].pool_of_mut(cell.lane).on_decided(now, cell, &batch);
            r.hub.merger.insert(cell, batch);
        }
        if r.dispel.is_some() {
            r.dispel_recover(now, dispel_snapshot, dispel_inputs, out);
            // The snapshot written with the stable checkpoint (`collect`)
            // may be missing: a crash can keep the `Stable` record and lose
            // the ones after it (a torn tail). The engine then comes back
            // below the checkpoint, waiting for epochs every peer has
            // collected, and never delivers again (dispel n = 4 seed
            // 211030). Collect up to the checkpoint here, as installing it
            // did.
            if let Some(seq) = newest_stable {
                r.dispel_collect(now, Slot(seq.0 / lanes as u64), out);
            }
        }
        r.deliver(now, out);
        r.in_groups(out, |g, hub, counters, out| {
            g.finish_recovery(now, hub, counters, out);
            false
        });
        r.arm_status(now, out);
        r.settle(now, out);
        r
    }
}
