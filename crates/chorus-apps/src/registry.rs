//! Services by name (issue 17): what `keygen`, `replica`, `demo`, `bench` and
//! `sim` look a `--service NAME` up in. The built-in services register here
//! exactly as an application registers its own (`chorus_cli::main_with`).

use crate::options::ServiceOptions;
use bytes::Bytes;
use chorus_core::ClientId;
use chorus_exec::Service;
use rand::RngCore;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Builds a fresh instance of a service (one per replica; again on restart).
pub type ServiceFactory = Arc<dyn Fn(&ServiceOptions) -> Result<Arc<dyn Service>, String> + Send + Sync>;

/// Generates a client's next operation: `(rng, client, request number)`.
/// Must be a pure function of its inputs and the RNG's draws (the
/// simulator replays a seed from them).
pub type WorkloadFn = Arc<dyn Fn(&mut dyn RngCore, ClientId, u64) -> Bytes + Send + Sync>;

/// Checks an application invariant on a replica's snapshot (e.g. money is
/// conserved); the simulator runs it on every correct replica at the end of
/// every seed.
pub type InvariantFn = Arc<dyn Fn(&[u8]) -> Result<(), String> + Send + Sync>;

/// One registered service.
#[derive(Clone)]
pub struct ServiceEntry {
    pub name: String,
    /// One line for `--help` and error messages.
    pub about: String,
    pub factory: ServiceFactory,
    /// Operations for `chorus sim` and `chorus demo`; without one the
    /// service can run in a cluster but not be simulated or demonstrated.
    pub workload: Option<WorkloadFn>,
    pub invariant: Option<InvariantFn>,
}

impl ServiceEntry {
    pub fn new(
        name: impl Into<String>,
        about: impl Into<String>,
        factory: impl Fn(&ServiceOptions) -> Result<Arc<dyn Service>, String> + Send + Sync + 'static,
    ) -> ServiceEntry {
        ServiceEntry {
            name: name.into(),
            about: about.into(),
            factory: Arc::new(factory),
            workload: None,
            invariant: None,
        }
    }

    pub fn with_workload(
        mut self,
        w: impl Fn(&mut dyn RngCore, ClientId, u64) -> Bytes + Send + Sync + 'static,
    ) -> ServiceEntry {
        self.workload = Some(Arc::new(w));
        self
    }

    pub fn with_invariant(
        mut self,
        i: impl Fn(&[u8]) -> Result<(), String> + Send + Sync + 'static,
    ) -> ServiceEntry {
        self.invariant = Some(Arc::new(i));
        self
    }
}

impl fmt::Debug for ServiceEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (workload: {}, invariant: {})",
            self.name,
            self.workload.is_some(),
            self.invariant.is_some()
        )
    }
}

/// Services by name.
#[derive(Clone, Debug, Default)]
pub struct ServiceRegistry {
    entries: BTreeMap<String, ServiceEntry>,
}

impl ServiceRegistry {
    /// No services at all.
    pub fn empty() -> ServiceRegistry {
        ServiceRegistry::default()
    }

    /// `kv`, `null`, `sleep` and `token`.
    pub fn builtin() -> ServiceRegistry {
        let mut r = ServiceRegistry::empty();
        for e in crate::options::builtin_entries() {
            r.register(e);
        }
        r
    }

    /// Add (or replace) a service.
    pub fn register(&mut self, entry: ServiceEntry) -> &mut ServiceRegistry {
        assert!(!entry.name.is_empty(), "a service needs a name");
        self.entries.insert(entry.name.clone(), entry);
        self
    }

    /// Builder form of [`register`](Self::register).
    pub fn with(mut self, entry: ServiceEntry) -> ServiceRegistry {
        self.register(entry);
        self
    }

    pub fn names(&self) -> Vec<&str> {
        self.entries.keys().map(String::as_str).collect()
    }

    /// The entry called `name`, or an error naming the known ones.
    pub fn get(&self, name: &str) -> Result<&ServiceEntry, String> {
        self.entries
            .get(name)
            .ok_or_else(|| format!("unknown service {name:?} (known: {})", self.names().join(", ")))
    }

    /// A fresh instance of the service called `name`.
    pub fn build(&self, name: &str, opts: &ServiceOptions) -> Result<Arc<dyn Service>, String> {
        (self.get(name)?.factory)(opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NullService;

    #[test]
    fn applications_register_beside_the_builtins() {
        let mut r = ServiceRegistry::builtin();
        assert_eq!(
            r.names(),
            vec!["kv", "kv-mispredicting", "null", "sleep", "token"]
        );
        let err = r.build("mine", &ServiceOptions::default()).err().unwrap();
        assert!(
            err.contains("unknown service \"mine\" (known: kv, kv-mispredicting, null, sleep, token)"),
            "{err}"
        );
        r.register(ServiceEntry::new("mine", "a test service", |_| {
            Ok(Arc::new(NullService))
        }));
        assert!(r.build("mine", &ServiceOptions::default()).is_ok());
        assert!(r.get("mine").unwrap().workload.is_none());
        assert!(r.get("kv").unwrap().workload.is_some());
    }
}
