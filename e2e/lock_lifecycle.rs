//! The main path: gated pods are granted one at a time, in FIFO order, with increasing fencing
//! tokens, and hand the lock over when they finish.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use leasehold::crd::DistributedLock;
use serde_json::json;

use crate::support::{
    TestNs, WAIT, gated_pod, is_gated, phase, snapshot, token_of, wait_pod, wait_until, watch_holders,
};

#[tokio::test]
async fn gated_pods_get_the_lock_one_at_a_time_in_order_with_increasing_tokens() {
    let mut ns = TestNs::new("fifo").await;
    let log = watch_holders(&ns);
    ns.create_lock("report", json!({})).await;
    for name in ["first", "second", "third"] {
        ns.create_gated_pod(name, "report", "2s").await;
        // creationTimestamp has one-second resolution: space the pods so FIFO order is defined.
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    }
    ns.start_operator(&[]);
    let first = wait_pod(&ns, "first", "granted", |p| !is_gated(p)).await;
    assert!(token_of(&first).is_some(), "granted pod carries the token annotation");
    let second = wait_pod(&ns, "second", "still gated while first runs", is_gated).await;
    assert!(token_of(&second).is_none());
    wait_pod(&ns, "third", "Succeeded", |p| phase(p) == "Succeeded").await;

    let log = snapshot(&log);
    assert!(log.overlaps.is_empty(), "two holders at once: {:?}", log.overlaps);
    let order: Vec<&str> = log.grants.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(order, ["first", "second", "third"], "FIFO grant order");
    let tokens: Vec<i64> = log.grants.iter().map(|(_, t)| *t).collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]) && tokens[0] > 0, "tokens strictly increase: {tokens:?}");

    // Status is a readable view of the Lease; the Lease records the last grant.
    let locks = ns.api::<DistributedLock>();
    wait_until("lock free in status", WAIT, || async {
        locks.get("report").await.ok().and_then(|l| l.status).is_some_and(|s| s.holder.is_none() && s.waiting == 0)
    })
    .await;
    let status = locks.get("report").await.unwrap().status.unwrap();
    assert_eq!(status.highest_token, tokens[2]);
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready").expect("Ready condition");
    assert_eq!(ready.status, "True");
    let lease = ns.api::<Lease>().get("report").await.unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity, None);
    assert!(lease.metadata.owner_references.unwrap().iter().any(|o| o.kind == "DistributedLock"));

    // Every grant and release is an Event on the lock.
    let events = ns.api::<Event>().list(&ListParams::default()).await.unwrap();
    let on_lock = |reason: &str| {
        events
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("DistributedLock"))
            // A repeated Warning is folded into a series with a count; a Normal Event never is.
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
            .sum::<i32>()
    };
    assert_eq!(on_lock("Granted"), 3);
    assert_eq!(on_lock("Released"), 3);
    ns.cleanup().await;
}

#[tokio::test]
async fn status_shows_holder_and_ordered_waiters() {
    let mut ns = TestNs::new("status").await;
    ns.create_lock("l", json!({})).await;
    ns.start_operator(&[]);
    ns.create_gated_pod("a", "l", "600s").await;
    let a = wait_pod(&ns, "a", "granted", |p| !is_gated(p)).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    ns.create_gated_pod("b", "l", "1s").await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    ns.create_gated_pod("c", "l", "1s").await;
    let locks = ns.api::<DistributedLock>();
    wait_until("status lists two waiters", WAIT, || async {
        locks.get("l").await.ok().and_then(|l| l.status).is_some_and(|s| s.waiting == 2)
    })
    .await;
    let lock = locks.get("l").await.unwrap();
    let s = lock.status.unwrap();
    let holder = s.holder.expect("holder");
    assert_eq!(holder.name, "a");
    assert_eq!(Some(holder.token), token_of(&a));
    assert_eq!(s.waiters, ["b", "c"]);
    assert_eq!(s.observed_generation, lock.metadata.generation);
    let held = s.conditions.iter().find(|c| c.type_ == "Held").unwrap();
    assert_eq!((held.status.as_str(), held.reason.as_str()), ("True", "Granted"));

    // Each waiter is told once what it waits for, who holds the lock, and its place.
    let events = ns.api::<Event>();
    let waiting = || async {
        let list = events.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
        list.into_iter().filter(|e| e.reason.as_deref() == Some("Waiting")).collect::<Vec<_>>()
    };
    wait_until("a Waiting event for b and for c", WAIT, || async { waiting().await.len() == 2 }).await;
    // More reconciles (a's renewals of status, the next pod event) must not repeat them.
    ns.api::<Pod>()
        .patch("c", &PatchParams::default(), &Patch::Merge(&json!({"metadata": {"labels": {"poke": "1"}}})))
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let told = waiting().await;
    let note = |pod: &str| {
        let e: Vec<_> =
            told.iter().filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod)).collect();
        assert_eq!(e.len(), 1, "one Waiting event for {pod}: {told:?}");
        assert!(e[0].series.is_none(), "the Waiting event for {pod} was repeated: {:?}", e[0].series);
        e[0].note.clone().unwrap_or_default()
    };
    let token = holder.token;
    assert_eq!(
        note("b"),
        format!("waiting for lock l, held by a with fencing token {token}: place 1 of 1 in the queue")
    );
    assert_eq!(
        note("c"),
        format!("waiting for lock l, held by a with fencing token {token}: place 2 of 2 in the queue")
    );
    ns.cleanup().await;
}

#[tokio::test]
async fn pod_naming_a_missing_lock_waits_with_a_warning_and_is_granted_once_it_exists() {
    let mut ns = TestNs::new("missing").await;
    ns.start_operator(&[]);
    ns.create_gated_pod("early", "later", "1s").await;
    let events = ns.api::<Event>();
    wait_until("LockNotFound event", WAIT, || async {
        events
            .list(&ListParams::default())
            .await
            .is_ok_and(|l| l.items.iter().any(|e| e.reason.as_deref() == Some("LockNotFound")))
    })
    .await;
    assert!(is_gated(&ns.api().get("early").await.unwrap()));
    ns.create_lock("later", json!({})).await;
    let p = wait_pod(&ns, "early", "granted", |p| !is_gated(p)).await;
    assert!(token_of(&p).is_some());
    ns.cleanup().await;
}

/// A pod that waits at the gate but names no lock (a blank `leasehold.dev/locks`, which the
/// chart's policies would refuse; these tests run the operator without them) can never be
/// ungated: it gets one Warning Event saying so, and a pod that names a lock beside it does not.
#[tokio::test]
async fn a_gated_pod_that_names_no_lock_is_told_so() {
    let mut ns = TestNs::new("nolock").await;
    ns.create_lock("l", json!({})).await;
    ns.start_operator(&[]);
    let mut blank = gated_pod("blank", "l", "1s");
    let ann = blank.metadata.annotations.as_mut().unwrap();
    ann.remove(leasehold::lock::LOCK_ANNOTATION);
    ann.insert(leasehold::lock::LOCKS_ANNOTATION.into(), " , ".into());
    ns.create_pod(blank).await;
    ns.create_gated_pod("named", "l", "1s").await;
    let e = ns.wait_event("Pod", "InvalidAnnotation").await;
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.regarding.as_ref().and_then(|r| r.name.as_deref()), Some("blank"));
    let note = e.note.unwrap_or_default();
    assert!(note.contains("names no lock") && note.contains("nothing will remove the gate"), "{note}");
    wait_pod(&ns, "named", "granted", |p| !is_gated(p)).await;
    let events = ns.api::<Event>().list(&ListParams::default()).await.unwrap().items;
    let invalid: Vec<_> = events.iter().filter(|e| e.reason.as_deref() == Some("InvalidAnnotation")).collect();
    assert_eq!(invalid.len(), 1, "one warning, for the pod that names no lock: {invalid:?}");
    assert!(is_gated(&ns.api().get("blank").await.unwrap()));
    ns.cleanup().await;
}

/// A claim made by hand (not by `leasehold lock`, which refuses a missing lock) for a lock that
/// does not exist yet gets a `LockNotFound` Warning Event, waits, and is granted once the lock
/// is created.
#[tokio::test]
async fn claim_naming_a_missing_lock_waits_with_a_warning_and_is_granted_once_it_exists() {
    use leasehold::crd::{ClaimPhase, DistributedLockClaim};
    let mut ns = TestNs::new("missingclaim").await;
    ns.start_operator(&[]);
    let claims = ns.api::<DistributedLockClaim>();
    let claim: DistributedLockClaim = serde_json::from_value(json!({
        "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLockClaim",
        "metadata": {"name": "early"}, "spec": {"lock": "later", "identity": "worker-1"},
    }))
    .unwrap();
    claims.create(&PostParams::default(), &claim).await.unwrap();
    let e = ns.wait_event("DistributedLockClaim", "LockNotFound").await;
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    let note = e.note.unwrap_or_default();
    assert!(note.contains("DistributedLock later does not exist"), "{note}");
    assert!(claims.get("early").await.unwrap().status.and_then(|s| s.phase).is_none(), "still waiting");
    ns.create_lock("later", json!({})).await;
    wait_until("claim granted once the lock exists", WAIT, || async {
        claims.get("early").await.ok().and_then(|c| c.status?.phase) == Some(ClaimPhase::Granted)
    })
    .await;
    ns.cleanup().await;
}

/// Two waiters turned away from one lock (`on-busy: skip` while it is held) give two Events on
/// the lock, each naming its own pod. kube-runtime's `Recorder` folded the second into the first
/// one's series and kept the first note, so the lock said twice that `skip-1` was turned away.
#[tokio::test]
async fn each_waiter_turned_away_from_a_lock_gets_its_own_event_on_the_lock() {
    let mut ns = TestNs::new("rejections").await;
    ns.create_lock("l", json!({})).await;
    ns.start_operator(&[]);
    ns.create_gated_pod("holder", "l", "600s").await;
    wait_pod(&ns, "holder", "granted", |p| !is_gated(p)).await;
    for name in ["skip-1", "skip-2"] {
        let mut p = gated_pod(name, "l", "1s");
        p.metadata.annotations.get_or_insert_default().insert("leasehold.dev/on-busy".into(), "skip".into());
        ns.create_pod(p).await;
        wait_pod(&ns, name, "turned away", |p| phase(p) == "Failed").await;
    }
    let events = ns.api::<Event>();
    let notes = || async {
        let list = events.list(&ListParams::default()).await.unwrap().items;
        list.into_iter()
            .filter(|e| e.reason.as_deref() == Some("LockBusy"))
            .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("DistributedLock"))
            .map(|e| e.note.unwrap_or_default())
            .collect::<Vec<_>>()
    };
    wait_until("an Event on the lock for each waiter turned away", WAIT, || async {
        let n = notes().await;
        n.iter().any(|n| n.starts_with("skip-1:")) && n.iter().any(|n| n.starts_with("skip-2:"))
    })
    .await;
    assert_eq!(notes().await.len(), 2, "{:?}", notes().await);
    ns.cleanup().await;
}

#[tokio::test]
async fn pod_that_bypasses_the_scheduler_is_flagged_and_never_holds() {
    let mut ns = TestNs::new("nodename").await;
    ns.create_lock("l", json!({})).await;
    ns.start_operator(&[]);
    let mut bypass = gated_pod("bypass", "l", "600s");
    let spec = bypass.spec.as_mut().unwrap();
    spec.scheduling_gates = None;
    spec.node_name = Some("kwok-node-0".into());
    ns.create_pod(bypass).await;
    let events = ns.api::<Event>();
    wait_until("NotGateable event", WAIT, || async {
        events
            .list(&ListParams::default())
            .await
            .is_ok_and(|l| l.items.iter().any(|e| e.reason.as_deref() == Some("NotGateable")))
    })
    .await;
    // A gated pod still gets the lock: the bypassing pod does not count as a holder.
    ns.create_gated_pod("fair", "l", "600s").await;
    wait_pod(&ns, "fair", "granted", |p| !is_gated(p)).await;
    let lock = ns.api::<DistributedLock>().get("l").await.unwrap();
    assert_ne!(lock.status.and_then(|s| s.holder).map(|h| h.name), Some("bypass".into()));
    ns.cleanup().await;
}

#[tokio::test]
async fn invalid_specs_are_rejected_by_the_api_server_with_a_clear_message() {
    let ns = TestNs::new("invalid").await;
    let locks = ns.api::<DistributedLock>();
    for (spec, expect) in [
        (json!({"leaseDurationSeconds": 0}), "greater than or equal to 1"),
        (json!({"startTimeoutSeconds": -5}), "greater than or equal to 1"),
        (json!({"leaseDurationSeconds": 100000}), "less than or equal to 3600"),
        (
            json!({"leaseDurationSeconds": 60, "nodeLossTimeoutSeconds": 30}),
            "nodeLossTimeoutSeconds must be at least leaseDurationSeconds",
        ),
        // Only the lease set: the message names the default that applies.
        (
            json!({"leaseDurationSeconds": 600}),
            "nodeLossTimeoutSeconds must be at least leaseDurationSeconds (it is 300 when not set, so a lease longer than 300 s needs it set too)",
        ),
    ] {
        let obj = serde_json::from_value(json!({
            "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLock",
            "metadata": {"name": "bad"}, "spec": spec,
        }));
        let lock: DistributedLock = match obj {
            Ok(l) => l,
            Err(e) => panic!("test object: {e}"),
        };
        let err = locks.create(&PostParams::default(), &lock).await.expect_err("invalid spec must be rejected");
        let kube::Error::Api(s) = err else { panic!("expected API error") };
        assert_eq!(s.code, 422, "{s:?}");
        assert!(s.message.contains(expect), "message {:?} should contain {expect:?}", s.message);
    }
    // A name longer than 63 characters could never be served (it is the label value on the
    // lock's Lease): refused; 63 is fine.
    let long: DistributedLock = serde_json::from_value(json!({
        "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLock",
        "metadata": {"name": "k".repeat(64)}, "spec": {},
    }))
    .unwrap();
    let err = locks.create(&PostParams::default(), &long).await.expect_err("a 64-character name must be rejected");
    let kube::Error::Api(s) = err else { panic!("expected API error") };
    assert_eq!(s.code, 422, "{s:?}");
    assert!(s.message.contains("name is at most 63 characters"), "{:?}", s.message);
    ns.create_lock(&"k".repeat(63), json!({})).await;
    // `spec: {}` is valid and defaulted by the API server.
    let ok = ns.create_lock("ok", json!({})).await;
    assert_eq!(ok.spec.lease_duration_seconds, 15);
    ns.cleanup().await;
}

#[tokio::test]
async fn granted_pod_that_never_starts_is_reclaimed_after_the_start_timeout() {
    let mut ns = TestNs::new("starttimeout").await;
    ns.create_lock("l", json!({"startTimeoutSeconds": 3})).await;
    ns.start_operator(&[]);
    let mut stuck = gated_pod("stuck", "l", "600s");
    stuck.spec.as_mut().unwrap().node_selector = Some([("no-such-node".to_string(), "x".to_string())].into());
    ns.create_pod(stuck).await;
    wait_pod(&ns, "stuck", "granted", |p| !is_gated(p)).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    ns.create_gated_pod("next", "l", "600s").await;
    let next = wait_pod(&ns, "next", "granted after the stuck pod is reclaimed", |p| !is_gated(p)).await;
    assert!(ns.api::<k8s_openapi::api::core::v1::Pod>().get_opt("stuck").await.unwrap().is_none(), "stuck pod deleted");
    let events = ns.api::<Event>().list(&ListParams::default()).await.unwrap();
    assert!(events.items.iter().any(|e| e.reason.as_deref() == Some("StartTimeout")));
    assert!(token_of(&next).unwrap() > 1);
    ns.cleanup().await;
}

/// Every `ADDED` / `DELETED` event of the claims in the test namespace from now on, as
/// `(event, claim UID)`, and every version of Lease `lease` (its `leasehold.dev/holder-uid`, ""
/// when free), collected in the background (issue 12: what the standing claim must not write,
/// and what the Lease named).
struct Recorded {
    claims: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>,
    lease_holders: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

async fn record(ns: &TestNs, lease: &str) -> Recorded {
    use futures::StreamExt;
    use kube::api::{WatchEvent, WatchParams};
    use leasehold::crd::DistributedLockClaim;
    let claims_api = ns.api::<DistributedLockClaim>();
    let rv = claims_api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap_or_default();
    let mut stream = claims_api.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    let claims = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
    let sink = claims.clone();
    tokio::spawn(async move {
        while let Some(Ok(ev)) = stream.next().await {
            let (what, c) = match ev {
                WatchEvent::Added(c) => ("ADDED", c),
                WatchEvent::Deleted(c) => ("DELETED", c),
                _ => continue,
            };
            sink.lock().unwrap().push((what.to_string(), c.metadata.uid.unwrap_or_default()));
        }
    });
    let leases = ns.api::<Lease>();
    let by_name = WatchParams::default().fields(&format!("metadata.name={lease}"));
    let mut stream = leases.watch(&by_name, "0").await.unwrap().boxed();
    let lease_holders = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
    let sink = lease_holders.clone();
    tokio::spawn(async move {
        while let Some(Ok(ev)) = stream.next().await {
            if let WatchEvent::Added(l) | WatchEvent::Modified(l) = ev {
                let uid =
                    l.metadata.annotations.unwrap_or_default().get(leasehold::lock::HOLDER_UID_ANNOTATION).cloned();
                sink.lock().unwrap().push(uid.unwrap_or_default());
            }
        }
    });
    Recorded { claims, lease_holders }
}

fn released_of(l: &Lease) -> Vec<String> {
    leasehold::lease::released(l)
}

/// Issue 12: a `Holder` keeps one standing claim across acquire/release cycles. The second
/// acquire is request 2 of the same claim object (same UID; it takes the free Lease, or raises
/// `spec.request`): no claim is created or
/// deleted in between, the Lease names the request UID `<claim UID>/2`, lists request 1 as
/// released, and the second grant's token is higher. `close()` deletes the claim.
#[tokio::test]
async fn a_holder_acquires_again_on_its_standing_claim_with_a_higher_token_and_no_claim_create_or_delete() {
    use leasehold::crd::DistributedLockClaim;
    use leasehold::holder::Holder;
    use leasehold::lock::grant::request_uid;
    let mut ns = TestNs::new("standing").await;
    ns.create_lock("l", json!({})).await;
    ns.start_operator(&[]);
    let claims = ns.api::<DistributedLockClaim>();
    let leases = ns.api::<Lease>();
    let rec = record(&ns, "l").await;
    let holder = Holder::new(ns.client.clone(), &ns.ns, "l", "me");
    let first = holder.acquire(Some(WAIT)).await.expect("first acquire");
    let t1 = first.token();
    let listed = claims.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(listed.len(), 1, "one claim");
    let uid = listed[0].metadata.uid.clone().unwrap();
    assert_eq!(listed[0].spec.request, Some(1));
    first.release().await.expect("first release");
    let l = leases.get("l").await.unwrap();
    assert_eq!(released_of(&l), vec![request_uid(&uid, 1)], "the release lists request 1");
    // A clone shares the standing claim.
    let second = holder.clone().acquire(Some(WAIT)).await.expect("second acquire");
    assert!(second.token() > t1, "second token {} above the first {t1}", second.token());
    let listed = claims.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(listed.len(), 1, "still one claim");
    assert_eq!(listed[0].metadata.uid.as_deref(), Some(uid.as_str()), "the same claim object");
    // The lock was free: the second request arrives by the Lease (it takes the Lease, and
    // `spec.request` stays 1) once the operator has written the Lease's token ceiling; otherwise
    // by raising `spec.request` to 2. Either way the Lease names request 2 (below).
    assert!(matches!(listed[0].spec.request, Some(1 | 2)), "spec.request {:?}", listed[0].spec.request);
    assert!(listed[0].spec.request_time.is_some());
    let l = leases.get("l").await.unwrap();
    let holder_uid =
        l.metadata.annotations.clone().unwrap_or_default().get(leasehold::lock::HOLDER_UID_ANNOTATION).cloned();
    assert_eq!(holder_uid, Some(request_uid(&uid, 2)), "the Lease names request 2");
    second.release().await.expect("second release");
    let l = leases.get("l").await.unwrap();
    // Request 2 replaces request 1 in the list, unless request 2 arrived by the Lease: then the
    // claim's spec still shows request 1, and its entry stays (so that an operator reading the
    // spec alone never grants it again).
    let spec_request = listed[0].spec.request.unwrap();
    let expected: Vec<String> = match spec_request {
        1 => vec![request_uid(&uid, 1), request_uid(&uid, 2)],
        _ => vec![request_uid(&uid, 2)],
    };
    assert_eq!(released_of(&l), expected, "request 2 in the list");
    // No claim was created or deleted after the first create.
    let events = rec.claims.lock().unwrap().clone();
    assert_eq!(events, vec![("ADDED".to_string(), uid.clone())], "claim events between the acquires");
    holder.close().await;
    wait_until("the standing claim is deleted by close()", WAIT, || async {
        claims.list(&ListParams::default()).await.unwrap().items.is_empty()
    })
    .await;
    drop(rec.lease_holders);
    ns.cleanup().await;
}

/// Issue 12: a released request of a standing claim is never granted again. A releases (within
/// the operator's one-second record delay, so its claim's status never records the grant) while
/// B waits: the release's Lease write lists A's request UID in `leasehold.dev/released`, B is
/// granted, and after B releases too the Lease stays free: no version of it names A's request
/// again, although A's claim still shows that request.
#[tokio::test]
async fn a_released_request_of_a_standing_claim_is_never_granted_again() {
    use leasehold::crd::DistributedLockClaim;
    use leasehold::holder::Holder;
    use leasehold::lock::grant::request_uid;
    use std::time::Duration;
    let mut ns = TestNs::new("released").await;
    ns.create_lock("l", json!({"leaseDurationSeconds": 3})).await;
    ns.start_operator(&[]);
    let claims = ns.api::<DistributedLockClaim>();
    let leases = ns.api::<Lease>();
    let rec = record(&ns, "l").await;
    let a = Holder::new(ns.client.clone(), &ns.ns, "l", "a");
    let b = Holder::new(ns.client.clone(), &ns.ns, "l", "b");
    let ga = a.acquire(Some(WAIT)).await.expect("a acquires");
    let b_ticket = b.enqueue(leasehold::crd::OnBusy::Wait).await.expect("b enqueues");
    let a_claim = claims.list(&ListParams::default()).await.unwrap().items.into_iter().find(|c| c.spec.identity == "a");
    let a_request = request_uid(&a_claim.unwrap().metadata.uid.unwrap(), 1);
    ga.release().await.expect("a releases");
    let gb = b_ticket.wait(Some(WAIT)).await.expect("b is granted");
    let l = leases.get("l").await.unwrap();
    assert!(released_of(&l).contains(&a_request), "the Lease lists a's request: {:?}", released_of(&l));
    tokio::time::sleep(Duration::from_secs(2)).await;
    gb.release().await.expect("b releases");
    // Two lease durations: a's claim still asks with request 1, and the lock stays free.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let a_claim = claims.list(&ListParams::default()).await.unwrap().items.into_iter().find(|c| c.spec.identity == "a");
    assert_eq!(a_claim.and_then(|c| c.spec.request), Some(1), "a's claim stays at request 1");
    let l = leases.get("l").await.unwrap();
    assert_eq!(l.spec.and_then(|s| s.holder_identity), None, "the lock stays free");
    // The versions naming a's request are one run (its grant and renewals): none after it.
    let holders = rec.lease_holders.lock().unwrap().clone();
    let at: Vec<usize> = holders.iter().enumerate().filter(|(_, u)| **u == a_request).map(|(i, _)| i).collect();
    assert!(!at.is_empty(), "the Lease named a's request: {holders:?}");
    assert_eq!(at.len(), at[at.len() - 1] - at[0] + 1, "a's request was named again after its release: {holders:?}");
    a.close().await;
    b.close().await;
    ns.cleanup().await;
}

/// A standing claim's second `try_acquire()` on a busy lock is answered "busy" (`Ok(None)`) at
/// once, although the claim's status recorded request 1's grant (held past the 1 s record
/// delay): the rejection of request 2 removes request 1's token from the status. Reviewed
/// 2026-12-05: the merge patch kept the old token, and the holder, reading a token, waited for a
/// grant that never came (`try_acquire` has no timeout: for ever).
#[tokio::test]
async fn a_standing_claims_second_try_acquire_on_a_busy_lock_answers_busy() {
    use leasehold::crd::DistributedLockClaim;
    use leasehold::holder::Holder;
    use std::time::Duration;
    let mut ns = TestNs::new("standing-busy").await;
    ns.create_lock("l", json!({})).await;
    ns.start_operator(&[]);
    let claims = ns.api::<DistributedLockClaim>();
    let me = Holder::new(ns.client.clone(), &ns.ns, "l", "me");
    let first = me.try_acquire().await.expect("first try_acquire").expect("a free lock is granted");
    wait_until("request 1's grant is recorded in the claim's status", WAIT, || async {
        claims
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|c| c.status.as_ref().is_some_and(|s| s.request == Some(1) && s.token == Some(first.token())))
    })
    .await;
    first.release().await.expect("release");
    let other = Holder::new(ns.client.clone(), &ns.ns, "l", "other");
    let held = other.acquire(Some(WAIT)).await.expect("the other holder takes the lock");
    let again = tokio::time::timeout(Duration::from_secs(30), me.try_acquire())
        .await
        .expect("the second try_acquire is answered, not left waiting");
    assert!(matches!(again, Ok(None)), "busy lock: expected Ok(None), got {:?}", again.map(|g| g.map(|g| g.token())));
    held.release().await.expect("release");
    me.close().await;
    ns.cleanup().await;
}
