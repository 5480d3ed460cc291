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

pub mod pipeline;

use crate::counters::Cx;
use crate::io::{PersistRecord, TimerId};
use crate::verify::{RequestVerifier, VerifiedHint};
use bytes::Bytes;
use chorus_core::{
    Batch, Cell, ClusterConfig, DbftWire, Identity, LaneId, Limits, Millis, ReplicaId, ReplicaMsg, Seq, Slot,
    Status, View,
};
use chorus_dbft::{Action as DAction, Dbft, DbftConfig, DbftMsg, Epoch, Event as DEvent, TimerId as DTimer};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Broadcasts kept per epoch for retransmission (P14: bounded).
pub const MAX_KEPT_PER_EPOCH: usize = 4_096;
/// Epochs re-sent to one stalled peer per status message.
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

#[derive(Clone, Debug)]
pub struct DispelCore {
    cfg: Arc<ClusterConfig>,
    me: ReplicaId,
    engine: Dbft,
    limits: Limits,
    verifier: RequestVerifier,
    /// The engine's timers, by deadline; the driver holds one (`TimerId::Dispel`).
    timers: BTreeSet<(Millis, DTimer)>,
    armed: Option<Millis>,
    /// Our broadcasts of live epochs, for retransmission.
    sent: BTreeMap<Epoch, Vec<DbftMsg>>,
    /// Highest epoch a `DispelEpoch` record covers.
    persisted_high: Option<Epoch>,
    /// Per peer: the first epoch it has not delivered, and whether that did
    /// not move since its previous status (stalled).
    peers: Vec<(Epoch, bool)>,
    /// First epoch not yet handed to the merger.
    next_epoch: Epoch,
    /// Highest round per decided epoch (status).
    rounds: BTreeMap<Epoch, u32>,
    /// Epochs output above `next_epoch` (they may complete out of order).
    ready: BTreeSet<Epoch>,
}

fn wire(msg: &DbftMsg) -> ReplicaMsg {
    ReplicaMsg::Dbft(DbftWire {
        bytes: Bytes::from(chorus_core::encode(msg)),
    })
}

impl DispelCore {
    pub fn new(cfg: Arc<ClusterConfig>, me: ReplicaId, identity: Identity) -> DispelCore {
        let dcfg = DbftConfig::from_cluster(&cfg);
        let limits = dcfg.limits();
        let n = cfg.n();
        DispelCore {
            engine: Dbft::new(dcfg, me),
            limits,
            verifier: RequestVerifier::new(cfg.clone(), me, identity),
            timers: BTreeSet::new(),
            armed: None,
            sent: BTreeMap::new(),
            persisted_high: None,
            peers: vec![(0, false); n],
            next_epoch: 0,
            rounds: BTreeMap::new(),
            ready: BTreeSet::new(),
            cfg,
            me,
        }
    }

    pub fn engine(&self) -> &Dbft {
        &self.engine
    }

    pub fn next_epoch(&self) -> Epoch {
        self.next_epoch
    }

    /// The epoch this replica would spawn next, if it may propose in it.
    pub fn spawnable(&self) -> Option<Epoch> {
        let e = self.engine.next_spawn();
        let proposed = self.engine.epoch(e).is_some_and(|s| s.proposed());
        let in_window = e >= self.engine.low() && e - self.engine.low() < self.engine.config().window_epochs;
        (!proposed && in_window).then_some(e)
    }

    /// Our own proposals not yet RB-delivered here: the outgoing-network
    /// proxy of the pipeline (a delivered INIT reached an echo quorum).
    pub fn own_undelivered(&self) -> u64 {
        let me = self.me.index();
        let from = self.next_epoch.max(self.engine.low());
        (from..self.engine.next_spawn())
            .filter(|e| {
                self.engine
                    .epoch(*e)
                    .is_some_and(|s| s.proposed() && s.rb(me).delivered().is_none())
            })
            .count() as u64
    }

    pub fn cell(&self, epoch: Epoch) -> Cell {
        Cell {
            lane: LaneId(self.me.0),
            slot: Slot(epoch),
        }
    }

    /// A DBFT message from an authenticated peer.
    pub fn on_message(
        &mut self,
        cx: &mut Cx,
        from: ReplicaId,
        w: &DbftWire,
        hint: &dyn VerifiedHint,
    ) -> DispelOutput {
        let msg = match chorus_core::decode::<DbftMsg>(&w.bytes, &self.limits) {
            Ok(m) => m,
            Err(_) => {
                cx.reject("dbft-undecodable");
                return DispelOutput::default();
            }
        };
        // A correct replica echoes only batches whose requests it verified
        // (as a PBFT backup checks a pre-prepare): a delivered batch then had
        // an echo quorum, so some correct replica vouched for every request.
        if let DbftMsg::RbInit { batch, .. } = &msg {
            for r in &batch.requests {
                if !hint.already_verified(r) && self.verifier.check(r).is_err() {
                    cx.reject("dbft-init-bad-request");
                    return DispelOutput::default();
                }
            }
        }
        let acts = self.engine.handle(cx.now, DEvent::Message { from, msg });
        self.absorb(cx, acts)
    }

    pub fn on_timer(&mut self, cx: &mut Cx) -> DispelOutput {
        if self.armed.is_some_and(|a| a <= cx.now) {
            self.armed = None;
        }
        let mut all = DispelOutput::default();
        while let Some(&(at, id)) = self.timers.first() {
            if at > cx.now {
                break;
            }
            self.timers.pop_first();
            let acts = self.engine.handle(cx.now, DEvent::Timer(id));
            let o = self.absorb(cx, acts);
            all.decided.extend(o.decided);
            all.joins.extend(o.joins);
        }
        self.rearm(cx);
        all
    }

    /// RB-broadcast our batch for `epoch` (spawned, or answering a join).
    pub fn propose(&mut self, cx: &mut Cx, epoch: Epoch, batch: Batch) -> DispelOutput {
        let acts = self.engine.handle(cx.now, DEvent::Propose { epoch, batch });
        self.absorb(cx, acts)
    }

    /// Epochs below `below` are covered by the stable checkpoint (or were
    /// given up at recovery): free them (spec §5.5).
    pub fn collect(&mut self, cx: &mut Cx, below: Epoch) -> DispelOutput {
        if below <= self.engine.low() {
            return DispelOutput::default();
        }
        let acts = self.engine.handle(cx.now, DEvent::Collect { below });
        self.sent = self.sent.split_off(&below);
        self.rounds = self.rounds.split_off(&below);
        self.next_epoch = self.next_epoch.max(below);
        self.ready = self.ready.split_off(&self.next_epoch);
        while self.ready.remove(&self.next_epoch) {
            self.next_epoch += 1;
        }
        self.absorb(cx, acts)
    }

    /// Recovery: epochs up to `high` may hold votes we no longer know.
    pub fn restore_high(&mut self, high: Epoch) {
        self.persisted_high = self.persisted_high.max(Some(high));
    }

    pub fn restored_high(&self) -> Option<Epoch> {
        self.persisted_high
    }

    /// The status every replica broadcasts each interval: our first
    /// undelivered epoch (peers retransmit to us when it stalls) and our
    /// stable checkpoint (state transfer). Then retransmit to stalled peers.
    pub fn on_status_tick(&mut self, cx: &mut Cx, stable_seq: Seq) {
        cx.out.broadcast(ReplicaMsg::Status(Status {
            lane: LaneId(0),
            view: View(0),
            next_undecided: Slot(self.next_epoch),
            stable_seq,
            suspects: false,
        }));
        for p in 0..self.peers.len() {
            let (at, stalled) = self.peers[p];
            if p == self.me.index() || !stalled {
                continue;
            }
            let to = ReplicaId(p as u32);
            for (_, msgs) in self.sent.range(at..at.saturating_add(RETRANSMIT_EPOCHS)) {
                for m in msgs {
                    cx.out.send(to, wire(m));
                    cx.counters.retransmissions += 1;
                }
            }
        }
    }

    pub fn on_peer_status(&mut self, from: ReplicaId, next_epoch: Epoch) {
        if let Some(p) = self.peers.get_mut(from.index()) {
            *p = (next_epoch, next_epoch == p.0);
        }
    }

    fn rearm(&mut self, cx: &mut Cx) {
        let Some(&(at, _)) = self.timers.first() else {
            return;
        };
        if self.armed.is_none_or(|a| at < a) {
            self.armed = Some(at);
            cx.out.set_timer(TimerId::Dispel, at);
        }
    }

    fn absorb(&mut self, cx: &mut Cx, acts: Vec<DAction>) -> DispelOutput {
        // Persist before send (io.rs contract): the mark covers every epoch
        // this batch of actions speaks in.
        let high = acts
            .iter()
            .filter_map(|a| match a {
                DAction::Send { msg, .. } | DAction::Broadcast { msg } => Some(msg.epoch()),
                _ => None,
            })
            .max();
        if let Some(h) = high {
            if self.persisted_high.is_none_or(|p| h > p) {
                cx.out.persist(PersistRecord::DispelEpoch { epoch: h });
                self.persisted_high = Some(h);
            }
        }
        let mut o = DispelOutput::default();
        for a in acts {
            match a {
                DAction::Send { to, msg } => cx.out.send(to, wire(&msg)),
                DAction::Broadcast { msg } => {
                    cx.out.broadcast(wire(&msg));
                    let kept = self.sent.entry(msg.epoch()).or_default();
                    if kept.len() < MAX_KEPT_PER_EPOCH {
                        kept.push(msg);
                    } else {
                        cx.counters.reject("dbft-retransmit-buffer-full");
                    }
                }
                DAction::SetTimer { id, at } => {
                    self.timers.insert((at, id));
                }
                DAction::Join { epoch } => o.joins.push(epoch),
                DAction::SlotDecided { .. } => {}
                DAction::EpochDecided { epoch, .. } => {
                    let r = self.engine.epoch(epoch).map_or(0, |s| {
                        (0..self.cfg.n())
                            .filter_map(|k| s.binary(k).round_decided())
                            .max()
                            .unwrap_or(0)
                    });
                    self.rounds.insert(epoch, r);
                }
                DAction::EpochReady { epoch, batches } => self.on_ready(epoch, batches, &mut o),
            }
        }
        self.rearm(cx);
        o
    }

    /// Every selected batch is here: every lane's slot `epoch` is decided.
    fn on_ready(&mut self, epoch: Epoch, batches: Vec<(ReplicaId, Arc<Batch>)>, o: &mut DispelOutput) {
        if epoch < self.next_epoch {
            return;
        }
        let noop = Arc::new(Batch::noop());
        let mut by_lane: Vec<Arc<Batch>> = vec![noop; self.cfg.n()];
        for (p, b) in batches {
            if let Some(at) = by_lane.get_mut(p.index()) {
                *at = b;
            }
        }
        for (l, b) in by_lane.into_iter().enumerate() {
            o.decided.push((
                Cell {
                    lane: LaneId(l as u32),
                    slot: Slot(epoch),
                },
                b,
            ));
        }
        self.ready.insert(epoch);
        while self.ready.remove(&self.next_epoch) {
            self.next_epoch += 1;
        }
    }

    pub fn status(&self) -> DispelStatus {
        let n = self.cfg.n();
        let epochs = (self.engine.low()..self.engine.next_spawn().max(self.engine.low()))
            .filter_map(|e| {
                let s = self.engine.epoch(e)?;
                Some(EpochInfo {
                    epoch: e,
                    joined: s.joined(),
                    bits_decided: (0..n).filter(|&k| s.binary(k).decided().is_some()).count(),
                    max_round: (0..n).map(|k| s.binary(k).round()).max().unwrap_or(0),
                })
            })
            .filter(|i| i.epoch >= self.next_epoch)
            .collect();
        DispelStatus {
            next_epoch: self.next_epoch,
            next_spawn: self.engine.next_spawn(),
            low: self.engine.low(),
            pipeline_depth: self.engine.next_spawn().saturating_sub(self.next_epoch),
            epochs,
            dropped: self
                .engine
                .counters()
                .dropped
                .iter()
                .map(|(k, v)| (format!("{k:?}"), *v))
                .collect(),
            decided_rounds: self.rounds.iter().map(|(e, r)| (*e, *r)).collect(),
        }
    }
}
