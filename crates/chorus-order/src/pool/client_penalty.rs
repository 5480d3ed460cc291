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
use chorus_core::{Authenticator, ClientId, Millis, ReplicaId, UnverifiableRequest};

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

    /// `from` holds a pre-prepare because `hint`'s request did not verify
    /// at it. Once f+1 distinct replicas said so about a request we hold
    /// *as the client sent it to us* (verified here, same authenticator),
    /// one correct replica could not verify the client's own vector: a
    /// correct client never sends that, so the client gets the longest
    /// penalty at once (seed 10800016: otherwise every correct replica the
    /// vector is valid at proposes it once, and each costs a view change).
    /// A Byzantine leader cannot frame a correct client this way: a vector
    /// it altered differs from the one we hold, and it cannot make a
    /// correct replica's entry in the client's own vector wrong. Returns
    /// whether the client was struck.
    pub fn note_unverifiable(
        &mut self,
        now: Millis,
        from: ReplicaId,
        hint: &UnverifiableRequest,
        f: usize,
    ) -> bool {
        let key = (hint.client, hint.seq);
        let Some(e) = self.entries.get(&key) else {
            return false;
        };
        if !e.verified_here
            || !matches!(e.req.auth, Authenticator::Macs(_))
            || e.req.auth_digest() != hint.auth
        {
            return false;
        }
        if self.unverifiable.len() >= self.cfg.params.pool_max_requests as usize
            && !self.unverifiable.contains_key(&key)
        {
            return false;
        }
        let senders = self.unverifiable.entry(key).or_default();
        senders.insert(from);
        if senders.len() <= f {
            return false;
        }
        self.unverifiable.remove(&key);
        self.strike_client_for(now, hint.client, MAX_CLIENT_PENALTY_SHIFT + 1);
        self.remove_entry(key);
        true
    }

    /// A view change voided a proposal of ours that carried a MAC-vector
    /// request of `client`: strike it, and drop its other pending
    /// MAC-vector requests (they may be just as partial; those that are
    /// not are still held by the other correct replicas it sent them to).
    pub(super) fn strike_client(&mut self, now: Millis, client: ClientId) {
        self.strike_client_for(now, client, 1);
    }

    /// `strike_client`, adding `strikes` strikes at once.
    fn strike_client_for(&mut self, now: Millis, client: ClientId, strikes: u32) {
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
        p.strikes = if forgiven {
            strikes
        } else {
            p.strikes.saturating_add(strikes)
        };
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
