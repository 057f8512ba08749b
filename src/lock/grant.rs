//! The grant decision: a pure function from what the operator observed to the next write.
//!
//! The controller calls [`decide`] with one snapshot (the Lease, the pods that name the lock, the
//! lock's token ceiling, and durations measured on its own monotonic clock), applies the one
//! [`Decision`] it returns, and repeats with the written objects until the decision is
//! [`Decision::Idle`]. Every Lease write is a compare-and-swap on the resourceVersion of the
//! snapshot the decision was made from, so a decision made on a stale snapshot fails with 409
//! instead of producing a second holder.
//!
//! Release rules (why a holder stops holding):
//! - its pod reached phase `Succeeded` or `Failed`, or the pod object is gone (or was replaced by
//!   a new pod with the same name: UIDs differ). A pod that only has a `deletionTimestamp` may
//!   still run its containers, so it still holds the lock;
//! - it was granted but deleted before it could start (still gated, `deletionTimestamp` set:
//!   kube-scheduler never binds a terminating pod);
//! - its node has been NotReady, Unknown or missing for `nodeLossTimeoutSeconds`, measured from
//!   when this operator first observed it so: the next holder gets a higher token.
//!
//! A holder that stays `Pending` for `startTimeoutSeconds` after the grant is deleted (its Job
//! or ReplicaSet may replace it, and the replacement queues at the end); the lock is released
//! when the pod is gone, like any other holder.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::fencing::{self, TokenExhausted};
use super::policy::BusyPolicy;
use super::queue;

/// Pod phase (`status.phase`), as far as grant decisions care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not started yet (includes unscheduled and gated pods).
    Pending,
    /// Bound and at least one container started.
    Running,
    /// All containers exited 0.
    Succeeded,
    /// All containers exited, at least one with an error.
    Failed,
    /// The node stopped reporting, or no phase was set.
    Unknown,
}

impl HolderKind {
    /// The `leasehold.dev/holder-kind` value.
    pub fn as_str(self) -> &'static str {
        match self {
            HolderKind::Pod => "Pod",
            HolderKind::Claim => "Claim",
        }
    }
}

impl Phase {
    /// Maps the API's phase string; anything unexpected is [`Phase::Unknown`].
    pub fn parse(phase: Option<&str>) -> Self {
        match phase {
            Some("Pending") => Phase::Pending,
            Some("Running") => Phase::Running,
            Some("Succeeded") => Phase::Succeeded,
            Some("Failed") => Phase::Failed,
            _ => Phase::Unknown,
        }
    }
}

/// How a holder keeps the lock: explicit per kind, never guessed from behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum HolderKind {
    /// A gated pod, held by its lifecycle until it is terminal or gone.
    #[default]
    Pod,
    /// A `DistributedLockClaim`, held while its holder renews the Lease at least every
    /// `leaseDurationSeconds` (as seen on the operator's monotonic clock).
    Claim,
}

/// What the decision needs to know about a candidate holder: a pod that names the lock, or a
/// `DistributedLockClaim` for it. For a claim, "gated" means not granted yet, `Running` means
/// granted, `Failed` means it gave up.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// Pod or claim.
    pub kind: HolderKind,
    /// `metadata.name`.
    pub name: String,
    /// The Lease `holderIdentity` it holds under: the pod name, or the claim's `spec.identity`.
    pub identity: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion` as observed: the precondition of the write that grants it.
    pub resource_version: String,
    /// `metadata.creationTimestamp`.
    pub created: Timestamp,
    /// `spec.schedulingGates` contains `leasehold.dev/lock`.
    pub gated: bool,
    /// `spec.nodeName`, once bound.
    pub node_name: Option<String>,
    /// Bound to a node that is NotReady, Unknown or missing, as this process observes it.
    pub node_lost: bool,
    /// `status.phase`.
    pub phase: Phase,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The `leasehold.dev/fencing-token` annotation, if present and valid.
    pub token: Option<i64>,
    /// What the pod wants when the lock is busy (`leasehold.dev/on-busy`).
    pub on_busy: BusyPolicy,
    /// `leasehold.dev/max-wait`, if set and valid.
    pub max_wait: Option<Duration>,
    /// How long this operator has seen the pod waiting (monotonic clock); `None` if unknown.
    pub waiting_for: Option<Duration>,
    /// The slot of a semaphore (`spec.maxHolders`) its grant is recorded in: the pod's
    /// `leasehold.dev/slot` annotation or the claim's `status.slot`; 0 when missing (every grant
    /// of a single-holder lock, and of locks from before semaphores, is slot 0). Meaningless
    /// while the candidate waits.
    pub slot: u32,
    /// `Some` for a pod that asks for several locks at once (`leasehold.dev/locks`, issue 14;
    /// design in `docs/multi-lock.md`): what its pod records about the rest of its lock set.
    /// `None` for a pod or claim that asks for this lock alone. With `Some`, [`Candidate::token`]
    /// is this lock's own token annotation.
    pub multi: Option<MultiLock>,
}

/// What a multi-lock pod (issue 14) records about its lock set, read from its annotations. The
/// pod is the commit point of an all-or-nothing grant: each lock names the pod in its Lease
/// *tentatively* (the pod stays gated), records that token on the pod, and the pod is ungated
/// only by a patch (resourceVersion precondition) of a version that records a token for every
/// lock of its set. A tentative grant is taken back by first recording it as withdrawn on the
/// pod (same precondition), then moving the Lease; so a version of the pod that records a token
/// for a lock always has that lock's Lease naming it with that token.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MultiLock {
    /// The highest token of this lock taken back from the pod (`<lock>.locks.leasehold.dev/withdrawn`;
    /// 0 when none): a Lease that names the pod with a token at or below it was taken back, and
    /// its move to the next waiter may still be pending. No token at or below it is recorded again.
    pub withdrawn: i64,
    /// Every *other* lock of its set has a token recorded on the pod: once this lock's is
    /// recorded too, the pod may run.
    pub others_recorded: bool,
    /// The operator does not serve the pod's set (now): a lock of it is missing or a semaphore
    /// (`controller::distributed_lock::lock_set_unservable`). Such a pod is left out of the
    /// queues; one this lock has granted already stays a candidate with this flag, and its
    /// tentative grant is taken back ([`Decision::Withdraw`]) so that the lock does not stay
    /// reserved for a pod that cannot run.
    pub unservable: bool,
}

impl Candidate {
    /// Phase `Succeeded` or `Failed`: no container of this pod will run again.
    pub fn is_terminal(&self) -> bool {
        matches!(self.phase, Phase::Succeeded | Phase::Failed)
    }

    /// Whether the pod may be queued for a grant: gated by us, alive, not being deleted, and not
    /// a multi-lock pod whose set is not served ([`MultiLock::unservable`]).
    pub fn is_waiter(&self) -> bool {
        self.gated && !self.deleting && !self.is_terminal() && !self.multi.as_ref().is_some_and(|m| m.unservable)
    }
}

impl queue::Waiter for Candidate {
    fn created(&self) -> Timestamp {
        self.created
    }
    fn name(&self) -> &str {
        &self.name
    }
}

/// What the decision needs to know about the lock's Lease.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct LeaseView {
    /// `spec.holderIdentity` (pod name) with the `leasehold.dev/holder-uid` annotation.
    pub holder: Option<Holder>,
    /// `leasehold.dev/fencing-token`: the current (or last) grant's token; 0 before the first.
    pub token: i64,
    /// `leasehold.dev/token-floor`: every token issued before this Lease existed is <= floor.
    pub floor: i64,
    /// False when the token annotations are missing or unreadable although they should be there
    /// (a hand-edited Lease): the next token then starts above a fresh reservation.
    pub trusted: bool,
    /// The next-holder hint (`leasehold.dev/next-holder`, `-next-holder-uid`, `-next-token`):
    /// whom a claim holder hands the lock to when it releases ([`Next`]); `None` when absent or
    /// unreadable.
    pub next: Option<Next>,
    /// The requests of standing claims released by their holders (`leasehold.dev/released`,
    /// [`crate::lock::RELEASED_ANNOTATION`]): request UIDs ([`request_uid`]), never granted
    /// again. Empty when absent.
    pub released: Vec<String>,
    /// `leasehold.dev/token-ceiling` ([`crate::lock::TOKEN_CEILING_ANNOTATION`]): the lock's
    /// reserved `status.tokenCeiling` as the operator knew it when it last wrote this Lease of a
    /// single-holder lock; a waiter that arrives by the Lease ([`lease_arrival`]) takes a token
    /// only up to it. `None` when absent or unreadable (then nobody arrives by the Lease).
    pub ceiling: Option<i64>,
    /// `spec.leaseDurationSeconds`: the lease duration of the grant the Lease records (written
    /// at the grant, kept while the same grant holds: [`lease_duration_to_write`]); the holder
    /// renews against it, and the operator expires that holder no sooner ([`expiry_of`]).
    /// `None` when absent or not positive.
    pub lease_duration: Option<Duration>,
    /// `leasehold.dev/next-lease-duration` ([`crate::lock::NEXT_LEASE_DURATION_ANNOTATION`]): the
    /// lock's lease duration an operator's next-holder hint carries, which the handover writes;
    /// `None` when absent (a waiter's own hint) or unreadable.
    pub next_lease_duration: Option<Duration>,
}

/// The `spec.leaseDurationSeconds` an operator's write of a Lease (`observed`, `None` for a
/// create) that names `holder` sets: the observed Lease's own value while it names the same grant
/// (a holder, with the token `holder` carries: a token names one grant, whoever the Lease shows
/// for it, a revoked holder's tombstone or an adopted one included), otherwise `lock`, the lock's
/// `spec.leaseDurationSeconds` as read now.
/// A holder's renew deadline is set by the value of its grant's Lease (`holder::LockGuard`),
/// so a lease duration lowered on the lock reaches the next grant, never a running one: found by
/// a newcomer trial (cutting 60 s to 3 s under a running holder let the next waiter run beside it
/// for about 15 s), checked by the model checker (`tests/model.rs`, run "lease-lowered").
pub fn lease_duration_to_write(observed: Option<&LeaseView>, holder: Option<&Grant>, lock: Duration) -> Duration {
    match (observed, holder) {
        (Some(l), Some(g)) if l.holder.is_some() && l.token == g.token => l.lease_duration.unwrap_or(lock),
        _ => lock,
    }
}

/// How long a claim holder of `lease` may go without a renewal before the operator takes the
/// grant back: the lock's `spec.leaseDurationSeconds` (`settings`) or, when longer, the Lease's
/// own (the value its grant was made with, [`lease_duration_to_write`]): a lease duration lowered
/// on the lock after the grant does not shorten the time the holder was promised.
pub fn expiry_of(settings: &Settings, lease: Option<&LeaseView>) -> Duration {
    settings.lease_duration.max(lease.and_then(|l| l.lease_duration).unwrap_or_default())
}

/// The candidate UID of request `request` of a standing claim (`spec.request`, issue 12):
/// `<claim UID>/<request>`, e.g. `"6f1c...-9a/3"`. A standing claim is kept by its process
/// across `acquire()`/`release()` cycles and counts its requests in `spec.request`; each request
/// is queued, granted, rejected or released on its own, exactly like a one-shot claim whose UID
/// is this string: it is what the Lease's `leasehold.dev/holder-uid` and the next-holder hint
/// name. Kubernetes UIDs never contain `/`, so [`split_request_uid`] reads it back.
pub fn request_uid(claim_uid: &str, request: i64) -> String {
    format!("{claim_uid}/{request}")
}

/// Reads a candidate UID back: the object's `metadata.uid` and, for a request of a standing
/// claim ([`request_uid`]), the request number. A pod's or one-shot claim's UID gives
/// `(uid, None)`; an unreadable request number too (the whole string is taken as the UID).
pub fn split_request_uid(uid: &str) -> (&str, Option<i64>) {
    match uid.rsplit_once('/') {
        Some((object, r)) => match r.parse::<i64>() {
            Ok(r) if r > 0 => (object, Some(r)),
            _ => (uid, None),
        },
        None => (uid, None),
    }
}

/// The highest request of standing claim `object_uid` (its `metadata.uid`, `spec.identity`
/// `identity`) that `lease` names: as its holder (`leasehold.dev/holder-uid`, with
/// `holderIdentity` `identity`), its next-holder hint (`leasehold.dev/next-holder` `identity`) or
/// an entry of its released list ([`request_uid`]). A holder or hint under another identity is
/// not the claim's (a Lease arrival writes its own identity, which the chart's Lease policy
/// checks against the requester). `None` when it names none of the claim's requests.
pub fn lease_request(lease: &LeaseView, object_uid: &str, identity: &str) -> Option<i64> {
    let holder = lease.holder.as_ref().filter(|h| h.name == identity).and_then(|h| h.uid.as_deref());
    let next = lease.next.as_ref().filter(|n| n.identity == identity).map(|n| n.uid.as_str());
    holder
        .into_iter()
        .chain(next)
        .chain(lease.released.iter().map(String::as_str))
        .filter_map(|u| match split_request_uid(u) {
            (o, Some(r)) if o == object_uid => Some(r),
            _ => None,
        })
        .max()
}

/// The request a standing claim is at (issue 12, `docs/two-writes-per-grant.md`, "The arrival
/// writes the hint"): the highest of its `spec.request`, its `status.request` and the request its
/// lock's Lease names ([`lease_request`]). A waiter that arrives by the Lease ([`lease_arrival`])
/// raises its request there and not in `spec.request` (one write per arrival), so the claim
/// object alone lags; the operator reads the request from all three.
pub fn current_request(
    spec: i64,
    status: Option<i64>,
    lease: Option<&LeaseView>,
    object_uid: &str,
    identity: &str,
) -> i64 {
    spec.max(status.unwrap_or(0)).max(lease.and_then(|l| lease_request(l, object_uid, identity)).unwrap_or(0))
}

/// When a request known only from the Lease (a waiter that arrived by the Lease and whose claim's
/// `spec.request` is older) queues: after every request known from a claim object, whose
/// `spec.requestTime` the operator can read. The operator then hints the oldest of those instead
/// (a [`Decision::SetNext`] that displaces the arrival), and the displaced process arrives again
/// by its claim with its own `spec.requestTime` ([`lease_arrival`]).
pub const LEASE_ARRIVAL_QUEUED: Timestamp = Timestamp::MAX;

/// What a waiting standing claim writes into its lock's Lease itself when it arrives (issue 12,
/// "The arrival writes the hint"): one compare-and-swap instead of a `spec.request` patch and an
/// operator's write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseArrival {
    /// The lock is held and nobody is hinted: name itself as the next-holder hint with this
    /// token; the holder's release then hands the lock over to it ([`Next`]).
    Hint(Next),
    /// The lock is free: take it, as holder, with this token (the grant the operator would
    /// write, written by the waiter).
    Take(i64),
}

/// Whether and how standing claim request `uid` (a [`request_uid`]) of identity `identity` may
/// arrive by writing `lease` itself ([`LeaseArrival`]); `None` when it must arrive by its claim
/// (`spec.request`): the Lease is not trusted (a hand-edited one), carries no token ceiling
/// ([`LeaseView::ceiling`]: a semaphore's, or one the operator has not written since), already
/// names a next holder, is held by a pod, by [`RECOVERY_HOLDER`] or by this request, or the next
/// token
/// ([`crate::lock::fencing::next_token`] of the Lease's token and floor) is above the ceiling.
///
/// Safe as a grant the operator decides on the same Lease version: the write is a
/// compare-and-swap on the resourceVersion read, the token is above the Lease's token and floor
/// (so above every token handed out while this Lease existed, `leasehold.dev/token-floor` for
/// the ones before) and within the lock's reservation. Model-checked: `tests/model.rs`,
/// "arrival by the Lease".
pub fn lease_arrival(lease: &LeaseView, identity: &str, uid: &str) -> Option<LeaseArrival> {
    if !lease.trusted || lease.next.is_some() {
        return None;
    }
    let token = fencing::next_token(lease.token, lease.floor).ok()?;
    if token > lease.ceiling? {
        return None;
    }
    match &lease.holder {
        None => Some(LeaseArrival::Take(token)),
        // A claim's release hands over to the hint; a pod releases by ending (the operator
        // grants then, and would clear a hint under a pod), the recovery holder never releases.
        Some(h) if h.kind != HolderKind::Claim || h.uid.as_deref().is_none_or(|u| u.is_empty() || u == uid) => None,
        Some(_) => Some(LeaseArrival::Hint(Next { identity: identity.to_string(), uid: uid.to_string(), token })),
    }
}

/// How long a standing claim's request waits by its claim before its process may arrive by the
/// Lease itself after all ([`lease_arrival`], issue 12, `docs/two-writes-per-grant.md`, "A
/// waiter names itself as the hint" and "A waiter takes a free Lease"): name itself as the
/// next-holder hint on a Lease held by another claim, or take a free one. 1 second, counted from
/// the start of the wait (`Ticket::wait`), from its arrival by the claim after a displaced Lease
/// arrival, or from the last Lease version whose next-holder hint changed (written, used by a
/// handover, withdrawn; renewals and takes leave it alone), whichever is latest; well above the
/// operator's reaction time on a healthy API server (milliseconds), so the operator's FIFO hint
/// or grant comes first there.
///
/// A fallback for a waiter whose operator is slow: under a saturated API server the operator's
/// grant or hint loses the compare-and-swap race to the other process's next arrival again and
/// again, while the waiter's own Lease watch shows every new version first. Both writes are a
/// Lease arrival's (the same checks, a compare-and-swap), but of a request the operator may be
/// granting at that moment, a race of its own; model-checked: `tests/model.rs`,
/// `Action::ClaimWaiterArrives`, runs "waiter-take" and "waiter-take-2ops". The take matters for a holder that releases
/// and arrives again at once (no hold): its release lands before the waiter's hint on the held
/// version can (measured: 0 of 5 such hints landed in 40 s), and only a free version is left
/// to the waiter, where the holder needs a read and a write to take again and the waiter one
/// write. Counting from the last hint change matters when many wait: counted from the start of
/// the wait only, every waiter past its first second wrote the hint at each handover (200
/// waiters: 60.5 refused Lease PUTs per handover, README "Performance"). Takes must not restart
/// it: a waiter behind a holder that releases a free Lease and takes it again, over and over,
/// with a slow operator, would never arrive (the starvation this fallback is built against).
pub const WAITER_ARRIVES_AFTER: Duration = Duration::from_secs(1);

/// How long a free Lease version must have been the latest one a waiter by claim saw before
/// the waiter takes it ([`WAITER_ARRIVES_AFTER`]): 250 ms. On a healthy API server the operator
/// grants a free Lease to the head of the queue within milliseconds, a pod or a waiter with a
/// busy policy included (for those it writes no next-holder hint, so the waiter's delay is not
/// restarted by one); taking at once, the waiter would win that race and overtake them. Under a
/// saturated API server, where the take is needed, a process that released and arrives again
/// needs a read and a write of seconds each to take the Lease back, so the grace costs the
/// waiter nothing there.
pub const WAITER_TAKE_GRACE: Duration = Duration::from_millis(250);

/// How many entries of `leasehold.dev/released` ([`LeaseView::released`]) a Lease write keeps
/// for claims that the writer does not see at all (deleted claims, or, in a lagging cache, not
/// yet seen ones): below this bound none is dropped.
pub const RELEASED_KEPT_UNSEEN: usize = 16;

/// The `leasehold.dev/released` list that a Lease write by the operator keeps: `released` (as
/// the Lease the write is based on has it) without the entries that can no longer matter. An
/// entry `X/r` matters while claim `X` may still be at request `r`: it is dropped when a
/// candidate shows `X` at a later request (a claim's request only grows, CEL-checked), and, only
/// once more than [`RELEASED_KEPT_UNSEEN`] entries name claims absent from `candidates`, those
/// entries are dropped too (a deleted claim's). A dropped entry whose claim does stay at `r`
/// would make the operator grant a request nobody waits for: its process ignores it and the lock
/// is free again one `leaseDurationSeconds` later (no safety property depends on the list).
pub fn keep_released(released: &[String], candidates: &[Candidate]) -> Vec<String> {
    // Each claim in view at its request: object UID -> request.
    let seen: std::collections::BTreeMap<&str, i64> =
        candidates.iter().filter_map(|c| Some(split_request_uid(&c.uid)).and_then(|(o, r)| Some((o, r?)))).collect();
    let mut kept: Vec<&String> = released
        .iter()
        .filter(|e| match split_request_uid(e) {
            (object, Some(r)) => seen.get(object).is_none_or(|now| *now <= r),
            _ => false,
        })
        .collect();
    let unseen = |e: &&String| !seen.contains_key(split_request_uid(e).0);
    if kept.iter().filter(|e| unseen(e)).count() > RELEASED_KEPT_UNSEEN {
        kept.retain(|e| !unseen(e));
    }
    kept.into_iter().cloned().collect()
}

/// A next-holder hint, written by the operator into the Lease while a claim holds it: the
/// waiting claim at the head of the queue and the token its grant gets. The holder's release
/// then writes the Lease to name that claim with that token, one compare-and-swap instead of a
/// release and a grant (issue 12: a voluntary handover is one write on the waiter's path).
///
/// Safe as an operator's grant decided on the view the hint was written from: the holder's
/// write is a compare-and-swap on the Lease version it last saw, so it lands only if nobody but
/// the holder's own renewals wrote the Lease since that hint; the operator then finishes the
/// grant (the claim's status) as after any Lease write naming a waiter
/// ([`Decision::PatchHolder`]). Model-checked: `tests/model.rs`, run "handover".
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Next {
    /// The waiting claim's Lease `holderIdentity`.
    pub identity: String,
    /// The waiting claim's UID (`leasehold.dev/holder-uid` after the handover).
    pub uid: String,
    /// Its fencing token: above every token in view when the hint was decided, within the
    /// reserved ceiling.
    pub token: i64,
}

/// A holder as recorded in the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Pod name.
    pub name: String,
    /// Pod UID; `None` if the annotation is missing (never matches a pod).
    pub uid: Option<String>,
    /// `leasehold.dev/holder-kind` (missing or unknown: [`HolderKind::Pod`]).
    pub kind: HolderKind,
}

/// Timeouts from the lock's spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `spec.startTimeoutSeconds`.
    pub start_timeout: Duration,
    /// `spec.nodeLossTimeoutSeconds`.
    pub node_loss_timeout: Duration,
    /// `spec.leaseDurationSeconds`: how long a claim holder may go without renewing.
    pub lease_duration: Duration,
    /// How long a grant to a claim that asks for one lock of a single-holder lock stays
    /// unrecorded in the claim's status (phase `Granted`, token) after the Lease named it
    /// ([`Decision::PatchHolder`] waits this long; zero: at once). The claim's process acts on
    /// the Lease, never on the status (`holder::Holder`), so the record is for people
    /// (`kubectl get dlclaim`) and for adopting the holder after its Lease was deleted; a claim
    /// released within the delay costs no status write (issue 12, writes per grant). Semaphore
    /// slots and claims with a lock set record at once: their status is what their process
    /// reads (the slot) or the commit point of the set ([`crate::lock::machine::step`]).
    pub claim_record_delay: Duration,
}

/// One consistent snapshot, plus durations measured on the operator's monotonic clock.
#[derive(Clone, Debug)]
pub struct Observation<'a> {
    /// The lock's timeouts.
    pub settings: Settings,
    /// The Lease, `None` if it does not exist.
    pub lease: Option<&'a LeaseView>,
    /// Every pod in the lock's namespace whose `leasehold.dev/lock` annotation names the lock.
    pub pods: &'a [Candidate],
    /// The lock's `status.tokenCeiling` as read.
    pub ceiling: i64,
    /// The lock's `status.highestToken` as read: a lower bound for the next token.
    pub highest_token: i64,
    /// `Some(c)` right after this reconcile raised the ceiling from `c` by compare-and-swap: a
    /// Lease created (or re-floored) now may start at `c + 1`.
    pub fresh_reservation: Option<i64>,
    /// How long the current holder has been seen granted but still `Pending`.
    pub holder_pending_for: Option<Duration>,
    /// How long the current holder's node has been seen NotReady/Unknown/missing.
    pub holder_node_lost_for: Option<Duration>,
    /// For a claim holder: how long since the operator last saw the Lease's `renewTime` change.
    pub holder_renewed_ago: Option<Duration>,
    /// For a claim holder: how long since the operator first saw the Lease name it (the age of
    /// the grant on this process's clock; it starts over after a restart, so the record can only
    /// come later, never earlier). Compared with [`Settings::claim_record_delay`]; `None` (a pod
    /// holder, or a semaphore slot's) records at once.
    pub holder_named_for: Option<Duration>,
    /// Every holder the lock may have holds (always true for a single-holder lock while its
    /// Lease names a holder): only then does a waiter with `on-busy: skip` find the lock busy.
    /// A semaphore slot's decision sets it from all slots ([`crate::lock::machine::step`]).
    pub at_capacity: bool,
}

/// A grant: this pod holds the lock with this token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// Pod or claim.
    pub kind: HolderKind,
    /// Object name (pod or claim).
    pub name: String,
    /// Lease `holderIdentity`.
    pub identity: String,
    /// Pod UID.
    pub uid: String,
    /// `metadata.resourceVersion` of the holder (pod or claim) the decision saw: the patch that
    /// ungates it carries it as a precondition, so a pod or claim that changed since (deleted,
    /// re-annotated, rejected) is not granted from a stale view (HTTP 409 instead).
    pub resource_version: String,
    /// Fencing token.
    pub token: i64,
    /// The slot whose Lease records the grant (0 for a single-holder lock; see
    /// [`Candidate::slot`]).
    pub slot: u32,
}

/// Why a holder stopped holding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseReason {
    /// The pod reached phase Succeeded.
    Succeeded,
    /// The pod reached phase Failed.
    Failed,
    /// The pod object is gone (or its name now belongs to another pod).
    Gone,
    /// The pod was deleted before it was ungated and started.
    DeletedBeforeStart,
    /// The pod's node stopped reporting for longer than `nodeLossTimeoutSeconds`.
    NodeLost,
    /// A claim holder did not renew the Lease within `leaseDurationSeconds`.
    Expired,
    /// A tentative grant to a gated multi-lock pod was taken back (an older waiter queues for
    /// this lock, wound-wait: `docs/multi-lock.md`). The pod never ran with it.
    Withdrawn,
}

impl ReleaseReason {
    /// Stable PascalCase name, used in Events and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseReason::Succeeded => "HolderSucceeded",
            ReleaseReason::Failed => "HolderFailed",
            ReleaseReason::Gone => "HolderGone",
            ReleaseReason::DeletedBeforeStart => "HolderDeletedBeforeStart",
            ReleaseReason::NodeLost => "HolderNodeLost",
            ReleaseReason::Expired => "HolderLeaseExpired",
            ReleaseReason::Withdrawn => "HolderWithdrawn",
        }
    }
}

/// A release of the current holder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    /// Pod name as recorded in the Lease.
    pub name: String,
    /// Token of the released grant.
    pub token: i64,
    /// Why.
    pub reason: ReleaseReason,
}

/// A waiter that gives up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reject {
    /// Pod name.
    pub name: String,
    /// Pod UID (precondition).
    pub uid: String,
    /// `metadata.resourceVersion` of the waiter the decision saw (precondition): a waiter that
    /// changed since (granted by a newer view, already rejected) is not rejected from a stale
    /// view (HTTP 409 instead). Found by the model checker (`tests/model.rs`, policies run): a
    /// stale max-wait rejection landed on the claim another operator had just granted.
    pub resource_version: String,
    /// Why: [`RejectReason`].
    pub reason: RejectReason,
}

/// Why a waiter gives up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RejectReason {
    /// `leasehold.dev/on-busy: skip` and the lock is held.
    LockBusy,
    /// `leasehold.dev/max-wait` elapsed.
    LockWaitTimeout,
    /// A claim with a lock set (issue 14) was named tentatively by this lock's Lease and its
    /// process did not renew that Lease within `leaseDurationSeconds`: the claim as a whole gives
    /// up (it is never granted afterwards), and only then does the Lease move on, as for any
    /// claim holder that stopped renewing.
    LeaseExpired,
}

impl RejectReason {
    /// Stable PascalCase name (pod status reason, Events, metrics).
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::LockBusy => "LockBusy",
            RejectReason::LockWaitTimeout => "LockWaitTimeout",
            RejectReason::LeaseExpired => "HolderLeaseExpired",
        }
    }
}

/// The one write to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Raise the lock's `status.tokenCeiling` from `from` to `to` by compare-and-swap, then decide
    /// again with [`Observation::fresh_reservation`] = `Some(from)`.
    Reserve {
        /// The ceiling as read (the precondition).
        from: i64,
        /// The new ceiling.
        to: i64,
    },
    /// Create the missing Lease. `holder` adopts a pod that still runs with a grant from the
    /// deleted Lease; `floor` is the reserved ceiling every older token is at most.
    CreateLease {
        /// Adopted holder, if a granted pod is still running.
        holder: Option<Grant>,
        /// Value for `leasehold.dev/token-floor`.
        floor: i64,
    },
    /// Compare-and-swap the Lease to a new holder (or to no holder).
    UpdateLease {
        /// The new holder; `None` leaves the lock free.
        holder: Option<Grant>,
        /// The release this write records, if a holder was holding.
        released: Option<Release>,
        /// New `leasehold.dev/token-floor`, when the Lease was hand-edited and is re-floored.
        floor: Option<i64>,
    },
    /// The Lease names this grant but the holder does not show it yet: patch the pod (remove the
    /// gate, set the token annotation) or the claim's status (phase Granted, token). Happens after
    /// every Lease write of a grant, and after a crash between the two writes.
    ///
    /// For a multi-lock pod ([`Candidate::multi`]) it records this lock's token annotation and
    /// removes the gate, in one patch, decided only when every other lock's token is recorded.
    PatchHolder(Grant),
    /// The Lease names a gated multi-lock pod ([`Candidate::multi`]) that still misses other
    /// locks of its set: record this lock's token annotation on the pod and keep the gate (UID
    /// and resourceVersion preconditions). The pod runs once all its locks are recorded.
    RecordTentative(Grant),
    /// The Lease tentatively names a gated multi-lock pod that is no longer the head of this
    /// lock's queue (an older waiter arrived, or was seen late): patch the pod (UID and
    /// resourceVersion preconditions, still gated) to drop this lock's token annotation and
    /// record the token as withdrawn ([`MultiLock::withdrawn`]). The next step moves the Lease to
    /// the head ([`ReleaseReason::Withdrawn`]). The pod has not run, so nothing is revoked.
    Withdraw(Grant),
    /// The Lease disagrees with a running holder (hand-edited, or the holder pod's annotation
    /// changed): compare-and-swap it back to name `holder` with its own token. No pod is patched.
    RepairLease {
        /// The running holder the Lease must name.
        holder: Grant,
        /// New `leasehold.dev/token-floor` when the Lease's token annotations were unreadable.
        floor: Option<i64>,
    },
    /// Delete the holder pod: it stayed Pending longer than the start timeout.
    DeletePod {
        /// Pod name.
        name: String,
        /// Pod UID (delete precondition).
        uid: String,
    },
    /// Mark these waiters `Failed` (they gave up: skip policy or max-wait reached).
    RejectWaiters(Vec<Reject>),
    /// Compare-and-swap the Lease's next-holder hint to `Step::next` (crate::lock::machine),
    /// changing nothing else: a claim holds and the head of the queue is not the one the Lease
    /// names as next (a waiter arrived, or the hinted one left).
    SetNext,
    /// Nothing to write. Decide again after `requeue_after` (a timeout may fire) or on the next
    /// watch event.
    Idle {
        /// When a start or node-loss timeout will expire.
        requeue_after: Option<Duration>,
    },
}

/// The decision plus what status shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// What to write next.
    pub decision: Decision,
    /// The current holder according to the Lease, if its pod still holds.
    pub holder: Option<Grant>,
    /// Waiting pods' names in grant order.
    pub waiters: Vec<String>,
}

/// Why a holder is (or is not) still holding.
enum HolderState {
    Free,
    /// Holds; `Some(d)`: a claim that holds by the Lease alone, its status record due in `d`
    /// ([`Settings::claim_record_delay`]).
    Holds(Grant, Option<Duration>),
    NeedsPatch(Grant),
    Record(Grant),
    Withdraw(Grant),
    Expire(Grant, Reject),
    StartTimedOut(Grant),
    Released(Release),
}

/// Decides the next write for one lock from one snapshot.
///
/// # Errors
/// [`TokenExhausted`] when the next token would not fit in an `int64`.
pub fn decide(obs: &Observation<'_>) -> Result<Plan, TokenExhausted> {
    let mut waiters = queue_of(obs.pods);

    // A holder that still runs with a token above this lock's reservation was granted by an
    // earlier lock object with the same name (deleted and recreated; its Lease went with it).
    // It cannot be stopped, so it must not be ignored: reserve above its token first; it is then
    // an ordinary running holder (adopted or repaired into the Lease), nobody else is granted
    // while it runs, and the next token is above its token.
    let stale = obs.pods.iter().filter(|c| !c.gated && !c.is_terminal()).filter_map(|c| c.token).max();
    if let Some(t) = stale.filter(|t| *t > obs.ceiling) {
        return Ok(Plan { decision: reserve(obs.ceiling, t)?, holder: None, waiters: names(&waiters) });
    }

    let Some(lease) = obs.lease else {
        // The Lease is created lazily, when there is someone to grant or to adopt: a new lock
        // (or one whose Lease someone deleted) that nobody waits for and nobody holds costs no
        // write but its status. Taking a lock into service is then one write, not three (the
        // reservation, the Lease and the status: issue 12, a burst of new locks); the first
        // waiter pays for the reservation and the Lease instead.
        if !needs_lease(obs.pods) {
            return Ok(Plan { decision: Decision::Idle { requeue_after: None }, holder: None, waiters: vec![] });
        }
        // The Lease is missing (new lock, or someone deleted it). Tokens issued under the old
        // Lease are unknown here, so start above a ceiling this reconcile raised itself.
        let decision = match obs.fresh_reservation {
            None => reserve(obs.ceiling, obs.ceiling.saturating_add(1))?,
            Some(floor) => {
                let adopt = adoptable_holder(obs.pods, obs.ceiling).or_else(|| recovery_holder(obs.pods, floor));
                if let Some(a) = &adopt {
                    waiters.retain(|w| w.uid != a.uid);
                }
                Decision::CreateLease { holder: adopt, floor }
            }
        };
        return Ok(Plan { decision, holder: None, waiters: names(&waiters) });
    };

    if let Some(decision) = repair(obs, lease)? {
        return Ok(Plan { decision, holder: None, waiters: names(&waiters) });
    }

    let released = match holder_state(obs, lease, &waiters) {
        HolderState::Free => None,
        HolderState::Released(r) => Some(r),
        HolderState::NeedsPatch(g) => {
            return Ok(holding(g.clone(), Decision::PatchHolder(g), waiters));
        }
        HolderState::Record(g) => {
            return Ok(holding(g.clone(), Decision::RecordTentative(g), waiters));
        }
        HolderState::Withdraw(g) => {
            return Ok(holding(g.clone(), Decision::Withdraw(g), waiters));
        }
        HolderState::Expire(g, r) => {
            return Ok(holding(g, Decision::RejectWaiters(vec![r]), waiters));
        }
        HolderState::StartTimedOut(g) => {
            let decision = Decision::DeletePod { name: g.name.clone(), uid: g.uid.clone() };
            return Ok(holding(g, decision, waiters));
        }
        HolderState::Holds(g, record_due) => {
            let rejects = rejections(&waiters, &g, obs.at_capacity);
            let decision = if rejects.is_empty() {
                let timers = min_some(next_timeout(obs), next_wait_expiry(&waiters));
                Decision::Idle { requeue_after: min_some(record_due, timers) }
            } else {
                Decision::RejectWaiters(rejects)
            };
            return Ok(holding(g, decision, waiters));
        }
    };

    if !lease.trusted {
        // Hand-edited Lease: re-floor above a fresh reservation before issuing anything.
        let Some(floor) = obs.fresh_reservation else {
            return Ok(Plan {
                decision: reserve(obs.ceiling, obs.ceiling.saturating_add(1))?,
                holder: None,
                waiters: names(&waiters),
            });
        };
        let next = waiters.first().map(|w| grant(w, fencing::next_token(0, floor))).transpose()?;
        return Ok(Plan {
            decision: Decision::UpdateLease { holder: next, released, floor: Some(floor) },
            holder: None,
            waiters: names(&waiters),
        });
    }

    let decision = match waiters.first() {
        Some(head) => {
            // Above the Lease's token, the recorded high-water mark, and every token a pod or
            // claim in view carries (a lost or stale status write cannot make a token repeat
            // while its holder object exists).
            let seen = obs.pods.iter().filter_map(|c| c.token).max().unwrap_or(0);
            let token = fencing::next_token(lease.token.max(obs.highest_token).max(seen), lease.floor)?;
            if fencing::needs_reservation(token, obs.ceiling) {
                reserve(obs.ceiling, token)?
            } else {
                Decision::UpdateLease { holder: Some(grant(head, Ok(token))?), released, floor: None }
            }
        }
        None if released.is_some() => Decision::UpdateLease { holder: None, released, floor: None },
        None => Decision::Idle { requeue_after: None },
    };
    Ok(Plan { decision, holder: None, waiters: names(&waiters) })
}

/// Whether a lock without a Lease needs one now: someone waits for it, or someone runs with a
/// token (a holder to adopt after the Lease was deleted). Otherwise [`decide`] leaves the Lease
/// missing (it is created at the first grant), and the controller need not look for it.
pub fn needs_lease(candidates: &[Candidate]) -> bool {
    candidates.iter().any(|c| c.is_waiter() || (!c.gated && !c.is_terminal() && c.token.is_some()))
}

/// The candidates that wait ([`Candidate::is_waiter`]), in grant order ([`queue::sort`]).
pub fn queue_of(candidates: &[Candidate]) -> Vec<&Candidate> {
    let mut waiters: Vec<&Candidate> = candidates.iter().filter(|c| c.is_waiter()).collect();
    queue::sort(&mut waiters);
    waiters
}

/// A plan while `holder` keeps the lock: it is never listed among the waiters.
fn holding(holder: Grant, decision: Decision, mut waiters: Vec<&Candidate>) -> Plan {
    waiters.retain(|w| w.uid != holder.uid);
    Plan { decision, waiters: names(&waiters), holder: Some(holder) }
}

/// Checks the Lease against the running holders Kubernetes shows. A pod that runs with a grant of
/// this lock cannot be stopped by the operator, so when the Lease disagrees with it (a hand-edited
/// holder or token, a holder pod whose lock annotation was changed) the Lease is repaired to name
/// the running holder with its own token, and nothing else is granted meanwhile:
/// - the Lease's holder pod runs ungated with a token other than the Lease's: repair to that
///   token (a claim holder's status is patched from the Lease instead);
/// - another pod runs with a grant at least as new as the Lease's holder's (or the Lease names
///   nobody or someone unknown): repair to the newest running grant.
///
/// Only tokens this lock can have issued count (at most its reserved ceiling).
fn repair(obs: &Observation<'_>, lease: &LeaseView) -> Result<Option<Decision>, TokenExhausted> {
    let running = |c: &&Candidate| !c.gated && !c.is_terminal() && c.token.is_some_and(|t| t <= obs.ceiling);
    let best = obs.pods.iter().filter(|c| c.kind == HolderKind::Pod).filter(running).max_by_key(|c| c.token);
    let holder = lease.holder.as_ref().and_then(|h| {
        obs.pods.iter().find(|c| c.identity == h.name && Some(&c.uid) == h.uid.as_ref() && !c.is_terminal())
    });
    let target = match (holder, best) {
        // A pod runs with the token its annotation carries: the Lease follows it. A claim's status
        // is only a record of its grant (its process acts on the Lease's token, `holder`): a
        // status that disagrees is patched from the Lease (`HolderState::NeedsPatch`), never the
        // other way (found by the model checker, run "handover" to depth 14: a stale operator
        // regranted a released claim, and the repair moved the Lease's token back to its status).
        // A hand-edited Lease whose tokens are unreadable is repaired (and re-floored) either way.
        (Some(h), _)
            if !h.gated
                && h.token.is_some()
                && ((h.kind == HolderKind::Pod && h.token != Some(lease.token)) || !lease.trusted) =>
        {
            h
        }
        (Some(h), Some(b)) => {
            let h_token = if h.gated { lease.token } else { h.token.unwrap_or(0) };
            if b.uid == h.uid || b.token.unwrap_or(0) < h_token {
                return Ok(None);
            }
            b
        }
        (None, Some(b)) => b,
        (_, None) => return Ok(None),
    };
    // Never back to an older grant: a pod still running with a token below the (trusted) Lease's
    // was released already (a zombie on a lost node): repairing to it would move the Lease's
    // token down and name a holder that a newer one replaced.
    let is_lease_holder = holder.is_some_and(|h| h.uid == target.uid);
    if lease.trusted && !is_lease_holder && target.token.unwrap_or(0) < lease.token {
        return Ok(None);
    }
    let token = target.token.unwrap_or(lease.token);
    let floor = if lease.trusted {
        None
    } else {
        match obs.fresh_reservation {
            None => return Ok(Some(reserve(obs.ceiling, obs.ceiling.saturating_add(1))?)),
            Some(f) => Some(f),
        }
    };
    Ok(Some(Decision::RepairLease { holder: grant_for(target, token), floor }))
}

fn holder_state(obs: &Observation<'_>, lease: &LeaseView, queue: &[&Candidate]) -> HolderState {
    let has_waiters = !queue.is_empty();
    let Some(h) = &lease.holder else { return HolderState::Free };
    let release = |reason| HolderState::Released(Release { name: h.name.clone(), token: lease.token, reason });
    let found = obs.pods.iter().find(|p| p.identity == h.name && Some(&p.uid) == h.uid.as_ref());
    let expiry = expiry_of(&obs.settings, Some(lease));
    // A claim holder holds while its process renews, whatever happens to the claim object
    // (deleted, or marked Rejected by someone): its process may still run, so the lock is free
    // only once the lease expired, or the holder released it.
    let claim_holder = found.map_or(h.kind == HolderKind::Claim, |c| c.kind == HolderKind::Claim);
    if claim_holder && found.is_none_or(|c| c.is_terminal() || c.deleting) {
        if obs.holder_renewed_ago.is_some_and(|d| d >= expiry) {
            return release(ReleaseReason::Expired);
        }
        let orphan = Grant {
            kind: HolderKind::Claim,
            name: h.name.clone(),
            identity: h.name.clone(),
            uid: h.uid.clone().unwrap_or_default(),
            resource_version: String::new(),
            token: lease.token,
            slot: 0,
        };
        return HolderState::Holds(orphan, None);
    }
    let Some(c) = found else { return release(ReleaseReason::Gone) };
    match c.phase {
        Phase::Succeeded => return release(ReleaseReason::Succeeded),
        Phase::Failed => return release(ReleaseReason::Failed),
        _ => {}
    }
    if c.gated && c.deleting {
        return release(ReleaseReason::DeletedBeforeStart);
    }
    let g = grant_for(c, lease.token);
    // A multi-lock pod named while gated holds tentatively (wound-wait, docs/multi-lock.md):
    // taken back once withdrawn, when an older waiter queues for this lock, or when its set is no
    // longer served (a lock of it deleted or made a semaphore); ungated only once every lock of
    // its set is recorded on the pod.
    if let (Some(m), true) = (&c.multi, c.gated) {
        if lease.token <= m.withdrawn {
            return release(ReleaseReason::Withdrawn);
        }
        // A claim's process renews the Leases that name it while it waits for the rest of its
        // set: one that stopped (it crashed, or gave up) is rejected as a whole first (a
        // compare-and-swap on the claim, so it can no longer be granted the set), and only then,
        // with the claim terminal, does the Lease move on (the claim-holder expiry above).
        if c.kind == HolderKind::Claim && obs.holder_renewed_ago.is_some_and(|d| d >= expiry) {
            return HolderState::Expire(
                g,
                Reject {
                    name: c.name.clone(),
                    uid: c.uid.clone(),
                    resource_version: c.resource_version.clone(),
                    reason: RejectReason::LeaseExpired,
                },
            );
        }
        if m.unservable || queue.first().is_some_and(|head| head.uid != c.uid) {
            return HolderState::Withdraw(g);
        }
        if m.others_recorded {
            return HolderState::NeedsPatch(g);
        }
        if c.token != Some(lease.token) {
            return HolderState::Record(g);
        }
        return HolderState::Holds(g, None);
    }
    if c.kind == HolderKind::Claim && !c.gated && obs.holder_renewed_ago.is_some_and(|d| d >= expiry) {
        return release(ReleaseReason::Expired);
    }
    if c.gated || c.token != Some(lease.token) {
        // A claim's process acts on the Lease: its status record may wait, and a claim released
        // before it is due costs no write (issue 12). A stale record (a token other than the
        // Lease's) is patched at once.
        let delay = obs.settings.claim_record_delay;
        if let Some(named_for) = obs.holder_named_for.filter(|d| c.kind == HolderKind::Claim && c.gated && *d < delay) {
            return HolderState::Holds(g, Some(delay - named_for));
        }
        return HolderState::NeedsPatch(g);
    }
    // Taking the lock from a holder on a lost node only helps a waiter; without one, the Lease
    // keeps naming it (it may still run: a partitioned node).
    if has_waiters && obs.holder_node_lost_for.is_some_and(|d| d >= obs.settings.node_loss_timeout) {
        return release(ReleaseReason::NodeLost);
    }
    if c.kind == HolderKind::Pod
        && c.phase == Phase::Pending
        && !c.deleting
        && obs.holder_pending_for.is_some_and(|d| d >= obs.settings.start_timeout)
    {
        return HolderState::StartTimedOut(g);
    }
    HolderState::Holds(g, None)
}

/// Waiters that give up while `holder` holds: skip policy (only when the lock is `at_capacity`),
/// or max-wait reached.
pub(crate) fn rejections(waiters: &[&Candidate], holder: &Grant, at_capacity: bool) -> Vec<Reject> {
    waiters
        .iter()
        .filter(|w| w.uid != holder.uid)
        .filter_map(|w| {
            let reason = if w.on_busy == BusyPolicy::Skip && at_capacity {
                RejectReason::LockBusy
            } else if w.max_wait.zip(w.waiting_for).is_some_and(|(max, waited)| waited >= max) {
                RejectReason::LockWaitTimeout
            } else {
                return None;
            };
            Some(Reject {
                name: w.name.clone(),
                uid: w.uid.clone(),
                resource_version: w.resource_version.clone(),
                reason,
            })
        })
        .collect()
}

/// When the first waiter's max-wait runs out.
pub(crate) fn next_wait_expiry(waiters: &[&Candidate]) -> Option<Duration> {
    waiters.iter().filter_map(|w| w.max_wait.zip(w.waiting_for).map(|(max, waited)| max.saturating_sub(waited))).min()
}

pub(crate) fn min_some(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// When the earliest running timeout (start or node loss) of the current holder expires.
fn next_timeout(obs: &Observation<'_>) -> Option<Duration> {
    let start = obs.holder_pending_for.map(|d| obs.settings.start_timeout.saturating_sub(d));
    let renew = obs.holder_renewed_ago.map(|d| expiry_of(&obs.settings, obs.lease).saturating_sub(d));
    let node = obs.holder_node_lost_for.map(|d| obs.settings.node_loss_timeout.saturating_sub(d));
    min_some(min_some(start, node), renew)
}

/// After a Lease was deleted: the holder with the highest token keeps holding, named again by
/// the recreated Lease with its token. A holder is a candidate that is not terminal and carries a
/// token of this lock (within `ceiling`) that may be acted on: it is ungated (granted; scheduled
/// or not: an ungated pod runs once it is scheduled), or it is a multi-lock candidate's tentative
/// grant (gated, its token above the one taken back from it): the deleted Lease named it, and an
/// operator whose cache shows the candidate's last lock recorded may ungate it. Found by the chaos
/// run of 2026-12-06 (a multi-lock pod running on lock l1 while the recreated Lease granted l1 to
/// another pod) and by the multi-lock model checker (`tests/multilock.rs`, run "lease-deleted").
fn adoptable_holder(pods: &[Candidate], ceiling: i64) -> Option<Grant> {
    let tentative =
        |p: &Candidate| p.gated && p.multi.as_ref().is_some_and(|m| p.token.is_some_and(|t| t > m.withdrawn));
    pods.iter()
        .filter(|p| !p.is_terminal() && (!p.gated || tentative(p)))
        .filter(|p| p.token.is_some_and(|t| t <= ceiling))
        .filter_map(|p| p.token.map(|t| grant_for(p, t)))
        .max_by_key(|g| g.token)
}

/// The Lease `holderIdentity` of a recreated Lease that names no process: see
/// [`recovery_holder`]. Never a claim's identity in effect: its holder UID is empty, which no
/// object has, so no candidate matches it and no process renews it.
pub const RECOVERY_HOLDER: &str = "leasehold.dev/recovering";

/// When the Lease of a lock that has granted before (`floor`, the reservation it is recreated
/// above, is not 0) is recreated with no running holder to adopt, while a claim that asks for
/// this one lock still shows as waiting: that claim (or another whose status is not written
/// yet) may have been granted by the deleted Lease, and its process may act on that grant
/// (`holder::Holder` learns its grant from the Lease; the status record comes later,
/// [`Settings::claim_record_delay`]). Nobody can tell which, so the new Lease is held for one
/// lease duration by [`RECOVERY_HOLDER`], a claim holder nobody renews: it expires like any
/// claim holder that stopped renewing (`ReleaseReason::Expired`), by which time a process that
/// held under the deleted Lease has given up (its renewals of the recreated Lease fail, and it
/// stops `renewDeadline` < `leaseDurationSeconds` after its last successful one). Its token is
/// `floor`, so the next grant is above it. Found by the model checker (`tests/model.rs`, run
/// "unseen-old-pod"): a claim granted, its Lease deleted before its status recorded the grant,
/// and an older waiter granted beside it by the recreated Lease.
fn recovery_holder(candidates: &[Candidate], floor: i64) -> Option<Grant> {
    let unrecorded_claim = candidates
        .iter()
        .any(|c| c.kind == HolderKind::Claim && c.gated && c.multi.is_none() && !c.deleting && !c.is_terminal());
    (floor > 0 && unrecorded_claim).then(|| Grant {
        kind: HolderKind::Claim,
        name: RECOVERY_HOLDER.to_string(),
        identity: RECOVERY_HOLDER.to_string(),
        uid: String::new(),
        resource_version: String::new(),
        token: floor,
        slot: 0,
    })
}

fn reserve(ceiling: i64, token: i64) -> Result<Decision, TokenExhausted> {
    Ok(Decision::Reserve { from: ceiling, to: fencing::reserve(ceiling, token)? })
}

fn grant(c: &Candidate, token: Result<i64, TokenExhausted>) -> Result<Grant, TokenExhausted> {
    Ok(grant_for(c, token?))
}

fn grant_for(c: &Candidate, token: i64) -> Grant {
    Grant {
        kind: c.kind,
        name: c.name.clone(),
        identity: c.identity.clone(),
        uid: c.uid.clone(),
        resource_version: c.resource_version.clone(),
        token,
        slot: 0,
    }
}

fn names(waiters: &[&Candidate]) -> Vec<String> {
    waiters.iter().map(|w| w.name.clone()).collect()
}

#[cfg(test)]
mod tests;
