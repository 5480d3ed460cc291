//! A network of bare binary-consensus instances (one per replica) with a
//! scripted adversary: the scheduler decides exactly which message is
//! delivered when. Own broadcasts are processed at once (a replica receives
//! its own message without delay).

use crate::binary::{BinOut, Binary, Input, TimerKind};
use crate::msg::{BinMsg, Round};
use crate::DbftConfig;
use std::collections::VecDeque;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BFlight {
    pub from: usize,
    pub to: usize,
    pub msg: BinMsg,
}

pub struct BinNet {
    pub cfg: DbftConfig,
    pub nodes: Vec<Option<Binary>>,
    pub inflight: Vec<BFlight>,
    pub timers: Vec<(usize, Round, TimerKind, u64)>,
    pub decisions: Vec<Vec<bool>>,
    pub sent: Vec<Vec<BinMsg>>,
}

impl BinNet {
    pub fn new(cfg: DbftConfig, byzantine: &[usize]) -> BinNet {
        let n = cfg.n;
        let nodes = (0..n)
            .map(|i| (!byzantine.contains(&i)).then(|| Binary::new(&cfg, i)))
            .collect();
        BinNet {
            cfg,
            nodes,
            inflight: vec![],
            timers: vec![],
            decisions: vec![vec![]; n],
            sent: vec![vec![]; n],
        }
    }

    pub fn node(&self, i: usize) -> &Binary {
        self.nodes[i].as_ref().expect("correct")
    }

    pub fn correct(&self) -> Vec<usize> {
        (0..self.cfg.n).filter(|&i| self.nodes[i].is_some()).collect()
    }

    pub fn propose(&mut self, i: usize, input: Input) {
        let mut out = vec![];
        let cfg = self.cfg.clone();
        self.nodes[i].as_mut().unwrap().propose(&cfg, input, &mut out);
        self.apply(i, out);
    }

    pub fn rb_delivered(&mut self, i: usize) {
        let mut out = vec![];
        let cfg = self.cfg.clone();
        self.nodes[i].as_mut().unwrap().rb_delivered(&cfg, &mut out);
        self.apply(i, out);
    }

    pub fn inject(&mut self, from: usize, to: usize, msg: BinMsg) {
        self.inflight.push(BFlight { from, to, msg });
    }

    /// A Byzantine replica sends `msg` to each of `to`.
    pub fn inject_to(&mut self, from: usize, to: &[usize], msg: BinMsg) {
        for &t in to {
            self.inject(from, t, msg.clone());
        }
    }

    fn apply(&mut self, i: usize, outs: Vec<BinOut>) {
        let cfg = self.cfg.clone();
        let mut q: VecDeque<BinOut> = outs.into();
        while let Some(o) = q.pop_front() {
            match o {
                BinOut::Broadcast(m) => {
                    self.sent[i].push(m.clone());
                    for to in 0..cfg.n {
                        if to != i {
                            self.inflight.push(BFlight {
                                from: i,
                                to,
                                msg: m.clone(),
                            });
                        }
                    }
                    let mut out = vec![];
                    let _ = self.nodes[i].as_mut().unwrap().on_msg(&cfg, i, &m, &mut out);
                    q.extend(out);
                }
                BinOut::SetTimer {
                    round,
                    which,
                    after_ms,
                } => self.timers.push((i, round, which, after_ms)),
                BinOut::Decide(v) => self.decisions[i].push(v),
            }
        }
    }

    pub fn deliver(&mut self, f: BFlight) {
        let cfg = self.cfg.clone();
        if let Some(node) = self.nodes[f.to].as_mut() {
            let mut out = vec![];
            let _ = node.on_msg(&cfg, f.from, &f.msg, &mut out);
            self.apply(f.to, out);
        }
    }

    /// Deliver, in order, every in-flight message matching `pred` (including
    /// ones produced meanwhile), until none matches.
    pub fn deliver_where(&mut self, mut pred: impl FnMut(&BFlight) -> bool) {
        while let Some(idx) = self.inflight.iter().position(&mut pred) {
            let f = self.inflight.remove(idx);
            self.deliver(f);
        }
    }

    /// Fire every pending timer (an asynchronous adversary may let timers
    /// expire at any time), until none is pending.
    pub fn fire_timers(&mut self) {
        let cfg = self.cfg.clone();
        while !self.timers.is_empty() {
            let (i, round, which, _) = self.timers.remove(0);
            if let Some(node) = self.nodes[i].as_mut() {
                let mut out = vec![];
                node.on_timer(&cfg, round, which, &mut out);
                self.apply(i, out);
            }
        }
    }

    /// Synchronous scheduling: all messages, then all timers, until quiet.
    pub fn sync(&mut self, max_iters: usize) {
        for _ in 0..max_iters {
            if self.inflight.is_empty() && self.timers.is_empty() {
                return;
            }
            self.deliver_where(|_| true);
            self.fire_timers();
        }
    }

    pub fn all_decided(&self) -> Option<bool> {
        let cs = self.correct();
        let v = *self.decisions[cs[0]].first()?;
        for &i in &cs {
            if self.decisions[i] != vec![v] {
                return None;
            }
        }
        Some(v)
    }
}
