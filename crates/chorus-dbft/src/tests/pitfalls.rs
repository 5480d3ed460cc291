//! One named test per implementation pitfall of spec §6.4.

use super::bin_net::BinNet;
use super::harness::{batch, Net};
use super::steps_bv::bval;
use crate::binary::{BinOut, Binary, Input, Phase, TimerKind};
use crate::counters::DropReason;
use crate::engine::{Action, Dbft, Event};
use crate::msg::{BinMsg, BinSet, DbftMsg, InstanceId};
use crate::DbftConfig;
use chorus_core::{Millis, ReplicaId};

fn aux(round: u32, values: BinSet) -> BinMsg {
    BinMsg::Aux { round, values }
}

fn feed_r(cfg: &DbftConfig, b: &mut Binary, from: usize, m: BinMsg) -> (Vec<BinOut>, Result<(), DropReason>) {
    let mut out = vec![];
    let r = b.on_msg(cfg, from, &m, &mut out);
    (out, r)
}

fn feed(cfg: &DbftConfig, b: &mut Binary, from: usize, m: BinMsg) -> Vec<BinOut> {
    feed_r(cfg, b, from, m).0
}

/// Drives a bare instance (me = 0, n = 4) through round 1 with all-zero
/// inputs from 1..3: ends in round 2 with est 0.
fn in_round_two(cfg: &DbftConfig) -> Binary {
    let mut b = Binary::new(cfg, 0);
    let mut out = vec![];
    b.propose(cfg, Input::Zero, &mut out);
    for s in 1..4 {
        feed(cfg, &mut b, s, bval(1, false));
    }
    for s in 1..4 {
        feed(cfg, &mut b, s, aux(1, BinSet::Zero));
    }
    assert_eq!(b.round(), 2);
    b
}

#[test]
fn p1_messages_of_past_rounds_still_run_the_echo_rules() {
    let cfg = DbftConfig::new(4);
    let mut b = in_round_two(&cfg);
    feed(&cfg, &mut b, 1, bval(1, true));
    let (out, r) = feed_r(&cfg, &mut b, 2, bval(1, true));
    assert!(r.is_ok());
    assert_eq!(
        out,
        vec![BinOut::Broadcast(bval(1, true))],
        "echo for round 1 while in round 2"
    );
    feed(&cfg, &mut b, 3, bval(1, true));
    assert_eq!(
        b.bin_values(1),
        [true, true],
        "a slow replica can still gather 2t+1 B_VAL"
    );
}

#[test]
fn p1_future_rounds_buffered_within_a_window_only() {
    let cfg = DbftConfig::new(4);
    let mut b = in_round_two(&cfg);
    let (_, r) = feed_r(&cfg, &mut b, 1, bval(2 + cfg.max_round_ahead, true));
    assert!(r.is_ok(), "inside the window: kept for later");
    let (_, r) = feed_r(&cfg, &mut b, 1, bval(3 + cfg.max_round_ahead, true));
    assert_eq!(r, Err(DropReason::RoundOutOfWindow));
}

#[test]
fn p2_aux_requalifies_when_bin_values_grows() {
    let cfg = DbftConfig::new(4);
    let mut b = Binary::new(&cfg, 0);
    let mut out = vec![];
    b.propose(&cfg, Input::Zero, &mut out);
    for s in 0..3 {
        feed(&cfg, &mut b, s, bval(1, false));
    }
    feed(&cfg, &mut b, 1, bval(1, true));
    feed(&cfg, &mut b, 2, bval(1, true));
    for s in 1..4 {
        feed(&cfg, &mut b, s, aux(1, BinSet::One));
    }
    assert_eq!(b.round(), 1, "AUX({{1}}) do not qualify while 1 ∉ bin_values");
    // A B_VAL, not an AUX, makes them qualify: the guard must be re-run.
    feed(&cfg, &mut b, 3, bval(1, true));
    assert_eq!(b.decided(), Some(true));
}

#[test]
fn p3_aux_predicate_is_exactly_section_3_5() {
    let cfg = DbftConfig::new(4);
    let mut b = Binary::new(&cfg, 0);
    let mut out = vec![];
    b.propose(&cfg, Input::Zero, &mut out);
    for s in 0..3 {
        feed(&cfg, &mut b, s, bval(1, false));
        feed(&cfg, &mut b, s, bval(1, true));
    }
    // One AUX per sender, first wins.
    feed(&cfg, &mut b, 1, aux(1, BinSet::Zero));
    let (_, r) = feed_r(&cfg, &mut b, 1, aux(1, BinSet::One));
    assert_eq!(r, Err(DropReason::Duplicate));
    feed(&cfg, &mut b, 2, aux(1, BinSet::Zero));
    // {0},{0},{1}: no value has n−t supporters, yet their union {0,1} is a valid `values`.
    feed(&cfg, &mut b, 3, aux(1, BinSet::One));
    assert_eq!(b.round(), 2);
    assert!(b.est(), "values = {{0,1}}: est := parity of round 1 = 1");
    assert_eq!(b.decided(), None);
}

#[test]
fn p3_aux_outside_bin_values_never_counts() {
    let cfg = DbftConfig::new(4);
    let mut b = Binary::new(&cfg, 0);
    let mut out = vec![];
    b.propose(&cfg, Input::Zero, &mut out);
    for s in 0..3 {
        feed(&cfg, &mut b, s, bval(1, false));
    }
    feed(&cfg, &mut b, 3, aux(1, BinSet::One)); // Byzantine value
    feed(&cfg, &mut b, 1, aux(1, BinSet::Zero));
    feed(&cfg, &mut b, 2, aux(1, BinSet::Zero));
    assert_eq!(b.round(), 1, "only 2 qualifying senders");
    feed(&cfg, &mut b, 0, aux(1, BinSet::Zero));
    assert_eq!(b.round(), 2);
    assert!(!b.est(), "the Byzantine 1 never entered values");
}

#[test]
fn p4_second_timer_and_new5_defeat_aux_dilution() {
    // Correct coordinator r0 says 0; Byzantine r3 sends AUX({0,1}) early.
    let mut cfg = DbftConfig::new(4);
    cfg.zero_timeout_rounds = 0;
    let mut b = Binary::new(&cfg, 1);
    let mut out = vec![];
    b.propose(&cfg, Input::One, &mut out);
    for s in [0, 1, 2, 3] {
        feed(&cfg, &mut b, s, bval(1, false));
        feed(&cfg, &mut b, s, bval(1, true));
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
    b.on_timer(&cfg, 1, TimerKind::First, &mut out);
    assert_eq!(b.my_aux(1), Some(BinSet::Zero));
    feed(&cfg, &mut b, 3, aux(1, BinSet::Both));
    feed(&cfg, &mut b, 1, aux(1, BinSet::Zero));
    feed(&cfg, &mut b, 0, aux(1, BinSet::Zero));
    // n−t AUX here, with union {0,1}: without the second timer est would become 1.
    assert_eq!(b.phase(), Phase::WaitValues);
    feed(&cfg, &mut b, 2, aux(1, BinSet::Zero));
    b.on_timer(&cfg, 1, TimerKind::Second, &mut out);
    assert_eq!(b.round(), 2);
    assert!(!b.est(), "New5: own {{0}} is achievable, so values = {{0}}");
}

#[test]
fn p5_coord_only_from_coordinator_and_only_if_in_bin_values() {
    let mut cfg = DbftConfig::new(4);
    cfg.zero_timeout_rounds = 0;
    let mut b = Binary::new(&cfg, 1);
    let mut out = vec![];
    b.propose(&cfg, Input::Zero, &mut out);
    let (_, r) = feed_r(
        &cfg,
        &mut b,
        2,
        BinMsg::Coord {
            round: 1,
            value: false,
        },
    );
    assert_eq!(r, Err(DropReason::NotCoordinator), "coord(1) = r0");
    for s in 1..4 {
        feed(&cfg, &mut b, s, bval(1, false));
    }
    feed(
        &cfg,
        &mut b,
        0,
        BinMsg::Coord {
            round: 1,
            value: true,
        },
    ); // 1 ∉ bin_values
    let (_, r) = feed_r(
        &cfg,
        &mut b,
        0,
        BinMsg::Coord {
            round: 1,
            value: false,
        },
    );
    assert_eq!(r, Err(DropReason::Duplicate), "first COORD per round wins");
    b.on_timer(&cfg, 1, TimerKind::First, &mut out);
    assert_eq!(
        b.my_aux(1),
        Some(BinSet::Zero),
        "a COORD value outside bin_values is ignored"
    );
}

#[test]
fn p6_a_decided_replica_runs_rounds_d1_and_d2_then_halts() {
    let mut net = BinNet::new(DbftConfig::new(4), &[]);
    for i in 0..4 {
        net.rb_delivered(i);
        net.propose(i, Input::OneViaRb);
    }
    // No DECIDED delivered: only the d+2 rule may stop an instance.
    for _ in 0..50 {
        net.deliver_where(|f| !matches!(f.msg, BinMsg::Decided { .. }));
        net.fire_timers();
    }
    for i in 0..4 {
        let b = net.node(i);
        assert_eq!(b.round_decided(), Some(1));
        assert_eq!(b.round(), 3, "ran rounds d+1 and d+2");
        assert_eq!(b.phase(), Phase::Halted);
        for r in [2, 3] {
            assert!(
                net.sent[i].contains(&aux(r, BinSet::One)),
                "AUX of round {r} sent"
            );
        }
        assert!(
            !net.sent[i].iter().any(|m| m.round() == Some(4)),
            "no round after d+2"
        );
    }
}

#[test]
fn p7_round_one_has_parity_one_so_the_rb_fast_path_decides_there() {
    let cfg = DbftConfig::new(4);
    let mut b = Binary::new(&cfg, 0);
    let mut out = vec![];
    b.rb_delivered(&cfg, &mut out);
    b.propose(&cfg, Input::OneViaRb, &mut out);
    assert_eq!(b.round(), 1);
    for s in 1..4 {
        feed(&cfg, &mut b, s, aux(1, BinSet::One));
    }
    assert_eq!((b.decided(), b.round_decided()), (Some(true), Some(1)));
    assert_eq!(cfg.coord(1), 0, "coordinators 0-indexed: round 1 → r0");
}

#[test]
fn p8_rb_delivery_after_zero_input_still_puts_one_in_round_one() {
    let cfg = DbftConfig::new(4);
    let mut b = Binary::new(&cfg, 0);
    let mut out = vec![];
    b.propose(&cfg, Input::Zero, &mut out);
    assert_eq!(b.bin_values(1), [false, false]);
    b.rb_delivered(&cfg, &mut out);
    assert_eq!(b.bin_values(1), [false, true]);
    assert_eq!(
        b.input(),
        Some(Input::Zero),
        "the input is not changed, only bin_values"
    );
}

#[test]
fn p8_no_zero_before_a_one_is_decided_and_all_n_instances_run() {
    let mut net = Net::new(DbftConfig::new(4), &[3]);
    // Nobody hears from anyone yet: no instance may have been invoked with 0.
    for i in net.correct() {
        net.propose(i, 0, batch(i, 0, 1));
        let st = net.node(i).epoch(0).unwrap();
        assert!((0..4).all(|k| st.binary(k).input().is_none()));
    }
    let mut zero_before_one = false;
    while net.step() {
        for i in net.correct() {
            let st = net.node(i).epoch(0).unwrap();
            let any_zero = (0..4).any(|k| st.binary(k).input() == Some(Input::Zero));
            let any_one = (0..4).any(|k| st.binary(k).decided() == Some(true));
            zero_before_one |= any_zero && !any_one;
        }
    }
    net.run(100_000);
    assert!(!zero_before_one);
    for i in net.correct() {
        let st = net.node(i).epoch(0).unwrap();
        assert!(
            (0..4).all(|k| st.binary(k).invoked()),
            "every instance invoked at r{i}"
        );
    }
    net.agreed(0);
}

#[test]
fn p9_validity_is_a_pure_function_of_the_bytes() {
    let mut cfg = DbftConfig::new(4);
    cfg.max_batch_requests = 1;
    let mut net = Net::new(cfg, &[3]);
    let mut big = batch(3, 0, 5);
    big.requests.push(batch(3, 0, 6).requests[0].clone());
    net.inject_all(3, DbftMsg::RbInit { epoch: 0, batch: big });
    net.run(1_000);
    for i in net.correct() {
        assert_eq!(
            net.node(i).counters().get(DropReason::BatchTooLarge),
            1,
            "same verdict at every replica"
        );
        assert!(net.node(i).epoch(0).is_none(), "nothing echoed, no state");
    }
}

#[test]
fn p10_timeouts_grow_without_bound_and_catch_up_exists() {
    let mut cfg = DbftConfig::new(4);
    cfg.timeout_cap_ms = u64::MAX;
    assert!(cfg.timeout(40) > cfg.timeout(20) && cfg.timeout(20) > cfg.timeout(3));
    // Catch-up: t+1 senders in a later mini-round release the timer wait.
    cfg.zero_timeout_rounds = 0;
    let mut b = Binary::new(&cfg, 1);
    let mut out = vec![];
    b.propose(&cfg, Input::Zero, &mut out);
    for s in 1..4 {
        feed(&cfg, &mut b, s, bval(1, false));
    }
    assert_eq!(b.phase(), Phase::WaitTimer1);
    feed(&cfg, &mut b, 2, bval(2, false));
    feed(&cfg, &mut b, 3, bval(2, false));
    assert_eq!(b.phase(), Phase::WaitAuxQuorum, "mini-round 3 > 1 at t+1 senders");
}

#[test]
fn p11_identity_comes_from_the_link_only() {
    let cfg = DbftConfig::new(4);
    let mut d = Dbft::new(cfg, ReplicaId(0));
    // r3 sends an INIT: it is r3's proposal, there is no field naming another proposer.
    d.handle(
        Millis(0),
        Event::Message {
            from: ReplicaId(3),
            msg: DbftMsg::RbInit {
                epoch: 0,
                batch: batch(1, 0, 1),
            },
        },
    );
    let st = d.epoch(0).unwrap();
    assert!(st.rb(3).first_init().is_some());
    assert!(st.rb(1).first_init().is_none());
    // A sender index out of range is refused before anything else.
    d.handle(
        Millis(0),
        Event::Message {
            from: ReplicaId(9),
            msg: DbftMsg::RbInit {
                epoch: 0,
                batch: batch(1, 0, 1),
            },
        },
    );
    assert_eq!(d.counters().get(DropReason::BadIndex), 1);
}

#[test]
fn p12_store_keyed_by_digest_under_equivocation() {
    let mut net = Net::new(DbftConfig::new(4), &[3]);
    let (b1, b2) = (batch(3, 0, 1), batch(3, 0, 2));
    let (h1, h2) = (b1.digest(), b2.digest());
    // r0, r1 get B1, r2 gets B2; the Byzantine proposer pushes h1 through.
    net.inject(
        3,
        0,
        DbftMsg::RbInit {
            epoch: 0,
            batch: b1.clone(),
        },
    );
    net.inject(
        3,
        1,
        DbftMsg::RbInit {
            epoch: 0,
            batch: b1.clone(),
        },
    );
    net.inject(
        3,
        2,
        DbftMsg::RbInit {
            epoch: 0,
            batch: b2.clone(),
        },
    );
    net.inject_all(
        3,
        DbftMsg::RbEcho {
            epoch: 0,
            proposer: ReplicaId(3),
            digest: h1,
        },
    );
    net.inject_all(
        3,
        DbftMsg::RbReady {
            epoch: 0,
            proposer: ReplicaId(3),
            digest: h1,
        },
    );
    for i in net.correct() {
        net.propose(i, 0, batch(i, 0, 1));
    }
    net.run(100_000);
    let (mask, selected) = net.agreed(0);
    assert!(mask[3]);
    assert!(selected.contains(&(ReplicaId(3), h1)));
    assert!(
        net.node(2).epoch(0).unwrap().has_batch(&h2),
        "r2 keeps B2 by its digest"
    );
    let out = net.agreed_ready(0);
    assert!(
        out.iter().any(|(p, b)| p.index() == 3 && **b == b1),
        "r2 output B1, fetched"
    );
    assert!(!out.iter().any(|(_, b)| **b == b2));
}

#[test]
fn p13_exactly_one_aux_per_round_even_if_bin_values_grows() {
    let cfg = DbftConfig::new(4);
    let mut b = Binary::new(&cfg, 0);
    let mut out = vec![];
    b.propose(&cfg, Input::Zero, &mut out);
    let mut all = vec![];
    for s in 1..4 {
        all.extend(feed(&cfg, &mut b, s, bval(1, false)));
    }
    for s in 1..4 {
        all.extend(feed(&cfg, &mut b, s, bval(1, true)));
    }
    let auxes = all
        .iter()
        .filter(|o| matches!(o, BinOut::Broadcast(BinMsg::Aux { round: 1, .. })))
        .count();
    assert_eq!(auxes, 1);
    assert_eq!(b.my_aux(1), Some(BinSet::Zero), "a snapshot, not updated");
}

#[test]
fn p14_byzantine_input_is_bounded() {
    let cfg = DbftConfig::new(4);
    let w = cfg.window_epochs;
    let mut d = Dbft::new(cfg.clone(), ReplicaId(0));
    let far = DbftMsg::RbInit {
        epoch: w + 1000,
        batch: batch(3, 0, 1),
    };
    d.handle(
        Millis(0),
        Event::Message {
            from: ReplicaId(3),
            msg: far,
        },
    );
    assert_eq!(d.counters().get(DropReason::EpochTooFar), 1);
    assert_eq!(d.epochs_held(), 0, "far-future epochs create no state");
    let huge = DbftMsg::Bin {
        inst: InstanceId {
            epoch: 0,
            slot: ReplicaId(1),
        },
        msg: bval(u32::MAX, true),
    };
    d.handle(
        Millis(0),
        Event::Message {
            from: ReplicaId(3),
            msg: huge,
        },
    );
    assert_eq!(d.counters().get(DropReason::RoundOutOfWindow), 1);
    assert_eq!(d.epoch(0).map_or(0, |s| s.binary(1).rounds_held()), 0);
    // Extra INITs: at most `max_extra_inits` kept per proposer.
    for tag in 1..10 {
        d.handle(
            Millis(0),
            Event::Message {
                from: ReplicaId(3),
                msg: DbftMsg::RbInit {
                    epoch: 0,
                    batch: batch(3, 0, tag),
                },
            },
        );
    }
    assert_eq!(d.epoch(0).unwrap().stored(), 1 + cfg.max_extra_inits);
    assert_eq!(
        d.counters().get(DropReason::ExtraInit),
        9 - 1 - cfg.max_extra_inits as u64
    );
    // FETCH flood: a peer is served a bounded number of times.
    let h = batch(3, 0, 1).digest();
    for _ in 0..10 {
        let req = DbftMsg::BatchRequest {
            epoch: 0,
            proposer: ReplicaId(3),
            digest: h,
        };
        d.handle(
            Millis(0),
            Event::Message {
                from: ReplicaId(2),
                msg: req,
            },
        );
    }
    assert_eq!(
        d.counters().get(DropReason::FetchFlood),
        10 - u64::from(cfg.max_fetch_replies_per_peer)
    );
    // …then once per retry period: replies lost to a partition or our crash
    // must not lock a correct peer out of the batch for ever.
    let served_after = |d: &mut Dbft, at: u64| {
        let req = DbftMsg::BatchRequest {
            epoch: 0,
            proposer: ReplicaId(3),
            digest: h,
        };
        let acts = d.handle(
            Millis(at),
            Event::Message {
                from: ReplicaId(2),
                msg: req,
            },
        );
        acts.iter().any(|a| {
            matches!(
                a,
                Action::Send {
                    msg: DbftMsg::BatchResponse { .. },
                    ..
                }
            )
        })
    };
    assert!(!served_after(&mut d, cfg.fetch_retry_ms - 1));
    assert!(served_after(&mut d, cfg.fetch_retry_ms));
    assert!(!served_after(&mut d, cfg.fetch_retry_ms + 1), "one per period");
    // Collected epochs are refused.
    d.handle(Millis(0), Event::Collect { below: 1 });
    d.handle(
        Millis(0),
        Event::Message {
            from: ReplicaId(3),
            msg: DbftMsg::RbInit {
                epoch: 0,
                batch: batch(3, 0, 1),
            },
        },
    );
    assert_eq!(d.counters().get(DropReason::EpochTooOld), 1);
    assert_eq!(d.epochs_held(), 0);
}

#[test]
fn p15_decide_is_output_once() {
    let cfg = DbftConfig::new(4);
    let mut b = Binary::new(&cfg, 0);
    let mut all = vec![];
    b.rb_delivered(&cfg, &mut all);
    b.propose(&cfg, Input::OneViaRb, &mut all);
    for s in 1..3 {
        all.extend(feed(&cfg, &mut b, s, BinMsg::Decided { value: true }));
    }
    for s in 1..4 {
        all.extend(feed(&cfg, &mut b, s, aux(1, BinSet::One)));
    }
    assert_eq!(b.round_decided(), Some(1), "the round decision happened too");
    assert_eq!(all.iter().filter(|o| matches!(o, BinOut::Decide(_))).count(), 1);
    assert_eq!(
        all.iter()
            .filter(|o| matches!(o, BinOut::Broadcast(BinMsg::Decided { .. })))
            .count(),
        1
    );
}

#[test]
fn p16_every_replica_proposes_in_every_epoch_it_takes_part_in() {
    let mut net = Net::new(DbftConfig::new(4), &[]);
    net.auto_join = false;
    // Only r0 spawns epochs; the others' joins are answered by nobody, so they
    // propose only what the engine proposes itself. Epoch 0 is what they would
    // spawn (Join action); answer that one with an empty batch by hand.
    net.propose(0, 0, batch(0, 0, 1));
    net.run(10_000);
    for i in 1..4 {
        assert_eq!(net.joins[i], vec![0]);
        net.propose(i, 0, chorus_core::Batch::noop());
    }
    net.run(100_000);
    net.agreed(0);
    // Epoch 1 spawned by r0: still the epoch each would spawn, so Join again.
    net.propose(0, 1, batch(0, 1, 1));
    net.run(10_000);
    for i in 1..4 {
        assert_eq!(net.joins[i], vec![0, 1]);
        net.propose(i, 1, chorus_core::Batch::noop());
    }
    net.run(100_000);
    net.agreed(1);
    for i in 0..4 {
        assert!(
            (0..2).all(|e| net.node(i).epoch(e).unwrap().proposed()),
            "r{i} proposed in every epoch"
        );
    }
}
