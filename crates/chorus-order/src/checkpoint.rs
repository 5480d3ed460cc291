//! Checkpoints (PBFT §4.3, COP §4.2.2).
//!
//! Every K = `checkpoint_interval` global positions the replica asks its
//! executor for a snapshot (`Action::TakeCheckpoint`), signs a vote over the
//! state digest it gets back, and broadcasts it. 2f+1 matching votes make the
//! checkpoint stable: the certificate plus our own snapshot are persisted,
//! every lane's low watermark moves to `seq / P`, and the logs below are
//! dropped. A certificate for a checkpoint we have not reached (or reached
//! with a different digest) tells state transfer where to go.
//!
//! Duty rotation (COP §4.2.2): see `roles::checkpoint_duty_lane`.

use crate::certs::verify_vote_sig;
use crate::counters::Cx;
use bytes::Bytes;
use chorus_core::{
    CheckpointCert, CheckpointVote, ClusterConfig, ClusterTag, Digest, Identity, ReplicaId, ReplicaMsg, Seq,
    SigKind, Signature,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A stable checkpoint with the state it certifies.
/// Digests one replica may have votes counted for at one position: a
/// correct replica signs one; an equivocator is held to two, which bounds
/// memory and is all a relayed copy needs.
const MAX_DIGESTS_PER_VOTER: usize = 2;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StableCheckpoint {
    pub cert: CheckpointCert,
    pub snapshot: Bytes,
}

/// What a vote (ours or a peer's) led to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VoteOutcome {
    Nothing,
    /// A new stable checkpoint whose state we hold.
    Stable(StableCheckpoint),
    /// A valid certificate for a state we do not hold: fetch it.
    CertWithoutState(CheckpointCert),
}

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub struct Checkpointer {
    cfg: Arc<ClusterConfig>,
    me: ReplicaId,
    identity: Identity,
    /// What our votes are bound to (`domain.rs`).
    tag: ClusterTag,
    stable: Option<StableCheckpoint>,
    /// Our own snapshots above the stable checkpoint, awaiting their quorum.
    own: BTreeMap<Seq, (Digest, Bytes)>,
    /// Our own votes (kept for retransmission), the stable one included.
    own_votes: BTreeMap<Seq, CheckpointVote>,
    /// Signed votes by (voter, digest): a replica that equivocated is
    /// counted for each digest it signed (at most `MAX_DIGESTS_PER_VOTER`),
    /// which cannot make two digests stable: two quorums share f+1 voters,
    /// one of them correct.
    votes: BTreeMap<Seq, BTreeMap<(ReplicaId, Digest), CheckpointVote>>,
    /// `TakeCheckpoint` emitted, `Checkpointed` not yet received.
    awaiting: BTreeSet<Seq>,
    /// The highest verified certificate above our stable checkpoint learnt
    /// outside the vote exchange (from a NEW-VIEW's view changes), waiting
    /// for `take_learnt` to adopt it.
    learnt: Option<CheckpointCert>,
    /// Stable certificates that disagreed with our own snapshot, counted once
    /// per position (`status().state_divergences`, a replica metric).
    divergences: u64,
    /// The highest position whose divergence was reported.
    last_divergence: Option<Seq>,
}

impl Checkpointer {
    pub fn new(cfg: Arc<ClusterConfig>, me: ReplicaId, identity: Identity) -> Checkpointer {
        Checkpointer {
            tag: ClusterTag::of(&cfg),
            cfg,
            me,
            identity,
            stable: None,
            own: BTreeMap::new(),
            own_votes: BTreeMap::new(),
            votes: BTreeMap::new(),
            awaiting: BTreeSet::new(),
            learnt: None,
            divergences: 0,
            last_divergence: None,
        }
    }

    /// Positions at which 2f+1 replicas certified a state digest other than ours.
    pub fn divergences(&self) -> u64 {
        self.divergences
    }

    fn interval(&self) -> u64 {
        self.cfg.params.checkpoint_interval
    }

    pub fn stable_seq(&self) -> Seq {
        self.stable.as_ref().map_or(Seq(0), |s| s.cert.seq)
    }

    pub fn stable_cert(&self) -> Option<&CheckpointCert> {
        self.stable.as_ref().map(|s| &s.cert)
    }

    pub fn stable_state(&self) -> Option<(&CheckpointCert, &Bytes)> {
        self.stable.as_ref().map(|s| (&s.cert, &s.snapshot))
    }

    /// Checkpoints further ahead than every lane's window can reach are not
    /// kept: a replica that far behind uses state transfer instead.
    fn horizon(&self) -> Seq {
        let reach = self.cfg.lanes() as u64 * self.cfg.params.window_slots + self.interval();
        Seq(self.stable_seq().0.saturating_add(reach))
    }

    /// Position `seq` was delivered. Returns the checkpoint to take when
    /// `seq + 1` is a multiple of K.
    pub fn on_delivered(&mut self, seq: Seq) -> Option<Seq> {
        let c = seq.next();
        if !c.0.is_multiple_of(self.interval()) || c <= self.stable_seq() {
            return None;
        }
        self.awaiting.insert(c);
        Some(c)
    }

    /// The executor's snapshot at `seq`: vote for it.
    pub fn on_checkpointed(
        &mut self,
        cx: &mut Cx,
        seq: Seq,
        state_digest: Digest,
        snapshot: Bytes,
    ) -> VoteOutcome {
        if !self.awaiting.remove(&seq) {
            cx.reject("unexpected-checkpoint");
            return VoteOutcome::Nothing;
        }
        let vote = self.sign_vote(seq, state_digest);
        self.own.insert(seq, (state_digest, snapshot));
        self.own_votes.insert(seq, vote.clone());
        self.votes
            .entry(seq)
            .or_default()
            .insert((self.me, state_digest), vote.clone());
        cx.out.broadcast(ReplicaMsg::Checkpoint(vote));
        self.check(cx, seq)
    }

    fn sign_vote(&self, seq: Seq, state_digest: Digest) -> CheckpointVote {
        let mut vote = CheckpointVote {
            seq,
            state_digest,
            replica: self.me,
            sig: Signature([0; 64]),
        };
        let sd = CheckpointVote::signing_digest(seq, &state_digest, self.me);
        vote.sig = self.identity.sign_bound(&self.tag, SigKind::Checkpoint, &sd);
        vote
    }

    /// A vote (PBFT §4.3), from its signer or relayed by a peer that holds
    /// it in its stable certificate (`votes_for_peer`): the signature, not
    /// the link, says who voted. A relay is what lets a replica whose copy of
    /// one voter's vote differed (that voter equivocated) still reach 2f+1
    /// (dispel seed 1619: r0 sent conflicting checkpoint votes, the lagging
    /// r6 could not vote, and only r3 ever held a certificate, so r6 never
    /// learnt of two claims and could not catch up).
    pub fn on_vote(&mut self, cx: &mut Cx, _from: ReplicaId, vote: CheckpointVote) -> VoteOutcome {
        if vote.replica.index() >= self.cfg.n() {
            cx.reject("unknown-replica");
            return VoteOutcome::Nothing;
        }
        if vote.seq.0 == 0 || !vote.seq.0.is_multiple_of(self.interval()) {
            cx.reject("bad-checkpoint-seq");
            return VoteOutcome::Nothing;
        }
        if vote.seq <= self.stable_seq() {
            cx.counters.stale += 1;
            return VoteOutcome::Nothing;
        }
        if vote.seq > self.horizon() {
            cx.reject("checkpoint-beyond-horizon");
            return VoteOutcome::Nothing;
        }
        let held = self.votes.get(&vote.seq);
        if held.is_some_and(|v| v.contains_key(&(vote.replica, vote.state_digest))) {
            return VoteOutcome::Nothing;
        }
        let signed = held.map_or(0, |v| {
            v.range((vote.replica, Digest([0; 32]))..)
                .take_while(|((r, _), _)| *r == vote.replica)
                .count()
        });
        if signed >= MAX_DIGESTS_PER_VOTER {
            cx.reject("equivocation");
            return VoteOutcome::Nothing;
        }
        if let Err(reason) = verify_vote_sig(&self.cfg, &self.tag, &vote) {
            cx.reject(reason);
            return VoteOutcome::Nothing;
        }
        if signed > 0 {
            // Kept (a relayed copy may be the one the others hold), but said,
            // under its own name: unlike the other rejections this one is
            // remembered (the fuzz tests' `DEFERRED_VERDICTS`).
            cx.reject("checkpoint-equivocation");
        }
        let seq = vote.seq;
        self.votes
            .entry(seq)
            .or_default()
            .insert((vote.replica, vote.state_digest), vote);
        self.check(cx, seq)
    }

    fn check(&mut self, cx: &mut Cx, seq: Seq) -> VoteOutcome {
        let Some(votes) = self.votes.get(&seq) else {
            return VoteOutcome::Nothing;
        };
        let mut by_digest: BTreeMap<Digest, Vec<&CheckpointVote>> = BTreeMap::new();
        for v in votes.values() {
            by_digest.entry(v.state_digest).or_default().push(v);
        }
        let voters = votes
            .keys()
            .map(|(r, _)| *r)
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let largest = by_digest.values().map(Vec::len).max().unwrap_or(0);
        let Some((digest, quorum)) = by_digest.into_iter().find(|(_, v)| v.len() >= self.cfg.quorum()) else {
            // Correct replicas never disagree on a state digest; when the
            // votes are so split that no digest can reach 2f+1 any more, the
            // checkpoint never becomes stable and nothing repairs it (issue
            // 17: four replicas, four totals, and no replica said a word).
            let unheard = self.cfg.n().saturating_sub(voters);
            if largest + unheard < self.cfg.quorum() && self.last_divergence.is_none_or(|s| s < seq) {
                self.last_divergence = Some(seq);
                self.divergences += 1;
                let ours = self
                    .own
                    .get(&seq)
                    .map(|(d, _)| d.to_string())
                    .unwrap_or_else(|| "none".into());
                tracing::error!(
                    position = seq.0,
                    %ours,
                    "state divergence: the checkpoint at position {} cannot become stable, the replicas' state digests disagree (ours {ours}, at most {largest} of {} agree)",
                    seq.0,
                    voters
                );
            }
            return VoteOutcome::Nothing;
        };
        let cert = CheckpointCert {
            seq,
            state_digest: digest,
            votes: quorum.into_iter().cloned().collect(),
        };
        match self.own.get(&seq) {
            Some((mine, _)) if *mine == digest => {
                let (_, snapshot) = self.own.remove(&seq).unwrap_or_default();
                let stable = StableCheckpoint { cert, snapshot };
                self.adopt(stable.clone());
                VoteOutcome::Stable(stable)
            }
            Some((mine, _)) => {
                // 2f+1 replicas agree on a state we do not have: our executor
                // diverged (issue 17: a service whose access sets lie, or a
                // non-deterministic one). Only state transfer can repair it;
                // an operator must hear of it, once per position.
                cx.reject("state-divergence");
                if self.last_divergence.is_none_or(|s| s < seq) {
                    self.last_divergence = Some(seq);
                    self.divergences += 1;
                    tracing::error!(
                        position = seq.0,
                        ours = %mine,
                        certified = %digest,
                        "state divergence: our checkpoint at position {} has digest {mine}, the stable certificate says {digest}; fetching the certified state",
                        seq.0
                    );
                }
                VoteOutcome::CertWithoutState(cert)
            }
            None => VoteOutcome::CertWithoutState(cert),
        }
    }

    fn adopt(&mut self, stable: StableCheckpoint) {
        let seq = stable.cert.seq;
        debug_assert!(seq > self.stable_seq(), "stable checkpoints only move forward");
        self.own = self.own.split_off(&seq.next());
        self.own_votes = self.own_votes.split_off(&seq);
        self.votes = self.votes.split_off(&seq.next());
        self.awaiting = self.awaiting.split_off(&seq.next());
        self.stable = Some(stable);
    }

    /// Remember a certificate that was verified elsewhere (PBFT §4.4: the
    /// stable checkpoint proofs carried in VIEW-CHANGE / NEW-VIEW). Only the
    /// highest is kept.
    pub fn learn_cert(&mut self, cert: &CheckpointCert) {
        if cert.seq <= self.stable_seq() || self.learnt.as_ref().is_some_and(|c| c.seq >= cert.seq) {
            return;
        }
        self.learnt = Some(cert.clone());
    }

    /// PBFT §4.3: 2f+1 signed votes prove the checkpoint, wherever we got
    /// them from. If we hold our own snapshot with the certified digest, the
    /// learnt certificate makes it stable for us too. Without this a replica
    /// whose peers' votes went missing (one correct voter reached the
    /// checkpoint by state transfer and never voted) keeps its window below
    /// slots the others are deciding and cannot help decide them.
    pub fn take_learnt(&mut self) -> Option<StableCheckpoint> {
        let cert = self.learnt.take()?;
        if cert.seq <= self.stable_seq() {
            return None;
        }
        match self.own.get(&cert.seq) {
            Some((mine, _)) if *mine == cert.state_digest => {
                let (_, snapshot) = self.own.remove(&cert.seq).unwrap_or_default();
                let stable = StableCheckpoint { cert, snapshot };
                self.adopt(stable.clone());
                Some(stable)
            }
            // Our snapshot may still be coming; a state we do not hold is
            // state transfer's job (it was told about the certificate).
            _ => {
                self.learnt = Some(cert);
                None
            }
        }
    }

    /// Adopt a checkpoint whose state was installed (state transfer, recovery).
    ///
    /// The driver checked the state against the certificate, so we hold that
    /// state now and vote for it like one we computed (PBFT §4.3: a vote says
    /// "my state at n has digest d"). Without our vote, a certificate that
    /// only the Byzantine replicas hold (they withheld their own votes from
    /// the correct ones) can stay short of 2f+1 at every correct replica
    /// that reached the checkpoint by execution, when those need every
    /// correct vote: their windows fill and the lanes stall (issue 8,
    /// findings 5 and 12). `votes_for_peer` hands it to peers still below.
    pub fn install(&mut self, cert: CheckpointCert, snapshot: Bytes) {
        if cert.seq <= self.stable_seq() {
            return;
        }
        let vote = self.sign_vote(cert.seq, cert.state_digest);
        self.adopt(StableCheckpoint { cert, snapshot });
        self.own_votes.insert(vote.seq, vote);
    }

    /// Our votes above the stable checkpoint, re-sent on every status tick so
    /// a lost vote does not stall the window.
    pub fn pending_votes(&self) -> Vec<CheckpointVote> {
        self.own_votes
            .range(self.stable_seq().next()..)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// For a peer that reports an older stable checkpoint: the 2f+1 votes of
    /// our stable certificate, and our own vote for it if the certificate
    /// lacks it (we installed the state), so the peer can make the
    /// checkpoint stable too, or learn that one exists and fetch the state
    /// (`on_vote` takes relayed votes).
    pub fn votes_for_peer(&self, peer_stable: Seq) -> Vec<CheckpointVote> {
        let Some(s) = self.stable.as_ref().filter(|s| peer_stable < s.cert.seq) else {
            return Vec::new();
        };
        let mut votes = s.cert.votes.clone();
        if let Some(own) = self.own_votes.get(&s.cert.seq) {
            if !votes.iter().any(|v| v.replica == own.replica) {
                votes.push(own.clone());
            }
        }
        votes
    }
}
