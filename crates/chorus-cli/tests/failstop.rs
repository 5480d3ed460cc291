//! Issue 14 item 1: fail-stop. A replica whose storage fails (a corrupt
//! database, a full file system) exits non-zero within seconds with a message
//! that says what and where, instead of living on as a zombie; the rest of
//! the cluster loses nothing it acknowledged.

mod common;

use bytes::Bytes;
use chorus_apps::kv_op::KvOp;
use chorus_core::OrderingMode;
use common::{rt, ServiceSpec, TestCluster};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn cluster() -> TestCluster {
    cluster_with(2)
}

/// With one pillar and `fsync = off` the core and its storage writes run on
/// pillar 0's thread (`runtime::core_on_pillar`, `outbox_inline`); with two
/// pillars, on threads of their own.
fn cluster_with(pillars: u32) -> TestCluster {
    let fsync = if pillars == 1 { "off" } else { "batch" };
    TestCluster::new_service_in_range(
        6_000,
        10,
        OrderingMode::Cop,
        pillars,
        2,
        ServiceSpec {
            fsync,
            ..ServiceSpec::default()
        },
        |_| {},
    )
}

fn data_dir(c: &TestCluster, r: usize) -> PathBuf {
    c.path().join(format!("data/replica-{r}"))
}

/// Put `count` keys `prefix-i` with values of `value_bytes` bytes through
/// client 0, 16 at a time; what was acknowledged.
async fn put_many(c: &TestCluster, prefix: &str, count: usize, value_bytes: usize) -> HashMap<Bytes, Bytes> {
    let client = std::sync::Arc::new(c.client(0).await);
    let mut tasks = Vec::new();
    for lane in 0..16 {
        let client = client.clone();
        let prefix = prefix.to_string();
        tasks.push(tokio::spawn(async move {
            let mut acked = HashMap::new();
            for i in (lane..count).step_by(16) {
                let k = Bytes::from(format!("{prefix}-{i}"));
                let mut v = format!("v{i}-").into_bytes();
                v.resize(value_bytes, b'x');
                let v = Bytes::from(v);
                if client.invoke(KvOp::put(k.clone(), v.clone())).await.is_ok() {
                    acked.insert(k, v);
                }
            }
            acked
        }));
    }
    let mut all = HashMap::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

#[test]
fn a_corrupt_database_stops_the_replica_with_a_clear_message_and_wiping_it_recovers() {
    let mut c = cluster();
    c.wait_up(&[0, 1, 2, 3], Duration::from_secs(20));
    let rt = rt();
    let mut acked = rt.block_on(put_many(&c, "before", 200, 64));
    c.kill(3);
    // Garbage over the database's pages (its header stays): what a bad disk
    // or a stray `dd` leaves behind.
    let file = data_dir(&c, 3).join("chorus.redb");
    let len = std::fs::metadata(&file).unwrap().len();
    let mut bytes = std::fs::read(&file).unwrap();
    let mut x: u32 = 0x9e37_79b9;
    for b in bytes.iter_mut().skip(4096) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    std::fs::write(&file, &bytes).unwrap();
    assert_eq!(std::fs::metadata(&file).unwrap().len(), len);
    // And a flipped byte early in the write-ahead log (what the tables do
    // not hold yet): damage with whole frames after it is no torn tail.
    // Whichever holds the records since the last checkpoint, the damage
    // is found.
    for seg in std::fs::read_dir(data_dir(&c, 3).join("wal")).unwrap() {
        let seg = seg.unwrap().path();
        let mut bytes = std::fs::read(&seg).unwrap();
        if bytes.len() > 40 {
            bytes[32] ^= 0x5a;
            std::fs::write(&seg, &bytes).unwrap();
        }
    }

    let started = Instant::now();
    c.start(3);
    let status = c
        .wait_exit(3, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("replica 3 kept running on a corrupt database; log:\n{}", c.log(3)));
    assert!(!status.success(), "exit status {status}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let log = c.log(3);
    eprintln!("replica 3 said:\n{}", common::tail(&log, 3));
    assert!(log.contains("corrupt"), "{log}");
    assert!(
        log.contains(&file.display().to_string()),
        "the message names the file:\n{log}"
    );
    assert!(
        log.contains("state transfer"),
        "the message says how to recover:\n{log}"
    );
    assert!(!log.contains("panicked"), "a clear error, not a panic:\n{log}");

    // The advice works: wipe the directory, restart, state transfer rebuilds it.
    acked.extend(rt.block_on(put_many(&c, "during", 200, 64)));
    std::fs::remove_dir_all(data_dir(&c, 3)).unwrap();
    c.start(3);
    c.wait_up(&[3], Duration::from_secs(20));
    acked.extend(rt.block_on(put_many(&c, "after", 200, 64)));
    c.wait_converged(Duration::from_secs(60));
    rt.block_on(common::check_readable(&c, 1, &acked, 1));
}

/// A tmpfs mounted over a directory for the test's lifetime.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, bytes: u64) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}")])
            .arg("tmpfs")
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

#[test]
fn a_full_file_system_stops_the_replica_with_a_clear_message_and_nothing_acknowledged_is_lost() {
    full_file_system_stops_the_replica(2);
}

/// The same when the failing write runs on the pillar thread that hosts the
/// core and its outbox stage (`fsync = off`): the pillar stops the replica
/// with the store's message.
#[test]
fn a_full_file_system_stops_a_replica_whose_core_runs_on_its_pillar() {
    full_file_system_stops_the_replica(1);
}

fn full_file_system_stops_the_replica(pillars: u32) {
    if !is_root() {
        eprintln!("skipped: mounting a small tmpfs as the data directory needs root");
        return;
    }
    let mut c = cluster_with(pillars);
    c.kill(3);
    let dir = data_dir(&c, 3);
    let _ = std::fs::remove_dir_all(&dir);
    // Room for the fresh database (redb preallocates ~3.6 MB) and a little more.
    let Some(_tmpfs) = Tmpfs::mount(&dir, 6 << 20) else {
        eprintln!("skipped: cannot mount a tmpfs here (mount -t tmpfs failed)");
        return;
    };
    c.start(3);
    c.wait_up(&[0, 1, 2, 3], Duration::from_secs(20));
    let rt = rt();
    // Every stable checkpoint stores the whole key-value state: 16 MB of
    // values overflow 6 MB soon.
    let mut acked = HashMap::new();
    let mut round = 0;
    let load_started = Instant::now();
    while c.alive(3) {
        assert!(
            load_started.elapsed() < Duration::from_secs(120),
            "replica 3 is still alive on a full file system; log:\n{}",
            common::tail(&c.log(3), 30)
        );
        acked.extend(rt.block_on(put_many(&c, &format!("fill{round}"), 256, 16 << 10)));
        round += 1;
    }
    let status = c.wait_exit(3, Duration::from_secs(5)).expect("replica 3 exited");
    assert_eq!(
        status.code(),
        Some(5),
        "fatal errors exit with code 5; log:\n{}",
        c.log(3)
    );
    let log = c.log(3);
    eprintln!("replica 3 said:\n{}", common::tail(&log, 3));
    let (host, thread) = if pillars == 1 {
        ("core on pillar 0 (outbox inline)", "chorus-pillar-0")
    } else {
        ("core on its own thread", "chorus-outbox")
    };
    assert!(log.contains(host), "ran with the {host}:\n{log}");
    assert!(
        log.contains(&format!("fatal error in thread {thread}")),
        "the failing write ran on {thread}:\n{log}"
    );
    assert!(log.contains("full"), "the message says the disk is full:\n{log}");
    assert!(log.contains(&dir.display().to_string()), "and where:\n{log}");
    // The rest of the cluster keeps serving and lost nothing it acknowledged.
    acked.extend(rt.block_on(put_many(&c, "after", 200, 64)));
    assert!(
        acked.len() >= 200,
        "the cluster keeps serving, acked {}",
        acked.len()
    );
    rt.block_on(common::check_readable(&c, 1, &acked, 1));
}
