//! A replicated token (Dispel §6 runs a cryptocurrency): accounts named by
//! Ed25519 public keys hold balances; a transfer is signed by the sender and
//! every replica verifies the signature when it executes the transfer, so a
//! Byzantine client (or a Byzantine proposer that forges requests) cannot
//! move funds it does not own.
//!
//! - The account set is fixed by a deterministic genesis allocation
//!   ([`Genesis`]: `accounts` keys derived from `seed`, `balance` each), so
//!   state is bounded and every replica starts from the same digest.
//! - Per-account nonces: a transfer's nonce must exceed the sender's last
//!   one. A replayed (or reordered older) transfer is refused, and a sender
//!   whose transfer was refused is never stuck (gaps are allowed).
//! - Declared access sets (CBASE §4): a transfer writes its two accounts, a
//!   balance reads one, a malformed op touches nothing. Transfers between
//!   disjoint account pairs run in parallel.
//! - Invariant: the total supply equals the genesis supply, always. Each
//!   transfer conserves the pair's sum (checked), and every snapshot and
//!   restore checks the whole sum.
//!
//! The snapshot is canonical: accounts in key order, postcard-encoded.

use crate::token_op::{account_of, genesis_key, AccountId, TokenError, TokenOp, TokenReply, Transfer};
use bytes::Bytes;
use chorus_exec::{Access, ExecContext, Service};
use parking_lot::{Mutex, MutexGuard};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Upper bound on genesis accounts (key derivation at start-up and the
/// snapshot size grow with it).
pub const MAX_TOKEN_ACCOUNTS: u32 = 200_000;
/// Encoded bytes per account at most: key + two u64 varints.
const MAX_ACCOUNT_BYTES: usize = 32 + 10 + 10;

/// The initial allocation: `accounts` accounts, `balance` each, with keys
/// `genesis_key(seed, 0..accounts)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Genesis {
    pub seed: u64,
    pub accounts: u32,
    pub balance: u64,
}

impl Default for Genesis {
    fn default() -> Self {
        Genesis {
            seed: 0,
            accounts: 1_000,
            balance: 1_000_000,
        }
    }
}

impl Genesis {
    /// `accounts · balance`, or an error when out of bounds.
    pub fn supply(&self) -> Result<u64, String> {
        if self.accounts == 0 || self.accounts > MAX_TOKEN_ACCOUNTS {
            return Err(format!(
                "token_accounts must be 1..={MAX_TOKEN_ACCOUNTS}, got {}",
                self.accounts
            ));
        }
        u64::from(self.accounts)
            .checked_mul(self.balance)
            .ok_or_else(|| "token_accounts × token_balance overflows u64".to_string())
    }

    /// Account id of genesis account `index`.
    pub fn account(&self, index: u32) -> AccountId {
        account_of(&genesis_key(self.seed, index))
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Account {
    balance: u64,
    /// Last nonce used by a transfer from this account (0: none yet).
    nonce: u64,
}

#[derive(Serialize, Deserialize)]
struct TokenSnapshot {
    /// Every account, in strictly increasing key order.
    accounts: Vec<(AccountId, Account)>,
}

pub struct TokenService {
    genesis: Genesis,
    supply: u64,
    /// Account ids in increasing order; fixed at genesis.
    keys: Vec<AccountId>,
    index: HashMap<AccountId, usize>,
    /// `state[i]` belongs to `keys[i]`. One lock per account: non-conflicting
    /// transfers never wait for each other; two locks are always taken in
    /// index order (as are all of them by snapshot/restore), so no deadlock.
    state: Vec<Mutex<Account>>,
}

fn empty_access() -> Access {
    Access::Keys {
        reads: vec![],
        writes: vec![],
    }
}

fn key_bytes(a: &AccountId) -> Bytes {
    Bytes::copy_from_slice(a)
}

impl TokenService {
    pub fn new(genesis: Genesis) -> Result<TokenService, String> {
        let supply = genesis.supply()?;
        let mut keys: Vec<AccountId> = (0..genesis.accounts).map(|i| genesis.account(i)).collect();
        keys.sort_unstable();
        keys.dedup();
        if keys.len() != genesis.accounts as usize {
            return Err("genesis derived a duplicate account key".into());
        }
        let index = keys.iter().enumerate().map(|(i, k)| (*k, i)).collect();
        let state = keys
            .iter()
            .map(|_| {
                Mutex::new(Account {
                    balance: genesis.balance,
                    nonce: 0,
                })
            })
            .collect();
        Ok(TokenService {
            genesis,
            supply,
            keys,
            index,
            state,
        })
    }

    pub fn genesis(&self) -> Genesis {
        self.genesis
    }

    /// The genesis supply, which the state must always hold in total.
    pub fn genesis_supply(&self) -> u64 {
        self.supply
    }

    pub fn accounts(&self) -> usize {
        self.keys.len()
    }

    /// Sum of all balances, read under every account lock (a consistent cut).
    pub fn total_supply(&self) -> u64 {
        let guards = self.lock_all();
        let sum: u128 = guards.iter().map(|g| u128::from(g.balance)).sum();
        u64::try_from(sum).expect("balances sum beyond u64: supply invariant broken")
    }

    /// `(balance, last nonce)` of `account`.
    pub fn balance_of(&self, account: &AccountId) -> Option<(u64, u64)> {
        let i = *self.index.get(account)?;
        let a = *self.state[i].lock();
        Some((a.balance, a.nonce))
    }

    fn lock_all(&self) -> Vec<MutexGuard<'_, Account>> {
        self.state.iter().map(|m| m.lock()).collect()
    }

    /// Apply one decoded operation.
    pub fn apply(&self, op: TokenOp) -> TokenReply {
        match op {
            TokenOp::Balance { account } => match self.balance_of(&account) {
                Some((balance, nonce)) => TokenReply::Balance { balance, nonce },
                None => TokenReply::Error(TokenError::UnknownAccount(account)),
            },
            TokenOp::Transfer(t) => match self.transfer(&t) {
                Ok(r) => r,
                Err(e) => TokenReply::Error(e),
            },
        }
    }

    fn transfer(&self, t: &Transfer) -> Result<TokenReply, TokenError> {
        let from = *self
            .index
            .get(&t.from)
            .ok_or(TokenError::UnknownAccount(t.from))?;
        let to = *self.index.get(&t.to).ok_or(TokenError::UnknownAccount(t.to))?;
        // Signature before nonce and funds: an unauthenticated request learns
        // nothing about the account's state.
        if !t.verify() {
            return Err(TokenError::BadSignature);
        }
        let check = |a: &Account| -> Result<(), TokenError> {
            if t.nonce <= a.nonce {
                return Err(TokenError::ReusedNonce {
                    nonce: t.nonce,
                    last: a.nonce,
                });
            }
            if a.balance < t.amount {
                return Err(TokenError::InsufficientFunds {
                    balance: a.balance,
                    amount: t.amount,
                });
            }
            Ok(())
        };
        if from == to {
            // A self-transfer moves nothing but consumes the nonce.
            let mut a = self.state[from].lock();
            check(&a)?;
            a.nonce = t.nonce;
            return Ok(TokenReply::Transferred {
                from_balance: a.balance,
                nonce: a.nonce,
            });
        }
        let (lo, hi) = (from.min(to), from.max(to));
        let mut g_lo = self.state[lo].lock();
        let mut g_hi = self.state[hi].lock();
        let (src, dst) = if from == lo {
            (&mut *g_lo, &mut *g_hi)
        } else {
            (&mut *g_hi, &mut *g_lo)
        };
        check(src)?;
        let before = u128::from(src.balance) + u128::from(dst.balance);
        // Cannot overflow while the supply invariant holds (dst ≤ supply - amount).
        let credited = dst
            .balance
            .checked_add(t.amount)
            .expect("recipient balance beyond u64: supply invariant broken");
        src.balance -= t.amount;
        dst.balance = credited;
        src.nonce = t.nonce;
        debug_assert_eq!(
            before,
            u128::from(src.balance) + u128::from(dst.balance),
            "a transfer must conserve the pair's sum"
        );
        Ok(TokenReply::Transferred {
            from_balance: src.balance,
            nonce: src.nonce,
        })
    }

    fn max_snapshot_bytes(&self) -> usize {
        10 + self.keys.len() * MAX_ACCOUNT_BYTES
    }
}

impl Service for TokenService {
    fn execute(&self, op: &[u8], _ctx: &ExecContext) -> Bytes {
        match TokenOp::decode(op) {
            Ok(op) => self.apply(op).encode(),
            Err(e) => TokenReply::Error(e).encode(),
        }
    }

    fn access(&self, op: &[u8]) -> Access {
        match TokenOp::decode(op) {
            Err(_) => empty_access(),
            Ok(TokenOp::Balance { account }) => Access::Keys {
                reads: vec![key_bytes(&account)],
                writes: vec![],
            },
            Ok(TokenOp::Transfer(t)) => {
                let mut writes = vec![key_bytes(&t.from)];
                if t.to != t.from {
                    writes.push(key_bytes(&t.to));
                }
                Access::Keys {
                    reads: vec![],
                    writes,
                }
            }
        }
    }

    fn is_read_only(&self, op: &[u8]) -> bool {
        TokenOp::decode(op).is_ok_and(|op| op.is_read_only())
    }

    fn snapshot(&self) -> Bytes {
        let guards = self.lock_all();
        let accounts: Vec<(AccountId, Account)> =
            self.keys.iter().zip(&guards).map(|(k, g)| (*k, **g)).collect();
        drop(guards);
        debug_assert_eq!(
            accounts.iter().map(|(_, a)| u128::from(a.balance)).sum::<u128>(),
            u128::from(self.supply),
            "total supply changed"
        );
        let snap = TokenSnapshot { accounts };
        Bytes::from(postcard::to_allocvec(&snap).expect("encoding a token snapshot cannot fail"))
    }

    /// The snapshot may come from a Byzantine peer: bounded before decoding,
    /// then it must name exactly the genesis accounts in order and hold
    /// exactly the genesis supply. Nothing changes unless all checks pass.
    fn restore(&self, snapshot: &[u8]) -> Result<(), String> {
        if snapshot.len() > self.max_snapshot_bytes() {
            return Err(format!(
                "token snapshot of {} bytes exceeds {} for {} accounts",
                snapshot.len(),
                self.max_snapshot_bytes(),
                self.keys.len()
            ));
        }
        let (snap, rest): (TokenSnapshot, &[u8]) =
            postcard::take_from_bytes(snapshot).map_err(|e| format!("malformed token snapshot: {e}"))?;
        if !rest.is_empty() {
            return Err(format!("token snapshot has {} trailing bytes", rest.len()));
        }
        if snap.accounts.len() != self.keys.len() {
            return Err(format!(
                "token snapshot has {} accounts, genesis has {}",
                snap.accounts.len(),
                self.keys.len()
            ));
        }
        if snap.accounts.iter().zip(&self.keys).any(|((k, _), g)| k != g) {
            return Err("token snapshot accounts differ from the genesis accounts".into());
        }
        let total: u128 = snap.accounts.iter().map(|(_, a)| u128::from(a.balance)).sum();
        if total != u128::from(self.supply) {
            return Err(format!(
                "token snapshot supply {total} differs from the genesis supply {}",
                self.supply
            ));
        }
        let mut guards = self.lock_all();
        for (g, (_, a)) in guards.iter_mut().zip(snap.accounts) {
            **g = a;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token_op::TokenOp;
    use chorus_core::{ClientId, RequestSeq, Seq};
    use ed25519_dalek::SigningKey;
    use proptest::prelude::*;

    const G: Genesis = Genesis {
        seed: 42,
        accounts: 8,
        balance: 100,
    };

    fn ctx() -> ExecContext {
        ExecContext {
            seq: Seq(0),
            index: 0,
            client: ClientId(1),
            request_seq: RequestSeq(1),
            time_ms: 0,
        }
    }

    fn svc() -> TokenService {
        TokenService::new(G).unwrap()
    }

    fn key(i: u32) -> SigningKey {
        genesis_key(G.seed, i)
    }

    fn run(s: &TokenService, op: Bytes) -> TokenReply {
        TokenReply::decode(&s.execute(&op, &ctx())).unwrap()
    }

    fn pay(s: &TokenService, from: u32, to: u32, amount: u64, nonce: u64) -> TokenReply {
        run(s, TokenOp::transfer(&key(from), G.account(to), amount, nonce))
    }

    fn balance(s: &TokenService, i: u32) -> TokenReply {
        run(s, TokenOp::balance(G.account(i)))
    }

    #[test]
    fn genesis_allocation_and_balance() {
        let s = svc();
        assert_eq!(
            (s.accounts(), s.total_supply(), s.genesis_supply()),
            (8, 800, 800)
        );
        assert_eq!(
            balance(&s, 3),
            TokenReply::Balance {
                balance: 100,
                nonce: 0
            }
        );
        // Deterministic: two replicas start from the same digest.
        assert_eq!(s.state_digest(), svc().state_digest());
        assert_ne!(
            s.state_digest(),
            TokenService::new(Genesis { seed: 43, ..G })
                .unwrap()
                .state_digest()
        );
        assert!(TokenService::new(Genesis { accounts: 0, ..G }).is_err());
        assert!(TokenService::new(Genesis {
            accounts: MAX_TOKEN_ACCOUNTS + 1,
            ..G
        })
        .is_err());
        assert!(TokenService::new(Genesis {
            balance: u64::MAX,
            ..G
        })
        .is_err());
    }

    #[test]
    fn transfer_moves_funds_and_advances_the_nonce() {
        let s = svc();
        assert_eq!(
            pay(&s, 0, 1, 30, 1),
            TokenReply::Transferred {
                from_balance: 70,
                nonce: 1
            }
        );
        assert_eq!(
            balance(&s, 1),
            TokenReply::Balance {
                balance: 130,
                nonce: 0
            }
        );
        // Gaps are allowed: nonce 5 after 1.
        assert_eq!(
            pay(&s, 0, 2, 70, 5),
            TokenReply::Transferred {
                from_balance: 0,
                nonce: 5
            }
        );
        assert_eq!(s.total_supply(), 800);
        // A self-transfer consumes the nonce, moves nothing.
        assert_eq!(
            pay(&s, 1, 1, 10, 1),
            TokenReply::Transferred {
                from_balance: 130,
                nonce: 1
            }
        );
        assert_eq!(s.total_supply(), 800);
    }

    #[test]
    fn bad_signature_is_refused_and_changes_nothing() {
        let s = svc();
        let before = s.snapshot();
        // Signed by account 1's key but claiming to come from account 0.
        let mut t = Transfer::signed(&key(1), G.account(2), 10, 1);
        t.from = G.account(0);
        assert_eq!(
            run(&s, TokenOp::Transfer(t).encode()),
            TokenReply::Error(TokenError::BadSignature)
        );
        // A valid signature on other bytes (amount changed in flight).
        let mut t = Transfer::signed(&key(0), G.account(2), 10, 1);
        t.amount = 90;
        assert_eq!(
            run(&s, TokenOp::Transfer(t).encode()),
            TokenReply::Error(TokenError::BadSignature)
        );
        assert_eq!(s.snapshot(), before);
    }

    #[test]
    fn reused_nonce_is_refused() {
        let s = svc();
        let op = TokenOp::transfer(&key(0), G.account(1), 5, 3);
        assert!(matches!(run(&s, op.clone()), TokenReply::Transferred { .. }));
        let after = s.snapshot();
        assert_eq!(
            run(&s, op),
            TokenReply::Error(TokenError::ReusedNonce { nonce: 3, last: 3 })
        );
        assert_eq!(
            pay(&s, 0, 1, 5, 2),
            TokenReply::Error(TokenError::ReusedNonce { nonce: 2, last: 3 })
        );
        assert_eq!(
            pay(&s, 0, 1, 5, 0),
            TokenReply::Error(TokenError::ReusedNonce { nonce: 0, last: 3 })
        );
        assert_eq!(s.snapshot(), after);
    }

    #[test]
    fn insufficient_funds_is_refused_and_keeps_the_nonce_unused() {
        let s = svc();
        assert_eq!(
            pay(&s, 0, 1, 101, 1),
            TokenReply::Error(TokenError::InsufficientFunds {
                balance: 100,
                amount: 101
            })
        );
        // The refused transfer did not consume nonce 1.
        assert!(matches!(pay(&s, 0, 1, 100, 1), TokenReply::Transferred { .. }));
        assert_eq!(s.total_supply(), 800);
    }

    #[test]
    fn unknown_accounts_are_refused() {
        let s = svc();
        let stranger = SigningKey::from_bytes(&[9; 32]);
        assert_eq!(
            run(&s, TokenOp::transfer(&stranger, G.account(0), 1, 1)),
            TokenReply::Error(TokenError::UnknownAccount(account_of(&stranger)))
        );
        assert_eq!(
            run(&s, TokenOp::transfer(&key(0), [7; 32], 1, 1)),
            TokenReply::Error(TokenError::UnknownAccount([7; 32]))
        );
        assert_eq!(
            run(&s, TokenOp::balance([7; 32])),
            TokenReply::Error(TokenError::UnknownAccount([7; 32]))
        );
        assert_eq!(s.total_supply(), 800);
    }

    #[test]
    fn malformed_op_is_an_error_reply_and_touches_nothing() {
        let s = svc();
        let before = s.snapshot();
        for bad in [&b""[..], b"\xff\xff\xff", &[1u8; 300]] {
            assert!(matches!(
                run(&s, Bytes::copy_from_slice(bad)),
                TokenReply::Error(TokenError::Malformed(_))
            ));
            assert_eq!(s.access(bad), empty_access());
            assert!(!s.is_read_only(bad));
        }
        assert_eq!(s.snapshot(), before);
    }

    #[test]
    fn access_sets_are_the_two_accounts() {
        let s = svc();
        let (a, b, c, d) = (G.account(0), G.account(1), G.account(2), G.account(3));
        assert_eq!(
            s.access(&TokenOp::balance(a)),
            Access::Keys {
                reads: vec![key_bytes(&a)],
                writes: vec![]
            }
        );
        let ab = s.access(&TokenOp::transfer(&key(0), b, 1, 1));
        assert_eq!(
            ab,
            Access::Keys {
                reads: vec![],
                writes: vec![key_bytes(&a), key_bytes(&b)]
            }
        );
        let cd = s.access(&TokenOp::transfer(&key(2), d, 1, 1));
        let bc = s.access(&TokenOp::transfer(&key(1), c, 1, 1));
        assert!(!chorus_exec::conflicts(&ab, &cd));
        assert!(chorus_exec::conflicts(&ab, &bc));
        assert!(chorus_exec::conflicts(&ab, &s.access(&TokenOp::balance(b))));
        assert!(s.is_read_only(&TokenOp::balance(a)));
        assert!(!s.is_read_only(&TokenOp::transfer(&key(0), b, 1, 1)));
    }

    #[test]
    fn snapshot_round_trip() {
        let s = svc();
        pay(&s, 0, 1, 10, 1);
        pay(&s, 2, 3, 20, 4);
        let snap = s.snapshot();
        let fresh = svc();
        fresh.restore(&snap).unwrap();
        assert_eq!(fresh.snapshot(), snap);
        assert_eq!(fresh.state_digest(), s.state_digest());
        // Nonces travel with the snapshot: the replay is still refused.
        assert_eq!(
            pay(&fresh, 0, 1, 10, 1),
            TokenReply::Error(TokenError::ReusedNonce { nonce: 1, last: 1 })
        );
    }

    fn encode(accounts: Vec<(AccountId, Account)>) -> Vec<u8> {
        postcard::to_allocvec(&TokenSnapshot { accounts }).unwrap()
    }

    fn genesis_accounts(s: &TokenService) -> Vec<(AccountId, Account)> {
        s.keys
            .iter()
            .map(|k| {
                (
                    *k,
                    Account {
                        balance: 100,
                        nonce: 0,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn byzantine_snapshots_are_rejected_and_leave_state_alone() {
        let s = svc();
        pay(&s, 0, 1, 10, 1);
        let before = s.snapshot();
        let good = genesis_accounts(&s);
        let mut inflated = good.clone();
        inflated[0].1.balance += 1;
        let mut deflated = good.clone();
        deflated[0].1.balance -= 1;
        let mut stranger = good.clone();
        stranger[0].0 = [0xee; 32];
        let mut swapped = good.clone();
        swapped.swap(0, 1);
        let mut overflow = good.clone();
        overflow[0].1.balance = u64::MAX;
        overflow[1].1.balance = u64::MAX;
        let mut trailing = encode(good.clone());
        trailing.push(0);
        let cases: Vec<Vec<u8>> = vec![
            encode(inflated),
            encode(deflated),
            encode(stranger),
            encode(swapped),
            encode(overflow),
            encode(good[..7].to_vec()),
            encode(vec![]),
            trailing,
            vec![0xff; 11],
            vec![0xff; 10_000],
            // A length prefix claiming billions of accounts.
            vec![0xff, 0xff, 0xff, 0xff, 0x0f],
        ];
        for bad in cases {
            assert!(s.restore(&bad).is_err(), "accepted {bad:?}");
            assert_eq!(s.snapshot(), before);
        }
        // The unmodified genesis is accepted.
        s.restore(&encode(good)).unwrap();
        assert_eq!(s.snapshot(), svc().snapshot());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

        /// Any sequence of transfers (valid, overdrawn, replayed, forged)
        /// leaves the supply equal to genesis, and restores agree.
        #[test]
        fn supply_is_conserved_under_random_transfers(
            ops in proptest::collection::vec((0u32..8, 0u32..8, 0u64..150, 0u64..6, any::<bool>()), 0..60)
        ) {
            let s = svc();
            for (from, to, amount, nonce, forge) in ops {
                let mut t = Transfer::signed(&key(from), G.account(to), amount, nonce);
                if forge {
                    t.amount = t.amount.wrapping_add(1);
                }
                let before = s.balance_of(&t.from).unwrap();
                let r = s.apply(TokenOp::Transfer(t));
                if forge {
                    prop_assert_eq!(r, TokenReply::Error(TokenError::BadSignature));
                    prop_assert_eq!(s.balance_of(&G.account(from)).unwrap(), before);
                }
                prop_assert_eq!(s.total_supply(), 800);
            }
            let copy = svc();
            copy.restore(&s.snapshot()).unwrap();
            prop_assert_eq!(copy.state_digest(), s.state_digest());
        }

        #[test]
        fn restore_is_total(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let s = svc();
            let before = s.snapshot();
            if s.restore(&bytes).is_err() {
                prop_assert_eq!(s.snapshot(), before);
            }
            prop_assert_eq!(s.total_supply(), 800);
        }
    }
}
