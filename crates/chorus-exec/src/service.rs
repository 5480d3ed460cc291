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
    /// The agreed time (ms since the Unix epoch) of the batch, the same for
    /// all its requests and on every replica: the running maximum of the
    /// proposers' batch times (`Batch::time_ms`). Use it instead of the
    /// wall clock. Monotone; not exact: a Byzantine leader can hold it
    /// back (until a correct leader proposes), never push it more than
    /// `max_clock_skew_ms` past correct clocks. 0 until a batch had a time.
    pub time_ms: u64,
}

impl ExecContext {
    /// A deterministic seed for this request: equal on every replica, and
    /// different for every (position, index, client, request seq). Use it
    /// where a service needs randomness (never an unseeded RNG).
    pub fn seed(&self) -> u64 {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&self.seq.0.to_le_bytes());
        bytes[8..12].copy_from_slice(&self.index.to_le_bytes());
        bytes[12..20].copy_from_slice(&self.client.0.to_le_bytes());
        bytes[20..28].copy_from_slice(&self.request_seq.0.to_le_bytes());
        let d = Digest::of(&bytes);
        u64::from_le_bytes(d.0[..8].try_into().expect("a digest has 32 bytes"))
    }
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
    /// SAREK §IV-D: the operation's exact access set at execution, where
    /// [`Service::access`] is only a prediction (an imprecise PREDICT(): the
    /// keys depend on the operation in ways the declaration does not state).
    /// `None` (the default): `access` is exact. The partitioned executor
    /// asks just before it runs the operation, holding every partition of
    /// the current prediction; an access outside them suspends the request
    /// until its re-prediction is ordered. Must be a pure function of the
    /// operation and of the state of keys `access` names.
    fn execution_access(&self, _op: &[u8]) -> Option<Access> {
        None
    }
    /// Read-only operations may use the fast path.
    fn is_read_only(&self, _op: &[u8]) -> bool {
        false
    }
    /// A short name of the operation for error messages (checked mode's
    /// access-set violations). Default: the first bytes in hex.
    fn describe(&self, op: &[u8]) -> String {
        // Runs for every checked operation (the scope is opened before it
        // executes), so no `format!` per byte.
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(5 + 32 + 2);
        s.push_str("op 0x");
        for b in op.iter().take(16) {
            s.push(HEX[(b >> 4) as usize] as char);
            s.push(HEX[(b & 0xf) as usize] as char);
        }
        if op.len() > 16 {
            s.push_str("..");
        }
        s
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

#[cfg(test)]
mod tests {
    use super::*;

    struct Opaque;
    impl Service for Opaque {
        fn execute(&self, _op: &[u8], _ctx: &ExecContext) -> Bytes {
            Bytes::new()
        }
        fn snapshot(&self) -> Bytes {
            Bytes::new()
        }
        fn restore(&self, _snapshot: &[u8]) -> Result<(), String> {
            Ok(())
        }
    }

    #[test]
    fn the_default_description_is_the_first_sixteen_bytes_in_hex() {
        assert_eq!(Opaque.describe(&[0x00, 0xab, 0x7f]), "op 0x00ab7f");
        let long: Vec<u8> = (0..20).collect();
        assert_eq!(Opaque.describe(&long), "op 0x000102030405060708090a0b0c0d0e0f..");
        assert_eq!(Opaque.describe(&[]), "op 0x");
    }
}
