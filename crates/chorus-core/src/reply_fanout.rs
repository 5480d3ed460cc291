//! How many replicas a client asks to reply (`flags::FEW_REPLIES`).
//!
//! PBFT §4.1 has every replica reply and the client wait for f + 1 matching
//! answers: the other 2f replies are work for nothing in the normal case —
//! a result digest, a MAC, a frame and a wake-up at each of them, and the
//! client's read, MAC check and decode of each. With `FEW_REPLIES` only the
//! f + 1 replicas `designated_replier` names reply when they execute the
//! request; everyone answers its retransmission (from the reply cache).
//!
//! That is only a gain while the designated replicas answer. A crashed,
//! slow or Byzantine designated replica would cost the request a
//! retransmission timeout, so the client asks for few replies only while
//! (1) it heard every replica reply within `HEARD_WITHIN` (a crashed or
//! partitioned replica stops replying, so the client asks everyone until it
//! is back, and loses nothing to it), and (2) it is not cooling off: a
//! request sent with few replies that had to be resent starts a cooling-off
//! period of every-replica replies that doubles with each such shortfall,
//! up to `COOL_OFF_MAX`, and halves after `CALM_PERIODS` periods without
//! one. The client resends early when the first designated reply came and
//! the others are not right behind it (as long again as the first took, at
//! least the client's grace), so a designated replier that answers slowly
//! on purpose is a shortfall too. A Byzantine replica that answers all
//! requests but those it is designated for can thus cost a client one
//! early resend of the requests in flight per cooling-off period — with
//! the first designated reply as the clock, not the retransmission timeout,
//! when the other designated replier is correct — never a lost request;
//! one that lies is outvoted once the resend reaches everyone.

use crate::ids::{ClientId, ReplicaId, RequestSeq};
use crate::request::{designated_replier, flags};

/// Sans-IO: time is the caller's, in microseconds.
pub type Micros = u64;

/// Few replies only while every replica replied within this.
pub const HEARD_WITHIN: Micros = 1_000_000;
/// The first cooling-off period after a shortfall, and the longest.
pub const COOL_OFF_MIN: Micros = 2_000_000;
pub const COOL_OFF_MAX: Micros = 60_000_000;
/// A cooling-off period halves after this many periods without a shortfall.
pub const CALM_PERIODS: Micros = 4;

#[derive(Clone, Debug)]
pub struct ReplyFanout {
    enabled: bool,
    f: usize,
    /// When each replica last replied to us (anything authenticated).
    heard: Vec<Option<Micros>>,
    /// Every-replica replies until then.
    all_until: Micros,
    cool_off: Micros,
    /// When the last shortfall was noticed: a request sent before it belongs
    /// to the same episode and does not double the period again.
    last_shortfall: Option<Micros>,
}

impl ReplyFanout {
    pub fn new(n: usize, enabled: bool) -> ReplyFanout {
        ReplyFanout {
            enabled,
            f: crate::quorum::max_faulty(n),
            heard: vec![None; n],
            all_until: 0,
            cool_off: COOL_OFF_MIN,
            last_shortfall: None,
        }
    }

    /// The flag for a new ordered request sent at `now`.
    pub fn flags(&self, now: Micros) -> u8 {
        if self.few(now) {
            flags::FEW_REPLIES
        } else {
            0
        }
    }

    fn few(&self, now: Micros) -> bool {
        self.enabled
            && now >= self.all_until
            && self
                .heard
                .iter()
                .all(|h| h.is_some_and(|t| now.saturating_sub(t) < HEARD_WITHIN))
    }

    /// Is `replica` one of the f + 1 asked to reply to our `seq`?
    pub fn designated(&self, client: ClientId, seq: RequestSeq, replica: ReplicaId) -> bool {
        designated_replier(client, seq, replica, self.heard.len(), self.f)
    }

    /// `from` replied (over its authenticated channel).
    pub fn on_reply(&mut self, from: ReplicaId, now: Micros) {
        if let Some(h) = self.heard.get_mut(from.index()) {
            *h = Some(h.map_or(now, |t| t.max(now)));
        }
    }

    /// A request sent at `sent_at` with few replies had to be retransmitted.
    /// Returns whether that started a cooling-off period (a request sent
    /// before the last one started belongs to it).
    pub fn on_shortfall(&mut self, sent_at: Micros, now: Micros) -> bool {
        match self.last_shortfall {
            Some(last) if sent_at < last => return false,
            Some(_) => {
                // Halve once per `CALM_PERIODS` periods without a shortfall
                // since the last period ended (view changes and pauses are
                // shortfalls too), then double: a replica striking once per
                // calm stretch keeps it where it is.
                let mut calm = now.saturating_sub(self.all_until);
                while self.cool_off > COOL_OFF_MIN && calm >= CALM_PERIODS * self.cool_off {
                    calm -= CALM_PERIODS * self.cool_off;
                    self.cool_off = (self.cool_off / 2).max(COOL_OFF_MIN);
                }
                self.cool_off = (self.cool_off * 2).min(COOL_OFF_MAX);
            }
            None => {}
        }
        self.last_shortfall = Some(now);
        self.all_until = now + self.cool_off;
        true
    }

    /// The current cooling-off period (tests, status).
    pub fn cool_off(&self) -> Micros {
        self.cool_off
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{designated_replier, reply_start, REPLY_SET_SPAN};
    use crate::RequestSeq;

    fn heard_all(f: &mut ReplyFanout, n: u32, now: Micros) {
        for r in 0..n {
            f.on_reply(ReplicaId(r), now);
        }
    }

    #[test]
    fn designated_repliers_are_f_plus_one_distinct_replicas_spread_over_clients() {
        use crate::ClientId;
        for (n, f) in [(4, 1), (7, 2), (10, 3), (31, 10)] {
            let mut count = vec![0; n];
            for client in 0..(n as u64 * 3) {
                for seq in [0, 1, REPLY_SET_SPAN - 1, REPLY_SET_SPAN, 5 * REPLY_SET_SPAN + 7] {
                    let (c, s) = (ClientId(client), RequestSeq(seq));
                    let set: Vec<usize> = (0..n)
                        .filter(|r| designated_replier(c, s, ReplicaId(*r as u32), n, f))
                        .collect();
                    assert_eq!(set.len(), f + 1, "n={n} {c:?} {s:?}: {set:?}");
                    // The first is the one that sends a large result in full.
                    assert!(set.contains(&reply_start(c, s, n)));
                    for r in set {
                        count[r] += 1;
                    }
                }
            }
            assert!(count.iter().all(|c| *c == 15 * (f + 1)), "n={n}: {count:?}");
        }
    }

    #[test]
    fn few_replies_only_while_every_replica_was_heard_lately() {
        let mut fo = ReplyFanout::new(4, true);
        assert_eq!(fo.flags(0), 0, "a new client heard nobody yet");
        heard_all(&mut fo, 4, 10);
        assert_eq!(fo.flags(20), flags::FEW_REPLIES);
        // Replica 3 stops replying (crashed): everyone is asked again.
        heard_all(&mut fo, 3, 900_000);
        assert_eq!(fo.flags(900_000), flags::FEW_REPLIES);
        assert_eq!(fo.flags(10 + HEARD_WITHIN), 0);
        fo.on_reply(ReplicaId(3), 1_100_000);
        assert_eq!(fo.flags(1_100_000), flags::FEW_REPLIES);
        assert_eq!(ReplyFanout::new(4, false).flags(0), 0);
    }

    #[test]
    fn a_shortfall_cools_off_once_per_episode_and_doubles_after() {
        let mut fo = ReplyFanout::new(4, true);
        let mut now = 1_000;
        heard_all(&mut fo, 4, now);
        now += 1_000_000 - 1;
        // Many requests sent at 1 ms time out together: one episode.
        assert!(fo.on_shortfall(1_000, now));
        heard_all(&mut fo, 4, now);
        assert_eq!(fo.flags(now), 0);
        assert!(!fo.on_shortfall(1_500, now + 10));
        assert_eq!(fo.cool_off(), COOL_OFF_MIN);
        let end = now + COOL_OFF_MIN;
        heard_all(&mut fo, 4, end);
        assert_eq!(fo.flags(end), flags::FEW_REPLIES);
        // A request sent after the episode falls short again: twice as long.
        assert!(fo.on_shortfall(end, end + 1_000_000));
        assert_eq!(fo.cool_off(), 2 * COOL_OFF_MIN);
        heard_all(&mut fo, 4, end + 1_000_000 + 2 * COOL_OFF_MIN);
        assert_eq!(fo.flags(end + 1_000_000 + 2 * COOL_OFF_MIN - 1), 0);
        assert_eq!(fo.flags(end + 1_000_000 + 2 * COOL_OFF_MIN), flags::FEW_REPLIES);
        for _ in 0..20 {
            let t = fo.all_until;
            fo.on_shortfall(t, t + 1);
        }
        assert_eq!(fo.cool_off(), COOL_OFF_MAX);
        // Calm for CALM_PERIODS periods after the period: halved, then
        // doubled (unchanged); for twice as long (at the halved length
        // too): halved twice.
        let t = fo.all_until + CALM_PERIODS * COOL_OFF_MAX;
        assert!(fo.on_shortfall(t, t));
        assert_eq!(fo.cool_off(), COOL_OFF_MAX);
        let t2 = fo.all_until + CALM_PERIODS * COOL_OFF_MAX + CALM_PERIODS * COOL_OFF_MAX / 2;
        assert!(fo.on_shortfall(t2, t2));
        assert_eq!(fo.cool_off(), COOL_OFF_MAX / 2);
        // Never below the first period, however long the calm.
        let t3 = fo.all_until + 1_000 * COOL_OFF_MAX;
        assert!(fo.on_shortfall(t3, t3));
        assert_eq!(fo.cool_off(), 2 * COOL_OFF_MIN);
    }
}
