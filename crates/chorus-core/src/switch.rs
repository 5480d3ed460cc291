//! RCC §III-E `SWITCHINSTANCE(c, j)`: which instance (lane) proposes a
//! client's requests, as a pure function of delivered history.
//!
//! A client asks to move to instance `j` with a request flagged
//! [`flags::SWITCH_INSTANCE`] whose op is `j`
//! (u32 LE). The request is proposed in lane `j` (never by the old owner,
//! which may be the censor). Once it is delivered at round `r`, every
//! correct replica knows it at the same round, so one boundary suffices
//! (the paper's `ρ+σ`, `ρ+2σ`, `ρ+3σ` exist because replicas disagree on
//! `ρ(m,R)`; see docs/decisions.md "RCC SWITCHINSTANCE"):
//! the old owner owns rounds `<= r + σ`, the new one rounds `> r + σ`.
//!
//! The ordering layer and the executor both apply [`Assignments::apply`] to
//! every delivered switch, so both hold the same table; the executor's copy
//! travels in its snapshot (covered by the state digest), which is how a
//! replica that installs a snapshot gets the table back
//! ([`Assignments::from_exec_snapshot`]).

use crate::ids::{ClientId, LaneId, RequestSeq, Slot};
use crate::request::{flags, Request};
use crate::Digest;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The cluster constants the hand-over rule needs: `m` and `σ`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SwitchPolicy {
    /// The number of instances `m` (lanes).
    pub lanes: u32,
    /// `max_lane_drift_slots`: a correct primary never proposes a round more
    /// than σ above the rounds it delivered.
    pub sigma: u64,
}

impl SwitchPolicy {
    /// The policy of an `rcc` cluster; `None` in every other mode (no
    /// switch is ever ordered there).
    pub fn of(cfg: &crate::ClusterConfig) -> Option<SwitchPolicy> {
        (cfg.params.mode == crate::OrderingMode::Rcc).then(|| SwitchPolicy {
            lanes: cfg.lanes(),
            sigma: cfg.params.max_lane_drift_slots,
        })
    }

    /// The round a delivered position belongs to (RCC: round `r` is
    /// delivered at positions `r*m .. r*m + m`).
    pub fn round_of(&self, position: u64) -> u64 {
        position / self.lanes.max(1) as u64
    }

    /// A client's owner before any switch (RCC §III-E: `c mod m`).
    pub fn default_owner(&self, client: ClientId) -> LaneId {
        LaneId((client.0 % self.lanes.max(1) as u64) as u32)
    }
}

/// The last accepted switch of one client.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handover {
    pub from: u32,
    pub to: u32,
    /// The round the switch was delivered in.
    pub round: u64,
    /// The switch request's seq: older switches are never applied again.
    pub seq: RequestSeq,
}

/// Why a delivered switch changed nothing (every correct replica agrees).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SwitchOutcome {
    Applied(Handover),
    /// Not a switch request, or its op is not a target below `m`.
    BadTarget,
    /// The client already is owned by the target.
    AlreadyOwner,
    /// Not newer than the client's last delivered switch, applied or
    /// refused (a replay).
    Replayed,
    /// The previous hand-over has not taken effect yet (rounds `<= r + σ`
    /// of the last switch): one at a time, so `owner_at` needs only the
    /// last one.
    InProgress,
}

impl SwitchOutcome {
    pub fn name(&self) -> &'static str {
        match self {
            SwitchOutcome::Applied(_) => "applied",
            SwitchOutcome::BadTarget => "bad-target",
            SwitchOutcome::AlreadyOwner => "already-owner",
            SwitchOutcome::Replayed => "replayed",
            SwitchOutcome::InProgress => "in-progress",
        }
    }

    /// The executor's reply to the switch request: the same bytes on every
    /// correct replica, so the client collects f+1 matching ones.
    pub fn reply(&self) -> Bytes {
        match self {
            SwitchOutcome::Applied(h) => Bytes::from(format!("{SWITCHED_PREFIX}{}", h.to)),
            other => Bytes::from(format!("{SWITCH_REFUSED_PREFIX}{}", other.name())),
        }
    }
}

/// Reply of an applied switch: the prefix, then the new instance in decimal.
pub const SWITCHED_PREFIX: &str = "\0chorus/switched-to: ";
/// Reply of a switch that changed nothing: the prefix, then why.
pub const SWITCH_REFUSED_PREFIX: &str = "\0chorus/switch-refused: ";

/// The target of a switch request: its op is exactly a u32 LE.
pub fn switch_target(req: &Request) -> Option<u32> {
    if req.flags & flags::SWITCH_INSTANCE == 0 {
        return None;
    }
    let b: [u8; 4] = req.op.as_ref().try_into().ok()?;
    Some(u32::from_le_bytes(b))
}

/// The op of a switch to instance `target`.
pub fn switch_op(target: u32) -> Bytes {
    Bytes::copy_from_slice(&target.to_le_bytes())
}

/// Client → last accepted switch. One entry per client that ever switched:
/// bounded by the configured clients (requests of unknown clients are never
/// proposed), so nothing is evicted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignments {
    map: BTreeMap<ClientId, Handover>,
    /// The highest seq of any delivered switch of each client, applied or
    /// refused: a switch the cluster once refused (in progress, already
    /// owner) can never be ordered again later by a Byzantine primary of its
    /// target to move the client behind its back. Bounded like `map`.
    seen: BTreeMap<ClientId, RequestSeq>,
}

impl Assignments {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Nothing recorded at all (then an executor snapshot keeps its
    /// version-1 bytes).
    pub fn is_empty(&self) -> bool {
        self.map.is_empty() && self.seen.is_empty()
    }

    pub fn get(&self, client: ClientId) -> Option<&Handover> {
        self.map.get(&client)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&ClientId, &Handover)> {
        self.map.iter()
    }

    /// The client's owner after every delivered switch (the one a correct
    /// primary proposes for: the old one stops at once, RCC §III-E).
    pub fn owner(&self, p: &SwitchPolicy, client: ClientId) -> LaneId {
        self.map
            .get(&client)
            .map_or_else(|| p.default_owner(client), |h| LaneId(h.to))
    }

    /// The lane allowed to propose the client's requests in `round`.
    pub fn owner_at(&self, p: &SwitchPolicy, client: ClientId, round: Slot) -> LaneId {
        match self.map.get(&client) {
            None => p.default_owner(client),
            Some(h) if round.0 <= h.round.saturating_add(p.sigma) => LaneId(h.from),
            Some(h) => LaneId(h.to),
        }
    }

    /// Apply a switch request delivered in `round`. Deterministic in the
    /// table and its arguments only (not in the client table's exactly-once
    /// verdict, which the ordering layer does not see).
    pub fn apply(&mut self, p: &SwitchPolicy, req: &Request, round: u64) -> SwitchOutcome {
        let Some(to) = switch_target(req).filter(|t| *t < p.lanes) else {
            return SwitchOutcome::BadTarget;
        };
        if self.seen.get(&req.client).is_some_and(|s| req.seq <= *s) {
            return SwitchOutcome::Replayed;
        }
        self.seen.insert(req.client, req.seq);
        if let Some(h) = self.map.get(&req.client) {
            debug_assert!(req.seq > h.seq, "an applied switch's seq is in `seen`");
            if round <= h.round.saturating_add(p.sigma) {
                return SwitchOutcome::InProgress;
            }
        }
        let from = self.owner(p, req.client).0;
        if from == to {
            return SwitchOutcome::AlreadyOwner;
        }
        let h = Handover {
            from,
            to,
            round,
            seq: req.seq,
        };
        self.map.insert(req.client, h);
        SwitchOutcome::Applied(h)
    }

    pub fn digest(&self) -> Digest {
        let bytes = postcard::to_allocvec(self).expect("encoding the assignment table cannot fail");
        Digest::of_parts("chorus rcc assignments v1", &[&bytes])
    }

    /// The table at the front of an executor snapshot. `chorus-exec`'s
    /// snapshot starts with its version byte and then this table
    /// ([`EXEC_SNAPSHOT_VERSION`]), so the ordering layer reads it back
    /// without knowing the rest of the format. `None` if the bytes do not
    /// start that way (a version 1 snapshot, written while the table is
    /// empty, starts with the byte 1).
    /// The bytes an executor snapshot of this table begins with.
    pub fn exec_snapshot_head(&self) -> Vec<u8> {
        postcard::to_allocvec(&(EXEC_SNAPSHOT_VERSION, self))
            .expect("encoding the assignment table cannot fail")
    }

    pub fn from_exec_snapshot(snapshot: &[u8]) -> Option<Assignments> {
        let ((version, table), _): ((u8, Assignments), _) = postcard::take_from_bytes(snapshot).ok()?;
        EXEC_SNAPSHOT_VERSIONS_WITH_TABLE
            .contains(&version)
            .then_some(table)
    }
}

/// The executor snapshot version written now; it begins with the assignment
/// table. Version 3 (issue 17) added the agreed time after the table.
pub const EXEC_SNAPSHOT_VERSION: u8 = 3;

/// Every executor snapshot version that begins with the assignment table
/// (2 is still read: stored snapshots from before version 3).
pub const EXEC_SNAPSHOT_VERSIONS_WITH_TABLE: [u8; 2] = [2, EXEC_SNAPSHOT_VERSION];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Authenticator;

    fn switch(client: u64, seq: u64, to: u32) -> Request {
        Request {
            memo: Default::default(),
            client: ClientId(client),
            seq: RequestSeq(seq),
            flags: flags::SWITCH_INSTANCE,
            op: switch_op(to),
            auth: Authenticator::Macs(Default::default()),
        }
    }

    const P: SwitchPolicy = SwitchPolicy { lanes: 4, sigma: 3 };

    /// Review of SWITCHINSTANCE, finding 3: a switch the cluster refused
    /// while a hand-over was in progress must not be applied when a
    /// Byzantine primary of its target orders it again later.
    #[test]
    fn a_refused_switch_ordered_again_later_is_a_replay() {
        let mut t = Assignments::default();
        assert!(matches!(
            t.apply(&P, &switch(1, 5, 2), 10),
            SwitchOutcome::Applied(_)
        ));
        assert_eq!(t.apply(&P, &switch(1, 6, 3), 12), SwitchOutcome::InProgress);
        assert_eq!(t.apply(&P, &switch(1, 6, 3), 40), SwitchOutcome::Replayed);
        assert_eq!(t.owner(&P, ClientId(1)), LaneId(2));
        // The refusal is replicated state: the snapshot head carries it.
        let back = Assignments::from_exec_snapshot(&t.exec_snapshot_head()).unwrap();
        assert_eq!(back, t);
        let mut fresh = Assignments::default();
        assert!(matches!(
            fresh.apply(&P, &switch(2, 1, 2), 1),
            SwitchOutcome::AlreadyOwner
        ));
        assert!(!fresh.is_empty(), "a refused switch is recorded");
    }

    #[test]
    fn ownership_moves_after_sigma_rounds_and_only_once_at_a_time() {
        let mut t = Assignments::default();
        let c = ClientId(1);
        assert_eq!(t.owner(&P, c), LaneId(1));
        assert!(matches!(
            t.apply(&P, &switch(1, 5, 2), 10),
            SwitchOutcome::Applied(_)
        ));
        assert_eq!(t.owner(&P, c), LaneId(2));
        assert_eq!(t.owner_at(&P, c, Slot(13)), LaneId(1));
        assert_eq!(t.owner_at(&P, c, Slot(14)), LaneId(2));
        assert_eq!(t.apply(&P, &switch(1, 5, 3), 20), SwitchOutcome::Replayed);
        assert_eq!(t.apply(&P, &switch(1, 6, 3), 13), SwitchOutcome::InProgress);
        assert_eq!(t.apply(&P, &switch(1, 7, 2), 14), SwitchOutcome::AlreadyOwner);
        assert_eq!(t.apply(&P, &switch(1, 8, 4), 14), SwitchOutcome::BadTarget);
        assert!(matches!(
            t.apply(&P, &switch(1, 8, 1), 14),
            SwitchOutcome::Applied(_)
        ));
        assert_eq!(t.owner_at(&P, c, Slot(17)), LaneId(2));
        assert_eq!(t.owner_at(&P, c, Slot(18)), LaneId(1));
    }

    #[test]
    fn the_table_is_read_back_from_the_front_of_an_exec_snapshot() {
        let mut t = Assignments::default();
        t.apply(&P, &switch(1, 5, 2), 10);
        let bytes = postcard::to_allocvec(&(EXEC_SNAPSHOT_VERSION, &t, 42u64)).unwrap();
        assert_eq!(Assignments::from_exec_snapshot(&bytes), Some(t.clone()));
        let old = postcard::to_allocvec(&(1u8, &t)).unwrap();
        assert_eq!(Assignments::from_exec_snapshot(&old), None);
    }
}
