//! The state of one epoch: n reliable broadcasts, n binary instances, and the
//! reduction's bookkeeping (\[TR\] Fig. 3 with the superblock output, spec §4.3–§4.4).
//! The engine drives it; this file only holds state and pure queries.

use crate::binary::Binary;
use crate::config::DbftConfig;
use crate::rb::Rb;
use chorus_core::{Batch, Digest, Millis, ReplicaId};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct EpochState {
    /// This replica takes part: its binary instances are invoked (join rule, §5.1).
    pub(crate) joined: bool,
    /// This replica RB-broadcast its batch for the epoch (at most once).
    pub(crate) proposed: bool,
    pub(crate) rb: Vec<Rb>,
    pub(crate) bin: Vec<Binary>,
    pub(crate) bin_decisions: Vec<Option<bool>>,
    /// \[TR\] Fig. 3: the zero phase starts the moment the first instance decides 1.
    pub(crate) one_decided: bool,
    /// The zero-phase grace timer was set / has fired (engine `start_zero_phase`).
    pub(crate) grace_set: bool,
    pub(crate) grace_over: bool,
    /// Batch bytes keyed by DIGEST, never by proposer (P12). Bounded: the
    /// first INIT of each proposer, `max_extra_inits` more each, and fetched ones.
    pub(crate) store: BTreeMap<Digest, Arc<Batch>>,
    /// Distinct senders of any message of this epoch (join rule: t+1).
    pub(crate) senders: Vec<bool>,
    pub(crate) slot_emitted: Vec<bool>,
    pub(crate) decided_emitted: bool,
    pub(crate) ready_emitted: bool,
    /// slot → digest whose bytes are being fetched (§5.3).
    pub(crate) fetching: BTreeMap<usize, Digest>,
    /// (peer, slot) → batch responses served and when the last one was
    /// (P14 FETCH flood bound: a budget, then one per retry period).
    pub(crate) served: BTreeMap<(usize, usize), (u32, Millis)>,
}

impl EpochState {
    pub(crate) fn new(cfg: &DbftConfig, me: usize) -> EpochState {
        EpochState {
            joined: false,
            proposed: false,
            rb: (0..cfg.n).map(|_| Rb::new(cfg)).collect(),
            bin: (0..cfg.n).map(|_| Binary::new(cfg, me)).collect(),
            bin_decisions: vec![None; cfg.n],
            one_decided: false,
            grace_set: false,
            grace_over: false,
            store: BTreeMap::new(),
            senders: vec![false; cfg.n],
            slot_emitted: vec![false; cfg.n],
            decided_emitted: false,
            ready_emitted: false,
            fetching: BTreeMap::new(),
            served: BTreeMap::new(),
        }
    }

    pub fn joined(&self) -> bool {
        self.joined
    }
    pub fn proposed(&self) -> bool {
        self.proposed
    }
    pub fn binary(&self, slot: usize) -> &Binary {
        &self.bin[slot]
    }
    pub fn rb(&self, slot: usize) -> &Rb {
        &self.rb[slot]
    }
    /// The stored bytes of `d`, if here.
    pub fn batch(&self, d: &Digest) -> Option<&Arc<Batch>> {
        self.store.get(d)
    }
    pub fn has_batch(&self, d: &Digest) -> bool {
        self.store.contains_key(d)
    }
    pub fn stored(&self) -> usize {
        self.store.len()
    }
    pub fn sender_count(&self) -> usize {
        self.senders.iter().filter(|s| **s).count()
    }
    pub fn is_fetching(&self, slot: usize) -> bool {
        self.fetching.contains_key(&slot)
    }

    /// All n bits known: the epoch is decided for the join rule.
    pub fn bitmask(&self) -> Option<Vec<bool>> {
        self.bin_decisions.iter().copied().collect()
    }

    /// Selected (proposer, digest) pairs, sorted by digest then proposer
    /// (Dispel §4.4, spec §5.2); None until every bit is known and every
    /// selected proposal is RB-delivered.
    pub fn selected(&self) -> Option<Vec<(ReplicaId, Digest)>> {
        let mask = self.bitmask()?;
        let mut sel = Vec::new();
        for (k, bit) in mask.iter().enumerate() {
            if *bit {
                sel.push((ReplicaId(k as u32), self.rb[k].delivered()?));
            }
        }
        sel.sort_by_key(|&(p, d)| (d, p));
        Some(sel)
    }
}
