//! View change per lane (PBFT §4.4, liveness rules of §4.5.2).
//!
//! A replica that suspects the lane (its progress timer expired) moves to
//! `view + 1`, stops accepting normal-case messages of the old view, persists
//! the view and broadcasts a signed VIEW-CHANGE with its stable checkpoint
//! certificate and one prepared certificate per slot above it. The new-view
//! primary (`roles::new_view_primary`) collects 2f+1 valid ones, computes the
//! re-proposals (`plan.rs`) and broadcasts NEW-VIEW, then pre-prepares every
//! re-proposed slot itself. Backups validate NEW-VIEW completely (every view
//! change, every certificate, and the recomputed re-proposals) before
//! entering the view.

use super::penalty::{check_exclusions, rcc_stop};
use super::plan::{plan_new_view, NewViewPlan};
use super::{Lane, LaneEnv, LaneOutput, NvRange, StoredVc, WantReason, MAX_VIEW};
use crate::certs::{low_slot_of, verify_view_change, verify_view_change_sig};
use crate::counters::{Cx, ViewChangeCause};
use crate::io::PersistRecord;
use crate::roles::new_view_primary;
use chorus_core::{
    Batch, Digest, Exclusion, NewView, OrderingMode, PrePrepared, PrepareAuth, ReplicaId, ReplicaMsg,
    SigKind, Signature, Slot, View, ViewChange,
};
use std::collections::BTreeSet;
use std::sync::Arc;

impl Lane {
    /// Move to `target` and ask for it (PBFT §4.4). Persist the view before
    /// the VIEW-CHANGE leaves: after a crash we must not act in older views.
    pub(crate) fn start_view_change(
        &mut self,
        cx: &mut Cx,
        target: View,
        cause: ViewChangeCause,
        env: &LaneEnv,
        lo: &mut LaneOutput,
    ) {
        if target.0 >= MAX_VIEW {
            return cx.reject("view-overflow");
        }
        if target < self.view || (target == self.view && self.active) {
            debug_assert!(false, "view change to {target:?} from {:?}", self.view);
            return;
        }
        tracing::debug!(lane = ?self.id, from = ?self.view, to = ?target, "starting view change");
        self.view = target;
        self.active = false;
        // A suspicion is about the view we leave (`timer.rs`).
        self.suspecting = false;
        self.nv = None;
        self.nv_msg = None;
        self.excluded.clear();
        for st in self.slots.values_mut() {
            st.clear_votes();
        }
        cx.out.persist(PersistRecord::View {
            lane: self.id,
            view: target,
        });
        self.own_vc = None;
        self.vcs.retain(|_, s| s.vc.new_view >= target);
        self.send_own_view_change(cx, env);
        // We never act in a view below `target` again: say so, signed, so
        // that our departure counts towards a timeout certificate for the
        // view we left (`timeout_cert.rs`).
        if let Some(left) = target.0.checked_sub(1) {
            self.give_up(cx, View(left));
        }
        cx.counters.view_changes += 1;
        *cx.counters.view_change_causes.entry(cause.as_str()).or_insert(0) += 1;
        cx.counters.lane_mut(self.id.0).view_changes += 1;
        self.timer.failures = self.timer.failures.saturating_add(1);
        self.stop_timer(cx);
        self.try_new_view(cx, env, lo);
    }

    /// Build, keep and broadcast our VIEW-CHANGE for the current (target)
    /// view — unless records restored after a crash still wait above our
    /// window (`recovery.rs`): a NEW-VIEW had moved our low to a checkpoint
    /// we learnt (it is not persisted), and a VIEW-CHANGE from the older
    /// window would say nothing about the slots we prepared up there, which
    /// a NEW-VIEW reads as "nothing prepared" (PBFT §4.4 needs every slot
    /// above the checkpoint we send). Then we send none until the window
    /// reaches them (a re-learnt NEW-VIEW or a state transfer), from the
    /// status tick; being silent is safe, the others' 2f+1 suffice.
    pub(crate) fn send_own_view_change(&mut self, cx: &mut Cx, env: &LaneEnv) {
        debug_assert!(!self.active && self.own_vc.is_none());
        self.vc_withheld = !self.recovered_above.is_empty();
        if self.vc_withheld {
            tracing::debug!(lane = ?self.id, view = ?self.view, "view change withheld: recovered records above the window");
            return;
        }
        let vc = self.build_view_change(env);
        cx.out.broadcast(ReplicaMsg::ViewChange(vc.clone()));
        self.vcs.insert(
            self.me,
            StoredVc {
                vc: vc.clone(),
                valid: Some(true),
            },
        );
        self.own_vc = Some(vc);
    }

    /// Our VIEW-CHANGE for the current (target) view: the stable checkpoint
    /// and, for every slot above it inside its window, our prepared
    /// certificate with the highest view below the target.
    pub(crate) fn build_view_change(&self, env: &LaneEnv) -> ViewChange {
        // A checkpoint a NEW-VIEW proved may be above the one we hold; our low
        // follows it, so it is the one that covers the slots we dropped.
        let stable = match (env.stable, &self.learnt_stable) {
            (Some(e), Some(l)) if l.seq > e.seq => Some(l),
            (None, Some(l)) => Some(l),
            (e, _) => e,
        };
        let vc_low = low_slot_of(&self.cfg, stable);
        // PBFT §4.4: the certificates must cover every slot above the
        // checkpoint we send; a log truncated above it would omit some.
        debug_assert!(
            self.low <= vc_low,
            "lane {:?} truncated to {:?} but its VIEW-CHANGE carries a checkpoint at {vc_low:?}",
            self.id,
            self.low
        );
        let vc_high = Slot(vc_low.0.saturating_add(self.cfg.params.window_slots));
        let from = vc_low.max(self.low);
        let prepared = if from < vc_high {
            self.slots
                .range(from..vc_high)
                .filter_map(|(_, st)| st.cert.clone().filter(|c| c.view < self.view))
                .collect()
        } else {
            Vec::new()
        };
        let pre_prepared = match self.cfg.params.prepare_auth {
            PrepareAuth::Mac if from < vc_high => self.pre_prepared_claims(from, vc_high),
            _ => Vec::new(),
        };
        let mut vc = ViewChange {
            lane: self.id,
            new_view: self.view,
            stable: stable.cloned(),
            prepared,
            pre_prepared,
            replica: self.me,
            sig: Signature([0; 64]),
        };
        vc.sig = self
            .identity
            .sign_bound(&self.tag, SigKind::ViewChange, &vc.signing_digest());
        vc
    }

    /// Castro & Liskov's Q set over `[from, to)`: per slot the digests we
    /// pre-prepared in views below the one we ask for, each with the highest
    /// such view, ascending by (slot, digest) as `certs.rs` wants them.
    fn pre_prepared_claims(&self, from: Slot, to: Slot) -> Vec<PrePrepared> {
        let mut out = Vec::new();
        for (slot, st) in self.slots.range(from..to) {
            let mut here: Vec<PrePrepared> = st
                .pre_prepared
                .iter()
                .filter(|(_, v)| *v < self.view)
                .map(|(digest, view)| PrePrepared {
                    slot: *slot,
                    digest: *digest,
                    view: *view,
                })
                .collect();
            here.sort_unstable_by_key(|q| q.digest);
            out.extend(here);
        }
        out
    }

    pub(crate) fn on_view_change(
        &mut self,
        cx: &mut Cx,
        from: ReplicaId,
        vc: ViewChange,
        env: &LaneEnv,
        lo: &mut LaneOutput,
    ) {
        if vc.replica != from {
            return cx.reject("replica-mismatch");
        }
        if vc.new_view.0 >= MAX_VIEW {
            return cx.reject("view-overflow");
        }
        if vc.new_view < self.view {
            return cx.counters.stale += 1;
        }
        if vc.new_view == self.view && self.active {
            // A replica that missed our NEW-VIEW (or recovered) asks again.
            return self.resend_new_view(cx, from);
        }
        if self.vcs.get(&from).is_some_and(|s| s.vc.new_view >= vc.new_view) {
            return;
        }
        if let Err(reason) = verify_view_change_sig(&self.cfg, &vc) {
            return cx.reject(reason);
        }
        self.vcs.insert(from, StoredVc { vc, valid: None });
        self.join_if_needed(cx, env, lo);
        self.try_new_view(cx, env, lo);
    }

    /// PBFT §4.5.2: f+1 replicas asking for views above ours include a correct
    /// one, so join without waiting for our timer. We go to the highest view
    /// that at least f+1 of them reached.
    fn join_if_needed(&mut self, cx: &mut Cx, env: &LaneEnv, lo: &mut LaneOutput) {
        let f = self.cfg.f();
        let mut higher: Vec<View> = self
            .vcs
            .values()
            .filter(|s| s.vc.replica != self.me && s.vc.new_view > self.view)
            .map(|s| s.vc.new_view)
            .collect();
        if higher.len() <= f {
            return;
        }
        higher.sort_unstable_by(|a, b| b.cmp(a));
        let target = higher[f];
        // We did not time out, but a leader that never pre-prepared the slot
        // we are stuck at is to blame here too (`penalty.rs`).
        if self.active {
            let stuck = self.next_undecided;
            if self
                .slots
                .get(&stuck)
                .is_none_or(|st| st.accepted_in(self.view).is_none())
            {
                self.blame_stuck_slot();
            }
        }
        self.start_view_change(cx, target, ViewChangeCause::Joined, env, lo);
    }

    /// As the new-view primary with 2f+1 valid view changes for our view:
    /// assemble, persist, broadcast and install NEW-VIEW.
    pub(crate) fn try_new_view(&mut self, cx: &mut Cx, env: &LaneEnv, lo: &mut LaneOutput) {
        let view = self.view;
        if self.active
            || new_view_primary(&self.cfg, self.id, view) != self.me
            || self.nv_forbidden == Some(view)
        {
            return;
        }
        let quorum = self.cfg.quorum();
        if self.vcs.values().filter(|s| s.vc.new_view == view).count() < quorum {
            return;
        }
        // Full validation only now, once per view change (it is the costly part).
        for s in self.vcs.values_mut().filter(|s| s.vc.new_view == view) {
            if s.valid.is_none() {
                let ok = verify_view_change(&self.cfg, &s.vc);
                if let Err(reason) = ok {
                    tracing::debug!(lane = ?self.id, replica = ?s.vc.replica, reason, "invalid view change");
                    cx.counters.reject("bad-view-change");
                }
                s.valid = Some(ok.is_ok());
            }
        }
        // Ours first, then the others by replica id: deterministic.
        let me = self.me;
        let valid: Vec<&ViewChange> = self
            .vcs
            .get(&me)
            .into_iter()
            .chain(self.vcs.values().filter(|s| s.vc.replica != me))
            .filter(|s| s.vc.new_view == view && s.valid == Some(true))
            .map(|s| &s.vc)
            .collect();
        if valid.len() < quorum {
            return;
        }
        // The first 2f+1; under `PrepareAuth::Mac` a slot may be undecidable
        // from them (claims contradict, `plan.rs`), and then every further
        // view change may settle it: with all correct replicas' it is
        // decidable (Castro & Liskov), so we wait for more.
        let mut chosen: Vec<ViewChange> = valid[..quorum].iter().map(|vc| (*vc).clone()).collect();
        let plan = loop {
            if let Some(p) = plan_new_view(&self.cfg, &chosen) {
                break p;
            }
            match valid.get(chosen.len()) {
                Some(vc) => chosen.push((*vc).clone()),
                None => {
                    tracing::debug!(lane = ?self.id, ?view, have = valid.len(), "new view undecidable yet: waiting for more view changes");
                    return;
                }
            }
        };
        let fresh = Slot(plan.low.0 + plan.reproposals.len() as u64);
        let mut nv = NewView {
            lane: self.id,
            view,
            view_changes: chosen,
            reproposals: plan.reproposals.clone(),
            replica: self.me,
            sig: Signature([0; 64]),
            excluded: self.new_view_exclusions(view, fresh),
        };
        nv.sig = self
            .identity
            .sign_bound(&self.tag, SigKind::NewView, &nv.signing_digest());
        tracing::debug!(lane = ?self.id, ?view, reproposals = nv.reproposals.len(), "sending new view");
        cx.out.persist(PersistRecord::View { lane: self.id, view });
        cx.out.broadcast(ReplicaMsg::NewView(nv.clone()));
        self.install_new_view(cx, nv, plan, env, lo);
    }

    /// NEW-VIEW is self-certifying (signed by the primary, carrying the signed
    /// view changes), so it is accepted from whoever relays it: replicas
    /// already in the view re-send it to those behind, including to a
    /// recovered primary that must re-learn its own NEW-VIEW.
    pub(crate) fn on_new_view(
        &mut self,
        cx: &mut Cx,
        _from: ReplicaId,
        nv: NewView,
        env: &LaneEnv,
        lo: &mut LaneOutput,
    ) {
        if nv.view.0 == 0 || nv.view.0 >= MAX_VIEW {
            return cx.reject("bad-new-view");
        }
        if nv.view < self.view || (nv.view == self.view && self.active) {
            return cx.counters.stale += 1;
        }
        if nv.replica != new_view_primary(&self.cfg, self.id, nv.view) {
            return cx.reject("wrong-primary");
        }
        let plan = match self.validate_new_view(&nv) {
            Ok(p) => p,
            Err(reason) => return cx.reject(reason),
        };
        cx.out.persist(PersistRecord::View {
            lane: self.id,
            view: nv.view,
        });
        self.install_new_view(cx, nv, plan, env, lo);
    }

    /// PBFT §4.4: a backup accepts NEW-VIEW only if it is signed by the
    /// primary, carries 2f+1 valid VIEW-CHANGEs for this view from distinct
    /// replicas, and its re-proposals are exactly what they imply.
    fn validate_new_view(&self, nv: &NewView) -> Result<NewViewPlan, &'static str> {
        let key = self.key(nv.replica).ok_or("bad-replica")?;
        if !key.verify_bound(&self.tag, SigKind::NewView, &nv.signing_digest(), &nv.sig) {
            return Err("bad-signature");
        }
        if nv.view_changes.len() < self.cfg.quorum() || nv.view_changes.len() > self.cfg.n() {
            return Err("nv-view-change-count");
        }
        let mut seen = BTreeSet::new();
        for vc in &nv.view_changes {
            if vc.lane != self.id || vc.new_view != nv.view {
                return Err("nv-view-change-mismatch");
            }
            if !seen.insert(vc.replica) {
                return Err("nv-duplicate-view-change");
            }
            let known_valid = self
                .vcs
                .get(&vc.replica)
                .is_some_and(|s| s.valid == Some(true) && s.vc == *vc);
            if !known_valid {
                if let Err(reason) = verify_view_change(&self.cfg, vc) {
                    tracing::debug!(lane = ?self.id, replica = ?vc.replica, reason, "new view carries an invalid view change");
                    return Err("nv-bad-view-change");
                }
            }
        }
        let plan = plan_new_view(&self.cfg, &nv.view_changes).ok_or("nv-undecided")?;
        if plan.reproposals != nv.reproposals {
            return Err("nv-reproposal-mismatch");
        }
        let fresh = Slot(plan.low.0 + plan.reproposals.len() as u64);
        if self.cfg.params.mode == OrderingMode::Rcc {
            // RCC §III-C: the stop is a function of E; nothing to choose.
            if nv.excluded != [rcc_stop(&self.cfg, self.id, nv.view, fresh)] {
                return Err("nv-bad-stop");
            }
        } else {
            check_exclusions(&self.cfg, &nv.excluded, fresh)?;
        }
        Ok(plan)
    }

    /// What a NEW-VIEW for `view` whose fresh slots start at `fresh`
    /// excludes: in `rcc` the stopped instance primary (`rcc_stop`), with
    /// block-wise rotation the replicas we blamed (`penalty.rs`).
    fn new_view_exclusions(&self, view: View, fresh: Slot) -> Vec<Exclusion> {
        if self.cfg.params.mode == OrderingMode::Rcc {
            vec![rcc_stop(&self.cfg, self.id, view, fresh)]
        } else {
            self.penalties.exclusions(&self.cfg, fresh)
        }
    }

    /// Enter `nv.view`. The primary then pre-prepares each re-proposal;
    /// backups wait for those pre-prepares (parked ones are replayed now).
    fn install_new_view(
        &mut self,
        cx: &mut Cx,
        nv: NewView,
        plan: NewViewPlan,
        env: &LaneEnv,
        lo: &mut LaneOutput,
    ) {
        debug_assert!(nv.view >= self.view);
        if nv.view != self.view {
            for st in self.slots.values_mut() {
                st.clear_votes();
            }
        }
        // PBFT §4.4: min-s may be a checkpoint above ours, and the view's
        // window starts there. Re-proposals up to `min-s + L` would fall
        // above our window, so move the low there first (finding 8); the
        // certificate proves the slots below, state transfer brings their
        // state, and our VIEW-CHANGEs carry it from now on.
        let plan_low = plan.low;
        if plan_low > self.low {
            if let Some(c) = plan.stable.clone() {
                debug_assert_eq!(low_slot_of(&self.cfg, Some(&c)), plan_low);
                let old_low = self.low;
                self.learnt_stable = Some(c);
                self.truncate_below(plan_low);
                // Pool entries in flight below are no longer ours to decide.
                lo.release_from = Some(old_low);
            }
        }
        self.view = nv.view;
        self.active = true;
        self.suspecting = false;
        self.view_started = cx.now;
        self.excluded = nv.excluded.clone();
        self.penalties.adopt(&nv.excluded);
        self.nv = Some(NvRange {
            low: plan.low,
            digests: nv.reproposals.iter().map(|r| r.digest).collect(),
        });
        self.own_vc = None;
        self.vc_withheld = false;
        let view = self.view;
        self.vcs.retain(|_, s| s.vc.new_view > view);
        cx.counters.new_views += 1;
        self.progressed = true;
        self.needs_replay = true;
        if let Some(c) = plan.stable.filter(|c| c.seq > env.stable_seq) {
            lo.higher_stable = Some(c);
        }
        lo.release_from = Some(lo.release_from.map_or(plan.low, |r| r.min(plan.low)));
        self.resolve_roles();
        tracing::debug!(lane = ?self.id, ?view, "entered view");
        if new_view_primary(&self.cfg, self.id, view) == self.me {
            for r in &nv.reproposals {
                let open = r.slot >= self.low
                    && r.slot < self.high()
                    // A recovered primary may have re-proposed some already.
                    && self.slots.get(&r.slot).is_none_or(|st| st.accepted_in(view).is_none());
                if open {
                    self.send_reproposal(cx, r.slot, r.digest, &nv, lo);
                }
            }
        }
        self.nv_msg = Some(nv);
    }

    /// Pre-prepare a re-proposed digest as the new-view primary, fetching the
    /// batch first from a replica whose certificate names it if we lack it.
    fn send_reproposal(
        &mut self,
        cx: &mut Cx,
        slot: Slot,
        digest: Digest,
        nv: &NewView,
        lo: &mut LaneOutput,
    ) {
        let batch = if digest == Batch::noop_digest() {
            Some(Arc::new(Batch::noop()))
        } else {
            self.slots.get(&slot).and_then(|st| st.batch(&digest)).cloned()
        };
        match batch {
            Some(b) => self.send_pre_prepare(cx, slot, digest, b, lo),
            None => {
                let holders: Vec<ReplicaId> = nv
                    .view_changes
                    .iter()
                    .filter(|vc| vc.replica != self.me)
                    .filter(|vc| {
                        vc.prepared.iter().any(|c| c.slot == slot && c.digest == digest)
                            || vc
                                .pre_prepared
                                .iter()
                                .any(|q| q.slot == slot && q.digest == digest)
                    })
                    .map(|vc| vc.replica)
                    .collect();
                self.want(cx, slot, digest, WantReason::Reproposal, holders);
            }
        }
    }

    /// Re-send our NEW-VIEW to a replica still behind, at most once per
    /// status interval per peer.
    pub(crate) fn resend_new_view(&mut self, cx: &mut Cx, to: ReplicaId) {
        let Some(nv) = &self.nv_msg else {
            return;
        };
        let interval = self.cfg.params.status_interval_ms;
        let Some(last) = self.nv_sent.get_mut(to.index()) else {
            return;
        };
        if last.is_some_and(|t| cx.now.0.saturating_sub(t.0) < interval) {
            return;
        }
        *last = Some(cx.now);
        cx.counters.retransmissions += 1;
        cx.out.send(to, ReplicaMsg::NewView(nv.clone()));
    }

    /// After recovery a slot's role in the current view is known only once
    /// the view is active (was it a re-proposal?). Restore our own signed
    /// votes for it: the same bytes we sent before the crash.
    pub(crate) fn resolve_roles(&mut self) {
        let view = self.view;
        let slots: Vec<Slot> = self.slots.keys().copied().collect();
        for slot in slots {
            let proposer = self.proposer_of(slot);
            let Some(st) = self.slots.get(&slot) else {
                continue;
            };
            let pending = st
                .pp
                .as_ref()
                .filter(|p| p.view == view && p.proposer.is_none())
                .map(|p| p.digest);
            let prepared = st.cert.as_ref().filter(|c| c.view == view).map(|c| c.digest);
            if let (Some(digest), Some(proposer)) = (pending, proposer) {
                let sig = (proposer == self.me).then(|| self.resign_pre_prepare(slot, &digest));
                let prepare = (proposer != self.me).then(|| self.sign_prepare(slot, digest));
                let me = self.me;
                let st = self.slot_mut(slot);
                if let Some(pp) = st.pp.as_mut() {
                    pp.proposer = Some(proposer);
                    if sig.is_some() {
                        pp.sig = sig;
                    }
                }
                if let Some(p) = prepare {
                    st.prepares.insert(me, p);
                }
            }
            if let Some(d) = prepared {
                let me = self.me;
                self.slot_mut(slot).commits.insert(me, d);
            }
        }
    }
}
