//! chorus-node: the replica process (DESIGN §3).

pub mod keygen;
pub mod node_config;
