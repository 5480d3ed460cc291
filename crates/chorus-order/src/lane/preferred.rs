//! SAREK's preferred leader (SAREK §IV-A): partition `k` is led by replica
//! `k mod n` in every view `v ≡ 0 (mod n)`. After a view change moved the
//! leadership on, a *planned* view change brings it back once the lane has
//! decided `preferred_return_slots` slots in the other replica's view, so one
//! replica does not end up leading several partitions for good (the load
//! balance SAREK's one-leader-per-partition layout is for).
//!
//! The boundary is a pure function of agreed state: the first fresh slot of
//! the view's NEW-VIEW (`nv.end()`, the same at every replica that entered the
//! view through it) plus the wait. The leader stops proposing at the
//! boundary. A replica that decided up to it does not leave the view on its
//! own: it signs a timeout statement for the view before the target, and the
//! lane leaves once 2f+1 did (a timeout certificate, `timeout_cert.rs`), which
//! moves every correct replica together. Leaving alone stranded a replica in
//! the target view while the others changed to v+1 on a timer (sim sarek
//! seed 50943: r0 alone changing to v4, r1 and r2 in v3). A preferred leader
//! that fails again is not retried every `preferred_return_slots` slots: the
//! wait doubles with every full rotation of views (`v / n`, capped), and the
//! view number is agreed too. A planned change blames nobody and does not
//! grow the view-change back-off.

use super::{Lane, LaneEnv, LaneOutput};
use crate::counters::Cx;
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

    /// Planned return to `target` (`preferred_return_due`): sign our
    /// statement that we give up on every view below it, and leave once 2f+1
    /// replicas did.
    pub(crate) fn start_preferred_return(&mut self, cx: &mut Cx, env: &LaneEnv, target: View) -> LaneOutput {
        let mut lo = LaneOutput::default();
        debug_assert!(target > self.view && target.0.is_multiple_of(self.cfg.n().max(1) as u64));
        let Some(last) = target.0.checked_sub(1) else {
            return lo;
        };
        self.give_up(cx, View(last));
        if self.leave_on_certificate(cx, env, &mut lo) {
            tracing::info!(lane = ?self.id, view = ?self.view, "planned view change back to the preferred leader");
            self.replay(cx, env, &mut lo);
        }
        lo
    }
}
