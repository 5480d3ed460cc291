//! `CHORUS_SIM_LOG` lines: events and actions as `Debug` prints them, with
//! DBFT messages decoded (their wire form is opaque bytes) and batches
//! shortened to their request count.

use chorus_core::{DbftWire, Limits, ReplicaMsg};
use chorus_dbft::{DbftBundle, DbftMsg};
use chorus_order::{Action, Event};

fn dbft(w: &DbftWire, l: &Limits) -> String {
    match chorus_core::decode::<DbftBundle>(&w.bytes, l) {
        Ok(b) => b.0.iter().map(dbft_one).collect::<Vec<_>>().join("; "),
        Err(e) => format!("dbft undecodable ({e})"),
    }
}

fn dbft_one(m: &DbftMsg) -> String {
    match m {
        DbftMsg::RbInit { epoch, batch } => {
            format!("dbft rb-init e{epoch} {} requests", batch.requests.len())
        }
        DbftMsg::BatchResponse {
            epoch,
            proposer,
            batch,
        } => {
            format!(
                "dbft batch-response e{epoch} of {proposer:?} {} requests",
                batch.requests.len()
            )
        }
        m => format!("dbft {m:?}"),
    }
}

pub(crate) fn event(e: &Event, l: &Limits) -> String {
    match e {
        Event::Message {
            from,
            msg: ReplicaMsg::Dbft(w),
        } => format!("{from:?}: {}", dbft(w, l)),
        other => format!("{other:?}"),
    }
}

pub(crate) fn action(a: &Action, l: &Limits) -> String {
    match a {
        Action::Broadcast {
            msg: ReplicaMsg::Dbft(w),
        } => format!("broadcast {}", dbft(w, l)),
        Action::Send {
            to,
            msg: ReplicaMsg::Dbft(w),
        } => format!("send to {to:?} {}", dbft(w, l)),
        other => format!("{other:?}"),
    }
}
