//! `chorus exec-bench`: the executors alone, fed with delivered batches as the
//! merger would deliver them (no consensus, no network). Reproduces CBASE's
//! executor experiments: Fig. 5(b) (a `sleep` service with a growing
//! parallelism factor) and Fig. 4 (overhead of the parallelizer on `null`).

use anyhow::{bail, Result};
use bytes::Bytes;
use chorus_core::{Authenticator, Batch, ClientId, Request, RequestSeq, Seq};
use chorus_exec::{ExecResult, Executor, SequentialExecutor, Service};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Service: sleep | null.
    #[arg(long, default_value = "sleep")]
    pub service: String,
    /// sleep: service time per operation in microseconds.
    #[arg(long, default_value_t = 1000)]
    pub sleep_us: u64,
    /// Parallelism factors (sleep buckets) to run, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64")]
    pub factors: Vec<u32>,
    /// Worker threads of the parallel executor.
    #[arg(long, default_value_t = 64)]
    pub workers: usize,
    /// Operations per run.
    #[arg(long, default_value_t = 2000)]
    pub ops: usize,
    /// Requests per delivered batch.
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Repetitions per point (the best and the median are reported).
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Output directory for exec-bench.csv and exec-bench.png.
    #[arg(long, default_value = "bench-results")]
    pub out: std::path::PathBuf,
}

struct Point {
    factor: u32,
    sequential: f64,
    parallel: f64,
}

fn service(a: &Args, factor: u32) -> Result<Arc<dyn Service>> {
    let opts = chorus_apps::ServiceOptions {
        sleep_us: a.sleep_us,
        buckets: factor,
        ..Default::default()
    };
    crate::registry()
        .build(&a.service, &opts)
        .map_err(anyhow::Error::msg)
}

fn batches(a: &Args, factor: u32) -> Vec<Arc<Batch>> {
    let mut out = Vec::new();
    let mut i = 0u64;
    while (i as usize) < a.ops {
        let mut reqs = Vec::new();
        for _ in 0..a.batch.min(a.ops - i as usize) {
            // Many clients so the client table never serialises anything;
            // operations spread round-robin over the buckets.
            let op = match a.service.as_str() {
                "sleep" => chorus_apps::SleepService::op((i % factor.max(1) as u64) as u32),
                _ => Bytes::new(),
            };
            reqs.push(Request {
                memo: Default::default(),
                client: ClientId(i % 1024),
                seq: RequestSeq(i / 1024 + 1),
                flags: 0,
                op,
                auth: Authenticator::Macs(Default::default()),
            });
            i += 1;
        }
        out.push(Arc::new(Batch {
            requests: reqs,
            time_ms: 0,
        }));
    }
    out
}

/// Ops/s of one executor over the whole workload, results drained as they come.
fn measure(e: &mut dyn Executor, work: &[Arc<Batch>], ops: usize) -> f64 {
    let start = Instant::now();
    let mut results: Vec<ExecResult> = Vec::with_capacity(ops);
    for (s, b) in work.iter().enumerate() {
        e.submit(Seq(s as u64), b.clone());
        e.drain_results(&mut results);
    }
    let _ = e.state_digest(); // barrier: everything executed
    e.drain_results(&mut results);
    assert_eq!(results.len(), ops, "every operation produces exactly one result");
    ops as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

pub fn run(a: Args) -> Result<()> {
    if !["sleep", "null"].contains(&a.service.as_str()) {
        bail!("--service must be sleep or null");
    }
    if a.ops == 0 || a.batch == 0 || a.workers == 0 || a.factors.is_empty() {
        bail!("--ops, --batch, --workers and --factors must be positive");
    }
    let factors = if a.service == "null" {
        vec![0]
    } else {
        a.factors.clone()
    };
    let mut points = Vec::new();
    println!(
        "{:>8} {:>14} {:>14} {:>10}",
        if a.service == "sleep" { "factor" } else { "" },
        "sequential/s",
        "parallel/s",
        "ratio"
    );
    for &f in &factors {
        let work = batches(&a, f);
        let mut seq_runs = Vec::new();
        let mut par_runs = Vec::new();
        for _ in 0..a.repeat.max(1) {
            let mut s = SequentialExecutor::new(service(&a, f)?, 1 << 20);
            seq_runs.push(measure(&mut s, &work, a.ops));
            let mut p = chorus_parallel::ParallelExecutor::new(service(&a, f)?, a.workers, 4096, 1 << 20);
            par_runs.push(measure(&mut p, &work, a.ops));
            drop(p);
            std::thread::sleep(Duration::from_millis(20));
        }
        let pt = Point {
            factor: f,
            sequential: median(seq_runs),
            parallel: median(par_runs),
        };
        println!(
            "{:>8} {:>14.0} {:>14.0} {:>10.2}",
            pt.factor,
            pt.sequential,
            pt.parallel,
            pt.parallel / pt.sequential
        );
        points.push(pt);
    }
    std::fs::create_dir_all(&a.out)?;
    let csv = a.out.join("exec-bench.csv");
    let mut text = String::from("service,sleep_us,workers,factor,ops,sequential_ops,parallel_ops,ratio\n");
    for p in &points {
        text.push_str(&format!(
            "{},{},{},{},{},{:.1},{:.1},{:.3}\n",
            a.service,
            a.sleep_us,
            a.workers,
            p.factor,
            a.ops,
            p.sequential,
            p.parallel,
            p.parallel / p.sequential
        ));
    }
    std::fs::write(&csv, text)?;
    let png = a.out.join("exec-bench.png");
    let series: Vec<(u32, f64, f64)> = points
        .iter()
        .map(|p| (p.factor, p.sequential, p.parallel))
        .collect();
    crate::bench_plot::plot_exec(&png, &a.service, a.sleep_us, a.workers, &series)?;
    println!("\nwrote {} and {}", csv.display(), png.display());
    Ok(())
}
