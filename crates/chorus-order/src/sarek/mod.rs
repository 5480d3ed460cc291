//! SAREK's ordering side (Li et al., SAREK §III–§IV): one PBFT lane per state
//! partition, each with its preferred leader `k mod n`
//! (`ClusterConfig::preferred_leader`), each lane its own delivery stream.
//!
//! - [`Predictor`]: PREDICT() (Algorithm 1) as the driver supplies it, from
//!   the service's declared access set, so the ordering side routes a request
//!   to the lanes of exactly the partitions the executor will expect it in.
//! - [`Streams`]: one in-order delivery stream per lane (no global merger).
//! - [`SarekPools`]: one request pool per lane; a cross-partition request is
//!   pending in every involved lane and ordered once in each (§IV-B 1).
//!
//! Checkpoints: see docs/decisions.md "SAREK ordering and checkpoint cuts".

mod pools;
pub mod repredict;
mod streams;

pub use pools::SarekPools;
pub use streams::Streams;

use chorus_core::{ClusterConfig, LaneId};
use std::sync::Arc;

/// PREDICT(): the partitions (lane indices) a request operation touches.
/// Must be the executor's prediction for the same bytes (both derive it from
/// `Service::access`), and a pure function of the operation.
pub type PredictFn = Arc<dyn Fn(&[u8]) -> Vec<u16> + Send + Sync>;

/// A [`PredictFn`] with the checks every caller needs.
#[derive(Clone)]
pub struct Predictor {
    f: Option<PredictFn>,
}

impl std::fmt::Debug for Predictor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.f.is_some() {
            "Predictor(service)"
        } else {
            "Predictor(everything)"
        })
    }
}

impl Predictor {
    /// Without a service's access sets every request touches every partition
    /// (what `Service::access` defaults to: `Access::Everything`).
    pub fn everything() -> Predictor {
        Predictor { f: None }
    }

    pub fn new(f: PredictFn) -> Predictor {
        Predictor { f: Some(f) }
    }

    /// The lanes of `op`, sorted, deduplicated, never empty, all below
    /// `cfg.lanes()` (an out-of-range index from a buggy predictor is dropped;
    /// an empty result falls back to lane 0 as `predict` does).
    pub fn lanes(&self, cfg: &ClusterConfig, op: &[u8]) -> Vec<LaneId> {
        let k = cfg.lanes();
        let mut v: Vec<LaneId> = match &self.f {
            None => (0..k).map(LaneId).collect(),
            Some(f) => f(op)
                .into_iter()
                .map(u32::from)
                .filter(|&p| p < k)
                .map(LaneId)
                .collect(),
        };
        v.sort_unstable();
        v.dedup();
        if v.is_empty() {
            v.push(LaneId(0));
        }
        v
    }
}

/// The partition whose group admits a request PREDICT() names `predicted`
/// for (never empty, `Predictor::lanes`): the client's owner lane when it
/// is one of them, else the first, so that requests every partition
/// orders (a service without access sets) enter through every group in
/// turn rather than all through partition 0's.
pub fn entry_lane(predicted: &[LaneId], owner: LaneId) -> LaneId {
    if predicted.contains(&owner) {
        owner
    } else {
        predicted.first().copied().unwrap_or(owner)
    }
}
