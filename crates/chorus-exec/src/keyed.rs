//! State a service reaches only by key, so checked mode can compare every
//! access with the operation's declared access set (`access_check`).

use crate::access_check::{check, AccessViolation};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// A key → value map that checks each access against the declared access
/// set of the operation running on this thread (when checked mode opened a
/// scope). A `BTreeMap` underneath: iteration, and so snapshots, come in key
/// order on every replica (no `HashMap` order leaks into the state).
#[derive(Debug, Default)]
pub struct KeyedState<V> {
    map: Mutex<BTreeMap<Bytes, V>>,
}

impl<V: Clone> KeyedState<V> {
    pub fn new() -> KeyedState<V> {
        KeyedState {
            map: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Bytes, V>> {
        // A panicking operation leaves the map as it was before its last
        // single-key update, which completes under the lock.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value at `key` (a read of `key`).
    pub fn get(&self, key: &[u8]) -> Result<Option<V>, AccessViolation> {
        check(key, false)?;
        Ok(self.lock().get(key).cloned())
    }

    /// Set `key` (a write of `key`).
    pub fn put(&self, key: impl Into<Bytes>, value: V) -> Result<(), AccessViolation> {
        let key = key.into();
        check(&key, true)?;
        self.lock().insert(key, value);
        Ok(())
    }

    /// Remove `key` (a write of `key`); returns the old value.
    pub fn remove(&self, key: &[u8]) -> Result<Option<V>, AccessViolation> {
        check(key, true)?;
        Ok(self.lock().remove(key))
    }

    /// Every entry in key order: for `snapshot`, which runs between
    /// operations (never inside one), so it is not checked.
    pub fn entries(&self) -> Vec<(Bytes, V)> {
        self.lock().iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Replace the whole state (for `restore`, after validating the input).
    pub fn replace(&self, entries: impl IntoIterator<Item = (Bytes, V)>) {
        *self.lock() = entries.into_iter().collect();
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access_check::{CheckedService, OnViolation};
    use crate::service::{Access, ExecContext, Service};
    use chorus_core::{ClientId, RequestSeq, Seq};
    use std::sync::Arc;

    /// Op = `key` byte; declares only `a` but touches the key it names.
    struct Liar(KeyedState<u64>);
    impl Service for Liar {
        fn execute(&self, op: &[u8], _: &ExecContext) -> Bytes {
            match self.0.put(Bytes::copy_from_slice(op), 1) {
                Ok(()) => Bytes::from_static(b"ok"),
                Err(e) => Bytes::from(e.to_string()),
            }
        }
        fn access(&self, _: &[u8]) -> Access {
            Access::Keys {
                reads: vec![],
                writes: vec![Bytes::from_static(b"a")],
            }
        }
        fn describe(&self, op: &[u8]) -> String {
            format!("put({})", String::from_utf8_lossy(op))
        }
        fn snapshot(&self) -> Bytes {
            Bytes::new()
        }
        fn restore(&self, _: &[u8]) -> Result<(), String> {
            Ok(())
        }
    }

    fn ctx() -> ExecContext {
        ExecContext {
            seq: Seq(1),
            index: 0,
            client: ClientId(0),
            request_seq: RequestSeq(1),
            time_ms: 0,
        }
    }

    #[test]
    fn unchecked_mode_checks_nothing() {
        let s = Liar(KeyedState::new());
        assert_eq!(&s.execute(b"b", &ctx())[..], b"ok");
    }

    #[test]
    fn checked_mode_records_the_first_undeclared_access_with_op_and_key() {
        let s = CheckedService::new(Arc::new(Liar(KeyedState::new())), OnViolation::Record);
        assert_eq!(&s.execute(b"a", &ctx())[..], b"ok");
        assert!(s.violations().lock().unwrap().is_empty());
        let reply = s.execute(b"b", &ctx());
        assert_eq!(&reply[..], b"operation put(b) wrote undeclared key \"b\"");
        let v = s.violations().lock().unwrap().clone();
        assert_eq!(v.len(), 1);
        assert_eq!(
            (v[0].op.as_str(), &v[0].key[..], v[0].write),
            ("put(b)", &b"b"[..], true)
        );
    }

    #[test]
    #[should_panic(expected = "access-set violation: operation put(zz) wrote undeclared key \"zz\"")]
    fn checked_mode_can_panic_at_the_first_bad_op() {
        let s = CheckedService::new(Arc::new(Liar(KeyedState::new())), OnViolation::Panic);
        s.execute(b"zz", &ctx());
    }

    #[test]
    fn reads_of_write_keys_are_fine_and_read_only_ops_may_not_write() {
        struct Ro(KeyedState<u64>);
        impl Service for Ro {
            fn execute(&self, _: &[u8], _: &ExecContext) -> Bytes {
                let _ = self.0.get(b"a");
                let _ = self.0.put(Bytes::from_static(b"a"), 2);
                Bytes::new()
            }
            fn access(&self, _: &[u8]) -> Access {
                Access::Keys {
                    reads: vec![],
                    writes: vec![Bytes::from_static(b"a")],
                }
            }
            fn is_read_only(&self, op: &[u8]) -> bool {
                op == b"ro"
            }
            fn snapshot(&self) -> Bytes {
                Bytes::new()
            }
            fn restore(&self, _: &[u8]) -> Result<(), String> {
                Ok(())
            }
        }
        let s = CheckedService::new(Arc::new(Ro(KeyedState::new())), OnViolation::Record);
        s.execute(b"rw", &ctx());
        assert!(s.violations().lock().unwrap().is_empty());
        s.execute(b"ro", &ctx());
        let v = s.violations().lock().unwrap().clone();
        assert_eq!((v.len(), v[0].write), (1, true));
    }
}
