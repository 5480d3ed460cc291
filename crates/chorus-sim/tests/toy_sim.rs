//! The simulator tested on its own, with `toy::Sequencer`: a fixed-sequencer
//! protocol that is correct under crash and network faults but not Byzantine
//! fault tolerant. It must pass every checker under the faults it tolerates,
//! and the checkers must fire when its sequencer is Byzantine.

use chorus_core::OrderingMode;
use chorus_sim::toy::Sequencer;
use chorus_sim::{run_many_with, run_one_with, FaultKind, FaultSet, SimOptions, ViolationKind};

fn opts(faults: &str) -> SimOptions {
    SimOptions::new(OrderingMode::Pbft, 1, 4).with_faults(faults.parse().unwrap())
}

#[test]
fn toy_passes_under_network_crash_and_client_faults() {
    for (mode, pillars, n) in [(OrderingMode::Pbft, 1, 4), (OrderingMode::Cop, 4, 7)] {
        let o = SimOptions::new(mode, pillars, n)
            .with_faults("network,clients".parse().unwrap())
            .with_seeds(0, 60);
        let s = run_many_with::<Sequencer>(&o, |_| {});
        assert!(s.ok(), "{s}");
        assert_eq!(s.requests_committed, s.requests_issued);
        for kind in [
            "crash",
            "loss",
            "dup",
            "partition-drop",
            "byz-client-bad-auth",
            "byz-client-oversized",
        ] {
            assert!(
                s.counters.faults.get(kind).copied().unwrap_or(0) > 0,
                "{kind} never injected:\n{s}"
            );
        }
    }
}

/// Search seeds (bounded) until one shows `kind`.
fn first_violation(o: &SimOptions, kind: ViolationKind, seeds: u64) -> Option<u64> {
    (0..seeds).find(|&seed| run_one_with::<Sequencer>(o, seed).has(kind))
}

#[test]
fn checkers_catch_a_byzantine_sequencer() {
    let mut o = opts("twins");
    o.byzantine = Some(1);
    // Replica 0 is the sequencer; twins pick Byzantine replicas at random.
    let twin_seed = first_violation(&o, ViolationKind::Agreement, 40).expect("twin sequencer forks");
    let r = run_one_with::<Sequencer>(&o, twin_seed);
    assert!(r.byzantine.iter().any(|b| b.starts_with("r0=")), "{r}");
    assert!(r.replay.contains(&format!("--seed {twin_seed} --seeds 1")));
    assert!(r.replay.contains("--faults twins"), "{}", r.replay);

    let corrupt = opts("corrupt");
    assert!(first_violation(&corrupt, ViolationKind::Agreement, 40).is_some());

    let silent = opts("silent");
    let seed = first_violation(&silent, ViolationKind::Liveness, 40).expect("a silent sequencer stalls");
    assert!(run_one_with::<Sequencer>(&silent, seed).requests_committed == 0);
}

#[test]
fn runs_replay_exactly() {
    let o = opts("all");
    for seed in [3, 17, 99] {
        let a = run_one_with::<Sequencer>(&o, seed);
        let b = run_one_with::<Sequencer>(&o, seed);
        assert_eq!(a.trace, b.trace, "seed {seed} is not deterministic");
        assert_eq!(a.counters, b.counters);
        assert_eq!(a.to_string(), b.to_string());
    }
    let c = run_one_with::<Sequencer>(&o, 4);
    let d = run_one_with::<Sequencer>(&o, 5);
    assert_ne!(c.trace, d.trace);
}

#[test]
fn run_many_is_the_sum_of_its_seeds() {
    let o = opts("network").with_seeds(10, 5);
    let s = run_many_with::<Sequencer>(&o, |_| {});
    assert_eq!(s.seeds_run, 5);
    let singles: u64 = (10..15)
        .map(|seed| run_one_with::<Sequencer>(&o, seed).counters.messages_sent)
        .sum();
    assert_eq!(s.counters.messages_sent, singles);
    let text = s.to_string();
    assert!(text.contains("seeds run          5"), "{text}");
    assert!(text.contains("violations         none"), "{text}");
}

#[test]
fn failures_print_seed_and_replay_command() {
    let o = opts("silent").with_seeds(0, 6);
    let s = run_many_with::<Sequencer>(&o, |_| {});
    assert!(!s.ok());
    let text = s.to_string();
    for r in &s.failures {
        assert!(text.contains(&format!("seed {}: FAILED", r.seed)), "{text}");
        assert!(text.contains(&r.replay), "{text}");
    }
    assert!(text.contains("chorus sim --mode pbft --pillars 1 --n 4 --faults silent --seed"));
}

#[test]
fn fault_set_none_injects_nothing() {
    let o = opts("none").with_seeds(0, 3);
    let s = run_many_with::<Sequencer>(&o, |_| {});
    assert!(s.ok(), "{s}");
    assert!(s.counters.faults.is_empty(), "{s}");
    assert_eq!(FaultSet::none().to_string(), "none");
    assert!(!FaultSet::none().contains(FaultKind::Loss));
}

#[test]
fn custom_executor_factory_builds_every_executor() {
    use chorus_exec::SequentialExecutor;
    use chorus_sim::ExecutorChoice;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    let built = Arc::new(AtomicUsize::new(0));
    let counter = built.clone();
    let mut o = opts("crash");
    o.executor = ExecutorChoice::Custom {
        name: "counted".into(),
        factory: Arc::new(move |service, max_inflight| {
            counter.fetch_add(1, Ordering::SeqCst);
            Box::new(SequentialExecutor::new(service, max_inflight))
        }),
    };
    let r = run_one_with::<Sequencer>(&o, 2);
    assert!(r.ok(), "{r}");
    let restarts = r.counters.notes.get("restart").copied().unwrap_or(0) as usize;
    assert_eq!(built.load(Ordering::SeqCst), 4 + restarts);
    assert!(r.replay.contains("--executor counted"), "{}", r.replay);
}

#[test]
fn torn_crashes_expose_sending_before_persisting() {
    use chorus_sim::toy::SendBeforePersist;
    // A torn crash between the send and the persist makes the restarted
    // sequencer reuse a slot number the others already delivered.
    let o = opts("crash");
    let seed = (0..1_500)
        .find(|&seed| run_one_with::<SendBeforePersist>(&o, seed).has(ViolationKind::Agreement))
        .expect("some torn crash lands between the send and the persist");
    let broken = run_one_with::<SendBeforePersist>(&o, seed);
    assert!(broken.counters.faults.contains_key("torn-crash"), "{broken}");
    // The same seed with persist-before-send passes.
    let fine = run_one_with::<Sequencer>(&o, seed);
    assert!(fine.ok(), "{fine}");
}
