//! `dispel` replica steps: what a replica sends for exact DBFT inputs, and
//! that a restart from its records never contradicts what it sent.

use super::util::{broadcasts, handle, params, persists, replica, setup, Setup};
use crate::io::{Action, Event, Outbox, PersistRecord};
use crate::replica::Replica;
use chorus_core::{DbftWire, Digest, Millis, OrderingMode, ReplicaId, ReplicaMsg};
use chorus_dbft::{DbftBundle, DbftMsg};

fn dispel() -> Setup {
    setup(4, 4, params(OrderingMode::Dispel, 1))
}

fn wire(m: &DbftMsg) -> ReplicaMsg {
    ReplicaMsg::Dbft(DbftWire {
        bytes: bytes::Bytes::from(DbftBundle::encode(std::slice::from_ref(m))),
    })
}

/// The DBFT messages of a frame (a bundle).
fn unbundle(m: &ReplicaMsg) -> Vec<DbftMsg> {
    match m {
        ReplicaMsg::Dbft(w) => {
            chorus_core::decode::<DbftBundle>(&w.bytes, &chorus_dbft::DbftConfig::new(4).limits())
                .map(|b| b.0)
                .unwrap_or_default()
        }
        _ => Vec::new(),
    }
}

/// An INIT of `batch` for `epoch`.
fn init(epoch: u64, batch: &chorus_core::Batch) -> DbftMsg {
    DbftMsg::RbInit {
        epoch,
        batch: batch.clone(),
    }
}

/// Replica 1 takes client 1's first request and proposes it at its next
/// status tick (its INIT for epoch 0): that step's actions.
fn propose_first_request(s: &Setup, r: &mut Replica) -> Vec<Action> {
    let mut out = Outbox::new();
    r.handle(Millis(1), Event::Request(s.request(1, 1, b"x")), &mut out);
    r.handle(Millis(20), Event::Timer(crate::io::TimerId::Status), &mut out);
    out.drain().collect()
}

fn dbft_broadcasts(actions: &[Action]) -> Vec<DbftMsg> {
    broadcasts(actions).iter().flat_map(unbundle).collect()
}

fn deliver(
    r: &mut Replica,
    records: &mut Vec<PersistRecord>,
    now: u64,
    from: u32,
    m: &DbftMsg,
) -> Vec<Action> {
    let mut out = Outbox::new();
    r.handle(
        Millis(now),
        Event::Message {
            from: ReplicaId(from),
            msg: wire(m),
        },
        &mut out,
    );
    let acts: Vec<Action> = out.drain().collect();
    records.extend(persists(&acts));
    acts
}

fn echoes(msgs: &[DbftMsg]) -> Vec<chorus_core::Digest> {
    msgs.iter()
        .filter_map(|m| match m {
            DbftMsg::RbEcho { digest, .. } => Some(*digest),
            _ => None,
        })
        .collect()
}

/// A correct replica echoes an INIT whose requests verify, and logs the
/// input before the echo leaves (persist before send).
#[test]
fn init_is_logged_then_echoed() {
    let s = dispel();
    let mut r = replica(&s, 1);
    let mut recs = Vec::new();
    let a = s.batch(2, 1..3);
    let acts = deliver(&mut r, &mut recs, 1, 2, &init(0, &a));
    assert_eq!(echoes(&dbft_broadcasts(&acts)), vec![a.digest()]);
    let first_persist = acts.iter().position(|a| matches!(a, Action::Persist(_)));
    let first_send = acts
        .iter()
        .position(|a| matches!(a, Action::Broadcast { .. } | Action::Send { .. }));
    assert!(
        first_persist < first_send,
        "the input is logged before anything is sent"
    );
}

/// An INIT carrying a request whose authenticator does not verify here is
/// not echoed: a delivered batch always had a correct replica vouch for it.
#[test]
fn init_with_a_forged_request_is_not_echoed() {
    let s = dispel();
    let mut r = replica(&s, 1);
    let mut recs = Vec::new();
    let mut a = s.batch(2, 1..3);
    a.requests[0].op = bytes::Bytes::from_static(b"tampered");
    let acts = deliver(&mut r, &mut recs, 1, 2, &DbftMsg::RbInit { epoch: 0, batch: a });
    assert!(echoes(&dbft_broadcasts(&acts)).is_empty());
    assert_eq!(r.counters().rejected("dbft-init-bad-request"), 1);
}

/// Pitfall "equivocation after restart": a Byzantine proposer sends INIT A,
/// we echo A, crash, restart from our records; its INIT B must not be
/// echoed (the replayed engine remembers the first INIT), while A's bytes
/// are still served.
#[test]
fn restarted_replica_never_echoes_a_second_init() {
    let s = dispel();
    let mut r = replica(&s, 1);
    let mut recs = Vec::new();
    let a = s.batch(2, 1..3);
    let b = s.batch(2, 3..5);
    let acts = deliver(&mut r, &mut recs, 1, 2, &init(0, &a));
    assert_eq!(echoes(&dbft_broadcasts(&acts)), vec![a.digest()]);
    drop(r);
    let mut out = Outbox::new();
    let mut r = Replica::recover(
        s.cfg.clone(),
        ReplicaId(1),
        s.keys[1].clone(),
        recs.clone(),
        Millis(5),
        &mut out,
    );
    let acts = deliver(&mut r, &mut recs, 6, 2, &DbftMsg::RbInit { epoch: 0, batch: b });
    assert!(
        echoes(&dbft_broadcasts(&acts)).is_empty(),
        "echoed a second INIT of the same proposer after a restart"
    );
    // Echoes of A from two others: with ours (restored) that is the echo quorum.
    let mut readies = Vec::new();
    for from in [0, 3] {
        let acts = deliver(
            &mut r,
            &mut recs,
            7,
            from,
            &DbftMsg::RbEcho {
                epoch: 0,
                proposer: ReplicaId(2),
                digest: a.digest(),
            },
        );
        readies.extend(
            dbft_broadcasts(&acts)
                .into_iter()
                .filter(|m| matches!(m, DbftMsg::RbReady { .. })),
        );
    }
    assert_eq!(
        readies,
        vec![DbftMsg::RbReady {
            epoch: 0,
            proposer: ReplicaId(2),
            digest: a.digest()
        }],
        "our echo of A still counts after the restart"
    );
}

/// A restart also keeps our own proposal: the epoch we proposed in is not
/// proposed again with other content.
#[test]
fn restarted_replica_does_not_propose_twice_in_an_epoch() {
    let s = dispel();
    let mut r = replica(&s, 1);
    let mut recs = Vec::new();
    let acts = propose_first_request(&s, &mut r);
    recs.extend(persists(&acts));
    let inits: Vec<DbftMsg> = dbft_broadcasts(&acts)
        .into_iter()
        .filter(|m| matches!(m, DbftMsg::RbInit { .. }))
        .collect();
    assert_eq!(inits.len(), 1, "proposed its request in epoch 0");
    let mut out = Outbox::new();
    let mut r = Replica::recover(
        s.cfg.clone(),
        ReplicaId(1),
        s.keys[1].clone(),
        recs,
        Millis(30),
        &mut out,
    );
    // Another request: the next proposal must be for epoch 1, not epoch 0 again.
    r.handle(Millis(31), Event::Request(s.request(1, 2, b"y")), &mut out);
    r.handle(Millis(40), Event::Timer(crate::io::TimerId::Status), &mut out);
    let acts: Vec<Action> = out.drain().collect();
    for m in dbft_broadcasts(&acts) {
        if let DbftMsg::RbInit { epoch, .. } = m {
            assert_ne!(epoch, 0, "proposed epoch 0 a second time after the restart");
        }
    }
}

fn status_from(r: &mut Replica, now: u64, from: u32, next_epoch: u64) {
    let st = chorus_core::Status {
        lane: chorus_core::LaneId(0),
        view: chorus_core::View(0),
        next_undecided: chorus_core::Slot(next_epoch),
        stable_seq: chorus_core::Seq(0),
        suspects: false,
        awaits_new_view: false,
    };
    super::util::msg(r, now, from, ReplicaMsg::Status(st));
}

fn status_tick(r: &mut Replica, now: u64) -> Vec<(ReplicaId, DbftMsg)> {
    let acts = super::util::handle(r, now, Event::Timer(crate::io::TimerId::Status));
    super::util::sends(&acts)
        .into_iter()
        .flat_map(|(to, m)| unbundle(&m).into_iter().map(move |m| (to, m)))
        .collect()
}

/// Spec P14 (retransmission paired with the windows): a peer that already
/// delivered epoch 0 may still run rounds d+1, d+2 of one of its instances
/// and need our messages there, but its status no longer shows it stuck. A
/// replica stalled at epoch 0 must re-send its epoch-0 messages to such a
/// peer (seeds 327 and 441 hung on this), and not while it is progressing.
#[test]
fn stalled_replica_resends_its_epoch_to_a_peer_past_it() {
    let s = dispel();
    let mut r = replica(&s, 1);
    let mut recs = Vec::new();
    let a = s.batch(2, 1..3);
    let acts = deliver(&mut r, &mut recs, 1, 2, &init(0, &a));
    assert_eq!(echoes(&dbft_broadcasts(&acts)), vec![a.digest()]);
    // r3 has delivered epochs 0..5 and is not moving (it is idle).
    status_from(&mut r, 2, 3, 5);
    status_from(&mut r, 3, 3, 5);
    // First tick: we have not been at epoch 0 for a whole interval yet.
    let first = status_tick(&mut r, 10_000);
    assert!(first.iter().all(|(to, _)| *to != ReplicaId(3)), "{first:?}");
    // Second tick, still at epoch 0: our echo goes to r3 again.
    let second = status_tick(&mut r, 20_000);
    let to3: Vec<Digest> = second
        .iter()
        .filter(|(to, _)| *to == ReplicaId(3))
        .filter_map(|(_, m)| match m {
            DbftMsg::RbEcho { digest, .. } => Some(*digest),
            _ => None,
        })
        .collect();
    assert_eq!(
        to3,
        vec![a.digest()],
        "stalled epoch not re-sent to the peer past it"
    );
}

/// Our bit in an epoch can be decided (0) before we propose in it: the
/// others decided without our INIT, and the join that makes us propose
/// comes in the same call. A request cut into that INIT would stay in
/// flight at a decided cell for ever (nothing releases it) and its client
/// waited for the 2 s rescue (dispel n = 32 perf run, 2026-11-26: the INIT
/// of epoch 0 carried the request before). It must wait for our next epoch.
#[test]
fn a_request_is_not_cut_into_an_epoch_our_bit_already_lost() {
    let s = dispel();
    let mut r = replica(&s, 1);
    let mut recs = Vec::new();
    let req = s.request(1, 1, b"x");
    let _ = handle(&mut r, 1, Event::Request(req.clone()));
    let decided_zero = DbftMsg::Bin {
        inst: chorus_dbft::InstanceId {
            epoch: 0,
            slot: ReplicaId(1),
        },
        msg: chorus_dbft::BinMsg::Decided { value: false },
    };
    let mut acts = deliver(&mut r, &mut recs, 1, 0, &decided_zero);
    acts.extend(deliver(&mut r, &mut recs, 1, 2, &decided_zero));
    let inits: Vec<(u64, usize)> = dbft_broadcasts(&acts)
        .into_iter()
        .filter_map(|m| match m {
            DbftMsg::RbInit { epoch, batch } => Some((epoch, batch.requests.len())),
            _ => None,
        })
        .collect();
    assert_eq!(inits, vec![(0, 0)], "joined epoch 0 with an empty INIT");
    // The request is still ours to propose: in the next epoch we spawn.
    let acts = handle(
        &mut r,
        10,
        Event::Timer(crate::io::TimerId::Batch(chorus_core::LaneId(1))),
    );
    let carried: Vec<u64> = dbft_broadcasts(&acts)
        .into_iter()
        .filter_map(|m| match m {
            DbftMsg::RbInit { epoch, batch } if batch.requests.contains(&req) => Some(epoch),
            _ => None,
        })
        .collect();
    assert_eq!(carried, vec![1], "the request was proposed in epoch 1");
}

/// Burst mode (the runtime's core loop): the small messages of every step
/// in a burst wait, and leave as one bundle per peer at its end; a batch
/// leaves at once. Without burst mode each step sends its own.
#[test]
fn a_burst_sends_one_bundle_of_its_small_messages() {
    let s = dispel();
    let mut r = replica(&s, 1);
    r.set_burst_mode(true);
    let mut recs = Vec::new();
    let (a, b) = (s.batch(2, 1..3), s.batch(3, 1..3));
    let mut acts = deliver(&mut r, &mut recs, 1, 2, &init(0, &a));
    acts.extend(deliver(&mut r, &mut recs, 1, 3, &init(1, &b)));
    // (One sender per epoch: no join, so no INIT of ours flushes them.)
    assert!(
        echoes(&dbft_broadcasts(&acts)).is_empty(),
        "echoes held during the burst"
    );
    assert!(r.holds_messages());
    let mut out = Outbox::new();
    r.end_of_burst(Millis(1), &mut out);
    let acts: Vec<Action> = out.drain().collect();
    let frames: Vec<Vec<DbftMsg>> = broadcasts(&acts).iter().map(unbundle).collect();
    assert_eq!(frames.len(), 1, "one bundle for the whole burst");
    let mut got = echoes(&frames[0]);
    got.sort();
    let mut want = vec![a.digest(), b.digest()];
    want.sort();
    assert_eq!(got, want);
    assert!(!r.holds_messages());
    // Out of burst mode, each step sends its own.
    let mut r = replica(&s, 1);
    let acts = deliver(&mut r, &mut recs, 1, 2, &init(0, &a));
    assert_eq!(echoes(&dbft_broadcasts(&acts)), vec![a.digest()]);
}

/// A frame no correct sender makes (two batches in one bundle) is refused
/// whole: a Byzantine peer cannot make one frame cost many batches'
/// verification.
#[test]
fn a_bundle_of_two_batches_is_refused() {
    let s = dispel();
    let mut r = replica(&s, 1);
    let w = ReplicaMsg::Dbft(DbftWire {
        bytes: bytes::Bytes::from(chorus_core::encode(&DbftBundle(vec![
            DbftMsg::RbInit {
                epoch: 0,
                batch: s.batch(2, 1..3),
            },
            DbftMsg::RbInit {
                epoch: 1,
                batch: s.batch(2, 3..5),
            },
        ]))),
    });
    let acts = super::util::msg(&mut r, 1, 2, w);
    assert!(echoes(&dbft_broadcasts(&acts)).is_empty());
    assert_eq!(r.counters().rejected("dbft-undecodable"), 1);
}

/// The runtime's clock starts at 0 with each process, while a recovered
/// engine replays its inputs at their logged times: its clock is the old
/// process's. Its timers must still fall due on the new clock, soon, not an
/// old uptime later (a real n = 4 cluster restarted after load sat at its
/// first round-3 epoch for as long as it had run before, 2026-11-26).
#[test]
fn a_restarted_replica_arms_its_dbft_timers_on_the_new_clock() {
    let s = dispel();
    let mut r = replica(&s, 1);
    let mut recs = Vec::new();
    let old = 100_000;
    // Proposer 3's broadcast is under way here when slot 2 of epoch 0
    // decides 1 (t+1 DECIDED): the zero phase gives it a grace timer.
    let mut acts = deliver(
        &mut r,
        &mut recs,
        old,
        3,
        &DbftMsg::RbInit {
            epoch: 0,
            batch: s.batch(3, 1..3),
        },
    );
    let decided_one = DbftMsg::Bin {
        inst: chorus_dbft::InstanceId {
            epoch: 0,
            slot: ReplicaId(2),
        },
        msg: chorus_dbft::BinMsg::Decided { value: true },
    };
    acts.extend(deliver(&mut r, &mut recs, old, 0, &decided_one));
    acts.extend(deliver(&mut r, &mut recs, old, 2, &decided_one));
    let dispel_timers = |acts: &[Action]| -> Vec<u64> {
        acts.iter()
            .filter_map(|a| match a {
                Action::SetTimer {
                    id: crate::io::TimerId::Dispel,
                    at,
                } => Some(at.0),
                _ => None,
            })
            .collect()
    };
    let before = dispel_timers(&acts);
    assert!(
        !before.is_empty() && before.iter().all(|&at| at > old && at < old + 1_000),
        "{before:?}"
    );
    // A new process: its clock starts again near 0.
    drop(r);
    let mut out = Outbox::new();
    let _r = Replica::recover(
        s.cfg.clone(),
        ReplicaId(1),
        s.keys[1].clone(),
        recs,
        Millis(5),
        &mut out,
    );
    let acts: Vec<Action> = out.drain().collect();
    let after = dispel_timers(&acts);
    assert!(
        !after.is_empty() && after.iter().all(|&at| at < 1_000),
        "timers armed on the old clock after the restart: {after:?}"
    );
}

fn recover_dispel(records: Vec<PersistRecord>) {
    let s = dispel();
    let _ = recover_with((*s.cfg).clone(), &s, records);
}

/// A stored DBFT snapshot that does not decode (another version's format)
/// stops recovery: replaying the inputs logged after it on a fresh engine
/// could vote against what this replica sent before. Before, it was counted
/// (`dbft-bad-snapshot`) and the replay went on without it.
#[test]
#[should_panic(expected = "stored DBFT snapshot does not decode")]
fn a_dispel_snapshot_that_does_not_decode_stops_recovery() {
    recover_dispel(vec![PersistRecord::DispelSnapshot {
        low: 3,
        state: bytes::Bytes::from_static(&[0xff; 40]),
    }]);
}

/// The same for a logged input (skipping it rebuilds an engine that never
/// sent what we sent).
#[test]
#[should_panic(expected = "logged DBFT input does not decode")]
fn a_logged_dispel_input_that_does_not_decode_stops_recovery() {
    recover_dispel(vec![PersistRecord::DispelInput {
        now: Millis(1),
        input: bytes::Bytes::from_static(&[0xff; 40]),
    }]);
}

/// `req` with the MAC for replica `bad` broken (a partial authenticator:
/// the other entries still verify).
fn partial(mut req: chorus_core::Request, bad: usize) -> chorus_core::Request {
    if let chorus_core::Authenticator::Macs(m) = &mut req.auth {
        let mut v = (**m).clone();
        v[bad] = chorus_core::Mac([0; 16]);
        *m = std::sync::Arc::new(v);
    }
    req
}

/// A request in a peer's INIT whose MAC for us fails is reported to every
/// replica, naming the proposer (the INIT is refused as before).
#[test]
fn a_request_unverifiable_here_is_reported_to_every_replica() {
    let s = dispel();
    let mut r = replica(&s, 1);
    let req = partial(s.request(0, 1, b"x"), 1);
    let init = DbftMsg::RbInit {
        epoch: 0,
        batch: chorus_core::Batch::new(vec![req.clone()], 0),
    };
    let acts = handle(
        &mut r,
        10,
        Event::Message {
            from: ReplicaId(2),
            msg: wire(&init),
        },
    );
    let reports: Vec<chorus_core::UnverifiableRequest> = broadcasts(&acts)
        .into_iter()
        .filter_map(|m| match m {
            ReplicaMsg::Unverifiable(u) => Some(u),
            _ => None,
        })
        .collect();
    assert_eq!(reports.len(), 1, "{acts:?}");
    let u = &reports[0];
    assert_eq!(
        (u.client, u.seq, u.lane),
        (req.client, req.seq, chorus_core::LaneId(2))
    );
    assert_eq!((u.content, u.auth), (req.digest(), req.auth_digest()));
}

/// The proposer that verified such a request drops it on f+1 reports and
/// stops proposing it: before, its bit decided 0, the request went back to
/// its pending ones and into every later INIT, and the cluster ran epochs
/// for it forever (16 a second at n = 16 with every correct client done).
#[test]
fn a_proposer_drops_a_request_f_plus_1_replicas_could_not_verify() {
    let s = dispel();
    let mut r = replica(&s, 2);
    let req = partial(s.request(0, 1, b"x"), 1);
    let _ = handle(&mut r, 1, Event::Request(req.clone()));
    assert_eq!(r.status().pool_len, 1);
    let report = chorus_core::UnverifiableRequest {
        lane: chorus_core::LaneId(2),
        view: chorus_core::View(0),
        slot: chorus_core::Slot(0),
        client: req.client,
        seq: req.seq,
        content: req.digest(),
        auth: req.auth_digest(),
    };
    for from in [1, 3] {
        let _ = handle(
            &mut r,
            2,
            Event::Message {
                from: ReplicaId(from),
                msg: ReplicaMsg::Unverifiable(report.clone()),
            },
        );
    }
    assert_eq!(r.status().pool_len, 0, "dropped after f + 1 = 2 reports");
    assert_eq!(r.counters().clients_proven_partial, 1);
}

/// A Byzantine proposer cannot make us broadcast reports at will: one per
/// proposer and epoch (a repeated INIT is not reported again), and none for
/// an epoch outside the engine's window.
#[test]
fn unverifiable_reports_are_one_per_proposer_and_epoch_inside_the_window() {
    let s = dispel();
    let mut r = replica(&s, 1);
    let req = partial(s.request(0, 1, b"x"), 1);
    let init = |epoch| DbftMsg::RbInit {
        epoch,
        batch: chorus_core::Batch::new(vec![req.clone()], 0),
    };
    let reports = |r: &mut Replica, epoch, now| {
        let acts = handle(
            r,
            now,
            Event::Message {
                from: ReplicaId(2),
                msg: wire(&init(epoch)),
            },
        );
        broadcasts(&acts)
            .iter()
            .filter(|m| matches!(m, ReplicaMsg::Unverifiable(_)))
            .count()
    };
    assert_eq!(reports(&mut r, 0, 10), 1);
    assert_eq!(reports(&mut r, 0, 11), 0, "the same INIT again");
    assert_eq!(reports(&mut r, 1, 12), 1, "the next epoch");
    assert_eq!(reports(&mut r, 1_000_000, 13), 0, "far outside the window");
}

fn recover_with(
    cfg: chorus_core::ClusterConfig,
    s: &Setup,
    records: Vec<PersistRecord>,
) -> (Replica, Vec<PersistRecord>) {
    let mut out = Outbox::new();
    let r = Replica::recover(
        std::sync::Arc::new(cfg),
        ReplicaId(1),
        s.keys[1].clone(),
        records,
        Millis(5),
        &mut out,
    );
    let acts: Vec<Action> = out.drain().collect();
    (r, persists(&acts))
}

fn engine(r: &Replica) -> &chorus_dbft::Dbft {
    r.dispel.as_ref().expect("dispel").engine()
}

/// A fresh dispel replica, with what it persisted at start.
fn fresh(cfg: &std::sync::Arc<chorus_core::ClusterConfig>, s: &Setup) -> (Replica, Vec<PersistRecord>) {
    let mut out = Outbox::new();
    let r = Replica::new(cfg.clone(), ReplicaId(1), s.keys[1].clone(), Millis(0), &mut out);
    let acts: Vec<Action> = out.drain().collect();
    (r, persists(&acts))
}

fn snapshots(recs: &[PersistRecord]) -> usize {
    recs.iter()
        .filter(|r| matches!(r, PersistRecord::DispelSnapshot { .. }))
        .count()
}

/// A restart under changed DBFT parameters (the operator edited the
/// cluster file) replays the logged inputs under the parameters they were
/// handled with (those of the snapshot before them; a fresh replica
/// stores one at once), then takes the file's and stores a snapshot, so
/// the next restart replays what it handles under those. Before, a
/// restored snapshot kept its parameters for ever, and a replay without
/// one ran old inputs under the new file: here an INIT for epoch 5 that a
/// window of 16 took, and echoed, would be refused by a window of 4 (the
/// restarted replica would not hold what it echoed), and an INIT for
/// epoch 6 that the second process refused would be taken by the third.
#[test]
fn a_restart_replays_under_the_stored_dbft_parameters_then_takes_the_new_ones() {
    let s = dispel();
    let (mut r, mut recs) = fresh(&s.cfg, &s);
    assert_eq!(snapshots(&recs), 1, "a fresh replica stores its parameters");
    let a = s.batch(2, 1..3);
    let acts = deliver(&mut r, &mut recs, 1, 2, &init(5, &a));
    assert_eq!(echoes(&dbft_broadcasts(&acts)), vec![a.digest()]);
    assert_eq!(engine(&r).config().window_epochs, 16);
    let default_timeout = engine(&r).config().timeout_base_ms;

    let mut changed = (*s.cfg).clone();
    changed.params.window_slots = 4;
    changed.params.dispel_round_timeout_ms = 777;
    let (mut r2, more) = recover_with(changed, &s, recs.clone());
    assert!(engine(&r2).epoch(5).is_some(), "the echoed epoch is held again");
    assert_eq!(engine(&r2).config().timeout_base_ms, 777);
    // Shrunk no further than the newest epoch held (0..=5).
    assert_eq!(engine(&r2).config().window_epochs, 6);
    assert_eq!(snapshots(&more), 1, "the parameters taken are stored: {more:?}");
    recs.extend(more);
    let b = s.batch(3, 3..5);
    let acts = deliver(&mut r2, &mut recs, 50, 3, &DbftMsg::RbInit { epoch: 6, batch: b });
    assert!(
        echoes(&dbft_broadcasts(&acts)).is_empty(),
        "epoch 6 is past a window of 6"
    );

    // A third process, under the original file again, replays the second
    // one's input under the second one's parameters, then takes its own.
    let (r3, _) = recover_with((*s.cfg).clone(), &s, recs);
    assert!(engine(&r3).epoch(5).is_some());
    assert!(
        engine(&r3).epoch(6).is_none(),
        "refused here before the crash, refused in the replay"
    );
    assert_eq!(engine(&r3).config().window_epochs, 16);
    assert_eq!(engine(&r3).config().timeout_base_ms, default_timeout);
    for e in [5, 6] {
        assert_eq!(
            format!("{:?}", engine(&r3).epoch(e)),
            format!("{:?}", engine(&r2).epoch(e))
        );
    }
}

/// What a dispel replica stores (its logged DBFT inputs and its DBFT
/// snapshot) has no version of its own: postcard encodings of
/// `dispel::Input` and `DispelState`, which hold the engine's whole state.
/// A replica restarted by a binary that encodes them differently stops at
/// recovery (fail-stop: it cannot rebuild what it sent). If this test
/// fails, a change altered that format: a store written before it no
/// longer loads. Either keep the format (new enum variants go last, no
/// field changes) or add a migration, then update the digests here.
#[test]
fn the_stored_dispel_format_is_unchanged() {
    let s = dispel();
    let (mut r, mut recs) = fresh(&s.cfg, &s);
    let a = s.batch(2, 1..3);
    deliver(&mut r, &mut recs, 1, 2, &DbftMsg::RbInit { epoch: 0, batch: a });
    let mut out = Outbox::new();
    let mut counters = crate::counters::Counters::default();
    let mut cx = crate::counters::Cx::new(Millis(2), &mut out, &mut counters);
    let _ = r.dispel.as_mut().expect("dispel").collect(&mut cx, 1);
    let acts: Vec<Action> = out.drain().collect();
    recs.extend(persists(&acts));
    let digests: Vec<String> = recs
        .iter()
        .filter_map(|rec| match rec {
            PersistRecord::DispelInput { input, .. } => Some(format!("input {}", Digest::of(input).short())),
            PersistRecord::DispelSnapshot { state, .. } => {
                Some(format!("snapshot {}", Digest::of(state).short()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        digests,
        [
            "snapshot 206ec1913c3c",
            "input 7f23d06c5309",
            "snapshot a8d7586c008f"
        ],
        "the stored dispel format changed"
    );
}

/// Replicas 0 and 2 echo, then ready, our INIT of epoch 0 (`digest`): with
/// ours, 2f+1 of each, so our broadcast delivers.
fn deliver_our_broadcast(r: &mut Replica, recs: &mut Vec<PersistRecord>, now: u64, digest: Digest) {
    let me = ReplicaId(1);
    for from in [0, 2] {
        deliver(
            r,
            recs,
            now,
            from,
            &DbftMsg::RbEcho {
                epoch: 0,
                proposer: me,
                digest,
            },
        );
    }
    for from in [0, 2] {
        deliver(
            r,
            recs,
            now + 1,
            from,
            &DbftMsg::RbReady {
                epoch: 0,
                proposer: me,
                digest,
            },
        );
    }
}

/// Our INIT in epoch 0 (a request of client 1), then our bit decided 0 by
/// f+1 DECIDED notices, after our broadcast delivered (`echo_first`) or
/// before it had.
fn lose_own_epoch(echo_first: bool) -> Replica {
    let s = dispel();
    let mut r = replica(&s, 1);
    let mut recs = Vec::new();
    let acts = propose_first_request(&s, &mut r);
    let digest = dbft_broadcasts(&acts)
        .into_iter()
        .find_map(|m| match m {
            DbftMsg::RbInit { epoch: 0, batch } => Some(batch.digest()),
            _ => None,
        })
        .expect("our INIT for epoch 0");
    let me = ReplicaId(1);
    if echo_first {
        deliver_our_broadcast(&mut r, &mut recs, 21, digest);
        let rb = r
            .dispel
            .as_ref()
            .unwrap()
            .engine()
            .epoch(0)
            .unwrap()
            .rb(1)
            .delivered();
        assert_eq!(rb, Some(digest), "our broadcast delivered");
    }
    let inst = chorus_dbft::InstanceId { epoch: 0, slot: me };
    for from in [0, 2] {
        let decided = DbftMsg::Bin {
            inst,
            msg: chorus_dbft::BinMsg::Decided { value: false },
        };
        deliver(&mut r, &mut recs, 23, from, &decided);
    }
    let bit = r
        .dispel
        .as_ref()
        .unwrap()
        .engine()
        .epoch(0)
        .unwrap()
        .binary(1)
        .decided();
    assert_eq!(bit, Some(false), "our bit decided 0");
    r
}

/// A lost epoch weighs more towards dropping a reported request when our
/// bit decided 0 before our broadcast delivered (`lost_undelivered`): a
/// Byzantine replica can report any request it holds, and a late INIT
/// that delivered in time says little about the requests in it. Judged
/// at the decision: a delivery after it (a Byzantine replica timing its
/// echoes) does not change the verdict.
#[test]
fn an_epoch_lost_before_our_broadcast_delivered_weighs_more() {
    let r = lose_own_epoch(false);
    assert!(r.dispel.as_ref().unwrap().lost_undelivered(0));
    let r = lose_own_epoch(true);
    assert!(!r.dispel.as_ref().unwrap().lost_undelivered(0));
    // Lost first, our broadcast delivered afterwards: still undelivered.
    let mut r = lose_own_epoch(false);
    let digest = r
        .dispel
        .as_ref()
        .unwrap()
        .engine()
        .epoch(0)
        .unwrap()
        .rb(1)
        .first_init()
        .expect("our INIT");
    let mut recs = Vec::new();
    deliver_our_broadcast(&mut r, &mut recs, 30, digest);
    let d = r.dispel.as_ref().unwrap();
    assert_eq!(d.engine().epoch(0).unwrap().rb(1).delivered(), Some(digest));
    assert!(d.lost_undelivered(0), "judged at the decision");
}

/// A crash can keep the `Stable` record of a checkpoint and lose the DBFT
/// snapshot written after it (a torn tail). Recovery must not leave the
/// engine below the checkpoint: peers have collected those epochs and will
/// never finish them, so the replica would wait for ever (dispel n = 4 seed
/// 211030). It collects up to the checkpoint and stores that snapshot.
#[test]
fn recovery_collects_the_engine_up_to_a_stable_checkpoint_its_snapshot_missed() {
    let s = dispel();
    let (_, genesis) = fresh(&s.cfg, &s);
    assert_eq!(snapshots(&genesis), 1);
    let lanes = s.cfg.lanes() as u64;
    let cert = s.checkpoint_cert(10 * lanes, chorus_core::Digest::of(b"state"), &[0, 1, 2]);
    let mut records = genesis;
    records.push(PersistRecord::Stable {
        cert,
        snapshot: bytes::Bytes::new(),
    });
    let (r, persisted) = recover_with((*s.cfg).clone(), &s, records);
    assert_eq!(
        engine(&r).low(),
        10,
        "the engine starts at the checkpoint's epoch"
    );
    let status = r.dispel_status().expect("dispel");
    assert!(status.next_epoch >= 10, "{status:?}");
    assert!(
        persisted
            .iter()
            .any(|p| matches!(p, PersistRecord::DispelSnapshot { low: 10, .. })),
        "the collected engine is stored: {persisted:?}"
    );
}
