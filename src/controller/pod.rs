//! Pod controller: tells a pod, by Warning Event, why the lock it names cannot serve it (the lock
//! does not exist, or the pod bypasses the scheduler with `spec.nodeName`). It never writes pods.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;

use super::{Context, lock_of, pod_ref};
use crate::crd::DistributedLock;
use crate::error::Error;
use crate::lock::TOKEN_ANNOTATION;

/// The pod controller's context.
pub struct PodContext {
    /// Shared operator context.
    pub ctx: Arc<Context>,
    /// Lock cache.
    pub locks: Store<DistributedLock>,
    /// (pod UID, reason) pairs already warned about, so a pod gets each warning once.
    pub warned: Mutex<HashSet<(String, &'static str)>>,
}

/// Checks one pod; only pods with the `leasehold.dev/lock` annotation are looked at.
pub async fn reconcile(pod: Arc<Pod>, pctx: Arc<PodContext>) -> Result<Action, Error> {
    let Some(lock) = lock_of(&pod) else {
        return Ok(Action::await_change());
    };
    if pod.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let uid = pod.uid().unwrap_or_default();
    let bound_without_grant = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
        && !pod.annotations().contains_key(TOKEN_ANNOTATION);
    let lock_exists = pctx.locks.get(&lock).is_some();
    let warn =
        |reason: &'static str| pctx.warned.lock().unwrap_or_else(|e| e.into_inner()).insert((uid.clone(), reason));
    if !lock_exists && warn("LockNotFound") {
        let note = format!(
            "DistributedLock {} does not exist in namespace {}; the pod waits until it is created",
            lock.name,
            pod.namespace().unwrap_or_default()
        );
        pctx.ctx.event(&pod_ref(&pod), EventType::Warning, "LockNotFound", note, "Wait").await;
    }
    if lock_exists {
        pctx.warned.lock().unwrap_or_else(|e| e.into_inner()).remove(&(uid.clone(), "LockNotFound"));
    }
    if bound_without_grant && warn("NotGateable") {
        let note = format!(
            "pod names lock {} but sets spec.nodeName, so it bypasses the scheduler and cannot wait at the leasehold.dev/lock scheduling gate; it is never counted as a holder",
            lock.name
        );
        pctx.ctx.event(&pod_ref(&pod), EventType::Warning, "NotGateable", note, "Reject").await;
    }
    Ok(Action::await_change())
}

/// Retries a failed pod check after 5 s.
pub fn error_policy(_pod: Arc<Pod>, _error: &Error, _pctx: Arc<PodContext>) -> Action {
    Action::requeue(Duration::from_secs(5))
}
