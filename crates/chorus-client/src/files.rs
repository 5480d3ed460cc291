//! Loading a client from the `client-<i>.toml` that `keygen` writes, without
//! the replica crate (issue 17: client builds stay free of redb and metrics).
//! The formats are `chorus-node`'s `ClientFile` and `KeyFile`.

use chorus_core::{ClientId, ClusterConfig, Identity};
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientFile {
    id: ClientId,
    cluster_file: PathBuf,
    key_file: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    sign: String,
    dh: String,
}

/// What a client file names: the cluster, this client's id and its secret key.
pub struct ClientSetup {
    pub config: ClusterConfig,
    pub id: ClientId,
    pub identity: Identity,
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("parsing {}: {e}", path.display()))
}

fn secret(hex_text: &str, what: &str) -> Result<[u8; 32], String> {
    hex::decode(hex_text)
        .map_err(|e| format!("{what} key: {e}"))?
        .try_into()
        .map_err(|_| format!("{what} key must be 32 bytes"))
}

/// Read `client-<i>.toml`; paths in it are relative to its directory.
pub fn load_client_file(path: &Path) -> Result<ClientSetup, String> {
    let file: ClientFile = read(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let config: ClusterConfig = read(&dir.join(&file.cluster_file))?;
    config
        .validate()
        .map_err(|e| format!("{}: {e}", file.cluster_file.display()))?;
    let key: KeyFile = read(&dir.join(&file.key_file))?;
    let identity = Identity::from_secret_bytes(secret(&key.sign, "sign")?, secret(&key.dh, "dh")?);
    Ok(ClientSetup {
        config,
        id: file.id,
        identity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_keygen_writes_and_names_what_is_wrong() {
        let dir = std::env::temp_dir().join(format!("chorus-client-files-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("keys")).unwrap();
        let (config, _, ids) = ClusterConfig::for_testing(4, 2, chorus_core::ProtocolParams::default(), 7);
        std::fs::write(dir.join("cluster.toml"), toml::to_string(&config).unwrap()).unwrap();
        let (s, d) = ids[1].secret_bytes();
        let key = format!("sign = \"{}\"\ndh = \"{}\"\n", hex::encode(s), hex::encode(d));
        std::fs::write(dir.join("keys/client-1.key"), key).unwrap();
        let client = "id = 1\ncluster_file = \"cluster.toml\"\nkey_file = \"keys/client-1.key\"\n";
        std::fs::write(dir.join("client-1.toml"), client).unwrap();
        let setup = load_client_file(&dir.join("client-1.toml")).unwrap();
        assert_eq!(setup.id, ClientId(1));
        assert_eq!(setup.identity.public(), config.clients[1].identity);
        std::fs::write(dir.join("client-1.toml"), format!("{client}extra = 1\n")).unwrap();
        let e = load_client_file(&dir.join("client-1.toml")).err().unwrap();
        assert!(e.contains("client-1.toml") && e.contains("extra"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
