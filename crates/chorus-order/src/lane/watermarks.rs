//! Watermarks (PBFT §4.3): a lane accepts slots in `[low, low + window)`.
//! `low` follows the stable checkpoint: checkpoint `seq` covers slots below
//! `seq / P` of every lane (K is a multiple of P).

use super::{Lane, LaneEnv, LaneOutput};
use crate::counters::Cx;
use chorus_core::Slot;

impl Lane {
    /// A checkpoint became stable (or a snapshot was installed): drop
    /// everything below `new_low` and let parked messages into the new window.
    pub fn advance_low(&mut self, cx: &mut Cx, new_low: Slot, env: &LaneEnv) -> LaneOutput {
        let mut lo = LaneOutput::default();
        if new_low <= self.low {
            return lo;
        }
        self.truncate_below(new_low);
        self.progressed = true;
        self.needs_replay = true;
        self.replay(cx, env, &mut lo);
        lo
    }

    /// Drop state below `new_low` (no messages; also used by recovery).
    pub(crate) fn truncate_below(&mut self, new_low: Slot) {
        if new_low <= self.low {
            return;
        }
        self.slots = self.slots.split_off(&new_low);
        self.notices = self.notices.split_off(&new_low);
        self.wants = self.wants.split_off(&new_low);
        self.low = new_low;
        self.apply_recovered_above();
        self.next_undecided = self.next_undecided.max(new_low);
        self.advance_next_undecided();
        debug_assert!(self.slots.keys().all(|s| *s >= self.low && *s < self.high()));
    }
}
