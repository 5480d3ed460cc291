//! The outbox stage: makes the core's records durable, then encodes and
//! hands on the messages, deliveries and checkpoint requests of the same
//! core rounds, in the order the core emitted them (persist-before-send,
//! DESIGN §2).
//!
//! Where it runs: with more than one pillar, on a thread of its own
//! ([`OutboxThread`]). The core thread is then the one serial part of a
//! replica (docs/decisions.md "Runtime"); on a 16-core machine its storage
//! append, `fdatasync` and message encoding were a quarter of its time
//! (docs/performance.md, 2026-11-26). There the core goes on ordering
//! while this thread writes, and rounds that queued up meanwhile share one
//! write and one sync (group commit). With one pillar the core runs on the
//! pillar's thread, and without syncs (`fsync = off`) so does this stage
//! ([`OutboxStage`] inline): no thread hop between a message read, the
//! round it causes and the writes that follow (docs/decisions.md "The
//! core on its pillar"). With syncs it keeps its thread.

use crate::channels::{ExecInput, PillarInput};
use crate::metrics::Metrics;
use crate::queue::RecvTimeoutError;
use anyhow::Result;
use bytes::Bytes;
use chorus_core::{encode_within, Limits, ReplicaMsg};
use chorus_order::{Action, PersistRecord};
use chorus_store::Store;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Core rounds that may wait for this stage; a full queue holds the core
/// (back-pressure from storage to ordering: `core_thread.rs`, `Downstream`).
pub const OUTBOX_CHANNEL_CAP: usize = 1_024;
/// Rounds written and synced together at most (bounds the delay one slow
/// sync adds to the messages of the first round).
const ROUNDS_PER_SYNC_MAX: usize = 256;
/// Record bytes (estimated) written together at most: one write-ahead frame
/// holds them all, and a frame must stay far below the log's frame limit.
/// A single round above it is still written whole (as before this stage).
const BYTES_PER_SYNC_MAX: usize = 16 << 20;
/// How often the database size is read for the metrics.
const STORAGE_SIZE_EVERY: Duration = Duration::from_secs(1);

/// What one core round leaves to this stage. `actions` never holds a
/// `Persist` (those are `records`) or a timer action (the core keeps its
/// timers).
#[derive(Debug)]
pub struct Round {
    pub records: Vec<PersistRecord>,
    pub actions: Vec<Action>,
}

impl Round {
    /// About what its records take in the write-ahead log: the batches,
    /// snapshots and logged inputs they carry, plus a little per record.
    fn record_bytes(&self) -> usize {
        self.records
            .iter()
            .map(|r| {
                64 + match r {
                    PersistRecord::Accepted { batch, .. } | PersistRecord::Decided { batch, .. } => {
                        batch.requests.iter().map(|q| q.wire_size()).sum::<usize>()
                    }
                    PersistRecord::Stable { snapshot, .. } => snapshot.len(),
                    PersistRecord::DispelSnapshot { state, .. } => state.len(),
                    PersistRecord::DispelInput { input, .. } => input.len(),
                    PersistRecord::TimeoutCert { statements, .. } => statements.len() * 112,
                    PersistRecord::View { .. } | PersistRecord::Prepared { .. } => 0,
                }
            })
            .sum()
    }
}

/// What an outbox stage does with core rounds, wherever it runs: on its
/// own thread ([`OutboxThread`]) or inline on the pillar thread that hosts
/// the core (`core_thread.rs`, `Downstream::Inline`).
pub struct OutboxStage {
    pub store: Store,
    pub pillars: Vec<mpsc::Sender<PillarInput>>,
    pub exec: crate::queue::Sender<ExecInput>,
    pub metrics: Arc<Metrics>,
    /// What peers decode under: every outgoing message must fit.
    pub limits: Limits,
    records: Vec<PersistRecord>,
    last_size: Option<Instant>,
    /// Inline, a full executor queue must not park the pillar thread (its
    /// connections would stall with it): what the executor could not take
    /// waits here, in order, and the core takes no new input until it is
    /// handed on (`CoreThread`, `Driver::settle`). At most the deliveries
    /// of one round. Always empty on the stage's own thread, which blocks.
    exec_backlog: std::collections::VecDeque<ExecInput>,
    inline: bool,
}

pub struct OutboxThread {
    pub stage: OutboxStage,
    pub input: crate::queue::Receiver<Round>,
}

impl OutboxThread {
    /// Runs until the core drops its sender, then flushes what is left. A
    /// storage error is returned, which stops the replica (`fatal`).
    pub fn run(mut self) -> Result<()> {
        let mut rounds: Vec<Round> = Vec::new();
        loop {
            match self.input.recv_timeout(STORAGE_SIZE_EVERY) {
                Ok(first) => rounds.push(first),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            // Group commit: what else is queued, within both bounds.
            let mut bytes: usize = rounds.iter().map(Round::record_bytes).sum();
            while rounds.len() < ROUNDS_PER_SYNC_MAX
                && bytes < BYTES_PER_SYNC_MAX
                && self.input.drain_ready(&mut rounds, 1) == 1
            {
                bytes += rounds.last().map_or(0, Round::record_bytes);
            }
            self.stage.write(&mut rounds)?;
            self.stage.note_storage_size();
        }
        Ok(())
    }
}

impl OutboxStage {
    /// `inline`: run on the thread that hosts the core, which must never
    /// block on the executor (`exec_backlog`).
    pub fn new(
        store: Store,
        pillars: Vec<mpsc::Sender<PillarInput>>,
        exec: crate::queue::Sender<ExecInput>,
        metrics: Arc<Metrics>,
        limits: Limits,
        inline: bool,
    ) -> OutboxStage {
        OutboxStage {
            store,
            pillars,
            exec,
            metrics,
            limits,
            records: Vec::new(),
            last_size: None,
            exec_backlog: std::collections::VecDeque::new(),
            inline,
        }
    }

    /// Whether the executor still has to take some of what was written.
    pub fn backlogged(&self) -> bool {
        !self.exec_backlog.is_empty()
    }

    /// Hand the executor what it could not take before, in order, as far as
    /// it takes it now. An error when the executor is gone (fatal).
    pub fn retry_backlog(&mut self) -> Result<()> {
        while let Some(input) = self.exec_backlog.pop_front() {
            if let Err(input) = self.exec.try_send(input) {
                self.exec_backlog.push_front(input);
                if !self.exec.receiver_alive() {
                    anyhow::bail!("the execution thread stopped; decided batches cannot be executed");
                }
                return Ok(());
            }
        }
        Ok(())
    }

    /// To the executor, in order: blocking on the stage's own thread (a full
    /// executor back-pressures ordering), through `exec_backlog` inline.
    fn hand_to_exec(&mut self, input: ExecInput) {
        if !self.inline {
            let _ = self.exec.send(input);
        } else if !self.exec_backlog.is_empty() {
            self.exec_backlog.push_back(input);
        } else if let Err(input) = self.exec.try_send(input) {
            self.exec_backlog.push_back(input);
        }
    }

    /// Persist every record of `rounds` (one write, at most one sync), then
    /// perform their other actions in the core's order; empties `rounds`.
    /// Persist-before-send: nothing of these rounds leaves before all their
    /// records are durable.
    pub fn write(&mut self, rounds: &mut Vec<Round>) -> Result<()> {
        let mut records = std::mem::take(&mut self.records);
        for r in rounds.iter_mut() {
            records.append(&mut r.records);
        }
        let persisted = self.persist(&mut records);
        self.records = records;
        persisted?;
        for r in rounds.drain(..) {
            for action in r.actions {
                self.perform(action);
            }
        }
        Ok(())
    }

    /// Publish the database's size, at most every `STORAGE_SIZE_EVERY`.
    pub fn note_storage_size(&mut self) {
        if self.last_size.is_some_and(|t| t.elapsed() < STORAGE_SIZE_EVERY) {
            return;
        }
        self.last_size = Some(Instant::now());
        if let Ok(bytes) = self.store.disk_bytes() {
            self.metrics.storage_bytes.set(bytes as i64);
        }
    }

    /// Append and make durable (per the fsync policy) `records`: one
    /// write-ahead frame and at most one fsync (group commit); the store's
    /// own thread brings the tables up to date.
    fn persist(&mut self, records: &mut Vec<PersistRecord>) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        // A failed append or sync is fatal (the thread returns it, see
        // `fatal`): sending on without the records durable would break
        // persist-before-send.
        let count = records.len() as u64;
        self.store
            .append_drain(records)
            .map_err(|e| self.storage_error(e))?;
        let started = Instant::now();
        self.store.sync().map_err(|e| self.storage_error(e))?;
        self.metrics
            .storage_sync_seconds
            .observe(started.elapsed().as_secs_f64());
        self.metrics.persisted_records.inc_by(count);
        records.clear();
        Ok(())
    }

    fn storage_error(&self, e: chorus_store::StoreError) -> anyhow::Error {
        let dir = self.store.path().parent().unwrap_or(std::path::Path::new("."));
        crate::storage::explain(e, dir)
    }

    fn pillar_of(&self, msg: &ReplicaMsg) -> usize {
        msg.pillar(self.pillars.len())
    }

    fn perform(&mut self, action: Action) {
        match action {
            Action::Send { to, msg } => {
                let p = self.pillar_of(&msg);
                let Some(frame) = self.frame(&msg) else { return };
                self.metrics.messages_out.inc();
                self.to_pillar(p, PillarInput::SendPeer { to, frame });
            }
            Action::Broadcast { msg } => {
                let p = self.pillar_of(&msg);
                let Some(frame) = self.frame(&msg) else { return };
                self.metrics.messages_out.inc();
                self.to_pillar(p, PillarInput::BroadcastPeer { frame });
            }
            Action::Deliver { seq, batch, .. } => {
                self.metrics.delivered_batches.inc();
                // A full executor back-pressures ordering (`hand_to_exec`).
                let at = Instant::now();
                self.hand_to_exec(ExecInput::Deliver { seq, batch, at });
            }
            Action::DeliverStream { cell, batch } => {
                self.metrics.delivered_batches.inc();
                self.hand_to_exec(ExecInput::DeliverStream { cell, batch });
            }
            Action::TakeCheckpoint { seq } => {
                self.hand_to_exec(ExecInput::TakeCheckpoint { seq });
            }
            Action::FindMissingCopies => {
                // Asked again next status interval: no need to wait for a
                // full executor's queue.
                let _ = self.exec.try_send(ExecInput::FindMissingCopies);
            }
            Action::InstallState { cert, snapshot } => {
                self.hand_to_exec(ExecInput::InstallState { cert, snapshot });
            }
            Action::Reject { client, seq, reason } => {
                self.metrics.reject(&format!("{reason:?}"));
                let _ = self.exec.try_send(ExecInput::Reject { client, seq, reason });
            }
            Action::Persist(_) | Action::SetTimer { .. } | Action::CancelTimer { .. } => {
                // The core keeps these (`core_thread.rs`); one here is a bug
                // there, and acting on it out of order would be worse.
                debug_assert!(false, "the core handed its outbox stage a {action:?}");
                tracing::error!("outbox stage got a persist or timer action; ignored");
            }
        }
    }

    /// Encode a message for the wire. One its receivers' codec would refuse
    /// is a bug in this replica (every message the codec admits fits a frame,
    /// `chorus_core::wire_bounds`), not something to leave to the transport,
    /// which would drop it and reset the link: counted, logged as an error,
    /// and fatal in debug builds.
    fn frame(&self, msg: &ReplicaMsg) -> Option<Bytes> {
        match encode_within(msg, &self.limits) {
            Ok(bytes) => Some(Bytes::from(bytes)),
            Err(e) => {
                self.metrics.drop_frame("outgoing-oversized");
                tracing::error!(kind = msg.kind(), error = %e, "not sending a message peers would refuse");
                debug_assert!(false, "this replica produced an oversized {}: {e}", msg.kind());
                None
            }
        }
    }

    fn to_pillar(&self, p: usize, input: PillarInput) {
        if self.pillars[p].try_send(input).is_err() {
            // The pillar's queue is full or it is gone: the message is dropped
            // and counted; PBFT's retransmission (status exchange) recovers.
            self.metrics.drop_frame("pillar-queue-full");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{Batch, Digest, FetchBatch, LaneId, ReplicaId, Seq, Slot, View};
    use chorus_store::FsyncPolicy;

    fn record(view: u64) -> PersistRecord {
        PersistRecord::View {
            lane: LaneId(0),
            view: View(view),
        }
    }

    fn message() -> ReplicaMsg {
        ReplicaMsg::FetchBatch(FetchBatch {
            lane: LaneId(0),
            slot: Slot(1),
            digest: Digest([7; 32]),
        })
    }

    struct Stage {
        outbox: crate::queue::Sender<Round>,
        pillar: mpsc::Receiver<PillarInput>,
        exec: crate::queue::Receiver<ExecInput>,
        metrics: Arc<Metrics>,
        handle: std::thread::JoinHandle<Result<()>>,
    }

    fn start(dir: &std::path::Path) -> Stage {
        let store = Store::open(dir, FsyncPolicy::Batch, 1).unwrap();
        let (outbox, input) = crate::queue::bounded(OUTBOX_CHANNEL_CAP);
        let (pillar_tx, pillar) = mpsc::channel(64);
        let (exec_tx, exec) = crate::queue::bounded(64);
        let metrics = Arc::new(Metrics::default());
        let stage = OutboxThread {
            stage: OutboxStage::new(
                store,
                vec![pillar_tx],
                exec_tx,
                metrics.clone(),
                Limits::from_config(
                    &chorus_core::ClusterConfig::for_testing(4, 1, chorus_core::ProtocolParams::default(), 1)
                        .0,
                ),
                false,
            ),
            input,
        };
        let handle = std::thread::spawn(move || stage.run());
        Stage {
            outbox,
            pillar,
            exec,
            metrics,
            handle,
        }
    }

    /// Persist-before-send across the thread hop: by the time a message of a
    /// round reaches its pillar or a delivery reaches the executor, every
    /// record of that round (and of the rounds before it) is written and
    /// synced; and rounds leave in the order the core emitted them.
    #[test]
    fn a_rounds_messages_leave_only_after_its_records_are_durable() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = start(dir.path());
        for round in 1..=20u64 {
            s.outbox
                .send(Round {
                    records: vec![record(round), record(round + 100)],
                    actions: vec![
                        Action::Broadcast { msg: message() },
                        Action::Deliver {
                            seq: Seq(round),
                            cell: chorus_core::Cell {
                                lane: LaneId(0),
                                slot: Slot(round),
                            },
                            batch: Arc::new(Batch::noop()),
                        },
                    ],
                })
                .unwrap();
        }
        for round in 1..=20u64 {
            let got = s.pillar.blocking_recv().expect("the round's broadcast");
            assert!(matches!(got, PillarInput::BroadcastPeer { .. }));
            assert!(
                s.metrics.persisted_records.get() >= 2 * round,
                "round {round}'s message left before its records were durable"
            );
            match s.exec.recv_timeout(Duration::from_secs(5)) {
                Ok(ExecInput::Deliver { seq, .. }) => assert_eq!(seq, Seq(round), "in the core's order"),
                _ => panic!("round {round}'s delivery"),
            }
        }
        drop(s.outbox);
        s.handle.join().unwrap().unwrap();
        let mut store = Store::open(dir.path(), FsyncPolicy::Batch, 1).unwrap();
        assert_eq!(store.load().unwrap().len(), 40, "every record is in the store");
    }

    fn decided(slot: u64, digest: u8) -> PersistRecord {
        PersistRecord::Decided {
            cell: chorus_core::Cell {
                lane: LaneId(0),
                slot: Slot(slot),
            },
            digest: Digest([digest; 32]),
            batch: Arc::new(Batch::noop()),
        }
    }

    fn inline_stage(
        dir: &std::path::Path,
        exec_cap: usize,
    ) -> (
        OutboxStage,
        mpsc::Receiver<PillarInput>,
        crate::queue::Receiver<ExecInput>,
        Arc<Metrics>,
    ) {
        let store = Store::open(dir, FsyncPolicy::Off, 1).unwrap();
        let (pillar_tx, pillar) = mpsc::channel(64);
        let (exec_tx, exec) = crate::queue::bounded(exec_cap);
        let metrics = Arc::new(Metrics::default());
        let limits = Limits::from_config(
            &chorus_core::ClusterConfig::for_testing(4, 1, chorus_core::ProtocolParams::default(), 1).0,
        );
        let stage = OutboxStage::new(store, vec![pillar_tx], exec_tx, metrics.clone(), limits, true);
        (stage, pillar, exec, metrics)
    }

    /// Run inline (the core on its pillar's thread): a round's messages and
    /// deliveries are handed on only once all its records are written; a
    /// round the store refuses (here: a second, different decision for a
    /// slot) hands on nothing.
    #[test]
    fn the_inline_stage_persists_a_round_before_it_hands_anything_on() {
        let dir = tempfile::tempdir().unwrap();
        let (mut stage, mut pillar, exec, metrics) = inline_stage(dir.path(), 64);
        let round = |records: Vec<PersistRecord>, seq: u64| Round {
            records,
            actions: vec![
                Action::Send {
                    to: ReplicaId(2),
                    msg: message(),
                },
                Action::TakeCheckpoint { seq: Seq(seq) },
            ],
        };
        stage
            .write(&mut vec![round(vec![record(1), decided(1, 1)], 1)])
            .unwrap();
        assert_eq!(metrics.persisted_records.get(), 2);
        assert!(matches!(pillar.try_recv(), Ok(PillarInput::SendPeer { .. })));
        assert!(matches!(
            exec.recv_timeout(Duration::from_secs(1)),
            Ok(ExecInput::TakeCheckpoint { seq: Seq(1) })
        ));
        let refused = stage.write(&mut vec![round(vec![record(2), decided(1, 2)], 2)]);
        assert!(refused.is_err(), "the store refuses a conflicting decision");
        assert!(pillar.try_recv().is_err(), "nothing of a refused round is sent");
        assert!(
            exec.recv_timeout(Duration::from_millis(50)).is_err(),
            "nor delivered"
        );
        stage.note_storage_size();
        assert!(metrics.storage_bytes.get() > 0, "the store's size is published");
    }

    /// Inline, a full executor queue never blocks the thread (it hosts the
    /// replica's connections): what the executor cannot take waits in the
    /// stage, and is handed on in the core's order as room frees up.
    #[test]
    fn the_inline_stage_keeps_what_a_full_executor_cannot_take_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (mut stage, _pillar, exec, _metrics) = inline_stage(dir.path(), 1);
        let checkpoints = |from: u64, to: u64| Round {
            records: vec![record(from)],
            actions: (from..=to)
                .map(|s| Action::TakeCheckpoint { seq: Seq(s) })
                .collect(),
        };
        stage.write(&mut vec![checkpoints(1, 3)]).unwrap();
        assert!(stage.backlogged(), "two of three wait");
        let take = || match exec.recv_timeout(Duration::from_secs(1)) {
            Ok(ExecInput::TakeCheckpoint { seq }) => seq.0,
            _ => panic!("no checkpoint request"),
        };
        assert_eq!(take(), 1);
        // Room for one now, but a later round's request queues behind the
        // backlog instead of overtaking it.
        stage.write(&mut vec![checkpoints(4, 4)]).unwrap();
        let mut got = Vec::new();
        while got.len() < 3 {
            stage.retry_backlog().unwrap();
            got.push(take());
        }
        assert_eq!(got, vec![2, 3, 4]);
        assert!(!stage.backlogged());
        drop(exec);
        stage.write(&mut vec![checkpoints(5, 6)]).unwrap();
        assert!(
            stage.retry_backlog().is_err(),
            "a gone executor is an error, not a wait forever"
        );
    }

    /// The core's end closes the queue: what is still queued is written and
    /// sent before the stage stops cleanly.
    #[test]
    fn rounds_queued_when_the_core_stops_are_still_written_and_sent() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = start(dir.path());
        for round in 1..=5u64 {
            s.outbox
                .send(Round {
                    records: vec![record(round)],
                    actions: vec![Action::Send {
                        to: ReplicaId(1),
                        msg: message(),
                    }],
                })
                .unwrap();
        }
        drop(s.outbox);
        s.handle.join().unwrap().unwrap();
        assert_eq!(s.metrics.persisted_records.get(), 5);
        let mut sent = 0;
        while let Ok(PillarInput::SendPeer { to, .. }) = s.pillar.try_recv() {
            assert_eq!(to, ReplicaId(1));
            sent += 1;
        }
        assert_eq!(sent, 5);
    }
}
