//! SAREK's predictor (SAREK §IV-A, Algorithm 1): which partitions a request
//! touches, as a pure function of the access set the service declares. Every
//! correct replica computes the same prediction for the same request, so the
//! ordering side can route sub-requests and the executor can tell an EXECUTE
//! from a CROSS-BORDER-EXEC or -SYNC without trusting anybody.

use crate::service::Access;
use chorus_core::Digest;
use serde::{Deserialize, Serialize};

/// A state partition; one BFT instance (lane) and one executor worker each
/// (SAREK §IV-A: "instance and partition are one-to-one correspondent").
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PartitionId(pub u16);

/// The most partitions a deployment may configure (bounds every per-partition
/// array the executor keeps).
pub const MAX_PARTITIONS: u16 = 256;

/// The partition owning `key`: a stable hash of the key mod `partitions`.
/// BLAKE3 with a fixed domain, never a randomly seeded hasher, so every
/// replica and every build agrees.
pub fn partition_of_key(key: &[u8], partitions: u16) -> PartitionId {
    assert!(
        (1..=MAX_PARTITIONS).contains(&partitions),
        "partition count out of range"
    );
    static PARTITION: chorus_core::DigestDomain = chorus_core::DigestDomain::new("chorus sarek partition v1");
    let d = Digest::of_parts_in(&PARTITION, &[key]);
    let mut low = [0u8; 8];
    low.copy_from_slice(&d.as_bytes()[..8]);
    PartitionId((u64::from_le_bytes(low) % u64::from(partitions)) as u16)
}

/// How a sub-request behaves in the partition schedule it was delivered to
/// (SAREK §IV-B 2).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A simple request: runs as soon as it heads its schedule.
    Execute,
    /// The cross-border request's execution instance: the lowest involved
    /// partition ("the one with the smallest ID number", §IV-B 2).
    CrossBorderExec,
    /// A placeholder that holds its schedule until the EXEC has run.
    CrossBorderSync,
}

/// The partitions a request touches: sorted, without duplicates, never empty.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Prediction {
    partitions: Vec<PartitionId>,
}

impl Prediction {
    /// `None` unless `partitions` is non-empty and every id is below `count`.
    pub fn new(mut partitions: Vec<PartitionId>, count: u16) -> Option<Prediction> {
        partitions.sort_unstable();
        partitions.dedup();
        if partitions.is_empty() || partitions.iter().any(|p| p.0 >= count) {
            return None;
        }
        Some(Prediction { partitions })
    }

    pub fn partitions(&self) -> &[PartitionId] {
        &self.partitions
    }

    pub fn contains(&self, p: PartitionId) -> bool {
        self.partitions.binary_search(&p).is_ok()
    }

    /// Where a cross-border request runs: its lowest partition (§IV-B 2).
    pub fn exec_partition(&self) -> PartitionId {
        self.partitions[0]
    }

    pub fn is_cross_border(&self) -> bool {
        self.partitions.len() > 1
    }

    /// The kind of this request's sub-request in partition `p`; `None` if
    /// the request was not predicted to touch `p`.
    pub fn kind_in(&self, p: PartitionId) -> Option<EntryKind> {
        if !self.contains(p) {
            None
        } else if !self.is_cross_border() {
            Some(EntryKind::Execute)
        } else if p == self.exec_partition() {
            Some(EntryKind::CrossBorderExec)
        } else {
            Some(EntryKind::CrossBorderSync)
        }
    }

    /// The sub-requests the ordering side must order, one per partition
    /// (§IV-B 1: "ordered by all predicted BFT instances").
    pub fn sub_requests(&self) -> impl Iterator<Item = (PartitionId, EntryKind)> + '_ {
        self.partitions
            .iter()
            .map(move |&p| (p, self.kind_in(p).expect("own partition")))
    }
}

/// PREDICT() of Algorithm 1, derived from the declared access set: the
/// partitions of every key read or written. `Access::Everything` touches all
/// partitions (a cross-border request over the whole state, like SAREK's
/// create-checkpoint, §IV-E). An operation that declares no key touches no
/// state; it is pinned to partition 0 so it is still ordered exactly once.
pub fn predict(access: &Access, partitions: u16) -> Prediction {
    let all = match access {
        Access::Everything => (0..partitions).map(PartitionId).collect(),
        Access::Keys { reads, writes } => {
            let mut v: Vec<PartitionId> = reads
                .iter()
                .chain(writes)
                .map(|k| partition_of_key(k, partitions))
                .collect();
            if v.is_empty() {
                v.push(PartitionId(0));
            }
            v
        }
    };
    Prediction::new(all, partitions).expect("predicted partitions are in range")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn keys(ks: &[&[u8]]) -> Access {
        Access::Keys {
            reads: vec![],
            writes: ks.iter().map(|k| Bytes::copy_from_slice(k)).collect(),
        }
    }

    #[test]
    fn partition_of_key_is_stable_and_in_range() {
        // Pinned values: a change here changes every deployment's routing.
        assert_eq!(partition_of_key(b"a", 1), PartitionId(0));
        let spread: std::collections::BTreeSet<_> = (0u32..200)
            .map(|i| partition_of_key(&i.to_le_bytes(), 4))
            .collect();
        assert_eq!(spread.len(), 4, "200 keys must reach all 4 partitions");
        for i in 0u32..200 {
            let p = partition_of_key(&i.to_le_bytes(), 7);
            assert!(p.0 < 7);
            assert_eq!(p, partition_of_key(&i.to_le_bytes(), 7));
            // The domain derived once is the one derived per call before.
            let d = Digest::of_parts("chorus sarek partition v1", &[&i.to_le_bytes()]);
            let low = u64::from_le_bytes(d.as_bytes()[..8].try_into().unwrap());
            assert_eq!(p, PartitionId((low % 7) as u16));
        }
    }

    #[test]
    fn single_partition_and_cross_border() {
        let k = 4;
        let (a, b) = (0u32..)
            .map(|i| i.to_le_bytes())
            .try_fold(None::<[u8; 4]>, |first, key| match first {
                None => Ok(Some(key)),
                Some(f) if partition_of_key(&f, k) != partition_of_key(&key, k) => Err((f, key)),
                Some(f) => Ok(Some(f)),
            })
            .unwrap_err();
        let single = predict(&keys(&[&a, &a]), k);
        assert!(!single.is_cross_border());
        assert_eq!(single.kind_in(partition_of_key(&a, k)), Some(EntryKind::Execute));
        let cross = predict(&keys(&[&b, &a]), k);
        assert!(cross.is_cross_border());
        let (pa, pb) = (partition_of_key(&a, k), partition_of_key(&b, k));
        assert_eq!(cross.exec_partition(), pa.min(pb));
        assert_eq!(cross.kind_in(pa.min(pb)), Some(EntryKind::CrossBorderExec));
        assert_eq!(cross.kind_in(pa.max(pb)), Some(EntryKind::CrossBorderSync));
        assert_eq!(cross.sub_requests().count(), 2);
        let other = (0..k).map(PartitionId).find(|p| *p != pa && *p != pb).unwrap();
        assert_eq!(cross.kind_in(other), None);
    }

    #[test]
    fn everything_and_nothing() {
        let all = predict(&Access::Everything, 3);
        assert_eq!(
            all.partitions(),
            &[PartitionId(0), PartitionId(1), PartitionId(2)]
        );
        let none = predict(&keys(&[]), 3);
        assert_eq!(none.partitions(), &[PartitionId(0)]);
        assert!(Prediction::new(vec![PartitionId(3)], 3).is_none());
        assert!(Prediction::new(vec![], 3).is_none());
    }
}
