//! What the DBFT engine costs per message handled: one whole epoch (every
//! replica proposes, every message delivered, no loss) at n replicas, timed
//! per delivered message. The resource model's `dbft_msg_ns` (chorus-sim
//! `perf.rs`) is this price: a bundled DBFT message costs it on top of its
//! bundle's per-frame `recv_ns`.
//!
//! `cargo bench -p chorus-dbft --bench engine` (`-- --quick` for a fast pass).

use bytes::Bytes;
use chorus_core::{Authenticator, Batch, ClientId, Millis, ReplicaId, Request, RequestSeq, Signature};
use chorus_dbft::{Action, Dbft, DbftConfig, DbftMsg, Event};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::collections::VecDeque;

fn batch(p: usize) -> Batch {
    Batch {
        requests: vec![Request {
            memo: Default::default(),
            client: ClientId(p as u64),
            seq: RequestSeq(1),
            flags: 0,
            op: Bytes::from(vec![p as u8; 8]),
            auth: Authenticator::Signature(Signature([7; 64])),
        }],
        time_ms: 0,
    }
}

/// One epoch at `n`; returns the messages delivered.
fn epoch(n: usize) -> u64 {
    let cfg = DbftConfig::new(n);
    let mut nodes: Vec<Dbft> = (0..n)
        .map(|i| Dbft::new(cfg.clone(), ReplicaId(i as u32)))
        .collect();
    let mut wire: VecDeque<(usize, usize, DbftMsg)> = VecDeque::new();
    let push = |wire: &mut VecDeque<(usize, usize, DbftMsg)>, from: usize, acts: Vec<Action>| {
        for a in acts {
            match a {
                Action::Broadcast { msg } => {
                    for to in (0..n).filter(|&t| t != from) {
                        wire.push_back((from, to, msg.clone()));
                    }
                }
                Action::Send { to, msg } => wire.push_back((from, to.index(), msg)),
                _ => {}
            }
        }
    };
    for (p, node) in nodes.iter_mut().enumerate() {
        let acts = node.handle(
            Millis(0),
            Event::Propose {
                epoch: 0,
                batch: batch(p),
            },
        );
        push(&mut wire, p, acts);
    }
    let mut delivered = 0;
    while let Some((from, to, msg)) = wire.pop_front() {
        delivered += 1;
        let acts = nodes[to].handle(
            Millis(0),
            Event::Message {
                from: ReplicaId(from as u32),
                msg,
            },
        );
        push(&mut wire, to, acts);
    }
    assert!(nodes
        .iter()
        .all(|d| d.epoch(0).is_some_and(|s| s.bitmask().is_some())));
    delivered
}

fn per_message(c: &mut Criterion) {
    let mut g = c.benchmark_group("dbft-epoch");
    g.sample_size(10);
    for n in [4usize, 16, 64] {
        g.throughput(Throughput::Elements(epoch(n)));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| b.iter(|| epoch(n)));
    }
    g.finish();
}

criterion_group!(benches, per_message);
criterion_main!(benches);
