//! Request-cycle detection and the choice of resolution (SAREK §IV-B 2,
//! Algorithm 3), as a pure function of the partition heads.
//!
//! A partition is *waiting* when it is idle and its head is a cross-border
//! sub-request that cannot run yet. Algorithm 3 line 34 gives each waiting
//! partition one successor: the lowest partition of the head request whose
//! own head is not that request. Following successors is a functional graph.
//! A loop in it is a request cycle, and it is permanent: a looped partition's
//! head only changes by running its request, which needs the successor's head
//! to change first, all the way round. Every partition whose successor chain
//! ends in a loop is permanently stuck too (*fixed*): its head and everything
//! before the loop is decided by the agreed schedules alone, whatever the
//! threads did (Lemma 1, Lemma 3). Deliveries append behind the heads and
//! progress elsewhere cannot reach a fixed partition.
//!
//! Resolution (line 43–45) moves the head `r` of the loop's lowest partition
//! to the head of every schedule it is in, jumping over those schedules'
//! heads. That is only timing-independent if every jumped head is fixed, so
//! a loop is *enabled* when all of `r`'s partitions are fixed and all of `r`'s
//! sub-requests are delivered.
//!
//! Deviation from the paper, needed for Theorem 1 to hold with several
//! loops: two loops interfere when one's `r` shares a partition with the
//! other's region, and then the order in which they are resolved decides the
//! order of their requests in the shared partition. A loop's enabling can
//! depend on another loop having formed (a partition of `r` is fixed *because*
//! its chain ends in that other loop), so a replica whose threads were fast
//! in one region would resolve a different loop first than a slow one. Hence
//! loop `A` *depends on* loop `B` when a partition of `A`'s `r` chains into
//! `B`, and only the lowest loop of a *sink* strongly connected component of
//! that dependency graph, with every member enabled, is resolved. All these
//! facts are the same on every replica once they hold (they are about fixed
//! partitions only), and resolutions of different sink components touch
//! disjoint partitions, so they commute. Algorithm 3 walks from the lowest
//! blocked partition instead; for one loop at a time both agree.

use super::predict::PartitionId;
use chorus_core::Digest;

/// One partition's head as the detector sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Head<'a> {
    pub id: Digest,
    pub partitions: &'a [PartitionId],
    /// A cross-border head that is not ready and whose partition is idle.
    pub waiting: bool,
}

/// Algorithm 3 line 34: the partition a waiting head waits on.
pub(crate) fn successor(heads: &[Option<Head<'_>>], p: usize) -> Option<usize> {
    let h = heads[p].as_ref().filter(|h| h.waiting)?;
    h.partitions
        .iter()
        .map(|q| q.0 as usize)
        .find(|&q| heads[q].as_ref().map(|hq| hq.id) != Some(h.id))
}

/// Every request cycle among the heads, each listed from its lowest partition
/// in successor order; cycles sorted by that lowest partition.
pub(crate) fn find_cycles(heads: &[Option<Head<'_>>]) -> Vec<Vec<usize>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath(usize),
        Done,
    }
    let k = heads.len();
    let mut mark = vec![Mark::New; k];
    let mut cycles = Vec::new();
    for start in 0..k {
        if mark[start] != Mark::New {
            continue;
        }
        let mut path = Vec::new();
        let mut cur = Some(start);
        while let Some(p) = cur {
            match mark[p] {
                Mark::Done => break,
                Mark::OnPath(i) => {
                    let mut c = path[i..].to_vec();
                    let lowest = (0..c.len()).min_by_key(|&j| c[j]).expect("non-empty loop");
                    c.rotate_left(lowest);
                    cycles.push(c);
                    break;
                }
                Mark::New => {
                    mark[p] = Mark::OnPath(path.len());
                    path.push(p);
                    cur = successor(heads, p);
                }
            }
        }
        for p in path {
            mark[p] = Mark::Done;
        }
    }
    cycles.sort();
    cycles
}

/// For each partition, the index (into `cycles`) of the loop its successor
/// chain ends in; `None` for partitions that are not fixed.
pub(crate) fn chain_targets(heads: &[Option<Head<'_>>], cycles: &[Vec<usize>]) -> Vec<Option<usize>> {
    let k = heads.len();
    let mut target: Vec<Option<Option<usize>>> = vec![None; k];
    for (ci, c) in cycles.iter().enumerate() {
        for &p in c {
            target[p] = Some(Some(ci));
        }
    }
    for start in 0..k {
        let mut path = Vec::new();
        let mut cur = Some(start);
        let found = loop {
            match cur {
                None => break None,
                Some(p) => match target[p] {
                    Some(t) => break t,
                    None => {
                        path.push(p);
                        cur = successor(heads, p);
                        // Loops are all marked, so a walk never revisits.
                        debug_assert!(path.len() <= k);
                    }
                },
            }
        };
        for p in path {
            target[p] = Some(found);
        }
    }
    target.into_iter().map(|t| t.flatten()).collect()
}

/// The loops to resolve now, each listed from its lowest partition (whose
/// head is the request to move). `delivered(p)` says whether every
/// sub-request of the head of `p` has been delivered.
pub(crate) fn resolvable(heads: &[Option<Head<'_>>], delivered: &dyn Fn(usize) -> bool) -> Vec<Vec<usize>> {
    let cycles = find_cycles(heads);
    if cycles.is_empty() {
        return cycles;
    }
    let target = chain_targets(heads, &cycles);
    let n = cycles.len();
    // deps[i]: loops the partitions of loop i's request chain into; None if
    // loop i is not enabled.
    let deps: Vec<Option<Vec<usize>>> = cycles
        .iter()
        .map(|c| {
            let r = heads[c[0]].as_ref().expect("looped partitions have heads");
            let mut d: Vec<usize> = r
                .partitions
                .iter()
                .map(|q| target[q.0 as usize])
                .collect::<Option<Vec<usize>>>()?;
            if !delivered(c[0]) {
                return None;
            }
            d.sort_unstable();
            d.dedup();
            Some(d)
        })
        .collect();
    let reach = |from: usize| -> Option<Vec<bool>> {
        let mut seen = vec![false; n];
        let mut stack = vec![from];
        seen[from] = true;
        while let Some(i) = stack.pop() {
            for &j in deps[i].as_ref()? {
                if !seen[j] {
                    seen[j] = true;
                    stack.push(j);
                }
            }
        }
        Some(seen)
    };
    let reaches: Vec<Option<Vec<bool>>> = (0..n).map(reach).collect();
    (0..n)
        .filter(|&i| {
            let Some(ri) = &reaches[i] else { return false };
            // A sink component: everything i reaches reaches i back; and i
            // is its lowest loop (cycles are sorted by lowest partition).
            (0..n)
                .filter(|&j| ri[j])
                .all(|j| j >= i && reaches[j].as_ref().is_some_and(|rj| rj[i]))
        })
        .map(|i| cycles[i].clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(i: u8) -> Digest {
        Digest([i; 32])
    }

    fn parts(ps: &[u16]) -> Vec<PartitionId> {
        ps.iter().map(|&p| PartitionId(p)).collect()
    }

    fn w(id: u8, partitions: &[PartitionId]) -> Option<Head<'_>> {
        Some(Head {
            id: d(id),
            partitions,
            waiting: true,
        })
    }

    #[test]
    fn two_and_three_partition_loops_and_a_tail() {
        let (p01, p12, p02, p23) = (parts(&[0, 1]), parts(&[1, 2]), parts(&[0, 2]), parts(&[2, 3]));
        // 0: R1(0,1) and 1: R2(0,1) wait on each other; 2's R3(2,3) waits on
        // the empty partition 3: a tail that may still move, not a loop.
        let heads = vec![w(1, &p01), w(2, &p01), w(3, &p23), None];
        assert_eq!(find_cycles(&heads), vec![vec![0, 1]]);
        assert_eq!(
            chain_targets(&heads, &find_cycles(&heads)),
            vec![Some(0), Some(0), None, None]
        );
        assert_eq!(resolvable(&heads, &|_| true), vec![vec![0, 1]]);
        assert!(resolvable(&heads, &|_| false).is_empty(), "undelivered: wait");
        // Three partitions: 0 waits on 1, 1 on 2, 2 on 0.
        let heads = vec![w(1, &p01), w(2, &p12), w(3, &p02)];
        assert_eq!(find_cycles(&heads), vec![vec![0, 1, 2]]);
        assert_eq!(resolvable(&heads, &|_| true), vec![vec![0, 1, 2]]);
        // Not waiting (e.g. busy or ready): no loop through it.
        let mut heads = heads;
        heads[2].as_mut().unwrap().waiting = false;
        assert!(find_cycles(&heads).is_empty());
    }

    #[test]
    fn a_loop_whose_request_touches_a_moving_partition_waits() {
        // 0: R1(0,1,2), 1: R2(0,1): a loop; R1 also needs partition 2, whose
        // head R3(2,3) waits on empty 3 and may still move: not enabled.
        let (p012, p01, p23) = (parts(&[0, 1, 2]), parts(&[0, 1]), parts(&[2, 3]));
        let heads = vec![w(1, &p012), w(2, &p01), w(3, &p23), None];
        assert_eq!(find_cycles(&heads), vec![vec![0, 1]]);
        assert!(resolvable(&heads, &|_| true).is_empty());
    }

    #[test]
    fn dependent_loops_resolve_the_sink_first() {
        // Loop A = {0,1}: 0: R1(0,1,4), 1: R2(0,1). Loop B = {2,3}:
        // 2: R3(2,3), 3: R4(2,3). Partition 4: R5(3,4) waits on 3, so its
        // chain ends in B: A depends on B. B is the sink: resolve B first,
        // even though A has the lower partition.
        let (p014, p01, p23, p34) = (parts(&[0, 1, 4]), parts(&[0, 1]), parts(&[2, 3]), parts(&[3, 4]));
        let heads = vec![w(1, &p014), w(2, &p01), w(3, &p23), w(4, &p23), w(5, &p34)];
        assert_eq!(find_cycles(&heads), vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(resolvable(&heads, &|_| true), vec![vec![2, 3]]);
        // If B's request is not delivered yet, nothing moves (A must wait
        // for B either way).
        assert!(resolvable(&heads, &|p| p != 2).is_empty());
    }

    #[test]
    fn mutually_dependent_loops_resolve_the_lowest() {
        // A = {0,1} with R1(0,1,4); B = {2,3} with R3(2,3,5); 4: R5(2,4)
        // chains into B, 5: R6(0,5) chains into A. One component: lowest A.
        let (p014, p01, p235, p23, p24, p05) = (
            parts(&[0, 1, 4]),
            parts(&[0, 1]),
            parts(&[2, 3, 5]),
            parts(&[2, 3]),
            parts(&[2, 4]),
            parts(&[0, 5]),
        );
        let heads = vec![
            w(1, &p014),
            w(2, &p01),
            w(3, &p235),
            w(4, &p23),
            w(5, &p24),
            w(6, &p05),
        ];
        assert_eq!(find_cycles(&heads), vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(resolvable(&heads, &|_| true), vec![vec![0, 1]]);
    }
}
