//! Replica signature keys, decompressed once.
//!
//! `PublicIdentity::verify` parses (decompresses) the Ed25519 point on every
//! call, which costs about a third of a verification. Lanes verify a
//! pre-prepare and several prepares per slot, so they keep the parsed keys.
//! Same check as `PublicIdentity::verify` (ed25519-dalek `verify`).
//! Verdicts go through `chorus_core::verify_memo` (memoised only on a
//! thread that asked for it: the simulator's).

use chorus_core::{ClusterConfig, ClusterTag, Digest, ReplicaId, SigKind, Signature};
use ed25519_dalek::{Verifier, VerifyingKey};

#[derive(Clone, Debug)]
pub struct ReplicaKeys {
    keys: Vec<Option<VerifyingKey>>,
    /// Signatures verify only if bound to this cluster (`domain.rs`).
    tag: ClusterTag,
}

impl ReplicaKeys {
    pub fn new(cfg: &ClusterConfig) -> ReplicaKeys {
        let keys = (0..cfg.n())
            .map(|i| {
                cfg.replica(ReplicaId(i as u32))
                    .and_then(|r| VerifyingKey::from_bytes(&r.identity.sign).ok())
            })
            .collect();
        ReplicaKeys {
            keys,
            tag: ClusterTag::of(cfg),
        }
    }

    /// Whether `sig` is `r`'s signature on `digest` of a `kind` message of
    /// this cluster (false for unknown replicas and keys that are not valid
    /// points). Same binding as `PublicIdentity::verify_bound`.
    pub fn verify(&self, r: ReplicaId, kind: SigKind, digest: &Digest, sig: &Signature) -> bool {
        let msg = self.tag.bind(kind, digest);
        self.keys
            .get(r.index())
            .and_then(|k| k.as_ref())
            .is_some_and(|k| {
                chorus_core::verify_memo::verdict(k.as_bytes(), &msg, sig, || {
                    k.verify(msg.as_bytes(), &ed25519_dalek::Signature::from_bytes(&sig.0))
                        .is_ok()
                })
            })
    }

    /// `verify`, computed now on this thread and, if valid, kept in `into`
    /// for the thread that will ask (`chorus_core::verify_memo::PreVerified`).
    pub fn verify_ahead(
        &self,
        r: ReplicaId,
        kind: SigKind,
        digest: &Digest,
        sig: &Signature,
        into: &mut chorus_core::verify_memo::PreVerified,
    ) -> bool {
        let msg = self.tag.bind(kind, digest);
        self.keys
            .get(r.index())
            .and_then(|k| k.as_ref())
            .is_some_and(|k| {
                into.check(k.as_bytes(), &msg, sig, || {
                    k.verify(msg.as_bytes(), &ed25519_dalek::Signature::from_bytes(&sig.0))
                        .is_ok()
                })
            })
    }

    pub fn knows(&self, r: ReplicaId) -> bool {
        self.keys.get(r.index()).is_some_and(|k| k.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::ProtocolParams;

    #[test]
    fn same_verdict_as_public_identity() {
        let (cfg, replicas, _) = ClusterConfig::for_testing(4, 1, ProtocolParams::default(), 3);
        let keys = ReplicaKeys::new(&cfg);
        let tag = ClusterTag::of(&cfg);
        let (d, other) = (Digest::of(b"hello"), Digest::of(b"hellp"));
        let sig = replicas[1].sign_bound(&tag, SigKind::Prepare, &d);
        assert!(keys.verify(ReplicaId(1), SigKind::Prepare, &d, &sig));
        assert!(!keys.verify(ReplicaId(2), SigKind::Prepare, &d, &sig));
        assert!(!keys.verify(ReplicaId(1), SigKind::Prepare, &other, &sig));
        assert!(!keys.verify(ReplicaId(1), SigKind::PrePrepare, &d, &sig));
        assert!(!keys.verify(ReplicaId(9), SigKind::Prepare, &d, &sig));
        assert!(keys.knows(ReplicaId(3)) && !keys.knows(ReplicaId(4)));
        let pk = replicas[1].public();
        assert_eq!(
            pk.verify_bound(&tag, SigKind::Prepare, &d, &sig),
            keys.verify(ReplicaId(1), SigKind::Prepare, &d, &sig)
        );
        // The same key and message signed for another cluster does not verify.
        let mut other_cfg = cfg.clone();
        other_cfg.params.cluster_id = "another cluster".into();
        let foreign = replicas[1].sign_bound(&ClusterTag::of(&other_cfg), SigKind::Prepare, &d);
        assert!(!keys.verify(ReplicaId(1), SigKind::Prepare, &d, &foreign));
    }
}
