//! chorus-exec: executors between the merger and the application (DESIGN §5).
//!
//! - [`Service`]: the application interface.
//! - [`ClientTable`]: exactly-once per `(client, request seq)`, decided in
//!   delivery order.
//! - [`Executor`]: the contract the runtime and the simulator drive;
//!   [`SequentialExecutor`] is classic one-at-a-time SMR.
//! - [`DependencyGraph`]: CBASE's parallelizer as a pure data structure; the
//!   threaded worker pool that drives it lives in `chorus-parallel` (this
//!   crate is sans-IO: no threads, clocks or sockets).
//! - [`partitioned`]: SAREK's per-partition scheduler and executor
//!   (Algorithms 1–3).

pub mod access_check;
pub mod client_table;
pub mod executor;
pub mod graph;
pub mod keyed;
pub mod partitioned;
pub mod sequential;
pub mod service;
pub mod switch;
pub mod typed;

pub use access_check::{AccessViolation, CheckedService, OnViolation};
pub use client_table::{
    Admission, CachedReply, ClientTable, RejectKind, ReplyLookup, TableStats,
    DEFAULT_MAX_INFLIGHT_PER_CLIENT, REPLY_CACHE_PER_CLIENT,
};
pub use executor::{
    decode_snapshot, encode_snapshot, install_verified, installed_digest, rejected_result, restore_snapshot,
    state_digest, ExecCheckpoint, ExecError, ExecResult, Executor, ResultsWaker, REJECTED_PREFIX,
};
pub use graph::{conflicts, DependencyGraph, Full, GraphError, NodeId};
pub use keyed::KeyedState;
pub use sequential::{read_only_context, SequentialExecutor};
pub use service::{Access, ExecContext, Service};
pub use switch::apply_switch;
pub use typed::{decode_reply, encode_op, Outcome, Typed, TypedService};
