//! What the request pool costs a backup per request at peak load: every
//! request of a pre-prepare is held in flight (`mark_in_flight`) and
//! dropped when its slot decides (`on_decided`), with the pool's memory of
//! ordered requests full (each client's last `seq_window::WINDOW` seqs), as
//! it is after the first seconds of a run (issue 13 item 3; a backup's profile had
//! the pool at ~11 % of its CPU, BENCHMARKS.md 2026-11-28).
//!
//! `cargo bench -p chorus-order --bench pool_backup` prints ns per request.
//! Plain timing, no criterion: the figure compared is the ratio of two
//! binaries run alternately (BENCHMARKS.md).

// The benchmark's own stopwatch, outside the sans-IO pool it times.
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use chorus_core::{
    Batch, Cell, ClientId, ClusterConfig, ClusterTag, LaneId, Millis, ProtocolParams, ReplicaId, Request,
    RequestSeq, Slot,
};
use chorus_order::Pool;
use std::sync::Arc;
use std::time::Instant;

/// The peak profile's batch size (BENCHMARKS.md 2026-11-28: ~190 per slot).
const BATCH_REQUESTS: usize = 190;
const CLIENTS: usize = 32;
/// Slots timed per run; a run ends with the pool's ordered memory full.
const SLOTS: usize = 2_000;

fn main() {
    let params = ProtocolParams {
        pillars: 1,
        ..ProtocolParams::default()
    };
    let (cfg, replicas, clients) = ClusterConfig::for_testing(4, CLIENTS, params, 7);
    let cfg = Arc::new(cfg);
    let tag = ClusterTag::of(&cfg);
    let keys: Vec<Vec<_>> = clients
        .iter()
        .map(|c| replicas.iter().map(|r| c.pairwise_key(&r.public())).collect())
        .collect();
    let op = Bytes::from(vec![7u8; 512]);
    // Requests are built once (their MACs would dominate); each slot's
    // batch has fresh (client, seq) keys, as a backup sees them.
    let mut seqs = vec![0u64; CLIENTS];
    let batches: Vec<Batch> = (0..SLOTS)
        .map(|s| {
            let requests = (0..BATCH_REQUESTS)
                .map(|i| {
                    let c = (s * BATCH_REQUESTS + i) % CLIENTS;
                    seqs[c] += 1;
                    Request::with_macs(
                        &tag,
                        ClientId(c as u64),
                        RequestSeq(seqs[c]),
                        0,
                        op.clone(),
                        &keys[c],
                    )
                })
                .collect();
            Batch::new(requests, s as u64)
        })
        .collect();
    for round in 0..5 {
        let mut pool = Pool::new(cfg.clone(), ReplicaId(1), replicas[1].clone());
        let start = Instant::now();
        for (s, batch) in batches.iter().enumerate() {
            let cell = Cell {
                lane: LaneId(0),
                slot: Slot(s as u64 + 1),
            };
            pool.mark_in_flight(Millis(s as u64), cell, batch);
            pool.on_decided(Millis(s as u64), cell, batch);
        }
        let ns = start.elapsed().as_nanos() as f64 / (SLOTS * BATCH_REQUESTS) as f64;
        println!(
            "round {round}: {ns:.0} ns per request (mark_in_flight + on_decided, {BATCH_REQUESTS} per batch)"
        );
    }
}
