//! Property: whatever order the network delivers the same messages in, every
//! correct replica decides the same bitmask and outputs the same batches,
//! with or without Byzantine senders.

use super::harness::{batch, Net};
use crate::msg::{BinMsg, BinSet, DbftMsg, InstanceId};
use crate::DbftConfig;
use chorus_core::{Digest, ReplicaId};
use proptest::prelude::*;

/// A fixed Byzantine script: equivocating INITs, ECHO/READY for a hash never
/// broadcast, B_VAL/AUX for both values, conflicting COORDs, lying DECIDED.
fn byzantine_script(net: &mut Net, z: usize, epochs: u64) {
    let n = net.n;
    for e in 0..epochs {
        for to in 0..n {
            if to != z {
                let b = batch(z, e, 1 + (to % 2) as u8);
                net.inject(z, to, DbftMsg::RbInit { epoch: e, batch: b });
            }
        }
        let fake = Digest([0xEE; 32]);
        net.inject_all(
            z,
            DbftMsg::RbEcho {
                epoch: e,
                proposer: ReplicaId(0),
                digest: fake,
            },
        );
        net.inject_all(
            z,
            DbftMsg::RbReady {
                epoch: e,
                proposer: ReplicaId(0),
                digest: fake,
            },
        );
        for k in 0..n as u32 {
            let inst = InstanceId {
                epoch: e,
                slot: ReplicaId(k),
            };
            for r in 1..=3 {
                for v in [false, true] {
                    net.inject_all(
                        z,
                        DbftMsg::Bin {
                            inst,
                            msg: BinMsg::BVal { round: r, value: v },
                        },
                    );
                }
                net.inject_all(
                    z,
                    DbftMsg::Bin {
                        inst,
                        msg: BinMsg::Aux {
                            round: r,
                            values: BinSet::Both,
                        },
                    },
                );
                for to in 0..n {
                    if to != z {
                        let msg = BinMsg::Coord {
                            round: r,
                            value: to % 2 == 0,
                        };
                        net.inject(z, to, DbftMsg::Bin { inst, msg });
                    }
                }
            }
            net.inject_all(
                z,
                DbftMsg::Bin {
                    inst,
                    msg: BinMsg::Decided { value: k % 2 == 0 },
                },
            );
        }
    }
}

fn run(n: usize, byz: &[usize], seed: u64, epochs: u64) {
    let mut net = Net::new(DbftConfig::new(n), byz).with_seed(seed);
    for &z in byz {
        byzantine_script(&mut net, z, epochs);
    }
    for e in 0..epochs {
        for i in net.correct() {
            net.propose(i, e, batch(i, e, 1));
        }
    }
    net.run(5_000_000);
    assert!(net.delivered > 0);
    for e in 0..epochs {
        let (mask, _) = net.agreed(e);
        assert!(
            mask.iter().any(|b| *b),
            "the bitmask is never empty (TR Lemma 14)"
        );
        net.agreed_ready(e);
    }
    for i in net.correct() {
        assert_eq!(net.node(i).conflicts(), 0);
    }
}

proptest! {
    // 48 cases by default; PROPTEST_CASES=N for a longer sweep.
    #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48), ..ProptestConfig::default() })]

    #[test]
    fn prop_any_delivery_order_same_bitmask_and_batches_n4(seed in any::<u64>(), byz in proptest::bool::ANY) {
        run(4, if byz { &[3] } else { &[] }, seed, 2);
    }

    #[test]
    fn prop_any_delivery_order_same_bitmask_and_batches_n7(seed in any::<u64>()) {
        run(7, &[1, 5], seed, 1);
    }
}
