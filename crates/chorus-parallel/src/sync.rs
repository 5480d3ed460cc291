//! The synchronisation primitives the executor is written against.
//!
//! Normal builds use `std`. The crate's own unit tests (`cfg(test)`) swap in
//! `shuttle`'s drop-in replacements, so the scheduler runs under shuttle's
//! randomised scheduler, which explores thread interleavings and reports
//! deadlocks and assertion failures with a replayable schedule. Integration
//! tests in `tests/` link the normal build and use real threads.

#[cfg(not(test))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(test))]
pub(crate) use std::thread::{Builder, JoinHandle};

#[cfg(test)]
pub(crate) use shuttle::sync::{Condvar, Mutex, MutexGuard};
#[cfg(test)]
pub(crate) use shuttle::thread::{Builder, JoinHandle};
