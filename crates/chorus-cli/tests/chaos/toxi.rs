//! Shopify's toxiproxy as the fault-injecting TCP proxy between replicas,
//! driven over its HTTP API on loopback (docs/decisions.md, "Chaos tests on
//! real processes").

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The server binary: `$CHORUS_TOXIPROXY`, else `toxiproxy-server` on `PATH`.
pub fn find_server() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CHORUS_TOXIPROXY") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("toxiproxy-server"))
            .find(|p| p.is_file())
    })
}

pub struct Toxiproxy {
    child: Child,
    api: String,
}

impl Toxiproxy {
    pub fn start(bin: &std::path::Path, log: &std::path::Path, seed: u64) -> Result<Toxiproxy, String> {
        // A free loopback port for the API (the proxies listen in the test subnet).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let log = std::fs::File::create(log).map_err(|e| e.to_string())?;
        let child = Command::new(bin)
            .args([
                "-host",
                "127.0.0.1",
                "-port",
                &port.to_string(),
                "-seed",
                &(seed >> 1).to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", bin.display()))?;
        let t = Toxiproxy {
            child,
            api: format!("127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while t.request("GET", "/version", "").is_err() {
            if Instant::now() > deadline {
                return Err("toxiproxy API did not come up".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(t)
    }

    /// One HTTP/1.1 request with `Connection: close`; the status must be 2xx.
    pub fn request(&self, method: &str, path: &str, body: &str) -> Result<String, String> {
        let mut s = TcpStream::connect(&self.api).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.api,
            body.len()
        )
        .map_err(|e| e.to_string())?;
        let mut resp = String::new();
        s.read_to_string(&mut resp).map_err(|e| e.to_string())?;
        let status = resp.split_whitespace().nth(1).unwrap_or("");
        if status.starts_with('2') {
            Ok(resp.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("").to_string())
        } else {
            Err(format!("toxiproxy {method} {path} {body}: {resp}"))
        }
    }

    pub fn create_proxy(&self, name: &str, listen: &str, upstream: &str) {
        let body =
            serde_json::json!({ "name": name, "listen": listen, "upstream": upstream, "enabled": true });
        self.request("POST", "/proxies", &body.to_string())
            .expect("create proxy");
    }

    /// Add a toxic in both directions (`{name}-up`, `{name}-down`).
    pub fn add_toxic(
        &self,
        proxy: &str,
        name: &str,
        kind: &str,
        toxicity: f64,
        attributes: serde_json::Value,
    ) {
        for (dir, stream) in [("up", "upstream"), ("down", "downstream")] {
            let body = serde_json::json!({
                "name": format!("{name}-{dir}"), "type": kind, "stream": stream,
                "toxicity": toxicity, "attributes": attributes,
            });
            self.request("POST", &format!("/proxies/{proxy}/toxics"), &body.to_string())
                .expect("add toxic");
        }
    }

    pub fn remove_toxic(&self, proxy: &str, name: &str) {
        for dir in ["up", "down"] {
            // Already gone is fine (the proxy may have been reset).
            let _ = self.request("DELETE", &format!("/proxies/{proxy}/toxics/{name}-{dir}"), "");
        }
    }
}

impl Drop for Toxiproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
