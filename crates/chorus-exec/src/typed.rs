//! A typed layer over the byte-level [`Service`] (issue 17): operations and
//! replies are Rust types, decoded once, and application errors travel to
//! the client as typed values instead of hand-encoded bytes.
//!
//! Wire format (postcard): an operation is `postcard(Op)`; a reply is
//! `postcard(Outcome<Reply, Error>)`. An operation that does not decode
//! (a Byzantine or outdated client) declares no keys, touches nothing and
//! is answered `Outcome::BadOp`, identically on every replica.
//!
//! Panics: a panic in `execute` stops the replica (the executor's state is
//! unknown after it; both executors treat it as fatal). Return an `Err` for
//! anything a client can cause.

use crate::service::{Access, ExecContext, Service};
use bytes::Bytes;
use chorus_core::Digest;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt::Debug;

/// What a typed operation produced, as it travels to the client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome<R, E> {
    Ok(R),
    /// The application refused the operation (e.g. insufficient funds).
    Err(E),
    /// The operation's bytes did not decode.
    BadOp(String),
}

/// A replicated application over typed operations. The same determinism,
/// access-set and snapshot rules as [`Service`] apply (docs/writing-a-service.md).
pub trait TypedService: Send + Sync + 'static {
    type Op: Serialize + DeserializeOwned + Debug;
    type Reply: Serialize + DeserializeOwned;
    type Error: Serialize + DeserializeOwned;

    /// The keys `op` reads and writes (CBASE §4); `Access::Everything` is
    /// always correct, only slower.
    fn access(&self, op: &Self::Op) -> Access;
    /// Read-only operations may take the fast path (no ordering).
    fn read_only(&self, _op: &Self::Op) -> bool {
        false
    }
    fn execute(&self, op: Self::Op, ctx: &ExecContext) -> Result<Self::Reply, Self::Error>;
    /// A canonical encoding of the whole state.
    fn snapshot(&self) -> Bytes;
    /// Replace the whole state; the input may come from a Byzantine peer.
    fn restore(&self, snapshot: &[u8]) -> Result<(), String>;
}

/// Runs a [`TypedService`] as a byte-level [`Service`].
pub struct Typed<S>(pub S);

/// Longest operation description in error messages.
const DESCRIBE_MAX: usize = 120;

impl<S: TypedService> Typed<S> {
    fn decode(op: &[u8]) -> Result<S::Op, String> {
        postcard::from_bytes(op).map_err(|e| format!("undecodable operation: {e}"))
    }
}

impl<S: TypedService> Service for Typed<S> {
    fn execute(&self, op: &[u8], ctx: &ExecContext) -> Bytes {
        let outcome = match Self::decode(op) {
            Ok(op) => match self.0.execute(op, ctx) {
                Ok(r) => Outcome::Ok(r),
                Err(e) => Outcome::Err(e),
            },
            Err(e) => Outcome::BadOp(e),
        };
        Bytes::from(postcard::to_allocvec(&outcome).expect("encoding to memory does not fail"))
    }
    fn access(&self, op: &[u8]) -> Access {
        match Self::decode(op) {
            Ok(op) => self.0.access(&op),
            // Answered BadOp without touching state: conflicts with nothing.
            Err(_) => Access::Keys {
                reads: vec![],
                writes: vec![],
            },
        }
    }
    fn is_read_only(&self, op: &[u8]) -> bool {
        Self::decode(op).is_ok_and(|op| self.0.read_only(&op))
    }
    fn describe(&self, op: &[u8]) -> String {
        match Self::decode(op) {
            Ok(op) => {
                let mut s = format!("{op:?}");
                if s.len() > DESCRIBE_MAX {
                    let cut = (0..=DESCRIBE_MAX)
                        .rev()
                        .find(|i| s.is_char_boundary(*i))
                        .unwrap_or(0);
                    s.truncate(cut);
                    s.push_str("..");
                }
                s
            }
            Err(e) => e,
        }
    }
    fn snapshot(&self) -> Bytes {
        self.0.snapshot()
    }
    fn restore(&self, snapshot: &[u8]) -> Result<(), String> {
        self.0.restore(snapshot)
    }
    fn state_digest(&self) -> Digest {
        Digest::of(&self.0.snapshot())
    }
}

/// Encode a typed operation for `Client::invoke`.
pub fn encode_op<Op: Serialize>(op: &Op) -> Bytes {
    Bytes::from(postcard::to_allocvec(op).expect("encoding to memory does not fail"))
}

/// Decode a typed reply: `Ok(reply)`, or the application's error, or why
/// the replica could not run the operation.
pub fn decode_reply<R: DeserializeOwned, E: DeserializeOwned>(bytes: &[u8]) -> Result<Outcome<R, E>, String> {
    postcard::from_bytes(bytes).map_err(|e| format!("undecodable reply: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyed::KeyedState;
    use chorus_core::{ClientId, RequestSeq, Seq};

    struct Counter(KeyedState<u64>);
    impl TypedService for Counter {
        type Op = (String, u64);
        type Reply = u64;
        type Error = String;
        fn access(&self, op: &Self::Op) -> Access {
            Access::Keys {
                reads: vec![],
                writes: vec![Bytes::from(op.0.clone())],
            }
        }
        fn execute(&self, (key, add): Self::Op, _: &ExecContext) -> Result<u64, String> {
            let v = self
                .0
                .get(key.as_bytes())
                .map_err(|e| e.to_string())?
                .unwrap_or(0);
            let n = v.checked_add(add).ok_or("overflow")?;
            self.0.put(key, n).map_err(|e| e.to_string())?;
            Ok(n)
        }
        fn snapshot(&self) -> Bytes {
            Bytes::from(postcard::to_allocvec(&self.0.entries()).expect("memory"))
        }
        fn restore(&self, s: &[u8]) -> Result<(), String> {
            let e: Vec<(Bytes, u64)> = postcard::from_bytes(s).map_err(|e| e.to_string())?;
            self.0.replace(e);
            Ok(())
        }
    }

    fn ctx(seq: u64) -> ExecContext {
        ExecContext {
            seq: Seq(seq),
            index: 0,
            client: ClientId(0),
            request_seq: RequestSeq(1),
            time_ms: 0,
        }
    }

    #[test]
    fn typed_replies_errors_and_undecodable_ops() {
        let s = Typed(Counter(KeyedState::new()));
        let op = encode_op(&("a".to_string(), 5u64));
        assert_eq!(
            decode_reply::<u64, String>(&s.execute(&op, &ctx(1))),
            Ok(Outcome::Ok(5))
        );
        let op = encode_op(&("a".to_string(), u64::MAX));
        assert_eq!(
            decode_reply::<u64, String>(&s.execute(&op, &ctx(2))),
            Ok(Outcome::Err("overflow".into()))
        );
        let bad = s.execute(&[0xff, 0xff, 0xff], &ctx(3));
        assert!(matches!(decode_reply::<u64, String>(&bad), Ok(Outcome::BadOp(_))));
        assert_eq!(
            s.access(&[0xff, 0xff, 0xff]),
            Access::Keys {
                reads: vec![],
                writes: vec![]
            }
        );
        assert_eq!(s.describe(&encode_op(&("a".to_string(), 1u64))), "(\"a\", 1)");
        let copy = Typed(Counter(KeyedState::new()));
        copy.restore(&s.snapshot()).unwrap();
        assert_eq!(copy.state_digest(), s.state_digest());
    }

    #[test]
    fn request_seeds_are_deterministic_and_distinct() {
        assert_eq!(ctx(1).seed(), ctx(1).seed());
        assert_ne!(ctx(1).seed(), ctx(2).seed());
    }
}
