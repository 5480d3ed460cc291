//! A replicated bank on Chorus (issue 17's example): open accounts, transfer
//! with insufficient-funds errors, read balances on the read-only fast path,
//! and declare access sets so CBASE runs non-conflicting transfers in parallel.

use bytes::Bytes;
use chorus_exec::{Access, AccessViolation, ExecContext, KeyedState, TypedService};
use serde::{Deserialize, Serialize};

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
    InsufficientFunds {
        have: u64,
        need: u64,
    },
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

#[derive(Default)]
pub struct Bank {
    state: KeyedState<u64>,
    /// The bug of issue 17: a transfer that declares only `from`.
    under_declare: bool,
}

impl Bank {
    /// The under-declaring variant (for tests: checked mode must catch it).
    pub fn under_declaring() -> Bank {
        Bank { under_declare: true, ..Bank::default() }
    }

    fn balance(&self, account: &str) -> Result<u64, BankError> {
        let found = self.state.get(&key(account))?;
        found.ok_or_else(|| BankError::NoSuchAccount(account.into()))
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
                    // Cannot overflow: balances sum to the minted total, a u64.
                    self.state.put(key(&from), have - amount)?;
                    self.state.put(key(&to), dest + amount)?;
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
        // A snapshot may come from a Byzantine peer: only a canonical one
        // that conserves money is installed.
        money_conserved(snapshot)?;
        self.state.replace(decode(snapshot)?);
        Ok(())
    }
}

fn decode(snapshot: &[u8]) -> Result<Vec<(Bytes, u64)>, String> {
    postcard::from_bytes(snapshot).map_err(|e| format!("bad bank snapshot: {e}"))
}

/// The invariant (the simulator's hook, and `restore`'s check): keys sorted,
/// only accounts and the minted total, and balances summing to that total.
pub fn money_conserved(snapshot: &[u8]) -> Result<(), String> {
    let entries = decode(snapshot)?;
    if entries.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err("bank snapshot keys are not sorted and unique".into());
    }
    let (mut total, mut minted) = (0u128, 0u64);
    for (k, v) in &entries {
        match &k[..] {
            k if k == MINTED.as_bytes() => minted = *v,
            k if k.starts_with(b"acct/") => total += *v as u128,
            _ => return Err(format!("unexpected key {k:?} in a bank snapshot")),
        }
    }
    if total != minted as u128 {
        return Err(format!("money not conserved: balances sum to {total}, {minted} was deposited"));
    }
    Ok(())
}

mod register;
pub use register::{entries, registry, workload};
