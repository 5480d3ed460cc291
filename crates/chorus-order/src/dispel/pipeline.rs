//! When a replica spawns its next epoch (Dispel §4.1–§4.3): a pure function
//! of what the replica sees, so the policy is tested on its own.
//!
//! * **Enough to propose** — a full batch, or the oldest request waited
//!   `batch_delay_ms`, or another proposer's request waited the rescue
//!   timeout (§4.1: "pool full enough or timeout").
//! * **Network idle** (§4.2) — "every 2 ms, each node measures its sending
//!   rate and compares this sending rate after 3 samples (over the resulting
//!   6 ms duration) to the physical network capacity. If the network usage is
//!   lower than 5 % … the network is considered idle." `SendMeter` counts the
//!   bytes of every DBFT message we send (a broadcast once per peer) in 2 ms
//!   samples of the core's clock input; the capacity is
//!   `link_capacity_mib_s` (600 MiB/s, the paper's c5.xlarge, by default).
//!   An earlier version used the number of our INITs not yet RB-delivered as
//!   a clock-free proxy; on a WAN that number stays high for a round trip on
//!   an idle link and capped the pipeline at about two epochs per broadcast
//!   latency whatever the memory budget (docs/decisions.md "Dispel's idle
//!   link is a send rate").
//! * **Memory** (§4.3) — at most `max_depth` epochs joined above the
//!   delivery point (`max_lane_drift_slots`, the "concurrent epochs" knob),
//!   and never beyond the engine's window (`window_slots`).
//!
//! Oldest-epoch priority (§4.5) is structural here: the engine handles
//! events in arrival order and the merger delivers epoch by epoch, so a new
//! epoch is spawned only while the older ones fit in the depth budget.

use chorus_core::Millis;

/// Dispel §4.2: the sending rate is sampled every 2 ms…
pub const SAMPLE_MS: u64 = 2;
/// …and judged over the last 3 samples…
pub const SAMPLES: u64 = 3;
/// …against this share of the link's capacity.
pub const IDLE_PERCENT: u64 = 5;

/// Bytes sent per 2 ms sample, for the last `SAMPLES` samples.
#[derive(Clone, Debug, Default)]
pub struct SendMeter {
    /// (sample number = time / `SAMPLE_MS`, bytes sent in it), by sample
    /// number modulo `SAMPLES`.
    samples: [(u64, u64); SAMPLES as usize],
}

impl SendMeter {
    pub fn record(&mut self, now: Millis, bytes: u64) {
        let n = now.0 / SAMPLE_MS;
        let s = &mut self.samples[(n % SAMPLES) as usize];
        if s.0 != n {
            *s = (n, 0);
        }
        s.1 = s.1.saturating_add(bytes);
    }

    /// Bytes sent in the current sample and the `SAMPLES - 1` before it.
    pub fn recent_bytes(&self, now: Millis) -> u64 {
        let n = now.0 / SAMPLE_MS;
        self.samples
            .iter()
            .filter(|(i, _)| *i <= n && *i + SAMPLES > n)
            .map(|(_, b)| *b)
            .sum()
    }

    /// Below `IDLE_PERCENT` of `capacity_bytes_per_s` over the window.
    pub fn idle(&self, now: Millis, capacity_bytes_per_s: u64) -> bool {
        let window_ms = u128::from(SAMPLES * SAMPLE_MS);
        let sent_per_s_x100 = u128::from(self.recent_bytes(now)) * 1_000 * 100;
        sent_per_s_x100 < u128::from(capacity_bytes_per_s) * u128::from(IDLE_PERCENT) * window_ms
    }

    /// The start of the next sample: the earliest time the window changes.
    pub fn next_sample(&self, now: Millis) -> Millis {
        Millis((now.0 / SAMPLE_MS + 1) * SAMPLE_MS)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpawnView {
    /// The epoch we would spawn (None: already proposed, or outside the window).
    pub next_spawn: Option<u64>,
    /// First epoch not yet delivered.
    pub next_epoch: u64,
    /// Concurrent epochs allowed.
    pub max_depth: u64,
    /// Our outgoing link is idle (`SendMeter::idle`).
    pub link_idle: bool,
    /// The pool has a batch due (full or timed out) or a request to rescue.
    pub batch_due: bool,
}

/// The epoch to spawn now, if any.
pub fn spawn_now(v: SpawnView) -> Option<u64> {
    let e = v.next_spawn?;
    let depth_ok = e < v.next_epoch.saturating_add(v.max_depth.max(1));
    (v.batch_due && depth_ok && v.link_idle).then_some(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> SpawnView {
        SpawnView {
            next_spawn: Some(5),
            next_epoch: 4,
            max_depth: 4,
            link_idle: true,
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
            link_idle: false,
            ..view()
        };
        assert_eq!(spawn_now(v), None);
    }

    /// 600 MiB/s: 5 % over 6 ms is 188 743 bytes.
    const CAPACITY: u64 = 600 << 20;

    #[test]
    fn the_link_is_idle_below_five_percent_over_three_samples() {
        let mut m = SendMeter::default();
        assert!(m.idle(Millis(100), CAPACITY));
        m.record(Millis(100), 188_000);
        assert!(m.idle(Millis(100), CAPACITY), "just under 5 %");
        m.record(Millis(101), 1_000);
        assert!(!m.idle(Millis(101), CAPACITY), "over 5 % of 6 ms");
        // Still inside the three samples 100..106 …
        assert!(!m.idle(Millis(105), CAPACITY));
        assert_eq!(m.next_sample(Millis(105)), Millis(106));
        // … and gone once the sample of t=100..102 left the window.
        assert!(m.idle(Millis(106), CAPACITY));
        assert_eq!(m.recent_bytes(Millis(106)), 0);
    }

    #[test]
    fn old_samples_are_replaced_not_added() {
        let mut m = SendMeter::default();
        m.record(Millis(0), 500);
        // Sample 3 reuses the slot of sample 0.
        m.record(Millis(6), 7);
        assert_eq!(m.recent_bytes(Millis(6)), 7);
        m.record(Millis(7), 3);
        assert_eq!(m.recent_bytes(Millis(7)), 10);
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
