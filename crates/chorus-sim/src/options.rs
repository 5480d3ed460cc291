//! What to simulate: `SimOptions` (what the `chorus sim` command line sets)
//! and the protocol parameters derived from it.

use crate::faults::{FaultKind, FaultSet};
use chorus_apps::ServiceRegistry;
use chorus_core::{ClientAuthKind, LeaderRotation, OrderingMode, PrepareAuth, ProtocolParams, ReplicaId};
use chorus_exec::{Executor, Service};
use std::fmt;
use std::sync::Arc;

/// Builds one replica's executor around its own service instance, with the
/// client table's in-flight window (`EXEC_MAX_INFLIGHT_PER_CLIENT`).
pub type ExecutorFactory = Arc<dyn Fn(Arc<dyn Service>, u32) -> Box<dyn Executor> + Send + Sync>;

/// Which executor every replica runs.
#[derive(Clone)]
pub enum ExecutorChoice {
    /// `chorus_exec::SequentialExecutor`.
    Sequential,
    /// Any other executor (e.g. the parallel one); `name` goes into replay commands
    /// as `--executor NAME`. The simulator waits for it after every batch
    /// (`state_digest` is a barrier) and sorts its results, so worker threads
    /// cannot make a run depend on scheduling.
    Custom { name: String, factory: ExecutorFactory },
}

impl ExecutorChoice {
    pub fn name(&self) -> &str {
        match self {
            ExecutorChoice::Sequential => "sequential",
            ExecutorChoice::Custom { name, .. } => name,
        }
    }
}

impl fmt::Debug for ExecutorChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The in-flight window of the executor's client table: must exceed what a
/// simulated client keeps in flight so correct clients are never rejected.
pub const EXEC_MAX_INFLIGHT_PER_CLIENT: u32 = 64;

#[derive(Clone, Debug)]
pub struct SimOptions {
    pub mode: OrderingMode,
    /// Lanes in `cop` mode; must be 1 in `pbft` mode.
    pub pillars: u32,
    /// Replicas.
    pub n: usize,
    /// How many seeds `run_many` runs, starting at `first_seed`.
    pub seeds: u64,
    pub first_seed: u64,
    /// The fault kinds a seed may draw from.
    pub faults: FaultSet,
    /// When set, each seed enables a random non-empty subset of `faults`
    /// (swarm testing: fewer simultaneous faults reach deeper states); when
    /// clear, every kind in `faults` is active in every seed.
    pub swarm: bool,
    /// Correct clients.
    pub clients: u32,
    pub requests_per_client: u32,
    /// Requests a correct client keeps in flight.
    pub client_window: u32,
    /// Requests a replica's pool holds; small values make the pool forget
    /// ordered requests quickly and exercise admission back-pressure.
    pub pool_max_requests: u32,
    /// Byzantine replicas when a Byzantine replica kind is drawn; `None` = f.
    pub byzantine: Option<usize>,
    /// Byzantine clients when a Byzantine client kind is drawn.
    pub byzantine_clients: u32,
    /// Faults are injected in `[0, fault_window_ms)`; then the network heals,
    /// crashed replicas are back and no new fault starts.
    pub fault_window_ms: u64,
    /// Every request of a correct client must complete within this long after
    /// the later of its issue time and the end of the fault window. The issue
    /// time is when the client's pacing wanted to send it, even if its window
    /// was still full (no coordinated omission: a throughput collapse fails).
    pub liveness_timeout_ms: u64,
    /// The application every replica runs: a name in `registry` whose
    /// entry has a workload generator (built in: `kv`, `null`).
    pub service: String,
    /// The service's options (`sleep`: buckets). The simulator builds the
    /// `sleep` service with no real service time: its `sleep_us` is what
    /// the resource model charges each operation in virtual time.
    pub service_options: chorus_apps::ServiceOptions,
    /// Where `service` is looked up; applications add their own services.
    pub registry: Arc<ServiceRegistry>,
    /// Checked execution (issue 17): every operation runs inside its
    /// declared access set and an access outside it is a violation.
    pub checked_access: bool,
    /// The binary replay commands name (an application's own, which knows
    /// its services; `chorus` by default).
    pub program: String,
    pub executor: ExecutorChoice,
    /// At the end of a run every correct replica must be active in the same
    /// view of every lane (`checker_extra::view_split`).
    pub check_views: bool,
    /// At the end of a run every live correct replica must have executed as
    /// far as the furthest one (`World::lagging`): a replica left behind
    /// after the faults healed is one fault away from a stalled cluster.
    pub check_catch_up: bool,
    /// rcc: while a lane is stopped, the other lanes must keep deciding at
    /// `rcc_stats::WAIT_FREE_MIN_RATIO` of their earlier rate (off by
    /// default: with random faults the rate is too noisy to judge).
    pub check_wait_free: bool,
    /// Leader rotation in cop mode; `None`: drawn per seed.
    pub rotation: Option<LeaderRotation>,
    /// How clients authenticate requests; `None`: drawn per seed (a quarter
    /// sign). Paper-scale runs set it: at n = 100 a MAC vector is 1.6 KB per
    /// request, a signature 64 bytes.
    pub client_auth: Option<ClientAuthKind>,
    /// Signed or MAC-only PBFT prepares (`--prepare-auth`); the default
    /// signs, as the runtime's default does.
    pub prepare_auth: PrepareAuth,
    /// Correct clients send a new request to their lane's primary alone
    /// (`chorus_core::first_contact`, the client library's
    /// `ClientOptions::leader_first`; pbft, rcc, and cop with the fixed rotation).
    /// On by default, as in the client library; the regression seeds found
    /// before it was pin it off (`tests/regressions.rs`).
    pub leader_first: bool,
    /// Correct clients ask only f + 1 designated replicas for replies while
    /// every replica answers (`chorus_core::reply_fanout`, the client
    /// library's `ClientOptions::few_replies`). On by default; pinned off
    /// with `leader_first` for the regression seeds found before it.
    pub few_replies: bool,
    /// sarek, test-only (feature `skip-sync-wait`): correct replicas'
    /// executors run a CROSS-BORDER-EXEC without waiting for its SYNCs, so
    /// the serial-order checker can be shown to catch it.
    pub skip_sync_wait: bool,
    /// Every replica-to-replica link's one-way base latency (a WAN profile,
    /// e.g. 50 ms for Dispel §5's pipelining experiment); `None`: drawn per
    /// link between 0.5 and 5 ms. Clients keep their LAN links.
    pub latency_ms: Option<u64>,
    /// The resource model (issue 15): CPU cores and NIC bandwidth charged in
    /// virtual time; `None` (the default): protocol steps cost nothing.
    pub perf: Option<crate::perf::PerfModel>,
    /// dispel: concurrent epochs allowed (Dispel §4.3's memory bound,
    /// `max_lane_drift_slots`); `None`: the simulator's default (8).
    pub epochs: Option<u64>,
    /// kv: this fraction of the requests are two-key `PutAll`s across
    /// SAREK partitions (SAREK §V; `partitions` of sarek, else 4), the rest
    /// single-key operations, in every mode; `None`: the service's workload
    /// (sarek: a third two-key).
    pub cross_partition: Option<f64>,
    /// `--perf`: requests per batch at most (`batch_max_requests`; the
    /// byte bound grows with it); `None`: the runtime's default (256).
    pub batch_max: Option<u32>,
    /// `--perf`: this replica crashes at this virtual time (ms) and stays
    /// down (Dispel §5.6: one replica killed, throughput before and after).
    pub perf_crash: Option<(ReplicaId, u64)>,
    /// Run each replica's hub and lane groups apart (docs/lane-split.md
    /// step B2): the messages between them arrive this many µs later, plus
    /// a seeded jitter of up to `pillar_jitter_us`, in order per channel, as
    /// between a replica's threads. `None` (the default): they run as one.
    pub pillar_hop_us: Option<u64>,
    pub pillar_jitter_us: u64,
    /// `sarek`: answer the replicas' `Action::FindMissingCopies` (true, as
    /// the runtime does). False only to measure what the hand-ons of
    /// missing copies are worth (`tests/cluster_restart.rs`).
    pub find_missing_copies: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            mode: OrderingMode::Cop,
            pillars: 4,
            n: 4,
            seeds: 1,
            first_seed: 0,
            faults: FaultSet::all(),
            swarm: true,
            clients: 3,
            requests_per_client: 12,
            client_window: 3,
            pool_max_requests: 512,
            byzantine: None,
            byzantine_clients: 2,
            fault_window_ms: 3_000,
            liveness_timeout_ms: 30_000,
            service: "kv".into(),
            service_options: chorus_apps::ServiceOptions::default(),
            registry: Arc::new(ServiceRegistry::builtin()),
            checked_access: true,
            program: "chorus".into(),
            executor: ExecutorChoice::Sequential,
            check_views: true,
            check_catch_up: true,
            check_wait_free: false,
            rotation: None,
            client_auth: None,
            prepare_auth: PrepareAuth::Signature,
            leader_first: true,
            few_replies: true,
            skip_sync_wait: false,
            latency_ms: None,
            perf: None,
            epochs: None,
            cross_partition: None,
            batch_max: None,
            perf_crash: None,
            pillar_hop_us: None,
            pillar_jitter_us: 0,
            find_missing_copies: true,
        }
    }
}

impl SimOptions {
    /// Options for `mode` with its usual lane count (pbft: 1, cop: `pillars`).
    pub fn new(mode: OrderingMode, pillars: u32, n: usize) -> SimOptions {
        SimOptions {
            mode,
            pillars: if mode == OrderingMode::Pbft { 1 } else { pillars },
            n,
            ..SimOptions::default()
        }
    }

    pub fn with_faults(mut self, faults: FaultSet) -> SimOptions {
        self.faults = faults;
        self
    }

    pub fn with_seeds(mut self, first_seed: u64, seeds: u64) -> SimOptions {
        self.first_seed = first_seed;
        self.seeds = seeds;
        self
    }

    pub fn f(&self) -> usize {
        chorus_core::quorum::max_faulty(self.n)
    }

    /// Byzantine replicas a seed gets when it draws a Byzantine replica kind.
    pub fn byzantine_replicas(&self) -> usize {
        self.byzantine.unwrap_or(self.f()).min(self.n)
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.n != 1 && self.n < 4 {
            return Err(format!("n must be 1 or at least 4, got {}", self.n));
        }
        // Paper scale: RCC runs up to 91 replicas, Dispel up to 128 (issue 15).
        if self.n > 128 {
            return Err(format!("n must be at most 128, got {}", self.n));
        }
        if self.mode == OrderingMode::Pbft && self.pillars != 1 {
            return Err("pbft mode runs exactly 1 pillar".into());
        }
        if self.pillars == 0 || self.pillars > 16 {
            return Err(format!("pillars must be 1..=16, got {}", self.pillars));
        }
        if self.clients == 0 || self.clients > 64 {
            return Err(format!("clients must be 1..=64, got {}", self.clients));
        }
        // 64 × 100 000: the issue-15 run of a million requests fits.
        if self.requests_per_client == 0 || self.requests_per_client > 100_000 {
            return Err("requests per client must be 1..=100000".into());
        }
        if self.client_window == 0 || self.client_window >= EXEC_MAX_INFLIGHT_PER_CLIENT {
            return Err(format!("client window must be 1..{EXEC_MAX_INFLIGHT_PER_CLIENT}"));
        }
        if self.byzantine_clients > 16 {
            return Err("at most 16 Byzantine clients".into());
        }
        if self.byzantine_replicas() > self.n.saturating_sub(2) {
            return Err("at least two replicas must stay correct".into());
        }
        if self.perf.is_some() && !self.faults.is_empty() {
            return Err("--perf measures a healthy cluster: use --faults none".into());
        }
        if self.latency_ms.is_some_and(|l| l > 1_000) {
            return Err("latency must be at most 1000 ms".into());
        }
        if let Some(e) = self.epochs {
            if self.mode != OrderingMode::Dispel {
                return Err("--epochs is for --mode dispel".into());
            }
            if e == 0 || e > 64 {
                return Err(format!("epochs must be 1..=64, got {e}"));
            }
        }
        if let Some(c) = self.cross_partition {
            if !(0.0..=1.0).contains(&c) {
                return Err(format!("--cross-partition must be between 0 and 1, got {c}"));
            }
            if self.service != "kv" {
                return Err("--cross-partition is for --service kv".into());
            }
        }
        if let Some(b) = self.batch_max {
            if self.perf.is_none() {
                return Err("--batch-max is for --perf runs".into());
            }
            if b == 0 || b > 4096 {
                return Err(format!("batch-max must be 1..=4096, got {b}"));
            }
        }
        if let Some((r, _)) = self.perf_crash {
            if self.perf.is_none() {
                return Err("--perf-crash is for --perf runs".into());
            }
            if r.index() >= self.n {
                return Err(format!("--perf-crash: replica {} of n = {}", r.0, self.n));
            }
        }
        if self.fault_window_ms > 600_000
            || self.liveness_timeout_ms == 0
            || self.liveness_timeout_ms > 600_000
        {
            return Err(
                "fault window and liveness timeout must be at most 600 s (and the timeout positive)".into(),
            );
        }
        if self.registry.get(&self.service)?.workload.is_none() {
            return Err(format!(
                "service {:?} has no workload generator to simulate it with",
                self.service
            ));
        }
        Ok(())
    }

    /// `mode=cop pillars=4 n=4 f=1 faults=all ...`: what a summary was run with.
    pub fn describe(&self) -> String {
        format!(
            "mode={} {} n={} f={} faults={}{} clients={} requests={} window={} pool={} fault-window={}ms liveness={}ms byzantine={} byzantine-clients={} executor={}",
            mode_name(self.mode),
            // What the lane count means in each mode (rcc and dispel: one
            // lane per replica, whatever --pillars says).
            match self.mode {
                OrderingMode::Rcc => format!("instances={}", self.n),
                OrderingMode::Dispel => format!("proposers={}", self.n),
                OrderingMode::Sarek => format!("partitions={}", self.pillars),
                _ => format!("pillars={}", self.pillars),
            },
            self.n,
            self.f(),
            self.faults,
            if self.swarm { "" } else { " (no swarm)" },
            self.clients,
            self.requests_per_client,
            self.client_window,
            self.pool_max_requests,
            self.fault_window_ms,
            self.liveness_timeout_ms,
            if self.allows_byzantine_replicas() {
                self.byzantine_replicas()
            } else {
                0
            },
            if self.faults.iter().any(FaultKind::is_byzantine_client) {
                self.byzantine_clients
            } else {
                0
            },
            if self.mode == OrderingMode::Sarek {
                "partitioned"
            } else {
                self.executor.name()
            },
        )
    }

    /// The one-line command that replays `seed` exactly.
    pub fn replay_command(&self, seed: u64) -> String {
        let d = SimOptions::default();
        let mut cmd = format!(
            "{} sim --mode {} --pillars {} --n {} --faults {} --seed {seed} --seeds 1",
            self.program,
            mode_name(self.mode),
            self.pillars,
            self.n,
            self.faults
        );
        let mut flag = |name: &str, value: String, default: String| {
            if value != default {
                cmd.push_str(&format!(" --{name} {value}"));
            }
        };
        flag("clients", self.clients.to_string(), d.clients.to_string());
        flag(
            "requests",
            self.requests_per_client.to_string(),
            d.requests_per_client.to_string(),
        );
        flag(
            "window",
            self.client_window.to_string(),
            d.client_window.to_string(),
        );
        flag(
            "pool",
            self.pool_max_requests.to_string(),
            d.pool_max_requests.to_string(),
        );
        flag(
            "byzantine",
            self.byzantine.map_or("f".into(), |b| b.to_string()),
            "f".into(),
        );
        flag(
            "byzantine-clients",
            self.byzantine_clients.to_string(),
            d.byzantine_clients.to_string(),
        );
        flag(
            "fault-window-ms",
            self.fault_window_ms.to_string(),
            d.fault_window_ms.to_string(),
        );
        flag(
            "liveness-ms",
            self.liveness_timeout_ms.to_string(),
            d.liveness_timeout_ms.to_string(),
        );
        flag("service", self.service.clone(), d.service.clone());
        flag(
            "executor",
            self.executor.name().to_string(),
            d.executor.name().to_string(),
        );
        flag("rotation", rotation_name(self.rotation).into(), "random".into());
        flag(
            "client-auth",
            client_auth_name(self.client_auth).into(),
            "random".into(),
        );
        flag(
            "prepare-auth",
            self.prepare_auth.name().into(),
            d.prepare_auth.name().into(),
        );
        flag(
            "leader-first",
            self.leader_first.to_string(),
            d.leader_first.to_string(),
        );
        flag(
            "few-replies",
            self.few_replies.to_string(),
            d.few_replies.to_string(),
        );
        if !self.swarm {
            cmd.push_str(" --no-swarm");
        }
        if !self.check_views {
            cmd.push_str(" --no-view-check");
        }
        if !self.check_catch_up {
            cmd.push_str(" --no-catch-up-check");
        }
        if self.check_wait_free {
            cmd.push_str(" --wait-free-check");
        }
        if cfg!(feature = "weak-quorum") {
            cmd.push_str("   # build with --features chorus-sim/weak-quorum");
        }
        cmd
    }

    /// Set one option from its command-line flag (without the `--`), as
    /// `replay_command` writes them: `mode`, `pillars`, `n`, `faults`, `seed`
    /// (the first seed), `seeds`, `clients`, `requests`, `window`, `pool`,
    /// `byzantine` (a number or `f`), `byzantine-clients`, `fault-window-ms`,
    /// `liveness-ms`, `service`, `executor` (`sequential`, or the name of the
    /// custom executor already set), `no-swarm`, `no-view-check` and
    /// `wait-free-check` (no value).
    pub fn set(&mut self, flag: &str, value: &str) -> Result<(), String> {
        fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
            v.parse().map_err(|_| format!("--{flag}: not a number: {v:?}"))
        }
        match flag {
            "mode" => self.mode = value.parse()?,
            "pillars" => self.pillars = num(flag, value)?,
            "n" => self.n = num(flag, value)?,
            "faults" => self.faults = value.parse()?,
            "seed" => self.first_seed = num(flag, value)?,
            "seeds" => self.seeds = num(flag, value)?,
            "clients" => self.clients = num(flag, value)?,
            "requests" => self.requests_per_client = num(flag, value)?,
            "window" => self.client_window = num(flag, value)?,
            "pool" => self.pool_max_requests = num(flag, value)?,
            "byzantine" if value == "f" => self.byzantine = None,
            "byzantine" => self.byzantine = Some(num(flag, value)?),
            "byzantine-clients" => self.byzantine_clients = num(flag, value)?,
            "fault-window-ms" => self.fault_window_ms = num(flag, value)?,
            "liveness-ms" => self.liveness_timeout_ms = num(flag, value)?,
            "service" => self.service = value.to_string(),
            "executor" if value == "sequential" => self.executor = ExecutorChoice::Sequential,
            "executor" if value == self.executor.name() => {}
            "executor" => {
                return Err(format!(
                    "--executor {value}: the simulator library only knows sequential; the CLI sets others"
                ))
            }
            "rotation" => self.rotation = parse_rotation(value)?,
            "client-auth" => self.client_auth = parse_client_auth(value)?,
            "prepare-auth" => self.prepare_auth = parse_prepare_auth(value)?,
            "leader-first" => {
                self.leader_first = value
                    .parse()
                    .map_err(|_| format!("--leader-first: {value:?} is not true or false"))?
            }
            "few-replies" => {
                self.few_replies = value
                    .parse()
                    .map_err(|_| format!("--few-replies: {value:?} is not true or false"))?
            }
            "no-swarm" => self.swarm = false,
            "no-view-check" => self.check_views = false,
            "no-catch-up-check" => self.check_catch_up = false,
            "wait-free-check" => self.check_wait_free = true,
            other => return Err(format!("unknown option --{other}")),
        }
        Ok(())
    }

    /// Parse `--flag value ...` (what follows `chorus sim` in a replay
    /// command) on top of the defaults.
    pub fn parse_args<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<SimOptions, String> {
        let mut o = SimOptions::default();
        let mut args = args.into_iter().peekable();
        while let Some(arg) = args.next() {
            if arg == "#" {
                break; // A comment follows (the weak-quorum build note).
            }
            let flag = arg
                .strip_prefix("--")
                .ok_or_else(|| format!("expected --flag, got {arg:?}"))?;
            if flag == "no-swarm" || flag == "no-view-check" || flag == "wait-free-check" {
                o.set(flag, "")?;
                continue;
            }
            let value = args.next().ok_or_else(|| format!("--{flag} needs a value"))?;
            o.set(flag, value)?;
        }
        if o.mode == OrderingMode::Pbft && o.pillars != 1 {
            return Err("pbft mode runs exactly 1 pillar (--pillars 1)".into());
        }
        o.validate()?;
        Ok(o)
    }

    /// Protocol parameters for a simulated cluster: small batches, windows and
    /// checkpoint intervals so a short run crosses several checkpoints, view
    /// changes and state transfers. Client authentication and (in cop) the
    /// leader rotation are drawn per seed.
    pub fn params(&self, client_auth: ClientAuthKind, leader_rotation: LeaderRotation) -> ProtocolParams {
        // RCC §III-B: one instance (lane) per replica.
        // Dispel §3: one lane per proposer, likewise.
        let lanes = if matches!(self.mode, OrderingMode::Rcc | OrderingMode::Dispel) {
            self.n as u64
        } else {
            self.pillars as u64
        };
        if self.perf.is_some() {
            return self.perf_params(client_auth, leader_rotation, lanes);
        }
        let per_lane_checkpoint = 4;
        let max_lane_drift_slots = self.epochs.unwrap_or(2 * per_lane_checkpoint);
        ProtocolParams {
            mode: self.mode,
            pillars: self.pillars,
            leader_rotation,
            client_auth,
            prepare_auth: self.prepare_auth,
            batch_max_requests: 4,
            batch_max_bytes: 4 * 1024,
            batch_delay_ms: 2,
            proposal_depth: 2,
            // Dispel §4.3: the window must hold every concurrent epoch.
            window_slots: (3 * per_lane_checkpoint).max(max_lane_drift_slots + per_lane_checkpoint),
            checkpoint_interval: per_lane_checkpoint * lanes,
            max_lane_drift_slots,
            view_change_timeout_ms: 500,
            status_interval_ms: 250,
            // sarek: room for a re-prediction certificate at any n.
            max_op_bytes: if self.mode == OrderingMode::Sarek {
                let quorum = 2 * ((self.n - 1) / 3) + 1;
                512.max(chorus_core::RePredictionCert::max_encoded_len(quorum, lanes as usize) as u32)
            } else {
                512
            },
            max_frame_bytes: 64 * 1024,
            pool_max_requests: self.pool_max_requests,
            pool_max_per_client: 32.min(self.pool_max_requests),
            future_msgs_per_peer: 64,
            state_chunk_bytes: 1024,
            link_capacity_mib_s: 600,
            dispel_round_timeout_ms: ProtocolParams::default().dispel_round_timeout_ms,
            // Short, so simulated runs cross returns (and failed ones).
            preferred_return_slots: 16,
            max_clock_skew_ms: 5_000,
            cluster_id: String::new(),
        }
    }

    /// Under the resource model: the real runtime's batching, window and
    /// checkpoint interval (`ProtocolParams::default()`, as `chorus bench`
    /// runs), not the fault-finding runs' tiny batches.
    fn perf_params(
        &self,
        client_auth: ClientAuthKind,
        leader_rotation: LeaderRotation,
        lanes: u64,
    ) -> ProtocolParams {
        let d = ProtocolParams::default();
        let max_lane_drift_slots = self.epochs.unwrap_or(d.max_lane_drift_slots);
        let batch_max_requests = self.batch_max.unwrap_or(d.batch_max_requests);
        // The byte bound scales with the count, so the count is what binds.
        let batch_max_bytes = (u64::from(d.batch_max_bytes) * u64::from(batch_max_requests)
            / u64::from(d.batch_max_requests))
        .max(u64::from(d.batch_max_bytes)) as u32;
        ProtocolParams {
            batch_max_requests,
            batch_max_bytes,
            mode: self.mode,
            pillars: self.pillars,
            leader_rotation,
            client_auth,
            prepare_auth: self.prepare_auth,
            checkpoint_interval: (d.checkpoint_interval / lanes).max(4) * lanes,
            window_slots: d
                .window_slots
                .max(max_lane_drift_slots + d.checkpoint_interval / lanes),
            max_lane_drift_slots,
            pool_max_requests: self.pool_max_requests.max(d.pool_max_requests),
            cluster_id: String::new(),
            ..d
        }
    }

    /// Does this option set allow any Byzantine replica kind?
    pub fn allows_byzantine_replicas(&self) -> bool {
        self.faults.iter().any(FaultKind::is_byzantine_replica)
    }
}

/// `--rotation`: `fixed`, `block-wise`, or `random` (drawn per seed).
pub fn parse_rotation(value: &str) -> Result<Option<LeaderRotation>, String> {
    match value {
        "fixed" => Ok(Some(LeaderRotation::Fixed)),
        "block-wise" => Ok(Some(LeaderRotation::BlockWise)),
        "random" => Ok(None),
        other => Err(format!("--rotation {other:?}: fixed, block-wise or random")),
    }
}

/// `--client-auth`: `mac-vector`, `signature`, or `random` (drawn per seed).
pub fn parse_client_auth(value: &str) -> Result<Option<ClientAuthKind>, String> {
    match value {
        "mac-vector" => Ok(Some(ClientAuthKind::MacVector)),
        "signature" => Ok(Some(ClientAuthKind::Signature)),
        "random" => Ok(None),
        other => Err(format!(
            "--client-auth {other:?}: mac-vector, signature or random"
        )),
    }
}

/// `--prepare-auth`: `signature` or `mac` (`PrepareAuth`).
pub fn parse_prepare_auth(value: &str) -> Result<PrepareAuth, String> {
    value.parse().map_err(|e| format!("--prepare-auth: {e}"))
}

/// `--perf-crash R@T`: replica R crashes at T virtual ms.
pub fn parse_perf_crash(value: &str) -> Result<(ReplicaId, u64), String> {
    let bad = || format!("--perf-crash {value:?}: REPLICA@MS, e.g. 0@500");
    let (r, t) = value.split_once('@').ok_or_else(bad)?;
    Ok((
        ReplicaId(r.parse().map_err(|_| bad())?),
        t.parse().map_err(|_| bad())?,
    ))
}

pub fn client_auth_name(a: Option<ClientAuthKind>) -> &'static str {
    match a {
        Some(ClientAuthKind::MacVector) => "mac-vector",
        Some(ClientAuthKind::Signature) => "signature",
        None => "random",
    }
}

pub fn rotation_name(r: Option<LeaderRotation>) -> &'static str {
    match r {
        Some(LeaderRotation::Fixed) => "fixed",
        Some(LeaderRotation::BlockWise) => "block-wise",
        None => "random",
    }
}

pub fn mode_name(mode: OrderingMode) -> &'static str {
    mode.name()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::ClusterConfig;

    #[test]
    fn default_replay_command_is_minimal() {
        let o = SimOptions::new(OrderingMode::Cop, 4, 4);
        let cmd = o.replay_command(1234);
        assert!(
            cmd.starts_with("chorus sim --mode cop --pillars 4 --n 4 --faults all --seed 1234 --seeds 1"),
            "{cmd}"
        );
    }

    #[test]
    fn replay_command_names_every_non_default_option() {
        let mut o = SimOptions::new(OrderingMode::Pbft, 4, 7).with_faults("twins".parse().unwrap());
        o.byzantine = Some(3);
        o.clients = 5;
        o.swarm = false;
        let cmd = o.replay_command(9);
        for part in [
            "--mode pbft",
            "--pillars 1",
            "--n 7",
            "--faults twins",
            "--byzantine 3",
            "--clients 5",
            "--no-swarm",
        ] {
            assert!(cmd.contains(part), "{cmd} lacks {part}");
        }
    }

    #[test]
    fn replay_commands_parse_back_to_the_same_options() {
        let mut o = SimOptions::new(OrderingMode::Cop, 2, 7).with_faults("loss,twins".parse().unwrap());
        o.byzantine = Some(2);
        o.requests_per_client = 8;
        o.swarm = false;
        o.fault_window_ms = 1_500;
        o.client_auth = Some(ClientAuthKind::Signature);
        o.leader_first = false;
        o.few_replies = false;
        for opts in [
            o,
            SimOptions::default(),
            SimOptions::new(OrderingMode::Pbft, 1, 4),
        ] {
            let cmd = opts.replay_command(99);
            let args: Vec<&str> = cmd.split_whitespace().skip(2).collect();
            let back = SimOptions::parse_args(args).unwrap();
            assert_eq!(back.replay_command(99), cmd);
            assert_eq!((back.first_seed, back.seeds), (99, 1));
            assert_eq!(back.describe(), opts.describe());
        }
        assert!(SimOptions::parse_args(["--mode", "raft"]).is_err());
        assert!(SimOptions::parse_args(["--n"]).is_err());
        assert!(SimOptions::parse_args(["--gremlins", "1"]).is_err());
        assert!(
            SimOptions::parse_args(["--mode", "pbft"]).is_err(),
            "pbft with the default 4 pillars"
        );
    }

    #[test]
    fn derived_params_validate_for_both_modes() {
        for (mode, p, n) in [
            (OrderingMode::Pbft, 1, 4),
            (OrderingMode::Cop, 4, 4),
            (OrderingMode::Cop, 2, 7),
        ] {
            let o = SimOptions::new(mode, p, n);
            assert_eq!(o.validate(), Ok(()));
            for auth in [ClientAuthKind::MacVector, ClientAuthKind::Signature] {
                let (c, _, _) =
                    ClusterConfig::for_testing(n, 2, o.params(auth, LeaderRotation::BlockWise), 1);
                assert_eq!(c.validate(), Ok(()), "{mode:?} {p}");
            }
        }
    }

    #[test]
    fn validate_rejects_nonsense() {
        let mut o = SimOptions::new(OrderingMode::Cop, 4, 3);
        assert!(o.validate().is_err());
        o.n = 4;
        o.mode = OrderingMode::Pbft;
        assert!(o.validate().is_err());
        o.pillars = 1;
        o.byzantine = Some(3);
        assert!(o.validate().is_err());
        let mut o = SimOptions::new(OrderingMode::Pbft, 1, 4);
        o.batch_max = Some(1024);
        assert!(o.validate().is_err(), "--batch-max without --perf");
        o.perf = Some(crate::perf::PerfModel::default());
        o.faults = crate::FaultSet::none();
        assert_eq!(o.validate(), Ok(()));
        o.batch_max = Some(0);
        assert!(o.validate().is_err());
        let p = SimOptions {
            batch_max: Some(1024),
            ..o.clone()
        }
        .params(ClientAuthKind::Signature, LeaderRotation::Fixed);
        assert_eq!(p.batch_max_requests, 1024);
        assert!(p.batch_max_bytes >= 4 << 20);
    }
}
