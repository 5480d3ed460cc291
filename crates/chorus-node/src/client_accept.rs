//! Accepting client connections and handing each to the pillar that serves
//! it. COP §4: a pillar owns its clients, so that the normal case of a
//! request (receive, verify, order) never leaves its thread. With the lanes
//! on their pillars (`lane_split.rs`) a client's requests are ordered by its
//! owner lane's group, on pillar `owner_lane(client) mod P`: the connection
//! goes there (docs/lane-split.md step E). Otherwise connections are spread
//! over the pillars in turn.
//!
//! The client is known only from its hello, the first frame it sends; it is
//! read with `peek`, so the bytes stay in the socket for the handshake,
//! which runs in full on the chosen pillar and proves the claim there. A
//! false claim only chooses where the handshake fails.

use crate::channels::PillarInput;
use crate::metrics::Metrics;
use chorus_core::ClusterConfig;
use chorus_net::{peek_hello, Gate, HelloPeek, PeerRole, Pending, HELLO_PEEK_BYTES};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Where accepted client connections go.
pub struct Routing {
    pub pillars: Vec<mpsc::Sender<PillarInput>>,
    pub config: Arc<ClusterConfig>,
    /// Each client to its owner lane's pillar (lanes on their pillars);
    /// otherwise in turn.
    pub affinity: bool,
    /// How long a connection may take to send its hello (the handshake's own
    /// bound: one that sends none would be refused there too).
    pub hello_timeout: Duration,
    pub metrics: Arc<Metrics>,
}

/// Time between peeks while a hello is incomplete (it is one small frame,
/// nearly always in the first segment), doubling up to the last: a
/// connection that trickles its hello must not make pillar 0 poll it
/// every millisecond (the gate admits 1 024 unfinished ones).
const PEEK_RETRY_FIRST: Duration = Duration::from_millis(1);
const PEEK_RETRY_MAX: Duration = Duration::from_millis(64);

pub async fn accept_clients(listener: tokio::net::TcpListener, routing: Routing, gate: Arc<Gate>) {
    let routing = std::rc::Rc::new(routing);
    let mut next = 0usize;
    loop {
        // The gate bounds unfinished connections, those waiting here included.
        let (stream, pending) = accept_gated(&listener, &gate, &routing.metrics).await;
        let in_turn = next % routing.pillars.len();
        next += 1;
        if routing.affinity && routing.pillars.len() > 1 {
            tokio::task::spawn_local(route_by_hello(stream, pending, in_turn, routing.clone()));
        } else {
            hand_over(&routing, stream, pending, in_turn);
        }
    }
}

/// The next connection the gate admits (`Gate::enter`: within the budget
/// of unfinished connections, in total and per source), with its admission;
/// one refused is closed at once, before any read, and counted.
pub async fn accept_gated(
    listener: &tokio::net::TcpListener,
    gate: &Arc<Gate>,
    metrics: &Metrics,
) -> (tokio::net::TcpStream, Pending) {
    loop {
        let Ok((stream, addr)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        match gate.enter(addr.ip()) {
            Ok(pending) => {
                let _ = stream.set_nodelay(true);
                return (stream, pending);
            }
            Err(why) => metrics.drop_frame(why.as_str()),
        }
    }
}

/// The pillar of the client this connection's hello names; one that names
/// no client, or is not a hello, goes to `in_turn`, whose handshake refuses
/// it as before (with a version refusal where that is the reason).
async fn route_by_hello(
    stream: tokio::net::TcpStream,
    pending: Pending,
    in_turn: usize,
    routing: std::rc::Rc<Routing>,
) {
    let pillar = match tokio::time::timeout(routing.hello_timeout, claimed_role(&stream)).await {
        Ok(Some(PeerRole::Client { id })) => routing.config.owner_lane(id).index() % routing.pillars.len(),
        Ok(_) => in_turn,
        Err(_) => {
            // No hello in time: the handshake would refuse it for the same.
            routing.metrics.drop_frame("client-handshake-failed");
            return;
        }
    };
    hand_over(&routing, stream, pending, pillar);
}

/// What the connection's first frame claims (`None`: closed, or not a hello).
async fn claimed_role(stream: &tokio::net::TcpStream) -> Option<PeerRole> {
    let mut buf = vec![0u8; HELLO_PEEK_BYTES];
    let mut retry = PEEK_RETRY_FIRST;
    loop {
        let n = stream.peek(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        match peek_hello(&buf[..n]) {
            HelloPeek::Role(role) => return Some(role),
            HelloPeek::Invalid => return None,
            HelloPeek::NeedMore if n == buf.len() => return None,
            // The rest is on its way: `peek` would return the same bytes at once.
            HelloPeek::NeedMore => {
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(PEEK_RETRY_MAX);
            }
        }
    }
}

fn hand_over(routing: &Routing, stream: tokio::net::TcpStream, pending: Pending, pillar: usize) {
    let Ok(std_stream) = stream.into_std() else {
        return;
    };
    if routing.pillars[pillar]
        .try_send(PillarInput::AdoptClient(std_stream, pending))
        .is_err()
    {
        routing.metrics.drop_frame("client-accept-queue-full");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{ClientId, OrderingMode, ProtocolParams};
    use chorus_net::GateLimits;
    use tokio::io::AsyncWriteExt;

    fn hello_of(client: u64) -> Vec<u8> {
        let hello = chorus_net::recorded_hello(PeerRole::Client { id: ClientId(client) });
        let mut framed = (hello.len() as u32).to_be_bytes().to_vec();
        framed.extend_from_slice(&hello);
        framed
    }

    /// Which pillar each connection reached, in the order they arrive, with
    /// the bytes still to be read on it there.
    async fn route(affinity: bool, sends: Vec<Vec<u8>>) -> Vec<Option<(usize, Vec<u8>)>> {
        let params = ProtocolParams {
            mode: OrderingMode::Cop,
            pillars: 4,
            ..ProtocolParams::default()
        };
        let (config, _, _) = ClusterConfig::for_testing(4, 8, params, 1);
        let mut txs = Vec::new();
        let mut rxs = Vec::new();
        for _ in 0..4 {
            let (tx, rx) = mpsc::channel(16);
            txs.push(tx);
            rxs.push(rx);
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let gate = Gate::new(GateLimits {
            max_pending: 64,
            max_pending_per_source: 64,
            handshakes_per_sec_per_source: 1e6,
            handshake_burst_per_source: 1e6,
            max_sources: 16,
        });
        let routing = Routing {
            pillars: txs,
            config: Arc::new(config),
            affinity,
            hello_timeout: Duration::from_millis(300),
            metrics: Arc::new(Metrics::default()),
        };
        tokio::task::spawn_local(accept_clients(listener, routing, gate));
        let mut reached = Vec::new();
        let mut kept = Vec::new();
        for bytes in sends {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            // Split in two writes: the hello may arrive in pieces.
            let half = bytes.len() / 2;
            s.write_all(&bytes[..half]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
            s.write_all(&bytes[half..]).await.unwrap();
            kept.push(s);
            let arrived = tokio::time::timeout(Duration::from_secs(1), async {
                loop {
                    for (p, rx) in rxs.iter_mut().enumerate() {
                        if let Ok(PillarInput::AdoptClient(mut std_stream, _)) = rx.try_recv() {
                            use std::io::Read;
                            std_stream.set_nonblocking(false).unwrap();
                            std_stream
                                .set_read_timeout(Some(Duration::from_millis(100)))
                                .unwrap();
                            let mut unread = vec![0u8; 1024];
                            let n = std_stream.read(&mut unread).unwrap_or(0);
                            unread.truncate(n);
                            return (p, unread);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
            .await;
            reached.push(arrived.ok());
        }
        reached
    }

    fn run(affinity: bool, sends: Vec<Vec<u8>>) -> Vec<Option<(usize, Vec<u8>)>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, route(affinity, sends))
    }

    /// Each client reaches its owner lane's pillar (cop, 4 lanes: client c
    /// owns lane c mod 4), its hello left in the socket for the handshake;
    /// a connection without a hello goes in turn; one that sends nothing in
    /// time is dropped.
    #[test]
    fn with_the_lanes_on_pillars_a_client_reaches_its_owner_lanes_pillar() {
        let junk = b"GET / HTTP/1.1\r\n\r\n".to_vec();
        let sends = vec![
            hello_of(5),
            hello_of(2),
            hello_of(7),
            hello_of(4),
            junk,
            Vec::new(),
        ];
        let reached = run(true, sends.clone());
        let pillars: Vec<_> = reached.iter().map(|r| r.as_ref().map(|(p, _)| *p)).collect();
        // The fifth connection goes in turn: pillar 4 mod 4.
        assert_eq!(pillars, vec![Some(1), Some(2), Some(3), Some(0), Some(0), None]);
        for (sent, r) in sends.iter().zip(&reached).take(5) {
            assert_eq!(&r.as_ref().unwrap().1, sent, "the pillar reads what was sent");
        }
    }

    #[test]
    fn otherwise_connections_go_to_the_pillars_in_turn() {
        let reached = run(false, vec![hello_of(5), hello_of(5), hello_of(5)]);
        let pillars: Vec<_> = reached.iter().map(|r| r.as_ref().map(|(p, _)| *p)).collect();
        assert_eq!(pillars, vec![Some(0), Some(1), Some(2)]);
    }
}
