//! The serial-order checker for the partitioned executor: replays the
//! scheduler's log against the agreed partition streams and says whether the
//! run equals a sequential execution of one serial order (the order of the
//! log) that respects every partition's stream, except where a request cycle
//! forced a request ahead (SAREK Algorithm 3). Written independently of the
//! scheduler: it only knows the streams and the rules.
//!
//! Rules checked, per executed request `r` in log order:
//! - it consumes exactly one sub-request in each predicted partition, the
//!   earliest not yet consumed one there (exactly once; an EXEC never runs
//!   without its SYNCs, a SYNC is never released apart from its EXEC);
//! - each of them heads its partition's remaining stream, or else `r` heads
//!   the lowest partition of a request cycle among the remaining heads and
//!   every partition of `r` is permanently stuck (its wait chain ends in a
//!   cycle), so jumping over their heads is the deterministic resolution;
//! - with `complete`, nothing is left unexecuted at the end.

use super::predict::{PartitionId, Prediction};
use super::scheduler::LogEvent;
use chorus_core::Digest;
use std::collections::{BTreeMap, BTreeSet};

/// One sub-request of an agreed partition stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamEntry {
    pub id: Digest,
    pub prediction: Prediction,
    /// A re-prediction's CROSS-BORDER-SYNC (SAREK §IV-D). Until its request
    /// is suspended the executor holds its partition's stream back at it,
    /// so to the rules it is not there yet.
    pub reprediction: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// The log names a sub-request the streams do not have.
    UnknownEntry { partition: PartitionId, position: u64 },
    /// A sub-request consumed a second time.
    ConsumedTwice { partition: PartitionId, position: u64 },
    /// A request did not consume exactly its predicted sub-requests.
    WrongSubRequests {
        id: Digest,
        expected: Vec<(PartitionId, u64)>,
        got: Vec<(PartitionId, u64)>,
    },
    /// A request ran ahead of an earlier sub-request of `partition` without
    /// a request cycle to justify it.
    RanAhead {
        id: Digest,
        partition: PartitionId,
        head: Digest,
    },
    /// A SYNC was dropped on its own instead of with its EXEC.
    ReleasedApart { partition: PartitionId, position: u64 },
    /// The run ended with this sub-request never executed.
    Unexecuted { partition: PartitionId, position: u64 },
    /// A suspension that does not only add partitions above the highest
    /// predicted, or of a request not heading its partitions.
    BadSuspension { id: Digest },
}

struct Replay<'a> {
    streams: &'a [Vec<StreamEntry>],
    /// Remaining stream positions per partition, in stream order.
    remaining: Vec<Vec<u64>>,
    /// Suspended requests' new predictions (SAREK §IV-D).
    repredicted: BTreeMap<Digest, Prediction>,
}

/// An entry as the rules see it: with its request's re-prediction, if any.
struct Seen<'a> {
    id: Digest,
    prediction: &'a Prediction,
}

impl Replay<'_> {
    fn head(&self, q: usize) -> Option<Seen<'_>> {
        let e = &self.streams[q][*self.remaining[q].first()? as usize];
        let re = self.repredicted.get(&e.id);
        if e.reprediction && re.is_none() {
            return None;
        }
        Some(Seen {
            id: e.id,
            prediction: re.unwrap_or(&e.prediction),
        })
    }

    fn first_of(&self, q: usize, id: Digest) -> Option<u64> {
        self.remaining[q]
            .iter()
            .copied()
            .find(|&pos| self.streams[q][pos as usize].id == id)
    }

    /// The head of `q` cannot run now: cross-border and not at every head.
    fn waiting(&self, q: usize) -> bool {
        self.head(q).is_some_and(|h| {
            h.prediction.is_cross_border()
                && !h
                    .prediction
                    .partitions()
                    .iter()
                    .all(|x| self.head(x.0 as usize).map(|e| e.id) == Some(h.id))
        })
    }

    /// SAREK Algorithm 3 line 34.
    fn successor(&self, q: usize) -> Option<usize> {
        if !self.waiting(q) {
            return None;
        }
        let h = self.head(q)?;
        h.prediction
            .partitions()
            .iter()
            .map(|x| x.0 as usize)
            .find(|&x| self.head(x).map(|e| e.id) != Some(h.id))
    }

    /// Does `q`'s wait chain end in a cycle (so `q` can never move alone)?
    fn stuck(&self, q: usize) -> bool {
        let mut seen = BTreeSet::new();
        let mut cur = Some(q);
        while let Some(x) = cur {
            if !seen.insert(x) {
                return true;
            }
            cur = self.successor(x);
        }
        false
    }

    /// May `id` jump over the heads of its partitions now?
    fn cycle_justifies(&self, id: Digest, prediction: &Prediction) -> bool {
        let heads_it: Vec<usize> = prediction
            .partitions()
            .iter()
            .map(|x| x.0 as usize)
            .filter(|&x| self.head(x).map(|e| e.id) == Some(id))
            .collect();
        // Some partition that `id` heads lies on a cycle in which it is the
        // lowest partition (other partitions it heads may be on the tree
        // leading into that cycle).
        let on_cycle = heads_it.iter().any(|&p0| {
            let mut cur = self.successor(p0);
            let mut steps = 0;
            loop {
                match cur {
                    Some(x) if x == p0 => break true,
                    Some(x) if x < p0 || steps > self.remaining.len() => break false,
                    Some(x) => {
                        cur = self.successor(x);
                        steps += 1;
                    }
                    None => break false,
                }
            }
        });
        on_cycle && prediction.partitions().iter().all(|x| self.stuck(x.0 as usize))
    }
}

/// Replay `log` against `streams` (partition `p`'s agreed sub-requests in
/// order, position = index). Returns the serial order (request ids in log
/// order) or every violation found.
pub fn check_serial_order(
    streams: &[Vec<StreamEntry>],
    log: &[LogEvent],
    complete: bool,
) -> Result<Vec<Digest>, Vec<Violation>> {
    let mut replay = Replay {
        streams,
        remaining: streams.iter().map(|s| (0..s.len() as u64).collect()).collect(),
        repredicted: BTreeMap::new(),
    };
    let mut violations = Vec::new();
    let mut order = Vec::new();
    let known = |p: PartitionId, pos: u64| {
        streams
            .get(p.0 as usize)
            .is_some_and(|s| (pos as usize) < s.len())
    };
    for event in log {
        match event {
            LogEvent::Resolved { .. } => {}
            LogEvent::Suspended { id, prediction } => {
                // It was handed out: it heads every partition it held.
                let old = replay.repredicted.get(id).cloned().or_else(|| {
                    (0..streams.len()).find_map(|q| {
                        replay
                            .head(q)
                            .filter(|h| h.id == *id)
                            .map(|h| h.prediction.clone())
                    })
                });
                let ok = old.is_some_and(|old| {
                    let heads = old
                        .partitions()
                        .iter()
                        .all(|q| replay.head(q.0 as usize).is_some_and(|h| h.id == *id));
                    let added: Vec<_> = prediction
                        .partitions()
                        .iter()
                        .filter(|q| !old.contains(**q))
                        .collect();
                    heads
                        && old.partitions().iter().all(|q| prediction.contains(*q))
                        && !added.is_empty()
                        && added.iter().all(|q| Some(*q) > old.partitions().last())
                });
                if !ok {
                    violations.push(Violation::BadSuspension { id: *id });
                }
                replay.repredicted.insert(*id, prediction.clone());
            }
            LogEvent::Released { partition, position } => {
                violations.push(Violation::ReleasedApart {
                    partition: *partition,
                    position: *position,
                });
                if let Some(r) = replay.remaining.get_mut(partition.0 as usize) {
                    r.retain(|x| x != position);
                }
            }
            LogEvent::Executed { id, consumed } => {
                order.push(*id);
                if let Some(&(p, pos)) = consumed.iter().find(|&&(p, pos)| !known(p, pos)) {
                    violations.push(Violation::UnknownEntry {
                        partition: p,
                        position: pos,
                    });
                    continue;
                }
                let Some(&(p, pos)) = consumed.first() else {
                    violations.push(Violation::WrongSubRequests {
                        id: *id,
                        expected: vec![],
                        got: vec![],
                    });
                    continue;
                };
                let prediction = replay
                    .repredicted
                    .get(id)
                    .cloned()
                    .unwrap_or_else(|| streams[p.0 as usize][pos as usize].prediction.clone());
                let expected: Vec<(PartitionId, u64)> = prediction
                    .partitions()
                    .iter()
                    .filter_map(|&q| replay.first_of(q.0 as usize, *id).map(|at| (q, at)))
                    .collect();
                if expected != *consumed {
                    violations.push(Violation::WrongSubRequests {
                        id: *id,
                        expected: expected.clone(),
                        got: consumed.clone(),
                    });
                }
                let at_heads = consumed
                    .iter()
                    .all(|&(q, at)| replay.remaining[q.0 as usize].first() == Some(&at));
                if !at_heads && !replay.cycle_justifies(*id, &prediction) {
                    for &(q, at) in consumed {
                        if let Some(h) = replay
                            .head(q.0 as usize)
                            .filter(|_| replay.remaining[q.0 as usize].first() != Some(&at))
                        {
                            violations.push(Violation::RanAhead {
                                id: *id,
                                partition: q,
                                head: h.id,
                            });
                        }
                    }
                }
                replay.repredicted.remove(id);
                for &(q, at) in consumed {
                    let r = &mut replay.remaining[q.0 as usize];
                    match r.iter().position(|&x| x == at) {
                        Some(i) => {
                            r.remove(i);
                        }
                        None => violations.push(Violation::ConsumedTwice {
                            partition: q,
                            position: at,
                        }),
                    }
                }
            }
        }
    }
    if complete {
        for (p, r) in replay.remaining.iter().enumerate() {
            for &pos in r {
                violations.push(Violation::Unexecuted {
                    partition: PartitionId(p as u16),
                    position: pos,
                });
            }
        }
    }
    if violations.is_empty() {
        Ok(order)
    } else {
        Err(violations)
    }
}

/// Each partition's effective schedule: the requests that consumed its
/// sub-requests, in log order. Equal on every replica whatever the threads
/// did; this is what the determinism tests compare.
pub fn effective_schedules(partitions: u16, log: &[LogEvent]) -> Vec<Vec<Digest>> {
    let mut out = vec![Vec::new(); partitions as usize];
    for e in log {
        if let LogEvent::Executed { id, consumed } = e {
            for (q, _) in consumed {
                out[q.0 as usize].push(*id);
            }
        }
    }
    out
}
