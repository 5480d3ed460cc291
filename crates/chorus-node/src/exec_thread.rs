//! The execution thread: runs delivered batches through the executor, takes
//! checkpoints exactly at their position, installs transferred state, and
//! routes replies to the pillar that owns each client's connection (COP:
//! replies leave through the client's pillar).

use crate::channels::{CoreInput, ExecInput, PillarInput};
use crate::metrics::Metrics;
use crate::status::{CoreStatus, StatusReport};
use bytes::Bytes;
use chorus_core::{
    encode, ClientId, ClientMsg, ClusterConfig, Digest, ReplicaId, Reply, ReplyBody, RequestSeq, Seq,
};
use chorus_exec::{ExecResult, Executor, ReplyLookup};
use chorus_order::RejectReason;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Results up to this size are sent in full by every replica; larger ones in
/// full by one designated replica and as a digest by the others (PBFT §5.1.3).
const FULL_REPLY_MAX_BYTES: usize = 1024;

/// Longest sleep of the execution thread without input or a results poke.
const IDLE_POLL: Duration = Duration::from_millis(10);

pub struct ExecThread {
    pub config: Arc<ClusterConfig>,
    pub me: ReplicaId,
    pub executor: Box<dyn Executor>,
    pub input: crate::queue::Receiver<ExecInput>,
    pub pillars: Vec<mpsc::Sender<PillarInput>>,
    /// To the core, never blocking (checkpoints taken, states installed,
    /// re-predictions): the core may itself be waiting for room in a queue
    /// that drains only through this thread (core → outbox → executor), so
    /// a blocking send here could stop all three for good. Bounded by what
    /// causes them: one per checkpoint position or install the core asked
    /// for, one per suspended request.
    pub core: mpsc::UnboundedSender<CoreInput>,
    pub core_status: watch::Receiver<CoreStatus>,
    pub metrics: Arc<Metrics>,
    /// Replies of the current round, per pillar (see `flush_replies`).
    pub outgoing: Vec<Vec<(ClientId, Bytes)>>,
}

impl ExecThread {
    pub fn run(mut self) {
        // Pillars a client is connected to (one entry per connection; newest last).
        let mut clients: HashMap<ClientId, Vec<usize>> = HashMap::new();
        let mut checkpoints: BTreeSet<Seq> = BTreeSet::new();
        // Requests resent before we executed them: their client waits for
        // every replica now, so we reply on execution even when it had
        // asked others (`FEW_REPLIES`).
        let mut resent = crate::resent::Resent::default();
        let mut results: Vec<ExecResult> = Vec::new();
        let mut repredictions: Vec<chorus_core::RePrediction> = Vec::new();
        let mut stages = crate::latency::Stages::new(&self.metrics);
        let mut timed: Vec<Option<std::time::Instant>> = Vec::new();
        self.outgoing = vec![Vec::new(); self.pillars.len()];
        loop {
            // Results of the parallel executor poke the queue, so the timeout
            // is only a safety net; a short one cost idle wake-ups.
            let msg = match self.input.recv_timeout(IDLE_POLL) {
                Ok(m) => Some(m),
                Err(crate::queue::RecvTimeoutError::Timeout) => None,
                Err(crate::queue::RecvTimeoutError::Disconnected) => break,
            };
            if let Some(msg) = msg {
                match msg {
                    ExecInput::Deliver { seq, batch, at } => {
                        stages.delivered(&batch, at);
                        self.checkpoint_if_due(&mut checkpoints);
                        self.metrics.executed_requests.inc_by(batch.requests.len() as u64);
                        self.executor.submit(seq, batch);
                    }
                    ExecInput::DeliverStream { cell, batch } => {
                        self.metrics.executed_requests.inc_by(batch.requests.len() as u64);
                        if !self.executor.submit_stream(cell, batch) {
                            // A mode/executor mismatch or a gap: a bug, loudly.
                            tracing::error!(?cell, "the executor refused a stream delivery");
                        }
                    }
                    ExecInput::TakeCheckpoint { seq } => {
                        if seq < self.executor.next_seq() {
                            tracing::error!(?seq, next = ?self.executor.next_seq(), "checkpoint requested after its position was executed");
                        } else {
                            checkpoints.insert(seq);
                        }
                    }
                    ExecInput::FindMissingCopies => {
                        let copies = self.executor.missing_copies();
                        if !copies.is_empty() {
                            self.metrics.sarek_missing_copies.inc_by(copies.len() as u64);
                            tracing::info!(
                                requests = copies.len(),
                                "cross-partition requests lack another partition's copy; handed on again"
                            );
                            let _ = self.core.send(CoreInput::MissingCopies(copies));
                        }
                    }
                    ExecInput::InstallState { cert, snapshot } => {
                        let outcome = self.executor.install(cert.seq, &snapshot, cert.state_digest);
                        if outcome.is_ok() {
                            checkpoints.retain(|s| *s > cert.seq);
                        }
                        let state_digest = install_answer(&outcome, &cert);
                        // Always answer: the core holds delivery until it
                        // hears how the install ended (issue 8, finding 5).
                        let _ = self.core.send(CoreInput::StateInstalled {
                            seq: cert.seq,
                            state_digest,
                        });
                    }
                    ExecInput::ReadOnly { request } => {
                        if let Some(result) = self.executor.execute_read_only(&request.op) {
                            let body = self.body_for(request.client, request.seq, false, result);
                            let d = Some(request.digest());
                            self.reply(&clients, request.client, request.seq, d, true, body);
                        } else {
                            // Not read-only after all: the client falls back to ordering.
                            let body = ReplyBody::Rejected("operation is not read-only".into());
                            let d = Some(request.digest());
                            self.reply(&clients, request.client, request.seq, d, true, body);
                        }
                    }
                    ExecInput::Reject { client, seq, reason } => {
                        let body = match reason {
                            RejectReason::Busy => {
                                self.metrics.busy_replies.inc();
                                ReplyBody::Busy
                            }
                            other => ReplyBody::Rejected(format!("{other:?}")),
                        };
                        // Admission does not hand us the request: no digest, no result either.
                        self.reply(&clients, client, seq, None, false, body);
                    }
                    ExecInput::ClientAt { client, pillar } => {
                        let conns = clients.entry(client).or_default();
                        // Bounded by the pillars' connection limits; keep it small anyway.
                        if conns.len() >= 64 {
                            conns.remove(0);
                        }
                        conns.push(pillar);
                    }
                    ExecInput::ClientGone { client, pillar } => {
                        if let Some(conns) = clients.get_mut(&client) {
                            if let Some(i) = conns.iter().rposition(|p| *p == pillar) {
                                conns.remove(i);
                            }
                            if conns.is_empty() {
                                clients.remove(&client);
                            }
                        }
                    }
                    ExecInput::Retransmit { client, seq, digest } => {
                        if self
                            .executor
                            .request_digest(client, seq)
                            .is_some_and(|d| d != digest)
                        {
                            self.metrics.reject("seq-reused");
                            let why = chorus_exec::RejectKind::SeqReused.as_str();
                            let body = ReplyBody::Rejected(why.into());
                            self.reply(&clients, client, seq, Some(digest), false, body);
                            continue;
                        }
                        match self.executor.reply_lookup(client, seq) {
                            ReplyLookup::Ready(result) => {
                                let body = ReplyBody::Full(result);
                                self.reply(&clients, client, seq, Some(digest), false, body);
                            }
                            // Counted as executed with no reply left: it will never
                            // run; tell the client instead of leaving it in silence.
                            ReplyLookup::Gone => {
                                let body = ReplyBody::Rejected(chorus_core::REJECT_ABANDONED.into());
                                self.reply(&clients, client, seq, Some(digest), false, body);
                            }
                            ReplyLookup::Unknown | ReplyLookup::Pending => resent.insert(client, seq),
                        }
                    }
                    ExecInput::StatusQuery { client } => {
                        let report = self.status_report();
                        let text = serde_json::to_string(&report).unwrap_or_default();
                        self.send_client(&clients, client, &ClientMsg::StatusReport(text));
                    }
                }
            }
            self.executor.drain_results(&mut results);
            // SAREK §IV-D: suspended requests' re-predictions to the core.
            self.executor.drain_repredictions(&mut repredictions);
            for body in repredictions.drain(..) {
                let _ = self.core.send(CoreInput::Mispredicted(body));
            }
            let executed_at = std::time::Instant::now();
            let (n, f) = (self.config.n(), self.config.f());
            for r in results.drain(..) {
                if let Some(admitted) = stages.executed(r.client, r.request_seq, executed_at) {
                    timed.push(admitted);
                }
                // The client asked f + 1 others; it gets ours if it resent the
                // request (then, as from the reply cache, in full) or if this
                // copy is a duplicate.
                let resent_here = resent.take(r.client, r.request_seq);
                if r.few_replies
                    && !resent_here
                    && !r.duplicate
                    && !chorus_core::designated_replier(r.client, r.request_seq, self.me, n, f)
                {
                    self.metrics.replies_left_to_others.inc();
                    continue;
                }
                let body = if resent_here {
                    ReplyBody::Full(r.result)
                } else {
                    self.body_for(r.client, r.request_seq, r.few_replies, r.result)
                };
                self.reply(&clients, r.client, r.request_seq, Some(r.request), false, body);
            }
            self.checkpoint_if_due(&mut checkpoints);
            self.flush_replies();
            if !timed.is_empty() {
                stages.replied(&timed, executed_at);
                timed.clear();
            }
            self.metrics
                .executed_position
                .set(self.executor.next_seq().0 as i64);
        }
    }

    /// Hand each pillar the replies of this round in one message.
    fn flush_replies(&mut self) {
        for p in 0..self.outgoing.len() {
            if self.outgoing[p].is_empty() {
                continue;
            }
            let frames = std::mem::take(&mut self.outgoing[p]);
            let count = frames.len() as u64;
            if self.pillars[p].try_send(PillarInput::ToClients(frames)).is_err() {
                self.metrics.drop_frame("reply-queue-full");
            } else {
                self.metrics.replies_sent.inc_by(count);
            }
        }
    }

    /// CBASE sync: a checkpoint at `seq` is taken when everything below it and
    /// nothing at or above it has been submitted.
    fn checkpoint_if_due(&mut self, checkpoints: &mut BTreeSet<Seq>) {
        while let Some(&seq) = checkpoints.first() {
            let next = self.executor.next_seq();
            if next < seq {
                return;
            }
            checkpoints.pop_first();
            if next > seq {
                tracing::error!(?seq, ?next, "missed checkpoint position");
                continue;
            }
            let cp = self.executor.checkpoint();
            assert_eq!(
                cp.next_seq, seq,
                "checkpoint must be taken exactly at its position"
            );
            let _ = self.core.send(CoreInput::Checkpointed {
                seq,
                state_digest: cp.state_digest,
                snapshot: cp.snapshot,
            });
        }
    }

    fn body_for(&self, client: ClientId, seq: RequestSeq, few: bool, result: Bytes) -> ReplyBody {
        // With few replies, the first designated replier; otherwise the
        // role rotates per request (`chorus_core::reply_start`).
        let n = self.config.n();
        let designated = if few {
            chorus_core::reply_start(client, seq, n) == self.me.index()
        } else {
            (seq.0 % n as u64) as usize == self.me.index()
        };
        if result.len() <= FULL_REPLY_MAX_BYTES || designated {
            ReplyBody::Full(result)
        } else {
            ReplyBody::Digest(Digest::of(&result))
        }
    }

    /// Queue a reply; `flush_replies` sends it at the end of the round.
    fn reply(
        &mut self,
        clients: &HashMap<ClientId, Vec<usize>>,
        client: ClientId,
        seq: RequestSeq,
        request: Option<Digest>,
        read_only: bool,
        body: ReplyBody,
    ) {
        let reply = Reply {
            client,
            seq,
            request,
            replica: self.me,
            read_only,
            body,
        };
        let Some(&pillar) = clients.get(&client).and_then(|c| c.last()) else {
            // Not connected here: see `send_client`.
            return;
        };
        let frame = Bytes::from(encode(&ClientMsg::Reply(reply)));
        if let Some(q) = self.outgoing.get_mut(pillar) {
            q.push((client, frame));
        }
    }

    fn send_client(
        &self,
        clients: &HashMap<ClientId, Vec<usize>>,
        client: ClientId,
        msg: &ClientMsg,
    ) -> bool {
        let Some(&pillar) = clients.get(&client).and_then(|c| c.last()) else {
            // Not connected here: the client gets its answer from the others,
            // or from our cached reply when it retransmits.
            return false;
        };
        let frame = Bytes::from(encode(msg));
        if self.pillars[pillar]
            .try_send(PillarInput::ToClient { client, frame })
            .is_err()
        {
            self.metrics.drop_frame("reply-queue-full");
            return false;
        }
        true
    }

    fn status_report(&mut self) -> StatusReport {
        let core = self.core_status.borrow().clone();
        StatusReport {
            replica: self.me.0,
            mode: format!("{:?}", self.config.params.mode).to_lowercase(),
            lanes: self.config.lanes(),
            core,
            executed_seq: self.executor.next_seq().0,
            state_digest: self.executor.state_digest().to_hex(),
            executed_requests: self.metrics.executed_requests.get(),
            peer_connections: self.metrics.peer_connections.get(),
            client_connections: self.metrics.client_connections.get(),
            replied_timed: self
                .metrics
                .latency
                .replied
                .load(std::sync::atomic::Ordering::Relaxed),
            replied_timed_us: self
                .metrics
                .latency
                .replied_us
                .load(std::sync::atomic::Ordering::Relaxed),
            busy_replies: self.metrics.busy_replies.get(),
            partitions: self.executor.partition_detail(),
        }
    }
}

/// The digest to report for an install, logging a refused snapshot (a peer
/// sent a state that does not decode or is not the certified one: the core
/// counts it and fetches from another peer).
fn install_answer(
    outcome: &Result<Digest, chorus_exec::ExecError>,
    cert: &chorus_core::CheckpointCert,
) -> Digest {
    if let Err(e) = outcome {
        tracing::warn!(seq = ?cert.seq, error = %e, "refused a transferred snapshot; keeping the current state");
    }
    chorus_exec::installed_digest(outcome, &cert.state_digest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{CheckpointCert, ProtocolParams};
    use chorus_exec::SequentialExecutor;
    use std::time::Instant;

    /// Run an execution thread, hand it `snapshot` under a certificate for
    /// `certified`; return what it tells the core (None: nothing in 5 s) and
    /// whether the executor still stands at position 1 afterwards.
    /// An execution thread at position 1 (a kv service, seq 0 executed):
    /// its input, what it tells the core, and the thread.
    fn start() -> (
        crate::queue::Sender<ExecInput>,
        mpsc::UnboundedReceiver<CoreInput>,
        std::thread::JoinHandle<()>,
    ) {
        let mut executor = SequentialExecutor::new(Arc::new(chorus_apps::KvService::default()), 8);
        executor.submit(Seq(0), Arc::new(chorus_core::Batch::noop()));
        start_with(Box::new(executor))
    }

    fn start_with(
        executor: Box<dyn Executor>,
    ) -> (
        crate::queue::Sender<ExecInput>,
        mpsc::UnboundedReceiver<CoreInput>,
        std::thread::JoinHandle<()>,
    ) {
        let (config, _, _) = ClusterConfig::for_testing(4, 1, ProtocolParams::default(), 1);
        let (exec_tx, exec_rx) = crate::queue::bounded(16);
        let (core_tx, core_rx) = mpsc::unbounded_channel();
        let (_status_tx, status_rx) = watch::channel(CoreStatus::default());
        let (pillar_tx, _pillar_rx) = mpsc::channel(16);
        let thread = ExecThread {
            config: Arc::new(config),
            me: ReplicaId(0),
            executor,
            input: exec_rx,
            pillars: vec![pillar_tx],
            core: core_tx,
            core_status: status_rx,
            metrics: Arc::new(Metrics::default()),
            outgoing: Vec::new(),
        };
        (exec_tx, core_rx, std::thread::spawn(move || thread.run()))
    }

    fn install(snapshot: Bytes, certified: Digest) -> (Option<(Seq, Digest)>, bool) {
        let (exec_tx, mut core_rx, handle) = start();
        let cert = CheckpointCert {
            seq: Seq(8),
            state_digest: certified,
            votes: vec![],
        };
        assert!(exec_tx.send(ExecInput::InstallState { cert, snapshot }).is_ok());
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut answer = None;
        while Instant::now() < deadline && answer.is_none() {
            match core_rx.try_recv() {
                Ok(CoreInput::StateInstalled { seq, state_digest }) => answer = Some((seq, state_digest)),
                Ok(_) => {}
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        // Still at position 1? Then a checkpoint there is taken at once.
        assert!(exec_tx.send(ExecInput::TakeCheckpoint { seq: Seq(1) }).is_ok());
        let mut still_at_1 = false;
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && !still_at_1 {
            match core_rx.try_recv() {
                Ok(CoreInput::Checkpointed { seq, .. }) => still_at_1 = seq == Seq(1),
                Ok(_) => {}
                Err(_) if answer.as_ref().is_some_and(|(_, d)| *d == certified) => break,
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        drop(exec_tx);
        handle.join().expect("exec thread");
        (answer, still_at_1)
    }

    /// `sarek`: asked twice (two status intervals) with a cross-partition
    /// request delivered in partition 0 only, the thread tells the core
    /// that partition 1's copy is missing; asked again once it arrived, it
    /// says nothing.
    #[test]
    fn missing_sarek_copies_reach_the_core() {
        // A service without access sets: every request is in both
        // partitions.
        struct Everywhere;
        impl chorus_exec::Service for Everywhere {
            fn execute(&self, _op: &[u8], _ctx: &chorus_exec::ExecContext) -> Bytes {
                Bytes::new()
            }
            fn snapshot(&self) -> Bytes {
                Bytes::new()
            }
            fn restore(&self, _snapshot: &[u8]) -> Result<(), String> {
                Ok(())
            }
        }
        let executor = chorus_exec::partitioned::SarekExecutor::new(Arc::new(Everywhere), 2, 4, 64);
        let (exec_tx, mut core_rx, handle) = start_with(Box::new(executor));
        let req = chorus_core::Request {
            memo: Default::default(),
            client: chorus_core::ClientId(1),
            seq: chorus_core::RequestSeq(1),
            flags: 0,
            op: Bytes::from_static(b"op"),
            auth: chorus_core::Authenticator::Macs(Default::default()),
        };
        let batch = Arc::new(chorus_core::Batch {
            requests: vec![req.clone()],
            time_ms: 0,
        });
        let cell = |lane| chorus_core::Cell {
            lane: chorus_core::LaneId(lane),
            slot: chorus_core::Slot(0),
        };
        let ask = |core_rx: &mut mpsc::UnboundedReceiver<CoreInput>| {
            // Two status intervals: a copy lacking at both is reported.
            assert!(exec_tx.send(ExecInput::FindMissingCopies).is_ok());
            assert!(exec_tx.send(ExecInput::FindMissingCopies).is_ok());
            let deadline = Instant::now() + Duration::from_millis(300);
            let mut got = Vec::new();
            while Instant::now() < deadline {
                match core_rx.try_recv() {
                    Ok(CoreInput::MissingCopies(c)) => got.extend(c),
                    Ok(_) => {}
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            got
        };
        assert!(exec_tx
            .send(ExecInput::DeliverStream {
                cell: cell(0),
                batch: batch.clone()
            })
            .is_ok());
        let missing = ask(&mut core_rx);
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert_eq!(missing[0].0.digest(), req.digest());
        assert_eq!(missing[0].1, vec![chorus_core::LaneId(1)]);
        assert!(exec_tx
            .send(ExecInput::DeliverStream { cell: cell(1), batch })
            .is_ok());
        assert!(ask(&mut core_rx).is_empty());
        drop(exec_tx);
        handle.join().expect("exec thread");
    }

    /// The execution thread never waits for the core: with the core itself
    /// blocked on a full outbox queue that drains only into this thread,
    /// a blocking report (it used `blocking_send` on a bounded channel)
    /// stopped core, outbox stage and executor for good (review of
    /// 2026-11-26). Here the core reads nothing while 200 checkpoints are
    /// taken; every one is still reported and the thread finishes.
    #[test]
    fn checkpoints_are_reported_even_while_the_core_reads_nothing() {
        let (exec_tx, mut core_rx, handle) = start();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = handle.join();
            let _ = done_tx.send(());
        });
        const CHECKPOINTS: u64 = 200;
        for s in 1..=CHECKPOINTS {
            let batch = Arc::new(chorus_core::Batch::noop());
            assert!(exec_tx
                .send(ExecInput::Deliver {
                    seq: Seq(s),
                    batch,
                    at: Instant::now()
                })
                .is_ok());
            assert!(exec_tx
                .send(ExecInput::TakeCheckpoint { seq: Seq(s + 1) })
                .is_ok());
        }
        drop(exec_tx);
        assert!(
            done_rx.recv_timeout(Duration::from_secs(20)).is_ok(),
            "the execution thread waited for the core"
        );
        let mut reported = 0;
        while let Ok(m) = core_rx.try_recv() {
            if matches!(m, CoreInput::Checkpointed { .. }) {
                reported += 1;
            }
        }
        assert_eq!(reported, CHECKPOINTS);
    }

    /// Issue 8, finding 5: a snapshot that does not decode used to be logged
    /// and never answered, leaving the core installing for ever.
    #[test]
    fn a_snapshot_that_does_not_decode_is_reported_to_the_core() {
        let certified = Digest::of(b"the certified state");
        let (answer, kept) = install(Bytes::from_static(b"\x07garbage"), certified);
        let (seq, digest) = answer.expect("the core hears how the install ended");
        assert_eq!(seq, Seq(8));
        assert_ne!(digest, certified, "a failed install never matches");
        assert!(kept, "the executor kept its state");
    }

    #[test]
    fn a_certified_snapshot_is_installed_and_reported() {
        let mut source = SequentialExecutor::new(Arc::new(chorus_apps::KvService::default()), 8);
        for s in 0..8 {
            source.submit(Seq(s), Arc::new(chorus_core::Batch::noop()));
        }
        let cp = source.checkpoint();
        let (answer, _) = install(cp.snapshot, cp.state_digest);
        assert_eq!(answer, Some((Seq(8), cp.state_digest)));
    }
}
