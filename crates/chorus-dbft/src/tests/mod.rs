//! Step tests (one per spec rule and §6.4 pitfall), Appendix B scenarios on
//! the in-crate network, and the delivery-order property test.

mod harness;
mod bin_net;
mod steps_bv;
mod steps_binary;
mod steps_engine;
mod pitfalls;
mod scenarios;
mod prop;
