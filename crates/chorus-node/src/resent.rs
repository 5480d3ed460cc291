//! Requests a client resent before this replica executed them
//! (`exec_thread.rs`): when a `FEW_REPLIES` request is resent, its client
//! waits for every replica, so a replica that was not designated to reply
//! must reply when it executes it, not only if it had executed it already.

use chorus_core::{ClientId, RequestSeq};
use std::collections::{HashMap, VecDeque};

/// Seqs kept per client, the oldest going first: more than a client's
/// window (`pool_max_per_client`), so a correct client loses none, and a
/// client flooding resends of seqs that never execute evicts only its own.
pub const RESENT_PER_CLIENT: usize = 1_024;

#[derive(Default)]
pub struct Resent {
    by_client: HashMap<ClientId, VecDeque<RequestSeq>>,
}

impl Resent {
    pub fn insert(&mut self, client: ClientId, seq: RequestSeq) {
        let q = self.by_client.entry(client).or_default();
        if q.contains(&seq) {
            return;
        }
        if q.len() >= RESENT_PER_CLIENT {
            q.pop_front();
        }
        q.push_back(seq);
    }

    /// Was it resent (and not taken yet)? Forgets it.
    pub fn take(&mut self, client: ClientId, seq: RequestSeq) -> bool {
        let Some(q) = self.by_client.get_mut(&client) else {
            return false;
        };
        let Some(i) = q.iter().position(|s| *s == seq) else {
            return false;
        };
        q.remove(i);
        if q.is_empty() {
            self.by_client.remove(&client);
        }
        true
    }

    pub fn len(&self) -> usize {
        self.by_client.values().map(VecDeque::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_client.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_until_taken_and_a_flooding_client_evicts_only_its_own() {
        let mut r = Resent::default();
        r.insert(ClientId(1), RequestSeq(5));
        r.insert(ClientId(1), RequestSeq(5));
        assert_eq!(r.len(), 1);
        assert!(!r.take(ClientId(1), RequestSeq(6)));
        r.insert(ClientId(3), RequestSeq(9));
        for s in 0..(RESENT_PER_CLIENT as u64 + 10) {
            r.insert(ClientId(2), RequestSeq(s));
        }
        assert_eq!(r.len(), RESENT_PER_CLIENT + 2);
        assert!(!r.take(ClientId(2), RequestSeq(0)), "its oldest went first");
        assert!(r.take(ClientId(2), RequestSeq(RESENT_PER_CLIENT as u64 + 9)));
        assert!(r.take(ClientId(1), RequestSeq(5)), "another client's mark stays");
        assert!(r.take(ClientId(3), RequestSeq(9)));
        assert!(!r.take(ClientId(1), RequestSeq(5)));
    }
}
