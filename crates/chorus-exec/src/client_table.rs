//! Exactly-once execution per `(client, request seq)` (DESIGN §4 "Requests").
//!
//! Every decision is taken when a request is *submitted*, in delivery order,
//! never when it finishes executing. Under the parallel executor requests
//! finish in an order that differs between replicas; deciding at submission
//! keeps the decision a pure function of the delivered sequence, so every
//! correct replica decides the same (PBFT §4.1 "the replica records the last
//! reply sent to each client" — generalised here to a window of seqs, because
//! a Chorus client may pipeline requests that different lanes order out of
//! sequence).
//!
//! Per client the table keeps:
//! - `low`: every seq `<= low` has been admitted for execution;
//! - `above`: the admitted seqs `> low` (at most `max_inflight - 1` of them:
//!   `low + 1` is never in it, and nothing beyond `low + max_inflight` is admitted);
//! - `replies`: the replies of the highest [`REPLY_CACHE_PER_CLIENT`] admitted
//!   seqs (so the latest one is always kept). A slot is `Pending` from
//!   admission until the executor reports the result.
//!
//! Client seqs start at 1 (0 is reserved and rejected). A client that jumps more
//! than `max_inflight` past its lowest unexecuted seq is rejected — the same way
//! on every replica — and may retry the request later.
//!
//! The number of clients is bounded by the cluster configuration: requests
//! reach the executor only after their authenticator was checked against it.

use bytes::Bytes;
use chorus_core::Assignments;
use chorus_core::{ClientId, Digest, RequestSeq};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Default bound on how far a client may run ahead of its lowest unexecuted seq.
pub const DEFAULT_MAX_INFLIGHT_PER_CLIENT: u32 = 1024;
/// Replies kept per client for re-sending to duplicates (the highest seqs win).
pub const REPLY_CACHE_PER_CLIENT: usize = 64;
/// Upper bound on `max_inflight_per_client`, so one client's entry stays small.
pub const MAX_INFLIGHT_LIMIT: u32 = 1 << 20;

/// Why a request was refused without executing it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum RejectKind {
    /// Request seq 0 is reserved: client seqs start at 1.
    ZeroSeq,
    /// The seq was already used by this client for a request with another
    /// digest (a clock stepped back, or two processes sharing a client key):
    /// answering with the first request's result would answer the wrong question.
    SeqReused,
}

impl RejectKind {
    /// Stable text, part of the (replicated, compared) error result.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectKind::ZeroSeq => "request seq 0 is reserved",
            RejectKind::SeqReused => "request seq already used for a different request",
        }
    }
}

/// What a cached reply slot holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CachedReply {
    /// The original has executed; re-send this.
    Ready(Bytes),
    /// The original was admitted but has not finished executing yet.
    Pending,
    /// The reply was evicted from the cache: nothing to re-send.
    Forgotten,
}

/// What the table knows about a request a client (re)sent, so the replica
/// can answer it without ordering it again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplyLookup {
    /// Not admitted yet: order it.
    Unknown,
    /// Admitted, still executing: its reply is on the way.
    Pending,
    /// Executed: re-send this reply (PBFT §4.1).
    Ready(Bytes),
    /// Counted as executed but no reply is left to send: the window slid
    /// past it (the client ran more than `max_inflight` seqs ahead, so the
    /// table treats it as abandoned), or its reply was evicted from the
    /// cache. It will never execute; the client must be told so
    /// (`chorus_core::REJECT_ABANDONED`), not left retransmitting into silence.
    Gone,
}

/// The decision for one delivered request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Execute it; the table already counts it as executed.
    Fresh,
    /// Already executed (or admitted): do not execute again.
    Duplicate(CachedReply),
    /// Refused deterministically; answer with an error result.
    Rejected(RejectKind),
}

/// Counters (not part of the replicated state or its digest).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableStats {
    pub fresh: u64,
    pub duplicates: u64,
    pub duplicates_forgotten: u64,
    pub rejected_zero_seq: u64,
    pub rejected_seq_reused: u64,
    /// Times a client jumped past its window and the window slid forward.
    pub window_slides: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct ClientEntry {
    low: u64,
    above: BTreeSet<u64>,
    /// The highest admitted seqs' replies, each with its request's digest:
    /// one map, so admitting, evicting and answering a seq is one tree
    /// operation each (a second map of digests that followed this one's
    /// evictions doubled them, ~5 % of a backup's CPU at peak).
    replies: BTreeMap<u64, Cached>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Cached {
    /// `None` = pending.
    reply: Option<Bytes>,
    /// The digest of the request admitted under this seq, when admitted
    /// through [`ClientTable::admit_request`].
    digest: Option<Digest>,
}

impl ClientEntry {
    fn is_admitted(&self, seq: u64) -> bool {
        seq <= self.low || self.above.contains(&seq)
    }
}

/// The exactly-once table. Part of the executor's snapshot and state digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientTable {
    max_inflight: u32,
    clients: BTreeMap<ClientId, ClientEntry>,
    pending: usize,
    stats: TableStats,
    /// RCC §III-E: the instance assignments of switched clients (replicated
    /// state, carried in the snapshot; see `crate::switch`).
    switches: Assignments,
    /// Issue 17: the agreed time of the last delivered batch (see
    /// `agree_time`); replicated state, carried in the snapshot and covered
    /// by the state digest like `switches`.
    agreed_time_ms: u64,
}

/// The canonical, serialisable form of the table (no pending slots).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSnapshot {
    pub clients: Vec<ClientSnapshot>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientSnapshot {
    pub client: ClientId,
    pub low: u64,
    /// Strictly increasing, each in `low + 2 ..= low + max_inflight`.
    pub above: Vec<u64>,
    /// Strictly increasing seqs, each admitted, at most `REPLY_CACHE_PER_CLIENT`.
    pub replies: Vec<(u64, Bytes)>,
    /// Request digests of cached replies: strictly increasing seqs, each in `replies`.
    pub digests: Vec<(u64, Digest)>,
}

impl Default for ClientTable {
    fn default() -> Self {
        ClientTable::new(DEFAULT_MAX_INFLIGHT_PER_CLIENT)
    }
}

impl ClientTable {
    /// `max_inflight_per_client` is clamped to `1..=MAX_INFLIGHT_LIMIT`; it must
    /// be the same on every replica (it decides rejections).
    pub fn new(max_inflight_per_client: u32) -> ClientTable {
        ClientTable {
            max_inflight: max_inflight_per_client.clamp(1, MAX_INFLIGHT_LIMIT),
            clients: BTreeMap::new(),
            pending: 0,
            stats: TableStats::default(),
            switches: Assignments::default(),
            agreed_time_ms: 0,
        }
    }

    /// The agreed time of the batch delivered next, given its proposer's
    /// time: `max(previous agreed, batch time)`. Monotone by construction;
    /// bounded above by correct clocks plus `max_clock_skew_ms` (backups
    /// refuse batches from further ahead), so a Byzantine leader can only
    /// hold it back, never push it on. Call once per delivered batch, in
    /// delivery order, before its requests run.
    pub fn agree_time(&mut self, batch_time_ms: u64) -> u64 {
        self.agreed_time_ms = self.agreed_time_ms.max(batch_time_ms);
        self.agreed_time_ms
    }

    /// The agreed time of the last delivered batch (0 before any had a time).
    pub fn agreed_time(&self) -> u64 {
        self.agreed_time_ms
    }

    pub(crate) fn set_agreed_time(&mut self, ms: u64) {
        self.agreed_time_ms = ms;
    }

    pub fn switches(&self) -> &Assignments {
        &self.switches
    }

    pub(crate) fn switches_mut(&mut self) -> &mut Assignments {
        &mut self.switches
    }

    pub(crate) fn set_switches(&mut self, switches: Assignments) {
        self.switches = switches;
    }

    pub fn max_inflight(&self) -> u32 {
        self.max_inflight
    }

    pub fn stats(&self) -> &TableStats {
        &self.stats
    }

    /// Number of admitted requests whose reply slot is still pending.
    pub fn pending(&self) -> usize {
        self.pending
    }

    pub fn client_count(&self) -> usize {
        self.clients.len()
    }

    /// Has `(client, seq)` been admitted for execution?
    /// The cached reply of an executed request, if still cached (PBFT §4.1:
    /// a retransmitted request is answered with the reply it already got).
    pub fn cached_reply(&self, client: ClientId, seq: RequestSeq) -> Option<Bytes> {
        self.clients.get(&client)?.replies.get(&seq.0)?.reply.clone()
    }

    /// Digest of the request admitted as `(client, seq)`, while its reply is cached.
    pub fn request_digest(&self, client: ClientId, seq: RequestSeq) -> Option<Digest> {
        self.clients.get(&client)?.replies.get(&seq.0)?.digest
    }

    /// [`ClientTable::admit`], remembering the request's digest: a later
    /// request under the same seq with another digest is rejected
    /// ([`RejectKind::SeqReused`]) instead of getting the first one's reply.
    pub fn admit_request(&mut self, client: ClientId, seq: RequestSeq, digest: Digest) -> Admission {
        if self.request_digest(client, seq).is_some_and(|d| d != digest) {
            self.stats.rejected_seq_reused += 1;
            return Admission::Rejected(RejectKind::SeqReused);
        }
        self.admit_with(client, seq, Some(digest))
    }

    /// Everything a replica needs to answer a client's (re)transmission.
    pub fn lookup(&self, client: ClientId, seq: RequestSeq) -> ReplyLookup {
        let Some(e) = self.clients.get(&client) else {
            return ReplyLookup::Unknown;
        };
        if seq.0 == 0 || !e.is_admitted(seq.0) {
            return ReplyLookup::Unknown;
        }
        match e.replies.get(&seq.0).map(|c| &c.reply) {
            Some(Some(r)) => ReplyLookup::Ready(r.clone()),
            Some(None) => ReplyLookup::Pending,
            None => ReplyLookup::Gone,
        }
    }

    pub fn is_executed(&self, client: ClientId, seq: RequestSeq) -> bool {
        self.clients.get(&client).is_some_and(|e| e.is_admitted(seq.0))
    }

    /// The lowest seq of `client` that has not been admitted yet minus one.
    pub fn low(&self, client: ClientId) -> u64 {
        self.clients.get(&client).map_or(0, |e| e.low)
    }

    /// Decide what to do with the next delivered request. Must be called in
    /// delivery order; a `Fresh` request is from now on counted as executed.
    pub fn admit(&mut self, client: ClientId, seq: RequestSeq) -> Admission {
        self.admit_with(client, seq, None)
    }

    fn admit_with(&mut self, client: ClientId, seq: RequestSeq, digest: Option<Digest>) -> Admission {
        let seq = seq.0;
        if seq == 0 {
            self.stats.rejected_zero_seq += 1;
            return Admission::Rejected(RejectKind::ZeroSeq);
        }
        let max_inflight = u64::from(self.max_inflight);
        if let Some(e) = self.clients.get(&client) {
            if e.is_admitted(seq) {
                self.stats.duplicates += 1;
                let cached = match e.replies.get(&seq).map(|c| &c.reply) {
                    Some(Some(r)) => CachedReply::Ready(r.clone()),
                    Some(None) => CachedReply::Pending,
                    None => {
                        self.stats.duplicates_forgotten += 1;
                        CachedReply::Forgotten
                    }
                };
                return Admission::Duplicate(cached);
            }
        }
        let e = self.clients.entry(client).or_default();
        if seq - e.low > max_inflight {
            // The client moved past its window: it starts its sequence numbers
            // anywhere (a restarted client continues from the clock) and never
            // has more than `max_inflight` requests outstanding, so everything
            // at or below `seq - max_inflight` is abandoned. Slide the window
            // deterministically; those old seqs now count as executed, which
            // keeps exactly-once and keeps the table bounded.
            self.stats.window_slides += 1;
            e.low = seq - max_inflight;
            while e.above.first().is_some_and(|&s| s <= e.low + 1) {
                let s = e.above.pop_first().unwrap_or_default();
                e.low = e.low.max(s);
            }
        }
        if seq == e.low + 1 {
            e.low = seq;
            // Close the gap: seqs admitted earlier out of order become contiguous.
            while e.above.first() == Some(&(e.low + 1)) {
                e.above.pop_first();
                e.low += 1;
            }
        } else {
            e.above.insert(seq);
        }
        debug_assert!(e.above.len() < max_inflight as usize);
        debug_assert!(e.above.first().into_iter().all(|&s| s > e.low + 1));
        e.replies.insert(seq, Cached { reply: None, digest });
        self.pending += 1;
        if e.replies.len() > REPLY_CACHE_PER_CLIENT {
            // Evict the lowest seq: the latest reply is always kept.
            if let Some((_, slot)) = e.replies.pop_first() {
                if slot.reply.is_none() {
                    self.pending -= 1;
                }
            }
        }
        self.stats.fresh += 1;
        Admission::Fresh
    }

    /// Record the reply of an admitted request. Returns false (and changes
    /// nothing) if its slot was already evicted or already filled.
    pub fn complete(&mut self, client: ClientId, seq: RequestSeq, reply: Bytes) -> bool {
        let Some(e) = self.clients.get_mut(&client) else {
            return false;
        };
        match e.replies.get_mut(&seq.0).map(|c| &mut c.reply) {
            Some(slot @ None) => {
                *slot = Some(reply);
                self.pending -= 1;
                true
            }
            _ => false,
        }
    }

    /// The canonical form. Panics if a reply is still pending: snapshots are
    /// only taken at a barrier, once everything submitted has executed.
    pub fn to_snapshot(&self) -> TableSnapshot {
        assert_eq!(self.pending, 0, "client table snapshot with pending replies");
        let clients = self
            .clients
            .iter()
            .map(|(&client, e)| ClientSnapshot {
                client,
                low: e.low,
                above: e.above.iter().copied().collect(),
                replies: e
                    .replies
                    .iter()
                    .map(|(&s, c)| (s, c.reply.clone().expect("no pending replies at a barrier")))
                    .collect(),
                digests: e
                    .replies
                    .iter()
                    .filter_map(|(&s, c)| Some((s, c.digest?)))
                    .collect(),
            })
            .collect();
        TableSnapshot { clients }
    }

    /// Rebuild a table from its canonical form, checking every invariant
    /// (the snapshot may come from another replica).
    pub fn from_snapshot(
        s: &TableSnapshot,
        max_inflight_per_client: u32,
    ) -> Result<ClientTable, &'static str> {
        let mut t = ClientTable::new(max_inflight_per_client);
        let max_inflight = u64::from(t.max_inflight);
        let mut prev: Option<ClientId> = None;
        for c in &s.clients {
            if prev.is_some_and(|p| p >= c.client) {
                return Err("client entries not strictly increasing");
            }
            prev = Some(c.client);
            if !strictly_increasing(c.above.iter().copied()) {
                return Err("admitted seqs not strictly increasing");
            }
            let in_window = |&s: &u64| s > c.low.saturating_add(1) && s - c.low <= max_inflight;
            if !c.above.iter().all(in_window) {
                return Err("admitted seq outside the client's window");
            }
            if c.replies.len() > REPLY_CACHE_PER_CLIENT {
                return Err("too many cached replies");
            }
            if !strictly_increasing(c.replies.iter().map(|r| r.0)) {
                return Err("cached replies not strictly increasing");
            }
            if !strictly_increasing(c.digests.iter().map(|d| d.0)) {
                return Err("request digests not strictly increasing");
            }
            let mut entry = ClientEntry {
                low: c.low,
                above: c.above.iter().copied().collect(),
                replies: c
                    .replies
                    .iter()
                    .map(|(s, r)| {
                        let cached = Cached {
                            reply: Some(r.clone()),
                            digest: None,
                        };
                        (*s, cached)
                    })
                    .collect(),
            };
            for (s, d) in &c.digests {
                match entry.replies.get_mut(s) {
                    Some(cached) => cached.digest = Some(*d),
                    None => return Err("request digest without a cached reply"),
                }
            }
            if c.replies.iter().any(|(s, _)| *s == 0 || !entry.is_admitted(*s)) {
                return Err("cached reply for a seq never executed");
            }
            t.clients.insert(c.client, entry);
        }
        Ok(t)
    }

    /// Canonical bytes of the table.
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(&self.to_snapshot()).expect("encoding a client table cannot fail")
    }

    /// Digest of the canonical bytes.
    pub fn digest(&self) -> Digest {
        if self.switches.is_empty() {
            return Digest::of_parts("chorus client table v1", &[&self.encode()]);
        }
        Digest::of_parts(
            "chorus client table v2",
            &[&self.encode(), self.switches.digest().as_bytes()],
        )
    }
}

fn strictly_increasing(mut it: impl Iterator<Item = u64>) -> bool {
    let Some(mut prev) = it.next() else {
        return true;
    };
    for x in it {
        if x <= prev {
            return false;
        }
        prev = x;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: ClientId = ClientId(7);

    fn q(s: u64) -> RequestSeq {
        RequestSeq(s)
    }

    /// Issue 8 finding 11: a seq the window slid past is `Gone` (never to
    /// execute), not `Unknown`, so the replica can reject it clearly.
    #[test]
    fn lookup_tells_abandoned_seqs_from_unknown_pending_and_ready() {
        let mut t = ClientTable::new(4);
        assert_eq!(t.lookup(C, q(1)), ReplyLookup::Unknown);
        assert_eq!(t.admit(C, q(1)), Admission::Fresh);
        assert_eq!(t.lookup(C, q(1)), ReplyLookup::Pending);
        assert!(t.complete(C, q(1), Bytes::from_static(b"r1")));
        assert_eq!(t.lookup(C, q(1)), ReplyLookup::Ready(Bytes::from_static(b"r1")));
        // Seq 2 is held back while the client runs ahead to 7: 2 and 3 are
        // abandoned by the window slide.
        assert_eq!(t.admit(C, q(7)), Admission::Fresh);
        assert_eq!(t.lookup(C, q(2)), ReplyLookup::Gone);
        assert_eq!(t.lookup(C, q(3)), ReplyLookup::Gone);
        assert_eq!(t.lookup(C, q(4)), ReplyLookup::Unknown);
        assert_eq!(t.lookup(C, q(0)), ReplyLookup::Unknown);
        assert_eq!(t.lookup(ClientId(8), q(1)), ReplyLookup::Unknown);
    }

    #[test]
    fn in_order_requests_are_fresh_once() {
        let mut t = ClientTable::new(4);
        assert_eq!(t.admit(C, q(1)), Admission::Fresh);
        assert_eq!(t.admit(C, q(1)), Admission::Duplicate(CachedReply::Pending));
        assert!(t.complete(C, q(1), Bytes::from_static(b"r1")));
        assert_eq!(
            t.admit(C, q(1)),
            Admission::Duplicate(CachedReply::Ready(Bytes::from_static(b"r1")))
        );
        assert_eq!(t.low(C), 1);
        assert!(!t.complete(C, q(1), Bytes::from_static(b"again")), "filled once");
    }

    /// Issue 16 finding 5: a reused seq with another request must not get
    /// the first request's reply.
    #[test]
    fn a_reused_seq_with_another_digest_is_rejected_not_answered_from_the_cache() {
        let mut t = ClientTable::new(4);
        let (a, b) = (Digest::of(b"put x 1"), Digest::of(b"put x 2"));
        assert_eq!(t.admit_request(C, q(1), a), Admission::Fresh);
        assert!(t.complete(C, q(1), Bytes::from_static(b"r1")));
        assert_eq!(
            t.admit_request(C, q(1), a),
            Admission::Duplicate(CachedReply::Ready(Bytes::from_static(b"r1")))
        );
        assert_eq!(
            t.admit_request(C, q(1), b),
            Admission::Rejected(RejectKind::SeqReused)
        );
        assert_eq!(t.request_digest(C, q(1)), Some(a));
        assert_eq!(t.stats().rejected_seq_reused, 1);
        // The digests are part of the snapshot and survive a round trip.
        let back = ClientTable::from_snapshot(&t.to_snapshot(), 4).unwrap();
        assert_eq!(back.request_digest(C, q(1)), Some(a));
        assert_eq!(back.digest(), t.digest());
    }

    #[test]
    fn out_of_order_seqs_fill_the_gap() {
        let mut t = ClientTable::new(4);
        assert_eq!(t.admit(C, q(3)), Admission::Fresh);
        assert_eq!(t.admit(C, q(2)), Admission::Fresh);
        assert_eq!(t.low(C), 0);
        assert!(t.is_executed(C, q(3)) && !t.is_executed(C, q(1)));
        assert_eq!(t.admit(C, q(1)), Admission::Fresh);
        assert_eq!(t.low(C), 3);
        assert!(matches!(t.admit(C, q(2)), Admission::Duplicate(_)));
    }

    #[test]
    fn window_slides_when_a_client_jumps_ahead() {
        let mut t = ClientTable::new(4);
        assert_eq!(t.admit(C, q(4)), Admission::Fresh);
        // 10 is more than 4 above low = 0: everything at or below 6 is abandoned.
        assert_eq!(t.admit(C, q(10)), Admission::Fresh);
        assert_eq!(t.low(C), 6);
        assert!(
            matches!(t.admit(C, q(5)), Admission::Duplicate(_)),
            "abandoned seqs never execute later"
        );
        assert_eq!(t.admit(C, q(7)), Admission::Fresh);
        assert_eq!(t.admit(C, q(0)), Admission::Rejected(RejectKind::ZeroSeq));
        assert_eq!(t.stats().window_slides, 1);
        // A restarted client whose seqs start from the clock is accepted at once.
        assert_eq!(t.admit(ClientId(9), q(1_700_000_000_000_000)), Admission::Fresh);
    }

    #[test]
    fn reply_cache_keeps_the_highest_seqs() {
        let mut t = ClientTable::new(1024);
        let n = REPLY_CACHE_PER_CLIENT as u64 + 10;
        for s in 1..=n {
            assert_eq!(t.admit(C, q(s)), Admission::Fresh);
            t.complete(C, q(s), Bytes::from(s.to_le_bytes().to_vec()));
        }
        assert_eq!(t.admit(C, q(1)), Admission::Duplicate(CachedReply::Forgotten));
        assert_eq!(
            t.admit(C, q(n)),
            Admission::Duplicate(CachedReply::Ready(Bytes::from(n.to_le_bytes().to_vec())))
        );
        assert_eq!(t.pending(), 0);
    }

    #[test]
    fn evicting_a_pending_slot_drops_its_later_reply() {
        let mut t = ClientTable::new(1024);
        t.admit(C, q(1));
        for s in 2..=(REPLY_CACHE_PER_CLIENT as u64 + 1) {
            t.admit(C, q(s));
        }
        assert!(!t.complete(C, q(1), Bytes::new()));
        assert_eq!(t.pending(), REPLY_CACHE_PER_CLIENT);
    }

    #[test]
    fn snapshot_roundtrip_and_digest() {
        let mut t = ClientTable::new(8);
        for (c, s) in [(1, 1), (1, 3), (2, 1), (2, 2), (9, 5)] {
            assert_eq!(t.admit(ClientId(c), q(s)), Admission::Fresh);
            t.complete(ClientId(c), q(s), Bytes::from(format!("{c}/{s}")));
        }
        let snap = t.to_snapshot();
        let back = ClientTable::from_snapshot(&snap, 8).unwrap();
        assert_eq!(back.encode(), t.encode());
        assert_eq!(back.digest(), t.digest());
        let mut other = back.clone();
        other.admit(ClientId(3), q(1));
        other.complete(ClientId(3), q(1), Bytes::new());
        assert_ne!(other.digest(), t.digest());
    }

    #[test]
    fn bad_snapshots_are_rejected() {
        let good = ClientSnapshot {
            client: C,
            low: 5,
            above: vec![7],
            replies: vec![(5, Bytes::new()), (7, Bytes::new())],
            digests: vec![(7, Digest::of(b"r7"))],
        };
        let ok = TableSnapshot {
            clients: vec![good.clone()],
        };
        assert!(ClientTable::from_snapshot(&ok, 4).is_ok());
        let cases = [
            ClientSnapshot {
                above: vec![6],
                ..good.clone()
            },
            ClientSnapshot {
                above: vec![10],
                ..good.clone()
            },
            ClientSnapshot {
                above: vec![8, 7],
                ..good.clone()
            },
            ClientSnapshot {
                replies: vec![(8, Bytes::new())],
                ..good.clone()
            },
            ClientSnapshot {
                replies: vec![(0, Bytes::new())],
                ..good.clone()
            },
            ClientSnapshot {
                replies: vec![(7, Bytes::new()), (5, Bytes::new())],
                ..good.clone()
            },
            ClientSnapshot {
                digests: vec![(6, Digest::of(b"no reply for 6"))],
                ..good.clone()
            },
        ];
        for c in cases {
            let s = TableSnapshot {
                clients: vec![c.clone()],
            };
            assert!(ClientTable::from_snapshot(&s, 4).is_err(), "{c:?}");
        }
        let dup = TableSnapshot {
            clients: vec![good.clone(), good],
        };
        assert!(ClientTable::from_snapshot(&dup, 4).is_err());
    }
}
