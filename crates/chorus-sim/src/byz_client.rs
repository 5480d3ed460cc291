//! Byzantine clients (DESIGN §6: any number of them). They never wait for
//! replies; they send, while faults are active, requests that a correct system
//! must refuse (bad authenticators, oversized operations) or must execute at
//! most once (the same sequence number for different operations, sent to
//! different replicas). A partial MAC vector (valid at f+1 replicas only)
//! is authentic and may be executed, but must not cost a view change.

use crate::checker::Issue;
use crate::client::Credentials;
use crate::faults::FaultKind;
use crate::queue::Micros;
use bytes::Bytes;
use chorus_apps::KvOp;
use chorus_core::{flags, Authenticator, Mac, ReplicaId, Request, RequestSeq, Signature};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Requests one Byzantine client sends at most.
const SENDS_MAX: u32 = 24;
const TICK_MIN_US: Micros = 50_000;
const TICK_MAX_US: Micros = 250_000;

/// One request a Byzantine client sends, to whom, and what the checker must
/// know about it.
#[derive(Debug)]
pub struct ByzSend {
    /// Recipients (replica ids).
    pub to: Vec<ReplicaId>,
    pub request: Request,
    pub issue: Issue,
}

pub struct ByzClient {
    pub creds: Credentials,
    pub kind: FaultKind,
    n: usize,
    max_op_bytes: usize,
    next_seq: u64,
    sent: u32,
}

impl ByzClient {
    pub fn new(creds: Credentials, kind: FaultKind, n: usize, max_op_bytes: usize) -> ByzClient {
        assert!(kind.is_byzantine_client(), "{kind} is not a client fault");
        ByzClient {
            creds,
            kind,
            n,
            max_op_bytes,
            next_seq: 1,
            sent: 0,
        }
    }

    /// One step: the requests to send now, and when to step again (None = done).
    pub fn tick(&mut self, rng: &mut ChaCha8Rng) -> (Vec<ByzSend>, Option<Micros>) {
        if self.sent >= SENDS_MAX {
            return (vec![], None);
        }
        self.sent += 1;
        let all: Vec<ReplicaId> = (0..self.n as u32).map(ReplicaId).collect();
        let sends = match self.kind {
            FaultKind::BadAuth => vec![self.bad_auth(rng, all)],
            FaultKind::Oversized => vec![self.oversized(rng, all)],
            FaultKind::DupSeq => self.dup_seq(rng, all),
            FaultKind::SwitchSpam => self.switch_spam(rng, all),
            other => unreachable!("{other} is not a client fault"),
        };
        (sends, Some(rng.gen_range(TICK_MIN_US..=TICK_MAX_US)))
    }

    fn fresh_seq(&mut self) -> RequestSeq {
        let s = RequestSeq(self.next_seq);
        self.next_seq += 1;
        s
    }

    fn bad_auth(&mut self, rng: &mut ChaCha8Rng, to: Vec<ReplicaId>) -> ByzSend {
        let seq = self.fresh_seq();
        let op = KvOp::put("byz", format!("bad-auth c{} q{}", self.creds.id.0, seq.0));
        let mut request = self.creds.request(seq, op.clone());
        if rng.gen_range(0..5) == 4 {
            return self.partial_mac(seq, op, to);
        }
        match rng.gen_range(0..4) {
            // Garbage MACs for every replica.
            0 => {
                request.auth =
                    Authenticator::Macs(std::sync::Arc::new((0..self.n).map(|_| Mac(rng.gen())).collect()))
            }
            // A garbage signature.
            1 => {
                let mut sig = [0u8; 64];
                rng.fill(&mut sig[..]);
                request.auth = Authenticator::Signature(Signature(sig));
            }
            // Authenticated, then the operation is changed.
            2 => request.op = KvOp::put("byz", format!("tampered c{} q{}", self.creds.id.0, seq.0)),
            // Authenticated with a flag bit no version understands set afterwards.
            _ => request.flags |= !flags::KNOWN,
        }
        ByzSend {
            to,
            request,
            issue: Issue::Forbidden("bad authenticator"),
        }
    }

    /// Aardvark's "Big MAC" attack (Clement et al., NSDI'09): a MAC vector
    /// whose entries are valid for exactly f+1 replicas — 0..=f, which
    /// include the first primary of every lane under fixed rotation — and
    /// garbage for the others. The client did make it, so it may be
    /// executed (once); it must never cost a correct primary a view change.
    fn partial_mac(&mut self, seq: RequestSeq, op: Bytes, to: Vec<ReplicaId>) -> ByzSend {
        let f = chorus_core::quorum::max_faulty(self.n);
        let mut request = Request::with_macs(&self.creds.tag, self.creds.id, seq, 0, op, &self.creds.keys);
        if let Authenticator::Macs(macs) = &mut request.auth {
            for (i, m) in std::sync::Arc::make_mut(macs).iter_mut().enumerate().skip(f + 1) {
                m.0 = [0xA5 ^ i as u8; 16];
            }
        }
        ByzSend {
            to,
            request,
            issue: Issue::Valid,
        }
    }

    fn oversized(&mut self, rng: &mut ChaCha8Rng, to: Vec<ReplicaId>) -> ByzSend {
        let seq = self.fresh_seq();
        let len = self.max_op_bytes + rng.gen_range(1..=256);
        let mut op = vec![0u8; len];
        rng.fill(&mut op[..]);
        ByzSend {
            to,
            request: self.creds.request(seq, Bytes::from(op)),
            issue: Issue::Forbidden("over the operation size limit"),
        }
    }

    /// RCC §III-E: switch back and forth — to any instance, to one that does
    /// not exist, sometimes under an old seq (a replay, or a seq an ordinary
    /// request used) — each followed by an ordinary request sent to only
    /// part of the replicas. The client must never get a request executed
    /// twice, nor its requests proposed by two instances in one round.
    fn switch_spam(&mut self, rng: &mut ChaCha8Rng, all: Vec<ReplicaId>) -> Vec<ByzSend> {
        let n = self.n as u32;
        let target = if rng.gen_range(0..6) == 0 {
            n + rng.gen_range(0..4)
        } else {
            rng.gen_range(0..n)
        };
        let seq = if self.next_seq > 1 && rng.gen_bool(0.2) {
            RequestSeq(rng.gen_range(1..self.next_seq))
        } else {
            self.fresh_seq()
        };
        let switch = ByzSend {
            to: all.clone(),
            request: self.creds.switch_request(seq, target),
            issue: Issue::Valid,
        };
        let seq = self.fresh_seq();
        let op = KvOp::put("byz", format!("switch-spam c{} q{}", self.creds.id.0, seq.0));
        let split = rng.gen_range(1..=all.len());
        let ordinary = ByzSend {
            to: all[..split].to_vec(),
            request: self.creds.request(seq, op),
            issue: Issue::Valid,
        };
        vec![switch, ordinary]
    }

    /// The same sequence number for two different, validly authenticated
    /// operations, each sent to a different part of the replicas; sometimes an
    /// old sequence number is reused.
    fn dup_seq(&mut self, rng: &mut ChaCha8Rng, all: Vec<ReplicaId>) -> Vec<ByzSend> {
        let seq = if self.next_seq > 1 && rng.gen_bool(0.3) {
            RequestSeq(rng.gen_range(1..self.next_seq))
        } else {
            self.fresh_seq()
        };
        let a = KvOp::put(
            "byz",
            format!("dup-a c{} q{} #{}", self.creds.id.0, seq.0, self.sent),
        );
        let b = if rng.gen_bool(0.5) {
            KvOp::put(
                "byz",
                format!("dup-b c{} q{} #{}", self.creds.id.0, seq.0, self.sent),
            )
        } else {
            // Not a decodable operation at all: the service must answer an error.
            let mut junk = vec![0u8; rng.gen_range(1..32)];
            rng.fill(&mut junk[..]);
            Bytes::from(junk)
        };
        let split = rng.gen_range(0..=all.len());
        let (first, second) = all.split_at(split);
        [(first.to_vec(), a), (second.to_vec(), b)]
            .into_iter()
            .filter(|(to, _)| !to.is_empty())
            .map(|(to, op)| ByzSend {
                to,
                request: self.creds.request(seq, op),
                issue: Issue::Valid,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{ClientId, ClusterConfig, ClusterTag, ProtocolParams};
    use rand::SeedableRng;

    fn setup(kind: FaultKind) -> (ByzClient, ClusterConfig, Vec<chorus_core::Identity>) {
        let (config, replicas, clients) = ClusterConfig::for_testing(4, 1, ProtocolParams::default(), 5);
        let creds = Credentials::new(&config, ClientId(0), clients[0].clone());
        (ByzClient::new(creds, kind, 4, 512), config, replicas)
    }

    fn verifies_anywhere(r: &Request, config: &ClusterConfig, replicas: &[chorus_core::Identity]) -> bool {
        replicas.iter().enumerate().any(|(i, id)| {
            let key = id.pairwise_key(&config.clients[0].identity);
            r.verify(
                &ClusterTag::of(config),
                ReplicaId(i as u32),
                &key,
                &config.clients[0].identity,
            )
        })
    }

    fn verifies_at(r: &Request, config: &ClusterConfig, replicas: &[chorus_core::Identity]) -> Vec<usize> {
        (0..replicas.len())
            .filter(|&i| {
                let key = replicas[i].pairwise_key(&config.clients[0].identity);
                r.verify(
                    &ClusterTag::of(config),
                    ReplicaId(i as u32),
                    &key,
                    &config.clients[0].identity,
                )
            })
            .collect()
    }

    #[test]
    fn bad_auth_never_verifies_and_is_forbidden_unless_partial() {
        let (mut c, config, replicas) = setup(FaultKind::BadAuth);
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let mut partial = 0;
        for _ in 0..SENDS_MAX {
            let (sends, next) = c.tick(&mut rng);
            assert!(next.is_some());
            for s in sends {
                if s.issue == Issue::Valid {
                    // Partial MAC vector: valid at exactly f+1 = 2 replicas, 0 and 1.
                    assert_eq!(verifies_at(&s.request, &config, &replicas), vec![0, 1]);
                    partial += 1;
                    continue;
                }
                assert!(!verifies_anywhere(&s.request, &config, &replicas));
                assert!(matches!(s.issue, Issue::Forbidden(_)));
            }
        }
        assert!(partial > 0, "the partial-MAC variant is drawn");
        let (sends, next) = c.tick(&mut rng);
        assert!(
            sends.is_empty() && next.is_none(),
            "a Byzantine client's sends are bounded"
        );
    }

    /// RCC §III-E: authentic switches back and forth, some to an absent
    /// instance, some under reused seqs, each with an ordinary request.
    #[test]
    fn switch_spam_switches_back_and_forth_with_authentic_requests() {
        let (mut c, config, replicas) = setup(FaultKind::SwitchSpam);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let (mut targets, mut absent, mut reused) = (std::collections::BTreeSet::new(), 0, 0);
        let mut seqs = std::collections::BTreeSet::new();
        for _ in 0..SENDS_MAX {
            let (sends, _) = c.tick(&mut rng);
            assert_eq!(sends.len(), 2);
            let t = chorus_core::switch_target(&sends[0].request).expect("a switch first");
            targets.insert(t);
            absent += usize::from(t >= 4);
            reused += usize::from(!seqs.insert(sends[0].request.seq));
            seqs.insert(sends[1].request.seq);
            assert!(!sends[1].request.is_switch());
            for s in &sends {
                assert_eq!(s.issue, Issue::Valid);
                assert!(verifies_anywhere(&s.request, &config, &replicas));
            }
        }
        assert!(targets.iter().filter(|t| **t < 4).count() >= 3, "{targets:?}");
        assert!(absent > 0 && reused > 0, "absent {absent} reused {reused}");
    }

    #[test]
    fn oversized_requests_verify_but_exceed_the_limit() {
        let (mut c, config, replicas) = setup(FaultKind::Oversized);
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let (sends, _) = c.tick(&mut rng);
        assert!(sends[0].request.op.len() > 512);
        assert!(verifies_anywhere(&sends[0].request, &config, &replicas));
    }

    #[test]
    fn dup_seq_sends_different_valid_ops_under_one_seq() {
        let (mut c, config, replicas) = setup(FaultKind::DupSeq);
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let mut saw_split = false;
        for _ in 0..10 {
            let (sends, _) = c.tick(&mut rng);
            let total: usize = sends.iter().map(|s| s.to.len()).sum();
            assert_eq!(total, 4);
            for s in &sends {
                assert!(verifies_anywhere(&s.request, &config, &replicas));
            }
            if sends.len() == 2 {
                saw_split = true;
                assert_eq!(sends[0].request.seq, sends[1].request.seq);
                assert_ne!(sends[0].request.op, sends[1].request.op);
            }
        }
        assert!(saw_split);
    }
}
