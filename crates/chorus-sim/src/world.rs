//! The simulated world: replicas, clients and the network around one event
//! heap and one seeded RNG (mysticeti's simulator shape). No threads, no wall
//! clock: a run is a pure function of (options, seed).

use crate::byz_client::ByzClient;
use crate::byzantine::Adversary;
use crate::checker::Checker;
use crate::client::{Credentials, SimClient};
use crate::faults::FaultKind;
use crate::net::{Endpoint, Fate, Network, PartitionKind};
use crate::node::{SimNode, SimReplica};
use crate::options::{ExecutorChoice, SimOptions, EXEC_MAX_INFLIGHT_PER_CLIENT};
use crate::plan::Plan;
use crate::queue::{EventQueue, Micros};
use crate::report::{RunReport, ViolationKind};
use crate::smart_adversary::SmartAdversary;
use crate::stats::Counters;
use crate::store::Store;
use chorus_apps::ServiceOptions;
use chorus_core::{
    ClientId, ClusterConfig, Digest, Identity, Limits, ReplicaId, ReplicaMsg, Reply, Request, RequestSeq,
};
use chorus_exec::{AccessViolation, CheckedService, Executor, OnViolation, SequentialExecutor, Service};
use chorus_order::TimerId;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use std::sync::Mutex;

/// Pending events at most (a bound, not a target), up to 64 replicas.
const QUEUE_CAPACITY: usize = 2_000_000;

/// Beyond 64 replicas the bound grows with (n / 64)²: one Dispel epoch at
/// n = 128 has ~2 M echoes in flight at once (n reliable broadcasts, all to
/// all), which filled 2 M within 40 simulated ms (2026-11-26).
fn queue_capacity(n: usize) -> usize {
    let scale = n.div_ceil(64).max(1);
    QUEUE_CAPACITY * scale * scale
}
/// Events one run may process before it is declared a runaway, up to 16
/// replicas; every consensus position costs O(n²) messages, so the bound
/// grows with (n / 16)² beyond that (paper-scale runs, issue 15).
const EVENTS_MAX: u64 = 4_000_000;

fn events_max(n: usize) -> u64 {
    let scale = (n as u64).div_ceil(16).max(1);
    EVENTS_MAX * scale * scale
}
/// After the network healed and every request completed, keep running this
/// long so restarted or partitioned replicas catch up under the checkers' eyes.
const SETTLE_US: Micros = 1_000_000;
/// Incomplete requests named in a liveness violation, at most.
const LIVENESS_REPORTS: usize = 3;

thread_local! {
    /// Virtual time of the event being processed, so a panic can be reported
    /// with the time it happened at.
    pub(crate) static NOW_US: std::cell::Cell<Micros> = const { std::cell::Cell::new(0) };
}

pub(crate) enum Ev {
    Message {
        to: usize,
        from: ReplicaId,
        msg: ReplicaMsg,
    },
    Request {
        to: usize,
        request: Request,
    },
    Reply {
        client: usize,
        reply: Reply,
    },
    /// Resource model only (`--perf`, where the network loses nothing): a
    /// client's requests issued in one step, to one replica, as one arrival
    /// (one write on its connection). Handled one request after the other;
    /// the model charges each as before, the simulator pops one event.
    RequestBundle {
        to: usize,
        requests: Vec<Request>,
    },
    /// Resource model only: the replies one replica sends one client at the
    /// same moment (one delivered batch), as one arrival.
    ReplyBundle {
        client: usize,
        replies: Vec<Reply>,
    },
    Timer {
        node: usize,
        incarnation: u64,
        id: TimerId,
        generation: u64,
    },
    ClientIssue {
        client: usize,
    },
    ClientRetry {
        client: usize,
        seq: RequestSeq,
        attempt: u32,
    },
    ByzClientTick {
        client: usize,
    },
    Crash {
        node: usize,
        torn_after: Option<u32>,
        /// Drawn by `cluster-restart` (counted apart, so the kind is
        /// reported active only when one of its own crashes took a
        /// running replica down).
        cluster_restart: bool,
    },
    Restart {
        node: usize,
    },
    /// A message a smart adversary on `node` holds back until now.
    Delayed {
        node: usize,
        to: ReplicaId,
        msg: ReplicaMsg,
    },
    /// The rcc adversary on `node` releases what it held back.
    RccWake {
        node: usize,
    },
    /// A custom (parallel) executor's overlapped batches are due to be
    /// barriered and their results handed out (`world_replica::deliver`).
    ExecFlush {
        node: usize,
        incarnation: u64,
    },
    /// `node`'s core has handled everything that arrived before now: its
    /// burst is over, it sends the messages it held (`world_replica::on_burst_end`).
    BurstEnd {
        node: usize,
        incarnation: u64,
    },
    /// The head of a replica's hub–group messages is due
    /// (`world_replica::on_internal_due`).
    InternalDue {
        node: usize,
        incarnation: u64,
    },
    /// A replica's answer to a client's status question: each lane's view
    /// (`chorus_core::first_contact`, leader-first clients only).
    ViewReport {
        client: usize,
        from: ReplicaId,
        views: Vec<u64>,
    },
}

impl Ev {
    fn tag(&self) -> (u8, u64) {
        match self {
            Ev::Message { to, .. } => (0, *to as u64),
            Ev::Request { to, .. } => (1, *to as u64),
            Ev::Reply { client, .. } => (2, *client as u64),
            Ev::Timer { node, .. } => (3, *node as u64),
            Ev::ClientIssue { client } => (4, *client as u64),
            Ev::ClientRetry { client, .. } => (5, *client as u64),
            Ev::ByzClientTick { client } => (6, *client as u64),
            Ev::Crash { node, .. } => (7, *node as u64),
            Ev::Restart { node } => (8, *node as u64),
            Ev::Delayed { node, .. } => (9, *node as u64),
            Ev::RccWake { node } => (10, *node as u64),
            Ev::ExecFlush { node, .. } => (11, *node as u64),
            Ev::RequestBundle { to, .. } => (12, *to as u64),
            Ev::ReplyBundle { client, .. } => (13, *client as u64),
            Ev::BurstEnd { node, .. } => (14, *node as u64),
            Ev::ViewReport { client, .. } => (15, *client as u64),
            Ev::InternalDue { node, .. } => (16, *node as u64),
        }
    }
}

pub struct World<R: SimReplica> {
    pub(crate) opts: SimOptions,
    pub(crate) seed: u64,
    pub(crate) config: Arc<ClusterConfig>,
    /// The wire codec's bounds, for messages between replicas.
    pub(crate) limits: Limits,
    pub(crate) rng: ChaCha8Rng,
    pub(crate) queue: EventQueue<Ev>,
    pub(crate) net: Network,
    pub(crate) plan: Plan,
    pub(crate) nodes: Vec<SimNode<R>>,
    /// Node indices of each replica id (two for a twin).
    pub(crate) by_replica: Vec<Vec<usize>>,
    pub(crate) clients: Vec<SimClient>,
    pub(crate) byz_clients: Vec<ByzClient>,
    pub(crate) checker: Checker,
    pub(crate) counters: Counters,
    pub(crate) trace: blake3::Hasher,
    pub(crate) next_timer_generation: u64,
    /// Replica whose events and actions are printed (`CHORUS_SIM_LOG=r1`).
    pub(crate) log_replica: Option<ReplicaId>,
    /// NEW-VIEWs correct replicas sent in the step being performed: (lane,
    /// view, highest re-proposed slot), checked against the sender's window
    /// once the step is done (`world_replica::check_new_views`).
    pub(crate) sent_new_views: Vec<(chorus_core::LaneId, u64, Option<u64>)>,
    /// The resource model (`SimOptions::perf`), its event being charged, and
    /// the latencies of accepted requests.
    pub(crate) perf: Option<crate::perf::PerfState>,
    pub(crate) perf_ctx: Option<PerfCtx>,
    pub(crate) latencies: Vec<Micros>,
    pub(crate) last_accept_us: Micros,
    /// Under `--perf-crash`: when each request was accepted (the rate
    /// after the crash and the longest pause).
    pub(crate) accepted_at: Vec<Micros>,
    events: u64,
    /// The smart checks and drivers (`checker_extra.rs`).
    pub(crate) extra: crate::checker_extra::Extra,
    /// The rcc checkers' measurements (`rcc_stats.rs`).
    pub(crate) rcc_obs: crate::rcc_stats::RccObserver,
    /// Nodes that began holding messages in the event being dispatched.
    pub(crate) burst_dirty: Vec<usize>,
    /// Each node's current service instance (for the service invariant).
    services: Vec<Option<Arc<dyn Service>>>,
    /// Checked mode: the access-set violations of every instance any node ran.
    access_logs: Vec<(usize, Arc<Mutex<Vec<AccessViolation>>>)>,
    /// sarek: per-stream delivery agreement (`sarek_sim.rs`).
    pub(crate) streams: crate::sarek_sim::StreamChecker,
    /// Requests of correct clients last sent to one replica alone and not
    /// yet accepted, and whether each was the client's probe: what an
    /// omniscient `fake-answer` primary attacks.
    pub(crate) sent_alone: std::collections::BTreeMap<(ClientId, chorus_core::RequestSeq), bool>,
    /// Requests correct clients resent (`ClientMsg::Resend` in the runtime):
    /// a copy arriving after the resend counts as one, as a second arrival
    /// on a connection does in the runtime's pillar.
    pub(crate) resent: std::collections::HashSet<(ClientId, chorus_core::RequestSeq)>,
}

impl<R: SimReplica> World<R> {
    pub fn new(opts: &SimOptions, seed: u64) -> World<R> {
        opts.validate().expect("options were validated by the caller");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let plan = Plan::draw(opts, &mut rng);
        let total_clients = opts.clients as usize + plan.byz_clients.len();
        let (config, replica_keys, client_keys) = ClusterConfig::for_testing(
            opts.n,
            total_clients,
            opts.params(plan.client_auth, plan.leader_rotation),
            seed,
        );
        config.validate().expect("simulator parameters are valid");
        let config = Arc::new(config);
        let sarek_partitions =
            (config.params.mode == chorus_core::OrderingMode::Sarek).then(|| config.lanes());
        let mut nodes = build_nodes(&config, &plan, &replica_keys, opts.clients, &mut rng);
        // Resource-model runs without crashes never replay a store: keep
        // none (a whole dispel log, every DBFT input of every replica,
        // outgrew 10 GB at n = 64; BENCHMARKS.md, 2026-11-26). After the
        // draws, so the seed's random stream is unchanged.
        if opts.perf.is_some() && plan.crashes.is_empty() {
            for node in &mut nodes {
                node.store = Store::measuring();
            }
        }
        let node_count = nodes.len();
        let extra = crate::checker_extra::Extra::new(opts, &plan);
        let mut by_replica = vec![Vec::new(); opts.n];
        for (i, nd) in nodes.iter().enumerate() {
            by_replica[nd.replica_id.index()].push(i);
        }
        let net = Network::new(
            &mut rng,
            nodes.iter().map(|nd| nd.replica_id.0).collect(),
            total_clients,
            plan.link_faults.clone(),
            plan.partitions.clone(),
            plan.heal_at_us,
            opts.latency_ms.map(|ms| ms * 1_000),
        );
        let correct = (0..opts.n as u32).map(|r| plan.is_byzantine(ReplicaId(r)).is_none());
        let checker = Checker::new(&config, correct.collect());
        let (clients, byz_clients) = build_clients(opts, &config, &plan, &client_keys);
        World {
            opts: opts.clone(),
            seed,
            limits: Limits::from_config(&config),
            config,
            rng,
            queue: EventQueue::new(queue_capacity(opts.n)),
            net,
            counters: planned_fault_counters(&plan),
            plan,
            nodes,
            by_replica,
            clients,
            byz_clients,
            checker,
            trace: blake3::Hasher::new(),
            next_timer_generation: 0,
            log_replica: log_replica_from_env(),
            sent_new_views: Vec::new(),
            perf: opts.perf.clone().map(|mut m| {
                // SAREK §IV: partitions execute in parallel, one thread each.
                if let Some(k) = sarek_partitions {
                    m.exec_workers = m.exec_workers.max(k);
                }
                crate::perf::PerfState::new(m, node_count)
            }),
            perf_ctx: None,
            latencies: Vec::new(),
            last_accept_us: 0,
            accepted_at: Vec::new(),
            events: 0,
            extra,
            rcc_obs: Default::default(),
            burst_dirty: Vec::new(),
            services: Vec::new(),
            access_logs: Vec::new(),
            streams: Default::default(),
            sent_alone: Default::default(),
            resent: Default::default(),
        }
    }

    pub(crate) fn now_us(&self) -> Micros {
        self.queue.now_us()
    }

    /// Returns false when the queue was full and the event was dropped.
    pub(crate) fn schedule(&mut self, at_us: Micros, ev: Ev) -> bool {
        if !self.queue.schedule(at_us, ev) {
            self.counters.fault("queue-full-drop");
            if self.perf.is_some() && self.counters.faults.get("queue-full-drop") == Some(&1) {
                // The model promises a network that loses nothing; a dropped
                // event would make its figures quietly wrong (a dispel n = 64
                // run dropped 43 M and still printed a throughput).
                let now = self.now_us();
                self.checker.violate(
                    ViolationKind::Liveness,
                    now,
                    format!(
                        "resource model saturated: {} events pending, the event queue is full (fewer requests in flight, more cores or a lighter configuration)",
                        self.queue.len()
                    ),
                );
            }
            return false;
        }
        true
    }

    /// A smaller event queue (tests of what a full one does).
    pub fn with_queue_capacity(mut self, capacity: usize) -> World<R> {
        assert!(self.queue.is_empty(), "before the run starts");
        self.queue = EventQueue::new(capacity);
        self
    }

    pub(crate) fn trace_words(&mut self, words: &[u64]) {
        for w in words {
            self.trace.update(&w.to_le_bytes());
        }
    }

    /// A fresh executor around a fresh service instance for node `i`.
    pub(crate) fn make_executor(&mut self, i: usize) -> Box<dyn Executor> {
        if self.opts.mode == chorus_core::OrderingMode::Sarek {
            return crate::sarek_sim::executor(&self.opts.service, &self.config, self.opts.skip_sync_wait);
        }
        let inner = self
            .opts
            .registry
            .build(
                &self.opts.service,
                &sim_service_options(&self.opts.service_options),
            )
            .expect("the service name was validated");
        if self.services.len() <= i {
            self.services.resize(i + 1, None);
        }
        self.services[i] = Some(inner.clone());
        let service: Arc<dyn Service> = if self.opts.checked_access {
            let checked = CheckedService::new(inner, OnViolation::Record);
            self.access_logs.push((i, checked.violations()));
            Arc::new(checked)
        } else {
            inner
        };
        let mut e: Box<dyn Executor> = match &self.opts.executor {
            ExecutorChoice::Sequential => {
                Box::new(SequentialExecutor::new(service, EXEC_MAX_INFLIGHT_PER_CLIENT))
            }
            ExecutorChoice::Custom { factory, .. } => factory(service, EXEC_MAX_INFLIGHT_PER_CLIENT),
        };
        if let Some(p) = chorus_core::SwitchPolicy::of(&self.config) {
            assert!(
                e.set_switch_policy(p),
                "this executor cannot run RCC SWITCHINSTANCE requests, which mode rcc needs"
            );
        }
        e
    }

    /// May nodes `a` and `b` talk? Twin copies only reach their own side.
    pub(crate) fn linked(&self, a: usize, b: usize) -> bool {
        let (x, y) = (&self.nodes[a], &self.nodes[b]);
        !(x.twin || y.twin) || x.side == y.side
    }

    /// May client `c` and node `j` talk? Clients are split over the sides too.
    pub(crate) fn client_linked(&self, c: usize, j: usize) -> bool {
        !self.nodes[j].twin || self.nodes[j].side == (c % 2) as u8
    }

    /// Hand a message to the network; `make` builds the event for one arrival.
    pub(crate) fn transmit(&mut self, from: Endpoint, to: Endpoint, make: impl Fn() -> Ev) {
        self.counters.messages_sent += 1;
        let now = self.now_us();
        if self.perf.is_some() {
            return self.perf_transmit(from, to, make());
        }
        match self.net.route(&mut self.rng, now, from, to, &mut self.counters) {
            Fate::Dropped => {}
            Fate::Arrive(times) => {
                for t in times {
                    self.schedule(t, make());
                }
            }
        }
    }

    fn schedule_plan(&mut self) {
        for c in 0..self.clients.len() {
            let t = self.rng.gen_range(0..50_000);
            self.schedule(t, Ev::ClientIssue { client: c });
        }
        for b in 0..self.byz_clients.len() {
            let t = self.rng.gen_range(0..200_000);
            self.schedule(t, Ev::ByzClientTick { client: b });
        }
        let outages = self
            .plan
            .crashes
            .iter()
            .chain(&self.plan.smart.outages)
            .map(|c| (c, false));
        let restarts = self.plan.restarts.iter().map(|c| (c, true));
        for (c, cluster_restart) in outages
            .chain(restarts)
            .map(|(c, r)| (c.clone(), r))
            .collect::<Vec<_>>()
        {
            let node = self.by_replica[c.replica.index()][0];
            self.schedule(
                c.at_us,
                Ev::Crash {
                    node,
                    torn_after: c.torn_after,
                    cluster_restart,
                },
            );
            self.schedule(c.restart_us, Ev::Restart { node });
        }
        // Dispel §5.6: one replica killed for good (`--perf-crash`).
        if let Some((replica, ms)) = self.opts.perf_crash {
            let node = self.by_replica[replica.index()][0];
            self.schedule(
                ms * 1_000,
                Ev::Crash {
                    node,
                    torn_after: None,
                    cluster_restart: false,
                },
            );
        }
    }

    fn all_clients_done(&self) -> bool {
        self.clients.iter().all(|c| c.done())
    }

    /// Run to completion and check every invariant.
    pub fn run(mut self) -> RunReport {
        NOW_US.with(|c| c.set(0));
        for i in 0..self.nodes.len() {
            self.start_node(i);
        }
        self.schedule_plan();
        let heal = self.plan.heal_at_us;
        // Quiet: the network healed and every outage is over.
        let quiet = heal
            .max(self.plan.smart.last_restart_us())
            .max(self.plan.last_cluster_restart_us());
        let mut cut_short = false;
        let mut done_at: Option<Micros> = None;
        while let Some((t, ev)) = self.queue.pop() {
            // Per-request deadlines (`SimOptions::liveness_timeout_ms`).
            if self.extra.liveness_due(t) && self.overdue_request(t).is_some() {
                break;
            }
            self.events += 1;
            if self.events > events_max(self.nodes.len()) {
                self.checker.violate(
                    ViolationKind::Liveness,
                    t,
                    format!(
                        "runaway: more than {} events (message storm?)",
                        events_max(self.nodes.len())
                    ),
                );
                cut_short = true;
                break;
            }
            NOW_US.with(|c| c.set(t));
            if self.opts.mode == chorus_core::OrderingMode::Rcc && self.rcc_obs.sample_due(t) {
                self.sample_lanes(t);
            }
            let (tag, who) = ev.tag();
            self.trace_words(&[t, tag as u64, who]);
            self.dispatch(ev);
            if self.checker.violation_count() > 0 {
                // A safety violation: the seed is what matters, not what follows.
                cut_short = true;
                break;
            }
            if t >= quiet + SETTLE_US && self.all_clients_done() {
                // Keep going until the views agree, or the grace period ends
                // (the view check in `finish` then reports the split).
                let since = *done_at.get_or_insert(t);
                let settled = (!self.opts.check_views || self.views_agree())
                    && (!self.opts.check_catch_up || self.lagging().is_none());
                if settled || t >= since + crate::checker_extra::VIEW_GRACE_US {
                    break;
                }
            }
        }
        self.finish(cut_short)
    }

    fn dispatch(&mut self, ev: Ev) {
        if let Some((node, core)) = self.perf_target(&ev) {
            // The core is taken in arrival order (FIFO per core). The event is
            // handled now, but what it sends leaves only when the core has
            // done the work: a queueing model with delayed outputs, which
            // re-schedules nothing (saturated runs stay cheap to simulate).
            let now = self.now_us();
            let start = self.perf.as_ref().expect("perf on").start_at(node, core, now);
            self.perf_ctx = Some(PerfCtx {
                node,
                core,
                ns: self.perf_base_cost(&ev),
                exec_ns: 0,
                ops: Vec::new(),
                op_ids: Vec::new(),
                sends: Vec::new(),
            });
            self.dispatch_now(ev);
            self.perf_finish(start);
            self.schedule_burst_ends();
            return;
        }
        self.dispatch_now(ev);
        self.schedule_burst_ends();
    }

    fn dispatch_now(&mut self, ev: Ev) {
        match ev {
            Ev::Message { to, from, msg } => self.on_message(to, from, msg),
            Ev::Request { to, request } => self.on_request(to, request),
            Ev::Reply { client, reply } => self.on_reply(client, reply),
            Ev::RequestBundle { to, requests } => {
                for request in requests {
                    self.on_request(to, request);
                }
            }
            Ev::ReplyBundle { client, replies } => {
                for reply in replies {
                    self.on_reply(client, reply);
                }
            }
            Ev::Timer {
                node,
                incarnation,
                id,
                generation,
            } => self.on_timer(node, incarnation, id, generation),
            Ev::ClientIssue { client } => self.on_client_issue(client),
            Ev::ClientRetry { client, seq, attempt } => self.on_client_retry(client, seq, attempt),
            Ev::ViewReport { client, from, views } => self.on_view_report(client, from, &views),
            Ev::ByzClientTick { client } => self.on_byz_client_tick(client),
            Ev::Crash {
                node,
                torn_after,
                cluster_restart,
            } => self.on_crash(node, torn_after, cluster_restart),
            Ev::Restart { node } => self.on_restart(node),
            Ev::Delayed { node, to, msg } => self.on_delayed(node, to, msg),
            Ev::RccWake { node } => self.on_rcc_wake(node),
            Ev::ExecFlush { node, incarnation } => self.on_exec_flush(node, incarnation),
            Ev::BurstEnd { node, incarnation } => self.on_burst_end(node, incarnation),
            Ev::InternalDue { node, incarnation } => self.on_internal_due(node, incarnation),
        }
    }

    fn finish(mut self, cut_short: bool) -> RunReport {
        let now = self.now_us();
        if !cut_short {
            self.check_liveness(now);
            if self.all_clients_done() && self.opts.check_views {
                self.check_views(now);
            }
            if self.all_clients_done() && self.opts.check_catch_up {
                if let Some(detail) = self.lagging() {
                    self.extra.violate(ViolationKind::Liveness, now, detail);
                }
            }
        }
        // Equal positions, equal state (end-of-run check of every live correct replica).
        for i in 0..self.nodes.len() {
            let id = self.nodes[i].replica_id;
            let correct = self.nodes[i].correct;
            if let Some(live) = self.nodes[i].live.as_mut() {
                let leaked = live.replica.leaked_pool_entries();
                if correct && leaked > 0 {
                    self.checker.violate(
                        ViolationKind::PoolLeak,
                        now,
                        format!("{id:?} holds {leaked} pool requests in flight at decided slots"),
                    );
                }
                let seq = live.executor.next_seq();
                let d = live.executor.state_digest();
                self.checker.state_at(now, id, seq, d);
                if correct {
                    self.check_service_invariant(i, now);
                }
            }
        }
        self.check_access_sets(now);
        self.audit_executors();
        let requests_issued = self.clients.iter().map(|c| c.total() as u64).sum();
        let requests_committed = self.clients.iter().map(|c| c.completed() as u64).sum();
        // RCC §III-E: instance switches of correct clients (sent, applied).
        for c in &self.clients {
            let (sent, applied) = c.switches();
            for (name, k) in [("client-switch-sent", sent), ("client-switch-applied", applied)] {
                if k > 0 {
                    *self.counters.notes.entry(name).or_insert(0) += u64::from(k);
                }
            }
        }
        // Under `--perf`: what the replicas re-sent on their own (lane
        // catch-up, Dispel's status-tick retransmission), the load a
        // lossless network should barely see.
        if self.perf.is_some() {
            let resent: u64 = self
                .nodes
                .iter()
                .filter_map(|n| n.live.as_ref())
                .map(|l| l.replica.retransmissions())
                .sum();
            if resent > 0 {
                *self.counters.notes.entry("replica-retransmission").or_insert(0) += resent;
            }
        }
        let delivered_positions = self.checker.delivered_positions();
        self.trace_words(&[delivered_positions, requests_committed]);
        if !cut_short && self.opts.check_wait_free {
            self.check_wait_free(now);
        }
        let rcc = std::mem::take(&mut self.rcc_obs.stats);
        let mut violations_extra = std::mem::take(&mut self.extra.violations);
        let (mut violations, mut violations_dropped) = self.checker.finish();
        violations.append(&mut violations_extra);
        violations_dropped += self.extra.dropped;
        let faults_active = crate::checker_extra::active_kinds(&self.plan, &self.counters);
        RunReport {
            seed: self.seed,
            events: self.events,
            faults_active,
            faults_drawn: self.plan.drawn,
            setup: self.plan.setup(),
            byzantine: self.plan.byzantine_names(),
            virtual_us: now,
            counters: self.counters,
            requests_issued,
            requests_committed,
            delivered_positions,
            violations,
            violations_dropped,
            replay: self.opts.replay_command(self.seed),
            trace: Digest(*self.trace.finalize().as_bytes()),
            rcc,
            perf: self.perf.as_ref().map(|p| {
                let crash = self
                    .opts
                    .perf_crash
                    .map(|(_, ms)| (ms * 1_000, self.accepted_at.as_slice()));
                crate::perf::PerfReport::of(p, &self.latencies, self.last_accept_us, crash)
            }),
        }
    }

    /// The service's invariant on node `i`'s state (after `state_digest`,
    /// which waits for a parallel executor to finish).
    fn check_service_invariant(&mut self, i: usize, now: Micros) {
        let entry = self.opts.registry.get(&self.opts.service).expect("validated");
        let (Some(check), Some(Some(service))) = (entry.invariant.clone(), self.services.get(i)) else {
            return;
        };
        if let Err(e) = check(&service.snapshot()) {
            let id = self.nodes[i].replica_id;
            self.checker
                .violate(ViolationKind::ServiceInvariant, now, format!("{id:?}: {e}"));
        }
    }

    /// Checked mode: the first undeclared access of each correct node.
    fn check_access_sets(&mut self, now: Micros) {
        let mut reported = std::collections::BTreeSet::new();
        for (i, log) in &self.access_logs {
            let node = &self.nodes[*i];
            if !node.correct || reported.contains(i) {
                continue;
            }
            let first = log.lock().unwrap_or_else(|e| e.into_inner()).first().cloned();
            if let Some(v) = first {
                reported.insert(*i);
                self.checker.violate(
                    ViolationKind::AccessSet,
                    now,
                    format!("{:?}: {v}", node.replica_id),
                );
            }
        }
    }

    /// Every live correct replica's lane progress, into the rcc samples.
    fn sample_lanes(&mut self, now: Micros) {
        let progress: Vec<_> = self
            .nodes
            .iter()
            .filter(|nd| nd.correct)
            .filter_map(|nd| nd.live.as_ref().map(|l| l.replica.lane_progress()))
            .collect();
        self.rcc_obs.sample(now, &progress);
    }

    /// RCC §III-C, wait-freedom: while a lane was stopped, the others kept
    /// deciding at `WAIT_FREE_MIN_RATIO` of their rate before.
    fn check_wait_free(&mut self, now: Micros) {
        use crate::rcc_stats::{wait_free, WAIT_FREE_MIN_RATIO};
        let Some(w) = wait_free(&self.rcc_obs.stats.samples) else {
            return;
        };
        if let Some(ratio) = w.ratio().filter(|r| *r < WAIT_FREE_MIN_RATIO) {
            self.extra.violate(
                crate::report::ViolationKind::WaitFree,
                now,
                format!(
                    "while a lane was halted ({} windows of {} ms, {} with its stop in force) the other lanes decided {:.1} slots/s each, {:.0}% of the {:.1} before",
                    w.halted_windows,
                    crate::rcc_stats::SAMPLE_EVERY_US / 1_000,
                    w.stopped_windows,
                    w.halted.unwrap_or(0.0),
                    ratio * 100.0,
                    w.baseline
                ),
            );
        }
    }

    /// Test scenarios: crash a correct replica at `at_us` and restart it at
    /// `restart_us` (on top of the plan), e.g. the wait-free scenario.
    pub fn with_crash(mut self, replica: ReplicaId, at_us: Micros, restart_us: Micros) -> World<R> {
        let node = self.by_replica[replica.index()][0];
        self.schedule(
            at_us,
            Ev::Crash {
                node,
                torn_after: None,
                cluster_restart: false,
            },
        );
        self.schedule(restart_us, Ev::Restart { node });
        self
    }

    /// The oldest request of a correct client past its own deadline: the
    /// later of its issue time and the end of the fault window, plus the
    /// liveness bound (`SimOptions::liveness_timeout_ms`). A request counts
    /// as issued when the client's pacing schedule wanted to issue it (at
    /// most `(seq - 1) × pacing`), even when a full client window held it
    /// back: otherwise a closed-loop client hides a throughput collapse
    /// (coordinated omission), each request being quick once it is sent.
    fn overdue_request(&self, now: Micros) -> Option<(Micros, ClientId, RequestSeq)> {
        // A cluster restart may end after the network healed (a rolling
        // one takes a few seconds per replica): deadlines start when the
        // last replica is back, as with the network.
        let heal = self.plan.heal_at_us;
        let back = heal.max(self.plan.last_cluster_restart_us());
        let bound = self.opts.liveness_timeout_ms * 1_000;
        let pacing = heal / self.opts.requests_per_client as u64;
        self.clients
            .iter()
            .filter_map(|c| {
                let issued = c.outstanding().min();
                let next = (c.issued() < c.total()).then(|| RequestSeq(c.issued() as u64 + 1));
                let (seq, at) = match (issued, next) {
                    (Some((seq, at)), _) => (seq, at),
                    (None, Some(seq)) => (seq, Micros::MAX),
                    (None, None) => return None,
                };
                let intended = (seq.0 - 1).saturating_mul(pacing);
                let start = at.min(intended).max(back);
                (start + bound < now).then_some((start, c.id(), seq))
            })
            .min()
    }

    /// Every request of every correct client must have completed within its
    /// deadline; a run that ends with requests outstanding ended because one
    /// of them was overdue (or the event budget ran out).
    fn check_liveness(&mut self, now: Micros) {
        if self.all_clients_done() {
            return;
        }
        let mut oldest: Vec<(Micros, ClientId, RequestSeq)> = self
            .clients
            .iter()
            .flat_map(|c| c.outstanding().map(move |(seq, at)| (at, c.id(), seq)))
            .collect();
        oldest.sort();
        let incomplete: u64 = self
            .clients
            .iter()
            .map(|c| (c.total() - c.completed()) as u64)
            .sum();
        let total: u64 = self.clients.iter().map(|c| c.total() as u64).sum();
        self.checker.violate(
            ViolationKind::Liveness,
            now,
            format!(
                "{incomplete} of {total} requests of correct clients incomplete; each must complete {} ms after the later of its (paced) issue and the end of the fault window ({:.3}s)",
                self.opts.liveness_timeout_ms,
                self.plan.heal_at_us as f64 / 1e6
            ),
        );
        for node in self.nodes.iter().filter(|nd| nd.correct) {
            let state = match &node.live {
                Some(live) => live.replica.describe(),
                None => "down".into(),
            };
            self.checker.violate(
                ViolationKind::Liveness,
                now,
                format!("{:?} at the end: {state}", node.replica_id),
            );
        }
        for (at, id, seq) in oldest.into_iter().take(LIVENESS_REPORTS) {
            self.checker.violate(
                ViolationKind::Liveness,
                now,
                format!(
                    "{id:?} request {seq:?} issued at {:.3}s never completed",
                    at as f64 / 1e6
                ),
            );
        }
    }

    /// Every live correct replica's view and activity in every lane.
    fn lane_views(&self) -> Vec<(ReplicaId, Vec<(u64, bool)>)> {
        self.nodes
            .iter()
            .filter(|nd| nd.correct)
            .filter_map(|nd| nd.live.as_ref().map(|l| (nd.replica_id, l.replica.lane_views())))
            .collect()
    }

    /// Live correct replicas that executed less than the furthest one, if
    /// any (the run's end, after the faults healed and the clients are
    /// done: status exchange, fetches and state transfer had the grace
    /// period to bring them up).
    fn lagging(&self) -> Option<String> {
        let at: Vec<(ReplicaId, u64)> = self
            .nodes
            .iter()
            .filter(|nd| nd.correct)
            .filter_map(|nd| nd.live.as_ref().map(|l| (nd.replica_id, l.executor.next_seq().0)))
            .collect();
        crate::checker_extra::left_behind(&at)
    }

    fn views_agree(&self) -> bool {
        crate::checker_extra::view_split(&self.lane_views()).is_none()
    }

    /// Issue 8 finding 7: at the end every correct replica must be active in
    /// the same view of every lane.
    fn check_views(&mut self, now: Micros) {
        if let Some(detail) = crate::checker_extra::view_split(&self.lane_views()) {
            self.extra.violate(ViolationKind::ViewSplit, now, detail);
        }
    }
}

/// The counter name for a Byzantine replica of this kind.
fn byzantine_counter(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::Silent => "byzantine-replica-silent",
        FaultKind::Equivocate => "byzantine-replica-equivocate",
        FaultKind::ConflictingVotes => "byzantine-replica-conflicting-votes",
        FaultKind::Corrupt => "byzantine-replica-corrupt",
        FaultKind::Replay => "byzantine-replica-replay",
        FaultKind::Flood => "byzantine-replica-flood",
        FaultKind::Twins => "byzantine-replica-twins",
        FaultKind::WithholdPace => "byzantine-replica-withhold-pace",
        FaultKind::NvForge => "byzantine-replica-nv-forge",
        FaultKind::GarbageSnapshot => "byzantine-replica-garbage-snapshot",
        FaultKind::TwinsResplit => "byzantine-replica-twins-resplit",
        FaultKind::Throttle => "byzantine-replica-throttle",
        FaultKind::InTheDark => "byzantine-replica-in-the-dark",
        FaultKind::Censor => "byzantine-replica-censor",
        FaultKind::OrderAttack => "byzantine-replica-order-attack",
        FaultKind::FailureSpam => "byzantine-replica-failure-spam",
        FaultKind::FakeAnswer => "byzantine-replica-fake-answer",
        other => unreachable!("{other} is not a replica fault"),
    }
}

/// `CHORUS_SIM_LOG=r3` (or `3`) prints every event replica 3 handles and every
/// action it emits to stderr, for debugging a replayed seed. It only prints:
/// the run itself does not change.
fn log_replica_from_env() -> Option<ReplicaId> {
    let v = std::env::var("CHORUS_SIM_LOG").ok()?;
    v.trim_start_matches('r').parse().ok().map(ReplicaId)
}

/// One node per replica id, then the second copy of every twin. Correct
/// replicas are split in two halves; a twin copy only talks to its own half
/// (and to the twin copies on it).
fn build_nodes<R: SimReplica>(
    config: &Arc<ClusterConfig>,
    plan: &Plan,
    keys: &[Identity],
    correct_clients: u32,
    rng: &mut ChaCha8Rng,
) -> Vec<SimNode<R>> {
    let n = config.n();
    // Smart adversaries draw from their own stream (see `smart_plan.rs`).
    let mut smart_rng = rng.clone();
    smart_rng.set_stream(crate::smart_plan::SMART_STREAM + 1);
    let colluders: std::collections::BTreeMap<ReplicaId, Identity> = plan
        .byzantine
        .iter()
        .map(|(r, _)| (*r, keys[r.index()].clone()))
        .collect();
    let mut smart = |r: u32, kind: Option<FaultKind>| {
        kind.filter(|k| k.is_smart() && !k.is_twin()).map(|k| {
            SmartAdversary::new(
                k,
                ReplicaId(r),
                keys[r as usize].clone(),
                config.clone(),
                colluders.clone(),
                plan.heal_at_us,
                plan.smart.persist,
                &mut smart_rng,
            )
        })
    };
    let rcc = |r: u32, kind: Option<FaultKind>| {
        kind.filter(|k| k.is_rcc()).map(|k| {
            crate::rcc_adversary::RccAdversary::new(
                k,
                ReplicaId(r),
                keys[r as usize].clone(),
                config.clone(),
                colluders.keys().copied().collect(),
                plan.heal_at_us,
                plan.rcc.persist,
                correct_clients,
            )
        })
    };
    let mut halves: Vec<u32> = (0..n as u32).collect();
    halves.shuffle(rng);
    let side_of = |r: u32| halves.iter().position(|x| *x == r).map_or(0, |p| (p % 2) as u8);
    let mut node = |r: u32, side: u8| {
        let id = ReplicaId(r);
        let kind = plan.is_byzantine(id);
        SimNode {
            replica_id: id,
            identity: keys[r as usize].clone(),
            correct: kind.is_none(),
            twin: kind.is_some_and(FaultKind::is_twin),
            side,
            adversary: kind
                .filter(|k| !k.is_twin() && !k.is_smart() && !k.is_rcc())
                .map(|k| {
                    let tag = chorus_core::ClusterTag::of(config);
                    Adversary::new(k, id, keys[r as usize].clone(), tag, n, config.lanes())
                }),
            smart: smart(r, kind),
            rcc: rcc(r, kind),
            rcc_wake: None,
            clock: plan.clocks[r as usize],
            boot: chorus_core::Millis(0),
            store: Store::new(plan.compact_store),
            live: None,
            incarnation: 0,
            torn_after: None,
        }
    };
    let is_twin = |r: u32| plan.is_byzantine(ReplicaId(r)).is_some_and(FaultKind::is_twin);
    let mut nodes: Vec<SimNode<R>> = (0..n as u32)
        .map(|r| node(r, if is_twin(r) { 0 } else { side_of(r) }))
        .collect();
    nodes.extend((0..n as u32).filter(|r| is_twin(*r)).map(|r| node(r, 1)));
    nodes
}

/// Correct clients first (ids `0..clients`), then the Byzantine ones.
fn build_clients(
    opts: &SimOptions,
    config: &Arc<ClusterConfig>,
    plan: &Plan,
    keys: &[Identity],
) -> (Vec<SimClient>, Vec<ByzClient>) {
    let creds = |i: usize| Credentials::new(config, ClientId(i as u64), keys[i].clone());
    // Spread each client's requests over the fault window; under the
    // resource model a closed loop (a finished request's successor goes out
    // at once, with the others the same step frees: one write).
    let pacing_us = if opts.perf.is_some() {
        0
    } else {
        plan.heal_at_us / opts.requests_per_client as u64
    };
    let workload = opts
        .registry
        .get(&opts.service)
        .ok()
        .and_then(|e| e.workload.clone())
        .expect("validated: the service has a workload");
    let clients = (0..opts.clients as usize)
        .map(|i| {
            let (total, window) = (opts.requests_per_client, opts.client_window);
            let workload = if let Some(share) = opts.cross_partition {
                let partitions = if opts.mode == chorus_core::OrderingMode::Sarek {
                    config.lanes() as u16
                } else {
                    4
                };
                chorus_apps::kv_cross_partition_workload(share, partitions)
            } else if opts.mode == chorus_core::OrderingMode::Sarek && opts.service == "kv" {
                // sarek: a third of the requests are (mostly) cross-partition.
                std::sync::Arc::new(chorus_apps::kv_multi_key_workload) as chorus_apps::WorkloadFn
            } else {
                workload.clone()
            };
            let mut c = SimClient::new(creds(i), config.weak_quorum(), total, window, pacing_us)
                .with_workload(workload);
            if opts.perf.is_some() {
                // `--perf` needs `--faults none`: no message is lost.
                c = c.without_think_time().on_reliable_network();
            }
            if opts.leader_first {
                c = c.with_leader_first(config.clone());
            }
            if opts.few_replies {
                c = c.with_few_replies(config.n());
            }
            if config.params.mode == chorus_core::OrderingMode::Rcc {
                c.with_switching(config.lanes())
            } else {
                c
            }
        })
        .collect();
    let max_op_bytes = config.params.max_op_bytes as usize;
    let byz_clients = plan
        .byz_clients
        .iter()
        .enumerate()
        .map(|(j, kind)| ByzClient::new(creds(opts.clients as usize + j), *kind, config.n(), max_op_bytes))
        .collect();
    (clients, byz_clients)
}

/// Faults fixed by the plan, counted once per run.
fn planned_fault_counters(plan: &Plan) -> Counters {
    let mut counters = Counters::default();
    for (_, kind) in &plan.byzantine {
        counters.fault(byzantine_counter(*kind));
    }
    for p in &plan.partitions {
        counters.fault(match p.kind {
            PartitionKind::Symmetric => "partition",
            PartitionKind::OutboundBlocked | PartitionKind::InboundBlocked => "asym-partition",
        });
    }
    counters.fault_n(
        "clock-skew",
        plan.clocks.iter().filter(|c| !c.is_exact()).count() as u64,
    );
    counters
}

/// The event a replica's core is handling, with what it cost so far and what
/// it sends when done (resource model, `perf.rs`).
pub(crate) struct PerfCtx {
    pub node: usize,
    pub core: usize,
    pub ns: u64,
    pub exec_ns: u64,
    /// The delivered operations' conflicts (parallel executor model only).
    pub ops: Vec<crate::perf::Conflicts>,
    /// Whose each of `ops` is, to time its reply.
    pub op_ids: Vec<(chorus_core::ClientId, chorus_core::RequestSeq)>,
    pub sends: Vec<(Endpoint, Ev, usize)>,
}

fn ev_bytes(ev: &Ev) -> usize {
    match ev {
        Ev::Message { msg, .. } => chorus_core::encoded_len(msg),
        Ev::Request { request, .. } => chorus_core::encoded_len(request),
        Ev::Reply { reply, .. } => chorus_core::encoded_len(reply),
        Ev::RequestBundle { requests, .. } => requests.iter().map(chorus_core::encoded_len).sum(),
        Ev::ReplyBundle { replies, .. } => replies.iter().map(chorus_core::encoded_len).sum(),
        _ => 0,
    }
}

impl<R: SimReplica> World<R> {
    /// The replica core an event runs on, when the resource model is on.
    fn perf_target(&self, ev: &Ev) -> Option<(usize, usize)> {
        let perf = self.perf.as_ref()?;
        let pillars = self.config.lanes();
        let (node, lane) = match ev {
            Ev::Message { to, msg, .. } => (*to, msg.lane().map(|l| l.0)),
            // A client's requests arrive on its pillar's connection.
            Ev::Request { to, request } => (*to, Some((request.client.0 % u64::from(pillars.max(1))) as u32)),
            Ev::RequestBundle { to, requests } => (
                *to,
                requests
                    .first()
                    .map(|r| (r.client.0 % u64::from(pillars.max(1))) as u32),
            ),
            Ev::Timer { node, id, .. } => (
                *node,
                match id {
                    TimerId::ViewChange(l) | TimerId::Batch(l) => Some(l.0),
                    _ => None,
                },
            ),
            Ev::BurstEnd { node, .. } => (*node, None),
            // On shared cores the client runs on the same machine.
            Ev::Reply { .. } | Ev::ReplyBundle { .. } if perf.model.shared_cores.is_some() => (0, None),
            _ => return None,
        };
        Some((node, perf.core_for(node, lane, pillars)))
    }

    fn perf_base_cost(&self, ev: &Ev) -> u64 {
        let c = &self.perf.as_ref().expect("perf on").model.costs;
        match ev {
            Ev::Message { msg, .. } => c.receive(msg, ev_bytes(ev)),
            Ev::Request { .. } => c.recv_ns + c.admit_ns,
            Ev::Reply { .. } => c.client_reply_ns,
            Ev::RequestBundle { requests, .. } => (c.recv_ns + c.admit_ns) * requests.len() as u64,
            Ev::ReplyBundle { replies, .. } => c.client_reply_ns * replies.len() as u64,
            // Only its sends cost (charged as they are made).
            Ev::BurstEnd { .. } => 0,
            _ => c.timer_ns,
        }
    }

    /// Charge `ns` of CPU to the event being handled (if any).
    pub(crate) fn perf_charge(&mut self, ns: u64) {
        if let Some(ctx) = self.perf_ctx.as_mut() {
            ctx.ns += ns;
        }
    }

    /// Execution of `batch` by node `i`, within the event being handled.
    pub(crate) fn perf_execute(&mut self, i: usize, batch: &chorus_core::Batch) {
        let Some(perf) = self.perf.as_ref() else { return };
        let ops = batch.requests.len();
        let ns = perf.model.costs.execute_ns * ops as u64;
        let parallel = perf.model.exec_workers > 1;
        let waits = perf.model.service_wait_us > 0;
        let service = self.services.get(i).cloned().flatten();
        // SAREK §IV: one execution thread per partition; an operation holds
        // every partition it touches (a cross-border one waits for all of
        // them, its SYNCs), so it conflicts by partition, not by key.
        let partitions =
            (self.config.params.mode == chorus_core::OrderingMode::Sarek).then(|| self.config.lanes() as u16);
        let Some(ctx) = self.perf_ctx.as_mut() else { return };
        ctx.exec_ns += ns;
        if parallel || waits {
            for r in &batch.requests {
                ctx.op_ids.push((r.client, r.seq));
                ctx.ops.push(match service.as_ref().map(|s| s.access(&r.op)) {
                    Some(chorus_exec::Access::Keys { reads, writes }) => {
                        let keys = reads.into_iter().chain(writes);
                        match partitions {
                            Some(k) => {
                                let mut parts: Vec<bytes::Bytes> = keys
                                    .map(|key| {
                                        let p = chorus_exec::partitioned::partition_of_key(&key, k);
                                        bytes::Bytes::copy_from_slice(&p.0.to_le_bytes())
                                    })
                                    .collect();
                                parts.sort();
                                parts.dedup();
                                crate::perf::Conflicts::Keys(parts)
                            }
                            None => crate::perf::Conflicts::Keys(keys.collect()),
                        }
                    }
                    _ => crate::perf::Conflicts::Everything,
                });
            }
        }
    }

    /// The prices of a replica message about to be sent to `peers` peers,
    /// paid once (its signature, its batch digest).
    pub(crate) fn perf_charge_broadcast(&mut self, msg: &ReplicaMsg) {
        let Some(perf) = self.perf.as_ref() else { return };
        let ns = perf.model.costs.send(msg, 0, 0);
        self.perf_charge(ns);
    }

    fn perf_transmit(&mut self, from: Endpoint, to: Endpoint, ev: Ev) {
        let bytes = ev_bytes(&ev);
        let node = |e: Endpoint| match e {
            Endpoint::Node(i) => Some(i),
            Endpoint::Client(_) => None,
        };
        if let Some(ctx) = self.perf_ctx.as_mut() {
            if node(from) == Some(ctx.node) {
                let c = &self.perf.as_ref().expect("perf on").model.costs;
                ctx.ns += c.send_ns + c.per_kib_ns * bytes as u64 / 1024;
                ctx.sends.push((to, ev, bytes));
                return;
            }
        }
        let now = self.now_us();
        let at = self
            .perf
            .as_mut()
            .expect("perf on")
            .transfer(from, to, bytes, now);
        self.schedule(at, ev);
    }

    /// Book the handled event's CPU; its sends leave when the work is done.
    fn perf_finish(&mut self, started: Micros) {
        let Some(ctx) = self.perf_ctx.take() else { return };
        let perf = self.perf.as_mut().expect("perf on");
        let done = perf.book(
            ctx.node,
            crate::perf::Charge {
                core: ctx.core,
                ns: ctx.ns,
                exec_ns: ctx.exec_ns,
                ops: ctx.ops,
            },
            started,
        );
        // Modelled per operation: messages leave when the consensus work is
        // done, each reply when its operation finished.
        let per_op = perf.per_op.take().map(|(messages, ends)| {
            let replies: std::collections::BTreeMap<_, Micros> =
                ctx.op_ids.iter().copied().zip(ends).collect();
            (messages, replies)
        });
        // The replies of one event to one client travel as one bundle (one
        // write on that connection, as the runtime's executor answers a
        // batch), in the order they were sent, when the last of them is done.
        let mut bundles: Vec<(Endpoint, Micros, Vec<Reply>, usize)> = Vec::new();
        for (to, ev, bytes) in ctx.sends {
            let depart = match (&per_op, &ev) {
                (Some((_, replies)), Ev::Reply { reply, .. }) => {
                    replies.get(&(reply.client, reply.seq)).copied().unwrap_or(done)
                }
                (Some((messages, _)), _) => *messages,
                (None, _) => done,
            };
            if let Ev::Reply { reply, .. } = ev {
                match bundles.iter_mut().find(|(t, _, _, _)| *t == to) {
                    Some((_, d, replies, b)) => {
                        replies.push(reply);
                        *b += bytes;
                        *d = (*d).max(depart);
                    }
                    None => bundles.push((to, depart, vec![reply], bytes)),
                }
                continue;
            }
            let at =
                self.perf
                    .as_mut()
                    .expect("perf on")
                    .transfer(Endpoint::Node(ctx.node), to, bytes, depart);
            self.schedule(at, ev);
        }
        for (to, depart, mut replies, bytes) in bundles {
            let Endpoint::Client(client) = to else {
                unreachable!("replies go to clients")
            };
            let at =
                self.perf
                    .as_mut()
                    .expect("perf on")
                    .transfer(Endpoint::Node(ctx.node), to, bytes, depart);
            let ev = if replies.len() == 1 {
                Ev::Reply {
                    client,
                    reply: replies.pop().expect("one reply"),
                }
            } else {
                Ev::ReplyBundle { client, replies }
            };
            self.schedule(at, ev);
        }
    }
}

/// The options the simulator builds services with: the `sleep` service's
/// time is virtual (charged by the resource model), never slept for real.
fn sim_service_options(o: &ServiceOptions) -> ServiceOptions {
    ServiceOptions {
        sleep_us: 0,
        ..o.clone()
    }
}
