//! Liveness under Byzantine leaders, catch-up and view-change corner cases
//! (issue 8, findings 2, 3, 7, 8, 12a).

use super::harness::Cluster;
use super::util::{broadcasts, handle, msg, params, peer_gave_up, replica, sends, setup, Setup};
use crate::io::{Action, Event, TimerId};
use crate::replica::Replica;
use chorus_core::{
    Batch, Digest, LaneId, LeaderRotation, Millis, OrderingMode, ReplicaId, ReplicaMsg, Seq, Slot, Status,
    View, ViewChange,
};

const L0: LaneId = LaneId(0);

fn deadline(r: &Replica) -> Option<Millis> {
    r.lane(L0).and_then(|l| l.timer_deadline())
}

/// Replicas `from` prepare and commit `batch` at `slot` (view 0), so that
/// replica `me` decides it.
fn decide_at(s: &Setup, r: &mut Replica, me: u32, now: u64, slot: u64, batch: &Batch) {
    let d = batch.digest();
    for p in [1, 2, 3].into_iter().filter(|p| *p != me) {
        msg(r, now, p, ReplicaMsg::Prepare(s.prepare(p, 0, 0, slot, d)));
    }
    for p in [0, 1, 2, 3].into_iter().filter(|p| *p != me) {
        msg(r, now, p, ReplicaMsg::Commit(s.commit(p, 0, 0, slot, d)));
    }
}

/// Finding 3: a primary that never pre-prepares slot 0 but lets slot 1 decide
/// just before the timeout must not push the timer back: delivery waits for
/// slot 0, so nothing progressed.
#[test]
fn a_decision_above_a_gap_does_not_rearm_the_progress_timer() {
    let mut p = params(OrderingMode::Pbft, 1);
    p.leader_rotation = LeaderRotation::Fixed;
    let s = setup(4, 2, p);
    let mut r1 = replica(&s, 1);
    let b1 = s.batch(0, 1..2);
    msg(
        &mut r1,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 1, &b1)),
    );
    let armed = deadline(&r1).expect("an open slot arms the timer");
    decide_at(&s, &mut r1, 1, armed.0 - 10, 1, &b1);
    assert_eq!(
        r1.lane(L0).map(|l| l.next_undecided()),
        Some(Slot(0)),
        "slot 1 decided, slot 0 still open"
    );
    assert_eq!(
        deadline(&r1),
        Some(armed),
        "a decision above the gap is not progress"
    );
    // Contiguous progress does re-arm (here: nothing is left to wait for).
    let b0 = s.batch(1, 1..2);
    msg(
        &mut r1,
        armed.0 - 5,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &b0)),
    );
    decide_at(&s, &mut r1, 1, armed.0 - 5, 0, &b0);
    assert_eq!(r1.lane(L0).map(|l| l.next_undecided()), Some(Slot(2)));
    assert_ne!(deadline(&r1), Some(armed));
}

fn view_change(
    s: &Setup,
    replica: u32,
    view: u64,
    stable: Option<chorus_core::CheckpointCert>,
    prepared: Vec<chorus_core::PreparedCert>,
) -> ViewChange {
    s.view_change(replica, view, stable, prepared)
}

/// Finding 8: the new-view primary (replica 1) holds no stable checkpoint
/// (low 0, window [0, 16)); the view changes of 2 and 3 carry checkpoint 16
/// and a prepared certificate at slot 20. The view's window is [16, 32): the
/// primary must re-propose slots 16..=20 although they are above its own
/// window, instead of leaving the lane to change view again.
#[test]
fn new_view_primary_behind_the_new_checkpoint_reproposes_the_whole_range() {
    let s = setup(4, 2, params(OrderingMode::Pbft, 1));
    assert_eq!(s.cfg.params.window_slots, 16);
    let mut r1 = replica(&s, 1);
    msg(
        &mut r1,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &s.batch(0, 1..2))),
    );
    let t = deadline(&r1).expect("armed");
    handle(&mut r1, t.0, Event::Timer(TimerId::ViewChange(L0)));
    let cert = s.checkpoint_cert(16, Digest::of(b"state at 16"), &[0, 2, 3]);
    let c = s.batch(1, 1..3);
    let pc = s.prepared_cert(0, 0, 0, 20, &c, &[2, 3]);
    msg(
        &mut r1,
        t.0 + 1,
        2,
        ReplicaMsg::ViewChange(view_change(&s, 2, 1, Some(cert.clone()), vec![pc.clone()])),
    );
    let e = msg(
        &mut r1,
        t.0 + 2,
        3,
        ReplicaMsg::ViewChange(view_change(&s, 3, 1, Some(cert), vec![pc])),
    );
    let nv = broadcasts(&e)
        .into_iter()
        .find_map(|m| match m {
            ReplicaMsg::NewView(nv) => Some(nv),
            _ => None,
        })
        .expect("new view sent");
    assert_eq!(nv.reproposals.first().map(|r| r.slot), Some(Slot(16)));
    assert_eq!(nv.reproposals.last().map(|r| r.slot), Some(Slot(20)));
    let proposed: Vec<Slot> = broadcasts(&e)
        .into_iter()
        .filter_map(|m| match m {
            ReplicaMsg::PrePrepare(pp) => Some(pp.slot),
            _ => None,
        })
        .collect();
    assert_eq!(
        proposed,
        vec![Slot(16), Slot(17), Slot(18), Slot(19)],
        "the no-ops are pre-prepared at once"
    );
    assert!(
        sends(&e)
            .iter()
            .any(|(_, m)| matches!(m, ReplicaMsg::FetchBatch(f) if f.slot == Slot(20))),
        "the batch of slot 20 is fetched to be re-proposed"
    );
    assert_eq!(r1.lane(L0).map(|l| l.low()), Some(Slot(16)));
    // Our next VIEW-CHANGE carries the checkpoint that covers the new low.
    let t2 = deadline(&r1).expect("open re-proposals arm the timer");
    // Not alone: 2f peers gave up on view 1 too (`timeout_cert.rs`).
    peer_gave_up(&mut r1, t2.0 - 1, 2, 0, 1, 16);
    let e = handle(&mut r1, t2.0, Event::Timer(TimerId::ViewChange(L0)));
    let vc = broadcasts(&e)
        .into_iter()
        .find_map(|m| match m {
            ReplicaMsg::ViewChange(vc) => Some(vc),
            _ => None,
        })
        .expect("view change to 2");
    assert_eq!(vc.stable.map(|c| c.seq), Some(Seq(16)));
}

fn status(stable: u64) -> ReplicaMsg {
    ReplicaMsg::Status(Status {
        lane: L0,
        view: View(0),
        next_undecided: Slot(0),
        stable_seq: Seq(stable),
        suspects: false,
        awaits_new_view: false,
    })
}

fn state_requests(e: &[Action]) -> usize {
    sends(e)
        .iter()
        .filter(|(_, m)| matches!(m, ReplicaMsg::StateRequest(_)))
        .count()
}

/// Finding 12a: one peer (f = 1) claiming a far checkpoint cannot make a
/// replica fetch state; f+1 claims can, and claims expire.
#[test]
fn one_peers_stable_claim_does_not_start_a_state_transfer() {
    let s = setup(4, 2, params(OrderingMode::Pbft, 1));
    let mut r0 = replica(&s, 0);
    let tick = s.cfg.params.status_interval_ms;
    let mut requests = 0;
    for i in 1..=6 {
        msg(&mut r0, i * tick - 1, 3, status(400));
        requests += state_requests(&handle(&mut r0, i * tick, Event::Timer(TimerId::Status)));
    }
    assert_eq!(requests, 0, "a lone claim is not evidence");
    let mut requests = 0;
    for i in 7..=9 {
        msg(&mut r0, i * tick - 1, 3, status(400));
        msg(&mut r0, i * tick - 1, 2, status(400));
        requests += state_requests(&handle(&mut r0, i * tick, Event::Timer(TimerId::Status)));
    }
    assert!(requests > 0, "f+1 claims start a transfer");
}

/// Finding 2: with block-wise rotation a crashed replica leads every n-th
/// slot; once blamed for a view change it is excluded by the next NEW-VIEW,
/// for a period that doubles, instead of costing a view change every n slots.
#[test]
fn a_silent_replica_costs_few_view_changes_with_blockwise_rotation() {
    let mut p = params(OrderingMode::Pbft, 1);
    p.leader_rotation = LeaderRotation::BlockWise;
    let mut c = Cluster::new(4, 4, p);
    c.crash(2);
    let mut reqs = Vec::new();
    for seq in 1..=60 {
        for cl in 0..4 {
            c.submit(cl, seq);
            reqs.push((cl, seq));
        }
        c.run_for(30);
    }
    assert!(
        c.run_until(120_000, |c| c.all_executed(&reqs)),
        "every request executes"
    );
    c.check_agreement();
    let slots = c.replica(0).lane(L0).map(|l| l.next_undecided().0).unwrap_or(0);
    let vcs = c.replica(0).status().counters.view_changes;
    assert!(slots >= 40, "enough slots to matter ({slots})");
    assert!(
        vcs <= 6,
        "{vcs} view changes over {slots} slots: the silent replica kept its slots"
    );
}

/// Finding 7: a replica restarted while the others kept ordering catches up
/// a long backlog through `Decided` notices. Client retransmissions of
/// requests the others ordered while it was down reach it at once; they wait
/// in its pool until the catch-up reaches their slots, longer than the
/// view-change timeout. That is no evidence against the leader (f+1 peers
/// report progress beyond ours): the replica must not run off alone to view 1
/// and end there while everyone else is in view 0.
#[test]
fn a_restarted_replica_catches_up_in_the_view_of_the_others() {
    let mut p = params(OrderingMode::Pbft, 1);
    p.leader_rotation = LeaderRotation::Fixed;
    // No checkpoint during the outage: the backlog is caught up slot by slot.
    p.checkpoint_interval = 1024;
    p.window_slots = 2048;
    p.max_lane_drift_slots = 2048;
    let mut c = Cluster::new(4, 3, p);
    let mut reqs = Vec::new();
    let mut seq = 0;
    let mut rounds = |c: &mut Cluster, reqs: &mut Vec<(usize, u64)>, n: u64| {
        for _ in 0..n {
            seq += 1;
            for cl in 0..3 {
                c.submit(cl, seq);
                reqs.push((cl, seq));
            }
            c.run_for(5);
        }
    };
    rounds(&mut c, &mut reqs, 10);
    c.crash(3);
    rounds(&mut c, &mut reqs, 800);
    c.restart(3);
    let retransmitted: Vec<(usize, u64)> = reqs.iter().rev().take(60).copied().collect();
    for (cl, s) in retransmitted {
        c.submit_to(cl, s, &[3]);
    }
    rounds(&mut c, &mut reqs, 40);
    assert!(c.run_until(30_000, |c| c.all_executed(&reqs)));
    c.run_for(3_000);
    c.check_agreement();
    for i in 0..4 {
        let st = c.replica(i).status();
        assert_eq!(st.views, vec![View(0)], "replica {i} left view 0");
        assert_eq!(st.view_changing, vec![false], "replica {i}");
    }
}

/// Replica `from`'s signed statement that it gave up on lane 0 up to `view`.
fn gave_up(s: &Setup, from: u32, view: u64) -> ReplicaMsg {
    ReplicaMsg::Timeout(s.timeout(from, 0, view))
}

fn asks_for(e: &[Action], view: u64) -> bool {
    broadcasts(e)
        .iter()
        .any(|m| matches!(m, ReplicaMsg::ViewChange(vc) if vc.new_view == View(view)))
}

/// Finding 7 (the demo's case): a request waits at one replica only (the
/// others ordered it below a checkpoint this replica installed, so its pool
/// cannot know). Its timer expiring is no evidence against the leader: it
/// signs a timeout and leaves view 0 only once 2f+1 replicas signed one
/// (a certificate, `timeout_cert.rs`), as every correct replica does for a
/// request the leaders really censor.
#[test]
fn a_lone_suspicion_of_censorship_does_not_change_the_view() {
    let mut p = params(OrderingMode::Pbft, 1);
    p.leader_rotation = LeaderRotation::Fixed;
    let s = setup(4, 2, p);
    let mut r1 = replica(&s, 1);
    handle(&mut r1, 1, Event::Request(s.request(0, 1, b"x")));
    let t = deadline(&r1).expect("a waiting request arms the timer");
    let e = handle(&mut r1, t.0, Event::Timer(TimerId::ViewChange(L0)));
    assert!(
        !broadcasts(&e)
            .iter()
            .any(|m| matches!(m, ReplicaMsg::ViewChange(_))),
        "a lone suspicion sends no VIEW-CHANGE"
    );
    assert!(
        broadcasts(&e).iter().any(
            |m| matches!(m, ReplicaMsg::Timeout(to) if to.view == View(0) && to.replica == ReplicaId(1))
        ),
        "our timeout is signed and sent at once"
    );
    assert_eq!(r1.status().views, vec![View(0)]);
    assert_eq!(r1.status().view_changing, vec![false]);
    let e = handle(&mut r1, t.0 + 1, Event::Timer(TimerId::Status));
    assert!(broadcasts(&e)
        .iter()
        .any(|m| matches!(m, ReplicaMsg::Statuses(b) if b.statuses().any(|st| st.suspects))));
    // Still alone one retry later.
    let t2 = deadline(&r1).expect("re-armed");
    handle(&mut r1, t2.0, Event::Timer(TimerId::ViewChange(L0)));
    assert_eq!(r1.status().view_changing, vec![false]);
    // Replica 2 gave up too: f+1 of us, still not a certificate.
    let e = msg(&mut r1, t2.0 + 1, 2, gave_up(&s, 2, 0));
    assert!(!asks_for(&e, 1), "f+1 statements are not a certificate");
    // Replica 3 as well: 2f+1, the view changes at once.
    let e = msg(&mut r1, t2.0 + 2, 3, gave_up(&s, 3, 0));
    assert!(asks_for(&e, 1));
}

/// Replica 2 joins the view change to view 1 (replicas 0 and 1 ask for it),
/// so 2f+1 are in it and its timer runs; the NEW-VIEW is late and the timer
/// expires. Returns the replica and the time of that expiry.
fn timed_out_in_view_change_to_1(s: &Setup) -> (Replica, u64) {
    let mut r2 = replica(s, 2);
    msg(
        &mut r2,
        10,
        0,
        ReplicaMsg::ViewChange(view_change(s, 0, 1, None, vec![])),
    );
    let e = msg(
        &mut r2,
        11,
        1,
        ReplicaMsg::ViewChange(view_change(s, 1, 1, None, vec![])),
    );
    assert!(
        broadcasts(&e)
            .iter()
            .any(|m| matches!(m, ReplicaMsg::ViewChange(vc) if vc.new_view == View(1))),
        "f+1 ask for view 1: replica 2 joins"
    );
    let t = deadline(&r2).expect("2f+1 in the view change: the timer runs");
    let e = handle(&mut r2, t.0, Event::Timer(TimerId::ViewChange(L0)));
    assert!(
        !broadcasts(&e)
            .iter()
            .any(|m| matches!(m, ReplicaMsg::ViewChange(vc) if vc.new_view > View(1))),
        "a NEW-VIEW late for us alone sends no VIEW-CHANGE for view 2"
    );
    (r2, t.0)
}

fn asks_for_view_2(e: &[Action]) -> bool {
    broadcasts(e)
        .iter()
        .any(|m| matches!(m, ReplicaMsg::ViewChange(vc) if vc.new_view == View(2)))
}

/// Finding 7 (`chorus sim --mode pbft --n 4 --faults all --seed 18`): the
/// VIEW-CHANGE of replica 2 never reached the new-view primary 1 (partition),
/// replica 3's came late, so NEW-VIEW(1) was late at replica 2 only. It went
/// to view 2 alone, could never return to view 1 (its VIEW-CHANGE(2) was
/// out), and stayed there while 0, 1 and 3 made progress in view 1. Its
/// expired timer is now only reported (`Status.suspects`); one peer (maybe
/// faulty) reporting the same is not enough, and the NEW-VIEW(1) that comes
/// later brings it into view 1.
#[test]
fn a_late_new_view_alone_does_not_send_a_replica_to_the_next_view() {
    let mut p = params(OrderingMode::Pbft, 1);
    p.leader_rotation = LeaderRotation::Fixed;
    let s = setup(4, 2, p);
    let (mut r2, t) = timed_out_in_view_change_to_1(&s);
    assert_eq!(r2.status().views, vec![View(1)]);
    assert_eq!(r2.status().view_changing, vec![true]);
    let e = handle(&mut r2, t + 1, Event::Timer(TimerId::Status));
    assert!(broadcasts(&e).iter().any(
        |m| matches!(m, ReplicaMsg::Statuses(b) if b.statuses().any(|st| st.suspects && st.view == View(1)))
    ));
    // One peer giving up on view 1 too: f of them may be faulty.
    msg(&mut r2, t + 2, 0, gave_up(&s, 0, 1));
    let t2 = deadline(&r2).expect("re-armed");
    let e = handle(&mut r2, t2.0, Event::Timer(TimerId::ViewChange(L0)));
    assert!(!asks_for_view_2(&e), "f peers are not enough");
    // The primary of view 1 assembles NEW-VIEW from 0, 3 and itself.
    let mut r1 = replica(&s, 1);
    msg(
        &mut r1,
        t2.0,
        0,
        ReplicaMsg::ViewChange(view_change(&s, 0, 1, None, vec![])),
    );
    let e = msg(
        &mut r1,
        t2.0,
        3,
        ReplicaMsg::ViewChange(view_change(&s, 3, 1, None, vec![])),
    );
    let nv = broadcasts(&e)
        .into_iter()
        .find(|m| matches!(m, ReplicaMsg::NewView(_)))
        .expect("replica 1 sends NEW-VIEW(1)");
    msg(&mut r2, t2.0 + 1, 1, nv);
    assert_eq!(r2.status().views, vec![View(1)]);
    assert_eq!(r2.status().view_changing, vec![false], "replica 2 is in view 1");
}

/// The other side of the rule above: when 2f+1 replicas (we and 2f peers)
/// gave up on view 1 (the new-view primary is faulty), replica 2 goes on to
/// view 2.
#[test]
fn a_view_change_goes_on_once_2f_plus_1_replicas_gave_up_on_its_view() {
    let mut p = params(OrderingMode::Pbft, 1);
    p.leader_rotation = LeaderRotation::Fixed;
    let s = setup(4, 2, p);
    let (mut r2, t) = timed_out_in_view_change_to_1(&s);
    msg(&mut r2, t + 1, 0, gave_up(&s, 0, 1));
    let e = msg(&mut r2, t + 2, 3, gave_up(&s, 3, 1));
    assert!(asks_for_view_2(&e), "2f+1 gave up on view 1");
    // A statement for a later view covers view 1 too.
    let (mut r2, t) = timed_out_in_view_change_to_1(&s);
    msg(&mut r2, t + 1, 0, gave_up(&s, 0, 1));
    let e = msg(&mut r2, t + 2, 3, gave_up(&s, 3, 4));
    assert!(asks_for_view_2(&e), "one statement for view 1, one for view 4");
}

/// Finding 7 (`chorus sim --mode pbft --n 7 --requests 8 --seed 59`, and the
/// bulk of the view splits in the acceptance runs): replica 4, active in v1,
/// was cut off from most prepares by a partition, so its slot stayed open
/// while the others decided it; its timer expired and it went to v2 alone,
/// for good. An expired timer in an active view now only signs a timeout:
/// the view changes once 2f+1 replicas signed one (`timeout_cert.rs`), as
/// every correct replica does when the leader really fails.
#[test]
fn a_lone_timeout_in_an_active_view_does_not_change_the_view() {
    let mut p = params(OrderingMode::Pbft, 1);
    p.leader_rotation = LeaderRotation::Fixed;
    let s = setup(4, 2, p);
    let mut r1 = replica(&s, 1);
    let b0 = s.batch(0, 1..2);
    msg(
        &mut r1,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &b0)),
    );
    let t = deadline(&r1).expect("an open slot arms the timer");
    let e = handle(&mut r1, t.0, Event::Timer(TimerId::ViewChange(L0)));
    assert!(
        !broadcasts(&e)
            .iter()
            .any(|m| matches!(m, ReplicaMsg::ViewChange(_))),
        "a timeout nobody else reports sends no VIEW-CHANGE"
    );
    assert!(
        broadcasts(&e)
            .iter()
            .any(|m| matches!(m, ReplicaMsg::Status(st) if st.suspects && st.view == View(0))),
        "the suspicion is announced at once"
    );
    assert_eq!(r1.status().view_changing, vec![false]);
    let e = handle(&mut r1, t.0 + 1, Event::Timer(TimerId::Status));
    assert!(broadcasts(&e).iter().any(
        |m| matches!(m, ReplicaMsg::Statuses(b) if b.statuses().any(|st| st.suspects && st.view == View(0)))
    ));
    let t2 = deadline(&r1).expect("re-armed");
    handle(&mut r1, t2.0, Event::Timer(TimerId::ViewChange(L0)));
    assert_eq!(r1.status().view_changing, vec![false], "still alone");
    // Replica 3 timed out in view 0 too: f+1, not yet a certificate.
    let e = msg(&mut r1, t2.0 + 1, 3, gave_up(&s, 3, 0));
    assert!(!asks_for(&e, 1));
    // A forged statement (replica 2's, signed by 3) counts for nothing.
    let mut forged = s.timeout(3, 0, 0);
    forged.replica = ReplicaId(2);
    let e = msg(&mut r1, t2.0 + 2, 3, ReplicaMsg::Timeout(forged));
    assert!(!asks_for(&e, 1), "a forged timeout is rejected");
    // Replica 2's own: 2f+1, the view changes at once.
    let e = msg(&mut r1, t2.0 + 3, 2, gave_up(&s, 2, 0));
    assert!(asks_for(&e, 1));
}

/// Progress ends a suspicion: a replica whose timed-out slot then decides
/// stops reporting it, so its old report cannot confirm a later timeout of
/// a peer.
#[test]
fn progress_withdraws_a_suspicion() {
    let mut p = params(OrderingMode::Pbft, 1);
    p.leader_rotation = LeaderRotation::Fixed;
    let s = setup(4, 2, p);
    let mut r1 = replica(&s, 1);
    let b0 = s.batch(0, 1..2);
    msg(
        &mut r1,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &b0)),
    );
    let t = deadline(&r1).expect("an open slot arms the timer");
    handle(&mut r1, t.0, Event::Timer(TimerId::ViewChange(L0)));
    decide_at(&s, &mut r1, 1, t.0 + 1, 0, &b0);
    assert_eq!(r1.lane(L0).map(|l| l.next_undecided()), Some(Slot(1)));
    let e = handle(&mut r1, t.0 + 2, Event::Timer(TimerId::Status));
    assert!(broadcasts(&e)
        .iter()
        .any(|m| matches!(m, ReplicaMsg::Statuses(b) if b.statuses().any(|st| !st.suspects))));
}

/// Did the replica `me` sign and send `Timeout(view)`?
fn signs_timeout(actions: &[Action], me: u32, view: u64) -> bool {
    broadcasts(actions)
        .into_iter()
        .any(|m| matches!(m, ReplicaMsg::Timeout(t) if t.replica == ReplicaId(me) && t.view == View(view)))
}

/// The view-split race (rcc seed 10192, `view-split` checker): replica 1
/// saw progress in view 0 and never timed out, while its peers' timers
/// expired; once they had left, replica 1 stayed alone in view 0 and the
/// one that left first stayed alone in the view change (it could never
/// return). A timeout certificate is transferable: 2f+1 signed statements
/// move a replica that never timed out itself, and a replica that holds one
/// relays it to a peer whose `Status` shows it still in the view.
#[test]
fn a_timeout_certificate_moves_a_replica_that_saw_progress() {
    let mut p = params(OrderingMode::Pbft, 1);
    p.leader_rotation = LeaderRotation::Fixed;
    let s = setup(4, 2, p);
    let mut r1 = replica(&s, 1);
    let b0 = s.batch(0, 1..2);
    msg(
        &mut r1,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &b0)),
    );
    decide_at(&s, &mut r1, 1, 2, 0, &b0);
    let e = msg(&mut r1, 3, 0, gave_up(&s, 0, 0));
    assert!(!asks_for(&e, 1), "f statements are not a certificate");
    assert!(
        !signs_timeout(&e, 1, 0),
        "nor are they evidence that view 0 failed"
    );
    // f+1 others gave up (one of them correct): PBFT §4.5.2's first liveness
    // rule, for timeouts. Replica 1 decided everything it knows of, so its
    // own timer would never expire (seed 3000044); at its next status tick it
    // gives up too, and with its own statement holds 2f+1: a certificate.
    let e = msg(&mut r1, 4, 2, gave_up(&s, 2, 0));
    assert!(!signs_timeout(&e, 1, 0), "signed on the status tick, not at once");
    let e = handle(&mut r1, 100, Event::Timer(TimerId::Status));
    assert!(
        signs_timeout(&e, 1, 0),
        "f+1 statements make a replica that saw progress give up"
    );
    assert!(
        asks_for(&e, 1),
        "its own statement completes the certificate: it leaves view 0"
    );
    assert_eq!(r1.status().view_changing, vec![true]);
    // Replica 1 holds the certificate now; a straggler still in view 0
    // (its status says so) gets the statements it lacks.
    let e = msg(
        &mut r1,
        200,
        3,
        ReplicaMsg::Status(Status {
            lane: L0,
            view: View(0),
            next_undecided: Slot(1),
            stable_seq: Seq(0),
            suspects: false,
            awaits_new_view: false,
        }),
    );
    let relayed: Vec<u32> = sends(&e)
        .into_iter()
        .filter_map(|(to, m)| match m {
            ReplicaMsg::Timeout(t) if to == ReplicaId(3) && t.view == View(0) => Some(t.replica.0),
            _ => None,
        })
        .collect();
    assert_eq!(
        relayed,
        vec![0, 1, 2],
        "the certificate (ours too: we left view 0), less the straggler's own"
    );
    // And it moves the straggler: a fresh replica 2 that saw progress.
    let mut r2 = replica(&s, 2);
    for from in [0, 1, 3] {
        msg(&mut r2, 10, 1, gave_up(&s, from, 0));
    }
    assert_eq!(r2.status().views, vec![View(1)]);
    assert_eq!(r2.status().view_changing, vec![true]);
}

/// Found by the sarek sweep (`chorus sim --mode sarek --pillars 8 --seed 28`):
/// a Byzantine replica's first DECIDED notice for a slot was garbage, and
/// the lane kept only each sender's first notice, so its later correct
/// notice never counted; with one correct replica ahead, the laggards never
/// reached f+1 matching notices (and, catching up, never timed out).
/// A sender's newer notice replaces its older one: a correct replica's never
/// changes, so f+1 current matching notices still include a correct one.
#[test]
fn a_garbage_first_decided_notice_does_not_lock_out_the_senders_later_ones() {
    let s = setup(4, 1, params(OrderingMode::Pbft, 1));
    let mut r = replica(&s, 0);
    let notice = |digest| {
        ReplicaMsg::Decided(chorus_core::Decided {
            lane: L0,
            slot: Slot(0),
            digest,
        })
    };
    msg(&mut r, 10, 3, notice(Digest::of(b"garbage")));
    msg(&mut r, 11, 3, notice(Batch::noop_digest()));
    assert_eq!(r.status().next_undecided[0], Slot(0), "one notice is not enough");
    msg(&mut r, 12, 2, notice(Batch::noop_digest()));
    assert_eq!(
        r.status().next_undecided[0],
        Slot(1),
        "f+1 matching current notices decide"
    );
}

/// Seed 3000270: a replica whose link to one slot's leader is cut (here: it
/// never gets the pre-prepare) learned the slot's decision only at its next
/// status tick, and when it led the following slot it proposed that much
/// later, on every such slot, with no view change ever firing. The f+1-th
/// commit for a slot it lacks now makes it tell the committers where it is,
/// once, so their `Decided` notices come back within a round trip.
#[test]
fn the_f_plus_one_th_commit_for_a_slot_we_lack_asks_the_committers_once() {
    use chorus_core::{Digest, OrderingMode, ReplicaId, ReplicaMsg};
    let s = setup(4, 2, params(OrderingMode::Pbft, 1));
    let mut r3 = replica(&s, 3);
    let d = Digest::of(b"a batch r3 never saw");
    let status_to = |e: &[crate::io::Action]| -> Vec<ReplicaId> {
        sends(e)
            .into_iter()
            .filter(|(_, m)| matches!(m, ReplicaMsg::Status(_)))
            .map(|(to, _)| to)
            .collect()
    };
    let e = msg(&mut r3, 10, 1, ReplicaMsg::Commit(s.commit(1, 0, 0, 0, d)));
    assert!(status_to(&e).is_empty(), "one commit may come from a liar");
    let e = msg(&mut r3, 11, 2, ReplicaMsg::Commit(s.commit(2, 0, 0, 0, d)));
    assert_eq!(status_to(&e), vec![ReplicaId(1), ReplicaId(2)]);
    let e = msg(&mut r3, 12, 2, ReplicaMsg::Commit(s.commit(2, 0, 0, 0, d)));
    assert!(
        status_to(&e).is_empty(),
        "a retransmitted commit does not ask again"
    );
    let e = msg(&mut r3, 13, 0, ReplicaMsg::Commit(s.commit(0, 0, 0, 0, d)));
    assert!(status_to(&e).is_empty(), "asked once per slot");
}

/// Replicas other than r2 that, with r2, make 2f+1 at n = 7.
const PEERS_7: [u32; 4] = [0, 3, 4, 5];

/// The wait r2 gives the new-view primary of `view` once `PEERS_7` ask for
/// it at `now` too (2f+1 in the view change: the timer runs).
fn view_change_wait(s: &Setup, r2: &mut Replica, now: u64, view: u64) -> u64 {
    for from in PEERS_7 {
        msg(
            r2,
            now,
            from,
            ReplicaMsg::ViewChange(view_change(s, from, view, None, vec![])),
        );
    }
    assert_eq!(r2.status().views, vec![View(view)]);
    assert_eq!(r2.status().view_changing, vec![true]);
    deadline(r2).expect("2f+1 in the view change: the timer runs").0 - now
}

/// Seed 3100075 (`chorus sim --mode cop --pillars 4 --n 7 --faults all
/// --clients 8 --requests 150 --fault-window-ms 25000 --rotation block-wise`):
/// after the slot leader r0 failed, the next new-view primaries were the
/// silent r6 and r0 itself, and each got the full backed-off wait: every
/// lane stalled 3.6 s at a time and 18 requests missed the liveness bound.
/// A new-view primary our record excludes now gets a quarter of the base
/// timeout; one it does not exclude still gets the backed-off one.
#[test]
fn a_view_change_to_an_excluded_new_view_primary_waits_briefly() {
    let s = setup(7, 2, params(OrderingMode::Pbft, 1));
    let base = s.cfg.params.view_change_timeout_ms;
    let mut r2 = replica(&s, 2);
    // View 1 (new-view primary r1): the full wait; r1 never sends NEW-VIEW.
    let wait = view_change_wait(&s, &mut r2, 10, 1);
    assert!(wait >= base, "r1 is not excluded yet: {wait} ms");
    let t = 10 + wait;
    handle(&mut r2, t, Event::Timer(TimerId::ViewChange(L0)));
    for from in PEERS_7 {
        msg(&mut r2, t + 1, from, gave_up(&s, from, 1));
    }
    assert_eq!(r2.status().views, vec![View(2)], "2f+1 gave up on view 1");
    // Views 2 to 7 fail elsewhere; a certificate for view 7 brings r2 to
    // view 8, whose new-view primary is r1 again.
    for from in [0, 1, 3, 4, 5] {
        msg(&mut r2, t + 2, from, gave_up(&s, from, 7));
    }
    let wait = view_change_wait(&s, &mut r2, t + 3, 8);
    assert_eq!(wait, base / 4, "r1 failed as new-view primary of view 1");

    // Control: a replica that never saw r1 fail waits the full time in view 8.
    let mut fresh = replica(&s, 2);
    for from in [0, 1, 3, 4, 5] {
        msg(&mut fresh, 10, from, gave_up(&s, from, 7));
    }
    let wait = view_change_wait(&s, &mut fresh, 11, 8);
    assert!(wait >= base, "r1 is not excluded here: {wait} ms");
}
