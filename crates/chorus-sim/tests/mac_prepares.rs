//! `PrepareAuth::Mac` (issue 13 item 3): prepares authenticated by channel
//! MACs only and Castro & Liskov's view change over unproven claims. The
//! nv-forge colluders lie in every view change they send (a no-op
//! "prepared" in the latest view they may sign, backed by their own Q
//! claims: `false_claims.rs`) and, as new-view primaries, build NEW-VIEWs
//! from the worst decidable set.

use chorus_core::{OrderingMode, PrepareAuth};
use chorus_sim::{run_many, run_one, SimOptions};

fn mac(mode: OrderingMode, pillars: u32, n: usize, faults: &str) -> SimOptions {
    let mut o = SimOptions::new(mode, pillars, n).with_faults(faults.parse().expect("fault set"));
    o.prepare_auth = PrepareAuth::Mac;
    o
}

/// Found by the nv-forge liars with the A2 rule removed from
/// `chorus_order::lane::plan` (a re-proposal needs only 2f+1 view changes
/// not contradicting it): r1's lie of a no-op prepared in a later view
/// overrode a batch that had committed, `[agreement at 3.013s] r2 delivered
/// D:13102c17c23f at #17 (cell (L1,s4)) but r3 delivered D:da4769fcf818`.
#[test]
fn a_later_view_no_op_claim_does_not_override_a_committed_batch() {
    let o = mac(OrderingMode::Cop, 4, 4, "nv-forge,partition,delay,loss");
    let r = run_one(&o, 604);
    assert!(r.ok(), "{r}");
    assert!(
        r.counters.faults.get("byz-false-claims").copied().unwrap_or(0) > 0,
        "{r}"
    );
}

/// Every mode that runs PBFT lanes, every fault kind, n = 4 and 7.
#[test]
fn every_pbft_lane_mode_is_safe_and_live_with_mac_prepares() {
    let modes = [
        (OrderingMode::Pbft, 1),
        (OrderingMode::Cop, 4),
        (OrderingMode::Rcc, 4),
        (OrderingMode::Sarek, 4),
    ];
    for (mode, pillars) in modes {
        for (n, seeds) in [(4, 40), (7, 15)] {
            let o = mac(mode, pillars, n, "all").with_seeds(9000, seeds);
            let s = run_many(&o);
            assert!(s.failures.is_empty(), "{mode:?} n={n}:\n{s}");
            assert_eq!(s.requests_committed, s.requests_issued, "{s}");
        }
    }
}

/// Only the attack and the faults that force view changes, many seeds.
#[test]
fn nv_forge_liars_never_split_agreement() {
    for (mode, pillars) in [(OrderingMode::Pbft, 1), (OrderingMode::Cop, 4)] {
        let o = mac(mode, pillars, 4, "nv-forge,partition,delay,loss").with_seeds(500, 150);
        let s = run_many(&o);
        assert!(s.failures.is_empty(), "{mode:?}:\n{s}");
        assert!(
            s.counters.faults.get("byz-false-claims").copied().unwrap_or(0) > 0,
            "{s}"
        );
    }
}
