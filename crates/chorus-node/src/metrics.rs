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

/// Serve `GET /metrics` (any path) on `port` until the runtime stops. Bounded:
/// requests larger than 8 KiB are cut off; one connection at a time per task.
pub async fn serve(metrics: Arc<Metrics>, host: String, port: u16) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind((host.as_str(), port)).await?;
    loop {
        let (mut sock, _) = listener.accept().await?;
        let m = metrics.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 8192];
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), sock.read(&mut buf)).await;
            let body = m.render();
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = sock.write_all(head.as_bytes()).await;
            let _ = sock.write_all(body.as_bytes()).await;
        });
    }
}
