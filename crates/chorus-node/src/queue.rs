//! A bounded multi-producer, single-consumer queue for the executor's input
//! that blocks by parking on a condition variable.
//!
//! Why not `crossbeam_channel`: its blocking `recv` spins and then calls
//! `sched_yield` several times before it parks. The executor waits on its
//! queue thousands of times a second, and on a machine with fewer cores than
//! busy threads every `sched_yield` hands the core to another thread: it was
//! the most frequent system call of a replica under load (profile in
//! docs/performance.md).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

struct State<T> {
    items: VecDeque<T>,
    senders: usize,
    receiver_alive: bool,
    /// Set by a `Poker`: the receiver should wake up and look around even
    /// though no item came (results of the parallel executor are ready).
    poked: bool,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    /// Signalled when an item arrives or the last sender leaves.
    not_empty: Condvar,
    /// Signalled when an item leaves or the receiver goes away.
    not_full: Condvar,
    cap: usize,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A panic while holding the lock leaves the queue itself consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RecvTimeoutError {
    Timeout,
    Disconnected,
}

/// A queue holding at most `cap` items (`cap >= 1`).
pub fn bounded<T>(cap: usize) -> (Sender<T>, Receiver<T>) {
    assert!(cap >= 1, "a queue needs room for one item");
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            items: VecDeque::new(),
            senders: 1,
            receiver_alive: true,
            poked: false,
        }),
        not_empty: Condvar::new(),
        not_full: Condvar::new(),
        cap,
    });
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared },
    )
}

impl<T> Sender<T> {
    /// Waits while the queue is full. `Err` gives the item back when the
    /// receiver is gone.
    pub fn send(&self, item: T) -> Result<(), T> {
        let mut st = self.shared.lock();
        loop {
            if !st.receiver_alive {
                return Err(item);
            }
            if st.items.len() < self.shared.cap {
                st.items.push_back(item);
                drop(st);
                self.shared.not_empty.notify_one();
                return Ok(());
            }
            st = self.shared.not_full.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Whether the receiver still exists.
    pub fn receiver_alive(&self) -> bool {
        self.shared.lock().receiver_alive
    }

    /// `Err` gives the item back when the queue is full or the receiver gone.
    pub fn try_send(&self, item: T) -> Result<(), T> {
        let mut st = self.shared.lock();
        if !st.receiver_alive || st.items.len() >= self.shared.cap {
            return Err(item);
        }
        st.items.push_back(item);
        drop(st);
        self.shared.not_empty.notify_one();
        Ok(())
    }
}

impl<T> Sender<T> {
    /// A handle that wakes the receiver without sending an item; it does
    /// not count as a sender (the queue still disconnects without senders).
    pub fn poker(&self) -> Poker<T> {
        Poker {
            shared: self.shared.clone(),
        }
    }
}

/// Wakes a waiting receiver: its `recv_timeout` returns `Timeout` early.
pub struct Poker<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Poker<T> {
    pub fn poke(&self) {
        let mut st = self.shared.lock();
        if st.poked {
            return;
        }
        st.poked = true;
        drop(st);
        self.shared.not_empty.notify_one();
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        Sender {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let last = {
            let mut st = self.shared.lock();
            st.senders -= 1;
            st.senders == 0
        };
        if last {
            self.shared.not_empty.notify_all();
        }
    }
}

impl<T> Receiver<T> {
    /// The next item, waiting at most `timeout` (less when poked). Items
    /// still queued are delivered after the last sender left; then
    /// `Disconnected`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        let mut st = self.shared.lock();
        if st.items.is_empty() && st.senders > 0 && !st.poked {
            st = self
                .shared
                .not_empty
                .wait_timeout_while(st, timeout, |s| s.items.is_empty() && s.senders > 0 && !s.poked)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        st.poked = false;
        match st.items.pop_front() {
            Some(item) => {
                drop(st);
                self.shared.not_full.notify_one();
                Ok(item)
            }
            None if st.senders == 0 => Err(RecvTimeoutError::Disconnected),
            None => Err(RecvTimeoutError::Timeout),
        }
    }
}

impl<T> Receiver<T> {
    /// Move up to `max` items that are queued now into `out`, without
    /// waiting; how many were moved.
    pub fn drain_ready(&self, out: &mut Vec<T>, max: usize) -> usize {
        let mut st = self.shared.lock();
        let take = st.items.len().min(max);
        out.extend(st.items.drain(..take));
        drop(st);
        if take > 0 {
            self.shared.not_full.notify_all();
        }
        take
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.shared.lock().receiver_alive = false;
        self.shared.not_full.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_bounded_and_disconnects() {
        let (tx, rx) = bounded(2);
        tx.send(1).unwrap();
        tx.try_send(2).unwrap();
        assert_eq!(tx.try_send(3), Err(3));
        let mut got = Vec::new();
        assert_eq!(rx.drain_ready(&mut got, 1), 1, "at most max");
        assert_eq!(got, vec![1]);
        tx.try_send(3).unwrap();
        assert_eq!(rx.drain_ready(&mut got, 8), 2, "what is queued, no wait");
        assert_eq!(got, vec![1, 2, 3]);
        assert_eq!(rx.drain_ready(&mut got, 8), 0);
        tx.send(1).unwrap();
        tx.try_send(2).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_millis(1)), Ok(1));
        assert_eq!(rx.recv_timeout(Duration::from_millis(1)), Ok(2));
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(1)),
            Err(RecvTimeoutError::Timeout)
        );
        let tx2 = tx.clone();
        drop(tx);
        tx2.send(4).unwrap();
        drop(tx2);
        assert_eq!(rx.recv_timeout(Duration::from_millis(1)), Ok(4));
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(1)),
            Err(RecvTimeoutError::Disconnected)
        );
    }

    #[test]
    fn a_poke_wakes_the_receiver_without_an_item_and_is_not_a_sender() {
        let (tx, rx) = bounded::<u8>(1);
        let poker = tx.poker();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            poker.poke();
            poker
        });
        let started = std::time::Instant::now();
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(30)),
            Err(RecvTimeoutError::Timeout)
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the poke woke the receiver"
        );
        let poker = t.join().unwrap();
        poker.poke();
        poker.poke();
        // One pending poke, consumed by one receive.
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(30)),
            Err(RecvTimeoutError::Timeout)
        );
        drop(tx);
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(1)),
            Err(RecvTimeoutError::Disconnected)
        );
        drop(poker);
    }

    #[test]
    fn a_blocked_sender_resumes_when_the_receiver_takes_an_item() {
        let (tx, rx) = bounded(1);
        tx.send(0u32).unwrap();
        let t = std::thread::spawn(move || {
            for i in 1..100 {
                tx.send(i).unwrap();
            }
        });
        let mut got = Vec::new();
        while got.len() < 100 {
            match rx.recv_timeout(Duration::from_secs(5)) {
                Ok(v) => got.push(v),
                Err(e) => panic!("{e:?}"),
            }
        }
        t.join().unwrap();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        let (tx, rx) = bounded::<u8>(1);
        drop(rx);
        assert_eq!(tx.send(7), Err(7));
    }
}
