//! Who does what: quorum sizes, the new-view primary of a lane, and which
//! lane's pillar is on checkpoint duty.

use chorus_core::{
    Cell, ClusterConfig, Exclusion, LaneId, LeaderRotation, OrderingMode, ReplicaId, Seq, Slot, View,
};

/// Matching commits needed to decide, and the size of a prepared certificate
/// counting the pre-prepare (PBFT §4.2: 2f+1 when n = 3f+1).
///
/// The `weak-quorum-for-tests` feature lowers it by one so the simulator can
/// show that its agreement checker catches the resulting forks.
pub fn lane_quorum(cfg: &ClusterConfig) -> usize {
    let q = cfg.quorum();
    if cfg!(feature = "weak-quorum-for-tests") {
        q.saturating_sub(1).max(1)
    } else {
        q
    }
}

/// Prepares from replicas other than the proposer that, with the pre-prepare,
/// make a batch prepared (PBFT §4.2: 2f).
pub fn prepares_needed(cfg: &ClusterConfig) -> usize {
    lane_quorum(cfg) - 1
}

/// The replica that assembles NEW-VIEW for `(lane, view)` and pre-prepares
/// its re-proposals (PBFT §4.4).
///
/// With `Fixed` rotation it is the view's primary `v mod n`, i.e. plain PBFT.
/// With `BlockWise` rotation every slot has its own leader, so there is no
/// single primary; we use `(v + lane) mod n`, which depends only on
/// information every replica shares (unlike "the leader of the first slot
/// above the checkpoint", which differs between replicas with different
/// checkpoints) and spreads new-view duty over replicas when several lanes
/// change view at once (COP §4.3.2: rotate roles so no replica is the
/// bottleneck).
pub fn new_view_primary(cfg: &ClusterConfig, lane: LaneId, view: View) -> ReplicaId {
    let n = cfg.n() as u64;
    if cfg.params.mode == OrderingMode::Rcc {
        return coordinating_leader(cfg, lane, view);
    }
    if cfg.params.mode == OrderingMode::Sarek {
        // SAREK §IV-A: the new view's leader of the partition assembles it.
        return cfg.preferred_leader(lane, view);
    }
    match cfg.params.leader_rotation {
        LeaderRotation::Fixed => ReplicaId((view.0 % n) as u32),
        LeaderRotation::BlockWise => ReplicaId(((view.0 % n + lane.0 as u64 % n) % n) as u32),
    }
}

/// RCC §III-C: the leader `L_i` of the coordinating consensus that decides
/// `stop(i; E)` for instance `i` in (lane) view `v ≥ 1`: it collects the 2f+1
/// FAILURE messages (our VIEW-CHANGEs, which carry the replica's prepared
/// state, Assumption A3) and proposes the stop as a NEW-VIEW. Never the
/// instance's own primary, whose failure is what is being recovered; a failed
/// `L_i` is replaced by the ordinary view change to `v + 1` (PBFT §4.4),
/// rotating over the other `n − 1` replicas.
pub fn coordinating_leader(cfg: &ClusterConfig, lane: LaneId, view: View) -> ReplicaId {
    let n = cfg.n().max(2) as u64;
    let primary = cfg.instance_primary(lane).0 as u64;
    let step = 1 + view.0.saturating_sub(1) % (n - 1);
    ReplicaId(((primary + step) % n) as u32)
}

/// The leader of slot `slot` of `lane` in `view` (COP §4.3.2).
pub fn slot_leader(cfg: &ClusterConfig, lane: LaneId, slot: Slot, view: View) -> ReplicaId {
    cfg.leader(Cell { lane, slot }, view)
}

/// The leader of `slot` in a view whose NEW-VIEW excluded `excluded`
/// (`lane/penalty.rs`): block-wise rotation over the replicas not excluded at
/// that slot. A pure function of the view, the slot and the NEW-VIEW, so every
/// replica in the view agrees; without exclusions it is `slot_leader`.
pub fn slot_leader_in(
    cfg: &ClusterConfig,
    lane: LaneId,
    slot: Slot,
    view: View,
    excluded: &[Exclusion],
) -> ReplicaId {
    let plain = slot_leader(cfg, lane, slot, view);
    if cfg.params.mode == OrderingMode::Sarek {
        // SAREK §IV-A: one leader per partition and view, never block-wise.
        return plain;
    }
    if cfg.params.mode == OrderingMode::Rcc {
        // RCC §III-C: while stopped (`penalty::rcc_stop`), the instance's
        // rounds are proposed by its coordinating leader (docs/decisions.md
        // "RCC: who fills a stopped instance's rounds").
        let stopped = excluded.iter().any(|e| e.replica == plain && slot < e.until);
        return if stopped {
            coordinating_leader(cfg, lane, view)
        } else {
            plain
        };
    }
    if cfg.params.leader_rotation != LeaderRotation::BlockWise {
        return plain;
    }
    let is_out = |r: ReplicaId| excluded.iter().any(|e| e.replica == r && slot < e.until);
    let active = cfg.replica_ids().filter(|r| !is_out(*r)).count() as u64;
    if active == cfg.n() as u64 || active == 0 {
        return plain;
    }
    let k = ((slot.0 % active) + (view.0 % active)) % active;
    cfg.replica_ids()
        .filter(|r| !is_out(*r))
        .nth(k as usize)
        .unwrap_or(plain)
}

/// COP §4.2.2: checkpoint duty rotates round-robin over pillars. The
/// checkpoint at global position `seq` (a multiple of K) is the duty of lane
/// `(seq / K) mod P`: that lane's pillar is to gather the votes and tell the
/// other pillars when the checkpoint is stable. (The lane owning position
/// `seq - 1` would always be lane `P - 1`, because K is a multiple of P, so
/// it would not rotate.) In this single state machine the `Checkpointer` is
/// one component and checkpoint votes carry no lane, so they travel on
/// pillar 0 today; this function is what the lane split is to route them
/// by (docs/lane-split.md).
pub fn checkpoint_duty_lane(cfg: &ClusterConfig, seq: Seq) -> LaneId {
    let k = cfg.params.checkpoint_interval.max(1);
    LaneId(((seq.0 / k) % cfg.lanes() as u64) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::ProtocolParams;

    #[test]
    fn new_view_primary_is_pbft_primary_in_fixed_mode_and_rotates_over_lanes_in_blockwise() {
        let mut p = ProtocolParams {
            pillars: 4,
            checkpoint_interval: 16,
            leader_rotation: LeaderRotation::BlockWise,
            ..ProtocolParams::default()
        };
        let c = ClusterConfig::for_testing(4, 1, p.clone(), 1).0;
        assert_eq!(new_view_primary(&c, LaneId(0), View(1)), ReplicaId(1));
        assert_eq!(new_view_primary(&c, LaneId(3), View(1)), ReplicaId(0));
        p.leader_rotation = LeaderRotation::Fixed;
        let c = ClusterConfig::for_testing(4, 1, p, 1).0;
        assert_eq!(new_view_primary(&c, LaneId(3), View(5)), ReplicaId(1));
    }

    #[test]
    fn excluded_replicas_lead_no_slot_until_their_penalty_ends() {
        let p = ProtocolParams {
            pillars: 1,
            mode: chorus_core::OrderingMode::Pbft,
            checkpoint_interval: 4,
            leader_rotation: LeaderRotation::BlockWise,
            ..ProtocolParams::default()
        };
        let c = ClusterConfig::for_testing(4, 1, p, 1).0;
        let ex = [Exclusion {
            replica: ReplicaId(2),
            failures: 1,
            until: Slot(100),
        }];
        let leaders: Vec<u32> = (0..100)
            .map(|s| slot_leader_in(&c, LaneId(0), Slot(s), View(3), &ex).0)
            .collect();
        assert!(!leaders.contains(&2));
        for r in [0, 1, 3] {
            assert!(leaders.contains(&r));
        }
        assert_eq!(
            slot_leader_in(&c, LaneId(0), Slot(103), View(3), &ex),
            slot_leader(&c, LaneId(0), Slot(103), View(3))
        );
        assert_eq!(
            slot_leader_in(&c, LaneId(0), Slot(7), View(3), &[]),
            slot_leader(&c, LaneId(0), Slot(7), View(3))
        );
    }

    #[test]
    fn checkpoint_duty_rotates_over_lanes() {
        let p = ProtocolParams {
            pillars: 4,
            checkpoint_interval: 16,
            ..ProtocolParams::default()
        };
        let c = ClusterConfig::for_testing(4, 1, p, 1).0;
        let duty: Vec<u32> = (1..=5).map(|i| checkpoint_duty_lane(&c, Seq(16 * i)).0).collect();
        assert_eq!(duty, vec![1, 2, 3, 0, 1]);
    }

    #[test]
    fn quorums() {
        let c = ClusterConfig::for_testing(4, 1, ProtocolParams::default(), 1).0;
        let weak = cfg!(feature = "weak-quorum-for-tests") as usize;
        assert_eq!(lane_quorum(&c), 3 - weak);
        assert_eq!(prepares_needed(&c), 2 - weak);
    }
}
