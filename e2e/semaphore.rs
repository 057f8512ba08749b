//! Semaphores (issue 14, `spec.maxHolders`): gated pods are granted up to N at a time, in FIFO
//! order, each with its own fencing token and a slot whose Lease records the grant; lowering N
//! revokes nobody.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use leasehold::crd::DistributedLock;
use leasehold::lock::{SLOT_ANNOTATION, TOKEN_ANNOTATION};
use serde_json::json;

use crate::support::{TestNs, WAIT, is_gated, on_pod_changes, phase, wait_pod, wait_until};

/// One pod's state as a watch saw it change.
#[derive(Clone, Debug)]
struct Seen {
    at: Instant,
    pod: String,
    /// Ungated and not finished (and not deleted).
    holding: bool,
    phase: String,
    token: Option<i64>,
    slot: Option<u32>,
}

/// Every pod change in the namespace, in watch order, with the time it was seen.
fn watch_pods(ns: &TestNs) -> Arc<Mutex<Vec<Seen>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let log2 = log.clone();
    on_pod_changes(ns, move |p, deleted| {
        let ph = phase(p);
        let ann = |k: &str| p.annotations().get(k).cloned();
        log2.lock().unwrap().push(Seen {
            at: Instant::now(),
            pod: p.name_any(),
            holding: !deleted && !is_gated(p) && ph != "Succeeded" && ph != "Failed",
            phase: if deleted { "Deleted".into() } else { ph },
            token: ann(TOKEN_ANNOTATION).and_then(|t| t.parse().ok()),
            slot: ann(SLOT_ANNOTATION).and_then(|t| t.parse().ok()),
        });
    });
    log
}

/// The most pods holding at once, replaying the watch log in order.
fn max_holding(log: &[Seen]) -> usize {
    let mut state: BTreeMap<&str, bool> = BTreeMap::new();
    let mut max = 0;
    for s in log {
        state.insert(&s.pod, s.holding);
        max = max.max(state.values().filter(|h| **h).count());
    }
    max
}

/// (pod, token, slot) in the order the pods were first seen holding.
fn grants(log: &[Seen]) -> Vec<(String, i64, u32)> {
    let mut out: Vec<(String, i64, u32)> = vec![];
    for s in log.iter().filter(|s| s.holding) {
        if !out.iter().any(|(n, _, _)| *n == s.pod) {
            out.push((s.pod.clone(), s.token.unwrap_or(-1), s.slot.unwrap_or(u32::MAX)));
        }
    }
    out
}

/// Pods ungated and not finished, by a list.
async fn holding_now(api: &Api<Pod>) -> usize {
    let pods = api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    pods.iter().filter(|p| !is_gated(p) && !matches!(phase(p).as_str(), "Succeeded" | "Failed")).count()
}

#[tokio::test]
async fn semaphore_grants_at_most_max_holders_pods_at_once_in_fifo_order_in_slots_0_and_1() {
    let mut ns = TestNs::new("sem-fifo").await;
    let log = watch_pods(&ns);
    ns.create_lock("pool", json!({"maxHolders": 2})).await;
    let names = ["p1", "p2", "p3", "p4", "p5", "p6"];
    for name in names {
        ns.create_gated_pod(name, "pool", "2s").await;
        // creationTimestamp has one-second resolution: space the pods so FIFO order is defined.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    ns.start_operator(&[]);

    // Poll while the six run: never more than two holding; the status shows "2/2" at some point.
    let (pods, locks) = (ns.api::<Pod>(), ns.api::<DistributedLock>());
    let (mut polled_max, mut seen_full) = (0, false);
    let start = Instant::now();
    loop {
        polled_max = polled_max.max(holding_now(&pods).await);
        let status = locks.get("pool").await.ok().and_then(|l| l.status);
        if let Some(s) = status
            && s.occupancy.as_deref() == Some("2/2")
            && s.holders.len() == 2
        {
            let slots: BTreeSet<u32> = s.holders.iter().map(|h| h.slot).collect();
            assert_eq!(slots, BTreeSet::from([0, 1]), "status.holders: {:?}", s.holders);
            seen_full = true;
        }
        let done = pods.get_opt("p6").await.ok().flatten().is_some_and(|p| phase(&p) == "Succeeded");
        if done {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(90), "p6 did not finish in time");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(polled_max <= 2, "polled {polled_max} pods holding at once");
    assert!(seen_full, "status never showed 2/2 holders");

    let log = log.lock().unwrap().clone();
    let watched_max = max_holding(&log);
    assert_eq!(watched_max, 2, "the watch saw at most {watched_max} holders at once (expected exactly 2)");
    let grants = grants(&log);
    let order: Vec<&str> = grants.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(order, names, "FIFO grant order by creation");
    let tokens: Vec<i64> = grants.iter().map(|(_, t, _)| *t).collect();
    assert!(
        tokens[0] > 0 && tokens.windows(2).all(|w| w[0] < w[1]),
        "6 distinct, strictly increasing tokens: {tokens:?}"
    );
    let slots: BTreeSet<u32> = grants.iter().map(|(_, _, s)| *s).collect();
    assert_eq!(slots, BTreeSet::from([0, 1]), "slots used: {grants:?}");
    // Two holders at once never share a slot: replay the log per slot.
    let mut in_slot: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
    for s in &log {
        for holders in in_slot.values_mut() {
            holders.remove(&s.pod);
        }
        if s.holding {
            let holders = in_slot.entry(s.slot.unwrap_or(u32::MAX)).or_default();
            holders.insert(s.pod.clone());
            assert!(holders.len() == 1, "two holders in one slot: {holders:?}");
        }
    }

    // The slot Leases: the lock's own for slot 0, pool-slot-1 for slot 1, both owned by the lock
    // and labelled with it; the status ends free, 0/2, highest token the last one.
    let leases = ns.api::<Lease>();
    for name in ["pool", "pool-slot-1"] {
        let l = leases.get(name).await.unwrap_or_else(|e| panic!("Lease {name}: {e}"));
        assert_eq!(l.labels().get("leasehold.dev/lock").map(String::as_str), Some("pool"), "{name}");
        assert!(l.owner_references().iter().any(|o| o.kind == "DistributedLock" && o.controller == Some(true)));
    }
    wait_until("lock free in status", WAIT, || async {
        locks.get("pool").await.ok().and_then(|l| l.status).is_some_and(|s| {
            s.holder.is_none() && s.holders.is_empty() && s.waiting == 0 && s.occupancy.as_deref() == Some("0/2")
        })
    })
    .await;
    let status = locks.get("pool").await.unwrap().status.unwrap();
    assert_eq!(status.highest_token, tokens[5]);
    assert!(status.slot_tokens.len() == 2 && status.slot_tokens.iter().all(|t| *t > 0), "{:?}", status.slot_tokens);
    let table = ns.kubectl(&["get", "dlock", "pool"]);
    assert!(table.contains("HOLDERS") && table.contains("0/2"), "kubectl get dlock:\n{table}");
    ns.cleanup().await;
}

#[tokio::test]
async fn semaphore_lowered_max_holders_revokes_nobody_and_grants_the_next_waiter_after_both_finished() {
    let mut ns = TestNs::new("sem-lower").await;
    let log = watch_pods(&ns);
    ns.create_lock("pool", json!({"maxHolders": 2})).await;
    ns.start_operator(&[]);
    ns.create_gated_pod("a", "pool", "5s").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    ns.create_gated_pod("b", "pool", "12s").await;
    let a = wait_pod(&ns, "a", "granted", |p| !is_gated(p)).await;
    let b = wait_pod(&ns, "b", "granted", |p| !is_gated(p)).await;
    let slot = |p: &Pod| p.annotations().get(SLOT_ANNOTATION).cloned();
    assert_eq!((slot(&a).as_deref(), slot(&b).as_deref()), (Some("0"), Some("1")));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    ns.create_gated_pod("c", "pool", "1s").await;

    // Lower the limit while both hold.
    let locks = ns.api::<DistributedLock>();
    let patch = json!({"spec": {"maxHolders": 1}});
    locks.patch("pool", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("lower maxHolders");
    wait_until("status shows 2/1", WAIT, || async {
        locks.get("pool").await.ok().and_then(|l| l.status).is_some_and(|s| s.occupancy.as_deref() == Some("2/1"))
    })
    .await;

    // a finishes by itself (not revoked); with b still holding, c must keep waiting.
    let a = wait_pod(&ns, "a", "Succeeded", |p| phase(p) == "Succeeded").await;
    assert!(a.metadata.deletion_timestamp.is_none(), "a was deleted");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let b_now = ns.api::<Pod>().get("b").await.unwrap();
    assert_eq!(phase(&b_now), "Running", "b was not revoked");
    assert!(b_now.metadata.deletion_timestamp.is_none(), "b was deleted");
    let c = ns.api::<Pod>().get("c").await.unwrap();
    assert!(is_gated(&c), "c was granted while b held a lock lowered to maxHolders 1");

    // b finishes; then c is granted, in slot 0, with a token above both.
    wait_pod(&ns, "b", "Succeeded", |p| phase(p) == "Succeeded").await;
    let c = wait_pod(&ns, "c", "granted", |p| !is_gated(p)).await;
    assert_eq!(slot(&c).as_deref(), Some("0"), "granted in slot 0 (the only slot under maxHolders 1)");
    wait_pod(&ns, "c", "Succeeded", |p| phase(p) == "Succeeded").await;

    let log = log.lock().unwrap().clone();
    assert!(max_holding(&log) <= 2, "more than two holders at once");
    let first_holding = |pod: &str| log.iter().find(|s| s.pod == pod && s.holding).map(|s| s.at);
    let finished = |pod: &str| log.iter().find(|s| s.pod == pod && s.phase == "Succeeded").map(|s| s.at);
    let c_granted = first_holding("c").expect("c held");
    for pod in ["a", "b"] {
        let done = finished(pod).unwrap_or_else(|| panic!("{pod} finished"));
        assert!(done <= c_granted, "c was granted before {pod} finished");
        assert!(log.iter().filter(|s| s.pod == pod).all(|s| s.phase != "Failed" && s.phase != "Deleted"));
    }
    let grants = grants(&log);
    let order: Vec<&str> = grants.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(order, ["a", "b", "c"]);
    assert!(grants.windows(2).all(|w| w[0].1 < w[1].1), "tokens strictly increase: {grants:?}");
    ns.cleanup().await;
}

#[tokio::test]
async fn semaphore_claims_renew_and_release_their_slot_lease() {
    let mut ns = TestNs::new("sem-claims").await;
    // A short lease: a holder that renewed the wrong Lease would lose its grant within seconds.
    ns.create_lock("pool", json!({"maxHolders": 2, "leaseDurationSeconds": 3})).await;
    ns.start_operator(&[]);
    let script = "echo token=$LEASEHOLD_FENCING_TOKEN; echo slot=$LEASEHOLD_SLOT; sleep 12; echo done";
    let mut one = ns.lock_process("one", &["pool", "--identity", "one", "--", "sh", "-c", script]);
    one.wait_output("one holds", "token=").await;
    let mut two = ns.lock_process("two", &["pool", "--identity", "two", "--", "sh", "-c", script]);
    two.wait_output("two holds", "token=").await;

    // Both granted at once, in slots 0 and 1, each recording the Lease it renews.
    let claims = ns.api::<leasehold::crd::DistributedLockClaim>().list(&ListParams::default()).await.unwrap().items;
    let mut granted: Vec<(String, Option<u32>, Option<String>)> = claims
        .iter()
        .filter_map(|c| {
            let s = c.status.clone()?;
            s.token.map(|_| (c.spec.identity.clone(), s.slot, s.lease_name))
        })
        .collect();
    granted.sort();
    assert_eq!(
        granted,
        [
            ("one".to_string(), Some(0), Some("pool".to_string())),
            ("two".to_string(), Some(1), Some("pool-slot-1".to_string()))
        ]
    );
    let leases = ns.api::<Lease>();
    let holder_of = |name: &'static str| {
        let leases = leases.clone();
        async move { leases.get(name).await.ok().and_then(|l| l.spec?.holder_identity) }
    };
    assert_eq!(holder_of("pool").await.as_deref(), Some("one"));
    assert_eq!(holder_of("pool-slot-1").await.as_deref(), Some("two"));
    // Each command was told its slot (a resource fenced per slot needs it beside the token).
    assert!(one.output().contains("slot=0"), "one: {}", one.output());
    assert!(two.output().contains("slot=1"), "two: {}", two.output());

    // A third waits while both hold, for longer than a lease: both keep renewing their own Lease.
    let mut three = ns.lock_process(
        "three",
        &["pool", "--identity", "three", "--", "sh", "-c", "echo token=$LEASEHOLD_FENCING_TOKEN"],
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!three.output().contains("token="), "three was granted while two holders renewed: {}", three.output());
    assert_eq!(holder_of("pool-slot-1").await.as_deref(), Some("two"), "two lost its slot Lease");

    // Both finish and release (exit 0: never lost the lock); three is granted, above both.
    assert_eq!(one.wait_exit().await, 0, "one: {}", one.output());
    assert_eq!(two.wait_exit().await, 0, "two: {}", two.output());
    assert!(one.output().contains("done") && two.output().contains("done"));
    assert_eq!(three.wait_exit().await, 0, "three: {}", three.output());
    let token = |out: String| -> i64 {
        out.lines().find_map(|l| l.strip_prefix("token=")).and_then(|t| t.trim().parse().ok()).unwrap_or(-1)
    };
    let (t1, t2, t3) = (token(one.output()), token(two.output()), token(three.output()));
    assert!(t1 > 0 && t1 < t2 && t2 < t3, "tokens: one {t1}, two {t2}, three {t3}");
    // No claim was expired (nobody lost a grant), and every Lease ends free.
    let events = ns.kubectl(&["get", "events", "-o", "name", "--field-selector", "reason=GrantExpired"]);
    assert!(events.trim().is_empty(), "GrantExpired events: {events}");
    wait_until("slot Leases free", WAIT, || async {
        holder_of("pool").await.is_none() && holder_of("pool-slot-1").await.is_none()
    })
    .await;
    ns.cleanup().await;
}

#[tokio::test]
async fn semaphore_a_foreign_lease_under_a_slot_name_is_reported_without_a_reservation_loop() {
    let mut ns = TestNs::new("sem-foreign").await;
    let foreign: Lease = serde_json::from_value(
        json!({"metadata": {"name": "pool-slot-1"}, "spec": {"holderIdentity": "someone-else"}}),
    )
    .unwrap();
    ns.api::<Lease>().create(&kube::api::PostParams::default(), &foreign).await.unwrap();
    ns.create_lock("pool", json!({"maxHolders": 2})).await;
    ns.start_operator(&[]);
    ns.create_gated_pod("a", "pool", "600s").await;
    wait_pod(&ns, "a", "granted in slot 0", |p| !is_gated(p)).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    ns.create_gated_pod("b", "pool", "1s").await;
    // b would be granted in slot 1, whose Lease name someone else's Lease has: the lock says so.
    let locks = ns.api::<DistributedLock>();
    let not_owned = |l: &DistributedLock| {
        l.status.as_ref().is_some_and(|s| {
            s.conditions.iter().any(|c| {
                c.type_ == "Ready"
                    && c.status == "False"
                    && c.reason == "LeaseNotOwned"
                    && c.message.contains("pool-slot-1")
            })
        })
    };
    wait_until("Ready=False LeaseNotOwned naming pool-slot-1", WAIT, || async {
        locks.get("pool").await.is_ok_and(|l| not_owned(&l))
    })
    .await;
    let ceiling = |l: DistributedLock| l.status.map_or(0, |s| s.token_ceiling);
    let before = ceiling(locks.get("pool").await.unwrap());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(ceiling(locks.get("pool").await.unwrap()), before, "token reservations kept going");
    assert!(is_gated(&ns.api::<Pod>().get("b").await.unwrap()), "b was granted beside a foreign slot Lease");
    let foreign = ns.api::<Lease>().get("pool-slot-1").await.unwrap();
    assert_eq!(foreign.spec.and_then(|s| s.holder_identity).as_deref(), Some("someone-else"), "left alone");
    // Once it is gone (and the lock is looked at again), b is granted in slot 1.
    ns.api::<Lease>().delete("pool-slot-1", &Default::default()).await.unwrap();
    let touch = json!({"metadata": {"labels": {"touched": "yes"}}});
    locks.patch("pool", &PatchParams::default(), &Patch::Merge(&touch)).await.unwrap();
    let b = wait_pod(&ns, "b", "granted once the foreign Lease is gone", |p| !is_gated(p)).await;
    assert_eq!(b.annotations().get(SLOT_ANNOTATION).map(String::as_str), Some("1"));
    ns.cleanup().await;
}
