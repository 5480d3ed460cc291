//! The `/metrics` HTTP endpoint. `prometheus-client` encodes OpenMetrics 1.0
//! text; that is what is served, under its own Content-Type, to a scraper
//! that asks for it (Prometheus does, in its `Accept` header). Anything else
//! (curl, a 0.0.4 parser) gets the same samples in the Prometheus text
//! format 0.0.4 (`to_text_004`) under the 0.0.4 Content-Type. Issue 14: the
//! OpenMetrics body used to go out as 0.0.4, so 0.0.4 parsers saw every
//! counter (`# TYPE x counter` over samples named `x_total`) as untyped.

use crate::metrics::Metrics;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const TEXT_004_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

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
                let request = read_head(&mut sock).await;
                crate::process_stats::sample(&m);
                let body = m.render();
                let (content_type, body) = if wants_openmetrics(&request) {
                    (OPENMETRICS_CONTENT_TYPE, body)
                } else {
                    (TEXT_004_CONTENT_TYPE, to_text_004(&body))
                };
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(body.as_bytes()).await;
            })
            .await;
        });
    }
}

/// Largest request head read; the rest is ignored.
const REQUEST_HEAD_MAX: usize = 8192;

/// The request's head: read until its blank line, end of stream or
/// `REQUEST_HEAD_MAX` bytes (a head may arrive in several segments; its
/// `Accept` header decides the format).
pub async fn read_head(sock: &mut tokio::net::TcpStream) -> String {
    let mut buf = vec![0u8; REQUEST_HEAD_MAX];
    let mut len = 0;
    while len < buf.len() {
        match sock.read(&mut buf[len..]).await {
            Ok(0) | Err(_) => break,
            Ok(n) => len += n,
        }
        if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

/// Does the request's `Accept` header list OpenMetrics text?
fn wants_openmetrics(request: &str) -> bool {
    request.lines().any(|l| {
        l.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("accept") && value.contains("application/openmetrics-text")
        })
    })
}

/// OpenMetrics text as `prometheus-client` writes it, in the 0.0.4 format:
/// a counter family `x` is declared `# TYPE x_total counter` (its samples are
/// named `x_total` in both), `# UNIT` and `# EOF` lines go. Gauges and
/// histograms read the same in both formats.
pub fn to_text_004(openmetrics: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    for l in openmetrics.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            if let Some(name) = rest.strip_suffix(" counter") {
                counters.insert(name.to_string());
            }
        }
    }
    let mut out = String::with_capacity(openmetrics.len() + counters.len() * 16);
    for l in openmetrics.lines() {
        if l == "# EOF" || l.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# TYPE ", "# HELP "]
            .iter()
            .find_map(|p| l.strip_prefix(p).map(|rest| (*p, rest)));
        match meta {
            Some((p, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                if counters.contains(name) {
                    out.push_str(&format!("{p}{name}_total {tail}\n"));
                } else {
                    out.push_str(l);
                    out.push('\n');
                }
            }
            None => {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(port: u16, accept: Option<&str>) -> String {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
        s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{accept}\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    /// Issue 14 item 2: the Content-Type matches the body, and a 0.0.4 body
    /// declares counters under the name their samples carry.
    #[tokio::test]
    async fn content_type_matches_the_format_served() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let m = Arc::new(Metrics::default());
        m.executed_requests.inc_by(7);
        tokio::spawn(serve_on(m.clone(), l));
        let plain = get(port, None).await;
        assert!(
            plain.contains(&format!("Content-Type: {TEXT_004_CONTENT_TYPE}\r\n")),
            "{plain}"
        );
        assert!(
            plain.contains("# TYPE chorus_executed_requests_total counter\n"),
            "{plain}"
        );
        assert!(plain.contains("\nchorus_executed_requests_total 7\n"), "{plain}");
        assert!(!plain.contains("# EOF"));
        let om = get(
            port,
            Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
        )
        .await;
        assert!(
            om.contains(&format!("Content-Type: {OPENMETRICS_CONTENT_TYPE}\r\n")),
            "{om}"
        );
        assert!(om.contains("# TYPE chorus_executed_requests counter\n"), "{om}");
        assert!(om.trim_end().ends_with("# EOF"), "{om}");
    }

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
