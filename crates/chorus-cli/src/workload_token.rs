//! `chorus bench --service token`: signed transfers between the genesis
//! accounts (`--records` of them, seed 0) with a hot-account skew.
//!
//! - Recipient: the hot account (genesis account 0) with probability
//!   `--conflict-rate`, else drawn by `--distribution` (uniform or zipfian).
//!   Transfers to one account conflict, so the skew serialises them under
//!   the parallel executor (CBASE).
//! - Sender: a genesis account no other generator of this process holds, so
//!   closed-loop clients never race on one account's nonces. Each account's
//!   nonces start at the wall clock in microseconds and count up, so a later
//!   bench process against the same running cluster (`--target`) starts
//!   above every nonce an earlier one used (the service only needs nonces to
//!   increase per account; gaps are fine).
//! - Mix by `--workload`: C = balance reads only, B = 95 % reads, A and F =
//!   50 % reads, anything else (e.g. U) = transfers only.

use crate::workload::{KeyDist, Op, Ycsb};
use chorus_apps::token::MAX_TOKEN_ACCOUNTS;
use chorus_apps::token_op::{account_of, genesis_key, AccountId, SigningKey};
use chorus_apps::{ServiceOptions, TokenOp};
use parking_lot::Mutex;
use rand::distributions::Distribution;
use rand::Rng;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// The accounts a bench run uses: `records` clamped to the service's bound.
pub fn accounts(records: u64) -> u32 {
    records.clamp(1, u64::from(MAX_TOKEN_ACCOUNTS)) as u32
}

/// Service options for a local bench cluster: a genesis of `records` accounts.
pub fn service_options(service: &str, records: u64) -> String {
    if service == "token" {
        format!("token_accounts={}", accounts(records))
    } else {
        String::new()
    }
}

struct Pool {
    keys: Vec<SigningKey>,
    ids: Vec<AccountId>,
    /// Per account: next nonce, and whether a generator holds it.
    state: Mutex<(Vec<u64>, Vec<bool>)>,
}

/// Pools by (genesis seed, accounts).
type Pools = Mutex<HashMap<(u64, u32), Arc<Pool>>>;

/// One pool per (seed, accounts) in this process, shared by all generators.
fn pool(accounts: u32) -> Arc<Pool> {
    static POOLS: OnceLock<Pools> = OnceLock::new();
    let seed = ServiceOptions::default().token_seed;
    let mut pools = POOLS.get_or_init(|| Mutex::new(HashMap::new())).lock();
    pools
        .entry((seed, accounts))
        .or_insert_with(|| {
            let keys: Vec<SigningKey> = (0..accounts).map(|i| genesis_key(seed, i)).collect();
            let ids = keys.iter().map(account_of).collect();
            let start = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_micros() as u64)
                .unwrap_or(1)
                .max(1);
            Arc::new(Pool {
                keys,
                ids,
                state: Mutex::new((vec![start; accounts as usize], vec![false; accounts as usize])),
            })
        })
        .clone()
}

pub struct TokenGen {
    pool: Arc<Pool>,
    held: Option<usize>,
    ycsb: Ycsb,
    hot_rate: f64,
    zipf: Option<rand_distr::Zipf<f64>>,
}

impl TokenGen {
    pub fn new(records: u64, ycsb: Ycsb, dist: KeyDist, hot_rate: f64) -> TokenGen {
        let n = accounts(records);
        TokenGen {
            pool: pool(n),
            held: None,
            ycsb,
            hot_rate: hot_rate.clamp(0.0, 1.0),
            zipf: match dist {
                KeyDist::Zipfian => rand_distr::Zipf::new(u64::from(n), 0.99).ok(),
                KeyDist::Uniform => None,
            },
        }
    }

    fn n(&self) -> usize {
        self.pool.ids.len()
    }

    fn recipient(&self, rng: &mut impl Rng) -> usize {
        if self.hot_rate > 0.0 && rng.gen_bool(self.hot_rate) {
            return 0;
        }
        match &self.zipf {
            Some(z) => (z.sample(rng) as usize).saturating_sub(1) % self.n(),
            None => rng.gen_range(0..self.n()),
        }
    }

    fn release(&mut self) {
        if let Some(i) = self.held.take() {
            self.pool.state.lock().1[i] = false;
        }
    }

    /// Hold a sender no other generator holds (random probes, then a scan);
    /// when every account is held, share one (its transfers may then see
    /// reused-nonce refusals, which the bench counts as replies).
    fn lease(&mut self, rng: &mut impl Rng) -> (usize, u64) {
        self.release();
        let n = self.n();
        let mut st = self.pool.state.lock();
        let start = rng.gen_range(0..n);
        let probe = (0..8)
            .map(|_| rng.gen_range(0..n))
            .chain((0..n).map(|k| (start + k) % n))
            .find(|&i| !st.1[i]);
        let i = match probe {
            Some(i) => {
                st.1[i] = true;
                self.held = Some(i);
                i
            }
            None => start,
        };
        let nonce = st.0[i];
        st.0[i] += 1;
        (i, nonce)
    }

    pub fn next(&mut self, rng: &mut impl Rng) -> Op {
        let read_share = match self.ycsb {
            Ycsb::C => 1.0,
            Ycsb::B => 0.95,
            Ycsb::A | Ycsb::F => 0.5,
            _ => 0.0,
        };
        if rng.gen::<f64>() < read_share {
            let a = self.recipient(rng);
            return Op {
                bytes: TokenOp::balance(self.pool.ids[a]),
                read_only: true,
            };
        }
        let to = self.recipient(rng);
        let (from, nonce) = self.lease(rng);
        Op {
            bytes: TokenOp::transfer(&self.pool.keys[from], self.pool.ids[to], 1, nonce),
            read_only: false,
        }
    }
}

impl Drop for TokenGen {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_apps::token_op::Transfer;
    use chorus_apps::{Genesis, TokenReply, TokenService};
    use chorus_exec::Service;
    use rand::SeedableRng;

    #[test]
    fn concurrent_generators_hold_distinct_senders_and_their_transfers_apply() {
        let svc = TokenService::new(Genesis {
            accounts: 37,
            ..Genesis::default()
        })
        .unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let mut gens: Vec<TokenGen> = (0..10)
            .map(|_| TokenGen::new(37, Ycsb::U, KeyDist::Zipfian, 0.3))
            .collect();
        let ctx = chorus_exec::read_only_context(chorus_core::Seq(0), 0);
        let mut hot = 0;
        for _ in 0..50 {
            let mut senders = Vec::new();
            for g in gens.iter_mut() {
                let op = g.next(&mut rng);
                assert!(!op.read_only);
                let Ok(TokenOp::Transfer(Transfer { from, to, .. })) = TokenOp::decode(&op.bytes) else {
                    panic!("not a transfer")
                };
                hot += usize::from(to == svc.genesis().account(0));
                senders.push(from);
                // Same-round transfers in any order all apply.
                let r = TokenReply::decode(&svc.execute(&op.bytes, &ctx)).unwrap();
                assert!(matches!(r, TokenReply::Transferred { .. }), "{r:?}");
            }
            senders.sort();
            senders.dedup();
            assert_eq!(senders.len(), 10, "two generators held one sender");
        }
        assert!(hot >= 100, "hot-account skew missing: {hot} of 500");
        assert_eq!(svc.total_supply(), svc.genesis_supply());
        drop(gens);
        assert!(pool(37).state.lock().1.iter().all(|h| !h), "leases leak");
    }

    #[test]
    fn read_mix_follows_the_workload() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
        let mut g = TokenGen::new(5, Ycsb::C, KeyDist::Uniform, 0.0);
        assert!((0..20).all(|_| g.next(&mut rng).read_only));
        assert_eq!(service_options("token", 0), "token_accounts=1");
        assert_eq!(service_options("kv", 10), "");
    }
}
