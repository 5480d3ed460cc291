//! Child replica processes started by `chorus demo` / `chorus bench`; every one
//! is killed when the guard drops (normal exit, error, or Ctrl-C).

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub struct Cluster {
    pub dir: PathBuf,
    children: Vec<Option<Child>>,
}

impl Cluster {
    pub fn new(dir: PathBuf, n: usize) -> Cluster {
        Cluster {
            dir,
            children: (0..n).map(|_| None).collect(),
        }
    }

    pub fn start(&mut self, i: usize) -> Result<()> {
        let exe = std::env::current_exe().context("locating the chorus binary")?;
        let log_path = self.dir.join(format!("replica-{i}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        let child = Command::new(exe)
            .arg("replica")
            .arg("--config")
            .arg(self.dir.join(format!("replica-{i}.toml")))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting a replica process")?;
        self.children[i] = Some(child);
        Ok(())
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A replica that exited on its own, if any (a crash is worth reporting).
    pub fn exited(&mut self) -> Option<(usize, String)> {
        for (i, c) in self.children.iter_mut().enumerate() {
            if let Some(child) = c {
                if let Ok(Some(status)) = child.try_wait() {
                    *c = None;
                    return Some((i, status.to_string()));
                }
            }
        }
        None
    }

    pub fn pid(&self, i: usize) -> Option<u32> {
        self.children[i].as_ref().map(|c| c.id())
    }

    pub fn log_path(&self, i: usize) -> PathBuf {
        self.dir.join(format!("replica-{i}.log"))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
    }
}

/// A base port such that every port a cluster of `n` replicas with `pillars`
/// pillars needs is free right now. Chosen below Linux's ephemeral range
/// (32768+), so no outgoing connection can take a port before a replica binds it.
pub fn free_base_port(n: usize, pillars: u32) -> Result<u16> {
    let pid = std::process::id() as u16;
    for attempt in 0..200u16 {
        let base =
            10_000 + ((pid.wrapping_mul(7).wrapping_add(attempt.wrapping_mul(997))) % 22_000) / 100 * 100;
        let ports = (0..n as u16).flat_map(|i| {
            let b = base + 100 * i;
            (0..pillars as u16).map(move |p| b + p).chain([b + 90, b + 91])
        });
        let free = ports
            .into_iter()
            .all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
        if free && base as usize + 100 * n < 32_700 {
            return Ok(base);
        }
    }
    anyhow::bail!("no free port range found on 127.0.0.1")
}

pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// CPU seconds (user + system) a process has used so far (Linux /proc).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// Peak resident set size in MiB (Linux VmHWM).
pub fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}
