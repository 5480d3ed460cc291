//! Classic SMR execution: one request after the other, in delivery order
//! (Schneider's Order requirement, CBASE §3). The reference every other
//! executor must match result for result and digest for digest.

use crate::client_table::{Admission, CachedReply, ClientTable, TableStats};
use crate::executor::{
    install_verified, rejected_result, restore_snapshot, ExecCheckpoint, ExecError, ExecResult, Executor,
};
use crate::service::{ExecContext, Service};
use crate::switch::apply_switch;
use crate::{encode_snapshot, state_digest};
use bytes::Bytes;
use chorus_core::{Batch, ClientId, Digest, RequestSeq, Seq, SwitchPolicy};
use std::sync::Arc;

/// The context a read-only fast-path operation runs with: it has no place in
/// the order, so it is given the next position, no client and the agreed
/// time of the last delivered batch.
pub fn read_only_context(next_seq: Seq, time_ms: u64) -> ExecContext {
    ExecContext {
        seq: next_seq,
        index: 0,
        client: ClientId(0),
        request_seq: RequestSeq(0),
        time_ms,
    }
}

pub struct SequentialExecutor {
    service: Arc<dyn Service>,
    table: ClientTable,
    next_seq: Seq,
    results: Vec<ExecResult>,
    /// `Some` in an `rcc` cluster: switch requests change assignments.
    switch_policy: Option<SwitchPolicy>,
}

impl SequentialExecutor {
    pub fn new(service: Arc<dyn Service>, max_inflight_per_client: u32) -> SequentialExecutor {
        SequentialExecutor {
            service,
            table: ClientTable::new(max_inflight_per_client),
            next_seq: Seq(0),
            results: Vec::new(),
            switch_policy: None,
        }
    }

    /// An executor of an `rcc` cluster: RCC §III-E switch requests move
    /// clients between instances (`crate::switch`).
    pub fn with_switch_policy(mut self, policy: SwitchPolicy) -> SequentialExecutor {
        self.switch_policy = Some(policy);
        self
    }

    /// Start at `next_seq` instead of 0 (e.g. a fresh replica whose ordering
    /// layer begins elsewhere).
    pub fn starting_at(mut self, next_seq: Seq) -> SequentialExecutor {
        self.next_seq = next_seq;
        self
    }

    pub fn client_table(&self) -> &ClientTable {
        &self.table
    }

    pub fn stats(&self) -> &TableStats {
        self.table.stats()
    }
}

impl Executor for SequentialExecutor {
    fn cached_reply(
        &self,
        client: chorus_core::ClientId,
        seq: chorus_core::RequestSeq,
    ) -> Option<bytes::Bytes> {
        self.table.cached_reply(client, seq)
    }

    fn request_digest(
        &self,
        client: chorus_core::ClientId,
        seq: chorus_core::RequestSeq,
    ) -> Option<chorus_core::Digest> {
        self.table.request_digest(client, seq)
    }

    fn reply_lookup(
        &self,
        client: chorus_core::ClientId,
        seq: chorus_core::RequestSeq,
    ) -> crate::ReplyLookup {
        self.table.lookup(client, seq)
    }

    fn submit(&mut self, seq: Seq, batch: Arc<Batch>) {
        assert_eq!(
            seq, self.next_seq,
            "batches must be submitted in delivery order without gaps"
        );
        let time_ms = self.table.agree_time(batch.time_ms);
        for (index, req) in batch.requests.iter().enumerate() {
            let digest = req.digest();
            let result = |result: Bytes, duplicate: bool| ExecResult {
                client: req.client,
                request_seq: req.seq,
                delivered_at: seq,
                result,
                duplicate,
                request: digest,
                few_replies: req.flags & chorus_core::flags::FEW_REPLIES != 0,
            };
            let switched = apply_switch(&mut self.table, self.switch_policy.as_ref(), req, seq);
            match self.table.admit_request(req.client, req.seq, digest) {
                Admission::Fresh if switched.is_some() => {
                    let reply = switched.unwrap_or_default();
                    self.table.complete(req.client, req.seq, reply.clone());
                    self.results.push(result(reply, false));
                }
                Admission::Fresh => {
                    let ctx = ExecContext {
                        seq,
                        index: index as u32,
                        client: req.client,
                        request_seq: req.seq,
                        time_ms,
                    };
                    let reply = self.service.execute(&req.op, &ctx);
                    self.table.complete(req.client, req.seq, reply.clone());
                    self.results.push(result(reply, false));
                }
                Admission::Duplicate(CachedReply::Ready(reply)) => self.results.push(result(reply, true)),
                Admission::Duplicate(CachedReply::Forgotten) => {}
                Admission::Duplicate(CachedReply::Pending) => {
                    unreachable!("sequential execution completes every request before the next")
                }
                Admission::Rejected(kind) => self.results.push(result(rejected_result(kind), false)),
            }
        }
        self.next_seq = seq.next();
    }

    fn drain_results(&mut self, out: &mut Vec<ExecResult>) {
        out.append(&mut self.results);
    }

    fn checkpoint(&mut self) -> ExecCheckpoint {
        ExecCheckpoint {
            next_seq: self.next_seq,
            state_digest: state_digest(self.next_seq, &self.table, &*self.service),
            snapshot: encode_snapshot(&self.table, &*self.service),
        }
    }

    fn restore(&mut self, next_seq: Seq, snapshot: &[u8]) -> Result<Digest, ExecError> {
        let (table, digest) =
            restore_snapshot(&*self.service, next_seq, snapshot, self.table.max_inflight())?;
        self.table = table;
        self.next_seq = next_seq;
        Ok(digest)
    }

    fn install(&mut self, next_seq: Seq, snapshot: &[u8], expected: Digest) -> Result<Digest, ExecError> {
        let table = install_verified(
            &*self.service,
            next_seq,
            snapshot,
            expected,
            self.table.max_inflight(),
        )?;
        self.table = table;
        self.next_seq = next_seq;
        Ok(expected)
    }

    fn execute_read_only(&self, op: &[u8]) -> Option<Bytes> {
        if !self.service.is_read_only(op) {
            return None;
        }
        Some(
            self.service
                .execute(op, &read_only_context(self.next_seq, self.table.agreed_time())),
        )
    }

    fn next_seq(&self) -> Seq {
        self.next_seq
    }

    fn set_switch_policy(&mut self, policy: SwitchPolicy) -> bool {
        self.switch_policy = Some(policy);
        true
    }

    fn state_digest(&mut self) -> Digest {
        state_digest(self.next_seq, &self.table, &*self.service)
    }
}
