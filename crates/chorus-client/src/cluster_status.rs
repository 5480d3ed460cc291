//! Every replica's status at once (`Client::cluster_status`), typed.

use crate::error::ClientError;
use chorus_core::status_report::StatusReport;
use chorus_core::ReplicaId;

/// What each replica reported, in configuration order.
#[derive(Debug)]
pub struct ClusterStatus {
    pub replicas: Vec<(ReplicaId, Result<StatusReport, ClientError>)>,
}

impl ClusterStatus {
    /// The reports that arrived and parsed.
    pub fn reports(&self) -> impl Iterator<Item = &StatusReport> {
        self.replicas.iter().filter_map(|(_, r)| r.as_ref().ok())
    }

    /// Replicas that answered.
    pub fn answered(&self) -> usize {
        self.reports().count()
    }

    /// The highest position any replica has executed up to.
    pub fn max_executed(&self) -> Option<u64> {
        self.reports().map(|r| r.executed_seq).max()
    }

    /// Whether every replica that answered and executed up to the same
    /// position reports the same state digest there (a `false` is a
    /// divergence: see `docs/writing-a-service.md`).
    pub fn digests_agree(&self) -> bool {
        let mut at = std::collections::BTreeMap::new();
        self.reports()
            .all(|r| at.entry(r.executed_seq).or_insert(&r.state_digest) == &&r.state_digest)
    }

    /// The views of each lane, per replica that answered.
    pub fn views(&self) -> Vec<(ReplicaId, Vec<u64>)> {
        self.replicas
            .iter()
            .filter_map(|(id, r)| r.as_ref().ok().map(|r| (*id, r.core.views.clone())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(r: u32, executed: u64, digest: &str) -> StatusReport {
        StatusReport {
            replica: r,
            mode: "pbft".into(),
            lanes: 1,
            core: Default::default(),
            executed_seq: executed,
            state_digest: digest.into(),
            executed_requests: 0,
            peer_connections: 0,
            client_connections: 0,
            replied_timed: 0,
            replied_timed_us: 0,
            busy_replies: 0,
            partitions: Vec::new(),
        }
    }

    #[test]
    fn digests_agree_only_compares_equal_positions() {
        let mut s = ClusterStatus {
            replicas: vec![
                (ReplicaId(0), Ok(report(0, 10, "aa"))),
                (ReplicaId(1), Ok(report(1, 12, "bb"))),
                (ReplicaId(2), Err(ClientError::StatusUnavailable(ReplicaId(2)))),
                (ReplicaId(3), Ok(report(3, 10, "aa"))),
            ],
        };
        assert_eq!(s.answered(), 3);
        assert_eq!(s.max_executed(), Some(12));
        assert!(s.digests_agree());
        s.replicas[3].1 = Ok(report(3, 10, "cc"));
        assert!(!s.digests_agree(), "two digests at position 10");
    }
}
