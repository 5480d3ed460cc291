//! The queue of encoded frames from a pillar to one connection (a peer
//! pillar's, or a client's), bounded in frames *and* bytes.
//!
//! A frame count alone did not bound memory: while a peer is down its link
//! holds what the pillar queued for it, and a leader's frames are mostly
//! pre-prepares of ~100 KB each (a 200-request batch of 512-byte requests).
//! With one backup killed, the leader's resident memory grew by ~60 MB/s to
//! over 1 GiB (8 192 queued frames; BENCHMARKS.md, "a dead peer's queue").
//! Past either bound the newest frame is dropped, as before: PBFT recovers
//! lost messages through retransmission, status exchange and state transfer,
//! and a client resends a request whose reply was dropped (answered from the
//! reply cache). A client that never reads holds at most its share, however
//! large its results.

use bytes::Bytes;
use std::cell::Cell;
use std::rc::Rc;
use tokio::sync::mpsc;

/// Bytes all of a replica's outbound peer queues may hold together; each
/// link gets an equal share, at least `PEER_QUEUE_MIN_BYTES`.
pub const PEER_QUEUES_BYTES: usize = 128 << 20;
/// No link's share is below this (many peers × pillars).
pub const PEER_QUEUE_MIN_BYTES: usize = 4 << 20;

/// Bytes queued towards one client connection: ~10 000 small replies, and a
/// large result always gets through an empty queue.
pub const CLIENT_QUEUE_BYTES: usize = 1 << 20;

/// The byte share of one outbound link among `links` of them.
pub fn bytes_per_link(links: usize) -> usize {
    (PEER_QUEUES_BYTES / links.max(1)).max(PEER_QUEUE_MIN_BYTES)
}

/// The pillar's end: offers frames, never blocks.
pub struct FrameQueueTx {
    tx: mpsc::Sender<Bytes>,
    queued: Rc<Cell<usize>>,
    max_bytes: usize,
}

/// The link task's end: takes frames, releasing their bytes.
pub struct FrameQueueRx {
    rx: mpsc::Receiver<Bytes>,
    queued: Rc<Cell<usize>>,
}

/// A queue of at most `max_frames` frames and `max_bytes` bytes. A frame
/// larger than `max_bytes` is still taken into an empty queue, so every
/// frame the codec admits (a NEW-VIEW grows with n² × window) can be sent.
pub fn frame_queue(max_frames: usize, max_bytes: usize) -> (FrameQueueTx, FrameQueueRx) {
    let (tx, rx) = mpsc::channel(max_frames);
    let queued = Rc::new(Cell::new(0));
    (
        FrameQueueTx {
            tx,
            queued: queued.clone(),
            max_bytes,
        },
        FrameQueueRx { rx, queued },
    )
}

impl FrameQueueTx {
    /// Queue `frame`; `false` = dropped (either bound reached, or the link is gone).
    pub fn offer(&self, frame: Bytes) -> bool {
        let queued = self.queued.get();
        let len = frame.len();
        if queued > 0 && queued.saturating_add(len) > self.max_bytes {
            return false;
        }
        if self.tx.try_send(frame).is_err() {
            return false;
        }
        self.queued.set(queued + len);
        true
    }

    /// Bytes waiting in the queue.
    pub fn queued_bytes(&self) -> usize {
        self.queued.get()
    }
}

impl FrameQueueRx {
    pub async fn recv(&mut self) -> Option<Bytes> {
        let frame = self.rx.recv().await?;
        self.release(&frame);
        Some(frame)
    }

    pub fn try_recv(&mut self) -> Option<Bytes> {
        let frame = self.rx.try_recv().ok()?;
        self.release(&frame);
        Some(frame)
    }

    pub fn is_closed(&self) -> bool {
        self.rx.is_closed()
    }

    fn release(&self, frame: &Bytes) {
        let queued = self.queued.get();
        debug_assert!(queued >= frame.len(), "released more bytes than were queued");
        self.queued.set(queued.saturating_sub(frame.len()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(len: usize) -> Bytes {
        Bytes::from(vec![7u8; len])
    }

    #[test]
    fn drops_the_newest_frame_past_the_byte_bound() {
        let (tx, mut rx) = frame_queue(100, 1_000);
        assert!(tx.offer(frame(600)));
        assert!(tx.offer(frame(400)), "exactly at the bound");
        assert!(!tx.offer(frame(1)), "one byte over");
        assert_eq!(tx.queued_bytes(), 1_000);
        assert_eq!(rx.try_recv().map(|f| f.len()), Some(600));
        assert_eq!(tx.queued_bytes(), 400);
        assert!(tx.offer(frame(600)));
        assert!(!tx.offer(frame(1)));
    }

    #[test]
    fn drops_past_the_frame_bound_without_counting_its_bytes() {
        let (tx, mut rx) = frame_queue(2, 1 << 20);
        assert!(tx.offer(frame(10)));
        assert!(tx.offer(frame(10)));
        assert!(!tx.offer(frame(10)));
        assert_eq!(tx.queued_bytes(), 20);
        while rx.try_recv().is_some() {}
        assert_eq!(tx.queued_bytes(), 0);
    }

    #[test]
    fn an_empty_queue_takes_a_frame_larger_than_the_bound() {
        let (tx, mut rx) = frame_queue(100, 1_000);
        assert!(
            tx.offer(frame(5_000)),
            "a NEW-VIEW larger than the share still goes"
        );
        assert!(!tx.offer(frame(1)));
        assert_eq!(rx.try_recv().map(|f| f.len()), Some(5_000));
        assert!(tx.offer(frame(1)));
    }

    #[test]
    fn a_dead_peers_queue_stops_growing_at_its_share() {
        // A leader's link to a crashed backup: pre-prepares of ~100 KB
        // offered for ever, nothing taken.
        let share = bytes_per_link(3);
        let (tx, _rx) = frame_queue(8_192, share);
        let mut taken = 0;
        for _ in 0..8_192 {
            if tx.offer(frame(100_000)) {
                taken += 1;
            }
        }
        assert!(tx.queued_bytes() <= share, "{} > {share}", tx.queued_bytes());
        assert_eq!(taken, share / 100_000);
    }

    #[test]
    fn shares_add_up_to_the_budget_until_the_floor() {
        assert_eq!(bytes_per_link(4), PEER_QUEUES_BYTES / 4);
        assert_eq!(bytes_per_link(0), PEER_QUEUES_BYTES);
        assert_eq!(bytes_per_link(10_000), PEER_QUEUE_MIN_BYTES);
    }
}
