//! RCC §III-E SWITCHINSTANCE as an executor system op: never passed to the
//! service, answered exactly once with the same bytes on every replica, and
//! its assignment table carried in the snapshot and the state digest.

use bytes::Bytes;
use chorus_core::{
    flags, switch_op, Assignments, Authenticator, Batch, ClientId, LaneId, Request, RequestSeq, Seq, Slot,
    SwitchPolicy,
};
use chorus_exec::{Access, ExecContext, ExecResult, Executor, SequentialExecutor, Service};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Counts the ops it executes; its state is the count.
#[derive(Default)]
struct Counter(AtomicU64);

impl Service for Counter {
    fn execute(&self, _op: &[u8], _ctx: &ExecContext) -> Bytes {
        Bytes::from(self.0.fetch_add(1, Ordering::SeqCst).to_string())
    }
    fn access(&self, _op: &[u8]) -> Access {
        Access::Everything
    }
    fn is_read_only(&self, _op: &[u8]) -> bool {
        false
    }
    fn snapshot(&self) -> Bytes {
        Bytes::copy_from_slice(&self.0.load(Ordering::SeqCst).to_le_bytes())
    }
    fn restore(&self, s: &[u8]) -> Result<(), String> {
        let b: [u8; 8] = s.try_into().map_err(|_| "bad counter".to_string())?;
        self.0.store(u64::from_le_bytes(b), Ordering::SeqCst);
        Ok(())
    }
}

const P: SwitchPolicy = SwitchPolicy { lanes: 4, sigma: 2 };

fn req(client: u64, seq: u64, fl: u8, op: Bytes) -> Request {
    Request {
        memo: Default::default(),
        client: ClientId(client),
        seq: RequestSeq(seq),
        flags: fl,
        op,
        auth: Authenticator::Macs(Default::default()),
    }
}

fn switch(client: u64, seq: u64, to: u32) -> Request {
    req(client, seq, flags::SWITCH_INSTANCE, switch_op(to))
}

fn run(e: &mut SequentialExecutor, batches: Vec<Vec<Request>>) -> Vec<ExecResult> {
    for b in batches {
        let seq = e.next_seq();
        e.submit(
            seq,
            Arc::new(Batch {
                requests: b,
                time_ms: 0,
            }),
        );
    }
    let mut out = Vec::new();
    e.drain_results(&mut out);
    out
}

fn executor() -> (Arc<Counter>, SequentialExecutor) {
    let svc = Arc::new(Counter::default());
    let e = SequentialExecutor::new(svc.clone(), 8).with_switch_policy(P);
    (svc, e)
}

#[test]
fn a_switch_is_a_system_op_answered_exactly_once() {
    let (svc, mut e) = executor();
    // Position 5 is round 1 (m = 4).
    let out = run(
        &mut e,
        vec![
            vec![],
            vec![],
            vec![],
            vec![],
            vec![],
            vec![switch(1, 1, 2), req(1, 2, 0, Bytes::from_static(b"op"))],
            vec![switch(1, 1, 2)],
        ],
    );
    assert_eq!(
        svc.0.load(Ordering::SeqCst),
        1,
        "only the ordinary op reached the service"
    );
    assert_eq!(out.len(), 3);
    assert_eq!(&out[0].result[..], b"\0chorus/switched-to: 2");
    assert!(!out[0].duplicate);
    assert_eq!(out[2].result, out[0].result);
    assert!(out[2].duplicate, "the second copy gets the cached reply");
    let t = e.client_table().switches();
    assert_eq!(t.owner(&P, ClientId(1)), LaneId(2));
    assert_eq!(t.owner_at(&P, ClientId(1), Slot(3)), LaneId(1));
    assert_eq!(t.owner_at(&P, ClientId(1), Slot(4)), LaneId(2));
}

#[test]
fn a_refused_switch_gets_a_refusal_and_changes_nothing() {
    let (_, mut e) = executor();
    let out = run(&mut e, vec![vec![switch(1, 1, 1), switch(2, 1, 7)]]);
    assert_eq!(&out[0].result[..], b"\0chorus/switch-refused: already-owner");
    assert_eq!(&out[1].result[..], b"\0chorus/switch-refused: bad-target");
    // No hand-over; the refusal is remembered (its seq can never be
    // ordered again to move the client later).
    let t = e.client_table().switches();
    assert!(t.get(ClientId(1)).is_none() && t.get(ClientId(2)).is_none());
    assert_eq!(t.owner(&P, ClientId(1)), LaneId(1));
    assert!(!t.is_empty());
    // Outside rcc (no policy) a delivered switch is refused too.
    let mut plain = SequentialExecutor::new(Arc::new(Counter::default()), 8);
    let out = run(&mut plain, vec![vec![switch(1, 1, 2)]]);
    assert_eq!(&out[0].result[..], b"\0chorus/switch-refused: bad-target");
}

#[test]
fn the_table_is_in_the_snapshot_and_the_state_digest() {
    let (_, mut a) = executor();
    let (_, mut b) = executor();
    run(&mut a, vec![vec![switch(1, 1, 3)]]);
    run(&mut b, vec![vec![req(1, 1, 0, Bytes::from_static(b"x"))]]);
    let cp = a.checkpoint();
    let plain = b.checkpoint();
    assert_ne!(cp.state_digest, plain.state_digest);
    // Without a switch the snapshot keeps version 1's bytes, and restores.
    assert_eq!(plain.snapshot[0], 1);
    let (_, mut d) = executor();
    d.install(plain.next_seq, &plain.snapshot, plain.state_digest)
        .expect("version 1");
    assert!(d.client_table().switches().is_empty());
    // The ordering layer reads the table from the front of the snapshot.
    let table = Assignments::from_exec_snapshot(&cp.snapshot).expect("table at the front");
    assert_eq!(&table, a.client_table().switches());
    assert!(cp.snapshot.starts_with(&table.exec_snapshot_head()));
    // A replica that installs it has the same table and digest.
    let (_, mut c) = executor();
    c.install(cp.next_seq, &cp.snapshot, cp.state_digest)
        .expect("certified state");
    assert_eq!(c.client_table().switches(), a.client_table().switches());
    assert_eq!(c.state_digest(), cp.state_digest);
    assert_eq!(c.next_seq(), Seq(1));
}
