//! The null service: every operation answers an empty reply and touches no
//! state, so no two operations ever conflict. CBASE §6.1.1 uses it to measure
//! the overhead of the replication and execution layers themselves.

use bytes::Bytes;
use chorus_exec::{Access, ExecContext, Service};

#[derive(Clone, Copy, Debug, Default)]
pub struct NullService;

impl Service for NullService {
    fn execute(&self, _op: &[u8], _ctx: &ExecContext) -> Bytes {
        Bytes::new()
    }

    fn access(&self, _op: &[u8]) -> Access {
        Access::Keys {
            reads: vec![],
            writes: vec![],
        }
    }

    fn snapshot(&self) -> Bytes {
        Bytes::new()
    }

    fn restore(&self, snapshot: &[u8]) -> Result<(), String> {
        if snapshot.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "null service snapshot must be empty, got {} bytes",
                snapshot.len()
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{ClientId, RequestSeq, Seq};

    #[test]
    fn empty_reply_no_keys_empty_state() {
        let s = NullService;
        let ctx = ExecContext {
            seq: Seq(3),
            index: 1,
            client: ClientId(1),
            request_seq: RequestSeq(1),
            time_ms: 0,
        };
        assert!(s.execute(b"anything", &ctx).is_empty());
        assert!(!chorus_exec::conflicts(&s.access(b"a"), &s.access(b"a")));
        assert!(s.snapshot().is_empty());
        assert!(s.restore(b"").is_ok() && s.restore(b"x").is_err());
    }
}
