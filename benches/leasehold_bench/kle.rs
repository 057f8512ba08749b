//! kube-leader-election 0.44.0, run through `benches/kle-driver` (a separate package: the crate
//! is built on kube 4 / k8s-openapi 0.28 and cannot share a dependency graph with Leasehold's
//! kube 5 / k8s-openapi 0.29; see that package's Cargo.toml). The driver uses the crate as its
//! docs say: ttl 15 s, `try_acquire_or_renew()` every 5 s, `step_down()` to release.

use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::env::{Env, LEASE_RESOURCES};
use crate::ours::{api_cost, traffic};
use crate::results::{Failover, Herd, Latency};
use crate::stats::summarize;

async fn run(env: &Env, args: &[String]) -> anyhow::Result<Value> {
    let bin = env.kle_driver.clone().context("kle-driver not built (make bench builds it)")?;
    let out = tokio::process::Command::new(bin)
        .args(args)
        .env("KUBECONFIG", &env.kubeconfig)
        .stderr(std::process::Stdio::inherit())
        .output()
        .await?;
    if !out.status.success() {
        bail!("kle-driver {args:?} failed: {}", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().rev().find(|l| l.starts_with('{')).context("no JSON from kle-driver")?;
    Ok(serde_json::from_str(line)?)
}

fn floats(v: &Value, key: &str) -> Vec<f64> {
    v[key].as_array().map(|a| a.iter().filter_map(Value::as_f64).collect()).unwrap_or_default()
}

fn s(v: impl ToString) -> String {
    v.to_string()
}

/// Scenario 1; the waiters poll every `poll` (documented: 5 s), the ttl stays 15 s. The API
/// requests on Leases are counted over the driver's run (it must be alone on the cluster).
pub async fn handover(
    env: &Env,
    tag: &str,
    pairs: usize,
    rounds: usize,
    hold: Duration,
    poll: Duration,
) -> anyhow::Result<Latency> {
    let ns = env.namespace(tag).await?;
    let args = [
        s("handover"),
        s("--namespace"),
        ns.clone(),
        s("--pairs"),
        s(pairs),
        s("--rounds"),
        s(rounds),
        s("--hold-ms"),
        s(hold.as_millis()),
        s("--poll-ms"),
        s(poll.as_millis()),
    ];
    let (m0, c0) = (env.api_counts().await?, std::time::Instant::now());
    let v = run(env, &args).await?;
    let counted_s = c0.elapsed().as_secs_f64();
    let delta = env.net(&m0, &env.api_counts().await?, counted_s);
    env.finished(&ns);
    let period = if poll == Duration::from_secs(5) {
        "every 5 s (documented)".to_string()
    } else {
        format!("every {:.1} s (the documented period is 5 s)", poll.as_secs_f64())
    };
    let mut lat = Latency::new(
        format!(
            "{pairs} Leases x 2 candidates at once, {rounds} handovers each; ttl 15 s, try_acquire_or_renew() {period}, waiter loop at a random phase; holder holds {} ms; sample = step_down() called -> waiter's try_acquire_or_renew() returns Acquired",
            hold.as_millis()
        ),
        floats(&v, "handover_ms"),
        v["errors"].as_u64().unwrap_or(0),
        v["elapsed_s"].as_f64().unwrap_or(0.0),
    );
    lat.api = Some(api_cost(
        &delta,
        &LEASE_RESOURCES,
        lat.samples_ms.len(),
        2 * pairs,
        counted_s,
        "Leases, the driver's whole run (both candidates of every pair), net of the idle cluster's own traffic",
    ));
    Ok(lat)
}

/// Scenario 3.
pub async fn failover(env: &Env, locks: usize) -> anyhow::Result<Failover> {
    let ns = env.namespace("kle-failover").await?;
    let v = run(env, &[s("failover"), s("--namespace"), ns.clone(), s("--locks"), s(locks)]).await?;
    env.finished(&ns);
    let samples = v["failover"].as_array().cloned().unwrap_or_default();
    let from_kill = samples.iter().filter_map(|x| x["from_kill_ms"].as_f64()).collect();
    let from_renew = samples.iter().filter_map(|x| x["from_last_renew_ms"].as_f64()).collect();
    Ok(Failover::new(
        format!(
            "{locks} Leases at once, ttl 15 s, renewal every 5 s (documented); holder = separate process (kle-driver hold), SIGKILL at a random point of its renewal cycle; waiter polls every 5 s from a random phase"
        ),
        15.0,
        from_kill,
        from_renew,
        v["errors"].as_u64().unwrap_or(0),
        v["elapsed_s"].as_f64().unwrap_or(0.0),
    ))
}

/// Scenario 5.
pub async fn herd(
    env: &Env,
    waiters: usize,
    hold: Duration,
    max_handovers: usize,
    max_time: Duration,
) -> anyhow::Result<Herd> {
    let ns = env.namespace("kle-herd").await?;
    let args = [
        s("herd"),
        s("--namespace"),
        ns.clone(),
        s("--waiters"),
        s(waiters),
        s("--hold-ms"),
        s(hold.as_millis()),
        s("--max-handovers"),
        s(max_handovers),
        s("--max-seconds"),
        s(max_time.as_secs()),
    ];
    let m0 = env.api_counts().await?;
    let t = std::time::Instant::now();
    let v = run(env, &args).await?;
    let m1 = env.api_counts().await?;
    let secs = t.elapsed().as_secs_f64();
    env.finished(&ns);
    let handovers = v["handovers"].as_u64().unwrap_or(0) as usize;
    Ok(Herd {
        waiters,
        handovers,
        elapsed_s: v["elapsed_s"].as_f64().unwrap_or(0.0),
        traffic: traffic(&env.net(&m0, &m1, secs), &LEASE_RESOURCES, handovers as f64),
        overlaps: v["overlaps"].as_u64().unwrap_or(0),
        handover: summarize(&floats(&v, "handover_ms")),
        errors: v["errors"].as_u64().unwrap_or(0),
        method: format!(
            "{waiters} candidates (documented 5 s loop, random phase) on one held Lease; each holds {} ms then step_down(); bounded to {max_handovers} handovers or {} s; traffic counted over the driver's whole run",
            hold.as_millis(),
            max_time.as_secs()
        ),
    })
}
