//! The `chorus` command as a library (issue 17): an application binary
//! registers its own services and gets `keygen`, `replica`, `status`,
//! `bench`, `demo` and `sim` for them, e.g.
//!
//! ```no_run
//! let registry = chorus_apps::ServiceRegistry::builtin();
//! // registry.register(my_service_entry());
//! chorus_cli::main_with(registry);
//! ```

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
mod pacer;
mod procs;
mod status_query;
mod workload;
mod workload_token;

use chorus_apps::ServiceRegistry;
use std::sync::OnceLock;

static REGISTRY: OnceLock<ServiceRegistry> = OnceLock::new();

/// The services this binary knows: what `main_with` was given (the
/// built-in ones when it was not called, e.g. in unit tests).
pub fn registry() -> &'static ServiceRegistry {
    REGISTRY.get_or_init(ServiceRegistry::builtin)
}

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "chorus",
    version,
    about = "Chorus: Byzantine fault-tolerant state machine replication with parallel consensus and parallel execution"
)]
pub struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
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
    /// Benchmark a local or running cluster; writes JSON, CSV and a PNG plot.
    Bench(cmd_bench::Args),
    /// Benchmark the executors alone (CBASE Fig. 4 and 5(b)): sequential vs parallel.
    ExecBench(cmd_exec_bench::Args),
    /// Deterministic simulation with faults, Byzantine replicas and invariant checkers.
    Sim(cmd_sim::Args),
    /// Serve a live web dashboard of a running cluster (views, positions, digests, throughput, events).
    Dashboard(cmd_dashboard::Args),
}

/// This binary's file name (`chorus`, or an application's own), for help
/// texts and replay commands.
pub fn program_name() -> String {
    std::env::args()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "chorus".into())
}

/// Run the command line with the services in `registry` (call it from
/// `main`; it exits the process on failure).
pub fn main_with(registry: ServiceRegistry) {
    if REGISTRY.set(registry).is_err() {
        panic!("main_with is called once per process");
    }
    use clap::{CommandFactory, FromArgMatches};
    // Help and errors name the application's own binary.
    let matches = Cli::command().bin_name(program_name()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
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
        Cmd::Bench(a) => cmd_bench::run(a),
        Cmd::ExecBench(a) => cmd_exec_bench::run(a),
        Cmd::Sim(a) => cmd_sim::run(a),
        Cmd::Dashboard(a) => cmd_dashboard::run(a),
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
