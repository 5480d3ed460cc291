//! chorus-apps: replicated services (DESIGN §2).
//!
//! - [`kv`]: a key-value store with YCSB operations;
//! - [`null`]: empty replies, no state (overhead measurement, CBASE §6.1.1);
//! - [`sleep`]: fixed service time over `buckets` keys (CBASE §6.1.2);
//! - [`token`]: accounts and Ed25519-signed transfers (Dispel §6).
//!
//! [`ServiceRegistry`] builds one from its name, for the CLI and the simulator;
//! applications register their own services beside these.

pub mod kv;
pub mod kv_op;
pub mod null;
pub mod options;
pub mod registry;
pub mod sleep;
pub mod token;
pub mod token_op;

pub use kv::KvService;
pub use kv_op::{KvOp, KvReply};
pub use null::NullService;
pub use options::{
    kv_cross_partition_workload, kv_multi_key_workload, kv_workload, service_by_name, ServiceOptions,
    SERVICE_NAMES,
};
pub use registry::{InvariantFn, ServiceEntry, ServiceFactory, ServiceRegistry, WorkloadFn};
pub use sleep::SleepService;
pub use token::{Genesis, TokenService};
pub use token_op::{TokenError, TokenOp, TokenReply};
