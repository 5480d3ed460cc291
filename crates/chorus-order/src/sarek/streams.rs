//! Per-partition delivery streams (SAREK §IV-B: "each execution instance
//! takes its partition's ordered requests in order"). Replaces the global
//! merger in `sarek` mode: lane `k`'s slots are delivered in slot order,
//! exactly once, without gaps, independently of every other lane — a stalled
//! lane holds back only its own stream.
//!
//! The *cut* `min_k next_k · K` is the global position every stream has
//! passed; checkpoints are taken at cuts (docs/decisions.md "SAREK ordering
//! and checkpoint cuts"), so `Seq` keeps meaning "every cell below".

use chorus_core::{Batch, Cell, LaneId, Seq, Slot};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Streams {
    /// Per lane, the next slot to deliver.
    next: Vec<Slot>,
    decided: BTreeMap<(Slot, LaneId), Arc<Batch>>,
}

impl Streams {
    pub fn new(lanes: u32) -> Streams {
        assert!(lanes >= 1);
        Streams {
            next: vec![Slot(0); lanes as usize],
            decided: BTreeMap::new(),
        }
    }

    fn lanes(&self) -> u64 {
        self.next.len() as u64
    }

    /// The global position below which every stream has delivered.
    pub fn cut(&self) -> Seq {
        let min = self.next.iter().min().copied().unwrap_or(Slot(0));
        Seq(min.0 * self.lanes())
    }

    /// Every lane's next slot, by lane.
    pub fn positions(&self) -> &[Slot] {
        &self.next
    }

    pub fn next_of(&self, lane: LaneId) -> Slot {
        self.next.get(lane.index()).copied().unwrap_or(Slot(0))
    }

    pub fn waiting(&self) -> usize {
        self.decided.len()
    }

    /// A decided cell; below its stream's position (or of no lane) it is ignored.
    pub fn insert(&mut self, cell: Cell, batch: Arc<Batch>) {
        let Some(&next) = self.next.get(cell.lane.index()) else {
            return;
        };
        if cell.slot < next {
            return;
        }
        match self.decided.get(&(cell.slot, cell.lane)) {
            // A lane decides a slot once; two batches here would be a fork.
            Some(old) => debug_assert_eq!(old.digest(), batch.digest(), "two decisions for {cell:?}"),
            None => {
                self.decided.insert((cell.slot, cell.lane), batch);
            }
        }
    }

    /// The next deliverable cell of any stream, lowest slot first (so the
    /// cut moves as early as it can; any order would be correct).
    pub fn pop(&mut self) -> Option<(Cell, Arc<Batch>)> {
        let key = self
            .decided
            .keys()
            .find(|(slot, lane)| self.next[lane.index()] == *slot)
            .copied()?;
        let batch = self.decided.remove(&key)?;
        let (slot, lane) = key;
        self.next[lane.index()] = Slot(slot.0 + 1);
        Some((Cell { lane, slot }, batch))
    }

    /// State transfer: every stream resumes at the snapshot's cut.
    pub fn jump_to(&mut self, seq: Seq) {
        debug_assert!(seq.0.is_multiple_of(self.lanes()), "snapshots are taken at cuts");
        let slot = Slot(seq.0 / self.lanes());
        for n in &mut self.next {
            *n = (*n).max(slot);
        }
        let next = &self.next;
        self.decided.retain(|(s, l), _| *s >= next[l.index()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(l: u32, s: u64) -> Cell {
        Cell {
            lane: LaneId(l),
            slot: Slot(s),
        }
    }

    fn drain(s: &mut Streams) -> Vec<(u32, u64)> {
        std::iter::from_fn(|| s.pop())
            .map(|(c, _)| (c.lane.0, c.slot.0))
            .collect()
    }

    /// SAREK §IV-B: a stalled stream holds back only itself; each stream is
    /// in order without gaps; the cut follows the slowest stream.
    #[test]
    fn streams_deliver_independently_in_order() {
        let mut s = Streams::new(3);
        let b = Arc::new(Batch::noop());
        s.insert(cell(1, 1), b.clone());
        s.insert(cell(2, 0), b.clone());
        assert_eq!(drain(&mut s), vec![(2, 0)], "lane 1 waits for its slot 0 only");
        s.insert(cell(2, 1), b.clone());
        s.insert(cell(1, 0), b.clone());
        assert_eq!(drain(&mut s), vec![(1, 0), (1, 1), (2, 1)]);
        assert_eq!(s.cut(), Seq(0), "lane 0 has delivered nothing");
        s.insert(cell(0, 0), b.clone());
        s.insert(cell(0, 0), b.clone());
        assert_eq!(drain(&mut s), vec![(0, 0)]);
        assert_eq!(s.cut(), Seq(3));
        s.insert(cell(0, 5), b.clone());
        s.jump_to(Seq(12));
        assert_eq!(s.next_of(LaneId(1)), Slot(4));
        assert_eq!(s.waiting(), 1);
        s.insert(cell(0, 4), b.clone());
        assert_eq!(drain(&mut s), vec![(0, 4), (0, 5)]);
        assert_eq!(s.cut(), Seq(12));
    }
}
