//! The token service under CBASE: parallel execution of random signed
//! transfers (valid, overdrawn, replayed, forged, malformed) gives the same
//! replies, checkpoint and state digest as sequential execution, never runs
//! two transfers that share an account at once, and actually overlaps
//! transfers between disjoint accounts.

mod common;

use bytes::Bytes;
use chorus_apps::token_op::{genesis_key, Transfer};
use chorus_apps::{Genesis, TokenOp, TokenService};
use chorus_core::Seq;
use chorus_exec::{Executor, SequentialExecutor};
use chorus_parallel::ParallelExecutor;
use common::{batch, drain_sorted, req, Guarded};
use proptest::prelude::*;
use std::sync::Arc;

const G: Genesis = Genesis {
    seed: 3,
    accounts: 12,
    balance: 50,
};

#[derive(Clone, Debug)]
enum Gen {
    Transfer {
        from: u32,
        to: u32,
        amount: u64,
        nonce: u64,
        forge: bool,
    },
    Balance(u32),
    Garbage(Vec<u8>),
}

fn op(g: &Gen) -> Bytes {
    match g {
        Gen::Transfer {
            from,
            to,
            amount,
            nonce,
            forge,
        } => {
            let mut t = Transfer::signed(&genesis_key(G.seed, *from), G.account(*to), *amount, *nonce);
            if *forge {
                t.nonce += 1;
            }
            TokenOp::Transfer(t).encode()
        }
        Gen::Balance(a) => TokenOp::balance(G.account(*a)),
        Gen::Garbage(b) => Bytes::from(b.clone()),
    }
}

fn gen() -> impl Strategy<Value = Gen> {
    prop_oneof![
        10 => (0u32..12, 0u32..12, 0u64..40, 0u64..8, proptest::bool::weighted(0.1)).prop_map(
            |(from, to, amount, nonce, forge)| Gen::Transfer { from, to, amount, nonce, forge }
        ),
        2 => (0u32..12).prop_map(Gen::Balance),
        1 => proptest::collection::vec(any::<u8>(), 0..8).prop_map(Gen::Garbage),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn token_parallel_equals_sequential(
        batches in proptest::collection::vec(proptest::collection::vec(gen(), 0..16), 1..8),
        workers in 1usize..6,
        capacity in 1usize..24,
    ) {
        let mut seq = SequentialExecutor::new(Arc::new(TokenService::new(G).unwrap()), 1024);
        let svc = Arc::new(Guarded::new(TokenService::new(G).unwrap()));
        let mut par = ParallelExecutor::new(svc.clone(), workers, capacity, 1024);
        let (mut all_seq, mut all_par) = (Vec::new(), Vec::new());
        let mut client_seq = 0u64;
        for (i, b) in batches.iter().enumerate() {
            let reqs = b
                .iter()
                .map(|g| {
                    client_seq += 1;
                    req(1 + client_seq % 3, client_seq.div_ceil(3), op(g))
                })
                .collect();
            let b = batch(reqs);
            seq.submit(Seq(i as u64), b.clone());
            par.submit(Seq(i as u64), b);
            all_seq.extend(drain_sorted(&mut seq));
            all_par.extend(drain_sorted(&mut par));
        }
        prop_assert_eq!(par.checkpoint(), seq.checkpoint());
        prop_assert_eq!(par.state_digest(), seq.state_digest());
        all_par.extend(drain_sorted(&mut par));
        all_seq.sort();
        all_par.sort();
        prop_assert_eq!(all_par, all_seq);
        prop_assert_eq!(svc.inner.total_supply(), G.supply().unwrap());
    }
}

/// Disjoint transfers overlap: the verify-heavy work runs on several workers.
/// Each transfer lingers 1 ms while it counts as running: on a loaded
/// 2-core machine the transfers alone (tens of µs each) ran one after the
/// other often enough to fail this test (a CI run of 2026-11-27).
#[test]
fn disjoint_transfers_run_concurrently() {
    let g = Genesis {
        seed: 1,
        accounts: 64,
        balance: 10,
    };
    let svc = Arc::new(Guarded::lingering(
        TokenService::new(g).unwrap(),
        std::time::Duration::from_millis(1),
    ));
    let mut par = ParallelExecutor::new(svc.clone(), 4, 256, 1024);
    let mut seq = SequentialExecutor::new(Arc::new(TokenService::new(g).unwrap()), 1024);
    let (mut all_seq, mut all_par) = (Vec::new(), Vec::new());
    for round in 0..20u64 {
        let reqs = (0..32u32)
            .map(|i| {
                let t = TokenOp::transfer(&genesis_key(g.seed, 2 * i), g.account(2 * i + 1), 1, round + 1);
                req(u64::from(i) + 1, round + 1, t)
            })
            .collect();
        let b = batch(reqs);
        seq.submit(Seq(round), b.clone());
        par.submit(Seq(round), b);
        all_seq.extend(drain_sorted(&mut seq));
        all_par.extend(drain_sorted(&mut par));
    }
    assert_eq!(par.state_digest(), seq.state_digest());
    all_par.extend(drain_sorted(&mut par));
    all_seq.sort();
    all_par.sort();
    assert_eq!(all_par, all_seq);
    assert!(svc.peak() > 1, "disjoint transfers never overlapped");
    assert_eq!(svc.inner.total_supply(), 640);
}
