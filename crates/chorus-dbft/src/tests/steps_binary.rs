//! Binary consensus with a weak coordinator (spec §3), one rule per test.

use super::bin_net::BinNet;
use super::steps_bv::bval;
use crate::binary::{BinOut, Binary, Input, Phase, TimerKind};
use crate::msg::{BinMsg, BinSet};
use crate::DbftConfig;

fn aux(round: u32, values: BinSet) -> BinMsg {
    BinMsg::Aux { round, values }
}

fn slow_cfg(n: usize) -> DbftConfig {
    let mut c = DbftConfig::new(n);
    c.zero_timeout_rounds = 0;
    c.timeout_base_ms = 50;
    c
}

fn feed(cfg: &DbftConfig, b: &mut Binary, from: usize, m: BinMsg) -> Vec<BinOut> {
    let mut out = vec![];
    let _ = b.on_msg(cfg, from, &m, &mut out);
    out
}

fn has_aux(out: &[BinOut]) -> bool {
    out.iter()
        .any(|o| matches!(o, BinOut::Broadcast(BinMsg::Aux { .. })))
}

#[test]
fn binary_rb_fast_path_decides_one_in_round_one_without_bvalue_one() {
    let mut net = BinNet::new(DbftConfig::new(4), &[]);
    for i in 0..4 {
        net.rb_delivered(i);
        net.propose(i, Input::OneViaRb);
    }
    net.sync(50);
    assert_eq!(net.all_decided(), Some(true));
    for i in 0..4 {
        assert_eq!(net.node(i).round_decided(), Some(1));
        assert!(
            !net.sent[i].contains(&bval(1, true)),
            "Opt1: 1 is not BV-broadcast in round 1"
        );
        assert_eq!(net.node(i).phase(), Phase::Halted);
    }
}

#[test]
fn binary_all_zero_decides_zero_in_round_two() {
    let mut net = BinNet::new(DbftConfig::new(4), &[]);
    for i in 0..4 {
        net.propose(i, Input::Zero);
    }
    net.sync(50);
    assert_eq!(net.all_decided(), Some(false));
    assert!(net
        .correct()
        .iter()
        .all(|&i| net.node(i).round_decided() == Some(2)));
}

#[test]
fn binary_first_timer_guards_the_aux_broadcast() {
    let cfg = slow_cfg(4);
    let mut b = Binary::new(&cfg, 1);
    let mut out = vec![];
    b.propose(&cfg, Input::Zero, &mut out);
    feed(&cfg, &mut b, 1, bval(1, false));
    feed(&cfg, &mut b, 2, bval(1, false));
    let out = feed(&cfg, &mut b, 3, bval(1, false));
    assert_eq!(
        b.phase(),
        Phase::WaitTimer1,
        "New1: bin_values non-empty starts the timer"
    );
    assert!(out.contains(&BinOut::SetTimer {
        round: 1,
        which: TimerKind::First,
        after_ms: 50
    }));
    assert!(!has_aux(&out), "no AUX before the first timer");
    let mut out = vec![];
    b.on_timer(&cfg, 1, TimerKind::Second, &mut out);
    assert!(out.is_empty(), "a timer of the wrong kind is stale");
    b.on_timer(&cfg, 1, TimerKind::First, &mut out);
    assert_eq!(out, vec![BinOut::Broadcast(aux(1, BinSet::Zero))]);
}

#[test]
fn binary_second_timer_guards_the_choice_of_values() {
    let cfg = slow_cfg(4);
    let mut b = Binary::new(&cfg, 1);
    let mut out = vec![];
    b.propose(&cfg, Input::Zero, &mut out);
    for s in [1, 2, 3] {
        feed(&cfg, &mut b, s, bval(1, false));
    }
    b.on_timer(&cfg, 1, TimerKind::First, &mut out);
    feed(&cfg, &mut b, 1, aux(1, BinSet::Zero));
    feed(&cfg, &mut b, 2, aux(1, BinSet::Zero));
    let out = feed(&cfg, &mut b, 3, aux(1, BinSet::Zero));
    assert_eq!(b.phase(), Phase::WaitValues, "New4: n−t AUX restart the timer");
    assert!(out.contains(&BinOut::SetTimer {
        round: 1,
        which: TimerKind::Second,
        after_ms: 50
    }));
    assert_eq!(b.round(), 1, "no choice before the second timer");
    let mut out = vec![];
    b.on_timer(&cfg, 1, TimerKind::Second, &mut out);
    assert_eq!(b.round(), 2);
    assert!(
        !b.est(),
        "values = {{0}}: est := 0 (round 1 has parity 1, no decision)"
    );
    assert_eq!(b.decided(), None);
}

#[test]
fn binary_coordinator_broadcasts_first_value_to_enter_bin_values() {
    let cfg = DbftConfig::new(4);
    let mut b = Binary::new(&cfg, 0); // coord(1) = 0
    let mut out = vec![];
    b.propose(&cfg, Input::Zero, &mut out);
    feed(&cfg, &mut b, 1, bval(1, true));
    feed(&cfg, &mut b, 2, bval(1, true));
    let out = feed(&cfg, &mut b, 3, bval(1, true));
    assert!(out.contains(&BinOut::Broadcast(BinMsg::Coord {
        round: 1,
        value: true
    })));
    // Not coordinator in round 2: never sends COORD there.
    assert_eq!(cfg.coord(2), 1);
}

#[test]
fn binary_coordinator_value_taken_when_in_bin_values() {
    let cfg = slow_cfg(4);
    let mut b = Binary::new(&cfg, 2);
    let mut out = vec![];
    b.propose(&cfg, Input::Zero, &mut out);
    for s in [0, 1, 3] {
        feed(&cfg, &mut b, s, bval(1, false));
        feed(&cfg, &mut b, s, bval(1, true));
    }
    assert_eq!(b.bin_values(1), [true, true]);
    feed(
        &cfg,
        &mut b,
        0,
        BinMsg::Coord {
            round: 1,
            value: true,
        },
    );
    b.on_timer(&cfg, 1, TimerKind::First, &mut out);
    assert_eq!(
        b.my_aux(1),
        Some(BinSet::One),
        "New3: AUX({{w}}) with w the coordinator's value"
    );
}

#[test]
fn binary_without_coordinator_value_aux_is_bin_values_snapshot() {
    let cfg = slow_cfg(4);
    let mut b = Binary::new(&cfg, 2);
    let mut out = vec![];
    b.propose(&cfg, Input::Zero, &mut out);
    for s in [0, 1, 3] {
        feed(&cfg, &mut b, s, bval(1, false));
        feed(&cfg, &mut b, s, bval(1, true));
    }
    b.on_timer(&cfg, 1, TimerKind::First, &mut out);
    assert_eq!(b.my_aux(1), Some(BinSet::Both));
}

#[test]
fn binary_own_aux_preference_new5() {
    // Own AUX {0,1}; qualifying: {1}×3 and own {0,1}. Both {1} and {0,1} are
    // achievable unions; New5 takes {0,1} (est := parity, no decision).
    let cfg = slow_cfg(4);
    let mut b = Binary::new(&cfg, 3);
    let mut out = vec![];
    b.propose(&cfg, Input::Zero, &mut out);
    for s in [0, 1, 2] {
        feed(&cfg, &mut b, s, bval(1, false));
        feed(&cfg, &mut b, s, bval(1, true));
    }
    b.on_timer(&cfg, 1, TimerKind::First, &mut out);
    assert_eq!(b.my_aux(1), Some(BinSet::Both));
    feed(&cfg, &mut b, 3, aux(1, BinSet::Both));
    for s in [0, 1, 2] {
        feed(&cfg, &mut b, s, aux(1, BinSet::One));
    }
    b.on_timer(&cfg, 1, TimerKind::Second, &mut out);
    assert_eq!(b.round(), 2);
    assert_eq!(
        b.decided(),
        None,
        "New5: own {{0,1}} preferred over a deciding {{1}}"
    );
    assert!(b.est());

    // Own AUX {w} (the coordinator's): {w} is taken although {0,1} is achievable.
    let mut b = Binary::new(&cfg, 3);
    b.propose(&cfg, Input::Zero, &mut out);
    for s in [0, 1, 2] {
        feed(&cfg, &mut b, s, bval(1, false));
    }
    feed(
        &cfg,
        &mut b,
        0,
        BinMsg::Coord {
            round: 1,
            value: false,
        },
    );
    for s in [0, 1, 2] {
        feed(&cfg, &mut b, s, bval(1, true));
    }
    b.on_timer(&cfg, 1, TimerKind::First, &mut out);
    assert_eq!(b.my_aux(1), Some(BinSet::Zero));
    feed(&cfg, &mut b, 3, aux(1, BinSet::Zero));
    feed(&cfg, &mut b, 0, aux(1, BinSet::Both));
    feed(&cfg, &mut b, 1, aux(1, BinSet::Zero));
    feed(&cfg, &mut b, 2, aux(1, BinSet::Zero));
    b.on_timer(&cfg, 1, TimerKind::Second, &mut out);
    assert_eq!(b.round(), 2);
    assert!(!b.est(), "values = {{0}} (own), not {{0,1}}");
}

#[test]
fn binary_catch_up_skips_timers_when_t_plus_1_are_ahead() {
    let cfg = slow_cfg(4);
    let mut b = Binary::new(&cfg, 1);
    let mut out = vec![];
    b.propose(&cfg, Input::Zero, &mut out);
    for s in [1, 2, 3] {
        feed(&cfg, &mut b, s, bval(1, false));
    }
    assert_eq!(b.phase(), Phase::WaitTimer1);
    // One sender ahead (may be Byzantine): no effect.
    let out = feed(&cfg, &mut b, 3, aux(2, BinSet::Zero));
    assert!(!has_aux(&out));
    // t+1 = 2 senders in mini-round 4 > 1: the round-1 timer is skipped.
    let out = feed(&cfg, &mut b, 2, aux(2, BinSet::Zero));
    assert!(
        has_aux(&out),
        "catch-up: timers of earlier mini-rounds count as expired"
    );
}

#[test]
fn binary_decided_messages_adopt_at_t_plus_1_and_stop_at_2t_plus_1() {
    let cfg = DbftConfig::new(4);
    let mut b = Binary::new(&cfg, 0);
    let mut out = vec![];
    b.propose(&cfg, Input::Zero, &mut out);
    let out = feed(&cfg, &mut b, 1, BinMsg::Decided { value: true });
    assert!(out.is_empty());
    let out = feed(&cfg, &mut b, 2, BinMsg::Decided { value: true });
    assert!(out.contains(&BinOut::Decide(true)));
    assert!(out.contains(&BinOut::Broadcast(BinMsg::Decided { value: true })));
    assert_ne!(
        b.phase(),
        Phase::Halted,
        "own DECIDED not yet counted: only 2 < 2t+1"
    );
    feed(&cfg, &mut b, 0, BinMsg::Decided { value: true });
    assert_eq!(b.phase(), Phase::Halted);
}

#[test]
fn binary_invoked_after_2t_plus_1_decided_runs_no_round() {
    let cfg = DbftConfig::new(4);
    let mut b = Binary::new(&cfg, 0);
    for s in 1..4 {
        feed(&cfg, &mut b, s, BinMsg::Decided { value: false });
    }
    assert_eq!(b.decided(), Some(false), "adopted while not invoked");
    let mut out2 = vec![];
    b.propose(&cfg, Input::Zero, &mut out2);
    assert_eq!(b.phase(), Phase::Halted);
    assert!(out2.is_empty(), "no B_VAL for a round nobody else will run");
}

#[test]
fn binary_round_zero_fed_directly_is_refused_without_panic() {
    let cfg = DbftConfig::new(4);
    let mut b = Binary::new(&cfg, 0);
    let mut out = vec![];
    assert_eq!(
        b.on_msg(&cfg, 1, &bval(0, true), &mut out),
        Err(crate::DropReason::BadRound)
    );
    assert_eq!(b.rounds_held(), 0);
}
