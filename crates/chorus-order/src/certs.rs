//! Validation of everything that is forwarded as evidence (DESIGN §6):
//! prepared certificates, checkpoint certificates and view changes. Pure
//! functions of the configuration and the message; each failure has a reason.

use crate::roles::{new_view_primary, prepares_needed, slot_leader};
use chorus_core::{
    CheckpointCert, CheckpointVote, ClusterConfig, ClusterTag, Digest, LaneId, LeaderRotation, PrePrepare,
    Prepare, PrepareAuth, PreparedCert, PublicIdentity, ReplicaId, SigKind, Signature, Slot, View,
    ViewChange, MAX_PRE_PREPARED_PER_SLOT,
};
use std::collections::BTreeSet;

pub type CertResult = Result<(), &'static str>;

/// The first slot of every lane above a stable checkpoint (genesis: 0).
/// Checkpoints sit at multiples of K, and K is a multiple of the lane count, so
/// `seq / lanes` is exact and the same for every lane.
pub fn low_slot_of(cfg: &ClusterConfig, stable: Option<&CheckpointCert>) -> Slot {
    Slot(stable.map_or(0, |c| c.seq.0 / cfg.lanes() as u64))
}

fn key(cfg: &ClusterConfig, r: ReplicaId) -> Option<&PublicIdentity> {
    cfg.replica(r).map(|i| &i.identity)
}

/// Who signed a pre-prepare for `(lane, view, slot, digest)`: the slot's leader
/// in that view, or, for slots re-proposed by a NEW-VIEW, the lane's new-view
/// primary. Accepting either is safe: correct replicas accept exactly one
/// pre-prepare per (lane, view, slot) and a correct primary re-proposes only
/// slots no correct leader proposes in that view, so two certificates for
/// different digests would still need a correct replica to vouch twice. (In
/// general: each certificate has 2f+1 distinct vouchers, its signer and 2f
/// preparers; two of them share f+1, one of them correct, and a correct
/// replica pre-prepares or prepares at most one digest per (view, slot).)
pub fn pre_prepare_signer(
    cfg: &ClusterConfig,
    lane: LaneId,
    view: View,
    slot: Slot,
    digest: &Digest,
    sig: &Signature,
) -> Option<ReplicaId> {
    let sd = PrePrepare::signing_digest(lane, view, slot, digest);
    let tag = ClusterTag::of(cfg);
    let leader = slot_leader(cfg, lane, slot, view);
    let primary = new_view_primary(cfg, lane, view);
    let mut candidates = vec![leader];
    if view.0 > 0 && primary != leader {
        candidates.push(primary);
    }
    // A view's NEW-VIEW may exclude leaders (`lane/penalty.rs`), which moves
    // slots to other replicas; the verifier need not know that NEW-VIEW: the
    // certificate stays sound whoever signed it, as long as the signer is not
    // among the 2f preparers (see above), so any replica's key is tried last.
    if view.0 > 0 && cfg.params.leader_rotation == LeaderRotation::BlockWise {
        candidates.extend(cfg.replica_ids().filter(|r| *r != leader && *r != primary));
    }
    candidates
        .into_iter()
        .find(|r| key(cfg, *r).is_some_and(|k| k.verify_bound(&tag, SigKind::PrePrepare, &sd, sig)))
}

/// PBFT §4.4: a prepared certificate is a pre-prepare plus 2f matching
/// prepares from distinct replicas other than its signer.
///
/// Under `PrepareAuth::Mac` prepares are not signed, so a certificate is the
/// sender's claim (Castro & Liskov's P set) and carries no prepares; only the
/// pre-prepare's signature is checked (the digest was proposed in that view
/// by a replica allowed to); `plan::plan_new_view` decides what a claim is worth.
pub fn verify_prepared_cert(cfg: &ClusterConfig, c: &PreparedCert) -> CertResult {
    if c.lane.0 >= cfg.lanes() {
        return Err("cert-bad-lane");
    }
    if cfg.params.prepare_auth == PrepareAuth::Mac {
        if !c.prepares.is_empty() {
            return Err("cert-unsigned-prepares");
        }
        return pre_prepare_signer(cfg, c.lane, c.view, c.slot, &c.digest, &c.pre_prepare_sig)
            .map(|_| ())
            .ok_or("cert-bad-pre-prepare-sig");
    }
    if c.prepares.len() > cfg.n() {
        return Err("cert-too-many-prepares");
    }
    if c.prepares.len() < prepares_needed(cfg) {
        return Err("cert-too-few-prepares");
    }
    let signer = pre_prepare_signer(cfg, c.lane, c.view, c.slot, &c.digest, &c.pre_prepare_sig)
        .ok_or("cert-bad-pre-prepare-sig")?;
    let tag = ClusterTag::of(cfg);
    let mut seen = BTreeSet::new();
    for p in &c.prepares {
        if (p.lane, p.view, p.slot, p.digest) != (c.lane, c.view, c.slot, c.digest) {
            return Err("cert-prepare-mismatch");
        }
        if p.replica == signer {
            return Err("cert-prepare-from-leader");
        }
        if !seen.insert(p.replica) {
            return Err("cert-duplicate-prepare");
        }
        let k = key(cfg, p.replica).ok_or("cert-unknown-replica")?;
        let sd = Prepare::signing_digest(p.lane, p.view, p.slot, &p.digest, p.replica);
        if !k.verify_bound(&tag, SigKind::Prepare, &sd, &p.sig) {
            return Err("cert-bad-prepare-sig");
        }
    }
    Ok(())
}

/// PBFT §4.3: 2f+1 matching signed checkpoint votes from distinct replicas.
pub fn verify_checkpoint_cert(cfg: &ClusterConfig, c: &CheckpointCert) -> CertResult {
    let k = cfg.params.checkpoint_interval;
    if c.seq.0 == 0 || k == 0 || !c.seq.0.is_multiple_of(k) {
        return Err("cert-bad-seq");
    }
    if c.votes.len() < cfg.quorum() || c.votes.len() > cfg.n() {
        return Err("cert-vote-count");
    }
    // Once per certificate, not per vote: the tag hashes every replica's
    // keys (6.4 KB at n = 100).
    let tag = ClusterTag::of(cfg);
    let mut seen = BTreeSet::new();
    for v in &c.votes {
        if v.seq != c.seq || v.state_digest != c.state_digest {
            return Err("cert-vote-mismatch");
        }
        if !seen.insert(v.replica) {
            return Err("cert-duplicate-vote");
        }
        verify_vote_sig(cfg, &tag, v)?;
    }
    Ok(())
}

/// `tag` is `ClusterTag::of(cfg)`, which the caller keeps: recomputing it
/// per vote was 10 % of a simulated n = 100 run.
pub fn verify_vote_sig(cfg: &ClusterConfig, tag: &ClusterTag, v: &CheckpointVote) -> CertResult {
    let k = key(cfg, v.replica).ok_or("cert-unknown-replica")?;
    let sd = CheckpointVote::signing_digest(v.seq, &v.state_digest, v.replica);
    if k.verify_bound(tag, SigKind::Checkpoint, &sd, &v.sig) {
        Ok(())
    } else {
        Err("bad-vote-signature")
    }
}

/// The cheap part: the view change is signed by the replica it names.
pub fn verify_view_change_sig(cfg: &ClusterConfig, vc: &ViewChange) -> CertResult {
    if vc.lane.0 >= cfg.lanes() {
        return Err("bad-lane");
    }
    let k = key(cfg, vc.replica).ok_or("bad-replica")?;
    if k.verify_bound(
        &ClusterTag::of(cfg),
        SigKind::ViewChange,
        &vc.signing_digest(),
        &vc.sig,
    ) {
        Ok(())
    } else {
        Err("bad-signature")
    }
}

/// Everything: signature, checkpoint certificate, and one valid prepared
/// certificate per slot inside the sender's window, each from an earlier view.
pub fn verify_view_change(cfg: &ClusterConfig, vc: &ViewChange) -> CertResult {
    verify_view_change_sig(cfg, vc)?;
    if vc.new_view.0 == 0 {
        return Err("vc-view-zero");
    }
    if let Some(c) = &vc.stable {
        verify_checkpoint_cert(cfg, c)?;
    }
    let low = low_slot_of(cfg, vc.stable.as_ref());
    let window = cfg.params.window_slots;
    if vc.prepared.len() as u64 > window {
        return Err("vc-too-many-certs");
    }
    let mut last: Option<Slot> = None;
    for c in &vc.prepared {
        if last.is_some_and(|s| c.slot <= s) {
            return Err("vc-certs-unordered");
        }
        last = Some(c.slot);
        if c.lane != vc.lane {
            return Err("vc-cert-wrong-lane");
        }
        if c.view >= vc.new_view {
            return Err("vc-cert-future-view");
        }
        if c.slot < low || c.slot.0 >= low.0.saturating_add(window) {
            return Err("vc-cert-out-of-window");
        }
        verify_prepared_cert(cfg, c)?;
    }
    verify_pre_prepared_claims(cfg, vc, low)
}

/// The Q set of a `PrepareAuth::Mac` VIEW-CHANGE: ascending by (slot,
/// digest) without repeats, inside the sender's window, from views before
/// the one asked for, at most `MAX_PRE_PREPARED_PER_SLOT` per slot. Under
/// `PrepareAuth::Signature` there is none.
fn verify_pre_prepared_claims(cfg: &ClusterConfig, vc: &ViewChange, low: Slot) -> CertResult {
    if cfg.params.prepare_auth == PrepareAuth::Signature {
        return if vc.pre_prepared.is_empty() {
            Ok(())
        } else {
            Err("vc-unexpected-pre-prepared")
        };
    }
    let window = cfg.params.window_slots;
    let mut last: Option<(Slot, Digest)> = None;
    let mut per_slot = 0usize;
    for q in &vc.pre_prepared {
        if last.is_some_and(|l| (q.slot, q.digest) <= l) {
            return Err("vc-pre-prepared-unordered");
        }
        per_slot = if last.is_some_and(|(s, _)| s == q.slot) {
            per_slot + 1
        } else {
            1
        };
        if per_slot > MAX_PRE_PREPARED_PER_SLOT {
            return Err("vc-too-many-pre-prepared");
        }
        last = Some((q.slot, q.digest));
        if q.view >= vc.new_view {
            return Err("vc-pre-prepared-future-view");
        }
        if q.slot < low || q.slot.0 >= low.0.saturating_add(window) {
            return Err("vc-pre-prepared-out-of-window");
        }
    }
    Ok(())
}
