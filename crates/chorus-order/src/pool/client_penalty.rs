//! Clients proven to send partial MAC vectors are not taken (with MAC
//! vectors) for a long while (Aardvark §4.1, Clement et al. NSDI'09: a
//! client whose requests fail authentication at some replicas is
//! blacklisted).
//!
//! Why it is needed: a client can make its MAC vector valid only at f+1
//! replicas, some of them Byzantine and silent (seeds 9300041, cop n = 7,
//! and 10800016, cop n = 13). A correct replica among those f+1 that
//! proposes the request collects fewer than f+1 vouchers (`lane/normal.rs`),
//! the other backups hold the pre-prepare, and the lane changes view; the
//! client retransmits and the next correct replica of its valid set
//! proposes it again, with doubling timeouts, for ever.
//!
//! The proof: a backup that holds a pre-prepare for vouchers reports the
//! requests that failed at it (`ReplicaMsg::Unverifiable`). f+1 distinct
//! reports about a request we hold exactly as the client sent it to us
//! (same content, same authenticator, verified here) mean a correct replica
//! could not verify the client's own vector, which a correct client never
//! sends. A Byzantine leader cannot forge that proof against a correct
//! client: a request it altered (content or MACs) is not the one we hold,
//! and f Byzantine reporters are one short. So only proven clients are
//! penalised; an ordinary view change strikes nobody (a review found that
//! striking the clients of every voided proposal let Byzantine leaders
//! escalate penalties against correct clients). Signed requests are never
//! refused: a signature verifies everywhere or nowhere (the client's way
//! out is `client_auth = "signature"`).

use super::{Key, Pool, State};
use chorus_core::{Authenticator, ClientId, Millis, ReplicaId, Request, UnverifiableRequest};

/// A proven client is refused for 2^6 view-change timeouts (128 s with the
/// default 2 s), the longest leader penalty (`lane::penalty`), doubling
/// with each repeat within the forgiveness time.
const CLIENT_PENALTY_SHIFT: u32 = 6;
const MAX_CLIENT_PENALTY_SHIFT: u32 = 12;

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
    /// Is `req`'s client proven partial, and `req` a MAC-vector request, at
    /// `now`?
    pub(super) fn mac_vectors_refused(&self, now: Millis, req: &Request) -> bool {
        matches!(req.auth, Authenticator::Macs(_))
            && !req.is_reprediction()
            && self
                .client_penalties
                .get(&req.client)
                .is_some_and(|p| now < p.until)
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
        // A repeated report costs no hashing.
        if self.unverifiable.get(&key).is_some_and(|s| s.contains(&from)) {
            return false;
        }
        let Some(e) = self.entries.get_mut(&key) else {
            return false;
        };
        if !e.verified_here || !matches!(e.req.auth, Authenticator::Macs(_)) || e.req.is_reprediction() {
            return false;
        }
        // Hashed once per held request, not once per report: reports with
        // other digests are never stored, so without the cache each one a
        // Byzantine replica sends (~100 bytes) cost hashing the whole
        // operation (up to `max_op_bytes`) and encoding its MAC vector.
        let (content, auth) = e.report_digests.get(&e.req);
        if content != hint.content || auth != hint.auth {
            return false;
        }
        if self.unverifiable.len() >= self.max_requests && !self.unverifiable.contains_key(&key) {
            return false;
        }
        let senders = self.unverifiable.entry(key).or_default();
        senders.insert(from);
        if senders.len() <= f {
            return false;
        }
        self.unverifiable.remove(&key);
        self.strike_client(now, hint.client);
        self.remove_entry(key);
        true
    }

    /// `client` is proven partial: refuse its MAC-vector requests, and drop
    /// the pending ones (in flight ones leave when their cell ends:
    /// `release_key`).
    fn strike_client(&mut self, now: Millis, client: ClientId) {
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
        let shift = CLIENT_PENALTY_SHIFT
            .saturating_add(p.strikes - 1)
            .min(MAX_CLIENT_PENALTY_SHIFT);
        p.length = base.saturating_mul(1 << shift);
        p.until = now.plus(p.length);
        let from = (client, chorus_core::RequestSeq(0));
        let to = (client, chorus_core::RequestSeq(u64::MAX));
        let pending: Vec<Key> = self
            .entries
            .range(from..=to)
            .filter(|(_, e)| {
                // SAREK: a request handed over by another partition stays.
                let handed_over = self.fixed_lane.is_some() && !e.verified_here;
                e.state == State::Pending && matches!(e.req.auth, Authenticator::Macs(_)) && !handed_over
            })
            .map(|(k, _)| *k)
            .collect();
        for k in pending {
            self.remove_entry(k);
        }
        debug_assert!(
            self.client_penalties.len() <= self.cfg.clients.len() + 1,
            "client penalties are bounded by the configured clients"
        );
    }

    /// How many strikes `client` has (for tests and status).
    pub fn client_strikes(&self, client: ClientId) -> u32 {
        self.client_penalties.get(&client).map_or(0, |p| p.strikes)
    }
}
