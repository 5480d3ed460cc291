//! Request latency through one replica, by stage (issue 14 item 2):
//! admission (a pillar verified the request) → decision (the core delivered
//! its batch) → execution (the executor returned its result) → reply (handed
//! to the client's pillar). Pillars note admissions here; the execution
//! thread takes them back and observes every stage (`request_latency_seconds`).
//! Bounded: at most `TRACKED_MAX` admissions are remembered (more are not
//! timed), and ones never executed (refused, or ordered as a duplicate) are
//! swept after `FORGET_AFTER`.

use crate::metrics::{stage, Metrics, StageLabel};
use chorus_core::{ClientId, RequestSeq};
use prometheus_client::metrics::histogram::Histogram;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const TRACKED_MAX: usize = 65_536;
pub const FORGET_AFTER: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct Latency {
    admitted: Mutex<HashMap<(ClientId, RequestSeq), Instant>>,
    /// Requests timed from admission to reply, and their total in µs
    /// (what `chorus status --json` and the dashboard show as a mean).
    pub replied: AtomicU64,
    pub replied_us: AtomicU64,
}

impl Latency {
    pub fn admitted(&self, client: ClientId, seq: RequestSeq) {
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
        let admitted = self
            .latency
            .take_all(batch.requests.iter().map(|r| (r.client, r.seq)));
        for (r, admitted) in batch.requests.iter().zip(admitted) {
            if let Some(a) = admitted {
                self.to_decision
                    .observe(at.saturating_duration_since(a).as_secs_f64());
            }
            if self.delivered.len() < TRACKED_MAX {
                self.delivered.insert((r.client, r.seq), (admitted, at));
            }
        }
        self.sweep();
    }

    /// The request's result came back: its admission time, if timed.
    pub fn executed(&mut self, client: ClientId, seq: RequestSeq, now: Instant) -> Option<Instant> {
        let (admitted, decided) = self.delivered.remove(&(client, seq))?;
        self.to_execution
            .observe(now.saturating_duration_since(decided).as_secs_f64());
        admitted
    }

    /// The replies of requests executed at `executed` were handed on.
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

    #[test]
    fn remembers_once_and_is_bounded() {
        let l = Latency::default();
        for s in 0..(TRACKED_MAX as u64 + 10) {
            l.admitted(ClientId(1), RequestSeq(s));
        }
        assert_eq!(l.tracked(), TRACKED_MAX);
        assert!(l.take(ClientId(1), RequestSeq(0)).is_some());
        assert!(l.take(ClientId(1), RequestSeq(0)).is_none());
        assert!(l.take(ClientId(1), RequestSeq(TRACKED_MAX as u64 + 5)).is_none());
        l.sweep();
        assert_eq!(l.tracked(), TRACKED_MAX - 1, "nothing is 30 s old yet");
    }

    /// Each stage is observed once per request; one admitted elsewhere gets
    /// only the stages this replica saw.
    #[test]
    fn stages_are_observed_in_order() {
        use chorus_core::{Authenticator, Batch, Request};
        let m = crate::metrics::Metrics::default();
        let req = |c: u64| Request {
            memo: Default::default(),
            client: ClientId(c),
            seq: RequestSeq(1),
            flags: 0,
            op: bytes::Bytes::new(),
            auth: Authenticator::Macs(Default::default()),
        };
        m.latency.admitted(ClientId(1), RequestSeq(1));
        let mut st = Stages::new(&m);
        let batch = Batch {
            requests: vec![req(1), req(2)],
            time_ms: 0,
        };
        st.delivered(&batch, Instant::now());
        let now = Instant::now();
        let a = st.executed(ClientId(1), RequestSeq(1), now);
        let b = st.executed(ClientId(2), RequestSeq(1), now);
        assert!(a.is_some() && b.is_none());
        assert_eq!(st.executed(ClientId(1), RequestSeq(1), now), None, "once");
        st.replied(&[a, b], now);
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
