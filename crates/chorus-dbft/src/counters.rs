//! Why inputs were refused. Byzantine input is dropped and counted, never a panic.

use std::collections::BTreeMap;

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub enum DropReason {
    /// Sender, proposer or slot index ≥ n.
    BadIndex,
    /// Round 0 (rounds start at 1, P7).
    BadRound,
    /// Round beyond the instance's window or the absolute cap (P14).
    RoundOutOfWindow,
    /// Epoch already collected.
    EpochTooOld,
    /// Epoch beyond the window (far-future epochs, P14).
    EpochTooFar,
    /// Batch violates the size limits.
    BatchTooLarge,
    /// A second INIT for the same (epoch, proposer) beyond the kept ones.
    ExtraInit,
    /// Repeated ECHO/READY/B_VAL/AUX/COORD/DECIDED from the same sender (first wins).
    Duplicate,
    /// COORD not sent by coord(round) (P5).
    NotCoordinator,
    /// A batch response nobody asked for, or whose digest differs (§5.3).
    UnrequestedBatch,
    /// A batch request for bytes this replica does not hold.
    UnknownBatch,
    /// Batch requests beyond the per-peer budget (P14).
    FetchFlood,
    /// A local proposal for an epoch already proposed or outside the window.
    BadProposal,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    pub dropped: BTreeMap<DropReason, u64>,
}

impl Counters {
    pub fn drop(&mut self, why: DropReason) {
        *self.dropped.entry(why).or_default() += 1;
    }

    pub fn get(&self, why: DropReason) -> u64 {
        self.dropped.get(&why).copied().unwrap_or(0)
    }
}
