//! Dispel on real processes (issue 11): a 4-replica `dispel` cluster under
//! load loses replica 3 (SIGKILL). There is no view change: the others keep
//! deciding epochs (the dead proposer's binary consensus decides 0, its
//! clients' requests are rescued), it restarts from its DBFT snapshot and
//! logged inputs, catches up, and all digests agree; `chorus status` shows
//! the epochs.

mod common;

use chorus_core::OrderingMode;
use common::{drive_writes, rt, Load, TestCluster};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[test]
fn sigkill_of_a_proposer_costs_only_its_batches_and_it_catches_up() {
    let mut c = TestCluster::new(OrderingMode::Dispel, 1, 4, |p| {
        p.view_change_timeout_ms = 800;
    });
    assert_eq!(c.config.lanes(), 4, "dispel runs one lane per proposer");
    c.wait_up(&[0, 1, 2, 3], Duration::from_secs(20));
    let rt = rt();
    let load = Arc::new(Mutex::new(Load::default()));
    let start = Instant::now();
    let kill_time = start + Duration::from_secs(3);
    let pid = c.pid(3).expect("replica 3 running");
    let killer = std::thread::spawn(move || {
        std::thread::sleep(kill_time.saturating_duration_since(Instant::now()));
        std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .expect("kill");
    });
    rt.block_on(drive_writes(
        &c,
        "dispel",
        4,
        kill_time + Duration::from_secs(5),
        load.clone(),
    ));
    killer.join().unwrap();
    c.kill(3);
    let after_kill = load
        .lock()
        .unwrap()
        .done
        .iter()
        .filter(|t| **t >= kill_time)
        .count();
    assert!(
        after_kill > 100,
        "only {after_kill} writes committed with replica 3 down"
    );
    let s1 = c.status(1).expect("replica 1 up");
    assert!(
        s1["core"]["dispel"]["next_epoch"].as_u64().unwrap_or(0) > 0,
        "status shows the epochs: {s1}"
    );
    assert_eq!(
        s1["core"]["views"].as_array().map(|v| v.len()),
        Some(0),
        "no PBFT lanes, no views"
    );

    c.start(3);
    c.wait_up(&[3], Duration::from_secs(20));
    rt.block_on(drive_writes(
        &c,
        "dispel",
        2,
        Instant::now() + Duration::from_secs(2),
        load.clone(),
    ));
    c.wait_converged(Duration::from_secs(60));
    let acked = std::mem::take(&mut load.lock().unwrap().acked);
    rt.block_on(common::check_readable(&c, 0, &acked, 7));
}
