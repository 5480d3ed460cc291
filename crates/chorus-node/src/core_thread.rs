//! The protocol core: drives the sans-IO `Replica` with real time and
//! channels. Each round's outbox goes to the outbox stage
//! (`outbox_thread.rs`), which makes its records durable before any of its
//! messages leaves the process (persist-before-send, DESIGN §2); the core
//! keeps only the timers.

use crate::channels::CoreInput;
use crate::metrics::Metrics;
use crate::outbox_thread::{OutboxStage, Round};
use crate::status::CoreStatus;
use anyhow::{bail, Result};
use chorus_core::{ClusterConfig, Identity, Millis, ReplicaId};
use chorus_order::{Action, Event, Outbox, PersistRecord, Replica, TimerId};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// How often the core publishes its status and metrics.
const STATUS_PUBLISH: Duration = Duration::from_millis(100);
/// Signature verdicts the core thread remembers (emptied when full): a few
/// windows' worth of pre-prepares and prepares, ~128 bytes each.
const CORE_VERDICTS: usize = 1 << 14;

pub struct CoreThread {
    pub config: Arc<ClusterConfig>,
    pub me: ReplicaId,
    pub identity: Identity,
    /// What the store held at start (`Store::load`, read before the threads start).
    pub records: Vec<PersistRecord>,
    pub input: mpsc::Receiver<CoreInput>,
    /// From the execution thread, read before `input`: it never blocks on
    /// us (`exec_thread.rs`, `ExecThread::core`).
    pub from_exec: mpsc::UnboundedReceiver<CoreInput>,
    /// The outbox stage, which owns the store: on its own thread, or run
    /// inline by this core (`Downstream`).
    pub outbox: Downstream,
    pub status: watch::Sender<CoreStatus>,
    pub metrics: Arc<Metrics>,
    pub shutdown: watch::Receiver<bool>,
    /// sarek: PREDICT() from the service's access sets.
    pub predictor: Option<chorus_order::sarek::Predictor>,
}

/// Where the core's rounds go to be persisted, then sent.
pub enum Downstream {
    /// The outbox stage's thread (`outbox_thread.rs`), over a bounded queue.
    /// A full queue holds the core (storage back-pressures ordering): on its
    /// own thread the core blocks; hosted by a pillar (`hosted`) it keeps
    /// the round in `waiting` and waits asynchronously (`Driver::settle`),
    /// so the pillar's connections are still served.
    Thread {
        queue: crate::queue::Sender<Round>,
        hosted: bool,
        waiting: Option<Round>,
    },
    /// The stage itself, run on the core's thread as each round ends: no
    /// thread hop between a round and its writes (COP §4: a pillar that
    /// hosts the core keeps the whole normal case on its thread). Only
    /// under `fsync = off`, where a round's write syncs nothing (the store
    /// still syncs at its periodic hand-overs, every 512 appends): a sync
    /// per round would hold the pillar's connections (docs/decisions.md
    /// "The core on its pillar").
    Inline(Box<OutboxStage>),
}

impl Downstream {
    /// To the stage's thread, blocking.
    pub fn thread(queue: crate::queue::Sender<Round>) -> Downstream {
        Downstream::Thread {
            queue,
            hosted: false,
            waiting: None,
        }
    }

    /// To the stage's thread from a core a pillar hosts: never blocks.
    pub fn thread_from_pillar(queue: crate::queue::Sender<Round>) -> Downstream {
        Downstream::Thread {
            queue,
            hosted: true,
            waiting: None,
        }
    }
}

const STAGE_GONE: &str = "the outbox stage stopped; nothing this replica decides could be stored or sent";

struct Driver {
    outbox: Downstream,
    timers: BTreeMap<TimerId, Millis>,
    start: Instant,
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
        let start = Instant::now();
        let mut driver = Driver {
            outbox: self.outbox,
            timers: BTreeMap::new(),
            start,
        };
        let mut out = Outbox::new();
        let records = self.records;
        let now = driver.now();
        let mut replica = if records.is_empty() {
            Replica::new(self.config.clone(), self.me, self.identity.clone(), now, &mut out)
        } else {
            tracing::info!(records = records.len(), "recovering from storage");
            Replica::recover(
                self.config.clone(),
                self.me,
                self.identity.clone(),
                records,
                now,
                &mut out,
            )
        };
        if let Some(p) = self.predictor {
            replica.set_predictor(p);
        }
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
            tokio::select! {
                biased;
                _ = self.shutdown.changed() => break,
                _ = status_tick.tick() => {}
                Some(msg) = self.from_exec.recv() => {
                    feed(&mut replica, driver.now(), msg, &mut out);
                    replica.end_of_burst(driver.now(), &mut out);
                    driver.perform(&mut out)?;
                    driver.settle().await?;
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
                    driver.perform(&mut out)?;
                    driver.settle().await?;
                }
                _ = tokio::time::sleep_until(deadline) => {
                    let now = driver.now();
                    let due: Vec<TimerId> = driver.timers.iter().filter(|(_, at)| **at <= now).map(|(id, _)| *id).collect();
                    replica.set_wall_clock(wall_ms());
                    for id in due {
                        driver.timers.remove(&id);
                        replica.handle(now, Event::Timer(id), &mut out);
                    }
                    replica.end_of_burst(now, &mut out);
                    driver.perform(&mut out)?;
                    driver.settle().await?;
                }
            }
            if last_status.elapsed() >= STATUS_PUBLISH {
                last_status = Instant::now();
                if let Downstream::Inline(stage) = &mut driver.outbox {
                    stage.note_storage_size();
                }
                let s = replica.status();
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

/// The wall clock the core stamps on batches it proposes and bounds the
/// ones it accepts by (`Replica::set_wall_clock`): ms since the Unix epoch,
/// unlike `Driver::now`, which is monotonic since start.
fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
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
    };
    replica.handle(now, event, out);
}

/// How long a hosted core waits before it offers a full executor (inline)
/// or a full outbox stage its round again.
const HOSTED_RETRY: Duration = Duration::from_millis(1);
/// A hosted core held this long by a full executor or outbox stage says
/// so (and again at every further multiple): ordering is stalled there.
const STALL_WARN: Duration = Duration::from_secs(1);

/// How long one round has waited downstream, for the stall warning.
struct Stall {
    since: Instant,
    warned: u32,
}

impl Default for Stall {
    fn default() -> Stall {
        Stall {
            since: Instant::now(),
            warned: 0,
        }
    }
}

impl Stall {
    fn note(&mut self, on: &str) {
        let waited = self.since.elapsed();
        if waited >= STALL_WARN * (self.warned + 1) {
            self.warned += 1;
            tracing::warn!(
                waited_ms = waited.as_millis() as u64,
                "ordering stalled: {on} has not taken a round's output; no new input is read meanwhile"
            );
        }
    }
}

impl Driver {
    /// Hosted only. Inline: let the pillar thread move this round's frames
    /// onto its connections before the next round starts, and wait, without
    /// holding that thread, until the executor took all of the round's
    /// deliveries. To a stage thread: wait the same way until its queue
    /// took the round. No new input is taken meanwhile: a full executor or
    /// a slow disk still back-pressures ordering.
    async fn settle(&mut self) -> Result<()> {
        match &mut self.outbox {
            Downstream::Inline(stage) => {
                tokio::task::yield_now().await;
                let mut stall = Stall::default();
                while stage.backlogged() {
                    tokio::time::sleep(HOSTED_RETRY).await;
                    stage.retry_backlog()?;
                    stall.note("the executor");
                }
            }
            Downstream::Thread { hosted: false, .. } => {}
            Downstream::Thread { queue, waiting, .. } => {
                // The pillar's connections get their turn after each round.
                tokio::task::yield_now().await;
                let mut stall = Stall::default();
                while let Some(round) = waiting.take() {
                    tokio::time::sleep(HOSTED_RETRY).await;
                    stall.note("the outbox stage (storage)");
                    if let Err(round) = queue.try_send(round) {
                        if !queue.receiver_alive() {
                            bail!(STAGE_GONE);
                        }
                        *waiting = Some(round);
                    }
                }
            }
        }
        Ok(())
    }

    fn now(&self) -> Millis {
        Millis(self.start.elapsed().as_millis() as u64)
    }

    fn next_deadline(&self) -> tokio::time::Instant {
        let now = self.now();
        let next = self.timers.values().min().copied().unwrap_or(now.plus(1_000));
        let wait = next.0.saturating_sub(now.0);
        tokio::time::Instant::now() + Duration::from_millis(wait)
    }

    /// Hand the round's outbox to the outbox stage, keeping the timers. On
    /// its own thread the core blocks while the stage's queue is full
    /// (storage back-pressures ordering); hosted, the round waits for
    /// `settle`. Fails only when the stage is gone, which is fatal.
    fn perform(&mut self, out: &mut Outbox) -> Result<()> {
        let mut round = Round {
            records: Vec::new(),
            actions: Vec::new(),
        };
        for action in out.drain() {
            match action {
                Action::Persist(r) => round.records.push(r),
                Action::SetTimer { id, at } => {
                    self.timers.insert(id, at);
                }
                Action::CancelTimer { id } => {
                    self.timers.remove(&id);
                }
                other => round.actions.push(other),
            }
        }
        if round.records.is_empty() && round.actions.is_empty() {
            return Ok(());
        }
        match &mut self.outbox {
            Downstream::Thread {
                queue, hosted: false, ..
            } => {
                if queue.send(round).is_err() {
                    bail!(STAGE_GONE);
                }
                Ok(())
            }
            Downstream::Thread {
                queue,
                hosted: true,
                waiting,
            } => {
                // `settle` ran after the previous round: nothing waits.
                debug_assert!(waiting.is_none(), "a round overtook one still waiting");
                if let Err(round) = queue.try_send(round) {
                    if !queue.receiver_alive() {
                        bail!(STAGE_GONE);
                    }
                    *waiting = Some(round);
                }
                Ok(())
            }
            Downstream::Inline(stage) => stage.write(&mut vec![round]),
        }
    }
}
