//! Simulated clients. A correct client keeps a few requests in flight, sends
//! each to every replica (DESIGN §4), accepts a result once f+1 distinct
//! replicas returned the same one (PBFT §4.1: one of them is correct) and
//! retransmits with back-off until then. Every replica sends the full result
//! (the simulator's choice: it keeps the client simple and is what the
//! designated-replica scheme degrades to on retransmission).

use crate::options::EXEC_MAX_INFLIGHT_PER_CLIENT;
use crate::queue::Micros;
use bytes::Bytes;
use chorus_apps::WorkloadFn;
use chorus_core::first_contact::FirstContact;
use chorus_core::reply_fanout::ReplyFanout;
use chorus_core::{
    ClientAuthKind, ClientId, ClusterConfig, ClusterTag, Digest, Identity, MacKey, ReplicaId, Reply,
    ReplyBody, Request, RequestSeq,
};
use chorus_exec::REJECTED_PREFIX;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};

/// First retransmission after this long; doubles per attempt up to the cap.
pub const RETRY_FIRST_US: Micros = 400_000;
/// Few replies: after a first designated reply, resend if the quorum is
/// not complete within as long again as that reply took, at least this
/// (the client library's `full_reply_grace`).
pub const FEW_REPLY_GRACE_US: Micros = 50_000;
/// The attempt number of the early resend's timer: it resends once, and
/// leaves the attempts, the back-off and the primary's probe alone.
pub const EARLY_RESEND: u32 = u32::MAX;
pub const RETRY_MAX_US: Micros = 3_200_000;
/// On a reliable network (the resource model: no faults, every message
/// arrives) a client resends only what `chorus-client`'s driver resends:
/// after f+1 "busy" answers, with doubling back-off (its
/// `busy_backoff_initial` / `busy_backoff_max`), plus this safety timer.
/// Resending every request to all n replicas on a short timer, as the
/// fault-finding runs must, made an overloaded model collapse under its own
/// retransmissions at n = 100 (each one costs every replica CPU again).
pub const RELIABLE_RETRY_US: Micros = 10_000_000;
pub const BUSY_BACKOFF_FIRST_US: Micros = 50_000;
pub const BUSY_BACKOFF_MAX_US: Micros = 2_000_000;
/// Think time between a completion and the next request.
pub const THINK_MAX_US: Micros = 20_000;
/// rcc (RCC §III-E): after this many retransmissions of one request the
/// client asks to move to the next instance (as the library does).
pub const SWITCH_AFTER_RETRIES: u32 = 2;

/// How a client authenticates, with the keys it needs.
#[derive(Clone)]
pub struct Credentials {
    pub id: ClientId,
    pub identity: Identity,
    /// Pairwise MAC key with each replica, index = replica id.
    pub keys: Vec<MacKey>,
    pub auth: ClientAuthKind,
    /// The cluster its requests are authenticated for (`chorus_core::domain`).
    pub tag: ClusterTag,
}

impl Credentials {
    pub fn new(config: &ClusterConfig, id: ClientId, identity: Identity) -> Credentials {
        let keys = config
            .replicas
            .iter()
            .map(|r| identity.pairwise_key(&r.identity))
            .collect();
        Credentials {
            id,
            identity,
            keys,
            auth: config.params.client_auth,
            tag: ClusterTag::of(config),
        }
    }

    /// A properly authenticated request.
    pub fn request(&self, seq: RequestSeq, op: Bytes) -> Request {
        self.request_with(seq, 0, op)
    }

    /// The same with `flags` (`flags::FEW_REPLIES`).
    pub fn request_flagged(&self, seq: RequestSeq, flags: u8, op: Bytes) -> Request {
        self.request_with(seq, flags, op)
    }

    /// RCC §III-E `SWITCHINSTANCE(c, target)`, properly authenticated.
    pub fn switch_request(&self, seq: RequestSeq, target: u32) -> Request {
        self.request_with(
            seq,
            chorus_core::flags::SWITCH_INSTANCE,
            chorus_core::switch_op(target),
        )
    }

    fn request_with(&self, seq: RequestSeq, fl: u8, op: Bytes) -> Request {
        // As `chorus-client` does: SHA-256 request digests.
        let fl = fl | chorus_core::flags::DIGEST_SHA256;
        match self.auth {
            ClientAuthKind::MacVector => Request::with_macs(&self.tag, self.id, seq, fl, op, &self.keys),
            ClientAuthKind::Signature => {
                Request::with_signature(&self.tag, self.id, seq, fl, op, &self.identity)
            }
        }
    }
}

struct Pending {
    request: Request,
    issued_at_us: Micros,
    attempt: u32,
    /// Replicas that returned each result, and the result itself.
    votes: BTreeMap<Digest, (BTreeSet<ReplicaId>, Bytes)>,
    /// Reliable network: replicas that answered "busy" since the last send,
    /// and the back-off before the next resend they cause.
    busy: BTreeSet<ReplicaId>,
    busy_backoff_us: Micros,
    /// Leader-first: sent to this replica alone (the primary then) and not
    /// resent yet.
    first_only: Option<ReplicaId>,
    /// Sent with `flags::FEW_REPLIES` at this time, and not resent yet.
    few_since: Option<Micros>,
    /// The early resend after a first designated reply is armed.
    few_grace_armed: bool,
}

/// What the world must do after a client step.
#[derive(Debug, PartialEq, Eq)]
pub enum ClientAction {
    /// Send this request to every replica.
    Broadcast(Request),
    /// Send this request to every replica again (`ClientMsg::Resend`).
    Resend(Request),
    /// Leader-first (PBFT §4.1): send this request to this replica alone.
    SendTo(ReplicaId, Request),
    /// Leader-first: ask every replica for its lanes' views.
    AskViews,
    /// Schedule a retransmission check for `seq` after `after_us`.
    RetryTimer {
        seq: RequestSeq,
        attempt: u32,
        after_us: Micros,
    },
    /// Schedule the next issue after `after_us`.
    IssueTimer { after_us: Micros },
    /// A result was accepted.
    Accepted {
        seq: RequestSeq,
        result: Digest,
        latency_us: Micros,
    },
}

pub struct SimClient {
    pub creds: Credentials,
    quorum: usize,
    total: u32,
    window: u32,
    next_seq: u64,
    pending: BTreeMap<RequestSeq, Pending>,
    completed: u32,
    /// An issue timer is outstanding (at most one).
    issue_armed: bool,
    /// Requests are spread out: at most one per `pacing_us` (0 = closed loop).
    pacing_us: Micros,
    /// Think time between a completion and the next issue (off under the
    /// resource model: a closed loop, as `chorus bench` drives).
    think: bool,
    next_issue_us: Micros,
    /// Seqs the replicas' client table keeps above the lowest unexecuted one.
    seq_span: u32,
    /// rcc: the instance count and the one we believe owns us.
    instances: Option<(u32, u32)>,
    /// Our SWITCHINSTANCE in flight: its seq and target.
    switching: Option<(RequestSeq, u32)>,
    /// Seqs taken by switches (not requests of the workload).
    switches: u32,
    /// Switches the cluster applied.
    switched: u32,
    /// The service's operations (`ServiceEntry::workload`).
    workload: WorkloadFn,
    /// No message is ever lost: resend like the real client library does
    /// (`RELIABLE_RETRY_US`).
    reliable: bool,
    /// Leader-first clients (`chorus_core::first_contact`, as the client
    /// library's `ClientOptions::leader_first`).
    first: Option<(std::sync::Arc<chorus_core::ClusterConfig>, FirstContact)>,
    /// Few-replies clients (`chorus_core::reply_fanout`, as the client
    /// library's `ClientOptions::few_replies`).
    fanout: Option<ReplyFanout>,
    shortfalls: u32,
    few_sent: u32,
}

impl SimClient {
    /// `reply_quorum` = f+1 matching replies. Requests are issued at most one
    /// per `pacing_us` (so they spread over the fault window), at most
    /// `window` at a time.
    pub fn new(
        creds: Credentials,
        reply_quorum: usize,
        total: u32,
        window: u32,
        pacing_us: Micros,
    ) -> SimClient {
        assert!(reply_quorum >= 1 && window >= 1);
        SimClient {
            creds,
            quorum: reply_quorum,
            total,
            window,
            next_seq: 1,
            pending: BTreeMap::new(),
            completed: 0,
            issue_armed: false,
            pacing_us,
            next_issue_us: 0,
            think: true,
            seq_span: EXEC_MAX_INFLIGHT_PER_CLIENT,
            instances: None,
            switching: None,
            switches: 0,
            switched: 0,
            workload: std::sync::Arc::new(chorus_apps::kv_workload),
            reliable: false,
            first: None,
            fanout: None,
            shortfalls: 0,
            few_sent: 0,
        }
    }

    /// Ask f + 1 designated replicas only for replies while that works, as
    /// the client library does with `ClientOptions::few_replies`.
    pub fn with_few_replies(mut self, n: usize) -> SimClient {
        self.fanout = Some(ReplyFanout::new(n, true));
        self
    }

    /// Shortfalls that started a cooling-off period (`ReplyFanout`).
    pub fn reply_shortfalls(&self) -> u32 {
        self.shortfalls
    }

    /// Requests issued with `flags::FEW_REPLIES`.
    pub fn few_sent(&self) -> u32 {
        self.few_sent
    }

    /// Send each new request to the primary of our lane alone, as the
    /// client library does with `ClientOptions::leader_first`.
    pub fn with_leader_first(mut self, config: std::sync::Arc<chorus_core::ClusterConfig>) -> SimClient {
        let fc = FirstContact::new(&config, self.creds.id, true);
        self.first = Some((config, fc));
        self
    }

    /// Leader-first: the probe out, if one is (`FirstContact::probe`).
    pub fn probe(&self) -> Option<RequestSeq> {
        self.first.as_ref().and_then(|(_, fc)| fc.probe())
    }

    /// A replica's answer to our view question.
    pub fn on_view_report(&mut self, _now_us: Micros, from: ReplicaId, views: &[u64]) {
        if let Some((cfg, fc)) = self.first.as_mut() {
            fc.on_report(cfg, from, views);
        }
    }

    fn ask_if_due(&mut self, now_us: Micros, out: &mut Vec<ClientAction>) {
        if let Some((_, fc)) = self.first.as_mut() {
            if fc.ask_due(now_us) {
                out.push(ClientAction::AskViews);
            }
        }
    }

    /// The network never loses a message (`--perf`, no faults): resend only
    /// on f+1 "busy" answers (with back-off) or after `RELIABLE_RETRY_US`.
    pub fn on_reliable_network(mut self) -> SimClient {
        self.reliable = true;
        self
    }

    fn first_retry_us(&self) -> Micros {
        if self.reliable {
            RELIABLE_RETRY_US
        } else {
            RETRY_FIRST_US
        }
    }

    fn next_retry_us(&self, attempt: u32) -> Micros {
        if self.reliable {
            RELIABLE_RETRY_US << attempt.min(2)
        } else {
            (RETRY_FIRST_US << attempt.min(8)).min(RETRY_MAX_US)
        }
    }

    /// An `rcc` client of `lanes` instances: it switches instance when a
    /// request keeps timing out (RCC §III-E).
    pub fn with_switching(mut self, lanes: u32) -> SimClient {
        if lanes > 1 {
            self.instances = Some((lanes, (self.creds.id.0 % lanes as u64) as u32));
        }
        self
    }

    /// Switches sent, and applied.
    pub fn switches(&self) -> (u32, u32) {
        (self.switches, self.switched)
    }

    /// Issue the operations of another service's workload (default: kv).
    pub fn with_workload(mut self, workload: WorkloadFn) -> SimClient {
        self.workload = workload;
        self
    }

    /// Use another client-table window than the simulator's executors use.
    pub fn with_seq_span(mut self, seq_span: u32) -> SimClient {
        assert!(seq_span >= 1);
        self.seq_span = seq_span;
        self
    }

    pub fn id(&self) -> ClientId {
        self.creds.id
    }

    /// Requests of the workload issued (switches not counted).
    pub fn issued(&self) -> u32 {
        (self.next_seq - 1) as u32 - self.switches
    }

    pub fn completed(&self) -> u32 {
        self.completed
    }

    pub fn total(&self) -> u32 {
        self.total
    }

    pub fn done(&self) -> bool {
        self.completed == self.total
    }

    /// Requests still waiting for a result, with their issue times.
    pub fn outstanding(&self) -> impl Iterator<Item = (RequestSeq, Micros)> + '_ {
        self.pending.iter().map(|(s, p)| (*s, p.issued_at_us))
    }

    /// The next operation of the service's workload.
    fn op(&self, rng: &mut ChaCha8Rng, seq: u64) -> Bytes {
        (self.workload)(rng, self.creds.id, seq)
    }

    fn has_room(&self) -> bool {
        self.pending.len() < self.window as usize && self.issued() < self.total && self.seq_fits()
    }

    /// The replicas' client table treats a seq more than its window
    /// (`EXEC_MAX_INFLIGHT_PER_CLIENT`) above the client's lowest
    /// unexecuted one as the client having abandoned everything below it.
    /// Counting requests in flight is not enough: one request held back
    /// (busy answers, a slow lane) while later ones complete stretches the
    /// span past the window and loses it. So, as `chorus-client`'s driver
    /// does, a new seq waits until it is within the window of the oldest
    /// pending one.
    fn seq_fits(&self) -> bool {
        // With switching, one seq of the span stays free for a switch.
        let reserve = u32::from(self.instances.is_some());
        self.fits(self.seq_span.saturating_sub(reserve).max(1))
    }

    fn fits(&self, span: u32) -> bool {
        self.pending
            .first_key_value()
            .is_none_or(|(oldest, _)| self.next_seq - oldest.0 < u64::from(span))
    }

    /// RCC §III-E: ask to move to the instance after the one we believe
    /// owns us (one switch at a time, within the client table's window).
    fn start_switch(&mut self, now_us: Micros, out: &mut Vec<ClientAction>) {
        let Some((lanes, owner)) = self.instances else {
            return;
        };
        if self.switching.is_some() || !self.fits(self.seq_span) {
            return;
        }
        let target = (owner + 1) % lanes;
        let seq = RequestSeq(self.next_seq);
        self.next_seq += 1;
        self.switches += 1;
        self.switching = Some((seq, target));
        let request = self.creds.switch_request(seq, target);
        self.send_new(seq, request, now_us, out);
    }

    /// Send a new request to every replica, arm its first retry and track it.
    fn send_new(&mut self, seq: RequestSeq, request: Request, now_us: Micros, out: &mut Vec<ClientAction>) {
        let request_few = request.flags & chorus_core::flags::FEW_REPLIES != 0;
        let first_only = match self.first.as_mut() {
            Some((cfg, fc)) if !request.is_switch() => fc.target(cfg, seq, now_us),
            _ => None,
        };
        match first_only {
            Some(r) => out.push(ClientAction::SendTo(r, request.clone())),
            None => out.push(ClientAction::Broadcast(request.clone())),
        }
        // A new leader-first client learns the views with its first request.
        self.ask_if_due(now_us, out);
        out.push(ClientAction::RetryTimer {
            seq,
            attempt: 0,
            after_us: self.first_retry_us(),
        });
        self.pending.insert(
            seq,
            Pending {
                request,
                issued_at_us: now_us,
                attempt: 0,
                votes: BTreeMap::new(),
                busy: BTreeSet::new(),
                busy_backoff_us: BUSY_BACKOFF_FIRST_US,
                first_only,
                few_since: (request_few).then_some(now_us),
                few_grace_armed: false,
            },
        );
    }

    /// A closed loop: the next request goes out as soon as the window has room.
    pub fn without_think_time(mut self) -> SimClient {
        self.think = false;
        self
    }

    /// Arm the issue timer for the next paced slot (plus think time).
    fn arm(&mut self, rng: &mut ChaCha8Rng, now_us: Micros, out: &mut Vec<ClientAction>) {
        if self.issue_armed || !self.has_room() {
            return;
        }
        self.issue_armed = true;
        let wait_us = self.next_issue_us.saturating_sub(now_us);
        out.push(ClientAction::IssueTimer {
            after_us: wait_us
                + if self.think {
                    rng.gen_range(0..=THINK_MAX_US)
                } else {
                    0
                },
        });
    }

    /// The issue timer fired (or the run starts): issue what pacing and the
    /// window allow, and arm the timer for the rest.
    pub fn issue(&mut self, rng: &mut ChaCha8Rng, now_us: Micros, out: &mut Vec<ClientAction>) {
        self.issue_armed = false;
        while self.has_room() && now_us >= self.next_issue_us {
            if self.pacing_us > 0 {
                // At most one request per draw, and never behind the paced
                // schedule the liveness deadline counts from (`World::overdue`:
                // seq s is due at (s - 1) × pacing): a client held back (its
                // window full while the cluster was down) catches up as its
                // window allows. Before, it went on at its pace from when it
                // had room, and 200 requests over a 40 s fault window, most
                // held back, needed 30 s more at the pace alone: the run ended
                // on the bound with every replica serving (pbft n = 4
                // `--faults all --clients 8 --requests 200 --fault-window-ms
                // 40000 --seed 132018`). A client ahead of the schedule runs
                // as before.
                let scheduled = self.next_seq.saturating_mul(self.pacing_us);
                let draw = rng.gen_range(self.pacing_us / 2..=self.pacing_us);
                self.next_issue_us = (now_us + draw).min(scheduled);
            }
            let seq = RequestSeq(self.next_seq);
            self.next_seq += 1;
            let op = self.op(rng, seq.0);
            let few = self.fanout.as_ref().map_or(0, |f| f.flags(now_us));
            self.few_sent += u32::from(few != 0);
            let request = self.creds.request_flagged(seq, few, op);
            self.send_new(seq, request, now_us, out);
        }
        self.arm(rng, now_us, out);
    }

    /// A retransmission timer fired.
    pub fn retry(&mut self, now_us: Micros, seq: RequestSeq, attempt: u32, out: &mut Vec<ClientAction>) {
        let Some(p) = self.pending.get_mut(&seq) else {
            return;
        };
        if attempt == EARLY_RESEND {
            // Few replies, the other designated replier lags: everyone now.
            if let Some(sent) = p.few_since.take() {
                out.push(ClientAction::Resend(p.request.clone()));
                if let Some(f) = self.fanout.as_mut() {
                    if f.on_shortfall(sent, now_us) {
                        self.shortfalls += 1;
                    }
                }
            }
            return;
        }
        if p.attempt != attempt {
            return;
        }
        p.attempt += 1;
        if p.attempt == SWITCH_AFTER_RETRIES && !p.request.is_switch() {
            self.start_switch(now_us, out);
        }
        let after_us = self.next_retry_us(self.pending.get(&seq).map_or(0, |p| p.attempt));
        let Some(p) = self.pending.get_mut(&seq) else {
            return;
        };
        p.busy.clear();
        // PBFT §4.1: the primary we chose alone left it unaccepted (one
        // reply proves nothing: a faulty primary could send it at once).
        let silent = p.first_only.take();
        let few_since = p.few_since.take();
        out.push(ClientAction::Resend(p.request.clone()));
        out.push(ClientAction::RetryTimer {
            seq,
            attempt: p.attempt,
            after_us,
        });
        if let (Some(to), Some((cfg, fc))) = (silent, self.first.as_mut()) {
            if fc.on_silent(cfg, seq, to, now_us) {
                out.push(ClientAction::AskViews);
            }
        }
        // A designated replier (or the primary) left it unanswered.
        if let (Some(sent), Some(f)) = (few_since, self.fanout.as_mut()) {
            if f.on_shortfall(sent, now_us) {
                self.shortfalls += 1;
            }
        }
        self.ask_if_due(now_us, out);
    }

    /// Our switch got f+1 matching answers: believe the new owner if the
    /// cluster applied it (or says it is our owner already).
    fn on_switched(&mut self, target: u32, result: &Bytes) {
        use chorus_core::switch::{SWITCHED_PREFIX, SWITCH_REFUSED_PREFIX};
        self.switching = None;
        let applied = result.starts_with(SWITCHED_PREFIX.as_bytes());
        let already = result.starts_with(format!("{SWITCH_REFUSED_PREFIX}already-owner").as_bytes());
        if applied {
            self.switched += 1;
        }
        if let Some((_, owner)) = self.instances.as_mut().filter(|_| applied || already) {
            *owner = target;
            // Leader-first: new requests go to the new instance's primary.
            if let Some((_, fc)) = self.first.as_mut() {
                fc.set_lane(chorus_core::LaneId(target));
            }
        }
    }

    /// Reliable network: f+1 replicas said "busy" (so at least one correct
    /// replica refused it): resend after a jittered, doubling back-off, as
    /// `chorus-client`'s driver does. The new attempt number voids the
    /// pending safety timer.
    fn on_busy(
        &mut self,
        rng: &mut ChaCha8Rng,
        seq: RequestSeq,
        replica: ReplicaId,
        out: &mut Vec<ClientAction>,
    ) {
        let quorum = self.quorum;
        let Some(p) = self.pending.get_mut(&seq) else {
            return;
        };
        if !p.busy.insert(replica) || p.busy.len() < quorum {
            return;
        }
        p.busy.clear();
        p.attempt += 1;
        let backoff = p.busy_backoff_us;
        p.busy_backoff_us = (backoff * 2).min(BUSY_BACKOFF_MAX_US);
        // The timer's attempt is the one before the resend (`retry` checks it).
        out.push(ClientAction::RetryTimer {
            seq,
            attempt: p.attempt,
            after_us: rng.gen_range(backoff / 2..=backoff),
        });
    }

    /// A reply arrived (over the channel from `reply.replica`).
    pub fn reply(&mut self, rng: &mut ChaCha8Rng, now_us: Micros, reply: Reply, out: &mut Vec<ClientAction>) {
        if reply.client != self.creds.id {
            return;
        }
        if let Some(f) = self.fanout.as_mut() {
            f.on_reply(reply.replica, now_us);
        }
        if reply.body == ReplyBody::Busy {
            // The primary alone has it and is overloaded: no silence; the
            // next resend goes to every replica, and the client asks whether
            // the view moved (`FirstContact::on_busy`).
            if let Some(p) = self.pending.get_mut(&reply.seq) {
                if p.first_only.take().is_some() {
                    if let Some((_, fc)) = self.first.as_mut() {
                        if fc.on_busy(reply.seq, now_us) {
                            out.push(ClientAction::AskViews);
                        }
                    }
                }
            }
        }
        if self.reliable && reply.body == ReplyBody::Busy {
            self.on_busy(rng, reply.seq, reply.replica, out);
            return;
        }
        self.ask_if_due(now_us, out);
        // Busy, rejections and error results are retried by the retransmission timer.
        let ReplyBody::Full(result) = reply.body else {
            return;
        };
        if result.starts_with(REJECTED_PREFIX) {
            return;
        }
        let Some(p) = self.pending.get_mut(&reply.seq) else {
            return;
        };
        let d = Digest::of(&result);
        let (voters, _) = p
            .votes
            .entry(d)
            .or_insert_with(|| (BTreeSet::new(), result.clone()));
        voters.insert(reply.replica);
        if voters.len() < self.quorum {
            // Few replies: resend if the other designated replier is not
            // right behind (`chorus-client`'s driver does the same).
            let designated = self
                .fanout
                .as_ref()
                .is_some_and(|f| f.designated(self.creds.id, reply.seq, reply.replica));
            if p.few_since.is_some() && !p.few_grace_armed && designated {
                p.few_grace_armed = true;
                let took = now_us.saturating_sub(p.issued_at_us);
                out.push(ClientAction::RetryTimer {
                    seq: reply.seq,
                    attempt: EARLY_RESEND,
                    after_us: took.max(FEW_REPLY_GRACE_US),
                });
            }
            return;
        }
        let latency_us = now_us - p.issued_at_us;
        if p.first_only.is_some() {
            if let Some((_, fc)) = self.first.as_mut() {
                fc.on_accepted(reply.seq, now_us);
            }
        }
        self.pending.remove(&reply.seq);
        match self.switching {
            Some((seq, target)) if seq == reply.seq => self.on_switched(target, &result),
            _ => self.completed += 1,
        }
        out.push(ClientAction::Accepted {
            seq: reply.seq,
            result: d,
            latency_us,
        });
        self.arm(rng, now_us, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::ProtocolParams;
    use rand::SeedableRng;

    fn client(window: u32, total: u32) -> (SimClient, ClusterConfig) {
        let (config, _, ids) = ClusterConfig::for_testing(4, 1, ProtocolParams::default(), 3);
        let creds = Credentials::new(&config, ClientId(0), ids[0].clone());
        (SimClient::new(creds, 2, total, window, 0), config)
    }

    fn reply(seq: u64, replica: u32, result: &'static [u8]) -> Reply {
        Reply {
            client: ClientId(0),
            seq: RequestSeq(seq),
            request: None,
            replica: ReplicaId(replica),
            read_only: false,
            body: ReplyBody::Full(Bytes::from_static(result)),
        }
    }

    /// Few replies with a leader-first client: the primary (replica 0, a
    /// designated replier of client 0's first seqs with replica 1) answers,
    /// replica 1 lags. The early resend goes to everyone and starts a
    /// cooling-off period, but the primary proposed the request (a
    /// designated replier executed it), so it is not counted silent: its
    /// probe is accepted and the next request goes to it alone again.
    #[test]
    fn an_early_resend_for_a_lagging_designated_replier_does_not_blame_the_primary() {
        let params = ProtocolParams {
            mode: chorus_core::OrderingMode::Pbft,
            leader_rotation: chorus_core::LeaderRotation::Fixed,
            ..ProtocolParams::default()
        };
        let (config, _, ids) = ClusterConfig::for_testing(4, 1, params, 3);
        let config = std::sync::Arc::new(config);
        let creds = Credentials::new(&config, ClientId(0), ids[0].clone());
        let mut c = SimClient::new(creds, 2, 3, 1, 0)
            .with_leader_first(config.clone())
            .with_few_replies(4);
        for r in 0..4 {
            c.fanout.as_mut().unwrap().on_reply(ReplicaId(r), 0);
        }
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut out = vec![];
        // A new client: the first request to everyone while it learns the view.
        c.issue(&mut rng, 1_000, &mut out);
        assert!(out.contains(&ClientAction::AskViews), "{out:?}");
        c.on_view_report(1_100, ReplicaId(0), &[0]);
        c.on_view_report(1_100, ReplicaId(1), &[0]);
        c.reply(&mut rng, 1_200, reply(1, 0, b"r"), &mut out);
        c.reply(&mut rng, 1_300, reply(1, 1, b"r"), &mut out);
        out.clear();
        c.issue(&mut rng, 2_000, &mut out);
        let sent = out.iter().find_map(|a| match a {
            ClientAction::SendTo(to, r) => Some((*to, r.clone())),
            _ => None,
        });
        let (to, req) = sent.expect("the probe goes to the primary alone");
        assert_eq!(to, ReplicaId(0));
        assert_ne!(req.flags & chorus_core::flags::FEW_REPLIES, 0);
        out.clear();
        c.reply(&mut rng, 3_000, reply(2, 0, b"r"), &mut out);
        assert!(out.contains(&ClientAction::RetryTimer {
            seq: RequestSeq(2),
            attempt: EARLY_RESEND,
            after_us: FEW_REPLY_GRACE_US,
        }));
        out.clear();
        c.retry(53_000, RequestSeq(2), EARLY_RESEND, &mut out);
        assert!(matches!(out[..], [ClientAction::Resend(_)]), "{out:?}");
        assert_eq!(c.reply_shortfalls(), 1);
        out.clear();
        c.reply(&mut rng, 53_500, reply(2, 2, b"r"), &mut out);
        assert!(out.iter().any(|a| matches!(a, ClientAction::Accepted { .. })));
        out.clear();
        c.issue(&mut rng, 54_000, &mut out);
        assert!(
            out.iter()
                .any(|a| matches!(a, ClientAction::SendTo(ReplicaId(0), _))),
            "the primary keeps getting requests alone: {out:?}"
        );
    }

    #[test]
    fn keeps_window_full_and_requests_verify_at_every_replica() {
        let (mut c, config) = client(2, 5);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut out = vec![];
        c.issue(&mut rng, 0, &mut out);
        let reqs: Vec<_> = out
            .iter()
            .filter_map(|a| match a {
                ClientAction::Broadcast(r) => Some(r.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].seq, RequestSeq(1));
        let (_, replica_ids, client_ids) = ClusterConfig::for_testing(4, 1, ProtocolParams::default(), 3);
        for (i, r) in replica_ids.iter().enumerate() {
            let key = r.pairwise_key(&client_ids[0].public());
            assert!(reqs[1].verify(
                &ClusterTag::of(&config),
                ReplicaId(i as u32),
                &key,
                &config.clients[0].identity
            ));
        }
    }

    #[test]
    fn accepts_on_f_plus_one_matching_from_distinct_replicas() {
        let (mut c, _) = client(1, 2);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut out = vec![];
        c.issue(&mut rng, 0, &mut out);
        out.clear();
        c.reply(&mut rng, 10, reply(1, 0, b"a"), &mut out);
        c.reply(&mut rng, 11, reply(1, 0, b"a"), &mut out); // same replica twice
        c.reply(&mut rng, 12, reply(1, 1, b"b"), &mut out); // a different result
        assert!(out.is_empty());
        c.reply(&mut rng, 13, reply(1, 2, b"a"), &mut out);
        assert!(matches!(
            out[0],
            ClientAction::Accepted {
                seq: RequestSeq(1),
                latency_us: 13,
                ..
            }
        ));
        assert!(matches!(out[1], ClientAction::IssueTimer { .. }));
        assert_eq!(out.len(), 2);
        assert_eq!(c.completed(), 1);
        // Late replies for a completed request change nothing.
        out.clear();
        c.reply(&mut rng, 14, reply(1, 3, b"a"), &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn rejected_results_and_busy_do_not_count() {
        let (mut c, _) = client(1, 1);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut out = vec![];
        c.issue(&mut rng, 0, &mut out);
        out.clear();
        let mut rejected = REJECTED_PREFIX.to_vec();
        rejected.extend_from_slice(b"x");
        for r in 0..4 {
            let mut rep = reply(1, r, b"");
            rep.body = ReplyBody::Full(Bytes::from(rejected.clone()));
            c.reply(&mut rng, 1, rep.clone(), &mut out);
            rep.body = ReplyBody::Busy;
            c.reply(&mut rng, 1, rep, &mut out);
        }
        assert!(out.is_empty());
        assert!(!c.done());
    }

    /// Issue 8 finding 11: one request held back while later ones complete
    /// must not let the client run past the client table's window (the
    /// table would count the held one as abandoned).
    #[test]
    fn a_slow_request_holds_new_seqs_within_the_tables_window() {
        let (c, _) = client(2, 100);
        let mut c = c.with_seq_span(4);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut out = vec![];
        c.issue(&mut rng, 0, &mut out);
        assert_eq!(c.issued(), 2);
        // Seq 1 stays unanswered; every later seq completes at once.
        for now in 1..20 {
            let newest = c.issued() as u64;
            if newest > 1 {
                c.reply(&mut rng, now, reply(newest, 0, b"r"), &mut out);
                c.reply(&mut rng, now, reply(newest, 1, b"r"), &mut out);
            }
            c.issue(&mut rng, now, &mut out);
        }
        assert_eq!(c.issued(), 4, "seq 5 is 4 above the unanswered seq 1");
        assert!(c.outstanding().any(|(s, _)| s == RequestSeq(1)));
        // Once seq 1 completes, the client moves on.
        c.reply(&mut rng, 30, reply(1, 0, b"r"), &mut out);
        c.reply(&mut rng, 30, reply(1, 1, b"r"), &mut out);
        c.issue(&mut rng, 31, &mut out);
        assert!(c.issued() > 4);
    }

    #[test]
    fn pacing_spreads_requests_out() {
        let (config, _, ids) = ClusterConfig::for_testing(4, 1, ProtocolParams::default(), 3);
        let creds = Credentials::new(&config, ClientId(0), ids[0].clone());
        let mut c = SimClient::new(creds, 2, 4, 3, 100_000);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut out = vec![];
        c.issue(&mut rng, 0, &mut out);
        assert_eq!(c.issued(), 1, "one request per pacing interval");
        let Some(ClientAction::IssueTimer { after_us }) = out.last() else {
            panic!("{out:?}")
        };
        assert!(*after_us >= 50_000 && *after_us <= 100_000 + THINK_MAX_US);
        out.clear();
        c.issue(&mut rng, 10_000, &mut out);
        assert_eq!(c.issued(), 1, "too early");
        c.issue(&mut rng, 200_000, &mut out);
        assert_eq!(c.issued(), 3, "seq 3 was due at 200 000");
        // Far behind its schedule (the window was full): what it owes goes
        // out at once, as far as the window of 3 allows.
        c.issue(&mut rng, 10_000_000, &mut out);
        assert_eq!(c.issued(), 3);
    }

    #[test]
    fn retransmits_with_backoff_until_done() {
        let (mut c, _) = client(1, 1);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut out = vec![];
        c.issue(&mut rng, 0, &mut out);
        out.clear();
        c.retry(0, RequestSeq(1), 0, &mut out);
        assert!(matches!(out[0], ClientAction::Resend(_)));
        assert_eq!(
            out[1],
            ClientAction::RetryTimer {
                seq: RequestSeq(1),
                attempt: 1,
                after_us: 2 * RETRY_FIRST_US
            }
        );
        out.clear();
        c.retry(0, RequestSeq(1), 0, &mut out); // stale timer
        assert!(out.is_empty());
        c.reply(&mut rng, 5, reply(1, 0, b"r"), &mut out);
        c.reply(&mut rng, 5, reply(1, 1, b"r"), &mut out);
        assert!(c.done());
        out.clear();
        c.retry(0, RequestSeq(1), 1, &mut out);
        assert!(out.is_empty());
    }

    fn busy(seq: u64, replica: u32) -> Reply {
        Reply {
            body: ReplyBody::Busy,
            ..reply(seq, replica, b"")
        }
    }

    /// On a reliable network (`--perf`) a client resends like the real
    /// library: not on a short timer, but after f+1 "busy" answers, after a
    /// doubling back-off; the resend voids the pending safety timer.
    #[test]
    fn on_a_reliable_network_only_f_plus_one_busy_answers_cause_a_resend() {
        let (c, _) = client(1, 1);
        let mut c = c.on_reliable_network();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut out = vec![];
        c.issue(&mut rng, 0, &mut out);
        assert_eq!(
            out[1],
            ClientAction::RetryTimer {
                seq: RequestSeq(1),
                attempt: 0,
                after_us: RELIABLE_RETRY_US
            }
        );
        out.clear();
        c.reply(&mut rng, 1, busy(1, 0), &mut out);
        c.reply(&mut rng, 2, busy(1, 0), &mut out); // the same replica again
        assert!(out.is_empty(), "{out:?}");
        c.reply(&mut rng, 3, busy(1, 2), &mut out);
        let after = match out.as_slice() {
            [ClientAction::RetryTimer {
                seq: RequestSeq(1),
                attempt: 1,
                after_us,
            }] => *after_us,
            other => panic!("one back-off timer expected: {other:?}"),
        };
        assert!((BUSY_BACKOFF_FIRST_US / 2..=BUSY_BACKOFF_FIRST_US).contains(&after));
        out.clear();
        c.retry(10, RequestSeq(1), 0, &mut out); // the voided safety timer
        assert!(out.is_empty());
        c.retry(after, RequestSeq(1), 1, &mut out);
        assert!(matches!(out[0], ClientAction::Resend(_)));
        assert!(matches!(out[1], ClientAction::RetryTimer { attempt: 2, .. }));
        // The next f+1 busy answers wait twice as long.
        out.clear();
        c.reply(&mut rng, 20, busy(1, 1), &mut out);
        c.reply(&mut rng, 21, busy(1, 3), &mut out);
        match out.as_slice() {
            [ClientAction::RetryTimer {
                attempt: 3, after_us, ..
            }] => {
                assert!((BUSY_BACKOFF_FIRST_US..=2 * BUSY_BACKOFF_FIRST_US).contains(after_us))
            }
            other => panic!("one back-off timer expected: {other:?}"),
        }
        // Without the reliable network, busy answers change nothing.
        let (mut lossy, _) = client(1, 1);
        out.clear();
        lossy.issue(&mut rng, 0, &mut out);
        out.clear();
        lossy.reply(&mut rng, 1, busy(1, 0), &mut out);
        lossy.reply(&mut rng, 2, busy(1, 1), &mut out);
        assert!(out.is_empty());
    }

    /// RCC §III-E: after `SWITCH_AFTER_RETRIES` retransmissions the client
    /// sends a switch to the instance after its owner, under a seq of its
    /// own (not a workload request), and believes the new owner once f+1
    /// replicas say it was applied.
    #[test]
    fn a_request_that_keeps_timing_out_makes_the_client_switch() {
        let (c, _) = client(2, 2);
        let mut c = c.with_seq_span(2).with_switching(4);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut out = vec![];
        c.issue(&mut rng, 0, &mut out);
        assert_eq!(c.issued(), 1, "one seq of the span is kept for a switch");
        for attempt in 0..SWITCH_AFTER_RETRIES {
            out.clear();
            c.retry(1, RequestSeq(1), attempt, &mut out);
        }
        let switch = out.iter().find_map(|a| match a {
            ClientAction::Broadcast(r) if r.is_switch() => Some(r.clone()),
            _ => None,
        });
        let switch = switch.expect("a switch after the retries");
        assert_eq!(
            chorus_core::switch_target(&switch),
            Some(1),
            "client 0: owner 0, next 1"
        );
        assert_eq!(c.issued(), 1);
        let applied = Bytes::from(format!("{}1", chorus_core::switch::SWITCHED_PREFIX));
        for r in 0..2 {
            let mut rep = reply(switch.seq.0, r, b"");
            rep.body = ReplyBody::Full(applied.clone());
            c.reply(&mut rng, 5, rep, &mut out);
        }
        assert_eq!(c.switches(), (1, 1));
        assert_eq!(c.completed(), 0, "a switch is not a workload request");
        assert_eq!(c.instances, Some((4, 1)));
    }
}
