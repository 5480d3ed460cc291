//! Whether the lane groups run on their pillars' threads, and handing them
//! out (docs/lane-split.md step C; COP §4: each pillar runs whole PBFT
//! instances of its lanes, the in-order part is reached by messages).

use chorus_core::{ClusterConfig, Millis, OrderingMode};
use chorus_order::{Event, GroupPiece, Outbox, Replica};

/// `cop` and `sarek` with more than one pillar run each lane's consensus
/// on its pillar (one lane, or partition, per pillar: COP §4; SAREK §IV,
/// one PBFT leader per partition). Other modes keep every lane in one
/// group on the core (docs/decisions.md "Lane groups and the hub inside
/// the ordering core"); one pillar hosts the core anyway.
/// `CHORUS_LANE_GROUPS=core|pillars` overrides the default for
/// measurements (`pillars` only takes effect where the groups can be
/// split this way).
pub fn lanes_on_pillars(config: &ClusterConfig) -> bool {
    let possible = matches!(config.params.mode, OrderingMode::Cop | OrderingMode::Sarek)
        && config.params.pillars > 1
        && config.lanes() == config.params.pillars;
    match std::env::var("CHORUS_LANE_GROUPS").as_deref() {
        Ok("core") => false,
        Ok("pillars") => possible,
        Ok(other) => {
            tracing::warn!(
                value = other,
                "CHORUS_LANE_GROUPS is core or pillars; using the default"
            );
            possible
        }
        Err(_) => possible,
    }
}

/// Take the lane groups out of `replica` (group `g` for pillar `g`), each
/// with the part of `out` that is its own (its lanes' timers); the rest of
/// `out` stays for the hub's first round.
pub fn split(replica: &mut Replica, now: Millis, out: &mut Outbox) -> Vec<(GroupPiece, Outbox)> {
    replica.set_pieces_apart(true, now, out);
    let pieces = replica.split_groups();
    let mut outs: Vec<Outbox> = pieces.iter().map(|_| Outbox::new()).collect();
    let mut hub = Outbox::new();
    for action in out.drain() {
        let timer = match &action {
            chorus_order::Action::SetTimer { id, .. } | chorus_order::Action::CancelTimer { id } => Some(*id),
            _ => None,
        };
        match timer.and_then(|id| replica.piece_of(&Event::Timer(id))) {
            Some(g) => outs[g].push(action),
            None => hub.push(action),
        }
    }
    *out = hub;
    for (g, p) in pieces.iter().enumerate() {
        assert_eq!(p.index(), g, "lane groups handed out out of order");
    }
    pieces.into_iter().zip(outs).collect()
}

/// Tests: a fresh replica `me` of a two-pillar cop cluster (n = 4, with
/// `params` otherwise) and the outbox its start filled, not split yet.
#[cfg(test)]
pub(crate) fn cop2_replica(
    me: u32,
    tweak: impl FnOnce(&mut chorus_core::ProtocolParams),
) -> (Replica, Outbox, std::sync::Arc<ClusterConfig>) {
    let mut params = chorus_core::ProtocolParams {
        mode: OrderingMode::Cop,
        pillars: 2,
        ..chorus_core::ProtocolParams::default()
    };
    tweak(&mut params);
    let (cfg, ids, _) = ClusterConfig::for_testing(4, 4, params, 1);
    let cfg = std::sync::Arc::new(cfg);
    let me = chorus_core::ReplicaId(me);
    let mut out = Outbox::new();
    let replica = Replica::new(cfg.clone(), me, ids[me.index()].clone(), Millis(0), &mut out);
    (replica, out, cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{LaneId, ProtocolParams};
    use chorus_order::{Action, TimerId};

    fn config(mode: OrderingMode, pillars: u32) -> ClusterConfig {
        let params = ProtocolParams {
            mode,
            pillars,
            ..ProtocolParams::default()
        };
        ClusterConfig::for_testing(4, 1, params, 1).0
    }

    fn timers(out: &mut Outbox) -> Vec<TimerId> {
        out.drain()
            .filter_map(|a| match a {
                Action::SetTimer { id, .. } | Action::CancelTimer { id } => Some(id),
                _ => None,
            })
            .collect()
    }

    /// Each group gets its own lanes' timers and its status tick; the hub
    /// keeps its own and no lane's (a lane timer left at the hub would fire
    /// where its lane is not: the lane's view change would never start).
    #[test]
    fn a_split_hands_each_group_its_lanes_timers_and_the_hub_the_rest() {
        let (mut replica, mut out, _) = cop2_replica(1, |_| {});
        // A lane's progress timer armed before the split (as after recovery).
        out.set_timer(TimerId::ViewChange(LaneId(1)), Millis(500));
        let mut pieces = split(&mut replica, Millis(0), &mut out);
        assert_eq!(pieces.len(), 2);
        for (g, (piece, piece_out)) in pieces.iter_mut().enumerate() {
            assert_eq!(piece.index(), g);
            let own = timers(piece_out);
            assert!(
                own.contains(&TimerId::GroupStatus(g as u32)),
                "group {g}: {own:?}"
            );
            for id in &own {
                match id {
                    TimerId::ViewChange(l) | TimerId::Batch(l) => assert_eq!(l.index(), g, "{id:?}"),
                    TimerId::GroupStatus(x) => assert_eq!(*x as usize, g),
                    other => panic!("group {g} got the hub's timer {other:?}"),
                }
            }
        }
        assert!(timers(&mut pieces[1].1).is_empty(), "drained above");
        let mut hub_out = out;
        for id in timers(&mut hub_out) {
            assert!(
                !matches!(
                    id,
                    TimerId::ViewChange(_) | TimerId::Batch(_) | TimerId::GroupStatus(_)
                ),
                "the hub kept a lane's timer {id:?}"
            );
        }
        // The hub's status merges what the pieces publish.
        let parts: Vec<_> = pieces.iter().map(|(p, _)| p.status_part()).collect();
        let s = replica.status_with(&parts);
        assert_eq!(s.views.len(), 2);
        assert_eq!(s.lanes.len(), 2);
        assert!(replica.status_with(&[]).views.is_empty());
    }

    #[test]
    fn only_cop_and_sarek_with_several_pillars_run_lanes_on_pillars() {
        if std::env::var("CHORUS_LANE_GROUPS").is_ok() {
            return; // overridden for a measurement
        }
        assert!(lanes_on_pillars(&config(OrderingMode::Cop, 2)));
        assert!(lanes_on_pillars(&config(OrderingMode::Cop, 4)));
        assert!(!lanes_on_pillars(&config(OrderingMode::Cop, 1)));
        assert!(!lanes_on_pillars(&config(OrderingMode::Rcc, 2)));
        assert!(lanes_on_pillars(&config(OrderingMode::Sarek, 2)));
        assert!(!lanes_on_pillars(&config(OrderingMode::Sarek, 1)));
        assert!(!lanes_on_pillars(&config(OrderingMode::Pbft, 2)));
    }
}
