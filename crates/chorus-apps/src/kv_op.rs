//! The key-value service's operations and replies, and their encoding
//! (postcard). Decoding is total: any byte string decodes to a value or an
//! error, never a panic, and allocates at most what the input holds.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// Longest key the store accepts.
pub const MAX_KEY_BYTES: usize = 1024;
/// Most entries one scan returns (a larger `limit` is clamped).
pub const MAX_SCAN_LIMIT: u32 = 1000;
/// A scan stops before its reply would exceed this many key + value bytes
/// (replies must fit a frame; every replica stops at the same entry).
pub const MAX_SCAN_BYTES: usize = 1 << 20;

/// An operation on the store. `Get`/`Put`/`Delete`/`Scan` are the plain KV
/// interface; `Read`/`Update`/`Insert`/`ReadModifyWrite` are YCSB's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvOp {
    /// The value of `key`, if any. Reply: `Value`.
    Get { key: Bytes },
    /// Set `key` to `value`. Reply: `Ok`.
    Put { key: Bytes, value: Bytes },
    /// Remove `key`. Reply: `Existed` (whether it was there).
    Delete { key: Bytes },
    /// Up to `limit` (clamped to [`MAX_SCAN_LIMIT`]) entries with key `>= start`,
    /// in key order. Reply: `Entries`.
    Scan { start: Bytes, limit: u32 },
    /// YCSB read: same as `Get`. Reply: `Value`.
    Read { key: Bytes },
    /// YCSB update: overwrite an existing record; a missing key is left
    /// missing. Reply: `Existed` (true = updated).
    Update { key: Bytes, value: Bytes },
    /// YCSB insert: create a record; an existing one is left unchanged.
    /// Reply: `Existed` (false = inserted).
    Insert { key: Bytes, value: Bytes },
    /// YCSB read-modify-write: read the record, then write `value`.
    /// Reply: `Value` (the value before the write).
    ReadModifyWrite { key: Bytes, value: Bytes },
    /// Write several keys at once (SAREK §V's multi-key micro-benchmark
    /// request; with partitioned state, usually a cross-partition one). At
    /// most [`MAX_PUTALL_PAIRS`]. Reply: `Entries` with each key's value
    /// before the write (empty if none), in the order given.
    PutAll { pairs: Vec<(Bytes, Bytes)> },
}

/// Most keys one `PutAll` writes.
pub const MAX_PUTALL_PAIRS: usize = 16;

static EMPTY_KEY: Bytes = Bytes::from_static(b"");

/// What the store answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvReply {
    Value(Option<Bytes>),
    Ok,
    Existed(bool),
    /// Entries in key order; `more` = the scan stopped at a limit before the
    /// end of the key space.
    Entries {
        entries: Vec<(Bytes, Bytes)>,
        more: bool,
    },
    /// The operation was malformed or out of bounds; nothing changed.
    Error(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvDecodeError {
    Malformed(String),
    TrailingBytes(usize),
    KeyTooLong(usize),
}

impl std::fmt::Display for KvDecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KvDecodeError::Malformed(e) => write!(f, "malformed kv op: {e}"),
            KvDecodeError::TrailingBytes(n) => write!(f, "malformed kv op: {n} trailing bytes"),
            KvDecodeError::KeyTooLong(n) => write!(f, "key of {n} bytes exceeds {MAX_KEY_BYTES}"),
        }
    }
}

impl std::error::Error for KvDecodeError {}

fn decode_exact<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, KvDecodeError> {
    let (v, rest) = postcard::take_from_bytes(bytes).map_err(|e| KvDecodeError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(KvDecodeError::TrailingBytes(rest.len()));
    }
    Ok(v)
}

impl KvOp {
    pub fn encode(&self) -> Bytes {
        Bytes::from(postcard::to_allocvec(self).expect("encoding a kv op cannot fail"))
    }

    /// Decode and check bounds (key length).
    pub fn decode(bytes: &[u8]) -> Result<KvOp, KvDecodeError> {
        let op: KvOp = decode_exact(bytes)?;
        let key_len = op.key().len();
        if key_len > MAX_KEY_BYTES {
            return Err(KvDecodeError::KeyTooLong(key_len));
        }
        if let KvOp::PutAll { pairs } = &op {
            if pairs.is_empty() || pairs.len() > MAX_PUTALL_PAIRS {
                return Err(KvDecodeError::Malformed(format!(
                    "putall of {} pairs",
                    pairs.len()
                )));
            }
            if let Some((k, _)) = pairs.iter().find(|(k, _)| k.len() > MAX_KEY_BYTES) {
                return Err(KvDecodeError::KeyTooLong(k.len()));
            }
        }
        Ok(op)
    }

    /// The key the operation names (a scan's start key).
    pub fn key(&self) -> &Bytes {
        match self {
            KvOp::Get { key }
            | KvOp::Put { key, .. }
            | KvOp::Delete { key }
            | KvOp::Read { key }
            | KvOp::Update { key, .. }
            | KvOp::Insert { key, .. }
            | KvOp::ReadModifyWrite { key, .. } => key,
            KvOp::Scan { start, .. } => start,
            KvOp::PutAll { pairs } => pairs.first().map_or(&EMPTY_KEY, |(k, _)| k),
        }
    }

    pub fn put_all(pairs: Vec<(Bytes, Bytes)>) -> Bytes {
        KvOp::PutAll { pairs }.encode()
    }

    pub fn is_read_only(&self) -> bool {
        matches!(self, KvOp::Get { .. } | KvOp::Read { .. } | KvOp::Scan { .. })
    }

    pub fn get(key: impl Into<Bytes>) -> Bytes {
        KvOp::Get { key: key.into() }.encode()
    }
    pub fn put(key: impl Into<Bytes>, value: impl Into<Bytes>) -> Bytes {
        KvOp::Put {
            key: key.into(),
            value: value.into(),
        }
        .encode()
    }
    pub fn delete(key: impl Into<Bytes>) -> Bytes {
        KvOp::Delete { key: key.into() }.encode()
    }
    pub fn scan(start: impl Into<Bytes>, limit: u32) -> Bytes {
        KvOp::Scan {
            start: start.into(),
            limit,
        }
        .encode()
    }
}

impl KvReply {
    pub fn encode(&self) -> Bytes {
        Bytes::from(postcard::to_allocvec(self).expect("encoding a kv reply cannot fail"))
    }

    pub fn decode(bytes: &[u8]) -> Result<KvReply, KvDecodeError> {
        decode_exact(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ops_roundtrip() {
        let ops = [
            KvOp::Get { key: "a".into() },
            KvOp::Put {
                key: "a".into(),
                value: "b".into(),
            },
            KvOp::Scan {
                start: "".into(),
                limit: 7,
            },
            KvOp::ReadModifyWrite {
                key: "k".into(),
                value: "v".into(),
            },
            KvOp::PutAll {
                pairs: vec![("a".into(), "1".into()), ("b".into(), "2".into())],
            },
        ];
        for op in ops {
            assert_eq!(KvOp::decode(&op.encode()).unwrap(), op);
        }
    }

    #[test]
    fn long_keys_and_trailing_bytes_are_refused() {
        let long = KvOp::Get {
            key: Bytes::from(vec![0u8; MAX_KEY_BYTES + 1]),
        };
        assert_eq!(
            KvOp::decode(&long.encode()),
            Err(KvDecodeError::KeyTooLong(MAX_KEY_BYTES + 1))
        );
        let empty = KvOp::PutAll { pairs: vec![] };
        assert!(matches!(
            KvOp::decode(&empty.encode()),
            Err(KvDecodeError::Malformed(_))
        ));
        let mut bytes = KvOp::get("a").to_vec();
        bytes.push(0);
        assert_eq!(KvOp::decode(&bytes), Err(KvDecodeError::TrailingBytes(1)));
    }

    proptest! {
        #[test]
        fn decoding_is_total(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = KvOp::decode(&bytes);
            let _ = KvReply::decode(&bytes);
        }
    }
}
