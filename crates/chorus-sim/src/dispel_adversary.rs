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
use chorus_dbft::{BinMsg, BinSet, DbftBundle, DbftConfig, DbftMsg};

fn decode(w: &DbftWire, n: usize) -> Option<Vec<DbftMsg>> {
    chorus_core::decode::<DbftBundle>(&w.bytes, &DbftConfig::new(n).limits())
        .ok()
        .map(|b| b.0)
}

fn wire(msgs: &[DbftMsg]) -> DbftWire {
    DbftWire {
        bytes: bytes::Bytes::from(DbftBundle::encode(msgs)),
    }
}

/// Every message of the bundle through `lie` (None: sent as it was).
/// Whether any changed.
fn map_bundle(w: DbftWire, n: usize, mut lie: impl FnMut(&DbftMsg) -> Option<DbftMsg>) -> (DbftWire, bool) {
    let Some(msgs) = decode(&w, n) else {
        return (w, false);
    };
    let mut changed = false;
    let out: Vec<DbftMsg> = msgs
        .into_iter()
        .map(|m| match lie(&m) {
            Some(other) => {
                changed = true;
                other
            }
            None => m,
        })
        .collect();
    if changed {
        (wire(&out), true)
    } else {
        (w, false)
    }
}

/// A bundle no correct sender makes, from the messages of `w` (`corrupt`):
/// 0 — a batch (INIT) travelling with small messages (a sender sends a batch
/// alone); 1 — the small messages repeated past `MAX_BUNDLE_MSGS` (one
/// frame, thousands of decodes); 2 — no message at all. Returns the frame
/// and the fault counter's name.
pub fn craft_bundle(w: DbftWire, n: usize, how: u32) -> (DbftWire, &'static str) {
    // Not `DbftBundle::encode`, which asserts what a correct sender makes.
    let wire = |msgs: &[DbftMsg]| DbftWire {
        bytes: bytes::Bytes::from(chorus_core::encode(&DbftBundle(msgs.to_vec()))),
    };
    let Some(msgs) = decode(&w, n) else {
        return (w, "byz-dbft-bundle-undecodable");
    };
    match how {
        0 => {
            let init = msgs
                .iter()
                .find(|m| !m.is_small())
                .cloned()
                .unwrap_or(DbftMsg::RbInit {
                    epoch: msgs.first().map_or(0, DbftMsg::epoch),
                    batch: Batch::noop(),
                });
            let mut out: Vec<DbftMsg> = msgs.into_iter().filter(DbftMsg::is_small).collect();
            out.push(init.clone());
            out.push(init);
            (wire(&out), "byz-dbft-bundle-batch-with-votes")
        }
        1 => {
            let small: Vec<DbftMsg> = msgs.into_iter().filter(DbftMsg::is_small).collect();
            if small.is_empty() {
                return (wire(&[]), "byz-dbft-bundle-empty");
            }
            let out: Vec<DbftMsg> = small
                .iter()
                .cycle()
                .take(chorus_dbft::MAX_BUNDLE_MSGS + 1)
                .cloned()
                .collect();
            (wire(&out), "byz-dbft-bundle-oversized")
        }
        _ => (wire(&[]), "byz-dbft-bundle-empty"),
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
    map_bundle(w, n, |m| match *m {
        DbftMsg::RbInit { epoch, ref batch } if in_group(epoch, to) => {
            alt(batch).map(|b| DbftMsg::RbInit { epoch, batch: b })
        }
        DbftMsg::Bin {
            inst,
            msg: BinMsg::Coord { round, value },
        } if in_group(inst.epoch, to) => Some(DbftMsg::Bin {
            inst,
            msg: BinMsg::Coord { round, value: !value },
        }),
        _ => None,
    })
}

/// Echo/ready for a hash never broadcast; BV/AUX for the other value.
pub fn conflicting(w: DbftWire, n: usize, to: ReplicaId) -> (DbftWire, bool) {
    map_bundle(w, n, |m| conflicting_one(m.clone(), to))
}

fn conflicting_one(m: DbftMsg, to: ReplicaId) -> Option<DbftMsg> {
    if !in_group(m.epoch(), to) {
        return None;
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
        _ => return None,
    };
    Some(changed)
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
        let outs: Vec<(DbftWire, bool)> = (0..4)
            .map(|r| conflicting(wire(std::slice::from_ref(&m)), 4, ReplicaId(r)))
            .collect();
        assert!(outs.iter().any(|o| o.1) && outs.iter().any(|o| !o.1));
        assert_eq!(
            conflicting(wire(std::slice::from_ref(&m)), 4, ReplicaId(0)),
            conflicting(wire(std::slice::from_ref(&m)), 4, ReplicaId(0))
        );
        let init = DbftMsg::RbInit {
            epoch: 2,
            batch: Batch::noop(),
        };
        let (w, changed) = equivocate(wire(std::slice::from_ref(&init)), 4, ReplicaId(0), |_| None);
        assert!(
            !changed && w == wire(std::slice::from_ref(&init)),
            "no alternative batch: sent as is"
        );
    }

    /// Each crafted bundle breaks one rule a correct sender keeps, and
    /// the receiver's checks see it: too many messages before decoding, a
    /// batch not alone, no message.
    #[test]
    fn crafted_bundles_break_the_rules_correct_senders_keep() {
        let echo = DbftMsg::RbEcho {
            epoch: 5,
            proposer: ReplicaId(2),
            digest: Digest([3; 32]),
        };
        let init = DbftMsg::RbInit {
            epoch: 5,
            batch: Batch::noop(),
        };
        let decodes =
            |w: &DbftWire| chorus_core::decode::<DbftBundle>(&w.bytes, &DbftConfig::new(4).limits());
        let (w, how) = craft_bundle(wire(&[echo.clone(), echo.clone()]), 4, 0);
        assert_eq!(how, "byz-dbft-bundle-batch-with-votes");
        assert!(decodes(&w).is_err(), "a batch with votes is refused");
        assert!(
            DbftBundle::precheck(&w.bytes).is_ok(),
            "…by the decoder, not the precheck"
        );
        let (w, how) = craft_bundle(wire(std::slice::from_ref(&echo)), 4, 1);
        assert_eq!(how, "byz-dbft-bundle-oversized");
        assert!(DbftBundle::precheck(&w.bytes).is_err(), "refused before decoding");
        let (w, how) = craft_bundle(wire(&[init]), 4, 2);
        assert_eq!(how, "byz-dbft-bundle-empty");
        assert_eq!(DbftBundle::peek_len(&w.bytes), Some(0));
    }

    /// Bundles are attacked message by message: the lie reaches every
    /// vote a bundle carries, the rest travel unchanged.
    #[test]
    fn every_message_of_a_bundle_is_attacked() {
        let aux = |epoch, slot| DbftMsg::Bin {
            inst: InstanceId {
                epoch,
                slot: ReplicaId(slot),
            },
            msg: BinMsg::Aux {
                round: 1,
                values: BinSet::One,
            },
        };
        // Epoch 4 to replica 0 is in the lied-to half, epoch 5 is not.
        let msgs = vec![aux(4, 0), aux(5, 1), aux(4, 2)];
        let (w, changed) = conflicting(wire(&msgs), 4, ReplicaId(0));
        assert!(changed);
        let got = decode(&w, 4).unwrap();
        assert_eq!(got.len(), 3);
        assert_ne!(got[0], msgs[0]);
        assert_eq!(got[1], msgs[1]);
        assert_ne!(got[2], msgs[2]);
    }
}
