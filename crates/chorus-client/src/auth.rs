//! Building authenticated requests (DESIGN §6): every replica checks the
//! authenticator itself, so a proposer cannot forge or alter a request.

use bytes::Bytes;
use chorus_core::{
    flags, ClientAuthKind, ClientId, ClusterConfig, ClusterTag, Identity, MacKey, Request, RequestSeq,
};

/// Signs or MACs this client's requests as the configuration asks.
pub struct RequestAuth {
    client: ClientId,
    kind: ClientAuthKind,
    identity: Identity,
    /// `keys[i]` is shared with replica `i` (PBFT's authenticator vector).
    keys: Vec<MacKey>,
    /// The cluster the requests are for: replicas of any other cluster
    /// reject them even where the keys are the same (`chorus_core::domain`).
    tag: ClusterTag,
    /// `flags::DIGEST_SHA256` on every request (`ClientOptions::sha256_digests`).
    digest_flag: u8,
}

impl RequestAuth {
    pub fn new(config: &ClusterConfig, client: ClientId, identity: Identity) -> RequestAuth {
        let keys = match config.params.client_auth {
            ClientAuthKind::MacVector => config
                .replicas
                .iter()
                .map(|r| identity.pairwise_key(&r.identity))
                .collect(),
            ClientAuthKind::Signature => Vec::new(),
        };
        RequestAuth {
            client,
            kind: config.params.client_auth,
            identity,
            keys,
            tag: ClusterTag::of(config),
            digest_flag: flags::DIGEST_SHA256,
        }
    }

    /// Digest requests with SHA-256 (the default) or with BLAKE3.
    pub fn with_sha256_digests(mut self, on: bool) -> RequestAuth {
        self.digest_flag = if on { flags::DIGEST_SHA256 } else { 0 };
        self
    }

    /// `extra`: further flags (`flags::FEW_REPLIES`).
    pub fn request(&self, seq: RequestSeq, read_only: bool, extra: u8, op: Bytes) -> Request {
        let fl = if read_only { flags::READ_ONLY } else { 0 };
        self.build(seq, fl | extra, op)
    }

    /// RCC §III-E `SWITCHINSTANCE(c, target)`.
    pub fn switch_request(&self, seq: RequestSeq, target: u32) -> Request {
        self.build(seq, flags::SWITCH_INSTANCE, chorus_core::switch_op(target))
    }

    fn build(&self, seq: RequestSeq, fl: u8, op: Bytes) -> Request {
        let fl = fl | self.digest_flag;
        match self.kind {
            ClientAuthKind::MacVector => Request::with_macs(&self.tag, self.client, seq, fl, op, &self.keys),
            ClientAuthKind::Signature => {
                Request::with_signature(&self.tag, self.client, seq, fl, op, &self.identity)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{Authenticator, ProtocolParams, ReplicaId};

    /// SHA-256 digests by default, BLAKE3 when turned off; either verifies
    /// at every replica.
    #[test]
    fn the_digest_hash_is_the_clients_choice() {
        let (config, replicas, clients) = ClusterConfig::for_testing(4, 2, ProtocolParams::default(), 3);
        let tag = ClusterTag::of(&config);
        let op = Bytes::from_static(b"op");
        for (on, flag) in [(true, flags::DIGEST_SHA256), (false, 0)] {
            let auth = RequestAuth::new(&config, ClientId(1), clients[1].clone()).with_sha256_digests(on);
            let r = auth.request(RequestSeq(5), false, 0, op.clone());
            assert_eq!(r.flags & flags::DIGEST_SHA256, flag);
            for (i, id) in replicas.iter().enumerate() {
                let key = id.pairwise_key(&clients[1].public());
                assert!(
                    r.verify(&tag, ReplicaId(i as u32), &key, &clients[1].public()),
                    "{on} {i}"
                );
            }
        }
    }

    #[test]
    fn every_replica_verifies_both_kinds_of_authenticator() {
        for kind in [ClientAuthKind::MacVector, ClientAuthKind::Signature] {
            let params = ProtocolParams {
                client_auth: kind,
                ..ProtocolParams::default()
            };
            let (config, replicas, clients) = ClusterConfig::for_testing(4, 2, params, 3);
            let auth = RequestAuth::new(&config, ClientId(1), clients[1].clone());
            let tag = ClusterTag::of(&config);
            let mut elsewhere = config.clone();
            elsewhere.params.cluster_id = "another cluster".into();
            let other_tag = ClusterTag::of(&elsewhere);
            let req = auth.request(RequestSeq(9), true, 0, Bytes::from_static(b"get k"));
            assert!(req.is_read_only());
            assert_eq!(
                matches!(req.auth, Authenticator::Macs(_)),
                kind == ClientAuthKind::MacVector
            );
            for (i, r) in replicas.iter().enumerate() {
                let key = r.pairwise_key(&clients[1].public());
                assert!(req.verify(&tag, ReplicaId(i as u32), &key, &clients[1].public()));
                // Client 0's key does not make client 1's request valid.
                let other = r.pairwise_key(&clients[0].public());
                assert!(!req.verify(&tag, ReplicaId(i as u32), &other, &clients[0].public()));
                // Nor does a cluster that reuses the same keys.
                assert!(!req.verify(&other_tag, ReplicaId(i as u32), &key, &clients[1].public()));
            }
        }
    }
}
