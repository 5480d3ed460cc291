//! The merger (DESIGN §1): turns decided cells into one delivery order, a
//! pure function of the decided cells, so every correct replica delivers the
//! same sequence.
//!
//! `pbft` and `cop` share one rule: cell (lane, slot) is global position
//! `slot * P + lane` (COP §4.2.1, `config.seq_of`), delivered in increasing
//! position, exactly once, without gaps. The execution stage "has to wait for
//! the very next sequence number", which is why empty lanes propose no-ops.

use chorus_core::{Batch, Cell, ClusterConfig, Seq};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub struct Merger {
    cfg: Arc<ClusterConfig>,
    /// The next position to deliver. Every position below it was delivered
    /// (or covered by an installed snapshot).
    next: Seq,
    decided: BTreeMap<Seq, (Cell, Arc<Batch>)>,
    /// While a snapshot from a peer is being installed nothing is delivered.
    paused: bool,
    /// The last position delivered, to assert "no gaps, no repeats".
    last: Option<Seq>,
}

impl Merger {
    pub fn new(cfg: Arc<ClusterConfig>) -> Merger {
        Merger {
            cfg,
            next: Seq(0),
            decided: BTreeMap::new(),
            paused: false,
            last: None,
        }
    }

    pub fn next(&self) -> Seq {
        self.next
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Decided cells waiting for an earlier position.
    pub fn waiting(&self) -> usize {
        self.decided.len()
    }

    /// A decided cell. Cells below `next` are already covered and ignored.
    pub fn insert(&mut self, cell: Cell, batch: Arc<Batch>) {
        let seq = self.cfg.seq_of(cell);
        if seq < self.next {
            return;
        }
        if let Some((_, old)) = self.decided.get(&seq) {
            // A lane decides a slot once; two batches here would be a fork.
            debug_assert_eq!(old.digest(), batch.digest(), "two decisions for {seq:?}");
            return;
        }
        self.decided.insert(seq, (cell, batch));
    }

    /// The next deliverable position, if decided (and not paused).
    pub fn pop_next(&mut self) -> Option<(Seq, Cell, Arc<Batch>)> {
        if self.paused {
            return None;
        }
        let (cell, batch) = self.decided.remove(&self.next)?;
        let seq = self.next;
        assert!(
            self.last.is_none_or(|l| l.next() == seq),
            "gap or repeat in delivery at {seq:?}"
        );
        debug_assert_eq!(self.cfg.cell_of(seq), cell);
        self.last = Some(seq);
        self.next = seq.next();
        Some((seq, cell, batch))
    }

    /// State transfer: everything below `seq` is covered by a snapshot.
    pub fn jump_to(&mut self, seq: Seq) {
        if seq <= self.next {
            return;
        }
        self.decided = self.decided.split_off(&seq);
        self.next = seq;
        self.last = seq.0.checked_sub(1).map(Seq);
    }

    pub fn pause(&mut self) {
        self.paused = true;
    }

    pub fn resume(&mut self) {
        self.paused = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{LaneId, ProtocolParams, Slot};

    fn cfg(p: u32) -> Arc<ClusterConfig> {
        let params = ProtocolParams {
            pillars: p,
            checkpoint_interval: 8 * p as u64,
            window_slots: 16,
            ..ProtocolParams::default()
        };
        Arc::new(ClusterConfig::for_testing(4, 1, params, 1).0)
    }

    fn cell(l: u32, s: u64) -> Cell {
        Cell {
            lane: LaneId(l),
            slot: Slot(s),
        }
    }

    fn drain(m: &mut Merger) -> Vec<u64> {
        std::iter::from_fn(|| m.pop_next()).map(|(s, _, _)| s.0).collect()
    }

    #[test]
    fn cop_cells_are_delivered_in_global_order_without_gaps() {
        let mut m = Merger::new(cfg(2));
        let b = Arc::new(Batch::noop());
        m.insert(cell(1, 0), b.clone()); // seq 1
        assert!(drain(&mut m).is_empty());
        m.insert(cell(1, 1), b.clone()); // seq 3
        m.insert(cell(0, 0), b.clone()); // seq 0
        assert_eq!(drain(&mut m), vec![0, 1]);
        m.insert(cell(0, 1), b.clone()); // seq 2
        assert_eq!(drain(&mut m), vec![2, 3]);
        // Late duplicates are ignored.
        m.insert(cell(0, 0), b.clone());
        assert!(drain(&mut m).is_empty());
        assert_eq!(m.next(), Seq(4));
    }

    #[test]
    fn jump_and_pause_for_state_transfer() {
        let mut m = Merger::new(cfg(1));
        let b = Arc::new(Batch::noop());
        m.insert(cell(0, 3), b.clone());
        m.insert(cell(0, 9), b.clone());
        m.jump_to(Seq(8));
        m.pause();
        m.insert(cell(0, 8), b.clone());
        assert!(drain(&mut m).is_empty());
        m.resume();
        assert_eq!(drain(&mut m), vec![8, 9]);
        assert_eq!(m.waiting(), 0);
    }
}
