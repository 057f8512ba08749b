//! `leasehold status` and `leasehold why` (read-only views), run as the real binary against the
//! real control plane, as an operator would run them.

use std::process::Command;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::PostParams;
use leasehold::crd::{DistributedLock, DistributedLockClaim};
use leasehold::lock::{SLOT_ANNOTATION, lock_token_annotation};
use serde_json::{Value, json};

use crate::install::{create_token, token_kubeconfig};
use crate::support::{TestNs, WAIT, is_gated, set_pod, token_of, wait_pod, wait_until};

/// Runs `leasehold <args>` with the test's admin kubeconfig in `KUBECONFIG`; returns
/// (exit status, stdout, stderr).
fn leasehold(ns: &TestNs, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(args)
        .env("KUBECONFIG", &ns.kubeconfig)
        .output()
        .expect("run leasehold");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// Like [`leasehold`], and it must exit 0; returns stdout.
fn leasehold_ok(ns: &TestNs, args: &[&str]) -> String {
    let (code, out, err) = leasehold(ns, args);
    assert_eq!(code, 0, "leasehold {args:?} exited {code}; stdout:\n{out}\nstderr:\n{err}");
    out
}

#[tokio::test]
async fn status_and_why_show_the_holder_and_the_waiters_in_grant_order() {
    let mut ns = TestNs::new("inspect").await;
    ns.create_lock("l", json!({})).await;
    ns.start_operator(&[]);
    ns.create_gated_pod("holder", "l", "10m").await;
    let holder = wait_pod(&ns, "holder", "granted", |p| !is_gated(p)).await;
    let token = token_of(&holder).expect("the holder carries its token");
    // creationTimestamp has one-second resolution: space the waiters so their order is by time
    // (and would still be w1, w2 by name within one second).
    ns.create_gated_pod("w1", "l", "1s").await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    ns.create_gated_pod("w2", "l", "1s").await;
    let locks = ns.api::<DistributedLock>();
    wait_until("the operator's status lists w1, w2", WAIT, || async {
        locks.get("l").await.ok().and_then(|l| l.status).is_some_and(|s| s.waiters == ["w1", "w2"])
    })
    .await;

    // The table: the lock's row names the holder with its token, the queue rows are in order.
    let table = leasehold_ok(&ns, &["status", "-n", &ns.ns]);
    let lines: Vec<&str> = table.lines().collect();
    let row: Vec<&str> =
        lines.iter().find(|l| l.starts_with("l ")).expect("a row for lock l").split_whitespace().collect();
    assert_eq!(&row[..3], ["l", "holder", &token.to_string()], "{table}");
    assert_eq!(row[5], "holder", "the Lease names the holder: {table}");
    assert!(row.contains(&"True"), "Ready: {table}");
    assert_eq!(row.last(), Some(&"2"), "two waiting: {table}");
    let queue: Vec<(&str, &str)> = lines
        .iter()
        .skip_while(|l| !l.starts_with("LOCK   POSITION"))
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|c| c.len() > 2)
        .map(|c| (c[1], c[2]))
        .collect();
    assert_eq!(queue, [("1", "w1"), ("2", "w2")], "{table}");

    // The same as JSON, for one lock, with the cluster chosen by --kubeconfig alone.
    let kubeconfig = ns.kubeconfig.to_string_lossy().into_owned();
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["status", "l", "-o", "json", "-n", &ns.ns, "--kubeconfig", &kubeconfig])
        .env_remove("KUBECONFIG")
        .env("HOME", "/nonexistent")
        .output()
        .expect("run leasehold status");
    assert!(out.status.success(), "status -o json: {}", String::from_utf8_lossy(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("status -o json is JSON");
    let lock = &doc["locks"][0];
    assert_eq!(doc["locks"].as_array().map(Vec::len), Some(1), "{doc}");
    assert_eq!(lock["name"], "l");
    assert_eq!(lock["namespace"], ns.ns.as_str());
    assert_eq!(lock["holder"]["name"], "holder", "{doc}");
    assert_eq!(lock["holder"]["token"], token, "{doc}");
    assert_eq!(lock["lease"]["holderIdentity"], "holder", "{doc}");
    assert_eq!(lock["ready"]["status"], "True", "{doc}");
    let waiters: Vec<(&str, u64)> = lock["waiters"]
        .as_array()
        .expect("waiters")
        .iter()
        .map(|w| (w["name"].as_str().unwrap(), w["position"].as_u64().unwrap()))
        .collect();
    assert_eq!(waiters, [("w1", 1), ("w2", 2)], "{doc}");
    assert!(lock["waiters"][0]["waitedSeconds"].as_i64().is_some_and(|s| s >= 1), "{doc}");

    // why: the second waiter, the holder.
    let w2 = leasehold_ok(&ns, &["why", "w2", "-n", &ns.ns]);
    assert!(w2.contains(&format!("for lock l, held by pod holder with fencing token {token}")), "{w2}");
    assert!(w2.contains("position 2 of 2 in the queue, behind w1 "), "{w2}");
    let h = leasehold_ok(&ns, &["why", "holder", "-n", &ns.ns]);
    assert!(h.contains(&format!("holds lock l with fencing token {token}")), "{h}");

    // A reader who may not read Leases (as with the built-in `view` role) still gets the holder,
    // from the lock's status, and the same queue; the namespace is its kubeconfig context's.
    ns.kubectl(&["create", "serviceaccount", "reader"]);
    let resources = "--resource=distributedlocks.leasehold.dev,distributedlockclaims.leasehold.dev,pods";
    ns.kubectl(&["create", "role", "reader", "--verb=get,list", resources]);
    let sa = format!("--serviceaccount={}:reader", ns.ns);
    ns.kubectl(&["create", "rolebinding", "reader", "--role=reader", &sa]);
    let reader = token_kubeconfig(&ns, "reader", &create_token(&ns, "reader", None));
    let reader = reader.to_string_lossy().into_owned();
    let (code, out, err) = leasehold(&ns, &["status", "-o", "json", "--kubeconfig", &reader]);
    assert_eq!(code, 0, "status as reader: {err}");
    assert!(err.contains("may not read Leases in namespace"), "{err}");
    let doc: Value = serde_json::from_str(&out).expect("JSON");
    let lock = &doc["locks"][0];
    assert_eq!((&lock["holder"]["name"], &lock["leaseForbidden"]), (&json!("holder"), &json!(true)), "{doc}");
    let names: Vec<&str> = lock["waiters"].as_array().unwrap().iter().map(|w| w["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["w1", "w2"], "{doc}");
    let w2 = leasehold_ok(&ns, &["why", "w2", "--kubeconfig", &reader]);
    assert!(w2.contains("held by pod holder") && w2.contains("position 2 of 2"), "{w2}");
    assert!(w2.contains("403 Forbidden"), "{w2}");
    ns.cleanup().await;
}

/// A semaphore (`maxHolders: 2`) with two pod holders, a waiting pod and a waiting claim: `status`
/// shows 2/2 and one row per slot with its Lease, `why` tells the slot-1 holder its slot, token
/// and Lease, and a waiter (pod or claim) its place and who holds both slots.
#[tokio::test]
async fn status_and_why_show_every_slot_of_a_semaphore() {
    let mut ns = TestNs::new("inspect-sem").await;
    ns.create_lock("pool", json!({"maxHolders": 2})).await;
    ns.start_operator(&[]);
    ns.create_gated_pod("h-a", "pool", "10m").await;
    ns.create_gated_pod("h-b", "pool", "10m").await;
    let holders: Vec<Pod> = vec![
        wait_pod(&ns, "h-a", "granted", |p| !is_gated(p)).await,
        wait_pod(&ns, "h-b", "granted", |p| !is_gated(p)).await,
    ];
    // (slot, pod, token), slot 0 first.
    let mut slots: Vec<(String, String, i64)> = holders
        .iter()
        .map(|p| {
            let slot = p.metadata.annotations.as_ref().and_then(|a| a.get(SLOT_ANNOTATION)).cloned();
            (slot.expect("a granted pod carries its slot"), p.metadata.name.clone().unwrap(), token_of(p).unwrap())
        })
        .collect();
    slots.sort();
    assert_eq!([slots[0].0.as_str(), slots[1].0.as_str()], ["0", "1"], "{slots:?}");
    // The waiters: a pod, then (a second later: creationTimestamp has one-second resolution) a
    // claim as `leasehold lock` or the holder library makes it.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    ns.create_gated_pod("w", "pool", "1s").await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let claim: DistributedLockClaim = serde_json::from_value(json!({
        "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLockClaim",
        "metadata": {"name": "cl"}, "spec": {"lock": "pool", "identity": "laptop"},
    }))
    .unwrap();
    ns.api::<DistributedLockClaim>().create(&PostParams::default(), &claim).await.expect("create claim");
    let locks = ns.api::<DistributedLock>();
    wait_until("the operator's status shows 2/2 and two waiting", WAIT, || async {
        locks
            .get("pool")
            .await
            .ok()
            .and_then(|l| l.status)
            .is_some_and(|s| s.occupancy.as_deref() == Some("2/2") && s.waiting == 2)
    })
    .await;

    let table = leasehold_ok(&ns, &["status", "-n", &ns.ns]);
    let lines: Vec<&str> = table.lines().collect();
    let row = lines.iter().find(|l| l.starts_with("pool ")).expect("a row for lock pool");
    assert!(row.contains(" 2/2 holders "), "{table}");
    assert_eq!(row.split_whitespace().last(), Some("2"), "two waiting: {table}");
    let section = |head: &str| -> Vec<Vec<String>> {
        lines
            .iter()
            .skip_while(|l| !l.starts_with(head))
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .collect()
    };
    let slot_rows: Vec<Vec<String>> = section("LOCK   SLOT")
        .into_iter()
        .map(|r| vec![r[1].clone(), r[2].clone(), r[4].clone(), r[5].clone()])
        .collect();
    let expected: Vec<Vec<String>> = vec![
        vec!["0".into(), slots[0].1.clone(), slots[0].2.to_string(), "pool".into()],
        vec!["1".into(), slots[1].1.clone(), slots[1].2.to_string(), "pool-slot-1".into()],
    ];
    assert_eq!(slot_rows, expected, "{table}");
    let queue: Vec<(String, String)> =
        section("LOCK   POSITION").into_iter().map(|r| (r[1].clone(), r[2].clone())).collect();
    assert_eq!(queue, [("1".into(), "w".into()), ("2".into(), "cl".into())], "{table}");

    let out = leasehold_ok(&ns, &["status", "pool", "-o", "json", "-n", &ns.ns]);
    let doc: Value = serde_json::from_str(&out).expect("status -o json is JSON");
    let lock = &doc["locks"][0];
    assert_eq!(lock["maxHolders"], 2, "{doc}");
    let holders: Vec<(u64, &str, i64, &str)> = lock["holders"]
        .as_array()
        .expect("holders")
        .iter()
        .map(|h| {
            (
                h["slot"].as_u64().unwrap(),
                h["name"].as_str().unwrap(),
                h["token"].as_i64().unwrap(),
                h["leaseName"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        holders,
        [(0, slots[0].1.as_str(), slots[0].2, "pool"), (1, slots[1].1.as_str(), slots[1].2, "pool-slot-1")],
        "{doc}"
    );

    // why: the holder of slot 1, the waiting pod, the waiting claim.
    let (slot1, t1) = (&slots[1].1, slots[1].2);
    let h = leasehold_ok(&ns, &["why", slot1, "-n", &ns.ns]);
    assert!(h.contains(&format!("holds lock pool with fencing token {t1} in slot 1 of 2 (Lease pool-slot-1")), "{h}");
    let all_held = format!(
        "a semaphore whose 2 slots are all held: slot 0 by pod {} (token {}), slot 1 by pod {slot1} (token {t1})",
        slots[0].1, slots[0].2
    );
    let w = leasehold_ok(&ns, &["why", "w", "-n", &ns.ns]);
    assert!(
        w.contains(&format!("Pod w waits at the leasehold.dev/lock scheduling gate for lock pool, {all_held}")),
        "{w}"
    );
    assert!(w.contains("position 1 of 2 in the queue: next to be granted when a slot is released"), "{w}");
    let cl = leasehold_ok(&ns, &["why", "cl", "-n", &ns.ns]);
    assert!(cl.contains(&format!("Claim cl (laptop) waits for lock pool, {all_held}")), "{cl}");
    assert!(cl.contains("position 2 of 2 in the queue, behind w "), "{cl}");
    ns.cleanup().await;
}

#[tokio::test]
async fn why_and_status_say_when_a_lock_or_pod_does_not_exist() {
    let mut ns = TestNs::new("inspect-missing").await;
    ns.start_operator(&[]);
    ns.create_gated_pod("orphan", "nope", "1s").await;

    let why = leasehold_ok(&ns, &["why", "orphan", "-n", &ns.ns]);
    assert!(why.contains(&format!("waits for lock nope, which does not exist in namespace {}", ns.ns)), "{why}");

    let (code, out, err) = leasehold(&ns, &["status", "nope", "-n", &ns.ns]);
    assert_eq!(code, 1, "status of a missing lock; stdout:\n{out}");
    assert!(err.contains(&format!("DistributedLock nope not found in namespace {}", ns.ns)), "{err}");
    assert!(out.is_empty(), "{out}");

    let (code, _, err) = leasehold(&ns, &["why", "ghost", "-n", &ns.ns]);
    assert_eq!(code, 1);
    assert!(err.contains(&format!("pod ghost not found in namespace {}", ns.ns)), "{err}");

    let (code, _, err) = leasehold(&ns, &["status", "-n", &ns.ns, "--context", "no-such-context"]);
    assert_eq!(code, 1);
    assert!(err.contains("no-such-context"), "{err}");
    ns.cleanup().await;
}

/// The binary works as a kubectl plugin: on `PATH` as `kubectl-leasehold` (a symlink, or what a
/// krew package installs), `kubectl leasehold status` and `kubectl leasehold why` run it, with
/// kubectl's own `KUBECONFIG`.
#[tokio::test]
async fn status_and_why_run_as_a_kubectl_plugin() {
    let mut ns = TestNs::new("inspect-plugin").await;
    ns.create_lock("l", json!({})).await;
    ns.start_operator(&[]);
    ns.create_gated_pod("holder", "l", "10m").await;
    wait_pod(&ns, "holder", "granted", |p| !is_gated(p)).await;
    let dir = std::env::temp_dir().join(format!("leasehold-plugin-{}", ns.ns));
    std::fs::create_dir_all(&dir).unwrap();
    let plugin = dir.join("kubectl-leasehold");
    let _ = std::fs::remove_file(&plugin);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_leasehold"), &plugin).unwrap();
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    let kubectl = |args: &[&str]| {
        let out = Command::new(crate::support::kubectl())
            .args(args)
            .env("PATH", &path)
            .env("KUBECONFIG", &ns.kubeconfig)
            .output()
            .expect("run kubectl");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "kubectl {args:?}: {text}");
        text
    };
    let list = kubectl(&["plugin", "list"]);
    assert!(list.contains(&plugin.display().to_string()), "{list}");
    let status = kubectl(&["leasehold", "status", "-n", &ns.ns]);
    assert!(status.lines().any(|l| l.starts_with("l ") && l.contains("holder")), "{status}");
    let why = kubectl(&["leasehold", "why", "holder", "-n", &ns.ns]);
    assert!(why.contains("holds lock l"), "{why}");
    std::fs::remove_dir_all(&dir).unwrap();
    ns.cleanup().await;
}

/// A pod wanting the lock set {a, b} while b is held by another running pod: `why` explains it
/// lock by lock (a reserved for it with its tentative token, b waiting behind the holder), and a
/// single-lock waiter on a is told a is reserved for the set pod; once b is freed the pod holds
/// both and `why` gives each lock's token.
#[tokio::test]
async fn why_explains_a_multi_lock_pod_lock_by_lock() {
    let mut ns = TestNs::new("inspect-set").await;
    for l in ["a", "b"] {
        ns.create_lock(l, json!({})).await;
    }
    ns.start_operator(&[]);
    ns.create_gated_pod("hb", "b", "10m").await;
    let hb = wait_pod(&ns, "hb", "granted", |p| !is_gated(p)).await;
    let hb_token = token_of(&hb).expect("the holder of b carries its token");
    ns.create_pod(set_pod("m", "a,b", "10m")).await;
    let (token_a, token_b) = (lock_token_annotation("a"), lock_token_annotation("b"));
    let m = wait_pod(&ns, "m", "a reserved", |p| p.annotations().contains_key(&token_a)).await;
    assert!(is_gated(&m), "m waits for b");
    let reserved: i64 = m.annotations()[&token_a].parse().unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    ns.create_gated_pod("v", "a", "1s").await;

    let why = leasehold_ok(&ns, &["why", "m", "-n", &ns.ns]);
    let lines: Vec<&str> = why.lines().collect();
    assert!(lines[0].contains("waits at the leasehold.dev/lock scheduling gate for its lock set a, b"), "{why}");
    assert!(lines[1].starts_with(&format!("- lock a: reserved for it, tentative token {reserved} ")), "{why}");
    assert!(lines[2].starts_with(&format!("- lock b: waiting, held by pod hb with fencing token {hb_token}")), "{why}");
    assert!(lines[2].contains("position 1 of 1 in the queue"), "{why}");
    assert!(
        lines[3].starts_with(
            "It waits for 1 of its 2 locks: b (position 1 of 1 in its queue). Lock a is reserved for it meanwhile."
        ),
        "{why}"
    );
    let v = leasehold_ok(&ns, &["why", "v", "-n", &ns.ns]);
    assert!(
        v.contains(&format!(
            "for lock a, reserved for pod m (it waits for the other locks of its set), tentative token {reserved}"
        )),
        "{v}"
    );

    // status marks the tentative holder, and b's queue positions count v after m.
    let table = leasehold_ok(&ns, &["status", "-n", &ns.ns]);
    let row_a = table.lines().find(|l| l.starts_with("a ")).unwrap_or_default();
    assert!(row_a.contains("m (reserved)"), "{table}");
    let doc: serde_json::Value =
        serde_json::from_str(&leasehold_ok(&ns, &["status", "a", "-o", "json", "-n", &ns.ns])).expect("status -o json");
    assert_eq!(doc["locks"][0]["holder"]["tentative"], true, "{doc}");

    // b freed: m gets it and runs with both.
    ns.kubectl(&["delete", "pod", "hb", "--wait=false"]);
    let m = wait_pod(&ns, "m", "ungated", |p| !is_gated(p)).await;
    let tokens: Vec<i64> = [&token_a, &token_b].iter().map(|k| m.annotations()[*k].parse().unwrap()).collect();
    assert_eq!(tokens[0], reserved, "a keeps the token it was reserved with");
    let why = leasehold_ok(&ns, &["why", "m", "-n", &ns.ns]);
    assert!(why.contains(&format!("- lock a: held, fencing token {}", tokens[0])), "{why}");
    assert!(why.contains(&format!("- lock b: held, fencing token {}", tokens[1])), "{why}");
    assert!(
        why.contains(&format!(
            "It holds every lock of its set (a with fencing token {}, b with fencing token {}) and runs",
            tokens[0], tokens[1]
        )),
        "{why}"
    );
    ns.cleanup().await;
}
