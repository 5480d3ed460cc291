//! A reconnecting outbound link: keeps one authenticated connection to a
//! replica (one pillar's peer port, or a replica's client port) alive and
//! writes the frames queued for it.
//!
//! Queue policy: a bounded `mpsc` channel of already-encoded frames
//! (`NetLimits::max_buffered_frames`), which takes a frame only while it
//! holds fewer than `NetLimits::max_queued_bytes` bytes. When it is full,
//! **the new frame is dropped** (and counted in `Counters::link_dropped`): the protocols above
//! recover lost messages through retransmission and status exchange, and
//! dropping the newest keeps the queue lock-free and never reorders what is
//! already queued. Delivery is at most once: frames written to a connection
//! that then breaks are not resent by the link.

use crate::counters::Counters;
use crate::handshake::connect;
use crate::limits::NetLimits;
use crate::role::{Expected, PeerRole};
use crate::session::{FrameReader, FrameWriter};
use bytes::Bytes;
use chorus_core::{ClientId, ClusterConfig, Identity, ReplicaId};
use rand::Rng;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Exponential back-off between connection attempts, with jitter.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub min: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            min: Duration::from_millis(50),
            max: Duration::from_secs(5),
        }
    }
}

impl Backoff {
    /// The next base delay: doubled, capped at `max`.
    pub fn grow(&self, current: Duration) -> Duration {
        current.saturating_mul(2).clamp(self.min, self.max.max(self.min))
    }

    /// A delay drawn uniformly from `[base/2, base]`, so that replicas that lost
    /// a peer at the same moment do not all redial it in lock-step.
    pub fn jitter(base: Duration) -> Duration {
        let half = base / 2;
        let extra_us = rand::thread_rng().gen_range(0..=half.as_micros().min(u64::MAX as u128) as u64);
        half + Duration::from_micros(extra_us)
    }
}

/// Where a link dials and whom it expects there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkSpec {
    pub host: String,
    pub port: u16,
    pub my_role: PeerRole,
    pub expected: Expected,
    pub backoff: Backoff,
}

impl LinkSpec {
    /// From pillar `pillar` of replica `me` to the same pillar of `peer` (COP:
    /// one connection per pillar pair), at `peer_base_port + pillar`.
    pub fn replica_pillar(
        config: &ClusterConfig,
        me: ReplicaId,
        peer: ReplicaId,
        pillar: u32,
    ) -> Option<LinkSpec> {
        let info = config.replica(peer)?;
        let port = info.peer_base_port.checked_add(u16::try_from(pillar).ok()?)?;
        Some(LinkSpec {
            host: info.host.clone(),
            port,
            my_role: PeerRole::Replica { id: me, pillar },
            expected: Expected::replica_pillar(config, peer, pillar)?,
            backoff: Backoff::default(),
        })
    }

    /// From client `me` to the client port of `replica` (any pillar may answer).
    pub fn client_port(config: &ClusterConfig, me: ClientId, replica: ReplicaId) -> Option<LinkSpec> {
        let info = config.replica(replica)?;
        Some(LinkSpec {
            host: info.host.clone(),
            port: info.client_port,
            my_role: PeerRole::Client { id: me },
            expected: Expected::replica_any_pillar(config, replica)?,
            backoff: Backoff::default(),
        })
    }
}

/// One frame received on a link (or any connection the caller tags this way).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inbound {
    /// The authenticated sender.
    pub from: PeerRole,
    pub frame: Bytes,
}

#[derive(Debug, Default)]
struct LinkState {
    connected: AtomicBool,
    connects: AtomicU64,
    /// Why the latest connection attempt failed; `None` once one succeeds.
    last_failure: std::sync::Mutex<Option<DialFailure>>,
}

impl LinkState {
    fn set_failure(&self, f: Option<DialFailure>) {
        *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = f;
    }
}

/// Why a link's latest connection attempt failed, for the caller to explain
/// "cannot connect" (issue 14 item 4: a wrong key looked like a dead cluster).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DialFailure {
    /// The replica refused the handshake and said why.
    Refused(crate::HandshakeRefusal),
    /// Whatever listens there is no Chorus endpoint.
    NotChorus(String),
    /// Anything else (connection refused, timeout...), as text.
    Other(String),
}

impl DialFailure {
    fn of(e: &crate::NetError) -> DialFailure {
        match e {
            crate::NetError::Refused(why) => DialFailure::Refused(*why),
            crate::NetError::NotChorus(what) => DialFailure::NotChorus(what.clone()),
            other => DialFailure::Other(other.to_string()),
        }
    }
}

impl std::fmt::Display for DialFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DialFailure::Refused(why) => write!(f, "handshake refused: {why}"),
            DialFailure::NotChorus(what) => write!(f, "not a Chorus endpoint: it answered {what}"),
            DialFailure::Other(e) => f.write_str(e),
        }
    }
}

/// Handle to a running link. Dropping it stops the link and closes its connection.
#[derive(Debug)]
pub struct PeerLink {
    tx: mpsc::Sender<Bytes>,
    /// Bytes of the frames in `tx` (the link task subtracts what it takes).
    queued_bytes: Arc<AtomicUsize>,
    max_queued_bytes: usize,
    state: Arc<LinkState>,
    counters: Arc<Counters>,
    task: JoinHandle<()>,
}

impl PeerLink {
    /// Queue an encoded frame. `false` = the queue was full and the frame was
    /// dropped (counted). Never blocks.
    pub fn try_send(&self, frame: Bytes) -> bool {
        let len = frame.len();
        // Added before the send, so the link task never subtracts first.
        if self.queued_bytes.fetch_add(len, Ordering::AcqRel) >= self.max_queued_bytes {
            self.queued_bytes.fetch_sub(len, Ordering::AcqRel);
            Counters::bump(&self.counters.link_dropped);
            return false;
        }
        match self.tx.try_send(frame) {
            Ok(()) => true,
            Err(_) => {
                self.queued_bytes.fetch_sub(len, Ordering::AcqRel);
                Counters::bump(&self.counters.link_dropped);
                false
            }
        }
    }

    /// Bytes waiting in the queue.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes.load(Ordering::Acquire)
    }

    /// Whether the link currently has an authenticated connection.
    pub fn is_connected(&self) -> bool {
        self.state.connected.load(Ordering::Relaxed)
    }

    /// Why the latest connection attempt failed (`None`: it succeeded, or
    /// none has ended yet).
    pub fn last_failure(&self) -> Option<DialFailure> {
        self.state
            .last_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// How many times the link has (re)connected.
    pub fn connects(&self) -> u64 {
        self.state.connects.load(Ordering::Relaxed)
    }

    /// Frames waiting in the queue.
    pub fn queued(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }
}

impl Drop for PeerLink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Start a link task on the current tokio runtime (current-thread or
/// multi-thread). Frames the peer sends back are forwarded to `inbound` when
/// given (with back-pressure on the socket), discarded otherwise.
pub fn spawn_peer_link(
    spec: LinkSpec,
    me: Arc<Identity>,
    limits: NetLimits,
    counters: Arc<Counters>,
    inbound: Option<mpsc::Sender<Inbound>>,
) -> PeerLink {
    assert!(
        limits.max_buffered_frames > 0,
        "link queue must hold at least one frame"
    );
    let (tx, rx) = mpsc::channel(limits.max_buffered_frames);
    let queued_bytes = Arc::new(AtomicUsize::new(0));
    let max_queued_bytes = limits.max_queued_bytes;
    let state = Arc::new(LinkState::default());
    let task = tokio::spawn(run_link(
        spec,
        me,
        limits,
        counters.clone(),
        inbound,
        Queue {
            rx,
            bytes: queued_bytes.clone(),
        },
        state.clone(),
    ));
    PeerLink {
        tx,
        queued_bytes,
        max_queued_bytes,
        state,
        counters,
        task,
    }
}

/// The link task's end of the queue: frames, and the byte count it releases.
struct Queue {
    rx: mpsc::Receiver<Bytes>,
    bytes: Arc<AtomicUsize>,
}

impl Queue {
    async fn recv(&mut self) -> Option<Bytes> {
        let frame = self.rx.recv().await?;
        self.bytes.fetch_sub(frame.len(), Ordering::AcqRel);
        Some(frame)
    }

    fn try_recv(&mut self) -> Option<Bytes> {
        let frame = self.rx.try_recv().ok()?;
        self.bytes.fetch_sub(frame.len(), Ordering::AcqRel);
        Some(frame)
    }
}

async fn run_link(
    spec: LinkSpec,
    me: Arc<Identity>,
    limits: NetLimits,
    counters: Arc<Counters>,
    mut inbound: Option<mpsc::Sender<Inbound>>,
    mut rx: Queue,
    state: Arc<LinkState>,
) {
    let mut delay = spec.backoff.min;
    loop {
        match dial(&spec, &me, &limits, &counters).await {
            Ok((peer, reader, writer)) => {
                Counters::bump(&counters.link_connects);
                state.connects.fetch_add(1, Ordering::Relaxed);
                state.connected.store(true, Ordering::Relaxed);
                state.set_failure(None);
                delay = spec.backoff.min;
                tracing::debug!(%peer, port = spec.port, "link connected");
                let end = serve(
                    peer,
                    reader,
                    writer,
                    &mut rx,
                    &mut inbound,
                    limits.max_buffered_frames,
                )
                .await;
                state.connected.store(false, Ordering::Relaxed);
                if end == End::QueueClosed {
                    return;
                }
            }
            Err(e) => {
                Counters::bump(&counters.link_connect_failures);
                state.set_failure(Some(DialFailure::of(&e)));
                tracing::debug!(host = %spec.host, port = spec.port, error = %e, "link connect failed");
            }
        }
        tokio::time::sleep(Backoff::jitter(delay)).await;
        delay = spec.backoff.grow(delay);
    }
}

async fn dial(
    spec: &LinkSpec,
    me: &Identity,
    limits: &NetLimits,
    counters: &Arc<Counters>,
) -> Result<(PeerRole, FrameReader, FrameWriter), crate::NetError> {
    let tcp = tokio::time::timeout(
        limits.handshake_timeout,
        TcpStream::connect((spec.host.as_str(), spec.port)),
    )
    .await
    .map_err(|_| crate::NetError::HandshakeTimeout(limits.handshake_timeout))??;
    connect(tcp, me, spec.my_role, &spec.expected, limits, counters).await
}

#[derive(Debug, PartialEq, Eq)]
enum End {
    ConnectionLost,
    QueueClosed,
}

/// Run one connection until it fails or the handle is dropped. Reading and
/// writing are polled concurrently, so a blocked write never stops us from
/// draining what the peer sends (and vice versa).
async fn serve(
    peer: PeerRole,
    mut reader: FrameReader,
    mut writer: FrameWriter,
    rx: &mut Queue,
    inbound: &mut Option<mpsc::Sender<Inbound>>,
    batch_frames: usize,
) -> End {
    let read_loop = async {
        loop {
            match reader.next().await {
                Ok(Some(frame)) => {
                    if let Some(tx) = inbound.as_ref() {
                        if tx.send(Inbound { from: peer, frame }).await.is_err() {
                            // Nobody listens any more: keep draining, stop forwarding.
                            *inbound = None;
                        }
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "link read failed");
                    return;
                }
            }
        }
    };
    let write_loop = async {
        loop {
            let Some(first) = rx.recv().await else {
                let _ = writer.shutdown().await;
                return End::QueueClosed;
            };
            let mut next = Some(first);
            let mut fed = 0;
            while let Some(frame) = next.take() {
                match writer.feed(&frame).await {
                    Ok(()) => {}
                    // Refused locally (counted) without harming the connection.
                    Err(crate::NetError::Oversize { .. }) => {}
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "link write failed");
                        return End::ConnectionLost;
                    }
                }
                fed += 1;
                if fed < batch_frames {
                    next = rx.try_recv();
                }
            }
            if let Err(e) = writer.flush().await {
                tracing::debug!(%peer, error = %e, "link flush failed");
                return End::ConnectionLost;
            }
        }
    };
    tokio::select! {
        () = read_loop => End::ConnectionLost,
        end = write_loop => end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_max_and_jitter_stays_in_range() {
        let b = Backoff {
            min: Duration::from_millis(10),
            max: Duration::from_millis(100),
        };
        let mut d = b.min;
        let mut seen = vec![];
        for _ in 0..6 {
            seen.push(d);
            d = b.grow(d);
        }
        assert_eq!(
            seen.iter().map(|d| d.as_millis()).collect::<Vec<_>>(),
            vec![10, 20, 40, 80, 100, 100]
        );
        for _ in 0..100 {
            let j = Backoff::jitter(Duration::from_millis(100));
            assert!(
                j >= Duration::from_millis(50) && j <= Duration::from_millis(100),
                "{j:?}"
            );
        }
    }
}
