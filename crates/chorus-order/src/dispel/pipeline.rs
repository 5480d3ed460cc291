//! When a replica spawns its next epoch (Dispel §4.1–§4.3): a pure function
//! of what the replica sees, so the policy is tested on its own.
//!
//! * **Enough to propose** — a full batch, or the oldest request waited
//!   `batch_delay_ms`, or another proposer's request waited the rescue
//!   timeout (§4.1: "pool full enough or timeout").
//! * **Network idle** (§4.2) — the paper compares the measured send rate
//!   with the link capacity. A sans-IO core has no clock for rates, so it uses
//!   the equivalent back-log signal: how many of our own INITs have not yet
//!   been RB-delivered here (a delivered INIT reached an echo quorum, so its
//!   bytes have left our link). Below `max_undelivered_own` the link is idle.
//! * **Memory** (§4.3) — at most `max_depth` epochs joined above the
//!   delivery point (`max_lane_drift_slots`, the "concurrent epochs" knob),
//!   and never beyond the engine's window (`window_slots`).
//!
//! Oldest-epoch priority (§4.5) is structural here: the engine handles
//! events in arrival order and the merger delivers epoch by epoch, so a new
//! epoch is spawned only while the older ones fit in the depth budget.

/// Own INITs in flight that still count as an idle link.
pub const MAX_UNDELIVERED_OWN: u64 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpawnView {
    /// The epoch we would spawn (None: already proposed, or outside the window).
    pub next_spawn: Option<u64>,
    /// First epoch not yet delivered.
    pub next_epoch: u64,
    /// Concurrent epochs allowed.
    pub max_depth: u64,
    pub own_undelivered: u64,
    /// The pool has a batch due (full or timed out) or a request to rescue.
    pub batch_due: bool,
}

/// The epoch to spawn now, if any.
pub fn spawn_now(v: SpawnView) -> Option<u64> {
    let e = v.next_spawn?;
    let depth_ok = e < v.next_epoch.saturating_add(v.max_depth.max(1));
    let idle = v.own_undelivered < MAX_UNDELIVERED_OWN;
    (v.batch_due && depth_ok && idle).then_some(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> SpawnView {
        SpawnView {
            next_spawn: Some(5),
            next_epoch: 4,
            max_depth: 4,
            own_undelivered: 0,
            batch_due: true,
        }
    }

    #[test]
    fn spawns_when_due_idle_and_within_depth() {
        assert_eq!(spawn_now(view()), Some(5));
    }

    #[test]
    fn nothing_due_no_epoch() {
        assert_eq!(
            spawn_now(SpawnView {
                batch_due: false,
                ..view()
            }),
            None
        );
    }

    #[test]
    fn depth_budget_bounds_concurrent_epochs() {
        // Epochs 4..8 in flight with depth 4: 8 must wait for 4 to deliver.
        assert_eq!(
            spawn_now(SpawnView {
                next_spawn: Some(8),
                ..view()
            }),
            None
        );
        assert_eq!(
            spawn_now(SpawnView {
                next_spawn: Some(7),
                ..view()
            }),
            Some(7)
        );
        // Depth 1 = no pipelining: only the epoch being delivered.
        let one = SpawnView {
            max_depth: 1,
            ..view()
        };
        assert_eq!(spawn_now(one), None);
        assert_eq!(
            spawn_now(SpawnView {
                next_spawn: Some(4),
                ..one
            }),
            Some(4)
        );
    }

    #[test]
    fn busy_link_waits() {
        let v = SpawnView {
            own_undelivered: MAX_UNDELIVERED_OWN,
            ..view()
        };
        assert_eq!(spawn_now(v), None);
    }

    #[test]
    fn outside_window_or_already_proposed() {
        assert_eq!(
            spawn_now(SpawnView {
                next_spawn: None,
                ..view()
            }),
            None
        );
    }
}
