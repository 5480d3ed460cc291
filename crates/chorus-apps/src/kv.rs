//! A replicated key-value store with YCSB operations.
//!
//! State is split into `N` shards by a hash of the key, each behind its own
//! reader-writer lock, so requests that the parallel executor runs at once
//! (CBASE: they touch different keys) do not queue on one lock.
//!
//! Declared access sets (CBASE §5.2, written as keys instead of a matrix):
//! - `Get`, `Read`: read `key`;
//! - `Put`, `Delete`, `Update`, `Insert`, `ReadModifyWrite`: write `key`;
//! - `Scan`: `Access::Everything`. A scan reads a key range whose contents are
//!   not known before it runs, so it is ordered against every other request.
//!   This is conservative — CBASE §4.1 allows a sound parallelizer to add false
//!   dependencies — and keeps SAREK's key→partition prediction simple (a range
//!   token would turn every write into a two-partition request);
//! - a malformed op: no keys. It touches nothing and answers an error.
//!
//! The snapshot is canonical: all entries sorted by key, postcard-encoded; the
//! state digest is the digest of that snapshot.

use crate::kv_op::{KvOp, KvReply, MAX_KEY_BYTES, MAX_SCAN_BYTES, MAX_SCAN_LIMIT};
use bytes::Bytes;
use chorus_exec::{Access, ExecContext, Service};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const DEFAULT_KV_SHARDS: usize = 16;
/// Upper bound on the shard count (each shard is a lock and a map).
pub const MAX_KV_SHARDS: usize = 4096;

pub struct KvService {
    shards: Vec<RwLock<BTreeMap<Bytes, Bytes>>>,
    /// Test-only imprecise access sets (SAREK §IV-D): a `PutAll` declares
    /// only its first key; [`Service::execution_access`] names them all.
    first_key_only: bool,
}

#[derive(Serialize, Deserialize)]
struct KvSnapshot {
    /// Strictly increasing keys.
    entries: Vec<(Bytes, Bytes)>,
}

/// FNV-1a of the key, modulo `n`: cheap and stable; placement never affects results.
fn shard_index(key: &[u8], n: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % n as u64) as usize
}

impl Default for KvService {
    fn default() -> Self {
        KvService::new(DEFAULT_KV_SHARDS)
    }
}

impl KvService {
    /// `shards` is clamped to `1..=MAX_KV_SHARDS`.
    pub fn new(shards: usize) -> KvService {
        let n = shards.clamp(1, MAX_KV_SHARDS);
        KvService {
            shards: (0..n).map(|_| RwLock::new(BTreeMap::new())).collect(),
            first_key_only: false,
        }
    }

    /// A store whose `PutAll` declares only its first key, so SAREK's
    /// PREDICT() misses its other partitions and execution re-predicts them
    /// (the service `kv-mispredicting`; for tests and the simulator).
    pub fn mispredicting(shards: usize) -> KvService {
        KvService {
            first_key_only: true,
            ..KvService::new(shards)
        }
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Number of keys stored.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, key: &[u8]) -> &RwLock<BTreeMap<Bytes, Bytes>> {
        &self.shards[shard_index(key, self.shards.len())]
    }

    /// Apply one decoded operation.
    pub fn apply(&self, op: KvOp) -> KvReply {
        match op {
            KvOp::Get { key } | KvOp::Read { key } => {
                KvReply::Value(self.shard(&key).read().get(&key).cloned())
            }
            KvOp::Put { key, value } => {
                self.shard(&key).write().insert(key, value);
                KvReply::Ok
            }
            KvOp::Delete { key } => KvReply::Existed(self.shard(&key).write().remove(&key).is_some()),
            KvOp::Update { key, value } => {
                let mut s = self.shard(&key).write();
                match s.get_mut(&key) {
                    Some(v) => {
                        *v = value;
                        KvReply::Existed(true)
                    }
                    None => KvReply::Existed(false),
                }
            }
            KvOp::Insert { key, value } => {
                let mut s = self.shard(&key).write();
                match s.entry(key) {
                    std::collections::btree_map::Entry::Occupied(_) => KvReply::Existed(true),
                    std::collections::btree_map::Entry::Vacant(v) => {
                        v.insert(value);
                        KvReply::Existed(false)
                    }
                }
            }
            KvOp::ReadModifyWrite { key, value } => {
                KvReply::Value(self.shard(&key).write().insert(key, value))
            }
            KvOp::Scan { start, limit } => self.scan(&start, limit.min(MAX_SCAN_LIMIT) as usize),
            KvOp::PutAll { pairs } => {
                let entries = pairs
                    .into_iter()
                    .map(|(key, value)| {
                        let old = self.shard(&key).write().insert(key.clone(), value);
                        (key, old.unwrap_or_default())
                    })
                    .collect();
                KvReply::Entries { entries, more: false }
            }
        }
    }

    fn scan(&self, start: &Bytes, limit: usize) -> KvReply {
        // Each shard contributes its first `limit + 1` keys from `start`; the
        // merged, sorted prefix is then exactly the global one.
        let mut all: Vec<(Bytes, Bytes)> = Vec::new();
        for s in &self.shards {
            let s = s.read();
            all.extend(
                s.range(start.clone()..)
                    .take(limit + 1)
                    .map(|(k, v)| (k.clone(), v.clone())),
            );
        }
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut entries = Vec::with_capacity(limit.min(all.len()));
        let mut bytes = 0usize;
        let mut more = false;
        for (k, v) in all {
            let size = k.len() + v.len();
            if entries.len() == limit || bytes + size > MAX_SCAN_BYTES {
                more = true;
                break;
            }
            bytes += size;
            entries.push((k, v));
        }
        KvReply::Entries { entries, more }
    }

    /// What an operation touches, exactly.
    fn exact_access(&self, op: &[u8]) -> Access {
        let Ok(op) = KvOp::decode(op) else {
            return Access::Keys {
                reads: vec![],
                writes: vec![],
            };
        };
        match op {
            KvOp::Scan { .. } => Access::Everything,
            KvOp::PutAll { pairs } => Access::Keys {
                reads: vec![],
                writes: pairs.into_iter().map(|(k, _)| k).collect(),
            },
            KvOp::Get { key } | KvOp::Read { key } => Access::Keys {
                reads: vec![key],
                writes: vec![],
            },
            KvOp::Put { key, .. }
            | KvOp::Delete { key }
            | KvOp::Update { key, .. }
            | KvOp::Insert { key, .. }
            | KvOp::ReadModifyWrite { key, .. } => Access::Keys {
                reads: vec![],
                writes: vec![key],
            },
        }
    }

    fn sorted_entries(&self) -> Vec<(Bytes, Bytes)> {
        let mut all: Vec<(Bytes, Bytes)> = Vec::with_capacity(self.len());
        for s in &self.shards {
            all.extend(s.read().iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

impl Service for KvService {
    fn execute(&self, op: &[u8], _ctx: &ExecContext) -> Bytes {
        match KvOp::decode(op) {
            Ok(op) => self.apply(op).encode(),
            Err(e) => KvReply::Error(e.to_string()).encode(),
        }
    }

    fn access(&self, op: &[u8]) -> Access {
        if self.first_key_only {
            if let Ok(KvOp::PutAll { pairs }) = KvOp::decode(op) {
                return Access::Keys {
                    reads: vec![],
                    writes: pairs.into_iter().take(1).map(|(k, _)| k).collect(),
                };
            }
        }
        self.exact_access(op)
    }

    fn execution_access(&self, op: &[u8]) -> Option<Access> {
        self.first_key_only.then(|| self.exact_access(op))
    }

    fn is_read_only(&self, op: &[u8]) -> bool {
        KvOp::decode(op).is_ok_and(|op| op.is_read_only())
    }

    fn snapshot(&self) -> Bytes {
        let snap = KvSnapshot {
            entries: self.sorted_entries(),
        };
        Bytes::from(postcard::to_allocvec(&snap).expect("encoding a kv snapshot cannot fail"))
    }

    fn restore(&self, snapshot: &[u8]) -> Result<(), String> {
        let (snap, rest): (KvSnapshot, &[u8]) =
            postcard::take_from_bytes(snapshot).map_err(|e| format!("malformed kv snapshot: {e}"))?;
        if !rest.is_empty() {
            return Err(format!("kv snapshot has {} trailing bytes", rest.len()));
        }
        if snap.entries.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err("kv snapshot keys are not strictly increasing".into());
        }
        if snap.entries.iter().any(|(k, _)| k.len() > MAX_KEY_BYTES) {
            return Err("kv snapshot holds an oversized key".into());
        }
        // Validated: now replace the state. Lock every shard (in index order,
        // the only multi-lock order used) so no reader sees a mix.
        let mut guards: Vec<_> = self.shards.iter().map(|s| s.write()).collect();
        for g in guards.iter_mut() {
            g.clear();
        }
        let n = guards.len();
        for (k, v) in snap.entries {
            guards[shard_index(&k, n)].insert(k, v);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{ClientId, RequestSeq, Seq};

    fn ctx() -> ExecContext {
        ExecContext {
            seq: Seq(0),
            index: 0,
            client: ClientId(1),
            request_seq: RequestSeq(1),
            time_ms: 0,
        }
    }

    fn run(kv: &KvService, op: KvOp) -> KvReply {
        KvReply::decode(&kv.execute(&op.encode(), &ctx())).unwrap()
    }

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn plain_kv_semantics() {
        let kv = KvService::new(4);
        assert_eq!(run(&kv, KvOp::Get { key: b("a") }), KvReply::Value(None));
        assert_eq!(
            run(
                &kv,
                KvOp::Put {
                    key: b("a"),
                    value: b("1")
                }
            ),
            KvReply::Ok
        );
        assert_eq!(run(&kv, KvOp::Get { key: b("a") }), KvReply::Value(Some(b("1"))));
        assert_eq!(run(&kv, KvOp::Delete { key: b("a") }), KvReply::Existed(true));
        assert_eq!(run(&kv, KvOp::Delete { key: b("a") }), KvReply::Existed(false));
    }

    #[test]
    fn ycsb_semantics() {
        let kv = KvService::new(4);
        let ins = |v: &str| KvOp::Insert {
            key: b("u1"),
            value: b(v),
        };
        assert_eq!(run(&kv, ins("x")), KvReply::Existed(false));
        assert_eq!(run(&kv, ins("y")), KvReply::Existed(true));
        assert_eq!(
            run(&kv, KvOp::Read { key: b("u1") }),
            KvReply::Value(Some(b("x")))
        );
        let upd = |k: &str| KvOp::Update {
            key: b(k),
            value: b("z"),
        };
        assert_eq!(run(&kv, upd("u1")), KvReply::Existed(true));
        assert_eq!(run(&kv, upd("nope")), KvReply::Existed(false));
        assert_eq!(run(&kv, KvOp::Get { key: b("nope") }), KvReply::Value(None));
        let rmw = KvOp::ReadModifyWrite {
            key: b("u1"),
            value: b("w"),
        };
        assert_eq!(run(&kv, rmw), KvReply::Value(Some(b("z"))));
        assert_eq!(
            run(&kv, KvOp::Read { key: b("u1") }),
            KvReply::Value(Some(b("w")))
        );
    }

    #[test]
    fn scan_is_global_key_order_across_shards() {
        let kv = KvService::new(8);
        for i in 0..50u32 {
            kv.apply(KvOp::Put {
                key: Bytes::from(format!("k{i:03}")),
                value: b("v"),
            });
        }
        let KvReply::Entries { entries, more } = run(
            &kv,
            KvOp::Scan {
                start: b("k010"),
                limit: 5,
            },
        ) else {
            panic!("scan reply")
        };
        let keys: Vec<_> = entries.iter().map(|e| e.0.clone()).collect();
        assert_eq!(keys, ["k010", "k011", "k012", "k013", "k014"].map(b));
        assert!(more);
        let KvReply::Entries { entries, more } = run(
            &kv,
            KvOp::Scan {
                start: b("k048"),
                limit: 5,
            },
        ) else {
            panic!("scan reply")
        };
        assert_eq!(entries.len(), 2);
        assert!(!more);
    }

    #[test]
    fn access_sets_and_read_only() {
        let kv = KvService::default();
        assert_eq!(
            kv.access(&KvOp::get("k")),
            Access::Keys {
                reads: vec![b("k")],
                writes: vec![]
            }
        );
        assert_eq!(
            kv.access(&KvOp::put("k", "v")),
            Access::Keys {
                reads: vec![],
                writes: vec![b("k")]
            }
        );
        assert_eq!(kv.access(&KvOp::scan("a", 3)), Access::Everything);
        assert!(kv.is_read_only(&KvOp::get("k")) && kv.is_read_only(&KvOp::scan("", 1)));
        assert!(!kv.is_read_only(&KvOp::put("k", "v")));
        assert!(!kv.is_read_only(b"\xff\xff"));
    }

    #[test]
    fn malformed_op_is_an_error_reply_and_touches_nothing() {
        let kv = KvService::default();
        let r = KvReply::decode(&kv.execute(b"\xff\xff\xff", &ctx())).unwrap();
        assert!(matches!(r, KvReply::Error(_)));
        assert_eq!(
            kv.access(b"\xff"),
            Access::Keys {
                reads: vec![],
                writes: vec![]
            }
        );
        assert!(kv.is_empty());
    }

    #[test]
    fn snapshot_is_canonical_across_shard_counts_and_restores() {
        let a = KvService::new(3);
        let c = KvService::new(16);
        for i in (0..40u32).rev() {
            let op = KvOp::Put {
                key: Bytes::from(format!("key{i}")),
                value: Bytes::from(i.to_le_bytes().to_vec()),
            };
            a.apply(op.clone());
            c.apply(op);
        }
        assert_eq!(a.snapshot(), c.snapshot());
        assert_eq!(a.state_digest(), c.state_digest());
        let fresh = KvService::new(5);
        fresh.apply(KvOp::Put {
            key: b("junk"),
            value: b("x"),
        });
        fresh.restore(&a.snapshot()).unwrap();
        assert_eq!(fresh.snapshot(), a.snapshot());
        assert_eq!(run(&fresh, KvOp::Get { key: b("junk") }), KvReply::Value(None));
    }

    #[test]
    fn bad_snapshots_leave_state_alone() {
        let kv = KvService::new(2);
        kv.apply(KvOp::Put {
            key: b("a"),
            value: b("1"),
        });
        let before = kv.snapshot();
        let unsorted = KvSnapshot {
            entries: vec![(b("b"), b("")), (b("a"), b(""))],
        };
        assert!(kv.restore(&postcard::to_allocvec(&unsorted).unwrap()).is_err());
        assert!(kv
            .restore(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")
            .is_err());
        assert_eq!(kv.snapshot(), before);
    }
}
