//! What the operator's caches keep of each object: only what a decision, a check or an Event
//! reads. Applied to every watch event before it enters a store
//! ([`kube::runtime::WatchStreamExt::modify`], as kube-runtime's docs suggest for memory), so a
//! cache of 10,000 locks and their Leases, and of every pod in the served namespaces, holds no
//! `managedFields` (often the larger half of an object), no container specs and no node images.
//!
//! Writes never start from a cached object: every write is a patch or an update built from the
//! fields kept here (name, UID, resourceVersion, the Lease spec), so nothing dropped here can be
//! written back as missing.

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus};
use kube::Resource;

use crate::lock::{GRANTED_LOCK_ANNOTATION, LOCK_ANNOTATION, LOCKS_ANNOTATION, is_per_lock_annotation};

/// The annotation `kubectl apply` keeps a whole copy of the object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops `metadata.managedFields` and kubectl's last-applied copy (neither is read by the
/// operator). For locks, claims, Leases and namespaces.
pub fn meta<K: Resource>(obj: &mut K) {
    let m = obj.meta_mut();
    m.managed_fields = None;
    if let Some(a) = m.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

/// Keeps of a pod what the lock decision ([`super::candidate_of_pod`]), the pod checks and the
/// node watch read: its metadata (without managedFields), `spec.schedulingGates`,
/// `spec.nodeName` and `status.phase`. A pod that names no lock (no `leasehold.dev/lock`,
/// `leasehold.dev/granted-lock` or `leasehold.dev/locks` annotation and no per-lock annotation of
/// a multi-lock pod: most pods of a namespace) keeps only its name,
/// namespace, UID and resourceVersion; if it is annotated later, that watch event carries the
/// whole pod again.
pub fn pod(p: &mut Pod) {
    meta(p);
    let names_a_lock = p.metadata.annotations.as_ref().is_some_and(|a| {
        a.contains_key(LOCK_ANNOTATION)
            || a.contains_key(GRANTED_LOCK_ANNOTATION)
            || a.contains_key(LOCKS_ANNOTATION)
            || a.keys().any(|k| is_per_lock_annotation(k))
    });
    if !names_a_lock {
        let m = std::mem::take(&mut p.metadata);
        p.metadata = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            ..Default::default()
        };
        p.spec = None;
        p.status = None;
        return;
    }
    p.metadata.owner_references = None;
    p.spec = p.spec.take().map(|s| PodSpec {
        scheduling_gates: s.scheduling_gates,
        node_name: s.node_name,
        ..Default::default()
    });
    p.status = p.status.take().map(|s| PodStatus { phase: s.phase, ..Default::default() });
}

/// Keeps of a node its metadata (without managedFields) and its conditions (the lock decision
/// reads `Ready`); drops images (often tens of KiB per node), addresses, capacity and info.
pub fn node(n: &mut Node) {
    meta(n);
    n.spec = n.spec.take().map(|_| NodeSpec::default());
    n.status = n.status.take().map(|s| NodeStatus { conditions: s.conditions, ..Default::default() });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod_with(annotations: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "creationTimestamp": "2026-12-01T00:00:00Z", "deletionTimestamp": "2026-12-01T00:01:00Z",
                "annotations": annotations, "labels": {"app": "x"},
                "managedFields": [{"manager": "kubectl", "operation": "Update"}],
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j1"}],
            },
            "spec": {
                "nodeName": "n1", "schedulingGates": [{"name": "leasehold.dev/lock"}],
                "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "1"]}],
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap()
    }

    #[test]
    fn a_lock_pod_keeps_what_the_decision_reads_and_nothing_else() {
        let full = pod_with(json!({LOCK_ANNOTATION: "db", "leasehold.dev/token": "3", LAST_APPLIED: "{}"}));
        let mut p = full.clone();
        pod(&mut p);
        // The decision's view is unchanged by trimming.
        assert_eq!(super::super::candidate_of_pod(&p, "db", false), super::super::candidate_of_pod(&full, "db", false));
        assert!(p.metadata.managed_fields.is_none() && p.metadata.owner_references.is_none());
        let a = p.metadata.annotations.as_ref().unwrap();
        assert!(a.contains_key("leasehold.dev/token") && !a.contains_key(LAST_APPLIED));
        let spec = p.spec.as_ref().unwrap();
        assert!(spec.containers.is_empty() && spec.node_name.as_deref() == Some("n1"));
        assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
        assert!(p.status.as_ref().unwrap().conditions.is_none());
    }

    #[test]
    fn a_pod_that_names_no_lock_keeps_only_its_identity() {
        let mut p = pod_with(json!({"other": "x"}));
        pod(&mut p);
        assert_eq!(p.metadata.name.as_deref(), Some("p"));
        assert_eq!(p.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(p.metadata.resource_version.as_deref(), Some("7"));
        assert!(p.metadata.annotations.is_none() && p.spec.is_none() && p.status.is_none());
        assert!(super::super::candidate_of_pod(&p, "db", false).is_none());
    }

    #[test]
    fn a_multi_lock_pod_keeps_what_the_decision_reads() {
        let full = pod_with(json!({LOCKS_ANNOTATION: "a,b", "a.locks.leasehold.dev/fencing-token": "3"}));
        let mut p = full.clone();
        pod(&mut p);
        for lock in ["a", "b"] {
            let trimmed = super::super::candidate_of_pod(&p, lock, false);
            assert!(trimmed.as_ref().is_some_and(|c| c.multi.is_some()), "{lock}: {trimmed:?}");
            assert_eq!(trimmed, super::super::candidate_of_pod(&full, lock, false));
        }
        // A token recorded for a lock is enough to keep the pod whole (its list was edited away).
        let mut p = pod_with(json!({"b.locks.leasehold.dev/fencing-token": "3"}));
        pod(&mut p);
        assert!(p.spec.is_some() && p.metadata.annotations.is_some());
    }

    #[test]
    fn a_node_keeps_its_conditions_only() {
        let mut n: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "managedFields": [{"manager": "kubelet"}]},
            "spec": {"podCIDR": "10.0.0.0/24"},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "images": [{"names": ["busybox"], "sizeBytes": 1}],
            },
        }))
        .unwrap();
        node(&mut n);
        assert!(n.metadata.managed_fields.is_none());
        let s = n.status.unwrap();
        assert_eq!(s.conditions.unwrap()[0].type_, "Ready");
        assert!(s.images.is_none());
    }
}
