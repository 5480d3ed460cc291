//! Closed-loop load generation shared by `chorus demo` and `chorus bench`.

use bytes::Bytes;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Latencies and counts; the window is drained by the progress line, the
/// total by the phase summary. Histograms are bounded (1 µs .. 60 s).
pub struct LoadStats {
    pub committed: AtomicU64,
    pub errors: AtomicU64,
    /// The first few distinct failures, as text: a run that counts errors
    /// says which (a timeout, an abandoned request, a rejection).
    error_kinds: Mutex<Vec<(String, u64)>>,
    window: Mutex<Histogram<u64>>,
    phase: Mutex<Histogram<u64>>,
    /// Submit to the first replica's answer (it had committed and executed):
    /// only filled by `record_timed`.
    commit_phase: Mutex<Histogram<u64>>,
    /// Open loop: how late the generator handed each request to the client
    /// library after its intended send time (`pacer.rs`).
    pacing: Mutex<Histogram<u64>>,
    /// The latest write acknowledged by f+1 replicas, per key. Each key has
    /// one sequential writer, so the last acknowledgement is the value the
    /// replicas must hold. Bounded by `ACKED_KEYS_MAX` distinct keys.
    pub acked: Mutex<HashMap<Bytes, Bytes>>,
    uncertain: Mutex<HashSet<Bytes>>,
    pub stop: AtomicBool,
}

pub const ACKED_KEYS_MAX: usize = 100_000;

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

impl Default for LoadStats {
    fn default() -> Self {
        LoadStats {
            committed: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            error_kinds: Mutex::new(Vec::new()),
            window: Mutex::new(hist()),
            phase: Mutex::new(hist()),
            commit_phase: Mutex::new(hist()),
            pacing: Mutex::new(hist()),
            acked: Mutex::new(HashMap::new()),
            uncertain: Mutex::new(HashSet::new()),
            stop: AtomicBool::new(false),
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Percentiles {
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

fn percentiles(h: &Histogram<u64>) -> Percentiles {
    let ms = |v: u64| v as f64 / 1000.0;
    Percentiles {
        p50_ms: ms(h.value_at_quantile(0.50)),
        p95_ms: ms(h.value_at_quantile(0.95)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        max_ms: ms(h.max()),
    }
}

/// Distinct failure texts `LoadStats` keeps (each with its count).
const ERROR_KINDS_MAX: usize = 4;

impl LoadStats {
    /// Count a failed operation, and keep its text if it is one of the
    /// first `ERROR_KINDS_MAX` kinds (compared without the numbers, which
    /// name the request and the time).
    pub fn note_error(&self, e: &dyn std::fmt::Display) {
        self.errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let text = e.to_string();
        let kind: String = text.chars().filter(|c| !c.is_ascii_digit()).collect();
        let mut kinds = self.error_kinds.lock();
        let known = kinds
            .iter()
            .position(|(t, _)| t.chars().filter(|c| !c.is_ascii_digit()).collect::<String>() == kind);
        match known {
            Some(i) => kinds[i].1 += 1,
            None if kinds.len() < ERROR_KINDS_MAX => kinds.push((text, 1)),
            None => {}
        }
    }

    /// The failures kept by `note_error` since the last call, with counts.
    pub fn take_error_kinds(&self) -> Vec<(String, u64)> {
        std::mem::take(&mut *self.error_kinds.lock())
    }

    pub fn record(&self, started: Instant) {
        let us = started.elapsed().as_micros().clamp(1, 60_000_000) as u64;
        let _ = self.window.lock().record(us);
        let _ = self.phase.lock().record(us);
        self.committed.fetch_add(1, Ordering::Relaxed);
    }

    /// `record` plus the submit-to-commit latency (`first_reply`).
    pub fn record_timed(&self, started: Instant, first_reply: Instant) {
        let us = first_reply
            .saturating_duration_since(started)
            .as_micros()
            .clamp(1, 60_000_000) as u64;
        let _ = self.commit_phase.lock().record(us);
        self.record(started);
    }

    /// Open loop: a request about to be sent, `scheduled` its intended time.
    pub fn record_pacing(&self, scheduled: Instant) {
        let us = scheduled.elapsed().as_micros().clamp(1, 60_000_000) as u64;
        let _ = self.pacing.lock().record(us);
    }

    pub fn take_pacing(&self) -> Percentiles {
        let mut w = self.pacing.lock();
        let p = percentiles(&w);
        w.reset();
        p
    }

    pub fn take_commit_phase(&self) -> Percentiles {
        let mut w = self.commit_phase.lock();
        let p = percentiles(&w);
        w.reset();
        p
    }

    pub fn take_window(&self) -> Percentiles {
        let mut w = self.window.lock();
        let p = percentiles(&w);
        w.reset();
        p
    }

    pub fn take_phase(&self) -> Percentiles {
        let mut w = self.phase.lock();
        let p = percentiles(&w);
        w.reset();
        p
    }

    pub fn remember_ack(&self, key: Bytes, value: Bytes) {
        if self.uncertain.lock().contains(&key) {
            return;
        }
        let mut a = self.acked.lock();
        if a.len() < ACKED_KEYS_MAX || a.contains_key(&key) {
            a.insert(key, value);
        }
    }

    /// A write that failed at the client (deadline) may still be executed
    /// later, possibly after a newer write to the same key, so the key's
    /// final value is unknown: stop checking it.
    pub fn forget_key(&self, key: Bytes) {
        self.acked.lock().remove(&key);
        let mut u = self.uncertain.lock();
        if u.len() < ACKED_KEYS_MAX {
            u.insert(key);
        }
    }
}

pub fn shared() -> Arc<LoadStats> {
    Arc::new(LoadStats::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Failures of one kind differ only in their numbers (the request, the
    /// time): they count as one kind; beyond `ERROR_KINDS_MAX` kinds the
    /// rest are counted but not kept.
    #[test]
    fn error_kinds_are_kept_once_each_and_bounded() {
        let s = LoadStats::default();
        s.note_error(&"request 7 timed out after 5s");
        s.note_error(&"request 9 timed out after 6s");
        for k in ["a", "b", "c", "d", "e"] {
            s.note_error(&format!("rejected: {k}"));
        }
        assert_eq!(s.errors.load(std::sync::atomic::Ordering::Relaxed), 7);
        let kinds = s.take_error_kinds();
        assert_eq!(kinds.len(), ERROR_KINDS_MAX);
        assert_eq!(kinds[0], ("request 7 timed out after 5s".to_string(), 2));
        assert!(s.take_error_kinds().is_empty(), "taken");
    }
}
