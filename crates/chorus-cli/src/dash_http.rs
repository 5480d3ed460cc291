//! The dashboard's HTTP side: `GET /` is the page (one inline HTML file, no
//! external resources), `GET /api/state` the current `DashState` as JSON.
//! Three GET routes need no web framework: a bounded accept loop like the
//! replica's `/metrics` endpoint (docs/decisions.md, "Dashboard").

use crate::dash_state::DashState;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

pub const PAGE: &str = include_str!("dash_page.html");
/// Connections served at once; more are closed unanswered.
const CONNS_MAX: usize = 32;
const CONN_TIMEOUT: Duration = Duration::from_secs(5);

pub async fn serve(listener: tokio::net::TcpListener, state: Arc<Mutex<DashState>>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(CONNS_MAX));
    loop {
        let Ok((mut sock, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _ = tokio::time::timeout(CONN_TIMEOUT, async {
                let request = chorus_node::metrics_http::read_head(&mut sock).await;
                let (status, ctype, body) = route(&request, &state);
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(body.as_bytes()).await;
            })
            .await;
        });
    }
}

fn route(request: &str, state: &Mutex<DashState>) -> (&'static str, &'static str, String) {
    let mut words = request.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    if method != "GET" {
        return ("405 Method Not Allowed", "text/plain", "GET only\n".into());
    }
    match path.split('?').next().unwrap_or("") {
        "/" | "/index.html" => ("200 OK", "text/html; charset=utf-8", PAGE.to_string()),
        "/api/state" => {
            let body = serde_json::to_string(&state.lock().snapshot()).unwrap_or_else(|_| "{}".into());
            ("200 OK", "application/json", body)
        }
        _ => ("404 Not Found", "text/plain", "not found\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_a_page_without_external_resources() {
        let s = Mutex::new(DashState::new("t".into(), 4, 1, "cop".into(), 2));
        let (st, ct, body) = route("GET /api/state HTTP/1.1\r\n\r\n", &s);
        assert_eq!((st, ct), ("200 OK", "application/json"));
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["replicas"].as_array().unwrap().len(), 4);
        let (st, ct, page) = route("GET / HTTP/1.1\r\n\r\n", &s);
        assert_eq!((st, ct), ("200 OK", "text/html; charset=utf-8"));
        // Everything inline: no scripts, styles, fonts or images fetched
        // from anywhere (the page polls only its own /api/state).
        for external in ["http://", "https://", "src=", "<link", "@import", "url("] {
            assert!(!page.contains(external), "page refers to {external}");
        }
        assert_eq!(route("GET /nope HTTP/1.1\r\n\r\n", &s).0, "404 Not Found");
        assert_eq!(route("POST / HTTP/1.1\r\n\r\n", &s).0, "405 Method Not Allowed");
    }
}
