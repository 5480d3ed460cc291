//! Prometheus metrics of a replica, served as text on `metrics_port`.

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

/// Every counter a replica exports. Cheap to clone (all `Arc` inside).
#[derive(Clone, Default)]
pub struct Metrics {
    pub requests_received: Counter,
    pub requests_rejected: Family<ReasonLabel, Counter>,
    pub messages_in: Family<KindLabel, Counter>,
    pub messages_out: Counter,
    pub frames_dropped: Family<ReasonLabel, Counter>,
    pub delivered_batches: Counter,
    pub executed_requests: Counter,
    pub replies_sent: Counter,
    pub persisted_records: Counter,
    pub next_delivery: Gauge,
    pub stable_checkpoint: Gauge,
    /// Checkpoints whose stable certificate disagreed with our state digest.
    pub state_divergences: Gauge,
    pub client_connections: Gauge,
    pub peer_connections: Gauge,
}

impl Metrics {
    pub fn registry(&self) -> Registry {
        let mut r = Registry::with_prefix("chorus");
        r.register(
            "requests_received",
            "client requests received",
            self.requests_received.clone(),
        );
        r.register(
            "requests_rejected",
            "client requests rejected, by reason",
            self.requests_rejected.clone(),
        );
        r.register(
            "messages_in",
            "replica messages received, by kind",
            self.messages_in.clone(),
        );
        r.register("messages_out", "replica messages sent", self.messages_out.clone());
        r.register(
            "frames_dropped",
            "frames dropped, by reason",
            self.frames_dropped.clone(),
        );
        r.register(
            "delivered_batches",
            "batches delivered in order",
            self.delivered_batches.clone(),
        );
        r.register(
            "executed_requests",
            "requests executed",
            self.executed_requests.clone(),
        );
        r.register(
            "replies_sent",
            "replies sent to clients",
            self.replies_sent.clone(),
        );
        r.register(
            "persisted_records",
            "records written to storage",
            self.persisted_records.clone(),
        );
        r.register(
            "next_delivery",
            "next global position to deliver",
            self.next_delivery.clone(),
        );
        r.register(
            "stable_checkpoint",
            "last stable checkpoint position",
            self.stable_checkpoint.clone(),
        );
        r.register(
            "state_divergences",
            "checkpoints whose stable certificate disagreed with this replica's state digest",
            self.state_divergences.clone(),
        );
        r.register(
            "client_connections",
            "open client connections",
            self.client_connections.clone(),
        );
        r.register(
            "peer_connections",
            "open replica connections",
            self.peer_connections.clone(),
        );
        r
    }

    pub fn reject(&self, reason: &str) {
        self.requests_rejected
            .get_or_create(&ReasonLabel {
                reason: reason.into(),
            })
            .inc();
    }

    pub fn drop_frame(&self, reason: &str) {
        self.frames_dropped
            .get_or_create(&ReasonLabel {
                reason: reason.into(),
            })
            .inc();
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry());
        out
    }
}

/// Connections the metrics endpoint serves at once; more are closed at once.
pub const METRICS_CONNS_MAX: usize = 8;
/// Longest a metrics connection may take, request and response together.
const METRICS_CONN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Serve `GET /metrics` (any path) on `host:port` until the runtime stops.
/// Bounded (issue 16 finding 6): at most `METRICS_CONNS_MAX` connections at
/// once (others are closed unanswered), each cut off after 2 s, requests read
/// up to 8 KiB. `host` is the node's `metrics_host` (loopback by default).
pub async fn serve(metrics: Arc<Metrics>, host: String, port: u16) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind((host.as_str(), port)).await?;
    serve_on(metrics, listener).await
}

pub async fn serve_on(metrics: Arc<Metrics>, listener: tokio::net::TcpListener) -> std::io::Result<()> {
    let slots = Arc::new(tokio::sync::Semaphore::new(METRICS_CONNS_MAX));
    loop {
        let Ok((mut sock, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            metrics.drop_frame("metrics-connections-full");
            continue;
        };
        let m = metrics.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _ = tokio::time::timeout(METRICS_CONN_TIMEOUT, async {
                let mut buf = [0u8; 8192];
                let _ = sock.read(&mut buf).await;
                let body = m.render();
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(body.as_bytes()).await;
            })
            .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 16 finding 6: idle connections cannot pile up on the endpoint.
    #[tokio::test]
    async fn metrics_endpoint_bounds_its_connections() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let m = Arc::new(Metrics::default());
        tokio::spawn(serve_on(m.clone(), l));
        let mut idle = Vec::new();
        for _ in 0..METRICS_CONNS_MAX {
            idle.push(tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap());
        }
        // One more is closed unanswered while the slots are held.
        let mut extra = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        extra.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), extra.read_to_end(&mut out)).await;
        assert!(out.is_empty(), "served beyond the bound");
        assert!(m.render().contains("metrics-connections-full"));
        // Idle ones are cut off, after which the endpoint answers again.
        tokio::time::sleep(METRICS_CONN_TIMEOUT + std::time::Duration::from_millis(300)).await;
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
        drop(idle);
    }
}
