//! chorus-order: lanes (independent PBFT instances), the merger that turns
//! decided cells into one delivery order, checkpoints, view change and state
//! transfer. Sans-IO: see `io` for the contract.
//!
//! Components (each with a small API, composed by `Replica`):
//! * `Lane` — one PBFT instance over the slots of one lane (`lane/`).
//! * `Pool` — verified client requests waiting to be ordered.
//! * `Merger` — decided cells to global delivery order.
//! * `Checkpointer` — checkpoint votes and certificates.
//! * `StateTransfer` — fetching and serving certified snapshots.
//!
//! How the other ordering modes of DESIGN §1 plug into the lane/merger split
//! is written down in `docs/modes.md`.

pub mod batch_time;
pub mod buffer;
pub mod certs;
pub mod checkpoint;
pub mod counters;
pub mod dispel;
pub mod io;
pub mod lane;
pub mod merger;
pub mod merger_dispel;
pub mod pool;
pub mod pre_check;
pub mod rcc_switch;
pub mod replica;
pub mod roles;
pub mod round_order;
pub mod sarek;
pub mod sigkeys;
pub mod transfer;
pub mod verify;

pub use checkpoint::{Checkpointer, StableCheckpoint, VoteOutcome};
pub use counters::{Counters, Cx, LaneCounters, ViewChangeCause};
pub use dispel::{DispelCore, DispelStatus, EpochInfo};
pub use io::{Action, Event, Outbox, PersistRecord, RejectReason, TimerId};
pub use lane::{Decision, Lane, LaneEnv, LaneOutput};
pub use merger::Merger;
pub use pool::{Admitted, Pool, Readiness};
pub use replica::{
    request_lane, GroupPiece, Internal, LaneStatus, PieceLane, PieceStatus, Replica, ReplicaStatus,
};
pub use transfer::{Installed, StateTransfer};
pub use verify::{NoHint, RequestVerifier, VerifiedHint};

#[cfg(test)]
mod tests;
