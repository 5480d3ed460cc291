//! What one protocol step costs in CPU: the per-operation prices the
//! simulator's resource model charges (issue 15, calibration). Each figure is
//! per call, or per KiB where the work grows with the payload.
//!
//! `cargo bench -p chorus-core --bench costs` (criterion; `-- --quick` for a
//! fast pass). Record figures in BENCHMARKS.md with machine and load.

use bytes::Bytes;
use chorus_core::{
    decode, encode, Batch, ClientId, ClusterConfig, ClusterTag, Digest, Identity, LaneId, Limits, PrePrepare,
    ProtocolParams, ReplicaMsg, Request, RequestSeq, SigKind, Slot, View,
};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;

const SIZES: [usize; 3] = [64, 1024, 16 * 1024];

fn hashing(c: &mut Criterion) {
    let mut g = c.benchmark_group("blake3");
    for size in SIZES {
        let data = vec![0x5au8; size];
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::from_parameter(size), &data, |b, d| {
            b.iter(|| Digest::of(black_box(d)))
        });
    }
    g.finish();
}

fn signatures(c: &mut Criterion) {
    let id = Identity::from_seed(b"bench");
    let pk = id.public();
    let tag = ClusterTag::from_digest(Digest::of(b"cluster"));
    let d = Digest::of(b"message");
    let sig = id.sign_bound(&tag, SigKind::Prepare, &d);
    c.bench_function("ed25519/sign", |b| {
        b.iter(|| id.sign_bound(&tag, SigKind::Prepare, black_box(&d)))
    });
    c.bench_function("ed25519/verify", |b| {
        b.iter(|| assert!(pk.verify_bound(&tag, SigKind::Prepare, black_box(&d), &sig)))
    });
}

fn macs(c: &mut Criterion) {
    let a = Identity::from_seed(b"a");
    let b_ = Identity::from_seed(b"b");
    let key = a.pairwise_key(&b_.public());
    let tag = ClusterTag::from_digest(Digest::of(b"cluster"));
    let d = Digest::of(b"message");
    let mac = key.mac_bound(&tag, SigKind::Prepare, &d);
    c.bench_function("mac/compute", |b| {
        b.iter(|| key.mac_bound(&tag, SigKind::Prepare, black_box(&d)))
    });
    c.bench_function("mac/verify", |b| {
        b.iter(|| assert!(key.verify_bound(&tag, SigKind::Prepare, black_box(&d), &mac)))
    });
}

/// A pre-prepare of `requests` requests of `op` bytes each, MAC vectors for n = 4.
fn pre_prepare(requests: usize, op: usize) -> (ReplicaMsg, Limits) {
    let (cfg, _, _) = ClusterConfig::for_testing(4, 1, ProtocolParams::default(), 1);
    let limits = Limits::from_config(&cfg);
    let client = Identity::from_seed(b"client");
    let keys: Vec<_> = (0..4u8)
        .map(|i| client.pairwise_key(&Identity::from_seed(&[i]).public()))
        .collect();
    let tag = ClusterTag::from_digest(Digest::of(b"cluster"));
    let batch = Batch {
        requests: (0..requests)
            .map(|i| {
                Request::with_macs(
                    &tag,
                    ClientId(1),
                    RequestSeq(i as u64 + 1),
                    0,
                    Bytes::from(vec![7u8; op]),
                    &keys,
                )
            })
            .collect(),
        time_ms: 0,
    };
    let id = Identity::from_seed(b"leader");
    let digest = batch.digest();
    let msg = ReplicaMsg::PrePrepare(PrePrepare {
        lane: LaneId(0),
        view: View(0),
        slot: Slot(1),
        digest,
        batch,
        sig: id.sign(digest.as_bytes()),
    });
    (msg, limits)
}

fn codec(c: &mut Criterion) {
    let mut g = c.benchmark_group("codec/pre-prepare");
    for (requests, op) in [(1, 512), (64, 512)] {
        let (msg, limits) = pre_prepare(requests, op);
        let bytes = encode(&msg);
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        let name = format!("{requests}x{op}B");
        g.bench_function(BenchmarkId::new("encode", &name), |b| {
            b.iter(|| encode(black_box(&msg)))
        });
        g.bench_function(BenchmarkId::new("decode", &name), |b| {
            b.iter(|| decode::<ReplicaMsg>(black_box(&bytes), &limits).expect("decodes"))
        });
        // As a backup receives it: decoded, no request digest taken yet
        // (`DigestMemo`); "remembered" is the proposer's case, whose
        // requests were hashed when they arrived.
        g.bench_function(BenchmarkId::new("batch-digest", &name), |b| {
            b.iter_batched(
                || match decode::<ReplicaMsg>(&bytes, &limits).expect("decodes") {
                    ReplicaMsg::PrePrepare(pp) => pp.batch,
                    _ => unreachable!("a pre-prepare"),
                },
                |batch| black_box(&batch).digest(),
                criterion::BatchSize::SmallInput,
            )
        });
        if let ReplicaMsg::PrePrepare(pp) = &msg {
            g.bench_function(BenchmarkId::new("batch-digest-remembered", &name), |b| {
                b.iter(|| black_box(&pp.batch).digest())
            });
        }
    }
    g.finish();
}

criterion_group!(costs, hashing, signatures, macs, codec);
criterion_main!(costs);
