//! Algorithm 2, one request type at a time, on the bare scheduler and the
//! executor; Algorithm 3 on the paper's two cycles (Fig. 4 and a
//! three-partition one) with the sequential driver.

use super::*;

fn sched_for(s: &Scenario) -> RequestScheduler<usize> {
    let mut sc = RequestScheduler::new(s.k, 64);
    let svc = Kv::default();
    for (p, stream) in s.streams.iter().enumerate() {
        for &i in stream {
            let e = Entry {
                id: s.id(i),
                prediction: predict(&svc.access(&s.reqs[i].op), s.k),
                payload: i,
            };
            sc.deliver(PartitionId(p as u16), e).unwrap();
        }
    }
    sc
}

fn run(step: Step<usize>) -> Job<usize> {
    match step {
        Step::Run(j) => j,
        Step::Wait => panic!("expected a job"),
    }
}

fn waits(step: Step<usize>) -> bool {
    matches!(step, Step::Wait)
}

const P0: PartitionId = PartitionId(0);
const P1: PartitionId = PartitionId(1);
const P2: PartitionId = PartitionId(2);

#[test]
fn execute_runs_at_once_whatever_other_partitions_do() {
    // 0: [A]; 1: [X sync] whose EXEC (in 0) never comes: 1 is stuck, 0 is not.
    let s = Scenario::new(2, &[&[0], &[0, 1]], vec![vec![0], vec![1]]);
    let mut sc = sched_for(&s);
    let j = run(sc.next(P0));
    assert_eq!((j.payload, j.consumed.clone()), (0, vec![(P0, 0)]));
    assert!(waits(sc.next(P1)), "a SYNC waits for its EXEC");
    sc.complete(&j);
    assert!(waits(sc.next(P0)));
    assert_eq!(sc.pending(P0), 0);
    assert_eq!(sc.pending(P1), 1);
}

#[test]
fn exec_waits_until_every_sync_heads_its_schedule() {
    // 0: [X exec]; 1: [A, X sync]; 2: [B, X sync].
    let s = Scenario::new(
        3,
        &[&[0, 1, 2], &[1], &[2]],
        vec![vec![0], vec![1, 0], vec![2, 0]],
    );
    let mut sc = sched_for(&s);
    assert!(waits(sc.next(P0)), "X's SYNCs are behind A and B");
    let a = run(sc.next(P1));
    assert!(waits(sc.next(P0)), "A is still running");
    sc.complete(&a);
    assert!(waits(sc.next(P0)), "B still heads partition 2");
    let b = run(sc.next(P2));
    sc.complete(&b);
    let x = run(sc.next(P0));
    assert_eq!(x.payload, 0);
    assert_eq!(x.partition, P0, "the EXEC runs in the lowest partition");
    assert_eq!(x.consumed, vec![(P0, 0), (P1, 1), (P2, 1)]);
    sc.complete(&x);
    assert!(sc.is_idle());
    assert_eq!(sc.stats().executed, 3);
    assert_eq!(sc.stats().cross_border, 1);
}

#[test]
fn sync_holds_its_partition_until_the_exec_finished() {
    // 0: [X exec]; 1: [X sync, C]. C must not run before X completes.
    let s = Scenario::new(2, &[&[0, 1], &[1]], vec![vec![0], vec![0, 1]]);
    let mut sc = sched_for(&s);
    assert!(waits(sc.next(P1)), "the SYNC heads 1: wait for the EXEC");
    let x = run(sc.next(P0));
    assert!(sc.is_busy(P0) && sc.is_busy(P1));
    assert!(waits(sc.next(P1)), "C waits while X runs");
    assert!(waits(sc.next(P0)));
    sc.complete(&x);
    let c = run(sc.next(P1));
    assert_eq!(c.payload, 1);
    sc.complete(&c);
    assert!(sc.is_idle());
}

#[test]
fn only_the_exec_partition_runs_a_cross_border_request() {
    // Both sub-requests head their schedules: the SYNC's worker never runs
    // it, the EXEC's worker does, exactly once.
    let s = Scenario::new(2, &[&[0, 1]], vec![vec![0], vec![0]]);
    let mut sc = sched_for(&s);
    assert!(waits(sc.next(P1)));
    let x = run(sc.next(P0));
    assert!(waits(sc.next(P0)) && waits(sc.next(P1)));
    sc.complete(&x);
    assert!(waits(sc.next(P0)) && waits(sc.next(P1)));
    assert!(sc.is_idle());
    assert_eq!(sc.stats().executed, 1);
}

#[test]
fn deliveries_are_checked_against_the_prediction() {
    let s = Scenario::new(3, &[&[0, 1]], vec![vec![0], vec![0]]);
    let svc = Kv::default();
    let entry = || Entry {
        id: s.id(0),
        prediction: predict(&svc.access(&s.reqs[0].op), 3),
        payload: 0usize,
    };
    let mut sc: RequestScheduler<usize> = RequestScheduler::new(3, 1);
    assert_eq!(sc.deliver(P2, entry()), Err(DeliverError::NotPredicted));
    assert_eq!(
        sc.deliver(PartitionId(3), entry()),
        Err(DeliverError::NoSuchPartition)
    );
    let mut small: RequestScheduler<usize> = RequestScheduler::new(1, 1);
    assert_eq!(
        small.deliver(P0, entry()),
        Err(DeliverError::PredictionOutOfRange)
    );
    assert_eq!(sc.deliver(P0, entry()), Ok(0));
    assert_eq!(sc.deliver(P0, entry()), Err(DeliverError::Full));
    let st = sc.stats();
    assert_eq!(
        (
            st.rejected_not_predicted,
            st.rejected_no_such_partition,
            st.rejected_full
        ),
        (1, 1, 1)
    );
    assert_eq!(small.stats().rejected_out_of_range, 1);
}

/// SAREK Fig. 4: R1 and R2 both span partitions 0 and 1 and were ordered
/// differently: 0: [R1, R2], 1: [R2, R1].
pub(crate) fn two_cycle() -> Scenario {
    Scenario::new(2, &[&[0, 1], &[0, 1]], vec![vec![0, 1], vec![1, 0]])
}

/// R1(0,1), R2(1,2), R3(0,2): 0: [R1, R3], 1: [R2, R1], 2: [R3, R2]; each
/// head waits on the next partition round the ring.
pub(crate) fn three_cycle() -> Scenario {
    Scenario::new(
        3,
        &[&[0, 1], &[1, 2], &[0, 2]],
        vec![vec![0, 2], vec![1, 0], vec![2, 1]],
    )
}

#[test]
fn two_partition_cycle_moves_the_lowest_partitions_head() {
    let s = two_cycle();
    let o = run_canonical(&s);
    let resolved: Vec<_> = o
        .log
        .iter()
        .filter(|e| matches!(e, LogEvent::Resolved { .. }))
        .collect();
    assert_eq!(
        resolved,
        vec![&LogEvent::Resolved {
            moved: s.id(0),
            cycle: vec![P0, P1]
        }]
    );
    let order = assert_serially_equivalent(&s, &o);
    assert_eq!(order, vec![s.id(0), s.id(1)]);
}

#[test]
fn three_partition_cycle_is_resolved() {
    let s = three_cycle();
    let o = run_canonical(&s);
    let order = assert_serially_equivalent(&s, &o);
    // R1 heads the lowest partition of the ring and is moved; then R3 (now
    // heading 0 and 2) runs, then R2.
    assert_eq!(order, vec![s.id(0), s.id(2), s.id(1)]);
    assert_eq!(
        o.log
            .iter()
            .filter(|e| matches!(e, LogEvent::Resolved { .. }))
            .count(),
        1
    );
}

#[test]
fn a_cycle_waits_for_the_moved_requests_last_sub_request() {
    // The ring of three_cycle, but R1's SYNC in 1 is not delivered yet:
    // nothing may move. Once it arrives the same resolution happens.
    let s = three_cycle();
    let mut sc: RequestScheduler<usize> = RequestScheduler::new(3, 8);
    let svc = Kv::default();
    let e = |i: usize| Entry {
        id: s.id(i),
        prediction: predict(&svc.access(&s.reqs[i].op), 3),
        payload: i,
    };
    sc.deliver(P0, e(0)).unwrap();
    sc.deliver(P0, e(2)).unwrap();
    sc.deliver(P1, e(1)).unwrap();
    sc.deliver(P2, e(2)).unwrap();
    sc.deliver(P2, e(1)).unwrap();
    for p in [P0, P1, P2, P0] {
        assert!(waits(sc.next(p)));
    }
    assert_eq!(sc.stats().cycles_resolved, 0);
    sc.deliver(P1, e(0)).unwrap();
    assert!(waits(sc.next(P2)), "the SYNC's worker may detect, not run");
    assert_eq!(sc.stats().cycles_resolved, 1);
    let r1 = run(sc.next(P0));
    assert_eq!(r1.payload, 0);
    assert_eq!(r1.consumed, vec![(P0, 0), (P1, 1)]);
}

#[test]
fn skipping_the_sync_wait_is_reported_by_the_checker() {
    // 0: [X exec(0,1)]; 1: [A, X sync]. The faulty scheduler runs X before A.
    let s = Scenario::new(2, &[&[0, 1], &[1]], vec![vec![0], vec![1, 0]]);
    let honest = run_driven(&s, &mut |_| 0, false);
    assert_serially_equivalent(&s, &honest);
    let faulty = run_driven(&s, &mut |_| 0, true);
    let v = check_serial_order(&s.stream_entries(), &faulty.log, true).expect_err("the checker must bite");
    assert!(
        v.iter()
            .any(|x| matches!(x, Violation::WrongSubRequests { id, .. } if *id == s.id(0))),
        "{v:?}"
    );
    assert!(v
        .iter()
        .any(|x| matches!(x, Violation::ReleasedApart { partition, .. } if *partition == P1)));
    // And it shows: X read A's register before A wrote it.
    let (_, digest) = sequential_reference(&s, &[s.id(1), s.id(0)]);
    assert_ne!(faulty.digest, digest);
}

#[test]
fn the_checker_rejects_a_jump_without_a_cycle() {
    // 0: [X(0,1)], 1: [A, X]. A log claiming X ran first is not justified.
    let s = Scenario::new(2, &[&[0, 1], &[1]], vec![vec![0], vec![1, 0]]);
    let log = vec![
        LogEvent::Executed {
            id: s.id(0),
            consumed: vec![(P0, 0), (P1, 1)],
        },
        LogEvent::Executed {
            id: s.id(1),
            consumed: vec![(P1, 0)],
        },
    ];
    let v = check_serial_order(&s.stream_entries(), &log, true).unwrap_err();
    assert_eq!(
        v,
        vec![Violation::RanAhead {
            id: s.id(0),
            partition: P1,
            head: s.id(1)
        }]
    );
    // The same jump in Fig. 4's cycle is the resolution, and accepted; the
    // other request jumping is not (it does not head the lowest partition).
    let c = two_cycle();
    let ok = vec![
        LogEvent::Executed {
            id: c.id(0),
            consumed: vec![(P0, 0), (P1, 1)],
        },
        LogEvent::Executed {
            id: c.id(1),
            consumed: vec![(P0, 1), (P1, 0)],
        },
    ];
    assert!(check_serial_order(&c.stream_entries(), &ok, true).is_ok());
    let wrong = vec![
        LogEvent::Executed {
            id: c.id(1),
            consumed: vec![(P0, 1), (P1, 0)],
        },
        LogEvent::Executed {
            id: c.id(0),
            consumed: vec![(P0, 0), (P1, 1)],
        },
    ];
    assert!(check_serial_order(&c.stream_entries(), &wrong, true).is_err());
    // Unfinished runs are reported when the run claims to be complete.
    assert!(check_serial_order(&c.stream_entries(), &ok[..1], true).is_err());
    assert!(check_serial_order(&c.stream_entries(), &ok[..1], false).is_ok());
}
