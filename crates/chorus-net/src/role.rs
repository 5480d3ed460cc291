//! Who is at the other end of a connection.

use chorus_core::{ClientId, ClusterConfig, Digest, PublicIdentity, ReplicaId};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The role a party claims in its handshake. After the handshake the role is
/// authenticated: the peer proved it holds the key the configuration lists for it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PeerRole {
    /// Pillar `pillar` of replica `id` (COP: one connection per pillar pair).
    Replica {
        id: ReplicaId,
        pillar: u32,
    },
    Client {
        id: ClientId,
    },
}

impl PeerRole {
    pub fn replica(self) -> Option<ReplicaId> {
        match self {
            PeerRole::Replica { id, .. } => Some(id),
            PeerRole::Client { .. } => None,
        }
    }

    pub fn client(self) -> Option<ClientId> {
        match self {
            PeerRole::Client { id } => Some(id),
            PeerRole::Replica { .. } => None,
        }
    }

    /// The configured public key of this role, or `None` when the role is not
    /// in the configuration (unknown id, or a pillar beyond `params.pillars`).
    pub fn lookup(self, config: &ClusterConfig) -> Option<PublicIdentity> {
        match self {
            PeerRole::Replica { id, pillar } => {
                if pillar >= config.params.pillars {
                    return None;
                }
                config.replica(id).filter(|r| r.id == id).map(|r| r.identity)
            }
            PeerRole::Client { id } => config.client(id).map(|c| c.identity),
        }
    }
}

impl fmt::Display for PeerRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerRole::Replica { id, pillar } => write!(f, "{id}/p{pillar}"),
            PeerRole::Client { id } => write!(f, "{id}"),
        }
    }
}

/// Whom a dialler expects to reach. Outbound connections always go to a
/// replica (a pillar's peer port, or a replica's client port), so the matcher
/// is a replica id, optionally a pillar, and the key to verify against.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    pub replica: ReplicaId,
    /// `None`: any pillar of that replica may answer (a client port hands
    /// connections to whichever pillar serves them).
    pub pillar: Option<u32>,
    pub identity: PublicIdentity,
    /// [`ClusterConfig::cluster_tag`]: the handshake only succeeds with a
    /// responder of the same cluster.
    pub cluster: Digest,
}

impl Expected {
    /// Pillar `pillar` of `replica`, as the configuration lists it.
    pub fn replica_pillar(config: &ClusterConfig, replica: ReplicaId, pillar: u32) -> Option<Expected> {
        let identity = PeerRole::Replica { id: replica, pillar }.lookup(config)?;
        Some(Expected {
            replica,
            pillar: Some(pillar),
            identity,
            cluster: config.cluster_tag(),
        })
    }

    /// Any pillar of `replica` (what a client expects on a client port).
    pub fn replica_any_pillar(config: &ClusterConfig, replica: ReplicaId) -> Option<Expected> {
        let info = config.replica(replica).filter(|r| r.id == replica)?;
        Some(Expected {
            replica,
            pillar: None,
            identity: info.identity,
            cluster: config.cluster_tag(),
        })
    }

    pub fn matches(&self, role: PeerRole) -> bool {
        match role {
            PeerRole::Replica { id, pillar } => id == self.replica && self.pillar.unwrap_or(pillar) == pillar,
            PeerRole::Client { .. } => false,
        }
    }
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pillar {
            Some(p) => write!(f, "{}/p{p}", self.replica),
            None => write!(f, "{}/any pillar", self.replica),
        }
    }
}
