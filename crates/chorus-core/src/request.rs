//! Client requests, batches and replies (DESIGN §4).

use crate::crypto::{Digest, Identity, Mac, MacKey, PublicIdentity, Signature};
use crate::digest_memo::DigestMemo;
use crate::domain::{ClusterTag, SigKind};
use crate::ids::{ClientId, ReplicaId, RequestSeq};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Request flag bits.
pub mod flags {
    /// The operation does not modify state: eligible for the read-only fast path.
    pub const READ_ONLY: u8 = 1;
    /// RCC §III-E `SWITCHINSTANCE(c, j)`: the op is the target instance `j`
    /// (u32 LE); see `crate::switch`. Only the `rcc` mode orders it.
    pub const SWITCH_INSTANCE: u8 = 2;
    /// SAREK §IV-D: a re-prediction certificate
    /// (`crate::reprediction::RePredictionCert`) ordered in an added
    /// partition's lane. A system request: the certificate authenticates
    /// it, never a client, so a client's request with this flag is refused.
    pub const REPREDICTION: u8 = 4;
    /// Only the f + 1 replicas `designated_replier` names reply when they
    /// execute the request; the others answer only its retransmission
    /// (`crate::reply_fanout`). Ignored on the read-only path, which needs
    /// 2f + 1 answers.
    pub const FEW_REPLIES: u8 = 8;
    /// The request's content digest is SHA-256 (`chorus request v2`), not
    /// BLAKE3 (`chorus request v1`): `Request::content_digest`. Part of the
    /// content, so a stored request means what it meant when it was
    /// written; `chorus-client` sets it on every request (with SHA
    /// extensions 2.5× faster for a 512-byte request; docs/decisions.md
    /// "Request digests with SHA-256").
    pub const DIGEST_SHA256: u8 = 16;
    /// Every flag a client may set; others are rejected.
    pub const KNOWN: u8 = READ_ONLY | SWITCH_INSTANCE | FEW_REPLIES | DIGEST_SHA256;
}

/// How a replica checks that a request really comes from its client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Authenticator {
    /// One MAC per replica, index = replica id (PBFT's authenticator vector).
    /// Shared, not copied, when a request is cloned: a pool, a batch and a
    /// log entry each hold the request, and at n = 100 the vector is 1.6 KB
    /// (the simulator holds every replica's copies in one process).
    Macs(Arc<Vec<Mac>>),
    /// A signature every replica can check.
    Signature(Signature),
}

/// `(client, seq, op, flags, auth)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub client: ClientId,
    pub seq: RequestSeq,
    pub flags: u8,
    pub op: Bytes,
    pub auth: Authenticator,
    /// The content digest once taken (`digest_memo.rs`): not encoded, not
    /// compared; build requests with `DigestMemo::default()` here.
    #[serde(skip)]
    pub memo: DigestMemo,
}

/// Consecutive seqs of a client that share their designated repliers.
pub const REPLY_SET_SPAN: u64 = 1024;

/// For a `FEW_REPLIES` request, the replica that sends a large result of
/// `(client, seq)` in full (the others send its digest, PBFT §5.1.1), and
/// the first of its designated repliers (`designated_replier`). Without the
/// flag the full result comes from `seq mod n`, rotating per request.
pub fn reply_start(client: ClientId, seq: RequestSeq, n: usize) -> usize {
    (client.0.wrapping_add(seq.0 / REPLY_SET_SPAN) % n as u64) as usize
}

/// `flags::FEW_REPLIES`: the f + 1 replicas from `reply_start` on reply to
/// the execution of `(client, seq)`. The first sends a large result in
/// full, so the client's f + 1 matching answers include the bytes. The set
/// is the same for `REPLY_SET_SPAN` consecutive seqs: a client then reads
/// replies from f + 1 connections only, which is where the saving is (each
/// read and wake-up carries more replies; rotating the set per request
/// measured no gain on dev-2c); clients spread the sets over the replicas.
pub fn designated_replier(
    client: ClientId,
    seq: RequestSeq,
    replica: crate::ReplicaId,
    n: usize,
    f: usize,
) -> bool {
    debug_assert!(n > 0 && f < n);
    let start = reply_start(client, seq, n);
    (replica.index() + n - start) % n <= f
}

impl Request {
    /// Does `replica` reply when it executes this request (as opposed to
    /// only when the client retransmits it)?
    pub fn replied_by(&self, replica: crate::ReplicaId, n: usize, f: usize) -> bool {
        self.flags & flags::FEW_REPLIES == 0 || designated_replier(self.client, self.seq, replica, n, f)
    }

    /// The request's identity: everything but the authenticator. The client
    /// table, batch digests and replies name a request by it. The
    /// authenticator covers it bound to the cluster
    /// (`ClusterTag::bind(SigKind::Request, ..)`), so a request authenticated
    /// for one cluster does not verify in another that shares the keys.
    pub fn content_digest(client: ClientId, seq: RequestSeq, flags: u8, op: &[u8]) -> Digest {
        static REQUEST: crate::crypto::DigestDomain = crate::crypto::DigestDomain::new("chorus request v1");
        let parts: [&[u8]; 4] = [&client.0.to_le_bytes(), &seq.0.to_le_bytes(), &[flags], op];
        if flags & flags::DIGEST_SHA256 != 0 {
            Digest::of_parts_sha256("chorus request v2", &parts)
        } else {
            Digest::of_parts_in(&REQUEST, &parts)
        }
    }

    pub fn digest(&self) -> Digest {
        self.memo
            .get_or_compute(self.client, self.seq, self.flags, &self.op, || {
                Self::content_digest(self.client, self.seq, self.flags, &self.op)
            })
    }

    /// Digest of the authenticator's encoding (two requests with equal
    /// `digest` and `auth_digest` are the same request, MACs included).
    pub fn auth_digest(&self) -> Digest {
        with_auth_bytes(&self.auth, Digest::of)
    }

    pub fn is_switch(&self) -> bool {
        self.flags & flags::SWITCH_INSTANCE != 0
    }

    pub fn is_reprediction(&self) -> bool {
        self.flags & flags::REPREDICTION != 0
    }

    pub fn is_read_only(&self) -> bool {
        self.flags & flags::READ_ONLY != 0
    }

    /// Build a request for cluster `tag` with a MAC for each replica
    /// (`keys[i]` shared with replica i).
    pub fn with_macs(
        tag: &ClusterTag,
        client: ClientId,
        seq: RequestSeq,
        flags: u8,
        op: Bytes,
        keys: &[MacKey],
    ) -> Request {
        let d = Self::content_digest(client, seq, flags, &op);
        // `MacKey::mac_bound` for each key, binding the digest to the cluster once.
        let bound = tag.bind(SigKind::Request, &d);
        let macs = keys.iter().map(|k| k.mac(bound.as_bytes())).collect();
        Request {
            memo: DigestMemo::filled(client, seq, flags, &op, d),
            client,
            seq,
            flags,
            op,
            auth: Authenticator::Macs(Arc::new(macs)),
        }
    }

    /// Build a request for cluster `tag` signed by the client's key.
    pub fn with_signature(
        tag: &ClusterTag,
        client: ClientId,
        seq: RequestSeq,
        flags: u8,
        op: Bytes,
        id: &Identity,
    ) -> Request {
        let d = Self::content_digest(client, seq, flags, &op);
        Request {
            memo: DigestMemo::filled(client, seq, flags, &op, d),
            client,
            seq,
            flags,
            op,
            auth: Authenticator::Signature(id.sign_bound(tag, SigKind::Request, &d)),
        }
    }

    /// Replica `me` checks the authenticator on its own (DESIGN §6): with its
    /// pairwise key for a MAC vector, with the client's public key for a
    /// signature; either must be bound to this replica's cluster `tag`.
    pub fn verify(&self, tag: &ClusterTag, me: ReplicaId, key: &MacKey, client_pk: &PublicIdentity) -> bool {
        if self.flags & !flags::KNOWN != 0 {
            return false;
        }
        let d = self.digest();
        match &self.auth {
            Authenticator::Macs(macs) => macs
                .get(me.index())
                .is_some_and(|m| key.verify_bound(tag, SigKind::Request, &d, m)),
            Authenticator::Signature(sig) => client_pk.verify_bound(tag, SigKind::Request, &d, sig),
        }
    }

    pub fn wire_size(&self) -> usize {
        let auth = match &self.auth {
            Authenticator::Macs(m) => m.len() * 16,
            Authenticator::Signature(_) => 64,
        };
        self.op.len() + auth + 32
    }
}

/// A batch of requests: what one cell decides. Empty = no-op.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Batch {
    pub requests: Vec<Request>,
    /// The proposer's wall clock (ms since the Unix epoch) when it built the
    /// batch; 0 = no time (no-ops, view-change fillers). Covered by
    /// `digest()`, so the time is agreed exactly like the requests; the
    /// executor turns it into the monotone `ExecContext::time_ms`.
    pub time_ms: u64,
}

impl Batch {
    pub fn new(requests: Vec<Request>, time_ms: u64) -> Batch {
        Batch { requests, time_ms }
    }

    pub fn noop() -> Batch {
        Batch::default()
    }

    pub fn is_noop(&self) -> bool {
        self.requests.is_empty()
    }

    /// The digest consensus agrees on: over each request's content digest and
    /// authenticator, so two batches with the same digest carry the same requests.
    ///
    /// The bytes are laid out in one buffer and hashed by one `update`:
    /// blake3 then compresses whole 1 KiB chunks side by side (SIMD across
    /// chunks) instead of a request's ~2 blocks at a time, one after the
    /// other (~190 ns per request before, on the core thread of every
    /// replica). The bytes, and so the digest, are what they were.
    pub fn digest(&self) -> Digest {
        let mut buf = Vec::with_capacity(16 + self.requests.len() * BATCH_DIGEST_BYTES_PER_REQUEST);
        buf.extend_from_slice(&self.time_ms.to_le_bytes());
        buf.extend_from_slice(&(self.requests.len() as u64).to_le_bytes());
        for r in &self.requests {
            buf.extend_from_slice(r.digest().as_bytes());
            append_auth_bytes(&r.auth, &mut buf);
        }
        static BATCH: crate::crypto::DigestDomain = crate::crypto::DigestDomain::new("chorus batch v2");
        let mut h = BATCH.hasher();
        h.update(&buf);
        Digest(*h.finalize().as_bytes())
    }

    pub fn noop_digest() -> Digest {
        Batch::noop().digest()
    }

    pub fn op_bytes(&self) -> usize {
        self.requests.iter().map(|r| r.op.len()).sum()
    }
}

/// A request's share of a batch digest's input with a MAC vector at n = 4:
/// its content digest, a length and the encoded authenticator.
const BATCH_DIGEST_BYTES_PER_REQUEST: usize = 32 + 8 + 72;

/// Appends the authenticator's postcard encoding, after its length as a
/// little-endian u64, to `buf`: the bytes `with_auth_bytes` hands out
/// (nothing if it cannot be encoded), written in place, so nothing is
/// zeroed or copied per request.
fn append_auth_bytes(auth: &Authenticator, buf: &mut Vec<u8>) {
    let at = buf.len();
    buf.extend_from_slice(&0u64.to_le_bytes());
    if let Authenticator::Macs(macs) = auth {
        // postcard's layout written directly (serde feeds a `[u8; 16]` to
        // the encoder a byte at a time): the variant index 0 and the length
        // as LEB128 varints, then the MACs' bytes.
        buf.push(0);
        push_varint(buf, macs.len() as u64);
        for m in macs.iter() {
            buf.extend_from_slice(&m.0);
        }
        let len = (buf.len() - at - 8) as u64;
        buf[at..at + 8].copy_from_slice(&len.to_le_bytes());
        return;
    }
    match postcard::to_extend(auth, ExtendVec(buf)) {
        Ok(_) => {
            let len = (buf.len() - at - 8) as u64;
            buf[at..at + 8].copy_from_slice(&len.to_le_bytes());
        }
        Err(_) => buf.truncate(at + 8),
    }
}

/// An unsigned LEB128 varint, as postcard encodes lengths and variant indices.
fn push_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// `Extend<u8>` for a borrowed `Vec` (postcard's `to_extend` takes its
/// writer by value).
struct ExtendVec<'a>(&'a mut Vec<u8>);

impl Extend<u8> for ExtendVec<'_> {
    fn extend<I: IntoIterator<Item = u8>>(&mut self, iter: I) {
        self.0.extend(iter)
    }
}

/// Authenticators up to this many encoded bytes are encoded on the stack
/// (a MAC vector for up to 63 replicas, any signature); the buffer is
/// zeroed per request, so it is kept small.
const AUTH_STACK_BYTES: usize = 1024;

/// `f` of the authenticator's postcard encoding, which batch digests and
/// `auth_digest` cover: on the stack where it fits, so digesting a batch
/// allocates nothing per request; the same bytes either way (postcard), and
/// empty if it cannot be encoded, as before.
fn with_auth_bytes<R>(auth: &Authenticator, f: impl FnOnce(&[u8]) -> R) -> R {
    let mut buf = [0u8; AUTH_STACK_BYTES];
    match postcard::to_slice(auth, &mut buf) {
        Ok(bytes) => f(bytes),
        Err(_) => f(&postcard::to_allocvec(auth).unwrap_or_default()),
    }
}

/// The reason in `ReplyBody::Rejected` for a request the replicas' client
/// table counts as executed but holds no reply for: the client ran more than
/// its window ahead of it (so it was treated as abandoned), or its reply was
/// evicted. It will never execute. Clients match on this exact text.
pub const REJECT_ABANDONED: &str =
    "abandoned: the client's window moved past this request (or its reply was evicted); it will not execute";

/// What a replica answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplyBody {
    /// The full result (sent by the designated replica).
    Full(Bytes),
    /// Only the result's digest (the other replicas; CBASE/PBFT digest replies).
    Digest(Digest),
    /// The pool is full or the client exceeded its share: retry later.
    Busy,
    /// The request was rejected for good (bad authenticator, oversized, …).
    Rejected(String),
}

impl ReplyBody {
    /// The digest clients compare when counting matching replies.
    pub fn result_digest(&self) -> Option<Digest> {
        match self {
            ReplyBody::Full(b) => Some(Digest::of(b)),
            ReplyBody::Digest(d) => Some(*d),
            _ => None,
        }
    }
}

/// A reply to `(client, seq)`. Authenticated by the replica–client channel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    pub client: ClientId,
    pub seq: RequestSeq,
    /// [`Request::digest`] of the request this reply answers: a client only
    /// counts replies whose digest is that of the request it sent, so a
    /// result for another operation under the same seq is never accepted.
    /// `None` only on `Busy` / `Rejected` replies from admission, which carry
    /// no result (clients ignore result-bearing replies without it).
    pub request: Option<Digest>,
    pub replica: ReplicaId,
    /// True when served by the read-only fast path without ordering.
    pub read_only: bool,
    pub body: ReplyBody,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (Identity, Vec<Identity>) {
        let c = Identity::from_seed(b"client");
        let rs = (0..4).map(|i| Identity::from_seed(&[i])).collect();
        (c, rs)
    }

    fn tag(name: &str) -> ClusterTag {
        ClusterTag::from_digest(Digest::of(name.as_bytes()))
    }

    #[test]
    fn mac_vector_verifies_at_each_replica_only() {
        let (c, rs) = setup();
        let keys: Vec<_> = rs.iter().map(|r| c.pairwise_key(&r.public())).collect();
        let req = Request::with_macs(
            &tag("a"),
            ClientId(7),
            RequestSeq(1),
            0,
            Bytes::from_static(b"op"),
            &keys,
        );
        for (i, r) in rs.iter().enumerate() {
            let k = r.pairwise_key(&c.public());
            assert!(req.verify(&tag("a"), ReplicaId(i as u32), &k, &c.public()));
        }
        let mut bad = req.clone();
        bad.op = Bytes::from_static(b"oq");
        let k0 = rs[0].pairwise_key(&c.public());
        assert!(!bad.verify(&tag("a"), ReplicaId(0), &k0, &c.public()));
        // Replica 5 has no MAC in the vector.
        assert!(!req.verify(&tag("a"), ReplicaId(5), &k0, &c.public()));
    }

    #[test]
    fn signature_auth_verifies() {
        let (c, rs) = setup();
        let req = Request::with_signature(
            &tag("a"),
            ClientId(1),
            RequestSeq(3),
            flags::READ_ONLY,
            Bytes::from_static(b"x"),
            &c,
        );
        let k = rs[0].pairwise_key(&c.public());
        assert!(req.verify(&tag("a"), ReplicaId(0), &k, &c.public()));
        assert!(!req.verify(&tag("a"), ReplicaId(0), &k, &rs[1].public()));
        let mut unknown_flag = req.clone();
        unknown_flag.flags |= 0x80;
        assert!(!unknown_flag.verify(&tag("a"), ReplicaId(0), &k, &c.public()));
    }

    #[test]
    fn a_request_authenticated_for_one_cluster_fails_in_another_with_the_same_keys() {
        let (c, rs) = setup();
        let keys: Vec<_> = rs.iter().map(|r| c.pairwise_key(&r.public())).collect();
        let op = Bytes::from_static(b"op");
        let macs = Request::with_macs(&tag("a"), ClientId(7), RequestSeq(1), 0, op.clone(), &keys);
        let signed = Request::with_signature(&tag("a"), ClientId(7), RequestSeq(1), 0, op, &c);
        let k0 = rs[0].pairwise_key(&c.public());
        for req in [&macs, &signed] {
            assert!(req.verify(&tag("a"), ReplicaId(0), &k0, &c.public()));
            assert!(!req.verify(&tag("b"), ReplicaId(0), &k0, &c.public()));
        }
    }

    #[test]
    fn batch_digest_depends_on_every_request() {
        let (c, _) = setup();
        let r = |s| {
            Request::with_signature(
                &tag("a"),
                ClientId(1),
                RequestSeq(s),
                0,
                Bytes::from_static(b"x"),
                &c,
            )
        };
        let a = Batch {
            requests: vec![r(1), r(2)],
            time_ms: 0,
        };
        let b = Batch {
            requests: vec![r(2), r(1)],
            time_ms: 0,
        };
        assert_ne!(a.digest(), b.digest());
        assert_ne!(a.digest(), Batch::noop_digest());
        assert_eq!(a.digest(), a.clone().digest());
    }

    /// Batch digests are stored and agreed on: the one-buffer layout (MAC
    /// vectors encoded by hand, signatures by postcard in place) gives the
    /// digest a field-at-a-time, heap-encoded hash gave, for signatures and
    /// MAC vectors of every size and for batches over many chunks.
    #[test]
    fn batch_digests_are_unchanged_by_the_encoding() {
        fn heap_only(b: &Batch) -> Digest {
            let mut h = blake3::Hasher::new_derive_key("chorus batch v2");
            h.update(&b.time_ms.to_le_bytes());
            h.update(&(b.requests.len() as u64).to_le_bytes());
            for r in &b.requests {
                h.update(r.digest().as_bytes());
                let auth = postcard::to_allocvec(&r.auth).unwrap();
                h.update(&(auth.len() as u64).to_le_bytes());
                h.update(&auth);
            }
            Digest(*h.finalize().as_bytes())
        }
        let (c, _) = setup();
        let mut requests = vec![Request::with_signature(
            &tag("a"),
            ClientId(1),
            RequestSeq(1),
            0,
            Bytes::from_static(b"x"),
            &c,
        )];
        // 4 … 300 replicas: the two largest do not fit on the stack.
        for (i, n) in [4usize, 7, 100, 300].into_iter().enumerate() {
            let keys: Vec<MacKey> = (0..n).map(|k| MacKey([k as u8; 32])).collect();
            requests.push(Request::with_macs(
                &tag("a"),
                ClientId(2),
                RequestSeq(i as u64 + 1),
                0,
                Bytes::from_static(b"y"),
                &keys,
            ));
        }
        let big = postcard::to_allocvec(&requests[4].auth).unwrap().len();
        assert!(big > AUTH_STACK_BYTES, "the heap path is exercised ({big} bytes)");
        for r in &requests {
            assert_eq!(
                r.auth_digest(),
                Digest::of(&postcard::to_allocvec(&r.auth).unwrap())
            );
        }
        // Many requests: the one-buffer input spans several 1 KiB chunks.
        let keys: Vec<MacKey> = (0..4).map(|k| MacKey([k as u8; 32])).collect();
        for s in 1..=300u64 {
            requests.push(Request::with_macs(
                &tag("a"),
                ClientId(3),
                RequestSeq(s),
                0,
                Bytes::from(vec![s as u8; (s as usize * 7) % 600]),
                &keys,
            ));
        }
        let batch = Batch {
            requests,
            time_ms: 42,
        };
        assert_eq!(batch.digest(), heap_only(&batch));
        assert_eq!(Batch::noop().digest(), heap_only(&Batch::noop()));
        // Pinned, so a postcard or blake3 upgrade that changed the bytes
        // fails here and not between replicas or against a store.
        assert_eq!(
            batch.digest().to_hex(),
            "55b326676da76191fc22ad7e69ed23cf3d572a45924f41b1e2a9dcafb2168bb5"
        );
        assert_eq!(
            Batch::noop_digest().to_hex(),
            "da4769fcf8187442d81280ca65d207ef241ae00db51008365049d79f171be09e"
        );
    }
}
