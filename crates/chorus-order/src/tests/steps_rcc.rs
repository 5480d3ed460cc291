//! RCC (§III-C, Fig. 4) on the PBFT lane: an instance's FAILURE messages are
//! its lane's VIEW-CHANGEs (each carries the sender's prepared state,
//! Assumption A3), `stop(i; E)` is the NEW-VIEW that the coordinating leader
//! `L_i` builds from 2f+1 of them, and instance `i` resumes at `ρ + 2^k`.

use super::util::{broadcasts, effects, kinds, msg, params, peer_gave_up, replica, setup, Setup};
use crate::io::{Event, Outbox, TimerId};
use crate::replica::Replica;
use crate::roles::{coordinating_leader, new_view_primary};
use chorus_core::{
    Batch, Exclusion, LaneId, NewView, OrderingMode, ReplicaId, ReplicaMsg, Slot, View, ViewChange,
};

const L0: LaneId = LaneId(0);

/// σ = 4 rounds, so a first stop lasts σ · 2 = 8 rounds, inside the window.
fn rcc() -> Setup {
    let p = chorus_core::ProtocolParams {
        max_lane_drift_slots: 4,
        ..params(OrderingMode::Rcc, 4)
    };
    setup(4, 4, p)
}

fn failure(s: &Setup, replica: u32, view: u64, prepared: Vec<chorus_core::PreparedCert>) -> ViewChange {
    s.view_change(replica, view, None, prepared)
}

/// Replica 1 accepted instance 0's proposal `a` at round 0 and prepared it
/// with replica 2; instance 0's primary then went silent. Replica 1's timer
/// expires: it halts the instance and sends FAILURE (VIEW-CHANGE to view 1).
/// It is `L_0` for view 1, so with FAILUREs of replicas 2 and 3 it proposes
/// the stop.
fn stopped() -> (Setup, Batch, Replica, NewView) {
    let s = rcc();
    let a = s.batch(0, 1..3);
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
    // Replica 2 timed out on instance 0 too (a lone timeout only reports).
    peer_gave_up(&mut r1, deadline.0 - 1, 2, 0, 0, 0);
    let mut out = Outbox::new();
    r1.handle(deadline, Event::Timer(TimerId::ViewChange(L0)), &mut out);
    let sent = effects(&mut out);
    // Our signed timeout completes the certificate: we leave, and pass the
    // peers' statements on (`lane/timeout_cert.rs`).
    assert_eq!(
        kinds(&sent),
        vec![
            "broadcast timeout",
            "persist timeout-cert",
            "persist view",
            "broadcast view-change",
            "broadcast timeout",
            "broadcast timeout"
        ]
    );
    let f2 = failure(&s, 2, 1, vec![s.prepared_cert(0, 0, 0, 0, &a, &[1, 2])]);
    let f3 = failure(&s, 3, 1, vec![]);
    assert!(msg(&mut r1, deadline.0 + 1, 2, ReplicaMsg::ViewChange(f2)).is_empty());
    let e = msg(&mut r1, deadline.0 + 2, 3, ReplicaMsg::ViewChange(f3));
    let nv = broadcasts(&e)
        .into_iter()
        .find_map(|m| match m {
            ReplicaMsg::NewView(nv) => Some(nv),
            _ => None,
        })
        .expect("L_0 proposes the stop");
    (s, a, r1, nv)
}

#[test]
fn the_coordinating_leader_is_never_the_stopped_primary() {
    let s = rcc();
    for lane in 0..4 {
        for v in 1..20 {
            let l = coordinating_leader(&s.cfg, LaneId(lane), View(v));
            assert_ne!(l, ReplicaId(lane), "lane {lane} view {v}");
            assert_eq!(new_view_primary(&s.cfg, LaneId(lane), View(v)), l);
        }
        // Consecutive failed coordinating leaders are replaced by the others.
        let ls: std::collections::BTreeSet<_> = (1..4)
            .map(|v| coordinating_leader(&s.cfg, LaneId(lane), View(v)))
            .collect();
        assert_eq!(ls.len(), 3);
    }
}

/// Fig. 4 lines 7–12: `stop(0; E)` carries 2f+1 FAILUREs, recovers the
/// proposal a correct replica accepted (round 0, `ρ = 0`), and stops
/// instance 0 until round `ρ + σ · 2^1` (σ = 4 here).
#[test]
fn the_stop_recovers_accepted_proposals_and_restarts_at_rho_plus_2_to_the_k() {
    let (_, a, _, nv) = stopped();
    assert_eq!(nv.replica, ReplicaId(1));
    assert_eq!(nv.view_changes.len(), 3);
    assert_eq!(nv.reproposals.len(), 1);
    assert_eq!(nv.reproposals[0].digest, a.digest());
    assert_eq!(
        nv.excluded,
        vec![Exclusion {
            replica: ReplicaId(0),
            failures: 1,
            until: Slot(8),
        }]
    );
}

/// A backup accepts the stop; the stopped primary's own proposal for a
/// stopped round is refused, the coordinating leader's accepted, and the
/// primary is back at round `ρ + 2^k`.
#[test]
fn a_stopped_instance_resumes_with_its_own_primary_at_the_restart_round() {
    let (s, _, _, nv) = stopped();
    let mut r2 = replica(&s, 2);
    let e = msg(&mut r2, 5_000, 1, ReplicaMsg::NewView(nv.clone()));
    assert!(kinds(&e).contains(&"persist view".to_string()), "{:?}", kinds(&e));
    assert_eq!(r2.status().views[0], View(1));
    // Round 1 is stopped: instance 0's primary may not propose it…
    let b = s.batch(0, 5..6);
    msg(
        &mut r2,
        5_001,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 1, 1, &b)),
    );
    assert_eq!(r2.counters().rejected("wrong-leader"), 1);
    // …L_0 may (here the instance's pending clients, or a no-op).
    let e = msg(
        &mut r2,
        5_002,
        1,
        ReplicaMsg::PrePrepare(s.pre_prepare(1, 0, 1, 1, &Batch::noop())),
    );
    assert!(
        kinds(&e).contains(&"broadcast prepare".to_string()),
        "{:?}",
        kinds(&e)
    );
    // Round 8 = ρ + σ · 2^1: the primary again, not L_0.
    let e = msg(
        &mut r2,
        5_003,
        1,
        ReplicaMsg::PrePrepare(s.pre_prepare(1, 0, 1, 8, &Batch::noop())),
    );
    assert!(!kinds(&e).contains(&"broadcast prepare".to_string()));
    assert_eq!(r2.counters().rejected("wrong-leader"), 2);
    // (A no-op: r2 delivered nothing, so it could not yet tell who owns a
    // client's request in round 8 and would hold it, `rcc_switch`.)
    let e = msg(
        &mut r2,
        5_004,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 1, 8, &Batch::noop())),
    );
    assert!(
        kinds(&e).contains(&"broadcast prepare".to_string()),
        "{:?}",
        kinds(&e)
    );
}

/// Fig. 4: a stop is valid only with nf FAILUREs from distinct replicas,
/// signed by `L_i`, and with exactly the restart round E implies.
#[test]
fn a_stop_with_too_few_failures_a_forged_signature_or_a_chosen_restart_is_rejected() {
    let (s, _, _, nv) = stopped();
    let resign = |mut nv: NewView, signer: u32| {
        nv.replica = ReplicaId(signer);
        nv.sig = s.sign(signer, chorus_core::SigKind::NewView, &nv.signing_digest());
        nv
    };
    let cases: Vec<(NewView, &str)> = vec![
        (
            {
                let mut n = nv.clone();
                n.view_changes.truncate(2);
                resign(n, 1)
            },
            "nv-view-change-count",
        ),
        (
            {
                let mut n = nv.clone();
                n.excluded[0].until = Slot(64);
                resign(n, 1)
            },
            "nv-bad-stop",
        ),
        (
            {
                let mut n = nv.clone();
                n.excluded.clear();
                resign(n, 1)
            },
            "nv-bad-stop",
        ),
        (
            {
                let mut n = nv.clone();
                n.excluded[0].until = Slot(9);
                n
            },
            "bad-signature",
        ),
        (resign(nv.clone(), 0), "wrong-primary"),
    ];
    for (bad, reason) in cases {
        let mut r3 = replica(&s, 3);
        let e = msg(&mut r3, 5_000, 1, ReplicaMsg::NewView(bad));
        assert!(e.is_empty(), "{reason}: {:?}", kinds(&e));
        assert_eq!(r3.counters().rejected(reason), 1, "{reason}");
        assert_eq!(r3.status().views[0], View(0));
    }
}

/// Fig. 4 line 5: f+1 FAILUREs for an instance make a replica detect its
/// failure (and send its own FAILURE) even before its own timer expires; f
/// do not (they may all be Byzantine).
#[test]
fn failure_is_detected_at_f_plus_1_failure_messages() {
    let s = rcc();
    let mut r3 = replica(&s, 3);
    let e = msg(&mut r3, 10, 1, ReplicaMsg::ViewChange(failure(&s, 1, 1, vec![])));
    assert!(broadcasts(&e).is_empty());
    assert_eq!(r3.status().views[0], View(0));
    let e = msg(&mut r3, 11, 2, ReplicaMsg::ViewChange(failure(&s, 2, 1, vec![])));
    assert!(
        broadcasts(&e)
            .iter()
            .any(|m| matches!(m, ReplicaMsg::ViewChange(vc) if vc.new_view == View(1) && vc.replica == ReplicaId(3))),
        "{:?}",
        kinds(&e)
    );
    // Other instances are untouched (wait-free, RCC D4/D5).
    assert_eq!(&r3.status().views[1..], &[View(0), View(0), View(0)]);
}

/// Decide `batch` at `slot` of `lane` in view 0 at replica `r` (pre-prepare
/// from the instance primary, prepares and commits from the others).
fn decide(s: &Setup, r: &mut Replica, me: u32, now: u64, lane: u32, slot: u64, batch: &Batch) {
    msg(
        r,
        now,
        lane,
        ReplicaMsg::PrePrepare(s.pre_prepare(lane, lane, 0, slot, batch)),
    );
    for p in (0..4).filter(|p| *p != lane && *p != me) {
        msg(
            r,
            now,
            p,
            ReplicaMsg::Prepare(s.prepare(p, lane, 0, slot, batch.digest())),
        );
    }
    for p in (0..4).filter(|p| *p != me) {
        msg(
            r,
            now,
            p,
            ReplicaMsg::Commit(s.commit(p, lane, 0, slot, batch.digest())),
        );
    }
}

/// RCC §IV: an instance that holds the others at the drift bound is
/// suspected a timeout after it started to, even though it keeps deciding a
/// round now and then (each decision used to push its timer back).
#[test]
fn a_throttling_instance_is_suspected_although_it_trickles_decisions() {
    let s = rcc();
    let timeout = s.cfg.params.view_change_timeout_ms;
    let mut r1 = replica(&s, 1);
    // Instances 1–3 are at round 7; instance 0 has decided nothing: 7 ≥ σ − 1.
    for lane in 1..4 {
        for slot in 0..8 {
            msg(
                &mut r1,
                0,
                lane,
                ReplicaMsg::PrePrepare(s.pre_prepare(lane, lane, 0, slot, &Batch::noop())),
            );
        }
    }
    // Instance 0 decides a round just before the timeout would expire.
    decide(&s, &mut r1, 1, timeout * 3 / 4, 0, 0, &Batch::noop());
    assert_eq!(r1.status().next_undecided[0], Slot(1));
    let deadline = r1.lane(L0).and_then(|l| l.timer_deadline()).expect("timer armed");
    assert_eq!(
        deadline.0, timeout,
        "throttling since 0: the decision must not push the timer back"
    );
    // Alone, the expiry is only reported, and the throttling rule must not
    // re-arm the timer at once (it did: a message storm in the simulator).
    let mut out = Outbox::new();
    r1.handle(deadline, Event::Timer(TimerId::ViewChange(L0)), &mut out);
    assert!(
        r1.lane(L0).is_some_and(|l| l.is_active()),
        "a lone timeout only reports"
    );
    let retry = r1.lane(L0).and_then(|l| l.timer_deadline()).expect("retry armed");
    assert!(retry.0 > deadline.0, "re-armed at {retry:?}, not at once");
    // Our timeout is out; with the peers' ones it is a certificate.
    let e = peer_gave_up(&mut r1, retry.0 - 1, 2, 0, 0, 1);
    assert!(
        broadcasts(&e)
            .iter()
            .any(|m| matches!(m, ReplicaMsg::ViewChange(vc) if vc.new_view == View(1))),
        "FAILURE for the throttling instance: {:?}",
        kinds(&e)
    );
    // Without the lag (the others not ahead), decisions re-arm the timer.
    let mut r2 = replica(&s, 2);
    for slot in 0..2 {
        decide(
            &s,
            &mut r2,
            2,
            (slot + 1) * timeout * 3 / 4,
            0,
            slot,
            &Batch::noop(),
        );
    }
    let d2 = r2.lane(L0).and_then(|l| l.timer_deadline());
    assert!(d2.is_none_or(|d| d.0 > timeout), "{d2:?}");
}

/// Decide `batch` at `slot` of lane 0 in `view`, proposed by `proposer`.
#[allow(clippy::too_many_arguments)]
fn decide_in(
    s: &Setup,
    r: &mut Replica,
    me: u32,
    now: u64,
    view: u64,
    slot: u64,
    proposer: u32,
    batch: &Batch,
) {
    msg(
        r,
        now,
        proposer,
        ReplicaMsg::PrePrepare(s.pre_prepare(proposer, 0, view, slot, batch)),
    );
    for p in (0..4).filter(|p| *p != proposer && *p != me) {
        msg(
            r,
            now,
            p,
            ReplicaMsg::Prepare(s.prepare(p, 0, view, slot, batch.digest())),
        );
    }
    for p in (0..4).filter(|p| *p != me) {
        msg(
            r,
            now,
            p,
            ReplicaMsg::Commit(s.commit(p, 0, view, slot, batch.digest())),
        );
    }
}

/// RCC §III-C: when the stop ends, a live primary proposes its restart
/// round at once; if it does not, the lane suspects it after a short probe
/// (two status intervals), not after a whole view-change timeout.
#[test]
fn a_primary_that_does_not_take_its_instance_back_is_suspected_after_a_short_probe() {
    let (s, a, _, nv) = stopped();
    let timeout = s.cfg.params.view_change_timeout_ms;
    let probe = 2 * s.cfg.params.status_interval_ms;
    assert!(probe < timeout);
    let mut r2 = replica(&s, 2);
    msg(&mut r2, 5_000, 1, ReplicaMsg::NewView(nv));
    // The other instances are ahead: instance 0 holds the rounds back.
    for lane in 1..4 {
        for slot in 0..10 {
            msg(
                &mut r2,
                5_000,
                lane,
                ReplicaMsg::PrePrepare(s.pre_prepare(lane, lane, 0, slot, &Batch::noop())),
            );
        }
    }
    // L_0 fills the stopped rounds (round 0 is the recovered proposal).
    decide_in(&s, &mut r2, 2, 5_001, 1, 0, 1, &a);
    for slot in 1..8 {
        decide_in(&s, &mut r2, 2, 5_001, 1, slot, 1, &Batch::noop());
    }
    assert_eq!(r2.status().next_undecided[0], Slot(8), "at the restart round");
    let deadline = r2.lane(L0).and_then(|l| l.timer_deadline()).expect("timer armed");
    assert!(
        deadline.0 <= 5_001 + probe,
        "the restart probe ({probe} ms) bounds the wait, not the timeout ({timeout} ms): {deadline:?}"
    );
    // A live primary's round ends the probe: the usual timeout again.
    decide_in(&s, &mut r2, 2, 5_002, 1, 8, 0, &Batch::noop());
    assert_eq!(r2.status().next_undecided[0], Slot(9));
    let deadline = r2.lane(L0).and_then(|l| l.timer_deadline()).expect("timer armed");
    assert!(deadline.0 > 5_002 + probe, "{deadline:?}");
}
