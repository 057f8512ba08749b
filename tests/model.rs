//! Model checker over the grant protocol: the real [`leasehold::lock::machine::step`], run by
//! operator processes against a modelled API server, explored over every interleaving by
//! stateright (breadth first, to a bound).
//!
//! What is modelled (and how each part maps to Kubernetes):
//! - **API server**: one lock (status `tokenCeiling`, `highestToken`), its Lease, pods and
//!   `DistributedLockClaim`s, each with a resourceVersion. Writes land as the operator sends
//!   them: the token reservation and every Lease update are compare-and-swaps on the
//!   resourceVersion it read (409 otherwise); Lease create fails if one exists; the holder patch
//!   (ungate + token, or claim granted) and the rejection (pod `Failed`, claim `Rejected`) carry
//!   UID and resourceVersion preconditions; the start-timeout delete carries only the UID; the
//!   status view is a server-side apply without a precondition, so a stale writer overwrites a
//!   newer `highestToken`.
//! - **Operator processes** (1 or 2; nobody trusts leadership): a cache per object that lags
//!   independently (any object can be refreshed to its latest version at any time, in any
//!   order), a reconcile that steps on its cache plus the answers of its own writes, one write
//!   per action (so a crash or another writer can come between any two writes; a rejection of
//!   several waiters is one write per waiter), and a restart at any point that drops the cache
//!   (re-listed) and the clocks (they start over).
//! - **Pods**: gated, Pending/Running/Succeeded, graceful deletion (the containers run until the
//!   object is gone), same-name recreate with a new UID, node loss (the pod keeps running, the
//!   API cannot tell), a per-pod busy policy (`on-busy: skip`, `max-wait`). Rejected: `Failed`;
//!   one rejected while it ran keeps running until the kubelet has stopped it. Ground truth "its
//!   work runs" = ungated and not finished. A granted pod may never start (nothing forces
//!   `PodStarts`): the start timeout deletes it, gracefully (it may start at the edge).
//! - **Claims and their holder process**: learns its grant from the Lease that names it (seen on
//!   its watch, or read once its claim's status shows a token; the token is always the Lease's),
//!   or gives up once it sees its claim rejected or gone (then it never acts on a grant), renews
//!   the Lease (owner-verified), releases it (owner-verified; to the Lease's next-holder hint, if
//!   there is one: issue 12),
//!   gives up `renewDeadline` after the start of its last successful renewal, can be paused
//!   (SIGSTOP) past its deadline, can have its claim deleted under it; a per-claim busy policy.
//!   A standing claim (issue 12) asks again by raising `spec.request`, or, a plain waiter, by the
//!   Lease (`grant::lease_arrival`): one compare-and-swap naming its next request as the
//!   next-holder hint of a claim-held Lease, or taking a free Lease, with the Lease's next token
//!   up to its `leasehold.dev/token-ceiling` (which every operator Lease write of a single-holder
//!   lock sets from the reservation in its view); a process the Lease no longer names (its hint
//!   replaced, the Lease deleted) arrives again by its claim. The operator reads a standing
//!   claim's request as the highest its spec, its status or the Lease names
//!   (`grant::current_request`).
//! - **Third parties**: the Lease deleted, or edited to name a waiter with a plausible UID and
//!   token; the lock deleted and recreated with the same name (new UID, empty status), its old
//!   Lease left until the garbage collector removes it (the operator does not touch a Lease
//!   another lock object controls: `LeaseNotOwned`), pods and claims keeping the tokens the
//!   old object granted.
//! - **Time**: whole seconds; `leaseDurationSeconds` 3, renew deadline 2, node-loss timeout 3
//!   (or 1), start timeout 10 000 (effectively off) or 1. Someone may lower the lock's
//!   `leaseDurationSeconds` to 1 once ([`Action::LeaseDurationLowered`]); a Lease carries the
//!   value of the grant it names, and each process renews against the shorter of the value it
//!   read before queueing and its grant's ([`renew_deadline`]).
//!
//! - **Semaphores** (issue 14): `spec.maxHolders` (1 or 2, or unset: a single-holder lock), one
//!   Lease per slot, each holder's slot on its pod or claim; someone may change `maxHolders` once
//!   (lower it, or set it on a single-holder lock).
//!
//! Invariants (checked in every run):
//! - **I1** per slot (a single-holder lock has slot 0 only), at most one holder whose work runs,
//!   except a holder on a lost node or a holder paused past its deadline, and then its token is
//!   lower than the other's (a fenced resource rejects its late writes); in all, no more
//!   non-excused holders than the lock ever allowed, and a semaphore grant whose token was
//!   reserved on a lock object allowing m holders is handed only while fewer than m others run;
//! - **I2** tokens handed to holders of one lock object strictly increase in grant order per
//!   slot and never repeat across slots; no token is written above that object's reservation; the
//!   operator never writes a Lease naming a holder whose token and floor are both below a token
//!   it handed out (the next token is above both; a recreated lock may start again at 1 once no holder
//!   of the old object runs; while one runs, I1 forbids anyone beside it);
//! - **I3** a waiter is answered once: a waiter marked rejected is never granted afterwards, and
//!   a rejection never lands on a waiter that was granted;
//! - **I4** (liveness, in a bounded, settled-state form) in every reachable state that is
//!   *settled*, no waiter is left unanswered. Settled: the environment owes nothing more (no
//!   deleted pod still terminating, no rejected pod still stopping, no claim process paused or
//!   yet to see its grant), every operator's caches equal the API server, no reconcile is half
//!   way, and every operator's next step (the real step function on those caches, its clocks,
//!   now) is `Idle` with no requeue, i.e. it writes nothing and sets no timer, so only an
//!   optional outside event (a new pod, a deletion, a fault) can ever wake it. Unanswered: a
//!   waiter neither granted nor rejected, except a plain waiter (wait, no max-wait) queued
//!   behind a holder whose work runs (a started pod may run for ever; that is not the lock's
//!   fault). A granted pod that never started is not such a holder. Under the usual fairness
//!   (caches catch up, the operators keep stepping, time passes, pods that were deleted go
//!   away), an execution that stops changing either settles or keeps a timer armed (a claim
//!   holder that renews for ever; a timeout that fired without effect and is re-armed at 0), so
//!   I4 says: whatever the faults did, once things calm down every waiter is granted or told
//!   why not (skip, max-wait), and the lock is never left free, or held by a pod that never
//!   starts, with someone waiting. What it does not check: states past the depth bound or past
//!   the last tick (an operator whose timer is still armed there is not settled); a livelock in
//!   which an operator keeps writing, or keeps re-arming a timer, for ever (never settled); how
//!   long an answer takes (no bounded-response bound: caches may lag without limit in the
//!   model); the order (FIFO) in which waiters are served.
//!   Why not `Property::eventually`: in stateright 0.31 an `eventually` property is reported
//!   only on a path that ends in a *terminal* state, one whose every action yields no new state
//!   inside the boundary; states at the depth bound are dropped before they are checked (never
//!   terminal), and a path that reaches an already visited state is not terminal either (cycles
//!   and DAG joins are skipped; the "eventually" bits are not part of the fingerprint). Here
//!   `Step` is always enabled and an idle step returns the state it started from, so no path
//!   would ever be terminal and an `eventually` property would pass without checking anything.
//!
//! Each run also asserts that its bound reaches a second grant and the events it is for (a
//! reclaim by start timeout, a LockBusy and a LockWaitTimeout rejection): a bound that explores
//! nothing would pass. Each planted bug must produce its counterexample.
//!
//! Bounds: `LEASEHOLD_MODEL_DEPTH` (replaces each configuration's depth below),
//! `LEASEHOLD_MODEL_EXTRA_DEPTH` (adds to it; `make model` sets 1) and `LEASEHOLD_MODEL_STATES`.
//! A depth bound of d checks paths of at most d - 2 actions (stateright counts the initial state
//! as depth 1 and drops states at the bound unchecked). Not modelled yet: a foreign Lease
//! created by someone else before the lock's own (the recreated lock's old Lease is one case of
//! it), watch relists that drop deletions, the immediate deletion of a
//! pod that was never bound (modelled as graceful), a no-op status patch that keeps the
//! resourceVersion (every modelled write bumps it), a pod's status updates other than start /
//! finish (a Pending pod's condition update would change its resourceVersion).

mod checking;

use std::fmt::Write as _;
use std::hash::Hash;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use leasehold::lock::grant::{
    self, Candidate, Decision, Grant, Holder, HolderKind, LeaseView, Next, Phase, Reject, RejectReason, Settings,
};
use leasehold::lock::machine::{self, Clocks, SlotLease, Snapshot};
use leasehold::lock::policy::BusyPolicy;
use stateright::{Checker, Model, Property};

const LEASE_SECS: u8 = 3;
/// The lock's `leaseDurationSeconds` once lowered ([`Action::LeaseDurationLowered`]).
const LOWERED_LEASE_SECS: u8 = 1;
/// When every modelled claim was created (its process sent the create): the start.
const CLAIM_QUEUED_AT: u8 = 0;
const I1: &str = "I1 at most one running holder (a lost or paused one only with a lower token)";
const I2: &str = "I2 tokens strictly increase and stay within the reservation";
const I3: &str = "I3 a waiter is answered once: never granted after its rejection, never rejected after its grant";
const I4: &str = "I4 in a settled state no waiter is left unanswered (unless it queues behind a running holder)";
const HANDOVER: &str = "a second grant happens (the bound reaches a handover)";
const RECLAIM: &str = "a start timeout deletes a holder that did not start";
const REJECT_BUSY: &str = "a skip waiter is rejected (LockBusy)";
const REJECT_TIMEOUT: &str = "a max-wait waiter is rejected (LockWaitTimeout)";
const RECREATE_GRANT: &str = "the recreated lock object grants";
const IDLE_NO_LEASE: &str = "a lock nobody waits for stays without a Lease (it is created at the first grant)";
const TWO_AT_ONCE: &str = "two holders of a semaphore run at once";
const CHANGED_GRANT: &str = "a waiter is granted after maxHolders changed";
const HINT_HANDOVER: &str = "a claim holder's release hands the lock to the next-holder hint";
const RECORD_LATER: &str = "a claim holds by its Lease while its status record waits (claim_record_delay)";
const RELEASE_UNRECORDED: &str = "a claim releases before its grant is recorded in its status";
const SECOND_REQUEST: &str = "a standing claim's second request is granted (issue 12)";
const LEASE_ARRIVAL: &str = "a request that arrived by the Lease is granted (issue 12)";
const REARRIVAL: &str = "a waiter displaced from the Lease arrives again by its claim";
const WAITER_HINT: &str = "a waiter that named itself as the next-holder hint is granted";
const WAITER_TAKE: &str = "a waiter by claim took the free Lease itself";
const UNANSWERED_TAKE: &str = "a waiter whose own take's answer was lost learns the grant it took";
const LOWERED_UNDER: &str = "the lock's lease duration is lowered while a claim's process holds";
const LOWERED_GRANT: &str = "a process that read the old lease duration learns a grant made under the lowered one";
const HANDOVER_NEW_DURATION: &str =
    "a release hands the lock over with the lowered lease duration the operator's hint carries";
const POD_NAMES: [&str; 3] = ["pod-a", "pod-b", "pod-c"];
const CLAIM_NAMES: [&str; 2] = ["claim-x", "claim-y"];

/// A fault planted in the modelled API server, to prove the checker can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Bug {
    /// Lease updates land whatever resourceVersion they carry (no compare-and-swap).
    LeaseWithoutPrecondition,
    /// The patch that ungates a holder lands whatever resourceVersion it carries (UID only).
    HolderPatchWithoutPrecondition,
    /// The patch that rejects a waiter lands whatever resourceVersion it carries (UID only).
    RejectWithoutPrecondition,
    /// The conversion forgets that a rejected waiter is terminal: a Failed pod or a Rejected
    /// claim without a token shows as Pending (still waiting).
    RejectedStillWaits,
    /// The operator never acts on an expired start timeout (`DeletePod` becomes `Idle`).
    IgnoreStartTimeout,
    /// The conversion drops `leasehold.dev/max-wait`.
    IgnoreMaxWait,
    /// After the first grant, the operator never grants again (a grant on a Lease that already
    /// carries a token becomes a plain release, or `Idle`).
    NoGrantAfterRelease,
    /// The conversion ignores a holder granted by an earlier lock object with the same name
    /// (as if tokens counted only for the lock UID that granted them): the bug a replay found on
    /// the real control plane, a recreated lock ungating a second pod with token 1.
    IgnoreOldGrants,
    /// The token reservation lands whatever resourceVersion it carries (no compare-and-swap):
    /// two operators reserve from the same ceiling and grant the same token on two semaphore
    /// slots.
    ReserveWithoutPrecondition,
    /// A claim's process that learns its grant without a first renewal counts its renew deadline
    /// from when it learned the grant (a watch event that may come late), not from its claim's
    /// creation.
    HolderClockFromLearning,
    /// The conversion reads a rejected claim as a pod (as if `leasehold.dev/holder-kind` were
    /// lost with the rejection): a Lease naming it is released at once as a failed pod's would
    /// be, although its process may hold the grant it learned from the Lease before it saw the
    /// rejection (a stale operator's rejection that landed after the grant).
    RejectedClaimAsPod,
    /// The conversion drops a holder's slot (`leasehold.dev/slot`, claim `status.slot`): every
    /// holder looks like slot 0's, so slot 1 takes its own holder for gone and grants again.
    IgnoreSlot,
    /// The next-holder hint carries the holder's own token instead of the next one (issue 12):
    /// the release hands the lock over with a token that was handed out already.
    HintTokenNotAbove,
    /// A recreated Lease never names `grant::RECOVERY_HOLDER`: it is created free and grants
    /// at once, although a claim granted by the deleted Lease may act on that grant unrecorded.
    NoRecoveryHolder,
    /// A standing claim's release frees the Lease (or hands it over) without listing its
    /// request in `leasehold.dev/released` (issue 12, `docs/two-writes-per-grant.md`): the claim
    /// still shows the request, unrecorded, and the operator grants it again.
    ReleaseWithoutRecord,
    /// A waiter that arrives by the Lease ([`Action::ClaimArrivesByLease`]) takes the next token
    /// whatever `leasehold.dev/token-ceiling` says: a token above the lock's reservation (I2).
    ArrivalAboveCeiling,
    /// A waiter that arrives by the Lease takes the Lease's token + 1, ignoring
    /// `leasehold.dev/token-floor`: on a recreated Lease (token 0, floor the reservation) it
    /// repeats a token handed out under the deleted one (I2).
    ArrivalIgnoresFloor,
    /// A waiter whose Lease arrival the operator displaced (its hint replaced by an older
    /// waiter's) never arrives again by its claim ([`Action::ClaimReArrives`]): nobody knows it
    /// waits (I4).
    NoReArrival,
    /// The operator's Lease writes keep `leasehold.dev/released` by candidates that include the
    /// requests known only from the Lease (`grant::keep_released` over the bumped candidates): a
    /// displaced Lease arrival drops its claim's entry for the request it released, which then
    /// looks like a waiter again and is granted a second time (I3).
    KeepByLeaseRequests,
    /// A waiter by claim that arrives by the Lease itself ([`Action::ClaimWaiterArrives`]) takes
    /// the Lease as if it were free whoever holds it now: its decision made on a free version
    /// its watch brought, written without that version as precondition (a blind write, not a
    /// compare-and-swap): two holders at once (I1).
    WaiterTakesBlind,
    /// A waiter's own take whose answer was lost ([`Action::ClaimWaiterTakeUnanswered`]) is
    /// taken as landed: the process holds from the write, although the write may not have
    /// landed and the operator may have granted the Lease to another (I1). The code waits for
    /// the Lease or the claim's status to show the grant instead (`OwnArrival::Done`).
    LostTakeAssumedLanded,
    /// The operator expires a claim holder by the lock's `leaseDurationSeconds` as it reads it
    /// now, not by the longer value its grant's Lease was written with (`grant::expiry_of`): a
    /// value lowered under a running holder lets the next one run beside it (I1; the hole a
    /// newcomer trial found).
    ExpiryBySpec,
    /// A claim's process renews against the lease duration it read before queueing, not the
    /// shorter one of its grant's Lease (`holder::granted_timings`): lowered in between, the
    /// operator expires it while it still counts itself within its deadline (I1).
    HolderKeepsReadDuration,
}

/// A waiter's `leasehold.dev/on-busy` and `leasehold.dev/max-wait` (claims: `spec.onBusy`,
/// `spec.maxWaitSeconds`).
#[derive(Clone, Copy, Debug)]
struct Policy {
    skip: bool,
    max_wait: Option<u64>,
}

impl Policy {
    const WAIT: Policy = Policy { skip: false, max_wait: None };
    const SKIP: Policy = Policy { skip: true, max_wait: None };
    const fn max_wait(secs: u64) -> Policy {
        Policy { skip: false, max_wait: Some(secs) }
    }
}

#[derive(Clone, Debug)]
struct Config {
    pods: usize,
    claims: usize,
    operators: usize,
    max_time: u8,
    /// Third-party faults (Lease deleted or forged, claim deleted) and node losses, in all.
    faults: u8,
    restarts: u8,
    /// Third parties may also rewrite the Lease's holder (what the chart's admission policy
    /// `<release>-lease-grants` forbids everyone but the operator).
    forge: bool,
    /// The lock may be deleted and recreated with the same name (once; a fault): the old Lease
    /// stays until the garbage collector removes it ([`Action::LeaseCollected`]).
    recreate: bool,
    /// Start with the first pod already holding (granted token 1, running): reaches the states
    /// after a handover within a smaller bound.
    start_held: bool,
    /// With `start_held` on a semaphore: the first this many pods hold, one per slot (0 counts
    /// as 1).
    start_held_slots: u8,
    /// Pods neither start, finish nor go away by themselves (no `PodStarts`, `PodSucceeds`,
    /// `PodDeleted`, `PodGone`, `PodRecreated`): for runs about grants alone.
    pods_idle: bool,
    /// The first pod holds but has not started yet (with `start_held`).
    held_pending: bool,
    /// A new lock: no reservation, no Lease; the first pod waits from the start, the others
    /// arrive later ([`Action::PodRecreated`]). The Lease is created lazily, at the first grant.
    fresh: bool,
    /// `nodeLossTimeoutSeconds` (the lease stays 3 s).
    node_loss_secs: u64,
    /// `startTimeoutSeconds`.
    start_timeout_secs: u64,
    /// `spec.maxHolders` at the start: `None` for a single-holder lock, `Some(n)` (n <= 2) for a
    /// semaphore with n slots.
    max_holders: Option<u8>,
    /// Someone sets `spec.maxHolders` to this (once, at any time): lowering a semaphore, or
    /// turning a single-holder lock into one ([`Action::MaxHoldersChanged`]).
    change_max_holders: Option<u8>,
    /// Review: the change removes `spec.maxHolders` instead (back to a single-holder lock).
    remove_max_holders: bool,
    /// `Settings::claim_record_delay` in seconds: 0 (the record as soon as it is due) or the
    /// operator's 1 (`controller::CLAIM_RECORD_DELAY`).
    record_delay_secs: u64,
    /// The first pod was created before every claim but no operator's cache has seen it yet
    /// (a watch that lags): it is the oldest waiter once seen.
    unseen_old_pod: bool,
    /// Requests per claim (issue 12, the standing claim): 1, a one-shot claim (its candidate
    /// UID is the claim's UID); more, a standing claim whose process asks again after each
    /// answer, by raising `spec.request` ([`Action::ClaimRequestsAgain`]); each request's
    /// candidate UID is `grant::request_uid(uid, request)`.
    requests: u8,
    /// A standing claim's process that waits (plain wait) may arrive by the Lease
    /// ([`Action::ClaimArrivesByLease`], `grant::lease_arrival`) instead of by its claim.
    lease_arrivals: bool,
    /// A process whose request waits by its claim may arrive by the Lease itself, naming itself
    /// as the next-holder hint ([`Action::ClaimWaiterArrives`], `grant::lease_arrival`), once
    /// per request.
    waiter_hints: bool,
    /// With `waiter_hints`: that arrival may also take a free Lease (the code does both; the
    /// runs with takes are smaller, as a take at any moment multiplies the states).
    waiter_takes: bool,
    /// With `waiter_takes`: the answer to that take may be lost, whether it landed or not
    /// ([`Action::ClaimWaiterTakeUnanswered`]).
    waiter_take_unanswered: bool,
    /// Someone lowers the lock's `leaseDurationSeconds` from 3 to 1 (once, at any time:
    /// [`Action::LeaseDurationLowered`]).
    lower_lease: bool,
    /// The lock's `status.tokenCeiling` at the start (the reservation made by its first
    /// reconcile: one block, 1000).
    initial_ceiling: i64,
    /// Start on a Lease recreated free after a deletion (token 0, floor the reservation) once
    /// token 5 was handed out under the deleted one, each claim's first request answered (its
    /// process done with it): for the planted [`Bug::ArrivalIgnoresFloor`].
    recreated_lease: bool,
    /// Start where a standing claim's handover just happened: claim-y holds its first request
    /// (token 1, recorded), claim-x released its first (listed in `leasehold.dev/released`,
    /// unrecorded in its status) and its process is done with it.
    start_claim_held: bool,
    /// Per pod slot and per claim: its busy policy.
    pod_policy: [Policy; 3],
    claim_policy: [Policy; 2],
    bug: Option<Bug>,
}

impl Config {
    /// One operator, one fault, one restart, no time: each run says what it changes.
    const BASE: Config = Config {
        pods: 0,
        claims: 0,
        operators: 1,
        max_time: 0,
        faults: 1,
        restarts: 1,
        forge: false,
        recreate: false,
        start_held: false,
        start_held_slots: 1,
        pods_idle: false,
        held_pending: false,
        fresh: false,
        node_loss_secs: 3,
        start_timeout_secs: 10_000,
        max_holders: None,
        change_max_holders: None,
        remove_max_holders: false,
        record_delay_secs: 0,
        unseen_old_pod: false,
        requests: 1,
        lease_arrivals: false,
        waiter_hints: false,
        waiter_takes: false,
        waiter_take_unanswered: false,
        lower_lease: false,
        initial_ceiling: 1000,
        recreated_lease: false,
        start_claim_held: false,
        pod_policy: [Policy::WAIT; 3],
        claim_policy: [Policy::WAIT; 2],
        bug: None,
    };

    /// How many Lease slots the lock can ever use (1 for a single-holder lock).
    fn slots(&self) -> usize {
        usize::from(self.max_holders.unwrap_or(1).max(self.change_max_holders.unwrap_or(1)).max(1))
    }

    /// The operator's settings from a lock whose `leaseDurationSeconds` is `lease_secs`.
    fn settings(&self, lease_secs: u8) -> Settings {
        Settings {
            start_timeout: Duration::from_secs(self.start_timeout_secs),
            node_loss_timeout: Duration::from_secs(self.node_loss_secs),
            lease_duration: Duration::from_secs(lease_secs.into()),
            claim_record_delay: Duration::from_secs(self.record_delay_secs),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct LeaseObj {
    rv: u16,
    holder: Option<(String, String, HolderKind)>,
    token: i64,
    /// `leasehold.dev/token-floor`; `None` when missing (a Lease the operator did not write).
    floor: Option<i64>,
    renew: Option<u16>,
    /// Generation ([`LockObj::uid`]) of the lock object its controller ownerReference names.
    owner: u8,
    /// The next-holder hint (`leasehold.dev/next-holder`, `-uid`, `next-token`): identity, UID,
    /// token.
    next: Option<(String, String, i64)>,
    /// `leasehold.dev/released`: request UIDs of standing claims their holders released.
    released: Vec<String>,
    /// `leasehold.dev/token-ceiling`: the lock's reservation as the operator that last wrote
    /// the Lease knew it (single-holder locks only; `None` on a semaphore's Leases).
    ceiling: Option<i64>,
    /// `spec.leaseDurationSeconds` (`grant::lease_duration_to_write`).
    duration: u8,
    /// `leasehold.dev/next-lease-duration`: the lock's value in the view of the operator that
    /// wrote the hint (none on a waiter's own hint); the handover writes it into `duration`.
    next_duration: Option<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct LockObj {
    rv: u16,
    /// The object's UID, as a generation: 0, then 1 once deleted and recreated with the same
    /// name ([`Action::LockRecreated`]).
    uid: u8,
    ceiling: i64,
    highest: i64,
    /// `spec.maxHolders`.
    max_holders: Option<u8>,
    /// `status.slotTokens`: per slot, the token last reserved for a grant there.
    slot_tokens: Vec<i64>,
    /// `spec.leaseDurationSeconds`.
    lease_secs: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum PodPhase {
    Pending,
    Running,
    Succeeded,
    /// Set by the operator's rejection (status patch): terminal for the API.
    Failed,
    /// Rejected while its containers ran: the API shows Failed, the kubelet is still stopping
    /// them (they run until [`Action::PodStopped`]).
    FailedStopping,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PodObj {
    rv: u16,
    uid: String,
    created: i64,
    gated: bool,
    phase: PodPhase,
    deleting: bool,
    token: Option<i64>,
    node_lost: bool,
    /// Generation of the lock object whose operator granted `token` (for the planted bug
    /// [`Bug::IgnoreOldGrants`]; the pod's `leasehold.dev/granted-lock` names the lock, not
    /// its UID, so the product cannot tell).
    granted_by: Option<u8>,
    /// `leasehold.dev/slot`: the semaphore slot of its grant.
    slot: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ClaimObj {
    rv: u16,
    uid: String,
    created: i64,
    /// `spec.request` (1 for a one-shot claim) and `spec.requestTime`.
    request: u8,
    requested_at: i64,
    /// `status.request`: the request that `token`, `rejected` and `slot` are about.
    status_request: u8,
    token: Option<i64>,
    /// `status.phase: Rejected` (the operator's rejection).
    rejected: bool,
    /// `status.slot`: the semaphore slot of its grant (whose Lease its process renews).
    slot: u8,
}

/// The process behind a claim (`leasehold lock` or a library holder).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
struct ClaimProc {
    /// Its work runs (it believes it holds): with this token.
    holding: Option<i64>,
    /// Start of its last successful renewal (seconds).
    last_renew: u8,
    paused: bool,
    /// It saw a grant, or gave up, once (a claim is used for one grant).
    done: bool,
    /// The token of its claim's grant as handed (I2), by the status patch or by its process
    /// learning it from the Lease, whichever came first: the other hands nothing new.
    handed: Option<i64>,
    /// The slot whose Lease it renews (from its claim's status when it learned the grant).
    slot: u8,
    /// The request it works on (0 reads as 1: [`ClaimProc::req`]).
    request: u8,
    /// When that request was sent (seconds; unused for the first, sent at [`CLAIM_QUEUED_AT`]).
    queued_at: u8,
    /// The highest request it released by a Lease write that named it. A Lease that names a
    /// released request again breaks I3. (A request it gave up on may still be named by a stale
    /// hint, as a one-shot claim deleted under it may: it holds unrenewed until it expires.)
    finished: u8,
    /// How its current request arrived (what [`Action::ClaimWaiterArrives`] may do).
    arrived: Arrived,
    /// The lock's `leaseDurationSeconds` as it read it before it sent its current request
    /// (`Holder::read_timings`).
    read_secs: u8,
    /// The renew deadline of its grant ([`renew_deadline`] of the shorter of its read value
    /// and its grant's Lease's: `holder::granted_timings`).
    deadline: u8,
}

/// How a process's current request arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
enum Arrived {
    /// By its claim (`spec.request`), as the first request does: it may name itself as the
    /// hint ([`Action::ClaimWaiterArrives`]).
    #[default]
    ByClaim,
    /// By the Lease ([`Action::ClaimArrivesByLease`]), not (yet) again by its claim.
    ByLease,
    /// By its claim, and it has arrived by the Lease itself once since (a hint, or a take).
    HintedItself,
    /// By its claim, then its own take, whose answer was lost
    /// ([`Action::ClaimWaiterTakeUnanswered`]).
    TookUnanswered,
}

impl ClaimProc {
    fn req(&self) -> u8 {
        self.request.max(1)
    }

    /// Holds the grant of a Lease whose `leaseDurationSeconds` is `granted` (`bug`: the planted
    /// [`Bug::HolderKeepsReadDuration`]): sets its renew deadline.
    fn grant_deadline(&mut self, granted: u8, bug: Option<Bug>) -> u8 {
        let secs = if bug == Some(Bug::HolderKeepsReadDuration) { self.read_secs } else { self.read_secs.min(granted) };
        self.deadline = renew_deadline(secs);
        self.deadline
    }
}

/// The renew deadline of a holder whose lease duration is `lease_secs`, in whole seconds: 2 of
/// 3 (client-go's 2/3). A 1 s lease's deadline (2/3 s in the code) is modelled as 1: the holder
/// stops at the tick that reaches it, before any operator acts at that second, so it still ends
/// before the operator's expiry.
fn renew_deadline(lease_secs: u8) -> u8 {
    lease_secs.saturating_sub(1).max(1)
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct View {
    /// The Lease of each slot (index 0: the lock's own Lease, the only one of a single-holder
    /// lock).
    leases: Vec<Option<LeaseObj>>,
    lock: LockObj,
    pods: Vec<Option<PodObj>>,
    claims: Vec<Option<ClaimObj>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Session {
    view: View,
    fresh_reservation: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Operator {
    cache: View,
    session: Option<Session>,
    clocks: Clocks,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct World {
    now: u8,
    next_rv: u16,
    api: View,
    ops: Vec<Operator>,
    procs: Vec<ClaimProc>,
    /// Tokens handed to holders, in grant order, each with the generation of the lock object
    /// the granting operator acted for (its view's [`LockObj::uid`]) and the slot.
    handed: Vec<(u8, u8, i64)>,
    /// `spec.maxHolders` was changed ([`Config::change_max_holders`]).
    max_changed: bool,
    /// Token reservations of a semaphore that landed: (from, to, `maxHolders` of the lock
    /// object they were made on). A grant of a token in (from, to] is checked against that limit.
    reservations: Vec<(i64, i64, u8)>,
    /// `tokenCeiling` of the deleted lock object (generation 0) once it is recreated.
    old_ceiling: i64,
    faults: u8,
    restarts: u8,
    /// Bit per pod slot: its pod was recreated once (the bound).
    recreated: u8,
    /// A transition broke I2 or I3 (checked where it happens): what.
    broken: Option<&'static str>,
    /// What happened on this path (coverage: [`RECLAIMED`], [`REJECTED_BUSY`],
    /// [`REJECTED_TIMEOUT`]).
    events: u32,
    /// Claims are standing claims ([`Config::requests`] > 1): candidate UIDs are request UIDs.
    standing: bool,
}

/// A start timeout's `DeletePod` landed on its holder.
const RECLAIMED: u32 = 1;
/// A skip waiter was rejected (LockBusy).
const REJECTED_BUSY: u32 = 2;
/// A max-wait waiter was rejected (LockWaitTimeout).
const REJECTED_TIMEOUT: u32 = 4;
/// A holder was granted by the recreated lock object.
const GRANTED_AFTER_RECREATE: u32 = 8;
/// An operator's step ended idle on a lock without a Lease (nobody to grant: none is created).
const IDLE_WITHOUT_LEASE: u32 = 16;
/// A holder was granted after `spec.maxHolders` changed.
const GRANTED_AFTER_CHANGE: u32 = 32;
/// A claim holder's release handed the lock to the next-holder hint.
const HANDED_OVER: u32 = 64;
/// An operator's step left a claim holder's status unrecorded for now (it holds by the Lease:
/// `claim_record_delay`), with a timer for the record.
const RECORD_WAITED: u32 = 128;
/// A claim's process released its grant while its claim's status did not record it yet.
const RELEASED_UNRECORDED: u32 = 256;
/// A standing claim's process learned the grant of its second request.
const REQUESTED_AGAIN: u32 = 512;
/// A request that arrived by the Lease was handed the lock (by a release to its hint, or by the
/// operator's grant), or took the free Lease itself.
const GRANTED_BY_LEASE_ARRIVAL: u32 = 1024;
/// A process displaced from the Lease arrived again by its claim.
const ARRIVED_AGAIN: u32 = 2048;
/// A process that named itself as the next-holder hint ([`Action::ClaimWaiterArrives`]) saw its
/// grant.
const WAITER_HINT_GRANTED: u32 = 4096;
/// A process whose request waited by its claim took the free Lease itself
/// ([`Action::ClaimWaiterArrives`]).
const WAITER_TOOK: u32 = 8192;
/// A process whose own take's answer was lost learned its grant ([`Action::ClaimLearns`]).
const UNANSWERED_TAKE_LEARNED: u32 = 16384;
/// The lock's lease duration was lowered while a claim's process held.
const LOWERED_UNDER_HOLDER: u32 = 32768;
/// A process that read the old lease duration learned a grant written under the lowered one.
const LOWERED_GRANT_LEARNED: u32 = 1 << 16;
/// A release handed the lock over with the lock's lease duration from the operator's hint, other
/// than the Lease's.
const HANDED_OVER_NEW_DURATION: u32 = 1 << 17;
const REJECTED_THEN_GRANTED: &str = "I3: a rejected waiter was granted";

/// The annotations an operator's Lease write sets beside the holder: the next-holder hint,
/// `leasehold.dev/released` and `leasehold.dev/token-ceiling`.
type Annotations<'a> = (Option<&'a Next>, Vec<String>, Option<i64>);

/// A kind the operator watches: each kind's cache lags on its own (its own watch).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Lease,
    Lock,
    Pods,
    Claims,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Action {
    /// Operator `n` takes one step of its reconcile (one write).
    Step(usize),
    /// Operator `n`'s cache of one kind catches up with the API server.
    Sync(usize, Kind),
    /// Someone lowers the lock's `spec.leaseDurationSeconds` to [`LOWERED_LEASE_SECS`]
    /// ([`Config::lower_lease`]; once).
    LeaseDurationLowered,
    /// Operator `n` crashes and restarts: fresh list, fresh clocks.
    Restart(usize),
    /// One second passes.
    Tick,
    /// kube-scheduler + kubelet start an ungated pod.
    PodStarts(usize),
    /// The pod's containers finish.
    PodSucceeds(usize),
    /// Graceful deletion: the containers keep running until the object is gone.
    PodDeleted(usize),
    /// The deleted pod's containers stopped and the object is gone.
    PodGone(usize),
    /// A new pod with the same name (new UID) asks for the lock.
    PodRecreated(usize),
    /// The pod's node stops reporting; its containers may keep running.
    NodeLost(usize),
    /// The kubelet stopped the containers of a pod the operator marked Failed while they ran.
    PodStopped(usize),
    /// The claim's process sees its grant, from its claim's status (`None`: then it reads the
    /// Lease of the status's slot and acts only if that names it, with the Lease's token) or from
    /// slot `k`'s Lease naming it (`Some(k)`; the holder watches both, issue 12: the Lease is
    /// written one write before the status): within the renew deadline of its claim's creation it holds at
    /// once (its deadline counted from that creation), later only after a first renewal.
    ClaimLearns(usize, Option<usize>),
    /// The claim's process sees its claim rejected or gone before it saw a grant, and gives up
    /// (`HolderError::Busy`, `Rejected`, `ClaimDeleted`): it never acts on a grant afterwards.
    ClaimGivesUp(usize),
    /// The claim's process renews: one atomic step that sets `renewTime` while the Lease names
    /// it ([`World::renew`]; `holder::renew`'s JSON Patch with `test` operations).
    ClaimRenews(usize),
    ClaimPaused(usize),
    ClaimResumed(usize),
    /// The process releases: frees the Lease if it still names it, stops its work.
    ClaimReleases(usize),
    /// Someone deletes the claim object; its process does not know.
    ClaimDeleted(usize),
    /// A standing claim's process, done with its request (released, lost or given up), asks
    /// again: one merge patch of its claim raising `spec.request` (and `spec.requestTime`).
    ClaimRequestsAgain(usize),
    /// A standing claim's process, done with its request, asks again by the Lease instead
    /// (`grant::lease_arrival`, issue 12, "The arrival writes the hint"): one compare-and-swap
    /// that names its next request as the next-holder hint (the lock held, no hint) or takes the
    /// free Lease as holder, with the Lease's next token, only up to its
    /// `leasehold.dev/token-ceiling`. Its claim's `spec.request` stays where it was.
    ClaimArrivesByLease(usize),
    /// A process whose request is above its claim's `spec.request` (it arrived by the Lease) and
    /// that the Lease no longer names (the operator replaced its hint, the Lease was deleted)
    /// arrives again by its claim: one merge patch setting `spec.request` to that request and
    /// `spec.requestTime` to when it first arrived.
    ClaimReArrives(usize),
    /// A process whose request waits by its claim (`spec.request` names it) arrives by the Lease
    /// itself, once per request (`grant::lease_arrival`, `grant::WAITER_ARRIVES_AFTER`, issue 12:
    /// the holder library's fallback when the operator's own hint or grant is slow to come): one
    /// compare-and-swap on the lock's Lease with no hint, with the Lease's next token up to its
    /// `leasehold.dev/token-ceiling`, that names it as the next-holder hint (held by another
    /// claim) or takes it (free: it holds from that write, as a Lease arrival's take does). Its
    /// claim stays as it is.
    ClaimWaiterArrives(usize),
    /// The take of [`Action::ClaimWaiterArrives`] whose answer is lost (a timeout, a broken
    /// connection): it landed (`true`) or not, and the process does not know which. It makes no
    /// more arrivals for this request and waits on: the Lease (its watch) or the claim's status
    /// shows the grant if the take landed ([`Action::ClaimLearns`], held from the request's
    /// time, which is before the write). `holder::Holder::arrive_itself`, `OwnArrival::Done`.
    ClaimWaiterTakeUnanswered(usize, bool),
    /// A third party deletes slot `n`'s Lease.
    LeaseDeleted(usize),
    /// A third party edits the Lease to name waiting pod `n` with a plausible token.
    LeaseForged(usize),
    /// Someone deletes the lock and creates it again with the same name: a new UID, an empty
    /// status (`tokenCeiling` 0). Pods and claims keep their annotations and tokens.
    LockRecreated,
    /// The garbage collector deletes slot `n`'s Lease: its owner (the lock object) is gone.
    LeaseCollected(usize),
    /// Someone sets `spec.maxHolders` ([`Config::change_max_holders`]).
    MaxHoldersChanged,
}

struct LockModel {
    cfg: Config,
}

fn created(slot: usize, generation: i64) -> i64 {
    100 * generation + slot as i64
}

impl LockModel {
    fn initial(&self) -> World {
        let pods = (0..self.cfg.pods)
            .map(|i| {
                Some(PodObj {
                    rv: 1,
                    uid: format!("{}-0", POD_NAMES[i]),
                    created: created(i, 0),
                    gated: true,
                    phase: PodPhase::Pending,
                    deleting: false,
                    token: None,
                    node_lost: false,
                    granted_by: None,
                    slot: 0,
                })
            })
            .collect();
        let claims = (0..self.cfg.claims)
            .map(|i| {
                Some(ClaimObj {
                    rv: 1,
                    uid: format!("{}-0", CLAIM_NAMES[i]),
                    created: -10 + i as i64,
                    request: 1,
                    requested_at: -10 + i as i64,
                    status_request: 1,
                    token: None,
                    rejected: false,
                    slot: 0,
                })
            })
            .collect();
        // Start where every lock is after its first reconcile: tokens reserved, the Lease
        // created free (the bootstrap path is explored again after a Lease deletion).
        let lease = LeaseObj {
            rv: 1,
            holder: None,
            token: 0,
            floor: Some(0),
            renew: None,
            owner: 0,
            next: None,
            released: vec![],
            ceiling: self.cfg.max_holders.is_none().then_some(self.cfg.initial_ceiling),
            duration: LEASE_SECS,
            next_duration: None,
        };
        let lock = LockObj {
            rv: 1,
            uid: 0,
            ceiling: self.cfg.initial_ceiling,
            highest: 0,
            max_holders: self.cfg.max_holders,
            slot_tokens: vec![],
            lease_secs: LEASE_SECS,
        };
        // A semaphore's slot Leases too (each is created like the lock's own, lazily, at its
        // first grant: explored from `fresh` and after a Lease deletion).
        let mut leases = vec![None; self.cfg.slots()];
        leases[..usize::from(self.cfg.max_holders.unwrap_or(1).max(1))].fill(Some(lease));
        let mut api = View { leases, lock, pods, claims };
        if self.cfg.fresh {
            api.leases[0] = None;
            api.lock.ceiling = 0;
            api.pods.iter_mut().skip(1).for_each(|p| *p = None);
        }
        let mut handed = vec![];
        let held = if self.cfg.start_held { self.cfg.start_held_slots.max(1) } else { 0 };
        for (k, name) in POD_NAMES.iter().enumerate().take(usize::from(held)) {
            let p = api.pods[k].as_mut().unwrap();
            let phase = if self.cfg.held_pending { PodPhase::Pending } else { PodPhase::Running };
            let token = k as i64 + 1;
            (p.gated, p.phase, p.token, p.granted_by, p.slot) = (false, phase, Some(token), Some(0), k as u8);
            let holder = Some((name.to_string(), p.uid.clone(), HolderKind::Pod));
            api.leases[k] = Some(LeaseObj {
                rv: 1,
                holder,
                token,
                floor: Some(0),
                renew: Some(1),
                owner: 0,
                next: None,
                released: vec![],
                ceiling: self.cfg.max_holders.is_none().then_some(self.cfg.initial_ceiling),
                duration: LEASE_SECS,
                next_duration: None,
            });
            api.lock.highest = token;
            if self.cfg.max_holders.is_some() {
                api.lock.slot_tokens.resize(k + 1, 0);
                api.lock.slot_tokens[k] = token;
            }
            handed.push((0, k as u8, token));
        }
        let proc = ClaimProc { read_secs: LEASE_SECS, deadline: renew_deadline(LEASE_SECS), ..ClaimProc::default() };
        let mut procs = vec![proc; self.cfg.claims];
        if self.cfg.recreated_lease {
            let l = api.leases[0].as_mut().unwrap();
            (l.token, l.floor) = (0, Some(self.cfg.initial_ceiling));
            api.lock.highest = 5;
            handed.push((0, 0, 5));
            for (c, p) in api.claims.iter_mut().flatten().zip(&mut procs) {
                c.rejected = true;
                (p.request, p.done) = (1, true);
            }
        }
        if self.cfg.start_claim_held {
            let y = api.claims[1].as_mut().unwrap();
            y.token = Some(1);
            let l = api.leases[0].as_mut().unwrap();
            (l.holder, l.token, l.renew) =
                (Some((CLAIM_NAMES[1].into(), grant::request_uid(&y.uid, 1), HolderKind::Claim)), 1, Some(1));
            l.released = vec![grant::request_uid(&api.claims[0].as_ref().unwrap().uid, 1)];
            api.lock.highest = 1;
            handed.push((0, 0, 1));
            (procs[0].request, procs[0].done, procs[0].finished) = (1, true, 1);
            (procs[1].request, procs[1].done, procs[1].holding, procs[1].handed) = (1, true, Some(1), Some(1));
        }
        let mut cache = api.clone();
        if self.cfg.unseen_old_pod {
            api.pods[0].as_mut().unwrap().created = -20;
            cache.pods[0] = None;
        }
        let op = Operator { cache, session: None, clocks: Clocks::default() };
        World {
            now: 0,
            next_rv: 2,
            api,
            ops: vec![op; self.cfg.operators],
            procs,
            handed,
            max_changed: false,
            reservations: vec![],
            old_ceiling: 0,
            faults: 0,
            restarts: 0,
            recreated: 0,
            broken: None,
            events: 0,
            standing: self.cfg.requests > 1,
        }
    }
}

/// A claim's candidate UID: its object UID, or for a standing claim the request UID of
/// `request` (`grant::request_uid`).
fn claim_uid(object: &str, request: u8, standing: bool) -> String {
    if standing { grant::request_uid(object, request.into()) } else { object.to_string() }
}

/// The request standing claim `c` is at, as `grant::current_request` reads it from its spec, its
/// status and (if given) the Lease.
fn effective_request(c: &ClaimObj, lease: Option<&LeaseView>, identity: &str) -> u8 {
    let r = grant::current_request(c.request.into(), Some(c.status_request.into()), lease, &c.uid, identity);
    u8::try_from(r).unwrap()
}

/// What the operator's conversion functions (`candidate_of_pod`, `candidate_of_claim`,
/// `lease::view`) make of the modelled objects.
fn snapshot(view: &View, fresh_reservation: Option<i64>, cfg: &Config) -> Snapshot {
    snapshot_of(view, fresh_reservation, cfg, true)
}

/// [`snapshot`]; `by_lease` false: a standing claim's request as its claim object alone says
/// (`max(spec.request, status.request)`), what `grant::keep_released` is given.
fn snapshot_of(view: &View, fresh_reservation: Option<i64>, cfg: &Config, by_lease: bool) -> Snapshot {
    let ts = |s: i64| Timestamp::from_second(1_700_000_000 + s).unwrap();
    let lease_view = |l: &LeaseObj| LeaseView {
        holder: l.holder.as_ref().map(|(name, uid, kind)| Holder {
            name: name.clone(),
            uid: Some(uid.clone()),
            kind: *kind,
        }),
        token: l.token,
        floor: l.floor.unwrap_or(0),
        trusted: l.floor.is_some() && (l.holder.is_none() || l.token > 0),
        released: l.released.clone(),
        next: l.next.as_ref().map(|(identity, uid, token)| Next {
            identity: identity.clone(),
            uid: uid.clone(),
            token: *token,
        }),
        ceiling: l.ceiling,
        lease_duration: (cfg.bug != Some(Bug::ExpiryBySpec)).then(|| Duration::from_secs(l.duration.into())),
        next_lease_duration: l.next_duration.map(|d| Duration::from_secs(d.into())),
    };
    let lease0 = view.leases[0].as_ref().map(lease_view);
    let still_waits = cfg.bug == Some(Bug::RejectedStillWaits);
    let policy = |p: Policy| {
        let on_busy = if p.skip { BusyPolicy::Skip } else { BusyPolicy::Wait };
        let max_wait = p.max_wait.filter(|_| cfg.bug != Some(Bug::IgnoreMaxWait)).map(Duration::from_secs);
        (on_busy, max_wait)
    };
    let mut candidates = vec![];
    for (i, p) in view.pods.iter().enumerate() {
        let Some(p) = p else { continue };
        if cfg.bug == Some(Bug::IgnoreOldGrants) && p.granted_by.is_some_and(|g| g != view.lock.uid) {
            continue;
        }
        let started = p.phase != PodPhase::Pending;
        let (on_busy, max_wait) = policy(cfg.pod_policy[i]);
        candidates.push(Candidate {
            kind: HolderKind::Pod,
            name: POD_NAMES[i].into(),
            identity: POD_NAMES[i].into(),
            uid: p.uid.clone(),
            resource_version: p.rv.to_string(),
            created: ts(p.created),
            gated: p.gated,
            node_name: started.then(|| "node-1".to_string()),
            node_lost: started && p.node_lost,
            phase: match p.phase {
                PodPhase::Pending => Phase::Pending,
                PodPhase::Running => Phase::Running,
                PodPhase::Succeeded => Phase::Succeeded,
                PodPhase::Failed if still_waits && p.gated => Phase::Pending,
                PodPhase::Failed | PodPhase::FailedStopping => Phase::Failed,
            },
            deleting: p.deleting,
            token: p.token,
            on_busy,
            max_wait,
            waiting_for: None,
            slot: if cfg.bug == Some(Bug::IgnoreSlot) { 0 } else { u32::from(p.slot) },
            multi: None,
        });
    }
    for (i, c) in view.claims.iter().enumerate() {
        let Some(c) = c else { continue };
        let (on_busy, max_wait) = policy(cfg.claim_policy[i]);
        // `candidate_of_claim`: a standing claim is at the highest request its spec, its status
        // or the Lease names (`grant::current_request`); one known only from the Lease queues
        // last (`grant::LEASE_ARRIVAL_QUEUED`). The status counts for the request it is about;
        // Rejected wins over a token.
        let by_lease = by_lease || cfg.bug == Some(Bug::KeepByLeaseRequests);
        let request = effective_request(c, lease0.as_ref().filter(|_| by_lease && cfg.requests > 1), CLAIM_NAMES[i]);
        let lease_only = request > c.request.max(c.status_request);
        let current = c.status_request == request;
        let (rejected, token, slot) = if current { (c.rejected, c.token, c.slot) } else { (false, None, 0) };
        let c = &ClaimObj { rejected, token, slot, request, ..c.clone() };
        let phase = match (c.rejected, c.token) {
            (true, None) if still_waits => Phase::Pending,
            (true, _) => Phase::Failed,
            (false, Some(_)) => Phase::Running,
            (false, None) => Phase::Pending,
        };
        let kind =
            if cfg.bug == Some(Bug::RejectedClaimAsPod) && c.rejected { HolderKind::Pod } else { HolderKind::Claim };
        candidates.push(Candidate {
            kind,
            name: CLAIM_NAMES[i].into(),
            identity: CLAIM_NAMES[i].into(),
            uid: claim_uid(&c.uid, c.request, cfg.requests > 1),
            resource_version: c.rv.to_string(),
            created: if lease_only { grant::LEASE_ARRIVAL_QUEUED } else { ts(c.requested_at) },
            gated: c.token.is_none(),
            node_name: None,
            node_lost: false,
            phase,
            deleting: false,
            token: c.token,
            on_busy,
            max_wait,
            waiting_for: None,
            slot: if cfg.bug == Some(Bug::IgnoreSlot) { 0 } else { u32::from(c.slot) },
            multi: None,
        });
    }
    let marker = |l: &Option<LeaseObj>| l.as_ref().and_then(|l| l.renew).map(|r| r.to_string());
    Snapshot {
        settings: cfg.settings(view.lock.lease_secs),
        lease: lease0,
        renew_marker: marker(&view.leases[0]),
        extra_slots: view.leases[1..]
            .iter()
            .map(|l| SlotLease { lease: l.as_ref().map(lease_view), renew_marker: marker(l) })
            .collect(),
        max_holders: view.lock.max_holders.map(u32::from),
        candidates,
        ceiling: view.lock.ceiling,
        slot_tokens: view.lock.slot_tokens.clone(),
        highest_token: view.lock.highest,
        fresh_reservation,
    }
}

impl World {
    fn rv(&mut self) -> u16 {
        self.next_rv += 1;
        self.next_rv
    }

    /// The reservation (`tokenCeiling`) of lock object `generation`: the live one's, or the
    /// last one the deleted object had.
    fn ceiling_of(&self, generation: u8) -> i64 {
        if generation == self.api.lock.uid { self.api.lock.ceiling } else { self.old_ceiling }
    }

    /// The last token handed out for lock object `generation` in `slot`.
    fn last_handed(&self, generation: u8, slot: u8) -> Option<i64> {
        self.handed.iter().rev().find(|(g, k, _)| *g == generation && *k == slot).map(|(_, _, t)| *t)
    }

    /// I2 is per lock object: a recreated lock may start again at 1 once no holder of the old
    /// one runs (a holder that still runs is I1's business: nobody else may run beside it).
    /// Per slot, tokens strictly increase in grant order; across the slots of a semaphore no
    /// token repeats (a single-holder lock has slot 0 only: its tokens strictly increase).
    fn hand(&mut self, generation: u8, slot: u8, token: i64) {
        if self.last_handed(generation, slot).is_some_and(|last| token <= last) {
            self.broken.get_or_insert("I2: a token handed to a holder is not above every earlier one in its slot");
        }
        if self.handed.iter().any(|(g, _, t)| *g == generation && *t == token) {
            self.broken.get_or_insert("I2: a token was handed to two holders");
        }
        if token > self.ceiling_of(generation) {
            self.broken.get_or_insert("I2: a token above the reservation was handed out");
        }
        // A semaphore grant whose token was reserved on a lock object allowing `m` holders is
        // handed only while fewer than `m` others' work runs: a lowered maxHolders revokes
        // nobody, and grants nothing more until fewer than the new limit hold.
        let limit = self.reservations.iter().find(|(from, to, _)| *from < token && token <= *to).map(|r| r.2);
        if let Some(m) = limit {
            let others = self.running().iter().filter(|r| !(r.1 || (r.3 == slot && r.0 == token))).count();
            if others >= usize::from(m.max(1)) {
                self.broken.get_or_insert("I1: a grant reserved under maxHolders m was handed while m others ran");
            }
        }
        if self.max_changed {
            self.events |= GRANTED_AFTER_CHANGE;
        }
        self.handed.push((generation, slot, token));
    }

    /// The Lease the operator writes: `holder` (or free), keeping the last token when free, with
    /// the next-holder hint `next` and the `leasehold.dev/released` list `released`.
    /// `owner`: the ownerReference (a create sets the lock object of the writer's view; an
    /// update keeps the one it read).
    /// `lock_secs`: the lock's `leaseDurationSeconds` in the writer's view.
    #[allow(clippy::too_many_arguments)]
    fn write_lease(
        &mut self,
        slot: usize,
        base: Option<&LeaseObj>,
        holder: Option<&Grant>,
        floor: Option<i64>,
        owner: u8,
        lock_secs: u8,
        (next, released, written_ceiling): Annotations,
    ) -> LeaseObj {
        if let Some(g) = holder {
            self.check_unfinished(&g.uid);
        }
        let rv = self.rv();
        let token = holder.map_or(base.map_or(0, |b| b.token), |g| g.token);
        let ceiling = self.ceiling_of(owner);
        if token > ceiling || floor.is_some_and(|f| f > ceiling) {
            self.broken.get_or_insert("I2: the Lease was written above the reservation");
        }
        if written_ceiling.is_some_and(|c| c > ceiling) {
            self.broken.get_or_insert("I2: the Lease's token-ceiling is above the reservation");
        }
        // The next grant's token is above the Lease's token and its floor (`fencing::next_token`):
        // a Lease recreated above a fresh reservation may name an adopted holder with an older
        // token without any later token repeating one handed out.
        let written_floor = floor.or(base.and_then(|b| b.floor)).unwrap_or(0);
        if holder.is_some() && self.last_handed(owner, slot as u8).is_some_and(|last| token.max(written_floor) < last) {
            self.broken.get_or_insert("I2: the operator moved the Lease's token below one it handed out");
        }
        // `lease::apply_grant`: the value of the grant the Lease names, kept while it holds.
        let seen = base.map(|b| LeaseView {
            holder: b.holder.as_ref().map(|(name, uid, kind)| Holder {
                name: name.clone(),
                uid: Some(uid.clone()),
                kind: *kind,
            }),
            token: b.token,
            lease_duration: Some(Duration::from_secs(b.duration.into())),
            ..LeaseView::default()
        });
        let duration = grant::lease_duration_to_write(seen.as_ref(), holder, Duration::from_secs(lock_secs.into()));
        let lease = LeaseObj {
            rv,
            holder: holder.map(|g| (g.identity.clone(), g.uid.clone(), g.kind)),
            token,
            floor: floor.or(base.and_then(|b| b.floor)),
            renew: holder.map(|_| rv),
            owner,
            next: next.map(|n| (n.identity.clone(), n.uid.clone(), n.token)),
            released,
            ceiling: written_ceiling,
            duration: u8::try_from(duration.as_secs()).unwrap(),
            next_duration: next.map(|_| lock_secs),
        };
        self.api.leases[slot] = Some(lease.clone());
        lease
    }

    /// I3 for standing claims: a Lease write that names request `uid` of a claim whose process
    /// released it (by a Lease write that named it).
    fn check_unfinished(&mut self, uid: &str) {
        if let (object, Some(r)) = grant::split_request_uid(uid)
            && let Some(i) = (0..self.procs.len()).find(|i| format!("{}-0", CLAIM_NAMES[*i]) == object)
            && i64::from(self.procs[i].finished) >= r
        {
            self.broken.get_or_insert("I3: a request its holder released was granted again");
        }
    }

    /// A Lease is gone, and with it its `leasehold.dev/released` list: the operator can no longer
    /// tell a released request from one whose process may still hold it, and it waits such a
    /// request out (adopted, or behind `grant::RECOVERY_HOLDER`) for a lease duration, which names
    /// it again, unrenewed. I3's check for released requests starts over.
    fn forget_releases(&mut self) {
        for p in &mut self.procs {
            p.finished = 0;
        }
    }

    /// What claim `i`'s process may write when it arrives by the Lease with its next request
    /// (`grant::lease_arrival` on the lock's Lease as the API server has it: the
    /// compare-and-swap reads it). Only a plain waiter (wait, no max-wait) of a standing claim.
    fn lease_arrival(&self, i: usize, cfg: &Config) -> Option<grant::LeaseArrival> {
        let policy = cfg.claim_policy[i];
        if !self.standing || policy.skip || policy.max_wait.is_some() {
            return None;
        }
        let mut view = snapshot(&self.api, None, cfg).lease?;
        match cfg.bug {
            Some(Bug::ArrivalAboveCeiling) => view.ceiling = view.ceiling.map(|_| i64::MAX),
            Some(Bug::ArrivalIgnoresFloor) => view.floor = 0,
            _ => {}
        }
        let uid = claim_uid(&format!("{}-0", CLAIM_NAMES[i]), self.procs[i].req() + 1, true);
        grant::lease_arrival(&view, CLAIM_NAMES[i], &uid)
    }

    /// Claim `i`'s process waits with a request above its claim's `spec.request` that the
    /// Lease does not name (neither as holder nor as next-holder hint): it must arrive again by
    /// its claim ([`Action::ClaimReArrives`]).
    fn re_arrival_due(&self, i: usize, cfg: &Config) -> bool {
        let p = &self.procs[i];
        let me = self.proc_uid(i);
        let named = self.api.leases[0].as_ref().is_some_and(|l| {
            l.holder.as_ref().is_some_and(|h| h.1 == me) || l.next.as_ref().is_some_and(|n| n.1 == me)
        });
        cfg.bug != Some(Bug::NoReArrival)
            && !p.done
            && !p.paused
            && !named
            && self.api.claims[i].as_ref().is_some_and(|c| c.request < p.req())
    }

    /// The Lease write claim `i`'s process may make for itself ([`Action::ClaimWaiterArrives`]):
    /// a plain waiter (no skip, no max-wait) of a standing claim, waiting (not paused) with a
    /// request that arrived by its claim and has not arrived by the Lease itself yet, on the
    /// lock's Lease as the API server has it (`grant::lease_arrival`: a hint, or a take).
    fn waiter_arrival(&self, i: usize, cfg: &Config) -> Option<grant::LeaseArrival> {
        let (policy, p) = (cfg.claim_policy[i], &self.procs[i]);
        let plain = !policy.skip && policy.max_wait.is_none();
        if !self.standing || !plain || p.done || p.paused || p.holding.is_some() || p.arrived != Arrived::ByClaim {
            return None;
        }
        let mut view = snapshot(&self.api, None, cfg).lease?;
        if cfg.bug == Some(Bug::ArrivalAboveCeiling) {
            view.ceiling = view.ceiling.map(|_| i64::MAX);
        }
        if cfg.bug == Some(Bug::WaiterTakesBlind) {
            // The free version it decided on is gone; the write lands anyway.
            view.holder = None;
        }
        grant::lease_arrival(&view, CLAIM_NAMES[i], &self.proc_uid(i))
            .filter(|a| cfg.waiter_takes || matches!(a, grant::LeaseArrival::Hint(_)))
    }

    /// Claim `i`'s process writes `arrival` into the lock's Lease itself, one compare-and-swap on
    /// the current version (a Lease arrival's, [`Action::ClaimArrivesByLease`], or a waiter's
    /// own, [`Action::ClaimWaiterArrives`]): the next-holder hint, or the take, which is its grant:
    /// it holds at once, from the write (`holder::Holder::arrive_by_lease`,
    /// `holder::Holder::arrive_itself`), unless the answer to the take is lost (`answered`
    /// false: [`Action::ClaimWaiterTakeUnanswered`]). Whether it took the Lease; `None` without
    /// a Lease.
    fn write_arrival(
        &mut self,
        i: usize,
        arrival: grant::LeaseArrival,
        answered: bool,
        bug: Option<Bug>,
    ) -> Option<bool> {
        let (rv, me) = (self.rv(), self.proc_uid(i));
        let lease = self.api.leases[0].as_mut()?;
        lease.rv = rv;
        match arrival {
            grant::LeaseArrival::Hint(n) => {
                (lease.next, lease.next_duration) = (Some((n.identity, n.uid, n.token)), None);
                Some(false)
            }
            grant::LeaseArrival::Take(token) => {
                (lease.holder, lease.token, lease.renew) =
                    (Some((CLAIM_NAMES[i].to_string(), me, HolderKind::Claim)), token, Some(rv));
                if answered {
                    self.hold_take(i, token, bug)?;
                }
                Some(true)
            }
        }
    }

    /// Claim `i`'s process holds the token `token` it took from the lock's Lease, from now: the
    /// answer to its take ([`World::write_arrival`]).
    fn hold_take(&mut self, i: usize, token: i64, bug: Option<Bug>) -> Option<()> {
        let lease = self.api.leases[0].as_ref()?;
        let (owner, granted, now) = (lease.owner, lease.duration, self.now);
        let p = &mut self.procs[i];
        p.grant_deadline(granted, bug);
        (p.holding, p.last_renew, p.done, p.handed) = (Some(token), now, true, Some(token));
        self.hand(owner, 0, token);
        Some(())
    }

    /// Claim `i`'s candidate UID for the request its process works on.
    fn proc_uid(&self, i: usize) -> String {
        claim_uid(&format!("{}-0", CLAIM_NAMES[i]), self.procs[i].req(), self.standing)
    }

    /// Operator `n`'s next decision, by the real step function, on its session view (or, with
    /// no session, its cache), with a planted bug applied to it.
    /// `None` when nothing is decided: the step function's error (tokens exhausted), or, at the
    /// start of a reconcile, a Lease controlled by another lock object (the controller's
    /// `LeaseNotOwned`: no write, a recheck later).
    fn decide(&self, n: usize, cfg: &Config) -> Option<(Session, machine::Step)> {
        let session = match &self.ops[n].session {
            Some(s) => s.clone(),
            None => {
                let cache = &self.ops[n].cache;
                if cache.leases.iter().flatten().any(|l| l.owner != cache.lock.uid) {
                    return None;
                }
                Session { view: cache.clone(), fresh_reservation: None }
            }
        };
        let snap = snapshot(&session.view, session.fresh_reservation, cfg);
        let now = Duration::from_secs(self.now.into());
        let mut step = machine::step(&snap, now, &self.ops[n].clocks).ok()?;
        let d = &mut step.plan.decision;
        match (cfg.bug, &*d) {
            (Some(Bug::IgnoreStartTimeout), Decision::DeletePod { .. }) => *d = Decision::Idle { requeue_after: None },
            (Some(Bug::NoGrantAfterRelease), Decision::UpdateLease { holder: Some(_), released, floor })
                if session.view.leases[0].as_ref().is_some_and(|l| l.token > 0) =>
            {
                *d = match released {
                    Some(_) => Decision::UpdateLease { holder: None, released: released.clone(), floor: *floor },
                    None => Decision::Idle { requeue_after: None },
                }
            }
            _ => {}
        }
        if cfg.bug == Some(Bug::NoRecoveryHolder)
            && let Decision::CreateLease { holder, .. } = &mut step.plan.decision
            && holder.as_ref().is_some_and(|g| g.identity == grant::RECOVERY_HOLDER)
        {
            *holder = None;
        }
        if cfg.bug == Some(Bug::HintTokenNotAbove)
            && let Some(n) = step.next.as_mut()
        {
            n.token -= 1;
        }
        Some((session, step))
    }

    /// One step of operator `n`: decide on its session view, apply the one write.
    fn step(&mut self, n: usize, cfg: &Config) {
        let bug = cfg.bug;
        let Some((session, step)) = self.decide(n, cfg) else {
            self.ops[n].session = None;
            return;
        };
        self.ops[n].clocks = step.clocks;
        let standing = self.standing;
        let unrecorded_holder =
            session.view.leases[0].as_ref().and_then(|l| l.holder.as_ref()).is_some_and(|(_, uid, _)| {
                session.view.claims.iter().flatten().any(|c| {
                    claim_uid(&c.uid, c.request, standing) == *uid
                        && (c.status_request != c.request || (c.token.is_none() && !c.rejected))
                })
            });
        // `leasehold.dev/released` as the operator's Lease writes keep it (`grant::keep_released`
        // over the candidates of its view).
        let candidates = snapshot_of(&session.view, None, cfg, false).candidates;
        let keep =
            |l: &Option<LeaseObj>| grant::keep_released(l.as_ref().map_or(&[][..], |l| &l.released), &candidates);
        if unrecorded_holder
            && matches!(step.plan.decision, Decision::Idle { requeue_after: Some(_) } | Decision::SetNext)
        {
            self.events |= RECORD_WAITED;
        }
        let slot = step.slot as usize;
        let mut view = session.view;
        let mut fresh = None;
        // `leasehold.dev/token-ceiling`: the reservation in the step's view (after a Reserve, the
        // fresh one), on a single-holder lock's Lease only.
        let ceiling = |v: &View| v.lock.max_holders.is_none().then_some(v.lock.ceiling).filter(|c| *c > 0);
        let ok = match step.plan.decision {
            Decision::Reserve { from, to } => {
                if self.api.lock.rv == view.lock.rv || bug == Some(Bug::ReserveWithoutPrecondition) {
                    if let Some(m) = view.lock.max_holders {
                        self.reservations.push((from, to, m));
                    }
                    self.api.lock.ceiling = to;
                    if let Some(k) = step.reserved_slot.map(|k| k as usize) {
                        let tokens = &mut self.api.lock.slot_tokens;
                        tokens.resize(tokens.len().max(k + 1), 0);
                        tokens[k] = to;
                    }
                    self.api.lock.rv = self.rv();
                    view.lock = self.api.lock.clone();
                    fresh = Some(from);
                    true
                } else {
                    false
                }
            }
            Decision::CreateLease { holder, floor } => {
                if self.api.leases[slot].is_none() {
                    let owner = view.lock.uid;
                    let (c, secs) = (ceiling(&view), view.lock.lease_secs);
                    let written =
                        self.write_lease(slot, None, holder.as_ref(), Some(floor), owner, secs, (None, vec![], c));
                    view.leases[slot] = Some(written);
                    true
                } else {
                    false
                }
            }
            Decision::UpdateLease { holder, floor, .. } => {
                let (keep, c) = (keep(&view.leases[slot]), ceiling(&view));
                self.cas_lease(slot, &mut view, holder.as_ref(), floor, bug, (step.next.as_ref(), keep, c))
            }
            Decision::RepairLease { holder, floor } => {
                let (keep, c) = (keep(&view.leases[slot]), ceiling(&view));
                self.cas_lease(slot, &mut view, Some(&holder), floor, bug, (None, keep, c))
            }
            Decision::SetNext => {
                // Only the hint, by compare-and-swap on the Lease version the step saw.
                match (view.leases[slot].clone(), self.api.leases[slot].clone()) {
                    (Some(seen), Some(current))
                        if seen.rv == current.rv || bug == Some(Bug::LeaseWithoutPrecondition) =>
                    {
                        let rv = self.rv();
                        let next = step.next.as_ref().map(|n| (n.identity.clone(), n.uid.clone(), n.token));
                        let released = keep(&Some(seen));
                        let c = ceiling(&view);
                        if c.is_some_and(|c| c > self.ceiling_of(current.owner)) {
                            self.broken.get_or_insert("I2: the Lease's token-ceiling is above the reservation");
                        }
                        let next_duration = next.as_ref().map(|_| view.lock.lease_secs);
                        let lease = LeaseObj { rv, next, released, ceiling: c, next_duration, ..current };
                        self.api.leases[slot] = Some(lease.clone());
                        view.leases[slot] = Some(lease);
                        true
                    }
                    _ => false,
                }
            }
            Decision::PatchHolder(g) => self.patch_holder(&mut view, &g, bug),
            // Multi-lock decisions need a multi-lock candidate: tests/multilock.rs models them.
            Decision::RecordTentative(_) | Decision::Withdraw(_) => unreachable!("no multi-lock candidate here"),
            Decision::DeletePod { name, uid } => {
                // Graceful deletion with a UID precondition: the object answered (deleting) is
                // folded in; not found / another UID: the candidate is dropped from the view.
                let i = POD_NAMES.iter().position(|n| *n == name).unwrap();
                let rv = self.rv();
                match self.api.pods[i].as_mut().filter(|p| p.uid == uid) {
                    Some(p) => {
                        if !p.deleting {
                            (p.deleting, p.rv) = (true, rv);
                            self.events |= RECLAIMED;
                        }
                        view.pods[i] = Some(p.clone());
                    }
                    None => view.pods[i] = view.pods[i].take().filter(|p| p.uid != uid),
                }
                true
            }
            // One write per action: the first rejection; the session decides again. A rejection
            // that changes nothing ends the session (the real reconcile stops after MAX_STEPS).
            Decision::RejectWaiters(rejects) => self.reject(&mut view, &rejects[0], bug),
            Decision::Idle { .. } => {
                if view.leases[0].is_none() {
                    self.events |= IDLE_WITHOUT_LEASE;
                }
                // The status view: server-side apply, no precondition (a stale writer wins).
                let lease_token = view.leases.iter().flatten().map(|l| l.token).max().unwrap_or(0);
                let highest = view.lock.highest.max(lease_token);
                if highest != view.lock.highest {
                    self.api.lock.highest = highest;
                    self.api.lock.rv = self.rv();
                }
                false
            }
        };
        self.ops[n].session = ok.then_some(Session { view, fresh_reservation: fresh });
    }

    /// The status patch that marks a waiter given up (`reject_waiter`): a pod's phase Failed, a
    /// claim's phase Rejected; UID and resourceVersion preconditions. Not found / conflict: the
    /// candidate is dropped from the view. False when it changed nothing (rejected already).
    fn reject(&mut self, view: &mut View, r: &Reject, bug: Option<Bug>) -> bool {
        let rv_ok = |rv: u16| bug == Some(Bug::RejectWithoutPrecondition) || rv.to_string() == r.resource_version;
        let rv = self.rv();
        let bit = if r.reason == RejectReason::LockBusy { REJECTED_BUSY } else { REJECTED_TIMEOUT };
        let granted_already = "I3: a waiter was rejected after its grant (a stale rejection landed on the holder)";
        if let Some(i) = POD_NAMES.iter().position(|n| *n == r.name) {
            match self.api.pods[i].as_mut().filter(|p| p.uid == r.uid && rv_ok(p.rv)) {
                Some(p) if matches!(p.phase, PodPhase::Failed | PodPhase::FailedStopping) => return false,
                Some(p) => {
                    if p.token.is_some() {
                        self.broken.get_or_insert(granted_already);
                    }
                    p.phase = match p.phase {
                        PodPhase::Running => PodPhase::FailedStopping,
                        PodPhase::Pending => PodPhase::Failed,
                        other => other,
                    };
                    p.rv = rv;
                    view.pods[i] = Some(p.clone());
                    self.events |= bit;
                }
                None => view.pods[i] = view.pods[i].take().filter(|p| p.uid != r.uid),
            }
        } else {
            let i = CLAIM_NAMES.iter().position(|n| *n == r.name).unwrap();
            let (object, request) = grant::split_request_uid(&r.uid);
            let request = request.map_or(1, |r| r as u8);
            match self.api.claims[i].as_mut().filter(|c| c.uid == object && rv_ok(c.rv)) {
                Some(c) if c.rejected && c.status_request == request => return false,
                Some(c) => {
                    if c.status_request != request {
                        (c.token, c.status_request) = (None, request);
                    }
                    if c.token.is_some() {
                        self.broken.get_or_insert(granted_already);
                    }
                    (c.rejected, c.rv) = (true, rv);
                    view.claims[i] = Some(c.clone());
                    self.events |= bit;
                }
                None => view.claims[i] = view.claims[i].take().filter(|c| c.uid != object),
            }
        }
        true
    }

    fn cas_lease(
        &mut self,
        slot: usize,
        view: &mut View,
        holder: Option<&Grant>,
        floor: Option<i64>,
        bug: Option<Bug>,
        annotations: Annotations,
    ) -> bool {
        let (Some(seen), Some(current)) = (view.leases[slot].clone(), self.api.leases[slot].clone()) else {
            return false;
        };
        if seen.rv != current.rv && bug != Some(Bug::LeaseWithoutPrecondition) {
            return false;
        }
        let secs = view.lock.lease_secs;
        view.leases[slot] = Some(self.write_lease(slot, Some(&seen), holder, floor, current.owner, secs, annotations));
        true
    }

    /// The pod patch (annotations + gate removal) or claim status patch, with UID and
    /// resourceVersion preconditions.
    fn patch_holder(&mut self, view: &mut View, g: &Grant, bug: Option<Bug>) -> bool {
        let rv_ok = |rv: u16| bug == Some(Bug::HolderPatchWithoutPrecondition) || rv.to_string() == g.resource_version;
        match g.kind {
            HolderKind::Pod => {
                let i = POD_NAMES.iter().position(|n| *n == g.name).unwrap();
                let rv = self.rv();
                let Some(p) = self.api.pods[i].as_mut().filter(|p| p.uid == g.uid && rv_ok(p.rv)) else { return false };
                let rejected = matches!(p.phase, PodPhase::Failed | PodPhase::FailedStopping);
                let new_grant = p.gated || p.token != Some(g.token);
                (p.gated, p.token, p.rv, p.slot) = (false, Some(g.token), rv, g.slot as u8);
                if new_grant {
                    p.granted_by = Some(view.lock.uid);
                }
                view.pods[i] = Some(p.clone());
                if new_grant {
                    if rejected {
                        self.broken.get_or_insert(REJECTED_THEN_GRANTED);
                    }
                    self.hand(view.lock.uid, g.slot as u8, g.token);
                    if view.lock.uid > 0 {
                        self.events |= GRANTED_AFTER_RECREATE;
                    }
                }
                true
            }
            HolderKind::Claim => {
                let i = CLAIM_NAMES.iter().position(|n| *n == g.name).unwrap();
                let rv = self.rv();
                let (object, request) = grant::split_request_uid(&g.uid);
                let request = request.map_or(1, |r| r as u8);
                let Some(c) = self.api.claims[i].as_mut().filter(|c| c.uid == object && rv_ok(c.rv)) else {
                    return false;
                };
                if c.status_request != request {
                    (c.token, c.rejected, c.status_request) = (None, false, request);
                }
                let new_grant = c.token != Some(g.token);
                (c.token, c.rv, c.slot) = (Some(g.token), rv, g.slot as u8);
                view.claims[i] = Some(c.clone());
                if new_grant && c.rejected {
                    self.broken.get_or_insert(REJECTED_THEN_GRANTED);
                }
                // Handed to the holder only when its process learns it, from the Lease
                // ([`Action::ClaimLearns`]): the status is a record, which a stale operator's
                // patch can make disagree with the Lease.
                if new_grant && view.lock.uid > 0 {
                    self.events |= GRANTED_AFTER_RECREATE;
                }
                true
            }
        }
    }

    fn kind_differs(&self, n: usize, k: &Kind) -> bool {
        let (c, a) = (&self.ops[n].cache, &self.api);
        match k {
            Kind::Lease => c.leases != a.leases,
            Kind::Lock => c.lock != a.lock,
            Kind::Pods => c.pods != a.pods,
            Kind::Claims => c.claims != a.claims,
        }
    }

    /// Slot `k`'s Lease names claim `i` (holderIdentity and holder-uid) as its holder.
    fn lease_names_claim(&self, k: usize, i: usize) -> bool {
        let uid = self.proc_uid(i);
        self.api.leases[k]
            .as_ref()
            .and_then(|l| l.holder.as_ref())
            .is_some_and(|(n, u, _)| n == CLAIM_NAMES[i] && *u == uid)
    }

    /// Renewal by claim `i`'s process: succeeds while the Lease names it.
    fn renew(&mut self, i: usize) -> bool {
        let uid = self.proc_uid(i);
        let slot = usize::from(self.procs[i].slot);
        let names_it = self.api.leases[slot]
            .as_ref()
            .and_then(|l| l.holder.as_ref())
            .is_some_and(|(n, u, _)| n == CLAIM_NAMES[i] && *u == uid);
        if !names_it {
            return false;
        }
        let rv = self.rv();
        let lease = self.api.leases[slot].as_mut().unwrap();
        (lease.rv, lease.renew) = (rv, Some(rv));
        self.procs[i].last_renew = self.now;
        true
    }

    /// Holders whose work runs now: (token, excused, name, slot) where excused means a lost
    /// node or a process paused past its renew deadline. An ungated pod counts from the moment
    /// it is ungated (it may start at any time), unless it was deleted before it started:
    /// kube-scheduler never binds a terminating pod.
    fn running(&self) -> Vec<(i64, bool, String, u8)> {
        let mut out = vec![];
        for (i, p) in self.api.pods.iter().enumerate() {
            if let Some(p) = p
                && !p.gated
                && (matches!(p.phase, PodPhase::Running | PodPhase::FailedStopping)
                    || (p.phase == PodPhase::Pending && !p.deleting))
            {
                out.push((p.token.unwrap_or(0), p.node_lost, POD_NAMES[i].to_string(), p.slot));
            }
        }
        for (i, c) in self.procs.iter().enumerate() {
            if let Some(t) = c.holding {
                out.push((t, self.now >= c.last_renew + c.deadline, CLAIM_NAMES[i].to_string(), c.slot));
            }
        }
        out
    }
}

impl World {
    /// I4: the waiters nothing will ever answer. Empty unless the state is *settled*: the
    /// environment has met its obligations (no deleted pod still terminating, no rejected pod
    /// still stopping, no claim process paused or yet to learn its grant), every operator's
    /// caches equal the API server, no operator is in the middle of a reconcile, and each one's
    /// next step (the real step function, on those caches, its clocks, now) is `Idle` with no
    /// requeue: it writes nothing and waits for a watch event that nothing owes it. In such a
    /// state a waiter still waiting (not granted, not rejected) is stuck, unless it legitimately
    /// queues (policy wait without max-wait) behind a holder whose work runs (a started pod,
    /// which may run for ever; a claim process that holds). A pod ungated but never started is no
    /// such holder: the start timeout must reclaim it.
    fn stuck_waiters(&self, cfg: &Config) -> Vec<&'static str> {
        // A waiter legitimately queues while the lock is full: as many holders' work runs as
        // the lock may have (`maxHolders` as it is now; 1 for a single-holder lock).
        let ran = self
            .api
            .pods
            .iter()
            .flatten()
            .filter(|p| !p.gated && matches!(p.phase, PodPhase::Running | PodPhase::FailedStopping))
            .count()
            + self.procs.iter().filter(|p| p.holding.is_some()).count();
        let runs = ran >= usize::from(self.api.lock.max_holders.unwrap_or(1).max(1));
        let queues = |p: Policy| runs && !p.skip && p.max_wait.is_none();
        let mut stuck = vec![];
        for (i, p) in self.api.pods.iter().enumerate() {
            if let Some(p) = p
                && p.gated
                && !p.deleting
                && p.phase == PodPhase::Pending
                && !queues(cfg.pod_policy[i])
            {
                stuck.push(POD_NAMES[i]);
            }
        }
        let released = |uid: &String| self.api.leases.iter().flatten().any(|l| l.released.contains(uid));
        let lease0 = snapshot(&self.api, None, cfg).lease.filter(|_| self.standing);
        for (i, c) in self.api.claims.iter().enumerate() {
            let Some(c) = c else { continue };
            // The request the operator reads (`grant::current_request`), and a process waiting
            // with a later one that nothing names: only its own re-arrival could tell anyone.
            let request = effective_request(c, lease0.as_ref(), CLAIM_NAMES[i]);
            let p = &self.procs[i];
            let unseen = !p.done && request < p.req();
            if (unseen
                || ((c.status_request != request || (c.token.is_none() && !c.rejected))
                    && !released(&claim_uid(&c.uid, request, self.standing))))
                && !queues(cfg.claim_policy[i])
            {
                stuck.push(CLAIM_NAMES[i]);
            }
        }
        if stuck.is_empty() {
            return stuck;
        }
        let env_owes = self.api.leases.iter().flatten().any(|l| l.owner != self.api.lock.uid)
            || self
                .api
                .pods
                .iter()
                .flatten()
                .any(|p| !p.node_lost && (p.deleting || p.phase == PodPhase::FailedStopping))
            || self.procs.iter().enumerate().any(|(i, p)| {
                p.paused
                    || (!p.done
                        && (self.api.claims[i].as_ref().is_none_or(|c| c.rejected && c.status_request == p.req())
                            || (0..self.api.leases.len()).any(|k| self.lease_names_claim(k, i))))
                    || self.re_arrival_due(i, cfg)
            });
        let settled = !env_owes
            && self.ops.iter().all(|o| o.session.is_none() && o.cache == self.api)
            && (0..self.ops.len()).all(|n| {
                self.decide(n, cfg)
                    .is_some_and(|(_, s)| matches!(s.plan.decision, Decision::Idle { requeue_after: None }))
            });
        if !settled {
            stuck.clear();
        }
        stuck
    }
}

/// I1: per slot, at most one holder whose work runs, except an excused one (lost node, paused
/// past its deadline) with a token below the other's; and no more non-excused holders than the
/// lock ever allowed (a lowered `maxHolders` revokes nobody). A single-holder lock has slot 0
/// only.
fn mutual_exclusion(w: &World, cfg: &Config) -> bool {
    let running = w.running();
    let per_slot = running
        .iter()
        .enumerate()
        .all(|(i, a)| running[i + 1..].iter().filter(|b| b.3 == a.3).all(|b| (a.1 && a.0 < b.0) || (b.1 && b.0 < a.0)));
    per_slot && running.iter().filter(|r| !r.1).count() <= cfg.slots()
}

impl Model for LockModel {
    type State = World;
    type Action = Action;

    fn init_states(&self) -> Vec<World> {
        vec![self.initial()]
    }

    fn actions(&self, w: &World, out: &mut Vec<Action>) {
        if w.broken.is_some() {
            return;
        }
        for n in 0..w.ops.len() {
            out.push(Action::Step(n));
            for k in [Kind::Lease, Kind::Lock, Kind::Pods, Kind::Claims] {
                if w.kind_differs(n, &k) {
                    out.push(Action::Sync(n, k));
                }
            }
            if w.restarts < self.cfg.restarts {
                out.push(Action::Restart(n));
            }
        }
        if w.now < self.cfg.max_time {
            out.push(Action::Tick);
        }
        let fault = w.faults < self.cfg.faults;
        let lives = !self.cfg.pods_idle;
        for (i, p) in w.api.pods.iter().enumerate() {
            match p {
                Some(p) => {
                    if lives && !p.gated && !p.deleting && p.phase == PodPhase::Pending {
                        out.push(Action::PodStarts(i));
                    }
                    if lives && p.phase == PodPhase::Running && !p.node_lost {
                        out.push(Action::PodSucceeds(i));
                    }
                    if lives && !p.deleting && p.phase != PodPhase::Succeeded {
                        out.push(Action::PodDeleted(i));
                    }
                    if lives && p.deleting && !p.node_lost {
                        out.push(Action::PodGone(i));
                    }
                    if p.phase == PodPhase::FailedStopping && !p.node_lost {
                        out.push(Action::PodStopped(i));
                    }
                    if fault && p.phase == PodPhase::Running && !p.node_lost {
                        out.push(Action::NodeLost(i));
                    }
                    if fault && self.cfg.forge && p.gated && !p.deleting {
                        out.push(Action::LeaseForged(i));
                    }
                }
                None if lives && w.recreated & (1 << i) == 0 => out.push(Action::PodRecreated(i)),
                None => {}
            }
        }
        for (i, proc_) in w.procs.iter().enumerate() {
            let claim = w.api.claims[i].as_ref();
            // The status of the request the process works on (an older request's is ignored).
            let current = claim.filter(|c| c.status_request == proc_.req());
            if !proc_.done && !proc_.paused {
                if current.is_some_and(|c| c.token.is_some() && w.lease_names_claim(usize::from(c.slot), i)) {
                    out.push(Action::ClaimLearns(i, None));
                }
                for k in (0..w.api.leases.len()).filter(|k| w.lease_names_claim(*k, i)) {
                    out.push(Action::ClaimLearns(i, Some(k)));
                }
                if claim.is_none() || current.is_some_and(|c| c.rejected && c.token.is_none()) {
                    out.push(Action::ClaimGivesUp(i));
                }
            }
            if proc_.done
                && proc_.holding.is_none()
                && !proc_.paused
                && proc_.req() < self.cfg.requests
                && claim.is_some()
            {
                out.push(Action::ClaimRequestsAgain(i));
                if self.cfg.lease_arrivals && w.lease_arrival(i, &self.cfg).is_some() {
                    out.push(Action::ClaimArrivesByLease(i));
                }
            }
            if w.re_arrival_due(i, &self.cfg) {
                out.push(Action::ClaimReArrives(i));
            }
            if self.cfg.waiter_hints
                && let Some(arrival) = w.waiter_arrival(i, &self.cfg)
            {
                out.push(Action::ClaimWaiterArrives(i));
                if self.cfg.waiter_take_unanswered && matches!(arrival, grant::LeaseArrival::Take(_)) {
                    out.push(Action::ClaimWaiterTakeUnanswered(i, true));
                    out.push(Action::ClaimWaiterTakeUnanswered(i, false));
                }
            }
            if proc_.holding.is_some() && !proc_.paused {
                out.push(Action::ClaimRenews(i));
                out.push(Action::ClaimReleases(i));
                if fault {
                    out.push(Action::ClaimPaused(i));
                }
            }
            if proc_.paused {
                out.push(Action::ClaimResumed(i));
            }
            if fault && claim.is_some() {
                out.push(Action::ClaimDeleted(i));
            }
        }
        for (k, lease) in w.api.leases.iter().enumerate() {
            if fault && lease.is_some() {
                out.push(Action::LeaseDeleted(k));
            }
            if lease.as_ref().is_some_and(|l| l.owner != w.api.lock.uid) {
                out.push(Action::LeaseCollected(k));
            }
        }
        if fault && self.cfg.recreate && w.api.lock.uid == 0 {
            out.push(Action::LockRecreated);
        }
        if self.cfg.change_max_holders.is_some() && !w.max_changed {
            out.push(Action::MaxHoldersChanged);
        }
        if self.cfg.lower_lease && w.api.lock.lease_secs != LOWERED_LEASE_SECS {
            out.push(Action::LeaseDurationLowered);
        }
    }

    fn next_state(&self, w: &World, action: Action) -> Option<World> {
        let mut w = w.clone();
        match action {
            Action::Step(n) => w.step(n, &self.cfg),
            Action::Sync(n, o) => {
                let (api, cache) = (&w.api, &mut w.ops[n].cache);
                match o {
                    Kind::Lease => cache.leases = api.leases.clone(),
                    Kind::Lock => cache.lock = api.lock.clone(),
                    Kind::Pods => cache.pods = api.pods.clone(),
                    Kind::Claims => cache.claims = api.claims.clone(),
                }
            }
            Action::Restart(n) => {
                w.ops[n] = Operator { cache: w.api.clone(), session: None, clocks: Clocks::default() };
                w.restarts += 1;
            }
            Action::Tick => {
                w.now += 1;
                let now = w.now;
                for p in &mut w.procs {
                    // The holder's renew loop: no successful renewal for the deadline -> lost,
                    // its work stopped (a paused process notices only when it runs again).
                    if p.holding.is_some() && !p.paused && now >= p.last_renew + p.deadline {
                        p.holding = None;
                    }
                }
            }
            Action::PodStarts(i) => w.api.pods[i].as_mut()?.phase = PodPhase::Running,
            Action::PodSucceeds(i) => {
                let rv = w.rv();
                let p = w.api.pods[i].as_mut()?;
                (p.phase, p.rv) = (PodPhase::Succeeded, rv);
            }
            Action::PodDeleted(i) => {
                let rv = w.rv();
                let p = w.api.pods[i].as_mut()?;
                (p.deleting, p.rv) = (true, rv);
            }
            Action::PodGone(i) => w.api.pods[i] = None,
            Action::PodStopped(i) => {
                let rv = w.rv();
                let p = w.api.pods[i].as_mut()?;
                (p.phase, p.rv) = (PodPhase::Failed, rv);
            }
            Action::PodRecreated(i) => {
                w.recreated |= 1 << i;
                let rv = w.rv();
                w.api.pods[i] = Some(PodObj {
                    rv,
                    uid: format!("{}-1", POD_NAMES[i]),
                    created: created(i, 1),
                    gated: true,
                    phase: PodPhase::Pending,
                    deleting: false,
                    token: None,
                    node_lost: false,
                    granted_by: None,
                    slot: 0,
                });
            }
            Action::NodeLost(i) => {
                w.faults += 1;
                let rv = w.rv();
                let p = w.api.pods[i].as_mut()?;
                (p.node_lost, p.rv) = (true, rv);
            }
            Action::ClaimGivesUp(i) => w.procs[i].done = true,
            Action::ClaimRequestsAgain(i) => {
                let (rv, now, next) = (w.rv(), w.now, w.procs[i].req() + 1);
                w.procs[i].read_secs = w.api.lock.lease_secs;
                let c = w.api.claims[i].as_mut()?;
                (c.request, c.requested_at, c.rv) = (next, i64::from(now), rv);
                let p = &mut w.procs[i];
                (p.request, p.done, p.handed, p.slot, p.queued_at) = (next, false, None, 0, now);
                p.arrived = Arrived::ByClaim;
            }
            Action::ClaimArrivesByLease(i) => {
                let arrival = w.lease_arrival(i, &self.cfg)?;
                w.procs[i].read_secs = w.api.lock.lease_secs;
                let (now, next) = (w.now, w.procs[i].req() + 1);
                let p = &mut w.procs[i];
                (p.request, p.done, p.handed, p.slot, p.queued_at) = (next, false, None, 0, now);
                p.arrived = Arrived::ByLease;
                if w.write_arrival(i, arrival, true, self.cfg.bug)? {
                    w.events |= GRANTED_BY_LEASE_ARRIVAL;
                }
            }
            Action::ClaimReArrives(i) => {
                let (rv, p) = (w.rv(), &w.procs[i]);
                let (request, at) = (p.req(), p.queued_at);
                let c = w.api.claims[i].as_mut()?;
                (c.request, c.requested_at, c.rv) = (request, i64::from(at), rv);
                w.procs[i].arrived = Arrived::ByClaim;
                w.events |= ARRIVED_AGAIN;
            }
            Action::ClaimWaiterArrives(i) => {
                let arrival = w.waiter_arrival(i, &self.cfg)?;
                w.procs[i].arrived = Arrived::HintedItself;
                if w.write_arrival(i, arrival, true, self.cfg.bug)? {
                    w.events |= WAITER_TOOK;
                }
            }
            Action::ClaimWaiterTakeUnanswered(i, landed) => {
                let arrival = w.waiter_arrival(i, &self.cfg)?;
                let grant::LeaseArrival::Take(token) = arrival.clone() else { return None };
                w.procs[i].arrived = Arrived::TookUnanswered;
                if landed {
                    // The Lease names the request; the process does not know it yet.
                    w.write_arrival(i, arrival, false, self.cfg.bug)?;
                }
                if self.cfg.bug == Some(Bug::LostTakeAssumedLanded) {
                    w.hold_take(i, token, self.cfg.bug)?;
                }
            }
            Action::ClaimLearns(i, from) => {
                // `holder::Holder::wait_for_grant`: a Lease of the lock whose holderIdentity and
                // holder-uid name the claim, seen on the Lease watch (`Some(k)`), or read once the
                // claim's status shows a token (`None`: the Lease of the status's slot); the token
                // and the slot are the Lease's, never the status's.
                let req = w.procs[i].req();
                let k = match from {
                    None => usize::from(w.api.claims[i].as_ref().filter(|c| c.status_request == req)?.slot),
                    Some(k) => k,
                };
                if !w.lease_names_claim(k, i) {
                    return None;
                }
                let (token, owner, granted) = w.api.leases[k].as_ref().map(|l| (l.token, l.owner, l.duration))?;
                // Handed now (I2 checks it here).
                if w.procs[i].handed != Some(token) {
                    w.procs[i].handed = Some(token);
                    w.hand(owner, k as u8, token);
                }
                let (token, slot) = (token, k as u8);
                w.procs[i].slot = slot;
                w.procs[i].done = true;
                if w.procs[i].arrived == Arrived::HintedItself {
                    w.events |= WAITER_HINT_GRANTED;
                }
                if w.procs[i].arrived == Arrived::TookUnanswered {
                    w.events |= UNANSWERED_TAKE_LEARNED;
                }
                let start = w.now;
                // `holder::granted_timings`: the shorter of the read and the granted duration.
                let deadline = w.procs[i].grant_deadline(granted, self.cfg.bug);
                if granted == LOWERED_LEASE_SECS && w.procs[i].read_secs == LEASE_SECS {
                    w.events |= LOWERED_GRANT_LEARNED;
                }
                // `LockGuard::start`: the claim's create (time 0: every modelled claim exists from
                // the start) was sent before any operator could see a grant to it, so it bounds
                // the start of the operator's expiry clock from below. The planted bug counts
                // from when the grant was learned instead, which a late watch event makes too late.
                // A standing claim's later request: from when its patch was sent.
                let queued = if w.procs[i].req() == 1 { CLAIM_QUEUED_AT } else { w.procs[i].queued_at };
                let (from, learned_late) = match self.cfg.bug {
                    Some(Bug::HolderClockFromLearning) => (start, false),
                    _ => (queued, start >= queued + deadline),
                };
                if w.procs[i].req() >= 2 {
                    w.events |= REQUESTED_AGAIN;
                }
                if w.api.claims[i].as_ref().is_some_and(|c| c.request < w.procs[i].req()) {
                    w.events |= GRANTED_BY_LEASE_ARRIVAL;
                }
                if !learned_late {
                    w.procs[i].holding = Some(token);
                    w.procs[i].last_renew = from;
                } else if w.renew(i) {
                    w.procs[i].holding = Some(token);
                    w.procs[i].last_renew = start;
                }
            }
            Action::ClaimRenews(i) => {
                if !w.renew(i) {
                    w.procs[i].holding = None;
                }
            }
            Action::ClaimPaused(i) => {
                w.faults += 1;
                w.procs[i].paused = true;
            }
            Action::ClaimResumed(i) => {
                w.procs[i].paused = false;
                if w.now >= w.procs[i].last_renew + w.procs[i].deadline {
                    w.procs[i].holding = None;
                }
            }
            Action::ClaimReleases(i) => {
                // `LockGuard::release` (`holder::clear_holder`): owner-verified (a compare-and-swap
                // on the version it read), it hands the lock to the Lease's next-holder hint, with
                // the hinted token, or frees it when there is none (issue 12).
                w.procs[i].holding = None;
                if w.api.claims[i].as_ref().is_some_and(|c| c.token.is_none() || c.status_request != c.request) {
                    w.events |= RELEASED_UNRECORDED;
                }
                let slot = usize::from(w.procs[i].slot);
                let me = w.proc_uid(i);
                let standing = w.standing;
                let spec_request = w.api.claims[i].as_ref().map(|c| c.request);
                let names_it = w.api.leases[slot]
                    .as_ref()
                    .and_then(|l| l.holder.as_ref())
                    .is_some_and(|(n, u, _)| n == CLAIM_NAMES[i] && (!standing || *u == me));
                if names_it {
                    let rv = w.rv();
                    w.procs[i].finished = w.procs[i].req();
                    if let Some((_, uid, _)) = w.api.leases[slot].as_ref().and_then(|l| l.next.clone()) {
                        w.check_unfinished(&uid);
                    }
                    let lease = w.api.leases[slot].as_mut().unwrap();
                    // A standing claim's release lists its request as released, in the same
                    // write (its older entries dropped).
                    // The entry of the request its claim's `spec.request` still shows stays
                    // (`holder::released_after`: requests after it arrived by the Lease).
                    if standing && self.cfg.bug != Some(Bug::ReleaseWithoutRecord) {
                        let object = format!("{}-0", CLAIM_NAMES[i]);
                        let spec = spec_request.map(|r| grant::request_uid(&object, r.into()));
                        lease.released.retain(|e| {
                            grant::split_request_uid(e).0 != object || (Some(e) == spec.as_ref() && *e != me)
                        });
                        lease.released.push(me);
                        lease.released.sort();
                    }
                    let next_duration = lease.next_duration.take();
                    match lease.next.take() {
                        Some((identity, uid, token)) => {
                            (lease.holder, lease.token, lease.renew, lease.rv) =
                                (Some((identity, uid, HolderKind::Claim)), token, Some(rv), rv);
                            // `holder::hand_over`: the operator's hint carries the lock's value.
                            if next_duration.is_some_and(|d| d != lease.duration) {
                                w.events |= HANDED_OVER_NEW_DURATION;
                            }
                            lease.duration = next_duration.unwrap_or(lease.duration);
                            let owner = lease.owner;
                            w.events |= HANDED_OVER;
                            if token > w.ceiling_of(owner) {
                                w.broken.get_or_insert("I2: a holder handed the lock over above the reservation");
                            }
                        }
                        None => (lease.holder, lease.renew, lease.rv) = (None, None, rv),
                    }
                }
            }
            Action::ClaimDeleted(i) => {
                w.faults += 1;
                w.api.claims[i] = None;
            }
            Action::LeaseDeleted(k) => {
                w.faults += 1;
                w.api.leases[k] = None;
                w.forget_releases();
            }
            Action::LeaseForged(i) => {
                w.faults += 1;
                let rv = w.rv();
                let p = w.api.pods[i].as_ref()?;
                let token = w.api.lock.highest + 1;
                let holder = Some((POD_NAMES[i].to_string(), p.uid.clone(), HolderKind::Pod));
                let floor = w.api.leases[0].as_ref().and_then(|l| l.floor).or(Some(0));
                let owner = w.api.leases[0].as_ref().map_or(w.api.lock.uid, |l| l.owner);
                let released = w.api.leases[0].as_ref().map_or(vec![], |l| l.released.clone());
                let ceiling = w.api.leases[0].as_ref().and_then(|l| l.ceiling);
                let duration = w.api.leases[0].as_ref().map_or(w.api.lock.lease_secs, |l| l.duration);
                w.api.leases[0] = Some(LeaseObj {
                    rv,
                    holder,
                    token,
                    floor,
                    renew: Some(rv),
                    owner,
                    next: None,
                    released,
                    ceiling,
                    duration,
                    next_duration: None,
                });
            }
            Action::LockRecreated => {
                w.faults += 1;
                w.old_ceiling = w.api.lock.ceiling;
                let rv = w.rv();
                w.api.lock = LockObj {
                    rv,
                    uid: 1,
                    ceiling: 0,
                    highest: 0,
                    max_holders: w.api.lock.max_holders,
                    slot_tokens: vec![],
                    lease_secs: w.api.lock.lease_secs,
                };
            }
            Action::LeaseCollected(k) => {
                w.api.leases[k] = None;
                w.forget_releases();
            }
            Action::LeaseDurationLowered => {
                let rv = w.rv();
                (w.api.lock.lease_secs, w.api.lock.rv) = (LOWERED_LEASE_SECS, rv);
                if w.procs.iter().any(|p| p.holding.is_some()) {
                    w.events |= LOWERED_UNDER_HOLDER;
                }
            }
            Action::MaxHoldersChanged => {
                w.max_changed = true;
                let rv = w.rv();
                (w.api.lock.max_holders, w.api.lock.rv) =
                    (if self.cfg.remove_max_holders { None } else { self.cfg.change_max_holders }, rv);
            }
        }
        Some(w)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(I1, |m: &LockModel, w: &World| {
                mutual_exclusion(w, &m.cfg) && !w.broken.is_some_and(|b| b.starts_with("I1"))
            }),
            Property::always(I2, |_, w: &World| !w.broken.is_some_and(|b| b.starts_with("I2"))),
            Property::always(I3, |_, w: &World| !w.broken.is_some_and(|b| b.starts_with("I3"))),
            Property::always(I4, |m: &LockModel, w: &World| w.stuck_waiters(&m.cfg).is_empty()),
            Property::sometimes(HANDOVER, |_, w: &World| w.handed.len() >= 2),
            Property::sometimes(RECLAIM, |_, w: &World| w.events & RECLAIMED != 0),
            Property::sometimes(REJECT_BUSY, |_, w: &World| w.events & REJECTED_BUSY != 0),
            Property::sometimes(REJECT_TIMEOUT, |_, w: &World| w.events & REJECTED_TIMEOUT != 0),
            Property::sometimes(RECREATE_GRANT, |_, w: &World| w.events & GRANTED_AFTER_RECREATE != 0),
            Property::sometimes(IDLE_NO_LEASE, |_, w: &World| w.events & IDLE_WITHOUT_LEASE != 0),
            Property::sometimes(CHANGED_GRANT, |_, w: &World| w.events & GRANTED_AFTER_CHANGE != 0),
            Property::sometimes(HINT_HANDOVER, |_, w: &World| w.events & HANDED_OVER != 0),
            Property::sometimes(RECORD_LATER, |_, w: &World| w.events & RECORD_WAITED != 0),
            Property::sometimes(RELEASE_UNRECORDED, |_, w: &World| w.events & RELEASED_UNRECORDED != 0),
            Property::sometimes(SECOND_REQUEST, |_, w: &World| w.events & REQUESTED_AGAIN != 0),
            Property::sometimes(LEASE_ARRIVAL, |_, w: &World| w.events & GRANTED_BY_LEASE_ARRIVAL != 0),
            Property::sometimes(REARRIVAL, |_, w: &World| w.events & ARRIVED_AGAIN != 0),
            Property::sometimes(WAITER_HINT, |_, w: &World| w.events & WAITER_HINT_GRANTED != 0),
            Property::sometimes(WAITER_TAKE, |_, w: &World| w.events & WAITER_TOOK != 0),
            Property::sometimes(UNANSWERED_TAKE, |_, w: &World| w.events & UNANSWERED_TAKE_LEARNED != 0),
            Property::sometimes(LOWERED_UNDER, |_, w: &World| w.events & LOWERED_UNDER_HOLDER != 0),
            Property::sometimes(LOWERED_GRANT, |_, w: &World| w.events & LOWERED_GRANT_LEARNED != 0),
            Property::sometimes(HANDOVER_NEW_DURATION, |_, w: &World| w.events & HANDED_OVER_NEW_DURATION != 0),
            Property::sometimes(TWO_AT_ONCE, |_, w: &World| w.running().iter().filter(|r| !r.1).count() >= 2),
        ]
    }
}

/// Runs the checker breadth first to `depth` (see [`checking::run`]) and returns it.
fn check(name: &str, cfg: Config, depth: usize) -> impl Checker<LockModel> + use<> {
    checking::run(&format!("model {name}: {cfg:?}"), LockModel { cfg }, depth)
}

fn trace(checker: &impl Checker<LockModel>, property: &'static str) -> Option<String> {
    let path = checker.discovery(property)?;
    let mut out = String::new();
    for (state, action) in path.into_vec() {
        if let Some(a) = action {
            let _ =
                writeln!(out, "  {a:?}   (now={} Leases={:?} handed={:?})", state.now, state.api.leases, state.handed);
        }
    }
    let last = checker.discovery(property)?.last_state().clone();
    let _ = writeln!(
        out,
        "  final: running={:?} handed={:?} broken={:?} stuck={:?} pods={:?} claims={:?}",
        last.running(),
        last.handed,
        last.broken,
        last.stuck_waiters(&checker.model().cfg),
        last.api.pods,
        last.api.claims
    );
    Some(out)
}

/// Checks I1-I4 and that the bound reaches a handover and every goal in `reaches`.
fn assert_safe(name: &str, cfg: Config, depth: usize, reaches: &[&'static str]) {
    let checker = check(name, cfg, depth);
    for property in [I1, I2, I3, I4] {
        if let Some(t) = trace(&checker, property) {
            panic!("model {name}: {property} violated:\n{t}");
        }
    }
    for goal in [HANDOVER].iter().chain(reaches) {
        assert!(
            checker.discovery(goal).is_some(),
            "model {name}: the bound never reaches \"{goal}\": it explores too little"
        );
    }
}

#[test]
fn pods_two_operators_lagging_caches_restarts_and_third_party_lease_edits() {
    let cfg = Config { pods: 2, operators: 2, max_time: 4, ..Config::BASE };
    assert_safe("pods", cfg, 9, &[]);
}

#[test]
fn claims_renewal_expiry_pause_and_claim_deletion() {
    let cfg = Config { pods: 1, claims: 1, max_time: 6, ..Config::BASE };
    assert_safe("claims", cfg, 11, &[]);
}

/// Issue 12: a claim holder's release hands the lock to the operator's next-holder hint (one
/// compare-and-swap of the Lease instead of a release and a grant). Two claims, two operators
/// whose caches lag, a restart, time for expiry and pauses, and one fault (a claim deleted, a
/// Lease deleted, a holder paused): the hint may be stale in every way the caches allow.
#[test]
fn claims_hand_over_to_the_next_holder_hint() {
    let cfg = Config { claims: 2, operators: 2, max_time: 3, ..Config::BASE };
    assert_safe("handover", cfg, 9, &[HINT_HANDOVER]);
}

/// Issue 12: with the operator's `claim_record_delay` (1 s), a claim holds by its Lease alone
/// until its status is recorded; it may release (and hand over to the hint) before that, costing
/// no status write, and the operator's other writes (the hint, rejections) come first. The
/// handover run's world (two claims, two lagging operators, a restart, one fault).
#[test]
fn claims_hold_by_the_lease_while_their_status_record_waits() {
    let cfg = Config { claims: 2, operators: 2, max_time: 3, record_delay_secs: 1, ..Config::BASE };
    assert_safe("record-delay", cfg, 9, &[HINT_HANDOVER, RECORD_LATER, RELEASE_UNRECORDED]);
}

/// The same delay beside a pod (one operator), with time for expiry, pauses and claim deletion:
/// the "claims" run's world.
#[test]
fn a_claim_and_a_pod_with_the_status_record_delay() {
    let cfg = Config { pods: 1, claims: 1, max_time: 6, record_delay_secs: 1, ..Config::BASE };
    assert_safe("record-delay-pod", cfg, 11, &[RECORD_LATER]);
}

/// A claim granted while an older pod waiter was not in the operator's cache yet, its Lease
/// then deleted before the claim's status recorded the grant (it waits `claim_record_delay`, and
/// no time passes here): the recreated Lease is held by `grant::RECOVERY_HOLDER` for a lease
/// duration, so the older pod is not granted beside the claim's process.
#[test]
fn a_recreated_lease_waits_out_an_unrecorded_claim_grant() {
    assert_safe("unseen-old-pod", unseen_old_pod(), 13, &[]);
}

/// The checker fails I1 there without the recovery holder: the recreated Lease grants the
/// older pod at once, beside the claim's process (the hole it found, 2026-12-05).
#[test]
fn a_planted_bug_no_recovery_holder_is_caught() {
    planted_violates(Bug::NoRecoveryHolder, unseen_old_pod(), 13, I1);
}

fn unseen_old_pod() -> Config {
    Config { pods: 1, claims: 1, restarts: 0, unseen_old_pod: true, record_delay_secs: 1, ..Config::BASE }
}

/// RECORD_LATER can fail: with no delay the record is never put off.
#[test]
fn without_the_record_delay_no_record_waits() {
    let cfg = Config { claims: 2, operators: 2, max_time: 3, ..Config::BASE };
    let checker = check("no-record-delay", cfg, 8);
    assert!(checker.discovery(RECORD_LATER).is_none(), "a record waited with claim_record_delay 0");
}

/// The checker can fail I2 on the handover: a hint that carries the holder's own token hands
/// the lock over with a token that was handed out already.
/// Issue 12, the standing claim (`docs/two-writes-per-grant.md`): each claim's process asks
/// again after its answer by raising `spec.request`; every request is its own candidate
/// (`grant::request_uid`), and a release lists its request in the Lease's
/// `leasehold.dev/released` in the same write that frees the Lease or hands it over. With the
/// operator's status record delay, so short holds are never recorded in the claim's status.
#[test]
fn standing_claims_ask_again_and_a_released_request_is_never_granted_again() {
    let cfg = Config { claims: 2, requests: 2, max_time: 3, record_delay_secs: 1, ..Config::BASE };
    assert_safe("standing", cfg, STANDING_DEPTH, &[HINT_HANDOVER, SECOND_REQUEST, RELEASE_UNRECORDED]);
}

/// The standing claim beside a pod, with two operators whose caches lag.
#[test]
fn a_standing_claim_beside_a_pod_with_two_operators() {
    let cfg =
        Config { pods: 1, claims: 1, requests: 2, operators: 2, max_time: 3, record_delay_secs: 1, ..Config::BASE };
    assert_safe("standing-pod", cfg, STANDING_POD_DEPTH, &[SECOND_REQUEST]);
}

/// Standing claims with `onBusy: Skip` (`Holder::try_acquire`): a request is rejected
/// (LockBusy) and the claim asks again; the rejection is for that request only.
#[test]
fn a_standing_skip_claim_is_rejected_and_asks_again() {
    let cfg = Config {
        claims: 2,
        requests: 2,
        max_time: 2,
        record_delay_secs: 1,
        claim_policy: [Policy::WAIT, Policy::SKIP],
        ..Config::BASE
    };
    assert_safe("standing-skip", cfg, STANDING_SKIP_DEPTH, &[SECOND_REQUEST, REJECT_BUSY]);
}

const STANDING_SKIP_DEPTH: usize = 12;

/// Standing claims that arrive by the Lease (issue 12, "The arrival writes the hint"): a
/// waiter names itself as the next-holder hint or takes the free Lease, one compare-and-swap,
/// and the operator reads the request from the Lease; with a fault (the Lease deleted and
/// recreated above its floor, a claim deleted, a holder paused) and an operator restart.
#[test]
fn standing_claims_arrive_by_the_lease() {
    let cfg =
        Config { claims: 2, requests: 2, max_time: 3, record_delay_secs: 1, lease_arrivals: true, ..Config::BASE };
    assert_safe("lease-arrival", cfg, LEASE_ARRIVAL_DEPTH, &[HINT_HANDOVER, SECOND_REQUEST, LEASE_ARRIVAL]);
}

/// Arrivals by the Lease with two operators whose caches lag.
#[test]
fn standing_claims_arrive_by_the_lease_with_two_operators() {
    let cfg = Config {
        claims: 2,
        requests: 2,
        operators: 2,
        max_time: 2,
        record_delay_secs: 1,
        lease_arrivals: true,
        restarts: 0,
        ..Config::BASE
    };
    assert_safe("lease-arrival-2ops", cfg, LEASE_ARRIVAL_2OPS_DEPTH, &[SECOND_REQUEST, LEASE_ARRIVAL]);
}

/// A Lease arrival displaced by an older waiter (a pod the operator's cache had not seen): the
/// operator replaces the hint, and the process arrives again by its claim.
fn displaced() -> Config {
    Config {
        pods: 1,
        claims: 2,
        requests: 2,
        unseen_old_pod: true,
        pods_idle: true,
        restarts: 0,
        faults: 0,
        record_delay_secs: 1,
        lease_arrivals: true,
        ..Config::BASE
    }
}

#[test]
fn a_lease_arrival_displaced_by_an_older_waiter_arrives_again_by_its_claim() {
    assert_safe("lease-arrival-displaced", displaced(), DISPLACED_DEPTH, &[LEASE_ARRIVAL, REARRIVAL]);
}

/// [`displaced`] from a handover between the two claims, the older pod a max-wait waiter
/// (rejected one second later), time for it: the displaced process is the only waiter left.
fn displaced_after_handover() -> Config {
    Config {
        start_claim_held: true,
        max_time: 1,
        pod_policy: [Policy::max_wait(1), Policy::WAIT, Policy::WAIT],
        ..displaced()
    }
}

#[test]
fn a_lease_arrival_displaced_after_a_handover_arrives_again_by_its_claim() {
    let cfg = displaced_after_handover();
    assert_safe("lease-arrival-displaced-held", cfg, DISPLACED_HELD_DEPTH, &[REARRIVAL, REJECT_TIMEOUT]);
}

#[test]
fn a_planted_bug_no_re_arrival_is_caught() {
    planted_violates(Bug::NoReArrival, displaced_after_handover(), DISPLACED_HELD_DEPTH, I4);
}

#[test]
fn a_planted_bug_keeping_the_released_list_by_lease_requests_is_caught() {
    planted_violates(Bug::KeepByLeaseRequests, displaced_after_handover(), DISPLACED_HELD_DEPTH, I3);
}

const DISPLACED_HELD_DEPTH: usize = 12;

/// A Lease arrival that takes a token above `leasehold.dev/token-ceiling` (a lock whose first
/// reservation is 1 token).
#[test]
fn a_planted_bug_lease_arrival_above_the_ceiling_is_caught() {
    let cfg = Config {
        claims: 1,
        requests: 2,
        restarts: 0,
        faults: 0,
        lease_arrivals: true,
        initial_ceiling: 1,
        ..Config::BASE
    };
    planted_violates(Bug::ArrivalAboveCeiling, cfg, 8, I2);
}

/// A Lease arrival that ignores the floor of a recreated Lease.
#[test]
fn a_planted_bug_lease_arrival_ignoring_the_floor_is_caught() {
    let cfg = Config {
        claims: 1,
        requests: 2,
        restarts: 0,
        faults: 0,
        lease_arrivals: true,
        recreated_lease: true,
        ..Config::BASE
    };
    planted_violates(Bug::ArrivalIgnoresFloor, cfg, 6, I2);
}

/// Arrivals by the Lease while the lock is deleted and recreated with the same name: a waiter
/// may write the old object's Lease (its ceiling is the old object's reservation) until the
/// garbage collector removes it; the new object must not grant beside a holder of the old one.
#[test]
fn lease_arrivals_across_a_recreated_lock() {
    let cfg = Config {
        claims: 2,
        requests: 2,
        recreate: true,
        restarts: 0,
        max_time: 1,
        lease_arrivals: true,
        ..Config::BASE
    };
    assert_safe("lease-arrival-recreate", cfg, LEASE_ARRIVAL_RECREATE_DEPTH, &[LEASE_ARRIVAL]);
}

/// Arrivals by the Lease while a single-holder lock becomes a semaphore of 2: the slot-0 Lease
/// keeps its `leasehold.dev/token-ceiling` until the operator writes it again.
#[test]
fn lease_arrivals_while_the_lock_becomes_a_semaphore() {
    let cfg = Config {
        claims: 2,
        requests: 2,
        restarts: 0,
        faults: 0,
        change_max_holders: Some(2),
        lease_arrivals: true,
        ..Config::BASE
    };
    assert_safe("lease-arrival-semaphore", cfg, LEASE_ARRIVAL_SEMAPHORE_DEPTH, &[LEASE_ARRIVAL, CHANGED_GRANT]);
}

/// Standing claims whose waiting processes name themselves as the next-holder hint when the
/// operator has not (issue 12, `docs/two-writes-per-grant.md`, "A waiter names itself as the
/// hint"), beside arrivals by the Lease, with a fault and an operator restart.
fn waiter_hints() -> Config {
    Config {
        claims: 2,
        requests: 2,
        max_time: 3,
        record_delay_secs: 1,
        lease_arrivals: true,
        waiter_hints: true,
        ..Config::BASE
    }
}

#[test]
fn standing_claim_waiters_name_themselves_as_the_hint() {
    assert_safe("waiter-hint", waiter_hints(), WAITER_HINT_DEPTH, &[WAITER_HINT, SECOND_REQUEST, LEASE_ARRIVAL]);
}

/// [`waiter_hints`] with two operators whose caches lag and no restart.
#[test]
fn standing_claim_waiters_name_themselves_as_the_hint_with_two_operators() {
    let cfg = Config { operators: 2, max_time: 2, restarts: 0, ..waiter_hints() };
    assert_safe("waiter-hint-2ops", cfg, WAITER_HINT_2OPS_DEPTH, &[WAITER_HINT, SECOND_REQUEST]);
}

/// [`waiter_hints`] where the waiter's own arrival may also take a free Lease (issue 12,
/// `docs/two-writes-per-grant.md`, "A waiter takes a free Lease": what the holder library does).
#[test]
fn standing_claim_waiters_take_a_free_lease_or_name_themselves_as_the_hint() {
    let cfg = Config { waiter_takes: true, ..waiter_hints() };
    assert_safe("waiter-take", cfg, WAITER_TAKE_DEPTH, &[WAITER_TAKE, WAITER_HINT, SECOND_REQUEST, LEASE_ARRIVAL]);
}

/// The same with two operators whose caches lag and no restart.
#[test]
fn standing_claim_waiters_take_a_free_lease_with_two_operators() {
    let cfg = Config { operators: 2, max_time: 2, restarts: 0, waiter_takes: true, ..waiter_hints() };
    assert_safe("waiter-take-2ops", cfg, WAITER_TAKE_2OPS_DEPTH, &[WAITER_TAKE, WAITER_HINT, SECOND_REQUEST]);
}

/// [`waiter_hints`] with takes whose answer may be lost, landed or not
/// ([`Action::ClaimWaiterTakeUnanswered`]): a take that landed unanswered is learned from the
/// Lease or the claim's status, held from the request's time (the code's `OwnArrival::Done`).
#[test]
fn a_waiter_s_own_take_whose_answer_is_lost_is_learned_from_the_lease() {
    let cfg = Config { waiter_takes: true, waiter_take_unanswered: true, ..waiter_hints() };
    assert_safe("waiter-take-unanswered", cfg, WAITER_TAKE_UNANSWERED_DEPTH, &[UNANSWERED_TAKE, WAITER_TAKE]);
}

/// A waiter's own hint displaced by an older waiter (a pod the operator's cache had not seen):
/// it still waits by its claim and is answered.
#[test]
fn a_waiter_s_own_hint_displaced_by_an_older_waiter() {
    let cfg = Config { waiter_hints: true, lease_arrivals: false, ..displaced() };
    assert_safe("waiter-hint-displaced", cfg, DISPLACED_DEPTH, &[WAITER_HINT]);
}

/// Two standing claims whose waiters may name themselves as the hint, no fault, no restart: the
/// ground for the planted bugs of the waiter's own arrival.
const WAITERS_PLANTED: Config =
    Config { claims: 2, requests: 2, restarts: 0, faults: 0, waiter_hints: true, ..Config::BASE };

/// A waiter's own hint with a token above `leasehold.dev/token-ceiling` (I2).
#[test]
fn a_planted_bug_waiter_hint_above_the_ceiling_is_caught() {
    planted_violates(Bug::ArrivalAboveCeiling, Config { initial_ceiling: 1, ..WAITERS_PLANTED }, 8, I2);
}

/// A waiter's own take written without its version as precondition, over a holder (I1).
#[test]
fn a_planted_bug_waiter_take_without_precondition_is_caught() {
    planted_violates(Bug::WaiterTakesBlind, Config { waiter_takes: true, ..WAITERS_PLANTED }, 8, I1);
}

/// A waiter's own take whose answer was lost, taken as landed although it may not have (I1).
#[test]
fn a_planted_bug_unanswered_take_assumed_landed_is_caught() {
    let cfg = Config { waiter_takes: true, waiter_take_unanswered: true, ..WAITERS_PLANTED };
    planted_violates(Bug::LostTakeAssumedLanded, cfg, 9, I1);
}

/// The lock's `leaseDurationSeconds` lowered from 3 to 1 at any moment (a newcomer trial found
/// that cutting it under a running holder let the next waiter run beside it): a grant keeps the
/// value its Lease was written with while it holds (`grant::lease_duration_to_write`), the
/// operator expires it by the longer of that and the lock's (`grant::expiry_of`), and a holder
/// renews against the shorter of what it read before queueing and its grant's Lease
/// (`holder::granted_timings`). Two claims with renewals, expiry and a pause, a fault and a
/// restart.
const LEASE_LOWERED: Config = Config { claims: 2, max_time: 4, lower_lease: true, ..Config::BASE };

#[test]
fn the_lease_duration_lowered_under_a_holder_and_a_waiter() {
    assert_safe(
        "lease-lowered",
        LEASE_LOWERED,
        LEASE_LOWERED_DEPTH,
        &[LOWERED_UNDER, LOWERED_GRANT, HANDOVER_NEW_DURATION],
    );
}

/// The operator expiring a holder by the lock's lowered value (the hole as it was) is caught (I1).
#[test]
fn a_planted_bug_expiry_by_the_lowered_spec_is_caught() {
    planted_violates(Bug::ExpiryBySpec, LEASE_LOWERED, LEASE_LOWERED_PLANTED_DEPTH, I1);
}

/// A holder renewing against the lease duration it read before the value was lowered, not its
/// grant's, is caught (I1): granted under 1 s, it counts itself held for 2 s, and the operator
/// grants the other claim after 1 s.
#[test]
fn a_planted_bug_holder_keeps_the_read_lease_duration_is_caught() {
    planted_violates(Bug::HolderKeepsReadDuration, LEASE_LOWERED, LEASE_LOWERED_PLANTED_DEPTH, I1);
}

const LEASE_LOWERED_DEPTH: usize = 11;
const LEASE_LOWERED_PLANTED_DEPTH: usize = 10;
const WAITER_HINT_DEPTH: usize = 12;
const WAITER_TAKE_UNANSWERED_DEPTH: usize = 9;
const WAITER_HINT_2OPS_DEPTH: usize = 10;
const WAITER_TAKE_DEPTH: usize = 10;
const WAITER_TAKE_2OPS_DEPTH: usize = 9;
const LEASE_ARRIVAL_RECREATE_DEPTH: usize = 11;
const LEASE_ARRIVAL_SEMAPHORE_DEPTH: usize = 11;
const LEASE_ARRIVAL_DEPTH: usize = 12;
const LEASE_ARRIVAL_2OPS_DEPTH: usize = 9;
const DISPLACED_DEPTH: usize = 14;

/// A release that does not list its request in `leasehold.dev/released`: the claim still shows
/// the request, unrecorded, and is granted again.
#[test]
fn a_planted_bug_release_without_record_is_caught() {
    let cfg =
        Config { claims: 1, requests: 2, restarts: 0, faults: 0, max_time: 2, record_delay_secs: 1, ..Config::BASE };
    planted_violates(Bug::ReleaseWithoutRecord, cfg, 8, I3);
}

const STANDING_DEPTH: usize = 12;
const STANDING_POD_DEPTH: usize = 9;

#[test]
fn a_planted_bug_hint_token_not_above_is_caught() {
    let cfg = Config { claims: 2, restarts: 0, faults: 0, ..Config::BASE };
    planted_violates(Bug::HintTokenNotAbove, cfg, 8, I2);
}

/// After a node-loss takeover: the zombie keeps running on its lost node while its successor
/// finishes (the interleaving where a repair once wrote the zombie back
/// into the Lease with its lower token).
#[test]
fn after_a_node_loss_takeover_the_zombie_is_never_written_back() {
    let cfg = Config { pods: 2, max_time: 1, restarts: 0, start_held: true, node_loss_secs: 1, ..Config::BASE };
    assert_safe("zombie", cfg, 14, &[]);
}

/// The checker can fail: with the resourceVersion precondition removed from the patch that
/// ungates a holder, an operator that finishes a grant from a stale view ungates a pod with a
/// token below one already handed out.
#[test]
fn a_planted_bug_holder_patch_without_precondition_is_caught() {
    planted(Bug::HolderPatchWithoutPrecondition, 9);
}

/// The checker can fail: without the Lease's compare-and-swap, two operators with different
/// views both change the holder.
#[test]
fn a_planted_bug_lease_update_without_precondition_is_caught() {
    planted(Bug::LeaseWithoutPrecondition, 9);
}

/// A granted pod that does not start within the start timeout (1 s) is deleted and the lock
/// passes on once it is gone; the pod may still start at the edge (its deletion is then
/// graceful and the lock waits for it), while the operator's caches lag, it restarts (its
/// start clock starts over) and a fault strikes (a node lost, the Lease deleted).
#[test]
fn start_timeout_reclaims_a_holder_that_never_starts() {
    let cfg =
        Config { pods: 2, max_time: 3, start_held: true, held_pending: true, start_timeout_secs: 1, ..Config::BASE };
    assert_safe("start-timeout", cfg, 12, &[RECLAIM]);
}

/// Waiters that give up: pod-b skips when busy, claim-x waits at most 1 s, behind pod-a that
/// holds; two operators with lagging caches.
#[test]
fn skip_and_max_wait_waiters_are_rejected_and_never_granted_afterwards() {
    let cfg = Config {
        pods: 2,
        claims: 1,
        operators: 2,
        max_time: 2,
        faults: 0,
        restarts: 0,
        start_held: true,
        pod_policy: [Policy::WAIT, Policy::SKIP, Policy::WAIT],
        claim_policy: [Policy::max_wait(1), Policy::WAIT],
        ..Config::BASE
    };
    assert_safe("policies", cfg, 10, &[REJECT_BUSY, REJECT_TIMEOUT]);
}

/// The checker can fail I3: without the resourceVersion precondition on the rejection (the
/// product code before the policies run found it), an operator whose caches lag rejects the
/// skip waiter that another operator has just granted.
#[test]
fn a_planted_bug_reject_without_precondition_is_caught() {
    let cfg = Config {
        pods: 2,
        operators: 2,
        restarts: 0,
        faults: 0,
        start_held: true,
        pod_policy: [Policy::WAIT, Policy::SKIP, Policy::WAIT],
        ..Config::BASE
    };
    planted_violates(Bug::RejectWithoutPrecondition, cfg, 7, I3);
}

/// The checker can fail I3: a conversion that forgets a rejection is terminal grants the
/// rejected skip waiter once the holder finishes.
#[test]
fn a_planted_bug_rejected_waiter_still_waits_is_caught() {
    let cfg = Config {
        pods: 2,
        restarts: 0,
        faults: 0,
        start_held: true,
        pod_policy: [Policy::WAIT, Policy::SKIP, Policy::WAIT],
        ..Config::BASE
    };
    planted_violates(Bug::RejectedStillWaits, cfg, 8, I3);
}

/// The checker can fail I4: an operator that never acts on the start timeout leaves the waiter
/// behind a holder that never starts.
#[test]
fn a_planted_bug_ignored_start_timeout_is_caught() {
    let cfg = Config {
        pods: 2,
        max_time: 2,
        restarts: 0,
        faults: 0,
        start_held: true,
        held_pending: true,
        start_timeout_secs: 1,
        ..Config::BASE
    };
    planted_violates(Bug::IgnoreStartTimeout, cfg, 6, I4);
}

/// The checker can fail I4: without max-wait the waiter is never told, behind a holder that
/// runs for ever.
#[test]
fn a_planted_bug_ignored_max_wait_is_caught() {
    let cfg = Config {
        pods: 2,
        max_time: 2,
        restarts: 0,
        faults: 0,
        start_held: true,
        pod_policy: [Policy::WAIT, Policy::max_wait(1), Policy::WAIT],
        ..Config::BASE
    };
    planted_violates(Bug::IgnoreMaxWait, cfg, 6, I4);
}

/// The checker can fail I4: an operator that never grants again after a release leaves the
/// waiter on a free lock.
#[test]
fn a_planted_bug_no_grant_after_release_is_caught() {
    let cfg = Config { pods: 2, restarts: 0, faults: 0, start_held: true, ..Config::BASE };
    planted_violates(Bug::NoGrantAfterRelease, cfg, 7, I4);
}

/// A new lock (issue 12: its Lease is created lazily, at the first grant): no reservation, no
/// Lease; pod-a waits (or is deleted before the operator sees it: the operator then idles
/// without writing), pod-b arrives later, a fault (the Lease deleted again, a node lost) and a
/// restart anywhere; the lock is reserved, its Lease created and granted, twice.
#[test]
fn a_new_lock_creates_its_lease_at_the_first_grant() {
    let cfg = Config { pods: 2, fresh: true, ..Config::BASE };
    assert_safe("fresh", cfg, 12, &[IDLE_NO_LEASE]);
}

/// A lock deleted and recreated with the same name while pod-a, granted token 1 by the old
/// object, still runs: the old Lease stays until the garbage collector removes it, caches lag,
/// the operator restarts. The new object must not grant pod-b beside pod-a: it reserves above
/// pod-a's token, adopts it, and grants pod-b above it once pod-a is done.
#[test]
fn a_recreated_lock_never_ignores_a_holder_of_the_old_object() {
    let cfg = Config { pods: 2, recreate: true, start_held: true, ..Config::BASE };
    assert_safe("recreate", cfg, 12, &[RECREATE_GRANT]);
}

/// The checker can fail I1 here: a conversion that ignores holders granted by an earlier lock
/// object (tokens counted only for the lock UID that granted them) lets the recreated lock
/// grant pod-b while pod-a still runs.
#[test]
fn a_planted_bug_ignoring_the_old_objects_holder_is_caught() {
    let cfg = Config { pods: 2, recreate: true, start_held: true, restarts: 0, ..Config::BASE };
    planted_violates(Bug::IgnoreOldGrants, cfg, 11, I1);
}

/// A semaphore (issue 14) with two slots, one operator: a pod and a claim queue for it, time
/// passes (the claim renews, expires, is paused or deleted), a restart, a fault (a slot's Lease
/// deleted, a node lost). Per slot at most one holder runs and its tokens increase (I1, I2); no
/// token is handed twice across the slots (I2); a waiter is answered once the lock has room (I4).
#[test]
fn semaphore_one_operator_claims_time_faults_and_a_restart() {
    let cfg = Config { pods: 1, claims: 1, max_time: 3, max_holders: Some(2), ..Config::BASE };
    assert_safe("semaphore", cfg, 10, &[TWO_AT_ONCE]);
}

/// A semaphore with two slots and two operators whose caches lag: two pods granted side by
/// side, never the same token, never two in one slot.
#[test]
fn semaphore_two_operators_lagging_caches() {
    let cfg = Config { pods: 2, operators: 2, restarts: 0, faults: 0, max_holders: Some(2), ..Config::BASE };
    assert_safe("semaphore-two-operators", cfg, 9, &[TWO_AT_ONCE]);
}

/// Lowering `maxHolders` from 2 to 1 while two hold revokes nobody, and nothing is granted to
/// the waiter until neither holds (a grant reserved under the new limit is checked against it).
#[test]
fn lowering_max_holders_revokes_nobody_and_grants_nothing_until_below_the_limit() {
    assert_safe("semaphore-lowered", LOWERED, 9, &[CHANGED_GRANT]);
}

/// Turning a single-holder lock into a semaphore (`maxHolders: 2` set while its one holder
/// runs, two operators whose caches lag) never hands a token twice: a stale operator still on
/// the single-holder rules can only use tokens of its own reserved block, below every
/// semaphore token.
#[test]
fn turning_a_lock_into_a_semaphore_never_repeats_a_token() {
    let cfg = Config {
        pods: 2,
        operators: 2,
        restarts: 0,
        faults: 0,
        start_held: true,
        change_max_holders: Some(2),
        ..Config::BASE
    };
    assert_safe("semaphore-raised", cfg, 10, &[TWO_AT_ONCE, CHANGED_GRANT]);
}

/// The checker can fail I2 on a semaphore: without the compare-and-swap on the token
/// reservation, two operators reserve from the same ceiling and hand the same token to holders
/// of two slots.
#[test]
fn a_planted_bug_semaphore_reservation_without_precondition_is_caught() {
    let cfg =
        Config { pods: 2, operators: 2, restarts: 0, faults: 0, pods_idle: true, max_holders: Some(2), ..Config::BASE };
    planted_violates(Bug::ReserveWithoutPrecondition, cfg, 9, I2);
}

/// The checker can fail I1 on a semaphore: a conversion that forgets which slot a holder holds
/// lets slot 1 take its holder for gone and grant a second pod in that slot beside it.
#[test]
fn a_planted_bug_semaphore_ignoring_the_slot_is_caught() {
    let cfg = Config {
        pods: 3,
        restarts: 0,
        faults: 0,
        start_held: true,
        start_held_slots: 2,
        pods_idle: true,
        max_holders: Some(2),
        ..Config::BASE
    };
    planted_violates(Bug::IgnoreSlot, cfg, 7, I1);
}

/// The checker can fail I1 when a claim holder skips its first renewal and counts its deadline
/// from when it learned the grant: the grant is taken back (no renewal for a lease duration),
/// the next claim is granted, and the first learns its old grant late and works beside it.
#[test]
fn a_planted_bug_holder_clock_from_learning_is_caught() {
    let cfg = Config { pods: 0, claims: 2, max_time: 4, restarts: 0, faults: 0, ..Config::BASE };
    planted_violates(Bug::HolderClockFromLearning, cfg, 12, I1);
}

/// The checker can fail I1 once a claim's process may learn its grant from the Lease (issue 12):
/// an operator whose caches lag rejects the skip claim that another operator has just granted
/// in the Lease (the rejection's precondition is the claim's resourceVersion, which the Lease
/// write did not change); the process saw the Lease first and holds. Released at once as if it
/// were a failed pod, the lock goes to the next waiter beside it. The product keeps a Lease that
/// names a claim (rejected, deleted or not) until its holder stops renewing.
#[test]
fn a_planted_bug_rejected_claim_released_at_once_is_caught() {
    let cfg = Config {
        pods: 1,
        claims: 2,
        operators: 2,
        max_time: 0,
        faults: 0,
        restarts: 0,
        start_held: true,
        claim_policy: [Policy::SKIP, Policy::WAIT],
        ..Config::BASE
    };
    let cfg = Config { bug: Some(Bug::RejectedClaimAsPod), ..cfg };
    let checker = checking::run_until_counterexample("planted RejectedClaimAsPod", LockModel { cfg }, 14, I1);
    let t = trace(&checker, I1).expect("the checker must find the double holder the planted bug allows");
    eprintln!("counterexample found, as it must be:\n{t}");
}

/// Runs `cfg` with `bug` planted and asserts the checker finds a counterexample to `property`.
fn planted_violates(bug: Bug, cfg: Config, depth: usize, property: &'static str) {
    let checker = check(&format!("planted {bug:?}"), Config { bug: Some(bug), ..cfg }, depth);
    let t = trace(&checker, property)
        .unwrap_or_else(|| panic!("the checker must find the counterexample to {property} the planted bug allows"));
    eprintln!("counterexample found, as it must be:\n{t}");
}

fn planted(bug: Bug, depth: usize) {
    let cfg = Config { pods: 2, operators: 2, faults: 0, bug: Some(bug), ..Config::BASE };
    let checker = check(&format!("planted {bug:?}"), cfg, depth);
    let t = trace(&checker, I1)
        .or_else(|| trace(&checker, I2))
        .expect("the checker must find the double grant the planted bug allows");
    eprintln!("counterexample found, as it must be:\n{t}");
}

/// A semaphore lowered from 2 to 1 while both slots hold, as the review found it (F1-F3 in the
/// README): the holders of both slots stay counted whatever happens to their Leases, and the
/// waiters are still answered while the lock is over its new limit.
const LOWERED: Config = Config {
    pods: 3,
    restarts: 0,
    faults: 0,
    start_held: true,
    start_held_slots: 2,
    max_holders: Some(2),
    change_max_holders: Some(1),
    ..Config::BASE
};

/// Over a lowered limit, a skip waiter finds the lock busy and is rejected (F2).
#[test]
fn lowered_max_holders_still_answers_a_skip_waiter() {
    let cfg = Config { pod_policy: [Policy::WAIT, Policy::WAIT, Policy::SKIP], ..LOWERED };
    assert_safe("lowered-skip", cfg, 6, &[REJECT_BUSY]);
}

/// Over a lowered limit, a max-wait waiter is rejected when its wait runs out (F2).
#[test]
fn lowered_max_holders_still_answers_a_max_wait_waiter() {
    let cfg = Config { max_time: 2, pod_policy: [Policy::WAIT, Policy::WAIT, Policy::max_wait(1)], ..LOWERED };
    assert_safe("lowered-max-wait", cfg, 8, &[REJECT_TIMEOUT]);
}

/// `maxHolders` removed while both slots hold (the CRD forbids it; a hand edit or an old CRD
/// does not): the holder of slot 1 keeps the lock on the semaphore path, nobody is granted
/// beside it (F3).
#[test]
fn removing_max_holders_keeps_the_slot_holders_counted() {
    let cfg = Config { remove_max_holders: true, ..LOWERED };
    assert_safe("removed", cfg, 10, &[]);
}

/// Lowered while a third party deletes a slot's Lease (F1): the holder that still runs in that
/// slot stays counted, so nothing is granted beside it over the new limit.
#[test]
fn lowered_max_holders_with_a_slot_lease_deleted() {
    let cfg = Config { faults: 1, ..LOWERED };
    assert_safe("lowered-lease-deleted", cfg, 10, &[]);
}

/// The Lease deleted while its holder is granted but not started yet (ungated, not scheduled:
/// no node): the recreated Lease must name it (found by the chaos run of 2026-12-06, a pod
/// running on lock l1 beside the next holder of the recreated Lease). Without the adoption of an
/// unscheduled holder (`grant::adoptable_holder` required a node) the checker finds I1.
#[test]
fn a_deleted_lease_is_recreated_for_a_holder_not_yet_scheduled() {
    let cfg = Config {
        pods: 1,
        claims: 1,
        start_held: true,
        held_pending: true,
        restarts: 0,
        max_time: 4,
        record_delay_secs: 1,
        ..Config::BASE
    };
    assert_safe("lease-deleted-pending", cfg, LEASE_DELETED_PENDING_DEPTH, &[]);
}

const LEASE_DELETED_PENDING_DEPTH: usize = 14;
