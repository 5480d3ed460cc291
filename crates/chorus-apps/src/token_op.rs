//! The token service's operations, replies and typed errors, their encoding
//! (postcard), and how a transfer is signed.
//!
//! Decoding is total and bounded: any byte string decodes to an op or an
//! error, never a panic, and an op is at most [`MAX_TOKEN_OP_BYTES`].

use bytes::Bytes;
use chorus_core::Digest;
/// Re-exported so clients sign transfers without depending on the crate.
pub use ed25519_dalek::SigningKey;
use ed25519_dalek::{Signer, VerifyingKey};
use serde::{Deserialize, Serialize};

/// An account is named by its owner's Ed25519 public key.
pub type AccountId = [u8; 32];

/// Largest encoded op: tag + two keys + two varints + a 64-byte signature.
pub const MAX_TOKEN_OP_BYTES: usize = 256;
/// Domain separation for transfer signatures: a signature over anything
/// else Chorus (or another protocol) signs can never pass as a transfer.
const TRANSFER_DOMAIN: &[u8] = b"chorus-token/transfer/v1\0";

/// A transfer of `amount` from `from` to `to`, signed by `from`'s key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    pub from: AccountId,
    pub to: AccountId,
    pub amount: u64,
    /// Must exceed the sender's last used nonce (replay protection).
    pub nonce: u64,
    /// Ed25519 signature (64 bytes) over [`Transfer::signing_bytes`].
    pub sig: Bytes,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TokenOp {
    /// The balance and last nonce of `account`. Read-only. Reply: `Balance`.
    Balance { account: AccountId },
    /// Reply: `Transferred` or `Error`.
    Transfer(Transfer),
}

/// Why an operation was refused. Every refusal leaves the state unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TokenError {
    /// The op bytes did not decode.
    Malformed(String),
    /// No such account in the genesis allocation.
    UnknownAccount(AccountId),
    /// The signature does not verify under the sender's key.
    BadSignature,
    /// `nonce` is not above the sender's last used nonce `last`: a replay or
    /// a reordered duplicate.
    ReusedNonce { nonce: u64, last: u64 },
    /// The sender holds `balance` < `amount`.
    InsufficientFunds { balance: u64, amount: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TokenReply {
    Balance {
        balance: u64,
        nonce: u64,
    },
    /// The sender's balance and nonce after the transfer.
    Transferred {
        from_balance: u64,
        nonce: u64,
    },
    Error(TokenError),
}

pub fn hex32(a: &[u8; 32]) -> String {
    a.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parse 64 hex digits into 32 bytes.
pub fn parse_hex32(s: &str) -> Option<[u8; 32]> {
    let s = s.trim();
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl std::fmt::Display for TokenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenError::Malformed(e) => write!(f, "malformed token op: {e}"),
            TokenError::UnknownAccount(a) => write!(f, "unknown account {}", hex32(a)),
            TokenError::BadSignature => {
                write!(f, "bad signature: the transfer is not signed by the sender's key")
            }
            TokenError::ReusedNonce { nonce, last } => {
                write!(
                    f,
                    "reused nonce {nonce}: the sender's last nonce is {last} (replay refused)"
                )
            }
            TokenError::InsufficientFunds { balance, amount } => {
                write!(f, "insufficient funds: balance {balance} < amount {amount}")
            }
        }
    }
}

impl std::error::Error for TokenError {}

/// The secret key of genesis account `index` under `seed`. Genesis keys are
/// derivable by anyone who knows the seed: they fund tests, demos and
/// benchmarks, not real value (see docs/decisions.md "Token service").
pub fn genesis_key(seed: u64, index: u32) -> SigningKey {
    let secret = Digest::of_parts(
        "chorus-token genesis key v1",
        &[&seed.to_le_bytes(), &index.to_le_bytes()],
    );
    SigningKey::from_bytes(&secret.0)
}

pub fn account_of(key: &SigningKey) -> AccountId {
    key.verifying_key().to_bytes()
}

impl Transfer {
    /// Fixed-length, so unambiguous without framing.
    pub fn signing_bytes(from: &AccountId, to: &AccountId, amount: u64, nonce: u64) -> Vec<u8> {
        let mut m = Vec::with_capacity(TRANSFER_DOMAIN.len() + 80);
        m.extend_from_slice(TRANSFER_DOMAIN);
        m.extend_from_slice(from);
        m.extend_from_slice(to);
        m.extend_from_slice(&amount.to_le_bytes());
        m.extend_from_slice(&nonce.to_le_bytes());
        m
    }

    pub fn signed(key: &SigningKey, to: AccountId, amount: u64, nonce: u64) -> Transfer {
        let from = account_of(key);
        let sig = key.sign(&Self::signing_bytes(&from, &to, amount, nonce));
        Transfer {
            from,
            to,
            amount,
            nonce,
            sig: Bytes::copy_from_slice(&sig.to_bytes()),
        }
    }

    /// Strict verification (no malleable or small-order keys) under `from`.
    pub fn verify(&self) -> bool {
        let Ok(sig) = <[u8; 64]>::try_from(&self.sig[..]) else {
            return false;
        };
        let Ok(vk) = VerifyingKey::from_bytes(&self.from) else {
            return false;
        };
        let sig = ed25519_dalek::Signature::from_bytes(&sig);
        vk.verify_strict(
            &Self::signing_bytes(&self.from, &self.to, self.amount, self.nonce),
            &sig,
        )
        .is_ok()
    }
}

fn decode_exact<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, String> {
    let (v, rest) = postcard::take_from_bytes(bytes).map_err(|e| e.to_string())?;
    if !rest.is_empty() {
        return Err(format!("{} trailing bytes", rest.len()));
    }
    Ok(v)
}

impl TokenOp {
    pub fn encode(&self) -> Bytes {
        Bytes::from(postcard::to_allocvec(self).expect("encoding a token op cannot fail"))
    }

    pub fn decode(bytes: &[u8]) -> Result<TokenOp, TokenError> {
        if bytes.len() > MAX_TOKEN_OP_BYTES {
            return Err(TokenError::Malformed(format!(
                "{} bytes exceeds {MAX_TOKEN_OP_BYTES}",
                bytes.len()
            )));
        }
        let op: TokenOp = decode_exact(bytes).map_err(TokenError::Malformed)?;
        if let TokenOp::Transfer(t) = &op {
            if t.sig.len() != 64 {
                return Err(TokenError::Malformed(format!(
                    "signature of {} bytes, expected 64",
                    t.sig.len()
                )));
            }
        }
        Ok(op)
    }

    pub fn is_read_only(&self) -> bool {
        matches!(self, TokenOp::Balance { .. })
    }

    pub fn balance(account: AccountId) -> Bytes {
        TokenOp::Balance { account }.encode()
    }

    pub fn transfer(key: &SigningKey, to: AccountId, amount: u64, nonce: u64) -> Bytes {
        TokenOp::Transfer(Transfer::signed(key, to, amount, nonce)).encode()
    }
}

impl TokenReply {
    pub fn encode(&self) -> Bytes {
        Bytes::from(postcard::to_allocvec(self).expect("encoding a token reply cannot fail"))
    }

    pub fn decode(bytes: &[u8]) -> Result<TokenReply, String> {
        decode_exact(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ops_and_replies_roundtrip_and_fit_the_bound() {
        let k = genesis_key(7, 1);
        let ops = [
            TokenOp::Balance { account: [3; 32] },
            TokenOp::Transfer(Transfer::signed(&k, [9; 32], u64::MAX, u64::MAX)),
        ];
        for op in ops {
            let b = op.encode();
            assert!(b.len() <= MAX_TOKEN_OP_BYTES);
            assert_eq!(TokenOp::decode(&b).unwrap(), op);
        }
        for r in [
            TokenReply::Balance { balance: 1, nonce: 2 },
            TokenReply::Error(TokenError::ReusedNonce { nonce: 1, last: 4 }),
        ] {
            assert_eq!(TokenReply::decode(&r.encode()).unwrap(), r);
        }
    }

    #[test]
    fn signatures_bind_every_field() {
        let k = genesis_key(0, 0);
        let t = Transfer::signed(&k, [1; 32], 10, 1);
        assert!(t.verify());
        let tweaks: [fn(&mut Transfer); 4] = [
            |t| t.amount += 1,
            |t| t.nonce += 1,
            |t| t.to[0] ^= 1,
            |t| t.from = account_of(&genesis_key(0, 1)),
        ];
        for tweak in tweaks {
            let mut bad = t.clone();
            tweak(&mut bad);
            assert!(!bad.verify());
        }
        let mut short = t.clone();
        short.sig = short.sig.slice(..63);
        assert!(!short.verify());
    }

    #[test]
    fn genesis_keys_are_deterministic_and_distinct() {
        assert_eq!(account_of(&genesis_key(5, 3)), account_of(&genesis_key(5, 3)));
        assert_ne!(account_of(&genesis_key(5, 3)), account_of(&genesis_key(5, 4)));
        assert_ne!(account_of(&genesis_key(5, 3)), account_of(&genesis_key(6, 3)));
    }

    #[test]
    fn malformed_bytes_are_typed_errors() {
        let k = genesis_key(0, 0);
        let mut t = Transfer::signed(&k, [1; 32], 10, 1);
        t.sig = Bytes::from_static(b"short");
        assert!(matches!(
            TokenOp::decode(&TokenOp::Transfer(t).encode()),
            Err(TokenError::Malformed(_))
        ));
        let mut trailing = TokenOp::balance([0; 32]).to_vec();
        trailing.push(0);
        assert!(matches!(
            TokenOp::decode(&trailing),
            Err(TokenError::Malformed(_))
        ));
        assert!(matches!(
            TokenOp::decode(&[0u8; MAX_TOKEN_OP_BYTES + 1]),
            Err(TokenError::Malformed(_))
        ));
        assert_eq!(parse_hex32(&hex32(&[0xab; 32])), Some([0xab; 32]));
        assert_eq!(parse_hex32("zz"), None);
    }

    proptest! {
        #[test]
        fn decoding_is_total(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = TokenOp::decode(&bytes);
            let _ = TokenReply::decode(&bytes);
        }
    }
}
