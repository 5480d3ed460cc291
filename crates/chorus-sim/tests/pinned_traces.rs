//! Guard rail for refactors that claim "no behaviour change" (the lane
//! split's steps A1 and A2, docs/lane-split.md): the simulator's trace
//! digest (every event each replica saw, in order) of a fixed matrix of
//! modes and seeds, under every fault kind, is pinned here.
//!
//! A change that alters protocol behaviour on purpose changes these
//! digests too. Then re-pin them (`PRINT_TRACES=1 cargo test -p chorus-sim
//! --test pinned_traces -- --nocapture` prints the new ones) and say in the
//! commit why the behaviour changed; a refactor must leave them alone.

use chorus_core::OrderingMode;
use chorus_sim::{run_one, SimOptions};

/// (mode, pillars, n, seed, trace digest in hex).
const PINNED: &[(OrderingMode, u32, usize, u64, &str)] = &[
    (
        OrderingMode::Pbft,
        1,
        4,
        3,
        "62779694c677e002ac3c676aa91aefdbad8b7a72890cc51f56d085b19fe48857",
    ),
    (
        OrderingMode::Pbft,
        1,
        4,
        77,
        "cc69f095beafaa1817af515c7f08fb8beb76754b8fba5b2fefb8423045bcd686",
    ),
    (
        OrderingMode::Cop,
        4,
        7,
        3,
        "258ab94026bd02b79e9298602886c7036a893837643b1b8644cfc4c6511af628",
    ),
    (
        OrderingMode::Cop,
        4,
        7,
        77,
        "55f271765e332207f2c937952ff8fec5cfeaa0663ea0d63ac8e3c2529b07118f",
    ),
    (
        OrderingMode::Rcc,
        2,
        4,
        3,
        "48562dacc160c9db5fb808b7246d19847af0d806c82929e5e829e204c99cf0da",
    ),
    (
        OrderingMode::Rcc,
        2,
        4,
        77,
        "6e6bf2ab0f5b2099e2caffbf17c4ffa10523559383dc006008ea087065dd2504",
    ),
    (
        OrderingMode::Sarek,
        4,
        4,
        3,
        "74aef07195e74b66ae4206dd079bbc3852930ae7eaa0120e71c4e3ad905ce704",
    ),
    (
        OrderingMode::Sarek,
        4,
        4,
        77,
        "633fa4d6e1d80fa2d46cf4d11528ff21268817a5c4ddccaf01d92b274cbfe19a",
    ),
    (
        OrderingMode::Dispel,
        1,
        4,
        3,
        "da45158b6cf6cbaf534c45723b3c3798a7c92724bce01b16875cf93daf62398b",
    ),
    (
        OrderingMode::Dispel,
        1,
        4,
        77,
        "d83c286d77a0739b2c4bb51c155e76786e1c26ce6fabe43729f9b505d12bcb13",
    ),
];

fn matrix() -> Vec<(OrderingMode, u32, usize, u64)> {
    let mut m = Vec::new();
    for (mode, pillars, n) in [
        (OrderingMode::Pbft, 1, 4),
        (OrderingMode::Cop, 4, 7),
        (OrderingMode::Rcc, 2, 4),
        (OrderingMode::Sarek, 4, 4),
        (OrderingMode::Dispel, 1, 4),
    ] {
        for seed in [3, 77] {
            m.push((mode, pillars, n, seed));
        }
    }
    m
}

fn options(mode: OrderingMode, pillars: u32, n: usize) -> SimOptions {
    let mut o = SimOptions::new(mode, pillars, n);
    // Every fault kind in every seed, and a short run: the digest covers
    // view changes, recovery and state transfer, and the test stays quick.
    o.swarm = false;
    o.requests_per_client = 40;
    o
}

/// Run each configuration and compare its trace digest with `pinned`;
/// returns what differs. `PRINT_TRACES=1` prints the digests to pin.
fn compare(
    pinned: &[(OrderingMode, u32, usize, u64, &str)],
    runs: Vec<(OrderingMode, u32, usize, u64, SimOptions)>,
) -> Vec<String> {
    let print = std::env::var_os("PRINT_TRACES").is_some();
    let mut changed = Vec::new();
    for (mode, pillars, n, seed, opts) in runs {
        let report = run_one(&opts, seed);
        assert!(
            report.ok(),
            "{mode:?} p{pillars} n{n} seed {seed} failed: {report}"
        );
        let got = report.trace.to_string();
        if print {
            println!("    (OrderingMode::{mode:?}, {pillars}, {n}, {seed}, \"{got}\"),");
        }
        match pinned
            .iter()
            .find(|p| (p.0, p.1, p.2, p.3) == (mode, pillars, n, seed))
        {
            Some(p) if p.4 == got => {}
            Some(p) => changed.push(format!(
                "{mode:?} p{pillars} n{n} seed {seed}: pinned {} now {got}",
                p.4
            )),
            None => changed.push(format!(
                "{mode:?} p{pillars} n{n} seed {seed}: not pinned (now {got})"
            )),
        }
    }
    changed
}

#[test]
fn traces_of_the_pinned_matrix_are_unchanged() {
    let runs = matrix()
        .into_iter()
        .map(|(mode, pillars, n, seed)| (mode, pillars, n, seed, options(mode, pillars, n)))
        .collect();
    let changed = compare(PINNED, runs);
    assert!(
        changed.is_empty(),
        "simulated behaviour changed (re-pin only if that was intended):\n{}",
        changed.join("\n")
    );
}

/// The same guard for the pieces apart (docs/lane-split.md step B2: hub and
/// lane groups exchanging messages a hop and a jitter apart): a refactor of
/// the messages between them must leave these alone too.
const PINNED_APART: &[(OrderingMode, u32, usize, u64, &str)] = &[
    (
        OrderingMode::Cop,
        4,
        4,
        11,
        "eef11bdc9cfdd8aafa710c48d5a1ef4e4f36be7180b19c24368c9fb5341e4176",
    ),
    (
        OrderingMode::Rcc,
        2,
        4,
        11,
        "cf6c796648655cee43a23b4be271e9e57425e250680abd22f1e17d009bdd0f3b",
    ),
    (
        OrderingMode::Sarek,
        4,
        4,
        11,
        "ec77df02154472c236ab81b31e9dbf033668022e6c9bb3769d0b11296b1ddca4",
    ),
];

#[test]
fn traces_with_the_pieces_apart_are_unchanged() {
    let runs = [
        (OrderingMode::Cop, 4, 4),
        (OrderingMode::Rcc, 2, 4),
        (OrderingMode::Sarek, 4, 4),
    ]
    .into_iter()
    .map(|(mode, pillars, n)| {
        let mut o = options(mode, pillars, n);
        o.pillar_hop_us = Some(100);
        o.pillar_jitter_us = 1_500;
        (mode, pillars, n, 11, o)
    })
    .collect();
    let changed = compare(PINNED_APART, runs);
    assert!(
        changed.is_empty(),
        "simulated behaviour apart changed (re-pin only if that was intended):\n{}",
        changed.join("\n")
    );
}
