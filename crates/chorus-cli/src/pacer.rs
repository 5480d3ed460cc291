//! Open-loop arrivals on time.
//!
//! `chorus bench --rate R` counts latency from each request's *intended*
//! send time (no coordinated omission), so a generator that sends late adds
//! its own lateness to every figure. Per-client `tokio::time::sleep_until`
//! did: tokio's timer wheel ticks in whole milliseconds, and the sends were
//! on average 1.0 ms late (measured 2026-11-28, 1 k ops/s, 8 clients), a
//! third of the p50 the benchmark reported. Here one thread owns the merged
//! schedule of all clients (arrival `j` at `start + j / R`, client `j mod
//! N`, so the clients' phases are spread evenly rather than all firing
//! together) and sleeps with the OS's high-resolution timer; the runtime
//! sends what it hands over. The lateness that remains is measured and
//! reported with every open-loop run (`pacing_late_*`).

use rand::SeedableRng;
use rand_distr::Distribution;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Arrivals handed over but not yet sent; a full queue makes the pacer
/// wait (the arrivals it then hands over late still count from their
/// intended time, so the wait shows in the latency and in the lateness).
pub const ARRIVALS_QUEUED_MAX: usize = 65_536;

/// The pacer wakes at most once per quantum and hands over every arrival
/// due by then. A wake-up (and the runtime's) per arrival cost the load
/// generator 37 % more CPU at 12 k ops/s (42.9 vs 31.3 µs per request, CPU
/// the replicas share on a small machine); a 1 ms quantum cost nothing
/// there but sent Poisson arrivals at 1 k ops/s 0.43 ms late (p50) instead
/// of 0.12. So the quantum grows with the rate: 62.5 µs at 1 k ops/s,
/// 1 ms from 16 k ops/s on (at most ~4 k wake-ups a second, near 4 k
/// ops/s). What lateness remains is measured and reported.
pub fn wake_quantum(rate_per_s: f64) -> Duration {
    const FULL_QUANTUM_AT_OPS: f64 = 16_000.0;
    const QUANTUM_MAX: Duration = Duration::from_millis(1);
    QUANTUM_MAX.mul_f64((rate_per_s / FULL_QUANTUM_AT_OPS).clamp(0.0, 1.0))
}

/// The shape of the arrival process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrivals {
    /// Evenly spaced, 1 / R apart.
    Uniform,
    /// A Poisson process of rate R (exponential gaps, seeded).
    Poisson,
}

/// Seed of the Poisson schedule: runs compare like with like.
const POISSON_SEED: u64 = 0x00c0_ffee;

/// One request the schedule wants sent now.
#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    pub client: usize,
    pub scheduled: Instant,
}

/// The intended time of arrival `j` at `rate_per_s` arrivals per second.
pub fn scheduled_at(start: Instant, rate_per_s: f64, j: u64) -> Instant {
    start + Duration::from_secs_f64(j as f64 / rate_per_s)
}

/// Runs the schedule on a thread of its own until `stop` is set or the
/// receiver is gone.
pub fn spawn(
    clients: usize,
    rate_per_s: f64,
    arrivals: Arrivals,
    stopped: impl Fn() -> bool + Send + 'static,
) -> std::io::Result<(mpsc::Receiver<Arrival>, std::thread::JoinHandle<()>)> {
    assert!(clients > 0, "an open loop needs at least one client");
    assert!(rate_per_s > 0.0, "an open loop needs a positive rate");
    let (tx, rx) = mpsc::channel(ARRIVALS_QUEUED_MAX);
    let handle = std::thread::Builder::new()
        .name("bench-pacer".into())
        .spawn(move || {
            let start = Instant::now();
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(POISSON_SEED);
            let gaps = rand_distr::Exp::new(rate_per_s).expect("a positive rate");
            let mut poisson_offset_s = 0.0f64;
            let mut j: u64 = 0;
            let mut last_wake = start;
            let quantum = wake_quantum(rate_per_s);
            while !stopped() {
                let due = match arrivals {
                    Arrivals::Uniform => scheduled_at(start, rate_per_s, j),
                    Arrivals::Poisson => {
                        poisson_offset_s += gaps.sample(&mut rng);
                        start + Duration::from_secs_f64(poisson_offset_s)
                    }
                };
                let now = Instant::now();
                if due > now {
                    // `nanosleep`: microseconds late (the kernel's timer
                    // slack), not tokio's millisecond ticks; at most one
                    // wake-up per quantum, the arrivals due by then handed
                    // over together.
                    let wake = due.max(last_wake + quantum);
                    std::thread::sleep(wake - now);
                    last_wake = Instant::now();
                }
                let arrival = Arrival {
                    client: (j % clients as u64) as usize,
                    scheduled: due,
                };
                if tx.blocking_send(arrival).is_err() {
                    return;
                }
                j += 1;
            }
        })?;
    Ok((rx, handle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn arrivals_go_round_the_clients_evenly_spaced_and_on_time() {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let (mut rx, handle) =
            spawn(4, 2_000.0, Arrivals::Uniform, move || s.load(Ordering::Relaxed)).unwrap();
        let mut got = Vec::new();
        for _ in 0..200 {
            let a = rx.blocking_recv().unwrap();
            // Never handed over before its time: early sends would hide
            // latency.
            assert!(Instant::now() >= a.scheduled);
            got.push(a);
        }
        stop.store(true, Ordering::Relaxed);
        drop(rx);
        handle.join().unwrap();
        for (j, a) in got.iter().enumerate() {
            assert_eq!(a.client, j % 4, "arrival {j} goes to client j mod N");
        }
        for w in got.windows(2) {
            let gap = w[1].scheduled - w[0].scheduled;
            assert!(
                (gap.as_secs_f64() - 0.0005).abs() < 1e-6,
                "intended times are 1/R apart: {gap:?}"
            );
        }
    }

    #[test]
    fn poisson_arrivals_average_the_rate_and_are_not_evenly_spaced() {
        let (mut rx, handle) = spawn(3, 20_000.0, Arrivals::Poisson, || false).unwrap();
        let got: Vec<Arrival> = (0..2_000).map(|_| rx.blocking_recv().unwrap()).collect();
        drop(rx);
        handle.join().unwrap();
        let span = (got[1_999].scheduled - got[0].scheduled).as_secs_f64();
        let mean_gap = span / 1_999.0;
        assert!((mean_gap - 50e-6).abs() < 10e-6, "mean gap {mean_gap}");
        let gaps: Vec<f64> = got
            .windows(2)
            .map(|w| (w[1].scheduled - w[0].scheduled).as_secs_f64())
            .collect();
        let short = gaps.iter().filter(|g| **g < 25e-6).count();
        // Exponential: P(gap < mean / 2) = 1 - e^-0.5 ≈ 39 %.
        assert!(
            (600..1_000).contains(&short),
            "{short} of 1999 gaps below half the mean"
        );
    }

    #[test]
    fn the_wake_quantum_grows_with_the_rate_up_to_a_millisecond() {
        assert_eq!(wake_quantum(1_000.0), Duration::from_nanos(62_500));
        assert_eq!(wake_quantum(16_000.0), Duration::from_millis(1));
        assert_eq!(wake_quantum(1e9), Duration::from_millis(1));
    }

    #[test]
    fn the_pacer_stops_when_the_receiver_is_gone() {
        let (rx, handle) = spawn(1, 1_000_000.0, Arrivals::Uniform, || false).unwrap();
        drop(rx);
        handle.join().unwrap();
    }
}
