//! `chorus keygen`: a cluster directory with one config per replica, keys, and
//! client configs.

use crate::node_config::{ClientFile, KeyFile, NodeConfig};
use anyhow::{Context, Result};
use chorus_core::{ClientId, ClientInfo, ClusterConfig, Identity, ProtocolParams, ReplicaId, ReplicaInfo};
use std::path::{Path, PathBuf};

pub struct KeygenOptions {
    pub out: PathBuf,
    pub n: usize,
    pub clients: usize,
    pub hosts: Vec<String>,
    pub base_port: u16,
    pub params: ProtocolParams,
    pub service: String,
    pub executor: String,
    pub workers: usize,
    pub fsync: String,
    pub sleep_us: u64,
    pub sleep_buckets: u32,
}

/// Port layout per replica i: pillars at base + 100·i + p, clients at base + 100·i + 90,
/// metrics at base + 100·i + 91.
pub fn keygen(opts: &KeygenOptions) -> Result<ClusterConfig> {
    let mut rng = rand::rngs::OsRng;
    std::fs::create_dir_all(opts.out.join("keys"))
        .with_context(|| format!("creating {}", opts.out.display()))?;
    let replica_ids: Vec<Identity> = (0..opts.n).map(|_| Identity::generate(&mut rng)).collect();
    let client_ids: Vec<Identity> = (0..opts.clients).map(|_| Identity::generate(&mut rng)).collect();
    let replicas = replica_ids
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let base = opts.base_port + 100 * i as u16;
            ReplicaInfo {
                id: ReplicaId(i as u32),
                identity: k.public(),
                host: opts
                    .hosts
                    .get(i)
                    .or(opts.hosts.last())
                    .cloned()
                    .unwrap_or_else(|| "127.0.0.1".into()),
                peer_base_port: base,
                client_port: base + 90,
                metrics_port: base + 91,
            }
        })
        .collect();
    let clients = client_ids
        .iter()
        .enumerate()
        .map(|(i, k)| ClientInfo {
            id: ClientId(i as u64),
            identity: k.public(),
        })
        .collect();
    let cluster = ClusterConfig {
        params: opts.params.clone(),
        replicas,
        clients,
    };
    cluster
        .validate()
        .context("the requested cluster parameters are invalid")?;
    write(&opts.out.join("cluster.toml"), &toml::to_string(&cluster)?)?;
    for (i, k) in replica_ids.iter().enumerate() {
        let key = format!("keys/replica-{i}.key");
        write(
            &opts.out.join(&key),
            &toml::to_string(&KeyFile::from_identity(k))?,
        )?;
        let node = NodeConfig {
            id: ReplicaId(i as u32),
            cluster_file: "cluster.toml".into(),
            key_file: key.into(),
            data_dir: format!("data/replica-{i}").into(),
            fsync: opts.fsync.clone(),
            service: opts.service.clone(),
            executor: opts.executor.clone(),
            workers: opts.workers,
            sleep_us: opts.sleep_us,
            sleep_buckets: opts.sleep_buckets,
        };
        write(
            &opts.out.join(format!("replica-{i}.toml")),
            &toml::to_string(&node)?,
        )?;
    }
    for (i, k) in client_ids.iter().enumerate() {
        let key = format!("keys/client-{i}.key");
        write(
            &opts.out.join(&key),
            &toml::to_string(&KeyFile::from_identity(k))?,
        )?;
        let c = ClientFile {
            id: ClientId(i as u64),
            cluster_file: "cluster.toml".into(),
            key_file: key.into(),
        };
        write(&opts.out.join(format!("client-{i}.toml")), &toml::to_string(&c)?)?;
    }
    Ok(cluster)
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    #[cfg(unix)]
    if path.extension().is_some_and(|e| e == "key") {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}
