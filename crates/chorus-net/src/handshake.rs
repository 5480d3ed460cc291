//! The authenticated key exchange that opens every connection (DESIGN §6).
//!
//! Five messages, in the style of SIGMA / TLS 1.3's CertificateVerify, with a
//! cheap proof of key possession in front (docs/security.md):
//!
//! ```text
//! initiator → responder : Hello_i                       (role, ephemeral X25519 key, nonce, version)
//! responder → initiator : Challenge = fresh 16-byte cookie
//! initiator → responder : Proof = MAC_k(C, Hello_i, cookie), k = the static pairwise key
//! responder → initiator : Hello_r, Auth_r = Sig_r(T, "responder")
//! initiator → responder : Auth_i = Sig_i(T, "initiator")
//! C = the cluster tag (cluster id and replica keys)
//! T = BLAKE3-derive("chorus net transcript v2", C, Hello_i, cookie, Hello_r)
//! ```
//!
//! Each side verifies the other's signature with the Ed25519 key the cluster
//! configuration lists for the claimed role, so a peer proves it holds that
//! role's secret key. The signature covers both hellos (both roles, both
//! ephemeral keys, both nonces), the cookie, the cluster tag and a side label,
//! so it cannot be replayed in another session or another cluster, or
//! reflected back to its signer. The per-direction session keys are derived
//! from the ephemeral Diffie–Hellman secret and `T`: a man in the middle who
//! substitutes an ephemeral key cannot produce the signatures, and one who
//! relays honestly cannot compute the keys.
//!
//! The challenge and proof cost the responder two BLAKE3 calls: it does no
//! X25519 and no Ed25519 work for anyone who does not hold the static key of
//! the role it names (the pairwise keys are computed once per configured
//! identity and cached). A recorded hello and proof are useless: the cookie is
//! new on every connection. [`Responder::pre_authenticate`] stops there so the
//! caller can apply its per-source and per-role budgets before
//! [`PreAuth::complete`] spends the signature.
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
use chorus_core::{ClusterConfig, Digest, Identity, Mac, MacKey, PublicIdentity, Signature};
use rand::rngs::OsRng;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use x25519_dalek::{EphemeralSecret, PublicKey as DhPublic};

/// Version of this handshake and frame format. 3: `dispel` frames carry
/// DBFT bundles (docs/decisions.md, "Dispel sends its small DBFT messages
/// in bundles"); a v2 replica would misread them. 4: clients ask for views
/// (`ClientMsg::ViewQuery`, leader-first requests); a v3 replica would
/// close the connection on it, so a v4 client is refused at the handshake.
/// 5: requests may carry `flags::FEW_REPLIES`, which a v4 replica refuses
/// as an unknown flag (the client would wait for replies that never come).
/// 6: clients resend as `ClientMsg::Resend`, which a v5 replica cannot
/// decode (it would close the connection on every retransmission).
/// 7: requests carry `flags::DIGEST_SHA256`, which a v6 replica refuses as
/// an unknown flag.
pub const PROTOCOL_VERSION: u16 = 7;
const MAGIC: [u8; 8] = *b"CHORUSv6";
/// No handshake message is anywhere near this long; anything longer is refused.
const MAX_HANDSHAKE_FRAME_BYTES: usize = 256;
/// Read buffer of a connection still in its handshake (grown after it).
const HANDSHAKE_READ_BYTES: usize = 512;

/// A responder that refuses a handshake says why before it closes, so the
/// dialler can tell "wrong key" from "cluster down" (issue 14 item 4): these
/// eight bytes and a reason code, in place of the challenge or of its hello.
/// Neither a challenge (16 bytes) nor a hello (starts with `MAGIC`) can be
/// mistaken for it. It tells an unauthenticated peer nothing the public
/// cluster file does not: whether the identity it claims is configured.
const REFUSAL_MAGIC: [u8; 8] = *b"CHORUSno";

/// Why a responder refused a handshake (sent to the dialler).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum HandshakeRefusal {
    /// The claimed identity (client or replica id) is not in its configuration.
    UnknownIdentity,
    /// The proof of key possession failed: it holds another key (or another
    /// cluster id) for the claimed identity.
    WrongKey,
    /// Another protocol version.
    Version,
}

impl HandshakeRefusal {
    fn code(self) -> u8 {
        match self {
            HandshakeRefusal::UnknownIdentity => 1,
            HandshakeRefusal::WrongKey => 2,
            HandshakeRefusal::Version => 3,
        }
    }

    fn frame(self) -> [u8; 9] {
        let mut f = [0u8; 9];
        f[..8].copy_from_slice(&REFUSAL_MAGIC);
        f[8] = self.code();
        f
    }

    /// The refusal a handshake reply carries, if it is one.
    fn parse(bytes: &[u8]) -> Option<HandshakeRefusal> {
        match bytes {
            [m @ .., code] if m == REFUSAL_MAGIC => match code {
                1 => Some(HandshakeRefusal::UnknownIdentity),
                2 => Some(HandshakeRefusal::WrongKey),
                3 => Some(HandshakeRefusal::Version),
                _ => None,
            },
            _ => None,
        }
    }
}

impl std::fmt::Display for HandshakeRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HandshakeRefusal::UnknownIdentity => {
                "the replica's cluster configuration does not list this identity (files from another cluster?)"
            }
            HandshakeRefusal::WrongKey => {
                "the replica's cluster configuration holds another key or cluster id for this identity \
                 (key or cluster files from another keygen run?)"
            }
            HandshakeRefusal::Version => "the replica speaks another protocol version",
        })
    }
}

/// Printable start of what a non-Chorus endpoint sent, for the error.
fn preview(bytes: &[u8]) -> String {
    let text: String = bytes
        .iter()
        .take(16)
        .map(|&b| if (0x20..0x7f).contains(&b) { b as char } else { '.' })
        .collect();
    format!("{text:?}")
}

/// The responder's first reply to our hello: a challenge, unless it refused
/// us or is no Chorus endpoint. Anything else than a short frame there means
/// the latter: a length header of `0x48545450` is "HTTP".
async fn read_first_reply(r: &mut RawReader<OwnedReadHalf>) -> Result<bytes::Bytes, NetError> {
    let bytes = match read_msg(r).await {
        Err(NetError::Oversize { len, .. }) => {
            return Err(NetError::NotChorus(preview(&(len as u32).to_be_bytes())));
        }
        other => other?,
    };
    if let Some(why) = HandshakeRefusal::parse(&bytes) {
        return Err(NetError::Refused(why));
    }
    Ok(bytes)
}

/// Tell the dialler why, best effort and bounded: the connection is dropped next.
async fn refuse(wr: &mut RawWriter<OwnedWriteHalf>, why: HandshakeRefusal, within: std::time::Duration) {
    let frame = why.frame();
    wr.push(&[&frame]);
    let _ = tokio::time::timeout(within, wr.flush()).await;
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Hello {
    magic: [u8; 8],
    version: u16,
    role: PeerRole,
    ephemeral: [u8; 32],
    nonce: [u8; 32],
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Challenge {
    cookie: [u8; 16],
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Proof {
    mac: Mac,
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

fn transcript(cluster: &Digest, hello_i: &[u8], cookie: &[u8; 16], hello_r: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new_derive_key("chorus net transcript v2");
    for part in [&cluster.as_bytes()[..], hello_i, cookie, hello_r] {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part);
    }
    *h.finalize().as_bytes()
}

/// What the proof MACs: domain-separated from request authenticators, which
/// use the same pairwise key over cluster-bound request digests
/// (`ClusterTag::bind`).
fn proof_message(cluster: &Digest, hello_i: &[u8], cookie: &[u8; 16]) -> Digest {
    Digest::of_parts("chorus net proof v2", &[cluster.as_bytes(), hello_i, cookie])
}

fn auth_message(t: &[u8; 32], side: Side) -> Digest {
    Digest::of_parts("chorus net auth v2", &[t, side.label()])
}

/// `(initiator→responder, responder→initiator)` keys.
fn session_keys(shared: &[u8; 32], t: &[u8; 32]) -> ([u8; 32], [u8; 32]) {
    let mut material = [0u8; 64];
    material[..32].copy_from_slice(shared);
    material[32..].copy_from_slice(t);
    (
        blake3::derive_key("chorus net session v2 initiator to responder", &material),
        blake3::derive_key("chorus net session v2 responder to initiator", &material),
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

/// The first message an initiator sends as `role` (a valid hello, with a
/// throw-away ephemeral key): what an eavesdropper could record and replay.
/// For tests and attack drills; it leads nowhere without the role's key.
pub fn recorded_hello(role: PeerRole) -> Vec<u8> {
    new_hello(role).1
}

/// What the first bytes of an inbound connection claim about its initiator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelloPeek {
    /// A well-formed hello of this protocol version claiming this role.
    /// Unauthenticated: good for choosing where the handshake runs, which
    /// then proves it (or refuses the connection).
    Role(PeerRole),
    /// The hello frame is not complete in these bytes yet.
    NeedMore,
    /// Not a hello this responder would accept.
    Invalid,
}

/// Read the initiator's claimed role from the bytes it sent first (its
/// length-prefixed hello), without taking them from the stream: a replica
/// peeks at a client connection to hand it to the pillar that serves that
/// client (COP §4) before the handshake, which still runs in full there.
pub fn peek_hello(prefix: &[u8]) -> HelloPeek {
    let Some(len) = prefix
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    else {
        return HelloPeek::NeedMore;
    };
    if len == 0 || len > MAX_HANDSHAKE_FRAME_BYTES {
        return HelloPeek::Invalid;
    }
    let Some(body) = prefix.get(4..4 + len) else {
        return HelloPeek::NeedMore;
    };
    match parse_hello(body) {
        Ok(h) => HelloPeek::Role(h.role),
        Err(_) => HelloPeek::Invalid,
    }
}

/// Bytes `peek_hello` may need: a whole hello frame, prefix included.
pub const HELLO_PEEK_BYTES: usize = 4 + MAX_HANDSHAKE_FRAME_BYTES;

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

async fn send_msg(w: &mut RawWriter<OwnedWriteHalf>, msg: &impl Serialize) -> Result<(), NetError> {
    w.push(&[&postcard::to_allocvec(msg).expect("handshake message encodes")]);
    w.flush().await
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
    let mut rd = RawReader::new(rd, MAX_HANDSHAKE_FRAME_BYTES, HANDSHAKE_READ_BYTES);
    let mut wr = RawWriter::new(wr);
    let (secret, hello_i) = new_hello(my_role);
    wr.push(&[&hello_i]);
    wr.flush().await?;

    let first = read_first_reply(&mut rd).await?;
    let challenge: Challenge =
        decode_exact(&first, "challenge").map_err(|_| NetError::NotChorus(preview(&first)))?;
    let pairwise = me.pairwise_key(&expected.identity);
    let proof = Proof {
        mac: pairwise.mac(proof_message(&expected.cluster, &hello_i, &challenge.cookie).as_bytes()),
    };
    send_msg(&mut wr, &proof).await?;

    let hello_r_bytes = read_msg(&mut rd).await?;
    if let Some(why) = HandshakeRefusal::parse(&hello_r_bytes) {
        return Err(NetError::Refused(why));
    }
    let hello_r = parse_hello(&hello_r_bytes)?;
    if !expected.matches(hello_r.role) {
        return Err(NetError::UnexpectedPeer {
            got: hello_r.role,
            expected: expected.to_string(),
        });
    }
    let t = transcript(&expected.cluster, &hello_i, &challenge.cookie, &hello_r_bytes);
    let auth_r: Auth = decode_exact(&read_msg(&mut rd).await?, "auth")?;
    verify(hello_r.role, &expected.identity, &t, Side::Responder, &auth_r)?;
    let shared = shared_secret(secret, hello_r.ephemeral)?;

    let auth_i = Auth {
        sig: me.sign(auth_message(&t, Side::Initiator).as_bytes()),
    };
    send_msg(&mut wr, &auth_i).await?;
    let (i2r, r2i) = session_keys(&shared, &t);
    Ok(Established {
        peer: hello_r.role,
        rd,
        wr,
        read_key: r2i,
        write_key: i2r,
    })
}

/// The accepting side of the handshake for one endpoint (a pillar's peer
/// port, or the client port): long-lived, shared by all its connections.
pub struct Responder {
    me: Identity,
    my_role: PeerRole,
    config: Arc<ClusterConfig>,
    cluster: Digest,
    cookie_key: [u8; 32],
    next_cookie: AtomicU64,
    /// Pairwise keys by the peer's DH key; only configured identities are
    /// ever looked up, so this holds at most `n + clients` entries.
    pairwise: Mutex<HashMap<[u8; 32], MacKey>>,
}

impl Responder {
    pub fn new(me: Identity, my_role: PeerRole, config: Arc<ClusterConfig>) -> Responder {
        let mut cookie_key = [0u8; 32];
        OsRng.fill_bytes(&mut cookie_key);
        Responder {
            cluster: config.cluster_tag(),
            me,
            my_role,
            config,
            cookie_key,
            next_cookie: AtomicU64::new(0),
            pairwise: Mutex::new(HashMap::new()),
        }
    }

    fn pairwise_key(&self, peer: &PublicIdentity) -> MacKey {
        let mut keys = self.pairwise.lock().unwrap_or_else(|p| p.into_inner());
        keys.entry(peer.dh)
            .or_insert_with(|| self.me.pairwise_key(peer))
            .clone()
    }

    /// Unique per connection without a syscall: keyed BLAKE3 of a counter.
    fn cookie(&self, hello_i: &[u8]) -> [u8; 16] {
        let n = self.next_cookie.fetch_add(1, Ordering::Relaxed);
        let mut h = blake3::Hasher::new_keyed(&self.cookie_key);
        h.update(&n.to_le_bytes());
        h.update(hello_i);
        let mut out = [0u8; 16];
        out.copy_from_slice(&h.finalize().as_bytes()[..16]);
        out
    }

    /// Steps 1–3: read the hello (within `limits.hello_timeout`), send a
    /// fresh cookie, check the proof (within another `hello_timeout`). Costs
    /// two BLAKE3 calls and, once per configured identity, one X25519. On
    /// success the peer holds the static key of the role it claims.
    pub async fn pre_authenticate(
        &self,
        stream: TcpStream,
        limits: &NetLimits,
        counters: &Arc<Counters>,
    ) -> Result<PreAuth, NetError> {
        let started = Instant::now();
        let r = self.pre_authenticate_inner(stream, limits, started).await;
        if let Err(e) = &r {
            Counters::bump(&counters.handshake_failures);
            counters.record(e);
        }
        r
    }

    async fn pre_authenticate_inner(
        &self,
        stream: TcpStream,
        limits: &NetLimits,
        started: Instant,
    ) -> Result<PreAuth, NetError> {
        stream.set_nodelay(true)?;
        let (rd, wr) = stream.into_split();
        let mut rd = RawReader::new(rd, MAX_HANDSHAKE_FRAME_BYTES, HANDSHAKE_READ_BYTES);
        let mut wr = RawWriter::new(wr);
        let step = limits.hello_timeout;
        let hello_i_bytes = tokio::time::timeout(step, read_msg(&mut rd))
            .await
            .map_err(|_| NetError::HandshakeTimeout(step))??;
        let hello_i = match parse_hello(&hello_i_bytes) {
            Ok(h) => h,
            Err(e @ NetError::VersionMismatch { .. }) => {
                refuse(&mut wr, HandshakeRefusal::Version, step).await;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        // Refuse unknown roles before spending anything on them.
        let Some(peer_key) = hello_i.role.lookup(&self.config) else {
            refuse(&mut wr, HandshakeRefusal::UnknownIdentity, step).await;
            return Err(NetError::UnknownPeer(hello_i.role));
        };
        let cookie = self.cookie(&hello_i_bytes);
        let proof: Proof = tokio::time::timeout(step, async {
            send_msg(&mut wr, &Challenge { cookie }).await?;
            decode_exact(&read_msg(&mut rd).await?, "proof")
        })
        .await
        .map_err(|_| NetError::HandshakeTimeout(step))??;
        let msg = proof_message(&self.cluster, &hello_i_bytes, &cookie);
        if !self.pairwise_key(&peer_key).verify(msg.as_bytes(), &proof.mac) {
            refuse(&mut wr, HandshakeRefusal::WrongKey, step).await;
            return Err(NetError::BadProof(hello_i.role));
        }
        Ok(PreAuth {
            role: hello_i.role,
            peer_key,
            ephemeral: hello_i.ephemeral,
            hello_i: hello_i_bytes,
            cookie,
            rd,
            wr,
            started,
        })
    }
}

/// A connection whose peer proved it holds the static key of `role()`, before
/// the responder has done any public-key work.
pub struct PreAuth {
    role: PeerRole,
    peer_key: PublicIdentity,
    ephemeral: [u8; 32],
    hello_i: bytes::Bytes,
    cookie: [u8; 16],
    rd: RawReader<OwnedReadHalf>,
    wr: RawWriter<OwnedWriteHalf>,
    started: Instant,
}

impl PreAuth {
    /// The role the peer claims (and holds the static key of).
    pub fn role(&self) -> PeerRole {
        self.role
    }

    /// Steps 4–5: the ephemeral Diffie–Hellman and signatures. The whole
    /// handshake, pre-authentication included, must finish within
    /// `limits.handshake_timeout`.
    pub async fn complete(
        self,
        responder: &Responder,
        limits: &NetLimits,
        counters: &Arc<Counters>,
    ) -> Result<(PeerRole, FrameReader, FrameWriter), NetError> {
        let left = limits.handshake_timeout.saturating_sub(self.started.elapsed());
        let mut limits = limits.clone();
        limits.handshake_timeout = left;
        finish(self.respond(responder), &limits, counters).await
    }

    async fn respond(self, r: &Responder) -> Result<Established, NetError> {
        let PreAuth {
            role,
            peer_key,
            ephemeral,
            hello_i,
            cookie,
            mut rd,
            mut wr,
            ..
        } = self;
        let (secret, hello_r) = new_hello(r.my_role);
        let shared = shared_secret(secret, ephemeral)?;
        let t = transcript(&r.cluster, &hello_i, &cookie, &hello_r);
        let auth_r = Auth {
            sig: r.me.sign(auth_message(&t, Side::Responder).as_bytes()),
        };
        wr.push(&[&hello_r]);
        wr.push(&[&postcard::to_allocvec(&auth_r).expect("auth encodes")]);
        wr.flush().await?;

        let auth_i: Auth = decode_exact(&read_msg(&mut rd).await?, "auth")?;
        verify(role, &peer_key, &t, Side::Initiator, &auth_i)?;
        let (i2r, r2i) = session_keys(&shared, &t);
        Ok(Established {
            peer: role,
            rd,
            wr,
            read_key: i2r,
            write_key: r2i,
        })
    }
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
/// `my_role`, and the peer must prove it is `expected` (in `expected`'s cluster).
/// Returns the peer's (authenticated) role and the two halves of the connection.
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
/// peer (replica or client) belongs on this port. A one-off [`Responder`]
/// without budgets: servers keep a `Responder` and apply their limits
/// between [`Responder::pre_authenticate`] and [`PreAuth::complete`].
pub async fn accept(
    stream: TcpStream,
    me: &Identity,
    my_role: PeerRole,
    config: &ClusterConfig,
    limits: &NetLimits,
    counters: &Arc<Counters>,
) -> Result<(PeerRole, FrameReader, FrameWriter), NetError> {
    let r = Responder::new(me.clone(), my_role, Arc::new(config.clone()));
    let pre = r.pre_authenticate(stream, limits, counters).await?;
    pre.complete(&r, limits, counters).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcript_is_order_boundary_and_cluster_sensitive() {
        let c = Digest::default();
        let k = [0u8; 16];
        assert_ne!(transcript(&c, b"ab", &k, b"c"), transcript(&c, b"a", &k, b"bc"));
        assert_ne!(transcript(&c, b"a", &k, b"b"), transcript(&c, b"b", &k, b"a"));
        assert_ne!(
            transcript(&c, b"a", &k, b"b"),
            transcript(&c, b"a", &[1; 16], b"b")
        );
        let other = Digest::of(b"another cluster");
        assert_ne!(transcript(&c, b"a", &k, b"b"), transcript(&other, b"a", &k, b"b"));
        assert_ne!(proof_message(&c, b"a", &k), proof_message(&other, b"a", &k));
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

    /// A replica reads a client's claimed role from a peeked prefix: only
    /// once the whole hello frame is there, and never from garbage.
    #[test]
    fn a_peeked_hello_names_its_role_once_complete() {
        let role = PeerRole::Client {
            id: chorus_core::ClientId(42),
        };
        let hello = recorded_hello(role);
        let mut framed = (hello.len() as u32).to_be_bytes().to_vec();
        framed.extend_from_slice(&hello);
        assert!(framed.len() <= HELLO_PEEK_BYTES);
        for cut in 0..framed.len() {
            assert_eq!(peek_hello(&framed[..cut]), HelloPeek::NeedMore, "cut at {cut}");
        }
        assert_eq!(peek_hello(&framed), HelloPeek::Role(role));
        // What follows the hello does not matter.
        framed.extend_from_slice(b"more");
        assert_eq!(peek_hello(&framed), HelloPeek::Role(role));
        assert_eq!(peek_hello(&[0, 0, 0, 0]), HelloPeek::Invalid);
        assert_eq!(peek_hello(&[0, 0, 255, 255]), HelloPeek::Invalid);
        let mut bad = framed.clone();
        bad[4] ^= 1; // the magic
        assert_eq!(peek_hello(&bad), HelloPeek::Invalid);
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
