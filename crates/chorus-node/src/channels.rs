//! The bounded channels between a replica's threads (DESIGN §3: pillars share
//! no mutable state and talk to the core and the executor only through these).

use bytes::Bytes;
use chorus_core::{Batch, CheckpointCert, ClientId, Digest, ReplicaId, ReplicaMsg, Request, RequestSeq, Seq};
use chorus_order::RejectReason;
use std::sync::Arc;

/// Capacity of every channel into the protocol core.
pub const CORE_CHANNEL_CAP: usize = 8_192;
/// Capacity of the executor's input channel (delivered batches wait here).
pub const EXEC_CHANNEL_CAP: usize = 4_096;
/// Capacity of each pillar's input channel (frames to send, replies).
pub const PILLAR_CHANNEL_CAP: usize = 16_384;

/// Into the protocol core thread.
pub enum CoreInput {
    Peer {
        from: ReplicaId,
        msg: ReplicaMsg,
        /// Signatures of `msg` the pillar already found valid
        /// (`chorus_order::pre_check`), for the core's verdict memo.
        pre: chorus_core::verify_memo::PreVerified,
    },
    Request(Request),
    Checkpointed {
        seq: Seq,
        state_digest: Digest,
        snapshot: Bytes,
    },
    StateInstalled {
        seq: Seq,
        state_digest: Digest,
    },
    /// `sarek`: the executor suspended a mis-predicted request (SAREK §IV-D).
    Mispredicted(chorus_core::RePrediction),
    /// `sarek`: cross-partition requests the executor holds that lack other
    /// partitions' copies (`Executor::missing_copies`).
    MissingCopies(Vec<(chorus_core::Request, Vec<chorus_core::LaneId>)>),
    /// From a lane group on its pillar (`piece_task.rs`), in the order it
    /// made them: decisions, learnt checkpoints, its frontier, peers' statuses.
    Internal(chorus_order::Internal),
    /// Several of the above that a pillar read in one burst: one channel
    /// hop and one wake-up of the core instead of one each (never nested).
    Many(Vec<CoreInput>),
}

/// Capacity of each lane group's input (`piece_task.rs`).
pub const PIECE_CHANNEL_CAP: usize = 8_192;

/// Into a lane group running on its pillar (`piece_task.rs`).
pub enum PieceInput {
    /// One of its lanes' messages, read by its pillar.
    Peer { from: ReplicaId, msg: ReplicaMsg },
    /// A request of a client its lane owns, verified by the pillar that
    /// read it (this one, or another that forwarded it).
    Request(Request),
    /// From the hub (`core_thread.rs`), in the order the hub made them.
    Internal(chorus_order::Internal),
    /// Several of the above that a pillar read in one burst (never nested).
    Many(Vec<PieceInput>),
}

/// Into a pillar thread.
pub enum PillarInput {
    /// An encoded `ReplicaMsg` for one peer.
    SendPeer { to: ReplicaId, frame: Bytes },
    /// An encoded `ReplicaMsg` for every peer.
    BroadcastPeer { frame: Bytes },
    /// An encoded `ClientMsg` for a client connected to this pillar.
    ToClient { client: ClientId, frame: Bytes },
    /// Several `ToClient`s at once (the executor's replies of one round):
    /// one channel hop and one wake-up instead of one per reply.
    ToClients(Vec<(ClientId, Bytes)>),
    /// A freshly accepted client socket this pillar now owns, with its slot
    /// in the client port's admission gate (freed when the handshake ends).
    AdoptClient(std::net::TcpStream, chorus_net::Pending),
}

/// Into the executor thread.
pub enum ExecInput {
    Deliver {
        seq: Seq,
        batch: Arc<Batch>,
        /// When the core delivered it (`request_latency_seconds` stages).
        at: std::time::Instant,
    },
    /// `sarek`: the next batch of partition stream `cell.lane`.
    DeliverStream {
        cell: chorus_core::Cell,
        batch: Arc<Batch>,
    },
    TakeCheckpoint {
        seq: Seq,
    },
    /// `sarek`: report what `Executor::missing_copies` finds to the core.
    FindMissingCopies,
    InstallState {
        cert: CheckpointCert,
        snapshot: Bytes,
    },
    ReadOnly {
        request: Request,
    },
    Reject {
        client: ClientId,
        seq: RequestSeq,
        reason: RejectReason,
    },
    /// A client authenticated on `pillar`: replies to it go there.
    ClientAt {
        client: ClientId,
        pillar: usize,
    },
    ClientGone {
        client: ClientId,
        pillar: usize,
    },
    StatusQuery {
        client: ClientId,
    },
    /// The client sent `(client, seq)` again: answer in full if that request
    /// (same digest) already executed, with a rejection if another one did.
    Retransmit {
        client: ClientId,
        seq: RequestSeq,
        digest: chorus_core::Digest,
    },
}
