//! What `chorus status` shows for a replica.

use chorus_order::ReplicaStatus;
use serde::{Deserialize, Serialize};

/// The protocol core's part, published every 100 ms.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CoreStatus {
    pub next_delivery: u64,
    pub stable_seq: u64,
    pub views: Vec<u64>,
    pub pool_len: usize,
}

impl CoreStatus {
    pub fn from_replica(s: &ReplicaStatus) -> CoreStatus {
        CoreStatus {
            next_delivery: s.next_delivery.0,
            stable_seq: s.stable_seq.0,
            views: s.views.iter().map(|v| v.0).collect(),
            pool_len: s.pool_len,
        }
    }
}

/// The whole report, sent as JSON in `ClientMsg::StatusReport`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StatusReport {
    pub replica: u32,
    pub mode: String,
    pub lanes: u32,
    pub core: CoreStatus,
    /// Every position below this has been executed.
    pub executed_seq: u64,
    /// Digest of the application state and client table at `executed_seq`.
    pub state_digest: String,
    pub executed_requests: u64,
    pub peer_connections: i64,
    pub client_connections: i64,
}
