//! chorus-parallel: the CBASE parallel executor (DESIGN §1 "executor =
//! parallel"): a worker pool that drives `chorus_exec::DependencyGraph` and
//! implements `chorus_exec::Executor`. It lives outside `chorus-exec` because
//! it owns threads; the protocol crates stay sans-IO.

mod executor;
mod scheduler;
mod sync;

#[cfg(test)]
mod shuttle_tests;

pub use executor::ParallelExecutor;
