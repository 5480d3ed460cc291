//! `fake-answer`: the attack on leader-first clients (PBFT §4.1,
//! `chorus_core::first_contact`). A client sends a new request to the
//! primary alone and judges the primary by what comes back before the
//! retransmission. A Byzantine primary that proposes nothing of a client's
//! but answers at once (one fake result, or a lone "busy") would keep a
//! naive client sending to it alone for ever; the client's rule is that only
//! f + 1 matching results count as the primary answering. This makes
//! replica 0, the primary of every lane in view 0 (the one every new client
//! tries first), do exactly that, for the whole run, to every request sent
//! to it alone, and only to those: it is omniscient (the simulator tells
//! it which requests the backups also hold) and proposes every request
//! they know, so their timers never replace it. No real primary can tell
//! (backups do not say what they hold), so this bounds what one can do:
//! with every-replica clients it would be an honest primary; a client that
//! took one answer for the primary answering would send to it alone again
//! after every cooling-off period and wait a retransmission for each
//! request (`tests/leader_first.rs` counts them).
//!
//! Drawn in pbft and cop only, from a ChaCha stream of its own
//! (`FIRST_CONTACT_STREAM`), after the classic, smart and rcc draws and
//! before the cluster restarts (which restart correct replicas only):
//! seeds that draw no `fake-answer` run exactly as before it existed.

use crate::faults::FaultKind;
use crate::options::SimOptions;
use crate::plan::Plan;
use chorus_core::{OrderingMode, ReplicaId};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// The ChaCha stream the draw comes from.
pub const FIRST_CONTACT_STREAM: u64 = 0xf1c0;

/// How the attacker answers a request sent to it alone, by the request
/// alone (no randomness: the same request gets the same answer on every
/// arrival, as a deliberate attacker would choose).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FakeAnswer {
    /// Drop it and answer at once with a result nobody computed.
    FakeResult,
    /// Drop it and answer at once "busy".
    Busy,
}

impl FakeAnswer {
    pub fn for_request(client: u64, seq: u64) -> FakeAnswer {
        match client.wrapping_mul(31).wrapping_add(seq) % 3 {
            0 => FakeAnswer::Busy,
            _ => FakeAnswer::FakeResult,
        }
    }
}

/// Draw `fake-answer` into `plan` (one coin under the swarm): replica 0
/// becomes the attacker, taking over its Byzantine kind if it has one, or
/// joining the Byzantine replicas if there is room within f (counting the
/// outages that outlast healing) and no crash or outage schedule uses it.
pub fn draw_fake_answer(opts: &SimOptions, plan: &mut Plan, rng: &mut ChaCha8Rng) {
    let k = FaultKind::FakeAnswer;
    if !opts.faults.contains(k) || !matches!(opts.mode, OrderingMode::Pbft | OrderingMode::Cop) {
        return;
    }
    if opts.swarm && !rng.gen_bool(0.5) {
        return;
    }
    let attacker = ReplicaId(0);
    if let Some(entry) = plan.byzantine.iter_mut().find(|(r, _)| *r == attacker) {
        entry.1 = k;
        plan.drawn.insert(k);
        return;
    }
    let busy = plan
        .crashes
        .iter()
        .chain(&plan.smart.outages)
        .any(|c| c.replica == attacker)
        || plan.smart.trigger_victims.contains(&attacker);
    let past_heal = plan
        .smart
        .outages
        .iter()
        .filter(|c| c.restart_us > plan.heal_at_us)
        .count();
    let room = opts.byzantine_replicas().min(opts.f().saturating_sub(past_heal));
    if busy || plan.byzantine.len() >= room {
        return;
    }
    plan.byzantine.push((attacker, k));
    plan.drawn.insert(k);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::FaultSet;
    use rand::SeedableRng;

    fn draw(opts: &SimOptions, seed: u64) -> Plan {
        Plan::draw(opts, &mut ChaCha8Rng::seed_from_u64(seed))
    }

    #[test]
    fn seeds_without_fake_answer_draw_as_before_it_existed() {
        let others: Vec<FaultKind> = FaultKind::ALL
            .into_iter()
            .filter(|k| *k != FaultKind::FakeAnswer)
            .collect();
        let others = FaultSet::from_kinds(&others);
        for (mode, pillars) in [(OrderingMode::Pbft, 1), (OrderingMode::Cop, 4)] {
            let without = SimOptions::new(mode, pillars, 7).with_faults(others);
            let with = SimOptions::new(mode, pillars, 7);
            let mut drawn = 0;
            for seed in 0..200 {
                let (a, b) = (draw(&without, seed), draw(&with, seed));
                if b.drawn.contains(FaultKind::FakeAnswer) {
                    drawn += 1;
                    assert!(b.byzantine.contains(&(ReplicaId(0), FaultKind::FakeAnswer)));
                    assert!(b.byzantine.len() <= with.f());
                    continue;
                }
                assert_eq!(format!("{:?}", a.crashes), format!("{:?}", b.crashes));
                assert_eq!(format!("{:?}", a.restarts), format!("{:?}", b.restarts));
                assert_eq!(a.byzantine, b.byzantine);
                assert_eq!(a.drawn, b.drawn);
            }
            assert!(drawn > 20, "{mode:?}: drawn {drawn} times in 200");
        }
    }

    #[test]
    fn only_pbft_and_cop_draw_it() {
        for mode in [OrderingMode::Rcc, OrderingMode::Dispel, OrderingMode::Sarek] {
            let o = SimOptions::new(mode, 4, 4);
            assert!((0..100).all(|s| !draw(&o, s).drawn.contains(FaultKind::FakeAnswer)));
        }
    }

    #[test]
    fn fake_results_and_busy_answers_each_always_the_same_way() {
        let mut counts = [0; 2];
        for c in 0..8 {
            for q in 0..100 {
                let a = FakeAnswer::for_request(c, q);
                assert_eq!(a, FakeAnswer::for_request(c, q));
                counts[a as usize] += 1;
            }
        }
        assert_eq!(counts, [533, 267], "two fake results for each busy");
    }
}
