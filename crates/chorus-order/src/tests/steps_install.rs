//! State install and view change (issue 8, finding 1): a replica whose
//! install of a peer's snapshot fails must still stand by everything it
//! prepared below that snapshot's checkpoint, or a Byzantine new-view primary
//! can fill a committed slot with a no-op (PBFT §4.4: a VIEW-CHANGE carries
//! the stable checkpoint and *every* prepared certificate above it).

use super::util::{broadcasts, handle, msg, params, replica, sends, setup, Setup};
use crate::io::{Action, Event, TimerId};
use crate::lane::plan_new_view;
use bytes::Bytes;
use chorus_core::{
    Batch, Digest, LaneId, LeaderRotation, NewView, OrderingMode, ReplicaId, ReplicaMsg, Seq, Signature,
    Slot, StateChunk, StateRequest, Status, View, ViewChange,
};

const L0: LaneId = LaneId(0);

/// n = 7 (f = 2), one PBFT lane, fixed primaries (0 in view 0, 1 in view 1),
/// a checkpoint every 2 positions.
fn setup_n7() -> Setup {
    let mut p = params(OrderingMode::Pbft, 1);
    p.leader_rotation = LeaderRotation::Fixed;
    p.checkpoint_interval = 2;
    p.state_chunk_bytes = 64;
    setup(7, 2, p)
}

fn one<T>(v: Vec<T>, what: &str) -> T {
    let mut v = v;
    assert_eq!(v.len(), 1, "expected exactly one {what}");
    v.remove(0)
}

fn broadcast_vc(actions: &[Action]) -> ViewChange {
    one(
        broadcasts(actions)
            .into_iter()
            .filter_map(|m| match m {
                ReplicaMsg::ViewChange(vc) => Some(vc),
                _ => None,
            })
            .collect(),
        "view change",
    )
}

fn broadcast_prepare(actions: &[Action]) -> ReplicaMsg {
    one(
        broadcasts(actions)
            .into_iter()
            .filter(|m| matches!(m, ReplicaMsg::Prepare(_)))
            .collect(),
        "prepare",
    )
}

fn deliveries(actions: &[Action]) -> Vec<(Seq, Digest)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Deliver { seq, batch, .. } => Some((*seq, batch.digest())),
            _ => None,
        })
        .collect()
}

/// A VIEW-CHANGE a replica signs for view 1 (Byzantine ones: whatever they like).
fn view_change(s: &Setup, replica: u32, prepared: Vec<chorus_core::PreparedCert>) -> ViewChange {
    s.view_change(replica, 1, None, prepared)
}

/// The scenario of issue 8, finding 1. Replicas 0 and 1 are Byzantine;
/// 2, 3 and 6 are real `Replica`s; 4 and 5 are correct and their messages
/// are the ones they would send.
///
/// 1. Slot 0: primary 0 pre-prepares `a`; 2, 3, 4 prepare it (with 1's
///    prepare), 3 decides it (the commits to 2 are lost). 5 decides it from
///    f+1 `Decided` notices without preparing; 3, 4, 5 decide slot 1 (`b`)
///    and vote checkpoint 2; only the Byzantine replicas get the votes, and
///    they now hold a valid certificate that is stable at no correct replica.
/// 2. Replica 2 asks 0 for that state and gets garbage chunks with the valid
///    certificate: the install fails.
/// 3. View change to 1: the Byzantine primary 1 builds NEW-VIEW from the
///    VIEW-CHANGEs of 1, 0, 2, 5 and 6 (2f+1) and drives 6 to a decision at
///    slot 0, with 2's and 5's help.
///
/// Agreement requires 6 to decide `a` at slot 0, as 3 did. With the install
/// truncating 2's log before the checkpoint was adopted, 2's VIEW-CHANGE
/// omitted its certificate for slot 0 and the NEW-VIEW made it a no-op.
#[test]
fn a_failed_install_keeps_prepared_certificates_and_a_byzantine_new_view_cannot_fork_slot_0() {
    let s = setup_n7();
    let a = s.batch(0, 1..2);
    let b = s.batch(1, 1..2);
    let (da, db) = (a.digest(), b.digest());
    let mut r2 = replica(&s, 2);
    let mut r3 = replica(&s, 3);
    let mut r6 = replica(&s, 6);

    // 1. Slot 0 in view 0: 2 and 3 accept 0's pre-prepare and prepare `a`.
    let pp_a = ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &a));
    let p2 = broadcast_prepare(&msg(&mut r2, 1, 0, pp_a.clone()));
    let p3 = broadcast_prepare(&msg(&mut r3, 1, 0, pp_a));
    for (from, p) in [
        (1, ReplicaMsg::Prepare(s.prepare(1, 0, 0, 0, da))),
        (3, p3),
        (4, ReplicaMsg::Prepare(s.prepare(4, 0, 0, 0, da))),
    ] {
        msg(&mut r2, 2, from, p);
    }
    for (from, p) in [
        (1, ReplicaMsg::Prepare(s.prepare(1, 0, 0, 0, da))),
        (2, p2),
        (4, ReplicaMsg::Prepare(s.prepare(4, 0, 0, 0, da))),
    ] {
        msg(&mut r3, 2, from, p);
    }
    let prepared_2 = r2
        .lane(L0)
        .and_then(|l| l.slots.get(&Slot(0)))
        .and_then(|st| st.cert.clone());
    assert!(
        prepared_2.is_some_and(|c| c.digest == da),
        "2 prepared `a` at slot 0"
    );
    let mut delivered_3 = Vec::new();
    for from in [0u32, 1, 2, 4] {
        delivered_3.extend(deliveries(&msg(
            &mut r3,
            3,
            from,
            ReplicaMsg::Commit(s.commit(from, 0, 0, 0, da)),
        )));
    }
    assert_eq!(
        delivered_3,
        vec![(Seq(0), da)],
        "3 decided and delivered `a` at 0"
    );

    // The checkpoint at 2 that 3, 4, 5 voted for and only 0 and 1 heard of:
    // a certificate with 2f+1 valid signatures.
    let cert = s.checkpoint_cert(2, Digest::of(b"state after a, b"), &[0, 1, 3, 4, 5]);

    // 2. The Byzantine replicas claim that checkpoint; 2 is stuck at 0 and
    // asks 0 for the state, which answers with garbage under the valid cert.
    for peer in [0u32, 1] {
        let status = Status {
            lane: L0,
            view: View(0),
            next_undecided: Slot(2),
            stable_seq: Seq(2),
            suspects: false,
            awaits_new_view: false,
        };
        msg(&mut r2, 10, peer, ReplicaMsg::Status(status));
    }
    // Two claims are not f+1 (finding 12a); the certificate itself is
    // evidence: 3, 4 and 5 re-send their pending votes, which reach 2.
    for v in &cert.votes {
        msg(&mut r2, 11, v.replica.0, ReplicaMsg::Checkpoint(v.clone()));
    }
    handle(&mut r2, 50, Event::Timer(TimerId::Status));
    let e = handle(&mut r2, 100, Event::Timer(TimerId::Status));
    assert!(sends(&e).contains(&(
        ReplicaId(0),
        ReplicaMsg::StateRequest(StateRequest { min_seq: Seq(1) })
    )));
    let garbage = StateChunk {
        cert: cert.clone(),
        index: 0,
        count: 1,
        data: Bytes::from_static(b"garbage"),
    };
    let e = msg(&mut r2, 101, 0, ReplicaMsg::StateChunk(garbage));
    assert!(e.iter().any(|a| matches!(a, Action::InstallState { .. })));
    handle(
        &mut r2,
        102,
        Event::StateInstalled {
            seq: Seq(2),
            state_digest: Digest::of(b"garbage"),
        },
    );
    assert_eq!(r2.counters().rejected("bad-installed-state"), 1);
    assert_eq!(r2.status().stable_seq, Seq(0), "the checkpoint was not adopted");
    // Fully back where it was: the log the checkpoint did not replace is kept.
    assert_eq!(r2.lane(L0).map(|l| l.low()), Some(Slot(0)));
    assert_eq!(r2.status().next_delivery, Seq(0));

    // 3. View change. 5 decided slot 0 without preparing it and prepared `b`
    // at slot 1; 0 and 1 send whatever suits them.
    let cert_b = s.prepared_cert(0, 0, 0, 1, &b, &[1, 3, 4, 5]);
    let vc0 = view_change(&s, 0, vec![]);
    let vc1 = view_change(&s, 1, vec![]);
    let vc5 = view_change(&s, 5, vec![cert_b]);
    // 6 joins on f+1 VIEW-CHANGEs, 2 on those of 0, 1 and 6.
    let mut e6 = Vec::new();
    for (from, vc) in [(0u32, &vc0), (1, &vc1), (5, &vc5)] {
        e6.extend(msg(&mut r6, 200, from, ReplicaMsg::ViewChange(vc.clone())));
    }
    let vc6 = broadcast_vc(&e6);
    let mut e2 = Vec::new();
    for (from, vc) in [(0u32, &vc0), (1, &vc1), (6, &vc6)] {
        e2.extend(msg(&mut r2, 201, from, ReplicaMsg::ViewChange(vc.clone())));
    }
    let vc2 = broadcast_vc(&e2);
    assert!(
        vc2.prepared.iter().any(|c| c.slot == Slot(0) && c.digest == da),
        "2's VIEW-CHANGE must carry its prepared certificate for slot 0: {vc2:?}"
    );

    // The Byzantine primary 1 picks the VIEW-CHANGEs of 1, 0, 2, 5, 6; the
    // re-proposals are whatever they imply (backups recompute them).
    let chosen = vec![vc1, vc0, vc2, vc5, vc6];
    let plan = plan_new_view(&s.cfg, &chosen).expect("decidable");
    let slot0 = plan
        .reproposals
        .iter()
        .find(|r| r.slot == Slot(0))
        .map(|r| r.digest);
    let mut nv = NewView {
        lane: L0,
        view: View(1),
        view_changes: chosen,
        reproposals: plan.reproposals.clone(),
        replica: ReplicaId(1),
        sig: Signature([0; 64]),
        excluded: vec![],
    };
    nv.sig = s.sign(1, chorus_core::SigKind::NewView, &nv.signing_digest());
    let batch0 = match slot0 {
        Some(d) if d == da => a.clone(),
        Some(d) if d == db => b.clone(),
        _ => Batch::noop(),
    };
    let pp0 = ReplicaMsg::PrePrepare(s.pre_prepare(1, 0, 1, 0, &batch0));
    let d0 = batch0.digest();
    msg(&mut r6, 300, 1, ReplicaMsg::NewView(nv.clone()));
    msg(&mut r2, 300, 1, ReplicaMsg::NewView(nv));
    assert_eq!(r6.status().views, vec![View(1)]);
    assert_eq!(r2.status().views, vec![View(1)]);
    // PBFT §4.4: a value committed at a correct replica survives the view
    // change. With 2's certificate missing, slot 0 became a no-op here.
    let accepted = r6
        .lane(L0)
        .and_then(|l| l.nv.as_ref())
        .and_then(|nv| nv.digest(Slot(0)));
    assert_eq!(
        accepted,
        Some(da),
        "the NEW-VIEW 6 accepted must re-propose `a` at slot 0 (no-op = {:?})",
        Batch::noop_digest()
    );
    msg(&mut r6, 301, 1, pp0.clone());
    let p2 = broadcast_prepare(&msg(&mut r2, 301, 1, pp0));
    // 6 prepares with 0's, 2's and 5's prepares (5 accepts the re-proposal
    // like any backup) and decides with the commits of 0, 1, 2, 5.
    msg(&mut r6, 302, 0, ReplicaMsg::Prepare(s.prepare(0, 0, 1, 0, d0)));
    msg(&mut r6, 302, 2, p2);
    msg(&mut r6, 302, 5, ReplicaMsg::Prepare(s.prepare(5, 0, 1, 0, d0)));
    let mut delivered_6 = Vec::new();
    for from in [0u32, 1, 2, 5] {
        delivered_6.extend(deliveries(&msg(
            &mut r6,
            303,
            from,
            ReplicaMsg::Commit(s.commit(from, 0, 1, 0, d0)),
        )));
    }
    assert_eq!(
        delivered_6,
        vec![(Seq(0), da)],
        "agreement: 6 must deliver at position 0 what 3 delivered (a = {da:?}, no-op = {:?})",
        Batch::noop_digest()
    );
}

/// The same guarantee, one level down: while an install is pending nothing
/// is truncated, and a successful one truncates only after adopting the
/// checkpoint, so every VIEW-CHANGE covers the lane's log.
#[test]
fn a_successful_install_adopts_the_checkpoint_then_truncates() {
    let s = setup_n7();
    let a = s.batch(0, 1..2);
    let mut r2 = replica(&s, 2);
    msg(
        &mut r2,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &a)),
    );
    let snap = Bytes::from_static(b"the state at 2");
    let cert = s.checkpoint_cert(2, Digest::of(&snap), &[0, 1, 3, 4, 5]);
    // f+1 peers claim it (finding 12a: fewer could be lying).
    for peer in [3u32, 4, 5] {
        let status = Status {
            lane: L0,
            view: View(0),
            next_undecided: Slot(2),
            stable_seq: Seq(2),
            suspects: false,
            awaits_new_view: false,
        };
        msg(&mut r2, 10, peer, ReplicaMsg::Status(status));
    }
    handle(&mut r2, 50, Event::Timer(TimerId::Status));
    let e = handle(&mut r2, 100, Event::Timer(TimerId::Status));
    let (peer, _) = sends(&e)
        .into_iter()
        .find(|(_, m)| matches!(m, ReplicaMsg::StateRequest(_)))
        .expect("state request");
    let chunk = StateChunk {
        cert: cert.clone(),
        index: 0,
        count: 1,
        data: snap.clone(),
    };
    msg(&mut r2, 101, peer.0, ReplicaMsg::StateChunk(chunk));
    // Installing: delivery paused, nothing truncated yet.
    assert_eq!(r2.lane(L0).map(|l| l.low()), Some(Slot(0)));
    assert!(r2.hub.merger.is_paused());
    handle(
        &mut r2,
        102,
        Event::StateInstalled {
            seq: Seq(2),
            state_digest: Digest::of(&snap),
        },
    );
    let st = r2.status();
    assert_eq!((st.stable_seq, st.next_delivery), (Seq(2), Seq(2)));
    assert_eq!(r2.lane(L0).map(|l| l.low()), Some(Slot(2)));
    assert!(!r2.hub.merger.is_paused());
    // A VIEW-CHANGE now carries the installed checkpoint.
    let owners = crate::rcc_switch::OwnerView {
        cfg: &r2.cfg,
        table: &r2.hub.assignments,
        delivered_rounds: 0,
    };
    let env = crate::lane::LaneEnv {
        stable: r2.hub.checkpointer.stable_cert(),
        stable_seq: r2.hub.checkpointer.stable_seq(),
        hint: &r2.groups[0].pool,
        owners: &owners,
        wall_ms: 0,
    };
    let vc = r2.lane(LaneId(0)).unwrap().build_view_change(&env);
    assert_eq!(vc.stable, Some(cert));
}
