//! All-or-nothing multi-lock (issue 14, `docs/multi-lock.md`): pods that ask for several locks
//! (`leasehold.dev/locks`) run only once they hold every lock of their set, each with that lock's
//! own token; pods wanting {a, b} and {b, a} do not deadlock; single-lock waiters on the same
//! locks keep their FIFO places; a waiter on an unrelated lock is not held up; a tentative grant
//! is taken back for an older waiter.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use leasehold::lock::{LOCK_ANNOTATION, lock_token_annotation, lock_withdrawn_annotation};
use serde_json::json;

use crate::support::{TestNs, gated_pod, is_gated, on_pod_changes, phase, set_pod, token_of, wait_pod, wait_until};

/// One version of a pod as the watch saw it.
#[derive(Clone, Debug)]
struct Seen {
    at: Instant,
    pod: String,
    /// Ungated, not finished, not deleted: its work may run.
    running: bool,
    /// Per lock of its set (or its one lock): the token recorded on this version.
    tokens: BTreeMap<String, Option<i64>>,
}

/// The locks a test pod asks for: its `leasehold.dev/locks` list, or its one lock.
fn wanted(p: &Pod) -> Vec<String> {
    let set = leasehold::lock::lock_set(p.annotations());
    if !set.is_empty() {
        return set;
    }
    p.annotations().get(LOCK_ANNOTATION).map(|l| vec![l.clone()]).unwrap_or_default()
}

/// Every pod change in the namespace, in watch order.
fn watch(ns: &TestNs) -> Arc<Mutex<Vec<Seen>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let log2 = log.clone();
    on_pod_changes(ns, move |p, deleted| {
        let multi = !leasehold::lock::lock_set(p.annotations()).is_empty();
        let tokens = wanted(p)
            .into_iter()
            .map(|l| {
                let t = match multi {
                    true => p.annotations().get(&lock_token_annotation(&l)).and_then(|t| t.parse().ok()),
                    false => token_of(p),
                };
                (l, t)
            })
            .collect();
        let ph = phase(p);
        log2.lock().unwrap().push(Seen {
            at: Instant::now(),
            pod: p.name_any(),
            running: !deleted && !is_gated(p) && ph != "Succeeded" && ph != "Failed",
            tokens,
        });
    });
    log
}

/// Replays the watch log and returns the first violation: a running pod that misses the token
/// of a lock it asked for (a partial set), or two running pods that need the same lock.
fn violation(log: &[Seen]) -> Option<String> {
    let mut now: BTreeMap<&str, &Seen> = BTreeMap::new();
    for s in log {
        now.insert(&s.pod, s);
        if s.running && s.tokens.values().any(Option::is_none) {
            return Some(format!("{} runs with a partial set: {:?}", s.pod, s.tokens));
        }
        let mut users: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for r in now.values().filter(|r| r.running) {
            for l in r.tokens.keys() {
                users.entry(l).or_default().push(&r.pod);
            }
        }
        if let Some((l, pods)) = users.iter().find(|(_, p)| p.len() > 1) {
            return Some(format!("lock {l} used by {pods:?} at once"));
        }
    }
    None
}

/// Per pod, when it was first seen running, and its tokens then.
fn first_runs(log: &[Seen]) -> BTreeMap<String, (Instant, BTreeMap<String, Option<i64>>)> {
    let mut out = BTreeMap::new();
    for s in log.iter().filter(|s| s.running) {
        out.entry(s.pod.clone()).or_insert((s.at, s.tokens.clone()));
    }
    out
}

/// Waits until every pod in `names` has succeeded.
async fn all_succeed(ns: &TestNs, names: &[&str], timeout: Duration) {
    let api: Api<Pod> = ns.api();
    wait_until(&format!("pods {names:?} to succeed"), timeout, || {
        let api = api.clone();
        async move {
            for n in names {
                if api.get_opt(n).await.ok().flatten().is_none_or(|p| phase(&p) != "Succeeded") {
                    return false;
                }
            }
            true
        }
    })
    .await;
}

#[tokio::test]
async fn multi_lock_pods_in_crossed_order_and_single_waiters_all_finish_without_partial_sets() {
    let mut ns = TestNs::new("multi").await;
    let log = watch(&ns);
    for l in ["a", "b", "c"] {
        ns.create_lock(l, json!({})).await;
    }
    // Created one by one (creationTimestamp has one-second resolution: FIFO order is defined).
    let pods = [
        set_pod("m1", "a,b", "6s"),
        gated_pod("sa1", "a", "2s"),
        set_pod("m2", "b, a", "2s"),
        gated_pod("sb1", "b", "1s"),
        gated_pod("sc1", "c", "1s"),
        gated_pod("sa2", "a", "1s"),
    ];
    for p in pods {
        ns.create_pod(p).await;
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    ns.start_operator(&[]);
    all_succeed(&ns, &["m1", "sa1", "m2", "sb1", "sc1", "sa2"], Duration::from_secs(120)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let log = log.lock().unwrap().clone();
    assert_eq!(violation(&log), None);
    let runs = first_runs(&log);
    let at = |p: &str| runs.get(p).unwrap_or_else(|| panic!("{p} was never seen running")).0;
    // FIFO per lock: a serves m1, sa1, m2, sa2; b serves m1, m2, sb1.
    assert!(at("m1") < at("sa1") && at("sa1") < at("m2") && at("m2") < at("sa2"), "lock a order: {runs:?}");
    assert!(at("m2") < at("sb1"), "lock b: sb1 queued behind the older m2: {runs:?}");
    // The waiter on c is not held up by the others: it runs while m1 (6 s) still runs.
    let m1_done = log.iter().find(|s| s.pod == "m1" && !s.running && s.at > at("m1")).map(|s| s.at).unwrap();
    assert!(at("sc1") < m1_done, "sc1 waited for m1 to finish: {runs:?}");
    // Every pod ran with a token for every lock of its set; per lock, tokens increase in grant order.
    let mut per_lock: BTreeMap<String, Vec<(Instant, i64)>> = BTreeMap::new();
    for (pod, (t, tokens)) in &runs {
        for (l, tok) in tokens {
            let tok = tok.unwrap_or_else(|| panic!("{pod} ran without a token for {l}"));
            per_lock.entry(l.clone()).or_default().push((*t, tok));
        }
    }
    for (l, mut grants) in per_lock {
        grants.sort();
        let tokens: Vec<i64> = grants.iter().map(|g| g.1).collect();
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "lock {l}: tokens {tokens:?} do not increase");
    }
    let m2 = ns.api::<Pod>().get("m2").await.unwrap();
    let ann = m2.annotations();
    assert!(ann.contains_key(&lock_token_annotation("a")) && ann.contains_key(&lock_token_annotation("b")));
    ns.cleanup().await;
}

#[tokio::test]
async fn a_tentative_grant_is_taken_back_for_an_older_waiter_whose_set_became_servable() {
    let mut ns = TestNs::new("multiback").await;
    let log = watch(&ns);
    for l in ["a", "b"] {
        ns.create_lock(l, json!({})).await;
    }
    ns.start_operator(&[]);
    // b is busy for a while.
    ns.create_pod(gated_pod("hb", "b", "8s")).await;
    wait_pod(&ns, "hb", "granted", |p| !is_gated(p)).await;
    // An older pod wants {a, x}: x does not exist yet, so a is not reserved for it.
    ns.create_pod(set_pod("old", "a,x", "2s")).await;
    ns.wait_event("Pod", "LockSetNotServed").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // A younger pod wants {a, b}: a is reserved for it (tentatively), b is busy.
    ns.create_pod(set_pod("young", "a,b", "1s")).await;
    let tentative = lock_token_annotation("a");
    let young = wait_pod(&ns, "young", "a reserved", |p| p.annotations().contains_key(&tentative)).await;
    assert!(is_gated(&young), "young runs without b");
    let reserved: i64 = young.annotations()[&tentative].parse().unwrap();
    // x appears: old is now the head of a's queue and can be served; a is taken back from young.
    ns.create_lock("x", json!({})).await;
    let withdrawn = lock_withdrawn_annotation("a");
    let young = wait_pod(&ns, "young", "a withdrawn", |p| p.annotations().contains_key(&withdrawn)).await;
    assert_eq!(young.annotations()[&withdrawn], reserved.to_string());
    assert!(is_gated(&young));
    ns.wait_event("Pod", "LockWithdrawn").await;
    all_succeed(&ns, &["hb", "old", "young"], Duration::from_secs(90)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let log = log.lock().unwrap().clone();
    assert_eq!(violation(&log), None);
    let runs = first_runs(&log);
    assert!(runs["old"].0 < runs["young"].0, "old ran first: {runs:?}");
    let young_a = runs["young"].1["a"].unwrap();
    let old_a = runs["old"].1["a"].unwrap();
    assert!(reserved < old_a && old_a < young_a, "a's tokens: reserved {reserved}, old {old_a}, young {young_a}");
    let holders: BTreeSet<&str> = runs.keys().map(String::as_str).collect();
    assert_eq!(holders, BTreeSet::from(["hb", "old", "young"]));
    ns.cleanup().await;
}

/// A set that stops being served after a lock reserved itself for it: `x` is deleted while the
/// pod waits for it with `a` reserved. The reservation is taken back (withdrawn on the pod, a
/// `LockWithdrawn` Event saying the set is not served), and a younger single-lock waiter on `a`
/// runs instead of waiting for a pod that cannot run.
#[tokio::test]
async fn a_reservation_is_taken_back_when_a_lock_of_the_set_is_deleted() {
    let mut ns = TestNs::new("multigone").await;
    let log = watch(&ns);
    for l in ["a", "x"] {
        ns.create_lock(l, json!({})).await;
    }
    ns.start_operator(&[]);
    // x is busy for long.
    ns.create_pod(gated_pod("hx", "x", "10m")).await;
    wait_pod(&ns, "hx", "granted", |p| !is_gated(p)).await;
    // The set {a, x}: a is reserved for it, x is busy.
    ns.create_pod(set_pod("set", "a,x", "1s")).await;
    let tentative = lock_token_annotation("a");
    let set = wait_pod(&ns, "set", "a reserved", |p| p.annotations().contains_key(&tentative)).await;
    let reserved: i64 = set.annotations()[&tentative].parse().unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    ns.create_pod(gated_pod("single", "a", "1s")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let single = wait_pod(&ns, "single", "still there", |_| true).await;
    assert!(is_gated(&single), "a is reserved for the older set pod");

    // x goes: the set cannot be served, a's reservation is taken back, single runs.
    ns.kubectl(&["delete", "distributedlock", "x", "--wait=false"]);
    let withdrawn = lock_withdrawn_annotation("a");
    let set = wait_pod(&ns, "set", "a withdrawn", |p| p.annotations().contains_key(&withdrawn)).await;
    assert_eq!(set.annotations()[&withdrawn], reserved.to_string());
    assert!(is_gated(&set) && !set.annotations().contains_key(&tentative), "{:?}", set.annotations());
    let event = ns.wait_event("Pod", "LockWithdrawn").await;
    let note = event.note.unwrap_or_default();
    assert!(note.contains("not served") && note.contains("x"), "the Event says why: {note}");
    all_succeed(&ns, &["single"], Duration::from_secs(60)).await;
    let set = wait_pod(&ns, "set", "still waiting", |_| true).await;
    assert!(is_gated(&set), "the set pod waits for x");

    let log = log.lock().unwrap().clone();
    assert_eq!(violation(&log), None);
    let runs = first_runs(&log);
    assert!(runs["single"].1["a"].unwrap() > reserved, "a's token grows past the withdrawn one: {runs:?}");
    ns.cleanup().await;
}

/// A claim object with a lock set, as the holder library creates one (`spec.lock` first).
fn set_claim(name: &str, locks: &[&str]) -> leasehold::crd::DistributedLockClaim {
    serde_json::from_value(json!({
        "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLockClaim",
        "metadata": {"name": name},
        "spec": {"lock": locks[0], "identity": format!("{name}-host"), "locks": locks},
    }))
    .unwrap()
}

/// The Lease of `lock`: (holderIdentity, holder UID, token).
async fn lease_of(ns: &TestNs, lock: &str) -> (Option<String>, Option<String>, Option<i64>) {
    let l = ns.api::<k8s_openapi::api::coordination::v1::Lease>().get(lock).await.unwrap();
    let ann = l.annotations().clone();
    (
        l.spec.and_then(|s| s.holder_identity),
        ann.get(leasehold::lock::HOLDER_UID_ANNOTATION).cloned(),
        ann.get(leasehold::lock::TOKEN_ANNOTATION).and_then(|t| t.parse().ok()),
    )
}

/// Claims with a lock set, served by the operator with the claim as the commit point (the
/// controller side, without the holder library): a claim for {a, b} while a pod holds b is named
/// by a's Lease and records a's token in `status.tokens` but stays ungranted; once b is free it is
/// granted both (`phase: Granted`, each Lease naming it with the token its status records). A
/// claim for {c, b} whose process never renews the Lease that names it tentatively is rejected
/// (`HolderLeaseExpired`) and only then does c move on to a younger pod. Invalid sets are refused
/// at admission.
#[tokio::test]
async fn a_claim_with_a_lock_set_is_granted_only_with_every_lock_and_one_that_never_renews_is_rejected() {
    use leasehold::crd::{ClaimPhase, DistributedLockClaim};
    let mut ns = TestNs::new("claimset").await;
    ns.create_lock("a", json!({"leaseDurationSeconds": 120})).await;
    ns.create_lock("b", json!({})).await;
    ns.create_lock("c", json!({"leaseDurationSeconds": 3})).await;
    let claims = ns.api::<DistributedLockClaim>();
    let pp = kube::api::PostParams::default();
    // Refused at admission, with what is wrong.
    for (locks, needle) in [
        (json!(["b", "a"]), "must start with spec.lock"),
        (json!(["a", "a"]), "names a lock twice"),
        (json!(["a"]), "2 items"),
    ] {
        let bad: DistributedLockClaim = serde_json::from_value(json!({
            "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLockClaim",
            "metadata": {"name": "bad"}, "spec": {"lock": "a", "identity": "x", "locks": locks},
        }))
        .unwrap();
        let e = claims.create(&pp, &bad).await.expect_err("an invalid set is refused").to_string();
        assert!(e.contains(needle), "{needle}: {e}");
    }
    let skip: DistributedLockClaim = serde_json::from_value(json!({
        "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLockClaim",
        "metadata": {"name": "bad"}, "spec": {"lock": "a", "identity": "x", "locks": ["a", "b"], "onBusy": "Skip"},
    }))
    .unwrap();
    let e = claims.create(&pp, &skip).await.expect_err("a busy policy with a set is refused").to_string();
    assert!(e.contains("not served for lock sets"), "{e}");

    ns.start_operator(&[]);
    ns.create_pod(gated_pod("hb", "b", "10m")).await;
    wait_pod(&ns, "hb", "granted b", |p| !is_gated(p)).await;
    let s = claims.create(&pp, &set_claim("s", &["a", "b"])).await.unwrap();
    let s_uid = s.metadata.uid.clone().unwrap();
    let status = |c: &DistributedLockClaim| c.status.clone().unwrap_or_default();
    wait_until("a recorded on s", WAIT_SET, || async {
        claims.get("s").await.is_ok_and(|c| status(&c).tokens.contains_key("a"))
    })
    .await;
    let s_now = claims.get("s").await.unwrap();
    assert_ne!(status(&s_now).phase, Some(ClaimPhase::Granted), "s is granted without b: {:?}", s_now.status);
    let (holder, uid, token) = lease_of(&ns, "a").await;
    assert_eq!((holder.as_deref(), uid.as_deref()), (Some("s-host"), Some(s_uid.as_str())));
    assert_eq!(token, status(&s_now).tokens.get("a").copied(), "a's Lease and s's status agree");

    // t wants {c, b} and never renews: c's tentative grant expires, t is rejected, then c moves
    // on to pc (created after t).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    claims.create(&pp, &set_claim("t", &["c", "b"])).await.unwrap();
    wait_until("c recorded on t", WAIT_SET, || async {
        claims.get("t").await.is_ok_and(|c| status(&c).tokens.contains_key("c"))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    ns.create_pod(gated_pod("pc", "c", "1s")).await;
    wait_until("t rejected", WAIT_SET, || async {
        claims.get("t").await.is_ok_and(|c| status(&c).phase == Some(ClaimPhase::Rejected))
    })
    .await;
    let t = claims.get("t").await.unwrap();
    assert_eq!(status(&t).reason.as_deref(), Some("HolderLeaseExpired"), "{:?}", t.status);
    all_succeed(&ns, &["pc"], Duration::from_secs(60)).await;
    let pc = wait_pod(&ns, "pc", "done", |_| true).await;
    assert!(token_of(&pc).unwrap() > status(&t).tokens["c"], "c's token grows past t's");

    // b frees: s gets b and is granted the set.
    ns.kubectl(&["delete", "pod", "hb", "--grace-period=0", "--force"]);
    wait_until("s granted", WAIT_SET, || async {
        claims.get("s").await.is_ok_and(|c| status(&c).phase == Some(ClaimPhase::Granted))
    })
    .await;
    let s_now = claims.get("s").await.unwrap();
    for l in ["a", "b"] {
        let (holder, uid, token) = lease_of(&ns, l).await;
        assert_eq!((holder.as_deref(), uid.as_deref()), (Some("s-host"), Some(s_uid.as_str())), "{l}");
        assert_eq!(token, status(&s_now).tokens.get(l).copied(), "{l}'s Lease and s's status agree");
    }
    ns.cleanup().await;
}

/// Waits of the claim-set test: a grant and a lease expiry (3 s) with room for a loaded machine.
const WAIT_SET: Duration = Duration::from_secs(60);

/// A lock set's holder that read 20 s on both locks, granted `a` tentatively after `a` was cut to
/// 3 s, renews that tentative grant at once and then at the pace of its 3 s
/// (`holder::granted_timings`): 8 s later its claim still waits (at the 6.7 s pace it read, the
/// operator would have rejected it, `HolderLeaseExpired`), and once `b` is free the set is
/// granted, `a` held under its 3 s. Read -> cut -> grant is forced by stopping the operator.
#[tokio::test]
async fn a_lock_set_granted_under_a_lowered_lease_duration_renews_at_its_pace() {
    use leasehold::holder::Holder;
    use leasehold::holder_set::SetHolder;
    let mut ns = TestNs::new("set-lowered").await;
    ns.create_lock("a", json!({"leaseDurationSeconds": 20})).await;
    ns.create_lock("b", json!({"leaseDurationSeconds": 20})).await;
    let op = ns.start_operator(&[]);
    let x = Holder::new(ns.client.clone(), &ns.ns, "b", "x").one_shot();
    let held_b = x.acquire(Some(WAIT_SET)).await.expect("x acquires b");
    let pid = ns.operator_pid(op).to_string();
    let signal = |sig: &str| assert!(std::process::Command::new("kill").args([sig, &pid]).status().unwrap().success());
    signal("-STOP");
    let set = SetHolder::new(ns.client.clone(), &ns.ns, &["a".to_string(), "b".to_string()], "s-host").unwrap();
    let ticket = set.enqueue().await.expect("the set queues");
    assert_eq!(ticket.lease_duration(), Duration::from_secs(20));
    let body = json!({"spec": {"leaseDurationSeconds": 3}});
    let locks = ns.api::<leasehold::crd::DistributedLock>();
    locks.patch("a", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&body)).await.unwrap();
    signal("-CONT");
    let waiting = tokio::spawn(async move { ticket.wait(Some(Duration::from_secs(120))).await });
    // a's Lease is created at its first grant: absent until then.
    let leases = ns.api::<k8s_openapi::api::coordination::v1::Lease>();
    wait_until("a names the set tentatively", WAIT_SET, || async {
        let lease = leases.get_opt("a").await.unwrap();
        lease.and_then(|l| l.spec?.holder_identity).as_deref() == Some("s-host")
    })
    .await;
    let lease = ns.api::<k8s_openapi::api::coordination::v1::Lease>().get("a").await.unwrap();
    assert_eq!(lease.spec.and_then(|s| s.lease_duration_seconds), Some(3), "a's tentative grant is written with 3 s");
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(!waiting.is_finished(), "the set still waits for b (not rejected for a missed renewal)");
    held_b.release().await.expect("x releases b");
    let guard = waiting.await.unwrap().expect("the set is granted");
    assert_eq!((guard.lease_duration(), guard.renew_deadline()), (Duration::from_secs(3), Duration::from_secs(2)));
    guard.release().await.expect("the set releases");
    ns.cleanup().await;
}
