//! Parameters of one DBFT engine: membership size, thresholds, bounds and
//! timer policy. Thresholds are kept as separate formulas so that
//! n ≠ 3t+1 stays correct (spec §1.1).

use chorus_core::ClusterConfig;

/// The `weak-quorum-for-tests` feature lowers every DBFT quorum (echo,
/// READY and B_VAL delivery, AUX) by one, for the simulator's
/// `checkers_bite` test only: quorums then need not share a correct
/// replica, so f Byzantine replicas (an RB equivocator, twins) can make
/// correct replicas deliver different batches, and the checkers must say so.
/// The t+1 thresholds (amplification, join, DECIDED) are unchanged.
const WEAK: usize = if cfg!(feature = "weak-quorum-for-tests") {
    1
} else {
    0
};

/// How a binary-consensus round is run.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Variant {
    /// \[TR\] Fig. 2: weak coordinator, two timers per round, New5, catch-up.
    /// The only variant a deployment may use.
    Psync,
    /// \[TR\] Fig. 1, the safe core without coordinator and timers. Safe but not
    /// live (spec §3.3, §6.3); kept only so tests can show why psync exists
    /// (Appendix B scenario 1).
    SafeCore,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DbftConfig {
    pub n: usize,
    /// Byzantine bound, ⌊(n−1)/3⌋ (spec §1).
    pub t: usize,
    /// Epochs kept above the lowest uncollected one (spec §5.1 "Window").
    pub window_epochs: u64,
    /// Rounds ahead of an instance's current round whose messages are kept (P14).
    pub max_round_ahead: u32,
    /// Absolute round cap: beyond it an instance refuses messages (P14). Far
    /// above any round reached after GST (decision within t+1 synchronous rounds).
    pub max_round: u32,
    pub max_batch_requests: usize,
    pub max_batch_bytes: usize,
    pub max_op_bytes: usize,
    /// Rounds `1..=zero_timeout_rounds` use timeout 0 (spec §3.7, R0): the
    /// RB fast path decides in round 1, and an instance whose proposer sent
    /// nothing in time (every correct replica inputs 0) decides 0 in round 2
    /// after three more message delays instead of two `timeout(2)` waits.
    /// Under load, replicas that joined an epoch late miss it in most
    /// epochs, so with R0 = 1 every epoch took ~110 ms and, delivered in
    /// order, capped `--mode dispel` at a few hundred ops/s. Timers start
    /// at round 3, so liveness (P10: they grow without bound) is unchanged.
    pub zero_timeout_rounds: u32,
    /// Zero-phase grace: once an instance decided 1, a proposer whose RB is
    /// already under way here (INIT, ECHO or READY seen) gets this long for
    /// its delivery before its instance is input 0 (a proposer seen nothing
    /// from is input 0 at once, as in \[TR\] Fig. 3). See `engine.rs`.
    pub zero_phase_grace_ms: u64,
    /// First non-zero timeout; doubles every round after that (P10).
    pub timeout_base_ms: u64,
    /// Cap on the doubling, far above any plausible δ (spec §3.7).
    pub timeout_cap_ms: u64,
    /// Retry period for fetching a decided batch whose bytes are missing (§5.3).
    pub fetch_retry_ms: u64,
    /// How many times one peer is served the same batch (FETCH flood bound, P14).
    pub max_fetch_replies_per_peer: u32,
    /// Extra INITs kept per (epoch, proposer) after the first (spec §7: a small
    /// bounded number, they may serve a fetch).
    pub max_extra_inits: usize,
    pub variant: Variant,
}

impl DbftConfig {
    /// Defaults for `n` replicas; bounds like Chorus's defaults.
    pub fn new(n: usize) -> DbftConfig {
        assert!(n >= 1, "a cluster has at least one replica");
        DbftConfig {
            n,
            t: (n - 1) / 3,
            window_epochs: 16,
            max_round_ahead: 8,
            max_round: 1_000,
            max_batch_requests: 256,
            max_batch_bytes: (1 << 20) + 64 * 1024,
            max_op_bytes: 64 * 1024,
            zero_timeout_rounds: 2,
            zero_phase_grace_ms: 20,
            timeout_base_ms: 50,
            timeout_cap_ms: 60_000,
            fetch_retry_ms: 200,
            max_fetch_replies_per_peer: 3,
            max_extra_inits: 1,
            variant: Variant::Psync,
        }
    }

    /// Derived from the cluster configuration: batch bounds as the codec's
    /// `Limits` (a batch may exceed the soft cut size by one request), the
    /// epoch window as the lane window.
    pub fn from_cluster(c: &ClusterConfig) -> DbftConfig {
        DbftConfig::new(c.n()).with_cluster_params(c)
    }

    /// These parameters with those the cluster file sets (window, round
    /// timeout, batch bounds) taken from `c`; the rest (round caps, the
    /// variant, membership) kept.
    pub fn with_cluster_params(mut self, c: &ClusterConfig) -> DbftConfig {
        let p = &c.params;
        self.max_batch_requests = p.batch_max_requests as usize;
        self.max_batch_bytes = p.batch_max_bytes as usize + p.max_op_bytes as usize;
        self.max_op_bytes = p.max_op_bytes as usize;
        self.window_epochs = p.window_slots.max(1);
        self.timeout_base_ms = p.dispel_round_timeout_ms.max(1);
        self
    }

    /// B_VAL echo and READY amplification: one correct sender among them.
    pub fn small_quorum(&self) -> usize {
        self.t + 1
    }

    /// B_VAL delivery and RB delivery (Bracha's 2t+1).
    pub fn bv_deliver(&self) -> usize {
        2 * self.t + 1 - WEAK
    }

    /// AUX quorum: n − t distinct senders.
    pub fn aux_quorum(&self) -> usize {
        self.n - self.t - WEAK
    }

    /// ECHO → READY: ⌈(n+t+1)/2⌉ so two echo quorums share a correct replica.
    pub fn echo_quorum(&self) -> usize {
        (self.n + self.t + 1).div_ceil(2) - WEAK
    }

    /// RB delivery: 2t+1 READY.
    pub fn rb_deliver(&self) -> usize {
        2 * self.t + 1 - WEAK
    }

    /// Coordinator of round r ≥ 1: (r − 1) mod n, 0-indexed (spec §3.4, P7).
    pub fn coord(&self, round: u32) -> usize {
        debug_assert!(round >= 1);
        (round as usize - 1) % self.n
    }

    /// Timeout set at New1 of round r (and restarted at New4). Monotone in r.
    pub fn timeout(&self, round: u32) -> u64 {
        if round <= self.zero_timeout_rounds {
            return 0;
        }
        let exp = (round - self.zero_timeout_rounds - 1).min(40);
        self.timeout_base_ms
            .saturating_mul(1u64 << exp)
            .min(self.timeout_cap_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(not(feature = "weak-quorum-for-tests"))]
    fn thresholds_match_spec_table() {
        let c = DbftConfig::new(4);
        assert_eq!(
            (
                c.t,
                c.small_quorum(),
                c.bv_deliver(),
                c.aux_quorum(),
                c.echo_quorum()
            ),
            (1, 2, 3, 3, 3)
        );
        let c = DbftConfig::new(7);
        assert_eq!(
            (c.t, c.aux_quorum(), c.echo_quorum(), c.rb_deliver()),
            (2, 5, 5, 5)
        );
        // n ≠ 3t+1: the formulas differ and must stay separate.
        let c = DbftConfig::new(6);
        assert_eq!(
            (c.t, c.aux_quorum(), c.echo_quorum(), c.rb_deliver()),
            (1, 5, 4, 3)
        );
    }

    #[test]
    fn p7_rounds_start_at_one_and_coordinator_rotates_over_all() {
        let c = DbftConfig::new(4);
        assert_eq!(c.coord(1), 0);
        let seen: std::collections::BTreeSet<usize> = (1..=4).map(|r| c.coord(r)).collect();
        assert_eq!(seen.len(), 4);
        assert_eq!(c.coord(5), 0);
    }

    #[test]
    fn p10_timeouts_grow_and_first_round_is_zero() {
        let c = DbftConfig::new(4);
        assert_eq!(c.timeout(1), 0);
        // R0 = 2: the decide-0 path (round 2) waits on no timer either.
        assert_eq!(c.timeout(2), 0);
        assert!(c.timeout(3) > 0);
        let mut last = 0;
        for r in 2..30 {
            assert!(c.timeout(r) >= last);
            last = c.timeout(r);
        }
        assert!(c.timeout(3) > c.timeout(2));
        assert_eq!(c.timeout(1000), c.timeout_cap_ms);
    }

    /// The cluster's `dispel_round_timeout_ms` starts the round timers
    /// (10 ms by default; rounds 1 and 2 still wait for nothing).
    #[test]
    fn the_round_timeout_comes_from_the_cluster() {
        let mut p = chorus_core::ProtocolParams {
            mode: chorus_core::OrderingMode::Dispel,
            ..Default::default()
        };
        let (c, _, _) = ClusterConfig::for_testing(4, 1, p.clone(), 1);
        let d = DbftConfig::from_cluster(&c);
        assert_eq!((d.timeout(2), d.timeout(3), d.timeout(4)), (0, 10, 20));
        p.dispel_round_timeout_ms = 50;
        let (c, _, _) = ClusterConfig::for_testing(4, 1, p, 1);
        assert_eq!(DbftConfig::from_cluster(&c).timeout(3), 50);
    }
}
