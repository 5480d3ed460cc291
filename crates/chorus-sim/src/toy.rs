//! A deliberately simple, *not* Byzantine-fault-tolerant protocol that speaks
//! the same sans-IO contract as `chorus_order::Replica`: replica 0 is a fixed
//! sequencer that numbers batches and sends them to everyone; the others
//! deliver in order and ask the sequencer to resend what they miss.
//!
//! It exists to test the simulator on its own: under network faults and
//! crashes it must pass every checker (so the driver, network and checkers
//! are right), and a Byzantine sequencer or twins must make the checkers fire
//! (so they can fail). `SendBeforePersist` breaks the io.rs contract on
//! purpose (the sequencer sends a batch before persisting it): a torn crash
//! between the two must then lead to a fork the checkers report.

use crate::node::SimReplica;
use chorus_core::{
    Batch, BatchReply, ClientId, ClusterConfig, ClusterTag, Identity, LaneId, MacKey, Millis, ReplicaId,
    ReplicaMsg, Request, RequestSeq, Seq, Slot, Status, View,
};
use chorus_order::{Action, Event, Outbox, PersistRecord, RejectReason, TimerId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

const SEQUENCER: ReplicaId = ReplicaId(0);
/// Batches resent per status message.
const RESEND_MAX: u64 = 16;

/// The sequencer that sends a batch before persisting it (a contract bug on purpose).
pub type SendBeforePersist = Sequencer<true>;

pub struct Sequencer<const SEND_BEFORE_PERSIST: bool = false> {
    config: Arc<ClusterConfig>,
    me: ReplicaId,
    identity: Identity,
    keys: BTreeMap<ClientId, MacKey>,
    pool: VecDeque<Request>,
    proposed: BTreeSet<(ClientId, RequestSeq)>,
    /// Sequencer: every batch it numbered.
    sent: BTreeMap<u64, Batch>,
    /// Received but not yet delivered.
    received: BTreeMap<u64, Batch>,
    next_delivery: u64,
}

impl<const SEND_BEFORE_PERSIST: bool> Sequencer<SEND_BEFORE_PERSIST> {
    fn empty(config: Arc<ClusterConfig>, me: ReplicaId, identity: Identity) -> Self {
        Sequencer {
            config,
            me,
            identity,
            keys: BTreeMap::new(),
            pool: VecDeque::new(),
            proposed: BTreeSet::new(),
            sent: BTreeMap::new(),
            received: BTreeMap::new(),
            next_delivery: 0,
        }
    }

    fn arm_timers(&self, now: Millis, out: &mut Outbox) {
        let p = &self.config.params;
        out.set_timer(TimerId::Status, now.plus(p.status_interval_ms));
        if self.me == SEQUENCER {
            out.set_timer(TimerId::Batch(LaneId(0)), now.plus(p.batch_delay_ms));
        }
    }

    fn on_request(&mut self, req: Request, out: &mut Outbox) {
        if self.me != SEQUENCER || self.proposed.contains(&(req.client, req.seq)) {
            return;
        }
        let Some(info) = self.config.client(req.client) else {
            return out.push(reject(&req, RejectReason::UnknownClient));
        };
        let pk = info.identity;
        let key = self
            .keys
            .entry(req.client)
            .or_insert_with(|| self.identity.pairwise_key(&pk));
        if !req.verify(&ClusterTag::of(&self.config), self.me, key, &pk) {
            return out.push(reject(&req, RejectReason::BadAuthenticator));
        }
        if req.op.len() > self.config.params.max_op_bytes as usize {
            return out.push(reject(&req, RejectReason::Oversized));
        }
        if self.pool.len() >= self.config.params.pool_max_requests as usize {
            return out.push(reject(&req, RejectReason::Busy));
        }
        self.proposed.insert((req.client, req.seq));
        self.pool.push_back(req);
    }

    fn cut_batch(&mut self, out: &mut Outbox) {
        let take = self
            .pool
            .len()
            .min(self.config.params.batch_max_requests as usize);
        if take == 0 {
            return;
        }
        let batch = Batch {
            requests: self.pool.drain(..take).collect(),
            time_ms: 0,
        };
        let slot = self.sent.keys().next_back().map_or(0, |s| s + 1);
        let cell = self.config.cell_of(Seq(slot));
        let record = PersistRecord::Decided {
            cell,
            digest: batch.digest(),
            batch: Arc::new(batch.clone()),
        };
        let msg = ReplicaMsg::BatchReply(BatchReply {
            lane: LaneId(0),
            slot: Slot(slot),
            batch: batch.clone(),
        });
        if SEND_BEFORE_PERSIST {
            out.broadcast(msg);
            out.persist(record);
        } else {
            // Persist before the batch leaves (io.rs contract).
            out.persist(record);
            out.broadcast(msg);
        }
        self.sent.insert(slot, batch.clone());
        self.received.insert(slot, batch);
    }

    fn deliver_ready(&mut self, out: &mut Outbox) {
        while let Some(batch) = self.received.remove(&self.next_delivery) {
            let seq = Seq(self.next_delivery);
            let cell = self.config.cell_of(seq);
            if self.me != SEQUENCER {
                out.persist(PersistRecord::Decided {
                    cell,
                    digest: batch.digest(),
                    batch: Arc::new(batch.clone()),
                });
            }
            self.proposed
                .extend(batch.requests.iter().map(|r| (r.client, r.seq)));
            out.push(Action::Deliver {
                seq,
                cell,
                batch: Arc::new(batch),
            });
            self.next_delivery += 1;
            if self
                .next_delivery
                .checked_rem(self.config.params.checkpoint_interval)
                == Some(0)
            {
                out.push(Action::TakeCheckpoint {
                    seq: Seq(self.next_delivery),
                });
            }
        }
    }
}

fn reject(req: &Request, reason: RejectReason) -> Action {
    Action::Reject {
        client: req.client,
        seq: req.seq,
        reason,
    }
}

impl<const SEND_BEFORE_PERSIST: bool> SimReplica for Sequencer<SEND_BEFORE_PERSIST> {
    fn start(
        config: Arc<ClusterConfig>,
        me: ReplicaId,
        identity: Identity,
        now: Millis,
        out: &mut Outbox,
    ) -> Self {
        let s = Self::empty(config, me, identity);
        s.arm_timers(now, out);
        s
    }

    fn recover(
        config: Arc<ClusterConfig>,
        me: ReplicaId,
        identity: Identity,
        records: Vec<PersistRecord>,
        now: Millis,
        out: &mut Outbox,
    ) -> Self {
        let mut s = Self::empty(config, me, identity);
        for r in records {
            if let PersistRecord::Decided { cell, batch, .. } = r {
                let slot = s.config.seq_of(cell).0;
                if me == SEQUENCER {
                    s.sent.insert(slot, (*batch).clone());
                }
                s.received.insert(slot, Arc::unwrap_or_clone(batch));
            }
        }
        s.deliver_ready(out);
        s.arm_timers(now, out);
        s
    }

    fn handle(&mut self, now: Millis, event: Event, out: &mut Outbox) {
        match event {
            Event::Request(req) => self.on_request(req, out),
            Event::Timer(TimerId::Batch(_)) => {
                self.cut_batch(out);
                self.deliver_ready(out);
                out.set_timer(
                    TimerId::Batch(LaneId(0)),
                    now.plus(self.config.params.batch_delay_ms),
                );
            }
            Event::Timer(TimerId::Status) => {
                if self.me != SEQUENCER {
                    out.send(
                        SEQUENCER,
                        ReplicaMsg::Status(Status {
                            lane: LaneId(0),
                            view: View(0),
                            next_undecided: Slot(self.next_delivery),
                            stable_seq: Seq(0),
                            suspects: false,
                            awaits_new_view: false,
                        }),
                    );
                }
                out.set_timer(TimerId::Status, now.plus(self.config.params.status_interval_ms));
            }
            Event::Message {
                from,
                msg: ReplicaMsg::BatchReply(m),
            } if from == SEQUENCER && self.me != SEQUENCER => {
                if m.slot.0 >= self.next_delivery {
                    self.received.insert(m.slot.0, m.batch);
                }
                self.deliver_ready(out);
            }
            Event::Message {
                from,
                msg: ReplicaMsg::Status(m),
            } if self.me == SEQUENCER => {
                let first = m.next_undecided.0;
                for (slot, batch) in self.sent.range(first..first.saturating_add(RESEND_MAX)) {
                    out.send(
                        from,
                        ReplicaMsg::BatchReply(BatchReply {
                            lane: LaneId(0),
                            slot: Slot(*slot),
                            batch: batch.clone(),
                        }),
                    );
                }
            }
            _ => {}
        }
    }
}
