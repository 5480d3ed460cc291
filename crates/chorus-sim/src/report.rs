//! What one run and many runs report: violations with the command that replays
//! them, counters, and a trace digest that proves a replay is exact.

use crate::faults::{FaultKind, FaultSet};
use crate::queue::Micros;
use crate::stats::Counters;
use chorus_core::Digest;
use std::fmt;

/// The property a violation breaks.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ViolationKind {
    /// Two correct replicas delivered different batches at one position.
    Agreement,
    /// A delivered request was never issued, or was issued with a bad
    /// authenticator or over the size limit.
    Validity,
    /// A request executed twice (not as a duplicate) at one replica, or at
    /// different positions on different replicas.
    ExactlyOnce,
    /// Different state (or results) at the same position.
    StateDigest,
    /// A correct client's request did not complete in time after faults stopped.
    Liveness,
    /// A client accepted a result that no correct replica computed.
    ClientResult,
    /// A correct replica sent a reply whose result is not the one correct
    /// replicas computed for that request (issue 8 finding 6: a reply from a
    /// client table restored out of an unverified snapshot).
    ReplyResult,
    /// The delivery contract was broken (gaps, wrong cell, executor mismatch).
    Delivery,
    /// The code under test panicked.
    Panic,
    /// A correct new-view primary re-proposed a slot outside its own window
    /// after entering the view: it can never pre-prepare it (PBFT §4.4;
    /// issue 8 finding 8).
    NewViewWindow,
    /// A replica holds requests that can never leave its pool (in flight at
    /// a decided slot): bounded memory would fill up and admission stall.
    PoolLeak,
    /// At the end of a run correct replicas are not all active in one view
    /// of every lane (a replica left alone in another view).
    ViewSplit,
    /// rcc: while one instance was stopped, the others decided at less than
    /// `rcc_stats::WAIT_FREE_MIN_RATIO` of their rate before (RCC §III-C).
    WaitFree,
    /// rcc: one client's requests were proposed by two instances in one
    /// round (RCC §III-E: a SWITCHINSTANCE hands a client over without
    /// overlap).
    TwoLanes,
    /// Checked mode: an operation touched a key outside its declared access
    /// set (CBASE §4 would run it beside a conflicting one).
    AccessSet,
    /// The service's own invariant (`ServiceEntry::invariant`) failed on a
    /// correct replica's state.
    ServiceInvariant,
    /// sarek: a partitioned executor's run is not a serial execution
    /// consistent with its streams (cross-border atomicity broken: an EXEC
    /// ran ahead of a partition's earlier requests, a SYNC was passed before
    /// its EXEC ran, a sub-request consumed twice or never).
    SerialOrder,
}

impl ViolationKind {
    /// Safety properties: once broken, no later step can repair them.
    pub fn is_safety(self) -> bool {
        !matches!(
            self,
            ViolationKind::Liveness
                | ViolationKind::Panic
                | ViolationKind::NewViewWindow
                | ViolationKind::ViewSplit
                | ViolationKind::WaitFree
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            ViolationKind::Agreement => "agreement",
            ViolationKind::Validity => "validity",
            ViolationKind::ExactlyOnce => "exactly-once",
            ViolationKind::StateDigest => "state-digest",
            ViolationKind::Liveness => "liveness",
            ViolationKind::ClientResult => "client-result",
            ViolationKind::ReplyResult => "reply-result",
            ViolationKind::Delivery => "delivery",
            ViolationKind::Panic => "panic",
            ViolationKind::NewViewWindow => "new-view-window",
            ViolationKind::PoolLeak => "pool-leak",
            ViolationKind::ViewSplit => "view-split",
            ViolationKind::WaitFree => "wait-free",
            ViolationKind::TwoLanes => "two-lanes",
            ViolationKind::AccessSet => "access-set",
            ViolationKind::ServiceInvariant => "service-invariant",
            ViolationKind::SerialOrder => "serial-order",
        }
    }
}

impl fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub kind: ViolationKind,
    /// Virtual time at which it was detected.
    pub at_us: Micros,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{} at {:.3}s] {}",
            self.kind,
            self.at_us as f64 / 1e6,
            self.detail
        )
    }
}

/// The outcome of one seed.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// The resource model's measurement (`SimOptions::perf`).
    pub perf: Option<crate::perf::PerfReport>,
    pub seed: u64,
    /// The fault kinds this seed drew (a subset of the options' set: swarm testing).
    pub faults_drawn: FaultSet,
    /// The drawn kinds that injected something (`checker_extra::active_kinds`).
    pub faults_active: FaultSet,
    /// Events the run processed.
    pub events: u64,
    /// The rest of what the seed drew (client auth, leader rotation, storage).
    pub setup: String,
    /// Byzantine replicas and their behaviour, e.g. `r1=equivocate`.
    pub byzantine: Vec<String>,
    pub virtual_us: Micros,
    pub counters: Counters,
    /// Requests issued and completed by correct clients.
    pub requests_issued: u64,
    pub requests_committed: u64,
    /// Highest position delivered by any correct replica.
    pub delivered_positions: u64,
    pub violations: Vec<Violation>,
    /// Violations beyond the per-run cap, counted only.
    pub violations_dropped: u64,
    /// The command line that replays exactly this run.
    pub replay: String,
    /// Digest over every event the run processed: equal digests = identical runs.
    pub trace: Digest,
    /// rcc: the order attacker's ranks and the lane samples (`rcc_stats.rs`).
    pub rcc: crate::rcc_stats::RccStats,
}

impl RunReport {
    pub fn ok(&self) -> bool {
        self.violations.is_empty() && self.violations_dropped == 0
    }

    pub fn has(&self, kind: ViolationKind) -> bool {
        self.violations.iter().any(|v| v.kind == kind)
    }

    /// Did a safety property break (anything but liveness and panics)?
    pub fn safety_violated(&self) -> bool {
        self.violations.iter().any(|v| v.kind.is_safety())
    }
}

impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {}: {} (faults drawn: {}; active: {}; byzantine: {}; {}; {:.3}s simulated, {} positions, {}/{} requests)",
            self.seed,
            if self.ok() { "ok" } else { "FAILED" },
            self.faults_drawn,
            self.faults_active,
            if self.byzantine.is_empty() {
                "none".to_string()
            } else {
                self.byzantine.join(" ")
            },
            self.setup,
            self.virtual_us as f64 / 1e6,
            self.delivered_positions,
            self.requests_committed,
            self.requests_issued,
        )?;
        for v in &self.violations {
            writeln!(f, "  {v}")?;
        }
        if self.violations_dropped > 0 {
            writeln!(f, "  … and {} more violations", self.violations_dropped)?;
        }
        if !self.ok() {
            writeln!(f, "  replay: {}", self.replay)?;
        }
        Ok(())
    }
}

/// The outcome of `run_many`.
#[derive(Clone, Debug, Default)]
pub struct SimSummary {
    /// What was run, e.g. `mode=cop pillars=4 n=4 f=1 faults=all`.
    pub setup: String,
    pub seeds_run: u64,
    pub virtual_us: Micros,
    pub counters: Counters,
    pub requests_issued: u64,
    pub requests_committed: u64,
    /// In how many seeds each fault kind was drawn.
    pub drawn: std::collections::BTreeMap<FaultKind, u64>,
    /// In how many seeds each fault kind was active (injected something).
    pub active: std::collections::BTreeMap<FaultKind, u64>,
    /// Events processed over all seeds.
    pub events: u64,
    /// Reports of the seeds that failed, in seed order.
    pub failures: Vec<RunReport>,
    /// rcc: the order attacker's rank counts over all seeds (RCC §IV).
    pub attacker_ranks: Vec<u64>,
    /// Resource model: each seed's measurement.
    pub perf: Vec<crate::perf::PerfReport>,
}

impl SimSummary {
    pub fn ok(&self) -> bool {
        self.failures.is_empty()
    }

    pub fn add(&mut self, r: RunReport) {
        self.seeds_run += 1;
        self.virtual_us += r.virtual_us;
        self.counters.merge(&r.counters);
        self.requests_issued += r.requests_issued;
        self.requests_committed += r.requests_committed;
        for k in r.faults_drawn.iter() {
            *self.drawn.entry(k).or_insert(0) += 1;
        }
        for k in r.faults_active.iter() {
            *self.active.entry(k).or_insert(0) += 1;
        }
        self.events += r.events;
        if let Some(p) = &r.perf {
            self.perf.push(p.clone());
        }
        let ranks = &r.rcc.attacker_ranks;
        if self.attacker_ranks.len() < ranks.len() {
            self.attacker_ranks.resize(ranks.len(), 0);
        }
        for (k, c) in ranks.iter().enumerate() {
            self.attacker_ranks[k] += c;
        }
        if !r.ok() {
            self.failures.push(r);
        }
    }

    pub fn violations(&self) -> usize {
        self.failures.iter().map(|r| r.violations.len()).sum()
    }
}

impl fmt::Display for SimSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "chorus sim: {}", self.setup)?;
        writeln!(
            f,
            "  seeds run          {} ({} ok, {} failed)",
            self.seeds_run,
            self.seeds_run - self.failures.len() as u64,
            self.failures.len()
        )?;
        writeln!(f, "  simulated time     {:.1} s", self.virtual_us as f64 / 1e6)?;
        writeln!(
            f,
            "  messages           {} sent, {} delivered",
            self.counters.messages_sent, self.counters.messages_delivered
        )?;
        if !self.counters.by_kind.is_empty() {
            let kinds: Vec<String> = self
                .counters
                .by_kind
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            writeln!(f, "    by kind          {}", kinds.join(" "))?;
        }
        writeln!(
            f,
            "  requests committed {} of {} issued by correct clients",
            self.requests_committed, self.requests_issued
        )?;
        writeln!(f, "  events             {}", self.events)?;
        if !self.perf.is_empty() {
            let k = self.perf.len() as f64;
            let mean = |g: &dyn Fn(&crate::perf::PerfReport) -> f64| self.perf.iter().map(g).sum::<f64>() / k;
            writeln!(
                f,
                "  perf (mean of {} seeds) throughput {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, replica CPU {:.1} µs/request",
                self.perf.len(),
                mean(&|p| p.throughput),
                mean(&|p| p.p50_us as f64) / 1e3,
                mean(&|p| p.p99_us as f64) / 1e3,
                mean(&|p| p.cpu_us_per_request),
            )?;
            let crashed: Vec<_> = self.perf.iter().filter_map(|p| p.after_crash.as_ref()).collect();
            if !crashed.is_empty() {
                let k = crashed.len() as f64;
                writeln!(
                    f,
                    "  perf crash         before {:.0} req/s, after {:.0} req/s, longest pause after it {:.1} ms",
                    crashed.iter().map(|c| c.throughput_before).sum::<f64>() / k,
                    crashed.iter().map(|c| c.throughput_after).sum::<f64>() / k,
                    crashed.iter().map(|c| c.longest_pause_us as f64).sum::<f64>() / k / 1e3,
                )?;
            }
        }
        if !self.drawn.is_empty() {
            // Active: the kind injected something (a Byzantine replica that
            // misbehaved, a partition that dropped a message), not only drawn.
            let kinds: Vec<String> = self
                .drawn
                .iter()
                .map(|(k, v)| format!("{k}={}/{v}", self.active.get(k).copied().unwrap_or(0)))
                .collect();
            writeln!(f, "  seeds per fault    (active/drawn) {}", kinds.join(" "))?;
        }
        if self.counters.faults.is_empty() {
            writeln!(f, "  faults injected    none")?;
        } else {
            writeln!(
                f,
                "  faults injected    {} in total",
                self.counters.total_faults()
            )?;
            for (k, v) in &self.counters.faults {
                writeln!(f, "    {k:<24} {v}")?;
            }
        }
        if !self.counters.notes.is_empty() {
            writeln!(f, "  other events")?;
            for (k, v) in &self.counters.notes {
                writeln!(f, "    {k:<24} {v}")?;
            }
        }
        if !self.attacker_ranks.is_empty() {
            use crate::rcc_stats::{chi_square, chi_square_critical_001};
            let dof = self.attacker_ranks.len() - 1;
            writeln!(
                f,
                "  order-attack ranks {:?} over {} rounds: chi² {:.2} (dof {dof}, 0.1% critical {:.2})",
                self.attacker_ranks,
                self.attacker_ranks.iter().sum::<u64>(),
                chi_square(&self.attacker_ranks),
                chi_square_critical_001(dof)
            )?;
        }
        if self.failures.is_empty() {
            writeln!(f, "  violations         none")?;
        } else {
            writeln!(
                f,
                "  violations         {} in {} seeds",
                self.violations(),
                self.failures.len()
            )?;
            for r in &self.failures {
                write!(f, "  {r}")?;
            }
        }
        Ok(())
    }
}
