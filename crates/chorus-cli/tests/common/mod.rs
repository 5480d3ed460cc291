//! Helpers for integration tests that start real replica processes on loopback.

#![allow(dead_code)]

use chorus_core::{ClientId, ClusterConfig, Identity, OrderingMode, ProtocolParams, ReplicaId};
use chorus_node::keygen::{keygen, KeygenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the replicas run: service name, `key=value,...` options, executor.
pub struct ServiceSpec {
    pub service: &'static str,
    pub options: &'static str,
    pub executor: &'static str,
    /// The replicas' `fsync` policy.
    pub fsync: &'static str,
}

impl Default for ServiceSpec {
    fn default() -> Self {
        ServiceSpec {
            service: "kv",
            options: "",
            executor: "sequential",
            fsync: "batch",
        }
    }
}

pub struct TestCluster {
    pub dir: tempfile::TempDir,
    pub config: Arc<ClusterConfig>,
    children: Vec<Option<Child>>,
}

/// Clusters started by this test binary so far: concurrent tests in one
/// process must not probe the same range (both would see it free).
static CLUSTERS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);

/// The port range of tests that name none (`new`).
pub const DEFAULT_PORTS: (u16, u16) = (12_000, 50);

fn free_base() -> u16 {
    free_base_in(DEFAULT_PORTS.0, DEFAULT_PORTS.1)
}

/// A free base port in `lo .. lo + 400 * slots` (tests in other binaries use
/// other ranges, so they never race for the same ports).
fn free_base_in(lo: u16, slots: u16) -> u16 {
    // Below the kernel's ephemeral range (32768+ on Linux), so outgoing
    // connections never hold a port a replica is about to bind; spread
    // concurrent test binaries (pid) and tests (counter) over distinct ranges.
    let pid = std::process::id() as u16;
    let nth = CLUSTERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    for attempt in 0..500u16 {
        let slot = pid
            .wrapping_mul(7)
            .wrapping_add(nth.wrapping_mul(4))
            .wrapping_add(attempt.wrapping_mul(5))
            % slots;
        let base = lo + slot * 400;
        let ok = (0..4u16).all(|i| {
            let b = base + 100 * i;
            [b, b + 1, b + 2, b + 3, b + 90, b + 91]
                .iter()
                .all(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
        });
        if ok {
            return base;
        }
    }
    panic!("no free port range");
}

impl TestCluster {
    pub fn new(
        mode: OrderingMode,
        pillars: u32,
        clients: usize,
        tweak: impl FnOnce(&mut ProtocolParams),
    ) -> TestCluster {
        Self::new_at(free_base(), mode, pillars, clients, tweak)
    }

    /// Like `new`, with ports from `lo .. lo + 400 * slots`.
    pub fn new_in_range(
        lo: u16,
        slots: u16,
        mode: OrderingMode,
        pillars: u32,
        clients: usize,
        tweak: impl FnOnce(&mut ProtocolParams),
    ) -> TestCluster {
        Self::new_at(free_base_in(lo, slots), mode, pillars, clients, tweak)
    }

    fn new_at(
        base_port: u16,
        mode: OrderingMode,
        pillars: u32,
        clients: usize,
        tweak: impl FnOnce(&mut ProtocolParams),
    ) -> TestCluster {
        Self::new_full(base_port, mode, pillars, clients, ServiceSpec::default(), tweak)
    }

    /// Like `new_in_range`, running another service, executor or fsync policy.
    pub fn new_service_in_range(
        lo: u16,
        slots: u16,
        mode: OrderingMode,
        pillars: u32,
        clients: usize,
        service: ServiceSpec,
        tweak: impl FnOnce(&mut ProtocolParams),
    ) -> TestCluster {
        Self::new_full(free_base_in(lo, slots), mode, pillars, clients, service, tweak)
    }

    fn new_full(
        base_port: u16,
        mode: OrderingMode,
        pillars: u32,
        clients: usize,
        service: ServiceSpec,
        tweak: impl FnOnce(&mut ProtocolParams),
    ) -> TestCluster {
        let dir = tempfile::Builder::new().prefix("chorus-it-").tempdir().unwrap();
        let mut params = ProtocolParams {
            mode,
            pillars,
            checkpoint_interval: 32 * pillars as u64,
            view_change_timeout_ms: 800,
            batch_delay_ms: 1,
            ..ProtocolParams::default()
        };
        tweak(&mut params);
        let config = keygen(&KeygenOptions {
            out: dir.path().to_path_buf(),
            n: 4,
            clients,
            hosts: vec!["127.0.0.1".into()],
            base_port,
            params,
            service: service.service.into(),
            service_options: service.options.into(),
            executor: service.executor.into(),
            workers: 2,
            fsync: service.fsync.into(),
            sleep_us: 1000,
            sleep_buckets: 1,
        })
        .unwrap();
        let mut c = TestCluster {
            dir,
            config: Arc::new(config),
            children: (0..4).map(|_| None).collect(),
        };
        for i in 0..4 {
            c.start(i);
        }
        c
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn start(&mut self, i: usize) {
        let child = spawn_replica(self.path(), i);
        self.children[i] = Some(child);
    }

    /// Take over replica `i`'s process started elsewhere (`spawn_replica`
    /// from another thread), reaping the one it replaces.
    pub fn adopt(&mut self, i: usize, child: Child) {
        self.kill(i);
        self.children[i] = Some(child);
    }

    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn pid(&self, i: usize) -> Option<u32> {
        self.children[i].as_ref().map(|c| c.id())
    }

    /// CPU seconds (user + system) replica `i` has used so far.
    pub fn cpu_seconds(&self, i: usize) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid(i)?)).ok()?;
        // Fields after the parenthesised command name; utime and stime are 14 and 15.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
        Some(ticks / 100.0)
    }

    pub fn alive(&mut self, i: usize) -> bool {
        match &mut self.children[i] {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Wait up to `limit` for replica `i` to exit by itself; its exit status.
    pub fn wait_exit(&mut self, i: usize, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(c) = &mut self.children[i] {
                if let Ok(Some(status)) = c.try_wait() {
                    self.children[i] = None;
                    return Some(status);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub fn peak_rss_mib(&self, i: usize) -> Option<f64> {
        let pid = self.children[i].as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        Some(line.split_whitespace().nth(1)?.parse::<f64>().ok()? / 1024.0)
    }

    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.path().join(format!("replica-{i}.log"))).unwrap_or_default()
    }

    pub fn client_identity(&self, i: usize) -> Identity {
        let text = std::fs::read_to_string(self.path().join(format!("keys/client-{i}.key"))).unwrap();
        let k: chorus_node::node_config::KeyFile = toml::from_str(&text).unwrap();
        k.to_identity().unwrap()
    }

    pub async fn client(&self, i: usize) -> chorus_client::Client {
        self.client_with(i, chorus_client::ClientOptions::default()).await
    }

    pub async fn client_with(&self, i: usize, opts: chorus_client::ClientOptions) -> chorus_client::Client {
        chorus_client::Client::connect(
            self.config.clone(),
            ClientId(i as u64),
            self.client_identity(i),
            opts,
        )
        .await
        .unwrap()
    }

    /// Status of replica `r` through the `chorus status --json` command.
    pub fn status(&self, r: usize) -> Option<serde_json::Value> {
        let out = Command::new(env!("CARGO_BIN_EXE_chorus"))
            .arg("status")
            .arg("--json")
            .arg("--config")
            .arg(self.path().join("client-0.toml"))
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .filter(|l| l.starts_with('{'))
            .find(|l| l.contains(&format!("\"replica\":{r},")))?;
        serde_json::from_str(line).ok()
    }

    /// Wait until all replicas in `which` answer status queries.
    pub fn wait_up(&self, which: &[usize], limit: Duration) {
        let deadline = Instant::now() + limit;
        for &r in which {
            while self.status(r).is_none() {
                assert!(
                    Instant::now() < deadline,
                    "replica {r} did not come up; log:\n{}",
                    self.log(r)
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Wait until every replica reports the same executed position and state digest.
    pub fn wait_converged(&self, limit: Duration) -> (u64, String) {
        let deadline = Instant::now() + limit;
        loop {
            let s: Vec<_> = (0..4).map(|r| self.status(r)).collect();
            let keys: Vec<_> = s
                .iter()
                .flatten()
                .map(|v| {
                    (
                        v["executed_seq"].as_u64().unwrap_or(0),
                        v["state_digest"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect();
            if keys.len() == 4 && keys.windows(2).all(|w| w[0] == w[1]) {
                return keys[0].clone();
            }
            if Instant::now() > deadline {
                panic!(
                    "replicas did not converge: {keys:?}\nlogs:\n{}",
                    (0..4)
                        .map(|i| format!("--- r{i}\n{}", tail(&self.log(i), 15)))
                        .collect::<Vec<_>>()
                        .join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    pub fn replica_addr(&self, r: usize, pillar: u16) -> String {
        let info = &self.config.replicas[r];
        format!("{}:{}", info.host, info.peer_base_port + pillar)
    }

    pub fn client_addr(&self, r: usize) -> String {
        let info = &self.config.replicas[r];
        format!("{}:{}", info.host, info.client_port)
    }

    pub fn replica_id(r: usize) -> ReplicaId {
        ReplicaId(r as u32)
    }

    pub fn dir_path(&self) -> PathBuf {
        self.path().to_path_buf()
    }
}

/// Start replica `i` of the cluster in `dir`, logging to its log file.
pub fn spawn_replica(dir: &Path, i: usize) -> Child {
    spawn_replica_with_env(dir, i, &[])
}

/// `spawn_replica` with these environment variables set for it alone (the
/// runtime's measurement overrides, e.g. `CHORUS_LANE_GROUPS`).
pub fn spawn_replica_with_env(dir: &Path, i: usize, env: &[(&str, &str)]) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("replica-{i}.log")))
        .unwrap();
    Command::new(env!("CARGO_BIN_EXE_chorus"))
        .arg("replica")
        .arg("--config")
        .arg(dir.join(format!("replica-{i}.toml")))
        .env("CHORUS_LOG", "info")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
    }
}

/// A two-thread runtime for driving clients from a synchronous test.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Every write in `acked` (every `step`-th, to bound the time) reads back
/// its value through client `reader`: nothing acknowledged was lost.
pub async fn check_readable(
    c: &TestCluster,
    reader: usize,
    acked: &std::collections::HashMap<bytes::Bytes, bytes::Bytes>,
    step: usize,
) {
    use chorus_apps::kv_op::{KvOp, KvReply};
    let client = c.client(reader).await;
    for (k, v) in acked.iter().step_by(step.max(1)) {
        let r = client.invoke(KvOp::get(k.clone())).await.expect("read back");
        assert_eq!(
            KvReply::decode(&r).unwrap(),
            KvReply::Value(Some(v.clone())),
            "acknowledged write {k:?} lost"
        );
    }
}

/// Completion times of every acknowledged write, and the writes themselves.
#[derive(Default)]
pub struct Load {
    pub done: Vec<Instant>,
    pub acked: std::collections::HashMap<bytes::Bytes, bytes::Bytes>,
}

/// `clients` clients × 4 in flight write fresh keys `{prefix}-{client}-{slot}-{i}`
/// until `stop`, recording every acknowledged write in `load`.
pub async fn drive_writes(
    c: &TestCluster,
    prefix: &'static str,
    clients: usize,
    stop: Instant,
    load: Arc<std::sync::Mutex<Load>>,
) {
    use chorus_apps::kv_op::KvOp;
    let mut tasks = Vec::new();
    for ci in 0..clients {
        let client = Arc::new(c.client(ci).await);
        for slot in 0..4 {
            let client = client.clone();
            let load = load.clone();
            tasks.push(tokio::spawn(async move {
                let mut i = 0u64;
                while Instant::now() < stop {
                    let k = bytes::Bytes::from(format!("{prefix}-{ci}-{slot}-{i}"));
                    let v = bytes::Bytes::from(format!("v{i}"));
                    i += 1;
                    if client.invoke(KvOp::put(k.clone(), v.clone())).await.is_ok() {
                        let mut l = load.lock().unwrap();
                        l.done.push(Instant::now());
                        l.acked.insert(k, v);
                    }
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
}
