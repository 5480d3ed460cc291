//! Shared test helpers (included with `mod common;`).
#![allow(dead_code)]

use bytes::Bytes;
use chorus_core::{Authenticator, Batch, ClientId, Request, RequestSeq};
use chorus_exec::{conflicts, Access, ExecContext, ExecResult, Executor, Service};
use std::sync::{Arc, Mutex};

pub fn req(client: u64, seq: u64, op: Bytes) -> Request {
    Request {
        memo: Default::default(),
        client: ClientId(client),
        seq: RequestSeq(seq),
        flags: 0,
        op,
        auth: Authenticator::Macs(Default::default()),
    }
}

pub fn batch(reqs: Vec<Request>) -> Arc<Batch> {
    Arc::new(Batch {
        requests: reqs,
        time_ms: 0,
    })
}

pub fn drain_sorted(e: &mut dyn Executor) -> Vec<ExecResult> {
    let mut out = Vec::new();
    e.drain_results(&mut out);
    out.sort();
    out
}

/// Wraps a service and panics if two conflicting operations ever run at the
/// same time; records the peak number of operations running at once.
pub struct Guarded<S> {
    pub inner: S,
    running: Mutex<Vec<(u64, Access)>>,
    next: Mutex<u64>,
    pub peak: Mutex<usize>,
    /// Each operation stays registered as running this much longer, so a
    /// test of concurrency does not depend on the machine being idle: a
    /// sleeping worker needs no CPU to overlap with the others.
    linger: std::time::Duration,
}

impl<S: Service> Guarded<S> {
    pub fn new(inner: S) -> Guarded<S> {
        Guarded {
            inner,
            running: Mutex::new(Vec::new()),
            next: Mutex::new(0),
            peak: Mutex::new(0),
            linger: std::time::Duration::ZERO,
        }
    }

    /// `new`, each operation held `linger` longer while it counts as running.
    pub fn lingering(inner: S, linger: std::time::Duration) -> Guarded<S> {
        Guarded {
            linger,
            ..Guarded::new(inner)
        }
    }

    pub fn peak(&self) -> usize {
        *self.peak.lock().unwrap()
    }
}

impl<S: Service> Service for Guarded<S> {
    fn execute(&self, op: &[u8], ctx: &ExecContext) -> Bytes {
        let access = self.inner.access(op);
        let me = {
            let mut n = self.next.lock().unwrap();
            *n += 1;
            *n
        };
        {
            let mut r = self.running.lock().unwrap();
            if let Some((_, other)) = r.iter().find(|(_, a)| conflicts(a, &access)) {
                panic!("conflicting operations overlap: {access:?} and {other:?}");
            }
            r.push((me, access));
            let mut p = self.peak.lock().unwrap();
            *p = (*p).max(r.len());
        }
        let out = self.inner.execute(op, ctx);
        if !self.linger.is_zero() {
            std::thread::sleep(self.linger);
        }
        self.running.lock().unwrap().retain(|(id, _)| *id != me);
        out
    }
    fn access(&self, op: &[u8]) -> Access {
        self.inner.access(op)
    }
    fn is_read_only(&self, op: &[u8]) -> bool {
        self.inner.is_read_only(op)
    }
    fn snapshot(&self) -> Bytes {
        self.inner.snapshot()
    }
    fn restore(&self, s: &[u8]) -> Result<(), String> {
        self.inner.restore(s)
    }
    fn state_digest(&self) -> chorus_core::Digest {
        self.inner.state_digest()
    }
}
