//! A tiny fake cluster: each "replica" is a few tokio tasks that accept client
//! connections through chorus-net, check the request authenticator like a
//! real replica, and answer `ok:<op>` unless told to misbehave. The first
//! answer to a request is full from the designated replica (`seq mod n`) and a
//! digest from the others; a retransmitted request is answered in full by
//! everyone (PBFT §4.1: replicas re-send the reply), so a faulty designated
//! replica cannot stall the client.
#![allow(dead_code)]

use bytes::Bytes;
use chorus_client::{Client, ClientOptions};
use chorus_core::{
    decode, encode, ClientAuthKind, ClientId, ClientMsg, ClusterConfig, Digest, Identity, Limits,
    ProtocolParams, ReplicaId, Reply, ReplyBody, Request,
};
use chorus_net::{accept, Counters, NetLimits, PeerRole};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behavior {
    Honest,
    /// Answers every request with a full, wrong result.
    Byzantine,
    /// Accepts connections and reads, never answers.
    Silent,
    /// Answers `Busy` the first `n` times it sees each request, then honestly.
    BusyFirst(u32),
    /// Rejects everything.
    RejectAll,
    /// Rejects the read-only fast path, orders everything else honestly.
    NoFastPath,
    /// Answers read-only requests from a stale state ("old:<op>").
    StaleReads,
    /// Closes the first connection on its first request, honest afterwards.
    DropFirstConnection,
    /// Answers only with digests, never with the full result.
    DigestOnly,
    /// Answers with the honest result of the op but for another request
    /// under the same seq (what a reused seq got before issue 16 finding 5).
    OtherRequest,
    /// RCC §III-E: the client's instance censors it: silent on its requests
    /// until a SWITCHINSTANCE arrives (answered as applied), honest after.
    CensoredUntilSwitch,
    /// Honest, except silent on a `FEW_REPLIES` request it is designated
    /// to answer (a lure: it answers everything else, so the client keeps
    /// hearing from it).
    SilentWhenDesignated,
}

pub struct Fake {
    pub config: Arc<ClusterConfig>,
    pub clients: Vec<Identity>,
    /// Every authentic request each replica received, in arrival order.
    pub seen: Arc<Mutex<Vec<(ReplicaId, Request)>>>,
}

pub fn result_for(op: &[u8]) -> Vec<u8> {
    [b"ok:".as_slice(), op].concat()
}

pub async fn start(behaviors: &[Behavior], auth: ClientAuthKind) -> Fake {
    let params = ProtocolParams {
        client_auth: auth,
        ..ProtocolParams::default()
    };
    start_with(behaviors, params).await
}

pub async fn start_with(behaviors: &[Behavior], params: ProtocolParams) -> Fake {
    start_fakes(behaviors, params, false).await
}

/// Like `start_with`, but the replicas answer view questions (every lane in
/// view 0), so leader-first clients leave `Learning` and send to replica 0
/// alone. These replicas order nothing: a request only replica 0 got has
/// only its answer.
pub async fn start_answering_views(behaviors: &[Behavior], params: ProtocolParams) -> Fake {
    start_fakes(behaviors, params, true).await
}

async fn start_fakes(behaviors: &[Behavior], params: ProtocolParams, views: bool) -> Fake {
    let (mut config, replicas, clients) = ClusterConfig::for_testing(behaviors.len(), 2, params, 11);
    let mut listeners = vec![];
    for r in config.replicas.iter_mut() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        r.client_port = l.local_addr().unwrap().port();
        listeners.push(l);
    }
    let config = Arc::new(config);
    let seen = Arc::new(Mutex::new(vec![]));
    for (i, (l, b)) in listeners.into_iter().zip(behaviors).enumerate() {
        let replica = FakeReplica {
            id: ReplicaId(i as u32),
            key: replicas[i].clone(),
            config: config.clone(),
            behavior: *b,
            seen: seen.clone(),
            busy_counts: Arc::new(Mutex::new(HashMap::new())),
            dropped_once: Arc::new(AtomicBool::new(false)),
            answered: Arc::new(Mutex::new(HashSet::new())),
            switched: Arc::new(AtomicBool::new(false)),
            views,
        };
        tokio::spawn(replica.serve(l));
    }
    Fake {
        config,
        clients,
        seen,
    }
}

impl Fake {
    pub fn opts() -> ClientOptions {
        ClientOptions {
            request_timeout: Duration::from_secs(5),
            retransmit_initial: Duration::from_millis(50),
            retransmit_max: Duration::from_millis(200),
            full_reply_grace: Duration::from_millis(10),
            busy_backoff_initial: Duration::from_millis(10),
            busy_backoff_max: Duration::from_millis(40),
            read_only_timeout: Duration::from_millis(300),
            connect_timeout: Some(Duration::from_secs(5)),
            reconnect: chorus_net::Backoff {
                min: Duration::from_millis(5),
                max: Duration::from_millis(50),
            },
            ..ClientOptions::default()
        }
    }

    pub async fn client(&self, id: u64, opts: ClientOptions) -> Client {
        Client::connect(
            self.config.clone(),
            ClientId(id),
            self.clients[id as usize].clone(),
            opts,
        )
        .await
        .unwrap()
    }

    /// Requests seen by `replica`, in arrival order.
    pub fn seen_by(&self, replica: u32) -> Vec<Request> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(r, _)| r.0 == replica)
            .map(|(_, q)| q.clone())
            .collect()
    }
}

#[derive(Clone)]
struct FakeReplica {
    id: ReplicaId,
    key: Identity,
    config: Arc<ClusterConfig>,
    behavior: Behavior,
    seen: Arc<Mutex<Vec<(ReplicaId, Request)>>>,
    busy_counts: Arc<Mutex<HashMap<(ClientId, u64), u32>>>,
    dropped_once: Arc<AtomicBool>,
    answered: Arc<Mutex<HashSet<(ClientId, u64)>>>,
    switched: Arc<AtomicBool>,
    /// Answer view questions (`start_answering_views`).
    views: bool,
}

impl FakeReplica {
    async fn serve(self, l: TcpListener) {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            tokio::spawn(self.clone().connection(s));
        }
    }

    async fn connection(self, s: tokio::net::TcpStream) {
        let role = PeerRole::Replica {
            id: self.id,
            pillar: 0,
        };
        let limits = NetLimits::from_config(&self.config);
        let counters = Arc::new(Counters::default());
        let Ok((peer, mut rd, mut wr)) = accept(s, &self.key, role, &self.config, &limits, &counters).await
        else {
            return;
        };
        let Some(client) = peer.client() else { return };
        let client_pk = self.config.client(client).unwrap().identity;
        let mac_key = self.key.pairwise_key(&client_pk);
        let codec = Limits::from_config(&self.config);
        while let Ok(Some(frame)) = rd.next().await {
            let (req, resend) = match decode::<ClientMsg>(&frame, &codec) {
                Ok(ClientMsg::Request(r)) => (r, false),
                Ok(ClientMsg::Resend(r)) => (r, true),
                Ok(ClientMsg::StatusQuery) => {
                    let s = format!("{{\"replica\":{}}}", self.id.0);
                    let _ = wr.send(&encode(&ClientMsg::StatusReport(s))).await;
                    continue;
                }
                // Unless asked to, no lanes here: a leader-first client never
                // learns a view and keeps sending every request to every replica.
                Ok(ClientMsg::ViewQuery) => {
                    let views = if self.views {
                        vec![0; self.config.lanes() as usize]
                    } else {
                        Vec::new()
                    };
                    let _ = wr.send(&encode(&ClientMsg::Views(views))).await;
                    continue;
                }
                _ => return,
            };
            // What a real replica does: the channel says who the client is and
            // the authenticator must verify for this replica.
            let tag = chorus_core::ClusterTag::of(&self.config);
            let authentic = req.client == client && req.verify(&tag, self.id, &mac_key, &client_pk);
            if authentic {
                self.seen.lock().unwrap().push((self.id, req.clone()));
            }
            if self.behavior == Behavior::DropFirstConnection
                && !self.dropped_once.swap(true, Ordering::SeqCst)
            {
                return;
            }
            let Some(body) = self.answer(&req, authentic, resend) else {
                continue;
            };
            let request = if self.behavior == Behavior::OtherRequest {
                Digest::of(b"an earlier request under the same seq")
            } else {
                req.digest()
            };
            let reply = Reply {
                client,
                seq: req.seq,
                request: Some(request),
                replica: self.id,
                read_only: req.is_read_only(),
                body,
            };
            if wr.send(&encode(&ClientMsg::Reply(reply))).await.is_err() {
                return;
            }
        }
    }

    fn answer(&self, req: &Request, authentic: bool, resend: bool) -> Option<ReplyBody> {
        if !authentic {
            return Some(ReplyBody::Rejected("bad authenticator".into()));
        }
        let (n, f) = (self.config.n(), self.config.f());
        let repeat = !self.answered.lock().unwrap().insert((req.client, req.seq.0)) || resend;
        let designated = if req.flags & chorus_core::flags::FEW_REPLIES != 0 {
            chorus_core::reply_start(req.client, req.seq, n) == self.id.index()
        } else {
            (req.seq.0 % n as u64) as usize == self.id.index()
        };
        // As a real replica: a `FEW_REPLIES` request is answered on execution
        // by its designated repliers only, and by everyone when resent.
        let left_to_others = !repeat && !req.is_read_only() && !req.replied_by(self.id, n, f);
        let honest = |result: Vec<u8>| {
            if left_to_others {
                None
            } else if designated || repeat {
                Some(ReplyBody::Full(Bytes::from(result)))
            } else {
                Some(ReplyBody::Digest(Digest::of(&result)))
            }
        };
        match self.behavior {
            Behavior::Honest | Behavior::DropFirstConnection | Behavior::OtherRequest => {
                honest(result_for(&req.op))
            }
            Behavior::SilentWhenDesignated
                if req.flags & chorus_core::flags::FEW_REPLIES != 0 && req.replied_by(self.id, n, f) =>
            {
                None
            }
            Behavior::SilentWhenDesignated => honest(result_for(&req.op)),
            Behavior::Byzantine => Some(ReplyBody::Full(Bytes::from_static(b"evil"))),
            Behavior::Silent => None,
            Behavior::BusyFirst(k) => {
                let mut counts = self.busy_counts.lock().unwrap();
                let c = counts.entry((req.client, req.seq.0)).or_insert(0);
                *c += 1;
                if *c <= k {
                    Some(ReplyBody::Busy)
                } else {
                    honest(result_for(&req.op))
                }
            }
            Behavior::RejectAll => Some(ReplyBody::Rejected("nope".into())),
            Behavior::NoFastPath if req.is_read_only() => Some(ReplyBody::Rejected("not read-only".into())),
            Behavior::NoFastPath => honest(result_for(&req.op)),
            Behavior::StaleReads if req.is_read_only() => honest([b"old:".as_slice(), &req.op].concat()),
            Behavior::StaleReads => honest(result_for(&req.op)),
            Behavior::DigestOnly => Some(ReplyBody::Digest(Digest::of(&result_for(&req.op)))),
            Behavior::CensoredUntilSwitch => match chorus_core::switch_target(req) {
                Some(j) => {
                    self.switched.store(true, Ordering::SeqCst);
                    let r = format!("{}{j}", chorus_core::switch::SWITCHED_PREFIX);
                    honest(r.into_bytes())
                }
                None if self.switched.load(Ordering::SeqCst) => honest(result_for(&req.op)),
                None => None,
            },
        }
    }
}
