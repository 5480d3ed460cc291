//! RCC-specific Byzantine replicas (issue 10 item 6): middleware like
//! `smart_adversary.rs` around a correct replica, attacking what RCC's
//! concurrent instances expose (RCC §III-D, §IV).
//!
//! - `throttle`: as instance primary, pre-prepares its own lane's rounds one
//!   just under the view-change timeout apart (§IV's throttling attack: as
//!   slow as the timers allow, never slow enough to be suspected by them).
//! - `in-the-dark`: sends its own lane's pre-prepares to only 2f+1 replicas,
//!   itself included, a different subset every round (§III-D, Example III.4):
//!   the others learn those rounds from commits and fetch the batch.
//! - `censor`: never proposes the requests of one correct client it owns
//!   (drops them on arrival, so its replica never sees them): only the
//!   instance's stop hands them to the coordinating leader.
//! - `order-attack`: puts its favoured (own) client's requests first in its
//!   batches and grinds the order of each batch so that its lane lands at
//!   rank 0 of the round (§IV's ordering attack). It knows the other lanes'
//!   digests of a round from their pre-prepares, and holds its own for a
//!   while to learn them; unknown lanes are guessed to be no-ops.
//! - `failure-spam`: keeps sending validly signed FAILUREs (VIEW-CHANGEs for
//!   the next view, claiming nothing) for instances of correct primaries.
//!
//! Unless the seed drew `rcc-persist`, all of them behave correctly once the
//! network heals.

use crate::byzantine::{resign_pre_prepare, resign_view_change};
use crate::faults::FaultKind;
use crate::queue::Micros;
use crate::stats::Counters;
use chorus_core::{
    Batch, ClientId, ClusterConfig, ClusterTag, Digest, Identity, LaneId, PrePrepare, ReplicaId, ReplicaMsg,
    Request, Signature, Slot, View, ViewChange,
};
use chorus_order::round_order::{round_permutation, round_seed};
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Paced pre-prepares go out this fraction (‰) of the view-change timeout apart.
const PACE_PERMILLE: u64 = 900;
/// An order attacker holds a pre-prepare at most this fraction (‰) of the
/// timeout to learn the other lanes' digests of the round.
const HOLD_PERMILLE: u64 = 200;
/// Batch orders tried per grind, at most (4! for the simulator's batches).
const GRIND_MAX: usize = 120;
/// False FAILUREs go out this often (virtual time).
const SPAM_EVERY_US: Micros = 100_000;
/// Per-round state remembered (rounds, held and ground pre-prepares, dark sets).
const ROUNDS_MAX: usize = 256;
/// Digests of our own proposals remembered (for the rank statistic).
const OWN_MAX: usize = 4_096;

type Key = (View, Slot);

/// A pre-prepare the order attacker holds back, and who still gets it.
struct Held {
    pp: PrePrepare,
    to: BTreeSet<ReplicaId>,
    until_us: Micros,
}

pub struct RccAdversary {
    pub kind: FaultKind,
    me: ReplicaId,
    identity: Identity,
    config: Arc<ClusterConfig>,
    tag: ClusterTag,
    colluders: BTreeSet<ReplicaId>,
    heal_at_us: Micros,
    persist: bool,
    /// Our instance (RCC §III-B: instance `i` is proposed by replica `i`).
    lane: LaneId,
    /// censor: the client never proposed; order-attack: the favoured one.
    target: Option<ClientId>,
    // throttle
    last_release_us: Micros,
    releases: BTreeMap<Key, Micros>,
    // in-the-dark
    dark: BTreeMap<Key, BTreeSet<ReplicaId>>,
    // order-attack
    /// Other lanes' pre-prepared digests per round, with the view they came in.
    rounds: BTreeMap<Slot, BTreeMap<LaneId, (View, Digest)>>,
    held: BTreeMap<Key, Held>,
    ground: BTreeMap<Key, PrePrepare>,
    /// Digests of the batches we proposed in our own lane.
    own: BTreeSet<Digest>,
    own_order: std::collections::VecDeque<Digest>,
    // failure-spam
    views: BTreeMap<LaneId, View>,
    next_spam_us: Micros,
    /// Messages due to other replicas (spam, released pre-prepares).
    outbox: Vec<(ReplicaId, ReplicaMsg)>,
}

impl RccAdversary {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kind: FaultKind,
        me: ReplicaId,
        identity: Identity,
        config: Arc<ClusterConfig>,
        colluders: BTreeSet<ReplicaId>,
        heal_at_us: Micros,
        persist: bool,
        correct_clients: u32,
    ) -> RccAdversary {
        assert!(kind.is_rcc(), "{kind} is not an rcc adversary");
        let lanes = config.lanes().max(1) as u64;
        // Our first correct client (`owner_lane(c) = c mod m`).
        let target = (0..correct_clients as u64)
            .map(ClientId)
            .find(|c| c.0 % lanes == me.0 as u64 % lanes);
        RccAdversary {
            kind,
            me,
            identity,
            tag: ClusterTag::of(&config),
            lane: LaneId(me.0),
            config,
            colluders,
            heal_at_us,
            persist,
            target,
            last_release_us: 0,
            releases: BTreeMap::new(),
            dark: BTreeMap::new(),
            rounds: BTreeMap::new(),
            held: BTreeMap::new(),
            ground: BTreeMap::new(),
            own: BTreeSet::new(),
            own_order: Default::default(),
            views: BTreeMap::new(),
            next_spam_us: 0,
            outbox: Vec::new(),
        }
    }

    fn active(&self, now_us: Micros) -> bool {
        self.persist || now_us < self.heal_at_us
    }

    /// The lane this attacker proposes in, and the client it targets.
    pub fn lane(&self) -> LaneId {
        self.lane
    }

    pub fn target(&self) -> Option<ClientId> {
        self.target
    }

    /// Did we propose this batch in our own lane (rank statistic)?
    pub fn proposed(&self, digest: &Digest) -> bool {
        self.own.contains(digest)
    }

    fn timeout_us(&self) -> Micros {
        self.config.params.view_change_timeout_ms * 1_000
    }

    /// Is this a pre-prepare of our own instance (not one we send as
    /// coordinating leader of another lane)?
    fn own_pre_prepare(&self, msg: &ReplicaMsg) -> bool {
        matches!(msg, ReplicaMsg::PrePrepare(pp) if pp.lane == self.lane
            && self.config.instance_primary(pp.lane) == self.me)
    }

    /// A message the replica received: learn views and other lanes' rounds.
    pub fn observe(&mut self, msg: &ReplicaMsg) {
        let (lane, view) = match msg {
            ReplicaMsg::PrePrepare(m) => (m.lane, m.view),
            ReplicaMsg::Prepare(m) => (m.lane, m.view),
            ReplicaMsg::Commit(m) => (m.lane, m.view),
            ReplicaMsg::NewView(m) => (m.lane, m.view),
            _ => return,
        };
        let v = self.views.entry(lane).or_insert(View(0));
        *v = (*v).max(view);
        if let ReplicaMsg::PrePrepare(pp) = msg {
            if pp.lane != self.lane && self.kind == FaultKind::OrderAttack {
                if !self.rounds.contains_key(&pp.slot) && self.rounds.len() == ROUNDS_MAX {
                    self.rounds.pop_first();
                }
                let e = self.rounds.entry(pp.slot).or_default();
                if e.get(&pp.lane).is_none_or(|(v, _)| *v <= pp.view) {
                    e.insert(pp.lane, (pp.view, pp.digest));
                }
            }
        }
    }

    /// Drop a request on arrival? (`censor`: its replica never sees the
    /// target's requests, so it never proposes them.)
    pub fn drops_request(&self, now_us: Micros, r: &Request, counters: &mut Counters) -> bool {
        let drop = self.kind == FaultKind::Censor && self.active(now_us) && Some(r.client) == self.target;
        if drop {
            counters.fault("byz-censor");
        }
        drop
    }

    /// Rewrite one message to `to`: what goes out now, each after an extra delay.
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
        if self.kind == FaultKind::FailureSpam {
            self.spam(now_us, counters);
        }
        if !self.own_pre_prepare(&msg) {
            return vec![(0, msg)];
        }
        let ReplicaMsg::PrePrepare(pp) = msg else {
            unreachable!("checked by own_pre_prepare")
        };
        match self.kind {
            FaultKind::Throttle => self.throttle(now_us, pp, counters),
            FaultKind::InTheDark => self.in_the_dark(rng, to, pp, counters),
            FaultKind::OrderAttack => self.order_attack(now_us, to, pp, counters),
            FaultKind::Censor => {
                self.remember_own(pp.digest);
                vec![(0, ReplicaMsg::PrePrepare(pp))]
            }
            _ => vec![(0, ReplicaMsg::PrePrepare(pp))],
        }
    }

    /// Messages due now to other replicas (released holds, spam).
    pub fn take_due(&mut self, now_us: Micros, counters: &mut Counters) -> Vec<(ReplicaId, ReplicaMsg)> {
        if self.kind == FaultKind::OrderAttack {
            let due: Vec<Key> = self
                .held
                .iter()
                .filter(|(k, h)| h.until_us <= now_us || self.known_round(k.1).is_some())
                .map(|(k, _)| *k)
                .collect();
            for k in due {
                let h = self.held.remove(&k).expect("listed above");
                let pp = self.grind(k, h.pp, counters);
                for to in h.to {
                    self.outbox.push((to, ReplicaMsg::PrePrepare(pp.clone())));
                }
            }
        }
        std::mem::take(&mut self.outbox)
    }

    /// When the world must call `take_due` again, at the latest.
    pub fn wake_at(&self) -> Option<Micros> {
        self.held.values().map(|h| h.until_us).min()
    }

    fn remember_own(&mut self, d: Digest) {
        if self.own.insert(d) {
            if self.own_order.len() == OWN_MAX {
                if let Some(old) = self.own_order.pop_front() {
                    self.own.remove(&old);
                }
            }
            self.own_order.push_back(d);
        }
    }

    fn throttle(
        &mut self,
        now_us: Micros,
        pp: PrePrepare,
        counters: &mut Counters,
    ) -> Vec<(Micros, ReplicaMsg)> {
        let key = (pp.view, pp.slot);
        let release = match self.releases.get(&key) {
            Some(r) => *r,
            None => {
                let pace = self.config.params.view_change_timeout_ms * PACE_PERMILLE;
                let r = now_us.max(self.last_release_us + pace);
                self.last_release_us = r;
                if self.releases.len() == ROUNDS_MAX {
                    self.releases.pop_first();
                }
                self.releases.insert(key, r);
                r
            }
        };
        counters.fault("byz-throttle");
        self.remember_own(pp.digest);
        vec![(release.saturating_sub(now_us), ReplicaMsg::PrePrepare(pp))]
    }

    /// RCC Example III.4: 2f+1 replicas (ourselves included) get the
    /// proposal, the other f are kept in the dark.
    fn in_the_dark(
        &mut self,
        rng: &mut ChaCha8Rng,
        to: ReplicaId,
        pp: PrePrepare,
        counters: &mut Counters,
    ) -> Vec<(Micros, ReplicaMsg)> {
        let key = (pp.view, pp.slot);
        if !self.dark.contains_key(&key) {
            let mut others: Vec<ReplicaId> = (0..self.config.n() as u32)
                .map(ReplicaId)
                .filter(|r| *r != self.me)
                .collect();
            others.shuffle(rng);
            let lit = self.config.quorum().saturating_sub(1);
            let dark: BTreeSet<ReplicaId> = others.into_iter().skip(lit).collect();
            if self.dark.len() == ROUNDS_MAX {
                self.dark.pop_first();
            }
            self.dark.insert(key, dark);
        }
        self.remember_own(pp.digest);
        if self.dark[&key].contains(&to) {
            counters.fault("byz-in-the-dark");
            return vec![];
        }
        vec![(0, ReplicaMsg::PrePrepare(pp))]
    }

    fn order_attack(
        &mut self,
        now_us: Micros,
        to: ReplicaId,
        pp: PrePrepare,
        counters: &mut Counters,
    ) -> Vec<(Micros, ReplicaMsg)> {
        let key = (pp.view, pp.slot);
        if let Some(g) = self.ground.get(&key) {
            return vec![(0, ReplicaMsg::PrePrepare(g.clone()))];
        }
        if pp.batch.is_noop() {
            return vec![(0, ReplicaMsg::PrePrepare(pp))];
        }
        if let Some(h) = self.held.get_mut(&key) {
            h.to.insert(to);
            return vec![];
        }
        if self.known_round(pp.slot).is_none() {
            // Wait for the other lanes' proposals of this round, within the timers.
            let until_us = now_us + self.timeout_us() * HOLD_PERMILLE / 1_000;
            if self.held.len() == ROUNDS_MAX {
                self.held.pop_first();
            }
            self.held.insert(
                key,
                Held {
                    pp,
                    to: [to].into(),
                    until_us,
                },
            );
            counters.fault("byz-order-hold");
            return vec![];
        }
        let g = self.grind(key, pp, counters);
        vec![(0, ReplicaMsg::PrePrepare(g))]
    }

    /// The other lanes' digests of `round` in lane order, if we saw all of them.
    fn known_round(&self, round: Slot) -> Option<Vec<Digest>> {
        let seen = self.rounds.get(&round)?;
        (0..self.config.lanes())
            .filter(|l| LaneId(*l) != self.lane)
            .map(|l| seen.get(&LaneId(l)).map(|(_, d)| *d))
            .collect()
    }

    /// The round's digests with ours at our lane, unknown lanes guessed to
    /// be no-ops (idle instances fill a round with one once ours is ahead).
    fn round_digests(&self, round: Slot, ours: Digest) -> Vec<Digest> {
        let seen = self.rounds.get(&round);
        (0..self.config.lanes())
            .map(|l| {
                if LaneId(l) == self.lane {
                    ours
                } else {
                    seen.and_then(|s| s.get(&LaneId(l)))
                        .map_or_else(Batch::noop_digest, |(_, d)| *d)
                }
            })
            .collect()
    }

    /// Our rank in `round` if we propose `batch`.
    fn rank_of(&self, round: Slot, batch: &Batch) -> usize {
        let digests = self.round_digests(round, batch.digest());
        let order = round_permutation(&round_seed(round, &digests), digests.len());
        order
            .iter()
            .position(|l| LaneId(*l) == self.lane)
            .expect("a permutation of every lane")
    }

    /// Favoured client first, then the first request order (of at most
    /// `GRIND_MAX` tried) that puts our lane at rank 0; re-signed.
    fn grind(&mut self, key: Key, mut pp: PrePrepare, counters: &mut Counters) -> PrePrepare {
        let target = self.target;
        let mut requests = pp.batch.requests.clone();
        requests.sort_by_key(|r| Some(r.client) != target);
        let favoured = requests.iter().filter(|r| Some(r.client) == target).count();
        let mut best = Batch {
            requests: requests.clone(),
            time_ms: 0,
        };
        let mut won = self.rank_of(pp.slot, &best) == 0;
        // Heap's algorithm over the non-favoured tail, then over everything.
        for fixed in [favoured, 0] {
            if won {
                break;
            }
            let mut tries = 0;
            let mut cand = requests.clone();
            let tail = cand.len() - fixed;
            let mut c = vec![0usize; tail];
            let mut i = 0;
            while i < tail && tries < GRIND_MAX && !won {
                if c[i] < i {
                    let (a, b) = if i % 2 == 0 { (0, i) } else { (c[i], i) };
                    cand.swap(fixed + a, fixed + b);
                    tries += 1;
                    let batch = Batch {
                        requests: cand.clone(),
                        time_ms: 0,
                    };
                    if self.rank_of(pp.slot, &batch) == 0 {
                        best = batch;
                        won = true;
                    }
                    c[i] += 1;
                    i = 0;
                } else {
                    c[i] = 0;
                    i += 1;
                }
            }
        }
        counters.fault(if won {
            "byz-order-ground"
        } else {
            "byz-order-attack"
        });
        if best.digest() != pp.digest {
            pp.digest = best.digest();
            pp.batch = best;
            pp.sig = Signature([0; 64]);
            resign_pre_prepare(&self.identity, &self.tag, &mut pp);
        }
        if self.ground.len() == ROUNDS_MAX {
            self.ground.pop_first();
        }
        self.ground.insert(key, pp.clone());
        self.remember_own(pp.digest);
        pp
    }

    /// False FAILUREs: a VIEW-CHANGE for the next view of every instance of
    /// a correct primary, claiming nothing, to every other replica.
    fn spam(&mut self, now_us: Micros, counters: &mut Counters) {
        if now_us < self.next_spam_us {
            return;
        }
        self.next_spam_us = now_us + SPAM_EVERY_US;
        for l in 0..self.config.lanes() {
            let lane = LaneId(l);
            if self.colluders.contains(&self.config.instance_primary(lane)) {
                continue;
            }
            let view = self.views.get(&lane).copied().unwrap_or(View(0));
            let mut vc = ViewChange {
                lane,
                new_view: View(view.0 + 1),
                stable: None,
                prepared: vec![],
                pre_prepared: vec![],
                replica: self.me,
                sig: Signature([0; 64]),
            };
            resign_view_change(&self.identity, &self.tag, &mut vc);
            for r in 0..self.config.n() as u32 {
                if ReplicaId(r) != self.me {
                    self.outbox
                        .push((ReplicaId(r), ReplicaMsg::ViewChange(vc.clone())));
                    counters.fault("byz-failure-spam");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use chorus_core::{ClientAuthKind, LeaderRotation, OrderingMode, RequestSeq};
    use rand::SeedableRng;

    fn setup(kind: FaultKind, me: u32) -> (RccAdversary, Arc<ClusterConfig>, Vec<Identity>, Vec<Identity>) {
        let opts = crate::options::SimOptions::new(OrderingMode::Rcc, 1, 4);
        let params = opts.params(ClientAuthKind::Signature, LeaderRotation::Fixed);
        let (cfg, keys, client_keys) = ClusterConfig::for_testing(4, 4, params, 7);
        let cfg = Arc::new(cfg);
        let adv = RccAdversary::new(
            kind,
            ReplicaId(me),
            keys[me as usize].clone(),
            cfg.clone(),
            [ReplicaId(me)].into(),
            1_000_000,
            false,
            4,
        );
        (adv, cfg, keys, client_keys)
    }

    fn request(cfg: &ClusterConfig, keys: &[Identity], client: u64, seq: u64) -> Request {
        Request::with_signature(
            &ClusterTag::of(cfg),
            ClientId(client),
            RequestSeq(seq),
            0,
            Bytes::from(format!("op{seq}")),
            &keys[client as usize],
        )
    }

    fn pp(cfg: &ClusterConfig, key: &Identity, lane: u32, slot: u64, batch: Batch) -> PrePrepare {
        let mut m = PrePrepare {
            lane: LaneId(lane),
            view: View(0),
            slot: Slot(slot),
            digest: batch.digest(),
            batch,
            sig: Signature([0; 64]),
        };
        resign_pre_prepare(key, &ClusterTag::of(cfg), &mut m);
        m
    }

    #[test]
    fn throttle_paces_only_its_own_lane() {
        let (mut adv, cfg, keys, _) = setup(FaultKind::Throttle, 1);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut c = Counters::default();
        let pace = cfg.params.view_change_timeout_ms * PACE_PERMILLE;
        let mut delays = vec![];
        for slot in 0..3 {
            let m = ReplicaMsg::PrePrepare(pp(&cfg, &keys[1], 1, slot, Batch::noop()));
            let out = adv.outgoing(&mut rng, 10, ReplicaId(0), m, &mut c);
            delays.push(out[0].0);
        }
        assert_eq!(delays, vec![pace - 10, 2 * pace - 10, 3 * pace - 10]);
        // Another lane's pre-prepare (as coordinating leader) is not delayed.
        let other = ReplicaMsg::PrePrepare(pp(&cfg, &keys[1], 0, 0, Batch::noop()));
        assert_eq!(adv.outgoing(&mut rng, 10, ReplicaId(0), other, &mut c)[0].0, 0);
        // After healing (no persist) nothing is delayed.
        let late = ReplicaMsg::PrePrepare(pp(&cfg, &keys[1], 1, 9, Batch::noop()));
        assert_eq!(
            adv.outgoing(&mut rng, 2_000_000, ReplicaId(0), late, &mut c)[0].0,
            0
        );
    }

    #[test]
    fn in_the_dark_reaches_exactly_a_quorum_per_round_and_varies() {
        let (mut adv, cfg, keys, _) = setup(FaultKind::InTheDark, 2);
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let mut c = Counters::default();
        let mut darks = BTreeSet::new();
        for slot in 0..20 {
            let m = pp(&cfg, &keys[2], 2, slot, Batch::noop());
            let mut lit = vec![];
            for to in [0, 1, 3] {
                let out = adv.outgoing(
                    &mut rng,
                    0,
                    ReplicaId(to),
                    ReplicaMsg::PrePrepare(m.clone()),
                    &mut c,
                );
                if !out.is_empty() {
                    lit.push(to);
                }
            }
            // 2f + 1 = 3 with ourselves: two others get it.
            assert_eq!(lit.len(), cfg.quorum() - 1);
            darks.insert(lit);
        }
        assert!(darks.len() > 1, "a different subset per round");
    }

    #[test]
    fn censor_drops_only_its_target() {
        let (adv, cfg, _, ck) = setup(FaultKind::Censor, 1);
        assert_eq!(adv.target(), Some(ClientId(1)));
        let mut c = Counters::default();
        assert!(adv.drops_request(0, &request(&cfg, &ck, 1, 1), &mut c));
        assert!(!adv.drops_request(0, &request(&cfg, &ck, 2, 1), &mut c));
        assert!(!adv.drops_request(2_000_000, &request(&cfg, &ck, 1, 2), &mut c));
        assert_eq!(c.faults["byz-censor"], 1);
    }

    #[test]
    fn order_attacker_holds_until_it_knows_the_round_then_wins_rank_zero() {
        let (mut adv, cfg, keys, ck) = setup(FaultKind::OrderAttack, 0);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut c = Counters::default();
        let mut wins = 0;
        for round in 0..40u64 {
            let batch = Batch {
                requests: (0..4)
                    .map(|i| request(&cfg, &ck, [0, 0, 3, 3][i], round * 4 + i as u64 + 1))
                    .collect(),
                time_ms: 0,
            };
            let mine = pp(&cfg, &keys[0], 0, round, batch);
            let out = adv.outgoing(
                &mut rng,
                0,
                ReplicaId(1),
                ReplicaMsg::PrePrepare(mine.clone()),
                &mut c,
            );
            assert!(out.is_empty(), "held until the round is known");
            let others: Vec<Digest> = (1..4)
                .map(|l| {
                    let b = Batch {
                        requests: vec![request(&cfg, &ck, l, 1_000 + round)],
                        time_ms: 0,
                    };
                    let m = pp(&cfg, &keys[l as usize], l as u32, round, b);
                    adv.observe(&ReplicaMsg::PrePrepare(m.clone()));
                    m.digest
                })
                .collect();
            let due = adv.take_due(0, &mut c);
            assert_eq!(due.len(), 1);
            let ReplicaMsg::PrePrepare(sent) = &due[0].1 else {
                panic!()
            };
            assert_eq!(sent.digest, sent.batch.digest());
            let mut sorted = sent.batch.requests.clone();
            sorted.sort_by_key(|r| r.seq);
            assert_eq!(sorted, mine.batch.requests, "the same requests, reordered");
            assert!(adv.proposed(&sent.digest));
            let digests = vec![sent.digest, others[0], others[1], others[2]];
            let order = round_permutation(&round_seed(Slot(round), &digests), 4);
            wins += (order[0] == 0) as u32;
            // The favoured client goes first unless only another order wins.
            assert!(sent.batch.requests[0].client == ClientId(0) || order[0] == 0);
            // Later recipients get the same version.
            let again = adv.outgoing(&mut rng, 0, ReplicaId(2), ReplicaMsg::PrePrepare(mine), &mut c);
            let ReplicaMsg::PrePrepare(a) = &again[0].1 else {
                panic!()
            };
            assert_eq!(a.digest, sent.digest);
        }
        // 4 orders of the tail, each a 1/4 chance: ground rounds win most of the time.
        assert!(wins > 30, "won rank 0 in {wins} of 40 rounds");
    }

    #[test]
    fn failure_spam_accuses_correct_instances_at_a_bounded_rate() {
        let (mut adv, cfg, keys, _) = setup(FaultKind::FailureSpam, 3);
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let mut c = Counters::default();
        let m = ReplicaMsg::PrePrepare(pp(&cfg, &keys[0], 0, 0, Batch::noop()));
        let mut spam = vec![];
        for t in 0..10 {
            adv.outgoing(&mut rng, t * 10_000, ReplicaId(0), m.clone(), &mut c);
            spam.extend(adv.take_due(t * 10_000, &mut c));
        }
        // One round of FAILUREs (3 correct instances × 3 recipients) per 100 ms.
        assert_eq!(spam.len(), 9);
        for (_, msg) in &spam {
            let ReplicaMsg::ViewChange(vc) = msg else { panic!() };
            assert_ne!(vc.lane, LaneId(3), "not its own instance");
            assert_eq!(vc.new_view, View(1));
            assert_eq!(chorus_order::certs::verify_view_change(&cfg, vc), Ok(()));
        }
    }
}
