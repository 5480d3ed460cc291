//! Issue 14 item 3: `chorus dashboard --config <cluster dir>` against a real
//! cluster serves its page and a state in which all 4 replicas are up,
//! executing, in one view per lane, and a killed replica shows as
//! unreachable with an event. (Screenshots: scripts/dashboard-screenshot.sh.)

mod common;

use bytes::Bytes;
use chorus_apps::kv_op::KvOp;
use chorus_core::OrderingMode;
use common::{rt, TestCluster};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn get(port: u16, path: &str) -> Option<(String, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    Some((head.to_string(), body.to_string()))
}

fn state(port: u16) -> Option<serde_json::Value> {
    serde_json::from_str(&get(port, "/api/state")?.1).ok()
}

/// Poll the dashboard's state until `ok` holds (or fail after `limit`).
fn wait_for(
    port: u16,
    limit: Duration,
    what: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = state(port) {
            if ok(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "{what}: {s:#}");
        }
        assert!(Instant::now() < deadline, "{what}: the dashboard does not answer");
        std::thread::sleep(Duration::from_millis(200));
    }
}

struct Kill(std::process::Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_dashboard_shows_a_live_cluster_and_a_killed_replica() {
    let mut c = TestCluster::new_in_range(6_000, 10, OrderingMode::Cop, 2, 3, |_| {});
    c.wait_up(&[0, 1, 2, 3], Duration::from_secs(20));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _dash = Kill(
        Command::new(env!("CARGO_BIN_EXE_chorus"))
            .args([
                "dashboard",
                "--port",
                &port.to_string(),
                "--interval-ms",
                "250",
                "--config",
            ])
            .arg(c.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let rt = rt();
    rt.block_on(async {
        let client = c.client(0).await;
        for i in 0..100 {
            let k = Bytes::from(format!("k{i}"));
            client
                .invoke(KvOp::put(k, Bytes::from_static(b"v")))
                .await
                .unwrap();
        }
    });
    // The throughput history gains a non-zero sample only at the
    // dashboard's next poll after the writes: wait for it too (it failed a
    // loaded CI run when the writes finished between two polls).
    let s = wait_for(
        port,
        Duration::from_secs(20),
        "4 replicas up, equal, a rate sampled",
        |s| {
            s["replicas"]
                .as_array()
                .is_some_and(|r| r.len() == 4 && r.iter().all(|r| r["up"] == true))
                && s["all_equal"] == true
                && s["replicas"][0]["executed_seq"].as_u64() > Some(0)
                && s["history"]
                    .as_array()
                    .is_some_and(|h| h.iter().any(|h| h["ops_per_s"].as_f64() > Some(0.0)))
        },
    );
    assert_eq!(s["views"].as_array().unwrap().len(), 2, "one view per lane");
    let (head, page) = get(port, "/").unwrap();
    assert!(head.contains("text/html"), "{head}");
    assert!(page.contains("/api/state") && !page.contains("https://"));

    c.kill(2);
    let s = wait_for(port, Duration::from_secs(20), "r2 unreachable", |s| {
        s["replicas"][2]["up"] == false
    });
    assert!(s["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "down" && e["text"].as_str().unwrap().starts_with("r2")));
    assert_eq!(s["all_equal"], false);
}
