//! Metrics taken from the sans-IO replica's `ReplicaStatus` (its per-lane
//! status and its `Counters`), published by the core thread on every status
//! tick, with or without traffic, so they are current at idle too.

use crate::metrics::{advance, CauseLabel, LaneLabel, Metrics, ReasonLabel};
use chorus_order::ReplicaStatus;

pub fn publish(m: &Metrics, s: &ReplicaStatus) {
    m.next_delivery.set(s.next_delivery.0 as i64);
    m.stable_checkpoint.set(s.stable_seq.0 as i64);
    m.state_divergences.set(s.state_divergences as i64);
    m.pool_requests.set(s.pool_len as i64);
    for (l, view) in s.views.iter().enumerate() {
        let lane = LaneLabel { lane: l as u32 };
        m.lane_view.get_or_create(&lane).set(view.0 as i64);
        let changing = s.view_changing.get(l).copied().unwrap_or(false);
        m.lane_view_changing.get_or_create(&lane).set(i64::from(changing));
        if let Some(d) = s.lanes.get(l) {
            m.lane_next_undecided_slot
                .get_or_create(&lane)
                .set(d.next_undecided.0 as i64);
            m.lane_pending_requests.get_or_create(&lane).set(d.pending as i64);
            m.lane_proposer.get_or_create(&lane).set(i64::from(d.proposer.0));
        }
        let c = s.counters.per_lane.get(&(l as u32)).cloned().unwrap_or_default();
        advance(&m.lane_decided_slots.get_or_create(&lane), c.decided);
        advance(&m.lane_proposals.get_or_create(&lane), c.proposals);
        advance(&m.lane_view_changes.get_or_create(&lane), c.view_changes);
    }
    let c = &s.counters;
    for (cause, n) in &c.view_change_causes {
        advance(
            &m.view_changes.get_or_create(&CauseLabel {
                cause: (*cause).to_string(),
            }),
            *n,
        );
    }
    for (reason, n) in &c.rejected {
        advance(
            &m.peer_messages_rejected.get_or_create(&ReasonLabel {
                reason: (*reason).to_string(),
            }),
            *n,
        );
    }
    advance(&m.new_views, c.new_views);
    advance(&m.checkpoints_stable, c.checkpoints_stable);
    advance(&m.state_transfers, c.state_transfers);
    advance(&m.dispel_standins, c.dispel_standins);
    advance(&m.held_for_vouchers, c.held_for_vouchers);
    advance(&m.clients_proven_partial, c.clients_proven_partial);
    advance(&m.voided_requests_dropped, c.voided_requests_dropped);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    m.core_heartbeat_seconds.set(now);
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{ClusterConfig, Millis, OrderingMode, ProtocolParams, ReplicaId};
    use chorus_order::{Outbox, Replica};
    use std::sync::Arc;

    /// Every lane of a fresh COP replica shows up with its view and slot.
    #[test]
    fn every_lane_is_published() {
        let params = ProtocolParams {
            mode: OrderingMode::Cop,
            pillars: 3,
            ..ProtocolParams::default()
        };
        let (cfg, ids, _) = ClusterConfig::for_testing(4, 1, params, 7);
        let mut out = Outbox::new();
        let r = Replica::new(Arc::new(cfg), ReplicaId(1), ids[1].clone(), Millis(0), &mut out);
        let m = Metrics::default();
        publish(&m, &r.status());
        let text = m.render();
        for lane in 0..3 {
            assert!(
                text.contains(&format!("chorus_lane_view{{lane=\"{lane}\"}} 0\n")),
                "{text}"
            );
            assert!(text.contains(&format!("chorus_lane_view_changing{{lane=\"{lane}\"}} 0\n")));
            assert!(text.contains(&format!("chorus_lane_next_undecided_slot{{lane=\"{lane}\"}} 0\n")));
        }
        assert!(m.core_heartbeat_seconds.get() > 1.6e9);
    }
}
