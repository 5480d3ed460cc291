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
    /// `sarek` (SAREK §IV-D): re-predictions our executor asked for, and
    /// re-prediction certificates completed here (2f+1 matching votes).
    pub sarek_repredictions_proposed: u64,
    pub sarek_repredictions_certified: u64,
    /// `dispel`: proposers this replica judged silent (their requests had to
    /// be rescued), handing their clients to stand-in lanes.
    pub dispel_standins: u64,
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
    /// Clients shown to send partial MAC vectors: f+1 replicas reported a
    /// request we verified from the client as unverifiable at them.
    pub clients_proven_partial: u64,
    /// `dispel`: reported MAC-vector requests we stopped proposing after
    /// our proposals of them were decided without them
    /// too often (`VOID_WEIGHT_BEFORE_DROP`, `Pool::voided_for_good`).
    pub voided_requests_dropped: u64,
    /// RCC §III-E SWITCHINSTANCE: delivered switches by outcome, and
    /// pre-prepares held until the owner of their requests was known.
    pub switches: BTreeMap<&'static str, u64>,
    /// Valid but late messages (older view, below the window, stale vote):
    /// normal under asynchrony, so not counted as rejections.
    pub stale: u64,
    /// View changes this replica started, by cause (`ViewChangeCause`).
    /// Metrics only (issue 14 item 2): why views change is what an
    /// operator needs to tell a dead leader from a censoring one.
    pub view_change_causes: BTreeMap<&'static str, u64>,
    /// Per lane (by index): what `proposals`, `decided` and `view_changes`
    /// count, split by lane. At most one entry per configured lane.
    pub per_lane: BTreeMap<u32, LaneCounters>,
}

/// One lane's share of the replica's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaneCounters {
    pub proposals: u64,
    pub decided: u64,
    pub view_changes: u64,
}

/// Why a replica started a view change (PBFT §4.4, §4.5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewChangeCause {
    /// The progress timer expired in an active view with f peers agreeing:
    /// the leader stopped deciding slots.
    NoProgress,
    /// As `NoProgress`, but only a request the leader never proposed was
    /// waiting (the timer ran for a censored request).
    Censorship,
    /// The NEW-VIEW of the view being changed to did not come in time
    /// (PBFT §4.5.2: go on to v+1).
    NewViewTimeout,
    /// f+1 peers asked for a higher view (PBFT §4.5.2 join rule).
    Joined,
    /// SAREK §IV-A: the planned change back to the partition's preferred
    /// leader (`lane/preferred.rs`).
    PreferredReturn,
}

impl ViewChangeCause {
    pub fn as_str(self) -> &'static str {
        match self {
            ViewChangeCause::NoProgress => "no-progress",
            ViewChangeCause::Censorship => "censorship",
            ViewChangeCause::NewViewTimeout => "new-view-timeout",
            ViewChangeCause::Joined => "joined",
            ViewChangeCause::PreferredReturn => "preferred-return",
        }
    }
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

    /// Lane `lane`'s counters, created on first use.
    pub fn lane_mut(&mut self, lane: u32) -> &mut LaneCounters {
        self.per_lane.entry(lane).or_default()
    }

    pub fn rejected_total(&self) -> u64 {
        self.rejected.values().sum()
    }

    /// Add another piece's counts to these (a replica whose lane groups
    /// run apart reports the sum: `Replica::status`).
    pub fn merge(&mut self, o: &Counters) {
        fn add(into: &mut BTreeMap<&'static str, u64>, from: &BTreeMap<&'static str, u64>) {
            for (k, v) in from {
                *into.entry(k).or_insert(0) += v;
            }
        }
        // Every field: a new one fails to compile here until it is merged.
        let Counters {
            rejected: _,
            requests_rejected: _,
            requests_admitted: _,
            proposals: _,
            noop_proposals: _,
            decided: _,
            delivered: _,
            sarek_forwarded: _,
            sarek_repredictions_proposed: _,
            sarek_repredictions_certified: _,
            dispel_standins: _,
            view_changes: _,
            new_views: _,
            checkpoints_stable: _,
            state_transfers: _,
            buffered: _,
            retransmissions: _,
            held_for_vouchers: _,
            clients_proven_partial: _,
            voided_requests_dropped: _,
            switches: _,
            stale: _,
            view_change_causes: _,
            per_lane: _,
        } = o;
        add(&mut self.rejected, &o.rejected);
        add(&mut self.requests_rejected, &o.requests_rejected);
        add(&mut self.switches, &o.switches);
        add(&mut self.view_change_causes, &o.view_change_causes);
        self.requests_admitted += o.requests_admitted;
        self.proposals += o.proposals;
        self.noop_proposals += o.noop_proposals;
        self.decided += o.decided;
        self.delivered += o.delivered;
        self.sarek_forwarded += o.sarek_forwarded;
        self.sarek_repredictions_proposed += o.sarek_repredictions_proposed;
        self.sarek_repredictions_certified += o.sarek_repredictions_certified;
        self.dispel_standins += o.dispel_standins;
        self.view_changes += o.view_changes;
        self.new_views += o.new_views;
        self.checkpoints_stable += o.checkpoints_stable;
        self.state_transfers += o.state_transfers;
        self.buffered += o.buffered;
        self.retransmissions += o.retransmissions;
        self.held_for_vouchers += o.held_for_vouchers;
        self.clients_proven_partial += o.clients_proven_partial;
        self.voided_requests_dropped += o.voided_requests_dropped;
        self.stale += o.stale;
        for (lane, c) in &o.per_lane {
            let mine = self.lane_mut(*lane);
            mine.proposals += c.proposals;
            mine.decided += c.decided;
            mine.view_changes += c.view_changes;
        }
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
