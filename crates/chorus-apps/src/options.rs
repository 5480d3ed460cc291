//! Building a service from its name and options.

use crate::kv::{KvService, DEFAULT_KV_SHARDS};
use crate::null::NullService;
use crate::sleep::SleepService;
use crate::token::{Genesis, TokenService};
use chorus_exec::Service;
use std::sync::Arc;
use std::time::Duration;

/// The names [`service_by_name`] knows.
pub const SERVICE_NAMES: &[&str] = &["kv", "null", "sleep", "token"];

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

/// The service called `name` (one of [`SERVICE_NAMES`]).
pub fn service_by_name(name: &str, opts: &ServiceOptions) -> Result<Arc<dyn Service>, String> {
    match name {
        "kv" => Ok(Arc::new(KvService::new(opts.kv_shards))),
        "null" => Ok(Arc::new(NullService)),
        "sleep" => Ok(Arc::new(SleepService::new(
            Duration::from_micros(opts.sleep_us),
            opts.buckets,
        ))),
        "token" => Ok(Arc::new(TokenService::new(opts.token_genesis())?)),
        _ => Err(format!(
            "unknown service {name:?} (known: {})",
            SERVICE_NAMES.join(", ")
        )),
    }
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
