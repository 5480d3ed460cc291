//! Smart Byzantine replicas (issue 9): middleware like `byzantine.rs`, but
//! each one runs a targeted attack instead of adding noise. A correct replica
//! runs underneath; the adversary rewrites, withholds, delays or forges what
//! it sends, signing forgeries with its own key or, colluding, with the keys
//! of the other Byzantine replicas (at most f of them: PBFT §4's model).
//!
//! - `withhold-pace`: in every view it leads a lane in, never pre-prepares
//!   the first slot it leads but sends the later ones, one just under every
//!   view-change timeout, so decisions keep coming while delivery stalls
//!   behind the gap (issue 8 finding 3).
//! - `nv-forge`: as new-view primary, builds a validly signed NEW-VIEW from
//!   the 2f+1 VIEW-CHANGEs that hurt most: the colluders' own (genesis
//!   checkpoint, no prepared certificates) and the correct ones with the
//!   lowest checkpoint and the fewest certificates; then pre-prepares its
//!   re-proposals (PBFT §4.4 trusts any valid set; finding 1 shows when a
//!   correct replica's VIEW-CHANGE omits what it prepared). Like
//!   `garbage-snapshot`, it sends checkpoint votes only to its colluders.
//! - `garbage-snapshot`: serves state transfer with a valid checkpoint
//!   certificate and, for every other checkpoint, garbage bytes (finding 5:
//!   a snapshot that does not decode) or a well-formed snapshot whose client
//!   table answers every cached request with a forged reply (finding 6: a
//!   replica that restores before it verifies would re-send those), and
//!   sends checkpoint votes only to the other Byzantine replicas, so a
//!   certificate exists that correct replicas may not hold (finding 1).
//!
//! Unless the seed drew `persist`, all of them behave correctly once the
//! network heals.

use crate::byzantine::{resign_pre_prepare, resign_view_change};
use crate::faults::FaultKind;
use crate::queue::Micros;
use crate::stats::Counters;
use bytes::Bytes;
use chorus_core::{
    Batch, ClusterConfig, ClusterTag, Digest, Identity, LaneId, NewView, PrePrepare, PrepareAuth, ReplicaId,
    ReplicaMsg, Signature, Slot, View, ViewChange,
};
use chorus_order::certs::verify_view_change;
use chorus_order::lane::plan_new_view;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// View changes remembered per (lane, view), and (lane, view)s remembered.
const VIEW_CHANGE_VIEWS_MAX: usize = 64;
/// Batches remembered by digest (to pre-prepare forged re-proposals).
const BATCHES_MAX: usize = 512;
/// Forged NEW-VIEWs and withheld slots remembered.
const FORGED_MAX: usize = 64;
/// Paced pre-prepares go out this fraction of the view-change timeout apart.
const PACE_PERMILLE: u64 = 900;

/// A pre-prepare the pacing holds back, with when it goes out.
type ReleaseKey = (LaneId, View, Slot);

pub struct SmartAdversary {
    pub kind: FaultKind,
    me: ReplicaId,
    identity: Identity,
    config: Arc<ClusterConfig>,
    /// The cluster its forgeries are signed for.
    tag: ClusterTag,
    /// The Byzantine replicas (including this one) and their keys.
    colluders: BTreeMap<ReplicaId, Identity>,
    heal_at_us: Micros,
    persist: bool,
    /// withhold-pace: nothing is withheld before this time.
    start_us: Micros,
    withheld: BTreeMap<(LaneId, View), Slot>,
    releases: BTreeMap<ReleaseKey, Micros>,
    last_release: BTreeMap<LaneId, Micros>,
    view_changes: BTreeMap<(LaneId, View), BTreeMap<ReplicaId, ViewChange>>,
    batches: BTreeMap<Digest, Batch>,
    batch_order: VecDeque<Digest>,
    /// nv-forge: what went out for each (lane, view), and the slots it covers.
    forged: BTreeMap<(LaneId, View), (Vec<ReplicaMsg>, BTreeSet<Slot>)>,
    garbage: BTreeMap<(u64, u32), Bytes>,
    /// garbage-snapshot: the honest chunks of a snapshot to forge, per
    /// (receiver, checkpoint), until all have passed.
    assembling: BTreeMap<(ReplicaId, u64), Vec<Option<Bytes>>>,
    /// garbage-snapshot: each client's newest request seen (clients send to
    /// every replica), which a forged client table claims executed.
    pending: BTreeMap<chorus_core::ClientId, (chorus_core::RequestSeq, Digest)>,
}

impl SmartAdversary {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kind: FaultKind,
        me: ReplicaId,
        identity: Identity,
        config: Arc<ClusterConfig>,
        colluders: BTreeMap<ReplicaId, Identity>,
        heal_at_us: Micros,
        persist: bool,
        rng: &mut ChaCha8Rng,
    ) -> SmartAdversary {
        assert!(
            matches!(
                kind,
                FaultKind::WithholdPace | FaultKind::NvForge | FaultKind::GarbageSnapshot
            ),
            "{kind} is not a smart adversary"
        );
        assert!(colluders.contains_key(&me));
        SmartAdversary {
            kind,
            me,
            identity,
            tag: ClusterTag::of(&config),
            config,
            colluders,
            heal_at_us,
            persist,
            // A persistent attacker may also wait for the network to heal,
            // when the liveness bound applies.
            start_us: if persist {
                rng.gen_range(0..=heal_at_us + heal_at_us / 2)
            } else {
                rng.gen_range(0..=heal_at_us / 3)
            },
            withheld: BTreeMap::new(),
            releases: BTreeMap::new(),
            last_release: BTreeMap::new(),
            view_changes: BTreeMap::new(),
            batches: BTreeMap::new(),
            batch_order: VecDeque::new(),
            forged: BTreeMap::new(),
            garbage: BTreeMap::new(),
            assembling: BTreeMap::new(),
            pending: BTreeMap::new(),
        }
    }

    fn active(&self, now_us: Micros) -> bool {
        self.persist || now_us < self.heal_at_us
    }

    /// A client request reached this replica (bounded: one entry per client).
    pub fn observe_request(&mut self, r: &chorus_core::Request) {
        if self.kind == FaultKind::GarbageSnapshot {
            let e = self.pending.entry(r.client).or_insert((r.seq, r.digest()));
            if r.seq >= e.0 {
                *e = (r.seq, r.digest());
            }
        }
    }

    /// A message the replica received (or sent): learn view changes and batches.
    pub fn observe(&mut self, msg: &ReplicaMsg) {
        match msg {
            ReplicaMsg::ViewChange(vc) => {
                let key = (vc.lane, vc.new_view);
                if !self.view_changes.contains_key(&key) && self.view_changes.len() == VIEW_CHANGE_VIEWS_MAX {
                    self.view_changes.pop_first();
                }
                self.view_changes
                    .entry(key)
                    .or_default()
                    .insert(vc.replica, vc.clone());
            }
            ReplicaMsg::PrePrepare(pp) => self.remember_batch(&pp.batch),
            ReplicaMsg::BatchReply(b) => self.remember_batch(&b.batch),
            _ => {}
        }
    }

    fn remember_batch(&mut self, batch: &Batch) {
        let d = batch.digest();
        if self.batches.contains_key(&d) {
            return;
        }
        if self.batch_order.len() == BATCHES_MAX {
            if let Some(old) = self.batch_order.pop_front() {
                self.batches.remove(&old);
            }
        }
        self.batch_order.push_back(d);
        self.batches.insert(d, batch.clone());
    }

    /// Rewrite one message to `to`: what goes out, each after an extra delay.
    pub fn outgoing(
        &mut self,
        rng: &mut ChaCha8Rng,
        now_us: Micros,
        to: ReplicaId,
        msg: ReplicaMsg,
        counters: &mut Counters,
    ) -> Vec<(Micros, ReplicaMsg)> {
        self.observe(&msg);
        if !self.active(now_us) {
            return vec![(0, msg)];
        }
        match self.kind {
            FaultKind::WithholdPace => self.withhold_pace(now_us, msg, counters),
            FaultKind::NvForge => self.nv_forge(to, msg, counters),
            FaultKind::GarbageSnapshot => self.garbage_snapshot(rng, to, msg, counters),
            other => unreachable!("{other} is not a smart adversary"),
        }
    }

    fn withhold_pace(
        &mut self,
        now_us: Micros,
        msg: ReplicaMsg,
        counters: &mut Counters,
    ) -> Vec<(Micros, ReplicaMsg)> {
        let ReplicaMsg::PrePrepare(pp) = &msg else {
            return vec![(0, msg)];
        };
        if now_us < self.start_us {
            return vec![(0, msg)];
        }
        let lv = (pp.lane, pp.view);
        if !self.withheld.contains_key(&lv) {
            if self.withheld.len() == FORGED_MAX {
                self.withheld.pop_first();
            }
            self.withheld.insert(lv, pp.slot);
        }
        let gap = self.withheld[&lv];
        if pp.slot == gap {
            counters.fault("byz-withhold");
            return vec![];
        }
        if pp.slot < gap {
            return vec![(0, msg)];
        }
        let key = (pp.lane, pp.view, pp.slot);
        let pace_us = self.config.params.view_change_timeout_ms * PACE_PERMILLE;
        let release = match self.releases.get(&key) {
            Some(r) => *r,
            None => {
                let last = self.last_release.get(&pp.lane).copied().unwrap_or(0);
                let r = now_us.max(last + pace_us);
                self.last_release.insert(pp.lane, r);
                if self.releases.len() >= 4 * FORGED_MAX {
                    self.releases.pop_first();
                }
                self.releases.insert(key, r);
                r
            }
        };
        counters.fault("byz-paced");
        vec![(release.saturating_sub(now_us), msg)]
    }

    /// A colluder's VIEW-CHANGE that claims nothing: genesis checkpoint, no
    /// prepared certificates. Valid: nobody can prove a replica prepared.
    fn empty_view_change(&self, who: ReplicaId, lane: LaneId, view: View) -> ViewChange {
        let mut vc = ViewChange {
            lane,
            new_view: view,
            stable: None,
            prepared: vec![],
            pre_prepared: vec![],
            replica: who,
            sig: Signature([0; 64]),
        };
        resign_view_change(&self.colluders[&who], &self.tag, &mut vc);
        vc
    }

    /// A colluder's lying VIEW-CHANGE (`false_claims.rs`) over the window of
    /// the highest checkpoint any view change for this view carries.
    fn lie_over_known_window(&self, empty: ViewChange) -> ViewChange {
        let stable = self
            .view_changes
            .get(&(empty.lane, empty.new_view))
            .into_iter()
            .flat_map(|m| m.values())
            .filter_map(|vc| vc.stable.clone())
            .max_by_key(|c| c.seq);
        let template = ViewChange {
            stable,
            ..empty.clone()
        };
        crate::false_claims::lying_view_change(&self.config, &self.tag, &self.colluders, &template)
            .unwrap_or(empty)
    }

    fn nv_forge(
        &mut self,
        to: ReplicaId,
        msg: ReplicaMsg,
        counters: &mut Counters,
    ) -> Vec<(Micros, ReplicaMsg)> {
        match msg {
            // `PrepareAuth::Mac`: our own view changes lie about what
            // prepared, to whichever primary collects them.
            ReplicaMsg::ViewChange(vc)
                if vc.replica == self.me && self.config.params.prepare_auth == PrepareAuth::Mac =>
            {
                counters.fault("byz-false-claims");
                let lie =
                    crate::false_claims::lying_view_change(&self.config, &self.tag, &self.colluders, &vc);
                vec![(0, ReplicaMsg::ViewChange(lie.unwrap_or(vc)))]
            }
            ReplicaMsg::NewView(nv) if nv.replica == self.me => {
                let key = (nv.lane, nv.view);
                if !self.forged.contains_key(&key) {
                    let Some(forged) = self.forge_new_view(&nv) else {
                        return vec![(0, ReplicaMsg::NewView(nv))];
                    };
                    if self.forged.len() == FORGED_MAX {
                        self.forged.pop_first();
                    }
                    self.forged.insert(key, forged);
                }
                counters.fault("byz-nv-forge");
                self.forged[&key].0.iter().map(|m| (0, m.clone())).collect()
            }
            // Colluding in finding 1's setup: checkpoint votes only to the
            // other Byzantine replicas, so a certificate exists that correct
            // replicas may lack (and fetch state for, from the colluders).
            ReplicaMsg::Checkpoint(_) if !self.colluders.contains_key(&to) => {
                counters.fault("byz-checkpoint-withheld");
                vec![]
            }
            // Our own re-proposals replace the correct replica's in a forged view.
            ReplicaMsg::PrePrepare(pp)
                if self
                    .forged
                    .get(&(pp.lane, pp.view))
                    .is_some_and(|(_, slots)| slots.contains(&pp.slot)) =>
            {
                vec![]
            }
            other => vec![(0, other)],
        }
    }

    /// The NEW-VIEW from the worst valid 2f+1 VIEW-CHANGEs we know of, and
    /// the pre-prepares of its re-proposals (those whose batch we know).
    fn forge_new_view(&self, honest: &NewView) -> Option<(Vec<ReplicaMsg>, BTreeSet<Slot>)> {
        let cfg = &*self.config;
        let quorum = cfg.quorum();
        let mac = cfg.params.prepare_auth == PrepareAuth::Mac;
        let mut chosen: Vec<ViewChange> = self
            .colluders
            .keys()
            .map(|c| {
                let empty = self.empty_view_change(*c, honest.lane, honest.view);
                if mac {
                    // Unprovable claims over the highest known window.
                    self.lie_over_known_window(empty)
                } else {
                    empty
                }
            })
            .take(quorum)
            .collect();
        let mut others: Vec<&ViewChange> = self
            .view_changes
            .get(&(honest.lane, honest.view))
            .into_iter()
            .flat_map(|m| m.values())
            .chain(honest.view_changes.iter())
            .filter(|vc| !self.colluders.contains_key(&vc.replica))
            .collect();
        others.sort_by_key(|vc| {
            (
                vc.stable.as_ref().map_or(0, |c| c.seq.0),
                vc.prepared.len(),
                vc.replica,
            )
        });
        let mut seen = BTreeSet::new();
        let mut spare = Vec::new();
        for vc in others {
            if seen.insert(vc.replica) && verify_view_change(cfg, vc).is_ok() {
                if chosen.len() < quorum {
                    chosen.push(vc.clone());
                } else {
                    spare.push(vc.clone());
                }
            }
        }
        if chosen.len() < quorum {
            return None;
        }
        // `PrepareAuth::Mac`: as few more honest view changes as make every
        // slot decidable (a correct backup refuses an undecidable NEW-VIEW).
        let mut spare = spare.into_iter();
        let plan = loop {
            if let Some(p) = plan_new_view(cfg, &chosen) {
                break p;
            }
            chosen.push(spare.next()?);
        };
        let mut nv = NewView {
            lane: honest.lane,
            view: honest.view,
            view_changes: chosen,
            reproposals: plan.reproposals.clone(),
            replica: self.me,
            sig: Signature([0; 64]),
            // The honest NEW-VIEW's exclusions keep the forgery valid.
            excluded: honest.excluded.clone(),
        };
        crate::byzantine::resign_new_view(&self.identity, &self.tag, &mut nv);
        let mut out = vec![ReplicaMsg::NewView(nv)];
        let mut slots = BTreeSet::new();
        for rp in &plan.reproposals {
            let batch = if rp.digest == Batch::noop_digest() {
                Batch::noop()
            } else if let Some(b) = self.batches.get(&rp.digest) {
                b.clone()
            } else {
                continue;
            };
            let mut pp = PrePrepare {
                lane: honest.lane,
                view: honest.view,
                slot: rp.slot,
                digest: rp.digest,
                batch,
                sig: Signature([0; 64]),
            };
            resign_pre_prepare(&self.identity, &self.tag, &mut pp);
            slots.insert(rp.slot);
            out.push(ReplicaMsg::PrePrepare(pp));
        }
        Some((out, slots))
    }

    fn garbage_snapshot(
        &mut self,
        rng: &mut ChaCha8Rng,
        to: ReplicaId,
        msg: ReplicaMsg,
        counters: &mut Counters,
    ) -> Vec<(Micros, ReplicaMsg)> {
        match msg {
            ReplicaMsg::StateChunk(mut m) => {
                // The same garbage for a chunk every time (a consistent liar).
                let key = (m.cert.seq.0, m.index);
                let len = m.data.len().max(1);
                if !self.garbage.contains_key(&key) {
                    if self.garbage.len() == 4 * FORGED_MAX {
                        self.garbage.pop_first();
                    }
                    let bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                    self.garbage.insert(key, Bytes::from(bytes));
                }
                if self.forges_at(m.cert.seq) {
                    return self.forged_snapshot(to, m, counters);
                }
                m.data = self.garbage[&key].clone();
                counters.fault("byz-garbage-snapshot");
                vec![(0, ReplicaMsg::StateChunk(m))]
            }
            ReplicaMsg::Checkpoint(_) if !self.colluders.contains_key(&to) => {
                counters.fault("byz-checkpoint-withheld");
                vec![]
            }
            other => vec![(0, other)],
        }
    }
}

impl SmartAdversary {
    /// Every other checkpoint is served as a well-formed forgery, the rest
    /// as garbage (one seed exercises findings 5 and 6 both).
    fn forges_at(&self, seq: chorus_core::Seq) -> bool {
        let interval = self.config.params.checkpoint_interval.max(1);
        (seq.0 / interval) % 2 == 1
    }

    /// Hold the honest chunks of the snapshot for `to` until all have
    /// passed, then send the forgery, cut like an honest one. A snapshot
    /// it cannot read (the partitioned executor's format) goes out as the
    /// garbage already drawn for each chunk.
    fn forged_snapshot(
        &mut self,
        to: ReplicaId,
        m: chorus_core::StateChunk,
        counters: &mut Counters,
    ) -> Vec<(Micros, ReplicaMsg)> {
        let count = m.count as usize;
        let key = (to, m.cert.seq.0);
        if !self.assembling.contains_key(&key) && self.assembling.len() == FORGED_MAX {
            self.assembling.pop_first();
        }
        let parts = self.assembling.entry(key).or_insert_with(|| vec![None; count]);
        if parts.len() != count || m.index as usize >= count {
            self.assembling.remove(&key);
            return vec![];
        }
        parts[m.index as usize] = Some(m.data.clone());
        if parts.iter().any(Option::is_none) {
            return vec![];
        }
        let whole: Vec<u8> = self
            .assembling
            .remove(&key)
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|b| b.to_vec())
            .collect();
        let lie = Bytes::from(format!("forged by {:?}", self.me));
        let pending = &self.pending;
        let forged = chorus_exec::executor::reencode_with_table(&whole, |t| {
            for c in &mut t.clients {
                for (_, reply) in &mut c.replies {
                    *reply = lie.clone();
                }
            }
            // The worst moment: clients retransmit the requests they still
            // wait for, so claim those executed, with a forged reply each.
            let max_inflight = crate::options::EXEC_MAX_INFLIGHT_PER_CLIENT;
            let Ok(mut table) = chorus_exec::ClientTable::from_snapshot(t, max_inflight) else {
                return;
            };
            for (client, (seq, digest)) in pending {
                if table.admit_request(*client, *seq, *digest) == chorus_exec::Admission::Fresh {
                    table.complete(*client, *seq, lie.clone());
                }
            }
            *t = table.to_snapshot();
        });
        let chunks: Vec<Bytes> = match forged {
            Ok(bytes) => {
                counters.fault("byz-forged-snapshot");
                // Cut as a correct server would (`transfer.rs`): chunks of
                // `state_chunk_bytes`, however many the forgery needs, so
                // none exceeds the wire limit (the receiver takes the count
                // from the chunks).
                let size = self.config.params.state_chunk_bytes.max(1) as usize;
                let pieces = bytes.len().div_ceil(size).max(1);
                (0..pieces)
                    .map(|i| bytes.slice(i * size..((i + 1) * size).min(bytes.len())))
                    .collect()
            }
            Err(_) => {
                counters.fault("byz-garbage-snapshot");
                (0..count as u32)
                    .map(|i| self.garbage.get(&(m.cert.seq.0, i)).cloned().unwrap_or_default())
                    .collect()
            }
        };
        let total = chunks.len() as u32;
        chunks
            .into_iter()
            .enumerate()
            .map(|(i, data)| {
                let chunk = chorus_core::StateChunk {
                    cert: m.cert.clone(),
                    index: i as u32,
                    count: total,
                    data,
                };
                (0, ReplicaMsg::StateChunk(chunk))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{LeaderRotation, ProtocolParams};
    use rand::SeedableRng;

    fn setup(
        kind: FaultKind,
        me: u32,
        colluders: &[u32],
    ) -> (SmartAdversary, Arc<ClusterConfig>, Vec<Identity>) {
        let params = ProtocolParams {
            leader_rotation: LeaderRotation::Fixed,
            window_slots: 8,
            checkpoint_interval: 4,
            pillars: 1,
            ..ProtocolParams::default()
        };
        let (cfg, keys, _) = ClusterConfig::for_testing(4, 1, params, 7);
        let cfg = Arc::new(cfg);
        let coll = colluders
            .iter()
            .map(|r| (ReplicaId(*r), keys[*r as usize].clone()))
            .collect();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let adv = SmartAdversary::new(
            kind,
            ReplicaId(me),
            keys[me as usize].clone(),
            cfg.clone(),
            coll,
            1_000_000,
            false,
            &mut rng,
        );
        (adv, cfg, keys)
    }

    /// The tag of `setup`'s cluster (it depends on the cluster id and the
    /// replica keys only, not on the parameters).
    fn test_tag() -> ClusterTag {
        ClusterTag::of(&ClusterConfig::for_testing(4, 1, ProtocolParams::default(), 7).0)
    }

    fn pp(keys: &[Identity], me: u32, view: u64, slot: u64) -> ReplicaMsg {
        let batch = Batch::noop();
        let mut m = PrePrepare {
            lane: LaneId(0),
            view: View(view),
            slot: Slot(slot),
            digest: batch.digest(),
            batch,
            sig: Signature([0; 64]),
        };
        resign_pre_prepare(&keys[me as usize], &test_tag(), &mut m);
        ReplicaMsg::PrePrepare(m)
    }

    #[test]
    fn withholds_one_slot_per_view_and_paces_the_rest_until_heal() {
        let (mut adv, cfg, keys) = setup(FaultKind::WithholdPace, 0, &[0]);
        adv.start_us = 0;
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let mut c = Counters::default();
        let pace = cfg.params.view_change_timeout_ms * PACE_PERMILLE;
        assert!(adv
            .outgoing(&mut rng, 10, ReplicaId(1), pp(&keys, 0, 0, 3), &mut c)
            .is_empty());
        assert!(adv
            .outgoing(&mut rng, 20, ReplicaId(2), pp(&keys, 0, 0, 3), &mut c)
            .is_empty());
        let d4 = adv.outgoing(&mut rng, 30, ReplicaId(1), pp(&keys, 0, 0, 4), &mut c);
        let d5 = adv.outgoing(&mut rng, 30, ReplicaId(1), pp(&keys, 0, 0, 5), &mut c);
        let d4b = adv.outgoing(&mut rng, 40, ReplicaId(2), pp(&keys, 0, 0, 4), &mut c);
        assert_eq!(d4[0].0, pace - 30);
        assert_eq!(d5[0].0, 2 * pace - 30);
        assert_eq!(d4b[0].0, pace - 40, "every replica gets a slot at the same time");
        // A new view: a new gap.
        assert!(adv
            .outgoing(&mut rng, 50, ReplicaId(1), pp(&keys, 0, 1, 9), &mut c)
            .is_empty());
        // After healing (no persist) everything goes out at once.
        let late = adv.outgoing(&mut rng, 2_000_000, ReplicaId(1), pp(&keys, 0, 2, 3), &mut c);
        assert_eq!(late.len(), 1);
        assert_eq!(late[0].0, 0);
        assert_eq!(c.faults["byz-withhold"], 3);
    }

    #[test]
    fn forged_new_view_uses_colluders_and_the_worst_view_changes_and_verifies() {
        let (mut adv, cfg, keys) = setup(FaultKind::NvForge, 1, &[1]);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut c = Counters::default();
        let mut vcs = Vec::new();
        for r in 0..4u32 {
            let mut vc = ViewChange {
                lane: LaneId(0),
                new_view: View(1),
                stable: None,
                prepared: vec![],
                pre_prepared: vec![],
                replica: ReplicaId(r),
                sig: Signature([0; 64]),
            };
            resign_view_change(&keys[r as usize], &ClusterTag::of(&cfg), &mut vc);
            adv.observe(&ReplicaMsg::ViewChange(vc.clone()));
            vcs.push(vc);
        }
        let mut honest = NewView {
            lane: LaneId(0),
            view: View(1),
            view_changes: vcs[..3].to_vec(),
            reproposals: vec![],
            replica: ReplicaId(1),
            sig: Signature([0; 64]),
            excluded: vec![],
        };
        crate::byzantine::resign_new_view(&keys[1], &ClusterTag::of(&cfg), &mut honest);
        let out = adv.outgoing(&mut rng, 0, ReplicaId(0), ReplicaMsg::NewView(honest), &mut c);
        let ReplicaMsg::NewView(nv) = &out[0].1 else {
            panic!("{out:?}")
        };
        assert_eq!(nv.view_changes.len(), cfg.quorum());
        assert_eq!(
            nv.view_changes[0].replica,
            ReplicaId(1),
            "the colluder's own first"
        );
        for vc in &nv.view_changes {
            assert_eq!(verify_view_change(&cfg, vc), Ok(()));
        }
        assert_eq!(
            nv.reproposals,
            plan_new_view(&cfg, &nv.view_changes)
                .expect("decidable")
                .reproposals
        );
        assert!(keys[1].public().verify_bound(
            &ClusterTag::of(&cfg),
            chorus_core::SigKind::NewView,
            &nv.signing_digest(),
            &nv.sig
        ));
        assert_eq!(c.faults["byz-nv-forge"], 1);
    }

    /// Finding 6's liar: a well-formed snapshot, cut into as many chunks as
    /// the honest one, whose table claims the client's pending request
    /// executed with a forged reply (and forges the cached ones).
    #[test]
    fn forged_snapshot_decodes_and_claims_pending_requests() {
        use chorus_core::{Authenticator, CheckpointCert, ClientId, Request, RequestSeq, Seq, StateChunk};
        use chorus_exec::{Admission, ClientTable, ReplyLookup};
        let (mut adv, _, _) = setup(FaultKind::GarbageSnapshot, 2, &[2]);
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let mut c = Counters::default();
        let mut table = ClientTable::new(crate::options::EXEC_MAX_INFLIGHT_PER_CLIENT);
        assert_eq!(table.admit(ClientId(1), RequestSeq(1)), Admission::Fresh);
        assert!(table.complete(ClientId(1), RequestSeq(1), Bytes::from_static(b"honest")));
        let service = chorus_apps::KvService::default();
        let honest = chorus_exec::executor::encode_snapshot(&table, &service);
        let pending = Request {
            memo: Default::default(),
            client: ClientId(2),
            seq: RequestSeq(1),
            flags: 0,
            op: Bytes::from_static(b"op"),
            auth: Authenticator::Macs(Default::default()),
        };
        adv.observe_request(&pending);
        // Checkpoint 4 of interval 4 is a forging one (8 would be garbage).
        let cert = CheckpointCert {
            seq: Seq(4),
            state_digest: Digest::of(b"s"),
            votes: vec![],
        };
        let half = honest.len() / 2;
        let parts = [honest.slice(..half), honest.slice(half..)];
        let mut out = Vec::new();
        for (index, data) in parts.iter().enumerate() {
            let chunk = StateChunk {
                cert: cert.clone(),
                index: index as u32,
                count: 2,
                data: data.clone(),
            };
            out = adv.outgoing(&mut rng, 0, ReplicaId(0), ReplicaMsg::StateChunk(chunk), &mut c);
            if index == 0 {
                assert!(out.is_empty(), "held until every chunk passed");
            }
        }
        let forged: Vec<u8> = out
            .iter()
            .flat_map(|(_, m)| match m {
                ReplicaMsg::StateChunk(x) => {
                    assert_eq!((&x.cert, x.count as usize), (&cert, out.len()));
                    assert!(x.data.len() <= adv.config.params.state_chunk_bytes as usize);
                    x.data.to_vec()
                }
                _ => panic!("only chunks"),
            })
            .collect();
        assert!(!out.is_empty());
        let (back, _) =
            chorus_exec::executor::decode_snapshot(&forged, crate::options::EXEC_MAX_INFLIGHT_PER_CLIENT)
                .expect("the forgery is well-formed");
        let lie = ReplyLookup::Ready(Bytes::from("forged by r2"));
        assert_eq!(back.lookup(ClientId(1), RequestSeq(1)), lie);
        assert_eq!(back.lookup(ClientId(2), RequestSeq(1)), lie);
        assert_eq!(
            back.request_digest(ClientId(2), RequestSeq(1)),
            Some(pending.digest())
        );
    }

    #[test]
    fn garbage_snapshot_keeps_the_certificate_and_votes_only_to_colluders() {
        use chorus_core::{CheckpointCert, CheckpointVote, Seq, StateChunk};
        let (mut adv, _, _) = setup(FaultKind::GarbageSnapshot, 2, &[2, 3]);
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let mut c = Counters::default();
        let cert = CheckpointCert {
            seq: Seq(4),
            state_digest: Digest::of(b"s"),
            votes: vec![],
        };
        let chunk = StateChunk {
            cert: cert.clone(),
            index: 0,
            count: 1,
            data: Bytes::from_static(b"real snapshot bytes"),
        };
        let a = adv.outgoing(
            &mut rng,
            0,
            ReplicaId(0),
            ReplicaMsg::StateChunk(chunk.clone()),
            &mut c,
        );
        let b = adv.outgoing(
            &mut rng,
            0,
            ReplicaId(1),
            ReplicaMsg::StateChunk(chunk.clone()),
            &mut c,
        );
        let (ReplicaMsg::StateChunk(x), ReplicaMsg::StateChunk(y)) = (&a[0].1, &b[0].1) else {
            panic!()
        };
        assert_eq!(x.cert, cert);
        assert_ne!(x.data, chunk.data);
        assert_eq!(x.data, y.data);
        let vote = ReplicaMsg::Checkpoint(CheckpointVote {
            seq: Seq(4),
            state_digest: Digest::of(b"s"),
            replica: ReplicaId(2),
            sig: Signature([0; 64]),
        });
        assert!(adv
            .outgoing(&mut rng, 0, ReplicaId(0), vote.clone(), &mut c)
            .is_empty());
        assert_eq!(adv.outgoing(&mut rng, 0, ReplicaId(3), vote, &mut c).len(), 1);
    }
}
