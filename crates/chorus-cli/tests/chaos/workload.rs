//! The client workload and its history. Every operation is recorded as the
//! client saw it (Jepsen's invoke then ok / fail / info, with times), and
//! checked afterwards: per key linearizable as a register, and every
//! acknowledged write still readable at the end.

use crate::lincheck::{self, Kind, Verdict};
use bytes::Bytes;
use chorus_apps::kv_op::{KvOp, KvReply};
use chorus_client::{Client, ClientError};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Operations drawn against one group of keys before the workload moves on:
/// keeps every key's history short (so the checker's search stays small)
/// while several clients still contend on each key.
const OPS_PER_GROUP: u64 = 64;
const KEYS_PER_GROUP: u64 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// f+1 replicas rejected it: it did not take effect.
    Fail,
    /// Timed out or the client gave up: it may or may not have taken effect.
    Info,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum F {
    Write(u64),
    /// Ordered read; the value read when the outcome is `Ok`.
    Read(Option<u64>),
    /// Read-only fast path (2f+1 matching replies, else an ordered fallback).
    ReadOnly(Option<u64>),
}

#[derive(Clone, Debug)]
pub struct Rec {
    pub process: u64,
    pub key: String,
    pub f: F,
    pub call_us: u64,
    pub ret_us: u64,
    pub outcome: Outcome,
}

pub struct Workload {
    pub t0: Instant,
    pub stop: AtomicBool,
    next_op: AtomicU64,
    pub history: Mutex<Vec<Rec>>,
}

impl Workload {
    pub fn new(t0: Instant) -> Arc<Workload> {
        Arc::new(Workload {
            t0,
            stop: AtomicBool::new(false),
            next_op: AtomicU64::new(0),
            history: Mutex::new(Vec::new()),
        })
    }

    pub fn now_us(&self) -> u64 {
        self.t0.elapsed().as_micros() as u64
    }

    /// Run one operation and record it.
    pub async fn op(&self, client: &Client, process: u64, key: String, f: F) -> Rec {
        let call_us = self.now_us();
        let (f, outcome) = match f {
            F::Write(v) => {
                let r = client.invoke(KvOp::put(key.clone(), value_bytes(v))).await;
                (F::Write(v), outcome_of(r.map(|_| ())))
            }
            F::Read(_) => match client.invoke(KvOp::get(key.clone())).await {
                Ok(b) => (F::Read(decode_read(&b)), Outcome::Ok),
                Err(e) => (F::Read(None), outcome_of::<()>(Err(e))),
            },
            F::ReadOnly(_) => match client.invoke_read_only(KvOp::get(key.clone())).await {
                Ok(b) => (F::ReadOnly(decode_read(&b)), Outcome::Ok),
                Err(e) => (F::ReadOnly(None), outcome_of::<()>(Err(e))),
            },
        };
        let rec = Rec {
            process,
            key,
            f,
            call_us,
            ret_us: self.now_us(),
            outcome,
        };
        self.history.lock().push(rec.clone());
        rec
    }

    /// One worker: random reads and writes of unique values until told to stop.
    pub async fn worker(self: Arc<Self>, client: Arc<Client>, process: u64, seed: u64) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        while !self.stop.load(Ordering::Relaxed) {
            let n = self.next_op.fetch_add(1, Ordering::Relaxed);
            let key = format!("g{}-k{}", n / OPS_PER_GROUP, rng.gen_range(0..KEYS_PER_GROUP));
            let f = match rng.gen_range(0..4) {
                0 | 1 => F::Write(n + 1),
                2 => F::Read(None),
                _ => F::ReadOnly(None),
            };
            self.op(&client, process, key, f).await;
        }
    }

    pub fn keys(&self) -> Vec<String> {
        let mut k: Vec<String> = self.history.lock().iter().map(|r| r.key.clone()).collect();
        k.sort();
        k.dedup();
        k
    }

    /// Time of the first acknowledged write invoked at or after `t_us`.
    pub fn first_fresh_write_ack(&self, t_us: u64) -> Option<u64> {
        self.history
            .lock()
            .iter()
            .filter(|r| r.outcome == Outcome::Ok && matches!(r.f, F::Write(_)) && r.call_us >= t_us)
            .map(|r| r.ret_us)
            .min()
    }

    /// Longest stretch in `[from, to]` without any acknowledged operation.
    pub fn longest_gap_us(&self, from: u64, to: u64) -> u64 {
        let mut acks: Vec<u64> = self
            .history
            .lock()
            .iter()
            .filter(|r| r.outcome == Outcome::Ok && r.ret_us >= from && r.ret_us <= to)
            .map(|r| r.ret_us)
            .collect();
        acks.sort_unstable();
        let mut prev = from;
        let mut gap = 0;
        for a in acks.into_iter().chain(std::iter::once(to)) {
            gap = gap.max(a - prev);
            prev = a;
        }
        gap
    }

    /// Write the history as JSON lines, Jepsen style: an `invoke` and a completion per operation.
    pub fn dump(&self, path: &std::path::Path) {
        let mut events = Vec::new();
        for r in self.history.lock().iter() {
            let (f, value) = match r.f {
                F::Write(v) => ("write", Some(v)),
                F::Read(v) => ("read", v),
                F::ReadOnly(v) => ("read-only", v),
            };
            let invoke_value = if matches!(r.f, F::Write(_)) { value } else { None };
            events.push((r.call_us, serde_json::json!({"time_us": r.call_us, "process": r.process, "type": "invoke", "f": f, "key": r.key, "value": invoke_value})));
            let ty = match r.outcome {
                Outcome::Ok => "ok",
                Outcome::Fail => "fail",
                Outcome::Info => "info",
            };
            events.push((r.ret_us, serde_json::json!({"time_us": r.ret_us, "process": r.process, "type": ty, "f": f, "key": r.key, "value": value})));
        }
        events.sort_by_key(|e| e.0);
        let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
        for (_, e) in events {
            writeln!(out, "{e}").unwrap();
        }
    }
}

fn value_bytes(v: u64) -> Bytes {
    Bytes::from(format!("v{v}"))
}

/// A value nobody wrote decodes to `u64::MAX`, which the checker then rejects.
fn decode_read(b: &[u8]) -> Option<u64> {
    match KvReply::decode(b) {
        Ok(KvReply::Value(None)) => None,
        Ok(KvReply::Value(Some(v))) => Some(
            std::str::from_utf8(&v)
                .ok()
                .and_then(|s| s.strip_prefix('v'))
                .and_then(|s| s.parse().ok())
                .unwrap_or(u64::MAX),
        ),
        _ => Some(u64::MAX),
    }
}

fn outcome_of<T>(r: Result<T, ClientError>) -> Outcome {
    match r {
        Ok(_) => Outcome::Ok,
        Err(ClientError::Rejected(_)) => Outcome::Fail,
        Err(_) => Outcome::Info,
    }
}

pub struct Verdicts {
    pub ops: usize,
    pub ok: usize,
    pub fail: usize,
    pub info: usize,
    pub keys: usize,
    pub acked_writes: usize,
    /// Keys whose final read is not the latest acknowledged write (nor a
    /// write that might have landed after it).
    pub lost: Vec<String>,
    pub not_linearizable: Vec<String>,
    pub unknown: Vec<String>,
    /// Keys whose final read failed (the check could not be made).
    pub unread: Vec<String>,
}

/// Check the history. The final reads (done after the faults, one per key)
/// are part of it, so "latest value readable" is checked twice: by the
/// register model and by the explicit rule below.
pub fn check(history: &[Rec], final_reads: &HashMap<String, Option<u64>>) -> Verdicts {
    let mut by_key: BTreeMap<&str, Vec<&Rec>> = BTreeMap::new();
    for r in history {
        by_key.entry(&r.key).or_default().push(r);
    }
    let mut v = Verdicts {
        ops: history.len(),
        ok: history.iter().filter(|r| r.outcome == Outcome::Ok).count(),
        fail: history.iter().filter(|r| r.outcome == Outcome::Fail).count(),
        info: history.iter().filter(|r| r.outcome == Outcome::Info).count(),
        keys: by_key.len(),
        acked_writes: history
            .iter()
            .filter(|r| r.outcome == Outcome::Ok && matches!(r.f, F::Write(_)))
            .count(),
        lost: Vec::new(),
        not_linearizable: Vec::new(),
        unknown: Vec::new(),
        unread: Vec::new(),
    };
    for (key, recs) in &by_key {
        let ops: Vec<lincheck::Op> = recs
            .iter()
            .filter_map(|r| {
                let ret = match r.outcome {
                    Outcome::Ok => Some(r.ret_us),
                    Outcome::Info => None,
                    Outcome::Fail => return None,
                };
                let kind = match (r.f, r.outcome) {
                    (F::Write(x), _) => Kind::Write(x),
                    (F::Read(x) | F::ReadOnly(x), Outcome::Ok) => Kind::Read(x),
                    _ => return None,
                };
                Some(lincheck::Op {
                    call: r.call_us,
                    ret,
                    kind,
                })
            })
            .collect();
        match lincheck::check(&ops, 2_000_000) {
            Verdict::Linearizable => {}
            Verdict::NotLinearizable => v.not_linearizable.push(key.to_string()),
            Verdict::Unknown => v.unknown.push(key.to_string()),
        }
        // Latest acknowledged writes: acknowledged, and no other acknowledged
        // write of the key began after it returned. The final value must be
        // one of them, or a write whose outcome is unknown or that overlapped.
        let acked: Vec<&&Rec> = recs
            .iter()
            .filter(|r| r.outcome == Outcome::Ok && matches!(r.f, F::Write(_)))
            .collect();
        if acked.is_empty() {
            continue;
        }
        let admissible = |val: u64| {
            recs.iter().any(|r| {
                r.f == F::Write(val)
                    && match r.outcome {
                        Outcome::Ok => !acked.iter().any(|o| o.call_us > r.ret_us),
                        Outcome::Info => true,
                        Outcome::Fail => false,
                    }
            })
        };
        match final_reads.get(*key) {
            Some(Some(val)) if admissible(*val) => {}
            None => v.unread.push(key.to_string()),
            _ => v.lost.push(key.to_string()),
        }
    }
    v
}
