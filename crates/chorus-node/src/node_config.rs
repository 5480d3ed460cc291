//! Files a replica and a client are started from: `chorus keygen` writes them.

use anyhow::{bail, Context, Result};
use chorus_core::{ClientId, ClusterConfig, Identity, ReplicaId};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `replica-<i>.toml`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeConfig {
    pub id: ReplicaId,
    /// The public cluster description, relative to this file's directory.
    pub cluster_file: PathBuf,
    /// This replica's secret key, relative to this file's directory.
    pub key_file: PathBuf,
    /// Where the replica keeps its database, relative to this file's directory.
    pub data_dir: PathBuf,
    /// `always` | `batch` | `off`.
    #[serde(default = "default_fsync")]
    pub fsync: String,
    /// `kv` | `null` | `sleep` | `token`.
    #[serde(default = "default_service")]
    pub service: String,
    /// Service options as `key=value,...` (see `chorus_apps::ServiceOptions`),
    /// e.g. the `token` genesis: `token_accounts=1000,token_balance=1000000`.
    /// Every replica of a cluster must use the same.
    #[serde(default)]
    pub service_options: String,
    /// `sequential` | `parallel`.
    #[serde(default = "default_executor")]
    pub executor: String,
    /// Worker threads of the parallel executor.
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// Service time of the `sleep` service, microseconds.
    #[serde(default = "default_sleep_us")]
    pub sleep_us: u64,
    /// Independent buckets of the `sleep` service (CBASE's parallelism factor).
    #[serde(default = "default_buckets")]
    pub sleep_buckets: u32,
    /// Address the metrics endpoint binds to; loopback by default so the
    /// endpoint is not reachable from the network unless asked for.
    #[serde(default = "default_metrics_host")]
    pub metrics_host: String,
}

fn default_fsync() -> String {
    "batch".into()
}
fn default_service() -> String {
    "kv".into()
}
fn default_executor() -> String {
    "sequential".into()
}
fn default_workers() -> usize {
    4
}
fn default_sleep_us() -> u64 {
    1000
}
fn default_buckets() -> u32 {
    1
}
fn default_metrics_host() -> String {
    "127.0.0.1".into()
}

/// `client-<i>.toml`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClientFile {
    pub id: ClientId,
    pub cluster_file: PathBuf,
    pub key_file: PathBuf,
}

/// A secret key file: hex of the Ed25519 and X25519 secrets.
#[derive(Clone, Serialize, Deserialize)]
pub struct KeyFile {
    pub sign: String,
    pub dh: String,
}

impl KeyFile {
    pub fn from_identity(id: &Identity) -> KeyFile {
        let (s, d) = id.secret_bytes();
        KeyFile {
            sign: hex::encode(s),
            dh: hex::encode(d),
        }
    }

    pub fn to_identity(&self) -> Result<Identity> {
        let s: [u8; 32] = hex::decode(&self.sign)?
            .try_into()
            .map_err(|_| anyhow::anyhow!("sign key must be 32 bytes"))?;
        let d: [u8; 32] = hex::decode(&self.dh)?
            .try_into()
            .map_err(|_| anyhow::anyhow!("dh key must be 32 bytes"))?;
        Ok(Identity::from_secret_bytes(s, d))
    }
}

/// Read a secret key file, warning when other users may read it (issue 16
/// finding 3): the key still loads, so a running cluster is not broken by a
/// mode change, but the operator is told.
fn read_key(path: &Path) -> Result<KeyFile> {
    if let Some(mode) = too_open(path) {
        tracing::warn!(
            path = %path.display(),
            mode = format!("{mode:o}"),
            "key file is readable or writable by other users; run chmod 600 on it"
        );
        eprintln!(
            "warning: key file {} has mode {mode:o}; other users may read it (chmod 600)",
            path.display()
        );
    }
    read_toml(path)
}

/// The permission bits of `path` when group or others have any access.
pub fn too_open(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
        (mode & 0o077 != 0).then_some(mode)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

fn read_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn relative_to(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.parent().unwrap_or(Path::new(".")).join(p)
    }
}

/// Everything a replica process needs, loaded and checked.
pub struct LoadedNode {
    pub node: NodeConfig,
    pub cluster: ClusterConfig,
    pub identity: Identity,
    pub data_dir: PathBuf,
}

pub fn load_node(path: &Path) -> Result<LoadedNode> {
    let node: NodeConfig = read_toml(path)?;
    let cluster: ClusterConfig = read_toml(&relative_to(path, &node.cluster_file))?;
    cluster.validate().context("invalid cluster configuration")?;
    let key: KeyFile = read_key(&relative_to(path, &node.key_file))?;
    let identity = key.to_identity()?;
    let Some(info) = cluster.replica(node.id) else {
        bail!(
            "replica id {} is not in the cluster ({} replicas)",
            node.id,
            cluster.n()
        );
    };
    if info.identity != identity.public() {
        bail!(
            "the key in {} does not match replica {} in the cluster file",
            node.key_file.display(),
            node.id
        );
    }
    let data_dir = relative_to(path, &node.data_dir);
    Ok(LoadedNode {
        node,
        cluster,
        identity,
        data_dir,
    })
}

/// Everything a client needs.
pub struct LoadedClient {
    pub id: ClientId,
    pub cluster: ClusterConfig,
    pub identity: Identity,
}

pub fn load_client(path: &Path) -> Result<LoadedClient> {
    let c: ClientFile = read_toml(path)?;
    let cluster: ClusterConfig = read_toml(&relative_to(path, &c.cluster_file))?;
    cluster.validate().context("invalid cluster configuration")?;
    let key: KeyFile = read_key(&relative_to(path, &c.key_file))?;
    let identity = key.to_identity()?;
    match cluster.client(c.id) {
        Some(info) if info.identity == identity.public() => {}
        Some(_) => bail!(
            "the key in {} does not match client {}",
            c.key_file.display(),
            c.id
        ),
        None => bail!("client {} is not in the cluster file", c.id),
    }
    Ok(LoadedClient {
        id: c.id,
        cluster,
        identity,
    })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn key_files_open_to_others_are_flagged() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k.key");
        std::fs::write(&p, "x").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(too_open(&p), Some(0o644));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(too_open(&p), None);
    }
}
