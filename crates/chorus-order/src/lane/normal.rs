//! Normal-case operation (PBFT §4.2): pre-prepare, prepare, commit.

use super::slot::Accepted;
use super::{Admit, Decision, Lane, LaneEnv, LaneOutput};
use crate::counters::Cx;
use crate::io::{PersistRecord, RejectReason};
use crate::rcc_switch::Ownership;
use crate::roles::{lane_quorum, new_view_primary, prepares_needed, slot_leader_in};
use chorus_core::{
    Authenticator, Batch, ClientId, Commit, Digest, OrderingMode, PrePrepare, Prepare, PrepareAuth,
    PreparedCert, ReplicaId, ReplicaMsg, RequestSeq, SigKind, Signature, Slot, UnverifiableRequest,
};
use std::collections::BTreeSet;
use std::sync::Arc;

/// How the requests of a fresh batch fared at this replica.
enum Verified {
    /// Every request verified here.
    Locally,
    /// Some MAC-vector requests did not (these, up to
    /// `MAX_UNVERIFIABLE_HINTS`); f+1 vouchers must make up for them.
    NeedsVouchers(Vec<(ClientId, RequestSeq, Digest, Digest)>),
    /// RCC §III-E: a switch not yet delivered here could still change who
    /// owns a request in this round (`rcc_switch`).
    OwnerUnknown,
}

/// Reports sent per held pre-prepare (`hold_pre_prepare`): a batch full
/// of one liar's requests costs the others no more than this.
const MAX_UNVERIFIABLE_HINTS: usize = 4;

impl Lane {
    /// Who may pre-prepare `slot` in the current view: the new-view primary
    /// inside the re-proposal range, the slot's leader above it, nobody below
    /// the new view's checkpoint (those slots are covered by a stable one).
    pub(crate) fn proposer_of(&self, slot: Slot) -> Option<ReplicaId> {
        if let Some(nv) = &self.nv {
            if slot < nv.low {
                return None;
            }
            if slot < nv.end() {
                return Some(new_view_primary(&self.cfg, self.id, self.view));
            }
        }
        Some(self.leader_of(slot))
    }

    /// The fresh-proposal leader of `slot` in the current view: the rotation
    /// minus the leaders the view's NEW-VIEW excluded (`penalty.rs`).
    pub fn leader_of(&self, slot: Slot) -> ReplicaId {
        slot_leader_in(&self.cfg, self.id, slot, self.view, &self.excluded)
    }

    /// RCC §III-C: `slot` is a round in which this instance is stopped by
    /// the current view's stop (its coordinating leader proposes it).
    pub fn is_stopped_slot(&self, slot: Slot) -> bool {
        self.cfg.params.mode == OrderingMode::Rcc
            && slot >= self.fresh_start()
            && self.leader_of(slot) != self.cfg.instance_primary(self.id)
    }

    /// RCC: while the current view's stop still covers the next undecided
    /// round, the round at which the instance's primary resumes.
    pub fn rcc_stopped_until(&self) -> Option<Slot> {
        if self.cfg.params.mode != OrderingMode::Rcc {
            return None;
        }
        let primary = self.cfg.instance_primary(self.id);
        self.excluded
            .iter()
            .find(|e| e.replica == primary && e.until > self.next_undecided)
            .map(|e| e.until)
    }

    pub(crate) fn reproposal_digest(&self, slot: Slot) -> Option<Digest> {
        self.nv.as_ref().and_then(|nv| nv.digest(slot))
    }

    /// The first slot fresh proposals of the current view may use.
    pub(crate) fn fresh_start(&self) -> Slot {
        self.nv.as_ref().map_or(self.low, |nv| nv.end().max(self.low))
    }

    /// The lowest slot at or above `fresh_start` that has neither a
    /// pre-prepare in the current view nor a decision.
    pub fn next_free_slot(&self) -> Slot {
        // Every slot below `next_undecided` is decided: start there rather
        // than walking the whole window on every call.
        let mut s = self.fresh_start().max(self.next_undecided);
        let high = self.high();
        while s < high {
            match self.slots.get(&s) {
                Some(st) if st.decided.is_some() || st.accepted_in(self.view).is_some() => s = s.next(),
                _ => break,
            }
        }
        s
    }

    /// The slot this replica should pre-prepare next, if it leads it and it is
    /// below `limit` (window and lane drift, COP §4.2.2).
    ///
    /// Proposals of a lane are serialised: the leader of slot `s` waits until
    /// it has seen the pre-prepare of `s - 1` (or its decision). With
    /// block-wise rotation consecutive slots have different leaders, and this
    /// is what lets a leader see which requests its predecessor already
    /// proposed (they are in flight), so the same requests are not proposed
    /// twice; the pipeline is still as deep as the window allows, because
    /// each pre-prepare only costs one message delay.
    ///
    /// `eager`: a request has waited long enough that the leaders before us
    /// evidently do not have it (lost on the way, or censored). Then we may
    /// propose at the next slot we lead even though earlier slots are still
    /// empty; their leaders fill them (with no-ops if they have nothing),
    /// because their slots are now behind the frontier. No view change needed.
    pub fn proposal_slot(&self, limit: Slot, eager: bool) -> Option<Slot> {
        if !self.active {
            return None;
        }
        let end = limit.min(self.high());
        let mut s = self.next_free_slot();
        while s < end {
            if self.leader_of(s) == self.me {
                return Some(s);
            }
            if !eager {
                return None;
            }
            s = s.next();
            while s < end
                && self
                    .slots
                    .get(&s)
                    .is_some_and(|st| st.decided.is_some() || st.accepted_in(self.view).is_some())
            {
                s = s.next();
            }
        }
        None
    }

    fn may_propose_at(&self, slot: Slot) -> bool {
        self.active
            && slot >= self.fresh_start()
            && slot < self.high()
            && self.leader_of(slot) == self.me
            && self
                .slots
                .get(&slot)
                .is_none_or(|st| st.decided.is_none() && st.accepted_in(self.view).is_none())
    }

    /// Pre-prepare `batch` at `slot` (which must be `proposal_slot`).
    pub fn propose(&mut self, cx: &mut Cx, slot: Slot, batch: Batch) -> LaneOutput {
        let mut lo = LaneOutput::default();
        if !self.may_propose_at(slot) {
            debug_assert!(false, "propose at {slot:?} which is not ours to propose");
            cx.reject("bad-proposal");
            return lo;
        }
        cx.counters.proposals += 1;
        cx.counters.lane_mut(self.id.0).proposals += 1;
        if batch.is_noop() {
            cx.counters.noop_proposals += 1;
        }
        let digest = batch.digest();
        self.send_pre_prepare(cx, slot, digest, Arc::new(batch), &mut lo);
        lo
    }

    /// Sign, persist and broadcast our pre-prepare (fresh or re-proposal).
    /// Persist first: after a crash we must know what we proposed.
    pub(crate) fn send_pre_prepare(
        &mut self,
        cx: &mut Cx,
        slot: Slot,
        digest: Digest,
        batch: Arc<Batch>,
        lo: &mut LaneOutput,
    ) {
        let (lane, view, me) = (self.id, self.view, self.me);
        debug_assert!(self.active, "pre-prepare while changing view");
        let sd = PrePrepare::signing_digest(lane, view, slot, &digest);
        let sig = self.identity.sign_bound(&self.tag, SigKind::PrePrepare, &sd);
        let mac = self.cfg.params.prepare_auth == PrepareAuth::Mac;
        let st = self.slot_mut(slot);
        debug_assert!(
            st.accepted_in(view).is_none(),
            "second pre-prepare for {slot:?} in {view:?}"
        );
        st.store_batch(digest, batch.clone());
        if mac {
            st.note_pre_prepared(digest, view);
        }
        st.pp = Some(Accepted {
            view,
            digest,
            proposer: Some(me),
            sig: Some(sig),
            at: cx.now,
        });
        cx.out.persist(PersistRecord::Accepted {
            lane,
            view,
            slot,
            digest,
            batch: batch.clone(),
        });
        cx.out.broadcast(ReplicaMsg::PrePrepare(PrePrepare {
            lane,
            view,
            slot,
            digest,
            batch: (*batch).clone(),
            sig,
        }));
        self.note_seen(slot);
        self.report_pre_prepared(slot, batch, lo);
        self.check_prepared(cx, slot, lo);
    }

    /// Tell the pool which requests are now in flight at `slot` — unless the
    /// slot is decided here already (a NEW-VIEW re-proposes decided slots
    /// too): no decision would follow to take them out of flight again, and
    /// they would hold pool space for ever.
    fn report_pre_prepared(&self, slot: Slot, batch: Arc<Batch>, lo: &mut LaneOutput) {
        if self.slots.get(&slot).is_some_and(|st| st.decided.is_some()) {
            return;
        }
        lo.pre_prepared.push((slot, batch));
    }

    pub(crate) fn sign_prepare(&self, slot: Slot, digest: Digest) -> Prepare {
        // Under `PrepareAuth::Mac` the channel's MAC authenticates the
        // prepare and no VIEW-CHANGE carries it, so it is not signed.
        let sig = match self.cfg.params.prepare_auth {
            PrepareAuth::Signature => {
                let sd = Prepare::signing_digest(self.id, self.view, slot, &digest, self.me);
                self.identity.sign_bound(&self.tag, SigKind::Prepare, &sd)
            }
            PrepareAuth::Mac => Signature([0; 64]),
        };
        Prepare {
            lane: self.id,
            view: self.view,
            slot,
            digest,
            replica: self.me,
            sig,
        }
    }

    pub(crate) fn on_pre_prepare(
        &mut self,
        cx: &mut Cx,
        from: ReplicaId,
        pp: PrePrepare,
        env: &LaneEnv,
        lo: &mut LaneOutput,
    ) {
        match self.classify(pp.view, pp.slot) {
            Admit::Stale => return cx.counters.stale += 1,
            Admit::Buffer => return self.park(cx, from, ReplicaMsg::PrePrepare(pp)),
            Admit::Now => {}
        }
        let Some(proposer) = self.proposer_of(pp.slot) else {
            return cx.reject("below-new-view");
        };
        if from != proposer {
            return cx.reject("wrong-leader");
        }
        let sd = PrePrepare::signing_digest(pp.lane, pp.view, pp.slot, &pp.digest);
        if !self.keys.verify(from, SigKind::PrePrepare, &sd, &pp.sig) {
            return cx.reject("bad-signature");
        }
        for r in &pp.batch.requests {
            env.hint.share_digest(r);
        }
        if pp.batch.digest() != pp.digest {
            return cx.reject("bad-digest");
        }
        let reproposal = self.reproposal_digest(pp.slot);
        if reproposal.is_some_and(|d| d != pp.digest) {
            return cx.reject("reproposal-mismatch");
        }
        if let Some((_, held)) = self.slots.get(&pp.slot).and_then(|s| s.held.as_ref()) {
            if held.view == pp.view {
                if held.digest != pp.digest {
                    return cx.reject("equivocation");
                }
                // A retransmission of a pre-prepare still waiting for vouchers.
                return self.release_held(cx, pp.slot, lo);
            }
        }
        if let Some(acc) = self.slots.get_mut(&pp.slot).and_then(|s| s.pp.as_mut()) {
            if acc.view == pp.view {
                if acc.digest != pp.digest {
                    return cx.reject("equivocation");
                }
                // A retransmission. After recovery it brings back the
                // proposer's signature we could not persist.
                if acc.sig.is_none() {
                    acc.sig = Some(pp.sig);
                    self.check_prepared(cx, pp.slot, lo);
                }
                return;
            }
        }
        // A re-proposed digest was prepared by 2f+1 replicas, f+1 of them
        // correct, who verified its requests (under `PrepareAuth::Mac`: f+1
        // say they pre-prepared it, one of them correct, `plan.rs`); fresh
        // batches are verified here.
        if reproposal.is_none() {
            match self.verify_batch(pp.slot, &pp.batch, env) {
                Err(reason) => return cx.reject(reason),
                Ok(Verified::Locally) => {}
                Ok(Verified::NeedsVouchers(failed)) => {
                    return self.hold_pre_prepare(cx, from, pp, failed, lo)
                }
                Ok(Verified::OwnerUnknown) => return lo.owner_held.push((from, pp)),
            }
        }
        self.accept_pre_prepare(cx, from, pp, lo);
    }

    /// Aardvark's "Big MAC" attack (Clement et al., NSDI'09 §4.2): a client
    /// whose MAC vector is valid only at the proposer and a few others must
    /// not make this replica refuse a correct proposer's pre-prepare, which
    /// would cost a view change per such request. A MAC this replica cannot
    /// check proves nothing against the proposer (only the client and the
    /// replica it is meant for can check it), so the pre-prepare is held
    /// instead of rejected, and accepted once f+1 distinct replicas vouch for
    /// its batch: the proposer by pre-preparing it, the others by preparing
    /// it. A correct replica only does either after every request verified
    /// at it (or was vouched for in turn), so among f+1 vouchers one correct
    /// replica verified each request: it is authentic (DESIGN §6).
    ///
    /// Every replica hears which requests failed here
    /// (`ReplicaMsg::Unverifiable`): those that verified the same request
    /// from its client learn from f+1 such reports that the client's vector
    /// is partial, and stop proposing its requests (`pool/client_penalty.rs`).
    fn hold_pre_prepare(
        &mut self,
        cx: &mut Cx,
        from: ReplicaId,
        pp: PrePrepare,
        failed: Vec<(ClientId, RequestSeq, Digest, Digest)>,
        lo: &mut LaneOutput,
    ) {
        cx.counters.held_for_vouchers += 1;
        for (client, seq, content, auth) in failed {
            cx.out.broadcast(ReplicaMsg::Unverifiable(UnverifiableRequest {
                lane: pp.lane,
                view: pp.view,
                slot: pp.slot,
                client,
                seq,
                content,
                auth,
            }));
        }
        let slot = pp.slot;
        self.slot_mut(slot).held = Some((from, pp));
        self.release_held(cx, slot, lo);
    }

    /// Accept the held pre-prepare of `slot` once f other replicas prepared
    /// its digest in its view (prepares are channel-authenticated: `from`
    /// is their sender, as for commits). A held pre-prepare of an older
    /// view, or of a slot accepted or decided meanwhile, is dropped.
    pub(crate) fn release_held(&mut self, cx: &mut Cx, slot: Slot, lo: &mut LaneOutput) {
        let (view, me, f) = (self.view, self.me, self.cfg.f());
        let Some(st) = self.slots.get_mut(&slot) else {
            return;
        };
        let Some((proposer, pp)) = st.held.as_ref() else {
            return;
        };
        if pp.view != view || st.decided.is_some() || st.accepted_in(view).is_some() {
            st.held = None;
            return;
        }
        let vouchers = st
            .prepares
            .values()
            .filter(|p| p.view == view && p.digest == pp.digest && p.replica != *proposer && p.replica != me)
            .count();
        if vouchers < f {
            return;
        }
        let Some((proposer, pp)) = st.held.take() else {
            return;
        };
        debug_assert_eq!(self.proposer_of(slot), Some(proposer));
        self.accept_pre_prepare(cx, proposer, pp, lo);
    }

    /// Every request of a proposed batch must be authentic (DESIGN §6) and
    /// owned by this lane (DESIGN §4: one owner lane per client, so no
    /// request is proposed by two lanes), the batch within limits, and no
    /// request twice. A MAC vector whose entry for this replica is wrong is
    /// not held against the proposer: see `hold_pre_prepare`.
    fn verify_batch(&mut self, slot: Slot, batch: &Batch, env: &LaneEnv) -> Result<Verified, &'static str> {
        let hint = env.hint;
        let p = &self.cfg.params;
        if batch.requests.len() > p.batch_max_requests as usize
            || batch.op_bytes() > p.batch_max_bytes as usize + p.max_op_bytes as usize
        {
            return Err("batch-too-large");
        }
        // Issue 17: the batch's time becomes the executor's agreed time; a
        // leader from the future is refused (and so replaced by a view
        // change). Only fresh batches come here: re-proposals, catch-up and
        // state transfer carry batches prepared by a quorum already.
        if crate::batch_time::from_future(batch, env.wall_ms, p) {
            return Err("batch-time-future");
        }
        let mut seen = BTreeSet::new();
        let mut verified = Verified::Locally;
        let mut unknown_owner = false;
        for r in &batch.requests {
            if !seen.insert((r.client, r.seq)) {
                return Err("duplicate-request");
            }
            // Only rcc orders switches (RCC §III-E); in sarek the hint below
            // would otherwise let a leader order one as a plain op.
            if r.is_switch() && self.cfg.params.mode != OrderingMode::Rcc {
                return Err("switch-not-rcc");
            }
            // SAREK §IV-D: a re-prediction is authenticated by its 2f+1
            // replicas' certificate, not by a client, and is ordered only in
            // the partitions it adds.
            if r.is_reprediction() {
                if self.cfg.params.mode != OrderingMode::Sarek {
                    return Err("reprediction-not-sarek");
                }
                let ok = chorus_core::RePredictionCert::from_request(r).is_some_and(|c| {
                    c.body.added.iter().any(|p| u32::from(*p) == self.id.0)
                        && crate::sarek::repredict::verify_cert(&self.cfg, &self.tag, &c)
                });
                if !ok {
                    return Err("bad-reprediction");
                }
                continue;
            }
            // SAREK: the lanes PREDICT() names (the pool's hint); otherwise
            // the owner instance, RCC §III-E switches included.
            match hint.lane_owns(self.id, r) {
                Some(true) => {}
                Some(false) => return Err("wrong-lane-request"),
                None => match env.owners.ownership(self.id, slot, r) {
                    Ownership::Owned => {}
                    Ownership::NotOwned(reason) => return Err(reason),
                    Ownership::Unknown => unknown_owner = true,
                },
            }
            if hint.already_verified(r) {
                continue;
            }
            // The shape (size, flags, vector length, client) is the same at
            // every replica: a bad one is the proposer's fault, not held.
            match self.verifier.check_shape(r) {
                Ok(()) => {}
                Err(RejectReason::UnknownClient) => return Err("unknown-client"),
                Err(RejectReason::Oversized) => return Err("oversized-request"),
                Err(_) => return Err("bad-request-shape"),
            }
            match self.verifier.check(r) {
                Ok(()) => {}
                Err(RejectReason::UnknownClient) => return Err("unknown-client"),
                Err(RejectReason::Oversized) => return Err("oversized-request"),
                // Shape is fine (checked above), only our MAC entry is
                // wrong: the proposer could not have known.
                Err(RejectReason::BadAuthenticator) if matches!(r.auth, Authenticator::Macs(_)) => {
                    if !matches!(verified, Verified::NeedsVouchers(_)) {
                        verified = Verified::NeedsVouchers(Vec::new());
                    }
                    if let Verified::NeedsVouchers(failed) = &mut verified {
                        if failed.len() < MAX_UNVERIFIABLE_HINTS {
                            failed.push((r.client, r.seq, r.digest(), r.auth_digest()));
                        }
                    }
                }
                // A signature verifies everywhere or nowhere: the proposer
                // checked it, or should have.
                Err(_) => return Err("bad-request-auth"),
            }
        }
        if unknown_owner {
            return Ok(Verified::OwnerUnknown);
        }
        Ok(verified)
    }

    /// PBFT §4.2: accept, persist, then broadcast our prepare.
    fn accept_pre_prepare(&mut self, cx: &mut Cx, from: ReplicaId, pp: PrePrepare, lo: &mut LaneOutput) {
        let (lane, view, slot, digest) = (pp.lane, pp.view, pp.slot, pp.digest);
        let batch = Arc::new(pp.batch);
        let prepare = self.sign_prepare(slot, digest);
        let me = self.me;
        let mac = self.cfg.params.prepare_auth == PrepareAuth::Mac;
        let st = self.slot_mut(slot);
        st.store_batch(digest, batch.clone());
        if mac {
            st.note_pre_prepared(digest, view);
        }
        st.pp = Some(Accepted {
            view,
            digest,
            proposer: Some(from),
            sig: Some(pp.sig),
            at: cx.now,
        });
        st.prepares.insert(me, prepare.clone());
        cx.out.persist(PersistRecord::Accepted {
            lane,
            view,
            slot,
            digest,
            batch: batch.clone(),
        });
        cx.out.broadcast(ReplicaMsg::Prepare(prepare));
        self.note_seen(slot);
        self.report_pre_prepared(slot, batch, lo);
        self.check_prepared(cx, slot, lo);
    }

    pub(crate) fn on_prepare(&mut self, cx: &mut Cx, from: ReplicaId, p: Prepare, lo: &mut LaneOutput) {
        if p.replica != from {
            return cx.reject("replica-mismatch");
        }
        match self.classify(p.view, p.slot) {
            Admit::Stale => return cx.counters.stale += 1,
            Admit::Buffer => return self.park(cx, from, ReplicaMsg::Prepare(p)),
            Admit::Now => {}
        }
        let Some(proposer) = self.proposer_of(p.slot) else {
            return cx.reject("below-new-view");
        };
        if from == proposer {
            return cx.reject("prepare-from-leader");
        }
        if let Some(old) = self.slots.get(&p.slot).and_then(|s| s.prepares.get(&from)) {
            if old.digest != p.digest {
                cx.reject("equivocation");
            }
            return;
        }
        if !self.keys.knows(from) {
            return cx.reject("bad-signature");
        }
        // The signature is checked lazily in `check_prepared`; under
        // `PrepareAuth::Mac` there is none, the channel proved `from`.
        let signed = self.cfg.params.prepare_auth == PrepareAuth::Signature;
        let slot = p.slot;
        let st = self.slot_mut(slot);
        st.prepares.insert(from, p);
        if signed {
            st.unverified.insert(from);
        }
        self.release_held(cx, slot, lo);
        self.check_prepared(cx, slot, lo);
    }

    pub(crate) fn on_commit(&mut self, cx: &mut Cx, from: ReplicaId, c: Commit, lo: &mut LaneOutput) {
        // Commits are channel-authenticated only: trust `from`, and refuse a
        // commit that claims to be someone else's.
        if c.replica != from {
            return cx.reject("replica-mismatch");
        }
        match self.classify(c.view, c.slot) {
            Admit::Stale => return cx.counters.stale += 1,
            Admit::Buffer => return self.park(cx, from, ReplicaMsg::Commit(c)),
            Admit::Now => {}
        }
        if self.proposer_of(c.slot).is_none() {
            return cx.reject("below-new-view");
        }
        if let Some(old) = self.slots.get(&c.slot).and_then(|s| s.commits.get(&from)) {
            if *old != c.digest {
                cx.reject("equivocation");
            }
            return;
        }
        self.slot_mut(c.slot).commits.insert(from, c.digest);
        self.check_commit_quorum(cx, c.slot, lo);
    }

    /// PBFT §4.2: prepared(m, v, n, i) = pre-prepare + 2f matching prepares
    /// from distinct replicas other than the proposer. Then persist the
    /// certificate and broadcast our commit.
    pub(crate) fn check_prepared(&mut self, cx: &mut Cx, slot: Slot, lo: &mut LaneOutput) {
        let (view, me, lane) = (self.view, self.me, self.id);
        let needed = prepares_needed(&self.cfg);
        let Some(st) = self.slots.get_mut(&slot) else {
            return;
        };
        if st.cert.as_ref().is_some_and(|c| c.view == view) {
            return;
        }
        let Some(acc) = st.accepted_in(view) else {
            return;
        };
        let (Some(sig), Some(proposer)) = (acc.sig, acc.proposer) else {
            return;
        };
        let digest = acc.digest;
        if st.batch(&digest).is_none() {
            return;
        }
        let matching = st
            .prepares
            .values()
            .filter(|p| p.digest == digest && p.replica != proposer)
            .count();
        if matching < needed {
            return;
        }
        // Check signatures only now, and only as many as the certificate
        // needs (PBFT §4.2 needs 2f valid prepares); a bad one is dropped and
        // the sender may send it again.
        let mut valid = st
            .prepares
            .values()
            .filter(|p| p.digest == digest && p.replica != proposer && !st.unverified.contains(&p.replica))
            .count();
        let pending: Vec<ReplicaId> = st
            .prepares
            .values()
            .filter(|p| p.digest == digest && p.replica != proposer && st.unverified.contains(&p.replica))
            .map(|p| p.replica)
            .collect();
        for r in pending {
            if valid >= needed {
                break;
            }
            let ok = st.prepares.get(&r).is_some_and(|p| {
                let sd = Prepare::signing_digest(p.lane, p.view, p.slot, &p.digest, p.replica);
                self.keys.verify(r, SigKind::Prepare, &sd, &p.sig)
            });
            st.unverified.remove(&r);
            if ok {
                valid += 1;
            } else {
                st.prepares.remove(&r);
                cx.reject("bad-signature");
            }
        }
        if valid < needed {
            return;
        }
        // Under `PrepareAuth::Mac` the certificate is our claim alone (the
        // P set): unsigned prepares would prove nothing to anyone else.
        let prepares: Vec<Prepare> = match self.cfg.params.prepare_auth {
            PrepareAuth::Signature => st
                .prepares
                .values()
                .filter(|p| {
                    p.digest == digest && p.replica != proposer && !st.unverified.contains(&p.replica)
                })
                .cloned()
                .collect(),
            PrepareAuth::Mac => Vec::new(),
        };
        debug_assert!(prepares.len() >= needed || self.cfg.params.prepare_auth == PrepareAuth::Mac);
        let cert = PreparedCert {
            lane,
            view,
            slot,
            digest,
            pre_prepare_sig: sig,
            prepares,
        };
        debug_assert!(cert.prepares.len() <= self.cfg.n());
        cx.out.persist(PersistRecord::Prepared { cert: cert.clone() });
        st.cert = Some(cert);
        st.commits.insert(me, digest);
        cx.out.broadcast(ReplicaMsg::Commit(Commit {
            lane,
            view,
            slot,
            digest,
            replica: me,
        }));
        self.check_commit_quorum(cx, slot, lo);
    }

    /// PBFT §4.2: committed-local = prepared + 2f+1 matching commits.
    fn check_commit_quorum(&mut self, cx: &mut Cx, slot: Slot, lo: &mut LaneOutput) {
        let view = self.view;
        let quorum = lane_quorum(&self.cfg);
        let Some(st) = self.slots.get(&slot) else {
            return;
        };
        if st.decided.is_some() {
            return;
        }
        let Some(cert) = st.cert.as_ref().filter(|c| c.view == view) else {
            return;
        };
        let digest = cert.digest;
        let matching = st.commits.values().filter(|d| **d == digest).count();
        if matching >= quorum {
            self.decide(cx, slot, digest, lo);
        }
    }

    /// The slot is decided: persist the ledger entry and hand it on.
    pub(crate) fn decide(&mut self, cx: &mut Cx, slot: Slot, digest: Digest, lo: &mut LaneOutput) {
        let cell = self.cell(slot);
        let Some(st) = self.slots.get_mut(&slot) else {
            return;
        };
        if st.decided.is_some() {
            return;
        }
        let Some(batch) = st.batch(&digest).cloned() else {
            debug_assert!(false, "deciding {slot:?} without its batch");
            return;
        };
        st.decided = Some(digest);
        cx.out.persist(PersistRecord::Decided {
            cell,
            digest,
            batch: batch.clone(),
        });
        self.wants.remove(&slot);
        self.notices.remove(&slot);
        self.advance_next_undecided();
        if self.active {
            self.timer.failures = 0;
        }
        // Only contiguous progress re-arms the progress timer (`timer.rs`
        // compares `next_undecided`), so no `self.progressed` here.
        self.note_seen(slot);
        cx.counters.decided += 1;
        cx.counters.lane_mut(self.id.0).decided += 1;
        lo.decided.push(Decision { slot, digest, batch });
    }

    /// Sign a pre-prepare again (Ed25519 is deterministic: the same bytes as
    /// the one sent before a crash).
    pub(crate) fn resign_pre_prepare(&self, slot: Slot, digest: &Digest) -> Signature {
        let sd = PrePrepare::signing_digest(self.id, self.view, slot, digest);
        self.identity.sign_bound(&self.tag, SigKind::PrePrepare, &sd)
    }
}
