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
use chorus_core::{Millis, OrderingMode, Slot, View};

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
        let throttling = match self.timer.throttled_since {
            None => lag + 1 >= sigma,
            Some(_) => lag >= sigma / 2,
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
        let view = self.view;
        let next = self.next_undecided;
        let fresh = Throttled {
            view,
            since: now,
            from: next,
        };
        let t = self.timer.throttled_since.get_or_insert(fresh);
        if t.view != view || next.0 >= t.from.0.saturating_add(sigma) {
            *t = fresh;
        }
        Some(t.since.plus(timeout))
    }
}

/// Since when, in which view and from which slot a lane has held the
/// others at the drift bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Throttled {
    pub view: View,
    pub since: Millis,
    pub from: Slot,
}
