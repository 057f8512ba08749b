//! Permissions that work out of the box (issue 13), with real tokens against the real API
//! server's RBAC: the chart's holder ClusterRole, bound by a RoleBinding, is all an ordinary
//! ServiceAccount needs to hold a lock with `leasehold lock` and with the library's `Holder`, and
//! it grants nothing a holder does not use; the ClusterRoles the chart aggregates into the
//! built-in `view`, `edit` and `admin` give those roles' users locks.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use leasehold::crd::{DistributedLock, DistributedLockClaim};
use leasehold::holder::Holder;
use serde_json::json;

use crate::install::{Release, client_for, create_token, token_kubeconfig};
use crate::support::{TestNs, WAIT, wait_until};

/// Creates ServiceAccount `name` in the test namespace, bound there (RoleBinding) to the
/// ClusterRole `role` and to nothing else (`None`: not bound at all); returns a kubeconfig that
/// authenticates as it with a fresh token.
fn service_account(ns: &TestNs, name: &str, role: Option<&str>) -> PathBuf {
    ns.kubectl(&["create", "serviceaccount", name]);
    if let Some(role) = role {
        let sa = format!("--serviceaccount={}:{name}", ns.ns);
        ns.kubectl(&["create", "rolebinding", name, &format!("--clusterrole={role}"), &sa]);
    }
    token_kubeconfig(ns, name, &create_token(ns, name, None))
}

/// The user name the API server gives ServiceAccount `name` of the test namespace.
fn user_of(ns: &TestNs, name: &str) -> String {
    format!("system:serviceaccount:{}:{name}", ns.ns)
}

/// Asserts that RBAC refused `r` (403, "cannot <verb> resource \"<resource>\""): the
/// authorizer, not an admission policy, said no.
#[track_caller]
fn assert_rbac_denied<T: std::fmt::Debug>(r: Result<T, kube::Error>, verb: &str, resource: &str) {
    match r {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "expected 403 Forbidden: {}", s.message);
            let words = format!("cannot {verb} resource \"{resource}\"");
            assert!(s.message.contains(&words), "refused, but not by RBAC for {words:?}: {}", s.message);
        }
        other => panic!("expected RBAC to refuse {verb} {resource}, got {other:?}"),
    }
}

fn lock_object(name: &str) -> DistributedLock {
    serde_json::from_value(json!({
        "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLock",
        "metadata": {"name": name}, "spec": {},
    }))
    .unwrap()
}

fn claim_object(name: &str, lock: &str, identity: &str) -> DistributedLockClaim {
    serde_json::from_value(json!({
        "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLockClaim",
        "metadata": {"name": name}, "spec": {"lock": lock, "identity": identity},
    }))
    .unwrap()
}

async fn lease_holder(ns: &TestNs, lock: &str) -> Option<String> {
    ns.api::<Lease>().get_opt(lock).await.ok().flatten().and_then(|l| l.spec?.holder_identity)
}

/// Waits until the lock is free and no claim is left in the namespace: the holder released.
async fn wait_released(ns: &TestNs, lock: &str) {
    let claims = ns.api::<DistributedLockClaim>();
    wait_until(&format!("{lock} released and no claim left"), WAIT, || async {
        lease_holder(ns, lock).await.is_none()
            && claims.list(&ListParams::default()).await.is_ok_and(|l| l.items.is_empty())
    })
    .await;
}

/// `leasehold lock` and the library's `Holder`, as a ServiceAccount whose only permission is a
/// RoleBinding to the chart's holder ClusterRole: both acquire, renew and release (with the
/// tamper-protection policies in force, under the default identity, the user name); everything
/// a holder does not need is refused by RBAC. Fails without the holder role.
#[tokio::test]
async fn a_service_account_bound_only_to_the_holder_role_holds_locks() {
    let mut ns = TestNs::new("holderrole").await;
    let release = Release::install(&ns, &["--set", "replicaCount=1"]);
    let holder_role = format!("{}-holder", release.fullname());
    ns.create_lock("l", json!({})).await;
    ns.start_operator(&[]);

    // Issue 13: with no binding, `leasehold lock` gets 403 and exits 1.
    let unbound = service_account(&ns, "unbound", None);
    let mut p = ns.lock_process_as("unbound", &unbound, &["l", "--", "true"]);
    assert_eq!(p.wait_exit().await, 1, "log:\n{}", p.output());
    assert!(p.output().contains("forbidden"), "{}", p.output());

    // A role without list/watch on claims: the wait for the grant is refused, and the holder
    // says so and exits instead of retrying the watch for ever.
    ns.kubectl(&[
        "create",
        "role",
        "nowatch",
        "--verb=get,create,delete",
        "--resource=distributedlocks.leasehold.dev,distributedlockclaims.leasehold.dev,leases.coordination.k8s.io",
    ]);
    let nowatch = service_account(&ns, "nowatch", None);
    let sa = format!("--serviceaccount={}:nowatch", ns.ns);
    ns.kubectl(&["create", "rolebinding", "nowatch", "--role=nowatch", &sa]);
    // (On a lock of its own: the operator may grant its claim before the refused watch ends the
    // wait, and the lock then stays with that claim until its lease expires.)
    ns.create_lock("nw", json!({})).await;
    let nowatch_locks: Api<DistributedLock> = Api::namespaced(client_for(&nowatch).await, &ns.ns);
    wait_until("nowatch may get lock nw", WAIT, || async { nowatch_locks.get("nw").await.is_ok() }).await;
    let mut p = ns.lock_process_as("nowatch", &nowatch, &["nw", "--", "true"]);
    assert_eq!(p.wait_exit().await, 1, "log:\n{}", p.output());
    assert!(p.output().contains("watch DistributedLockClaim failed"), "{}", p.output());
    assert!(p.output().contains("forbidden"), "{}", p.output());

    let kc = service_account(&ns, "runner", Some(&holder_role));
    let runner = client_for(&kc).await;
    let user = user_of(&ns, "runner");
    let locks: Api<DistributedLock> = Api::namespaced(runner.clone(), &ns.ns);
    // (The API server's RBAC authorizer learns of a new RoleBinding through an informer.)
    wait_until(&format!("runner may get lock l (RoleBinding to {holder_role})"), WAIT, || async {
        locks.get("l").await.is_ok()
    })
    .await;

    // (a) `leasehold lock`: acquires, runs the command past a renewal (retry period 2 s), exits
    // with its status, releases.
    let script = "echo token=$LEASEHOLD_FENCING_TOKEN holder=$LEASEHOLD_HOLDER; sleep 3";
    let mut p = ns.lock_process_as("runner", &kc, &["l", "--", "sh", "-c", script]);
    assert_eq!(p.wait_exit().await, 0, "log:\n{}", p.output());
    let out = p.output();
    assert!(out.contains(&format!("token=1 holder={user}")), "{out}");
    for bad in ["forbidden", "renewal failed", "release failed"] {
        assert!(!out.contains(bad), "{bad}:\n{out}");
    }
    wait_released(&ns, "l").await;

    // (b) The library: acquire, a background renewal, a try_acquire that finds the lock busy
    // (claim rejected, then cancelled), release.
    // (Its client records its requests: the renewal under the holder role and the chart's Lease
    // policy is the JSON Patch, not a refused patch and a read.)
    let (recording, recorded) = ns.recording_client_as(&kc).await;
    let holder = Holder::new(recording, &ns.ns, "l", &user);
    let guard = holder.acquire(Some(WAIT)).await.expect("Holder::acquire");
    let from = recorded.all().len();
    assert_eq!(guard.token(), 2);
    assert_eq!(lease_holder(&ns, "l").await.as_deref(), Some(user.as_str()));
    let busy = Holder::new(runner.clone(), &ns.ns, "l", "someone-else").try_acquire().await.expect("try_acquire");
    assert!(busy.is_none(), "the lock is held: try_acquire finds it busy");
    let mut renewed = guard.last_renewal();
    let renewal = tokio::time::timeout(Duration::from_secs(10), renewed.changed()).await;
    assert!(renewal.is_ok_and(|r| r.is_ok()), "a renewal succeeded within 10 s");
    assert!(!guard.is_lost());
    let lease_writes: Vec<(String, u16)> =
        recorded.lease_requests(from).into_iter().filter(|(m, _)| m != "GET").collect();
    assert!(
        !lease_writes.is_empty() && lease_writes.iter().all(|(m, s)| m == "PATCH" && *s == 200),
        "each renewal is one PATCH, admitted: {lease_writes:?}"
    );
    // The same account cannot force-release, not even its own grant: the revocation (a
    // tombstone holder) is refused by the chart's Lease policy, which lets a holder only renew
    // and release its own grant; the holder keeps the lock.
    let (code, out) = crate::install::leasehold_cli(&kc, &["release", "l", "-n", &ns.ns, "--force"]);
    assert_ne!(code, 0, "a holder force-released: {out}");
    assert!(out.contains("lease-grants"), "refused by the Lease policy: {out}");
    assert_eq!(lease_holder(&ns, "l").await.as_deref(), Some(user.as_str()));
    assert!(!guard.is_lost());
    // The release of a standing claim's request (issue 12) lists it in the Lease's
    // leasehold.dev/released, admitted by the Lease policy; the claim stays until `close()`.
    guard.release().await.expect("release");
    let lease = ns.api::<Lease>().get("l").await.unwrap();
    assert_eq!(leasehold::lease::released(&lease).len(), 1, "the release lists its request");
    holder.close().await;
    wait_released(&ns, "l").await;

    // (b2) Issue 12: the Lease policy lets a holder hand its grant to the next holder the operator
    // named in the Lease, exactly as named, and lets nobody but the operator set that hint.
    let kc2 = service_account(&ns, "runner2", Some(&holder_role));
    let runner2 = client_for(&kc2).await;
    let user2 = user_of(&ns, "runner2");
    let locks2: Api<DistributedLock> = Api::namespaced(runner2.clone(), &ns.ns);
    wait_until("runner2 may get lock l", WAIT, || async { locks2.get("l").await.is_ok() }).await;
    let first_holder = Holder::new(runner.clone(), &ns.ns, "l", &user);
    let first = first_holder.acquire(Some(WAIT)).await.expect("runner acquires");
    let second_holder = Holder::new(runner2.clone(), &ns.ns, "l", &user2);
    let second = second_holder.clone();
    let second = tokio::spawn(async move { second.acquire(Some(WAIT)).await });
    let admin_leases = ns.api::<Lease>();
    wait_until("the Lease names runner2 as next holder", WAIT, || async {
        admin_leases.get("l").await.is_ok_and(|l| l.annotations().get("leasehold.dev/next-holder") == Some(&user2))
    })
    .await;
    let policy = format!("{}-lease-grants", release.fullname());
    let as_runner: Api<Lease> = Api::namespaced(runner.clone(), &ns.ns);
    let forged = json!({"metadata": {"annotations": {"leasehold.dev/next-holder": "someone-else"}}});
    crate::install::assert_denied(
        as_runner.patch("l", &PatchParams::default(), &Patch::Merge(&forged)).await,
        &policy,
        "next-holder hint",
    );
    let hinted = admin_leases.get("l").await.unwrap();
    let next_uid = hinted.annotations()["leasehold.dev/next-holder-uid"].clone();
    let off_by_one = json!({
        "metadata": {"annotations": {
            "leasehold.dev/holder-uid": next_uid, "leasehold.dev/fencing-token": "999",
            "leasehold.dev/next-holder": null, "leasehold.dev/next-holder-uid": null, "leasehold.dev/next-token": null,
        }},
        "spec": {"holderIdentity": user2},
    });
    crate::install::assert_denied(
        as_runner.patch("l", &PatchParams::default(), &Patch::Merge(&off_by_one)).await,
        &policy,
        "fencing token",
    );
    // The released list (issue 12) only changes with the holder's release: a holder that keeps
    // the lock may not mark a request released (it would keep that waiter from being granted).
    let forged_release = json!({"metadata": {"annotations": {"leasehold.dev/released": format!("{next_uid}")}}});
    crate::install::assert_denied(
        as_runner.patch("l", &PatchParams::default(), &Patch::Merge(&forged_release)).await,
        &policy,
        "leasehold.dev/released",
    );
    // The handover itself, exactly as the hint says (server-side dry run): admitted.
    let handover = json!({
        "metadata": {"annotations": {
            "leasehold.dev/holder-uid": hinted.annotations()["leasehold.dev/next-holder-uid"],
            "leasehold.dev/holder-kind": "Claim",
            "leasehold.dev/fencing-token": hinted.annotations()["leasehold.dev/next-token"],
            "leasehold.dev/next-holder": null, "leasehold.dev/next-holder-uid": null, "leasehold.dev/next-token": null,
        }},
        "spec": {"holderIdentity": user2},
    });
    let dry = PatchParams { dry_run: true, ..PatchParams::default() };
    crate::install::assert_allowed(as_runner.patch("l", &dry, &Patch::Merge(&handover)).await, "the handover");
    let token = first.token();
    first.release().await.expect("runner hands over");
    let second = second.await.unwrap().expect("runner2 acquires");
    assert_eq!(second.token(), token + 1);
    assert_eq!(lease_holder(&ns, "l").await.as_deref(), Some(user2.as_str()));
    second.release().await.expect("runner2 releases");
    first_holder.close().await;
    second_holder.close().await;
    wait_released(&ns, "l").await;

    // (c) Nothing beyond that: the Lease only by read, watch (the wait for the grant) and
    // compare-and-swap (update, or patch with the grant's resourceVersion, which gives no more
    // than update: what a holder may change in a Lease is the chart's Lease policy's business),
    // not listed, created or deleted; locks
    // not created, changed, deleted or listed; no claim status (it would grant itself); no pods.
    let leases: Api<Lease> = Api::namespaced(runner.clone(), &ns.ns);
    let pp = PatchParams::default();
    let label = json!({"metadata": {"labels": {"team": "a"}}});
    assert_rbac_denied(leases.list(&ListParams::default()).await, "list", "leases");
    assert_rbac_denied(leases.delete("l", &DeleteParams::default()).await, "delete", "leases");
    let plain: Lease = serde_json::from_value(json!({"metadata": {"name": "plain"}})).unwrap();
    assert_rbac_denied(leases.create(&PostParams::default(), &plain).await, "create", "leases");
    assert_rbac_denied(locks.create(&PostParams::default(), &lock_object("mine")).await, "create", "distributedlocks");
    assert_rbac_denied(locks.patch("l", &pp, &Patch::Merge(&label)).await, "patch", "distributedlocks");
    assert_rbac_denied(locks.delete("l", &DeleteParams::default()).await, "delete", "distributedlocks");
    assert_rbac_denied(locks.list(&ListParams::default()).await, "list", "distributedlocks");
    let claims: Api<DistributedLockClaim> = Api::namespaced(runner.clone(), &ns.ns);
    claims.create(&PostParams::default(), &claim_object("self", "l", &user)).await.expect("a holder creates claims");
    let grant = json!({"status": {"phase": "Granted", "token": 99}});
    assert_rbac_denied(
        claims.patch_status("self", &pp, &Patch::Merge(&grant)).await,
        "patch",
        "distributedlockclaims/status",
    );
    let pods: Api<Pod> = Api::namespaced(runner.clone(), &ns.ns);
    assert_rbac_denied(pods.list(&ListParams::default()).await, "list", "pods");
    drop(release);
    ns.cleanup().await;
}

/// Issue 12: the chart's Lease policy lets a waiting standing claim (here: any holder-role
/// account) arrive by the Lease, one compare-and-swap, exactly as `grant::lease_arrival` computes
/// it: the next-holder hint on a held Lease that has none, or the holder of a free Lease, with
/// the token max(fencing-token, token-floor) + 1 and only within `leasehold.dev/token-ceiling`.
/// Refused: that token above the ceiling, a hint arrival that also changes the holder, any other
/// token, and a change of the ceiling. (A Lease of no lock, written by the test's admin, exempt
/// as system:masters; no operator runs.)
#[tokio::test]
async fn an_arrival_by_the_lease_is_admitted_only_as_computed_and_within_the_ceiling() {
    let ns = TestNs::new("leasearrival").await;
    let release = Release::install(&ns, &["--set", "replicaCount=1"]);
    let policy = format!("{}-lease-grants", release.fullname());
    let kc = service_account(&ns, "waiter", Some(&format!("{}-holder", release.fullname())));
    let user = user_of(&ns, "waiter");
    let as_waiter: Api<Lease> = Api::namespaced(client_for(&kc).await, &ns.ns);
    let admin: Api<Lease> = ns.api::<Lease>();
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "forge", "labels": {"leasehold.dev/lock": "forge"}, "annotations": {
            "leasehold.dev/fencing-token": "5", "leasehold.dev/token-floor": "0", "leasehold.dev/token-ceiling": "5",
            "leasehold.dev/holder-uid": "holder-uid/1", "leasehold.dev/holder-kind": "Claim",
        }},
        "spec": {"holderIdentity": "someone", "leaseDurationSeconds": 15},
    }))
    .unwrap();
    admin.create(&PostParams::default(), &lease).await.expect("admin creates the Lease");
    let dry = PatchParams { dry_run: true, ..PatchParams::default() };
    let hint = |token: &str| {
        json!({"metadata": {"annotations": {
            "leasehold.dev/next-holder": user, "leasehold.dev/next-holder-uid": "claim-uid/2",
            "leasehold.dev/next-token": token,
        }}})
    };
    // Token 6 = max(5, 0) + 1, above the ceiling 5: refused (the policy takes effect a moment
    // after the install).
    wait_until("the Lease policy refuses an arrival above the ceiling", WAIT, || async {
        matches!(as_waiter.patch("forge", &dry, &Patch::Merge(&hint("6"))).await,
            Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(&policy))
    })
    .await;
    crate::install::assert_denied(
        as_waiter.patch("forge", &dry, &Patch::Merge(&hint("6"))).await,
        &policy,
        "next-holder hint",
    );
    // Nor may the waiter raise the ceiling itself.
    let raise = json!({"metadata": {"annotations": {"leasehold.dev/token-ceiling": "10"}}});
    crate::install::assert_denied(
        as_waiter.patch("forge", &dry, &Patch::Merge(&raise)).await,
        &policy,
        "leasehold.dev/token-ceiling",
    );
    // The operator's ceiling 10: the hint with token 6 is admitted; any other token, a request
    // UID not of the form <claim UID>/<request>, or a hint that also takes the holder is not.
    admin.patch("forge", &PatchParams::default(), &Patch::Merge(&raise)).await.expect("admin raises the ceiling");
    crate::install::assert_allowed(as_waiter.patch("forge", &dry, &Patch::Merge(&hint("6"))).await, "the hint");
    for token in ["5", "7", "10", "11"] {
        crate::install::assert_denied(
            as_waiter.patch("forge", &dry, &Patch::Merge(&hint(token))).await,
            &policy,
            "next-holder hint",
        );
    }
    let mut bad_uid = hint("6");
    bad_uid["metadata"]["annotations"]["leasehold.dev/next-holder-uid"] = json!("claim-uid");
    crate::install::assert_denied(
        as_waiter.patch("forge", &dry, &Patch::Merge(&bad_uid)).await,
        &policy,
        "next-holder hint",
    );
    let mut takes_holder = hint("6");
    takes_holder["spec"] = json!({"holderIdentity": user});
    crate::install::assert_denied(
        as_waiter.patch("forge", &dry, &Patch::Merge(&takes_holder)).await,
        &policy,
        "holder of Lease",
    );
    let take = |token: &str| {
        json!({
            "metadata": {"annotations": {
                "leasehold.dev/holder-uid": "claim-uid/2", "leasehold.dev/holder-kind": "Claim",
                "leasehold.dev/fencing-token": token,
            }},
            "spec": {"holderIdentity": user, "renewTime": "2026-12-05T10:00:00.000000Z"},
        })
    };
    // Taking a held Lease: refused, even with the right token.
    crate::install::assert_denied(
        as_waiter.patch("forge", &dry, &Patch::Merge(&take("6"))).await,
        &policy,
        "fencing token",
    );
    // A free Lease (the holder released it, token 5 kept): taken with token 6 only.
    let free = json!({
        "metadata": {"annotations": {"leasehold.dev/holder-uid": null, "leasehold.dev/holder-kind": null}},
        "spec": {"holderIdentity": null, "renewTime": null, "acquireTime": null},
    });
    admin.patch("forge", &PatchParams::default(), &Patch::Merge(&free)).await.expect("admin frees the Lease");
    crate::install::assert_allowed(as_waiter.patch("forge", &dry, &Patch::Merge(&take("6"))).await, "the take");
    crate::install::assert_denied(
        as_waiter.patch("forge", &dry, &Patch::Merge(&take("7"))).await,
        &policy,
        "fencing token",
    );
    let mut take_with_hint = take("6");
    take_with_hint["metadata"]["annotations"]["leasehold.dev/next-holder"] = json!("x");
    take_with_hint["metadata"]["annotations"]["leasehold.dev/next-holder-uid"] = json!("x/1");
    take_with_hint["metadata"]["annotations"]["leasehold.dev/next-token"] = json!("7");
    crate::install::assert_denied(
        as_waiter.patch("forge", &dry, &Patch::Merge(&take_with_hint)).await,
        &policy,
        "fencing token",
    );
    drop(release);
    ns.cleanup().await;
}

/// The Lease of the arrival tests: lock `forge`, held by "someone" (token 5, floor 0, ceiling
/// 10: an arrival takes token 6), with `hint` as extra annotations; created by the test's admin
/// (exempt as system:masters; no operator runs).
async fn arrival_lease(ns: &TestNs, hint: serde_json::Value) {
    let mut lease = json!({
        "metadata": {"name": "forge", "labels": {"leasehold.dev/lock": "forge"}, "annotations": {
            "leasehold.dev/fencing-token": "5", "leasehold.dev/token-floor": "0", "leasehold.dev/token-ceiling": "10",
            "leasehold.dev/holder-uid": "holder-uid/1", "leasehold.dev/holder-kind": "Claim",
        }},
        "spec": {"holderIdentity": "someone", "leaseDurationSeconds": 15},
    });
    lease["metadata"]["annotations"].as_object_mut().unwrap().extend(hint.as_object().unwrap().clone());
    let lease: Lease = serde_json::from_value(lease).unwrap();
    ns.api::<Lease>().create(&PostParams::default(), &lease).await.expect("admin creates the Lease");
}

/// The next-holder hint naming `identity` with request UID `claim-uid/2` and token `token`.
fn hint_of(identity: &str, token: &str) -> serde_json::Value {
    json!({
        "leasehold.dev/next-holder": identity, "leasehold.dev/next-holder-uid": "claim-uid/2",
        "leasehold.dev/next-token": token,
    })
}

/// Waits until the Lease policy of `release` is in force (it takes effect a moment after the
/// install): `api` is refused a change of the token ceiling of Lease `forge`.
async fn lease_policy_in_force(api: &Api<Lease>, policy: &str) {
    let dry = PatchParams { dry_run: true, ..PatchParams::default() };
    let raise = json!({"metadata": {"annotations": {"leasehold.dev/token-ceiling": "11"}}});
    wait_until("the Lease policy is in force", WAIT, || async {
        matches!(api.patch("forge", &dry, &Patch::Merge(&raise)).await,
            Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(policy))
    })
    .await;
}

/// An arrival by the Lease names the requester itself: the next-holder hint it sets, or the
/// holder it makes of a free Lease, is its own user name (or its pod name); naming anyone else
/// (another ServiceAccount, the holder, any string) is refused, with a message that says which
/// identities the requester has. Fails against a policy that checks only the token.
#[tokio::test]
async fn an_arrival_by_the_lease_names_only_the_requester() {
    let ns = TestNs::new("arrivalid").await;
    let release = Release::install(&ns, &["--set", "replicaCount=1"]);
    let policy = format!("{}-lease-grants", release.fullname());
    let kc = service_account(&ns, "waiter", Some(&format!("{}-holder", release.fullname())));
    let user = user_of(&ns, "waiter");
    let other = user_of(&ns, "other");
    let as_waiter: Api<Lease> = Api::namespaced(client_for(&kc).await, &ns.ns);
    let admin: Api<Lease> = ns.api::<Lease>();
    arrival_lease(&ns, json!({})).await;
    lease_policy_in_force(&as_waiter, &policy).await;
    let dry = PatchParams { dry_run: true, ..PatchParams::default() };
    let hint = |identity: &str| json!({"metadata": {"annotations": hint_of(identity, "6")}});
    // Its own identity: admitted. Another's: refused, and the message names the requester.
    crate::install::assert_allowed(as_waiter.patch("forge", &dry, &Patch::Merge(&hint(&user))).await, "own hint");
    for forged in [other.as_str(), "someone", "x"] {
        let r = as_waiter.patch("forge", &dry, &Patch::Merge(&hint(forged))).await;
        crate::install::assert_denied(r, &policy, "next-holder hint of a Lease");
        let r = as_waiter.patch("forge", &dry, &Patch::Merge(&hint(forged))).await;
        crate::install::assert_denied(r, &policy, &format!("(you: \"{user}\")"));
    }
    // A free Lease (token 5 kept): taken as itself only.
    let free = json!({
        "metadata": {"annotations": {"leasehold.dev/holder-uid": null, "leasehold.dev/holder-kind": null}},
        "spec": {"holderIdentity": null},
    });
    admin.patch("forge", &PatchParams::default(), &Patch::Merge(&free)).await.expect("admin frees the Lease");
    let take = |identity: &str| {
        json!({
            "metadata": {"annotations": {
                "leasehold.dev/holder-uid": "claim-uid/2", "leasehold.dev/holder-kind": "Claim",
                "leasehold.dev/fencing-token": "6",
            }},
            "spec": {"holderIdentity": identity, "renewTime": "2026-12-05T10:00:00.000000Z"},
        })
    };
    crate::install::assert_allowed(as_waiter.patch("forge", &dry, &Patch::Merge(&take(&user))).await, "own take");
    for forged in [other.as_str(), "someone", "x"] {
        let r = as_waiter.patch("forge", &dry, &Patch::Merge(&take(forged))).await;
        crate::install::assert_denied(r, &policy, "take a free Lease only as its own holder identity");
        let r = as_waiter.patch("forge", &dry, &Patch::Merge(&take(forged))).await;
        crate::install::assert_denied(r, &policy, &format!("(you: \"{user}\")"));
    }
    drop(release);
    ns.cleanup().await;
}

/// A waiter may withdraw the next-holder hint that names it (`Ticket::cancel`, which removes its
/// own hint so the lock is not handed to a request that is gone): the requester named by
/// `leasehold.dev/next-holder` removes the three hint annotations and changes nothing else.
/// Refused: another user's removal of that hint (another holder-role account), and a withdrawal
/// that also changes the holder, the token, the released list or the renew time. Fails against a
/// policy that lets only the holder remove a hint.
#[tokio::test]
async fn the_waiter_a_hint_names_may_withdraw_it_and_nobody_else() {
    let ns = TestNs::new("withdrawhint").await;
    let release = Release::install(&ns, &["--set", "replicaCount=1"]);
    let policy = format!("{}-lease-grants", release.fullname());
    let holder_role = format!("{}-holder", release.fullname());
    let as_waiter: Api<Lease> =
        Api::namespaced(client_for(&service_account(&ns, "waiter", Some(&holder_role))).await, &ns.ns);
    let as_other: Api<Lease> =
        Api::namespaced(client_for(&service_account(&ns, "other", Some(&holder_role))).await, &ns.ns);
    let user = user_of(&ns, "waiter");
    arrival_lease(&ns, hint_of(&user, "6")).await;
    lease_policy_in_force(&as_waiter, &policy).await;
    let dry = PatchParams { dry_run: true, ..PatchParams::default() };
    let withdraw = json!({"metadata": {"annotations": {
        "leasehold.dev/next-holder": null, "leasehold.dev/next-holder-uid": null, "leasehold.dev/next-token": null,
    }}});
    // The waiter may, as the library does it: read, remove the hint, compare-and-swap PUT.
    let mut lease = as_waiter.get("forge").await.expect("the waiter reads the Lease");
    let ann = lease.metadata.annotations.as_mut().unwrap();
    for k in ["leasehold.dev/next-holder", "leasehold.dev/next-holder-uid", "leasehold.dev/next-token"] {
        ann.remove(k);
    }
    let dry_put = PostParams { dry_run: true, ..PostParams::default() };
    crate::install::assert_allowed(as_waiter.replace("forge", &dry_put, &lease).await, "the waiter's withdrawal (PUT)");
    crate::install::assert_allowed(
        as_waiter.patch("forge", &dry, &Patch::Merge(&withdraw)).await,
        "the waiter's withdrawal (merge patch)",
    );
    // Another holder-role account may not remove the waiter's hint.
    crate::install::assert_denied(
        as_other.patch("forge", &dry, &Patch::Merge(&withdraw)).await,
        &policy,
        "only the waiter the hint names",
    );
    // But nothing else may change with it (each refusal names the first validation it fails).
    let with = |extra: serde_json::Value| {
        let mut p = withdraw.clone();
        json_merge(&mut p, extra);
        p
    };
    let also_takes = with(json!({"spec": {"holderIdentity": user}}));
    crate::install::assert_denied(
        as_waiter.patch("forge", &dry, &Patch::Merge(&also_takes)).await,
        &policy,
        "holder of Lease",
    );
    let also_renews = with(json!({"spec": {"renewTime": "2026-12-05T10:00:00.000000Z"}}));
    crate::install::assert_denied(
        as_waiter.patch("forge", &dry, &Patch::Merge(&also_renews)).await,
        &policy,
        "next-holder hint of a Lease",
    );
    let also_token = with(json!({"metadata": {"annotations": {"leasehold.dev/fencing-token": "6"}}}));
    crate::install::assert_denied(
        as_waiter.patch("forge", &dry, &Patch::Merge(&also_token)).await,
        &policy,
        "fencing token",
    );
    let also_released = with(json!({"metadata": {"annotations": {"leasehold.dev/released": "claim-uid/2"}}}));
    crate::install::assert_denied(
        as_waiter.patch("forge", &dry, &Patch::Merge(&also_released)).await,
        &policy,
        "next-holder hint of a Lease",
    );
    // The hint is the waiter's to withdraw, not to rewrite: changing its token is refused.
    let retoken = json!({"metadata": {"annotations": {"leasehold.dev/next-token": "7"}}});
    crate::install::assert_denied(
        as_waiter.patch("forge", &dry, &Patch::Merge(&retoken)).await,
        &policy,
        "next-holder hint of a Lease",
    );
    drop(release);
    ns.cleanup().await;
}

/// Merges JSON object `extra` into `into` (objects recursively, anything else replaced).
fn json_merge(into: &mut serde_json::Value, extra: serde_json::Value) {
    match (into, extra) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                json_merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

/// The chart's ClusterRoles aggregated into the built-in user-facing roles: `view` reads locks
/// and claims and changes nothing; `edit` and `admin` create, change and delete locks, and
/// `edit` holds one with the library. Fails without the aggregated roles.
#[tokio::test]
async fn the_builtin_view_edit_and_admin_roles_include_locks() {
    let mut ns = TestNs::new("aggregate").await;
    let release = Release::install(&ns, &["--set", "replicaCount=1"]);
    let api = |c: &Client| -> (Api<DistributedLock>, Api<DistributedLockClaim>) {
        (Api::namespaced(c.clone(), &ns.ns), Api::namespaced(c.clone(), &ns.ns))
    };
    let viewer = client_for(&service_account(&ns, "viewer", Some("view"))).await;
    let editor = client_for(&service_account(&ns, "editor", Some("edit"))).await;
    let admin = client_for(&service_account(&ns, "owner", Some("admin"))).await;
    let (view_locks, view_claims) = api(&viewer);
    let (edit_locks, _) = api(&editor);
    let (admin_locks, _) = api(&admin);
    let (pp, dry) = (PostParams::default(), PostParams { dry_run: true, ..PostParams::default() });

    // kube-controller-manager aggregates the rules into edit and admin a moment after the install.
    wait_until("edit may create locks (aggregated)", WAIT, || async {
        edit_locks.create(&dry, &lock_object("by-editor")).await.is_ok()
    })
    .await;
    edit_locks.create(&pp, &lock_object("by-editor")).await.expect("edit creates a lock");
    let longer = json!({"spec": {"leaseDurationSeconds": 20}});
    edit_locks.patch("by-editor", &PatchParams::default(), &Patch::Merge(&longer)).await.expect("edit changes a lock");
    wait_until("admin may create locks (aggregated)", WAIT, || async {
        admin_locks.create(&dry, &lock_object("by-admin")).await.is_ok()
    })
    .await;
    admin_locks.create(&pp, &lock_object("by-admin")).await.expect("admin creates a lock");
    admin_locks.delete("by-admin", &DeleteParams::default()).await.expect("admin deletes a lock");

    // view: reads, changes nothing.
    wait_until("view may list locks (aggregated)", WAIT, || async {
        view_locks.list(&ListParams::default()).await.is_ok()
    })
    .await;
    let listed = view_locks.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.iter().map(|l| l.name_any()).collect::<Vec<_>>(), ["by-editor"]);
    assert_eq!(view_locks.get("by-editor").await.expect("view gets a lock").spec.lease_duration_seconds, 20);
    view_claims.list(&ListParams::default()).await.expect("view lists claims");
    assert_rbac_denied(view_locks.create(&pp, &lock_object("by-viewer")).await, "create", "distributedlocks");
    assert_rbac_denied(view_locks.delete("by-editor", &DeleteParams::default()).await, "delete", "distributedlocks");
    let claim = claim_object("by-viewer", "by-editor", "viewer");
    assert_rbac_denied(view_claims.create(&pp, &claim).await, "create", "distributedlockclaims");

    // edit holds a lock (what a holder needs), but the lock's status stays the operator's.
    ns.start_operator(&[]);
    let user = user_of(&ns, "editor");
    let guard = Holder::new(editor.clone(), &ns.ns, "by-editor", &user).acquire(Some(WAIT)).await.expect("edit holds");
    guard.release().await.expect("edit releases");
    let status = json!({"status": {"highestToken": 1000}});
    assert_rbac_denied(
        edit_locks.patch_status("by-editor", &PatchParams::default(), &Patch::Merge(&status)).await,
        "patch",
        "distributedlocks/status",
    );
    edit_locks.delete("by-editor", &DeleteParams::default()).await.expect("edit deletes a lock");

    // Both roles carry the aggregation labels for the built-in roles they extend.
    let roles: Api<ClusterRole> = Api::all(ns.client.clone());
    for (suffix, into) in [("view", &["view", "edit", "admin"][..]), ("edit", &["edit", "admin"][..])] {
        let role = roles.get(&format!("{}-{suffix}", release.fullname())).await.expect("aggregated ClusterRole");
        for target in into {
            let label = format!("rbac.authorization.k8s.io/aggregate-to-{target}");
            assert_eq!(role.labels().get(&label).map(String::as_str), Some("true"), "{suffix} role: {label}");
        }
    }
    drop(release);
    ns.cleanup().await;
}
