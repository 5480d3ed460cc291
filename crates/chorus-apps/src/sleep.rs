//! The sleep micro-benchmark of CBASE §6.1.2: each operation takes a fixed
//! service time (simulating a disk or other slow resource) and touches one of
//! `buckets` keys, so at most `buckets` operations can run at once — CBASE's
//! "parallelism factor". `buckets = 0` means unlimited parallelism (no keys;
//! CBASE's first scalability experiment).
//!
//! An operation is its bucket as 4 little-endian bytes (taken modulo
//! `buckets`). Each bucket counts its operations; the reply is the bucket's
//! count after this one (8 little-endian bytes), so replies reveal the order
//! of same-bucket operations and the tests can check it. The state is the
//! counters.

use bytes::Bytes;
use chorus_exec::{Access, ExecContext, Service};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bound on the bucket count (one counter each).
pub const MAX_SLEEP_BUCKETS: u32 = 1 << 16;
/// Upper bound on the service time.
pub const MAX_SERVICE_TIME: Duration = Duration::from_secs(10);
/// The reply to an operation that is not 4 bytes long (it does not sleep).
pub const MALFORMED_REPLY: &[u8] = b"malformed sleep op";

pub struct SleepService {
    service_time: Duration,
    counters: Vec<AtomicU64>,
}

#[derive(Serialize, Deserialize)]
struct SleepSnapshot {
    counters: Vec<u64>,
}

impl SleepService {
    /// `service_time` is clamped to [`MAX_SERVICE_TIME`], `buckets` to [`MAX_SLEEP_BUCKETS`].
    pub fn new(service_time: Duration, buckets: u32) -> SleepService {
        let buckets = buckets.min(MAX_SLEEP_BUCKETS);
        SleepService {
            service_time: service_time.min(MAX_SERVICE_TIME),
            counters: (0..buckets).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The operation for `bucket`.
    pub fn op(bucket: u32) -> Bytes {
        Bytes::copy_from_slice(&bucket.to_le_bytes())
    }

    pub fn buckets(&self) -> u32 {
        self.counters.len() as u32
    }

    /// Operations executed so far in `bucket`.
    pub fn count(&self, bucket: u32) -> u64 {
        self.counters
            .get(bucket as usize)
            .map_or(0, |c| c.load(Ordering::SeqCst))
    }

    /// The bucket an operation touches: `None` for a malformed op or when
    /// parallelism is unlimited.
    fn bucket_of(&self, op: &[u8]) -> Option<Result<usize, ()>> {
        let Ok(raw) = <[u8; 4]>::try_from(op) else {
            return Some(Err(()));
        };
        if self.counters.is_empty() {
            return None;
        }
        Some(Ok(u32::from_le_bytes(raw) as usize % self.counters.len()))
    }

    fn bucket_key(bucket: usize) -> Bytes {
        let mut k = b"bucket/".to_vec();
        k.extend_from_slice(&(bucket as u32).to_be_bytes());
        Bytes::from(k)
    }
}

impl Service for SleepService {
    fn execute(&self, op: &[u8], _ctx: &ExecContext) -> Bytes {
        let bucket = match self.bucket_of(op) {
            Some(Err(())) => return Bytes::from_static(MALFORMED_REPLY),
            Some(Ok(b)) => Some(b),
            None => None,
        };
        if !self.service_time.is_zero() {
            std::thread::sleep(self.service_time);
        }
        match bucket {
            // Same-bucket operations never run at once (they conflict), so the
            // count each one sees is fixed by the delivery order.
            Some(b) => {
                let n = self.counters[b].fetch_add(1, Ordering::SeqCst) + 1;
                Bytes::copy_from_slice(&n.to_le_bytes())
            }
            None => Bytes::new(),
        }
    }

    fn access(&self, op: &[u8]) -> Access {
        match self.bucket_of(op) {
            Some(Ok(b)) => Access::Keys {
                reads: vec![],
                writes: vec![Self::bucket_key(b)],
            },
            _ => Access::Keys {
                reads: vec![],
                writes: vec![],
            },
        }
    }

    fn snapshot(&self) -> Bytes {
        let s = SleepSnapshot {
            counters: self.counters.iter().map(|c| c.load(Ordering::SeqCst)).collect(),
        };
        Bytes::from(postcard::to_allocvec(&s).expect("encoding a sleep snapshot cannot fail"))
    }

    fn restore(&self, snapshot: &[u8]) -> Result<(), String> {
        let (s, rest): (SleepSnapshot, &[u8]) =
            postcard::take_from_bytes(snapshot).map_err(|e| format!("malformed sleep snapshot: {e}"))?;
        if !rest.is_empty() || s.counters.len() != self.counters.len() {
            return Err("sleep snapshot does not match the bucket count".into());
        }
        for (c, v) in self.counters.iter().zip(s.counters) {
            c.store(v, Ordering::SeqCst);
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

    #[test]
    fn counts_per_bucket_and_conflicts_within_a_bucket() {
        let s = SleepService::new(Duration::ZERO, 4);
        let r = |b| u64::from_le_bytes(s.execute(&SleepService::op(b), &ctx())[..].try_into().unwrap());
        assert_eq!(r(1), 1);
        assert_eq!(r(5), 2, "bucket 5 is bucket 1 modulo 4");
        assert_eq!(r(2), 1);
        assert!(chorus_exec::conflicts(
            &s.access(&SleepService::op(1)),
            &s.access(&SleepService::op(5))
        ));
        assert!(!chorus_exec::conflicts(
            &s.access(&SleepService::op(1)),
            &s.access(&SleepService::op(2))
        ));
    }

    #[test]
    fn unlimited_parallelism_and_malformed_ops() {
        let s = SleepService::new(Duration::ZERO, 0);
        assert!(s.execute(&SleepService::op(3), &ctx()).is_empty());
        assert!(!chorus_exec::conflicts(
            &s.access(&SleepService::op(1)),
            &s.access(&SleepService::op(1))
        ));
        assert_eq!(&s.execute(b"xy", &ctx())[..], MALFORMED_REPLY);
    }

    #[test]
    fn sleeps_for_the_service_time() {
        let s = SleepService::new(Duration::from_millis(5), 1);
        let t = std::time::Instant::now();
        s.execute(&SleepService::op(0), &ctx());
        assert!(t.elapsed() >= Duration::from_millis(5));
    }

    #[test]
    fn snapshot_roundtrip() {
        let a = SleepService::new(Duration::ZERO, 3);
        a.execute(&SleepService::op(2), &ctx());
        let b = SleepService::new(Duration::ZERO, 3);
        b.restore(&a.snapshot()).unwrap();
        assert_eq!(b.count(2), 1);
        assert_eq!(a.state_digest(), b.state_digest());
        assert!(SleepService::new(Duration::ZERO, 2)
            .restore(&a.snapshot())
            .is_err());
    }
}
