//! A model executor for `sarek` streams in the cluster harness: it records
//! each lane's delivered batches and, at a checkpoint cut, folds every slot
//! below the cut into the state — the same cut on every replica, whatever
//! order the streams interleaved in (docs/decisions.md "SAREK ordering and
//! checkpoint cuts").

use bytes::Bytes;
use chorus_core::{Batch, Cell, ClientId, Digest, RequestSeq, Seq};
use std::collections::BTreeSet;

type Key = (ClientId, RequestSeq);

#[derive(Clone, Debug, Default)]
pub struct StreamExec {
    /// The last checkpoint cut, as a slot of every lane.
    base: u64,
    chain: Digest,
    below: BTreeSet<Key>,
    /// Per lane, the batches of slots `base..` in order.
    pending: Vec<Vec<(Digest, Vec<Key>)>>,
    /// Every request delivered in any stream (for "all executed" checks).
    pub executed: BTreeSet<Key>,
    /// The lanes each request was delivered in, once per delivery.
    pub ordered_in: std::collections::BTreeMap<Key, Vec<u32>>,
}

impl StreamExec {
    pub fn apply(&mut self, cell: Cell, batch: &Batch, lanes: usize) {
        if self.pending.len() < lanes {
            self.pending.resize(lanes, Vec::new());
        }
        let l = cell.lane.index();
        let expected = self.base + self.pending[l].len() as u64;
        assert_eq!(
            cell.slot.0, expected,
            "stream {l} got slot {:?}, expected {expected}",
            cell.slot
        );
        let keys: Vec<Key> = batch.requests.iter().map(|r| (r.client, r.seq)).collect();
        self.executed.extend(keys.iter().copied());
        for k in &keys {
            self.ordered_in.entry(*k).or_default().push(cell.lane.0);
        }
        self.pending[l].push((batch.digest(), keys));
    }

    pub fn cut(&self, lanes: usize) -> Seq {
        let min = (0..lanes)
            .map(|l| self.base + self.pending.get(l).map_or(0, Vec::len) as u64)
            .min()
            .unwrap_or(self.base);
        Seq(min * lanes as u64)
    }

    /// Fold everything below the cut `seq` into the state; its digest and snapshot.
    pub fn checkpoint(&mut self, seq: Seq, lanes: usize) -> (Digest, Bytes) {
        assert_eq!(self.cut(lanes), seq, "checkpoint asked away from the cut");
        let s = seq.0 / lanes as u64;
        let take = (s - self.base) as usize;
        for lane in self.pending.iter_mut() {
            for (d, keys) in lane.drain(..take) {
                self.chain = Digest::of_parts("stream", &[self.chain.as_bytes(), d.as_bytes()]);
                self.below.extend(keys);
            }
        }
        self.base = s;
        let snap = self.snapshot(seq);
        (Digest::of(&snap), snap)
    }

    fn snapshot(&self, seq: Seq) -> Bytes {
        let mut b = seq.0.to_le_bytes().to_vec();
        b.extend_from_slice(self.chain.as_bytes());
        for (c, q) in &self.below {
            b.extend_from_slice(&c.0.to_le_bytes());
            b.extend_from_slice(&q.0.to_le_bytes());
        }
        Bytes::from(b)
    }

    pub fn restore(bytes: &[u8], lanes: usize) -> Option<StreamExec> {
        if bytes.len() < 40 || !(bytes.len() - 40).is_multiple_of(16) {
            return None;
        }
        let seq = u64::from_le_bytes(bytes[..8].try_into().ok()?);
        let below: BTreeSet<Key> = bytes[40..]
            .chunks(16)
            .map(|c| {
                let client = u64::from_le_bytes(c[..8].try_into().unwrap_or_default());
                let q = u64::from_le_bytes(c[8..].try_into().unwrap_or_default());
                (ClientId(client), RequestSeq(q))
            })
            .collect();
        Some(StreamExec {
            base: seq / lanes as u64,
            chain: Digest(bytes[8..40].try_into().ok()?),
            executed: below.clone(),
            below,
            pending: vec![Vec::new(); lanes],
            ordered_in: Default::default(),
        })
    }

    pub fn digest_of(bytes: &[u8]) -> Digest {
        Digest::of(bytes)
    }
}
