//! `chorus token balance|transfer|account`: the token service from the
//! command line. Genesis accounts are named by their index (their keys are
//! derived from the genesis seed), any account by its 64-hex public key.

use anyhow::{anyhow, bail, Result};
use bytes::Bytes;
use chorus_apps::token_op::{account_of, genesis_key, hex32, parse_hex32, AccountId, SigningKey};
use chorus_apps::{ServiceOptions, TokenOp, TokenReply};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A client config file (`client-<i>.toml` from `chorus keygen`).
    #[arg(long)]
    pub config: PathBuf,
    /// The cluster's service options (as given to `chorus keygen
    /// --service-options`); the genesis seed names accounts by index.
    #[arg(long, default_value = "")]
    pub service_options: String,
    /// Read balances through ordering (skip the read-only fast path).
    #[arg(long)]
    pub ordered: bool,
    #[command(subcommand)]
    pub op: Op,
}

#[derive(clap::Subcommand, Debug)]
pub enum Op {
    /// Print the balance and last nonce of ACCOUNT (genesis index or 64-hex public key).
    Balance { account: String },
    /// Transfer AMOUNT from a genesis account (or a secret key) to another account.
    Transfer {
        /// Sender: genesis account index (its key is derived from the genesis seed).
        #[arg(long, required_unless_present = "secret")]
        from: Option<u32>,
        /// Sender's Ed25519 secret key, 64 hex digits (instead of --from).
        #[arg(long, conflicts_with = "from")]
        secret: Option<String>,
        /// Recipient: genesis index or 64-hex public key.
        #[arg(long)]
        to: String,
        #[arg(long)]
        amount: u64,
        /// Nonce; default: the sender's last nonce + 1 (read first).
        #[arg(long)]
        nonce: Option<u64>,
    },
    /// Print the public key of genesis account INDEX.
    Account { index: u32 },
}

fn parse_account(s: &str, opts: &ServiceOptions) -> Result<AccountId> {
    if let Some(a) = parse_hex32(s) {
        return Ok(a);
    }
    let i: u32 = s
        .parse()
        .map_err(|_| anyhow!("account {s:?} is neither a genesis index nor 64 hex digits"))?;
    let g = opts.token_genesis();
    if i >= g.accounts {
        bail!(
            "genesis account {i} does not exist (token_accounts = {})",
            g.accounts
        );
    }
    Ok(g.account(i))
}

fn decode(bytes: &[u8]) -> Result<TokenReply> {
    TokenReply::decode(bytes)
        .map_err(|e| anyhow!("not a token reply (is the cluster running --service token?): {e}"))
}

pub fn run(a: Args) -> Result<()> {
    let opts = ServiceOptions::parse(&a.service_options).map_err(anyhow::Error::msg)?;
    if let Op::Account { index } = &a.op {
        println!("{}", hex32(&parse_account(&index.to_string(), &opts)?));
        return Ok(());
    }
    let c = chorus_node::node_config::load_client(&a.config)?;
    let _held = chorus_node::node_config::lock_identity(&c.key_path, c.id)?;
    let client = chorus_client::BlockingClient::connect(
        Arc::new(c.cluster),
        c.id,
        c.identity,
        chorus_client::ClientOptions::default(),
    )
    .map_err(|e| anyhow!("{e}"))?;
    let read = |account: AccountId| -> Result<TokenReply> {
        let op = TokenOp::balance(account);
        let r: Bytes = if a.ordered {
            client.invoke(op)
        } else {
            client.invoke_read_only(op)
        }
        .map_err(|e| anyhow!("{e}"))?;
        decode(&r)
    };
    match &a.op {
        Op::Account { .. } => unreachable!("handled above"),
        Op::Balance { account } => match read(parse_account(account, &opts)?)? {
            TokenReply::Balance { balance, nonce } => println!("balance {balance} nonce {nonce}"),
            TokenReply::Error(e) => bail!("refused: {e}"),
            other => bail!("unexpected reply {other:?}"),
        },
        Op::Transfer {
            from,
            secret,
            to,
            amount,
            nonce,
        } => {
            let key = match (from, secret) {
                (_, Some(hex)) => SigningKey::from_bytes(
                    &parse_hex32(hex).ok_or_else(|| anyhow!("--secret must be 64 hex digits"))?,
                ),
                (Some(i), None) => genesis_key(opts.token_seed, *i),
                (None, None) => bail!("give --from or --secret"),
            };
            let to = parse_account(to, &opts)?;
            let nonce = match nonce {
                Some(n) => *n,
                None => match read(account_of(&key))? {
                    TokenReply::Balance { nonce, .. } => nonce + 1,
                    TokenReply::Error(e) => bail!("refused: {e}"),
                    other => bail!("unexpected reply {other:?}"),
                },
            };
            let r = client
                .invoke(TokenOp::transfer(&key, to, *amount, nonce))
                .map_err(|e| anyhow!("{e}"))?;
            match decode(&r)? {
                TokenReply::Transferred { from_balance, nonce } => {
                    println!("OK: sender balance {from_balance} nonce {nonce}")
                }
                TokenReply::Error(e) => bail!("transfer refused: {e}"),
                other => bail!("unexpected reply {other:?}"),
            }
        }
    }
    Ok(())
}
