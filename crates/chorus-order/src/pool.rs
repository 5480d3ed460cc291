//! The request pool (DESIGN §4): verified client requests waiting to be
//! ordered, one queue per owner lane.
//!
//! * Admission verifies the authenticator, so a request that failed
//!   authentication is never proposed; a full pool answers `Busy`.
//! * A request seen in a pre-prepare is *in flight* at that cell: the next
//!   leader does not propose it again. It leaves the pool when its cell is
//!   decided, and becomes proposable again if the cell ends as something else
//!   (a no-op, or another batch after a view change) — except MAC-vector
//!   requests of our own proposals voided by a view change, which are
//!   dropped until retransmitted (see `release_from`); and clients proven
//!   to send partial MAC vectors are refused for a while (`client_penalty.rs`).
//! * The pool does not decide exactly-once; the executor's client table does.
//!   It only avoids proposing what it knows is ordered already.

use crate::io::RejectReason;
use crate::verify::{RequestVerifier, VerifiedHint};
use chorus_core::seq_window::SeqWindow;
use chorus_core::{
    switch_target, Authenticator, Batch, Cell, ClientId, ClusterConfig, Identity, LaneId, Millis,
    OrderingMode, ReplicaId, Request, RequestSeq, Slot, REPREDICTION_CLIENT,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

mod client_penalty;
mod dispel_cut;
mod dispel_standin;

type Key = (ClientId, RequestSeq);

/// `dispel`: how our proposals of one reported MAC-vector request may be
/// decided without it before we stop proposing it (`voided_for_good`):
/// each loss weighs `Void::BeforeDelivery` (2: our bit decided 0 before our
/// INIT gathered 2f+1 echoes, what a refused INIT does for ever) or
/// `Void::AfterDelivery` (1: a late INIT, or a Byzantine replica timing
/// its echoes to deliver ours just before the decision), and it goes at 4.
/// A partial request costs at most two epochs of ours per retransmission,
/// four under a timing adversary; a correct one that a Byzantine replica
/// reports is dropped only after losses weighing 4 over the entry's life
/// (two before delivery, or four after, or a mix).
pub const VOID_WEIGHT_BEFORE_DROP: u8 = 4;

/// How one lost epoch of ours counts (`Pool::on_decided_counting_voids`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Void {
    /// Not ours to judge (PBFT lanes: `release_from` voids our proposals).
    None,
    /// Our broadcast had delivered when our bit decided 0.
    AfterDelivery,
    /// Our bit decided 0 before our broadcast delivered.
    BeforeDelivery,
}

impl Void {
    fn weight(self) -> u8 {
        match self {
            Void::None => 0,
            Void::AfterDelivery => 1,
            Void::BeforeDelivery => 2,
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum State {
    Pending,
    InFlight(Cell),
}

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
struct Entry {
    req: Request,
    lane: LaneId,
    arrived: Millis,
    state: State,
    /// Admitted from the client with its authenticator checked here (not
    /// learnt from a pre-prepare or another lane).
    verified_here: bool,
    /// `dispel`: the weight of our own proposals of it that were decided
    /// without it after a replica reported it unverifiable (`Void`,
    /// `voided_for_good`).
    voided: u8,
    /// Its content and authenticator digests, computed at the first
    /// `Unverifiable` report about it (`note_unverifiable`).
    report_digests: DigestCache,
}

/// Digests computed on demand and kept. Not protocol state: `Debug` (which
/// the fuzz tests compare before and after a rejected message) omits it.
#[derive(Default)]
#[cfg_attr(test, derive(Clone))]
struct DigestCache {
    digests: Option<(chorus_core::Digest, chorus_core::Digest)>,
    /// How often `get` hashed (tests).
    #[cfg(test)]
    hashed: u32,
}

impl DigestCache {
    fn get(&mut self, req: &Request) -> (chorus_core::Digest, chorus_core::Digest) {
        if let Some(d) = self.digests {
            return d;
        }
        #[cfg(test)]
        {
            self.hashed += 1;
        }
        *self.digests.insert((req.digest(), req.auth_digest()))
    }
}

impl std::fmt::Debug for DigestCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("_")
    }
}

#[derive(Default, Clone, Copy, Debug)]
struct Load {
    count: usize,
    bytes: usize,
}

/// Whether a leader should cut a batch now.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// Nothing pending for the lane.
    Empty,
    /// A full batch is waiting, or the oldest request waited `batch_delay_ms`.
    Ready,
    /// A partial batch becomes ready at this time.
    WaitUntil(Millis),
}

/// What admission did with a request.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Admitted {
    New,
    /// Already pending, in flight, or recently ordered: nothing to do.
    Duplicate,
}

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub struct Pool {
    cfg: Arc<ClusterConfig>,
    verifier: RequestVerifier,
    /// Boxed: a B-tree node moves its values on every insert and remove,
    /// and an `Entry` is a few hundred bytes (the pool's `memmove`s were a
    /// visible part of a backup's profile at peak, `benches/pool_backup.rs`).
    entries: Tracked<BTreeMap<Key, Box<Entry>>>,
    /// Pending keys per lane in arrival order. May hold stale keys (entries
    /// that left `Pending`); they are skipped when met.
    queues: Tracked<Vec<VecDeque<Key>>>,
    /// Per lane, `oldest_pending`'s answer and the `entries` and `queues`
    /// versions it was computed at. Asked for every lane after every event
    /// (`refresh_timers`): at n = 61 in rcc that was 61 B-tree lookups per
    /// event, a quarter of a simulated run; most events (votes) leave the
    /// pool alone.
    oldest: OldestCache,
    load: Vec<Load>,
    per_client: BTreeMap<ClientId, u32>,
    in_flight: BTreeMap<Cell, Vec<Key>>,
    /// Per client, the seqs ordered recently (its last `seq_window::WINDOW`
    /// seqs), so a late retransmission is not proposed again. One window
    /// per configured client at most (`remember_ordered`); a client's
    /// flood of seqs forgets only its own.
    ordered: BTreeMap<ClientId, SeqWindow>,
    /// Ordered keys of clients without a window, exactly (bounded FIFO of
    /// `pool_max_requests`): SAREK's re-prediction pseudo-client, whose
    /// seqs are hashes, not a rising count a window could hold.
    ordered_keys: BTreeSet<Key>,
    ordered_keys_fifo: VecDeque<Key>,
    /// Per client, the lowest seq answered "busy" and when it was last
    /// refused. While it waits, the client's later seqs are refused too, so
    /// the space the client frees goes to its oldest request first and a
    /// retransmitted request is not starved by the same client's newer ones
    /// (which would let the client table's window slide past it). Bounded by
    /// the configured clients.
    busy_waiting: BTreeMap<ClientId, (RequestSeq, Millis)>,
    /// Cells we cut a batch for (our own proposals), until decided or voided.
    own: BTreeSet<Cell>,
    /// RCC §III-E: clients whose owner lane a delivered SWITCHINSTANCE
    /// changed (`reassign`); bounded by the configured clients.
    owner_override: BTreeMap<ClientId, LaneId>,
    /// `dispel`: proposers that look silent, per lane (`dispel_standin.rs`):
    /// their clients' requests wait in stand-in lanes.
    silent: Vec<bool>,
    /// `sarek`: this pool serves one partition's lane only (`sarek::SarekPools`),
    /// and PREDICT() says which requests that lane may order.
    fixed_lane: Option<LaneId>,
    predictor: Option<crate::sarek::Predictor>,
    /// Clients whose MAC-vector requests stalled our proposals
    /// (`client_penalty.rs`); bounded by the configured clients.
    client_penalties: BTreeMap<ClientId, client_penalty::ClientPenalty>,
    /// Per held request, the replicas that reported it unverifiable at them
    /// (`ReplicaMsg::Unverifiable`); bounded by `pool_max_requests`.
    unverifiable: BTreeMap<Key, BTreeSet<ReplicaId>>,
    /// Requests held at most (`with_share`).
    max_requests: usize,
}

/// A value with a version that every mutable borrow increments (whether
/// or not it then changes anything), so derived answers can be cached
/// without listing every place that writes it. `Debug` shows the value only.
#[cfg_attr(test, derive(Clone))]
struct Tracked<T> {
    inner: T,
    version: u64,
}

impl<T> Tracked<T> {
    fn new(inner: T) -> Tracked<T> {
        Tracked { inner, version: 0 }
    }
}

impl<T> std::ops::Deref for Tracked<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> std::ops::DerefMut for Tracked<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.version = self.version.wrapping_add(1);
        &mut self.inner
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Tracked<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

/// `Pool::oldest`: derived state, left out of `Debug` (which the fuzz tests
/// compare before and after a rejected message).
type OldestAnswer = Option<((u64, u64), Option<Millis>)>;

#[cfg_attr(test, derive(Clone))]
struct OldestCache(Vec<OldestAnswer>);

impl std::fmt::Debug for OldestCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("_")
    }
}

/// A client's busy seq that is not retransmitted for this long no longer
/// holds back its later seqs (the client gave up on it). Clients retransmit
/// far more often (the library's and the simulator's back-off caps are a
/// few seconds).
pub const BUSY_WAIT_FORGET_MS: u64 = 10_000;

impl Pool {
    pub fn new(cfg: Arc<ClusterConfig>, me: ReplicaId, identity: Identity) -> Pool {
        let lanes = cfg.lanes() as usize;
        let cfg_max_requests = cfg.params.pool_max_requests as usize;
        Pool {
            verifier: RequestVerifier::new(cfg.clone(), me, identity),
            cfg,
            entries: Tracked::new(BTreeMap::new()),
            queues: Tracked::new((0..lanes).map(|_| VecDeque::new()).collect()),
            oldest: OldestCache(vec![None; lanes]),
            load: vec![Load::default(); lanes],
            per_client: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            ordered: BTreeMap::new(),
            ordered_keys: BTreeSet::new(),
            ordered_keys_fifo: VecDeque::new(),
            busy_waiting: BTreeMap::new(),
            own: BTreeSet::new(),
            owner_override: BTreeMap::new(),
            silent: vec![false; lanes],
            fixed_lane: None,
            predictor: None,
            client_penalties: BTreeMap::new(),
            unverifiable: BTreeMap::new(),
            max_requests: cfg_max_requests,
        }
    }

    /// A pool holding `1 / shares` of the replica's requests: one lane
    /// group's (`replica/group.rs`), so the replica's pools together hold
    /// at most `max(pool_max_requests, shares)` requests whatever the number
    /// of groups. A client's requests all wait in its owner lane's group,
    /// so the per-client bound is unchanged. The memory of ordered requests
    /// (`ordered`) is per client, not shared out: forgetting them sooner
    /// lets a retransmission be proposed again (the `cop_tiny_pool_*`
    /// regressions).
    pub fn with_share(cfg: Arc<ClusterConfig>, me: ReplicaId, identity: Identity, shares: usize) -> Pool {
        let mut p = Pool::new(cfg, me, identity);
        p.max_requests = (p.max_requests / shares.max(1)).max(1);
        p
    }

    /// Requests this pool may hold (`pool_max_requests`, or a group's share).
    #[cfg(test)]
    pub(crate) fn max_requests(&self) -> usize {
        self.max_requests
    }

    /// The lane a request waits in: a switch in its target, any other in its
    /// client's owner (`crate::rcc_switch::request_lane`).
    fn lane_for(&self, req: &Request) -> LaneId {
        if let Some(lane) = self.fixed_lane {
            return lane;
        }
        if self.cfg.params.mode == OrderingMode::Rcc {
            if let Some(j) = switch_target(req).filter(|j| *j < self.cfg.lanes()) {
                return LaneId(j);
            }
        }
        let owner = self
            .owner_override
            .get(&req.client)
            .copied()
            .unwrap_or_else(|| self.cfg.owner_lane(req.client));
        self.stand_in(req.client, owner)
    }

    /// RCC §III-E: a delivered switch made `lane` the owner of `client`: its
    /// held requests (switches excepted) move to that lane's queue.
    pub fn reassign(&mut self, client: ClientId, lane: LaneId) {
        if lane == self.cfg.owner_lane(client) {
            self.owner_override.remove(&client);
        } else {
            self.owner_override.insert(client, lane);
        }
        let from = (client, RequestSeq(0));
        let to = (client, RequestSeq(u64::MAX));
        let mut moved = Vec::new();
        for (k, e) in self.entries.range_mut(from..=to) {
            if e.req.is_switch() || e.lane == lane {
                continue;
            }
            let old = e.lane;
            e.lane = lane;
            if e.state == State::Pending {
                moved.push((*k, old, e.req.op.len()));
            }
        }
        for (k, old, len) in moved {
            // The key left behind in the old queue is skipped (lane differs).
            self.sub_load(old, len);
            self.add_load(lane, len);
            self.queues[lane.index()].push_back(k);
        }
    }

    /// The client's pending requests in `lane` start waiting anew at `now`
    /// (RCC §III-E: the new owner may not propose them yet).
    pub fn restart_wait(&mut self, client: ClientId, lane: LaneId, now: Millis) {
        let from = (client, RequestSeq(0));
        let to = (client, RequestSeq(u64::MAX));
        for (_, e) in self.entries.range_mut(from..=to) {
            if e.state == State::Pending && e.lane == lane && !e.req.is_switch() {
                e.arrived = e.arrived.max(now);
            }
        }
    }

    /// Replace every owner override (after a state transfer).
    pub fn reset_owners(&mut self, owners: impl IntoIterator<Item = (ClientId, LaneId)>) {
        self.owner_override = owners.into_iter().collect();
    }

    /// A pool whose every request is owned by `lane` (SAREK: one pool per
    /// partition lane, a cross-partition request held by each involved one).
    pub fn for_lane(cfg: Arc<ClusterConfig>, me: ReplicaId, identity: Identity, lane: LaneId) -> Pool {
        assert!(lane.0 < cfg.lanes(), "no such lane");
        let mut p = Pool::new(cfg, me, identity);
        p.fixed_lane = Some(lane);
        p
    }

    pub fn set_predictor(&mut self, p: crate::sarek::Predictor) {
        self.predictor = Some(p);
    }

    /// Take a request another lane decided (already verified there) as
    /// pending, unless it is known, recently ordered or the pool is full.
    /// SAREK §IV-B 1: a cross-partition request must be ordered by every
    /// predicted partition, so once one partition ordered it the others'
    /// leaders must have it even if the client's copy never reached them.
    pub fn adopt(&mut self, now: Millis, req: &Request) -> bool {
        self.adopt_as(now, req, false)
    }

    /// Check a client request's authenticator at this replica (what
    /// `admit` does for a new one), without admitting it.
    pub fn verify(&mut self, req: &Request) -> Result<(), RejectReason> {
        self.verifier.check(req)
    }

    /// `adopt` for a request this replica verified itself (another
    /// partition's group admitted the client's copy, SAREK §IV-B 1): as
    /// vouched for as one admitted here, and bound by the same limits as
    /// an adopted one (no busy answer: the client is not talking to us).
    pub fn adopt_verified(&mut self, now: Millis, req: &Request) -> bool {
        self.adopt_as(now, req, true)
    }

    fn adopt_as(&mut self, now: Millis, req: &Request, verified_here: bool) -> bool {
        let key = (req.client, req.seq);
        if verified_here {
            // The client's own copy, as if it had reached this pool: it
            // proves a held copy checked here (so the pool's reports can
            // prove a partial MAC vector), and a client that waits out a
            // penalty here is refused (Aardvark §4.1), as `admit` would.
            if self.entries.contains_key(&key) {
                self.note_from_client(req, false);
                return false;
            }
        }
        if self.adopt_refusal(now, req, verified_here).is_some() || self.knows(req) {
            return false;
        }
        let lane = self.lane_for(req);
        self.insert(key, req.clone(), lane, now, State::Pending, verified_here);
        true
    }

    /// Whether the pool holds `req` or ordered it recently.
    pub fn knows(&self, req: &Request) -> bool {
        let key = (req.client, req.seq);
        self.entries.contains_key(&key) || self.is_ordered(key)
    }

    /// Why `adopt` (`verified_here`: `adopt_verified`) refuses `req` for
    /// other reasons than holding or having ordered it already: the pool or
    /// the client's share of it is full, or the client waits out an
    /// Aardvark penalty here. A caller counts it (`ToGroup::ForLane`).
    pub fn adopt_refusal(&self, now: Millis, req: &Request, verified_here: bool) -> Option<&'static str> {
        if verified_here && self.mac_vectors_refused(now, req) {
            return Some("client-penalised");
        }
        let full = self.entries.len() >= self.max_requests
            // Re-predictions share one pseudo-client (`REPREDICTION_CLIENT`)
            // and are bounded by the suspended requests, not by its share.
            || (!req.is_reprediction()
                && self.per_client.get(&req.client).copied().unwrap_or(0) >= self.cfg.params.pool_max_per_client);
        full.then_some("pool-full")
    }

    /// Requests held (pending and in flight).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Requests of `lane` in flight (in an undecided pre-prepare), and the
    /// lowest and highest slot they sit at.
    pub fn in_flight_summary(&self, lane: LaneId) -> (usize, Option<Slot>, Option<Slot>) {
        let from = Cell { lane, slot: Slot(0) };
        let to = Cell {
            lane,
            slot: Slot(u64::MAX),
        };
        let mut n = 0;
        let (mut lo, mut hi) = (None, None);
        for (c, keys) in self.in_flight.range(from..=to) {
            let live = keys
                .iter()
                .filter(|k| {
                    self.entries
                        .get(k)
                        .is_some_and(|e| e.state == State::InFlight(*c))
                })
                .count();
            if live > 0 {
                n += live;
                lo = lo.or(Some(c.slot));
                hi = Some(c.slot);
            }
        }
        (n, lo, hi)
    }

    /// Requests in flight at a slot of `lane` below `decided_below`, i.e. at a
    /// decided slot: no decision will ever take them out of flight (a leak;
    /// must be 0).
    pub fn in_flight_at_decided(&self, lane: LaneId, decided_below: Slot) -> usize {
        let from = Cell { lane, slot: Slot(0) };
        let to = Cell {
            lane,
            slot: decided_below,
        };
        self.in_flight
            .range(from..to)
            .map(|(c, keys)| {
                keys.iter()
                    .filter(|k| {
                        self.entries
                            .get(k)
                            .is_some_and(|e| e.state == State::InFlight(*c))
                    })
                    .count()
            })
            .sum()
    }

    /// Entries in flight whose cell does not list them (must be 0).
    pub fn orphaned_in_flight(&self) -> usize {
        self.entries
            .iter()
            .filter(|(k, e)| match e.state {
                State::InFlight(c) => !self.in_flight.get(&c).is_some_and(|ks| ks.contains(k)),
                State::Pending => false,
            })
            .count()
    }

    /// Requests of `lane` that may be proposed.
    pub fn pending_len(&self, lane: LaneId) -> usize {
        self.load.get(lane.index()).map_or(0, |l| l.count)
    }

    /// Take a client request into the pool (DESIGN §4, §6).
    pub fn admit(&mut self, now: Millis, req: Request) -> Result<Admitted, RejectReason> {
        self.admit_checked(now, req, true)
    }

    /// `admit` for a request whose authenticator the caller already verified
    /// at this replica with `Request::verify` (the runtime's pillars do, before
    /// the request reaches the core): skips the second MAC/signature check and
    /// keeps every other admission rule.
    pub fn admit_verified(&mut self, now: Millis, req: Request) -> Result<Admitted, RejectReason> {
        self.admit_checked(now, req, false)
    }

    fn admit_checked(&mut self, now: Millis, req: Request, verify: bool) -> Result<Admitted, RejectReason> {
        let p = &self.cfg.params;
        if req.op.len() > p.max_op_bytes as usize {
            return Err(RejectReason::Oversized);
        }
        if self.cfg.client(req.client).is_none() {
            return Err(RejectReason::UnknownClient);
        }
        let key = (req.client, req.seq);
        if self.entries.contains_key(&key) || self.is_ordered(key) {
            self.note_from_client(&req, verify);
            self.clear_busy_wait(key);
            return Ok(Admitted::Duplicate);
        }
        // Authenticate before answering busy: a forged low seq must not
        // become the client's remembered busy seq and hold back its real ones.
        if verify {
            self.verifier.check(&req)?;
        } else {
            self.verifier.check_shape(&req)?;
        }
        // Aardvark §4.1: a client proven to send partial MAC vectors waits
        // out its penalty (or signs); no busy-wait is noted for it.
        if self.mac_vectors_refused(now, &req) {
            return Err(RejectReason::Busy);
        }
        let full = self.entries.len() >= self.max_requests
            || self.per_client.get(&req.client).copied().unwrap_or(0) >= p.pool_max_per_client;
        if full || self.behind_older_busy(now, key) {
            self.note_busy(now, key);
            return Err(RejectReason::Busy);
        }
        self.clear_busy_wait(key);
        let lane = self.lane_for(&req);
        self.insert(key, req, lane, now, State::Pending, true);
        Ok(Admitted::New)
    }

    /// The client's own copy of a request we first learnt from a
    /// pre-prepare (or another lane) arrived: if it is the same bytes and
    /// verifies here, the entry counts as verified here, so reports about
    /// it can prove the client partial (`client_penalty.rs`; otherwise a
    /// client could dodge the proof by reaching us through the leader first).
    fn note_from_client(&mut self, req: &Request, verify: bool) {
        let key = (req.client, req.seq);
        let upgrade = self
            .entries
            .get(&key)
            .is_some_and(|e| !e.verified_here && e.req == *req)
            && (!verify || self.verifier.check(req).is_ok());
        if upgrade {
            if let Some(e) = self.entries.get_mut(&key) {
                e.verified_here = true;
            }
        }
    }

    /// Is an older seq of the same client waiting for space (and still
    /// being retransmitted)?
    fn behind_older_busy(&self, now: Millis, (client, seq): Key) -> bool {
        self.busy_waiting.get(&client).is_some_and(|&(waiting, last)| {
            waiting < seq && now.0 < last.0.saturating_add(BUSY_WAIT_FORGET_MS)
        })
    }

    /// `key` was answered busy: remember it if it is the client's lowest.
    fn note_busy(&mut self, now: Millis, (client, seq): Key) {
        let e = self.busy_waiting.entry(client).or_insert((seq, now));
        let stale = now.0 >= e.1 .0.saturating_add(BUSY_WAIT_FORGET_MS);
        if seq <= e.0 || stale {
            *e = (seq, now);
        }
    }

    /// `key` got in (or is ordered): it no longer holds its client back.
    fn clear_busy_wait(&mut self, (client, seq): Key) {
        if self
            .busy_waiting
            .get(&client)
            .is_some_and(|&(waiting, _)| waiting == seq)
        {
            self.busy_waiting.remove(&client);
        }
    }

    /// The seq of `client` waiting for space ahead of its later ones, if any
    /// (for tests and status).
    pub fn busy_waiting(&self, client: ClientId) -> Option<RequestSeq> {
        self.busy_waiting.get(&client).map(|&(s, _)| s)
    }

    fn insert(
        &mut self,
        key: Key,
        req: Request,
        lane: LaneId,
        now: Millis,
        state: State,
        verified_here: bool,
    ) {
        *self.per_client.entry(key.0).or_insert(0) += 1;
        if state == State::Pending {
            self.add_load(lane, req.op.len());
            self.queues[lane.index()].push_back(key);
        }
        self.entries.insert(
            key,
            Box::new(Entry {
                req,
                lane,
                arrived: now,
                state,
                verified_here,
                voided: 0,
                report_digests: DigestCache::default(),
            }),
        );
    }

    fn add_load(&mut self, lane: LaneId, bytes: usize) {
        let l = &mut self.load[lane.index()];
        l.count += 1;
        l.bytes += bytes;
    }

    fn sub_load(&mut self, lane: LaneId, bytes: usize) {
        let l = &mut self.load[lane.index()];
        debug_assert!(l.count > 0 && l.bytes >= bytes, "pool load underflow");
        l.count = l.count.saturating_sub(1);
        l.bytes = l.bytes.saturating_sub(bytes);
    }

    /// Since when the oldest proposable request of `lane` has waited (drops
    /// stale keys at the front of the queue on the way).
    pub fn oldest_pending(&mut self, lane: LaneId) -> Option<Millis> {
        let version = (self.entries.version, self.queues.version);
        if let Some(&Some((at, answer))) = self.oldest.0.get(lane.index()) {
            if at == version {
                debug_assert_eq!(answer, self.oldest_pending_uncached(lane), "stale cache");
                return answer;
            }
        }
        let answer = self.oldest_pending_uncached(lane);
        if let Some(slot) = self.oldest.0.get_mut(lane.index()) {
            *slot = Some((version, answer));
        }
        answer
    }

    /// Dropping stale keys at the front changes no lane's answer, so it
    /// does not count as a change of `queues` (no version bump).
    fn oldest_pending_uncached(&mut self, lane: LaneId) -> Option<Millis> {
        let q = &mut self.queues.inner[lane.index()];
        while let Some(k) = q.front() {
            match self.entries.get(k) {
                Some(e) if e.state == State::Pending && e.lane == lane => return Some(e.arrived),
                _ => {
                    q.pop_front();
                }
            }
        }
        None
    }

    /// A full batch (by count or bytes) is waiting for `lane`.
    pub fn full_batch_pending(&self, lane: LaneId) -> bool {
        let p = &self.cfg.params;
        self.load.get(lane.index()).is_some_and(|l| {
            l.count >= p.batch_max_requests as usize || l.bytes >= p.batch_max_bytes as usize
        })
    }

    /// Should the leader of `lane` cut a batch at `now`?
    pub fn readiness(&mut self, lane: LaneId, now: Millis) -> Readiness {
        let Some(oldest) = self.oldest_pending(lane) else {
            debug_assert_eq!(self.load[lane.index()].count, 0);
            return Readiness::Empty;
        };
        let p = &self.cfg.params;
        let l = self.load[lane.index()];
        let due = oldest.plus(p.batch_delay_ms);
        if l.count >= p.batch_max_requests as usize || l.bytes >= p.batch_max_bytes as usize || due <= now {
            Readiness::Ready
        } else {
            Readiness::WaitUntil(due)
        }
    }

    /// Cut a batch for `cell` from its lane's pending requests, oldest first,
    /// up to `batch_max_requests` and `batch_max_bytes` (the last request may
    /// cross the byte bound, as `Limits` allows). The requests become in flight.
    pub fn cut(&mut self, cell: Cell) -> Batch {
        self.cut_where(cell, |_| true)
    }

    /// `cut`, taking only requests `may` allows in `cell` (RCC §III-E: the
    /// hand-over of a switched client); the others keep their place.
    pub fn cut_where(&mut self, cell: Cell, may: impl Fn(&Request) -> bool) -> Batch {
        let lane = cell.lane;
        let mut kept = Vec::new();
        let max_requests = self.cfg.params.batch_max_requests as usize;
        let max_bytes = self.cfg.params.batch_max_bytes as usize;
        let mut requests = Vec::new();
        let mut bytes = 0usize;
        let mut keys = Vec::new();
        while requests.len() < max_requests && bytes < max_bytes {
            let Some(k) = self.queues[lane.index()].pop_front() else {
                break;
            };
            let Some(e) = self.entries.get_mut(&k) else {
                continue;
            };
            if e.state != State::Pending || e.lane != lane {
                continue;
            }
            if !may(&e.req) {
                kept.push(k);
                continue;
            }
            e.state = State::InFlight(cell);
            let len = e.req.op.len();
            bytes += len;
            requests.push(e.req.clone());
            keys.push(k);
            self.sub_load(lane, len);
        }
        for k in kept.into_iter().rev() {
            self.queues[lane.index()].push_front(k);
        }
        if !keys.is_empty() {
            self.in_flight.entry(cell).or_default().extend(keys);
            self.own.insert(cell);
        }
        Batch { requests, time_ms: 0 }
    }

    /// A pre-prepare for `cell` carrying `batch` was accepted (ours or a
    /// leader's): its requests are in flight there. Requests we did not have
    /// are added (they were verified by the lane), space permitting. Requests
    /// in flight at `cell` under an earlier proposal become pending again.
    pub fn mark_in_flight(&mut self, now: Millis, cell: Cell, batch: &Batch) {
        let old = self.in_flight.remove(&cell).unwrap_or_default();
        let mut keys = Vec::with_capacity(batch.requests.len());
        for r in &batch.requests {
            let key = (r.client, r.seq);
            if self.is_ordered(key) {
                continue;
            }
            match self.entries.get_mut(&key) {
                Some(e) => {
                    if e.state == State::Pending {
                        let (lane, len) = (e.lane, e.req.op.len());
                        e.state = State::InFlight(cell);
                        self.sub_load(lane, len);
                    } else {
                        e.state = State::InFlight(cell);
                    }
                }
                None => {
                    if self.entries.len() >= self.max_requests {
                        continue;
                    }
                    let lane = self.lane_for(r);
                    self.insert(key, r.clone(), lane, now, State::InFlight(cell), false);
                }
            }
            keys.push(key);
        }
        // In reverse, so pushing each to the front keeps their order.
        for k in old.into_iter().rev() {
            if !keys.contains(&k) {
                self.release_key(k, cell, now);
            }
        }
        if !keys.is_empty() {
            self.in_flight.insert(cell, keys);
        }
    }

    /// A request in flight at `cell` goes back to pending (front of its queue:
    /// it is older than what arrived since). Its waiting time restarts: the
    /// progress timer must not count time it spent in flight.
    fn release_key(&mut self, key: Key, cell: Cell, now: Millis) {
        let Some(e) = self.entries.get(&key) else {
            return;
        };
        if e.state != State::InFlight(cell) {
            return;
        }
        // Seed 10800016: a proven client's MAC-vector request seen in another
        // leader's proposal must not come back to us as proposable either.
        // SAREK: a request another partition handed over (`adopt`) was
        // decided there and must be ordered here too, so it stays.
        let handed_over = self.fixed_lane.is_some() && !e.verified_here;
        if !handed_over && self.mac_vectors_refused(now, &e.req) {
            self.remove_entry(key);
            return;
        }
        let e = self.entries.get_mut(&key).expect("entry checked above");
        e.state = State::Pending;
        e.arrived = now;
        let (lane, len) = (e.lane, e.req.op.len());
        self.add_load(lane, len);
        self.queues[lane.index()].push_front(key);
        self.compact_queue(lane);
    }

    /// Keep a queue from filling with stale keys.
    fn compact_queue(&mut self, lane: LaneId) {
        let q = &self.queues[lane.index()];
        if q.len() <= 2 * self.load[lane.index()].count + 64 {
            return;
        }
        let mut seen = BTreeSet::new();
        let entries = &self.entries;
        self.queues[lane.index()].retain(|k| {
            entries
                .get(k)
                .is_some_and(|e| e.state == State::Pending && e.lane == lane)
                && seen.insert(*k)
        });
    }

    /// `cell` decided `batch`: its requests are ordered and leave the pool;
    /// what was in flight there and is not in it becomes proposable again,
    /// except (`dispel`, `on_decided_counting_voids`) a request
    /// `voided_for_good` says to drop.
    pub fn on_decided(&mut self, now: Millis, cell: Cell, batch: &Batch) {
        self.on_decided_counting_voids(now, cell, batch, Void::None);
    }

    /// `on_decided`, where `void` says how our own proposal at `cell` (if
    /// it is ours and lost) counts towards dropping a reported request
    /// (`voided_for_good`). Returns how many were dropped.
    pub fn on_decided_counting_voids(&mut self, now: Millis, cell: Cell, batch: &Batch, void: Void) -> usize {
        let ours = self.own.remove(&cell);
        for r in &batch.requests {
            let key = (r.client, r.seq);
            self.remove_entry(key);
            self.clear_busy_wait(key);
            self.remember_ordered(key);
        }
        let mut dropped = 0;
        for k in self.in_flight.remove(&cell).unwrap_or_default().into_iter().rev() {
            if ours && self.voided_for_good(k, cell, void) {
                self.remove_entry(k);
                dropped += 1;
            } else {
                self.release_key(k, cell, now);
            }
        }
        dropped
    }

    /// `dispel`: our proposal at `cell` was decided without `key` (our bit
    /// decided 0). True when it should not be proposed again: a MAC-vector
    /// request that a replica reported unverifiable at it
    /// (`ReplicaMsg::Unverifiable`), whose losses reached
    /// `VOID_WEIGHT_BEFORE_DROP`.
    ///
    /// A dispel proposer learns nothing from a bit of 0: its INIT may
    /// simply have come late (routine for a late joiner), or it carries a
    /// MAC vector that verifies at k <= f correct replicas only while the
    /// f + 1 reports that would prove the client partial cannot come (the
    /// replicas that could send them are Byzantine or down). Then every
    /// later INIT of ours carrying it fails the same way, with every other
    /// request in it, for as long as that lasts (a `silent` replica and a
    /// `bad-auth` client kept an n = 4 cluster spawning epochs for ever,
    /// 2026-11-27). The refusing replicas' reports single the request out,
    /// so the other requests of the batch are put back as before (a
    /// review: counting every MAC-vector request of the batch let one
    /// partial request drop a whole batch of correct ones). A dropped
    /// request is still held where it verified (those replicas rescue it)
    /// and is admitted here again when its client retransmits: the cure of
    /// `release_from` for PBFT lanes, which void our proposals through it
    /// (their catch-up can decide our cell without it, so this stays
    /// dispel-only).
    fn voided_for_good(&mut self, key: Key, cell: Cell, void: Void) -> bool {
        if void == Void::None
            || self.cfg.params.mode != OrderingMode::Dispel
            || !self.mac_vector_in_flight_at(key, cell)
            || !self.unverifiable.contains_key(&key)
        {
            return false;
        }
        let Some(e) = self.entries.get_mut(&key) else {
            return false;
        };
        e.voided = e.voided.saturating_add(void.weight());
        e.voided >= VOID_WEIGHT_BEFORE_DROP
    }

    fn remove_entry(&mut self, key: Key) {
        self.unverifiable.remove(&key);
        if let Some(e) = self.entries.remove(&key) {
            if e.state == State::Pending {
                self.sub_load(e.lane, e.req.op.len());
            }
            if let Some(c) = self.per_client.get_mut(&key.0) {
                *c -= 1;
                if *c == 0 {
                    self.per_client.remove(&key.0);
                }
            }
        }
    }

    fn is_ordered(&self, key @ (client, seq): Key) -> bool {
        match self.ordered.get(&client) {
            Some(w) => w.contains(seq.0),
            None => self.ordered_keys.contains(&key),
        }
    }

    /// A configured client's seqs go to its window: only configured
    /// clients' requests verify, so the windows stay one per configured
    /// client. Anything else (SAREK's re-prediction pseudo-client, whose
    /// seqs are hashes; a client past the bound, which cannot happen while
    /// every decided request verified) is remembered key by key, the
    /// oldest forgotten first (a forgotten retransmission may be proposed
    /// again: the executor answers it from its client table).
    fn remember_ordered(&mut self, key @ (client, seq): Key) {
        if client != REPREDICTION_CLIENT {
            if let Some(w) = self.ordered.get_mut(&client) {
                w.insert(seq.0);
                return;
            }
            if self.ordered.len() < self.cfg.clients.len() {
                self.ordered.entry(client).or_default().insert(seq.0);
                return;
            }
        }
        if !self.ordered_keys.insert(key) {
            return;
        }
        self.ordered_keys_fifo.push_back(key);
        while self.ordered_keys_fifo.len() > self.cfg.params.pool_max_requests as usize {
            if let Some(old) = self.ordered_keys_fifo.pop_front() {
                self.ordered_keys.remove(&old);
            }
        }
    }

    /// A new view voided every proposal of `lane` from `slot` on: release what
    /// was in flight there (re-proposals mark their batches again).
    pub fn release_from(&mut self, now: Millis, lane: LaneId, slot: Slot) {
        let from = Cell { lane, slot };
        let to = Cell {
            lane,
            slot: Slot(u64::MAX),
        };
        let cells: Vec<Cell> = self.in_flight.range(from..=to).map(|(c, _)| *c).collect();
        for c in cells.into_iter().rev() {
            let ours = self.own.remove(&c);
            for k in self.in_flight.remove(&c).unwrap_or_default().into_iter().rev() {
                if ours && self.mac_vector_in_flight_at(k, c) {
                    self.remove_entry(k);
                } else {
                    self.release_key(k, c, now);
                }
            }
        }
        self.own.retain(|c| c.lane != lane || c.slot < slot);
    }

    /// A MAC-vector request of a proposal of ours that a view change voided
    /// is dropped rather than proposed again. Its MAC may be valid only here
    /// and at Byzantine replicas that never vouch for it (Aardvark's Big MAC
    /// with colluding replicas): then every proposal of it stalls its slot
    /// and costs a view change, for ever. Every other replica the client
    /// sent it to still holds it if it verified there (and proposes it when
    /// it leads); a client still waiting retransmits it, which admits it here
    /// again, unless the client was proven to send partial vectors
    /// (`client_penalty.rs`). Re-proposals of prepared batches come back
    /// through `mark_in_flight`.
    fn mac_vector_in_flight_at(&self, key: Key, cell: Cell) -> bool {
        self.entries
            .get(&key)
            .is_some_and(|e| e.state == State::InFlight(cell) && matches!(e.req.auth, Authenticator::Macs(_)))
    }

    /// State transfer jumped over positions whose content we never saw: we
    /// cannot tell which held requests were ordered there, so drop them all
    /// (clients retransmit what is still unanswered; the memory of ordered
    /// requests is kept).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.unverifiable.clear();
        self.per_client.clear();
        self.in_flight.clear();
        self.own.clear();
        for q in self.queues.iter_mut() {
            q.clear();
        }
        for l in &mut self.load {
            *l = Load::default();
        }
    }
}

impl VerifiedHint for Pool {
    fn lane_owns(&self, lane: LaneId, req: &Request) -> Option<bool> {
        self.fixed_lane?;
        let lanes = match &self.predictor {
            Some(p) => p.lanes(&self.cfg, &req.op),
            None => crate::sarek::Predictor::everything().lanes(&self.cfg, &req.op),
        };
        Some(lanes.contains(&lane))
    }

    fn already_verified(&self, req: &Request) -> bool {
        self.entries
            .get(&(req.client, req.seq))
            .is_some_and(|e| e.req == *req)
    }

    fn share_digest(&self, req: &Request) {
        if let Some(e) = self.entries.get(&(req.client, req.seq)) {
            if e.req.flags == req.flags && e.req.op == req.op {
                req.memo.adopt(&e.req.memo);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use chorus_core::{ProtocolParams, Slot, UnverifiableRequest};

    struct Setup {
        cfg: Arc<ClusterConfig>,
        replicas: Vec<Identity>,
        clients: Vec<Identity>,
    }

    fn setup(params: ProtocolParams) -> Setup {
        let (cfg, replicas, clients) = ClusterConfig::for_testing(4, 3, params, 7);
        Setup {
            cfg: Arc::new(cfg),
            replicas,
            clients,
        }
    }

    fn req(s: &Setup, client: usize, seq: u64, op: &'static [u8]) -> Request {
        let keys: Vec<_> = s
            .replicas
            .iter()
            .map(|r| s.clients[client].pairwise_key(&r.public()))
            .collect();
        Request::with_macs(
            &chorus_core::ClusterTag::of(&s.cfg),
            ClientId(client as u64),
            RequestSeq(seq),
            0,
            Bytes::from_static(op),
            &keys,
        )
    }

    fn params() -> ProtocolParams {
        ProtocolParams {
            pillars: 1,
            checkpoint_interval: 8,
            window_slots: 16,
            batch_max_requests: 2,
            batch_delay_ms: 5,
            pool_max_requests: 4,
            pool_max_per_client: 3,
            ..ProtocolParams::default()
        }
    }

    fn cell(slot: u64) -> Cell {
        Cell {
            lane: LaneId(0),
            slot: Slot(slot),
        }
    }

    /// Client `client`'s request `seq`, signed.
    fn signed(s: &Setup, client: u64, seq: u64, op: &'static [u8]) -> Request {
        Request::with_signature(
            &chorus_core::ClusterTag::of(&s.cfg),
            ClientId(client),
            RequestSeq(seq),
            0,
            Bytes::from_static(op),
            &s.clients[client as usize],
        )
    }

    /// A report about `r` as it is (lane 0, view 0, slot 0).
    fn report_of(r: &Request) -> UnverifiableRequest {
        UnverifiableRequest {
            lane: LaneId(0),
            view: chorus_core::View(0),
            slot: Slot(0),
            client: r.client,
            seq: r.seq,
            content: r.digest(),
            auth: r.auth_digest(),
        }
    }

    /// The memory of ordered requests is per client: a client whose many
    /// requests are decided (a flood, or just a busy one) does not push
    /// another client's ordered request out of it, so that one's late
    /// retransmission is still a duplicate. With one memory for all
    /// (a FIFO of `pool_max_requests` keys) client 1's four decided seqs
    /// evicted client 0's, and its retransmission was pending again.
    #[test]
    fn one_clients_decided_requests_do_not_evict_anothers_ordered_memory() {
        let s = setup(params());
        let mut p = Pool::new(s.cfg.clone(), ReplicaId(1), s.replicas[1].clone());
        let first = req(&s, 0, 1, b"a");
        let batch = Batch::new(vec![first.clone()], 0);
        p.mark_in_flight(Millis(0), cell(1), &batch);
        p.on_decided(Millis(0), cell(1), &batch);
        for k in 0..2 * params().pool_max_requests as u64 {
            let b = Batch::new(vec![req(&s, 1, 1 + k, b"b")], 0);
            p.mark_in_flight(Millis(1), cell(2 + k), &b);
            p.on_decided(Millis(1), cell(2 + k), &b);
        }
        assert_eq!(p.admit(Millis(2), first.clone()), Ok(Admitted::Duplicate));
        assert_eq!(p.len(), 0);
        let own = req(&s, 1, 1, b"b");
        assert_eq!(
            p.admit(Millis(2), own),
            Ok(Admitted::Duplicate),
            "client 1's own recent seq"
        );
    }

    /// SAREK's re-predictions share one pseudo-client whose seqs are hashes:
    /// a window (its last 4 096 seqs below the highest) would forget all but
    /// the highest of them, so they are remembered key by key, and the
    /// pseudo-client takes no configured client's window (found by review:
    /// a SYNC decided before this replica certified it came back as pending).
    #[test]
    fn the_reprediction_pseudo_clients_hashed_seqs_are_remembered_exactly() {
        let s = setup(params());
        let mut p = Pool::new(s.cfg.clone(), ReplicaId(1), s.replicas[1].clone());
        let keys = [
            (REPREDICTION_CLIENT, RequestSeq(1 << 60)),
            (REPREDICTION_CLIENT, RequestSeq(7)),
        ];
        for k in keys {
            p.remember_ordered(k);
        }
        for k in keys {
            assert!(p.is_ordered(k), "{k:?}");
        }
        assert!(!p.is_ordered((REPREDICTION_CLIENT, RequestSeq(8))));
        assert!(p.ordered.is_empty(), "no window for the pseudo-client");
        // Every configured client still gets its window.
        for c in 0..s.cfg.clients.len() as u64 {
            p.remember_ordered((ClientId(c), RequestSeq(1)));
        }
        assert_eq!(p.ordered.len(), s.cfg.clients.len());
    }

    /// A backup holds the requests of a proposal already (clients send to
    /// every replica): the proposal's decoded copies take the digest the
    /// pool's copy has, instead of hashing every operation again; a copy
    /// with another operation under the same (client, seq) does not.
    #[test]
    fn a_proposed_copy_of_a_held_request_borrows_its_digest() {
        let s = setup(ProtocolParams::default());
        let mut p = Pool::new(s.cfg.clone(), ReplicaId(1), s.replicas[1].clone());
        let held = req(&s, 0, 1, b"a");
        p.admit(Millis(0), held.clone()).unwrap();
        let copy = Request {
            memo: Default::default(),
            ..held.clone()
        };
        p.share_digest(&copy);
        assert!(copy.memo.is_filled());
        assert_eq!(copy.digest(), held.digest());
        let other = Request {
            memo: Default::default(),
            op: Bytes::from_static(b"b"),
            ..held.clone()
        };
        p.share_digest(&other);
        assert!(!other.memo.is_filled());
        let unknown = Request {
            memo: Default::default(),
            ..req(&s, 0, 2, b"a")
        };
        p.share_digest(&unknown);
        assert!(!unknown.memo.is_filled());
    }

    /// dispel (`dispel_standin.rs`): a lane judged silent hands its clients'
    /// requests to a stand-in lane, keeping their arrival time (the rescue
    /// timeout still counts from it), and takes them back once heard; a key
    /// left in the silent lane's queue is skipped by the rescue (before,
    /// `cut_with_rescue` took it from there too).
    #[test]
    fn a_silent_dispel_proposer_hands_its_clients_to_a_stand_in() {
        let s = setup(ProtocolParams {
            mode: OrderingMode::Dispel,
            pool_max_requests: 16,
            pool_max_per_client: 8,
            ..params()
        });
        assert_eq!(s.cfg.lanes(), 4);
        let mut p = Pool::new(s.cfg.clone(), ReplicaId(0), s.replicas[0].clone());
        let at = |lane: u32, slot: u64| Cell {
            lane: LaneId(lane),
            slot: Slot(slot),
        };
        p.admit(Millis(0), req(&s, 1, 1, b"a")).unwrap();
        assert_eq!(
            p.oldest_pending(LaneId(1)),
            Some(Millis(0)),
            "client 1 owns lane 1"
        );
        assert!(p.set_silent(LaneId(1), true));
        assert!(!p.set_silent(LaneId(1), true), "no change");
        assert!(p.is_silent(LaneId(1)));
        let stand_in = p.stand_in(ClientId(1), LaneId(1));
        assert_ne!(stand_in, LaneId(1));
        let other = (0..4u32).find(|l| *l != 1 && *l != stand_in.0).expect("4 lanes");
        let (rescued, from) = p.cut_with_rescue(at(other, 0), &[LaneId(1)], Millis(10_000));
        assert!(from.is_empty());
        assert!(
            rescued.requests.is_empty(),
            "stale key in lane 1's queue: {rescued:?}"
        );
        assert_eq!(p.oldest_pending(LaneId(1)), None);
        assert_eq!(
            p.oldest_pending(stand_in),
            Some(Millis(0)),
            "its arrival time is kept"
        );
        p.admit(Millis(2_100), req(&s, 1, 2, b"b")).unwrap();
        assert_eq!(
            p.cut(at(stand_in.0, 0)).requests.len(),
            2,
            "the stand-in proposes both"
        );
        // Heard again: its clients' pending requests go home.
        p.admit(Millis(3_000), req(&s, 1, 3, b"c")).unwrap();
        assert!(p.set_silent(LaneId(1), false));
        assert_eq!(p.oldest_pending(stand_in), None);
        assert_eq!(p.oldest_pending(LaneId(1)), Some(Millis(3_000)));
    }

    /// Rendezvous choice: a second lane turning silent moves only the
    /// clients of that lane; each client's stand-in is a live lane.
    #[test]
    fn stand_ins_move_only_the_clients_of_the_lane_that_changed() {
        let s = setup(ProtocolParams {
            mode: OrderingMode::Dispel,
            ..params()
        });
        let mut p = Pool::new(s.cfg.clone(), ReplicaId(0), s.replicas[0].clone());
        p.set_silent(LaneId(1), true);
        let before: Vec<LaneId> = (0..64)
            .map(|c| p.stand_in(ClientId(c * 4 + 1), LaneId(1)))
            .collect();
        assert!(before.iter().all(|l| *l != LaneId(1)));
        assert!(
            before.iter().collect::<BTreeSet<_>>().len() > 1,
            "spread: {before:?}"
        );
        p.set_silent(LaneId(2), true);
        for (c, was) in before.iter().enumerate() {
            let now = p.stand_in(ClientId(c as u64 * 4 + 1), LaneId(1));
            assert!(now != LaneId(1) && now != LaneId(2));
            if *was != LaneId(2) {
                assert_eq!(now, *was, "client {c} moved although its stand-in stayed live");
            }
        }
    }

    #[test]
    fn only_dispel_pools_hand_lanes_over() {
        let s = setup(ProtocolParams {
            pillars: 4,
            ..params()
        });
        let mut p = Pool::new(s.cfg.clone(), ReplicaId(0), s.replicas[0].clone());
        p.admit(Millis(0), req(&s, 1, 1, b"a")).unwrap();
        assert!(!p.set_silent(LaneId(1), true));
        assert!(!p.is_silent(LaneId(1)));
        assert_eq!(p.oldest_pending(LaneId(1)), Some(Millis(0)));
    }

    #[test]
    fn admission_rejects_bad_unknown_oversized_and_full() {
        let s = setup(params());
        let mut p = Pool::new(s.cfg.clone(), ReplicaId(0), s.replicas[0].clone());
        let mut bad = req(&s, 0, 1, b"x");
        bad.op = Bytes::from_static(b"y");
        assert_eq!(p.admit(Millis(0), bad), Err(RejectReason::BadAuthenticator));
        let mut unknown = req(&s, 0, 1, b"x");
        unknown.client = ClientId(99);
        assert_eq!(p.admit(Millis(0), unknown), Err(RejectReason::UnknownClient));
        let big: &'static [u8] = Box::leak(vec![0u8; 70_000].into_boxed_slice());
        assert_eq!(
            p.admit(Millis(0), req(&s, 0, 1, big)),
            Err(RejectReason::Oversized)
        );
        for seq in 1..=3 {
            assert_eq!(p.admit(Millis(0), req(&s, 0, seq, b"x")), Ok(Admitted::New));
        }
        assert_eq!(p.admit(Millis(0), req(&s, 0, 1, b"x")), Ok(Admitted::Duplicate));
        assert_eq!(p.admit(Millis(0), req(&s, 0, 4, b"x")), Err(RejectReason::Busy));
        assert_eq!(p.admit(Millis(0), req(&s, 1, 1, b"x")), Ok(Admitted::New));
        assert_eq!(p.admit(Millis(0), req(&s, 2, 1, b"x")), Err(RejectReason::Busy));
        assert_eq!(p.len(), 4);
    }

    /// Issue 8 finding 11: a client's request answered busy must get the
    /// space the client frees before the same client's newer requests do.
    #[test]
    fn a_busy_request_is_not_starved_by_newer_ones_of_its_client() {
        let s = setup(params());
        let mut p = Pool::new(s.cfg.clone(), ReplicaId(0), s.replicas[0].clone());
        for seq in 1..=3 {
            assert_eq!(p.admit(Millis(0), req(&s, 0, seq, b"x")), Ok(Admitted::New));
        }
        assert_eq!(p.admit(Millis(1), req(&s, 0, 4, b"x")), Err(RejectReason::Busy));
        assert_eq!(p.busy_waiting(ClientId(0)), Some(RequestSeq(4)));
        // Seq 1 is ordered: the client has room for one more.
        let b = p.cut(cell(0));
        p.on_decided(Millis(2), cell(0), &b);
        assert_eq!(p.len(), 1);
        // Its newer seq 5 must not take the room seq 4 waits for…
        assert_eq!(p.admit(Millis(3), req(&s, 0, 5, b"x")), Err(RejectReason::Busy));
        // …which the retransmission of seq 4 gets.
        assert_eq!(p.admit(Millis(4), req(&s, 0, 4, b"x")), Ok(Admitted::New));
        assert_eq!(p.busy_waiting(ClientId(0)), None);
        assert_eq!(p.admit(Millis(6), req(&s, 0, 6, b"x")), Ok(Admitted::New));
        // The client is at its share. A forged low seq is refused for its
        // authenticator, not remembered as busy to hold the client back.
        let mut forged = req(&s, 0, 7, b"x");
        forged.seq = RequestSeq(5);
        assert_eq!(p.admit(Millis(6), forged), Err(RejectReason::BadAuthenticator));
        assert_eq!(p.busy_waiting(ClientId(0)), None);
        // A busy seq the client stops retransmitting is forgotten in time.
        assert_eq!(p.admit(Millis(6), req(&s, 0, 7, b"x")), Err(RejectReason::Busy));
        p.on_decided(
            Millis(7),
            cell(1),
            &Batch {
                requests: vec![req(&s, 0, 3, b"x")],
                time_ms: 0,
            },
        );
        assert_eq!(p.admit(Millis(8), req(&s, 0, 8, b"x")), Err(RejectReason::Busy));
        let later = Millis(6 + BUSY_WAIT_FORGET_MS);
        assert_eq!(p.admit(later, req(&s, 0, 8, b"x")), Ok(Admitted::New));
    }

    /// Issue 8 finding 4 with colluding replicas: a MAC-vector request of
    /// our own proposal that a view change voided is not proposed again by
    /// us (it may verify only here and at silent Byzantine replicas); a
    /// retransmission admits it again once the client's penalty is over.
    /// Requests we only saw in another leader's proposal become pending as
    /// before.
    #[test]
    fn our_voided_mac_vector_proposals_are_dropped_until_retransmitted() {
        let s = setup(params());
        let mut p = Pool::new(s.cfg.clone(), ReplicaId(0), s.replicas[0].clone());
        p.admit(Millis(0), req(&s, 0, 1, b"a")).unwrap();
        p.admit(Millis(0), req(&s, 0, 2, b"b")).unwrap();
        let ours = p.cut(cell(0));
        assert_eq!(ours.requests.len(), 2);
        p.mark_in_flight(Millis(0), cell(0), &ours);
        let theirs = Batch {
            requests: vec![req(&s, 1, 1, b"c")],
            time_ms: 0,
        };
        p.mark_in_flight(Millis(0), cell(1), &theirs);
        p.release_from(Millis(1), LaneId(0), Slot(0));
        assert_eq!(p.len(), 1);
        assert_eq!(p.pending_len(LaneId(0)), 1);
        assert_eq!(p.cut(cell(2)), theirs);
        assert_eq!(p.admit(Millis(2), req(&s, 0, 1, b"a")), Ok(Admitted::New));
        assert_eq!(p.orphaned_in_flight(), 0);
    }

    /// `dispel`: our own proposal decided without its requests (our bit 0)
    /// puts them back, except a MAC-vector request a replica reported
    /// unverifiable, which goes once its losses weigh
    /// `VOID_WEIGHT_BEFORE_DROP` (`Void`). The
    /// batch's other requests (an unreported MAC vector, a signed request)
    /// stay, and a PBFT-lane pool drops nothing this way. A retransmission
    /// admits the dropped one again.
    #[test]
    fn a_reported_request_our_epochs_keep_losing_is_dropped_alone() {
        for mode in [OrderingMode::Dispel, OrderingMode::Pbft] {
            let s = setup(ProtocolParams {
                mode,
                batch_max_requests: 3,
                ..params()
            });
            let mut p = Pool::new(s.cfg.clone(), ReplicaId(0), s.replicas[0].clone());
            let partial = req(&s, 0, 1, b"a");
            p.admit(Millis(0), partial.clone()).unwrap();
            p.admit(Millis(0), req(&s, 0, 2, b"b")).unwrap();
            let signed = signed(&s, 0, 3, b"c");
            assert_eq!(p.admit(Millis(0), signed), Ok(Admitted::New));
            let report = report_of(&partial);
            assert!(
                !p.note_unverifiable(Millis(0), ReplicaId(1), &report, 1),
                "one report proves nothing"
            );
            // Three late losses (our broadcast had delivered) weigh 3 of 4,
            // then one loss before delivery drops it.
            let mut dropped = 0;
            let voids = [
                Void::AfterDelivery,
                Void::AfterDelivery,
                Void::AfterDelivery,
                Void::BeforeDelivery,
            ];
            for (epoch, void) in (0u64..).zip(voids) {
                assert_eq!(
                    p.cut(cell(epoch)).requests.len(),
                    3 - dropped,
                    "{mode:?} epoch {epoch}"
                );
                dropped += p.on_decided_counting_voids(Millis(epoch + 1), cell(epoch), &Batch::noop(), void);
                let last = epoch == 3 && mode == OrderingMode::Dispel;
                assert_eq!(dropped, usize::from(last), "{mode:?} epoch {epoch}");
            }
            let expect = usize::from(mode == OrderingMode::Dispel);
            assert_eq!((dropped, p.len()), (expect, 3 - expect), "{mode:?}");
            assert_eq!(p.orphaned_in_flight(), 0);
            if expect == 1 {
                assert_eq!(p.admit(Millis(10), partial.clone()), Ok(Admitted::New));
            }
        }
    }

    /// A Byzantine replica's reports naming a request we hold with other
    /// digests are never stored; each used to hash the whole operation and
    /// encode the MAC vector again (~100 bytes of report for up to
    /// `max_op_bytes` of hashing). Now the request is hashed once.
    #[test]
    fn reports_with_other_digests_hash_the_request_once() {
        let s = setup(params());
        let mut p = Pool::new(s.cfg.clone(), ReplicaId(0), s.replicas[0].clone());
        let big: &'static [u8] = Box::leak(vec![7u8; 60_000].into_boxed_slice());
        let r = req(&s, 0, 1, big);
        p.admit(Millis(0), r.clone()).unwrap();
        let mut bogus = UnverifiableRequest {
            lane: LaneId(0),
            view: chorus_core::View(0),
            slot: Slot(0),
            client: r.client,
            seq: r.seq,
            content: chorus_core::Digest::of(b"other"),
            auth: r.auth_digest(),
        };
        for i in 0..1_000u64 {
            bogus.slot = Slot(i);
            assert!(!p.note_unverifiable(Millis(i), ReplicaId(1), &bogus, 1));
        }
        let e = p.entries.get(&(r.client, r.seq)).expect("still held");
        assert_eq!(e.report_digests.hashed, 1);
        assert!(p.unverifiable.is_empty(), "nothing stored for other digests");
    }

    /// The weights: two losses before our broadcast delivered drop a
    /// reported request, three after it do not, nor one after and one
    /// before.
    #[test]
    fn void_weights_decide_when_a_reported_request_goes() {
        use Void::{AfterDelivery as After, BeforeDelivery as Before};
        for (voids, dropped_at) in [
            (vec![Before, Before], Some(1)),
            (vec![After, After, After], None),
            (vec![After, Before], None),
            (vec![After, After, Before], Some(2)),
        ] {
            let s = setup(ProtocolParams {
                mode: OrderingMode::Dispel,
                ..params()
            });
            let mut p = Pool::new(s.cfg.clone(), ReplicaId(0), s.replicas[0].clone());
            let r = req(&s, 0, 1, b"a");
            p.admit(Millis(0), r.clone()).unwrap();
            let report = report_of(&r);
            p.note_unverifiable(Millis(0), ReplicaId(1), &report, 1);
            let mut at = None;
            for (epoch, void) in (0u64..).zip(voids.iter().copied()) {
                assert_eq!(p.cut(cell(epoch)).requests.len(), 1, "{voids:?} epoch {epoch}");
                if p.on_decided_counting_voids(Millis(epoch + 1), cell(epoch), &Batch::noop(), void) == 1 {
                    at = Some(epoch as usize);
                    break;
                }
            }
            assert_eq!(at, dropped_at, "{voids:?}");
        }
    }

    /// Seeds 9300041 and 10800016 (Aardvark §4.1): f+1 distinct reports
    /// about a request we verified from the client, with the same content
    /// and authenticator, prove the client partial: its pending MAC-vector
    /// requests go, new ones are refused for 64 view-change timeouts (twice
    /// that on a repeat), and one seen in another leader's proposal does
    /// not become proposable. Its signed requests are still taken, other
    /// clients are not affected, reports about other bytes count for
    /// nothing, and a quiet while forgets the strike.
    #[test]
    fn f_plus_one_reports_prove_a_client_partial_for_a_doubling_while() {
        let s = setup(params());
        let t = s.cfg.params.view_change_timeout_ms;
        let f = s.cfg.f();
        let mut p = Pool::new(s.cfg.clone(), ReplicaId(0), s.replicas[0].clone());
        let a = req(&s, 0, 1, b"a");
        p.admit(Millis(0), a.clone()).unwrap();
        p.admit(Millis(0), req(&s, 0, 2, b"b")).unwrap();
        let report = report_of;
        // Other content (a leader changed the op) or other MACs: nothing.
        let mut altered = a.clone();
        altered.op = Bytes::from_static(b"z");
        let mut other_macs = a.clone();
        if let Authenticator::Macs(m) = &mut other_macs.auth {
            Arc::make_mut(m)[1] = chorus_core::Mac([1; 16]);
        }
        for from in 1..=3 {
            assert!(!p.note_unverifiable(Millis(1), ReplicaId(from), &report(&altered), f));
            assert!(!p.note_unverifiable(Millis(1), ReplicaId(from), &report(&other_macs), f));
        }
        // f reports (one repeated) are not enough; the f+1-th proves it.
        for from in std::iter::repeat_n(1, 2).chain(2..=f as u32) {
            assert!(!p.note_unverifiable(Millis(1), ReplicaId(from), &report(&a), f));
        }
        assert_eq!(p.client_strikes(ClientId(0)), 0);
        assert!(p.note_unverifiable(Millis(10), ReplicaId(f as u32 + 1), &report(&a), f));
        assert_eq!((p.len(), p.client_strikes(ClientId(0))), (0, 1));
        assert_eq!(p.admit(Millis(11), req(&s, 0, 3, b"c")), Err(RejectReason::Busy));
        assert_eq!(p.busy_waiting(ClientId(0)), None);
        assert_eq!(p.admit(Millis(11), req(&s, 1, 1, b"z")), Ok(Admitted::New));
        let signed = signed(&s, 0, 4, b"d");
        assert_eq!(p.admit(Millis(11), signed), Ok(Admitted::New));
        // Seen in another leader's proposal that ends as a no-op: dropped.
        let theirs = Batch {
            requests: vec![req(&s, 0, 9, b"e")],
            time_ms: 0,
        };
        p.mark_in_flight(Millis(11), cell(9), &theirs);
        p.on_decided(Millis(12), cell(9), &Batch::noop());
        assert_eq!(p.len(), 2, "c1's request and c0's signed one");
        // After 64 timeouts it is taken again; a second proof doubles it.
        let back = Millis(10 + 64 * t);
        assert_eq!(
            p.admit(Millis(back.0 - 1), req(&s, 0, 5, b"f")),
            Err(RejectReason::Busy)
        );
        let g = req(&s, 0, 5, b"f");
        assert_eq!(p.admit(back, g.clone()), Ok(Admitted::New));
        for from in 1..=f as u32 + 1 {
            p.note_unverifiable(back, ReplicaId(from), &report(&g), f);
        }
        assert_eq!(p.client_strikes(ClientId(0)), 2);
        assert_eq!(
            p.admit(back.plus(128 * t - 1), req(&s, 0, 6, b"h")),
            Err(RejectReason::Busy)
        );
        // Quiet for 8 penalties: the next proof is a first one again.
        let quiet = back.plus(128 * t + 8 * 128 * t);
        let h = req(&s, 0, 6, b"h");
        assert_eq!(p.admit(quiet, h.clone()), Ok(Admitted::New));
        for from in 1..=f as u32 + 1 {
            p.note_unverifiable(quiet, ReplicaId(from), &report(&h), f);
        }
        assert_eq!(p.client_strikes(ClientId(0)), 1);
        assert_eq!(p.orphaned_in_flight(), 0);
    }

    /// A request first learnt from a pre-prepare proves nothing about its
    /// client until the client's own identical copy verifies here (review
    /// of the client penalty: a client reaching us through the leader first
    /// would otherwise dodge the proof).
    #[test]
    fn reports_count_once_the_clients_own_copy_arrived() {
        let s = setup(params());
        let f = s.cfg.f();
        let mut p = Pool::new(s.cfg.clone(), ReplicaId(0), s.replicas[0].clone());
        let a = req(&s, 0, 1, b"a");
        let report = UnverifiableRequest {
            lane: LaneId(0),
            view: chorus_core::View(0),
            slot: Slot(0),
            client: a.client,
            seq: a.seq,
            content: a.digest(),
            auth: a.auth_digest(),
        };
        let batch = Batch {
            requests: vec![a.clone()],
            time_ms: 0,
        };
        p.mark_in_flight(Millis(0), cell(3), &batch);
        for from in 1..=f as u32 + 1 {
            assert!(!p.note_unverifiable(Millis(1), ReplicaId(from), &report, f));
        }
        assert_eq!(p.admit(Millis(2), a.clone()), Ok(Admitted::Duplicate));
        p.unverifiable.clear();
        for from in 1..=f as u32 {
            assert!(!p.note_unverifiable(Millis(3), ReplicaId(from), &report, f));
        }
        assert!(p.note_unverifiable(Millis(3), ReplicaId(f as u32 + 1), &report, f));
        assert_eq!(p.client_strikes(ClientId(0)), 1);
    }

    #[test]
    fn batches_are_cut_by_size_or_delay_and_released_when_the_cell_ends_differently() {
        let s = setup(params());
        let mut p = Pool::new(s.cfg.clone(), ReplicaId(0), s.replicas[0].clone());
        assert_eq!(p.readiness(LaneId(0), Millis(0)), Readiness::Empty);
        p.admit(Millis(0), req(&s, 0, 1, b"a")).unwrap();
        assert_eq!(p.readiness(LaneId(0), Millis(1)), Readiness::WaitUntil(Millis(5)));
        assert_eq!(p.readiness(LaneId(0), Millis(5)), Readiness::Ready);
        p.admit(Millis(2), req(&s, 0, 2, b"b")).unwrap();
        p.admit(Millis(3), req(&s, 1, 1, b"c")).unwrap();
        assert_eq!(p.readiness(LaneId(0), Millis(3)), Readiness::Ready);
        let b = p.cut(cell(0));
        assert_eq!(b.requests.len(), 2);
        assert_eq!(p.pending_len(LaneId(0)), 1);
        // The cell is decided as a no-op: the two requests are proposable again,
        // first in line, and their waiting time restarts.
        p.on_decided(Millis(4), cell(0), &Batch::noop());
        assert_eq!(p.pending_len(LaneId(0)), 3);
        let b2 = p.cut(cell(1));
        assert_eq!(b2, b);
        p.on_decided(Millis(4), cell(1), &b2);
        assert_eq!(p.len(), 1);
        // Ordered requests are not taken again.
        assert_eq!(p.admit(Millis(9), req(&s, 0, 1, b"a")), Ok(Admitted::Duplicate));
    }

    #[test]
    fn requests_seen_in_a_pre_prepare_are_not_proposed_again() {
        let s = setup(params());
        let mut p = Pool::new(s.cfg.clone(), ReplicaId(1), s.replicas[1].clone());
        let r1 = req(&s, 0, 1, b"a");
        let r2 = req(&s, 0, 2, b"b");
        p.admit(Millis(0), r1.clone()).unwrap();
        assert!(p.already_verified(&r1));
        assert!(!p.already_verified(&r2));
        // A leader proposed r1 and r2 (r2 unknown to us so far) at slot 4.
        let batch = Batch {
            requests: vec![r1.clone(), r2.clone()],
            time_ms: 0,
        };
        p.mark_in_flight(Millis(1), cell(4), &batch);
        assert_eq!(p.pending_len(LaneId(0)), 0);
        assert_eq!(p.len(), 2);
        // A view change voids slot 4: both are proposable by the next leader.
        p.release_from(Millis(2), LaneId(0), Slot(3));
        assert_eq!(p.pending_len(LaneId(0)), 2);
        p.mark_in_flight(
            Millis(2),
            cell(5),
            &Batch {
                requests: vec![r2.clone()],
                time_ms: 0,
            },
        );
        assert_eq!(p.pending_len(LaneId(0)), 1);
        p.on_decided(
            Millis(3),
            cell(5),
            &Batch {
                requests: vec![r2],
                time_ms: 0,
            },
        );
        assert_eq!(p.len(), 1);
        assert_eq!(p.oldest_pending(LaneId(0)), Some(Millis(2)));
        p.clear();
        assert!(p.is_empty());
        assert_eq!(p.pending_len(LaneId(0)), 0);
    }
}
