//! The resource model (issue 15): virtual-time CPU and NIC costs. These runs
//! are deterministic (virtual time), so their numbers can be asserted; the
//! calibration against `chorus bench` and the paper reproductions are in
//! BENCHMARKS.md ("Resource model").

use chorus_core::OrderingMode;
use chorus_sim::perf::{CpuCosts, PerfModel, PerfReport};
use chorus_sim::{run_many, FaultSet, SimOptions};

fn perf_run(mode: OrderingMode, pillars: u32, model: PerfModel) -> PerfReport {
    let mut o = SimOptions::new(mode, pillars, 4)
        .with_faults(FaultSet::none())
        .with_seeds(1, 1);
    o.service = "null".into();
    o.clients = 48;
    o.client_window = 48;
    o.requests_per_client = 300;
    o.fault_window_ms = 1;
    o.liveness_timeout_ms = 600_000;
    o.perf = Some(model);
    // The model's costs were fitted with every replica replying.
    o.few_replies = false;
    let s = run_many(&o);
    assert!(s.ok(), "{s}");
    assert_eq!(s.requests_committed, s.requests_issued);
    s.perf[0].clone()
}

fn cores(n: u32, on_pillars: bool) -> PerfModel {
    PerfModel {
        cores: n,
        consensus_on_pillars: on_pillars,
        costs: CpuCosts::for_service("null"),
        ..PerfModel::default()
    }
}

/// COP §4: pillars scale consensus with cores only when each pillar runs its
/// own lanes; with all consensus on one core thread (today's runtime, issue
/// 13) more pillars buy nothing.
#[test]
fn cop_scales_with_pillars_only_when_consensus_runs_in_them() {
    let one = perf_run(OrderingMode::Cop, 1, cores(8, true));
    let four = perf_run(OrderingMode::Cop, 4, cores(8, true));
    let four_on_one_core = perf_run(OrderingMode::Cop, 4, cores(8, false));
    assert!(
        four.throughput > 1.8 * one.throughput,
        "4 pillars on 8 cores: {four:?} vs 1: {one:?}"
    );
    assert!(
        four_on_one_core.throughput < 1.2 * one.throughput,
        "consensus on one core: {four_on_one_core:?} vs {one:?}"
    );
}

/// A slower CPU is slower; a thinner NIC caps throughput at its bandwidth.
#[test]
fn costs_and_bandwidth_bound_throughput() {
    let base = perf_run(OrderingMode::Pbft, 1, cores(2, false));
    let mut slow = cores(2, false);
    slow.costs.recv_ns *= 4;
    slow.costs.per_batched_request_ns *= 4;
    let slow = perf_run(OrderingMode::Pbft, 1, slow);
    assert!(slow.throughput < 0.7 * base.throughput, "{slow:?} vs {base:?}");
    let mut thin = cores(2, false);
    thin.nic_mbit = 10;
    let thin = perf_run(OrderingMode::Pbft, 1, thin);
    // The leader sends every request to n-1 backups: ~400 bytes a request
    // leave its 10 Mbit/s NIC, about 3 000 requests per second at most.
    assert!(thin.throughput < 0.25 * base.throughput, "{thin:?} vs {base:?}");
}

/// CBASE §6.1.2: with a 1 ms service wait per operation, the parallel
/// executor's throughput grows with the parallelism factor (buckets) up to
/// its workers; the sequential executor stays at ~1 000 operations/s.
#[test]
fn cbase_parallel_execution_grows_with_the_parallelism_factor() {
    let run = |workers: u32, buckets: u32| {
        let mut o = SimOptions::new(OrderingMode::Pbft, 1, 4)
            .with_faults(FaultSet::none())
            .with_seeds(1, 1);
        o.service = "sleep".into();
        o.service_options.buckets = buckets;
        o.clients = 32;
        o.client_window = 16;
        o.requests_per_client = 40;
        o.fault_window_ms = 1;
        o.liveness_timeout_ms = 600_000;
        o.perf = Some(PerfModel {
            cores: 16,
            exec_workers: workers,
            service_wait_us: 1_000,
            costs: CpuCosts::for_service("sleep"),
            ..PerfModel::default()
        });
        let s = run_many(&o);
        assert!(s.ok(), "{s}");
        s.perf[0].throughput
    };
    let sequential = run(1, 16);
    let one_bucket = run(16, 1);
    let sixteen = run(16, 16);
    assert!(sequential < 1_050.0, "sequential: {sequential}");
    assert!(
        one_bucket < 1.1 * sequential,
        "factor 1: {one_bucket} vs {sequential}"
    );
    assert!(sixteen > 6.0 * sequential, "factor 16: {sixteen} vs {sequential}");
}

/// pbft at n = 4 with the null service under `model`, closed loop.
fn pbft_null(clients: u32, window: u32, requests: u32, model: PerfModel) -> SimOptions {
    let mut o = SimOptions::new(OrderingMode::Pbft, 1, 4)
        .with_faults(FaultSet::none())
        .with_seeds(1, 1);
    o.service = "null".into();
    o.clients = clients;
    o.client_window = window;
    o.requests_per_client = requests;
    o.fault_window_ms = 1;
    o.liveness_timeout_ms = 600_000;
    o.perf = Some(model);
    o
}

/// Under the resource model a client's requests of one step and a replica's
/// replies of one event to one client travel as one arrival (one write on
/// the connection): far fewer events than messages, the same requests
/// committed. Before the bundles every message was its own event.
#[test]
fn client_traffic_travels_in_bundles_under_the_model() {
    let o = pbft_null(8, 32, 200, cores(4, false));
    let r = chorus_sim::run_one(&o, 1);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.requests_committed, 1_600);
    let delivered = r.counters.messages_delivered;
    // Each request alone is 4 arrivals at replicas and 4 replies.
    assert!(
        r.events * 2 < delivered,
        "{} events for {delivered} messages delivered",
        r.events
    );
}

/// The model promises a network that loses nothing: when its event queue
/// overflows (saturated replicas pile up future events) the run stops with
/// a violation instead of printing figures for a run that lost messages.
#[test]
fn a_saturated_model_stops_loudly_instead_of_dropping_events() {
    let o = pbft_null(8, 16, 50, cores(1, false));
    let r = chorus_sim::world::World::<chorus_order::Replica>::new(&o, 1)
        .with_queue_capacity(64)
        .run();
    assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
    assert!(
        r.violations[0].detail.contains("resource model saturated"),
        "{:?}",
        r.violations
    );
}

/// Dispel §5.6 in the model: the pbft leader's crash stops every request
/// until the view change; a crashed Dispel replica costs only its own
/// share (no leader, nothing to change). Both keep every request.
#[test]
fn a_leader_crash_pauses_pbft_and_not_dispel() {
    let run = |mode: OrderingMode| {
        let model = PerfModel {
            link_latency_us: 5_000,
            ..cores(4, false)
        };
        let mut o = pbft_null(16, 8, 600, model);
        o.mode = mode;
        o.pillars = 1;
        o.perf_crash = Some((chorus_core::ReplicaId(0), 100));
        o.validate().unwrap();
        let s = run_many(&o);
        assert!(s.ok(), "{mode:?}: {s}");
        assert_eq!(s.requests_committed, s.requests_issued, "{mode:?}");
        s.perf[0].after_crash.clone().expect("a crash was asked for")
    };
    let pbft = run(OrderingMode::Pbft);
    let dispel = run(OrderingMode::Dispel);
    // pbft waits for its request timer and the NEW-VIEW: far longer than
    // a round trip; dispel keeps deciding epochs without r0.
    assert!(pbft.longest_pause_us > 200_000, "pbft {pbft:?}");
    assert!(
        dispel.longest_pause_us < pbft.longest_pause_us / 4,
        "dispel {dispel:?} pbft {pbft:?}"
    );
    assert!(pbft.throughput_before > 0.0 && dispel.throughput_after > 0.0);
}

#[test]
fn perf_crash_needs_the_model_and_a_real_replica() {
    let mut o = pbft_null(1, 1, 1, cores(1, false));
    o.perf_crash = Some((chorus_core::ReplicaId(4), 10));
    assert!(o.validate().is_err(), "replica 4 of n = 4");
    o.perf_crash = Some((chorus_core::ReplicaId(3), 10));
    assert!(o.validate().is_ok());
    o.perf = None;
    assert!(o.validate().is_err(), "without --perf");
    assert!(chorus_sim::options::parse_perf_crash("2@750") == Ok((chorus_core::ReplicaId(2), 750)));
    assert!(chorus_sim::options::parse_perf_crash("2").is_err());
    assert!(chorus_sim::options::parse_perf_crash("x@1").is_err());
}

/// Dispel on a lossless WAN whose epochs outlast the status interval
/// (100 ms one way: an epoch is several round trips, > 250 ms). Before
/// 2026-11-26 every replica looked stalled to every other at each tick and
/// got whole epochs again: the n = 96 storm (`dispel/resend.rs`). Nothing
/// is lost here, so nearly nothing may be re-sent.
#[test]
fn slow_dispel_epochs_on_a_lossless_network_are_not_retransmitted() {
    let model = PerfModel {
        link_latency_us: 100_000,
        client_link_us: Some(1_000),
        ..cores(4, false)
    };
    let mut o = pbft_null(8, 4, 40, model);
    o.mode = OrderingMode::Dispel;
    o.n = 7;
    // One epoch at a time (Dispel §5.3's setting): the first undelivered
    // epoch stays put for a whole epoch.
    o.epochs = Some(1);
    o.validate().unwrap();
    let s = run_many(&o);
    assert!(s.ok(), "{s}");
    assert_eq!(s.requests_committed, s.requests_issued);
    let dbft = s.counters.by_kind.get("dbft").copied().unwrap_or(0);
    let resent = s
        .counters
        .notes
        .get("replica-retransmission")
        .copied()
        .unwrap_or(0);
    // Frames: since 2026-11-26 a frame is a bundle of the messages of one
    // burst (2 688 frames here, about 11 000 messages before bundles), and
    // `resent` still counts messages, so the bound is only stricter.
    assert!(dbft > 1_000, "{s}");
    assert!(
        resent * 100 < dbft,
        "{resent} re-sent messages against {dbft} DBFT frames: {s}"
    );
}

/// Dispel on a LAN at n = 16 with many concurrent epochs (issue 15): a busy
/// replica sends the small DBFT messages of a burst as one bundle per peer,
/// so an epoch costs O(n²) frames, not O(n³) messages, and the thin
/// epochs stay fast.
#[test]
fn dispel_bundles_votes_per_burst() {
    let mut o = SimOptions::new(OrderingMode::Dispel, 1, 16)
        .with_faults(FaultSet::none())
        .with_seeds(1, 1);
    o.service = "null".into();
    o.clients = 64;
    o.client_window = 16;
    o.requests_per_client = 40;
    o.fault_window_ms = 1;
    o.liveness_timeout_ms = 600_000;
    o.epochs = Some(8);
    o.perf = Some(PerfModel {
        cores: 8,
        consensus_on_pillars: true,
        nic_mbit: 1_000,
        costs: CpuCosts::for_service("null"),
        ..PerfModel::default()
    });
    let s = run_many(&o);
    assert!(s.ok(), "{s}");
    assert_eq!(s.requests_committed, s.requests_issued);
    let frames = s.counters.by_kind.get("dbft").copied().unwrap_or(0);
    // Measured on d66449d: 20 frames per request with bundles, 102 with
    // one frame per step's messages, more than 400 with one per message.
    assert!(
        frames > 0 && frames < 50 * s.requests_committed,
        "{frames} DBFT frames for {} requests: not bundled",
        s.requests_committed
    );
    assert!(s.perf[0].p50_us < 20_000, "{:?}", s.perf[0]);
}
