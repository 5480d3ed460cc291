//! The rcc checkers' measurements (issue 10 item 6):
//!
//! - *ordering defence* (RCC §IV): the rank of the order attacker's own
//!   batches inside delivered rounds, counted once per round; over many
//!   rounds it must be uniform over `0..m` (chi-square), not first;
//! - *wait-free* (RCC §III-C): while one instance is stopped, the others keep
//!   deciding. Every `SAMPLE_EVERY_US` of virtual time the world samples each
//!   lane's decided frontier (the highest first-undecided slot over the live
//!   correct replicas) and whether most of them see the lane in a view change
//!   or stopped; `wait_free` compares the other lanes' decision rate while a
//!   lane is halted with the rate before the first halt.

use crate::queue::Micros;
use chorus_core::{Batch, Cell, Seq};

/// Lanes are sampled this often (virtual time).
pub const SAMPLE_EVERY_US: Micros = 100_000;
/// Samples kept per run, at most (a bound, ~100 s of virtual time).
const SAMPLES_MAX: usize = 1_000;
/// RCC §III-C's wait-freedom, as checked: the other lanes decide at least
/// this fraction of their rate before the fault while a lane is stopped.
pub const WAIT_FREE_MIN_RATIO: f64 = 0.8;
/// The first windows of a run (leader start-up, first requests) are not a baseline.
pub const WARMUP_US: Micros = 500_000;

/// One lane at one replica: its first undecided slot, whether it is in a
/// view change, and whether its primary is stopped at that slot (RCC §III-C).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct LaneProgress {
    pub next_undecided: u64,
    pub changing: bool,
    pub stopped: bool,
}

/// A lane's state in a sample, as most live correct replicas see it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LaneState {
    Running,
    /// In a view change (RCC: FAILUREs sent, the stop not yet decided).
    Changing,
    /// Its coordinating leader proposes its rounds (the stop is in force).
    Stopped,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaneSample {
    pub at_us: Micros,
    pub decided: Vec<u64>,
    pub states: Vec<LaneState>,
}

/// What one run measured for the rcc checkers.
#[derive(Clone, Debug, Default)]
pub struct RccStats {
    /// `attacker_ranks[k]`: rounds in which the order attacker's own batch
    /// was delivered at rank `k` (empty without an order attacker).
    pub attacker_ranks: Vec<u64>,
    pub samples: Vec<LaneSample>,
}

/// The world's side: sampling schedule and the rank counter.
#[derive(Default)]
pub struct RccObserver {
    pub stats: RccStats,
    next_sample_us: Micros,
    /// Rounds counted for the rank statistic: each once, by the first
    /// correct replica to deliver it (restarts re-deliver).
    counted_up_to: Option<u64>,
}

impl RccObserver {
    pub fn sample_due(&mut self, now: Micros) -> bool {
        if now < self.next_sample_us || self.stats.samples.len() >= SAMPLES_MAX {
            return false;
        }
        self.next_sample_us = now + SAMPLE_EVERY_US;
        true
    }

    /// One sample from every live correct replica's lane progress.
    pub fn sample(&mut self, now: Micros, replicas: &[Vec<LaneProgress>]) {
        let lanes = replicas.iter().map(Vec::len).max().unwrap_or(0);
        if lanes == 0 {
            return;
        }
        let half = replicas.len() / 2;
        let mut decided = vec![0; lanes];
        let mut states = vec![LaneState::Running; lanes];
        for l in 0..lanes {
            let at: Vec<&LaneProgress> = replicas.iter().filter_map(|r| r.get(l)).collect();
            decided[l] = at.iter().map(|p| p.next_undecided).max().unwrap_or(0);
            if at.iter().filter(|p| p.changing).count() > half {
                states[l] = LaneState::Changing;
            } else if at.iter().filter(|p| p.stopped).count() > half {
                states[l] = LaneState::Stopped;
            }
        }
        self.stats.samples.push(LaneSample {
            at_us: now,
            decided,
            states,
        });
    }

    /// A correct replica delivered `batch` at `seq` (cell `cell`) in a
    /// round of `m` lanes; `own` says whether the order attacker of lane
    /// `attacker` proposed it.
    pub fn delivered(&mut self, seq: Seq, cell: Cell, batch: &Batch, m: u64, attacker: u32, own: bool) {
        if cell.lane.0 != attacker || batch.is_noop() || !own || m == 0 {
            return;
        }
        let round = seq.0 / m;
        if self.counted_up_to.is_some_and(|r| round <= r) {
            return;
        }
        self.counted_up_to = Some(round);
        let ranks = &mut self.stats.attacker_ranks;
        if ranks.len() < m as usize {
            ranks.resize(m as usize, 0);
        }
        ranks[(seq.0 % m) as usize] += 1;
    }
}

/// Pearson's chi-square of `counts` against the uniform distribution.
pub fn chi_square(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    if counts.is_empty() || total == 0 {
        return 0.0;
    }
    let expected = total as f64 / counts.len() as f64;
    counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum()
}

/// The 0.1 % critical value of chi-square with `dof` degrees of freedom
/// (1 to 12; beyond, a Wilson–Hilferty approximation).
pub fn chi_square_critical_001(dof: usize) -> f64 {
    const TABLE: [f64; 12] = [
        10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59, 31.26, 32.91,
    ];
    if (1..=TABLE.len()).contains(&dof) {
        return TABLE[dof - 1];
    }
    let k = dof.max(1) as f64;
    let z = 3.09;
    k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3)
}

/// The wait-free measurement of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct WaitFree {
    /// Decisions per virtual second per lane before any lane halted.
    pub baseline: f64,
    /// Per other lane while one lane was halted (None: none was).
    pub halted: Option<f64>,
    /// Windows in which a lane was halted (stopped or changing view).
    pub halted_windows: usize,
    /// Of those, windows in which its stop was in force at both ends.
    pub stopped_windows: usize,
}

impl WaitFree {
    /// The other lanes' rate while a lane was halted, over the baseline.
    pub fn ratio(&self) -> Option<f64> {
        self.halted.map(|h| h / self.baseline)
    }
}

/// Rates in windows between consecutive samples. A window is halted when a
/// lane is stopped or changing view at either end; the first such lane is
/// the halted one and every other lane counts as "the others" (a second
/// lane halted too counts against wait-freedom: with one faulty primary
/// only one instance may stop). The baseline is every lane's rate in the
/// windows after `WARMUP_US` and before the first halted one. `None`
/// without a baseline.
pub fn wait_free(samples: &[LaneSample]) -> Option<WaitFree> {
    let (mut base_d, mut base_us) = (0u64, 0u64);
    let (mut halt_d, mut halt_us) = (0u64, 0u64);
    let (mut halted_windows, mut stopped_windows) = (0, 0);
    for w in samples.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        let dt = b.at_us.saturating_sub(a.at_us);
        let lanes = a.decided.len().min(b.decided.len());
        if dt == 0 || lanes < 2 {
            continue;
        }
        let progress = |l: usize| b.decided[l].saturating_sub(a.decided[l]);
        let halted =
            (0..lanes).find(|&l| a.states[l] != LaneState::Running || b.states[l] != LaneState::Running);
        let Some(h) = halted else {
            if halted_windows == 0 && a.at_us >= WARMUP_US {
                base_d += (0..lanes).map(progress).sum::<u64>();
                base_us += dt * lanes as u64;
            }
            continue;
        };
        halted_windows += 1;
        if a.states[h] == LaneState::Stopped && b.states[h] == LaneState::Stopped {
            stopped_windows += 1;
        }
        halt_d += (0..lanes).filter(|&l| l != h).map(progress).sum::<u64>();
        halt_us += dt * (lanes as u64 - 1);
    }
    let rate = |d: u64, us: u64| (us > 0).then(|| d as f64 * 1e6 / us as f64);
    let baseline = rate(base_d, base_us).filter(|r| *r > 0.0)?;
    Some(WaitFree {
        baseline,
        halted: rate(halt_d, halt_us),
        halted_windows,
        stopped_windows,
    })
}

/// Decisions per virtual second per lane of `lanes` between the samples
/// nearest `from_us` and `to_us` (e.g. over a whole outage, halted or not).
pub fn lane_rate(samples: &[LaneSample], lanes: &[usize], from_us: Micros, to_us: Micros) -> Option<f64> {
    let a = samples.iter().find(|s| s.at_us >= from_us)?;
    let b = samples.iter().rev().find(|s| s.at_us <= to_us)?;
    let dt = b.at_us.checked_sub(a.at_us).filter(|d| *d > 0)?;
    let d: u64 = lanes
        .iter()
        .map(|&l| {
            b.decided
                .get(l)
                .copied()
                .unwrap_or(0)
                .saturating_sub(a.decided.get(l).copied().unwrap_or(0))
        })
        .sum();
    Some(d as f64 * 1e6 / (dt as f64 * lanes.len().max(1) as f64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{LaneId, Slot};
    use LaneState::*;

    fn sample(at_ms: u64, decided: [u64; 3], states: [LaneState; 3]) -> LaneSample {
        LaneSample {
            at_us: at_ms * 1_000,
            decided: decided.to_vec(),
            states: states.to_vec(),
        }
    }

    #[test]
    fn ranks_are_counted_once_per_round_for_the_attackers_own_batches() {
        let mut o = RccObserver::default();
        let b = Batch {
            requests: vec![],
            time_ms: 0,
        };
        let tag = chorus_core::ClusterTag::from_digest(chorus_core::Digest::of(b"rank test"));
        let busy = Batch {
            requests: vec![chorus_core::Request::with_signature(
                &tag,
                chorus_core::ClientId(0),
                chorus_core::RequestSeq(1),
                0,
                bytes::Bytes::from_static(b"x"),
                &chorus_core::Identity::from_seed(&[1]),
            )],
            time_ms: 0,
        };
        let cell = |l, s| Cell {
            lane: LaneId(l),
            slot: Slot(s),
        };
        o.delivered(Seq(4), cell(0, 1), &b, 4, 0, true); // a no-op
        o.delivered(Seq(5), cell(0, 1), &busy, 4, 0, false); // not the attacker's
        o.delivered(Seq(6), cell(1, 1), &busy, 4, 0, true); // another lane
        o.delivered(Seq(9), cell(0, 2), &busy, 4, 0, true);
        o.delivered(Seq(9), cell(0, 2), &busy, 4, 0, true); // re-delivered
        o.delivered(Seq(12), cell(0, 3), &busy, 4, 0, true);
        assert_eq!(o.stats.attacker_ranks, vec![1, 1, 0, 0]);
    }

    #[test]
    fn chi_square_tells_uniform_from_first() {
        assert!(chi_square(&[250, 260, 240, 250]) < chi_square_critical_001(3));
        assert!(chi_square(&[900, 40, 30, 30]) > chi_square_critical_001(3));
        assert_eq!(chi_square(&[]), 0.0);
        assert!((chi_square_critical_001(20) - 45.31).abs() < 0.5);
    }

    #[test]
    fn wait_free_compares_the_other_lanes_with_the_baseline() {
        let steady = vec![
            sample(500, [0, 0, 0], [Running; 3]),
            sample(600, [5, 5, 5], [Running; 3]),
            sample(700, [10, 10, 10], [Running; 3]),
            sample(800, [10, 15, 15], [Changing, Running, Running]),
            sample(900, [10, 20, 20], [Changing, Running, Running]),
            sample(1000, [12, 25, 25], [Stopped, Running, Running]),
            sample(1100, [17, 30, 30], [Stopped, Running, Running]),
        ];
        let w = wait_free(&steady).unwrap();
        assert_eq!(w.baseline, 50.0);
        assert_eq!(w.ratio(), Some(1.0));
        assert_eq!((w.halted_windows, w.stopped_windows), (4, 1));
        assert_eq!(lane_rate(&steady, &[1, 2], 700_000, 1_100_000), Some(50.0));
        // The other lanes wait for the stopped one: the ratio shows it.
        let mut waiting = steady.clone();
        waiting[5].decided = [12, 20, 20].to_vec();
        waiting[6].decided = [17, 20, 20].to_vec();
        let w = wait_free(&waiting).unwrap();
        assert!(w.ratio().unwrap() < WAIT_FREE_MIN_RATIO);
        // So does a second lane halting with the first.
        let mut both = steady.clone();
        for s in &mut both[3..] {
            s.states[1] = Changing;
            s.decided[1] = 10;
        }
        assert!(wait_free(&both).unwrap().ratio().unwrap() < WAIT_FREE_MIN_RATIO);
        assert_eq!(wait_free(&steady[..1]), None);
    }
}
