//! Lying VIEW-CHANGEs for `PrepareAuth::Mac` clusters (nv-forge colluders).
//!
//! Without signed prepares a VIEW-CHANGE's prepared entries are claims that
//! nobody can check (Castro & Liskov's P set). The most damaging lie is a
//! claim that a *different* batch prepared in a *later* view at every slot:
//! under the naive "highest view wins" rule of PBFT §4.4 it overrides every
//! committed batch. The colluders claim the no-op batch (always available,
//! so a NEW-VIEW that picks it really re-proposes it), in the highest view
//! below the new one in which one of them may sign the pre-prepare, and all
//! of them say they pre-prepared it there (the Q set), which is f votes:
//! one short of the f+1 that `chorus_order::lane::plan` asks for.

use chorus_core::LeaderRotation;
use chorus_core::{
    Batch, ClusterConfig, ClusterTag, Identity, PrePrepare, PrePrepared, PreparedCert, ReplicaId, SigKind,
    Signature, Slot, View, ViewChange,
};
use chorus_order::certs::{low_slot_of, pre_prepare_signer};
use chorus_order::roles::{new_view_primary, slot_leader};
use std::collections::BTreeMap;

/// Views searched below the new one for a view a colluder may sign in.
const VIEWS_SEARCHED: u64 = 64;

/// `honest` with its claims replaced: a no-op "prepared" at every slot of
/// its window, in the highest view a colluder can sign, and a matching Q
/// entry; signed by `honest.replica`'s key from `colluders`.
pub fn lying_view_change(
    cfg: &ClusterConfig,
    tag: &ClusterTag,
    colluders: &BTreeMap<ReplicaId, Identity>,
    honest: &ViewChange,
) -> Option<ViewChange> {
    let me = colluders.get(&honest.replica)?;
    let low = low_slot_of(cfg, honest.stable.as_ref());
    let noop = Batch::noop_digest();
    let mut prepared = Vec::new();
    let mut pre_prepared = Vec::new();
    for s in low.0..low.0.saturating_add(cfg.params.window_slots) {
        let slot = Slot(s);
        let Some((view, sig)) = signable_view(cfg, tag, colluders, honest, slot) else {
            continue;
        };
        prepared.push(PreparedCert {
            lane: honest.lane,
            view,
            slot,
            digest: noop,
            pre_prepare_sig: sig,
            prepares: vec![],
        });
        pre_prepared.push(PrePrepared {
            slot,
            digest: noop,
            view,
        });
    }
    let mut vc = ViewChange {
        prepared,
        pre_prepared,
        sig: Signature([0; 64]),
        ..honest.clone()
    };
    vc.sig = me.sign_bound(tag, SigKind::ViewChange, &vc.signing_digest());
    Some(vc)
}

/// The highest view below `honest.new_view` in which some colluder's
/// pre-prepare of the no-op at `slot` verifies, with that signature.
fn signable_view(
    cfg: &ClusterConfig,
    tag: &ClusterTag,
    colluders: &BTreeMap<ReplicaId, Identity>,
    honest: &ViewChange,
    slot: Slot,
) -> Option<(View, Signature)> {
    let noop = Batch::noop_digest();
    let top = honest.new_view.0.checked_sub(1)?;
    (top.saturating_sub(VIEWS_SEARCHED)..=top).rev().find_map(|v| {
        let view = View(v);
        // The signers `pre_prepare_signer` accepts (checked below), without
        // signing for every view: the slot's leader, the new-view primary,
        // and under block-wise rotation anyone (view > 0).
        let any = v > 0 && cfg.params.leader_rotation == LeaderRotation::BlockWise;
        let who = [
            slot_leader(cfg, honest.lane, slot, view),
            new_view_primary(cfg, honest.lane, view),
        ]
        .into_iter()
        .find(|r| colluders.contains_key(r))
        .or_else(|| any.then(|| *colluders.keys().next().expect("non-empty")))?;
        let sd = PrePrepare::signing_digest(honest.lane, view, slot, &noop);
        let sig = colluders[&who].sign_bound(tag, SigKind::PrePrepare, &sd);
        let signer = pre_prepare_signer(cfg, honest.lane, view, slot, &noop, &sig)?;
        colluders.contains_key(&signer).then_some((view, sig))
    })
}
