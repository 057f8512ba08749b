//! Pod and claim checks: tell a pod, by Warning Event, why the lock it names cannot serve it (the
//! lock does not exist, the pod bypasses the scheduler with `spec.nodeName`, or a policy
//! annotation is unreadable) or why its lock set is not served (`leasehold.dev/locks`: a lock
//! that does not exist or is a semaphore), and a DistributedLockClaim that its lock does not
//! exist. Never writes pods or claims.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::channel::mpsc::UnboundedReceiver;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};

use super::{Context, lock_of, pod_ref};
use crate::crd::{DistributedLock, DistributedLockClaim};
use crate::lock::policy::{self, MAX_WAIT_ANNOTATION, ON_BUSY_ANNOTATION};
use crate::lock::{LOCKS_ANNOTATION, TOKEN_ANNOTATION, lock_of_token_annotation, lock_set};

/// The pod checks' context.
pub struct PodContext {
    /// Shared operator context.
    pub ctx: Arc<Context>,
    /// Lock cache.
    pub locks: Store<DistributedLock>,
    /// (pod UID, reason) pairs already warned about, so a pod gets each warning once.
    pub warned: Mutex<HashSet<(String, &'static str)>>,
}

impl PodContext {
    /// Records that `uid` was warned about `reason`; true the first time (then warn).
    fn first_warning(&self, uid: &str, reason: &'static str) -> bool {
        self.warned.lock().unwrap_or_else(|e| e.into_inner()).insert((uid.to_string(), reason))
    }

    /// Forgets that `uid` was warned about `reason`, so it is warned again if it recurs.
    fn forget_warning(&self, uid: &str, reason: &'static str) {
        self.warned.lock().unwrap_or_else(|e| e.into_inner()).remove(&(uid.to_string(), reason));
    }
}

/// A pod watch event for the checks.
pub enum PodEvent {
    /// The pod (which names a lock) was created or changed.
    Seen(Arc<Pod>),
    /// The pod with this UID is gone.
    Gone(String),
    /// A claim was created or changed.
    ClaimSeen(Arc<DistributedLockClaim>),
    /// The claim with this UID is gone.
    ClaimGone(String),
}

/// Runs the checks for every pod event until the channel closes.
pub async fn run_checks(mut events: UnboundedReceiver<PodEvent>, pctx: Arc<PodContext>) {
    while let Some(ev) = events.next().await {
        match ev {
            PodEvent::Seen(pod) => check(&pod, &pctx).await,
            PodEvent::ClaimSeen(claim) => check_claim(&claim, &pctx).await,
            PodEvent::Gone(uid) | PodEvent::ClaimGone(uid) => {
                pctx.warned.lock().unwrap_or_else(|e| e.into_inner()).retain(|(u, _)| *u != uid)
            }
        }
    }
}

/// Checks one claim: a Warning Event `LockNotFound` (once per claim) while its lock does not
/// exist; for a claim with a lock set, `LockSetNotServed` while the set is not served
/// (a lock of it missing, or a semaphore). A claim that already ended (granted, expired, rejected) is not checked.
async fn check_claim(claim: &DistributedLockClaim, pctx: &PodContext) {
    if claim.metadata.deletion_timestamp.is_some() || claim.status.as_ref().is_some_and(|s| s.phase.is_some()) {
        return;
    }
    let uid = claim.uid().unwrap_or_default();
    let ns = claim.namespace().unwrap_or_default();
    let set = claim.spec.lock_set();
    if !set.is_empty() {
        // A claim with a lock set: told once while the set is not served (a lock of it is
        // missing, or a semaphore), as a pod with the same set is.
        match super::distributed_lock::lock_set_unservable(&pctx.locks, &ns, &set) {
            Some(why) if pctx.first_warning(&uid, "LockSetNotServed") => {
                let note = super::distributed_lock::lock_set_not_served_note(&set, &why);
                pctx.ctx.event(&claim.object_ref(&()), EventType::Warning, "LockSetNotServed", note, "Wait").await;
            }
            Some(_) => {}
            None => pctx.forget_warning(&uid, "LockSetNotServed"),
        }
        return;
    }
    let lock = super::ObjectRef::<DistributedLock>::new(&claim.spec.lock).within(&ns);
    if pctx.locks.get(&lock).is_some() {
        pctx.forget_warning(&uid, "LockNotFound");
        return;
    }
    if pctx.first_warning(&uid, "LockNotFound") {
        let note = format!(
            "DistributedLock {} does not exist in namespace {ns}; the claim waits until it is created",
            claim.spec.lock
        );
        pctx.ctx.event(&claim.object_ref(&()), EventType::Warning, "LockNotFound", note, "Wait").await;
    }
}

/// Checks one pod that asks for a lock set (`leasehold.dev/locks`); each warning is given once
/// per pod, and `LockSetNotServed` again after the set was servable for a while.
async fn check_set(pod: &Pod, set: &[String], pctx: &PodContext) {
    let uid = pod.uid().unwrap_or_default();
    let warn = |reason: &'static str| pctx.first_warning(&uid, reason);
    let ns = pod.namespace().unwrap_or_default();
    match super::distributed_lock::lock_set_unservable(&pctx.locks, &ns, set) {
        Some(why) if warn("LockSetNotServed") => {
            let note = super::distributed_lock::lock_set_not_served_note(set, &why);
            pctx.ctx.event(&pod_ref(pod), EventType::Warning, "LockSetNotServed", note, "Wait").await;
        }
        Some(_) => {}
        None => pctx.forget_warning(&uid, "LockSetNotServed"),
    }
    let ann = |k: &str| pod.annotations().get(k).map(String::as_str);
    // (The lock `leasehold.dev/lock` names joins the set: `lock_set`.)
    let ignored = [(ON_BUSY_ANNOTATION, "IgnoredOnBusy"), (MAX_WAIT_ANNOTATION, "IgnoredMaxWait")];
    for (key, reason) in ignored {
        if ann(key).is_some() && ann(crate::lock::GRANTED_LOCK_ANNOTATION).is_none() && warn(reason) {
            let note = format!(
                "annotation {key} is ignored on a pod that asks for a lock set ({LOCKS_ANNOTATION}): the pod waits in FIFO \
                 order, with no time limit, for every lock of its set"
            );
            pctx.ctx.event(&pod_ref(pod), EventType::Warning, "InvalidAnnotation", note, "Validate").await;
        }
    }
    let recorded = pod.annotations().keys().any(|k| lock_of_token_annotation(k).is_some());
    let bound_without_grant = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() && !recorded;
    if bound_without_grant && warn("NotGateable") {
        let note = format!(
            "pod asks for lock set {} but was not waiting at the leasehold.dev/lock scheduling gate (created without \
             it, or it sets spec.nodeName and bypasses the scheduler), so it runs without the locks and is never counted \
             as a holder",
            set.join(",")
        );
        pctx.ctx.event(&pod_ref(pod), EventType::Warning, "NotGateable", note, "Reject").await;
    }
}

/// A pod that waits at Leasehold's scheduling gate but names no lock (no `leasehold.dev/lock`,
/// and `leasehold.dev/locks` blank or missing): nothing will ever remove its gate, so it gets a
/// Warning Event `InvalidAnnotation` once. The chart's admission policies refuse such a pod; an
/// install without them (`deploy/leasehold.yaml` without the policies, or a cluster older than
/// ValidatingAdmissionPolicy) admits it.
async fn check_gated_without_lock(pod: &Pod, pctx: &PodContext) {
    let pending = pod.status.as_ref().and_then(|s| s.phase.as_deref()).is_none_or(|p| p == "Pending");
    if !pending || !super::has_leasehold_gate(pod) || !pctx.first_warning(&pod.uid().unwrap_or_default(), "NoLockNamed")
    {
        return;
    }
    let note = format!(
        "pod waits at the leasehold.dev/lock scheduling gate but names no lock ({} and {LOCKS_ANNOTATION} are missing \
         or blank): nothing will remove the gate; name a DistributedLock of this namespace, or remove the gate",
        crate::lock::LOCK_ANNOTATION
    );
    pctx.ctx.event(&pod_ref(pod), EventType::Warning, "InvalidAnnotation", note, "Validate").await;
}

/// Checks one pod that names a lock; each warning is given once per pod.
/// A pod being deleted is not checked.
async fn check(pod: &Pod, pctx: &PodContext) {
    if pod.metadata.deletion_timestamp.is_some() {
        return;
    }
    let set = lock_set(pod.annotations());
    if !set.is_empty() {
        return check_set(pod, &set, pctx).await;
    }
    let Some(lock) = lock_of(pod) else {
        return check_gated_without_lock(pod, pctx).await;
    };
    let uid = pod.uid().unwrap_or_default();
    let warn = |reason: &'static str| pctx.first_warning(&uid, reason);
    let ns = pod.namespace().unwrap_or_default();

    if pctx.locks.get(&lock).is_none() {
        if lock.name.is_empty() && warn("EmptyLockName") {
            let note = "annotation leasehold.dev/lock is empty: name a DistributedLock in this namespace".to_string();
            pctx.ctx.event(&pod_ref(pod), EventType::Warning, "InvalidAnnotation", note, "Validate").await;
        } else if !lock.name.is_empty() && warn("LockNotFound") {
            let note = format!(
                "DistributedLock {} does not exist in namespace {ns}; the pod waits until it is created",
                lock.name
            );
            pctx.ctx.event(&pod_ref(pod), EventType::Warning, "LockNotFound", note, "Wait").await;
        }
    } else {
        pctx.forget_warning(&uid, "LockNotFound");
    }

    let bound_without_grant = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
        && !pod.annotations().contains_key(TOKEN_ANNOTATION);
    if bound_without_grant && warn("NotGateable") {
        let note = format!(
            "pod names lock {} but was not waiting at the leasehold.dev/lock scheduling gate (created without it, \
             or it sets spec.nodeName and bypasses the scheduler), so it runs without the lock and is never \
             counted as a holder",
            lock.name
        );
        pctx.ctx.event(&pod_ref(pod), EventType::Warning, "NotGateable", note, "Reject").await;
    }

    let ann = |k: &str| pod.annotations().get(k).map(String::as_str);
    let problems = [
        ("BadOnBusy", policy::parse_on_busy(ann(ON_BUSY_ANNOTATION)).err()),
        ("BadMaxWait", policy::parse_max_wait(ann(MAX_WAIT_ANNOTATION)).err()),
    ];
    for (key, problem) in problems {
        if let Some(problem) = problem
            && warn(key)
        {
            let note = format!("{problem}; using the default (wait in FIFO order, no time limit)");
            pctx.ctx.event(&pod_ref(pod), EventType::Warning, "InvalidAnnotation", note, "Validate").await;
        }
    }
}
