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
    /// f+1 replicas answered that their client table counts this seq as
    /// executed but holds no reply for it (`chorus_core::REJECT_ABANDONED`).
    /// The table says so for a seq its window slid past (a client more than
    /// `pool_max_per_client` seqs ahead of it) or whose reply it evicted
    /// (it keeps each client's latest `REPLY_CACHE_PER_CLIENT`). This client
    /// never lets its seqs span more than the window, and a new client
    /// starts above the seqs of earlier ones (`ClientOptions::first_seq`),
    /// so here it is the second: the request **executed** (at least one
    /// correct replica counts it, and counting follows execution), but its
    /// reply was evicted before it reached the client (designated repliers
    /// lagging while the client ran on). It will not run again; its result
    /// is lost, so an application that needs it reads the state. (Only a
    /// client whose `first_seq` reuses an earlier client's seqs cannot tell
    /// its request from that earlier one.)
    #[error(
        "request {0} executed, but its reply left the replicas' cache before it reached this client: its result is lost (it will not run again)"
    )]
    ReplyLost(RequestSeq),
    #[error("operation of {len} bytes exceeds max_op_bytes = {max}")]
    OpTooLarge { len: usize, max: usize },
    #[error("client {0} is not in the cluster configuration")]
    UnknownClient(ClientId),
    #[error("the identity given for client {0} is not the key the configuration lists for it")]
    IdentityMismatch(ClientId),
    #[error("invalid client options: {0}")]
    Options(&'static str),
    /// A client file (`Client::from_file`) could not be read or parsed.
    #[error("client configuration: {0}")]
    Config(String),
    #[error("the configuration lists no replicas")]
    NoReplicas,
    /// `detail`: why the links that are down failed, as text (may be empty).
    #[error("connected to {connected} of {n} replicas within {waited:?}; need {needed}{detail}")]
    NotConnected {
        connected: usize,
        needed: usize,
        n: usize,
        waited: Duration,
        detail: String,
    },
    /// Replicas refused the handshake: they hold another key or cluster id
    /// for this client (client files from another `keygen` run), or do not
    /// list it at all. Not a connectivity problem.
    #[error("handshake refused by {refused} of {n} replicas: {reason}")]
    HandshakeRefused {
        refused: usize,
        n: usize,
        reason: String,
    },
    /// The client port of a replica is served by something else (an HTTP
    /// server...): the cluster file's host or port is wrong.
    #[error("replica {replica}'s client port {addr} is not a Chorus endpoint: it answered {answered} (check host and client_port in the cluster file)")]
    NotChorus {
        replica: chorus_core::ReplicaId,
        addr: String,
        answered: String,
    },
    #[error("status query to replica {0} timed out or was not answered")]
    StatusUnavailable(chorus_core::ReplicaId),
    /// A replica answered a status query with a report that does not parse.
    #[error("replica {replica} sent a status report that does not parse: {reason}")]
    BadStatus {
        replica: chorus_core::ReplicaId,
        reason: String,
    },
    /// The client was dropped (or its background task ended) while the call waited.
    #[error("client is shut down")]
    Closed,
    #[error("cannot start the client runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

impl ClientError {
    /// The error for f+1 matching rejections of `seq` with reason `why`.
    pub fn rejected(seq: RequestSeq, why: String) -> ClientError {
        if why == chorus_core::REJECT_ABANDONED {
            ClientError::ReplyLost(seq)
        } else {
            ClientError::Rejected(why)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_abandoned_reason_becomes_its_own_error() {
        let e = ClientError::rejected(RequestSeq(7), chorus_core::REJECT_ABANDONED.into());
        assert!(matches!(e, ClientError::ReplyLost(RequestSeq(7))), "{e}");
        let e = ClientError::rejected(RequestSeq(7), "Oversized".into());
        assert!(matches!(e, ClientError::Rejected(ref w) if w == "Oversized"));
    }
}
