//! Connection counters: plain relaxed atomics so every reader, writer and link
//! can bump them without locks. Give each pillar its own `Arc<Counters>` to
//! avoid sharing a cache line across threads, and add up snapshots to report.

use crate::error::NetError;
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {
        /// Live counters (see the field docs for what each one counts).
        #[derive(Debug, Default)]
        pub struct Counters {
            $($(#[$m])* pub $name: AtomicU64,)*
        }

        /// A point-in-time copy of [`Counters`].
        #[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
        pub struct CountersSnapshot {
            $($(#[$m])* pub $name: u64,)*
        }

        impl Counters {
            pub fn snapshot(&self) -> CountersSnapshot {
                CountersSnapshot { $($name: self.$name.load(Ordering::Relaxed),)* }
            }
        }

        impl CountersSnapshot {
            /// Field-wise sum (to aggregate per-pillar counters).
            pub fn add(&self, o: &CountersSnapshot) -> CountersSnapshot {
                CountersSnapshot { $($name: self.$name + o.$name,)* }
            }

            /// `(name, value)` pairs, for metrics exporters.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }
        }
    };
}

counters!(
    /// Authenticated frames received.
    frames_in,
    /// Hellos whose proof of key possession failed (refused before any
    /// public-key work).
    bad_proofs,
    /// Frames handed to the socket buffer.
    frames_out,
    /// Payload bytes received in authenticated frames.
    bytes_in,
    /// Payload bytes sent.
    bytes_out,
    /// Handshakes that completed (both directions).
    handshakes_ok,
    /// Handshakes that failed for any reason (including the ones counted below).
    handshake_failures,
    /// Handshakes that ran out of time.
    handshake_timeouts,
    /// Peers that claimed a role the configuration does not list.
    unknown_peers,
    /// Peers whose handshake signature did not verify (wrong key).
    bad_signatures,
    /// Frames whose MAC did not verify (tampered, or a garbled stream).
    auth_failures,
    /// Correctly MACed frames with the wrong counter (replayed or reordered).
    replays,
    /// Length headers above the limit (refused before reading the body).
    oversize,
    /// Frames too short to carry counter and MAC, or malformed handshake messages.
    malformed,
    /// Payloads that authenticated but did not decode (bumped by the layer above).
    decode_errors,
    /// Outbound frames a peer link dropped because its queue was full.
    link_dropped,
    /// Successful (re)connections made by peer links.
    link_connects,
    /// Failed connection attempts made by peer links (TCP or handshake).
    link_connect_failures,
);

impl Counters {
    pub(crate) fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add(c: &AtomicU64, v: u64) {
        c.fetch_add(v, Ordering::Relaxed);
    }

    /// For the layer above: an authenticated payload failed to decode.
    pub fn record_decode_error(&self) {
        Self::bump(&self.decode_errors);
    }

    /// Count the reason a frame or connection was refused. Called once, where
    /// the error is raised.
    pub(crate) fn record(&self, e: &NetError) {
        let c = match e {
            NetError::Oversize { .. } => &self.oversize,
            NetError::ShortFrame(_)
            | NetError::BadHandshake(_)
            | NetError::VersionMismatch { .. }
            | NetError::NotChorus(_) => &self.malformed,
            NetError::BadMac | NetError::WeakKey => &self.auth_failures,
            NetError::Replay { .. } => &self.replays,
            NetError::UnknownPeer(_) | NetError::UnexpectedPeer { .. } => &self.unknown_peers,
            NetError::BadSignature(_) => &self.bad_signatures,
            NetError::BadProof(_) => &self.bad_proofs,
            NetError::HandshakeTimeout(_) => &self.handshake_timeouts,
            NetError::Io(_) | NetError::Closed | NetError::Poisoned | NetError::Refused(_) => return,
        };
        Self::bump(c);
    }
}
