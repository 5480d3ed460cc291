//! A replicated bank on Chorus (issue 17's example): open accounts, transfer
//! with insufficient-funds errors, read balances on the read-only fast path,
//! and declare access sets so CBASE runs non-conflicting transfers in parallel.

use bytes::Bytes;
use chorus_apps::{ServiceEntry, ServiceRegistry};
use chorus_exec::{Access, AccessViolation, ExecContext, KeyedState, Service, Typed, TypedService};
use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BankOp {
    Open { account: String, deposit: u64 },
    Transfer { from: String, to: String, amount: u64 },
    Balance { account: String },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BankReply {
    Opened,
    Transferred,
    Balance(u64),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BankError {
    NoSuchAccount(String),
    AccountExists(String),
    InsufficientFunds { have: u64, need: u64 },
    Overflow,
    /// Checked mode refused an access outside the declared set.
    Undeclared(String),
}

impl From<AccessViolation> for BankError {
    fn from(v: AccessViolation) -> BankError {
        BankError::Undeclared(v.to_string())
    }
}

/// Money ever deposited: every balance sums to it (the conservation invariant).
const MINTED: &str = "#minted";

fn key(account: &str) -> Bytes {
    Bytes::from(format!("acct/{account}"))
}

pub struct Bank {
    state: KeyedState<u64>,
    /// The bug of issue 17: a transfer that declares only `from`.
    under_declare: bool,
}

impl Bank {
    pub fn new() -> Bank {
        Bank { state: KeyedState::new(), under_declare: false }
    }

    /// The under-declaring variant (for tests: checked mode must catch it).
    pub fn under_declaring() -> Bank {
        Bank { state: KeyedState::new(), under_declare: true }
    }

    fn balance(&self, account: &str) -> Result<u64, BankError> {
        self.state.get(&key(account))?.ok_or_else(|| BankError::NoSuchAccount(account.into()))
    }
}

impl Default for Bank {
    fn default() -> Bank {
        Bank::new()
    }
}

impl TypedService for Bank {
    type Op = BankOp;
    type Reply = BankReply;
    type Error = BankError;

    fn access(&self, op: &BankOp) -> Access {
        let (reads, writes) = match op {
            BankOp::Open { account, .. } => (vec![], vec![key(account), Bytes::from(MINTED)]),
            BankOp::Transfer { from, .. } if self.under_declare => (vec![], vec![key(from)]),
            BankOp::Transfer { from, to, .. } => (vec![], vec![key(from), key(to)]),
            BankOp::Balance { account } => (vec![key(account)], vec![]),
        };
        Access::Keys { reads, writes }
    }

    fn read_only(&self, op: &BankOp) -> bool {
        matches!(op, BankOp::Balance { .. })
    }

    fn execute(&self, op: BankOp, _ctx: &ExecContext) -> Result<BankReply, BankError> {
        match op {
            BankOp::Open { account, deposit } => {
                if self.state.get(&key(&account))?.is_some() {
                    return Err(BankError::AccountExists(account));
                }
                let minted = self.state.get(MINTED.as_bytes())?.unwrap_or(0);
                let minted = minted.checked_add(deposit).ok_or(BankError::Overflow)?;
                self.state.put(key(&account), deposit)?;
                self.state.put(MINTED, minted)?;
                Ok(BankReply::Opened)
            }
            BankOp::Transfer { from, to, amount } => {
                let have = self.balance(&from)?;
                let dest = self.balance(&to)?;
                if have < amount {
                    return Err(BankError::InsufficientFunds { have, need: amount });
                }
                if from != to {
                    let credited = dest.checked_add(amount).ok_or(BankError::Overflow)?;
                    self.state.put(key(&from), have - amount)?;
                    self.state.put(key(&to), credited)?;
                }
                Ok(BankReply::Transferred)
            }
            BankOp::Balance { account } => Ok(BankReply::Balance(self.balance(&account)?)),
        }
    }

    fn snapshot(&self) -> Bytes {
        Bytes::from(postcard::to_allocvec(&self.state.entries()).expect("encoding to memory"))
    }

    fn restore(&self, snapshot: &[u8]) -> Result<(), String> {
        // A snapshot may come from a Byzantine peer: keep it only if it is
        // well-formed and conserves money.
        let entries: Vec<(Bytes, u64)> = postcard::from_bytes(snapshot).map_err(|e| e.to_string())?;
        check_conserved(&entries)?;
        self.state.replace(entries);
        Ok(())
    }
}

fn check_conserved(entries: &[(Bytes, u64)]) -> Result<(), String> {
    let minted = entries.iter().find(|(k, _)| &k[..] == MINTED.as_bytes()).map_or(0, |e| e.1);
    let total: u128 = entries.iter().filter(|(k, _)| k.starts_with(b"acct/")).map(|e| e.1 as u128).sum();
    if total != minted as u128 {
        return Err(format!("money not conserved: balances sum to {total}, {minted} was deposited"));
    }
    Ok(())
}

/// The conservation invariant on a snapshot (the simulator's hook).
pub fn money_conserved(snapshot: &[u8]) -> Result<(), String> {
    let entries: Vec<(Bytes, u64)> = postcard::from_bytes(snapshot).map_err(|e| e.to_string())?;
    check_conserved(&entries)
}

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
    vec![entry("bank", Bank::new), entry("bank-under-declared", Bank::under_declaring)]
}

/// The built-in services plus the bank ones.
pub fn registry() -> ServiceRegistry {
    entries().into_iter().fold(ServiceRegistry::builtin(), ServiceRegistry::with)
}
