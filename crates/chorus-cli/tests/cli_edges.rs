//! Issue 14 item 4: the CLI and config rough edges a new user hit, each
//! checked against the real `chorus` binary.

mod common;

use chorus_core::{ClusterConfig, Identity, OrderingMode, ProtocolParams};
use chorus_node::keygen::{keygen, KeygenOptions};
use chorus_node::node_config::KeyFile;
use common::TestCluster;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn chorus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chorus"))
        .args(args)
        .env("CHORUS_LOG", "warn")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A cluster directory written by keygen, no process started.
fn cluster_dir(base_port: u16) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("chorus-cli-").tempdir().unwrap();
    keygen(&KeygenOptions {
        out: dir.path().to_path_buf(),
        n: 4,
        clients: 2,
        hosts: vec!["127.0.0.1".into()],
        base_port,
        params: ProtocolParams::default(),
        service: "kv".into(),
        executor: "sequential".into(),
        workers: 1,
        fsync: "batch".into(),
        sleep_us: 0,
        sleep_buckets: 1,
        service_options: String::new(),
    })
    .unwrap();
    dir
}

/// A base port whose replica 0 ports are free (below the ranges the other
/// test binaries use, and below the ephemeral range).
fn free_base() -> u16 {
    let start = 1_100 + (std::process::id() % 8) as u16 * 100;
    (start..1_990)
        .step_by(7)
        .find(|b| {
            [0u16, 1, 2, 90, 91]
                .iter()
                .all(|o| std::net::TcpListener::bind(("127.0.0.1", b + o)).is_ok())
        })
        .expect("a free base port")
}

#[test]
fn misspelt_keys_in_replica_and_cluster_files_are_refused_naming_the_key() {
    let dir = cluster_dir(free_base());
    let replica = dir.path().join("replica-0.toml");
    let original = std::fs::read_to_string(&replica).unwrap();
    std::fs::write(&replica, original.replace("fsync = ", "fsycn = ")).unwrap();
    let o = chorus(&["replica", "--config", p(&replica)]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("unknown field `fsycn`"), "{out}");
    assert!(out.contains("`fsync`"), "the valid keys are listed: {out}");
    assert!(out.contains("replica-0.toml"), "the file is named: {out}");
    assert!(!dir.path().join("data/replica-0").exists(), "nothing created");

    std::fs::write(&replica, original).unwrap();
    let cluster = dir.path().join("cluster.toml");
    let text_ = std::fs::read_to_string(&cluster).unwrap();
    std::fs::write(
        &cluster,
        text_.replace("view_change_timeout_ms", "view_chnge_timeout_ms"),
    )
    .unwrap();
    let o = chorus(&["replica", "--config", p(&replica)]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("view_chnge_timeout_ms"), "{out}");
    assert!(out.contains("`view_change_timeout_ms`"), "{out}");
    assert!(out.contains("line"), "says where: {out}");
}

#[test]
fn a_replica_whose_port_is_taken_fails_before_creating_its_data_directory() {
    let dir = cluster_dir(free_base());
    let config: ClusterConfig =
        toml::from_str(&std::fs::read_to_string(dir.path().join("cluster.toml")).unwrap()).unwrap();
    let info = &config.replicas[0];
    let _taken = std::net::TcpListener::bind(("127.0.0.1", info.client_port))
        .expect("the client port is free before the test takes it");
    let o = chorus(&["replica", "--config", p(&dir.path().join("replica-0.toml"))]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!("binding 127.0.0.1:{}", info.client_port)),
        "{out}"
    );
    assert!(
        !dir.path().join("data").exists(),
        "a failed start left a data directory behind"
    );
}

/// `chorus bench --target` against a cluster running another service than
/// `--service` (which defaults to `kv`) is refused, naming both, before it
/// connects: it used to preload `kv` records into a `null` cluster and
/// drive `kv` operations there.
#[test]
fn bench_refuses_a_workload_for_another_service_than_the_clusters() {
    let dir = cluster_dir(free_base());
    let o = chorus(&[
        "bench",
        "--target",
        p(dir.path()),
        "--service",
        "null",
        "--duration",
        "1",
    ]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(
        t.contains("runs service \"kv\"") && t.contains("not \"null\"") && t.contains("--service kv"),
        "{t}"
    );
}

#[test]
fn status_help_explains_its_columns_and_exit_codes() {
    let o = chorus(&["status", "--help"]);
    let out = text(&o);
    assert!(o.status.success());
    for col in [
        "delivered",
        "executed",
        "stable",
        "views",
        "peers",
        "clients",
        "state digest",
    ] {
        assert!(out.contains(&format!("  {col}")), "legend lacks {col}: {out}");
    }
    assert!(out.contains("2f+1"), "{out}");
    let o = chorus(&["kv", "--help"]);
    assert!(text(&o).contains("3 when the key does not exist"), "{}", text(&o));
}

/// A copy of the cluster's client files for client 1 in `dir`, after `edit`
/// changed the cluster file; returns the client file and writes `key` as
/// its key (listed in the copied cluster file).
fn client_copy(
    c: &TestCluster,
    dir: &Path,
    key: &Identity,
    edit: impl FnOnce(&mut ClusterConfig),
) -> PathBuf {
    let mut config = (*c.config).clone();
    config.clients[1].identity = key.public();
    edit(&mut config);
    std::fs::create_dir_all(dir.join("keys")).unwrap();
    std::fs::write(dir.join("cluster.toml"), toml::to_string(&config).unwrap()).unwrap();
    let key_path = dir.join("keys/client-1.key");
    std::fs::write(&key_path, toml::to_string(&KeyFile::from_identity(key)).unwrap()).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let file = dir.join("client-1.toml");
    std::fs::write(
        &file,
        "id = 1\ncluster_file = \"cluster.toml\"\nkey_file = \"keys/client-1.key\"\n",
    )
    .unwrap();
    file
}

#[test]
fn on_a_live_cluster_status_kv_and_bench_behave_as_documented() {
    let mut c = TestCluster::new_in_range(10_000, 5, OrderingMode::Cop, 2, 2, |_| {});
    c.wait_up(&[0, 1, 2, 3], Duration::from_secs(20));
    let client = c.path().join("client-1.toml");
    let kv = |args: &[&str]| {
        let mut all = vec!["kv", "--config", p(&client)];
        all.extend_from_slice(args);
        chorus(&all)
    };

    // status: 0 with every replica up; --json is one object per replica.
    let o = chorus(&["status", "--json", "--config", p(&c.path().join("client-0.toml"))]);
    assert!(o.status.success(), "{}", text(&o));
    let objects: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("every stdout line is JSON"))
        .collect();
    assert_eq!(objects.len(), 4);

    // kv: exit codes 0 / 3, a positional scan limit.
    for k in ["a", "b", "c"] {
        let o = kv(&["put", k, "1"]);
        assert!(o.status.success(), "{}", text(&o));
    }
    let o = kv(&["get", "missing"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("(not found)"));
    assert!(!text(&o).contains("error"), "{}", text(&o));
    let o = kv(&["delete", "missing"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("absent"));
    let o = kv(&["delete", "c"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("existed"));
    let o = kv(&["scan", "a", "1"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).lines().count(),
        1,
        "{}",
        text(&o)
    );
    let o = kv(&["scan", "--limit", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).lines().count(),
        2,
        "{}",
        text(&o)
    );

    // One identity per process: a second holder is refused at once.
    let held = std::fs::File::open(c.path().join("keys/client-1.key")).unwrap();
    held.lock().unwrap();
    let started = Instant::now();
    let o = kv(&["get", "a"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("in use by another process"), "{}", text(&o));
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(held);
    assert!(kv(&["get", "a"]).status.success());

    // A key the replicas do not know: "handshake refused", not "connected to 0 of 4".
    let stale = tempfile::tempdir().unwrap();
    let other = Identity::from_seed(b"client 1 of another keygen run");
    let file = client_copy(&c, &stale.path().join("stale"), &other, |_| {});
    let o = chorus(&["kv", "--config", p(&file), "get", "a"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("handshake refused"), "{}", text(&o));

    // A client port that is an HTTP server: "not a Chorus endpoint".
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let http_port = http.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in http.incoming().flatten() {
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let key = c.client_identity(1);
    let file = client_copy(&c, &stale.path().join("http"), &key, |cfg| {
        for r in cfg.replicas.iter_mut() {
            r.client_port = http_port;
        }
    });
    let o = chorus(&["kv", "--config", p(&file), "get", "a"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("not a Chorus endpoint"), "{}", text(&o));
    assert!(!text(&o).contains("exceeds the limit"), "{}", text(&o));

    // bench --target: no empty cpu/rss columns for replicas it did not start.
    let out = stale.path().join("bench");
    let bench = |load: &[&str]| {
        let mut args = vec![
            "bench",
            "--target",
            p(c.path()),
            "--duration",
            "1",
            "--warmup",
            "0",
        ];
        args.extend_from_slice(load);
        args.extend_from_slice(&["--records", "20", "--out", p(&out)]);
        chorus(&args)
    };
    let o = bench(&["--clients", "1", "--in-flight", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("ops/s"), "{}", text(&o));
    assert!(!text(&o).contains("[]"), "empty columns: {}", text(&o));

    // bench --rate: open loop from the pacer; its lateness is reported and
    // the arrival process recorded with the row.
    let o = bench(&["--clients", "2", "--rate", "300", "--arrivals", "poisson"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("poisson arrivals, sent late p50"),
        "{}",
        text(&o)
    );
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let last = csv.lines().last().unwrap();
    assert!(last.ends_with(",poisson") && last.contains(",300,"), "{csv}");

    // status: exit 4 once fewer than 2f+1 = 3 replicas answer.
    c.kill(2);
    c.kill(3);
    let o = chorus(&["status", "--config", p(&c.path().join("client-0.toml"))]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(text(&o).contains("only 2 of 4 replicas answered"), "{}", text(&o));
}

/// `chorus sim --perf --out`: the resource model's runs in `chorus bench`'s
/// CSV/JSON/PNG format (issue 15), so they plot beside measured ones; and
/// `--perf` refuses fault runs.
#[test]
fn sim_perf_writes_bench_format_results_and_refuses_faults() {
    let dir = tempfile::tempdir().unwrap();
    let out = chorus(&[
        "sim",
        "--mode",
        "cop",
        "--pillars",
        "2",
        "--service",
        "null",
        "--n",
        "4",
        "--faults",
        "none",
        "--perf",
        "--cores",
        "4",
        "--consensus-on-pillars",
        "--clients",
        "8",
        "--window",
        "8",
        "--requests",
        "50",
        "--fault-window-ms",
        "1",
        "--liveness-ms",
        "600000",
        "--seeds",
        "1",
        "--out",
        p(dir.path()),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("perf (mean of 1 seeds) throughput"),
        "{}",
        text(&out)
    );
    let csv = std::fs::read_to_string(dir.path().join("results.csv")).unwrap();
    assert!(csv.starts_with("unix_time,name,label,"), "{csv}");
    assert!(
        csv.lines()
            .nth(1)
            .unwrap()
            .contains("sim cop p2,model 4cores on-pillars"),
        "{csv}"
    );
    // Columns say how prepares were authenticated, whether clients sent to
    // the primary first and asked few replicas for replies (the defaults),
    // and no arrival process (a closed loop).
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    assert_eq!(header.len(), row.len(), "{csv}");
    let col = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
    assert_eq!(
        (
            col("prepare_auth"),
            col("leader_first"),
            col("few_replies"),
            col("arrivals")
        ),
        ("signature", "true", "true", ""),
        "{csv}"
    );
    assert!(dir.path().join("plot.png").exists());
    let refused = chorus(&[
        "sim", "--mode", "pbft", "--faults", "all", "--perf", "--seeds", "1",
    ]);
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("--perf measures a healthy cluster"),
        "{}",
        text(&refused)
    );
}
