//! Which requests a replica's executor ran in its current life, compactly:
//! per client the executed sequence numbers as disjoint intervals. Clients
//! number their requests densely, so a client costs one interval plus the
//! few its window leaves open, not one entry per request: a run of a
//! million requests at n = 100 kept 100 M entries before (issue 15).

use chorus_core::{ClientId, RequestSeq};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default)]
pub struct ExecutedSet {
    /// Per client: interval start → last (inclusive); disjoint and never
    /// adjacent (adjacent intervals are merged).
    clients: BTreeMap<ClientId, BTreeMap<u64, u64>>,
}

impl ExecutedSet {
    /// Record that `(client, seq)` ran; false if it had run already.
    pub fn insert(&mut self, client: ClientId, seq: RequestSeq) -> bool {
        let q = seq.0;
        let ranges = self.clients.entry(client).or_default();
        let left = ranges.range(..=q).next_back().map(|(&s, &e)| (s, e));
        if left.is_some_and(|(_, last)| q <= last) {
            return false;
        }
        // `q` is above `left`'s last, so `last + 1` cannot overflow.
        let joins_left = left.filter(|&(_, last)| last + 1 == q).map(|(s, _)| s);
        let right = q
            .checked_add(1)
            .and_then(|n| ranges.get(&n).map(|&last| (n, last)));
        let start = joins_left.unwrap_or(q);
        let last = match right {
            Some((n, last)) => {
                ranges.remove(&n);
                last
            }
            None => q,
        };
        ranges.insert(start, last);
        true
    }

    /// The executor started over: it may run everything again.
    pub fn clear(&mut self) {
        self.clients.clear();
    }

    /// Intervals held, all clients together (tests: the memory bound).
    #[cfg(test)]
    pub fn intervals(&self) -> usize {
        self.clients.values().map(BTreeMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_request_runs_once_in_any_order_and_dense_seqs_stay_one_interval() {
        let mut s = ExecutedSet::default();
        let c = ClientId(3);
        for q in [2u64, 4, 1, 3, 7, 5, 6] {
            assert!(s.insert(c, RequestSeq(q)), "first run of {q}");
        }
        assert_eq!(s.intervals(), 1);
        for q in 1..=7 {
            assert!(!s.insert(c, RequestSeq(q)), "second run of {q}");
        }
        assert!(s.insert(c, RequestSeq(9)));
        assert!(s.insert(ClientId(4), RequestSeq(1)), "another client's seq 1");
        assert_eq!(s.intervals(), 3);
        assert!(s.insert(c, RequestSeq(0)));
        assert!(s.insert(c, RequestSeq(u64::MAX)));
        assert!(!s.insert(c, RequestSeq(u64::MAX)));
        assert!(!s.insert(c, RequestSeq(0)));
        s.clear();
        assert!(s.insert(c, RequestSeq(1)));
    }

    #[test]
    fn a_million_dense_requests_keep_one_interval_per_client() {
        let mut s = ExecutedSet::default();
        for c in 0..4 {
            for q in 0..250_000u64 {
                // Completed out of order within a window of 16, as clients do.
                let q = (q & !15) | (15 - (q & 15));
                assert!(s.insert(ClientId(c), RequestSeq(q + 1)));
            }
        }
        assert_eq!(s.intervals(), 4);
    }
}
