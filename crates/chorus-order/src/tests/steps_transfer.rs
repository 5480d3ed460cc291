//! State transfer against liars (issue 8, findings 1, 5 and 12; simulator
//! seed 1400022 of `adversary_seeds`): Byzantine replicas can hold a valid
//! checkpoint certificate that is stable at no correct replica (they collect
//! the correct replicas' votes and withhold their own) and serve it with
//! garbage bytes. A replica that needs state must still get it from a correct
//! peer: a failed install must neither raise what it asks for above what the
//! correct peers hold nor leave the liars as the only peers it asks.

use super::util::{params, sends, setup, Setup};
use crate::io::{Action, Event, Outbox, TimerId};
use crate::replica::Replica;
use bytes::Bytes;
use chorus_core::{
    Digest, LaneId, LeaderRotation, Millis, OrderingMode, ReplicaId, ReplicaMsg, Seq, Slot, StateChunk,
    Status, View,
};

const LIARS: [u32; 2] = [0, 3];
const CORRECT_PEERS: [u32; 4] = [1, 2, 5, 6];
const ME: u32 = 4;

/// n = 7 (f = 2), one PBFT lane, a checkpoint every 2 positions.
fn setup_n7() -> Setup {
    let mut p = params(OrderingMode::Pbft, 1);
    p.leader_rotation = LeaderRotation::Fixed;
    p.checkpoint_interval = 2;
    p.state_chunk_bytes = 64;
    setup(7, 2, p)
}

fn handle(r: &mut Replica, now: u64, ev: Event) -> Vec<Action> {
    let mut out = Outbox::new();
    r.handle(Millis(now), ev, &mut out);
    super::util::effects(&mut out)
}

fn status(r: &mut Replica, now: u64, from: u32, stable: u64) {
    let st = Status {
        lane: LaneId(0),
        view: View(0),
        next_undecided: Slot(stable),
        stable_seq: Seq(stable),
        suspects: false,
        awaits_new_view: false,
    };
    handle(
        r,
        now,
        Event::Message {
            from: ReplicaId(from),
            msg: ReplicaMsg::Status(st),
        },
    );
}

/// Replica 4 is at genesis. The liars 0 and 3 claim checkpoint 4 and hold a
/// valid certificate for it (the correct replicas' votes plus their own), but
/// serve garbage; the correct peers 1, 2, 5, 6 hold checkpoint 2 as stable and
/// have dropped the log below it, so state transfer is 4's only way forward.
/// Whichever peer 4 asks answers as it would; the driver reports the digest
/// of what it got. Replica 4 must end with the correct peers' checkpoint 2.
#[test]
fn a_replica_fed_garbage_by_liars_gets_the_state_from_a_correct_peer() {
    let s = setup_n7();
    let mut out = Outbox::new();
    let mut r4 = Replica::new(
        s.cfg.clone(),
        ReplicaId(ME),
        s.keys[ME as usize].clone(),
        Millis(0),
        &mut out,
    );
    let good = Bytes::from_static(b"the state at 2");
    let good_cert = s.checkpoint_cert(2, Digest::of(&good), &[1, 2, 5, 6, 0]);
    // The state at 4, certified by the correct replicas' votes and the liars'.
    let real_4 = Digest::of(b"the state at 4");
    let lie_cert = s.checkpoint_cert(4, real_4, &[0, 1, 2, 3, 5]);
    let garbage = Bytes::from_static(b"garbage, not the state at 4");
    let mut asked = Vec::new();
    let interval = s.cfg.params.status_interval_ms;
    for tick in 1..=40u64 {
        let now = tick * interval;
        for l in LIARS {
            status(&mut r4, now - 1, l, 4);
        }
        for p in CORRECT_PEERS {
            status(&mut r4, now - 1, p, 2);
        }
        let e = handle(&mut r4, now, Event::Timer(TimerId::Status));
        let Some((peer, req)) = sends(&e).into_iter().find_map(|(p, m)| match m {
            ReplicaMsg::StateRequest(req) => Some((p, req)),
            _ => None,
        }) else {
            continue;
        };
        asked.push(peer.0);
        let liar = LIARS.contains(&peer.0);
        let (cert, data) = if liar {
            (lie_cert.clone(), garbage.clone())
        } else {
            assert!(
                req.min_seq <= Seq(2),
                "asked correct peer {peer:?} for more than it holds: {req:?}"
            );
            (good_cert.clone(), good.clone())
        };
        let chunk = StateChunk {
            cert: cert.clone(),
            index: 0,
            count: 1,
            data: data.clone(),
        };
        let e = handle(
            &mut r4,
            now + 1,
            Event::Message {
                from: peer,
                msg: ReplicaMsg::StateChunk(chunk),
            },
        );
        if !e.iter().any(|a| matches!(a, Action::InstallState { .. })) {
            continue;
        }
        // The driver computes the digest of the bytes it got.
        handle(
            &mut r4,
            now + 2,
            Event::StateInstalled {
                seq: cert.seq,
                state_digest: Digest::of(&data),
            },
        );
        if r4.status().stable_seq == Seq(2) {
            break;
        }
    }
    let st = r4.status();
    assert_eq!(
        (st.stable_seq, st.next_delivery),
        (Seq(2), Seq(2)),
        "replica 4 must install a correct peer's checkpoint (asked, in order: {asked:?})"
    );
    let lies = asked.iter().filter(|p| LIARS.contains(p)).count();
    assert!(
        lies <= LIARS.len(),
        "each liar is asked at most once before every correct peer has been tried: {asked:?}"
    );
}

/// Simulator seeds 27 and 52 (`--mode pbft --n 7 --requests 8`): replica 2
/// jumped to checkpoint 16 by state transfer, from a certificate the
/// Byzantine replicas assembled while withholding their own votes from the
/// correct ones. The four other correct replicas executed up to 16 and need
/// a fifth correct vote to make it stable; replica 2 holds the verified state
/// at 16, so it must vote for it, or their windows stay full for ever.
#[test]
fn a_replica_that_installed_a_checkpoint_votes_for_it() {
    let s = setup_n7();
    let mut out = Outbox::new();
    let mut r4 = Replica::new(
        s.cfg.clone(),
        ReplicaId(ME),
        s.keys[ME as usize].clone(),
        Millis(0),
        &mut out,
    );
    let state = Bytes::from_static(b"the state at 2");
    let digest = Digest::of(&state);
    let cert = s.checkpoint_cert(2, digest, &[0, 1, 2, 3, 5]);
    let interval = s.cfg.params.status_interval_ms;
    let mut installed = false;
    for tick in 1..=4u64 {
        let now = tick * interval;
        for p in [0u32, 1, 3] {
            status(&mut r4, now - 1, p, 2);
        }
        let e = handle(&mut r4, now, Event::Timer(TimerId::Status));
        let Some((peer, _)) = sends(&e)
            .into_iter()
            .find(|(_, m)| matches!(m, ReplicaMsg::StateRequest(_)))
        else {
            continue;
        };
        let chunk = StateChunk {
            cert: cert.clone(),
            index: 0,
            count: 1,
            data: state.clone(),
        };
        handle(
            &mut r4,
            now + 1,
            Event::Message {
                from: peer,
                msg: ReplicaMsg::StateChunk(chunk),
            },
        );
        handle(
            &mut r4,
            now + 2,
            Event::StateInstalled {
                seq: Seq(2),
                state_digest: digest,
            },
        );
        installed = true;
        break;
    }
    assert!(installed, "replica 4 fetched the state");
    assert_eq!(r4.status().stable_seq, Seq(2));
    // Peer 6 executed up to 2 and still waits for the checkpoint's quorum.
    let before = 10 * interval;
    let e = {
        let st = Status {
            lane: LaneId(0),
            view: View(0),
            next_undecided: Slot(2),
            stable_seq: Seq(0),
            suspects: false,
            awaits_new_view: false,
        };
        handle(
            &mut r4,
            before,
            Event::Message {
                from: ReplicaId(6),
                msg: ReplicaMsg::Status(st),
            },
        )
    };
    let votes: Vec<_> = sends(&e)
        .into_iter()
        .filter_map(|(to, m)| match m {
            ReplicaMsg::Checkpoint(v) => Some((to, v)),
            _ => None,
        })
        .collect();
    // The certificate's votes, relayed, and its own vote for the state it
    // installed (the certificate lacks it).
    assert_eq!(
        votes.len(),
        s.cfg.quorum() + 1,
        "replica 4 relays the certificate and votes for the checkpoint it installed: {votes:?}"
    );
    let (to, v) = votes.last().expect("its own vote");
    assert_eq!(
        (*to, v.seq, v.state_digest, v.replica),
        (ReplicaId(6), Seq(2), digest, ReplicaId(ME))
    );
    crate::certs::verify_vote_sig(&s.cfg, &chorus_core::ClusterTag::of(&s.cfg), v)
        .expect("a valid signature");
}
