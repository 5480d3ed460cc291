//! chorus-client: the client library (DESIGN §4 "Requests", "Replies"; §6).
//!
//! A [`Client`] keeps an authenticated connection to every replica's client
//! port, sends each request to all of them with the authenticator the
//! configuration asks for (MAC vector or signature), and accepts a result on
//! `f+1` matching replies — `2f+1` read-only replies on the fast path — with
//! retransmission, busy back-off, a deadline, and a fallback from the fast
//! path to ordering. The quorum logic is the pure [`ReplyQuorum`].

mod auth;
mod blocking;
mod client;
mod cluster_status;
mod driver;
mod error;
mod files;
mod options;
mod quorum;
mod stats;
mod switch;

pub use auth::RequestAuth;
pub use blocking::BlockingClient;
pub use chorus_core::status_report::StatusReport;
pub use client::Client;
pub use cluster_status::ClusterStatus;
pub use driver::Timed;
pub use error::ClientError;
pub use files::{load_client_file, ClientSetup};
pub use options::ClientOptions;
pub use quorum::{Decision, Ignored, Path, ReplyQuorum};
pub use stats::ClientStats;
