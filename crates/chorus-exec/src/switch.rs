//! RCC §III-E `SWITCHINSTANCE` as a system operation: executed by the
//! executor itself, never passed to the service.
//!
//! Every delivered copy of a switch request is applied to the client
//! table's assignment table with `Assignments::apply` — the same pure rule
//! the ordering layer applies when it delivers the request, so both hold the
//! same table and the snapshot carries the ordering layer's table across a
//! state transfer. The reply goes through the client table like any other
//! request (exactly-once, cached for retransmissions).

use crate::client_table::ClientTable;
use bytes::Bytes;
use chorus_core::{Request, Seq, SwitchOutcome, SwitchPolicy};

/// For a switch request: apply it (if the executor runs an `rcc` cluster,
/// `policy` is `Some`) and return the reply its first execution gives. `None`
/// for any other request.
pub fn apply_switch(
    table: &mut ClientTable,
    policy: Option<&SwitchPolicy>,
    req: &Request,
    position: Seq,
) -> Option<Bytes> {
    if !req.is_switch() {
        return None;
    }
    let outcome = match policy {
        Some(p) => table.switches_mut().apply(p, req, p.round_of(position.0)),
        // Outside `rcc` the ordering layer never orders a switch; a replica
        // that delivered one anyway answers it as refused, like every other.
        None => SwitchOutcome::BadTarget,
    };
    Some(outcome.reply())
}
