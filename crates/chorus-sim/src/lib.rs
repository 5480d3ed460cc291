//! chorus-sim: the deterministic simulator (DESIGN §7).
//!
//! A discrete-event simulator in the style of mysticeti's: one event heap
//! keyed by (virtual time, insertion counter), one seeded ChaCha RNG, no
//! threads and no wall clock, so a run is a pure function of its options and
//! seed. It drives n sans-IO replicas, each with its own executor and service,
//! clients that authenticate requests and wait for f+1 matching replies, a
//! network with per-link latency, loss, duplication, reordering and healing
//! partitions, crashes (including torn ones) with restart from persisted
//! records, Byzantine replicas as middleware (and twins), and Byzantine
//! clients. After every run the checkers assert agreement, validity,
//! exactly-once execution, equal state digests and liveness; every failure
//! carries the command that replays it.
//!
//! Entry points: [`run_one`], [`run_many`] with [`SimOptions`].

pub mod byz_client;
pub mod byzantine;
pub mod checker;
pub mod checker_extra;
pub mod client;
pub mod clock;
pub mod dispel_adversary;
mod executed_set;
pub mod false_claims;
pub mod faults;
pub mod first_contact_plan;
pub mod net;
pub mod node;
pub mod options;
pub mod perf;
pub mod plan;
pub mod protocol;
pub mod queue;
pub mod rcc_adversary;
pub mod rcc_plan;
pub mod rcc_stats;
pub mod report;
pub mod restart_plan;
pub mod run;
pub mod sarek_sim;
mod sim_log;
pub mod smart_adversary;
pub mod smart_plan;
pub mod stats;
pub mod store;
pub mod swarm;
pub mod toy;
pub mod world;
mod world_client;
mod world_replica;

pub use faults::{FaultKind, FaultSet};
pub use node::SimReplica;
pub use options::{ExecutorChoice, ExecutorFactory, SimOptions};
pub use protocol::{run_for, run_many, run_many_progress, run_one};
pub use report::{RunReport, SimSummary, Violation, ViolationKind};
pub use run::{run_many_with, run_one_with};
pub use swarm::{run_for_with, SwarmOutcome};
