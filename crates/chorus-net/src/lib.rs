//! chorus-net: the replica and client transport (DESIGN §3, §6).
//!
//! * [`connect`] / [`accept`] run the authenticated handshake on a TCP stream
//!   and return the peer's authenticated [`PeerRole`] with a [`FrameReader`]
//!   and a [`FrameWriter`];
//! * every frame is length-delimited and carries a counter and a MAC under a
//!   per-direction session key; anything that fails is refused and counted in
//!   [`Counters`];
//! * [`spawn_peer_link`] keeps one outbound connection alive with back-off.
//!
//! Works on a current-thread or a multi-thread tokio runtime.

mod admission;
mod counters;
mod error;
mod handshake;
mod limits;
mod link;
mod raw;
mod role;
mod session;

pub use admission::{Gate, GateLimits, Pending, Refusal};
pub use counters::{Counters, CountersSnapshot};
pub use error::NetError;
pub use handshake::{
    accept, connect, peek_hello, recorded_hello, HandshakeRefusal, HelloPeek, PreAuth, Responder,
    HELLO_PEEK_BYTES, PROTOCOL_VERSION,
};
pub use limits::NetLimits;
pub use link::{spawn_peer_link, Backoff, DialFailure, Inbound, LinkSpec, PeerLink};
pub use role::{Expected, PeerRole};
pub use session::{FrameReader, FrameWriter, FRAME_OVERHEAD_BYTES};
