//! Request latency through one replica, by stage (issue 14 item 2):
//! admission (a pillar verified the request) → decision (the core delivered
//! its batch) → execution (the executor returned its result) → reply (handed
//! to the client's pillar). Pillars note admissions here; the execution
//! thread takes them back and observes every stage (`request_latency_seconds`).
//! Bounded: at most `TRACKED_MAX` admissions are remembered (more are not
//! timed), and ones never executed (refused, or ordered as a duplicate) are
//! swept after `FORGET_AFTER`.

use chorus_core::{ClientId, RequestSeq};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
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
}

/// The execution thread's half: requests delivered and not yet executed,
/// with their admission (if this replica admitted them) and decision times.
#[derive(Default)]
pub struct Stages {
    delivered: HashMap<(ClientId, RequestSeq), (Option<Instant>, Instant)>,
    last_sweep: Option<Instant>,
}

impl Stages {
    pub fn delivered(&mut self, m: &crate::metrics::Metrics, batch: &chorus_core::Batch, at: Instant) {
        use crate::metrics::stage;
        for r in &batch.requests {
            let admitted = m.latency.take(r.client, r.seq);
            if let Some(a) = admitted {
                m.latency(
                    stage::ADMISSION_TO_DECISION,
                    at.saturating_duration_since(a).as_secs_f64(),
                );
            }
            if self.delivered.len() < TRACKED_MAX {
                self.delivered.insert((r.client, r.seq), (admitted, at));
            }
        }
        self.sweep(m);
    }

    /// The request's result came back: its admission time, if timed.
    pub fn executed(
        &mut self,
        m: &crate::metrics::Metrics,
        client: ClientId,
        seq: RequestSeq,
        now: Instant,
    ) -> Option<Instant> {
        let (admitted, decided) = self.delivered.remove(&(client, seq))?;
        m.latency(
            crate::metrics::stage::DECISION_TO_EXECUTION,
            now.saturating_duration_since(decided).as_secs_f64(),
        );
        admitted
    }

    /// The replies of requests executed at `executed` were handed on.
    pub fn replied(&self, m: &crate::metrics::Metrics, admitted: &[Option<Instant>], executed: Instant) {
        use crate::metrics::stage;
        let now = Instant::now();
        let reply = now.saturating_duration_since(executed).as_secs_f64();
        for a in admitted {
            m.latency(stage::EXECUTION_TO_REPLY, reply);
            if let Some(a) = a {
                let took = now.saturating_duration_since(*a);
                m.latency(stage::ADMISSION_TO_REPLY, took.as_secs_f64());
                m.latency.note_reply(took);
            }
        }
    }

    /// Once a second: forget what will never execute here.
    fn sweep(&mut self, m: &crate::metrics::Metrics) {
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
        m.latency.sweep();
    }
}
