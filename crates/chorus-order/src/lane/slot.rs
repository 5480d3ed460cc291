//! Per-slot PBFT state of one lane.

use chorus_core::{
    Batch, Digest, Millis, PrePrepare, Prepare, PreparedCert, ReplicaId, Signature, View,
    MAX_PRE_PREPARED_PER_SLOT,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Batches kept per slot: the accepted one, the decided one and a few from
/// earlier views (needed to re-propose a prepared digest after a view
/// change), plus one per Q entry (`PrepareAuth::Mac` only), whose batches
/// are never evicted: the accepted, prepared and decided ones and up to
/// `MAX_PRE_PREPARED_PER_SLOT` Q digests (one of them the accepted one)
/// always leave room for the one being stored.
const BATCHES_PER_SLOT: usize = 4;

/// The pre-prepare accepted for a slot in its latest view.
#[derive(Clone, Debug)]
pub(crate) struct Accepted {
    pub view: View,
    pub digest: Digest,
    /// Who pre-prepared it. `None` only after recovery, until the view's
    /// NEW-VIEW tells whether the slot was a re-proposal.
    pub proposer: Option<ReplicaId>,
    /// The proposer's signature (needed for a prepared certificate). `None`
    /// after recovery for a peer's pre-prepare, until it is retransmitted.
    pub sig: Option<Signature>,
    /// When we accepted it (retransmission waits at least one status interval).
    pub at: Millis,
}

#[derive(Default, Debug)]
#[cfg_attr(test, derive(Clone))]
pub(crate) struct SlotState {
    pub pp: Option<Accepted>,
    pub batches: Vec<(Digest, Arc<Batch>)>,
    /// Prepares of the current view, one per replica.
    pub prepares: BTreeMap<ReplicaId, Prepare>,
    /// Peers' prepares whose signature is not checked yet. The channel
    /// already proves the sender; the signature only matters once the
    /// prepare goes into a certificate, so it is checked then, and only for
    /// as many prepares as the certificate needs.
    pub unverified: BTreeSet<ReplicaId>,
    /// Commits of the current view, one per replica.
    pub commits: BTreeMap<ReplicaId, Digest>,
    /// Our prepared certificate with the highest view.
    pub cert: Option<PreparedCert>,
    /// The digests we pre-prepared here, each with the highest view we did
    /// (the Q set of `PrepareAuth::Mac` view changes), at most
    /// `MAX_PRE_PREPARED_PER_SLOT`, the lowest view evicted first.
    pub pre_prepared: Vec<(Digest, View)>,
    pub decided: Option<Digest>,
    /// A pre-prepare of the current view that is valid except that some of
    /// its MAC-vector requests do not verify here; it waits for f+1
    /// replicas to vouch for it (`normal.rs`, Aardvark's "Big MAC").
    pub held: Option<(ReplicaId, PrePrepare)>,
}

impl SlotState {
    pub fn batch(&self, digest: &Digest) -> Option<&Arc<Batch>> {
        self.batches.iter().find(|(d, _)| d == digest).map(|(_, b)| b)
    }

    pub fn store_batch(&mut self, digest: Digest, batch: Arc<Batch>) {
        if self.batch(&digest).is_some() {
            return;
        }
        if self.batches.len() >= BATCHES_PER_SLOT + self.pre_prepared.len() {
            // Evict the oldest batch that is neither accepted, prepared,
            // decided nor in the Q set (`PrepareAuth::Mac`: a NEW-VIEW may
            // re-propose a digest on the strength of our Q entry, and then
            // we must be able to hand out its batch).
            let keep = |d: &Digest| {
                self.pp.as_ref().is_some_and(|p| p.digest == *d)
                    || self.cert.as_ref().is_some_and(|c| c.digest == *d)
                    || self.decided == Some(*d)
                    || self.pre_prepared.iter().any(|(q, _)| q == d)
            };
            if let Some(i) = self.batches.iter().position(|(d, _)| !keep(d)) {
                self.batches.remove(i);
            } else {
                return;
            }
        }
        self.batches.push((digest, batch));
    }

    /// A view change discards the votes of the view left behind.
    pub fn clear_votes(&mut self) {
        self.prepares.clear();
        self.unverified.clear();
        self.commits.clear();
    }

    /// Castro & Liskov's Q set: we pre-prepared (or, as its proposer,
    /// proposed) `digest` in `view`.
    pub fn note_pre_prepared(&mut self, digest: Digest, view: View) {
        if let Some(e) = self.pre_prepared.iter_mut().find(|(d, _)| *d == digest) {
            e.1 = e.1.max(view);
            return;
        }
        if self.pre_prepared.len() >= MAX_PRE_PREPARED_PER_SLOT {
            // The lowest view goes (a known liveness gap: `plan.rs`).
            let lowest = (0..self.pre_prepared.len()).min_by_key(|i| self.pre_prepared[*i].1);
            match lowest {
                Some(i) if self.pre_prepared[i].1 < view => {
                    self.pre_prepared.swap_remove(i);
                }
                _ => return,
            }
        }
        self.pre_prepared.push((digest, view));
    }

    pub fn accepted_in(&self, view: View) -> Option<&Accepted> {
        self.pp.as_ref().filter(|p| p.view == view)
    }
}
