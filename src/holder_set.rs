//! Holding a **lock set** from a process (issue 14, `docs/multi-lock.md`, "Claims with a lock
//! set"): several locks of one namespace at once, all or nothing, each with its own fencing token.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use leasehold::holder_set::SetHolder;
//! let client = leasehold::client::try_default().await?;
//! let locks = ["db-writer".to_string(), "bucket-writer".to_string()];
//! let holder = SetHolder::new(client, "default", &locks, "migrator-1")?;
//! let guard = holder.acquire(None).await?;
//! let db_token = guard.token("db-writer"); // send each lock's token to its resource
//! tokio::select! {
//!     reason = guard.lost() => eprintln!("lost a lock of the set ({reason}): stop writing now"),
//!     _ = async { /* the work */ } => {}
//! }
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! How it works: [`SetHolder::enqueue`] creates one `DistributedLockClaim` with `spec.locks`
//! (`spec.lock` is the first lock). The operator grants each lock *tentatively* (the lock's Lease
//! names the claim, `status.tokens` records the token) and may take such a grant back; the claim's
//! `status.phase: Granted` is the commit: only then does [`SetTicket::wait`] return. While it
//! waits, the holder renews every Lease that names the claim every renew period (a tentative grant
//! unrenewed for `leaseDurationSeconds` makes the operator reject the claim). Once granted, every
//! lock is proved by a first renewal and then held like a single lock ([`crate::holder`]): renewed
//! in the background, lost when any renewal fails past the renew deadline or a Lease no longer
//! names the claim. The release frees every Lease (owner-verified compare-and-swap, no
//! next-holder handover), then deletes the claim.
//!
//! Guarantees are those of [`crate::holder`], per lock: an efficiency lock while the holder is
//! live, a correctness lock only with each lock's fencing token checked by its resource.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::FutureExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use crate::crd::{ClaimPhase, DistributedLock, DistributedLockClaim, DistributedLockClaimSpec, OnBusy};
use crate::holder::{
    Holder, HolderError, KnownLease, LockGuard, LostReason, Resolved, Single, Timings, clear_holder, delete_claim,
    granted_timings, renew_by_read, resolve_timings,
};

/// The most locks one claim may ask for (the CRD's `spec.locks` bound).
pub const MAX_LOCKS: usize = 8;

/// A would-be holder of a lock set under one identity.
#[derive(Clone)]
pub struct SetHolder {
    client: Client,
    namespace: String,
    /// The locks, in the caller's order without repeats (the first is the claim's `spec.lock`).
    locks: Vec<String>,
    identity: String,
    timings: Timings,
}

impl SetHolder {
    /// A holder of every lock in `locks` (2 to [`MAX_LOCKS`] distinct names, in `namespace`)
    /// under `identity` (each Lease's `holderIdentity`). Blank names and repeats are dropped.
    ///
    /// # Errors
    /// [`HolderError::InvalidSet`] with fewer than 2 or more than [`MAX_LOCKS`] distinct locks.
    pub fn new(client: Client, namespace: &str, locks: &[String], identity: &str) -> Result<Self, HolderError> {
        let mut set: Vec<String> = vec![];
        for l in locks.iter().map(|l| l.trim()).filter(|l| !l.is_empty()) {
            if !set.iter().any(|x| x == l) {
                set.push(l.to_string());
            }
        }
        if set.len() < 2 || set.len() > MAX_LOCKS {
            return Err(HolderError::InvalidSet(format!(
                "a lock set has 2 to {MAX_LOCKS} distinct locks, got {}: {}",
                set.len(),
                set.join(",")
            )));
        }
        Ok(SetHolder {
            client,
            namespace: namespace.into(),
            locks: set,
            identity: identity.into(),
            timings: Timings::default(),
        })
    }

    /// Overrides the renewal timings (resolved against each lock's `leaseDurationSeconds`).
    pub fn with_timings(mut self, timings: Timings) -> Self {
        self.timings = timings;
        self
    }

    /// The locks of the set, the claim's `spec.lock` first.
    pub fn locks(&self) -> &[String] {
        &self.locks
    }

    /// Waits (FIFO, with gated pods and other claims) until every lock is granted;
    /// `wait_timeout` bounds the wait. On error the claim is taken out of the queue.
    ///
    /// # Errors
    /// As [`SetTicket::wait`], and [`HolderError::LockNotFound`], [`HolderError::InvalidTimings`].
    pub async fn acquire(&self, wait_timeout: Option<Duration>) -> Result<SetGuard, HolderError> {
        let ticket = self.enqueue().await?;
        let result = ticket.wait(wait_timeout).await;
        if result.is_err() {
            ticket.cancel().await;
        }
        result
    }

    /// Reads every lock and resolves the timings against the shortest lease duration:
    /// `(lease duration, timings)`, plus each lock's own resolved timings.
    async fn read_timings(&self) -> Result<(Duration, Resolved, Vec<Resolved>), HolderError> {
        let api: Api<DistributedLock> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut shortest: Option<Duration> = None;
        let mut each = vec![];
        for l in &self.locks {
            let lock = api
                .get_opt(l)
                .await
                .map_err(|source| HolderError::Kube { op: "get DistributedLock", source })?
                .ok_or_else(|| HolderError::LockNotFound { namespace: self.namespace.clone(), lock: l.clone() })?;
            let d = Duration::from_secs(lock.spec.lease_duration_seconds.max(1) as u64);
            each.push(resolve_timings(d, self.timings)?);
            shortest = Some(shortest.map_or(d, |s| s.min(d)));
        }
        let lease = shortest.unwrap_or(Duration::from_secs(15));
        Ok((lease, resolve_timings(lease, self.timings)?, each))
    }

    /// Joins the queue of every lock without waiting: creates the claim (`spec.locks`) and
    /// returns a [`SetTicket`] to wait on or to cancel.
    ///
    /// # Errors
    /// [`HolderError::LockNotFound`], [`HolderError::InvalidTimings`], [`HolderError::Kube`]
    /// (the API server refuses the claim, e.g. a lock name of more than 63 characters).
    pub async fn enqueue(&self) -> Result<SetTicket, HolderError> {
        let (lease_duration, timings, each) = self.read_timings().await?;
        let claims: Api<DistributedLockClaim> = Api::namespaced(self.client.clone(), &self.namespace);
        let claim = DistributedLockClaim {
            metadata: ObjectMeta { generate_name: Some(format!("{}-", self.locks[0])), ..ObjectMeta::default() },
            spec: DistributedLockClaimSpec {
                lock: self.locks[0].clone(),
                identity: self.identity.clone(),
                on_busy: OnBusy::Wait,
                max_wait_seconds: None,
                locks: Some(self.locks.clone()),
                request: None,
                request_time: None,
            },
            status: None,
        };
        let queued = Instant::now();
        let claim = claims
            .create(&PostParams::default(), &claim)
            .await
            .map_err(|source| HolderError::Kube { op: "create claim", source })?;
        Ok(SetTicket {
            holder: self.clone(),
            claims,
            claim_name: claim.name_any(),
            claim_uid: claim.uid().unwrap_or_default(),
            lease_duration,
            timings,
            each,
            queued,
        })
    }
}

/// A place in the queues of a lock set (one `DistributedLockClaim`), from [`SetHolder::enqueue`].
pub struct SetTicket {
    holder: SetHolder,
    claims: Api<DistributedLockClaim>,
    claim_name: String,
    claim_uid: String,
    lease_duration: Duration,
    /// Against the shortest lease duration of the set: the renewals while waiting.
    timings: Resolved,
    /// Per lock (the set's order): the timings of holding it.
    each: Vec<Resolved>,
    queued: Instant,
}

impl SetTicket {
    /// The shortest `leaseDurationSeconds` of the set's locks.
    pub fn lease_duration(&self) -> Duration {
        self.lease_duration
    }

    /// The renew deadline against [`SetTicket::lease_duration`]: without a successful renewal of
    /// a lock for this long, the set counts as lost.
    pub fn renew_deadline(&self) -> Duration {
        self.timings.renew_deadline
    }

    /// The name of this ticket's DistributedLockClaim (generated: `<first lock>-<suffix>`).
    pub fn claim_name(&self) -> &str {
        &self.claim_name
    }

    /// Waits until the claim is granted (`status.phase: Granted`, a token for every lock in
    /// `status.tokens`), renewing every Lease that names the claim every renew period meanwhile;
    /// then proves each lock with a first renewal and holds it. A Lease that names the claim is
    /// never taken for a grant by itself: it may be a tentative grant that the operator takes
    /// back. On error the claim stays queued: call [`SetTicket::cancel`].
    ///
    /// # Errors
    /// [`HolderError::WaitTimeout`], [`HolderError::Rejected`] (the claim was rejected, e.g. its
    /// tentative grant went unrenewed), [`HolderError::Expired`], [`HolderError::ClaimDeleted`],
    /// [`HolderError::NotHolder`] (a lock was lost between the commit and its first renewal),
    /// [`HolderError::Kube`].
    pub async fn wait(&self, timeout: Option<Duration>) -> Result<SetGuard, HolderError> {
        let wait = self.wait_for_commit();
        let tokens = match timeout {
            Some(t) => tokio::time::timeout(t, wait)
                .await
                .unwrap_or_else(|_| Err(HolderError::WaitTimeout(t, self.holder.locks.join(","))))?,
            None => wait.await?,
        };
        let mut guards = vec![];
        for (lock, timings) in self.holder.locks.iter().zip(&self.each) {
            let h = Holder::new(self.holder.client.clone(), &self.holder.namespace, lock, &self.holder.identity)
                .with_timings(self.holder.timings);
            let claim = (self.claim_name.clone(), self.claim_uid.clone());
            let token = tokens.get(lock).copied().unwrap_or_default();
            match LockGuard::start(
                &h,
                claim,
                (token, 0),
                (lock.clone(), None, None),
                *timings,
                self.queued,
                Single::SetMember,
            )
            .await
            {
                Ok(g) => guards.push(g),
                Err(e) => {
                    for g in guards {
                        let _ = g.release().await;
                    }
                    return Err(e);
                }
            }
        }
        Ok(SetGuard::new(self, tokens, guards))
    }

    async fn wait_for_commit(&self) -> Result<BTreeMap<String, i64>, HolderError> {
        let by_name = format!("metadata.name={}", self.claim_name);
        let mut events =
            watcher(self.claims.clone(), watcher::Config::default().fields(&by_name)).default_backoff().boxed();
        let leases: Api<Lease> = Api::namespaced(self.holder.client.clone(), &self.holder.namespace);
        let mut period = self.timings.renew_period;
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut listed = false;
        // The locks the claim's status records as tentatively granted, as last seen.
        let mut recorded: Vec<String> = vec![];
        loop {
            let renew_now = tokio::select! {
                _ = tick.tick() => true,
                ev = events.next() => {
                    let c = match ev {
                        Some(Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c))) => c,
                        Some(Ok(watcher::Event::Init)) => { listed = false; continue }
                        Some(Ok(watcher::Event::InitDone)) if listed => continue,
                        Some(Ok(watcher::Event::Delete(_) | watcher::Event::InitDone)) => {
                            return Err(HolderError::ClaimDeleted(self.claim_name.clone()));
                        }
                        Some(Err(e)) => {
                            tracing::warn!(error = %e, "claim watch error (retrying)");
                            continue;
                        }
                        None => return Err(HolderError::Rejected("claim watch ended".into())),
                    };
                    listed = true;
                    if c.metadata.uid.as_deref() != Some(self.claim_uid.as_str()) {
                        return Err(HolderError::ClaimDeleted(self.claim_name.clone()));
                    }
                    let status = c.status.unwrap_or_default();
                    match status.phase {
                        Some(ClaimPhase::Granted) if self.holder.locks.iter().all(|l| status.tokens.contains_key(l)) => {
                            return Ok(status.tokens);
                        }
                        Some(ClaimPhase::Rejected) => return Err(HolderError::Rejected(status.message.unwrap_or_default())),
                        Some(ClaimPhase::Expired) => return Err(HolderError::Expired(status.message.unwrap_or_default())),
                        _ => {}
                    }
                    // A new tentative grant: renew it at once, which also learns its lease
                    // duration (below), rather than up to a renew period later.
                    let now: Vec<String> = status.tokens.keys().cloned().collect();
                    let new_grant = now.iter().any(|l| !recorded.contains(l));
                    recorded = now;
                    new_grant
                }
            };
            if !renew_now {
                continue;
            }
            // Renew the tentative grants: one GET per lock, a write only where the Lease names
            // this claim; at the pace of the shortest lease duration they were granted with (a
            // value lowered on a lock after this holder read it applies to its grant:
            // `holder::granted_timings`).
            let mut timings = self.timings;
            for lock in &self.holder.locks {
                let fresh = KnownLease::default();
                match renew_by_read(&leases, lock, &self.holder.identity, &self.claim_uid, &fresh).await {
                    Ok(true) => timings = granted_timings(timings, fresh.lease_duration(), self.holder.timings),
                    Ok(false) => {}
                    Err(e) => tracing::debug!(error = %e, lock, "renewing a tentative grant failed (retried)"),
                }
            }
            if timings.renew_period < period {
                period = timings.renew_period;
                tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            }
        }
    }

    /// Leaves the queues: frees every Lease that names the claim (owner-verified
    /// compare-and-swap: a tentative or final grant goes to the next waiter at once), then
    /// deletes the claim (UID precondition).
    pub async fn cancel(self) {
        free_all(&self.holder, &self.claims, &self.claim_name, &self.claim_uid).await;
    }
}

/// Frees every Lease of the set that names the claim, then deletes the claim.
async fn free_all(holder: &SetHolder, claims: &Api<DistributedLockClaim>, name: &str, uid: &str) {
    let leases: Api<Lease> = Api::namespaced(holder.client.clone(), &holder.namespace);
    for lock in &holder.locks {
        if let Err(e) = clear_holder(&leases, lock, &holder.identity, uid, &KnownLease::default(), false, None).await {
            tracing::debug!(error = %e, lock, "freeing a Lease of the set failed (it expires)");
        }
    }
    delete_claim(claims, name, uid).await;
}

/// A held lock set: every lock renewed in the background until released or lost.
///
/// Dropping it without [`SetGuard::release`] releases in the background (each Lease, then the
/// claim), as [`LockGuard`] does, best effort.
pub struct SetGuard {
    holder: SetHolder,
    claims: Api<DistributedLockClaim>,
    claim_name: String,
    claim_uid: String,
    tokens: BTreeMap<String, i64>,
    guards: Vec<LockGuard>,
    renewed_rx: watch::Receiver<Instant>,
    combiner: tokio::task::JoinHandle<()>,
}

impl SetGuard {
    fn new(t: &SetTicket, tokens: BTreeMap<String, i64>, guards: Vec<LockGuard>) -> SetGuard {
        let rxs: Vec<watch::Receiver<Instant>> = guards.iter().map(LockGuard::last_renewal).collect();
        let oldest =
            |rxs: &[watch::Receiver<Instant>]| rxs.iter().map(|r| *r.borrow()).min().unwrap_or_else(Instant::now);
        let (tx, renewed_rx) = watch::channel(oldest(&rxs));
        // The set's last renewal is its oldest lock's: the renew deadline runs from it.
        let combiner = tokio::spawn(async move {
            let mut rxs = rxs;
            loop {
                let (changed, _, rest) = futures::future::select_all(rxs.iter_mut().map(|r| r.changed().boxed())).await;
                drop(rest);
                if changed.is_err() {
                    return;
                }
                let _ = tx.send(oldest(&rxs));
            }
        });
        SetGuard {
            holder: t.holder.clone(),
            claims: t.claims.clone(),
            claim_name: t.claim_name.clone(),
            claim_uid: t.claim_uid.clone(),
            tokens,
            guards,
            renewed_rx,
            combiner,
        }
    }

    /// The fencing token of `lock`'s grant (`None` for a lock outside the set).
    pub fn token(&self, lock: &str) -> Option<i64> {
        self.tokens.get(lock).copied()
    }

    /// Every lock's token (lock name → token), as the claim's `status.tokens` recorded them.
    pub fn tokens(&self) -> &BTreeMap<String, i64> {
        &self.tokens
    }

    /// The locks of the set, the claim's `spec.lock` first.
    pub fn locks(&self) -> &[String] {
        &self.holder.locks
    }

    /// The identity the set is held under.
    pub fn identity(&self) -> &str {
        &self.holder.identity
    }

    /// The start of the oldest lock's last successful renewal (this process's monotonic clock):
    /// the set's renew deadline runs from it.
    pub fn last_renewal(&self) -> watch::Receiver<Instant> {
        self.renewed_rx.clone()
    }

    /// The shortest lease duration of the set's grants ([`LockGuard::lease_duration`]): the
    /// operator takes no lock of the set back sooner than this after its last renewal.
    pub fn lease_duration(&self) -> Duration {
        self.guards.iter().map(LockGuard::lease_duration).min().unwrap_or_default()
    }

    /// The shortest renew deadline of the set's grants ([`LockGuard::renew_deadline`]): without a
    /// successful renewal of every lock for this long, the set counts as lost.
    pub fn renew_deadline(&self) -> Duration {
        self.guards.iter().map(LockGuard::renew_deadline).min().unwrap_or_default()
    }

    /// Whether any lock of the set has been lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Resolves when any lock of the set is lost (never, while every renewal succeeds).
    pub async fn lost(&self) -> LostReason {
        futures::future::select_all(self.guards.iter().map(|g| g.lost().boxed())).await.0
    }

    /// Releases the set: stops renewing, frees every Lease that still names the claim (each an
    /// owner-verified compare-and-swap; no next-holder handover), then deletes the claim.
    ///
    /// # Errors
    /// The first lock's error, after every lock was tried: [`HolderError::NotHolder`] (its Lease
    /// no longer names the claim), [`HolderError::Kube`].
    pub async fn release(mut self) -> Result<(), HolderError> {
        self.combiner.abort();
        let mut first = Ok(());
        for g in std::mem::take(&mut self.guards) {
            if let Err(e) = g.release().await
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        delete_claim(&self.claims, &self.claim_name, &self.claim_uid).await;
        first
    }
}

impl Drop for SetGuard {
    fn drop(&mut self) {
        self.combiner.abort();
        if self.guards.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let guards = std::mem::take(&mut self.guards);
        let (claims, name, uid) = (self.claims.clone(), self.claim_name.clone(), self.claim_uid.clone());
        runtime.spawn(async move {
            for g in guards {
                let _ = g.release().await;
            }
            delete_claim(&claims, &name, &uid).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lock_set_needs_two_to_eight_distinct_locks() {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let s = |ls: &[&str]| ls.iter().map(|l| l.to_string()).collect::<Vec<_>>();
        let h = SetHolder::new(client.clone(), "ns", &s(&["b", " a ", "b", ""]), "me").unwrap();
        assert_eq!(h.locks(), ["b", "a"], "the caller's order, without blanks and repeats");
        assert!(matches!(SetHolder::new(client.clone(), "ns", &s(&["a", "a"]), "me"), Err(HolderError::InvalidSet(_))));
        let nine: Vec<String> = (0..9).map(|i| format!("l{i}")).collect();
        assert!(matches!(SetHolder::new(client, "ns", &nine, "me"), Err(HolderError::InvalidSet(_))));
    }
}
