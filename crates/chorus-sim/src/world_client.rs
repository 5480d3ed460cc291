//! The world's client side: correct clients' requests, retransmissions and
//! replies, and Byzantine clients' ticks.

use crate::checker::Issue;
use crate::client::ClientAction;
use crate::net::Endpoint;
use crate::node::SimReplica;
use crate::world::{Ev, World};
use chorus_core::{ClientId, ReplicaId, Reply, Request, RequestSeq};

impl<R: SimReplica> World<R> {
    pub(crate) fn on_client_issue(&mut self, c: usize) {
        let now = self.now_us();
        let mut out = Vec::new();
        let few = self.clients[c].few_sent();
        self.clients[c].issue(&mut self.rng, now, &mut out);
        let sent = self.clients[c].few_sent() - few;
        *self.counters.notes.entry("client-few-replies").or_insert(0) += u64::from(sent);
        self.client_actions(c, out);
    }

    pub(crate) fn on_client_retry(&mut self, c: usize, seq: RequestSeq, attempt: u32) {
        let mut out = Vec::new();
        let now = self.now_us();
        let shortfalls = self.clients[c].reply_shortfalls();
        self.clients[c].retry(now, seq, attempt, &mut out);
        if !out.is_empty() {
            self.counters.note("client-retransmission");
        }
        if self.clients[c].reply_shortfalls() > shortfalls {
            self.counters.note("client-reply-shortfall");
        }
        self.client_actions(c, out);
    }

    pub(crate) fn on_reply(&mut self, c: usize, reply: Reply) {
        self.counters.messages_delivered += 1;
        if c >= self.clients.len() {
            return; // Byzantine clients do not listen.
        }
        let now = self.now_us();
        let mut out = Vec::new();
        self.clients[c].reply(&mut self.rng, now, reply, &mut out);
        self.client_actions(c, out);
    }

    fn client_actions(&mut self, c: usize, out: Vec<ClientAction>) {
        let now = self.now_us();
        let id = self.clients[c].id();
        // Resource model: what one step broadcasts leaves as one write per
        // replica (`Ev::RequestBundle`); elsewhere each request travels alone,
        // so the network adversary acts on each.
        let mut bundle: Vec<Request> = Vec::new();
        for a in out {
            let resend = matches!(a, ClientAction::Resend(_));
            match a {
                ClientAction::Broadcast(request) | ClientAction::Resend(request) => {
                    self.sent_alone.remove(&(request.client, request.seq));
                    if resend && request.flags & chorus_core::flags::FEW_REPLIES != 0 {
                        self.resent.insert((request.client, request.seq));
                    }
                    self.checker.issue(request.digest(), Issue::Valid);
                    if self.perf.is_some() {
                        bundle.push(request);
                        continue;
                    }
                    for r in 0..self.config.n() as u32 {
                        self.send_request(c, ReplicaId(r), &request);
                    }
                }
                ClientAction::SendTo(r, request) => {
                    self.counters.note("client-sent-to-primary");
                    let probe = self.clients[c].probe() == Some(request.seq);
                    self.sent_alone.insert((request.client, request.seq), probe);
                    self.checker.issue(request.digest(), Issue::Valid);
                    self.send_request(c, r, &request);
                }
                ClientAction::AskViews => {
                    self.counters.note("client-view-question");
                    self.ask_views(c);
                }
                ClientAction::RetryTimer {
                    seq,
                    attempt,
                    after_us,
                } => {
                    self.schedule(
                        now + after_us,
                        Ev::ClientRetry {
                            client: c,
                            seq,
                            attempt,
                        },
                    );
                }
                ClientAction::IssueTimer { after_us } => {
                    self.schedule(now + after_us, Ev::ClientIssue { client: c });
                }
                ClientAction::Accepted {
                    seq,
                    result,
                    latency_us,
                } => {
                    if self.perf.is_some() {
                        self.latencies.push(latency_us);
                        self.last_accept_us = now;
                        if self.opts.perf_crash.is_some() {
                            self.accepted_at.push(now);
                        }
                    }
                    self.sent_alone.remove(&(id, seq));
                    self.trace_words(&[0xacc, c as u64, seq.0]);
                    self.checker.accepted(now, (id, seq), result);
                }
            }
        }
        if bundle.len() == 1 {
            for r in 0..self.config.n() as u32 {
                self.send_request(c, ReplicaId(r), &bundle[0]);
            }
        } else if !bundle.is_empty() {
            self.send_bundle(c, bundle);
        }
    }

    /// A leader-first client asks every replica for its views
    /// (`chorus_core::first_contact`): each live instance the client is
    /// linked with answers over the network with its lanes' views; a
    /// Byzantine one lies, high (to lure the client to a replica that is not
    /// the primary) or low (to keep it on the old one).
    fn ask_views(&mut self, c: usize) {
        for j in 0..self.nodes.len() {
            if !self.client_linked(c, j) {
                continue;
            }
            let nd = &self.nodes[j];
            let Some(live) = nd.live.as_ref() else {
                continue;
            };
            // A faulty replica lies high (a view whose primary it may be)
            // or low (the old primary's view), by replica parity.
            let views: Vec<u64> = live
                .replica
                .lane_views()
                .iter()
                .map(|(v, _)| match (nd.correct, nd.replica_id.0 % 2) {
                    (true, _) => *v,
                    (false, 0) => v + 1_000,
                    (false, _) => 0,
                })
                .collect();
            let from = nd.replica_id;
            self.transmit(Endpoint::Node(j), Endpoint::Client(c), || Ev::ViewReport {
                client: c,
                from,
                views: views.clone(),
            });
        }
    }

    pub(crate) fn on_view_report(&mut self, c: usize, from: ReplicaId, views: &[u64]) {
        if c >= self.clients.len() {
            return;
        }
        self.counters.messages_delivered += 1;
        let now = self.now_us();
        self.clients[c].on_view_report(now, from, views);
    }

    /// Resource model: `requests` to every replica the client is linked with,
    /// one arrival each.
    fn send_bundle(&mut self, c: usize, requests: Vec<Request>) {
        let targets: Vec<usize> = (0..self.nodes.len())
            .filter(|&j| self.client_linked(c, j))
            .collect();
        for j in targets {
            // One transmission; count the requests it carries as messages.
            self.counters.messages_sent += requests.len() as u64 - 1;
            self.transmit(Endpoint::Client(c), Endpoint::Node(j), || Ev::RequestBundle {
                to: j,
                requests: requests.clone(),
            });
        }
    }

    /// To every instance of replica `r` the client is linked with.
    fn send_request(&mut self, c: usize, r: ReplicaId, request: &Request) {
        let targets: Vec<usize> = self.by_replica[r.index()]
            .iter()
            .copied()
            .filter(|&j| self.client_linked(c, j))
            .collect();
        for j in targets {
            self.transmit(Endpoint::Client(c), Endpoint::Node(j), || Ev::Request {
                to: j,
                request: request.clone(),
            });
        }
    }

    pub(crate) fn on_byz_client_tick(&mut self, b: usize) {
        if self.now_us() >= self.plan.heal_at_us && !self.plan.smart.persist {
            return; // Faults stop when the network heals (unless drawn to persist).
        }
        let (sends, next) = self.byz_clients[b].tick(&mut self.rng);
        let c = self.clients.len() + b;
        debug_assert_eq!(self.byz_clients[b].creds.id, ClientId(c as u64));
        let kind = self.byz_clients[b].kind.name();
        for s in sends {
            self.counters.fault(match kind {
                "bad-auth" => "byz-client-bad-auth",
                "oversized" => "byz-client-oversized",
                "switch-spam" => "byz-client-switch-spam",
                _ => "byz-client-dup-seq",
            });
            self.checker.issue(s.request.digest(), s.issue);
            for r in s.to {
                self.send_request(c, r, &s.request);
            }
        }
        if let Some(after_us) = next {
            let now = self.now_us();
            self.schedule(now + after_us, Ev::ByzClientTick { client: b });
        }
    }
}
