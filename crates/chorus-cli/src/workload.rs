//! What each benchmark client sends: YCSB core workloads A–F on `kv`, raw
//! payloads for `null` and `sleep`, signed transfers for `token`
//! (`workload_token`).

use bytes::Bytes;
use chorus_apps::kv_op::KvOp;
use rand::distributions::Distribution;
use rand::{Rng, SeedableRng};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum KeyDist {
    Uniform,
    Zipfian,
}

/// YCSB core workloads (Cooper et al., SoCC 2010), as mixes of operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum Ycsb {
    /// 50% read, 50% update.
    A,
    /// 95% read, 5% update.
    B,
    /// 100% read.
    C,
    /// 95% read (latest), 5% insert.
    D,
    /// 95% scan, 5% insert.
    E,
    /// 50% read, 50% read-modify-write.
    F,
    /// 100% update (write-only; the speed-target workload).
    U,
}

#[derive(Clone, Debug)]
pub struct WorkloadSpec {
    pub service: String,
    pub ycsb: Ycsb,
    pub records: u64,
    pub value_bytes: usize,
    pub request_bytes: usize,
    pub dist: KeyDist,
    /// Fraction of operations redirected to one hot key (kv) or bucket 0 (sleep).
    pub conflict_rate: f64,
    pub buckets: u32,
    /// kv: fraction of two-key `PutAll`s across `partitions` SAREK partitions.
    pub cross_partition: f64,
    pub partitions: u16,
}

/// Services with their own generator here; any other comes from the registry.
const BUILTIN: &[&str] = &["kv", "kv-mispredicting", "null", "sleep", "token"];

/// One generated operation.
pub struct Op {
    pub bytes: Bytes,
    pub read_only: bool,
}

pub struct Generator {
    spec: WorkloadSpec,
    zipf: Option<rand_distr::Zipf<f64>>,
    inserted: u64,
    payload: Bytes,
    token: Option<crate::workload_token::TokenGen>,
    /// An application's service: its registered workload, and a local
    /// instance that says which generated operations are read-only.
    app: Option<AppGen>,
}

struct AppGen {
    workload: chorus_apps::WorkloadFn,
    service: std::sync::Arc<dyn chorus_exec::Service>,
    client: chorus_core::ClientId,
    issued: u64,
}

impl Generator {
    pub fn new(spec: WorkloadSpec, client: u64) -> Generator {
        let zipf = match spec.dist {
            KeyDist::Zipfian => rand_distr::Zipf::new(spec.records.max(1), 0.99).ok(),
            KeyDist::Uniform => None,
        };
        let payload = Bytes::from(vec![b'x'; spec.request_bytes]);
        let token = (spec.service == "token").then(|| {
            crate::workload_token::TokenGen::new(spec.records, spec.ycsb, spec.dist, spec.conflict_rate)
        });
        let app = (!BUILTIN.contains(&spec.service.as_str()))
            .then(|| {
                let registry = crate::registry();
                let workload = registry.get(&spec.service).ok()?.workload.clone()?;
                let service = registry
                    .build(&spec.service, &chorus_apps::ServiceOptions::default())
                    .ok()?;
                Some(AppGen {
                    workload,
                    service,
                    client: chorus_core::ClientId(client),
                    issued: 0,
                })
            })
            .flatten();
        Generator {
            app,
            token,
            inserted: spec.records + client * 1_000_000_000,
            spec,
            zipf,
            payload,
        }
    }

    pub fn key(i: u64) -> Bytes {
        Bytes::from(format!("user{i:012}"))
    }

    fn pick(&self, rng: &mut impl Rng) -> u64 {
        if self.spec.conflict_rate > 0.0 && rng.gen_bool(self.spec.conflict_rate.min(1.0)) {
            return 0;
        }
        match &self.zipf {
            Some(z) => (z.sample(rng) as u64).saturating_sub(1) % self.spec.records.max(1),
            None => rng.gen_range(0..self.spec.records.max(1)),
        }
    }

    fn value(&self) -> Bytes {
        Bytes::from(vec![b'v'; self.spec.value_bytes])
    }

    pub fn next(&mut self, rng: &mut impl Rng) -> Op {
        if let Some(t) = &mut self.token {
            return t.next(rng);
        }
        if let Some(g) = &mut self.app {
            g.issued += 1;
            let mut draw = rand_chacha::ChaCha8Rng::seed_from_u64(rng.gen());
            let bytes = (g.workload)(&mut draw, g.client, g.issued);
            let read_only = g.service.is_read_only(&bytes);
            return Op { bytes, read_only };
        }
        match self.spec.service.as_str() {
            "null" => Op {
                bytes: self.payload.clone(),
                read_only: false,
            },
            "sleep" => {
                let bucket =
                    if self.spec.conflict_rate > 0.0 && rng.gen_bool(self.spec.conflict_rate.min(1.0)) {
                        0
                    } else {
                        rng.gen_range(0..self.spec.buckets.max(1))
                    };
                Op {
                    bytes: chorus_apps::SleepService::op(bucket),
                    read_only: false,
                }
            }
            _ => self.next_kv(rng),
        }
    }

    /// SAREK §V's cross-border request: one write to each of two keys in
    /// different partitions.
    fn cross_partition_put(&self, rng: &mut impl Rng) -> Op {
        use chorus_exec::partitioned::predict::partition_of_key;
        let first = Self::key(self.pick(rng));
        let home = partition_of_key(&first, self.spec.partitions);
        // With K ≥ 2 partitions a uniform key lands elsewhere with
        // probability ≥ 1/2: 64 draws all failing is 2^-64.
        let second = (0..64)
            .map(|_| Self::key(self.pick(rng)))
            .find(|k| partition_of_key(k, self.spec.partitions) != home)
            .unwrap_or_else(|| Self::key(self.spec.records));
        let mut pairs = vec![(first, self.value()), (second, self.value())];
        if self.spec.service == "kv-mispredicting" {
            // It predicts only the first key (SAREK §IV-D): put the lower
            // partition first, the conservative prediction under which
            // execution only ever re-predicts higher partitions.
            pairs.sort_by_key(|(k, _)| partition_of_key(k, self.spec.partitions));
        }
        let op = KvOp::PutAll { pairs };
        Op {
            bytes: op.encode(),
            read_only: false,
        }
    }

    fn next_kv(&mut self, rng: &mut impl Rng) -> Op {
        if self.spec.cross_partition > 0.0 && rng.gen_bool(self.spec.cross_partition.min(1.0)) {
            return self.cross_partition_put(rng);
        }
        let r: f64 = rng.gen();
        let key = Self::key(self.pick(rng));
        let (op, ro) = match self.spec.ycsb {
            Ycsb::A if r < 0.5 => (KvOp::Read { key }, true),
            Ycsb::A => (
                KvOp::Update {
                    key,
                    value: self.value(),
                },
                false,
            ),
            Ycsb::B if r < 0.95 => (KvOp::Read { key }, true),
            Ycsb::B => (
                KvOp::Update {
                    key,
                    value: self.value(),
                },
                false,
            ),
            Ycsb::C => (KvOp::Read { key }, true),
            Ycsb::D if r < 0.95 => {
                let latest = self.inserted.saturating_sub(rng.gen_range(0..16));
                (
                    KvOp::Read {
                        key: Self::key(latest),
                    },
                    true,
                )
            }
            Ycsb::E if r < 0.95 => (
                KvOp::Scan {
                    start: key,
                    limit: rng.gen_range(1..=100),
                },
                true,
            ),
            Ycsb::D | Ycsb::E => {
                self.inserted += 1;
                (
                    KvOp::Insert {
                        key: Self::key(self.inserted),
                        value: self.value(),
                    },
                    false,
                )
            }
            Ycsb::F if r < 0.5 => (KvOp::Read { key }, true),
            Ycsb::F => (
                KvOp::ReadModifyWrite {
                    key,
                    value: self.value(),
                },
                false,
            ),
            Ycsb::U => (
                KvOp::Update {
                    key,
                    value: self.value(),
                },
                false,
            ),
        };
        Op {
            bytes: op.encode(),
            read_only: ro,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_exec::partitioned::predict::partition_of_key;

    fn spec(cross_partition: f64) -> WorkloadSpec {
        WorkloadSpec {
            service: "kv".into(),
            ycsb: Ycsb::U,
            records: 1_000,
            value_bytes: 8,
            request_bytes: 0,
            dist: KeyDist::Uniform,
            conflict_rate: 0.0,
            buckets: 1,
            cross_partition,
            partitions: 4,
        }
    }

    fn cross_ops(cross_partition: f64, draws: usize) -> usize {
        let mut g = Generator::new(spec(cross_partition), 1);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        (0..draws)
            .filter(|_| match KvOp::decode(&g.next(&mut rng).bytes) {
                Ok(KvOp::PutAll { pairs }) => {
                    assert_eq!(pairs.len(), 2);
                    assert_ne!(
                        partition_of_key(&pairs[0].0, 4),
                        partition_of_key(&pairs[1].0, 4),
                        "a cross-border request spans two partitions"
                    );
                    true
                }
                Ok(_) => false,
                Err(e) => panic!("undecodable op: {e:?}"),
            })
            .count()
    }

    #[test]
    fn cross_partition_share_is_the_requested_fraction() {
        assert_eq!(cross_ops(0.0, 1_000), 0);
        assert_eq!(cross_ops(1.0, 1_000), 1_000);
        let some = cross_ops(0.3, 10_000);
        assert!((2_700..3_300).contains(&some), "{some} of 10 000");
    }
}
