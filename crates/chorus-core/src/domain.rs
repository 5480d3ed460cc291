//! Domain separation for everything the protocol signs or MACs: the one
//! place that binds a message to its cluster and its kind.
//!
//! Keys may be reused across clusters (an operator copies a key directory, a
//! test net shares keys with production). The channel handshake already binds
//! every connection to [`ClusterConfig::cluster_tag`]; without this module a
//! Byzantine replica or client of cluster A could still replay a request or a
//! signed certificate from A into cluster B over its own (B-authenticated)
//! channel, because the signature inside it would verify with the same key.
//! So no signature or MAC covers a message digest directly: it covers
//! [`ClusterTag::bind`]`(kind, digest)`, which prefixes the cluster tag and the
//! message kind. The kind keeps one message type's signature from standing
//! in for another's even if two content digests ever collided across types.
//!
//! Call sites never build the bound message themselves: they call
//! [`crate::Identity::sign_bound`], [`crate::PublicIdentity::verify_bound`],
//! [`crate::MacKey::mac_bound`] or [`crate::MacKey::verify_bound`], which all
//! go through [`ClusterTag::bind`].

use crate::config::ClusterConfig;
use crate::crypto::Digest;
use std::fmt;

/// What a signature or MAC authenticates: the message-kind half of the
/// domain-separation tag. Only messages that carry a signature or MAC of
/// their own are listed; the rest (commits, status, fetches, replies) are
/// authenticated by the cluster-bound channel.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum SigKind {
    /// A client request's authenticator (MAC vector or signature).
    Request,
    PrePrepare,
    Prepare,
    Checkpoint,
    ViewChange,
    NewView,
    /// A replica's progress timer expired in a lane's view ([`crate::Timeout`]).
    Timeout,
    /// SAREK §IV-D: a re-prediction proposal ([`crate::RePredictionVote`]).
    RePrediction,
}

impl SigKind {
    /// Fixed labels: part of the signed bytes, so never renamed.
    pub fn label(self) -> &'static str {
        match self {
            SigKind::Request => "request",
            SigKind::PrePrepare => "pre-prepare",
            SigKind::Prepare => "prepare",
            SigKind::Checkpoint => "checkpoint",
            SigKind::ViewChange => "view-change",
            SigKind::NewView => "new-view",
            SigKind::Timeout => "timeout",
            SigKind::RePrediction => "reprediction",
        }
    }
}

/// The cluster every signature and MAC is bound to: [`ClusterConfig::cluster_tag`]
/// (the cluster id plus every replica's keys). Computed once per component
/// and copied; cheap to pass around.
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub struct ClusterTag(Digest);

impl ClusterTag {
    pub fn of(cfg: &ClusterConfig) -> ClusterTag {
        ClusterTag(cfg.cluster_tag())
    }

    /// A tag from a known cluster-tag digest (tests, tools).
    pub fn from_digest(d: Digest) -> ClusterTag {
        ClusterTag(d)
    }

    pub fn digest(&self) -> Digest {
        self.0
    }

    /// The message that is actually signed or MAC'ed for `digest` of a
    /// message of `kind` in this cluster. Every signing and verifying path
    /// goes through here, so the binding cannot be forgotten at one site.
    pub fn bind(&self, kind: SigKind, digest: &Digest) -> Digest {
        static BOUND: crate::crypto::DigestDomain =
            crate::crypto::DigestDomain::new("chorus cluster-bound v1");
        Digest::of_parts_in(
            &BOUND,
            &[self.0.as_bytes(), kind.label().as_bytes(), digest.as_bytes()],
        )
    }
}

impl fmt::Debug for ClusterTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cluster:{}", self.0.short())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProtocolParams;

    #[test]
    fn binding_depends_on_cluster_and_kind() {
        let (a, _, _) = ClusterConfig::for_testing(4, 1, ProtocolParams::default(), 1);
        let mut b = a.clone();
        b.params.cluster_id = "b".into();
        let (ta, tb) = (ClusterTag::of(&a), ClusterTag::of(&b));
        let d = Digest::of(b"m");
        assert_ne!(ta.bind(SigKind::Prepare, &d), tb.bind(SigKind::Prepare, &d));
        assert_ne!(ta.bind(SigKind::Prepare, &d), ta.bind(SigKind::PrePrepare, &d));
        assert_eq!(
            ta.bind(SigKind::Prepare, &d),
            ClusterTag::of(&a.clone()).bind(SigKind::Prepare, &d)
        );
    }

    #[test]
    fn labels_are_distinct() {
        let all = [
            SigKind::Request,
            SigKind::PrePrepare,
            SigKind::Prepare,
            SigKind::Checkpoint,
            SigKind::ViewChange,
            SigKind::NewView,
        ];
        let labels: std::collections::BTreeSet<_> = all.iter().map(|k| k.label()).collect();
        assert_eq!(labels.len(), all.len());
    }
}
