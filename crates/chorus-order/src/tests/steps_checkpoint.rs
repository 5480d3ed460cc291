//! PBFT §4.3 checkpoints and state transfer, asserting the exact actions.

use super::util::{handle, kinds, msg, params, persists, replica, sends, setup, Setup};
use crate::io::{Action, Event, PersistRecord, TimerId};
use crate::replica::Replica;
use bytes::Bytes;
use chorus_core::{
    Batch, CheckpointCert, Digest, LaneId, OrderingMode, ReplicaId, ReplicaMsg, Seq, Slot, StateChunk,
    StateRequest, Status, View,
};

const L0: LaneId = LaneId(0);

fn setup_k2() -> Setup {
    let mut p = params(OrderingMode::Pbft, 1);
    p.checkpoint_interval = 2;
    p.state_chunk_bytes = 64;
    setup(4, 2, p)
}

/// Drive `slot` to a decision at backup `me` with messages from the others.
fn decide(s: &Setup, r: &mut Replica, me: u32, slot: u64, batch: &Batch) -> Vec<Action> {
    let leader = (slot % 4) as u32;
    assert_ne!(leader, me);
    let d = batch.digest();
    let mut all = msg(
        r,
        slot + 1,
        leader,
        ReplicaMsg::PrePrepare(s.pre_prepare(leader, 0, 0, slot, batch)),
    );
    let others: Vec<u32> = (0..4).filter(|x| *x != me).collect();
    for p in others.iter().filter(|x| **x != leader).take(1) {
        all.extend(msg(
            r,
            slot + 1,
            *p,
            ReplicaMsg::Prepare(s.prepare(*p, 0, 0, slot, d)),
        ));
    }
    for c in others.iter().take(2) {
        all.extend(msg(
            r,
            slot + 1,
            *c,
            ReplicaMsg::Commit(s.commit(*c, 0, 0, slot, d)),
        ));
    }
    all
}

fn snapshot() -> Bytes {
    Bytes::from((0..150u8).collect::<Vec<u8>>())
}

/// Replica 3 decides slots 0 and 1, checkpoints at 2 and collects votes.
fn stable_replica(s: &Setup) -> (Replica, CheckpointCert) {
    let mut r = replica(s, 3);
    let e0 = decide(s, &mut r, 3, 0, &s.batch(0, 1..2));
    assert!(kinds(&e0).ends_with(&["persist decided".to_string(), "deliver 0".to_string()]));
    let e1 = decide(s, &mut r, 3, 1, &s.batch(1, 1..2));
    // TakeCheckpoint right after the delivery that completes K positions.
    assert!(kinds(&e1).ends_with(&["deliver 1".to_string(), "take checkpoint 2".to_string()]));
    let snap = snapshot();
    let d = Digest::of(&snap);
    let e = handle(
        &mut r,
        10,
        Event::Checkpointed {
            seq: Seq(2),
            state_digest: d,
            snapshot: snap.clone(),
        },
    );
    assert_eq!(
        e,
        vec![Action::Broadcast {
            msg: ReplicaMsg::Checkpoint(s.vote(3, 2, d))
        }]
    );
    assert!(msg(&mut r, 11, 0, ReplicaMsg::Checkpoint(s.vote(0, 2, d))).is_empty());
    // A bad signature does not count.
    let mut forged = s.vote(2, 2, d);
    forged.sig = s.vote(1, 2, d).sig;
    msg(&mut r, 11, 2, ReplicaMsg::Checkpoint(forged));
    assert_eq!(r.counters().rejected("bad-vote-signature"), 1);
    assert_eq!(r.status().stable_seq, Seq(0));
    // 2f+1 matching votes: stable. Persist certificate and snapshot. The
    // signature says who voted, not the link: replica 1's vote relayed by
    // replica 2 counts (`Checkpointer::on_vote`).
    let e = msg(&mut r, 12, 2, ReplicaMsg::Checkpoint(s.vote(1, 2, d)));
    let cert = s.checkpoint_cert(2, d, &[0, 1, 3]);
    assert_eq!(
        persists(&e),
        vec![PersistRecord::Stable {
            cert: cert.clone(),
            snapshot: snap
        }]
    );
    (r, cert)
}

#[test]
fn checkpoint_is_taken_at_k_and_stable_after_a_quorum_of_votes_then_logs_are_truncated() {
    let s = setup_k2();
    let (r, _) = stable_replica(&s);
    let st = r.status();
    assert_eq!(st.stable_seq, Seq(2));
    assert_eq!(st.counters.checkpoints_stable, 1);
    let lane = r.lane(L0).expect("lane 0");
    assert_eq!(lane.low(), Slot(2));
    assert_eq!(lane.high(), Slot(2 + 16));
    assert!(
        lane.slots.keys().all(|s| *s >= Slot(2)),
        "slots below the checkpoint are dropped"
    );
}

#[test]
fn lagging_replica_fetches_state_in_chunks_and_resumes_at_the_checkpoint() {
    let s = setup_k2();
    let (mut serving, cert) = stable_replica(&s);
    let snap = snapshot();

    // The stable replica serves its snapshot in 64-byte chunks with the cert.
    let e = msg(
        &mut serving,
        20,
        0,
        ReplicaMsg::StateRequest(StateRequest { min_seq: Seq(1) }),
    );
    let chunks: Vec<StateChunk> = sends(&e)
        .into_iter()
        .map(|(to, m)| {
            assert_eq!(to, ReplicaId(0));
            match m {
                ReplicaMsg::StateChunk(c) => c,
                other => panic!("unexpected {other:?}"),
            }
        })
        .collect();
    assert_eq!(chunks.len(), 3);
    assert!(chunks.iter().all(|c| c.cert == cert && c.count == 3));
    assert_eq!(chunks.iter().map(|c| c.data.len()).sum::<usize>(), 150);
    // One transfer per peer per status interval.
    assert!(msg(
        &mut serving,
        21,
        0,
        ReplicaMsg::StateRequest(StateRequest { min_seq: Seq(1) })
    )
    .is_empty());
    assert_eq!(serving.counters().rejected("state-request-rate"), 1);

    // A fresh replica 0 hears that everyone else is stable at 2.
    let mut r = replica(&s, 0);
    for peer in 1..4 {
        let status = Status {
            lane: L0,
            view: View(0),
            next_undecided: Slot(2),
            stable_seq: Seq(2),
            suspects: false,
            awaits_new_view: false,
        };
        msg(&mut r, 1, peer, ReplicaMsg::Status(status));
    }
    // First tick: note where we are. Second tick without progress: ask.
    let e = handle(&mut r, 50, Event::Timer(TimerId::Status));
    assert!(sends(&e).is_empty());
    let e = handle(&mut r, 100, Event::Timer(TimerId::Status));
    assert_eq!(
        sends(&e),
        vec![(
            ReplicaId(1),
            ReplicaMsg::StateRequest(StateRequest { min_seq: Seq(1) })
        )]
    );
    // Chunks from a peer we did not ask are refused.
    msg(&mut r, 101, 2, ReplicaMsg::StateChunk(chunks[0].clone()));
    assert_eq!(r.counters().rejected("unsolicited-state"), 1);
    // A certificate with too few votes is refused.
    let mut weak = chunks[0].clone();
    weak.cert.votes.truncate(2);
    msg(&mut r, 101, 1, ReplicaMsg::StateChunk(weak));
    assert_eq!(r.counters().rejected("cert-vote-count"), 1);
    assert!(msg(&mut r, 102, 1, ReplicaMsg::StateChunk(chunks[2].clone())).is_empty());
    assert!(msg(&mut r, 102, 1, ReplicaMsg::StateChunk(chunks[0].clone())).is_empty());
    let e = msg(&mut r, 103, 1, ReplicaMsg::StateChunk(chunks[1].clone()));
    assert_eq!(
        e,
        vec![Action::InstallState {
            cert: cert.clone(),
            snapshot: snap.clone()
        }]
    );
    // Delivery resumes at the checkpoint once the driver confirms the digest.
    let e = handle(
        &mut r,
        104,
        Event::StateInstalled {
            seq: Seq(2),
            state_digest: Digest::of(&snap),
        },
    );
    // Then it tells its peers where it is now, so they answer with what
    // it lacks at once (`replica/status_bundle.rs`).
    let announce = ReplicaMsg::Statuses(chorus_core::StatusBundle {
        stable_seq: Seq(2),
        lanes: vec![chorus_core::LaneProgress {
            lane: L0,
            view: chorus_core::View(0),
            next_undecided: Slot(2),
            suspects: false,
            awaits_new_view: false,
        }],
    });
    assert_eq!(
        e,
        vec![
            Action::Persist(PersistRecord::Stable { cert, snapshot: snap }),
            Action::Broadcast { msg: announce }
        ]
    );
    let st = r.status();
    assert_eq!((st.next_delivery, st.stable_seq), (Seq(2), Seq(2)));
    assert_eq!(st.counters.state_transfers, 1);
    assert_eq!(r.lane(L0).map(|l| l.low()), Some(Slot(2)));
}

#[test]
fn a_snapshot_that_does_not_match_its_certificate_is_discarded_and_fetched_again() {
    let s = setup_k2();
    let (_, cert) = stable_replica(&s);
    let mut r = replica(&s, 0);
    for peer in 1..4 {
        let status = Status {
            lane: L0,
            view: View(0),
            next_undecided: Slot(2),
            stable_seq: Seq(2),
            suspects: false,
            awaits_new_view: false,
        };
        msg(&mut r, 1, peer, ReplicaMsg::Status(status));
    }
    handle(&mut r, 50, Event::Timer(TimerId::Status));
    handle(&mut r, 100, Event::Timer(TimerId::Status));
    let garbage = StateChunk {
        cert: cert.clone(),
        index: 0,
        count: 1,
        data: Bytes::from_static(b"not the state"),
    };
    let e = msg(&mut r, 101, 1, ReplicaMsg::StateChunk(garbage));
    assert_eq!(kinds(&e), vec!["install state 2"]);
    let e = handle(
        &mut r,
        102,
        Event::StateInstalled {
            seq: Seq(2),
            state_digest: Digest::of(b"not the state"),
        },
    );
    assert!(e.is_empty());
    assert_eq!(r.counters().rejected("bad-installed-state"), 1);
    assert_eq!(r.status().stable_seq, Seq(0));
    // The next tick asks another peer, for any state above our delivery
    // point: the failed certificate may be stable at no correct replica, so
    // asking for it or more could leave only liars able to answer.
    let e = handle(&mut r, 150, Event::Timer(TimerId::Status));
    let asked = sends(&e);
    assert_eq!(asked.len(), 1, "one state request: {asked:?}");
    assert_ne!(asked[0].0, ReplicaId(1), "not the peer that sent garbage");
    assert_eq!(
        asked[0].1,
        ReplicaMsg::StateRequest(StateRequest { min_seq: Seq(1) })
    );
}

#[test]
fn a_certificate_learnt_from_a_new_view_makes_our_own_checkpoint_stable() {
    let s = setup_k2();
    let mut r = replica(&s, 3);
    decide(&s, &mut r, 3, 0, &s.batch(0, 1..2));
    decide(&s, &mut r, 3, 1, &s.batch(1, 1..2));
    let snap = snapshot();
    let d = Digest::of(&snap);
    handle(
        &mut r,
        10,
        Event::Checkpointed {
            seq: Seq(2),
            state_digest: d,
            snapshot: snap.clone(),
        },
    );
    // The votes of the others never reach us (one voter got there by state
    // transfer and never voted): not stable from votes alone.
    assert_eq!(r.status().stable_seq, Seq(0));
    let cert = s.checkpoint_cert(2, d, &[0, 1, 2]);
    let nv = s.new_view_from_checkpoint(1, 1, &[0, 1, 2], &cert);
    msg(&mut r, 20, 1, ReplicaMsg::NewView(nv));
    assert_eq!(r.status().views, vec![View(1)]);
    // PBFT §4.3: the certificate in the NEW-VIEW proves the state we hold.
    let e = handle(&mut r, 60, Event::Timer(TimerId::Status));
    assert!(persists(&e).contains(&PersistRecord::Stable { cert, snapshot: snap }));
    assert_eq!(r.status().stable_seq, Seq(2));
    assert_eq!(r.lane(L0).map(|l| l.low()), Some(Slot(2)));
}

/// Issue 17: a replica whose executor diverged (its checkpoint digest differs
/// from the one 2f+1 others certify) says so, once per position: the status
/// count feeds a replica metric (state transfer then fetches the certified
/// state, as before).
#[test]
fn a_stable_certificate_against_our_own_digest_is_a_reported_divergence() {
    let s = setup_k2();
    let mut r = replica(&s, 3);
    decide(&s, &mut r, 3, 0, &s.batch(0, 1..2));
    decide(&s, &mut r, 3, 1, &s.batch(1, 1..2));
    let ours = Digest::of(b"our diverged state");
    let theirs = Digest::of(&snapshot());
    handle(
        &mut r,
        10,
        Event::Checkpointed {
            seq: Seq(2),
            state_digest: ours,
            snapshot: Bytes::from_static(b"our diverged state"),
        },
    );
    assert_eq!(r.status().state_divergences, 0);
    msg(&mut r, 11, 0, ReplicaMsg::Checkpoint(s.vote(0, 2, theirs)));
    msg(&mut r, 11, 1, ReplicaMsg::Checkpoint(s.vote(1, 2, theirs)));
    assert_eq!(r.status().state_divergences, 0, "no quorum yet");
    msg(&mut r, 12, 2, ReplicaMsg::Checkpoint(s.vote(2, 2, theirs)));
    assert_eq!(r.status().state_divergences, 1);
    assert_eq!(r.status().stable_seq, Seq(0), "not our state: nothing stable");
    assert_eq!(r.counters().rejected("state-divergence"), 1);
    // More votes for the same certificate report nothing new.
    msg(&mut r, 13, 2, ReplicaMsg::Checkpoint(s.vote(2, 2, theirs)));
    assert_eq!(r.status().state_divergences, 1);
}

/// Issue 17: when the replicas' digests are so split that no certificate can
/// ever form, the checkpoint never becomes stable and state transfer has
/// nothing to fetch; the divergence is still reported, once.
#[test]
fn digests_split_beyond_any_quorum_are_a_reported_divergence() {
    let s = setup_k2();
    let mut r = replica(&s, 3);
    decide(&s, &mut r, 3, 0, &s.batch(0, 1..2));
    decide(&s, &mut r, 3, 1, &s.batch(1, 1..2));
    let ours = Digest::of(b"ours");
    handle(
        &mut r,
        10,
        Event::Checkpointed {
            seq: Seq(2),
            state_digest: ours,
            snapshot: Bytes::from_static(b"ours"),
        },
    );
    msg(
        &mut r,
        11,
        0,
        ReplicaMsg::Checkpoint(s.vote(0, 2, Digest::of(b"zero"))),
    );
    assert_eq!(
        r.status().state_divergences,
        0,
        "two votes out: a quorum may still form"
    );
    msg(
        &mut r,
        11,
        1,
        ReplicaMsg::Checkpoint(s.vote(1, 2, Digest::of(b"one"))),
    );
    assert_eq!(r.status().state_divergences, 1, "at most 2 of 4 can agree now");
    msg(
        &mut r,
        11,
        2,
        ReplicaMsg::Checkpoint(s.vote(2, 2, Digest::of(b"two"))),
    );
    assert_eq!(r.status().state_divergences, 1);
    assert_eq!(r.status().stable_seq, Seq(0));
}

/// Dispel seed 1619 (`chorus sim --mode dispel --n 7 --faults all --seed
/// 1619`): r0 sent conflicting checkpoint votes, so only one correct replica
/// (r3) ever held a certificate; the others held r0's other vote and stayed
/// one short, and the replica that fell behind never saw f+1 stable claims
/// and waited for ever. A replica now answers a peer below its stable
/// checkpoint with the certificate's votes, and a relayed vote counts even
/// where its signer's other vote arrived first.
#[test]
fn a_certificate_relayed_by_its_holder_completes_a_checkpoint_an_equivocator_split() {
    let s = setup_k2();
    let (mut holder, cert) = stable_replica(&s);
    // The holder answers a peer that reports stable 0 with the 2f+1 votes.
    let status = lane0_status_at_genesis();
    let e = msg(&mut holder, 20, 2, status);
    let relayed: Vec<_> = e
        .iter()
        .filter_map(|a| match a {
            Action::Send {
                to,
                msg: ReplicaMsg::Checkpoint(v),
            } if to.0 == 2 => Some(v.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        relayed, cert.votes,
        "the whole certificate goes to the lagging peer"
    );

    // Replica 2 holds its own vote and replica 1's for d, and a different
    // vote from replica 0 (the equivocator): one short of 2f+1 for d.
    let mut r2 = replica(&s, 2);
    for slot in 0..2 {
        decide(&s, &mut r2, 2, slot, &s.batch(slot as usize, 1..2));
    }
    let snap = snapshot();
    let d = Digest::of(&snap);
    handle(
        &mut r2,
        10,
        Event::Checkpointed {
            seq: Seq(2),
            state_digest: d,
            snapshot: snap,
        },
    );
    msg(
        &mut r2,
        11,
        0,
        ReplicaMsg::Checkpoint(s.vote(0, 2, Digest::of(b"other"))),
    );
    assert_eq!(r2.status().stable_seq, Seq(0));
    // The relayed certificate brings replica 0's vote for d: stable.
    for v in relayed {
        msg(&mut r2, 21, 3, ReplicaMsg::Checkpoint(v));
    }
    assert_eq!(r2.status().stable_seq, Seq(2));
    assert_eq!(r2.counters().rejected("checkpoint-equivocation"), 1);
}

/// A peer below our stable checkpoint gets our votes once per status round,
/// not with every status it sends: a Byzantine peer sending lane-0 statuses
/// in a loop (or bundles starting with lane 0) must not make us re-send the
/// certificate each time (noted by the review of the status bundles).
#[test]
fn a_peer_below_our_checkpoint_gets_our_votes_once_per_status_round() {
    let s = setup_k2();
    let (mut holder, _cert) = stable_replica(&s);
    let status = lane0_status_at_genesis();
    let votes_to_2 = |e: &[Action]| {
        e.iter()
            .filter(|a| matches!(a, Action::Send { to, msg: ReplicaMsg::Checkpoint(_) } if to.0 == 2))
            .count()
    };
    let first = votes_to_2(&msg(&mut holder, 20, 2, status.clone()));
    assert!(first > 0);
    for now in 21..25 {
        assert_eq!(votes_to_2(&msg(&mut holder, now, 2, status.clone())), 0);
    }
    let interval = s.cfg.params.status_interval_ms;
    assert_eq!(votes_to_2(&msg(&mut holder, 20 + interval, 2, status)), first);
}

/// A peer's lane-0 status: slots to 2 decided, nothing stable yet.
fn lane0_status_at_genesis() -> ReplicaMsg {
    ReplicaMsg::Status(chorus_core::Status {
        lane: L0,
        view: chorus_core::View(0),
        next_undecided: Slot(2),
        stable_seq: Seq(0),
        suspects: false,
        awaits_new_view: false,
    })
}
