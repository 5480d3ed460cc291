//! A small in-crate cluster: n `Replica`s, a network that delivers every
//! message after 1 ms (optionally dropping a seeded fraction, or cutting
//! replicas off), virtual time, and a toy executor per replica that hashes
//! what it executes. Not the simulator (`chorus-sim` is); just enough to run
//! whole protocols in unit tests.

use super::util::{setup, Setup};
use crate::io::{Action, Event, Outbox, PersistRecord, RejectReason, TimerId};
use crate::replica::Replica;
use bytes::Bytes;
use chorus_core::{Batch, ClientId, Digest, Millis, ProtocolParams, ReplicaId, RequestSeq, Seq};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};

/// The toy executor: executes each (client, seq) once, chains batch digests.
#[derive(Clone, Debug, Default)]
pub struct Exec {
    pub next: Seq,
    pub chain: Digest,
    pub executed: BTreeSet<(ClientId, RequestSeq)>,
}

impl Exec {
    fn apply(&mut self, seq: Seq, batch: &Batch) {
        assert_eq!(
            seq, self.next,
            "the executor got position {seq:?}, expected {:?}",
            self.next
        );
        self.chain = Digest::of_parts("exec", &[self.chain.as_bytes(), batch.digest().as_bytes()]);
        for r in &batch.requests {
            self.executed.insert((r.client, r.seq));
        }
        self.next = seq.next();
    }

    pub fn snapshot(&self) -> Bytes {
        let mut b = Vec::new();
        b.extend_from_slice(&self.next.0.to_le_bytes());
        b.extend_from_slice(self.chain.as_bytes());
        for (c, s) in &self.executed {
            b.extend_from_slice(&c.0.to_le_bytes());
            b.extend_from_slice(&s.0.to_le_bytes());
        }
        Bytes::from(b)
    }

    pub fn digest(&self) -> Digest {
        Digest::of(&self.snapshot())
    }

    /// `None` for a malformed snapshot.
    fn restore(bytes: &[u8]) -> Option<Exec> {
        if bytes.len() < 40 || !(bytes.len() - 40).is_multiple_of(16) {
            return None;
        }
        let next = Seq(u64::from_le_bytes(bytes[..8].try_into().ok()?));
        let chain = Digest(bytes[8..40].try_into().ok()?);
        let executed = bytes[40..]
            .chunks(16)
            .map(|c| {
                let client = u64::from_le_bytes(c[..8].try_into().unwrap_or_default());
                let seq = u64::from_le_bytes(c[8..].try_into().unwrap_or_default());
                (ClientId(client), RequestSeq(seq))
            })
            .collect();
        Some(Exec {
            next,
            chain,
            executed,
        })
    }
}

pub struct Cluster {
    pub s: Setup,
    pub nodes: Vec<Option<Replica>>,
    pub execs: Vec<Exec>,
    /// `sarek`: the stream executors (`execs` stays unused).
    pub sexecs: Vec<super::sarek_exec::StreamExec>,
    /// What each replica delivered: position -> batch digest.
    pub delivered: Vec<BTreeMap<Seq, Digest>>,
    pub records: Vec<Vec<PersistRecord>>,
    pub rejects: Vec<(usize, RejectReason)>,
    pub now: Millis,
    queue: BTreeMap<(Millis, u64), (usize, Event)>,
    counter: u64,
    timers: Vec<BTreeMap<TimerId, Millis>>,
    /// Drop each message with this probability (seeded).
    pub loss: f64,
    rng: ChaCha8Rng,
    /// Replicas cut off from the network (they keep running).
    pub isolated: BTreeSet<usize>,
    pub messages: u64,
}

impl Cluster {
    pub fn new(n: usize, clients: usize, params: ProtocolParams) -> Cluster {
        let s = setup(n, clients, params);
        let mut c = Cluster {
            nodes: Vec::new(),
            execs: vec![Exec::default(); n],
            sexecs: vec![Default::default(); n],
            delivered: vec![BTreeMap::new(); n],
            records: vec![Vec::new(); n],
            rejects: Vec::new(),
            now: Millis(0),
            queue: BTreeMap::new(),
            counter: 0,
            timers: vec![BTreeMap::new(); n],
            loss: 0.0,
            rng: ChaCha8Rng::seed_from_u64(7),
            isolated: BTreeSet::new(),
            messages: 0,
            s,
        };
        for i in 0..n {
            let mut out = Outbox::new();
            let r = Replica::new(
                c.s.cfg.clone(),
                ReplicaId(i as u32),
                c.s.keys[i].clone(),
                c.now,
                &mut out,
            );
            c.nodes.push(Some(r));
            c.perform(i, out);
        }
        c
    }

    pub fn n(&self) -> usize {
        self.nodes.len()
    }

    fn sarek(&self) -> bool {
        self.s.cfg.params.mode == chorus_core::OrderingMode::Sarek
    }

    fn push(&mut self, at: Millis, to: usize, ev: Event) {
        self.counter += 1;
        self.queue.insert((at, self.counter), (to, ev));
    }

    /// A client sends request `seq` to every replica.
    pub fn push_event(&mut self, to: usize, ev: Event) {
        self.push(self.now, to, ev);
    }

    pub fn submit(&mut self, client: usize, seq: u64) {
        let req = self.s.request(client, seq, format!("c{client}s{seq}").as_bytes());
        for i in 0..self.n() {
            self.push(self.now, i, Event::Request(req.clone()));
        }
    }

    /// A request built by the test (e.g. with a partial MAC vector) to every replica.
    pub fn submit_request(&mut self, req: chorus_core::Request) {
        for i in 0..self.n() {
            self.push(self.now, i, Event::Request(req.clone()));
        }
    }

    /// A client request that reaches only `to` (the others lost it).
    pub fn submit_to(&mut self, client: usize, seq: u64, to: &[usize]) {
        let req = self.s.request(client, seq, format!("c{client}s{seq}").as_bytes());
        for i in to {
            self.push(self.now, *i, Event::Request(req.clone()));
        }
    }

    pub fn replica(&self, i: usize) -> &Replica {
        self.nodes[i].as_ref().expect("replica is up")
    }

    fn send(&mut self, from: usize, to: usize, msg: chorus_core::ReplicaMsg) {
        if self.isolated.contains(&from) || self.isolated.contains(&to) {
            return;
        }
        if self.loss > 0.0 && self.rng.gen_bool(self.loss) {
            return;
        }
        self.messages += 1;
        let at = self.now.plus(1);
        self.push(
            at,
            to,
            Event::Message {
                from: ReplicaId(from as u32),
                msg,
            },
        );
    }

    fn perform(&mut self, i: usize, mut out: Outbox) {
        for a in out.drain().collect::<Vec<_>>() {
            match a {
                Action::Send { to, msg } => self.send(i, to.index(), msg),
                Action::Broadcast { msg } => {
                    for j in 0..self.n() {
                        if j != i {
                            self.send(i, j, msg.clone());
                        }
                    }
                }
                Action::Deliver { seq, batch, .. } => {
                    self.execs[i].apply(seq, &batch);
                    // Exec::apply already asserts "no gap, no repeat" within one
                    // incarnation; across a restart the same position may be
                    // delivered again, but never differently.
                    let prev = self.delivered[i].insert(seq, batch.digest());
                    assert!(
                        prev.is_none_or(|p| p == batch.digest()),
                        "replica {i} re-delivered {seq:?} differently"
                    );
                }
                Action::DeliverStream { cell, batch } => {
                    let lanes = self.s.cfg.lanes() as usize;
                    self.sexecs[i].apply(cell, &batch, lanes);
                    let seq = self.s.cfg.seq_of(cell);
                    let prev = self.delivered[i].insert(seq, batch.digest());
                    assert!(
                        prev.is_none_or(|p| p == batch.digest()),
                        "replica {i} re-delivered {cell:?} differently"
                    );
                }
                Action::TakeCheckpoint { seq } if self.sarek() => {
                    let lanes = self.s.cfg.lanes() as usize;
                    let (state_digest, snapshot) = self.sexecs[i].checkpoint(seq, lanes);
                    let ev = Event::Checkpointed {
                        seq,
                        state_digest,
                        snapshot,
                    };
                    self.push(self.now, i, ev);
                }
                Action::InstallState { cert, snapshot } if self.sarek() => {
                    let lanes = self.s.cfg.lanes() as usize;
                    let digest = match super::sarek_exec::StreamExec::restore(&snapshot, lanes) {
                        Some(e) => {
                            self.sexecs[i] = e;
                            super::sarek_exec::StreamExec::digest_of(&snapshot)
                        }
                        None => Digest::of(b"malformed snapshot"),
                    };
                    let ev = Event::StateInstalled {
                        seq: cert.seq,
                        state_digest: digest,
                    };
                    self.push(self.now, i, ev);
                }
                Action::SetTimer { id, at } => {
                    self.timers[i].insert(id, at);
                }
                Action::CancelTimer { id } => {
                    self.timers[i].remove(&id);
                }
                Action::Persist(r) => self.records[i].push(r),
                // The harness's stream executor holds no schedules: nothing
                // can be missing there (the simulator runs the real one).
                Action::FindMissingCopies => {}
                Action::TakeCheckpoint { seq } => {
                    let e = &self.execs[i];
                    assert_eq!(
                        e.next, seq,
                        "checkpoint requested at {seq:?} but executed up to {:?}",
                        e.next
                    );
                    let ev = Event::Checkpointed {
                        seq,
                        state_digest: e.digest(),
                        snapshot: e.snapshot(),
                    };
                    self.push(self.now, i, ev);
                }
                Action::InstallState { cert, snapshot } => {
                    let digest = match Exec::restore(&snapshot) {
                        Some(e) => {
                            let d = e.digest();
                            self.execs[i] = e;
                            d
                        }
                        None => Digest::of(b"malformed snapshot"),
                    };
                    let ev = Event::StateInstalled {
                        seq: cert.seq,
                        state_digest: digest,
                    };
                    self.push(self.now, i, ev);
                }
                Action::Reject { reason, .. } => self.rejects.push((i, reason)),
            }
        }
    }

    fn next_timer(&self) -> Option<(Millis, usize, TimerId)> {
        let mut best: Option<(Millis, usize, TimerId)> = None;
        for (i, ts) in self.timers.iter().enumerate() {
            if self.nodes[i].is_none() {
                continue;
            }
            for (id, at) in ts {
                if best.is_none_or(|(b, _, _)| *at < b) {
                    best = Some((*at, i, *id));
                }
            }
        }
        best
    }

    /// Handle the next event (message before timer at equal times). `false`
    /// when nothing is left before `until`.
    pub fn step(&mut self, until: Millis) -> bool {
        let next_msg = self.queue.keys().next().copied();
        let next_timer = self.next_timer();
        let take_msg = match (next_msg, next_timer) {
            (Some((m, _)), Some((t, _, _))) => m <= t,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return false,
        };
        let (at, i, ev) = if take_msg {
            let key = next_msg.unwrap_or_default();
            let (i, ev) = self.queue.remove(&key).expect("queued");
            (key.0, i, ev)
        } else {
            let (at, i, id) = next_timer.expect("timer");
            self.timers[i].remove(&id);
            (at, i, Event::Timer(id))
        };
        if at > until {
            // Put it back and stop.
            match ev {
                Event::Timer(id) => {
                    self.timers[i].insert(id, at);
                }
                ev => self.push(at, i, ev),
            }
            return false;
        }
        self.now = self.now.max(at);
        let Some(node) = self.nodes[i].as_mut() else {
            return true;
        };
        let mut out = Outbox::new();
        node.handle(self.now, ev, &mut out);
        self.perform(i, out);
        true
    }

    pub fn run_for(&mut self, ms: u64) {
        let until = self.now.plus(ms);
        while self.step(until) {}
        self.now = until;
    }

    /// Run until `pred` holds (checked after every event) or `max_ms` passed.
    pub fn run_until(&mut self, max_ms: u64, mut pred: impl FnMut(&Cluster) -> bool) -> bool {
        let until = self.now.plus(max_ms);
        loop {
            if pred(self) {
                return true;
            }
            if !self.step(until) {
                return pred(self);
            }
        }
    }

    pub fn crash(&mut self, i: usize) {
        self.nodes[i] = None;
        self.timers[i].clear();
        self.queue.retain(|_, (to, _)| *to != i);
    }

    /// Restart from persisted records with a fresh executor.
    pub fn restart(&mut self, i: usize) {
        let mut out = Outbox::new();
        self.execs[i] = Exec::default();
        self.sexecs[i] = Default::default();
        let r = Replica::recover(
            self.s.cfg.clone(),
            ReplicaId(i as u32),
            self.s.keys[i].clone(),
            self.records[i].clone(),
            self.now,
            &mut out,
        );
        self.nodes[i] = Some(r);
        self.perform(i, out);
    }

    /// Every request in `reqs` executed exactly once at every live replica.
    pub fn all_executed(&self, reqs: &[(usize, u64)]) -> bool {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.is_some())
            .all(|(i, _)| {
                reqs.iter().all(|(c, s)| {
                    let key = (ClientId(*c as u64), RequestSeq(*s));
                    self.execs[i].executed.contains(&key) || self.sexecs[i].executed.contains(&key)
                })
            })
    }

    /// Agreement: wherever two replicas delivered the same position, they
    /// delivered the same batch; executors at the same position agree.
    pub fn check_agreement(&self) {
        for i in 0..self.n() {
            for j in i + 1..self.n() {
                for (seq, d) in &self.delivered[i] {
                    if let Some(e) = self.delivered[j].get(seq) {
                        assert_eq!(d, e, "replicas {i} and {j} disagree at {seq:?}");
                    }
                }
            }
        }
    }
}
