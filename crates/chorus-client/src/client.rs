//! The async client.

use crate::auth::RequestAuth;
use crate::cluster_status::ClusterStatus;
use crate::driver::{Command, Driver, Timed};
use crate::error::ClientError;
use crate::options::ClientOptions;
use crate::stats::{ClientStats, Stats};
use bytes::Bytes;
use chorus_core::status_report::StatusReport;
use chorus_core::{ClientId, ClusterConfig, Identity, ReplicaId};
use chorus_net::{spawn_peer_link, Counters, CountersSnapshot, DialFailure, LinkSpec, NetLimits, PeerLink};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Frames from all replicas, queued for the driver.
const INBOUND_QUEUE_FRAMES: usize = 1024;
/// How often `connect` checks whether enough links are up.
const CONNECT_POLL: Duration = Duration::from_millis(5);

/// A Chorus client: sends each request to every replica and returns the result
/// once enough replicas agree on it (DESIGN §4). Cheap to call from many tasks
/// at once (`&self`); at most `max_in_flight` requests are outstanding, further
/// calls wait for a slot. Dropping the client closes its connections.
pub struct Client {
    id: ClientId,
    config: Arc<ClusterConfig>,
    cmds: mpsc::Sender<Command>,
    permits: Arc<Semaphore>,
    max_in_flight: usize,
    links: Arc<Vec<PeerLink>>,
    stats: Arc<Stats>,
    net: Arc<Counters>,
    driver: JoinHandle<()>,
}

impl Client {
    /// Connect to every replica's client port (background reconnection
    /// included). With `opts.connect_timeout = Some(t)`, waits until a quorum
    /// of replicas is connected and fails after `t`. Must run inside a tokio
    /// runtime (current-thread or multi-thread) with time and I/O enabled.
    /// Connect as the client a `client-<i>.toml` from `keygen` describes.
    pub async fn from_file(path: &std::path::Path, opts: ClientOptions) -> Result<Client, ClientError> {
        let setup = crate::files::load_client_file(path).map_err(ClientError::Config)?;
        Client::connect(Arc::new(setup.config), setup.id, setup.identity, opts).await
    }

    pub async fn connect(
        config: Arc<ClusterConfig>,
        id: ClientId,
        identity: Identity,
        opts: ClientOptions,
    ) -> Result<Client, ClientError> {
        opts.check().map_err(ClientError::Options)?;
        // The replicas' client table treats a seq more than
        // `pool_max_per_client` above the client's lowest unexecuted one as
        // moving the window, abandoning the older seqs (`chorus-exec`
        // `ClientTable::admit`). Never exceed it, or our own oldest requests
        // would be dropped unanswered.
        let mut opts = opts;
        opts.max_in_flight = opts
            .max_in_flight
            .min(config.params.pool_max_per_client.max(1) as usize);
        if config.n() == 0 {
            return Err(ClientError::NoReplicas);
        }
        let info = config.client(id).ok_or(ClientError::UnknownClient(id))?;
        if info.identity != identity.public() {
            return Err(ClientError::IdentityMismatch(id));
        }
        let limits = NetLimits {
            max_frame_bytes: config.params.max_frame_bytes as usize,
            handshake_timeout: opts.handshake_timeout,
            hello_timeout: NetLimits::DEFAULT_HELLO_TIMEOUT,
            max_buffered_frames: opts.link_queue_frames,
            max_queued_bytes: NetLimits::DEFAULT_MAX_QUEUED_BYTES,
        };
        let net = Arc::new(Counters::default());
        let me = Arc::new(identity.clone());
        let (in_tx, in_rx) = mpsc::channel(INBOUND_QUEUE_FRAMES);
        let links: Vec<PeerLink> = config
            .replica_ids()
            .map(|r| {
                let mut spec =
                    LinkSpec::client_port(&config, id, r).expect("replica ids come from the config");
                spec.backoff = opts.reconnect;
                spawn_peer_link(spec, me.clone(), limits.clone(), net.clone(), Some(in_tx.clone()))
            })
            .collect();
        let links = Arc::new(links);
        let stats = Arc::new(Stats::default());
        let first_seq = opts.first_seq.unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |d| d.as_micros() as u64)
        });
        let (cmd_tx, cmd_rx) = mpsc::channel(opts.max_in_flight);
        let permits = Arc::new(Semaphore::new(opts.max_in_flight));
        let auth = RequestAuth::new(&config, id, identity).with_sha256_digests(opts.sha256_digests);
        let connect_timeout = opts.connect_timeout;
        let max_in_flight = opts.max_in_flight;
        let driver = Driver::new(
            config.clone(),
            id,
            opts,
            auth,
            links.clone(),
            net.clone(),
            stats.clone(),
            first_seq,
        );
        let driver = tokio::spawn(driver.run(cmd_rx, in_rx));
        let client = Client {
            id,
            config,
            cmds: cmd_tx,
            permits,
            max_in_flight,
            links,
            stats,
            net,
            driver,
        };
        if let Some(wait) = connect_timeout {
            client.wait_connected(wait).await?;
        }
        Ok(client)
    }

    async fn wait_connected(&self, wait: Duration) -> Result<(), ClientError> {
        let needed = self.config.quorum();
        let start = Instant::now();
        loop {
            let connected = self.connected_replicas();
            if connected >= needed {
                return Ok(());
            }
            if start.elapsed() >= wait {
                return Err(self.why_not_connected(connected, needed, wait));
            }
            tokio::time::sleep(CONNECT_POLL).await;
        }
    }

    /// The error for a quorum not reached in time, from why the links failed:
    /// a refused handshake (wrong key, foreign cluster files) and a port
    /// that is no Chorus endpoint are said as such, not as "cluster down".
    fn why_not_connected(&self, connected: usize, needed: usize, waited: Duration) -> ClientError {
        let n = self.config.n();
        let failures: Vec<(ReplicaId, DialFailure)> = self
            .config
            .replica_ids()
            .zip(self.links.iter())
            .filter(|(_, l)| !l.is_connected())
            .filter_map(|(r, l)| l.last_failure().map(|f| (r, f)))
            .collect();
        let refused: Vec<_> = failures
            .iter()
            .filter_map(|(_, f)| match f {
                DialFailure::Refused(why) => Some(*why),
                _ => None,
            })
            .collect();
        if let Some(why) = refused.first() {
            return ClientError::HandshakeRefused {
                refused: refused.len(),
                n,
                reason: why.to_string(),
            };
        }
        if let Some((r, DialFailure::NotChorus(what))) = failures
            .iter()
            .find(|(_, f)| matches!(f, DialFailure::NotChorus(_)))
        {
            let addr = self
                .config
                .replica(*r)
                .map(|i| format!("{}:{}", i.host, i.client_port))
                .unwrap_or_default();
            return ClientError::NotChorus {
                replica: *r,
                addr,
                answered: what.clone(),
            };
        }
        let mut reasons: Vec<String> = failures.iter().map(|(r, f)| format!("{r}: {f}")).collect();
        reasons.truncate(4);
        ClientError::NotConnected {
            connected,
            needed,
            n,
            waited,
            detail: if reasons.is_empty() {
                String::new()
            } else {
                format!(" ({})", reasons.join("; "))
            },
        }
    }

    /// Run an operation through ordering; the result is accepted on f+1
    /// matching replies.
    pub async fn invoke(&self, op: impl Into<Bytes>) -> Result<Bytes, ClientError> {
        self.submit(op.into(), false).await.map(|t| t.result)
    }

    /// Like [`Client::invoke`], also saying when the first replica answered
    /// (it had committed and executed the request) and when the result was
    /// accepted: benchmarks report submit-to-commit and submit-to-reply.
    pub async fn invoke_timed(&self, op: impl Into<Bytes>) -> Result<Timed, ClientError> {
        self.submit(op.into(), false).await
    }

    /// Run a read-only operation on the fast path (2f+1 matching replies, no
    /// ordering); falls back to an ordered request when that fails.
    pub async fn invoke_read_only(&self, op: impl Into<Bytes>) -> Result<Bytes, ClientError> {
        self.submit(op.into(), true).await.map(|t| t.result)
    }

    /// [`Client::invoke_read_only`] with reply times (see [`Client::invoke_timed`]).
    pub async fn invoke_read_only_timed(&self, op: impl Into<Bytes>) -> Result<Timed, ClientError> {
        self.submit(op.into(), true).await
    }

    async fn submit(&self, op: Bytes, read_only: bool) -> Result<Timed, ClientError> {
        let max = self.config.params.max_op_bytes as usize;
        if op.len() > max {
            return Err(ClientError::OpTooLarge { len: op.len(), max });
        }
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ClientError::Closed)?;
        let (tx, rx) = oneshot::channel();
        self.cmds
            .send(Command::Invoke {
                op,
                read_only,
                reply: tx,
                permit,
            })
            .await
            .map_err(|_| ClientError::Closed)?;
        rx.await.map_err(|_| ClientError::Closed)?
    }

    /// Ask one replica for its status line (JSON text), waiting at most `wait`.
    pub async fn status(&self, replica: ReplicaId, wait: Duration) -> Result<String, ClientError> {
        let (tx, rx) = oneshot::channel();
        self.cmds
            .send(Command::Status { replica, reply: tx })
            .await
            .map_err(|_| ClientError::Closed)?;
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(s)) => Ok(s),
            _ => Err(ClientError::StatusUnavailable(replica)),
        }
    }

    /// Ask one replica for its status report, typed (`chorus status` shows
    /// the same report). A report that does not parse is an error naming the
    /// replica: a replica of another version, or a lying one.
    pub async fn replica_status(
        &self,
        replica: ReplicaId,
        wait: Duration,
    ) -> Result<StatusReport, ClientError> {
        let text = self.status(replica, wait).await?;
        parse_status(replica, &text)
    }

    /// Every replica's status report, asked at once and awaited together
    /// for at most `wait`; a replica that did not answer (or answered
    /// garbage) is listed with why.
    pub async fn cluster_status(&self, wait: Duration) -> ClusterStatus {
        let deadline = Instant::now() + wait;
        let mut asks = Vec::with_capacity(self.config.replicas.len());
        for r in &self.config.replicas {
            let (tx, rx) = oneshot::channel();
            let sent = self
                .cmds
                .send(Command::Status {
                    replica: r.id,
                    reply: tx,
                })
                .await
                .is_ok();
            asks.push((r.id, sent.then_some(rx)));
        }
        let mut replicas = Vec::with_capacity(asks.len());
        for (id, rx) in asks {
            let answer = match rx {
                None => Err(ClientError::Closed),
                Some(rx) => match tokio::time::timeout_at(deadline, rx).await {
                    Ok(Ok(text)) => parse_status(id, &text),
                    _ => Err(ClientError::StatusUnavailable(id)),
                },
            };
            replicas.push((id, answer));
        }
        ClusterStatus { replicas }
    }

    pub fn id(&self) -> ClientId {
        self.id
    }

    pub fn config(&self) -> &Arc<ClusterConfig> {
        &self.config
    }

    /// Replicas with a live authenticated connection right now.
    pub fn connected_replicas(&self) -> usize {
        self.links.iter().filter(|l| l.is_connected()).count()
    }

    /// Requests currently in flight.
    pub fn in_flight(&self) -> usize {
        self.max_in_flight - self.permits.available_permits()
    }

    pub fn stats(&self) -> ClientStats {
        self.stats.snapshot()
    }

    /// Transport counters of this client's connections.
    pub fn net_counters(&self) -> CountersSnapshot {
        self.net.snapshot()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // Links stop when their last handle (here and in the driver) is dropped.
        self.driver.abort();
    }
}

fn parse_status(replica: ReplicaId, text: &str) -> Result<StatusReport, ClientError> {
    serde_json::from_str(text).map_err(|e| ClientError::BadStatus {
        replica,
        reason: e.to_string(),
    })
}
