use crate::status_query::query;
use anyhow::Result;
use std::path::PathBuf;

/// Shown under `chorus status --help`.
pub const LEGEND: &str = "\
Columns (one row per replica; positions are global sequence numbers):
  replica    replica id (r0, r1, ...)
  mode       ordering mode: pbft, cop or rcc
  lanes      parallel consensus lanes (COP pillars, RCC instances)
  delivered  next position the core hands to execution (everything below is decided, in order)
  executed   next position the executor will run (everything below has executed)
  stable     position of the latest stable checkpoint (state transfer and log truncation start here)
  views      current view of each lane; replicas in different views are mid view change
  peers      live connections to other replicas (all pillars)
  clients    live client connections
  state digest  first 16 hex digits of the executed state's digest; equal on replicas at equal 'executed'
A WARNING line follows for each replica whose checkpoint digest disagreed with a stable certificate.
A replica that does not answer within 3 s is shown as unreachable.

Exit status: 0 when at least 2f+1 replicas answered, 4 when fewer did (the cluster cannot make
progress), 1 on other errors (bad config). --json prints one JSON object per answering replica.";

#[derive(clap::Args, Debug)]
#[command(after_help = LEGEND)]
pub struct Args {
    /// A client config file (`client-<i>.toml` from `chorus keygen`).
    #[arg(long)]
    pub config: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let c = chorus_node::node_config::load_client(&a.config)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        if !a.json {
            println!(
                "{:<8} {:<5} {:>5} {:>10} {:>10} {:>10} {:>8} {:>6} {:>7}  state digest",
                "replica", "mode", "lanes", "delivered", "executed", "stable", "views", "peers", "clients"
            );
        }
        let mut answered = 0;
        let mut diverged = Vec::new();
        for r in c.cluster.replica_ids() {
            let reply = query(&c.cluster, c.id, &c.identity, r).await;
            answered += usize::from(reply.is_ok());
            if let Ok(s) = &reply {
                if s.core.state_divergences > 0 {
                    diverged.push((r, s.core.state_divergences));
                }
            }
            match reply {
                Ok(s) if a.json => println!("{}", serde_json::to_string(&s)?),
                Ok(s) => println!(
                    "{:<8} {:<5} {:>5} {:>10} {:>10} {:>10} {:>8} {:>6} {:>7}  {}",
                    r.to_string(),
                    s.mode,
                    s.lanes,
                    s.core.next_delivery,
                    s.executed_seq,
                    s.core.stable_seq,
                    format!("{:?}", s.core.views),
                    s.peer_connections,
                    s.client_connections,
                    &s.state_digest[..16.min(s.state_digest.len())]
                ),
                Err(e) if a.json => eprintln!("{r} unreachable: {e:#}"),
                Err(e) => println!("{:<8} unreachable: {e:#}", r.to_string()),
            }
        }
        if !a.json {
            for (r, n) in &diverged {
                println!(
                    "WARNING: {r}'s state diverged from the certified one at {n} checkpoint(s) \
                     (see its log; the service may be non-deterministic or under-declare its access sets)"
                );
            }
        }
        if !a.json && c.cluster.params.mode == chorus_core::OrderingMode::Rcc {
            print_instances(&c.cluster, c.id, &c.identity).await;
        }
        if !a.json && c.cluster.params.mode == chorus_core::OrderingMode::Dispel {
            print_epochs(&c.cluster, c.id, &c.identity).await;
        }
        if !a.json && c.cluster.params.mode == chorus_core::OrderingMode::Sarek {
            print_partitions(&c.cluster, c.id, &c.identity).await;
        }
        let needed = c.cluster.quorum();
        if answered < needed {
            return Err(crate::exit::Exit {
                code: crate::exit::NO_QUORUM,
                message: format!(
                    "only {answered} of {} replicas answered; the cluster needs {needed} (2f+1) to make progress",
                    c.cluster.n()
                ),
            }
            .into());
        }
        Ok(())
    })
}

/// SAREK: each partition as the first reachable replica sees it: its
/// leader (preferred `k mod n` in view 0), view, delivery-stream position
/// and first undecided slot.
async fn print_partitions(
    cluster: &chorus_core::ClusterConfig,
    id: chorus_core::ClientId,
    identity: &chorus_core::Identity,
) {
    for r in cluster.replica_ids() {
        let Ok(s) = query(cluster, id, identity, r).await else {
            continue;
        };
        println!("\nSAREK partitions as seen by {r}:");
        println!(
            "{:<10} {:>8} {:>10} {:>6} {:>8} {:>10} {:>7} {:<21} state",
            "partition", "leader", "preferred", "view", "stream", "undecided", "queued", "executor head"
        );
        for (k, d) in s.core.lane_detail.iter().enumerate() {
            let lane = chorus_core::LaneId(k as u32);
            let view = s.core.views.get(k).copied().unwrap_or(0);
            let state = if d.view_changing { "view change" } else { "running" };
            let exec = s.partitions.get(k);
            println!(
                "{:<10} {:>8} {:>10} {:>6} {:>8} {:>10} {:>7} {:<21} {state}",
                k,
                format!("r{}", d.proposer),
                cluster.preferred_leader(lane, chorus_core::View(0)).to_string(),
                view,
                d.stream_next.map_or("-".to_string(), |s| s.to_string()),
                d.next_undecided,
                exec.map_or("-".to_string(), |e| (e.pending + e.held_back).to_string()),
                exec.map_or("-", |e| e.head.as_str()),
            );
        }
        return;
    }
}

/// Dispel: each replica's live DBFT epochs, its pipeline depth and the
/// binary-consensus rounds recent epochs needed.
async fn print_epochs(
    cluster: &chorus_core::ClusterConfig,
    id: chorus_core::ClientId,
    identity: &chorus_core::Identity,
) {
    println!("\nDispel epochs:");
    println!(
        "{:<8} {:>10} {:>10} {:>6}  live epochs (epoch: bits decided/n, round)  recent rounds",
        "replica", "next", "spawn", "depth"
    );
    let n = cluster.n();
    for r in cluster.replica_ids() {
        let Ok(s) = query(cluster, id, identity, r).await else {
            continue;
        };
        let Some(d) = s.core.dispel else { continue };
        let live: Vec<String> = d
            .epochs
            .iter()
            .map(|(e, joined, bits, round)| {
                format!(
                    "{e}:{bits}/{n},r{round}{}",
                    if *joined { "" } else { " (not joined)" }
                )
            })
            .collect();
        let rounds: Vec<String> = d
            .decided_rounds
            .iter()
            .map(|(e, r)| format!("{e}:r{r}"))
            .collect();
        println!(
            "{:<8} {:>10} {:>10} {:>6}  [{}]  [{}]",
            r.to_string(),
            d.next_epoch,
            d.next_spawn,
            d.pipeline_depth,
            live.join(" "),
            rounds.join(" ")
        );
    }
}

/// RCC: each instance as the first reachable replica sees it: its round,
/// whether it is running, has a FAILURE out (view change) or is stopped until
/// a round, and the coordinating consensus' view and leader.
async fn print_instances(
    cluster: &chorus_core::ClusterConfig,
    id: chorus_core::ClientId,
    identity: &chorus_core::Identity,
) {
    for r in cluster.replica_ids() {
        let Ok(s) = query(cluster, id, identity, r).await else {
            continue;
        };
        println!("\nRCC instances as seen by {r}:");
        println!(
            "{:<9} {:>8} {:>8} {:>6} {:>12}  state",
            "instance", "primary", "round", "view", "coordinator"
        );
        for (i, d) in s.core.lane_detail.iter().enumerate() {
            let lane = chorus_core::LaneId(i as u32);
            let view = s.core.views.get(i).copied().unwrap_or(0);
            let state = match (d.view_changing, d.stopped_until) {
                (true, _) => "FAILURE sent, awaiting stop".to_string(),
                (false, Some(until)) => format!("stopped until round {until} (proposer r{})", d.proposer),
                (false, None) => "running".to_string(),
            };
            let coordinator = if view == 0 {
                "-".to_string()
            } else {
                format!("r{}", d.new_view_primary)
            };
            println!(
                "{:<9} {:>8} {:>8} {:>6} {:>12}  {state}",
                i,
                cluster.instance_primary(lane).to_string(),
                d.next_undecided,
                view,
                coordinator
            );
        }
        return;
    }
}
