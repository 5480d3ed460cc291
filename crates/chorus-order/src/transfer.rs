//! State transfer (PBFT §4.3 / §5.3.2 in spirit; DESIGN §4 "Checkpoints").
//!
//! A replica whose next needed position lies below a peer's stable checkpoint
//! (the peer has dropped the log it would need) asks that peer for its state.
//! The peer answers with the snapshot split into `StateChunk`s, each carrying
//! the checkpoint certificate. The receiver checks the certificate (2f+1
//! valid signatures), takes chunks only from the peer it asked, reassembles
//! within a bound, and hands the snapshot to the driver (`InstallState`). The
//! driver checks the service state digest against the certificate and answers
//! `StateInstalled`; only then is the checkpoint adopted and persisted. A bad
//! snapshot (Byzantine sender) is dropped and another peer is asked.
//!
//! Peer choice. A valid certificate proves that 2f+1 replicas computed a
//! state, not that any correct replica still *serves* it: Byzantine replicas
//! can collect the correct replicas' votes, withhold their own, and so hold a
//! certificate that is stable only among themselves, then serve it with
//! garbage bytes (issue 8, findings 1, 5, 12). So a failure never raises what
//! we ask for above what we need (correct peers may hold only a lower stable
//! checkpoint), and every failure (a bad snapshot, or no answer in time)
//! counts against the peer that caused it: the next request goes to one of
//! the peers with the fewest failures, in rotation. A liar's count grows each
//! time it is asked while a correct peer's does not, so with f liars at most
//! f attempts in a row go to liars and a correct peer that holds the needed
//! checkpoint is always asked eventually.

use crate::certs::verify_checkpoint_cert;
use crate::counters::Cx;
use bytes::{Bytes, BytesMut};
use chorus_core::{
    CheckpointCert, ClusterConfig, Millis, ReplicaId, ReplicaMsg, Seq, StateChunk, StateRequest,
};
use std::sync::Arc;

/// The largest snapshot a replica reassembles (bounds memory against a
/// Byzantine sender announcing a huge chunk count).
pub const MAX_STATE_BYTES: u64 = 1 << 30;

/// A peer's stable-checkpoint claim counts for this many status intervals.
const PEER_CLAIM_INTERVALS: u64 = 8;

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
struct Incoming {
    cert: CheckpointCert,
    source: ReplicaId,
    chunks: Vec<Option<Bytes>>,
    received: usize,
    bytes: u64,
}

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
struct Requested {
    peer: ReplicaId,
    at: Millis,
}

/// A reassembled snapshot handed to the driver, and who sent it.
#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
struct Installing {
    cert: CheckpointCert,
    snapshot: Bytes,
    source: ReplicaId,
}

/// The outcome of `StateInstalled`.
#[derive(Debug, PartialEq, Eq)]
pub enum Installed {
    /// The state we asked for is in place: adopt this checkpoint.
    Done(CheckpointCert, Bytes),
    /// The driver's digest does not match the certificate: try another peer.
    Mismatch,
    /// Not an answer to a transfer of ours (e.g. the install done by `recover`).
    NotOurs,
}

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub struct StateTransfer {
    cfg: Arc<ClusterConfig>,
    me: ReplicaId,
    /// Stable checkpoint each peer last reported in `Status`, and when.
    peer_stable: Vec<Option<(Seq, Millis)>>,
    /// The highest valid certificate we know of (from votes or view changes).
    known_cert: Option<Seq>,
    requested: Option<Requested>,
    incoming: Option<Incoming>,
    installing: Option<Installing>,
    /// Failed transfers per peer (bad snapshot or no answer): peers with the
    /// fewest are asked first, so no liar can be chosen for ever.
    failures: Vec<u32>,
    attempts: u64,
    /// `next_delivery` at the previous tick: a transfer starts only after a
    /// whole status interval without delivery progress.
    last_tick_next: Option<Seq>,
    /// When we last served each peer (one transfer per peer per interval).
    served: Vec<Option<Millis>>,
}

impl StateTransfer {
    pub fn new(cfg: Arc<ClusterConfig>, me: ReplicaId) -> StateTransfer {
        let n = cfg.n();
        StateTransfer {
            cfg,
            me,
            peer_stable: vec![None; n],
            known_cert: None,
            requested: None,
            incoming: None,
            installing: None,
            failures: vec![0; n],
            attempts: 0,
            last_tick_next: None,
            served: vec![None; n],
        }
    }

    pub fn is_installing(&self) -> bool {
        self.installing.is_some()
    }

    fn interval_ms(&self) -> u64 {
        self.cfg.params.status_interval_ms
    }

    fn max_chunks(&self) -> u64 {
        MAX_STATE_BYTES.div_ceil(self.cfg.params.state_chunk_bytes.max(1) as u64)
    }

    /// The lowest checkpoint that would help a replica delivering at `next`.
    /// Never at or below `next`: installing it would rewind the executor.
    /// Never raised after a failure either: the certificate a liar served may
    /// be stable at no correct replica, which then could not answer.
    fn floor(&self, next: Seq) -> Seq {
        next.next()
    }

    fn blame(&mut self, peer: ReplicaId) {
        if let Some(f) = self.failures.get_mut(peer.index()) {
            *f = f.saturating_add(1);
        }
    }

    /// A peer's `Status` claims its stable checkpoint. Claims are unproven,
    /// so one only counts while fresh (a few status intervals), a report
    /// replaces the previous one, and a transfer starts only for a
    /// checkpoint f+1 peers claim (`vouched_stable`): a Byzantine peer's lie
    /// can neither be remembered for ever nor keep us fetching state.
    pub fn note_peer_stable(&mut self, peer: ReplicaId, stable: Seq, now: Millis) {
        let k = self.cfg.params.checkpoint_interval.max(1);
        if peer == self.me || !stable.0.is_multiple_of(k) {
            return;
        }
        if let Some(s) = self.peer_stable.get_mut(peer.index()) {
            // A claim read earlier than the one we hold (relayed by another
            // lane group on a slower channel) does not replace it.
            if s.is_none_or(|(_, at)| at <= now) {
                *s = Some((stable, now));
            }
        }
    }

    /// The peer's claim if it is recent enough to act on.
    fn fresh_claim(&self, peer: ReplicaId, now: Millis) -> Seq {
        let fresh = self.interval_ms().saturating_mul(PEER_CLAIM_INTERVALS);
        match self.peer_stable.get(peer.index()).copied().flatten() {
            Some((seq, at)) if now.0.saturating_sub(at.0) <= fresh => seq,
            _ => Seq(0),
        }
    }

    /// The highest checkpoint at least f+1 peers claim, so at least one
    /// correct replica holds it.
    fn vouched_stable(&self, now: Millis) -> Seq {
        let mut claims: Vec<Seq> = self.cfg.replica_ids().map(|r| self.fresh_claim(r, now)).collect();
        claims.sort_unstable_by(|a, b| b.cmp(a));
        claims.get(self.cfg.f()).copied().unwrap_or(Seq(0))
    }

    /// A valid certificate above our delivery point (already verified).
    pub fn note_cert(&mut self, seq: Seq) {
        self.known_cert = Some(self.known_cert.map_or(seq, |k| k.max(seq)));
    }

    /// Status tick: start a transfer when we are stuck below a checkpoint.
    pub fn on_tick(&mut self, cx: &mut Cx, next: Seq) {
        let stuck = self.last_tick_next == Some(next);
        self.last_tick_next = Some(next);
        if self.installing.is_some() {
            return;
        }
        let timeout = self.interval_ms().saturating_mul(4);
        if let Some(r) = &self.requested {
            if cx.now.0.saturating_sub(r.at.0) < timeout {
                return;
            }
            cx.counters.reject("state-transfer-timeout");
            self.blame(r.peer);
            self.requested = None;
            self.incoming = None;
        }
        let floor = self.floor(next);
        let best_peer = self.vouched_stable(cx.now);
        let target = best_peer.max(self.known_cert.unwrap_or(Seq(0)));
        if target < floor || !stuck {
            return;
        }
        let mut candidates: Vec<ReplicaId> = self
            .cfg
            .replica_ids()
            .filter(|r| *r != self.me && self.fresh_claim(*r, cx.now) >= floor)
            .collect();
        if candidates.is_empty() {
            candidates = self.cfg.replica_ids().filter(|r| *r != self.me).collect();
        }
        let Some(fewest) = candidates.iter().map(|r| self.failures[r.index()]).min() else {
            return;
        };
        candidates.retain(|r| self.failures[r.index()] == fewest);
        let peer = candidates[(self.attempts % candidates.len() as u64) as usize];
        self.attempts += 1;
        tracing::debug!(?peer, ?floor, "requesting state transfer");
        cx.out
            .send(peer, ReplicaMsg::StateRequest(StateRequest { min_seq: floor }));
        self.requested = Some(Requested { peer, at: cx.now });
    }

    /// A peer asks for our state: answer with chunks if our stable checkpoint
    /// is recent enough, at most once per status interval per peer.
    pub fn on_request(
        &mut self,
        cx: &mut Cx,
        from: ReplicaId,
        req: StateRequest,
        stable: Option<(&CheckpointCert, &Bytes)>,
    ) {
        let Some((cert, snapshot)) = stable else {
            return;
        };
        if cert.seq < req.min_seq {
            return;
        }
        let interval = self.cfg.params.status_interval_ms;
        let Some(slot) = self.served.get_mut(from.index()) else {
            return cx.reject("bad-sender");
        };
        if slot.is_some_and(|t| cx.now.0.saturating_sub(t.0) < interval) {
            cx.reject("state-request-rate");
            return;
        }
        *slot = Some(cx.now);
        let size = self.cfg.params.state_chunk_bytes.max(1) as usize;
        let count = snapshot.len().div_ceil(size).max(1);
        if count as u64 > self.max_chunks() {
            cx.reject("snapshot-too-large");
            return;
        }
        for index in 0..count {
            let lo = index * size;
            let hi = (lo + size).min(snapshot.len());
            cx.out.send(
                from,
                ReplicaMsg::StateChunk(StateChunk {
                    cert: cert.clone(),
                    index: index as u32,
                    count: count as u32,
                    data: snapshot.slice(lo..hi),
                }),
            );
        }
    }

    /// A chunk. Returns the whole snapshot once every chunk is in.
    pub fn on_chunk(
        &mut self,
        cx: &mut Cx,
        from: ReplicaId,
        chunk: StateChunk,
        next: Seq,
    ) -> Option<(CheckpointCert, Bytes)> {
        if self.installing.is_some() {
            cx.counters.reject("state-busy");
            return None;
        }
        if chunk.cert.seq < self.floor(next) {
            cx.counters.stale += 1;
            return None;
        }
        if chunk.count == 0 || chunk.index >= chunk.count || chunk.count as u64 > self.max_chunks() {
            cx.reject("bad-chunk-index");
            return None;
        }
        if chunk.data.len() > self.cfg.params.state_chunk_bytes as usize {
            cx.reject("chunk-too-large");
            return None;
        }
        let same = self.incoming.as_ref().is_some_and(|i| {
            i.source == from
                && i.cert.seq == chunk.cert.seq
                && i.cert.state_digest == chunk.cert.state_digest
                && i.chunks.len() == chunk.count as usize
        });
        if !same {
            if self.requested.as_ref().is_none_or(|r| r.peer != from) {
                cx.reject("unsolicited-state");
                return None;
            }
            if self
                .incoming
                .as_ref()
                .is_some_and(|i| i.cert.seq >= chunk.cert.seq)
            {
                cx.reject("state-chunk-mismatch");
                return None;
            }
            if let Err(reason) = verify_checkpoint_cert(&self.cfg, &chunk.cert) {
                cx.reject(reason);
                return None;
            }
            self.incoming = Some(Incoming {
                cert: chunk.cert.clone(),
                source: from,
                chunks: vec![None; chunk.count as usize],
                received: 0,
                bytes: 0,
            });
        }
        let inc = self.incoming.as_mut()?;
        let slot = &mut inc.chunks[chunk.index as usize];
        if slot.is_some() {
            return None;
        }
        inc.bytes += chunk.data.len() as u64;
        if inc.bytes > MAX_STATE_BYTES {
            cx.reject("snapshot-too-large");
            self.incoming = None;
            return None;
        }
        *slot = Some(chunk.data);
        inc.received += 1;
        if inc.received < inc.chunks.len() {
            return None;
        }
        let inc = self.incoming.take()?;
        self.requested = None;
        let mut buf = BytesMut::with_capacity(inc.bytes as usize);
        for c in inc.chunks.into_iter().flatten() {
            buf.extend_from_slice(&c);
        }
        let snapshot = buf.freeze();
        self.installing = Some(Installing {
            cert: inc.cert.clone(),
            snapshot: snapshot.clone(),
            source: inc.source,
        });
        Some((inc.cert, snapshot))
    }

    /// The driver installed a snapshot and computed its state digest.
    pub fn on_installed(&mut self, seq: Seq, state_digest: chorus_core::Digest) -> Installed {
        let Some(Installing {
            cert,
            snapshot,
            source,
        }) = self.installing.take()
        else {
            return Installed::NotOurs;
        };
        if cert.seq == seq && cert.state_digest == state_digest {
            self.known_cert = None;
            Installed::Done(cert, snapshot)
        } else {
            // A valid certificate with bytes that do not match it: the
            // sender lied. Ask the others first from now on.
            self.blame(source);
            Installed::Mismatch
        }
    }
}
