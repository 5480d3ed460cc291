//! The wire codec: postcard (compact, varint, serde) plus a size check before
//! decoding, a trailing-bytes check after it, and a semantic `Validate` pass
//! that bounds every vector by the configured limits. Decoding is total: any
//! byte string yields either a value that respects the limits or a typed error.

use crate::config::{ClusterConfig, MAX_PILLARS};
use crate::messages::*;
use crate::reprediction::MAX_REPREDICTION_PARTITIONS;
use crate::request::{flags, Authenticator, Batch, Reply, ReplyBody, Request};
use crate::wire_bounds::{WireBounds, MAX_FRAME_BYTES_CAP};
use serde::de::DeserializeOwned;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    TooLarge { len: usize, max: usize },
    #[error("malformed: {0}")]
    Malformed(String),
    #[error("{0} trailing bytes after the message")]
    TrailingBytes(usize),
    #[error("empty input")]
    Empty,
    #[error("invalid: {0}")]
    Invalid(&'static str),
}

/// Bounds for decoded messages, derived from the cluster configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_frame_bytes: usize,
    pub max_op_bytes: usize,
    pub max_batch_requests: usize,
    pub max_batch_bytes: usize,
    /// Number of replicas: bounds MAC vectors, vote and view-change sets.
    pub n: usize,
    /// Bounds prepared certificates and re-proposals (one per window slot).
    pub window_slots: usize,
    pub max_chunk_bytes: usize,
    pub max_result_bytes: usize,
}

impl Limits {
    /// The limits replicas receive under. The frame limit is the configured
    /// `max_frame_bytes`, raised to the largest replica message `Validate`
    /// admits for this configuration (`WireBounds`), so no message a correct
    /// replica sends is refused for its size at any n or window (issue 8,
    /// finding 10). Still a bound: capped at `MAX_FRAME_BYTES_CAP`, and
    /// `ClusterConfig::validate` rejects configurations that would need more.
    pub fn from_config(c: &ClusterConfig) -> Limits {
        let mut l = Limits::from_params(c);
        let needed = WireBounds::of_limits(&l)
            .largest_replica_msg()
            .min(MAX_FRAME_BYTES_CAP);
        l.max_frame_bytes = l.max_frame_bytes.max(needed as usize);
        l
    }

    /// The configured values as they are, frame limit included (what client
    /// connections use: clients send requests, never certificates).
    pub fn from_params(c: &ClusterConfig) -> Limits {
        let p = &c.params;
        Limits {
            max_frame_bytes: p.max_frame_bytes as usize,
            max_op_bytes: p.max_op_bytes as usize,
            max_batch_requests: p.batch_max_requests as usize,
            // A batch may exceed the soft cut size by one request.
            max_batch_bytes: p.batch_max_bytes as usize + p.max_op_bytes as usize,
            n: c.n(),
            window_slots: p.window_slots as usize,
            max_chunk_bytes: p.state_chunk_bytes as usize,
            max_result_bytes: p.max_frame_bytes as usize / 2,
        }
    }
}

/// Encode a message a replica is about to send and check it against the frame
/// limit its peers receive under. An oversized message is a bug in the sender
/// (every message `Validate` admits fits, see `wire_bounds`): callers count it
/// and fail loudly rather than let the transport drop it silently.
pub fn encode_within<T: Serialize>(v: &T, limits: &Limits) -> Result<Vec<u8>, CodecError> {
    // Sized before anything is allocated: an oversized message costs no buffer.
    let len = encoded_len(v);
    if len > limits.max_frame_bytes {
        return Err(CodecError::TooLarge {
            len,
            max: limits.max_frame_bytes,
        });
    }
    Ok(encode_sized(v, len))
}

pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    // Sized first, then written into one allocation of exactly that size:
    // postcard's `to_allocvec` grows its Vec from empty one byte at a time,
    // and those reallocations were most of what encoding a reply cost a
    // replica at peak (`_mi_theap_realloc_zero` under `ExecThread::reply`,
    // BENCHMARKS.md 2026-11-28 "encoding into one allocation"); a
    // 600-byte request grew through eight of them at the client. The size
    // pass writes nothing and copies no byte strings.
    encode_sized(v, encoded_len(v))
}

/// `encode(v)`, whose length `encoded_len(v)` is `len`.
fn encode_sized<T: Serialize>(v: &T, len: usize) -> Vec<u8> {
    // Serializing our own types into a Vec cannot fail (no maps with non-string keys,
    // no sequences of unknown length).
    let out = postcard::to_extend(v, Vec::with_capacity(len))
        .expect("postcard encoding of chorus types is infallible");
    debug_assert_eq!(out.len(), len, "postcard's size pass and its encoding disagree");
    out
}

/// `encode(v).len()` without building the bytes (the simulator's resource
/// model sizes every message it sends).
pub fn encoded_len<T: Serialize>(v: &T) -> usize {
    postcard::serialize_with_flavor(v, postcard::ser_flavors::Size::default())
        .expect("postcard encoding of chorus types is infallible")
}

/// Decode exactly one `T` from `bytes`, enforcing `limits`.
pub fn decode<T: DeserializeOwned + Validate>(bytes: &[u8], limits: &Limits) -> Result<T, CodecError> {
    if bytes.is_empty() {
        return Err(CodecError::Empty);
    }
    if bytes.len() > limits.max_frame_bytes {
        return Err(CodecError::TooLarge {
            len: bytes.len(),
            max: limits.max_frame_bytes,
        });
    }
    let (v, rest): (T, &[u8]) =
        postcard::take_from_bytes(bytes).map_err(|e| CodecError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(CodecError::TrailingBytes(rest.len()));
    }
    v.validate(limits)?;
    Ok(v)
}

/// Semantic bounds a decoded value must respect.
pub trait Validate {
    fn validate(&self, l: &Limits) -> Result<(), CodecError>;
}

fn check(cond: bool, reason: &'static str) -> Result<(), CodecError> {
    if cond {
        Ok(())
    } else {
        Err(CodecError::Invalid(reason))
    }
}

impl Validate for Request {
    fn validate(&self, l: &Limits) -> Result<(), CodecError> {
        check(self.op.len() <= l.max_op_bytes, "operation too large")?;
        if self.is_reprediction() {
            // A system request: exactly the flag, the certificate as the
            // operation, no client authenticator.
            check(
                self.flags == flags::REPREDICTION,
                "re-prediction with other flags",
            )?;
            return check(
                self.auth == Authenticator::Macs(Default::default()),
                "re-prediction with an authenticator",
            );
        }
        check(self.flags & !flags::KNOWN == 0, "unknown request flags")?;
        // A switch is ordered (it changes the assignment table): never a read.
        check(
            self.flags & (flags::READ_ONLY | flags::SWITCH_INSTANCE)
                != flags::READ_ONLY | flags::SWITCH_INSTANCE,
            "read-only switch request",
        )?;
        if let Authenticator::Macs(m) = &self.auth {
            check(m.len() == l.n, "MAC vector length differs from n")?;
        }
        Ok(())
    }
}

impl Validate for Batch {
    fn validate(&self, l: &Limits) -> Result<(), CodecError> {
        check(
            self.requests.len() <= l.max_batch_requests,
            "batch has too many requests",
        )?;
        check(self.op_bytes() <= l.max_batch_bytes, "batch too large")?;
        self.requests.iter().try_for_each(|r| r.validate(l))
    }
}

impl Validate for Reply {
    fn validate(&self, l: &Limits) -> Result<(), CodecError> {
        match &self.body {
            ReplyBody::Full(b) => check(b.len() <= l.max_result_bytes, "result too large"),
            ReplyBody::Rejected(s) => check(s.len() <= 1024, "rejection reason too long"),
            ReplyBody::Digest(_) | ReplyBody::Busy => Ok(()),
        }
    }
}

impl Validate for CheckpointCert {
    fn validate(&self, l: &Limits) -> Result<(), CodecError> {
        check(self.votes.len() <= l.n, "too many checkpoint votes")
    }
}

impl Validate for PreparedCert {
    fn validate(&self, l: &Limits) -> Result<(), CodecError> {
        check(self.prepares.len() <= l.n, "too many prepares in certificate")
    }
}

impl Validate for ViewChange {
    fn validate(&self, l: &Limits) -> Result<(), CodecError> {
        check(
            self.prepared.len() <= l.window_slots,
            "too many prepared certificates",
        )?;
        check(
            self.pre_prepared.len() <= l.window_slots.saturating_mul(crate::MAX_PRE_PREPARED_PER_SLOT),
            "too many pre-prepared claims",
        )?;
        if let Some(c) = &self.stable {
            c.validate(l)?;
        }
        self.prepared.iter().try_for_each(|p| p.validate(l))
    }
}

impl Validate for NewView {
    fn validate(&self, l: &Limits) -> Result<(), CodecError> {
        check(self.view_changes.len() <= l.n, "too many view changes")?;
        check(self.reproposals.len() <= l.window_slots, "too many re-proposals")?;
        check(self.excluded.len() <= l.n, "too many exclusions")?;
        self.view_changes.iter().try_for_each(|v| v.validate(l))
    }
}

impl Validate for ReplicaMsg {
    fn validate(&self, l: &Limits) -> Result<(), CodecError> {
        match self {
            ReplicaMsg::PrePrepare(m) => m.batch.validate(l),
            ReplicaMsg::BatchReply(m) => m.batch.validate(l),
            ReplicaMsg::ViewChange(m) => m.validate(l),
            ReplicaMsg::NewView(m) => m.validate(l),
            ReplicaMsg::StateChunk(m) => {
                check(m.data.len() <= l.max_chunk_bytes, "state chunk too large")?;
                check(m.count > 0 && m.index < m.count, "bad chunk index")?;
                m.cert.validate(l)
            }
            // The inner `DbftBundle` is decoded and bounded by the receiver.
            ReplicaMsg::Dbft(m) => check(m.bytes.len() <= l.max_frame_bytes, "dbft message too large"),
            // At most one entry per lane (lanes are n under RCC, at most
            // MAX_PILLARS otherwise), in ascending lane order.
            ReplicaMsg::Statuses(m) => check(
                !m.lanes.is_empty()
                    && m.lanes.len() <= l.n.max(MAX_PILLARS as usize)
                    && m.lanes.windows(2).all(|w| w[0].lane < w[1].lane),
                "bad status bundle",
            ),
            ReplicaMsg::Checkpoint(_)
            | ReplicaMsg::Prepare(_)
            | ReplicaMsg::Commit(_)
            | ReplicaMsg::Status(_)
            | ReplicaMsg::Decided(_)
            | ReplicaMsg::FetchBatch(_)
            | ReplicaMsg::StateRequest(_)
            | ReplicaMsg::Timeout(_)
            | ReplicaMsg::Unverifiable(_) => Ok(()),
            ReplicaMsg::RePredict(v) => check(
                v.body.partitions.len() <= MAX_REPREDICTION_PARTITIONS
                    && v.body.added.len() <= MAX_REPREDICTION_PARTITIONS,
                "re-prediction names too many partitions",
            ),
        }
    }
}

impl Validate for ClientMsg {
    fn validate(&self, l: &Limits) -> Result<(), CodecError> {
        match self {
            ClientMsg::Request(r) | ClientMsg::Resend(r) => r.validate(l),
            ClientMsg::Reply(r) => r.validate(l),
            ClientMsg::StatusQuery | ClientMsg::ViewQuery => Ok(()),
            // Lanes are pillars (≤ MAX_PILLARS) or replicas (rcc, dispel).
            ClientMsg::Views(v) => check(v.len() <= 4096, "too many views"),
            ClientMsg::StatusReport(s) => check(s.len() <= 1 << 20, "status report too large"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{Digest, Identity};
    use crate::ids::*;
    use crate::ProtocolParams;
    use bytes::Bytes;
    use proptest::prelude::*;

    fn limits() -> Limits {
        let (c, _, _) = ClusterConfig::for_testing(4, 1, ProtocolParams::default(), 1);
        Limits::from_config(&c)
    }

    fn sample_msgs() -> Vec<ReplicaMsg> {
        let id = Identity::from_seed(b"x");
        let keys: Vec<_> = (0..4u8)
            .map(|i| id.pairwise_key(&Identity::from_seed(&[i]).public()))
            .collect();
        let req = Request::with_macs(
            &crate::ClusterTag::from_digest(Digest::of(b"cluster")),
            ClientId(1),
            RequestSeq(1),
            0,
            Bytes::from_static(b"put k v"),
            &keys,
        );
        let batch = Batch {
            requests: vec![req],
            time_ms: 1_700_000_000_123,
        };
        let d = batch.digest();
        let sig = id.sign(b"m");
        vec![
            ReplicaMsg::PrePrepare(PrePrepare {
                lane: LaneId(1),
                view: View(2),
                slot: Slot(3),
                digest: d,
                batch: batch.clone(),
                sig,
            }),
            ReplicaMsg::Prepare(Prepare {
                lane: LaneId(0),
                view: View(0),
                slot: Slot(9),
                digest: d,
                replica: ReplicaId(2),
                sig,
            }),
            ReplicaMsg::Checkpoint(CheckpointVote {
                seq: Seq(128),
                state_digest: Digest::of(b"s"),
                replica: ReplicaId(1),
                sig,
            }),
            ReplicaMsg::BatchReply(BatchReply {
                lane: LaneId(0),
                slot: Slot(1),
                batch,
            }),
        ]
    }

    /// Review of SWITCHINSTANCE, finding 6: the flag combination that
    /// means nothing is refused at decode, before any replica state sees it.
    #[test]
    fn a_read_only_switch_does_not_decode() {
        let id = Identity::from_seed(b"x");
        let keys: Vec<_> = (0..4u8)
            .map(|i| id.pairwise_key(&Identity::from_seed(&[i]).public()))
            .collect();
        let tag = crate::ClusterTag::from_digest(Digest::of(b"cluster"));
        let make = |flags| {
            Request::with_macs(
                &tag,
                ClientId(1),
                RequestSeq(1),
                flags,
                Bytes::from_static(b"\x01\0\0\0"),
                &keys,
            )
        };
        let l = limits();
        assert!(make(crate::flags::SWITCH_INSTANCE).validate(&l).is_ok());
        assert!(make(crate::flags::READ_ONLY).validate(&l).is_ok());
        let both = make(crate::flags::READ_ONLY | crate::flags::SWITCH_INSTANCE);
        assert!(both.validate(&l).is_err());
        assert!(decode::<ClientMsg>(&encode(&ClientMsg::Request(both)), &l).is_err());
    }

    /// Leader-first view questions and answers travel as they are; an
    /// answer with more views than any cluster has lanes is refused.
    #[test]
    fn view_questions_and_answers_roundtrip_within_bounds() {
        let l = limits();
        for msg in [
            ClientMsg::ViewQuery,
            ClientMsg::Views(vec![]),
            ClientMsg::Views(vec![0, 7, u64::MAX]),
            ClientMsg::StatusQuery,
        ] {
            assert_eq!(decode::<ClientMsg>(&encode(&msg), &l).unwrap(), msg);
        }
        let too_many = ClientMsg::Views(vec![1; 4097]);
        assert!(decode::<ClientMsg>(&encode(&too_many), &l).is_err());
    }

    /// Issue 17: the batch time travels on the wire and is under the digest
    /// a pre-prepare names, so it is agreed like the requests.
    #[test]
    fn a_batch_time_roundtrips_and_is_covered_by_the_digest() {
        let l = limits();
        let ReplicaMsg::PrePrepare(pp) = &sample_msgs()[0] else {
            panic!("the first sample is a pre-prepare");
        };
        let timed = pp.batch.clone();
        assert_ne!(timed.time_ms, 0);
        let decoded = decode::<ReplicaMsg>(&encode(&sample_msgs()[0]), &l).unwrap();
        let ReplicaMsg::PrePrepare(back) = decoded else {
            panic!("not a pre-prepare");
        };
        assert_eq!(back.batch.time_ms, timed.time_ms);
        assert_eq!(back.batch.digest(), timed.digest());
        let untimed = Batch::new(timed.requests.clone(), 0);
        assert_ne!(
            untimed.digest(),
            timed.digest(),
            "the time is not under the digest"
        );
        assert_ne!(encode(&untimed), encode(&timed));
        let later = Batch::new(timed.requests.clone(), timed.time_ms + 1);
        assert_ne!(later.digest(), timed.digest());
    }

    #[test]
    fn roundtrip() {
        let l = limits();
        for m in sample_msgs() {
            let bytes = encode(&m);
            assert_eq!(decode::<ReplicaMsg>(&bytes, &l).unwrap(), m);
        }
    }

    #[test]
    fn encoded_len_is_the_length_of_the_encoding() {
        for m in sample_msgs() {
            assert_eq!(encoded_len(&m), encode(&m).len(), "{m:?}");
        }
    }

    #[test]
    fn encode_writes_postcards_bytes_into_one_exact_allocation() {
        let l = limits();
        for m in sample_msgs() {
            let bytes = encode(&m);
            assert_eq!(bytes, postcard::to_allocvec(&m).unwrap(), "{m:?}");
            assert_eq!(bytes.capacity(), bytes.len(), "{m:?}");
            assert_eq!(encode_within(&m, &l).unwrap(), bytes);
        }
        let tight = Limits {
            max_frame_bytes: encoded_len(&sample_msgs()[0]) - 1,
            ..l
        };
        assert_eq!(
            encode_within(&sample_msgs()[0], &tight),
            Err(CodecError::TooLarge {
                len: tight.max_frame_bytes + 1,
                max: tight.max_frame_bytes
            })
        );
    }

    #[test]
    fn truncated_trailing_oversized_and_empty_are_typed_errors() {
        let l = limits();
        let bytes = encode(&sample_msgs()[0]);
        for cut in 0..bytes.len() {
            assert!(decode::<ReplicaMsg>(&bytes[..cut], &l).is_err());
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert_eq!(
            decode::<ReplicaMsg>(&extra, &l),
            Err(CodecError::TrailingBytes(1))
        );
        assert_eq!(decode::<ReplicaMsg>(&[], &l), Err(CodecError::Empty));
        let big = vec![0u8; l.max_frame_bytes + 1];
        assert!(matches!(
            decode::<ReplicaMsg>(&big, &l),
            Err(CodecError::TooLarge { .. })
        ));
        // Unknown enum variant.
        assert!(matches!(
            decode::<ReplicaMsg>(&[200], &l),
            Err(CodecError::Malformed(_))
        ));
    }

    #[test]
    fn limits_are_enforced_after_decoding() {
        let mut l = limits();
        let bytes = encode(&sample_msgs()[0]);
        l.n = 3; // MAC vector now has the wrong length
        assert!(matches!(
            decode::<ReplicaMsg>(&bytes, &l),
            Err(CodecError::Invalid(_))
        ));
        let mut l = limits();
        l.max_op_bytes = 3;
        assert!(matches!(
            decode::<ReplicaMsg>(&bytes, &l),
            Err(CodecError::Invalid(_))
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let l = limits();
            let _ = decode::<ReplicaMsg>(&bytes, &l);
            let _ = decode::<ClientMsg>(&bytes, &l);
        }

        #[test]
        fn mutated_messages_never_panic(idx in 0usize..4, pos in any::<prop::sample::Index>(), val in any::<u8>()) {
            let l = limits();
            let mut bytes = encode(&sample_msgs()[idx]);
            let p = pos.index(bytes.len());
            bytes[p] = val;
            let _ = decode::<ReplicaMsg>(&bytes, &l);
        }
    }
}
