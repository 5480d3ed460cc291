//! DBFT-specific Byzantine behaviour (issue 11 item 6), plugged into the
//! classic kinds so every seed that draws them attacks `dispel` too:
//!
//! * `equivocate`: RB equivocation — a different batch in our INIT to half
//!   of the replicas (the half is a function of the epoch and the receiver,
//!   so each receiver always sees the same one); as the weak coordinator, a
//!   different COORD value to that half.
//! * `conflicting-votes`: ECHO/READY for a digest never broadcast, and BV/AUX
//!   votes for the other value (both values across replicas) towards that half.
//!
//! DBFT is signature-free, so nothing is re-signed: the channel authenticates.

use chorus_core::{Batch, DbftWire, Digest, ReplicaId};
use chorus_dbft::{BinMsg, BinSet, DbftConfig, DbftMsg};

fn decode(w: &DbftWire, n: usize) -> Option<DbftMsg> {
    chorus_core::decode::<DbftMsg>(&w.bytes, &DbftConfig::new(n).limits()).ok()
}

fn wire(m: &DbftMsg) -> DbftWire {
    DbftWire {
        bytes: bytes::Bytes::from(chorus_core::encode(m)),
    }
}

/// The receivers that get the other story in `epoch`: about half, never all.
fn in_group(epoch: u64, to: ReplicaId) -> bool {
    (epoch.wrapping_add(u64::from(to.0))) % 2 == 0
}

/// RB equivocation and a two-faced coordinator. `alt` gives a batch that
/// differs from ours (real client requests).
pub fn equivocate(
    w: DbftWire,
    n: usize,
    to: ReplicaId,
    alt: impl Fn(&Batch) -> Option<Batch>,
) -> (DbftWire, bool) {
    let Some(m) = decode(&w, n) else { return (w, false) };
    let changed = match m {
        DbftMsg::RbInit { epoch, batch } if in_group(epoch, to) => match alt(&batch) {
            Some(b) => DbftMsg::RbInit { epoch, batch: b },
            None => return (w, false),
        },
        DbftMsg::Bin {
            inst,
            msg: BinMsg::Coord { round, value },
        } if in_group(inst.epoch, to) => DbftMsg::Bin {
            inst,
            msg: BinMsg::Coord { round, value: !value },
        },
        _ => return (w, false),
    };
    (wire(&changed), true)
}

/// Echo/ready for a hash never broadcast; BV/AUX for the other value.
pub fn conflicting(w: DbftWire, n: usize, to: ReplicaId) -> (DbftWire, bool) {
    let Some(m) = decode(&w, n) else { return (w, false) };
    if !in_group(m.epoch(), to) {
        return (w, false);
    }
    let fake = |d: Digest| Digest::of_parts("byzantine dbft digest", &[d.as_bytes()]);
    let changed = match m {
        DbftMsg::RbEcho {
            epoch,
            proposer,
            digest,
        } => DbftMsg::RbEcho {
            epoch,
            proposer,
            digest: fake(digest),
        },
        DbftMsg::RbReady {
            epoch,
            proposer,
            digest,
        } => DbftMsg::RbReady {
            epoch,
            proposer,
            digest: fake(digest),
        },
        DbftMsg::Bin {
            inst,
            msg: BinMsg::BVal { round, value },
        } => DbftMsg::Bin {
            inst,
            msg: BinMsg::BVal { round, value: !value },
        },
        DbftMsg::Bin {
            inst,
            msg: BinMsg::Aux { round, values },
        } => DbftMsg::Bin {
            inst,
            msg: BinMsg::Aux {
                round,
                values: match values {
                    BinSet::Zero => BinSet::One,
                    BinSet::One => BinSet::Zero,
                    BinSet::Both => BinSet::Both,
                },
            },
        },
        _ => return (w, false),
    };
    (wire(&changed), true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_dbft::InstanceId;

    #[test]
    fn each_receiver_sees_one_story_and_the_halves_differ() {
        let m = DbftMsg::Bin {
            inst: InstanceId {
                epoch: 3,
                slot: ReplicaId(1),
            },
            msg: BinMsg::Aux {
                round: 1,
                values: BinSet::One,
            },
        };
        let outs: Vec<(DbftWire, bool)> = (0..4).map(|r| conflicting(wire(&m), 4, ReplicaId(r))).collect();
        assert!(outs.iter().any(|o| o.1) && outs.iter().any(|o| !o.1));
        assert_eq!(
            conflicting(wire(&m), 4, ReplicaId(0)),
            conflicting(wire(&m), 4, ReplicaId(0))
        );
        let init = DbftMsg::RbInit {
            epoch: 2,
            batch: Batch::noop(),
        };
        let (w, changed) = equivocate(wire(&init), 4, ReplicaId(0), |_| None);
        assert!(!changed && w == wire(&init), "no alternative batch: sent as is");
    }
}
