//! `kle-driver`: runs the benchmark scenarios of Leasehold's `make bench` against the
//! `kube-leader-election` crate, the way its documentation uses it, and prints one JSON object
//! on stdout.
//!
//! Documented usage (crate docs and README): `LeaseLock::new(client, ns, LeaseLockParams {
//! holder_id, lease_name, lease_ttl: 15 s })`, call `try_acquire_or_renew()` from a background
//! loop every 5 s ("if `lease_ttl` is set to 15 seconds, one should renew it every 5 seconds"),
//! and `step_down()` to give the lock up (it sets the ttl to 1 s and clears the holder, so the
//! other candidates race for it). Those are the timings used here.
//!
//! Subcommands (all take `--namespace NS`; KUBECONFIG selects the cluster):
//! - `handover --pairs P --rounds R --hold-ms H [--poll-ms MS]`: P locks, two candidates each,
//!   ping-pong R times; a sample is the time from `step_down()` being called to the other
//!   candidate's `try_acquire_or_renew()` returning `Acquired`. `--poll-ms` is the waiters' loop
//!   period (default the documented 5000; the ttl stays 15 s).
//! - `failover --locks N`: per lock a `hold` child process holds the lease and is SIGKILLed at a
//!   random point of its 5 s renewal cycle; a sample is the time from the kill (and from the
//!   holder's last renewal, the Lease's `renewTime`) to the waiter's `Acquired`.
//! - `herd --waiters W --hold-ms H --max-handovers M --max-seconds T`: W candidates on one lease,
//!   each takes the lock once, holds it H ms, steps down and stops.
//! - `hold --lease L --id ID`: the failover holder (prints `held` once it holds).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::Lease;
use kube_leader_election::{LeaseLock, LeaseLockParams, LeaseLockResult};
use serde_json::json;

/// The documented ttl and renewal period (`handover --poll-ms` changes the waiters' period).
const TTL: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_secs(5);

static SEED: AtomicU64 = AtomicU64::new(0);

/// A random duration in [0, max) (xorshift; good enough to spread timer phases).
fn random_below(max: Duration) -> Duration {
    let mut x = SEED.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
        ^ SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    Duration::from_nanos(x % (max.as_nanos().max(1) as u64))
}

fn args() -> (String, HashMap<String, String>) {
    let mut it = std::env::args().skip(1);
    let cmd = it.next().unwrap_or_default();
    let mut map = HashMap::new();
    while let Some(k) = it.next() {
        if let Some(k) = k.strip_prefix("--") {
            map.insert(k.to_string(), it.next().unwrap_or_default());
        }
    }
    (cmd, map)
}

fn num(map: &HashMap<String, String>, key: &str, default: u64) -> u64 {
    map.get(key).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn lease_lock(client: &kube::Client, ns: &str, lease: &str, id: &str) -> LeaseLock {
    LeaseLock::new(
        client.clone(),
        ns,
        LeaseLockParams { holder_id: id.to_string(), lease_name: lease.to_string(), lease_ttl: TTL },
    )
}

/// Polls every `poll` (first poll after a random phase) until `Acquired`; returns when it got
/// it. Stops early (None) when `stop` is set.
async fn wait_acquired(
    lock: &LeaseLock,
    first_delay: Duration,
    poll: Duration,
    stop: &AtomicBool,
    errors: &AtomicU64,
) -> Option<Instant> {
    tokio::time::sleep(first_delay).await;
    loop {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        match lock.try_acquire_or_renew().await {
            Ok(LeaseLockResult::Acquired(_)) => return Some(Instant::now()),
            Ok(LeaseLockResult::NotAcquired(_)) => {}
            Err(_) => {
                errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        tokio::time::sleep(poll).await;
    }
}

#[tokio::main]
async fn main() {
    let (cmd, a) = args();
    let ns = a.get("namespace").cloned().unwrap_or_else(|| "default".into());
    let client = match kube::Client::try_default().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kle-driver: no client: {e}");
            std::process::exit(1);
        }
    };
    let out = match cmd.as_str() {
        "hold" => {
            hold(&client, &ns, a.get("lease").map_or("x", |s| s.as_str()), a.get("id").map_or("h", |s| s.as_str()))
                .await;
            return;
        }
        "handover" => {
            handover(
                &client,
                &ns,
                num(&a, "pairs", 10),
                num(&a, "rounds", 2),
                Duration::from_millis(num(&a, "hold-ms", 1000)),
                Duration::from_millis(num(&a, "poll-ms", POLL.as_millis() as u64)),
            )
            .await
        }
        "failover" => failover(&client, &ns, num(&a, "locks", 5)).await,
        "herd" => {
            herd(
                &client,
                &ns,
                num(&a, "waiters", 200),
                Duration::from_millis(num(&a, "hold-ms", 50)),
                num(&a, "max-handovers", 200),
                Duration::from_secs(num(&a, "max-seconds", 60)),
            )
            .await
        }
        _ => {
            eprintln!("usage: kle-driver hold|handover|failover|herd --namespace NS ...");
            std::process::exit(2);
        }
    };
    println!("{out}");
}

/// The failover holder: the documented loop (acquire or renew every 5 s) until killed.
async fn hold(client: &kube::Client, ns: &str, lease: &str, id: &str) {
    let lock = lease_lock(client, ns, lease, id);
    let mut announced = false;
    loop {
        if let Ok(LeaseLockResult::Acquired(_)) = lock.try_acquire_or_renew().await {
            if !announced {
                println!("held");
                announced = true;
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn handover(
    client: &kube::Client,
    ns: &str,
    pairs: u64,
    rounds: u64,
    hold: Duration,
    poll: Duration,
) -> serde_json::Value {
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = vec![];
    for p in 0..pairs {
        let client = client.clone();
        let ns = ns.to_string();
        let errors = errors.clone();
        tasks.push(tokio::spawn(async move {
            let lease = format!("kle-pair-{p}");
            let mut holder = lease_lock(&client, &ns, &lease, &format!("kle-{p}-a"));
            let mut waiter = lease_lock(&client, &ns, &lease, &format!("kle-{p}-b"));
            let never = AtomicBool::new(false);
            wait_acquired(&holder, Duration::ZERO, poll, &never, &errors).await;
            let mut samples = vec![];
            for _ in 0..rounds {
                // The waiter runs its loop (documented: every 5 s) from a random phase while the
                // holder holds.
                let errs = errors.clone();
                let phase = random_below(poll);
                let w = tokio::spawn(async move {
                    let never = AtomicBool::new(false);
                    let t = wait_acquired(&waiter, phase, poll, &never, &errs).await;
                    (waiter, t)
                });
                tokio::time::sleep(hold).await;
                let t0 = Instant::now();
                if holder.step_down().await.is_err() {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                let Ok((w_lock, t1)) = w.await else { break };
                if let Some(t1) = t1 {
                    samples.push(t1.duration_since(t0).as_secs_f64() * 1e3);
                }
                waiter = holder;
                holder = w_lock;
            }
            samples
        }));
    }
    let mut samples = vec![];
    for t in tasks {
        if let Ok(s) = t.await {
            samples.extend(s);
        }
    }
    json!({
        "handover_ms": samples,
        "errors": errors.load(Ordering::Relaxed),
        "elapsed_s": started.elapsed().as_secs_f64(),
    })
}

fn micro_time_to_system(lease: &Lease) -> Option<SystemTime> {
    let t = lease.spec.as_ref()?.renew_time.as_ref()?.0;
    let nanos = t.as_nanosecond();
    Some(UNIX_EPOCH + Duration::from_nanos(u64::try_from(nanos).ok()?))
}

async fn failover(client: &kube::Client, ns: &str, locks: u64) -> serde_json::Value {
    let exe = std::env::current_exe().unwrap_or_else(|_| "kle-driver".into());
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = vec![];
    for i in 0..locks {
        let client = client.clone();
        let ns = ns.to_string();
        let exe = exe.clone();
        let errors = errors.clone();
        tasks.push(tokio::spawn(async move {
            let lease = format!("kle-failover-{i}");
            let mut child = Command::new(&exe)
                .args(["hold", "--namespace", &ns, "--lease", &lease, "--id", &format!("kle-holder-{i}")])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .ok()?;
            let stdout = child.stdout.take()?;
            // Wait for "held" (blocking read on a blocking thread).
            let held = tokio::task::spawn_blocking(move || {
                let mut line = String::new();
                BufReader::new(stdout).read_line(&mut line).ok().map(|_| line.trim() == "held")
            })
            .await
            .ok()
            .flatten()
            .unwrap_or(false);
            if !held {
                let _ = child.kill();
                return None;
            }
            let waiter = lease_lock(&client, &ns, &lease, &format!("kle-waiter-{i}"));
            let errs = errors.clone();
            let phase = random_below(POLL);
            let w = tokio::spawn(async move {
                let never = AtomicBool::new(false);
                let t = wait_acquired(&waiter, phase, POLL, &never, &errs).await;
                (t, SystemTime::now())
            });
            // Kill at a random point of the holder's renewal cycle.
            tokio::time::sleep(random_below(POLL)).await;
            let t_kill = Instant::now();
            let _ = child.kill(); // SIGKILL
            let _ = child.wait();
            tokio::time::sleep(Duration::from_millis(300)).await;
            let api: kube::Api<Lease> = kube::Api::namespaced(client.clone(), &ns);
            let last_renew = api.get(&lease).await.ok().as_ref().and_then(micro_time_to_system);
            let (t1, wall1) = w.await.ok()?;
            let t1 = t1?;
            Some(json!({
                "from_kill_ms": t1.duration_since(t_kill).as_secs_f64() * 1e3,
                "from_last_renew_ms": last_renew.and_then(|r| wall1.duration_since(r).ok()).map(|d| d.as_secs_f64() * 1e3),
            }))
        }));
    }
    let mut samples = vec![];
    for t in tasks {
        if let Ok(Some(s)) = t.await {
            samples.push(s);
        } else {
            errors.fetch_add(1, Ordering::Relaxed);
        }
    }
    json!({
        "failover": samples,
        "lease_duration_s": TTL.as_secs(),
        "errors": errors.load(Ordering::Relaxed),
        "elapsed_s": started.elapsed().as_secs_f64(),
    })
}

async fn herd(
    client: &kube::Client,
    ns: &str,
    waiters: u64,
    hold: Duration,
    max_handovers: u64,
    max_time: Duration,
) -> serde_json::Value {
    let lease = "kle-herd";
    let errors = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // (acquired at, released at) of every grant, the initial holder's first.
    let grants: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
    let first = lease_lock(client, ns, lease, "kle-herd-first");
    let never = AtomicBool::new(false);
    let Some(first_at) = wait_acquired(&first, Duration::ZERO, POLL, &never, &errors).await else {
        return json!({"error": "initial holder did not acquire"});
    };
    let started = Instant::now();
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = vec![];
    for i in 0..waiters {
        let lock = lease_lock(client, ns, lease, &format!("kle-herd-{i}"));
        let (errors, stop, grants, done) = (errors.clone(), stop.clone(), grants.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            if let Some(t) = wait_acquired(&lock, random_below(POLL), POLL, &stop, &errors).await {
                tokio::time::sleep(hold).await;
                let released = Instant::now();
                if lock.step_down().await.is_err() {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                grants.lock().unwrap_or_else(|e| e.into_inner()).push((t, released));
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // Let every waiter make its first (random-phase) poll, then release the initial holder.
    tokio::time::sleep(POLL).await;
    let first_release = Instant::now();
    if first.step_down().await.is_err() {
        errors.fetch_add(1, Ordering::Relaxed);
    }
    while done.load(Ordering::Relaxed) < max_handovers.min(waiters) && started.elapsed() < max_time + POLL {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed();
    for t in tasks {
        let _ = t.await;
    }
    let mut g = grants.lock().unwrap_or_else(|e| e.into_inner()).clone();
    g.push((first_at, first_release));
    g.sort();
    // Handover latency: from the latest release before each grant to that grant.
    let mut samples = vec![];
    let mut overlaps = 0u64;
    for (i, (acq, _)) in g.iter().enumerate().skip(1) {
        let prev_release = g[..i].iter().map(|(_, r)| *r).filter(|r| r <= acq).max();
        if let Some(r) = prev_release {
            samples.push(acq.duration_since(r).as_secs_f64() * 1e3);
        }
        // Another grant still held when this one was granted: two holders at once.
        if g[..i].iter().any(|(a, r)| a <= acq && *r > *acq) {
            overlaps += 1;
        }
    }
    json!({
        "handovers": g.len().saturating_sub(1),
        "handover_ms": samples,
        "overlaps": overlaps,
        "errors": errors.load(Ordering::Relaxed),
        "elapsed_s": elapsed.as_secs_f64(),
    })
}
