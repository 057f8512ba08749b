//! The control plane itself: server-side behaviour a mock could not give.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use serde_json::json;

use crate::support::{TestNs, phase, wait_pod};

#[tokio::test]
async fn stale_lease_update_is_rejected_with_409() {
    let ns = TestNs::new("smoke").await;
    let leases = ns.api::<Lease>();
    let lease: Lease =
        serde_json::from_value(json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}})).unwrap();
    let v1 = leases.create(&PostParams::default(), &lease).await.unwrap();
    let mut fresh = v1.clone();
    fresh.spec.as_mut().unwrap().holder_identity = Some("b".into());
    leases.replace("l", &PostParams::default(), &fresh).await.expect("update with current resourceVersion");
    let mut stale = v1.clone();
    stale.spec.as_mut().unwrap().holder_identity = Some("c".into());
    let err = leases.replace("l", &PostParams::default(), &stale).await.expect_err("stale update must fail");
    match err {
        kube::Error::Api(s) => assert_eq!(s.code, 409, "{s:?}"),
        other => panic!("expected a 409 API error, got {other}"),
    }
    assert_eq!(leases.get("l").await.unwrap().spec.unwrap().holder_identity.as_deref(), Some("b"));
    ns.cleanup().await;
}

#[tokio::test]
async fn pods_are_scheduled_on_fake_nodes_and_run_to_completion() {
    let ns = TestNs::new("smoke").await;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "1s"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    ns.create_pod(pod).await;
    let p = wait_pod(&ns, "p", "Succeeded", |p| phase(p) == "Succeeded").await;
    assert!(p.spec.unwrap().node_name.is_some_and(|n| !n.is_empty()), "scheduled by kube-scheduler onto a node");
    ns.cleanup().await;
}
