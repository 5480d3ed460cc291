//! The seqs of one client seen (or ordered) recently: a bitmap of the
//! `WINDOW` seqs up to the highest noted. A client's seqs rise, so this
//! holds what a B-tree of its 4 096 highest seqs held in practice, at a bit
//! per seq and no allocation per request. A seq more than `WINDOW` below
//! the highest is forgotten, as the B-tree forgot its smallest.
//!
//! Two users: a pillar tells a client connection's retransmission from a
//! first send (`chorus_node::pillar::serve_client`; the B-tree's insert and
//! removal of its smallest were ~2 % of the primary's CPU at peak,
//! BENCHMARKS.md 2026-11-28 (night)), and the request pool remembers which
//! requests of a client were ordered (`chorus_order::Pool`, where a global
//! B-tree and FIFO of keys did four tree operations per request).

/// Seqs remembered below and including the highest seen.
pub const WINDOW: u64 = 4_096;
const WORDS: usize = (WINDOW / 64) as usize;

#[derive(Clone, PartialEq, Eq)]
pub struct SeqWindow {
    /// The highest seq seen, if any.
    top: Option<u64>,
    /// Bit `s mod WINDOW` for each seq `s` in `(top - WINDOW, top]` seen.
    bits: Box<[u64; WORDS]>,
}

impl std::fmt::Debug for SeqWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some(top) = self.top else {
            return f.write_str("{}");
        };
        let low = top.saturating_sub(WINDOW - 1);
        f.debug_set()
            .entries((low..=top).filter(|&s| self.get(s)))
            .finish()
    }
}

impl Default for SeqWindow {
    fn default() -> Self {
        SeqWindow {
            top: None,
            bits: Box::new([0; WORDS]),
        }
    }
}

impl SeqWindow {
    /// Note `seq`; true if it was not seen before (or is below the window).
    pub fn insert(&mut self, seq: u64) -> bool {
        match self.top {
            Some(top) if seq > top => {
                // The window moves up: the positions of (top, seq] held
                // seqs that now fall out of it.
                self.clear_after(top, seq);
                self.top = Some(seq);
            }
            Some(top) if top - seq >= WINDOW => return true,
            Some(_) => {
                if self.get(seq) {
                    return false;
                }
            }
            None => self.top = Some(seq),
        }
        self.set(seq);
        true
    }

    /// Whether `seq` was noted and is still in the window.
    pub fn contains(&self, seq: u64) -> bool {
        match self.top {
            Some(top) if seq > top || top - seq >= WINDOW => false,
            Some(_) => self.get(seq),
            None => false,
        }
    }

    /// The highest seq noted, if any.
    pub fn top(&self) -> Option<u64> {
        self.top
    }

    fn get(&self, seq: u64) -> bool {
        let i = seq % WINDOW;
        self.bits[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    fn set(&mut self, seq: u64) {
        let i = seq % WINDOW;
        self.bits[(i / 64) as usize] |= 1 << (i % 64);
    }

    /// Clear the positions of the seqs in `(from, to]`, word by word.
    /// Counts positions rather than seqs, so `to = u64::MAX` (a client may
    /// send any seq) ends the loop instead of wrapping past it (found by
    /// review: the seq loop overflowed there, a panic in debug builds and an
    /// endless loop in release ones).
    fn clear_after(&mut self, from: u64, to: u64) {
        debug_assert!(from < to);
        let mut left = to - from;
        if left >= WINDOW {
            self.bits.fill(0);
            return;
        }
        // `from < to`, so `from + 1` does not overflow.
        let mut i = (from + 1) % WINDOW;
        while left > 0 {
            let bit = i % 64;
            // Up to the end of this word, or of the range; a word never
            // straddles the window's end (`WINDOW` is a multiple of 64).
            let n = (64 - bit).min(left);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << bit
            };
            self.bits[(i / 64) as usize] &= !mask;
            left -= n;
            i = (i + n) % WINDOW;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The model: every seq in the window is remembered exactly.
    fn model(seen: &mut std::collections::BTreeSet<u64>, seq: u64) -> bool {
        let top = seen.last().copied();
        if top.is_some_and(|t| t >= seq && t - seq >= WINDOW) {
            return true;
        }
        let first = seen.insert(seq);
        let top = *seen.last().unwrap();
        while seen.first().is_some_and(|&s| top - s >= WINDOW) {
            seen.pop_first();
        }
        first
    }

    #[test]
    fn a_second_send_is_seen_and_a_forgotten_one_is_first_again() {
        let mut s = SeqWindow::default();
        assert!(s.insert(5));
        assert!(!s.insert(5));
        assert!(s.insert(4));
        assert!(s.insert(5 + WINDOW));
        assert!(s.insert(5), "below the window: forgotten");
        assert!(s.insert(6), "in the window, not seen");
        assert!(!s.insert(6));
        assert!(!s.insert(5 + WINDOW));
    }

    /// The highest seqs a client can send: the window moves up to
    /// `u64::MAX` and still answers exactly.
    #[test]
    fn the_highest_seqs_move_the_window_without_overflow() {
        let mut s = SeqWindow::default();
        let m = u64::MAX;
        assert!(s.insert(m - 70));
        assert!(s.insert(m - 1));
        assert!(s.insert(m));
        assert!(!s.insert(m - 1));
        assert!(s.contains(m - 70) && s.contains(m) && !s.contains(m - 2));
        assert!(s.insert(m - WINDOW), "below the window: forgotten");
        assert!(!s.contains(m - WINDOW));
        let mut t = SeqWindow::default();
        assert!(t.insert(m - WINDOW - 3));
        assert!(t.insert(m), "a jump of more than the window");
        assert!(!t.contains(m - WINDOW - 3));
    }

    proptest! {
        /// Near `u64::MAX` too, where the window's arithmetic could overflow.
        #[test]
        fn answers_as_the_exact_window_near_the_top(steps in proptest::collection::vec((0u64..3, 0u64..200, 0u64..5_000), 1..300)) {
            let mut s = SeqWindow::default();
            let mut m = std::collections::BTreeSet::new();
            let mut top = u64::MAX - 20_000;
            for (kind, back, jump) in steps {
                let seq = match kind {
                    0 => { top = top.saturating_add(1 + jump % 3); top }
                    1 => top.saturating_sub(back),
                    _ => { top = top.saturating_add(jump); top }
                };
                prop_assert_eq!(s.contains(seq), m.contains(&seq), "contains {}", seq);
                prop_assert_eq!(s.insert(seq), model(&mut m, seq), "seq {}", seq);
            }
        }


        /// Rising seqs with retransmissions, gaps and jumps of any size
        /// answer as the exact window would.
        #[test]
        fn answers_as_the_exact_window(steps in proptest::collection::vec((0u64..3, 0u64..200, 0u64..9_000), 1..400)) {
            let mut s = SeqWindow::default();
            let mut m = std::collections::BTreeSet::new();
            let mut top = 10_000u64;
            for (kind, back, jump) in steps {
                let seq = match kind {
                    0 => { top += 1 + jump % 3; top }
                    1 => top.saturating_sub(back),
                    _ => { top += jump; top }
                };
                prop_assert_eq!(s.contains(seq), m.contains(&seq), "contains {}", seq);
                prop_assert_eq!(s.insert(seq), model(&mut m, seq), "seq {}", seq);
            }
        }
    }
}
