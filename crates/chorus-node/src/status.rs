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
    /// View changes this replica started, new views it installed, and
    /// snapshots it installed from peers (`Counters`).
    #[serde(default)]
    pub view_changes: u64,
    #[serde(default)]
    pub new_views: u64,
    #[serde(default)]
    pub state_transfers: u64,
    /// Checkpoints at which this replica's state digest disagreed with the
    /// stable certificate (issue 17: a diverged executor).
    #[serde(default)]
    pub state_divergences: u64,
    /// `dispel`: live epochs, pipeline depth, binary-consensus rounds.
    #[serde(default)]
    pub dispel: Option<DispelDetail>,
}

/// `dispel` (Dispel §4): where the DBFT epochs stand.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DispelDetail {
    /// First epoch not yet delivered.
    pub next_epoch: u64,
    /// The epoch this replica would spawn next.
    pub next_spawn: u64,
    /// Epochs joined and not yet delivered.
    pub pipeline_depth: u64,
    /// Live epochs: (epoch, joined, binary instances decided, highest round).
    pub epochs: Vec<(u64, bool, usize, u32)>,
    /// Recently decided epochs and the highest round their instances needed.
    pub decided_rounds: Vec<(u64, u32)>,
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

impl DispelDetail {
    pub fn from_status(d: &chorus_order::DispelStatus) -> DispelDetail {
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
}

impl CoreStatus {
    pub fn from_replica(s: &ReplicaStatus) -> CoreStatus {
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
    /// Requests this replica admitted and replied to, and their summed
    /// admission-to-reply time in µs (the dashboard's latency).
    #[serde(default)]
    pub replied_timed: u64,
    #[serde(default)]
    pub replied_timed_us: u64,
    /// Requests refused as busy (pool full).
    #[serde(default)]
    pub busy_replies: u64,
}
