//! Client-side counters (relaxed atomics, read with `Client::stats`).

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! stats {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {
        #[derive(Debug, Default)]
        pub(crate) struct Stats {
            $(pub(crate) $name: AtomicU64,)*
        }

        /// A snapshot of the client's counters.
        #[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
        pub struct ClientStats {
            $($(#[$m])* pub $name: u64,)*
        }

        impl Stats {
            pub(crate) fn snapshot(&self) -> ClientStats {
                ClientStats { $($name: self.$name.load(Ordering::Relaxed),)* }
            }
        }
    };
}

stats!(
    /// Invocations started (a read-only fallback is not counted again).
    invoked,
    /// Invocations that returned a result.
    completed,
    /// Read-only invocations answered by the fast path.
    fast_path_completed,
    /// Invocations that hit their deadline.
    timeouts,
    /// Invocations rejected by f+1 replicas.
    rejected,
    /// Invocations whose caller stopped waiting (future dropped).
    abandoned,
    /// Retransmission rounds (one round resends to every replica).
    retransmissions,
    /// Back-offs after f+1 busy answers.
    busy_backoffs,
    /// Read-only requests re-sent as ordered requests.
    fallbacks,
    /// Replies for requests no longer pending (late or duplicate).
    stale_replies,
    /// Replies that did not count (wrong path, second vote from a replica).
    ignored_replies,
    /// Frames from replicas that did not decode, or named another client or replica.
    bad_replies,
    /// RCC §III-E: SWITCHINSTANCE requests sent after repeated timeouts.
    switches_sent,
    /// Of which the cluster applied (f+1 "switched" replies).
    switches_applied,
    /// PBFT §4.1 (`ClientOptions::leader_first`): requests sent to the
    /// primary alone…
    sent_to_primary,
    /// Times the primary left such a request unanswered until its
    /// retransmission to every replica, so that the client sent to every
    /// replica for a while (at most one per such period).
    primary_silences,
    /// Ordered requests that asked f + 1 replicas only for their replies
    /// (`ClientOptions::few_replies`)…
    sent_few_replies,
    /// …and the times one of them had to be retransmitted, so that every
    /// replica replied for a while (at most one per such period).
    reply_shortfalls,
);

impl Stats {
    pub(crate) fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}
