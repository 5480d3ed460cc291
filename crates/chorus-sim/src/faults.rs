//! The fault vocabulary: every kind of fault the simulator can inject, and the
//! set a run is allowed to draw from (`--faults none|all|kind,kind,...`).

use std::fmt;
use std::str::FromStr;

/// One kind of fault. Network kinds act on links, `Crash` and `Skew` on
/// replicas, the Byzantine replica kinds are middleware around a correct
/// replica's outputs (named after the fault model), and the client kinds are
/// Byzantine clients.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// Slow links and heavy-tailed latency spikes.
    Delay,
    /// Messages dropped.
    Loss,
    /// Messages delivered twice.
    Duplicate,
    /// Messages overtaking each other (extra random delay on some).
    Reorder,
    /// A group of replicas cut off in both directions, healed later.
    Partition,
    /// A group of replicas that can send but not receive, or the reverse.
    AsymPartition,
    /// A replica crashes (possibly in the middle of performing its actions)
    /// and restarts from its persisted records.
    Crash,
    /// Replica clocks with offsets and drifting rates.
    Skew,
    /// Byzantine replica that sends nothing at all.
    Silent,
    /// Byzantine primary that proposes different batches to different replicas.
    Equivocate,
    /// Byzantine replica that votes for different digests towards different replicas.
    ConflictingVotes,
    /// Byzantine replica that sends bad signatures, corrupted digests and tampered requests.
    Corrupt,
    /// Byzantine replica that replays old messages.
    Replay,
    /// Byzantine replica that floods future views and far slots.
    Flood,
    /// Two copies of a replica with the same identity and keys, each talking
    /// to a different subset of the replicas (Diem's Twins).
    Twins,
    /// Byzantine client with authenticators that do not verify.
    BadAuth,
    /// Byzantine client that reuses request sequence numbers for different operations.
    DupSeq,
    /// Byzantine client that sends operations larger than the limit.
    Oversized,
    // The smart kinds below are drawn from a separate RNG stream (plan.rs),
    // so a seed that draws none of them runs exactly as before they existed.
    /// Byzantine primary that never pre-prepares one slot it leads but
    /// proposes the later ones, paced just under the view-change timeout.
    WithholdPace,
    /// Byzantine new-view primary that builds a validly signed NEW-VIEW from
    /// an adversarially chosen 2f+1 VIEW-CHANGE set, colluding with the
    /// other Byzantine replicas.
    NvForge,
    /// Byzantine replica that serves state transfer with a valid checkpoint
    /// certificate and garbage snapshot bytes, and sends its checkpoint votes
    /// only to the other Byzantine replicas.
    GarbageSnapshot,
    /// Long outages of correct replicas, replicas that stay down past
    /// healing, and crashes in the middle of view changes and state transfers.
    Outage,
    /// Twins whose network split is drawn anew every time a new view forms.
    TwinsResplit,
    // The rcc kinds below (RCC §III-D, §IV) are drawn only in rcc mode, from
    // a third RNG stream (`rcc_plan.rs`): seeds of other modes, and rcc seeds
    // that draw none of them, run exactly as before they existed.
    /// Byzantine instance primary that proposes its own lane's rounds as
    /// slowly as the timers allow (RCC §IV's throttling attack).
    Throttle,
    /// Byzantine instance primary that sends its pre-prepares to only 2f+1
    /// replicas, itself included, a different subset every round (RCC §III-D).
    InTheDark,
    /// Byzantine instance primary that never proposes one of its own clients' requests.
    Censor,
    /// Byzantine instance primary that puts its favoured client first and
    /// grinds its batches for rank 0 in the round order (RCC §IV's ordering attack).
    OrderAttack,
    /// Byzantine replica that keeps sending false FAILUREs (VIEW-CHANGEs for
    /// the next view) for correct instances.
    FailureSpam,
    /// Byzantine client (rcc) that keeps switching instance back and forth
    /// (RCC §III-E SWITCHINSTANCE), to valid, current and absent instances,
    /// replays old switches and reuses seqs, between ordinary requests.
    SwitchSpam,
    // Drawn from a stream of its own (`restart_plan.rs`), so seeds that draw
    // none of these run exactly as before they existed.
    /// Every correct replica's process stops, all at one moment (a power
    /// loss) or one after the other (a rolling upgrade), and starts again
    /// from its store with a fresh process clock.
    ClusterRestart,
    // Drawn from a stream of its own (`first_contact_plan.rs`), pbft and cop
    // only, so seeds that draw none of these run exactly as before.
    /// Byzantine primary of view 0 that drops most client requests on
    /// arrival and answers each at once with a fake result or a lone
    /// "busy" (PBFT §4.1: to keep leader-first clients sending to it alone
    /// while it proposes nothing of theirs).
    FakeAnswer,
}

impl FaultKind {
    pub const ALL: [FaultKind; 31] = [
        FaultKind::Delay,
        FaultKind::Loss,
        FaultKind::Duplicate,
        FaultKind::Reorder,
        FaultKind::Partition,
        FaultKind::AsymPartition,
        FaultKind::Crash,
        FaultKind::Skew,
        FaultKind::Silent,
        FaultKind::Equivocate,
        FaultKind::ConflictingVotes,
        FaultKind::Corrupt,
        FaultKind::Replay,
        FaultKind::Flood,
        FaultKind::Twins,
        FaultKind::BadAuth,
        FaultKind::DupSeq,
        FaultKind::Oversized,
        FaultKind::WithholdPace,
        FaultKind::NvForge,
        FaultKind::GarbageSnapshot,
        FaultKind::Outage,
        FaultKind::TwinsResplit,
        FaultKind::Throttle,
        FaultKind::InTheDark,
        FaultKind::Censor,
        FaultKind::OrderAttack,
        FaultKind::FailureSpam,
        FaultKind::SwitchSpam,
        FaultKind::ClusterRestart,
        FaultKind::FakeAnswer,
    ];

    /// The kinds that existed before the smart adversaries (`--faults classic`).
    pub const CLASSIC: usize = 18;
    /// The first rcc kind; the smart kinds are `CLASSIC..RCC`.
    pub const RCC: usize = 23;
    /// The first operations kind; the rcc kinds are `RCC..OPS`.
    pub const OPS: usize = 29;
    /// The first leader-first kind; the operations kinds are `OPS..FIRST_CONTACT`.
    pub const FIRST_CONTACT: usize = 30;

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Delay => "delay",
            FaultKind::Loss => "loss",
            FaultKind::Duplicate => "dup",
            FaultKind::Reorder => "reorder",
            FaultKind::Partition => "partition",
            FaultKind::AsymPartition => "asym-partition",
            FaultKind::Crash => "crash",
            FaultKind::Skew => "skew",
            FaultKind::Silent => "silent",
            FaultKind::Equivocate => "equivocate",
            FaultKind::ConflictingVotes => "conflicting-votes",
            FaultKind::Corrupt => "corrupt",
            FaultKind::Replay => "replay",
            FaultKind::Flood => "flood",
            FaultKind::Twins => "twins",
            FaultKind::BadAuth => "bad-auth",
            FaultKind::DupSeq => "dup-seq",
            FaultKind::Oversized => "oversized",
            FaultKind::WithholdPace => "withhold-pace",
            FaultKind::NvForge => "nv-forge",
            FaultKind::GarbageSnapshot => "garbage-snapshot",
            FaultKind::Outage => "outage",
            FaultKind::TwinsResplit => "twins-resplit",
            FaultKind::Throttle => "throttle",
            FaultKind::InTheDark => "in-the-dark",
            FaultKind::Censor => "censor",
            FaultKind::OrderAttack => "order-attack",
            FaultKind::FailureSpam => "failure-spam",
            FaultKind::SwitchSpam => "switch-spam",
            FaultKind::ClusterRestart => "cluster-restart",
            FaultKind::FakeAnswer => "fake-answer",
        }
    }

    /// Kinds that make a replica Byzantine (count against f).
    pub fn is_byzantine_replica(self) -> bool {
        matches!(
            self,
            FaultKind::Silent
                | FaultKind::Equivocate
                | FaultKind::ConflictingVotes
                | FaultKind::Corrupt
                | FaultKind::Replay
                | FaultKind::Flood
                | FaultKind::Twins
                | FaultKind::WithholdPace
                | FaultKind::NvForge
                | FaultKind::GarbageSnapshot
                | FaultKind::TwinsResplit
                | FaultKind::Throttle
                | FaultKind::InTheDark
                | FaultKind::Censor
                | FaultKind::OrderAttack
                | FaultKind::FailureSpam
                | FaultKind::FakeAnswer
        )
    }

    /// Two copies of one replica (Twins, with or without re-splitting).
    pub fn is_twin(self) -> bool {
        matches!(self, FaultKind::Twins | FaultKind::TwinsResplit)
    }

    /// Drawn from the plan's second RNG stream (see `FaultKind::CLASSIC`).
    pub fn is_smart(self) -> bool {
        (FaultKind::CLASSIC..FaultKind::RCC).contains(&(self as usize))
    }

    /// Drawn only in rcc mode, from the plan's third RNG stream (`rcc_plan.rs`).
    pub fn is_rcc(self) -> bool {
        (FaultKind::RCC..FaultKind::OPS).contains(&(self as usize))
    }

    pub fn is_byzantine_client(self) -> bool {
        matches!(
            self,
            FaultKind::BadAuth | FaultKind::DupSeq | FaultKind::Oversized | FaultKind::SwitchSpam
        )
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FaultKind {
    type Err = String;
    fn from_str(s: &str) -> Result<FaultKind, String> {
        FaultKind::ALL
            .iter()
            .copied()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = FaultKind::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown fault kind {s:?}; expected none, all, classic, smart, rcc, network, byzantine, clients or one of: {}",
                    names.join(", ")
                )
            })
    }
}

/// A set of fault kinds.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Default)]
pub struct FaultSet(u32);

impl FaultSet {
    pub fn none() -> FaultSet {
        FaultSet(0)
    }

    pub fn all() -> FaultSet {
        FaultSet::from_kinds(&FaultKind::ALL)
    }

    pub fn from_kinds(kinds: &[FaultKind]) -> FaultSet {
        FaultSet(kinds.iter().fold(0, |acc, k| acc | k.bit()))
    }

    /// Delay, loss, duplication, reordering, partitions, crashes and clock skew.
    pub fn network() -> FaultSet {
        FaultSet::from_kinds(
            &FaultKind::ALL
                .iter()
                .copied()
                .filter(|k| !k.is_byzantine_replica() && !k.is_byzantine_client())
                .collect::<Vec<_>>(),
        )
    }

    pub fn byzantine_replicas() -> FaultSet {
        FaultSet::from_kinds(
            &FaultKind::ALL
                .iter()
                .copied()
                .filter(|k| k.is_byzantine_replica())
                .collect::<Vec<_>>(),
        )
    }

    /// The kinds that existed before the smart adversaries: `--faults classic`
    /// replays any seed of an older `--faults all` run exactly.
    pub fn classic() -> FaultSet {
        FaultSet::from_kinds(&FaultKind::ALL[..FaultKind::CLASSIC])
    }

    /// The smart adversaries and the harsher crash schedules.
    pub fn smart() -> FaultSet {
        FaultSet::from_kinds(&FaultKind::ALL[FaultKind::CLASSIC..FaultKind::RCC])
    }

    /// The RCC-specific Byzantine primaries (drawn only in rcc mode).
    pub fn rcc() -> FaultSet {
        FaultSet::from_kinds(&FaultKind::ALL[FaultKind::RCC..FaultKind::OPS])
    }

    /// What operators do to the whole cluster (`cluster-restart`).
    pub fn ops() -> FaultSet {
        FaultSet::from_kinds(&FaultKind::ALL[FaultKind::OPS..FaultKind::FIRST_CONTACT])
    }

    /// Attacks on leader-first clients (pbft and cop only).
    pub fn first_contact() -> FaultSet {
        FaultSet::from_kinds(&FaultKind::ALL[FaultKind::FIRST_CONTACT..])
    }

    pub fn byzantine_clients() -> FaultSet {
        FaultSet::from_kinds(
            &FaultKind::ALL
                .iter()
                .copied()
                .filter(|k| k.is_byzantine_client())
                .collect::<Vec<_>>(),
        )
    }

    pub fn contains(self, k: FaultKind) -> bool {
        self.0 & k.bit() != 0
    }

    pub fn insert(&mut self, k: FaultKind) {
        self.0 |= k.bit();
    }

    pub fn remove(&mut self, k: FaultKind) {
        self.0 &= !k.bit();
    }

    pub fn union(self, other: FaultSet) -> FaultSet {
        FaultSet(self.0 | other.0)
    }

    pub fn intersect(self, other: FaultSet) -> FaultSet {
        FaultSet(self.0 & other.0)
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    pub fn iter(self) -> impl Iterator<Item = FaultKind> {
        FaultKind::ALL.into_iter().filter(move |k| self.contains(*k))
    }
}

impl fmt::Debug for FaultSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Prints the shortest spelling that `FromStr` reads back to the same set.
impl fmt::Display for FaultSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        if *self == FaultSet::all() {
            return f.write_str("all");
        }
        if *self == FaultSet::classic() {
            return f.write_str("classic");
        }
        let names: Vec<_> = self.iter().map(|k| k.name()).collect();
        f.write_str(&names.join(","))
    }
}

impl FromStr for FaultSet {
    type Err = String;
    /// `none`, `all`, or a comma-separated list of kinds and groups
    /// (`network`, `byzantine`, `clients`, `classic`, `smart`, `rcc`).
    fn from_str(s: &str) -> Result<FaultSet, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("empty fault set (use none)".into());
        }
        let mut set = FaultSet::none();
        for part in s.split(',').map(str::trim) {
            match part {
                "none" => {}
                "all" => set = set.union(FaultSet::all()),
                "network" => set = set.union(FaultSet::network()),
                "byzantine" => set = set.union(FaultSet::byzantine_replicas()),
                "clients" => set = set.union(FaultSet::byzantine_clients()),
                "classic" => set = set.union(FaultSet::classic()),
                "smart" => set = set.union(FaultSet::smart()),
                "rcc" => set = set.union(FaultSet::rcc()),
                kind => set.insert(kind.parse()?),
            }
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_none_all_groups_and_lists() {
        assert_eq!("none".parse::<FaultSet>().unwrap(), FaultSet::none());
        assert_eq!("all".parse::<FaultSet>().unwrap().len(), FaultKind::ALL.len());
        let s: FaultSet = "loss, crash,twins".parse().unwrap();
        assert_eq!(
            s.iter().collect::<Vec<_>>(),
            vec![FaultKind::Loss, FaultKind::Crash, FaultKind::Twins]
        );
        let g: FaultSet = "byzantine".parse().unwrap();
        assert!(
            g.contains(FaultKind::Flood) && !g.contains(FaultKind::Loss) && !g.contains(FaultKind::BadAuth)
        );
        assert!("loss,gremlins".parse::<FaultSet>().is_err());
        assert!("".parse::<FaultSet>().is_err());
    }

    #[test]
    fn display_roundtrips() {
        for s in [
            "none",
            "all",
            "classic",
            "loss,crash",
            "silent,twins,oversized",
            "nv-forge,outage",
            "throttle,in-the-dark,censor,order-attack,failure-spam",
        ] {
            let set: FaultSet = s.parse().unwrap();
            assert_eq!(set.to_string(), s);
            assert_eq!(set.to_string().parse::<FaultSet>().unwrap(), set);
        }
        for k in FaultKind::ALL {
            assert_eq!(k.name().parse::<FaultKind>().unwrap(), k);
        }
    }

    #[test]
    fn groups_partition_all_kinds() {
        let n = FaultSet::network();
        let b = FaultSet::byzantine_replicas();
        let c = FaultSet::byzantine_clients();
        assert!(n.intersect(b).is_empty() && n.intersect(c).is_empty() && b.intersect(c).is_empty());
        assert_eq!(n.union(b).union(c), FaultSet::all());
        assert_eq!(
            FaultSet::classic()
                .union(FaultSet::smart())
                .union(FaultSet::rcc())
                .union(FaultSet::ops())
                .union(FaultSet::first_contact()),
            FaultSet::all()
        );
        assert!(FaultSet::classic().intersect(FaultSet::smart()).is_empty());
        assert!(FaultSet::smart().intersect(FaultSet::rcc()).is_empty());
        assert!(FaultKind::ALL
            .iter()
            .all(|k| k.is_smart() == FaultSet::smart().contains(*k)));
        assert!(FaultKind::ALL
            .iter()
            .all(|k| k.is_rcc() == FaultSet::rcc().contains(*k)));
        // Every rcc kind is a Byzantine replica but `switch-spam`, a client.
        assert!(FaultSet::rcc()
            .iter()
            .all(|k| k.is_byzantine_replica() != (k == FaultKind::SwitchSpam)));
        assert!(FaultKind::SwitchSpam.is_byzantine_client());
    }
}
