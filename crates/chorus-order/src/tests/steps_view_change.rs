//! PBFT §4.4 per lane: view-change contents, NEW-VIEW construction with
//! re-proposals and no-op gap filling, and acceptance by a backup.

use super::util::{broadcasts, effects, kinds, params, persists, replica, sends, setup, Setup};
use crate::certs::verify_view_change;
use crate::io::{Action, Event, Outbox, PersistRecord, TimerId};
use crate::replica::Replica;
use chorus_core::{
    Batch, BatchReply, FetchBatch, LaneId, Millis, NewView, OrderingMode, PrePrepare, ReplicaId, ReplicaMsg,
    Reproposal, Slot, View, ViewChange,
};
use std::sync::Arc;

const L0: LaneId = LaneId(0);

fn msg(r: &mut Replica, now: u64, from: u32, m: ReplicaMsg) -> Vec<Action> {
    let mut out = Outbox::new();
    r.handle(
        Millis(now),
        Event::Message {
            from: ReplicaId(from),
            msg: m,
        },
        &mut out,
    );
    effects(&mut out)
}

/// Peer `from` reports its timer expired in `view` (`Status.suspects`): a
/// replica leaves a view on its timer only with peers that gave up on it too
/// (`lane/timer.rs`).
fn gave_up(r: &mut Replica, now: u64, from: u32, view: u64) {
    super::util::peer_gave_up(r, now, from, 0, view, 0);
}

fn view_change(s: &Setup, replica: u32, view: u64, prepared: Vec<chorus_core::PreparedCert>) -> ViewChange {
    s.view_change(replica, view, None, prepared)
}

struct Scenario {
    s: Setup,
    a: Batch,
    b: Batch,
    primary: Replica,
    nv: NewView,
}

/// Replica 1 prepared batch `a` at slot 0 in view 0; its timer expires; it is
/// the new-view primary of view 1 (`(1 + lane 0) mod 4`). Replica 2 prepared
/// `a` too; replica 3 prepared `b` at slot 2. Nobody prepared slot 1.
fn scenario() -> (Scenario, Vec<Action>, Vec<Action>) {
    let s = setup(4, 2, params(OrderingMode::Pbft, 1));
    let a = s.batch(0, 1..3);
    let b = s.batch(1, 1..2);
    let mut r1 = replica(&s, 1);
    msg(
        &mut r1,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &a)),
    );
    msg(
        &mut r1,
        2,
        2,
        ReplicaMsg::Prepare(s.prepare(2, 0, 0, 0, a.digest())),
    );
    let deadline = r1.lane(L0).and_then(|l| l.timer_deadline()).expect("timer armed");
    gave_up(&mut r1, deadline.0 - 1, 3, 0);
    let mut out = Outbox::new();
    r1.handle(deadline, Event::Timer(TimerId::ViewChange(L0)), &mut out);
    let vc_effects = effects(&mut out);

    let vc2 = view_change(&s, 2, 1, vec![s.prepared_cert(0, 0, 0, 0, &a, &[2, 3])]);
    let vc3 = view_change(&s, 3, 1, vec![s.prepared_cert(2, 0, 0, 2, &b, &[0, 3])]);
    assert!(msg(&mut r1, deadline.0 + 1, 2, ReplicaMsg::ViewChange(vc2)).is_empty());
    let nv_effects = msg(&mut r1, deadline.0 + 2, 3, ReplicaMsg::ViewChange(vc3));
    let nv = broadcasts(&nv_effects)
        .into_iter()
        .find_map(|m| match m {
            ReplicaMsg::NewView(nv) => Some(nv),
            _ => None,
        })
        .expect("new view sent");
    (
        Scenario {
            s,
            a,
            b,
            primary: r1,
            nv,
        },
        vc_effects,
        nv_effects,
    )
}

#[test]
fn view_change_carries_the_prepared_certificate_and_is_persisted_first() {
    let (sc, vc_effects, _) = scenario();
    let s = &sc.s;
    assert_eq!(
        kinds(&vc_effects),
        vec![
            "broadcast timeout",
            "persist timeout-cert",
            "persist view",
            "broadcast view-change",
            "broadcast timeout",
            "broadcast timeout"
        ]
    );
    assert_eq!(
        vc_effects[2],
        Action::Persist(PersistRecord::View {
            lane: L0,
            view: View(1)
        })
    );
    let ReplicaMsg::ViewChange(vc) = &broadcasts(&vc_effects)[1] else {
        panic!("not a view change");
    };
    assert_eq!(vc.new_view, View(1));
    assert_eq!(vc.replica, ReplicaId(1));
    assert_eq!(vc.stable, None);
    assert_eq!(vc.prepared, vec![s.prepared_cert(0, 0, 0, 0, &sc.a, &[1, 2])]);
    assert_eq!(verify_view_change(&s.cfg, vc), Ok(()));
    let st = sc.primary.status();
    assert_eq!(st.views, vec![View(1)]);
    assert_eq!(st.counters.view_changes, 1);
}

#[test]
fn new_view_reproposes_prepared_digests_and_fills_gaps_with_noops() {
    let (mut sc, _, nv_effects) = scenario();
    let s = &sc.s;
    assert_eq!(
        sc.nv.reproposals,
        vec![
            Reproposal {
                slot: Slot(0),
                digest: sc.a.digest()
            },
            Reproposal {
                slot: Slot(1),
                digest: Batch::noop_digest()
            },
            Reproposal {
                slot: Slot(2),
                digest: sc.b.digest()
            },
        ]
    );
    assert_eq!(sc.nv.view_changes.len(), 3);
    assert_eq!(
        sc.nv.view_changes[0].replica,
        ReplicaId(1),
        "the primary's own view change comes first"
    );
    // Persist the view, send NEW-VIEW, then pre-prepare each re-proposal it
    // holds (persisted first); the batch it lacks is fetched from replica 3,
    // whose certificate names it.
    assert_eq!(
        kinds(&nv_effects),
        vec![
            "persist view",
            "broadcast new-view",
            "persist accepted",
            "broadcast pre-prepare",
            "persist accepted",
            "broadcast pre-prepare",
            "send fetch-batch to 3"
        ]
    );
    let pps: Vec<PrePrepare> = broadcasts(&nv_effects)
        .into_iter()
        .filter_map(|m| match m {
            ReplicaMsg::PrePrepare(p) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(pps[0], s.pre_prepare(1, 0, 1, 0, &sc.a));
    assert_eq!(pps[1], s.pre_prepare(1, 0, 1, 1, &Batch::noop()));
    assert_eq!(
        sends(&nv_effects),
        vec![(
            ReplicaId(3),
            ReplicaMsg::FetchBatch(FetchBatch {
                lane: L0,
                slot: Slot(2),
                digest: sc.b.digest()
            })
        )]
    );
    // The fetched batch must match its digest.
    let wrong = msg(
        &mut sc.primary,
        2000,
        3,
        ReplicaMsg::BatchReply(BatchReply {
            lane: L0,
            slot: Slot(2),
            batch: sc.a.clone(),
        }),
    );
    assert!(wrong.is_empty());
    assert_eq!(sc.primary.counters().rejected("bad-digest"), 1);
    let e = msg(
        &mut sc.primary,
        2001,
        3,
        ReplicaMsg::BatchReply(BatchReply {
            lane: L0,
            slot: Slot(2),
            batch: sc.b.clone(),
        }),
    );
    assert_eq!(
        e,
        vec![
            Action::Persist(PersistRecord::Accepted {
                lane: L0,
                view: View(1),
                slot: Slot(2),
                digest: sc.b.digest(),
                batch: Arc::new(sc.b.clone())
            }),
            Action::Broadcast {
                msg: ReplicaMsg::PrePrepare(s.pre_prepare(1, 0, 1, 2, &sc.b)),
            },
        ]
    );
    assert!(sc
        .primary
        .lane(L0)
        .is_some_and(|l| l.is_active() && l.view() == View(1)));
}

#[test]
fn backup_validates_and_accepts_new_view_then_prepares_reproposals() {
    let (sc, _, _) = scenario();
    let s = &sc.s;
    let mut r2 = replica(s, 2);
    let e = msg(&mut r2, 10, 1, ReplicaMsg::NewView(sc.nv.clone()));
    assert_eq!(
        e,
        vec![Action::Persist(PersistRecord::View {
            lane: L0,
            view: View(1)
        })]
    );
    assert_eq!(r2.status().views, vec![View(1)]);
    assert_eq!(r2.status().view_changing, vec![false]);
    // The primary's pre-prepare of a re-proposal is accepted like any other.
    let e = msg(
        &mut r2,
        11,
        1,
        ReplicaMsg::PrePrepare(s.pre_prepare(1, 0, 1, 1, &Batch::noop())),
    );
    assert_eq!(
        e,
        vec![
            Action::Persist(PersistRecord::Accepted {
                lane: L0,
                view: View(1),
                slot: Slot(1),
                digest: Batch::noop_digest(),
                batch: Arc::new(Batch::noop())
            }),
            Action::Broadcast {
                msg: ReplicaMsg::Prepare(s.prepare(2, 0, 1, 1, Batch::noop_digest())),
            },
        ]
    );
    // A re-proposed slot with another digest is refused, even from the primary.
    msg(
        &mut r2,
        12,
        1,
        ReplicaMsg::PrePrepare(s.pre_prepare(1, 0, 1, 0, &sc.b)),
    );
    assert_eq!(r2.counters().rejected("reproposal-mismatch"), 1);
    // Slot 3 (above the re-proposals) belongs to its view-1 leader (3+1) mod 4 = 0.
    msg(
        &mut r2,
        13,
        1,
        ReplicaMsg::PrePrepare(s.pre_prepare(1, 0, 1, 3, &sc.b)),
    );
    assert_eq!(r2.counters().rejected("wrong-leader"), 1);
}

#[test]
fn backup_rejects_a_new_view_whose_reproposals_do_not_follow_from_its_view_changes() {
    let (sc, _, _) = scenario();
    let s = &sc.s;
    let mut r2 = replica(s, 2);
    let before = r2.status();
    let resign = |mut nv: NewView| {
        nv.sig = s.sign(1, chorus_core::SigKind::NewView, &nv.signing_digest());
        nv
    };
    let mut tampered = sc.nv.clone();
    tampered.reproposals[1].digest = sc.b.digest();
    msg(&mut r2, 10, 1, ReplicaMsg::NewView(resign(tampered)));
    assert_eq!(r2.counters().rejected("nv-reproposal-mismatch"), 1);
    let mut dropped = sc.nv.clone();
    dropped.reproposals.pop();
    msg(&mut r2, 10, 1, ReplicaMsg::NewView(resign(dropped)));
    assert_eq!(r2.counters().rejected("nv-reproposal-mismatch"), 2);
    let mut few = sc.nv.clone();
    few.view_changes.pop();
    msg(&mut r2, 10, 1, ReplicaMsg::NewView(resign(few)));
    assert_eq!(r2.counters().rejected("nv-view-change-count"), 1);
    let mut forged_vc = sc.nv.clone();
    forged_vc.view_changes[1].prepared.clear();
    msg(&mut r2, 10, 1, ReplicaMsg::NewView(resign(forged_vc)));
    assert_eq!(r2.counters().rejected("nv-bad-view-change"), 1);
    // Signed by a replica that is not the view's primary.
    let mut usurped = sc.nv.clone();
    usurped.replica = ReplicaId(3);
    usurped.sig = s.sign(3, chorus_core::SigKind::NewView, &usurped.signing_digest());
    msg(&mut r2, 10, 3, ReplicaMsg::NewView(usurped));
    assert_eq!(r2.counters().rejected("wrong-primary"), 1);
    let mut after = r2.status();
    after.counters = before.counters.clone();
    assert_eq!(after, before);
}

#[test]
fn new_view_relayed_by_another_replica_is_accepted() {
    let (sc, _, _) = scenario();
    let mut r2 = replica(&sc.s, 2);
    // Replica 3, already in view 1, relays the primary's NEW-VIEW.
    let e = msg(&mut r2, 10, 3, ReplicaMsg::NewView(sc.nv.clone()));
    assert_eq!(kinds(&e), vec!["persist view"]);
    assert_eq!(r2.status().views, vec![View(1)]);
    assert_eq!(r2.status().view_changing, vec![false]);
}

#[test]
fn f_plus_one_view_changes_make_a_replica_join() {
    let s = setup(4, 2, params(OrderingMode::Pbft, 1));
    let mut r0 = replica(&s, 0);
    assert!(msg(
        &mut r0,
        1,
        2,
        ReplicaMsg::ViewChange(view_change(&s, 2, 3, vec![]))
    )
    .is_empty());
    let e = msg(
        &mut r0,
        2,
        3,
        ReplicaMsg::ViewChange(view_change(&s, 3, 2, vec![])),
    );
    // f+1 = 2 replicas ask for views 3 and 2: join the highest both reached.
    assert_eq!(
        kinds(&e),
        vec!["persist view", "broadcast view-change", "broadcast timeout"]
    );
    assert_eq!(
        persists(&e),
        vec![PersistRecord::View {
            lane: L0,
            view: View(2)
        }]
    );
    assert_eq!(r0.status().views, vec![View(2)]);
    // Metrics (issue 14 item 2): counted as a join, on lane 0.
    let c = r0.status().counters;
    assert_eq!(c.view_change_causes.get("joined"), Some(&1));
    assert_eq!(c.view_change_causes.len(), 1);
    assert_eq!(c.per_lane.get(&0).map(|l| l.view_changes), Some(1));
}

#[test]
fn new_view_timer_backs_off_exponentially_and_runs_only_with_a_quorum() {
    let s = setup(4, 2, params(OrderingMode::Pbft, 1));
    let mut r2 = replica(&s, 2);
    msg(
        &mut r2,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &s.batch(0, 1..2))),
    );
    let t1 = r2.lane(L0).and_then(|l| l.timer_deadline()).expect("armed");
    gave_up(&mut r2, t1.0 - 1, 1, 0);
    let mut out = Outbox::new();
    r2.handle(t1, Event::Timer(TimerId::ViewChange(L0)), &mut out);
    let causes = r2.status().counters.view_change_causes;
    assert_eq!(causes.get("no-progress"), Some(&1), "{causes:?}");
    // Alone in view change 1: no timer (PBFT §4.5.2), no running off to view 2.
    assert_eq!(r2.lane(L0).and_then(|l| l.timer_deadline()), None);
    msg(
        &mut r2,
        t1.0 + 1,
        0,
        ReplicaMsg::ViewChange(view_change(&s, 0, 1, vec![])),
    );
    msg(
        &mut r2,
        t1.0 + 2,
        3,
        ReplicaMsg::ViewChange(view_change(&s, 3, 1, vec![])),
    );
    // 2f+1 asked for view 1: wait 2x the base timeout for its NEW-VIEW.
    let t2 = r2.lane(L0).and_then(|l| l.timer_deadline()).expect("armed");
    assert_eq!(t2.0 - (t1.0 + 2), 2 * 400);
    gave_up(&mut r2, t2.0 - 2, 0, 1);
    gave_up(&mut r2, t2.0 - 1, 3, 1);
    r2.handle(t2, Event::Timer(TimerId::ViewChange(L0)), &mut out);
    assert_eq!(r2.status().views, vec![View(2)]);
    let c = r2.status().counters;
    assert_eq!(c.view_change_causes.get("new-view-timeout"), Some(&1), "{c:?}");
    assert_eq!(c.per_lane.get(&0).map(|l| l.view_changes), Some(2));
}

/// Replica 2 times out on view 0 and asks for view 1.
fn timed_out_replica(s: &Setup) -> (Replica, Millis) {
    let mut r2 = replica(s, 2);
    msg(
        &mut r2,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &s.batch(0, 1..2))),
    );
    let t1 = r2.lane(L0).and_then(|l| l.timer_deadline()).expect("armed");
    gave_up(&mut r2, t1.0 - 1, 1, 0);
    let mut out = Outbox::new();
    r2.handle(t1, Event::Timer(TimerId::ViewChange(L0)), &mut out);
    assert_eq!(r2.status().view_changing, vec![true]);
    (r2, t1)
}

fn status_tick(r: &mut Replica, now: u64) -> Vec<Action> {
    let mut out = Outbox::new();
    r.handle(Millis(now), Event::Timer(TimerId::Status), &mut out);
    effects(&mut out)
}

#[test]
fn view_change_is_retransmitted_on_every_status_tick_until_the_new_view() {
    let s = setup(4, 2, params(OrderingMode::Pbft, 1));
    let (mut r2, t1) = timed_out_replica(&s);
    // PBFT §4.5.2 liveness: peers cut off when it was first sent must still
    // learn it, so it goes out again on each status tick (one per interval).
    let mut now = t1.0;
    for _ in 0..3 {
        now += 60;
        let e = status_tick(&mut r2, now);
        let vcs: Vec<ViewChange> = broadcasts(&e)
            .into_iter()
            .filter_map(|m| match m {
                ReplicaMsg::ViewChange(vc) => Some(vc),
                _ => None,
            })
            .collect();
        assert_eq!(vcs.len(), 1, "one view change per tick: {:?}", kinds(&e));
        assert_eq!((vcs[0].new_view, vcs[0].replica), (View(1), ReplicaId(2)));
    }
    // Once the view is entered (here from a relayed NEW-VIEW), it stops.
    let (sc, _, _) = scenario();
    let mut r2 = replica(&sc.s, 2);
    msg(&mut r2, 10, 3, ReplicaMsg::NewView(sc.nv.clone()));
    let e = status_tick(&mut r2, 100);
    assert!(!broadcasts(&e)
        .iter()
        .any(|m| matches!(m, ReplicaMsg::ViewChange(_))));
}

#[test]
fn f_view_changes_for_higher_views_do_not_make_a_replica_join() {
    let s = setup(4, 2, params(OrderingMode::Pbft, 1));
    let mut r0 = replica(&s, 0);
    // One replica (possibly faulty) asking for view 5 moves nobody.
    let e = msg(
        &mut r0,
        1,
        3,
        ReplicaMsg::ViewChange(view_change(&s, 3, 5, vec![])),
    );
    assert!(e.is_empty());
    assert_eq!(r0.status().views, vec![View(0)]);
    assert_eq!(r0.status().view_changing, vec![false]);
    // A second one (f+1 = 2) does, to the highest view both asked for.
    let e = msg(
        &mut r0,
        2,
        1,
        ReplicaMsg::ViewChange(view_change(&s, 1, 1, vec![])),
    );
    assert_eq!(
        kinds(&e),
        vec!["persist view", "broadcast view-change", "broadcast timeout"]
    );
    assert_eq!(r0.status().views, vec![View(1)]);
}

#[test]
fn replicas_split_between_v_and_v_plus_one_still_run_the_timer() {
    let s = setup(4, 2, params(OrderingMode::Pbft, 1));
    let (mut r2, t1) = timed_out_replica(&s);
    assert_eq!(r2.lane(L0).and_then(|l| l.timer_deadline()), None);
    // Replica 0 asks for view 1, replica 3 already moved on to view 2 (it
    // timed out on view 1): only two ask for view 1 and only one (f) for
    // view 2, but three (2f+1) have left view 0 for good.
    msg(
        &mut r2,
        t1.0 + 1,
        0,
        ReplicaMsg::ViewChange(view_change(&s, 0, 1, vec![])),
    );
    assert_eq!(r2.lane(L0).and_then(|l| l.timer_deadline()), None);
    msg(
        &mut r2,
        t1.0 + 2,
        3,
        ReplicaMsg::ViewChange(view_change(&s, 3, 2, vec![])),
    );
    assert_eq!(
        r2.status().views,
        vec![View(1)],
        "f replicas are not enough to join"
    );
    let t2 = r2.lane(L0).and_then(|l| l.timer_deadline()).expect("armed");
    assert_eq!(t2.0 - (t1.0 + 2), 2 * 400);
    // On expiry: view 2, where replica 3 already is, with a doubled timeout
    // (replica 0 gave up on view 1 too).
    gave_up(&mut r2, t2.0 - 1, 0, 1);
    let mut out = Outbox::new();
    r2.handle(t2, Event::Timer(TimerId::ViewChange(L0)), &mut out);
    let e = effects(&mut out);
    assert_eq!(r2.status().views, vec![View(2)]);
    assert!(broadcasts(&e)
        .iter()
        .any(|m| matches!(m, ReplicaMsg::ViewChange(vc) if vc.new_view == View(2))));
    // Replica 3's view change for 2 was kept: with replica 0's the quorum
    // for view 2 is complete and the timer runs again, twice as long.
    msg(
        &mut r2,
        t2.0 + 1,
        0,
        ReplicaMsg::ViewChange(view_change(&s, 0, 2, vec![])),
    );
    let t3 = r2.lane(L0).and_then(|l| l.timer_deadline()).expect("armed");
    assert_eq!(t3.0 - (t2.0 + 1), 4 * 400);
}
