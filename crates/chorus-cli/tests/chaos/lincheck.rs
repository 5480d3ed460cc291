//! Linearizability of one key's history against a single-register model
//! (Wing & Gong's search with Lowe's memoisation of (linearized set, value),
//! as in Knossos and Porcupine). Keys are checked independently: a
//! key-value store is linearizable iff every key is (locality, Herlihy &
//! Wing §3.2), so histories stay short and the search small.

use std::collections::HashSet;

/// What one operation did, as the client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Put of a unique value id.
    Write(u64),
    /// Get that returned a value id (`None`: the key was absent).
    Read(Option<u64>),
}

/// One operation on one key. `ret: None` is an indeterminate operation
/// (timed out, "info" in Jepsen's terms): it may have taken effect at any
/// time after `call`, or never.
#[derive(Clone, Debug)]
pub struct Op {
    pub call: u64,
    pub ret: Option<u64>,
    pub kind: Kind,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Linearizable,
    NotLinearizable,
    /// The search exceeded its state budget.
    Unknown,
}

/// Check one key's history. Reads without a result carry no information and
/// must be left out by the caller; indeterminate writes may be linearized
/// anywhere after their call or left out.
pub fn check(ops: &[Op], budget: usize) -> Verdict {
    let n = ops.len();
    let words = n.div_ceil(64).max(1);
    let must: Vec<bool> = ops.iter().map(|o| o.ret.is_some()).collect();
    let remaining_must = must.iter().filter(|m| **m).count();
    let mut seen: HashSet<(Vec<u64>, Option<u64>)> = HashSet::new();
    // Explicit stack of (linearized set, register value, completed ops still to place).
    let mut stack = vec![(vec![0u64; words], None::<u64>, remaining_must)];
    while let Some((done, value, left)) = stack.pop() {
        if left == 0 {
            return Verdict::Linearizable;
        }
        if !seen.insert((done.clone(), value)) {
            continue;
        }
        if seen.len() > budget {
            return Verdict::Unknown;
        }
        let is_done = |i: usize| done[i / 64] >> (i % 64) & 1 == 1;
        // An op can go next only if no pending completed op returned before it was called.
        let horizon = (0..n)
            .filter(|&i| !is_done(i))
            .filter_map(|i| ops[i].ret)
            .min()
            .unwrap_or(u64::MAX);
        for i in (0..n).filter(|&i| !is_done(i)) {
            let op = &ops[i];
            if op.call > horizon {
                continue;
            }
            let next = match op.kind {
                Kind::Write(v) => Some(v),
                Kind::Read(r) if r == value => value,
                Kind::Read(_) => continue,
            };
            let mut d = done.clone();
            d[i / 64] |= 1 << (i % 64);
            stack.push((d, next, left - usize::from(must[i])));
        }
    }
    Verdict::NotLinearizable
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(call: u64, ret: Option<u64>, v: u64) -> Op {
        Op {
            call,
            ret,
            kind: Kind::Write(v),
        }
    }
    fn r(call: u64, ret: u64, v: Option<u64>) -> Op {
        Op {
            call,
            ret: Some(ret),
            kind: Kind::Read(v),
        }
    }

    #[test]
    fn sequential_history_is_linearizable() {
        let h = [
            r(0, 1, None),
            w(2, Some(3), 1),
            r(4, 5, Some(1)),
            w(6, Some(7), 2),
            r(8, 9, Some(2)),
        ];
        assert_eq!(check(&h, 1 << 20), Verdict::Linearizable);
    }

    #[test]
    fn stale_read_after_acknowledged_write_is_caught() {
        let h = [w(0, Some(1), 1), w(2, Some(3), 2), r(4, 5, Some(1))];
        assert_eq!(check(&h, 1 << 20), Verdict::NotLinearizable);
    }

    #[test]
    fn lost_acknowledged_write_is_caught() {
        let h = [w(0, Some(1), 1), r(2, 3, None)];
        assert_eq!(check(&h, 1 << 20), Verdict::NotLinearizable);
    }

    #[test]
    fn concurrent_write_may_be_seen_or_not() {
        let h = [
            w(0, Some(10), 1),
            r(1, 2, None),
            r(3, 4, Some(1)),
            r(5, 6, Some(1)),
        ];
        assert_eq!(check(&h, 1 << 20), Verdict::Linearizable);
        // ...but once seen it cannot be unseen.
        let h = [w(0, Some(10), 1), r(1, 2, Some(1)), r(3, 4, None)];
        assert_eq!(check(&h, 1 << 20), Verdict::NotLinearizable);
    }

    #[test]
    fn indeterminate_write_may_take_effect_late_or_never() {
        let late = [w(0, None, 1), w(2, Some(3), 2), r(10, 11, Some(1))];
        assert_eq!(check(&late, 1 << 20), Verdict::Linearizable);
        let never = [w(0, None, 1), w(2, Some(3), 2), r(10, 11, Some(2))];
        assert_eq!(check(&never, 1 << 20), Verdict::Linearizable);
        // An indeterminate write cannot take effect before it was invoked.
        let early = [r(0, 1, Some(1)), w(2, None, 1)];
        assert_eq!(check(&early, 1 << 20), Verdict::NotLinearizable);
    }

    #[test]
    fn read_of_a_value_nobody_wrote_is_caught() {
        let h = [w(0, Some(1), 1), r(2, 3, Some(7))];
        assert_eq!(check(&h, 1 << 20), Verdict::NotLinearizable);
    }

    #[test]
    fn budget_exhaustion_is_reported_not_guessed() {
        // Many concurrent indeterminate writes and one impossible read force a full search.
        let mut h: Vec<Op> = (0..20).map(|v| w(0, None, v)).collect();
        h.push(r(1, 2, Some(99)));
        assert_eq!(check(&h, 1_000), Verdict::Unknown);
    }
}
