//! Replica signature keys, decompressed once.
//!
//! `PublicIdentity::verify` parses (decompresses) the Ed25519 point on every
//! call, which costs about a third of a verification. Lanes verify a
//! pre-prepare and several prepares per slot, so they keep the parsed keys.
//! Same check as `PublicIdentity::verify` (ed25519-dalek `verify`).

use chorus_core::{ClusterConfig, ReplicaId, Signature};
use ed25519_dalek::{Verifier, VerifyingKey};

#[derive(Clone, Debug)]
pub struct ReplicaKeys {
    keys: Vec<Option<VerifyingKey>>,
}

impl ReplicaKeys {
    pub fn new(cfg: &ClusterConfig) -> ReplicaKeys {
        let keys = (0..cfg.n())
            .map(|i| {
                cfg.replica(ReplicaId(i as u32))
                    .and_then(|r| VerifyingKey::from_bytes(&r.identity.sign).ok())
            })
            .collect();
        ReplicaKeys { keys }
    }

    /// Whether `sig` is `r`'s signature on `msg` (false for unknown replicas
    /// and keys that are not valid points).
    pub fn verify(&self, r: ReplicaId, msg: &[u8], sig: &Signature) -> bool {
        self.keys
            .get(r.index())
            .and_then(|k| k.as_ref())
            .is_some_and(|k| {
                k.verify(msg, &ed25519_dalek::Signature::from_bytes(&sig.0))
                    .is_ok()
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
        let sig = replicas[1].sign(b"hello");
        assert!(keys.verify(ReplicaId(1), b"hello", &sig));
        assert!(!keys.verify(ReplicaId(2), b"hello", &sig));
        assert!(!keys.verify(ReplicaId(1), b"hellp", &sig));
        assert!(!keys.verify(ReplicaId(9), b"hello", &sig));
        assert!(keys.knows(ReplicaId(3)) && !keys.knows(ReplicaId(4)));
        let pk = replicas[1].public();
        assert_eq!(
            pk.verify(b"hello", &sig),
            keys.verify(ReplicaId(1), b"hello", &sig)
        );
    }
}
