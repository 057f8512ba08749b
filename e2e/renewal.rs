//! A held lock's renewal (`holder::renew`): one JSON Patch whose `test` operations check that the
//! Lease still names the holder, with no `resourceVersion`. Writes to the Lease that leave the
//! holder alone (a waiter's next-holder hint, the operator's) do not refuse it; a Lease that names
//! another request does (HTTP 422), and the lock is lost.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};
use leasehold::crd::DistributedLock;
use leasehold::holder::{Holder, LostReason};
use leasehold::lock::HOLDER_UID_ANNOTATION;
use serde_json::json;

use crate::support::{TestNs, WAIT, wait_until};

/// While another party writes the Lease every 50 ms (an annotation the grant does not read), the
/// holder's renewals (every 1 s at a 3 s lease) are each one PATCH answered 200: no 409, no read,
/// no second try, and the lock is not lost. A compare-and-swap renewal from the Lease its last
/// write returned would be answered 409 here on every renewal.
#[tokio::test]
async fn a_renewal_is_one_patch_that_writes_by_others_leaving_the_holder_alone_do_not_refuse() {
    let mut ns = TestNs::new("renew-patch").await;
    ns.create_lock("l", json!({"leaseDurationSeconds": 3})).await;
    ns.start_operator(&[]);
    let leases: Api<Lease> = ns.api();
    let (client, recorded) = ns.recording_client().await;
    let a = Holder::new(client, &ns.ns, "l", "a");
    let guard = a.acquire(Some(WAIT)).await.expect("a acquires");
    let from = recorded.all().len();
    let renewed_at_start = guard.last_renewal().borrow().to_owned();
    let (mut touches, until) = (0, Instant::now() + Duration::from_secs(5));
    while Instant::now() < until {
        let body = json!({"metadata": {"annotations": {"e2e.leasehold.dev/touch": touches.to_string()}}});
        leases.patch("l", &PatchParams::default(), &Patch::Merge(&body)).await.expect("touch the Lease");
        touches += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!guard.is_lost(), "a still holds after {touches} writes by another party");
    assert!(*guard.last_renewal().borrow() > renewed_at_start, "a renewed meanwhile");
    let seen = recorded.lease_requests(from);
    assert!(seen.len() >= 3, "at least 3 renewals in 5 s at a 1 s renew period: {seen:?}");
    assert!(
        seen.iter().all(|(m, s)| m == "PATCH" && *s == 200),
        "every Lease request of the holder is one PATCH answered 200 ({touches} touches meanwhile): {seen:?}"
    );
    guard.release().await.expect("a releases");
    a.close().await;
    ns.cleanup().await;
}

/// Once the Lease names another request (its `leasehold.dev/holder-uid` rewritten) or another
/// holder (its `holderIdentity`), the holder's next renewal is refused by its `test` operation
/// (HTTP 422) and the lock is lost (`Taken`) within the renew period; no renewal succeeds after
/// that.
#[tokio::test]
async fn a_renewal_of_a_lease_that_names_another_request_or_holder_is_refused_and_the_lock_is_lost() {
    let mut ns = TestNs::new("renew-taken").await;
    ns.start_operator(&[]);
    let leases: Api<Lease> = ns.api();
    let rewrites = [
        ("uid", json!({"metadata": {"annotations": {HOLDER_UID_ANNOTATION: "someone-else/1"}}})),
        ("identity", json!({"spec": {"holderIdentity": "someone-else"}})),
    ];
    for (lock, rewrite) in rewrites {
        ns.create_lock(lock, json!({"leaseDurationSeconds": 3})).await;
        let (client, recorded) = ns.recording_client().await;
        let a = Holder::new(client, &ns.ns, lock, "a");
        let guard = a.acquire(Some(WAIT)).await.expect("a acquires");
        let from = recorded.all().len();
        leases.patch(lock, &PatchParams::default(), &Patch::Merge(&rewrite)).await.expect("rewrite the Lease");
        let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await.expect("lost within 5 s");
        assert_eq!(reason, LostReason::Taken, "{lock}");
        let seen = recorded.lease_requests(from);
        let refused = seen
            .iter()
            .position(|(m, s)| m == "PATCH" && *s == 422)
            .unwrap_or_else(|| panic!("{lock}: a renewal PATCH answered 422: {seen:?}"));
        assert!(
            !seen[refused..].iter().any(|(m, s)| (m == "PATCH" || m == "PUT") && *s == 200),
            "{lock}: no renewal was written after the refusal: {seen:?}"
        );
        drop(guard);
        a.close().await;
    }
    ns.cleanup().await;
}

/// A holder whose role has no `patch` on Leases (as the holder role granted before 2026-12-02:
/// get, watch, update): its first renewal's patch is refused (403) and it renews by one
/// compare-and-swap PUT instead; its later renewals are PUTs alone, with no patch tried first.
#[tokio::test]
async fn a_holder_that_may_not_patch_leases_renews_by_compare_and_swap() {
    let mut ns = TestNs::new("renew-nopatch").await;
    ns.create_lock("l", json!({"leaseDurationSeconds": 3})).await;
    ns.start_operator(&[]);
    ns.kubectl(&["create", "serviceaccount", "old"]);
    ns.kubectl(&["create", "role", "old-leases", "--verb=get,watch,update", "--resource=leases.coordination.k8s.io"]);
    ns.kubectl(&["create", "role", "old-locks", "--verb=get,list,watch", "--resource=distributedlocks.leasehold.dev"]);
    ns.kubectl(&[
        "create",
        "role",
        "old-claims",
        "--verb=get,create,list,watch,patch,delete",
        "--resource=distributedlockclaims.leasehold.dev",
    ]);
    let sa = format!("--serviceaccount={}:old", ns.ns);
    for role in ["old-leases", "old-locks", "old-claims"] {
        ns.kubectl(&["create", "rolebinding", role, &format!("--role={role}"), &sa]);
    }
    let kc = crate::install::token_kubeconfig(&ns, "old", &crate::install::create_token(&ns, "old", None));
    let (client, recorded) = ns.recording_client_as(&kc).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.ns);
    // (The API server's RBAC authorizer learns of new RoleBindings through an informer.)
    let claims: Api<leasehold::crd::DistributedLockClaim> = Api::namespaced(client.clone(), &ns.ns);
    crate::support::wait_until("the old roles are in force", WAIT, || async {
        leases.get_opt("l").await.is_ok() && claims.list(&Default::default()).await.is_ok()
    })
    .await;
    let a = Holder::new(client, &ns.ns, "l", "a").one_shot();
    let guard = a.acquire(Some(WAIT)).await.expect("a acquires");
    let from = recorded.all().len();
    let writes = || recorded.lease_requests(from).into_iter().filter(|(m, _)| m != "GET").count();
    crate::support::wait_until("three Lease writes answered after the grant", WAIT, || async { writes() >= 3 }).await;
    assert!(!guard.is_lost(), "a still holds");
    let seen = recorded.lease_requests(from);
    assert_eq!(seen.first(), Some(&("PATCH".to_string(), 403)), "the first renewal tries the patch: {seen:?}");
    let after: Vec<&(String, u16)> = seen[1..].iter().filter(|(m, _)| m != "GET").collect();
    assert!(after.len() >= 2, "at least two renewals after the refused patch: {seen:?}");
    assert!(after.iter().all(|(m, s)| m == "PUT" && *s == 200), "then PUTs alone, each admitted: {seen:?}");
    guard.release().await.expect("a releases");
    ns.cleanup().await;
}

/// A grant learned past the renew period of its claim's create, while more than a retry period
/// of the renew deadline counted from that create is left (`holder::holds_at_once`), is held at
/// once: `acquire()` returns with no renewal written, its last renewal the claim's create, and
/// the first renewal follows at once. A grant learned later than that is first proved by a
/// renewal before `acquire()` returns. Lease 12 s: renew deadline 8 s, renew period 4 s, retry
/// period 1.6 s, so a grant is held at once when learned within 6.4 s; here at about 5.2 s, then
/// 8 s.
#[tokio::test]
async fn a_grant_learned_past_the_renew_period_is_held_at_once_and_renewed_at_once() {
    let mut ns = TestNs::new("renew-late").await;
    ns.create_lock("l", json!({"leaseDurationSeconds": 12})).await;
    ns.start_operator(&[]);
    let a = Holder::new(ns.client.clone(), &ns.ns, "l", "a");
    let b = Holder::new(ns.client.clone(), &ns.ns, "l", "b").one_shot();
    for (hold, held_at_once) in [(Duration::from_millis(5200), true), (Duration::from_secs(8), false)] {
        let guard_a = a.acquire(Some(WAIT)).await.expect("a acquires");
        let called = Instant::now();
        let waiting = tokio::spawn({
            let b = b.clone();
            async move { b.acquire(Some(WAIT)).await }
        });
        tokio::time::sleep(hold).await;
        let released = Instant::now();
        guard_a.release().await.expect("a releases");
        let guard_b = waiting.await.unwrap().expect("b acquires");
        let returned = Instant::now();
        let first = *guard_b.last_renewal().borrow();
        if held_at_once {
            assert!(
                first > called && first < released,
                "b holds from its claim's create ({:?} after the call), before a's release at {:?}: no renewal before the return",
                first.saturating_duration_since(called),
                released - called
            );
            assert!(
                returned - first >= Duration::from_secs(4),
                "b learned its grant past the renew period (4 s) of its create, as this test needs: {:?}",
                returned - first
            );
            tokio::time::timeout(Duration::from_millis(1500), async {
                let mut r = guard_b.last_renewal();
                r.wait_for(|t| *t > first).await.map(|t| *t).expect("renewals go on")
            })
            .await
            .expect("b's first renewal comes at once, not a renew period (4 s) after the return");
        } else {
            assert!(
                first >= released,
                "b, granted {:?} after its call, proved the grant by a renewal before the return",
                released - called
            );
        }
        assert!(!guard_b.is_lost(), "b holds");
        guard_b.release().await.expect("b releases");
    }
    a.close().await;
    ns.cleanup().await;
}

/// The lock's `spec.leaseDurationSeconds` as a merge patch.
async fn set_lease_duration(ns: &TestNs, lock: &str, secs: i32) {
    let body = json!({"spec": {"leaseDurationSeconds": secs}});
    ns.api::<DistributedLock>()
        .patch(lock, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .expect("patch the lock");
}

fn lease_duration_of(l: &Lease) -> Option<i32> {
    l.spec.as_ref().and_then(|s| s.lease_duration_seconds)
}

/// The hole a newcomer trial found: `leaseDurationSeconds` lowered (20 s to 3 s) while a holds
/// renews every 6.7 s against the 20 s it was granted with. The operator used to expire a by the
/// new 3 s and grant the waiter b beside it; now the grant keeps its Lease's 20 s
/// (`grant::lease_duration_to_write`, `grant::expiry_of`): 8 s later a still holds, b still
/// waits, and a's release hands the lock to b.
#[tokio::test]
async fn a_lease_duration_lowered_under_a_holder_does_not_expire_it_sooner() {
    let mut ns = TestNs::new("lease-lowered").await;
    ns.create_lock("l", json!({"leaseDurationSeconds": 20})).await;
    ns.start_operator(&[]);
    let a = Holder::new(ns.client.clone(), &ns.ns, "l", "a").one_shot();
    let b = Holder::new(ns.client.clone(), &ns.ns, "l", "b").one_shot();
    let guard_a = a.acquire(Some(WAIT)).await.expect("a acquires");
    let waiting = tokio::spawn(async move { b.acquire(Some(WAIT)).await });
    set_lease_duration(&ns, "l", 3).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(!guard_a.is_lost(), "a, renewing every 6.7 s under its 20 s grant, still holds 8 s after the cut to 3 s");
    assert!(!waiting.is_finished(), "b is not granted while a holds");
    let lease = ns.api::<Lease>().get("l").await.unwrap();
    assert_eq!(lease_duration_of(&lease), Some(20), "a's grant keeps the 20 s it was written with");
    guard_a.release().await.expect("a releases");
    let guard_b = waiting.await.unwrap().expect("b acquires once a released");
    assert!(!guard_b.is_lost());
    guard_b.release().await.expect("b releases");
    ns.cleanup().await;
}

/// A waiter that read 20 s before queueing, granted after the lock was cut to 3 s, renews
/// against its grant's 3 s (`holder::granted_timings`): renew deadline 2 s (2/3), renewals every
/// second, and it still holds 5 s later. Read -> cut -> grant is forced by stopping the operator
/// (SIGSTOP) between b's queueing and the patch. With the 20 s it read, b would renew every
/// 6.7 s and the operator would take the lock back 3 s after its grant.
#[tokio::test]
async fn a_grant_made_under_a_lowered_lease_duration_is_renewed_against_it() {
    let mut ns = TestNs::new("lease-lowered-grant").await;
    ns.create_lock("l", json!({"leaseDurationSeconds": 20})).await;
    let op = ns.start_operator(&[]);
    wait_until("the lock is Ready", WAIT, || async {
        ns.kubectl(&["get", "distributedlock", "l", "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}"])
            == "True"
    })
    .await;
    let pid = ns.operator_pid(op).to_string();
    let signal = |sig: &str| assert!(std::process::Command::new("kill").args([sig, &pid]).status().unwrap().success());
    signal("-STOP");
    let b = Holder::new(ns.client.clone(), &ns.ns, "l", "b").one_shot();
    let ticket = b.enqueue(leasehold::crd::OnBusy::Wait).await.expect("b queues");
    let read = Duration::from_secs(20);
    assert_eq!((ticket.lease_duration(), ticket.renew_deadline()), (read, read * 2 / 3), "b read 20 s");
    set_lease_duration(&ns, "l", 3).await;
    signal("-CONT");
    let guard = ticket.wait(Some(WAIT)).await.expect("b is granted");
    let lease = ns.api::<Lease>().get("l").await.unwrap();
    assert_eq!(lease_duration_of(&lease), Some(3), "the grant is written with the lock's new value");
    assert_eq!((guard.lease_duration(), guard.renew_deadline()), (Duration::from_secs(3), Duration::from_secs(2)));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!guard.is_lost(), "b renews every second against its 3 s grant and still holds");
    guard.release().await.expect("b releases");
    ns.cleanup().await;
}
