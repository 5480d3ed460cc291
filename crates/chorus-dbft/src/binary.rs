//! One binary consensus instance: BV-broadcast (spec §2) under the
//! weak-coordinator psync rounds of \[TR\] Fig. 2 (spec §3), with catch-up
//! (§3.7) and the DECIDED extension (§3.8). Pure: inputs in, `BinOut`s out.
//! Broadcasts include this replica; the engine loops them back.

use crate::config::{DbftConfig, Variant};
use crate::counters::DropReason;
use crate::msg::{BinMsg, BinSet, Round};
use std::collections::BTreeMap;

/// What the reduction feeds an instance (P8: −1 is not an integer estimate).
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Input {
    Zero,
    One,
    /// \[TR\] Opt1: estimate 1, but RB-delivery already put 1 in `bin_values[1]`,
    /// so 1 is not BV-broadcast in round 1.
    OneViaRb,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub enum TimerKind {
    /// Set at New1; guards the AUX broadcast (mini-round 2r−1).
    First,
    /// Set at New4; guards the choice of `values` (mini-round 2r).
    Second,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BinOut {
    Broadcast(BinMsg),
    SetTimer {
        round: Round,
        which: TimerKind,
        after_ms: u64,
    },
    Decide(bool),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Phase {
    /// Not invoked yet: still counts and echoes B_VAL (P1), stores COORD/AUX.
    Idle,
    WaitBin,
    WaitTimer1,
    WaitAuxQuorum,
    WaitValues,
    /// Finished round d+2 or saw 2t+1 DECIDED: starts no new round, but keeps
    /// answering echoes of the rounds it ran (§3.6 "halt must let messages drain").
    Halted,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct RoundState {
    bval_from: [Vec<bool>; 2],
    bval_count: [usize; 2],
    sent_bval: [bool; 2],
    bin_values: [bool; 2],
    first_bin: Option<bool>,
    coord_val: Option<bool>,
    aux_from: Vec<Option<BinSet>>,
    aux_count: usize,
    my_aux: Option<BinSet>,
}

impl RoundState {
    fn new(n: usize) -> RoundState {
        RoundState {
            bval_from: [vec![false; n], vec![false; n]],
            bval_count: [0, 0],
            sent_bval: [false, false],
            bin_values: [false, false],
            first_bin: None,
            coord_val: None,
            aux_from: vec![None; n],
            aux_count: 0,
            my_aux: None,
        }
    }
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Binary {
    me: usize,
    input: Option<Input>,
    est: bool,
    round: Round,
    phase: Phase,
    timeout_ms: u64,
    /// The timer of the current wait (First in WaitTimer1, Second in WaitValues) fired.
    timer_expired: bool,
    rounds: BTreeMap<Round, RoundState>,
    /// First decision, and the round it was reached in (None if adopted via DECIDED).
    decided: Option<bool>,
    round_decided: Option<Round>,
    decided_from: Vec<Option<bool>>,
    decided_count: [usize; 2],
    sent_decided: bool,
    /// Highest mini-round seen from each sender (catch-up, §3.7).
    max_mini: Vec<u64>,
    conflicts: u64,
}

impl Binary {
    pub fn new(cfg: &DbftConfig, me: usize) -> Binary {
        assert!(me < cfg.n);
        Binary {
            me,
            input: None,
            est: false,
            round: 0,
            phase: Phase::Idle,
            timeout_ms: 0,
            timer_expired: false,
            rounds: BTreeMap::new(),
            decided: None,
            round_decided: None,
            decided_from: vec![None; cfg.n],
            decided_count: [0, 0],
            sent_decided: false,
            max_mini: vec![0; cfg.n],
            conflicts: 0,
        }
    }

    pub fn invoked(&self) -> bool {
        self.input.is_some()
    }
    pub fn input(&self) -> Option<Input> {
        self.input
    }
    pub fn round(&self) -> Round {
        self.round
    }
    pub fn phase(&self) -> Phase {
        self.phase
    }
    pub fn est(&self) -> bool {
        self.est
    }
    pub fn decided(&self) -> Option<bool> {
        self.decided
    }
    pub fn round_decided(&self) -> Option<Round> {
        self.round_decided
    }
    pub fn bin_values(&self, r: Round) -> [bool; 2] {
        self.rounds
            .get(&r)
            .map(|s| s.bin_values)
            .unwrap_or([false, false])
    }
    pub fn my_aux(&self, r: Round) -> Option<BinSet> {
        self.rounds.get(&r).and_then(|s| s.my_aux)
    }
    pub fn sent_bval(&self, r: Round) -> [bool; 2] {
        self.rounds.get(&r).map(|s| s.sent_bval).unwrap_or([false, false])
    }
    /// Decisions that contradicted the first one (only with > t faulty).
    pub fn conflicts(&self) -> u64 {
        self.conflicts
    }
    pub fn rounds_held(&self) -> usize {
        self.rounds.len()
    }
    /// Distinct votes counted so far (BVAL, AUX per held round, DECIDED): a
    /// measure of progress inside a round (the wrapper's stall test). Each
    /// sender counts once per kind and value, so one replica adds little.
    pub fn votes_seen(&self) -> u64 {
        let rounds: usize = self
            .rounds
            .values()
            .map(|r| r.bval_count[0] + r.bval_count[1] + r.aux_count)
            .sum();
        (rounds + self.decided_count[0] + self.decided_count[1]) as u64
    }

    fn rs(&mut self, cfg: &DbftConfig, r: Round) -> &mut RoundState {
        self.rounds.entry(r).or_insert_with(|| RoundState::new(cfg.n))
    }

    /// Invoke the instance (reduction `bin[k].propose`). Only the first call counts.
    pub fn propose(&mut self, cfg: &DbftConfig, input: Input, out: &mut Vec<BinOut>) {
        if self.input.is_some() {
            return;
        }
        self.input = Some(input);
        self.est = !matches!(input, Input::Zero);
        debug_assert_eq!(self.phase, Phase::Idle);
        if self.may_stop(cfg) {
            // Decided through 2t+1 DECIDED before being invoked: every correct
            // replica will decide without our rounds (§3.8).
            self.phase = Phase::Halted;
            return;
        }
        self.start_round(cfg, out);
        self.try_progress(cfg, out);
    }

    /// RB delivered this slot's proposal: 1 enters `bin_values[1]` directly,
    /// even if the instance was invoked with 0 (spec §4.3, P8, scenario 7).
    pub fn rb_delivered(&mut self, cfg: &DbftConfig, out: &mut Vec<BinOut>) {
        let rs = self.rs(cfg, 1);
        if !rs.bin_values[1] {
            rs.bin_values[1] = true;
            rs.first_bin.get_or_insert(true);
        }
        self.try_progress(cfg, out);
    }

    /// A message of this instance from the authenticated sender `from`.
    pub fn on_msg(
        &mut self,
        cfg: &DbftConfig,
        from: usize,
        msg: &BinMsg,
        out: &mut Vec<BinOut>,
    ) -> Result<(), DropReason> {
        debug_assert!(from < cfg.n, "engine checks sender indices");
        if msg.round() == Some(0) {
            return Err(DropReason::BadRound); // P7: rounds start at 1
        }
        if let Some(m) = msg.mini_round() {
            // Tracked even for rounds we do not buffer: one number per sender (P14).
            self.max_mini[from] = self.max_mini[from].max(m);
        }
        if let Some(r) = msg.round() {
            // Past rounds are always processed (P1); future ones inside a window (P14).
            if r > self.round.max(1).saturating_add(cfg.max_round_ahead) || r > cfg.max_round {
                self.try_progress(cfg, out);
                return Err(DropReason::RoundOutOfWindow);
            }
        }
        let res = match *msg {
            BinMsg::BVal { round, value } => self.on_bval(cfg, from, round, value, out),
            BinMsg::Coord { round, value } => {
                if cfg.coord(round) != from {
                    Err(DropReason::NotCoordinator)
                } else {
                    let rs = self.rs(cfg, round);
                    if rs.coord_val.is_some() {
                        Err(DropReason::Duplicate)
                    } else {
                        rs.coord_val = Some(value);
                        Ok(())
                    }
                }
            }
            BinMsg::Aux { round, values } => {
                let rs = self.rs(cfg, round);
                if rs.aux_from[from].is_some() {
                    Err(DropReason::Duplicate)
                } else {
                    rs.aux_from[from] = Some(values);
                    rs.aux_count += 1;
                    Ok(())
                }
            }
            BinMsg::Decided { value } => self.on_decided(cfg, from, value, out),
        };
        // P2: every change re-evaluates the guards, not only AUX arrivals.
        self.try_progress(cfg, out);
        res
    }

    fn on_bval(
        &mut self,
        cfg: &DbftConfig,
        from: usize,
        r: Round,
        v: bool,
        out: &mut Vec<BinOut>,
    ) -> Result<(), DropReason> {
        let vi = usize::from(v);
        let rs = self.rs(cfg, r);
        if rs.bval_from[vi][from] {
            return Err(DropReason::Duplicate);
        }
        rs.bval_from[vi][from] = true;
        rs.bval_count[vi] += 1;
        let count = rs.bval_count[vi];
        if count >= cfg.small_quorum() && !rs.sent_bval[vi] {
            // Echo: one correct sender among t+1 (BV-Obligation).
            rs.sent_bval[vi] = true;
            out.push(BinOut::Broadcast(BinMsg::BVal { round: r, value: v }));
        }
        if count >= cfg.bv_deliver() && !rs.bin_values[vi] {
            rs.bin_values[vi] = true;
            rs.first_bin.get_or_insert(v);
        }
        Ok(())
    }

    fn on_decided(
        &mut self,
        cfg: &DbftConfig,
        from: usize,
        v: bool,
        out: &mut Vec<BinOut>,
    ) -> Result<(), DropReason> {
        if self.decided_from[from].is_some() {
            return Err(DropReason::Duplicate);
        }
        self.decided_from[from] = Some(v);
        self.decided_count[usize::from(v)] += 1;
        if self.decided_count[usize::from(v)] >= cfg.small_quorum() {
            // §3.8: one correct replica decided v; by Agreement v is the decision.
            self.decide(v, None, out);
        }
        self.check_stop(cfg);
        Ok(())
    }

    fn decide(&mut self, v: bool, round: Option<Round>, out: &mut Vec<BinOut>) {
        if round.is_some() && self.round_decided.is_none() {
            self.round_decided = round;
        }
        match self.decided {
            // P15: the first decision stands. A disagreeing one is only
            // possible with more than t Byzantine replicas: counted for the
            // checkers, never a panic.
            Some(d) => {
                if d != v {
                    self.conflicts += 1;
                    tracing::error!(
                        first = d,
                        second = v,
                        "conflicting binary decisions: more than t faulty?"
                    );
                }
            }
            None => {
                self.decided = Some(v);
                out.push(BinOut::Decide(v));
            }
        }
        if !self.sent_decided {
            self.sent_decided = true;
            out.push(BinOut::Broadcast(BinMsg::Decided { value: v }));
        }
    }

    /// §3.8: 2t+1 DECIDED and our own sent: every correct replica will get t+1.
    fn check_stop(&mut self, cfg: &DbftConfig) {
        if self.phase != Phase::Idle && self.may_stop(cfg) {
            self.phase = Phase::Halted;
        }
    }

    fn may_stop(&self, cfg: &DbftConfig) -> bool {
        self.decided
            .is_some_and(|v| self.sent_decided && self.decided_count[usize::from(v)] >= cfg.bv_deliver())
    }

    /// A timer this instance set fired. Stale firings (earlier round or phase) are ignored.
    pub fn on_timer(&mut self, cfg: &DbftConfig, round: Round, which: TimerKind, out: &mut Vec<BinOut>) {
        let current = matches!(
            (self.phase, which),
            (Phase::WaitTimer1, TimerKind::First) | (Phase::WaitValues, TimerKind::Second)
        );
        if round == self.round && current {
            self.timer_expired = true;
            self.try_progress(cfg, out);
        }
    }

    /// The (t+1)-th largest mini-round any sender has reached (§3.7).
    fn catch_up_mini(&self, cfg: &DbftConfig) -> u64 {
        let mut v = self.max_mini.clone();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v[cfg.t]
    }

    fn start_timer(&mut self, which: TimerKind, out: &mut Vec<BinOut>) {
        if self.timeout_ms == 0 {
            self.timer_expired = true;
        } else {
            self.timer_expired = false;
            out.push(BinOut::SetTimer {
                round: self.round,
                which,
                after_ms: self.timeout_ms,
            });
        }
    }

    fn start_round(&mut self, cfg: &DbftConfig, out: &mut Vec<BinOut>) {
        if self.round >= cfg.max_round {
            self.phase = Phase::Halted;
            return;
        }
        self.round += 1;
        let r = self.round;
        if !(r == 1 && self.input == Some(Input::OneViaRb)) {
            let est = self.est;
            let rs = self.rs(cfg, r);
            let vi = usize::from(est);
            if !rs.sent_bval[vi] {
                rs.sent_bval[vi] = true;
                out.push(BinOut::Broadcast(BinMsg::BVal { round: r, value: est }));
            }
        } else {
            debug_assert!(self.est);
        }
        self.rs(cfg, r);
        self.phase = Phase::WaitBin;
    }

    fn try_progress(&mut self, cfg: &DbftConfig, out: &mut Vec<BinOut>) {
        loop {
            let r = self.round;
            match self.phase {
                Phase::Idle | Phase::Halted => return,
                Phase::WaitBin => {
                    let rs = self.rs(cfg, r);
                    let Some(first) = rs.first_bin else { return };
                    debug_assert!(rs.bin_values[usize::from(first)]);
                    // New1. After deciding, waiting changes nothing we send (§3.6).
                    self.timeout_ms = if cfg.variant == Variant::SafeCore || self.decided.is_some() {
                        0
                    } else {
                        cfg.timeout(r)
                    };
                    if cfg.variant == Variant::Psync && cfg.coord(r) == self.me {
                        // New2: the FIRST value to enter bin_values.
                        out.push(BinOut::Broadcast(BinMsg::Coord {
                            round: r,
                            value: first,
                        }));
                    }
                    self.phase = Phase::WaitTimer1;
                    self.start_timer(TimerKind::First, out);
                }
                Phase::WaitTimer1 => {
                    if !(self.timer_expired || self.catch_up_mini(cfg) > 2 * u64::from(r) - 1) {
                        return;
                    }
                    let psync = cfg.variant == Variant::Psync;
                    let rs = self.rs(cfg, r);
                    let aux = match rs.coord_val {
                        // New3, P5: the coordinator's value only if it is in bin_values.
                        Some(w) if psync && rs.bin_values[usize::from(w)] => BinSet::single(w),
                        _ => BinSet::from_flags(rs.bin_values).expect("WaitBin passed: bin_values non-empty"),
                    };
                    // P13: exactly one AUX per round, a snapshot.
                    debug_assert!(rs.my_aux.is_none());
                    rs.my_aux = Some(aux);
                    out.push(BinOut::Broadcast(BinMsg::Aux {
                        round: r,
                        values: aux,
                    }));
                    self.phase = Phase::WaitAuxQuorum;
                }
                Phase::WaitAuxQuorum => {
                    if self.rs(cfg, r).aux_count < cfg.aux_quorum() {
                        return;
                    }
                    // New4: restart with the same timeout.
                    self.phase = Phase::WaitValues;
                    self.start_timer(TimerKind::Second, out);
                }
                Phase::WaitValues => {
                    if !(self.timer_expired || self.catch_up_mini(cfg) > 2 * u64::from(r)) {
                        return;
                    }
                    let Some(values) = select_values(cfg, r, self.rs(cfg, r)) else {
                        return;
                    };
                    let b = r % 2 == 1;
                    match values {
                        BinSet::Both => self.est = b,
                        single => {
                            let v = single.contains(true);
                            self.est = v;
                            if v == b {
                                self.decide(v, Some(r), out);
                            }
                        }
                    }
                    self.end_of_round(cfg, out);
                }
            }
        }
    }

    /// §3.6: run rounds d+1 and d+2 in full, then stop starting rounds.
    fn end_of_round(&mut self, cfg: &DbftConfig, out: &mut Vec<BinOut>) {
        if let Some(d) = self.round_decided {
            if self.round >= d + 2 {
                self.phase = Phase::Halted;
                return;
            }
        }
        self.start_round(cfg, out);
        self.check_stop(cfg);
    }
}

/// §3.5, exactly: qualifying senders are those whose first AUX ⊆ bin_values;
/// New5 prefers this replica's own AUX set when it is an achievable union.
fn select_values(cfg: &DbftConfig, round: Round, rs: &RoundState) -> Option<BinSet> {
    let (mut a0, mut a1, mut a01, mut q) = (0usize, 0usize, 0usize, 0usize);
    for set in rs.aux_from.iter().flatten() {
        if !set.subset_of(rs.bin_values) {
            continue;
        }
        q += 1;
        match set {
            BinSet::Zero => a0 += 1,
            BinSet::One => a1 += 1,
            BinSet::Both => a01 += 1,
        }
    }
    if q < cfg.aux_quorum() {
        return None;
    }
    let single = |v: bool| (if v { a1 } else { a0 }) >= cfg.aux_quorum();
    let both = a01 >= 1 || (a0 >= 1 && a1 >= 1);
    match rs.my_aux {
        Some(BinSet::Both) if both => return Some(BinSet::Both),
        Some(BinSet::Zero) if single(false) => return Some(BinSet::Zero),
        Some(BinSet::One) if single(true) => return Some(BinSet::One),
        _ => {}
    }
    // Any achievable union is safe; prefer the round's parity (decide now).
    let b = round % 2 == 1;
    if single(b) {
        Some(BinSet::single(b))
    } else if single(!b) {
        Some(BinSet::single(!b))
    } else {
        debug_assert!(both, "n−t qualifying sets, no singleton: their union is {{0,1}}");
        Some(BinSet::Both)
    }
}
