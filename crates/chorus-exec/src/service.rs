//! The application interface (DESIGN §5).

use bytes::Bytes;
use chorus_core::{ClientId, Digest, RequestSeq, Seq};

/// What an operation touches (CBASE §4: the application's conflict rules).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// Conflicts with every other operation (the conservative default).
    Everything,
    /// Conflicts only with operations that write a key this one reads or
    /// writes, or read a key this one writes.
    Keys { reads: Vec<Bytes>, writes: Vec<Bytes> },
}

/// Where an operation sits in the agreed order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecContext {
    /// Global position of the batch the request was delivered in.
    pub seq: Seq,
    /// Index of the request inside that batch.
    pub index: u32,
    pub client: ClientId,
    pub request_seq: RequestSeq,
}

/// A replicated application. Determinism is the application's promise: the
/// same operations in the same order on the same keys give the same results.
pub trait Service: Send + Sync + 'static {
    /// Run one operation. The executor never runs two conflicting operations at once.
    fn execute(&self, op: &[u8], ctx: &ExecContext) -> Bytes;
    /// What the operation touches. Default: everything (fully sequential).
    fn access(&self, _op: &[u8]) -> Access {
        Access::Everything
    }
    /// Read-only operations may use the fast path.
    fn is_read_only(&self, _op: &[u8]) -> bool {
        false
    }
    /// A canonical encoding of the whole state (equal states ⇒ equal bytes).
    fn snapshot(&self) -> Bytes;
    /// Replace the whole state.
    fn restore(&self, snapshot: &[u8]) -> Result<(), String>;
    /// Digest of the state; must equal `Digest::of(&self.snapshot())` or be
    /// otherwise canonical.
    fn state_digest(&self) -> Digest {
        Digest::of(&self.snapshot())
    }
}
