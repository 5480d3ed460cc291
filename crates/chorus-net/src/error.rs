//! Everything that can go wrong on a connection. Every variant except `Io`
//! and `Closed` means the peer (or something between us) misbehaved; the
//! connection is then unusable and must be dropped (DESIGN §6: a frame that
//! fails authentication is dropped and counted, never parsed further).

use crate::handshake::HandshakeRefusal;
use crate::role::PeerRole;

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The peer closed the connection in the middle of a frame or a handshake.
    #[error("connection closed mid-frame or mid-handshake")]
    Closed,
    #[error("handshake did not finish within {0:?}")]
    HandshakeTimeout(std::time::Duration),
    /// A length header larger than the limit: refused before allocating.
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    Oversize { len: usize, max: usize },
    /// A frame too short to carry the counter and the MAC.
    #[error("frame of {0} bytes is too short to be authenticated")]
    ShortFrame(usize),
    #[error("frame MAC does not verify")]
    BadMac,
    /// A correctly MACed frame with the wrong counter: replayed or reordered.
    #[error("frame counter {got} but expected {expected} (replayed or reordered)")]
    Replay { expected: u64, got: u64 },
    #[error("malformed handshake message: {0}")]
    BadHandshake(String),
    #[error("protocol version {theirs} not supported (ours is {ours})")]
    VersionMismatch { ours: u16, theirs: u16 },
    /// The claimed role is not in the configuration.
    #[error("peer claims unknown role {0:?}")]
    UnknownPeer(PeerRole),
    /// The peer is configured, but it is not the one we dialled.
    #[error("peer claims role {got:?} but we expected {expected}")]
    UnexpectedPeer { got: PeerRole, expected: String },
    /// The proof of key possession that precedes any public-key work failed:
    /// the peer does not hold the static key of the role it names.
    #[error("no valid proof of holding the key of {0:?}")]
    BadProof(PeerRole),
    #[error("handshake signature does not verify against the configured key of {0:?}")]
    BadSignature(PeerRole),
    /// The peer's ephemeral key gave an all-zero shared secret (low-order point).
    #[error("peer sent a non-contributory ephemeral key")]
    WeakKey,
    /// The reader or writer already failed; a connection is never resumed.
    #[error("connection already failed")]
    Poisoned,
    /// The responder refused our handshake and said why (we dialled).
    #[error("handshake refused: {0}")]
    Refused(HandshakeRefusal),
    /// What answered our hello is not a Chorus endpoint (an HTTP server, a
    /// database...): its first bytes are no handshake message at all.
    #[error("not a Chorus endpoint: it answered {0} (is the host or port wrong?)")]
    NotChorus(String),
}

impl NetError {
    /// True when the error blames the peer's bytes (as opposed to the OS or a timeout).
    pub fn is_protocol_violation(&self) -> bool {
        !matches!(
            self,
            NetError::Io(_)
                | NetError::Closed
                | NetError::HandshakeTimeout(_)
                | NetError::Poisoned
                | NetError::Refused(_)
        )
    }
}
