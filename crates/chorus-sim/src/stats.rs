//! Counters of one run (and of many runs, merged): messages and injected faults.

use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Messages handed to the network (replica ↔ replica and client ↔ replica).
    pub messages_sent: u64,
    /// Messages that arrived at a live endpoint.
    pub messages_delivered: u64,
    /// Injected faults by name (network faults, crashes, Byzantine mutations, …).
    pub faults: BTreeMap<&'static str, u64>,
    /// Other notable events by name (restarts, state transfers, retransmissions).
    pub notes: BTreeMap<&'static str, u64>,
    /// Replica-to-replica messages sent, by kind.
    pub by_kind: BTreeMap<&'static str, u64>,
}

impl Counters {
    pub fn fault(&mut self, name: &'static str) {
        self.fault_n(name, 1);
    }

    pub fn fault_n(&mut self, name: &'static str, n: u64) {
        if n > 0 {
            *self.faults.entry(name).or_insert(0) += n;
        }
    }

    pub fn note(&mut self, name: &'static str) {
        *self.notes.entry(name).or_insert(0) += 1;
    }

    pub fn merge(&mut self, other: &Counters) {
        self.messages_sent += other.messages_sent;
        self.messages_delivered += other.messages_delivered;
        for (k, v) in &other.faults {
            self.fault_n(k, *v);
        }
        for (k, v) in &other.notes {
            *self.notes.entry(k).or_insert(0) += v;
        }
        for (k, v) in &other.by_kind {
            *self.by_kind.entry(k).or_insert(0) += v;
        }
    }

    pub fn total_faults(&self) -> u64 {
        self.faults.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_adds_everything() {
        let mut a = Counters {
            messages_sent: 3,
            ..Counters::default()
        };
        a.fault("loss");
        let mut b = Counters {
            messages_delivered: 2,
            ..Counters::default()
        };
        b.fault_n("loss", 2);
        b.fault("crash");
        b.fault_n("nothing", 0);
        b.note("restart");
        a.merge(&b);
        assert_eq!(a.notes.get("restart"), Some(&1));
        assert_eq!((a.messages_sent, a.messages_delivered), (3, 2));
        assert_eq!(a.faults.get("loss"), Some(&3));
        assert_eq!(a.faults.get("crash"), Some(&1));
        assert!(!a.faults.contains_key("nothing"));
        assert_eq!(a.total_faults(), 4);
    }
}
