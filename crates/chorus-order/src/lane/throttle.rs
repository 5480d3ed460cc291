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
//! many rounds it trickles through meanwhile. A lane that falls behind only
//! briefly (a burst, a slow link) catches up long before.

use super::Lane;
use chorus_core::{Millis, OrderingMode, Seq};

impl Lane {
    /// `frontier`: the replica's round frontier (`Replica::frontier`, in rcc
    /// the position just above the highest round seen). The latest deadline
    /// the throttling rule allows, if this lane is throttling the others.
    pub(crate) fn throttle_deadline(
        &mut self,
        now: Millis,
        frontier: Option<Seq>,
        timeout: u64,
    ) -> Option<Millis> {
        if self.cfg.params.mode != OrderingMode::Rcc {
            return None;
        }
        let m = self.cfg.lanes().max(1) as u64;
        let sigma = self.cfg.params.max_lane_drift_slots.max(2);
        let top_round = frontier.map(|f| (f.0 / m).saturating_sub(1));
        let lag = top_round.map_or(0, |r| r.saturating_sub(self.next_undecided.0));
        if lag + 1 < sigma {
            self.timer.throttled_since = None;
            return None;
        }
        // A new view (a stop, or its end) starts the measure afresh.
        let view = self.view;
        let (_, since) = *self.timer.throttled_since.get_or_insert((view, now));
        let since = match self.timer.throttled_since {
            Some((v, _)) if v != view => {
                self.timer.throttled_since = Some((view, now));
                now
            }
            _ => since,
        };
        Some(since.plus(timeout))
    }
}
