//! Rebuilding a lane from its persisted records (in the order emitted).
//!
//! Recovery must never make a correct replica contradict itself: every
//! pre-prepare and prepare it sent was preceded by an `Accepted` record, every
//! commit by a `Prepared` record, every view change by a `View` record. So
//! after recovery the lane knows, for each (view, slot), what it sent, and the
//! normal handlers refuse anything else. Signatures are re-created on demand;
//! Ed25519 is deterministic, so they are byte-identical to the originals.
//!
//! A lane that recovers into a view `v > 0` does not know whether it had
//! already installed `v` (NEW-VIEW is not persisted), so it behaves as if its
//! view change to `v` were still in progress: it re-sends its VIEW-CHANGE
//! (built from certificates of views below `v`, exactly as before) and waits
//! for the NEW-VIEW that peers already in `v` send back. It never assembles a
//! NEW-VIEW for `v` itself: it may have sent one before the crash.

use super::slot::Accepted;
use super::{Decision, Lane, LaneEnv, LaneOutput};
use crate::counters::Cx;
use crate::io::PersistRecord;
use chorus_core::{Batch, Digest, Millis, PreparedCert, Slot, View};
use std::sync::Arc;

/// A persisted record of a slot above the window recovery replayed into.
/// The window it was written in started at the low watermark of that moment,
/// which may be above any replayed one: a NEW-VIEW moves the low to its
/// checkpoint without a `Stable` record (the snapshot comes later, by state
/// transfer). Dropping such a record forgot a pre-prepare we had sent, and
/// after the restart we proposed that slot again with another batch: a fork
/// (rcc n=4 seed 11383). So it waits until the window reaches its slot (the
/// re-learnt NEW-VIEW moves the low again) and is applied before anything
/// else can touch the slot: until then the slot is outside the window, so
/// nothing is proposed, prepared or accepted there.
#[derive(Clone, Debug)]
pub(crate) enum Deferred {
    Accepted {
        view: View,
        digest: Digest,
        batch: Arc<Batch>,
    },
    Prepared(PreparedCert),
    /// A slot decided before the crash: a fact, so once the window reaches
    /// it the batch goes to the merger (dropping it only cost liveness: the
    /// slot was decided again or fetched, if peers still held it).
    Decided {
        digest: Digest,
        batch: Arc<Batch>,
    },
}

impl Lane {
    fn in_window(&self, slot: Slot) -> bool {
        slot >= self.low && slot < self.high()
    }

    /// A record outside the window: one below it is covered by a stable
    /// checkpoint (only the view it was written in still counts), one above
    /// waits for the window.
    fn defer(&mut self, slot: Slot, d: Deferred) {
        if slot < self.low {
            match &d {
                Deferred::Accepted { view, .. } => self.restore_view(*view),
                Deferred::Prepared(cert) => self.restore_view(cert.view),
                Deferred::Decided { .. } => {}
            }
        } else if slot >= self.high() {
            self.recovered_above.entry(slot).or_default().push(d);
        }
    }

    /// The window moved: apply the deferred records it now covers (in the
    /// order they were written), drop those a stable checkpoint covers.
    pub(crate) fn apply_recovered_above(&mut self) {
        if self.recovered_above.is_empty() {
            return;
        }
        self.recovered_above = self.recovered_above.split_off(&self.low);
        let rest = self.recovered_above.split_off(&self.high());
        let now_in = std::mem::replace(&mut self.recovered_above, rest);
        for (slot, records) in now_in {
            for d in records {
                match d {
                    Deferred::Accepted { view, digest, batch } => {
                        self.restore_accepted(Millis(0), view, slot, digest, batch)
                    }
                    Deferred::Prepared(cert) => self.restore_prepared(cert),
                    Deferred::Decided { digest, batch } => {
                        if let Some(batch) = self.restore_decided(slot, digest, batch) {
                            self.recovered_decisions.push(Decision { slot, digest, batch });
                        }
                    }
                }
            }
        }
    }

    pub(crate) fn restore_view(&mut self, view: View) {
        if view.0 < super::MAX_VIEW && view > self.view {
            self.view = view;
        }
    }

    /// The statements of a timeout certificate we left a view on. Checked
    /// again: a data directory kept across a key or cluster-id change holds
    /// statements no peer accepts, and our own stale one would stop us from
    /// signing a valid one (`give_up`).
    pub(crate) fn restore_timeouts(&mut self, statements: Vec<chorus_core::Timeout>) {
        for t in statements {
            if t.lane != self.id || t.view.0 >= super::MAX_VIEW {
                continue;
            }
            let valid = self.key(t.replica).is_some_and(|k| {
                k.verify_bound(
                    &self.tag,
                    chorus_core::SigKind::Timeout,
                    &t.signing_digest(),
                    &t.sig,
                )
            });
            if !valid {
                tracing::warn!(lane = ?self.id, replica = ?t.replica, "stored timeout statement does not verify; dropped");
                continue;
            }
            let Some(held) = self.timeouts.get_mut(t.replica.index()) else {
                continue;
            };
            if held.as_ref().is_none_or(|h| h.view < t.view) {
                *held = Some(t);
            }
        }
    }

    pub(crate) fn restore_accepted(
        &mut self,
        now: Millis,
        view: View,
        slot: Slot,
        digest: Digest,
        batch: Arc<Batch>,
    ) {
        if batch.digest() != digest {
            return;
        }
        if !self.in_window(slot) {
            return self.defer(slot, Deferred::Accepted { view, digest, batch });
        }
        self.restore_view(view);
        let mac = self.cfg.params.prepare_auth == chorus_core::PrepareAuth::Mac;
        let st = self.slot_mut(slot);
        if mac {
            st.note_pre_prepared(digest, view);
        }
        if st.pp.as_ref().is_some_and(|p| p.view > view) {
            return;
        }
        st.store_batch(digest, batch);
        st.pp = Some(Accepted {
            view,
            digest,
            proposer: None,
            sig: None,
            at: now,
        });
        self.note_seen(slot);
    }

    pub(crate) fn restore_prepared(&mut self, cert: PreparedCert) {
        if !self.in_window(cert.slot) {
            return self.defer(cert.slot, Deferred::Prepared(cert));
        }
        self.restore_view(cert.view);
        let st = self.slot_mut(cert.slot);
        if st.cert.as_ref().is_none_or(|c| c.view < cert.view) {
            st.cert = Some(cert);
        }
    }

    /// Returns the batch for the merger; a slot above the window waits for
    /// it (`defer`), as `Accepted` and `Prepared` records do.
    pub(crate) fn restore_decided(
        &mut self,
        slot: Slot,
        digest: Digest,
        batch: Arc<Batch>,
    ) -> Option<Arc<Batch>> {
        if batch.digest() != digest {
            return None;
        }
        if !self.in_window(slot) {
            self.defer(slot, Deferred::Decided { digest, batch });
            return None;
        }
        if self.slots.get(&slot).is_some_and(|s| s.decided.is_some()) {
            debug_assert_eq!(self.slots.get(&slot).and_then(|s| s.decided), Some(digest));
            return None;
        }
        let st = self.slot_mut(slot);
        st.store_batch(digest, batch.clone());
        st.decided = Some(digest);
        self.note_seen(slot);
        self.advance_next_undecided();
        Some(batch)
    }

    /// All records applied: resume in view 0, or re-join the recovered view.
    pub(crate) fn finish_recovery(&mut self, cx: &mut Cx, env: &LaneEnv) -> LaneOutput {
        let mut lo = LaneOutput::default();
        lo.decided.append(&mut self.recovered_decisions);
        self.advance_next_undecided();
        self.view_started = cx.now;
        // Our peers' progress is unknown until their statuses arrive; our
        // restored pre-prepares may have been decided long ago (`timer.rs`).
        self.awaiting_peers = true;
        if self.view.0 == 0 {
            self.active = true;
            self.resolve_roles();
            self.leave_on_restored_certificate(cx, env, &mut lo);
            return lo;
        }
        self.active = false;
        self.nv_forbidden = Some(self.view);
        cx.out.persist(PersistRecord::View {
            lane: self.id,
            view: self.view,
        });
        self.own_vc = None;
        self.send_own_view_change(cx, env);
        // We left the view below before the crash; our signed statement of
        // it was not persisted, so sign it again (`timeout_cert.rs`).
        self.give_up(cx, View(self.view.0 - 1));
        self.leave_on_restored_certificate(cx, env, &mut lo);
        lo
    }

    /// A crash between persisting a timeout certificate and the view record
    /// it led to (`leave_on_certificate` writes them in that order): we hold
    /// a certificate for our restored view, so leave it, as we were about to.
    fn leave_on_restored_certificate(&mut self, cx: &mut Cx, env: &LaneEnv, lo: &mut LaneOutput) {
        if self.certified_timeout().is_some_and(|w| w >= self.view) {
            self.leave_on_certificate(cx, env, lo);
        }
    }
}
