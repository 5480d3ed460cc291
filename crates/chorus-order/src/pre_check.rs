//! What a pillar checks of a peer's message before the protocol core sees
//! it (COP §4: the per-message work that needs no total order runs in the
//! pillar that read the message, in parallel with the other pillars).
//!
//! The core decides everything still: this only moves two pure
//! computations it would make anyway off its thread. A signature's verdict
//! travels as `PreVerified` and lands in the core thread's verdict memo; a
//! pre-prepare's requests carry their content digests in their memo
//! (`chorus_core::digest_memo`). Neither can change an outcome: a verdict
//! is a function of (key, message, signature) and only valid ones travel;
//! a digest memo is used only while the request holds the fields it
//! hashed.
//!
//! Work is done only for messages the core will check in the normal case,
//! judged from the core's last published status: the lane's current view,
//! a slot inside its window, and (pre-prepares) the slot's rotation leader
//! as sender or (prepares) a sender that is not. Anything else, view
//! changes included, the core checks itself as before, so a Byzantine
//! replica cannot make a pillar verify more than it could make the core
//! verify.

use crate::roles::slot_leader;
use crate::sigkeys::ReplicaKeys;
use chorus_core::status_report::CoreStatus;
use chorus_core::verify_memo::PreVerified;
use chorus_core::{
    ClusterConfig, LaneId, PrePrepare, Prepare, PrepareAuth, ReplicaId, ReplicaMsg, SigKind, Slot, View,
};

/// Which checks a pillar makes ahead of the core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreCheckPolicy {
    /// Verify prepares too. The core verifies only the 2f − 1 others'
    /// prepares a certificate needs (`Lane::check_prepared`: its own
    /// counts), so checking every prepare on arrival verifies ~50 % more
    /// signatures at n = 4 (12 instead of 8 per slot over the cluster).
    /// Worth it only where pillar threads have cores of their own; on a
    /// machine whose cores are all busy it is slower (2 cores, 16 pillars:
    /// 12.6 k vs 16.7 k ops/s, BENCHMARKS.md "checked in the pillars").
    pub eager_prepares: bool,
}

/// Check `msg` from `from` ahead of the core: the valid signatures found,
/// for the core thread to install before it handles `msg`.
pub fn pre_check(
    cfg: &ClusterConfig,
    keys: &ReplicaKeys,
    status: &CoreStatus,
    from: ReplicaId,
    msg: &ReplicaMsg,
    policy: PreCheckPolicy,
) -> PreVerified {
    let mut pre = PreVerified::default();
    match msg {
        ReplicaMsg::PrePrepare(pp) => {
            if !in_normal_case(cfg, status, pp.lane, pp.view, pp.slot)
                || from != slot_leader(cfg, pp.lane, pp.slot, pp.view)
            {
                return pre;
            }
            // The core names every request by its content digest (batch
            // digest, authenticator check, pool): computed here once.
            for r in &pp.batch.requests {
                r.digest();
            }
            let sd = PrePrepare::signing_digest(pp.lane, pp.view, pp.slot, &pp.digest);
            keys.verify_ahead(from, SigKind::PrePrepare, &sd, &pp.sig, &mut pre);
        }
        ReplicaMsg::Prepare(p) => {
            if !policy.eager_prepares
                || cfg.params.prepare_auth != PrepareAuth::Signature
                || p.replica != from
                || !in_normal_case(cfg, status, p.lane, p.view, p.slot)
                || from == slot_leader(cfg, p.lane, p.slot, p.view)
            {
                return pre;
            }
            let sd = Prepare::signing_digest(p.lane, p.view, p.slot, &p.digest, p.replica);
            keys.verify_ahead(from, SigKind::Prepare, &sd, &p.sig, &mut pre);
        }
        _ => {}
    }
    pre
}

/// The lane's current view (as last published) and a slot the core would
/// accept now: at or above its first undecided slot, inside its window.
fn in_normal_case(cfg: &ClusterConfig, status: &CoreStatus, lane: LaneId, view: View, slot: Slot) -> bool {
    let (Some(v), Some(d)) = (
        status.views.get(lane.index()),
        status.lane_detail.get(lane.index()),
    ) else {
        return false;
    };
    *v == view.0
        && !d.view_changing
        && slot.0 >= d.next_undecided
        && slot.0 < d.next_undecided.saturating_add(cfg.params.window_slots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::status_report::LaneDetail;
    use chorus_core::verify_memo::{memoize_verifications, verdict};
    use chorus_core::{Batch, ClusterTag, Digest, Identity, ProtocolParams, Request};

    const EAGER: PreCheckPolicy = PreCheckPolicy { eager_prepares: true };

    struct Setup {
        cfg: ClusterConfig,
        replicas: Vec<Identity>,
        clients: Vec<Identity>,
        status: CoreStatus,
    }

    fn setup() -> Setup {
        let params = ProtocolParams {
            leader_rotation: chorus_core::LeaderRotation::Fixed,
            ..ProtocolParams::default()
        };
        let (cfg, replicas, clients) = ClusterConfig::for_testing(4, 2, params, 11);
        let status = CoreStatus {
            views: vec![0; cfg.lanes() as usize],
            lane_detail: (0..cfg.lanes())
                .map(|_| LaneDetail {
                    next_undecided: 5,
                    ..LaneDetail::default()
                })
                .collect(),
            ..CoreStatus::default()
        };
        Setup {
            cfg,
            replicas,
            clients,
            status,
        }
    }

    fn pre_prepare(s: &Setup, by: usize, slot: u64, corrupt: bool) -> PrePrepare {
        let req = Request::with_macs(
            &ClusterTag::of(&s.cfg),
            chorus_core::ClientId(0),
            chorus_core::RequestSeq(1),
            0,
            bytes::Bytes::from_static(b"op"),
            &s.replicas
                .iter()
                .map(|r| s.clients[0].pairwise_key(&r.public()))
                .collect::<Vec<_>>(),
        );
        let batch = Batch::new(vec![req], 0);
        let digest = batch.digest();
        let (lane, view, slot) = (LaneId(0), View(0), Slot(slot));
        let sd = PrePrepare::signing_digest(lane, view, slot, &digest);
        let mut sig = s.replicas[by].sign_bound(&ClusterTag::of(&s.cfg), SigKind::PrePrepare, &sd);
        if corrupt {
            sig.0[0] ^= 1;
        }
        PrePrepare {
            lane,
            view,
            slot,
            digest,
            batch,
            sig,
        }
    }

    /// A valid pre-prepare from the slot's leader travels with its verdict,
    /// which the asking thread then answers from; a bad signature, another
    /// sender, a slot outside the window or a stale view travel without.
    #[test]
    fn only_valid_normal_case_signatures_travel() {
        let s = setup();
        let keys = ReplicaKeys::new(&s.cfg);
        let leader = ReplicaId(0);
        let pp = pre_prepare(&s, 0, 6, false);
        let pre = pre_check(
            &s.cfg,
            &keys,
            &s.status,
            leader,
            &ReplicaMsg::PrePrepare(pp.clone()),
            EAGER,
        );
        assert_eq!(pre.len(), 1);
        let bad = pre_prepare(&s, 0, 6, true);
        assert!(pre_check(
            &s.cfg,
            &keys,
            &s.status,
            leader,
            &ReplicaMsg::PrePrepare(bad),
            EAGER
        )
        .is_empty());
        let by_backup = pre_prepare(&s, 1, 6, false);
        assert!(
            pre_check(
                &s.cfg,
                &keys,
                &s.status,
                ReplicaId(1),
                &ReplicaMsg::PrePrepare(by_backup),
                EAGER
            )
            .is_empty(),
            "a backup's pre-prepare is left to the core"
        );
        let below = pre_prepare(&s, 0, 4, false);
        assert!(pre_check(
            &s.cfg,
            &keys,
            &s.status,
            leader,
            &ReplicaMsg::PrePrepare(below),
            EAGER
        )
        .is_empty());
        let beyond = pre_prepare(&s, 0, 5 + s.cfg.params.window_slots, false);
        assert!(pre_check(
            &s.cfg,
            &keys,
            &s.status,
            leader,
            &ReplicaMsg::PrePrepare(beyond),
            EAGER
        )
        .is_empty());
        let mut changed = s.status.clone();
        changed.views[0] = 1;
        assert!(pre_check(
            &s.cfg,
            &keys,
            &changed,
            leader,
            &ReplicaMsg::PrePrepare(pp.clone()),
            EAGER
        )
        .is_empty());

        memoize_verifications(64);
        pre.install();
        let sd = PrePrepare::signing_digest(pp.lane, pp.view, pp.slot, &pp.digest);
        let msg = ClusterTag::of(&s.cfg).bind(SigKind::PrePrepare, &sd);
        let key = s.replicas[0].public().sign;
        assert!(verdict(&key, &msg, &pp.sig, || unreachable!(
            "verified by the pillar"
        )));
        memoize_verifications(0);
    }

    #[test]
    fn prepares_from_backups_are_checked_ahead_and_the_leaders_are_not() {
        let s = setup();
        let keys = ReplicaKeys::new(&s.cfg);
        let tag = ClusterTag::of(&s.cfg);
        let d = Digest::of(b"batch");
        let prepare = |by: u32| {
            let sd = Prepare::signing_digest(LaneId(0), View(0), Slot(7), &d, ReplicaId(by));
            Prepare {
                lane: LaneId(0),
                view: View(0),
                slot: Slot(7),
                digest: d,
                replica: ReplicaId(by),
                sig: s.replicas[by as usize].sign_bound(&tag, SigKind::Prepare, &sd),
            }
        };
        let ok = pre_check(
            &s.cfg,
            &keys,
            &s.status,
            ReplicaId(2),
            &ReplicaMsg::Prepare(prepare(2)),
            EAGER,
        );
        assert_eq!(ok.len(), 1);
        assert!(
            pre_check(
                &s.cfg,
                &keys,
                &s.status,
                ReplicaId(3),
                &ReplicaMsg::Prepare(prepare(2)),
                EAGER
            )
            .is_empty(),
            "a prepare claiming another sender"
        );
        assert!(
            pre_check(
                &s.cfg,
                &keys,
                &s.status,
                ReplicaId(0),
                &ReplicaMsg::Prepare(prepare(0)),
                EAGER
            )
            .is_empty(),
            "the leader sends no prepare"
        );
        let mut cfg = s.cfg.clone();
        cfg.params.prepare_auth = PrepareAuth::Mac;
        assert!(pre_check(
            &cfg,
            &keys,
            &s.status,
            ReplicaId(2),
            &ReplicaMsg::Prepare(prepare(2)),
            EAGER
        )
        .is_empty());
    }
}
