//! What the dashboard shows (issue 14 item 3): every replica's latest status,
//! a bounded history of throughput and latency, recent events, and the
//! verdicts that highlight a replica (unreachable, in another view than its
//! peers, not progressing, a state digest that differs at an equal position).
//! Pure: `observe` takes one poll's answers and the time; the poller and the
//! HTTP server are elsewhere (`cmd_dashboard`, `dash_http`).

use chorus_node::status::StatusReport;
use serde::Serialize;
use std::collections::VecDeque;

/// Samples of history kept (one per poll: 3 minutes at the default 1 s).
pub const HISTORY_MAX: usize = 180;
/// Events kept.
pub const EVENTS_MAX: usize = 60;
/// A replica whose executed position stood still this long while a peer's
/// moved is "not progressing".
pub const STALL_MS: u64 = 3_000;

#[derive(Clone, Debug, Default, Serialize)]
pub struct ReplicaView {
    pub id: u32,
    pub up: bool,
    pub error: Option<String>,
    pub executed_seq: u64,
    pub next_delivery: u64,
    pub stable_seq: u64,
    pub views: Vec<u64>,
    pub view_changing: Vec<bool>,
    /// Per lane: who proposes the lane's next slot, as this replica sees it.
    pub proposers: Vec<u32>,
    pub pool: usize,
    pub busy_replies: u64,
    pub view_changes: u64,
    pub state_transfers: u64,
    pub peers: i64,
    pub clients: i64,
    pub state_digest: String,
    pub ops_per_s: f64,
    pub latency_ms: Option<f64>,
    /// Highlights: each is a reason to look at this replica. In another
    /// view than most replicas on some lane; executed nothing for
    /// `STALL_MS` while a peer did; a different digest than a replica at
    /// the same executed position.
    pub view_mismatch: bool,
    pub stalled: bool,
    pub digest_mismatch: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Seconds since the dashboard started.
    pub t: f64,
    /// Cluster throughput: the highest executed-requests rate of any replica.
    pub ops_per_s: f64,
    /// Mean admission-to-reply latency over the interval (replicas that
    /// replied), ms.
    pub latency_ms: Option<f64>,
    /// Per replica ops/s (`None`: unreachable).
    pub per_replica: Vec<Option<f64>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Event {
    pub t: f64,
    pub kind: &'static str,
    pub text: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Snapshot<'a> {
    pub title: &'a str,
    pub n: usize,
    pub f: usize,
    pub mode: &'a str,
    pub lanes: u32,
    pub t: f64,
    pub replicas: &'a [ReplicaView],
    pub history: &'a VecDeque<Sample>,
    pub events: &'a VecDeque<Event>,
    /// The majority view per lane among reachable replicas.
    pub views: Vec<u64>,
    /// Every replica reachable, at the same position with the same digest.
    pub all_equal: bool,
    /// Two reachable replicas at the same position with different digests.
    pub diverged: bool,
}

/// Per replica: what the previous poll saw, for rates and events.
#[derive(Clone, Debug, Default)]
struct Prev {
    seen: bool,
    up: bool,
    at_ms: u64,
    executed_requests: u64,
    replied: u64,
    replied_us: u64,
    views: Vec<u64>,
    state_transfers: u64,
    executed_seq: u64,
    last_progress_ms: u64,
}

pub struct DashState {
    pub title: String,
    pub mode: String,
    pub f: usize,
    pub lanes: u32,
    pub replicas: Vec<ReplicaView>,
    prev: Vec<Prev>,
    pub history: VecDeque<Sample>,
    pub events: VecDeque<Event>,
    now_ms: u64,
}

impl DashState {
    pub fn new(title: String, n: usize, f: usize, mode: String, lanes: u32) -> DashState {
        DashState {
            title,
            mode,
            f,
            lanes,
            replicas: (0..n)
                .map(|i| ReplicaView {
                    id: i as u32,
                    ..ReplicaView::default()
                })
                .collect(),
            prev: vec![Prev::default(); n],
            history: VecDeque::new(),
            events: VecDeque::new(),
            now_ms: 0,
        }
    }

    fn event(&mut self, kind: &'static str, text: String) {
        if self.events.len() >= EVENTS_MAX {
            self.events.pop_front();
        }
        self.events.push_back(Event {
            t: self.now_ms as f64 / 1000.0,
            kind,
            text,
        });
    }

    /// One poll: replica `i` answered `polls[i]` (or failed with a message)
    /// at `now_ms` since the dashboard started.
    pub fn observe(&mut self, now_ms: u64, polls: Vec<Result<StatusReport, String>>) {
        assert_eq!(polls.len(), self.replicas.len(), "one answer per replica");
        self.now_ms = now_ms;
        let mut per_replica = Vec::with_capacity(polls.len());
        let (mut lat_n, mut lat_us) = (0u64, 0u64);
        for (i, poll) in polls.into_iter().enumerate() {
            let prev = self.prev[i].clone();
            match poll {
                Ok(s) => {
                    let dt = now_ms.saturating_sub(prev.at_ms).max(1) as f64 / 1000.0;
                    let rate = (prev.seen && prev.up)
                        .then(|| s.executed_requests.saturating_sub(prev.executed_requests) as f64 / dt);
                    let replied = s.replied_timed.saturating_sub(prev.replied);
                    let replied_us = s.replied_timed_us.saturating_sub(prev.replied_us);
                    let latency =
                        (prev.up && replied > 0).then(|| replied_us as f64 / replied as f64 / 1000.0);
                    if prev.up && replied > 0 {
                        lat_n += replied;
                        lat_us += replied_us;
                    }
                    if prev.seen && !prev.up {
                        self.event("up", format!("r{i} is reachable again"));
                    }
                    for (l, (&old, &new)) in prev.views.iter().zip(&s.core.views).enumerate() {
                        if new != old {
                            self.event("view", format!("r{i} lane {l}: view {old} → {new}"));
                        }
                    }
                    if prev.seen && s.core.state_transfers > prev.state_transfers {
                        self.event(
                            "transfer",
                            format!("r{i} installed a snapshot from its peers (state transfer)"),
                        );
                    }
                    let progressed = s.executed_seq != prev.executed_seq || !prev.seen;
                    let r = &mut self.replicas[i];
                    *r = ReplicaView {
                        id: i as u32,
                        up: true,
                        error: None,
                        executed_seq: s.executed_seq,
                        next_delivery: s.core.next_delivery,
                        stable_seq: s.core.stable_seq,
                        views: s.core.views.clone(),
                        view_changing: s.core.lane_detail.iter().map(|d| d.view_changing).collect(),
                        proposers: s.core.lane_detail.iter().map(|d| d.proposer).collect(),
                        pool: s.core.pool_len,
                        busy_replies: s.busy_replies,
                        view_changes: s.core.view_changes,
                        state_transfers: s.core.state_transfers,
                        peers: s.peer_connections,
                        clients: s.client_connections,
                        state_digest: s.state_digest.clone(),
                        ops_per_s: rate.unwrap_or(0.0),
                        latency_ms: latency,
                        ..ReplicaView::default()
                    };
                    per_replica.push(Some(rate.unwrap_or(0.0)));
                    self.prev[i] = Prev {
                        seen: true,
                        up: true,
                        at_ms: now_ms,
                        executed_requests: s.executed_requests,
                        replied: s.replied_timed,
                        replied_us: s.replied_timed_us,
                        views: s.core.views,
                        state_transfers: s.core.state_transfers,
                        executed_seq: s.executed_seq,
                        last_progress_ms: if progressed { now_ms } else { prev.last_progress_ms },
                    };
                }
                Err(e) => {
                    if prev.up || !prev.seen {
                        self.event("down", format!("r{i} unreachable: {e}"));
                    }
                    let r = &mut self.replicas[i];
                    r.up = false;
                    r.error = Some(e);
                    r.ops_per_s = 0.0;
                    r.latency_ms = None;
                    per_replica.push(None);
                    self.prev[i].seen = true;
                    self.prev[i].up = false;
                    self.prev[i].at_ms = now_ms;
                }
            }
        }
        self.judge(now_ms);
        if self.history.len() >= HISTORY_MAX {
            self.history.pop_front();
        }
        self.history.push_back(Sample {
            t: now_ms as f64 / 1000.0,
            ops_per_s: per_replica.iter().flatten().copied().fold(0.0, f64::max),
            latency_ms: (lat_n > 0).then(|| lat_us as f64 / lat_n as f64 / 1000.0),
            per_replica,
        });
    }

    /// The majority view of each lane among reachable replicas.
    pub fn majority_views(&self) -> Vec<u64> {
        (0..self.lanes as usize)
            .map(|l| {
                let mut counts: std::collections::BTreeMap<u64, usize> = Default::default();
                for r in self.replicas.iter().filter(|r| r.up) {
                    if let Some(v) = r.views.get(l) {
                        *counts.entry(*v).or_default() += 1;
                    }
                }
                // Most replicas; on a tie the higher view.
                counts
                    .into_iter()
                    .max_by_key(|(v, c)| (*c, *v))
                    .map(|(v, _)| v)
                    .unwrap_or(0)
            })
            .collect()
    }

    /// Highlights: another view than the majority, no progress while a peer
    /// progresses, a digest that differs from a peer's at the same position.
    fn judge(&mut self, now_ms: u64) {
        let majority = self.majority_views();
        let anyone_progressing = self
            .prev
            .iter()
            .any(|p| p.up && now_ms.saturating_sub(p.last_progress_ms) < STALL_MS);
        let mut new_events = Vec::new();
        for i in 0..self.replicas.len() {
            let p = &self.prev[i];
            let r = &mut self.replicas[i];
            if !r.up {
                continue;
            }
            r.view_mismatch = r.views != majority;
            r.stalled = anyone_progressing && now_ms.saturating_sub(p.last_progress_ms) >= STALL_MS;
        }
        // Same position, different state: the one thing that must never happen.
        for a in 0..self.replicas.len() {
            for b in 0..self.replicas.len() {
                let (ra, rb) = (&self.replicas[a], &self.replicas[b]);
                if a != b
                    && ra.up
                    && rb.up
                    && ra.executed_seq == rb.executed_seq
                    && ra.state_digest != rb.state_digest
                {
                    if !self.replicas[a].digest_mismatch && a < b {
                        new_events.push(format!(
                            "r{a} and r{b} differ in state at position {}",
                            self.replicas[a].executed_seq
                        ));
                    }
                    self.replicas[a].digest_mismatch = true;
                }
            }
        }
        for e in new_events {
            self.event("digest", e);
        }
    }

    pub fn snapshot(&self) -> Snapshot<'_> {
        let up: Vec<_> = self.replicas.iter().filter(|r| r.up).collect();
        Snapshot {
            title: &self.title,
            n: self.replicas.len(),
            f: self.f,
            mode: &self.mode,
            lanes: self.lanes,
            t: self.now_ms as f64 / 1000.0,
            replicas: &self.replicas,
            history: &self.history,
            events: &self.events,
            views: self.majority_views(),
            diverged: self.replicas.iter().any(|r| r.digest_mismatch),
            all_equal: up.len() == self.replicas.len()
                && up.windows(2).all(|w| {
                    w[0].executed_seq == w[1].executed_seq && w[0].state_digest == w[1].state_digest
                }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_node::status::{CoreStatus, LaneDetail};

    fn report(r: u32, views: Vec<u64>, executed: u64, requests: u64) -> StatusReport {
        StatusReport {
            replica: r,
            mode: "cop".into(),
            lanes: views.len() as u32,
            core: CoreStatus {
                next_delivery: executed,
                views: views.clone(),
                lane_detail: views.iter().map(|_| LaneDetail::default()).collect(),
                ..CoreStatus::default()
            },
            executed_seq: executed,
            state_digest: format!("d{executed}"),
            executed_requests: requests,
            peer_connections: 3,
            client_connections: 1,
            replied_timed: requests,
            replied_timed_us: requests * 1500,
            busy_replies: 0,
            partitions: Vec::new(),
        }
    }

    #[test]
    fn rates_highlights_and_events() {
        let mut d = DashState::new("t".into(), 4, 1, "cop".into(), 2);
        d.observe(0, (0..4).map(|r| Ok(report(r, vec![0, 0], 10, 100))).collect());
        d.observe(
            1_000,
            vec![
                Ok(report(0, vec![1, 0], 20, 600)),
                Ok(report(1, vec![1, 0], 20, 600)),
                Ok(report(2, vec![1, 0], 20, 600)),
                Err("refused".into()),
            ],
        );
        let h = d.history.back().unwrap();
        assert_eq!(h.ops_per_s, 500.0);
        assert_eq!(h.latency_ms, Some(1.5));
        assert_eq!(h.per_replica[3], None);
        assert!(!d.replicas[3].up);
        assert!(d
            .events
            .iter()
            .any(|e| e.kind == "down" && e.text.starts_with("r3")));
        assert_eq!(d.events.iter().filter(|e| e.kind == "view").count(), 3);
        assert_eq!(d.majority_views(), vec![1, 0]);
        // r3 comes back in the old view and does not progress while the others do.
        for t in 2..6u64 {
            d.observe(
                t * 1_000,
                vec![
                    Ok(report(0, vec![1, 0], 20 + t, 600 + t * 100)),
                    Ok(report(1, vec![1, 0], 20 + t, 600 + t * 100)),
                    Ok(report(2, vec![1, 0], 20 + t, 600 + t * 100)),
                    Ok(report(3, vec![0, 0], 10, 100)),
                ],
            );
        }
        assert!(d.replicas[3].view_mismatch && d.replicas[3].stalled);
        assert!(!d.replicas[0].view_mismatch && !d.replicas[0].stalled);
        assert!(d.events.iter().any(|e| e.kind == "up"));
        assert!(!d.snapshot().all_equal);
        // Equal position, different digest: flagged.
        let mut bad = report(3, vec![1, 0], 25, 1100);
        bad.state_digest = "other".into();
        d.observe(
            6_000,
            vec![
                Ok(report(0, vec![1, 0], 25, 1100)),
                Ok(report(1, vec![1, 0], 25, 1100)),
                Ok(report(2, vec![1, 0], 25, 1100)),
                Ok(bad),
            ],
        );
        assert!(d.replicas[3].digest_mismatch);
        assert!(d.snapshot().diverged);
        assert!(d.events.iter().any(|e| e.kind == "digest"));
    }
}
