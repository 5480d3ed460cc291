//! A request's content digest, computed once per request instead of once per
//! use.
//!
//! A replica named each 512-byte request by its digest four times (the
//! pillar's authenticator check, the pool, the batch digest, the executor's
//! client table), about 1 µs of blake3 each on dev-2c: with the frame MACs,
//! 30 % of a replica's CPU at saturation (BENCHMARKS.md, 2026-11-27 "a
//! request's digest once"). The request carries the digest from its first
//! use on, through moves, clones into batches and the `Arc` the executor
//! shares.
//!
//! Soundness does not rest on nobody changing a request after its digest
//! was taken (the fields are public, and tests and the simulator's
//! adversaries do change them): the memo keeps the fields it hashed, and an
//! answer is reused only while the request still holds exactly those
//! (`op` compared by its buffer, which the memo keeps alive, or by content).
//! Only this crate fills a memo, always with the digest it just computed.

use crate::crypto::Digest;
use crate::ids::{ClientId, RequestSeq};
use bytes::Bytes;
use std::sync::{Arc, OnceLock};

/// Not part of the request: never encoded, equal in every request, and
/// invisible in `Debug` (the fuzz tests compare a replica's `Debug` before
/// and after a rejected message).
// Behind an `Arc`: a request stays small (the pool, batches and the
// simulator hold many) and a clone shares the memo instead of copying it.
#[derive(Clone, Default)]
pub struct DigestMemo(OnceLock<Arc<Memo>>);

struct Memo {
    client: ClientId,
    seq: RequestSeq,
    flags: u8,
    op: Bytes,
    digest: Digest,
}

impl DigestMemo {
    /// A memo that already holds `digest`, just computed by the caller from
    /// exactly these fields.
    pub(crate) fn filled(
        client: ClientId,
        seq: RequestSeq,
        flags: u8,
        op: &Bytes,
        digest: Digest,
    ) -> DigestMemo {
        let memo = DigestMemo::default();
        let _ = memo.0.set(Arc::new(Memo {
            client,
            seq,
            flags,
            op: op.clone(),
            digest,
        }));
        memo
    }

    /// The digest of these fields: remembered if they are the ones hashed
    /// before, else `compute()` (remembered if nothing was yet; a request
    /// changed after its first digest recomputes every time).
    pub(crate) fn get_or_compute(
        &self,
        client: ClientId,
        seq: RequestSeq,
        flags: u8,
        op: &Bytes,
        compute: impl Fn() -> Digest,
    ) -> Digest {
        match self.0.get() {
            Some(m) if m.client == client && m.seq == seq && m.flags == flags && same_bytes(&m.op, op) => {
                debug_assert_eq!(m.digest, compute(), "a remembered request digest went stale");
                m.digest
            }
            Some(_) => compute(),
            None => {
                let digest = compute();
                let _ = self.0.set(Arc::new(Memo {
                    client,
                    seq,
                    flags,
                    op: op.clone(),
                    digest,
                }));
                digest
            }
        }
    }

    /// Take `other`'s digest if this memo has none: a backup's copy of a
    /// request it already holds (the client sent it to every replica) need
    /// not be hashed again. Sound whatever `other` hashed: the digest is
    /// used only while this request's fields equal the ones it came from.
    pub fn adopt(&self, other: &DigestMemo) {
        if let Some(m) = other.0.get() {
            let _ = self.0.set(m.clone());
        }
    }

    /// Whether a digest is remembered (tests).
    pub fn is_filled(&self) -> bool {
        self.0.get().is_some()
    }
}

/// The same buffer (immutable while the memo holds it) or the same content.
fn same_bytes(a: &Bytes, b: &Bytes) -> bool {
    (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || a[..] == b[..]
}

impl PartialEq for DigestMemo {
    fn eq(&self, _: &DigestMemo) -> bool {
        true
    }
}

impl Eq for DigestMemo {}

impl std::fmt::Debug for DigestMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("_")
    }
}

#[cfg(test)]
mod tests {
    use crate::request::{Authenticator, Batch, Request};
    use crate::{decode, encode, ClientId, Limits, RequestSeq};
    use bytes::Bytes;

    fn request(op: &'static [u8]) -> Request {
        Request {
            memo: Default::default(),
            client: ClientId(3),
            seq: RequestSeq(7),
            flags: 0,
            op: Bytes::from_static(op),
            auth: Authenticator::Macs(std::sync::Arc::new(vec![crate::Mac([0; 16]); 4])),
        }
    }

    fn fresh(r: &Request) -> crate::Digest {
        Request::content_digest(r.client, r.seq, r.flags, &r.op)
    }

    #[test]
    fn the_memo_adds_at_most_two_words_to_a_request() {
        assert!(std::mem::size_of::<super::DigestMemo>() <= 16);
    }

    #[test]
    fn a_digest_is_remembered_and_travels_with_clones_and_batches() {
        let r = request(b"put x 1");
        assert!(!r.memo.is_filled());
        let d = r.digest();
        assert!(r.memo.is_filled());
        assert_eq!(d, fresh(&r));
        let batch = Batch {
            requests: vec![r.clone()],
            time_ms: 0,
        };
        assert!(batch.requests[0].memo.is_filled(), "a clone keeps the digest");
    }

    /// Tests and the simulator's adversaries change requests after their
    /// digest was taken: every field the digest covers is checked.
    #[test]
    fn a_request_changed_after_its_digest_gets_the_digest_of_what_it_holds() {
        let base = request(b"put x 1");
        let _ = base.digest();
        let changes: [fn(&mut Request); 4] = [
            |r| r.op = Bytes::from_static(b"put x 2"),
            |r| r.seq = RequestSeq(8),
            |r| r.client = ClientId(4),
            |r| r.flags = crate::flags::READ_ONLY,
        ];
        for change in changes {
            let mut r = base.clone();
            change(&mut r);
            assert_ne!(r.digest(), base.digest());
            assert_eq!(r.digest(), fresh(&r));
        }
        // The same content in another buffer is the same request.
        let mut same = base.clone();
        same.op = Bytes::from(b"put x 1".to_vec());
        assert_eq!(same.digest(), base.digest());
    }

    #[test]
    fn the_memo_is_not_encoded_and_a_decoded_request_hashes_its_own_bytes() {
        let hashed = request(b"put x 1");
        let _ = hashed.digest();
        let bytes = encode(&hashed);
        assert_eq!(
            bytes,
            encode(&request(b"put x 1")),
            "the wire format is unchanged"
        );
        let (cfg, _, _) = crate::ClusterConfig::for_testing(4, 1, crate::ProtocolParams::default(), 1);
        let back: Request = decode(&bytes, &Limits::from_config(&cfg)).unwrap();
        assert!(!back.memo.is_filled());
        assert_eq!(back, hashed);
        assert_eq!(back.digest(), hashed.digest());
    }

    #[test]
    fn an_adopted_digest_is_used_only_for_the_same_content() {
        let held = request(b"put x 1");
        let _ = held.digest();
        let copy = request(b"put x 1");
        copy.memo.adopt(&held.memo);
        assert!(copy.memo.is_filled());
        assert_eq!(copy.digest(), held.digest());
        // A proposal that names the request but carries another operation.
        let forged = request(b"put x 9");
        forged.memo.adopt(&held.memo);
        assert_eq!(forged.digest(), fresh(&forged));
        assert_ne!(forged.digest(), held.digest());
    }
}
