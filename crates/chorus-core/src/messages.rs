//! Replica-to-replica protocol messages and the top-level wire envelope.
//!
//! Messages that are ever forwarded as evidence (pre-prepares and prepares in
//! prepared certificates, checkpoints, view changes, new views) carry an Ed25519
//! signature over a domain-separated digest (DESIGN §6). Commits, status and
//! fetch traffic rely on the authenticated channel: the runtime hands the
//! protocol the channel's peer id, never a claimed one.

use crate::crypto::{Digest, Signature};
use crate::ids::{ClientId, LaneId, ReplicaId, RequestSeq, Seq, Slot, View};
use crate::reprediction::RePredictionVote;
use crate::request::{Batch, Reply, Request};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// PBFT pre-prepare: the leader of a cell binds a batch to (lane, view, slot).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrePrepare {
    pub lane: LaneId,
    pub view: View,
    pub slot: Slot,
    pub digest: Digest,
    pub batch: Batch,
    /// The leader's signature over `PrePrepare::signing_digest`.
    pub sig: Signature,
}

impl PrePrepare {
    pub fn signing_digest(lane: LaneId, view: View, slot: Slot, digest: &Digest) -> Digest {
        Digest::of_parts(
            "chorus pre-prepare v1",
            &[
                &lane.0.to_le_bytes(),
                &view.0.to_le_bytes(),
                &slot.0.to_le_bytes(),
                digest.as_bytes(),
            ],
        )
    }
}

/// PBFT prepare (signed: it is evidence in prepared certificates).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prepare {
    pub lane: LaneId,
    pub view: View,
    pub slot: Slot,
    pub digest: Digest,
    pub replica: ReplicaId,
    pub sig: Signature,
}

impl Prepare {
    pub fn signing_digest(
        lane: LaneId,
        view: View,
        slot: Slot,
        digest: &Digest,
        replica: ReplicaId,
    ) -> Digest {
        Digest::of_parts(
            "chorus prepare v1",
            &[
                &lane.0.to_le_bytes(),
                &view.0.to_le_bytes(),
                &slot.0.to_le_bytes(),
                digest.as_bytes(),
                &replica.0.to_le_bytes(),
            ],
        )
    }
}

/// PBFT commit (channel-authenticated; never forwarded).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commit {
    pub lane: LaneId,
    pub view: View,
    pub slot: Slot,
    pub digest: Digest,
    pub replica: ReplicaId,
}

/// A signed checkpoint vote: "after delivering every position below `seq`, my
/// state digest is `state_digest`".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointVote {
    pub seq: Seq,
    pub state_digest: Digest,
    pub replica: ReplicaId,
    pub sig: Signature,
}

impl CheckpointVote {
    pub fn signing_digest(seq: Seq, state_digest: &Digest, replica: ReplicaId) -> Digest {
        Digest::of_parts(
            "chorus checkpoint v1",
            &[
                &seq.0.to_le_bytes(),
                state_digest.as_bytes(),
                &replica.0.to_le_bytes(),
            ],
        )
    }
}

/// 2f+1 matching checkpoint votes: a stable checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointCert {
    pub seq: Seq,
    pub state_digest: Digest,
    pub votes: Vec<CheckpointVote>,
}

/// Evidence that a batch was prepared in a view: the leader's pre-prepare
/// signature and 2f matching prepares from other replicas.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedCert {
    pub lane: LaneId,
    pub view: View,
    pub slot: Slot,
    pub digest: Digest,
    pub pre_prepare_sig: Signature,
    pub prepares: Vec<Prepare>,
}

/// A VIEW-CHANGE's claim "I pre-prepared `digest` at `slot` in `view`"
/// (the Q set of Castro & Liskov's view change without signed prepares):
/// the highest view per digest, used only under `PrepareAuth::Mac`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrePrepared {
    pub slot: Slot,
    pub digest: Digest,
    pub view: View,
}

/// Q entries a VIEW-CHANGE may carry per slot: the digests a replica
/// pre-prepared there with the highest views. Bounded so a VIEW-CHANGE stays
/// bounded. An evicted entry is never unsafe (a Q entry only backs a
/// digest), but can leave a slot undecidable (`docs/known-issues.md`).
pub const MAX_PRE_PREPARED_PER_SLOT: usize = 4;

/// PBFT view change for one lane.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewChange {
    pub lane: LaneId,
    pub new_view: View,
    /// The sender's latest stable checkpoint; `None` = genesis.
    pub stable: Option<CheckpointCert>,
    /// One certificate per slot above the checkpoint that the sender prepared
    /// (under `PrepareAuth::Mac` without prepares: a claim, the P set).
    pub prepared: Vec<PreparedCert>,
    /// Under `PrepareAuth::Mac` only: what the sender pre-prepared above the
    /// checkpoint (the Q set), ascending by (slot, digest).
    pub pre_prepared: Vec<PrePrepared>,
    pub replica: ReplicaId,
    pub sig: Signature,
}

impl ViewChange {
    /// Signature covers the whole message except the signature itself.
    pub fn signing_digest(&self) -> Digest {
        let body = (
            self.lane,
            self.new_view,
            &self.stable,
            &self.prepared,
            &self.pre_prepared,
            self.replica,
        );
        let bytes = postcard::to_allocvec(&body).unwrap_or_default();
        Digest::of_parts("chorus view-change v1", &[&bytes])
    }
}

/// One slot re-proposed in a new view: the digest (no-op = empty batch digest).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reproposal {
    pub slot: Slot,
    pub digest: Digest,
}

/// A replica left out of a lane's block-wise leader rotation for slots below
/// `until` of the view a NEW-VIEW starts, after `failures` view changes it was
/// blamed for (RCC §III-C: a failed primary is excluded for a period that
/// doubles with each repeated failure).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exclusion {
    pub replica: ReplicaId,
    pub failures: u32,
    pub until: Slot,
}

/// PBFT new view for one lane, sent by the lane's new-view primary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewView {
    pub lane: LaneId,
    pub view: View,
    pub view_changes: Vec<ViewChange>,
    pub reproposals: Vec<Reproposal>,
    pub replica: ReplicaId,
    pub sig: Signature,
    /// Leaders excluded from the view's rotation (at most f; signed with the
    /// rest, so every replica that enters the view through this NEW-VIEW
    /// computes the same leader for every slot).
    pub excluded: Vec<Exclusion>,
}

impl NewView {
    pub fn signing_digest(&self) -> Digest {
        let body = (
            self.lane,
            self.view,
            &self.view_changes,
            &self.reproposals,
            self.replica,
            &self.excluded,
        );
        let bytes = postcard::to_allocvec(&body).unwrap_or_default();
        Digest::of_parts("chorus new-view v2", &[&bytes])
    }
}

/// Periodic progress report of one lane, used for retransmission and catch-up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub lane: LaneId,
    pub view: View,
    /// First slot not yet decided locally.
    pub next_undecided: Slot,
    /// The sender's stable checkpoint position.
    pub stable_seq: Seq,
    /// The sender's progress timer expired in `view` (active in it, or in
    /// the view change to it) and it waits for a timeout certificate before
    /// it leaves `view`. Informational (unsigned): what counts is the signed
    /// [`Timeout`] (chorus-order `lane/timeout_cert.rs`).
    pub suspects: bool,
    /// The sender is in the view change to `view` but cannot send its
    /// VIEW-CHANGE yet (recovered records wait above its window: chorus-order
    /// `send_own_view_change`): a peer already in `view` re-sends its NEW-VIEW,
    /// as it does for a VIEW-CHANGE of its view.
    pub awaits_new_view: bool,
}

/// One lane's entry of a [`StatusBundle`]: a [`Status`] without the
/// replica-wide stable checkpoint, which the bundle carries once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneProgress {
    pub lane: LaneId,
    pub view: View,
    pub next_undecided: Slot,
    pub suspects: bool,
    pub awaits_new_view: bool,
}

/// The periodic [`Status`] of every lane of one pillar (lanes `l` with
/// `l mod pillars` equal), sent once per peer per status interval. With one
/// lane per replica (RCC) per-lane statuses cost n³ messages per interval
/// (`docs/known-issues.md`: at n = 61, 673 k of 3.57 M messages); bundles
/// cost n² per pillar. Grouped by pillar so each bundle travels on, and is
/// handled by, the pillar that owns its lanes (COP §4). Lanes ascend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusBundle {
    pub stable_seq: Seq,
    pub lanes: Vec<LaneProgress>,
}

impl StatusBundle {
    /// Each entry as the per-lane [`Status`] it stands for.
    pub fn statuses(&self) -> impl Iterator<Item = Status> + '_ {
        self.lanes.iter().map(|e| Status {
            lane: e.lane,
            view: e.view,
            next_undecided: e.next_undecided,
            stable_seq: self.stable_seq,
            suspects: e.suspects,
            awaits_new_view: e.awaits_new_view,
        })
    }
}

/// "I gave up on every view of `lane` up to `view`": signed when the
/// sender's progress timer expired in `view`, or when it left `view` for a
/// later one. Self-certifying, so any replica may relay it: 2f+1 of them
/// (distinct senders, `view` at least v) are a timeout certificate that moves
/// every correct replica that receives them out of v (chorus-order
/// `lane/timeout_cert.rs`; the pacemaker idea of HotStuff, for PBFT §4.5.2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeout {
    pub lane: LaneId,
    pub view: View,
    pub replica: ReplicaId,
    pub sig: Signature,
}

impl Timeout {
    pub fn signing_digest(&self) -> Digest {
        let body = (self.lane, self.view, self.replica);
        let bytes = postcard::to_allocvec(&body).unwrap_or_default();
        Digest::of_parts("chorus timeout v1", &[&bytes])
    }
}

/// "Slot (lane, slot) is decided with this digest" (f+1 matching = believable).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decided {
    pub lane: LaneId,
    pub slot: Slot,
    pub digest: Digest,
}

/// Ask a peer for the batch behind a digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchBatch {
    pub lane: LaneId,
    pub slot: Slot,
    pub digest: Digest,
}

/// The batch asked for; the receiver checks its digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchReply {
    pub lane: LaneId,
    pub slot: Slot,
    pub batch: Batch,
}

/// Ask for the state at a stable checkpoint at or above `min_seq`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRequest {
    pub min_seq: Seq,
}

/// One chunk of a snapshot, with the certificate that makes it trustworthy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateChunk {
    pub cert: CheckpointCert,
    pub index: u32,
    pub count: u32,
    pub data: Bytes,
}

/// DBFT messages of the `dispel` mode: `chorus-dbft`'s `DbftBundle` (one or
/// more `DbftMsg`), encoded (that crate builds on this one, so the type
/// cannot appear here). DBFT is
/// signature-free: like COMMIT it relies on the authenticated channel, whose
/// peer id is the only sender the protocol believes (spec §1, pitfall P11).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DbftWire {
    pub bytes: Bytes,
}

/// Everything replicas say to each other.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplicaMsg {
    PrePrepare(PrePrepare),
    Prepare(Prepare),
    Commit(Commit),
    Checkpoint(CheckpointVote),
    ViewChange(ViewChange),
    NewView(NewView),
    Status(Status),
    Decided(Decided),
    FetchBatch(FetchBatch),
    BatchReply(BatchReply),
    StateRequest(StateRequest),
    StateChunk(StateChunk),
    /// `dispel` only (added last: earlier variants keep their wire tags).
    Dbft(DbftWire),
    /// Appended last: existing variants keep their wire tags.
    Timeout(Timeout),
    /// `sarek` only (SAREK §IV-D): a signed re-prediction proposal.
    RePredict(RePredictionVote),
    /// Appended last: a backup holds a pre-prepare because a request's MAC
    /// entry for it is wrong (Aardvark §4.1; chorus-order `pool/client_penalty.rs`).
    Unverifiable(UnverifiableRequest),
    /// Appended last: every lane's periodic status of one pillar at once.
    Statuses(StatusBundle),
}

/// "Your MAC vector entry for me is wrong": sent by a backup that holds a
/// fresh pre-prepare for vouchers, naming the request that failed at it.
/// Unsigned (the channel authenticates the sender). f+1 distinct senders
/// show that a correct replica could not verify the request; a replica that
/// holds the same request, with the same authenticator, verified at itself
/// from the client, then knows the client sent a partial vector.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnverifiableRequest {
    pub lane: LaneId,
    pub view: View,
    pub slot: Slot,
    pub client: ClientId,
    pub seq: RequestSeq,
    /// The request's content digest (`Request::digest`: client, seq,
    /// flags, op) and its authenticator's digest (`Request::auth_digest`),
    /// as the pre-prepare carried them: a report is about those exact bytes.
    pub content: Digest,
    pub auth: Digest,
}

impl ReplicaMsg {
    /// The pillar, among `pillars`, whose connections carry this message:
    /// its lane's ([`crate::config::pillar_of_lane`]), else pillar 0.
    pub fn pillar(&self, pillars: usize) -> usize {
        self.lane()
            .map_or(0, |l| crate::config::pillar_of_lane(l, pillars))
    }

    /// The lane a message belongs to, if any (the runtime routes by it: COP's
    /// pillar of lane `l` is `l mod P`).
    pub fn lane(&self) -> Option<LaneId> {
        match self {
            ReplicaMsg::PrePrepare(m) => Some(m.lane),
            ReplicaMsg::Prepare(m) => Some(m.lane),
            ReplicaMsg::Commit(m) => Some(m.lane),
            ReplicaMsg::ViewChange(m) => Some(m.lane),
            ReplicaMsg::NewView(m) => Some(m.lane),
            ReplicaMsg::Status(m) => Some(m.lane),
            ReplicaMsg::Decided(m) => Some(m.lane),
            ReplicaMsg::FetchBatch(m) => Some(m.lane),
            ReplicaMsg::BatchReply(m) => Some(m.lane),
            ReplicaMsg::Timeout(m) => Some(m.lane),
            ReplicaMsg::Unverifiable(m) => Some(m.lane),
            // All its lanes share a pillar: the first one routes it.
            ReplicaMsg::Statuses(m) => m.lanes.first().map(|e| e.lane),
            ReplicaMsg::Checkpoint(_)
            | ReplicaMsg::StateRequest(_)
            | ReplicaMsg::StateChunk(_)
            | ReplicaMsg::Dbft(_)
            | ReplicaMsg::RePredict(_) => None,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            ReplicaMsg::PrePrepare(_) => "pre-prepare",
            ReplicaMsg::Prepare(_) => "prepare",
            ReplicaMsg::Commit(_) => "commit",
            ReplicaMsg::Checkpoint(_) => "checkpoint",
            ReplicaMsg::ViewChange(_) => "view-change",
            ReplicaMsg::NewView(_) => "new-view",
            ReplicaMsg::Status(_) => "status",
            ReplicaMsg::Decided(_) => "decided",
            ReplicaMsg::FetchBatch(_) => "fetch-batch",
            ReplicaMsg::BatchReply(_) => "batch-reply",
            ReplicaMsg::StateRequest(_) => "state-request",
            ReplicaMsg::StateChunk(_) => "state-chunk",
            ReplicaMsg::Dbft(_) => "dbft",
            ReplicaMsg::Timeout(_) => "timeout",
            ReplicaMsg::RePredict(_) => "reprediction",
            ReplicaMsg::Unverifiable(_) => "unverifiable",
            ReplicaMsg::Statuses(_) => "status-bundle",
        }
    }
}

/// Messages on a client connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientMsg {
    /// Client → replica.
    Request(Request),
    /// Replica → client.
    Reply(Reply),
    /// Client → replica: ask for the replica's status line (`chorus status`).
    StatusQuery,
    /// Replica → client: answer to `StatusQuery`, as JSON text.
    StatusReport(String),
    /// Client → replica: which view is each lane in? (PBFT §4.1: a client
    /// that sends to the primary first must learn who the primary is;
    /// `first_contact`.) Answered from the replica's published status, so
    /// unlike `StatusQuery` it costs no state digest.
    ViewQuery,
    /// Replica → client: each lane's view, lane by lane.
    Views(Vec<u64>),
    /// Client → replica: a request sent again (its replies were late). A
    /// replica that executed it answers from its reply cache; one that has
    /// not yet answers when it executes it, even when the client had asked
    /// other replicas for the reply (`flags::FEW_REPLIES`). With leader-first
    /// clients it is the first copy a backup gets from the client, so the
    /// replica cannot tell it from a first send by itself.
    Resend(Request),
}
