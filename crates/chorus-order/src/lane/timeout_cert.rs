//! Timeout certificates: a lane leaves a view on its timer only together
//! with every correct replica (PBFT §4.5.2, made transferable).
//!
//! A replica whose progress timer expires in view `v` signs and broadcasts
//! `Timeout(v)` ("I gave up on every view up to `v`"), and so does a replica
//! that leaves `v` for any reason (it will never act in `v` again). It leaves
//! `v` on its timer only once it holds such statements from 2f+1 distinct
//! replicas for `v` or later views: a timeout certificate. At least f+1 of
//! them are correct, so `v` lacks the quorum it needs from correct replicas
//! that still take part (PBFT's f+1 evidence), and because the statements are
//! signed the certificate is *transferable*: every receiver verifies it and
//! leaves `v` too. Any replica relays the statements it holds to a peer whose
//! `Status` shows it still in a view the certificate covers.
//!
//! Why (issue 8 finding 7, the `view-split` checker): with unsigned
//! `Status.suspects` a replica left once f (active) or f+1 (view change)
//! peers reported a timeout, but those peers could still see progress or a
//! late NEW-VIEW and stay, and f Byzantine peers could report a timeout
//! they never had. The replica that left then sat alone in a higher view it
//! may never return from (its VIEW-CHANGE may be used in a NEW-VIEW: PBFT
//! §4.4). With a certificate either nobody leaves `v` (fewer than f+1
//! correct replicas timed out; the ones that did catch up through the
//! others' `Decided` notices and checkpoints) or every correct replica does
//! (the pacemaker of HotStuff, Yin et al. PODC'19, timeout certificates).
//!
//! Liveness: a failed or censoring leader, or a missing NEW-VIEW, stalls
//! every correct replica, so all 2f+1 time out and sign. A late statement
//! can still complete a certificate after some progress; then every correct
//! replica changes view together, which costs a view change but splits
//! nobody. Byzantine replicas can sign at most f statements, too few alone.

use super::{Lane, LaneEnv, LaneOutput, MAX_VIEW};
use crate::counters::{Cx, ViewChangeCause};
use crate::roles::new_view_primary;
use chorus_core::{Millis, ReplicaId, ReplicaMsg, SigKind, Signature, Timeout, View};

impl Lane {
    /// Sign and broadcast that we gave up on every view up to `view`, unless
    /// we already said so for `view` or a later one.
    pub(crate) fn give_up(&mut self, cx: &mut Cx, view: View) {
        let me = self.me.index();
        if self.timeouts[me].as_ref().is_some_and(|t| t.view >= view) {
            return;
        }
        let mut t = Timeout {
            lane: self.id,
            view,
            replica: self.me,
            sig: Signature([0; 64]),
        };
        t.sig = self
            .identity
            .sign_bound(&self.tag, SigKind::Timeout, &t.signing_digest());
        self.timeouts[me] = Some(t.clone());
        cx.out.broadcast(ReplicaMsg::Timeout(t));
    }

    /// The highest view `w` that 2f+1 distinct replicas gave up on (the
    /// (2f+1)-th highest statement), if any.
    pub(crate) fn certified_timeout(&self) -> Option<View> {
        let mut views: Vec<View> = self.timeouts.iter().flatten().map(|t| t.view).collect();
        views.sort_unstable_by(|a, b| b.cmp(a));
        views.get(self.cfg.quorum() - 1).copied()
    }

    /// A peer's (or a relayed) signed timeout statement.
    pub(crate) fn on_timeout(&mut self, cx: &mut Cx, t: Timeout, env: &LaneEnv, lo: &mut LaneOutput) {
        if t.view.0 >= MAX_VIEW {
            return cx.reject("view-overflow");
        }
        let Some(held) = self.timeouts.get(t.replica.index()) else {
            return cx.reject("bad-replica");
        };
        // Statements only grow (one per replica is kept), so a Byzantine
        // peer cannot make us store more than n of them.
        if held.as_ref().is_some_and(|h| h.view >= t.view) || t.view < self.view {
            return cx.counters.stale += 1;
        }
        let Some(key) = self.key(t.replica) else {
            return cx.reject("bad-replica");
        };
        if !key.verify_bound(&self.tag, SigKind::Timeout, &t.signing_digest(), &t.sig) {
            return cx.reject("bad-signature");
        }
        let i = t.replica.index();
        self.timeouts[i] = Some(t);
        self.leave_on_certificate(cx, env, lo);
    }

    /// PBFT §4.5.2, first liveness rule, for timeouts: f+1 others gave up on
    /// our view (one of them is correct), so we give up on it too even if
    /// our own timer has not expired. Without this a replica that is ahead
    /// (it decided the slots the others are stuck at, so its timer is idle)
    /// never signs, the stuck ones gather only 2f statements at n = 3f+1 with
    /// one silent replica, and nobody can leave the view (seed 3000044). A
    /// statement only says we give up; leaving still needs 2f+1 of them.
    /// Checked on the status tick, not on each statement: a replica whose
    /// own timer is about to expire anyway signs on its timer, so f+1
    /// statements only move one that would otherwise never sign. Returns
    /// whether we signed now.
    pub(crate) fn give_up_with_f_plus_one(&mut self, cx: &mut Cx) -> bool {
        let me = self.me.index();
        let others = self
            .timeouts
            .iter()
            .enumerate()
            .filter(|(i, t)| *i != me && t.as_ref().is_some_and(|t| t.view >= self.view))
            .count();
        let signed = self.timeouts[me].as_ref().is_some_and(|t| t.view >= self.view);
        if others > self.cfg.f() && !signed {
            self.give_up(cx, self.view);
            return true;
        }
        false
    }

    /// 2f+1 replicas gave up on our view (active in it or in the view
    /// change to it): leave it for the view after the certified one.
    pub(crate) fn leave_on_certificate(&mut self, cx: &mut Cx, env: &LaneEnv, lo: &mut LaneOutput) -> bool {
        let Some(w) = self.certified_timeout() else {
            return false;
        };
        if w < self.view {
            return false;
        }
        debug_assert!(w.0 < MAX_VIEW);
        tracing::debug!(
            lane = ?self.id,
            view = ?self.view,
            active = self.active,
            certified = ?w,
            next = ?self.next_undecided,
            "timeout certificate: leaving the view"
        );
        // A planned return to the preferred leader (`preferred.rs`) is
        // nobody's failure.
        let planned = self.active && self.preferred_return_due().is_some();
        if self.active {
            // Whoever should have moved the lane past the slot it is stuck
            // at failed (`penalty.rs`); a leader whose pre-prepare we hold
            // is blamed only on our own timeout, as for the f+1 join rule.
            let stuck = self.next_undecided;
            let ours = self.suspecting;
            let unproposed = self
                .slots
                .get(&stuck)
                .is_none_or(|st| st.accepted_in(self.view).is_none());
            // A throttling suspicion blames whom the lane waited for longest
            // (`throttle.rs`); without a measure, only an unproposed slot.
            let by_throttle = !planned && ours && self.timer.throttle_armed;
            let blamed = by_throttle && self.blame_throttler(cx.now);
            let ours = ours && !by_throttle;
            if !planned && !blamed && (ours || unproposed) {
                self.blame_stuck_slot();
            }
        } else {
            // PBFT §4.5.2: the new-view primary did not send NEW-VIEW in time.
            let primary = new_view_primary(&self.cfg, self.id, self.view);
            if primary != self.me {
                self.penalties.blame(&self.cfg, primary, self.next_undecided);
            }
        }
        // Pass the certificate on at once: a peer that lost a statement
        // would otherwise learn it only from our relay on its next `Status`,
        // and a crash in between (statements are not persisted) would leave
        // us alone in the view change (rcc seed 10312).
        let cert: Vec<Timeout> = self
            .timeouts
            .iter()
            .flatten()
            .filter(|t| t.view >= w)
            .cloned()
            .collect();
        let cause = match (self.active, self.timer.censorship_only) {
            _ if planned => ViewChangeCause::PreferredReturn,
            (true, false) => ViewChangeCause::NoProgress,
            (true, true) => ViewChangeCause::Censorship,
            (false, _) => ViewChangeCause::NewViewTimeout,
        };
        let backoff = self.timer.failures;
        // Kept across a restart: after a whole cluster restarted, nobody
        // else may hold these statements any more (`PersistRecord::TimeoutCert`).
        // Before the view record, so a crash between the two (torn) leaves
        // a replica that can still leave (`finish_recovery`), never one in
        // the new view without the certificate that took it there.
        if w.next().0 < MAX_VIEW {
            cx.out.persist(crate::io::PersistRecord::TimeoutCert {
                lane: self.id,
                statements: cert.clone(),
            });
        }
        // PBFT §4.5.2: if NEW-VIEW for v+1 does not come in time, go to v+2.
        self.start_view_change(cx, w.next(), cause, env, lo);
        if planned {
            // Nobody failed: the back-off stays where it was.
            self.timer.failures = backoff;
        }
        for t in cert.into_iter().filter(|t| t.replica != self.me) {
            cx.out.broadcast(ReplicaMsg::Timeout(t));
        }
        true
    }

    /// A peer's `Status` shows it in `peer_view`, a view we hold a
    /// certificate for: relay the certificate's statements so that it
    /// leaves that view too (a straggler that lost the broadcasts), at most
    /// once per status interval per peer.
    pub(crate) fn relay_certificate(&mut self, cx: &mut Cx, to: ReplicaId, peer_view: View) {
        let Some(w) = self.certified_timeout() else {
            return;
        };
        if peer_view > w || to == self.me {
            return;
        }
        let interval = self.cfg.params.status_interval_ms;
        let Some(last) = self.tc_sent.get_mut(to.index()) else {
            return;
        };
        if last.is_some_and(|t: Millis| cx.now.0.saturating_sub(t.0) < interval) {
            return;
        }
        *last = Some(cx.now);
        let cert: Vec<Timeout> = self
            .timeouts
            .iter()
            .flatten()
            // The peer's own statement too: one it signed before a restart
            // it no longer holds (statements are persisted only by a
            // replica that left on them).
            .filter(|t| t.view >= peer_view)
            .cloned()
            .collect();
        cx.counters.retransmissions += 1;
        for t in cert {
            cx.out.send(to, ReplicaMsg::Timeout(t));
        }
    }
}
