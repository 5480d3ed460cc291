//! Transport limits.

use chorus_core::ClusterConfig;
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
}

impl NetLimits {
    pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
    pub const DEFAULT_MAX_BUFFERED_FRAMES: usize = 4096;
    pub const DEFAULT_HELLO_TIMEOUT: Duration = Duration::from_millis(500);

    pub fn from_config(c: &ClusterConfig) -> NetLimits {
        NetLimits {
            max_frame_bytes: c.params.max_frame_bytes as usize,
            handshake_timeout: Self::DEFAULT_HANDSHAKE_TIMEOUT,
            hello_timeout: Self::DEFAULT_HELLO_TIMEOUT,
            max_buffered_frames: Self::DEFAULT_MAX_BUFFERED_FRAMES,
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
        }
    }
}
