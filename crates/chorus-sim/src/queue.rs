//! The event heap of the discrete-event simulator (after mysticeti's
//! `simulator.rs`): events ordered by (virtual time, insertion counter). The
//! counter makes the order of simultaneous events a pure function of the order
//! they were scheduled in, so a run is reproducible from its seed alone.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Virtual time in microseconds since the start of the run.
pub type Micros = u64;

struct Entry<E> {
    at_us: Micros,
    order: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.at_us == other.at_us && self.order == other.order
    }
}

impl<E> Eq for Entry<E> {}

impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Entry<E> {
    // BinaryHeap is a max-heap: reverse so the earliest (time, counter) pops first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at_us, other.order).cmp(&(self.at_us, self.order))
    }
}

/// A bounded priority queue of future events.
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    next_order: u64,
    now_us: Micros,
    capacity: usize,
}

impl<E> EventQueue<E> {
    /// `capacity` bounds the number of pending events (TigerStyle: a limit on
    /// everything); scheduling beyond it is refused.
    pub fn new(capacity: usize) -> EventQueue<E> {
        assert!(capacity > 0);
        EventQueue {
            heap: BinaryHeap::new(),
            next_order: 0,
            now_us: 0,
            capacity,
        }
    }

    /// The time of the event popped last.
    pub fn now_us(&self) -> Micros {
        self.now_us
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Schedule `event` at `at_us` (clamped to now: the past cannot be changed).
    /// Returns false when the queue is full and the event was dropped.
    pub fn schedule(&mut self, at_us: Micros, event: E) -> bool {
        if self.heap.len() >= self.capacity {
            return false;
        }
        let at_us = at_us.max(self.now_us);
        self.heap.push(Entry {
            at_us,
            order: self.next_order,
            event,
        });
        self.next_order += 1;
        true
    }

    /// Pop the earliest event, advancing virtual time to it.
    pub fn pop(&mut self) -> Option<(Micros, E)> {
        let e = self.heap.pop()?;
        debug_assert!(e.at_us >= self.now_us, "virtual time must not run backwards");
        self.now_us = e.at_us;
        Some((e.at_us, e.event))
    }

    /// The time of the earliest pending event.
    pub fn peek_time(&self) -> Option<Micros> {
        self.heap.peek().map(|e| e.at_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_then_insertion_order() {
        let mut q = EventQueue::new(16);
        assert!(q.schedule(30, "c"));
        assert!(q.schedule(10, "a"));
        assert!(q.schedule(10, "b"));
        assert!(q.schedule(20, "x"));
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, vec![(10, "a"), (10, "b"), (20, "x"), (30, "c")]);
        assert_eq!(q.now_us(), 30);
    }

    #[test]
    fn past_events_are_clamped_to_now() {
        let mut q = EventQueue::new(4);
        q.schedule(100, 1);
        assert_eq!(q.pop(), Some((100, 1)));
        q.schedule(5, 2);
        assert_eq!(q.pop(), Some((100, 2)));
    }

    #[test]
    fn capacity_is_enforced() {
        let mut q = EventQueue::new(2);
        assert!(q.schedule(1, ()));
        assert!(q.schedule(2, ()));
        assert!(!q.schedule(3, ()));
        assert_eq!(q.len(), 2);
    }
}
