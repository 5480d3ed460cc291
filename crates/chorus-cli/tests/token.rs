//! The token service with real replica processes on loopback (Dispel §6,
//! issue 11 item 5): 10 000 signed transfers among 1 000 accounts while one
//! replica is SIGKILLed under load and restarted under load. The supply is conserved, every
//! replica ends with the same state digest, every acknowledged transfer is
//! in the balances, and a forged or replayed transfer is refused with a
//! clear error the client sees (through the library and `chorus token`).

mod common;

use bytes::Bytes;
use chorus_apps::token_op::{genesis_key, Transfer};
use chorus_apps::{Genesis, TokenError, TokenOp, TokenReply};
use chorus_core::OrderingMode;
use common::{ServiceSpec, TestCluster};
use rand::{Rng, SeedableRng};
use std::collections::HashSet;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const ACCOUNTS: u32 = 1_000;
const BALANCE: u64 = 1_000;
const OPTIONS: &str = "token_accounts=1000,token_balance=1000";
/// Transfers per lane per phase: 3 phases × 16 lanes × 210 = 10 080.
const PER_LANE: usize = 210;
const CLIENTS: usize = 4;
const LANES: usize = 4;
const SENDERS: usize = CLIENTS * LANES;

fn genesis() -> Genesis {
    Genesis {
        seed: 0,
        accounts: ACCOUNTS,
        balance: BALANCE,
    }
}

/// What the lanes did: acknowledged transfers `(from, to, amount)`, and the
/// accounts touched by a transfer whose outcome the client never learned.
#[derive(Default)]
struct Outcome {
    acked: Vec<(u32, u32, u64)>,
    uncertain: HashSet<u32>,
}

/// `per_lane` transfers from each of the `SENDERS` lanes. Lane `l` owns the
/// senders `i ≡ l (mod SENDERS)` and cycles through them, so one account's
/// nonces are only ever used by one sequential lane: `nonces[i]` is the
/// account's last nonce.
async fn transfers(
    clients: Vec<Arc<chorus_client::Client>>,
    mut nonces: Vec<u64>,
    seed: u64,
    progress: Arc<AtomicUsize>,
) -> (Vec<u64>, Outcome) {
    let g = genesis();
    let mut tasks = Vec::new();
    for (ci, client) in clients.into_iter().enumerate() {
        for lane in 0..LANES {
            let l = ci * LANES + lane;
            let owned: Vec<(u32, u64)> = (l as u32..ACCOUNTS)
                .step_by(SENDERS)
                .map(|i| (i, nonces[i as usize]))
                .collect();
            let client = client.clone();
            let progress = progress.clone();
            tasks.push(tokio::spawn(async move {
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed * 1000 + l as u64);
                let mut owned = owned;
                let mut out = Outcome::default();
                for k in 0..PER_LANE {
                    let slot = k % owned.len();
                    let (from, last) = owned[slot];
                    let to = rng.gen_range(0..ACCOUNTS);
                    let amount = rng.gen_range(1..=5);
                    owned[slot].1 = last + 1;
                    let op = TokenOp::transfer(&genesis_key(g.seed, from), g.account(to), amount, last + 1);
                    match client.invoke(op).await {
                        Ok(r) => match TokenReply::decode(&r).unwrap() {
                            TokenReply::Transferred { nonce, .. } => {
                                assert_eq!(nonce, last + 1);
                                out.acked.push((from, to, amount));
                            }
                            other => panic!("transfer {from}→{to} of {amount} refused: {other:?}"),
                        },
                        Err(_) => {
                            out.uncertain.insert(from);
                            out.uncertain.insert(to);
                        }
                    }
                    progress.fetch_add(1, Ordering::Relaxed);
                }
                (owned, out)
            }));
        }
    }
    let mut all = Outcome::default();
    for t in tasks {
        let (owned, out) = t.await.unwrap();
        for (i, n) in owned {
            nonces[i as usize] = n;
        }
        all.acked.extend(out.acked);
        all.uncertain.extend(out.uncertain);
    }
    (nonces, all)
}

/// Run one phase of transfers; once a third of it is done, call `mid`.
fn phase(
    rt: &tokio::runtime::Runtime,
    clients: &[Arc<chorus_client::Client>],
    nonces: Vec<u64>,
    seed: u64,
    mid: impl FnOnce(),
) -> (Vec<u64>, Outcome) {
    let progress = Arc::new(AtomicUsize::new(0));
    let h = rt.spawn(transfers(clients.to_vec(), nonces, seed, progress.clone()));
    while progress.load(Ordering::Relaxed) < SENDERS * PER_LANE / 3 && !h.is_finished() {
        std::thread::sleep(Duration::from_millis(10));
    }
    mid();
    rt.block_on(h).unwrap()
}

async fn balances(c: &TestCluster) -> Vec<(u64, u64)> {
    let client = c.client(CLIENTS).await;
    let mut out = Vec::new();
    for i in 0..ACCOUNTS {
        let r = client
            .invoke(TokenOp::balance(genesis().account(i)))
            .await
            .unwrap();
        match TokenReply::decode(&r).unwrap() {
            TokenReply::Balance { balance, nonce } => out.push((balance, nonce)),
            other => panic!("balance of {i}: {other:?}"),
        }
    }
    out
}

async fn refusal(c: &TestCluster, op: Bytes) -> TokenError {
    let client = c.client(CLIENTS).await;
    match TokenReply::decode(&client.invoke(op).await.unwrap()).unwrap() {
        TokenReply::Error(e) => e,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn cli(c: &TestCluster, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_chorus"))
        .arg("token")
        .arg("--config")
        // Its own identity: replies go to an identity's newest connection.
        .arg(c.path().join(format!("client-{}.toml", CLIENTS + 1)))
        .arg("--service-options")
        .arg(OPTIONS)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn signed_transfers_survive_a_sigkill_conserve_supply_and_refuse_forgeries_and_replays() {
    let mut c = TestCluster::new_service_in_range(
        6_000,
        10,
        OrderingMode::Cop,
        2,
        CLIENTS + 2,
        ServiceSpec {
            service: "token",
            options: OPTIONS,
            // CBASE: transfers between disjoint accounts execute in parallel.
            executor: "parallel",
            ..ServiceSpec::default()
        },
        |_| {},
    );
    c.wait_up(&[0, 1, 2, 3], Duration::from_secs(20));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let clients: Vec<_> = (0..CLIENTS).map(|i| Arc::new(rt.block_on(c.client(i)))).collect();
    let nonces = vec![0u64; ACCOUNTS as usize];
    // SIGKILL replica 2 a third into phase 1, restart it a third into phase 3.
    let (nonces, o1) = phase(&rt, &clients, nonces, 1, || c.kill(2));
    let (nonces, o2) = phase(&rt, &clients, nonces, 2, || {});
    let (nonces, o3) = phase(&rt, &clients, nonces, 3, || c.start(2));
    let outcomes = [o1, o2, o3];
    let total = 3 * SENDERS * PER_LANE;
    let acked: usize = outcomes.iter().map(|o| o.acked.len()).sum();
    assert!(
        acked * 100 >= total * 99,
        "the cluster must keep serving with one replica down: {acked} of {total} acknowledged"
    );
    c.wait_up(&[2], Duration::from_secs(20));

    // A forged transfer: signed by account 1's key, claiming account 0's funds.
    let mut forged = Transfer::signed(&genesis_key(0, 1), genesis().account(2), 10, nonces[0] + 1);
    forged.from = genesis().account(0);
    let e = rt.block_on(refusal(&c, TokenOp::Transfer(forged).encode()));
    assert_eq!(e, TokenError::BadSignature);
    assert!(e.to_string().contains("bad signature"), "{e}");
    // A validly signed transfer whose nonce account 3 already used (what a
    // replayed transfer carries), sent by another client.
    let first = Transfer::signed(&genesis_key(0, 3), genesis().account(4), 1, 1);
    let e = rt.block_on(refusal(&c, TokenOp::Transfer(first).encode()));
    assert_eq!(
        e,
        TokenError::ReusedNonce {
            nonce: 1,
            last: nonces[3]
        }
    );
    assert!(e.to_string().contains("reused nonce"), "{e}");
    // The same refusal through `chorus token transfer`, with a clear message.
    let out = cli(
        &c,
        &[
            "transfer", "--from", "5", "--to", "6", "--amount", "1", "--nonce", "1",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("reused nonce 1"),
        "{stderr}"
    );
    // And a good one, nonce read from the cluster.
    let out = cli(&c, &["transfer", "--from", "5", "--to", "6", "--amount", "7"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = cli(&c, &["balance", "5"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("nonce {}", nonces[5] + 1)), "{stdout}");
    let mut model: Vec<i128> = vec![i128::from(BALANCE); ACCOUNTS as usize];
    model[5] -= 7;
    model[6] += 7;

    // All replicas agree, including the one that was killed.
    c.wait_converged(Duration::from_secs(60));
    let b = rt.block_on(balances(&c));
    let supply: u64 = b.iter().map(|x| x.0).sum();
    assert_eq!(supply, u64::from(ACCOUNTS) * BALANCE, "total supply changed");
    let mut uncertain = HashSet::new();
    for o in &outcomes {
        uncertain.extend(o.uncertain.iter().copied());
        for &(from, to, amount) in &o.acked {
            model[from as usize] -= i128::from(amount);
            model[to as usize] += i128::from(amount);
        }
    }
    for i in 0..ACCOUNTS as usize {
        if !uncertain.contains(&(i as u32)) {
            assert_eq!(i128::from(b[i].0), model[i], "balance of account {i}");
        }
    }
    let (_, digest) = c.wait_converged(Duration::from_secs(30));
    assert!(!digest.is_empty());
}
