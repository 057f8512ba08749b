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

/// `cluster.sh restart` of two components at once, as the chaos nemesis does: a
/// kube-controller-manager restart that waits for a killed API server must not keep the API
/// server's own restart out (with one lock for every restart it did, and the API server stayed
/// down for ten minutes of a chaos run). Runs on a control plane of its own.
#[test]
fn a_controller_restart_waiting_for_the_api_server_does_not_block_its_restart() {
    use std::process::Command;
    use std::time::{Duration, Instant};
    let name = format!("restart-{}", std::process::id());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/e2e/cluster.sh");
    let run = |args: &[&str]| Command::new("bash").arg(script).args(args).output().expect("run cluster.sh");
    struct Down<'a>(&'a str, &'a str);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            let _ = Command::new("bash").args([self.0, "down", self.1]).output();
        }
    }
    let _down = Down(script, &name);
    let up = run(&["up", &name]);
    assert!(up.status.success(), "up: {}", String::from_utf8_lossy(&up.stderr));
    let dir = std::path::PathBuf::from(std::env::var("LEASEHOLD_RUN_DIR").unwrap_or("/tmp/leasehold-clusters".into()))
        .join(&name);
    for comp in ["kube-apiserver", "kube-controller-manager"] {
        let pid = std::fs::read_to_string(dir.join(format!("pids/{comp}.pid"))).unwrap();
        let killed = Command::new("kill").args(["-KILL", "--", &format!("-{}", pid.trim())]).status().unwrap();
        assert!(killed.success(), "kill {comp}");
    }
    let mut kcm = Command::new("bash").arg(script).args(["restart", &name, "kube-controller-manager"]).spawn().unwrap();
    std::thread::sleep(Duration::from_secs(2)); // it now waits for the API server
    let started = Instant::now();
    let apiserver = run(&["restart", &name, "kube-apiserver"]);
    assert!(apiserver.status.success(), "restart kube-apiserver: {}", String::from_utf8_lossy(&apiserver.stderr));
    assert!(started.elapsed() < Duration::from_secs(45), "the API server restart took {:?}", started.elapsed());
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = kcm.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the kube-controller-manager restart did not finish");
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(status.success(), "restart kube-controller-manager failed");
    let st = run(&["status", &name]);
    assert!(st.status.success(), "every component healthy: {}", String::from_utf8_lossy(&st.stdout));
}
