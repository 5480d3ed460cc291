//! Building blocks for tests: configurations, signed messages, action filters.

// Under the weak-quorum feature only the fuzz tests use this module.
#![cfg_attr(feature = "weak-quorum-for-tests", allow(dead_code))]

use crate::io::{Action, Outbox, PersistRecord, TimerId};
use bytes::Bytes;
use chorus_core::{
    Batch, CheckpointCert, CheckpointVote, ClientId, ClusterConfig, ClusterTag, Commit, Digest, Identity,
    LaneId, LeaderRotation, OrderingMode, PrePrepare, Prepare, PreparedCert, ProtocolParams, ReplicaId,
    ReplicaMsg, Request, RequestSeq, Seq, SigKind, Signature, Slot, View,
};
use std::sync::Arc;

pub struct Setup {
    pub cfg: Arc<ClusterConfig>,
    pub keys: Vec<Identity>,
    pub clients: Vec<Identity>,
}

pub fn params(mode: OrderingMode, pillars: u32) -> ProtocolParams {
    ProtocolParams {
        mode,
        pillars,
        leader_rotation: LeaderRotation::BlockWise,
        batch_max_requests: 4,
        batch_delay_ms: 1,
        window_slots: 16,
        checkpoint_interval: 4 * pillars as u64,
        max_lane_drift_slots: 8,
        view_change_timeout_ms: 400,
        status_interval_ms: 50,
        future_msgs_per_peer: 64,
        state_chunk_bytes: 64,
        ..ProtocolParams::default()
    }
}

pub fn setup(n: usize, clients: usize, p: ProtocolParams) -> Setup {
    let (cfg, keys, clients) = ClusterConfig::for_testing(n, clients, p, 42);
    cfg.validate().expect("test config is valid");
    Setup {
        cfg: Arc::new(cfg),
        keys,
        clients,
    }
}

impl Setup {
    /// The cluster binding every signature and authenticator of this setup uses.
    pub fn tag(&self) -> ClusterTag {
        ClusterTag::of(&self.cfg)
    }

    /// Replica `signer`'s signature on a `kind` message of this cluster.
    pub fn sign(&self, signer: u32, kind: SigKind, digest: &Digest) -> Signature {
        self.keys[signer as usize].sign_bound(&self.tag(), kind, digest)
    }

    /// Replica `signer`'s signed timeout for `lane` up to `view`.
    pub fn timeout(&self, signer: u32, lane: u32, view: u64) -> chorus_core::Timeout {
        timeout_for(&self.cfg, signer, lane, view)
    }

    /// Lane 0's NEW-VIEW for `view`, signed by `primary`, built from the
    /// VIEW-CHANGEs of `senders` that carry `stable` and nothing prepared.
    pub fn new_view_from_checkpoint(
        &self,
        view: u64,
        primary: u32,
        senders: &[u32],
        stable: &CheckpointCert,
    ) -> chorus_core::NewView {
        let vcs: Vec<chorus_core::ViewChange> = senders
            .iter()
            .map(|&i| self.view_change(i, view, Some(stable.clone()), vec![]))
            .collect();
        let plan = crate::lane::plan_new_view(&self.cfg, &vcs).expect("decidable");
        let mut nv = chorus_core::NewView {
            lane: LaneId(0),
            view: View(view),
            view_changes: vcs,
            reproposals: plan.reproposals,
            replica: ReplicaId(primary),
            sig: Signature([0; 64]),
            excluded: Vec::new(),
        };
        nv.sig = self.sign(primary, SigKind::NewView, &nv.signing_digest());
        nv
    }

    /// `Decided` records of lane 0's `slots`, each with a one-request batch.
    pub fn decided_records(&self, slots: std::ops::Range<u64>) -> Vec<crate::io::PersistRecord> {
        slots
            .map(|slot| {
                let batch = self.batch(0, slot..slot + 1);
                crate::io::PersistRecord::Decided {
                    cell: chorus_core::Cell {
                        lane: LaneId(0),
                        slot: Slot(slot),
                    },
                    digest: batch.digest(),
                    batch: Arc::new(batch),
                }
            })
            .collect()
    }

    /// Replica `replica`'s signed VIEW-CHANGE of lane 0 to `view`.
    pub fn view_change(
        &self,
        replica: u32,
        view: u64,
        stable: Option<chorus_core::CheckpointCert>,
        prepared: Vec<chorus_core::PreparedCert>,
    ) -> chorus_core::ViewChange {
        let mut vc = chorus_core::ViewChange {
            lane: LaneId(0),
            new_view: View(view),
            stable,
            prepared,
            pre_prepared: vec![],
            replica: ReplicaId(replica),
            sig: Signature([0; 64]),
        };
        vc.sig = self.sign(replica, SigKind::ViewChange, &vc.signing_digest());
        vc
    }

    pub fn request(&self, client: usize, seq: u64, op: &[u8]) -> Request {
        let macs: Vec<_> = self
            .keys
            .iter()
            .map(|r| self.clients[client].pairwise_key(&r.public()))
            .collect();
        Request::with_macs(
            &self.tag(),
            ClientId(client as u64),
            RequestSeq(seq),
            0,
            Bytes::copy_from_slice(op),
            &macs,
        )
    }

    pub fn pre_prepare(&self, signer: u32, lane: u32, view: u64, slot: u64, batch: &Batch) -> PrePrepare {
        let digest = batch.digest();
        let sd = PrePrepare::signing_digest(LaneId(lane), View(view), Slot(slot), &digest);
        PrePrepare {
            lane: LaneId(lane),
            view: View(view),
            slot: Slot(slot),
            digest,
            batch: batch.clone(),
            sig: self.sign(signer, SigKind::PrePrepare, &sd),
        }
    }

    pub fn prepare(&self, replica: u32, lane: u32, view: u64, slot: u64, digest: Digest) -> Prepare {
        let sd = Prepare::signing_digest(LaneId(lane), View(view), Slot(slot), &digest, ReplicaId(replica));
        Prepare {
            lane: LaneId(lane),
            view: View(view),
            slot: Slot(slot),
            digest,
            replica: ReplicaId(replica),
            sig: self.sign(replica, SigKind::Prepare, &sd),
        }
    }

    pub fn commit(&self, replica: u32, lane: u32, view: u64, slot: u64, digest: Digest) -> Commit {
        Commit {
            lane: LaneId(lane),
            view: View(view),
            slot: Slot(slot),
            digest,
            replica: ReplicaId(replica),
        }
    }

    pub fn vote(&self, replica: u32, seq: u64, state_digest: Digest) -> CheckpointVote {
        let sd = CheckpointVote::signing_digest(Seq(seq), &state_digest, ReplicaId(replica));
        CheckpointVote {
            seq: Seq(seq),
            state_digest,
            replica: ReplicaId(replica),
            sig: self.sign(replica, SigKind::Checkpoint, &sd),
        }
    }

    pub fn checkpoint_cert(&self, seq: u64, state_digest: Digest, voters: &[u32]) -> CheckpointCert {
        CheckpointCert {
            seq: Seq(seq),
            state_digest,
            votes: voters.iter().map(|r| self.vote(*r, seq, state_digest)).collect(),
        }
    }

    /// A prepared certificate signed by `leader` with prepares from `preparers`.
    pub fn prepared_cert(
        &self,
        leader: u32,
        lane: u32,
        view: u64,
        slot: u64,
        batch: &Batch,
        preparers: &[u32],
    ) -> PreparedCert {
        let pp = self.pre_prepare(leader, lane, view, slot, batch);
        PreparedCert {
            lane: LaneId(lane),
            view: View(view),
            slot: Slot(slot),
            digest: pp.digest,
            pre_prepare_sig: pp.sig,
            prepares: preparers
                .iter()
                .map(|r| self.prepare(*r, lane, view, slot, pp.digest))
                .collect(),
        }
    }

    pub fn batch(&self, client: usize, seqs: std::ops::Range<u64>) -> Batch {
        Batch {
            requests: seqs
                .map(|s| self.request(client, s, format!("op{s}").as_bytes()))
                .collect(),
            time_ms: 0,
        }
    }
}

/// Actions other than timers (what goes on the wire, to storage, to the executor).
pub fn effects(out: &mut Outbox) -> Vec<Action> {
    out.drain()
        .filter(|a| !matches!(a, Action::SetTimer { .. } | Action::CancelTimer { .. }))
        .collect()
}

pub fn timers(out: &Outbox) -> Vec<(TimerId, Option<chorus_core::Millis>)> {
    out.actions
        .iter()
        .filter_map(|a| match a {
            Action::SetTimer { id, at } => Some((*id, Some(*at))),
            Action::CancelTimer { id } => Some((*id, None)),
            _ => None,
        })
        .collect()
}

pub fn broadcasts(actions: &[Action]) -> Vec<ReplicaMsg> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Broadcast { msg } => Some(msg.clone()),
            _ => None,
        })
        .collect()
}

pub fn sends(actions: &[Action]) -> Vec<(ReplicaId, ReplicaMsg)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send { to, msg } => Some((*to, msg.clone())),
            _ => None,
        })
        .collect()
}

pub fn persists(actions: &[Action]) -> Vec<PersistRecord> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Persist(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

/// Short names of actions, for asserting order.
pub fn kinds(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .map(|a| match a {
            Action::Send { to, msg } => format!("send {} to {}", msg.kind(), to.0),
            Action::Broadcast { msg } => format!("broadcast {}", msg.kind()),
            Action::Deliver { seq, .. } => format!("deliver {}", seq.0),
            Action::DeliverStream { cell, .. } => {
                format!("deliver stream {} slot {}", cell.lane.0, cell.slot.0)
            }
            Action::SetTimer { id, .. } => format!("set {id:?}"),
            Action::CancelTimer { id } => format!("cancel {id:?}"),
            Action::Persist(r) => match r {
                PersistRecord::View { .. } => "persist view".into(),
                PersistRecord::Accepted { .. } => "persist accepted".into(),
                PersistRecord::Prepared { .. } => "persist prepared".into(),
                PersistRecord::Decided { .. } => "persist decided".into(),
                PersistRecord::Stable { .. } => "persist stable".into(),
                PersistRecord::DispelSnapshot { low, .. } => format!("persist dispel-snapshot {low}"),
                PersistRecord::DispelInput { .. } => "persist dispel-input".into(),
                PersistRecord::TimeoutCert { .. } => "persist timeout-cert".into(),
            },
            Action::TakeCheckpoint { seq } => format!("take checkpoint {}", seq.0),
            Action::FindMissingCopies => "find missing copies".into(),
            Action::InstallState { cert, .. } => format!("install state {}", cert.seq.0),
            Action::Reject { reason, .. } => format!("reject {reason:?}"),
        })
        .collect()
}

/// A fresh replica `me` of the setup's cluster at time 0.
pub fn replica(s: &Setup, me: u32) -> crate::replica::Replica {
    let mut out = Outbox::new();
    crate::replica::Replica::new(
        s.cfg.clone(),
        chorus_core::ReplicaId(me),
        s.keys[me as usize].clone(),
        chorus_core::Millis(0),
        &mut out,
    )
}

/// Feed one event to `r` at `now` ms and return what it emitted.
pub fn handle(r: &mut crate::replica::Replica, now: u64, ev: crate::io::Event) -> Vec<Action> {
    let mut out = Outbox::new();
    r.handle(chorus_core::Millis(now), ev, &mut out);
    effects(&mut out)
}

/// `handle` for a message from replica `from`.
pub fn msg(r: &mut crate::replica::Replica, now: u64, from: u32, m: chorus_core::ReplicaMsg) -> Vec<Action> {
    handle(
        r,
        now,
        crate::io::Event::Message {
            from: chorus_core::ReplicaId(from),
            msg: m,
        },
    )
}

/// Peer `from` and, with it, 2f peers in all (the next replica ids that are
/// neither ours nor `from`) gave up on `view` of `lane`: each sends its
/// signed timeout (`lane/timeout_cert.rs`), and `from` reports its first
/// undecided slot `next_undecided` in a `Status`. With our own expired
/// timer that is a timeout certificate: the view changes.
pub fn peer_gave_up(
    r: &mut crate::replica::Replica,
    now: u64,
    from: u32,
    lane: u32,
    view: u64,
    next_undecided: u64,
) -> Vec<Action> {
    let cfg = r.config().clone();
    let me = r.me().0;
    let mut out = msg(
        r,
        now,
        from,
        chorus_core::ReplicaMsg::Status(chorus_core::Status {
            lane: chorus_core::LaneId(lane),
            view: chorus_core::View(view),
            next_undecided: chorus_core::Slot(next_undecided),
            stable_seq: chorus_core::Seq(0),
            suspects: true,
            awaits_new_view: false,
        }),
    );
    let others = (0..cfg.n() as u32).filter(|i| *i != me && *i != from);
    for signer in std::iter::once(from).chain(others).take(2 * cfg.f()) {
        let t = timeout_for(&cfg, signer, lane, view);
        out.extend(msg(r, now, signer, ReplicaMsg::Timeout(t)));
    }
    out
}

/// `timeout` for a given configuration (its cluster tag binds the signature).
pub fn timeout_for(cfg: &ClusterConfig, signer: u32, lane: u32, view: u64) -> chorus_core::Timeout {
    let key = Identity::from_seed(format!("replica/42/{signer}").as_bytes());
    let mut t = chorus_core::Timeout {
        lane: LaneId(lane),
        view: View(view),
        replica: ReplicaId(signer),
        sig: Signature([0; 64]),
    };
    t.sig = key.sign_bound(&ClusterTag::of(cfg), SigKind::Timeout, &t.signing_digest());
    t
}
