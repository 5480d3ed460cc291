//! `dispel`: a silent proposer's clients, handed to stand-ins.
//!
//! Every dispel replica proposes its own lane's requests (clients are spread
//! over the lanes by id). A crashed or censoring proposer's requests are
//! proposed by the others only once they waited the rescue timeout
//! (`dispel_cut.rs`: the view-change timeout, 2 s), and its clients keep
//! landing in its lane, so every one of their requests waited 2 s, for as
//! long as it stayed down (the model, 2026-11-26: n = 4, r0 crashed for
//! good, 65 req/s afterwards against 38 k without the crash). Dispel §5.6
//! shows a crash costing one replica's share, not the clients' progress.
//!
//! So a lane counts as silent once our pool had to rescue its requests
//! (crashed, cut off, censoring, or it never got them), and its clients'
//! requests then wait in a stand-in lane chosen per client among the lanes
//! that do not look silent (rendezvous hashing: a change in one lane moves
//! only that lane's clients), until a decided batch of it carries a request
//! of its own clients again (`replica/dispel.rs`). Our own lane never
//! counts as silent here. Missed bits are no evidence: a late joiner's bit
//! often decides 0 at light load, and a replica joins only the epochs it
//! would have spawned (a version that also counted two missed bits in a
//! row marked proposers of a healthy, lightly loaded cluster silent). A
//! correct proposer wrongly judged silent (a Byzantine client withheld
//! requests from it, or saturation) costs a load shift until its next batch
//! that serves its own clients, not a request. A move keeps a request's
//! arrival time, so the rescue timeout (`dispel_cut.rs`) still bounds its
//! wait at every correct replica, however often Byzantine proposers flip
//! between silent and heard (a review found that resetting it on a move
//! let colluding proposers postpone a client's rescue for ever). Replicas
//! that see different silent sets for a while may hold one request in
//! different lanes: proposed twice (the executor's client table drops the
//! copy) or by nobody until the rescue timeout, never lost.

use super::{Pool, State};
use chorus_core::{ClientId, LaneId, OrderingMode};

impl Pool {
    /// Proposer `lane` looks silent (`true`) or was heard again (`false`).
    /// Pending requests move to the lane they now wait in, keeping their
    /// arrival time. Returns whether anything changed.
    pub fn set_silent(&mut self, lane: LaneId, silent: bool) -> bool {
        if self.cfg.params.mode != OrderingMode::Dispel {
            return false;
        }
        let Some(s) = self.silent.get_mut(lane.index()) else {
            return false;
        };
        if *s == silent {
            return false;
        }
        *s = silent;
        self.rehome();
        true
    }

    pub fn is_silent(&self, lane: LaneId) -> bool {
        self.silent.get(lane.index()).copied().unwrap_or(false)
    }

    /// The lane a client of `owner` waits in: `owner`, or while it looks
    /// silent the live lane with the highest rendezvous weight for the
    /// client (every replica that sees the same silent lanes picks the same
    /// one, and a lane turning silent or live moves only its own clients).
    pub(super) fn stand_in(&self, client: ClientId, owner: LaneId) -> LaneId {
        if !self.is_silent(owner) {
            return owner;
        }
        (0..self.silent.len())
            .filter(|&l| !self.silent[l])
            .max_by_key(|&l| rendezvous(client, l))
            .map_or(owner, |l| LaneId(l as u32))
    }

    /// Pending requests whose lane changed move to its queue (in flight
    /// ones keep theirs: a batch already carries them); the queues they
    /// enter are put back in arrival order (`oldest_pending` and the rescue
    /// read their fronts).
    fn rehome(&mut self) {
        let moves: Vec<_> = self
            .entries
            .iter()
            .filter(|(_, e)| e.state == State::Pending && !e.req.is_switch())
            .filter_map(|(k, e)| {
                let want = self.lane_for(&e.req);
                (want != e.lane).then_some((*k, want))
            })
            .collect();
        let mut touched = std::collections::BTreeSet::new();
        for (k, lane) in moves {
            let e = self.entries.get_mut(&k).expect("collected from entries above");
            let (old, len) = (e.lane, e.req.op.len());
            e.lane = lane;
            // The key left behind in the old queue is skipped (lane differs).
            self.sub_load(old, len);
            self.add_load(lane, len);
            self.queues[lane.index()].push_back(k);
            touched.insert(lane);
        }
        for lane in touched {
            self.reorder_queue(lane);
        }
    }

    /// `lane`'s queue: its pending keys only, once each, oldest first.
    fn reorder_queue(&mut self, lane: LaneId) {
        let q = std::mem::take(&mut self.queues[lane.index()]);
        let mut keys: Vec<_> = q
            .into_iter()
            .filter_map(|k| {
                let e = self.entries.get(&k)?;
                (e.state == State::Pending && e.lane == lane).then_some((e.arrived, k))
            })
            .collect();
        keys.sort_unstable();
        keys.dedup();
        self.queues[lane.index()] = keys.into_iter().map(|(_, k)| k).collect();
    }
}

/// A client's weight for a lane (splitmix64 of both): deterministic, spread.
fn rendezvous(client: ClientId, lane: usize) -> u64 {
    let mut z = client.0 ^ (lane as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
