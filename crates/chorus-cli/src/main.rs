//! `chorus`: the one binary operators use.

mod bench_out;
mod bench_plot;
mod bench_run;
mod cmd_bench;
mod cmd_dashboard;
mod cmd_demo;
mod cmd_exec_bench;
mod cmd_keygen;
mod cmd_kv;
mod cmd_replica;
mod cmd_sim;
mod cmd_status;
mod cmd_token;
mod dash_http;
mod dash_state;
mod exit;
mod load;
mod procs;
mod status_query;
mod workload;
mod workload_token;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "chorus",
    version,
    about = "Chorus: Byzantine fault-tolerant state machine replication with parallel consensus and parallel execution"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write a cluster directory: one TOML config per replica, keys, client configs.
    Keygen(cmd_keygen::Args),
    /// Run one replica process.
    Replica(cmd_replica::Args),
    /// Key-value operations against a running cluster.
    Kv(cmd_kv::Args),
    /// Token operations (balance, signed transfer) against a `--service token` cluster.
    Token(cmd_token::Args),
    /// Each replica's view, delivered and executed positions, connections and state digest.
    Status(cmd_status::Args),
    /// Start a local 4-replica cluster, drive a workload, kill and restart a replica.
    Demo(cmd_demo::Args),
    /// Serve a live web dashboard of a running cluster (views, positions, digests, throughput, events).
    Dashboard(cmd_dashboard::Args),
    /// Benchmark a local or running cluster; writes JSON, CSV and a PNG plot.
    Bench(cmd_bench::Args),
    /// Benchmark the executors alone (CBASE Fig. 4 and 5(b)): sequential vs parallel.
    ExecBench(cmd_exec_bench::Args),
    /// Deterministic simulation with faults, Byzantine replicas and invariant checkers.
    Sim(cmd_sim::Args),
}

fn main() {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("CHORUS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.cmd {
        Cmd::Keygen(a) => cmd_keygen::run(a),
        Cmd::Replica(a) => cmd_replica::run(a),
        Cmd::Kv(a) => cmd_kv::run(a),
        Cmd::Token(a) => cmd_token::run(a),
        Cmd::Status(a) => cmd_status::run(a),
        Cmd::Demo(a) => cmd_demo::run(a),
        Cmd::Dashboard(a) => cmd_dashboard::run(a),
        Cmd::Bench(a) => cmd_bench::run(a),
        Cmd::ExecBench(a) => cmd_exec_bench::run(a),
        Cmd::Sim(a) => cmd_sim::run(a),
    };
    if let Err(e) = result {
        // A not-found key is an answer, not a failure: no "error:" prefix.
        match e.downcast_ref::<exit::Exit>() {
            Some(x) if x.message.is_empty() => {}
            _ => eprintln!("error: {e:#}"),
        }
        std::process::exit(exit::code_of(&e));
    }
}
