//! RCC §IV, ordering attacks: the order of a round's batches is drawn from a
//! PRNG seeded with the digest of all of them, so it is known only once the
//! round is complete and no proposer can pick where its requests land (with
//! one correct primary among the `m > f`, the seed is unpredictable).
//!
//! The paper maps `h = digest(S) mod k!` to a permutation through the
//! factorial number system; `k!` outgrows any integer for large `m`, so we
//! draw the same uniform permutation with a Fisher–Yates shuffle over a
//! ChaCha20 stream keyed by the digest (rejection sampling, no modulo bias).
//! The shuffle is written out here rather than taken from `rand`, whose
//! shuffle may change between versions: replicas of different builds must
//! agree on the order.

use chorus_core::{Digest, Slot};
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};

/// The seed of round `round`: the digest of its batch digests in lane order.
pub fn round_seed(round: Slot, batch_digests: &[Digest]) -> Digest {
    let round_bytes = round.0.to_le_bytes();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(batch_digests.len() + 1);
    parts.push(&round_bytes);
    parts.extend(batch_digests.iter().map(|d| d.as_bytes().as_slice()));
    Digest::of_parts("chorus rcc round order v1", &parts)
}

/// The delivery order of a round: `order[rank]` is the lane delivered at
/// position `round · m + rank`. A permutation of `0..m`, a pure function of
/// the seed.
pub fn round_permutation(seed: &Digest, m: usize) -> Vec<u32> {
    let mut order: Vec<u32> = (0..m as u32).collect();
    let mut rng = ChaCha20Rng::from_seed(seed.0);
    for top in (1..m).rev() {
        let pick = uniform_below(&mut rng, top as u64 + 1) as usize;
        order.swap(top, pick);
    }
    debug_assert!(is_permutation(&order));
    order
}

/// Uniform in `0..bound`: reject the top `2^64 mod bound` values.
fn uniform_below(rng: &mut ChaCha20Rng, bound: u64) -> u64 {
    debug_assert!(bound > 0);
    let zone = u64::MAX - (u64::MAX % bound + 1) % bound;
    loop {
        let x = rng.next_u64();
        if x <= zone {
            return x % bound;
        }
    }
}

fn is_permutation(order: &[u32]) -> bool {
    let mut seen = vec![false; order.len()];
    order
        .iter()
        .all(|&l| (l as usize) < seen.len() && !std::mem::replace(&mut seen[l as usize], true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digests(tags: &[u8]) -> Vec<Digest> {
        tags.iter().map(|t| Digest::of(&[*t])).collect()
    }

    #[test]
    fn same_round_same_order_and_always_a_permutation() {
        let d = digests(&[1, 2, 3, 4, 5, 6, 7]);
        let a = round_permutation(&round_seed(Slot(9), &d), 7);
        let b = round_permutation(&round_seed(Slot(9), &d), 7);
        assert_eq!(a, b);
        assert!(is_permutation(&a));
        assert_eq!(round_permutation(&round_seed(Slot(0), &[]), 0), Vec::<u32>::new());
        assert_eq!(
            round_permutation(&round_seed(Slot(0), &digests(&[1])), 1),
            vec![0]
        );
    }

    #[test]
    fn different_round_digests_give_different_orders() {
        let a = round_permutation(&round_seed(Slot(3), &digests(&[1, 2, 3, 4, 5, 6, 7])), 7);
        let b = round_permutation(&round_seed(Slot(3), &digests(&[1, 2, 3, 4, 5, 6, 8])), 7);
        assert_ne!(a, b, "one changed batch reshuffles the round");
        // Permuting the lanes' batches is not a way to choose the order
        // either: the seed depends on which lane proposed what.
        let c = round_permutation(&round_seed(Slot(3), &digests(&[2, 1, 3, 4, 5, 6, 7])), 7);
        assert_ne!(a, c);
    }

    /// The ordering-attack defence: over many rounds, a fixed lane (the
    /// attacker) lands at every rank about equally often. Chi-square with
    /// m − 1 = 6 degrees of freedom; 22.46 is the 0.1 % critical value.
    #[test]
    fn an_attackers_rank_is_uniform_over_rounds() {
        let m = 7;
        let rounds = 7000u64;
        let mut counts = vec![0u64; m];
        for r in 0..rounds {
            // The attacker (lane 0) varies its own batch freely; the others too.
            let d: Vec<Digest> = (0..m as u64)
                .map(|l| Digest::of(&(r * 31 + l).to_le_bytes()))
                .collect();
            let order = round_permutation(&round_seed(Slot(r), &d), m);
            let rank = order.iter().position(|&l| l == 0).unwrap();
            counts[rank] += 1;
        }
        let expected = rounds as f64 / m as f64;
        let chi2: f64 = counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        assert!(chi2 < 22.46, "rank counts {counts:?} chi² {chi2}");
    }
}
