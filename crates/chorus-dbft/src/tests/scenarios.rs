//! Spec Appendix B scenarios, with Byzantine senders, on the in-crate networks.

use super::bin_net::{BFlight, BinNet};
use super::harness::{batch, Flight, Net};
use crate::binary::{Input, Phase};
use crate::msg::{BinMsg, BinSet, DbftMsg, InstanceId};
use crate::{DbftConfig, Variant};
use chorus_core::{Digest, ReplicaId};

const BYZ: usize = 3;
const CORRECT: [usize; 3] = [0, 1, 2];

fn is_round(f: &BFlight, r: u32) -> bool {
    f.msg.round() == Some(r)
}

/// One round of the split schedule ([HV22] Lemma B.1 style; n = 4, t = 1,
/// Byzantine r3). Invariant at the start of round r with parity b: the two
/// replicas of `maj` hold ¬b, `min` holds b. The adversary makes `min` see
/// only AUX({¬b}) (est := ¬b, no decision since ¬b ≠ b) and `maj` see
/// {¬b},{¬b},{0,1} (est := b). So the invariant holds again at r+1 and nobody
/// ever decides. Every message is delivered eventually (after the round).
fn split_round(net: &mut BinNet, r: u32, maj: [usize; 2], min: usize) {
    let b = r % 2 == 1;
    let bv = |v| BinMsg::BVal { round: r, value: v };
    // 1. ¬b enters everyone's bin_values (maj's estimates plus the Byzantine one).
    net.deliver_where(|f| maj.contains(&f.from) && f.msg == bv(!b));
    net.inject_to(BYZ, &CORRECT, bv(!b));
    net.deliver_where(|f| f.from == BYZ);
    net.fire_timers(); // everyone sends AUX({¬b})
                       // 2. min collects the three correct AUX({¬b}).
    net.deliver_where(|f| {
        f.to == min && f.from != BYZ && matches!(f.msg, BinMsg::Aux { round, .. } if round == r)
    });
    net.fire_timers();
    // 3. b enters maj's bin_values; maj sees {¬b} (own, each other) and {0,1} (Byzantine).
    net.inject_to(BYZ, &maj, bv(b));
    net.deliver_where(|f| f.from == BYZ);
    net.deliver_where(|f| maj.contains(&f.to) && f.from == min && f.msg == bv(b));
    net.inject_to(
        BYZ,
        &maj,
        BinMsg::Aux {
            round: r,
            values: BinSet::Both,
        },
    );
    net.deliver_where(|f| f.from == BYZ);
    net.deliver_where(|f| {
        maj.contains(&f.to)
            && maj.contains(&f.from)
            && matches!(f.msg, BinMsg::Aux { round, .. } if round == r)
    });
    net.fire_timers();
    for i in CORRECT {
        assert_eq!(net.node(i).round(), r + 1, "r{i} finished round {r}");
    }
    // 4. The rest of round r (late messages, COORDs included) arrives now: too late.
    net.deliver_where(|f| is_round(f, r));
    net.fire_timers();
}

fn split_setup(variant: Variant) -> BinNet {
    let mut cfg = DbftConfig::new(4);
    cfg.variant = variant;
    let mut net = BinNet::new(cfg, &[BYZ]);
    net.propose(0, Input::Zero);
    net.propose(1, Input::Zero);
    net.propose(2, Input::One);
    net
}

#[test]
fn scenario_b1_safe_core_loops_forever_under_the_split_schedule() {
    let mut net = split_setup(Variant::SafeCore);
    for r in 1..=40 {
        split_round(&mut net, r, [0, 1], 2);
        let b = r % 2 == 1;
        assert_eq!(
            (net.node(0).est(), net.node(1).est(), net.node(2).est()),
            (b, b, !b),
            "estimates stay split"
        );
    }
    for i in CORRECT {
        assert!(
            net.decisions[i].is_empty(),
            "the safe core never decides under this schedule"
        );
    }
}

#[test]
fn scenario_b1_psync_decides_once_the_schedule_becomes_synchronous() {
    let mut net = split_setup(Variant::Psync);
    for r in 1..=6 {
        split_round(&mut net, r, [0, 1], 2);
    }
    assert!(
        CORRECT.iter().all(|&i| net.decisions[i].is_empty()),
        "asynchrony: psync cannot decide either"
    );
    net.sync(200);
    assert!(net.all_decided().is_some());
}

#[test]
fn scenario_b2_correct_coordinator_round_after_gst_decides_by_r_plus_1() {
    let mut net = split_setup(Variant::Psync);
    // Split through round 4 (whose coordinator, r3, is the Byzantine one).
    for r in 1..=4 {
        split_round(&mut net, r, [0, 1], 2);
    }
    // GST at round 5: coordinator r0 is correct. The Byzantine replica keeps
    // sending both values and AUX({0,1}) in every round.
    for r in 5..=9 {
        for v in [false, true] {
            net.inject_to(BYZ, &CORRECT, BinMsg::BVal { round: r, value: v });
        }
        net.inject_to(
            BYZ,
            &CORRECT,
            BinMsg::Aux {
                round: r,
                values: BinSet::Both,
            },
        );
    }
    net.sync(500);
    let v = net.all_decided().expect("all decide");
    for i in CORRECT {
        assert!(
            net.node(i).round_decided().unwrap() <= 6,
            "decided in round 5 or 6 (r{i})"
        );
    }
    let _ = v;
}

#[test]
fn scenario_b3_byzantine_coordinator_value_is_never_used() {
    // r0 is Byzantine and coordinates round 1; all correct propose 0.
    let mut net = BinNet::new(DbftConfig::new(4), &[0]);
    for i in 1..4 {
        net.propose(i, Input::Zero);
    }
    net.inject_to(
        0,
        &[1, 2, 3],
        BinMsg::Coord {
            round: 1,
            value: true,
        },
    );
    net.inject_to(
        0,
        &[1, 2, 3],
        BinMsg::BVal {
            round: 1,
            value: true,
        },
    );
    net.inject_to(
        0,
        &[1, 2, 3],
        BinMsg::Aux {
            round: 1,
            values: BinSet::One,
        },
    );
    net.sync(200);
    assert_eq!(
        net.all_decided(),
        Some(false),
        "validity: only 0 was proposed by correct replicas"
    );
    for i in 1..4 {
        assert_eq!(net.node(i).my_aux(1), Some(BinSet::Zero));
    }
}

#[test]
fn scenario_b3_equivocating_coordinator_n7() {
    // r0 (coordinator of round 1) and r6 Byzantine; correct inputs split.
    let mut net = BinNet::new(DbftConfig::new(7), &[0, 6]);
    for (i, v) in [(1, true), (2, true), (3, false), (4, false), (5, true)] {
        net.propose(i, if v { Input::One } else { Input::Zero });
    }
    for r in 1..=6 {
        for byz in [0, 6] {
            for v in [false, true] {
                net.inject_to(byz, &[1, 2, 3, 4, 5], BinMsg::BVal { round: r, value: v });
            }
            net.inject_to(
                byz,
                &[1, 2, 3, 4, 5],
                BinMsg::Aux {
                    round: r,
                    values: BinSet::Both,
                },
            );
        }
        // Different COORD values to different replicas.
        net.inject_to(
            0,
            &[1, 2],
            BinMsg::Coord {
                round: r,
                value: false,
            },
        );
        net.inject_to(
            0,
            &[3, 4, 5],
            BinMsg::Coord {
                round: r,
                value: true,
            },
        );
    }
    net.sync(1000);
    assert!(
        net.all_decided().is_some(),
        "agreement and termination despite the equivocating coordinator"
    );
}

#[test]
fn scenario_b4_byzantine_aux_both_in_correct_coordinator_round() {
    // Only round 1 runs with timeout 0 here (the RB fast path), so the first
    // round whose timers let COORD and every correct AUX arrive is round 2,
    // coordinator r1.
    let mut cfg = DbftConfig::new(4);
    cfg.zero_timeout_rounds = 1;
    let mut net = BinNet::new(cfg, &[BYZ]);
    net.propose(0, Input::One);
    net.propose(1, Input::Zero);
    net.propose(2, Input::Zero);
    for r in 1..=5 {
        for v in [false, true] {
            net.inject_to(BYZ, &CORRECT, BinMsg::BVal { round: r, value: v });
        }
        net.inject_to(
            BYZ,
            &CORRECT,
            BinMsg::Aux {
                round: r,
                values: BinSet::Both,
            },
        );
    }
    net.sync(500);
    let v = net.all_decided().expect("New5 still yields a decision");
    let w = net.node(1).my_aux(2);
    assert!(
        matches!(w, Some(BinSet::Zero) | Some(BinSet::One)),
        "the coordinator's value"
    );
    for i in CORRECT {
        let b = net.node(i);
        if b.round_decided() == Some(1) {
            continue;
        }
        assert_eq!(b.my_aux(2), w, "r{i} followed the correct coordinator");
        assert!(b.round_decided().unwrap() <= 3, "decision by r+1");
        assert_eq!(Some(BinSet::single(v)), w);
    }
}

/// r0, r1 decide 1 in round 1; r2 ends round 1 with {0,1} (undecided).
fn slow_replica_setup() -> BinNet {
    let mut net = BinNet::new(DbftConfig::new(4), &[BYZ]);
    net.propose(0, Input::One);
    net.propose(1, Input::One);
    net.propose(2, Input::Zero);
    let bv = |v| BinMsg::BVal { round: 1, value: v };
    net.inject_to(BYZ, &CORRECT, bv(true));
    net.inject_to(BYZ, &[0, 2], bv(false));
    net.inject_to(
        BYZ,
        &[0, 1],
        BinMsg::Aux {
            round: 1,
            values: BinSet::One,
        },
    );
    net.inject_to(
        BYZ,
        &[2],
        BinMsg::Aux {
            round: 1,
            values: BinSet::Both,
        },
    );
    // r0, r1: 1 from r0, r1, r3; AUX({1}) from r0, r1, r3 → decide 1 in round 1.
    net.deliver_where(|f| [0, 1].contains(&f.to) && f.msg == bv(true));
    net.deliver_where(|f| [0, 1].contains(&f.to) && matches!(f.msg, BinMsg::Aux { round: 1, .. }));
    net.fire_timers();
    net.deliver_where(|f| [0, 1].contains(&f.to) && matches!(f.msg, BinMsg::Aux { round: 1, .. }));
    net.fire_timers();
    assert_eq!(net.decisions[0], vec![true]);
    assert_eq!(net.decisions[1], vec![true]);
    // r2: r0 echoes 0 (r2's and r3's B_VAL(0)); 0 and 1 enter r2's bin_values.
    net.deliver_where(|f| f.to == 0 && f.msg == bv(false));
    net.deliver_where(|f| f.to == 2 && f.msg == bv(false));
    net.fire_timers();
    net.deliver_where(|f| f.to == 2 && f.msg == bv(true));
    net.deliver_where(|f| {
        f.to == 2 && (f.from == BYZ || f.from == 0) && matches!(f.msg, BinMsg::Aux { round: 1, .. })
    });
    net.fire_timers();
    assert_eq!(net.node(2).round(), 2, "r2 finished round 1");
    assert!(net.decisions[2].is_empty(), "with values = {{0,1}}");
    net
}

#[test]
fn scenario_b5_slow_replica_decides_by_d_plus_2_with_rounds_only() {
    let mut net = slow_replica_setup();
    for _ in 0..100 {
        net.deliver_where(|f| !matches!(f.msg, BinMsg::Decided { .. }));
        net.fire_timers();
    }
    assert_eq!(net.decisions[2], vec![true]);
    assert!(net.node(2).round_decided().unwrap() <= 3, "by d+2");
    for i in [0, 1] {
        assert_eq!(
            (net.node(i).round(), net.node(i).phase()),
            (3, Phase::Halted),
            "deciders halt after d+2"
        );
    }
}

#[test]
fn scenario_b5_slow_replica_decides_with_decided_messages_only() {
    let mut net = slow_replica_setup();
    // r2 gets nothing but DECIDED from now on.
    for _ in 0..100 {
        net.deliver_where(|f| f.to != 2 || matches!(f.msg, BinMsg::Decided { .. }));
        net.fire_timers();
    }
    assert_eq!(net.decisions[2], vec![true], "t+1 DECIDED adopt the decision");
    assert_eq!(net.node(2).round_decided(), None);
}

fn equivocation(n: usize, byz: &[usize]) {
    let mut net = Net::new(DbftConfig::new(n), byz);
    let eq = byz[0];
    let correct = net.correct();
    let (b1, b2) = (batch(eq, 0, 1), batch(eq, 0, 2));
    let (h1, h2) = (b1.digest(), b2.digest());
    for (j, &i) in correct.iter().enumerate() {
        let b = if j < correct.len() / 2 {
            b1.clone()
        } else {
            b2.clone()
        };
        net.inject(eq, i, DbftMsg::RbInit { epoch: 0, batch: b });
    }
    for &z in byz {
        net.inject_all(
            z,
            DbftMsg::RbEcho {
                epoch: 0,
                proposer: ReplicaId(eq as u32),
                digest: h1,
            },
        );
    }
    for &i in &correct {
        net.propose(i, 0, batch(i, 0, 1));
    }
    net.run(1_000_000);
    let (_, selected) = net.agreed(0);
    for &i in &correct {
        let rb = net.node(i).epoch(0).unwrap().rb(eq);
        assert_ne!(rb.delivered(), Some(h2), "at most one digest delivered");
    }
    let out = net.agreed_ready(0);
    if selected.iter().any(|(p, _)| p.index() == eq) {
        assert!(out.iter().any(|(_, b)| **b == b1), "holders of B2 fetched B1");
    }
    assert!(!out.iter().any(|(_, b)| **b == b2));
}

#[test]
fn scenario_b6_rb_equivocation_n4() {
    equivocation(4, &[3]);
}

#[test]
fn scenario_b6_rb_equivocation_n7() {
    equivocation(7, &[6, 5]);
}

#[test]
fn scenario_b7_rb_delivery_after_instance_started_with_zero() {
    let mut net = Net::new(DbftConfig::new(4), &[]);
    net.hold = Some(Box::new(|f: &Flight| {
        f.from == 3 && matches!(f.msg, DbftMsg::RbInit { .. })
    }));
    for i in 0..4 {
        net.propose(i, 0, batch(i, 0, 1));
    }
    // Until every replica has started instance 3 with 0.
    let started =
        |net: &Net| (0..4).all(|i| net.node(i).epoch(0).unwrap().binary(3).input() == Some(Input::Zero));
    while !started(&net) {
        assert!(net.step() || net.fire_timer(), "zero phase must start");
    }
    net.release();
    net.run(1_000_000);
    net.agreed(0);
    net.agreed_ready(0);
    for i in 0..4 {
        let st = net.node(i).epoch(0).unwrap();
        assert!(st.rb(3).delivered().is_some());
        assert!(
            st.binary(3).bin_values(1)[1],
            "r{i}: 1 entered bin_values[1] through RB"
        );
    }
}

#[test]
fn scenario_b8_hash_only_decision_then_fetch_with_a_withholding_holder() {
    let mut net = Net::new(DbftConfig::new(4), &[3]);
    let h0 = batch(0, 0, 1).digest();
    // r2 never sees r0's INIT; r0 itself withholds its answer; r3 (Byzantine)
    // claims to hold it (echo) and never answers.
    net.drop = Some(Box::new(|f: &Flight| {
        (f.to == 2 && f.from == 0 && matches!(f.msg, DbftMsg::RbInit { .. }))
            || (f.from == 0 && matches!(f.msg, DbftMsg::BatchResponse { .. }))
    }));
    net.inject_all(
        3,
        DbftMsg::RbEcho {
            epoch: 0,
            proposer: ReplicaId(0),
            digest: h0,
        },
    );
    for i in net.correct() {
        net.propose(i, 0, batch(i, 0, 1));
    }
    net.run(1_000_000);
    let (mask, _) = net.agreed(0);
    assert!(mask[0]);
    let out = net.agreed_ready(0);
    assert!(out.iter().any(|(p, b)| p.index() == 0 && b.digest() == h0));
    assert!(
        net.to_byz
            .iter()
            .any(|f| f.to == 3 && matches!(f.msg, DbftMsg::BatchRequest { .. })),
        "asked the claimed holder"
    );
}

#[test]
fn scenario_b9_pipelined_epochs_and_late_joiner() {
    let mut net = Net::new(DbftConfig::new(4), &[]);
    // r0's view of epoch 0 is delayed, so r0 decides epoch 1 first.
    net.hold = Some(Box::new(|f: &Flight| {
        f.to == 0 && f.msg.epoch() == 0 && f.from != 0
    }));
    for i in 0..4 {
        net.propose(i, 0, batch(i, 0, 1));
    }
    for i in 0..3 {
        net.propose(i, 1, batch(i, 1, 1));
    }
    net.run(1_000_000);
    assert!(
        net.decided[0].contains_key(&1) && !net.decided[0].contains_key(&0),
        "e1 decided first at r0"
    );
    net.release();
    net.run(1_000_000);
    net.agreed(0);
    net.agreed(1);
    // r3 never spawned epoch 1: it joined only after deciding epoch 0.
    let log = &net.log[3];
    let d0 = log.iter().position(|x| *x == ("decided", 0)).unwrap();
    let j1 = log.iter().position(|x| *x == ("join", 1)).expect("r3 joined e1");
    assert!(d0 < j1, "join rule: previous epoch decided first");
}

#[test]
fn scenario_b10_late_past_round_messages_and_aux_before_value() {
    let mut net = BinNet::new(DbftConfig::new(4), &[]);
    for i in 0..4 {
        net.propose(i, Input::Zero);
    }
    // r3 hears nothing until the others halted (they form n − t).
    for _ in 0..50 {
        net.deliver_where(|f| f.to != 3 && !matches!(f.msg, BinMsg::Decided { .. }));
        net.fire_timers();
    }
    assert!((0..3).all(|i| net.node(i).phase() == Phase::Halted));
    // AUX first, then the values (P2), all of them for past rounds of the senders (P1).
    net.deliver_where(|f| f.to == 3 && matches!(f.msg, BinMsg::Aux { .. }));
    net.deliver_where(|f| f.to == 3 && !matches!(f.msg, BinMsg::Decided { .. }));
    net.fire_timers();
    net.deliver_where(|f| f.to == 3 && !matches!(f.msg, BinMsg::Decided { .. }));
    assert_eq!(net.decisions[3], vec![false]);
}

#[test]
fn byzantine_echo_ready_for_a_hash_never_broadcast() {
    for (n, byz) in [(4usize, vec![3usize]), (7, vec![5, 6])] {
        let mut net = Net::new(DbftConfig::new(n), &byz);
        let fake = Digest([0xAB; 32]);
        for &z in &byz {
            for p in 0..n as u32 {
                net.inject_all(
                    z,
                    DbftMsg::RbEcho {
                        epoch: 0,
                        proposer: ReplicaId(p),
                        digest: fake,
                    },
                );
                net.inject_all(
                    z,
                    DbftMsg::RbReady {
                        epoch: 0,
                        proposer: ReplicaId(p),
                        digest: fake,
                    },
                );
            }
        }
        for i in net.correct() {
            net.propose(i, 0, batch(i, 0, 1));
        }
        net.run(1_000_000);
        let (_, selected) = net.agreed(0);
        assert!(selected.iter().all(|(_, d)| *d != fake));
        for i in net.correct() {
            let st = net.node(i).epoch(0).unwrap();
            assert!((0..n).all(|k| st.rb(k).delivered() != Some(fake)), "n={n}");
        }
        net.agreed_ready(0);
    }
}

#[test]
fn byzantine_bv_and_aux_for_both_values_and_lying_decided() {
    for (n, byz) in [(4usize, vec![3usize]), (7, vec![5, 6])] {
        let mut net = Net::new(DbftConfig::new(n), &byz);
        for &z in &byz {
            for k in 0..n as u32 {
                let inst = InstanceId {
                    epoch: 0,
                    slot: ReplicaId(k),
                };
                for r in 1..=3 {
                    for v in [false, true] {
                        net.inject_all(
                            z,
                            DbftMsg::Bin {
                                inst,
                                msg: BinMsg::BVal { round: r, value: v },
                            },
                        );
                    }
                    net.inject_all(
                        z,
                        DbftMsg::Bin {
                            inst,
                            msg: BinMsg::Aux {
                                round: r,
                                values: BinSet::Both,
                            },
                        },
                    );
                    net.inject_all(
                        z,
                        DbftMsg::Bin {
                            inst,
                            msg: BinMsg::Coord {
                                round: r,
                                value: r % 2 == 0,
                            },
                        },
                    );
                }
                net.inject_all(
                    z,
                    DbftMsg::Bin {
                        inst,
                        msg: BinMsg::Decided { value: false },
                    },
                );
            }
        }
        for i in net.correct() {
            net.propose(i, 0, batch(i, 0, 1));
        }
        net.run(1_000_000);
        let (mask, _) = net.agreed(0);
        for i in net.correct() {
            assert!(
                mask[i],
                "n={n}: correct proposer r{i} is in (t lying DECIDED cannot decide 0)"
            );
        }
        net.agreed_ready(0);
    }
}

#[test]
fn byzantine_far_future_epochs_cause_no_join_and_bounded_state() {
    let cfg = DbftConfig::new(7);
    let w = cfg.window_epochs;
    let mut net = Net::new(cfg, &[5, 6]);
    for z in [5, 6] {
        for e in [3, w - 1, w + 5, u64::MAX] {
            net.inject_all(
                z,
                DbftMsg::RbInit {
                    epoch: e,
                    batch: batch(z, 0, 1),
                },
            );
        }
    }
    for i in net.correct() {
        net.propose(i, 0, batch(i, 0, 1));
    }
    net.run(1_000_000);
    net.agreed(0);
    for i in net.correct() {
        let d = net.node(i);
        assert!(d.epochs_held() as u64 <= w);
        for e in [3, w - 1] {
            assert!(!d.epoch(e).unwrap().joined(), "r{i} must not join far epoch {e}");
        }
        assert!(net.joins[i].is_empty());
        assert_eq!(d.counters().get(crate::DropReason::EpochTooFar), 4, "r{i}");
    }
}
