//! A custom replicated service in a local 4-replica Chorus cluster.
//! `incr <name>` adds 1 to a named counter and returns it, `get <name>` reads
//! it. Access sets tell the parallel executor that operations on different
//! counters commute (CBASE §4). Run: `cargo run -p chorus-example-custom-service`.
use bytes::Bytes;
use chorus_exec::{Access, ExecContext, Service};
use std::collections::BTreeMap;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Counters(Mutex<BTreeMap<String, u64>>);

impl Service for Counters {
    fn execute(&self, op: &[u8], _ctx: &ExecContext) -> Bytes {
        let text = String::from_utf8_lossy(op);
        let mut m = self.0.lock().unwrap();
        let v = match text.split_once(' ') {
            Some(("incr", name)) => *m.entry(name.to_string()).and_modify(|c| *c += 1).or_insert(1),
            Some(("get", name)) => m.get(name).copied().unwrap_or(0),
            _ => return Bytes::from_static(b"bad op"),
        };
        Bytes::from(v.to_string())
    }
    fn access(&self, op: &[u8]) -> Access {
        let text = String::from_utf8_lossy(op);
        let (verb, name) = text.split_once(' ').unwrap_or(("", ""));
        let key = vec![Bytes::from(name.to_string())];
        match verb {
            "incr" => Access::Keys { reads: key.clone(), writes: key },
            "get" => Access::Keys { reads: key, writes: vec![] },
            _ => Access::Everything,
        }
    }
    fn is_read_only(&self, op: &[u8]) -> bool {
        op.starts_with(b"get ")
    }
    fn snapshot(&self) -> Bytes {
        // Canonical: a BTreeMap lists its counters in one order everywhere.
        let m = self.0.lock().unwrap();
        Bytes::from(m.iter().map(|(k, v)| format!("{k}={v}\n")).collect::<String>())
    }
    fn restore(&self, snapshot: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(snapshot).map_err(|e| e.to_string())?;
        let mut m = BTreeMap::new();
        for line in text.lines() {
            let (k, v) = line.split_once('=').ok_or("bad snapshot line")?;
            m.insert(k.to_string(), v.parse().map_err(|_| "bad count")?);
        }
        *self.0.lock().unwrap() = m;
        Ok(())
    }
}

struct Replicas(Vec<Child>);
impl Drop for Replicas {
    fn drop(&mut self) {
        self.0.iter_mut().for_each(|c| drop((c.kill(), c.wait())));
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 3 && args[1] == "replica" {
        let loaded = chorus_node::node_config::load_node(args[2].as_ref())?;
        return chorus_node::runtime::run_replica_with(loaded, Arc::new(Counters::default()));
    }
    let dir = tempfile::tempdir()?;
    let base_port = std::env::var("BASE_PORT").map_or(Ok(17_000), |p| p.parse())?;
    chorus_node::keygen::keygen(&chorus_node::keygen::KeygenOptions {
        out: dir.path().into(),
        base_port,
        service: "null".into(), // a built-in name for the config; the replicas run Counters
        executor: "parallel".into(),
        ..Default::default()
    })?;
    let me = std::env::current_exe()?;
    let _replicas = Replicas(
        (0..4)
            .map(|i| {
                Command::new(&me).arg("replica").arg(dir.path().join(format!("replica-{i}.toml"))).spawn()
            })
            .collect::<Result<_, _>>()?,
    );
    let c = chorus_node::node_config::load_client(&dir.path().join("client-0.toml"))?;
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
        let opts = chorus_client::ClientOptions::default();
        let client = chorus_client::Client::connect(c.cluster.into(), c.id, c.identity, opts).await?;
        for fruit in ["apples", "pears", "apples"] {
            let n = client.invoke(format!("incr {fruit}")).await?;
            println!("incr {fruit} -> {}", String::from_utf8_lossy(&n));
        }
        let n = client.invoke_read_only("get apples").await?;
        println!("apples = {}", String::from_utf8_lossy(&n));
        Ok(())
    })
}
