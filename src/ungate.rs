//! `leasehold ungate`: leaving Leasehold. Takes every claim out of the workloads (the singleton
//! and lock annotations, and the claim the operator or the claim-injection policy wrote into
//! their pod templates) and removes the `leasehold.dev/lock` scheduling gate from every pod still
//! waiting, so that nothing stays gated for ever once the operator is gone.
//!
//! **Mutual exclusion ends**: an ungated pod starts at once, beside whoever holds its lock. Meant
//! for the uninstall runbook (docs/install.md, "Uninstall"): `helm uninstall` first (the chart's
//! admission policies let only the operator remove the gate), then `leasehold ungate`. Without
//! `--yes` it only prints what it would change.

use anyhow::Context as _;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::TypeMeta;
use serde_json::Value;

use crate::controller::workload::SINGLETON_ANNOTATION;
use crate::lock::policy::{MAX_WAIT_ANNOTATION, ON_BUSY_ANNOTATION};
use crate::lock::{LOCK_ANNOTATION, LOCKS_ANNOTATION, SCHEDULING_GATE};

/// Options of `leasehold ungate`.
#[derive(clap::Args, Debug, Clone)]
pub struct UngateArgs {
    /// Only this namespace (default: the kubeconfig's namespace).
    #[arg(long, short = 'n', conflicts_with = "all_namespaces")]
    pub namespace: Option<String>,
    /// Every namespace.
    #[arg(long, short = 'A')]
    pub all_namespaces: bool,
    /// Make the changes (without it, only print them).
    #[arg(long)]
    pub yes: bool,
    /// Which cluster (`--kubeconfig`, `--context`).
    #[command(flatten)]
    pub kube: crate::cli::KubeArgs,
}

/// The workload kinds whose pod templates carry claims: kind and the template's path in `spec`'s
/// parent object.
const WORKLOADS: [(&str, &[&str]); 3] = [
    ("Deployment", &["spec", "template"]),
    ("StatefulSet", &["spec", "template"]),
    ("CronJob", &["spec", "jobTemplate", "spec", "template"]),
];

/// The annotations a claim consists of, on a workload and in its pod template.
const CLAIM_ANNOTATIONS: [&str; 5] =
    [LOCK_ANNOTATION, LOCKS_ANNOTATION, SINGLETON_ANNOTATION, ON_BUSY_ANNOTATION, MAX_WAIT_ANNOTATION];

/// Takes the claim out of one workload object (JSON, as the API server returns it): the claim
/// annotations from its metadata and from its pod template at `template` (a path of keys), and
/// the `leasehold.dev/lock` scheduling gate from the template. Returns whether anything changed.
pub fn strip_workload(obj: &mut Value, template: &[&str]) -> bool {
    let mut changed = remove_annotations(obj);
    let mut t = Some(&mut *obj);
    for key in template {
        t = t.and_then(|v| v.get_mut(*key));
    }
    if let Some(t) = t {
        changed |= remove_annotations(t);
        if let Some(spec) = t.get_mut("spec").and_then(Value::as_object_mut)
            && let Some(gates) = spec.get_mut("schedulingGates").and_then(Value::as_array_mut)
        {
            let before = gates.len();
            gates.retain(|g| g.get("name").and_then(Value::as_str) != Some(SCHEDULING_GATE));
            changed |= gates.len() != before;
            if gates.is_empty() {
                spec.remove("schedulingGates");
            }
        }
    }
    changed
}

/// Removes the claim annotations from `obj.metadata`; whether any was there.
fn remove_annotations(obj: &mut Value) -> bool {
    let Some(ann) = obj.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) else { return false };
    let before = ann.len();
    ann.retain(|k, _| !CLAIM_ANNOTATIONS.contains(&k.as_str()));
    ann.len() != before
}

/// The strategic merge patch that ungates a pod: deletes the `leasehold.dev/lock` entry of
/// `spec.schedulingGates` (a list merged by `name`) and the pod's `leasehold.dev/lock` and
/// `leasehold.dev/locks` annotations, with the pod's resourceVersion as precondition (a concurrent change fails the
/// patch with 409 instead of being overwritten). `None` if the pod is not gated by Leasehold, or
/// is already over (`status.phase` `Failed` or `Succeeded`, as a waiter the operator failed for
/// `max-wait` or `on-busy: fail`): such a pod never starts, gated or not.
pub fn ungate_patch(pod: &Pod) -> Option<Value> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Failed" | "Succeeded")) {
        return None;
    }
    let gates = pod.spec.as_ref()?.scheduling_gates.as_ref()?;
    gates.iter().any(|g| g.name == SCHEDULING_GATE).then(|| {
        serde_json::json!({
            "metadata": {
                "resourceVersion": pod.resource_version(),
                "annotations": {(LOCK_ANNOTATION): null, (LOCKS_ANNOTATION): null},
            },
            "spec": {"schedulingGates": [{"name": SCHEDULING_GATE, "$patch": "delete"}]},
        })
    })
}

/// Runs `leasehold ungate`; returns the exit status: 0 when everything was changed (or, without
/// `--yes`, listed), 1 when a change failed (each failure is printed with the reason).
///
/// # Errors
/// When the cluster cannot be reached or listed.
pub async fn run(args: UngateArgs) -> anyhow::Result<i32> {
    let client = args.kube.client().await?;
    let ns = if args.all_namespaces {
        None
    } else {
        Some(args.namespace.clone().unwrap_or_else(|| client.default_namespace().to_string()))
    };
    let act = args.yes;
    let scope = ns.as_deref().map_or("all namespaces".to_string(), |n| format!("namespace {n}"));
    eprintln!(
        "leasehold ungate ({scope}): mutual exclusion ends for every workload and pod below; an ungated pod \
         starts at once, even while another holds its lock"
    );
    let mut failed = 0;
    let mut count = 0;
    for (kind, template) in WORKLOADS {
        let resource = match kind {
            "Deployment" => ApiResource::erase::<Deployment>(&()),
            "StatefulSet" => ApiResource::erase::<StatefulSet>(&()),
            _ => ApiResource::erase::<CronJob>(&()),
        };
        let api: Api<DynamicObject> = match &ns {
            Some(n) => Api::namespaced_with(client.clone(), n, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        for obj in api.list(&ListParams::default()).await.with_context(|| format!("listing {kind}s"))? {
            let mut value = serde_json::to_value(&obj)?;
            if !strip_workload(&mut value, template) {
                continue;
            }
            count += 1;
            let what = format!("{kind} {}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
            if !act {
                println!("would take the claim out of {what} (annotations and pod template)");
                continue;
            }
            let mut stripped: DynamicObject = serde_json::from_value(value)?;
            // List items carry no apiVersion/kind; the PUT body does.
            stripped.types = Some(TypeMeta { api_version: resource.api_version.clone(), kind: resource.kind.clone() });
            let ns_api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &obj.namespace().unwrap_or_default(), &resource);
            // A PUT with the resourceVersion just read: a concurrent change fails it (409) and
            // nothing is lost; run the command again.
            match ns_api.replace(&obj.name_any(), &PostParams::default(), &stripped).await {
                Ok(_) => println!("took the claim out of {what}"),
                Err(e) => {
                    failed += 1;
                    eprintln!("leasehold ungate: {what}: {e}");
                }
            }
        }
    }
    let pods: Api<Pod> = match &ns {
        Some(n) => Api::namespaced(client.clone(), n),
        None => Api::all(client.clone()),
    };
    let mut forbidden = false;
    for pod in pods.list(&ListParams::default()).await.context("listing pods")? {
        let Some(patch) = ungate_patch(&pod) else { continue };
        count += 1;
        let what = format!("pod {}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
        if !act {
            println!("would remove the scheduling gate of {what}");
            continue;
        }
        let ns_api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
        match ns_api.patch(&pod.name_any(), &PatchParams::default(), &Patch::Strategic(&patch)).await {
            Ok(_) => println!("removed the scheduling gate of {what}: it starts without the lock"),
            Err(e) => {
                failed += 1;
                forbidden |= matches!(&e, kube::Error::Api(s) if s.code == 403);
                eprintln!("leasehold ungate: {what}: {e}");
            }
        }
    }
    if forbidden {
        eprintln!(
            "leasehold ungate: the chart's admission policies let only the operator remove the gate: uninstall the \
             chart first (helm uninstall removes them), or run as a member of an exempt group (e.g. \
             --as-group=leasehold.dev:lock-admins)"
        );
    }
    match (act, count) {
        (_, 0) => println!("nothing to ungate in {scope}"),
        (false, n) => println!("{n} change(s) listed, nothing changed: run again with --yes to make them"),
        (true, _) => {}
    }
    Ok(if failed > 0 { 1 } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cronjob_loses_its_claim_and_keeps_everything_else() {
        let mut cj = json!({
            "metadata": {"name": "n", "annotations": {"leasehold.dev/singleton": "true", "leasehold.dev/max-wait": "1h", "team": "a"}},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {
                "metadata": {"annotations": {"leasehold.dev/lock": "n", "leasehold.dev/max-wait": "1h", "x": "y"}},
                "spec": {"schedulingGates": [{"name": "leasehold.dev/lock"}, {"name": "other"}], "containers": []},
            }}}},
        });
        assert!(strip_workload(&mut cj, &["spec", "jobTemplate", "spec", "template"]));
        assert_eq!(cj["metadata"]["annotations"], json!({"team": "a"}));
        let t = &cj["spec"]["jobTemplate"]["spec"]["template"];
        assert_eq!(t["metadata"]["annotations"], json!({"x": "y"}));
        assert_eq!(t["spec"]["schedulingGates"], json!([{"name": "other"}]));
        assert!(!strip_workload(&mut cj, &["spec", "jobTemplate", "spec", "template"]), "nothing left to take out");
    }

    #[test]
    fn an_emptied_gate_list_is_removed_and_an_unclaimed_workload_is_untouched() {
        let mut d = json!({"metadata": {"annotations": {"leasehold.dev/lock": "l"}},
                           "spec": {"template": {"spec": {"schedulingGates": [{"name": "leasehold.dev/lock"}]}}}});
        assert!(strip_workload(&mut d, &["spec", "template"]));
        assert_eq!(d["spec"]["template"]["spec"], json!({}));
        let mut set = json!({"metadata": {"annotations": {"leasehold.dev/locks": "a,b"}},
                             "spec": {"template": {"metadata": {"annotations": {"leasehold.dev/locks": "a,b"}},
                                                   "spec": {"schedulingGates": [{"name": "leasehold.dev/lock"}]}}}});
        assert!(strip_workload(&mut set, &["spec", "template"]));
        assert_eq!(
            set,
            json!({"metadata": {"annotations": {}}, "spec": {"template": {"metadata": {"annotations": {}}, "spec": {}}}})
        );
        let mut plain = json!({"metadata": {"name": "p"}, "spec": {"template": {"spec": {}}}});
        assert!(!strip_workload(&mut plain, &["spec", "template"]));
    }

    #[test]
    fn the_pod_patch_deletes_only_our_gate_under_the_read_resource_version() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "resourceVersion": "42", "annotations": {"leasehold.dev/lock": "l"}},
            "spec": {"schedulingGates": [{"name": "other"}, {"name": "leasehold.dev/lock"}], "containers": []},
        }))
        .unwrap();
        let patch = ungate_patch(&pod).unwrap();
        assert_eq!(patch["spec"]["schedulingGates"], json!([{"name": "leasehold.dev/lock", "$patch": "delete"}]));
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(patch["metadata"]["annotations"], json!({"leasehold.dev/lock": null, "leasehold.dev/locks": null}));
        let ungated: Pod =
            serde_json::from_value(json!({"metadata": {"name": "q"}, "spec": {"containers": []}})).unwrap();
        assert!(ungate_patch(&ungated).is_none());
        let mut failed = pod.clone();
        failed.status = Some(serde_json::from_value(json!({"phase": "Failed", "reason": "LockWaitTimeout"})).unwrap());
        assert!(ungate_patch(&failed).is_none(), "a failed waiter never starts: nothing to ungate");
        failed.status = Some(serde_json::from_value(json!({"phase": "Pending"})).unwrap());
        assert!(ungate_patch(&failed).is_some());
    }
}
