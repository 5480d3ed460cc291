//! `PrepareAuth::Mac`: prepares authenticated by the channel only, and the
//! view change of Castro & Liskov (TOCS 2002) that works without signed
//! prepares: unproven "prepared" (P) and "pre-prepared" (Q) claims, and a
//! NEW-VIEW that re-proposes a digest only when 2f+1 view changes do not
//! contradict it (A1) and f+1 say they pre-prepared it (A2).

use super::util::{broadcasts, effects, msg, params, replica, setup, Setup};
use crate::certs::verify_view_change;
use crate::io::{Action, Event, Outbox, TimerId};
use crate::lane::plan_new_view;
use crate::replica::Replica;
use chorus_core::{
    Batch, LaneId, Millis, NewView, OrderingMode, PrePrepared, PrepareAuth, PreparedCert, ReplicaId,
    ReplicaMsg, SigKind, Signature, Slot, View, ViewChange,
};

const L0: LaneId = LaneId(0);

fn mac_setup() -> Setup {
    let mut p = params(OrderingMode::Pbft, 1);
    p.prepare_auth = PrepareAuth::Mac;
    setup(4, 2, p)
}

/// A P claim: `signer`'s pre-prepare of `batch` at (`view`, `slot`), no prepares.
fn claim(s: &Setup, signer: u32, view: u64, slot: u64, batch: &Batch) -> PreparedCert {
    PreparedCert {
        lane: L0,
        view: View(view),
        slot: Slot(slot),
        digest: batch.digest(),
        pre_prepare_sig: s.pre_prepare(signer, 0, view, slot, batch).sig,
        prepares: vec![],
    }
}

fn q(slot: u64, batch: &Batch, view: u64) -> PrePrepared {
    PrePrepared {
        slot: Slot(slot),
        digest: batch.digest(),
        view: View(view),
    }
}

fn vc(
    s: &Setup,
    replica: u32,
    view: u64,
    prepared: Vec<PreparedCert>,
    pre_prepared: Vec<PrePrepared>,
) -> ViewChange {
    let mut vc = s.view_change(replica, view, None, prepared);
    vc.pre_prepared = pre_prepared;
    vc.sig = s.sign(replica, SigKind::ViewChange, &vc.signing_digest());
    vc
}

fn new_views(actions: &[Action]) -> Vec<NewView> {
    broadcasts(actions)
        .into_iter()
        .filter_map(|m| match m {
            ReplicaMsg::NewView(nv) => Some(nv),
            _ => None,
        })
        .collect()
}

/// Replica 1 in view 0: pre-prepare of `a` at slot 0 from the primary r0,
/// an *unsigned* prepare from r2: prepared (its own prepare and r2's).
fn prepared_at_r1(s: &Setup, a: &Batch) -> (Replica, Vec<Action>, Vec<Action>) {
    let mut r1 = replica(s, 1);
    let pp = msg(
        &mut r1,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, a)),
    );
    let mut p2 = s.prepare(2, 0, 0, 0, a.digest());
    p2.sig = Signature([0; 64]);
    let after = msg(&mut r1, 2, 2, ReplicaMsg::Prepare(p2));
    (r1, pp, after)
}

#[test]
fn prepares_go_unsigned_and_a_channel_authenticated_quorum_prepares() {
    let s = mac_setup();
    let a = s.batch(0, 1..3);
    let (r1, pp, after) = prepared_at_r1(&s, &a);
    let own = broadcasts(&pp)
        .into_iter()
        .find_map(|m| match m {
            ReplicaMsg::Prepare(p) => Some(p),
            _ => None,
        })
        .expect("prepare sent");
    assert_eq!(own.sig, Signature([0; 64]), "no signature under PrepareAuth::Mac");
    assert!(
        broadcasts(&after)
            .iter()
            .any(|m| matches!(m, ReplicaMsg::Commit(_))),
        "2f channel-authenticated prepares prepare the slot: {after:?}"
    );
    assert_eq!(r1.counters().rejected("bad-signature"), 0);
}

#[test]
fn the_view_change_claims_what_prepared_and_pre_prepared_without_prepares() {
    let s = mac_setup();
    let a = s.batch(0, 1..3);
    let (mut r1, _, _) = prepared_at_r1(&s, &a);
    let deadline = r1.lane(L0).and_then(|l| l.timer_deadline()).expect("timer armed");
    super::util::peer_gave_up(&mut r1, deadline.0 - 1, 3, 0, 0, 0);
    let mut out = Outbox::new();
    r1.handle(deadline, Event::Timer(TimerId::ViewChange(L0)), &mut out);
    let sent = effects(&mut out);
    let vc = broadcasts(&sent)
        .into_iter()
        .find_map(|m| match m {
            ReplicaMsg::ViewChange(vc) => Some(vc),
            _ => None,
        })
        .expect("view change sent");
    assert_eq!(vc.prepared.len(), 1);
    assert!(vc.prepared[0].prepares.is_empty());
    assert_eq!(vc.prepared[0].digest, a.digest());
    assert_eq!(vc.pre_prepared, vec![q(0, &a, 0)]);
    verify_view_change(&s.cfg, &vc).expect("a MAC-mode view change verifies");
}

/// r0, the Byzantine old primary, equivocated: `a` to r1 and r2 (both
/// prepared it, so it may have committed), `b` to nobody correct; in its
/// view change it claims `b` prepared in view 0. The first 2f+1 view
/// changes at r1 (the new primary) contradict each other at slot 0, so it
/// must wait; r3's view change (pre-prepared `a`) settles it for `a`.
#[test]
fn the_new_primary_waits_out_a_contradicting_claim_and_keeps_the_prepared_batch() {
    let s = mac_setup();
    let a = s.batch(0, 1..3);
    let b = s.batch(1, 1..2);
    let (mut r1, _, _) = prepared_at_r1(&s, &a);
    let deadline = r1.lane(L0).and_then(|l| l.timer_deadline()).expect("timer armed");
    super::util::peer_gave_up(&mut r1, deadline.0 - 1, 3, 0, 0, 0);
    let mut out = Outbox::new();
    r1.handle(deadline, Event::Timer(TimerId::ViewChange(L0)), &mut out);
    let liar = vc(&s, 0, 1, vec![claim(&s, 0, 0, 0, &b)], vec![q(0, &b, 0)]);
    let r2 = vc(&s, 2, 1, vec![claim(&s, 0, 0, 0, &a)], vec![q(0, &a, 0)]);
    let r3 = vc(&s, 3, 1, vec![], vec![q(0, &a, 0)]);
    assert!(new_views(&msg(&mut r1, deadline.0 + 1, 0, ReplicaMsg::ViewChange(liar))).is_empty());
    assert!(
        new_views(&msg(&mut r1, deadline.0 + 2, 2, ReplicaMsg::ViewChange(r2))).is_empty(),
        "undecidable from 2f+1: no NEW-VIEW yet"
    );
    let nvs = new_views(&msg(&mut r1, deadline.0 + 3, 3, ReplicaMsg::ViewChange(r3)));
    assert_eq!(nvs.len(), 1, "decidable with the fourth view change");
    assert_eq!(nvs[0].view_changes.len(), 4);
    assert_eq!(nvs[0].reproposals.len(), 1);
    assert_eq!(nvs[0].reproposals[0].digest, a.digest());
}

/// The attack A2 is there for: a colluder that may sign pre-prepares in a
/// later view (block-wise rotation: anyone, in views above 0) claims a
/// no-op prepared there, over a batch that prepared (and may have
/// committed) in view 0. "Highest view wins" would re-propose the no-op.
#[test]
fn a_claim_in_a_later_view_without_f_plus_1_pre_prepares_does_not_override() {
    let s = mac_setup();
    let a = s.batch(0, 1..3);
    let noop = Batch::noop();
    let honest1 = vc(&s, 1, 2, vec![claim(&s, 0, 0, 0, &a)], vec![q(0, &a, 0)]);
    let honest2 = vc(&s, 2, 2, vec![claim(&s, 0, 0, 0, &a)], vec![q(0, &a, 0)]);
    let honest0 = vc(&s, 0, 2, vec![], vec![q(0, &a, 0)]);
    let liar = vc(&s, 3, 2, vec![claim(&s, 3, 1, 0, &noop)], vec![q(0, &noop, 1)]);
    verify_view_change(&s.cfg, &liar).expect("the lie is well-formed and validly signed");
    // Three with the liar: the no-op passes A1 but not A2; `a` fails A1.
    let three = vec![liar.clone(), honest1.clone(), honest2.clone()];
    assert_eq!(plan_new_view(&s.cfg, &three), None);
    let four = vec![liar, honest1, honest2, honest0];
    let plan = plan_new_view(&s.cfg, &four).expect("decidable with every view change");
    assert_eq!(plan.reproposals.len(), 1);
    assert_eq!(plan.reproposals[0].digest, a.digest());
    // The same claims with signed prepares' rule would take the no-op.
    let mut sig_cfg = (*s.cfg).clone();
    sig_cfg.params.prepare_auth = PrepareAuth::Signature;
    let naive = plan_new_view(&sig_cfg, &four).expect("always decidable");
    assert_eq!(naive.reproposals[0].digest, Batch::noop_digest());
}

#[test]
fn null_only_when_2f_plus_1_claim_nothing_and_a_lone_claim_with_f_plus_1_pre_prepares_wins() {
    let s = mac_setup();
    let a = s.batch(0, 1..3);
    let empty = |r| vc(&s, r, 1, vec![], vec![]);
    // 2f+1 claim nothing at slot 0, one claims `a` without support: null.
    let lone = vc(&s, 3, 1, vec![claim(&s, 0, 0, 0, &a)], vec![q(0, &a, 0)]);
    let plan = plan_new_view(&s.cfg, &[lone.clone(), empty(0), empty(1), empty(2)]).expect("B holds");
    assert_eq!(plan.reproposals[0].digest, Batch::noop_digest());
    // One more replica pre-prepared `a`: A1 and A2 hold, and `a` is kept
    // (it may have committed at the claimant: prepared with f+1 behind it).
    let backer = vc(&s, 2, 1, vec![], vec![q(0, &a, 0)]);
    let plan = plan_new_view(&s.cfg, &[lone, empty(0), empty(1), backer]).expect("A1 and A2 hold");
    assert_eq!(plan.reproposals[0].digest, a.digest());
}

#[test]
fn a_backup_refuses_an_undecidable_new_view() {
    let s = mac_setup();
    let a = s.batch(0, 1..3);
    let b = s.batch(1, 1..2);
    let liar = vc(&s, 0, 1, vec![claim(&s, 0, 0, 0, &b)], vec![q(0, &b, 0)]);
    let r1 = vc(&s, 1, 1, vec![claim(&s, 0, 0, 0, &a)], vec![q(0, &a, 0)]);
    let r2v = vc(&s, 2, 1, vec![claim(&s, 0, 0, 0, &a)], vec![q(0, &a, 0)]);
    let mut nv = NewView {
        lane: L0,
        view: View(1),
        view_changes: vec![r1, liar, r2v],
        reproposals: vec![chorus_core::Reproposal {
            slot: Slot(0),
            digest: a.digest(),
        }],
        replica: ReplicaId(1),
        sig: Signature([0; 64]),
        excluded: vec![],
    };
    nv.sig = s.sign(1, SigKind::NewView, &nv.signing_digest());
    let mut r2 = replica(&s, 2);
    msg(&mut r2, 1, 1, ReplicaMsg::NewView(nv));
    assert_eq!(r2.counters().rejected("nv-undecided"), 1);
}

#[test]
fn view_change_claims_are_checked_for_form() {
    let s = mac_setup();
    let a = s.batch(0, 1..3);
    // Unordered Q entries.
    let b = s.batch(1, 1..2);
    let (lo, hi) = if a.digest() < b.digest() {
        (&a, &b)
    } else {
        (&b, &a)
    };
    let bad = vc(&s, 2, 1, vec![], vec![q(0, hi, 0), q(0, lo, 0)]);
    assert_eq!(verify_view_change(&s.cfg, &bad), Err("vc-pre-prepared-unordered"));
    // A Q entry from the view asked for.
    let bad = vc(&s, 2, 1, vec![], vec![q(0, &a, 1)]);
    assert_eq!(
        verify_view_change(&s.cfg, &bad),
        Err("vc-pre-prepared-future-view")
    );
    // Outside the window.
    let bad = vc(&s, 2, 1, vec![], vec![q(s.cfg.params.window_slots, &a, 0)]);
    assert_eq!(
        verify_view_change(&s.cfg, &bad),
        Err("vc-pre-prepared-out-of-window")
    );
    // Prepares inside a MAC-mode claim.
    let mut c = claim(&s, 0, 0, 0, &a);
    c.prepares = vec![s.prepare(2, 0, 0, 0, a.digest())];
    let bad = vc(&s, 2, 1, vec![c], vec![]);
    assert_eq!(verify_view_change(&s.cfg, &bad), Err("cert-unsigned-prepares"));
    // Q entries under signed prepares.
    let mut sig_cfg = (*s.cfg).clone();
    sig_cfg.params.prepare_auth = PrepareAuth::Signature;
    let bad = vc(&s, 2, 1, vec![], vec![q(0, &a, 0)]);
    assert_eq!(
        verify_view_change(&sig_cfg, &bad),
        Err("vc-unexpected-pre-prepared")
    );
}

/// Review of 2026-11-26: A2 once also counted a Q set full of higher views
/// (it may have evicted the candidate's entry). Such a supporter need not
/// have pre-prepared the candidate: the Byzantine z claimed a batch nobody
/// holds, c0's full set backed it, and every NEW-VIEW re-proposed it and
/// stalled fetching it. Now the slot is a no-op.
#[test]
fn a_claim_backed_only_by_a_full_q_set_is_not_reproposed() {
    let s = mac_setup();
    let garbage = s.batch(1, 1..2);
    let mut full: Vec<PrePrepared> = (4..8).map(|v| q(0, &s.batch(0, v * 10..v * 10 + 1), v)).collect();
    full.sort_by_key(|e| e.digest);
    let c0 = vc(&s, 0, 9, vec![], full);
    let c1 = vc(&s, 1, 9, vec![], vec![]);
    let c2 = vc(&s, 2, 9, vec![], vec![]);
    let z = vc(
        &s,
        3,
        9,
        vec![claim(&s, 3, 2, 0, &garbage)],
        vec![q(0, &garbage, 2)],
    );
    for set in [vec![c1.clone(), c0.clone(), z.clone()], vec![c1, c0, z, c2]] {
        let plan = plan_new_view(&s.cfg, &set);
        assert!(
            plan.as_ref()
                .is_none_or(|p| p.reproposals[0].digest == Batch::noop_digest()),
            "{plan:?}"
        );
    }
}

/// The first review's stall: c1 prepared `d` in view 1; c2 and c3
/// pre-prepared it too, then four fresh batches in views 2–5, evicting `d`
/// from their Q sets; z claims another batch. A2 for `d` fails, and c1's
/// claim used to block B for ever. c2 and c3 (f+1) moved on past view 1,
/// so `d` did not commit there: both old claims read as none, B holds.
#[test]
fn a_claim_that_f_plus_1_moved_on_from_is_read_as_none() {
    let s = mac_setup();
    let d = s.batch(0, 1..2);
    let y = s.batch(1, 1..2);
    let mut full: Vec<PrePrepared> = (2..6).map(|v| q(0, &s.batch(0, v * 10..v * 10 + 1), v)).collect();
    full.sort_by_key(|e| e.digest);
    let c1 = vc(&s, 1, 6, vec![claim(&s, 0, 1, 0, &d)], vec![q(0, &d, 1)]);
    let c2 = vc(&s, 2, 6, vec![], full.clone());
    let c3 = vc(&s, 3, 6, vec![], full);
    let z = vc(&s, 0, 6, vec![claim(&s, 0, 1, 0, &y)], vec![q(0, &y, 1)]);
    let plan = plan_new_view(&s.cfg, &[c1, c2, c3, z]).expect("decidable with every view change");
    assert_eq!(plan.reproposals[0].digest, Batch::noop_digest());
}

/// f view changes that say they moved on (the Byzantine ones, say) refute
/// nothing: `d`, prepared by c1 and backed by c2, is kept.
#[test]
fn f_later_pre_prepares_do_not_refute_a_claim() {
    let s = mac_setup();
    let d = s.batch(0, 1..2);
    let x = s.batch(1, 1..2);
    let c1 = vc(&s, 1, 6, vec![claim(&s, 0, 1, 0, &d)], vec![q(0, &d, 1)]);
    let c2 = vc(&s, 2, 6, vec![], vec![q(0, &d, 1)]);
    let z = vc(&s, 3, 6, vec![claim(&s, 3, 5, 0, &x)], vec![q(0, &x, 5)]);
    let c0 = vc(&s, 0, 6, vec![], vec![]);
    let plan = plan_new_view(&s.cfg, &[c1, c2, z, c0]).expect("decidable");
    assert_eq!(plan.reproposals[0].digest, d.digest());
}

#[test]
fn the_q_set_keeps_the_highest_views_and_their_batches() {
    use crate::lane::slot::SlotState;
    let s = mac_setup();
    let mut st = SlotState::default();
    let batches: Vec<Batch> = (0..6).map(|k| s.batch(0, k * 10..k * 10 + 1)).collect();
    for (view, b) in batches.iter().enumerate() {
        st.store_batch(b.digest(), std::sync::Arc::new(b.clone()));
        st.note_pre_prepared(b.digest(), View(view as u64));
    }
    let mut views: Vec<u64> = st.pre_prepared.iter().map(|(_, v)| v.0).collect();
    views.sort_unstable();
    assert_eq!(views, vec![2, 3, 4, 5]);
    for (d, _) in &st.pre_prepared {
        assert!(st.batch(d).is_some(), "a Q digest's batch is kept");
    }
    // A lower view than all kept ones is not added.
    st.note_pre_prepared(batches[0].digest(), View(1));
    assert!(!st.pre_prepared.iter().any(|(d, _)| *d == batches[0].digest()));
}

/// Review of 2026-11-26: a re-proposal may rest on one (Byzantine) P claim
/// and correct replicas' Q entries; the new primary without the batch asks
/// the P claimant first, then the Q claimants, then everyone.
#[test]
fn a_missing_reproposed_batch_is_fetched_from_q_claimants_too() {
    let s = mac_setup();
    let a = s.batch(0, 1..3);
    let mut r1 = replica(&s, 1);
    let z = vc(&s, 0, 1, vec![claim(&s, 0, 0, 0, &a)], vec![q(0, &a, 0)]);
    let c2 = vc(&s, 2, 1, vec![], vec![q(0, &a, 0)]);
    msg(&mut r1, 10, 0, ReplicaMsg::ViewChange(z));
    let out = msg(&mut r1, 11, 2, ReplicaMsg::ViewChange(c2));
    let nv = new_views(&out);
    assert_eq!(nv.len(), 1, "{out:?}");
    assert_eq!(nv[0].reproposals[0].digest, a.digest());
    let fetches = |actions: &[Action]| -> Vec<u32> {
        actions
            .iter()
            .filter_map(|x| match x {
                Action::Send {
                    to,
                    msg: ReplicaMsg::FetchBatch(_),
                } => Some(to.0),
                _ => None,
            })
            .collect()
    };
    assert_eq!(fetches(&out), vec![0]);
    let interval = s.cfg.params.status_interval_ms;
    let mut targets = Vec::new();
    for k in 1..=3 {
        let mut o = Outbox::new();
        r1.handle(Millis(11 + k * interval), Event::Timer(TimerId::Status), &mut o);
        targets.extend(fetches(&effects(&mut o)));
    }
    assert_eq!(
        targets,
        vec![2, 0, 2],
        "then the Q claimant, then everyone in turn"
    );
}
