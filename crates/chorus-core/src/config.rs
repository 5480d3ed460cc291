//! Cluster configuration: who the replicas and clients are, and every limit the
//! protocol honours. One TOML file per replica carries the public part; the
//! secret key lives next to it.

use crate::crypto::PublicIdentity;
use crate::ids::{Cell, ClientId, LaneId, ReplicaId, Seq, Slot, View};
use crate::quorum;
use serde::{Deserialize, Serialize};

/// The pillar whose private connections (and, with consensus in the
/// pillars, whose thread) carry lane `lane` among `pillars`: COP §4, lane l
/// on pillar l mod P. A replica message without a lane travels on pillar 0
/// (`ReplicaMsg::pillar`).
pub fn pillar_of_lane(lane: LaneId, pillars: usize) -> usize {
    lane.index() % pillars.max(1)
}

/// How cells are decided and merged (DESIGN §1). Only the modes that exist are
/// listed; `dispel` and `sarek` plug in as described in docs/modes.md.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OrderingMode {
    /// One PBFT lane.
    Pbft,
    /// COP: `pillars` lanes share one global sequence, `c -> (c mod P, c div P)`.
    #[default]
    Cop,
    /// RCC: one PBFT instance (lane) per replica, instance `i` proposed by
    /// replica `i`; rounds merged in a hash-seeded order (RCC §III, §IV).
    Rcc,
    /// Dispel: one lane per proposer (`lanes = n`), slot `e` of lane `p` is
    /// proposer `p`'s batch in epoch `e`, decided by DBFT (Dispel §3–§4).
    Dispel,
    /// SAREK: `pillars` = K partitions, one PBFT lane each with preferred
    /// leader `k mod n`; each lane is its own delivery stream (SAREK §IV-A).
    Sarek,
}

impl OrderingMode {
    pub fn name(self) -> &'static str {
        match self {
            OrderingMode::Pbft => "pbft",
            OrderingMode::Cop => "cop",
            OrderingMode::Rcc => "rcc",
            OrderingMode::Dispel => "dispel",
            OrderingMode::Sarek => "sarek",
        }
    }
}

impl std::str::FromStr for OrderingMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pbft" => Ok(OrderingMode::Pbft),
            "cop" => Ok(OrderingMode::Cop),
            "rcc" => Ok(OrderingMode::Rcc),
            "dispel" => Ok(OrderingMode::Dispel),
            "sarek" => Ok(OrderingMode::Sarek),
            other => Err(format!(
                "unknown ordering mode {other:?} (expected pbft, cop, rcc, dispel or sarek)"
            )),
        }
    }
}

/// Who leads a cell (COP §4.3.2).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum LeaderRotation {
    /// The primary of view `v` is `v mod n` for every slot. The default: a
    /// crashed backup costs nothing, a crashed primary one view change.
    #[default]
    Fixed,
    /// `l(c) = (c div P + v) mod n`: leadership rotates block-wise over slots
    /// (spreads proposing work; a crashed replica still leads every n-th slot
    /// and costs a view-change timeout each time until it recovers).
    BlockWise,
}

/// How clients authenticate requests to replicas (DESIGN §6).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ClientAuthKind {
    /// One MAC per replica, each with the client–replica pairwise key.
    #[default]
    MacVector,
    /// One Ed25519 signature every replica verifies.
    Signature,
}

/// How replicas authenticate PBFT prepares (DESIGN §6, issue 13 item 3).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PrepareAuth {
    /// Signed prepares (PBFT §4.4 with signatures): a VIEW-CHANGE carries
    /// prepared certificates of 2f signed prepares each, which every receiver
    /// can check. Costs every replica a signature per prepare it sends and
    /// 2f verifications per slot.
    #[default]
    Signature,
    /// Prepares authenticated by the channel's MAC only (Castro & Liskov,
    /// TOCS 2002 §3.2.4 / §4: the view change without certificates of
    /// prepares). A VIEW-CHANGE then carries unproven claims, "prepared"
    /// (P) and "pre-prepared" (Q), and the new-view primary re-proposes a
    /// digest only when 2f+1 view changes do not contradict it and f+1 say
    /// they pre-prepared it (`chorus_order::lane::plan`).
    Mac,
}

impl PrepareAuth {
    pub fn name(self) -> &'static str {
        match self {
            PrepareAuth::Signature => "signature",
            PrepareAuth::Mac => "mac",
        }
    }
}

impl std::str::FromStr for PrepareAuth {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "signature" => Ok(PrepareAuth::Signature),
            "mac" => Ok(PrepareAuth::Mac),
            other => Err(format!(
                "unknown prepare authentication {other:?} (expected signature or mac)"
            )),
        }
    }
}

/// The most pillars (COP) or partitions (SAREK) a cluster may have.
pub const MAX_PILLARS: u32 = 64;

/// Protocol parameters and limits. Every queue, window and message size has
/// a bound here (TigerStyle: put a limit on everything).
// Unknown keys are refused, naming the key and listing the valid ones: a
// misspelt setting (`view_chnge_timeout_ms`) silently ignored is a default
// the operator did not choose (issue 14 item 4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProtocolParams {
    pub mode: OrderingMode,
    /// COP pillars = lanes. Must be 1 in `pbft` mode. In `sarek` the number
    /// of partitions K (`--partitions`), one lane each.
    pub pillars: u32,
    pub leader_rotation: LeaderRotation,
    pub client_auth: ClientAuthKind,
    /// Signed or MAC-only prepares (`PrepareAuth`).
    pub prepare_auth: PrepareAuth,
    /// A batch is cut when it holds this many requests…
    pub batch_max_requests: u32,
    /// …or this many bytes of operations…
    pub batch_max_bytes: u32,
    /// …or when its oldest request has waited this long.
    pub batch_delay_ms: u64,
    /// Undecided proposals of its own lane above which a leader proposes
    /// only full batches; a partial batch waits for a decision and gathers
    /// the requests that arrive meanwhile (adaptive batching). Deeper keeps
    /// more cores busy, shallower makes fewer, larger slots where cores are
    /// few (docs/performance.md, BENCHMARKS.md "proposal depth").
    pub proposal_depth: u32,
    /// Slots a lane may have undecided above its low watermark (PBFT's L).
    pub window_slots: u64,
    /// Global positions between checkpoints (PBFT's K). A multiple of the lane count.
    pub checkpoint_interval: u64,
    /// Lanes may not drift more than σ slots apart (COP §4.2.1, RCC σ).
    pub max_lane_drift_slots: u64,
    /// A backup suspects the primary when a request waits this long.
    pub view_change_timeout_ms: u64,
    /// Periodic status exchange for retransmission and catch-up.
    pub status_interval_ms: u64,
    /// Largest operation a client may submit.
    pub max_op_bytes: u32,
    /// Largest frame on any connection. Replica connections admit at least the
    /// largest replica message this configuration allows (a NEW-VIEW grows
    /// with n² × window), so there this is a floor: see `Limits::from_config`
    /// and `wire_bounds`.
    pub max_frame_bytes: u32,
    /// Requests a replica holds unordered before answering "busy".
    pub pool_max_requests: u32,
    /// Requests one client may have pending in the pool.
    pub pool_max_per_client: u32,
    /// Out-of-window or future-view messages buffered per peer.
    pub future_msgs_per_peer: u32,
    /// Bytes per state-transfer chunk.
    pub state_chunk_bytes: u32,
    /// sarek: a partition led by another replica after a view change returns
    /// to its preferred leader after this many decided slots (doubling with
    /// every failed return; 0 = never). SAREK §IV-A.
    pub preferred_return_slots: u64,
    /// dispel: the outgoing link's capacity; the pipeline spawns an epoch
    /// only while we send below 5 % of it (Dispel §4.2).
    pub link_capacity_mib_s: u64,
    /// dispel: the first non-zero DBFT round timeout (round 3; it doubles
    /// every round after, DBFT P10). Rounds past 2 happen when replicas'
    /// inputs split (a late INIT); the wait must cover a few message
    /// delays, not more: 50 ms made a 4-replica LAN cluster 4.6× slower
    /// than 5 ms (docs/decisions.md, "Dispel's round timeout").
    pub dispel_round_timeout_ms: u64,
    /// A backup rejects a fresh batch whose proposer time (`Batch::time_ms`)
    /// is more than this ahead of its own wall clock (`batch-time-future`),
    /// so a leader cannot push the agreed time (`ExecContext::time_ms`) far
    /// into the future. Correct clocks must agree within it.
    pub max_clock_skew_ms: u64,
    /// Names this cluster; bound into every handshake (and so every channel)
    /// through [`ClusterConfig::cluster_tag`], so keys reused in another
    /// cluster cannot open a connection here. `chorus keygen` draws a random one.
    pub cluster_id: String,
}

impl Default for ProtocolParams {
    fn default() -> Self {
        ProtocolParams {
            mode: OrderingMode::Cop,
            pillars: 2,
            leader_rotation: LeaderRotation::Fixed,
            client_auth: ClientAuthKind::MacVector,
            prepare_auth: PrepareAuth::Signature,
            batch_max_requests: 256,
            batch_max_bytes: 1 << 20,
            batch_delay_ms: 2,
            proposal_depth: 2,
            window_slots: 256,
            checkpoint_interval: 128,
            max_lane_drift_slots: 32,
            view_change_timeout_ms: 2_000,
            status_interval_ms: 250,
            max_op_bytes: 64 * 1024,
            max_frame_bytes: 16 << 20,
            pool_max_requests: 50_000,
            pool_max_per_client: 1_024,
            future_msgs_per_peer: 256,
            state_chunk_bytes: 1 << 20,
            preferred_return_slots: 1_024,
            // Dispel §4.2: the paper's c5.xlarge measured 600 MiB/s.
            link_capacity_mib_s: 600,
            dispel_round_timeout_ms: 10,
            max_clock_skew_ms: 5_000,
            cluster_id: String::new(),
        }
    }
}

/// One replica as every other party knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaInfo {
    pub id: ReplicaId,
    pub identity: PublicIdentity,
    /// Host name or IP the replica listens on.
    pub host: String,
    /// Pillar `p` accepts replica connections on `peer_base_port + p` (COP: private
    /// connections per pillar).
    pub peer_base_port: u16,
    /// Clients connect here; connections are spread over pillars.
    pub client_port: u16,
    /// Prometheus metrics endpoint (0 = disabled).
    #[serde(default)]
    pub metrics_port: u16,
}

/// One client identity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientInfo {
    pub id: ClientId,
    pub identity: PublicIdentity,
}

/// Everything all parties agree on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    pub params: ProtocolParams,
    pub replicas: Vec<ReplicaInfo>,
    pub clients: Vec<ClientInfo>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("need at least 4 replicas (n = 3f+1 with f >= 1) or exactly 1, got {0}")]
    TooFewReplicas(usize),
    #[error("replica ids must be 0..n in order; position {0} has id {1}")]
    ReplicaIdOrder(usize, ReplicaId),
    #[error("duplicate client id {0}")]
    DuplicateClient(ClientId),
    #[error("pbft mode needs exactly 1 pillar, got {0}")]
    PbftPillars(u32),
    #[error("pillars must be between 1 and 64, got {0}")]
    Pillars(u32),
    #[error("parameter {0} must be positive")]
    Zero(&'static str),
    #[error("checkpoint_interval {0} must be a multiple of the lane count {1}")]
    CheckpointInterval(u64, u32),
    #[error("window_slots {window} must exceed checkpoint_interval / lanes = {per_lane} so a lane never stalls before a checkpoint")]
    Window { window: u64, per_lane: u64 },
    #[error("max_op_bytes {0} must fit in max_frame_bytes {1}")]
    OpVsFrame(u32, u32),
    #[error("sarek: max_op_bytes {0} cannot hold a re-prediction certificate ({1} bytes)")]
    OpVsRePrediction(u32, usize),
    #[error("the largest replica message of this configuration ({needed} bytes) exceeds the frame cap of {cap} bytes: lower n, window_slots, batch or chunk sizes")]
    FrameBound { needed: u64, cap: u64 },
    /// One key listed for two identities: whoever holds it could log in as
    /// either (e.g. a replica's key copied into a client entry).
    #[error("{first} and {second} share a public key; every identity needs its own")]
    DuplicateKey { first: String, second: String },
}

impl ClusterConfig {
    pub fn n(&self) -> usize {
        self.replicas.len()
    }
    pub fn f(&self) -> usize {
        quorum::max_faulty(self.n())
    }
    pub fn quorum(&self) -> usize {
        quorum::quorum(self.n())
    }
    pub fn weak_quorum(&self) -> usize {
        quorum::weak_quorum(self.n())
    }

    /// The pillar that carries lane `lane` ([`pillar_of_lane`]).
    pub fn pillar_of_lane(&self, lane: LaneId) -> usize {
        pillar_of_lane(lane, self.params.pillars as usize)
    }

    pub fn lanes(&self) -> u32 {
        match self.params.mode {
            OrderingMode::Pbft => 1,
            OrderingMode::Cop | OrderingMode::Sarek => self.params.pillars,
            // RCC §III-B: m = n instances, one per replica.
            OrderingMode::Rcc => self.n() as u32,
            // Dispel §3: every replica proposes in every epoch, one lane each.
            OrderingMode::Dispel => self.n() as u32,
        }
    }

    /// The replica that proposes every fresh slot of an RCC instance (RCC
    /// §III-B: instance `i` is coordinated by replica `i`).
    pub fn instance_primary(&self, lane: LaneId) -> ReplicaId {
        ReplicaId(lane.0 % self.n().max(1) as u32)
    }

    /// COP §4.1: global sequence `c` is decided in lane `c mod P`, slot `c div P`.
    /// In `rcc` this is only a key (storage, pruning): round `c div m` is
    /// delivered in a permuted lane order (`chorus-order`'s `merger`), so a
    /// delivered position's lane is not `c mod m`, but its slot is `c div m`.
    pub fn cell_of(&self, seq: Seq) -> Cell {
        let p = self.lanes() as u64;
        Cell {
            lane: LaneId((seq.0 % p) as u32),
            slot: Slot(seq.0 / p),
        }
    }

    pub fn seq_of(&self, cell: Cell) -> Seq {
        Seq(cell.slot.0 * self.lanes() as u64 + cell.lane.0 as u64)
    }

    /// The leader of a cell in a view (COP §4.3.2). In `rcc` the instance's
    /// own primary in every view: a failed instance is stopped, not handed to
    /// another primary (RCC §III-C; the stop's no-op slots are assigned in
    /// `chorus-order`'s `roles`).
    pub fn leader(&self, cell: Cell, view: View) -> ReplicaId {
        let n = self.n() as u64;
        if matches!(self.params.mode, OrderingMode::Rcc | OrderingMode::Dispel) {
            return self.instance_primary(cell.lane);
        }
        if self.params.mode == OrderingMode::Sarek {
            return self.preferred_leader(cell.lane, view);
        }
        match self.params.leader_rotation {
            LeaderRotation::Fixed => ReplicaId((view.0 % n) as u32),
            LeaderRotation::BlockWise => ReplicaId(((cell.slot.0 + view.0) % n) as u32),
        }
    }

    /// SAREK §IV-A: partition `k`'s preferred leader is `k mod n`; view `v`
    /// of its lane is led by `(k + v) mod n`, so a view change moves one
    /// partition's leadership without touching the others'.
    pub fn preferred_leader(&self, lane: LaneId, view: View) -> ReplicaId {
        let n = self.n().max(1) as u64;
        ReplicaId(((lane.0 as u64 % n + view.0 % n) % n) as u32)
    }

    /// The lane that owns (proposes) a client's requests, so no request is
    /// proposed by two lanes (DESIGN §4).
    pub fn owner_lane(&self, client: ClientId) -> LaneId {
        LaneId((client.0 % self.lanes() as u64) as u32)
    }

    /// Rounds the checkpoint interval up to a multiple of the lane count (RCC
    /// has `n` lanes, so a default K need not divide): checkpoints then fall
    /// on round boundaries, where every lane's low watermark is `K / lanes`.
    pub fn fit_checkpoint_interval(&mut self) {
        let lanes = self.lanes().max(1) as u64;
        let k = self.params.checkpoint_interval.max(1);
        self.params.checkpoint_interval = k.div_ceil(lanes) * lanes;
        let per_lane = self.checkpoint_slots_per_lane();
        if self.params.window_slots <= per_lane {
            self.params.window_slots = per_lane * 2;
        }
    }

    /// Slots per lane between two checkpoints.
    pub fn checkpoint_slots_per_lane(&self) -> u64 {
        self.params.checkpoint_interval / self.lanes() as u64
    }

    pub fn replica(&self, id: ReplicaId) -> Option<&ReplicaInfo> {
        self.replicas.get(id.index())
    }

    pub fn client(&self, id: ClientId) -> Option<&ClientInfo> {
        // Clients are usually dense 0..m; fall back to a scan otherwise.
        match self.clients.get(id.0 as usize) {
            Some(c) if c.id == id => Some(c),
            _ => self.clients.iter().find(|c| c.id == id),
        }
    }

    /// What the handshake binds a channel to: the cluster id and every
    /// replica's keys, so a transcript from one cluster is meaningless in
    /// another even when they share keys or ports.
    pub fn cluster_tag(&self) -> crate::crypto::Digest {
        let mut parts: Vec<&[u8]> = vec![self.params.cluster_id.as_bytes()];
        for r in &self.replicas {
            parts.push(&r.identity.sign);
            parts.push(&r.identity.dh);
        }
        crate::crypto::Digest::of_parts("chorus cluster tag v1", &parts)
    }

    /// Every signing and DH key must belong to exactly one identity.
    fn check_distinct_keys(&self) -> Result<(), ConfigError> {
        let mut seen: std::collections::HashMap<[u8; 32], String> = std::collections::HashMap::new();
        let all = self
            .replicas
            .iter()
            .map(|r| (format!("replica {}", r.id), r.identity))
            .chain(
                self.clients
                    .iter()
                    .map(|c| (format!("client {}", c.id), c.identity)),
            );
        for (who, id) in all {
            for key in [id.sign, id.dh] {
                if let Some(first) = seen.get(&key) {
                    if *first != who {
                        return Err(ConfigError::DuplicateKey {
                            first: first.clone(),
                            second: who,
                        });
                    }
                }
                seen.insert(key, who.clone());
            }
        }
        Ok(())
    }

    pub fn replica_ids(&self) -> impl Iterator<Item = ReplicaId> {
        (0..self.n() as u32).map(ReplicaId)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let n = self.n();
        if n != 1 && n < 4 {
            return Err(ConfigError::TooFewReplicas(n));
        }
        for (i, r) in self.replicas.iter().enumerate() {
            if r.id.index() != i {
                return Err(ConfigError::ReplicaIdOrder(i, r.id));
            }
        }
        let mut ids: Vec<_> = self.clients.iter().map(|c| c.id).collect();
        ids.sort();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(ConfigError::DuplicateClient(w[0]));
        }
        self.check_distinct_keys()?;
        let p = &self.params;
        if p.mode == OrderingMode::Pbft && p.pillars != 1 {
            return Err(ConfigError::PbftPillars(p.pillars));
        }
        if p.pillars == 0 || p.pillars > MAX_PILLARS {
            return Err(ConfigError::Pillars(p.pillars));
        }
        for (name, v) in [
            ("batch_max_requests", p.batch_max_requests as u64),
            ("batch_max_bytes", p.batch_max_bytes as u64),
            ("window_slots", p.window_slots),
            ("proposal_depth", p.proposal_depth as u64),
            ("checkpoint_interval", p.checkpoint_interval),
            ("max_lane_drift_slots", p.max_lane_drift_slots),
            ("view_change_timeout_ms", p.view_change_timeout_ms),
            ("status_interval_ms", p.status_interval_ms),
            ("max_op_bytes", p.max_op_bytes as u64),
            ("pool_max_requests", p.pool_max_requests as u64),
            ("pool_max_per_client", p.pool_max_per_client as u64),
            ("future_msgs_per_peer", p.future_msgs_per_peer as u64),
            ("state_chunk_bytes", p.state_chunk_bytes as u64),
            ("link_capacity_mib_s", p.link_capacity_mib_s),
            ("dispel_round_timeout_ms", p.dispel_round_timeout_ms),
            ("max_clock_skew_ms", p.max_clock_skew_ms),
        ] {
            if v == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        let lanes = self.lanes();
        if !p.checkpoint_interval.is_multiple_of(lanes as u64) {
            return Err(ConfigError::CheckpointInterval(p.checkpoint_interval, lanes));
        }
        let per_lane = self.checkpoint_slots_per_lane();
        if p.window_slots <= per_lane {
            return Err(ConfigError::Window {
                window: p.window_slots,
                per_lane,
            });
        }
        if p.max_op_bytes + 4096 > p.max_frame_bytes {
            return Err(ConfigError::OpVsFrame(p.max_op_bytes, p.max_frame_bytes));
        }
        if p.mode == OrderingMode::Sarek {
            // SAREK §IV-D: a certificate that does not fit is never ordered
            // and its request stays suspended.
            let cert =
                crate::reprediction::RePredictionCert::max_encoded_len(self.quorum(), self.lanes() as usize);
            if (p.max_op_bytes as usize) < cert {
                return Err(ConfigError::OpVsRePrediction(p.max_op_bytes, cert));
            }
        }
        // Frame limits are derived from the configuration; keep them bounded.
        let needed = crate::wire_bounds::WireBounds::of_config(self).largest_replica_msg();
        if needed > crate::wire_bounds::MAX_FRAME_BYTES_CAP {
            return Err(ConfigError::FrameBound {
                needed,
                cap: crate::wire_bounds::MAX_FRAME_BYTES_CAP,
            });
        }
        Ok(())
    }

    /// A deterministic configuration for tests and the simulator: identities
    /// derived from `seed`, replicas on loopback ports from `base_port`.
    pub fn for_testing(
        n: usize,
        clients: usize,
        params: ProtocolParams,
        seed: u64,
    ) -> (
        ClusterConfig,
        Vec<crate::crypto::Identity>,
        Vec<crate::crypto::Identity>,
    ) {
        use crate::crypto::Identity;
        let replica_keys: Vec<Identity> = (0..n)
            .map(|i| Identity::from_seed(format!("replica/{seed}/{i}").as_bytes()))
            .collect();
        let client_keys: Vec<Identity> = (0..clients)
            .map(|i| Identity::from_seed(format!("client/{seed}/{i}").as_bytes()))
            .collect();
        let replicas = replica_keys
            .iter()
            .enumerate()
            .map(|(i, k)| ReplicaInfo {
                id: ReplicaId(i as u32),
                identity: k.public(),
                host: "127.0.0.1".into(),
                peer_base_port: 20_000 + (i as u16) * 100,
                client_port: 20_000 + (i as u16) * 100 + 90,
                metrics_port: 0,
            })
            .collect();
        let clients = client_keys
            .iter()
            .enumerate()
            .map(|(i, k)| ClientInfo {
                id: ClientId(i as u64),
                identity: k.public(),
            })
            .collect();
        (
            ClusterConfig {
                params,
                replicas,
                clients,
            },
            replica_keys,
            client_keys,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cop(p: u32) -> ClusterConfig {
        let params = ProtocolParams {
            pillars: p,
            checkpoint_interval: 16 * p as u64,
            ..ProtocolParams::default()
        };
        ClusterConfig::for_testing(4, 2, params, 1).0
    }

    #[test]
    fn cop_maps_global_sequence_to_cells_and_back() {
        let c = cop(4);
        assert_eq!(
            c.cell_of(Seq(9)),
            Cell {
                lane: LaneId(1),
                slot: Slot(2)
            }
        );
        for s in 0..100 {
            assert_eq!(c.seq_of(c.cell_of(Seq(s))), Seq(s));
        }
    }

    #[test]
    fn blockwise_leader_rotates_per_slot_and_view() {
        let mut c = cop(4);
        c.params.leader_rotation = LeaderRotation::BlockWise;
        let cell = |l, s| Cell {
            lane: LaneId(l),
            slot: Slot(s),
        };
        // COP §4.3.2: l(c) = (c div P) mod n; all lanes share a slot's leader.
        assert_eq!(c.leader(cell(0, 0), View(0)), ReplicaId(0));
        assert_eq!(c.leader(cell(3, 0), View(0)), ReplicaId(0));
        assert_eq!(c.leader(cell(0, 1), View(0)), ReplicaId(1));
        assert_eq!(c.leader(cell(0, 5), View(0)), ReplicaId(1));
        assert_eq!(c.leader(cell(0, 1), View(1)), ReplicaId(2));
    }

    #[test]
    fn sarek_leaders_are_offset_by_partition() {
        let mut c = cop(4);
        c.params.mode = OrderingMode::Sarek;
        assert_eq!(c.lanes(), 4);
        let cell = |l| Cell {
            lane: LaneId(l),
            slot: Slot(7),
        };
        let leaders: Vec<u32> = (0..4).map(|l| c.leader(cell(l), View(0)).0).collect();
        assert_eq!(leaders, vec![0, 1, 2, 3], "partition k is led by k mod n");
        assert_eq!(c.leader(cell(3), View(1)), ReplicaId(0));
        assert_eq!(c.leader(cell(2), View(5)), ReplicaId(3));
        assert_eq!("sarek".parse::<OrderingMode>(), Ok(OrderingMode::Sarek));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn validate_rejects_bad_configs() {
        assert!(cop(4).validate().is_ok());
        let mut c = cop(4);
        c.params.checkpoint_interval = 30;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::CheckpointInterval(30, 4))
        ));
        let mut c = cop(1);
        c.params.mode = OrderingMode::Pbft;
        assert!(c.validate().is_ok());
        c.params.pillars = 2;
        assert_eq!(c.validate(), Err(ConfigError::PbftPillars(2)));
        let mut c = cop(2);
        c.replicas.truncate(3);
        assert_eq!(c.validate(), Err(ConfigError::TooFewReplicas(3)));
        // A window so large that a NEW-VIEW could not be bounded by a frame.
        let mut c = cop(2);
        c.params.window_slots = 1 << 40;
        assert!(matches!(c.validate(), Err(ConfigError::FrameBound { .. })));
    }

    #[test]
    fn validate_rejects_a_key_shared_by_two_identities() {
        let mut c = cop(2);
        assert!(c.validate().is_ok());
        // A replica's key copied into a client entry would let the replica log in as that client.
        c.clients[1].identity = c.replicas[2].identity;
        assert!(matches!(c.validate(), Err(ConfigError::DuplicateKey { .. })));
        let mut c = cop(2);
        c.replicas[3].identity.dh = c.replicas[0].identity.dh;
        assert!(matches!(c.validate(), Err(ConfigError::DuplicateKey { .. })));
    }

    #[test]
    fn cluster_tag_depends_on_cluster_id_and_replica_keys() {
        let a = cop(2);
        let mut b = a.clone();
        b.params.cluster_id = "other".into();
        assert_ne!(a.cluster_tag(), b.cluster_tag());
        let mut c = a.clone();
        c.replicas[1].identity.sign[0] ^= 1;
        assert_ne!(a.cluster_tag(), c.cluster_tag());
        assert_eq!(a.cluster_tag(), a.clone().cluster_tag());
    }

    #[test]
    fn config_roundtrips_through_toml() {
        let c = cop(2);
        let text = toml::to_string(&c).unwrap();
        let back: ClusterConfig = toml::from_str(&text).unwrap();
        assert_eq!(c, back);
    }

    /// Issue 14 item 4: a misspelt key was silently ignored (the default
    /// applied); it is refused, naming the key and listing the valid ones.
    #[test]
    fn unknown_keys_are_refused_with_the_valid_ones_listed() {
        let text = toml::to_string(&cop(2)).unwrap();
        let typo = text.replace("view_change_timeout_ms", "view_chnge_timeout_ms");
        let e = toml::from_str::<ClusterConfig>(&typo).unwrap_err().to_string();
        assert!(e.contains("view_chnge_timeout_ms"), "{e}");
        assert!(e.contains("view_change_timeout_ms"), "lists the valid keys: {e}");
        assert!(e.contains("line"), "says where: {e}");
        let extra = text.replacen("client_port", "clientport = 1\nclient_port", 1);
        let e = toml::from_str::<ClusterConfig>(&extra).unwrap_err().to_string();
        assert!(e.contains("clientport"), "{e}");
        let top = format!("replica_count = 4\n{text}");
        assert!(toml::from_str::<ClusterConfig>(&top).is_err());
    }
}
