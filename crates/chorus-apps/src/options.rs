//! Building a service from its name and options.

use crate::kv::{KvService, DEFAULT_KV_SHARDS};
use crate::kv_op::KvOp;
use crate::null::NullService;
use crate::registry::{ServiceEntry, ServiceRegistry};
use crate::sleep::SleepService;
use crate::token::{Genesis, TokenService};
use bytes::Bytes;
use chorus_core::ClientId;
use chorus_exec::Service;
use rand::{Rng, RngCore};
use std::sync::Arc;
use std::time::Duration;

/// The names [`service_by_name`] knows.
pub const SERVICE_NAMES: &[&str] = &["kv", "kv-mispredicting", "null", "sleep", "token"];

/// Options for every service; each service reads its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceOptions {
    /// `kv`: lock shards of the store.
    pub kv_shards: usize,
    /// `sleep`: service time per operation, in microseconds.
    pub sleep_us: u64,
    /// `sleep`: parallelism factor (keys); 0 = unlimited.
    pub buckets: u32,
    /// `token`: genesis accounts (keys derived from `token_seed`).
    pub token_accounts: u32,
    /// `token`: genesis balance of each account.
    pub token_balance: u64,
    /// `token`: seed of the genesis account keys.
    pub token_seed: u64,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        ServiceOptions {
            kv_shards: DEFAULT_KV_SHARDS,
            sleep_us: 1_000,
            buckets: 0,
            token_accounts: Genesis::default().accounts,
            token_balance: Genesis::default().balance,
            token_seed: Genesis::default().seed,
        }
    }
}

impl ServiceOptions {
    /// Set one option by name (`kv_shards`, `sleep_us`, `buckets`,
    /// `token_accounts`, `token_balance`, `token_seed`),
    /// e.g. from a `key=value` command-line argument.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let bad = |e: std::num::ParseIntError| format!("option {key}={value}: {e}");
        match key {
            "kv_shards" => self.kv_shards = value.parse().map_err(bad)?,
            "sleep_us" => self.sleep_us = value.parse().map_err(bad)?,
            "buckets" => self.buckets = value.parse().map_err(bad)?,
            "token_accounts" => self.token_accounts = value.parse().map_err(bad)?,
            "token_balance" => self.token_balance = value.parse().map_err(bad)?,
            "token_seed" => self.token_seed = value.parse().map_err(bad)?,
            _ => return Err(format!("unknown service option {key:?}")),
        }
        Ok(())
    }

    /// Parse `key=value,key=value` (empty = defaults).
    pub fn parse(spec: &str) -> Result<ServiceOptions, String> {
        let mut o = ServiceOptions::default();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("service option {part:?} is not key=value"))?;
            o.set(k.trim(), v.trim())?;
        }
        Ok(o)
    }

    /// The `token` service's genesis allocation.
    pub fn token_genesis(&self) -> Genesis {
        Genesis {
            seed: self.token_seed,
            accounts: self.token_accounts,
            balance: self.token_balance,
        }
    }
}

/// The built-in service called `name` (one of [`SERVICE_NAMES`]).
pub fn service_by_name(name: &str, opts: &ServiceOptions) -> Result<Arc<dyn Service>, String> {
    ServiceRegistry::builtin().build(name, opts)
}

/// Keys the kv workload spreads over: few, so requests conflict.
const KV_WORKLOAD_KEYS: u32 = 8;

/// The simulator's kv workload: puts, gets and read-modify-writes over a few
/// keys, each value naming its writer so results differ per request.
pub fn kv_workload(rng: &mut dyn RngCore, client: ClientId, seq: u64) -> Bytes {
    let key = format!("k{}", rng.gen_range(0..KV_WORKLOAD_KEYS));
    let value = format!("c{}-q{seq}", client.0);
    kv_single_key_op(rng, key, value)
}

/// The sleep service's workload (the simulator's; `chorus bench` has its
/// own): a uniformly random bucket, which the service takes modulo its
/// `buckets`, so any parallelism factor sees uniform conflicts.
pub fn sleep_workload(rng: &mut dyn RngCore, _client: ClientId, _seq: u64) -> Bytes {
    SleepService::op(rng.next_u32())
}

/// `kv_workload` with about one request in three a two-key `PutAll` (the
/// simulator's sarek workload: mostly cross-partition requests).
pub fn kv_multi_key_workload(rng: &mut dyn RngCore, client: ClientId, seq: u64) -> Bytes {
    let key = format!("k{}", rng.gen_range(0..KV_WORKLOAD_KEYS));
    let value = format!("c{}-q{seq}", client.0);
    if rng.gen_range(0..3) == 0 {
        let other = format!("k{}", rng.gen_range(0..KV_WORKLOAD_KEYS));
        return KvOp::put_all(vec![
            (key.into(), value.clone().into()),
            (other.into(), value.into()),
        ]);
    }
    kv_single_key_op(rng, key, value)
}

/// Keys of `kv_cross_partition_workload`: enough that every partition gets
/// a fair share (`partition_of_key` hashes them).
const KV_CROSS_WORKLOAD_KEYS: u32 = 1_024;

/// SAREK §V's workload for `share` of cross-border requests (the
/// simulator's `--cross-partition`, as `chorus bench`'s): that fraction
/// are a two-key `PutAll` whose keys lie in different partitions of
/// `partitions`, the rest a single-key put, get or read-modify-write. The
/// same requests whatever the mode, so pbft and sarek see one workload.
pub fn kv_cross_partition_workload(share: f64, partitions: u16) -> crate::registry::WorkloadFn {
    use chorus_exec::partitioned::partition_of_key;
    let share = share.clamp(0.0, 1.0);
    let partitions = partitions.max(2);
    Arc::new(move |rng: &mut dyn RngCore, client: ClientId, seq: u64| {
        let value = format!("c{}-q{seq}", client.0);
        let key = format!("k{}", rng.gen_range(0..KV_CROSS_WORKLOAD_KEYS));
        if !rng.gen_bool(share) {
            return kv_single_key_op(rng, key, value);
        }
        let home = partition_of_key(key.as_bytes(), partitions);
        // A uniform key lands elsewhere with probability ≥ 1/2: 64 misses
        // in a row are 2^-64.
        let other = (0..64)
            .map(|_| format!("k{}", rng.gen_range(0..KV_CROSS_WORKLOAD_KEYS)))
            .find(|k| partition_of_key(k.as_bytes(), partitions) != home)
            .unwrap_or_else(|| format!("k{KV_CROSS_WORKLOAD_KEYS}"));
        KvOp::put_all(vec![
            (key.into(), value.clone().into()),
            (other.into(), value.into()),
        ])
    })
}

/// A put, get or read-modify-write of `key`, one in three each.
fn kv_single_key_op(rng: &mut dyn RngCore, key: String, value: String) -> Bytes {
    match rng.gen_range(0..3) {
        0 => KvOp::put(key, value),
        1 => KvOp::get(key),
        _ => KvOp::ReadModifyWrite {
            key: key.into(),
            value: value.into(),
        }
        .encode(),
    }
}

/// The built-in services as registry entries.
pub(crate) fn builtin_entries() -> Vec<ServiceEntry> {
    vec![
        ServiceEntry::new("kv", "key-value store with YCSB operations", |o| {
            Ok(Arc::new(KvService::new(o.kv_shards)) as Arc<dyn Service>)
        })
        .with_workload(kv_workload),
        ServiceEntry::new(
            "kv-mispredicting",
            "kv whose PutAll declares only its first key (test-only: exercises SAREK re-prediction)",
            |o| Ok(Arc::new(KvService::mispredicting(o.kv_shards)) as Arc<dyn Service>),
        )
        .with_workload(kv_multi_key_workload),
        // The null service answers the kv workload with empty replies.
        ServiceEntry::new("null", "empty replies, no state", |_| {
            Ok(Arc::new(NullService) as Arc<dyn Service>)
        })
        .with_workload(kv_workload),
        ServiceEntry::new("sleep", "fixed service time over `buckets` keys", |o| {
            Ok(Arc::new(SleepService::new(Duration::from_micros(o.sleep_us), o.buckets)) as Arc<dyn Service>)
        })
        .with_workload(sleep_workload),
        ServiceEntry::new("token", "accounts and Ed25519-signed transfers", |o| {
            Ok(Arc::new(TokenService::new(o.token_genesis())?) as Arc<dyn Service>)
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_every_known_service() {
        for name in SERVICE_NAMES {
            let s = service_by_name(name, &ServiceOptions::default()).unwrap();
            // Every fresh service restores its own snapshot.
            s.restore(&s.snapshot()).unwrap();
        }
        assert!(service_by_name("nope", &ServiceOptions::default()).is_err());
    }

    #[test]
    fn parses_options() {
        let o = ServiceOptions::parse("sleep_us=20000, buckets=100").unwrap();
        assert_eq!(
            (o.sleep_us, o.buckets, o.kv_shards),
            (20_000, 100, DEFAULT_KV_SHARDS)
        );
        let t = ServiceOptions::parse("token_accounts=200,token_balance=5,token_seed=9").unwrap();
        assert_eq!(
            t.token_genesis(),
            Genesis {
                seed: 9,
                accounts: 200,
                balance: 5
            }
        );
        assert!(service_by_name("token", &ServiceOptions::parse("token_accounts=0").unwrap()).is_err());
        assert!(ServiceOptions::parse("nope=1").is_err());
        assert!(ServiceOptions::parse("kv_shards").is_err());
        assert!(ServiceOptions::parse("kv_shards=x").is_err());
        assert_eq!(ServiceOptions::parse("").unwrap(), ServiceOptions::default());
    }
}
