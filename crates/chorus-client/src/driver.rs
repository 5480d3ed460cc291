//! The client's background task: owns every pending request, its reply
//! quorum and its timers; the public `Client` talks to it through channels.
//!
//! Timers per request: the overall deadline, the next retransmission
//! (exponential back-off, PBFT §4.1: "if the client does not receive replies
//! soon enough, it broadcasts the request to all replicas"), and for the
//! read-only fast path the moment it gives up and falls back to ordering
//! (PBFT §5.1.3).

use crate::auth::RequestAuth;
use crate::error::ClientError;
use crate::options::ClientOptions;
use crate::quorum::{Decision, Path, ReplyQuorum};
use crate::stats::Stats;
use crate::switch::Instance;
use bytes::Bytes;
use chorus_core::first_contact::FirstContact;
use chorus_core::reply_fanout::ReplyFanout;
use chorus_core::{
    decode, encode, ClientId, ClientMsg, ClusterConfig, Digest, Limits, ReplicaId, Reply, ReplyBody,
    RequestSeq,
};
use chorus_net::{Backoff, Counters, Inbound, PeerLink};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};
use tokio::time::Instant;

/// Status queries waiting per replica; more are refused.
const MAX_STATUS_WAITERS: usize = 8;

pub(crate) type ResultSender = oneshot::Sender<Result<Timed, ClientError>>;

/// A result and when its replies arrived.
#[derive(Clone, Debug)]
pub struct Timed {
    pub result: Bytes,
    /// When the first replica answered with a result (full or digest) on the
    /// ordered path: that replica had committed and executed the request.
    /// On the read-only fast path, the first answer.
    pub first_reply: std::time::Instant,
    /// When f+1 matching answers (2f+1 on the fast path) made it the result.
    pub accepted: std::time::Instant,
    /// A read-only invocation whose fast path failed (replicas disagreed or
    /// too few answered in time) and that was ordered instead: its result is
    /// as strong, but it cost a full round of consensus. Counted in
    /// `ClientStats::fallbacks` too, and logged.
    pub fell_back: bool,
}

/// Who waits for a replica's next status report (they answer in order):
/// `Client::status` callers.
type StatusWaiter = oneshot::Sender<String>;

pub(crate) enum Command {
    Invoke {
        op: Bytes,
        read_only: bool,
        reply: ResultSender,
        permit: OwnedSemaphorePermit,
    },
    Status {
        replica: ReplicaId,
        reply: oneshot::Sender<String>,
    },
}

struct Pending {
    started: Instant,
    deadline: Instant,
    op: Bytes,
    /// The encoded request (`ClientMsg::Request`).
    frame: Bytes,
    /// The request, and once resent its `ClientMsg::Resend` frame, sent
    /// verbatim on every later retransmission.
    request: Option<chorus_core::Request>,
    resend: Option<Bytes>,
    /// Its digest: replies must echo it (issue 16, finding 5).
    digest: Digest,
    quorum: ReplyQuorum,
    retransmit_every: Duration,
    next_send: Instant,
    /// Read-only fast path only: when to give up and fall back.
    fast_path_until: Option<Instant>,
    busy_backoff: Duration,
    /// Whether this path already advanced its retransmission for a missing full result.
    asked_full: bool,
    /// The key of this request in `Driver::timers`.
    wake: Instant,
    /// The first result-bearing answer on the current path.
    first_reply: Option<Instant>,
    /// The read-only fast path failed and the request is being ordered.
    fell_back: bool,
    reply: ResultSender,
    /// Held while the request is in flight (bounds in-flight requests);
    /// `None` for the driver's own SWITCHINSTANCE requests.
    _permit: Option<OwnedSemaphorePermit>,
    /// Retransmission rounds on the current path.
    retransmits: u32,
    /// RCC §III-E: this is our SWITCHINSTANCE to that instance.
    switch_to: Option<u32>,
    /// Sent to this replica alone, our lane's primary then, and not resent
    /// yet (`chorus_core::first_contact`).
    first_only: Option<ReplicaId>,
    /// Sent with `flags::FEW_REPLIES` at this time (µs of `Driver::epoch`).
    few_since: Option<u64>,
    /// The next send is the early resend of a few-replies request whose
    /// other designated replier lags (no retransmission: it neither
    /// doubles the back-off nor tells anything about the primary).
    few_early: bool,
}

impl Pending {
    fn next_wake(&self) -> Instant {
        let w = self.deadline.min(self.next_send);
        self.fast_path_until.map_or(w, |t| w.min(t))
    }
}

pub(crate) struct Driver {
    config: Arc<ClusterConfig>,
    id: ClientId,
    opts: ClientOptions,
    auth: RequestAuth,
    limits: Limits,
    links: Arc<Vec<PeerLink>>,
    net: Arc<Counters>,
    stats: Arc<Stats>,
    next_seq: u64,
    pending: BTreeMap<RequestSeq, Pending>,
    /// Requests holding an in-flight permit but no seq yet (see `start`);
    /// bounded by `max_in_flight` like `pending`.
    waiting: VecDeque<(Pending, Path)>,
    /// The replicas' per-client window (`pool_max_per_client`): a new seq
    /// stays below the oldest pending seq plus this.
    window: u64,
    timers: BTreeSet<(Instant, RequestSeq)>,
    status_waiters: Vec<VecDeque<StatusWaiter>>,
    /// Where new requests go first (PBFT §4.1).
    first: FirstContact,
    /// Who is asked to reply (`chorus_core::reply_fanout`).
    fanout: ReplyFanout,
    /// Time zero of `FirstContact`'s microseconds.
    epoch: Instant,
    /// RCC §III-E: the instance we believe serves us.
    instance: Instance,
    /// The receiving end of our switch request's result, while one is in
    /// flight (at most one at a time).
    switching: Option<oneshot::Receiver<Result<Timed, ClientError>>>,
}

impl Driver {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        config: Arc<ClusterConfig>,
        id: ClientId,
        opts: ClientOptions,
        auth: RequestAuth,
        links: Arc<Vec<PeerLink>>,
        net: Arc<Counters>,
        stats: Arc<Stats>,
        first_seq: u64,
    ) -> Driver {
        let limits = Limits::from_config(&config);
        let n = config.n();
        let window = u64::from(config.params.pool_max_per_client.max(1));
        let instance = Instance::new(&config, id);
        let first = FirstContact::new(&config, id, opts.leader_first);
        let fanout = ReplyFanout::new(n, opts.few_replies);
        Driver {
            config,
            id,
            opts,
            auth,
            limits,
            links,
            net,
            stats,
            next_seq: first_seq,
            pending: BTreeMap::new(),
            waiting: VecDeque::new(),
            window,
            timers: BTreeSet::new(),
            status_waiters: (0..n).map(|_| VecDeque::new()).collect(),
            first,
            fanout,
            epoch: Instant::now(),
            instance,
            switching: None,
        }
    }

    pub(crate) async fn run(
        mut self,
        mut cmds: mpsc::Receiver<Command>,
        mut inbound: mpsc::Receiver<Inbound>,
    ) {
        // One timer for the whole loop, moved only to an earlier deadline. A
        // fresh `sleep_until` per iteration registered and dropped a timer
        // entry for every command and reply (~3 % of a load generator's CPU
        // at peak, BENCHMARKS.md 2026-11-28); the first deadline moves later
        // with nearly every completed request, and a timer left earlier than
        // it only wakes the loop once to find nothing due (`on_timers`).
        let sleep = tokio::time::sleep_until(Instant::now());
        tokio::pin!(sleep);
        let mut armed = false;
        loop {
            match self.timers.first().map(|(t, _)| *t) {
                Some(wake) if !armed || wake < sleep.deadline() => {
                    sleep.as_mut().reset(wake);
                    armed = true;
                }
                Some(_) => {}
                None => armed = false,
            }
            tokio::select! {
                cmd = cmds.recv() => match cmd {
                    Some(c) => self.on_command(c),
                    // The `Client` is gone; pending callers see `Closed`.
                    None => return,
                },
                Some(msg) = inbound.recv() => self.on_inbound(msg),
                () = &mut sleep, if armed => {
                    armed = false;
                    self.on_timers(Instant::now());
                }
            }
            self.start_waiting(Instant::now());
        }
    }

    /// Sequence numbers are strictly increasing per client, in the order
    /// requests are sent (replicas execute each `(client, seq)` once).
    fn take_seq(&mut self) -> RequestSeq {
        let s = self.next_seq;
        self.next_seq = s.checked_add(1).expect("request sequence numbers exhausted");
        RequestSeq(s)
    }

    fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::Invoke {
                op,
                read_only,
                reply,
                permit,
            } => {
                Stats::bump(&self.stats.invoked);
                let now = Instant::now();
                let path = if read_only { Path::ReadOnly } else { Path::Ordered };
                let p = Pending {
                    started: now,
                    deadline: now + self.opts.request_timeout,
                    op,
                    frame: Bytes::new(),
                    request: None,
                    resend: None,
                    digest: Digest::default(),
                    quorum: ReplyQuorum::for_config(&self.config, path),
                    retransmit_every: self.opts.retransmit_initial,
                    next_send: now,
                    fast_path_until: read_only.then(|| now + self.opts.read_only_timeout),
                    busy_backoff: self.opts.busy_backoff_initial,
                    asked_full: false,
                    wake: now,
                    first_reply: None,
                    fell_back: false,
                    reply,
                    _permit: Some(permit),
                    retransmits: 0,
                    switch_to: None,
                    first_only: None,
                    few_since: None,
                    few_early: false,
                };
                self.start(p, path, now);
            }
            Command::Status { replica, reply } => {
                let (Some(link), Some(waiters)) = (
                    self.links.get(replica.index()),
                    self.status_waiters.get_mut(replica.index()),
                ) else {
                    return; // dropping `reply` tells the caller
                };
                waiters.retain(|w| !w.is_closed());
                if waiters.len() < MAX_STATUS_WAITERS {
                    waiters.push_back(reply);
                    link.try_send(Bytes::from(encode(&ClientMsg::StatusQuery)));
                }
            }
        }
    }

    /// May a new seq be taken now? The replicas' client table keeps a window
    /// of `window` seqs above the client's lowest unexecuted one and treats a
    /// seq beyond it as the client having abandoned everything below
    /// (`chorus-exec` `ClientTable::admit`). Counting requests in flight is
    /// not enough: one request held back by "busy" answers while later ones
    /// complete would stretch the span past the window and lose it. So a new
    /// seq waits until it is within `window` of the oldest pending one.
    fn seq_fits(&self) -> bool {
        // In `rcc` one seq of the window stays free for a SWITCHINSTANCE,
        // which must get through when every other request is stuck.
        let window = if self.instance.enabled() {
            self.window.saturating_sub(1).max(1)
        } else {
            self.window
        };
        self.fits(window)
    }

    fn fits(&self, window: u64) -> bool {
        self.pending
            .first_key_value()
            .is_none_or(|(oldest, _)| self.next_seq - oldest.0 < window)
    }

    /// RCC §III-E: ask to move to the next instance (one switch at a time,
    /// within the client table's window).
    fn start_switch(&mut self, now: Instant) {
        let Some(target) = self.instance.next_target() else {
            return;
        };
        if self.switching.is_some() || !self.fits(self.window) {
            return;
        }
        let (tx, rx) = oneshot::channel();
        let p = Pending {
            started: now,
            deadline: now + self.opts.request_timeout,
            op: chorus_core::switch_op(target),
            frame: Bytes::new(),
            request: None,
            resend: None,
            digest: Digest::default(),
            quorum: ReplyQuorum::for_config(&self.config, Path::Ordered),
            retransmit_every: self.opts.retransmit_initial,
            next_send: now,
            fast_path_until: None,
            busy_backoff: self.opts.busy_backoff_initial,
            asked_full: false,
            wake: now,
            first_reply: None,
            fell_back: false,
            reply: tx,
            _permit: None,
            retransmits: 0,
            switch_to: Some(target),
            first_only: None,
            few_since: None,
            few_early: false,
        };
        tracing::debug!(client = %self.id.0, from = self.instance.owner(), to = target, "switching instance");
        Stats::bump(&self.stats.switches_sent);
        self.switching = Some(rx);
        self.start_now(p, Path::Ordered, now);
    }

    /// Our switch got its f+1 answers: believe the new owner, and resend
    /// what is pending now rather than at its next back-off.
    fn on_switch_done(&mut self, target: u32, result: &Result<Bytes, ClientError>, now: Instant) {
        self.switching = None;
        let reply = match result {
            Ok(reply) => reply,
            Err(e) => {
                self.instance.on_failed(target, &e.to_string());
                self.first.set_lane(chorus_core::LaneId(self.instance.owner()));
                return;
            }
        };
        if self.instance.on_reply(target, reply) {
            Stats::bump(&self.stats.switches_applied);
        }
        // Leader-first: new requests go to the new instance's primary.
        self.first.set_lane(chorus_core::LaneId(self.instance.owner()));
        let seqs: Vec<RequestSeq> = self.pending.keys().copied().collect();
        for seq in seqs {
            if let Some(p) = self.pending.get_mut(&seq) {
                p.next_send = p.next_send.min(now);
                p.retransmits = 0;
            }
            self.reschedule(seq);
        }
    }

    /// Start requests that waited for the window, oldest first; those whose
    /// deadline passed meanwhile fail.
    fn start_waiting(&mut self, now: Instant) {
        while self.seq_fits() {
            let Some((p, path)) = self.waiting.pop_front() else {
                return;
            };
            if now >= p.deadline {
                Stats::bump(&self.stats.timeouts);
                let progress = p.quorum.progress();
                let _ = p.reply.send(Err(ClientError::Timeout {
                    // It never got a seq: it waited for the window all along.
                    seq: RequestSeq(0),
                    elapsed: now - p.started,
                    progress,
                }));
                continue;
            }
            self.start_now(p, path, now);
        }
    }

    /// Give `p` a fresh sequence number on `path`, send it to every replica
    /// and schedule it (or queue it until the seq fits the window).
    fn start(&mut self, p: Pending, path: Path, now: Instant) {
        if !self.seq_fits() || !self.waiting.is_empty() {
            debug_assert!(self.waiting.len() < self.opts.max_in_flight);
            self.waiting.push_back((p, path));
            return;
        }
        self.start_now(p, path, now);
    }

    fn start_now(&mut self, mut p: Pending, path: Path, now: Instant) {
        let seq = self.take_seq();
        let at = micros(self.epoch, now);
        let few = match (path, p.switch_to) {
            (Path::Ordered, None) => self.fanout.flags(at),
            _ => 0,
        };
        p.few_since = (few != 0).then_some(at);
        p.few_early = false;
        if few != 0 {
            Stats::bump(&self.stats.sent_few_replies);
        }
        let req = match p.switch_to {
            Some(target) => self.auth.switch_request(seq, target),
            None => self.auth.request(seq, path == Path::ReadOnly, few, p.op.clone()),
        };
        p.retransmits = 0;
        p.digest = req.digest();
        p.frame = Bytes::from(encode(&ClientMsg::Request(req.clone())));
        p.request = Some(req);
        p.resend = None;
        p.quorum = ReplyQuorum::for_config(&self.config, path);
        p.retransmit_every = self.opts.retransmit_initial;
        p.next_send = now + p.retransmit_every;
        p.asked_full = false;
        let first = match (path, p.switch_to) {
            (Path::Ordered, None) => self.first.target(&self.config, seq, micros(self.epoch, now)),
            _ => None,
        };
        p.first_only = first;
        match first.and_then(|r| self.links.get(r.index())) {
            Some(link) => {
                Stats::bump(&self.stats.sent_to_primary);
                link.try_send(p.frame.clone());
            }
            None => {
                for link in self.links.iter() {
                    link.try_send(p.frame.clone());
                }
            }
        }
        p.wake = p.next_wake();
        self.timers.insert((p.wake, seq));
        let old = self.pending.insert(seq, p);
        assert!(old.is_none(), "sequence number {seq} reused");
        // A new client learns the views with its first request.
        if self.first.ask_due(micros(self.epoch, now)) {
            self.ask_views();
        }
    }

    fn on_inbound(&mut self, msg: Inbound) {
        let Some(from) = msg.from.replica() else {
            Stats::bump(&self.stats.bad_replies);
            return;
        };
        match decode::<ClientMsg>(&msg.frame, &self.limits) {
            Ok(ClientMsg::Reply(r)) => {
                self.on_reply(from, r);
                if self.first.ask_due(micros(self.epoch, Instant::now())) {
                    self.ask_views();
                }
            }
            Ok(ClientMsg::StatusReport(s)) => match self
                .status_waiters
                .get_mut(from.index())
                .and_then(|q| q.pop_front())
            {
                Some(w) => {
                    let _ = w.send(s);
                }
                None => Stats::bump(&self.stats.bad_replies),
            },
            Ok(ClientMsg::Views(_)) if !self.first.asking() => {
                // Never asked for (a faulty replica, or we do not ask in
                // this mode): ignored, and counted.
                Stats::bump(&self.stats.bad_replies);
            }
            Ok(ClientMsg::Views(views)) => {
                if self.first.on_report(&self.config, from, &views) {
                    tracing::debug!(client = %self.id.0, view = self.first.view(), "learnt a new view");
                }
            }
            Ok(
                ClientMsg::Request(_) | ClientMsg::Resend(_) | ClientMsg::StatusQuery | ClientMsg::ViewQuery,
            ) => Stats::bump(&self.stats.bad_replies),
            Err(e) => {
                tracing::debug!(replica = %from, error = %e, "undecodable frame from replica");
                self.net.record_decode_error();
                Stats::bump(&self.stats.bad_replies);
            }
        }
    }

    fn on_reply(&mut self, from: ReplicaId, r: Reply) {
        // The channel authenticated `from`; a reply naming another replica or
        // client is Byzantine (or misrouted) and never counts.
        if r.client != self.id || r.replica != from {
            Stats::bump(&self.stats.bad_replies);
            return;
        }
        self.fanout.on_reply(from, micros(self.epoch, Instant::now()));
        let seq = r.seq;
        let Some(p) = self.pending.get_mut(&seq) else {
            Stats::bump(&self.stats.stale_replies);
            return;
        };
        // A result only counts for the request that produced it: a reply for
        // another request under the same seq (a reused seq) is never accepted.
        let answers_ours = match r.request {
            Some(d) => d == p.digest,
            None => matches!(r.body, ReplyBody::Busy | ReplyBody::Rejected(_)),
        };
        if !answers_ours {
            Stats::bump(&self.stats.bad_replies);
            return;
        }
        let now = Instant::now();
        if p.first_only.is_some() && matches!(r.body, ReplyBody::Busy) {
            // Only the primary has it and is overloaded: one "busy" is no
            // quorum to back off on, and no silence either. Resend to every
            // replica after the back-off (the f + 1 rule applies again),
            // and ask whether the view moved (`FirstContact::on_busy`).
            p.first_only = None;
            p.next_send = p.next_send.min(now + Backoff::jitter(p.busy_backoff));
            p.busy_backoff = (p.busy_backoff * 2).min(self.opts.busy_backoff_max);
            self.reschedule(seq);
            if self.first.on_busy(seq, micros(self.epoch, now)) {
                self.ask_views();
            }
            return;
        }
        if p.first_reply.is_none()
            && r.read_only == (p.quorum.path() == Path::ReadOnly)
            && matches!(r.body, ReplyBody::Full(_) | ReplyBody::Digest(_))
        {
            p.first_reply = Some(now);
        }
        match p.quorum.on_reply(from, r.read_only, r.body) {
            Err(_) => Stats::bump(&self.stats.ignored_replies),
            Ok(Decision::Pending) => {
                // Enough matching digests but no full result: the designated
                // replica's reply is usually just behind the digests, so give it
                // a short grace, then retransmit (replicas answer a retransmission
                // in full) instead of waiting for the regular timer.
                if !p.asked_full && p.quorum.missing_full_result() {
                    p.asked_full = true;
                    // f + 1 matching digests: it was ordered, so the primary
                    // we chose alone did propose it.
                    if p.first_only.take().is_some() {
                        self.first.on_accepted(seq, micros(self.epoch, now));
                    }
                    p.next_send = p.next_send.min(now + self.opts.full_reply_grace);
                    self.reschedule(seq);
                } else if p.few_since.is_some()
                    && !p.few_early
                    && p.first_reply.is_some()
                    && self.fanout.designated(self.id, seq, from)
                {
                    // Few replies (`reply_fanout`): the other designated
                    // replier is normally right behind the first. A slow or
                    // withholding one must cost a resend (and a cooling-off
                    // period), not a retransmission timeout on every request
                    // it is designated for: resend after as long again as the
                    // first reply took, at least the grace.
                    let sent = p.few_since.unwrap_or(0);
                    let took = Duration::from_micros(micros(self.epoch, now).saturating_sub(sent));
                    let grace = took.max(self.opts.full_reply_grace);
                    if now + grace < p.next_send {
                        p.next_send = now + grace;
                        p.few_early = true;
                        self.reschedule(seq);
                    }
                }
            }
            Ok(Decision::Accepted(bytes)) => {
                if p.quorum.path() == Path::ReadOnly {
                    Stats::bump(&self.stats.fast_path_completed);
                }
                if p.first_only.is_some() {
                    // f + 1 results before any retransmission: the primary
                    // we chose alone did propose it.
                    self.first.on_accepted(seq, micros(self.epoch, now));
                }
                self.finish(seq, Ok(bytes));
            }
            Ok(Decision::Rejected(why)) => self.finish(seq, Err(ClientError::rejected(seq, why))),
            Ok(Decision::Busy) => {
                Stats::bump(&self.stats.busy_backoffs);
                p.quorum.clear_busy();
                p.next_send = now + Backoff::jitter(p.busy_backoff);
                p.busy_backoff = (p.busy_backoff * 2).min(self.opts.busy_backoff_max);
                self.reschedule(seq);
            }
            Ok(Decision::FallBack) => self.fall_back(seq, now),
        }
    }

    fn on_timers(&mut self, now: Instant) {
        let mut ask_views = false;
        while let Some(&(t, seq)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            let Some(p) = self.pending.get_mut(&seq) else {
                continue;
            };
            debug_assert_eq!(p.wake, t);
            if p.reply.is_closed() {
                Stats::bump(&self.stats.abandoned);
                self.pending.remove(&seq);
            } else if now >= p.deadline {
                let e = ClientError::Timeout {
                    seq,
                    elapsed: now - p.started,
                    progress: p.quorum.progress(),
                };
                self.finish(seq, Err(e));
            } else if p.fast_path_until.is_some_and(|t| now >= t) {
                self.fall_back(seq, now);
            } else {
                if now >= p.next_send && std::mem::take(&mut p.few_early) && p.few_since.is_some() {
                    // Few replies, the other designated replier lags: ask
                    // everyone now and cool off; the primary did propose it
                    // (a designated replier executed it), so its probe and
                    // the regular back-off stay as they are.
                    Stats::bump(&self.stats.retransmissions);
                    if let Some(sent) = p.few_since.take() {
                        if self.fanout.on_shortfall(sent, micros(self.epoch, now)) {
                            Stats::bump(&self.stats.reply_shortfalls);
                        }
                    }
                    let resend = Self::resend_frame(p);
                    for link in self.links.iter() {
                        link.try_send(resend.clone());
                    }
                    p.next_send = now + p.retransmit_every;
                } else if now >= p.next_send {
                    // To every replica, including those that already answered:
                    // replicas answer a retransmitted request with the full
                    // result, which is how a digest-only quorum gets its bytes
                    // when the designated replica is faulty.
                    Stats::bump(&self.stats.retransmissions);
                    // Some designated replier did not answer in time (or a
                    // primary did not propose it; either way, ask everyone).
                    if let Some(sent) = p.few_since.take() {
                        if self.fanout.on_shortfall(sent, micros(self.epoch, now)) {
                            Stats::bump(&self.stats.reply_shortfalls);
                        }
                    }
                    // PBFT §4.1: the primary we chose left it unanswered.
                    // Unless f + 1 matching digests came and only the full
                    // result is late (`asked_full`): then it was ordered.
                    if let Some(to) = p.first_only.take() {
                        if self
                            .first
                            .on_silent(&self.config, seq, to, micros(self.epoch, now))
                        {
                            Stats::bump(&self.stats.primary_silences);
                            ask_views = true;
                        }
                    }
                    let resend = Self::resend_frame(p);
                    for link in self.links.iter() {
                        link.try_send(resend.clone());
                    }
                    p.retransmit_every = (p.retransmit_every * 2).min(self.opts.retransmit_max);
                    p.next_send = now + p.retransmit_every;
                    p.retransmits = p.retransmits.saturating_add(1);
                }
                p.wake = p.next_wake();
                self.timers.insert((p.wake, seq));
                // RCC §III-E: a request that keeps timing out in the ordered
                // path may be censored by (or stuck at) our instance.
                let after = self.opts.switch_after_retransmits;
                let stuck = after > 0
                    && p.switch_to.is_none()
                    && p.quorum.path() == Path::Ordered
                    && p.retransmits >= after;
                if stuck {
                    self.start_switch(now);
                }
            }
        }
        if ask_views || self.first.ask_due(micros(self.epoch, now)) {
            self.ask_views();
        }
    }

    /// The `ClientMsg::Resend` frame of `p`, encoded once.
    fn resend_frame(p: &mut Pending) -> Bytes {
        let resend = match (&p.resend, &p.request) {
            (Some(f), _) => f.clone(),
            (None, Some(req)) => Bytes::from(encode(&ClientMsg::Resend(req.clone()))),
            (None, None) => p.frame.clone(),
        };
        p.resend = Some(resend.clone());
        resend
    }

    /// Ask every replica for its lanes' views: the answers go to
    /// `FirstContact::on_report`, which asks again (at most every
    /// `first_contact::ASK_EVERY`) while they do not suffice.
    fn ask_views(&mut self) {
        let query = Bytes::from(encode(&ClientMsg::ViewQuery));
        for link in self.links.iter() {
            link.try_send(query.clone());
        }
    }

    fn reschedule(&mut self, seq: RequestSeq) {
        let p = self
            .pending
            .get_mut(&seq)
            .expect("rescheduling a pending request");
        self.timers.remove(&(p.wake, seq));
        p.wake = p.next_wake();
        self.timers.insert((p.wake, seq));
    }

    /// The fast path failed (conflicting or missing read-only replies, or its
    /// timer): order the same operation under a new sequence number, keeping
    /// the original deadline.
    fn fall_back(&mut self, seq: RequestSeq, now: Instant) {
        let mut p = self.remove(seq).expect("falling back a pending request");
        Stats::bump(&self.stats.fallbacks);
        tracing::info!(%seq, progress = %p.quorum.progress(), "read-only fast path failed, ordering the request instead");
        p.fast_path_until = None;
        p.fell_back = true;
        p.first_reply = None;
        self.start(p, Path::Ordered, now);
    }

    fn remove(&mut self, seq: RequestSeq) -> Option<Pending> {
        let p = self.pending.remove(&seq)?;
        self.timers.remove(&(p.wake, seq));
        Some(p)
    }

    fn finish(&mut self, seq: RequestSeq, result: Result<Bytes, ClientError>) {
        let p = self.remove(seq).expect("finishing a pending request");
        let now = Instant::now();
        if let Some(target) = p.switch_to {
            // Internal: no caller waits for it, and it is not an invocation.
            self.on_switch_done(target, &result, now);
            self.start_waiting(now);
            return;
        }
        let result = result.map(|bytes| Timed {
            result: bytes,
            first_reply: p.first_reply.unwrap_or(now).into_std(),
            accepted: now.into_std(),
            fell_back: p.fell_back,
        });
        let counter = match &result {
            Ok(_) => &self.stats.completed,
            Err(ClientError::Timeout { .. }) => &self.stats.timeouts,
            Err(_) => &self.stats.rejected,
        };
        Stats::bump(counter);
        let _ = p.reply.send(result);
    }
}

/// `FirstContact`'s clock: microseconds since `epoch`.
fn micros(epoch: Instant, t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(epoch).as_micros()).unwrap_or(u64::MAX)
}
