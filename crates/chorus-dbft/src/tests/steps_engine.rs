//! The reduction (spec §4.3–§4.4), hash-only RB through the engine (§5.3),
//! batch fetch, and the join rule (§5.1), on the in-crate network.

use super::harness::{batch, Flight, Net};
use crate::binary::Input;
use crate::counters::DropReason;
use crate::engine::{Action, Dbft, Event, SlotDecision};
use crate::msg::DbftMsg;
use crate::DbftConfig;
use chorus_core::{Batch, Millis, ReplicaId};

fn all_propose(net: &mut Net, epoch: u64) {
    for i in net.correct() {
        net.propose(i, epoch, batch(i, epoch, 1));
    }
}

#[test]
fn reduction_good_case_selects_all_sorted_by_digest() {
    let mut net = Net::new(DbftConfig::new(4), &[]);
    all_propose(&mut net, 0);
    net.run(100_000);
    let (mask, selected) = net.agreed(0);
    assert_eq!(mask, vec![true; 4]);
    assert_eq!(selected.len(), 4);
    let out = net.agreed_ready(0);
    assert_eq!(out.len(), 4);
    for (p, b) in &out {
        assert_eq!(**b, batch(p.index(), 0, 1), "the batch decided for p is p's");
    }
    // Appendix A: the fast path decides every instance in round 1.
    for i in 0..4 {
        for k in 0..4 {
            assert_eq!(net.node(i).epoch(0).unwrap().binary(k).round_decided(), Some(1));
        }
    }
}

#[test]
fn reduction_silent_proposer_decides_noop_for_its_slot() {
    let mut net = Net::new(DbftConfig::new(4), &[3]);
    all_propose(&mut net, 0);
    net.run(100_000);
    let (mask, _) = net.agreed(0);
    assert_eq!(mask, vec![true, true, true, false]);
    for i in net.correct() {
        assert_eq!(net.slot_decisions[i][&(0, 3)], SlotDecision::Noop);
        assert!(matches!(
            net.slot_decisions[i][&(0, 0)],
            SlotDecision::Batch { batch: Some(_), .. }
        ));
        // Instance 3 was started with 0, only after a 1 was decided (P8).
        assert_eq!(net.node(i).epoch(0).unwrap().binary(3).input(), Some(Input::Zero));
    }
    assert_eq!(net.agreed_ready(0).len(), 3);
}

#[test]
fn reduction_keeps_all_rb_delivered_batches_n7() {
    let mut net = Net::new(DbftConfig::new(7), &[5, 6]);
    all_propose(&mut net, 0);
    net.run(1_000_000);
    let (mask, selected) = net.agreed(0);
    assert_eq!(mask, vec![true, true, true, true, true, false, false]);
    assert_eq!(
        selected.len(),
        5,
        "the superblock keeps every delivered batch, not the min index"
    );
    assert_eq!(net.agreed_ready(0).len(), 5);
}

#[test]
fn reduction_identical_batches_output_once() {
    let mut net = Net::new(DbftConfig::new(4), &[]);
    for i in 0..4 {
        net.propose(i, 0, batch(9, 0, 9)); // everyone proposes the same requests
    }
    net.run(100_000);
    let (mask, selected) = net.agreed(0);
    assert_eq!(mask, vec![true; 4]);
    assert_eq!(selected.len(), 4);
    assert_eq!(
        net.agreed_ready(0).len(),
        1,
        "identical digests are kept once (spec §5.2)"
    );
}

#[test]
fn rb_echo_and_ready_carry_only_the_digest() {
    let mut net = Net::new(DbftConfig::new(4), &[]);
    net.propose(0, 0, batch(0, 0, 1));
    let d = batch(0, 0, 1).digest();
    let mut saw = 0;
    for f in &net.inflight {
        match &f.msg {
            DbftMsg::RbInit { .. } => assert_eq!(f.from, 0, "only the proposer sends the bytes"),
            DbftMsg::RbEcho { digest, .. } | DbftMsg::RbReady { digest, .. } => {
                assert_eq!(*digest, d);
                saw += 1;
            }
            _ => {}
        }
    }
    assert_eq!(saw, 3, "the proposer echoes its own INIT (hash only)");
}

#[test]
fn fetch_decided_but_missing_batch_is_digest_checked() {
    let mut net = Net::new(DbftConfig::new(4), &[]);
    // r3 never receives r0's INIT: it must decide on the digest and fetch.
    net.drop = Some(Box::new(|f: &Flight| {
        f.to == 3 && matches!(f.msg, DbftMsg::RbInit { .. }) && f.from == 0
    }));
    // A forged response (digest mismatch) is refused.
    all_propose(&mut net, 0);
    net.run(100_000);
    assert!(net.decided[3].contains_key(&0));
    let forged = DbftMsg::BatchResponse {
        epoch: 0,
        proposer: ReplicaId(0),
        batch: batch(1, 0, 77),
    };
    net.input(
        3,
        Event::Message {
            from: ReplicaId(1),
            msg: forged,
        },
    );
    assert_eq!(net.node(3).counters().get(DropReason::UnrequestedBatch), 1);
    let out = net.agreed_ready(0);
    assert!(out.iter().any(|(p, b)| p.index() == 0 && **b == batch(0, 0, 1)));
    assert!(matches!(
        net.slot_decisions[3][&(0, 0)],
        SlotDecision::Batch { batch: None, .. }
    ));
}

#[test]
fn fetch_response_with_wrong_digest_is_rejected_while_fetching() {
    let cfg = DbftConfig::new(4);
    let mut net = Net::new(cfg, &[]);
    net.drop = Some(Box::new(|f: &Flight| {
        f.to == 3
            && (matches!(f.msg, DbftMsg::RbInit { .. }) && f.from == 0
                || matches!(f.msg, DbftMsg::BatchResponse { .. }))
    }));
    all_propose(&mut net, 0);
    net.run(2_000);
    assert!(net.node(3).epoch(0).unwrap().is_fetching(0));
    let wrong = DbftMsg::BatchResponse {
        epoch: 0,
        proposer: ReplicaId(0),
        batch: batch(0, 0, 2),
    };
    net.drop = None;
    net.input(
        3,
        Event::Message {
            from: ReplicaId(1),
            msg: wrong,
        },
    );
    assert_eq!(net.node(3).counters().get(DropReason::UnrequestedBatch), 1);
    assert!(net.node(3).epoch(0).unwrap().is_fetching(0));
    assert!(!net.ready[3].contains_key(&0));
    let right = DbftMsg::BatchResponse {
        epoch: 0,
        proposer: ReplicaId(0),
        batch: batch(0, 0, 1),
    };
    net.input(
        3,
        Event::Message {
            from: ReplicaId(2),
            msg: right,
        },
    );
    assert!(net.ready[3].contains_key(&0));
}

#[test]
fn join_rule_needs_t_plus_1_senders_and_previous_epoch_decided() {
    let cfg = DbftConfig::new(4);
    let mut d = Dbft::new(cfg, ReplicaId(0));
    let init = |e| DbftMsg::RbInit {
        epoch: e,
        batch: batch(3, e, 1),
    };
    // Epoch 1 seen from t+1 senders while epoch 0 is undecided: no join.
    d.handle(
        Millis(0),
        Event::Message {
            from: ReplicaId(3),
            msg: init(1),
        },
    );
    let echo = DbftMsg::RbEcho {
        epoch: 1,
        proposer: ReplicaId(3),
        digest: batch(3, 1, 1).digest(),
    };
    let acts = d.handle(
        Millis(0),
        Event::Message {
            from: ReplicaId(2),
            msg: echo,
        },
    );
    assert!(d.epoch(1).unwrap().sender_count() >= 2);
    assert!(
        !d.epoch(1).unwrap().joined(),
        "previous epoch not decided: far-future starvation guard"
    );
    assert!(!acts.iter().any(|a| matches!(a, Action::Join { .. })));
    // Epoch 0 (= low, nothing before it) from one sender: not yet.
    d.handle(
        Millis(0),
        Event::Message {
            from: ReplicaId(3),
            msg: init(0),
        },
    );
    assert!(!d.epoch(0).unwrap().joined(), "one sender may be Byzantine");
    let echo0 = DbftMsg::RbEcho {
        epoch: 0,
        proposer: ReplicaId(3),
        digest: batch(3, 0, 1).digest(),
    };
    let acts = d.handle(
        Millis(0),
        Event::Message {
            from: ReplicaId(1),
            msg: echo0,
        },
    );
    assert!(d.epoch(0).unwrap().joined());
    assert!(
        acts.contains(&Action::Join { epoch: 0 }),
        "epoch 0 is the one r0 would spawn: pool batch"
    );
}

#[test]
fn join_rule_whole_network_joins_epoch_spawned_by_one_replica() {
    let mut net = Net::new(DbftConfig::new(4), &[]);
    // Only r2 spawns epoch 0; the others join (r2's INIT plus echoes = t+1 senders).
    net.propose(2, 0, batch(2, 0, 1));
    net.run(100_000);
    for i in [0, 1, 3] {
        assert_eq!(net.joins[i], vec![0], "r{i} joins with its pool");
    }
    let (mask, _) = net.agreed(0);
    assert!(mask[2], "the spawner's batch is in");
    for i in 0..4 {
        assert!(
            net.node(i).epoch(0).unwrap().proposed(),
            "joiners proposed (auto_join answers with their pool)"
        );
    }
    // Now r1 alone spawns epoch 2 while epoch 1 does not exist anywhere else:
    // r1 may, but nobody joins 2 before 1 is decided.
    net.propose(1, 2, batch(1, 2, 1));
    net.run(100_000);
    for i in [0, 2, 3] {
        assert!(!net.node(i).epoch(2).unwrap().joined());
    }
    // Epoch 1 gets spawned by r0; once it is decided, epoch 2 is joined by all.
    net.propose(0, 1, batch(0, 1, 1));
    net.run(200_000);
    net.agreed(1);
    let (mask2, _) = net.agreed(2);
    assert!(
        mask2[1],
        "r1's batch was RB-delivered before anyone joined: 1 via RB"
    );
    for i in [0, 2, 3] {
        assert!(net.node(i).epoch(2).unwrap().joined());
    }
}

#[test]
fn join_rule_empty_batch_when_not_the_epoch_it_would_spawn() {
    let cfg = DbftConfig::new(4);
    let mut d = Dbft::new(cfg, ReplicaId(0));
    // r0 takes part in epochs 0 and 1 itself; epoch 0 decided by DECIDED messages.
    d.handle(
        Millis(0),
        Event::Propose {
            epoch: 0,
            batch: batch(0, 0, 1),
        },
    );
    d.handle(
        Millis(0),
        Event::Propose {
            epoch: 1,
            batch: batch(0, 1, 1),
        },
    );
    assert_eq!(d.next_spawn(), 2);
    // Epoch 3 seen from t+1 senders; epoch 2 is not decided: wait.
    for s in [1, 2] {
        let init = DbftMsg::RbEcho {
            epoch: 3,
            proposer: ReplicaId(1),
            digest: batch(1, 3, 1).digest(),
        };
        d.handle(
            Millis(0),
            Event::Message {
                from: ReplicaId(s),
                msg: init,
            },
        );
    }
    assert!(!d.epoch(3).unwrap().joined());
    // Decide epoch 2 (everything 0 except r1's 1 via DECIDED, bytes irrelevant here).
    for k in 0..4u32 {
        for s in [1, 2, 3] {
            let m = DbftMsg::Bin {
                inst: crate::InstanceId {
                    epoch: 2,
                    slot: ReplicaId(k),
                },
                msg: crate::BinMsg::Decided { value: false },
            };
            d.handle(
                Millis(0),
                Event::Message {
                    from: ReplicaId(s),
                    msg: m,
                },
            );
        }
    }
    assert_eq!(d.epoch(2).unwrap().bitmask(), Some(vec![false; 4]));
    // Epoch 2 was decided without r0 (its epoch 1 is undecided, so it never joined 2).
    assert!(!d.epoch(2).unwrap().joined());
    // Epoch 3 is not: r0 joins it with an empty batch of its own.
    let st = d.epoch(3).unwrap();
    assert!(st.joined() && st.proposed());
    assert!(st.has_batch(&Batch::noop().digest()));
}

/// Replica 0 of n = 4: proposes in epoch 0, sees r1's INIT (r1's broadcast
/// is under way, not delivered), then its own slot 0 is RB-delivered and
/// decides 1 in round 1, which starts the zero phase.
fn engine_at_zero_phase() -> (Dbft, Vec<Action>) {
    use crate::msg::{BinMsg, BinSet, InstanceId};
    let mut d = Dbft::new(DbftConfig::new(4), ReplicaId(0));
    let msg = |d: &mut Dbft, from: u32, msg: DbftMsg| {
        d.handle(
            Millis(10),
            Event::Message {
                from: ReplicaId(from),
                msg,
            },
        )
    };
    let mine = batch(0, 0, 1);
    let digest = mine.digest();
    d.handle(
        Millis(10),
        Event::Propose {
            epoch: 0,
            batch: mine,
        },
    );
    msg(
        &mut d,
        1,
        DbftMsg::RbInit {
            epoch: 0,
            batch: batch(1, 0, 2),
        },
    );
    let p0 = ReplicaId(0);
    for from in [1, 2] {
        msg(
            &mut d,
            from,
            DbftMsg::RbEcho {
                epoch: 0,
                proposer: p0,
                digest,
            },
        );
    }
    for from in [1, 2] {
        msg(
            &mut d,
            from,
            DbftMsg::RbReady {
                epoch: 0,
                proposer: p0,
                digest,
            },
        );
    }
    let inst = InstanceId { epoch: 0, slot: p0 };
    let mut acts = vec![];
    for from in [1, 2] {
        acts = msg(
            &mut d,
            from,
            DbftMsg::Bin {
                inst,
                msg: BinMsg::Aux {
                    round: 1,
                    values: BinSet::One,
                },
            },
        );
    }
    assert_eq!(d.epoch(0).unwrap().binary(0).decided(), Some(true));
    (d, acts)
}

/// Zero-phase grace: once slot 0 decided 1, slots 2 and 3 (nothing seen
/// from their proposers) are input 0 at once, but slot 1, whose INIT is
/// here, waits for its RB delivery and is then input 1 via RB (the fast
/// path) instead of 0 (a split instance: rounds 2 and 3 and their timers).
#[test]
fn zero_phase_grace_waits_for_a_broadcast_under_way() {
    let (mut d, acts) = engine_at_zero_phase();
    let st = d.epoch(0).unwrap();
    assert_eq!(st.binary(2).input(), Some(Input::Zero));
    assert_eq!(st.binary(3).input(), Some(Input::Zero));
    assert_eq!(st.binary(1).input(), None, "slot 1's broadcast is under way");
    assert!(acts.iter().any(|a| matches!(
        a,
        Action::SetTimer {
            id: crate::engine::TimerId::ZeroGrace { epoch: 0 },
            ..
        }
    )));
    let digest = batch(1, 0, 2).digest();
    for from in [2, 3] {
        d.handle(
            Millis(12),
            Event::Message {
                from: ReplicaId(from),
                msg: DbftMsg::RbReady {
                    epoch: 0,
                    proposer: ReplicaId(1),
                    digest,
                },
            },
        );
    }
    // t+1 READY make us READY too; with ours, 2t+1: delivered.
    assert!(d.epoch(0).unwrap().rb(1).delivered().is_some());
    assert_eq!(d.epoch(0).unwrap().binary(1).input(), Some(Input::OneViaRb));
}

/// The grace is bounded: when it ends without a delivery, slot 1 gets 0,
/// so every instance is invoked (P8: the epoch cannot hang on it).
#[test]
fn zero_phase_grace_ends_with_zero() {
    let (mut d, _) = engine_at_zero_phase();
    assert_eq!(d.epoch(0).unwrap().binary(1).input(), None);
    d.handle(
        Millis(40),
        Event::Timer(crate::engine::TimerId::ZeroGrace { epoch: 0 }),
    );
    assert_eq!(d.epoch(0).unwrap().binary(1).input(), Some(Input::Zero));
}
