//! The authenticated key exchange that opens every connection (DESIGN §6).
//!
//! Three messages, in the style of SIGMA / TLS 1.3's CertificateVerify:
//!
//! ```text
//! initiator → responder : Hello_i                       (role, ephemeral X25519 key, nonce, version)
//! responder → initiator : Hello_r, Auth_r = Sig_r(T, "responder")
//! initiator → responder : Auth_i = Sig_i(T, "initiator")
//! T = BLAKE3-derive("chorus net transcript v1", |Hello_i| Hello_i |Hello_r| Hello_r)
//! ```
//!
//! Each side verifies the other's signature with the Ed25519 key the cluster
//! configuration lists for the claimed role, so a peer proves it holds that
//! role's secret key. The signature covers both hellos (both roles, both
//! ephemeral keys, both nonces) and a side label, so it cannot be replayed in
//! another session or reflected back to its signer. The per-direction session
//! keys are derived from the ephemeral Diffie–Hellman secret and `T`: a
//! man in the middle who substitutes an ephemeral key cannot produce the
//! signatures, and one who relays honestly cannot compute the keys.
//!
//! Why not TLS: BFT needs integrity and authenticity of every frame, not
//! confidentiality; identities are raw Ed25519 keys in the configuration, with
//! no certificates or CAs to manage; and a 16-byte keyed-BLAKE3 MAC per frame
//! is cheaper than AEAD over every byte.

use crate::counters::Counters;
use crate::error::NetError;
use crate::limits::NetLimits;
use crate::raw::{RawReader, RawWriter};
use crate::role::{Expected, PeerRole};
use crate::session::{FrameReader, FrameWriter};
use chorus_core::{ClusterConfig, Digest, Identity, PublicIdentity, Signature};
use rand::rngs::OsRng;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use x25519_dalek::{EphemeralSecret, PublicKey as DhPublic};

/// Version of this handshake and frame format.
pub const PROTOCOL_VERSION: u16 = 1;
const MAGIC: [u8; 8] = *b"CHORUSv1";
/// No handshake message is anywhere near this long; anything longer is refused.
const MAX_HANDSHAKE_FRAME_BYTES: usize = 256;

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Hello {
    magic: [u8; 8],
    version: u16,
    role: PeerRole,
    ephemeral: [u8; 32],
    nonce: [u8; 32],
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Auth {
    sig: Signature,
}

#[derive(Copy, Clone)]
enum Side {
    Initiator,
    Responder,
}

impl Side {
    fn label(self) -> &'static [u8] {
        match self {
            Side::Initiator => b"initiator",
            Side::Responder => b"responder",
        }
    }
}

fn transcript(hello_i: &[u8], hello_r: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new_derive_key("chorus net transcript v1");
    for part in [hello_i, hello_r] {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part);
    }
    *h.finalize().as_bytes()
}

fn auth_message(t: &[u8; 32], side: Side) -> Digest {
    Digest::of_parts("chorus net auth v1", &[t, side.label()])
}

/// `(initiator→responder, responder→initiator)` keys.
fn session_keys(shared: &[u8; 32], t: &[u8; 32]) -> ([u8; 32], [u8; 32]) {
    let mut material = [0u8; 64];
    material[..32].copy_from_slice(shared);
    material[32..].copy_from_slice(t);
    (
        blake3::derive_key("chorus net session v1 initiator to responder", &material),
        blake3::derive_key("chorus net session v1 responder to initiator", &material),
    )
}

fn decode_exact<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, NetError> {
    let (v, rest) =
        postcard::take_from_bytes(bytes).map_err(|e| NetError::BadHandshake(format!("{what}: {e}")))?;
    if !rest.is_empty() {
        return Err(NetError::BadHandshake(format!(
            "{what}: {} trailing bytes",
            rest.len()
        )));
    }
    Ok(v)
}

fn parse_hello(bytes: &[u8]) -> Result<Hello, NetError> {
    let h: Hello = decode_exact(bytes, "hello")?;
    if h.magic != MAGIC {
        return Err(NetError::BadHandshake("bad magic".into()));
    }
    if h.version != PROTOCOL_VERSION {
        return Err(NetError::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs: h.version,
        });
    }
    Ok(h)
}

fn new_hello(role: PeerRole) -> (EphemeralSecret, Vec<u8>) {
    let secret = EphemeralSecret::random_from_rng(OsRng);
    let mut nonce = [0u8; 32];
    OsRng.fill_bytes(&mut nonce);
    let hello = Hello {
        magic: MAGIC,
        version: PROTOCOL_VERSION,
        role,
        ephemeral: DhPublic::from(&secret).to_bytes(),
        nonce,
    };
    (secret, postcard::to_allocvec(&hello).expect("hello encodes"))
}

fn shared_secret(secret: EphemeralSecret, peer_ephemeral: [u8; 32]) -> Result<[u8; 32], NetError> {
    let shared = secret.diffie_hellman(&DhPublic::from(peer_ephemeral));
    if !shared.was_contributory() {
        return Err(NetError::WeakKey);
    }
    Ok(*shared.as_bytes())
}

fn verify(
    peer: PeerRole,
    key: &PublicIdentity,
    t: &[u8; 32],
    side: Side,
    auth: &Auth,
) -> Result<(), NetError> {
    if key.verify(auth_message(t, side).as_bytes(), &auth.sig) {
        Ok(())
    } else {
        Err(NetError::BadSignature(peer))
    }
}

async fn read_msg(r: &mut RawReader<OwnedReadHalf>) -> Result<bytes::Bytes, NetError> {
    r.next().await?.ok_or(NetError::Closed)
}

struct Established {
    peer: PeerRole,
    rd: RawReader<OwnedReadHalf>,
    wr: RawWriter<OwnedWriteHalf>,
    read_key: [u8; 32],
    write_key: [u8; 32],
}

async fn initiate(
    stream: TcpStream,
    me: &Identity,
    my_role: PeerRole,
    expected: &Expected,
) -> Result<Established, NetError> {
    let (rd, wr) = stream.into_split();
    let mut rd = RawReader::new(rd, MAX_HANDSHAKE_FRAME_BYTES);
    let mut wr = RawWriter::new(wr);
    let (secret, hello_i) = new_hello(my_role);
    wr.push(&[&hello_i]);
    wr.flush().await?;

    let hello_r_bytes = read_msg(&mut rd).await?;
    let hello_r = parse_hello(&hello_r_bytes)?;
    if !expected.matches(hello_r.role) {
        return Err(NetError::UnexpectedPeer {
            got: hello_r.role,
            expected: expected.to_string(),
        });
    }
    let t = transcript(&hello_i, &hello_r_bytes);
    let auth_r: Auth = decode_exact(&read_msg(&mut rd).await?, "auth")?;
    verify(hello_r.role, &expected.identity, &t, Side::Responder, &auth_r)?;
    let shared = shared_secret(secret, hello_r.ephemeral)?;

    let auth_i = Auth {
        sig: me.sign(auth_message(&t, Side::Initiator).as_bytes()),
    };
    wr.push(&[&postcard::to_allocvec(&auth_i).expect("auth encodes")]);
    wr.flush().await?;
    let (i2r, r2i) = session_keys(&shared, &t);
    Ok(Established {
        peer: hello_r.role,
        rd,
        wr,
        read_key: r2i,
        write_key: i2r,
    })
}

async fn respond(
    stream: TcpStream,
    me: &Identity,
    my_role: PeerRole,
    config: &ClusterConfig,
) -> Result<Established, NetError> {
    let (rd, wr) = stream.into_split();
    let mut rd = RawReader::new(rd, MAX_HANDSHAKE_FRAME_BYTES);
    let mut wr = RawWriter::new(wr);

    let hello_i_bytes = read_msg(&mut rd).await?;
    let hello_i = parse_hello(&hello_i_bytes)?;
    // Refuse unknown roles before spending a signature on them.
    let peer_key = hello_i
        .role
        .lookup(config)
        .ok_or(NetError::UnknownPeer(hello_i.role))?;
    let (secret, hello_r) = new_hello(my_role);
    let shared = shared_secret(secret, hello_i.ephemeral)?;
    let t = transcript(&hello_i_bytes, &hello_r);
    let auth_r = Auth {
        sig: me.sign(auth_message(&t, Side::Responder).as_bytes()),
    };
    wr.push(&[&hello_r]);
    wr.push(&[&postcard::to_allocvec(&auth_r).expect("auth encodes")]);
    wr.flush().await?;

    let auth_i: Auth = decode_exact(&read_msg(&mut rd).await?, "auth")?;
    verify(hello_i.role, &peer_key, &t, Side::Initiator, &auth_i)?;
    let (i2r, r2i) = session_keys(&shared, &t);
    Ok(Established {
        peer: hello_i.role,
        rd,
        wr,
        read_key: i2r,
        write_key: r2i,
    })
}

async fn finish<F>(
    fut: F,
    limits: &NetLimits,
    counters: &Arc<Counters>,
) -> Result<(PeerRole, FrameReader, FrameWriter), NetError>
where
    F: std::future::Future<Output = Result<Established, NetError>>,
{
    let r = match tokio::time::timeout(limits.handshake_timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(NetError::HandshakeTimeout(limits.handshake_timeout)),
    };
    match r {
        Ok(e) => {
            Counters::bump(&counters.handshakes_ok);
            let reader = FrameReader::new(e.rd, e.read_key, e.peer, limits.max_frame_bytes, counters.clone());
            let writer = FrameWriter::new(
                e.wr,
                e.write_key,
                e.peer,
                limits.max_frame_bytes,
                limits.max_buffered_frames,
                counters.clone(),
            );
            Ok((e.peer, reader, writer))
        }
        Err(err) => {
            Counters::bump(&counters.handshake_failures);
            counters.record(&err);
            Err(err)
        }
    }
}

/// Open an authenticated connection on a freshly connected stream: we claim
/// `my_role`, and the peer must prove it is `expected`. Returns the peer's
/// (authenticated) role and the two halves of the connection.
pub async fn connect(
    stream: TcpStream,
    me: &Identity,
    my_role: PeerRole,
    expected: &Expected,
    limits: &NetLimits,
    counters: &Arc<Counters>,
) -> Result<(PeerRole, FrameReader, FrameWriter), NetError> {
    // Frames are small and latency-bound; batching is done by the writer.
    stream.set_nodelay(true)?;
    finish(initiate(stream, me, my_role, expected), limits, counters).await
}

/// Accept an authenticated connection: the peer claims a role, and must prove
/// it holds the key `config` lists for that role (unknown roles are refused).
/// Any configured role is accepted; the caller decides whether that kind of
/// peer (replica or client) belongs on this port.
pub async fn accept(
    stream: TcpStream,
    me: &Identity,
    my_role: PeerRole,
    config: &ClusterConfig,
    limits: &NetLimits,
    counters: &Arc<Counters>,
) -> Result<(PeerRole, FrameReader, FrameWriter), NetError> {
    stream.set_nodelay(true)?;
    finish(respond(stream, me, my_role, config), limits, counters).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcript_is_order_and_boundary_sensitive() {
        assert_ne!(transcript(b"ab", b"c"), transcript(b"a", b"bc"));
        assert_ne!(transcript(b"a", b"b"), transcript(b"b", b"a"));
    }

    #[test]
    fn auth_messages_differ_per_side_and_keys_per_direction() {
        let t = [5u8; 32];
        assert_ne!(
            auth_message(&t, Side::Initiator),
            auth_message(&t, Side::Responder)
        );
        let (a, b) = session_keys(&[1u8; 32], &t);
        assert_ne!(a, b);
        assert_ne!(session_keys(&[1u8; 32], &[6u8; 32]).0, a);
    }

    #[test]
    fn hello_parsing_rejects_garbage_magic_and_version() {
        let (_, ok) = new_hello(PeerRole::Client {
            id: chorus_core::ClientId(3),
        });
        assert!(parse_hello(&ok).is_ok());
        assert!(matches!(parse_hello(&[1, 2, 3]), Err(NetError::BadHandshake(_))));
        let mut trailing = ok.clone();
        trailing.push(0);
        assert!(matches!(parse_hello(&trailing), Err(NetError::BadHandshake(_))));
        let mut h: Hello = decode_exact(&ok, "hello").unwrap();
        h.version = 99;
        let bytes = postcard::to_allocvec(&h).unwrap();
        assert!(matches!(
            parse_hello(&bytes),
            Err(NetError::VersionMismatch { theirs: 99, .. })
        ));
        h.version = PROTOCOL_VERSION;
        h.magic[0] ^= 1;
        let bytes = postcard::to_allocvec(&h).unwrap();
        assert!(matches!(parse_hello(&bytes), Err(NetError::BadHandshake(_))));
    }

    #[test]
    fn low_order_ephemeral_key_is_refused() {
        let (secret, _) = new_hello(PeerRole::Client {
            id: chorus_core::ClientId(0),
        });
        assert!(matches!(shared_secret(secret, [0u8; 32]), Err(NetError::WeakKey)));
    }
}
