//! The simulated network: per-link latency distributions, loss, duplication,
//! reordering and partitions that heal. Every decision draws from the run's one
//! seeded RNG. Faults act only before `heal_at_us`; afterwards links keep their
//! base latency and a small jitter, so liveness can be asserted.

use crate::queue::Micros;
use crate::stats::Counters;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// A network endpoint: a replica instance (twins give one replica id two
/// instances) or a client.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Endpoint {
    Node(usize),
    Client(usize),
}

/// How a partition cuts its group off from everyone else.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PartitionKind {
    /// Nothing crosses the cut in either direction.
    Symmetric,
    /// The group's messages do not leave it; messages still reach it.
    OutboundBlocked,
    /// Messages do not reach the group; its own messages still leave it.
    InboundBlocked,
}

/// A partition of replica ids (all instances of a replica are on the same
/// side; clients are always outside the group), active in `[from_us, until_us)`.
#[derive(Clone, Debug)]
pub struct Partition {
    pub group: Vec<u32>,
    pub kind: PartitionKind,
    pub from_us: Micros,
    pub until_us: Micros,
}

impl Partition {
    fn blocks(&self, now_us: Micros, from_in: bool, to_in: bool) -> bool {
        if now_us < self.from_us || now_us >= self.until_us || from_in == to_in {
            return false;
        }
        match self.kind {
            PartitionKind::Symmetric => true,
            PartitionKind::OutboundBlocked => from_in,
            PartitionKind::InboundBlocked => to_in,
        }
    }
}

/// Fault intensities drawn once per run (parts per million per message).
#[derive(Clone, Debug, Default)]
pub struct LinkFaults {
    pub loss_ppm: u32,
    pub dup_ppm: u32,
    pub reorder_ppm: u32,
    /// Latency spikes (heavy tail) and slow links.
    pub spike_ppm: u32,
    pub slow_link_ppm: u32,
}

/// What happens to one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fate {
    Dropped,
    /// Arrival times (two when duplicated).
    Arrive(Vec<Micros>),
}

/// Latency bounds (microseconds).
const BASE_LATENCY_MIN_US: u64 = 500;
const BASE_LATENCY_MAX_US: u64 = 5_000;
const JITTER_MEAN_US: f64 = 300.0;
const JITTER_MAX_US: u64 = 5_000;
const SLOW_LINK_EXTRA_MIN_US: u64 = 10_000;
const SLOW_LINK_EXTRA_MAX_US: u64 = 80_000;
const SPIKE_MIN_US: u64 = 50_000;
const SPIKE_MAX_US: u64 = 300_000;
const REORDER_MAX_US: u64 = 20_000;

pub struct Network {
    /// Number of endpoints per kind: nodes first, then clients.
    nodes: usize,
    clients: usize,
    /// Base latency of each directed link, `[from * e + to]`.
    base_us: Vec<u64>,
    /// Links that are slow while faults are active.
    slow: Vec<bool>,
    /// Replica id of each node (partitions are per replica id).
    node_replica: Vec<u32>,
    faults: LinkFaults,
    partitions: Vec<Partition>,
    heal_at_us: Micros,
}

impl Network {
    pub fn new(
        rng: &mut ChaCha8Rng,
        node_replica: Vec<u32>,
        clients: usize,
        faults: LinkFaults,
        partitions: Vec<Partition>,
        heal_at_us: Micros,
        wan_latency_us: Option<u64>,
    ) -> Network {
        let nodes = node_replica.len();
        let e = nodes + clients;
        let base_us = (0..e * e)
            .map(|link| {
                let drawn = rng.gen_range(BASE_LATENCY_MIN_US..=BASE_LATENCY_MAX_US);
                let between_nodes = link / e < nodes && link % e < nodes;
                match wan_latency_us {
                    Some(wan) if between_nodes => wan,
                    _ => drawn,
                }
            })
            .collect();
        let slow = (0..e * e)
            .map(|_| rng.gen_range(0..1_000_000) < faults.slow_link_ppm)
            .collect();
        for p in &partitions {
            assert!(
                p.from_us <= p.until_us && p.until_us <= heal_at_us,
                "partitions heal before heal_at"
            );
        }
        Network {
            nodes,
            clients,
            base_us,
            slow,
            node_replica,
            faults,
            partitions,
            heal_at_us,
        }
    }

    fn index(&self, ep: Endpoint) -> usize {
        match ep {
            Endpoint::Node(i) => {
                assert!(i < self.nodes);
                i
            }
            Endpoint::Client(c) => {
                assert!(c < self.clients);
                self.nodes + c
            }
        }
    }

    fn in_group(&self, ep: Endpoint, p: &Partition) -> bool {
        match ep {
            Endpoint::Node(i) => p.group.contains(&self.node_replica[i]),
            Endpoint::Client(_) => false,
        }
    }

    pub fn partitioned(&self, now_us: Micros, from: Endpoint, to: Endpoint) -> bool {
        self.partitions
            .iter()
            .any(|p| p.blocks(now_us, self.in_group(from, p), self.in_group(to, p)))
    }

    /// Decide the fate of a message sent now from `from` to `to`.
    pub fn route(
        &self,
        rng: &mut ChaCha8Rng,
        now_us: Micros,
        from: Endpoint,
        to: Endpoint,
        counters: &mut Counters,
    ) -> Fate {
        let faulty = now_us < self.heal_at_us;
        if faulty && self.partitioned(now_us, from, to) {
            counters.fault("partition-drop");
            return Fate::Dropped;
        }
        if faulty && self.chance(rng, self.faults.loss_ppm) {
            counters.fault("loss");
            return Fate::Dropped;
        }
        let first = now_us + self.latency_us(rng, now_us, from, to, counters);
        if faulty && self.chance(rng, self.faults.dup_ppm) {
            counters.fault("dup");
            let second = now_us + self.latency_us(rng, now_us, from, to, counters);
            return Fate::Arrive(vec![first, second]);
        }
        Fate::Arrive(vec![first])
    }

    fn chance(&self, rng: &mut ChaCha8Rng, ppm: u32) -> bool {
        ppm > 0 && rng.gen_range(0..1_000_000) < ppm
    }

    fn latency_us(
        &self,
        rng: &mut ChaCha8Rng,
        now_us: Micros,
        from: Endpoint,
        to: Endpoint,
        counters: &mut Counters,
    ) -> u64 {
        let e = self.nodes + self.clients;
        let link = self.index(from) * e + self.index(to);
        // Exponential jitter, truncated so one unlucky draw cannot stall a run.
        let u: f64 = rng.gen_range(f64::EPSILON..1.0);
        let jitter = ((-u.ln()) * JITTER_MEAN_US) as u64;
        let mut total = self.base_us[link] + jitter.min(JITTER_MAX_US);
        if now_us < self.heal_at_us {
            if self.slow[link] {
                total += rng.gen_range(SLOW_LINK_EXTRA_MIN_US..=SLOW_LINK_EXTRA_MAX_US);
            }
            if self.chance(rng, self.faults.spike_ppm) {
                counters.fault("delay-spike");
                total += rng.gen_range(SPIKE_MIN_US..=SPIKE_MAX_US);
            }
            if self.chance(rng, self.faults.reorder_ppm) {
                counters.fault("reorder");
                total += rng.gen_range(0..=REORDER_MAX_US);
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn net(faults: LinkFaults, partitions: Vec<Partition>) -> (Network, ChaCha8Rng) {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let n = Network::new(&mut rng, vec![0, 1, 2, 3], 2, faults, partitions, 1_000_000, None);
        (n, rng)
    }

    #[test]
    fn healthy_links_deliver_once_within_bounds() {
        let (n, mut rng) = net(LinkFaults::default(), vec![]);
        let mut c = Counters::default();
        for i in 0..200 {
            let fate = n.route(&mut rng, i, Endpoint::Node(0), Endpoint::Node(1), &mut c);
            let Fate::Arrive(t) = fate else { panic!("dropped") };
            assert_eq!(t.len(), 1);
            assert!(t[0] >= i + BASE_LATENCY_MIN_US && t[0] <= i + BASE_LATENCY_MAX_US + JITTER_MAX_US);
        }
        assert!(c.faults.is_empty());
    }

    #[test]
    fn loss_and_duplication_only_before_heal() {
        let faults = LinkFaults {
            loss_ppm: 500_000,
            dup_ppm: 500_000,
            ..LinkFaults::default()
        };
        let (n, mut rng) = net(faults, vec![]);
        let mut c = Counters::default();
        let (mut drops, mut dups) = (0, 0);
        for _ in 0..1000 {
            match n.route(&mut rng, 10, Endpoint::Client(0), Endpoint::Node(2), &mut c) {
                Fate::Dropped => drops += 1,
                Fate::Arrive(t) if t.len() == 2 => dups += 1,
                Fate::Arrive(_) => {}
            }
        }
        assert!(drops > 300 && drops < 700, "drops {drops}");
        assert!(dups > 100, "dups {dups}");
        for _ in 0..100 {
            let fate = n.route(
                &mut rng,
                1_000_000,
                Endpoint::Client(0),
                Endpoint::Node(2),
                &mut c,
            );
            assert!(matches!(fate, Fate::Arrive(ref t) if t.len() == 1));
        }
    }

    #[test]
    fn partitions_block_by_kind_and_heal() {
        let p = |kind| Partition {
            group: vec![0],
            kind,
            from_us: 100,
            until_us: 200,
        };
        let mut c = Counters::default();
        let (sym, _) = net(LinkFaults::default(), vec![p(PartitionKind::Symmetric)]);
        assert!(sym.partitioned(150, Endpoint::Node(0), Endpoint::Node(1)));
        assert!(sym.partitioned(150, Endpoint::Node(1), Endpoint::Node(0)));
        assert!(sym.partitioned(150, Endpoint::Client(1), Endpoint::Node(0)));
        assert!(!sym.partitioned(150, Endpoint::Node(2), Endpoint::Node(1)));
        assert!(!sym.partitioned(99, Endpoint::Node(0), Endpoint::Node(1)));
        assert!(!sym.partitioned(200, Endpoint::Node(0), Endpoint::Node(1)));
        let (out, mut rng) = net(LinkFaults::default(), vec![p(PartitionKind::OutboundBlocked)]);
        assert!(out.partitioned(150, Endpoint::Node(0), Endpoint::Node(1)));
        assert!(!out.partitioned(150, Endpoint::Node(1), Endpoint::Node(0)));
        assert_eq!(
            out.route(&mut rng, 150, Endpoint::Node(0), Endpoint::Node(3), &mut c),
            Fate::Dropped
        );
        let (inb, _) = net(LinkFaults::default(), vec![p(PartitionKind::InboundBlocked)]);
        assert!(!inb.partitioned(150, Endpoint::Node(0), Endpoint::Node(1)));
        assert!(inb.partitioned(150, Endpoint::Node(1), Endpoint::Node(0)));
        assert_eq!(c.faults.get("partition-drop"), Some(&1));
    }

    #[test]
    fn same_seed_same_fates() {
        let faults = LinkFaults {
            loss_ppm: 100_000,
            dup_ppm: 100_000,
            reorder_ppm: 200_000,
            spike_ppm: 50_000,
            slow_link_ppm: 300_000,
        };
        let run = || {
            let (n, mut rng) = net(faults.clone(), vec![]);
            let mut c = Counters::default();
            (0..300)
                .map(|i| {
                    n.route(
                        &mut rng,
                        i * 10,
                        Endpoint::Node((i % 4) as usize),
                        Endpoint::Client(1),
                        &mut c,
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }
}
