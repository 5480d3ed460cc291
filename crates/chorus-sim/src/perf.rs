//! The resource model (issue 15): CPU cores and NIC bandwidth per replica,
//! charged in virtual time, so the simulator predicts throughput and latency
//! on machines this one is not. Off by default: fault-finding runs keep
//! their zero-cost protocol steps.
//!
//! - **CPU.** Every event a replica handles (a peer message, a client
//!   request, a timer) runs on one core for a cost computed from what it
//!   carries and what the replica sent and delivered while handling it
//!   ([`CpuCosts`], calibrated from `cargo bench -p chorus-core --bench costs`
//!   and the runtime's per-operation CPU in `docs/performance.md`). Cores are
//!   taken in arrival order (FIFO per core): an event is handled when it
//!   arrives, but what it sends leaves only when its core has done the work
//!   queued before it and its own (delayed outputs; nothing is re-scheduled,
//!   so saturated runs stay cheap to simulate).
//! - **Where work runs.** With `consensus_on_pillars` (COP §4: each pillar a
//!   thread with its own lanes) a lane's messages and timers run on core
//!   `(lane mod pillars) mod cores`; without it (today's runtime, issue 13)
//!   all consensus runs on core 0. Execution runs on its own core (the last
//!   one) when there are at least two.
//! - **Execution.** The sequential executor is one thread: an operation's
//!   CPU (`execute_ns`) on the execution core, then its service wait
//!   (`service_wait_us`: the `sleep` service's time, CBASE §6.1.2, which
//!   holds the thread but no core). CBASE's parallel executor
//!   (`exec_workers` > 1): the execution thread inserts each operation into
//!   the dependency graph (`schedule_ns` on the execution core), and a worker
//!   runs it once every earlier conflicting operation finished (access sets
//!   from the service, CBASE §4) and a worker is free. Workers are threads;
//!   their CPU is assumed to find a core (choose `cores` accordingly). A
//!   batch's replies leave when its last operation finishes.
//! - **Shared cores.** `shared_cores = Some(c)`: every replica draws from one
//!   pool of `c` cores (this machine: 4 replicas and the client on 2 cores).
//! - **NIC.** A message occupies its sender's outgoing link and its
//!   receiver's incoming link for `size / bandwidth`.

use crate::net::Endpoint;
use crate::queue::Micros;
use chorus_core::{Batch, ReplicaMsg};

/// CPU prices in nanoseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuCosts {
    /// Receiving one message: syscall share, framing, decode, thread hop.
    pub recv_ns: u64,
    /// Sending one message to one peer or client: encode, MAC, syscall share.
    pub send_ns: u64,
    /// Per KiB received or sent (codec and hashing).
    pub per_kib_ns: u64,
    /// Ed25519 sign and verify (BENCHMARKS.md "per-step CPU prices").
    pub sign_ns: u64,
    pub verify_ns: u64,
    /// One request inside a proposed or received batch: its MAC check and
    /// its share of the batch digest.
    pub per_batched_request_ns: u64,
    /// Admitting one client request (decode, authenticator, pool).
    pub admit_ns: u64,
    /// Executing one operation (the service) and building its reply.
    pub execute_ns: u64,
    /// CBASE's parallel executor: inserting one operation into the
    /// dependency graph and handing it to a worker (BENCHMARKS.md "CBASE
    /// Fig. 4": ~0.4 µs more per request than the sequential executor).
    pub schedule_ns: u64,
    /// A timer firing.
    pub timer_ns: u64,
    /// One DBFT message inside a bundle (`dispel`): decode, the engine's
    /// handling (`cargo bench -p chorus-dbft --bench engine`: ~80 ns per
    /// message at n = 64) and its share of the logged input. The bundle
    /// itself pays `recv_ns` once, as any frame.
    pub dbft_msg_ns: u64,
    /// A client handling one reply (only charged on shared cores, where the
    /// client runs on the replicas' machine).
    pub client_reply_ns: u64,
}

impl Default for CpuCosts {
    /// Calibrated on the 2-core development machine (BENCHMARKS.md,
    /// "Resource model calibration"; refitted 2026-11-26 after the
    /// write-ahead log, the outbox stage and the idle-leader rule made the
    /// replica cheaper per message: 24 price sets tried against two real
    /// rounds of the four calibration runs, checked on a fifth, unfitted
    /// configuration, cop with 4 pillars).
    fn default() -> Self {
        CpuCosts {
            recv_ns: 3_000,
            send_ns: 1_500,
            per_kib_ns: 1_500,
            sign_ns: 34_000,
            verify_ns: 81_000,
            per_batched_request_ns: 800,
            admit_ns: 1_000,
            // kv; `for_service("null")` is 0.3 µs.
            execute_ns: 8_000,
            schedule_ns: 450,
            timer_ns: 2_000,
            dbft_msg_ns: 200,
            client_reply_ns: 2_000,
        }
    }
}

impl CpuCosts {
    /// The defaults with the execution price of a built-in service.
    pub fn for_service(service: &str) -> CpuCosts {
        let d = CpuCosts::default();
        match service {
            "null" => CpuCosts { execute_ns: 300, ..d },
            // The service time is a wait (`PerfModel::service_wait_us`).
            "sleep" => CpuCosts { execute_ns: 300, ..d },
            _ => d,
        }
    }

    /// `key=ns,...` overrides (`chorus sim --perf --cost recv_ns=5000`).
    pub fn with_overrides(mut self, spec: &str) -> Result<CpuCosts, String> {
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: want key=ns"))?;
            let v: u64 = v.trim().parse().map_err(|e| format!("{part:?}: {e}"))?;
            let slot = match k.trim() {
                "recv_ns" => &mut self.recv_ns,
                "send_ns" => &mut self.send_ns,
                "per_kib_ns" => &mut self.per_kib_ns,
                "sign_ns" => &mut self.sign_ns,
                "verify_ns" => &mut self.verify_ns,
                "per_batched_request_ns" => &mut self.per_batched_request_ns,
                "admit_ns" => &mut self.admit_ns,
                "execute_ns" => &mut self.execute_ns,
                "schedule_ns" => &mut self.schedule_ns,
                "timer_ns" => &mut self.timer_ns,
                "dbft_msg_ns" => &mut self.dbft_msg_ns,
                "client_reply_ns" => &mut self.client_reply_ns,
                other => return Err(format!("unknown cost {other:?}")),
            };
            *slot = v;
        }
        Ok(self)
    }
}

/// The resource model's settings (`chorus sim --perf`).
#[derive(Clone, Debug, PartialEq)]
pub struct PerfModel {
    /// Cores per replica (ignored with `shared_cores`).
    pub cores: u32,
    /// All replicas share this many cores (this machine: 2).
    pub shared_cores: Option<u32>,
    /// COP §4: a lane's consensus runs on its pillar's core.
    pub consensus_on_pillars: bool,
    /// NIC bandwidth per replica and direction, Mbit/s (0: unlimited).
    pub nic_mbit: u64,
    /// One-way latency of every replica-to-replica link, µs (replaces the
    /// fault model's).
    pub link_latency_us: u64,
    /// One-way latency between clients and replicas, µs (`None`: as
    /// `link_latency_us`). A WAN between replicas with clients near them is
    /// Dispel §5's setting.
    pub client_link_us: Option<u64>,
    /// Regions (a one-way latency matrix in µs, square): replica `i` and
    /// client `c` sit in region `i mod R` and `c mod R`; every link, client
    /// links included, takes its regions' latency instead of the two above.
    pub regions: Option<Vec<Vec<u64>>>,
    /// Worker threads of CBASE's parallel executor; 1: the sequential one.
    pub exec_workers: u32,
    /// Time an operation waits without using a core (`sleep`: its service time).
    pub service_wait_us: u64,
    pub costs: CpuCosts,
}

impl Default for PerfModel {
    fn default() -> Self {
        PerfModel {
            cores: 2,
            shared_cores: None,
            consensus_on_pillars: false,
            nic_mbit: 10_000,
            link_latency_us: 50,
            client_link_us: None,
            regions: None,
            exec_workers: 1,
            service_wait_us: 0,
            costs: CpuCosts::default(),
        }
    }
}

/// What one handled event cost, and on which core.
#[derive(Clone, Debug, Default)]
pub struct Charge {
    pub core: usize,
    pub ns: u64,
    /// Execution work (on the execution core), ns.
    pub exec_ns: u64,
    /// Operations delivered, with what each conflicts on (CBASE §4).
    pub ops: Vec<Conflicts>,
}

/// What an operation conflicts with (`chorus_exec::Access`, without reads
/// and writes told apart: the model treats every access as a write).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Conflicts {
    Everything,
    Keys(Vec<bytes::Bytes>),
}

/// Keys remembered per replica before finished ones are forgotten.
const KEYS_MAX: usize = 100_000;

/// One replica's execution: its thread and, for the parallel executor, its
/// workers and the last finish time of each key.
#[derive(Clone, Debug, Default)]
struct ExecTimes {
    /// The execution thread (sequential executor, or the graph scheduler).
    thread_free: Micros,
    /// Each worker's booked intervals `[start, end)`, sorted, disjoint;
    /// ones that ended before the scheduler's time are dropped.
    workers: Vec<Vec<(Micros, Micros)>>,
    keys: std::collections::HashMap<bytes::Bytes, Micros>,
    /// End of the last operation that conflicts with everything.
    barrier: Micros,
    /// End of the latest operation.
    latest: Micros,
}

/// Busy-until times of every core and NIC.
#[derive(Clone, Debug)]
pub struct PerfState {
    pub model: PerfModel,
    /// Per replica node, per core: busy until (µs); one row when shared.
    cores: Vec<Vec<Micros>>,
    nic_out: Vec<Micros>,
    nic_in: Vec<Micros>,
    exec: Vec<ExecTimes>,
    /// Set by `book` when it modelled each operation on its own (service
    /// waits, or the parallel executor): when the consensus work was done
    /// (what the event's messages wait for) and when each operation of
    /// `Charge::ops` finished (what its reply waits for).
    pub per_op: Option<(Micros, Vec<Micros>)>,
    /// Total CPU charged, ns (for the report).
    pub cpu_ns: u64,
}

impl PerfState {
    pub fn new(model: PerfModel, nodes: usize) -> PerfState {
        let rows = if model.shared_cores.is_some() { 1 } else { nodes };
        let per = model.shared_cores.unwrap_or(model.cores).max(1) as usize;
        PerfState {
            cores: vec![vec![0; per]; rows],
            nic_out: vec![0; nodes],
            nic_in: vec![0; nodes],
            exec: vec![ExecTimes::default(); nodes],
            per_op: None,
            model,
            cpu_ns: 0,
        }
    }

    fn cores_of(&self, node: usize) -> &[Micros] {
        &self.cores[if self.model.shared_cores.is_some() {
            0
        } else {
            node
        }]
    }

    fn cores_of_mut(&mut self, node: usize) -> &mut Vec<Micros> {
        let row = if self.model.shared_cores.is_some() {
            0
        } else {
            node
        };
        &mut self.cores[row]
    }

    /// The core a replica's work of `lane` runs on (`None`: not lane work).
    pub fn core_for(&self, node: usize, lane: Option<u32>, pillars: u32) -> usize {
        let cores = self.cores_of(node);
        if self.model.shared_cores.is_some() {
            // Any free core of the pool: the earliest free one.
            return (0..cores.len()).min_by_key(|&c| cores[c]).unwrap_or(0);
        }
        match lane {
            Some(l) if self.model.consensus_on_pillars => {
                chorus_core::config::pillar_of_lane(chorus_core::LaneId(l), pillars as usize)
                    % consensus_cores(cores.len())
            }
            _ => 0,
        }
    }

    /// When an event for `node` on `core` arriving at `now` may start.
    pub fn start_at(&self, node: usize, core: usize, now: Micros) -> Micros {
        self.cores_of(node).get(core).copied().unwrap_or(0).max(now)
    }

    /// Book the work of an event started at `now`; returns when its sends
    /// leave (the end of the consensus work, and of execution if any ran).
    pub fn book(&mut self, node: usize, charge: Charge, now: Micros) -> Micros {
        self.cpu_ns += charge.ns + charge.exec_ns;
        self.per_op = None;
        let wait = self.model.service_wait_us;
        let workers = self.model.exec_workers.max(1) as usize;
        let schedule_ns = self.model.costs.schedule_ns;
        let per_op_ns = self.model.costs.execute_ns;
        let cores = self.cores_of_mut(node);
        let n = cores.len();
        let done = now + charge.ns.div_ceil(1_000);
        cores[charge.core.min(n - 1)] = done;
        if charge.exec_ns == 0 && charge.ops.is_empty() {
            return done;
        }
        // Execution: on the last core when there are two or more (the
        // runtime's execution thread), after the consensus work handed it on.
        let exec_core = if n >= 2 { n - 1 } else { 0 };
        let ops = charge.ops.len() as u64;
        if workers == 1 || charge.ops.is_empty() {
            let thread_free = self.exec[node].thread_free;
            let cores = self.cores_of_mut(node);
            let start = cores[exec_core].max(done).max(thread_free);
            let cpu_end = start + charge.exec_ns.div_ceil(1_000);
            cores[exec_core] = cpu_end;
            // The service waits hold the thread, not the core.
            let end = cpu_end + wait * ops;
            self.exec[node].thread_free = end;
            if !charge.ops.is_empty() {
                let each = per_op_ns.div_ceil(1_000) + wait;
                let ends = (1..=ops).map(|k| start + k * each).collect();
                self.per_op = Some((done, ends));
            }
            return end;
        }
        // CBASE: the scheduler inserts each operation (on the execution
        // core), a free worker runs it after its conflicting predecessors.
        self.cpu_ns += schedule_ns * ops;
        let thread_free = self.exec[node].thread_free;
        let cores = self.cores_of_mut(node);
        let start_ns = cores[exec_core].max(done).max(thread_free) * 1_000;
        let mut t_ns = start_ns;
        let mut batch_end = done;
        let mut ends = Vec::with_capacity(charge.ops.len());
        let st = &mut self.exec[node];
        if st.workers.len() != workers {
            st.workers = vec![Vec::new(); workers];
        }
        let now_us = start_ns / 1_000;
        for w in &mut st.workers {
            w.retain(|&(_, end)| end > now_us);
        }
        let d = per_op_ns.div_ceil(1_000) + wait;
        for op in &charge.ops {
            t_ns += schedule_ns;
            let inserted = t_ns.div_ceil(1_000);
            let ready = match op {
                Conflicts::Everything => inserted.max(st.latest),
                Conflicts::Keys(keys) => keys
                    .iter()
                    .filter_map(|k| st.keys.get(k).copied())
                    .fold(inserted.max(st.barrier), Micros::max),
            };
            // The graph hands workers only operations that are ready, in the
            // order they become ready: book the earliest gap of any worker
            // at or after `ready` (an operation waiting on its key holds no
            // worker meanwhile).
            let (w, start) = st
                .workers
                .iter()
                .map(|booked| earliest_gap(booked, ready, d))
                .enumerate()
                .min_by_key(|&(_, t)| t)
                .expect("at least one worker");
            let end = start + d;
            let booked = &mut st.workers[w];
            let at = booked.partition_point(|&(s, _)| s < start);
            booked.insert(at, (start, end));
            match op {
                Conflicts::Everything => st.barrier = end,
                Conflicts::Keys(keys) => {
                    for k in keys {
                        st.keys.insert(k.clone(), end);
                    }
                }
            }
            st.latest = st.latest.max(end);
            batch_end = batch_end.max(end);
            ends.push(end);
        }
        if st.keys.len() > KEYS_MAX {
            st.keys.retain(|_, end| *end > now_us);
        }
        let sched_end = t_ns.div_ceil(1_000);
        st.thread_free = sched_end;
        let cores = self.cores_of_mut(node);
        cores[exec_core] = cores[exec_core].max(sched_end);
        self.per_op = Some((done, ends));
        batch_end
    }

    /// A message of `bytes` from `from` to `to` leaving at `depart`: when it
    /// arrives. Replica NICs are modelled; clients' are not.
    pub fn transfer(&mut self, from: Endpoint, to: Endpoint, bytes: usize, depart: Micros) -> Micros {
        let wire = if self.model.nic_mbit == 0 {
            0
        } else {
            // bits / (Mbit/s) = µs
            (bytes as u64 * 8).div_ceil(self.model.nic_mbit)
        };
        let mut t = depart;
        if let Endpoint::Node(f) = from {
            t = t.max(self.nic_out[f]) + wire;
            self.nic_out[f] = t;
        }
        t += self.latency(from, to);
        if let Endpoint::Node(r) = to {
            t = t.max(self.nic_in[r]) + wire;
            self.nic_in[r] = t;
        }
        t
    }

    fn latency(&self, from: Endpoint, to: Endpoint) -> Micros {
        if let Some(m) = &self.model.regions {
            let region = |e: Endpoint| match e {
                Endpoint::Node(i) => i % m.len(),
                Endpoint::Client(c) => c % m.len(),
            };
            return m[region(from)][region(to)];
        }
        match (from, to) {
            (Endpoint::Node(_), Endpoint::Node(_)) => self.model.link_latency_us,
            _ => self.model.client_link_us.unwrap_or(self.model.link_latency_us),
        }
    }
}

/// Dispel §5 Table 1: round trips between its four European regions
/// (Frankfurt, Ireland, London, Paris) in ms, as one-way µs (half), and a
/// 100 µs link inside a region.
pub fn europe() -> Vec<Vec<u64>> {
    let rtt_ms: [[u64; 4]; 4] = [[0, 25, 14, 8], [25, 0, 10, 19], [14, 10, 0, 7], [8, 19, 7, 0]];
    one_way_us(&rtt_ms)
}

/// A 10-region WAN: average round trips in ms between AWS regions (N.
/// Virginia, N. California, Oregon, Ireland, Frankfurt, Tokyo, Seoul,
/// Singapore, Sydney, São Paulo) as published in 2017 ("Latency Between
/// AWS Global Regions", tabulated in "A computer scientist learns AWS:
/// AWS Regions"), made symmetric (the mean of both directions, rounded);
/// one-way µs is half, 100 µs inside a region.
pub fn world10() -> Vec<Vec<u64>> {
    let rtt_ms: [[u64; 10]; 10] = [
        [0, 72, 88, 81, 89, 145, 178, 217, 230, 120],
        [72, 0, 19, 153, 167, 103, 132, 174, 158, 193],
        [88, 19, 0, 137, 160, 89, 118, 161, 162, 183],
        [81, 153, 137, 0, 20, 212, 242, 239, 310, 191],
        [89, 167, 160, 20, 0, 237, 266, 326, 323, 195],
        [145, 103, 89, 212, 237, 0, 31, 74, 104, 257],
        [178, 132, 118, 242, 266, 31, 0, 72, 134, 286],
        [217, 174, 161, 239, 326, 74, 72, 0, 175, 328],
        [230, 158, 162, 310, 323, 104, 134, 175, 0, 323],
        [120, 193, 183, 191, 195, 257, 286, 328, 323, 0],
    ];
    one_way_us(&rtt_ms)
}

/// Round trips in ms as one-way latencies in µs (half), and 100 µs for a
/// link inside a region (a 0 round trip).
fn one_way_us<const N: usize>(rtt_ms: &[[u64; N]; N]) -> Vec<Vec<u64>> {
    rtt_ms
        .iter()
        .map(|row| {
            row.iter()
                .map(|&ms| if ms == 0 { 100 } else { ms * 500 })
                .collect()
        })
        .collect()
}

/// Cores consensus may use when execution has its own (the last one).
fn consensus_cores(cores: usize) -> usize {
    if cores >= 2 {
        cores - 1
    } else {
        1
    }
}

/// What an unsigned prepare carries in its signature field (`PrepareAuth::Mac`).
const UNSIGNED: chorus_core::Signature = chorus_core::Signature([0; 64]);

/// Signatures a message makes its receiver verify.
fn verifies(msg: &ReplicaMsg) -> u64 {
    match msg {
        // `PrepareAuth::Mac`: the channel's MAC (in `recv_ns`) is all.
        ReplicaMsg::Prepare(p) if p.sig == UNSIGNED => 0,
        ReplicaMsg::PrePrepare(_)
        | ReplicaMsg::Prepare(_)
        | ReplicaMsg::Checkpoint(_)
        | ReplicaMsg::Timeout(_) => 1,
        ReplicaMsg::ViewChange(v) => {
            1 + v
                .prepared
                .iter()
                .map(|p| 1 + p.prepares.len() as u64)
                .sum::<u64>()
        }
        ReplicaMsg::NewView(v) => 1 + v.view_changes.len() as u64,
        ReplicaMsg::StateChunk(c) => c.cert.votes.len() as u64,
        ReplicaMsg::RePredict(_) => 1,
        _ => 0,
    }
}

/// Signatures a replica makes to send `msg` (once per broadcast).
pub fn signs(msg: &ReplicaMsg) -> u64 {
    match msg {
        ReplicaMsg::Prepare(p) if p.sig == UNSIGNED => 0,
        ReplicaMsg::PrePrepare(_)
        | ReplicaMsg::Prepare(_)
        | ReplicaMsg::Checkpoint(_)
        | ReplicaMsg::Timeout(_)
        | ReplicaMsg::ViewChange(_)
        | ReplicaMsg::NewView(_)
        | ReplicaMsg::RePredict(_) => 1,
        _ => 0,
    }
}

/// Items handled one by one inside a message: a batch's requests, a status
/// bundle's lane entries (each handled as its lane's `Status`).
fn items_of(msg: &ReplicaMsg) -> u64 {
    match msg {
        ReplicaMsg::Statuses(b) => b.lanes.len() as u64,
        other => batch_of(other).map_or(0, |b| b.requests.len() as u64),
    }
}

fn batch_of(msg: &ReplicaMsg) -> Option<&Batch> {
    match msg {
        ReplicaMsg::PrePrepare(p) => Some(&p.batch),
        ReplicaMsg::BatchReply(b) => Some(&b.batch),
        _ => None,
    }
}

/// DBFT messages in a `dispel` frame: the bundle's length prefix (a
/// postcard varint), without decoding the rest.
fn dbft_msgs_of(msg: &ReplicaMsg) -> u64 {
    let ReplicaMsg::Dbft(w) = msg else { return 0 };
    // A corrupted prefix costs what the receiver's precheck costs.
    match chorus_dbft::DbftBundle::peek_len(&w.bytes) {
        Some(k) if k <= chorus_dbft::MAX_BUNDLE_MSGS => k as u64,
        _ => 0,
    }
}

impl CpuCosts {
    /// Receiving `msg` of `bytes`.
    pub fn receive(&self, msg: &ReplicaMsg, bytes: usize) -> u64 {
        let batched = items_of(msg);
        self.recv_ns
            + self.per_kib_ns * bytes as u64 / 1024
            + self.verify_ns * verifies(msg)
            + self.per_batched_request_ns * batched
            + self.dbft_msg_ns * dbft_msgs_of(msg)
    }

    /// Sending `msg` of `bytes` to `peers` peers (signed once).
    pub fn send(&self, msg: &ReplicaMsg, bytes: usize, peers: usize) -> u64 {
        let batched = batch_of(msg).map_or(0, |b| b.requests.len() as u64);
        self.sign_ns * signs(msg)
            + self.per_batched_request_ns * batched
            + self.dbft_msg_ns * dbft_msgs_of(msg)
            + (self.send_ns + self.per_kib_ns * bytes as u64 / 1024) * peers as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dispel bundle pays one frame and a small price per message in it,
    /// read from its length prefix.
    #[test]
    fn a_dbft_bundle_costs_one_frame_plus_its_messages() {
        use chorus_dbft::{BinMsg, DbftBundle, DbftMsg, InstanceId};
        let c = CpuCosts::default();
        let vote = |slot| DbftMsg::Bin {
            inst: InstanceId {
                epoch: 1,
                slot: chorus_core::ReplicaId(slot),
            },
            msg: BinMsg::Decided { value: true },
        };
        for k in [1u32, 2, 127, 128, 300] {
            let msgs: Vec<DbftMsg> = (0..k).map(vote).collect();
            let m = ReplicaMsg::Dbft(chorus_core::DbftWire {
                bytes: DbftBundle::encode(&msgs).into(),
            });
            assert_eq!(dbft_msgs_of(&m), u64::from(k));
            assert_eq!(c.receive(&m, 0), c.recv_ns + c.dbft_msg_ns * u64::from(k));
        }
    }

    #[test]
    fn after_a_crash_the_rate_and_the_longest_pause_are_measured_from_it() {
        // 10 before 1 s, then nothing for 0.4 s, then 20 in 0.6 s.
        let mut at: Vec<Micros> = (0..10).map(|k| k * 100_000).collect();
        at.extend((1..=20).map(|k| 1_400_000 + k * 30_000));
        let c = AfterCrash::of(1_000_000, &at);
        assert_eq!(c.throughput_before, 10.0);
        assert_eq!(c.longest_pause_us, 430_000);
        assert!((c.throughput_after - 20.0 / 1.0).abs() < 1e-9, "{c:?}");
        let none = AfterCrash::of(5_000_000, &at);
        assert_eq!(none.throughput_after, 0.0);
        assert_eq!(none.longest_pause_us, 0);
    }

    #[test]
    fn a_busy_core_delays_the_next_event_and_execution_has_its_own_core() {
        let mut s = PerfState::new(
            PerfModel {
                cores: 2,
                ..PerfModel::default()
            },
            4,
        );
        let c = s.core_for(0, Some(0), 1);
        assert_eq!(c, 0);
        let done = s.book(
            0,
            Charge {
                core: 0,
                ns: 10_000,
                exec_ns: 5_000,
                ..Charge::default()
            },
            100,
        );
        assert_eq!(done, 115, "consensus 10 µs, then execution 5 µs on core 1");
        assert_eq!(s.start_at(0, 0, 105), 110, "core 0 busy until 110");
        assert_eq!(s.start_at(1, 0, 105), 105, "another replica's core is free");
    }

    /// CBASE: with 4 workers and 1 ms waits, four operations on distinct
    /// keys finish together; a fifth on a key already taken waits for it,
    /// and one that conflicts with everything waits for all. The
    /// sequential executor runs them one after another.
    #[test]
    fn parallel_execution_overlaps_only_non_conflicting_operations() {
        let key = |k: &str| Conflicts::Keys(vec![bytes::Bytes::copy_from_slice(k.as_bytes())]);
        let ops = vec![
            key("a"),
            key("b"),
            key("c"),
            key("d"),
            key("a"),
            Conflicts::Everything,
        ];
        let run = |workers: u32| {
            let mut s = PerfState::new(
                PerfModel {
                    cores: 2,
                    exec_workers: workers,
                    service_wait_us: 1_000,
                    costs: CpuCosts {
                        execute_ns: 0,
                        schedule_ns: 1_000,
                        ..CpuCosts::default()
                    },
                    ..PerfModel::default()
                },
                1,
            );
            let charge = Charge {
                core: 0,
                ns: 0,
                exec_ns: 0,
                ops: ops.clone(),
            };
            let end = s.book(0, charge, 0);
            (end, s.per_op)
        };
        // Inserted at 1..=6 µs: a b c d start at 1, 2, 3, 4 and end 1 ms
        // later; the second `a` starts when the first ends (1 001); the
        // barrier waits for the latest (2 001).
        assert_eq!(
            run(4),
            (3_001, Some((0, vec![1_001, 1_002, 1_003, 1_004, 2_001, 3_001]))),
            "each reply leaves when its own operation ends; messages at once"
        );
        assert_eq!(run(1).0, 6_000, "sequential: six waits in a row");
    }

    #[test]
    fn the_world_matrix_is_square_symmetric_and_local_inside_a_region() {
        let m = world10();
        assert_eq!(m.len(), 10);
        for (i, row) in m.iter().enumerate() {
            assert_eq!(row.len(), 10);
            assert_eq!(row[i], 100);
            for (j, &v) in row.iter().enumerate() {
                assert_eq!(v, m[j][i], "{i}->{j}");
            }
        }
        assert_eq!(m[3][4], 10_000, "Ireland-Frankfurt: 20 ms round trip");
        let e = europe();
        assert_eq!(
            (e[0][0], e[0][1], e[2][3]),
            (100, 12_500, 3_500),
            "Dispel Table 1"
        );
    }

    #[test]
    fn pillars_spread_lanes_over_cores_only_with_consensus_on_pillars() {
        let model = PerfModel {
            cores: 5,
            ..PerfModel::default()
        };
        let s = PerfState::new(model.clone(), 1);
        assert_eq!(
            (0..4).map(|l| s.core_for(0, Some(l), 4)).collect::<Vec<_>>(),
            vec![0; 4]
        );
        let s = PerfState::new(
            PerfModel {
                consensus_on_pillars: true,
                ..model
            },
            1,
        );
        assert_eq!(
            (0..4).map(|l| s.core_for(0, Some(l), 4)).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
    }

    #[test]
    fn regions_give_every_link_its_regions_latency() {
        let s = PerfState::new(
            PerfModel {
                regions: Some(europe()),
                nic_mbit: 0,
                ..PerfModel::default()
            },
            8,
        );
        // Replica 0 in Frankfurt, 1 in Ireland (25 ms round trip), 4 in Frankfurt.
        assert_eq!(s.latency(Endpoint::Node(0), Endpoint::Node(1)), 12_500);
        assert_eq!(s.latency(Endpoint::Node(0), Endpoint::Node(4)), 100);
        assert_eq!(
            s.latency(Endpoint::Client(3), Endpoint::Node(2)),
            3_500,
            "Paris to London"
        );
        let m = europe();
        assert!((0..4).all(|i| (0..4).all(|j| m[i][j] == m[j][i])));
    }

    #[test]
    fn a_nic_serialises_messages() {
        let mut s = PerfState::new(
            PerfModel {
                nic_mbit: 1_000,
                link_latency_us: 10,
                ..PerfModel::default()
            },
            2,
        );
        // 125 000 bytes at 1 Gbit/s = 1 000 µs on each NIC.
        assert_eq!(
            s.transfer(Endpoint::Node(0), Endpoint::Node(1), 125_000, 0),
            2_010
        );
        assert_eq!(
            s.transfer(Endpoint::Node(0), Endpoint::Node(1), 125_000, 0),
            3_010,
            "queued behind the first"
        );
    }
}

/// What a run under the resource model measured.
#[derive(Clone, Debug, PartialEq)]
pub struct PerfReport {
    /// Accepted requests per virtual second, from the start to the last
    /// acceptance.
    pub throughput: f64,
    pub p50_us: Micros,
    pub p99_us: Micros,
    pub accepted: usize,
    /// CPU charged per accepted request, summed over replicas, µs.
    pub cpu_us_per_request: f64,
    /// Under `--perf-crash`: what followed the crash.
    pub after_crash: Option<AfterCrash>,
}

/// The run after one replica crashed for good (Dispel §5.6).
#[derive(Clone, Debug, PartialEq)]
pub struct AfterCrash {
    /// Accepted requests per virtual second before the crash (from the start).
    pub throughput_before: f64,
    /// From the crash to the last acceptance.
    pub throughput_after: f64,
    /// The longest time after the crash with no request accepted (a leader's
    /// crash: the view change), µs.
    pub longest_pause_us: Micros,
}

impl AfterCrash {
    /// `accepted_at`: acceptance times in order.
    pub fn of(crash_us: Micros, accepted_at: &[Micros]) -> AfterCrash {
        let split = accepted_at.partition_point(|&t| t < crash_us);
        let (before, after) = accepted_at.split_at(split);
        let last = after.last().copied().unwrap_or(crash_us);
        let mut pause = 0;
        let mut prev = crash_us;
        for &t in after {
            pause = pause.max(t.saturating_sub(prev));
            prev = t;
        }
        AfterCrash {
            throughput_before: before.len() as f64 / (crash_us.max(1) as f64 / 1e6),
            throughput_after: after.len() as f64 / (last.saturating_sub(crash_us).max(1) as f64 / 1e6),
            longest_pause_us: pause,
        }
    }
}

impl PerfReport {
    pub fn of(
        state: &PerfState,
        latencies: &[Micros],
        last_accept_us: Micros,
        crash: Option<(Micros, &[Micros])>,
    ) -> PerfReport {
        let mut l = latencies.to_vec();
        l.sort_unstable();
        let pct = |p: f64| -> Micros {
            if l.is_empty() {
                0
            } else {
                l[((l.len() - 1) as f64 * p).round() as usize]
            }
        };
        let secs = last_accept_us.max(1) as f64 / 1e6;
        PerfReport {
            throughput: l.len() as f64 / secs,
            p50_us: pct(0.5),
            p99_us: pct(0.99),
            accepted: l.len(),
            cpu_us_per_request: state.cpu_ns as f64 / 1e3 / l.len().max(1) as f64,
            after_crash: crash.map(|(at, times)| AfterCrash::of(at, times)),
        }
    }
}

/// The earliest `t >= ready` with `[t, t + d)` free among `booked` (sorted,
/// disjoint intervals).
fn earliest_gap(booked: &[(Micros, Micros)], ready: Micros, d: Micros) -> Micros {
    let mut t = ready;
    for &(start, end) in booked {
        if end <= t {
            continue;
        }
        if start >= t + d {
            break;
        }
        t = end;
    }
    t
}
