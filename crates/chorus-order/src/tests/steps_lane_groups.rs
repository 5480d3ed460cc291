//! Lane groups (`replica/group.rs`, docs/lane-split.md): in `cop` each
//! lane is its pillar's group (COP §4), with its own pool; the groups see
//! each other only through the hub's view. These tests pin what the split
//! must keep: where a request waits, the pool budget, and the frontier
//! across groups that makes an idle lane fill behind a busy one.

use super::util::{handle, params, replica, setup, Setup};
use crate::io::{Action, Event};
use chorus_core::{LaneId, OrderingMode, ReplicaMsg, Slot};

/// `params(mode, lanes)` with every lane led by its fixed replica.
fn fixed_leaders(mode: OrderingMode, lanes: u32) -> chorus_core::ProtocolParams {
    chorus_core::ProtocolParams {
        leader_rotation: chorus_core::LeaderRotation::Fixed,
        ..params(mode, lanes)
    }
}

/// n = 4, two pillars (two lanes); replica 0 leads every slot of view 0.
fn cop2() -> Setup {
    let p = fixed_leaders(OrderingMode::Cop, 2);
    setup(4, 4, p)
}

#[test]
fn cop_gives_each_lane_its_own_group_and_other_modes_one() {
    let s = cop2();
    let r = replica(&s, 0);
    assert_eq!(r.groups.len(), 2);
    for (g, group) in r.groups.iter().enumerate() {
        let ids: Vec<LaneId> = group.lanes.iter().map(|l| l.id()).collect();
        assert_eq!(ids, vec![LaneId(g as u32)], "group {g}");
    }
    assert_eq!(r.lane(LaneId(1)).map(|l| l.id()), Some(LaneId(1)));
    assert!(r.lane(LaneId(2)).is_none());
    // SAREK §IV: one PBFT leader per partition, each partition a group.
    let r = replica(&setup(4, 4, params(OrderingMode::Sarek, 3)), 0);
    assert_eq!(r.groups.len(), 3);
    for (g, group) in r.groups.iter().enumerate() {
        let ids: Vec<LaneId> = group.lanes.iter().map(|l| l.id()).collect();
        assert_eq!(ids, vec![LaneId(g as u32)], "sarek group {g}");
    }
    for (mode, pillars) in [
        (OrderingMode::Rcc, 2),
        (OrderingMode::Pbft, 1),
        (OrderingMode::Dispel, 1),
    ] {
        let r = replica(&setup(4, 4, params(mode, pillars)), 0);
        assert_eq!(r.groups.len(), 1, "{mode:?}");
    }
}

/// SAREK §IV-B 1 with each partition a group of its own, apart as on the
/// pillars' threads: a request partitions 0 and 2 order is admitted by
/// the group of its entry partition (partition 0: its client owns lane
/// 0), which hands it through the hub to partition 2's group; partition
/// 1's group never holds it. A request of one partition goes straight to
/// that partition's group.
#[test]
fn sarek_a_cross_partition_request_reaches_each_partitions_group_through_the_hub() {
    let p = fixed_leaders(OrderingMode::Sarek, 3);
    let s = setup(4, 2, p);
    // Replica 3 leads no partition (K = 3 < n): what it admits stays pending.
    let mut hub = replica(&s, 3);
    // Ops name their partitions after an `@`: "x@02" touches 0 and 2.
    hub.set_predictor(crate::sarek::Predictor::new(std::sync::Arc::new(
        |op: &[u8]| {
            let at = op.iter().position(|&b| b == b'@').map_or(op.len(), |i| i + 1);
            op[at..].iter().map(|b| u16::from(b - b'0')).collect()
        },
    )));
    let mut out = crate::io::Outbox::new();
    hub.set_pieces_apart(true, chorus_core::Millis(0), &mut out);
    let mut pieces = hub.split_groups();
    assert_eq!(pieces.len(), 3);
    let cross = s.request(0, 1, b"x@02");
    let single = s.request(1, 1, b"y@1");
    assert_eq!(hub.piece_of(&Event::Request(cross.clone())), Some(0));
    assert_eq!(hub.piece_of(&Event::Request(single.clone())), Some(1));
    let now = chorus_core::Millis(5);
    pieces[0].handle(now, Event::Request(cross), &mut out);
    pieces[1].handle(now, Event::Request(single), &mut out);
    // Group 0 → hub → group 2, one message each way.
    let mut to_hub = pieces[0].take_internal();
    to_hub.extend(pieces[1].take_internal());
    assert_eq!(format!("{to_hub:?}").matches("ForLane").count(), 1, "{to_hub:?}");
    for m in to_hub {
        hub.handle_internal(now, m, &mut out);
    }
    let to_groups = hub.take_internal();
    let for_lane: Vec<_> = to_groups
        .into_iter()
        .filter(|m| format!("{m:?}").contains("ForLane"))
        .collect();
    assert_eq!(for_lane.len(), 1);
    assert!(format!("{:?}", for_lane[0]).contains("to: 2"), "{for_lane:?}");
    for m in for_lane {
        pieces[2].handle_internal(now, m, &mut out);
    }
    let held: Vec<usize> = pieces.iter().map(|p| p.status_part().pool_len).collect();
    assert_eq!(
        held,
        vec![1, 1, 1],
        "partitions 0 and 2 hold the cross-partition request, 1 the other"
    );
    let pending = |p: &crate::replica::GroupPiece, lane: u32| {
        p.status_part()
            .lanes
            .iter()
            .find(|l| l.lane == LaneId(lane))
            .map(|l| l.status.pending)
    };
    assert_eq!(pending(&pieces[0], 0), Some(1));
    assert_eq!(pending(&pieces[1], 1), Some(1));
    assert_eq!(pending(&pieces[2], 2), Some(1));
    // The client's retransmission, a duplicate at partition 0, is handed on
    // again: a partition that lost its copy gets it back this way (found by
    // the mac-prepares sweep, sarek seed 9003: requests stalled after a
    // cluster restart). A forged copy under the same (client, seq), whose
    // authenticator fails here, is not.
    let for_lanes = |m: &[crate::replica::Internal]| format!("{m:?}").matches("ForLane").count();
    pieces[0].handle(now, Event::Request(s.request(0, 1, b"x@02")), &mut out);
    assert_eq!(for_lanes(&pieces[0].take_internal()), 1);
    let wrong_keys: Vec<_> = s
        .keys
        .iter()
        .map(|r| s.clients[1].pairwise_key(&r.public()))
        .collect();
    let forged = chorus_core::Request::with_macs(
        &s.tag(),
        chorus_core::ClientId(0),
        chorus_core::RequestSeq(1),
        0,
        bytes::Bytes::from_static(b"x@02"),
        &wrong_keys,
    );
    pieces[0].handle(now, Event::Request(forged), &mut out);
    assert_eq!(
        for_lanes(&pieces[0].take_internal()),
        0,
        "a forged duplicate was handed on"
    );
}

#[test]
fn a_request_waits_only_in_its_owner_lanes_group() {
    let s = cop2();
    // Replica 3 leads no lane of view 0: the requests stay pending.
    let mut r = replica(&s, 3);
    for client in 0..4 {
        let req = s.request(client, 1, b"x");
        handle(&mut r, 0, Event::Request(req));
    }
    for (g, group) in r.groups.iter().enumerate() {
        // Clients 0 and 2 are lane 0's, 1 and 3 lane 1's (`owner_lane`).
        assert_eq!(group.pool.len(), 2, "group {g}");
        assert_eq!(group.pool.pending_len(LaneId(g as u32)), 2, "group {g}");
        let other = LaneId(1 - g as u32);
        assert_eq!(
            group.pool.pending_len(other),
            0,
            "group {g} holds lane {other:?}'s"
        );
    }
    assert_eq!(r.status().pool_len, 4);
}

#[test]
fn the_groups_pools_share_the_replicas_budget() {
    let s = cop2();
    let r = replica(&s, 0);
    let budget = s.cfg.params.pool_max_requests as usize;
    let total: usize = r.groups.iter().map(|g| g.pool.max_requests()).sum();
    assert!(total <= budget + r.groups.len(), "{total} > {budget}");
    assert!(r.groups.iter().all(|g| g.pool.max_requests() >= budget / 2));
}

/// COP §4.2.1: the merger waits for every lane's slot of a round, so an
/// idle lane's leader fills with no-ops once another lane ran ahead. The
/// busy lane is another group's: its progress reaches the idle lane's group
/// only through the frontier the replica puts in the hub's view.
#[test]
fn an_idle_lane_fills_behind_a_busy_lane_of_another_group() {
    let s = cop2();
    let mut r = replica(&s, 0);
    let lane1_fills = |actions: &[Action]| {
        actions
            .iter()
            .filter(|a| {
                matches!(a, Action::Broadcast { msg: ReplicaMsg::PrePrepare(pp) }
                    if pp.lane == LaneId(1) && pp.slot == Slot(0) && pp.batch.is_noop())
            })
            .count()
    };
    // Client 0 is lane 0's. Its first request goes out at once in slot 0
    // (position 0, below lane 1's slot 0 at position 1): nothing to fill.
    let first = handle(&mut r, 0, Event::Request(s.request(0, 1, b"x")));
    assert_eq!(lane1_fills(&first), 0);
    // Four more fill a batch (`batch_max_requests` = 4), which goes out in
    // lane 0's slot 1 (position 2): lane 1's slot 0 is behind now.
    let mut later = Vec::new();
    for seq in 2..=5 {
        later.extend(handle(&mut r, 0, Event::Request(s.request(0, seq, b"x"))));
    }
    assert!(r.lane(LaneId(0)).and_then(|l| l.max_seen_slot()) == Some(Slot(1)));
    assert_eq!(
        lane1_fills(&later),
        1,
        "lane 1 fills slot 0 behind lane 0's slot 1"
    );
}

/// A replica of `s` with its groups apart and taken out, as the runtime
/// will run them (`Replica::split_groups`).
fn split(s: &Setup, me: u32) -> (crate::replica::Replica, Vec<crate::replica::GroupPiece>) {
    let mut r = replica(s, me);
    let mut out = crate::io::Outbox::new();
    r.set_pieces_apart(true, chorus_core::Millis(0), &mut out);
    let pieces = r.split_groups();
    (r, pieces)
}

fn bundle(lane: u32, stable: u64) -> ReplicaMsg {
    ReplicaMsg::Statuses(chorus_core::StatusBundle {
        stable_seq: chorus_core::Seq(stable),
        lanes: vec![chorus_core::LaneProgress {
            lane: LaneId(lane),
            view: chorus_core::View(0),
            next_undecided: Slot(0),
            suspects: false,
            awaits_new_view: false,
        }],
    })
}

fn peer_statuses(internal: &[crate::replica::Internal]) -> usize {
    internal
        .iter()
        .filter(|m| format!("{m:?}").contains("PeerStatus"))
        .count()
}

/// A peer sending statuses in a loop reaches the hub (state transfer, our
/// checkpoint votes) once per quarter status interval, with the latest
/// stable checkpoint it claimed, not once per message.
#[test]
fn a_piece_relays_a_flooding_peers_status_at_most_once_a_quarter_interval() {
    let s = cop2();
    let (_hub, mut pieces) = split(&s, 0);
    let piece = &mut pieces[0];
    let mut out = crate::io::Outbox::new();
    for k in 0..20 {
        let ev = Event::Message {
            from: chorus_core::ReplicaId(1),
            msg: bundle(0, k),
        };
        piece.handle(chorus_core::Millis(100), ev, &mut out);
    }
    let first = piece.take_internal();
    assert_eq!(peer_statuses(&first), 1, "{first:?}");
    // Held, not lost: the latest claim goes out once the quarter passed.
    let quarter = s.cfg.params.status_interval_ms / 4;
    let ev = Event::Message {
        from: chorus_core::ReplicaId(1),
        msg: bundle(0, 20),
    };
    piece.handle(chorus_core::Millis(100 + quarter), ev, &mut out);
    let later = piece.take_internal();
    assert_eq!(peer_statuses(&later), 1);
    assert!(format!("{later:?}").contains("stable_seq: #20"), "{later:?}");
}

/// Once the groups run elsewhere, an event for one of them that reaches
/// the hub by mistake is counted and dropped, never a panic.
#[test]
fn a_split_replica_drops_group_events_it_no_longer_holds() {
    let s = cop2();
    let (mut hub, pieces) = split(&s, 3);
    assert_eq!(pieces.len(), 2);
    assert_eq!(hub.piece_of(&Event::Request(s.request(1, 1, b"x"))), Some(1));
    handle(&mut hub, 0, Event::Request(s.request(1, 1, b"x")));
    handle(&mut hub, 0, Event::Timer(crate::io::TimerId::Batch(LaneId(0))));
    let mut out = crate::io::Outbox::new();
    hub.handle_verified_request(chorus_core::Millis(0), s.request(0, 1, b"x"), &mut out);
    assert_eq!(hub.counters().rejected("event-for-detached-group"), 3);
}

/// A partition whose pool is full refuses a request another partition
/// hands on, and says so in its counters (the request reaches it again
/// when a partition decides it).
#[test]
fn sarek_a_hand_on_into_a_full_partition_is_refused_and_counted() {
    let p = chorus_core::ProtocolParams {
        pool_max_requests: 1,
        ..fixed_leaders(OrderingMode::Sarek, 2)
    };
    let s = setup(4, 2, p);
    // Replica 3 leads no partition: what it admits stays pending.
    let mut hub = replica(&s, 3);
    let mut out = crate::io::Outbox::new();
    hub.set_pieces_apart(true, chorus_core::Millis(0), &mut out);
    let mut pieces = hub.split_groups();
    let now = chorus_core::Millis(5);
    // Every partition is predicted (no access sets), so a request enters
    // at its client's owner lane: client 1's fills partition 1's pool.
    pieces[1].handle(now, Event::Request(s.request(1, 1, b"a")), &mut out);
    // Client 0's enters at partition 0 and is handed on to partition 1.
    pieces[0].handle(now, Event::Request(s.request(0, 1, b"b")), &mut out);
    for m in pieces[0].take_internal() {
        hub.handle_internal(now, m, &mut out);
    }
    let handed: Vec<_> = hub
        .take_internal()
        .into_iter()
        .filter(|m| format!("{m:?}").contains("ForLane"))
        .collect();
    assert_eq!(handed.len(), 1);
    for m in handed {
        pieces[1].handle_internal(now, m, &mut out);
    }
    let st = pieces[1].status_part();
    assert_eq!(st.pool_len, 1, "partition 1 was full");
    assert_eq!(
        st.counters.rejected("for-lane-pool-full"),
        1,
        "{:?}",
        st.counters.rejected
    );
}

/// `sarek`: every status interval the hub asks the executor for
/// cross-partition requests lacking a partition's copy
/// (`Action::FindMissingCopies`); what it reports is handed to that
/// partition's group like a decided hand-on (adopted into its pool,
/// counted); a lane outside the cluster, or a re-prediction certificate
/// (ordered only where it adds a partition), is refused (counted). `cop`
/// never asks.
#[test]
fn sarek_hands_a_reported_missing_copy_to_its_partition_again() {
    let p = fixed_leaders(OrderingMode::Sarek, 2);
    let s = setup(4, 2, p);
    let mut hub = replica(&s, 3);
    let mut out = crate::io::Outbox::new();
    hub.set_pieces_apart(true, chorus_core::Millis(0), &mut out);
    let mut pieces = hub.split_groups();
    let tick = chorus_core::Millis(s.cfg.params.status_interval_ms + 1);
    let mut out = crate::io::Outbox::new();
    hub.handle(tick, Event::Timer(crate::io::TimerId::Status), &mut out);
    assert!(
        out.actions.iter().any(|a| matches!(a, Action::FindMissingCopies)),
        "{:?}",
        super::util::kinds(&out.actions)
    );
    let req = s.request(0, 1, b"x");
    let copies = vec![(req, vec![LaneId(1), LaneId(7)])];
    hub.handle(tick, Event::MissingCopies(copies), &mut out);
    let handed = hub.take_internal();
    assert_eq!(handed.len(), 1, "{handed:?}");
    for m in handed {
        pieces[1].handle_internal(tick, m, &mut out);
    }
    let st = pieces[1].status_part();
    assert_eq!(st.pool_len, 1, "partition 1 holds the request again");
    assert_eq!(st.counters.sarek_forwarded, 1);
    assert_eq!(
        hub.counters().rejected("missing-copy-not-handed-on"),
        1,
        "lane 7 is no partition"
    );
    let mut cert = s.request(0, 2, b"y");
    cert.flags |= chorus_core::flags::REPREDICTION;
    hub.handle(
        tick,
        Event::MissingCopies(vec![(cert, vec![LaneId(1)])]),
        &mut out,
    );
    assert!(hub.take_internal().is_empty(), "a certificate is never handed on");
    assert_eq!(hub.counters().rejected("missing-copy-not-handed-on"), 2);

    let cop = setup(4, 2, params(OrderingMode::Cop, 2));
    let mut r = replica(&cop, 3);
    let mut out = crate::io::Outbox::new();
    r.handle(tick, Event::Timer(crate::io::TimerId::Status), &mut out);
    assert!(!out.actions.iter().any(|a| matches!(a, Action::FindMissingCopies)));
}
