//! What a replica counts, and the small context every handler receives.
//!
//! Bad input is never a panic: it is dropped with a named reason that shows up
//! here (DESIGN §6), so an operator (and the simulator) can see what a
//! Byzantine peer or client tried.

use crate::io::Outbox;
use chorus_core::Millis;
use std::collections::BTreeMap;

/// Counters of one replica. Rejections are keyed by a short static reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Peer messages dropped, by reason (bad signature, wrong leader, stale, …).
    pub rejected: BTreeMap<&'static str, u64>,
    /// Client requests not admitted to the pool, by reason.
    pub requests_rejected: BTreeMap<&'static str, u64>,
    /// Client requests admitted to the pool.
    pub requests_admitted: u64,
    /// Pre-prepares this replica sent as a leader (no-ops included).
    pub proposals: u64,
    /// Of which no-ops (empty lanes, COP §4.2.1).
    pub noop_proposals: u64,
    /// Cells decided locally.
    pub decided: u64,
    /// Positions delivered to the executor.
    pub delivered: u64,
    /// `sarek`: cross-partition requests handed to another partition's pool
    /// after one partition ordered them (SAREK §IV-B 1).
    pub sarek_forwarded: u64,
    /// View changes this replica started (timer expiry or the f+1 join rule).
    pub view_changes: u64,
    /// New views installed.
    pub new_views: u64,
    /// Checkpoints that became stable.
    pub checkpoints_stable: u64,
    /// Snapshots installed from peers (state transfer).
    pub state_transfers: u64,
    /// Messages parked for a future view or above the window.
    pub buffered: u64,
    /// Protocol messages re-sent to peers that reported being behind.
    pub retransmissions: u64,
    /// Pre-prepares held until f+1 replicas vouched for requests whose MAC
    /// did not verify here (Aardvark's "Big MAC"), instead of rejected.
    pub held_for_vouchers: u64,
    /// Valid but late messages (older view, below the window, stale vote):
    /// normal under asynchrony, so not counted as rejections.
    pub stale: u64,
}

impl Counters {
    pub fn reject(&mut self, reason: &'static str) {
        *self.rejected.entry(reason).or_insert(0) += 1;
    }

    pub fn reject_request(&mut self, reason: &'static str) {
        *self.requests_rejected.entry(reason).or_insert(0) += 1;
    }

    /// How often `reason` was counted.
    pub fn rejected(&self, reason: &str) -> u64 {
        self.rejected.get(reason).copied().unwrap_or(0)
    }

    pub fn rejected_total(&self) -> u64 {
        self.rejected.values().sum()
    }
}

/// The time, the outbox and the counters: what every handler of every
/// component gets from its caller. Components share nothing else mutable.
pub struct Cx<'a> {
    pub now: Millis,
    pub out: &'a mut Outbox,
    pub counters: &'a mut Counters,
}

impl<'a> Cx<'a> {
    pub fn new(now: Millis, out: &'a mut Outbox, counters: &'a mut Counters) -> Cx<'a> {
        Cx { now, out, counters }
    }

    /// Drop a peer message for `reason`.
    pub fn reject(&mut self, reason: &'static str) {
        tracing::debug!(reason, "peer message rejected");
        self.counters.reject(reason);
    }
}
