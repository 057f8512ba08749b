//! Singleton workloads by annotation: CronJobs, Deployments and StatefulSets.
//!
//! A workload annotated `leasehold.dev/singleton: "true"` (lock named after the workload) or
//! `leasehold.dev/lock: <name>` (a shared lock) gets:
//! - a `DistributedLock` if none exists (owned by the workload when it is the workload's own
//!   lock, so it goes away with it);
//! - the claim in its pod template: annotation `leasehold.dev/lock` (plus `on-busy` /
//!   `max-wait` when the workload sets them) and the scheduling gate `leasehold.dev/lock`, written
//!   by server-side apply under the field manager `leasehold.dev/workload` (GitOps tools can be
//!   told to ignore that manager). No webhook: the edit is visible in the object.
//!
//! A workload annotated `leasehold.dev/locks: db,bucket` (issue 14, `docs/multi-lock.md`) asks
//! for a lock set: its pod template gets `leasehold.dev/locks` and the gate, and every pod runs
//! only once it holds all of them. With `singleton: "true"` (or `leasehold.dev/lock`) as well, that
//! lock joins the set: the template's list is `<lock>,<the workload's list>`, written verbatim (the
//! claim-injection policy builds the same string, so the two never undo each other). Busy policies
//! (`on-busy`, `max-wait`) are not served with lock sets and are not copied (Warning Event
//! `PolicyIgnored`).
//!
//! Removing the annotation applies an empty configuration under the same manager, which removes
//! exactly the fields we added, and deletes the lock if the workload owned it.
//!
//! Deployments whose rollout would deadlock with a gated new pod (RollingUpdate with
//! maxSurge > 0 keeps the old pod, which holds the lock, until the new one is Ready) get a
//! Warning Event and the condition `Degraded=True, reason RollingUpdateDeadlock` on the lock.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::Context;
use crate::crd::{DistributedLock, DistributedLockSpec};
use crate::error::{Error, Result, call};
use crate::lock::policy::{MAX_WAIT_ANNOTATION, ON_BUSY_ANNOTATION};
use crate::lock::{LOCK_ANNOTATION, LOCKS_ANNOTATION, SCHEDULING_GATE, lock_set};

/// Annotation on a workload: `"true"` makes it a singleton with a lock named after it.
pub const SINGLETON_ANNOTATION: &str = "leasehold.dev/singleton";
/// Field manager of the pod-template edits.
pub const WORKLOAD_FIELD_MANAGER: &str = "leasehold.dev/workload";
/// Condition type the workload controller owns on a lock.
pub const DEGRADED: &str = "Degraded";

/// A workload kind whose pod template can carry the claim.
pub trait Workload:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// `apiVersion` for the apply configuration.
    const API_VERSION: &'static str;
    /// `kind` for the apply configuration.
    const KIND: &'static str;
    /// Wraps a pod template apply configuration in this kind's spec path.
    fn spec_with_template(template: Value) -> Value;
    /// Why a gated rollout of this object could never finish, if it could not.
    fn deadlock(&self) -> Option<String> {
        None
    }
}

impl Workload for CronJob {
    const API_VERSION: &'static str = "batch/v1";
    const KIND: &'static str = "CronJob";
    fn spec_with_template(template: Value) -> Value {
        json!({ "jobTemplate": { "spec": { "template": template } } })
    }
}

impl Workload for StatefulSet {
    const API_VERSION: &'static str = "apps/v1";
    const KIND: &'static str = "StatefulSet";
    fn spec_with_template(template: Value) -> Value {
        json!({ "template": template })
    }
}

impl Workload for Deployment {
    const API_VERSION: &'static str = "apps/v1";
    const KIND: &'static str = "Deployment";
    fn spec_with_template(template: Value) -> Value {
        json!({ "template": template })
    }
    fn deadlock(&self) -> Option<String> {
        let strategy = self.spec.strategy.as_ref();
        if strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate") {
            return None;
        }
        // RollingUpdate is the default; maxSurge defaults to 25%, which rounds up to 1 pod.
        let surge = strategy.and_then(|s| s.rolling_update.as_ref()).and_then(|r| r.max_surge.clone());
        let zero = matches!(&surge, Some(IntOrString::Int(0)))
            || matches!(&surge, Some(IntOrString::String(s)) if s.trim() == "0%" || s.trim() == "0");
        (!zero).then(|| {
            "Deployment uses RollingUpdate with maxSurge > 0: a new pod waits at the lock while the old pod holds it, \
             and the old pod is only removed once the new one is Ready, so the rollout deadlocks. \
             Use strategy.type: Recreate, or rollingUpdate.maxSurge: 0 with maxUnavailable: 1"
                .to_string()
        })
    }
}

/// What a workload's annotations ask for.
#[derive(Debug, PartialEq, Eq)]
pub struct Claim {
    /// The workload's own or named lock (`singleton` / `leasehold.dev/lock`); empty when the
    /// workload only lists a lock set.
    pub lock: String,
    /// True when `lock` is the workload's own (singleton annotation, named after it).
    pub own: bool,
    /// The workload's busy policy (`on-busy`, `max-wait`), copied into the pod template; not
    /// copied for a lock set (busy policies are not served with sets).
    pub policy: Vec<(String, String)>,
    /// For a lock set: the pod template's `leasehold.dev/locks` value, `<lock>,<listed>` when the
    /// workload also has a lock of its own, else the workload's `leasehold.dev/locks` verbatim.
    pub set: Option<String>,
}

impl Claim {
    /// Every lock the claim needs to exist: `lock`, or the parsed set (sorted, no repeats).
    pub fn locks(&self) -> Vec<String> {
        match &self.set {
            Some(set) => lock_set([(&LOCKS_ANNOTATION.to_string(), set)]),
            None => vec![self.lock.clone()],
        }
    }

    /// The pod-template annotations of the claim: `leasehold.dev/locks` for a set, else
    /// `leasehold.dev/lock` and the copied policy.
    pub fn template_annotations(&self) -> serde_json::Map<String, Value> {
        let mut annotations = serde_json::Map::new();
        match &self.set {
            Some(set) => {
                annotations.insert(LOCKS_ANNOTATION.into(), set.clone().into());
            }
            None => {
                annotations.insert(LOCK_ANNOTATION.into(), self.lock.clone().into());
                for (k, v) in &self.policy {
                    annotations.insert(k.clone(), v.clone().into());
                }
            }
        }
        annotations
    }
}

/// Reads the claim from a workload's annotations; `None` if it has none. The chart's
/// claim-injection policy (`charts/leasehold/templates/claim-injection.yaml`) reads them the same
/// way; the two must agree, or each would undo the other's pod template.
pub fn claim_of(name: &str, annotations: &std::collections::BTreeMap<String, String>) -> Option<Claim> {
    let lock = annotations.get(LOCK_ANNOTATION).map(|l| l.trim().to_string()).filter(|l| !l.is_empty());
    let singleton = annotations.get(SINGLETON_ANNOTATION).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let listed = annotations.get(LOCKS_ANNOTATION).filter(|v| v.split(',').any(|l| !l.trim().is_empty()));
    let (lock, own) = match (lock, singleton) {
        (Some(l), _) => (l.clone(), l == name && singleton),
        (None, true) => (name.to_string(), true),
        (None, false) if listed.is_some() => (String::new(), false),
        (None, false) => return None,
    };
    let set = listed.map(|l| if lock.is_empty() { l.clone() } else { format!("{lock},{l}") });
    let policy = [ON_BUSY_ANNOTATION, MAX_WAIT_ANNOTATION]
        .iter()
        .filter_map(|k| annotations.get(*k).map(|v| (k.to_string(), v.clone())))
        .collect();
    Some(Claim { lock, own, policy, set })
}

/// Reconciles one workload: adds or removes the claim, ensures the lock, reports deadlocks.
pub async fn reconcile<W: Workload>(obj: Arc<W>, ctx: Arc<Context>) -> Result<Action> {
    let ns = obj.namespace().ok_or(Error::MissingField("metadata.namespace"))?;
    let name = obj.name_any();
    let api: Api<W> = Api::namespaced(ctx.client.clone(), &ns);
    let locks: Api<DistributedLock> = Api::namespaced(ctx.client.clone(), &ns);
    let pp = PatchParams::apply(WORKLOAD_FIELD_MANAGER);
    let ours = obj.meta().managed_fields.iter().flatten().any(|m| m.manager.as_deref() == Some(WORKLOAD_FIELD_MANAGER));

    let Some(claim) = claim_of(&name, obj.annotations()) else {
        if ours {
            // Annotation removed: drop exactly the fields this manager added.
            let empty = json!({ "apiVersion": W::API_VERSION, "kind": W::KIND, "metadata": { "name": name } });
            call("remove claim from workload", api.patch(&name, &pp, &Patch::Apply(&empty))).await?;
            if let Some(lock) = call("get DistributedLock", locks.get_opt(&name)).await?
                && owned_by(&lock, obj.as_ref())
            {
                call("delete DistributedLock", locks.delete(&name, &DeleteParams::default())).await?;
            }
            tracing::info!(kind = W::KIND, namespace = %ns, name = %name, "singleton claim removed");
        }
        return Ok(Action::await_change());
    };

    // The locks: each created if missing (owned by the workload only when it is its own lock). A
    // lock that cannot be created (an invalid name) is said in a Warning Event on the workload,
    // and the claim still goes into the pod template, so that its pods wait at the gate (fail
    // closed); the reconcile then fails and is retried.
    let mut held = Vec::new();
    let (mut failed, mut raced) = (None, false);
    for lock in claim.locks() {
        let own = claim.own && lock == claim.lock;
        match ensure_lock(&ctx, &locks, obj.as_ref(), &lock, own).await {
            Ok(Some(l)) => held.push(l),
            Ok(None) => raced = true,
            Err(e) => {
                let note = format!(
                    "could not create DistributedLock {lock} for {} {name}: {e}; its pods wait at the gate until a lock \
                     of that name exists (fix the annotation to name a valid lock: at most 63 characters, lowercase \
                     letters, digits, '-' and '.')",
                    W::KIND
                );
                ctx.event(&obj.object_ref(&()), EventType::Warning, "LockNotCreated", note, "Create").await;
                failed = Some(e);
            }
        }
    }

    // The claim in the pod template.
    let template = json!({
        "metadata": { "annotations": claim.template_annotations() },
        "spec": { "schedulingGates": [ { "name": SCHEDULING_GATE } ] },
    });
    let apply = json!({
        "apiVersion": W::API_VERSION, "kind": W::KIND,
        "metadata": { "name": name },
        "spec": W::spec_with_template(template),
    });
    call("apply claim to workload", api.patch(&name, &pp, &Patch::Apply(&apply))).await?;
    if raced {
        // Another writer created a lock at the same moment: read it on the next pass.
        return Ok(Action::requeue(Duration::from_millis(200)));
    }

    if claim.set.is_some() && !claim.policy.is_empty() {
        let note = format!(
            "{} {name} asks for a lock set ({LOCKS_ANNOTATION}): its busy policy ({}) is not copied into the pod \
             template, as busy policies are not served with lock sets; its pods wait until they hold every lock",
            W::KIND,
            claim.policy.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", ")
        );
        ctx.event(&obj.object_ref(&()), EventType::Warning, "PolicyIgnored", note, "Claim").await;
    }
    if let Some(e) = failed {
        return Err(e);
    }

    // Deadlocks this controller can see coming.
    let deadlock = obj.deadlock();
    for lock in &held {
        set_degraded(&ctx, &locks, lock, deadlock.as_deref()).await?;
    }
    if let Some(why) = &deadlock {
        ctx.event(&obj.object_ref(&()), EventType::Warning, "RollingUpdateDeadlock", why.clone(), "Check").await;
    }
    Ok(Action::await_change())
}

/// The DistributedLock `lock` for workload `obj`, created if missing (with `obj` as owner when
/// `own`); `None` when a concurrent create won (409: requeue and read it). A singleton whose own
/// lock exists but was not made for it gets a Warning Event `LockNotOwned`.
///
/// # Errors
/// Any other API error of the get or create.
async fn ensure_lock<W: Workload>(
    ctx: &Context,
    locks: &Api<DistributedLock>,
    obj: &W,
    lock: &str,
    own: bool,
) -> Result<Option<DistributedLock>> {
    let name = obj.name_any();
    match call("get DistributedLock", locks.get_opt(lock)).await? {
        // A singleton whose lock already exists and was not made for it (a lock someone created
        // with the same name, or another workload's): its runs share that lock, and it is not
        // deleted with the workload. Allowed (sharing a lock is a feature), but said.
        Some(l) if own && !owned_by(&l, obj) => {
            let note = format!(
                "DistributedLock {lock} already exists and was not created for {} {name}: its runs share that lock \
                 with whatever else uses it, and it is not deleted with the {}; to use a lock of its own, set the \
                 annotation {LOCK_ANNOTATION} to another name",
                W::KIND,
                W::KIND
            );
            ctx.event(&obj.object_ref(&()), EventType::Warning, "LockNotOwned", note, "Claim").await;
            Ok(Some(l))
        }
        Some(l) => Ok(Some(l)),
        None => {
            let mut new = DistributedLock::new(lock, DistributedLockSpec::default());
            new.metadata.owner_references = own.then(|| owner_ref(obj)).flatten().map(|o| vec![o]);
            match call("create DistributedLock", locks.create(&PostParams::default(), &new)).await {
                Ok(l) => {
                    let note = format!("created DistributedLock {lock} for {} {name}", W::KIND);
                    ctx.event(&obj.object_ref(&()), EventType::Normal, "LockCreated", note, "Create").await;
                    Ok(Some(l))
                }
                Err(e) if e.is_conflict() => Ok(None),
                Err(e) => Err(e),
            }
        }
    }
}

/// Requeues a failed workload reconcile after 5 s (quicker for conflicts).
pub fn error_policy<W: Workload>(obj: Arc<W>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(kind = W::KIND, name = %obj.name_any(), error = %error, "workload reconcile failed");
    super::backoff_for(error)
}

fn owner_ref<W: Workload>(obj: &W) -> Option<OwnerReference> {
    let mut o = obj.controller_owner_ref(&())?;
    o.controller = Some(false);
    o.block_owner_deletion = Some(false);
    Some(o)
}

fn owned_by<W: Workload>(lock: &DistributedLock, obj: &W) -> bool {
    let uid = obj.meta().uid.as_deref();
    lock.owner_references().iter().any(|o| Some(o.uid.as_str()) == uid)
}

/// Applies (or clears) the lock's `Degraded` condition under the workload field manager.
async fn set_degraded(
    ctx: &Context,
    api: &Api<DistributedLock>,
    lock: &DistributedLock,
    why: Option<&str>,
) -> Result<()> {
    let current = lock.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == DEGRADED));
    let want_true = why.is_some();
    if current.map(|c| c.status == "True") == Some(want_true)
        && current.map(|c| c.message.as_str()) == Some(why.unwrap_or(""))
    {
        return Ok(());
    }
    let cond = Condition {
        type_: DEGRADED.into(),
        status: if want_true { "True" } else { "False" }.into(),
        reason: if want_true { "RollingUpdateDeadlock" } else { "Compatible" }.into(),
        message: why.unwrap_or("").into(),
        observed_generation: lock.meta().generation,
        last_transition_time: Time(Timestamp::now()),
    };
    if want_true {
        ctx.event(&lock.object_ref(&()), EventType::Warning, "RollingUpdateDeadlock", cond.message.clone(), "Check")
            .await;
    }
    let apply = json!({
        "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLock",
        "metadata": { "name": lock.name_any() },
        "status": { "conditions": [cond] },
    });
    let pp = PatchParams::apply(WORKLOAD_FIELD_MANAGER).force();
    call("apply DistributedLock Degraded condition", api.patch_status(&lock.name_any(), &pp, &Patch::Apply(&apply)))
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn singleton_names_the_lock_after_the_workload() {
        let c = claim_of("nightly", &ann(&[(SINGLETON_ANNOTATION, "true")])).unwrap();
        assert_eq!(c, Claim { lock: "nightly".into(), own: true, policy: vec![], set: None });
    }

    #[test]
    fn shared_lock_is_not_owned_and_policy_is_copied() {
        let c = claim_of("a", &ann(&[(LOCK_ANNOTATION, "shared"), (ON_BUSY_ANNOTATION, "skip")])).unwrap();
        assert_eq!(c.lock, "shared");
        assert!(!c.own);
        assert_eq!(c.policy, vec![(ON_BUSY_ANNOTATION.to_string(), "skip".to_string())]);
    }

    #[test]
    fn a_lock_set_goes_into_the_template_verbatim_after_the_workloads_own_lock() {
        // Only a list: the template's list is the workload's, verbatim; no lock of its own.
        let c = claim_of("job", &ann(&[(LOCKS_ANNOTATION, " db, bucket")])).unwrap();
        assert_eq!((c.lock.as_str(), c.own, c.set.as_deref()), ("", false, Some(" db, bucket")));
        assert_eq!(c.locks(), ["bucket", "db"]);
        let t = c.template_annotations();
        assert_eq!(t.len(), 1, "{t:?}");
        assert_eq!(t[LOCKS_ANNOTATION], " db, bucket");
        // A singleton with a list: its own lock joins the set, first; the busy policy is not copied.
        let a = ann(&[(SINGLETON_ANNOTATION, "true"), (LOCKS_ANNOTATION, "db,nightly"), (ON_BUSY_ANNOTATION, "skip")]);
        let c = claim_of("nightly", &a).unwrap();
        assert_eq!((c.lock.as_str(), c.own, c.set.as_deref()), ("nightly", true, Some("nightly,db,nightly")));
        assert_eq!(c.locks(), ["db", "nightly"]);
        let t = c.template_annotations();
        assert_eq!((t.len(), &t[LOCKS_ANNOTATION]), (1, &json!("nightly,db,nightly")));
        assert_eq!(c.policy, vec![(ON_BUSY_ANNOTATION.to_string(), "skip".to_string())], "read, to be warned about");
        // A named shared lock with a list joins it too; a list of blanks is no list.
        let c = claim_of("a", &ann(&[(LOCK_ANNOTATION, "shared"), (LOCKS_ANNOTATION, "db")])).unwrap();
        assert_eq!((c.own, c.set.as_deref()), (false, Some("shared,db")));
        let c = claim_of("a", &ann(&[(LOCK_ANNOTATION, "shared"), (LOCKS_ANNOTATION, " , ")])).unwrap();
        assert_eq!((c.set.as_deref(), c.locks()), (None, vec!["shared".to_string()]));
        assert_eq!(claim_of("a", &ann(&[(LOCKS_ANNOTATION, ",")])), None);
    }

    #[test]
    fn no_annotation_no_claim() {
        assert_eq!(claim_of("a", &ann(&[(SINGLETON_ANNOTATION, "false")])), None);
        assert_eq!(claim_of("a", &ann(&[(LOCK_ANNOTATION, " ")])), None);
    }

    #[test]
    fn rolling_update_with_surge_deadlocks_recreate_and_zero_surge_do_not() {
        let dep = |strategy: Value| -> Deployment {
            serde_json::from_value(
                json!({"metadata": {"name": "d"}, "spec": {"selector": {}, "template": {}, "strategy": strategy}}),
            )
            .unwrap()
        };
        assert!(dep(json!({})).deadlock().is_some(), "default RollingUpdate, maxSurge 25%");
        assert!(dep(json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}})).deadlock().is_some());
        assert!(dep(json!({"type": "Recreate"})).deadlock().is_none());
        assert!(
            dep(json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}))
                .deadlock()
                .is_none()
        );
        assert!(dep(json!({"rollingUpdate": {"maxSurge": "0%"}})).deadlock().is_none());
    }
}
