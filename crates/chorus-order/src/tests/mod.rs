//! Crate tests beyond the per-module unit tests: exact actions of each PBFT
//! step, view change, checkpoints and state transfer, a small perfect-network
//! harness for whole clusters, and fuzzing of the message handlers.
//!
//! Tests that assert exact quorum behaviour are compiled out under the
//! `weak-quorum-for-tests` feature, whose whole point is to break it.

#[cfg(not(feature = "weak-quorum-for-tests"))]
mod cluster;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod cluster_dispel;
mod fuzz;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod harness;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod sarek_exec;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod steps_batch_time;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod steps_checkpoint;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod steps_cluster_binding;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod steps_dispel;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod steps_install;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod steps_lane_groups;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod steps_liveness;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod steps_normal;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod steps_rcc;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod steps_rcc_switch;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod steps_recovery;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod steps_request_auth;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod steps_sarek;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod steps_status_bundle;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod steps_throttle;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod steps_transfer;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod steps_view_change;
#[cfg(not(feature = "weak-quorum-for-tests"))]
mod steps_view_change_mac;
mod util;
