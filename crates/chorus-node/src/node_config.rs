//! Files a replica and a client are started from: `chorus keygen` writes them.

use anyhow::{bail, Context, Result};
use chorus_core::{ClientId, ClusterConfig, Identity, ReplicaId};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `replica-<i>.toml`. Unknown keys are refused, naming the key and listing
/// the valid ones (issue 14 item 4: `fsycn = "always"` was ignored).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
    /// A registered service: `kv` | `null` | `sleep` | `token` built in, or
    /// one an application binary registered (`chorus_cli::main_with`).
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
    /// Checked execution (issue 17): every operation runs inside its declared
    /// access set, and touching an undeclared key through `KeyedState`
    /// stops the replica with an error naming the operation and the key.
    #[serde(default)]
    pub check_access: bool,
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
#[serde(deny_unknown_fields)]
pub struct ClientFile {
    pub id: ClientId,
    pub cluster_file: PathBuf,
    pub key_file: PathBuf,
}

/// A secret key file: hex of the Ed25519 and X25519 secrets.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
    /// The secret key file (what [`lock_identity`] locks).
    pub key_path: PathBuf,
}

/// A process's claim on a client identity, held until dropped or the process
/// ends (the kernel releases it even on SIGKILL).
#[derive(Debug)]
pub struct IdentityLock {
    _file: std::fs::File,
}

/// Claim client `id` (its key file `key_path`) for this process. Replicas
/// route a client's replies to its newest connection, so two processes
/// under one identity steal each other's replies and hang until their
/// timeouts although their writes were applied (issue 14 item 4). One
/// identity per process is the rule; this enforces it between processes on
/// one host with an exclusive lock on the key file (`flock`). Processes on
/// different hosts must use different client files.
pub fn lock_identity(key_path: &Path, id: ClientId) -> Result<IdentityLock> {
    let file = std::fs::File::open(key_path).with_context(|| format!("opening {}", key_path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(IdentityLock { _file: file }),
        Err(std::fs::TryLockError::WouldBlock) => bail!(
            "client identity {id} is in use by another process on this host (it holds a lock on {}): \
             run each concurrent client process with its own client-<i>.toml",
            key_path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("locking {}", key_path.display()))
        }
    }
}

pub fn load_client(path: &Path) -> Result<LoadedClient> {
    let c: ClientFile = read_toml(path)?;
    let cluster: ClusterConfig = read_toml(&relative_to(path, &c.cluster_file))?;
    cluster.validate().context("invalid cluster configuration")?;
    let key_path = relative_to(path, &c.key_file);
    let key: KeyFile = read_key(&key_path)?;
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
        key_path,
    })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_client_identity_is_held_by_one_holder_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("client-0.key");
        std::fs::write(&p, "x").unwrap();
        let held = lock_identity(&p, ClientId(0)).unwrap();
        let e = lock_identity(&p, ClientId(0)).unwrap_err().to_string();
        assert!(e.contains("in use by another process"), "{e}");
        drop(held);
        lock_identity(&p, ClientId(0)).unwrap();
    }

    /// Issue 14 item 4: `fsycn = "always"` was ignored (fsync stayed `batch`).
    #[test]
    fn a_misspelt_replica_setting_is_refused_naming_it() {
        let text = "id = 0\ncluster_file = \"cluster.toml\"\nkey_file = \"k\"\ndata_dir = \"d\"\nfsycn = \"always\"\n";
        let e = toml::from_str::<NodeConfig>(text).unwrap_err().to_string();
        assert!(e.contains("fsycn"), "{e}");
        assert!(e.contains("fsync"), "lists the valid keys: {e}");
        assert!(e.contains("line 5"), "says where: {e}");
        let ok = text.replace("fsycn", "fsync");
        assert_eq!(toml::from_str::<NodeConfig>(&ok).unwrap().fsync, "always");
    }

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
