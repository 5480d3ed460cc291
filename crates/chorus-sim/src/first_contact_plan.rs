//! `fake-answer`: the attack on leader-first clients (PBFT §4.1,
//! `chorus_core::first_contact`). A client sends a new request to the
//! primary alone and judges the primary by what comes back before the
//! retransmission. A Byzantine primary that proposes nothing of a client's
//! but answers at once (one fake result, or a lone "busy") would keep a
//! naive client sending to it alone for ever; the client's rule is that only
//! f + 1 matching results count as the primary answering, and a probe's
//! acceptance earns the primary one more request alone (slow start). This
//! makes replica 0, the primary of every lane in view 0 (the one every new
//! client tries first), attack every request sent to it alone, for the
//! whole run, and only those: it knows which requests were sent to it
//! alone and which of them are probes (the simulator tells it), and
//! proposes every request the backups also hold, so their timers never
//! replace it. No real primary knows as much (a request does not say where
//! else it went), so these bound what one can do. Two strategies, by the
//! client's id: even clients get a fake result (two in three) or a lone
//! "busy" at once for every request sent alone; odd clients get their
//! probes proposed honestly and every other request sent alone dropped in
//! silence (the lure). A client that took one answer for the primary
//! answering, or trusted it with a window after one accepted probe, would
//! lose a request per fake answer or a window per cooling-off period
//! (`tests/leader_first.rs` counts them).
//!
//! Drawn in pbft and cop with leader-first clients only, from a ChaCha
//! stream of its own (`FIRST_CONTACT_STREAM`), after the classic, smart and
//! rcc draws and before the cluster restarts (which restart correct
//! replicas only): seeds that draw no `fake-answer` run exactly as before
//! it existed. Where replica 0 is Byzantine already it takes its attack
//! over in one seed of four (the seeds in `tests/regressions.rs` run
//! every-replica clients, so never).

use crate::faults::FaultKind;
use crate::options::SimOptions;
use crate::plan::Plan;
use chorus_core::{OrderingMode, ReplicaId};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// The ChaCha stream the draw comes from.
pub const FIRST_CONTACT_STREAM: u64 = 0xf1c0;

/// What the attacker does with a request sent to it alone, by the request
/// alone (no randomness: the same request gets the same treatment on every
/// arrival, as a deliberate attacker would choose).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FakeAnswer {
    /// Drop it and answer at once with a result nobody computed.
    FakeResult,
    /// Drop it and answer at once "busy".
    Busy,
    /// The lure: a probe is proposed honestly.
    Honest,
    /// The lure: anything else is dropped in silence.
    Drop,
}

impl FakeAnswer {
    pub fn for_request(client: u64, seq: u64, probe: bool) -> FakeAnswer {
        if client % 2 == 1 {
            return if probe {
                FakeAnswer::Honest
            } else {
                FakeAnswer::Drop
            };
        }
        match client.wrapping_mul(31).wrapping_add(seq) % 3 {
            0 => FakeAnswer::Busy,
            _ => FakeAnswer::FakeResult,
        }
    }
}

/// Draw `fake-answer` into `plan` (one coin under the swarm): replica 0
/// becomes the attacker, taking its Byzantine kind over (one time in four)
/// or joining the Byzantine replicas if there is room within f (counting
/// the outages that outlast healing) and no crash or outage schedule uses
/// it.
pub fn draw_fake_answer(opts: &SimOptions, plan: &mut Plan, rng: &mut ChaCha8Rng) {
    let k = FaultKind::FakeAnswer;
    let applies = opts.leader_first && matches!(opts.mode, OrderingMode::Pbft | OrderingMode::Cop);
    if !opts.faults.contains(k) || !applies {
        return;
    }
    if opts.swarm && !rng.gen_bool(0.5) {
        return;
    }
    let attacker = ReplicaId(0);
    // Replica 0 Byzantine already: its attack stays in three seeds of four
    // (a silent or equivocating primary of view 0 is worth keeping).
    if let Some(entry) = plan.byzantine.iter_mut().find(|(r, _)| *r == attacker) {
        if rng.gen_bool(0.25) {
            entry.1 = k;
            plan.drawn.insert(k);
        }
        return;
    }
    if plan.scheduled_down().contains(&attacker) || plan.byzantine.len() >= plan.byzantine_room(opts) {
        return;
    }
    plan.byzantine.push((attacker, k));
    plan.drawn.insert(k);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::FaultSet;
    use crate::plan::draw_seed as draw;

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
                assert_eq!(format!("{:?}", a.crashes), format!("{:?}", b.crashes));
                if b.drawn.contains(FaultKind::FakeAnswer) {
                    drawn += 1;
                    assert!(b.byzantine.contains(&(ReplicaId(0), FaultKind::FakeAnswer)));
                    let others = |p: &Plan| {
                        p.byzantine
                            .iter()
                            .filter(|(r, _)| *r != ReplicaId(0))
                            .copied()
                            .collect::<Vec<_>>()
                    };
                    assert_eq!(others(&a), others(&b), "only replica 0 changes");
                    assert!(b.byzantine.len() <= with.f());
                    continue;
                }
                assert_eq!(format!("{:?}", a.restarts), format!("{:?}", b.restarts));
                assert_eq!(a.byzantine, b.byzantine);
                assert_eq!(a.drawn, b.drawn);
            }
            assert!(drawn > 3, "{mode:?}: drawn {drawn} times in 200");
        }
    }

    #[test]
    fn only_pbft_and_cop_with_leader_first_clients_draw_it() {
        for mode in [OrderingMode::Rcc, OrderingMode::Dispel, OrderingMode::Sarek] {
            let o = SimOptions::new(mode, 4, 4);
            assert!((0..100).all(|s| !draw(&o, s).drawn.contains(FaultKind::FakeAnswer)));
        }
        let mut o = SimOptions::new(OrderingMode::Pbft, 1, 4);
        o.leader_first = false;
        assert!((0..100).all(|s| !draw(&o, s).drawn.contains(FaultKind::FakeAnswer)));
    }

    #[test]
    fn even_clients_get_fake_answers_and_odd_ones_the_lure() {
        let mut counts = [0; 4];
        for c in 0..8 {
            for q in 0..100 {
                let probe = q % 5 == 0;
                let a = FakeAnswer::for_request(c, q, probe);
                assert_eq!(a, FakeAnswer::for_request(c, q, probe));
                counts[a as usize] += 1;
            }
        }
        assert_eq!(counts, [266, 134, 80, 320], "two fake results for each busy");
    }
}
