//! Requests a client resent before this replica executed them
//! (`exec_thread.rs`): when a `FEW_REPLIES` request is resent, its client
//! waits for every replica, so a replica that was not designated to reply
//! must reply when it executes it, not only if it had executed it already.

use chorus_core::{ClientId, RequestSeq};
use std::collections::{HashMap, VecDeque};

/// Entries kept; the oldest go first (a client flooding resends of seqs
/// that never execute can only evict entries, and an evicted request's
/// client resends again, which records it again).
pub const RESENT_MAX: usize = 65_536;

type Key = (ClientId, RequestSeq);

#[derive(Default)]
pub struct Resent {
    /// Each key with the insertion that recorded it.
    live: HashMap<Key, u64>,
    /// Insertions, oldest first; one whose key was taken (or recorded again
    /// later) is skipped when it reaches the front.
    order: VecDeque<(Key, u64)>,
    next: u64,
}

impl Resent {
    pub fn insert(&mut self, client: ClientId, seq: RequestSeq) {
        let key = (client, seq);
        if self.live.contains_key(&key) {
            return;
        }
        self.next += 1;
        self.live.insert(key, self.next);
        self.order.push_back((key, self.next));
        while self.live.len() > RESENT_MAX || self.order.len() > 2 * RESENT_MAX {
            let Some((old, at)) = self.order.pop_front() else {
                break;
            };
            if self.live.get(&old) == Some(&at) {
                self.live.remove(&old);
            }
        }
    }

    /// Was it resent (and not taken yet)? Forgets it.
    pub fn take(&mut self, client: ClientId, seq: RequestSeq) -> bool {
        !self.live.is_empty() && self.live.remove(&(client, seq)).is_some()
    }

    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_until_taken_and_stays_bounded() {
        let mut r = Resent::default();
        r.insert(ClientId(1), RequestSeq(5));
        r.insert(ClientId(1), RequestSeq(5));
        assert_eq!(r.len(), 1);
        assert!(!r.take(ClientId(1), RequestSeq(6)));
        assert!(r.take(ClientId(1), RequestSeq(5)));
        assert!(!r.take(ClientId(1), RequestSeq(5)));
        for s in 0..(RESENT_MAX as u64 + 10) {
            r.insert(ClientId(2), RequestSeq(s));
        }
        assert_eq!(r.len(), RESENT_MAX);
        assert!(!r.take(ClientId(2), RequestSeq(0)), "the oldest went first");
        assert!(r.take(ClientId(2), RequestSeq(RESENT_MAX as u64 + 9)));
    }
}
