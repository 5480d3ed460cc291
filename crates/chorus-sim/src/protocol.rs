//! The replica under test: `chorus_order::Replica` behind `SimReplica`, and
//! the entry points the CLI calls.

use crate::node::SimReplica;
use crate::options::SimOptions;
use crate::report::{RunReport, SimSummary};
use crate::run::{run_many_with, run_one_with};
use chorus_core::{ClusterConfig, Identity, Millis, ReplicaId};
use chorus_order::{Event, Outbox, PersistRecord, Replica};
use std::sync::Arc;

impl SimReplica for Replica {
    fn start(
        config: Arc<ClusterConfig>,
        me: ReplicaId,
        identity: Identity,
        now: Millis,
        out: &mut Outbox,
    ) -> Self {
        Replica::new(config, me, identity, now, out)
    }

    fn recover(
        config: Arc<ClusterConfig>,
        me: ReplicaId,
        identity: Identity,
        records: Vec<PersistRecord>,
        now: Millis,
        out: &mut Outbox,
    ) -> Self {
        Replica::recover(config, me, identity, records, now, out)
    }

    fn handle(&mut self, now: Millis, event: Event, out: &mut Outbox) {
        Replica::handle(self, now, event, out)
    }

    fn set_wall_clock(&mut self, ms: u64) {
        Replica::set_wall_clock(self, ms)
    }

    fn leaked_pool_entries(&self) -> usize {
        Replica::leaked_pool_entries(self)
    }

    fn retransmissions(&self) -> u64 {
        self.status().counters.retransmissions
    }

    fn set_predictor(&mut self, p: chorus_order::sarek::Predictor) {
        Replica::set_predictor(self, p)
    }

    fn set_pieces_apart(&mut self, on: bool, now: Millis, out: &mut Outbox) {
        Replica::set_pieces_apart(self, on, now, out)
    }

    fn take_internal(&mut self) -> Vec<chorus_order::Internal> {
        Replica::take_internal(self)
    }

    fn handle_internal(&mut self, now: Millis, msg: chorus_order::Internal, out: &mut Outbox) {
        Replica::handle_internal(self, now, msg, out)
    }

    fn set_burst_mode(&mut self, on: bool) {
        Replica::set_burst_mode(self, on)
    }

    fn holds_messages(&self) -> bool {
        Replica::holds_messages(self)
    }

    fn end_of_burst(&mut self, now: Millis, out: &mut Outbox) {
        Replica::end_of_burst(self, now, out)
    }

    fn lane_views(&self) -> Vec<(u64, bool)> {
        let s = self.status();
        s.views
            .iter()
            .zip(&s.view_changing)
            .map(|(v, changing)| (v.0, !changing))
            .collect()
    }

    fn lane_window(&self, lane: chorus_core::LaneId) -> Option<(u64, u64, u64)> {
        let l = self.lane(lane)?;
        Some((l.view().0, l.low().0, l.high().0))
    }

    fn lane_progress(&self) -> Vec<crate::rcc_stats::LaneProgress> {
        let s = self.status();
        (0..s.views.len())
            .map(|l| {
                let next = s.next_undecided[l];
                crate::rcc_stats::LaneProgress {
                    next_undecided: next.0,
                    changing: s.view_changing[l],
                    stopped: self
                        .lane(chorus_core::LaneId(l as u32))
                        .is_some_and(|lane| lane.is_stopped_slot(next)),
                }
            })
            .collect()
    }

    fn describe(&self) -> String {
        let s = self.status();
        let mut line = format!(
            "next {:?} stable {:?} views {:?} changing {:?} undecided {:?} pool {}",
            s.next_delivery, s.stable_seq, s.views, s.view_changing, s.next_undecided, s.pool_len
        );
        if let Some(d) = self.dispel_status() {
            let epochs: Vec<String> = d
                .epochs
                .iter()
                .map(|e| {
                    format!(
                        "e{}:{}bits/r{}{}",
                        e.epoch,
                        e.bits_decided,
                        e.max_round,
                        if e.joined { "" } else { "(not joined)" }
                    )
                })
                .collect();
            line.push_str(&format!(
                " | dbft next-epoch {} spawn {} low {} depth {} live [{}] dropped {:?}",
                d.next_epoch,
                d.next_spawn,
                d.low,
                d.pipeline_depth,
                epochs.join(" "),
                d.dropped
            ));
        }
        line
    }
}

/// Run one seed. A panic in the code under test is reported as a violation
/// (with its replay command), not propagated.
pub fn run_one(opts: &SimOptions, seed: u64) -> RunReport {
    run_one_with::<Replica>(opts, seed)
}

/// Run `opts.seeds` seeds from `opts.first_seed`, one after the other
/// (results never depend on how seeds are scheduled).
pub fn run_many(opts: &SimOptions) -> SimSummary {
    run_many_with::<Replica>(opts, |_| {})
}

/// `run_many`, calling `progress` after every seed (the CLI prints failures
/// as they happen).
pub fn run_many_progress(opts: &SimOptions, progress: impl FnMut(&RunReport)) -> SimSummary {
    run_many_with::<Replica>(opts, progress)
}

/// Long-run mode (`chorus sim --minutes`): fresh seeds from `opts.first_seed`
/// until `budget` of wall-clock time is spent or one seed fails.
pub fn run_for(
    opts: &SimOptions,
    budget: std::time::Duration,
    progress: impl FnMut(&RunReport),
) -> crate::swarm::SwarmOutcome {
    crate::swarm::run_for_with::<Replica>(opts, budget, progress)
}
