//! A lane group on its pillar's thread (COP §4: a pillar runs whole PBFT
//! instances; docs/lane-split.md step C). It handles its lanes' messages,
//! its clients' requests and its own timers, writes each round through the
//! outbox stage like the core does, and talks to the hub (the core) only by
//! `Internal` messages.

use crate::channels::{CoreInput, PieceInput};
use crate::core_thread::STATUS_PUBLISH;
use crate::driver::{wall_ms, Driver, FirstRoundQueued};
use anyhow::Result;
use chorus_order::{Event, GroupPiece, Outbox, PieceStatus};
use tokio::sync::{mpsc, watch};

/// Inputs handled before a round is written, at most.
const DRAIN_MAX: usize = 256;

pub struct PieceTask {
    pub piece: GroupPiece,
    /// What the replica's start emitted for this group (its timers).
    pub initial: Outbox,
    pub input: mpsc::Receiver<PieceInput>,
    pub hub: mpsc::Sender<CoreInput>,
    pub driver: Driver,
    /// This group's lanes and counters, merged by the hub into the
    /// replica's status (`Replica::status_with`).
    pub status: watch::Sender<PieceStatus>,
    pub shutdown: watch::Receiver<bool>,
    /// The replica's first round was queued before this task existed.
    pub first_round: FirstRoundQueued,
}

impl PieceTask {
    /// Until shutdown, or a fatal error (returned; its pillar's).
    pub async fn run(mut self) -> Result<()> {
        let mut out = std::mem::take(&mut self.initial);
        self.round(&mut out).await?;
        let mut status_tick = tokio::time::interval(STATUS_PUBLISH);
        status_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if *self.shutdown.borrow() {
                break;
            }
            let deadline = self.driver.next_deadline();
            tokio::select! {
                biased;
                _ = self.shutdown.changed() => break,
                _ = status_tick.tick() => {
                    let _ = self.status.send(self.piece.status_part());
                }
                msg = self.input.recv() => {
                    let Some(msg) = msg else { break };
                    self.feed(msg, &mut out);
                    for _ in 0..DRAIN_MAX {
                        match self.input.try_recv() {
                            Ok(m) => self.feed(m, &mut out),
                            Err(_) => break,
                        }
                    }
                }
                                _ = tokio::time::sleep_until(deadline) => {}
            }
            // Due timers fire on every pass, not only when the inbox is
            // empty: a peer flooding this pillar must not hold off its
            // lanes' view-change timers.
            let now = self.driver.now();
            let due = self.driver.take_due(now);
            if !due.is_empty() {
                self.piece.set_wall_clock(wall_ms());
                for id in due {
                    self.piece.handle(now, Event::Timer(id), &mut out);
                }
            }
            self.round(&mut out).await?;
        }
        Ok(())
    }

    fn feed(&mut self, input: PieceInput, out: &mut Outbox) {
        let now = self.driver.now();
        self.piece.set_wall_clock(wall_ms());
        match input {
            PieceInput::Peer { from, msg } => self.piece.handle(now, Event::Message { from, msg }, out),
            PieceInput::Request(req) => self.piece.handle_verified_request(now, req, out),
            PieceInput::Internal(msg) => self.piece.handle_internal(now, msg, out),
            PieceInput::Many(inputs) => {
                for i in inputs {
                    self.feed(i, out);
                }
            }
        }
    }

    /// Write the round, then tell the hub. Lane-split rule (docs/lane-split.md
    /// step C): the round is queued to the stage before its `Decided`
    /// reports leave, and the stage is FIFO, so a decision is durable before
    /// the hub's delivery of it reaches the executor.
    async fn round(&mut self, out: &mut Outbox) -> Result<()> {
        self.driver.perform(out)?;
        self.driver.settle().await?;
        for msg in self.piece.take_internal() {
            if self.hub.send(CoreInput::Internal(msg)).await.is_err() {
                // The core ended: at a shutdown, or failing, which its own
                // thread reports (`fatal::spawn`); this group waits for the
                // shutdown that follows rather than report it as its own.
                let _ = self.shutdown.wait_for(|stopping| *stopping).await;
                return Ok(());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channels::PIECE_CHANNEL_CAP;
    use crate::driver::Downstream;
    use chorus_core::{
        ClientId, Digest, FetchBatch, LaneId, Millis, ReplicaId, ReplicaMsg, Request, RequestSeq, Slot,
    };
    use chorus_order::Action;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// When the hub has ended (a fatal error of the core, which reports it
    /// under its own name), a group with news for it neither fails nor
    /// ends: it waits for the shutdown that follows, then stops cleanly.
    /// (Found by review: it returned an error, a second fatal report,
    /// under its pillar's name, for the core's failure.)
    /// Group 0 of replica `me` of a two-pillar cop cluster as its pillar
    /// runs it, and the ends of its channels.
    struct Harness {
        task: PieceTask,
        cfg: std::sync::Arc<chorus_core::ClusterConfig>,
        stage: crate::queue::Receiver<crate::outbox_thread::Round>,
        input: mpsc::Sender<PieceInput>,
        hub: mpsc::Receiver<CoreInput>,
        status: watch::Receiver<PieceStatus>,
        stop: watch::Sender<bool>,
    }

    fn group_task(me: u32, tweak: impl FnOnce(&mut chorus_core::ProtocolParams)) -> Harness {
        let (mut replica, mut out, cfg) = crate::lane_split::cop2_replica(me, tweak);
        let (piece, initial) = crate::lane_split::split(&mut replica, Millis(0), &mut out).remove(0);
        let (stage_tx, stage) = crate::queue::bounded(1 << 20);
        let (input, input_rx) = mpsc::channel(PIECE_CHANNEL_CAP);
        let (hub_tx, hub) = mpsc::channel(1 << 16);
        let (status_tx, status) = watch::channel(piece.status_part());
        let (stop, stop_rx) = watch::channel(false);
        let task = PieceTask {
            piece,
            initial,
            input: input_rx,
            hub: hub_tx,
            driver: Driver::new(Downstream::thread_from_pillar(stage_tx), Instant::now()),
            status: status_tx,
            shutdown: stop_rx,
            first_round: FirstRoundQueued::assumed_in_test(),
        };
        Harness {
            task,
            cfg,
            stage,
            input,
            hub,
            status,
            stop,
        }
    }

    #[test]
    fn a_group_whose_hub_is_gone_waits_for_the_shutdown_instead_of_failing() {
        let Harness {
            task,
            cfg,
            stage: stage_rx,
            input: input_tx,
            hub: hub_rx,
            stop: stop_tx,
            ..
        } = group_task(0, |_| {});
        drop(hub_rx);
        // A request of lane 0 (client 0), which replica 0 leads: it proposes
        // at once, and its group tells the hub its new frontier.
        let (_, _, clients) = chorus_core::ClusterConfig::for_testing(4, 4, cfg.params.clone(), 1);
        let keys: Vec<_> = cfg
            .replicas
            .iter()
            .map(|r| clients[0].pairwise_key(&r.identity))
            .collect();
        assert_eq!(cfg.owner_lane(ClientId(0)), LaneId(0));
        let req = Request::with_macs(
            &chorus_core::ClusterTag::of(&cfg),
            ClientId(0),
            RequestSeq(1),
            0,
            bytes::Bytes::from_static(b"op"),
            &keys,
        );
        input_tx.try_send(PieceInput::Request(req)).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        let (early, ended) = local.block_on(&rt, async {
            let group = tokio::task::spawn_local(task.run());
            tokio::time::sleep(Duration::from_millis(300)).await;
            let early = group.is_finished();
            let _ = stop_tx.send(true);
            (early, group.await)
        });
        let mut rounds = Vec::new();
        stage_rx.drain_ready(&mut rounds, usize::MAX);
        let proposed = rounds.iter().flat_map(|r| &r.actions).any(|a| {
            matches!(
                a,
                Action::Broadcast {
                    msg: ReplicaMsg::PrePrepare(_)
                }
            )
        });
        assert!(proposed, "the group did not propose the request");
        assert!(!early, "the group ended before the shutdown: {ended:?}");
        assert!(matches!(ended, Ok(Ok(()))), "{ended:?}");
    }

    /// A peer that keeps a group's inbox full must not hold off its timers:
    /// the group's status tick still announces its lane. (The loop fired
    /// due timers only when its inbox was empty, `select!`'s bias, so under
    /// this flood no status left at all.)
    #[test]
    fn a_flood_of_input_does_not_hold_off_the_groups_timers() {
        let Harness {
            task,
            stage: stage_rx,
            input: input_tx,
            hub: _hub_rx,
            status: status_rx,
            stop: stop_tx,
            ..
        } = group_task(1, |p| p.status_interval_ms = 50);
        // Another lane's message: refused at once, so the flood costs the
        // group little and its inbox stays full.
        let junk = ReplicaMsg::FetchBatch(FetchBatch {
            lane: LaneId(1),
            slot: Slot(1),
            digest: Digest([7; 32]),
        });
        let flooding = Arc::new(AtomicBool::new(true));
        let flooder = {
            let flooding = flooding.clone();
            std::thread::spawn(move || {
                while flooding.load(Ordering::Relaxed) {
                    let msg = PieceInput::Peer {
                        from: ReplicaId(2),
                        msg: junk.clone(),
                    };
                    if input_tx.blocking_send(msg).is_err() {
                        return;
                    }
                }
            })
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        let ended = local.block_on(&rt, async {
            let group = tokio::task::spawn_local(task.run());
            tokio::time::sleep(Duration::from_millis(500)).await;
            let _ = stop_tx.send(true);
            group.await
        });
        flooding.store(false, Ordering::Relaxed);
        drop(local);
        flooder.join().unwrap();
        assert!(matches!(ended, Ok(Ok(()))), "{ended:?}");
        let refused = status_rx.borrow().counters.rejected.values().sum::<u64>();
        assert!(refused > 1_000, "not a flood: {refused} messages refused");
        let mut rounds = Vec::new();
        stage_rx.drain_ready(&mut rounds, usize::MAX);
        let statuses = rounds
            .iter()
            .flat_map(|r| &r.actions)
            .filter(|a| {
                matches!(
                    a,
                    Action::Broadcast {
                        msg: ReplicaMsg::Statuses(_)
                    }
                )
            })
            .count();
        assert!(
            statuses >= 2,
            "{statuses} status broadcasts in 500 ms at a 50 ms interval"
        );
    }
}
