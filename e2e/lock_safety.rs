//! Safety rules: never two holders, tokens never go backwards, no zombie locks, no lost waiters,
//! whatever happens to the operator, the Lease or the lock.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use leasehold::crd::DistributedLock;
use leasehold::lock::TOKEN_ANNOTATION;
use serde_json::json;

use crate::support::{
    TestNs, WAIT, gated_pod, is_gated, phase, snapshot, token_of, wait_pod, wait_until, watch_holders,
};

fn lease_token(l: &Lease) -> Option<i64> {
    l.annotations().get(TOKEN_ANNOTATION).and_then(|t| t.parse().ok())
}

#[tokio::test]
async fn operator_killed_between_lease_write_and_pod_patch_finishes_the_grant_on_restart() {
    let mut ns = TestNs::new("crashgrant").await;
    let log = watch_holders(&ns);
    ns.create_lock("l", json!({})).await;
    ns.create_gated_pod("a", "l", "2s").await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    ns.create_gated_pod("b", "l", "2s").await;
    let crashing = ns.start_operator(&[("LEASEHOLD_FAILPOINT", "exit-after-lease-grant")]);
    ns.wait_operator_exit(crashing).await;
    // The Lease names the holder, the pod was never patched.
    let lease = ns.api::<Lease>().get("l").await.unwrap();
    assert_eq!(lease.spec.as_ref().unwrap().holder_identity.as_deref(), Some("a"));
    let granted = lease_token(&lease).expect("token in Lease");
    assert!(is_gated(&ns.api::<Pod>().get("a").await.unwrap()), "crashed before the pod patch");
    assert!(is_gated(&ns.api::<Pod>().get("b").await.unwrap()));

    ns.start_operator(&[]);
    let a = wait_pod(&ns, "a", "grant finished from the Lease", |p| !is_gated(p)).await;
    assert_eq!(token_of(&a), Some(granted), "the restarted operator finishes the grant the Lease records");
    let b = wait_pod(&ns, "b", "granted after a", |p| phase(p) == "Succeeded").await;
    assert_eq!(token_of(&b), Some(granted + 1));
    let log = snapshot(&log);
    assert!(log.overlaps.is_empty(), "two holders at once: {:?}", log.overlaps);
    ns.cleanup().await;
}

#[tokio::test]
async fn two_operators_at_once_never_grant_twice() {
    let mut ns = TestNs::new("twoops").await;
    let log = watch_holders(&ns);
    ns.create_lock("l", json!({})).await;
    ns.start_operator(&[]);
    ns.start_operator(&[]);
    for i in 0..5 {
        ns.create_gated_pod(&format!("p{i}"), "l", "1s").await;
    }
    for i in 0..5 {
        wait_pod(&ns, &format!("p{i}"), "Succeeded", |p| phase(p) == "Succeeded").await;
    }
    let log = snapshot(&log);
    assert!(log.overlaps.is_empty(), "two holders at once: {:?}", log.overlaps);
    assert_eq!(log.grants.len(), 5);
    let mut tokens: Vec<i64> = log.grants.iter().map(|(_, t)| *t).collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "tokens increase in grant order: {tokens:?}");
    tokens.dedup();
    assert_eq!(tokens.len(), 5, "no token issued twice");
    ns.cleanup().await;
}

#[tokio::test]
async fn deleted_lease_is_recreated_and_tokens_continue_above_the_old_high_water_mark() {
    let mut ns = TestNs::new("leasedel").await;
    ns.create_lock("l", json!({})).await;
    ns.start_operator(&[]);
    ns.create_gated_pod("a", "l", "600s").await;
    let a = wait_pod(&ns, "a", "granted", |p| !is_gated(p) && phase(p) == "Running").await;
    let a_token = token_of(&a).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    ns.create_gated_pod("b", "l", "600s").await;

    let leases = ns.api::<Lease>();
    let old_uid = leases.get("l").await.unwrap().uid();
    leases.delete("l", &DeleteParams::default()).await.unwrap();
    wait_until("Lease recreated", WAIT, || async {
        leases.get_opt("l").await.ok().flatten().is_some_and(|l| l.uid() != old_uid)
    })
    .await;
    let lease = leases.get("l").await.unwrap();
    assert_eq!(lease.spec.as_ref().unwrap().holder_identity.as_deref(), Some("a"), "running holder adopted");
    assert!(is_gated(&ns.api::<Pod>().get("b").await.unwrap()), "no second holder while a runs");

    // a finishes (deleted; the fake kubelet removes it after its grace period): b takes over.
    ns.api::<Pod>().delete("a", &DeleteParams::default()).await.unwrap();
    let b = wait_pod(&ns, "b", "granted", |p| !is_gated(p)).await;
    assert!(token_of(&b).unwrap() > a_token, "token {} must exceed the old {a_token}", token_of(&b).unwrap());
    ns.cleanup().await;
}

#[tokio::test]
async fn lock_deleted_mid_grant_leaves_the_operator_serving_and_waiters_waiting() {
    let mut ns = TestNs::new("lockdel").await;
    ns.create_lock("l", json!({})).await;
    ns.create_lock("other", json!({})).await;
    let op = ns.start_operator(&[]);
    ns.create_gated_pod("a", "l", "600s").await;
    wait_pod(&ns, "a", "granted", |p| !is_gated(p)).await;
    ns.create_gated_pod("w", "l", "1s").await;
    ns.api::<DistributedLock>().delete("l", &DeleteParams::default()).await.unwrap();
    // The Lease goes with the lock (ownerReference, garbage collector).
    let leases = ns.api::<Lease>();
    wait_until("Lease garbage-collected", WAIT, || async { leases.get_opt("l").await.ok().flatten().is_none() }).await;
    // The operator still serves other locks.
    ns.create_gated_pod("o", "other", "1s").await;
    wait_pod(&ns, "o", "granted", |p| !is_gated(p)).await;
    assert!(ns.operator_alive(op), "operator must not crash");
    assert!(is_gated(&ns.api::<Pod>().get("w").await.unwrap()), "waiter of a deleted lock stays gated");
    ns.cleanup().await;
}

#[tokio::test]
async fn holder_on_a_lost_node_is_replaced_with_a_higher_token_after_the_bound() {
    let mut ns = TestNs::new("nodelost").await;
    let node_name = format!("{}-node", ns.ns);
    let nodes: Api<Node> = Api::all(ns.client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": node_name, "annotations": {"kwok.x-k8s.io/node": "fake"}, "labels": {"type": "kwok", "lost-test": ns.ns}},
        "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "50"}, "capacity": {"cpu": "8", "memory": "16Gi", "pods": "50"}},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    ns.create_lock("l", json!({"leaseDurationSeconds": 2, "nodeLossTimeoutSeconds": 4})).await;
    ns.start_operator(&[]);
    let mut pinned = gated_pod("pinned", "l", "600s");
    pinned.spec.as_mut().unwrap().node_selector = Some([("lost-test".to_string(), ns.ns.clone())].into());
    ns.create_pod(pinned).await;
    let a = wait_pod(&ns, "pinned", "running on the test node", |p| phase(p) == "Running").await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    ns.create_gated_pod("next", "l", "600s").await;
    // The node disappears (its pod object stays until the pod garbage collector acts).
    nodes.delete(&node_name, &DeleteParams::default()).await.unwrap();
    let next = wait_pod(&ns, "next", "granted after node loss", |p| !is_gated(p)).await;
    assert!(token_of(&next).unwrap() > token_of(&a).unwrap());
    // The release's Event follows the grant (it is not on the handover's path).
    let events = ns.api::<k8s_openapi::api::events::v1::Event>();
    wait_until("a Released event with reason HolderNodeLost", WAIT, || async {
        let list = events.list(&Default::default()).await.map(|l| l.items).unwrap_or_default();
        list.iter().any(|e| e.note.as_deref().is_some_and(|n| n.contains("HolderNodeLost")))
    })
    .await;

    // The zombie (still "running" on the lost node) is never written back into the Lease, with
    // its lower token, once the holder after it is gone: the next waiter is granted above both.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    ns.create_gated_pod("third", "l", "600s").await;
    ns.api::<Pod>().delete("next", &DeleteParams::default()).await.unwrap();
    let leases = ns.api::<Lease>();
    let pods = ns.api::<Pod>();
    let started = std::time::Instant::now();
    let third = loop {
        let lease = leases.get("l").await.unwrap();
        let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone()).unwrap_or_default();
        assert_ne!(holder, "pinned", "the zombie was written back into the Lease");
        assert!(lease_token(&lease).unwrap_or(0) >= token_of(&next).unwrap(), "the Lease token went down");
        let third = pods.get("third").await.unwrap();
        if !is_gated(&third) {
            break third;
        }
        assert!(started.elapsed() < WAIT, "third was never granted");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(token_of(&third).unwrap() > token_of(&next).unwrap());
    ns.cleanup().await;
}

#[tokio::test]
async fn hand_edited_lease_or_reannotated_holder_never_yields_a_second_holder() {
    let mut ns = TestNs::new("tamper").await;
    let log = watch_holders(&ns);
    ns.create_lock("l", json!({})).await;
    ns.create_lock("other", json!({})).await;
    ns.start_operator(&[]);
    ns.create_gated_pod("a", "l", "600s").await;
    let a = wait_pod(&ns, "a", "granted", |p| !is_gated(p)).await;
    let a_token = token_of(&a).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    ns.create_gated_pod("b", "l", "600s").await;
    let leases = ns.api::<Lease>();
    // Someone writes themselves in as holder.
    let patch = json!({"spec": {"holderIdentity": "intruder"}});
    leases.patch("l", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
    wait_until("Lease repaired to the running holder", WAIT, || async {
        leases.get("l").await.ok().and_then(|l| l.spec?.holder_identity).as_deref() == Some("a")
    })
    .await;
    // Someone rewrites the token.
    let patch = json!({"metadata": {"annotations": {"leasehold.dev/fencing-token": "garbage"}}});
    leases.patch("l", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
    wait_until("token repaired", WAIT, || async {
        leases.get("l").await.ok().and_then(|l| lease_token(&l)) == Some(a_token)
    })
    .await;
    // The holder's lock annotation is changed to another lock.
    ns.kubectl(&["annotate", "pod", "a", "--overwrite", "leasehold.dev/lock=other"]);
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let pods = ns.api::<Pod>();
    assert_eq!(token_of(&pods.get("a").await.unwrap()), Some(a_token), "the holder's token never changes");
    assert!(is_gated(&pods.get("b").await.unwrap()), "no second holder of l while a runs");
    // The re-annotated holder goes: l (the lock it holds, leasehold.dev/granted-lock) wakes on
    // that deletion, not on some later event (its next resync is minutes away).
    let dp = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
    pods.delete("a", &dp).await.unwrap();
    let gone = std::time::Instant::now();
    wait_pod(&ns, "b", "granted once a is gone", |p| !is_gated(p)).await;
    assert!(gone.elapsed() < std::time::Duration::from_secs(5), "b waited {:?} for a missed event", gone.elapsed());
    let log = snapshot(&log);
    assert!(log.overlaps.is_empty(), "{:?}", log.overlaps);
    ns.cleanup().await;
}

/// Found by the model checker (`tests/model.rs`): a holder's `DistributedLockClaim` deleted while
/// its `leasehold lock` process still runs (and renews) must not hand the lock to the next
/// waiter; once the process is gone, the next waiter gets it after the lease expires.
#[tokio::test]
async fn a_granted_claim_deleted_under_its_running_process_keeps_the_lock_until_the_lease_expires() {
    use leasehold::crd::DistributedLockClaim;
    let mut ns = TestNs::new("claimgone").await;
    ns.create_lock("l", json!({"leaseDurationSeconds": 3})).await;
    ns.start_operator(&[]);
    let holder = ns.lock_process("holder", &["l", "--identity", "holder", "--", "sh", "-c", "echo ready; sleep 600"]);
    holder.wait_output("holder runs its command", "ready").await;
    ns.create_gated_pod("next", "l", "600s").await;
    let claims = ns.api::<DistributedLockClaim>();
    claims.delete_collection(&DeleteParams::default(), &Default::default()).await.unwrap();
    // Two lease durations while the process runs and renews: the waiter stays gated.
    let pods = ns.api::<Pod>();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(6);
    while std::time::Instant::now() < until {
        let p = pods.get("next").await.unwrap();
        assert!(is_gated(&p), "the waiter was granted while the deleted claim's process still ran");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // The process dies without releasing: the lease expires and the waiter is granted.
    holder.signal_group("KILL");
    let killed = std::time::Instant::now();
    let p = wait_pod(&ns, "next", "granted after the lease expired", |p| !is_gated(p)).await;
    assert!(killed.elapsed() >= std::time::Duration::from_secs(2), "granted before the lease could expire");
    assert!(token_of(&p).is_some_and(|t| t >= 2), "next token above the holder's");
    ns.cleanup().await;
}

/// A Lease with the lock's name that the operator does not own (here: unlabelled, so not in the
/// operator's Lease cache): `Ready=False LeaseNotOwned`, one Warning Event, the waiter counted,
/// no token-reservation loop; once the Lease is gone, the waiter is granted.
#[tokio::test]
async fn a_foreign_lease_with_the_locks_name_is_reported_once_without_a_reservation_loop() {
    use k8s_openapi::api::events::v1::Event;
    use kube::api::{ListParams, Patch, PatchParams};
    let mut ns = TestNs::new("foreign").await;
    let foreign: Lease =
        serde_json::from_value(json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "someone-else"}})).unwrap();
    ns.api::<Lease>().create(&PostParams::default(), &foreign).await.unwrap();
    ns.create_lock("l", json!({})).await;
    ns.create_gated_pod("waiter", "l", "1s").await;
    ns.start_operator(&[]);
    let locks = ns.api::<DistributedLock>();
    let not_ready = |l: &DistributedLock| {
        l.status.as_ref().is_some_and(|s| {
            s.waiting == 1
                && s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "False" && c.reason == "LeaseNotOwned")
        })
    };
    wait_until("Ready=False LeaseNotOwned with the waiter counted", WAIT, || async {
        locks.get("l").await.is_ok_and(|l| not_ready(&l))
    })
    .await;
    // A few seconds later: no reservation loop, one Event, the waiter still gated.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let lock = locks.get("l").await.unwrap();
    let ceiling = lock.status.as_ref().map_or(0, |s| s.token_ceiling);
    assert!(ceiling <= 1000, "token reservations kept going: ceiling {ceiling}");
    let events = ns.api::<Event>().list(&ListParams::default()).await.unwrap();
    let reported = events.items.iter().filter(|e| e.reason.as_deref() == Some("LeaseNotOwned")).count();
    assert_eq!(reported, 1, "one Warning Event, not one per reconcile");
    assert!(is_gated(&ns.api::<Pod>().get("waiter").await.unwrap()));
    // The foreign Lease is removed; the next reconcile (here forced by a label) grants the waiter.
    ns.api::<Lease>().delete("l", &DeleteParams::default()).await.unwrap();
    let touch = json!({"metadata": {"labels": {"touched": "yes"}}});
    locks.patch("l", &PatchParams::default(), &Patch::Merge(&touch)).await.unwrap();
    wait_pod(&ns, "waiter", "granted once the foreign Lease is gone", |p| !is_gated(p)).await;
    ns.cleanup().await;
}

/// A lock deleted and recreated with the same name while its holder still runs: the new lock
/// object does not ignore that holder (no second holder while it runs), and its next token is
/// above the running holder's, so a resource fenced by the old tokens accepts the new holder.
#[tokio::test]
async fn a_lock_recreated_while_its_holder_runs_waits_for_it_and_continues_above_its_token() {
    let mut ns = TestNs::new("recreate").await;
    ns.create_lock("l", json!({})).await;
    ns.start_operator(&[]);
    ns.create_gated_pod("old", "l", "600s").await;
    let old_token = token_of(&wait_pod(&ns, "old", "granted", |p| !is_gated(p)).await).unwrap();
    let locks = ns.api::<DistributedLock>();
    locks.delete("l", &DeleteParams::default()).await.unwrap();
    let leases = ns.api::<Lease>();
    wait_until("Lease garbage-collected", WAIT, || async { leases.get_opt("l").await.ok().flatten().is_none() }).await;
    ns.create_lock("l", json!({})).await;
    ns.create_gated_pod("new", "l", "600s").await;
    // The new lock object shows the old pod as its holder, and grants nobody else meanwhile.
    wait_until("the running holder adopted by the new lock", WAIT, || async {
        locks
            .get("l")
            .await
            .ok()
            .and_then(|l| l.status?.holder)
            .is_some_and(|h| h.name == "old" && h.token == old_token)
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert!(is_gated(&ns.api::<Pod>().get("new").await.unwrap()), "a second pod was granted while the old holder ran");
    ns.api::<Pod>().delete("old", &DeleteParams::default()).await.unwrap();
    let new = wait_pod(&ns, "new", "granted once the old holder is gone", |p| !is_gated(p)).await;
    assert!(token_of(&new).unwrap() > old_token, "the new lock's token is above the old holder's");
    ns.cleanup().await;
}

/// A namespace being deleted: the operator grants nothing in it any more and makes no write
/// that can only fail there (a Lease create is refused in a terminating namespace). The lock
/// (kept here by a finalizer of the test's, so its status can be read) turns `Ready=False,
/// reason NamespaceTerminating`; no failed reconcile in the operator's log (Events cannot be
/// created in a terminating namespace, so its log is where a retry storm would show), no second
/// grant.
#[tokio::test]
async fn nothing_is_granted_in_a_namespace_being_deleted_and_nothing_is_retried_there() {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{ListParams, Patch, PatchParams};
    let mut ns = TestNs::new("nsgone").await;
    let log = watch_holders(&ns);
    let hold = json!({"metadata": {"finalizers": ["e2e.leasehold.dev/hold"]}});
    let locks = ns.api::<DistributedLock>();
    ns.create_lock("l", json!({})).await;
    locks.patch("l", &PatchParams::default(), &Patch::Merge(&hold)).await.unwrap();
    let op = ns.start_operator(&[]);
    ns.create_gated_pod("a", "l", "600s").await;
    wait_pod(&ns, "a", "granted", |p| !is_gated(p)).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    ns.create_gated_pod("b", "l", "600s").await;
    let failed = |log: String| log.lines().filter(|l| l.contains("reconcile failed")).count();
    let failed_before = failed(ns.operator_log(op));

    let nss: Api<Namespace> = Api::all(ns.client.clone());
    nss.delete(&ns.ns, &DeleteParams::default()).await.unwrap();
    let terminating = |l: &DistributedLock| {
        l.status.as_ref().is_some_and(|s| {
            s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "False" && c.reason == "NamespaceTerminating")
        })
    };
    wait_until("Ready=False NamespaceTerminating", WAIT, || async {
        locks.get("l").await.is_ok_and(|l| terminating(&l))
    })
    .await;
    // The namespace controller deletes the pods and the Lease meanwhile; the lock stays (the
    // finalizer). Five seconds of that: nothing granted, nothing retried.
    let pods = ns.api::<Pod>();
    wait_until("pods and Lease gone", WAIT, || async {
        pods.list(&ListParams::default()).await.is_ok_and(|l| l.items.is_empty())
            && ns.api::<Lease>().get_opt("l").await.is_ok_and(|l| l.is_none())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let seen = snapshot(&log);
    assert_eq!(seen.grants.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["a"], "only a was ever granted");
    let log = ns.operator_log(op);
    assert_eq!(failed(log.clone()), failed_before, "writes that can only fail were tried:\n{log}");
    assert!(terminating(&locks.get("l").await.unwrap()), "the lock still says why");

    let release = json!({"metadata": {"finalizers": null}});
    locks.patch("l", &PatchParams::default(), &Patch::Merge(&release)).await.unwrap();
    ns.cleanup().await;
}

/// State letter of process `pid` from /proc (`T` = stopped).
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// A deposed leader writes nothing a current leader's decision does not also allow. Replica a
/// leads and stops itself (SIGSTOP, a test failpoint) just before the Lease write that hands
/// the lock to the next waiter; its leader lease (15 s) runs out, replica b takes over and hands
/// the lock over itself. Then a resumes and sends the write it had prepared, from what it read
/// before the pause: the resourceVersion precondition refuses it (409), or a notices first that
/// it lost the lead; either way b's grant stands and a exits 1.
#[tokio::test]
async fn a_deposed_leader_resumed_after_a_pause_cannot_overwrite_the_new_leaders_grant() {
    let mut ns = TestNs::new("deposed").await;
    let log = watch_holders(&ns);
    let own_ns = ns.ns.clone();
    let le = ["--leader-elect", "--leader-election-namespace", own_ns.as_str(), "--leader-election-lease", "le"];
    let leases = ns.api::<Lease>();
    let leader = || async {
        leases.get_opt("le").await.ok().flatten().and_then(|l| l.spec?.holder_identity).unwrap_or_default()
    };
    ns.create_lock("l", json!({})).await;
    let a = ns.start_operator_with(&[("LEASEHOLD_FAILPOINT", "stop-before-lease-handover")], &le);
    wait_until("a leads", WAIT, || async { leader().await.starts_with("operator-0_") }).await;
    ns.create_gated_pod("first", "l", "2s").await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    ns.create_gated_pod("second", "l", "600s").await;
    let first = wait_pod(&ns, "first", "granted by a", |p| !is_gated(p)).await;
    // first finishes after 2 s; a prepares the handover to second and stops before writing it.
    let pid = ns.operator_pid(a);
    wait_until("a stopped before the handover write", WAIT, || async { proc_state(pid) == Some('T') }).await;
    assert!(is_gated(&ns.api::<Pod>().get("second").await.unwrap()), "nothing written before the pause");

    let b = ns.start_operator_with(&[], &le);
    let second = wait_pod(&ns, "second", "granted by b once a's leader lease expired", |p| !is_gated(p)).await;
    assert!(leader().await.starts_with("operator-1_"), "b leads");
    let (t1, t2) = (token_of(&first).unwrap(), token_of(&second).unwrap());
    assert!(t2 > t1);

    // a resumes mid-reconcile with its stale view and writes at once.
    assert!(std::process::Command::new("kill").args(["-CONT", &pid.to_string()]).status().unwrap().success());
    ns.wait_operator_exit(a).await;
    let a_log = ns.operator_log(a);
    // Two tasks race once a runs again: the reconcile sends its stale write, and the leader
    // election notices the loss and exits the process (then the reconcile may not even log that
    // it resumed: a CI run under load saw that). Either way nothing of a's may stand.
    let stopped = a_log.find("failpoint hit").unwrap_or_else(|| panic!("a stopped at the failpoint:\n{a_log}"));
    let after = &a_log[stopped..];
    let refused = after.contains("reconcile failed") && (after.contains("409") || after.contains("modified"));
    eprintln!("deposed leader: {}", if refused { "its stale write was refused (409)" } else { "exited first" });
    assert!(!after.contains("granted"), "a deposed leader's grant went through:\n{after}");
    assert!(a_log.contains("lost leadership"), "a noticed it was deposed:\n{a_log}");
    let lease = leases.get("l").await.unwrap();
    assert_eq!(lease.spec.and_then(|s| s.holder_identity).as_deref(), Some("second"));
    assert_eq!(lease_token(&leases.get("l").await.unwrap()), Some(t2), "b's grant stands");
    assert_eq!(token_of(&ns.api::<Pod>().get("second").await.unwrap()), Some(t2));
    let seen = snapshot(&log);
    assert!(seen.overlaps.is_empty(), "two holders at once: {:?}", seen.overlaps);
    assert_eq!(seen.grants.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["first", "second"]);
    assert!(ns.operator_alive(b), "b keeps leading");
    ns.cleanup().await;
}

/// A claim whose grant the operator took back (its holder paused past the lease, the lock
/// handed to the next waiter; later a holder that stopped renewing with nobody waiting) no
/// longer shows `Granted`: phase `Expired`, reason `HolderLeaseExpired`, the time, the token of
/// the grant kept. Never two claims `Granted` at once, and the lock's status never keeps naming
/// a holder that is gone.
#[tokio::test]
async fn a_claim_whose_grant_expired_shows_expired_and_the_lock_status_stops_naming_it() {
    use leasehold::crd::{ClaimPhase, DistributedLockClaim};
    let mut ns = TestNs::new("claimexpired").await;
    ns.create_lock("l", json!({"leaseDurationSeconds": 3})).await;
    ns.start_operator(&[]);
    let claims = ns.api::<DistributedLockClaim>();
    let locks = ns.api::<DistributedLock>();
    let claim_of = |identity: &'static str| {
        let claims = claims.clone();
        async move {
            claims.list(&Default::default()).await.unwrap().items.into_iter().find(|c| c.spec.identity == identity)
        }
    };
    let a = ns.lock_process("a", &["l", "--identity", "a", "--", "sh", "-c", "echo ready; sleep 600"]);
    a.wait_output("a runs its command", "ready").await;
    // a's status records its grant a second after it (`CLAIM_RECORD_DELAY`).
    wait_until("a's grant recorded", WAIT, || async { claim_of("a").await.and_then(|c| c.status?.token).is_some() })
        .await;
    let a_token = claim_of("a").await.and_then(|c| c.status?.token).expect("a granted");
    let b = ns.lock_process("b", &["l", "--identity", "b", "--", "sh", "-c", "echo ready; sleep 600"]);
    wait_until("b waits", WAIT, || async { claim_of("b").await.is_some() }).await;

    // a is paused past its lease: the operator takes the grant back and grants b.
    a.signal_group("STOP");
    wait_until("b granted", WAIT, || async {
        claim_of("b").await.and_then(|c| c.status).is_some_and(|s| s.phase == Some(ClaimPhase::Granted))
    })
    .await;
    // Read right after b's grant: a's status was written before it.
    let a_status = claim_of("a").await.expect("a's claim").status.expect("a's status");
    assert_eq!(
        a_status.phase,
        Some(ClaimPhase::Expired),
        "a still shows {:?} while b holds: {a_status:?}",
        a_status.phase
    );
    assert_eq!(a_status.reason.as_deref(), Some("HolderLeaseExpired"), "{a_status:?}");
    assert!(a_status.last_transition_time.is_some(), "{a_status:?}");
    assert_eq!(a_status.token, Some(a_token), "the token of the grant is kept");
    assert!(a_status.message.as_deref().is_some_and(|m| m.contains("taken back")), "{a_status:?}");
    let b_token = claim_of("b").await.and_then(|c| c.status?.token).unwrap();
    assert!(b_token > a_token);
    wait_until("lock status names b", WAIT, || async {
        locks.get("l").await.ok().and_then(|l| l.status?.holder).is_some_and(|h| h.name == "b" && h.token == b_token)
    })
    .await;

    // b stops renewing with nobody waiting: its grant expires too, and the lock names nobody.
    b.signal_group("STOP");
    wait_until("b's claim Expired", WAIT, || async {
        claim_of("b")
            .await
            .and_then(|c| c.status)
            .is_some_and(|s| s.phase == Some(ClaimPhase::Expired) && s.reason.as_deref() == Some("HolderLeaseExpired"))
    })
    .await;
    wait_until("lock status names nobody, Held=False", WAIT, || async {
        locks.get("l").await.ok().and_then(|l| l.status).is_some_and(|s| {
            s.holder.is_none() && s.conditions.iter().any(|c| c.type_ == "Held" && c.status == "False")
        })
    })
    .await;
    let lease = ns.api::<Lease>().get("l").await.unwrap();
    assert_eq!(lease.spec.and_then(|s| s.holder_identity), None, "the Lease names nobody");
    a.signal_group("KILL");
    b.signal_group("KILL");
    ns.cleanup().await;
}

/// The hole the model checker found on 2026-12-05 (`tests/model.rs`, run "unseen-old-pod"),
/// replayed: a claim is granted in the Lease and the operator stops before recording it in the
/// claim's status (as it does for `CLAIM_RECORD_DELAY` after every claim grant); a pod older
/// than the claim now waits too (here: re-annotated to this lock, keeping its creation time);
/// the Lease is deleted. The claim's process may be acting on its grant, and nothing but the
/// deleted Lease said so: the recreated Lease is held by the recovery holder for a lease
/// duration (3 s here), and only then is the older pod granted, above every earlier token.
#[tokio::test]
async fn a_lease_recreated_while_a_claim_may_hold_unrecorded_is_held_for_a_lease_duration() {
    use kube::api::{Patch, PatchParams};
    use leasehold::crd::DistributedLockClaim;
    use leasehold::lock::LOCK_ANNOTATION;
    use leasehold::lock::grant::RECOVERY_HOLDER;
    let mut ns = TestNs::new("recovery").await;
    ns.create_lock("l", json!({"leaseDurationSeconds": 3})).await;
    // The older pod waits for another lock at first.
    ns.create_gated_pod("old", "elsewhere", "600s").await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let claim: DistributedLockClaim = serde_json::from_value(json!({
        "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLockClaim",
        "metadata": {"name": "c"}, "spec": {"lock": "l", "identity": "worker-1"},
    }))
    .unwrap();
    ns.api::<DistributedLockClaim>().create(&PostParams::default(), &claim).await.unwrap();
    let crashing = ns.start_operator(&[("LEASEHOLD_FAILPOINT", "exit-after-lease-grant")]);
    ns.wait_operator_exit(crashing).await;
    let leases = ns.api::<Lease>();
    let lease = leases.get("l").await.unwrap();
    assert_eq!(lease.spec.as_ref().unwrap().holder_identity.as_deref(), Some("worker-1"), "the claim is granted");
    let claim_token = lease_token(&lease).unwrap();
    let status = ns.api::<DistributedLockClaim>().get("c").await.unwrap().status.and_then(|s| s.phase);
    assert_eq!(status, None, "the grant is not recorded in the claim's status");

    let to_l = json!({"metadata": {"annotations": {LOCK_ANNOTATION: "l"}}});
    ns.api::<Pod>().patch("old", &PatchParams::default(), &Patch::Merge(&to_l)).await.unwrap();
    leases.delete("l", &DeleteParams::default()).await.unwrap();
    ns.start_operator(&[]);
    let recreated = std::time::Instant::now();
    wait_until("the Lease recreated, held by the recovery holder", WAIT, || async {
        leases.get_opt("l").await.ok().flatten().and_then(|l| l.spec?.holder_identity).as_deref()
            == Some(RECOVERY_HOLDER)
    })
    .await;
    assert!(is_gated(&ns.api::<Pod>().get("old").await.unwrap()), "the older pod waits");
    let old = wait_pod(&ns, "old", "granted once the recovery holder expired", |p| !is_gated(p)).await;
    assert!(
        recreated.elapsed() >= std::time::Duration::from_secs(3),
        "granted {:?} after the restart, before a lease duration",
        recreated.elapsed()
    );
    assert!(token_of(&old).unwrap() > claim_token, "token {:?} must exceed the claim's {claim_token}", token_of(&old));
    ns.cleanup().await;
}
