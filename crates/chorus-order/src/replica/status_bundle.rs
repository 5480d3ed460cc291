//! The periodic status, one message per peer per pillar ([`StatusBundle`]):
//! every lane's progress at once instead of one `Status` per lane, which
//! under RCC (a lane per replica) was n³ messages per status interval.

use super::Replica;
use crate::counters::Cx;
use crate::io::Outbox;
use chorus_core::{ClusterConfig, LaneProgress, Millis, ReplicaId, ReplicaMsg, Seq, StatusBundle};

/// A bundle's entries exist and share the first entry's pillar (a correct
/// sender groups them so; the codec checked they ascend).
pub(super) fn well_formed(cfg: &ClusterConfig, b: &StatusBundle) -> bool {
    let lanes = cfg.lanes() as usize;
    let pillar = b.lanes.first().map_or(0, |e| cfg.pillar_of_lane(e.lane));
    !b.lanes.is_empty()
        && b.lanes
            .iter()
            .all(|e| e.lane.index() < lanes && cfg.pillar_of_lane(e.lane) == pillar)
}

/// Lanes' progress in one bundle per pillar, in pillar order.
pub(super) fn bundles(cfg: &ClusterConfig, stable_seq: Seq, entries: Vec<LaneProgress>) -> Vec<StatusBundle> {
    let pillars = cfg.params.pillars.max(1) as usize;
    let mut bundles: Vec<Vec<LaneProgress>> = vec![Vec::new(); pillars];
    for e in entries {
        bundles[cfg.pillar_of_lane(e.lane)].push(e);
    }
    bundles
        .into_iter()
        .filter(|b| !b.is_empty())
        .map(|lanes| {
            debug_assert!(lanes.windows(2).all(|w| w[0].lane < w[1].lane));
            StatusBundle { stable_seq, lanes }
        })
        .collect()
}

impl Replica {
    /// Broadcast one bundle per pillar: lanes `l` with the same `l mod pillars`
    /// travel together, so a bundle stays on the connections (and, with
    /// consensus in the pillars, the thread) of the pillar owning its lanes.
    pub(super) fn broadcast_status_bundles(&mut self, entries: Vec<LaneProgress>, out: &mut Outbox) {
        for b in bundles(&self.cfg, self.hub.stable_seq(), entries) {
            out.broadcast(ReplicaMsg::Statuses(b));
        }
    }

    /// Right after a jump (a state transfer installed): tell every peer
    /// where we are now, so it answers with what we lack at once instead of
    /// after our next status tick, by when it may have collected those
    /// slots or epochs below its next stable checkpoint, leaving us another
    /// state transfer behind (dispel seed 52301142: one a second for 30 s).
    pub(super) fn announce_progress(&mut self, now: Millis, out: &mut Outbox) {
        let stable = self.hub.stable_seq();
        if let Some(d) = self.dispel.as_ref() {
            return d.broadcast_status(&mut Cx::new(now, out, &mut self.counters), stable, true);
        }
        let mut progress: Vec<_> = self.groups.iter().flat_map(|g| g.progress()).collect();
        progress.sort_by_key(|p| p.lane);
        if !progress.is_empty() {
            self.broadcast_status_bundles(progress, out);
        }
    }

    /// A peer's status (its lane 0, or dispel's) shows it below our stable
    /// checkpoint: our votes for it, so it can certify the checkpoint. Once
    /// per status round per peer: statuses come once an interval, and a
    /// peer sending them in a loop must not get our votes each time.
    pub(super) fn send_votes_to_peer(&mut self, now: Millis, from: ReplicaId, stable: Seq, out: &mut Outbox) {
        let interval = self.cfg.params.status_interval_ms;
        let Some(last) = self.hub.votes_sent.get_mut(from.index()) else {
            return;
        };
        let votes = self.hub.checkpointer.votes_for_peer(stable);
        if votes.is_empty() || last.is_some_and(|t| now.0.saturating_sub(t.0) < interval / 2) {
            return;
        }
        *last = Some(now);
        for v in votes {
            out.send(from, ReplicaMsg::Checkpoint(v));
        }
    }

    /// A peer's bundle: the replica-wide parts once (its stable checkpoint,
    /// our checkpoint votes it lacks), then each entry to its lane as the
    /// `Status` it stands for. The codec checked the entries ascend; here
    /// they must also exist and share the first entry's pillar (a correct
    /// sender groups them so).
    pub(super) fn on_status_bundle(
        &mut self,
        now: Millis,
        from: ReplicaId,
        b: StatusBundle,
        out: &mut Outbox,
    ) {
        if !well_formed(&self.cfg, &b) || self.dispel.is_some() {
            return Cx::new(now, out, &mut self.counters).reject("bad-status-bundle");
        }
        self.hub.transfer.note_peer_stable(from, b.stable_seq, now);
        if b.lanes[0].lane.0 == 0 {
            self.send_votes_to_peer(now, from, b.stable_seq, out);
        }
        // The entries of a bundle share a pillar, and a pillar's lanes one group.
        let g = self.group_of(b.lanes[0].lane);
        self.in_group(g, out, |g, hub, counters, out| {
            for st in b.statuses() {
                g.on_lane_message(now, from, ReplicaMsg::Status(st), hub, counters, out);
            }
        });
    }
}
