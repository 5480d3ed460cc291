//! Digests (BLAKE3), signatures (Ed25519), pairwise MACs (keyed BLAKE3 over an
//! X25519-derived key) and the client request authenticator.
//!
//! Sans-IO: key generation takes the RNG as an argument.

use crate::domain::{ClusterTag, SigKind};
use ed25519_dalek::{Signer, SigningKey, Verifier, VerifyingKey};
use rand_core::CryptoRngCore;
use serde::{Deserialize, Serialize};
use std::fmt;
use x25519_dalek::{PublicKey as DhPublic, StaticSecret};

/// A BLAKE3 digest.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(*blake3::hash(bytes).as_bytes())
    }

    /// Digest of several parts with unambiguous framing (each part length-prefixed).
    pub fn of_parts(domain: &str, parts: &[&[u8]]) -> Digest {
        Self::framed(blake3::Hasher::new_derive_key(domain), parts)
    }

    /// `of_parts(domain.name, parts)`, without deriving the domain's key
    /// again: for the digests taken once or more per request.
    pub fn of_parts_in(domain: &DigestDomain, parts: &[&[u8]]) -> Digest {
        Self::framed(domain.hasher(), parts)
    }

    /// SHA-256 over the domain label and the parts, each prefixed with its
    /// length (u64 LE), the label too: the framing `of_parts` uses, with the
    /// label in the input instead of in a derived key. For the digest taken
    /// of every request at the client and at every replica
    /// (`Request::content_digest` with `flags::DIGEST_SHA256`): with SHA
    /// extensions (x86-64 since Zen and Ice Lake, ARMv8) SHA-256 takes
    /// ~320 ns for 512 bytes where BLAKE3, one 64-byte block after another
    /// below its 1 KiB chunk, takes ~780 (dev-2c).
    pub fn of_parts_sha256(domain: &str, parts: &[&[u8]]) -> Digest {
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        h.update((domain.len() as u64).to_le_bytes());
        h.update(domain.as_bytes());
        for p in parts {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p);
        }
        Digest(h.finalize().into())
    }

    fn framed(mut h: blake3::Hasher, parts: &[&[u8]]) -> Digest {
        for p in parts {
            h.update(&(p.len() as u64).to_le_bytes());
            h.update(p);
        }
        Digest(*h.finalize().as_bytes())
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    pub fn short(&self) -> String {
        hex::encode(&self.0[..6])
    }
}

/// A domain of `Digest::of_parts` whose blake3 context key is derived once.
/// `Hasher::new_derive_key` hashes the context string on every call: one
/// compression of the ~10 a 512-byte request's content digest costs, and
/// of the 3 its cluster binding costs, taken by the client and every
/// replica for every request (issue 13 item 3: blake3 was 27 % of dev-2c's
/// CPU at saturation, almost all of it small inputs).
pub struct DigestDomain {
    name: &'static str,
    key: std::sync::OnceLock<blake3::hazmat::ContextKey>,
}

impl DigestDomain {
    pub const fn new(name: &'static str) -> DigestDomain {
        DigestDomain {
            name,
            key: std::sync::OnceLock::new(),
        }
    }

    pub(crate) fn hasher(&self) -> blake3::Hasher {
        use blake3::hazmat::HasherExt;
        let key = self
            .key
            .get_or_init(|| blake3::hazmat::hash_derive_key_context(self.name));
        blake3::Hasher::new_from_context_key(key)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "D:{}", self.short())
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_hex())
    }
}

/// An Ed25519 signature. Serialized as bytes so postcard stays compact.
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub struct Signature(pub [u8; 64]);

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sig:{}", hex::encode(&self.0[..6]))
    }
}

impl Serialize for Signature {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Signature {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Signature;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("64 signature bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Signature, E> {
                let arr: [u8; 64] = v.try_into().map_err(|_| E::invalid_length(v.len(), &self))?;
                Ok(Signature(arr))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Signature, E> {
                self.visit_bytes(&v)
            }
        }
        d.deserialize_bytes(V)
    }
}

/// A truncated (128-bit) keyed-BLAKE3 MAC.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Mac(pub [u8; 16]);

impl fmt::Debug for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mac:{}", hex::encode(&self.0[..4]))
    }
}

/// The public half of an identity: what the configuration lists for every
/// replica and client.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublicIdentity {
    /// Ed25519 verifying key.
    #[serde(with = "hex32")]
    pub sign: [u8; 32],
    /// X25519 public key used to derive pairwise MAC keys.
    #[serde(with = "hex32")]
    pub dh: [u8; 32],
}

/// 32-byte keys as hex in human-readable formats (TOML), raw bytes on the wire.
mod hex32 {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&hex::encode(v))
        } else {
            serde::Serialize::serialize(v, s)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        if d.is_human_readable() {
            let text = String::deserialize(d)?;
            let bytes = hex::decode(&text).map_err(D::Error::custom)?;
            bytes
                .try_into()
                .map_err(|_| D::Error::custom("expected 32 bytes of hex"))
        } else {
            <[u8; 32]>::deserialize(d)
        }
    }
}

impl fmt::Debug for PublicIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id:{}", hex::encode(&self.sign[..6]))
    }
}

impl PublicIdentity {
    /// Whether `sig` is this key's signature on `digest` of a `kind` message
    /// of cluster `tag` (see `domain.rs`). Every protocol signature is
    /// checked through here.
    pub fn verify_bound(&self, tag: &ClusterTag, kind: SigKind, digest: &Digest, sig: &Signature) -> bool {
        let msg = tag.bind(kind, digest);
        crate::verify_memo::verdict(&self.sign, &msg, sig, || self.verify(msg.as_bytes(), sig))
    }

    /// Raw verification over `msg`, bound to no cluster: only for transcripts
    /// that carry the cluster tag themselves (the channel handshake).
    pub fn verify(&self, msg: &[u8], sig: &Signature) -> bool {
        let Ok(vk) = VerifyingKey::from_bytes(&self.sign) else {
            return false;
        };
        vk.verify(msg, &ed25519_dalek::Signature::from_bytes(&sig.0))
            .is_ok()
    }
}

/// A secret identity (signing key + DH key).
#[derive(Clone)]
pub struct Identity {
    signing: SigningKey,
    dh: StaticSecret,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Identity({:?})", self.public())
    }
}

impl Identity {
    pub fn generate(rng: &mut impl CryptoRngCore) -> Identity {
        let signing = SigningKey::generate(rng);
        let dh = StaticSecret::random_from_rng(rng);
        Identity { signing, dh }
    }

    /// Deterministic identity from a seed: for the simulator and tests only.
    pub fn from_seed(seed: &[u8]) -> Identity {
        let k1 = blake3::derive_key("chorus identity sign v1", seed);
        let k2 = blake3::derive_key("chorus identity dh v1", seed);
        Identity::from_secret_bytes(k1, k2)
    }

    pub fn from_secret_bytes(sign: [u8; 32], dh: [u8; 32]) -> Identity {
        Identity {
            signing: SigningKey::from_bytes(&sign),
            dh: StaticSecret::from(dh),
        }
    }

    pub fn secret_bytes(&self) -> ([u8; 32], [u8; 32]) {
        (self.signing.to_bytes(), self.dh.to_bytes())
    }

    pub fn public(&self) -> PublicIdentity {
        PublicIdentity {
            sign: self.signing.verifying_key().to_bytes(),
            dh: DhPublic::from(&self.dh).to_bytes(),
        }
    }

    /// Signs `digest` of a `kind` message of cluster `tag` (see `domain.rs`).
    /// Every protocol signature is made through here.
    pub fn sign_bound(&self, tag: &ClusterTag, kind: SigKind, digest: &Digest) -> Signature {
        self.sign(tag.bind(kind, digest).as_bytes())
    }

    /// Raw signature over `msg`, bound to no cluster: only for transcripts
    /// that carry the cluster tag themselves (the channel handshake).
    pub fn sign(&self, msg: &[u8]) -> Signature {
        Signature(self.signing.sign(msg).to_bytes())
    }

    /// The symmetric key shared with `peer`: both sides compute the same value.
    pub fn pairwise_key(&self, peer: &PublicIdentity) -> MacKey {
        let shared = self.dh.diffie_hellman(&DhPublic::from(peer.dh));
        let me = DhPublic::from(&self.dh).to_bytes();
        let (lo, hi) = if me <= peer.dh {
            (me, peer.dh)
        } else {
            (peer.dh, me)
        };
        let mut h = blake3::Hasher::new_derive_key("chorus pairwise mac v1");
        h.update(shared.as_bytes());
        h.update(&lo);
        h.update(&hi);
        MacKey(*h.finalize().as_bytes())
    }
}

/// A symmetric MAC key.
#[derive(Clone, PartialEq, Eq)]
pub struct MacKey(pub [u8; 32]);

impl fmt::Debug for MacKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MacKey(..)")
    }
}

impl MacKey {
    /// MAC over `digest` of a `kind` message of cluster `tag` (see `domain.rs`).
    pub fn mac_bound(&self, tag: &ClusterTag, kind: SigKind, digest: &Digest) -> Mac {
        self.mac(tag.bind(kind, digest).as_bytes())
    }

    pub fn verify_bound(&self, tag: &ClusterTag, kind: SigKind, digest: &Digest, mac: &Mac) -> bool {
        self.verify(tag.bind(kind, digest).as_bytes(), mac)
    }

    /// Raw MAC over `msg`, bound to no cluster: only for transcripts that
    /// carry the cluster tag themselves (the channel handshake).
    pub fn mac(&self, msg: &[u8]) -> Mac {
        let full = blake3::keyed_hash(&self.0, msg);
        let mut out = [0u8; 16];
        out.copy_from_slice(&full.as_bytes()[..16]);
        Mac(out)
    }

    /// Constant-time comparison of the MAC.
    pub fn verify(&self, msg: &[u8], mac: &Mac) -> bool {
        let expect = self.mac(msg);
        let mut diff = 0u8;
        for (a, b) in expect.0.iter().zip(mac.0.iter()) {
            diff |= a ^ b;
        }
        diff == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SHA-256 request digest's construction, pinned byte for byte:
    /// SHA-256 of the length-framed label and parts (FIPS 180-4's "abc"
    /// vector checks the hash itself); the flag picks it, and requests
    /// without it digest as before.
    #[test]
    fn sha256_parts_are_length_framed_and_chosen_by_the_flag() {
        use sha2::Digest as _;
        let abc: [u8; 32] = sha2::Sha256::digest(b"abc").into();
        assert_eq!(
            hex::encode(abc),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let mut input = Vec::new();
        for p in [&b"dom"[..], b"a", b""] {
            input.extend_from_slice(&(p.len() as u64).to_le_bytes());
            input.extend_from_slice(p);
        }
        let want: [u8; 32] = sha2::Sha256::digest(&input).into();
        assert_eq!(Digest::of_parts_sha256("dom", &[b"a", b""]).0, want);
        assert_ne!(
            Digest::of_parts_sha256("dom", &[b"ab", b""]),
            Digest::of_parts_sha256("dom", &[b"a", b"b"])
        );
        assert_ne!(
            Digest::of_parts_sha256("dom", &[b"a"]),
            Digest::of_parts_sha256("doma", &[])
        );
        let (c, q, op) = (crate::ClientId(9), crate::RequestSeq(4), &b"put k v"[..]);
        let fl = crate::flags::DIGEST_SHA256 | 2;
        assert_eq!(
            crate::Request::content_digest(c, q, fl, op),
            Digest::of_parts_sha256(
                "chorus request v2",
                &[&c.0.to_le_bytes(), &q.0.to_le_bytes(), &[fl], op]
            )
        );
    }

    /// A domain with its key derived once gives the digests the plain
    /// derivation gives (every stored and signed digest depends on it), and
    /// binding a request's digest once gives each replica's MAC unchanged.
    #[test]
    fn a_domain_derived_once_digests_as_before() {
        static D: DigestDomain = DigestDomain::new("chorus request v1");
        for parts in [&[][..], &[&b"a"[..], &b""[..]], &[&[7u8; 600][..], &b"xy"[..]]] {
            assert_eq!(
                Digest::of_parts_in(&D, parts),
                Digest::of_parts("chorus request v1", parts)
            );
            assert_eq!(Digest::of_parts_in(&D, parts), Digest::of_parts_in(&D, parts));
        }
        assert_ne!(
            Digest::of_parts_in(&D, &[b"a"]),
            Digest::of_parts("chorus request v2", &[b"a"])
        );
        let (cfg, replicas, clients) =
            crate::ClusterConfig::for_testing(4, 1, crate::ProtocolParams::default(), 5);
        let tag = crate::ClusterTag::of(&cfg);
        // The domains the per-request digests use, spelled as before.
        let (c, q, op) = (crate::ClientId(9), crate::RequestSeq(4), &b"put k v"[..]);
        assert_eq!(
            crate::Request::content_digest(c, q, 2, op),
            Digest::of_parts(
                "chorus request v1",
                &[&c.0.to_le_bytes(), &q.0.to_le_bytes(), &[2], op]
            )
        );
        let d = Digest::of(b"d");
        let kind = crate::SigKind::Request;
        assert_eq!(
            tag.bind(kind, &d),
            Digest::of_parts(
                "chorus cluster-bound v1",
                &[tag.digest().as_bytes(), kind.label().as_bytes(), d.as_bytes()]
            )
        );
        let keys: Vec<MacKey> = replicas
            .iter()
            .map(|r| clients[0].pairwise_key(&r.public()))
            .collect();
        let req = crate::Request::with_macs(
            &tag,
            crate::ClientId(0),
            crate::RequestSeq(3),
            0,
            bytes::Bytes::from_static(b"op"),
            &keys,
        );
        let crate::Authenticator::Macs(macs) = &req.auth else {
            panic!("a MAC vector")
        };
        for (k, m) in keys.iter().zip(macs.iter()) {
            assert_eq!(*m, k.mac_bound(&tag, crate::SigKind::Request, &req.digest()));
        }
    }

    #[test]
    fn pairwise_keys_agree_and_differ_per_pair() {
        let a = Identity::from_seed(b"a");
        let b = Identity::from_seed(b"b");
        let c = Identity::from_seed(b"c");
        assert_eq!(a.pairwise_key(&b.public()), b.pairwise_key(&a.public()));
        assert_ne!(a.pairwise_key(&b.public()), a.pairwise_key(&c.public()));
    }

    #[test]
    fn signatures_verify_only_for_signed_message_and_key() {
        let a = Identity::from_seed(b"a");
        let b = Identity::from_seed(b"b");
        let sig = a.sign(b"hello");
        assert!(a.public().verify(b"hello", &sig));
        assert!(!a.public().verify(b"hellp", &sig));
        assert!(!b.public().verify(b"hello", &sig));
    }

    #[test]
    fn macs_verify() {
        let k = Identity::from_seed(b"a").pairwise_key(&Identity::from_seed(b"b").public());
        let m = k.mac(b"x");
        assert!(k.verify(b"x", &m));
        assert!(!k.verify(b"y", &m));
    }

    #[test]
    fn signature_roundtrips_through_postcard() {
        let s = Identity::from_seed(b"a").sign(b"m");
        let bytes = postcard::to_allocvec(&s).unwrap();
        let back: Signature = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(s, back);
    }
}
