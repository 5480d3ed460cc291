//! What an invocation can fail with.

use chorus_core::{ClientId, RequestSeq};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No accepted result before the deadline. `progress` says what the
    /// replicas had answered (matching replies, busy, rejections, silence).
    #[error("request {seq} timed out after {elapsed:?} ({progress})")]
    Timeout {
        seq: RequestSeq,
        elapsed: Duration,
        progress: String,
    },
    /// f+1 replicas rejected the request for good (so at least one correct one did).
    #[error("request rejected by f+1 replicas: {0}")]
    Rejected(String),
    #[error("operation of {len} bytes exceeds max_op_bytes = {max}")]
    OpTooLarge { len: usize, max: usize },
    #[error("client {0} is not in the cluster configuration")]
    UnknownClient(ClientId),
    #[error("the identity given for client {0} is not the key the configuration lists for it")]
    IdentityMismatch(ClientId),
    #[error("invalid client options: {0}")]
    Options(&'static str),
    #[error("the configuration lists no replicas")]
    NoReplicas,
    #[error("connected to {connected} of {n} replicas within {waited:?}; need {needed}")]
    NotConnected {
        connected: usize,
        needed: usize,
        n: usize,
        waited: Duration,
    },
    #[error("status query to replica {0} timed out or was not answered")]
    StatusUnavailable(chorus_core::ReplicaId),
    /// The client was dropped (or its background task ended) while the call waited.
    #[error("client is shut down")]
    Closed,
    #[error("cannot start the client runtime: {0}")]
    Runtime(#[from] std::io::Error),
}
