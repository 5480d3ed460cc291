//! Messages that arrived early (future view, above the window) wait here,
//! bounded per peer so a Byzantine peer cannot fill memory (TigerStyle).

use chorus_core::{ReplicaId, ReplicaMsg};
use std::collections::VecDeque;

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub struct FutureBuffer {
    queues: Vec<VecDeque<ReplicaMsg>>,
    cap_per_peer: usize,
}

impl FutureBuffer {
    pub fn new(n: usize, cap_per_peer: usize) -> FutureBuffer {
        FutureBuffer {
            queues: (0..n).map(|_| VecDeque::new()).collect(),
            cap_per_peer,
        }
    }

    /// Park `msg`; `false` (and the message is dropped) when `from`'s share is
    /// full. The oldest messages are kept: they are the ones needed first.
    pub fn push(&mut self, from: ReplicaId, msg: ReplicaMsg) -> bool {
        match self.queues.get_mut(from.index()) {
            Some(q) if q.len() < self.cap_per_peer => {
                q.push_back(msg);
                true
            }
            _ => false,
        }
    }

    /// Everything parked, peer by peer, oldest first.
    pub fn drain(&mut self) -> Vec<(ReplicaId, ReplicaMsg)> {
        let mut all = Vec::new();
        for (i, q) in self.queues.iter_mut().enumerate() {
            all.extend(q.drain(..).map(|m| (ReplicaId(i as u32), m)));
        }
        all
    }

    pub fn len(&self) -> usize {
        self.queues.iter().map(|q| q.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{Seq, StateRequest};

    fn m(i: u64) -> ReplicaMsg {
        ReplicaMsg::StateRequest(StateRequest { min_seq: Seq(i) })
    }

    #[test]
    fn bounded_per_peer_and_drained_in_order() {
        let mut b = FutureBuffer::new(2, 2);
        assert!(b.push(ReplicaId(0), m(1)));
        assert!(b.push(ReplicaId(0), m(2)));
        assert!(!b.push(ReplicaId(0), m(3)));
        assert!(b.push(ReplicaId(1), m(4)));
        assert!(!b.push(ReplicaId(7), m(5)));
        let d = b.drain();
        assert_eq!(
            d,
            vec![(ReplicaId(0), m(1)), (ReplicaId(0), m(2)), (ReplicaId(1), m(4))]
        );
        assert!(b.is_empty());
    }
}
