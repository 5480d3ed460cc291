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
//! Work is done only for messages the core checks in the normal case,
//! judged from the core's last published status (`LaneNow`): the lane's
//! current view, no view change or RCC stop in progress, a slot inside its
//! window, and (pre-prepares) the slot's rotation leader as sender or
//! (prepares) a sender that is not. And at most once per (lane, view,
//! slot, sender, kind) while the slot is undecided, as the core verifies at
//! most one pre-prepare per slot from its leader and one prepare per
//! sender: a Byzantine replica resending or varying a message gets no
//! second verification here. Anything else, view changes included, the
//! core checks itself as before. What a replica outside the published
//! picture (a leader a NEW-VIEW excluded) can cost a pillar is one
//! verification per slot of its rotation per view.

use crate::roles::slot_leader;
use crate::sigkeys::ReplicaKeys;
use chorus_core::status_report::CoreStatus;
use chorus_core::verify_memo::PreVerified;
use chorus_core::{
    ClusterConfig, LaneId, PrePrepare, Prepare, PrepareAuth, ReplicaId, ReplicaMsg, SigKind, Slot, View,
};
use std::collections::BTreeSet;

/// Which checks a pillar makes ahead of the core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreCheckPolicy {
    /// Verify pre-prepares and name their requests. Off in `rcc` for now:
    /// on 16 cores `rcc` measured 0.85× of the build before (0.81× with
    /// eager prepares), against 1.17× for `cop` at 4 pillars (BENCHMARKS.md
    /// "checked in the pillars"); why is open.
    pub pre_prepares: bool,
    /// Verify prepares too. The core verifies only the 2f − 1 others'
    /// prepares a certificate needs (`Lane::check_prepared`: its own
    /// counts), so checking every prepare on arrival verifies ~50 % more
    /// signatures at n = 4 (12 instead of 8 per slot over the cluster).
    /// Worth it only where pillar threads have cores of their own; on a
    /// machine whose cores are all busy it is slower (2 cores, 16 pillars:
    /// 12.6 k vs 16.7 k ops/s, BENCHMARKS.md "checked in the pillars").
    pub eager_prepares: bool,
}

/// One lane as the core last published it, copied out of its status so
/// the status is not held while signatures are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneNow {
    pub view: View,
    pub next_undecided: Slot,
    /// A view change or an RCC stop is in progress: the proposers differ
    /// from the rotation, leave everything to the core.
    pub unsettled: bool,
}

impl LaneNow {
    pub fn from_status(status: &CoreStatus, lane: LaneId) -> Option<LaneNow> {
        let view = *status.views.get(lane.index())?;
        let d = status.lane_detail.get(lane.index())?;
        Some(LaneNow {
            view: View(view),
            next_undecided: Slot(d.next_undecided),
            unsettled: d.view_changing || d.stopped_until.is_some(),
        })
    }
}

/// What was checked already, per lane: (slot, view, sender, is a
/// pre-prepare). Entries below the lane's first undecided slot are dropped,
/// so each lane holds at most a window of slots times n senders.
type Seen = BTreeSet<(Slot, View, ReplicaId, bool)>;

/// A pillar's checker: the peers' keys, the policy, and what it checked.
pub struct PreChecker {
    keys: ReplicaKeys,
    policy: PreCheckPolicy,
    seen: Vec<Seen>,
    /// Bound on one lane's `seen` (window × n, twice): only reached if the
    /// core's published status stops moving; then the lane starts afresh.
    seen_max: usize,
}

impl PreChecker {
    pub fn new(cfg: &ClusterConfig, policy: PreCheckPolicy) -> PreChecker {
        PreChecker {
            keys: ReplicaKeys::new(cfg),
            policy,
            seen: vec![Seen::new(); cfg.lanes() as usize],
            seen_max: 2 * cfg.params.window_slots as usize * cfg.n(),
        }
    }

    pub fn policy(&self) -> PreCheckPolicy {
        self.policy
    }

    /// Check `msg` from `from` ahead of the core, `lane` being its lane as
    /// last published: the valid signatures found, for the core thread to
    /// install before it handles `msg`.
    pub fn check(
        &mut self,
        cfg: &ClusterConfig,
        lane: Option<LaneNow>,
        from: ReplicaId,
        msg: &ReplicaMsg,
    ) -> PreVerified {
        let mut pre = PreVerified::default();
        let Some(now) = lane else {
            return pre;
        };
        match msg {
            ReplicaMsg::PrePrepare(pp) => {
                if !self.policy.pre_prepares
                    || from != slot_leader(cfg, pp.lane, pp.slot, pp.view)
                    || !self.fresh(cfg, now, pp.lane, pp.view, pp.slot, from, true)
                {
                    return pre;
                }
                let sd = PrePrepare::signing_digest(pp.lane, pp.view, pp.slot, &pp.digest);
                if self
                    .keys
                    .verify_ahead(from, SigKind::PrePrepare, &sd, &pp.sig, &mut pre)
                {
                    // The core names every request by its content digest
                    // (batch digest, authenticator check, pool): once, here.
                    for r in &pp.batch.requests {
                        r.digest();
                    }
                }
            }
            ReplicaMsg::Prepare(p) => {
                if !self.policy.eager_prepares
                    || cfg.params.prepare_auth != PrepareAuth::Signature
                    || p.replica != from
                    || from == slot_leader(cfg, p.lane, p.slot, p.view)
                    || !self.fresh(cfg, now, p.lane, p.view, p.slot, from, false)
                {
                    return pre;
                }
                let sd = Prepare::signing_digest(p.lane, p.view, p.slot, &p.digest, p.replica);
                self.keys
                    .verify_ahead(from, SigKind::Prepare, &sd, &p.sig, &mut pre);
            }
            _ => {}
        }
        pre
    }

    /// The lane's current view, settled, a slot the core would accept now
    /// (at or above its first undecided slot, inside its window), and not
    /// checked before for this sender and kind; remembers it.
    #[allow(clippy::too_many_arguments)]
    fn fresh(
        &mut self,
        cfg: &ClusterConfig,
        now: LaneNow,
        lane: LaneId,
        view: View,
        slot: Slot,
        from: ReplicaId,
        pre_prepare: bool,
    ) -> bool {
        if now.view != view
            || now.unsettled
            || slot < now.next_undecided
            || slot.0 >= now.next_undecided.0.saturating_add(cfg.params.window_slots)
        {
            return false;
        }
        let Some(seen) = self.seen.get_mut(lane.index()) else {
            return false;
        };
        while seen.first().is_some_and(|(s, ..)| *s < now.next_undecided) {
            seen.pop_first();
        }
        if seen.len() >= self.seen_max {
            seen.clear();
        }
        seen.insert((slot, view, from, pre_prepare))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::status_report::LaneDetail;
    use chorus_core::verify_memo::{memoize_verifications, verdict};
    use chorus_core::{Batch, ClusterTag, Digest, Identity, ProtocolParams, Request};

    const EAGER: PreCheckPolicy = PreCheckPolicy {
        pre_prepares: true,
        eager_prepares: true,
    };

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

    impl Setup {
        fn lane0(&self) -> Option<LaneNow> {
            LaneNow::from_status(&self.status, LaneId(0))
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
    /// sender, a slot outside the window, a stale view, a view change in
    /// progress or a second copy travel without.
    #[test]
    fn only_valid_normal_case_signatures_travel_once() {
        let s = setup();
        let leader = ReplicaId(0);
        let pp = ReplicaMsg::PrePrepare(pre_prepare(&s, 0, 6, false));
        let mut c = PreChecker::new(&s.cfg, EAGER);
        let pre = c.check(&s.cfg, s.lane0(), leader, &pp);
        assert_eq!(pre.len(), 1);
        assert!(
            c.check(&s.cfg, s.lane0(), leader, &pp).is_empty(),
            "a second copy is left to the core (and its memo)"
        );
        let mut c = PreChecker::new(&s.cfg, EAGER);
        let bad = ReplicaMsg::PrePrepare(pre_prepare(&s, 0, 7, true));
        assert!(c.check(&s.cfg, s.lane0(), leader, &bad).is_empty());
        let by_backup = ReplicaMsg::PrePrepare(pre_prepare(&s, 1, 6, false));
        assert!(
            c.check(&s.cfg, s.lane0(), ReplicaId(1), &by_backup).is_empty(),
            "a backup's pre-prepare is left to the core"
        );
        let below = ReplicaMsg::PrePrepare(pre_prepare(&s, 0, 4, false));
        assert!(c.check(&s.cfg, s.lane0(), leader, &below).is_empty());
        let off = PreCheckPolicy {
            pre_prepares: false,
            ..EAGER
        };
        assert!(
            PreChecker::new(&s.cfg, off)
                .check(&s.cfg, s.lane0(), leader, &pp)
                .is_empty(),
            "pre-prepares off"
        );
        let beyond = ReplicaMsg::PrePrepare(pre_prepare(&s, 0, 5 + s.cfg.params.window_slots, false));
        assert!(c.check(&s.cfg, s.lane0(), leader, &beyond).is_empty());
        let mut later = s.status.clone();
        later.views[0] = 1;
        assert!(c
            .check(&s.cfg, LaneNow::from_status(&later, LaneId(0)), leader, &pp)
            .is_empty());
        let mut changing = s.status.clone();
        changing.lane_detail[0].view_changing = true;
        assert!(c
            .check(&s.cfg, LaneNow::from_status(&changing, LaneId(0)), leader, &pp)
            .is_empty());
        assert!(
            c.check(&s.cfg, None, leader, &pp).is_empty(),
            "no published status"
        );

        memoize_verifications(64);
        pre.install();
        let ReplicaMsg::PrePrepare(pp) = pp else {
            unreachable!()
        };
        let sd = PrePrepare::signing_digest(pp.lane, pp.view, pp.slot, &pp.digest);
        let msg = ClusterTag::of(&s.cfg).bind(SigKind::PrePrepare, &sd);
        let key = s.replicas[0].public().sign;
        assert!(verdict(&key, &msg, &pp.sig, || unreachable!(
            "verified by the pillar"
        )));
        memoize_verifications(0);
    }

    #[test]
    fn prepares_from_backups_are_checked_once_and_only_when_eager() {
        let s = setup();
        let tag = ClusterTag::of(&s.cfg);
        let prepare = |by: u32, d: &[u8]| {
            let d = Digest::of(d);
            let sd = Prepare::signing_digest(LaneId(0), View(0), Slot(7), &d, ReplicaId(by));
            ReplicaMsg::Prepare(Prepare {
                lane: LaneId(0),
                view: View(0),
                slot: Slot(7),
                digest: d,
                replica: ReplicaId(by),
                sig: s.replicas[by as usize].sign_bound(&tag, SigKind::Prepare, &sd),
            })
        };
        let mut c = PreChecker::new(&s.cfg, EAGER);
        assert_eq!(
            c.check(&s.cfg, s.lane0(), ReplicaId(2), &prepare(2, b"x")).len(),
            1
        );
        assert!(
            c.check(&s.cfg, s.lane0(), ReplicaId(2), &prepare(2, b"y"))
                .is_empty(),
            "a second prepare for the slot, even with another digest, is the core's"
        );
        assert!(
            c.check(&s.cfg, s.lane0(), ReplicaId(3), &prepare(2, b"x"))
                .is_empty(),
            "a prepare claiming another sender"
        );
        assert!(
            c.check(&s.cfg, s.lane0(), ReplicaId(0), &prepare(0, b"x"))
                .is_empty(),
            "the leader sends no prepare"
        );
        let mut lazy = PreChecker::new(
            &s.cfg,
            PreCheckPolicy {
                eager_prepares: false,
                ..EAGER
            },
        );
        assert!(
            lazy.check(&s.cfg, s.lane0(), ReplicaId(2), &prepare(2, b"x"))
                .is_empty(),
            "without eager prepares the core verifies only those it needs"
        );
        let mut cfg = s.cfg.clone();
        cfg.params.prepare_auth = PrepareAuth::Mac;
        let mut c = PreChecker::new(&cfg, EAGER);
        assert!(c
            .check(&cfg, s.lane0(), ReplicaId(2), &prepare(2, b"x"))
            .is_empty());
    }

    /// What a lane remembers is dropped as its first undecided slot passes.
    #[test]
    fn the_memory_of_checked_slots_follows_the_window() {
        let s = setup();
        let mut c = PreChecker::new(&s.cfg, EAGER);
        for slot in 5..9 {
            let pp = ReplicaMsg::PrePrepare(pre_prepare(&s, 0, slot, false));
            assert_eq!(c.check(&s.cfg, s.lane0(), ReplicaId(0), &pp).len(), 1);
        }
        assert_eq!(c.seen[0].len(), 4);
        let mut moved = s.status.clone();
        moved.lane_detail[0].next_undecided = 8;
        let pp = ReplicaMsg::PrePrepare(pre_prepare(&s, 0, 9, false));
        let now = LaneNow::from_status(&moved, LaneId(0));
        assert_eq!(c.check(&s.cfg, now, ReplicaId(0), &pp).len(), 1);
        assert_eq!(c.seen[0].len(), 2, "slots 8 and 9 remain");
    }
}
