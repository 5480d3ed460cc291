//! `chorus keygen`: a cluster directory with one config per replica, keys, and
//! client configs.

use crate::node_config::{ClientFile, KeyFile, NodeConfig};
use anyhow::{bail, Context, Result};
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
    /// `key=value,...` service options written into every replica config.
    pub service_options: String,
    pub executor: String,
    pub workers: usize,
    pub fsync: String,
    pub sleep_us: u64,
    pub sleep_buckets: u32,
}

/// What `chorus keygen` writes without flags, into `cluster/`.
impl Default for KeygenOptions {
    fn default() -> Self {
        KeygenOptions {
            out: "cluster".into(),
            n: 4,
            clients: 16,
            hosts: vec!["127.0.0.1".into()],
            base_port: 7000,
            params: ProtocolParams::default(),
            service: "kv".into(),
            service_options: String::new(),
            executor: "sequential".into(),
            workers: 4,
            fsync: "batch".into(),
            sleep_us: 1000,
            sleep_buckets: 1,
        }
    }
}

/// Port layout per replica i: pillars at base + 100·i + p, clients at base + 100·i + 90,
/// metrics at base + 100·i + 91.
/// Secret keys are created private from the first byte (issue 16 finding 3):
/// `keys/` is 0700, each key file is created with `O_CREAT | O_EXCL |
/// O_NOFOLLOW` and mode 0600, and nothing existing is ever overwritten.
pub fn keygen(opts: &KeygenOptions) -> Result<ClusterConfig> {
    keygen_in(&chorus_apps::ServiceRegistry::builtin(), opts)
}

/// [`keygen`] for a service registered in `registry` (an application's own).
pub fn keygen_in(registry: &chorus_apps::ServiceRegistry, opts: &KeygenOptions) -> Result<ClusterConfig> {
    // Refuse a service or options every replica would refuse at start-up.
    let service_opts =
        chorus_apps::ServiceOptions::parse(&opts.service_options).map_err(anyhow::Error::msg)?;
    registry
        .build(&opts.service, &service_opts)
        .map_err(anyhow::Error::msg)?;
    let mut rng = rand::rngs::OsRng;
    std::fs::create_dir_all(&opts.out).with_context(|| format!("creating {}", opts.out.display()))?;
    create_private_dir(&opts.out.join("keys"))?;
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
    let mut params = opts.params.clone();
    if params.cluster_id.is_empty() {
        // A fresh id per cluster: keys copied into another cluster do not
        // open connections here (the id is in every handshake).
        let mut id = [0u8; 16];
        rand::RngCore::fill_bytes(&mut rng, &mut id);
        params.cluster_id = hex::encode(id);
    }
    let mut cluster = ClusterConfig {
        params,
        replicas,
        clients,
    };
    if matches!(
        cluster.params.mode,
        chorus_core::OrderingMode::Rcc | chorus_core::OrderingMode::Dispel
    ) {
        // RCC and Dispel have n lanes: checkpoints must fall on round (epoch) boundaries.
        cluster.fit_checkpoint_interval();
    }
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
            service_options: opts.service_options.clone(),
            executor: opts.executor.clone(),
            workers: opts.workers,
            sleep_us: opts.sleep_us,
            sleep_buckets: opts.sleep_buckets,
            metrics_host: "127.0.0.1".into(),
            check_access: false,
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

/// Create `dir` with mode 0700 (not through a symlink), or accept an existing
/// directory that only its owner can enter.
fn create_private_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let meta = std::fs::symlink_metadata(dir)?;
                if !meta.is_dir() {
                    bail!("{} exists and is not a directory", dir.display());
                }
                if meta.permissions().mode() & 0o077 != 0 {
                    bail!(
                        "{} is accessible to other users (mode {:o}); use a new output directory",
                        dir.display(),
                        meta.permissions().mode() & 0o777
                    );
                }
            }
            Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
        }
        Ok(())
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
    }
}

/// Write a new file; never overwrites, never follows a symlink. Key files
/// are created 0600 so no other user can open them at any moment.
fn write(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let secret = path.extension().is_some_and(|e| e == "key");
        o.mode(if secret { 0o600 } else { 0o644 })
            .custom_flags(libc::O_NOFOLLOW);
    }
    let mut f = o.open(path).with_context(|| {
        format!(
            "creating {} (keygen never overwrites: remove the old cluster first)",
            path.display()
        )
    })?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn opts(out: &Path) -> KeygenOptions {
        KeygenOptions {
            out: out.to_path_buf(),
            n: 4,
            clients: 2,
            hosts: vec!["127.0.0.1".into()],
            base_port: 7000,
            params: ProtocolParams::default(),
            service: "kv".into(),
            service_options: String::new(),
            executor: "sequential".into(),
            workers: 1,
            fsync: "off".into(),
            sleep_us: 0,
            sleep_buckets: 1,
        }
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
    }

    /// Issue 16 finding 3: before the fix keys were created 0644 (after
    /// umask) and chmod-ed afterwards, `keys/` was 0755, and symlinks were
    /// followed and existing files overwritten.
    #[test]
    fn keys_are_private_from_creation_and_never_overwritten_or_followed() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("c");
        let cluster = keygen(&opts(&out)).unwrap();
        assert_eq!(mode(&out.join("keys")), 0o700);
        for f in std::fs::read_dir(out.join("keys")).unwrap() {
            assert_eq!(mode(&f.unwrap().path()), 0o600);
        }
        assert_eq!(cluster.params.cluster_id.len(), 32);
        // A second run refuses to overwrite anything.
        assert!(keygen(&opts(&out)).is_err());

        // A planted symlink where a key will be written is not followed.
        let out2 = dir.path().join("d");
        std::fs::create_dir(&out2).unwrap();
        let keys = out2.join("keys");
        std::fs::DirBuilder::new().create(&keys).unwrap();
        std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o700)).unwrap();
        let target = dir.path().join("attacker-readable");
        std::os::unix::fs::symlink(&target, keys.join("replica-0.key")).unwrap();
        assert!(keygen(&opts(&out2)).is_err());
        assert!(!target.exists(), "keygen followed a symlink");

        // An existing keys/ directory open to others is refused.
        let out3 = dir.path().join("e");
        std::fs::create_dir_all(out3.join("keys")).unwrap();
        std::fs::set_permissions(out3.join("keys"), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(keygen(&opts(&out3)).is_err());
    }

    /// Issue 17: `keygen --service X` knows the application's services and
    /// refuses unknown ones before writing anything.
    #[test]
    fn keygen_accepts_registered_services_and_refuses_unknown_ones() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts(&dir.path().join("c"));
        o.service = "mine".into();
        let e = keygen(&o).unwrap_err().to_string();
        assert!(
            e.contains("unknown service \"mine\" (known: kv, kv-mispredicting, null, sleep, token)"),
            "{e}"
        );
        assert!(!dir.path().join("c").exists(), "nothing written");
        let registry = chorus_apps::ServiceRegistry::builtin().with(chorus_apps::ServiceEntry::new(
            "mine",
            "test",
            |_| Ok(std::sync::Arc::new(chorus_apps::NullService) as std::sync::Arc<dyn chorus_exec::Service>),
        ));
        keygen_in(&registry, &o).unwrap();
        let text = std::fs::read_to_string(dir.path().join("c/replica-0.toml")).unwrap();
        assert!(text.contains("service = \"mine\""), "{text}");
    }
}
