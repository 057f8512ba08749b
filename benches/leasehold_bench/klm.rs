//! kube-lease-manager 0.13.1 (already a dependency of Leasehold, for leader election), driven
//! through its documented "fully automated" API with its default timings: `LeaseManagerBuilder::
//! new(client, lease).with_namespace(ns).with_identity(id).build()`, then `watch()`, which
//! returns a `watch::Receiver<bool>` (true = holding); dropping the receiver releases the Lease.
//! Defaults: lease duration 30 s, grace 5 s (the holder renews 5 s before expiry, i.e. every
//! 25 s). A candidate that sees the Lease held sleeps until that holder's expiry: it does not
//! watch the Lease, so it learns of a voluntary release only then.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use kube_lease_manager::{
    DEFAULT_LEASE_DURATION_SECONDS, DEFAULT_LEASE_GRACE_SECONDS, LeaseManager, LeaseManagerBuilder,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::env::{Env, LEASE_RESOURCES};
use crate::ours::{api_cost, handovers_of, traffic};
use crate::results::{Failover, Herd, Latency};
use crate::stats::{random_below, summarize};

type Task = JoinHandle<kube_lease_manager::Result<LeaseManager>>;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn manager(client: &Client, ns: &str, lease: &str, id: &str) -> anyhow::Result<LeaseManager> {
    manager_with(client, ns, lease, id, None).await
}

/// A manager with (lease duration, grace) seconds instead of the defaults.
async fn manager_with(
    client: &Client,
    ns: &str,
    lease: &str,
    id: &str,
    timing: Option<(u64, u64)>,
) -> anyhow::Result<LeaseManager> {
    let mut b = LeaseManagerBuilder::new(client.clone(), lease).with_namespace(ns).with_identity(id);
    if let Some((duration, grace)) = timing {
        b = b.with_duration(duration).with_grace(grace);
    }
    Ok(b.build().await?)
}

/// Waits until the receiver says "holding"; None if the manager stopped.
async fn held(rx: &mut watch::Receiver<bool>) -> Option<Instant> {
    rx.wait_for(|v| *v).await.ok().map(|_| Instant::now())
}

/// Scenario 1: `pairs` Leases with two managers each, `rounds` handovers per pair, all pairs at
/// once (each handover waits for a timer, not for the API server). `timing`: (lease duration,
/// grace) seconds instead of the defaults. The API requests on Leases are counted from the
/// managers' creation to the end (the run must be alone on the cluster).
pub async fn handover(
    env: &Env,
    tag: &str,
    pairs: usize,
    rounds: usize,
    hold: Duration,
    timing: Option<(u64, u64)>,
) -> anyhow::Result<Latency> {
    let started = Instant::now();
    let ns = env.namespace(tag).await?;
    let client = env.new_client().await?;
    let (m0, c0) = (env.api_counts().await?, Instant::now());
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = vec![];
    for p in 0..pairs {
        let (client, ns, errors) = (client.clone(), ns.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let lease = format!("klm-pair-{p}");
            let a = manager_with(&client, &ns, &lease, &format!("klm-{p}-a"), timing).await?;
            let b = manager_with(&client, &ns, &lease, &format!("klm-{p}-b"), timing).await?;
            let (mut rx_h, mut task_h): (watch::Receiver<bool>, Task) = a.watch().await;
            held(&mut rx_h).await.context("first holder never held")?;
            let (mut rx_w, mut task_w) = b.watch().await;
            let mut ids = (format!("klm-{p}-a"), format!("klm-{p}-b"));
            let mut samples = vec![];
            for _ in 0..rounds {
                tokio::time::sleep(hold).await;
                let t0 = Instant::now();
                drop(rx_h); // documented release: close the channel
                let t1 = tokio::time::timeout(Duration::from_secs(120), held(&mut rx_w)).await;
                match t1 {
                    Ok(Some(t1)) => samples.push(ms(t1.duration_since(t0))),
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        return Ok(samples);
                    }
                }
                task_h.await??;
                // The next waiter is a new manager under the old holder's identity: a manager
                // that released keeps `is_leader == true` internally, so calling watch() on it
                // again starts its channel at `true` until its first sync.
                let m = manager_with(&client, &ns, &lease, &ids.0, timing).await?;
                let (rx, task) = m.watch().await;
                (rx_h, task_h, rx_w, task_w) = (rx_w, task_w, rx, task);
                ids = (ids.1, ids.0);
            }
            drop(rx_h);
            drop(rx_w);
            let _ = task_h.await;
            let _ = task_w.await;
            Ok::<_, anyhow::Error>(samples)
        }));
    }
    let mut samples = vec![];
    for t in tasks {
        match t.await {
            Ok(Ok(s)) => samples.extend(s),
            _ => {
                errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    let counted_s = c0.elapsed().as_secs_f64();
    let delta = env.net(&m0, &env.api_counts().await?, counted_s);
    env.finished(&ns);
    let (duration, grace) = timing.unwrap_or((DEFAULT_LEASE_DURATION_SECONDS, DEFAULT_LEASE_GRACE_SECONDS));
    let kind = if timing.is_some() { "tuned" } else { "defaults" };
    let mut lat = Latency::new(
        format!(
            "{pairs} Leases x 2 managers at once, {rounds} handover(s) each; {kind} (duration {duration} s, grace {grace} s); holder holds {} ms then drops its watch() channel; sample = drop -> waiter's channel turns true",
            hold.as_millis()
        ),
        samples,
        errors.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64(),
    );
    lat.api = Some(api_cost(
        &delta,
        &LEASE_RESOURCES,
        lat.samples_ms.len(),
        2 * pairs,
        counted_s,
        "Leases, every manager of the run, from their creation to the last one stopped, net of the idle cluster's own traffic",
    ));
    Ok(lat)
}

/// The failover holder process (`worker klm-hold`): holds the Lease until killed.
pub async fn hold_worker(ns: &str, lease: &str, id: &str) -> anyhow::Result<()> {
    let client = Client::try_default().await?;
    let m = manager(&client, ns, lease, id).await?;
    let (mut rx, _task) = m.watch().await;
    held(&mut rx).await.context("never held")?;
    println!("held");
    std::future::pending::<()>().await;
    Ok(())
}

fn renew_time(lease: &Lease) -> Option<SystemTime> {
    let t = lease.spec.as_ref()?.renew_time.as_ref()?.0;
    Some(UNIX_EPOCH + Duration::from_nanos(u64::try_from(t.as_nanosecond()).ok()?))
}

/// Scenario 3: per Lease a holder process (this binary, `worker klm-hold`) is SIGKILLed at a
/// random point of its 25 s renewal cycle; an in-process manager waits to take over.
pub async fn failover(env: &Env, locks: usize) -> anyhow::Result<Failover> {
    let started = Instant::now();
    let ns = env.namespace("klm-failover").await?;
    let client = env.new_client().await?;
    let exe = std::env::current_exe()?;
    let renew_every = Duration::from_secs(DEFAULT_LEASE_DURATION_SECONDS - DEFAULT_LEASE_GRACE_SECONDS);
    let mut tasks = vec![];
    for i in 0..locks {
        let (client, ns, exe, kubeconfig) = (client.clone(), ns.clone(), exe.clone(), env.kubeconfig.clone());
        tasks.push(tokio::spawn(async move {
            let lease = format!("klm-failover-{i}");
            let mut child = Command::new(&exe)
                .args(["worker", "klm-hold", &ns, &lease, &format!("klm-holder-{i}")])
                .env("KUBECONFIG", &kubeconfig)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()?;
            let stdout = child.stdout.take().context("stdout")?;
            let line = tokio::task::spawn_blocking(move || {
                let mut l = String::new();
                BufReader::new(stdout).read_line(&mut l).map(|_| l)
            })
            .await??;
            if line.trim() != "held" {
                let _ = child.kill();
                bail!("klm holder {i} did not hold");
            }
            let m = manager(&client, &ns, &lease, &format!("klm-waiter-{i}")).await?;
            let (mut rx, task) = m.watch().await;
            tokio::time::sleep(random_below(renew_every)).await;
            let t_kill = Instant::now();
            child.kill()?; // SIGKILL
            let _ = child.wait();
            tokio::time::sleep(Duration::from_millis(300)).await;
            let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
            let last_renew = renew_time(&leases.get(&lease).await?);
            let t1 = tokio::time::timeout(Duration::from_secs(120), held(&mut rx)).await?.context("waiter stopped")?;
            let wall1 = SystemTime::now();
            drop(rx);
            let _ = task.await;
            let from_renew = last_renew.and_then(|r| wall1.duration_since(r).ok()).map(ms);
            Ok::<_, anyhow::Error>((ms(t1.duration_since(t_kill)), from_renew))
        }));
    }
    let (mut from_kill, mut from_renew, mut errors) = (vec![], vec![], 0);
    for t in tasks {
        match t.await {
            Ok(Ok((k, r))) => {
                from_kill.push(k);
                from_renew.extend(r);
            }
            Ok(Err(e)) => {
                eprintln!("[bench] klm failover sample failed: {e:#}");
                errors += 1;
            }
            Err(_) => errors += 1,
        }
    }
    env.finished(&ns);
    Ok(Failover::new(
        format!(
            "{locks} Leases at once, defaults (duration {DEFAULT_LEASE_DURATION_SECONDS} s, renewal every {} s); holder = separate process, SIGKILL at a random point of its renewal cycle; waiter = watch() in the bench",
            renew_every.as_secs()
        ),
        DEFAULT_LEASE_DURATION_SECONDS as f64,
        from_kill,
        from_renew,
        errors,
        started.elapsed().as_secs_f64(),
    ))
}

/// Scenario 5: `waiters` managers on one held Lease; each holds once for `hold` and releases.
/// Bounded: stops after `max_handovers` handovers or `max_time`.
pub async fn herd(
    env: &Env,
    waiters: usize,
    hold: Duration,
    max_handovers: usize,
    max_time: Duration,
) -> anyhow::Result<Herd> {
    let ns = env.namespace("klm-herd").await?;
    let client = env.new_client().await?;
    let lease = "klm-herd";
    let first = manager(&client, &ns, lease, "klm-herd-first").await?;
    let (mut rx_first, task_first) = first.watch().await;
    let first_at = held(&mut rx_first).await.context("first holder")?;
    let m0 = env.api_counts().await?;
    let started = Instant::now();
    let grants: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
    let errors = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = vec![];
    for i in 0..waiters {
        let (client, ns, grants, errors) = (client.clone(), ns.clone(), grants.clone(), errors.clone());
        let mut stop_rx = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            let m = match manager(&client, &ns, lease, &format!("klm-herd-{i}")).await {
                Ok(m) => m,
                Err(_) => {
                    errors.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            };
            let (mut rx, task) = m.watch().await;
            let got = tokio::select! {
                t = held(&mut rx) => t,
                _ = stop_rx.wait_for(|v| *v) => None,
            };
            if let Some(t) = got {
                tokio::time::sleep(hold).await;
                let r = Instant::now();
                drop(rx);
                let _ = task.await;
                grants.lock().unwrap_or_else(|e| e.into_inner()).push((t, r));
            } else {
                // Stopped while waiting: close the channel and let the manager finish (it
                // re-reads the Lease and leaves it alone), so nothing of this scenario is still
                // talking to the API server when the next one starts.
                drop(rx);
                let _ = tokio::time::timeout(Duration::from_secs(60), task).await;
            }
        }));
    }
    // Every waiter has built its manager and looked at the Lease.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let first_release = Instant::now();
    drop(rx_first);
    let _ = task_first.await;
    while grants.lock().unwrap_or_else(|e| e.into_inner()).len() < max_handovers.min(waiters)
        && started.elapsed() < max_time
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let m1 = env.api_counts().await?;
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(90), t).await;
    }
    env.finished(&ns);
    let mut g = grants.lock().unwrap_or_else(|e| e.into_inner()).clone();
    g.push((first_at, first_release));
    let handovers = g.len() - 1;
    let (samples, overlaps) = handovers_of(g);
    Ok(Herd {
        waiters,
        handovers,
        elapsed_s: elapsed,
        traffic: traffic(&env.net(&m0, &m1, elapsed), &LEASE_RESOURCES, handovers as f64),
        overlaps,
        handover: summarize(&samples),
        errors: errors.load(Ordering::Relaxed),
        method: format!(
            "{waiters} managers (watch(), defaults) on one held Lease; each holds {} ms then drops its channel; bounded to {max_handovers} handovers or {} s (each handover waits for the previous holder's 30 s expiry)",
            hold.as_millis(),
            max_time.as_secs()
        ),
    })
}
