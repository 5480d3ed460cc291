//! # chorus-dbft: the DBFT consensus core of the Dispel mode
//!
//! Leaderless, signature-free Byzantine consensus for one *epoch* at a time,
//! many epochs in flight (Dispel, `papers/002`, §3–§4), implemented from
//! `shared/specs/dbft.md` (DBFT of Crain, Gramoli, Larrea, Raynal \[TR\]).
//!
//! Per epoch and per proposer `p`:
//! * a Bracha **reliable broadcast** of `p`'s batch whose ECHO/READY carry
//!   only the digest ([`rb`]); the bytes travel in the INIT only, are stored
//!   by digest, and a decided-but-missing batch is fetched and digest-checked;
//! * a **binary consensus** deciding whether `p`'s batch is in the epoch
//!   ([`binary`]): BV-broadcast, the rotating weak coordinator, two timers
//!   per round, the own-AUX preference (New5), catch-up, the d+2 halting rule
//!   and DECIDED messages.
//!
//! The **reduction** ([`engine`]) inputs 1 (without BV-broadcasting it) to
//! every instance whose batch it RB-delivered, 0 to all others once one
//! instance decided 1, and outputs *every* selected batch (the superblock),
//! sorted by digest. The **join rule** makes a replica take part in an epoch
//! seen from t+1 senders once the previous epoch is decided.
//!
//! Sans-IO and deterministic: [`Dbft::handle`] takes an [`Event`] and the
//! current time and returns [`Action`]s. No signatures, no randomness.
//! Everything is bounded by [`DbftConfig`]; Byzantine input is dropped with a
//! counted [`DropReason`], never a panic. Nothing is persisted: a replica that
//! restarts without its state must not rejoin epochs it voted in (see
//! docs/decisions.md, "Dispel: the DBFT core").

pub mod binary;
pub mod config;
pub mod counters;
pub mod engine;
pub mod epoch;
pub mod msg;
pub mod rb;

#[cfg(test)]
mod tests;

pub use binary::{Binary, Input, Phase, TimerKind};
pub use config::{DbftConfig, Variant};
pub use counters::{Counters, DropReason};
pub use engine::{Action, Dbft, Event, SlotDecision, TimerId};
pub use epoch::EpochState;
pub use msg::{
    BinMsg, BinSet, DbftBundle, DbftMsg, Epoch, InstanceId, Round, MAX_BUNDLE_MSGS, SMALL_MSG_MAX_BYTES,
};
