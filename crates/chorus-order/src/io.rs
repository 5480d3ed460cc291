//! The sans-IO contract (DESIGN §2 "the shape of a protocol state machine"):
//! events in, actions out. The runtime and the simulator perform the actions in
//! the order emitted, and every `Persist` is made durable before any later
//! `Send`/`Broadcast` of the same batch of actions leaves the process.

use bytes::Bytes;
use chorus_core::{
    Batch, Cell, CheckpointCert, ClientId, Digest, LaneId, Millis, ReplicaId, ReplicaMsg, Request,
    RequestSeq, Seq, Slot, View,
};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Timers are requested through the outbox and fire as `Event::Timer`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TimerId {
    /// A lane's progress timer: fires a view change when a request waits too long.
    ViewChange(LaneId),
    /// Cut a batch that has waited `batch_delay_ms`.
    Batch(LaneId),
    /// Periodic status exchange (retransmission, catch-up).
    Status,
    /// `dispel`: the earliest deadline of the DBFT engine's own timers
    /// (binary-consensus rounds, batch fetch retries), kept by `DispelCore`.
    Dispel,
    /// Lane group `g`'s status tick, once groups run apart from the hub
    /// (`replica/piece.rs`; together, `Status` ticks every group).
    GroupStatus(u32),
}

/// What the replica state machine consumes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A message from `from`, as identified by the authenticated channel.
    Message {
        from: ReplicaId,
        msg: ReplicaMsg,
    },
    /// A client request as received from the network (not yet verified).
    Request(Request),
    Timer(TimerId),
    /// The executor has executed every position below `seq` and nothing else;
    /// `snapshot` is the state at that point (answer to `Action::TakeCheckpoint`).
    Checkpointed {
        seq: Seq,
        state_digest: Digest,
        snapshot: Bytes,
    },
    /// The runtime installed the snapshot of `Action::InstallState`.
    StateInstalled {
        seq: Seq,
        state_digest: Digest,
    },
    /// `sarek` (SAREK §IV-D): the executor suspended a request that
    /// accessed partitions outside its prediction
    /// (`Executor::drain_repredictions`); sign and broadcast the
    /// re-prediction.
    Mispredicted(chorus_core::RePrediction),
    /// `sarek`: the executor's answer to `Action::FindMissingCopies`:
    /// cross-partition requests it holds that lack the copies of these
    /// partitions (lanes) (`Executor::missing_copies`).
    MissingCopies(Vec<(Request, Vec<LaneId>)>),
}

/// Why a client request was not taken into the pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RejectReason {
    /// Pool or per-client share full: back-pressure, the client should retry.
    Busy,
    /// The authenticator does not verify (never proposed, never executed).
    BadAuthenticator,
    UnknownClient,
    Oversized,
    /// RCC §III-E: a SWITCHINSTANCE outside `rcc`, to an instance that does
    /// not exist, or to the client's owner already.
    BadSwitch,
}

/// What must survive a crash. Replayed in order by `Replica::recover`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PersistRecord {
    /// The lane entered `view`.
    View { lane: LaneId, view: View },
    /// We accepted a pre-prepare (and are about to send our prepare for it).
    Accepted {
        lane: LaneId,
        view: View,
        slot: Slot,
        digest: Digest,
        /// Shared with the lane's slot: a batch of ~200 requests is ~40 KB
        /// of `Request`s, which a deep copy per record moved and dropped.
        batch: Arc<Batch>,
    },
    /// We collected a prepared certificate (and are about to send our commit).
    Prepared { cert: chorus_core::PreparedCert },
    /// The cell is decided (the ledger).
    Decided {
        cell: Cell,
        digest: Digest,
        batch: Arc<Batch>,
    },
    /// A stable checkpoint and the state at it; everything below may be discarded.
    Stable { cert: CheckpointCert, snapshot: Bytes },
    /// `dispel`: the DBFT lanes' whole state (postcard of `DispelState`),
    /// written right after the engine collected the epochs below `low` (at
    /// each stable checkpoint). Earlier `Dispel*` records may be discarded.
    DispelSnapshot { low: u64, state: Bytes },
    /// `dispel`: one input of the (deterministic) DBFT engine, written before
    /// the engine acts on it. Snapshot + inputs in order rebuild exactly the
    /// state that sent our messages, so a restarted replica never contradicts
    /// a vote it sent (docs/decisions.md, "Dispel integration").
    DispelInput { now: Millis, input: Bytes },
    /// The lane left a view on a timeout certificate (`timeout_cert.rs`):
    /// its signed statements (at most one per replica). A restarted replica
    /// still holds the certificate and passes it on to peers that lost
    /// theirs; without it, after a whole cluster restarted, the one that
    /// had left sat alone in the view change for good (cluster-restart,
    /// pbft n = 4 seed 89). Only the latest per lane matters on replay.
    TimeoutCert {
        lane: LaneId,
        statements: Vec<chorus_core::Timeout>,
    },
}

/// What the replica state machine asks its driver to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Send {
        to: ReplicaId,
        msg: ReplicaMsg,
    },
    /// To every replica except ourselves.
    Broadcast {
        msg: ReplicaMsg,
    },
    /// Execute this batch at global position `seq`. Emitted exactly once per
    /// position, in strictly increasing order without gaps.
    Deliver {
        seq: Seq,
        cell: Cell,
        batch: Arc<Batch>,
    },
    /// `sarek`: execute this batch as the next entry of stream `cell.lane`
    /// (SAREK §IV-B: one delivery stream per partition). Emitted exactly once
    /// per cell, each lane's slots in increasing order without gaps; lanes
    /// are independent. Positions are `config.seq_of(cell)`; a checkpoint at
    /// `seq` covers every cell below the cut `seq / lanes` of every stream.
    DeliverStream {
        cell: Cell,
        batch: Arc<Batch>,
    },
    /// Fire `Event::Timer(id)` at `at`, replacing any earlier deadline of the
    /// same id. (The state machine also ignores a firing whose deadline it
    /// has since moved, so a driver that does not replace is safe too.)
    SetTimer {
        id: TimerId,
        at: Millis,
    },
    CancelTimer {
        id: TimerId,
    },
    Persist(PersistRecord),
    /// Once every position below `seq` has executed, snapshot the state and
    /// answer with `Event::Checkpointed`.
    TakeCheckpoint {
        seq: Seq,
    },
    /// Replace the application state by this snapshot (state transfer); answer
    /// with `Event::StateInstalled`. Delivery resumes at `cert.seq`.
    InstallState {
        cert: CheckpointCert,
        snapshot: Bytes,
    },
    /// `sarek`, once per status interval: ask the executor which
    /// cross-partition requests still lack another partition's copy;
    /// answer with `Event::MissingCopies`.
    FindMissingCopies,
    /// Tell the client its request was not accepted.
    Reject {
        client: ClientId,
        seq: RequestSeq,
        reason: RejectReason,
    },
}

/// Collects actions; never performs them.
#[derive(Default, Debug)]
pub struct Outbox {
    pub actions: Vec<Action>,
}

impl Outbox {
    pub fn new() -> Outbox {
        Outbox::default()
    }
    pub fn push(&mut self, a: Action) {
        self.actions.push(a);
    }
    pub fn send(&mut self, to: ReplicaId, msg: ReplicaMsg) {
        self.push(Action::Send { to, msg });
    }
    pub fn broadcast(&mut self, msg: ReplicaMsg) {
        self.push(Action::Broadcast { msg });
    }
    pub fn persist(&mut self, r: PersistRecord) {
        self.push(Action::Persist(r));
    }
    pub fn set_timer(&mut self, id: TimerId, at: Millis) {
        self.push(Action::SetTimer { id, at });
    }
    pub fn drain(&mut self) -> std::vec::Drain<'_, Action> {
        self.actions.drain(..)
    }
}
