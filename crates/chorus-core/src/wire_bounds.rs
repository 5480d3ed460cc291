//! Upper bounds on the encoded size of every replica message that the codec's
//! `Validate` pass accepts under given `Limits`.
//!
//! Why: a NEW-VIEW carries up to n VIEW-CHANGEs, each with up to one prepared
//! certificate per window slot, each with up to n signed prepares (PBFT §4.4),
//! so its size grows with n² × window. A fixed frame limit therefore breaks the
//! view change at some n (issue 8, finding 10: 68 573 bytes against 65 536 at
//! n = 13). Instead, the frame limit replicas receive under is derived from
//! these bounds (`Limits::from_config`), which makes "every message that passes
//! `Validate` fits in a frame" true by construction. Since a correct replica
//! only sends (or relays) messages its peers' `Validate` accepts, every message
//! a correct replica sends fits the frame limit it is received under.
//!
//! The bounds are computed, not guessed: each fixed-size part is measured by
//! encoding an instance whose integers all take their longest varint form, and
//! each vector adds its longest length prefix plus its maximal element count
//! times its element bound. So the bound is exact for a maximal message and an
//! upper bound for every other one (`tests/frame_bounds.rs` checks both).

use crate::codec::{encode, Limits};
use crate::config::{ClusterConfig, MAX_PILLARS};
use crate::crypto::{Digest, Mac, Signature};
use crate::ids::{ClientId, LaneId, ReplicaId, RequestSeq, Seq, Slot, View};
use crate::messages::*;
use crate::reprediction::{RePrediction, RePredictionVote, MAX_REPREDICTION_PARTITIONS};
use crate::request::{Authenticator, Batch, Request};
use bytes::Bytes;
use serde::Serialize;

/// No configuration may need frames larger than this: the transport's length
/// prefix is a `u32`, and a replica buffers up to one frame per connection.
pub const MAX_FRAME_BYTES_CAP: u64 = 1 << 30;

/// The largest encoding (in bytes, enum tag included) of each replica message
/// kind that `Validate` accepts under some `Limits`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct WireBounds {
    /// One client request (MAC vector of n, or a signature; largest operation).
    pub request: u64,
    /// One batch, as embedded in a pre-prepare or batch reply.
    pub batch: u64,
    pub pre_prepare: u64,
    pub batch_reply: u64,
    /// One prepared certificate, as embedded in a VIEW-CHANGE.
    pub prepared_cert: u64,
    /// One checkpoint certificate, as embedded in a VIEW-CHANGE or state chunk.
    pub checkpoint_cert: u64,
    pub view_change: u64,
    pub new_view: u64,
    pub state_chunk: u64,
    /// The largest of the messages without vectors (prepare, commit, …).
    pub fixed: u64,
    /// A status bundle with an entry for every lane there may be.
    pub status_bundle: u64,
}

/// Length of `v`'s LEB128 varint, as postcard writes lengths and integers.
fn varint_len(v: u64) -> u64 {
    let bits = 64 - u64::from(v.leading_zeros());
    bits.div_ceil(7).max(1)
}

fn len<T: Serialize>(v: &T) -> u64 {
    encode(v).len() as u64
}

/// A vector of at most `count` elements of at most `elem` bytes each.
fn vec_of(count: u64, elem: u64) -> u64 {
    varint_len(count).saturating_add(count.saturating_mul(elem))
}

// Field values whose encodings are as long as the type allows.
const SIG: Signature = Signature([0xff; 64]);
const DIGEST: Digest = Digest([0xff; 32]);
const LANE: LaneId = LaneId(u32::MAX);
const REPLICA: ReplicaId = ReplicaId(u32::MAX);
const VIEW: View = View(u64::MAX);
const SLOT: Slot = Slot(u64::MAX);
const SEQ: Seq = Seq(u64::MAX);

impl WireBounds {
    pub fn of_config(c: &ClusterConfig) -> WireBounds {
        WireBounds::of_limits(&Limits::from_params(c))
    }

    /// Bounds for exactly what `Validate` admits under `l` (its frame limit
    /// aside): the counts below are the ones `codec.rs` checks.
    pub fn of_limits(l: &Limits) -> WireBounds {
        let n = l.n as u64;
        let window = l.window_slots as u64;
        // Every ReplicaMsg variant index is one varint byte (< 128 variants).
        let tag = len(&ReplicaMsg::StateRequest(StateRequest { min_seq: Seq(0) }))
            - len(&StateRequest { min_seq: Seq(0) });

        let prepare = len(&Prepare {
            lane: LANE,
            view: VIEW,
            slot: SLOT,
            digest: DIGEST,
            replica: REPLICA,
            sig: SIG,
        });
        let vote = len(&CheckpointVote {
            seq: SEQ,
            state_digest: DIGEST,
            replica: REPLICA,
            sig: SIG,
        });
        // Each `- k` below removes the k one-byte length prefixes (or the
        // `None` tag) of the empty parts the measured instance carries.
        let empty_cert = CheckpointCert {
            seq: SEQ,
            state_digest: DIGEST,
            votes: vec![],
        };
        let checkpoint_cert = (len(&empty_cert) - 1).saturating_add(vec_of(n, vote));
        let prepared_cert = (len(&PreparedCert {
            lane: LANE,
            view: VIEW,
            slot: SLOT,
            digest: DIGEST,
            pre_prepare_sig: SIG,
            prepares: vec![],
        }) - 1)
            .saturating_add(vec_of(n, prepare));
        let pre_prepared = len(&PrePrepared {
            slot: SLOT,
            digest: DIGEST,
            view: VIEW,
        });
        let view_change_body = (len(&ViewChange {
            lane: LANE,
            new_view: VIEW,
            stable: None,
            prepared: vec![],
            pre_prepared: vec![],
            replica: REPLICA,
            sig: SIG,
        }) - 3)
            .saturating_add(1 + checkpoint_cert) // `Some` tag + certificate
            .saturating_add(vec_of(window, prepared_cert))
            .saturating_add(vec_of(
                window.saturating_mul(crate::MAX_PRE_PREPARED_PER_SLOT as u64),
                pre_prepared,
            ));
        let reproposal = len(&Reproposal {
            slot: SLOT,
            digest: DIGEST,
        });
        // `Validate` admits at most n exclusions.
        let exclusion = len(&Exclusion {
            replica: REPLICA,
            failures: u32::MAX,
            until: SLOT,
        });
        let new_view_body = (len(&NewView {
            lane: LANE,
            view: VIEW,
            view_changes: vec![],
            reproposals: vec![],
            replica: REPLICA,
            sig: SIG,
            excluded: vec![],
        }) - 3)
            .saturating_add(vec_of(n, view_change_body))
            .saturating_add(vec_of(window, reproposal))
            .saturating_add(vec_of(n, exclusion));

        // A request without its operation, with the longer authenticator.
        let bare = |auth| Request {
            memo: Default::default(),
            client: ClientId(u64::MAX),
            seq: RequestSeq(u64::MAX),
            flags: u8::MAX,
            op: Bytes::new(),
            auth,
        };
        let mac = len(&Mac([0xff; 16]));
        let with_macs =
            (len(&bare(Authenticator::Macs(Default::default()))) - 1).saturating_add(vec_of(n, mac));
        let with_sig = len(&bare(Authenticator::Signature(SIG)));
        let max_op = l.max_op_bytes as u64;
        let request_overhead = (with_macs.max(with_sig) - 1).saturating_add(varint_len(max_op));
        let max_requests = l.max_batch_requests as u64;
        // Validate bounds each operation and the batch's operation bytes.
        let op_bytes = (l.max_batch_bytes as u64).min(max_requests.saturating_mul(max_op));
        let batch = vec_of(max_requests, request_overhead).saturating_add(op_bytes);
        let request = request_overhead.saturating_add(max_op);

        let pre_prepare = (len(&ReplicaMsg::PrePrepare(PrePrepare {
            lane: LANE,
            view: VIEW,
            slot: SLOT,
            digest: DIGEST,
            // The largest time: its varint is part of every batch's size.
            batch: Batch::new(vec![], u64::MAX),
            sig: SIG,
        })) - 1)
            .saturating_add(batch);
        let batch_reply = (len(&ReplicaMsg::BatchReply(BatchReply {
            lane: LANE,
            slot: SLOT,
            // The largest time: its varint is part of every batch's size.
            batch: Batch::new(vec![], u64::MAX),
        })) - 1)
            .saturating_add(batch);
        let chunk = l.max_chunk_bytes as u64;
        let state_chunk = (len(&ReplicaMsg::StateChunk(StateChunk {
            cert: empty_cert,
            index: u32::MAX,
            count: u32::MAX,
            data: Bytes::new(),
        })) - 2)
            .saturating_add(vec_of(n, vote))
            .saturating_add(varint_len(chunk).saturating_add(chunk));

        let fixed = [
            len(&ReplicaMsg::Prepare(Prepare {
                lane: LANE,
                view: VIEW,
                slot: SLOT,
                digest: DIGEST,
                replica: REPLICA,
                sig: SIG,
            })),
            len(&ReplicaMsg::Commit(Commit {
                lane: LANE,
                view: VIEW,
                slot: SLOT,
                digest: DIGEST,
                replica: REPLICA,
            })),
            len(&ReplicaMsg::Checkpoint(CheckpointVote {
                seq: SEQ,
                state_digest: DIGEST,
                replica: REPLICA,
                sig: SIG,
            })),
            len(&ReplicaMsg::Status(Status {
                lane: LANE,
                view: VIEW,
                next_undecided: SLOT,
                stable_seq: SEQ,
                suspects: true,
                awaits_new_view: false,
            })),
            len(&ReplicaMsg::Decided(Decided {
                lane: LANE,
                slot: SLOT,
                digest: DIGEST,
            })),
            len(&ReplicaMsg::FetchBatch(FetchBatch {
                lane: LANE,
                slot: SLOT,
                digest: DIGEST,
            })),
            len(&ReplicaMsg::StateRequest(StateRequest { min_seq: SEQ })),
            len(&ReplicaMsg::Timeout(Timeout {
                lane: LANE,
                view: VIEW,
                replica: REPLICA,
                sig: SIG,
            })),
            len(&ReplicaMsg::RePredict(RePredictionVote {
                body: RePrediction {
                    request: DIGEST,
                    client: ClientId(u64::MAX),
                    seq: RequestSeq(u64::MAX),
                    partitions: vec![u16::MAX; MAX_REPREDICTION_PARTITIONS],
                    added: vec![u16::MAX; MAX_REPREDICTION_PARTITIONS],
                },
                replica: REPLICA,
                sig: SIG,
            })),
        ]
        .into_iter()
        .max()
        .unwrap_or(0);

        let progress = len(&LaneProgress {
            lane: LANE,
            view: VIEW,
            next_undecided: SLOT,
            suspects: true,
            awaits_new_view: false,
        });
        let status_bundle = (len(&ReplicaMsg::Statuses(StatusBundle {
            stable_seq: SEQ,
            lanes: vec![],
        })) - 1)
            .saturating_add(vec_of(n.max(u64::from(MAX_PILLARS)), progress));

        WireBounds {
            request,
            batch,
            pre_prepare,
            batch_reply,
            prepared_cert,
            checkpoint_cert,
            view_change: tag.saturating_add(view_change_body),
            new_view: tag.saturating_add(new_view_body),
            state_chunk,
            fixed,
            status_bundle,
        }
    }

    /// The largest replica message: what a replica's frame limit must admit.
    pub fn largest_replica_msg(&self) -> u64 {
        [
            self.pre_prepare,
            self.batch_reply,
            self.view_change,
            self.new_view,
            self.state_chunk,
            self.fixed,
            self.status_bundle,
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_lengths_match_postcard() {
        for v in [0u64, 1, 127, 128, 16_383, 16_384, u32::MAX as u64, u64::MAX] {
            assert_eq!(varint_len(v), len(&v), "{v}");
        }
    }
}
