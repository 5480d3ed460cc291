//! The merger (DESIGN §1): turns decided cells into one delivery order, a
//! pure function of the decided cells, so every correct replica delivers the
//! same sequence.
//!
//! `pbft` and `cop` share one rule: cell (lane, slot) is global position
//! `slot * P + lane` (COP §4.2.1, `config.seq_of`), delivered in increasing
//! position, exactly once, without gaps. The execution stage "has to wait for
//! the very next sequence number", which is why empty lanes propose no-ops.
//!
//! `rcc` delivers round by round (RCC §III-B): round `r` once every instance
//! decided slot `r` (a stopped instance decides no-ops), its cells at
//! positions `r · m + rank` in the order `round_order` draws from the round's
//! batch digests (RCC §IV).

use crate::merger_dispel::epoch_order;
use crate::round_order::{round_permutation, round_seed};
use chorus_core::{Batch, Cell, ClusterConfig, LaneId, OrderingMode, Seq, Slot};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// The cells of one incomplete `rcc` round, by lane.
type Round = Vec<Option<Arc<Batch>>>;

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
    /// `rcc`: decided cells of rounds not yet complete, and the ordered cells
    /// of the next complete round waiting to be popped.
    rounds: BTreeMap<Slot, Round>,
    ready: VecDeque<(Seq, Cell, Arc<Batch>)>,
    /// `sarek`: one stream per lane instead of one global order.
    streams: Option<crate::sarek::Streams>,
}

impl Merger {
    pub fn new(cfg: Arc<ClusterConfig>) -> Merger {
        Merger {
            streams: (cfg.params.mode == OrderingMode::Sarek)
                .then(|| crate::sarek::Streams::new(cfg.lanes())),
            cfg,
            next: Seq(0),
            decided: BTreeMap::new(),
            paused: false,
            last: None,
            rounds: BTreeMap::new(),
            ready: VecDeque::new(),
        }
    }

    /// `rcc` rounds and `dispel` epochs are both delivered whole, `n`
    /// positions each; only the order inside differs.
    fn by_rounds(&self) -> bool {
        matches!(self.cfg.params.mode, OrderingMode::Rcc | OrderingMode::Dispel)
    }

    fn lanes(&self) -> u64 {
        self.cfg.lanes().max(1) as u64
    }

    /// The next position to deliver; in `sarek` the cut every stream passed.
    pub fn next(&self) -> Seq {
        match &self.streams {
            Some(s) => s.cut(),
            None => self.next,
        }
    }

    /// `sarek`: the next slot lane `lane`'s stream delivers.
    pub fn stream_next(&self, lane: LaneId) -> Option<Slot> {
        self.streams.as_ref().map(|s| s.next_of(lane))
    }

    /// `sarek`: every lane's next slot to deliver, by lane.
    pub fn stream_positions(&self) -> Option<&[Slot]> {
        self.streams.as_ref().map(|s| s.positions())
    }

    /// `sarek`: the next cell of any stream (never while paused).
    pub fn pop_stream(&mut self) -> Option<(Cell, Arc<Batch>)> {
        if self.paused {
            return None;
        }
        self.streams.as_mut()?.pop()
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Decided cells waiting for an earlier position.
    pub fn waiting(&self) -> usize {
        self.decided.len()
            + self.rounds.values().flatten().flatten().count()
            + self.ready.len()
            + self.streams.as_ref().map_or(0, |s| s.waiting())
    }

    /// A decided cell. Cells below `next` are already covered and ignored.
    pub fn insert(&mut self, cell: Cell, batch: Arc<Batch>) {
        if let Some(s) = self.streams.as_mut() {
            return s.insert(cell, batch);
        }
        if self.by_rounds() {
            return self.insert_in_round(cell, batch);
        }
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

    fn insert_in_round(&mut self, cell: Cell, batch: Arc<Batch>) {
        let m = self.lanes();
        if cell.lane.0 as u64 >= m || self.cfg.seq_of(cell) < self.next {
            return;
        }
        let round = self
            .rounds
            .entry(cell.slot)
            .or_insert_with(|| vec![None; m as usize]);
        let at = &mut round[cell.lane.index()];
        if let Some(old) = at {
            debug_assert_eq!(old.digest(), batch.digest(), "two decisions for {cell:?}");
            return;
        }
        *at = Some(batch);
    }

    /// RCC: once the round at `next` is complete, order it into `ready`.
    fn order_next_round(&mut self) {
        let m = self.lanes();
        if !self.ready.is_empty() || !self.next.0.is_multiple_of(m) {
            return;
        }
        let r = Slot(self.next.0 / m);
        if !self.rounds.get(&r).is_some_and(|c| c.iter().all(Option::is_some)) {
            return;
        }
        let Some(cells) = self.rounds.remove(&r) else {
            return;
        };
        let batches: Vec<Arc<Batch>> = cells.into_iter().flatten().collect();
        if self.cfg.params.mode == OrderingMode::Dispel {
            return self.order_epoch(r, &batches);
        }
        let digests: Vec<_> = batches.iter().map(|b| b.digest()).collect();
        let order = round_permutation(&round_seed(r, &digests), batches.len());
        for (rank, lane) in order.into_iter().enumerate() {
            let cell = Cell {
                lane: LaneId(lane),
                slot: r,
            };
            let seq = Seq(r.0 * m + rank as u64);
            self.ready.push_back((seq, cell, batches[lane as usize].clone()));
        }
    }

    /// Dispel §4.4: the epoch's batches in `merger_dispel::epoch_order`.
    fn order_epoch(&mut self, e: Slot, batches: &[Arc<Batch>]) {
        let m = self.lanes();
        let noop = Arc::new(Batch::noop());
        for (rank, (lane, keep)) in epoch_order(batches).into_iter().enumerate() {
            let cell = Cell {
                lane: LaneId(lane),
                slot: e,
            };
            let batch = if keep {
                batches[lane as usize].clone()
            } else {
                noop.clone()
            };
            self.ready.push_back((Seq(e.0 * m + rank as u64), cell, batch));
        }
    }

    /// The next deliverable position, if decided (and not paused).
    pub fn pop_next(&mut self) -> Option<(Seq, Cell, Arc<Batch>)> {
        if self.paused || self.streams.is_some() {
            return None;
        }
        let (seq, cell, batch) = if self.by_rounds() {
            self.order_next_round();
            let (seq, cell, batch) = self.ready.pop_front()?;
            debug_assert_eq!(seq, self.next);
            debug_assert_eq!(cell.slot.0, seq.0 / self.lanes());
            (seq, cell, batch)
        } else {
            let (cell, batch) = self.decided.remove(&self.next)?;
            debug_assert_eq!(self.cfg.cell_of(self.next), cell);
            (self.next, cell, batch)
        };
        assert!(
            self.last.is_none_or(|l| l.next() == seq),
            "gap or repeat in delivery at {seq:?}"
        );
        self.last = Some(seq);
        self.next = seq.next();
        Some((seq, cell, batch))
    }

    /// State transfer: everything below `seq` is covered by a snapshot.
    pub fn jump_to(&mut self, seq: Seq) {
        if let Some(s) = self.streams.as_mut() {
            return s.jump_to(seq);
        }
        if seq <= self.next {
            return;
        }
        self.decided = self.decided.split_off(&seq);
        // RCC: snapshots are taken at checkpoints, which are round boundaries.
        debug_assert!(!self.by_rounds() || seq.0.is_multiple_of(self.lanes()));
        let round = Slot(seq.0.div_ceil(self.lanes()));
        self.rounds = self.rounds.split_off(&round);
        self.ready.retain(|(s, _, _)| *s >= seq);
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

    fn rcc(n: usize) -> Arc<ClusterConfig> {
        let params = ProtocolParams {
            mode: chorus_core::OrderingMode::Rcc,
            checkpoint_interval: 8 * n as u64,
            window_slots: 16,
            ..ProtocolParams::default()
        };
        Arc::new(ClusterConfig::for_testing(n, 1, params, 1).0)
    }

    fn req_batch(tag: u8) -> Arc<Batch> {
        let mut b = Batch::noop();
        b.requests.push(chorus_core::Request {
            memo: Default::default(),
            client: chorus_core::ClientId(tag as u64),
            seq: chorus_core::RequestSeq(1),
            flags: 0,
            op: bytes::Bytes::from(vec![tag]),
            auth: chorus_core::Authenticator::Macs(Default::default()),
        });
        Arc::new(b)
    }

    /// RCC §III-B: a round is delivered only once every instance decided it,
    /// in the order `round_order` draws from its batches; positions stay
    /// contiguous and each round's cells are the round's.
    #[test]
    fn rcc_delivers_complete_rounds_in_the_drawn_order() {
        let mut m = Merger::new(rcc(4));
        for lane in 0..3 {
            m.insert(cell(lane, 0), req_batch(lane as u8));
        }
        m.insert(cell(0, 1), req_batch(10));
        assert!(drain(&mut m).is_empty(), "lane 3 has not decided round 0");
        m.insert(cell(3, 0), req_batch(3));
        let mut got = Vec::new();
        while let Some((seq, c, b)) = m.pop_next() {
            got.push((seq.0, c.lane.0, c.slot.0, b.digest()));
        }
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        assert!(got.iter().all(|g| g.2 == 0));
        let digests: Vec<_> = (0..4).map(|l| req_batch(l).digest()).collect();
        let order = round_permutation(&round_seed(Slot(0), &digests), 4);
        assert_eq!(got.iter().map(|g| g.1).collect::<Vec<_>>(), order);
        for g in &got {
            assert_eq!(g.3, req_batch(g.1 as u8).digest(), "each lane keeps its batch");
        }
        // Round 1 waits for its other three instances.
        for lane in 1..4 {
            m.insert(cell(lane, 1), Arc::new(Batch::noop()));
        }
        assert_eq!(drain(&mut m), vec![4, 5, 6, 7]);
        m.jump_to(Seq(12));
        m.insert(cell(0, 2), Arc::new(Batch::noop()));
        assert_eq!(m.waiting(), 0, "below the snapshot: ignored");
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
