//! What `chorus status` shows for a replica: the report a replica sends in
//! `ClientMsg::StatusReport` (JSON), typed so that clients can read it
//! without the replica crate (issue 17: a typed `ClusterStatus`).

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
    /// Timed requests (one in 8, `chorus_node::latency::sampled`) this
    /// replica admitted and replied to, and their summed admission-to-reply
    /// time in µs (the dashboard's mean latency).
    #[serde(default)]
    pub replied_timed: u64,
    #[serde(default)]
    pub replied_timed_us: u64,
    /// Requests refused as busy (pool full).
    #[serde(default)]
    pub busy_replies: u64,
    /// `sarek`: each partition's schedule in the executor.
    #[serde(default)]
    pub partitions: Vec<PartitionExecDetail>,
}

/// `sarek`: one partition's schedule in the partitioned executor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionExecDetail {
    /// Sub-requests waiting (or running) in the schedule.
    pub pending: usize,
    /// What its head does: `idle`, `runnable`, `exec-waits-for-syncs` (a
    /// CROSS-BORDER-EXEC whose SYNCs do not all head their schedules yet),
    /// `sync-waits-for-exec`, `suspended` (waiting for its re-prediction).
    pub head: String,
    /// Stream entries held back behind a re-prediction SYNC (SAREK §IV-D).
    pub held_back: usize,
}
