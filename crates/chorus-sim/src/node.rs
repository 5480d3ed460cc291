//! One simulated replica instance: the sans-IO `Replica`, its executor, its
//! timers and reply cache (all lost in a crash), and what survives a crash:
//! its identity, clock and persisted records.

use crate::byzantine::Adversary;
use crate::clock::Clock;
use crate::rcc_adversary::RccAdversary;
use crate::smart_adversary::SmartAdversary;
use crate::store::Store;
use chorus_core::{ClusterConfig, Identity, Millis, ReplicaId, Seq};
use chorus_exec::Executor;
use chorus_order::{Event, Outbox, PersistRecord, TimerId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The replica state machine the simulator drives: `chorus_order::Replica`,
/// or a stand-in used to test the simulator itself (`toy::Sequencer`).
pub trait SimReplica: Sized {
    fn start(
        config: Arc<ClusterConfig>,
        me: ReplicaId,
        identity: Identity,
        now: Millis,
        out: &mut Outbox,
    ) -> Self;
    /// Rebuild from persisted records after a crash.
    fn recover(
        config: Arc<ClusterConfig>,
        me: ReplicaId,
        identity: Identity,
        records: Vec<PersistRecord>,
        now: Millis,
        out: &mut Outbox,
    ) -> Self;
    fn handle(&mut self, now: Millis, event: Event, out: &mut Outbox);

    /// The wall clock (ms since the Unix epoch) for the next events
    /// (`Replica::set_wall_clock`); the simulator derives it from the
    /// node's own, possibly skewed, clock (`crate::clock::wall_ms`).
    fn set_wall_clock(&mut self, _ms: u64) {}
    /// One line on where the replica stands, for liveness reports.
    /// Requests the replica can never release (see
    /// `Replica::leaked_pool_entries`); 0 for protocols without a pool.
    fn leaked_pool_entries(&self) -> usize {
        0
    }

    fn describe(&self) -> String {
        String::new()
    }

    /// Messages the replica re-sent on its own (lane catch-up, Dispel's
    /// status-tick retransmission); 0 for protocols that never re-send.
    fn retransmissions(&self) -> u64 {
        0
    }

    /// Each lane's view and whether the replica is active in it (not
    /// changing view), for the end-of-run view agreement check; empty for
    /// protocols without views.
    fn lane_views(&self) -> Vec<(u64, bool)> {
        Vec::new()
    }

    /// A lane's current view and its window `[low, high)` of slots: what
    /// the new-view check compares a NEW-VIEW's re-proposals with; `None`
    /// for protocols without PBFT lanes.
    fn lane_window(&self, _lane: chorus_core::LaneId) -> Option<(u64, u64, u64)> {
        None
    }

    /// Each lane's decided frontier, view change and RCC stop, for the
    /// wait-free checker (`rcc_stats.rs`); empty for protocols without lanes.
    fn lane_progress(&self) -> Vec<crate::rcc_stats::LaneProgress> {
        Vec::new()
    }

    /// sarek: PREDICT() for routing requests to partition lanes.
    fn set_predictor(&mut self, _p: chorus_order::sarek::Predictor) {}

    /// The simulator ends every burst (`Replica::set_burst_mode`): a
    /// replica may hold messages until `end_of_burst`.
    fn set_burst_mode(&mut self, _on: bool) {}
    /// Run the hub and the lane groups apart (`Replica::set_pieces_apart`).
    fn set_pieces_apart(&mut self, _on: bool, _now: Millis, _out: &mut Outbox) {}
    fn take_internal(&mut self) -> Vec<chorus_order::Internal> {
        Vec::new()
    }
    fn handle_internal(&mut self, _now: Millis, _msg: chorus_order::Internal, _out: &mut Outbox) {}
    fn holds_messages(&self) -> bool {
        false
    }
    fn end_of_burst(&mut self, _now: Millis, _out: &mut Outbox) {}
}

/// The volatile part of a replica.
pub struct Live<R> {
    pub replica: R,
    pub executor: Box<dyn Executor>,
    /// The generation of each armed timer; a timer event with another
    /// generation was cancelled or re-armed.
    pub timers: BTreeMap<TimerId, u64>,
    /// `TakeCheckpoint` positions the executor has not reached yet.
    pub pending_checkpoints: BTreeSet<Seq>,
    /// Batches a custom executor received since its last barrier (their
    /// results are not handed out yet: `world_replica::deliver`).
    pub exec_unflushed: u32,
    /// An `Ev::BurstEnd` is scheduled for the messages the replica holds.
    pub burst_scheduled: bool,
    /// Events handled since the replica began holding messages (the
    /// runtime ends a burst after at most `BURST_MAX_EVENTS`).
    pub burst_events: u32,
    /// Requests their client resent before this replica executed them: it
    /// replies when it executes them even if the client had asked others
    /// (`FEW_REPLIES`; `chorus-node` `resent.rs`). Bounded by the clients'
    /// requests.
    pub resent: std::collections::HashSet<(chorus_core::ClientId, chorus_core::RequestSeq)>,
    /// Messages between the replica's hub and its lane groups on their way
    /// (`SimOptions::pillar_hop_us`), in the order they arrive; each channel
    /// keeps its order (`internal_last`).
    pub internal: std::collections::VecDeque<(crate::queue::Micros, chorus_order::Internal)>,
    pub internal_last: BTreeMap<(Option<usize>, Option<usize>), crate::queue::Micros>,
    /// When the scheduled `Ev::InternalDue` fires, if one is.
    pub internal_wake: Option<crate::queue::Micros>,
}

impl<R> Live<R> {
    pub fn new(replica: R, executor: Box<dyn Executor>) -> Live<R> {
        Live {
            replica,
            executor,
            timers: BTreeMap::new(),
            pending_checkpoints: BTreeSet::new(),
            exec_unflushed: 0,
            burst_scheduled: false,
            burst_events: 0,
            resent: Default::default(),
            internal: std::collections::VecDeque::new(),
            internal_last: BTreeMap::new(),
            internal_wake: None,
        }
    }
}

pub struct SimNode<R> {
    pub replica_id: ReplicaId,
    pub identity: Identity,
    /// Held to the invariants (not Byzantine, not a twin).
    pub correct: bool,
    /// One of two copies of a twinned replica.
    pub twin: bool,
    /// Which half of the network a twin copy (or a correct replica) is on.
    pub side: u8,
    pub adversary: Option<Adversary>,
    /// A smart adversary (`smart_adversary.rs`) instead of a classic one.
    pub smart: Option<SmartAdversary>,
    /// An rcc adversary (`rcc_adversary.rs`) instead of the others.
    pub rcc: Option<RccAdversary>,
    /// When the rcc adversary's next wake-up is scheduled, if one is.
    pub rcc_wake: Option<crate::queue::Micros>,
    pub clock: Clock,
    /// The local clock's reading when this process (life) started. A
    /// replica's `now` counts from it, as the runtime's does (its clock is
    /// `Instant::elapsed` since the process started): a restarted replica's
    /// time starts again near 0 while its wall clock runs on. 0 in the
    /// first life, so runs without restarts see exactly the local clock.
    pub boot: Millis,
    pub store: Store,
    pub live: Option<Live<R>>,
    /// Bumped on every crash, so timers of an earlier life never fire.
    pub incarnation: u64,
    /// A torn crash is pending: crash after this many of the next actions.
    pub torn_after: Option<u32>,
}

impl<R> SimNode<R> {
    pub fn is_live(&self) -> bool {
        self.live.is_some()
    }

    /// What the replica process reads as `now` at global time `global_us`.
    pub fn process_ms(&self, global_us: crate::queue::Micros) -> Millis {
        Millis(self.clock.local_ms(global_us).0.saturating_sub(self.boot.0))
    }

    /// Its wall clock then (ms since the Unix epoch): not reset by restarts.
    pub fn wall_ms(&self, global_us: crate::queue::Micros) -> u64 {
        crate::clock::wall_ms(self.clock.local_ms(global_us))
    }

    /// The earliest global time at which the process reads at least `at`.
    pub fn global_us_at(&self, at: Millis) -> crate::queue::Micros {
        self.clock.global_us_at(Millis(at.0.saturating_add(self.boot.0)))
    }
}
