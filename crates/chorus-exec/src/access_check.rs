//! Access sets that cannot lie silently (issue 17): in checked mode the
//! service reaches its state only through [`KeyedState`](crate::keyed::KeyedState),
//! and every access is compared with the keys the operation declared.
//!
//! CBASE §4 runs operations with disjoint declared access sets at the same
//! time, so an operation that touches a key it did not declare races with
//! another one and replicas diverge. The check runs on the thread that
//! executes the operation: [`CheckedService`] opens a scope with the declared
//! set around `execute`, and `KeyedState` consults it on every access.
//! Outside a scope (checked mode off) nothing is checked and nothing costs.

use crate::service::{Access, ExecContext, Service};
use bytes::Bytes;
use chorus_core::Digest;
use std::cell::RefCell;
use std::fmt;
use std::sync::{Arc, Mutex};

/// An access outside the operation's declared set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessViolation {
    /// The operation, as [`Service::describe`] names it.
    pub op: String,
    /// The undeclared key.
    pub key: Bytes,
    /// A write to a key declared only for reading (or not at all).
    pub write: bool,
}

impl fmt::Display for AccessViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "operation {} {} undeclared key {}",
            self.op,
            if self.write { "wrote" } else { "read" },
            printable(&self.key)
        )
    }
}

impl std::error::Error for AccessViolation {}

/// A key as text when it is printable ASCII, else hex.
pub fn printable(key: &[u8]) -> String {
    if !key.is_empty() && key.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        format!("{:?}", String::from_utf8_lossy(key))
    } else {
        format!("0x{}", key.iter().map(|b| format!("{b:02x}")).collect::<String>())
    }
}

struct Scope {
    access: Access,
    op: String,
    first: Option<AccessViolation>,
}

thread_local! {
    static SCOPE: RefCell<Option<Scope>> = const { RefCell::new(None) };
}

/// Check one access against the scope open on this thread (if any). The
/// first violation of an operation is remembered for [`CheckedService`].
pub fn check(key: &[u8], write: bool) -> Result<(), AccessViolation> {
    SCOPE.with(|s| {
        let mut s = s.borrow_mut();
        let Some(scope) = s.as_mut() else {
            return Ok(());
        };
        let allowed = match &scope.access {
            Access::Everything => true,
            Access::Keys { reads, writes } => {
                writes.iter().any(|k| k == key) || (!write && reads.iter().any(|k| k == key))
            }
        };
        if allowed {
            return Ok(());
        }
        let v = AccessViolation {
            op: scope.op.clone(),
            key: Bytes::copy_from_slice(key),
            write,
        };
        scope.first.get_or_insert_with(|| v.clone());
        Err(v)
    })
}

/// Run `f` with `access` as the declared set of the operation named `op`;
/// returns `f`'s value and the first undeclared access, if any.
pub fn with_scope<T>(
    access: Access,
    op: impl FnOnce() -> String,
    f: impl FnOnce() -> T,
) -> (T, Option<AccessViolation>) {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            SCOPE.with(|s| s.borrow_mut().take());
        }
    }
    let previous = SCOPE.with(|s| {
        s.borrow_mut().replace(Scope {
            access,
            op: op(),
            first: None,
        })
    });
    assert!(previous.is_none(), "access scopes do not nest");
    let reset = Reset;
    let value = f();
    let first = SCOPE.with(|s| s.borrow_mut().as_mut().and_then(|sc| sc.first.take()));
    drop(reset);
    (value, first)
}

/// What [`CheckedService`] does at an undeclared access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnViolation {
    /// Panic with the violation (tests: fail at the first bad operation).
    Panic,
    /// Record it in [`CheckedService::violations`] and carry on (the
    /// simulator reports it as a violation of the seed).
    Record,
}

/// Wraps a service so every operation runs inside its declared access set.
/// Violations are kept (bounded) for the caller to report.
pub struct CheckedService {
    inner: Arc<dyn Service>,
    on_violation: OnViolation,
    violations: Arc<Mutex<Vec<AccessViolation>>>,
}

/// Violations a [`CheckedService`] keeps at most (the first one matters).
pub const VIOLATIONS_KEPT: usize = 16;

impl CheckedService {
    pub fn new(inner: Arc<dyn Service>, on_violation: OnViolation) -> CheckedService {
        CheckedService {
            inner,
            on_violation,
            violations: Arc::default(),
        }
    }

    /// The recorded violations, shared (they outlive the service).
    pub fn violations(&self) -> Arc<Mutex<Vec<AccessViolation>>> {
        self.violations.clone()
    }

    pub fn inner(&self) -> &Arc<dyn Service> {
        &self.inner
    }
}

impl Service for CheckedService {
    fn execute(&self, op: &[u8], ctx: &ExecContext) -> Bytes {
        // A read-only operation may not write anything it read.
        // Where the declaration is only a prediction, the exact set counts.
        let declared = self
            .inner
            .execution_access(op)
            .unwrap_or_else(|| self.inner.access(op));
        let access = match (declared, self.inner.is_read_only(op)) {
            (Access::Keys { reads, writes }, true) => {
                let mut reads = reads;
                reads.extend(writes);
                Access::Keys {
                    reads,
                    writes: vec![],
                }
            }
            (a, _) => a,
        };
        let (reply, violation) =
            with_scope(access, || self.inner.describe(op), || self.inner.execute(op, ctx));
        if let Some(v) = violation {
            match self.on_violation {
                OnViolation::Panic => panic!("access-set violation: {v}"),
                OnViolation::Record => {
                    let mut log = self.violations.lock().unwrap_or_else(|e| e.into_inner());
                    if log.len() < VIOLATIONS_KEPT {
                        log.push(v);
                    }
                }
            }
        }
        reply
    }
    fn access(&self, op: &[u8]) -> Access {
        self.inner.access(op)
    }
    fn execution_access(&self, op: &[u8]) -> Option<Access> {
        self.inner.execution_access(op)
    }
    fn is_read_only(&self, op: &[u8]) -> bool {
        self.inner.is_read_only(op)
    }
    fn describe(&self, op: &[u8]) -> String {
        self.inner.describe(op)
    }
    fn snapshot(&self) -> Bytes {
        self.inner.snapshot()
    }
    fn restore(&self, snapshot: &[u8]) -> Result<(), String> {
        self.inner.restore(snapshot)
    }
    fn state_digest(&self) -> Digest {
        self.inner.state_digest()
    }
}
