//! The protocol core: drives the sans-IO `Replica` with real time and
//! channels. Each round's outbox goes to the outbox stage
//! (`outbox_thread.rs`), which makes its records durable before any of its
//! messages leaves the process (persist-before-send, DESIGN §2); the core
//! keeps only the timers (`driver.rs`). When the lane groups run on their
//! pillars (`lane_split.rs`), this is the hub: merger, checkpoints, state
//! transfer, talking to the groups by `Internal` messages.

use crate::channels::{CoreInput, PieceInput};
use crate::driver::{wall_ms, Downstream, Driver, HOSTED_RETRY};
use crate::metrics::Metrics;
use crate::status::CoreStatus;
use anyhow::{bail, Result};
use chorus_core::{ClusterConfig, Identity, Millis, ReplicaId};
use chorus_order::{Event, Internal, Outbox, PersistRecord, PieceStatus, Replica};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// How often the core publishes its status and metrics.
pub const STATUS_PUBLISH: Duration = Duration::from_millis(100);
/// Signature verdicts the core thread remembers (emptied when full): a few
/// windows' worth of pre-prepares and prepares, ~128 bytes each.
const CORE_VERDICTS: usize = 1 << 14;

pub struct CoreThread {
    /// Built (new or recovered) before the threads start (`build_replica`).
    pub replica: Replica,
    /// Its timers and its way to the outbox stage, which owns the store (on
    /// its own thread, or inline: `Downstream`). The runtime performs the
    /// replica's first round (what building it emitted) before any lane
    /// group starts: a recovered lane's view records are queued before a
    /// group's first round can send in that view.
    pub driver: Driver,
    pub input: mpsc::Receiver<CoreInput>,
    /// From the execution thread, read before `input`: it never blocks on
    /// us (`exec_thread.rs`, `ExecThread::core`).
    pub from_exec: mpsc::UnboundedReceiver<CoreInput>,
    pub status: watch::Sender<CoreStatus>,
    pub metrics: Arc<Metrics>,
    pub shutdown: watch::Receiver<bool>,
    /// Lane groups on their pillars (empty unless `lane_split::split`):
    /// group `g`'s input, and the status it publishes.
    pub groups: Vec<mpsc::Sender<PieceInput>>,
    pub group_status: Vec<watch::Receiver<PieceStatus>>,
}

/// The replica this process runs: recovered from the store's records, or
/// fresh. Emits into `out` what its start asks for.
pub fn build_replica(
    config: &Arc<ClusterConfig>,
    me: ReplicaId,
    identity: &Identity,
    records: Vec<PersistRecord>,
    predictor: Option<chorus_order::sarek::Predictor>,
    now: Millis,
    out: &mut Outbox,
) -> Replica {
    let mut replica = if records.is_empty() {
        Replica::new(config.clone(), me, identity.clone(), now, out)
    } else {
        tracing::info!(records = records.len(), "recovering from storage");
        Replica::recover(config.clone(), me, identity.clone(), records, now, out)
    };
    if let Some(p) = predictor {
        replica.set_predictor(p);
    }
    replica
}

/// Messages for the lane groups the hub could not hand over yet (a group's
/// queue was full): kept in order per group and offered again, so the hub
/// never waits for a group that may be waiting for it. Bounded: at most
/// one facts-only message waits per group (newer facts supersede it,
/// `Internal::superseded_by`; a message relying on it takes it along,
/// `Internal::fold_into`), and a group that leaves `max_waiting` messages
/// waiting has stalled, which is fatal (said, not swallowed).
struct ToGroups {
    queues: Vec<VecDeque<Internal>>,
    max_waiting: usize,
    /// Droppable messages dropped for a backed-up group (`Internal::may_drop`).
    dropped: u64,
}

/// Hub messages one group may leave waiting. Besides facts (at most one
/// waiting), the hub sends a group a message per checkpoint (`Advance`) or
/// state transfer, and in `sarek` the requests other partitions hand on
/// (`ToGroup::ForLane`), which are dropped rather than queued beyond
/// `TO_GROUP_DROPPABLE_MAX` (`Internal::may_drop`: a decision or the
/// client's retransmission hands them on again).
const TO_GROUP_WAITING_MAX: usize = 1 << 16;
const TO_GROUP_DROPPABLE_MAX: usize = 1 << 12;

impl ToGroups {
    fn push(&mut self, msg: Internal) -> Result<()> {
        let (_, to) = msg.channel();
        let Some((g, q)) = to.and_then(|g| Some((g, self.queues.get_mut(g)?))) else {
            debug_assert!(false, "a hub message for no group: {msg:?}");
            tracing::error!("the hub addressed a message to no lane group; dropped");
            return Ok(());
        };
        if msg.may_drop() && q.len() >= TO_GROUP_DROPPABLE_MAX {
            self.dropped += 1;
            return Ok(());
        }
        let mut msg = msg;
        if q.back().is_some_and(|last| last.superseded_by(&msg)) {
            q.pop_back();
        } else if let Some(last) = q.pop_back() {
            msg = match last.fold_into(msg) {
                Ok(folded) => folded,
                Err(both) => {
                    let (last, msg) = *both;
                    q.push_back(last);
                    msg
                }
            };
        }
        q.push_back(msg);
        if q.len() > self.max_waiting {
            bail!(
                "lane group {g} (chorus-pillar-{g}) has not taken {} messages from the hub: its pillar is stalled",
                q.len()
            );
        }
        Ok(())
    }

    fn waiting(&self) -> bool {
        self.queues.iter().any(|q| !q.is_empty())
    }

    /// Offer what waits. A group whose input is closed has ended with its
    /// pillar, which reports why itself (`fatal::spawn` names it, and a
    /// pillar never ends outside a shutdown unreported): its messages are
    /// dropped here rather than reported again under the core's name.
    fn flush(&mut self, groups: &[mpsc::Sender<PieceInput>]) {
        for (g, q) in self.queues.iter_mut().enumerate() {
            while let Some(msg) = q.pop_front() {
                match groups[g].try_send(PieceInput::Internal(msg)) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(PieceInput::Internal(msg))) => {
                        q.push_front(msg);
                        break;
                    }
                    Err(_) => {
                        tracing::debug!(
                            group = g,
                            "lane group gone (its pillar ended); dropping its messages"
                        );
                        q.clear();
                    }
                }
            }
        }
    }
}

impl CoreThread {
    /// On a thread of its own.
    pub fn run(self) -> Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(self.run_async())
    }

    /// Until shutdown, or a fatal error (returned). Runs on its own thread
    /// (`run`) or as a task of the pillar that hosts it (`pillar.rs`).
    pub async fn run_async(mut self) -> Result<()> {
        // Receives the signature verdicts the pillars reached ahead of us
        // (`chorus_order::pre_check`); a verdict is a pure function, so a
        // memo changes no outcome.
        chorus_core::verify_memo::memoize_verifications(CORE_VERDICTS);
        let mut driver = self.driver;
        let mut replica = self.replica;
        let mut out = Outbox::new();
        let mut to_groups = ToGroups {
            queues: vec![VecDeque::new(); self.groups.len()],
            max_waiting: TO_GROUP_WAITING_MAX,
            dropped: 0,
        };
        // This loop handles what its inbox holds, then writes: the replica
        // may hold small messages until then (`Replica::end_of_burst`).
        replica.set_burst_mode(true);
        driver.perform(&mut out)?;
        driver.settle().await?;
        // Published on the first tick, not 100 ms later: a client asking a
        // just-started replica for its views must not get the empty default.
        let mut last_status = Instant::now()
            .checked_sub(STATUS_PUBLISH)
            .unwrap_or_else(Instant::now);
        // Status and metrics are published on this tick even without
        // traffic, so they are current at idle (issue 14 item 2) and the
        // heartbeat stops only when this loop does.
        let mut status_tick = tokio::time::interval(STATUS_PUBLISH);
        status_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let deadline = driver.next_deadline();
            let retry = to_groups.waiting();
            tokio::select! {
                biased;
                _ = self.shutdown.changed() => break,
                _ = status_tick.tick() => {}
                _ = tokio::time::sleep(HOSTED_RETRY), if retry => {}
                Some(msg) = self.from_exec.recv() => {
                    feed(&mut replica, driver.now(), msg, &mut out);
                    replica.end_of_burst(driver.now(), &mut out);
                }
                msg = self.input.recv() => {
                    let Some(msg) = msg else { break };
                    feed(&mut replica, driver.now(), msg, &mut out);
                    // Drain whatever else is queued without yielding, so one
                    // storage sync covers many events.
                    let mut drained = 0;
                    while drained < 256 {
                        match self.input.try_recv() {
                            Ok(m) => {
                                feed(&mut replica, driver.now(), m, &mut out);
                                drained += 1;
                            }
                            Err(_) => break,
                        }
                    }
                    replica.end_of_burst(driver.now(), &mut out);
                }
                                _ = tokio::time::sleep_until(deadline) => {}
            }
            // Due timers fire on every pass, not only when the inbox is
            // empty: a steady stream of input (a flooding peer or client)
            // must not hold off view-change or status timers.
            let now = driver.now();
            let due = driver.take_due(now);
            if !due.is_empty() {
                replica.set_wall_clock(wall_ms());
                for id in due {
                    replica.handle(now, Event::Timer(id), &mut out);
                }
                replica.end_of_burst(now, &mut out);
            }
            driver.perform(&mut out)?;
            driver.settle().await?;
            // Lane-split rule (docs/lane-split.md step C): the round is
            // queued to the stage before the groups hear of it, so what a
            // group does on the strength of it is written after it.
            for msg in replica.take_internal() {
                to_groups.push(msg)?;
            }
            to_groups.flush(&self.groups);
            if last_status.elapsed() >= STATUS_PUBLISH {
                last_status = Instant::now();
                self.metrics
                    .hub_messages_dropped
                    .inc_by(std::mem::take(&mut to_groups.dropped));
                if let Downstream::Inline(stage) = &mut driver.outbox {
                    stage.note_storage_size();
                }
                let s = if self.group_status.is_empty() {
                    replica.status()
                } else {
                    let parts: Vec<PieceStatus> =
                        self.group_status.iter().map(|w| w.borrow().clone()).collect();
                    replica.status_with(&parts)
                };
                crate::metrics_status::publish(&self.metrics, &s);
                let mut cs = crate::status::core_status(&s);
                cs.dispel = replica.dispel_status().map(|d| crate::status::dispel_detail(&d));
                let _ = self.status.send(cs);
            }
        }
        // Dropping the driver closes the outbox stage's queue (it writes what
        // is left and stops; the runtime waits for it), or, inline, the store.
        Ok(())
    }
}

fn feed(replica: &mut Replica, now: Millis, input: CoreInput, out: &mut Outbox) {
    replica.set_wall_clock(wall_ms());
    let event = match input {
        // Requests reach the core only from pillars, which verified their
        // authenticator at this replica already (pillar.rs).
        CoreInput::Request(r) => return replica.handle_verified_request(now, r, out),
        CoreInput::Many(inputs) => {
            for i in inputs {
                feed(replica, now, i, out);
            }
            return;
        }
        CoreInput::Internal(msg) => return replica.handle_internal(now, msg, out),
        CoreInput::Peer { from, msg, pre } => {
            pre.install();
            Event::Message { from, msg }
        }
        CoreInput::Checkpointed {
            seq,
            state_digest,
            snapshot,
        } => Event::Checkpointed {
            seq,
            state_digest,
            snapshot,
        },
        CoreInput::StateInstalled { seq, state_digest } => Event::StateInstalled { seq, state_digest },
        CoreInput::Mispredicted(body) => Event::Mispredicted(body),
        CoreInput::MissingCopies(copies) => Event::MissingCopies(copies),
    };
    replica.handle(now, event, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{Authenticator, ClientId, LaneId, Mac, Request, RequestSeq};

    /// Hub → group messages of a real split replica: a request admitted by
    /// the group of lane 0 (whose leader this replica is) makes it propose
    /// and report; the hub answers both groups.
    fn hub_messages() -> Vec<Internal> {
        let (mut replica, mut out, cfg) = crate::lane_split::cop2_replica(0, |p| p.batch_delay_ms = 0);
        let mut pieces = crate::lane_split::split(&mut replica, Millis(0), &mut out);
        let client = (0..4u64)
            .map(ClientId)
            .find(|c| cfg.owner_lane(*c) == LaneId(0))
            .expect("a client of lane 0");
        for seq in 1..=3u64 {
            let req = Request {
                client,
                seq: RequestSeq(seq),
                flags: 0,
                op: bytes::Bytes::from_static(b"op"),
                auth: Authenticator::Macs(Arc::new(vec![Mac([0; 16]); 4])),
                memo: Default::default(),
            };
            pieces[0].0.handle_verified_request(Millis(seq), req, &mut out);
        }
        for msg in pieces[0].0.take_internal() {
            replica.handle_internal(Millis(5), msg, &mut out);
        }
        replica.take_internal()
    }

    /// The hub never waits for a group: what a full group channel cannot
    /// take waits in order and goes on the next offer, a waiting update of
    /// the hub's facts gives way to a newer one, and a group that is gone
    /// (its pillar ended and reports why) costs nothing but its messages.
    #[test]
    fn hub_messages_wait_in_order_for_a_full_group_and_are_dropped_for_a_gone_one() {
        let msgs = hub_messages();
        let mine: Vec<Internal> = msgs
            .iter()
            .filter(|m| m.channel().1 == Some(0))
            .cloned()
            .collect();
        let theirs: Vec<Internal> = msgs
            .iter()
            .filter(|m| m.channel().1 == Some(1))
            .cloned()
            .collect();
        // A request proposed and reported: the hub updated both groups' facts twice.
        assert!(mine.len() >= 2 && !theirs.is_empty(), "{msgs:?}");
        let (a, b) = (mine[0].clone(), mine[1].clone());
        assert!(a.superseded_by(&b), "two facts updates");
        assert_ne!(format!("{a:?}"), format!("{b:?}"));
        let (tx0, mut rx0) = mpsc::channel(1);
        let (tx1, rx1) = mpsc::channel(1);
        drop(rx1);
        let groups = vec![tx0, tx1];
        let mut to_groups = ToGroups {
            queues: vec![VecDeque::new(), VecDeque::new()],
            max_waiting: 1,
            dropped: 0,
        };
        let mut receive = |to_groups: &mut ToGroups| {
            let mut got = Vec::new();
            while let Ok(PieceInput::Internal(m)) = rx0.try_recv() {
                got.push(format!("{m:?}"));
                to_groups.flush(&groups);
            }
            got
        };
        // `a` fills group 0's channel, `b` waits behind it.
        for m in [&a, &b] {
            to_groups.push(m.clone()).unwrap();
            to_groups.flush(&groups);
        }
        for m in &theirs {
            to_groups.push(m.clone()).unwrap();
        }
        to_groups.flush(&groups);
        assert_eq!(to_groups.queues[0].len(), 1);
        assert!(
            to_groups.queues[1].is_empty(),
            "a gone group's messages are dropped"
        );
        assert_eq!(
            receive(&mut to_groups),
            vec![format!("{a:?}"), format!("{b:?}")],
            "in order"
        );
        // Facts updates while the channel is full: only the newest waits, so
        // any number of them stays within the bound (here one).
        to_groups.push(a.clone()).unwrap();
        to_groups.flush(&groups);
        for _ in 0..10 {
            to_groups.push(a.clone()).unwrap();
            to_groups.flush(&groups);
        }
        to_groups.push(b.clone()).unwrap();
        assert_eq!(to_groups.queues[0].len(), 1);
        assert_eq!(receive(&mut to_groups), vec![format!("{a:?}"), format!("{b:?}")]);
        assert!(!to_groups.waiting());
    }
}
