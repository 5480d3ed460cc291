//! The dependency graph against a brute-force model of CBASE's partial-order
//! property (§4.1): at every moment, the requests the graph offers as ready
//! are exactly the undispatched pending requests with no earlier pending
//! request that conflicts with them, and `next_ready` picks the oldest (the
//! fairness property).

use bytes::Bytes;
use chorus_exec::{conflicts, Access, DependencyGraph, Full, NodeId};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Step {
    Insert(Access),
    Dispatch,
    /// Complete the running request at this index (modulo the running count).
    Complete(usize),
}

fn key(k: u8) -> Bytes {
    Bytes::from(vec![k])
}

fn access(keys: u8) -> impl Strategy<Value = Access> {
    prop_oneof![
        1 => Just(Access::Everything),
        12 => (
            proptest::collection::vec(0..keys, 0..3),
            proptest::collection::vec(0..keys, 0..3)
        )
            .prop_map(|(r, w)| Access::Keys {
                reads: r.into_iter().map(key).collect(),
                writes: w.into_iter().map(key).collect(),
            }),
    ]
}

fn steps() -> impl Strategy<Value = (usize, Vec<Step>)> {
    (1usize..10, 1u8..6).prop_flat_map(|(cap, keys)| {
        let step = prop_oneof![
            4 => access(keys).prop_map(Step::Insert),
            3 => Just(Step::Dispatch),
            3 => any::<usize>().prop_map(Step::Complete),
        ];
        (Just(cap), proptest::collection::vec(step, 1..120))
    })
}

struct Pending {
    id: NodeId,
    access: Access,
    running: bool,
}

fn model_ready(model: &[Pending]) -> Vec<NodeId> {
    model
        .iter()
        .enumerate()
        .filter(|(i, p)| !p.running && !model[..*i].iter().any(|q| conflicts(&q.access, &p.access)))
        .map(|(_, p)| p.id)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn graph_matches_brute_force_model((cap, steps) in steps()) {
        let mut g: DependencyGraph<NodeId> = DependencyGraph::new(cap);
        let mut model: Vec<Pending> = Vec::new();
        for step in steps {
            match step {
                Step::Insert(access) => {
                    let next = g.next_id();
                    match g.insert(next, &access) {
                        Ok(id) => {
                            prop_assert_eq!(id, next);
                            prop_assert!(model.len() < cap);
                            model.push(Pending { id, access, running: false });
                        }
                        Err(Full(item)) => {
                            prop_assert_eq!(item, next);
                            prop_assert_eq!(model.len(), cap);
                        }
                    }
                }
                Step::Dispatch => {
                    let expect = model_ready(&model).first().copied();
                    let got = g.next_ready().map(|(id, item)| {
                        assert_eq!(id, item, "the item travels with its node");
                        id
                    });
                    prop_assert_eq!(got, expect, "oldest ready first");
                    if let Some(id) = got {
                        let p = model.iter_mut().find(|p| p.id == id).unwrap();
                        p.running = true;
                    }
                }
                Step::Complete(i) => {
                    let running: Vec<NodeId> = model.iter().filter(|p| p.running).map(|p| p.id).collect();
                    if running.is_empty() {
                        continue;
                    }
                    let id = running[i % running.len()];
                    let before = model_ready(&model).len();
                    let newly = g.remove(id).unwrap();
                    model.retain(|p| p.id != id);
                    prop_assert_eq!(model_ready(&model).len(), before + newly);
                }
            }
            prop_assert_eq!(g.ready().collect::<Vec<_>>(), model_ready(&model));
            prop_assert_eq!(g.len(), model.len());
            prop_assert_eq!(g.running(), model.iter().filter(|p| p.running).count());
        }
        // Drain: finish what is running, then run everything that becomes
        // ready; nothing may stay stuck, and the indexes must empty out.
        loop {
            let running: Vec<NodeId> = model.iter().filter(|p| p.running).map(|p| p.id).collect();
            for id in running {
                g.remove(id).unwrap();
                model.retain(|p| p.id != id);
            }
            let Some((id, _)) = g.next_ready() else { break };
            prop_assert_eq!(Some(id), model_ready(&model).first().copied());
            model.iter_mut().find(|p| p.id == id).unwrap().running = true;
        }
        prop_assert!(model.is_empty(), "pending requests that never become ready");
        prop_assert!(g.is_empty());
        prop_assert_eq!(g.indexed_keys(), 0);
    }
}
