//! The order inside one `dispel` epoch (Dispel §4.4, spec §5.2): the
//! epoch's non-empty batches sorted by batch digest (ties, impossible for
//! distinct bytes, by lane), an identical digest kept once, then the empty
//! slots. Every epoch keeps `n` positions, `seq = e · n + rank`, so a
//! position's epoch is `seq div n` (checkpoints, state transfer and the low
//! watermark work as in `rcc`) while the non-empty batches come first in
//! digest order, as the paper delivers them.

use chorus_core::Batch;
use std::sync::Arc;

/// `(lane, keep)` in delivery order: `keep == false` delivers the lane's
/// slot as a no-op (its digest repeats an earlier batch of the epoch).
pub fn epoch_order(batches: &[Arc<Batch>]) -> Vec<(u32, bool)> {
    let mut full: Vec<(chorus_core::Digest, u32)> = Vec::new();
    let mut empty: Vec<u32> = Vec::new();
    for (lane, b) in batches.iter().enumerate() {
        if b.requests.is_empty() {
            empty.push(lane as u32);
        } else {
            full.push((b.digest(), lane as u32));
        }
    }
    full.sort();
    let mut order = Vec::with_capacity(batches.len());
    let mut dups = Vec::new();
    let mut last = None;
    for (d, lane) in full {
        if last == Some(d) {
            dups.push((lane, false));
        } else {
            order.push((lane, true));
            last = Some(d);
        }
    }
    order.extend(dups);
    order.extend(empty.into_iter().map(|l| (l, true)));
    debug_assert_eq!(order.len(), batches.len());
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{Authenticator, ClientId, Request, RequestSeq};

    fn batch(tag: u8) -> Arc<Batch> {
        Arc::new(Batch {
            requests: vec![Request {
                memo: Default::default(),
                client: ClientId(tag as u64),
                seq: RequestSeq(1),
                flags: 0,
                op: bytes::Bytes::from(vec![tag]),
                auth: Authenticator::Macs(Default::default()),
            }],
            time_ms: 0,
        })
    }

    #[test]
    fn non_empty_batches_by_digest_then_empty_slots_duplicates_blanked() {
        let bs = vec![batch(1), Arc::new(Batch::noop()), batch(2), batch(1)];
        let order = epoch_order(&bs);
        let lanes: Vec<u32> = order.iter().map(|o| o.0).collect();
        let mut sorted = lanes.clone();
        sorted.sort();
        assert_eq!(sorted, vec![0, 1, 2, 3], "a permutation of the lanes");
        // First the distinct non-empty batches, in digest order.
        let (a, b) = (batch(1).digest(), batch(2).digest());
        let first = if a < b { vec![0, 2] } else { vec![2, 0] };
        assert_eq!(&lanes[..2], &first[..]);
        assert!(order[0].1 && order[1].1);
        // Lane 3 repeats lane 0's digest: kept once, its slot a no-op.
        assert_eq!(order[2], (3, false));
        assert_eq!(order[3], (1, true));
    }

    #[test]
    fn order_depends_only_on_the_batches() {
        let bs = vec![batch(9), batch(4), batch(7)];
        assert_eq!(epoch_order(&bs), epoch_order(&bs.clone()));
        let digests: Vec<_> = epoch_order(&bs)
            .iter()
            .map(|(l, _)| bs[*l as usize].digest())
            .collect();
        assert!(digests.windows(2).all(|w| w[0] < w[1]));
    }
}
