//! Admission of unauthenticated connections, per listening endpoint.
//!
//! A stranger can open TCP connections for free; each one costs us a socket,
//! a task and a handshake slot until it proves who it is. A [`Gate`] bounds
//! that cost per source address and in total (docs/security.md):
//!
//! * pending handshakes: at most `max_pending` on the gate and
//!   `max_pending_per_source` from one address (refused beyond, not queued);
//! * public-key work: a token bucket per source address, refilled at
//!   `handshakes_per_sec_per_source` up to `handshake_burst_per_source`;
//! * an optional allow-list of addresses (a peer port only takes the
//!   configured replica hosts);
//! * at most `max_sources` addresses tracked at once: an idle entry (nothing
//!   pending, bucket full) is forgotten to make room, and a new source is
//!   refused only when every tracked one is busy.
//!
//! Why our own token bucket rather than `governor`: see docs/decisions.md
//! ("Security hardening: admission and rate limits").

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Bounds of one [`Gate`].
#[derive(Clone, Debug, PartialEq)]
pub struct GateLimits {
    pub max_pending: usize,
    pub max_pending_per_source: usize,
    pub handshakes_per_sec_per_source: f64,
    pub handshake_burst_per_source: f64,
    pub max_sources: usize,
}

/// Why a connection was not admitted (each is counted by the gate).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The address is not on the allow-list.
    NotAllowed,
    /// The gate already has `max_pending` unfinished handshakes.
    GateFull,
    /// This address already has `max_pending_per_source` unfinished handshakes.
    SourceFull,
    /// `max_sources` busy addresses are tracked already.
    TooManySources,
}

impl Refusal {
    /// Stable label for metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NotAllowed => "source-not-allowed",
            Refusal::GateFull => "pending-handshakes-full",
            Refusal::SourceFull => "source-pending-full",
            Refusal::TooManySources => "too-many-sources",
        }
    }
}

#[derive(Debug)]
struct Source {
    pending: usize,
    tokens: f64,
    last: Instant,
}

#[derive(Debug, Default)]
struct Inner {
    pending: usize,
    sources: HashMap<IpAddr, Source>,
}

/// Admission state of one endpoint; share it (`Arc`) among every task and
/// thread that accepts on that endpoint.
#[derive(Debug)]
pub struct Gate {
    limits: GateLimits,
    allowed: Option<HashSet<IpAddr>>,
    inner: Mutex<Inner>,
    refused: AtomicU64,
    rate_limited: AtomicU64,
}

/// One admitted, unfinished handshake; dropping it frees its slot.
#[derive(Debug)]
pub struct Pending {
    gate: Arc<Gate>,
    ip: IpAddr,
}

impl Pending {
    pub fn source(&self) -> IpAddr {
        self.ip
    }

    /// May this source start the public-key part of a handshake now? Takes
    /// one token of its bucket.
    pub fn allow_handshake(&self) -> bool {
        self.gate.allow_handshake_at(self.ip, Instant::now())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut inner = self.gate.lock();
        inner.pending -= 1;
        if let Some(s) = inner.sources.get_mut(&self.ip) {
            debug_assert!(s.pending > 0, "pending count underflow");
            s.pending -= 1;
        }
    }
}

impl Gate {
    pub fn new(limits: GateLimits) -> Arc<Gate> {
        Self::build(limits, None)
    }

    /// A gate that admits only `allowed` addresses (a peer port: the replicas).
    pub fn with_allowed(limits: GateLimits, allowed: HashSet<IpAddr>) -> Arc<Gate> {
        Self::build(limits, Some(allowed))
    }

    fn build(limits: GateLimits, allowed: Option<HashSet<IpAddr>>) -> Arc<Gate> {
        assert!(limits.max_pending > 0 && limits.max_pending_per_source > 0 && limits.max_sources > 0);
        assert!(limits.handshakes_per_sec_per_source > 0.0 && limits.handshake_burst_per_source >= 1.0);
        Arc::new(Gate {
            limits,
            allowed,
            inner: Mutex::new(Inner::default()),
            refused: AtomicU64::new(0),
            rate_limited: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connections refused by `enter`, and handshakes refused by the rate limit.
    pub fn refusals(&self) -> (u64, u64) {
        (
            self.refused.load(Ordering::Relaxed),
            self.rate_limited.load(Ordering::Relaxed),
        )
    }

    /// Unfinished handshakes right now.
    pub fn pending(&self) -> usize {
        self.lock().pending
    }

    /// Admit a new connection from `ip`, or say why not.
    pub fn enter(self: &Arc<Self>, ip: IpAddr) -> Result<Pending, Refusal> {
        let r = self.enter_at(ip, Instant::now());
        if r.is_err() {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        r.map(|()| Pending {
            gate: self.clone(),
            ip,
        })
    }

    fn enter_at(&self, ip: IpAddr, now: Instant) -> Result<(), Refusal> {
        if self.allowed.as_ref().is_some_and(|a| !a.contains(&ip)) {
            return Err(Refusal::NotAllowed);
        }
        let l = &self.limits;
        let mut inner = self.lock();
        if inner.pending >= l.max_pending {
            return Err(Refusal::GateFull);
        }
        if !inner.sources.contains_key(&ip) && inner.sources.len() >= l.max_sources {
            let full = |s: &Source| self.refill(s, now) >= l.handshake_burst_per_source;
            inner.sources.retain(|_, s| s.pending > 0 || !full(s));
            if inner.sources.len() >= l.max_sources {
                return Err(Refusal::TooManySources);
            }
        }
        let s = inner.sources.entry(ip).or_insert(Source {
            pending: 0,
            tokens: l.handshake_burst_per_source,
            last: now,
        });
        if s.pending >= l.max_pending_per_source {
            return Err(Refusal::SourceFull);
        }
        s.pending += 1;
        inner.pending += 1;
        debug_assert!(inner.sources.len() <= l.max_sources);
        Ok(())
    }

    fn refill(&self, s: &Source, now: Instant) -> f64 {
        let dt = now.saturating_duration_since(s.last).as_secs_f64();
        (s.tokens + dt * self.limits.handshakes_per_sec_per_source)
            .min(self.limits.handshake_burst_per_source)
    }

    fn allow_handshake_at(&self, ip: IpAddr, now: Instant) -> bool {
        let mut inner = self.lock();
        let Some(s) = inner.sources.get(&ip) else {
            // Only admitted (hence tracked) sources ask.
            return false;
        };
        let tokens = self.refill(s, now);
        let s = inner.sources.get_mut(&ip).expect("looked up above");
        s.last = now;
        let ok = tokens >= 1.0;
        s.tokens = if ok { tokens - 1.0 } else { tokens };
        drop(inner);
        if !ok {
            self.rate_limited.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))
    }

    fn limits() -> GateLimits {
        GateLimits {
            max_pending: 6,
            max_pending_per_source: 3,
            handshakes_per_sec_per_source: 10.0,
            handshake_burst_per_source: 2.0,
            max_sources: 3,
        }
    }

    #[test]
    fn one_source_cannot_take_every_slot_and_slots_come_back_on_drop() {
        let g = Gate::new(limits());
        let a: Vec<_> = (0..3).map(|_| g.enter(ip(1)).unwrap()).collect();
        assert_eq!(g.enter(ip(1)).unwrap_err(), Refusal::SourceFull);
        // Another source still gets in while the first is at its cap.
        let b: Vec<_> = (0..3).map(|_| g.enter(ip(2)).unwrap()).collect();
        assert_eq!(g.enter(ip(3)).unwrap_err(), Refusal::GateFull);
        drop(a);
        assert_eq!(g.pending(), 3);
        let _c = g.enter(ip(3)).unwrap();
        drop(b);
        assert_eq!(g.pending(), 1);
        assert_eq!(g.refusals().0, 2);
    }

    #[test]
    fn allow_list_refuses_other_addresses() {
        let g = Gate::with_allowed(limits(), [ip(7)].into_iter().collect());
        assert_eq!(g.enter(ip(8)).unwrap_err(), Refusal::NotAllowed);
        assert!(g.enter(ip(7)).is_ok());
    }

    #[test]
    fn token_bucket_bounds_handshakes_per_source() {
        let g = Gate::new(limits());
        let t0 = Instant::now();
        g.enter_at(ip(1), t0).unwrap();
        g.enter_at(ip(2), t0).unwrap();
        // Burst of 2, then nothing until tokens refill at 10/s.
        assert!(g.allow_handshake_at(ip(1), t0));
        assert!(g.allow_handshake_at(ip(1), t0));
        assert!(!g.allow_handshake_at(ip(1), t0));
        assert!(!g.allow_handshake_at(ip(1), t0 + Duration::from_millis(50)));
        assert!(g.allow_handshake_at(ip(1), t0 + Duration::from_millis(160)));
        // Each source has its own bucket.
        assert!(g.allow_handshake_at(ip(2), t0));
        // Over one simulated second a flooding source gets at most burst + rate.
        let g = Gate::new(limits());
        g.enter_at(ip(1), t0).unwrap();
        let allowed = (0..1000)
            .filter(|i| g.allow_handshake_at(ip(1), t0 + Duration::from_millis(*i)))
            .count();
        assert!((11..=12).contains(&allowed), "{allowed}");
    }

    #[test]
    fn tracked_sources_are_bounded_and_idle_ones_are_forgotten() {
        let g = Gate::new(GateLimits {
            max_pending: 100,
            ..limits()
        });
        let t0 = Instant::now();
        for i in 0..3 {
            g.enter_at(ip(i), t0).unwrap();
        }
        // All three are busy (one pending each): a fourth source is refused.
        assert_eq!(g.enter_at(ip(9), t0), Err(Refusal::TooManySources));
        // Once one is idle (nothing pending, bucket full) it is forgotten.
        {
            let mut inner = g.lock();
            inner.pending -= 1;
            inner.sources.get_mut(&ip(0)).unwrap().pending = 0;
        }
        g.enter_at(ip(9), t0).unwrap();
        assert_eq!(g.lock().sources.len(), 3);
        assert!(!g.lock().sources.contains_key(&ip(0)));
    }
}
