//! `Driver`: runs one sans-IO state machine's rounds against real time
//! and the outbox stage (persist-before-send, DESIGN §2). The protocol core
//! (`core_thread.rs`) and each pillar's lane group (`piece_task.rs`) have
//! one; they keep their timers here and hand each round to the stage.

use crate::outbox_thread::{OutboxStage, Round};
use anyhow::{bail, Result};
use chorus_core::Millis;
use chorus_order::{Action, Outbox, TimerId};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

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

/// One state machine's timers and its way to the outbox stage.
/// Made only by `Driver::perform_first_round`: the replica's first round is
/// queued to the outbox stage.
#[derive(Clone, Copy, Debug)]
pub struct FirstRoundQueued(());

impl FirstRoundQueued {
    /// For tests that build a lane group's task without a replica's start.
    #[cfg(test)]
    pub(crate) fn assumed_in_test() -> FirstRoundQueued {
        FirstRoundQueued(())
    }
}

pub struct Driver {
    pub outbox: Downstream,
    timers: BTreeMap<TimerId, Millis>,
    /// The replica's one clock origin: the core and every lane group read
    /// `now` against it, so timers and times they exchange agree.
    start: Instant,
}

/// The wall clock the core stamps on batches it proposes and bounds the
/// ones it accepts by (`Replica::set_wall_clock`): ms since the Unix epoch,
/// unlike `Driver::now`, which is monotonic since start.
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// How long a hosted core waits before it offers a full executor (inline)
/// or a full outbox stage its round again.
pub const HOSTED_RETRY: Duration = Duration::from_millis(1);
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
    pub fn new(outbox: Downstream, start: Instant) -> Driver {
        Driver {
            outbox,
            timers: BTreeMap::new(),
            start,
        }
    }

    /// The timers due at `now`, no longer kept.
    pub fn take_due(&mut self, now: Millis) -> Vec<TimerId> {
        let due: Vec<TimerId> = self
            .timers
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in &due {
            self.timers.remove(id);
        }
        due
    }

    /// Hosted only. Inline: let the pillar thread move this round's frames
    /// onto its connections before the next round starts, and wait, without
    /// holding that thread, until the executor took all of the round's
    /// deliveries. To a stage thread: wait the same way until its queue
    /// took the round. No new input is taken meanwhile: a full executor or
    /// a slow disk still back-pressures ordering.
    pub async fn settle(&mut self) -> Result<()> {
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

    pub fn now(&self) -> Millis {
        Millis(self.start.elapsed().as_millis() as u64)
    }

    pub fn next_deadline(&self) -> tokio::time::Instant {
        let now = self.now();
        let next = self.timers.values().min().copied().unwrap_or(now.plus(1_000));
        let wait = next.0.saturating_sub(now.0);
        tokio::time::Instant::now() + Duration::from_millis(wait)
    }

    /// `perform` for the replica's first round (recovery's view records and
    /// messages, the hub's timers), returning the proof that it is queued:
    /// a lane group on its pillar cannot be built without it
    /// (`PieceTask::first_round`), so no group can send on the strength of
    /// a restored view before that view's record is on its way to the
    /// store (persist-before-send across the hub and the groups; a review
    /// found the order once depended on the runtime's statement order).
    pub fn perform_first_round(&mut self, out: &mut Outbox) -> Result<FirstRoundQueued> {
        self.perform(out)?;
        Ok(FirstRoundQueued(()))
    }

    /// Hand the round's outbox to the outbox stage, keeping the timers. On
    /// its own thread the core blocks while the stage's queue is full
    /// (storage back-pressures ordering); hosted, the round waits for
    /// `settle`. Fails only when the stage is gone, which is fatal.
    pub fn perform(&mut self, out: &mut Outbox) -> Result<()> {
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
