//! The replica process's resident memory and CPU time, read from `/proc`
//! when the metrics are scraped (Linux; elsewhere the metrics stay 0).

use crate::metrics::Metrics;

/// Clock ticks per second of `/proc/<pid>/stat` times (`sysconf(_SC_CLK_TCK)`).
fn ticks_per_sec() -> f64 {
    // SAFETY: `sysconf` only reads a system constant.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

fn page_size() -> u64 {
    // SAFETY: as above.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

/// (resident bytes, user + system CPU seconds) of this process.
pub fn read() -> Option<(u64, f64)> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let resident_pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some((resident_pages * page_size(), ticks / ticks_per_sec()))
}

/// Bring the process metrics up to date.
pub fn sample(m: &Metrics) {
    if let Some((rss, cpu)) = read() {
        m.process_resident_memory_bytes.set(rss as i64);
        let cur = m.process_cpu_seconds.get();
        if cpu > cur {
            m.process_cpu_seconds.inc_by(cpu - cur);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_this_process() {
        let (rss, cpu) = super::read().expect("/proc is readable");
        assert!(rss > 1 << 20, "{rss}");
        assert!(cpu >= 0.0);
    }
}
