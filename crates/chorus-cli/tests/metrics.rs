//! Issue 14 item 2: `/metrics` of a real replica process, read over HTTP and
//! parsed by a Prometheus text parser (`prometheus-parse`): the per-lane
//! view metrics are there, counters are typed as counters (the Content-Type
//! matches the body), values are current at idle, and a killed leader shows
//! up as view changes with a cause.

mod common;

use bytes::Bytes;
use chorus_apps::kv_op::KvOp;
use chorus_core::OrderingMode;
use common::{rt, TestCluster};
use prometheus_parse::{Sample, Scrape, Value};
use std::io::{Read, Write};

use std::time::{Duration, Instant};

/// `GET /metrics` with an optional `Accept`: (Content-Type, body).
fn get(port: u16, accept: Option<&str>) -> (String, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics port");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    // Sent in two writes: the server must read the whole head (its Accept
    // header) before it answers.
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    s.write_all(format!("{accept}\r\n").as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    let ctype = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Type: "))
        .expect("a Content-Type")
        .to_string();
    (ctype, body.to_string())
}

fn scrape(c: &TestCluster, r: usize) -> Scrape {
    let (ctype, body) = get(c.config.replicas[r].metrics_port, None);
    assert_eq!(ctype, "text/plain; version=0.0.4; charset=utf-8");
    Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("parses as Prometheus text")
}

fn find<'a>(s: &'a Scrape, metric: &str, label: Option<(&str, &str)>) -> Option<&'a Sample> {
    s.samples
        .iter()
        .find(|x| x.metric == metric && label.is_none_or(|(k, v)| x.labels.get(k) == Some(v)))
}

fn gauge(s: &Scrape, metric: &str, label: Option<(&str, &str)>) -> f64 {
    match find(s, metric, label).map(|x| &x.value) {
        Some(Value::Gauge(v)) => *v,
        other => panic!("{metric} {label:?} is not a gauge: {other:?}"),
    }
}

fn counter(s: &Scrape, metric: &str, label: Option<(&str, &str)>) -> f64 {
    match find(s, metric, label).map(|x| &x.value) {
        Some(Value::Counter(v)) => *v,
        other => panic!("{metric} {label:?} is not a counter: {other:?}"),
    }
}

async fn put(c: &TestCluster, prefix: &str, count: usize) {
    let client = c.client(0).await;
    for i in 0..count {
        let k = Bytes::from(format!("{prefix}-{i}"));
        client
            .invoke(KvOp::put(k, Bytes::from_static(b"v")))
            .await
            .expect("put");
    }
}

#[test]
fn metrics_of_a_running_replica_parse_and_show_lanes_latency_and_view_changes() {
    let mut c = TestCluster::new_in_range(6_000, 10, OrderingMode::Cop, 2, 3, |_| {});
    c.wait_up(&[0, 1, 2, 3], Duration::from_secs(20));
    let rt = rt();
    rt.block_on(put(&c, "a", 60));
    // Clients of both lanes (client c owns lane c mod 2), connected in an
    // order that connections spread in turn over the pillars would route
    // at least one of them to the wrong pillar, whatever the turn.
    rt.block_on(async {
        for ci in [1, 0, 2] {
            let client = c.client(ci).await;
            for i in 0..10 {
                let k = Bytes::from(format!("owner-{ci}-{i}"));
                client
                    .invoke(KvOp::put(k, Bytes::from_static(b"v")))
                    .await
                    .expect("put");
            }
        }
    });
    // Idle from here: values must still be current.
    std::thread::sleep(Duration::from_millis(500));
    let s = scrape(&c, 1);
    for lane in ["0", "1"] {
        assert_eq!(gauge(&s, "chorus_lane_view", Some(("lane", lane))), 0.0);
        assert_eq!(gauge(&s, "chorus_lane_view_changing", Some(("lane", lane))), 0.0);
        assert!(gauge(&s, "chorus_lane_next_undecided_slot", Some(("lane", lane))) > 0.0);
        assert!(counter(&s, "chorus_lane_decided_slots_total", Some(("lane", lane))) > 0.0);
        gauge(&s, "chorus_lane_proposer", Some(("lane", lane)));
    }
    // Replica 0 leads slot 0 of every lane in view 0 (either leader rotation).
    let s0 = scrape(&c, 0);
    for lane in ["0", "1"] {
        assert!(counter(&s0, "chorus_lane_proposals_total", Some(("lane", lane))) > 0.0);
    }
    assert!(counter(&s, "chorus_executed_requests_total", None) >= 60.0);
    // cop at two pillars runs each lane's consensus on its pillar (COP §4,
    // `lane_split.rs`): every replica says so, and has no pre-checks to do
    // (the group checks its lanes' signatures on the pillar's thread).
    for r in 0..4 {
        let s = scrape(&c, r);
        assert_eq!(
            gauge(&s, "chorus_lane_groups_on_pillars", None),
            2.0,
            "replica {r}"
        );
        assert_eq!(
            counter(&s, "chorus_signatures_pre_verified_total", None),
            0.0,
            "replica {r}"
        );
        // Each client is served by its owner lane's pillar (COP §4).
        assert_eq!(
            counter(&s, "chorus_requests_to_other_pillars_total", None),
            0.0,
            "replica {r}"
        );
    }
    // The client learnt the view from f + 1 replicas before sending to the
    // primary alone (leader-first, the default).
    let asked: f64 = (0..4)
        .map(|r| counter(&scrape(&c, r), "chorus_view_queries_total", None))
        .sum();
    assert!(asked >= 2.0, "view questions answered: {asked}");
    let status = c.status(1).expect("status");
    assert_eq!(
        gauge(&s, "chorus_executed_position", None),
        status["executed_seq"].as_u64().unwrap() as f64,
        "executed position is current at idle"
    );
    assert_eq!(
        gauge(&s, "chorus_next_delivery", None),
        status["core"]["next_delivery"].as_u64().unwrap() as f64,
        "delivery position is current at idle"
    );
    // Where requests are admitted from clients: the primary of view 0 (the
    // client sends to it alone, PBFT §4.1; a backup admits only requests
    // that reach it directly, retransmissions and the client's first ones).
    match find(
        &s0,
        "chorus_request_latency_seconds",
        Some(("stage", "admission_to_reply")),
    )
    .map(|x| &x.value)
    {
        Some(Value::Histogram(buckets)) => {
            // One request in `SAMPLE_EVERY` is timed (`latency::sampled`).
            let total = buckets.last().map(|b| b.count).unwrap_or(0.0);
            let timed = (60 / chorus_node::latency::SAMPLE_EVERY) as f64;
            assert!(total >= timed, "{buckets:?}");
        }
        other => panic!("no admission_to_reply histogram: {other:?}"),
    }
    assert!(gauge(&s, "chorus_process_resident_memory_bytes", None) > 1e6);
    assert!(counter(&s, "chorus_process_cpu_seconds_total", None) > 0.0);
    assert!(gauge(&s, "chorus_storage_bytes", None) > 0.0);
    // The heartbeat moves while the core runs, without traffic.
    let beat = gauge(&s, "chorus_core_heartbeat_seconds", None);
    std::thread::sleep(Duration::from_millis(400));
    assert!(gauge(&scrape(&c, 1), "chorus_core_heartbeat_seconds", None) > beat);

    // The same metrics in OpenMetrics for a scraper that asks for it.
    let (ctype, body) = get(
        c.config.replicas[1].metrics_port,
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    );
    assert_eq!(
        ctype,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(body.trim_end().ends_with("# EOF"));
    assert!(body.contains("# TYPE chorus_executed_requests counter\n"));

    // Kill replica 0, a leader in view 0: a lane it was to propose in
    // changes view at the others, and the metrics say so, with a cause.
    c.kill(0);
    rt.block_on(put(&c, "b", 20));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = scrape(&c, 2);
        let view = ["0", "1"]
            .iter()
            .map(|l| gauge(&s, "chorus_lane_view", Some(("lane", l))))
            .fold(0.0, f64::max);
        let causes: f64 = s
            .samples
            .iter()
            .filter(|x| x.metric == "chorus_view_changes_total")
            .map(|x| match x.value {
                Value::Counter(v) => v,
                _ => panic!("view changes are not a counter: {x:?}"),
            })
            .sum();
        if view >= 1.0 && causes >= 1.0 {
            let per_lane: f64 = ["0", "1"]
                .iter()
                .map(|l| counter(&s, "chorus_lane_view_changes_total", Some(("lane", l))))
                .sum();
            assert_eq!(per_lane, causes, "per-lane and per-cause view changes agree");
            assert!(counter(&s, "chorus_new_views_total", None) >= 1.0);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no view change in the metrics: view {view}, causes {causes}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// With the lanes on the core and several pillars (sarek here, its
/// partitions kept on the core by `CHORUS_LANE_GROUPS=core`), the pillars
/// check signatures ahead of the core (`chorus_order::pre_check`): live in
/// a running replica, not only tested.
#[test]
fn pillars_check_signatures_ahead_of_a_core_that_runs_the_lanes() {
    let mut c = TestCluster::new_in_range(6_000, 10, OrderingMode::Sarek, 2, 2, |_| {});
    for i in 0..4 {
        // Stopped first: its successor binds the same ports.
        c.kill(i);
        let child = common::spawn_replica_with_env(c.path(), i, &[("CHORUS_LANE_GROUPS", "core")]);
        c.adopt(i, child);
    }
    c.wait_up(&[0, 1, 2, 3], Duration::from_secs(20));
    rt().block_on(put(&c, "p", 40));
    let mut pre_verified = 0.0;
    for r in 0..4 {
        let s = scrape(&c, r);
        assert_eq!(
            gauge(&s, "chorus_lane_groups_on_pillars", None),
            0.0,
            "replica {r}"
        );
        pre_verified += counter(&s, "chorus_signatures_pre_verified_total", None);
    }
    assert!(pre_verified > 0.0, "no signature was checked in a pillar");
}
