//! Tests of the partitioned executor: Algorithm 2 per request type, request
//! cycles (Algorithm 3) under every interleaving (`shuttle`), random streams
//! against the sequential executor, and the checker biting.

mod agreed_time;
mod alg2;
mod prop;
mod reprediction;
mod shuttle_cycles;
mod stream;

use super::*;
use crate::{Access, ExecContext, ExecResult, Executor, SequentialExecutor, Service};
use bytes::Bytes;
use chorus_core::{Authenticator, Batch, ClientId, Digest, Request, RequestSeq, Seq};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Registers `0..=255`. op = [0, k]: read k. [1, n, k1..kn, v]: reply the sum
/// of the n registers, then add v to each (a multi-key "putall"; its reply
/// depends on what ran before, so any reordering of conflicting requests
/// shows in the replies).
#[derive(Default)]
pub(super) struct Kv(Mutex<BTreeMap<u8, u64>>);

impl Service for Kv {
    fn execute(&self, op: &[u8], _ctx: &ExecContext) -> Bytes {
        let mut m = self.0.lock().unwrap();
        match op {
            [0, k] => Bytes::from(m.get(k).copied().unwrap_or(0).to_le_bytes().to_vec()),
            [1, n, rest @ ..] if rest.len() == *n as usize + 1 => {
                let (keys, v) = rest.split_at(*n as usize);
                let sum: u64 = keys.iter().map(|k| m.get(k).copied().unwrap_or(0)).sum();
                for k in keys {
                    let e = m.entry(*k).or_insert(0);
                    *e = e.wrapping_mul(3).wrapping_add(u64::from(v[0]));
                }
                Bytes::from(sum.to_le_bytes().to_vec())
            }
            _ => Bytes::from_static(b"bad op"),
        }
    }
    fn access(&self, op: &[u8]) -> Access {
        match op {
            [0, k] => Access::Keys {
                reads: vec![Bytes::from(vec![*k])],
                writes: vec![],
            },
            [1, n, rest @ ..] if rest.len() == *n as usize + 1 => Access::Keys {
                reads: vec![],
                writes: rest[..*n as usize]
                    .iter()
                    .map(|k| Bytes::from(vec![*k]))
                    .collect(),
            },
            _ => Access::Keys {
                reads: vec![],
                writes: vec![],
            },
        }
    }
    fn snapshot(&self) -> Bytes {
        let m = self.0.lock().unwrap();
        Bytes::from(
            m.iter()
                .flat_map(|(k, v)| std::iter::once(*k).chain(v.to_le_bytes()))
                .collect::<Vec<u8>>(),
        )
    }
    fn restore(&self, _s: &[u8]) -> Result<(), String> {
        Err("not needed".into())
    }
}

impl Kv {
    /// Replace the registers by a `snapshot()` (what `restore` would do;
    /// `Kv` itself refuses, the wrappers that need state transfer call this).
    pub(super) fn restore_registers(&self, s: &[u8]) -> Result<(), String> {
        if !s.len().is_multiple_of(9) {
            return Err("bad snapshot".into());
        }
        let mut m = self.0.lock().unwrap();
        m.clear();
        for c in s.chunks(9) {
            m.insert(c[0], u64::from_le_bytes(c[1..].try_into().unwrap()));
        }
        Ok(())
    }
}

/// A key of partition `p` (of `k`); `nth` picks among them.
pub(super) fn key_in(p: u16, k: u16, nth: usize) -> u8 {
    (0..=255u8)
        .filter(|x| partition_of_key(&[*x], k) == PartitionId(p))
        .nth(nth)
        .expect("enough keys per partition")
}

/// A batch of these requests (agreed time 0).
pub(super) fn batch_of(reqs: Vec<Request>) -> Arc<Batch> {
    Arc::new(Batch {
        requests: reqs,
        time_ms: 0,
    })
}

/// A request from client `c` writing one key in each of `parts`.
pub(super) fn req(c: u64, parts: &[u16], k: u16, v: u8) -> Arc<Request> {
    let mut op = vec![1, parts.len() as u8];
    op.extend(parts.iter().map(|&p| key_in(p, k, 0)));
    op.push(v);
    Arc::new(Request {
        memo: Default::default(),
        client: ClientId(c),
        seq: RequestSeq(1),
        flags: 0,
        op: Bytes::from(op),
        auth: Authenticator::Macs(Default::default()),
    })
}

/// K partition streams over a set of requests (indices into `reqs`).
#[derive(Clone, Debug)]
pub(super) struct Scenario {
    pub k: u16,
    pub reqs: Vec<Arc<Request>>,
    pub streams: Vec<Vec<usize>>,
}

impl Scenario {
    /// `reqs[i]` touches `parts[i]`; `streams[p]` lists request indices.
    pub fn new(k: u16, parts: &[&[u16]], streams: Vec<Vec<usize>>) -> Scenario {
        let reqs: Vec<_> = parts
            .iter()
            .enumerate()
            .map(|(i, ps)| req(i as u64 + 1, ps, k, i as u8))
            .collect();
        let s = Scenario { k, reqs, streams };
        let svc = Kv::default();
        for (p, stream) in s.streams.iter().enumerate() {
            for &i in stream {
                let pred = predict(&svc.access(&s.reqs[i].op), k);
                assert!(
                    pred.contains(PartitionId(p as u16)),
                    "request {i} is not predicted for {p}"
                );
            }
        }
        s
    }

    pub fn id(&self, i: usize) -> Digest {
        self.reqs[i].digest()
    }

    pub fn stream_entries(&self) -> Vec<Vec<StreamEntry>> {
        let svc = Kv::default();
        self.streams
            .iter()
            .map(|s| {
                s.iter()
                    .map(|&i| StreamEntry {
                        id: self.id(i),
                        prediction: predict(&svc.access(&self.reqs[i].op), self.k),
                        reprediction: false,
                    })
                    .collect()
            })
            .collect()
    }

    pub fn total_requests(&self) -> usize {
        let mut all: Vec<usize> = self.streams.iter().flatten().copied().collect();
        all.sort_unstable();
        all.dedup();
        all.len()
    }
}

/// What one run produced.
pub(super) struct Outcome {
    pub log: Vec<LogEvent>,
    pub results: Vec<PartitionedResult>,
    pub digest: Digest,
}

/// Deliver everything, then step partitions round-robin: the canonical run.
pub(super) fn run_canonical(s: &Scenario) -> Outcome {
    run_driven(s, &mut |_| 0, false)
}

/// A single-threaded run where `pick(n)` (n > 0) chooses among the possible
/// moves: delivering the next entry of some partition or stepping some
/// partition. Models any thread timing of one replica.
pub(super) fn run_driven(s: &Scenario, pick: &mut dyn FnMut(usize) -> usize, skip_sync: bool) -> Outcome {
    let mut ex = PartitionedExecutor::new(Arc::new(Kv::default()), s.k, 1024);
    ex.set_skip_sync_wait(skip_sync);
    let mut next = vec![0usize; s.k as usize];
    loop {
        // Moves: deliveries first, then steps.
        let deliverable: Vec<usize> = (0..s.k as usize)
            .filter(|&p| next[p] < s.streams[p].len())
            .collect();
        let n = deliverable.len() + s.k as usize;
        let mut tried = 0;
        let mut choice = pick(n) % n;
        let mut progressed = false;
        while tried < n {
            if choice < deliverable.len() {
                let p = deliverable[choice];
                ex.deliver(PartitionId(p as u16), s.reqs[s.streams[p][next[p]]].clone())
                    .unwrap();
                next[p] += 1;
                progressed = true;
                break;
            } else if ex.step(PartitionId((choice - deliverable.len()) as u16)) {
                progressed = true;
                break;
            }
            tried += 1;
            choice = (choice + 1) % n;
        }
        if !progressed {
            break;
        }
    }
    let mut out = Outcome {
        log: vec![],
        results: vec![],
        digest: ex.service_digest(),
    };
    ex.drain_log(&mut out.log);
    ex.drain_results(&mut out.results);
    out
}

/// The reference: the sequential executor on `order`, one batch each.
pub(super) fn sequential_reference(s: &Scenario, order: &[Digest]) -> (BTreeMap<Digest, Bytes>, Digest) {
    let svc = Arc::new(Kv::default());
    let mut ex = SequentialExecutor::new(svc.clone(), 1024);
    let by_id: BTreeMap<Digest, &Arc<Request>> = s.reqs.iter().map(|r| (r.digest(), r)).collect();
    for (i, id) in order.iter().enumerate() {
        let r: &Request = by_id[id];
        ex.submit(
            Seq(i as u64),
            Arc::new(Batch {
                requests: vec![r.clone()],
                time_ms: 0,
            }),
        );
    }
    let mut results: Vec<ExecResult> = Vec::new();
    ex.drain_results(&mut results);
    (
        results.into_iter().map(|r| (r.request, r.result)).collect(),
        svc.state_digest(),
    )
}

/// The run is a serial execution of a serial order consistent with the
/// streams, executes everything exactly once, and equals the sequential
/// executor on that order.
pub(super) fn assert_serially_equivalent(s: &Scenario, o: &Outcome) -> Vec<Digest> {
    let order =
        check_serial_order(&s.stream_entries(), &o.log, true).unwrap_or_else(|v| panic!("violations: {v:?}"));
    assert_eq!(
        order.len(),
        s.total_requests(),
        "every request executed exactly once"
    );
    let mut uniq = order.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), order.len(), "no request executed twice");
    assert_eq!(o.results.len(), order.len());
    let (replies, digest) = sequential_reference(s, &order);
    assert_eq!(
        o.digest, digest,
        "state digest differs from the sequential executor"
    );
    for r in &o.results {
        assert_eq!(Some(&r.result), replies.get(&r.request), "reply differs");
    }
    order
}
