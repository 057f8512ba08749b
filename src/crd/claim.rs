//! The `DistributedLockClaim` custom resource (`leasehold.dev/v1alpha1`, short name `dlclaim`):
//! how a running process (a `leasehold lock` CLI, a service using the library, a laptop or CI
//! runner outside any pod) asks for a lock. It joins the same FIFO queue as gated pods.
//!
//! Holder kinds differ explicitly, never by guessing from behaviour:
//! - a **pod** holder is held by its lifecycle: it holds until it is terminal or gone;
//! - a **claim** holder must **renew** the Lease (`spec.renewTime`) at least every
//!   `leaseDurationSeconds` of the lock; the operator takes the lock back when it has not seen a
//!   renewal for that long on its own monotonic clock (as client-go's leader election does).

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A request for a lock by a named identity.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "leasehold.dev",
    version = "v1alpha1",
    kind = "DistributedLockClaim",
    plural = "distributedlockclaims",
    shortname = "dlclaim",
    namespaced,
    status = "DistributedLockClaimStatus",
    printcolumn = r#"{"name":"Lock","type":"string","jsonPath":".spec.lock"}"#,
    printcolumn = r#"{"name":"Identity","type":"string","jsonPath":".spec.identity"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Token","type":"integer","jsonPath":".status.token"}"#,
    printcolumn = r#"{"name":"Request","type":"integer","jsonPath":".spec.request"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.lock == oldSelf.lock && self.identity == oldSelf.identity && self.onBusy == oldSelf.onBusy && has(self.maxWaitSeconds) == has(oldSelf.maxWaitSeconds) && (!has(self.maxWaitSeconds) || self.maxWaitSeconds == oldSelf.maxWaitSeconds) && has(self.locks) == has(oldSelf.locks) && (!has(self.locks) || self.locks == oldSelf.locks)").message("a claim's spec is immutable except spec.request and spec.requestTime (a standing claim's next request): delete it and create a new one"))]
#[x_kube(validation = Rule::new("has(self.request) == has(oldSelf.request)").message("spec.request cannot be added to or removed from an existing claim: a standing claim is created with spec.request 1, a one-shot claim without it"))]
#[x_kube(validation = Rule::new("!has(self.request) || !has(oldSelf.request) || self.request >= oldSelf.request").message("spec.request only grows: each acquire() of a standing claim raises it by one"))]
#[x_kube(validation = Rule::new("!has(self.request) || !has(oldSelf.request) || self.request > oldSelf.request || has(self.requestTime) == has(oldSelf.requestTime) && (!has(self.requestTime) || self.requestTime == oldSelf.requestTime)").message("spec.requestTime changes only with spec.request: it is when the process made that request"))]
#[x_kube(validation = Rule::new("!has(self.request) || !has(self.locks)").message("spec.request (a standing claim) cannot be combined with spec.locks: a claim for a lock set is one-shot, delete it and create a new one per acquire"))]
#[x_kube(validation = Rule::new("!has(self.locks) || self.locks[0] == self.lock").message("spec.locks must start with spec.lock (the lock kubectl get dlclaim shows)"))]
#[x_kube(validation = Rule::new("!has(self.locks) || self.locks.all(l, self.locks.exists_one(m, m == l))").message("spec.locks names a lock twice: every lock of a set is held once"))]
#[x_kube(validation = Rule::new("!has(self.locks) || ((!has(self.onBusy) || self.onBusy == 'Wait') && !has(self.maxWaitSeconds))").message("a claim with spec.locks waits in FIFO order without a time limit: onBusy Skip and maxWaitSeconds are not served for lock sets (not model-checked with them)"))]
pub struct DistributedLockClaimSpec {
    /// Name of the `DistributedLock` (same namespace).
    #[schemars(length(min = 1, max = 253))]
    pub lock: String,
    /// Who is asking: written to the Lease's `holderIdentity` when granted (a pod name, a host
    /// name, a CI job id).
    #[schemars(length(min = 1, max = 253))]
    pub identity: String,
    /// What to do when the lock is busy: `Wait` (default, FIFO) or `Skip` (give up at once).
    #[serde(default)]
    pub on_busy: OnBusy,
    /// Give up after waiting this many seconds (1..=604800); unset waits forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 604800))]
    pub max_wait_seconds: Option<i32>,
    /// Every lock the claim asks for at once (issue 14, `docs/multi-lock.md`): 2 to 8 names of
    /// `DistributedLock`s in the claim's namespace, `spec.lock` first, no repeats (each at most 63
    /// characters, as lock names are). The claim is granted (`status.phase: Granted`) only once
    /// it holds all of them, each with its own fencing token in `status.tokens`; until then each
    /// lock's grant is tentative and may be taken back (`status.withdrawn`). Unset: the claim
    /// asks for `spec.lock` alone, as before. `onBusy: Skip` and `maxWaitSeconds` are refused
    /// with a set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 8), inner(length(min = 1, max = 63)))]
    pub locks: Option<Vec<String>>,
    /// A standing claim's current request (issue 12, `docs/two-writes-per-grant.md`): its process
    /// keeps the claim across acquire/release cycles and raises this by one per acquire (a
    /// merge patch, the only spec change allowed besides `requestTime`; it only grows). Each
    /// request is queued, granted, rejected or released on its own, under the request UID
    /// `<metadata.uid>/<request>` ([`crate::lock::grant::request_uid`]) that the Lease's
    /// `leasehold.dev/holder-uid` names. Unset: a one-shot claim (one grant, then deleted), as
    /// before. Refused with `locks`, and cannot be added to or removed from an existing claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub request: Option<i64>,
    /// When the process made request `request` (a standing claim): its place in the FIFO queue,
    /// as `metadata.creationTimestamp` is a one-shot claim's. Missing: the creation timestamp.
    /// Changes only together with `request`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>,
}

impl DistributedLockClaimSpec {
    /// The claim's lock set: `spec.locks` (blanks and repeats left out) with `spec.lock`, sorted;
    /// empty for a claim that asks for `spec.lock` alone. The same shape as a pod's
    /// [`crate::lock::lock_set`].
    pub fn lock_set(&self) -> Vec<String> {
        let Some(locks) = &self.locks else { return vec![] };
        let mut set: std::collections::BTreeSet<String> =
            locks.iter().map(|l| l.trim()).filter(|l| !l.is_empty()).map(String::from).collect();
        set.insert(self.lock.clone());
        if set.len() < 2 {
            return vec![];
        }
        set.into_iter().collect()
    }

    /// Whether the claim asks for `lock`: its `spec.lock`, or a lock of its set.
    pub fn concerns(&self, lock: &str) -> bool {
        self.lock == lock || self.locks.as_ref().is_some_and(|ls| ls.iter().any(|l| l.trim() == lock))
    }
}

/// What a claim wants when the lock is busy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
pub enum OnBusy {
    /// Queue in FIFO order.
    #[default]
    Wait,
    /// Give up at once when the lock cannot be granted.
    Skip,
}

/// Where a claim stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum ClaimPhase {
    /// Queued. A claim with `spec.locks` stays `Waiting` while it holds some of its locks
    /// tentatively (`status.tokens`), until it holds all of them.
    Waiting,
    /// Holds the lock with `status.token` (a claim with `spec.locks`: holds every lock of its
    /// set, each with its token in `status.tokens`).
    Granted,
    /// Gave up (skip policy or max wait), or, for a claim with `spec.locks`, its process stopped
    /// renewing a Lease that named it tentatively (`HolderLeaseExpired`): `status.reason` says
    /// which. Never granted afterwards.
    Rejected,
    /// Was granted, and the operator took the grant back: the holder stopped renewing for
    /// `leaseDurationSeconds` (`status.reason` `HolderLeaseExpired`), or the Lease moved on to a
    /// later grant or to nobody (`GrantEnded`). `status.token` keeps the token of the grant,
    /// `status.lastTransitionTime` says when. The claim is never granted again.
    Expired,
}

/// Observed state of a claim, written by the operator.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DistributedLockClaimStatus {
    /// `Waiting`, `Granted`, `Rejected` or `Expired`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ClaimPhase>,
    /// The request of a standing claim (`spec.request`) that `phase`, `token`, `reason`,
    /// `message`, `slot`, `leaseName`, `lastTransitionTime` and `leaseResourceVersion` describe.
    /// Absent: a one-shot claim (the operator sets it in every status it writes for a standing
    /// claim, so a standing claim's status without it describes none of its requests). A status
    /// for an older request than `spec.request` says nothing about the current one, which waits.
    /// It may be above `spec.request`: a request the claim's process made by writing the lock's
    /// Lease itself (an arrival by the Lease, issue 12), which the operator records here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<i64>,
    /// Fencing token of the grant (set once, when granted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<i64>,
    /// Machine-readable reason of the last phase change (`Granted`, `LockBusy`, `LockWaitTimeout`,
    /// `HolderLeaseExpired`, `GrantEnded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The semaphore slot of the grant (set with `Granted`; absent or 0: slot 0, the only slot of
    /// a single-holder lock). The operator reads it back to know which slot the claim holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // `format: int32`: the API server does not know schemars' `uint32` and warns on apply.
    #[schemars(extend("format" = "int32"))]
    pub slot: Option<u32>,
    /// The Lease that records the grant and that the holder renews (set with `Granted`): the
    /// lock's own Lease for slot 0, `<lock>-slot-<k>` for slot k of a semaphore. Absent (a grant
    /// written before semaphores): the Lease named like the lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_name: Option<String>,
    /// When `phase` last changed (set with `Granted`, `Rejected` and `Expired`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// With `Granted`: the `metadata.resourceVersion` of the Lease as the grant wrote it (naming
    /// this claim), so the holder's first renewal or release is one compare-and-swap PATCH with
    /// no read before it (a Lease changed since answers 409, and the holder reads it then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_resource_version: Option<String>,
    /// A claim with `spec.locks`: each lock's fencing token, recorded when that lock's Lease
    /// names the claim (lock name -> token). While the claim is `Waiting` these grants are
    /// tentative; the status patch that makes it `Granted` is made on a version that records every
    /// other lock (a compare-and-swap on `metadata.resourceVersion`), so a `Granted` claim has
    /// every lock's token here and every lock's Lease names it with that token.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tokens: BTreeMap<String, i64>,
    /// A claim with `spec.locks`: per lock, the highest token whose tentative grant was taken
    /// back (an older waiter queued for that lock, wound-wait; or the set stopped being served).
    /// Recorded before the Lease moves on; no token at or below it is recorded again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub withdrawn: BTreeMap<String, i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A claim written by a newer version (unknown spec and status fields) is still readable.
    #[test]
    fn fields_of_a_newer_version_are_ignored_when_reading() {
        let claim: DistributedLockClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLockClaim",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"lock": "l", "identity": "me", "locks": ["l", "m"]},
            "status": {"phase": "Granted", "token": 4, "tokens": {"m": 9}}
        }))
        .expect("a claim with unknown fields must be readable");
        assert_eq!(claim.spec.identity, "me");
        assert_eq!(claim.status.unwrap().token, Some(4));
    }
}
