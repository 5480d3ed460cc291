//! `sarek` in the simulator: PREDICT() for the replicas, the partitioned
//! executor, per-stream delivery, and the checks that go with it:
//!
//! - *stream agreement*: correct replicas deliver the same batch for every
//!   cell `(partition, slot)`, each stream in order without gaps;
//! - *cross-border atomicity and serial equivalence*: every correct
//!   replica's executor replays its scheduler log against the streams it was
//!   fed (`chorus_exec::partitioned::check_serial_order`): every request
//!   consumed its sub-requests of every predicted partition at once and only
//!   at their heads (an EXEC never ran while one of its partitions had an
//!   earlier request pending; no partition passed a SYNC before its EXEC ran),
//!   except where Algorithm 3 resolved a cycle. With the state digests the
//!   main checker compares at every checkpoint cut, this is "the same as a
//!   sequential execution of one serial order consistent with every stream".

use crate::node::SimReplica;
use crate::options::EXEC_MAX_INFLIGHT_PER_CLIENT;
use crate::report::ViolationKind;
use crate::world::World;
use chorus_apps::{service_by_name, ServiceOptions};
use chorus_core::{Batch, Cell, ClusterConfig, Digest, ReplicaId};
use chorus_exec::partitioned::{predict, SarekExecutor};
use chorus_exec::Executor;
use chorus_order::sarek::Predictor;
use chorus_order::Event;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// PREDICT() from the named service's access sets (the executor computes
/// the same from its own instance).
pub fn predictor(service: &str, partitions: u16) -> Predictor {
    let svc = service_by_name(service, &ServiceOptions::default()).expect("the service name was validated");
    Predictor::new(Arc::new(move |op: &[u8]| {
        predict(&svc.access(op), partitions)
            .partitions()
            .iter()
            .map(|p| p.0)
            .collect()
    }))
}

pub fn executor(service: &str, config: &ClusterConfig, skip_sync_wait: bool) -> Box<dyn Executor> {
    let svc = service_by_name(service, &ServiceOptions::default()).expect("the service name was validated");
    let k = config.lanes() as u16;
    #[allow(unused_mut)]
    let mut e = SarekExecutor::new(
        svc,
        k,
        config.checkpoint_slots_per_lane(),
        EXEC_MAX_INFLIGHT_PER_CLIENT,
    )
    .recording();
    if skip_sync_wait {
        #[cfg(feature = "skip-sync-wait")]
        e.set_skip_sync_wait(true);
    }
    Box::new(e)
}

/// Per cell, the batch the first correct replica delivered; per correct
/// replica, each stream's next slot (unknown after a restart or install
/// until its next delivery).
#[derive(Default)]
pub struct StreamChecker {
    common: BTreeMap<Cell, (Digest, ReplicaId)>,
    next: BTreeMap<(ReplicaId, u32), u64>,
}

impl StreamChecker {
    pub fn reset(&mut self, r: ReplicaId) {
        self.next.retain(|(x, _), _| *x != r);
    }

    fn check(&mut self, r: ReplicaId, cell: Cell, digest: Digest) -> Option<String> {
        let at = self.next.entry((r, cell.lane.0)).or_insert(cell.slot.0);
        let gap = (*at != cell.slot.0).then(|| {
            format!(
                "{r:?} delivered stream {} slot {} but its next was {at}",
                cell.lane.0, cell.slot.0
            )
        });
        *at = cell.slot.0 + 1;
        match self.common.get(&cell) {
            Some((d, first)) if *d != digest => Some(format!(
                "{r:?} delivered {digest:?} at {cell:?}, {first:?} delivered {d:?}"
            )),
            Some(_) => gap,
            None => {
                self.common.insert(cell, (digest, r));
                gap
            }
        }
    }
}

impl<R: SimReplica> World<R> {
    pub(crate) fn deliver_stream(
        &mut self,
        i: usize,
        cell: Cell,
        batch: Arc<Batch>,
        follow_ups: &mut VecDeque<Event>,
    ) {
        let now = self.now_us();
        let id = self.nodes[i].replica_id;
        let digest = batch.digest();
        self.trace_words(&[0x5a4e, i as u64, cell.lane.0 as u64, cell.slot.0]);
        self.trace.update(digest.as_bytes());
        if self.nodes[i].correct {
            if let Some(v) = self.streams.check(id, cell, digest) {
                let kind = if v.contains("but its next") {
                    ViolationKind::Delivery
                } else {
                    ViolationKind::Agreement
                };
                self.checker.violate(kind, now, v);
            }
        }
        if self.nodes[i].live.is_none() {
            return;
        }
        self.perf_execute(i, &batch);
        let Some(live) = self.nodes[i].live.as_mut() else {
            return;
        };
        if !live.executor.submit_stream(cell, batch) {
            if self.nodes[i].correct {
                self.checker.violate(
                    ViolationKind::Delivery,
                    now,
                    format!(
                        "{id:?}'s executor refused stream {} slot {}",
                        cell.lane.0, cell.slot.0
                    ),
                );
            }
            return;
        }
        self.drain_results(i);
        let at = self.nodes[i].live.as_ref().map(|l| l.executor.next_seq());
        if let Some(at) = at {
            self.checkpoint_if_due(i, at, follow_ups);
        }
    }

    /// What the exactly-once checkers count a result under. In `sarek` a
    /// request's `(client, seq)` is decided by the client table of its
    /// execution partition (docs/decisions.md "SAREK ordering and checkpoint
    /// cuts"): a client reusing one seq for requests that execute in two
    /// partitions gets both executed — only a Byzantine client does that, and
    /// its effect is that of using two seqs. Its results are counted per
    /// execution partition; a correct client's stay keyed by `(client, seq)`.
    pub(crate) fn exactly_once_key(
        &self,
        client: chorus_core::ClientId,
        seq: chorus_core::RequestSeq,
        delivered_at: chorus_core::Seq,
    ) -> (chorus_core::ClientId, chorus_core::RequestSeq) {
        let byzantine_client = client.0 as usize >= self.clients.len();
        if self.opts.mode != chorus_core::OrderingMode::Sarek || !byzantine_client {
            return (client, seq);
        }
        let k = u64::from(self.config.lanes());
        let partition = delivered_at.0 % k;
        (
            client,
            chorus_core::RequestSeq(seq.0.wrapping_mul(k).wrapping_add(partition)),
        )
    }

    /// End of run: every correct replica's executor life replays clean.
    pub(crate) fn audit_executors(&mut self) {
        let now = self.now_us();
        for i in 0..self.nodes.len() {
            if !self.nodes[i].correct {
                continue;
            }
            let id = self.nodes[i].replica_id;
            let Some(found) = self.nodes[i].live.as_ref().and_then(|l| l.executor.audit()) else {
                continue;
            };
            for v in found.into_iter().take(4) {
                self.checker.violate(
                    ViolationKind::SerialOrder,
                    now,
                    format!("{id:?}'s partitioned executor: {v}"),
                );
            }
        }
    }
}
