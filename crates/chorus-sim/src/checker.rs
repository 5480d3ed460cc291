//! The invariant checkers. The world reports what correct replicas and clients
//! observe; the checker compares every observation with what the others saw
//! and records violations. Byzantine replicas (and both copies of a twin) are
//! not checked: nothing is promised about them.
//!
//! - agreement: all correct replicas deliver the same batch digest at each
//!   position, so every correct replica's delivered sequence is a prefix of one
//!   common sequence (PBFT §4.5 safety);
//! - validity: every delivered request was issued by a client with a valid
//!   authenticator and within the size limits;
//! - exactly-once: a (client, request seq) executes non-duplicately at one
//!   position only, and at the same position with the same result everywhere;
//! - equal state digests at equal checkpoint positions;
//! - delivery contract: positions strictly increasing without gaps, each at
//!   its cell (COP §4.1);
//! - client results: a result a client accepted is the one correct replicas computed;
//! - reply results: every full reply a correct replica sends carries the result
//!   correct replicas computed (one forged reply never fools a client, which
//!   waits for f+1, but it proves the replica answers from a state nobody
//!   certified).

use crate::queue::Micros;
use crate::report::{Violation, ViolationKind};
use chorus_core::{Batch, Cell, ClientId, ClusterConfig, Digest, ReplicaId, RequestSeq, Seq};
use std::collections::BTreeMap;

/// Violations recorded per run before further ones are only counted.
const VIOLATIONS_MAX: usize = 40;

/// How a request was issued.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Issue {
    /// Properly authenticated and within limits: may be delivered.
    Valid,
    /// Must never be delivered, for the reason given.
    Forbidden(&'static str),
}

type RequestKey = (ClientId, RequestSeq);

pub struct Checker {
    config_max_op_bytes: usize,
    config_max_batch: usize,
    correct: Vec<bool>,
    issued: BTreeMap<Digest, Issue>,
    /// The common sequence: first digest a correct replica delivered at each position.
    common: BTreeMap<Seq, (Digest, ReplicaId)>,
    /// The cell first delivered at each position (rcc permutes a round's
    /// lanes: a fork report names both cells).
    common_cells: BTreeMap<Seq, Cell>,
    /// Each replica's own history, across incarnations.
    delivered: Vec<BTreeMap<Seq, Digest>>,
    expected_next: Vec<Seq>,
    /// The replica's executor holds a snapshot that did not match its
    /// certificate: it must fetch another before delivering anything.
    tainted: Vec<bool>,
    exec_global: BTreeMap<RequestKey, (Seq, Digest, ReplicaId)>,
    states: BTreeMap<Seq, (Digest, ReplicaId)>,
    accepted: Vec<(RequestKey, Digest, Micros)>,
    /// Full replies correct replicas sent, checked at the end against what
    /// was computed (a reply may leave before the first execution is seen).
    replied: BTreeMap<(RequestKey, Digest), (ReplicaId, Micros)>,
    /// rcc: the lane that carried each client's requests in each round.
    rcc: bool,
    client_lanes: BTreeMap<(ClientId, u64), chorus_core::LaneId>,
    violations: Vec<Violation>,
    dropped: u64,
}

impl Checker {
    /// `correct[r]` says whether replica `r` is held to the invariants.
    pub fn new(config: &ClusterConfig, correct: Vec<bool>) -> Checker {
        assert_eq!(correct.len(), config.n());
        let n = config.n();
        Checker {
            config_max_op_bytes: config.params.max_op_bytes as usize,
            config_max_batch: config.params.batch_max_requests as usize,
            correct,
            issued: BTreeMap::new(),
            common: BTreeMap::new(),
            common_cells: BTreeMap::new(),
            delivered: vec![BTreeMap::new(); n],
            expected_next: vec![Seq(0); n],
            tainted: vec![false; n],
            exec_global: BTreeMap::new(),
            states: BTreeMap::new(),
            accepted: Vec::new(),
            replied: BTreeMap::new(),
            rcc: config.params.mode == chorus_core::OrderingMode::Rcc,
            client_lanes: BTreeMap::new(),
            violations: Vec::new(),
            dropped: 0,
        }
    }

    pub fn is_correct(&self, r: ReplicaId) -> bool {
        self.correct.get(r.index()).copied().unwrap_or(false)
    }

    pub fn violate(&mut self, kind: ViolationKind, at_us: Micros, detail: String) {
        if self.violations.len() < VIOLATIONS_MAX {
            self.violations.push(Violation { kind, at_us, detail });
        } else {
            self.dropped += 1;
        }
    }

    pub fn violation_count(&self) -> usize {
        self.violations.len() + self.dropped as usize
    }

    /// A client issued a request with this content digest.
    pub fn issue(&mut self, request_digest: Digest, how: Issue) {
        // A content digest once issued validly stays valid (retransmissions).
        let e = self.issued.entry(request_digest).or_insert(how);
        if how == Issue::Valid {
            *e = Issue::Valid;
        }
    }

    /// A replica restarted with an empty executor: delivery starts over.
    pub fn restarted(&mut self, r: ReplicaId) {
        self.expected_next[r.index()] = Seq(0);
        self.tainted[r.index()] = false;
    }

    /// A replica installed a snapshot at `seq`; `restored` is what its executor
    /// computed, `certified` the digest 2f+1 replicas signed. A mismatch (a
    /// Byzantine peer sent a corrupt snapshot) is not a violation by itself:
    /// the replica learns it from `StateInstalled` and must fetch the state
    /// again before it delivers anything.
    pub fn installed(&mut self, now: Micros, r: ReplicaId, seq: Seq, restored: Digest, certified: Digest) {
        if !self.is_correct(r) {
            return;
        }
        let i = r.index();
        self.tainted[i] = restored != certified;
        if !self.tainted[i] {
            self.state_at(now, r, seq, restored);
        }
        self.expected_next[i] = seq;
    }

    /// A snapshot failed to restore at all: the executor state is unusable
    /// until the next good install.
    pub fn install_failed(&mut self, r: ReplicaId) {
        if self.is_correct(r) {
            self.tainted[r.index()] = true;
        }
    }

    pub fn is_tainted(&self, r: ReplicaId) -> bool {
        self.tainted.get(r.index()).copied().unwrap_or(false)
    }

    /// A replica delivered `batch` at `seq` in `cell`.
    pub fn delivered(
        &mut self,
        now: Micros,
        config: &ClusterConfig,
        r: ReplicaId,
        seq: Seq,
        cell: Cell,
        batch: &Batch,
    ) {
        if !self.is_correct(r) {
            return;
        }
        let i = r.index();
        let digest = batch.digest();
        if self.tainted[i] {
            self.violate(
                ViolationKind::StateDigest,
                now,
                format!("{r:?} delivered {seq:?} on top of a snapshot that did not match its certificate"),
            );
        }
        if seq != self.expected_next[i] {
            let expected = self.expected_next[i];
            self.violate(
                ViolationKind::Delivery,
                now,
                format!("{r:?} delivered {seq:?} but the next position was {expected:?}"),
            );
        }
        self.expected_next[i] = seq.next();
        // RCC delivers a round in a drawn lane order, Dispel an epoch in
        // digest order: only the round (epoch) is fixed.
        let misplaced = if matches!(
            config.params.mode,
            chorus_core::OrderingMode::Rcc | chorus_core::OrderingMode::Dispel
        ) {
            cell.slot != config.cell_of(seq).slot || cell.lane.0 >= config.lanes()
        } else {
            config.cell_of(seq) != cell
        };
        if misplaced {
            self.violate(
                ViolationKind::Delivery,
                now,
                format!(
                    "{r:?} delivered {seq:?} as cell {cell:?}; it belongs to {:?}",
                    config.cell_of(seq)
                ),
            );
        }
        if let Some(old) = self.delivered[i].insert(seq, digest) {
            if old != digest {
                self.violate(
                    ViolationKind::Agreement,
                    now,
                    format!("{r:?} re-delivered {seq:?} as {digest:?}; before it delivered {old:?}"),
                );
            }
        }
        match self.common.get(&seq) {
            None => {
                self.common.insert(seq, (digest, r));
                self.common_cells.insert(seq, cell);
                self.check_one_lane(now, cell, batch);
            }
            Some(&(d, first)) if d != digest => self.violate(
                ViolationKind::Agreement,
                now,
                format!(
                    "{r:?} delivered {digest:?} at {seq:?} (cell {cell:?}) but {first:?} delivered {d:?} (cell {:?})",
                    self.common_cells.get(&seq)
                ),
            ),
            Some(_) => {}
        }
        self.check_batch(now, r, seq, batch);
    }

    /// RCC §III-E: in one round a client's requests come from one instance
    /// (its switch requests go to their target and are not counted).
    fn check_one_lane(&mut self, now: Micros, cell: Cell, batch: &Batch) {
        if !self.rcc {
            return;
        }
        for req in batch.requests.iter().filter(|r| !r.is_switch()) {
            let lane = *self
                .client_lanes
                .entry((req.client, cell.slot.0))
                .or_insert(cell.lane);
            if lane != cell.lane {
                self.violate(
                    ViolationKind::TwoLanes,
                    now,
                    format!(
                        "{:?}'s requests were proposed by lanes {lane:?} and {:?} in round {}",
                        req.client, cell.lane, cell.slot.0
                    ),
                );
            }
        }
    }

    fn check_batch(&mut self, now: Micros, r: ReplicaId, seq: Seq, batch: &Batch) {
        if batch.requests.len() > self.config_max_batch {
            self.violate(
                ViolationKind::Validity,
                now,
                format!(
                    "{r:?} delivered {} requests at {seq:?}; the limit is {}",
                    batch.requests.len(),
                    self.config_max_batch
                ),
            );
        }
        for req in &batch.requests {
            let why = match self.issued.get(&req.digest()) {
                Some(Issue::Valid) if req.op.len() <= self.config_max_op_bytes => continue,
                Some(Issue::Valid) => "over the operation size limit",
                Some(Issue::Forbidden(reason)) => reason,
                None => "never issued by any client",
            };
            self.violate(
                ViolationKind::Validity,
                now,
                format!(
                    "{r:?} delivered request {:?}/{:?} at {seq:?}: {why}",
                    req.client, req.seq
                ),
            );
        }
    }

    /// The executor of replica `r` produced a result.
    pub fn executed(
        &mut self,
        now: Micros,
        r: ReplicaId,
        key: (ClientId, RequestSeq),
        delivered_at: Seq,
        result: Digest,
        duplicate: bool,
    ) {
        if !self.is_correct(r) || duplicate {
            return;
        }
        let (c, q) = key;
        // One record per request, not per replica and request: a replica
        // executing a request at two positions differs from the first
        // record at one of them at least (and a second run at the same
        // position within one executor life is `checker_extra`'s).
        match self.exec_global.get(&key) {
            None => {
                self.exec_global.insert(key, (delivered_at, result, r));
            }
            Some(&(at, d, first)) => {
                if at != delivered_at {
                    self.violate(
                        ViolationKind::ExactlyOnce,
                        now,
                        format!("{r:?} executed {c:?}/{q:?} at {delivered_at:?} but {first:?} at {at:?}"),
                    );
                } else if d != result {
                    self.violate(
                        ViolationKind::StateDigest,
                        now,
                        format!("{r:?} computed {result:?} for {c:?}/{q:?} but {first:?} computed {d:?}"),
                    );
                }
            }
        }
    }

    /// A replica's executor state digest once every position below `seq` ran.
    pub fn state_at(&mut self, now: Micros, r: ReplicaId, seq: Seq, digest: Digest) {
        if !self.is_correct(r) || self.is_tainted(r) {
            return;
        }
        match self.states.get(&seq) {
            None => {
                self.states.insert(seq, (digest, r));
            }
            Some(&(d, first)) if d != digest => self.violate(
                ViolationKind::StateDigest,
                now,
                format!("{r:?} has state {digest:?} at {seq:?} but {first:?} had {d:?}"),
            ),
            Some(_) => {}
        }
    }

    /// A correct client accepted `result` for its request.
    pub fn accepted(&mut self, now: Micros, key: (ClientId, RequestSeq), result: Digest) {
        self.accepted.push((key, result, now));
    }

    /// A correct replica sent a full reply carrying `result` (execution or
    /// a retransmission answered from its client table).
    pub fn replied(&mut self, now: Micros, r: ReplicaId, key: (ClientId, RequestSeq), result: Digest) {
        // One entry per distinct (request, result): bounded by the requests.
        if self.is_correct(r) {
            self.replied.entry((key, result)).or_insert((r, now));
        }
    }

    /// Is `result` what correct replicas computed for `(c, q)`? Otherwise
    /// what they computed, and who first, or `None` if none executed it.
    fn computed(
        &self,
        c: ClientId,
        q: RequestSeq,
        result: Digest,
    ) -> Result<(), Option<(Digest, ReplicaId)>> {
        match self.exec_global.get(&(c, q)) {
            Some(&(_, d, _)) if d == result => Ok(()),
            Some(&(_, d, first)) => Err(Some((d, first))),
            None => Err(None),
        }
    }

    /// The end-of-run checks; returns the violations and how many were only counted.
    pub fn finish(mut self) -> (Vec<Violation>, u64) {
        let replied = std::mem::take(&mut self.replied);
        for (((c, q), result), (r, at)) in replied {
            match self.computed(c, q, result) {
                Ok(()) => {}
                Err(Some((d, first))) => self.violate(
                    ViolationKind::ReplyResult,
                    at,
                    format!("{r:?} replied {result:?} to {c:?}/{q:?} but correct {first:?} computed {d:?}"),
                ),
                Err(None) => self.violate(
                    ViolationKind::ReplyResult,
                    at,
                    format!("{r:?} replied {result:?} to {c:?}/{q:?}, which no correct replica executed"),
                ),
            }
        }
        let accepted = std::mem::take(&mut self.accepted);
        for ((c, q), result, at) in accepted {
            match self.computed(c, q, result) {
                Ok(()) => {}
                Err(Some((d, r))) => self.violate(
                    ViolationKind::ClientResult,
                    at,
                    format!("{c:?} accepted {result:?} for {q:?} but correct {r:?} computed {d:?}"),
                ),
                Err(None) => self.violate(
                    ViolationKind::ClientResult,
                    at,
                    format!("{c:?} accepted a result for {q:?} that no correct replica computed"),
                ),
            }
        }
        (self.violations, self.dropped)
    }

    /// Highest position any correct replica delivered, plus one.
    pub fn delivered_positions(&self) -> u64 {
        self.common.keys().next_back().map_or(0, |s| s.0 + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use chorus_core::{LaneId, ProtocolParams, Request, Slot};

    fn setup() -> (ClusterConfig, Checker, Vec<Request>) {
        let params = ProtocolParams {
            pillars: 2,
            checkpoint_interval: 4,
            window_slots: 8,
            batch_max_requests: 2,
            max_op_bytes: 16,
            ..ProtocolParams::default()
        };
        let (config, _, clients) = ClusterConfig::for_testing(4, 1, params, 1);
        let checker = Checker::new(&config, vec![true, true, true, false]);
        let reqs = (1..=4)
            .map(|i| {
                Request::with_signature(
                    &chorus_core::ClusterTag::of(&config),
                    ClientId(0),
                    RequestSeq(i),
                    0,
                    Bytes::from(vec![i as u8; 4]),
                    &clients[0],
                )
            })
            .collect();
        (config, checker, reqs)
    }

    fn batch(reqs: &[Request]) -> Batch {
        Batch {
            requests: reqs.to_vec(),
            time_ms: 0,
        }
    }

    fn kinds(c: Checker) -> Vec<ViolationKind> {
        c.finish().0.into_iter().map(|v| v.kind).collect()
    }

    #[test]
    fn agreeing_replicas_pass() {
        let (cfg, mut c, reqs) = setup();
        c.issue(reqs[0].digest(), Issue::Valid);
        for r in 0..4 {
            let r = ReplicaId(r);
            c.delivered(1, &cfg, r, Seq(0), cfg.cell_of(Seq(0)), &batch(&reqs[..1]));
            c.delivered(1, &cfg, r, Seq(1), cfg.cell_of(Seq(1)), &Batch::noop());
            c.executed(
                1,
                r,
                (ClientId(0), RequestSeq(1)),
                Seq(0),
                Digest::of(b"ok"),
                false,
            );
            c.state_at(1, r, Seq(2), Digest::of(b"state"));
        }
        c.accepted(2, (ClientId(0), RequestSeq(1)), Digest::of(b"ok"));
        assert_eq!(c.delivered_positions(), 2);
        assert!(kinds(c).is_empty());
    }

    #[test]
    fn fork_between_correct_replicas_is_an_agreement_violation() {
        let (cfg, mut c, reqs) = setup();
        c.issue(reqs[0].digest(), Issue::Valid);
        c.issue(reqs[1].digest(), Issue::Valid);
        c.delivered(
            1,
            &cfg,
            ReplicaId(0),
            Seq(0),
            cfg.cell_of(Seq(0)),
            &batch(&reqs[..1]),
        );
        c.delivered(
            1,
            &cfg,
            ReplicaId(1),
            Seq(0),
            cfg.cell_of(Seq(0)),
            &batch(&reqs[1..2]),
        );
        assert_eq!(kinds(c), vec![ViolationKind::Agreement]);
    }

    /// RCC §III-E: one client's requests from two instances in one round
    /// is caught; in the next round another instance is fine (a switch).
    #[test]
    fn a_client_proposed_by_two_lanes_in_one_round_is_caught() {
        let (_, _, reqs) = setup();
        let params = ProtocolParams {
            mode: chorus_core::OrderingMode::Rcc,
            pillars: 1,
            batch_max_requests: 2,
            max_op_bytes: 16,
            ..ProtocolParams::default()
        };
        let (cfg, _, _) = ClusterConfig::for_testing(4, 1, params, 1);
        let mut c = Checker::new(&cfg, vec![true; 4]);
        for r in &reqs {
            c.issue(r.digest(), Issue::Valid);
        }
        let cell = |lane: u32, slot: u64| Cell {
            lane: chorus_core::LaneId(lane),
            slot: chorus_core::Slot(slot),
        };
        let r = ReplicaId(0);
        c.delivered(1, &cfg, r, Seq(0), cell(0, 0), &batch(&reqs[..1]));
        c.delivered(1, &cfg, r, Seq(1), cell(1, 0), &Batch::noop());
        c.delivered(1, &cfg, r, Seq(2), cell(2, 0), &Batch::noop());
        c.delivered(1, &cfg, r, Seq(3), cell(3, 0), &Batch::noop());
        c.delivered(1, &cfg, r, Seq(4), cell(1, 1), &batch(&reqs[1..2]));
        assert_eq!(c.violation_count(), 0);
        c.delivered(1, &cfg, r, Seq(5), cell(2, 1), &batch(&reqs[2..3]));
        assert_eq!(kinds(c), vec![ViolationKind::TwoLanes]);
    }

    #[test]
    fn byzantine_replicas_are_not_checked() {
        let (cfg, mut c, reqs) = setup();
        c.delivered(1, &cfg, ReplicaId(3), Seq(5), cfg.cell_of(Seq(0)), &batch(&reqs));
        c.executed(
            1,
            ReplicaId(3),
            (ClientId(0), RequestSeq(1)),
            Seq(0),
            Digest::of(b"x"),
            false,
        );
        c.executed(
            1,
            ReplicaId(3),
            (ClientId(0), RequestSeq(1)),
            Seq(1),
            Digest::of(b"x"),
            false,
        );
        assert!(kinds(c).is_empty());
    }

    #[test]
    fn unissued_forbidden_and_oversized_requests_are_validity_violations() {
        let (cfg, mut c, reqs) = setup();
        c.issue(reqs[1].digest(), Issue::Forbidden("bad authenticator"));
        c.delivered(
            1,
            &cfg,
            ReplicaId(0),
            Seq(0),
            cfg.cell_of(Seq(0)),
            &batch(&reqs[..2]),
        );
        let mut big = reqs[2].clone();
        big.op = Bytes::from(vec![0u8; 17]);
        c.issue(big.digest(), Issue::Valid);
        c.delivered(1, &cfg, ReplicaId(0), Seq(1), cfg.cell_of(Seq(1)), &batch(&[big]));
        // Three requests in a batch of at most two.
        c.issue(reqs[0].digest(), Issue::Valid);
        c.delivered(
            1,
            &cfg,
            ReplicaId(0),
            Seq(2),
            cfg.cell_of(Seq(2)),
            &batch(&[reqs[0].clone(), reqs[0].clone(), reqs[0].clone()]),
        );
        let v = c.finish().0;
        let details: Vec<_> = v.iter().map(|v| (v.kind, v.detail.clone())).collect();
        assert_eq!(v.len(), 4, "{details:?}");
        assert!(v.iter().all(|v| v.kind == ViolationKind::Validity));
        assert!(v[0].detail.contains("never issued"));
        assert!(v[1].detail.contains("bad authenticator"));
        assert!(v[2].detail.contains("size limit"));
    }

    #[test]
    fn gaps_and_wrong_cells_break_the_delivery_contract() {
        let (cfg, mut c, _) = setup();
        c.delivered(1, &cfg, ReplicaId(0), Seq(1), cfg.cell_of(Seq(1)), &Batch::noop());
        c.delivered(
            1,
            &cfg,
            ReplicaId(1),
            Seq(0),
            Cell {
                lane: LaneId(1),
                slot: Slot(0),
            },
            &Batch::noop(),
        );
        assert_eq!(kinds(c), vec![ViolationKind::Delivery, ViolationKind::Delivery]);
    }

    #[test]
    fn install_moves_the_next_position_and_a_bad_snapshot_must_not_be_built_on() {
        let (cfg, mut c, _) = setup();
        c.installed(1, ReplicaId(0), Seq(4), Digest::of(b"s"), Digest::of(b"s"));
        c.delivered(1, &cfg, ReplicaId(0), Seq(4), cfg.cell_of(Seq(4)), &Batch::noop());
        c.restarted(ReplicaId(0));
        c.delivered(1, &cfg, ReplicaId(0), Seq(0), cfg.cell_of(Seq(0)), &Batch::noop());
        assert!(c.violation_count() == 0);
        // A corrupt snapshot, then a good one: fine.
        c.installed(1, ReplicaId(1), Seq(4), Digest::of(b"junk"), Digest::of(b"s"));
        assert!(c.is_tainted(ReplicaId(1)));
        c.state_at(1, ReplicaId(1), Seq(4), Digest::of(b"junk"));
        c.installed(1, ReplicaId(1), Seq(4), Digest::of(b"s"), Digest::of(b"s"));
        c.delivered(1, &cfg, ReplicaId(1), Seq(4), cfg.cell_of(Seq(4)), &Batch::noop());
        assert!(c.violation_count() == 0);
        // Delivering on top of a corrupt snapshot is a violation.
        c.installed(1, ReplicaId(2), Seq(8), Digest::of(b"u"), Digest::of(b"v"));
        c.delivered(1, &cfg, ReplicaId(2), Seq(8), cfg.cell_of(Seq(8)), &Batch::noop());
        c.install_failed(ReplicaId(0));
        c.delivered(1, &cfg, ReplicaId(0), Seq(1), cfg.cell_of(Seq(1)), &Batch::noop());
        // Two replicas with different states at one position.
        c.state_at(1, ReplicaId(1), Seq(12), Digest::of(b"a"));
        c.state_at(1, ReplicaId(2), Seq(12), Digest::of(b"b"));
        c.restarted(ReplicaId(2));
        c.state_at(1, ReplicaId(2), Seq(12), Digest::of(b"b"));
        assert_eq!(kinds(c), vec![ViolationKind::StateDigest; 3]);
    }

    #[test]
    fn double_execution_and_diverging_results_are_caught() {
        let (_, mut c, _) = setup();
        let k = (ClientId(0), RequestSeq(1));
        c.executed(1, ReplicaId(0), k, Seq(3), Digest::of(b"a"), false);
        // Re-execution at the same position after a restart is a replay, not a violation.
        c.executed(1, ReplicaId(0), k, Seq(3), Digest::of(b"a"), false);
        // Duplicates are never checked.
        c.executed(1, ReplicaId(0), k, Seq(9), Digest::of(b"a"), true);
        assert_eq!(c.violation_count(), 0);
        c.executed(1, ReplicaId(0), k, Seq(5), Digest::of(b"a"), false);
        c.executed(1, ReplicaId(1), k, Seq(3), Digest::of(b"b"), false);
        assert_eq!(
            kinds(c),
            vec![ViolationKind::ExactlyOnce, ViolationKind::StateDigest]
        );
    }

    #[test]
    fn wrong_or_unbacked_client_results_are_caught() {
        let (_, mut c, _) = setup();
        c.executed(
            1,
            ReplicaId(0),
            (ClientId(0), RequestSeq(1)),
            Seq(0),
            Digest::of(b"a"),
            false,
        );
        c.accepted(2, (ClientId(0), RequestSeq(1)), Digest::of(b"forged"));
        c.accepted(2, (ClientId(0), RequestSeq(2)), Digest::of(b"x"));
        assert_eq!(
            kinds(c),
            vec![ViolationKind::ClientResult, ViolationKind::ClientResult]
        );
    }

    #[test]
    fn a_correct_replica_replying_what_nobody_computed_is_caught() {
        let key = (ClientId(0), RequestSeq(1));
        let run = |forge: bool| {
            let (_, mut c, _) = setup();
            c.executed(1, ReplicaId(0), key, Seq(0), Digest::of(b"a"), false);
            // The computed result, before or after the execution is seen: fine.
            c.replied(0, ReplicaId(1), key, Digest::of(b"a"));
            c.replied(2, ReplicaId(2), key, Digest::of(b"a"));
            // Byzantine replica 3 may say anything.
            c.replied(2, ReplicaId(3), key, Digest::of(b"lie"));
            if forge {
                // A correct replica answering from a forged client table.
                c.replied(3, ReplicaId(1), key, Digest::of(b"forged"));
                c.replied(
                    3,
                    ReplicaId(2),
                    (ClientId(0), RequestSeq(9)),
                    Digest::of(b"never ran"),
                );
            }
            kinds(c)
        };
        assert!(run(false).is_empty());
        assert_eq!(
            run(true),
            vec![ViolationKind::ReplyResult, ViolationKind::ReplyResult]
        );
    }

    #[test]
    fn violations_are_capped_and_counted() {
        let (_, mut c, _) = setup();
        for i in 0..(VIOLATIONS_MAX as u64 + 5) {
            c.violate(ViolationKind::Liveness, i, "x".into());
        }
        assert_eq!(c.violation_count(), VIOLATIONS_MAX + 5);
        let (v, dropped) = c.finish();
        assert_eq!((v.len(), dropped), (VIOLATIONS_MAX, 5));
    }
}
