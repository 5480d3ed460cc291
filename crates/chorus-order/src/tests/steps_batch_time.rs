//! Issue 17, agreed timestamp: proposers stamp their wall clock on batches
//! (`Batch::time_ms`); a backup refuses a fresh batch more than
//! `max_clock_skew_ms` ahead of its own wall clock (`batch-time-future`),
//! PBFT pre-prepare and DBFT INIT alike, but never a re-proposal.

use super::util::{broadcasts, effects, msg, params, replica, setup, Setup};
use crate::io::{Action, Event, Outbox};
use crate::lane::plan_new_view;
use chorus_core::{
    Batch, DbftWire, LaneId, Millis, NewView, OrderingMode, PrePrepare, ReplicaId, ReplicaMsg, SigKind,
    Signature, Slot, View,
};
use chorus_dbft::DbftMsg;

/// The backups' wall clock in these tests (ms since the Unix epoch).
const WALL: u64 = 1_700_000_000_000;

fn pbft() -> Setup {
    setup(4, 2, params(OrderingMode::Pbft, 1))
}

fn at(mut b: Batch, time_ms: u64) -> Batch {
    b.time_ms = time_ms;
    b
}

fn prepared(actions: &[Action]) -> bool {
    broadcasts(actions)
        .iter()
        .any(|m| matches!(m, ReplicaMsg::Prepare(_)))
}

#[test]
fn a_leader_stamps_its_wall_clock_on_a_batch_with_requests() {
    let mut p = params(OrderingMode::Pbft, 1);
    p.batch_max_requests = 1;
    let s = setup(4, 2, p);
    let mut r = replica(&s, 0);
    r.set_wall_clock(WALL + 7);
    let mut out = Outbox::new();
    r.handle(Millis(1), Event::Request(s.request(0, 1, b"a")), &mut out);
    let pp: Vec<PrePrepare> = broadcasts(&effects(&mut out))
        .into_iter()
        .filter_map(|m| match m {
            ReplicaMsg::PrePrepare(pp) => Some(pp),
            _ => None,
        })
        .collect();
    assert_eq!(pp.len(), 1);
    assert_eq!(pp[0].batch.time_ms, WALL + 7);
    assert_eq!(pp[0].digest, pp[0].batch.digest(), "the time is under the digest");
}

#[test]
fn a_backup_refuses_a_pre_prepare_from_the_future_and_accepts_one_within_the_skew() {
    let s = pbft();
    let skew = s.cfg.params.max_clock_skew_ms;
    let mut r = replica(&s, 1);
    r.set_wall_clock(WALL);
    let future = at(s.batch(0, 1..3), WALL + skew + 1);
    let e = msg(
        &mut r,
        5,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &future)),
    );
    assert!(!prepared(&e), "prepared a batch from the future");
    assert_eq!(r.counters().rejected("batch-time-future"), 1);
    // At the bound, and (no lower bound) far in the past: both accepted.
    let edge = at(s.batch(0, 1..3), WALL + skew);
    let e = msg(
        &mut r,
        6,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &edge)),
    );
    assert!(prepared(&e), "refused a batch within the skew");
    assert_eq!(r.counters().rejected("batch-time-future"), 1);
    let mut r3 = replica(&s, 3);
    r3.set_wall_clock(WALL);
    let old = at(s.batch(0, 1..3), 1);
    let e = msg(
        &mut r3,
        7,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &old)),
    );
    assert!(prepared(&e), "refused a batch from the past");
}

/// A re-proposal was prepared by a quorum already: its time is not checked
/// again, whatever this backup's clock says (it may lag the cluster's).
#[test]
fn a_reproposal_in_a_new_view_is_accepted_whatever_its_time() {
    let s = pbft();
    let skew = s.cfg.params.max_clock_skew_ms;
    // Batch `a` was fresh at view 0 for replicas whose clocks read far
    // ahead of replica 2's.
    let a = at(s.batch(0, 1..3), WALL + 10 * skew);
    let mut r2 = replica(&s, 2);
    r2.set_wall_clock(WALL);
    msg(
        &mut r2,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &a)),
    );
    assert_eq!(r2.counters().rejected("batch-time-future"), 1, "fresh: refused");

    // View 1 (new-view primary 1): slot 0 re-proposes `a`, prepared at
    // view 0 by replicas 0, 1 and 3.
    let cert = s.prepared_cert(0, 0, 0, 0, &a, &[1, 3]);
    let vcs: Vec<_> = [0u32, 1, 3]
        .iter()
        .map(|&r| s.view_change(r, 1, None, vec![cert.clone()]))
        .collect();
    let plan = plan_new_view(&s.cfg, &vcs).expect("decidable");
    assert!(plan
        .reproposals
        .iter()
        .any(|r| r.slot == Slot(0) && r.digest == a.digest()));
    let mut nv = NewView {
        lane: LaneId(0),
        view: View(1),
        view_changes: vcs,
        reproposals: plan.reproposals,
        replica: ReplicaId(1),
        sig: Signature([0; 64]),
        excluded: vec![],
    };
    nv.sig = s.sign(1, SigKind::NewView, &nv.signing_digest());
    msg(&mut r2, 10, 1, ReplicaMsg::NewView(nv));
    assert_eq!(r2.status().views, vec![View(1)]);
    let e = msg(
        &mut r2,
        11,
        1,
        ReplicaMsg::PrePrepare(s.pre_prepare(1, 0, 1, 0, &a)),
    );
    assert!(prepared(&e), "refused a re-proposal for its time");
    assert_eq!(r2.counters().rejected("batch-time-future"), 1);
}

#[test]
fn dbft_does_not_echo_an_init_from_the_future() {
    let s = setup(4, 4, params(OrderingMode::Dispel, 1));
    let skew = s.cfg.params.max_clock_skew_ms;
    let mut r = replica(&s, 1);
    r.set_wall_clock(WALL);
    let init = |epoch, batch| {
        ReplicaMsg::Dbft(DbftWire {
            bytes: bytes::Bytes::from(chorus_dbft::DbftBundle::encode(&[DbftMsg::RbInit {
                epoch,
                batch,
            }])),
        })
    };
    let echoed = |e: &[Action]| {
        broadcasts(e).iter().any(|m| match m {
            ReplicaMsg::Dbft(w) => chorus_core::decode::<chorus_dbft::DbftBundle>(
                &w.bytes,
                &chorus_dbft::DbftConfig::new(4).limits(),
            )
            .is_ok_and(|b| b.0.iter().any(|m| matches!(m, DbftMsg::RbEcho { .. }))),
            _ => false,
        })
    };
    let e = msg(&mut r, 1, 2, init(0, at(s.batch(2, 1..3), WALL + skew + 1)));
    assert!(!echoed(&e), "echoed a batch from the future");
    assert_eq!(r.counters().rejected("batch-time-future"), 1);
    let e = msg(&mut r, 2, 3, init(0, at(s.batch(3, 1..3), WALL + skew)));
    assert!(echoed(&e), "refused a batch within the skew");
}
