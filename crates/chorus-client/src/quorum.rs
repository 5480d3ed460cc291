//! The reply quorum of one request: a pure component fed with replies.
//!
//! Rules (DESIGN §4 "Replies"; PBFT §4.1 and §5.1.3):
//! * each replica has at most one vote; the replica is the channel-authenticated
//!   sender, so a Byzantine replica cannot vote for others;
//! * an ordered request is accepted on `f+1` matching result digests — at least
//!   one comes from a correct replica, which executed it in the agreed order;
//! * a read-only request (fast path, no ordering) needs a quorum (`2f+1` when
//!   `n = 3f+1`) of matching `read_only` replies, since replicas may answer it
//!   from different states; when that can no longer happen the caller falls
//!   back to an ordered request;
//! * digest-only replies count as votes, but a result is only produced once a
//!   full reply whose bytes hash to the winning digest has arrived;
//! * `f+1` matching rejections end an ordered request with an error (a
//!   Byzantine replica's reason alone cannot, as long as results may still
//!   win); `f+1` busy answers ask the caller to back off and retry;
//! * except `f+1` "abandoned" answers (`chorus_core::REJECT_ABANDONED`):
//!   those say the request counts as executed there with no reply left,
//!   which is also what replicas answer once a request's reply fell out of
//!   their per-client cache (the client ran on past a slow request, its
//!   designated repliers lagging). While the replicas that have not
//!   answered could still make `f+1` matching results, the request waits
//!   for them: reporting "it will not execute" for a request that did
//!   would invite the caller to run it again.

use bytes::Bytes;
use chorus_core::{ClusterConfig, Digest, ReplicaId, ReplyBody};

/// Which path the request is on.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Path {
    Ordered,
    ReadOnly,
}

/// What the caller should do after a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Keep waiting (and retransmitting).
    Pending,
    /// A result backed by enough matching replies.
    Accepted(Bytes),
    /// f+1 replicas rejected the request (ordered path only).
    Rejected(String),
    /// f+1 replicas are busy: back off, `clear_busy`, resend (ordered path only).
    Busy,
    /// The read-only fast path can no longer succeed: resend as an ordered request.
    FallBack,
}

/// Why a reply was not counted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ignored {
    UnknownReplica(ReplicaId),
    /// A fast-path reply to an ordered request or vice versa.
    WrongPath,
    /// The replica already cast a result or rejection vote.
    AlreadyVoted,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Vote {
    Silent,
    Busy,
    Result(Digest),
    Rejected(String),
}

#[derive(Clone, Debug)]
struct Candidate {
    digest: Digest,
    votes: usize,
    /// The bytes of a full reply that hashed to `digest`.
    bytes: Option<Bytes>,
}

/// Votes for one request. Memory is bounded by `n` votes and at most `n`
/// distinct candidate results.
#[derive(Clone, Debug)]
pub struct ReplyQuorum {
    path: Path,
    f: usize,
    need: usize,
    votes: Vec<Vote>,
    candidates: Vec<Candidate>,
}

impl ReplyQuorum {
    /// `n` replicas tolerating `f` faults; `quorum` is the Byzantine quorum size
    /// for `n` (`ClusterConfig::quorum`).
    pub fn new(path: Path, n: usize, f: usize, quorum: usize) -> ReplyQuorum {
        assert!(n > 3 * f, "n = {n} cannot tolerate f = {f} (needs n >= 3f+1)");
        assert!(
            quorum > f && quorum <= n,
            "quorum {quorum} out of range for n = {n}, f = {f}"
        );
        let need = match path {
            Path::Ordered => f + 1,
            Path::ReadOnly => quorum,
        };
        ReplyQuorum {
            path,
            f,
            need,
            votes: vec![Vote::Silent; n],
            candidates: Vec::new(),
        }
    }

    pub fn for_config(config: &ClusterConfig, path: Path) -> ReplyQuorum {
        ReplyQuorum::new(path, config.n(), config.f(), config.quorum())
    }

    pub fn path(&self) -> Path {
        self.path
    }

    /// Matching replies needed to accept a result.
    pub fn need(&self) -> usize {
        self.need
    }

    /// Count one reply from the authenticated sender `from`.
    pub fn on_reply(
        &mut self,
        from: ReplicaId,
        read_only: bool,
        body: ReplyBody,
    ) -> Result<Decision, Ignored> {
        let Some(vote) = self.votes.get(from.index()).cloned() else {
            return Err(Ignored::UnknownReplica(from));
        };
        if read_only != (self.path == Path::ReadOnly) {
            return Err(Ignored::WrongPath);
        }
        match (vote, body) {
            (Vote::Silent, ReplyBody::Busy) => self.votes[from.index()] = Vote::Busy,
            (Vote::Busy, ReplyBody::Busy) => {}
            (Vote::Silent | Vote::Busy, ReplyBody::Rejected(why)) => {
                self.votes[from.index()] = Vote::Rejected(why)
            }
            (Vote::Silent | Vote::Busy, body @ (ReplyBody::Full(_) | ReplyBody::Digest(_))) => {
                let digest = body
                    .result_digest()
                    .expect("full and digest replies carry a digest");
                self.votes[from.index()] = Vote::Result(digest);
                let i = self.candidate(digest);
                self.candidates[i].votes += 1;
                self.keep_bytes(i, body);
            }
            // A replica that answered with a digest may later send the full result
            // (e.g. to a retransmission): take the bytes, not a second vote.
            (Vote::Result(d), body @ ReplyBody::Full(_)) if body.result_digest() == Some(d) => {
                let i = self.candidate(d);
                if self.candidates[i].bytes.is_some() {
                    return Err(Ignored::AlreadyVoted);
                }
                self.keep_bytes(i, body);
            }
            (Vote::Result(_) | Vote::Rejected(_), _) => return Err(Ignored::AlreadyVoted),
        }
        Ok(self.decision())
    }

    fn candidate(&mut self, digest: Digest) -> usize {
        if let Some(i) = self.candidates.iter().position(|c| c.digest == digest) {
            return i;
        }
        debug_assert!(
            self.candidates.len() < self.votes.len(),
            "one candidate per voter at most"
        );
        self.candidates.push(Candidate {
            digest,
            votes: 0,
            bytes: None,
        });
        self.candidates.len() - 1
    }

    fn keep_bytes(&mut self, i: usize, body: ReplyBody) {
        if let ReplyBody::Full(b) = body {
            debug_assert_eq!(Digest::of(&b), self.candidates[i].digest);
            self.candidates[i].bytes.get_or_insert(b);
        }
    }

    fn count(&self, pred: impl Fn(&Vote) -> bool) -> usize {
        self.votes.iter().filter(|v| pred(v)).count()
    }

    /// The decision the votes so far support.
    pub fn decision(&self) -> Decision {
        if let Some(c) = self
            .candidates
            .iter()
            .find(|c| c.votes >= self.need && c.bytes.is_some())
        {
            return Decision::Accepted(c.bytes.clone().expect("checked"));
        }
        let silent = self.count(|v| *v == Vote::Silent);
        match self.path {
            Path::Ordered => {
                if self.count(|v| matches!(v, Vote::Rejected(_))) > self.f {
                    // f+1 matching reasons: at least one correct replica
                    // gave it. Without them, or for "abandoned", wait while
                    // results can still win; else the most common reason.
                    let (reason, votes) = self.rejection_reason();
                    let matching = votes > self.f && reason != chorus_core::REJECT_ABANDONED;
                    if matching || !self.results_still_possible() {
                        return Decision::Rejected(reason);
                    }
                }
                if self.count(|v| *v == Vote::Busy) > self.f {
                    return Decision::Busy;
                }
                Decision::Pending
            }
            Path::ReadOnly => {
                // Busy and rejecting replicas declined the fast path; only the
                // silent ones can still add votes.
                let best = self.candidates.iter().map(|c| c.votes).max().unwrap_or(0);
                if best + silent < self.need {
                    return Decision::FallBack;
                }
                Decision::Pending
            }
        }
    }

    /// Whether the replicas that have cast no result or rejection yet could
    /// still, with the votes for the leading result, reach `need` matching
    /// results.
    fn results_still_possible(&self) -> bool {
        let best = self.candidates.iter().map(|c| c.votes).max().unwrap_or(0);
        let open = self.count(|v| matches!(v, Vote::Silent | Vote::Busy));
        best + open >= self.need
    }

    /// The most common rejection reason (ties: the smallest string) and
    /// how many replicas gave it.
    fn rejection_reason(&self) -> (String, usize) {
        let mut reasons: Vec<&String> = self
            .votes
            .iter()
            .filter_map(|v| match v {
                Vote::Rejected(s) => Some(s),
                _ => None,
            })
            .collect();
        reasons.sort();
        let mut best: Option<(&String, usize)> = None;
        for group in reasons.chunk_by(|a, b| a == b) {
            if best.map(|(_, n)| n) < Some(group.len()) {
                best = Some((group[0], group.len()));
            }
        }
        best.map(|(s, n)| (s.clone(), n)).unwrap_or_default()
    }

    /// Some result has enough matching votes but no full reply yet (the
    /// designated replica is slow or faulty). At least one correct replica
    /// voted for it, so a retransmission, which replicas answer in full,
    /// brings the bytes.
    pub fn missing_full_result(&self) -> bool {
        self.candidates
            .iter()
            .any(|c| c.votes >= self.need && c.bytes.is_none())
    }

    /// Busy answers are transient: forget them before resending.
    pub fn clear_busy(&mut self) {
        for v in &mut self.votes {
            if *v == Vote::Busy {
                *v = Vote::Silent;
            }
        }
    }

    /// A one-line account of the votes, for timeouts and logs.
    pub fn progress(&self) -> String {
        let best = self.candidates.iter().max_by_key(|c| c.votes);
        let matching = best.map_or(0, |c| c.votes);
        let full = if best.is_some_and(|c| c.bytes.is_none()) {
            " (full result missing)"
        } else {
            ""
        };
        format!(
            "{matching}/{} matching{full}, {} distinct results, {} busy, {} rejected, {} silent",
            self.need,
            self.candidates.len(),
            self.count(|v| *v == Vote::Busy),
            self.count(|v| matches!(v, Vote::Rejected(_))),
            self.count(|v| *v == Vote::Silent),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(s: &'static str) -> ReplyBody {
        ReplyBody::Full(Bytes::from_static(s.as_bytes()))
    }

    fn digest(s: &str) -> ReplyBody {
        ReplyBody::Digest(Digest::of(s.as_bytes()))
    }

    fn r(i: u32) -> ReplicaId {
        ReplicaId(i)
    }

    fn ordered(n: usize) -> ReplyQuorum {
        let f = (n - 1) / 3;
        ReplyQuorum::new(Path::Ordered, n, f, chorus_core::quorum::quorum(n))
    }

    fn read_only(n: usize) -> ReplyQuorum {
        let f = (n - 1) / 3;
        ReplyQuorum::new(Path::ReadOnly, n, f, chorus_core::quorum::quorum(n))
    }

    fn accepted(s: &'static str) -> Result<Decision, Ignored> {
        Ok(Decision::Accepted(Bytes::from_static(s.as_bytes())))
    }

    #[test]
    fn f_plus_one_matching_replies_accept_an_ordered_result() {
        let mut q = ordered(4);
        assert_eq!(q.need(), 2);
        assert_eq!(q.on_reply(r(0), false, full("ok")), Ok(Decision::Pending));
        assert_eq!(q.on_reply(r(1), false, digest("ok")), accepted("ok"));
    }

    #[test]
    fn one_replica_cannot_vote_twice() {
        let mut q = ordered(4);
        q.on_reply(r(0), false, full("ok")).unwrap();
        assert_eq!(q.on_reply(r(0), false, full("ok")), Err(Ignored::AlreadyVoted));
        assert_eq!(
            q.on_reply(r(0), false, digest("other")),
            Err(Ignored::AlreadyVoted)
        );
        assert_eq!(q.decision(), Decision::Pending);
        assert_eq!(
            q.on_reply(r(7), false, full("ok")),
            Err(Ignored::UnknownReplica(r(7)))
        );
    }

    #[test]
    fn f_byzantine_conflicting_replies_do_not_win_and_do_not_block() {
        // n = 7, f = 2: two Byzantine replicas agree on a wrong result.
        let mut q = ordered(7);
        assert_eq!(q.need(), 3);
        assert_eq!(q.on_reply(r(5), false, full("evil")), Ok(Decision::Pending));
        assert_eq!(q.on_reply(r(6), false, full("evil")), Ok(Decision::Pending));
        assert_eq!(q.on_reply(r(0), false, digest("good")), Ok(Decision::Pending));
        assert_eq!(q.on_reply(r(1), false, full("good")), Ok(Decision::Pending));
        assert_eq!(q.on_reply(r(2), false, digest("good")), accepted("good"));
    }

    #[test]
    fn digest_only_replies_wait_for_the_matching_full_result() {
        let mut q = ordered(4);
        q.on_reply(r(1), false, digest("ok")).unwrap();
        assert_eq!(q.on_reply(r(2), false, digest("ok")), Ok(Decision::Pending));
        assert!(
            q.progress().contains("2/2 matching (full result missing)"),
            "{}",
            q.progress()
        );
        // A Byzantine replica's full reply for another result provides no bytes for "ok".
        assert_eq!(q.on_reply(r(3), false, full("evil")), Ok(Decision::Pending));
        // The designated replica's full reply arrives.
        assert_eq!(q.on_reply(r(0), false, full("ok")), accepted("ok"));
    }

    #[test]
    fn a_digest_voter_may_later_supply_the_full_result() {
        let mut q = ordered(4);
        q.on_reply(r(1), false, digest("ok")).unwrap();
        q.on_reply(r(2), false, digest("ok")).unwrap();
        // Bytes that do not match its own vote are ignored.
        assert_eq!(q.on_reply(r(1), false, full("evil")), Err(Ignored::AlreadyVoted));
        assert_eq!(q.on_reply(r(1), false, full("ok")), accepted("ok"));
    }

    #[test]
    fn f_plus_one_matching_rejections_reject() {
        let mut q = ordered(7);
        assert_eq!(
            q.on_reply(r(0), false, ReplyBody::Rejected("bad auth".into())),
            Ok(Decision::Pending)
        );
        assert_eq!(
            q.on_reply(r(1), false, ReplyBody::Rejected("too big".into())),
            Ok(Decision::Pending)
        );
        // f+1 rejections, but no reason from f+1 replicas: results may win.
        assert_eq!(
            q.on_reply(r(2), false, ReplyBody::Rejected("too big".into())),
            Ok(Decision::Pending)
        );
        assert_eq!(
            q.on_reply(r(3), false, ReplyBody::Rejected("too big".into())),
            Ok(Decision::Rejected("too big".into()))
        );
    }

    /// Mixed reasons end the request once no result can win, with the most
    /// common reason.
    #[test]
    fn mixed_rejections_reject_once_no_result_can_win() {
        let mut q = ReplyQuorum::new(Path::Ordered, 4, 1, 3);
        q.on_reply(r(0), false, ReplyBody::Rejected("b".into())).unwrap();
        assert_eq!(
            q.on_reply(r(1), false, ReplyBody::Rejected("a".into())),
            Ok(Decision::Pending)
        );
        assert_eq!(
            q.on_reply(r(2), false, ReplyBody::Rejected("b".into())),
            Ok(Decision::Rejected("b".into()))
        );
        let mut q = ReplyQuorum::new(Path::Ordered, 4, 1, 3);
        q.on_reply(r(0), false, ReplyBody::Rejected("b".into())).unwrap();
        q.on_reply(r(1), false, ReplyBody::Rejected("a".into())).unwrap();
        assert_eq!(
            q.on_reply(r(2), false, ReplyBody::Rejected("c".into())),
            Ok(Decision::Rejected("a".into())),
            "one silent replica cannot make f+1 results: the smallest of the tied reasons"
        );
    }

    /// Issue 13 (16 cores, 16 pillars): a client ran 64 seqs past a request
    /// whose designated repliers lagged; the replicas that had executed it
    /// long before had evicted its reply and answered "abandoned", and the
    /// client reported that an executed request would never execute. While
    /// the others can still answer, it waits for them.
    #[test]
    fn abandoned_answers_wait_for_replicas_that_may_still_reply() {
        let abandoned = || ReplyBody::Rejected(chorus_core::REJECT_ABANDONED.into());
        let mut q = ReplyQuorum::new(Path::Ordered, 4, 1, 3);
        assert_eq!(q.on_reply(r(0), false, full("ok")), Ok(Decision::Pending));
        assert_eq!(q.on_reply(r(1), false, abandoned()), Ok(Decision::Pending));
        assert_eq!(q.on_reply(r(2), false, abandoned()), Ok(Decision::Pending));
        assert_eq!(
            q.on_reply(r(3), false, full("ok")),
            Ok(Decision::Accepted(Bytes::from_static(b"ok")))
        );

        // No result yet, two replicas still silent: they may be the lagging
        // designated repliers.
        let mut q = ReplyQuorum::new(Path::Ordered, 4, 1, 3);
        q.on_reply(r(1), false, abandoned()).unwrap();
        assert_eq!(q.on_reply(r(2), false, abandoned()), Ok(Decision::Pending));
        // A third says so too: one silent replica cannot make f+1 results.
        assert_eq!(
            q.on_reply(r(3), false, abandoned()),
            Ok(Decision::Rejected(chorus_core::REJECT_ABANDONED.into()))
        );

        // A Byzantine replica's own reason does not end a request that
        // executed (review of 51a6566: ties went to the smallest string).
        let mut q = ReplyQuorum::new(Path::Ordered, 4, 1, 3);
        q.on_reply(r(0), false, full("ok")).unwrap();
        q.on_reply(r(1), false, abandoned()).unwrap();
        assert_eq!(
            q.on_reply(r(3), false, ReplyBody::Rejected("a".into())),
            Ok(Decision::Pending)
        );
        assert_eq!(
            q.on_reply(r(2), false, full("ok")),
            Ok(Decision::Accepted(Bytes::from_static(b"ok")))
        );

        // Other rejections end the request at f+1 matching as before.
        let mut q = ReplyQuorum::new(Path::Ordered, 4, 1, 3);
        q.on_reply(r(1), false, ReplyBody::Rejected("too big".into()))
            .unwrap();
        assert_eq!(
            q.on_reply(r(2), false, ReplyBody::Rejected("too big".into())),
            Ok(Decision::Rejected("too big".into()))
        );
    }

    #[test]
    fn f_rejections_alone_do_not_reject() {
        let mut q = ordered(4);
        q.on_reply(r(3), false, ReplyBody::Rejected("lies".into()))
            .unwrap();
        assert_eq!(q.on_reply(r(0), false, full("ok")), Ok(Decision::Pending));
        assert_eq!(q.on_reply(r(1), false, full("ok")), accepted("ok"));
    }

    #[test]
    fn busy_from_f_plus_one_asks_for_back_off_and_is_forgotten_on_clear() {
        let mut q = ordered(4);
        assert_eq!(q.on_reply(r(0), false, ReplyBody::Busy), Ok(Decision::Pending));
        assert_eq!(
            q.on_reply(r(0), false, ReplyBody::Busy),
            Ok(Decision::Pending),
            "one busy replica is not enough"
        );
        assert_eq!(q.on_reply(r(1), false, ReplyBody::Busy), Ok(Decision::Busy));
        q.clear_busy();
        assert_eq!(q.decision(), Decision::Pending);
        // A busy replica may answer for real later.
        assert_eq!(q.on_reply(r(0), false, ReplyBody::Busy), Ok(Decision::Pending));
        assert_eq!(q.on_reply(r(0), false, full("ok")), Ok(Decision::Pending));
        assert_eq!(q.on_reply(r(1), false, digest("ok")), accepted("ok"));
    }

    #[test]
    fn read_only_needs_a_quorum_of_read_only_replies() {
        let mut q = read_only(4);
        assert_eq!(q.need(), 3);
        assert_eq!(q.on_reply(r(0), true, full("v")), Ok(Decision::Pending));
        assert_eq!(
            q.on_reply(r(1), true, digest("v")),
            Ok(Decision::Pending),
            "f+1 is not enough off the ordered path"
        );
        // An ordered reply does not count towards the fast path.
        assert_eq!(q.on_reply(r(2), false, digest("v")), Err(Ignored::WrongPath));
        assert_eq!(q.on_reply(r(2), true, digest("v")), accepted("v"));
    }

    #[test]
    fn ordered_requests_ignore_fast_path_replies() {
        let mut q = ordered(4);
        assert_eq!(q.on_reply(r(0), true, full("stale")), Err(Ignored::WrongPath));
        assert_eq!(q.on_reply(r(1), true, full("stale")), Err(Ignored::WrongPath));
        assert_eq!(q.decision(), Decision::Pending);
    }

    #[test]
    fn read_only_falls_back_when_a_quorum_can_no_longer_match() {
        // Replicas answered from different states: 2 vs 1, one left; 2+1 = 3 still possible.
        let mut q = read_only(4);
        q.on_reply(r(0), true, full("new")).unwrap();
        q.on_reply(r(1), true, full("new")).unwrap();
        assert_eq!(q.on_reply(r(2), true, full("old")), Ok(Decision::Pending));
        assert_eq!(q.on_reply(r(3), true, full("old")), Ok(Decision::FallBack));

        let mut q = read_only(4);
        q.on_reply(r(0), true, full("a")).unwrap();
        assert_eq!(q.on_reply(r(1), true, full("b")), Ok(Decision::Pending));
        assert_eq!(
            q.on_reply(r(2), true, full("c")),
            Ok(Decision::FallBack),
            "best 1 + 1 silent < 3"
        );
    }

    #[test]
    fn read_only_treats_busy_and_rejected_as_declined() {
        let mut q = read_only(4);
        assert_eq!(q.on_reply(r(0), true, ReplyBody::Busy), Ok(Decision::Pending));
        assert_eq!(
            q.on_reply(r(1), true, ReplyBody::Rejected("not read-only".into())),
            Ok(Decision::FallBack)
        );
    }

    #[test]
    fn a_quorum_of_digests_waits_for_the_full_result_instead_of_falling_back() {
        let mut q = read_only(4);
        for i in 0..3 {
            assert_eq!(q.on_reply(r(i), true, digest("v")), Ok(Decision::Pending));
        }
        assert!(q.missing_full_result());
        // The designated replica answered from another state.
        assert_eq!(q.on_reply(r(3), true, full("w")), Ok(Decision::Pending));
        // A retransmission makes a matching replica send the bytes.
        assert_eq!(q.on_reply(r(1), true, full("v")), accepted("v"));
        assert!(!q.missing_full_result());
    }

    #[test]
    fn f_plus_one_digests_without_bytes_is_reported_as_missing_the_full_result() {
        let mut q = ordered(4);
        q.on_reply(r(1), false, digest("ok")).unwrap();
        assert!(
            !q.missing_full_result(),
            "one vote is not enough to ask for bytes"
        );
        q.on_reply(r(2), false, digest("ok")).unwrap();
        assert!(q.missing_full_result());
    }

    #[test]
    fn single_replica_cluster_accepts_its_only_reply() {
        let mut q = ordered(1);
        assert_eq!(q.on_reply(r(0), false, full("x")), accepted("x"));
        let mut q = read_only(1);
        assert_eq!(q.on_reply(r(0), true, full("x")), accepted("x"));
    }

    #[test]
    fn quorum_for_n_not_of_the_form_3f_plus_1() {
        // n = 5, f = 1: the Byzantine quorum is 4, so the fast path needs 4.
        let q = read_only(5);
        assert_eq!(q.need(), chorus_core::quorum::quorum(5));
        assert_eq!(ordered(5).need(), 2);
    }
}
