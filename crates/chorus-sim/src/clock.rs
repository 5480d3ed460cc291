//! Per-replica clocks. A replica only ever sees its local time (`now` is an
//! input, DESIGN §2); under the `skew` fault that time has an offset and runs
//! at a slightly different rate than the simulator's global virtual time.

use crate::queue::Micros;
use chorus_core::Millis;

/// The simulated wall clock reads this (ms since the Unix epoch, Nov 2023)
/// at local time 0, so batch times look like real ones yet every run is
/// deterministic.
pub const WALL_EPOCH_MS: u64 = 1_700_000_000_000;

/// A node's wall clock at its local time `local`: skewed clocks skew it too,
/// as the batch-time bound (`max_clock_skew_ms`) must tolerate.
pub fn wall_ms(local: Millis) -> u64 {
    WALL_EPOCH_MS + local.0
}

/// Parts per million of an exact clock rate.
const EXACT_PPM: u64 = 1_000_000;

/// A local clock: `local_us = global_us * rate_ppm / 1e6 + offset_us`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Clock {
    offset_us: u64,
    rate_ppm: u64,
}

impl Clock {
    pub fn exact() -> Clock {
        Clock {
            offset_us: 0,
            rate_ppm: EXACT_PPM,
        }
    }

    /// A skewed clock. The rate is bounded to ±20% so timeouts stay meaningful.
    pub fn skewed(offset_us: u64, rate_ppm: u64) -> Clock {
        assert!(
            (800_000..=1_200_000).contains(&rate_ppm),
            "clock rate {rate_ppm} ppm out of bounds"
        );
        Clock { offset_us, rate_ppm }
    }

    pub fn is_exact(&self) -> bool {
        *self == Clock::exact()
    }

    /// The local time a replica reads at global time `global_us`.
    pub fn local_ms(&self, global_us: Micros) -> Millis {
        let local_us =
            (global_us as u128 * self.rate_ppm as u128 / EXACT_PPM as u128) as u64 + self.offset_us;
        Millis(local_us / 1_000)
    }

    /// The earliest global time at which the local clock reads at least `local`.
    pub fn global_us_at(&self, local: Millis) -> Micros {
        let target_us = local.0.saturating_mul(1_000);
        let Some(scaled_us) = target_us.checked_sub(self.offset_us) else {
            return 0;
        };
        let num = scaled_us as u128 * EXACT_PPM as u128;
        let t = num.div_ceil(self.rate_ppm as u128);
        u64::try_from(t).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_clock_is_identity_in_ms() {
        let c = Clock::exact();
        assert_eq!(c.local_ms(12_345), Millis(12));
        assert_eq!(c.global_us_at(Millis(12)), 12_000);
    }

    #[test]
    fn global_time_of_local_deadline_is_the_earliest_one() {
        for (offset, rate) in [
            (0, 1_000_000),
            (7_300, 950_000),
            (250_000, 1_050_000),
            (1, 1_199_999),
        ] {
            let c = Clock::skewed(offset, rate);
            for local in [0u64, 1, 5, 999, 12_345] {
                let t = c.global_us_at(Millis(local));
                assert!(
                    c.local_ms(t) >= Millis(local),
                    "offset {offset} rate {rate} local {local}"
                );
                if t > 0 {
                    assert!(
                        c.local_ms(t - 1) < Millis(local),
                        "not earliest: offset {offset} rate {rate} local {local}"
                    );
                }
            }
        }
    }

    #[test]
    fn local_time_is_monotonic() {
        let c = Clock::skewed(3_000, 1_100_000);
        let mut last = Millis(0);
        for t in (0..100_000).step_by(777) {
            let l = c.local_ms(t);
            assert!(l >= last);
            last = l;
        }
    }
}
