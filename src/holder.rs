//! Holder side of a lock, as a library: claim a lock, wait for the grant (watch, not polling),
//! renew it, learn when it is lost, release it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use leasehold::holder::Holder;
//! // kube's client stack with TCP_NODELAY (`leasehold::client`): ~40 ms less per handover.
//! let client = leasehold::client::try_default().await?;
//! let holder = Holder::new(client, "default", "nightly-report", "report-runner-1");
//! let guard = holder.acquire(Some(std::time::Duration::from_secs(60))).await?;
//! let token = guard.token(); // send this with every write to the protected resource
//! tokio::select! {
//!     reason = guard.lost() => eprintln!("lost the lock ({reason}): stop writing now"),
//!     _ = async { /* the work, writing with `token` */ } => {}
//! }
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! How it works: [`Holder::acquire`] creates a `DistributedLockClaim` (it joins the same FIFO
//! queue as gated pods) and watches the lock's Leases and the claim until the operator's grant
//! names the claim in a Lease (with the fencing token) or writes it into the claim's status,
//! whichever it sees first (the Lease is written first). From then on the holder must **renew**: every `renew_period` (after a failure:
//! every `retry_period`) it sets the Lease's `renewTime` if the Lease still names it: one JSON
//! Patch whose `test` operations check the holder (no resourceVersion, so writes by others that
//! leave the holder alone do not refuse it; [`renew`]). The operator takes the lock back when it
//! has not seen a renewal for `leaseDurationSeconds` on its own monotonic clock.
//!
//! Timings follow client-go's leader election (`leaseDuration` 15 s, `renewDeadline` 10 s,
//! `retryPeriod` 2 s, k8s.io/client-go/tools/leaderelection): by default they scale with the
//! lock's `leaseDurationSeconds` in the same ratios (deadline 2/3, retry 2/15 of it). Unlike
//! client-go, a holder whose renewals succeed renews every third of the lease (5 s for 15 s),
//! not every retry period: one write per 5 s per held lock instead of one per 2 s. If a holder
//! cannot renew within `renew_deadline` (measured on its own monotonic clock from the start of
//! its last successful renewal) it considers the lock lost *before* the operator can hand it to
//! anyone else: the operator only expires the lease a full `leaseDurationSeconds` after it saw
//! that renewal, which is later still.
//!
//! **Guarantees.** With a live, well-behaved holder the lock is exclusive (efficiency grade).
//! A holder that is paused (GC, SIGSTOP, a partition) can resume after the lease expired and act
//! before it notices; only the fencing token ([`LockGuard::token`]), checked by the resource it
//! writes to, makes such late writes harmless (correctness grade).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use crate::crd::{ClaimPhase, DistributedLock, DistributedLockClaim, DistributedLockClaimSpec, OnBusy};
use crate::lock::grant::{
    HolderKind, LeaseArrival, LeaseView, Next, WAITER_ARRIVES_AFTER, WAITER_TAKE_GRACE, lease_arrival, request_uid,
    split_request_uid,
};
use crate::lock::{
    HOLDER_KIND_ANNOTATION, HOLDER_UID_ANNOTATION, NEXT_HOLDER_ANNOTATION, NEXT_HOLDER_UID_ANNOTATION,
    NEXT_TOKEN_ANNOTATION, TOKEN_ANNOTATION,
};

/// Why a holder call failed.
#[derive(Debug, thiserror::Error)]
pub enum HolderError {
    /// A Kubernetes API call failed.
    #[error("{op} failed: {source}")]
    Kube {
        /// What was being done.
        op: &'static str,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The lock does not exist in the namespace.
    #[error("DistributedLock {namespace}/{lock} does not exist")]
    LockNotFound {
        /// Namespace.
        namespace: String,
        /// Lock name.
        lock: String,
    },
    /// The lock was busy and the caller asked not to wait.
    #[error("lock {0} is held by someone else")]
    Busy(String),
    /// The wait for the grant timed out.
    #[error("timed out after {0:?} waiting for lock {1}")]
    WaitTimeout(Duration, String),
    /// The operator rejected the claim (reason from its status).
    #[error("claim rejected: {0}")]
    Rejected(String),
    /// The claim was granted, but the operator took the grant back before this holder saw it
    /// (message from its status): the lock is someone else's now.
    #[error("grant expired: {0}")]
    Expired(String),
    /// The timings are inconsistent (must be lease > renew deadline > retry period > 0).
    #[error("invalid timings: {0}")]
    InvalidTimings(String),
    /// The lock was lost before the call (release by a holder that no longer holds).
    #[error("not the holder of lock {0} (anymore)")]
    NotHolder(String),
    /// The first renewal, which proves a grant before the caller may act on it, did not finish
    /// within the renew deadline (seconds as a [`Duration`]).
    #[error("the first renewal did not finish within the renew deadline of {0:?}")]
    FirstRenewalTimeout(Duration),
    /// A lock set ([`crate::holder_set::SetHolder`]) that is not 2 to 8 distinct locks.
    #[error("invalid lock set: {0}")]
    InvalidSet(String),
    /// The claim was deleted (by someone else) while it waited: it can never be granted.
    #[error("claim {0} was deleted while it waited for the lock")]
    ClaimDeleted(String),
}

/// Whether the API server answered 403 Forbidden (RBAC or an admission policy said no).
fn is_forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403)
}

fn kube_err(op: &'static str) -> impl FnOnce(kube::Error) -> HolderError {
    move |source| HolderError::Kube { op, source }
}

/// Renewal timings. `None` fields derive from the lock's `leaseDurationSeconds`: renew
/// deadline 2/3 and retry period 2/15 of it (client-go's ratios), renew period 1/3 of it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    /// Give up (lock lost) when no renewal succeeded for this long.
    pub renew_deadline: Option<Duration>,
    /// Time before the next try after a renewal that failed (an API error or a timeout).
    pub retry_period: Option<Duration>,
    /// Time between renewals while they succeed (default 1/3 of the lease duration: 5 s for
    /// 15 s, one write per 5 s per held lock; never shorter than the retry period). Client-go
    /// renews every retry period (2 s); a renewal that fails is retried after the retry period,
    /// so up to the deadline a lock gets as many tries as it would there, less two.
    pub renew_period: Option<Duration>,
}

/// Resolved [`Timings`] of one grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// The lease duration they were resolved against.
    pub(crate) lease_duration: Duration,
    pub(crate) renew_deadline: Duration,
    pub(crate) retry_period: Duration,
    pub(crate) renew_period: Duration,
}

/// Why a held lock was lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// No renewal succeeded within the renew deadline.
    RenewDeadlineExceeded(Duration),
    /// The Lease names another holder (or nobody), or it is gone (NotFound, as when its
    /// namespace is deleted): the lock was taken back.
    Taken,
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LostReason::RenewDeadlineExceeded(d) => write!(f, "could not renew within the renew deadline of {d:?}"),
            LostReason::Taken => write!(f, "the Lease no longer names this holder, or it is gone"),
        }
    }
}

/// A would-be holder of one lock under one identity.
///
/// For a single-holder lock (no `spec.maxHolders`) it keeps one **standing claim** across
/// [`Holder::acquire`] / [`LockGuard::release`] cycles, shared by its clones (issue 12,
/// `docs/two-writes-per-grant.md`): the first acquire creates it with `spec.request: 1`, each
/// later one is a single write: a waiting acquire arrives by the lock's Lease when the operator's
/// token ceiling there allows it (one compare-and-swap that names its request as the next-holder
/// hint, or takes the free Lease: [`lease_arrival`]; `spec.request` is not raised, the holder
/// counts its requests itself), otherwise it is a merge patch that raises `spec.request`; a
/// release is the Lease write alone (no claim DELETE). [`Holder::close`] deletes it. A semaphore, a lock set
/// ([`crate::holder_set`]), a holder made with [`Holder::one_shot`], or an acquire of a clone
/// while the standing claim is in use (or asks with another [`OnBusy`]) uses a one-shot claim
/// per acquire, deleted by its release.
#[derive(Clone)]
pub struct Holder {
    client: Client,
    namespace: String,
    lock: String,
    identity: String,
    timings: Timings,
    owner: Option<OwnerReference>,
    /// One-shot claims only ([`Holder::one_shot`]).
    one_shot: bool,
    /// The standing claim, shared by the clones.
    standing: SharedStanding,
}

/// The standing claim of a [`Holder`] and its clones ([`Holder::enqueue`]).
#[derive(Debug, Default)]
struct StandingState {
    /// The claim, once created; `None` before the first acquire, after [`Holder::close`], a
    /// [`Ticket::cancel`], a lost first renewal, or a patch that found it deleted.
    claim: Option<Standing>,
    /// A [`Ticket`] or [`LockGuard`] of the standing claim is outstanding: an acquire of a clone
    /// meanwhile uses a one-shot claim (a second request would end the first).
    in_use: bool,
    /// The API server refused the request patch (403: a holder role from before standing
    /// claims), or did not store `spec.request` (an older CRD): every later acquire uses
    /// one-shot claims.
    refused: bool,
    /// The API server refused an arrival by the Lease (403: a Lease admission policy from before
    /// it): every later request arrives by the claim.
    lease_refused: bool,
    /// Where the claim lives, for the delete when the last clone is dropped.
    api: Option<Api<DistributedLockClaim>>,
}

impl Drop for StandingState {
    /// The last clone of the [`Holder`] (and its last [`Ticket`] or [`LockGuard`]) is gone: the
    /// standing claim is deleted in the background (UID precondition), as [`Holder::close`]
    /// would, when a Tokio runtime is there; otherwise it stays (as after a crash) until someone
    /// deletes it or its owner pod is garbage-collected. Its released request is listed in the
    /// Lease, so the operator does not grant it meanwhile.
    fn drop(&mut self) {
        let (Some(c), Some(api)) = (self.claim.take(), self.api.take()) else { return };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { delete_claim(&api, &c.name, &c.uid).await });
        }
    }
}

/// What a holder knows of its standing claim.
#[derive(Clone, Debug)]
struct Standing {
    /// `metadata.name` (generated, `<lock>-<suffix>`).
    name: String,
    /// `metadata.uid`.
    uid: String,
    /// The last request made (>= 1), by the claim or by the Lease (issue 12: an arrival by the
    /// Lease does not raise `spec.request`, so the library counts its requests itself).
    request: i64,
    /// `spec.request` as last seen (its create, or the last patch that raised it).
    spec_request: i64,
    /// The claim's resourceVersion as the last write of it returned it: the wait of a request
    /// that arrived by the Lease watches the claim from there.
    claim_rv: String,
    /// `spec.onBusy`, immutable: an acquire with another policy uses a one-shot claim.
    on_busy: OnBusy,
}

/// The next request of a standing claim: one above both the library's own count of its requests
/// (`local`: the last one made, by the claim or by the Lease) and the claim's `spec.request` as
/// last seen (`spec`; CEL lets it only grow). An arrival by the Lease raises only `local`.
fn next_request(local: i64, spec: i64) -> i64 {
    local.max(spec).saturating_add(1)
}

/// Whether a request that arrived by the Lease as its next-holder hint (issue 12) has been
/// displaced: `lease` (a later version of the Lease) names request UID `uid` neither as its
/// next holder nor as its holder (the operator hinted an older waiter instead, a release freed
/// the Lease without handing it over, or the Lease was recreated). The request then exists only
/// in this process, and must arrive by its claim (`spec.request`) to be served at all.
fn displaced(lease: &LeaseView, uid: &str) -> bool {
    let next = lease.next.as_ref().is_some_and(|n| n.uid == uid);
    let holder = lease.holder.as_ref().is_some_and(|h| h.uid.as_deref() == Some(uid));
    !(next || holder)
}

/// A standing claim's request that arrived by its lock's Lease (issue 12,
/// [`lease_arrival`]) instead of by `spec.request`.
#[derive(Clone, Debug)]
enum LeaseArrived {
    /// It named itself as the next-holder hint at `time` (wall clock: the `spec.requestTime`
    /// of a re-arrival by the claim, should it be displaced); the write returned Lease version
    /// `rv`, from which the wait watches the Lease.
    Hint { time: Timestamp, rv: String },
    /// It took the free Lease: the Lease as that write returned it (the grant).
    Took(Box<Lease>),
}

type SharedStanding = Arc<Mutex<StandingState>>;

fn lock_state(s: &SharedStanding) -> std::sync::MutexGuard<'_, StandingState> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// A standing claim's request as a [`Ticket`] or [`LockGuard`] holds it: the claim object's UID
/// (for a delete's precondition) and the holder's shared state (marked not in use when done).
#[derive(Clone)]
pub(crate) struct StandingRef {
    object_uid: String,
    shared: SharedStanding,
}

impl StandingRef {
    /// The request UID of the claim's `spec.request` as last seen, when later requests arrived by
    /// the Lease (the claim object shows an older request than the one made): its entry in the
    /// Lease's released list is kept ([`released_after`]).
    fn spec_request_uid(&self) -> Option<String> {
        let st = lock_state(&self.shared);
        let c = st.claim.as_ref().filter(|c| c.uid == self.object_uid && c.spec_request < c.request)?;
        Some(request_uid(&c.uid, c.spec_request))
    }

    /// The request is over (released, lost, or it failed): the next acquire may raise it.
    fn done(&self) {
        lock_state(&self.shared).in_use = false;
    }

    /// The claim is deleted (or about to be): the next acquire creates a new one.
    fn forget(&self) {
        let mut st = lock_state(&self.shared);
        st.in_use = false;
        if st.claim.as_ref().is_some_and(|c| c.uid == self.object_uid) {
            st.claim = None;
        }
    }
}

impl Holder {
    /// A holder of `lock` in `namespace` under `identity` (the Lease's `holderIdentity`).
    pub fn new(client: Client, namespace: &str, lock: &str, identity: &str) -> Self {
        Holder {
            client,
            namespace: namespace.into(),
            lock: lock.into(),
            identity: identity.into(),
            timings: Timings::default(),
            owner: None,
            one_shot: false,
            standing: SharedStanding::default(),
        }
    }

    /// Makes every acquire use a one-shot claim (created by the acquire, deleted by the release),
    /// as before standing claims: for a process that acquires once (`leasehold lock`), where a
    /// standing claim would cost the same writes plus a [`Holder::close`].
    pub fn one_shot(mut self) -> Self {
        self.one_shot = true;
        self
    }

    /// Deletes this holder's standing claim (shared with its clones; UID precondition), if it
    /// has one, and forgets it: the next acquire creates a new one. Best effort: a failure is
    /// logged (debug), and the claim then stays. Without `close()` the standing claim is deleted
    /// in the background when the last clone (and its last ticket or guard) is dropped inside a
    /// Tokio runtime; a process that exits first (or crashes) leaves it until someone deletes it
    /// or, with [`Holder::owned_by_pod`], its owner pod is garbage-collected; a released request
    /// is listed in the Lease's `leasehold.dev/released`, so the operator never grants it
    /// meanwhile. Call `close()` before a process exits. A lock still held through a [`LockGuard`]
    /// stays held until its release (the operator keeps a holder whose claim is gone).
    pub async fn close(&self) {
        let claim = lock_state(&self.standing).claim.take();
        if let Some(c) = claim {
            let claims: Api<DistributedLockClaim> = Api::namespaced(self.client.clone(), &self.namespace);
            delete_claim(&claims, &c.name, &c.uid).await;
        }
    }

    /// Overrides the renewal timings.
    pub fn with_timings(mut self, timings: Timings) -> Self {
        self.timings = timings;
        self
    }

    /// Makes the claim owned by a pod (name, uid), so it is garbage-collected with the pod.
    pub fn owned_by_pod(mut self, name: &str, uid: &str) -> Self {
        self.owner = Some(OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: name.into(),
            uid: uid.into(),
            ..OwnerReference::default()
        });
        self
    }

    /// Waits (FIFO, with gated pods) until the lock is granted; `wait_timeout` bounds the wait.
    ///
    /// # Errors
    /// [`HolderError::WaitTimeout`], [`HolderError::LockNotFound`], [`HolderError::Rejected`],
    /// [`HolderError::InvalidTimings`], [`HolderError::Kube`].
    pub async fn acquire(&self, wait_timeout: Option<Duration>) -> Result<LockGuard, HolderError> {
        self.claim(OnBusy::Wait, wait_timeout).await
    }

    /// Takes the lock only if it can be granted at once: `Ok(None)` when it is busy.
    ///
    /// # Errors
    /// As [`Holder::acquire`].
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>, HolderError> {
        match self.claim(OnBusy::Skip, None).await {
            Ok(g) => Ok(Some(g)),
            Err(HolderError::Busy(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn claim(&self, on_busy: OnBusy, wait_timeout: Option<Duration>) -> Result<LockGuard, HolderError> {
        let ticket = self.enqueue(on_busy).await?;
        let result = ticket.wait(wait_timeout).await;
        if result.is_err() {
            ticket.cancel().await;
        }
        result
    }

    /// Reads the lock and resolves this holder's timings against its lease, without joining the
    /// queue: `(leaseDurationSeconds, renew deadline)`. For callers that must refuse a setting
    /// before they claim anything (`leasehold lock --kill-grace`): a claim cancelled at once can
    /// race its own grant, and a grant whose claim is gone holds until its lease expires.
    ///
    /// # Errors
    /// [`HolderError::LockNotFound`], [`HolderError::InvalidTimings`], [`HolderError::Kube`].
    pub async fn lease_timings(&self) -> Result<(Duration, Duration), HolderError> {
        let (lease_duration, timings, _) = self.read_timings().await?;
        Ok((lease_duration, timings.renew_deadline))
    }

    /// Reads the lock: its lease duration, this holder's timings resolved against it, and
    /// whether it is a single-holder lock (no `spec.maxHolders`).
    async fn read_timings(&self) -> Result<(Duration, Resolved, bool), HolderError> {
        let locks: Api<DistributedLock> = Api::namespaced(self.client.clone(), &self.namespace);
        let lock =
            locks.get_opt(&self.lock).await.map_err(kube_err("get DistributedLock"))?.ok_or_else(|| {
                HolderError::LockNotFound { namespace: self.namespace.clone(), lock: self.lock.clone() }
            })?;
        let lease_duration = Duration::from_secs(lock.spec.lease_duration_seconds.max(1) as u64);
        Ok((lease_duration, resolve_timings(lease_duration, self.timings)?, lock.spec.max_holders.is_none()))
    }

    /// Joins the queue without waiting and returns a [`Ticket`] to wait on or to cancel (for
    /// callers that must react to signals while waiting). For a single-holder lock: the next
    /// request r of the standing claim (the first acquire creates it with `spec.request: 1` and
    /// `spec.requestTime` now; a later one, r one above both the holder's own count and
    /// `spec.request`, arrives by the lock's Lease when `on_busy` is [`OnBusy::Wait`] and
    /// [`lease_arrival`] allows it: one compare-and-swap that names it as the next-holder hint
    /// (its wait re-arrives by the claim, `spec.request = r` with `spec.requestTime` the Lease
    /// arrival's, should a later version of the Lease name it neither as hint nor as holder) or
    /// takes the free Lease (the ticket is granted already); otherwise, or when that write fails,
    /// one merge patch `spec.request = r`, `requestTime` now; a claim found deleted, 404, is
    /// created anew); otherwise (see [`Holder`]) a new one-shot claim.
    ///
    /// # Errors
    /// [`HolderError::LockNotFound`], [`HolderError::InvalidTimings`], [`HolderError::Kube`].
    pub async fn enqueue(&self, on_busy: OnBusy) -> Result<Ticket, HolderError> {
        let (lease_duration, timings, single) = self.read_timings().await?;
        let claims: Api<DistributedLockClaim> = Api::namespaced(self.client.clone(), &self.namespace);
        if single
            && !self.one_shot
            && let Some(t) = self.enqueue_standing(&claims, on_busy, lease_duration, timings).await?
        {
            return Ok(t);
        }
        let claim = self.new_claim(on_busy, None);
        // Taken before the create is sent: no operator can grant the claim, nor start its expiry
        // clock for the grant, before the claim exists.
        let queued = Instant::now();
        let claim = claims.create(&PostParams::default(), &claim).await.map_err(kube_err("create claim"))?;
        Ok(self.one_shot_ticket(&claims, &claim, (lease_duration, timings), queued))
    }

    /// A new claim of this holder for its lock (`generateName` `<lock>-`, owned by its pod if
    /// [`Holder::owned_by_pod`]): one-shot with `request` `None`; a standing claim's first request
    /// with `Some(1)` (and `spec.requestTime` now).
    fn new_claim(&self, on_busy: OnBusy, request: Option<i64>) -> DistributedLockClaim {
        DistributedLockClaim {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}-", self.lock)),
                owner_references: self.owner.clone().map(|o| vec![o]),
                ..ObjectMeta::default()
            },
            spec: DistributedLockClaimSpec {
                lock: self.lock.clone(),
                identity: self.identity.clone(),
                on_busy,
                max_wait_seconds: None,
                locks: None,
                request,
                request_time: request.map(|_| MicroTime(Timestamp::now())),
            },
            status: None,
        }
    }

    /// The [`Ticket`] of one-shot claim `claim` as its create returned it, sent at `queued`.
    fn one_shot_ticket(
        &self,
        claims: &Api<DistributedLockClaim>,
        claim: &DistributedLockClaim,
        (lease_duration, timings): (Duration, Resolved),
        queued: Instant,
    ) -> Ticket {
        Ticket {
            holder: self.clone(),
            claims: claims.clone(),
            claim_name: claim.name_any(),
            claim_uid: claim.uid().unwrap_or_default(),
            claim_rv: claim.resource_version().unwrap_or_default(),
            request: None,
            standing: None,
            arrived: None,
            may_hint: false,
            hinted: OwnHint::default(),
            lease_duration,
            timings,
            queued,
        }
    }

    /// The next request of the standing claim as a [`Ticket`]; `Ok(None)` when this acquire
    /// must use a one-shot claim instead (the standing claim is in use by a clone, asks with
    /// another `on_busy`, or the holder role may not patch claims).
    async fn enqueue_standing(
        &self,
        claims: &Api<DistributedLockClaim>,
        on_busy: OnBusy,
        lease_duration: Duration,
        timings: Resolved,
    ) -> Result<Option<Ticket>, HolderError> {
        let existing = {
            let mut st = lock_state(&self.standing);
            if st.refused || st.in_use || st.claim.as_ref().is_some_and(|c| c.on_busy != on_busy) {
                return Ok(None);
            }
            st.in_use = true;
            st.claim.clone()
        };
        let done = |st: Option<Standing>| {
            let mut state = lock_state(&self.standing);
            state.in_use = false;
            state.claim = st;
        };
        let raised = match existing {
            Some(c) => {
                let request = next_request(c.request, c.spec_request);
                // A plain waiter (issue 12) arrives by the Lease when it can: one write, and the
                // operator writes nothing for it.
                // A Lease write that failed without a conflict may have landed, its answer lost: a
                // grant it took would then be the Lease's since before the write was sent, so the
                // request's time (its renew deadline) counts from then, not from the patch below.
                let mut sent = None;
                if on_busy == OnBusy::Wait
                    && !lock_state(&self.standing).lease_refused
                    && let Some((arrived, queued)) = match self.arrive_by_lease(&c.uid, request).await {
                        Ok(a) => Some(a),
                        Err(maybe_landed) => {
                            sent = maybe_landed;
                            None
                        }
                    }
                {
                    if let Some(s) = lock_state(&self.standing).claim.as_mut().filter(|s| s.uid == c.uid) {
                        s.request = request;
                    }
                    return Ok(Some(Ticket {
                        holder: self.clone(),
                        claims: claims.clone(),
                        claim_name: c.name.clone(),
                        claim_uid: c.uid.clone(),
                        claim_rv: c.claim_rv.clone(),
                        request: Some(request),
                        standing: Some(StandingRef { object_uid: c.uid.clone(), shared: self.standing.clone() }),
                        arrived: Some(arrived),
                        may_hint: on_busy == OnBusy::Wait,
                        hinted: OwnHint::default(),
                        lease_duration,
                        timings,
                        queued,
                    }));
                }
                // Taken before the patch is sent: no operator can grant the request, nor start
                // its expiry clock, before the patch lands (or before the Lease write above, if
                // that may have landed).
                let queued = sent.unwrap_or_else(Instant::now);
                let body = serde_json::json!({
                    "metadata": { "uid": c.uid },
                    "spec": { "request": request, "requestTime": MicroTime(Timestamp::now()) },
                });
                match claims.patch(&c.name, &PatchParams::default(), &Patch::Merge(&body)).await {
                    Ok(claim) => Some((claim, queued)),
                    // Deleted (404), or replaced by another claim of that name (409, the UID
                    // precondition): a new standing claim.
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => None,
                    Err(kube::Error::Api(s)) if s.code == 403 => {
                        tracing::debug!(message = %s.message, "may not patch claims: one-shot claims from now on");
                        delete_claim(claims, &c.name, &c.uid).await;
                        done(None);
                        lock_state(&self.standing).refused = true;
                        return Ok(None);
                    }
                    Err(e) => {
                        // The request may or may not have been raised: a request whose time is
                        // unknown cannot be held safely (its renew deadline would start late).
                        // Start over with a new claim next time.
                        delete_claim(claims, &c.name, &c.uid).await;
                        done(None);
                        return Err(HolderError::Kube { op: "raise the standing claim's request", source: e });
                    }
                }
            }
            None => None,
        };
        let (claim, queued) = match raised {
            Some(r) => r,
            None => {
                let claim = self.new_claim(on_busy, Some(1));
                let queued = Instant::now();
                match claims.create(&PostParams::default(), &claim).await {
                    Ok(c) => (c, queued),
                    Err(e) => {
                        done(None);
                        return Err(HolderError::Kube { op: "create claim", source: e });
                    }
                }
            }
        };
        let Some(request) = claim.spec.request else {
            // The API server dropped `spec.request`: a CRD from before standing claims (the
            // operator and the CRD are upgraded before holders). The claim is a one-shot claim,
            // granted under its bare UID; so are all later ones of this holder.
            tracing::debug!(claim = %claim.name_any(), "spec.request not stored: one-shot claims from now on");
            {
                let mut st = lock_state(&self.standing);
                (st.in_use, st.refused, st.claim) = (false, true, None);
            }
            return Ok(Some(self.one_shot_ticket(claims, &claim, (lease_duration, timings), queued)));
        };
        let standing = Standing {
            name: claim.name_any(),
            uid: claim.uid().unwrap_or_default(),
            request,
            spec_request: request,
            claim_rv: claim.resource_version().unwrap_or_default(),
            on_busy,
        };
        {
            let mut st = lock_state(&self.standing);
            st.claim = Some(standing.clone());
            st.api = Some(claims.clone());
        }
        Ok(Some(Ticket {
            holder: self.clone(),
            claims: claims.clone(),
            claim_name: standing.name.clone(),
            claim_uid: standing.uid.clone(),
            claim_rv: claim.resource_version().unwrap_or_default(),
            request: Some(standing.request),
            standing: Some(StandingRef { object_uid: standing.uid, shared: self.standing.clone() }),
            arrived: None,
            may_hint: on_busy == OnBusy::Wait,
            hinted: OwnHint::default(),
            lease_duration,
            timings,
            queued,
        }))
    }

    /// The arrival of request `request` of standing claim `object_uid` by the lock's Lease
    /// (issue 12, `docs/two-writes-per-grant.md`, "The arrival writes the hint"): reads the Lease
    /// and, when [`lease_arrival`] allows it, one compare-and-swap PUT (the resourceVersion read)
    /// that names the request as the next-holder hint (the holder's release hands over to it) or,
    /// on a free Lease, takes it (the grant, written by the waiter). Returns how it arrived and
    /// when the write was sent (this process's monotonic clock).
    ///
    /// # Errors
    /// It must arrive by its claim instead: `Err(None)` when no such arrival is allowed, the
    /// Lease is missing, the read failed or the write was refused (an API status such as 409 or
    /// 403: it did not land); `Err(Some(sent))` when the write failed otherwise (a timeout, a
    /// lost connection) and so may have landed: a grant it took then counts from `sent`.
    async fn arrive_by_lease(
        &self,
        object_uid: &str,
        request: i64,
    ) -> Result<(LeaseArrived, Instant), Option<Instant>> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut lease = match leases.get_opt(&self.lock).await {
            Ok(l) => l.ok_or(None)?,
            Err(e) => {
                tracing::debug!(error = %e, "reading the Lease for an arrival failed: arriving by the claim");
                return Err(None);
            }
        };
        let uid = request_uid(object_uid, request);
        let view = crate::lease::view(&lease);
        let Some(arrival) = lease_arrival(&view, &self.identity, &uid) else {
            tracing::debug!(
                lock = %self.lock,
                identity = %self.identity,
                holder = ?view.holder.as_ref().map(|h| (h.kind, h.uid.as_deref() == Some(uid.as_str()))),
                hint = view.next.is_some(),
                token = view.token,
                ceiling = ?view.ceiling,
                trusted = view.trusted,
                "no arrival by the Lease allowed: arriving by the claim"
            );
            return Err(None);
        };
        let time = Timestamp::now();
        arrive(&mut lease, &arrival, &self.identity, &uid, time);
        // Taken before the write is sent: nothing can grant the request (nor start an expiry
        // clock for it) before the write lands.
        let queued = Instant::now();
        match leases.replace(&self.lock, &PostParams::default(), &lease).await {
            Ok(written) => {
                tracing::trace!(lock = %self.lock, identity = %self.identity, ?arrival, "arrived by the Lease");
                let arrived = match arrival {
                    LeaseArrival::Hint(_) => {
                        LeaseArrived::Hint { time, rv: written.resource_version().unwrap_or_default() }
                    }
                    LeaseArrival::Take(_) => LeaseArrived::Took(Box::new(written)),
                };
                Ok((arrived, queued))
            }
            Err(e) => {
                tracing::debug!(lock = %self.lock, identity = %self.identity, error = %e, "the arrival by the Lease failed: arriving by the claim");
                if is_forbidden(&e) {
                    lock_state(&self.standing).lease_refused = true;
                }
                // Refused (a conflict, a status answer): it did not land. Anything else (a lost
                // answer, a timeout) may have.
                Err(match &e {
                    kube::Error::Api(_) => None,
                    _ => Some(queued),
                })
            }
        }
    }

    /// Re-arrival of request `request` of standing claim `name` (`object_uid`) by the claim,
    /// after its arrival by the Lease at `time` was displaced ([`displaced`]): one merge patch
    /// `spec.request = request`, `spec.requestTime = time` (the Lease arrival's, so it keeps its
    /// place in the queue). UID precondition: a claim deleted or replaced meanwhile is
    /// [`HolderError::ClaimDeleted`].
    async fn rearrive(
        &self,
        claims: &Api<DistributedLockClaim>,
        name: &str,
        arrival: &HintWait,
    ) -> Result<(), HolderError> {
        let body = serde_json::json!({
            "metadata": { "uid": arrival.object_uid },
            "spec": { "request": arrival.request, "requestTime": MicroTime(arrival.time) },
        });
        match claims.patch(name, &PatchParams::default(), &Patch::Merge(&body)).await {
            Ok(c) => {
                tracing::debug!(
                    claim = name,
                    request = arrival.request,
                    "displaced from the Lease: arrived by the claim"
                );
                let mut st = lock_state(&self.standing);
                if let Some(s) = st.claim.as_mut().filter(|s| s.uid == arrival.object_uid) {
                    s.spec_request = s.spec_request.max(c.spec.request.unwrap_or(arrival.request));
                    s.claim_rv = c.resource_version().unwrap_or_default();
                }
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Err(HolderError::ClaimDeleted(name.into())),
            Err(e) => {
                Err(HolderError::Kube { op: "arrive by the standing claim after a displaced Lease arrival", source: e })
            }
        }
    }

    /// The arrival by the Lease of request `uid` (a [`request_uid`]) that waits by its claim,
    /// when its operator is slow ([`WAITER_ARRIVES_AFTER`]): on `lease` (the lock's Lease as the
    /// wait's watch brought it), the write [`lease_arrival`] allows, one compare-and-swap PUT at
    /// that version: the next-holder hint on a Lease held by another claim (the holder's release
    /// hands over to it), or the take of a free Lease (the grant). `sent` is set before the write
    /// (it may land from then on: [`Ticket::cancel`] withdraws a hint and frees a take).
    async fn arrive_itself(&self, mut lease: Lease, uid: &str, own: &OwnHint) -> OwnArrival {
        let Some(arrival) = lease_arrival(&crate::lease::view(&lease), &self.identity, uid) else {
            return OwnArrival::Again;
        };
        arrive(&mut lease, &arrival, &self.identity, uid, Timestamp::now());
        own.sent.store(true, Ordering::SeqCst);
        // The write runs in its own task, holding `in_flight` until it is answered: should the
        // wait be dropped meanwhile (`acquire`'s timeout), `Ticket::cancel` waits for it before
        // it withdraws the hint or frees the take, instead of reading a Lease the write has not
        // reached yet.
        let in_flight = own.in_flight.clone().lock_owned().await;
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        let name = self.lock.clone();
        // Taken before the write is sent: a take holds from then (its renew deadline counts
        // from here, as a Lease arrival's does).
        let sent = Instant::now();
        let write = tokio::spawn(async move {
            let _in_flight = in_flight;
            leases.replace(&name, &PostParams::default(), &lease).await
        });
        let Ok(written) = write.await else {
            // The task panicked or was cancelled (the runtime shuts down): it may have landed.
            return OwnArrival::Done;
        };
        match written {
            Ok(written) => {
                tracing::trace!(lock = %self.lock, identity = %self.identity, ?arrival, "a waiter by claim arrived by the Lease");
                match arrival {
                    LeaseArrival::Hint(_) => OwnArrival::Done,
                    LeaseArrival::Take(_) => OwnArrival::Took(Box::new(written), sent),
                }
            }
            Err(e) => {
                tracing::debug!(lock = %self.lock, identity = %self.identity, ?arrival, error = %e, "a waiter's arrival by the Lease failed");
                if is_forbidden(&e) {
                    lock_state(&self.standing).lease_refused = true;
                }
                // A conflict did not land (nothing for a cancel to withdraw, and a later wait of
                // the ticket may try again), and a newer version comes; anything else may have
                // landed (a take that did is then seen on the watch).
                if matches!(&e, kube::Error::Api(s) if s.code == 409) {
                    own.sent.store(false, Ordering::SeqCst);
                    OwnArrival::Again
                } else {
                    OwnArrival::Done
                }
            }
        }
    }

    /// A watch of the lock's own Lease (by name) from version `rv`; `None` when it cannot start.
    async fn watch_lease(&self, rv: &str) -> Option<LeaseWatch> {
        self.try_watch_lease(rv).await.ok()
    }

    /// Starts the Lease watch of [`Holder::wait_for_grant`] from `rv`: the watch, or, when it
    /// cannot start (but on 403, which ends the tries), no watch and the restart to try next,
    /// after the next [`rewatch_delay`] (kept in `delay`), from the same `rv`.
    async fn start_lease_watch(
        &self,
        rv: String,
        delay: &mut Duration,
    ) -> (Option<LeaseWatch>, Option<(tokio::time::Instant, String)>) {
        match self.try_watch_lease(&rv).await {
            Ok(s) => (Some(s), None),
            Err(e) if is_forbidden(&e) => (None, None),
            Err(_) => {
                *delay = rewatch_delay(*delay, false);
                (None, Some((tokio::time::Instant::now() + *delay, rv)))
            }
        }
    }

    /// [`Holder::watch_lease`] with the reason it could not start.
    ///
    /// # Errors
    /// The WATCH request's error (403 for a role without `watch` on Leases).
    async fn try_watch_lease(&self, rv: &str) -> Result<LeaseWatch, kube::Error> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        let by_lock = WatchParams::default().fields(&format!("metadata.name={}", self.lock));
        match leases.watch(&by_lock, rv).await {
            Ok(s) => Ok(s.boxed()),
            Err(e) => {
                tracing::debug!(error = %e, "no Lease watch");
                Err(e)
            }
        }
    }

    /// Waits for claim `name` (UID `uid`) to be granted; returns its token, its slot, the name of
    /// the Lease that records the grant (`<lock>-slot-<k>` for slot k of a semaphore, the lock's
    /// own name for slot 0) and that Lease as the grant wrote it, with the Lease watch (kept
    /// while the lock is held, [`follow_lease`]).
    ///
    /// Two watches run side by side (issue 12: the handover is one write and one watch delivery
    /// shorter this way):
    /// - the lock's own Lease (by name): the operator's grant is the Lease write
    ///   that names this claim (holderIdentity and `leasehold.dev/holder-uid`) with its token, and
    ///   that write is the commit point; the claim's status is patched one write later;
    /// - the claim: its status says `Granted` (then the Lease of its `status.leaseName` is read,
    ///   and the grant is the Lease's if it names this claim: a status is only a record, which a
    ///   stale operator's patch can make disagree with the Lease), `Rejected` or `Expired`, and
    ///   its deletion ends the wait.
    ///
    /// For request `request` of a standing claim, `uid` is its request UID (what the Lease names)
    /// and only a status with `status.request == request` counts (an older request's is not this
    /// request's answer).
    ///
    /// Whichever answer comes first is the answer. A rejection that lands after the grant (an
    /// operator whose cache lagged) is not seen: the operator keeps a Lease that names a claim,
    /// rejected or not, until its holder stops renewing (`lock::grant`), so acting on the grant is
    /// safe; the model checker explores both orders (`tests/model.rs`, `ClaimLearns`,
    /// `ClaimGivesUp`, `Bug::RejectedClaimAsPod`).
    ///
    /// A plain waiter of a standing claim (`hinted`: `Some`, the ticket's record of its own
    /// writes) that waits by its claim arrives by the Lease itself ([`Holder::arrive_itself`]),
    /// at most one write landing, with a compare-and-swap on a Lease version its watch brought,
    /// when [`WAITER_ARRIVES_AFTER`] has passed (since the wait began or the Lease's hint last
    /// changed) and [`lease_arrival`] allows it (the operator's own hint or grant is late): it
    /// names itself as the next-holder hint of a Lease held by another claim, or takes a free
    /// one that has stayed the latest version for [`WAITER_TAKE_GRACE`]. A conflict waits for the next Lease version. The third value returned is when such a
    /// take was sent (the grant is held from then).
    async fn wait_for_grant(
        &self,
        claims: &Api<DistributedLockClaim>,
        name: &str,
        (uid, request): (&str, Option<i64>),
        created_rv: &str,
        hint: Option<HintWait>,
        hinted: Option<&OwnHint>,
    ) -> Result<(Granted, Option<LeaseWatch>, Option<Instant>), HolderError> {
        use futures::future::ready;
        // The claim: one WATCH from the version its create returned (every change after the
        // create, no list). Should that watch fail or end (410 Gone, the server's timeout), the
        // watcher takes over (list, then watch) with the checks below.
        let by_name = format!("metadata.name={name}");
        let raw = claims.watch(&WatchParams::default().fields(&by_name), created_rv).await.ok();
        let mut listed = raw.is_some();
        let raw = futures::stream::iter(raw)
            .flatten()
            .take_while(|e| {
                ready(matches!(
                    e,
                    Ok(WatchEvent::Added(_)
                        | WatchEvent::Modified(_)
                        | WatchEvent::Deleted(_)
                        | WatchEvent::Bookmark(_))
                ))
            })
            .filter_map(|e| {
                ready(match e {
                    Ok(WatchEvent::Added(c) | WatchEvent::Modified(c)) => Some(Ok(watcher::Event::Apply(c))),
                    Ok(WatchEvent::Deleted(c)) => Some(Ok(watcher::Event::Delete(c))),
                    _ => None,
                })
            });
        let fallback = watcher(claims.clone(), watcher::Config::default().fields(&by_name)).default_backoff();
        let mut claim_events = raw.chain(fallback).boxed();
        // The lock's own Lease (slot 0): one WATCH from version "0" (the Lease from the API
        // server's watch cache, then every change), started again when it ends (below). For the
        // grant it is a shortcut: should it fail for good, the claim's status still brings the
        // grant, one write later; so does it for a grant in a semaphore's other slots. The
        // waiter's own hint needs it. By name, not by the label every slot's Lease has: a label
        // selector made the API server match every Lease change against every waiter's watch
        // (the closed-loop throughput fell by a sixth with 2,000 waiters, README "Performance").
        //
        // A request that arrived by the Lease as its hint (issue 12) watches from the version its
        // write returned, and while it is only there (`hint`), a version that no longer names it
        // ([`displaced`]), the Lease's deletion or a watch that cannot go on makes it arrive by
        // its claim ([`Holder::rearrive`]): it must never be lost.
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut last_rv = hint.as_ref().map_or_else(|| "0".to_string(), |h| h.rv.clone());
        // When the Lease watch last started; when and from which version it is to start again
        // after it ended or could not start (`None`: running, or given up on a 403: a holder role
        // without list/watch on Leases, from before 2026-12-03); the last delay before such a
        // restart ([`rewatch_delay`]).
        let mut watched_since = tokio::time::Instant::now();
        let mut rewatch_after = Duration::ZERO;
        let (mut lease_events, mut rewatch) = self.start_lease_watch(last_rv.clone(), &mut rewatch_after).await;
        let mut hint = hint;
        if let Some(h) = hint.take_if(|_| lease_events.is_none()) {
            self.rearrive(claims, name, &h).await?;
        }
        // When this request may arrive by the Lease itself ([`Holder::arrive_itself`]):
        // `WAITER_ARRIVES_AFTER` after it started waiting by its claim or after the Lease's
        // next-holder hint last changed (written, used by a handover or withdrawn), whichever is
        // later, and for a take of a free version `WAITER_TAKE_GRACE` after that version came;
        // `None` once such a write landed or may have (also in an earlier wait of the same
        // ticket), or when it may not. The Lease version its watch brought last, not yet tried.
        let may_arrive = hinted.is_some_and(|h| !h.sent.load(Ordering::SeqCst))
            && request.is_some()
            && !lock_state(&self.standing).lease_refused;
        let mut own_arrival = may_arrive.then(|| tokio::time::Instant::now() + WAITER_ARRIVES_AFTER);
        let mut last_lease: Option<Lease> = None;
        // The next-holder hint of the last Lease version seen; when that version came, if it was
        // free (a take waits `WAITER_TAKE_GRACE` from then).
        let mut last_next = None;
        let mut free_since: Option<tokio::time::Instant> = None;
        loop {
            let arrival_due = own_arrival
                .filter(|_| hint.is_none() && last_lease.is_some())
                .map(|t| free_since.map_or(t, |f| t.max(f + WAITER_TAKE_GRACE)));
            let next_lease = async {
                match lease_events.as_mut() {
                    Some(s) => s.next().await,
                    None => std::future::pending().await,
                }
            };
            let ev = tokio::select! {
                ev = claim_events.next() => match ev {
                    Some(ev) => ev,
                    None => return Err(HolderError::Rejected("claim watch ended".into())),
                },
                () = tokio::time::sleep_until(arrival_due.unwrap_or_else(tokio::time::Instant::now)), if arrival_due.is_some() => {
                    if let (Some(l), Some(own)) = (last_lease.take(), hinted) {
                        match self.arrive_itself(l, uid, own).await {
                            OwnArrival::Again => {}
                            OwnArrival::Done => own_arrival = None,
                            OwnArrival::Took(lease, sent) => {
                                if let Some(grant) = grant_in(&lease, &self.lock, &self.identity, uid) {
                                    return Ok((grant, lease_events, Some(sent)));
                                }
                                own_arrival = None;
                            }
                        }
                    }
                    continue;
                }
                () = tokio::time::sleep_until(rewatch.as_ref().map_or_else(tokio::time::Instant::now, |r| r.0)), if rewatch.is_some() => {
                    let Some((_, rv)) = rewatch.take() else { continue };
                    watched_since = tokio::time::Instant::now();
                    (lease_events, rewatch) = self.start_lease_watch(rv, &mut rewatch_after).await;
                    continue;
                }
                ev = next_lease => {
                    // Whether the watch, should this be its end, ran long enough to restart at once.
                    let ran = watched_since.elapsed() >= Duration::from_secs(1);
                    let displaced_now = match ev {
                        Some(Ok(WatchEvent::Added(l) | WatchEvent::Modified(l))) => {
                            if let Some(grant) = grant_in(&l, &self.lock, &self.identity, uid) {
                                return Ok((grant, lease_events, None));
                            }
                            last_rv = l.resource_version().unwrap_or_default();
                            let view = crate::lease::view(&l);
                            let displaced_now = displaced(&view, uid);
                            // The hint was written or used (a handover): the operator has its
                            // `WAITER_ARRIVES_AFTER` again to name the next waiter. Without this,
                            // every waiter past its first second wrote the hint at each handover,
                            // one landing and the rest refused (a herd, README "Performance").
                            // Takes and renewals leave the hint alone: a waiter behind a holder
                            // that releases and takes again (no operator hint) still arrives.
                            if last_next.as_ref().is_some_and(|n| *n != view.next) {
                                own_arrival = own_arrival.map(|_| tokio::time::Instant::now() + WAITER_ARRIVES_AFTER);
                            }
                            free_since = view.holder.is_none().then(tokio::time::Instant::now);
                            last_next = Some(view.next);
                            last_lease = Some(l);
                            displaced_now
                        }
                        Some(Ok(WatchEvent::Deleted(_))) => true,
                        Some(Ok(WatchEvent::Bookmark(b))) => {
                            // A restart from here after a quiet spell needs no 410 and no read.
                            if !b.metadata.resource_version.is_empty() {
                                last_rv = b.metadata.resource_version;
                            }
                            false
                        }
                        // The watch ended: the server's timeout (kube's default 290 s), a watcher
                        // the API server closed because it fell behind, 410 Gone, a broken
                        // connection. Watched again, by a request known only to the Lease as by
                        // one that waits by its claim: without the Lease, a waiter by claim can
                        // neither name itself as the hint nor see its grant before the claim's
                        // status says so, and behind a holder that releases and takes again at
                        // once only the waiter's own hint gets it the lock (README "Performance",
                        // 2026-12-06 20:34). From the last version seen after a plain end, from
                        // the current Lease ("0") after an error, after [`rewatch_delay`] (at once
                        // after a watch that ran a second or more). A request known only to the
                        // Lease arrives by its claim when an error may have hidden a version, or
                        // when the watch cannot start again at once.
                        Some(Ok(WatchEvent::Error(e))) => {
                            tracing::debug!(error = %e, "Lease watch ended with an error: watching it again");
                            rewatch_after = rewatch_delay(rewatch_after, ran);
                            rewatch = Some((tokio::time::Instant::now() + rewatch_after, "0".into()));
                            lease_events = None;
                            true
                        }
                        Some(Err(e)) => {
                            tracing::debug!(error = %e, "Lease watch failed: watching it again");
                            rewatch_after = rewatch_delay(rewatch_after, ran);
                            rewatch = Some((tokio::time::Instant::now() + rewatch_after, "0".into()));
                            lease_events = None;
                            true
                        }
                        None => {
                            tracing::debug!("Lease watch ended: watching it again from the last version");
                            rewatch_after = rewatch_delay(rewatch_after, ran);
                            if rewatch_after.is_zero() {
                                watched_since = tokio::time::Instant::now();
                                (lease_events, rewatch) = self.start_lease_watch(last_rv.clone(), &mut rewatch_after).await;
                            } else {
                                lease_events = None;
                                rewatch = Some((tokio::time::Instant::now() + rewatch_after, last_rv.clone()));
                            }
                            lease_events.is_none()
                        }
                    };
                    if let Some(h) = hint.take_if(|_| displaced_now) {
                        self.rearrive(claims, name, &h).await?;
                        // Waiting by its claim from now on: the operator's hint has its second.
                        own_arrival = own_arrival.map(|_| tokio::time::Instant::now() + WAITER_ARRIVES_AFTER);
                    }
                    continue;
                }
            };
            let ev = match ev {
                Ok(ev) => ev,
                Err(watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e)) if is_forbidden(&e) => {
                    // Retrying cannot help: RBAC says no (list/watch on distributedlockclaims).
                    return Err(HolderError::Kube { op: "watch DistributedLockClaim", source: e });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "claim watch error (retrying)");
                    continue;
                }
            };
            let c = match ev {
                watcher::Event::Apply(c) | watcher::Event::InitApply(c) => c,
                watcher::Event::Init => {
                    listed = false;
                    continue;
                }
                watcher::Event::InitDone if listed => continue,
                watcher::Event::Delete(_) | watcher::Event::InitDone => {
                    return Err(HolderError::ClaimDeleted(name.to_string()));
                }
            };
            listed = true;
            let status = c.status.unwrap_or_default();
            if request.is_some() && status.request != request {
                // An older request's status (or none yet): not this request's answer.
                continue;
            }
            if status.phase == Some(ClaimPhase::Expired) {
                return Err(HolderError::Expired(status.message.unwrap_or_default()));
            }
            if let Some(token) = status.token {
                // The status is a record of the grant, written after the Lease, and a stale
                // operator's patch can land after the Lease moved on (found by the model checker,
                // `tests/model.rs` run "handover": a Lease deleted and recreated between an
                // operator's grant and its claim patch). Act only on the Lease: one read; if it
                // names this claim, its token is the grant's (the status catches up).
                let lease_name = status.lease_name.unwrap_or_else(|| self.lock.clone());
                let lease = leases.get_opt(&lease_name).await.map_err(kube_err("get Lease"))?;
                if let Some(grant) = lease.and_then(|l| grant_in(&l, &self.lock, &self.identity, uid)) {
                    return Ok((grant, lease_events, None));
                }
                tracing::debug!(lock = %self.lock, token, "the claim's status names a grant the Lease does not: waiting");
                continue;
            }
            if status.phase == Some(ClaimPhase::Rejected) {
                return Err(match status.reason.as_deref() {
                    Some("LockBusy") => HolderError::Busy(self.lock.clone()),
                    _ => HolderError::Rejected(status.message.unwrap_or_default()),
                });
            }
        }
    }
}

/// The grant that `lease`, a Lease of the lock named `lock`, records for the claim with UID
/// `claim_uid` and `spec.identity` `identity`: (fencing token, slot, Lease name, the Lease
/// itself, so the release, a next-holder handover included, needs no read). `None` for a Lease that names someone else, a Lease whose name is no slot's
/// of this lock (`lease::slot_lease_name`), or one whose token annotation is missing or
/// unreadable (the claim's status then brings the grant).
fn grant_in(lease: &Lease, lock: &str, identity: &str, claim_uid: &str) -> Option<Granted> {
    if !names_us(lease, identity, claim_uid) {
        return None;
    }
    let name = lease.name_any();
    let slot = if name == lock { 0 } else { crate::lease::slot_of_lease_name(lock, &name)? };
    let token = crate::lock::fencing::parse_token(lease.annotations().get(TOKEN_ANNOTATION)?)?;
    Some((token, slot, name, Some(Known::Object(Box::new(lease.clone())))))
}

/// What the wait for the grant needs to know of a request that arrived by the Lease as its
/// next-holder hint ([`LeaseArrived::Hint`]) to re-arrive by its claim when displaced.
#[derive(Clone, Debug)]
struct HintWait {
    /// The claim object's `metadata.uid`.
    object_uid: String,
    /// The request.
    request: i64,
    /// When it arrived by the Lease (its `spec.requestTime` should it arrive by the claim).
    time: Timestamp,
    /// The Lease version its hint write returned.
    rv: String,
}

/// A standing claim's arrival by the Lease (`arrival`, from [`lease_arrival`]: a new request's,
/// or a waiter's own), in memory. [`LeaseArrival::Hint`]: the next-holder hint is set.
/// [`LeaseArrival::Take`] of a free Lease: `identity` holds it under request UID `uid` with the
/// token (`acquireTime` and `renewTime` `now`, `leaseTransitions` + 1), as a release's handover
/// to a hint writes it ([`hand_over`]). Everything else (duration, floor, ceiling, the released
/// list) stays.
fn arrive(lease: &mut Lease, arrival: &LeaseArrival, identity: &str, uid: &str, now: Timestamp) {
    match arrival {
        LeaseArrival::Hint(next) => crate::lease::put_next(lease, Some(next)),
        LeaseArrival::Take(token) => {
            let token = *token;
            crate::lease::put_next(lease, Some(&Next { identity: identity.into(), uid: uid.into(), token }));
            hand_over(lease, now);
        }
    }
}

/// A grant as the wait found it: (fencing token, slot, Lease name, the Lease or its version).
type Granted = (i64, u32, String, Option<Known>);

/// The Lease watch of the wait for the grant, kept while the lock is held ([`follow_lease`]).
pub(crate) type LeaseWatch = futures::stream::BoxStream<'static, kube::Result<WatchEvent<Lease>>>;

/// How long a waiter waits before it starts its Lease watch again ([`Holder::wait_for_grant`]),
/// given the last such delay (`last`, zero at first) and whether the watch that ended ran at
/// least a second (`ran`: the server's timeout or a long watch that then broke): at once after a
/// watch that ran, otherwise twice the last delay, from 100 ms up to 30 s. A watch that ends or
/// cannot start again and again (a server that refuses it, or is down) is so tried less and less
/// often, never in a tight loop, and never given up (but on 403: RBAC does not change its mind).
fn rewatch_delay(last: Duration, ran: bool) -> Duration {
    if ran { Duration::ZERO } else { (last * 2).clamp(Duration::from_millis(100), Duration::from_secs(30)) }
}

/// Keeps `known` at the newest version of the held Lease that still names this holder, from the
/// watch that brought the grant: a write of the operator's (the next-holder hint, issue 12) then
/// costs the release no 409 and no read (a renewal needs no version: [`renew`]). A stale version
/// only costs a 409 and a read (the release is a compare-and-swap); the watch ending (the
/// server's timeout) only ends the following.
async fn follow_lease(mut events: LeaseWatch, known: KnownLease, identity: String, claim_uid: String) {
    while let Some(Ok(ev)) = events.next().await {
        match ev {
            WatchEvent::Added(l) | WatchEvent::Modified(l) if names_us(&l, &identity, &claim_uid) => known.set(l),
            WatchEvent::Error(_) => return,
            _ => {}
        }
    }
}

/// What [`Holder::arrive_itself`] did.
enum OwnArrival {
    /// Nothing was written ([`lease_arrival`] allows no write on this version), or the write met
    /// a conflict (409: it did not land): try again on the next version.
    Again,
    /// The hint landed, or a write may have landed (any failure but a conflict, a lost answer
    /// included), or the holder role may not write Leases (403): no more such writes.
    Done,
    /// The take landed: the Lease as it returned it, and when the write was sent.
    Took(Box<Lease>, Instant),
}

/// What a [`Ticket`] knows of its own arrival by the Lease while it waits by its claim (a hint
/// or a take, written by [`Holder::arrive_itself`]).
#[derive(Default)]
struct OwnHint {
    /// A hint write was sent (it may have landed).
    sent: AtomicBool,
    /// Held by that write until it is answered (it runs in its own task, which outlives a wait
    /// dropped by its timeout).
    in_flight: Arc<tokio::sync::Mutex<()>>,
}

/// A place in a lock's queue (a `DistributedLockClaim`), from [`Holder::enqueue`].
pub struct Ticket {
    holder: Holder,
    claims: Api<DistributedLockClaim>,
    claim_name: String,
    /// The claim object's `metadata.uid`.
    claim_uid: String,
    /// The claim's resourceVersion as its create (or a standing claim's request patch) returned
    /// it: the wait watches from there.
    claim_rv: String,
    /// A standing claim's request (`spec.request`); `None` for a one-shot claim.
    request: Option<i64>,
    /// A standing claim's shared state; `None` for a one-shot claim.
    standing: Option<StandingRef>,
    /// How a standing claim's request arrived by the Lease; `None`: by the claim.
    arrived: Option<LeaseArrived>,
    /// A plain waiter ([`OnBusy::Wait`]) of a standing claim: while it waits by its claim, it
    /// may arrive by the Lease itself ([`Holder::arrive_itself`]).
    may_hint: bool,
    /// Its own Lease write (a hint or a take), if a wait sent one: no wait sends another once one
    /// landed, and [`Ticket::cancel`] withdraws the hint or frees the take.
    hinted: OwnHint,
    lease_duration: Duration,
    timings: Resolved,
    /// When the claim's create (a standing claim: the patch that made this request) was sent
    /// (this process's monotonic clock).
    queued: Instant,
}

impl Ticket {
    /// The lock's `leaseDurationSeconds` as read when this ticket queued. The grant may be held
    /// under a shorter one (the lock's lowered meanwhile: [`LockGuard::lease_duration`]); the
    /// operator grants the lock to someone else no sooner than the grant's after the last renewal
    /// it saw.
    pub fn lease_duration(&self) -> Duration {
        self.lease_duration
    }

    /// Without a successful renewal for this long, the lock counts as lost (measured from the
    /// start of the last successful renewal, on this process's monotonic clock), as resolved
    /// when this ticket queued; the grant's may be shorter ([`LockGuard::renew_deadline`]).
    pub fn renew_deadline(&self) -> Duration {
        self.timings.renew_deadline
    }

    /// The name of this ticket's DistributedLockClaim (generated: `<lock>-<suffix>`).
    pub fn claim_name(&self) -> &str {
        &self.claim_name
    }

    /// A standing claim's request this ticket waits for (`spec.request`, >= 1); `None` for a
    /// one-shot claim.
    pub fn request(&self) -> Option<i64> {
        self.request
    }

    /// The UID the Lease names when this ticket is granted (`leasehold.dev/holder-uid`, the
    /// lock's `status.holder.uid`): the claim's, or a standing claim's request UID
    /// ([`request_uid`]).
    pub fn grant_uid(&self) -> String {
        match self.request {
            Some(r) => request_uid(&self.claim_uid, r),
            None => self.claim_uid.clone(),
        }
    }

    /// Waits (watch) until the claim is granted. A grant learned while more than a retry period
    /// of the renew deadline counted from the claim's create (or request) is left is held at once,
    /// its renew deadline counted from that create ([`holds_at_once`]); one learned later is
    /// first proved by a renewal. On error the claim stays queued: call [`Ticket::cancel`].
    ///
    /// # Errors
    /// [`HolderError::WaitTimeout`], [`HolderError::Busy`] (skip policy), [`HolderError::Rejected`],
    /// [`HolderError::NotHolder`], [`HolderError::Kube`].
    pub async fn wait(&self, timeout: Option<Duration>) -> Result<LockGuard, HolderError> {
        let grant_uid = self.grant_uid();
        if let Some(LeaseArrived::Took(lease)) = &self.arrived {
            // The arrival took the free Lease: held since that write was sent (`queued`).
            let token = crate::lease::view(lease).token;
            let watch = self.holder.watch_lease(&lease.resource_version().unwrap_or_default()).await;
            let claim = (self.claim_name.clone(), grant_uid);
            let lease = (self.holder.lock.clone(), Some(Known::Object(lease.clone())), watch);
            let single = Single::Claim(self.standing.clone());
            return LockGuard::start(&self.holder, claim, (token, 0), lease, self.timings, self.queued, single).await;
        }
        let hint = match (&self.arrived, self.request) {
            (Some(LeaseArrived::Hint { time, rv }), Some(request)) => {
                Some(HintWait { object_uid: self.claim_uid.clone(), request, time: *time, rv: rv.clone() })
            }
            _ => None,
        };
        tracing::trace!(lock = %self.holder.lock, identity = %self.holder.identity, request = ?self.request, hint = hint.is_some(), "waiting for the grant");
        let wait = self.holder.wait_for_grant(
            &self.claims,
            &self.claim_name,
            (&grant_uid, self.request),
            &self.claim_rv,
            hint,
            self.may_hint.then_some(&self.hinted),
        );
        let ((token, slot, lease_name, known), lease_watch, took) = match timeout {
            Some(t) => tokio::time::timeout(t, wait)
                .await
                .unwrap_or_else(|_| Err(HolderError::WaitTimeout(t, self.holder.lock.clone())))?,
            None => wait.await?,
        };
        tracing::trace!(lock = %self.holder.lock, identity = %self.holder.identity, token, "granted");
        let claim = (self.claim_name.clone(), grant_uid);
        let lease = (lease_name, known, lease_watch);
        let single = Single::Claim(self.standing.clone());
        // A take of its own holds from that write; any other grant from the claim's request.
        let queued = took.unwrap_or(self.queued);
        LockGuard::start(&self.holder, claim, (token, slot), lease, self.timings, queued, single).await
    }

    /// Leaves the queue: if the claim was granted meanwhile, first frees the Lease (owner-verified
    /// compare-and-swap, so the next waiter is granted at once), then deletes the claim (UID
    /// precondition). A granted claim that is only deleted keeps the lock until its lease
    /// expires: the operator cannot tell whether its process still runs. A standing claim is
    /// deleted too (and forgotten: the holder's next acquire creates a new one), and the Lease
    /// write lists the request as released.
    pub async fn cancel(self) {
        let leases: Api<Lease> = Api::namespaced(self.holder.client.clone(), &self.holder.namespace);
        // The Lease of the claim's grant, if it was granted (a semaphore slot's Lease); else the
        // lock's own, which names this claim only if it was granted there.
        let granted = self.claims.get_opt(&self.claim_name).await.ok().flatten();
        let lease_name = granted
            .filter(|c| c.metadata.uid.as_deref() == Some(self.claim_uid.as_str()))
            .and_then(|c| c.status?.lease_name)
            .unwrap_or_else(|| self.holder.lock.clone());
        let (identity, known) = (&self.holder.identity, &KnownLease::default());
        let grant_uid = self.grant_uid();
        let kept = self.standing.as_ref().and_then(|s| s.spec_request_uid());
        let released = self.request.map(|_| (grant_uid.as_str(), kept.as_deref()));
        let hinted_itself = self.hinted.sent.load(Ordering::SeqCst);
        if hinted_itself {
            // A write still in flight (its wait was dropped by a timeout) is answered first.
            drop(self.hinted.in_flight.lock().await);
        }
        if matches!(self.arrived, Some(LeaseArrived::Hint { .. })) || hinted_itself {
            // A hint naming a request nobody waits for would have the release hand the lock to
            // it (held by nobody until it expires): its arrival's, or one the wait wrote
            // ([`Holder::arrive_itself`]). Withdrawn first, so a release between the two writes
            // cannot hand the lock to it. A take the wait wrote is freed below.
            clear_hint(&leases, &self.holder.lock, &grant_uid).await;
        }
        if let Err(e) = clear_holder(&leases, &lease_name, identity, &grant_uid, known, true, released).await {
            tracing::debug!(error = %e, "freeing the Lease on cancel failed (it expires)");
        }
        if let Some(s) = &self.standing {
            s.forget();
        }
        delete_claim(&self.claims, &self.claim_name, &self.claim_uid).await;
    }
}

/// Removes the next-holder hint of Lease `lease_name` if it names request UID `uid`
/// (compare-and-swap; a few tries after a 409). Best effort: a failure is logged (debug), and
/// the operator replaces a hint that names no waiter.
async fn clear_hint(leases: &Api<Lease>, lease_name: &str, uid: &str) {
    for _ in 0..3 {
        let mut lease = match leases.get_opt(lease_name).await {
            Ok(Some(l)) => l,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(error = %e, "reading the Lease to remove this request's hint failed");
                return;
            }
        };
        if crate::lease::next(&lease).is_none_or(|n| n.uid != uid) {
            return;
        }
        crate::lease::put_next(&mut lease, None);
        match leases.replace(lease_name, &PostParams::default(), &lease).await {
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => tracing::debug!(error = %e, "removing this request's hint failed"),
            Ok(_) => {}
        }
        return;
    }
}

/// The shortest retry period: a defaulted one is raised to it, a set one below it is refused.
pub const MIN_RETRY_PERIOD: Duration = Duration::from_millis(100);

/// Checks and fills in the timings: lease > renew deadline > renew period >= retry period >=
/// [`MIN_RETRY_PERIOD`]. An error names each timing's value and whether it was set or defaulted
/// (and from what), so a user who set one flag learns which default it collides with; a value
/// set to zero, or a retry period set below the minimum, is refused by its own name first.
pub(crate) fn resolve_timings(lease: Duration, t: Timings) -> Result<Resolved, HolderError> {
    for (name, set) in [("renew deadline", t.renew_deadline), ("renew period", t.renew_period)] {
        if set.is_some_and(|d| d.is_zero()) {
            return Err(HolderError::InvalidTimings(format!("{name} 0s (as set) must be positive")));
        }
    }
    if let Some(r) = t.retry_period.filter(|r| *r < MIN_RETRY_PERIOD) {
        return Err(HolderError::InvalidTimings(format!(
            "retry period {r:?} (as set) must be at least {MIN_RETRY_PERIOD:?}: a tighter loop of renewals only loads the API server"
        )));
    }
    let deadline = t.renew_deadline.unwrap_or(lease * 2 / 3);
    let retry = t.retry_period.unwrap_or((lease * 2 / 15).max(MIN_RETRY_PERIOD));
    let period = t.renew_period.unwrap_or((lease / 3).max(retry));
    let src = |set: Option<Duration>, default: &'static str| if set.is_some() { "as set" } else { default };
    let d_src = src(t.renew_deadline, "the default: 2/3 of the lease duration");
    let r_src = src(t.retry_period, "the default: 2/15 of the lease duration, at least 100ms");
    let p_src = src(t.renew_period, "the default: 1/3 of the lease duration, at least the retry period");
    if deadline >= lease {
        return Err(HolderError::InvalidTimings(format!(
            "renew deadline {deadline:?} ({d_src}) must be shorter than the lock's lease duration {lease:?}"
        )));
    }
    if retry >= deadline || retry.is_zero() {
        return Err(HolderError::InvalidTimings(format!(
            "retry period {retry:?} ({r_src}) must be positive and shorter than the renew deadline {deadline:?} ({d_src})"
        )));
    }
    if period < retry || period >= deadline {
        return Err(HolderError::InvalidTimings(format!(
            "renew period {period:?} ({p_src}) must be at least the retry period {retry:?} ({r_src}) and shorter than the renew deadline {deadline:?} ({d_src})"
        )));
    }
    Ok(Resolved { lease_duration: lease, renew_deadline: deadline, retry_period: retry, renew_period: period })
}

/// The timings of a grant whose Lease says `granted` (its `spec.leaseDurationSeconds`): `read`
/// (resolved against the lock's lease duration as this holder read it, before it queued) when
/// the Lease's is not shorter, else `t` resolved against the Lease's, or, where `t` does not fit
/// it (a renew deadline set at or above it), the default timings for it. The operator expires a
/// grant by its Lease's value (it keeps it while the grant holds:
/// `crate::lock::grant::lease_duration_to_write`), so a lease duration lowered on the lock
/// between this holder's read and its grant must shorten its renew deadline: otherwise the next
/// holder may be granted while this one still counts itself within its deadline (found by a
/// newcomer trial; the model checker's run "lease-lowered" catches it,
/// `Bug::HolderKeepsReadDuration`).
pub(crate) fn granted_timings(read: Resolved, granted: Option<Duration>, t: Timings) -> Resolved {
    match granted {
        Some(g) if g < read.lease_duration => resolve_timings(g, t).unwrap_or_else(|e| {
            tracing::warn!(granted = ?g, error = %e, "the grant's lease duration is shorter than the lock's was when this holder queued, and the timings set do not fit it: holding with the default timings for it");
            resolve_timings(g, Timings::default()).unwrap_or(Resolved {
                lease_duration: g,
                renew_deadline: g * 2 / 3,
                retry_period: g * 2 / 15,
                renew_period: g / 3,
            })
        }),
        _ => read,
    }
}

pub(crate) async fn delete_claim(claims: &Api<DistributedLockClaim>, name: &str, uid: &str) {
    let dp = DeleteParams {
        preconditions: Some(Preconditions { uid: Some(uid.into()), resource_version: None }),
        ..DeleteParams::default()
    };
    if let Err(e) = claims.delete(name, &dp).await {
        tracing::debug!(error = %e, claim = name, "claim delete failed (it may be gone)");
    }
}

/// A held lock. Renews in the background until released or lost.
///
/// Dropping it without [`LockGuard::release`] (an early return, `?`, a panic that unwinds)
/// stops the renewals at once and starts the same owner-verified release in the background, on
/// the tokio runtime the drop runs in: the next waiter is granted as after `release()`. That
/// release is best effort: when there is no runtime, or it shuts down first (the end of
/// `main`), or the API server cannot be reached, the lock frees when the Lease expires,
/// `leaseDurationSeconds` after the last renewal, and the operator marks the claim `Expired`.
/// Call `release()` to know that it happened.
pub struct LockGuard {
    lock: String,
    /// The Lease that records this grant and that it renews: the lock's own, or a semaphore
    /// slot's (`<lock>-slot-<k>`, from the claim's `status.leaseName`).
    lease_name: String,
    identity: String,
    token: i64,
    slot: u32,
    claim_name: String,
    claim_uid: String,
    leases: Api<Lease>,
    claims: Api<DistributedLockClaim>,
    /// The Lease as this holder's last write returned it, shared with the renewer.
    known: KnownLease,
    /// The grant's timings ([`granted_timings`]).
    timings: Resolved,
    lost_rx: watch::Receiver<Option<LostReason>>,
    renewed_rx: watch::Receiver<Instant>,
    renewer: tokio::task::JoinHandle<()>,
    /// Keeps `known` current from the Lease watch ([`follow_lease`]), if there is one.
    follower: Option<tokio::task::JoinHandle<()>>,
    /// `release()` ran: the drop has nothing left to do.
    released: bool,
    /// A claim for this lock alone (the release may hand over to a next-holder hint, and deletes
    /// a one-shot claim or lists a standing claim's request as released), or one lock of a set.
    single: Single,
}

/// What claim a [`LockGuard`] holds its grant under.
#[derive(Clone)]
pub(crate) enum Single {
    /// A claim for this lock alone: one-shot (`None`, deleted by the release) or a standing
    /// claim's request (the release lists it in the Lease's `leasehold.dev/released`).
    Claim(Option<StandingRef>),
    /// One lock of a set ([`crate::holder_set`]): the set deletes its claim.
    SetMember,
}

impl Single {
    fn is_single(&self) -> bool {
        matches!(self, Single::Claim(_))
    }

    fn standing(&self) -> Option<&StandingRef> {
        match self {
            Single::Claim(s) => s.as_ref(),
            Single::SetMember => None,
        }
    }
}

impl LockGuard {
    /// Starts holding the grant `token` (in semaphore slot `slot`) of claim `claim_name`, whose create was sent at `queued`.
    /// `claim_uid` is what the Lease names: the claim's UID, or a standing claim's request UID
    /// (then `queued` is when the patch that made the request was sent).
    ///
    /// The renew deadline must start no later than the operator's expiry clock for this grant,
    /// which starts when the operator sees its own grant: after the claim existed, so after
    /// `queued`. A grant learned while more than a retry period of the renew deadline counted
    /// from `queued` is left ([`holds_at_once`]) is therefore held at once, with `queued` as its last
    /// renewal's start and its first renewal due a renew period after it, at once if that has
    /// passed (no write on the handover's path: issue 12). A grant learned later is first proved
    /// by a renewal (owner-verified: [`renew`]), whose start is then the reference. The model
    /// checker explores a wider rule (`tests/model.rs`, `ClaimLearns`: held at once anywhere
    /// within the renew deadline) and catches the unsafe one, counting from when the grant was
    /// learned (`Bug::HolderClockFromLearning`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start(
        h: &Holder,
        (claim_name, claim_uid): (String, String),
        (token, slot): (i64, u32),
        (lease_name, lease_known, lease_watch): (String, Option<Known>, Option<LeaseWatch>),
        timings: Resolved,
        queued: Instant,
        single: Single,
    ) -> Result<LockGuard, HolderError> {
        let known = KnownLease::default();
        // The Lease (or the version) the grant wrote: the release (and a renewal by
        // compare-and-swap, after a 403 on the patch) needs no read.
        match lease_known {
            Some(Known::Object(l)) => known.set(*l),
            Some(Known::Version(rv)) => known.set_version(rv),
            None => {}
        }
        // Renewals count against the grant's lease duration where it is shorter than the one
        // read before queueing ([`granted_timings`]); a grant known by its version only takes it
        // from its first renewal's answer, below.
        let mut timings = granted_timings(timings, known.lease_duration(), h.timings);
        let renew_deadline = timings.renew_deadline;
        let leases: Api<Lease> = Api::namespaced(h.client.clone(), &h.namespace);
        let claims: Api<DistributedLockClaim> = Api::namespaced(h.client.clone(), &h.namespace);
        // A lock of a set is always proved first: its tentative grant may be older than the
        // set's commit by any time.
        let waited = queued.elapsed();
        let (started, first) = if single.is_single() && holds_at_once(waited, &timings) {
            if waited >= timings.renew_period {
                tracing::debug!(lock = %h.lock, ?waited, "a grant learned past the renew period: held at once, renewing now");
            }
            (queued, Ok(true))
        } else {
            // Prove the grant with a first renewal before the caller may act on it.
            let started = Instant::now();
            let first =
                tokio::time::timeout(renew_deadline, renew(&leases, &lease_name, &h.identity, &claim_uid, &known))
                    .await
                    .unwrap_or(Err(HolderError::FirstRenewalTimeout(renew_deadline)));
            tracing::debug!(lock = %h.lock, ?waited, set = !single.is_single(), took = ?started.elapsed(), ok = first.is_ok(), "a grant proved by a first renewal");
            // The renewal's answer is the Lease: its lease duration may be shorter still.
            timings = granted_timings(timings, known.lease_duration(), h.timings);
            let first = match first {
                Ok(true) if started.elapsed() >= timings.renew_deadline => {
                    Err(HolderError::FirstRenewalTimeout(timings.renew_deadline))
                }
                other => other,
            };
            (started, first)
        };
        match first {
            Ok(true) => {}
            Ok(false) => {
                match single.standing() {
                    // The request is not granted any more and may not be recorded as such: a
                    // standing claim left at it could be granted it again, to nobody.
                    Some(s) => {
                        s.forget();
                        delete_claim(&claims, &claim_name, &s.object_uid).await;
                    }
                    None if single.is_single() => delete_claim(&claims, &claim_name, &claim_uid).await,
                    None => {}
                }
                return Err(HolderError::NotHolder(h.lock.clone()));
            }
            Err(e) => {
                let _ =
                    free(&leases, &claims, &lease_name, &h.identity, (&claim_name, &claim_uid, &single), &known).await;
                return Err(e);
            }
        }
        let (lost_tx, lost_rx) = watch::channel(None);
        let (renewed_tx, renewed_rx) = watch::channel(started);
        let follower =
            lease_watch.map(|w| tokio::spawn(follow_lease(w, known.clone(), h.identity.clone(), claim_uid.clone())));
        let renewer = tokio::spawn(renew_loop(
            leases.clone(),
            lease_name.clone(),
            h.identity.clone(),
            claim_uid.clone(),
            known.clone(),
            started,
            timings,
            lost_tx,
            renewed_tx,
        ));
        Ok(LockGuard {
            lock: h.lock.clone(),
            lease_name,
            identity: h.identity.clone(),
            token,
            slot,
            claim_name,
            claim_uid,
            leases,
            claims,
            known,
            timings,
            lost_rx,
            renewed_rx,
            renewer,
            follower,
            released: false,
            single,
        })
    }

    /// The fencing token of this grant: send it with every write to the protected resource.
    pub fn token(&self) -> i64 {
        self.token
    }

    /// The semaphore slot of this grant (the claim's `status.slot`): 0 for a single-holder lock,
    /// 0..N for a lock with `maxHolders: N`. Tokens strictly increase per slot but not across
    /// slots (a grant reserved earlier can land later), so a resource fenced by a semaphore keeps
    /// its high-water mark per slot: send the slot with the token.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The lease duration this grant is held under: its Lease's `spec.leaseDurationSeconds`, or
    /// the lock's as read before queueing when that is shorter. The operator takes the lock back
    /// no sooner than this after the last renewal it saw (it keeps a grant's value while the
    /// grant holds, however the lock's spec changes: `crate::lock::grant::expiry_of`).
    pub fn lease_duration(&self) -> Duration {
        self.timings.lease_duration
    }

    /// Without a successful renewal for this long (from the start of the last successful one,
    /// on this process's monotonic clock), the lock counts as lost; shorter than
    /// [`LockGuard::lease_duration`]. It may be shorter than the [`Ticket::renew_deadline`] it
    /// was queued with: a lease duration lowered on the lock while this holder waited applies to
    /// its grant.
    pub fn renew_deadline(&self) -> Duration {
        self.timings.renew_deadline
    }

    /// The identity this lock is held under.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The start of the last successful renewal (this process's monotonic clock), updated on
    /// every renewal: the renew deadline runs from it.
    pub fn last_renewal(&self) -> watch::Receiver<Instant> {
        self.renewed_rx.clone()
    }

    /// Whether the lock has been lost.
    pub fn is_lost(&self) -> bool {
        self.lost_rx.borrow().is_some()
    }

    /// Resolves when the lock is lost (never, while renewals succeed).
    pub async fn lost(&self) -> LostReason {
        let mut rx = self.lost_rx.clone();
        loop {
            if let Some(r) = rx.borrow_and_update().clone() {
                return r;
            }
            if rx.changed().await.is_err() {
                return LostReason::Taken;
            }
        }
    }

    /// Releases the lock: stops renewing, then, by compare-and-swap if the Lease still names this
    /// holder, hands it to the Lease's next-holder hint (the waiting claim the operator named:
    /// granted by this write) or clears its holder (the operator grants the next waiter at once).
    /// A one-shot claim is deleted first; a standing claim's request is listed in the Lease's
    /// `leasehold.dev/released` by that same write and the claim stays for the next acquire (if
    /// the Lease no longer names it, or the write fails, the standing claim is deleted instead).
    ///
    /// # Errors
    /// [`HolderError::NotHolder`] when the Lease no longer names this holder (nothing is
    /// changed); [`HolderError::Kube`] when the API fails.
    pub async fn release(mut self) -> Result<(), HolderError> {
        self.released = true;
        self.renewer.abort();
        if let Some(f) = &self.follower {
            f.abort();
        }
        let (lease_name, identity) = (&self.lease_name, &self.identity);
        let claim = (self.claim_name.as_str(), self.claim_uid.as_str(), &self.single);
        match free(&self.leases, &self.claims, lease_name, identity, claim, &self.known).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(HolderError::NotHolder(self.lock.clone())),
            Err(e) => Err(e),
        }
    }
}

impl Drop for LockGuard {
    /// Stops renewing; without an earlier `release()`, releases in the background (see
    /// [`LockGuard`]).
    fn drop(&mut self) {
        self.renewer.abort();
        if let Some(f) = &self.follower {
            f.abort();
        }
        if self.released {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            if let Some(s) = self.single.standing() {
                s.done();
            }
            return;
        };
        let (leases, claims) = (self.leases.clone(), self.claims.clone());
        let (lock, lease_name, identity) = (self.lock.clone(), self.lease_name.clone(), self.identity.clone());
        let (claim_name, claim_uid, known) = (self.claim_name.clone(), self.claim_uid.clone(), self.known.clone());
        let single = self.single.clone();
        runtime.spawn(async move {
            if let Err(e) =
                free(&leases, &claims, &lease_name, &identity, (&claim_name, &claim_uid, &single), &known).await
            {
                tracing::debug!(error = %e, lock, "release of a dropped lock guard failed; the Lease will expire");
            }
        });
    }
}

/// A release: clears the holder of Lease `lease_name` if it still names this claim
/// ([`clear_holder`]); a one-shot claim for this lock alone (`(name, uid, single)`) is deleted
/// first, whatever the release answers; a standing claim's request (`uid` its request UID) is
/// listed as released in the same Lease write and the claim stays for the next request; a lock
/// of a set ([`crate::holder_set`]) leaves the claim to the set, which deletes it once every
/// Lease is freed. `Ok(false)`: the Lease named someone else.
async fn free(
    leases: &Api<Lease>,
    claims: &Api<DistributedLockClaim>,
    lease_name: &str,
    identity: &str,
    (claim_name, claim_uid, single): (&str, &str, &Single),
    known: &KnownLease,
) -> Result<bool, HolderError> {
    if let Some(s) = single.standing() {
        // No delete: the Lease write that ends the grant also lists the request as released,
        // so every version of the Lease that no longer names it says it was served (the
        // operator never grants a listed request, `lock::machine::step`).
        let kept = s.spec_request_uid();
        let released = Some((claim_uid, kept.as_deref()));
        let freed = clear_holder(leases, lease_name, identity, claim_uid, known, true, released).await;
        if !matches!(freed, Ok(true)) {
            // Not listed as released (the Lease no longer named it, or the write failed): left
            // at this request, unrecorded if the hold was short, the claim would look like a
            // waiter and be granted again to nobody. Deleted instead; the next acquire creates
            // a new one.
            s.forget();
            delete_claim(claims, claim_name, &s.object_uid).await;
            return freed;
        }
        s.done();
        return freed;
    }
    // A single claim is deleted before the Lease is released: its status may not record the
    // grant yet (the operator writes it `CLAIM_RECORD_DELAY` after the grant), and a claim with
    // no recorded grant that outlived its release would look like a waiter and be granted again
    // (then held, unrenewed, until its lease expired). Deleted first, the claim is a holder whose
    // claim is gone until the release lands (the operator keeps such a holder: model-checked,
    // `tests/model.rs` `ClaimDeleted`).
    if single.is_single() {
        delete_claim(claims, claim_name, claim_uid).await;
    }
    clear_holder(leases, lease_name, identity, claim_uid, known, single.is_single(), None).await
}

/// The Lease as this holder's last successful write (renewal) returned it, or only the
/// resourceVersion at which the grant wrote it (the claim's `status.leaseResourceVersion`), so
/// the release (and a renewal by [`renew_by_read`]) can compare-and-swap without reading first. Taken by the
/// write that uses it; a stale one costs a 409 and a fresh read, never a wrong write (the
/// resourceVersion precondition). Also whether a renewal patch was refused with 403 (a holder
/// role from before the holder patched, or a Lease policy that refuses it): then this grant's
/// renewals compare-and-swap from here on ([`renew_by_read`]), without a patch first.
#[derive(Clone, Default)]
pub(crate) struct KnownLease {
    known: std::sync::Arc<std::sync::Mutex<Option<Known>>>,
    patch_refused: std::sync::Arc<AtomicBool>,
}

/// What [`KnownLease`] holds.
#[derive(Debug, PartialEq)]
pub(crate) enum Known {
    /// The whole object: a PUT from it.
    Object(Box<Lease>),
    /// A version at which the Lease named this holder: a merge PATCH that carries it as
    /// precondition and changes only what the write is about.
    Version(String),
}

impl KnownLease {
    fn take(&self) -> Option<Known> {
        self.known.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn set(&self, lease: Lease) {
        *self.known.lock().unwrap_or_else(|e| e.into_inner()) = Some(Known::Object(Box::new(lease)));
    }

    /// The `spec.leaseDurationSeconds` of the Lease last known whole (`None` for a version only).
    pub(crate) fn lease_duration(&self) -> Option<Duration> {
        match &*self.known.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(Known::Object(l)) => crate::lease::view(l).lease_duration,
            _ => None,
        }
    }

    fn set_version(&self, resource_version: String) {
        *self.known.lock().unwrap_or_else(|e| e.into_inner()) = Some(Known::Version(resource_version));
    }
}

/// One compare-and-swap merge PATCH of the Lease at `resource_version` (which named this
/// holder): `Ok(Some(written))`, or `Ok(None)` when the Lease changed since (409) or the caller
/// may not patch Leases (403, a role from an older chart): read it and decide again. Other
/// errors, 404 included, are returned.
async fn patch_at(
    leases: &Api<Lease>,
    lock: &str,
    resource_version: String,
    mut body: serde_json::Value,
) -> Result<Option<Lease>, kube::Error> {
    body["metadata"]["resourceVersion"] = resource_version.into();
    match leases.patch(lock, &PatchParams::default(), &Patch::Merge(&body)).await {
        Ok(written) => Ok(Some(written)),
        // 403: a holder role from before the holder patched (get and update only): the read and
        // PUT path still works.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 403 => Ok(None),
        Err(e) => Err(e),
    }
}

fn names_us(lease: &Lease, identity: &str, claim_uid: &str) -> bool {
    lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some(identity)
        && lease.annotations().get(HOLDER_UID_ANNOTATION).map(String::as_str) == Some(claim_uid)
}

/// One renewal of Lease `lease_name` (the grant's: the lock's own or a semaphore slot's): sets
/// `spec.renewTime` if the Lease still names us (`holderIdentity` and
/// `leasehold.dev/holder-uid`). `Ok(false)`: it does not, or it is gone (lost).
///
/// One JSON Patch (RFC 6902) with no `resourceVersion`: two `test` operations (the holder
/// identity and the holder UID) and an `add` of `renewTime`. The API server applies a patch to the
/// Lease as stored, inside its own optimistic-concurrency retry, so the tests are decided against
/// the Lease the write replaces and a write in between that leaves the holder alone (a waiter's
/// next-holder hint, a Lease arrival's hint, the operator's hint) does not refuse the renewal, as
/// it refused a compare-and-swap on a `resourceVersion` (HTTP 409, then a read and a second try,
/// each a round trip on a busy server). A failed `test` is answered HTTP 422
/// (k8s.io/apiserver `pkg/endpoints/handlers/patch.go`, `applyJSPatch`); that is decided by
/// [`renew_by_read`]: a read, and a compare-and-swap PUT only where the Lease names us. A 403 (a
/// holder role from before the holder patched: get and update only) makes this grant renew by
/// [`renew_by_read`] from then on, starting from the Lease in `known` (one PUT, as before).
///
/// A patch whose answer was lost (a timeout) may still land later, after other writes, where a
/// stale compare-and-swap would have been refused: it sets `renewTime` on a Lease that still
/// names us, which the holder's renew deadline (counted from the start of its last answered
/// renewal) and the operator's expiry clock (restarted by every change it sees) both allow.
pub(crate) async fn renew(
    leases: &Api<Lease>,
    lease_name: &str,
    identity: &str,
    claim_uid: &str,
    known: &KnownLease,
) -> Result<bool, HolderError> {
    if known.patch_refused.load(Ordering::Relaxed) {
        return renew_by_read(leases, lease_name, identity, claim_uid, known).await;
    }
    let patch = renew_patch(identity, claim_uid, MicroTime(Timestamp::now()));
    match leases.patch(lease_name, &PatchParams::default(), &Patch::Json::<()>(patch)).await {
        Ok(written) => {
            known.set(written);
            tracing::trace!(lease = lease_name, identity, "renewed (one patch)");
            Ok(true)
        }
        // NotFound (the Lease, or the namespace, is gone) is a lost lock, not an error to retry:
        // nobody can prove this holder still holds.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(kube::Error::Api(s)) if s.code == 422 => {
            tracing::debug!(lease = lease_name, identity, message = %s.message, "renewal patch refused; deciding from a read");
            let _ = known.take();
            renew_by_read(leases, lease_name, identity, claim_uid, known).await
        }
        Err(kube::Error::Api(s)) if s.code == 403 => {
            tracing::debug!(lease = lease_name, identity, message = %s.message, "may not patch the Lease: renewing by compare-and-swap");
            known.patch_refused.store(true, Ordering::Relaxed);
            renew_by_read(leases, lease_name, identity, claim_uid, known).await
        }
        Err(e) => Err(HolderError::Kube { op: "renew Lease", source: e }),
    }
}

/// The JSON Patch of [`renew`]: `test` `/spec/holderIdentity` = `identity`, `test`
/// `/metadata/annotations/leasehold.dev~1holder-uid` = `claim_uid` (RFC 6901 escapes `/` as
/// `~1`: jsonptr's `PointerBuf::from_tokens`), `add` `/spec/renewTime` = `now` (`add` replaces a
/// member that exists and, unlike `replace`, also sets one that does not).
fn renew_patch(identity: &str, claim_uid: &str, now: MicroTime) -> json_patch::Patch {
    use json_patch::jsonptr::PointerBuf;
    use json_patch::{AddOperation, PatchOperation, TestOperation};
    let path = |tokens: &[&str]| PointerBuf::from_tokens(tokens.iter().copied());
    json_patch::Patch(vec![
        PatchOperation::Test(TestOperation { path: path(&["spec", "holderIdentity"]), value: identity.into() }),
        PatchOperation::Test(TestOperation {
            path: path(&["metadata", "annotations", HOLDER_UID_ANNOTATION]),
            value: claim_uid.into(),
        }),
        PatchOperation::Add(AddOperation { path: path(&["spec", "renewTime"]), value: serde_json::json!(now) }),
    ])
}

/// [`renew`] by a read and a compare-and-swap: from the Lease in `known` (our last write, or a
/// version the grant wrote: a merge PATCH carrying it), else a GET; if the Lease names us, PUT it
/// with `renewTime` set and its `resourceVersion` as precondition. Retries on 409 (someone else
/// wrote in between) after a fresh read. `Ok(false)`: the Lease does not name us, or it is gone.
/// A lock of a set's tentative grant is renewed this way (one GET per lock, a write only where
/// the Lease names the claim: [`crate::holder_set`]).
pub(crate) async fn renew_by_read(
    leases: &Api<Lease>,
    lease_name: &str,
    identity: &str,
    claim_uid: &str,
    known: &KnownLease,
) -> Result<bool, HolderError> {
    let mut last = known.take();
    loop {
        let mut lease = match last.take() {
            Some(Known::Object(l)) => *l,
            Some(Known::Version(rv)) => {
                let body = serde_json::json!({ "spec": { "renewTime": MicroTime(Timestamp::now()) } });
                match patch_at(leases, lease_name, rv, body).await {
                    Ok(Some(written)) => {
                        known.set(written);
                        return Ok(true);
                    }
                    Ok(None) => continue,
                    Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
                    Err(e) => return Err(HolderError::Kube { op: "renew Lease", source: e }),
                }
            }
            None => match leases.get_opt(lease_name).await.map_err(kube_err("get Lease"))? {
                Some(l) => l,
                None => return Ok(false),
            },
        };
        if !names_us(&lease, identity, claim_uid) {
            return Ok(false);
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.renew_time = Some(MicroTime(Timestamp::now()));
        }
        match leases.replace(lease_name, &PostParams::default(), &lease).await {
            Ok(written) => {
                known.set(written);
                return Ok(true);
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tracing::debug!(lease = lease_name, identity, "renewal conflict (409); reading again");
                continue;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
            Err(e) => return Err(HolderError::Kube { op: "renew Lease", source: e }),
        }
    }
}

/// Owner-verified release of Lease `lease_name`: if the Lease still names us, with the
/// resourceVersion read as precondition, either hands the lock to the Lease's next-holder hint
/// (the operator's choice of the waiting claim at the head of the queue, with its token:
/// [`crate::lock::grant::Next`]), so the next holder is granted by this one write, or clears the
/// holder (no hint, or `may_hand_over` false: a lock of a set, which hands over nothing) and the
/// operator grants. `Ok(false)`: it does not name us. With `released` (a standing claim's
/// request UID, issue 12) the same write sets the Lease's `leasehold.dev/released` to
/// [`released_after`] its list: the request is never granted again.
pub(crate) async fn clear_holder(
    leases: &Api<Lease>,
    lease_name: &str,
    identity: &str,
    claim_uid: &str,
    known: &KnownLease,
    may_hand_over: bool,
    released: Option<(&str, Option<&str>)>,
) -> Result<bool, HolderError> {
    // One PUT when the Lease is as our last write (or the grant) left it (one PATCH when only the
    // grant's version is known: that clears, as the hint is not known); after a 409, from a fresh
    // read.
    let mut last = known.take();
    // False once the Lease policy refused the handover (403: a chart from before it): clear.
    let mut use_hint = may_hand_over;
    loop {
        let mut lease = match last.take() {
            Some(Known::Object(l)) => *l,
            // The released list is the Lease's, extended: read it first.
            Some(Known::Version(_)) if released.is_some() => continue,
            Some(Known::Version(rv)) => {
                let body = serde_json::json!({
                    "metadata": { "annotations": {
                        HOLDER_UID_ANNOTATION: null, HOLDER_KIND_ANNOTATION: null,
                        NEXT_HOLDER_ANNOTATION: null, NEXT_HOLDER_UID_ANNOTATION: null, NEXT_TOKEN_ANNOTATION: null,
                    } },
                    "spec": { "holderIdentity": null, "acquireTime": null, "renewTime": null },
                });
                match patch_at(leases, lease_name, rv, body).await {
                    Ok(Some(_)) => return Ok(true),
                    Ok(None) => continue,
                    Err(e) => return Err(HolderError::Kube { op: "release Lease", source: e }),
                }
            }
            None => leases.get(lease_name).await.map_err(kube_err("get Lease"))?,
        };
        if !names_us(&lease, identity, claim_uid) {
            return Ok(false);
        }
        let read = lease.clone();
        if !use_hint {
            crate::lease::put_next(&mut lease, None);
        }
        let handing = crate::lease::next(&lease).is_some();
        hand_over(&mut lease, Timestamp::now());
        if let Some((r, kept)) = released {
            let list = released_after(&crate::lease::released(&lease), r, kept);
            crate::lease::put_released(&mut lease, &list);
        }
        match leases.replace(lease_name, &PostParams::default(), &lease).await {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(kube::Error::Api(s)) if s.code == 403 && handing => {
                tracing::debug!(message = %s.message, "the handover was refused: releasing instead");
                use_hint = false;
                last = Some(Known::Object(Box::new(read)));
            }
            Err(e) => return Err(HolderError::Kube { op: "release Lease", source: e }),
        }
    }
}

/// `released`, a Lease's `leasehold.dev/released` list, after the release of `request_uid` (a
/// standing claim's request UID, [`request_uid`]): the same claim's older entries dropped (its
/// request only grows, so they can no longer matter), except `kept` if it is listed (the request
/// the claim's `spec.request` still shows, when later requests arrived by the Lease: an operator
/// that reads a claim's request from its spec alone must still find it released), this one
/// appended; other claims' entries kept in their order.
pub(crate) fn released_after(released: &[String], request_uid: &str, kept: Option<&str>) -> Vec<String> {
    let object = split_request_uid(request_uid).0;
    let mut list: Vec<String> = released
        .iter()
        .filter(|e| split_request_uid(e).0 != object || (Some(e.as_str()) == kept && e.as_str() != request_uid))
        .cloned()
        .collect();
    list.push(request_uid.to_string());
    list
}

/// The release's Lease, in memory: with a next-holder hint, the hinted claim becomes the holder
/// with the hinted token (`acquireTime` and `renewTime` now, `leaseTransitions` + 1, the hint
/// removed), as the operator's grant would write it (`lease::update`); without one, no holder
/// (the last token stays).
fn hand_over(lease: &mut Lease, now: Timestamp) {
    let next = crate::lease::next(lease);
    let duration = crate::lease::next_lease_duration(lease);
    crate::lease::put_next(lease, None);
    let ann = lease.metadata.annotations.get_or_insert_with(Default::default);
    let spec = lease.spec.get_or_insert_with(Default::default);
    match next {
        Some(n) => {
            // The lock's lease duration as the operator's hint carries it (none on a waiter's
            // own hint: the Lease's stays): the next grant's.
            if let Some(d) = duration {
                spec.lease_duration_seconds = Some(i32::try_from(d.as_secs()).unwrap_or(i32::MAX));
            }
            ann.insert(HOLDER_UID_ANNOTATION.into(), n.uid);
            ann.insert(HOLDER_KIND_ANNOTATION.into(), HolderKind::Claim.as_str().into());
            ann.insert(TOKEN_ANNOTATION.into(), n.token.to_string());
            spec.holder_identity = Some(n.identity);
            spec.acquire_time = Some(MicroTime(now));
            spec.renew_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        None => {
            ann.remove(HOLDER_UID_ANNOTATION);
            ann.remove(HOLDER_KIND_ANNOTATION);
            spec.holder_identity = None;
            spec.acquire_time = None;
            spec.renew_time = None;
        }
    }
}

/// Whether a grant learned `waited` after its claim's create (or request) was sent is held at
/// once, with no first renewal (`LockGuard::start`): while more than the retry period of the
/// renew deadline counted from that send is left (up to 8 s of 10 s at the default timings). The
/// renewal loop's first renewal is due a renew period after the send, at once if that has passed,
/// and then has more than the retry period to land (a renew period set close to the renew
/// deadline leaves it less, as it does every renewal). The model
/// checker's `ClaimLearns` holds at once anywhere within the renew deadline (`tests/model.rs`);
/// this rule holds at once in a subset of those states and proves the grant first in the rest.
pub(crate) fn holds_at_once(waited: Duration, timings: &Resolved) -> bool {
    waited + timings.retry_period < timings.renew_deadline
}

#[allow(clippy::too_many_arguments)]
async fn renew_loop(
    leases: Api<Lease>,
    lease_name: String,
    identity: String,
    claim_uid: String,
    known: KnownLease,
    mut last_ok: Instant,
    timings: Resolved,
    lost: watch::Sender<Option<LostReason>>,
    renewed: watch::Sender<Instant>,
) {
    let renew_deadline = timings.renew_deadline;
    // The renew period after a success (counted from its start), the retry period after a failure.
    let mut wait = timings.renew_period.saturating_sub(last_ok.elapsed());
    loop {
        // Never sleep past the deadline: loss is detected within the renew deadline, not
        // deadline + retry period.
        let deadline = last_ok + renew_deadline;
        tokio::time::sleep_until(tokio::time::Instant::from_std((Instant::now() + wait).min(deadline))).await;
        wait = timings.retry_period;
        // Check the deadline before trying: after a pause (SIGSTOP, GC) the lease may already
        // belong to someone else, and a late renewal must not make us act as holder again.
        let budget = renew_deadline.saturating_sub(last_ok.elapsed());
        if budget.is_zero() {
            let _ = lost.send(Some(LostReason::RenewDeadlineExceeded(renew_deadline)));
            return;
        }
        let attempt = Instant::now();
        match tokio::time::timeout(budget, renew(&leases, &lease_name, &identity, &claim_uid, &known)).await {
            Ok(Ok(true)) => {
                last_ok = attempt;
                wait = timings.renew_period;
                let _ = renewed.send(attempt);
            }
            Ok(Ok(false)) => {
                let _ = lost.send(Some(LostReason::Taken));
                return;
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "renewal failed; retrying"),
            Err(_) => tracing::warn!("renewal timed out; retrying"),
        }
        if last_ok.elapsed() >= renew_deadline {
            let _ = lost.send(Some(LostReason::RenewDeadlineExceeded(renew_deadline)));
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(name: &str, holder: &str, uid: &str, token: &str) -> Lease {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "resourceVersion": "42", "annotations": {
                HOLDER_UID_ANNOTATION: uid, HOLDER_KIND_ANNOTATION: "Claim", TOKEN_ANNOTATION: token}},
            "spec": {"holderIdentity": holder}
        }))
        .unwrap()
    }

    /// A Lease watch that ran a second or more starts again at once; one that ended sooner, or
    /// could not start, waits 100 ms, then twice as long each time in a row, up to 30 s, and
    /// never gives up; a watch that ran resets the delay.
    #[test]
    fn a_lease_watch_is_started_again_at_once_after_it_ran_and_backs_off_when_it_ends_at_once() {
        assert_eq!(rewatch_delay(Duration::ZERO, true), Duration::ZERO);
        let mut d = Duration::ZERO;
        let mut seen = vec![];
        for _ in 0..12 {
            d = rewatch_delay(d, false);
            seen.push(d.as_millis());
        }
        assert_eq!(seen, [100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000, 30000]);
        assert_eq!(rewatch_delay(d, true), Duration::ZERO, "a watch that ran resets the delay");
    }

    /// The renewal patch applies (RFC 6902, as the API server applies it) to a Lease that names
    /// the holder and its request, setting only `renewTime` (also where there was none); it fails
    /// on a Lease that names another request, another identity, or no request at all (a `test` on
    /// a missing member fails), and leaves that Lease as it was.
    #[test]
    fn the_renewal_patch_sets_renew_time_only_where_the_lease_names_the_request() {
        let now = MicroTime("2026-12-06T07:30:00.123456Z".parse().unwrap());
        let patch = renew_patch("a", "uid-1/2", now.clone());
        let ops = serde_json::to_value(&patch).unwrap();
        assert_eq!(ops[1]["path"], "/metadata/annotations/leasehold.dev~1holder-uid");
        let ours = serde_json::to_value(lease("l", "a", "uid-1/2", "7")).unwrap();
        let mut doc = ours.clone();
        json_patch::patch(&mut doc, &patch).expect("applies to our Lease");
        let mut want = ours.clone();
        want["spec"]["renewTime"] = serde_json::to_value(&now).unwrap();
        assert_eq!(doc, want, "only renewTime is set");
        let mut unannotated = ours.clone();
        unannotated["metadata"]["annotations"].as_object_mut().unwrap().remove(HOLDER_UID_ANNOTATION);
        for other in [
            serde_json::to_value(lease("l", "a", "uid-1/1", "7")).unwrap(),
            serde_json::to_value(lease("l", "b", "uid-1/2", "7")).unwrap(),
            unannotated,
            serde_json::json!({"metadata": {"name": "l"}, "spec": {}}),
        ] {
            let mut doc = other.clone();
            assert!(json_patch::patch(&mut doc, &patch).is_err(), "refused on {other}");
            assert_eq!(doc, other, "left as it was");
        }
    }

    /// The wait for the grant reads it from a Lease only when the Lease names this claim (identity
    /// and UID), is one of this lock's slots, and carries a valid token.
    #[test]
    fn a_grant_is_read_from_a_lease_only_when_it_names_the_claim_with_a_token() {
        let known = |l: Lease| Some(Known::Object(Box::new(l)));
        let db = lease("db", "me", "u1", "7");
        assert_eq!(grant_in(&db, "db", "me", "u1"), Some((7, 0, "db".into(), known(db.clone()))));
        let slot2 = lease("db-slot-2", "me", "u1", "9");
        assert_eq!(grant_in(&slot2, "db", "me", "u1"), Some((9, 2, "db-slot-2".into(), known(slot2.clone()))));
        // Someone else, or the same identity under another claim (an earlier run's).
        assert_eq!(grant_in(&lease("db", "you", "u1", "7"), "db", "me", "u1"), None);
        assert_eq!(grant_in(&lease("db", "me", "u0", "7"), "db", "me", "u1"), None);
        // Not a slot of this lock (the label is on it, the name is not a slot's).
        assert_eq!(grant_in(&lease("db-slot-02", "me", "u1", "7"), "db", "me", "u1"), None);
        assert_eq!(grant_in(&lease("other", "me", "u1", "7"), "db", "me", "u1"), None);
        // No usable token: the claim's status brings the grant instead.
        assert_eq!(grant_in(&lease("db", "me", "u1", "x"), "db", "me", "u1"), None);
        assert_eq!(grant_in(&lease("db", "me", "u1", "0"), "db", "me", "u1"), None);
    }

    /// The release names the hinted claim with the hinted token and removes the hint (issue 12);
    /// without a hint it clears the holder and keeps the token.
    #[test]
    fn the_release_hands_over_to_the_next_holder_hint_or_clears_the_holder() {
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let mut l = lease("db", "me", "u1", "7");
        let hint = crate::lock::grant::Next { identity: "you".into(), uid: "u2".into(), token: 8 };
        crate::lease::put_next(&mut l, Some(&hint));
        hand_over(&mut l, now);
        assert!(names_us(&l, "you", "u2"));
        assert_eq!(grant_in(&l, "db", "you", "u2").map(|g| g.0), Some(8));
        assert_eq!(l.annotations().get(HOLDER_KIND_ANNOTATION).map(String::as_str), Some("Claim"));
        let spec = l.spec.as_ref().unwrap();
        assert_eq!((spec.renew_time.clone(), spec.lease_transitions), (Some(MicroTime(now)), Some(1)));
        assert_eq!(crate::lease::next(&l), None);
        // Again, without a hint: free, the last token kept.
        hand_over(&mut l, now);
        assert_eq!(l.spec.as_ref().unwrap().holder_identity, None);
        assert_eq!(l.annotations().get(TOKEN_ANNOTATION).map(String::as_str), Some("8"));
        assert!(l.annotations().get(HOLDER_UID_ANNOTATION).is_none());
    }

    /// The handover writes the lock's lease duration the operator's hint carries (the lock's
    /// value when the hint was written) into the Lease: a value changed on the lock reaches a
    /// grant passed on from claim to claim. A waiter's own hint carries none: the Lease's stays.
    #[test]
    fn the_handover_writes_the_lease_duration_the_operator_s_hint_carries() {
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let mut lock = crate::crd::DistributedLock::new("db", Default::default());
        lock.spec.lease_duration_seconds = 60;
        let secs = |l: &Lease| l.spec.as_ref().and_then(|s| s.lease_duration_seconds);
        let hint = crate::lock::grant::Next { identity: "you".into(), uid: "u2".into(), token: 8 };
        let mut l = lease("db", "me", "u1", "7");
        l.spec.as_mut().unwrap().lease_duration_seconds = Some(15);
        let mut hinted = crate::lease::with_next(&lock, &l, Some(&hint), None);
        assert_eq!(crate::lease::next_lease_duration(&hinted), Some(Duration::from_secs(60)));
        hand_over(&mut hinted, now);
        assert_eq!(secs(&hinted), Some(60), "the hint's 60 s, not the last grant's 15 s");
        assert!(crate::lease::next_lease_duration(&hinted).is_none(), "used up with the hint");
        // A waiter's own hint (put_next alone), even over an operator's earlier one.
        let mut own = crate::lease::with_next(&lock, &l, Some(&hint), None);
        crate::lease::put_next(&mut own, Some(&hint));
        hand_over(&mut own, now);
        assert_eq!(secs(&own), Some(15));
    }

    /// A standing claim's release lists its request as released, drops the same claim's older
    /// requests (its request only grows) but the one its `spec.request` still shows, and keeps
    /// every other claim's entries in order.
    #[test]
    fn a_release_lists_its_request_and_drops_only_its_own_claims_older_requests() {
        let list = |v: &[&str]| v.iter().map(|e| e.to_string()).collect::<Vec<_>>();
        assert_eq!(released_after(&[], "c1/1", None), list(&["c1/1"]));
        assert_eq!(released_after(&list(&["c2/4", "c1/1", "c3/9"]), "c1/2", None), list(&["c2/4", "c3/9", "c1/2"]));
        // A prefix of another claim's UID is another claim.
        assert_eq!(released_after(&list(&["c1x/1"]), "c1/2", None), list(&["c1x/1", "c1/2"]));
        // Requests 2 and 3 arrived by the Lease: spec.request still shows 1, whose entry stays
        // (only if listed: the chart's Lease policy lets a release add nothing but its request).
        assert_eq!(released_after(&list(&["c1/1"]), "c1/2", Some("c1/1")), list(&["c1/1", "c1/2"]));
        assert_eq!(released_after(&list(&["c1/1", "c1/2"]), "c1/3", Some("c1/1")), list(&["c1/1", "c1/3"]));
        assert_eq!(released_after(&list(&["c2/4"]), "c1/3", Some("c1/1")), list(&["c2/4", "c1/3"]));
        assert_eq!(released_after(&list(&["c1/3"]), "c1/3", Some("c1/3")), list(&["c1/3"]));
    }

    /// The Lease write of a standing claim's release names its request as released, whether it
    /// frees the Lease or hands it to the hint; the wait for the grant of request r reads a Lease
    /// that names the request UID, not the bare claim UID.
    #[test]
    fn a_standing_claims_grant_is_read_by_request_uid() {
        let r2 = request_uid("c1", 2);
        let l = lease("db", "me", &r2, "7");
        assert_eq!(grant_in(&l, "db", "me", &r2).map(|g| g.0), Some(7));
        assert_eq!(grant_in(&l, "db", "me", "c1"), None);
        assert_eq!(grant_in(&l, "db", "me", &request_uid("c1", 1)), None);
    }

    /// Issue 12: an arrival by the Lease raises only the library's own request count, so the
    /// next request is one above the higher of that count and `spec.request` as last seen.
    #[test]
    fn the_next_request_is_above_both_the_local_count_and_spec_request() {
        assert_eq!(next_request(1, 1), 2);
        // Requests 2 and 3 arrived by the Lease; spec.request stayed at 1.
        assert_eq!(next_request(3, 1), 4);
        // A re-arrival by the claim (or anything else) raised spec.request past the count.
        assert_eq!(next_request(3, 5), 6);
        assert_eq!(next_request(i64::MAX, 1), i64::MAX);
    }

    /// A request that arrived by the Lease as its hint is displaced once a version of the Lease
    /// names it neither as next holder nor as holder.
    #[test]
    fn a_lease_arrival_is_displaced_when_the_lease_names_it_neither_as_next_nor_as_holder() {
        let me = request_uid("c1", 2);
        let hint = |uid: &str| Next { identity: "x".into(), uid: uid.into(), token: 8 };
        let held_by =
            |uid: &str| crate::lock::grant::Holder { name: "h".into(), uid: Some(uid.into()), kind: HolderKind::Claim };
        let base = LeaseView { trusted: true, token: 7, holder: Some(held_by("other")), ..LeaseView::default() };
        // Hinted: waiting as it should.
        assert!(!displaced(&LeaseView { next: Some(hint(&me)), ..base.clone() }, &me));
        // Handed over to it (the grant_in check comes first, but it is not displaced either).
        assert!(!displaced(&LeaseView { holder: Some(held_by(&me)), ..base.clone() }, &me));
        // The operator hinted an older waiter; or the same claim's older request; or nobody.
        assert!(displaced(&LeaseView { next: Some(hint("c0/1")), ..base.clone() }, &me));
        assert!(displaced(&LeaseView { next: Some(hint(&request_uid("c1", 1))), ..base.clone() }, &me));
        assert!(displaced(&base, &me));
        // Freed without a handover, or a recreated Lease.
        assert!(displaced(&LeaseView { holder: None, ..base.clone() }, &me));
        assert!(displaced(&LeaseView::default(), &me));
    }

    /// An arrival on a free Lease writes the grant the operator would: holder, request UID, kind
    /// Claim, token, times, one more transition; duration, floor, ceiling and the released list
    /// stay.
    #[test]
    fn an_arrival_on_a_free_lease_takes_it_and_keeps_everything_else() {
        use crate::lock::{RELEASED_ANNOTATION, TOKEN_CEILING_ANNOTATION, TOKEN_FLOOR_ANNOTATION};
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let mut l: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db", "resourceVersion": "42", "annotations": {
                TOKEN_ANNOTATION: "7", TOKEN_FLOOR_ANNOTATION: "0", TOKEN_CEILING_ANNOTATION: "100",
                RELEASED_ANNOTATION: "c1/1,c2/3"}},
            "spec": {"leaseDurationSeconds": 15, "leaseTransitions": 4}
        }))
        .unwrap();
        let me = request_uid("c1", 2);
        let Some(LeaseArrival::Take(token)) = lease_arrival(&crate::lease::view(&l), "me", &me) else {
            panic!("a free Lease with a ceiling is taken")
        };
        assert_eq!(token, 8);
        arrive(&mut l, &LeaseArrival::Take(token), "me", &me, now);
        assert_eq!(grant_in(&l, "db", "me", &me).map(|g| g.0), Some(8));
        let v = crate::lease::view(&l);
        assert_eq!(v.holder.map(|h| h.kind), Some(HolderKind::Claim));
        assert_eq!((v.floor, v.ceiling, v.next, v.trusted), (0, Some(100), None, true));
        assert_eq!(v.released, ["c1/1", "c2/3"]);
        let spec = l.spec.as_ref().unwrap();
        assert_eq!((spec.lease_duration_seconds, spec.lease_transitions), (Some(15), Some(5)));
        assert_eq!((spec.acquire_time.clone(), spec.renew_time.clone()), (Some(MicroTime(now)), Some(MicroTime(now))));
        assert_eq!(l.metadata.resource_version.as_deref(), Some("42"), "a compare-and-swap on the version read");
    }

    /// A grant whose Lease says a shorter lease duration than the lock did when the holder queued
    /// (lowered in between) is renewed against the Lease's; a longer or missing one changes
    /// nothing; timings set that do not fit the shorter value give way to its defaults.
    #[test]
    fn a_grant_s_shorter_lease_duration_shortens_its_timings() {
        let s = Duration::from_secs;
        let read = resolve_timings(s(60), Timings::default()).unwrap();
        assert_eq!(granted_timings(read, None, Timings::default()), read);
        assert_eq!(granted_timings(read, Some(s(90)), Timings::default()), read);
        let cut = granted_timings(read, Some(s(3)), Timings::default());
        assert_eq!((cut.lease_duration, cut.renew_deadline, cut.renew_period), (s(3), s(2), s(1)));
        let set = Timings { renew_deadline: Some(s(30)), ..Timings::default() };
        let read = resolve_timings(s(60), set).unwrap();
        assert_eq!(read.renew_deadline, s(30));
        let cut = granted_timings(read, Some(s(15)), set);
        assert_eq!((cut.lease_duration, cut.renew_deadline), (s(15), s(10)), "the defaults for 15 s");
        let fits = Timings { renew_deadline: Some(s(9)), ..Timings::default() };
        let cut = granted_timings(resolve_timings(s(12), fits).unwrap(), Some(s(10)), fits);
        assert_eq!((cut.lease_duration, cut.renew_deadline), (s(10), s(9)), "a set deadline that fits stays");
    }

    #[test]
    fn default_timings_follow_client_go_ratios_and_renew_every_third_of_the_lease() {
        let t = resolve_timings(Duration::from_secs(15), Timings::default()).unwrap();
        let s = Duration::from_secs;
        assert_eq!(
            t,
            Resolved { lease_duration: s(15), renew_deadline: s(10), retry_period: s(2), renew_period: s(5) }
        );
        // A retry period above a third of the lease raises the renew period with it.
        let t = Timings { retry_period: Some(s(6)), ..Timings::default() };
        assert_eq!(resolve_timings(s(15), t).unwrap().renew_period, s(6));
    }

    /// At the default timings (renew deadline 10 s, retry period 2 s) a grant learned up to 8 s
    /// after its claim's send is held at once, past the renew period (5 s) too; from 8 s on it is
    /// proved by a first renewal.
    #[test]
    fn a_grant_is_held_at_once_while_a_retry_period_of_its_renew_deadline_is_left() {
        let t = resolve_timings(Duration::from_secs(15), Timings::default()).unwrap();
        let ms = Duration::from_millis;
        assert!(holds_at_once(ms(0), &t));
        assert!(holds_at_once(ms(6_000), &t), "past the renew period");
        assert!(holds_at_once(ms(7_999), &t));
        assert!(!holds_at_once(ms(8_000), &t), "only the retry period left");
        assert!(!holds_at_once(ms(12_000), &t), "past the renew deadline");
    }

    #[test]
    fn inconsistent_timings_are_rejected() {
        let s = |n| Some(Duration::from_secs(n));
        let t = Timings { renew_deadline: s(20), ..Timings::default() };
        assert!(resolve_timings(Duration::from_secs(15), t).is_err());
        let t = Timings { renew_deadline: s(5), retry_period: s(5), ..Timings::default() };
        assert!(resolve_timings(Duration::from_secs(15), t).is_err());
        let t = Timings { renew_period: s(10), ..Timings::default() };
        assert!(resolve_timings(Duration::from_secs(15), t).is_err(), "renew period = deadline");
        let t = Timings { renew_period: s(1), ..Timings::default() };
        assert!(resolve_timings(Duration::from_secs(15), t).is_err(), "renew period < retry period");
    }

    #[test]
    fn a_timing_error_says_which_values_were_set_and_which_defaulted() {
        let t = Timings { renew_deadline: Some(Duration::from_secs(1)), ..Timings::default() };
        let Err(HolderError::InvalidTimings(m)) = resolve_timings(Duration::from_secs(15), t) else {
            panic!("a 1 s renew deadline under the default 2 s retry period must be refused")
        };
        assert!(m.contains("retry period 2s (the default: 2/15 of the lease duration"), "{m}");
        assert!(m.contains("renew deadline 1s (as set)"), "{m}");
        // A newcomer trial: zero blamed on another value, a set retry period silently raised.
        let msg = |t: Timings| match resolve_timings(Duration::from_secs(15), t) {
            Err(HolderError::InvalidTimings(m)) => m,
            other => panic!("{t:?} must be refused, got {other:?}"),
        };
        let zero = Some(Duration::ZERO);
        assert_eq!(
            msg(Timings { renew_deadline: zero, ..Timings::default() }),
            "renew deadline 0s (as set) must be positive"
        );
        assert_eq!(
            msg(Timings { renew_period: zero, ..Timings::default() }),
            "renew period 0s (as set) must be positive"
        );
        for r in [Duration::ZERO, Duration::from_millis(50)] {
            let m = msg(Timings { retry_period: Some(r), ..Timings::default() });
            assert!(m.starts_with(&format!("retry period {r:?} (as set) must be at least 100ms")), "{m}");
        }
        // A defaulted retry period is still raised to the minimum (a 1 s lease: 133 ms).
        let t = resolve_timings(Duration::from_millis(600), Timings::default()).unwrap();
        assert_eq!(t.retry_period, MIN_RETRY_PERIOD);
    }
}
