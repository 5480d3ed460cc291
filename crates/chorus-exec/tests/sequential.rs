//! The sequential executor: exactly-once, cached replies for duplicates,
//! deterministic rejections, checkpoint and restore.

use bytes::Bytes;
use chorus_core::{Authenticator, Batch, ClientId, Request, RequestSeq, Seq};
use chorus_exec::{
    Access, ExecContext, ExecError, ExecResult, Executor, SequentialExecutor, Service, REPLY_CACHE_PER_CLIENT,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Registers `0..=255`. op = [0, k] read k; [1, k, v] add v to k, reply the
/// new value; anything else: an error reply that touches nothing. Replies also
/// carry the context so a test sees what the executor passed.
#[derive(Default)]
struct Registers(Mutex<BTreeMap<u8, u64>>);

impl Service for Registers {
    fn execute(&self, op: &[u8], ctx: &ExecContext) -> Bytes {
        let mut m = self.0.lock().unwrap();
        let v = match op {
            [0, k] => m.get(k).copied().unwrap_or(0),
            [1, k, v] => {
                let e = m.entry(*k).or_insert(0);
                *e += u64::from(*v);
                *e
            }
            _ => return Bytes::from_static(b"bad op"),
        };
        Bytes::from(format!("{v}@{}.{}", ctx.seq.0, ctx.index))
    }
    fn access(&self, op: &[u8]) -> Access {
        match op {
            [0, k] => Access::Keys {
                reads: vec![Bytes::from(vec![*k])],
                writes: vec![],
            },
            [1, k, _] => Access::Keys {
                reads: vec![],
                writes: vec![Bytes::from(vec![*k])],
            },
            _ => Access::Keys {
                reads: vec![],
                writes: vec![],
            },
        }
    }
    fn is_read_only(&self, op: &[u8]) -> bool {
        matches!(op, [0, _])
    }
    fn snapshot(&self) -> Bytes {
        let m = self.0.lock().unwrap();
        Bytes::from(
            m.iter()
                .flat_map(|(k, v)| std::iter::once(*k).chain(v.to_le_bytes()))
                .collect::<Vec<u8>>(),
        )
    }
    fn restore(&self, s: &[u8]) -> Result<(), String> {
        if !s.len().is_multiple_of(9) {
            return Err("bad length".into());
        }
        let mut m = self.0.lock().unwrap();
        m.clear();
        for c in s.chunks(9) {
            m.insert(c[0], u64::from_le_bytes(c[1..].try_into().unwrap()));
        }
        Ok(())
    }
}

fn req(client: u64, seq: u64, op: &[u8]) -> Request {
    Request {
        memo: Default::default(),
        client: ClientId(client),
        seq: RequestSeq(seq),
        flags: 0,
        op: Bytes::copy_from_slice(op),
        auth: Authenticator::Macs(Default::default()),
    }
}

fn batch(reqs: Vec<Request>) -> Arc<Batch> {
    Arc::new(Batch {
        requests: reqs,
        time_ms: 0,
    })
}

fn exec(max_inflight: u32) -> SequentialExecutor {
    SequentialExecutor::new(Arc::new(Registers::default()), max_inflight)
}

fn drain(e: &mut impl Executor) -> Vec<ExecResult> {
    let mut out = Vec::new();
    e.drain_results(&mut out);
    out
}

#[test]
fn executes_in_order_with_context() {
    let mut e = exec(8);
    e.submit(Seq(0), batch(vec![req(1, 1, &[1, 5, 2]), req(2, 1, &[1, 5, 3])]));
    e.submit(Seq(1), batch(vec![]));
    e.submit(Seq(2), batch(vec![req(1, 2, &[0, 5])]));
    let r: Vec<_> = drain(&mut e)
        .into_iter()
        .map(|r| (r.result, r.delivered_at, r.duplicate))
        .collect();
    assert_eq!(
        r,
        vec![
            (Bytes::from("2@0.0"), Seq(0), false),
            (Bytes::from("5@0.1"), Seq(0), false),
            (Bytes::from("5@2.0"), Seq(2), false),
        ]
    );
    assert_eq!(e.next_seq(), Seq(3));
}

#[test]
fn duplicates_are_not_executed_and_get_the_cached_reply() {
    let mut e = exec(8);
    e.submit(Seq(0), batch(vec![req(1, 1, &[1, 0, 1]), req(1, 1, &[1, 0, 1])]));
    e.submit(Seq(1), batch(vec![req(1, 1, &[1, 0, 1])]));
    let r = drain(&mut e);
    assert_eq!(r.len(), 3);
    assert!(!r[0].duplicate && r[1].duplicate && r[2].duplicate);
    assert!(r.iter().all(|x| x.result == "1@0.0"));
    assert_eq!(r[2].delivered_at, Seq(1));
    // Executed once: the register holds 1.
    assert_eq!(e.execute_read_only(&[0, 0]).unwrap(), "1@2.0");
}

#[test]
fn forgotten_duplicates_yield_nothing() {
    let mut e = exec(1024);
    let n = REPLY_CACHE_PER_CLIENT as u64 + 1;
    let reqs = (1..=n).map(|s| req(1, s, &[1, 0, 1])).collect();
    e.submit(Seq(0), batch(reqs));
    drain(&mut e);
    e.submit(Seq(1), batch(vec![req(1, 1, &[1, 0, 1]), req(1, n, &[1, 0, 1])]));
    let r = drain(&mut e);
    assert_eq!(r.len(), 1, "seq 1 fell out of the cache; seq n is still there");
    assert_eq!(r[0].request_seq, RequestSeq(n));
    assert!(r[0].duplicate);
}

#[test]
fn zero_seq_is_rejected_and_a_jump_slides_the_window() {
    let mut e = exec(2);
    e.submit(
        Seq(0),
        batch(vec![
            req(1, 3, &[1, 0, 1]),
            req(1, 0, &[1, 0, 1]),
            req(1, 2, &[1, 0, 1]),
        ]),
    );
    let r = drain(&mut e);
    assert!(!r[0].is_rejected() && r[1].is_rejected());
    // Seq 3 slid the window to low = 1, so seq 2 is fresh and seq 1 was abandoned.
    assert!(!r[2].is_rejected() && !r[2].duplicate);
    e.submit(Seq(1), batch(vec![req(1, 1, &[1, 0, 1]), req(1, 4, &[1, 0, 1])]));
    let r = drain(&mut e);
    assert!(
        r.iter().all(|x| x.request_seq != RequestSeq(1) || x.duplicate),
        "an abandoned seq never executes"
    );
    assert!(r
        .iter()
        .any(|x| x.request_seq == RequestSeq(4) && !x.duplicate && !x.is_rejected()));
    assert_eq!(e.stats().window_slides, 1);
}

#[test]
#[should_panic(expected = "delivery order")]
fn submitting_out_of_order_is_a_bug() {
    let mut e = exec(8);
    e.submit(Seq(1), batch(vec![]));
}

#[test]
fn checkpoint_restore_reproduces_state_and_future_behaviour() {
    let mut a = exec(8);
    a.submit(Seq(0), batch(vec![req(1, 1, &[1, 7, 4]), req(2, 2, &[1, 8, 1])]));
    let cp = a.checkpoint();
    assert_eq!(cp.next_seq, Seq(1));
    assert_eq!(cp.state_digest, a.state_digest());

    let mut b = exec(8);
    assert_eq!(b.restore(cp.next_seq, &cp.snapshot), Ok(cp.state_digest));
    assert_eq!(b.next_seq(), Seq(1));
    assert_eq!(b.checkpoint(), cp);

    // Same future: a duplicate gets the cached reply, new requests the same results.
    drain(&mut a);
    let next = batch(vec![
        req(1, 1, &[1, 7, 4]),
        req(2, 1, &[1, 8, 1]),
        req(2, 11, &[0, 0]),
    ]);
    a.submit(Seq(1), next.clone());
    b.submit(Seq(1), next);
    let ra = drain(&mut a);
    let rb = drain(&mut b);
    assert_eq!(ra, rb);
    assert_eq!(rb.len(), 3);
    assert!(rb[0].duplicate && rb[0].result == "4@0.0");
    assert!(
        !rb[2].is_rejected() && !rb[2].duplicate,
        "a jump slides the window"
    );
    assert_eq!(a.state_digest(), b.state_digest());
}

#[test]
fn digest_covers_the_client_table() {
    let mut a = exec(8);
    let mut b = exec(8);
    a.submit(Seq(0), batch(vec![req(1, 1, b"x")]));
    b.submit(Seq(0), batch(vec![req(1, 2, b"x")]));
    // Same (untouched) service state, different client tables.
    assert_ne!(a.state_digest(), b.state_digest());
}

#[test]
fn bad_snapshots_are_refused_and_change_nothing() {
    let mut e = exec(8);
    e.submit(Seq(0), batch(vec![req(1, 1, &[1, 1, 1])]));
    let before = e.checkpoint();
    assert!(matches!(
        e.restore(Seq(9), b"\x07garbage"),
        Err(ExecError::Invalid(_) | ExecError::Malformed(_))
    ));
    let mut trailing = before.snapshot.to_vec();
    trailing.push(0);
    assert!(matches!(
        e.restore(Seq(9), &trailing),
        Err(ExecError::Malformed(_))
    ));
    assert_eq!(e.checkpoint(), before);
}

#[test]
fn read_only_fast_path_only_for_read_only_ops() {
    let mut e = exec(8);
    e.submit(Seq(0), batch(vec![req(1, 1, &[1, 3, 9])]));
    assert_eq!(e.execute_read_only(&[0, 3]).unwrap(), "9@1.0");
    assert_eq!(e.execute_read_only(&[1, 3, 1]), None);
    assert_eq!(
        e.execute_read_only(&[0, 3]).unwrap(),
        "9@1.0",
        "the fast path changed nothing"
    );
}

/// Issue 8, finding 6: a peer's snapshot that decodes but is not the
/// certified state (here: another history, with a reply the client never got
/// from a correct replica) is refused before anything is replaced, so the
/// executor never answers a retransmission from it.
#[test]
fn install_swaps_in_only_the_certified_state() {
    let mut honest = exec(8);
    honest.submit(Seq(0), batch(vec![req(1, 1, &[1, 7, 4])]));
    let certified = honest.checkpoint();
    let mut evil = exec(8);
    evil.submit(Seq(0), batch(vec![req(9, 1, &[1, 5, 200])]));
    let forged = evil.checkpoint();
    assert!(evil.cached_reply(ClientId(9), RequestSeq(1)).is_some());

    let mut e = exec(8);
    e.submit(Seq(0), batch(vec![req(2, 1, &[1, 3, 3])]));
    drain(&mut e);
    let before = e.checkpoint();
    let outcome = e.install(certified.next_seq, &forged.snapshot, certified.state_digest);
    assert!(
        matches!(outcome, Err(ExecError::DigestMismatch { got, .. }) if got == forged.state_digest),
        "{outcome:?}"
    );
    assert_eq!(
        e.cached_reply(ClientId(9), RequestSeq(1)),
        None,
        "no reply from the refused snapshot"
    );
    assert_eq!(e.checkpoint(), before, "service, table and position untouched");
    // The core learns that the install failed.
    assert_ne!(
        chorus_exec::installed_digest(&outcome, &certified.state_digest),
        certified.state_digest
    );
    let garbage = e.install(certified.next_seq, b"\x07garbage", certified.state_digest);
    assert!(matches!(
        garbage,
        Err(ExecError::Malformed(_) | ExecError::Invalid(_))
    ));
    assert_ne!(
        chorus_exec::installed_digest(&garbage, &certified.state_digest),
        certified.state_digest
    );
    assert_eq!(e.checkpoint(), before);

    let ok = e.install(certified.next_seq, &certified.snapshot, certified.state_digest);
    assert_eq!(ok, Ok(certified.state_digest));
    assert_eq!(
        chorus_exec::installed_digest(&ok, &certified.state_digest),
        certified.state_digest
    );
    assert_eq!(e.checkpoint(), certified);
    assert!(e.cached_reply(ClientId(1), RequestSeq(1)).is_some());
}

/// A service that refuses its part of the snapshot leaves it as it was too.
#[test]
fn install_refused_by_the_service_changes_nothing() {
    let mut honest = exec(8);
    honest.submit(Seq(0), batch(vec![req(1, 1, &[1, 7, 4])]));
    let certified = honest.checkpoint();
    let mut e = exec(8);
    e.submit(Seq(0), batch(vec![req(2, 1, &[1, 3, 3])]));
    let before = e.checkpoint();
    // A well-formed executor snapshot whose service bytes the service refuses.
    let (table, _) = chorus_exec::decode_snapshot(&certified.snapshot, 8).unwrap();
    let bad = chorus_exec::encode_snapshot(&table, &BadState);
    let outcome = e.install(certified.next_seq, &bad, certified.state_digest);
    assert!(matches!(outcome, Err(ExecError::Service(_))), "{outcome:?}");
    assert_eq!(e.checkpoint(), before);
}

/// A service whose snapshot `Registers` refuses (length not a multiple of 9).
struct BadState;

impl Service for BadState {
    fn execute(&self, _op: &[u8], _ctx: &ExecContext) -> Bytes {
        Bytes::new()
    }
    fn snapshot(&self) -> Bytes {
        Bytes::from_static(b"odd")
    }
    fn restore(&self, _s: &[u8]) -> Result<(), String> {
        Err("never".into())
    }
}

/// Issue 8 finding 11: a seq the client table's window slid past is
/// reported `Gone` through the executor (what the replica's intake asks
/// before answering a retransmission), so it can be rejected clearly instead
/// of retransmitted into silence; executed ones are `Ready`.
#[test]
fn abandoned_seqs_are_gone_through_the_executor() {
    let mut e: Box<dyn Executor> = Box::new(exec(2));
    e.submit(Seq(0), batch(vec![req(1, 1, &[1, 0, 1]), req(1, 5, &[1, 0, 1])]));
    drain_dyn(&mut *e);
    assert_eq!(
        e.reply_lookup(ClientId(1), RequestSeq(2)),
        chorus_exec::ReplyLookup::Gone
    );
    assert!(matches!(
        e.reply_lookup(ClientId(1), RequestSeq(5)),
        chorus_exec::ReplyLookup::Ready(_)
    ));
    assert_eq!(
        e.reply_lookup(ClientId(1), RequestSeq(6)),
        chorus_exec::ReplyLookup::Unknown
    );
}

fn drain_dyn(e: &mut dyn Executor) -> Vec<ExecResult> {
    let mut out = Vec::new();
    e.drain_results(&mut out);
    out
}
