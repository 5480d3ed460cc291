//! SAREK §IV-D re-prediction in the partitioned executor: a request that
//! accesses a partition outside its prediction is suspended (nothing runs,
//! nothing is rolled back), resumes when its re-prediction SYNC heads the
//! added partition, and every interleaving of the streams gives the same
//! schedules, replies and cuts, also when the SYNC arrives before the
//! suspension (the gate) and across a state transfer.

use super::*;
use chorus_core::{Cell, LaneId, RePrediction, RePredictionCert, Slot};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `Kv` plus op `[2, n, k1..kn, v]`: the putall of `[1, n, ..]`, but its
/// declared access names only `k1` (an imprecise PREDICT(), SAREK §IV-D);
/// `execution_access` names every key.
#[derive(Default)]
struct Mis(Kv);

fn as_putall(op: &[u8]) -> Vec<u8> {
    let mut v = op.to_vec();
    if v.first() == Some(&2) {
        v[0] = 1;
    }
    v
}

impl Service for Mis {
    fn execute(&self, op: &[u8], ctx: &ExecContext) -> Bytes {
        self.0.execute(&as_putall(op), ctx)
    }
    fn access(&self, op: &[u8]) -> Access {
        match op {
            [2, n, rest @ ..] if *n >= 1 && rest.len() == *n as usize + 1 => Access::Keys {
                reads: vec![],
                writes: vec![Bytes::from(vec![rest[0]])],
            },
            _ => self.0.access(op),
        }
    }
    fn execution_access(&self, op: &[u8]) -> Option<Access> {
        (op.first() == Some(&2)).then(|| self.0.access(&as_putall(op)))
    }
    fn snapshot(&self) -> Bytes {
        self.0.snapshot()
    }
    fn restore(&self, s: &[u8]) -> Result<(), String> {
        self.0.restore_registers(s)
    }
}

const K: u16 = 3;

/// A request of client `c` writing the first key of each of `parts`; with
/// `mis` only the first partition is predicted.
fn request(c: u64, parts: &[u16], v: u8, mis: bool) -> Request {
    let mut r = (*req(c, parts, K, v)).clone();
    if mis {
        let mut op = r.op.to_vec();
        op[0] = 2;
        r.op = Bytes::from(op);
    }
    r
}

/// What the ordering side orders in each added partition (the executor
/// trusts the ordering side's certificate check; no votes needed here).
fn sync_of(body: &RePrediction) -> Request {
    RePredictionCert {
        body: body.clone(),
        votes: vec![],
    }
    .to_request()
}

fn exec(per_cut: u64) -> SarekExecutor {
    SarekExecutor::new(Arc::new(Mis::default()), K, per_cut, 1024).recording()
}

use super::batch_of as batch;

fn cell(p: usize, slot: u64) -> Cell {
    Cell {
        lane: LaneId(p as u32),
        slot: Slot(slot),
    }
}

fn drain(e: &mut SarekExecutor) -> (Vec<ExecResult>, Vec<RePrediction>) {
    let (mut r, mut p) = (Vec::new(), Vec::new());
    e.drain_results(&mut r);
    e.drain_repredictions(&mut p);
    r.sort();
    (r, p)
}

#[test]
fn a_mispredicted_request_is_suspended_and_resumes_on_its_reprediction_sync() {
    let r = request(1, &[0, 2], 7, true);
    let x = request(2, &[2], 1, false);
    let mut e = exec(1 << 20);
    assert!(e.submit_stream(cell(0, 0), batch(vec![r.clone()])));
    let (results, bodies) = drain(&mut e);
    assert!(results.is_empty(), "suspended, not run");
    assert_eq!(
        bodies,
        vec![RePrediction {
            request: r.digest(),
            client: r.client,
            seq: r.seq,
            partitions: vec![0, 2],
            added: vec![2],
        }]
    );
    assert_eq!(e.stats().scheduler.suspended, 1);
    // Suspended, it lacks partition 2's sub-request, which its certificate
    // brings: nothing to hand on (`missing_copies`).
    assert!(e.missing_copies().is_empty());
    assert!(e.missing_copies().is_empty());
    // Partition 2 goes on until the SYNC heads it.
    assert!(e.submit_stream(cell(2, 0), batch(vec![x.clone()])));
    let (results, _) = drain(&mut e);
    assert_eq!(
        results.iter().map(|r| r.client).collect::<Vec<_>>(),
        vec![x.client]
    );
    assert!(e.submit_stream(cell(2, 1), batch(vec![sync_of(&bodies[0])])));
    let (results, more) = drain(&mut e);
    assert!(more.is_empty());
    assert_eq!(results.len(), 1);
    // It ran after x, on both keys: x's write to key(2) is in its reply sum.
    let mut seq = SequentialExecutor::new(Arc::new(Kv::default()), 1024);
    let plain = |r: &Request| {
        let mut r = r.clone();
        r.op = Bytes::from(as_putall(&r.op));
        r
    };
    seq.submit(Seq(0), batch(vec![plain(&x), plain(&r)]));
    let mut want = Vec::new();
    seq.drain_results(&mut want);
    assert_eq!(results[0].result, want[1].result);
    assert_eq!(e.pending(), vec![0; K as usize]);
    assert_eq!(e.audit(), Some(vec![]));
}

#[test]
fn a_reprediction_sync_that_arrives_before_the_suspension_waits_at_its_gate() {
    let r = request(1, &[0, 2], 7, true);
    let y = request(2, &[2], 1, false);
    let body = RePrediction {
        request: r.digest(),
        client: r.client,
        seq: r.seq,
        partitions: vec![0, 2],
        added: vec![2],
    };
    let run = |sync_first: bool| {
        let mut e = exec(1 << 20);
        let feed_2 = |e: &mut SarekExecutor| {
            assert!(e.submit_stream(cell(2, 0), batch(vec![sync_of(&body), y.clone()])));
        };
        if sync_first {
            feed_2(&mut e);
            // y waits behind the gate: r is not suspended here yet.
            assert!(drain(&mut e).0.is_empty());
        }
        assert!(e.submit_stream(cell(0, 0), batch(vec![r.clone()])));
        if !sync_first {
            feed_2(&mut e);
        }
        let (results, _) = drain(&mut e);
        assert_eq!(e.audit(), Some(vec![]));
        (results, e.pending())
    };
    let (a, b) = (run(true), run(false));
    assert_eq!(a.0.len(), 2);
    assert_eq!(a, b, "the same whichever stream came first");
}

#[test]
fn a_second_reprediction_sync_for_the_same_request_is_dropped() {
    let r = request(1, &[0, 1], 7, true);
    let z = request(3, &[1], 2, false);
    let mut e = exec(1 << 20);
    e.submit_stream(cell(0, 0), batch(vec![r.clone()]));
    let (_, bodies) = drain(&mut e);
    let mut again = sync_of(&bodies[0]);
    // Another certificate (another vote set) for the same re-prediction.
    let mut cert = RePredictionCert::from_request(&again).unwrap();
    cert.votes
        .push((chorus_core::ReplicaId(3), chorus_core::Signature([0; 64])));
    again = cert.to_request();
    e.submit_stream(cell(1, 0), batch(vec![sync_of(&bodies[0]), again.clone()]));
    e.submit_stream(cell(1, 1), batch(vec![again, z]));
    let (results, _) = drain(&mut e);
    assert_eq!(results.len(), 2, "r and z ran; partition 1 is not blocked");
    // The copy in slot 0 is a second SYNC; slot 1's is a re-ordered copy.
    assert_eq!(e.stats().stale_repredictions, 1);
    assert_eq!(e.stats().duplicate_copies, 1);
    assert_eq!(e.pending(), vec![0; K as usize]);
    assert_eq!(e.audit(), Some(vec![]));
}

#[test]
fn an_access_below_the_highest_predicted_partition_is_refused_not_repredicted() {
    // Predicted {2} (its first key), accesses {0, 2}: 0 is below 2.
    let r = request(1, &[2, 0], 7, true);
    let mut e = exec(1 << 20);
    e.submit_stream(cell(2, 0), batch(vec![r]));
    let (results, bodies) = drain(&mut e);
    assert!(bodies.is_empty());
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].result, MISPREDICTED_BELOW_RESULT);
    assert!(!results[0].is_rejected(), "executed (as an error), once");
}

#[test]
fn a_suspended_request_travels_in_the_snapshot() {
    let r = request(1, &[0, 2], 7, true);
    let mut a = exec(1);
    a.submit_stream(cell(0, 0), batch(vec![r]));
    a.submit_stream(cell(1, 0), batch(vec![]));
    a.submit_stream(cell(2, 0), batch(vec![]));
    let (_, bodies) = drain(&mut a);
    assert_eq!(bodies.len(), 1);
    let cp = a.checkpoint();
    assert_eq!(cp.next_seq, Seq(u64::from(K)), "cut taken with r suspended");
    let mut b = exec(1);
    assert_eq!(
        b.install(cp.next_seq, &cp.snapshot, cp.state_digest),
        Ok(cp.state_digest)
    );
    let (_, again) = drain(&mut b);
    assert_eq!(
        again, bodies,
        "the restored replica proposes the re-prediction again"
    );
    for e in [&mut a, &mut b] {
        e.submit_stream(cell(2, 1), batch(vec![sync_of(&bodies[0])]));
        e.submit_stream(cell(0, 1), batch(vec![]));
        e.submit_stream(cell(1, 1), batch(vec![]));
    }
    let (ra, _) = drain(&mut a);
    let (rb, _) = drain(&mut b);
    assert_eq!(ra.len(), 1);
    assert_eq!(ra, rb);
    assert_eq!(a.checkpoint(), b.checkpoint());
}

/// A cut taken while a suspended request's SYNC waits behind another entry:
/// the restored replica keeps that SYNC (regression: it was dropped as a
/// second copy, found by `chorus sim --mode sarek --service
/// kv-mispredicting --seed 70032`, and the request then ran after later
/// ones on the restored replicas only).
#[test]
fn a_delivered_reprediction_sync_below_the_cut_survives_a_restore() {
    let r = request(1, &[0, 2], 7, true);
    // x waits in partition 2 for its sub-request in partition 1.
    let x = request(2, &[1, 2], 3, false);
    let y = request(3, &[2], 4, false);
    let mut a = exec(1);
    a.submit_stream(cell(0, 0), batch(vec![r]));
    let (_, bodies) = drain(&mut a);
    a.submit_stream(cell(2, 0), batch(vec![x.clone(), sync_of(&bodies[0]), y]));
    a.submit_stream(cell(1, 0), batch(vec![]));
    let cp = a.checkpoint();
    assert_eq!(cp.next_seq, Seq(u64::from(K)));
    assert_eq!(a.pending()[2], 3, "x, the SYNC and y wait in the snapshot");
    let mut b = exec(1);
    assert_eq!(
        b.install(cp.next_seq, &cp.snapshot, cp.state_digest),
        Ok(cp.state_digest)
    );
    for e in [&mut a, &mut b] {
        e.submit_stream(cell(1, 1), batch(vec![x.clone()]));
        e.submit_stream(cell(0, 1), batch(vec![]));
        e.submit_stream(cell(2, 1), batch(vec![]));
    }
    let (ra, _) = drain(&mut a);
    let (rb, _) = drain(&mut b);
    assert_eq!(ra.len(), 3, "x, r, y");
    assert_eq!(ra, rb, "y read r's write on both");
    assert_eq!(b.stats().stale_repredictions, 0);
    assert_eq!(a.checkpoint(), b.checkpoint());
}

/// Random streams with mis-predicted requests whose SYNCs a reference
/// replica's suspensions place (at a random later point of the added
/// partition's stream, as its leader would order them); every other
/// interleaving of the same streams must give the same run.
#[test]
fn repredicted_runs_do_not_depend_on_stream_interleaving() {
    let per_cut = 2;
    let (mut suspended, mut gated, mut restored_suspended) = (0, 0, 0);
    for seed in 0..300 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut streams: Vec<Vec<Vec<Request>>> = vec![Vec::new(); K as usize];
        for i in 0..12u64 {
            let mut parts: Vec<u16> = (0..K).filter(|_| rng.gen_bool(0.45)).collect();
            if parts.is_empty() {
                parts.push(rng.gen_range(0..K));
            }
            let mis = parts.len() > 1 && rng.gen_bool(0.5);
            let r = request(i + 1, &parts, i as u8, mis);
            let ordered_in: &[u16] = if mis { &parts[..1] } else { &parts };
            for p in ordered_in {
                let s = &mut streams[*p as usize];
                let at = rng.gen_range(0..=s.len());
                s.insert(at, vec![r.clone()]);
            }
        }
        // The reference replica feeds a random interleaving and orders each
        // re-prediction's SYNC somewhere after what it fed of that stream.
        let mut reference = exec(per_cut);
        let mut fed = vec![0usize; K as usize];
        let mut ref_results = Vec::new();
        loop {
            loop {
                let open: Vec<usize> = (0..K as usize).filter(|&p| fed[p] < streams[p].len()).collect();
                let Some(&p) = open.choose(&mut rng) else { break };
                let b = batch(streams[p][fed[p]].clone());
                assert!(reference.submit_stream(cell(p, fed[p] as u64), b));
                fed[p] += 1;
                let (done, bodies) = drain(&mut reference);
                ref_results.extend(done);
                for body in bodies {
                    suspended += 1;
                    for q in &body.added {
                        let s = &mut streams[*q as usize];
                        let at = rng.gen_range(fed[*q as usize]..=s.len());
                        s.insert(at, vec![sync_of(&body)]);
                    }
                }
            }
            // Pad every stream to a whole cut so that everything runs.
            let slots = streams
                .iter()
                .map(Vec::len)
                .max()
                .unwrap_or(0)
                .div_ceil(per_cut as usize)
                * per_cut as usize;
            if streams.iter().all(|s| s.len() == slots) {
                break;
            }
            for s in &mut streams {
                s.resize(slots, vec![]);
            }
        }
        assert_eq!(
            reference.pending(),
            vec![0; K as usize],
            "seed {seed}: reference finished"
        );
        ref_results.extend(drain_all(&mut reference));
        ref_results.sort();
        let want = (ref_results, reference.checkpoint());
        for order in 0..4u64 {
            let mut e = exec(per_cut);
            let mut tags: Vec<usize> = (0..K as usize)
                .flat_map(|p| std::iter::repeat_n(p, streams[p].len()))
                .collect();
            tags.shuffle(&mut ChaCha8Rng::seed_from_u64(seed * 100 + order));
            let mut next = vec![0usize; K as usize];
            for p in tags {
                assert!(e.submit_stream(cell(p, next[p] as u64), batch(streams[p][next[p]].clone())));
                next[p] += 1;
            }
            assert_eq!(e.audit(), Some(vec![]), "seed {seed} order {order}");
            assert_eq!(e.pending(), vec![0; K as usize], "seed {seed} order {order}");
            let got = (drain_all(&mut e), e.checkpoint());
            gated += e.stats().gated_syncs;
            assert!(got == want, "seed {seed} order {order}: replicas diverge");
        }
        // State transfer at every cut, then the rest of the streams: the
        // same final state (suspensions and their SYNCs travel).
        let slots = streams[0].len() as u64;
        for cut in (per_cut..slots).step_by(per_cut as usize) {
            let mut a = exec(per_cut);
            for (p, stream) in streams.iter().enumerate() {
                for (slot, reqs) in stream.iter().enumerate().take(cut as usize) {
                    a.submit_stream(cell(p, slot as u64), batch(reqs.clone()));
                }
            }
            let cp = a.checkpoint();
            assert_eq!(cp.next_seq, Seq(cut * u64::from(K)));
            // Suspended at the cut: a head waits for its re-prediction.
            restored_suspended += usize::from(a.partition_detail().iter().any(|d| d.head == "suspended"));
            let mut b = exec(per_cut);
            assert_eq!(
                b.install(cp.next_seq, &cp.snapshot, cp.state_digest),
                Ok(cp.state_digest)
            );
            for slot in cut as usize..slots as usize {
                for (p, stream) in streams.iter().enumerate() {
                    assert!(b.submit_stream(cell(p, slot as u64), batch(stream[slot].clone())));
                }
            }
            assert_eq!(b.checkpoint(), want.1, "seed {seed}: restored at slot {cut}");
            assert_eq!(b.stats().reprediction_mismatches, 0);
            assert_eq!(
                b.pending(),
                vec![0; K as usize],
                "seed {seed}: restored at slot {cut}"
            );
        }
    }
    assert!(
        restored_suspended > 20,
        "cuts with a suspended request: {restored_suspended}"
    );
    assert!(suspended > 300, "enough re-predictions: {suspended}");
    assert!(gated > 100, "enough SYNCs before their suspension: {gated}");
}

fn drain_all(e: &mut SarekExecutor) -> Vec<ExecResult> {
    let mut v = Vec::new();
    e.drain_results(&mut v);
    v.sort();
    v
}

/// The checker bites: an executor that runs a mis-predicted request without
/// suspending it (touching a partition it does not hold) is reported.
#[test]
fn the_audit_reports_a_request_run_outside_its_prediction() {
    let r = request(1, &[0, 2], 7, true);
    let mut e = exec(1 << 20);
    e.set_skip_reprediction(true);
    e.submit_stream(cell(0, 0), batch(vec![r]));
    let (results, bodies) = drain(&mut e);
    assert_eq!((results.len(), bodies.len()), (1, 0), "ran at once");
    let found = e.audit().unwrap();
    assert!(
        found.iter().any(|v| v.starts_with("AccessOutsidePrediction")),
        "{found:?}"
    );
}

/// Review finding: a copy of a suspended request (a retransmission ordered
/// again after the dedup memory forgot it) gets PREDICT()'s prediction, not
/// the local suspension's, so it never waits for a second SYNC that will
/// never come, and every replica admits it alike.
#[test]
fn a_copy_of_a_suspended_request_gets_the_plain_prediction() {
    let r = request(1, &[0, 1], 7, true);
    let mut e = exec(1 << 20);
    e.submit_stream(cell(0, 0), batch(vec![r.clone()]));
    let (_, bodies) = drain(&mut e);
    assert_eq!(bodies.len(), 1);
    // Enough other requests behind r to make partition 0 forget r's digest.
    let fillers: Vec<Request> = (0..SEEN_PER_PARTITION as u64 + 1)
        .map(|i| {
            let mut f = request(1_000 + i, &[0], 1, false);
            f.seq = RequestSeq(1);
            f
        })
        .collect();
    e.submit_stream(cell(0, 1), batch(fillers));
    e.submit_stream(cell(0, 2), batch(vec![r.clone()]));
    assert_eq!(e.stats().duplicate_copies, 0, "forgotten: the copy is admitted");
    e.submit_stream(cell(1, 0), batch(vec![sync_of(&bodies[0])]));
    let (results, _) = drain(&mut e);
    assert_eq!(
        e.pending(),
        vec![0; K as usize],
        "nothing waits for a second SYNC"
    );
    let copies: Vec<_> = results.iter().filter(|x| x.client == r.client).collect();
    assert_eq!(copies.len(), 2, "r, and its copy answered from the reply cache");
    assert!(copies.iter().any(|x| x.duplicate));
}

/// `Mis` whose exact access grows by one partition on every call for the
/// same operation: a request re-predicted twice (§IV-D 2: "any previous
/// (re-)prediction").
#[derive(Default)]
struct Growing {
    kv: Mis,
    calls: std::sync::Mutex<std::collections::BTreeMap<Vec<u8>, usize>>,
}

impl Service for Growing {
    fn execute(&self, op: &[u8], ctx: &ExecContext) -> Bytes {
        self.kv.execute(op, ctx)
    }
    fn access(&self, op: &[u8]) -> Access {
        self.kv.access(op)
    }
    fn execution_access(&self, op: &[u8]) -> Option<Access> {
        let Access::Keys { writes, .. } = self.kv.execution_access(op)? else {
            return None;
        };
        let mut calls = self.calls.lock().unwrap();
        let n = calls.entry(op.to_vec()).or_insert(0);
        *n += 1;
        Some(Access::Keys {
            reads: vec![],
            writes: writes.into_iter().take(1 + *n).collect(),
        })
    }
    fn snapshot(&self) -> Bytes {
        self.kv.snapshot()
    }
    fn restore(&self, s: &[u8]) -> Result<(), String> {
        self.kv.restore(s)
    }
}

/// Review finding: the SYNC of a second re-prediction that arrives during the
/// first suspension waits at its gate instead of being dropped.
#[test]
fn a_second_reprediction_that_arrives_early_waits_for_its_suspension() {
    let r = request(1, &[0, 1, 2], 7, true);
    let mut e = SarekExecutor::new(Arc::new(Growing::default()), K, 1 << 20, 1024).recording();
    e.submit_stream(cell(0, 0), batch(vec![r.clone()]));
    let (_, first) = drain(&mut e);
    assert_eq!(first[0].partitions, vec![0, 1]);
    // The second certificate (partitions 0, 1, 2) reaches partition 2 first.
    let second = RePrediction {
        partitions: vec![0, 1, 2],
        added: vec![2],
        ..first[0].clone()
    };
    e.submit_stream(cell(2, 0), batch(vec![sync_of(&second)]));
    assert_eq!(e.stats().reprediction_mismatches, 0, "not dropped");
    e.submit_stream(cell(1, 0), batch(vec![sync_of(&first[0])]));
    let (results, again) = drain(&mut e);
    assert_eq!(
        again,
        vec![second],
        "suspended a second time, with the SYNC already held"
    );
    assert_eq!(results.len(), 1, "then it ran");
    assert_eq!(e.pending(), vec![0; K as usize]);
    assert_eq!(e.audit(), Some(vec![]));
}
