//! Issue 8, finding 10: every replica message a correct replica can send must
//! fit the limits it is received under, at every n and window. These tests
//! build the largest VIEW-CHANGE, NEW-VIEW, pre-prepare and state chunk a
//! configuration allows (every window slot prepared, every certificate full,
//! every integer in its longest varint form) and decode them with the limits
//! receivers apply (`Limits::from_config`, the same the node, the simulator and
//! `Replica` use). With a fixed 64 KiB (simulator) or 16 MiB (default) frame
//! limit the NEW-VIEWs at n = 13 and n = 31 are refused.

use bytes::Bytes;
use chorus_core::*;

/// The simulator's parameters (`chorus-sim` `SimOptions::params`): a small
/// window, a 64 KiB configured frame limit.
fn sim_params(pillars: u32) -> ProtocolParams {
    let per_lane_checkpoint = 4;
    ProtocolParams {
        mode: OrderingMode::Cop,
        pillars,
        batch_max_requests: 4,
        batch_max_bytes: 4 * 1024,
        window_slots: 3 * per_lane_checkpoint,
        checkpoint_interval: per_lane_checkpoint * pillars as u64,
        max_lane_drift_slots: 2 * per_lane_checkpoint,
        max_op_bytes: 512,
        max_frame_bytes: 64 * 1024,
        state_chunk_bytes: 1024,
        ..ProtocolParams::default()
    }
}

fn config(n: usize, params: ProtocolParams) -> ClusterConfig {
    let (c, _, _) = ClusterConfig::for_testing(n, 1, params, 7);
    c.validate().expect("valid configuration");
    c
}

const SIG: Signature = Signature([0xab; 64]);
const DIGEST: Digest = Digest([0xcd; 32]);
// Longest varint forms: what a long-lived lane could reach (larger than any
// real view or slot, so the messages below dominate every real one).
const VIEW: View = View(u64::MAX);
const SLOT: u64 = u64::MAX - 1_000_000;

fn prepared_cert(lane: LaneId, slot: Slot, prepares: usize) -> PreparedCert {
    PreparedCert {
        lane,
        view: VIEW,
        slot,
        digest: DIGEST,
        pre_prepare_sig: SIG,
        prepares: (0..prepares)
            .map(|_| Prepare {
                lane,
                view: VIEW,
                slot,
                digest: DIGEST,
                replica: ReplicaId(u32::MAX),
                sig: SIG,
            })
            .collect(),
    }
}

fn checkpoint_cert(votes: usize) -> CheckpointCert {
    CheckpointCert {
        seq: Seq(u64::MAX),
        state_digest: DIGEST,
        votes: (0..votes)
            .map(|_| CheckpointVote {
                seq: Seq(u64::MAX),
                state_digest: DIGEST,
                replica: ReplicaId(u32::MAX),
                sig: SIG,
            })
            .collect(),
    }
}

/// A VIEW-CHANGE with every window slot prepared, each certificate holding
/// `prepares` prepares, and a stable checkpoint with `votes` votes.
fn view_change(c: &ClusterConfig, prepares: usize, votes: usize) -> ViewChange {
    let lane = LaneId(u32::MAX);
    ViewChange {
        lane,
        new_view: VIEW,
        stable: Some(checkpoint_cert(votes)),
        prepared: (0..c.params.window_slots)
            .map(|i| prepared_cert(lane, Slot(SLOT + i), prepares))
            .collect(),
        // The most Q claims `Validate` admits (`PrepareAuth::Mac`).
        pre_prepared: (0..c.params.window_slots)
            .flat_map(|i| {
                (0..chorus_core::MAX_PRE_PREPARED_PER_SLOT).map(move |k| chorus_core::PrePrepared {
                    slot: Slot(SLOT + i),
                    digest: Digest([0xff - k as u8; 32]),
                    view: View(u64::MAX),
                })
            })
            .collect(),
        replica: ReplicaId(u32::MAX),
        sig: SIG,
    }
}

fn new_view(c: &ClusterConfig, view_changes: usize, prepares: usize, votes: usize) -> NewView {
    let vc = view_change(c, prepares, votes);
    NewView {
        lane: vc.lane,
        view: VIEW,
        view_changes: vec![vc; view_changes],
        reproposals: (0..c.params.window_slots)
            .map(|i| Reproposal {
                slot: Slot(SLOT + i),
                digest: DIGEST,
            })
            .collect(),
        replica: ReplicaId(u32::MAX),
        sig: SIG,
        // As many exclusions as `Validate` admits (n), each at its longest.
        excluded: (0..c.n())
            .map(|_| Exclusion {
                replica: ReplicaId(u32::MAX),
                failures: u32::MAX,
                until: Slot(u64::MAX),
            })
            .collect(),
    }
}

/// A batch at every limit: as many requests as allowed, operations filling the
/// batch's byte budget, a full MAC vector on each.
fn max_batch(l: &Limits) -> Batch {
    let mut left = l.max_batch_bytes;
    let requests = (0..l.max_batch_requests)
        .map(|_| {
            let op = left.min(l.max_op_bytes);
            left -= op;
            Request {
                memo: Default::default(),
                client: ClientId(u64::MAX),
                seq: RequestSeq(u64::MAX),
                // The largest flags value a receiver accepts.
                flags: flags::SWITCH_INSTANCE,
                op: Bytes::from(vec![0x5a; op]),
                auth: Authenticator::Macs(std::sync::Arc::new(vec![Mac([0xee; 16]); l.n])),
            }
        })
        .collect();
    Batch {
        requests,
        time_ms: u64::MAX,
    }
}

/// Encode `msg` and decode it as a receiver does; return its size.
fn received_size(msg: ReplicaMsg, l: &Limits) -> u64 {
    let bytes = encode(&msg);
    let kind = msg.kind();
    match decode::<ReplicaMsg>(&bytes, l) {
        Ok(back) => assert!(back == msg, "{kind} changed on the way"),
        Err(e) => panic!("a receiver refuses the largest {kind} at n = {}: {e}", l.n),
    }
    bytes.len() as u64
}

fn check_config(c: &ClusterConfig) {
    let l = Limits::from_config(c);
    let b = WireBounds::of_config(c);
    let (n, quorum) = (c.n(), c.quorum());

    // What a correct new-view primary sends (PBFT §4.4): 2f+1 VIEW-CHANGEs,
    // every window slot prepared by n-1 replicas (all but the proposer), every
    // checkpoint certificate signed by all n.
    let vc = view_change(c, n - 1, n);
    received_size(ReplicaMsg::ViewChange(vc), &l);
    received_size(ReplicaMsg::NewView(new_view(c, quorum, n - 1, n)), &l);

    // The most `Validate` admits (what a correct replica may relay): the
    // bound is exact for these, so it is also sound for every smaller one.
    let vc = view_change(c, n, n);
    assert_eq!(received_size(ReplicaMsg::ViewChange(vc), &l), b.view_change);
    let nv = new_view(c, n, n, n);
    assert_eq!(received_size(ReplicaMsg::NewView(nv), &l), b.new_view);

    // A full pre-prepare (re-proposed after the NEW-VIEW) and a full chunk.
    let pp = ReplicaMsg::PrePrepare(PrePrepare {
        lane: LaneId(u32::MAX),
        view: VIEW,
        slot: Slot(SLOT),
        digest: DIGEST,
        batch: max_batch(&l),
        sig: SIG,
    });
    assert!(received_size(pp, &l) <= b.pre_prepare);
    let chunk = ReplicaMsg::StateChunk(StateChunk {
        cert: checkpoint_cert(n),
        index: u32::MAX - 1,
        count: u32::MAX,
        data: Bytes::from(vec![0x11; l.max_chunk_bytes]),
    });
    assert_eq!(received_size(chunk, &l), b.state_chunk);
    // A bundle with an entry for every lane there may be.
    let lanes = (0..n.max(MAX_PILLARS as usize))
        .map(|i| LaneProgress {
            lane: LaneId(u32::MAX - 1 - (n.max(MAX_PILLARS as usize) - 1 - i) as u32),
            view: VIEW,
            next_undecided: Slot(SLOT),
            suspects: true,
            awaits_new_view: false,
        })
        .collect();
    let bundle = ReplicaMsg::Statuses(StatusBundle {
        stable_seq: Seq(u64::MAX),
        lanes,
    });
    assert_eq!(received_size(bundle, &l), b.status_bundle);
    assert!(b.largest_replica_msg() <= l.max_frame_bytes as u64);
}

#[test]
fn largest_messages_fit_at_n13_with_the_simulator_window() {
    // `chorus sim --mode cop --pillars 2 --n 13 --seed 2000005` saw a 68 573
    // byte NEW-VIEW against a 65 536 byte limit.
    check_config(&config(13, sim_params(2)));
}

#[test]
fn largest_messages_fit_at_n31_with_the_simulator_window() {
    check_config(&config(31, sim_params(4)));
}

#[test]
fn largest_messages_fit_at_n13_with_the_default_window() {
    check_config(&config(13, ProtocolParams::default()));
}

#[test]
fn largest_messages_fit_at_n31_with_the_default_window() {
    // 2f+1 = 21 VIEW-CHANGEs × 256 certificates × 30 prepares: ~21 MB, above
    // the default 16 MiB frame limit.
    check_config(&config(31, ProtocolParams::default()));
}

#[test]
fn the_derived_limit_never_lowers_the_configured_one() {
    for n in [1, 4, 7] {
        let c = config(n, ProtocolParams::default());
        let l = Limits::from_config(&c);
        assert_eq!(l.max_frame_bytes, c.params.max_frame_bytes as usize);
        assert_eq!(Limits::from_params(&c), l);
    }
}

#[test]
fn senders_see_oversized_messages() {
    let c = config(13, sim_params(2));
    let mut l = Limits::from_config(&c);
    let nv = ReplicaMsg::NewView(new_view(&c, c.quorum(), c.n() - 1, c.n()));
    assert!(encode_within(&nv, &l).is_ok());
    l.max_frame_bytes = 65_536;
    assert!(matches!(
        encode_within(&nv, &l),
        Err(CodecError::TooLarge { max: 65_536, .. })
    ));
}
