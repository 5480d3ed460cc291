//! The hash chain over the decided ledger. Entry `#s` stores
//! `h(s) = H("chorus ledger v1"; h(s-1), lane, slot, digest)` (BLAKE3 with
//! domain separation and length-prefixed parts, `Digest::of_parts`), so
//! changing, removing or reordering any decided cell changes every later hash
//! and the head. Chaining follows the global order, not the order cells were
//! decided in, so two replicas with the same history from genesis report the
//! same `ledger_head` for the same length.

use chorus_core::{Cell, CheckpointCert, Digest};

use crate::schema::ChainState;

/// What the first entry of a fresh ledger chains from.
pub(crate) fn genesis() -> Digest {
    Digest::of_parts("chorus ledger genesis v1", &[])
}

pub(crate) fn entry_hash(prev: &Digest, cell: Cell, digest: &Digest) -> Digest {
    Digest::of_parts(
        "chorus ledger v1",
        &[
            prev.as_bytes(),
            &cell.lane.0.to_le_bytes(),
            &cell.slot.0.to_le_bytes(),
            digest.as_bytes(),
        ],
    )
}

/// What the chain restarts from when the replica jumped over a gap to a
/// stable checkpoint by state transfer: the cells below it were never decided
/// locally, so the chain continues from the certified state instead.
pub(crate) fn anchor(cert: &CheckpointCert) -> Digest {
    Digest::of_parts(
        "chorus ledger anchor v1",
        &[&cert.seq.0.to_le_bytes(), cert.state_digest.as_bytes()],
    )
}

impl ChainState {
    pub(crate) fn genesis() -> ChainState {
        let g = genesis();
        ChainState {
            base_seq: 0,
            base_hash: g,
            next_seq: 0,
            head: g,
        }
    }

    pub(crate) fn anchored(cert: &CheckpointCert) -> ChainState {
        let a = anchor(cert);
        ChainState {
            base_seq: cert.seq.0,
            base_hash: a,
            next_seq: cert.seq.0,
            head: a,
        }
    }

    /// Append one entry at `next_seq`; returns its hash.
    pub(crate) fn push(&mut self, cell: Cell, digest: &Digest) -> Digest {
        let h = entry_hash(&self.head, cell, digest);
        self.head = h;
        self.next_seq += 1;
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{LaneId, Slot};

    fn cell(l: u32, s: u64) -> Cell {
        Cell {
            lane: LaneId(l),
            slot: Slot(s),
        }
    }

    #[test]
    fn hash_depends_on_prev_cell_and_digest() {
        let g = genesis();
        let d = Digest::of(b"a");
        let h = entry_hash(&g, cell(0, 0), &d);
        assert_ne!(h, entry_hash(&Digest::of(b"other"), cell(0, 0), &d));
        assert_ne!(h, entry_hash(&g, cell(1, 0), &d));
        assert_ne!(h, entry_hash(&g, cell(0, 1), &d));
        assert_ne!(h, entry_hash(&g, cell(0, 0), &Digest::of(b"b")));
        assert_eq!(h, entry_hash(&g, cell(0, 0), &d));
    }

    #[test]
    fn push_advances_head_and_length() {
        let mut c = ChainState::genesis();
        let h0 = c.push(cell(0, 0), &Digest::of(b"a"));
        let h1 = c.push(cell(1, 0), &Digest::of(b"b"));
        assert_eq!(c.next_seq, 2);
        assert_eq!(c.head, h1);
        assert_eq!(h1, entry_hash(&h0, cell(1, 0), &Digest::of(b"b")));
        assert_eq!(c.base_seq, 0);
        assert_eq!(c.base_hash, genesis());
    }
}
