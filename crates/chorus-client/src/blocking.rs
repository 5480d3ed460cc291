//! A blocking wrapper for scripts and tools that have no async runtime.

use crate::client::Client;
use crate::error::ClientError;
use crate::options::ClientOptions;
use crate::stats::ClientStats;
use bytes::Bytes;
use chorus_core::status_report::StatusReport;
use chorus_core::{ClientId, ClusterConfig, Identity, ReplicaId};
use std::sync::Arc;
use std::time::Duration;

/// Owns a small tokio runtime (one worker thread, so connections keep being
/// maintained between calls) and a [`Client`]. Do not call it from inside an
/// async context: use [`Client`] there.
pub struct BlockingClient {
    // Dropped before the runtime.
    client: Client,
    rt: tokio::runtime::Runtime,
}

impl BlockingClient {
    pub fn connect(
        config: Arc<ClusterConfig>,
        id: ClientId,
        identity: Identity,
        opts: ClientOptions,
    ) -> Result<BlockingClient, ClientError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("chorus-client")
            .enable_all()
            .build()?;
        let client = rt.block_on(Client::connect(config, id, identity, opts))?;
        Ok(BlockingClient { client, rt })
    }

    pub fn invoke(&self, op: impl Into<Bytes>) -> Result<Bytes, ClientError> {
        self.rt.block_on(self.client.invoke(op))
    }

    pub fn invoke_read_only(&self, op: impl Into<Bytes>) -> Result<Bytes, ClientError> {
        self.rt.block_on(self.client.invoke_read_only(op))
    }

    pub fn status(&self, replica: ReplicaId, wait: Duration) -> Result<String, ClientError> {
        self.rt.block_on(self.client.status(replica, wait))
    }

    pub fn replica_status(&self, replica: ReplicaId, wait: Duration) -> Result<StatusReport, ClientError> {
        self.rt.block_on(self.client.replica_status(replica, wait))
    }

    pub fn cluster_status(&self, wait: Duration) -> crate::ClusterStatus {
        self.rt.block_on(self.client.cluster_status(wait))
    }

    pub fn stats(&self) -> ClientStats {
        self.client.stats()
    }

    /// The async client inside (e.g. to spawn concurrent calls on `runtime()`).
    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.rt
    }
}
