//! The executor contract the runtime and the simulator drive (DESIGN §1
//! "EXECUTOR"), and the pieces every implementation shares: the result of a
//! request, the checkpoint, the snapshot format and the state digest.

use crate::client_table::{ClientTable, RejectKind, ReplyLookup, TableSnapshot};
use crate::service::Service;
use bytes::Bytes;
use chorus_core::{Assignments, Batch, ClientId, Digest, RequestSeq, Seq};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The outcome of one delivered request.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExecResult {
    pub client: ClientId,
    pub request_seq: RequestSeq,
    /// The position of the batch that carried this copy of the request.
    pub delivered_at: Seq,
    pub result: Bytes,
    /// True when this copy was not executed and `result` is the cached reply of
    /// the first execution.
    pub duplicate: bool,
    /// Digest of the request `result` answers (replies echo it to the client).
    pub request: Digest,
    /// The request carries `flags::FEW_REPLIES`: only its designated
    /// replicas reply (`chorus_core::designated_replier`).
    pub few_replies: bool,
}

impl ExecResult {
    /// Was the request refused without executing it (see [`rejected_result`])?
    pub fn is_rejected(&self) -> bool {
        !self.duplicate && self.result.starts_with(REJECTED_PREFIX)
    }
}

/// A checkpoint of the executor: everything below `next_seq` has executed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecCheckpoint {
    pub next_seq: Seq,
    pub state_digest: Digest,
    pub snapshot: Bytes,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    #[error("malformed snapshot: {0}")]
    Malformed(String),
    #[error("invalid snapshot: {0}")]
    Invalid(&'static str),
    #[error("the service refused the snapshot: {0}")]
    Service(String),
    /// The snapshot decodes, but not to the certified state: nothing installed.
    #[error("snapshot state digest {got} does not match the certified {expected}")]
    DigestMismatch { expected: Digest, got: Digest },
}

/// Called by an executor whose results appear outside `submit` (the parallel
/// one, from its workers) when results become ready to drain; it must not
/// block. Lets the driving thread sleep until then instead of polling.
pub type ResultsWaker = Arc<dyn Fn() + Send + Sync>;

/// Runs delivered batches against a [`Service`] (CBASE §4: the execution stage,
/// with or without a parallelizer in front of it).
pub trait Executor: Send {
    /// The reply an already executed request got, if still cached; answers
    /// client retransmissions without ordering them again.
    fn cached_reply(&self, client: ClientId, seq: RequestSeq) -> Option<Bytes>;
    /// Digest of the request executed as `(client, seq)`, while its reply is
    /// cached: a retransmission is answered only if it is the same request.
    fn request_digest(&self, _client: ClientId, _seq: RequestSeq) -> Option<Digest> {
        None
    }

    /// What the client table knows about `(client, seq)`: a retransmission
    /// of a request the table counts as executed but holds no reply for
    /// (`Gone`) must be rejected clearly. Executors without a client table
    /// only know their cached replies.
    fn reply_lookup(&self, client: ClientId, seq: RequestSeq) -> ReplyLookup {
        match self.cached_reply(client, seq) {
            Some(r) => ReplyLookup::Ready(r),
            None => ReplyLookup::Unknown,
        }
    }
    /// Next delivered batch; `seq` must equal `self.next_seq()` (assert). May block when full (back-pressure).
    fn submit(&mut self, seq: Seq, batch: Arc<Batch>);
    /// Results completed so far (order across non-conflicting requests unspecified). Duplicate requests
    /// yield their cached reply with duplicate=true; rejected ones yield an error result.
    fn drain_results(&mut self, out: &mut Vec<ExecResult>);
    /// CBASE sync: wait until everything submitted has executed, then snapshot (client table + service state).
    fn checkpoint(&mut self) -> ExecCheckpoint;
    /// Replace all state by a snapshot taken at `next_seq`; returns its state
    /// digest. Unchecked: for a snapshot this replica took itself. A peer's
    /// snapshot goes through [`Executor::install`].
    fn restore(&mut self, next_seq: Seq, snapshot: &[u8]) -> Result<Digest, ExecError>;
    /// Replace all state by a snapshot taken at `next_seq` only if its state
    /// digest is `expected` (the checkpoint certificate's); otherwise keep
    /// the current state untouched (client table and reply cache included,
    /// so a corrupt snapshot can never answer a retransmission) and say why.
    fn install(&mut self, next_seq: Seq, snapshot: &[u8], expected: Digest) -> Result<Digest, ExecError>;
    /// Read-only fast path: run a read-only op against current state without ordering (None if the op is not read-only).
    fn execute_read_only(&self, op: &[u8]) -> Option<Bytes>;
    fn next_seq(&self) -> Seq;
    /// Current state digest (client table + service), after everything submitted has executed.
    fn state_digest(&mut self) -> Digest;
    /// See [`ResultsWaker`]. Executors that produce results inside `submit`
    /// (the sequential one) never need to call it.
    fn set_results_waker(&mut self, _waker: ResultsWaker) {}
    /// Run as an executor of an `rcc` cluster: RCC §III-E switch requests
    /// move clients between instances (`crate::switch`). Returns whether
    /// this executor runs them; one that does not (the default) must not
    /// serve an `rcc` cluster: its replicas would drop the assignment table
    /// from their snapshots and disagree after a state transfer, so the
    /// runtime and the simulator refuse to start with it.
    #[must_use]
    fn set_switch_policy(&mut self, _policy: chorus_core::SwitchPolicy) -> bool {
        false
    }
    /// `sarek`: the next batch of partition stream `cell.lane` (SAREK §IV-B,
    /// `Action::DeliverStream`). Executors without streams refuse it
    /// (`false`) and change nothing; the driver reports the refusal.
    fn submit_stream(&mut self, _cell: chorus_core::Cell, _batch: Arc<Batch>) -> bool {
        false
    }
    /// Executors that can check their own run against its inputs (the
    /// partitioned one replays its scheduler log against its streams, see
    /// `partitioned::check_serial_order`): the violations found, if any.
    fn audit(&self) -> Option<Vec<String>> {
        None
    }
    /// SAREK §IV-D: the re-predictions of requests suspended since the last
    /// call (mis-predicted at execution). The driver hands each to its
    /// replica (`Replica::on_misprediction`), which signs and broadcasts it.
    /// Only the partitioned executor suspends requests.
    fn drain_repredictions(&mut self, _out: &mut Vec<chorus_core::RePrediction>) {}
    /// `sarek`: cross-partition requests that head a partition's schedule
    /// and lack the copy of another predicted partition, for as long as the
    /// previous call too (asked once per status interval,
    /// `Action::FindMissingCopies`): each with the partitions (lanes) whose
    /// copy is missing. The ordering side hands them to those partitions'
    /// pools again; a copy lost there (a crash before the hand-on, a full
    /// pool, a dropped hand-on) would otherwise hold the partition until the
    /// client retransmits, for ever if it never does.
    fn missing_copies(&mut self) -> Vec<(chorus_core::Request, Vec<chorus_core::LaneId>)> {
        Vec::new()
    }
    /// `sarek`: each partition's schedule, for `chorus status` (empty for
    /// executors without partitions).
    fn partition_detail(&self) -> Vec<chorus_core::status_report::PartitionExecDetail> {
        Vec::new()
    }
}

/// Every rejected request's result starts with these bytes.
pub const REJECTED_PREFIX: &[u8] = b"\0chorus/rejected: ";

/// The error result of a rejected request: the same bytes on every replica,
/// so the client collects `f+1` matching rejections like any other reply.
pub fn rejected_result(kind: RejectKind) -> Bytes {
    let mut v = REJECTED_PREFIX.to_vec();
    v.extend_from_slice(kind.as_str().as_bytes());
    Bytes::from(v)
}

/// The executor snapshot: client table + service state, postcard-encoded.
/// Version 3 (issue 17) adds the agreed time (`ClientTable::agree_time`);
/// like version 2 it puts the RCC assignment table right after the version
/// byte, so the ordering layer reads it back after a state transfer
/// (`chorus_core::Assignments::from_exec_snapshot`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct ExecSnapshot {
    version: u8,
    switches: Assignments,
    time_ms: u64,
    table: TableSnapshot,
    service: Bytes,
}

/// Version 2: switches but no agreed time (decoded as time 0). No longer
/// written; read so that snapshots stored before version 3 still restore.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct ExecSnapshotV2 {
    version: u8,
    switches: Assignments,
    table: TableSnapshot,
    service: Bytes,
}

/// Version 1: no client ever switched instance (every mode but `rcc`, and
/// `rcc` until the first switch) and no batch carried a time. Written
/// whenever both hold, so such snapshots stay byte for byte what they were
/// before versions 2 and 3.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct ExecSnapshotV1 {
    version: u8,
    table: TableSnapshot,
    service: Bytes,
}

const SNAPSHOT_VERSION: u8 = chorus_core::switch::EXEC_SNAPSHOT_VERSION;
const SNAPSHOT_VERSION_2: u8 = 2;
const SNAPSHOT_VERSION_1: u8 = 1;

/// Encode the snapshot of a quiescent executor (nothing pending).
pub fn encode_snapshot(table: &ClientTable, service: &dyn Service) -> Bytes {
    let bytes = if table.switches().is_empty() && table.agreed_time() == 0 {
        postcard::to_allocvec(&ExecSnapshotV1 {
            version: SNAPSHOT_VERSION_1,
            table: table.to_snapshot(),
            service: service.snapshot(),
        })
    } else {
        postcard::to_allocvec(&ExecSnapshot {
            version: SNAPSHOT_VERSION,
            switches: table.switches().clone(),
            time_ms: table.agreed_time(),
            table: table.to_snapshot(),
            service: service.snapshot(),
        })
    };
    Bytes::from(bytes.expect("encoding a snapshot cannot fail"))
}

/// Decode and check a snapshot; nothing is changed.
pub fn decode_snapshot(
    bytes: &[u8],
    max_inflight_per_client: u32,
) -> Result<(ClientTable, Bytes), ExecError> {
    let malformed = |e: postcard::Error| ExecError::Malformed(e.to_string());
    let (s, rest): (ExecSnapshot, &[u8]) = match bytes.first() {
        Some(&SNAPSHOT_VERSION_1) => {
            let (v1, rest): (ExecSnapshotV1, &[u8]) = postcard::take_from_bytes(bytes).map_err(malformed)?;
            let s = ExecSnapshot {
                version: v1.version,
                switches: Assignments::default(),
                time_ms: 0,
                table: v1.table,
                service: v1.service,
            };
            (s, rest)
        }
        Some(&SNAPSHOT_VERSION_2) => {
            let (v2, rest): (ExecSnapshotV2, &[u8]) = postcard::take_from_bytes(bytes).map_err(malformed)?;
            let s = ExecSnapshot {
                version: v2.version,
                switches: v2.switches,
                time_ms: 0,
                table: v2.table,
                service: v2.service,
            };
            (s, rest)
        }
        Some(&SNAPSHOT_VERSION) => postcard::take_from_bytes(bytes).map_err(malformed)?,
        _ => return Err(ExecError::Invalid("unknown snapshot version")),
    };
    if !rest.is_empty() {
        return Err(ExecError::Malformed(format!("{} trailing bytes", rest.len())));
    }
    let mut table =
        ClientTable::from_snapshot(&s.table, max_inflight_per_client).map_err(ExecError::Invalid)?;
    table.set_switches(s.switches);
    table.set_agreed_time(s.time_ms);
    Ok((table, s.service))
}

/// Re-encode a snapshot, in its own version, with its client table edited
/// by `edit`. What a liar serving state transfer does (the simulator's
/// `garbage-snapshot` adversary): the result decodes like any snapshot, and
/// only the certificate's state digest tells it apart (issue 8 finding 6).
pub fn reencode_with_table(bytes: &[u8], edit: impl FnOnce(&mut TableSnapshot)) -> Result<Bytes, ExecError> {
    let malformed = |e: postcard::Error| ExecError::Malformed(e.to_string());
    let encoded = match bytes.first() {
        Some(&SNAPSHOT_VERSION_1) => {
            let mut s: ExecSnapshotV1 = postcard::from_bytes(bytes).map_err(malformed)?;
            edit(&mut s.table);
            postcard::to_allocvec(&s)
        }
        Some(&SNAPSHOT_VERSION_2) => {
            let mut s: ExecSnapshotV2 = postcard::from_bytes(bytes).map_err(malformed)?;
            edit(&mut s.table);
            postcard::to_allocvec(&s)
        }
        Some(&SNAPSHOT_VERSION) => {
            let mut s: ExecSnapshot = postcard::from_bytes(bytes).map_err(malformed)?;
            edit(&mut s.table);
            postcard::to_allocvec(&s)
        }
        _ => return Err(ExecError::Invalid("unknown snapshot version")),
    };
    encoded.map(Bytes::from).map_err(malformed)
}

/// The state digest replicas compare: position, client table, service state
/// and (once a batch had one) the agreed time, so a replica that computes
/// another time than the others is caught at the next checkpoint.
pub fn state_digest(next_seq: Seq, table: &ClientTable, service: &dyn Service) -> Digest {
    if table.agreed_time() != 0 {
        return Digest::of_parts(
            "chorus exec state v2",
            &[
                &next_seq.0.to_le_bytes(),
                table.digest().as_bytes(),
                service.state_digest().as_bytes(),
                &table.agreed_time().to_le_bytes(),
            ],
        );
    }
    Digest::of_parts(
        "chorus exec state v1",
        &[
            &next_seq.0.to_le_bytes(),
            table.digest().as_bytes(),
            service.state_digest().as_bytes(),
        ],
    )
}

/// Decode `snapshot`, install it into `service`, and return the new table and
/// the state digest. The table is only built if the service accepted its part.
pub fn restore_snapshot(
    service: &dyn Service,
    next_seq: Seq,
    snapshot: &[u8],
    max_inflight_per_client: u32,
) -> Result<(ClientTable, Digest), ExecError> {
    let (table, service_state) = decode_snapshot(snapshot, max_inflight_per_client)?;
    service.restore(&service_state).map_err(ExecError::Service)?;
    let digest = state_digest(next_seq, &table, service);
    Ok((table, digest))
}

/// Install a peer's snapshot into `service` only if it is the certified state
/// (issue 8, finding 6: verify before restore). The client table is decoded
/// into a scratch table the caller swaps in only on `Ok`. The service has no
/// scratch instance, so its current state is saved first and put back if the
/// snapshot is refused or its digest differs; the executor's thread is the
/// only one touching the service meanwhile (workers are idle after the
/// barrier), so nobody observes the candidate state.
pub fn install_verified(
    service: &dyn Service,
    next_seq: Seq,
    snapshot: &[u8],
    expected: Digest,
    max_inflight_per_client: u32,
) -> Result<ClientTable, ExecError> {
    let (table, service_state) = decode_snapshot(snapshot, max_inflight_per_client)?;
    let saved = service.snapshot();
    let put_back = |why: ExecError| {
        // Our own canonical snapshot: a service that refuses it is broken.
        if let Err(e) = service.restore(&saved) {
            panic!("the service refused its own snapshot back: {e}");
        }
        Err(why)
    };
    if let Err(e) = service.restore(&service_state) {
        return put_back(ExecError::Service(e));
    }
    let got = state_digest(next_seq, &table, service);
    if got != expected {
        return put_back(ExecError::DigestMismatch { expected, got });
    }
    Ok(table)
}

/// The digest a driver reports to the ordering core (`StateInstalled`) for an
/// install: the installed state's, or — when nothing was installed — one that
/// can never equal the certificate's, so the core aborts the install and
/// fetches the state from another peer. Both drivers (runtime, simulator)
/// use this, so they answer alike.
pub fn installed_digest(outcome: &Result<Digest, ExecError>, expected: &Digest) -> Digest {
    match outcome {
        Ok(d) => *d,
        Err(ExecError::DigestMismatch { got, .. }) if got != expected => *got,
        Err(_) => Digest::of_parts("chorus install failed", &[expected.as_bytes()]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Empty;

    impl Service for Empty {
        fn execute(&self, _: &[u8], _: &crate::ExecContext) -> Bytes {
            Bytes::new()
        }
        fn snapshot(&self) -> Bytes {
            Bytes::from_static(b"s")
        }
        fn restore(&self, s: &[u8]) -> Result<(), String> {
            (s == b"s").then_some(()).ok_or_else(|| "not mine".into())
        }
    }

    fn switched() -> Assignments {
        let mut a = Assignments::default();
        let policy = chorus_core::SwitchPolicy { lanes: 4, sigma: 3 };
        let op = chorus_core::switch::switch_op(2);
        let r = chorus_core::Request {
            memo: Default::default(),
            client: ClientId(1),
            seq: RequestSeq(1),
            flags: chorus_core::flags::SWITCH_INSTANCE,
            op,
            auth: chorus_core::Authenticator::Macs(Default::default()),
        };
        a.apply(&policy, &r, 10);
        assert!(!a.is_empty());
        a
    }

    /// Issue 17: version 3 carries the agreed time (and still begins with
    /// the assignment table the ordering layer reads back); a version 2
    /// snapshot stored before it decodes with time 0.
    #[test]
    fn the_agreed_time_is_in_version_3_and_version_2_still_decodes() {
        let mut t = ClientTable::new(8);
        t.agree_time(1_234);
        let bytes = encode_snapshot(&t, &Empty);
        assert_eq!(bytes[0], 3);
        assert_eq!(
            Assignments::from_exec_snapshot(&bytes),
            Some(Assignments::default())
        );
        let (back, service) = decode_snapshot(&bytes, 8).expect("decodes");
        assert_eq!((back.agreed_time(), &service[..]), (1_234, &b"s"[..]));
        assert_eq!(
            state_digest(Seq(4), &back, &Empty),
            state_digest(Seq(4), &t, &Empty)
        );

        let v2 = postcard::to_allocvec(&ExecSnapshotV2 {
            version: 2,
            switches: switched(),
            table: t.to_snapshot(),
            service: Bytes::from_static(b"s"),
        })
        .unwrap();
        assert_eq!(Assignments::from_exec_snapshot(&v2), Some(switched()));
        let (old, _) = decode_snapshot(&v2, 8).expect("version 2 decodes");
        assert_eq!(old.agreed_time(), 0);
        assert_eq!(old.switches(), &switched());
    }

    /// The forging helper keeps the version and everything but the table,
    /// and what it edits changes the state digest (so a verified install
    /// refuses it), in versions 1 and 3 alike.
    #[test]
    fn a_reencoded_snapshot_keeps_its_version_and_only_the_edit_moves_the_digest() {
        for time in [0, 77] {
            let mut t = ClientTable::new(8);
            t.agree_time(time);
            assert!(matches!(
                t.admit(ClientId(3), RequestSeq(1)),
                crate::Admission::Fresh
            ));
            assert!(t.complete(ClientId(3), RequestSeq(1), Bytes::from_static(b"honest")));
            let bytes = encode_snapshot(&t, &Empty);
            let same = reencode_with_table(&bytes, |_| {}).expect("re-encodes");
            assert_eq!(same, bytes, "no edit, same bytes");
            let forged = reencode_with_table(&bytes, |s| {
                for c in &mut s.clients {
                    for (_, r) in &mut c.replies {
                        *r = Bytes::from_static(b"forged");
                    }
                }
            })
            .expect("re-encodes");
            assert_eq!(forged[0], bytes[0]);
            let (table, _) = decode_snapshot(&forged, 8).expect("a forgery decodes");
            assert_ne!(
                state_digest(Seq(2), &table, &Empty),
                state_digest(Seq(2), &t, &Empty)
            );
            assert_eq!(
                table.lookup(ClientId(3), RequestSeq(1)),
                crate::ReplyLookup::Ready(Bytes::from_static(b"forged"))
            );
        }
        assert!(reencode_with_table(b"\x09junk", |_| {}).is_err());
    }
}
