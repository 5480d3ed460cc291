//! Memoised signature verdicts, for a thread that asks for them.
//!
//! The simulator runs every replica on one thread, so every signature that
//! travels to n − 1 peers is verified up to n − 1 times: at n = 64 that was
//! 70 % of the simulator's time (issue 15, `docs/sim.md`). A verdict is a
//! pure function of (key, message digest, signature), so memoising it
//! changes no outcome, and the resource model still charges each replica
//! its own verification. The replica runtime never turns it on.

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
}
