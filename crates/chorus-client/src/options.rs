//! Client tuning knobs. Every wait, retry and queue is bounded here.

use chorus_net::Backoff;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientOptions {
    /// Requests one client may have outstanding; `invoke` waits beyond this.
    pub max_in_flight: usize,
    /// An invocation fails with `ClientError::Timeout` after this long
    /// (measured from when it got an in-flight slot; includes a read-only fallback).
    pub request_timeout: Duration,
    /// First retransmission after this long without an accepted result…
    pub retransmit_initial: Duration,
    /// …doubling up to this.
    pub retransmit_max: Duration,
    /// When enough replicas sent matching digests but the full result is
    /// missing, retransmit after this grace instead of at the regular timer.
    pub full_reply_grace: Duration,
    /// After f+1 "busy" answers, resend after this long…
    pub busy_backoff_initial: Duration,
    /// …doubling up to this.
    pub busy_backoff_max: Duration,
    /// The read-only fast path waits this long for 2f+1 matching replies
    /// before it falls back to an ordered request.
    pub read_only_timeout: Duration,
    /// `connect` waits this long for a quorum of replica connections and fails
    /// otherwise; `None` returns at once and lets the links connect in the background.
    pub connect_timeout: Option<Duration>,
    /// Back-off between reconnection attempts to one replica.
    pub reconnect: Backoff,
    /// Handshake deadline for each connection.
    pub handshake_timeout: Duration,
    /// Frames queued per replica connection (new frames are dropped beyond it).
    pub link_queue_frames: usize,
    /// First request sequence number. `None`: microseconds since the Unix
    /// epoch, so a restarted client with the same id keeps increasing.
    pub first_seq: Option<u64>,
    /// `rcc` only (RCC §III-E): after this many retransmissions of one
    /// request without a result, ask to move to the next instance with a
    /// SWITCHINSTANCE request (0: never).
    pub switch_after_retransmits: u32,
    /// PBFT §4.1: send a new ordered request to the primary of the client's
    /// lane only, and to every replica when its replies are late
    /// (`chorus_core::first_contact`; `pbft`, `rcc` and `cop` with the fixed rotation, a
    /// no-op elsewhere). On by default: each backup then reads, checks and
    /// admits no copy of a request it gets in the primary's pre-prepare
    /// (peak ×1.5 on dev-2c, docs/decisions.md "Leader-first requests"),
    /// for ~1 s more outage when the primary dies. Off: every request to
    /// every replica.
    pub leader_first: bool,
    /// Ask only f + 1 designated replicas to reply to an ordered request
    /// (`chorus_core::reply_fanout`), while every replica replied within the
    /// last second and no such request had to be retransmitted lately. On
    /// by default: the other replicas skip a reply each and the client reads
    /// and checks half as many (n = 4); a faulty designated replica costs a
    /// retransmission, after which everyone replies for a cooling-off
    /// period. Off: every replica replies (PBFT §4.1).
    pub few_replies: bool,
    /// Requests digest with SHA-256 (`chorus_core::flags::DIGEST_SHA256`),
    /// 2.5× faster than BLAKE3 for a 512-byte request on CPUs with SHA
    /// extensions (x86-64 since AMD Zen and Intel Ice Lake, ARMv8). Turn it
    /// off where the replicas' and the client's CPUs lack them: BLAKE3 is
    /// then the faster (docs/decisions.md "Request digests with SHA-256").
    pub sha256_digests: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            max_in_flight: 64,
            request_timeout: Duration::from_secs(30),
            retransmit_initial: Duration::from_millis(1000),
            retransmit_max: Duration::from_secs(8),
            full_reply_grace: Duration::from_millis(50),
            busy_backoff_initial: Duration::from_millis(50),
            busy_backoff_max: Duration::from_secs(2),
            read_only_timeout: Duration::from_millis(1000),
            connect_timeout: Some(Duration::from_secs(5)),
            reconnect: Backoff {
                min: Duration::from_millis(50),
                max: Duration::from_secs(2),
            },
            handshake_timeout: Duration::from_secs(5),
            link_queue_frames: 1024,
            first_seq: None,
            switch_after_retransmits: 2,
            leader_first: true,
            few_replies: true,
            sha256_digests: true,
        }
    }
}

impl ClientOptions {
    pub(crate) fn check(&self) -> Result<(), &'static str> {
        let positive = [
            (self.max_in_flight > 0, "max_in_flight must be positive"),
            (self.link_queue_frames > 0, "link_queue_frames must be positive"),
            (
                !self.request_timeout.is_zero(),
                "request_timeout must be positive",
            ),
            (
                !self.retransmit_initial.is_zero(),
                "retransmit_initial must be positive",
            ),
            (
                !self.busy_backoff_initial.is_zero(),
                "busy_backoff_initial must be positive",
            ),
            (
                !self.handshake_timeout.is_zero(),
                "handshake_timeout must be positive",
            ),
            (
                self.retransmit_max >= self.retransmit_initial,
                "retransmit_max < retransmit_initial",
            ),
            (
                self.busy_backoff_max >= self.busy_backoff_initial,
                "busy_backoff_max < busy_backoff_initial",
            ),
            (
                self.max_in_flight <= 1 << 20,
                "max_in_flight is unreasonably large",
            ),
            (
                // A request must live to its first retransmission, or a
                // dead primary is never noticed (`chorus_core::first_contact`).
                !self.leader_first || self.request_timeout > self.retransmit_initial,
                "leader_first needs request_timeout > retransmit_initial",
            ),
        ];
        positive
            .iter()
            .find(|(ok, _)| !ok)
            .map_or(Ok(()), |(_, why)| Err(why))
    }
}
