//! Issue 8, finding 6, for the parallel executor: a peer's snapshot is
//! swapped in only if it is the certified state; a refused one leaves the
//! service, the client table (cached replies) and the position untouched.

mod common;

use bytes::Bytes;
use chorus_apps::{KvOp, KvService};
use chorus_core::{ClientId, RequestSeq, Seq};
use chorus_exec::{installed_digest, ExecError, Executor};
use chorus_parallel::ParallelExecutor;
use common::{batch, drain_sorted, req};
use std::sync::Arc;

fn put(key: &str, value: &str) -> Bytes {
    KvOp::Put {
        key: Bytes::from(key.to_owned()),
        value: Bytes::from(value.to_owned()),
    }
    .encode()
}

fn exec() -> ParallelExecutor {
    ParallelExecutor::new(Arc::new(KvService::default()), 2, 64, 8)
}

#[test]
fn install_swaps_in_only_the_certified_state() {
    let mut honest = exec();
    honest.submit(Seq(0), batch(vec![req(1, 1, put("a", "1"))]));
    let certified = honest.checkpoint();
    let mut evil = exec();
    evil.submit(Seq(0), batch(vec![req(9, 1, put("a", "forged"))]));
    let forged = evil.checkpoint();

    let mut e = exec();
    e.submit(Seq(0), batch(vec![req(2, 1, put("b", "2"))]));
    drain_sorted(&mut e);
    let before = e.checkpoint();
    let outcome = e.install(certified.next_seq, &forged.snapshot, certified.state_digest);
    assert!(
        matches!(outcome, Err(ExecError::DigestMismatch { .. })),
        "{outcome:?}"
    );
    assert_ne!(
        installed_digest(&outcome, &certified.state_digest),
        certified.state_digest
    );
    assert_eq!(e.cached_reply(ClientId(9), RequestSeq(1)), None);
    assert_eq!(e.checkpoint(), before, "service, table and position untouched");

    let ok = e.install(certified.next_seq, &certified.snapshot, certified.state_digest);
    assert_eq!(ok, Ok(certified.state_digest));
    assert_eq!(e.checkpoint(), certified);
    // Execution goes on from the installed state like at the honest replica.
    let next = batch(vec![req(1, 2, put("c", "3"))]);
    honest.submit(Seq(1), next.clone());
    e.submit(Seq(1), next);
    assert_eq!(e.checkpoint(), honest.checkpoint());
}
