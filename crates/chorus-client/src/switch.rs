//! RCC §III-E: a client whose requests keep timing out asks to be served by
//! another instance with `SWITCHINSTANCE(c, j)`. The choice is
//! deterministic: the instance after the one the client believes owns it.

use bytes::Bytes;
use chorus_core::switch::{SWITCHED_PREFIX, SWITCH_REFUSED_PREFIX};
use chorus_core::{ClientId, ClusterConfig, OrderingMode};

/// What the client believes about its instance, and whether a switch is
/// under way.
#[derive(Debug)]
pub(crate) struct Instance {
    /// `None` outside `rcc`: there are no instances to switch between.
    lanes: Option<u32>,
    owner: u32,
    /// Switches that failed since the last one that told us our owner: the
    /// next one asks a further instance (the belief may be stale, e.g. after
    /// a restart, and the next one may be the censor).
    misses: u32,
}

impl Instance {
    pub(crate) fn new(config: &ClusterConfig, id: ClientId) -> Instance {
        let rcc = config.params.mode == OrderingMode::Rcc && config.lanes() > 1;
        let lanes = config.lanes().max(1);
        Instance {
            lanes: rcc.then_some(lanes),
            owner: (id.0 % lanes as u64) as u32,
            misses: 0,
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.lanes.is_some()
    }

    pub(crate) fn owner(&self) -> u32 {
        self.owner
    }

    /// The instance to ask for next.
    pub(crate) fn next_target(&self) -> Option<u32> {
        self.lanes.map(|m| {
            // Every instance but the believed owner, in turn.
            let step = 1 + self.misses % (m - 1).max(1);
            (self.owner + step) % m
        })
    }

    /// A switch to `target` failed without telling us our owner. A refusal
    /// at admission as `BadSwitch` (the replicas' `RejectReason`, by f+1
    /// replicas, so by a correct one) for a target below m means `target`
    /// owns us already: our belief was stale.
    pub(crate) fn on_failed(&mut self, target: u32, reason: &str) {
        if reason.contains("BadSwitch") {
            self.owner = target;
            self.misses = 0;
        } else {
            self.misses = self.misses.wrapping_add(1);
        }
    }

    /// The accepted reply to a switch to `target`: the cluster applied it,
    /// or says `target` owns us already; any other refusal changes nothing.
    pub(crate) fn on_reply(&mut self, target: u32, reply: &Bytes) -> bool {
        let applied = reply.starts_with(SWITCHED_PREFIX.as_bytes());
        let already = reply.starts_with(format!("{SWITCH_REFUSED_PREFIX}already-owner").as_bytes());
        if applied || already {
            self.owner = target;
            self.misses = 0;
        } else {
            self.misses = self.misses.wrapping_add(1);
        }
        applied
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{OrderingMode, ProtocolParams, SwitchOutcome};

    fn cfg(mode: OrderingMode) -> ClusterConfig {
        let p = ProtocolParams {
            mode,
            pillars: 4,
            ..ProtocolParams::default()
        };
        ClusterConfig::for_testing(4, 2, p, 1).0
    }

    #[test]
    fn the_next_instance_follows_the_believed_owner() {
        let mut i = Instance::new(&cfg(OrderingMode::Rcc), ClientId(7));
        assert_eq!((i.owner(), i.next_target()), (3, Some(0)));
        let refused = SwitchOutcome::InProgress.reply();
        assert!(!i.on_reply(0, &refused));
        assert_eq!(i.owner(), 3);
        let applied = Bytes::from(format!("{SWITCHED_PREFIX}0"));
        assert!(i.on_reply(0, &applied));
        assert_eq!((i.owner(), i.next_target()), (0, Some(1)));
        assert!(!i.on_reply(1, &SwitchOutcome::AlreadyOwner.reply()));
        assert_eq!(i.owner(), 1);
        assert_eq!(
            Instance::new(&cfg(OrderingMode::Pbft), ClientId(7)).next_target(),
            None
        );
    }

    /// Review of SWITCHINSTANCE, finding 2: a client whose belief is stale
    /// (restarted; the cluster moved it to 2 meanwhile) and whose next
    /// target is its real owner, the censor, must not retry that forever.
    #[test]
    fn a_stale_belief_is_corrected_and_failed_switches_try_further_instances() {
        let mut i = Instance::new(&cfg(OrderingMode::Rcc), ClientId(1));
        assert_eq!((i.owner(), i.next_target()), (1, Some(2)));
        i.on_failed(2, "request rejected by f+1 replicas: BadSwitch");
        assert_eq!((i.owner(), i.next_target()), (2, Some(3)));
        i.on_failed(3, "request 9 timed out after 30s");
        assert_eq!(i.next_target(), Some(0));
        i.on_failed(0, "request 10 timed out after 30s");
        assert_eq!(i.next_target(), Some(1));
        i.on_failed(1, "request 11 timed out after 30s");
        assert_eq!(i.next_target(), Some(3), "round again, never the owner");
    }
}
