//! SAREK's partitioned execution (Li et al., SAREK §IV-A/B, Algorithms 1–3):
//! the state is split into K partitions, each ordered by its own lane and
//! executed from its own delivery stream. Not yet wired to ordering; see
//! `docs/decisions.md` "SAREK partitioned executor".
//!
//! - [`predict()`]: Algorithm 1's PREDICT from the service's access set.
//! - [`RequestScheduler`]: Algorithms 2–3 as a pure data structure.
//! - [`PartitionedExecutor`]: the scheduler in front of a [`crate::Service`].
//! - [`check_serial_order`]: the checker that the run equals a sequential
//!   execution of a serial order consistent with every stream.

pub mod checker;
mod cycle;
pub mod executor;
pub mod predict;
pub mod scheduler;
pub mod stream_exec;

#[cfg(test)]
mod tests;

pub use checker::{check_serial_order, effective_schedules, StreamEntry, Violation};
pub use executor::{entry_for, run_job, PartitionedExecutor, PartitionedResult};
pub use predict::{partition_of_key, predict, EntryKind, PartitionId, Prediction, MAX_PARTITIONS};
pub use scheduler::{DeliverError, Entry, Job, LogEvent, RequestScheduler, SchedulerStats, Step};
pub use stream_exec::{SarekExecStats, SarekExecutor, MISPREDICTED_BELOW_RESULT, SEEN_PER_PARTITION};
