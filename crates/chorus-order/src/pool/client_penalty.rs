//! Clients whose MAC-vector requests stalled our own proposals are not
//! taken (with MAC vectors) for a while that doubles with every repeat
//! (Aardvark §4.1, Clement et al. NSDI'09: a client whose requests fail
//! authentication at some replicas is blacklisted; our penalty plays the
//! part of the leader penalty in `lane/penalty.rs` for clients).
//!
//! Why it is needed: a client can make its MAC vector valid only at f+1
//! replicas, one of them Byzantine and silent (seed 9300041, cop n = 7). A
//! correct replica among those f+1 that proposes the request collects fewer
//! than f+1 vouchers (`lane/normal.rs`), the other backups hold the
//! pre-prepare, and the lane changes view. Dropping the voided request
//! (`Pool::release_from`) costs the client nothing: it retransmits, the
//! request is admitted again, and the next proposal of it costs the next
//! view change, for ever. With the penalty, a client that keeps doing that
//! costs O(log t) view changes per correct replica over a time t.
//!
//! A correct client can be struck too (any view change voids our in-flight
//! proposals), but its requests are held by every correct replica, so the
//! other leaders still propose them; a first strike lasts one view-change
//! timeout and is forgotten after a quiet while. Signed requests are never
//! refused: a signature verifies at every correct replica or at none, so
//! the proposer checked for all of them (the client's way out is
//! `client_auth = "signature"`).

use super::{Entry, Key, Pool, State};
use chorus_core::{Authenticator, ClientId, Millis};

/// The refusal doubles with each strike up to 2^6 view-change timeouts
/// (128 s with the default 2 s), like `lane::penalty::MAX_PENALTY_SHIFT`.
const MAX_CLIENT_PENALTY_SHIFT: u32 = 6;

/// A strike is forgotten once the client went this many times its last
/// penalty without another one.
const FORGIVE_AFTER_PENALTIES: u64 = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ClientPenalty {
    strikes: u32,
    /// MAC-vector requests of the client are refused before this time.
    until: Millis,
    /// Length of the current penalty (ms).
    length: u64,
}

impl Pool {
    /// Is `client`'s MAC-vector request refused at `now`?
    pub(super) fn mac_vectors_refused(&self, now: Millis, client: ClientId, auth: &Authenticator) -> bool {
        matches!(auth, Authenticator::Macs(_))
            && self.client_penalties.get(&client).is_some_and(|p| now < p.until)
    }

    /// A view change voided a proposal of ours that carried a MAC-vector
    /// request of `client`: strike it, and drop its other pending
    /// MAC-vector requests (they may be just as partial; those that are
    /// not are still held by the other correct replicas it sent them to).
    pub(super) fn strike_client(&mut self, now: Millis, client: ClientId) {
        let base = self.cfg.params.view_change_timeout_ms.max(1);
        let p = self.client_penalties.entry(client).or_insert(ClientPenalty {
            strikes: 0,
            until: now,
            length: 0,
        });
        let forgiven = now.0
            >= p.until
                .0
                .saturating_add(p.length.saturating_mul(FORGIVE_AFTER_PENALTIES));
        p.strikes = if forgiven { 1 } else { p.strikes.saturating_add(1) };
        p.length = base << (p.strikes - 1).min(MAX_CLIENT_PENALTY_SHIFT);
        p.until = now.plus(p.length);
        let from = (client, chorus_core::RequestSeq(0));
        let to = (client, chorus_core::RequestSeq(u64::MAX));
        let pending: Vec<Key> = self
            .entries
            .range(from..=to)
            .filter(|(_, e): &(&Key, &Entry)| {
                e.state == State::Pending && matches!(e.req.auth, Authenticator::Macs(_))
            })
            .map(|(k, _)| *k)
            .collect();
        for k in pending {
            self.remove_entry(k);
        }
        debug_assert!(
            self.client_penalties.len() <= self.cfg.clients.len(),
            "client penalties are bounded by the configured clients"
        );
    }

    /// How many strikes `client` has (for tests and status).
    pub fn client_strikes(&self, client: ClientId) -> u32 {
        self.client_penalties.get(&client).map_or(0, |p| p.strikes)
    }
}
