//! NEW-VIEW construction (PBFT §4.4), a pure function of the view changes, so
//! the primary computes it and every backup recomputes it to check.

use crate::certs::low_slot_of;
use chorus_core::{
    Batch, CheckpointCert, ClusterConfig, Digest, PrepareAuth, Reproposal, Slot, View, ViewChange,
};
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
///
/// Under `PrepareAuth::Mac` the certificates are unproven claims, and a slot
/// is decided by Castro & Liskov's rule instead (`decide_slot_mac`); `None`
/// when some slot cannot be decided from these view changes yet (the
/// primary waits for more of them; a backup refuses such a NEW-VIEW).
pub fn plan_new_view(cfg: &ClusterConfig, vcs: &[ViewChange]) -> Option<NewViewPlan> {
    // The highest certificate; ties (impossible with at most f faults) by digest.
    let mut stable: Option<&CheckpointCert> = None;
    for c in vcs.iter().filter_map(|vc| vc.stable.as_ref()) {
        if stable.is_none_or(|s| (c.seq, c.state_digest) > (s.seq, s.state_digest)) {
            stable = Some(c);
        }
    }
    let low = low_slot_of(cfg, stable);
    let window_end = low.0.saturating_add(cfg.params.window_slots);
    let in_window = |s: Slot| s >= low && s.0 < window_end;
    let mut best: BTreeMap<Slot, (View, Digest)> = BTreeMap::new();
    for c in vcs.iter().flat_map(|vc| vc.prepared.iter()) {
        if !in_window(c.slot) {
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
        Some(high) => {
            let mut out = Vec::with_capacity((high.0 - low.0 + 1) as usize);
            for s in low.0..=high.0 {
                let slot = Slot(s);
                let digest = match cfg.params.prepare_auth {
                    PrepareAuth::Signature => best.get(&slot).map_or_else(Batch::noop_digest, |(_, d)| *d),
                    PrepareAuth::Mac => decide_slot_mac(cfg, vcs, slot)?,
                };
                out.push(Reproposal { slot, digest });
            }
            out
        }
    };
    Some(NewViewPlan {
        low,
        reproposals,
        stable: stable.cloned(),
    })
}

/// Castro & Liskov (TOCS 2002, §4.5; Castro's thesis §3.2.4), for one slot
/// `n` at or above min-s, with view changes whose P entries are claims:
///
/// - re-propose `d` if some P entry claims `(n, d, v)` and
///   **A1**: 2f+1 view changes claim nothing at `n` that contradicts it (no P
///   entry at `n`, or one from a view below `v`, or `(v, d)` itself), and
///   **A2**: f+1 view changes say they pre-prepared `d` at `n` in view `v`
///   or later (a Q entry, or a P entry, which implies one);
/// - else re-propose null if **B**: 2f+1 view changes claim nothing at `n`;
/// - else `None`: undecidable from these view changes.
///
/// A2's f+1 include a correct replica that pre-prepared `d` (so checked its
/// requests, or accepted it as a re-proposal in turn) and keeps its batch
/// (`SlotState::store_batch`): the new primary can fetch it, and backups
/// accept the re-proposal without checking its requests again.
///
/// Safety: if `d` committed at `n` in view `v`, f+1 correct replicas
/// prepared it and claim `(n, d, w ≥ v)` (every later NEW-VIEW re-proposed
/// `d`, by induction); any 2f+1 view changes include one of them, so B
/// fails, and A1 for another digest `d'` needs a view `v' > w ≥ v`, for
/// which A2 needs a correct replica that pre-prepared `d'` at `n` in a view
/// above `v`: none did. (The claims of `d`'s preparers are never `refuted`:
/// that needs a correct replica that pre-prepared another digest at `n`
/// above their view, which the same induction rules out.) Liveness: with every correct replica's view change
/// the highest view a correct replica prepared in passes A1 and A2 (the f+1
/// correct replicas that pre-prepared it keep its Q entry), or B holds —
/// as long as they kept it: a replica keeps `MAX_PRE_PREPARED_PER_SLOT`
/// entries per slot, so one that pre-prepared more digests at one slot in
/// later views (each in a view where the slot was fresh) may have evicted
/// it, and the slot can stay undecidable (`docs/known-issues.md`).
/// Among several digests that pass, the one with the highest view (then the
/// smallest digest) is taken, so the choice is a function of the set.
fn decide_slot_mac(cfg: &ClusterConfig, vcs: &[ViewChange], n: Slot) -> Option<Digest> {
    let quorum = cfg.quorum();
    let weak = cfg.f() + 1;
    // Each view change's claim at `n`, unless f+1 view changes moved on
    // past it (`refuted`): then it is read as no claim.
    let claims: Vec<Option<(View, Digest)>> = vcs
        .iter()
        .map(|vc| claim_at(vc, n).filter(|&(v, d)| !refuted(vcs, n, d, v, weak)))
        .collect();
    let mut candidates: Vec<(View, Digest)> = claims.iter().flatten().copied().collect();
    candidates.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    candidates.dedup();
    for (v, d) in candidates {
        let a1 = claims
            .iter()
            .filter(|c| c.is_none_or(|(cv, cd)| cv < v || (cv == v && cd == d)))
            .count();
        if a1 < quorum {
            continue;
        }
        let a2 = vcs.iter().filter(|vc| supports(vc, n, d, v)).count();
        if a2 >= weak {
            return Some(d);
        }
    }
    let b = claims.iter().filter(|c| c.is_none()).count();
    (b >= quorum).then(Batch::noop_digest)
}

/// A claim that `d` prepared at `n` in `v` is stale when f+1 view changes say
/// they pre-prepared another digest there in a later view: one of them is
/// correct, and a correct replica pre-prepares another digest at `n` in a
/// view above `v` only through a NEW-VIEW that did not re-propose `d`, so
/// `d` did not commit in `v` or before (by the induction of
/// `decide_slot_mac`); if it committed later, the claims from that later
/// view are not stale. Reading stale claims as none narrows the gap the Q
/// bound leaves (a holder's claim outliving the entries that backed it:
/// `docs/known-issues.md`); it does not close it.
fn refuted(vcs: &[ViewChange], n: Slot, d: Digest, v: View, weak: usize) -> bool {
    let moved_on = |vc: &&ViewChange| {
        claim_at(vc, n).is_some_and(|(cv, cd)| cd != d && cv > v) || {
            let from = vc.pre_prepared.partition_point(|q| q.slot < n);
            vc.pre_prepared[from..]
                .iter()
                .take_while(|q| q.slot == n)
                .any(|q| q.digest != d && q.view > v)
        }
    };
    vcs.iter().filter(moved_on).count() >= weak
}

/// Does `vc` count for A2 of `(d, v)` at `n`: it says it pre-prepared `d` at
/// `n` in `v` or later (a Q entry, or a P claim, which implies one).
///
/// Not counted: a Q set full of higher views (which may have evicted `(d,
/// v)`). Tried on 2026-11-26 to keep slots decidable under the bound, and
/// dropped: such a supporter need not have pre-prepared `d`, so one
/// Byzantine claim of a batch nobody holds passed A2 and the lane stalled on
/// fetching it in every view (review of 2026-11-26).
fn supports(vc: &ViewChange, n: Slot, d: Digest, v: View) -> bool {
    if claim_at(vc, n).is_some_and(|(cv, cd)| cd == d && cv >= v) {
        return true;
    }
    let from = vc.pre_prepared.partition_point(|q| q.slot < n);
    vc.pre_prepared[from..]
        .iter()
        .take_while(|q| q.slot == n)
        .any(|q| q.digest == d && q.view >= v)
}

/// `vc`'s P claim at `n`, by binary search: a verified VIEW-CHANGE lists its
/// claims by ascending slot and its Q entries by (slot, digest) (`certs.rs`),
/// so a NEW-VIEW over n view changes and a window of W slots costs
/// O(W · n · log W) per candidate, not O(W² · n).
fn claim_at(vc: &ViewChange, n: Slot) -> Option<(View, Digest)> {
    let i = vc.prepared.binary_search_by_key(&n, |c| c.slot).ok()?;
    let c = &vc.prepared[i];
    Some((c.view, c.digest))
}
