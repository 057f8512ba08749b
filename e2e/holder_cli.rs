//! The holder side: `leasehold lock` and the library, against the real control plane.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, PostParams};
use leasehold::crd::DistributedLockClaim;
use leasehold::holder::Holder;
use serde_json::json;

use crate::support::{TestNs, WAIT, wait_until};

async fn lease_holder(ns: &TestNs, lock: &str) -> Option<String> {
    ns.api::<Lease>().get_opt(lock).await.ok().flatten().and_then(|l| l.spec?.holder_identity)
}

async fn wait_holder(ns: &TestNs, lock: &str, who: &str) {
    wait_until(&format!("{who} holds {lock}"), WAIT, || async { lease_holder(ns, lock).await.as_deref() == Some(who) })
        .await;
}

#[tokio::test]
async fn lock_command_passes_env_and_exit_status_and_try_and_wait_timeout_fail_fast() {
    let mut ns = TestNs::new("cli").await;
    ns.create_lock("l", json!({})).await;
    ns.start_operator(&[]);
    let mut p = ns.lock_process(
        "env",
        &[
            "l",
            "--identity",
            "me",
            "--",
            "sh",
            "-c",
            "echo token=$LEASEHOLD_FENCING_TOKEN holder=$LEASEHOLD_HOLDER lock=$LEASEHOLD_LOCK; exit 7",
        ],
    );
    assert_eq!(p.wait_exit().await, 7, "exit status passes through; log:\n{}", p.output());
    assert!(p.output().contains("token=1 holder=me lock=l"), "{}", p.output());

    let mut holder = ns.lock_process("holder", &["l", "--identity", "holder", "--", "sleep", "600"]);
    wait_holder(&ns, "l", "holder").await;
    let mut busy = ns.lock_process("try", &["l", "--try", "--", "true"]);
    assert_eq!(busy.wait_exit().await, 3, "--try on a busy lock; log:\n{}", busy.output());
    let mut late = ns.lock_process("timeout", &["l", "--wait-timeout", "2s", "--", "true"]);
    let started = Instant::now();
    assert_eq!(late.wait_exit().await, 4, "--wait-timeout; log:\n{}", late.output());
    assert!(started.elapsed() >= Duration::from_secs(2));
    // Neither left a claim behind, and the holder still holds.
    let claims = ns.api::<DistributedLockClaim>().list(&Default::default()).await.unwrap();
    assert_eq!(claims.items.len(), 1, "only the holder's claim remains");
    assert_eq!(lease_holder(&ns, "l").await.as_deref(), Some("holder"));
    holder.signal("TERM");
    assert_eq!(holder.wait_exit().await, 128 + 15, "SIGTERM reached `sleep`, which died of it");
    ns.cleanup().await;
}

#[tokio::test]
async fn signals_are_forwarded_to_the_command() {
    let mut ns = TestNs::new("signals").await;
    ns.create_lock("l", json!({})).await;
    ns.start_operator(&[]);
    let script = "trap 'echo got-term; exit 42' TERM; echo ready; while true; do sleep 0.1; done";
    let mut p = ns.lock_process("trap", &["l", "--", "sh", "-c", script]);
    p.wait_output("command started", "ready").await;
    p.signal("TERM");
    assert_eq!(p.wait_exit().await, 42, "log:\n{}", p.output());
    assert!(p.output().contains("got-term"));
    // Released on exit: the lock is free again.
    wait_until("lock released", WAIT, || async { lease_holder(&ns, "l").await.is_none() }).await;
    ns.cleanup().await;
}

/// `leasehold lock` is not silent while it waits: with no operator running it says that nobody
/// has queued its claim; once an operator runs and someone else holds the lock, it names the
/// holder and its place in the queue.
#[tokio::test]
async fn a_waiting_lock_command_says_why_it_waits() {
    let mut ns = TestNs::new("progress").await;
    ns.create_lock("l", json!({})).await;
    let args = ["l", "--progress-interval", "1s", "--", "sh", "-c", "echo ready; sleep 600"];
    let a = ns.lock_process("a", &[&args[..1], &["--identity", "a"], &args[1..]].concat());
    a.wait_output("a says no operator queued it", "no operator has queued claim l-").await;
    assert!(a.output().contains("is it running?"), "{}", a.output());
    ns.start_operator(&[]);
    a.wait_output("a granted once the operator runs", "ready").await;
    let b = ns.lock_process("b", &[&args[..1], &["--identity", "b"], &args[1..]].concat());
    b.wait_output("b names the holder and its place", "held by a (fencing token 1); claim l-").await;
    assert!(b.output().contains("is 1 of 1 in the queue"), "{}", b.output());
    ns.cleanup().await;
}

/// Logs that go to a file or a pipe (`kubectl logs`, CI, `2> file`) carry no ANSI colour codes:
/// the operator's and `leasehold lock`'s (a newcomer found escape codes in both).
#[tokio::test]
async fn logs_written_to_a_file_have_no_colour_codes() {
    let mut ns = TestNs::new("nocolour").await;
    ns.create_lock("l", json!({})).await;
    let op = ns.start_operator(&[]);
    let mut p = ns.lock_process("plain", &["l", "--", "sh", "-c", "echo ready"]);
    assert_eq!(p.wait_exit().await, 0, "log:\n{}", p.output());
    let (cli, operator) = (p.output(), ns.operator_log(op));
    assert!(cli.contains("lock granted; starting command"), "the CLI logged its grant:\n{cli}");
    assert!(operator.contains("granted"), "the operator logged the grant:\n{operator}");
    assert!(!cli.contains('\u{1b}'), "escape codes in leasehold lock's stderr:\n{cli:?}");
    assert!(!operator.contains('\u{1b}'), "escape codes in the operator log:\n{operator:?}");
    ns.cleanup().await;
}

#[tokio::test]
async fn hot_standby_takes_over_after_the_holder_is_killed_with_a_higher_token() {
    let mut ns = TestNs::new("standby").await;
    ns.create_lock("l", json!({"leaseDurationSeconds": 3})).await;
    ns.start_operator(&[]);
    let a =
        ns.lock_process("a", &["l", "--identity", "a", "--", "sh", "-c", "echo a=$LEASEHOLD_FENCING_TOKEN; sleep 600"]);
    wait_holder(&ns, "l", "a").await;
    let mut b =
        ns.lock_process("b", &["l", "--identity", "b", "--", "sh", "-c", "echo b=$LEASEHOLD_FENCING_TOKEN; sleep 600"]);
    // b waits while a renews, well past a's lease duration.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(lease_holder(&ns, "l").await.as_deref(), Some("a"), "a keeps the lock by renewing");
    let killed = Instant::now();
    a.signal_group("KILL");
    wait_holder(&ns, "l", "b").await;
    let takeover = killed.elapsed();
    // Lease duration (3 s) plus one retry period (0.4 s) plus watch and scheduling slack.
    assert!(takeover < Duration::from_secs(6), "takeover took {takeover:?}");
    b.wait_output("b's command started", "b=").await;
    let token = |out: &str, who: &str| -> i64 {
        out.lines().find_map(|l| l.strip_prefix(&format!("{who}="))).and_then(|t| t.trim().parse().ok()).unwrap()
    };
    assert!(token(&b.output(), "b") > token(&a.output(), "a"));
    // a did not release: the operator took the lock back, and its Event says so.
    let note = ns.wait_event("DistributedLock", "Released").await.note.unwrap_or_default();
    assert!(note.starts_with("the lock was taken back from a (token "), "{note}");
    assert!(note.ends_with("HolderLeaseExpired"), "{note}");
    let _ = b.child.kill();
    ns.cleanup().await;
}

#[tokio::test]
async fn clean_release_hands_over_at_once_and_a_deleted_claim_does_not_revoke_a_renewing_holder() {
    let mut ns = TestNs::new("release").await;
    ns.create_lock("l", json!({})).await; // 15 s lease: a handover well under it is not expiry
    ns.start_operator(&[]);
    let a = Holder::new(ns.client.clone(), &ns.ns, "l", "a").acquire(Some(WAIT)).await.expect("a acquires");
    let b_holder = Holder::new(ns.client.clone(), &ns.ns, "l", "b");
    let b_task = tokio::spawn(async move { b_holder.acquire(Some(WAIT)).await });
    wait_until("b queued", WAIT, || async {
        ns.api::<DistributedLockClaim>().list(&Default::default()).await.is_ok_and(|l| l.items.len() == 2)
    })
    .await;
    let released = Instant::now();
    a.release().await.expect("a releases");
    let b = b_task.await.unwrap().expect("b acquires");
    assert!(released.elapsed() < Duration::from_secs(5), "handover took {:?}", released.elapsed());
    assert_eq!(b.token(), 2);

    // b's claim deleted behind b's back while b still runs and renews: c is not granted (b may
    // still be writing); b's release frees the lock and c gets the next token.
    let c_holder = Holder::new(ns.client.clone(), &ns.ns, "l", "c");
    let c_task = tokio::spawn(async move { c_holder.acquire(Some(WAIT)).await });
    let claims = ns.api::<DistributedLockClaim>();
    // a's standing claim stays after its release (issue 12): c is queued once its claim exists.
    wait_until("c queued", WAIT, || async {
        claims.list(&Default::default()).await.is_ok_and(|l| l.items.iter().any(|c| c.spec.identity == "c"))
    })
    .await;
    let b_claim =
        claims.list(&Default::default()).await.unwrap().items.into_iter().find(|c| c.spec.identity == "b").unwrap();
    claims.delete(&b_claim.metadata.name.unwrap(), &DeleteParams::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!c_task.is_finished(), "c was granted while b, whose claim was deleted, still held and renewed");
    assert_eq!(lease_holder(&ns, "l").await.as_deref(), Some("b"));
    b.release().await.expect("b still holds the Lease and releases it");
    let c = c_task.await.unwrap().expect("c acquires");
    assert_eq!(c.token(), 3);
    c.release().await.unwrap();

    // A claim's grant is in its status, not in an Event (issue 12: one write fewer per grant),
    // and a holder that released the Lease itself is not told its grant expired. A pod granted
    // after them gets its Granted and LockGranted Events: Events are recorded and listed here.
    ns.create_gated_pod("p", "l", "1s").await;
    let events = ns.api::<Event>();
    let reasons = || async {
        let items = events.list(&Default::default()).await.unwrap().items;
        let about = |e: &Event| {
            let names = [e.regarding.as_ref(), e.related.as_ref()];
            names.into_iter().flatten().filter_map(|r| r.name.clone()).collect::<Vec<_>>()
        };
        items.iter().map(|e| (e.reason.clone().unwrap_or_default(), about(e))).collect::<Vec<_>>()
    };
    wait_until("the pod's LockGranted Event", WAIT, || async {
        reasons().await.iter().any(|(r, _)| r == "LockGranted")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let seen = reasons().await;
    for (reason, about) in &seen {
        if reason == "Granted" || reason == "LockGranted" {
            assert!(about.contains(&"p".to_string()), "a grant Event not about the pod: {reason} {about:?}");
        }
        assert_ne!(reason, "GrantExpired", "a voluntary release was reported as an expiry: {about:?}");
    }
    ns.cleanup().await;
}

/// A guard dropped without `release()` (an early return, `?`, a panic) releases in the
/// background: the next waiter is granted well inside the 15 s lease, which an expiry could not
/// do, and the dropped holder's claim is deleted.
/// Issue 12: while a claim holds and another claim waits, the operator names the waiter in the
/// Lease as next holder (with the next token); the holder's release then hands the lock over in
/// one Lease write: the first Lease version after the release already names the waiter, with
/// that token and no hint left, and the operator finishes the grant (the claim's status).
#[tokio::test]
async fn a_release_hands_the_lock_to_the_waiting_claim_in_one_lease_write() {
    use futures::StreamExt;
    use kube::ResourceExt;
    use kube::api::{WatchEvent, WatchParams};
    let mut ns = TestNs::new("handover").await;
    ns.create_lock("l", json!({})).await;
    ns.start_operator(&[]);
    let a = Holder::new(ns.client.clone(), &ns.ns, "l", "a").acquire(Some(WAIT)).await.expect("a acquires");
    let b_holder = Holder::new(ns.client.clone(), &ns.ns, "l", "b");
    let b_task = tokio::spawn(async move { b_holder.acquire(Some(WAIT)).await });
    let leases = ns.api::<Lease>();
    let ann = |l: &Lease, k: &str| l.annotations().get(k).cloned();
    wait_until("the Lease names b as next holder", WAIT, || async {
        leases.get("l").await.is_ok_and(|l| ann(&l, "leasehold.dev/next-holder").as_deref() == Some("b"))
    })
    .await;
    let before = leases.get("l").await.unwrap();
    let next_token = (a.token() + 1).to_string();
    assert_eq!(ann(&before, "leasehold.dev/next-token"), Some(next_token.clone()));
    let by_name = WatchParams::default().fields("metadata.name=l");
    let mut versions = leases.watch(&by_name, &before.resource_version().unwrap()).await.unwrap().boxed();
    a.release().await.expect("a releases");
    let b = b_task.await.unwrap().expect("b acquires");
    assert_eq!(b.token().to_string(), next_token);
    let first = loop {
        match tokio::time::timeout(WAIT, versions.next()).await.expect("a Lease change").expect("the watch") {
            Ok(WatchEvent::Modified(l)) => break l,
            Ok(WatchEvent::Bookmark(_)) => continue,
            other => panic!("unexpected Lease event {other:?}"),
        }
    };
    assert_eq!(first.spec.as_ref().and_then(|s| s.holder_identity.clone()).as_deref(), Some("b"), "{first:?}");
    assert_eq!(ann(&first, "leasehold.dev/fencing-token"), Some(next_token.clone()));
    assert_eq!(ann(&first, "leasehold.dev/holder-kind").as_deref(), Some("Claim"));
    assert_eq!(ann(&first, "leasehold.dev/next-holder"), None, "the hint is used up");
    let claims = ns.api::<DistributedLockClaim>();
    wait_until("b's claim shows the grant", WAIT, || async {
        claims.list(&Default::default()).await.is_ok_and(|l| {
            l.items.iter().any(|c| c.spec.identity == "b" && c.status.as_ref().and_then(|s| s.token) == Some(b.token()))
        })
    })
    .await;
    b.release().await.expect("b releases");
    ns.cleanup().await;
}

#[tokio::test]
async fn a_lock_guard_dropped_without_release_hands_over_without_waiting_for_the_lease() {
    let mut ns = TestNs::new("dropguard").await;
    ns.create_lock("l", json!({})).await; // 15 s lease
    ns.start_operator(&[]);
    let a_holder = Holder::new(ns.client.clone(), &ns.ns, "l", "a");
    let a = a_holder.acquire(Some(WAIT)).await.expect("a acquires");
    let b_holder = Holder::new(ns.client.clone(), &ns.ns, "l", "b");
    let b_task = tokio::spawn(async move { b_holder.acquire(Some(WAIT)).await });
    let claims = ns.api::<DistributedLockClaim>();
    wait_until("b queued", WAIT, || async { claims.list(&Default::default()).await.is_ok_and(|l| l.items.len() == 2) })
        .await;
    let dropped = Instant::now();
    drop(a);
    let b = b_task.await.unwrap().expect("b acquires");
    assert!(dropped.elapsed() < Duration::from_secs(5), "handover after a drop took {:?}", dropped.elapsed());
    assert_eq!(b.token(), 2);
    // a's standing claim stays (issue 12): the background release listed its request as
    // released in the Lease write that handed over; `close()` deletes it.
    let a_claim = claims.list(&Default::default()).await.unwrap().items.into_iter().find(|c| c.spec.identity == "a");
    let a_request = leasehold::lock::grant::request_uid(&a_claim.unwrap().metadata.uid.unwrap(), 1);
    let lease = ns.api::<k8s_openapi::api::coordination::v1::Lease>().get("l").await.unwrap();
    assert!(leasehold::lease::released(&lease).contains(&a_request), "a's request is listed as released");
    a_holder.close().await;
    wait_until("a's claim deleted", WAIT, || async {
        claims.list(&Default::default()).await.is_ok_and(|l| l.items.iter().map(|c| c.spec.identity.as_str()).eq(["b"]))
    })
    .await;
    b.release().await.expect("b releases");
    ns.cleanup().await;
}

#[tokio::test]
async fn paused_holder_loses_the_lock_and_its_late_write_is_rejected_by_the_fenced_object() {
    let mut ns = TestNs::new("zombie").await;
    ns.create_lock("l", json!({"leaseDurationSeconds": 3})).await;
    ns.start_operator(&[]);
    // A writer identity that is not a cluster admin (admins may bypass fencing).
    ns.kubectl(&["create", "serviceaccount", "writer"]);
    ns.kubectl(&["create", "role", "cm-writer", "--verb=get,update,patch", "--resource=configmaps"]);
    ns.kubectl(&[
        "create",
        "rolebinding",
        "cm-writer",
        "--role=cm-writer",
        &format!("--serviceaccount={}:writer", ns.ns),
    ]);
    let as_writer = format!("--as=system:serviceaccount:{}:writer", ns.ns);
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "report", "annotations": {"leasehold.dev/fenced-by": "l", "leasehold.dev/fencing-token": "0"}},
        "data": {"written-by": "nobody"},
    }))
    .unwrap();
    ns.api::<ConfigMap>().create(&PostParams::default(), &cm).await.unwrap();
    let write = format!(
        "kubectl -n {ns} {as_writer} annotate cm report --overwrite leasehold.dev/fencing-token=$LEASEHOLD_FENCING_TOKEN written-by=$LEASEHOLD_HOLDER && echo wrote=$LEASEHOLD_FENCING_TOKEN; sleep 600",
        ns = ns.ns
    );
    let mut a = ns.lock_process("a", &["l", "--identity", "a", "--kill-grace", "500ms", "--", "sh", "-c", &write]);
    a.wait_output("a wrote", "wrote=").await;
    let a_token: i64 = a.output().lines().find_map(|l| l.strip_prefix("wrote=")).unwrap().trim().parse().unwrap();

    // A is paused (SIGSTOP: GC pause, partition) past its lease; B is granted A's token + 1 and writes.
    let mut b = ns.lock_process("b", &["l", "--identity", "b", "--", "sh", "-c", &write]);
    a.signal_group("STOP");
    wait_holder(&ns, "l", "b").await;
    b.wait_output("b wrote", "wrote=").await;
    let cms: Api<ConfigMap> = ns.api();
    let stored = cms.get("report").await.unwrap();
    let b_token: i64 = stored.metadata.annotations.as_ref().unwrap()["leasehold.dev/fencing-token"].parse().unwrap();
    assert_eq!(b_token, a_token + 1);

    // A resumes. Its write with its old token is rejected by the API server...
    a.signal_group("CONT");
    let out = std::process::Command::new(crate::support::kubectl())
        .env("KUBECONFIG", &ns.kubeconfig)
        .args(["-n", &ns.ns, &as_writer, "annotate", "cm", "report", "--overwrite"])
        .arg(format!("leasehold.dev/fencing-token={a_token}"))
        .arg("written-by=a")
        .output()
        .unwrap();
    assert!(!out.status.success(), "A's late write must be rejected");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stale fencing token"), "{err}");
    assert_eq!(cms.get("report").await.unwrap().metadata.annotations.unwrap()["written-by"], "b");
    // ...and A's `leasehold lock` notices it cannot renew, stops its command and exits 5.
    assert_eq!(a.wait_exit().await, 5, "log:\n{}", a.output());
    assert!(a.output().contains("lost lock"), "{}", a.output());
    // On its way out A releases; it no longer holds, so the owner-verified release is refused
    // and changes nothing: B keeps the lock with its token.
    assert_eq!(lease_holder(&ns, "l").await.as_deref(), Some("b"), "A's release took B's lock");
    let lease = ns.api::<Lease>().get("l").await.unwrap();
    let token = lease.metadata.annotations.and_then(|a| a.get("leasehold.dev/fencing-token").cloned());
    assert_eq!(token, Some(b_token.to_string()));
    let _ = b.child.kill();
    ns.cleanup().await;
}

#[tokio::test]
async fn paused_holder_is_fenced_off_by_postgres() {
    use crate::support::{postgres_port, psql};
    let mut ns = TestNs::new("pgzombie").await;
    ns.create_lock("l", json!({"leaseDurationSeconds": 3})).await;
    ns.start_operator(&[]);
    let db = ns.ns.replace('-', "_");
    let (ok, out) = psql("postgres", &["-c", &format!("CREATE DATABASE {db}")]);
    assert!(ok, "{out}");
    let sql = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/postgres");
    let (ok, out) = psql(&db, &["-v", "ON_ERROR_STOP=1", "-f", &format!("{sql}/fenced.sql")]);
    assert!(ok, "{out}");
    let (ok, out) = psql(&db, &["-c", "INSERT INTO reports (id, body) VALUES (1, 'nobody')"]);
    assert!(ok, "{out}");
    // The shipped fenced write, run by each holder with its own token.
    let write = format!(
        "psql -X -h 127.0.0.1 -p {port} -U postgres -d {db} -v ON_ERROR_STOP=1 -v token=$LEASEHOLD_FENCING_TOKEN \
         -v body=\"'$LEASEHOLD_HOLDER'\" -f {sql}/fenced-update.sql && echo wrote=$LEASEHOLD_FENCING_TOKEN; sleep 600",
        port = postgres_port()
    );
    let mut a = ns.lock_process("pga", &["l", "--identity", "a", "--kill-grace", "500ms", "--", "sh", "-c", &write]);
    a.wait_output("a wrote", "wrote=").await;
    assert!(a.output().contains("UPDATE 1"), "{}", a.output());
    let a_token: i64 = a.output().lines().find_map(|l| l.strip_prefix("wrote=")).unwrap().trim().parse().unwrap();

    let b = ns.lock_process("pgb", &["l", "--identity", "b", "--", "sh", "-c", &write]);
    a.signal_group("STOP");
    wait_holder(&ns, "l", "b").await;
    b.wait_output("b wrote", "wrote=").await;
    a.signal_group("CONT");
    // A's late write, with its old token, updates nothing.
    let token = a_token.to_string();
    let update = format!("{sql}/fenced-update.sql");
    let (ok, out) = psql(&db, &["-v", &format!("token={token}"), "-v", "body='a'", "-f", &update]);
    assert!(ok && out.contains("UPDATE 0"), "stale write must update 0 rows: {out}");
    let (_, row) = psql(&db, &["-At", "-c", "SELECT body || ' ' || fencing_token FROM reports WHERE id = 1"]);
    assert_eq!(row.trim(), format!("b {}", a_token + 1));
    assert_eq!(a.wait_exit().await, 5, "A stops: log:\n{}", a.output());
    drop(b);
    ns.cleanup().await;
}

#[tokio::test]
async fn interrupted_waiter_leaves_the_queue_and_a_missing_command_exits_127() {
    let mut ns = TestNs::new("interrupt").await;
    ns.create_lock("l", json!({})).await;
    ns.start_operator(&[]);
    let _holder = ns.lock_process("holder", &["l", "--identity", "holder", "--", "sleep", "600"]);
    wait_holder(&ns, "l", "holder").await;
    let mut waiter = ns.lock_process("waiter", &["l", "--identity", "waiter", "--", "true"]);
    let claims = ns.api::<DistributedLockClaim>();
    wait_until("waiter queued", WAIT, || async {
        claims.list(&Default::default()).await.is_ok_and(|l| l.items.len() == 2)
    })
    .await;
    waiter.signal("INT");
    assert_eq!(waiter.wait_exit().await, 130, "log:\n{}", waiter.output());
    wait_until("waiter's claim deleted", WAIT, || async {
        claims.list(&Default::default()).await.is_ok_and(|l| l.items.iter().all(|c| c.spec.identity == "holder"))
    })
    .await;
    drop(_holder);
    wait_until("holder gone", WAIT, || async { lease_holder(&ns, "l").await.is_none() }).await;
    let mut missing = ns.lock_process("missing", &["l", "--", "/no/such/command"]);
    assert_eq!(missing.wait_exit().await, 127, "log:\n{}", missing.output());
    ns.cleanup().await;
}

/// The lock lost under `leasehold lock` (here: the Lease edited to name someone else):
/// the command's whole process group is stopped, including a grandchild of `sh -c` that ignores
/// SIGTERM, within the renew deadline plus the default kill grace, which fit inside the lease.
#[tokio::test]
async fn a_lost_lock_stops_the_whole_command_group_even_when_it_ignores_sigterm() {
    lost_lock_stops_a_stubborn_grandchild("killgroup", false).await;
}

/// The same with a terminal as standard input: the command stays in `leasehold lock`'s process
/// group (the terminal's foreground group), so no group kill can reach its children; the
/// grandchild that ignores SIGTERM (orphaned once `sh` is killed) is found below `leasehold lock`,
/// a child subreaper, and stopped. Found by a newcomer trial: it used to run on for ever.
#[tokio::test]
async fn a_lost_lock_stops_the_command_s_children_when_standard_input_is_a_terminal() {
    lost_lock_stops_a_stubborn_grandchild("killtty", true).await;
}

/// `leasehold lock` runs `sh -c` with a grandchild that ignores SIGTERM (standard input a
/// pseudo-terminal if `terminal`); the Lease is edited to name someone else; the lock command
/// exits 5 and the grandchild is dead within 3 s of the edit (detection within the 0.4 s renew
/// period, the default kill grace of 0.5 s for a 3 s lease).
async fn lost_lock_stops_a_stubborn_grandchild(name: &str, terminal: bool) {
    let mut ns = TestNs::new(name).await;
    ns.create_lock("l", json!({"leaseDurationSeconds": 3})).await;
    ns.start_operator(&[]);
    let script = "trap '' TERM; sleep 600 & echo grandchild=$!; wait; wait";
    let args = ["l", "--identity", "stubborn", "--renew-period", "400ms", "--", "sh", "-c", script];
    let mut p = if terminal { ns.lock_process_on_terminal("tty", &args) } else { ns.lock_process("group", &args) };
    p.wait_output("command started", "grandchild=").await;
    let out = p.output();
    let pid: i32 = out.split("grandchild=").nth(1).unwrap().lines().next().unwrap().trim().parse().unwrap();
    assert!(runs(pid));
    let group = |pid: i32| nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(pid))).ok();
    let shared = group(pid) == group(p.child.id() as i32);
    assert_eq!(shared, terminal, "the command shares leasehold lock's process group exactly when on a terminal");
    let take = json!({"spec": {"holderIdentity": "intruder"}});
    ns.api::<Lease>().patch("l", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&take)).await.unwrap();
    let lost = Instant::now();
    assert_eq!(p.wait_exit().await, 5, "exit status for a lost lock; log:\n{}", p.output());
    wait_until("the grandchild is dead", Duration::from_secs(3), || async move { !runs(pid) }).await;
    assert!(lost.elapsed() < Duration::from_secs(3), "the grandchild outlived the lease: {:?}", lost.elapsed());
    ns.cleanup().await;
}

/// A waiter paused (SIGSTOP) while it is granted the lock: the operator takes the unproved
/// grant back after the lease duration and moves on; once resumed, `leasehold lock` queues again
/// (a new claim, last in line) instead of giving up, and runs its command when granted anew,
/// with a higher token. A newcomer trial found it exited 1.
#[tokio::test]
async fn a_waiter_paused_past_its_grant_queues_again() {
    let mut ns = TestNs::new("paused-waiter").await;
    ns.create_lock("l", json!({"leaseDurationSeconds": 3})).await;
    ns.start_operator(&[]);
    let a = ns.lock_process("a", &["l", "--identity", "a", "--", "sh", "-c", "echo a-runs; sleep 600"]);
    a.wait_output("a runs", "a-runs").await;
    let mut b = ns.lock_process("b", &["l", "--identity", "b", "--", "sh", "-c", "echo b=$LEASEHOLD_FENCING_TOKEN"]);
    wait_until("b queued", WAIT, || async {
        ns.kubectl(&["get", "distributedlockclaim", "-o", "name"]).contains("l-")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    b.signal("STOP");
    a.signal_group("TERM");
    // b's grant, unproved, is taken back a lease duration later (the Lease moves on to nobody).
    wait_until("b's grant is taken back", Duration::from_secs(20), || async {
        ns.kubectl(&["get", "distributedlockclaim", "-o", "jsonpath={.items[*].status.phase}"]).contains("Expired")
    })
    .await;
    b.signal("CONT");
    assert_eq!(b.wait_exit().await, 0, "b queued again and ran; log:\n{}", b.output());
    let out = b.output();
    assert!(out.contains("queueing again"), "b says why it queued again:\n{out}");
    let token: i64 = out.lines().find_map(|l| l.strip_prefix("b=")).unwrap().trim().parse().unwrap();
    assert!(token >= 3, "b's new grant comes after the one taken back (a 1, b's first 2): {token}");
    ns.cleanup().await;
}

/// A waiter whose claim is deleted while it waits gives up with an error instead of waiting
/// forever; a kill grace that does not fit inside the lease is refused before queueing.
#[tokio::test]
async fn a_waiter_whose_claim_is_deleted_gives_up_and_a_too_long_kill_grace_is_refused() {
    let mut ns = TestNs::new("claimdel").await;
    ns.create_lock("l", json!({})).await;
    ns.start_operator(&[]);
    let holder = ns.lock_process("holder", &["l", "--identity", "holder", "--", "sh", "-c", "echo ready; sleep 600"]);
    holder.wait_output("holder runs", "ready").await;
    let mut waiter = ns.lock_process("waiter", &["l", "--identity", "waiter", "--", "true"]);
    let claims = ns.api::<DistributedLockClaim>();
    let waiter_claim = || async {
        claims.list(&Default::default()).await.unwrap().items.into_iter().find(|c| c.spec.identity == "waiter")
    };
    wait_until("waiter queued", WAIT, || async { waiter_claim().await.is_some() }).await;
    let name = waiter_claim().await.unwrap().metadata.name.unwrap();
    claims.delete(&name, &DeleteParams::default()).await.unwrap();
    assert_eq!(waiter.wait_exit().await, 1, "log:\n{}", waiter.output());
    assert!(waiter.output().contains("was deleted while it waited"), "{}", waiter.output());

    let mut greedy = ns.lock_process("greedy", &["l", "--kill-grace", "10s", "--", "true"]);
    assert_eq!(greedy.wait_exit().await, 1, "log:\n{}", greedy.output());
    assert!(greedy.output().contains("must be shorter than the lock's lease duration"), "{}", greedy.output());
    let left: Vec<String> =
        claims.list(&Default::default()).await.unwrap().items.iter().map(|c| c.spec.identity.clone()).collect();
    assert_eq!(left, ["holder"], "the refused run left no claim behind");

    // On a free lock the refusal comes before any claim: the claim used to be created first
    // and cancelled at once, racing its own grant, which then held the free lock, for nobody,
    // a whole lease (found by a newcomer's walk-through).
    ns.create_lock("free", json!({})).await;
    // Every claim ever created for "free", even one deleted at once.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (seen2, api, synced) = (seen.clone(), claims.clone(), std::sync::Arc::new(tokio::sync::Notify::new()));
    let synced2 = synced.clone();
    tokio::spawn(async move {
        use futures::StreamExt;
        let mut events = kube::runtime::watcher(api, kube::runtime::watcher::Config::default()).boxed();
        while let Some(Ok(ev)) = events.next().await {
            match ev {
                kube::runtime::watcher::Event::Apply(c) | kube::runtime::watcher::Event::InitApply(c)
                    if c.spec.lock == "free" =>
                {
                    seen2.lock().unwrap().push(c.metadata.name.unwrap_or_default());
                }
                kube::runtime::watcher::Event::InitDone => synced2.notify_one(),
                _ => {}
            }
        }
    });
    synced.notified().await;
    let mut greedy = ns.lock_process("greedy-free", &["free", "--kill-grace", "10s", "--", "true"]);
    assert_eq!(greedy.wait_exit().await, 1, "log:\n{}", greedy.output());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(seen.lock().unwrap().is_empty(), "the refused run created a claim: {:?}", seen.lock().unwrap());
    let mut next = ns.lock_process("next", &["free", "--try", "--", "true"]);
    assert_eq!(next.wait_exit().await, 0, "the lock is free at once; log:\n{}", next.output());
    drop(holder);
    ns.cleanup().await;
}

/// `leasehold lock` itself SIGKILLed (as the OOM killer would) while its command runs: the
/// watchdog in the command's group stops the command (here one that ignores SIGTERM, and its
/// child) before the next holder is granted.
#[tokio::test]
async fn a_killed_leasehold_lock_does_not_leave_its_command_running() {
    killed_leasehold_lock_leaves_nothing_running("orphan", false).await;
}

/// The same with a terminal as standard input (no process group of the command's own): the
/// watchdog stops the command and every process below it, found while the command still runs
/// (`watchdog::kill_tree`). A newcomer trial found the children running beside the next holder.
#[tokio::test]
async fn a_killed_leasehold_lock_on_a_terminal_does_not_leave_the_command_s_children_running() {
    killed_leasehold_lock_leaves_nothing_running("orphan-tty", true).await;
}

async fn killed_leasehold_lock_leaves_nothing_running(name: &str, terminal: bool) {
    let mut ns = TestNs::new(name).await;
    ns.create_lock("l", json!({"leaseDurationSeconds": 3})).await;
    ns.start_operator(&[]);
    let script = "trap '' TERM; sleep 600 & echo pids=$$,$!; wait; wait";
    let args = ["l", "--identity", "a", "--", "sh", "-c", script];
    let a = if terminal { ns.lock_process_on_terminal("a", &args) } else { ns.lock_process("a", &args) };
    a.wait_output("a's command started", "pids=").await;
    let out = a.output();
    let pids: Vec<i32> = out
        .split("pids=")
        .nth(1)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .split(',')
        .map(|p| p.trim().parse().unwrap())
        .collect();
    assert!(pids.iter().all(|p| runs(*p)));
    let b = ns.lock_process("b", &["l", "--identity", "b", "--", "sh", "-c", "echo b-runs; sleep 600"]);
    a.signal("KILL"); // leasehold lock only, not its command's group
    let killed = Instant::now();
    b.wait_output("b runs", "b-runs").await;
    let dead = pids.iter().all(|p| !runs(*p));
    assert!(dead, "a's command still ran when b was granted ({:?} after the kill)", killed.elapsed());
    ns.cleanup().await;
}

/// Ctrl-Z at a terminal stops the foreground group, `leasehold lock` and its command (here a
/// SIGTSTP to that group): the watchdog, in a group of its own, is not stopped, and kills the
/// command once the renew deadline and the kill grace have passed, before the lease runs out, so
/// `fg` after the next holder was granted resumes nothing beside it. A newcomer trial saw the old
/// command write once more beside the next holder (the watchdog was stopped with it).
#[tokio::test]
async fn a_command_stopped_with_ctrl_z_past_its_deadline_is_killed_before_the_next_holder_runs() {
    let mut ns = TestNs::new("ctrl-z").await;
    ns.create_lock("l", json!({"leaseDurationSeconds": 3})).await;
    ns.start_operator(&[]);
    let mut a = ns.lock_process_on_terminal("a", &["l", "--identity", "a", "--", "sh", "-c", "echo pid=$$; sleep 600"]);
    a.wait_output("a's command started", "pid=").await;
    let out = a.output();
    let pid: i32 = out.split("pid=").nth(1).unwrap().lines().next().unwrap().trim().parse().unwrap();
    wait_holder(&ns, "l", "a").await;
    let b = ns.lock_process("b", &["l", "--identity", "b", "--", "sh", "-c", "echo b-runs; sleep 600"]);
    a.signal_group("TSTP");
    b.wait_output("b runs", "b-runs").await;
    assert!(!runs(pid), "a's stopped command was killed before b ran");
    a.signal_group("CONT");
    assert_eq!(a.wait_exit().await, 5, "a lost the lock; log:\n{}", a.output());
    ns.cleanup().await;
}

/// `leasehold release --force` (issue 13, break-glass) on a stuck `leasehold lock` holder: without
/// `--force` it refuses; with it the grant is revoked, the holder's command is stopped at its next
/// renewal (exit 5), and only after that, once the lease duration has passed, the next waiter is
/// granted with a higher token. A Warning Event on the lock names who did it. A running pod holder
/// is refused with the way to break it (delete the pod).
#[tokio::test]
async fn force_release_revokes_a_stuck_holder_before_the_next_is_granted_and_refuses_a_running_pod() {
    let mut ns = TestNs::new("forcerel").await;
    ns.create_lock("l", json!({"leaseDurationSeconds": 3})).await;
    ns.create_lock("l2", json!({})).await;
    ns.start_operator(&[]);
    let mut stuck = ns.lock_process("stuck", &["l", "--identity", "stuck", "--", "sleep", "600"]);
    wait_holder(&ns, "l", "stuck").await;
    let next = ns.lock_process(
        "next",
        &["l", "--identity", "next", "--", "sh", "-c", "echo token=$LEASEHOLD_FENCING_TOKEN; sleep 600"],
    );
    let claims = ns.api::<DistributedLockClaim>();
    wait_until("next queued", WAIT, || async {
        claims.list(&Default::default()).await.is_ok_and(|l| l.items.len() == 2)
    })
    .await;
    let stuck_token = lease_token(&ns, "l").await;

    let kc = ns.kubeconfig.clone();
    let (code, out) = crate::install::leasehold_cli(&kc, &["release", "l", "-n", &ns.ns]);
    assert_eq!(code, 2, "without --force: {out}");
    assert_eq!(lease_holder(&ns, "l").await.as_deref(), Some("stuck"), "nothing changed");
    let (code, out) = crate::install::leasehold_cli(&kc, &["release", "l", "-n", &ns.ns, "--force"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("grant of stuck (fencing token {stuck_token}) revoked by")), "{out}");

    // The stuck holder stops first; the next one is not granted before that.
    assert_eq!(stuck.wait_exit().await, 5, "the revoked holder's command is stopped: {}", stuck.output());
    assert!(!next.output().contains("token="), "granted while the revoked holder still ran: {}", next.output());
    next.wait_output("next granted", "token=").await;
    let next_token: i64 = next.output().split("token=").nth(1).unwrap().lines().next().unwrap().trim().parse().unwrap();
    assert!(next_token > stuck_token, "{next_token} > {stuck_token}");
    let events = ns.api::<k8s_openapi::api::events::v1::Event>();
    let list = events.list(&Default::default()).await.unwrap().items;
    let e = list.iter().find(|e| e.reason.as_deref() == Some("ForceReleased")).expect("a ForceReleased event");
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert!(e.note.as_deref().unwrap_or_default().contains("revoked by"), "{:?}", e.note);

    // A running pod holder: refused, with the way to break it.
    ns.create_gated_pod("p", "l2", "600s").await;
    wait_holder(&ns, "l2", "p").await;
    let (code, out) = crate::install::leasehold_cli(&kc, &["release", "l2", "-n", &ns.ns, "--force"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("kubectl delete pod p -n {}", ns.ns)), "{out}");
    assert_eq!(lease_holder(&ns, "l2").await.as_deref(), Some("p"));
    drop(next);
    ns.cleanup().await;
}

async fn lease_token(ns: &TestNs, lock: &str) -> i64 {
    let lease = ns.api::<Lease>().get(lock).await.unwrap();
    lease.metadata.annotations.unwrap_or_default()["leasehold.dev/fencing-token"].parse().unwrap()
}

/// `leasehold lock a,b` (issue 14): a lock set held by a process, all or nothing. While a
/// single-lock holder keeps b for longer than a's lease (3 s), the set's claim holds a
/// tentatively (its `status.tokens` records a, the command has not started) and keeps it by
/// renewing a's Lease; then sets in both orders and single-lock holders of a and c all run, never
/// two on one lock at once (each command takes a directory per lock with `mkdir`, which fails if
/// another holder has it), and each set command gets every lock's token.
#[tokio::test]
async fn lock_sets_run_all_or_nothing_with_a_token_per_lock() {
    let mut ns = TestNs::new("cliset").await;
    ns.create_lock("a", json!({"leaseDurationSeconds": 3})).await;
    ns.create_lock("b", json!({})).await;
    ns.create_lock("c", json!({})).await;
    ns.start_operator(&[]);
    let dir = std::env::temp_dir().join(format!("lh-cliset-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display().to_string();
    // Takes each lock's directory, holds for a while, gives them back, prints what it got.
    let script = |locks: &str| {
        format!(
            "for l in {locks}; do mkdir {d}/$l || {{ echo OVERLAP $l; exit 9; }}; done; sleep 0.3; \
             for l in {locks}; do rmdir {d}/$l; done; \
             echo got tokens=$LEASEHOLD_FENCING_TOKENS a=$LEASEHOLD_FENCING_TOKEN_A b=$LEASEHOLD_FENCING_TOKEN_B lock=$LEASEHOLD_LOCK"
        )
    };
    let mut hb = ns.lock_process("hb", &["b", "--identity", "hb", "--", "sleep", "600"]);
    wait_holder(&ns, "b", "hb").await;
    let s1 = script("a b");
    let mut first = ns.lock_process("set1", &["a,b", "--identity", "set1", "--", "sh", "-c", &s1]);
    let claims = ns.api::<DistributedLockClaim>();
    wait_until("a reserved for set1", WAIT, || async {
        claims.list(&Default::default()).await.is_ok_and(|l| {
            l.items
                .iter()
                .any(|c| c.spec.identity == "set1" && c.status.as_ref().is_some_and(|s| s.tokens.contains_key("a")))
        })
    })
    .await;
    // Longer than a's lease: set1 keeps a only by renewing it while it waits.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!first.output().contains("got"), "set1 ran without b:\n{}", first.output());
    assert_eq!(lease_holder(&ns, "a").await.as_deref(), Some("set1"), "set1 still holds a tentatively");
    let s2 = script("b a");
    let sa = script("a");
    let sc = script("c");
    let mut others = vec![
        ns.lock_process("set2", &["b,a", "--identity", "set2", "--", "sh", "-c", &s2]),
        ns.lock_process("single-a", &["a", "--identity", "single-a", "--", "sh", "-c", &sa]),
        ns.lock_process("single-c", &["c", "--identity", "single-c", "--", "sh", "-c", &sc]),
    ];
    hb.signal("TERM");
    hb.wait_exit().await;
    assert_eq!(first.wait_exit().await, 0, "set1:\n{}", first.output());
    let mut a_tokens = vec![];
    let out = first.output();
    assert!(out.contains("got tokens=a=") && out.contains(",b=") && out.contains("lock=a,b"), "{out}");
    a_tokens.push(out.split(" a=").nth(1).and_then(|r| r.split_whitespace().next()).unwrap().to_string());
    for p in &mut others {
        assert_eq!(p.wait_exit().await, 0, "{}", p.output());
    }
    let set2 = others[0].output();
    assert!(set2.contains("got tokens=b=") && set2.contains(",a="), "{set2}");
    a_tokens.push(set2.split(" a=").nth(1).and_then(|r| r.split_whitespace().next()).unwrap().to_string());
    a_tokens.dedup();
    assert_eq!(a_tokens.len(), 2, "each set holder of a got its own token of a: {a_tokens:?}");
    // Nothing left behind: every claim deleted, every Lease free.
    wait_until("claims deleted", WAIT, || async {
        claims.list(&Default::default()).await.is_ok_and(|l| l.items.is_empty())
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    ns.cleanup().await;
}

/// A `leasehold lock` whose grant is held at once though learned seconds after its claim's create
/// (its last renewal is that create: `holder::holds_at_once`), then stopped (SIGSTOP) once its
/// command and watchdog run, before its first renewal (`--renew-period 9s`): its watchdog kills the
/// command at that create + renew deadline + kill grace (lease 15 s: 10 s + 2.5 s), before the
/// operator's expiry, not 12.5 s after the watchdog's own start (the bug this guards against:
/// b is granted about 3 s after its claim's create, so that would be about 3 s too late).
#[tokio::test]
async fn a_stopped_leasehold_lock_s_watchdog_counts_from_the_grant_s_last_renewal_not_its_own_start() {
    let mut ns = TestNs::new("watchdog-late").await;
    ns.create_lock("l", json!({})).await;
    ns.start_operator(&[]);
    let a = Holder::new(ns.client.clone(), &ns.ns, "l", "a").one_shot();
    let guard = a.acquire(Some(WAIT)).await.expect("a acquires");
    let spawned = Instant::now();
    let args = ["l", "--identity", "b", "--renew-period", "9s", "--", "sh", "-c", "echo pid=$$; exec sleep 600"];
    let b = ns.lock_process("b", &args);
    let claims = ns.api::<DistributedLockClaim>();
    wait_until("b's claim exists", WAIT, || async {
        claims.list(&Default::default()).await.is_ok_and(|l| l.items.len() == 2)
    })
    .await;
    // b's claim was created (its create sent) between `spawned` and now.
    let seen = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    guard.release().await.expect("a releases");
    let pid = |out: String| out.split("pid=").nth(1)?.lines().next()?.trim().parse::<i32>().ok();
    wait_until("b's command started", WAIT, || {
        let started = pid(b.output()).is_some();
        async move { started }
    })
    .await;
    let pid = pid(b.output()).unwrap();
    // The watchdog runs in the command's process group (it is spawned after the command).
    let watchdog_runs = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let group = stat.rsplit(") ").next().and_then(|f| f.split(' ').nth(2)).and_then(|g| g.parse::<i32>().ok());
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            group == Some(pid) && String::from_utf8_lossy(&cmdline).contains("lock-watchdog")
        })
    };
    wait_until("b's watchdog runs", WAIT, || {
        let up = watchdog_runs();
        async move { up }
    })
    .await;
    b.signal("STOP"); // `leasehold lock` only: its watchdog and its command run on
    let limit = seen + Duration::from_millis(12_500 + 1_500);
    while runs(pid) && Instant::now() < limit + Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let died = Instant::now();
    assert!(!runs(pid), "b's command still runs 5 s after its deadline");
    assert!(died >= spawned + Duration::from_millis(12_500), "killed before its claim's create + 12.5 s");
    assert!(
        died <= limit,
        "b's command was killed {:?} after its claim was seen, not by its create + 12.5 s (+ 1.5 s): the watchdog counted from its own start",
        died - seen
    );
    b.signal("CONT");
    ns.cleanup().await;
}

/// Whether process `pid` runs: it exists and is not a zombie (exited, not yet reaped by anyone).
fn runs(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// The watchdog ignores a line that is not a number (it used to take it for the end of input and
/// stop the command); the end of input (`leasehold lock` gone) still stops it at once.
#[tokio::test]
async fn the_watchdog_ignores_an_unparsable_line_and_stops_the_command_at_end_of_input() {
    use std::io::Write;
    let mut target = std::process::Command::new("sleep").arg("600").spawn().unwrap();
    let pid = target.id() as i32;
    let now = leasehold::watchdog::monotonic_now().unwrap().as_nanos().to_string();
    let mut dog = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["lock-watchdog", "--target", &pid.to_string(), "--renew-deadline-ms", "60000"])
        .args(["--kill-grace-ms", "500", "--renewed-at-ns", &now])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = dog.stdin.take().unwrap();
    writeln!(stdin, "not a number").unwrap();
    writeln!(stdin, "{now}").unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(runs(pid), "an unparsable line does not stop the command");
    drop(stdin);
    let closed = Instant::now();
    wait_until("the command is stopped at end of input", Duration::from_secs(3), || async move { !runs(pid) }).await;
    assert!(closed.elapsed() < Duration::from_secs(2));
    let _ = target.kill();
    let _ = target.wait();
    let _ = dog.wait();
}

/// `leasehold lock` is the child subreaper of what its command leaves behind: an orphan (a
/// `sleep 1` whose subshell exited at once) is adopted by it, and reaped once it exits while the
/// command still runs, not left a zombie until the command ends (a review's finding: a command
/// that keeps double-forking would pile them up against the pod's PID limit).
#[tokio::test]
async fn orphans_the_command_leaves_behind_are_adopted_and_reaped_while_it_runs() {
    let mut ns = TestNs::new("reap").await;
    ns.create_lock("l", json!({})).await;
    ns.start_operator(&[]);
    let script = "(sleep 1 & echo orphan=$!); sleep 9";
    let mut p = ns.lock_process("reap", &["l", "--identity", "reaper", "--", "sh", "-c", script]);
    p.wait_output("the command forked", "orphan=").await;
    let out = p.output();
    let orphan: i32 = out.split("orphan=").nth(1).unwrap().lines().next().unwrap().trim().parse().unwrap();
    let me = p.child.id() as i32;
    let parent = move || procfs::process::Process::new(orphan).and_then(|q| q.stat()).map(|st| st.ppid).ok();
    wait_until("the orphan is adopted", Duration::from_secs(1), || async move { parent() == Some(me) }).await;
    let gone = move || !std::path::Path::new(&format!("/proc/{orphan}")).exists();
    wait_until("the orphan is reaped (not a zombie)", Duration::from_secs(7), || async move { gone() }).await;
    assert!(p.child.try_wait().unwrap().is_none(), "reaped while the command still runs");
    assert_eq!(p.wait_exit().await, 0, "log:\n{}", p.output());
    ns.cleanup().await;
}
