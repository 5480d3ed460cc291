//! chorus-apps: replicated services (DESIGN §2).
//!
//! - [`kv`]: a key-value store with YCSB operations;
//! - [`null`]: empty replies, no state (overhead measurement, CBASE §6.1.1);
//! - [`sleep`]: fixed service time over `buckets` keys (CBASE §6.1.2);
//! - [`token`]: accounts and Ed25519-signed transfers (Dispel §6).
//!
//! [`service_by_name`] builds one from its name, for the CLI and the simulator.

pub mod kv;
pub mod kv_op;
pub mod null;
pub mod options;
pub mod sleep;
pub mod token;
pub mod token_op;

pub use kv::KvService;
pub use kv_op::{KvOp, KvReply};
pub use null::NullService;
pub use options::{service_by_name, ServiceOptions, SERVICE_NAMES};
pub use sleep::SleepService;
pub use token::{Genesis, TokenService};
pub use token_op::{TokenError, TokenOp, TokenReply};
