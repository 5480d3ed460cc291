//! RCC §III-E: a client whose requests keep timing out switches instance.

mod common;

use bytes::Bytes;
use chorus_core::{switch_target, OrderingMode, ProtocolParams};
use common::{result_for, start_with, Behavior::*, Fake};

fn rcc() -> ProtocolParams {
    ProtocolParams {
        mode: OrderingMode::Rcc,
        ..ProtocolParams::default()
    }
}

/// Every replica ignores client 1's requests until it asks to move: after
/// two retransmissions the client sends SWITCHINSTANCE(1, 2) (the instance
/// after its owner `1 mod 4`), and the request then completes.
#[tokio::test]
async fn a_censored_client_switches_to_the_next_instance_and_completes() {
    let fake = start_with(&[CensoredUntilSwitch; 4], rcc()).await;
    let c = fake.client(1, Fake::opts()).await;
    let got = c.invoke(Bytes::from_static(b"op")).await.unwrap();
    assert_eq!(got, result_for(b"op"));
    let switches: Vec<_> = fake.seen_by(0).iter().filter_map(switch_target).collect();
    assert_eq!(switches, vec![2], "one switch, to the next instance");
    let st = c.stats();
    assert_eq!((st.switches_sent, st.switches_applied), (1, 1));
    assert!(st.retransmissions >= 2);
}

/// Outside rcc, or with switching off, the client never sends one (and
/// here never gets an answer).
#[tokio::test]
async fn no_switch_outside_rcc_or_when_disabled() {
    let pbft = start_with(&[CensoredUntilSwitch; 4], ProtocolParams::default()).await;
    let mut opts = Fake::opts();
    opts.request_timeout = std::time::Duration::from_millis(600);
    let c = pbft.client(1, opts.clone()).await;
    assert!(c.invoke(Bytes::from_static(b"op")).await.is_err());
    assert!(pbft.seen_by(0).iter().all(|r| !r.is_switch()));
    let fake = start_with(&[CensoredUntilSwitch; 4], rcc()).await;
    opts.switch_after_retransmits = 0;
    let c = fake.client(1, opts).await;
    assert!(c.invoke(Bytes::from_static(b"op")).await.is_err());
    assert_eq!(c.stats().switches_sent, 0);
}
