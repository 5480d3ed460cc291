//! Starting a replica process: storage, executor, core, pillars, metrics.

use crate::channels::*;
use crate::core_thread::CoreThread;
use crate::driver::{Downstream, Driver};
use crate::exec_thread::ExecThread;
use crate::metrics::Metrics;
use crate::node_config::LoadedNode;
use crate::outbox_thread::{OutboxStage, OutboxThread, OUTBOX_CHANNEL_CAP};
use crate::pillar::PillarThread;
use crate::status::CoreStatus;
use anyhow::{bail, Context, Result};
use chorus_exec::Executor;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

/// The service options a replica config asks for.
pub fn service_options(node: &crate::node_config::NodeConfig) -> Result<chorus_apps::ServiceOptions> {
    let mut opts = chorus_apps::ServiceOptions::parse(&node.service_options).map_err(anyhow::Error::msg)?;
    opts.sleep_us = node.sleep_us;
    opts.buckets = node.sleep_buckets;
    Ok(opts)
}

/// The service a replica config names, built from `registry`.
pub fn named_service(
    registry: &chorus_apps::ServiceRegistry,
    node: &crate::node_config::NodeConfig,
) -> Result<Arc<dyn chorus_exec::Service>> {
    registry
        .build(&node.service, &service_options(node)?)
        .map_err(anyhow::Error::msg)
}

/// The executor for this cluster's mode around `service`: `sarek` runs the
/// partitioned executor on the per-partition streams whatever `executor`
/// says; otherwise sequential or parallel, per the config.
pub fn executor_for(
    node: &crate::node_config::NodeConfig,
    config: &chorus_core::ClusterConfig,
    service: Arc<dyn chorus_exec::Service>,
    max_inflight: u32,
) -> Result<Box<dyn Executor>> {
    let service: Arc<dyn chorus_exec::Service> = if node.check_access {
        // Production checked mode fails stop at the first undeclared access:
        // carrying on would let this replica's state drift from the others'.
        Arc::new(chorus_exec::CheckedService::new(
            service,
            chorus_exec::OnViolation::Panic,
        ))
    } else {
        service
    };
    if config.params.mode == chorus_core::OrderingMode::Sarek {
        return Ok(Box::new(chorus_exec::partitioned::SarekExecutor::new(
            service,
            config.lanes() as u16,
            config.checkpoint_slots_per_lane(),
            max_inflight,
        )));
    }
    let mut executor: Box<dyn Executor> = match node.executor.as_str() {
        "sequential" => Box::new(chorus_exec::SequentialExecutor::new(service, max_inflight)),
        "parallel" => Box::new(chorus_parallel::ParallelExecutor::new(
            service,
            node.workers.max(1),
            4_096,
            max_inflight,
        )),
        other => bail!("unknown executor {other:?} (expected sequential or parallel)"),
    };
    // RCC §III-E: the executor runs SWITCHINSTANCE requests as system ops.
    if let Some(p) = chorus_core::SwitchPolicy::of(config) {
        if !executor.set_switch_policy(p) {
            bail!(
                "executor {:?} cannot run RCC SWITCHINSTANCE requests, which mode rcc needs",
                node.executor
            );
        }
    }
    Ok(executor)
}

/// sarek: PREDICT() for the ordering core, from the service's access sets
/// (they depend on the operation only, so any instance of it will do).
fn sarek_predictor(
    config: &chorus_core::ClusterConfig,
    service: Arc<dyn chorus_exec::Service>,
) -> Option<chorus_order::sarek::Predictor> {
    if config.params.mode != chorus_core::OrderingMode::Sarek {
        return None;
    }
    let k = config.lanes() as u16;
    Some(chorus_order::sarek::Predictor::new(Arc::new(
        move |op: &[u8]| {
            chorus_exec::partitioned::predict(&service.access(op), k)
                .partitions()
                .iter()
                .map(|p| p.0)
                .collect()
        },
    )))
}

fn bind(host: &str, port: u16) -> Result<std::net::TcpListener> {
    std::net::TcpListener::bind((host, port)).with_context(|| format!("binding {host}:{port}"))
}

/// Run a replica of the built-in service its config names until SIGINT/SIGTERM.
pub fn run_replica(loaded: LoadedNode) -> Result<()> {
    run_replica_in(&chorus_apps::ServiceRegistry::builtin(), loaded)
}

/// Run a replica of the service its config names, looked up in `registry`.
pub fn run_replica_in(registry: &chorus_apps::ServiceRegistry, loaded: LoadedNode) -> Result<()> {
    let service = named_service(registry, &loaded.node)?;
    run_replica_with(loaded, service)
}

/// Run a replica of `service` (an application's own; the config's `service`
/// name is not consulted) until SIGINT/SIGTERM. The embedding entry point:
/// `run_replica_with(load_node(path)?, Arc::new(MyService::new()))`.
pub fn run_replica_with(loaded: LoadedNode, service: Arc<dyn chorus_exec::Service>) -> Result<()> {
    let max_inflight = loaded.cluster.params.pool_max_per_client;
    let executor = executor_for(&loaded.node, &loaded.cluster, service.clone(), max_inflight)?;
    let predictor = sarek_predictor(&loaded.cluster, service);
    run_replica_parts(loaded, executor, predictor)
}

/// Run a replica around a ready executor (and, in sarek, PREDICT()).
fn run_replica_parts(
    loaded: LoadedNode,
    mut executor: Box<dyn Executor>,
    predictor: Option<chorus_order::sarek::Predictor>,
) -> Result<()> {
    let LoadedNode {
        node,
        cluster,
        identity,
        data_dir,
    } = loaded;
    tune_malloc();
    let config = Arc::new(cluster);
    let me = node.id;
    let info = config.replica(me).context("replica not in cluster")?.clone();
    let pillars = config.params.pillars as usize;
    // Validate and bind before creating anything on disk: a start that
    // fails (bad setting, port in use) leaves no data directory behind.
    let fsync: chorus_store::FsyncPolicy = node.fsync.parse().map_err(|e| anyhow::anyhow!("fsync: {e}"))?;
    let peer_listeners: Vec<_> = (0..pillars)
        .map(|p| bind(&info.host, info.peer_base_port + p as u16))
        .collect::<Result<_>>()?;
    let client_listener = bind(&info.host, info.client_port)?;
    std::fs::create_dir_all(&data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
    let (store, records) = crate::storage::open(&data_dir, fsync, config.lanes())?;
    let metrics = Arc::new(Metrics::default());
    let net_counters = Arc::new(chorus_net::Counters::default());
    let (fatal_tx, mut fatal_rx) = crate::fatal::channel();

    let (core_tx, core_rx) = mpsc::channel(CORE_CHANNEL_CAP);
    let (exec_core_tx, exec_core_rx) = mpsc::unbounded_channel();
    let (exec_tx, exec_rx) = crate::queue::bounded(EXEC_CHANNEL_CAP);
    // The parallel executor's workers wake the execution thread when results
    // are ready, so replies leave at once instead of at the next poll.
    let poker = exec_tx.poker();
    executor.set_results_waker(Arc::new(move || poker.poke()));
    let (status_tx, status_rx) = watch::channel(CoreStatus::default());
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let mut pillar_txs = Vec::new();
    let mut pillar_rxs = Vec::new();
    for _ in 0..pillars {
        let (tx, rx) = mpsc::channel(PILLAR_CHANNEL_CAP);
        pillar_txs.push(tx);
        pillar_rxs.push(rx);
    }

    // One clock origin for the core and every lane group (`Driver`).
    let start = std::time::Instant::now();
    let mut initial = chorus_order::Outbox::new();
    let mut replica = crate::core_thread::build_replica(
        &config,
        me,
        &identity,
        records,
        predictor.clone(),
        chorus_core::Millis(0),
        &mut initial,
    );
    let lanes_on_pillars = crate::lane_split::lanes_on_pillars(&config);
    let pieces = if lanes_on_pillars {
        crate::lane_split::split(&mut replica, chorus_core::Millis(0), &mut initial)
    } else {
        Vec::new()
    };
    // Lane groups on their pillars write through the stage's queue too (it
    // is the one writer of the store, and a store that stalls stalls only
    // its thread, not a pillar's connections), so the stage has a thread
    // of its own; the hub has one too unless `CHORUS_CORE_THREAD=pillar`
    // puts it on pillar 0 (docs/decisions.md "Lane groups on their
    // pillars' threads").
    let hosted = core_on_pillar(&config);
    let inline = hosted && !lanes_on_pillars && outbox_inline(fsync);
    let stage = OutboxStage::new(
        store,
        pillar_txs.clone(),
        exec_tx.clone(),
        metrics.clone(),
        chorus_core::Limits::from_config(&config),
        inline,
    );
    let mut outbox_handle = None;
    let mut stage_queue = None;
    let downstream = if inline {
        Downstream::Inline(Box::new(stage))
    } else {
        let (outbox_tx, outbox_rx) = crate::queue::bounded(OUTBOX_CHANNEL_CAP);
        let outbox = OutboxThread {
            stage,
            input: outbox_rx,
        };
        outbox_handle = Some(crate::fatal::spawn(
            "chorus-outbox",
            fatal_tx.clone(),
            shutdown_rx.clone(),
            move || outbox.run(),
        )?);
        stage_queue = Some(outbox_tx.clone());
        if hosted {
            Downstream::thread_from_pillar(outbox_tx)
        } else {
            Downstream::thread(outbox_tx)
        }
    };
    // The replica's first round (recovery's view records and messages, the
    // hub's timers) is queued to the stage before any lane group exists,
    // let alone a thread that could send on the strength of it
    // (persist-before-send across the hub and the lane groups; a group's
    // task needs the proof, `FirstRoundQueued`).
    let mut driver = Driver::new(downstream, start);
    let first_round = driver.perform_first_round(&mut initial)?;
    // Each lane group's task, for its pillar (empty unless split).
    let mut group_txs = Vec::new();
    let mut group_status = Vec::new();
    let mut piece_tasks: Vec<Option<crate::piece_task::PieceTask>> = Vec::new();
    for (piece, piece_initial) in pieces {
        let (tx, rx) = mpsc::channel(PIECE_CHANNEL_CAP);
        let (status_tx, status_rx) = watch::channel(piece.status_part());
        let queue = stage_queue
            .clone()
            .context("lane groups on their pillars need the outbox stage on its own thread")?;
        group_txs.push(tx);
        group_status.push(status_rx);
        piece_tasks.push(Some(crate::piece_task::PieceTask {
            piece,
            initial: piece_initial,
            input: rx,
            hub: core_tx.clone(),
            driver: Driver::new(Downstream::thread_from_pillar(queue), start),
            status: status_tx,
            shutdown: shutdown_rx.clone(),
            first_round,
        }));
    }
    drop(stage_queue);
    if lanes_on_pillars && piece_tasks.len() != pillars {
        bail!("{} lane groups for {pillars} pillars", piece_tasks.len());
    }
    metrics.lane_groups_on_pillars.set(piece_tasks.len() as i64);
    let core = CoreThread {
        replica,
        driver,
        input: core_rx,
        from_exec: exec_core_rx,
        status: status_tx,
        metrics: metrics.clone(),
        shutdown: shutdown_rx.clone(),
        groups: group_txs.clone(),
        group_status,
    };
    let (mut hosted_core, mut core_handle) = (None, None);
    if hosted {
        hosted_core = Some(core);
    } else {
        core_handle = Some(crate::fatal::spawn(
            "chorus-core",
            fatal_tx.clone(),
            shutdown_rx.clone(),
            move || core.run(),
        )?);
    }

    let exec = ExecThread {
        config: config.clone(),
        me,
        executor,
        input: exec_rx,
        pillars: pillar_txs.clone(),
        core: exec_core_tx,
        core_status: status_rx.clone(),
        metrics: metrics.clone(),
        outgoing: Vec::new(),
    };
    crate::fatal::spawn("chorus-exec", fatal_tx.clone(), shutdown_rx.clone(), move || {
        exec.run();
        Ok(())
    })?;

    let mut client_listener = Some(client_listener);
    let gates = crate::pillar::Gates::for_config(&config);
    for (p, (rx, listener)) in pillar_rxs.into_iter().zip(peer_listeners).enumerate() {
        let pillar = PillarThread {
            index: p,
            config: config.clone(),
            me,
            identity: identity.clone(),
            input: rx,
            core: core_tx.clone(),
            exec: exec_tx.clone(),
            metrics: metrics.clone(),
            peer_listener: listener,
            client_listener: if p == 0 { client_listener.take() } else { None },
            all_pillars: pillar_txs.clone(),
            shutdown: shutdown_rx.clone(),
            counters: net_counters.clone(),
            gates: gates.clone(),
            core_status: status_rx.clone(),
            hosted_core: if p == 0 { hosted_core.take() } else { None },
            lane_group: piece_tasks.get_mut(p).and_then(Option::take),
            lane_groups: group_txs.clone(),
            predictor: predictor.clone(),
        };
        let handle = crate::fatal::spawn(
            &format!("chorus-pillar-{p}"),
            fatal_tx.clone(),
            shutdown_rx.clone(),
            move || pillar.run(),
        )?;
        if p == 0 && hosted {
            // It owns the core and its store: joined at shutdown.
            core_handle = Some(handle);
        }
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let fatal = rt.block_on(async {
        if info.metrics_port != 0 {
            let m = metrics.clone();
            // Loopback unless the operator opens it (issue 16 finding 6).
            let host = node.metrics_host.clone();
            tokio::spawn(async move {
                if let Err(e) = crate::metrics::serve(m, host, info.metrics_port).await {
                    tracing::warn!(error = %e, "metrics endpoint unavailable");
                }
            });
        }
        eprintln!(
            "replica {me} up: {} mode, {} pillar(s), core {}, peers on {}:{}.., clients on {}:{}",
            format!("{:?}", config.params.mode).to_lowercase(),
            pillars,
            match (hosted, inline, lanes_on_pillars) {
                (true, _, true) => "on pillar 0, lanes on their pillars",
                (true, true, _) => "on pillar 0 (outbox inline)",
                (true, false, _) => "on pillar 0 (outbox on its own thread)",
                (false, _, true) => "on its own thread, lanes on their pillars",
                _ => "on its own thread",
            },
            info.host,
            info.peer_base_port,
            info.host,
            info.client_port
        );
        tokio::select! {
            () = wait_for_signal() => None,
            f = fatal_rx.recv() => f,
        }
    });
    if let Some(f) = fatal {
        // Fail-stop at once: no orderly shutdown of a replica whose thread
        // died (the store is crash-safe; persist-before-send held up to here).
        // Marked as stopping only so the other threads, seeing their
        // channels close as the process ends, do not report it as theirs.
        let _ = shutdown_tx.send(true);
        return Err(f.into());
    }
    let _ = shutdown_tx.send(true);
    // The core's thread, or the pillar that hosts it (and its store).
    if let Some(h) = core_handle {
        let _ = h.join();
    }
    // The core's end closes the outbox stage's queue (the groups' senders
    // go with their pillars); the stage writes what is left and stops. A
    // failure there is fatal too.
    if let Some(h) = outbox_handle {
        let _ = h.join();
    }
    match fatal_rx.try_recv() {
        Ok(f) => Err(f.into()),
        Err(_) => Ok(()),
    }
}

/// Whether the protocol core and its outbox stage run on pillar 0's thread
/// (COP §4: the normal case of a request never leaves its pillar) rather
/// than on threads of their own. With one pillar every lane belongs to
/// pillar 0, so it hosts them: no thread hop between reading a message,
/// ordering it and writing what follows (docs/decisions.md "The core on
/// its pillar"). With more pillars the lanes' consensus still runs on one
/// core thread until the lane split lands (issue 13 item 1).
/// `CHORUS_CORE_THREAD=own|pillar` overrides this for measurements.
fn core_on_pillar(config: &chorus_core::ClusterConfig) -> bool {
    match std::env::var("CHORUS_CORE_THREAD").as_deref() {
        Ok("own") => false,
        Ok("pillar") => true,
        Ok(other) => {
            tracing::warn!(
                value = other,
                "CHORUS_CORE_THREAD is own or pillar; using the default"
            );
            config.params.pillars == 1
        }
        Err(_) => config.params.pillars == 1,
    }
}

/// Whether a hosted core runs its outbox stage inline too (see
/// `core_on_pillar`). `CHORUS_OUTBOX=inline|thread` overrides it for
/// measurements.
fn outbox_inline(fsync: chorus_store::FsyncPolicy) -> bool {
    match std::env::var("CHORUS_OUTBOX").as_deref() {
        Ok("inline") => true,
        Ok("thread") => false,
        _ => fsync == chorus_store::FsyncPolicy::Off,
    }
}

/// glibc returns freed memory at the top of each thread's heap to the
/// kernel as soon as it exceeds the trim threshold and takes it back on the
/// next allocation: with batches being allocated and freed all the time that
/// was thousands of `mprotect`/`madvise` calls a second per replica. Keep up
/// to 64 MiB per heap instead (bounded; RSS is reported by `chorus bench`).
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const TRIM_THRESHOLD_BYTES: libc::c_int = 64 << 20;
        const TOP_PAD_BYTES: libc::c_int = 4 << 20;
        // SAFETY: `mallopt` only sets allocator parameters; called before
        // this process starts its threads.
        unsafe {
            libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES);
            libc::mallopt(libc::M_TOP_PAD, TOP_PAD_BYTES);
        }
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
