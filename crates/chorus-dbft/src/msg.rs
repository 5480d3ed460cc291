//! DBFT wire messages (spec §7). Every message is bounded by the
//! configuration: indices below n, rounds in `1..=max_round`, batches within
//! the batch limits. The sender never travels in the payload (P11): it is the
//! authenticated link's `from`.

use crate::config::DbftConfig;
use crate::counters::DropReason;
use chorus_core::{Batch, CodecError, Digest, Limits, ReplicaId, Validate};
use serde::{Deserialize, Serialize};

pub type Epoch = u64;
/// Binary-consensus rounds start at 1 (P7).
pub type Round = u32;

/// Binary instance `slot` (= proposer index) of epoch `epoch`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InstanceId {
    pub epoch: Epoch,
    pub slot: ReplicaId,
}

/// A non-empty subset of {0,1}. Being an enum, an empty or out-of-range set
/// cannot be decoded at all.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum BinSet {
    Zero,
    One,
    Both,
}

impl BinSet {
    pub fn single(v: bool) -> BinSet {
        if v {
            BinSet::One
        } else {
            BinSet::Zero
        }
    }

    /// The set `{v : bins[v]}`; None when empty.
    pub fn from_flags(bins: [bool; 2]) -> Option<BinSet> {
        match bins {
            [false, false] => None,
            [true, false] => Some(BinSet::Zero),
            [false, true] => Some(BinSet::One),
            [true, true] => Some(BinSet::Both),
        }
    }

    pub fn contains(self, v: bool) -> bool {
        matches!(
            (self, v),
            (BinSet::Both, _) | (BinSet::One, true) | (BinSet::Zero, false)
        )
    }

    /// ⊆ the set given as flags (the §3.5 qualification filter).
    pub fn subset_of(self, bins: [bool; 2]) -> bool {
        (!self.contains(false) || bins[0]) && (!self.contains(true) || bins[1])
    }
}

/// The binary-consensus part of the protocol, one instance per (epoch, slot).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BinMsg {
    /// EST and BV echoes (§2).
    BVal { round: Round, value: bool },
    /// Weak-coordinator suggestion; counts only from coord(round) (P5).
    Coord { round: Round, value: bool },
    /// One per round per sender, first wins (P3, P13).
    Aux { round: Round, values: BinSet },
    /// Definite termination (§3.8).
    Decided { value: bool },
}

impl BinMsg {
    pub fn round(&self) -> Option<Round> {
        match self {
            BinMsg::BVal { round, .. } | BinMsg::Coord { round, .. } | BinMsg::Aux { round, .. } => {
                Some(*round)
            }
            BinMsg::Decided { .. } => None,
        }
    }

    /// The catch-up "mini-round" of this message (§3.7): B_VAL and COORD of
    /// round r belong to 2r−1, AUX of round r to 2r.
    pub fn mini_round(&self) -> Option<u64> {
        match self {
            BinMsg::BVal { round, .. } | BinMsg::Coord { round, .. } => {
                Some((2 * u64::from(*round)).saturating_sub(1))
            }
            BinMsg::Aux { round, .. } => Some(2 * u64::from(*round)),
            BinMsg::Decided { .. } => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DbftMsg {
    /// Sent only by the proposer (= link sender); the only message with batch bytes.
    RbInit {
        epoch: Epoch,
        batch: Batch,
    },
    /// Hash-only echo of `proposer`'s INIT (\[RB21\], Dispel §4.4).
    RbEcho {
        epoch: Epoch,
        proposer: ReplicaId,
        digest: Digest,
    },
    /// Hash-only READY.
    RbReady {
        epoch: Epoch,
        proposer: ReplicaId,
        digest: Digest,
    },
    /// Ask for the bytes of a delivered digest (§5.3).
    BatchRequest {
        epoch: Epoch,
        proposer: ReplicaId,
        digest: Digest,
    },
    /// Accepted only if its digest is one this replica asked for (§5.3).
    BatchResponse {
        epoch: Epoch,
        proposer: ReplicaId,
        batch: Batch,
    },
    Bin {
        inst: InstanceId,
        msg: BinMsg,
    },
}

impl DbftMsg {
    pub fn epoch(&self) -> Epoch {
        match self {
            DbftMsg::RbInit { epoch, .. }
            | DbftMsg::RbEcho { epoch, .. }
            | DbftMsg::RbReady { epoch, .. }
            | DbftMsg::BatchRequest { epoch, .. }
            | DbftMsg::BatchResponse { epoch, .. } => *epoch,
            DbftMsg::Bin { inst, .. } => inst.epoch,
        }
    }

    /// Every message but the two that carry a batch: what senders coalesce
    /// into bundles (a batch goes alone and at once).
    pub fn is_small(&self) -> bool {
        !matches!(self, DbftMsg::RbInit { .. } | DbftMsg::BatchResponse { .. })
    }

    pub fn kind(&self) -> &'static str {
        match self {
            DbftMsg::RbInit { .. } => "rb-init",
            DbftMsg::RbEcho { .. } => "rb-echo",
            DbftMsg::RbReady { .. } => "rb-ready",
            DbftMsg::BatchRequest { .. } => "batch-request",
            DbftMsg::BatchResponse { .. } => "batch-response",
            DbftMsg::Bin {
                msg: BinMsg::BVal { .. },
                ..
            } => "bval",
            DbftMsg::Bin {
                msg: BinMsg::Coord { .. },
                ..
            } => "coord",
            DbftMsg::Bin {
                msg: BinMsg::Aux { .. },
                ..
            } => "aux",
            DbftMsg::Bin {
                msg: BinMsg::Decided { .. },
                ..
            } => "decided",
        }
    }

    /// Structural checks that need only the configuration (spec §7 table,
    /// "all" row, and batch size limits). Window checks need engine state and
    /// happen in the engine.
    pub fn check(&self, cfg: &DbftConfig) -> Result<(), DropReason> {
        let idx_ok = |r: &ReplicaId| (r.0 as usize) < cfg.n;
        match self {
            DbftMsg::RbInit { batch, .. } | DbftMsg::BatchResponse { batch, .. } => {
                if let DbftMsg::BatchResponse { proposer, .. } = self {
                    if !idx_ok(proposer) {
                        return Err(DropReason::BadIndex);
                    }
                }
                batch
                    .validate(&cfg.limits())
                    .map_err(|_| DropReason::BatchTooLarge)
            }
            DbftMsg::RbEcho { proposer, .. }
            | DbftMsg::RbReady { proposer, .. }
            | DbftMsg::BatchRequest { proposer, .. } => {
                if idx_ok(proposer) {
                    Ok(())
                } else {
                    Err(DropReason::BadIndex)
                }
            }
            DbftMsg::Bin { inst, msg } => {
                if !idx_ok(&inst.slot) {
                    return Err(DropReason::BadIndex);
                }
                match msg.round() {
                    Some(0) => Err(DropReason::BadRound),
                    Some(r) if r > cfg.max_round => Err(DropReason::RoundOutOfWindow),
                    _ => Ok(()),
                }
            }
        }
    }
}

/// Most messages one bundle carries (P14: bounded).
pub const MAX_BUNDLE_MSGS: usize = 4_096;

/// Upper bound on the encoding of one small message ([`DbftMsg::is_small`]):
/// tag bytes, an epoch (≤ 10-byte varint), a proposer or slot (≤ 5), a
/// digest (32) and a round or value: under 60 bytes. A bundle of k small
/// messages is at most `5 + 64 k` bytes, which is how senders keep bundles
/// inside the frame limit (`DbftBundle::max_small_for`).
pub const SMALL_MSG_MAX_BYTES: usize = 64;

/// Several DBFT messages in one frame: one MAC, one decode, one event for
/// the receiver, instead of one each. DBFT sends O(n) small votes per
/// instance and n instances per epoch, so an epoch is O(n³) messages; a
/// replica that coalesces what it sends per peer pays per frame O(n²) per
/// epoch (issue 15: Dispel at n ≥ 64). The messages are handled in order,
/// exactly as if they had arrived one by one (the engine assumes reliable,
/// not FIFO, links; coalescing only delays).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DbftBundle(pub Vec<DbftMsg>);

/// The encoding of a `DbftBundle` from a borrowed slice (same bytes).
#[derive(Serialize)]
struct BundleRef<'a>(&'a [DbftMsg]);

impl DbftBundle {
    /// The largest encoding of a bundle of more than one message: only
    /// small messages travel together.
    pub const MAX_MULTI_BYTES: usize = 5 + MAX_BUNDLE_MSGS * SMALL_MSG_MAX_BYTES;

    /// The message count a bundle's bytes announce (its postcard length
    /// prefix), read without decoding the rest; None if it is malformed.
    pub fn peek_len(bytes: &[u8]) -> Option<usize> {
        let mut len: u64 = 0;
        for (i, b) in bytes.iter().take(5).enumerate() {
            len |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return usize::try_from(len).ok();
            }
        }
        None
    }

    /// What a receiver refuses before decoding: more messages than any
    /// sender bundles, or a multi-message bundle longer than small messages
    /// can make (decoding it first would cost the receiver for nothing).
    pub fn precheck(bytes: &[u8]) -> Result<(), CodecError> {
        match Self::peek_len(bytes) {
            None => Err(CodecError::Invalid("dbft bundle length")),
            Some(k) if k > MAX_BUNDLE_MSGS => Err(CodecError::Invalid("dbft bundle too long")),
            Some(k) if k > 1 && bytes.len() > Self::MAX_MULTI_BYTES => {
                Err(CodecError::Invalid("dbft bundle too large"))
            }
            Some(_) => Ok(()),
        }
    }

    pub fn encode(msgs: &[DbftMsg]) -> Vec<u8> {
        debug_assert!(!msgs.is_empty() && msgs.len() <= MAX_BUNDLE_MSGS);
        chorus_core::encode(&BundleRef(msgs))
    }

    /// Small messages a bundle may carry inside `max_frame_bytes`.
    pub fn max_small_for(max_frame_bytes: usize) -> usize {
        (max_frame_bytes.saturating_sub(16) / SMALL_MSG_MAX_BYTES).clamp(1, MAX_BUNDLE_MSGS)
    }
}

/// Decoding support: empty or oversized bundles are refused, a batch
/// (INIT, fetch answer) travels alone, as senders send it, so one frame
/// costs a receiver at most one batch's verification, and every message is
/// checked as alone.
impl Validate for DbftBundle {
    fn validate(&self, l: &Limits) -> Result<(), CodecError> {
        if self.0.is_empty() {
            return Err(CodecError::Invalid("empty dbft bundle"));
        }
        if self.0.len() > MAX_BUNDLE_MSGS {
            return Err(CodecError::Invalid("dbft bundle too long"));
        }
        if self.0.len() > 1 && !self.0.iter().all(DbftMsg::is_small) {
            return Err(CodecError::Invalid("dbft batch bundled with other messages"));
        }
        self.0.iter().try_for_each(|m| m.validate(l))
    }
}

impl DbftConfig {
    /// The codec limits this configuration implies (for `Batch::validate`).
    pub fn limits(&self) -> Limits {
        Limits {
            max_frame_bytes: usize::MAX,
            max_op_bytes: self.max_op_bytes,
            max_batch_requests: self.max_batch_requests,
            max_batch_bytes: self.max_batch_bytes,
            n: self.n,
            window_slots: self.window_epochs as usize,
            max_chunk_bytes: 0,
            max_result_bytes: 0,
        }
    }
}

/// Decoding support: `chorus_core::decode::<DbftMsg>` bounds what it accepts
/// by the same rules, using only what `Limits` knows (n and batch bounds).
impl Validate for DbftMsg {
    fn validate(&self, l: &Limits) -> Result<(), CodecError> {
        let idx_ok = |r: &ReplicaId| (r.0 as usize) < l.n;
        let bad = |why| Err(CodecError::Invalid(why));
        match self {
            DbftMsg::RbInit { batch, .. } => batch.validate(l),
            DbftMsg::BatchResponse { proposer, batch, .. } => {
                if !idx_ok(proposer) {
                    return bad("proposer out of range");
                }
                batch.validate(l)
            }
            DbftMsg::RbEcho { proposer, .. }
            | DbftMsg::RbReady { proposer, .. }
            | DbftMsg::BatchRequest { proposer, .. } => {
                if idx_ok(proposer) {
                    Ok(())
                } else {
                    bad("proposer out of range")
                }
            }
            DbftMsg::Bin { inst, msg } => {
                if !idx_ok(&inst.slot) {
                    return bad("slot out of range");
                }
                if msg.round() == Some(0) {
                    return bad("round 0");
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binset_algebra() {
        assert!(BinSet::Both.contains(true) && BinSet::Both.contains(false));
        assert!(BinSet::One.subset_of([false, true]));
        assert!(!BinSet::Both.subset_of([false, true]));
        assert!(BinSet::Zero.subset_of([true, true]));
        assert_eq!(BinSet::from_flags([false, false]), None);
        assert_eq!(BinSet::from_flags([true, true]), Some(BinSet::Both));
    }

    #[test]
    fn codec_rejects_out_of_range_and_round_zero() {
        let cfg = DbftConfig::new(4);
        let l = cfg.limits();
        let m = DbftMsg::Bin {
            inst: InstanceId {
                epoch: 0,
                slot: ReplicaId(4),
            },
            msg: BinMsg::Decided { value: true },
        };
        assert!(chorus_core::decode::<DbftMsg>(&chorus_core::encode(&m), &l).is_err());
        let m = DbftMsg::Bin {
            inst: InstanceId {
                epoch: 0,
                slot: ReplicaId(1),
            },
            msg: BinMsg::BVal {
                round: 0,
                value: true,
            },
        };
        assert!(chorus_core::decode::<DbftMsg>(&chorus_core::encode(&m), &l).is_err());
        let m = DbftMsg::Bin {
            inst: InstanceId {
                epoch: 0,
                slot: ReplicaId(1),
            },
            msg: BinMsg::Aux {
                round: 3,
                values: BinSet::Both,
            },
        };
        assert_eq!(
            chorus_core::decode::<DbftMsg>(&chorus_core::encode(&m), &l).unwrap(),
            m
        );
        // An invalid BinSet tag (3) cannot be decoded: empty sets never reach the protocol.
        let mut bytes = chorus_core::encode(&m);
        let last = bytes.len() - 1;
        bytes[last] = 3;
        assert!(chorus_core::decode::<DbftMsg>(&bytes, &l).is_err());
    }

    /// The bound senders size bundles by holds for the largest small message
    /// of every kind, and a full bundle fits its frame.
    #[test]
    fn small_messages_stay_under_the_bundle_bound() {
        let big = |_| -> Vec<DbftMsg> {
            let (epoch, p, d) = (u64::MAX, ReplicaId(u32::MAX), Digest::of(b"x"));
            let inst = InstanceId { epoch, slot: p };
            vec![
                DbftMsg::RbEcho {
                    epoch,
                    proposer: p,
                    digest: d,
                },
                DbftMsg::RbReady {
                    epoch,
                    proposer: p,
                    digest: d,
                },
                DbftMsg::BatchRequest {
                    epoch,
                    proposer: p,
                    digest: d,
                },
                DbftMsg::Bin {
                    inst,
                    msg: BinMsg::BVal {
                        round: u32::MAX,
                        value: true,
                    },
                },
                DbftMsg::Bin {
                    inst,
                    msg: BinMsg::Coord {
                        round: u32::MAX,
                        value: true,
                    },
                },
                DbftMsg::Bin {
                    inst,
                    msg: BinMsg::Aux {
                        round: u32::MAX,
                        values: BinSet::Both,
                    },
                },
                DbftMsg::Bin {
                    inst,
                    msg: BinMsg::Decided { value: true },
                },
            ]
        };
        for m in big(()) {
            assert!(m.is_small());
            assert!(chorus_core::encode(&m).len() <= SMALL_MSG_MAX_BYTES, "{m:?}");
        }
        for frame in [64 * 1024, 16 << 20, 100] {
            let k = DbftBundle::max_small_for(frame);
            let msgs: Vec<DbftMsg> = big(()).into_iter().cycle().take(k).collect();
            let bytes = DbftBundle::encode(&msgs);
            assert!(
                bytes.len() <= frame.max(SMALL_MSG_MAX_BYTES + 16),
                "{frame}: {}",
                bytes.len()
            );
        }
    }

    #[test]
    fn bundles_round_trip_and_refuse_empty_and_bad_members() {
        let l = DbftConfig::new(4).limits();
        let inst = InstanceId {
            epoch: 3,
            slot: ReplicaId(1),
        };
        let ok = DbftMsg::Bin {
            inst,
            msg: BinMsg::BVal {
                round: 1,
                value: true,
            },
        };
        let bytes = DbftBundle::encode(&[ok.clone(), ok.clone()]);
        assert_eq!(
            chorus_core::decode::<DbftBundle>(&bytes, &l).unwrap(),
            DbftBundle(vec![ok.clone(), ok.clone()])
        );
        assert!(chorus_core::decode::<DbftBundle>(&chorus_core::encode(&DbftBundle(vec![])), &l).is_err());
        let bad = DbftMsg::Bin {
            inst: InstanceId {
                epoch: 3,
                slot: ReplicaId(4),
            },
            msg: BinMsg::Decided { value: true },
        };
        let bytes = chorus_core::encode(&DbftBundle(vec![ok, bad]));
        assert!(chorus_core::decode::<DbftBundle>(&bytes, &l).is_err());
    }

    /// No correct sender bundles a batch with anything, nor more than
    /// `MAX_BUNDLE_MSGS` messages: a receiver refuses both, the count and
    /// the size before decoding.
    #[test]
    fn bundles_no_sender_makes_are_refused() {
        let l = DbftConfig::new(4).limits();
        let init = DbftMsg::RbInit {
            epoch: 1,
            batch: chorus_core::Batch::noop(),
        };
        let echo = DbftMsg::RbEcho {
            epoch: 1,
            proposer: ReplicaId(2),
            digest: Digest::of(b"x"),
        };
        assert!(
            chorus_core::decode::<DbftBundle>(&DbftBundle::encode(std::slice::from_ref(&init)), &l).is_ok()
        );
        let two_inits = chorus_core::encode(&DbftBundle(vec![init.clone(), init.clone()]));
        assert!(chorus_core::decode::<DbftBundle>(&two_inits, &l).is_err());
        let mixed = chorus_core::encode(&DbftBundle(vec![echo.clone(), init]));
        assert!(chorus_core::decode::<DbftBundle>(&mixed, &l).is_err());
        // The announced count alone refuses an oversized bundle.
        let many = chorus_core::encode(&DbftBundle(vec![echo.clone(); MAX_BUNDLE_MSGS + 1]));
        assert_eq!(DbftBundle::peek_len(&many), Some(MAX_BUNDLE_MSGS + 1));
        assert!(DbftBundle::precheck(&many).is_err());
        assert!(DbftBundle::precheck(&DbftBundle::encode(&vec![echo; MAX_BUNDLE_MSGS])).is_ok());
        // Two messages announced, but far more bytes than two small ones.
        let mut padded = vec![2u8];
        padded.resize(DbftBundle::MAX_MULTI_BYTES + 1, 0);
        assert!(DbftBundle::precheck(&padded).is_err());
        assert!(
            DbftBundle::precheck(&[0xff; 6]).is_err(),
            "a length that never ends"
        );
    }
}
