//! `chorus`: the one binary operators use.

mod cmd_keygen;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "chorus", version, about = "Chorus: Byzantine fault-tolerant state machine replication with parallel consensus and parallel execution")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write a cluster directory: one TOML config per replica, keys, client configs.
    Keygen(cmd_keygen::Args),
}

fn main() {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("CHORUS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let result = match cli.cmd {
        Cmd::Keygen(a) => cmd_keygen::run(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
