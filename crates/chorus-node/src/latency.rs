//! Request latency through one replica, by stage (issue 14 item 2):
//! admission (a pillar verified the request) → decision (the core delivered
//! its batch) → execution (the executor returned its result) → reply (handed
//! to the client's pillar). Pillars note admissions here; the execution
//! thread takes them back and observes every stage (`request_latency_seconds`).
//! Bounded: at most `TRACKED_MAX` admissions are remembered (more are not
//! timed), and ones never executed (refused, or ordered as a duplicate) are
//! swept after `FORGET_AFTER`.
//!
//! Sampled: one request in `SAMPLE_EVERY` is timed (`sampled`, by client and
//! seq, so every replica times the same requests). Timing every request cost
//! each replica two hash-map insertions and removals (one under a lock
//! shared by the pillars and the execution thread), clock reads and four
//! histogram updates per request: ~3 % of the primary's CPU at peak
//! (BENCHMARKS.md 2026-11-28 (night)); the histograms' shapes need far
//! fewer points than the 50 k a second a replica executes.

use crate::metrics::{stage, Metrics, StageLabel};
use chorus_core::{ClientId, RequestSeq};
use prometheus_client::metrics::histogram::Histogram;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const TRACKED_MAX: usize = 65_536;
/// One request in this many is timed (`sampled`).
pub const SAMPLE_EVERY: u64 = 8;
pub const FORGET_AFTER: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct Latency {
    admitted: Mutex<HashMap<(ClientId, RequestSeq), Instant>>,
    /// Requests timed from admission to reply, and their total in µs
    /// (what `chorus status --json` and the dashboard show as a mean).
    pub replied: AtomicU64,
    pub replied_us: AtomicU64,
}

/// Whether `(client, seq)` is one of the timed requests: every
/// `SAMPLE_EVERY`-th seq of each client, staggered across clients so that
/// clients in step are not all timed at once.
pub fn sampled(client: ClientId, seq: RequestSeq) -> bool {
    seq.0.wrapping_add(client.0).is_multiple_of(SAMPLE_EVERY)
}

impl Latency {
    /// A pillar verified the request; timed only if `sampled`.
    pub fn admitted(&self, client: ClientId, seq: RequestSeq) {
        if !sampled(client, seq) {
            return;
        }
        let mut m = self.admitted.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() < TRACKED_MAX {
            m.entry((client, seq)).or_insert_with(Instant::now);
        }
    }

    pub fn take(&self, client: ClientId, seq: RequestSeq) -> Option<Instant> {
        self.admitted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(client, seq))
    }

    /// `take` for a whole batch under one lock.
    pub fn take_all(&self, ids: impl Iterator<Item = (ClientId, RequestSeq)>) -> Vec<Option<Instant>> {
        let mut m = self.admitted.lock().unwrap_or_else(|e| e.into_inner());
        ids.map(|id| m.remove(&id)).collect()
    }

    /// Forget admissions older than `FORGET_AFTER`.
    pub fn sweep(&self) {
        let now = Instant::now();
        self.admitted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, at| now.duration_since(*at) < FORGET_AFTER);
    }

    pub fn tracked(&self) -> usize {
        self.admitted.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn note_reply(&self, took: Duration) {
        self.replied.fetch_add(1, Ordering::Relaxed);
        self.replied_us
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }
}

/// The execution thread's half: requests delivered and not yet executed,
/// with their admission (if this replica admitted them) and decision times.
/// Holds the four stage histograms so the hot path skips the label lookup.
pub struct Stages {
    delivered: HashMap<(ClientId, RequestSeq), (Option<Instant>, Instant)>,
    last_sweep: Option<Instant>,
    latency: Arc<Latency>,
    to_decision: Histogram,
    to_execution: Histogram,
    to_reply: Histogram,
    whole: Histogram,
}

impl Stages {
    pub fn new(m: &Metrics) -> Stages {
        let h = |stage: &'static str| {
            m.request_latency_seconds
                .get_or_create(&StageLabel { stage })
                .clone()
        };
        Stages {
            delivered: HashMap::new(),
            last_sweep: None,
            latency: m.latency.clone(),
            to_decision: h(stage::ADMISSION_TO_DECISION),
            to_execution: h(stage::DECISION_TO_EXECUTION),
            to_reply: h(stage::EXECUTION_TO_REPLY),
            whole: h(stage::ADMISSION_TO_REPLY),
        }
    }

    pub fn delivered(&mut self, batch: &chorus_core::Batch, at: Instant) {
        let timed = || {
            batch
                .requests
                .iter()
                .map(|r| (r.client, r.seq))
                .filter(|&(c, s)| sampled(c, s))
        };
        let admitted = self.latency.take_all(timed());
        for (id, admitted) in timed().zip(admitted) {
            if let Some(a) = admitted {
                self.to_decision
                    .observe(at.saturating_duration_since(a).as_secs_f64());
            }
            if self.delivered.len() < TRACKED_MAX {
                self.delivered.insert(id, (admitted, at));
            }
        }
        self.sweep();
    }

    /// The request's result came back: whether it is timed (`Some`), with
    /// its admission time if this replica admitted it.
    pub fn executed(&mut self, client: ClientId, seq: RequestSeq, now: Instant) -> Option<Option<Instant>> {
        if !sampled(client, seq) {
            return None;
        }
        let (admitted, decided) = self.delivered.remove(&(client, seq))?;
        self.to_execution
            .observe(now.saturating_duration_since(decided).as_secs_f64());
        Some(admitted)
    }

    /// The replies of timed requests executed at `executed` were handed on
    /// (each with its admission time, if this replica admitted it).
    pub fn replied(&self, admitted: &[Option<Instant>], executed: Instant) {
        let now = Instant::now();
        let reply = now.saturating_duration_since(executed).as_secs_f64();
        for a in admitted {
            self.to_reply.observe(reply);
            if let Some(a) = a {
                let took = now.saturating_duration_since(*a);
                self.whole.observe(took.as_secs_f64());
                self.latency.note_reply(took);
            }
        }
    }

    /// Once a second: forget what will never execute here.
    fn sweep(&mut self) {
        let now = Instant::now();
        if self
            .last_sweep
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return;
        }
        self.last_sweep = Some(now);
        self.delivered
            .retain(|_, (_, at)| now.duration_since(*at) < FORGET_AFTER);
        self.latency.sweep();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `i`-th timed seq of client 1.
    fn timed_seq(i: u64) -> RequestSeq {
        RequestSeq(i * SAMPLE_EVERY + SAMPLE_EVERY - 1)
    }

    #[test]
    fn one_request_in_sample_every_is_timed_per_client() {
        for c in 0..4u64 {
            let timed = (0..800u64)
                .filter(|&s| sampled(ClientId(c), RequestSeq(s)))
                .count();
            assert_eq!(timed as u64, 800 / SAMPLE_EVERY);
        }
        assert!(sampled(ClientId(1), timed_seq(0)));
    }

    #[test]
    fn remembers_once_and_is_bounded() {
        let l = Latency::default();
        for i in 0..(TRACKED_MAX as u64 + 10) {
            l.admitted(ClientId(1), timed_seq(i));
        }
        assert_eq!(l.tracked(), TRACKED_MAX);
        l.admitted(ClientId(1), RequestSeq(0));
        assert_eq!(
            l.tracked(),
            TRACKED_MAX,
            "a request not sampled is not remembered"
        );
        assert!(l.take(ClientId(1), timed_seq(0)).is_some());
        assert!(l.take(ClientId(1), timed_seq(0)).is_none());
        assert!(l.take(ClientId(1), timed_seq(TRACKED_MAX as u64 + 5)).is_none());
        l.sweep();
        assert_eq!(l.tracked(), TRACKED_MAX - 1, "nothing is 30 s old yet");
    }

    /// Each stage is observed once per timed request; one admitted elsewhere
    /// gets only the stages this replica saw; one not sampled gets none.
    #[test]
    fn stages_are_observed_in_order() {
        use chorus_core::{Authenticator, Batch, Request};
        let m = crate::metrics::Metrics::default();
        let req = |c: u64, s: u64| Request {
            memo: Default::default(),
            client: ClientId(c),
            seq: RequestSeq(s),
            flags: 0,
            op: bytes::Bytes::new(),
            auth: Authenticator::Macs(Default::default()),
        };
        // Client 1's seq 7 and client 2's seq 6 are timed, client 3's seq 1 not.
        m.latency.admitted(ClientId(1), RequestSeq(7));
        m.latency.admitted(ClientId(3), RequestSeq(1));
        let mut st = Stages::new(&m);
        let batch = Batch {
            requests: vec![req(1, 7), req(2, 6), req(3, 1)],
            time_ms: 0,
        };
        st.delivered(&batch, Instant::now());
        let now = Instant::now();
        let a = st.executed(ClientId(1), RequestSeq(7), now);
        let b = st.executed(ClientId(2), RequestSeq(6), now);
        assert!(matches!(a, Some(Some(_))) && b == Some(None));
        assert_eq!(st.executed(ClientId(3), RequestSeq(1), now), None, "not sampled");
        assert_eq!(st.executed(ClientId(1), RequestSeq(7), now), None, "once");
        st.replied(&[a.unwrap(), b.unwrap()], now);
        let text = m.render();
        for (stage, n) in [
            ("admission_to_decision", 1),
            ("decision_to_execution", 2),
            ("execution_to_reply", 2),
            ("admission_to_reply", 1),
        ] {
            let line = format!("chorus_request_latency_seconds_count{{stage=\"{stage}\"}} {n}\n");
            assert!(text.contains(&line), "{line}{text}");
        }
        assert_eq!(m.latency.replied.load(Ordering::Relaxed), 1);
    }
}
