//! chorus-core: the vocabulary every other crate shares. Sans-IO.

pub mod codec;
pub mod config;
pub mod crypto;
pub mod digest_memo;
pub mod domain;
pub mod first_contact;
pub mod ids;
pub mod messages;
pub mod quorum;
pub mod reply_fanout;
pub mod reprediction;
pub mod request;
pub mod seq_window;
pub mod status_report;
pub mod switch;
pub mod verify_memo;
pub mod wire_bounds;

pub use codec::{decode, encode, encode_within, encoded_len, CodecError, Limits, Validate};
pub use config::{
    ClientAuthKind, ClientInfo, ClusterConfig, ConfigError, LeaderRotation, OrderingMode, PrepareAuth,
    ProtocolParams, ReplicaInfo, MAX_PILLARS,
};
pub use crypto::{Digest, DigestDomain, Identity, Mac, MacKey, PublicIdentity, Signature};
pub use digest_memo::DigestMemo;
pub use domain::{ClusterTag, SigKind};
pub use ids::*;
pub use messages::*;
pub use reprediction::{
    RePrediction, RePredictionCert, RePredictionVote, MAX_REPREDICTION_PARTITIONS, REPREDICTION_CLIENT,
};
pub use request::{
    designated_replier, flags, reply_start, Authenticator, Batch, Reply, ReplyBody, Request, REJECT_ABANDONED,
};
pub use switch::{switch_op, switch_target, Assignments, Handover, SwitchOutcome, SwitchPolicy};
pub use wire_bounds::{WireBounds, MAX_FRAME_BYTES_CAP};
