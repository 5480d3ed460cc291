//! Four real `chorus replica` processes, one per namespace, wired through
//! toxiproxy: replica i's copy of the cluster file names its own namespace
//! address for itself and the root side of its link for every peer, where
//! one proxy per (i, peer, pillar) forwards to the peer's namespace address.

use crate::net::Lab;
use crate::toxi::Toxiproxy;
use chorus_core::{ClientId, ClusterConfig, Identity, OrderingMode, ProtocolParams, ReplicaId};
use chorus_node::keygen::{keygen, KeygenOptions};
use chorus_node::status::StatusReport;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

pub const N: usize = 4;
const BASE_PORT: u16 = 20_000;

pub struct Cluster {
    pub dir: PathBuf,
    pub config: Arc<ClusterConfig>,
    children: Vec<Option<Child>>,
    ns: Vec<String>,
}

impl Cluster {
    pub fn new(lab: &Lab, dir: &Path, mode: OrderingMode, clients: usize) -> Cluster {
        let pillars = if mode == OrderingMode::Pbft { 1 } else { 2 };
        let params = ProtocolParams {
            mode,
            pillars,
            checkpoint_interval: 64 * pillars as u64,
            batch_delay_ms: 1,
            view_change_timeout_ms: 1_000,
            ..ProtocolParams::default()
        };
        let config = keygen(&KeygenOptions {
            out: dir.to_path_buf(),
            n: N,
            clients,
            hosts: (0..N).map(|i| lab.replica_ip(i)).collect(),
            base_port: BASE_PORT,
            params,
            service: "kv".into(),
            service_options: String::new(),
            executor: "sequential".into(),
            workers: 2,
            fsync: "batch".into(),
            sleep_us: 1000,
            sleep_buckets: 1,
        })
        .expect("keygen");
        for i in 0..N {
            let mut own = config.clone();
            for (j, r) in own.replicas.iter_mut().enumerate() {
                if j != i {
                    r.host = lab.root_ip(i);
                }
            }
            std::fs::write(
                dir.join(format!("cluster-r{i}.toml")),
                toml::to_string(&own).unwrap(),
            )
            .unwrap();
            let node_path = dir.join(format!("replica-{i}.toml"));
            let mut node: toml::Table =
                toml::from_str(&std::fs::read_to_string(&node_path).unwrap()).unwrap();
            node.insert("cluster_file".into(), format!("cluster-r{i}.toml").into());
            std::fs::write(&node_path, toml::to_string(&node).unwrap()).unwrap();
        }
        Cluster {
            dir: dir.to_path_buf(),
            config: Arc::new(config),
            children: (0..N).map(|_| None).collect(),
            ns: (0..N).map(|i| lab.ns(i)).collect(),
        }
    }

    /// Proxy names: `r{from}-r{to}-p{pillar}` carries `from`'s connection to `to`.
    pub fn links(&self) -> Vec<(usize, usize, u16)> {
        let pillars = self.config.params.pillars as u16;
        let mut v = Vec::new();
        for from in 0..N {
            for to in (0..N).filter(|&t| t != from) {
                for p in 0..pillars {
                    v.push((from, to, p));
                }
            }
        }
        v
    }

    pub fn proxy_name(l: (usize, usize, u16)) -> String {
        format!("r{}-r{}-p{}", l.0, l.1, l.2)
    }

    pub fn create_proxies(&self, lab: &Lab, toxi: &Toxiproxy) {
        for l in self.links() {
            let port = self.config.replicas[l.1].peer_base_port + l.2;
            toxi.create_proxy(
                &Self::proxy_name(l),
                &format!("{}:{port}", lab.root_ip(l.0)),
                &format!("{}:{port}", lab.replica_ip(l.1)),
            );
        }
    }

    pub fn start(&mut self, i: usize) {
        assert!(self.children[i].is_none(), "replica {i} already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(i))
            .unwrap();
        // `ip netns exec` execs the command, so the child's pid is the replica's.
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns[i],
                env!("CARGO_BIN_EXE_chorus"),
                "replica",
                "--config",
            ])
            .arg(self.dir.join(format!("replica-{i}.toml")))
            .env("CHORUS_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn replica");
        self.children[i] = Some(child);
    }

    pub fn pid(&self, i: usize) -> u32 {
        self.children[i].as_ref().expect("replica running").id()
    }

    pub fn signal(&self, i: usize, sig: &str) {
        crate::net::sh(&["kill", &format!("-{sig}"), &self.pid(i).to_string()]).expect("kill");
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Replicas that exited without being told to.
    pub fn exited(&mut self) -> Vec<(usize, String)> {
        let mut v = Vec::new();
        for (i, c) in self.children.iter_mut().enumerate() {
            if let Some(c) = c {
                if let Ok(Some(st)) = c.try_wait() {
                    v.push((i, st.to_string()));
                }
            }
        }
        v
    }

    pub fn rss_mib(&self, i: usize) -> Option<f64> {
        let pid = self.children[i].as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        Some(line.split_whitespace().nth(1)?.parse::<f64>().ok()? / 1024.0)
    }

    /// Bytes under the replica's data directory (database and write-ahead
    /// log), by file length.
    pub fn storage_mib(&self, i: usize) -> f64 {
        fn walk(p: &Path) -> u64 {
            match std::fs::symlink_metadata(p) {
                Ok(m) if m.is_dir() => std::fs::read_dir(p)
                    .map(|d| d.flatten().map(|e| walk(&e.path())).sum())
                    .unwrap_or(0),
                Ok(m) => m.len(),
                Err(_) => 0,
            }
        }
        walk(&self.dir.join(format!("data/replica-{i}"))) as f64 / (1024.0 * 1024.0)
    }

    pub fn log_path(&self, i: usize) -> PathBuf {
        self.dir.join(format!("replica-{i}.log"))
    }

    pub fn log_tail(&self, i: usize, lines: usize) -> String {
        let s = std::fs::read_to_string(self.log_path(i)).unwrap_or_default();
        let v: Vec<&str> = s.lines().collect();
        v[v.len().saturating_sub(lines)..].join("\n")
    }

    pub fn client_identity(&self, i: usize) -> Identity {
        let text = std::fs::read_to_string(self.dir.join(format!("keys/client-{i}.key"))).unwrap();
        let k: chorus_node::node_config::KeyFile = toml::from_str(&text).unwrap();
        k.to_identity().unwrap()
    }

    pub async fn client(&self, i: usize, opts: chorus_client::ClientOptions) -> chorus_client::Client {
        chorus_client::Client::connect(
            self.config.clone(),
            ClientId(i as u64),
            self.client_identity(i),
            opts,
        )
        .await
        .expect("client connect")
    }
}

/// Status of one replica, or `None` when it does not answer within `wait`.
pub async fn status(probe: &chorus_client::Client, r: usize, wait: Duration) -> Option<StatusReport> {
    let text = probe.status(ReplicaId(r as u32), wait).await.ok()?;
    serde_json::from_str(&text).ok()
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..N {
            self.kill(i);
        }
    }
}
