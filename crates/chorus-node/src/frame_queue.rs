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

/// Bytes a replica's outbound peer queues are sized for together: each link
/// gets an equal share, but at least `PEER_QUEUE_MIN_BYTES`, so with many
/// peers × pillars the total is links × 4 MiB (n = 100, 4 pillars: ~1.5
/// GiB), and each queue may overshoot its share by one frame.
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

/// A queue of at most `max_frames` frames that takes a frame while it holds
/// less than `max_bytes`: it overshoots by at most one frame, so every frame
/// the codec admits (a NEW-VIEW grows with n² × window, past any share) gets
/// in as soon as the queue is below its bound, not only when it is empty
/// (review: behind a busy link's small frames that could take for ever).
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

/// What became of an offered frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Offer {
    Queued,
    /// Dropped: the queue holds its bytes' worth.
    FullBytes,
    /// Dropped: the queue holds its frames' worth (or its reader is gone).
    FullFrames,
}

impl Offer {
    pub fn queued(self) -> bool {
        self == Offer::Queued
    }
}

impl FrameQueueTx {
    /// Queue `frame` unless a bound is reached (the newest frame is dropped).
    pub fn offer(&self, frame: Bytes) -> Offer {
        let queued = self.queued.get();
        if queued >= self.max_bytes {
            return Offer::FullBytes;
        }
        let len = frame.len();
        if self.tx.try_send(frame).is_err() {
            return Offer::FullFrames;
        }
        self.queued.set(queued + len);
        Offer::Queued
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
    fn takes_frames_while_below_the_byte_bound() {
        let (tx, mut rx) = frame_queue(100, 1_000);
        assert_eq!(tx.offer(frame(600)), Offer::Queued);
        assert_eq!(
            tx.offer(frame(600)),
            Offer::Queued,
            "below the bound: overshoots by one frame"
        );
        assert_eq!(tx.offer(frame(1)), Offer::FullBytes);
        assert_eq!(tx.queued_bytes(), 1_200);
        assert_eq!(rx.try_recv().map(|f| f.len()), Some(600));
        assert_eq!(tx.queued_bytes(), 600);
        assert_eq!(tx.offer(frame(1)), Offer::Queued);
    }

    #[test]
    fn drops_past_the_frame_bound_without_counting_its_bytes() {
        let (tx, mut rx) = frame_queue(2, 1 << 20);
        assert!(tx.offer(frame(10)).queued());
        assert!(tx.offer(frame(10)).queued());
        assert_eq!(tx.offer(frame(10)), Offer::FullFrames);
        assert_eq!(tx.queued_bytes(), 20);
        while rx.try_recv().is_some() {}
        assert_eq!(tx.queued_bytes(), 0);
    }

    #[test]
    fn a_frame_larger_than_the_bound_gets_in_behind_small_ones() {
        let (tx, mut rx) = frame_queue(100, 1_000);
        assert!(tx.offer(frame(10)).queued());
        assert!(
            tx.offer(frame(5_000)).queued(),
            "a NEW-VIEW larger than the share still goes"
        );
        assert_eq!(tx.offer(frame(1)), Offer::FullBytes);
        assert_eq!(rx.try_recv().map(|f| f.len()), Some(10));
        assert_eq!(rx.try_recv().map(|f| f.len()), Some(5_000));
        assert!(tx.offer(frame(1)).queued());
    }

    #[test]
    fn a_dead_peers_queue_stops_growing_at_its_share() {
        // A leader's link to a crashed backup: pre-prepares of ~100 KB
        // offered for ever, nothing taken.
        let share = bytes_per_link(3);
        let (tx, _rx) = frame_queue(8_192, share);
        for _ in 0..8_192 {
            tx.offer(frame(100_000));
        }
        assert!(
            tx.queued_bytes() < share + 100_000,
            "{} ≥ {share} + a frame",
            tx.queued_bytes()
        );
        assert!(tx.queued_bytes() >= share);
    }

    #[test]
    fn shares_split_the_budget_down_to_the_floor() {
        assert_eq!(bytes_per_link(4), PEER_QUEUES_BYTES / 4);
        assert_eq!(bytes_per_link(0), PEER_QUEUES_BYTES);
        assert_eq!(bytes_per_link(10_000), PEER_QUEUE_MIN_BYTES);
    }
}
