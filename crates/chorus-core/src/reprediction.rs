//! SAREK §IV-D re-prediction (Fig. 5): what replicas sign and order when a
//! request accessed a partition its prediction did not name.
//!
//! The execution instance that detects the mis-prediction suspends the
//! request and its replica broadcasts a signed [`RePredictionVote`]. 2f+1
//! matching votes are a [`RePredictionCert`]: at least f+1 correct replicas
//! suspended the request at the same point and computed the same new
//! partitions, so a Byzantine replica alone can never make a request touch a
//! partition it does not (§IV-C, Table I row 3). The certificate travels to
//! the added partitions' lanes as a system request
//! ([`RePredictionCert::to_request`], flag [`flags::REPREDICTION`]) and is
//! delivered there as a CROSS-BORDER-SYNC of the suspended request.

use crate::crypto::{Digest, Identity, PublicIdentity, Signature};
use crate::domain::{ClusterTag, SigKind};
use crate::ids::{ClientId, ReplicaId, RequestSeq};
use crate::request::{flags, Authenticator, Request};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// The most partitions a prediction may name (chorus-exec's `MAX_PARTITIONS`).
pub const MAX_REPREDICTION_PARTITIONS: usize = 256;

/// The client id re-prediction requests are filed under in the pools. Not a
/// real client: the request's own client would let that client block its
/// re-prediction (a second request with the same seq ordered in the added
/// lane first, or its per-client pool share kept full). The seq is derived
/// from the body, so each re-prediction has its own pool key.
pub const REPREDICTION_CLIENT: ClientId = ClientId(u64::MAX);

/// "Request `request` of `(client, seq)` must also be ordered in `added`;
/// its prediction is now `partitions`."
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RePrediction {
    /// The suspended request's digest (`Request::digest`).
    pub request: Digest,
    pub client: ClientId,
    pub seq: RequestSeq,
    /// The new prediction (old one plus `added`): sorted, no duplicates.
    pub partitions: Vec<u16>,
    /// The partitions added: sorted, non-empty, each above every partition
    /// of the old prediction (§IV-D 2, no cycles between re-predictions).
    pub added: Vec<u16>,
}

impl RePrediction {
    /// Shape checks every replica applies before it signs, counts or orders
    /// a re-prediction of a `partitions`-partition deployment.
    pub fn is_well_formed(&self, partitions: u16) -> bool {
        let sorted = |v: &[u16]| v.windows(2).all(|w| w[0] < w[1]);
        let old: Vec<u16> = self
            .partitions
            .iter()
            .copied()
            .filter(|p| !self.added.contains(p))
            .collect();
        self.partitions.len() <= MAX_REPREDICTION_PARTITIONS
            && sorted(&self.partitions)
            && sorted(&self.added)
            && !self.added.is_empty()
            && !old.is_empty()
            && self.added.iter().all(|p| self.partitions.contains(p))
            && self.partitions.iter().all(|&p| p < partitions)
            && old.iter().max() < self.added.iter().min()
    }

    pub fn signing_digest(&self) -> Digest {
        let bytes = postcard::to_allocvec(self).unwrap_or_default();
        Digest::of_parts("chorus sarek reprediction v1", &[&bytes])
    }

    /// The seq its request is filed under (never 0).
    pub fn pool_seq(&self) -> RequestSeq {
        let d = self.signing_digest();
        let mut low = [0u8; 8];
        low.copy_from_slice(&d.as_bytes()[..8]);
        RequestSeq(u64::from_le_bytes(low).max(1))
    }

    pub fn sign(&self, tag: &ClusterTag, me: ReplicaId, id: &Identity) -> RePredictionVote {
        RePredictionVote {
            body: self.clone(),
            replica: me,
            sig: id.sign_bound(tag, SigKind::RePrediction, &self.signing_digest()),
        }
    }
}

/// One replica's signed re-prediction proposal (broadcast to all).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RePredictionVote {
    pub body: RePrediction,
    pub replica: ReplicaId,
    pub sig: Signature,
}

impl RePredictionVote {
    pub fn verify(&self, tag: &ClusterTag, key: &PublicIdentity) -> bool {
        key.verify_bound(tag, SigKind::RePrediction, &self.body.signing_digest(), &self.sig)
    }
}

/// 2f+1 matching votes from distinct replicas.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RePredictionCert {
    pub body: RePrediction,
    pub votes: Vec<(ReplicaId, Signature)>,
}

impl RePredictionCert {
    /// Valid when well formed for `partitions` and at least `quorum` votes
    /// of distinct known replicas verify (`key_of` gives a replica's key).
    pub fn verify<'a>(
        &self,
        tag: &ClusterTag,
        partitions: u16,
        quorum: usize,
        key_of: impl Fn(ReplicaId) -> Option<&'a PublicIdentity>,
    ) -> bool {
        if !self.body.is_well_formed(partitions) || self.votes.len() > MAX_REPREDICTION_PARTITIONS {
            return false;
        }
        let d = self.body.signing_digest();
        let mut seen: Vec<ReplicaId> = Vec::with_capacity(self.votes.len());
        for (r, sig) in &self.votes {
            if seen.contains(r) {
                return false;
            }
            let Some(key) = key_of(*r) else {
                return false;
            };
            if !key.verify_bound(tag, SigKind::RePrediction, &d, sig) {
                return false;
            }
            seen.push(*r);
        }
        seen.len() >= quorum
    }

    /// The system request that orders the certificate in an added
    /// partition's lane, filed under [`REPREDICTION_CLIENT`] and a seq of the
    /// body (so a lane's pool holds one per re-prediction, whatever the
    /// vote set) and authenticated by the certificate: no authenticator.
    pub fn to_request(&self) -> Request {
        let op = postcard::to_allocvec(self).expect("encoding a certificate cannot fail");
        Request {
            memo: Default::default(),
            client: REPREDICTION_CLIENT,
            seq: self.body.pool_seq(),
            flags: flags::REPREDICTION,
            op: Bytes::from(op),
            auth: Authenticator::Macs(Default::default()),
        }
    }

    /// An upper bound on the encoded certificate (the operation of its
    /// request) with `quorum` votes and `partitions` partitions: a `sarek`
    /// configuration's `max_op_bytes` must admit it (`ClusterConfig::validate`).
    pub fn max_encoded_len(quorum: usize, partitions: usize) -> usize {
        // digest, client and seq varints, two partition lists of u16
        // varints (3 bytes each), then per vote an id varint and a
        // signature with its length prefix.
        let body = 32 + 10 + 10 + 2 * (3 + 3 * partitions);
        body + 5 + quorum * (5 + 2 + 64)
    }

    /// The certificate a re-prediction request carries (not verified).
    pub fn from_request(req: &Request) -> Option<RePredictionCert> {
        if !req.is_reprediction() {
            return None;
        }
        let cert: RePredictionCert = postcard::from_bytes(&req.op).ok()?;
        (req.client == REPREDICTION_CLIENT && cert.body.pool_seq() == req.seq).then_some(cert)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(partitions: Vec<u16>, added: Vec<u16>) -> RePrediction {
        RePrediction {
            request: Digest::of(b"r"),
            client: ClientId(1),
            seq: RequestSeq(1),
            partitions,
            added,
        }
    }

    #[test]
    fn only_partitions_above_the_old_prediction_may_be_added() {
        assert!(body(vec![0, 2], vec![2]).is_well_formed(4));
        assert!(body(vec![0, 1, 3], vec![3]).is_well_formed(4));
        assert!(body(vec![1, 2, 3], vec![2, 3]).is_well_formed(4));
        // §IV-D 2: below the highest predicted partition.
        assert!(!body(vec![0, 1, 2], vec![1]).is_well_formed(4));
        // Nothing added, nothing old, out of range, unsorted, not a subset.
        assert!(!body(vec![0, 1], vec![]).is_well_formed(4));
        assert!(!body(vec![1], vec![1]).is_well_formed(4));
        assert!(!body(vec![0, 4], vec![4]).is_well_formed(4));
        assert!(!body(vec![2, 0], vec![2]).is_well_formed(4));
        assert!(!body(vec![0, 2], vec![3]).is_well_formed(4));
    }

    #[test]
    fn a_certificate_needs_a_quorum_of_distinct_valid_votes() {
        let ids: Vec<Identity> = (0..4).map(|i| Identity::from_seed(&[i as u8 + 1; 32])).collect();
        let pks: Vec<PublicIdentity> = ids.iter().map(Identity::public).collect();
        let tag = ClusterTag::from_digest(Digest::of(b"cluster"));
        let b = body(vec![0, 2], vec![2]);
        let vote = |i: usize| b.sign(&tag, ReplicaId(i as u32), &ids[i]);
        let cert = |votes: Vec<RePredictionVote>| RePredictionCert {
            body: b.clone(),
            votes: votes.into_iter().map(|v| (v.replica, v.sig)).collect(),
        };
        let key = |r: ReplicaId| pks.get(r.index());
        assert!(cert(vec![vote(0), vote(1), vote(2)]).verify(&tag, 4, 3, key));
        // 2f votes are not enough; a repeated voter counts once (rejected).
        assert!(!cert(vec![vote(0), vote(1)]).verify(&tag, 4, 3, key));
        assert!(!cert(vec![vote(0), vote(1), vote(1)]).verify(&tag, 4, 3, key));
        // A vote for another body does not count.
        let mut other = cert(vec![vote(0), vote(1), vote(2)]);
        other.body.added = vec![3];
        other.body.partitions = vec![0, 3];
        assert!(!other.verify(&tag, 4, 3, key));
        // Survives the trip through a request, within the size bound.
        let c = cert(vec![vote(0), vote(1), vote(3)]);
        let req = c.to_request();
        assert!(req.op.len() <= RePredictionCert::max_encoded_len(3, 4));
        assert_eq!(RePredictionCert::from_request(&req), Some(c));
    }
}
