//! The upper bound on a proposed batch's time (issue 17, `Batch::time_ms`).
//!
//! The executor's agreed time is the running maximum of batch times, so one
//! batch from the future would hold it there for good: a correct replica
//! accepts (PBFT pre-prepare) or echoes (DBFT RB INIT) a fresh batch only if
//! its time is at most its own wall clock plus `max_clock_skew_ms`. There is
//! no lower bound: a time behind the others only fails to move the maximum.

use chorus_core::{Batch, ProtocolParams};

/// `batch` claims a time further ahead of `wall_ms` than the skew allows.
pub fn from_future(batch: &Batch, wall_ms: u64, p: &ProtocolParams) -> bool {
    batch.time_ms > wall_ms.saturating_add(p.max_clock_skew_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_is_wall_plus_skew_inclusive() {
        let p = ProtocolParams::default();
        let at = |t| Batch::new(vec![], t);
        assert!(!from_future(&at(0), 0, &p));
        assert!(!from_future(&at(10_000 + p.max_clock_skew_ms), 10_000, &p));
        assert!(from_future(&at(10_001 + p.max_clock_skew_ms), 10_000, &p));
        assert!(!from_future(&at(u64::MAX), u64::MAX, &p), "no overflow");
    }
}
