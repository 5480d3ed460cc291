//! Dispel §4 / §5: with a WAN latency, throughput grows with the number of
//! concurrent epochs the pipeline may run (the issue-11 pipelining table is
//! `chorus sim --mode dispel --latency-ms 50 --epochs K`, BENCHMARKS.md).

use chorus_core::OrderingMode;
use chorus_sim::{run_one, SimOptions};

/// Requests of correct clients committed per simulated second, no faults,
/// 50 ms one-way between replicas, `epochs` concurrent epochs.
fn throughput(epochs: u64) -> f64 {
    let mut o = SimOptions::new(OrderingMode::Dispel, 1, 4).with_faults("none".parse().expect("fault set"));
    o.clients = 64;
    o.requests_per_client = 20;
    o.fault_window_ms = 1;
    o.liveness_timeout_ms = 600_000;
    o.latency_ms = Some(50);
    o.epochs = Some(epochs);
    let r = run_one(&o, 1);
    assert!(r.ok(), "{r}");
    assert_eq!(r.requests_committed, 1_280);
    r.requests_committed as f64 / (r.virtual_us as f64 / 1e6)
}

/// Before the pipeline measured its send rate (Dispel §4.2), "idle link"
/// meant "fewer than two of our INITs not yet RB-delivered", which on a
/// 50 ms link holds for a whole broadcast: 4 and 8 epochs ran no faster than
/// 2 (210 req/s against 158).
#[test]
fn wan_throughput_grows_with_concurrent_epochs() {
    let (one, two, eight) = (throughput(1), throughput(2), throughput(8));
    assert!(two > 1.6 * one, "2 epochs {two:.0} req/s vs 1 epoch {one:.0}");
    assert!(
        eight > 2.0 * two,
        "8 epochs {eight:.0} req/s vs 2 epochs {two:.0}"
    );
}
