//! What `chorus status` shows for a replica: the report types live in
//! `chorus_core::status_report` (clients read them too); here, how the
//! protocol core's status becomes one.

pub use chorus_core::status_report::{CoreStatus, DispelDetail, LaneDetail, StatusReport};
use chorus_order::ReplicaStatus;

/// The status report's view of the DBFT epochs (bounded).
pub fn dispel_detail(d: &chorus_order::DispelStatus) -> DispelDetail {
    // Bounded: the last few decided epochs are enough to read the rounds.
    let skip = d.decided_rounds.len().saturating_sub(16);
    DispelDetail {
        next_epoch: d.next_epoch,
        next_spawn: d.next_spawn,
        pipeline_depth: d.pipeline_depth,
        epochs: d
            .epochs
            .iter()
            .map(|e| (e.epoch, e.joined, e.bits_decided, e.max_round))
            .collect(),
        decided_rounds: d.decided_rounds.iter().skip(skip).copied().collect(),
    }
}

/// The status report's view of the protocol core.
pub fn core_status(s: &ReplicaStatus) -> CoreStatus {
    let mut c = CoreStatus {
        next_delivery: s.next_delivery.0,
        stable_seq: s.stable_seq.0,
        views: s.views.iter().map(|v| v.0).collect(),
        pool_len: s.pool_len,
        view_changes: s.counters.view_changes,
        new_views: s.counters.new_views,
        state_transfers: s.counters.state_transfers,
        state_divergences: s.state_divergences,
        lane_detail: s
            .lanes
            .iter()
            .map(|l| LaneDetail {
                pending: l.pending,
                next_free_slot: l.next_free_slot.0,
                proposal_limit: l.proposal_limit.0,
                open_slots: l.open_slots,
                timer_deadline_ms: l.timer_deadline,
                in_flight: (
                    l.in_flight.0,
                    l.in_flight.1.map(|s| s.0),
                    l.in_flight.2.map(|s| s.0),
                ),
                next_undecided: l.next_undecided.0,
                orphaned: l.orphaned,
                proposer: l.proposer.0,
                stopped_until: l.stopped_until.map(|s| s.0),
                view_changing: false,
                new_view_primary: l.new_view_primary.0,
                stream_next: l.stream_next.map(|s| s.0),
            })
            .collect(),
        dispel: None,
    };
    for (d, changing) in c.lane_detail.iter_mut().zip(&s.view_changing) {
        d.view_changing = *changing;
    }
    c
}
