//! A pillar (COP §4): one OS thread with its own single-threaded runtime. It
//! owns its private connections to the same pillar of every other replica,
//! a share of the client connections, and does the per-message work that
//! needs no total order: framing, channel authentication, decoding, client
//! authenticator checks and reply writing.

use crate::channels::{CoreInput, ExecInput, PieceInput, PillarInput};
use crate::frame_queue::{frame_queue, FrameQueueRx, FrameQueueTx, Offer, CLIENT_QUEUE_BYTES};
use crate::metrics::Metrics;
use bytes::Bytes;
use chorus_core::{
    decode, encode, flags, ClientId, ClientMsg, ClusterConfig, Identity, Limits, ReplicaId, ReplicaMsg,
};
use chorus_net::{Expected, Gate, GateLimits, NetLimits, PeerRole, Pending, Responder};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Frames queued towards one peer pillar before new ones are dropped (its
/// bytes are bounded too: `frame_queue.rs`).
const PEER_LINK_QUEUE: usize = 8_192;
/// Frames queued towards one client before new ones are dropped (and
/// `CLIENT_QUEUE_BYTES`).
const CLIENT_QUEUE: usize = 4_096;
/// Reconnect back-off bounds.
const BACKOFF_MIN_MS: u64 = 50;
const BACKOFF_MAX_MS: u64 = 2_000;

pub struct PillarThread {
    pub index: usize,
    pub config: Arc<ClusterConfig>,
    pub me: ReplicaId,
    pub identity: Identity,
    pub input: mpsc::Receiver<PillarInput>,
    pub core: mpsc::Sender<CoreInput>,
    pub exec: crate::queue::Sender<ExecInput>,
    pub metrics: Arc<Metrics>,
    pub peer_listener: std::net::TcpListener,
    /// Only pillar 0 accepts clients; it hands sockets round-robin to all pillars.
    pub client_listener: Option<std::net::TcpListener>,
    pub all_pillars: Vec<mpsc::Sender<PillarInput>>,
    pub shutdown: watch::Receiver<bool>,
    pub counters: Arc<chorus_net::Counters>,
    pub gates: Gates,
    /// The core's published status: view questions are answered from it.
    pub core_status: watch::Receiver<crate::status::CoreStatus>,
    /// The protocol core, when this pillar hosts it (`runtime::core_on_pillar`):
    /// it runs as a task of this thread, and its end ends the pillar.
    pub hosted_core: Option<crate::core_thread::CoreThread>,
    /// This pillar's lane group, when the lanes run on their pillars
    /// (`lane_split.rs`): a task of this thread; its end ends the pillar.
    pub lane_group: Option<crate::piece_task::PieceTask>,
    /// `sarek`: PREDICT(), to hand a request to the group of its first
    /// partition (`chorus_order::request_lane`).
    pub predictor: Option<chorus_order::sarek::Predictor>,
    /// Every pillar's lane group input, by pillar (empty unless split):
    /// lane messages go to ours, requests to their owner lane's.
    pub lane_groups: Vec<mpsc::Sender<PieceInput>>,
}

/// Admission gates shared by all pillars of a replica: one for the client
/// port, one for the peer ports (docs/security.md lists the bounds).
#[derive(Clone)]
pub struct Gates {
    pub client: Arc<Gate>,
    pub peer: Arc<Gate>,
}

/// Unfinished handshakes on the client port, in total and from one address.
const CLIENT_PENDING_MAX: usize = 1024;
const CLIENT_PENDING_PER_SOURCE: usize = 256;
/// Public-key handshakes one address may start on the client port, per
/// second and in a burst (only holders of a configured key get this far).
const CLIENT_HANDSHAKES_PER_SEC_PER_SOURCE: f64 = 256.0;
const CLIENT_HANDSHAKE_BURST_PER_SOURCE: f64 = 512.0;
/// Addresses tracked at once per gate.
const SOURCES_MAX: usize = 4096;
/// Unfinished handshakes on the peer ports, per configured peer pillar.
const PEER_PENDING_PER_LINK: usize = 8;
const PEER_HANDSHAKES_PER_SEC_PER_SOURCE: f64 = 64.0;
const PEER_HANDSHAKE_BURST_PER_SOURCE: f64 = 128.0;
/// Public-key handshakes in progress per pillar: clients share
/// `CLIENT_HANDSHAKES_MAX`; every other replica has `PEER_SLOTS_PER_REPLICA`
/// of its own, so no client and no other replica can take them.
const CLIENT_HANDSHAKES_MAX: usize = 64;
const PEER_SLOTS_PER_REPLICA: usize = 2;
/// Connections one peer pillar may hold to ours: a reconnect closes the oldest.
const PEER_CONNS_MAX: usize = 2;
/// A peer connection with no frame for this long is closed: live peers send
/// status every `status_interval_ms` (250 ms by default).
const PEER_IDLE: Duration = Duration::from_secs(30);

impl Gates {
    pub fn for_config(config: &ClusterConfig) -> Gates {
        let links = config.n().max(1) * config.params.pillars.max(1) as usize;
        let client = Gate::new(GateLimits {
            max_pending: CLIENT_PENDING_MAX,
            max_pending_per_source: CLIENT_PENDING_PER_SOURCE,
            handshakes_per_sec_per_source: CLIENT_HANDSHAKES_PER_SEC_PER_SOURCE,
            handshake_burst_per_source: CLIENT_HANDSHAKE_BURST_PER_SOURCE,
            max_sources: SOURCES_MAX,
        });
        // Replicas may share a host (tests, small deployments): the per-source
        // cap is the whole peer budget, which only replica hosts can use.
        let peer_limits = GateLimits {
            max_pending: PEER_PENDING_PER_LINK * links,
            max_pending_per_source: PEER_PENDING_PER_LINK * links,
            handshakes_per_sec_per_source: PEER_HANDSHAKES_PER_SEC_PER_SOURCE,
            handshake_burst_per_source: PEER_HANDSHAKE_BURST_PER_SOURCE,
            max_sources: config.n().max(1),
        };
        let peer = Gate::with_allowed(peer_limits, replica_addresses(config));
        Gates { client, peer }
    }
}

/// The addresses the configured replica hosts resolve to (names resolved
/// once, at start).
fn replica_addresses(config: &ClusterConfig) -> std::collections::HashSet<std::net::IpAddr> {
    use std::net::ToSocketAddrs;
    let mut out = std::collections::HashSet::new();
    for r in &config.replicas {
        match (r.host.as_str(), r.peer_base_port).to_socket_addrs() {
            Ok(addrs) => out.extend(addrs.map(|a| a.ip())),
            Err(e) => tracing::warn!(host = %r.host, error = %e, "cannot resolve replica host"),
        }
    }
    out
}

/// Per client: its connections as (connection id, frame queue, eviction
/// signal), newest last, at most `CLIENT_CONNS_MAX` each.
/// Per peer replica: its inbound connections to this pillar as (connection
/// id, eviction signal), newest last, at most `PEER_CONNS_MAX`.
type PeerConns = HashMap<ReplicaId, Vec<(u64, Rc<tokio::sync::Notify>)>>;

type ClientConns = HashMap<ClientId, Vec<(u64, FrameQueueTx, Rc<tokio::sync::Notify>)>>;

struct Shared {
    index: usize,
    config: Arc<ClusterConfig>,
    me: ReplicaId,
    identity: Identity,
    limits: Limits,
    /// Replica connections: frames up to the largest replica message.
    net: NetLimits,
    /// Client connections: the configured frame limit.
    client_net: NetLimits,
    core: mpsc::Sender<CoreInput>,
    exec: crate::queue::Sender<ExecInput>,
    metrics: Arc<Metrics>,
    /// Live connections per client (newest last); replies use the newest.
    clients: RefCell<ClientConns>,
    next_conn: RefCell<u64>,
    counters: Arc<chorus_net::Counters>,
    responder: Responder,
    /// Public-key handshakes of clients in progress (see `CLIENT_HANDSHAKES_MAX`).
    client_handshakes: tokio::sync::Semaphore,
    /// Slots reserved per other replica (see `PEER_SLOTS_PER_REPLICA`).
    peer_slots: HashMap<ReplicaId, tokio::sync::Semaphore>,
    /// Live inbound connections per peer (id, eviction signal), newest last.
    peers: RefCell<PeerConns>,
    core_status: watch::Receiver<crate::status::CoreStatus>,
    /// Checks peers' messages ahead of the core (`chorus_order::pre_check`).
    pre_checker: RefCell<chorus_order::pre_check::PreChecker>,
    /// `PillarThread::lane_groups`.
    lane_groups: Vec<mpsc::Sender<PieceInput>>,
    predictor: Option<chorus_order::sarek::Predictor>,
}

/// Connections one client may hold to one pillar. A client that reconnects
/// while its old connections linger (a dead peer not yet timed out) gets the
/// new one and the oldest is closed, so the total is bounded by the
/// configured clients times this, never by what clients choose to open.
const CLIENT_CONNS_MAX: usize = 4;

impl PillarThread {
    pub fn run(self) -> anyhow::Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let local = tokio::task::LocalSet::new();
        let outcome = local.block_on(&rt, self.run_async());
        // A reconnecting link may be resolving a host name on a blocking
        // thread; the process must not wait for it to stop (a hosted core
        // has ended by now, and with it an inline stage's store).
        drop(local);
        rt.shutdown_timeout(Duration::from_millis(100));
        outcome
    }

    async fn run_async(mut self) -> anyhow::Result<()> {
        let shared = Rc::new(Shared {
            index: self.index,
            config: self.config.clone(),
            me: self.me,
            identity: self.identity.clone(),
            limits: Limits::from_config(&self.config),
            net: NetLimits::from_config(&self.config),
            client_net: NetLimits::for_clients(&self.config),
            core: self.core.clone(),
            exec: self.exec.clone(),
            metrics: self.metrics.clone(),
            clients: RefCell::new(HashMap::new()),
            next_conn: RefCell::new(0),
            counters: self.counters.clone(),
            core_status: self.core_status.clone(),
            pre_checker: RefCell::new(chorus_order::pre_check::PreChecker::new(
                &self.config,
                pre_check_policy(
                    &self.config,
                    self.hosted_core.is_some() || !self.lane_groups.is_empty(),
                ),
            )),
            lane_groups: self.lane_groups.clone(),
            predictor: self.predictor.clone(),
            responder: Responder::new(
                self.identity.clone(),
                PeerRole::Replica {
                    id: self.me,
                    pillar: self.index as u32,
                },
                self.config.clone(),
            ),
            client_handshakes: tokio::sync::Semaphore::new(CLIENT_HANDSHAKES_MAX),
            peer_slots: self
                .config
                .replica_ids()
                .filter(|r| *r != self.me)
                .map(|r| (r, tokio::sync::Semaphore::new(PEER_SLOTS_PER_REPLICA)))
                .collect(),
            peers: RefCell::new(HashMap::new()),
        });
        // Outbound private links to pillar `index` of every other replica.
        let mut links: HashMap<ReplicaId, FrameQueueTx> = HashMap::new();
        let link_count = self.config.n().saturating_sub(1) * self.config.params.pillars.max(1) as usize;
        let link_bytes = crate::frame_queue::bytes_per_link(link_count);
        for peer in self.config.replica_ids().filter(|r| *r != self.me) {
            let (tx, rx) = frame_queue(PEER_LINK_QUEUE, link_bytes);
            links.insert(peer, tx);
            tokio::task::spawn_local(peer_link(shared.clone(), peer, rx));
        }
        self.peer_listener.set_nonblocking(true)?;
        let peer_listener = tokio::net::TcpListener::from_std(self.peer_listener)?;
        tokio::task::spawn_local(accept_peers(
            shared.clone(),
            peer_listener,
            self.gates.peer.clone(),
        ));
        if let Some(l) = self.client_listener.take() {
            l.set_nonblocking(true)?;
            let l = tokio::net::TcpListener::from_std(l)?;
            tokio::task::spawn_local(crate::client_accept::accept_clients(
                l,
                crate::client_accept::Routing {
                    pillars: self.all_pillars.clone(),
                    config: self.config.clone(),
                    // With cop's lanes on their pillars a client's requests
                    // are ordered by its owner lane's pillar: it is served
                    // there (a sarek request goes to its partitions' pillars,
                    // whichever pillar reads it).
                    affinity: !self.lane_groups.is_empty()
                        && self.config.params.mode == chorus_core::OrderingMode::Cop,
                    hello_timeout: NetLimits::for_clients(&self.config).hello_timeout,
                    metrics: self.metrics.clone(),
                },
                self.gates.client.clone(),
            ));
        }
        let mut core = self
            .hosted_core
            .take()
            .map(|c| tokio::task::spawn_local(c.run_async()));
        let mut group = self.lane_group.take().map(|g| tokio::task::spawn_local(g.run()));
        loop {
            tokio::select! {
                biased;
                _ = self.shutdown.changed() => break,
                ended = core_ended(&mut core) => {
                    return hosted_outcome(ended, *self.shutdown.borrow(), HOSTS_CORE);
                }
                ended = core_ended(&mut group) => {
                    return hosted_outcome(ended, *self.shutdown.borrow(), HOSTS_GROUP);
                }
                input = self.input.recv() => {
                    let Some(input) = input else { break };
                    match input {
                        PillarInput::SendPeer { to, frame } => {
                            if let Some(l) = links.get(&to) {
                                note_peer_drop(&self.metrics, l.offer(frame));
                            }
                        }
                        PillarInput::BroadcastPeer { frame } => {
                            for l in links.values() {
                                note_peer_drop(&self.metrics, l.offer(frame.clone()));
                            }
                        }
                        PillarInput::ToClient { client, frame } => {
                            to_client(&shared, client, frame);
                        }
                        PillarInput::ToClients(frames) => {
                            for (client, frame) in frames {
                                to_client(&shared, client, frame);
                            }
                        }
                        PillarInput::AdoptClient(stream, pending) => {
                            tokio::task::spawn_local(serve_client(shared.clone(), stream, pending));
                        }
                    }
                }
            }
        }
        // A hosted core sees the shutdown too: let it end its round, so its
        // store is closed cleanly before this thread ends.
        if let Some(task) = core {
            return hosted_outcome(task.await, true, HOSTS_CORE);
        }
        Ok(())
    }
}

type CoreTask = tokio::task::JoinHandle<anyhow::Result<()>>;

/// When a hosted task (the core, a lane group) ends (never, if this
/// pillar hosts none).
async fn core_ended(core: &mut Option<CoreTask>) -> Result<anyhow::Result<()>, tokio::task::JoinError> {
    match core {
        Some(task) => task.await,
        None => std::future::pending().await,
    }
}

const HOSTS_CORE: &str = "the protocol core it hosts";
const HOSTS_GROUP: &str = "its lane group (the consensus of its lanes)";

/// The pillar's own outcome once the core or lane group it hosts (`what`)
/// has ended: its error or panic is the pillar's (fatal: `fatal::spawn`
/// stops the replica and names the pillar), and so is one that stopped
/// outside a shutdown.
fn hosted_outcome(
    ended: Result<anyhow::Result<()>, tokio::task::JoinError>,
    stopping: bool,
    what: &str,
) -> anyhow::Result<()> {
    match ended {
        Ok(Ok(())) if stopping => Ok(()),
        Ok(Ok(())) => anyhow::bail!("{what} stopped unexpectedly"),
        Ok(Err(e)) => Err(e.context(format!("{what} failed"))),
        // An error, not a resumed panic: unwinding would skip `run`'s
        // bounded runtime shutdown.
        Err(e) if e.is_panic() => anyhow::bail!(
            "{what} panicked: {}",
            crate::fatal::panic_message(e.into_panic().as_ref())
        ),
        Err(e) => anyhow::bail!("{what} was cancelled: {e}"),
    }
}

/// Pillars check pre-prepares ahead of the core except in `rcc`, and every
/// prepare on arrival only where the machine has a core for each of the
/// replica's threads and one to spare (the pillars, the core, the outbox
/// stage, the executor, the store): eager checks cost more signatures in
/// all and pay only in parallel (`PreCheckPolicy` says what was measured).
/// A pillar that hosts the core checks nothing ahead of it: the core runs
/// on the same thread, so a check "ahead" is only extra work there.
/// `CHORUS_PRE_CHECK=0|1` and `CHORUS_EAGER_PREPARES=0|1` override this
/// for measurements.
fn pre_check_policy(config: &ClusterConfig, hosts_core: bool) -> chorus_order::pre_check::PreCheckPolicy {
    let flag = |name: &str| match std::env::var(name).as_deref() {
        Ok("1") => Some(true),
        Ok("0") => Some(false),
        _ => None,
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = config.params.pillars as usize + 4;
    let measured = config.params.mode != chorus_core::OrderingMode::Rcc && !hosts_core;
    let pre_prepares = flag("CHORUS_PRE_CHECK").unwrap_or(measured);
    let eager_prepares = pre_prepares && flag("CHORUS_EAGER_PREPARES").unwrap_or(measured && cores > threads);
    chorus_order::pre_check::PreCheckPolicy {
        pre_prepares,
        eager_prepares,
    }
}

/// Queue a frame on the newest connection of `client` (dropped and counted
/// when its queue is full; the client retransmits).
fn to_client(shared: &Shared, client: ClientId, frame: Bytes) {
    let clients = shared.clients.borrow();
    if let Some((_, tx, _)) = clients.get(&client).and_then(|conns| conns.last()) {
        match tx.offer(frame) {
            Offer::Queued => {}
            Offer::FullBytes => shared.metrics.drop_frame("client-queue-bytes"),
            Offer::FullFrames => shared.metrics.drop_frame("client-queue-full"),
        }
    }
}

/// Count a frame a peer link's queue dropped, by the bound it hit.
fn note_peer_drop(metrics: &Metrics, offer: Offer) {
    match offer {
        Offer::Queued => {}
        Offer::FullBytes => metrics.drop_frame("peer-link-queue-bytes"),
        Offer::FullFrames => metrics.drop_frame("peer-link-queue-full"),
    }
}

/// Keep one authenticated outbound connection to `peer`'s pillar alive and
/// write queued frames to it. Frames queued while disconnected wait in the
/// bounded queue; PBFT's status exchange retransmits anything lost.
async fn peer_link(shared: Rc<Shared>, peer: ReplicaId, mut rx: FrameQueueRx) {
    let Some(info) = shared.config.replica(peer).cloned() else {
        return;
    };
    let Some(expected) = Expected::replica_pillar(&shared.config, peer, shared.index as u32) else {
        return;
    };
    let my_role = PeerRole::Replica {
        id: shared.me,
        pillar: shared.index as u32,
    };
    let addr = format!("{}:{}", info.host, info.peer_base_port + shared.index as u16);
    let mut backoff = BACKOFF_MIN_MS;
    loop {
        let conn = async {
            let stream = tokio::net::TcpStream::connect(&addr)
                .await
                .map_err(chorus_net::NetError::from)?;
            let _ = stream.set_nodelay(true);
            chorus_net::connect(
                stream,
                &shared.identity,
                my_role,
                &expected,
                &shared.net,
                &shared.counters,
            )
            .await
        };
        let (_role, _reader, mut writer) = match tokio::time::timeout(Duration::from_secs(5), conn).await {
            Ok(Ok(c)) => c,
            _ => {
                // Jitter from the connection attempt count keeps replicas from
                // reconnecting in lock-step without unseeded randomness.
                tokio::time::sleep(Duration::from_millis(backoff + (shared.index as u64 * 7) % 13)).await;
                backoff = (backoff * 2).min(BACKOFF_MAX_MS);
                continue;
            }
        };
        backoff = BACKOFF_MIN_MS;
        shared.metrics.peer_connections.inc();
        'conn: while let Some(frame) = rx.recv().await {
            if writer.feed(&frame).await.is_err() {
                break 'conn;
            }
            // Coalesce whatever else is queued into one flush.
            while let Some(more) = rx.try_recv() {
                if writer.feed(&more).await.is_err() {
                    break 'conn;
                }
            }
            if writer.flush().await.is_err() {
                break 'conn;
            }
        }
        shared.metrics.peer_connections.dec();
        if rx.is_closed() {
            return;
        }
    }
}

async fn accept_peers(shared: Rc<Shared>, listener: tokio::net::TcpListener, gate: Arc<Gate>) {
    loop {
        // Only configured replica hosts, within the peer budget: a stranger
        // is closed at once, before any read.
        let (stream, pending) = crate::client_accept::accept_gated(&listener, &gate, &shared.metrics).await;
        tokio::task::spawn_local(serve_peer(shared.clone(), stream, pending));
    }
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum Port {
    Peer,
    Client,
}

/// The accepting side of the handshake. The cheap part (hello, cookie,
/// proof of key possession) runs for anyone the gate admitted; the
/// public-key part only for a role that belongs on this port, within its
/// source's rate and the port's own budget (replicas have reserved slots).
/// A refusal or failure is counted under a reason.
async fn authenticate(
    shared: &Shared,
    stream: tokio::net::TcpStream,
    pending: Pending,
    port: Port,
) -> Option<(PeerRole, chorus_net::FrameReader, chorus_net::FrameWriter)> {
    let failed = match port {
        Port::Peer => "peer-handshake-failed",
        Port::Client => "client-handshake-failed",
    };
    // Replica links take the frame limit derived from the configuration
    // (NEW-VIEWs grow with n and the window); client links keep the
    // configured one, so a client cannot make a replica buffer such a frame.
    let limits = match port {
        Port::Peer => &shared.net,
        Port::Client => &shared.client_net,
    };
    let pre = match shared
        .responder
        .pre_authenticate(stream, limits, &shared.counters)
        .await
    {
        Ok(p) => p,
        Err(e) => {
            shared.metrics.drop_frame(failed);
            tracing::debug!(error = %e, kind = failed, "handshake failed");
            return None;
        }
    };
    let role = pre.role();
    let budget = match (port, role) {
        (Port::Peer, PeerRole::Replica { id, pillar })
            if pillar as usize == shared.index && id != shared.me =>
        {
            shared.peer_slots.get(&id)
        }
        (Port::Client, PeerRole::Client { .. }) => Some(&shared.client_handshakes),
        _ => None,
    };
    let Some(budget) = budget else {
        shared.metrics.drop_frame(match port {
            Port::Peer => "peer-wrong-role",
            Port::Client => "client-wrong-role",
        });
        tracing::debug!(role = %role, "refused a role that does not belong on this port");
        return None;
    };
    if !pending.allow_handshake() {
        shared.metrics.drop_frame("handshake-rate-limited");
        return None;
    }
    let Ok(_permit) = budget.try_acquire() else {
        shared.metrics.drop_frame("handshakes-saturated");
        return None;
    };
    match pre.complete(&shared.responder, limits, &shared.counters).await {
        Ok(c) => Some(c),
        Err(e) => {
            shared.metrics.drop_frame(failed);
            tracing::debug!(error = %e, kind = failed, "handshake failed");
            None
        }
    }
}

/// Register a new inbound connection of `peer`; evicts the oldest beyond
/// `PEER_CONNS_MAX`. Returns its id and eviction signal.
fn register_peer(shared: &Shared, peer: ReplicaId) -> (u64, Rc<tokio::sync::Notify>) {
    let id = {
        let mut n = shared.next_conn.borrow_mut();
        *n += 1;
        *n
    };
    let evicted = Rc::new(tokio::sync::Notify::new());
    let mut peers = shared.peers.borrow_mut();
    let conns = peers.entry(peer).or_default();
    while conns.len() >= PEER_CONNS_MAX {
        let (_, old) = conns.remove(0);
        old.notify_one();
        shared.metrics.drop_frame("peer-conn-evicted");
    }
    conns.push((id, evicted.clone()));
    debug_assert!(conns.len() <= PEER_CONNS_MAX);
    (id, evicted)
}

fn unregister_peer(shared: &Shared, peer: ReplicaId, id: u64) {
    let mut peers = shared.peers.borrow_mut();
    if let Some(conns) = peers.get_mut(&peer) {
        conns.retain(|(c, _)| *c != id);
        if conns.is_empty() {
            peers.remove(&peer);
        }
    }
}

/// Read frames from another replica's pillar and hand them to the core.
async fn serve_peer(shared: Rc<Shared>, stream: tokio::net::TcpStream, pending: Pending) {
    let Some((role, reader, _writer)) = authenticate(&shared, stream, pending, Port::Peer).await else {
        return;
    };
    let Some(from) = role.replica() else {
        return;
    };
    let (conn_id, evicted) = register_peer(&shared, from);
    read_peer(&shared, from, reader, &evicted).await;
    unregister_peer(&shared, from, conn_id);
}

async fn read_peer(
    shared: &Shared,
    from: ReplicaId,
    reader: chorus_net::FrameReader,
    evicted: &tokio::sync::Notify,
) {
    let mut burst = Burst::new(shared.lane_groups.len());
    read_peer_frames(shared, from, reader, evicted, &mut burst).await;
    // What was read before the connection ended is still handed on.
    burst.flush_unless(false, shared).await;
}

async fn read_peer_frames(
    shared: &Shared,
    from: ReplicaId,
    mut reader: chorus_net::FrameReader,
    evicted: &tokio::sync::Notify,
    burst: &mut Burst,
) {
    let lanes = shared.config.lanes() as usize;
    let pillars = shared.config.params.pillars as usize;
    loop {
        if !burst.flush_unless(reader.has_buffered_frame(), shared).await {
            return;
        }
        // `next` is cancel-safe: a partly read frame stays in its buffer.
        let next = tokio::select! {
            biased;
            _ = evicted.notified() => return,
            next = tokio::time::timeout(PEER_IDLE, reader.next()) => next,
        };
        let Ok(next) = next else {
            shared.metrics.drop_frame("peer-idle-timeout");
            return;
        };
        let frame = match next {
            Ok(Some(f)) => f,
            Ok(None) => return,
            Err(e) => {
                shared.metrics.drop_frame("peer-frame-error");
                tracing::debug!(error = %e, peer = %from, "closing peer connection");
                return;
            }
        };
        let msg: ReplicaMsg = match decode(&frame, &shared.limits) {
            Ok(m) => m,
            Err(e) => {
                shared.metrics.drop_frame("peer-decode-error");
                tracing::debug!(error = %e, peer = %from, "undecodable peer frame");
                continue;
            }
        };
        // COP: lane l only travels on pillar l mod P.
        if msg.lane().is_some_and(|l| l.index() >= lanes) || msg.pillar(pillars) != shared.index {
            shared.metrics.drop_frame("peer-wrong-pillar");
            continue;
        }
        shared
            .metrics
            .messages_in
            .get_or_create(&crate::metrics::KindLabel {
                kind: msg.kind().into(),
            })
            .inc();
        // Lanes on their pillars: this pillar's lane group checks and
        // orders its lanes' messages itself, on this thread (COP §4).
        if msg.lane().is_some() && !shared.lane_groups.is_empty() {
            burst.push_group(shared.index, PieceInput::Peer { from, msg });
            continue;
        }
        // Copied out: the status is not held while signatures are checked.
        let lane_now = msg
            .lane()
            .and_then(|l| chorus_order::pre_check::LaneNow::from_status(&shared.core_status.borrow(), l));
        let pre = shared
            .pre_checker
            .borrow_mut()
            .check(&shared.config, lane_now, from, &msg);
        if !pre.is_empty() {
            shared.metrics.signatures_pre_verified.inc_by(pre.len() as u64);
        }
        burst.push(CoreInput::Peer { from, msg, pre });
    }
}

/// Inputs decoded from one read burst: frames already in the read buffer
/// are decoded and checked first, then handed on in one message per
/// receiver, the core or a lane group (one wake-up of its thread instead
/// of one per frame).
struct Burst {
    items: Vec<CoreInput>,
    /// Per lane group (`PillarThread::lane_groups`; empty unless split).
    groups: Vec<Vec<PieceInput>>,
}

/// Inputs handed on at once at most.
const BURST_MAX: usize = 64;

impl Burst {
    fn new(groups: usize) -> Burst {
        Burst {
            items: Vec::new(),
            groups: (0..groups).map(|_| Vec::new()).collect(),
        }
    }

    fn push(&mut self, input: CoreInput) {
        self.items.push(input);
    }

    fn push_group(&mut self, g: usize, input: PieceInput) {
        self.groups[g].push(input);
    }

    /// Send what was collected, unless more frames are buffered and the burst
    /// is not full yet. `false` when the core or a group is gone.
    async fn flush_unless(&mut self, more_buffered: bool, shared: &Shared) -> bool {
        let len = self.items.len() + self.groups.iter().map(Vec::len).sum::<usize>();
        if len == 0 || (more_buffered && len < BURST_MAX) {
            return true;
        }
        if !self.items.is_empty() {
            let input = if self.items.len() == 1 {
                self.items.pop().expect("one item")
            } else {
                CoreInput::Many(std::mem::take(&mut self.items))
            };
            if shared.core.send(input).await.is_err() {
                return false;
            }
        }
        for (g, items) in self.groups.iter_mut().enumerate() {
            if items.is_empty() {
                continue;
            }
            let input = if items.len() == 1 {
                items.pop().expect("one item")
            } else {
                PieceInput::Many(std::mem::take(items))
            };
            if shared.lane_groups[g].send(input).await.is_err() {
                return false;
            }
        }
        true
    }
}

async fn serve_client(shared: Rc<Shared>, stream: std::net::TcpStream, pending: Pending) {
    let _ = stream.set_nonblocking(true);
    let Ok(stream) = tokio::net::TcpStream::from_std(stream) else {
        return;
    };
    let Some((role, mut reader, mut writer)) = authenticate(&shared, stream, pending, Port::Client).await
    else {
        return;
    };
    let PeerRole::Client { id: client } = role else {
        shared.metrics.drop_frame("client-wrong-role");
        return;
    };
    let Some(client_pk) = shared.config.client(client).map(|c| c.identity) else {
        return;
    };
    let key = shared.identity.pairwise_key(&client_pk);
    // Requests must be authenticated for this cluster (`chorus_core::domain`).
    let tag = chorus_core::ClusterTag::of(&shared.config);
    let conn_id = {
        let mut n = shared.next_conn.borrow_mut();
        *n += 1;
        *n
    };
    let (tx, mut rx) = frame_queue(CLIENT_QUEUE, CLIENT_QUEUE_BYTES);
    let evicted = Rc::new(tokio::sync::Notify::new());
    {
        let mut clients = shared.clients.borrow_mut();
        let conns = clients.entry(client).or_default();
        while conns.len() >= CLIENT_CONNS_MAX {
            let (_, _, old) = conns.remove(0);
            old.notify_one();
            shared.metrics.drop_frame("client-conn-evicted");
        }
        conns.push((conn_id, tx, evicted.clone()));
    }
    shared.metrics.client_connections.inc();
    let _ = shared.exec.try_send(ExecInput::ClientAt {
        client,
        pillar: shared.index,
    });
    let writer_task = tokio::task::spawn_local(async move {
        while let Some(frame) = rx.recv().await {
            if writer.feed(&frame).await.is_err() {
                return;
            }
            while let Some(more) = rx.try_recv() {
                if writer.feed(&more).await.is_err() {
                    return;
                }
            }
            if writer.flush().await.is_err() {
                return;
            }
        }
    });
    let mut seen = chorus_core::seq_window::SeqWindow::default();
    let mut burst = Burst::new(shared.lane_groups.len());
    loop {
        if !burst.flush_unless(reader.has_buffered_frame(), &shared).await {
            break;
        }
        // `next` is cancel-safe: a partly read frame stays in its buffer.
        let next = tokio::select! {
            biased;
            _ = evicted.notified() => break,
            next = reader.next() => next,
        };
        let frame = match next {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                shared.metrics.drop_frame("client-frame-error");
                tracing::debug!(error = %e, %client, "closing client connection");
                break;
            }
        };
        let msg: ClientMsg = match decode(&frame, &shared.limits) {
            Ok(m) => m,
            Err(e) => {
                shared.metrics.drop_frame("client-decode-error");
                tracing::debug!(error = %e, %client, "undecodable client frame");
                break;
            }
        };
        let (msg, resend) = match msg {
            ClientMsg::Resend(req) => (ClientMsg::Request(req), true),
            other => (other, false),
        };
        match msg {
            ClientMsg::Request(req) => {
                shared.metrics.requests_received.inc();
                // The channel proves who is talking: a client may only submit its own requests.
                if req.client != client {
                    shared.metrics.reject("client-id-mismatch");
                    continue;
                }
                // The core admits requests without checking again
                // (`Replica::handle_verified_request`): this is the check.
                if !req.verify(&tag, shared.me, &key, &client_pk) {
                    shared.metrics.reject("bad-authenticator");
                    continue;
                }
                if req.flags & flags::READ_ONLY != 0 {
                    if shared
                        .exec
                        .try_send(ExecInput::ReadOnly { request: req })
                        .is_err()
                    {
                        shared.metrics.reject("exec-queue-full");
                    }
                } else {
                    let first = seen.insert(req.seq.0);
                    if first {
                        shared.metrics.latency.admitted(client, req.seq);
                    }
                    if resend || !first {
                        // A retransmission: every replica answers it in full from
                        // its reply cache, so a faulty designated replica cannot
                        // stall the client (PBFT §4.1), or when it executes it.
                        if shared
                            .exec
                            .try_send(ExecInput::Retransmit {
                                client,
                                seq: req.seq,
                                digest: req.digest(),
                            })
                            .is_err()
                        {
                            // The client resends again (its back-off doubles).
                            shared.metrics.drop_frame("exec-queue-full-resend");
                        }
                    }
                    if shared.lane_groups.is_empty() {
                        burst.push(CoreInput::Request(req));
                    } else {
                        // Its lane's group admits it, on that lane's pillar
                        // (`chorus_order::request_lane`): in cop the owner
                        // lane's, this pillar since the client was handed
                        // here (`client_accept.rs`, docs/lane-split.md step
                        // E); in sarek its entry partition's, any pillar.
                        let lane =
                            chorus_order::request_lane(&shared.config, shared.predictor.as_ref(), &req);
                        let g = lane.index() % shared.lane_groups.len();
                        if g != shared.index {
                            shared.metrics.requests_to_other_pillars.inc();
                        }
                        burst.push_group(g, PieceInput::Request(req));
                    }
                }
            }
            ClientMsg::StatusQuery => {
                let _ = shared.exec.try_send(ExecInput::StatusQuery { client });
            }
            // PBFT §4.1: a leader-first client learns the views here, at the
            // cost of a copy of the core's last published status (≤ 100 ms
            // old; ≤ 200 ms with the lanes on their pillars, whose own
            // statuses the core merges), not of a status report with its
            // state digest.
            ClientMsg::ViewQuery => {
                shared.metrics.view_queries.inc();
                let views = shared.core_status.borrow().views.clone();
                to_client(&shared, client, Bytes::from(encode(&ClientMsg::Views(views))));
            }
            ClientMsg::Reply(_) | ClientMsg::StatusReport(_) | ClientMsg::Views(_) | ClientMsg::Resend(_) => {
                shared.metrics.drop_frame("client-sent-reply");
            }
        }
    }
    // Verified requests read before the connection ended are still handed on.
    burst.flush_unless(false, &shared).await;
    writer_task.abort();
    shared.metrics.client_connections.dec();
    let mut clients = shared.clients.borrow_mut();
    if let Some(conns) = clients.get_mut(&client) {
        conns.retain(|(c, _, _)| *c != conn_id);
        if conns.is_empty() {
            clients.remove(&client);
        }
    }
    drop(clients);
    let _ = shared.exec.try_send(ExecInput::ClientGone {
        client,
        pillar: shared.index,
    });
}
