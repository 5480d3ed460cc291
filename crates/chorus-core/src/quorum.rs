//! Quorum arithmetic for n ≥ 3f+1 (PBFT §4; COP §2).

/// The number of Byzantine replicas tolerated by `n` replicas.
pub const fn max_faulty(n: usize) -> usize {
    (n.saturating_sub(1)) / 3
}

/// A Byzantine quorum: any two intersect in at least one correct replica.
/// Equals 2f+1 when n = 3f+1; larger for other n so intersection still holds.
pub const fn quorum(n: usize) -> usize {
    (n + max_faulty(n)) / 2 + 1
}

/// Enough replicas that at least one is correct.
pub const fn weak_quorum(n: usize) -> usize {
    max_faulty(n) + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorums_for_common_sizes() {
        assert_eq!((max_faulty(4), quorum(4), weak_quorum(4)), (1, 3, 2));
        assert_eq!((max_faulty(7), quorum(7), weak_quorum(7)), (2, 5, 3));
        assert_eq!((max_faulty(1), quorum(1), weak_quorum(1)), (0, 1, 1));
        // Two quorums always intersect in more than f replicas.
        for n in 1..40 {
            assert!(2 * quorum(n) > n + max_faulty(n));
        }
    }
}
