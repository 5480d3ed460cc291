//! `chorus dashboard`: a live web page of the cluster (issue 14 item 3). It
//! polls every replica's status over authenticated client connections, keeps
//! a short history (`dash_state`) and serves it (`dash_http`).

use crate::dash_state::DashState;
use crate::status_query::query;
use anyhow::{bail, Context, Result};
use chorus_core::{ClientId, ClusterConfig, Identity};
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A client config file (`client-<i>.toml`), or a cluster directory from
    /// `chorus keygen` (its highest-numbered client file is used).
    #[arg(long)]
    pub config: PathBuf,
    /// Address to serve the page on (loopback by default).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to serve the page on.
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// How often every replica is polled, ms.
    #[arg(long, default_value_t = 1000)]
    pub interval_ms: u64,
}

/// The client file to use: `path` itself, or in a cluster directory the
/// highest-numbered `client-<i>.toml` (the one least likely to be in use by
/// a workload, which starts at client 0).
pub fn client_file(path: &Path) -> Result<PathBuf> {
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    let mut best: Option<(u64, PathBuf)> = None;
    for e in std::fs::read_dir(path).with_context(|| format!("reading {}", path.display()))? {
        let p = e?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if let Some(i) = name
            .strip_prefix("client-")
            .and_then(|r| r.strip_suffix(".toml"))
            .and_then(|i| i.parse::<u64>().ok())
        {
            if best.as_ref().is_none_or(|(b, _)| i > *b) {
                best = Some((i, p));
            }
        }
    }
    match best {
        Some((_, p)) => Ok(p),
        None => bail!(
            "{} holds no client-<i>.toml (is it a `chorus keygen` directory?)",
            path.display()
        ),
    }
}

pub fn run(a: Args) -> Result<()> {
    let file = client_file(&a.config)?;
    let c = chorus_node::node_config::load_client(&file)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind((a.host.as_str(), a.port))
            .await
            .with_context(|| format!("binding {}:{}", a.host, a.port))?;
        let url = format!("http://{}/", listener.local_addr()?);
        let title = format!("client file {}", file.display());
        let n = c.cluster.n();
        start(
            Arc::new(c.cluster),
            c.id,
            c.identity,
            listener,
            title,
            a.interval_ms,
        );
        println!(
            "dashboard: {url}  (polling {n} replicas every {} ms; Ctrl-C stops)",
            a.interval_ms
        );
        tokio::signal::ctrl_c().await?;
        Ok(())
    })
}

/// Start polling and serving on `listener` (inside a tokio runtime).
pub fn start(
    config: Arc<ClusterConfig>,
    id: ClientId,
    identity: Identity,
    listener: tokio::net::TcpListener,
    title: String,
    interval_ms: u64,
) {
    let state = Arc::new(Mutex::new(DashState::new(
        title,
        config.n(),
        config.f(),
        format!("{:?}", config.params.mode).to_lowercase(),
        config.lanes(),
    )));
    tokio::spawn(crate::dash_http::serve(listener, state.clone()));
    tokio::spawn(poll_forever(config, id, identity, state, interval_ms.max(100)));
}

async fn poll_forever(
    config: Arc<ClusterConfig>,
    id: ClientId,
    identity: Identity,
    state: Arc<Mutex<DashState>>,
    interval_ms: u64,
) {
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(interval_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let mut tasks = tokio::task::JoinSet::new();
        for r in config.replica_ids() {
            let (config, identity) = (config.clone(), identity.clone());
            tasks.spawn(async move {
                (
                    r,
                    query(&config, id, &identity, r)
                        .await
                        .map_err(|e| format!("{e:#}")),
                )
            });
        }
        let mut polls: Vec<Result<_, String>> =
            (0..config.n()).map(|_| Err("no answer".to_string())).collect();
        while let Some(Ok((r, p))) = tasks.join_next().await {
            polls[r.index()] = p;
        }
        let now_ms = started.elapsed().as_millis() as u64;
        state.lock().observe(now_ms, polls);
    }
}
