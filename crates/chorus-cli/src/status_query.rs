//! Ask replicas for their status over an authenticated client connection.

use crate::procs::tail;
use anyhow::bail;
use anyhow::{anyhow, Context, Result};
use chorus_core::ClientId;
use chorus_core::{decode, encode, ClientMsg, ClusterConfig, Identity, Limits, ReplicaId};
use chorus_net::{Expected, NetLimits, PeerRole};
use chorus_node::status::StatusReport;
use std::time::{Duration, Instant};

pub async fn query(
    config: &ClusterConfig,
    client: ClientId,
    identity: &Identity,
    replica: ReplicaId,
) -> Result<StatusReport> {
    let info = config.replica(replica).context("no such replica")?;
    let expected = Expected::replica_any_pillar(config, replica).context("no such replica")?;
    let addr = format!("{}:{}", info.host, info.client_port);
    let fut = async {
        let stream = tokio::net::TcpStream::connect(&addr).await?;
        let (_, mut reader, mut writer) = chorus_net::connect(
            stream,
            identity,
            PeerRole::Client { id: client },
            &expected,
            &NetLimits::from_config(config),
            &std::sync::Arc::new(chorus_net::Counters::default()),
        )
        .await
        .map_err(|e| anyhow!("{e}"))?;
        writer
            .send(&encode(&ClientMsg::StatusQuery))
            .await
            .map_err(|e| anyhow!("{e}"))?;
        let limits = Limits::from_config(config);
        loop {
            let frame = reader
                .next()
                .await
                .map_err(|e| anyhow!("{e}"))?
                .ok_or_else(|| anyhow!("connection closed"))?;
            if let Ok(ClientMsg::StatusReport(text)) = decode::<ClientMsg>(&frame, &limits) {
                return Ok::<_, anyhow::Error>(serde_json::from_str(&text)?);
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(3), fut)
        .await
        .map_err(|_| anyhow!("replica {replica} at {addr} did not answer within 3 s"))?
}

pub async fn wait_ready(
    config: &ClusterConfig,
    id: ClientId,
    key: &Identity,
    cluster: &mut crate::procs::Cluster,
    replicas: &[u32],
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    for &r in replicas {
        loop {
            if query(config, id, key, ReplicaId(r)).await.is_ok() {
                break;
            }
            if let Some((i, st)) = cluster.exited() {
                bail!(
                    "replica {i} exited during start-up ({st}):\n{}",
                    tail(&cluster.log_path(i), 30)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "replica {r} did not come up within 20 s; see {}",
                    cluster.log_path(r as usize).display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}
