//! NEW-VIEW construction (PBFT §4.4), a pure function of the view changes, so
//! the primary computes it and every backup recomputes it to check.

use crate::certs::low_slot_of;
use chorus_core::{Batch, CheckpointCert, ClusterConfig, Digest, Reproposal, Slot, View, ViewChange};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewViewPlan {
    /// `min-s`: the first slot above the highest stable checkpoint in the set.
    pub low: Slot,
    /// One entry per slot in `[low, max-s]`: the prepared digest with the
    /// highest view, or a no-op where nothing was prepared.
    pub reproposals: Vec<Reproposal>,
    /// The highest stable checkpoint among the view changes.
    pub stable: Option<CheckpointCert>,
}

/// PBFT §4.4: min-s is the latest stable checkpoint in V, max-s the highest
/// prepared slot; for every slot between them re-propose the digest prepared
/// in the highest view, else a null request (our no-op batch). Assumes the
/// view changes were validated (certificates inside each sender's window).
pub fn plan_new_view(cfg: &ClusterConfig, vcs: &[ViewChange]) -> NewViewPlan {
    // The highest certificate; ties (impossible with at most f faults) by digest.
    let mut stable: Option<&CheckpointCert> = None;
    for c in vcs.iter().filter_map(|vc| vc.stable.as_ref()) {
        if stable.is_none_or(|s| (c.seq, c.state_digest) > (s.seq, s.state_digest)) {
            stable = Some(c);
        }
    }
    let low = low_slot_of(cfg, stable);
    let window_end = low.0.saturating_add(cfg.params.window_slots);
    let mut best: BTreeMap<Slot, (View, Digest)> = BTreeMap::new();
    for c in vcs.iter().flat_map(|vc| vc.prepared.iter()) {
        if c.slot < low || c.slot.0 >= window_end {
            continue;
        }
        let better = match best.get(&c.slot) {
            None => true,
            // Same view and different digests cannot both be prepared with at
            // most f faults; pick deterministically anyway.
            Some((v, d)) => c.view > *v || (c.view == *v && c.digest < *d),
        };
        if better {
            best.insert(c.slot, (c.view, c.digest));
        }
    }
    let reproposals = match best.keys().next_back() {
        None => Vec::new(),
        Some(high) => (low.0..=high.0)
            .map(|s| Reproposal {
                slot: Slot(s),
                digest: best.get(&Slot(s)).map_or_else(Batch::noop_digest, |(_, d)| *d),
            })
            .collect(),
    };
    NewViewPlan {
        low,
        reproposals,
        stable: stable.cloned(),
    }
}
