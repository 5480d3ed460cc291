//! Issue 17: the simulator runs any registered service with its own workload,
//! checks its invariant on every correct replica, and (checked mode) catches
//! an operation touching a key outside its declared access set.

use bytes::Bytes;
use chorus_apps::{ServiceEntry, ServiceRegistry};
use chorus_core::OrderingMode;
use chorus_exec::{Access, ExecContext, KeyedState, Service};
use chorus_sim::{FaultSet, SimOptions, ViolationKind};
use rand::Rng;
use std::sync::Arc;

/// Counters `c0..c3`; an op is one byte `i` and increments `ci`. The
/// `lying` variant also bumps `total`, which it never declares.
struct Counters {
    state: KeyedState<u64>,
    lying: bool,
}

fn counter(i: u8) -> Bytes {
    Bytes::from(format!("c{i}"))
}

impl Service for Counters {
    fn execute(&self, op: &[u8], _: &ExecContext) -> Bytes {
        let Some(&i) = op.first().filter(|i| **i < 4) else {
            return Bytes::from_static(b"bad op");
        };
        let bump = |k: Bytes| -> Result<u64, String> {
            let v = self.state.get(&k).map_err(|e| e.to_string())?.unwrap_or(0) + 1;
            self.state.put(k, v).map_err(|e| e.to_string())?;
            Ok(v)
        };
        let r = bump(counter(i)).and_then(|v| {
            if self.lying {
                bump(Bytes::from_static(b"total"))?;
            }
            Ok(v)
        });
        Bytes::from(format!("{r:?}"))
    }
    fn access(&self, op: &[u8]) -> Access {
        match op.first().filter(|i| **i < 4) {
            Some(&i) => Access::Keys {
                reads: vec![],
                writes: vec![counter(i)],
            },
            None => Access::Keys {
                reads: vec![],
                writes: vec![],
            },
        }
    }
    fn describe(&self, op: &[u8]) -> String {
        format!("bump({:?})", op.first())
    }
    fn snapshot(&self) -> Bytes {
        let mut out = Vec::new();
        for (k, v) in self.state.entries() {
            out.push(k.len() as u8);
            out.extend_from_slice(&k);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Bytes::from(out)
    }
    fn restore(&self, mut s: &[u8]) -> Result<(), String> {
        let mut entries = Vec::new();
        while let Some((&len, rest)) = s.split_first() {
            let len = len as usize;
            if rest.len() < len + 8 {
                return Err("truncated snapshot".into());
            }
            let v = u64::from_le_bytes(rest[len..len + 8].try_into().expect("8 bytes"));
            entries.push((Bytes::copy_from_slice(&rest[..len]), v));
            s = &rest[len + 8..];
        }
        self.state.replace(entries);
        Ok(())
    }
}

/// Sum of the counters in a snapshot.
fn sum(snapshot: &[u8]) -> u64 {
    let c = Counters {
        state: KeyedState::new(),
        lying: false,
    };
    c.restore(snapshot).unwrap();
    (0..4)
        .map(|i| c.state.get(&counter(i)).unwrap().unwrap_or(0))
        .sum()
}

fn registry(invariant_max: u64) -> ServiceRegistry {
    let entry = |name: &str, lying: bool| {
        ServiceEntry::new(name, "counters", move |_| {
            Ok(Arc::new(Counters {
                state: KeyedState::new(),
                lying,
            }) as Arc<dyn Service>)
        })
        .with_workload(|rng, _, _| Bytes::from(vec![rng.gen_range(0..4u8)]))
        .with_invariant(move |s| {
            if lying {
                return Ok(()); // its undeclared `total` key is checked mode's business
            }
            if s.len() > 4 * (1 + 2 + 8) {
                return Err("keys other than c0..c3 in the state".into());
            }
            let total = sum(s);
            if total > invariant_max {
                return Err(format!("{total} increments, more than {invariant_max}"));
            }
            Ok(())
        })
    };
    ServiceRegistry::builtin()
        .with(entry("counters", false))
        .with(entry("lying-counters", true))
}

fn opts(service: &str, invariant_max: u64, faults: &str) -> SimOptions {
    let mut o = SimOptions::new(OrderingMode::Cop, 2, 4)
        .with_faults(faults.parse::<FaultSet>().unwrap())
        .with_seeds(0, 3);
    o.registry = Arc::new(registry(invariant_max));
    o.service = service.into();
    o.check_views = false;
    o
}

#[test]
fn a_registered_service_runs_under_faults_with_its_invariant_checked() {
    // Byzantine clients' requests execute too: no bound on the count here.
    let s = chorus_sim::run_many(&opts("counters", u64::MAX, "all"));
    assert!(s.ok(), "{s}");
    assert_eq!(s.requests_committed, 3 * 36);
}

#[test]
fn a_failing_invariant_is_a_violation() {
    let s = chorus_sim::run_many(&opts("counters", 5, "none"));
    assert!(!s.ok());
    let kinds: Vec<_> = s
        .failures
        .iter()
        .flat_map(|r| r.violations.iter().map(|v| v.kind))
        .collect();
    assert!(kinds.iter().all(|k| *k == ViolationKind::ServiceInvariant), "{s}");
    assert!(s.to_string().contains("increments, more than 5"), "{s}");
}

#[test]
fn checked_mode_names_the_first_undeclared_access() {
    let s = chorus_sim::run_many(&opts("lying-counters", 1_000, "none"));
    assert!(!s.ok());
    let text = s.to_string();
    assert!(text.contains("[access-set at"), "{text}");
    assert!(
        text.contains("operation bump(Some(") && text.contains("read undeclared key \"total\""),
        "{text}"
    );
    // Unchecked, the sequential executor never notices (the lie is harmless
    // there, and nothing else looks at access sets).
    let mut unchecked = opts("lying-counters", 1_000, "none");
    unchecked.checked_access = false;
    let s = chorus_sim::run_many(&unchecked);
    assert!(s.ok(), "{s}");
}

#[test]
fn a_service_without_a_workload_cannot_be_simulated() {
    let mut o = opts("token", 0, "none");
    assert!(o.validate().unwrap_err().contains("no workload generator"));
    o.service = "nope".into();
    assert!(o.validate().unwrap_err().contains("unknown service \"nope\""));
}
