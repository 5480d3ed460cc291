//! Transport limits.

use chorus_core::{ClusterConfig, Limits};
use std::time::Duration;

/// Bounds for one connection (TigerStyle: a limit on everything).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetLimits {
    /// Largest payload of one frame (the MAC header comes on top).
    pub max_frame_bytes: usize,
    /// The whole handshake (TCP connect excluded) must finish within this.
    pub handshake_timeout: Duration,
    /// An accepted connection must send its hello, and then its proof of key
    /// possession, each within this: an idle stranger holds a slot this long.
    pub hello_timeout: Duration,
    /// Frames a writer buffers before it flushes on its own, and the queue
    /// capacity of a peer link.
    pub max_buffered_frames: usize,
    /// Bytes below which a peer link's queue takes another frame (so it
    /// overshoots by at most one frame): a link to a peer that is down
    /// holds what was queued for it, and a frame count alone does not bound
    /// that when frames are large.
    pub max_queued_bytes: usize,
}

impl NetLimits {
    pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
    pub const DEFAULT_MAX_BUFFERED_FRAMES: usize = 4096;
    pub const DEFAULT_HELLO_TIMEOUT: Duration = Duration::from_millis(500);
    pub const DEFAULT_MAX_QUEUED_BYTES: usize = 16 << 20;

    /// Limits for replica-to-replica connections: frames as large as the
    /// largest replica message the codec admits for this configuration (a
    /// NEW-VIEW grows with n² × window), never below the configured limit.
    pub fn from_config(c: &ClusterConfig) -> NetLimits {
        NetLimits {
            max_frame_bytes: Limits::from_config(c).max_frame_bytes,
            ..Self::for_clients(c)
        }
    }

    /// Limits for client connections: clients send requests and receive
    /// replies, both bounded by the configured frame limit, so a client never
    /// gets to make a replica buffer a NEW-VIEW-sized frame.
    pub fn for_clients(c: &ClusterConfig) -> NetLimits {
        NetLimits {
            max_frame_bytes: c.params.max_frame_bytes as usize,
            handshake_timeout: Self::DEFAULT_HANDSHAKE_TIMEOUT,
            hello_timeout: Self::DEFAULT_HELLO_TIMEOUT,
            max_buffered_frames: Self::DEFAULT_MAX_BUFFERED_FRAMES,
            max_queued_bytes: Self::DEFAULT_MAX_QUEUED_BYTES,
        }
    }
}

impl Default for NetLimits {
    fn default() -> Self {
        NetLimits {
            max_frame_bytes: chorus_core::ProtocolParams::default().max_frame_bytes as usize,
            handshake_timeout: Self::DEFAULT_HANDSHAKE_TIMEOUT,
            hello_timeout: Self::DEFAULT_HELLO_TIMEOUT,
            max_buffered_frames: Self::DEFAULT_MAX_BUFFERED_FRAMES,
            max_queued_bytes: Self::DEFAULT_MAX_QUEUED_BYTES,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::ProtocolParams;

    #[test]
    fn peer_frames_admit_what_the_codec_admits() {
        for n in [4, 13, 31] {
            let (c, _, _) = ClusterConfig::for_testing(n, 1, ProtocolParams::default(), 1);
            let codec = Limits::from_config(&c);
            let net = NetLimits::from_config(&c);
            assert_eq!(net.max_frame_bytes, codec.max_frame_bytes);
            assert!(net.max_frame_bytes >= NetLimits::for_clients(&c).max_frame_bytes);
        }
        // n = 31 with the default window needs more than the configured 16 MiB.
        let (c, _, _) = ClusterConfig::for_testing(31, 1, ProtocolParams::default(), 1);
        assert!(NetLimits::from_config(&c).max_frame_bytes > c.params.max_frame_bytes as usize);
    }
}
