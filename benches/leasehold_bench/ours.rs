//! Leasehold's scenarios: the operator (release build, its own process, one namespace) and the
//! holder library (`leasehold::holder`) / `leasehold lock` CLI as a user would run them.

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::bail;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use leasehold::crd::{DistributedLock, DistributedLockClaim, OnBusy};
use leasehold::holder::Holder;
use leasehold::lock::{LOCK_ANNOTATION, SCHEDULING_GATE, TOKEN_ANNOTATION};
use serde_json::json;

use crate::env::{ApiCounts, Env, OUR_RESOURCES};
use crate::results::{ApiCost, Failover, Herd, Latency, OneShot, OpenLoop, Scale, ScaleHeld, Throughput, Traffic};
use crate::stats::{random_below, summarize};

const WAIT: Duration = Duration::from_secs(120);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Waits until the lock's status shows `waiting` waiters (and, if given, the holder's token):
/// the operator has seen every waiter, so what follows is timed from a settled state. Watches
/// (one LIST + one WATCH) rather than polls, to stay out of the API counts.
async fn wait_status(locks: &Api<DistributedLock>, name: &str, waiting: i32, token: Option<i64>) -> anyhow::Result<()> {
    let cond = move |l: Option<&DistributedLock>| {
        let Some(s) = l.and_then(|l| l.status.as_ref()) else { return false };
        let holder_ok = token.is_none_or(|tok| s.holder.as_ref().is_some_and(|h| h.token == tok));
        s.waiting >= waiting && holder_ok
    };
    tokio::time::timeout(WAIT, kube::runtime::wait::await_condition(locks.clone(), name, cond))
        .await
        .map_err(|_| anyhow::anyhow!("lock {name}: status never showed {waiting} waiters"))??;
    Ok(())
}

/// Waits until the operator (serving one lock) has reconciled a view where the lock's Lease
/// carries `token` and a waiter is queued, read from its per-lock gauges
/// (`leasehold_lock_highest_token`, `leasehold_lock_waiters`), which it sets at every reconcile.
/// The lock's status says the same but is written 250 ms later (the operator's
/// `STATUS_DEBOUNCE`), which a handover loop would wait out at every sample. Tokens only grow,
/// so a gauge left from an earlier handover cannot satisfy `token`.
async fn wait_queued(op: &crate::env::Operator, token: i64) -> anyhow::Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        let held = op.metric("leasehold_lock_highest_token").await >= token as f64;
        if held && op.metric("leasehold_lock_waiters").await >= 1.0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!("the operator never showed a waiter queued behind token {token}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Namespace + operator + locks, ready to use.
async fn setup(
    env: &Env,
    tag: &str,
    locks: &[String],
    spec: serde_json::Value,
) -> anyhow::Result<(String, crate::env::Operator)> {
    let ns = env.namespace(tag).await?;
    let op = env.start_operator(&ns, tag)?;
    op.wait_ready(Instant::now(), Duration::from_secs(60)).await?;
    if locks.len() > 50 {
        env.create_locks_paced(&ns, locks, 250, Duration::from_secs(600)).await?;
    } else {
        env.create_locks(&ns, locks, spec, 32).await?;
        env.wait_locks_ready(&ns, locks.len(), Duration::from_secs(600)).await?;
    }
    Ok((ns, op))
}

/// What the bench's own watches saw during the handover scenario.
enum Mark {
    /// The Lease changed; its holder identity.
    Lease(Instant, Option<String>),
    /// A claim of this identity shows its grant (token in status).
    ClaimGranted(Instant, String),
}

/// Scenario 1: two clients (separate connection pools, as two processes would have) ping-pong
/// one lock `n` times. A sample: `release()` called -> the waiter's `acquire()` returns a guard.
/// The bench also watches the Lease and the claims, to split each handover into phases.
/// The API requests of the ping-pong loop are counted (the run is alone on the cluster): the
/// clients' and the operator's (the bench waits on the operator's gauges, not on the API).
pub async fn handover(env: &Env, tag: &str, n: usize, hold: Duration) -> anyhow::Result<Latency> {
    let started = Instant::now();
    let (ns, mut op) = setup(env, tag, &["h".into()], json!({})).await?;
    let marks: Arc<Mutex<Vec<Mark>>> = Arc::default();
    let observer = env.new_client().await?;
    let leases: Api<Lease> = Api::namespaced(observer.clone(), &ns);
    let m = marks.clone();
    let lease_watch = tokio::spawn(
        watcher(leases, watcher::Config::default().fields("metadata.name=h")).applied_objects().for_each(move |l| {
            if let Ok(l) = l {
                let holder = l.spec.and_then(|s| s.holder_identity);
                m.lock().unwrap_or_else(|e| e.into_inner()).push(Mark::Lease(Instant::now(), holder));
            }
            futures::future::ready(())
        }),
    );
    let claims: Api<DistributedLockClaim> = Api::namespaced(observer, &ns);
    let m = marks.clone();
    let claim_watch = tokio::spawn(watcher(claims, watcher::Config::default()).applied_objects().for_each(move |c| {
        if let Ok(c) = c
            && c.status.as_ref().is_some_and(|s| s.token.is_some())
        {
            m.lock().unwrap_or_else(|e| e.into_inner()).push(Mark::ClaimGranted(Instant::now(), c.spec.identity));
        }
        futures::future::ready(())
    }));
    let mut holding = Holder::new(env.new_client().await?, &ns, "h", "client-a");
    let mut waiting = Holder::new(env.new_client().await?, &ns, "h", "client-b");
    let mut guard = holding.acquire(Some(WAIT)).await?;
    let mut samples = Vec::with_capacity(n);
    let mut spans = Vec::with_capacity(n);
    let (m0, c0) = (env.api_counts().await?, Instant::now());
    for _ in 0..n {
        let w = waiting.clone();
        let task = tokio::spawn(async move {
            let r = w.acquire(Some(WAIT)).await;
            (Instant::now(), r)
        });
        wait_queued(&op, guard.token()).await?;
        tokio::time::sleep(hold).await;
        let t0 = Instant::now();
        guard.release().await?;
        let (t1, r) = task.await?;
        guard = r?;
        samples.push(ms(t1.duration_since(t0)));
        spans.push((t0, t1, guard.identity().to_string()));
        std::mem::swap(&mut holding, &mut waiting);
    }
    let counted_s = c0.elapsed().as_secs_f64();
    let delta = env.net(&m0, &env.api_counts().await?, counted_s);
    let _ = guard.release().await;
    lease_watch.abort();
    claim_watch.abort();
    op.kill();
    env.finished(&ns);
    let marks = std::mem::take(&mut *marks.lock().unwrap_or_else(|e| e.into_inner()));
    let mut lat = Latency::new(
        format!(
            "1 lock, 2 clients ping-pong, serial; holder holds {} ms after the operator shows the waiter queued; sample = LockGuard::release() called -> waiter's Holder::acquire() returns",
            hold.as_millis()
        ),
        samples,
        0,
        started.elapsed().as_secs_f64(),
    );
    lat.phases = handover_phases(&marks, &spans);
    lat.api = Some(api_cost(
        &delta,
        &OUR_RESOURCES,
        lat.samples_ms.len(),
        2,
        counted_s,
        "locks, claims, Leases, Events, pods; both clients and the operator; without the idle cluster's own traffic",
    ));
    Ok(lat)
}

/// [`ApiCost`] of a handover run from its API counts.
pub fn api_cost(
    delta: &ApiCounts,
    resources: &[&str],
    handovers: usize,
    contenders: usize,
    window_s: f64,
    counted: &str,
) -> ApiCost {
    let per_s = window_s.max(1e-9) * contenders.max(1) as f64;
    ApiCost {
        contenders,
        window_s,
        per_handover: traffic(delta, resources, handovers as f64),
        requests_per_s_per_contender: delta.requests(resources) / per_s,
        writes_per_s_per_contender: delta.writes(resources) / per_s,
        counted: counted.into(),
    }
}

/// Splits each handover (t0 release called, t1 acquire returned, waiter identity) at the moments
/// the bench's watches saw: the Lease freed by the holder, the Lease naming the waiter (operator's
/// grant, which the waiter's own Lease watch takes as the grant), and, off the waiter's path, its
/// claim granted (operator's second write). A handover with no freed version in between is the
/// holder's own handover to the Lease's next-holder hint (issue 12): one phase to the Lease
/// naming the waiter.
fn handover_phases(marks: &[Mark], spans: &[(Instant, Instant, String)]) -> Vec<(String, crate::stats::Summary)> {
    let mut p: [Vec<f64>; 5] = Default::default();
    for (t0, t1, who) in spans {
        let freed = marks.iter().find_map(|m| match m {
            Mark::Lease(t, None) if t >= t0 && t <= t1 => Some(*t),
            _ => None,
        });
        let Some(freed) = freed else {
            let handed = marks.iter().find_map(|m| match m {
                Mark::Lease(t, Some(h)) if t >= t0 && t <= t1 && h == who => Some(*t),
                _ => None,
            });
            if let Some(handed) = handed {
                p[4].push(ms(handed.duration_since(*t0)));
                p[2].push(ms(t1.saturating_duration_since(handed)));
                let claim = marks.iter().find_map(|m| match m {
                    Mark::ClaimGranted(t, id) if *t >= handed && id == who => Some(*t),
                    _ => None,
                });
                if let Some(claim) = claim {
                    p[3].push(ms(claim.duration_since(handed)));
                }
            }
            continue;
        };
        let granted = marks.iter().find_map(|m| match m {
            Mark::Lease(t, Some(h)) if *t >= freed && h == who => Some(*t),
            _ => None,
        });
        let Some(granted) = granted else { continue };
        p[0].push(ms(freed.duration_since(*t0)));
        p[1].push(ms(granted.duration_since(freed)));
        p[2].push(ms(t1.saturating_duration_since(granted)));
        let claim = marks.iter().find_map(|m| match m {
            Mark::ClaimGranted(t, id) if *t >= granted && id == who => Some(*t),
            _ => None,
        });
        if let Some(claim) = claim {
            p[3].push(ms(claim.duration_since(granted)));
        }
    }
    let names = [
        "release() called -> watch sees the Lease freed (holder: GET + PUT Lease when it never renewed, else PUT)",
        "Lease freed -> watch sees the Lease name the waiter (operator: watch event, reconcile, PUT Lease)",
        "Lease granted -> acquire() returns (waiter: its Lease watch's event, or its claim's status if that came first)",
        "Lease granted -> watch sees the claim granted (operator: PATCH claim status; off the waiter's path)",
        "release() called -> watch sees the Lease name the waiter (holder: PUT Lease to the next-holder hint, issue 12)",
    ];
    names.iter().zip(p.iter()).map(|(n, v)| (n.to_string(), summarize(v))).collect()
}

/// A pod that waits for `lock` and runs `run_for` once started (kwok completes it).
fn gated_pod(name: &str, lock: &str, run_for: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "annotations": { LOCK_ANNOTATION: lock, "pod-complete.stage.kwok.x-k8s.io/delay": run_for },
        },
        "spec": {
            "schedulingGates": [{"name": SCHEDULING_GATE}],
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }))?)
}

/// One pod as the bench's watch saw it.
#[derive(Clone)]
struct PodSeen {
    at: Instant,
    name: String,
    phase: String,
    gated: bool,
    /// Has the fencing-token annotation.
    token: bool,
}

/// Scenario 2: `n` gated pods on one lock, each running `run_for`. A sample: the bench's pod
/// watch sees the holder `Succeeded` -> the same watch sees the next pod ungated with a token.
pub async fn pod_handover(env: &Env, n: usize, run_for: &str) -> anyhow::Result<Latency> {
    let started = Instant::now();
    let (ns, mut op) = setup(env, "pods", &["p".into()], json!({})).await?;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
    let seen: Arc<Mutex<Vec<PodSeen>>> = Arc::default();
    let seen2 = seen.clone();
    let watch = tokio::spawn(watcher(pods.clone(), watcher::Config::default()).applied_objects().for_each(move |p| {
        if let Ok(p) = p {
            let gated = p
                .spec
                .as_ref()
                .and_then(|s| s.scheduling_gates.as_ref())
                .is_some_and(|g| g.iter().any(|g| g.name == SCHEDULING_GATE));
            let phase = p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
            let token = p.annotations().contains_key(TOKEN_ANNOTATION);
            seen2.lock().unwrap_or_else(|e| e.into_inner()).push(PodSeen {
                at: Instant::now(),
                name: p.name_any(),
                phase,
                gated,
                token,
            });
        }
        futures::future::ready(())
    }));
    let names: Vec<String> = (0..n).map(|i| format!("pod-{i:04}")).collect();
    for name in &names {
        pods.create(&PostParams::default(), &gated_pod(name, "p", run_for)?).await?;
    }
    let last = names.last().cloned().unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(60 + 5 * n as u64);
    loop {
        let done =
            seen.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|s| s.name == last && s.phase == "Succeeded");
        if done {
            break;
        }
        if Instant::now() > deadline {
            bail!("pod handover: {last} did not finish in time");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    watch.abort();
    let seen = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut succeeded: HashMap<String, Instant> = HashMap::new();
    let mut granted: HashMap<String, Instant> = HashMap::new();
    for s in &seen {
        if s.phase == "Succeeded" {
            succeeded.entry(s.name.clone()).or_insert(s.at);
        }
        if !s.gated && s.token {
            granted.entry(s.name.clone()).or_insert(s.at);
        }
    }
    let mut order: Vec<(&String, &Instant)> = granted.iter().collect();
    order.sort_by_key(|(_, t)| **t);
    let mut samples = vec![];
    let mut errors = 0;
    for w in order.windows(2) {
        match succeeded.get(w[0].0) {
            Some(done) if done <= w[1].1 => samples.push(ms(w[1].1.duration_since(*done))),
            _ => errors += 1,
        }
    }
    op.kill();
    env.finished(&ns);
    Ok(Latency::new(
        format!(
            "1 lock, {n} gated pods (kwok runs each {run_for}); sample = pod watch sees holder Succeeded -> same watch sees next pod ungated with its token"
        ),
        samples,
        errors,
        started.elapsed().as_secs_f64(),
    ))
}

fn renew_time(lease: &Lease) -> Option<SystemTime> {
    let t = lease.spec.as_ref()?.renew_time.as_ref()?.0;
    Some(UNIX_EPOCH + Duration::from_nanos(u64::try_from(t.as_nanosecond()).ok()?))
}

/// Scenario 3: per lock, a `leasehold lock` CLI process holds it (15 s lease, renewing every 2 s)
/// and is SIGKILLed (with its command, the whole process group) at a random point of its renewal
/// cycle; an in-process waiter's `acquire()` returning is the takeover.
pub async fn failover(env: &Env, tag: &str, locks: usize) -> anyhow::Result<Failover> {
    let started = Instant::now();
    let names: Vec<String> = (0..locks).map(|i| format!("f-{i}")).collect();
    let (ns, mut op) = setup(env, tag, &names, json!({})).await?;
    let lease_s = 15.0;
    let client = env.new_client().await?;
    // The timeline: every Lease and claim change the bench's own watches see, and per sample the
    // kill, the last renewal and the acquire() return, on the wall clock (the operator's log has
    // the same clock), in target/bench/failover-timeline-<tag>.json; benches/failover-timeline.py
    // splits each failover into phases with the operator's log.
    let timeline = Timeline::start(&env.new_client().await?, &ns).await?;
    let mut tasks = vec![];
    for name in names {
        let timeline = timeline.clone();
        let (env_bin, kubeconfig, logs) = (env.leasehold_bin.clone(), env.kubeconfig.clone(), env.out_dir.join("logs"));
        let (client, ns) = (client.clone(), ns.clone());
        tasks.push(tokio::spawn(async move {
            let log = std::fs::File::create(logs.join(format!("failover-{name}.log")))?;
            let mut child = Command::new(&env_bin)
                .args([
                    "lock",
                    &name,
                    "--namespace",
                    &ns,
                    "--identity",
                    &format!("holder-{name}"),
                    "--",
                    "sleep",
                    "3600",
                ])
                .env("KUBECONFIG", &kubeconfig)
                .stdout(log.try_clone()?)
                .stderr(log)
                .stdin(Stdio::null())
                .process_group(0)
                .spawn()?;
            let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
            let t = Instant::now();
            loop {
                // The Lease is created at the first grant (0d8788e): absent until then.
                let l = leases.get_opt(&name).await?;
                let holder = l.as_ref().and_then(|l| l.spec.as_ref()?.holder_identity.as_deref());
                if holder == Some(&format!("holder-{name}")) {
                    break;
                }
                if t.elapsed() > WAIT {
                    bail!("holder of {name} never held it");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let waiter = Holder::new(client.clone(), &ns, &name, &format!("waiter-{name}"));
            let w = tokio::spawn(async move {
                let r = waiter.acquire(Some(Duration::from_secs(120))).await;
                (Instant::now(), SystemTime::now(), r.map(|g| (g, waiter)))
            });
            let locks_api: Api<DistributedLock> = Api::namespaced(client.clone(), &ns);
            wait_status(&locks_api, &name, 1, None).await?;
            tokio::time::sleep(random_below(Duration::from_secs(2))).await;
            let t_kill = Instant::now();
            let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
            nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL)?;
            let _ = child.wait();
            tokio::time::sleep(Duration::from_millis(300)).await;
            let last_renew = renew_time(&leases.get(&name).await?);
            let (t1, wall1, r) = w.await?;
            let (guard, waiter) = r?;
            let _ = guard.release().await;
            waiter.close().await;
            let from_renew = last_renew.and_then(|r| wall1.duration_since(r).ok()).map(ms);
            let wall_kill = wall1.checked_sub(t1.duration_since(t_kill));
            timeline.sample(json!({
                "lock": name,
                "killed": wall_kill.map(unix_s),
                "last_renewal": last_renew.map(unix_s),
                "acquired": unix_s(wall1),
                "from_renewal_ms": from_renew,
            }));
            Ok::<_, anyhow::Error>((ms(t1.duration_since(t_kill)), from_renew))
        }));
    }
    let (mut from_kill, mut from_renew, mut errors) = (vec![], vec![], 0);
    for t in tasks {
        match t.await {
            Ok(Ok((k, r))) => {
                from_kill.push(k);
                if let Some(r) = r {
                    from_renew.push(r);
                }
            }
            Ok(Err(e)) => {
                eprintln!("[bench] failover sample failed: {e:#}");
                errors += 1;
            }
            Err(_) => errors += 1,
        }
    }
    op.kill();
    timeline.write(&env.out_dir.join(format!("failover-timeline-{tag}.json")), &op.log);
    env.finished(&ns);
    Ok(Failover::new(
        format!(
            "{locks} locks at once, leaseDurationSeconds 15; holder = `leasehold lock` CLI (default timings: renews every 5 s), SIGKILL to its process group at a random point of the renewal cycle; waiter = Holder::acquire() in the bench"
        ),
        lease_s,
        from_kill,
        from_renew,
        errors,
        started.elapsed().as_secs_f64(),
    ))
}

/// Seconds since the Unix epoch.
fn unix_s(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// The failover scenario's timeline: what the bench's watches on the namespace's Leases and
/// claims saw (with the wall-clock time each event arrived) and one record per sample.
#[derive(Clone)]
struct Timeline {
    events: Arc<Mutex<Vec<serde_json::Value>>>,
    samples: Arc<Mutex<Vec<serde_json::Value>>>,
    tasks: Arc<Vec<tokio::task::JoinHandle<()>>>,
}

impl Timeline {
    async fn start(client: &kube::Client, ns: &str) -> anyhow::Result<Timeline> {
        let events = Arc::new(Mutex::new(Vec::new()));
        let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
        let claims: Api<DistributedLockClaim> = Api::namespaced(client.clone(), ns);
        let ev = events.clone();
        let lease_task =
            tokio::spawn(watcher(leases, watcher::Config::default()).applied_objects().for_each(move |r| {
                if let Ok(l) = r {
                    let spec = l.spec.clone().unwrap_or_default();
                    let renew = spec.renew_time.map(|t| t.0.as_nanosecond() as f64 / 1e9);
                    ev.lock().unwrap_or_else(|e| e.into_inner()).push(json!({
                        "seen": unix_s(SystemTime::now()), "kind": "lease", "name": l.name_any(),
                        "rv": l.resource_version(), "holder": spec.holder_identity, "renew_time": renew,
                    }));
                }
                futures::future::ready(())
            }));
        let ev = events.clone();
        let claim_task =
            tokio::spawn(watcher(claims, watcher::Config::default()).applied_objects().for_each(move |r| {
                if let Ok(c) = r {
                    let status = c.status.clone().unwrap_or_default();
                    ev.lock().unwrap_or_else(|e| e.into_inner()).push(json!({
                        "seen": unix_s(SystemTime::now()), "kind": "claim", "name": c.name_any(),
                        "rv": c.resource_version(), "lock": c.spec.lock, "identity": c.spec.identity,
                        "phase": status.phase.map(|p| format!("{p:?}")), "token": status.token,
                    }));
                }
                futures::future::ready(())
            }));
        Ok(Timeline { events, samples: Arc::default(), tasks: Arc::new(vec![lease_task, claim_task]) })
    }

    fn sample(&self, s: serde_json::Value) {
        self.samples.lock().unwrap_or_else(|e| e.into_inner()).push(s);
    }

    /// Stops the watches and writes the timeline (a failure to write is reported, not fatal).
    fn write(&self, path: &std::path::Path, operator_log: &std::path::Path) {
        for t in self.tasks.iter() {
            t.abort();
        }
        let doc = json!({
            "operator_log": operator_log,
            "samples": *self.samples.lock().unwrap_or_else(|e| e.into_inner()),
            "events": *self.events.lock().unwrap_or_else(|e| e.into_inner()),
        });
        if let Err(e) = std::fs::write(path, doc.to_string()) {
            eprintln!("[bench] could not write {}: {e}", path.display());
        }
    }
}

/// Traffic of `delta` per `events`.
pub fn traffic(delta: &ApiCounts, resources: &[&str], events: f64) -> Traffic {
    let e = events.max(1.0);
    Traffic {
        requests_per: delta.requests(resources) / e,
        writes_per: delta.writes(resources) / e,
        conflicts_per: delta.conflicts(resources) / e,
        breakdown_per: delta.breakdown(resources).into_iter().map(|(k, v)| (k, v / e)).collect(),
    }
}

/// One-shot `leasehold lock -- true` runs on one free lock, one after another, each given
/// `settle` afterwards for the operator's debounced status write (so it is counted with its run):
/// the writes of one claim -> grant -> release, every party.
pub async fn oneshot(env: &Env, tag: &str, runs: usize, settle: Duration) -> anyhow::Result<OneShot> {
    let (ns, mut op) = setup(env, tag, &["o".into()], json!({})).await?;
    let (mut walls, mut failed) = (Vec::with_capacity(runs), 0);
    let (m0, c0) = (env.api_counts().await?, Instant::now());
    for _ in 0..runs {
        let t = Instant::now();
        let out = tokio::process::Command::new(&env.leasehold_bin)
            .args(["lock", "o", "-n", &ns, "--kubeconfig"])
            .arg(&env.kubeconfig)
            .args(["--", "true"])
            .output()
            .await?;
        walls.push(ms(t.elapsed()));
        if !out.status.success() {
            failed += 1;
            eprintln!("[bench] oneshot: leasehold lock failed: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        tokio::time::sleep(settle).await;
    }
    let delta = env.net(&m0, &env.api_counts().await?, c0.elapsed().as_secs_f64());
    op.kill();
    env.finished(&ns);
    Ok(OneShot {
        method: format!(
            "`leasehold lock o -- true` on a free lock, {runs} runs one after another, {} ms apart (the operator's status settles); API requests of every party, net of the idle cluster",
            settle.as_millis()
        ),
        runs,
        failed,
        wall_ms: summarize(&walls),
        per_run: traffic(&delta, &OUR_RESOURCES, runs as f64),
    })
}

/// Aborts client tasks when a scenario returns, by an error (`?`, `bail!`) too: clients left
/// looping would load the API server through every later scenario.
struct AbortOnDrop<'a>(&'a [tokio::task::JoinHandle<()>]);

impl Drop for AbortOnDrop<'_> {
    fn drop(&mut self) {
        for t in self.0 {
            t.abort();
        }
    }
}

/// Scenario 4: `locks` locks, two clients per lock, each looping acquire -> release once every
/// client has been granted once (a barrier). The window (after `warmup`) counts the clients and
/// locks it did not serve: a fast figure from a few locks while the others starve is not
/// throughput.
pub async fn throughput(
    env: &Env,
    tag: &str,
    locks: usize,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<Throughput> {
    let setup_t = Instant::now();
    let names: Vec<String> = (0..locks).map(|i| format!("t-{i}")).collect();
    let (ns, mut op) = setup(env, tag, &names, json!({})).await?;
    let setup_s = setup_t.elapsed().as_secs_f64();
    let before = env.server_snapshot().await?;
    let clients = [env.new_client().await?, env.new_client().await?];
    let stop = Arc::new(AtomicBool::new(false));
    let grants = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    // Client errors by kind, counted only inside the measured window.
    let in_window = Arc::new(AtomicBool::new(false));
    let window_errors = Arc::new(Mutex::new(std::collections::BTreeMap::<String, u64>::new()));
    // Clients that have created their first claim: the window starts in the steady state, after
    // all of them (the first claims, their lists and watches are not counted against its grants).
    let queued = Arc::new(AtomicUsize::new(0));
    // Clients granted at least once: the steady state is every lock handing over between its two
    // clients. Each client, after its first grant and release, waits until every client has had
    // one (a barrier): the first grants (the operator's, by claim) then run on an API server that
    // the other locks' loops do not saturate yet, and the window starts with every lock looping.
    let granted_once = Arc::new(AtomicUsize::new(0));
    let all = names.len() * clients.len();
    // Grants per client (lock-major: lock k's clients at 2k, 2k+1): who was served in the window.
    let per_client: Arc<Vec<AtomicU64>> = Arc::new((0..all).map(|_| AtomicU64::new(0)).collect());
    let mut tasks = vec![];
    for name in &names {
        for (i, client) in clients.iter().enumerate() {
            let h = Holder::new(client.clone(), &ns, name, &format!("client-{i}"));
            let (stop, grants, errors) = (stop.clone(), grants.clone(), errors.clone());
            let (per_client, me) = (per_client.clone(), tasks.len());
            let (in_window, window_errors) = (in_window.clone(), window_errors.clone());
            let count = move |kind: String| {
                errors.fetch_add(1, Ordering::Relaxed);
                if in_window.load(Ordering::Relaxed) {
                    *window_errors.lock().unwrap().entry(kind).or_insert(0) += 1;
                }
            };
            let (queued, granted_once) = (queued.clone(), granted_once.clone());
            tasks.push(tokio::spawn(async move {
                let (mut first, mut first_grant) = (true, true);
                while !stop.load(Ordering::Relaxed) {
                    // Holder::acquire, in its two steps, to know when every client has queued once.
                    let acquired = match h.enqueue(OnBusy::Wait).await {
                        Ok(ticket) => {
                            if std::mem::take(&mut first) {
                                queued.fetch_add(1, Ordering::Relaxed);
                            }
                            let r = ticket.wait(Some(WAIT)).await;
                            if r.is_err() {
                                ticket.cancel().await;
                            }
                            r
                        }
                        Err(e) => Err(e),
                    };
                    match acquired {
                        Ok(g) => {
                            grants.fetch_add(1, Ordering::Relaxed);
                            per_client[me].fetch_add(1, Ordering::Relaxed);
                            if let Err(e) = g.release().await {
                                count(format!("release: {}", error_kind(&e)));
                            }
                            if std::mem::take(&mut first_grant) {
                                granted_once.fetch_add(1, Ordering::Relaxed);
                                while granted_once.load(Ordering::Relaxed) < all && !stop.load(Ordering::Relaxed) {
                                    tokio::time::sleep(Duration::from_millis(100)).await;
                                }
                            }
                        }
                        Err(e) => {
                            count(format!("acquire: {}", error_kind(&e)));
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            }));
        }
    }
    let _abort = AbortOnDrop(&tasks);
    let deadline = Instant::now() + Duration::from_secs(300);
    while queued.load(Ordering::Relaxed) < all {
        if Instant::now() > deadline {
            bail!("closed loop: only {} of {all} clients queued within 300 s", queued.load(Ordering::Relaxed));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all_queued_s = setup_t.elapsed().as_secs_f64() - setup_s;
    while granted_once.load(Ordering::Relaxed) < all {
        if Instant::now() > deadline {
            bail!(
                "closed loop: only {} of {all} clients granted once within 300 s ({} client errors; the clients granted \
                 once wait for the others, so no load competes with these grants)",
                granted_once.load(Ordering::Relaxed),
                errors.load(Ordering::Relaxed)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all_granted_s = setup_t.elapsed().as_secs_f64() - setup_s;
    tokio::time::sleep(warmup).await;
    let conflicts = "leasehold_conflicts_total";
    in_window.store(true, Ordering::Relaxed);
    let s0 = env.server_snapshot().await?;
    let counts = |v: &[AtomicU64]| v.iter().map(|c| c.load(Ordering::Relaxed)).collect::<Vec<u64>>();
    let c0 = counts(&per_client);
    let (m0, g0, og0, oc0, cpu0, t0) = (
        s0.api.clone(),
        grants.load(Ordering::Relaxed),
        op.metric("leasehold_grants_total").await,
        op.metric(conflicts).await,
        op.cpu_seconds(),
        Instant::now(),
    );
    tokio::time::sleep(window).await;
    let s1 = env.server_snapshot().await?;
    let (m1, g1, og1, oc1, cpu1) = (
        s1.api.clone(),
        grants.load(Ordering::Relaxed),
        op.metric("leasehold_grants_total").await,
        op.metric(conflicts).await,
        op.cpu_seconds(),
    );
    let c1 = counts(&per_client);
    in_window.store(false, Ordering::Relaxed);
    let window_s = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let in_window: Vec<u64> = c1.iter().zip(&c0).map(|(b, a)| b - a).collect();
    let clients_unserved = in_window.iter().filter(|g| **g == 0).count();
    let locks_unserved = in_window.chunks(clients.len()).filter(|c| c.iter().all(|g| *g == 0)).count();
    let mut per_lock: Vec<u64> = in_window.chunks(clients.len()).map(|c| c.iter().sum()).collect();
    per_lock.sort_unstable();
    let median = per_lock.get(per_lock.len() / 2).copied().unwrap_or(0);
    for t in &tasks {
        t.abort();
    }
    op.kill();
    env.finished(&ns);
    let g = g1 - g0;
    let net = env.net(&m0, &m1, window_s);
    let operator_grants = og1 - og0;
    Ok(Throughput {
        writes_per_operator_grant: net.writes(&OUR_RESOURCES) / operator_grants.max(1.0),
        operator_conflicts: oc1 - oc0,
        errors_in_window: window_errors.lock().unwrap().clone(),
        locks,
        clients_per_lock: 2,
        window_s,
        grants: g,
        grants_per_s: g as f64 / window_s,
        operator_grants,
        traffic: traffic(&net, &OUR_RESOURCES, g as f64),
        operator_cpu_cores: cpu0.zip(cpu1).map(|(a, b)| (b - a) / window_s).unwrap_or(f64::NAN),
        errors: errors.load(Ordering::Relaxed),
        setup_s,
        all_queued_s,
        all_granted_s,
        clients_unserved,
        locks_unserved,
        grants_per_lock_p50_max: (median, per_lock.last().copied().unwrap_or(0)),
        load: Some(env.server_load(&s0, &s1, Some(&before))),
    })
}

/// One open-loop cycle, as recorded.
struct Cycle {
    /// When it arrived (acquire() called).
    arrived: Instant,
    /// When acquire() returned a guard.
    granted: Option<Instant>,
    /// The error, if acquire() or release() failed.
    error: Option<String>,
}

/// Scenario 4b: open loop below saturation. A fresh namespace with `locks` locks; one
/// acquire/hold/release cycle arrives every 1/`rate` s on the next lock round-robin (so its lock
/// is free), each on its own task, whether or not the earlier ones finished (two clients,
/// alternating). After `warmup`, a `window` is measured: achieved grants/s, grant latency
/// (acquire() called -> returned) of the arrivals in the window, client errors by kind, API
/// and etcd write rates, 5xx answers and open watches.
pub async fn throughput_open(
    env: &Env,
    locks: usize,
    rate: f64,
    offered_from: String,
    hold: Duration,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<OpenLoop> {
    if !(rate.is_finite() && rate > 0.0) {
        bail!("open loop: no offered rate ({rate})");
    }
    let names: Vec<String> = (0..locks).map(|i| format!("o-{i}")).collect();
    let (ns, mut op) = setup(env, "open-loop", &names, json!({})).await?;
    let before = env.server_snapshot().await?;
    let clients = [env.new_client().await?, env.new_client().await?];
    let cycles: Arc<Mutex<Vec<Cycle>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let (in_flight, max_in_flight) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let arrivals = {
        let (cycles, stop, ns) = (cycles.clone(), stop.clone(), ns.clone());
        let (in_flight, max_in_flight) = (in_flight.clone(), max_in_flight.clone());
        tokio::spawn(async move {
            // Burst: a late tick is made up at once, so the arrival rate stays the offered one.
            let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
            let mut k = 0usize;
            while !stop.load(Ordering::Relaxed) {
                ticks.tick().await;
                let h = Holder::new(clients[k % 2].clone(), &ns, &names[k % names.len()], &format!("open-{k}"));
                let (cycles, in_flight, max_in_flight) = (cycles.clone(), in_flight.clone(), max_in_flight.clone());
                let now = in_flight.fetch_add(1, Ordering::Relaxed) + 1;
                max_in_flight.fetch_max(now, Ordering::Relaxed);
                tokio::spawn(async move {
                    let arrived = Instant::now();
                    let mut c = Cycle { arrived, granted: None, error: None };
                    match h.acquire(Some(WAIT)).await {
                        Ok(g) => {
                            c.granted = Some(Instant::now());
                            tokio::time::sleep(hold).await;
                            if let Err(e) = g.release().await {
                                c.error = Some(format!("release: {}", error_kind(&e)));
                            }
                            // An arrival is a process that acquires once: it closes its claim.
                            h.close().await;
                        }
                        Err(e) => c.error = Some(format!("acquire: {}", error_kind(&e))),
                    }
                    cycles.lock().unwrap_or_else(|e| e.into_inner()).push(c);
                    in_flight.fetch_sub(1, Ordering::Relaxed);
                });
                k += 1;
            }
        })
    };
    tokio::time::sleep(warmup).await;
    max_in_flight.store(in_flight.load(Ordering::Relaxed), Ordering::Relaxed);
    let (s0, cpu0, t0) = (env.server_snapshot().await?, op.cpu_seconds(), Instant::now());
    tokio::time::sleep(window).await;
    let (s1, cpu1, t1) = (env.server_snapshot().await?, op.cpu_seconds(), Instant::now());
    stop.store(true, Ordering::Relaxed);
    let _ = arrivals.await;
    // Let the cycles of the window finish (each is bounded by acquire()'s 120 s wait).
    let drain = Instant::now();
    while in_flight.load(Ordering::Relaxed) > 0 && drain.elapsed() < WAIT + Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let unfinished = in_flight.load(Ordering::Relaxed);
    op.kill();
    env.finished(&ns);
    let window_s = t1.duration_since(t0).as_secs_f64();
    let cycles = std::mem::take(&mut *cycles.lock().unwrap_or_else(|e| e.into_inner()));
    let in_window = |t: Instant| t >= t0 && t < t1;
    let arrived: Vec<&Cycle> = cycles.iter().filter(|c| in_window(c.arrived)).collect();
    let grants = cycles.iter().filter(|c| c.granted.is_some_and(in_window)).count() as u64;
    let samples: Vec<f64> = arrived.iter().filter_map(|c| c.granted.map(|g| ms(g.duration_since(c.arrived)))).collect();
    let mut errors_in_window = std::collections::BTreeMap::new();
    for c in &arrived {
        if let Some(e) = &c.error {
            *errors_in_window.entry(e.clone()).or_insert(0) += 1;
        }
    }
    if unfinished > 0 {
        errors_in_window.insert("unfinished 130 s after the window".into(), unfinished);
    }
    let net = env.net(&s0.api, &s1.api, window_s);
    Ok(OpenLoop {
        locks,
        offered_per_s: rate,
        offered_from,
        hold_ms: hold.as_millis() as u64,
        window_s,
        arrivals: arrived.len() as u64,
        grants,
        grants_per_s: grants as f64 / window_s,
        grant_latency: summarize(&samples),
        samples_ms: samples,
        unfinished,
        max_in_flight: max_in_flight.load(Ordering::Relaxed),
        errors_in_window,
        traffic: traffic(&net, &OUR_RESOURCES, grants as f64),
        operator_cpu_cores: cpu0.zip(cpu1).map(|(a, b)| (b - a) / window_s).unwrap_or(f64::NAN),
        load: env.server_load(&s0, &s1, Some(&before)),
    })
}

/// A holder error's kind: its variant name, and for an API error the operation that failed.
fn error_kind(e: &leasehold::holder::HolderError) -> String {
    let debug = format!("{e:?}");
    let variant = debug.split(['(', ' ', '{']).next().unwrap_or_default().to_string();
    match e {
        leasehold::holder::HolderError::Kube { op, source } => {
            let code = match source {
                kube::Error::Api(s) => s.code.to_string(),
                _ => "transport".into(),
            };
            format!("{variant} {op} {code}")
        }
        _ => variant,
    }
}

/// Handover samples and overlaps from (acquired, released) intervals (any order).
pub fn handovers_of(mut grants: Vec<(Instant, Instant)>) -> (Vec<f64>, u64) {
    grants.sort();
    let mut samples = vec![];
    let mut overlaps = 0;
    for i in 1..grants.len() {
        let acq = grants[i].0;
        if let Some(r) = grants[..i].iter().map(|(_, r)| *r).filter(|r| *r <= acq).max() {
            samples.push(ms(acq.duration_since(r)));
        }
        if grants[..i].iter().any(|(a, r)| *a <= acq && *r > acq) {
            overlaps += 1;
        }
    }
    (samples, overlaps)
}

/// Scenario 5: `waiters` holders queue on one held lock; each takes it once, holds `hold`,
/// releases. API traffic is counted from just before the waiters join until the last release.
pub async fn herd(env: &Env, waiters: usize, hold: Duration) -> anyhow::Result<Herd> {
    let (ns, mut op) = setup(env, "herd", &["herd".into()], json!({})).await?;
    let locks: Api<DistributedLock> = Api::namespaced(env.client.clone(), &ns);
    let first = Holder::new(env.new_client().await?, &ns, "herd", "first");
    let first_guard = first.acquire(Some(WAIT)).await?;
    let first_at = Instant::now();
    let client = env.new_client().await?;
    let m0 = env.api_counts().await?;
    let started = Instant::now();
    let grants: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = vec![];
    for i in 0..waiters {
        let h = Holder::new(client.clone(), &ns, "herd", &format!("waiter-{i}"));
        let (grants, errors) = (grants.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            match h.acquire(Some(Duration::from_secs(600))).await {
                Ok(g) => {
                    let t = Instant::now();
                    tokio::time::sleep(hold).await;
                    let r = Instant::now();
                    if g.release().await.is_err() {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    h.close().await;
                    grants.lock().unwrap_or_else(|e| e.into_inner()).push((t, r));
                }
                Err(_) => {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    wait_status(&locks, "herd", waiters as i32, Some(first_guard.token())).await?;
    let first_release = Instant::now();
    first_guard.release().await?;
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(600), t).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let m1 = env.api_counts().await?;
    op.kill();
    env.finished(&ns);
    let mut g = grants.lock().unwrap_or_else(|e| e.into_inner()).clone();
    g.push((first_at, first_release));
    let handovers = g.len() - 1;
    let (samples, overlaps) = handovers_of(g);
    Ok(Herd {
        waiters,
        handovers,
        elapsed_s: elapsed,
        traffic: traffic(&env.net(&m0, &m1, elapsed), &OUR_RESOURCES, handovers as f64),
        overlaps,
        handover: summarize(&samples),
        errors: errors.load(Ordering::Relaxed),
        method: format!(
            "{waiters} Holder::acquire() calls (one client) queue behind a holder; each holds {} ms, releases; until all had it",
            hold.as_millis()
        ),
    })
}

/// Every change (watch event after the initial list) to the leasehold objects of a namespace:
/// locks, claims, Leases, Events. Exact, unlike the API server's counters, which cannot tell
/// namespaces apart.
struct Changes {
    log: Arc<Mutex<Vec<(Instant, &'static str)>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Changes {
    async fn start(client: &kube::Client, ns: &str) -> anyhow::Result<Changes> {
        let log: Arc<Mutex<Vec<(Instant, &'static str)>>> = Arc::default();
        let synced = Arc::new(AtomicU64::new(0));
        let tasks = vec![
            count_changes(Api::<DistributedLock>::namespaced(client.clone(), ns), "distributedlocks", &log, &synced),
            count_changes(
                Api::<DistributedLockClaim>::namespaced(client.clone(), ns),
                "distributedlockclaims",
                &log,
                &synced,
            ),
            count_changes(Api::<Lease>::namespaced(client.clone(), ns), "leases", &log, &synced),
            count_changes(
                Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), ns),
                "events",
                &log,
                &synced,
            ),
        ];
        let t = Instant::now();
        while synced.load(Ordering::Relaxed) < 4 {
            if t.elapsed() > WAIT {
                bail!("change watches did not sync");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Changes { log, tasks })
    }

    /// Changes in [from, to), by kind.
    fn between(&self, from: Instant, to: Instant) -> Vec<(String, f64)> {
        let mut m: std::collections::BTreeMap<&str, f64> = Default::default();
        for (t, k) in self.log.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            if *t >= from && *t < to {
                *m.entry(k).or_insert(0.0) += 1.0;
            }
        }
        m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }
}

impl Drop for Changes {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn count_changes<K>(
    api: Api<K>,
    kind: &'static str,
    log: &Arc<Mutex<Vec<(Instant, &'static str)>>>,
    synced: &Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let (log, synced) = (log.clone(), synced.clone());
    tokio::spawn(watcher(api, watcher::Config::default()).for_each(move |ev| {
        match ev {
            Ok(watcher::Event::InitDone) => {
                synced.fetch_add(1, Ordering::Relaxed);
            }
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {
                log.lock().unwrap_or_else(|e| e.into_inner()).push((Instant::now(), kind));
            }
            _ => {}
        }
        futures::future::ready(())
    }))
}

fn total(v: &[(String, f64)]) -> f64 {
    v.iter().map(|(_, n)| n).sum()
}

/// Scenario 6, first part: `n` locks created and taken into service by an operator (each gets
/// its Lease and status), then that operator is stopped. By default a burst (every lock at
/// once, [`Burst`]); with `BENCH_SCALE_BATCH` below the lock count, paced batches. Runs alone
/// (it saturates the API server's writes).
pub struct ScaleSetup {
    ns: String,
    n: usize,
    create_s: f64,
    cold_s: f64,
    cold: ApiCounts,
    burst: Option<Burst>,
}

/// The burst (every lock created at once, not paced), as measured during [`scale_setup`].
pub struct Burst {
    /// First create sent → last create answered, seconds.
    pub created_s: f64,
    /// First create sent → every lock `Ready=True` for its generation, seconds.
    pub all_ready_s: f64,
    /// Operator RSS after the burst settled / its peak (VmHWM) since start, MiB.
    pub rss_settled_mib: f64,
    pub rss_peak_mib: f64,
    /// Requests answered 5xx / 429 during the burst (every client; apiserver_request_total).
    pub server_errors: f64,
    pub throttled: f64,
    /// Warning Events in the namespace at the end of the burst.
    pub warning_events: usize,
    /// Operator CPU seconds from the first create until settled.
    pub cpu_s: f64,
}

/// Waits until all `n` locks in `ns` show `Ready=True` for their current generation; the time
/// since `t`. A timeout is an error.
async fn wait_all_ready(env: &Env, ns: &str, n: usize, t: Instant, timeout: Duration) -> anyhow::Result<Duration> {
    let api: Api<DistributedLock> = Api::namespaced(env.client.clone(), ns);
    loop {
        let ready = api
            .list(&kube::api::ListParams::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|x| {
                        x.status.as_ref().is_some_and(|s| {
                            s.conditions.iter().any(|c| {
                                c.type_ == "Ready"
                                    && c.status == "True"
                                    && c.observed_generation == x.metadata.generation
                            })
                        })
                    })
                    .count()
            })
            .unwrap_or(0);
        if ready >= n {
            return Ok(t.elapsed());
        }
        if t.elapsed() > timeout {
            bail!("only {ready} of {n} locks Ready after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// See [`ScaleSetup`].
pub async fn scale_setup(env: &Env, n: usize, batch: usize, budget: Duration) -> anyhow::Result<ScaleSetup> {
    let ns = env.namespace("scale").await?;
    let names: Vec<String> = (0..n).map(|i| format!("s-{i:05}")).collect();
    let m0 = env.api_counts().await?;
    let t = Instant::now();
    let mut op = env.start_operator(&ns, "scale-cold")?;
    op.wait_ready(t, Duration::from_secs(300)).await?;
    let mut burst = None;
    let n = if batch >= n {
        // A burst: every lock at once (32 creates in flight, as fast as the API server takes
        // them), as a GitOps sync or a namespace restore would create them.
        let (b0, cpu0, a0) = (Instant::now(), op.cpu_seconds(), env.api_counts().await?);
        env.create_locks(&ns, &names, json!({}), 32).await?;
        let created_s = b0.elapsed().as_secs_f64();
        let all_ready_s = wait_all_ready(env, &ns, n, b0, budget).await?.as_secs_f64();
        wait_settled(env, &["distributedlocks", "leases"], Duration::from_secs(300)).await?;
        let (rss, hwm) = op.memory_kib().unwrap_or((0, 0));
        let d = env.api_counts().await?.since(&a0);
        let errors = |p: &dyn Fn(&str) -> bool| d.0.iter().filter(|((_, _, c), _)| p(c)).map(|(_, v)| v).sum::<f64>();
        let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.client.clone(), &ns);
        let warning_events = events
            .list(&kube::api::ListParams::default())
            .await?
            .items
            .iter()
            .filter(|e| e.type_.as_deref() == Some("Warning"))
            .count();
        let b = Burst {
            created_s,
            all_ready_s,
            rss_settled_mib: rss as f64 / 1024.0,
            rss_peak_mib: hwm as f64 / 1024.0,
            server_errors: errors(&|c| c.starts_with('5')),
            throttled: errors(&|c| c == "429"),
            warning_events,
            cpu_s: cpu0.zip(op.cpu_seconds()).map(|(a, b)| b - a).unwrap_or(f64::NAN),
        };
        eprintln!(
            "[bench] scale: burst of {n} locks: created in {created_s:.1} s, all Ready in {all_ready_s:.1} s, \
             RSS {:.1} MiB (peak {:.1}), {} 5xx, {} Warning Events",
            b.rss_settled_mib,
            b.rss_peak_mib,
            b.server_errors + 0.0,
            b.warning_events
        );
        burst = Some(b);
        n
    } else {
        env.create_locks_paced(&ns, &names, batch, budget).await?
    };
    // Until the last status writes have landed.
    let settled = wait_settled(env, &["distributedlocks"], Duration::from_secs(300)).await?;
    let cold_s = settled.duration_since(t).as_secs_f64();
    let cold = env.net(&m0, &env.api_counts().await?, t.elapsed().as_secs_f64());
    eprintln!("[bench] scale: {n} locks created and taken into service ({batch} at a time) in {cold_s:.1} s");
    op.kill();
    Ok(ScaleSetup { ns, n, create_s: cold_s, cold_s, cold, burst })
}

/// Scenario 6, second part: with every lock in service and no operator, a window without any
/// operator (must show 0 changes), then an operator restart: time to /readyz, memory, changes
/// in the first 15 s and in an idle window of `idle`.
pub async fn scale(env: &Env, setup: ScaleSetup, idle: Duration) -> anyhow::Result<Scale> {
    let ScaleSetup { ns, n, create_s, cold_s, cold, burst } = setup;
    let leasehold_resources = ["distributedlocks", "distributedlockclaims", "leases", "events"];
    // Exact change counts from here on; first a window without any operator (must be 0).
    let changes = Changes::start(&env.new_client().await?, &ns).await?;
    let baseline_window = Duration::from_secs(10);
    let b0 = Instant::now();
    tokio::time::sleep(baseline_window).await;
    let baseline = total(&changes.between(b0, Instant::now())) / baseline_window.as_secs_f64();

    // Restart with everything in service.
    let t = Instant::now();
    let mut op = env.start_operator(&ns, "scale")?;
    let ready = op.wait_ready(t, Duration::from_secs(300)).await?;
    let rss_ready = op.memory_kib().map(|m| m.0).unwrap_or(0);
    let restart_window = Duration::from_secs(15);
    tokio::time::sleep(restart_window.saturating_sub(t.elapsed())).await;
    let i0 = Instant::now();
    let restart = changes.between(t, i0);
    let (cpu0, a0) = (op.cpu_seconds(), env.api_counts().await?);
    tokio::time::sleep(idle).await;
    let i1 = Instant::now();
    let (cpu1, a1) = (op.cpu_seconds(), env.api_counts().await?);
    let idle_changes = changes.between(i0, i1);
    let (rss, hwm) = op.memory_kib().unwrap_or((0, 0));
    op.kill();
    drop(changes);
    env.finished(&ns);
    let per_s = i1.duration_since(i0).as_secs_f64();
    let idle_api = env.net(&a0, &a1, per_s);
    let mut idle_breakdown: Vec<(String, f64)> =
        idle_changes.iter().map(|(k, v)| (format!("{k} changed (watch)"), v / per_s)).collect();
    idle_breakdown.extend(
        idle_api
            .breakdown(&leasehold_resources)
            .into_iter()
            .map(|(k, v)| (format!("{k} (API server, net of background)"), v / per_s)),
    );
    Ok(Scale {
        locks: n,
        create_s,
        cold_take_into_service_s: cold_s,
        cold_writes_per_lock: cold.writes(&leasehold_resources) / n as f64,
        ready_s: ready.as_secs_f64(),
        rss_ready_mib: rss_ready as f64 / 1024.0,
        rss_settled_mib: rss as f64 / 1024.0,
        rss_peak_mib: hwm as f64 / 1024.0,
        restart_writes: total(&restart),
        restart_window_s: restart_window.as_secs_f64(),
        idle_writes_per_s: total(&idle_changes) / per_s,
        baseline_writes_per_s: baseline,
        idle_window_s: per_s,
        idle_breakdown,
        cold_breakdown: cold.breakdown(&leasehold_resources).into_iter().map(|(k, v)| (k, v / n as f64)).collect(),
        idle_cpu_s: cpu0.zip(cpu1).map(|(a, b)| b - a).unwrap_or(f64::NAN),
        burst_created_s: burst.as_ref().map(|b| b.created_s),
        burst_all_ready_s: burst.as_ref().map(|b| b.all_ready_s),
        burst_rss_settled_mib: burst.as_ref().map(|b| b.rss_settled_mib),
        burst_rss_peak_mib: burst.as_ref().map(|b| b.rss_peak_mib),
        burst_server_errors: burst.as_ref().map(|b| b.server_errors),
        burst_throttled: burst.as_ref().map(|b| b.throttled),
        burst_warning_events: burst.as_ref().map(|b| b.warning_events),
        burst_operator_cpu_s: burst.as_ref().map(|b| b.cpu_s),
        held: None,
    })
}

/// Waits until 2 s pass without writes to `resources` (the operator has caught up); returns
/// when the last busy 2 s window ended.
async fn wait_settled(env: &Env, resources: &[&str], timeout: Duration) -> anyhow::Result<Instant> {
    let t = Instant::now();
    let mut last = env.api_counts().await?;
    let mut last_busy = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = env.api_counts().await?;
        if now.since(&last).writes(resources) == 0.0 || t.elapsed() > timeout {
            return Ok(last_busy);
        }
        last_busy = Instant::now();
        last = now;
    }
}

impl ScaleSetup {
    /// The namespace with the locks.
    pub fn ns(&self) -> String {
        self.ns.clone()
    }
}

/// Polls until `ok` holds (every 500 ms); a timeout is an error naming `what` and the last value.
async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut ok: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<(bool, String)>>,
{
    let t = Instant::now();
    loop {
        let (done, state) = ok().await?;
        if done {
            return Ok(());
        }
        if t.elapsed() > timeout {
            bail!("{what}: not reached after {timeout:?} ({state})");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Sizes of [`scale_held`].
pub struct HeldSizes {
    pub pod_holders: usize,
    pub claim_holders: usize,
    pub pod_waiters: usize,
    pub settle: Duration,
    pub window: Duration,
    pub timeout: Duration,
}

/// Scenario 6b: in the scale namespace (every lock in service, no operator running), a new
/// operator; `pod_holders` locks taken by gated pods that kwok runs (one pod per lock, running an
/// hour), `claim_holders` further locks by `Holder::acquire()` guards with default timings that
/// keep renewing, and `pod_waiters` gated pods queued behind pod-held locks. Once all are in place
/// and `settle` has passed, a steady `window`: operator RSS, CPU, reconciles/s, API and etcd
/// write rates, open watches.
pub async fn scale_held(env: &Env, ns: &str, locks: usize, z: HeldSizes) -> anyhow::Result<ScaleHeld> {
    if z.pod_holders + z.claim_holders > locks || z.pod_waiters > z.pod_holders {
        bail!(
            "scale held: {} pod + {} claim holders, {} waiters do not fit {locks} locks",
            z.pod_holders,
            z.claim_holders,
            z.pod_waiters
        );
    }
    let lock = |i: usize| format!("s-{i:05}");
    let (pod_holders, claim_holders, pod_waiters) = (z.pod_holders, z.claim_holders, z.pod_waiters);
    let before = env.server_snapshot().await?;
    let t = Instant::now();
    let mut op = env.start_operator(ns, "scale-held")?;
    op.wait_ready(t, Duration::from_secs(300)).await?;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), ns);
    let create_pods = |names: Vec<(String, String)>| {
        let pods = pods.clone();
        async move {
            let results: Vec<anyhow::Result<()>> = futures::stream::iter(names)
                .map(|(name, lock)| {
                    let pods = pods.clone();
                    async move {
                        pods.create(&PostParams::default(), &gated_pod(&name, &lock, "1h")?).await?;
                        Ok(())
                    }
                })
                .buffer_unordered(32)
                .collect()
                .await;
            results.into_iter().collect::<anyhow::Result<Vec<()>>>()
        }
    };
    create_pods((0..z.pod_holders).map(|i| (format!("holder-{i:05}"), lock(i))).collect()).await?;
    let held_metric = "leasehold_locks_held";
    let (opr, podsr) = (&op, &pods);
    wait_until("pod holders granted", z.timeout, || async move {
        let held = opr.metric(held_metric).await;
        Ok((held >= pod_holders as f64, format!("{held} locks held")))
    })
    .await?;
    // Waiters behind pod-held locks, and renewing claims on other locks.
    create_pods((0..z.pod_waiters).map(|i| (format!("waiter-{i:05}"), lock(i))).collect()).await?;
    let clients = [env.new_client().await?, env.new_client().await?, env.new_client().await?, env.new_client().await?];
    let guards: Vec<leasehold::holder::LockGuard> = futures::stream::iter(0..z.claim_holders)
        .map(|i| {
            let h = Holder::new(clients[i % 4].clone(), ns, &lock(z.pod_holders + i), &format!("renewer-{i}"));
            async move { h.acquire(Some(WAIT)).await }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    wait_until("every holder and waiter in place", z.timeout, || async move {
        let held = opr.metric(held_metric).await;
        let waiting = opr.metric("leasehold_waiters").await;
        let running = count_running(podsr).await?;
        Ok((
            held >= (pod_holders + claim_holders) as f64 && waiting >= pod_waiters as f64 && running >= pod_holders,
            format!("{held} locks held, {waiting} waiters, {running} pods Running"),
        ))
    })
    .await?;
    let setup_s = t.elapsed().as_secs_f64();
    eprintln!("[bench] scale held: every holder and waiter in place after {setup_s:.1} s; settling {:?}", z.settle);
    tokio::time::sleep(z.settle).await;
    let pods_running = count_running(&pods).await?;
    let (locks_held_metric, waiters_metric) = (op.metric(held_metric).await, op.metric("leasehold_waiters").await);
    let reconciles = "leasehold_reconcile_duration_seconds_count";
    let errors = "leasehold_reconcile_errors_total";
    let conflicts = "leasehold_conflicts_total";
    let grants = "leasehold_grants_total";
    let rss_start = op.memory_kib().map_or(0, |m| m.0);
    // The server's counters, the operator's CPU seconds and its reconcile, error, conflict and
    // grant counters, read at the window's start and end.
    let sample = || async {
        anyhow::Ok((
            env.server_snapshot().await?,
            op.cpu_seconds(),
            op.metric(reconciles).await,
            op.metric(errors).await,
            op.metric(conflicts).await,
            op.metric(grants).await,
        ))
    };
    let (s0, cpu0, r0, e0, c0, g0) = sample().await?;
    let mut rss_max = rss_start;
    let end = Instant::now() + z.window;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(1).min(end.saturating_duration_since(Instant::now()))).await;
        rss_max = rss_max.max(op.memory_kib().map_or(0, |m| m.0));
    }
    let (s1, cpu1, r1, e1, c1, g1) = sample().await?;
    let (rss_end, hwm) = op.memory_kib().unwrap_or((0, 0));
    let claims_lost = guards.iter().filter(|g| g.is_lost()).count();
    let window_s = s1.at.duration_since(s0.at).as_secs_f64();
    let net = env.net(&s0.api, &s1.api, window_s);
    let writes_breakdown_per_s = net
        .breakdown(&OUR_RESOURCES)
        .into_iter()
        .filter(|(k, _)| crate::env::WRITE_VERBS.iter().any(|v| k.split(' ').nth(1) == Some(*v)))
        .map(|(k, v)| (k, v / window_s))
        .collect();
    // Release the claims (the namespace, pods included, is deleted at the end of the run).
    futures::stream::iter(guards)
        .for_each_concurrent(32, |g| async move {
            let _ = g.release().await;
        })
        .await;
    op.kill();
    let mib = |k: u64| k as f64 / 1024.0;
    Ok(ScaleHeld {
        locks,
        pod_holders: z.pod_holders,
        claim_holders: z.claim_holders,
        pod_waiters: z.pod_waiters,
        setup_s,
        pods_running,
        locks_held_metric,
        waiters_metric,
        window_s,
        rss_start_mib: mib(rss_start),
        rss_end_mib: mib(rss_end),
        rss_window_max_mib: mib(rss_max.max(rss_end)),
        rss_peak_mib: mib(hwm),
        operator_cpu_cores: cpu0.zip(cpu1).map(|(a, b)| (b - a) / window_s).unwrap_or(f64::NAN),
        reconciles_per_s: (r1 - r0) / window_s,
        reconcile_errors: e1 - e0,
        grants: g1 - g0,
        operator_conflicts: c1 - c0,
        claims_lost,
        load: env.server_load(&s0, &s1, Some(&before)),
        writes_breakdown_per_s,
    })
}

/// Pods Running and not gated in the namespace.
async fn count_running(pods: &Api<Pod>) -> anyhow::Result<usize> {
    Ok(pods
        .list(&kube::api::ListParams::default())
        .await?
        .items
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count())
}

/// A semaphore under contention: one lock with `spec.maxHolders: max_holders` and `clients`
/// holder-library clients (one connection pool, as one service with many workers), each doing
/// `rounds` cycles of `acquire()`, hold `hold`, `release()` (a new claim per cycle, at the back of
/// the queue). The first `max_holders` grants wait until the lock's status shows every other
/// client queued, so the measured cycles start from a full semaphore with a full queue. Counted:
/// every grant and the API requests from before the first claim to the last release.
pub async fn semaphore(
    env: &Env,
    max_holders: usize,
    clients: usize,
    rounds: usize,
    hold: Duration,
) -> anyhow::Result<crate::results::Semaphore> {
    let (ns, mut op) = setup(env, "semaphore", &["sem".into()], json!({"maxHolders": max_holders})).await?;
    let locks: Api<DistributedLock> = Api::namespaced(env.client.clone(), &ns);
    let client = env.new_client().await?;
    let (gate_tx, gate_rx) = tokio::sync::watch::channel(false);
    // Per grant: (acquire called, acquire returned, release called).
    let cycles: Arc<Mutex<Vec<(Instant, Instant, Instant)>>> = Arc::default();
    let errors = Arc::new(AtomicU64::new(0));
    let m0 = env.api_counts().await?;
    let started = Instant::now();
    let mut tasks = vec![];
    for i in 0..clients {
        let h = Holder::new(client.clone(), &ns, "sem", &format!("worker-{i}"));
        let (cycles, errors, mut gate) = (cycles.clone(), errors.clone(), gate_rx.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let called = Instant::now();
                let guard = match h.acquire(Some(Duration::from_secs(600))).await {
                    Ok(g) => g,
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                };
                let granted = Instant::now();
                // The first holders wait for the full queue (the gate), not counted as holding.
                let _ = gate.wait_for(|open| *open).await;
                tokio::time::sleep(hold).await;
                let released = Instant::now();
                if guard.release().await.is_err() {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                cycles.lock().unwrap_or_else(|e| e.into_inner()).push((called, granted, released));
            }
        }));
    }
    let waiting = clients.saturating_sub(max_holders) as i32;
    wait_status(&locks, "sem", waiting, None).await?;
    let gate_at = Instant::now();
    let _ = gate_tx.send(true);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(900), t).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let m1 = env.api_counts().await?;
    op.kill();
    env.finished(&ns);
    let cycles = cycles.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let (release_to_grant, acquire_to_grant, max_concurrent) = semaphore_samples(&cycles, max_holders, gate_at);
    Ok(crate::results::Semaphore {
        method: format!(
            "1 lock, maxHolders {max_holders}; {clients} Holder clients (one connection pool) × {rounds} cycles: acquire(), hold {} ms, release(); the first {max_holders} holders start holding once the lock's status shows the other {waiting} queued. release→grant: the i-th grant in time order (i ≥ {max_holders}) against the (i − {max_holders})-th release() call; acquire→grant: acquires called after that point",
            hold.as_millis()
        ),
        max_holders,
        clients,
        grants: cycles.len(),
        elapsed_s: elapsed,
        release_to_grant: summarize(&release_to_grant),
        acquire_to_grant: summarize(&acquire_to_grant),
        max_concurrent,
        traffic: traffic(&env.net(&m0, &m1, elapsed), &OUR_RESOURCES, cycles.len() as f64),
        errors: errors.load(Ordering::Relaxed),
        release_to_grant_ms: release_to_grant,
        acquire_to_grant_ms: acquire_to_grant,
    })
}

/// From a semaphore run's cycles (acquire called, acquire returned, release called): the
/// release→grant samples (ms; grants sorted by time, the i-th for i >= `max_holders` against the
/// (i − `max_holders`)-th release, whose slot it is the earliest that can take: at most
/// `max_holders` hold at once), the acquire→grant samples (ms) of the acquires called at or after
/// `from`, and the most holders at once as the clients saw them.
pub fn semaphore_samples(
    cycles: &[(Instant, Instant, Instant)],
    max_holders: usize,
    from: Instant,
) -> (Vec<f64>, Vec<f64>, usize) {
    let mut grants: Vec<Instant> = cycles.iter().map(|c| c.1).collect();
    let mut releases: Vec<Instant> = cycles.iter().map(|c| c.2).collect();
    grants.sort();
    releases.sort();
    let release_to_grant = grants
        .iter()
        .skip(max_holders)
        .zip(&releases)
        .map(|(g, r)| if g >= r { ms(g.duration_since(*r)) } else { -ms(r.duration_since(*g)) })
        .collect();
    let acquire_to_grant = cycles.iter().filter(|c| c.0 >= from).map(|c| ms(c.1.duration_since(c.0))).collect();
    // +1 at a grant, −1 at a release; a release at the same instant as a grant comes first.
    let mut edges: Vec<(Instant, i32)> = cycles.iter().flat_map(|c| [(c.1, 1), (c.2, -1)]).collect();
    edges.sort();
    let (mut now, mut max) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        max = max.max(now);
    }
    (release_to_grant, acquire_to_grant, max as usize)
}
