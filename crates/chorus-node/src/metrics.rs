//! Prometheus metrics of a replica (issue 14 item 2). Every metric is listed,
//! with its meaning and source, in `docs/metrics.md`; the HTTP endpoint that
//! serves them is `metrics_http`.

use crate::latency::Latency;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

pub use crate::metrics_http::{serve, serve_on, METRICS_CONNS_MAX};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LaneLabel {
    pub lane: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabel {
    pub cause: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabel {
    pub stage: &'static str,
}

/// The request latency stages (`request_latency_seconds{stage}`).
pub mod stage {
    /// A request verified at a pillar until the core delivered its batch.
    pub const ADMISSION_TO_DECISION: &str = "admission_to_decision";
    /// The batch delivered until the executor returned the request's result.
    pub const DECISION_TO_EXECUTION: &str = "decision_to_execution";
    /// The result returned until the reply was handed to the client's pillar.
    pub const EXECUTION_TO_REPLY: &str = "execution_to_reply";
    /// The whole way through this replica.
    pub const ADMISSION_TO_REPLY: &str = "admission_to_reply";
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 50 µs .. ~1.6 s: a LAN request takes about a millisecond; a view
    // change holds requests for the view-change timeout (seconds).
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

/// Every metric a replica exports. Cheap to clone (all `Arc` inside).
#[derive(Clone)]
pub struct Metrics {
    pub requests_received: Counter,
    pub requests_rejected: Family<ReasonLabel, Counter>,
    pub messages_in: Family<KindLabel, Counter>,
    /// Peer signatures a pillar verified ahead of the core (`pre_check`).
    pub signatures_pre_verified: Counter,
    /// Lane groups whose consensus runs on their pillars' threads
    /// (`lane_split.rs`; 0 when every lane runs on the core).
    pub lane_groups_on_pillars: Gauge,
    /// Verified client requests a pillar handed to the lane group of
    /// another pillar (lanes on pillars): in cop 0 while each client is
    /// served by its owner lane's pillar (`client_accept.rs`); in sarek a
    /// request goes to its partition's pillar, wherever it was read.
    pub requests_to_other_pillars: Counter,
    /// `sarek`: cross-partition requests the executor held in one partition
    /// while another's copy stayed missing for a status interval, handed
    /// on again (`Executor::missing_copies`).
    pub sarek_missing_copies: Counter,
    /// `sarek` hand-ons of a request to another partition's group dropped
    /// because that group had fallen behind (`core_thread::ToGroups`).
    pub hub_messages_dropped: Counter,
    pub messages_out: Counter,
    pub frames_dropped: Family<ReasonLabel, Counter>,
    pub delivered_batches: Counter,
    pub executed_requests: Counter,
    pub replies_sent: Counter,
    /// Executions of `FEW_REPLIES` requests this replica was not designated
    /// to answer (`chorus_core::reply_fanout`).
    pub replies_left_to_others: Counter,
    pub persisted_records: Counter,
    pub next_delivery: Gauge,
    pub stable_checkpoint: Gauge,
    /// Checkpoints whose stable certificate disagreed with our state digest.
    pub state_divergences: Gauge,
    pub client_connections: Gauge,
    pub peer_connections: Gauge,
    // Per lane, from the core's `ReplicaStatus` (`metrics_status`).
    pub lane_view: Family<LaneLabel, Gauge>,
    pub lane_view_changing: Family<LaneLabel, Gauge>,
    pub lane_next_undecided_slot: Family<LaneLabel, Gauge>,
    pub lane_decided_slots: Family<LaneLabel, Counter>,
    pub lane_proposals: Family<LaneLabel, Counter>,
    pub lane_view_changes: Family<LaneLabel, Counter>,
    pub lane_pending_requests: Family<LaneLabel, Gauge>,
    pub lane_proposer: Family<LaneLabel, Gauge>,
    // The replica as a whole.
    pub executed_position: Gauge,
    pub view_changes: Family<CauseLabel, Counter>,
    pub new_views: Counter,
    pub checkpoints_stable: Counter,
    pub state_transfers: Counter,
    pub dispel_standins: Counter,
    pub held_for_vouchers: Counter,
    pub clients_proven_partial: Counter,
    pub voided_requests_dropped: Counter,
    pub peer_messages_rejected: Family<ReasonLabel, Counter>,
    pub pool_requests: Gauge,
    pub busy_replies: Counter,
    /// Leader-first clients' view questions answered (`ClientMsg::ViewQuery`).
    pub view_queries: Counter,
    pub request_latency_seconds: HistogramFamily<StageLabel>,
    pub storage_bytes: Gauge,
    pub storage_sync_seconds: Histogram,
    pub core_heartbeat_seconds: Gauge<f64, AtomicU64>,
    pub process_resident_memory_bytes: Gauge,
    pub process_cpu_seconds: Counter<f64, AtomicU64>,
    /// Admission times of requests in flight (`latency`), not exported.
    pub latency: Arc<Latency>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests_received: Counter::default(),
            requests_rejected: Family::default(),
            messages_in: Family::default(),
            signatures_pre_verified: Counter::default(),
            lane_groups_on_pillars: Gauge::default(),
            requests_to_other_pillars: Counter::default(),
            sarek_missing_copies: Counter::default(),
            hub_messages_dropped: Counter::default(),
            messages_out: Counter::default(),
            frames_dropped: Family::default(),
            delivered_batches: Counter::default(),
            executed_requests: Counter::default(),
            replies_sent: Counter::default(),
            replies_left_to_others: Counter::default(),
            persisted_records: Counter::default(),
            next_delivery: Gauge::default(),
            stable_checkpoint: Gauge::default(),
            state_divergences: Gauge::default(),
            client_connections: Gauge::default(),
            peer_connections: Gauge::default(),
            lane_view: Family::default(),
            lane_view_changing: Family::default(),
            lane_next_undecided_slot: Family::default(),
            lane_decided_slots: Family::default(),
            lane_proposals: Family::default(),
            lane_view_changes: Family::default(),
            lane_pending_requests: Family::default(),
            lane_proposer: Family::default(),
            executed_position: Gauge::default(),
            view_changes: Family::default(),
            new_views: Counter::default(),
            checkpoints_stable: Counter::default(),
            state_transfers: Counter::default(),
            dispel_standins: Counter::default(),
            held_for_vouchers: Counter::default(),
            clients_proven_partial: Counter::default(),
            voided_requests_dropped: Counter::default(),
            peer_messages_rejected: Family::default(),
            pool_requests: Gauge::default(),
            busy_replies: Counter::default(),
            view_queries: Counter::default(),
            request_latency_seconds: Family::new_with_constructor(latency_histogram),
            storage_bytes: Gauge::default(),
            // 10 µs .. ~0.3 s: page-cache writes to a slow disk's fsync.
            storage_sync_seconds: Histogram::new(exponential_buckets(0.000_01, 2.0, 16)),
            core_heartbeat_seconds: Gauge::default(),
            process_resident_memory_bytes: Gauge::default(),
            process_cpu_seconds: Counter::default(),
            latency: Arc::default(),
        }
    }
}

impl Metrics {
    pub fn registry(&self) -> Registry {
        let mut r = Registry::with_prefix("chorus");
        macro_rules! reg {
            ($name:literal, $help:literal, $field:ident) => {
                r.register($name, $help, self.$field.clone())
            };
        }
        reg!("requests_received", "client requests received", requests_received);
        reg!(
            "requests_rejected",
            "client requests rejected, by reason",
            requests_rejected
        );
        reg!("messages_in", "replica messages received, by kind", messages_in);
        reg!(
            "signatures_pre_verified",
            "peer signatures a pillar verified ahead of the protocol core",
            signatures_pre_verified
        );
        reg!(
            "lane_groups_on_pillars",
            "lane groups whose consensus runs on their pillars' threads",
            lane_groups_on_pillars
        );
        reg!(
            "requests_to_other_pillars",
            "client requests handed to the lane group of another pillar",
            requests_to_other_pillars
        );
        reg!(
            "sarek_missing_copies",
            "cross-partition requests whose other partition's copy stayed missing, handed on again",
            sarek_missing_copies
        );
        reg!(
            "hub_messages_dropped",
            "requests handed on to a partition's lane group, dropped as that group fell behind",
            hub_messages_dropped
        );
        reg!("messages_out", "replica messages sent", messages_out);
        reg!("frames_dropped", "frames dropped, by reason", frames_dropped);
        reg!(
            "delivered_batches",
            "batches delivered in order",
            delivered_batches
        );
        reg!("executed_requests", "requests executed", executed_requests);
        reg!("replies_sent", "replies sent to clients", replies_sent);
        reg!(
            "replies_left_to_others",
            "executed requests whose client asked other replicas for the reply (few replies)",
            replies_left_to_others
        );
        reg!(
            "persisted_records",
            "records written to storage",
            persisted_records
        );
        reg!("next_delivery", "next global position to deliver", next_delivery);
        reg!(
            "stable_checkpoint",
            "last stable checkpoint position",
            stable_checkpoint
        );
        reg!(
            "state_divergences",
            "checkpoints whose stable certificate disagreed with this replica's state digest",
            state_divergences
        );
        reg!(
            "client_connections",
            "open client connections",
            client_connections
        );
        reg!("peer_connections", "open replica connections", peer_connections);
        reg!(
            "lane_view",
            "the lane's current view (the target view while changing)",
            lane_view
        );
        reg!(
            "lane_view_changing",
            "1 while the lane is in a view change",
            lane_view_changing
        );
        reg!(
            "lane_next_undecided_slot",
            "the lane's first undecided slot",
            lane_next_undecided_slot
        );
        reg!(
            "lane_decided_slots",
            "slots this replica decided in the lane",
            lane_decided_slots
        );
        reg!(
            "lane_proposals",
            "pre-prepares this replica sent as the lane's leader",
            lane_proposals
        );
        reg!(
            "lane_view_changes",
            "view changes this replica started in the lane",
            lane_view_changes
        );
        reg!(
            "lane_pending_requests",
            "requests waiting to be proposed in the lane",
            lane_pending_requests
        );
        reg!(
            "lane_proposer",
            "replica that proposes the lane's next slot",
            lane_proposer
        );
        reg!(
            "executed_position",
            "every position below this has been executed",
            executed_position
        );
        reg!(
            "view_changes",
            "view changes this replica started, by cause",
            view_changes
        );
        reg!("new_views", "new views installed", new_views);
        reg!(
            "checkpoints_stable",
            "checkpoints that became stable",
            checkpoints_stable
        );
        reg!(
            "state_transfers",
            "snapshots installed from peers",
            state_transfers
        );
        reg!(
            "dispel_standins",
            "dispel proposers judged silent (requests rescued), their clients handed to stand-in lanes",
            dispel_standins
        );
        reg!(
            "held_for_vouchers",
            "pre-prepares held until f+1 replicas vouched for a request whose MAC failed here",
            held_for_vouchers
        );
        reg!(
            "clients_proven_partial",
            "clients refused after f+1 replicas reported their MAC vectors partial",
            clients_proven_partial
        );
        reg!(
            "voided_requests_dropped",
            "dispel: MAC-vector requests reported unverifiable that we stopped proposing after our proposals of them kept being decided without them",
            voided_requests_dropped
        );
        reg!(
            "peer_messages_rejected",
            "peer messages dropped by the protocol, by reason",
            peer_messages_rejected
        );
        reg!("pool_requests", "client requests held in the pool", pool_requests);
        reg!(
            "busy_replies",
            "requests refused as busy (pool full)",
            busy_replies
        );
        reg!(
            "view_queries",
            "view questions of leader-first clients answered",
            view_queries
        );
        reg!(
            "request_latency_seconds",
            "request latency through this replica, by stage",
            request_latency_seconds
        );
        reg!(
            "storage_bytes",
            "size of the replica's database file",
            storage_bytes
        );
        reg!(
            "storage_sync_seconds",
            "time of each storage sync (fsync per policy)",
            storage_sync_seconds
        );
        reg!(
            "core_heartbeat_seconds",
            "unix time the protocol core last published its status",
            core_heartbeat_seconds
        );
        reg!(
            "process_resident_memory_bytes",
            "resident memory of the replica process",
            process_resident_memory_bytes
        );
        reg!(
            "process_cpu_seconds",
            "CPU time (user + system) of the replica process",
            process_cpu_seconds
        );
        r
    }

    pub fn reject(&self, reason: &str) {
        self.requests_rejected
            .get_or_create(&ReasonLabel {
                reason: reason.into(),
            })
            .inc();
    }

    pub fn drop_frame(&self, reason: &str) {
        self.frames_dropped
            .get_or_create(&ReasonLabel {
                reason: reason.into(),
            })
            .inc();
    }

    /// OpenMetrics 1.0 text, as `prometheus-client` encodes it.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry());
        out
    }
}

/// Raise a counter that mirrors a monotonic total kept elsewhere (the sans-IO
/// replica's `Counters`) to `total`. Never lowers it: a counter only grows.
pub fn advance(c: &Counter, total: u64) {
    let cur = c.get();
    if total > cur {
        c.inc_by(total - cur);
    }
}
