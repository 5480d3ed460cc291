//! Client request authentication (DESIGN §6): every replica checks every
//! request itself, with its pairwise MAC key or the client's public key.

use crate::io::RejectReason;
use chorus_core::{
    flags, Authenticator, ClientId, ClusterConfig, ClusterTag, Identity, MacKey, ReplicaId, Request,
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Verifies request authenticators, caching the pairwise key per client (one
/// X25519 exchange per client; the cache is bounded by the configured clients).
#[derive(Clone)]
pub struct RequestVerifier {
    cfg: Arc<ClusterConfig>,
    me: ReplicaId,
    identity: Identity,
    /// Requests verify only if authenticated for this cluster (`domain.rs`).
    tag: ClusterTag,
    keys: BTreeMap<ClientId, MacKey>,
}

/// Leaves out the key cache: it only memoises `pairwise_key`, a pure function
/// of the configuration, so filling it changes no protocol state (the fuzz
/// tests compare replicas through `Debug`; a request rejected for its MAC
/// may still have cached its client's key).
impl std::fmt::Debug for RequestVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestVerifier")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

impl RequestVerifier {
    pub fn new(cfg: Arc<ClusterConfig>, me: ReplicaId, identity: Identity) -> RequestVerifier {
        RequestVerifier {
            tag: ClusterTag::of(&cfg),
            cfg,
            me,
            identity,
            keys: BTreeMap::new(),
        }
    }

    /// `Ok` only if the request is within limits, from a configured client,
    /// and its authenticator verifies at this replica.
    pub fn check(&mut self, req: &Request) -> Result<(), RejectReason> {
        self.check_shape(req)?;
        let Some(info) = self.cfg.client(req.client) else {
            return Err(RejectReason::UnknownClient);
        };
        let pk = info.identity;
        let key = self
            .keys
            .entry(req.client)
            .or_insert_with(|| self.identity.pairwise_key(&pk));
        if req.verify(&self.tag, self.me, key, &pk) {
            Ok(())
        } else {
            Err(RejectReason::BadAuthenticator)
        }
    }

    /// Everything `check` checks except the authenticator itself: size,
    /// flags, the MAC vector's length and the client's existence.
    pub fn check_shape(&self, req: &Request) -> Result<(), RejectReason> {
        if req.op.len() > self.cfg.params.max_op_bytes as usize {
            return Err(RejectReason::Oversized);
        }
        if req.flags & !flags::KNOWN != 0 {
            return Err(RejectReason::BadAuthenticator);
        }
        if let Authenticator::Macs(m) = &req.auth {
            if m.len() != self.cfg.n() {
                return Err(RejectReason::BadAuthenticator);
            }
        }
        if self.cfg.client(req.client).is_none() {
            return Err(RejectReason::UnknownClient);
        }
        Ok(())
    }
}

/// Lets a lane skip re-verifying a request the pool already verified (it holds
/// the identical request). A read-only question across components.
pub trait VerifiedHint {
    fn already_verified(&self, req: &Request) -> bool;
    /// Whether `lane` may order `req`, where the answer is not the
    /// configuration's `owner_lane` (SAREK: the lanes PREDICT() names).
    fn lane_owns(&self, _lane: chorus_core::LaneId, _req: &Request) -> Option<bool> {
        None
    }
    /// Lend `req` the content digest of the same request held here, if
    /// any (`DigestMemo::adopt`): a backup already hashed the copy the
    /// client sent it, so a proposal carrying it need not be hashed again.
    fn share_digest(&self, _req: &Request) {}
}

/// No hint: verify everything.
pub struct NoHint;

impl VerifiedHint for NoHint {
    fn already_verified(&self, _req: &Request) -> bool {
        false
    }
}

/// Short counter names for request rejections.
pub fn reject_reason_name(r: &RejectReason) -> &'static str {
    match r {
        RejectReason::Busy => "busy",
        RejectReason::BadAuthenticator => "bad-authenticator",
        RejectReason::UnknownClient => "unknown-client",
        RejectReason::Oversized => "oversized",
        RejectReason::BadSwitch => "bad-switch",
    }
}
