//! Fuzz-style: random and mutated messages never panic a replica, and a
//! message the replica rejects leaves its status unchanged.

use super::util::{params, setup, Setup};
use crate::io::{Event, Outbox};
use crate::replica::{Replica, ReplicaStatus};
use chorus_core::{
    decode, encode, Batch, BatchReply, Decided, Digest, FetchBatch, LaneId, Limits, Millis, NewView,
    OrderingMode, ReplicaId, ReplicaMsg, Seq, Signature, Slot, StateChunk, StateRequest, Status, View,
    ViewChange,
};
use proptest::prelude::*;
use std::sync::OnceLock;

fn fixture() -> &'static (Setup, Vec<ReplicaMsg>) {
    static F: OnceLock<(Setup, Vec<ReplicaMsg>)> = OnceLock::new();
    F.get_or_init(|| {
        let s = setup(4, 2, params(OrderingMode::Cop, 2));
        let a = s.batch(0, 1..3);
        let d = a.digest();
        let cert = s.prepared_cert(0, 0, 0, 0, &a, &[1, 2]);
        let mut vc = ViewChange {
            lane: LaneId(0),
            new_view: View(1),
            stable: None,
            prepared: vec![cert],
            replica: ReplicaId(2),
            sig: Signature([0; 64]),
        };
        vc.sig = s.sign(2, chorus_core::SigKind::ViewChange, &vc.signing_digest());
        let mut nv = NewView {
            lane: LaneId(0),
            view: View(1),
            view_changes: vec![vc.clone()],
            reproposals: vec![],
            replica: ReplicaId(1),
            sig: Signature([0; 64]),
            excluded: Vec::new(),
        };
        nv.sig = s.sign(1, chorus_core::SigKind::NewView, &nv.signing_digest());
        let ckpt = s.checkpoint_cert(4, Digest::of(b"s"), &[0, 1, 2]);
        let msgs = vec![
            ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &a)),
            ReplicaMsg::Prepare(s.prepare(2, 0, 0, 0, d)),
            ReplicaMsg::Commit(s.commit(2, 0, 0, 0, d)),
            ReplicaMsg::Checkpoint(s.vote(2, 4, Digest::of(b"s"))),
            ReplicaMsg::ViewChange(vc),
            ReplicaMsg::NewView(nv),
            ReplicaMsg::Status(Status {
                lane: LaneId(1),
                view: View(0),
                next_undecided: Slot(0),
                stable_seq: Seq(0),
                suspects: false,
            }),
            ReplicaMsg::Decided(Decided {
                lane: LaneId(0),
                slot: Slot(0),
                digest: d,
            }),
            ReplicaMsg::FetchBatch(FetchBatch {
                lane: LaneId(0),
                slot: Slot(0),
                digest: d,
            }),
            ReplicaMsg::BatchReply(BatchReply {
                lane: LaneId(0),
                slot: Slot(0),
                batch: a.clone(),
            }),
            ReplicaMsg::StateRequest(StateRequest { min_seq: Seq(1) }),
            ReplicaMsg::StateChunk(StateChunk {
                cert: ckpt,
                index: 0,
                count: 1,
                data: bytes::Bytes::from_static(b"state"),
            }),
            ReplicaMsg::PrePrepare(s.pre_prepare(0, 1, 0, 0, &Batch::noop())),
        ];
        (s, msgs)
    })
}

/// Replica 1 with some state: slot 0 of lane 0 accepted and prepared.
fn replica() -> Replica {
    let (s, _) = fixture();
    let mut out = Outbox::new();
    let mut r = Replica::new(
        s.cfg.clone(),
        ReplicaId(1),
        s.keys[1].clone(),
        Millis(0),
        &mut out,
    );
    let a = s.batch(0, 1..3);
    for (from, m) in [
        (0, ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &a))),
        (3, ReplicaMsg::Prepare(s.prepare(3, 0, 0, 0, a.digest()))),
    ] {
        r.handle(
            Millis(1),
            Event::Message {
                from: ReplicaId(from),
                msg: m,
            },
            &mut out,
        );
    }
    r
}

fn without_counters(mut s: ReplicaStatus) -> ReplicaStatus {
    s.counters = Default::default();
    s
}

/// Feed `msg`; if the replica rejected it, nothing else may have changed.
fn feed(r: &mut Replica, from: u32, msg: ReplicaMsg) {
    let before = r.status();
    let mut out = Outbox::new();
    r.handle(
        Millis(2),
        Event::Message {
            from: ReplicaId(from),
            msg,
        },
        &mut out,
    );
    let after = r.status();
    if after.counters.rejected_total() > before.counters.rejected_total() {
        assert_eq!(
            without_counters(after),
            without_counters(before),
            "a rejected message changed the state"
        );
    }
}

fn limits() -> Limits {
    Limits::from_config(&fixture().0.cfg)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_bytes_decoded_and_fed_never_panic(bytes in proptest::collection::vec(any::<u8>(), 1..400), from in 0u32..6) {
        if let Ok(m) = decode::<ReplicaMsg>(&bytes, &limits()) {
            let mut r = replica();
            feed(&mut r, from, m);
        }
    }

    #[test]
    fn mutated_messages_never_panic_and_rejections_change_nothing(
        idx in 0usize..13,
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        from in 0u32..5,
    ) {
        let (_, msgs) = fixture();
        let mut bytes = encode(&msgs[idx % msgs.len()]);
        for (pos, val) in flips {
            let p = pos.index(bytes.len());
            bytes[p] = val;
        }
        if let Ok(m) = decode::<ReplicaMsg>(&bytes, &limits()) {
            let mut r = replica();
            feed(&mut r, from, m);
        }
    }

    #[test]
    fn structured_garbage_never_panics(
        kind in 0u8..8,
        lane in 0u32..4,
        view in prop_oneof![Just(0u64), Just(1), any::<u64>()],
        slot in prop_oneof![0u64..40, any::<u64>()],
        replica_field in 0u32..6,
        from in 0u32..5,
        seq in any::<u64>(),
        digest in any::<[u8; 32]>(),
        idx in any::<u32>(),
        count in any::<u32>(),
    ) {
        let (s, _) = fixture();
        let d = Digest(digest);
        let m = match kind {
            0 => ReplicaMsg::Prepare(s.prepare(replica_field.min(3), lane, view, slot, d)),
            1 => {
                let mut c = s.commit(replica_field, lane, view, slot, d);
                c.lane = LaneId(lane);
                ReplicaMsg::Commit(c)
            }
            2 => ReplicaMsg::Status(Status { lane: LaneId(lane), view: View(view), next_undecided: Slot(slot), stable_seq: Seq(seq), suspects: seq % 2 == 0 }),
            3 => ReplicaMsg::Decided(Decided { lane: LaneId(lane), slot: Slot(slot), digest: d }),
            4 => ReplicaMsg::FetchBatch(FetchBatch { lane: LaneId(lane), slot: Slot(slot), digest: d }),
            5 => ReplicaMsg::StateRequest(StateRequest { min_seq: Seq(seq) }),
            6 => ReplicaMsg::StateChunk(StateChunk {
                cert: s.checkpoint_cert(seq.max(1), d, &[0, 1, 2]),
                index: idx,
                count,
                data: bytes::Bytes::from_static(b"x"),
            }),
            _ => ReplicaMsg::Checkpoint(s.vote(replica_field.min(3), seq, d)),
        };
        let mut r = replica();
        feed(&mut r, from, m);
    }
}
