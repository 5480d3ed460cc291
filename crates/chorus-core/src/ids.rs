//! Identifiers. Newtypes so a slot is never confused with a global sequence
//! number or a view (TigerStyle: the type says the unit).

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$m:meta])* $name:ident, $inner:ty, $prefix:literal) => {
        $(#[$m])*
        #[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
        pub struct $name(pub $inner);
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(self, f)
            }
        }
        impl From<$inner> for $name {
            fn from(v: $inner) -> Self { Self(v) }
        }
    };
}

id_type!(
    /// A replica, `0..n`.
    ReplicaId, u32, "r"
);
id_type!(
    /// A client identity, as listed in the cluster configuration.
    ClientId, u64, "c"
);
id_type!(
    /// A PBFT view of one lane.
    View, u64, "v"
);
id_type!(
    /// A lane: one independent sequence of consensus instances.
    LaneId, u32, "L"
);
id_type!(
    /// A slot inside one lane.
    Slot, u64, "s"
);
id_type!(
    /// A position in the global delivery order produced by the merger.
    Seq, u64, "#"
);
id_type!(
    /// A client's request sequence number (per client, strictly increasing).
    RequestSeq, u64, "q"
);

impl ReplicaId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl LaneId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl View {
    pub fn next(self) -> View {
        View(self.0 + 1)
    }
}

impl Slot {
    pub fn next(self) -> Slot {
        Slot(self.0 + 1)
    }
}

impl Seq {
    pub fn next(self) -> Seq {
        Seq(self.0 + 1)
    }
}

/// A cell is one (lane, slot): the unit a consensus instance decides (DESIGN §1).
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Cell {
    pub lane: LaneId,
    pub slot: Slot,
}

impl fmt::Debug for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({:?},{:?})", self.lane, self.slot)
    }
}

/// Virtual or real time in milliseconds, always passed in as an input (sans-IO).
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug, Serialize, Deserialize)]
pub struct Millis(pub u64);

impl Millis {
    pub fn plus(self, ms: u64) -> Millis {
        Millis(self.0.saturating_add(ms))
    }
}
