//! The `dispel` lanes: one DBFT engine (`chorus-dbft`) deciding, epoch by
//! epoch, slot `e` of every lane `p` = proposer `p`'s batch in epoch `e`
//! (Dispel §3–§4, `shared/specs/dbft.md`). The engine is sans-IO already;
//! this wrapper turns its actions into `ReplicaMsg::Dbft` sends, one driver
//! timer, persisted epoch marks and the `Decision`s the merger consumes.
//!
//! There is no view change: liveness comes from DBFT's timers and rotating
//! weak coordinator; a silent proposer costs its own batch (its binary
//! consensus decides 0).
//!
//! Links may lose messages (the engine assumes reliable links, spec §1), so
//! every broadcast of a live epoch is kept and re-sent to a peer whose status
//! shows it stalled at that epoch (spec P14: "pair the windows with
//! retransmission").
//!
//! Every `ReplicaMsg::Dbft` frame is a `DbftBundle`. The small messages
//! (votes, echoes, readies, fetch requests) one step broadcasts leave as one
//! bundle per peer at the end of the step; a driver in burst mode
//! (`set_burst_mode`: the runtime, which handles whatever its inbox holds
//! before it writes) holds them until the end of the burst, so a busy
//! replica sends one bundle per peer per burst and an idle one at once. A
//! batch (INIT, fetch answer) leaves at once, alone. Received bundles are
//! handled message by message, in order.

pub mod pipeline;
pub mod resend;

use crate::counters::Cx;
use crate::io::RejectReason;
use crate::io::{PersistRecord, TimerId};
use crate::verify::{RequestVerifier, VerifiedHint};
use bytes::Bytes;
use chorus_core::{
    Authenticator, Batch, Cell, ClusterConfig, DbftWire, Identity, LaneId, Limits, Millis, ReplicaId,
    ReplicaMsg, Seq, Slot, Status, UnverifiableRequest, View,
};
use chorus_dbft::{
    Action as DAction, Dbft, DbftBundle, DbftConfig, DbftMsg, Epoch, Event as DEvent, TimerId as DTimer,
};
use resend::{PeerView, Progress};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Broadcasts kept per epoch for retransmission (P14: bounded).
pub const MAX_KEPT_PER_EPOCH: usize = 4_096;
/// Live epochs (beyond the ones we delivered) re-sent to a stalled peer,
/// and our own stuck epochs re-sent to peers past them, per status tick.
pub const RETRANSMIT_EPOCHS: u64 = 2;

/// What one call produced for the rest of the replica.
#[derive(Default, Debug)]
pub struct DispelOutput {
    /// Decided cells: every lane's slot of an epoch at once, a no-op where the
    /// binary consensus decided 0 (or the digest repeated another proposer's).
    pub decided: Vec<(Cell, Arc<Batch>)>,
    /// The join rule admitted these epochs as the ones this replica would have
    /// spawned: answer with a pool batch (Dispel Alg. 2 lines 13–15).
    pub joins: Vec<Epoch>,
    /// Per decided epoch, in order, each proposer's bit and batch:
    /// `Pool::set_silent` follows them.
    pub bits: Vec<Vec<ProposerBit>>,
}

/// One proposer in one decided epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProposerBit {
    /// Its bit decided 1: its batch is in the epoch.
    pub selected: bool,
    /// That batch carries a request of one of its own clients (a proposer
    /// that only carries others' requests may be censoring its own).
    pub served_own_clients: bool,
}

/// One live epoch as `chorus status` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochInfo {
    pub epoch: Epoch,
    pub joined: bool,
    /// Binary instances decided so far, of n.
    pub bits_decided: usize,
    /// Highest binary-consensus round reached by any instance.
    pub max_round: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DispelStatus {
    /// Lowest epoch not yet handed to the merger.
    pub next_epoch: Epoch,
    /// The epoch this replica would spawn next.
    pub next_spawn: Epoch,
    /// Lowest epoch the engine keeps.
    pub low: Epoch,
    /// Epochs joined and not yet delivered (`next_spawn − next_epoch`).
    pub pipeline_depth: u64,
    pub epochs: Vec<EpochInfo>,
    /// Engine drops by reason.
    pub dropped: Vec<(String, u64)>,
    /// Highest decided epoch's rounds, per decided epoch still held.
    pub decided_rounds: Vec<(Epoch, u32)>,
}

/// What survives a crash: the engine and the wrapper's own bookkeeping.
/// Snapshotted at each collect, then rebuilt by replaying the inputs logged
/// after it (`PersistRecord::DispelInput`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DispelState {
    engine: Dbft,
    /// The engine's timers, by deadline; the driver holds one (`TimerId::Dispel`).
    timers: BTreeSet<(Millis, DTimer)>,
    /// Our broadcasts of live epochs, for retransmission.
    sent: BTreeMap<Epoch, Vec<DbftMsg>>,
    /// First epoch not yet handed to the merger.
    next_epoch: Epoch,
    /// Highest round per decided epoch (status).
    rounds: BTreeMap<Epoch, u32>,
    /// Epochs output above `next_epoch` (they may complete out of order).
    ready: BTreeSet<Epoch>,
}

/// One engine input as logged (the engine's `Event`, serialisable).
#[derive(Clone, Debug, Serialize, Deserialize)]
enum Input {
    Message {
        from: ReplicaId,
        msg: DbftMsg,
    },
    Timer(DTimer),
    Propose {
        epoch: Epoch,
        batch: Batch,
    },
    /// A received bundle's messages (those that passed the INIT checks),
    /// handled in order: one log record per bundle. Appended last: logged
    /// inputs of earlier variants keep their tags.
    Messages {
        from: ReplicaId,
        msgs: Vec<DbftMsg>,
    },
}

/// Our small broadcasts not yet sent. Not persisted: what a crash loses
/// here is kept in `DispelState::sent` and re-sent like a lost message.
#[derive(Clone, Debug, Default)]
struct Coalescer {
    pending: Vec<DbftMsg>,
    /// Hold `pending` until `end_of_burst` (the driver promised to call it).
    burst: bool,
}

#[derive(Clone, Debug)]
pub struct DispelCore {
    cfg: Arc<ClusterConfig>,
    me: ReplicaId,
    st: DispelState,
    limits: Limits,
    verifier: RequestVerifier,
    armed: Option<Millis>,
    /// Per peer: its latest status (first epoch it has not delivered,
    /// stalled there or not) and our last status-tick re-send to it
    /// (`resend.rs`).
    peers: Vec<PeerView>,
    /// Per peer: when it last got what it lacked right after a jump (its own
    /// floor: a re-send from the tick must not make us skip its
    /// announcement, dispel seed 52301142).
    asked: Vec<Option<Millis>>,
    /// Whether our first undelivered epoch moved between status ticks.
    progress: Progress,
    /// A state transfer moved us since the last status tick: the next status
    /// says we lack epochs too (in case the announcement was lost).
    jumped: bool,
    /// While rebuilding from the log: nothing is persisted or sent again
    /// (the messages went out before the crash; retransmission resends).
    replaying: bool,
    /// Dispel §4.2: what we sent recently, for the pipeline's idle-link test.
    meter: pipeline::SendMeter,
    coalescer: Coalescer,
    /// Engine time minus our clock. The runtime's clock starts at 0 with
    /// the process, but a recovered engine's clock is the previous
    /// process's (its inputs replay at their logged times), so its timers
    /// would fall due an old uptime late: the engine runs on our clock plus
    /// this, set at recovery (docs/known-issues.md, fixed 2026-11-26).
    clock_offset: u64,
    /// Small messages per bundle at most (fits `max_frame_bytes`).
    bundle_cap: usize,
    /// Per proposer: the latest epoch we reported an unverifiable request
    /// of its INIT for (`init_acceptable`): at most one report per
    /// proposer and epoch, inside the engine's window, however often a
    /// Byzantine proposer sends INITs. Not protocol state (hints only).
    reported: Vec<Option<Epoch>>,
    /// Epochs whose bit of ours decided 0 before our broadcast delivered
    /// (`handle_engine`); inside the engine's window (`collect`). A hint
    /// for the pool, not protocol state, so not in the snapshot: bits
    /// decided before it are not noted again after a restart, when the
    /// pool starts empty and holds no proposal of ours to weigh.
    lost_undelivered: BTreeSet<Epoch>,
}

/// A bundle of `msgs` (one or more) as a frame.
fn wire(msgs: &[DbftMsg]) -> ReplicaMsg {
    ReplicaMsg::Dbft(DbftWire {
        bytes: Bytes::from(DbftBundle::encode(msgs)),
    })
}

/// Bytes a message puts on our outgoing link per recipient.
fn wire_bytes(m: &ReplicaMsg) -> u64 {
    match m {
        ReplicaMsg::Dbft(w) => w.bytes.len() as u64,
        _ => 0,
    }
}

impl DispelCore {
    pub fn new(cfg: Arc<ClusterConfig>, me: ReplicaId, identity: Identity) -> DispelCore {
        let dcfg = DbftConfig::from_cluster(&cfg);
        let limits = dcfg.limits();
        let n = cfg.n();
        DispelCore {
            st: DispelState {
                engine: Dbft::new(dcfg, me),
                timers: BTreeSet::new(),
                sent: BTreeMap::new(),
                next_epoch: 0,
                rounds: BTreeMap::new(),
                ready: BTreeSet::new(),
            },
            limits,
            verifier: RequestVerifier::new(cfg.clone(), me, identity),
            armed: None,
            peers: vec![PeerView::default(); n],
            asked: vec![None; n],
            progress: Progress::default(),
            jumped: false,
            replaying: false,
            meter: pipeline::SendMeter::default(),
            coalescer: Coalescer::default(),
            clock_offset: 0,
            bundle_cap: DbftBundle::max_small_for(cfg.params.max_frame_bytes as usize),
            reported: vec![None; n],
            lost_undelivered: BTreeSet::new(),
            cfg,
            me,
        }
    }

    pub fn engine(&self) -> &Dbft {
        &self.st.engine
    }

    pub fn next_epoch(&self) -> Epoch {
        self.st.next_epoch
    }

    /// The epoch this replica would spawn next, if it may propose in it.
    pub fn spawnable(&self) -> Option<Epoch> {
        let e = self.st.engine.next_spawn();
        let proposed = self.st.engine.epoch(e).is_some_and(|s| s.proposed());
        let in_window =
            e >= self.st.engine.low() && e - self.st.engine.low() < self.st.engine.config().window_epochs;
        (!proposed && in_window).then_some(e)
    }

    /// Dispel §4.2: is our outgoing link idle (below 5 % of its capacity
    /// over the last 6 ms)? If not, when to look again.
    pub fn link_idle(&self, now: Millis) -> Result<(), Millis> {
        let capacity = self.cfg.params.link_capacity_mib_s.saturating_mul(1 << 20);
        if self.meter.idle(now, capacity) {
            Ok(())
        } else {
            Err(self.meter.next_sample(now))
        }
    }

    pub fn cell(&self, epoch: Epoch) -> Cell {
        Cell {
            lane: LaneId(self.me.0),
            slot: Slot(epoch),
        }
    }

    /// A DBFT message from an authenticated peer; `wall_ms` is our wall
    /// clock (`Replica::set_wall_clock`).
    pub fn on_message(
        &mut self,
        cx: &mut Cx,
        from: ReplicaId,
        w: &DbftWire,
        hint: &dyn VerifiedHint,
        wall_ms: u64,
    ) -> DispelOutput {
        if DbftBundle::precheck(&w.bytes).is_err() {
            cx.reject("dbft-undecodable");
            return DispelOutput::default();
        }
        let mut msgs = match chorus_core::decode::<DbftBundle>(&w.bytes, &self.limits) {
            Ok(b) => b.0,
            Err(_) => {
                cx.reject("dbft-undecodable");
                return DispelOutput::default();
            }
        };
        msgs.retain(|m| self.init_acceptable(cx, from, m, hint, wall_ms));
        if msgs.is_empty() {
            return DispelOutput::default();
        }
        let input = match <[DbftMsg; 1]>::try_from(msgs) {
            Ok([msg]) => Input::Message { from, msg },
            Err(msgs) => Input::Messages { from, msgs },
        };
        let acts = self.feed(cx, input);
        self.absorb(cx, acts)
    }

    /// A correct replica echoes only batches whose requests it verified
    /// (as a PBFT backup checks a pre-prepare): a delivered batch then had
    /// an echo quorum, so some correct replica vouched for every request.
    /// Other messages pass.
    ///
    /// A request whose MAC for us fails (the rest of its vector may verify
    /// elsewhere: a partial authenticator) is reported to every replica
    /// (`ReplicaMsg::Unverifiable`, as a PBFT backup does): a replica that
    /// verified it learns from f+1 reports that the client is partial and
    /// stops proposing it (`pool/client_penalty.rs`). Without the reports
    /// the proposer's bit decided 0, the request went back to its pending
    /// requests and into its next INIT, and the cluster ran epochs for it
    /// forever (a `bad-auth` client at n = 16: 16 epochs a second with
    /// every correct client done; found 2026-11-26).
    fn init_acceptable(
        &mut self,
        cx: &mut Cx,
        from: ReplicaId,
        m: &DbftMsg,
        hint: &dyn VerifiedHint,
        wall_ms: u64,
    ) -> bool {
        let DbftMsg::RbInit { epoch, batch } = m else {
            return true;
        };
        // Nor does it echo a batch from the future: the agreed time
        // (`ExecContext::time_ms`) stays within correct clocks + skew.
        if crate::batch_time::from_future(batch, wall_ms, &self.cfg.params) {
            cx.reject("batch-time-future");
            return false;
        }
        for r in &batch.requests {
            if hint.already_verified(r) {
                continue;
            }
            match self.verifier.check(r) {
                Ok(()) => {}
                Err(RejectReason::BadAuthenticator)
                    if matches!(r.auth, Authenticator::Macs(_)) && self.verifier.check_shape(r).is_ok() =>
                {
                    cx.reject("dbft-init-bad-request");
                    if !self.may_report(from, *epoch) {
                        return false;
                    }
                    cx.out.broadcast(ReplicaMsg::Unverifiable(UnverifiableRequest {
                        lane: LaneId(from.0),
                        view: View(0),
                        slot: Slot(*epoch),
                        client: r.client,
                        seq: r.seq,
                        content: r.digest(),
                        auth: r.auth_digest(),
                    }));
                    return false;
                }
                Err(_) => {
                    cx.reject("dbft-init-bad-request");
                    return false;
                }
            }
        }
        true
    }

    /// One report per proposer and epoch, for epochs in the engine's window.
    fn may_report(&mut self, proposer: ReplicaId, epoch: Epoch) -> bool {
        let low = self.st.engine.low();
        let in_window = epoch >= low && epoch - low < self.st.engine.config().window_epochs;
        let Some(last) = self.reported.get_mut(proposer.index()) else {
            return false;
        };
        if !in_window || last.is_some_and(|l| l >= epoch) {
            return false;
        }
        *last = Some(epoch);
        true
    }

    /// The engine's time at our time `now`.
    fn engine_now(&self, now: Millis) -> Millis {
        Millis(now.0.saturating_add(self.clock_offset))
    }

    pub fn on_timer(&mut self, cx: &mut Cx) -> DispelOutput {
        let now = self.engine_now(cx.now);
        if self.armed.is_some_and(|a| a <= now) {
            self.armed = None;
        }
        let mut all = DispelOutput::default();
        while let Some(&(at, id)) = self.st.timers.first() {
            if at > now {
                break;
            }
            self.st.timers.pop_first();
            let acts = self.feed(cx, Input::Timer(id));
            let o = self.absorb(cx, acts);
            all.decided.extend(o.decided);
            all.joins.extend(o.joins);
            all.bits.extend(o.bits);
        }
        self.rearm(cx);
        all
    }

    /// RB-broadcast our batch for `epoch` (spawned, or answering a join).
    pub fn propose(&mut self, cx: &mut Cx, epoch: Epoch, batch: Batch) -> DispelOutput {
        let acts = self.feed(cx, Input::Propose { epoch, batch });
        self.absorb(cx, acts)
    }

    /// Epochs below `below` are covered by the stable checkpoint (or were
    /// given up at recovery): free them (spec §5.5).
    pub fn collect(&mut self, cx: &mut Cx, below: Epoch) -> DispelOutput {
        if below <= self.st.engine.low() {
            return DispelOutput::default();
        }
        // Through `handle_engine`: joining an epoch can decide bits at once.
        let acts = self.handle_engine(self.engine_now(cx.now), DEvent::Collect { below });
        self.st.sent = self.st.sent.split_off(&below);
        self.st.rounds = self.st.rounds.split_off(&below);
        self.lost_undelivered = self.lost_undelivered.split_off(&below);
        if below > self.st.next_epoch {
            self.jumped = true;
        }
        self.st.next_epoch = self.st.next_epoch.max(below);
        self.st.ready = self.st.ready.split_off(&self.st.next_epoch);
        while self.st.ready.remove(&self.st.next_epoch) {
            self.st.next_epoch += 1;
        }
        let o = self.absorb(cx, acts);
        if !self.replaying {
            // A window shrunk by the cluster file but held wide by epochs
            // held at recovery (`Dbft::reconfigure`) may narrow now: the
            // snapshot below carries it.
            self.retune();
            // Everything logged so far is in this snapshot.
            cx.out.persist(self.snapshot_record());
        }
        o
    }

    /// The record that stands in for every input logged so far.
    pub fn snapshot_record(&self) -> PersistRecord {
        PersistRecord::DispelSnapshot {
            low: self.st.engine.low(),
            state: Bytes::from(chorus_core::encode(&self.st)),
        }
    }

    /// Take the cluster file's DBFT parameters (they may differ from those
    /// of a restored engine). Only at points followed by a snapshot: the
    /// parameters are not an input, so a replay from an older snapshot
    /// must not meet inputs handled under others.
    fn retune(&mut self) {
        let old = self.st.engine.config().clone();
        let want = old.clone().with_cluster_params(&self.cfg);
        if old == want {
            return;
        }
        // `recover` checked membership; nothing else is refused.
        let taken = self.st.engine.reconfigure(want);
        debug_assert!(taken, "the DBFT engine refused the cluster's parameters");
        // (A window the held epochs keep wide stays as it was until they fit.)
        if *self.st.engine.config() != old {
            tracing::info!(
                ?old,
                new = ?self.st.engine.config(),
                "dispel: took the cluster file's DBFT parameters"
            );
        }
    }

    /// The status every replica broadcasts each interval: our first
    /// undelivered epoch, whether it made no progress since the previous
    /// tick (peers retransmit to us then) and our stable checkpoint (state
    /// transfer). Then retransmit (spec P14, aimed: `resend.rs`):
    ///
    /// * to a peer whose latest status says it is stalled, our messages of
    ///   its epochs (every epoch it lacks up to ours when it is behind);
    /// * when we are stalled, our messages of our stuck epochs to every
    ///   peer already past them. A peer that has delivered an epoch may
    ///   still be running rounds d+1, d+2 of one of its instances (spec
    ///   §3.6) and need our B_VAL/AUX there to send the AUX we wait for; its
    ///   status no longer shows it stuck, so without this our lost messages
    ///   to it are never re-sent and both sides wait for ever.
    ///
    /// A slow epoch that still progresses re-sends nothing (the n = 96
    /// storm, `resend.rs`).
    pub fn on_status_tick(&mut self, cx: &mut Cx, stable_seq: Seq) {
        let mine = self.st.next_epoch;
        let low = self.st.engine.low();
        let interval = self.cfg.params.status_interval_ms;
        let stalled = self.progress.stalled(&self.st.engine, mine);
        let lacking = stalled || std::mem::take(&mut self.jumped);
        self.broadcast_status(cx, stable_seq, lacking);
        for p in 0..self.peers.len() {
            if p == self.me.index() {
                continue;
            }
            let Some(at) = self.peers[p].at() else {
                continue;
            };
            let peer_stalled = self.peers[p].stalled(cx.now, interval) && at >= low;
            let range = if peer_stalled {
                // Its epochs, and ours up to them when it is past us (both
                // rules at once: it may be stalled at a later epoch while
                // waiting for our votes of our stuck one, a review of
                // 2026-11-26); every epoch it lacks when it is behind us
                // (dispel seed 52301142, see `on_peer_status`).
                at.min(mine)..at.max(mine).saturating_add(RETRANSMIT_EPOCHS)
            } else if stalled && at > mine {
                mine..mine.saturating_add(RETRANSMIT_EPOCHS).min(at)
            } else {
                continue;
            };
            if self.peers[p].may_resend(cx.now, interval) && self.resend(cx, ReplicaId(p as u32), range) > 0 {
                self.peers[p].record(cx.now);
            }
        }
    }

    /// Our first undelivered epoch and stable checkpoint, to every peer.
    /// `lacking`: our first undelivered epoch made no progress for a status
    /// interval, or we just jumped ahead by a state transfer, so we lack what peers may hold; it
    /// travels in `Status::suspects`, which dispel has no other use for.
    pub fn broadcast_status(&self, cx: &mut Cx, stable_seq: Seq, lacking: bool) {
        cx.out.broadcast(ReplicaMsg::Status(Status {
            lane: LaneId(0),
            view: View(0),
            next_undecided: Slot(self.st.next_epoch),
            stable_seq,
            suspects: lacking,
            awaits_new_view: false,
        }));
    }

    /// Our messages of `epochs` (those we still hold) to `to`, again; how
    /// many.
    fn resend(&mut self, cx: &mut Cx, to: ReplicaId, epochs: std::ops::Range<Epoch>) -> usize {
        let mut sent = 0;
        let mut small: Vec<DbftMsg> = Vec::new();
        for (_, msgs) in self.st.sent.range(epochs) {
            for m in msgs {
                cx.counters.retransmissions += 1;
                sent += 1;
                if m.is_small() {
                    small.push(m.clone());
                    if small.len() < self.bundle_cap {
                        continue;
                    }
                }
                let w = if m.is_small() {
                    wire(&std::mem::take(&mut small))
                } else {
                    wire(std::slice::from_ref(m))
                };
                self.meter.record(cx.now, wire_bytes(&w));
                cx.out.send(to, w);
            }
        }
        if !small.is_empty() {
            let w = wire(&small);
            self.meter.record(cx.now, wire_bytes(&w));
            cx.out.send(to, w);
        }
        sent
    }

    /// A peer's status. One that just moved (a state transfer installed)
    /// and says it lacks epochs behind ours gets every epoch it lacks that
    /// we still hold, at once; one that says it is stalled where it was is
    /// the status tick's. Before
    /// 2026-11-24 a peer was helped only after two equal statuses, two
    /// epochs a tick: slower than the others decide without it, and by then
    /// they had collected the epochs between its new checkpoint and theirs.
    /// So a replica left behind stayed behind, caught up only by one state
    /// transfer after another, and with a Byzantine replica among the rest
    /// every epoch waited on that one's instances (dispel seed 52301142).
    /// Bounded: `sent` holds at most the window, and a peer gets this at
    /// most once per status interval (a Byzantine one naming a new epoch in
    /// every status gains nothing: the floor is per peer, not per epoch),
    /// and not while it is below our low (nothing we hold helps it before
    /// its state transfer).
    pub fn on_peer_status(&mut self, cx: &mut Cx, from: ReplicaId, next_epoch: Epoch, lacking: bool) {
        if from == self.me {
            return;
        }
        let interval = self.cfg.params.status_interval_ms;
        let Some(p) = self.peers.get_mut(from.index()) else {
            return;
        };
        let mine = self.st.next_epoch;
        let jumped = p.observe(next_epoch, lacking, cx.now);
        // Below our low we hold nothing it could use: it needs a state
        // transfer first (and announces itself once that is installed).
        if !jumped || !lacking || mine <= next_epoch || next_epoch < self.st.engine.low() {
            return;
        }
        let last = &mut self.asked[from.index()];
        if last.is_some_and(|t| cx.now.0.saturating_sub(t.0) < interval) {
            return;
        }
        *last = Some(cx.now);
        self.resend(cx, from, next_epoch..mine.saturating_add(RETRANSMIT_EPOCHS));
    }

    /// Log an input (before the engine acts on it: persist before send),
    /// then hand it to the engine.
    fn feed(&mut self, cx: &mut Cx, input: Input) -> Vec<DAction> {
        let now = self.engine_now(cx.now);
        if !self.replaying {
            cx.out.persist(PersistRecord::DispelInput {
                now,
                input: Bytes::from(chorus_core::encode(&input)),
            });
        }
        let ev = match input {
            Input::Message { from, msg } => DEvent::Message { from, msg },
            Input::Timer(id) => DEvent::Timer(id),
            Input::Propose { epoch, batch } => DEvent::Propose { epoch, batch },
            Input::Messages { from, msgs } => {
                let mut acts = Vec::new();
                for msg in msgs {
                    acts.extend(self.handle_engine(now, DEvent::Message { from, msg }));
                }
                return acts;
            }
        };
        self.handle_engine(now, ev)
    }

    /// One engine step. Notes the epochs whose bit of ours decided 0 before
    /// our own broadcast delivered, judged right after the step that
    /// decided it (one message: a bundle's messages are steps of their own,
    /// so a Byzantine bundle cannot complete the decision and then our
    /// delivery before we look).
    fn handle_engine(&mut self, now: Millis, ev: DEvent) -> Vec<DAction> {
        let acts = self.st.engine.handle(now, ev);
        for a in &acts {
            if let DAction::SlotDecided {
                epoch,
                proposer,
                decision: chorus_dbft::SlotDecision::Noop,
            } = a
            {
                let delivered = self
                    .st
                    .engine
                    .epoch(*epoch)
                    .is_some_and(|s| s.rb(self.me.index()).delivered().is_some());
                if *proposer == self.me && !delivered {
                    self.lost_undelivered.insert(*epoch);
                }
            }
        }
        acts
    }

    /// Our bit in `epoch` decided 0 before our own broadcast delivered: our
    /// INIT did not gather 2f+1 echoes in time (a refused one never does).
    /// A late INIT that had delivered before its bit decided 0 is no sign
    /// of a request others cannot verify (`Pool::voided_for_good`).
    pub fn lost_undelivered(&self, epoch: Epoch) -> bool {
        self.lost_undelivered.contains(&epoch)
    }

    /// Recovery: the latest snapshot (if any), then every input logged after
    /// it, in order and at its original time. The engine is deterministic,
    /// so this is the state that sent our messages before the crash. Returns
    /// what the replay decided, and the epochs whose join we had not yet
    /// answered with a proposal (safe to answer now: no INIT of ours left).
    pub fn recover(
        &mut self,
        cx: &mut Cx,
        snapshot: Option<Bytes>,
        inputs: Vec<(Millis, Bytes)>,
    ) -> DispelOutput {
        let mut o = DispelOutput::default();
        if let Some(b) = snapshot {
            match postcard::from_bytes::<DispelState>(&b) {
                Ok(st) if st.engine.me() == self.me && st.engine.config().n == self.cfg.n() => {
                    self.st = st;
                    // Epochs output before the snapshot but not yet covered by
                    // a checkpoint (below `next_epoch`, and those that
                    // completed out of order): the merger needs them again.
                    let output: Vec<Epoch> = (self.st.engine.low()..self.st.next_epoch)
                        .chain(self.st.ready.iter().copied())
                        .collect();
                    for e in output {
                        if let Some(batches) = self.epoch_batches(e) {
                            self.push_decided(e, batches, &mut o);
                        }
                    }
                }
                // Fail-stop: without the snapshot, replaying the inputs
                // logged after it rebuilds a different engine, which may
                // vote against what this replica sent before the crash
                // (a second equivocating replica). Only a store written by
                // another version or replica gets here (chorus-store
                // checksums every record); the runtime turns this panic
                // into a fatal exit with its cause (`chorus-node` fatal.rs).
                Ok(st) => panic!(
                    "dispel recovery: the stored DBFT snapshot belongs to replica {:?} of an n = {} cluster, not {:?} of n = {}; refusing to replay without it",
                    st.engine.me(),
                    st.engine.config().n,
                    self.me,
                    self.cfg.n()
                ),
                Err(e) => panic!(
                    "dispel recovery: the stored DBFT snapshot does not decode ({e}): written by another version? Refusing to replay the logged inputs without it"
                ),
            }
        }
        self.replaying = true;
        self.clock_offset = 0;
        let real_now = cx.now;
        for (at, bytes) in inputs {
            // Fail-stop, as for the snapshot: skipping an input would
            // rebuild an engine that never sent what we sent.
            let input = match postcard::from_bytes::<Input>(&bytes) {
                Ok(input) => input,
                Err(e) => panic!(
                    "dispel recovery: a logged DBFT input does not decode ({e}): written by another version? Refusing to replay around it"
                ),
            };
            cx.now = at;
            let acts = self.feed(cx, input);
            let more = self.absorb(cx, acts);
            o.decided.extend(more.decided);
            o.joins.extend(more.joins);
            o.bits.extend(more.bits);
        }
        cx.now = real_now;
        self.replaying = false;
        // The cluster file's parameters (window, round timeout, batch
        // bounds) may have changed since the snapshot: the replay ran under
        // the snapshot's, as the inputs were handled; take the file's now,
        // and store a snapshot, so that the next restart replays what this
        // process handles under them (and a log of an older version, with
        // no snapshot yet, is replaced by one).
        self.retune();
        cx.out.persist(self.snapshot_record());
        // Logged times are engine times: continue the engine's clock.
        self.clock_offset = self.st.engine.now().0.saturating_sub(real_now.0);
        self.coalescer.pending.clear();
        o.joins
            .retain(|e| self.st.engine.epoch(*e).is_some_and(|s| !s.proposed()));
        o.joins.sort_unstable();
        o.joins.dedup();
        self.armed = None;
        self.rearm(cx);
        o
    }

    /// The output of an epoch already output: its selected batches, one per
    /// digest (as `EpochReady` carries them).
    fn epoch_batches(&self, e: Epoch) -> Option<Vec<(ReplicaId, Arc<Batch>)>> {
        let s = self.st.engine.epoch(e)?;
        let mut out: Vec<(ReplicaId, Arc<Batch>)> = Vec::new();
        let mut last = None;
        for (p, d) in s.selected()? {
            if last != Some(d) {
                out.push((p, s.batch(&d)?.clone()));
                last = Some(d);
            }
        }
        Some(out)
    }

    fn rearm(&mut self, cx: &mut Cx) {
        // Replay runs on the old clock; `recover` arms once it is done.
        if self.replaying {
            return;
        }
        let Some(&(at, _)) = self.st.timers.first() else {
            return;
        };
        if self.armed.is_none_or(|a| at < a) {
            self.armed = Some(at);
            cx.out
                .set_timer(TimerId::Dispel, Millis(at.0.saturating_sub(self.clock_offset)));
        }
    }

    fn absorb(&mut self, cx: &mut Cx, acts: Vec<DAction>) -> DispelOutput {
        let mut o = DispelOutput::default();
        for a in acts {
            match a {
                DAction::Send { .. } if self.replaying => {}
                DAction::Send { to, msg } => {
                    // A fetch or its answer: wanted now, by one peer.
                    let w = wire(std::slice::from_ref(&msg));
                    self.meter.record(cx.now, wire_bytes(&w));
                    cx.out.send(to, w);
                }
                DAction::Broadcast { msg } => {
                    if self.replaying {
                    } else if msg.is_small() {
                        // Counted when held: the idle-link test (Dispel
                        // §4.2) must see a burst's bytes within the burst.
                        let peers = self.cfg.n().saturating_sub(1) as u64;
                        let bytes = chorus_core::encoded_len(&msg) as u64;
                        self.meter.record(cx.now, bytes.saturating_mul(peers));
                        self.coalescer.pending.push(msg.clone());
                        if self.coalescer.pending.len() >= self.bundle_cap {
                            self.flush(cx);
                        }
                    } else {
                        // A batch goes at once, after what waited (so peers
                        // see our messages in the order we sent them).
                        self.flush(cx);
                        self.send_bundle(cx, std::slice::from_ref(&msg));
                    }
                    let kept = self.st.sent.entry(msg.epoch()).or_default();
                    if kept.len() < MAX_KEPT_PER_EPOCH {
                        kept.push(msg);
                    } else {
                        cx.counters.reject("dbft-retransmit-buffer-full");
                    }
                }
                DAction::SetTimer { id, at } => {
                    self.st.timers.insert((at, id));
                }
                DAction::Join { epoch } => o.joins.push(epoch),
                DAction::SlotDecided { .. } => {}
                DAction::EpochDecided { epoch, .. } => {
                    let r = self.st.engine.epoch(epoch).map_or(0, |s| {
                        (0..self.cfg.n())
                            .filter_map(|k| s.binary(k).round_decided())
                            .max()
                            .unwrap_or(0)
                    });
                    self.st.rounds.insert(epoch, r);
                }
                DAction::EpochReady { epoch, batches } => self.on_ready(epoch, batches, &mut o),
            }
        }
        if !self.coalescer.burst {
            self.flush(cx);
        }
        self.rearm(cx);
        o
    }

    /// The driver handles events in bursts and calls `end_of_burst` after
    /// each (`Replica::set_burst_mode`); until then small messages wait.
    pub fn set_burst_mode(&mut self, on: bool) {
        debug_assert!(
            on || self.coalescer.pending.is_empty(),
            "end the burst before leaving burst mode"
        );
        self.coalescer.burst = on;
    }

    /// Small messages wait for `end_of_burst`.
    pub fn holds_messages(&self) -> bool {
        !self.coalescer.pending.is_empty()
    }

    /// The driver's burst is over: send what waits.
    pub fn end_of_burst(&mut self, cx: &mut Cx) {
        self.flush(cx);
    }

    /// Every waiting small message to every peer, in bundles.
    fn flush(&mut self, cx: &mut Cx) {
        if self.coalescer.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.coalescer.pending);
        for chunk in pending.chunks(self.bundle_cap) {
            // Metered when held (`absorb`).
            cx.out.broadcast(wire(chunk));
        }
    }

    fn send_bundle(&mut self, cx: &mut Cx, msgs: &[DbftMsg]) {
        let w = wire(msgs);
        let peers = self.cfg.n().saturating_sub(1) as u64;
        self.meter.record(cx.now, wire_bytes(&w).saturating_mul(peers));
        cx.out.broadcast(w);
    }

    /// Every selected batch is here: every lane's slot `epoch` is decided.
    fn on_ready(&mut self, epoch: Epoch, batches: Vec<(ReplicaId, Arc<Batch>)>, o: &mut DispelOutput) {
        if epoch < self.st.next_epoch {
            return;
        }
        self.push_decided(epoch, batches, o);
        self.st.ready.insert(epoch);
        while self.st.ready.remove(&self.st.next_epoch) {
            self.st.next_epoch += 1;
        }
    }

    fn push_decided(&self, epoch: Epoch, batches: Vec<(ReplicaId, Arc<Batch>)>, o: &mut DispelOutput) {
        let noop = Arc::new(Batch::noop());
        let mut by_lane: Vec<Arc<Batch>> = vec![noop; self.cfg.n()];
        // The engine's bits, not the batches: identical proposals (every
        // empty one) are kept once.
        let mut bits = vec![ProposerBit::default(); self.cfg.n()];
        if let Some(mask) = self.st.engine.epoch(epoch).and_then(|s| s.bitmask()) {
            for (bit, m) in bits.iter_mut().zip(mask) {
                bit.selected = m;
            }
        }
        for (p, b) in batches {
            if let Some(bit) = bits.get_mut(p.index()) {
                bit.selected = true;
                bit.served_own_clients = b.requests.iter().any(|r| self.cfg.owner_lane(r.client).0 == p.0);
            }
            if let Some(at) = by_lane.get_mut(p.index()) {
                *at = b;
            }
        }
        o.bits.push(bits);
        for (l, b) in by_lane.into_iter().enumerate() {
            o.decided.push((
                Cell {
                    lane: LaneId(l as u32),
                    slot: Slot(epoch),
                },
                b,
            ));
        }
    }

    pub fn status(&self) -> DispelStatus {
        let n = self.cfg.n();
        let epochs = (self.st.engine.low()..self.st.engine.next_spawn().max(self.st.engine.low()))
            .filter_map(|e| {
                let s = self.st.engine.epoch(e)?;
                Some(EpochInfo {
                    epoch: e,
                    joined: s.joined(),
                    bits_decided: (0..n).filter(|&k| s.binary(k).decided().is_some()).count(),
                    max_round: (0..n).map(|k| s.binary(k).round()).max().unwrap_or(0),
                })
            })
            .filter(|i| i.epoch >= self.st.next_epoch)
            .collect();
        DispelStatus {
            next_epoch: self.st.next_epoch,
            next_spawn: self.st.engine.next_spawn(),
            low: self.st.engine.low(),
            pipeline_depth: self.st.engine.next_spawn().saturating_sub(self.st.next_epoch),
            epochs,
            dropped: self
                .st
                .engine
                .counters()
                .dropped
                .iter()
                .map(|(k, v)| (format!("{k:?}"), *v))
                .collect(),
            decided_rounds: self.st.rounds.iter().map(|(e, r)| (*e, *r)).collect(),
        }
    }
}
