//! What `chorus status` shows for a replica.

use chorus_order::ReplicaStatus;
use serde::{Deserialize, Serialize};

/// The protocol core's part, published every 100 ms.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CoreStatus {
    pub next_delivery: u64,
    pub stable_seq: u64,
    pub views: Vec<u64>,
    pub pool_len: usize,
    /// Per lane: pending requests, next free slot / limit, open slots, timer.
    #[serde(default)]
    pub lane_detail: Vec<LaneDetail>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LaneDetail {
    pub pending: usize,
    pub next_free_slot: u64,
    pub proposal_limit: u64,
    pub open_slots: usize,
    pub timer_deadline_ms: Option<u64>,
    #[serde(default)]
    pub in_flight: (usize, Option<u64>, Option<u64>),
    #[serde(default)]
    pub next_undecided: u64,
    #[serde(default)]
    pub orphaned: usize,
    /// Who proposes the next free slot (RCC: the instance primary, or the
    /// coordinating leader while the instance is stopped).
    #[serde(default)]
    pub proposer: u32,
    /// RCC: the round a stopped instance resumes at.
    #[serde(default)]
    pub stopped_until: Option<u64>,
    /// The lane is in a view change (RCC: its FAILURE is out, no stop yet).
    #[serde(default)]
    pub view_changing: bool,
    /// The current view's new-view primary (RCC: the coordinating leader).
    #[serde(default)]
    pub new_view_primary: u32,
    /// sarek: the next slot of this partition's delivery stream.
    #[serde(default)]
    pub stream_next: Option<u64>,
}

impl CoreStatus {
    pub fn from_replica(s: &ReplicaStatus) -> CoreStatus {
        let mut c = CoreStatus {
            next_delivery: s.next_delivery.0,
            stable_seq: s.stable_seq.0,
            views: s.views.iter().map(|v| v.0).collect(),
            pool_len: s.pool_len,
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
        };
        for (d, changing) in c.lane_detail.iter_mut().zip(&s.view_changing) {
            d.view_changing = *changing;
        }
        c
    }
}

/// The whole report, sent as JSON in `ClientMsg::StatusReport`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StatusReport {
    pub replica: u32,
    pub mode: String,
    pub lanes: u32,
    pub core: CoreStatus,
    /// Every position below this has been executed.
    pub executed_seq: u64,
    /// Digest of the application state and client table at `executed_seq`.
    pub state_digest: String,
    pub executed_requests: u64,
    pub peer_connections: i64,
    pub client_connections: i64,
}
