//! Benchmark results as JSON (all runs of one invocation) and CSV (appended,
//! one row per run, so several invocations accumulate in one table).

use crate::bench_run::RunResult;
use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;

const CSV_HEADER: &str = "unix_time,name,label,cores,n,mode,pillars,executor,workers,service,workload,clients,in_flight,offered_rate,batch,request_bytes,value_bytes,buckets,duration_s,ops,errors,shed,throughput_ops,p50_ms,p95_ms,p99_ms,max_ms,commit_p50_ms,commit_p99_ms,replica_cpu_s,replica_peak_rss_mib,client_threads,prepare_auth,leader_first,few_replies,pacing_late_p50_ms,pacing_late_p99_ms,arrivals";

pub fn write_json(path: &Path, results: &[RunResult]) -> Result<()> {
    let text = serde_json::to_string_pretty(results)?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

pub fn append_csv(path: &Path, r: &RunResult) -> Result<()> {
    // A table written by a version with other columns is moved aside rather
    // than mixed with rows it cannot describe.
    if let Ok(text) = std::fs::read_to_string(path) {
        if text.lines().next() != Some(CSV_HEADER) {
            let old = path.with_extension("csv.old");
            std::fs::rename(path, &old).with_context(|| format!("moving {} aside", path.display()))?;
            eprintln!("{} had other columns; moved to {}", path.display(), old.display());
        }
    }
    let new = !path.exists();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    if new {
        writeln!(f, "{CSV_HEADER}")?;
    }
    let list = |v: &[f64]| v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(";");
    writeln!(
        f,
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.2},{},{},{},{:.1},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{},{},{},{},{},{},{:.3},{:.3},{}",
        r.unix_time,
        r.name,
        r.label.replace(',', ";"),
        r.cores,
        r.n,
        r.mode,
        r.pillars,
        r.executor,
        r.workers,
        r.service,
        r.workload,
        r.clients,
        r.in_flight,
        r.offered_rate,
        r.batch,
        r.request_bytes,
        r.value_bytes,
        r.buckets,
        r.duration_s,
        r.ops,
        r.errors,
        r.shed,
        r.throughput_ops,
        r.p50_ms,
        r.p95_ms,
        r.p99_ms,
        r.max_ms,
        r.commit_p50_ms,
        r.commit_p99_ms,
        list(&r.replica_cpu_s),
        list(&r.replica_peak_rss_mib),
        r.client_threads,
        r.prepare_auth,
        r.leader_first,
        r.few_replies,
        r.pacing_late_p50_ms,
        r.pacing_late_p99_ms,
        r.arrivals
    )?;
    Ok(())
}
