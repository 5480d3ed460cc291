//! Step tests (one per spec rule and §6.4 pitfall), Appendix B scenarios on
//! the in-crate network, and the delivery-order property test.

mod bin_net;
mod harness;
mod pitfalls;
mod prop;
mod scenarios;
mod steps_binary;
mod steps_bv;
mod steps_engine;
