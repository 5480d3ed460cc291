//! RCC §III-E: the parallel executor runs SWITCHINSTANCE as the sequential
//! one does — same replies, same assignment table, same state digest.

mod common;

use chorus_apps::{KvOp, KvService};
use chorus_core::{flags, switch_op, ClientId, LaneId, Seq, SwitchPolicy};
use chorus_exec::{Executor, SequentialExecutor};
use chorus_parallel::ParallelExecutor;
use common::{batch, drain_sorted, req};
use std::sync::Arc;

const P: SwitchPolicy = SwitchPolicy { lanes: 4, sigma: 2 };

#[test]
fn switches_execute_alike_in_parallel_and_sequentially() {
    let mut seq = SequentialExecutor::new(Arc::new(KvService::default()), 8).with_switch_policy(P);
    let mut par = ParallelExecutor::new(Arc::new(KvService::default()), 4, 64, 8);
    assert!(par.set_switch_policy(P));
    let switch = |client: u64, s: u64, to: u32| {
        let mut r = req(client, s, switch_op(to));
        r.flags = flags::SWITCH_INSTANCE;
        r
    };
    let batches = vec![
        vec![req(1, 1, KvOp::put("a", "1")), switch(1, 2, 3)],
        vec![switch(1, 2, 3), switch(2, 1, 2), req(2, 2, KvOp::put("a", "2"))],
        vec![switch(2, 3, 0)],
    ];
    for (i, b) in batches.into_iter().enumerate() {
        seq.submit(Seq(i as u64), batch(b.clone()));
        par.submit(Seq(i as u64), batch(b));
    }
    // Barrier: every submitted request executed.
    assert_eq!(seq.state_digest(), par.state_digest());
    let (a, b) = (drain_sorted(&mut seq), drain_sorted(&mut par));
    assert_eq!(a, b);
    assert!(a.iter().any(|r| r.result.starts_with(b"\0chorus/switched-to: 3")));
    let (cs, cp) = (seq.checkpoint(), par.checkpoint());
    assert_eq!(cs.snapshot, cp.snapshot);
    let t = seq.client_table().switches();
    assert_eq!(t.owner(&P, ClientId(1)), LaneId(3));
    // Client 2 is owned by lane 2 already; its switch to 0 is applied.
    assert_eq!(t.owner(&P, ClientId(2)), LaneId(0));
}
