//! The bank as a registered service: its workload for `sim`, `demo` and
//! `bench`, and its invariant for the simulator.

use crate::{money_conserved, Bank, BankOp};
use bytes::Bytes;
use chorus_apps::{ServiceEntry, ServiceRegistry};
use chorus_exec::{Service, Typed};
use rand::{Rng, RngCore};
use std::sync::Arc;

/// Clients open a few accounts and move money between them; a fifth read.
pub fn workload(rng: &mut dyn RngCore, _client: chorus_core::ClientId, _seq: u64) -> Bytes {
    let account = |rng: &mut dyn RngCore| format!("a{}", rng.gen_range(0..6u32));
    let op = match rng.gen_range(0..10u32) {
        0..=1 => BankOp::Open { account: account(rng), deposit: 100 },
        2..=3 => BankOp::Balance { account: account(rng) },
        _ => BankOp::Transfer { from: account(rng), to: account(rng), amount: rng.gen_range(1..80) },
    };
    chorus_exec::encode_op(&op)
}

/// `bank` as a registry entry (and `bank-under-declared`, the buggy variant).
pub fn entries() -> Vec<ServiceEntry> {
    let entry = |name: &str, make: fn() -> Bank| {
        ServiceEntry::new(name, "accounts and transfers", move |_| {
            Ok(Arc::new(Typed(make())) as Arc<dyn Service>)
        })
        .with_workload(workload)
        .with_invariant(money_conserved)
    };
    vec![entry("bank", Bank::default), entry("bank-under-declared", Bank::under_declaring)]
}

/// The built-in services plus the bank ones.
pub fn registry() -> ServiceRegistry {
    entries().into_iter().fold(ServiceRegistry::builtin(), ServiceRegistry::with)
}
