//! SAREK §IV-D re-prediction on the ordering side (Fig. 5).
//!
//! The executor suspends a request that accessed partitions outside its
//! prediction and hands the re-prediction to its replica, which signs and
//! broadcasts it (a [`RePredictionVote`]). 2f+1 matching votes from distinct
//! replicas are a certificate; the certificate is put in the pool of every
//! added partition's lane as a system request, so that lane's leader orders
//! it like any other request (and a leader that does not is replaced by the
//! usual request timer and view change). The executor takes the decided
//! certificate as the suspended request's CROSS-BORDER-SYNC there.
//!
//! A Byzantine replica's false re-prediction gets at most f matching votes
//! besides its own, never 2f+1, so it is never ordered (§IV-C, Table I
//! row 3). Backups verify the certificate in every pre-prepare
//! ([`verify_cert`]), so a Byzantine leader cannot order one either.

use chorus_core::{
    Batch, ClusterConfig, ClusterTag, Identity, LaneId, RePrediction, RePredictionCert, RePredictionVote,
    ReplicaId, Request, Signature,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Votes kept per voter (oldest dropped first): a Byzantine replica cannot
/// grow the table beyond this with bodies nobody else votes for.
pub const VOTES_PER_REPLICA: usize = 256;
/// Certified re-predictions kept until their SYNCs are decided.
pub const CERTS_KEPT: usize = 1024;

/// The partitions of the configuration (lanes), as `u16`.
fn partitions(cfg: &ClusterConfig) -> u16 {
    u16::try_from(cfg.lanes()).unwrap_or(u16::MAX)
}

/// A certificate every replica accepts: well formed, 2f+1 distinct
/// replicas' valid signatures over the same body.
pub fn verify_cert(cfg: &ClusterConfig, tag: &ClusterTag, cert: &RePredictionCert) -> bool {
    cert.verify(tag, partitions(cfg), cfg.quorum(), |r| {
        cfg.replica(r).map(|i| &i.identity)
    })
}

#[derive(Debug, Clone)]
struct Certified {
    request: Request,
    /// Added lanes whose SYNC is not decided yet (here).
    open: BTreeSet<LaneId>,
}

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub struct RePredictions {
    me: ReplicaId,
    identity: Identity,
    tag: ClusterTag,
    votes: BTreeMap<RePrediction, BTreeMap<ReplicaId, Signature>>,
    by_voter: BTreeMap<ReplicaId, VecDeque<RePrediction>>,
    /// Our own votes: sent again every status round until their SYNCs are
    /// decided (a lost vote must not leave a request suspended forever).
    own: BTreeMap<RePrediction, RePredictionVote>,
    own_order: VecDeque<RePrediction>,
    certified: BTreeMap<RePrediction, Certified>,
    certified_order: VecDeque<RePrediction>,
}

/// What a vote did.
#[derive(Debug, PartialEq, Eq)]
pub enum VoteOutcome {
    Rejected(&'static str),
    Counted,
    /// This vote completed the certificate: order this request in these lanes.
    Certified(Request, Vec<LaneId>),
}

impl RePredictions {
    pub fn new(cfg: &ClusterConfig, me: ReplicaId, identity: Identity) -> RePredictions {
        RePredictions {
            me,
            identity,
            tag: ClusterTag::of(cfg),
            votes: BTreeMap::new(),
            by_voter: BTreeMap::new(),
            own: BTreeMap::new(),
            own_order: VecDeque::new(),
            certified: BTreeMap::new(),
            certified_order: VecDeque::new(),
        }
    }

    /// Our executor suspended a request: sign its re-prediction. Returns the
    /// vote to broadcast and what it did to our own count.
    pub fn propose(
        &mut self,
        cfg: &ClusterConfig,
        body: RePrediction,
    ) -> (Option<RePredictionVote>, VoteOutcome) {
        if !body.is_well_formed(partitions(cfg)) {
            return (None, VoteOutcome::Rejected("reprediction-malformed"));
        }
        if self.certified.contains_key(&body) {
            return (None, VoteOutcome::Counted);
        }
        let vote = body.sign(&self.tag, self.me, &self.identity);
        if !self.own.contains_key(&body) {
            if self.own_order.len() >= CERTS_KEPT {
                if let Some(old) = self.own_order.pop_front() {
                    self.own.remove(&old);
                }
            }
            self.own_order.push_back(body.clone());
        }
        self.own.insert(body, vote.clone());
        let outcome = self.count(cfg, vote.clone());
        (Some(vote), outcome)
    }

    /// A peer's vote (possibly relayed: the signature names the voter).
    pub fn on_vote(&mut self, cfg: &ClusterConfig, vote: RePredictionVote) -> VoteOutcome {
        let Some(info) = cfg.replica(vote.replica) else {
            return VoteOutcome::Rejected("reprediction-unknown-voter");
        };
        if !vote.body.is_well_formed(partitions(cfg)) {
            return VoteOutcome::Rejected("reprediction-malformed");
        }
        if !vote.verify(&self.tag, &info.identity) {
            return VoteOutcome::Rejected("reprediction-bad-signature");
        }
        if self.certified.contains_key(&vote.body) {
            return VoteOutcome::Counted;
        }
        self.count(cfg, vote)
    }

    fn count(&mut self, cfg: &ClusterConfig, vote: RePredictionVote) -> VoteOutcome {
        let RePredictionVote { body, replica, sig } = vote;
        let voters = self.votes.entry(body.clone()).or_default();
        if voters.insert(replica, sig).is_none() {
            let mine = self.by_voter.entry(replica).or_default();
            mine.push_back(body.clone());
            if mine.len() > VOTES_PER_REPLICA {
                let old = mine.pop_front().expect("over the bound");
                if let Some(v) = self.votes.get_mut(&old) {
                    v.remove(&replica);
                    if v.is_empty() {
                        self.votes.remove(&old);
                    }
                }
            }
        }
        let Some(voters) = self.votes.get(&body) else {
            return VoteOutcome::Counted;
        };
        if voters.len() < cfg.quorum() {
            return VoteOutcome::Counted;
        }
        let cert = RePredictionCert {
            votes: voters.iter().take(cfg.quorum()).map(|(r, s)| (*r, *s)).collect(),
            body: body.clone(),
        };
        debug_assert!(
            verify_cert(cfg, &self.tag, &cert),
            "only verified votes are counted"
        );
        self.forget_votes(&body);
        let request = cert.to_request();
        let lanes = self.certify(body, request.clone());
        VoteOutcome::Certified(request, lanes)
    }

    fn forget_votes(&mut self, body: &RePrediction) {
        if let Some(voters) = self.votes.remove(body) {
            for r in voters.keys() {
                if let Some(q) = self.by_voter.get_mut(r) {
                    q.retain(|b| b != body);
                }
            }
        }
    }

    fn certify(&mut self, body: RePrediction, request: Request) -> Vec<LaneId> {
        let open: BTreeSet<LaneId> = body.added.iter().map(|p| LaneId(u32::from(*p))).collect();
        let lanes = open.iter().copied().collect();
        if self.certified_order.len() >= CERTS_KEPT {
            if let Some(old) = self.certified_order.pop_front() {
                self.certified.remove(&old);
            }
        }
        self.certified_order.push_back(body.clone());
        self.certified.insert(body, Certified { request, open });
        lanes
    }

    /// `lane` decided `batch`: its re-prediction SYNCs are ordered there. A
    /// decided certificate we did not complete ourselves is learnt for its
    /// other lanes only if we proposed it too (a current suspension): a
    /// Byzantine leader re-ordering old certificates must not push out the
    /// ones still open.
    pub fn on_decided(&mut self, lane: LaneId, batch: &Batch) {
        for r in batch.requests.iter().filter(|r| r.is_reprediction()) {
            let Some(cert) = RePredictionCert::from_request(r) else {
                continue;
            };
            let body = cert.body;
            if !self.certified.contains_key(&body) {
                if !self.own.contains_key(&body) {
                    continue;
                }
                self.forget_votes(&body);
                self.certify(body.clone(), r.clone());
            }
            let done = self.certified.get_mut(&body).is_some_and(|c| {
                c.open.remove(&lane);
                c.open.is_empty()
            });
            if done {
                self.certified.remove(&body);
                self.certified_order.retain(|b| b != &body);
                self.own.remove(&body);
                self.own_order.retain(|b| b != &body);
            }
        }
    }

    /// Our votes still to be heard (sent again every status round).
    pub fn own_votes(&self) -> impl Iterator<Item = &RePredictionVote> + '_ {
        self.own.values()
    }

    /// Certificates whose SYNC is not decided in some lane yet: offered to
    /// that lane's pool again (it may have been full, or cleared by a state
    /// transfer).
    pub fn undecided(&self) -> impl Iterator<Item = (LaneId, &Request)> + '_ {
        self.certified
            .values()
            .flat_map(|c| c.open.iter().map(move |l| (*l, &c.request)))
    }

    pub fn pending_votes(&self) -> usize {
        self.votes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{ClientId, Digest, ProtocolParams, RequestSeq};

    fn setup() -> (ClusterConfig, Vec<Identity>) {
        let params = ProtocolParams {
            mode: chorus_core::OrderingMode::Sarek,
            pillars: 4,
            ..ProtocolParams::default()
        };
        let (cfg, replicas, _) = ClusterConfig::for_testing(4, 1, params, 3);
        (cfg, replicas)
    }

    fn body() -> RePrediction {
        RePrediction {
            request: Digest::of(b"r"),
            client: ClientId(0),
            seq: RequestSeq(1),
            partitions: vec![0, 2],
            added: vec![2],
        }
    }

    fn votes(cfg: &ClusterConfig, ids: &[Identity], b: &RePrediction) -> Vec<RePredictionVote> {
        let tag = ClusterTag::of(cfg);
        ids.iter()
            .enumerate()
            .map(|(i, id)| b.sign(&tag, ReplicaId(i as u32), id))
            .collect()
    }

    #[test]
    fn a_quorum_of_matching_votes_certifies_2f_do_not() {
        let (cfg, ids) = setup();
        let mut r = RePredictions::new(&cfg, ReplicaId(3), ids[3].clone());
        let v = votes(&cfg, &ids, &body());
        assert_eq!(r.on_vote(&cfg, v[0].clone()), VoteOutcome::Counted);
        assert_eq!(r.on_vote(&cfg, v[1].clone()), VoteOutcome::Counted);
        // A repeated vote counts once: 2f distinct votes only.
        assert_eq!(r.on_vote(&cfg, v[1].clone()), VoteOutcome::Counted);
        assert_eq!(r.undecided().count(), 0);
        let VoteOutcome::Certified(req, lanes) = r.on_vote(&cfg, v[2].clone()) else {
            panic!("2f+1 votes certify");
        };
        assert_eq!(lanes, vec![LaneId(2)]);
        let cert = RePredictionCert::from_request(&req).unwrap();
        assert!(verify_cert(&cfg, &ClusterTag::of(&cfg), &cert));
        assert_eq!(r.undecided().count(), 1);
        // Decided in lane 2: nothing left to order, our vote no longer sent.
        r.on_decided(LaneId(2), &Batch::new(vec![req], 0));
        assert_eq!(r.undecided().count(), 0);
    }

    #[test]
    fn a_false_reprediction_never_gathers_a_quorum() {
        let (cfg, ids) = setup();
        let mut r = RePredictions::new(&cfg, ReplicaId(3), ids[3].clone());
        // The Byzantine replica 0 votes for a body the others do not; the
        // correct ones vote for the real one.
        let mut false_body = body();
        false_body.partitions = vec![0, 3];
        false_body.added = vec![3];
        let f = votes(&cfg, &ids, &false_body);
        let t = votes(&cfg, &ids, &body());
        assert_eq!(r.on_vote(&cfg, f[0].clone()), VoteOutcome::Counted);
        assert_eq!(r.on_vote(&cfg, t[1].clone()), VoteOutcome::Counted);
        assert_eq!(r.on_vote(&cfg, t[2].clone()), VoteOutcome::Counted);
        assert!(matches!(r.propose(&cfg, body()).1, VoteOutcome::Certified(..)));
        assert_eq!(r.undecided().count(), 1, "only the true one");
        // A vote signed by another replica than it names is refused.
        let mut forged = f[0].clone();
        forged.replica = ReplicaId(1);
        assert_eq!(
            r.on_vote(&cfg, forged),
            VoteOutcome::Rejected("reprediction-bad-signature")
        );
        // Adding a partition below the highest predicted is refused unsigned.
        let mut below = body();
        below.partitions = vec![0, 1, 2];
        below.added = vec![1];
        assert_eq!(
            r.propose(&cfg, below).1,
            VoteOutcome::Rejected("reprediction-malformed")
        );
    }

    #[test]
    fn a_spamming_voter_is_bounded() {
        let (cfg, ids) = setup();
        let mut r = RePredictions::new(&cfg, ReplicaId(3), ids[3].clone());
        let tag = ClusterTag::of(&cfg);
        for i in 0..(VOTES_PER_REPLICA as u64 * 3) {
            let mut b = body();
            b.seq = RequestSeq(i + 1);
            r.on_vote(&cfg, b.sign(&tag, ReplicaId(0), &ids[0]));
        }
        assert_eq!(r.pending_votes(), VOTES_PER_REPLICA);
    }
}
