//! Embedding Chorus in an application's own binary (issue 17): BFT-SMaRt's
//! `new ServiceReplica(id, app, app)` as
//! `ReplicaBuilder::from_config(path)?.service(Arc::new(MyApp::new())).run()`.

use crate::node_config::{load_node, LoadedNode};
use anyhow::{Context, Result};
use chorus_apps::ServiceRegistry;
use chorus_exec::Service;
use std::path::Path;
use std::sync::Arc;

/// A replica process to start: its config plus the application it runs.
pub struct ReplicaBuilder {
    loaded: LoadedNode,
    service: Option<Arc<dyn Service>>,
    registry: ServiceRegistry,
}

impl ReplicaBuilder {
    /// From a `replica-<i>.toml` written by `keygen`.
    pub fn from_config(path: &Path) -> Result<ReplicaBuilder> {
        let loaded = load_node(path).with_context(|| format!("loading {}", path.display()))?;
        Ok(ReplicaBuilder::new(loaded))
    }

    pub fn new(loaded: LoadedNode) -> ReplicaBuilder {
        ReplicaBuilder {
            loaded,
            service: None,
            registry: ServiceRegistry::builtin(),
        }
    }

    /// Run this service instance (the config's `service` name is ignored).
    pub fn service(mut self, service: Arc<dyn Service>) -> ReplicaBuilder {
        self.service = Some(service);
        self
    }

    /// Look the config's `service` name up here (default: the built-ins).
    pub fn registry(mut self, registry: ServiceRegistry) -> ReplicaBuilder {
        self.registry = registry;
        self
    }

    /// Checked execution: stop at the first access outside a declared
    /// access set (see `NodeConfig::check_access`).
    pub fn check_access(mut self, on: bool) -> ReplicaBuilder {
        self.loaded.node.check_access = on;
        self
    }

    /// Run until SIGINT/SIGTERM (or a fatal error).
    pub fn run(self) -> Result<()> {
        match self.service {
            Some(s) => crate::runtime::run_replica_with(self.loaded, s),
            None => crate::runtime::run_replica_in(&self.registry, self.loaded),
        }
    }
}
