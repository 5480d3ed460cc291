//! The checks issue 9 adds to `checker.rs`, kept apart so both can change
//! without conflicts:
//!
//! - exactly-once by count: within one executor life (from a start, a
//!   restart or a state install) a request executes non-duplicately at most
//!   once. `Checker::executed` keeps one position per request, so a request
//!   executed twice at the same position passed it;
//! - views agree: at the end of a run every live correct replica is active
//!   in the same view of every lane (issue 8 finding 7: a restarted replica
//!   stayed alone in a higher view, and nothing noticed);
//! - which fault kinds were active (injected something), not only drawn;
//! - small driver state for the smart plan (per-request liveness pacing,
//!   triggered crashes, new views seen for twin re-splits).

use crate::faults::{FaultKind, FaultSet};
use crate::options::SimOptions;
use crate::plan::Plan;
use crate::queue::Micros;
use crate::report::{Violation, ViolationKind};
use crate::smart_plan::TRIGGERED_CRASHES_MAX;
use crate::stats::Counters;
use chorus_core::{ClientId, LaneId, ReplicaId, RequestSeq, Seq, View};
use std::collections::BTreeMap;

/// After every request completed, replicas get this long to agree on views
/// (many view-change timeouts, even backed off).
pub const VIEW_GRACE_US: Micros = 10_000_000;
/// Per-request deadlines are checked this often (virtual time).
const LIVENESS_CHECK_EVERY_US: Micros = 100_000;
/// Violations recorded here per run before further ones are only counted.
const VIOLATIONS_MAX: usize = 20;

type RequestKey = (ClientId, RequestSeq);

pub struct Extra {
    pub violations: Vec<Violation>,
    pub dropped: u64,
    /// Non-duplicate executions per request in each correct replica's
    /// current executor life.
    executions: Vec<crate::executed_set::ExecutedSet>,
    next_liveness_check: Micros,
    triggered_crashes: u32,
    /// Highest view a NEW-VIEW was sent for, per lane.
    new_views: BTreeMap<LaneId, View>,
}

impl Extra {
    pub fn new(opts: &SimOptions, _plan: &Plan) -> Extra {
        Extra {
            violations: Vec::new(),
            dropped: 0,
            executions: vec![crate::executed_set::ExecutedSet::default(); opts.n],
            next_liveness_check: 0,
            triggered_crashes: 0,
            new_views: BTreeMap::new(),
        }
    }

    pub fn violate(&mut self, kind: ViolationKind, at_us: Micros, detail: String) {
        if self.violations.len() < VIOLATIONS_MAX {
            self.violations.push(Violation { kind, at_us, detail });
        } else {
            self.dropped += 1;
        }
    }

    /// Time to look for overdue requests again?
    pub fn liveness_due(&mut self, now: Micros) -> bool {
        if now < self.next_liveness_check {
            return false;
        }
        self.next_liveness_check = now + LIVENESS_CHECK_EVERY_US;
        true
    }

    /// A correct replica's executor produced a result for `key` at `at`.
    pub fn executed(&mut self, now: Micros, r: ReplicaId, key: RequestKey, at: Seq, duplicate: bool) {
        if duplicate {
            return;
        }
        let Some(lives) = self.executions.get_mut(r.index()) else {
            return;
        };
        let (c, q) = key;
        if !lives.insert(c, q) {
            self.violate(
                ViolationKind::ExactlyOnce,
                now,
                format!("{r:?} executed {c:?}/{q:?} again in one executor life (now at {at:?})"),
            );
        }
    }

    /// The replica's executor starts over (restart, or a snapshot installed).
    pub fn executor_reset(&mut self, r: ReplicaId) {
        if let Some(lives) = self.executions.get_mut(r.index()) {
            lives.clear();
        }
    }

    /// A NEW-VIEW for `(lane, view)` went out: is it the first that high?
    pub fn new_view_formed(&mut self, lane: LaneId, view: View) -> bool {
        let e = self.new_views.entry(lane).or_insert(View(0));
        if view > *e {
            *e = view;
            true
        } else {
            false
        }
    }

    pub fn may_trigger_crash(&self) -> bool {
        self.triggered_crashes < TRIGGERED_CRASHES_MAX
    }

    pub fn triggered_crash(&mut self) {
        self.triggered_crashes += 1;
    }
}

/// `None` when every replica listed executed as far as the furthest one
/// (`(replica, next position to execute)` of the live correct replicas);
/// otherwise who is behind, e.g. `… up to 40: r2 at 31`.
pub fn left_behind(at: &[(ReplicaId, u64)]) -> Option<String> {
    let top = at.iter().map(|(_, s)| *s).max()?;
    let behind: Vec<String> = at
        .iter()
        .filter(|(_, s)| *s < top)
        .map(|(r, s)| format!("{r:?} at {s}"))
        .collect();
    (!behind.is_empty()).then(|| {
        format!(
            "correct replicas left behind after the run (others executed up to {top}): {}",
            behind.join(", ")
        )
    })
}

/// `None` when every replica listed is active in the same view of every
/// lane; otherwise what differs, e.g. `lane 0: r3 changing to v5, r0 r1 r2 in v4`.
pub fn view_split(views: &[(ReplicaId, Vec<(u64, bool)>)]) -> Option<String> {
    let lanes = views.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
    let mut split = Vec::new();
    for lane in 0..lanes {
        let mut by_state: BTreeMap<(u64, bool), Vec<String>> = BTreeMap::new();
        for (r, v) in views {
            if let Some(&(view, active)) = v.get(lane) {
                by_state.entry((view, active)).or_default().push(format!("{r:?}"));
            }
        }
        let all_active = by_state.keys().all(|(_, active)| *active);
        if by_state.len() > 1 || !all_active {
            let parts: Vec<String> = by_state
                .iter()
                .map(|((view, active), rs)| {
                    format!(
                        "{} {} v{view}",
                        rs.join(" "),
                        if *active { "in" } else { "changing to" }
                    )
                })
                .collect();
            split.push(format!("lane {lane}: {}", parts.join(", ")));
        }
    }
    (!split.is_empty()).then(|| {
        format!(
            "correct replicas do not share one active view at the end: {}",
            split.join("; ")
        )
    })
}

/// The kinds that injected something in a run: a Byzantine kind when its
/// replica actually misbehaved, a network kind when it hit a message, a
/// crash kind when a replica went down.
pub fn active_kinds(plan: &Plan, c: &Counters) -> FaultSet {
    let has = |name: &str| c.faults.get(name).copied().unwrap_or(0) > 0;
    let assigned = |k: FaultKind| plan.byzantine.iter().any(|(_, b)| *b == k);
    let mut set = FaultSet::none();
    for k in plan.drawn.iter() {
        let active = match k {
            FaultKind::Delay => has("delay-spike") || plan.link_faults.slow_link_ppm > 0,
            FaultKind::Loss => has("loss"),
            FaultKind::Duplicate => has("dup"),
            FaultKind::Reorder => has("reorder"),
            FaultKind::Partition | FaultKind::AsymPartition => {
                has("partition-drop")
                    && plan.partitions.iter().any(|p| {
                        (p.kind == crate::net::PartitionKind::Symmetric) == (k == FaultKind::Partition)
                    })
            }
            FaultKind::Crash => !plan.crashes.is_empty() && has("crash"),
            FaultKind::Outage => {
                has("crash-in-view-change")
                    || has("crash-in-state-transfer")
                    || (!plan.smart.outages.is_empty() && has("crash"))
            }
            FaultKind::Skew => has("clock-skew"),
            FaultKind::ClusterRestart => has("cluster-restart-crash"),
            FaultKind::Silent => assigned(k) && has("byz-silent-drop"),
            FaultKind::Equivocate => assigned(k) && has("byz-equivocate"),
            FaultKind::ConflictingVotes => {
                assigned(k) && (has("byz-conflicting-vote") || has("byz-hidden-certificates"))
            }
            FaultKind::Corrupt => assigned(k) && has("byz-corrupt"),
            FaultKind::Replay => assigned(k) && has("byz-replay"),
            FaultKind::Flood => assigned(k) && has("byz-flood"),
            FaultKind::Twins => assigned(k),
            FaultKind::TwinsResplit => assigned(k) && has("twins-resplit"),
            FaultKind::WithholdPace => assigned(k) && has("byz-withhold"),
            FaultKind::NvForge => assigned(k) && has("byz-nv-forge"),
            FaultKind::GarbageSnapshot => {
                assigned(k) && (has("byz-garbage-snapshot") || has("byz-checkpoint-withheld"))
            }
            FaultKind::Throttle => assigned(k) && has("byz-throttle"),
            FaultKind::InTheDark => assigned(k) && has("byz-in-the-dark"),
            FaultKind::Censor => assigned(k) && has("byz-censor"),
            FaultKind::OrderAttack => assigned(k) && (has("byz-order-ground") || has("byz-order-attack")),
            FaultKind::FailureSpam => assigned(k) && has("byz-failure-spam"),
            FaultKind::FakeAnswer => {
                assigned(k) && (has("byz-fake-result") || has("byz-fake-busy") || has("byz-lure-drop"))
            }
            FaultKind::BadAuth => has("byz-client-bad-auth"),
            FaultKind::DupSeq => has("byz-client-dup-seq"),
            FaultKind::Oversized => has("byz-client-oversized"),
            FaultKind::SwitchSpam => has("byz-client-switch-spam"),
        };
        if active {
            set.insert(k);
        }
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::OrderingMode;

    fn extra() -> Extra {
        let opts = SimOptions::new(OrderingMode::Pbft, 1, 4);
        let plan = Plan::draw(&opts, &mut rand::SeedableRng::seed_from_u64(1));
        Extra::new(&opts, &plan)
    }

    /// `cluster-restart` is active only when one of its own crashes took a
    /// running replica down: another plan's crash (or one of its crashes
    /// landing on a replica already down) does not count. Before, any
    /// crash in the run made it active.
    #[test]
    fn cluster_restart_is_active_only_through_its_own_crashes() {
        let opts =
            SimOptions::new(OrderingMode::Pbft, 1, 4).with_faults("cluster-restart".parse().expect("kind"));
        let plan = Plan::draw(&opts, &mut rand::SeedableRng::seed_from_u64(1));
        assert!(plan.drawn.contains(FaultKind::ClusterRestart));
        let mut c = Counters::default();
        c.fault("crash");
        assert!(!active_kinds(&plan, &c).contains(FaultKind::ClusterRestart));
        c.fault("cluster-restart-crash");
        assert!(active_kinds(&plan, &c).contains(FaultKind::ClusterRestart));
    }

    #[test]
    fn a_replica_behind_the_others_at_the_end_is_named() {
        assert_eq!(left_behind(&[]), None);
        let even = [(ReplicaId(0), 40), (ReplicaId(1), 40), (ReplicaId(3), 40)];
        assert_eq!(left_behind(&even), None);
        let one_behind = [(ReplicaId(0), 40), (ReplicaId(2), 31), (ReplicaId(3), 40)];
        let d = left_behind(&one_behind).expect("r2 is behind");
        assert!(d.contains("up to 40") && d.contains("r2 at 31"), "{d}");
        assert!(!d.contains("r0") && !d.contains("r3"), "{d}");
    }

    #[test]
    fn a_second_execution_at_the_same_position_is_caught() {
        let mut e = extra();
        let key = (ClientId(0), RequestSeq(1));
        e.executed(1, ReplicaId(0), key, Seq(3), false);
        e.executed(1, ReplicaId(0), key, Seq(3), true);
        assert!(e.violations.is_empty(), "duplicates are answered, not executed");
        e.executed(2, ReplicaId(0), key, Seq(3), false);
        assert_eq!(e.violations.len(), 1);
        assert_eq!(e.violations[0].kind, ViolationKind::ExactlyOnce);
        // A new executor life (restart, install) starts counting again.
        e.executor_reset(ReplicaId(1));
        e.executed(3, ReplicaId(1), key, Seq(3), false);
        e.executor_reset(ReplicaId(1));
        e.executed(4, ReplicaId(1), key, Seq(3), false);
        assert_eq!(e.violations.len(), 1);
    }

    #[test]
    fn views_must_be_shared_and_active() {
        let r = |i| ReplicaId(i);
        let same = vec![
            (r(0), vec![(2, true), (0, true)]),
            (r(1), vec![(2, true), (0, true)]),
        ];
        assert_eq!(view_split(&same), None);
        let lone = vec![
            (r(0), vec![(2, true)]),
            (r(1), vec![(2, true)]),
            (r(3), vec![(3, false)]),
        ];
        let d = view_split(&lone).expect("split");
        assert!(d.contains("lane 0") && d.contains("r3 changing to v3"), "{d}");
        let changing = vec![(r(0), vec![(4, false)]), (r(1), vec![(4, false)])];
        assert!(view_split(&changing).is_some());
    }
}
