//! BV-broadcast (spec §2), one rule per test, on a bare instance.

use crate::binary::{BinOut, Binary};
use crate::counters::DropReason;
use crate::msg::BinMsg;
use crate::DbftConfig;

pub fn bval(round: u32, value: bool) -> BinMsg {
    BinMsg::BVal { round, value }
}

fn feed(cfg: &DbftConfig, b: &mut Binary, from: usize, m: BinMsg) -> Vec<BinOut> {
    let mut out = vec![];
    b.on_msg(cfg, from, &m, &mut out).unwrap();
    out
}

#[test]
fn bv_echoes_once_at_t_plus_1_senders() {
    let cfg = DbftConfig::new(4);
    let mut b = Binary::new(&cfg, 0);
    assert!(
        feed(&cfg, &mut b, 1, bval(1, true)).is_empty(),
        "one sender may be Byzantine"
    );
    assert_eq!(
        feed(&cfg, &mut b, 2, bval(1, true)),
        vec![BinOut::Broadcast(bval(1, true))]
    );
    assert!(
        feed(&cfg, &mut b, 3, bval(1, true)).is_empty(),
        "echo at most once per value"
    );
    assert_eq!(b.sent_bval(1), [false, true]);
}

#[test]
fn bv_delivers_at_2t_plus_1_senders() {
    let cfg = DbftConfig::new(7);
    let mut b = Binary::new(&cfg, 0);
    for s in 1..=4 {
        feed(&cfg, &mut b, s, bval(1, false));
        assert_eq!(b.bin_values(1), [false, false], "{s} < 2t+1 = 5 senders");
    }
    feed(&cfg, &mut b, 5, bval(1, false));
    assert_eq!(b.bin_values(1), [true, false]);
}

#[test]
fn bv_counts_each_sender_once_per_value() {
    let cfg = DbftConfig::new(4);
    let mut b = Binary::new(&cfg, 0);
    feed(&cfg, &mut b, 1, bval(1, true));
    let mut out = vec![];
    assert_eq!(
        b.on_msg(&cfg, 1, &bval(1, true), &mut out),
        Err(DropReason::Duplicate)
    );
    assert!(
        out.is_empty(),
        "a repeated B_VAL must not reach the echo threshold"
    );
    // The same sender may send the other value (one estimate, one echo).
    assert!(b.on_msg(&cfg, 1, &bval(1, false), &mut out).is_ok());
}

#[test]
fn bv_correct_replica_may_send_both_values_in_a_round() {
    let cfg = DbftConfig::new(4);
    let mut b = Binary::new(&cfg, 0);
    let mut out = vec![];
    b.propose(&cfg, crate::Input::Zero, &mut out);
    assert_eq!(out, vec![BinOut::Broadcast(bval(1, false))]);
    feed(&cfg, &mut b, 1, bval(1, true));
    feed(&cfg, &mut b, 2, bval(1, true));
    assert_eq!(b.sent_bval(1), [true, true]);
}

#[test]
fn bv_justification_value_of_t_byzantine_never_enters() {
    let cfg = DbftConfig::new(7);
    let mut b = Binary::new(&cfg, 0);
    for s in [5, 6] {
        assert!(feed(&cfg, &mut b, s, bval(1, true)).is_empty());
    }
    assert_eq!(b.bin_values(1), [false, false]);
    assert_eq!(b.sent_bval(1), [false, false], "t senders do not trigger an echo");
}
