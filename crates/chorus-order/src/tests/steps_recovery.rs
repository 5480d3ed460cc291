//! Recovery never makes a correct replica contradict what it sent before the
//! crash: same prepare, same pre-prepare, no second NEW-VIEW for a view.

use super::util::{broadcasts, effects, kinds, params, persists, sends, setup, Setup};
use crate::io::{Action, Event, Outbox, PersistRecord, TimerId};
use crate::replica::Replica;
use chorus_core::{
    LaneId, Millis, NewView, OrderingMode, PrePrepare, ReplicaId, ReplicaMsg, Slot, Status, View, ViewChange,
};
use std::sync::Arc;

const L0: LaneId = LaneId(0);

/// A replica plus every record it persisted.
struct Node {
    r: Replica,
    records: Vec<PersistRecord>,
}

impl Node {
    fn new(s: &Setup, me: u32) -> Node {
        let mut out = Outbox::new();
        let r = Replica::new(
            s.cfg.clone(),
            ReplicaId(me),
            s.keys[me as usize].clone(),
            Millis(0),
            &mut out,
        );
        Node {
            r,
            records: Vec::new(),
        }
    }

    fn recover(s: &Setup, me: u32, records: Vec<PersistRecord>, now: u64) -> (Node, Vec<Action>) {
        let mut out = Outbox::new();
        let r = Replica::recover(
            s.cfg.clone(),
            ReplicaId(me),
            s.keys[me as usize].clone(),
            records.clone(),
            Millis(now),
            &mut out,
        );
        let e = effects(&mut out);
        (Node { r, records }, e)
    }

    fn handle(&mut self, now: u64, ev: Event) -> Vec<Action> {
        let mut out = Outbox::new();
        self.r.handle(Millis(now), ev, &mut out);
        let e = effects(&mut out);
        self.records.extend(persists(&e));
        e
    }

    fn msg(&mut self, now: u64, from: u32, m: ReplicaMsg) -> Vec<Action> {
        self.handle(
            now,
            Event::Message {
                from: ReplicaId(from),
                msg: m,
            },
        )
    }
}

fn status(view: u64, next: u64) -> ReplicaMsg {
    ReplicaMsg::Status(Status {
        lane: L0,
        view: View(view),
        next_undecided: Slot(next),
        stable_seq: chorus_core::Seq(0),
        suspects: false,
        awaits_new_view: false,
    })
}

fn view_change(s: &Setup, replica: u32, view: u64, prepared: Vec<chorus_core::PreparedCert>) -> ViewChange {
    s.view_change(replica, view, None, prepared)
}

#[test]
fn recovered_backup_resends_the_same_prepare_and_refuses_a_conflicting_pre_prepare() {
    let s = setup(4, 2, params(OrderingMode::Pbft, 1));
    let a = s.batch(0, 1..3);
    let b = s.batch(1, 1..3);
    let mut n1 = Node::new(&s, 1);
    let e = n1.msg(1, 0, ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &a)));
    let sent_prepare = broadcasts(&e)[0].clone();

    let (mut n1, e) = Node::recover(&s, 1, n1.records, 100);
    assert!(e.is_empty(), "nothing to install or deliver: {:?}", kinds(&e));
    // A peer behind us: we re-send exactly the prepare we sent before.
    let e = n1.msg(200, 2, status(0, 0));
    assert_eq!(sends(&e), vec![(ReplicaId(2), sent_prepare)]);
    // The leader equivocates after our crash: refused.
    n1.msg(201, 0, ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &b)));
    assert_eq!(n1.r.counters().rejected("equivocation"), 1);
    // Its retransmission of the original brings back the signature we could
    // not persist; with replica 2's prepare the slot is prepared.
    assert!(n1
        .msg(202, 0, ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &a)))
        .is_empty());
    let e = n1.msg(203, 2, ReplicaMsg::Prepare(s.prepare(2, 0, 0, 0, a.digest())));
    assert_eq!(kinds(&e), vec!["persist prepared", "broadcast commit"]);
}

#[test]
fn recovered_leader_does_not_propose_its_slot_again_and_resends_the_same_pre_prepare() {
    let mut p = params(OrderingMode::Pbft, 1);
    p.batch_max_requests = 1;
    let s = setup(4, 2, p);
    let mut n0 = Node::new(&s, 0);
    let e = n0.handle(1, Event::Request(s.request(0, 1, b"x")));
    let original = broadcasts(&e)[0].clone();
    assert!(matches!(original, ReplicaMsg::PrePrepare(_)));

    let (mut n0, _) = Node::recover(&s, 0, n0.records, 100);
    // New requests: slot 0 is taken, slot 1 is replica 1's.
    let e = n0.handle(101, Event::Request(s.request(1, 1, b"y")));
    assert!(broadcasts(&e).is_empty());
    let e = n0.msg(200, 1, status(0, 0));
    assert_eq!(sends(&e), vec![(ReplicaId(1), original)]);
}

#[test]
fn recovered_new_view_primary_never_assembles_a_second_new_view() {
    let s = setup(4, 2, params(OrderingMode::Pbft, 1));
    let a = s.batch(0, 1..3);
    // Replica 1 prepares `a` at slot 0, times out, and as primary of view 1
    // sends NEW-VIEW and re-proposes `a`.
    let mut n1 = Node::new(&s, 1);
    n1.msg(1, 0, ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &a)));
    n1.msg(2, 2, ReplicaMsg::Prepare(s.prepare(2, 0, 0, 0, a.digest())));
    let deadline = n1.r.lane(L0).and_then(|l| l.timer_deadline()).expect("armed");
    n1.handle(deadline.0, Event::Timer(TimerId::ViewChange(L0)));
    n1.msg(
        deadline.0 + 1,
        2,
        ReplicaMsg::ViewChange(view_change(&s, 2, 1, vec![])),
    );
    let e = n1.msg(
        deadline.0 + 2,
        3,
        ReplicaMsg::ViewChange(view_change(&s, 3, 1, vec![])),
    );
    let b = broadcasts(&e);
    let nv: NewView = b
        .iter()
        .find_map(|m| match m {
            ReplicaMsg::NewView(nv) => Some(nv.clone()),
            _ => None,
        })
        .expect("new view");
    let reproposal: PrePrepare = b
        .iter()
        .find_map(|m| match m {
            ReplicaMsg::PrePrepare(p) => Some(p.clone()),
            _ => None,
        })
        .expect("re-proposal");
    assert_eq!(reproposal, s.pre_prepare(1, 0, 1, 0, &a));

    // Crash and recover: the lane does not know whether view 1 was installed.
    let (mut n1, e) = Node::recover(&s, 1, n1.records, 5000);
    assert_eq!(
        kinds(&e),
        vec!["persist view", "broadcast view-change", "broadcast timeout"]
    );
    assert_eq!(n1.r.status().view_changing, vec![true]);
    // Even with 2f+1 view changes for view 1 it assembles no NEW-VIEW.
    n1.msg(5001, 2, ReplicaMsg::ViewChange(view_change(&s, 2, 1, vec![])));
    let e = n1.msg(5002, 3, ReplicaMsg::ViewChange(view_change(&s, 3, 1, vec![])));
    assert!(broadcasts(&e)
        .iter()
        .all(|m| !matches!(m, ReplicaMsg::NewView(_))));
    // Its own NEW-VIEW, relayed by replica 2, brings it back into view 1
    // without re-proposing anything differently.
    let e = n1.msg(5003, 2, ReplicaMsg::NewView(nv));
    assert_eq!(kinds(&e), vec!["persist view"]);
    assert_eq!(n1.r.status().view_changing, vec![false]);
    let e = n1.msg(5100, 3, status(1, 0));
    assert_eq!(
        sends(&e),
        vec![(ReplicaId(3), ReplicaMsg::PrePrepare(reproposal))]
    );
}

/// Recover replica 1 from `records` followed by a `Stable` record for
/// checkpoint `stable`; returns the node, its actions and the delivered seqs.
fn recover_after_stable(
    s: &Setup,
    mut records: Vec<PersistRecord>,
    stable: u64,
) -> (Node, Vec<Action>, Vec<u64>) {
    records.push(PersistRecord::Stable {
        cert: s.checkpoint_cert(stable, chorus_core::Digest::of(b"state"), &[0, 1, 2]),
        snapshot: bytes::Bytes::from_static(b"snapshot"),
    });
    let (n1, e) = Node::recover(s, 1, records, 100);
    let delivered = e
        .iter()
        .filter_map(|a| match a {
            Action::Deliver { seq, .. } => Some(seq.0),
            _ => None,
        })
        .collect();
    (n1, e, delivered)
}

/// pbft n=4 seed 40100128: a compacted log keeps the slots decided above a
/// checkpoint, written before that checkpoint became stable, ahead of its
/// `Stable` record. Replayed into the initial window they were dropped, and
/// the replica came back at the checkpoint without them.
#[test]
fn recovery_delivers_slots_decided_before_the_checkpoint_below_them_became_stable() {
    let s = setup(4, 2, params(OrderingMode::Pbft, 1));
    let window = s.cfg.params.window_slots;
    let k = s.cfg.params.checkpoint_interval;
    let stable = window; // above the initial window [0, W)
    assert_eq!(stable % k, 0);
    let decided = s.decided_records(stable..stable + 3);
    let (n1, e, delivered) = recover_after_stable(&s, decided, stable);
    assert_eq!(delivered, vec![stable, stable + 1, stable + 2], "{:?}", kinds(&e));
    assert!(matches!(e[0], Action::InstallState { .. }));
    let st = n1.r.status();
    assert_eq!(st.next_undecided, vec![Slot(stable + 3)]);
    assert_eq!(st.next_delivery, chorus_core::Seq(stable + 3));
}

/// The same with two lanes (cop, 2 pillars): every lane resumes at the
/// checkpoint's slot `seq / lanes`, and the decisions of both lanes written
/// before the `Stable` record are delivered in order.
#[test]
fn recovery_delivers_every_lanes_decisions_written_before_the_stable_record() {
    let s = setup(4, 2, params(OrderingMode::Cop, 2));
    let lanes = 2u64;
    let window = s.cfg.params.window_slots;
    let stable_slot = window; // above the initial window [0, W) of each lane
    let stable = stable_slot * lanes;
    assert_eq!(stable % s.cfg.params.checkpoint_interval, 0);
    let mut records = Vec::new();
    for slot in stable_slot..stable_slot + 2 {
        for lane in 0..lanes as u32 {
            let batch = s.batch(
                0,
                slot * lanes + u64::from(lane)..slot * lanes + u64::from(lane) + 1,
            );
            records.push(PersistRecord::Decided {
                cell: chorus_core::Cell {
                    lane: LaneId(lane),
                    slot: Slot(slot),
                },
                digest: batch.digest(),
                batch: Arc::new(batch),
            });
        }
    }
    let (n1, e, delivered) = recover_after_stable(&s, records, stable);
    assert_eq!(
        delivered,
        (stable..stable + 4).collect::<Vec<_>>(),
        "{:?}",
        kinds(&e)
    );
    let st = n1.r.status();
    assert_eq!(st.next_undecided, vec![Slot(stable_slot + 2); 2]);
}

/// A record below the newest stable checkpoint is covered by it, but the
/// view it was written in still counts: a replica that prepared in view 2
/// comes back in view 2 even if no `View` record survived.
#[test]
fn records_below_the_stable_checkpoint_still_restore_their_view() {
    let s = setup(4, 2, params(OrderingMode::Pbft, 1));
    let a = s.batch(0, 1..3);
    let cert = s.prepared_cert(2, 0, 2, 1, &a, &[0, 1, 3]);
    let records = vec![
        PersistRecord::Prepared { cert },
        PersistRecord::Stable {
            cert: s.checkpoint_cert(4, chorus_core::Digest::of(b"state"), &[0, 1, 2]),
            snapshot: bytes::Bytes::from_static(b"snapshot"),
        },
    ];
    let (n1, _) = Node::recover(&s, 1, records, 100);
    assert_eq!(n1.r.status().views, vec![View(2)]);
}

/// A NEW-VIEW moved the lane's low to a checkpoint above our stable one (no
/// `Stable` record: the snapshot comes later, by state transfer); slots
/// decided there were persisted, then we crashed. Recovery replays them
/// above its window: they wait for it like `Accepted` records, and once the
/// re-learnt NEW-VIEW moves the low again they are decided and handed to the
/// merger. Before, they were dropped, and the replica decided them again or
/// fetched them, if its peers still held them (docs/known-issues.md).
#[test]
fn decisions_above_the_recovered_window_wait_for_the_new_view_that_reaches_them() {
    let s = setup(4, 2, params(OrderingMode::Pbft, 1));
    let w = s.cfg.params.window_slots;
    assert_eq!(w % s.cfg.params.checkpoint_interval, 0);
    let decided = s.decided_records(w..w + 3);
    let (mut n2, e) = Node::recover(&s, 2, decided, 100);
    assert!(!e.iter().any(|a| matches!(a, Action::Deliver { .. })));
    assert_eq!(n2.r.status().next_undecided, vec![Slot(0)]);

    // Peers moved to view 1 from checkpoint w; its NEW-VIEW reaches us.
    let cert = s.checkpoint_cert(w, chorus_core::Digest::of(b"state"), &[0, 1, 3]);
    let nv = s.new_view_from_checkpoint(1, 1, &[0, 1, 3], &cert);
    n2.msg(200, 1, ReplicaMsg::NewView(nv));
    assert_eq!(n2.r.status().views, vec![View(1)]);
    assert_eq!(n2.r.lane(L0).map(|l| l.low()), Some(Slot(w)));
    assert_eq!(n2.r.status().next_undecided, vec![Slot(w + 3)]);
    // The merger holds them until state transfer brings the state at w.
    assert_eq!(n2.r.hub.merger.waiting(), 3);
}

/// Review of 2026-11-26 (MAC prepares, an older bug of both modes): a
/// NEW-VIEW moved the low to a checkpoint we learnt (not persisted) and we
/// prepared a slot above our old window; after a crash we recover with the
/// old window and that slot's records wait above it. A VIEW-CHANGE built
/// then says nothing about the slot, which the next NEW-VIEW reads as
/// "nothing prepared there" (a no-op over a batch that may have committed).
/// So no VIEW-CHANGE leaves until the window reaches those records; then it
/// carries the learnt checkpoint and the slot's certificate.
#[test]
fn no_view_change_omits_a_slot_prepared_above_the_recovered_window() {
    let s = setup(4, 2, params(OrderingMode::Pbft, 1));
    let w = s.cfg.params.window_slots;
    let batch = s.batch(0, 1..2);
    let cert = s.prepared_cert(0, 0, 1, w, &batch, &[2, 3]);
    let records = vec![
        PersistRecord::View {
            lane: L0,
            view: View(1),
        },
        PersistRecord::Accepted {
            lane: L0,
            view: View(1),
            slot: Slot(w),
            digest: batch.digest(),
            batch: Arc::new(batch.clone()),
        },
        PersistRecord::Prepared { cert: cert.clone() },
    ];
    let (mut n1, e) = Node::recover(&s, 1, records, 100);
    assert!(
        !broadcasts(&e)
            .iter()
            .any(|m| matches!(m, ReplicaMsg::ViewChange(_))),
        "a VIEW-CHANGE from the old window would omit slot {w}: {:?}",
        kinds(&e)
    );
    // Status ticks do not send it either while the records still wait; our
    // status asks peers already in view 1 for its NEW-VIEW instead.
    let tick = n1.handle(400, Event::Timer(TimerId::Status));
    assert!(!broadcasts(&tick)
        .iter()
        .any(|m| matches!(m, ReplicaMsg::ViewChange(_))));
    let asks = broadcasts(&tick).into_iter().any(|m| match m {
        ReplicaMsg::Statuses(b) => b.lanes.iter().any(|l| l.view == View(1) && l.awaits_new_view),
        ReplicaMsg::Status(st) => st.view == View(1) && st.awaits_new_view,
        _ => false,
    });
    assert!(asks, "{:?}", kinds(&tick));

    // A peer in view 1 answers such a status with its NEW-VIEW, which
    // covers slot w again.
    let stable = s.checkpoint_cert(w, chorus_core::Digest::of(b"state"), &[0, 2, 3]);
    let nv = s.new_view_from_checkpoint(1, 1, &[0, 2, 3], &stable);
    let mut n0 = Node::new(&s, 0);
    n0.msg(450, 1, ReplicaMsg::NewView(nv));
    let answer = n0.msg(
        460,
        1,
        ReplicaMsg::Status(Status {
            lane: L0,
            view: View(1),
            next_undecided: Slot(0),
            stable_seq: chorus_core::Seq(0),
            suspects: false,
            awaits_new_view: true,
        }),
    );
    let resent = sends(&answer).into_iter().find_map(|(to, m)| match m {
        ReplicaMsg::NewView(nv) if to == ReplicaId(1) => Some(nv),
        _ => None,
    });
    let nv = resent.expect("the NEW-VIEW re-sent to the replica that asked");
    n1.msg(500, 0, ReplicaMsg::NewView(nv));
    assert_eq!(n1.r.lane(L0).map(|l| l.low()), Some(Slot(w)));
    // Peers move to view 2; our VIEW-CHANGE now carries the learnt
    // checkpoint and the certificate of slot w.
    let mut sent = Vec::new();
    for peer in [0, 2] {
        let vc = s.view_change(peer, 2, Some(stable.clone()), vec![]);
        sent.extend(n1.msg(600, peer, ReplicaMsg::ViewChange(vc)));
    }
    let vc = broadcasts(&sent)
        .into_iter()
        .find_map(|m| match m {
            ReplicaMsg::ViewChange(vc) => Some(vc),
            _ => None,
        })
        .expect("view change to view 2 sent");
    assert_eq!(vc.stable.as_ref().map(|c| c.seq), Some(stable.seq));
    assert_eq!(vc.prepared, vec![cert]);
}

/// cluster-restart, pbft n = 4 seed 89: replica 1 left view 0 on a timeout
/// certificate, then every replica restarted (a power loss) and with it
/// every statement they held. Replica 1 still holds the certificate (it is
/// persisted) and relays it, the peer's own statement included, to a peer
/// it sees in view 0: that peer leaves view 0 too instead of leaving
/// replica 1 alone in the view change. Before, nothing was relayed.
#[test]
fn a_restarted_replica_still_relays_the_timeout_certificate_it_left_on() {
    let s = setup(4, 2, params(OrderingMode::Pbft, 1));
    let mut n1 = Node::new(&s, 1);
    let mut left = Vec::new();
    for signer in [0, 2, 3] {
        let t = super::util::timeout_for(&s.cfg, signer, 0, 0);
        left = n1.msg(10 + u64::from(signer), signer, ReplicaMsg::Timeout(t));
    }
    assert!(
        kinds(&left).contains(&"persist timeout-cert".to_string()),
        "{:?}",
        kinds(&left)
    );
    assert_eq!(n1.r.status().view_changing, vec![true]);

    let (mut n1, _) = Node::recover(&s, 1, n1.records, 5000);
    assert_eq!(n1.r.status().view_changing, vec![true]);
    let e = n1.msg(5001, 2, status(0, 0));
    let relayed: Vec<u32> = sends(&e)
        .into_iter()
        .filter_map(|(to, m)| match m {
            ReplicaMsg::Timeout(t) if to == ReplicaId(2) && t.view == View(0) => Some(t.replica.0),
            _ => None,
        })
        .collect();
    assert_eq!(
        relayed,
        vec![0, 1, 2, 3],
        "the certificate, replica 2's own statement included"
    );
}

/// Replica 1 left view 0 on a certificate; records as written: the
/// certificate, then the view record.
fn left_view_0_on_a_certificate(s: &Setup) -> Vec<PersistRecord> {
    let mut n1 = Node::new(s, 1);
    for signer in [0, 2, 3] {
        let t = super::util::timeout_for(&s.cfg, signer, 0, 0);
        n1.msg(10 + u64::from(signer), signer, ReplicaMsg::Timeout(t));
    }
    n1.records
}

/// A crash between the certificate and the view record it led to (a torn
/// write): the recovered replica holds a certificate for the view it is
/// in, and leaves it at once, as it was about to.
#[test]
fn a_replica_torn_between_certificate_and_view_record_leaves_at_recovery() {
    let s = setup(4, 2, params(OrderingMode::Pbft, 1));
    let mut records = left_view_0_on_a_certificate(&s);
    let at = records
        .iter()
        .position(|r| matches!(r, PersistRecord::View { .. }))
        .expect("the view record");
    assert!(
        matches!(records[at - 1], PersistRecord::TimeoutCert { .. }),
        "certificate first"
    );
    records.truncate(at);
    let (n1, e) = Node::recover(&s, 1, records, 5000);
    assert_eq!(n1.r.status().view_changing, vec![true]);
    assert_eq!(n1.r.status().views, vec![View(1)]);
    assert!(
        kinds(&e).contains(&"broadcast view-change".to_string()),
        "{:?}",
        kinds(&e)
    );
}

/// Stored statements are checked again at recovery: one that no longer
/// verifies (a key changed under a kept data directory) is dropped, not
/// relayed.
#[test]
fn a_stored_statement_that_does_not_verify_is_not_restored() {
    let s = setup(4, 2, params(OrderingMode::Pbft, 1));
    let mut records = left_view_0_on_a_certificate(&s);
    for r in &mut records {
        if let PersistRecord::TimeoutCert { statements, .. } = r {
            for t in statements.iter_mut().filter(|t| t.replica == ReplicaId(3)) {
                t.sig = chorus_core::Signature([7; 64]);
            }
        }
    }
    let (mut n1, _) = Node::recover(&s, 1, records, 5000);
    let e = n1.msg(5001, 2, status(0, 0));
    let relayed: Vec<u32> = sends(&e)
        .into_iter()
        .filter_map(|(_, m)| match m {
            ReplicaMsg::Timeout(t) => Some(t.replica.0),
            _ => None,
        })
        .collect();
    assert!(!relayed.contains(&3), "{relayed:?}");
}
