//! A small deterministic network for whole-engine tests: correct replicas run
//! `Dbft`, Byzantine ones are scripted by the test. Messages wait in flight
//! until the scheduler delivers them (in order, or in a seeded random order);
//! timers fire only when nothing is in flight (synchronous after GST).

use crate::engine::{Action, Dbft, Event, SlotDecision, TimerId};
use crate::msg::{DbftMsg, Epoch};
use crate::DbftConfig;
use bytes::Bytes;
use chorus_core::{
    Authenticator, Batch, ClientId, Digest, Millis, ReplicaId, Request, RequestSeq, Signature,
};
use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A batch unique to (replica, epoch, tag).
pub fn batch(replica: usize, epoch: Epoch, tag: u8) -> Batch {
    Batch {
        requests: vec![Request {
            memo: Default::default(),
            client: ClientId(replica as u64),
            seq: RequestSeq(epoch * 256 + u64::from(tag)),
            flags: 0,
            op: Bytes::from(vec![tag; 8]),
            auth: Authenticator::Signature(Signature([tag; 64])),
        }],
        time_ms: 0,
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flight {
    pub from: usize,
    pub to: usize,
    pub msg: DbftMsg,
}

type Filter = Box<dyn FnMut(&Flight) -> bool>;
/// Bitmask and digest-sorted selection of one epoch.
pub type Decided = (Vec<bool>, Vec<(ReplicaId, Digest)>);
pub type Ready = Vec<(ReplicaId, Arc<Batch>)>;

pub struct Net {
    pub n: usize,
    pub nodes: Vec<Option<Dbft>>,
    pub inflight: Vec<Flight>,
    /// Messages the current `hold` filter kept back.
    pub held: Vec<Flight>,
    /// Messages to Byzantine replicas, for tests that want to react to them.
    pub to_byz: Vec<Flight>,
    pub timers: BTreeMap<(Millis, usize, TimerId), ()>,
    pub now: Millis,
    pub rng: Option<ChaCha8Rng>,
    /// true: the message is held (not delivered) until `release`.
    pub hold: Option<Filter>,
    /// true: the message is silently lost.
    pub drop: Option<Filter>,
    pub slot_decisions: Vec<BTreeMap<(Epoch, usize), SlotDecision>>,
    pub decided: Vec<BTreeMap<Epoch, Decided>>,
    pub ready: Vec<BTreeMap<Epoch, Ready>>,
    pub joins: Vec<Vec<Epoch>>,
    /// Per replica, in order: ("join" | "decided" | "ready", epoch).
    pub log: Vec<Vec<(&'static str, Epoch)>>,
    /// Answer `Action::Join` with this replica's pool batch automatically.
    pub auto_join: bool,
    pub delivered: u64,
}

impl Net {
    pub fn new(cfg: DbftConfig, byzantine: &[usize]) -> Net {
        let n = cfg.n;
        let nodes = (0..n)
            .map(|i| (!byzantine.contains(&i)).then(|| Dbft::new(cfg.clone(), ReplicaId(i as u32))))
            .collect();
        Net {
            n,
            nodes,
            inflight: vec![],
            held: vec![],
            to_byz: vec![],
            timers: BTreeMap::new(),
            now: Millis(0),
            rng: None,
            hold: None,
            drop: None,
            slot_decisions: vec![BTreeMap::new(); n],
            decided: vec![BTreeMap::new(); n],
            ready: vec![BTreeMap::new(); n],
            joins: vec![vec![]; n],
            log: vec![vec![]; n],
            auto_join: true,
            delivered: 0,
        }
    }

    pub fn with_seed(mut self, seed: u64) -> Net {
        self.rng = Some(ChaCha8Rng::seed_from_u64(seed));
        self
    }

    pub fn correct(&self) -> Vec<usize> {
        (0..self.n).filter(|&i| self.nodes[i].is_some()).collect()
    }

    pub fn node(&self, i: usize) -> &Dbft {
        self.nodes[i].as_ref().expect("correct replica")
    }

    pub fn input(&mut self, i: usize, ev: Event) {
        let node = self.nodes[i].as_mut().expect("input to a correct replica");
        let acts = node.handle(self.now, ev);
        self.apply(i, acts);
    }

    pub fn propose(&mut self, i: usize, epoch: Epoch, b: Batch) {
        self.input(i, Event::Propose { epoch, batch: b });
    }

    /// A Byzantine replica sends `msg` to `to` (authenticated as `from`).
    pub fn inject(&mut self, from: usize, to: usize, msg: DbftMsg) {
        self.inflight.push(Flight { from, to, msg });
    }

    pub fn inject_all(&mut self, from: usize, msg: DbftMsg) {
        for to in 0..self.n {
            if to != from {
                self.inject(from, to, msg.clone());
            }
        }
    }

    fn apply(&mut self, i: usize, acts: Vec<Action>) {
        for a in acts {
            match a {
                Action::Send { to, msg } => self.inflight.push(Flight {
                    from: i,
                    to: to.index(),
                    msg,
                }),
                Action::Broadcast { msg } => {
                    for to in 0..self.n {
                        if to != i {
                            self.inflight.push(Flight {
                                from: i,
                                to,
                                msg: msg.clone(),
                            });
                        }
                    }
                }
                Action::SetTimer { id, at } => {
                    self.timers.insert((at, i, id), ());
                }
                Action::Join { epoch } => {
                    self.joins[i].push(epoch);
                    self.log[i].push(("join", epoch));
                    if self.auto_join {
                        self.propose(i, epoch, batch(i, epoch, 0));
                    }
                }
                Action::SlotDecided {
                    epoch,
                    proposer,
                    decision,
                } => {
                    let prev = self.slot_decisions[i].insert((epoch, proposer.index()), decision);
                    assert!(prev.is_none(), "slot decided twice at {i}");
                }
                Action::EpochDecided {
                    epoch,
                    bitmask,
                    selected,
                } => {
                    self.log[i].push(("decided", epoch));
                    let prev = self.decided[i].insert(epoch, (bitmask, selected));
                    assert!(prev.is_none(), "epoch decided twice at {i}");
                }
                Action::EpochReady { epoch, batches } => {
                    self.log[i].push(("ready", epoch));
                    let prev = self.ready[i].insert(epoch, batches);
                    assert!(prev.is_none(), "epoch ready twice at {i}");
                }
            }
        }
    }

    /// Deliver one in-flight message; false when none is left.
    pub fn step(&mut self) -> bool {
        loop {
            if self.inflight.is_empty() {
                return false;
            }
            let idx = match &mut self.rng {
                Some(r) => r.gen_range(0..self.inflight.len()),
                None => 0,
            };
            let f = self.inflight.remove(idx);
            if self.drop.as_mut().is_some_and(|d| d(&f)) {
                continue;
            }
            if self.hold.as_mut().is_some_and(|h| h(&f)) {
                self.held.push(f);
                continue;
            }
            self.deliver(f);
            return true;
        }
    }

    fn deliver(&mut self, f: Flight) {
        self.delivered += 1;
        match self.nodes[f.to].as_mut() {
            Some(node) => {
                let acts = node.handle(
                    self.now,
                    Event::Message {
                        from: ReplicaId(f.from as u32),
                        msg: f.msg,
                    },
                );
                self.apply(f.to, acts);
            }
            None => self.to_byz.push(f),
        }
    }

    /// Fire the earliest timer (advancing time); false when none is set.
    pub fn fire_timer(&mut self) -> bool {
        let Some((&(at, i, id), _)) = self.timers.iter().next() else {
            return false;
        };
        self.timers.remove(&(at, i, id));
        self.now = self.now.max(at);
        if self.nodes[i].is_some() {
            self.input(i, Event::Timer(id));
        }
        true
    }

    /// Messages first, then timers, until quiet or `max_steps`.
    pub fn run(&mut self, max_steps: u64) {
        for _ in 0..max_steps {
            if !self.step() && !self.fire_timer() {
                return;
            }
        }
    }

    pub fn release(&mut self) {
        self.hold = None;
        let held = std::mem::take(&mut self.held);
        self.inflight.extend(held);
    }

    /// Every correct replica's decided bitmask and selected digests of `epoch` agree; returns them.
    pub fn agreed(&self, epoch: Epoch) -> (Vec<bool>, Vec<(ReplicaId, Digest)>) {
        let cs = self.correct();
        let first = self.decided[cs[0]]
            .get(&epoch)
            .cloned()
            .unwrap_or_else(|| panic!("r{} did not decide e{epoch}", cs[0]));
        for &i in &cs[1..] {
            let d = self.decided[i]
                .get(&epoch)
                .unwrap_or_else(|| panic!("r{i} did not decide e{epoch}"));
            assert_eq!(d, &first, "r{i} disagrees on epoch {epoch}");
        }
        first
    }

    /// Every correct replica output the same batches for `epoch`; returns them.
    pub fn agreed_ready(&self, epoch: Epoch) -> Vec<(ReplicaId, Arc<Batch>)> {
        let cs = self.correct();
        let first = self.ready[cs[0]]
            .get(&epoch)
            .cloned()
            .unwrap_or_else(|| panic!("r{} not ready e{epoch}", cs[0]));
        for &i in &cs[1..] {
            let d = self.ready[i]
                .get(&epoch)
                .unwrap_or_else(|| panic!("r{i} not ready e{epoch}"));
            assert_eq!(d, &first, "r{i} output other batches for epoch {epoch}");
        }
        for w in first.windows(2) {
            assert!(
                w[0].1.digest() < w[1].1.digest(),
                "sorted by digest, no duplicates"
            );
        }
        first
    }
}
