//! Spec P14's retransmission, aimed. Dispel re-sends a live epoch's messages
//! to a replica that looks stalled, because links may lose them (the DBFT
//! engine assumes reliable links). "Stalled" used to mean "its status epoch
//! did not change between two statuses", and every such peer got our
//! messages of its epochs at every tick. Once an epoch takes longer than a
//! status interval (n = 96 in the European WAN: ~0.5 s an epoch, 250 ms
//! interval) every replica looked stalled to every other one on a network
//! that loses nothing, and each tick re-sent a whole epoch's traffic to
//! every peer: 1.9 M re-sent messages in the first 0.6 simulated seconds,
//! which slowed the epochs further (the storm in `docs/known-issues.md`).
//!
//! Now the question is whether an *epoch* is stuck, not whether it is
//! slow, and each replica answers it for itself:
//!
//! * A replica is stalled when its first undelivered epoch saw nothing new
//!   over a whole status interval: no vote, no round, no decision, no
//!   delivery (`Progress`, `fingerprint`). Its status says so (`lacking`),
//!   and every peer that heard it lately re-sends it our messages of its
//!   epochs (all it lacks up to ours when it is behind).
//! * When we are stalled ourselves, we also re-send our stuck epochs to the
//!   peers already past them (a peer that delivered an epoch may still need
//!   our votes in later rounds of one of its instances, spec §3.6, and its
//!   status no longer shows it stuck).
//!
//! A slow epoch that still progresses re-sends nothing; a stuck one is
//! helped within one to two intervals, as before. Whatever a peer claims,
//! it gets at most one re-send per interval (`PeerView::may_resend`), and a
//! peer whose statuses stopped (crashed, cut off) gets none.
//!
//! Tried first and dropped (2026-11-26): (1) a stall threshold of twice our
//! usual epoch time with exponential back-off per peer: the back-off made
//! recovery after a network heals wait for the longest back-off, and a pace
//! learned from our own epochs cannot tell a slow epoch from one waiting
//! for a lost message (dispel n = 4, 30 s of faults: 8 → 13 liveness
//! failures in 300 seeds); (2) a fingerprint of quorum steps only (rounds,
//! decisions, deliveries), with a peer judged lagging after two intervals
//! behind us: at n = 112 in the European WAN 2.1 M messages were re-sent on
//! a network that lost none (4.5 % of the DBFT traffic), and 6.7 M once
//! each replica's own verdict decided it; an epoch's broadcast phase there
//! outlasts an interval with no quorum step (see `fingerprint`).

use chorus_core::Millis;
use chorus_dbft::{Dbft, Epoch};

/// A peer's status older than this many status intervals is no longer
/// a reason to re-send (it crashed or is cut off; its next status, when it
/// comes back, says where it stands).
pub const STATUS_FRESH_INTERVALS: u64 = 2;

/// Where one peer stands (its latest status) and when we last re-sent it ours.
#[derive(Clone, Debug, Default)]
pub struct PeerView {
    /// `None` until we hear where it is (nothing to re-send before).
    at: Option<Epoch>,
    /// Its latest status said its first undelivered epoch did not progress.
    stalled: bool,
    /// When its latest status arrived.
    heard: Option<Millis>,
    /// Our last re-send to it, whatever epoch it was at.
    last: Option<Millis>,
}

impl PeerView {
    pub fn at(&self) -> Option<Epoch> {
        self.at
    }

    /// Its status: at `epoch`, stalled there or not. Returns whether it moved.
    pub fn observe(&mut self, epoch: Epoch, stalled: bool, now: Millis) -> bool {
        let moved = self.at != Some(epoch);
        self.at = Some(epoch);
        self.stalled = stalled;
        self.heard = Some(now);
        moved
    }

    /// Its latest status, recent enough, said it is stalled.
    pub fn stalled(&self, now: Millis, interval_ms: u64) -> bool {
        self.stalled
            && self.heard.is_some_and(|h| {
                now.0.saturating_sub(h.0) <= interval_ms.saturating_mul(STATUS_FRESH_INTERVALS)
            })
    }

    /// At most one re-send per interval, whatever it claims.
    pub fn may_resend(&self, now: Millis, interval_ms: u64) -> bool {
        self.last.is_none_or(|l| now.0.saturating_sub(l.0) >= interval_ms)
    }

    pub fn record(&mut self, now: Millis) {
        self.last = Some(now);
    }
}

/// Without a quorum step (round, decision, delivery) of our first
/// undelivered epoch for this many status ticks we are stalled, however
/// many new votes arrived: a Byzantine replica can drip its distinct votes
/// (about 30 per instance: ECHO, READY, DECIDED and three per round up to
/// the rounds it may run ahead) one per interval to postpone the verdict
/// otherwise (review of 2026-11-26).
pub const QUORUM_STEP_TICKS: u32 = 4;

/// Progress of our first undelivered epoch between status ticks.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    /// At the previous tick: our first undelivered epoch, its fingerprint
    /// and its quorum steps.
    last: Option<(Epoch, u64, u64)>,
    /// Ticks in a row without a quorum step there.
    quiet_ticks: u32,
}

impl Progress {
    /// At a status tick: did epoch `mine` see nothing new since the
    /// previous tick (nor did we move), or no quorum step for
    /// `QUORUM_STEP_TICKS` ticks? The first tick never stalls.
    pub fn stalled(&mut self, engine: &Dbft, mine: Epoch) -> bool {
        let (all, steps) = fingerprint(engine, mine);
        let prev = self.last.replace((mine, all, steps));
        let same_epoch = prev.is_some_and(|(e, _, _)| e == mine);
        let nothing_new = same_epoch && prev.is_some_and(|(_, a, _)| a == all);
        if same_epoch && prev.is_some_and(|(_, _, s)| s == steps) {
            self.quiet_ticks = self.quiet_ticks.saturating_add(1);
        } else {
            self.quiet_ticks = 0;
        }
        nothing_new || self.quiet_ticks >= QUORUM_STEP_TICKS
    }
}

/// What epoch `e` has seen so far, over its n instances: reliable-broadcast
/// INIT/ECHO/READY votes and deliveries, binary votes, rounds and
/// decisions (any change is progress; counting only the steps that need a
/// quorum was tried first, see the module comment), and of these the
/// quorum steps alone (rounds, decisions, deliveries).
pub fn fingerprint(engine: &Dbft, e: Epoch) -> (u64, u64) {
    let Some(s) = engine.epoch(e) else {
        return (0, 0);
    };
    (0..engine.config().n)
        .map(|k| {
            let (b, rb) = (s.binary(k), s.rb(k));
            let steps =
                u64::from(b.round()) + u64::from(b.decided().is_some()) + u64::from(rb.delivered().is_some());
            (steps + b.votes_seen() + rb.votes_seen(), steps)
        })
        .fold((0, 0), |(a, q), (x, y)| (a + x, q + y))
}

#[cfg(test)]
mod tests {
    use super::*;

    const I: u64 = 250;

    #[test]
    fn nothing_is_known_of_a_peer_before_its_status() {
        let p = PeerView::default();
        assert!(!p.stalled(Millis(0), I));
        assert_eq!(p.at(), None);
    }

    #[test]
    fn a_peer_is_stalled_while_its_recent_statuses_say_so() {
        let mut p = PeerView::default();
        assert!(p.observe(5, false, Millis(0)));
        assert!(!p.stalled(Millis(10), I), "progressing");
        assert!(!p.observe(5, true, Millis(250)));
        assert!(p.stalled(Millis(250 + 2 * I), I));
        assert!(
            !p.stalled(Millis(250 + 2 * I + 1), I),
            "no status since: crashed or cut off"
        );
        assert!(p.observe(6, false, Millis(600)));
        assert!(!p.stalled(Millis(600), I));
    }

    #[test]
    fn one_resend_per_interval_whatever_the_peer_claims() {
        let mut p = PeerView::default();
        let mut sent = 0;
        for t in 0..10_000u64 {
            // A Byzantine peer naming another epoch in every status.
            p.observe(t % 3, true, Millis(t));
            if p.may_resend(Millis(t), I) {
                p.record(Millis(t));
                sent += 1;
            }
        }
        assert_eq!(sent, 10_000 / I as usize);
    }
}
