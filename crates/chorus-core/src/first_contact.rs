//! Where a new request goes first (PBFT §4.1: "a client sends a request to
//! what it believes is the current primary … if the client does not receive
//! replies soon enough, it broadcasts the request to all replicas").
//!
//! Sending each request to every replica costs each backup a socket read, a
//! frame MAC, a decode, a digest, a MAC check and a wake-up of its protocol
//! thread for a copy it will see again inside the primary's pre-prepare, and
//! the client n − 1 extra frames: with the primary alone, peak throughput on
//! dev-2c rose 1.49× (BENCHMARKS.md, 2026-11-27 "requests to the leader
//! first"). Only where one replica proposes all of a client's requests and
//! the client can tell which: `pbft` and `cop` with the fixed leader
//! rotation (the primary of the client's lane, `view mod n`), and `rcc`
//! (the primary of the instance that owns the client, RCC §III-B: replica
//! i coordinates instance i in every view, so there is no view to learn;
//! the client names its instance again after a SWITCHINSTANCE,
//! `set_lane`). Everywhere else (dispel, sarek, block-wise rotation) every
//! request still goes to every replica.
//!
//! The view is learnt, never guessed: a new client sends to every replica
//! and asks every replica for its views until f + 1 have answered (a client
//! that joins a cluster after a view change, or a one-shot `chorus put`,
//! would otherwise send its first requests to a former primary and wait a
//! retransmission), then probes the primary of the view they reach. When
//! the primary it chose left a request unanswered until its retransmission
//! (which goes to every replica, so the backups' timers run as before), it
//! sends to every replica for a cooling-off period that doubles with each
//! silence, and asks every replica for its status. The view f + 1 of them
//! report at least (so at least one correct replica is there) becomes the
//! client's, if higher. A Byzantine primary that answers late can thus cost
//! a client the cooling-off periods' broadcasts, never more than today's
//! every-replica sending; a lying replica alone cannot move the view.

use crate::config::{ClusterConfig, LeaderRotation, OrderingMode};
use crate::ids::{Cell, ClientId, LaneId, ReplicaId, RequestSeq, Slot, View};

/// Sans-IO: time is the caller's, in microseconds (the client library's
/// monotonic clock, the simulator's virtual one).
pub type Micros = u64;

/// The first cooling-off period after a silent primary, and the longest.
pub const COOL_OFF_MIN: Micros = 1_000_000;
pub const COOL_OFF_MAX: Micros = 60_000_000;
/// While cooling off or probing, ask the replicas for their views at most
/// this often (a view change ends the period at once). Every question costs
/// each replica a status report, so not more often during a failover.
pub const ASK_EVERY: Micros = 500_000;
/// A probe neither accepted nor found silent within this (its caller gave
/// up, or it was answered "busy" and lost) counts as silent.
pub const PROBE_MAX: Micros = 4_000_000;
/// Slow start: after its probe is accepted, a primary gets this many
/// requests alone, and two more for each one it gets accepted (up to
/// `ALONE_MAX`); the rest go to every replica. A primary that answers its
/// probes and drops what follows then costs a client one request per
/// cooling-off period (which doubles), not a whole window.
pub const ALONE_START: u32 = 1;
pub const ALONE_MAX: u32 = 1 << 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// A new client: every request goes to every replica until f + 1
    /// replicas have reported their views.
    Learning,
    /// Every new request goes to the primary alone.
    Primary,
    /// Every new request goes to every replica until then.
    CoolingOff { until: Micros },
    /// One request goes to the primary alone (the probe, once sent, and
    /// when); the others to every replica until it is accepted.
    Probing { probe: Option<(RequestSeq, Micros)> },
}

pub struct FirstContact {
    /// `None`: every request goes to every replica.
    lane: Option<LaneId>,
    /// The lane's primary depends on its view (pbft, cop), so the client
    /// learns views; not in rcc, whose instance primaries are fixed.
    views_matter: bool,
    /// The client's belief of its lane's view.
    view: u64,
    mode: Mode,
    /// In `Mode::Primary`: requests that may still go to the primary alone
    /// (`ALONE_START`), and when the last one went.
    alone_budget: u32,
    last_alone: Micros,
    cool_off: Micros,
    /// When the primary last answered a probe (a cooling-off period halves
    /// after as long again without a silence).
    calm_since: Option<Micros>,
    /// Views reported since we last asked, by replica; `None` before the
    /// first question. Kept until the next question: a report that comes
    /// later can only raise the (f + 1)-th highest view, so f replicas that
    /// answer first with an old view cannot hold the client back.
    reports: Option<Vec<Option<u64>>>,
    last_ask: Option<Micros>,
}

impl FirstContact {
    pub fn new(config: &ClusterConfig, client: ClientId, enabled: bool) -> FirstContact {
        let fixed = config.params.leader_rotation == LeaderRotation::Fixed;
        let (one_proposer, views_matter) = match config.params.mode {
            OrderingMode::Pbft | OrderingMode::Cop => (fixed, true),
            OrderingMode::Rcc => (true, false),
            OrderingMode::Dispel | OrderingMode::Sarek => (false, false),
        };
        FirstContact {
            lane: (enabled && one_proposer).then(|| config.owner_lane(client)),
            views_matter,
            view: 0,
            mode: if views_matter {
                Mode::Learning
            } else {
                Mode::Primary
            },
            alone_budget: ALONE_START,
            last_alone: 0,
            cool_off: COOL_OFF_MIN,
            calm_since: None,
            reports: None,
            last_ask: None,
        }
    }

    fn primary(&self, config: &ClusterConfig, lane: LaneId) -> ReplicaId {
        config.leader(Cell { lane, slot: Slot(0) }, View(self.view))
    }

    /// The one replica new ordered request `seq` goes to, or `None` for
    /// every replica.
    pub fn target(&mut self, config: &ClusterConfig, seq: RequestSeq, now: Micros) -> Option<ReplicaId> {
        let lane = self.lane?;
        if let Mode::CoolingOff { until } = self.mode {
            if now < until {
                return None;
            }
            self.mode = Mode::Probing { probe: None };
        }
        if let Mode::Probing { probe: Some((_, at)) } = self.mode {
            if now.saturating_sub(at) >= PROBE_MAX {
                self.silence(now);
                // Not asked here: the caller's next `ask_due` asks.
                self.last_ask = None;
                return None;
            }
        }
        match self.mode {
            Mode::Primary => {
                if let Some(since) = self.calm_since {
                    if now.saturating_sub(since) >= self.cool_off {
                        self.cool_off = (self.cool_off / 2).max(COOL_OFF_MIN);
                        self.calm_since = Some(now);
                    }
                }
                if self.alone_budget == 0 {
                    // Spent, and nothing came back to refill it for as long
                    // as a probe may take (answers lost, callers that gave
                    // up): probe afresh rather than stay on every replica.
                    if now.saturating_sub(self.last_alone) < PROBE_MAX {
                        return None;
                    }
                    self.mode = Mode::Probing {
                        probe: Some((seq, now)),
                    };
                    return Some(self.primary(config, lane));
                }
                self.alone_budget -= 1;
                self.last_alone = now;
                Some(self.primary(config, lane))
            }
            Mode::Probing { probe: None } => {
                self.mode = Mode::Probing {
                    probe: Some((seq, now)),
                };
                Some(self.primary(config, lane))
            }
            Mode::Learning | Mode::Probing { probe: Some(_) } | Mode::CoolingOff { .. } => None,
        }
    }

    /// `seq`, sent to the primary alone, was accepted (f + 1 matching
    /// results) before any retransmission: the primary proposed it. One
    /// reply is not enough, nor a "busy": a faulty primary could send those
    /// at once and never propose.
    pub fn on_accepted(&mut self, seq: RequestSeq, now: Micros) {
        match self.mode {
            Mode::Probing { probe: Some((s, _)) } if s == seq => {
                self.mode = Mode::Primary;
                self.alone_budget = ALONE_START;
                self.last_alone = now;
                self.calm_since = Some(now);
            }
            Mode::Primary => self.alone_budget = self.alone_budget.saturating_add(2).min(ALONE_MAX),
            _ => {}
        }
    }

    /// The primary alone answered `seq` "busy". No silence (an overloaded
    /// primary is no reason to send every request to every replica), but
    /// a probe is over, and it is worth asking whether the view moved (a
    /// faulty former primary could answer "busy" to everything). Returns
    /// whether to ask every replica for its view.
    pub fn on_busy(&mut self, seq: RequestSeq, now: Micros) -> bool {
        if self.lane.is_none() {
            return false;
        }
        match self.mode {
            Mode::Probing { probe: Some((s, _)) } if s == seq => self.mode = Mode::Probing { probe: None },
            // Overloaded, not silent: the request it refused is no loss to
            // count against it (nor a reason to stop sending to it alone).
            Mode::Primary => self.alone_budget = self.alone_budget.saturating_add(1).min(ALONE_MAX),
            _ => {}
        }
        let due = self.last_ask.is_none_or(|t| now.saturating_sub(t) >= ASK_EVERY);
        due && self.start_asking(now)
    }

    /// `seq`, sent to replica `to` alone, got no answer until its first
    /// retransmission. Returns whether that starts a cooling-off period
    /// (then ask every replica for its view): not for a replica we no
    /// longer take for the primary, nor while cooling off already.
    pub fn on_silent(&mut self, config: &ClusterConfig, seq: RequestSeq, to: ReplicaId, now: Micros) -> bool {
        let Some(lane) = self.lane else {
            return false;
        };
        if to != self.primary(config, lane) {
            return false;
        }
        let counts = match self.mode {
            Mode::Primary => true,
            Mode::Probing { probe } => probe.is_some_and(|(s, _)| s == seq),
            Mode::Learning | Mode::CoolingOff { .. } => false,
        };
        if !counts {
            return false;
        }
        self.silence(now)
    }

    fn silence(&mut self, now: Micros) -> bool {
        self.mode = Mode::CoolingOff {
            until: now.saturating_add(self.cool_off),
        };
        self.cool_off = (self.cool_off * 2).min(COOL_OFF_MAX);
        self.calm_since = None;
        self.start_asking(now)
    }

    /// While learning, cooling off or probing, whether to ask the replicas
    /// for their views (again: a probe of a primary that a view change
    /// already replaced would otherwise cost a retransmission timeout to
    /// find out, and unanswered questions are asked again).
    pub fn ask_due(&mut self, now: Micros) -> bool {
        self.lane.is_some()
            && matches!(
                self.mode,
                Mode::Learning | Mode::CoolingOff { .. } | Mode::Probing { probe: Some(_) }
            )
            && self.last_ask.is_none_or(|t| now.saturating_sub(t) >= ASK_EVERY)
            && self.start_asking(now)
    }

    fn start_asking(&mut self, now: Micros) -> bool {
        self.last_ask = Some(now);
        if !self.views_matter {
            return false; // rcc: the instance primary is the same in every view
        }
        // Afresh: answers to this question replace the last one's.
        self.reports = Some(Vec::new());
        true
    }

    /// rcc: the client's requests are now proposed by instance `lane`
    /// (RCC §III-E, after a SWITCHINSTANCE, or a refusal saying it owns us
    /// already). Its primary is probed like a primary after a silence.
    pub fn set_lane(&mut self, lane: LaneId) {
        if self.lane.is_some_and(|l| l != lane) {
            self.lane = Some(lane);
            self.mode = Mode::Probing { probe: None };
        }
    }

    /// Replica `from` reports `views` (each lane's view). With f + 1
    /// reports, adopt the highest view f + 1 of them reach (so at least one
    /// correct replica is there), if it is higher than ours, and probe its
    /// primary at once; a new client probes the primary of the view it
    /// learnt even if that is view 0. Returns whether the view moved.
    pub fn on_report(&mut self, config: &ClusterConfig, from: ReplicaId, views: &[u64]) -> bool {
        let (Some(lane), Some(reports)) = (self.lane, self.reports.as_mut()) else {
            return false;
        };
        let n = config.n();
        if reports.len() < n {
            reports.resize(n, None);
        }
        let Some(slot) = reports.get_mut(from.index()) else {
            return false;
        };
        *slot = views.get(lane.index()).copied();
        let mut seen: Vec<u64> = reports.iter().flatten().copied().collect();
        let needed = config.f() + 1;
        if seen.len() < needed {
            return false;
        }
        seen.sort_unstable_by(|a, b| b.cmp(a));
        let view = seen[needed - 1];
        if self.mode == Mode::Learning {
            self.view = self.view.max(view);
            self.mode = Mode::Probing { probe: None };
            return view > 0;
        }
        if view > self.view {
            self.view = view;
            self.mode = Mode::Probing { probe: None };
            self.cool_off = COOL_OFF_MIN;
            return true;
        }
        false
    }

    /// The view of the client's lane it believes in.
    pub fn view(&self) -> u64 {
        self.view
    }

    /// The probe out, if one is (the simulator's omniscient adversaries
    /// read it).
    pub fn probe(&self) -> Option<RequestSeq> {
        match self.mode {
            Mode::Probing { probe: Some((s, _)) } => Some(s),
            _ => None,
        }
    }

    /// Whether view reports are wanted: a question of ours went out (its
    /// answers count until the next one). A report otherwise was not asked
    /// for.
    pub fn asking(&self) -> bool {
        self.reports.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProtocolParams;

    fn config(mode: OrderingMode, lanes: u32) -> ClusterConfig {
        let params = ProtocolParams {
            mode,
            pillars: lanes,
            ..ProtocolParams::default()
        };
        ClusterConfig::for_testing(4, 2, params, 1).0
    }

    fn q(s: u64) -> RequestSeq {
        RequestSeq(s)
    }

    /// A client that has learnt view 0 from f + 1 replicas at time 0 and
    /// had its probe accepted: it sends to the primary alone.
    fn learnt(cfg: &ClusterConfig, client: ClientId) -> FirstContact {
        let mut fc = FirstContact::new(cfg, client, true);
        if !fc.ask_due(0) {
            return fc; // every request to every replica in this mode
        }
        for r in 0..=cfg.f() {
            fc.on_report(cfg, ReplicaId(r as u32), &vec![0; cfg.lanes() as usize]);
        }
        let probe = fc.target(cfg, q(0), 0).expect("a probe");
        fc.on_accepted(q(0), 0);
        assert_eq!(fc.target(cfg, q(0), 0), Some(probe));
        // Past slow start: the primary has had requests accepted.
        for _ in 0..16 {
            fc.on_accepted(q(0), 0);
        }
        fc
    }

    /// After an accepted probe, one request alone, then two more for each
    /// one accepted: a primary that answers its probe and drops what
    /// follows gets one request, not a window.
    #[test]
    fn after_a_probe_the_primary_earns_its_requests_two_for_one() {
        let cfg = config(OrderingMode::Pbft, 1);
        let mut fc = FirstContact::new(&cfg, ClientId(0), true);
        assert!(fc.ask_due(0));
        fc.on_report(&cfg, ReplicaId(1), &[0]);
        fc.on_report(&cfg, ReplicaId(2), &[0]);
        assert_eq!(fc.target(&cfg, q(1), 0), Some(ReplicaId(0)), "the probe");
        fc.on_accepted(q(1), 0);
        let alone = |fc: &mut FirstContact, from: u64| {
            (from..from + 10)
                .filter(|s| fc.target(&cfg, q(*s), 0).is_some())
                .count()
        };
        assert_eq!(alone(&mut fc, 10), ALONE_START as usize);
        fc.on_accepted(q(10), 0);
        assert_eq!(alone(&mut fc, 20), 2);
        fc.on_accepted(q(20), 0);
        fc.on_accepted(q(21), 0);
        assert_eq!(alone(&mut fc, 30), 4);
        assert_eq!(alone(&mut fc, 35), 0, "spent");
        // A "busy" gives its request back; so does a spent budget that
        // nothing refilled for PROBE_MAX (a probe then).
        let _ = fc.on_busy(q(30), 0);
        assert_eq!(alone(&mut fc, 40), 1);
        assert_eq!(alone(&mut fc, 50), 0);
        assert_eq!(fc.target(&cfg, q(60), PROBE_MAX), Some(ReplicaId(0)), "a probe");
        assert_eq!(fc.probe(), Some(q(60)));
        fc.on_accepted(q(60), PROBE_MAX);
        assert_eq!(alone(&mut fc, 70), 1);
        // The dropped ones end it: a silence, every replica again.
        assert!(fc.on_silent(&cfg, q(70), ReplicaId(0), PROBE_MAX));
        assert_eq!(alone(&mut fc, 80), 0);
    }

    /// A new client sends to every replica until f + 1 replicas told it
    /// their views, then probes the primary of the view they reach: a
    /// client that joins after a view change does not start at a former
    /// primary, and a lone liar cannot send it elsewhere.
    #[test]
    fn a_new_client_learns_the_view_from_f_plus_one_replicas_before_sending_to_one() {
        let cfg = config(OrderingMode::Pbft, 1);
        let mut fc = FirstContact::new(&cfg, ClientId(0), true);
        assert_eq!(fc.target(&cfg, q(1), 0), None, "every replica while learning");
        assert!(fc.ask_due(0), "a new client asks at once");
        assert!(!fc.ask_due(ASK_EVERY / 2));
        assert!(fc.ask_due(ASK_EVERY), "and again while nobody answers");
        assert!(
            !fc.on_silent(&cfg, q(1), ReplicaId(0), ASK_EVERY),
            "sent to all: no silence"
        );
        fc.on_report(&cfg, ReplicaId(3), &[7]);
        assert_eq!(fc.target(&cfg, q(2), ASK_EVERY), None, "one report is not enough");
        assert!(fc.on_report(&cfg, ReplicaId(2), &[3]));
        assert_eq!(fc.view(), 3, "the second highest of {{7, 3}}");
        assert_eq!(fc.target(&cfg, q(3), ASK_EVERY), Some(ReplicaId(3)), "the probe");
        assert_eq!(fc.target(&cfg, q(4), ASK_EVERY), None, "one probe at a time");
        fc.on_accepted(q(3), ASK_EVERY);
        assert_eq!(fc.target(&cfg, q(5), ASK_EVERY), Some(ReplicaId(3)));
        // Learning view 0 ends the learning too.
        let mut fresh = FirstContact::new(&cfg, ClientId(0), true);
        assert!(fresh.ask_due(0));
        assert!(!fresh.on_report(&cfg, ReplicaId(0), &[0]));
        assert!(!fresh.on_report(&cfg, ReplicaId(1), &[0]));
        assert_eq!(fresh.target(&cfg, q(1), 0), Some(ReplicaId(0)));
    }

    /// rcc: the primary of the client's instance, from the first request
    /// (replica i coordinates instance i in every view: nothing to learn,
    /// nothing to ask), and of the next instance after a switch.
    #[test]
    fn an_rcc_client_sends_to_its_instance_primary_and_follows_its_switches() {
        let cfg = config(OrderingMode::Rcc, 4);
        let client = ClientId(6);
        let owner = cfg.owner_lane(client);
        let mut fc = FirstContact::new(&cfg, client, true);
        assert!(!fc.ask_due(0));
        assert_eq!(fc.target(&cfg, q(1), 0), Some(cfg.instance_primary(owner)));
        assert!(
            !fc.on_silent(&cfg, q(1), cfg.instance_primary(owner), 0),
            "no view to ask for"
        );
        assert_eq!(fc.target(&cfg, q(2), 1), None, "cooling off");
        let next = LaneId((owner.0 + 1) % 4);
        fc.set_lane(next);
        assert_eq!(
            fc.target(&cfg, q(3), 2),
            Some(cfg.instance_primary(next)),
            "a probe"
        );
        assert_eq!(fc.target(&cfg, q(4), 2), None);
        fc.on_accepted(q(3), 3);
        assert_eq!(fc.target(&cfg, q(5), 3), Some(cfg.instance_primary(next)));
        fc.on_accepted(q(5), 3);
        assert!(!fc.on_report(&cfg, ReplicaId(0), &[9, 9, 9, 9]));
        assert_eq!(fc.target(&cfg, q(6), 3), Some(cfg.instance_primary(next)));
    }

    #[test]
    fn only_pbft_and_cop_with_a_fixed_primary_and_rcc_send_to_one_replica() {
        let now: Micros = 0;
        for (mode, one) in [
            (OrderingMode::Pbft, true),
            (OrderingMode::Cop, true),
            (OrderingMode::Rcc, true),
            (OrderingMode::Dispel, false),
            (OrderingMode::Sarek, false),
        ] {
            let cfg = config(mode, 2);
            let mut fc = learnt(&cfg, ClientId(1));
            assert_eq!(fc.target(&cfg, q(1), now).is_some(), one, "{mode:?}");
            let mut off = FirstContact::new(&cfg, ClientId(1), false);
            assert_eq!(off.target(&cfg, q(1), now), None);
        }
        let mut cfg = config(OrderingMode::Cop, 2);
        cfg.params.leader_rotation = LeaderRotation::BlockWise;
        let mut fc = FirstContact::new(&cfg, ClientId(1), true);
        assert!(!fc.ask_due(now), "nothing to learn");
        assert_eq!(fc.target(&cfg, q(1), now), None);
    }

    /// A silence means every replica for a while (doubling), then one probe
    /// to the primary; the primary again only once the probe is answered.
    #[test]
    fn a_silent_primary_is_probed_with_one_request_after_cooling_off() {
        let cfg = config(OrderingMode::Pbft, 1);
        let mut fc = learnt(&cfg, ClientId(0));
        let t0: Micros = 5_000_000;
        assert_eq!(fc.target(&cfg, q(1), t0), Some(ReplicaId(0)));
        assert_eq!(fc.target(&cfg, q(2), t0), Some(ReplicaId(0)));
        assert!(fc.on_silent(&cfg, q(1), ReplicaId(0), t0), "asks for views");
        assert!(
            !fc.on_silent(&cfg, q(2), ReplicaId(0), t0),
            "one silence per cooling-off period"
        );
        assert_eq!(fc.target(&cfg, q(3), t0 + COOL_OFF_MIN / 2), None);
        let t1 = t0 + COOL_OFF_MIN;
        assert_eq!(fc.target(&cfg, q(4), t1), Some(ReplicaId(0)), "the probe");
        assert_eq!(fc.target(&cfg, q(5), t1), None, "one probe at a time");
        // The probe is lost too: twice as long now.
        assert!(fc.on_silent(&cfg, q(4), ReplicaId(0), t1));
        assert_eq!(fc.target(&cfg, q(6), t1 + COOL_OFF_MIN), None);
        let t2 = t1 + 2 * COOL_OFF_MIN;
        assert_eq!(fc.target(&cfg, q(7), t2), Some(ReplicaId(0)));
        fc.on_accepted(q(7), t2);
        assert_eq!(fc.target(&cfg, q(8), t2), Some(ReplicaId(0)));
        fc.on_accepted(q(8), t2);
        assert_eq!(
            fc.target(&cfg, q(9), t2),
            Some(ReplicaId(0)),
            "the primary for all again"
        );
        // A late answer to an earlier request is no probe result.
        assert!(fc.on_silent(&cfg, q(8), ReplicaId(0), t2));
        fc.on_accepted(q(1), t2);
        assert_eq!(fc.target(&cfg, q(10), t2), None);
    }

    #[test]
    fn while_cooling_off_views_are_asked_for_every_so_often() {
        let cfg = config(OrderingMode::Pbft, 1);
        let mut fc = learnt(&cfg, ClientId(0));
        let t0: Micros = 5_000_000;
        assert!(!fc.ask_due(t0), "not while the primary answers");
        fc.target(&cfg, q(1), t0);
        assert!(fc.on_silent(&cfg, q(1), ReplicaId(0), t0));
        assert!(!fc.ask_due(t0 + ASK_EVERY / 2));
        assert!(fc.ask_due(t0 + ASK_EVERY));
        // And while a probe is out.
        let t1 = t0 + COOL_OFF_MIN;
        assert_eq!(fc.target(&cfg, q(2), t1), Some(ReplicaId(0)));
        assert!(fc.ask_due(t1 + ASK_EVERY));
        fc.on_accepted(q(2), t1 + ASK_EVERY);
        assert!(!fc.ask_due(t1 + 4 * ASK_EVERY), "not once the primary answers");
    }

    #[test]
    fn the_view_f_plus_one_replicas_reach_is_adopted_and_one_liar_moves_nothing() {
        let cfg = config(OrderingMode::Pbft, 1);
        let mut fc = learnt(&cfg, ClientId(0));
        let t0: Micros = 5_000_000;
        fc.target(&cfg, q(1), t0);
        assert!(fc.on_silent(&cfg, q(1), ReplicaId(0), t0));
        // A Byzantine replica claims view 9; one correct replica says 1.
        fc.on_report(&cfg, ReplicaId(3), &[9]);
        assert_eq!(fc.view(), 0, "one report is not enough");
        fc.on_report(&cfg, ReplicaId(1), &[1]);
        assert_eq!(fc.view(), 1, "the second highest of two: 1, not the liar's 9");
        assert!(fc.asking());
        assert_eq!(
            fc.target(&cfg, q(2), t0),
            Some(ReplicaId(1)),
            "the new primary, probed at once"
        );
    }

    /// A faulty replica that answers first with an old view cannot hold
    /// the client back: later answers to the same question still count.
    #[test]
    fn a_liar_reporting_low_first_does_not_hide_the_new_view() {
        let cfg = config(OrderingMode::Pbft, 1);
        let mut fc = learnt(&cfg, ClientId(0));
        let t0: Micros = 5_000_000;
        fc.target(&cfg, q(1), t0);
        assert!(fc.on_silent(&cfg, q(1), ReplicaId(0), t0));
        fc.on_report(&cfg, ReplicaId(3), &[0]);
        fc.on_report(&cfg, ReplicaId(1), &[1]);
        assert_eq!(fc.view(), 0, "{{0, 1}}: the second highest is 0");
        fc.on_report(&cfg, ReplicaId(2), &[1]);
        assert_eq!(fc.view(), 1, "{{0, 1, 1}}: 1");
    }

    /// One result or a "busy" from the primary alone proves nothing; a
    /// probe that is neither accepted nor found silent expires.
    #[test]
    fn a_probe_ends_with_acceptance_busy_silence_or_expiry() {
        let cfg = config(OrderingMode::Pbft, 1);
        let mut fc = learnt(&cfg, ClientId(0));
        let t0: Micros = 5_000_000;
        fc.target(&cfg, q(1), t0);
        fc.on_silent(&cfg, q(1), ReplicaId(0), t0);
        let t1 = t0 + COOL_OFF_MIN;
        assert_eq!(fc.target(&cfg, q(2), t1), Some(ReplicaId(0)));
        // "Busy" ends the probe without a silence; the next request probes.
        fc.on_busy(q(2), t1);
        assert_eq!(fc.target(&cfg, q(3), t1), Some(ReplicaId(0)));
        assert_eq!(fc.target(&cfg, q(4), t1), None);
        // Its caller gave up: past PROBE_MAX it counts as a silence.
        assert_eq!(fc.target(&cfg, q(5), t1 + PROBE_MAX), None);
        assert!(fc.ask_due(t1 + PROBE_MAX), "and asks for the view at once");
        let t2 = t1 + PROBE_MAX + 2 * COOL_OFF_MIN;
        assert_eq!(
            fc.target(&cfg, q(6), t2),
            Some(ReplicaId(0)),
            "probing after the longer period"
        );
        fc.on_accepted(q(6), t2);
        assert_eq!(fc.target(&cfg, q(7), t2), Some(ReplicaId(0)));
        fc.on_accepted(q(7), t2);
        assert_eq!(fc.target(&cfg, q(8), t2), Some(ReplicaId(0)));
    }

    /// A faulty former primary answering "busy" to everything: the client
    /// asks for the view (at most every `ASK_EVERY`) and moves on.
    #[test]
    fn busy_answers_from_the_primary_alone_make_the_client_ask_for_the_view() {
        let cfg = config(OrderingMode::Pbft, 1);
        let mut fc = learnt(&cfg, ClientId(0));
        let t0: Micros = 5_000_000;
        assert_eq!(fc.target(&cfg, q(1), t0), Some(ReplicaId(0)));
        assert!(fc.on_busy(q(1), t0));
        assert!(!fc.on_busy(q(2), t0 + ASK_EVERY / 2));
        fc.on_report(&cfg, ReplicaId(1), &[1]);
        fc.on_report(&cfg, ReplicaId(2), &[1]);
        assert_eq!(fc.target(&cfg, q(3), t0 + ASK_EVERY), Some(ReplicaId(1)));
    }

    #[test]
    fn a_report_of_an_older_view_leaves_ours() {
        let cfg = config(OrderingMode::Cop, 2);
        let client = ClientId(1);
        let lane = cfg.owner_lane(client).index();
        let mut fc = learnt(&cfg, client);
        let t0: Micros = 5_000_000;
        fc.target(&cfg, q(1), t0);
        fc.on_silent(&cfg, q(1), ReplicaId(0), t0);
        let mut views = vec![0, 0];
        views[lane] = 2;
        fc.on_report(&cfg, ReplicaId(0), &views);
        fc.on_report(&cfg, ReplicaId(1), &views);
        assert_eq!(fc.view(), 2);
        assert_eq!(fc.target(&cfg, q(2), t0), Some(ReplicaId(2)));
        fc.on_accepted(q(2), t0);
        // A request sent to the old primary times out late: no silence of ours.
        assert!(!fc.on_silent(&cfg, q(1), ReplicaId(0), t0));
        assert_eq!(fc.target(&cfg, q(3), t0), Some(ReplicaId(2)));
        assert!(fc.on_silent(&cfg, q(3), ReplicaId(2), t0));
        fc.on_report(&cfg, ReplicaId(0), &[1, 1]);
        fc.on_report(&cfg, ReplicaId(1), &[1, 1]);
        assert_eq!(fc.view(), 2, "views only move up");
        assert_eq!(fc.target(&cfg, q(4), t0 + COOL_OFF_MAX), Some(ReplicaId(2)));
    }
}
