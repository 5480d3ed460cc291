//! The protocol core: drives the sans-IO `Replica` with real time, storage and
//! channels. Persist-before-send: records an outbox emits are appended (and
//! synced per the fsync policy) before any later message of the same outbox
//! leaves the process (DESIGN §2).

use crate::channels::{CoreInput, ExecInput, PillarInput};
use crate::metrics::Metrics;
use crate::status::CoreStatus;
use anyhow::Result;
use bytes::Bytes;
use chorus_core::{encode_within, ClusterConfig, Identity, Limits, Millis, ReplicaId, ReplicaMsg};
use chorus_order::{Action, Event, Outbox, PersistRecord, Replica, TimerId};
use chorus_store::Store;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// How often the core publishes its status and metrics.
const STATUS_PUBLISH: Duration = Duration::from_millis(100);
/// How often the database file's size is read.
const STORAGE_SIZE_EVERY: Duration = Duration::from_secs(1);

pub struct CoreThread {
    pub config: Arc<ClusterConfig>,
    pub me: ReplicaId,
    pub identity: Identity,
    pub store: Store,
    /// What `store` held at start (`Store::load`, read before the threads start).
    pub records: Vec<PersistRecord>,
    pub input: mpsc::Receiver<CoreInput>,
    pub pillars: Vec<mpsc::Sender<PillarInput>>,
    pub exec: crate::queue::Sender<ExecInput>,
    pub status: watch::Sender<CoreStatus>,
    pub metrics: Arc<Metrics>,
    pub shutdown: watch::Receiver<bool>,
    /// sarek: PREDICT() from the service's access sets.
    pub predictor: Option<chorus_order::sarek::Predictor>,
}

struct Driver {
    store: Store,
    pillars: Vec<mpsc::Sender<PillarInput>>,
    exec: crate::queue::Sender<ExecInput>,
    metrics: Arc<Metrics>,
    /// What peers decode under: every outgoing message must fit.
    limits: Limits,
    timers: BTreeMap<TimerId, Millis>,
    pending_persist: Vec<PersistRecord>,
    start: Instant,
}

impl CoreThread {
    pub fn run(self) -> Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(self.run_async())
    }

    async fn run_async(mut self) -> Result<()> {
        let start = Instant::now();
        let mut driver = Driver {
            store: self.store,
            pillars: self.pillars,
            exec: self.exec,
            metrics: self.metrics.clone(),
            limits: Limits::from_config(&self.config),
            timers: BTreeMap::new(),
            pending_persist: Vec::new(),
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
        driver.perform(&mut out)?;
        let mut last_status = Instant::now();
        // Status and metrics are published on this tick even without
        // traffic, so they are current at idle (issue 14 item 2) and the
        // heartbeat stops only when this loop does.
        let mut status_tick = tokio::time::interval(STATUS_PUBLISH);
        status_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_size = Instant::now() - STORAGE_SIZE_EVERY;
        loop {
            let deadline = driver.next_deadline();
            tokio::select! {
                biased;
                _ = self.shutdown.changed() => break,
                _ = status_tick.tick() => {}
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
                    driver.perform(&mut out)?;
                }
                _ = tokio::time::sleep_until(deadline) => {
                    let now = driver.now();
                    let due: Vec<TimerId> = driver.timers.iter().filter(|(_, at)| **at <= now).map(|(id, _)| *id).collect();
                    replica.set_wall_clock(wall_ms());
                    for id in due {
                        driver.timers.remove(&id);
                        replica.handle(now, Event::Timer(id), &mut out);
                    }
                    driver.perform(&mut out)?;
                }
            }
            if last_status.elapsed() >= STATUS_PUBLISH {
                last_status = Instant::now();
                let s = replica.status();
                crate::metrics_status::publish(&driver.metrics, &s);
                let mut cs = crate::status::core_status(&s);
                cs.dispel = replica.dispel_status().map(|d| crate::status::dispel_detail(&d));
                let _ = self.status.send(cs);
                if last_size.elapsed() >= STORAGE_SIZE_EVERY {
                    last_size = Instant::now();
                    if let Ok(bytes) = driver.store.disk_bytes() {
                        driver.metrics.storage_bytes.set(bytes as i64);
                    }
                }
            }
        }
        driver.flush_persist()?;
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
        CoreInput::Peer { from, msg } => Event::Message { from, msg },
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

impl Driver {
    fn now(&self) -> Millis {
        Millis(self.start.elapsed().as_millis() as u64)
    }

    fn next_deadline(&self) -> tokio::time::Instant {
        let now = self.now();
        let next = self.timers.values().min().copied().unwrap_or(now.plus(1_000));
        let wait = next.0.saturating_sub(now.0);
        tokio::time::Instant::now() + Duration::from_millis(wait)
    }

    /// Append and make durable (per the fsync policy) everything pending: one
    /// write-ahead frame and at most one fsync per batch of events (group
    /// commit); the store's own thread brings the tables up to date.
    fn flush_persist(&mut self) -> Result<()> {
        if !self.pending_persist.is_empty() {
            // A failed append or sync is fatal (the thread returns it, see
            // `fatal`): sending on without the records durable would break
            // persist-before-send.
            let records = self.pending_persist.len() as u64;
            let mut pending = std::mem::take(&mut self.pending_persist);
            let appended = self.store.append_drain(&mut pending);
            // Keep the vector's allocation for the next round.
            self.pending_persist = pending;
            appended.map_err(|e| self.storage_error(e))?;
            let started = Instant::now();
            self.store.sync().map_err(|e| self.storage_error(e))?;
            self.metrics
                .storage_sync_seconds
                .observe(started.elapsed().as_secs_f64());
            self.metrics.persisted_records.inc_by(records);
            self.pending_persist.clear();
        }
        Ok(())
    }

    fn storage_error(&self, e: chorus_store::StoreError) -> anyhow::Error {
        let dir = self.store.path().parent().unwrap_or(std::path::Path::new("."));
        crate::storage::explain(e, dir)
    }

    fn pillar_of(&self, msg: &ReplicaMsg) -> usize {
        // COP: lane l travels on pillar l mod P's private connections.
        let p = self.pillars.len();
        msg.lane().map(|l| l.index() % p).unwrap_or(0)
    }

    fn perform(&mut self, out: &mut Outbox) -> Result<()> {
        let (persists, actions): (Vec<Action>, Vec<Action>) =
            out.drain().partition(|a| matches!(a, Action::Persist(_)));
        // Persist-before-send: every record of this outbox is durable before
        // any of its messages leaves. Persisting a record earlier than the
        // protocol needs is always safe.
        for a in persists {
            if let Action::Persist(r) = a {
                self.pending_persist.push(r);
            }
        }
        self.flush_persist()?;
        for action in actions {
            match action {
                Action::Persist(_) => {}
                Action::Send { to, msg } => {
                    let p = self.pillar_of(&msg);
                    let Some(frame) = self.frame(&msg) else { continue };
                    self.metrics.messages_out.inc();
                    self.to_pillar(p, PillarInput::SendPeer { to, frame });
                }
                Action::Broadcast { msg } => {
                    let p = self.pillar_of(&msg);
                    let Some(frame) = self.frame(&msg) else { continue };
                    self.metrics.messages_out.inc();
                    self.to_pillar(p, PillarInput::BroadcastPeer { frame });
                }
                Action::Deliver { seq, batch, .. } => {
                    self.metrics.delivered_batches.inc();
                    // Blocking send: a full executor back-pressures ordering.
                    let at = Instant::now();
                    let _ = self.exec.send(ExecInput::Deliver { seq, batch, at });
                }
                Action::DeliverStream { cell, batch } => {
                    self.metrics.delivered_batches.inc();
                    let _ = self.exec.send(ExecInput::DeliverStream { cell, batch });
                }
                Action::SetTimer { id, at } => {
                    self.timers.insert(id, at);
                }
                Action::CancelTimer { id } => {
                    self.timers.remove(&id);
                }
                Action::TakeCheckpoint { seq } => {
                    let _ = self.exec.send(ExecInput::TakeCheckpoint { seq });
                }
                Action::InstallState { cert, snapshot } => {
                    let _ = self.exec.send(ExecInput::InstallState { cert, snapshot });
                }
                Action::Reject { client, seq, reason } => {
                    self.metrics.reject(&format!("{reason:?}"));
                    let _ = self.exec.try_send(ExecInput::Reject { client, seq, reason });
                }
            }
        }
        Ok(())
    }

    /// Encode a message for the wire. One its receivers' codec would refuse
    /// is a bug in this replica (every message the codec admits fits a frame,
    /// `chorus_core::wire_bounds`), not something to leave to the transport,
    /// which would drop it and reset the link: counted, logged as an error,
    /// and fatal in debug builds.
    fn frame(&self, msg: &ReplicaMsg) -> Option<Bytes> {
        match encode_within(msg, &self.limits) {
            Ok(bytes) => Some(Bytes::from(bytes)),
            Err(e) => {
                self.metrics.drop_frame("outgoing-oversized");
                tracing::error!(kind = msg.kind(), error = %e, "not sending a message peers would refuse");
                debug_assert!(false, "this replica produced an oversized {}: {e}", msg.kind());
                None
            }
        }
    }

    fn to_pillar(&self, p: usize, input: PillarInput) {
        if self.pillars[p].try_send(input).is_err() {
            // The pillar's queue is full or it is gone: the message is dropped
            // and counted; PBFT's retransmission (status exchange) recovers.
            self.metrics.drop_frame("pillar-queue-full");
        }
    }
}
