//! CBASE's parallelizer as a pure data structure (CBASE §5, §5.1).
//!
//! Requests are inserted in delivery order with the access set the service
//! declares. A request depends on every earlier *pending* request it
//! conflicts with — write/write, write/read or read/write on a shared key
//! (CBASE §4.1); `Access::Everything` conflicts with everything. A request is
//! ready when nothing it depends on is pending; [`DependencyGraph::next_ready`]
//! hands out the oldest ready request first, which gives CBASE's fairness
//! property (§4.1 "Liveness": the oldest pending request is always ready, so
//! it is never starved).
//!
//! Conflict detection never scans all pending requests. Per key the graph
//! indexes the last pending writer and the pending readers since it; a new
//! reader depends on the last writer, a new writer on the last writer and on
//! those readers. Earlier conflicting requests are covered transitively: an
//! older writer or reader of the key is a predecessor of the indexed writer
//! (dependence is transitive, CBASE §4.1), so it is pending only while that
//! writer is. `Access::Everything` acts as a barrier: it depends on the
//! previous barrier and on the keyed requests inserted since, and clears the
//! key index (everything older is now its predecessor). The graph is exact:
//! a request is ready if and only if no earlier pending request conflicts
//! with it (the property tests check that against a brute-force model).
//!
//! The graph is bounded: `insert` refuses with [`Full`] at `capacity` pending
//! requests, which is the executor's back-pressure. `set_sync` implements
//! CBASE's `sync()`: requests inserted after a given point are held back even
//! when ready, until the barrier is lifted.
//!
//! Deterministic: ordered maps only, no hashing with random state.

use crate::service::Access;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};

/// A pending request, numbered in insertion (= delivery) order.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u64);

/// `insert` on a full graph: the item is handed back.
#[derive(Debug, PartialEq, Eq)]
pub struct Full<T>(pub T);

#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    #[error("no such pending node")]
    UnknownNode,
    #[error("the node was not handed out by next_ready")]
    NotRunning,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum State {
    Blocked,
    Ready,
    Running,
}

/// Keys after normalisation: sorted, deduplicated, a key both read and
/// written counts as written.
#[derive(Clone, Debug)]
enum Keys {
    Everything,
    Some { reads: Vec<Bytes>, writes: Vec<Bytes> },
}

#[derive(Debug)]
struct Node<T> {
    item: Option<T>,
    keys: Keys,
    /// Pending predecessors.
    deps: usize,
    /// Successors (each at most once).
    dependents: Vec<u64>,
    state: State,
}

#[derive(Debug, Default)]
struct KeyState {
    writer: Option<u64>,
    readers: BTreeSet<u64>,
}

#[derive(Debug)]
pub struct DependencyGraph<T> {
    capacity: usize,
    next_id: u64,
    nodes: BTreeMap<u64, Node<T>>,
    ready: BTreeSet<u64>,
    keys: BTreeMap<Bytes, KeyState>,
    /// The latest pending `Everything` request.
    barrier: Option<u64>,
    /// Pending keyed requests inserted after the latest `Everything` request.
    since_barrier: BTreeSet<u64>,
    running: usize,
    /// CBASE `sync()`: ids `>= hold_from` are not handed out.
    hold_from: Option<u64>,
}

impl<T> DependencyGraph<T> {
    /// A graph holding at most `capacity` (at least 1) pending requests.
    pub fn new(capacity: usize) -> DependencyGraph<T> {
        DependencyGraph {
            capacity: capacity.max(1),
            next_id: 0,
            nodes: BTreeMap::new(),
            ready: BTreeSet::new(),
            keys: BTreeMap::new(),
            barrier: None,
            since_barrier: BTreeSet::new(),
            running: 0,
            hold_from: None,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Pending requests: blocked, ready or running.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn is_full(&self) -> bool {
        self.nodes.len() >= self.capacity
    }

    /// Requests handed out and not yet removed.
    pub fn running(&self) -> usize {
        self.running
    }

    /// Ready requests not yet handed out (including ones held back by `sync`).
    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// Ready requests not yet handed out, oldest first.
    pub fn ready(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.ready.iter().map(|&i| NodeId(i))
    }

    /// Keys currently indexed (bounded by the keys of pending requests).
    pub fn indexed_keys(&self) -> usize {
        self.keys.len()
    }

    /// The id the next inserted request will get.
    pub fn next_id(&self) -> NodeId {
        NodeId(self.next_id)
    }

    /// Is there a request `next_ready` would hand out now?
    pub fn has_ready(&self) -> bool {
        self.ready
            .first()
            .is_some_and(|&i| self.hold_from.into_iter().all(|h| i < h))
    }

    /// CBASE `sync()`: hold back every request inserted at or after `from`
    /// (`None` lifts the barrier). Requests already handed out are unaffected.
    pub fn set_sync(&mut self, from: Option<NodeId>) {
        self.hold_from = from.map(|n| n.0);
    }

    /// Insert the next request in delivery order.
    pub fn insert(&mut self, item: T, access: &Access) -> Result<NodeId, Full<T>> {
        if self.is_full() {
            return Err(Full(item));
        }
        let id = self.next_id;
        self.next_id += 1;
        let keys = normalise(access);
        let mut preds: Vec<u64> = Vec::new();
        match &keys {
            Keys::Everything => {
                preds.extend(self.barrier);
                preds.extend(self.since_barrier.iter().copied());
                self.since_barrier.clear();
                // Every pending keyed request is now a predecessor of this one,
                // so later requests need only depend on it.
                self.keys.clear();
                self.barrier = Some(id);
            }
            Keys::Some { reads, writes } => {
                preds.extend(self.barrier);
                for k in reads {
                    let ks = self.keys.entry(k.clone()).or_default();
                    preds.extend(ks.writer);
                    ks.readers.insert(id);
                }
                for k in writes {
                    let ks = self.keys.entry(k.clone()).or_default();
                    preds.extend(ks.writer);
                    preds.extend(ks.readers.iter().copied());
                    ks.readers.clear();
                    ks.writer = Some(id);
                }
                self.since_barrier.insert(id);
            }
        }
        let mut deps = 0;
        for p in preds {
            let pn = self.nodes.get_mut(&p).expect("indexed requests are pending");
            // Edges for `id` are added contiguously: a repeat shows as the last entry.
            if pn.dependents.last() != Some(&id) {
                pn.dependents.push(id);
                deps += 1;
            }
        }
        let state = if deps == 0 {
            self.ready.insert(id);
            State::Ready
        } else {
            State::Blocked
        };
        self.nodes.insert(
            id,
            Node {
                item: Some(item),
                keys,
                deps,
                dependents: Vec::new(),
                state,
            },
        );
        Ok(NodeId(id))
    }

    /// Hand out the oldest ready request (CBASE `next_request()`); it stays
    /// pending — and keeps blocking its dependents — until `remove`.
    pub fn next_ready(&mut self) -> Option<(NodeId, T)> {
        if !self.has_ready() {
            return None;
        }
        let id = self.ready.pop_first()?;
        let n = self.nodes.get_mut(&id).expect("ready requests are pending");
        debug_assert_eq!(n.state, State::Ready);
        debug_assert_eq!(n.deps, 0);
        n.state = State::Running;
        self.running += 1;
        let item = n.item.take().expect("a request is handed out once");
        Some((NodeId(id), item))
    }

    /// Hand out one particular request if it is ready now (and not held back
    /// by `set_sync`): a caller that just inserted a read can run it on its
    /// own thread when nothing pending conflicts with it, instead of waking
    /// a worker and waiting. It then counts as running until `remove`.
    pub fn take(&mut self, id: NodeId) -> Option<T> {
        if self.hold_from.is_some_and(|h| id.0 >= h) || !self.ready.remove(&id.0) {
            return None;
        }
        let n = self.nodes.get_mut(&id.0).expect("ready requests are pending");
        debug_assert_eq!(n.state, State::Ready);
        debug_assert_eq!(n.deps, 0);
        n.state = State::Running;
        self.running += 1;
        Some(n.item.take().expect("a request is handed out once"))
    }

    /// A handed-out request completed (CBASE `remove_request()`). Returns how
    /// many requests became ready because of it.
    pub fn remove(&mut self, id: NodeId) -> Result<usize, GraphError> {
        let n = self.nodes.get(&id.0).ok_or(GraphError::UnknownNode)?;
        if n.state != State::Running {
            return Err(GraphError::NotRunning);
        }
        let n = self.nodes.remove(&id.0).expect("checked above");
        self.running -= 1;
        let mut newly_ready = 0;
        for d in n.dependents {
            let dn = self.nodes.get_mut(&d).expect("dependents are pending");
            debug_assert_eq!(dn.state, State::Blocked);
            dn.deps -= 1;
            if dn.deps == 0 {
                dn.state = State::Ready;
                self.ready.insert(d);
                newly_ready += 1;
            }
        }
        self.unindex(id.0, &n.keys);
        Ok(newly_ready)
    }

    /// Drop every index entry that names the completed request `id`.
    fn unindex(&mut self, id: u64, keys: &Keys) {
        match keys {
            Keys::Everything => {
                if self.barrier == Some(id) {
                    self.barrier = None;
                }
            }
            Keys::Some { reads, writes } => {
                self.since_barrier.remove(&id);
                for k in reads.iter().chain(writes) {
                    // The entry may be gone: a later barrier cleared the index.
                    if let Some(ks) = self.keys.get_mut(k) {
                        if ks.writer == Some(id) {
                            ks.writer = None;
                        }
                        ks.readers.remove(&id);
                        if ks.writer.is_none() && ks.readers.is_empty() {
                            self.keys.remove(k);
                        }
                    }
                }
            }
        }
    }
}

fn normalise(access: &Access) -> Keys {
    match access {
        Access::Everything => Keys::Everything,
        Access::Keys { reads, writes } => {
            let writes: BTreeSet<&Bytes> = writes.iter().collect();
            let reads: BTreeSet<&Bytes> = reads.iter().filter(|k| !writes.contains(k)).collect();
            Keys::Some {
                reads: reads.into_iter().cloned().collect(),
                writes: writes.into_iter().cloned().collect(),
            }
        }
    }
}

/// Do two declared access sets conflict (CBASE §4.1)? The rule the graph
/// implements; exposed for tests and for services that want to check theirs.
pub fn conflicts(a: &Access, b: &Access) -> bool {
    match (a, b) {
        (Access::Everything, _) | (_, Access::Everything) => true,
        (
            Access::Keys {
                reads: ra,
                writes: wa,
            },
            Access::Keys {
                reads: rb,
                writes: wb,
            },
        ) => wa.iter().any(|k| wb.contains(k) || rb.contains(k)) || ra.iter().any(|k| wb.contains(k)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }
    fn w(keys: &[&str]) -> Access {
        Access::Keys {
            reads: vec![],
            writes: keys.iter().map(|s| k(s)).collect(),
        }
    }
    fn r(keys: &[&str]) -> Access {
        Access::Keys {
            reads: keys.iter().map(|s| k(s)).collect(),
            writes: vec![],
        }
    }

    #[test]
    fn take_hands_out_one_ready_request_and_respects_conflicts_and_sync() {
        let mut g = DependencyGraph::new(8);
        let w_a = g.insert(0, &w(&["a"])).unwrap();
        let r_a = g.insert(1, &r(&["a"])).unwrap();
        let r_b = g.insert(2, &r(&["b"])).unwrap();
        assert_eq!(g.take(r_a), None, "blocked behind the write to a");
        assert_eq!(g.take(r_b), Some(2));
        assert_eq!(g.take(r_b), None, "handed out once");
        assert_eq!((g.running(), g.ready_len()), (1, 1));
        assert_eq!(g.next_ready().unwrap(), (w_a, 0));
        assert_eq!(g.remove(w_a).unwrap(), 1);
        g.set_sync(Some(r_a));
        assert_eq!(g.take(r_a), None, "held back by the barrier");
        g.set_sync(None);
        assert_eq!(g.take(r_a), Some(1));
        g.remove(r_a).unwrap();
        g.remove(r_b).unwrap();
        assert!(g.is_empty());
    }

    #[test]
    fn independent_requests_are_all_ready_oldest_first() {
        let mut g = DependencyGraph::new(8);
        for (i, key) in ["a", "b", "c"].iter().enumerate() {
            assert_eq!(g.insert(i, &w(&[key])).unwrap(), NodeId(i as u64));
        }
        assert_eq!(g.ready_len(), 3);
        assert_eq!(g.next_ready().unwrap(), (NodeId(0), 0));
        assert_eq!(g.next_ready().unwrap(), (NodeId(1), 1));
    }

    #[test]
    fn write_after_write_waits_and_is_released_on_remove() {
        let mut g = DependencyGraph::new(8);
        g.insert("w1", &w(&["x"])).unwrap();
        g.insert("w2", &w(&["x"])).unwrap();
        let (id, item) = g.next_ready().unwrap();
        assert_eq!(item, "w1");
        assert!(g.next_ready().is_none(), "w2 conflicts with running w1");
        assert_eq!(g.remove(id), Ok(1));
        assert_eq!(g.next_ready().unwrap().1, "w2");
    }

    #[test]
    fn readers_share_and_a_writer_waits_for_all_of_them() {
        let mut g = DependencyGraph::new(8);
        g.insert("r1", &r(&["x"])).unwrap();
        g.insert("r2", &r(&["x"])).unwrap();
        g.insert("w", &w(&["x"])).unwrap();
        g.insert("r3", &r(&["x"])).unwrap();
        let a = g.next_ready().unwrap();
        let b = g.next_ready().unwrap();
        assert_eq!((a.1, b.1), ("r1", "r2"));
        assert!(g.next_ready().is_none());
        assert_eq!(g.remove(b.0), Ok(0));
        assert_eq!(g.remove(a.0), Ok(1));
        let wn = g.next_ready().unwrap();
        assert_eq!(wn.1, "w");
        assert!(g.next_ready().is_none(), "r3 reads what w writes");
        g.remove(wn.0).unwrap();
        assert_eq!(g.next_ready().unwrap().1, "r3");
    }

    #[test]
    fn everything_is_a_barrier_both_ways() {
        let mut g = DependencyGraph::new(8);
        g.insert("a", &w(&["a"])).unwrap();
        g.insert("all", &Access::Everything).unwrap();
        g.insert("b", &w(&["b"])).unwrap();
        let a = g.next_ready().unwrap();
        assert!(g.next_ready().is_none());
        g.remove(a.0).unwrap();
        let all = g.next_ready().unwrap();
        assert_eq!(all.1, "all");
        assert!(g.next_ready().is_none());
        g.remove(all.0).unwrap();
        assert_eq!(g.next_ready().unwrap().1, "b");
    }

    #[test]
    fn no_keys_never_conflicts() {
        let mut g = DependencyGraph::new(8);
        g.insert(0, &w(&["x"])).unwrap();
        g.insert(
            1,
            &Access::Keys {
                reads: vec![],
                writes: vec![],
            },
        )
        .unwrap();
        assert_eq!(g.ready_len(), 2);
    }

    #[test]
    fn capacity_is_enforced() {
        let mut g = DependencyGraph::new(2);
        g.insert(0, &w(&["x"])).unwrap();
        g.insert(1, &w(&["x"])).unwrap();
        assert_eq!(g.insert(2, &w(&["y"])), Err(Full(2)));
        let (id, _) = g.next_ready().unwrap();
        g.remove(id).unwrap();
        assert!(g.insert(2, &w(&["y"])).is_ok());
    }

    #[test]
    fn remove_requires_a_running_node() {
        let mut g = DependencyGraph::new(4);
        let a = g.insert(0, &w(&["x"])).unwrap();
        assert_eq!(g.remove(a), Err(GraphError::NotRunning));
        assert_eq!(g.remove(NodeId(9)), Err(GraphError::UnknownNode));
    }

    #[test]
    fn sync_holds_later_requests_back() {
        let mut g = DependencyGraph::new(8);
        g.insert(0, &w(&["a"])).unwrap();
        let from = g.next_id();
        g.set_sync(Some(from));
        g.insert(1, &w(&["b"])).unwrap();
        assert_eq!(g.next_ready().unwrap().1, 0);
        assert!(g.next_ready().is_none(), "held back by sync although independent");
        g.set_sync(None);
        assert_eq!(g.next_ready().unwrap().1, 1);
    }

    #[test]
    fn index_shrinks_back_to_empty() {
        let mut g = DependencyGraph::new(16);
        for i in 0..10u32 {
            let key = format!("k{}", i % 3);
            let acc = if i % 4 == 0 { r(&[&key]) } else { w(&[&key, "z"]) };
            g.insert(i, &acc).unwrap();
        }
        g.insert(10, &Access::Everything).unwrap();
        g.insert(11, &r(&["k1"])).unwrap();
        while let Some((id, _)) = g.next_ready() {
            g.remove(id).unwrap();
        }
        assert!(g.is_empty());
        assert_eq!(g.indexed_keys(), 0);
        assert_eq!(g.running(), 0);
    }

    #[test]
    fn conflict_rule_matches_cbase() {
        assert!(conflicts(&w(&["x"]), &w(&["x"])));
        assert!(conflicts(&w(&["x"]), &r(&["x"])));
        assert!(conflicts(&r(&["x"]), &w(&["x"])));
        assert!(!conflicts(&r(&["x"]), &r(&["x"])));
        assert!(!conflicts(&w(&["x"]), &w(&["y"])));
        assert!(conflicts(&Access::Everything, &r(&[])));
    }
}
