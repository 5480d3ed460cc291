//! RCC §IV, throttling: a primary that keeps its instance just fast enough
//! never to let a round wait a whole timeout still holds every round back,
//! because round `r` is delivered only when every instance decided it. RCC
//! treats an instance σ rounds behind another as failed.
//!
//! Here the drift bound (`max_lane_drift_slots` = σ) stops the other
//! instances from proposing more than σ rounds above the delivery point, so
//! a lane "σ behind" is one at least σ − 1 rounds below the highest round
//! seen: the others are blocked on it. From the moment that starts, the
//! lane's progress timer is no longer pushed back by its (slow) decisions:
//! a lane that stays at the bound for a whole timeout is suspected, however
//! many rounds it trickles through meanwhile, unless they add up to σ (a
//! whole drift window drained: a loaded lane, not a throttling one). A lane
//! that falls behind only briefly (a burst, a slow link) catches up long
//! before.
//!
//! COP has the same exposure (COP §4.2.2: pillars may not drift apart, and
//! the merger interleaves the lanes), so the rule holds there too: a twins
//! leader whose lane decided a slot only every ~0.5 s, through the status
//! retransmissions, held every lane back for the rest of the run without a
//! view change (sim seed 9982058, cop, n = 4).

use super::Lane;
use chorus_core::{Millis, OrderingMode, ReplicaId, Slot, View};

impl Lane {
    /// `top_round`: the highest round pre-prepared or decided in any lane,
    /// but at most the highest a correct leader may propose now (the
    /// delivery point's round + σ − 1: a Byzantine leader that pre-prepares
    /// far above it, inside the window, must not make every lane look
    /// behind; `Replica::throttle_top`). The latest deadline the throttling
    /// rule allows, if this lane is throttling the others.
    pub(crate) fn throttle_deadline(
        &mut self,
        now: Millis,
        top_round: Option<Slot>,
        timeout: u64,
    ) -> Option<Millis> {
        // The rounds interleave (and the drift bound holds every lane to
        // the slowest) only in `cop` and `rcc`; a `sarek` partition's stream
        // is delivered on its own, and one lane cannot throttle itself.
        let interleaved = match self.cfg.params.mode {
            OrderingMode::Rcc => true,
            OrderingMode::Cop => self.cfg.lanes() > 1,
            _ => false,
        };
        if !interleaved {
            return None;
        }
        let sigma = self.cfg.params.max_lane_drift_slots.max(2);
        let lag = top_round.map_or(0, |r| r.0.saturating_sub(self.next_undecided.0));
        // Hysteresis: the lane starts throttling at σ − 1 rounds behind and
        // stops only once it is less than σ/2 behind. Each trickled decision
        // takes it one round below the bound until delivery lets the others
        // propose the next round; at a replica that leads none of them
        // nothing is proposed in between, and the measure restarted on every
        // decision (found by review: with 2 pillars, fixed rotation, no
        // correct replica but the leader's would ever have suspected it).
        let view = self.view;
        let throttling = match &self.timer.throttled_since {
            Some(t) if t.view == view => lag >= sigma / 2,
            _ => lag + 1 >= sigma,
        };
        if !throttling {
            self.timer.throttled_since = None;
            return None;
        }
        // A new view (a stop, or its end) starts the measure afresh, and so
        // do σ decisions since it started: a correct but loaded lane (a
        // pipeline σ deep, clients skewed to its pillar) sits at the bound
        // too, but drains a whole drift window far faster than a timeout. A
        // throttler must now decide σ rounds per timeout, not one.
        let next = self.next_undecided;
        let restart = match &self.timer.throttled_since {
            Some(t) => t.view != view || next.0 >= t.from.0.saturating_add(sigma),
            None => true,
        };
        if restart {
            self.timer.throttled_since = Some(Throttled::new(view, now, next, self.cfg.n()));
        } else {
            // The lane moved: the slot it waited at since it last moved is
            // charged to that slot's proposer (`blame_throttler`).
            let moved_from = self
                .timer
                .throttled_since
                .as_ref()
                .map(|t| t.at)
                .filter(|at| *at != next);
            let who = moved_from.and_then(|s| self.proposer_of(s));
            if let Some(t) = self.timer.throttled_since.as_mut() {
                if moved_from.is_some() {
                    t.charge(who, now);
                    t.at = next;
                }
            }
        }
        self.timer.throttled_since.as_ref().map(|t| t.since.plus(timeout))
    }

    /// Leaving the view on a throttling suspicion: blame the proposer whose
    /// slots the lane waited at longest during the measure, the slot it
    /// waits at now included. Not simply the stuck slot's leader: with
    /// block-wise rotation a throttler releases its own slot just before
    /// the deadline, and the correct next leader would be blamed (found by
    /// review); nor nobody, which let a leader that withholds under load
    /// escape the exclusion (second review).
    pub(crate) fn blame_throttler(&mut self, now: Millis) -> bool {
        let stuck = self.next_undecided;
        let who = self.proposer_of(stuck);
        let Some(t) = self.timer.throttled_since.as_mut() else {
            return false;
        };
        if t.view != self.view {
            return false;
        }
        t.charge(who, now);
        t.at = stuck;
        let worst = t.worst();
        if let Some(r) = worst.filter(|r| *r != self.me) {
            self.penalties.blame(&self.cfg, r, stuck);
        }
        true
    }
}

/// Since when, in which view and from which slot a lane has held the
/// others at the drift bound, and at whose slots it waited meanwhile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Throttled {
    pub view: View,
    pub since: Millis,
    pub from: Slot,
    /// The slot the lane waits at, since when.
    pub at: Slot,
    pub moved_at: Millis,
    /// Per replica: ms the lane waited at slots it proposes.
    pub waited: Vec<u64>,
}

impl Throttled {
    pub fn new(view: View, now: Millis, next: Slot, n: usize) -> Throttled {
        Throttled {
            view,
            since: now,
            from: next,
            at: next,
            moved_at: now,
            waited: vec![0; n],
        }
    }

    /// The wait at `self.at` ended now; it was `who`'s slot.
    pub fn charge(&mut self, who: Option<ReplicaId>, now: Millis) {
        let wait = now.0.saturating_sub(self.moved_at.0);
        if let Some(w) = who.and_then(|r| self.waited.get_mut(r.index())) {
            *w = w.saturating_add(wait);
        }
        self.moved_at = now;
    }

    /// Who the lane waited for longest (lowest id on a tie), if anyone.
    pub fn worst(&self) -> Option<ReplicaId> {
        let (i, w) = self
            .waited
            .iter()
            .enumerate()
            .max_by_key(|(i, w)| (**w, std::cmp::Reverse(*i)))?;
        (*w > 0).then_some(ReplicaId(i as u32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Block-wise rotation, n = 4: the lane waited 450 ms at each of r0's
    /// slots and 5 ms at the others'; r0 released its last one just before
    /// the deadline and the lane now waits at r1's. r0 is blamed, not r1.
    #[test]
    fn the_proposer_waited_for_longest_is_blamed() {
        let mut t = Throttled::new(View(0), Millis(0), Slot(0), 4);
        let mut now = 0;
        for slot in 0..8u64 {
            now += if slot % 4 == 0 { 450 } else { 5 };
            t.charge(Some(ReplicaId((slot % 4) as u32)), Millis(now));
            t.at = Slot(slot + 1);
        }
        // Stuck at slot 8's successor r1 for 10 ms when the timer fires.
        t.charge(Some(ReplicaId(1)), Millis(now + 10));
        assert_eq!(t.waited, vec![900, 20, 10, 10]);
        assert_eq!(t.worst(), Some(ReplicaId(0)));
        assert_eq!(Throttled::new(View(0), Millis(0), Slot(0), 4).worst(), None);
    }
}
