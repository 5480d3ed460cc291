//! Authenticated frames after the handshake.
//!
//! Wire layout of one frame: `u32 len | u64 counter (BE) | 16-byte MAC | payload`,
//! where `MAC = keyed-BLAKE3(direction key, counter_le || payload)[..16]`.
//! Each direction has its own key and its own counter starting at 0, so a frame
//! replayed, reordered, dropped or reflected back to its sender fails. The counter
//! is also sent in clear so that a frame that authenticates but arrives out of
//! order is reported as a replay rather than as a bad MAC.

use crate::counters::Counters;
use crate::error::NetError;
use crate::raw::{RawReader, RawWriter};
use crate::role::PeerRole;
use bytes::Bytes;
use std::sync::Arc;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

pub(crate) const COUNTER_BYTES: usize = 8;
pub(crate) const MAC_BYTES: usize = 16;
/// What every frame carries on top of its payload.
pub const FRAME_OVERHEAD_BYTES: usize = COUNTER_BYTES + MAC_BYTES;
/// A writer flushes on its own once this much is buffered.
const AUTO_FLUSH_BYTES: usize = 256 * 1024;

fn frame_mac(key: &[u8; 32], counter: u64, payload: &[u8]) -> [u8; MAC_BYTES] {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(&counter.to_le_bytes());
    h.update(payload);
    let mut out = [0u8; MAC_BYTES];
    out.copy_from_slice(&h.finalize().as_bytes()[..MAC_BYTES]);
    out
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// The receiving half of an authenticated connection.
///
/// `next()` is cancel-safe (usable in `tokio::select!`). Read and write from
/// separate tasks or concurrently polled futures: a peer that is itself blocked
/// writing to us only drains its socket if we keep reading.
pub struct FrameReader {
    raw: RawReader<OwnedReadHalf>,
    key: [u8; 32],
    next_counter: u64,
    peer: PeerRole,
    counters: Arc<Counters>,
    failed: bool,
}

impl FrameReader {
    pub(crate) fn new(
        mut raw: RawReader<OwnedReadHalf>,
        key: [u8; 32],
        peer: PeerRole,
        max_frame_bytes: usize,
        counters: Arc<Counters>,
    ) -> Self {
        raw.set_max_len(max_frame_bytes + FRAME_OVERHEAD_BYTES);
        FrameReader {
            raw,
            key,
            next_counter: 0,
            peer,
            counters,
            failed: false,
        }
    }

    /// The authenticated peer.
    pub fn peer(&self) -> PeerRole {
        self.peer
    }

    /// Whether `next` would return a frame (or its error) without waiting
    /// for the socket: lets a reader hand on a burst of frames at once.
    pub fn has_buffered_frame(&self) -> bool {
        !self.failed && self.raw.has_frame()
    }

    /// The next authenticated payload; `Ok(None)` on a clean EOF. Any error is
    /// final (counted once, then `Poisoned`): drop both halves of the connection.
    pub async fn next(&mut self) -> Result<Option<Bytes>, NetError> {
        if self.failed {
            return Err(NetError::Poisoned);
        }
        match self.next_inner().await {
            Err(e) => {
                self.failed = true;
                self.counters.record(&e);
                Err(e)
            }
            ok => ok,
        }
    }

    async fn next_inner(&mut self) -> Result<Option<Bytes>, NetError> {
        let Some(mut frame) = self.raw.next().await? else {
            return Ok(None);
        };
        if frame.len() < FRAME_OVERHEAD_BYTES {
            return Err(NetError::ShortFrame(frame.len()));
        }
        let head = frame.split_to(FRAME_OVERHEAD_BYTES);
        let counter = u64::from_be_bytes(head[..COUNTER_BYTES].try_into().expect("8 bytes"));
        let expect = frame_mac(&self.key, counter, &frame);
        // Authenticate first: an unauthenticated counter is never trusted.
        if !ct_eq(&expect, &head[COUNTER_BYTES..]) {
            return Err(NetError::BadMac);
        }
        if counter != self.next_counter {
            return Err(NetError::Replay {
                expected: self.next_counter,
                got: counter,
            });
        }
        self.next_counter += 1;
        Counters::bump(&self.counters.frames_in);
        Counters::add(&self.counters.bytes_in, frame.len() as u64);
        Ok(Some(frame))
    }
}

/// The sending half of an authenticated connection.
///
/// `feed` buffers a frame, `flush` writes the buffer out, `send` does both.
/// Cancel-safe: a fed frame is either wholly in the buffer or not at all, and an
/// interrupted `flush` resumes where it stopped.
pub struct FrameWriter {
    raw: RawWriter<OwnedWriteHalf>,
    key: [u8; 32],
    next_counter: u64,
    peer: PeerRole,
    max_frame_bytes: usize,
    max_buffered_frames: usize,
    counters: Arc<Counters>,
    failed: bool,
}

impl FrameWriter {
    pub(crate) fn new(
        raw: RawWriter<OwnedWriteHalf>,
        key: [u8; 32],
        peer: PeerRole,
        max_frame_bytes: usize,
        max_buffered_frames: usize,
        counters: Arc<Counters>,
    ) -> Self {
        assert!(
            max_buffered_frames > 0,
            "a writer must be able to buffer one frame"
        );
        FrameWriter {
            raw,
            key,
            next_counter: 0,
            peer,
            max_frame_bytes,
            max_buffered_frames,
            counters,
            failed: false,
        }
    }

    pub fn peer(&self) -> PeerRole {
        self.peer
    }

    /// Buffer one frame; flushes first when the buffer is full. An over-size
    /// payload is refused (counted) without touching the connection, which
    /// stays usable.
    pub async fn feed(&mut self, payload: &[u8]) -> Result<(), NetError> {
        if self.failed {
            return Err(NetError::Poisoned);
        }
        if payload.len() > self.max_frame_bytes {
            let e = NetError::Oversize {
                len: payload.len(),
                max: self.max_frame_bytes,
            };
            self.counters.record(&e);
            return Err(e);
        }
        if self.raw.buffered_frames() >= self.max_buffered_frames
            || self.raw.buffered_bytes() >= AUTO_FLUSH_BYTES
        {
            self.flush().await?;
        }
        let counter = self.next_counter;
        let mac = frame_mac(&self.key, counter, payload);
        self.raw.push(&[&counter.to_be_bytes(), &mac, payload]);
        self.next_counter += 1;
        Counters::bump(&self.counters.frames_out);
        Counters::add(&self.counters.bytes_out, payload.len() as u64);
        Ok(())
    }

    /// `feed` then `flush`.
    pub async fn send(&mut self, payload: &[u8]) -> Result<(), NetError> {
        self.feed(payload).await?;
        self.flush().await
    }

    /// Write every buffered frame to the socket.
    pub async fn flush(&mut self) -> Result<(), NetError> {
        if self.failed {
            return Err(NetError::Poisoned);
        }
        let r = self.raw.flush().await;
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    /// Flush, then close our direction of the connection (the peer reads EOF).
    pub async fn shutdown(&mut self) -> Result<(), NetError> {
        if self.failed {
            return Err(NetError::Poisoned);
        }
        let r = self.raw.shutdown().await;
        self.failed = true;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_binds_key_counter_and_payload() {
        let k1 = [1u8; 32];
        let k2 = [2u8; 32];
        let m = frame_mac(&k1, 0, b"x");
        assert_eq!(m, frame_mac(&k1, 0, b"x"));
        assert_ne!(m, frame_mac(&k2, 0, b"x"));
        assert_ne!(m, frame_mac(&k1, 1, b"x"));
        assert_ne!(m, frame_mac(&k1, 0, b"y"));
        assert!(ct_eq(&m, &frame_mac(&k1, 0, b"x")));
        assert!(!ct_eq(&m, &frame_mac(&k1, 0, b"y")));
        assert!(!ct_eq(&m, &m[..15]));
    }
}
