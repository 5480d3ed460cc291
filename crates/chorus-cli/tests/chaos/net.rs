//! The test's own network: one namespace per replica, each joined to the
//! root namespace by a veth pair on its own /30 of a private /24. The root
//! namespace gets a blackhole route for the whole /24, so only the /30s of
//! links that are up route anywhere; a connection to any other address of
//! the subnet (or to a replica whose link is down) dies on this machine.
//! A replica namespace has no route but its own /30 and loopback, so a
//! replica can reach only the root side of its link, where the fault proxy
//! listens: every replica-to-replica byte crosses the proxy.

use std::process::Command;

/// Every namespace and interface this test creates starts with this.
pub const PREFIX: &str = "chorus-chaos-";

pub struct Lab {
    /// Unique per run (the test's pid): names and the subnet derive from it.
    pub tag: u32,
    /// Third octet of 10.199.X.0/24.
    pub octet: u8,
    pub n: usize,
    namespaces: Vec<String>,
    blackhole: bool,
}

pub fn sh(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `Ok` when this process can create namespaces and veth pairs; otherwise why not.
pub fn available() -> Result<(), String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    let uid = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2))
        .unwrap_or("?");
    if uid != "0" {
        return Err(format!("needs root (effective uid is {uid})"));
    }
    let probe = format!("{PREFIX}probe-{}", std::process::id());
    sh(&["ip", "netns", "add", &probe]).map_err(|e| format!("`ip netns` unavailable: {e}"))?;
    let veth = sh(&[
        "ip", "link", "add", "ccprobe0", "type", "veth", "peer", "name", "eth0", "netns", &probe,
    ]);
    let _ = sh(&["ip", "link", "del", "ccprobe0"]);
    let _ = sh(&["ip", "netns", "del", &probe]);
    veth.map(|_| ()).map_err(|e| format!("veth unavailable: {e}"))
}

/// Remove namespaces and links left by earlier runs whose process is gone
/// (a run killed with SIGKILL cannot clean up after itself).
pub fn sweep_stale() {
    let Ok(list) = sh(&["ip", "netns", "list"]) else {
        return;
    };
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                let _ = sh(&["ip", "netns", "del", name]);
            }
        }
    }
}

impl Lab {
    pub fn new(n: usize) -> Result<Lab, String> {
        assert!(n <= 60, "one /30 per replica in a /24");
        sweep_stale();
        let tag = std::process::id();
        let routes = sh(&["ip", "route", "show", "table", "all"])?;
        // A /24 nobody else routes (another run, or the machine's own networks).
        let octet = (0..250u32)
            .map(|k| ((tag + k) % 250 + 2) as u8)
            .find(|o| !routes.contains(&format!("10.199.{o}.")))
            .ok_or("no free 10.199.X.0/24")?;
        let mut lab = Lab {
            tag,
            octet,
            n,
            namespaces: Vec::new(),
            blackhole: false,
        };
        // The blackhole goes in first: nothing of the subnet may leave before it exists.
        sh(&["ip", "route", "add", "blackhole", &lab.subnet()])?;
        lab.blackhole = true;
        for i in 0..n {
            let ns = lab.ns(i);
            sh(&["ip", "netns", "add", &ns])?;
            lab.namespaces.push(ns.clone());
            let hif = lab.host_if(i);
            sh(&[
                "ip", "link", "add", &hif, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ])?;
            sh(&[
                "ip",
                "addr",
                "add",
                &format!("{}/30", lab.root_ip(i)),
                "dev",
                &hif,
            ])?;
            sh(&["ip", "link", "set", &hif, "up"])?;
            let in_ns = |args: &[&str]| {
                let mut v = vec!["ip", "-n", ns.as_str()];
                v.extend_from_slice(args);
                sh(&v)
            };
            in_ns(&["addr", "add", &format!("{}/30", lab.replica_ip(i)), "dev", "eth0"])?;
            in_ns(&["link", "set", "eth0", "up"])?;
            in_ns(&["link", "set", "lo", "up"])?;
        }
        Ok(lab)
    }

    pub fn subnet(&self) -> String {
        format!("10.199.{}.0/24", self.octet)
    }

    pub fn ns(&self, i: usize) -> String {
        format!("{PREFIX}{}-r{i}", self.tag)
    }

    /// Root-namespace end of replica `i`'s link (interface names have 15 bytes at most).
    pub fn host_if(&self, i: usize) -> String {
        format!("cc{}h{i}", self.tag % 1_000_000)
    }

    /// Root side of replica `i`'s /30: the proxies for `i`'s outgoing links listen here.
    pub fn root_ip(&self, i: usize) -> String {
        format!("10.199.{}.{}", self.octet, 4 * i + 1)
    }

    /// Replica `i`'s own address inside its namespace.
    pub fn replica_ip(&self, i: usize) -> String {
        format!("10.199.{}.{}", self.octet, 4 * i + 2)
    }

    /// Partition replica `i` from everyone (peers and clients) or heal it.
    pub fn set_link(&self, i: usize, up: bool) {
        sh(&[
            "ip",
            "link",
            "set",
            &self.host_if(i),
            if up { "up" } else { "down" },
        ])
        .expect("ip link set");
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth and with it the pair.
        for ns in self.namespaces.drain(..) {
            if let Err(e) = sh(&["ip", "netns", "del", &ns]) {
                eprintln!("chaos cleanup: {e}");
            }
        }
        for i in 0..self.n {
            let _ = sh(&["ip", "link", "del", &self.host_if(i)]);
        }
        if self.blackhole {
            if let Err(e) = sh(&["ip", "route", "del", "blackhole", &self.subnet()]) {
                eprintln!("chaos cleanup: {e}");
            }
        }
    }
}
