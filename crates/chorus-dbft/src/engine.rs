//! The sans-IO DBFT engine of one replica: routes messages to epochs, runs
//! the reduction (\[TR\] Fig. 3), the join rule (Dispel §4.3, spec §5.1), batch
//! fetching (§5.3) and the epoch window (P14). Deterministic: the only inputs
//! are events and the time passed with them.

use crate::binary::{BinOut, Input, TimerKind};
use crate::config::DbftConfig;
use crate::counters::{Counters, DropReason};
use crate::epoch::EpochState;
use crate::msg::{DbftMsg, Epoch, InstanceId, Round};
use crate::rb::RbOut;
use chorus_core::{Batch, Digest, Millis, ReplicaId, Validate};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `from` is the authenticated link's sender, never a payload field (P11).
    Message {
        from: ReplicaId,
        msg: DbftMsg,
    },
    Timer(TimerId),
    /// RB-broadcast this replica's batch for `epoch` (pipeline policy, or the
    /// answer to `Action::Join`). Possibly empty (P16).
    Propose {
        epoch: Epoch,
        batch: Batch,
    },
    /// Epochs below `below` are applied and past the fetch horizon: free them (§5.5).
    Collect {
        below: Epoch,
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub enum TimerId {
    Round {
        inst: InstanceId,
        round: Round,
        which: TimerKind,
    },
    Fetch {
        epoch: Epoch,
        proposer: ReplicaId,
    },
    /// The zero-phase grace of `epoch` is over (`start_zero_phase`).
    ZeroGrace {
        epoch: Epoch,
    },
}

/// What one proposer's slot of an epoch decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotDecision {
    /// The binary consensus decided 0.
    Noop,
    /// Decided 1: this digest was RB-delivered; `batch` is None while the
    /// bytes are being fetched (they come with `Action::EpochReady`).
    Batch {
        digest: Digest,
        batch: Option<Arc<Batch>>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Send {
        to: ReplicaId,
        msg: DbftMsg,
    },
    /// To every replica except this one (it has already processed its copy).
    Broadcast {
        msg: DbftMsg,
    },
    /// Fire `Event::Timer(id)` at `at`. Stale firings are ignored.
    SetTimer {
        id: TimerId,
        at: Millis,
    },
    /// The join rule admitted `epoch`, the epoch this replica would have
    /// spawned next: answer with `Event::Propose` carrying the pool's batch
    /// (Dispel Alg. 2 lines 13–15). For other joined epochs the engine proposes
    /// an empty batch itself (line 16).
    Join {
        epoch: Epoch,
    },
    /// Emitted once per (epoch, proposer), when its bit is known (and, for 1,
    /// its digest RB-delivered).
    SlotDecided {
        epoch: Epoch,
        proposer: ReplicaId,
        decision: SlotDecision,
    },
    /// All n bits known and every selected digest delivered. `selected` is
    /// sorted by digest (then proposer).
    EpochDecided {
        epoch: Epoch,
        bitmask: Vec<bool>,
        selected: Vec<(ReplicaId, Digest)>,
    },
    /// Every selected batch's bytes are here: the epoch's output, sorted by
    /// digest, identical digests kept once (spec §5.2).
    EpochReady {
        epoch: Epoch,
        batches: Vec<(ReplicaId, Arc<Batch>)>,
    },
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Dbft {
    cfg: DbftConfig,
    me: ReplicaId,
    /// Lowest epoch not collected; the window is [low, low + window_epochs).
    low: Epoch,
    epochs: BTreeMap<Epoch, EpochState>,
    max_joined: Option<Epoch>,
    counters: Counters,
    now: Millis,
    /// This replica's own broadcasts, processed as messages from itself.
    /// Empty between `handle` calls, so never part of a snapshot.
    #[serde(skip)]
    queue: VecDeque<DbftMsg>,
    #[serde(skip)]
    out: Vec<Action>,
}

impl Dbft {
    pub fn new(cfg: DbftConfig, me: ReplicaId) -> Dbft {
        assert!(me.index() < cfg.n, "replica id out of range");
        assert!(cfg.t * 3 < cfg.n, "DBFT needs t < n/3");
        assert!(cfg.window_epochs >= 1);
        Dbft {
            cfg,
            me,
            low: 0,
            epochs: BTreeMap::new(),
            max_joined: None,
            counters: Counters::default(),
            now: Millis(0),
            queue: VecDeque::new(),
            out: Vec::new(),
        }
    }

    pub fn config(&self) -> &DbftConfig {
        &self.cfg
    }

    /// Take new parameters from a changed cluster file (see
    /// `DbftConfig::with_cluster_params`). Membership, thresholds and the
    /// variant cannot change under a running engine: false, nothing taken.
    /// The window shrinks no further than the newest epoch held (its
    /// messages would be refused as too far while we still need them); a
    /// later call, once the held epochs fit, shrinks it the rest of the way.
    pub fn reconfigure(&mut self, mut cfg: DbftConfig) -> bool {
        if cfg.n != self.cfg.n || cfg.t != self.cfg.t || cfg.variant != self.cfg.variant {
            return false;
        }
        let held = self
            .epochs
            .keys()
            .next_back()
            .map_or(0, |e| e.saturating_sub(self.low) + 1);
        cfg.window_epochs = cfg.window_epochs.max(held).max(1);
        self.cfg = cfg;
        true
    }
    pub fn me(&self) -> ReplicaId {
        self.me
    }
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
    /// The latest time an event brought (the engine's clock).
    pub fn now(&self) -> Millis {
        self.now
    }
    pub fn low(&self) -> Epoch {
        self.low
    }
    pub fn epoch(&self, e: Epoch) -> Option<&EpochState> {
        self.epochs.get(&e)
    }
    pub fn epochs_held(&self) -> usize {
        self.epochs.len()
    }
    /// The epoch this replica would spawn next (Dispel Alg. 2: one above the
    /// newest epoch it takes part in).
    pub fn next_spawn(&self) -> Epoch {
        self.max_joined.map_or(self.low, |m| (m + 1).max(self.low))
    }

    pub fn handle(&mut self, now: Millis, ev: Event) -> Vec<Action> {
        self.now = self.now.max(now);
        match ev {
            Event::Message { from, msg } => self.on_message(from.index(), msg),
            Event::Timer(id) => self.on_timer(id),
            Event::Propose { epoch, batch } => self.propose(epoch, batch),
            Event::Collect { below } => self.collect(below),
        }
        while let Some(msg) = self.queue.pop_front() {
            self.on_message(self.me.index(), msg);
        }
        std::mem::take(&mut self.out)
    }

    fn broadcast(&mut self, msg: DbftMsg) {
        self.out.push(Action::Broadcast { msg: msg.clone() });
        self.queue.push_back(msg);
    }

    fn in_window(&self, e: Epoch) -> Result<(), DropReason> {
        if e < self.low {
            Err(DropReason::EpochTooOld)
        } else if e - self.low >= self.cfg.window_epochs {
            Err(DropReason::EpochTooFar)
        } else {
            Ok(())
        }
    }

    fn state(&mut self, e: Epoch) -> &mut EpochState {
        debug_assert!(self.in_window(e).is_ok());
        let (cfg, me) = (&self.cfg, self.me.index());
        self.epochs.entry(e).or_insert_with(|| EpochState::new(cfg, me))
    }

    fn on_message(&mut self, from: usize, msg: DbftMsg) {
        if let Err(why) = self.check_message(from, &msg) {
            self.counters.drop(why);
            tracing::debug!(from, kind = msg.kind(), ?why, "dbft: dropped");
            return;
        }
        let e = msg.epoch();
        let me = self.me.index();
        let st = self.state(e);
        // The join rule counts OTHER replicas: our own echo of a Byzantine
        // INIT must not make t senders look like t+1.
        if from != me {
            st.senders[from] = true;
        }
        let res = match msg {
            DbftMsg::RbInit { epoch, batch } => self.on_init(epoch, from, batch),
            DbftMsg::RbEcho {
                epoch,
                proposer,
                digest,
            } => {
                let mut out = vec![];
                let cfg = &self.cfg;
                let r = self.epochs.get_mut(&epoch).expect("created above").rb[proposer.index()]
                    .on_echo(cfg, from, digest, &mut out);
                self.rb_outs(epoch, proposer.index(), out);
                r
            }
            DbftMsg::RbReady {
                epoch,
                proposer,
                digest,
            } => {
                let mut out = vec![];
                let cfg = &self.cfg;
                let r = self.epochs.get_mut(&epoch).expect("created above").rb[proposer.index()]
                    .on_ready(cfg, from, digest, &mut out);
                self.rb_outs(epoch, proposer.index(), out);
                r
            }
            DbftMsg::BatchRequest {
                epoch,
                proposer,
                digest,
            } => self.on_batch_request(epoch, from, proposer, digest),
            DbftMsg::BatchResponse {
                epoch,
                proposer,
                batch,
            } => self.on_batch_response(epoch, proposer, batch),
            DbftMsg::Bin { inst, msg } => {
                let mut out = vec![];
                let cfg = &self.cfg;
                let r = self.epochs.get_mut(&inst.epoch).expect("created above").bin[inst.slot.index()]
                    .on_msg(cfg, from, &msg, &mut out);
                self.bin_outs(inst, out);
                r
            }
        };
        if let Err(why) = res {
            self.counters.drop(why);
        }
        self.check_join(e);
    }

    fn check_message(&self, from: usize, msg: &DbftMsg) -> Result<(), DropReason> {
        if from >= self.cfg.n {
            return Err(DropReason::BadIndex);
        }
        self.in_window(msg.epoch())?;
        msg.check(&self.cfg)
    }

    fn on_init(&mut self, epoch: Epoch, from: usize, batch: Batch) -> Result<(), DropReason> {
        // P11: the proposer IS the authenticated sender; there is no field to forge.
        let digest = batch.digest();
        let mut out = vec![];
        let cfg = &self.cfg;
        let st = self.epochs.get_mut(&epoch).expect("created by caller");
        let keep = st.rb[from].on_init(cfg, digest, &mut out)?;
        if keep {
            st.store.entry(digest).or_insert_with(|| Arc::new(batch));
            // A late INIT may carry bytes we were fetching.
            if st.fetching.get(&from) == Some(&digest) {
                st.fetching.remove(&from);
            }
        }
        self.rb_outs(epoch, from, out);
        self.try_output(epoch);
        Ok(())
    }

    fn rb_outs(&mut self, epoch: Epoch, proposer: usize, outs: Vec<RbOut>) {
        let p = ReplicaId(proposer as u32);
        for o in outs {
            match o {
                RbOut::Echo(digest) => self.broadcast(DbftMsg::RbEcho {
                    epoch,
                    proposer: p,
                    digest,
                }),
                RbOut::Ready(digest) => self.broadcast(DbftMsg::RbReady {
                    epoch,
                    proposer: p,
                    digest,
                }),
                RbOut::Deliver(digest) => self.on_rb_deliver(epoch, proposer, digest),
            }
        }
    }

    /// \[TR\] Fig. 3 `on rb_deliver`. Validity choice (a) of §5.4: every
    /// delivered digest is valid (correct replicas only echo INITs within the
    /// batch limits, a pure function of the bytes, P9); requests are filtered
    /// deterministically at execution.
    fn on_rb_deliver(&mut self, epoch: Epoch, k: usize, _digest: Digest) {
        let inst = InstanceId {
            epoch,
            slot: ReplicaId(k as u32),
        };
        let mut out = vec![];
        let cfg = &self.cfg;
        let st = self.epochs.get_mut(&epoch).expect("delivering epoch exists");
        // Even if bin[k] was already invoked with 0 (P8, scenario 7).
        st.bin[k].rb_delivered(cfg, &mut out);
        // Before the zero phase, or while its grace keeps this instance uninvoked.
        if st.joined && !st.bin[k].invoked() {
            st.bin[k].propose(cfg, Input::OneViaRb, &mut out);
        }
        self.bin_outs(inst, out);
        self.try_output(epoch);
    }

    fn bin_outs(&mut self, inst: InstanceId, outs: Vec<BinOut>) {
        for o in outs {
            match o {
                BinOut::Broadcast(msg) => self.broadcast(DbftMsg::Bin { inst, msg }),
                BinOut::SetTimer {
                    round,
                    which,
                    after_ms,
                } => self.out.push(Action::SetTimer {
                    id: TimerId::Round { inst, round, which },
                    at: self.now.plus(after_ms),
                }),
                BinOut::Decide(v) => self.on_bin_decided(inst, v),
            }
        }
    }

    /// \[TR\] Fig. 3 `on bin[k] decides`: the first 1 starts the zero phase.
    fn on_bin_decided(&mut self, inst: InstanceId, v: bool) {
        let (epoch, k) = (inst.epoch, inst.slot.index());
        let st = self.epochs.get_mut(&epoch).expect("deciding epoch exists");
        debug_assert!(st.bin_decisions[k].is_none(), "P15: one decision per instance");
        st.bin_decisions[k] = Some(v);
        if v {
            st.one_decided = true;
        }
        if st.joined && st.one_decided {
            self.start_zero_phase(epoch);
        }
        self.try_output(epoch);
    }

    /// P8: 0 is input only once some instance decided 1, and then to every
    /// instance not yet invoked, so all n run.
    ///
    /// Grace (not in \[TR\] Fig. 3): a replica that joined the epoch on t+1
    /// senders sends its INIT about two message delays after the first
    /// proposer, so its RB delivers about one delay AFTER the first instance
    /// decides 1. Input 0 at once and its instance starts split (some
    /// replicas 0, some 1 via RB): it needs rounds 2 and 3, whose timers
    /// (`timeout(2)`, `timeout(3)`, two each) made every epoch take ~300 ms
    /// and capped `--mode dispel` at a few hundred ops/s. So an instance
    /// whose broadcast is under way here waits up to `zero_phase_grace_ms`
    /// for its delivery (then input 1 via RB, the fast path); one we saw
    /// nothing from is input 0 at once, so a silent proposer costs nothing
    /// more. Safety does not depend on inputs' timing; liveness only needs
    /// every instance invoked eventually, which the grace timer ensures.
    fn start_zero_phase(&mut self, epoch: Epoch) {
        let cfg = &self.cfg;
        let st = self.epochs.get_mut(&epoch).expect("epoch exists");
        debug_assert!(st.one_decided && st.joined);
        let mut all = vec![];
        let mut waiting = false;
        for k in 0..cfg.n {
            if st.bin[k].invoked() {
                continue;
            }
            let input = if st.rb[k].delivered().is_some() {
                Input::OneViaRb
            } else if !st.grace_over && cfg.zero_phase_grace_ms > 0 && st.rb[k].under_way() {
                waiting = true;
                continue;
            } else {
                Input::Zero
            };
            let mut out = vec![];
            st.bin[k].propose(cfg, input, &mut out);
            all.push((k, out));
        }
        if waiting && !st.grace_set {
            st.grace_set = true;
            self.out.push(Action::SetTimer {
                id: TimerId::ZeroGrace { epoch },
                at: self.now.plus(cfg.zero_phase_grace_ms),
            });
        }
        for (k, out) in all {
            self.bin_outs(
                InstanceId {
                    epoch,
                    slot: ReplicaId(k as u32),
                },
                out,
            );
        }
    }

    fn join(&mut self, epoch: Epoch) {
        let st = self.state(epoch);
        if st.joined {
            return;
        }
        st.joined = true;
        self.max_joined = Some(self.max_joined.map_or(epoch, |m| m.max(epoch)));
        let cfg = &self.cfg;
        let st = self.epochs.get_mut(&epoch).expect("created above");
        let mut all = vec![];
        if !st.one_decided {
            for k in 0..cfg.n {
                if st.rb[k].delivered().is_some() && !st.bin[k].invoked() {
                    let mut out = vec![];
                    st.bin[k].propose(cfg, Input::OneViaRb, &mut out);
                    all.push((k, out));
                }
            }
        }
        for (k, out) in all {
            self.bin_outs(
                InstanceId {
                    epoch,
                    slot: ReplicaId(k as u32),
                },
                out,
            );
        }
        if self.epochs[&epoch].one_decided {
            self.start_zero_phase(epoch);
        }
    }

    fn prev_decided(&self, e: Epoch) -> bool {
        e <= self.low || self.epochs.get(&(e - 1)).is_some_and(|s| s.bitmask().is_some())
    }

    /// Join rule (Dispel §4.3 / Alg. 2 lines 11–16, spec §5.1): join an epoch
    /// seen from t+1 distinct senders (one is correct: Byzantine replicas alone
    /// cannot enlist us) once the previous epoch is decided (no far-future
    /// starvation). The epoch we would have spawned gets our pool, others an
    /// empty batch.
    fn check_join(&mut self, e: Epoch) {
        let Some(st) = self.epochs.get(&e) else { return };
        if st.joined || st.sender_count() < self.cfg.small_quorum() || !self.prev_decided(e) {
            return;
        }
        if e == self.next_spawn() {
            self.join(e);
            self.out.push(Action::Join { epoch: e });
        } else {
            self.propose(e, Batch::noop());
        }
    }

    fn propose(&mut self, epoch: Epoch, batch: Batch) {
        let ok = self.in_window(epoch).is_ok()
            && !self.epochs.get(&epoch).is_some_and(|s| s.proposed)
            && batch.validate(&self.cfg.limits()).is_ok();
        if !ok {
            self.counters.drop(DropReason::BadProposal);
            return;
        }
        self.state(epoch).proposed = true;
        self.join(epoch);
        self.broadcast(DbftMsg::RbInit { epoch, batch });
    }

    /// Emit what became known: per-slot decisions, the epoch's bitmask, and
    /// its batches once every selected one's bytes are here (fetching the rest).
    fn try_output(&mut self, epoch: Epoch) {
        let n = self.cfg.n;
        let Some(st) = self.epochs.get_mut(&epoch) else {
            return;
        };
        let mut to_fetch = vec![];
        for k in 0..n {
            if st.slot_emitted[k] {
                continue;
            }
            let decision = match st.bin_decisions[k] {
                None => continue,
                Some(false) => SlotDecision::Noop,
                Some(true) => {
                    // Bit 1 ⇒ a correct replica RB-delivered it; totality brings it here.
                    let Some(digest) = st.rb[k].delivered() else {
                        continue;
                    };
                    let batch = st.store.get(&digest).cloned();
                    if batch.is_none() {
                        to_fetch.push((k, digest));
                    }
                    SlotDecision::Batch { digest, batch }
                }
            };
            st.slot_emitted[k] = true;
            self.out.push(Action::SlotDecided {
                epoch,
                proposer: ReplicaId(k as u32),
                decision,
            });
        }
        let mut newly_decided = false;
        if !st.decided_emitted {
            if let (Some(bitmask), Some(selected)) = (st.bitmask(), st.selected()) {
                st.decided_emitted = true;
                newly_decided = true;
                self.out.push(Action::EpochDecided {
                    epoch,
                    bitmask,
                    selected,
                });
            }
        }
        if st.decided_emitted && !st.ready_emitted {
            let selected = st.selected().expect("decided");
            if selected.iter().all(|(_, d)| st.store.contains_key(d)) {
                st.ready_emitted = true;
                let mut batches: Vec<(ReplicaId, Arc<Batch>)> = Vec::with_capacity(selected.len());
                let mut last: Option<Digest> = None;
                for (p, d) in selected {
                    if last != Some(d) {
                        batches.push((p, st.store[&d].clone()));
                        last = Some(d);
                    }
                }
                self.out.push(Action::EpochReady { epoch, batches });
            }
        }
        for (k, d) in to_fetch {
            self.start_fetch(epoch, k, d);
        }
        if newly_decided || self.epochs.get(&epoch).is_some_and(|s| s.bitmask().is_some()) {
            self.check_join(epoch.saturating_add(1));
        }
    }

    /// §5.3: ask those seen echoing/readying the digest (≥ t+1 correct hold it),
    /// then everyone, one retry period at a time.
    fn start_fetch(&mut self, epoch: Epoch, k: usize, d: Digest) {
        let me = self.me.index();
        let st = self.epochs.get_mut(&epoch).expect("fetching epoch exists");
        if st.fetching.insert(k, d).is_some() {
            return;
        }
        let mut targets: Vec<usize> = st.rb[k].holders(&d).into_iter().filter(|&i| i != me).collect();
        if targets.is_empty() {
            targets = (0..self.cfg.n).filter(|&i| i != me).collect();
        }
        self.send_fetch(epoch, k, d, &targets);
    }

    fn send_fetch(&mut self, epoch: Epoch, k: usize, digest: Digest, targets: &[usize]) {
        let proposer = ReplicaId(k as u32);
        for &to in targets {
            self.out.push(Action::Send {
                to: ReplicaId(to as u32),
                msg: DbftMsg::BatchRequest {
                    epoch,
                    proposer,
                    digest,
                },
            });
        }
        self.out.push(Action::SetTimer {
            id: TimerId::Fetch { epoch, proposer },
            at: self.now.plus(self.cfg.fetch_retry_ms),
        });
    }

    fn on_batch_request(
        &mut self,
        epoch: Epoch,
        from: usize,
        proposer: ReplicaId,
        digest: Digest,
    ) -> Result<(), DropReason> {
        if from == self.me.index() {
            return Ok(());
        }
        let budget = self.cfg.max_fetch_replies_per_peer;
        let st = self.epochs.get_mut(&epoch).expect("created by caller");
        let Some(batch) = st.store.get(&digest) else {
            return Err(DropReason::UnknownBatch);
        };
        // After the budget, one answer per retry period: replies lost to a
        // partition or a crash must not leave a correct peer unable to fetch
        // for ever, and a flooder still gets no more than the retry rate.
        let now = self.now;
        let retry = self.cfg.fetch_retry_ms;
        let served = st
            .served
            .entry((from, proposer.index()))
            .or_insert((0, Millis(0)));
        if served.0 >= budget && now < served.1.plus(retry) {
            return Err(DropReason::FetchFlood);
        }
        *served = (served.0.saturating_add(1), now);
        let batch = (**batch).clone();
        self.out.push(Action::Send {
            to: ReplicaId(from as u32),
            msg: DbftMsg::BatchResponse {
                epoch,
                proposer,
                batch,
            },
        });
        Ok(())
    }

    fn on_batch_response(
        &mut self,
        epoch: Epoch,
        proposer: ReplicaId,
        batch: Batch,
    ) -> Result<(), DropReason> {
        let st = self.epochs.get_mut(&epoch).expect("created by caller");
        let digest = batch.digest();
        if st.store.contains_key(&digest) && !st.fetching.contains_key(&proposer.index()) {
            // A second holder's answer to the same request.
            return Err(DropReason::Duplicate);
        }
        // Digest-checked: only the bytes of the delivered digest we asked for (P12).
        if st.fetching.get(&proposer.index()) != Some(&digest) {
            return Err(DropReason::UnrequestedBatch);
        }
        st.fetching.remove(&proposer.index());
        st.store.entry(digest).or_insert_with(|| Arc::new(batch));
        self.try_output(epoch);
        Ok(())
    }

    fn on_timer(&mut self, id: TimerId) {
        match id {
            TimerId::Round { inst, round, which } => {
                let cfg = &self.cfg;
                let Some(st) = self.epochs.get_mut(&inst.epoch) else {
                    return;
                };
                if inst.slot.index() >= cfg.n {
                    return;
                }
                let mut out = vec![];
                st.bin[inst.slot.index()].on_timer(cfg, round, which, &mut out);
                self.bin_outs(inst, out);
            }
            TimerId::Fetch { epoch, proposer } => {
                let me = self.me.index();
                let Some(st) = self.epochs.get(&epoch) else { return };
                let Some(&d) = st.fetching.get(&proposer.index()) else {
                    return;
                };
                let all: Vec<usize> = (0..self.cfg.n).filter(|&i| i != me).collect();
                self.send_fetch(epoch, proposer.index(), d, &all);
            }
            TimerId::ZeroGrace { epoch } => {
                let Some(st) = self.epochs.get_mut(&epoch) else {
                    return;
                };
                if st.grace_over {
                    return;
                }
                st.grace_over = true;
                if st.joined && st.one_decided {
                    self.start_zero_phase(epoch);
                }
            }
        }
    }

    fn collect(&mut self, below: Epoch) {
        if below <= self.low {
            return;
        }
        self.epochs.retain(|e, _| *e >= below);
        self.low = below;
        let es: Vec<Epoch> = self.epochs.keys().copied().collect();
        for e in es {
            self.check_join(e);
        }
    }

    /// Binary decisions that contradicted a first one, over all live epochs
    /// (non-zero only with more than t faulty replicas).
    pub fn conflicts(&self) -> u64 {
        self.epochs
            .values()
            .flat_map(|s| s.bin.iter())
            .map(|b| b.conflicts())
            .sum()
    }
}
