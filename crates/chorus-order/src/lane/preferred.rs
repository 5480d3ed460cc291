//! SAREK's preferred leader (SAREK §IV-A): partition `k` is led by replica
//! `k mod n` in every view `v ≡ 0 (mod n)`. After a view change moved the
//! leadership on, a *planned* view change brings it back once the lane has
//! decided `preferred_return_slots` slots in the other replica's view, so one
//! replica does not end up leading several partitions for good (the load
//! balance SAREK's one-leader-per-partition layout is for).
//!
//! The boundary is a pure function of agreed state: the first fresh slot of
//! the view's NEW-VIEW (`nv.end()`, the same at every replica that entered the
//! view through it) plus the wait. Every correct replica that decides up to
//! the boundary starts the same view change; one that lags joins through the
//! f+1 rule. The leader stops proposing at the boundary. A preferred leader
//! that fails again is not retried every `preferred_return_slots` slots: the
//! wait doubles with every full rotation of views (`v / n`, capped), and the
//! view number is agreed too. A planned change blames nobody and does not
//! grow the view-change back-off.

use super::{Lane, LaneEnv, LaneOutput};
use crate::counters::{Cx, ViewChangeCause};
use chorus_core::{OrderingMode, Slot, View};

/// The wait doubles per failed return up to 2^6 times the configured one.
const MAX_RETURN_SHIFT: u64 = 6;

impl Lane {
    /// The first slot the leader of the current view may not propose because
    /// the lane returns to its preferred leader there; `None` when no return
    /// is planned (not sarek, the preferred leader leads, or no NEW-VIEW).
    pub(crate) fn preferred_return_boundary(&self) -> Option<Slot> {
        let every = self.cfg.params.preferred_return_slots;
        if self.cfg.params.mode != OrderingMode::Sarek || every == 0 || !self.active {
            return None;
        }
        let n = self.cfg.n().max(1) as u64;
        if self.view.0.is_multiple_of(n) {
            return None;
        }
        let start = self.nv.as_ref()?.end();
        let rotations = (self.view.0 / n).min(MAX_RETURN_SHIFT);
        Some(Slot(start.0.saturating_add(every.saturating_mul(1 << rotations))))
    }

    /// The view the planned return goes to, once every slot below the
    /// boundary is decided.
    pub(crate) fn preferred_return_due(&self) -> Option<View> {
        let boundary = self.preferred_return_boundary()?;
        if self.next_undecided < boundary {
            return None;
        }
        let n = self.cfg.n().max(1) as u64;
        Some(View((self.view.0 / n + 1).saturating_mul(n)))
    }

    /// Start the planned view change to `target` (`preferred_return_due`).
    pub(crate) fn start_preferred_return(&mut self, cx: &mut Cx, env: &LaneEnv, target: View) -> LaneOutput {
        let mut lo = LaneOutput::default();
        debug_assert!(target > self.view && target.0.is_multiple_of(self.cfg.n().max(1) as u64));
        let backoff = self.timer.failures;
        tracing::info!(lane = ?self.id, from = ?self.view, to = ?target, "planned view change back to the preferred leader");
        self.start_view_change(cx, target, ViewChangeCause::PreferredReturn, env, &mut lo);
        // Nobody failed: the back-off stays where it was.
        self.timer.failures = backoff;
        self.replay(cx, env, &mut lo);
        lo
    }
}
