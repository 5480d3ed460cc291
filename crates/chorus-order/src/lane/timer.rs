//! The lane's progress timer (PBFT §4.4, §4.5.2).
//!
//! While the lane is active the timer runs whenever the lane has work that is
//! not getting done: pre-prepared slots not yet decided, another lane ahead of
//! it (the merger waits for this one), or requests waiting to be proposed.
//! Contiguous progress (`next_undecided` moved, the window moved, a new view)
//! re-arms it, but never past "oldest waiting request + timeout": like
//! PBFT's per-request timer, this catches a leader that keeps deciding other
//! requests while censoring one. A decision above a gap does not re-arm it: a
//! leader that never pre-prepares slot s but lets s+1, s+2, … decide just
//! under every timeout would otherwise stall delivery without a view change.
//!
//! A lane that f+1 peers report ahead of it (at least one correct replica
//! decided further) is catching up, e.g. after a restart: its pending
//! requests may be ordered already and its restored pre-prepares decided
//! long ago, so they are no evidence against the leader. While catching up
//! only a lack of contiguous progress for a whole timeout arms the timer
//! (a catch-up can stall: rcc seed 10155, where the peers ahead were one
//! correct replica and one that garbled its `Decided` notices); after
//! recovery the timer waits until f+1 peers reported.
//!
//! An expired timer is evidence about *us* first: a replica cut off by a
//! partition, or one whose NEW-VIEW came late, times out while the others
//! make progress in the same view, and if it then sent VIEW-CHANGE(v+1)
//! it could never return (PBFT §4.5.2: its VIEW-CHANGE may be used in a
//! later NEW-VIEW, so it must not prepare in a lower view). So an expired
//! timer only signs a timeout statement for the view, and the lane leaves
//! the view once 2f+1 replicas signed one (a timeout certificate, which
//! moves every correct replica that receives it: `timeout_cert.rs`).
//!
//! During a view change to `v` the timer runs only once 2f+1 replicas asked
//! for `v` or a later view (PBFT §4.5.2), so a replica that timed out alone
//! does not run off to ever higher views. The lane re-sends its VIEW-CHANGE
//! on every status tick (`catchup.rs`), so peers cut off when it was first
//! sent learn it later, and peers active in `v` answer it with the NEW-VIEW.
//! Every view
//! that ends without a decision doubles the timeout (exponential back-off, so
//! that eventually a correct primary gets enough time); a decision resets it.

use super::{Lane, LaneEnv, LaneOutput};
use crate::counters::Cx;
use crate::io::{Action, TimerId};
use crate::roles::new_view_primary;
use chorus_core::{Millis, OrderingMode, ReplicaId, Seq, Slot, View};

/// Back-off stops doubling at 2^4 = 16 × the base timeout. The doubling is
/// only there to outgrow an unknown message delay after GST (PBFT §4.5.2);
/// 16 × the base (32 s with the default 2 s) is far above any round trip a
/// view change needs, while a higher cap makes every view whose primary is
/// faulty cost that much more once several views in a row failed (with
/// f faulty new-view primaries in a row, the sum of the waits is what
/// clients see).
const MAX_BACKOFF_SHIFT: u32 = 4;

/// A peer's progress report counts for this many status intervals.
const PEER_REPORT_INTERVALS: u64 = 4;

#[derive(Default, Debug)]
#[cfg_attr(test, derive(Clone))]
pub(crate) struct ProgressTimer {
    pub deadline: Option<Millis>,
    /// View changes in a row without a decision in between.
    pub failures: u32,
    /// `next_undecided` when the timer was last evaluated: progress is
    /// contiguous progress only.
    pub seen_next: Slot,
    /// The deadline was armed only by a waiting request (no open slot, the
    /// merger not waiting for us): suspected censorship.
    pub censorship_only: bool,
    /// RCC: since when this lane has held the other instances at the drift
    /// bound (`throttle.rs`), in which view, from which slot.
    pub throttled_since: Option<super::throttle::Throttled>,
    /// The deadline, or the suspicion it led to, came from the throttling
    /// rule: the lane is slow as a whole, and which slot it happens to
    /// wait at when the timer fires says little about who slowed it (a
    /// throttler releases its own slot just before the deadline), so
    /// leaving on it blames whoever the lane waited for longest
    /// (`Lane::blame_throttler`).
    pub throttle_armed: bool,
    /// RCC: since when the lane has waited at the round where its stop
    /// ended for the primary's first proposal (`restart_probe.rs`).
    pub restart_waiting: Option<((View, Slot), Millis)>,
}

impl ProgressTimer {
    pub fn timeout_ms(&self, base: u64) -> u64 {
        base.saturating_mul(1 << self.failures.min(MAX_BACKOFF_SHIFT))
    }
}

impl Lane {
    fn set_deadline(&mut self, cx: &mut Cx, at: Option<Millis>) {
        if self.timer.deadline == at {
            return;
        }
        let id = TimerId::ViewChange(self.id);
        match at {
            Some(at) => cx.out.set_timer(id, at),
            None => cx.out.push(Action::CancelTimer { id }),
        }
        self.timer.deadline = at;
    }

    /// Stop the timer (a view change starts; `refresh_timer` re-arms it).
    pub(crate) fn stop_timer(&mut self, cx: &mut Cx) {
        self.set_deadline(cx, None);
    }

    /// Is there a slot of the current view still to decide?
    pub fn has_open_slots(&self) -> bool {
        let view = self.view;
        if self.nv.as_ref().is_some_and(|nv| nv.end() > self.next_undecided) {
            return true;
        }
        self.slots
            .range(self.next_undecided..)
            .any(|(_, st)| st.decided.is_none() && st.accepted_in(view).is_some())
    }

    /// Slots pre-prepared in the current view and not yet decided, counted up
    /// to `cap` (the proposal pipeline's depth).
    pub fn open_slots(&self, cap: usize) -> usize {
        let view = self.view;
        self.slots
            .range(self.next_undecided..)
            .filter(|(_, st)| st.decided.is_none() && st.accepted_in(view).is_some())
            .take(cap)
            .count()
    }

    /// Another lane has pre-prepared a later position: the merger waits for us.
    fn behind(&self, frontier: Option<Seq>) -> bool {
        frontier.is_some_and(|f| self.seq_of(self.next_undecided) < f)
    }

    /// PBFT §4.5.2: the timer of a view change to `v` starts once 2f+1
    /// replicas are in it. A replica asking for a view above `v` counts too:
    /// it has left every view below its own, so it will never help the
    /// normal case of an older view, and view `v` cannot form without it
    /// either. Counting only exact matches deadlocks when correct replicas
    /// are split between `v` and `v + 1` (the ones in `v` never reach 2f+1
    /// for `v`, too few are in `v + 1` for the f+1 join rule).
    fn view_change_quorum(&self) -> bool {
        self.vcs.values().filter(|s| s.vc.new_view >= self.view).count() >= self.cfg.quorum()
    }

    /// Re-evaluate the timer after an event. `oldest_pending`: since when the
    /// oldest proposable request of this lane has waited (`None` if there is
    /// none, or the lane may not propose because of the window or the drift
    /// bound). `frontier`: the highest global position pre-prepared or decided
    /// in any lane. `top_round`: for the throttling rule (`throttle.rs`).
    pub fn refresh_timer(
        &mut self,
        cx: &mut Cx,
        oldest_pending: Option<Millis>,
        frontier: Option<Seq>,
        top_round: Option<Slot>,
    ) {
        let moved = self.timer.seen_next != self.next_undecided;
        self.timer.seen_next = self.next_undecided;
        let progressed = std::mem::take(&mut self.progressed) || moved;
        let timeout = self.timer.timeout_ms(self.cfg.params.view_change_timeout_ms);
        if !self.active {
            if self.timer.deadline.is_none() && self.view_change_quorum() {
                let wait = self.view_change_wait(timeout);
                self.set_deadline(cx, Some(cx.now.plus(wait)));
            }
            return;
        }
        // A suspicion is about this view's lack of progress: progress ends
        // it, and so does a censorship suspicion's request leaving.
        if progressed || (oldest_pending.is_none() && self.timer.censorship_only) {
            self.suspecting = false;
        }
        // Finding 7: a replica that just recovered has not heard from its
        // peers yet, and one that f+1 peers report ahead of it is catching
        // up: neither its waiting requests (maybe ordered already) nor its
        // restored or lagging open slots are evidence against the leader.
        if self.awaiting_peers {
            let heard = self.peer_next.iter().flatten().count();
            if heard <= self.cfg.f() {
                self.timer.throttled_since = None;
                // A pending throttling suspicion keeps its cause.
                self.timer.throttle_armed &= self.suspecting;
                return self.set_deadline(cx, None);
            }
            self.awaiting_peers = false;
        }
        if self.catching_up(cx.now) {
            // Only a catch-up that itself stalls for a whole timeout counts
            // (rcc seed 10155: the only peers ahead were one correct replica
            // and a Byzantine one that garbled its `Decided` notices, so the
            // notices never reached f+1 and the two lagging replicas waited
            // for ever). Our signed timeout moves nobody alone: a
            // certificate needs 2f+1 (`timeout_cert.rs`).
            let at = match self.timer.deadline {
                Some(d) if !progressed => d,
                _ => cx.now.plus(timeout),
            };
            // Not a throttling measure: its lag is ours, not the leader's.
            self.timer.throttled_since = None;
            self.timer.throttle_armed &= self.suspecting;
            return self.set_deadline(cx, Some(at));
        }
        let visible = self.has_open_slots() || self.behind(frontier);
        let needs = oldest_pending.is_some() || visible;
        self.timer.censorship_only = !visible;
        if !needs {
            self.suspecting = false;
            return self.set_deadline(cx, None);
        }
        let mut at = match self.timer.deadline {
            Some(d) if !progressed => d,
            _ => cx.now.plus(timeout),
        };
        // While we wait for others to confirm a suspicion, the waiting
        // request no longer pulls the deadline in (it is already past).
        if let Some(since) = oldest_pending.filter(|_| !self.suspecting) {
            let since = since.max(self.view_started);
            at = at.min(since.plus(timeout).max(cx.now));
        }
        // Like a waiting request: once our timeout is out for confirmation,
        // throttling no longer pulls the deadline in (it would re-fire at
        // once, for ever, and re-announce the suspicion each time).
        let throttle = self.throttle_deadline(cx.now, top_round, timeout);
        let mut by_throttle = false;
        if let Some(t) = throttle.filter(|_| !self.suspecting) {
            let t = t.max(cx.now);
            by_throttle = t <= at;
            at = at.min(t);
        }
        let probe = self.restart_probe_deadline(cx.now, timeout);
        if let Some(t) = probe.filter(|_| !self.suspecting) {
            let t = t.max(cx.now);
            by_throttle &= t >= at;
            at = at.min(t);
        }
        if !self.suspecting {
            self.timer.throttle_armed = by_throttle;
        }
        self.set_deadline(cx, Some(at));
    }

    /// How long to give the new-view primary of the view we are changing
    /// to. A primary our record excludes (it failed as a slot leader or as a
    /// new-view primary not long ago) gets a quarter of the base timeout
    /// instead of the backed-off one: with f faulty replicas next to each
    /// other in the rotation, a view change otherwise waits out each of them
    /// in turn at the full back-off. Timers only decide when we sign a
    /// timeout statement, so this never touches safety, and a short wait
    /// still leaves a correct but excluded primary time for a round trip.
    fn view_change_wait(&self, timeout: u64) -> u64 {
        let primary = new_view_primary(&self.cfg, self.id, self.view);
        let skip = primary != self.me
            && !matches!(self.cfg.params.mode, OrderingMode::Rcc | OrderingMode::Sarek)
            && self
                .penalties
                .short_wait_for(&self.cfg, primary, self.next_undecided);
        if skip {
            (self.cfg.params.view_change_timeout_ms / 4).clamp(1, timeout)
        } else {
            timeout
        }
    }

    /// Remember a peer's `Status` for this lane (finding 7's evidence).
    pub(crate) fn note_peer_progress(
        &mut self,
        cx: &mut Cx,
        from: ReplicaId,
        st_view: View,
        next_undecided: Slot,
    ) {
        if let Some(p) = self.peer_next.get_mut(from.index()) {
            *p = Some((next_undecided, st_view, cx.now));
            self.peer_next_max = self.peer_next_max.max(next_undecided);
        }
    }

    /// Our timer expired but fewer than 2f+1 replicas gave up on the view:
    /// our signed timeout is out (`give_up`); report the suspicion in
    /// `Status` too (informational) and look again one status interval
    /// later.
    fn suspect(&mut self, cx: &mut Cx, env: &LaneEnv) {
        if !self.suspecting {
            self.suspecting = true;
            self.broadcast_status(cx, env.stable_seq);
        }
        let retry = cx.now.plus(self.cfg.params.status_interval_ms);
        self.set_deadline(cx, Some(retry));
    }

    /// f+1 peers reported, recently and *in our view*, a first undecided slot
    /// above ours: at least one correct replica decided further in this view,
    /// and we are catching up. A peer that reports a higher view has left
    /// ours: its decisions say nothing about whether this view still makes
    /// progress, and counting it let one correct replica that had moved on
    /// plus one liar hold the timer off for ever (sim seed 69: the primary of
    /// v1 left alone for v2, the other two never timed out to follow).
    /// Reports expire, so f liars cannot hold the timer off alone for ever.
    pub(crate) fn catching_up(&self, now: Millis) -> bool {
        if self.peer_next_max <= self.next_undecided {
            return false;
        }
        let fresh = self
            .cfg
            .params
            .status_interval_ms
            .saturating_mul(PEER_REPORT_INTERVALS);
        let ahead = self
            .peer_next
            .iter()
            .flatten()
            .filter(|(next, view, at)| {
                *next > self.next_undecided && *view == self.view && now.0.saturating_sub(at.0) <= fresh
            })
            .count();
        ahead > self.cfg.f()
    }

    /// Blame whoever should have moved the lane past the slot it is stuck
    /// at in the current view (`penalty.rs`).
    pub(crate) fn blame_stuck_slot(&mut self) {
        let stuck = self.next_undecided;
        if let Some(r) = self.proposer_of(stuck).filter(|r| *r != self.me) {
            self.penalties.blame(&self.cfg, r, stuck);
        }
    }

    /// `TimerId::ViewChange(lane)` fired. Stale firings (the deadline moved)
    /// are ignored, so drivers may or may not replace timers with the same id.
    pub fn on_timer(&mut self, cx: &mut Cx, env: &LaneEnv) -> LaneOutput {
        let mut lo = LaneOutput::default();
        match self.timer.deadline {
            Some(d) if cx.now >= d => {}
            _ => return lo,
        }
        self.timer.deadline = None;
        // Finding 7: a timeout is first a signed statement only (we may have
        // been cut off, or a waiting request was ordered already); the view
        // is left once 2f+1 replicas made one, and then by every correct
        // replica (`timeout_cert.rs`). A NEW-VIEW late only for us (seed 18)
        // is re-sent by the peers active in the view meanwhile.
        let view = self.view;
        self.give_up(cx, view);
        if !self.leave_on_certificate(cx, env, &mut lo) {
            self.suspect(cx, env);
            return lo;
        }
        self.replay(cx, env, &mut lo);
        lo
    }

    /// The timer's deadline, for tests and status.
    pub fn timer_deadline(&self) -> Option<Millis> {
        self.timer.deadline
    }
}
