//! RCC §III-C: when a stop ends, instance `i`'s primary takes its rounds
//! back at round `ρ + σ · 2^k` (`penalty::rcc_stop`). A live primary knows
//! that round and is behind every other instance there, so it proposes at
//! once; if the proposal does not come within a short probe, the primary is
//! still down, and waiting a whole view-change timeout would stall every
//! round for nothing (measured: a dead primary cost 2 s at each restart of
//! its instance, BENCHMARKS.md). The probe only pulls the lane's timer in;
//! leaving the view still needs peers that gave up too (`timer.rs`).

use super::Lane;
use chorus_core::{Millis, OrderingMode};

/// Status intervals a restarting primary gets to propose its first round.
const PROBE_INTERVALS: u64 = 2;

impl Lane {
    /// The deadline the restart probe allows, while the lane waits at the
    /// round where its stop ended for the primary's first proposal.
    pub(crate) fn restart_probe_deadline(&mut self, now: Millis, timeout: u64) -> Option<Millis> {
        if self.cfg.params.mode != OrderingMode::Rcc || self.view.0 == 0 {
            self.timer.restart_waiting = None;
            return None;
        }
        let primary = self.cfg.instance_primary(self.id);
        let restart = self
            .excluded
            .iter()
            .find(|e| e.replica == primary)
            .map(|e| e.until)?;
        let slot = self.next_undecided;
        let waiting = slot == restart
            && self
                .slots
                .get(&slot)
                .is_none_or(|st| st.decided.is_none() && st.accepted_in(self.view).is_none());
        if !waiting {
            self.timer.restart_waiting = None;
            return None;
        }
        let key = (self.view, slot);
        let since = match self.timer.restart_waiting {
            Some((k, at)) if k == key => at,
            _ => {
                self.timer.restart_waiting = Some((key, now));
                now
            }
        };
        let probe = self
            .cfg
            .params
            .status_interval_ms
            .saturating_mul(PROBE_INTERVALS)
            .min(timeout);
        Some(since.plus(probe))
    }
}
