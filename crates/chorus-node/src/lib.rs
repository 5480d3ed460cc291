//! chorus-node: the replica process (DESIGN §3).

pub mod channels;
pub mod client_accept;
pub mod core_thread;
pub mod driver;
pub mod embed;
pub mod exec_thread;
pub mod fatal;
pub mod frame_queue;
pub mod keygen;
pub mod lane_split;
pub mod latency;
pub mod metrics;
pub mod metrics_http;
pub mod metrics_status;
pub mod node_config;
pub mod outbox_thread;
pub mod piece_task;
pub mod pillar;
pub mod process_stats;
pub mod queue;
pub mod resent;
pub mod runtime;
pub mod status;
pub mod storage;

pub use embed::ReplicaBuilder;
pub use runtime::{run_replica, run_replica_in, run_replica_with};
