//! Shared helpers for the chorus-net integration tests.
#![allow(dead_code)]

use chorus_core::{ClusterConfig, Identity, ProtocolParams};
use chorus_net::{Counters, NetLimits};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct Cluster {
    pub config: ClusterConfig,
    pub replicas: Vec<Identity>,
    pub clients: Vec<Identity>,
}

pub fn cluster() -> Cluster {
    let (config, replicas, clients) = ClusterConfig::for_testing(4, 2, ProtocolParams::default(), 7);
    Cluster {
        config,
        replicas,
        clients,
    }
}

pub fn limits() -> NetLimits {
    NetLimits {
        max_frame_bytes: 4096,
        handshake_timeout: Duration::from_secs(2),
        hello_timeout: Duration::from_millis(500),
        max_buffered_frames: 64,
        max_queued_bytes: 1 << 20,
    }
}

pub fn counters() -> Arc<Counters> {
    Arc::new(Counters::default())
}

pub async fn listener() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

pub async fn dial(port: u16) -> TcpStream {
    TcpStream::connect(("127.0.0.1", port)).await.unwrap()
}

/// Forwards a client→server byte stream frame by frame (every message, the
/// handshake included, is `u32 len | body`), letting `mutate` rewrite, drop,
/// duplicate or reorder frames; server→client bytes are copied unchanged.
pub async fn spawn_proxy<F>(server_port: u16, mut mutate: F) -> u16
where
    F: FnMut(usize, Vec<u8>) -> Vec<Vec<u8>> + Send + 'static,
{
    let (l, port) = listener().await;
    tokio::spawn(async move {
        let (client, _) = l.accept().await.unwrap();
        let server = dial(server_port).await;
        let (mut cr, mut cw) = client.into_split();
        let (mut sr, mut sw) = server.into_split();
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut sr, &mut cw).await;
        });
        let mut index = 0;
        loop {
            let mut head = [0u8; 4];
            if cr.read_exact(&mut head).await.is_err() {
                return;
            }
            let len = u32::from_be_bytes(head) as usize;
            let mut frame = head.to_vec();
            frame.resize(4 + len, 0);
            if cr.read_exact(&mut frame[4..]).await.is_err() {
                return;
            }
            for out in mutate(index, frame) {
                if sw.write_all(&out).await.is_err() {
                    return;
                }
            }
            index += 1;
        }
    });
    port
}
