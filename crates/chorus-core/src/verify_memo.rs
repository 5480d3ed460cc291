//! Memoised signature verdicts, for a thread that asks for them.
//!
//! The simulator runs every replica on one thread, so every signature that
//! travels to n − 1 peers is verified up to n − 1 times: at n = 64 that was
//! 70 % of the simulator's time (issue 15, `docs/sim.md`). A verdict is a
//! pure function of (key, message digest, signature), so memoising it
//! changes no outcome, and the resource model still charges each replica
//! its own verification.
//!
//! The replica runtime's core thread memoises too, but only to receive the
//! verdicts its pillars reached ahead of it (`PreVerified`): COP §4 puts
//! the per-message work that needs no total order in the pillars, so a
//! signature is checked on the pillar thread that read the message, in
//! parallel with the other pillars, and the core thread finds the answer.

use crate::crypto::{Digest, Signature};
use std::cell::RefCell;
use std::collections::HashMap;

type MemoKey = ([u8; 32], [u8; 32], [u8; 64]);

thread_local! {
    /// `None` unless this thread asked for memoised verdicts.
    static MEMO: RefCell<Option<Memo>> = const { RefCell::new(None) };
}

struct Memo {
    verdicts: HashMap<MemoKey, bool>,
    capacity: usize,
}

/// Memoise signature verdicts on this thread, at most `capacity` of them
/// (the memo is emptied when full); `capacity == 0` turns memoisation off.
pub fn memoize_verifications(capacity: usize) {
    MEMO.with(|m| {
        *m.borrow_mut() = (capacity > 0).then(|| Memo {
            verdicts: HashMap::new(),
            capacity,
        });
    });
}

/// Whether this thread memoises verdicts.
pub fn memoizing() -> bool {
    MEMO.with(|m| m.borrow().is_some())
}

/// `check()`'s verdict on `sig` by `key` over `msg`, from the memo if this
/// thread keeps one and has seen the same triple.
pub fn verdict(key: &[u8; 32], msg: &Digest, sig: &Signature, check: impl FnOnce() -> bool) -> bool {
    MEMO.with(|m| {
        let mut m = m.borrow_mut();
        let Some(memo) = m.as_mut() else {
            return check();
        };
        let k = (*key, *msg.as_bytes(), sig.0);
        if let Some(v) = memo.verdicts.get(&k) {
            return *v;
        }
        let v = check();
        if memo.verdicts.len() >= memo.capacity {
            memo.verdicts.clear();
        }
        memo.verdicts.insert(k, v);
        v
    })
}

/// Valid signatures one thread checked for another (a pillar for the core):
/// only `check` adds to it, and only what verified, so installing it into
/// the asking thread's memo gives the answers that thread would compute.
#[derive(Default)]
pub struct PreVerified(Vec<MemoKey>);

impl PreVerified {
    /// `check()`'s verdict on `sig` by `key` over `msg`, computed now (not
    /// from this thread's memo), and kept if valid.
    pub fn check(
        &mut self,
        key: &[u8; 32],
        msg: &Digest,
        sig: &Signature,
        check: impl FnOnce() -> bool,
    ) -> bool {
        let valid = check();
        if valid {
            self.0.push((*key, *msg.as_bytes(), sig.0));
        }
        valid
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Hand the verdicts to this thread's memo (nothing if it keeps none).
    pub fn install(self) {
        MEMO.with(|m| {
            let mut m = m.borrow_mut();
            let Some(memo) = m.as_mut() else {
                return;
            };
            for k in self.0 {
                if memo.verdicts.len() >= memo.capacity {
                    memo.verdicts.clear();
                }
                memo.verdicts.insert(k, true);
            }
        });
    }
}

impl std::fmt::Debug for PreVerified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PreVerified({} valid)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClusterTag, Identity, SigKind};

    /// A memoised verdict is the verdict: good and bad signatures give the
    /// same answers with the memo on, across the memo emptying when full,
    /// and after it is turned off again.
    #[test]
    fn memoised_verdicts_equal_fresh_ones() {
        let id = Identity::from_seed(&[3; 32]);
        let other = Identity::from_seed(&[4; 32]).public();
        let tag = ClusterTag::from_digest(Digest::of(b"cluster"));
        let cases: Vec<(bool, Digest, Signature)> = (0..6u8)
            .map(|i| {
                let d = Digest::of(&[i]);
                let mut sig = id.sign_bound(&tag, SigKind::Prepare, &d);
                if i % 2 == 1 {
                    sig.0[7] ^= 1;
                }
                (i % 3 == 2, d, sig)
            })
            .collect();
        let check = |(theirs, d, s): &(bool, Digest, Signature)| {
            let pk = if *theirs { other } else { id.public() };
            pk.verify_bound(&tag, SigKind::Prepare, d, s)
        };
        let fresh: Vec<bool> = cases.iter().map(check).collect();
        assert_eq!(fresh, [true, false, false, false, true, false]);
        memoize_verifications(4);
        assert!(memoizing());
        for _ in 0..3 {
            assert_eq!(cases.iter().map(check).collect::<Vec<_>>(), fresh);
        }
        memoize_verifications(0);
        assert!(!memoizing());
        assert_eq!(cases.iter().map(check).collect::<Vec<_>>(), fresh);
    }

    /// Only verdicts `PreVerified::check` found valid travel, and once
    /// installed the asking thread answers from them without checking.
    #[test]
    fn pre_verified_keeps_only_valid_signatures_and_answers_from_them() {
        let id = Identity::from_seed(&[5; 32]);
        let tag = ClusterTag::from_digest(Digest::of(b"cluster"));
        let pk = id.public();
        let d = Digest::of(b"msg");
        let good = id.sign_bound(&tag, SigKind::PrePrepare, &d);
        let mut bad = good;
        bad.0[3] ^= 1;
        let msg = tag.bind(SigKind::PrePrepare, &d);
        let mut pre = PreVerified::default();
        assert!(pre.check(&pk.sign, &msg, &good, || pk.verify(msg.as_bytes(), &good)));
        assert!(!pre.check(&pk.sign, &msg, &bad, || pk.verify(msg.as_bytes(), &bad)));
        assert_eq!(pre.len(), 1);
        memoize_verifications(16);
        pre.install();
        // Answered from the memo: the check is never run.
        assert!(verdict(&pk.sign, &msg, &good, || unreachable!("pre-verified")));
        assert!(!verdict(&pk.sign, &msg, &bad, || false));
        memoize_verifications(0);
    }
}
