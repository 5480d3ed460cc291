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
    pub core: mpsc::Sender<CoreInput>,
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
        let mut results: Vec<ExecResult> = Vec::new();
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
                    ExecInput::Deliver { seq, batch } => {
                        self.checkpoint_if_due(&mut checkpoints);
                        self.metrics.executed_requests.inc_by(batch.requests.len() as u64);
                        self.executor.submit(seq, batch);
                    }
                    ExecInput::TakeCheckpoint { seq } => {
                        if seq < self.executor.next_seq() {
                            tracing::error!(?seq, next = ?self.executor.next_seq(), "checkpoint requested after its position was executed");
                        } else {
                            checkpoints.insert(seq);
                        }
                    }
                    ExecInput::InstallState { cert, snapshot } => {
                        checkpoints.retain(|s| *s > cert.seq);
                        match self.executor.restore(cert.seq, &snapshot) {
                            Ok(state_digest) => {
                                let _ = self.core.blocking_send(CoreInput::StateInstalled {
                                    seq: cert.seq,
                                    state_digest,
                                });
                            }
                            Err(e) => tracing::error!(error = ?e, "state transfer snapshot did not restore"),
                        }
                    }
                    ExecInput::ReadOnly { request } => {
                        if let Some(result) = self.executor.execute_read_only(&request.op) {
                            let body = self.body_for(request.seq, result);
                            self.reply(&clients, request.client, request.seq, true, body);
                        } else {
                            // Not read-only after all: the client falls back to ordering.
                            let body = ReplyBody::Rejected("operation is not read-only".into());
                            self.reply(&clients, request.client, request.seq, true, body);
                        }
                    }
                    ExecInput::Reject { client, seq, reason } => {
                        let body = match reason {
                            RejectReason::Busy => ReplyBody::Busy,
                            other => ReplyBody::Rejected(format!("{other:?}")),
                        };
                        self.reply(&clients, client, seq, false, body);
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
                    ExecInput::Retransmit { client, seq } => match self.executor.reply_lookup(client, seq) {
                        ReplyLookup::Ready(result) => {
                            self.reply(&clients, client, seq, false, ReplyBody::Full(result));
                        }
                        // Counted as executed with no reply left: it will never
                        // run; tell the client instead of leaving it in silence.
                        ReplyLookup::Gone => {
                            let body = ReplyBody::Rejected(chorus_core::REJECT_ABANDONED.into());
                            self.reply(&clients, client, seq, false, body);
                        }
                        ReplyLookup::Unknown | ReplyLookup::Pending => {}
                    },
                    ExecInput::StatusQuery { client } => {
                        let report = self.status_report();
                        let text = serde_json::to_string(&report).unwrap_or_default();
                        self.send_client(&clients, client, &ClientMsg::StatusReport(text));
                    }
                }
            }
            self.executor.drain_results(&mut results);
            for r in results.drain(..) {
                let body = self.body_for(r.request_seq, r.result);
                self.reply(&clients, r.client, r.request_seq, false, body);
            }
            self.checkpoint_if_due(&mut checkpoints);
            self.flush_replies();
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
            let _ = self.core.blocking_send(CoreInput::Checkpointed {
                seq,
                state_digest: cp.state_digest,
                snapshot: cp.snapshot,
            });
        }
    }

    fn body_for(&self, seq: RequestSeq, result: Bytes) -> ReplyBody {
        let designated = (seq.0 % self.config.n() as u64) as u32 == self.me.0;
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
        read_only: bool,
        body: ReplyBody,
    ) {
        let reply = Reply {
            client,
            seq,
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
        }
    }
}
