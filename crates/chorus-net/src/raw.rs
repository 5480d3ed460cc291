//! Length-delimited framing: `u32` big-endian length, then that many bytes.
//!
//! Hand-rolled rather than `LengthDelimitedCodec` so that (a) the length
//! limit can be tightened for the handshake and relaxed afterwards on the same
//! buffer (bytes the peer pipelined after its handshake are not lost), and
//! (b) the buffer grows only as bytes actually arrive: a header that announces
//! a large frame does not make us allocate it up front.

use crate::error::NetError;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Length of the frame header.
pub(crate) const HEADER_BYTES: usize = 4;
/// Smallest read we ask the socket for.
const READ_CHUNK_BYTES: usize = 8 * 1024;
/// Largest step the read buffer grows by before the bytes are there.
const GROW_STEP_BYTES: usize = 64 * 1024;
/// An idle write buffer larger than this is released after a flush.
const KEEP_WRITE_BUFFER_BYTES: usize = 1 << 20;

/// Reads whole frames. Cancel-safe: all progress lives in `buf`, so dropping a
/// pending `next()` (e.g. in `tokio::select!`) loses nothing.
pub(crate) struct RawReader<R> {
    rd: R,
    buf: BytesMut,
    max_len: usize,
}

impl<R: AsyncRead + Unpin> RawReader<R> {
    /// `initial` bytes of buffer up front: small while a connection is
    /// unauthenticated, so idle strangers cost little memory.
    pub(crate) fn new(rd: R, max_len: usize, initial: usize) -> Self {
        RawReader {
            rd,
            buf: BytesMut::with_capacity(initial),
            max_len,
        }
    }

    pub(crate) fn set_max_len(&mut self, max_len: usize) {
        self.max_len = max_len;
    }

    /// Whether a whole frame is already buffered (`next` returns it without I/O).
    pub(crate) fn has_frame(&self) -> bool {
        if self.buf.len() < HEADER_BYTES {
            return false;
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        self.buf.len() - HEADER_BYTES >= len
    }

    /// The next frame's body; `None` on EOF at a frame boundary.
    pub(crate) async fn next(&mut self) -> Result<Option<Bytes>, NetError> {
        loop {
            if self.buf.len() >= HEADER_BYTES {
                let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
                if len > self.max_len {
                    return Err(NetError::Oversize {
                        len,
                        max: self.max_len,
                    });
                }
                let have = self.buf.len() - HEADER_BYTES;
                if have >= len {
                    self.buf.advance(HEADER_BYTES);
                    return Ok(Some(self.buf.split_to(len).freeze()));
                }
                self.buf.reserve((len - have).clamp(1, GROW_STEP_BYTES));
            } else {
                self.buf
                    .reserve(READ_CHUNK_BYTES.min(self.max_len + HEADER_BYTES));
            }
            debug_assert!(
                self.buf.capacity() > self.buf.len(),
                "read_buf needs spare capacity"
            );
            if self.rd.read_buf(&mut self.buf).await? == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(NetError::Closed)
                };
            }
        }
    }
}

/// Buffers whole frames and writes them out on `flush`. Cancel-safe in the
/// same way: a frame is appended to `out` synchronously, and `flush` only
/// advances `out` by what the socket accepted.
pub(crate) struct RawWriter<W> {
    wr: W,
    out: BytesMut,
    frames: usize,
}

impl<W: AsyncWrite + Unpin> RawWriter<W> {
    pub(crate) fn new(wr: W) -> Self {
        RawWriter {
            wr,
            out: BytesMut::new(),
            frames: 0,
        }
    }

    /// Append one frame whose body is the concatenation of `parts`.
    pub(crate) fn push(&mut self, parts: &[&[u8]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let len32 = u32::try_from(len).expect("callers bound frames far below 4 GiB");
        self.out.reserve(HEADER_BYTES + len);
        self.out.put_u32(len32);
        for p in parts {
            self.out.put_slice(p);
        }
        self.frames += 1;
    }

    pub(crate) fn buffered_frames(&self) -> usize {
        self.frames
    }

    pub(crate) fn buffered_bytes(&self) -> usize {
        self.out.len()
    }

    pub(crate) async fn flush(&mut self) -> Result<(), NetError> {
        while !self.out.is_empty() {
            let n = self.wr.write(&self.out).await?;
            if n == 0 {
                return Err(NetError::Io(std::io::ErrorKind::WriteZero.into()));
            }
            self.out.advance(n);
        }
        self.frames = 0;
        self.wr.flush().await?;
        if self.out.capacity() > KEEP_WRITE_BUFFER_BYTES {
            self.out = BytesMut::new();
        }
        Ok(())
    }

    pub(crate) async fn shutdown(&mut self) -> Result<(), NetError> {
        self.flush().await?;
        self.wr.shutdown().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn has_frame_tells_whether_next_needs_the_socket() {
        let (a, b) = tokio::io::duplex(1024);
        let mut w = RawWriter::new(a);
        let mut r = RawReader::new(b, 100, 1024);
        assert!(!r.has_frame());
        w.push(&[b"one"]);
        w.push(&[b"two"]);
        w.flush().await.unwrap();
        assert_eq!(&r.next().await.unwrap().unwrap()[..], b"one");
        // Both frames arrived in one read: the second is already buffered.
        assert!(r.has_frame());
        assert_eq!(&r.next().await.unwrap().unwrap()[..], b"two");
        assert!(!r.has_frame());
        // Half a frame is not a frame.
        w.push(&[b"three"]);
        let half = w.out.split_to(5);
        w.wr.write_all(&half).await.unwrap();
        r.rd.read_buf(&mut r.buf).await.unwrap();
        assert!(!r.has_frame());
    }

    #[tokio::test]
    async fn frames_roundtrip_and_limit_is_enforced_before_the_body() {
        let (a, b) = tokio::io::duplex(64);
        let mut w = RawWriter::new(a);
        let mut r = RawReader::new(b, 100, 1024);
        let big = vec![7u8; 100];
        w.push(&[b"he", b"llo"]);
        w.push(&[&big]);
        w.push(&[]);
        let writer = tokio::spawn(async move {
            w.flush().await.unwrap();
            // 101 > limit: only the header is sent; the reader must refuse on it.
            w.push(&[&[0u8; 101]]);
            w.flush().await.ok();
            w
        });
        assert_eq!(&r.next().await.unwrap().unwrap()[..], b"hello");
        assert_eq!(&r.next().await.unwrap().unwrap()[..], &big[..]);
        assert_eq!(r.next().await.unwrap().unwrap().len(), 0);
        assert!(matches!(
            r.next().await,
            Err(NetError::Oversize { len: 101, max: 100 })
        ));
        // The writer may still be blocked on the body nobody reads: close our end.
        drop(r);
        drop(writer.await.unwrap());
    }

    #[tokio::test]
    async fn eof_at_boundary_is_clean_and_mid_frame_is_an_error() {
        let (mut a, b) = tokio::io::duplex(64);
        a.write_all(&[0, 0, 0, 1, 9]).await.unwrap();
        a.write_all(&[0, 0]).await.unwrap();
        drop(a);
        let mut r = RawReader::new(b, 100, 1024);
        assert_eq!(&r.next().await.unwrap().unwrap()[..], &[9]);
        assert!(matches!(r.next().await, Err(NetError::Closed)));

        let (a, b) = tokio::io::duplex(64);
        drop(a);
        let mut r = RawReader::new(b, 100, 1024);
        assert!(r.next().await.unwrap().is_none());
    }
}
