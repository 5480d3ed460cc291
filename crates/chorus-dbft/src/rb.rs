//! Bracha reliable broadcast of one proposer's batch in one epoch, with
//! hash-only ECHO/READY (\[RB21\] lines 1–13, Dispel §4.4; spec §4.1, §5.3).
//! This part only counts digests; the epoch keeps the bytes, keyed by digest (P12).

use crate::config::DbftConfig;
use crate::counters::DropReason;
use chorus_core::Digest;
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RbOut {
    Echo(Digest),
    Ready(Digest),
    Deliver(Digest),
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Rb {
    /// Digest of the first INIT from the proposer: the only one echoed.
    first_init: Option<Digest>,
    extra_inits: usize,
    echo_from: Vec<Option<Digest>>,
    echo_count: BTreeMap<Digest, usize>,
    ready_from: Vec<Option<Digest>>,
    ready_count: BTreeMap<Digest, usize>,
    sent_ready: bool,
    delivered: Option<Digest>,
}

impl Rb {
    pub fn new(cfg: &DbftConfig) -> Rb {
        Rb {
            first_init: None,
            extra_inits: 0,
            echo_from: vec![None; cfg.n],
            echo_count: BTreeMap::new(),
            ready_from: vec![None; cfg.n],
            ready_count: BTreeMap::new(),
            sent_ready: false,
            delivered: None,
        }
    }

    pub fn delivered(&self) -> Option<Digest> {
        self.delivered
    }

    pub fn first_init(&self) -> Option<Digest> {
        self.first_init
    }

    /// INIT, ECHOes and READYs counted so far (one per sender and kind): a
    /// measure of progress before delivery (the wrapper's stall test).
    pub fn votes_seen(&self) -> u64 {
        let echoes: usize = self.echo_count.values().sum();
        let readies: usize = self.ready_count.values().sum();
        (usize::from(self.first_init.is_some()) + echoes + readies) as u64
    }

    /// Anything of this broadcast seen here (INIT, ECHO or READY): its
    /// proposer did send it, so its delivery is probably on the way.
    pub fn under_way(&self) -> bool {
        self.first_init.is_some()
            || self.echo_from.iter().any(Option::is_some)
            || self.ready_from.iter().any(Option::is_some)
    }

    /// Replicas that echoed or readied `d`: the first places to fetch from (§5.3).
    pub fn holders(&self, d: &Digest) -> Vec<usize> {
        (0..self.echo_from.len())
            .filter(|&i| self.echo_from[i] == Some(*d) || self.ready_from[i] == Some(*d))
            .collect()
    }

    /// INIT with digest `d` from the proposer itself (the engine checked the sender, P11).
    /// Ok(true): keep the bytes. The first INIT is echoed; later, different ones
    /// are kept up to `max_extra_inits` (they may serve a fetch) and never echoed.
    pub fn on_init(&mut self, cfg: &DbftConfig, d: Digest, out: &mut Vec<RbOut>) -> Result<bool, DropReason> {
        match self.first_init {
            None => {
                self.first_init = Some(d);
                out.push(RbOut::Echo(d));
                Ok(true)
            }
            Some(f) if f == d => Err(DropReason::Duplicate),
            Some(_) => {
                if self.extra_inits >= cfg.max_extra_inits {
                    return Err(DropReason::ExtraInit);
                }
                self.extra_inits += 1;
                Ok(true)
            }
        }
    }

    pub fn on_echo(
        &mut self,
        cfg: &DbftConfig,
        from: usize,
        d: Digest,
        out: &mut Vec<RbOut>,
    ) -> Result<(), DropReason> {
        if self.echo_from[from].is_some() {
            return Err(DropReason::Duplicate);
        }
        self.echo_from[from] = Some(d);
        let c = self.echo_count.entry(d).or_default();
        *c += 1;
        if *c >= cfg.echo_quorum() && !self.sent_ready {
            self.sent_ready = true;
            out.push(RbOut::Ready(d));
        }
        Ok(())
    }

    pub fn on_ready(
        &mut self,
        cfg: &DbftConfig,
        from: usize,
        d: Digest,
        out: &mut Vec<RbOut>,
    ) -> Result<(), DropReason> {
        if self.ready_from[from].is_some() {
            return Err(DropReason::Duplicate);
        }
        self.ready_from[from] = Some(d);
        let c = self.ready_count.entry(d).or_default();
        *c += 1;
        let c = *c;
        if c >= cfg.small_quorum() && !self.sent_ready {
            // Amplification: a correct replica already sent READY(d).
            self.sent_ready = true;
            out.push(RbOut::Ready(d));
        }
        if c >= cfg.rb_deliver() && self.delivered.is_none() {
            self.delivered = Some(d);
            out.push(RbOut::Deliver(d));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(x: u8) -> Digest {
        Digest([x; 32])
    }

    #[test]
    fn rb_echo_ready_deliver_thresholds_hash_only() {
        let cfg = DbftConfig::new(4);
        let mut rb = Rb::new(&cfg);
        let mut out = vec![];
        assert_eq!(rb.on_init(&cfg, d(1), &mut out), Ok(true));
        assert_eq!(out, vec![RbOut::Echo(d(1))]);
        out.clear();
        rb.on_echo(&cfg, 0, d(1), &mut out).unwrap();
        rb.on_echo(&cfg, 1, d(1), &mut out).unwrap();
        assert!(out.is_empty(), "2 < ⌈(n+t+1)/2⌉ = 3 echoes");
        rb.on_echo(&cfg, 2, d(1), &mut out).unwrap();
        assert_eq!(out, vec![RbOut::Ready(d(1))]);
        out.clear();
        rb.on_ready(&cfg, 0, d(1), &mut out).unwrap();
        rb.on_ready(&cfg, 1, d(1), &mut out).unwrap();
        assert!(out.is_empty());
        rb.on_ready(&cfg, 3, d(1), &mut out).unwrap();
        assert_eq!(out, vec![RbOut::Deliver(d(1))]);
        assert_eq!(rb.holders(&d(1)), vec![0, 1, 2, 3]);
    }

    #[test]
    fn rb_ready_amplification_on_t_plus_1() {
        let cfg = DbftConfig::new(4);
        let mut rb = Rb::new(&cfg);
        let mut out = vec![];
        rb.on_ready(&cfg, 0, d(7), &mut out).unwrap();
        assert!(out.is_empty(), "one READY may be Byzantine");
        rb.on_ready(&cfg, 1, d(7), &mut out).unwrap();
        assert_eq!(out, vec![RbOut::Ready(d(7))]);
    }

    #[test]
    fn rb_first_echo_per_sender_wins_and_extra_inits_bounded() {
        let cfg = DbftConfig::new(4);
        let mut rb = Rb::new(&cfg);
        let mut out = vec![];
        rb.on_echo(&cfg, 3, d(1), &mut out).unwrap();
        assert_eq!(rb.on_echo(&cfg, 3, d(2), &mut out), Err(DropReason::Duplicate));
        assert_eq!(rb.on_init(&cfg, d(1), &mut out), Ok(true));
        assert_eq!(rb.on_init(&cfg, d(1), &mut out), Err(DropReason::Duplicate));
        assert_eq!(rb.on_init(&cfg, d(2), &mut out), Ok(true));
        assert_eq!(rb.on_init(&cfg, d(3), &mut out), Err(DropReason::ExtraInit));
        assert_eq!(out, vec![RbOut::Echo(d(1))], "only the first INIT is echoed");
    }

    #[test]
    fn rb_ready_for_hash_never_broadcast_is_not_delivered_by_t_senders() {
        let cfg = DbftConfig::new(7);
        let mut rb = Rb::new(&cfg);
        let mut out = vec![];
        for s in 0..cfg.t {
            rb.on_echo(&cfg, s, d(9), &mut out).unwrap();
            rb.on_ready(&cfg, s, d(9), &mut out).unwrap();
        }
        assert!(out.is_empty());
        assert_eq!(rb.delivered(), None);
    }
}
