//! Byzantine replicas as middleware (malachite's style): a correct replica runs
//! underneath, and an `Adversary` named after its fault model rewrites what it
//! sends. Everything the adversary forges it signs with the replica's own key,
//! so forgeries pass signature checks and must be caught by the protocol
//! logic (PBFT §4: at most f such replicas are tolerated). Twins need no
//! middleware: the world runs two copies and splits the network between them.

use crate::faults::FaultKind;
use crate::queue::Micros;
use crate::stats::Counters;
use bytes::Bytes;
use chorus_core::{
    Batch, BatchReply, CheckpointVote, ClusterTag, Commit, Decided, Digest, FetchBatch, Identity, LaneId,
    LaneProgress, NewView, PrePrepare, Prepare, ReplicaId, ReplicaMsg, Request, Seq, SigKind, Signature,
    Slot, StateRequest, Status, StatusBundle, View, ViewChange,
};
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Messages remembered for replay.
const HISTORY_MAX: usize = 256;
/// Client requests remembered to build alternative batches.
const SEEN_REQUESTS_MAX: usize = 16;
/// Equivocations remembered (so each recipient group stays consistent).
const EQUIVOCATIONS_MAX: usize = 128;
/// Flood messages per virtual second, at most.
const FLOOD_PER_SECOND: u64 = 400;

/// What a conflicting vote targets: (message kind, lane and view, slot or seq).
type VoteTarget = (u8, u64, u64);

// Forgeries are signed the way every replica signs: bound to the cluster
// (`chorus_core::domain`), so they pass the signature check and only the
// protocol logic can catch them.

pub fn resign_pre_prepare(id: &Identity, tag: &ClusterTag, m: &mut PrePrepare) {
    let d = PrePrepare::signing_digest(m.lane, m.view, m.slot, &m.digest);
    m.sig = id.sign_bound(tag, SigKind::PrePrepare, &d);
}

pub fn resign_prepare(id: &Identity, tag: &ClusterTag, m: &mut Prepare) {
    let d = Prepare::signing_digest(m.lane, m.view, m.slot, &m.digest, m.replica);
    m.sig = id.sign_bound(tag, SigKind::Prepare, &d);
}

pub fn resign_checkpoint(id: &Identity, tag: &ClusterTag, m: &mut CheckpointVote) {
    let d = CheckpointVote::signing_digest(m.seq, &m.state_digest, m.replica);
    m.sig = id.sign_bound(tag, SigKind::Checkpoint, &d);
}

pub fn resign_view_change(id: &Identity, tag: &ClusterTag, m: &mut ViewChange) {
    m.sig = id.sign_bound(tag, SigKind::ViewChange, &m.signing_digest());
}

pub fn resign_new_view(id: &Identity, tag: &ClusterTag, m: &mut NewView) {
    m.sig = id.sign_bound(tag, SigKind::NewView, &m.signing_digest());
}

fn flip_sig(sig: &mut Signature, rng: &mut ChaCha8Rng) {
    let i = rng.gen_range(0..64);
    sig.0[i] ^= 1 << rng.gen_range(0..8);
}

fn random_digest(rng: &mut ChaCha8Rng) -> Digest {
    Digest(rng.gen())
}

pub struct Adversary {
    pub kind: FaultKind,
    me: ReplicaId,
    identity: Identity,
    /// The cluster its forgeries are signed for.
    tag: ClusterTag,
    n: usize,
    lanes: u32,
    history: VecDeque<ReplicaMsg>,
    seen_requests: VecDeque<Request>,
    /// Per pre-prepare: the alternative sent, and who gets it.
    equivocations: BTreeMap<(LaneId, View, Slot), (PrePrepare, BTreeSet<ReplicaId>)>,
    /// Per prepare/commit/checkpoint target: who gets the conflicting vote.
    conflict_groups: BTreeMap<VoteTarget, (Digest, BTreeSet<ReplicaId>)>,
    max_view: View,
    max_slot: Slot,
    flood_window_start_us: Micros,
    flood_sent_in_window: u64,
}

impl Adversary {
    pub fn new(
        kind: FaultKind,
        me: ReplicaId,
        identity: Identity,
        tag: ClusterTag,
        n: usize,
        lanes: u32,
    ) -> Adversary {
        assert!(
            kind.is_byzantine_replica() && kind != FaultKind::Twins,
            "{kind} is not replica middleware"
        );
        Adversary {
            kind,
            me,
            identity,
            tag,
            n,
            lanes,
            history: VecDeque::new(),
            seen_requests: VecDeque::new(),
            equivocations: BTreeMap::new(),
            conflict_groups: BTreeMap::new(),
            max_view: View(0),
            max_slot: Slot(0),
            flood_window_start_us: 0,
            flood_sent_in_window: 0,
        }
    }

    /// A message the replica received: remembered for replay and to learn
    /// client requests and how far the protocol has come.
    pub fn observe(&mut self, msg: &ReplicaMsg) {
        self.learn(msg);
        if self.kind == FaultKind::Replay {
            self.remember(msg.clone());
        }
    }

    fn learn(&mut self, msg: &ReplicaMsg) {
        let batch = match msg {
            ReplicaMsg::PrePrepare(m) => {
                self.max_view = self.max_view.max(m.view);
                self.max_slot = self.max_slot.max(m.slot);
                Some(&m.batch)
            }
            ReplicaMsg::BatchReply(m) => Some(&m.batch),
            _ => None,
        };
        for r in batch.into_iter().flat_map(|b| b.requests.iter()) {
            if self.seen_requests.len() == SEEN_REQUESTS_MAX {
                self.seen_requests.pop_front();
            }
            self.seen_requests.push_back(r.clone());
        }
    }

    fn remember(&mut self, msg: ReplicaMsg) {
        if self.history.len() == HISTORY_MAX {
            self.history.pop_front();
        }
        self.history.push_back(msg);
    }

    /// Rewrite one message the correct replica underneath sends to `to`:
    /// returns what actually goes out (possibly nothing, possibly more).
    pub fn outgoing(
        &mut self,
        rng: &mut ChaCha8Rng,
        now_us: Micros,
        to: ReplicaId,
        msg: ReplicaMsg,
        counters: &mut Counters,
    ) -> Vec<ReplicaMsg> {
        self.learn(&msg);
        match self.kind {
            FaultKind::Silent => {
                counters.fault("byz-silent-drop");
                vec![]
            }
            FaultKind::Equivocate => vec![self.equivocate(rng, to, msg, counters)],
            FaultKind::ConflictingVotes => vec![self.conflicting_vote(rng, to, msg, counters)],
            FaultKind::Corrupt => vec![self.corrupt(rng, msg, counters)],
            FaultKind::Replay => {
                let mut out = vec![msg.clone()];
                if !self.history.is_empty() && rng.gen_bool(0.3) {
                    for _ in 0..rng.gen_range(1..=3) {
                        let i = rng.gen_range(0..self.history.len());
                        out.push(self.history[i].clone());
                        counters.fault("byz-replay");
                    }
                }
                self.remember(msg);
                out
            }
            FaultKind::Flood => {
                let mut out = vec![msg];
                if rng.gen_bool(0.25) {
                    for _ in 0..rng.gen_range(1..=4) {
                        if !self.flood_budget(now_us) {
                            break;
                        }
                        out.push(self.flood_message(rng));
                        counters.fault("byz-flood");
                    }
                }
                out
            }
            // Its protocol messages are honest; it lies to clients
            // (`World::fake_answer`).
            FaultKind::FakeAnswer => vec![msg],
            other => unreachable!("{other} is not replica middleware"),
        }
    }

    /// What a Byzantine replica tells a client instead of `result` (None = nothing).
    pub fn reply(&mut self, rng: &mut ChaCha8Rng, result: Bytes, counters: &mut Counters) -> Option<Bytes> {
        match self.kind {
            FaultKind::Silent => None,
            FaultKind::Corrupt | FaultKind::ConflictingVotes if rng.gen_bool(0.5) => {
                counters.fault("byz-wrong-reply");
                let mut v = result.to_vec();
                v.extend_from_slice(b" (forged)");
                Some(Bytes::from(v))
            }
            _ => Some(result),
        }
    }

    fn others(&self) -> Vec<ReplicaId> {
        (0..self.n as u32)
            .map(ReplicaId)
            .filter(|r| *r != self.me)
            .collect()
    }

    /// A random non-empty proper subset of the other replicas.
    fn random_group(&self, rng: &mut ChaCha8Rng) -> BTreeSet<ReplicaId> {
        let mut others = self.others();
        others.shuffle(rng);
        let k = rng.gen_range(1..others.len().max(2));
        others.into_iter().take(k).collect()
    }

    /// A batch that differs from `batch` but is built from real client requests.
    fn alternative_batch(&self, batch: &Batch) -> Option<Batch> {
        if batch.requests.len() >= 2 {
            let mut requests = batch.requests.clone();
            requests.reverse();
            return Some(Batch { requests, time_ms: 0 });
        }
        if !batch.requests.is_empty() {
            return Some(Batch::noop());
        }
        let r = self.seen_requests.back()?;
        Some(Batch {
            requests: vec![r.clone()],
            time_ms: 0,
        })
    }

    /// Equivocating primary (PBFT §4.2's reason for the prepare phase): a
    /// different batch, properly signed, to part of the replicas.
    fn equivocate(
        &mut self,
        rng: &mut ChaCha8Rng,
        to: ReplicaId,
        msg: ReplicaMsg,
        counters: &mut Counters,
    ) -> ReplicaMsg {
        if let ReplicaMsg::Dbft(w) = msg {
            let (w, changed) =
                crate::dispel_adversary::equivocate(w, self.n, to, |b| self.alternative_batch(b));
            if changed {
                counters.fault("byz-dbft-equivocate");
            }
            return ReplicaMsg::Dbft(w);
        }
        let ReplicaMsg::PrePrepare(pp) = msg else {
            return msg;
        };
        let key = (pp.lane, pp.view, pp.slot);
        if !self.equivocations.contains_key(&key) {
            let Some(batch) = self.alternative_batch(&pp.batch) else {
                return ReplicaMsg::PrePrepare(pp);
            };
            let mut alt = PrePrepare {
                digest: batch.digest(),
                batch,
                ..pp.clone()
            };
            resign_pre_prepare(&self.identity, &self.tag, &mut alt);
            let group = self.random_group(rng);
            if self.equivocations.len() == EQUIVOCATIONS_MAX {
                self.equivocations.pop_first();
            }
            self.equivocations.insert(key, (alt, group));
        }
        let (alt, group) = &self.equivocations[&key];
        if group.contains(&to) {
            counters.fault("byz-equivocate");
            ReplicaMsg::PrePrepare(alt.clone())
        } else {
            ReplicaMsg::PrePrepare(pp)
        }
    }

    /// The conflicting digest for one vote target and whether `to` gets it.
    fn conflict(&mut self, rng: &mut ChaCha8Rng, key: VoteTarget, to: ReplicaId) -> Option<Digest> {
        if !self.conflict_groups.contains_key(&key) {
            let d = if rng.gen_bool(0.5) {
                Batch::noop_digest()
            } else {
                random_digest(rng)
            };
            let group = self.random_group(rng);
            if self.conflict_groups.len() == EQUIVOCATIONS_MAX {
                self.conflict_groups.pop_first();
            }
            self.conflict_groups.insert(key, (d, group));
        }
        let (d, group) = &self.conflict_groups[&key];
        group.contains(&to).then_some(*d)
    }

    /// Conflicting votes: prepares, commits and checkpoint votes for other
    /// digests towards part of the replicas; view changes that hide prepared
    /// certificates. All validly signed.
    fn conflicting_vote(
        &mut self,
        rng: &mut ChaCha8Rng,
        to: ReplicaId,
        msg: ReplicaMsg,
        counters: &mut Counters,
    ) -> ReplicaMsg {
        let lane_view = |lane: LaneId, view: View| ((lane.0 as u64) << 40) ^ view.0;
        match msg {
            ReplicaMsg::Prepare(mut m) => {
                if m.digest == Batch::noop_digest() && rng.gen_bool(0.5) {
                    return ReplicaMsg::Prepare(m);
                }
                if let Some(d) = self.conflict(rng, (0, lane_view(m.lane, m.view), m.slot.0), to) {
                    counters.fault("byz-conflicting-vote");
                    m.digest = d;
                    resign_prepare(&self.identity, &self.tag, &mut m);
                }
                ReplicaMsg::Prepare(m)
            }
            ReplicaMsg::Commit(mut m) => {
                if let Some(d) = self.conflict(rng, (1, lane_view(m.lane, m.view), m.slot.0), to) {
                    counters.fault("byz-conflicting-vote");
                    m.digest = d;
                }
                ReplicaMsg::Commit(m)
            }
            ReplicaMsg::Checkpoint(mut m) => {
                if let Some(d) = self.conflict(rng, (2, m.seq.0, 0), to) {
                    counters.fault("byz-conflicting-vote");
                    m.state_digest = d;
                    resign_checkpoint(&self.identity, &self.tag, &mut m);
                }
                ReplicaMsg::Checkpoint(m)
            }
            ReplicaMsg::ViewChange(mut m) if !m.prepared.is_empty() && rng.gen_bool(0.5) => {
                counters.fault("byz-hidden-certificates");
                m.prepared.clear();
                resign_view_change(&self.identity, &self.tag, &mut m);
                ReplicaMsg::ViewChange(m)
            }
            ReplicaMsg::Dbft(w) => {
                let (w, changed) = crate::dispel_adversary::conflicting(w, self.n, to);
                if changed {
                    counters.fault("byz-dbft-conflicting-vote");
                }
                ReplicaMsg::Dbft(w)
            }
            other => other,
        }
    }

    /// Bad signatures, digests that do not match, tampered or fabricated
    /// requests inside validly signed pre-prepares, impersonation, corrupt
    /// state chunks.
    fn corrupt(&mut self, rng: &mut ChaCha8Rng, msg: ReplicaMsg, counters: &mut Counters) -> ReplicaMsg {
        if !rng.gen_bool(0.5) {
            return msg;
        }
        counters.fault("byz-corrupt");
        let other = ReplicaId((self.me.0 + rng.gen_range(1..self.n as u32)) % self.n as u32);
        match msg {
            // SAREK §IV-C (Table I row 3): a false re-prediction, validly
            // signed, must never gather 2f+1; a broken or borrowed signature
            // must not count at all.
            ReplicaMsg::RePredict(mut v) => {
                counters.fault("byz-false-reprediction");
                match rng.gen_range(0..3) {
                    0 => flip_sig(&mut v.sig, rng),
                    1 => {
                        let top = v.body.partitions.last().copied().unwrap_or(0);
                        let k = u16::try_from(self.lanes).unwrap_or(u16::MAX);
                        if top + 1 < k {
                            let extra = rng.gen_range(top + 1..k);
                            v.body.partitions.push(extra);
                            v.body.added.push(extra);
                        } else {
                            v.body.request = random_digest(rng);
                        }
                        v = v.body.sign(&self.tag, self.me, &self.identity);
                    }
                    _ => v.replica = other,
                }
                ReplicaMsg::RePredict(v)
            }
            ReplicaMsg::PrePrepare(mut m) => {
                match rng.gen_range(0..4) {
                    0 => flip_sig(&mut m.sig, rng),
                    // Signed, but the digest is not the batch's.
                    1 => {
                        m.digest = random_digest(rng);
                        resign_pre_prepare(&self.identity, &self.tag, &mut m);
                    }
                    // A client request altered after the client authenticated it.
                    2 if !m.batch.requests.is_empty() => {
                        let i = rng.gen_range(0..m.batch.requests.len());
                        let mut op = m.batch.requests[i].op.to_vec();
                        op.push(b'!');
                        m.batch.requests[i].op = Bytes::from(op);
                        m.digest = m.batch.digest();
                        resign_pre_prepare(&self.identity, &self.tag, &mut m);
                    }
                    // A request no client issued, with a forged authenticator.
                    _ => {
                        if let Some(mut r) = self.seen_requests.back().cloned() {
                            r.seq = chorus_core::RequestSeq(r.seq.0 + 1_000);
                            m.batch.requests.push(r);
                            m.digest = m.batch.digest();
                            resign_pre_prepare(&self.identity, &self.tag, &mut m);
                        } else {
                            flip_sig(&mut m.sig, rng);
                        }
                    }
                }
                ReplicaMsg::PrePrepare(m)
            }
            ReplicaMsg::Prepare(mut m) => {
                if rng.gen_bool(0.5) {
                    flip_sig(&mut m.sig, rng);
                } else {
                    // Impersonation: claim another replica's vote.
                    m.replica = other;
                    resign_prepare(&self.identity, &self.tag, &mut m);
                }
                ReplicaMsg::Prepare(m)
            }
            ReplicaMsg::Commit(mut m) => {
                if rng.gen_bool(0.5) {
                    m.digest = random_digest(rng);
                } else {
                    m.replica = other;
                }
                ReplicaMsg::Commit(m)
            }
            ReplicaMsg::Checkpoint(mut m) => {
                flip_sig(&mut m.sig, rng);
                ReplicaMsg::Checkpoint(m)
            }
            ReplicaMsg::ViewChange(mut m) => {
                flip_sig(&mut m.sig, rng);
                ReplicaMsg::ViewChange(m)
            }
            ReplicaMsg::NewView(mut m) => {
                flip_sig(&mut m.sig, rng);
                ReplicaMsg::NewView(m)
            }
            ReplicaMsg::Timeout(mut m) => {
                if rng.gen_bool(0.5) {
                    flip_sig(&mut m.sig, rng);
                } else {
                    // A correct replica's timeout it never signed: it would
                    // complete a certificate that moves everyone.
                    m.replica = other;
                }
                ReplicaMsg::Timeout(m)
            }
            ReplicaMsg::Decided(mut m) => {
                m.digest = random_digest(rng);
                ReplicaMsg::Decided(m)
            }
            ReplicaMsg::BatchReply(mut m) => {
                m.batch = self.alternative_batch(&m.batch).unwrap_or_default();
                ReplicaMsg::BatchReply(m)
            }
            ReplicaMsg::StateChunk(mut m) => {
                let mut data = m.data.to_vec();
                if data.is_empty() {
                    data.push(0);
                } else {
                    let i = rng.gen_range(0..data.len());
                    data[i] ^= 0x5a;
                }
                m.data = Bytes::from(data);
                ReplicaMsg::StateChunk(m)
            }
            // DBFT is signature-free: a flipped byte is a message with other
            // content (another digest, value, round or epoch) or undecodable.
            // Half the time a well-formed bundle no correct sender makes
            // (`dispel_adversary::craft_bundle`): refused whole, before
            // its messages are decoded or acted on.
            ReplicaMsg::Dbft(m) if rng.gen_bool(0.5) => {
                let (m, how) = crate::dispel_adversary::craft_bundle(m, self.n, rng.gen_range(0..3));
                counters.fault(how);
                ReplicaMsg::Dbft(m)
            }
            ReplicaMsg::Dbft(mut m) => {
                let mut bytes = m.bytes.to_vec();
                if !bytes.is_empty() {
                    let i = rng.gen_range(0..bytes.len());
                    bytes[i] ^= 1 << rng.gen_range(0..8);
                }
                m.bytes = Bytes::from(bytes);
                ReplicaMsg::Dbft(m)
            }
            // A false report: another request of the client, or another
            // authenticator (alone it is one of at most f; a replica acts
            // only on f+1 about the very request it verified).
            ReplicaMsg::Unverifiable(mut m) => {
                counters.fault("byz-false-unverifiable");
                if rng.gen_bool(0.5) {
                    m.seq = chorus_core::RequestSeq(m.seq.0.wrapping_add(rng.gen_range(1..4)));
                } else {
                    m.auth = random_digest(rng);
                }
                ReplicaMsg::Unverifiable(m)
            }
            // Status is unauthenticated progress: lie about it (a later
            // view, slots not decided, a checkpoint not held), or break the
            // bundle's shape (lanes out of order, of another pillar).
            ReplicaMsg::Statuses(mut b) => {
                counters.fault("byz-false-status");
                match rng.gen_range(0..4) {
                    0 => b.stable_seq = Seq(b.stable_seq.0 + rng.gen_range(1..1_000)),
                    1 => {
                        for e in &mut b.lanes {
                            e.next_undecided = Slot(e.next_undecided.0 + rng.gen_range(1..64));
                        }
                    }
                    2 => {
                        for e in &mut b.lanes {
                            e.view = View(e.view.0 + rng.gen_range(1..4));
                            e.suspects = true;
                        }
                    }
                    _ => {
                        b.lanes.reverse();
                        if let Some(e) = b.lanes.first_mut() {
                            e.lane = LaneId(e.lane.0 + 1);
                        }
                    }
                }
                ReplicaMsg::Statuses(b)
            }
            // A lane's own STATUS is unauthenticated too. In `dispel` its
            // `suspects` says "I lack the epochs from `next_undecided` on":
            // claim to lack up to 256 more than we do, so every peer re-sends
            // what it holds (bounded: once per status interval per peer,
            // never below the peer's low). In the PBFT lanes: suspect a
            // later view. Derived from the message, not drawn, so the rest
            // of the seed's random stream is what it was.
            ReplicaMsg::Status(mut st) => {
                counters.fault("byz-false-status");
                let k = st.next_undecided.0 ^ u64::from(st.lane.0).rotate_left(7) ^ st.stable_seq.0;
                st.suspects = true;
                if k % 2 == 0 {
                    st.next_undecided = Slot(st.next_undecided.0.saturating_sub(1 + k % 256));
                } else {
                    st.view = View(st.view.0 + 1 + k % 3);
                }
                ReplicaMsg::Status(st)
            }
            other @ (ReplicaMsg::FetchBatch(_) | ReplicaMsg::StateRequest(_)) => other,
        }
    }

    fn flood_budget(&mut self, now_us: Micros) -> bool {
        if now_us >= self.flood_window_start_us + 1_000_000 {
            self.flood_window_start_us = now_us;
            self.flood_sent_in_window = 0;
        }
        if self.flood_sent_in_window >= FLOOD_PER_SECOND {
            return false;
        }
        self.flood_sent_in_window += 1;
        true
    }

    /// Validly signed messages for future views and far slots (or near ones,
    /// which must be buffered within bounds).
    fn flood_message(&mut self, rng: &mut ChaCha8Rng) -> ReplicaMsg {
        let lane = LaneId(rng.gen_range(0..self.lanes));
        let view = if rng.gen_bool(0.5) {
            View(self.max_view.0 + rng.gen_range(1..=3))
        } else {
            View(self.max_view.0 + rng.gen_range(1_000..1_000_000_000))
        };
        let slot = if rng.gen_bool(0.5) {
            Slot(self.max_slot.0 + rng.gen_range(1..64))
        } else {
            Slot(rng.gen_range(1u64 << 20..1u64 << 62))
        };
        let digest = random_digest(rng);
        match rng.gen_range(0..9) {
            0 => {
                let batch = Batch::noop();
                let mut m = PrePrepare {
                    lane,
                    view,
                    slot,
                    digest: batch.digest(),
                    batch,
                    sig: Signature([0; 64]),
                };
                resign_pre_prepare(&self.identity, &self.tag, &mut m);
                ReplicaMsg::PrePrepare(m)
            }
            1 => {
                let mut m = Prepare {
                    lane,
                    view,
                    slot,
                    digest,
                    replica: self.me,
                    sig: Signature([0; 64]),
                };
                resign_prepare(&self.identity, &self.tag, &mut m);
                ReplicaMsg::Prepare(m)
            }
            2 => ReplicaMsg::Commit(Commit {
                lane,
                view,
                slot,
                digest,
                replica: self.me,
            }),
            3 => {
                let mut m = ViewChange {
                    lane,
                    new_view: view,
                    stable: None,
                    prepared: vec![],
                    pre_prepared: vec![],
                    replica: self.me,
                    sig: Signature([0; 64]),
                };
                resign_view_change(&self.identity, &self.tag, &mut m);
                ReplicaMsg::ViewChange(m)
            }
            4 => {
                let mut m = CheckpointVote {
                    seq: Seq(slot.0),
                    state_digest: digest,
                    replica: self.me,
                    sig: Signature([0; 64]),
                };
                resign_checkpoint(&self.identity, &self.tag, &mut m);
                ReplicaMsg::Checkpoint(m)
            }
            5 if rng.gen_bool(0.5) => ReplicaMsg::Statuses(StatusBundle {
                stable_seq: Seq(slot.0),
                lanes: vec![LaneProgress {
                    lane,
                    view,
                    next_undecided: slot,
                    suspects: slot.0 % 2 == 0,
                    awaits_new_view: false,
                }],
            }),
            5 => ReplicaMsg::Status(Status {
                lane,
                view,
                next_undecided: slot,
                stable_seq: Seq(slot.0),
                suspects: slot.0 % 2 == 0,
                awaits_new_view: false,
            }),
            6 => ReplicaMsg::Decided(Decided { lane, slot, digest }),
            7 => ReplicaMsg::FetchBatch(FetchBatch { lane, slot, digest }),
            _ => {
                if rng.gen_bool(0.5) {
                    ReplicaMsg::StateRequest(StateRequest { min_seq: Seq(slot.0) })
                } else {
                    ReplicaMsg::BatchReply(BatchReply {
                        lane,
                        slot,
                        batch: Batch::noop(),
                    })
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{ClientId, RequestSeq};
    use rand::SeedableRng;

    fn id(i: u8) -> Identity {
        Identity::from_seed(&[i])
    }

    fn tag() -> ClusterTag {
        ClusterTag::from_digest(Digest::of(b"byzantine tests"))
    }

    fn request(seq: u64) -> Request {
        Request::with_signature(
            &tag(),
            ClientId(1),
            RequestSeq(seq),
            0,
            Bytes::from_static(b"op"),
            &id(9),
        )
    }

    fn pre_prepare(me: &Identity, batch: Batch) -> PrePrepare {
        let mut m = PrePrepare {
            lane: LaneId(0),
            view: View(0),
            slot: Slot(3),
            digest: batch.digest(),
            batch,
            sig: Signature([0; 64]),
        };
        resign_pre_prepare(me, &tag(), &mut m);
        m
    }

    fn verify_pp(me: &Identity, m: &PrePrepare) -> bool {
        let d = PrePrepare::signing_digest(m.lane, m.view, m.slot, &m.digest);
        me.public().verify_bound(&tag(), SigKind::PrePrepare, &d, &m.sig)
    }

    #[test]
    fn equivocating_primary_sends_two_signed_batches_consistently() {
        let me = id(0);
        let mut adv = Adversary::new(FaultKind::Equivocate, ReplicaId(0), me.clone(), tag(), 4, 1);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut c = Counters::default();
        let pp = pre_prepare(
            &me,
            Batch {
                requests: vec![request(1), request(2)],
                time_ms: 0,
            },
        );
        let mut digests = BTreeMap::new();
        for round in 0..2 {
            for to in 1..4 {
                let out = adv.outgoing(
                    &mut rng,
                    0,
                    ReplicaId(to),
                    ReplicaMsg::PrePrepare(pp.clone()),
                    &mut c,
                );
                let ReplicaMsg::PrePrepare(m) = &out[0] else {
                    panic!()
                };
                assert!(verify_pp(&me, m), "forgeries carry valid signatures");
                assert_eq!(m.digest, m.batch.digest());
                let prev = digests.insert(to, m.digest);
                if round == 1 {
                    assert_eq!(prev, Some(m.digest), "each replica always gets the same version");
                }
            }
        }
        let distinct: BTreeSet<_> = digests.values().collect();
        assert_eq!(distinct.len(), 2);
        assert!(c.faults["byz-equivocate"] > 0);
    }

    #[test]
    fn conflicting_prepares_are_validly_signed_for_another_digest() {
        let me = id(1);
        let mut adv = Adversary::new(FaultKind::ConflictingVotes, ReplicaId(1), me.clone(), tag(), 4, 1);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut c = Counters::default();
        let digest = Digest::of(b"batch");
        let mut p = Prepare {
            lane: LaneId(0),
            view: View(0),
            slot: Slot(1),
            digest,
            replica: ReplicaId(1),
            sig: Signature([0; 64]),
        };
        resign_prepare(&me, &tag(), &mut p);
        let mut seen = BTreeSet::new();
        for to in [0, 2, 3] {
            let out = adv.outgoing(&mut rng, 0, ReplicaId(to), ReplicaMsg::Prepare(p.clone()), &mut c);
            let ReplicaMsg::Prepare(m) = &out[0] else { panic!() };
            let d = Prepare::signing_digest(m.lane, m.view, m.slot, &m.digest, m.replica);
            assert!(me.public().verify_bound(&tag(), SigKind::Prepare, &d, &m.sig));
            seen.insert(m.digest);
        }
        assert_eq!(
            seen.len(),
            2,
            "some replicas see the real vote, others a conflicting one"
        );
    }

    #[test]
    fn silent_sends_nothing_and_replays_resend_history() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut c = Counters::default();
        let msg = ReplicaMsg::Decided(Decided {
            lane: LaneId(0),
            slot: Slot(0),
            digest: Digest::of(b"x"),
        });
        let mut silent = Adversary::new(FaultKind::Silent, ReplicaId(2), id(2), tag(), 4, 1);
        assert!(silent
            .outgoing(&mut rng, 0, ReplicaId(0), msg.clone(), &mut c)
            .is_empty());
        assert!(silent.reply(&mut rng, Bytes::from_static(b"r"), &mut c).is_none());
        let mut replay = Adversary::new(FaultKind::Replay, ReplicaId(2), id(2), tag(), 4, 1);
        let mut extra = 0;
        for _ in 0..50 {
            extra += replay
                .outgoing(&mut rng, 0, ReplicaId(0), msg.clone(), &mut c)
                .len()
                - 1;
        }
        assert!(extra > 0);
        assert_eq!(c.faults["byz-replay"], extra as u64);
    }

    #[test]
    fn flooding_is_bounded_per_second_and_signed() {
        let me = id(3);
        let mut adv = Adversary::new(FaultKind::Flood, ReplicaId(3), me.clone(), tag(), 4, 2);
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let mut c = Counters::default();
        let msg = ReplicaMsg::StateRequest(StateRequest { min_seq: Seq(0) });
        let mut total = 0;
        for _ in 0..5_000 {
            for m in adv
                .outgoing(&mut rng, 10, ReplicaId(0), msg.clone(), &mut c)
                .into_iter()
                .skip(1)
            {
                total += 1;
                if let ReplicaMsg::PrePrepare(pp) = &m {
                    assert!(verify_pp(&me, pp));
                }
            }
        }
        assert_eq!(total, FLOOD_PER_SECOND as usize);
    }

    /// A corrupting replica's STATUS claims to lack what it holds or to
    /// suspect a later view, always with `suspects` set (dispel reads it as
    /// "re-send me your epochs").
    #[test]
    fn a_corrupted_status_claims_to_lack_epochs_or_suspect_a_later_view() {
        let me = id(0);
        let mut adv = Adversary::new(FaultKind::Corrupt, ReplicaId(0), me, tag(), 4, 1);
        let mut c = Counters::default();
        let (mut behind, mut later) = (0, 0);
        for i in 0..64u64 {
            let st = Status {
                lane: LaneId(0),
                view: View(2),
                next_undecided: Slot(300 + i),
                stable_seq: Seq(128),
                suspects: false,
                awaits_new_view: false,
            };
            let mut rng = ChaCha8Rng::seed_from_u64(i);
            let out = adv.outgoing(&mut rng, 0, ReplicaId(1), ReplicaMsg::Status(st.clone()), &mut c);
            let ReplicaMsg::Status(got) = &out[0] else {
                panic!("{out:?}")
            };
            if *got == st {
                continue;
            }
            assert!(got.suspects);
            if got.next_undecided < st.next_undecided {
                assert!(st.next_undecided.0 - got.next_undecided.0 <= 256);
                behind += 1;
            } else {
                assert!(got.view > st.view, "{got:?}");
                later += 1;
            }
        }
        assert!(behind > 5 && later > 5, "{behind} {later}");
        assert_eq!(c.faults["byz-false-status"], behind + later);
    }

    #[test]
    fn corruption_never_panics_on_any_message_kind() {
        let me = id(0);
        let mut adv = Adversary::new(FaultKind::Corrupt, ReplicaId(0), me.clone(), tag(), 4, 1);
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut c = Counters::default();
        adv.observe(&ReplicaMsg::PrePrepare(pre_prepare(
            &me,
            Batch {
                requests: vec![request(1)],
                time_ms: 0,
            },
        )));
        let mut flooder = Adversary::new(FaultKind::Flood, ReplicaId(0), me.clone(), tag(), 4, 1);
        for i in 0..400 {
            let m = flooder.flood_message(&mut rng);
            let m = if i % 7 == 0 {
                ReplicaMsg::PrePrepare(pre_prepare(
                    &me,
                    Batch {
                        requests: vec![request(2)],
                        time_ms: 0,
                    },
                ))
            } else {
                m
            };
            let out = adv.outgoing(&mut rng, 0, ReplicaId(1), m, &mut c);
            assert_eq!(out.len(), 1);
        }
        assert!(c.faults["byz-corrupt"] > 100);
    }
}
