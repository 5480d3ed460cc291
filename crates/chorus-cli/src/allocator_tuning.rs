//! mimalloc's purge delay for the `chorus` binary (docs/decisions.md
//! "Allocator: mimalloc keeps freed memory for 10 s").
//!
//! mimalloc returns memory to the kernel 1 s after it was freed (its
//! `purge_delay`, v3's default); a replica frees and reallocates batches and frames all
//! the time, so it faulted the same pages back in: 45–55 k minor page faults
//! over a 6 s peak run across the 4 replicas (kernel page zeroing in both
//! replicas' and the load generator's profiles), ~250 with purging delayed to
//! 10 s. Memory freed and not reused for 10 s still goes back.

use std::os::raw::{c_int, c_long};

/// `mi_option_purge_delay` in mimalloc's `mi_option_t` (v2 and v3 headers:
/// the 16th option); the Rust bindings do not name it. Checked against its
/// default by the test below.
const MI_OPTION_PURGE_DELAY: c_int = 15;
/// mimalloc's default for it (v3's `options.c`), in milliseconds.
#[cfg(test)]
const DEFAULT_PURGE_DELAY_MS: c_long = 1_000;
const PURGE_DELAY_MS: c_long = 10_000;

extern "C" {
    #[cfg(test)]
    fn mi_option_get(option: c_int) -> c_long;
    fn mi_option_set(option: c_int, value: c_long);
}

/// Delay mimalloc's purging to `PURGE_DELAY_MS`, unless the operator chose
/// a delay (`MIMALLOC_PURGE_DELAY`, mimalloc's own variable, wins).
pub fn keep_freed_memory_for_a_while() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: mimalloc's option calls take an option index and a value and
    // touch nothing else; the index is the purge delay's (test below).
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
}

/// The purge delay mimalloc uses now.
#[cfg(test)]
fn purge_delay_ms() -> c_long {
    // SAFETY: as above; reading an option has no effect beyond its value.
    unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_is_the_purge_delay_and_setting_it_takes() {
        // Only this test touches the option in this test binary.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        assert_eq!(
            purge_delay_ms(),
            DEFAULT_PURGE_DELAY_MS,
            "option {MI_OPTION_PURGE_DELAY} is not mimalloc's purge delay (default 1 s)"
        );
        keep_freed_memory_for_a_while();
        assert_eq!(purge_delay_ms(), PURGE_DELAY_MS);
    }
}
