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
}

impl Instance {
    pub(crate) fn new(config: &ClusterConfig, id: ClientId) -> Instance {
        let rcc = config.params.mode == OrderingMode::Rcc && config.lanes() > 1;
        let lanes = config.lanes().max(1);
        Instance {
            lanes: rcc.then_some(lanes),
            owner: (id.0 % lanes as u64) as u32,
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
        self.lanes.map(|m| (self.owner + 1) % m)
    }

    /// The accepted reply to a switch to `target`: the cluster applied it,
    /// or says `target` owns us already; any other refusal changes nothing.
    pub(crate) fn on_reply(&mut self, target: u32, reply: &Bytes) -> bool {
        let applied = reply.starts_with(SWITCHED_PREFIX.as_bytes());
        let already = reply.starts_with(format!("{SWITCH_REFUSED_PREFIX}already-owner").as_bytes());
        if applied || already {
            self.owner = target;
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
}
