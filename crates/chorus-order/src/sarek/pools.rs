//! One request pool per partition lane (SAREK §IV-B 1): a request is held by
//! the pool of every partition PREDICT() names, so it is proposed, ordered
//! and released once per partition; each lane's leader proposes from its own
//! pool only, as in PBFT. Each partition is a lane group of its own (COP §4
//! pillars; docs/lane-split.md §4): a group fills only its own lanes' pools
//! and names the other predicted partitions, which the hub hands the
//! request to (`ToHub::ForLane`).

use super::Predictor;
use crate::io::RejectReason;
use crate::pool::{Admitted, Pool};
use chorus_core::{Batch, ClusterConfig, Identity, LaneId, Millis, ReplicaId, Request};
use std::sync::Arc;

#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub struct SarekPools {
    cfg: Arc<ClusterConfig>,
    pools: Vec<Pool>,
    predictor: Predictor,
    /// The lanes (partitions) of this group: only their pools are filled.
    own: Vec<bool>,
}

impl SarekPools {
    /// The pools of a group holding `own` lanes.
    pub fn new(cfg: Arc<ClusterConfig>, me: ReplicaId, identity: Identity, own: &[LaneId]) -> SarekPools {
        let mut mine = vec![false; cfg.lanes() as usize];
        for l in own {
            mine[l.index()] = true;
        }
        SarekPools {
            pools: (0..cfg.lanes())
                .map(|l| Pool::for_lane(cfg.clone(), me, identity.clone(), LaneId(l)))
                .collect(),
            predictor: Predictor::everything(),
            own: mine,
            cfg,
        }
    }

    /// Whether this group orders `lane`.
    pub fn owns(&self, lane: LaneId) -> bool {
        self.own.get(lane.index()).copied().unwrap_or(false)
    }

    /// The predicted lanes of `op` another group orders.
    pub fn others_of(&self, op: &[u8]) -> Vec<LaneId> {
        self.lanes_of(op).into_iter().filter(|l| !self.owns(*l)).collect()
    }

    pub fn set_predictor(&mut self, p: Predictor) {
        for pool in &mut self.pools {
            pool.set_predictor(p.clone());
        }
        self.predictor = p;
    }

    pub fn lanes_of(&self, op: &[u8]) -> Vec<LaneId> {
        self.predictor.lanes(&self.cfg, op)
    }

    pub fn pool(&self, lane: LaneId) -> &Pool {
        &self.pools[lane.index()]
    }

    pub fn pool_mut(&mut self, lane: LaneId) -> &mut Pool {
        &mut self.pools[lane.index()]
    }

    pub fn len(&self) -> usize {
        self.pools.iter().map(Pool::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn orphaned_in_flight(&self) -> usize {
        self.pools.iter().map(Pool::orphaned_in_flight).sum()
    }

    pub fn clear(&mut self) {
        self.pools.iter_mut().for_each(Pool::clear);
    }

    /// Admit into the pool of every predicted lane of this group (the
    /// others: `others_of`). The authenticator is verified once (by the
    /// first pool); the request is `New` if any pool took it, and refused
    /// with the first refusal (the client retransmits; the pools that took
    /// it then answer `Duplicate`).
    pub fn admit(&mut self, now: Millis, req: Request, verify: bool) -> Result<Admitted, RejectReason> {
        let lanes: Vec<LaneId> = self
            .lanes_of(&req.op)
            .into_iter()
            .filter(|l| self.owns(*l))
            .collect();
        let mut verified = !verify;
        let mut outcome = Admitted::Duplicate;
        for lane in lanes {
            let pool = &mut self.pools[lane.index()];
            let r = if verified {
                pool.admit_verified(now, req.clone())
            } else {
                pool.admit(now, req.clone())
            };
            match r {
                Ok(Admitted::New) => {
                    verified = true;
                    outcome = Admitted::New;
                }
                Ok(Admitted::Duplicate) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(outcome)
    }

    /// `lane` decided `batch`: every cross-partition request in it must be
    /// ordered by its other partitions too; hand it to their pools here, and
    /// return the ones another group orders (with their lane).
    pub fn forward_decided(
        &mut self,
        now: Millis,
        lane: LaneId,
        batch: &Batch,
    ) -> (usize, Vec<(LaneId, Request)>) {
        let mut adopted = 0;
        let mut elsewhere = Vec::new();
        // A re-prediction is ordered in exactly the lanes it adds, each from
        // its own certificate (`repredict.rs`), never forwarded.
        for r in batch.requests.iter().filter(|r| !r.is_reprediction()) {
            for q in self.lanes_of(&r.op) {
                if q == lane {
                    continue;
                }
                if !self.owns(q) {
                    elsewhere.push((q, r.clone()));
                } else if self.pools[q.index()].adopt(now, r) {
                    adopted += 1;
                }
            }
        }
        (adopted, elsewhere)
    }
}
