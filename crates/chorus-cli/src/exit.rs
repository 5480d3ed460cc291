//! Exit codes of the `chorus` binary (documented in README "Exit codes"):
//!
//! | code | meaning |
//! |------|---------|
//! | 0 | success (`replica`: stopped by SIGTERM/SIGINT) |
//! | 1 | error (bad config, cannot connect, `replica`: failed to start) |
//! | 2 | usage error (clap) |
//! | 3 | `kv get` / `kv delete`: the key does not exist |
//! | 4 | `status`: fewer than 2f+1 replicas answered |
//! | 5 | `replica`: stopped by a fatal error at run time (storage, a dead thread) |

/// An error that ends the process with a specific exit code.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Exit {
    pub code: i32,
    pub message: String,
}

pub const NOT_FOUND: i32 = 3;
pub const NO_QUORUM: i32 = 4;

/// The exit code for an error returned by a subcommand.
pub fn code_of(e: &anyhow::Error) -> i32 {
    if let Some(x) = e.downcast_ref::<Exit>() {
        x.code
    } else if e.downcast_ref::<chorus_node::fatal::FatalError>().is_some() {
        chorus_node::fatal::EXIT_CODE
    } else {
        1
    }
}
