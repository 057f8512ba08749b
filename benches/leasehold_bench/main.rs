//! `leasehold-bench`: handover, failover, throughput, herd and scale of Leasehold on the real
//! local control plane, side by side with the Rust Lease crates `kube-lease-manager` and
//! `kube-leader-election` on the same cluster in the same run.
//!
//! Run it with `make bench` (builds the operator and the kube-leader-election driver, runs this
//! with `cargo bench --bench leasehold-bench`, stops the cluster). Writes `target/bench/`:
//! `report.md` (also printed), `results.json` (every sample), `handover-cdf.png`, and the logs of
//! the processes it started under `logs/`.
//!
//! Environment (all optional):
//! - `BENCH_SIZE=quick` small sizes for development (default `full`, the sizes of the issue);
//! - `BENCH_ONLY=handover,pods,failover,throughput,herd,scale` a subset of the scenarios;
//! - `BENCH_LIBS=leasehold,kube-lease-manager,kube-leader-election` a subset of the libraries;
//! - `BENCH_<SIZE>` overrides one size, e.g. `BENCH_SCALE_LOCKS=2000` (see [`Config`]).
//!
//! Under `cargo test --all-targets` (no `--bench` argument) it does nothing.

mod env;
mod kle;
mod klm;
mod ours;
mod report;
mod results;
mod stats;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use results::{KLE, KLM, OURS, Results};

/// Scenario sizes.
#[derive(Clone, Debug)]
struct Config {
    handovers: usize,
    hold_ms: u64,
    competitor_hold_ms: u64,
    klm_pairs: usize,
    klm_rounds: usize,
    kle_pairs: usize,
    kle_rounds: usize,
    pods: usize,
    pod_run_for: String,
    failover_locks: usize,
    throughput_locks: usize,
    throughput_warmup_s: u64,
    throughput_secs: u64,
    herd_waiters: usize,
    herd_hold_ms: u64,
    klm_herd_handovers: usize,
    klm_herd_secs: u64,
    kle_herd_handovers: usize,
    kle_herd_secs: u64,
    scale_locks: usize,
    scale_idle_s: u64,
    scale_batch: usize,
    scale_setup_budget_s: u64,
}

impl Config {
    fn from_env() -> Config {
        let quick = std::env::var("BENCH_SIZE").is_ok_and(|v| v == "quick");
        let n = |key: &str, full: u64, small: u64| -> u64 {
            std::env::var(format!("BENCH_{key}")).ok().and_then(|v| v.parse().ok()).unwrap_or(if quick {
                small
            } else {
                full
            })
        };
        Config {
            handovers: n("HANDOVERS", 200, 20) as usize,
            hold_ms: n("HOLD_MS", 20, 20),
            competitor_hold_ms: n("COMPETITOR_HOLD_MS", 1000, 1000),
            klm_pairs: n("KLM_PAIRS", 200, 4) as usize,
            klm_rounds: n("KLM_ROUNDS", 1, 1) as usize,
            kle_pairs: n("KLE_PAIRS", 50, 4) as usize,
            kle_rounds: n("KLE_ROUNDS", 4, 2) as usize,
            pods: n("PODS", 60, 6) as usize,
            pod_run_for: std::env::var("BENCH_POD_RUN_FOR").unwrap_or_else(|_| "500ms".into()),
            failover_locks: n("FAILOVER_LOCKS", 20, 3) as usize,
            throughput_locks: n("THROUGHPUT_LOCKS", 1000, 50) as usize,
            throughput_warmup_s: n("THROUGHPUT_WARMUP_S", 10, 3),
            throughput_secs: n("THROUGHPUT_SECS", 60, 10),
            herd_waiters: n("HERD_WAITERS", 200, 20) as usize,
            herd_hold_ms: n("HERD_HOLD_MS", 50, 50),
            klm_herd_handovers: n("KLM_HERD_HANDOVERS", 200, 20) as usize,
            klm_herd_secs: n("KLM_HERD_SECS", 65, 35),
            kle_herd_handovers: n("KLE_HERD_HANDOVERS", 200, 20) as usize,
            kle_herd_secs: n("KLE_HERD_SECS", 45, 20),
            scale_locks: n("SCALE_LOCKS", 10_000, 300) as usize,
            scale_idle_s: n("SCALE_IDLE_S", 30, 10),
            scale_batch: n("SCALE_BATCH", 10_000, 300) as usize,
            scale_setup_budget_s: n("SCALE_SETUP_BUDGET_S", 360, 60),
        }
    }

    fn describe(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            m.insert(k.to_string(), v);
        };
        put(
            "handovers",
            format!(
                "{} (klm {}×{}, kle {}×{})",
                self.handovers, self.klm_pairs, self.klm_rounds, self.kle_pairs, self.kle_rounds
            ),
        );
        put("pods", format!("{} × {}", self.pods, self.pod_run_for));
        put("failover_locks", self.failover_locks.to_string());
        put("throughput", format!("{} locks, {} s", self.throughput_locks, self.throughput_secs));
        put("herd_waiters", self.herd_waiters.to_string());
        put("scale_locks", self.scale_locks.to_string());
        m
    }
}

fn selected(what: &str) -> bool {
    std::env::var("BENCH_ONLY").map_or(true, |v| v.split(',').any(|s| s.trim() == what))
}

fn lib_selected(lib: &str) -> bool {
    std::env::var("BENCH_LIBS").map_or(true, |v| v.split(',').any(|s| s.trim() == lib))
}

fn machine() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    m.insert("cores".into(), cores.to_string());
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).unwrap_or("?");
    m.insert("cpu".into(), cpu.trim().to_string());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kib: f64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0.0);
    m.insert("memory".into(), format!("{:.0} GiB", kib / 1024.0 / 1024.0));
    m.insert(
        "kernel".into(),
        std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string(),
    );
    m.insert("load_start".into(), loadavg());
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let dirty = if git(&["status", "--porcelain", "--untracked-files=no"]).is_empty() {
        ""
    } else {
        " (+ uncommitted changes)"
    };
    m.insert("commit".into(), format!("{}{dirty}", git(&["rev-parse", "--short", "HEAD"])));
    m
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("leasehold-bench: no runtime: {e}");
            std::process::exit(1);
        }
    };
    if args.get(1).map(String::as_str) == Some("worker") {
        // Holder processes for the failover scenarios (killed by the bench).
        let r = match args.get(2).map(String::as_str) {
            Some("klm-hold") if args.len() >= 6 => rt.block_on(klm::hold_worker(&args[3], &args[4], &args[5])),
            _ => Err(anyhow::anyhow!("unknown worker {args:?}")),
        };
        if let Err(e) = r {
            eprintln!("worker: {e:#}");
            std::process::exit(1);
        }
        return;
    }
    if !args.iter().any(|a| a == "--bench") {
        println!(
            "leasehold-bench: run with `make bench` (or `cargo bench --bench leasehold-bench`); nothing to do here"
        );
        return;
    }
    if let Err(e) = rt.block_on(run()) {
        eprintln!("leasehold-bench: {e:#}");
        std::process::exit(1);
    }
}

/// Writes what is measured so far (a run that is stopped keeps its finished scenarios).
fn save_partial(r: &Results) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    if let Ok(json) = serde_json::to_string_pretty(r) {
        let _ = std::fs::write(dir.join("results.partial.json"), json);
    }
}

/// Runs one scenario step, recording its wall time and any failure.
async fn step<T>(r: &mut Results, name: &str, fut: impl std::future::Future<Output = anyhow::Result<T>>) -> Option<T> {
    eprintln!("[bench] ---- {name} (load {})", loadavg());
    let t = Instant::now();
    let out = fut.await;
    let secs = t.elapsed().as_secs_f64();
    r.wall_s.insert(name.to_string(), secs);
    save_partial(r);
    match out {
        Ok(v) => {
            eprintln!("[bench] {name}: done in {secs:.1} s");
            Some(v)
        }
        Err(e) => {
            eprintln!("[bench] {name}: FAILED after {secs:.1} s: {e:#}");
            r.problems.push(format!("{name}: {e:#}"));
            None
        }
    }
}

/// A Lease crate's result in the side-by-side phase.
enum Res {
    L(results::Latency),
    F(results::Failover),
}

/// Records the outcome of a step that was timed elsewhere (the competitors run side by side).
fn record<T>(r: &mut Results, name: &str, out: Option<anyhow::Result<T>>) -> Option<T> {
    match out? {
        Ok(v) => Some(v),
        Err(e) => {
            eprintln!("[bench] {name}: FAILED: {e:#}");
            r.problems.push(format!("{name}: {e:#}"));
            None
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let started = Instant::now();
    let cfg = Config::from_env();
    let mut r = Results {
        date: k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC").to_string(),
        machine: machine(),
        config: cfg.describe(),
        ..Results::default()
    };
    let mut env = env::Env::up("bench").await?;
    eprintln!("[bench] measuring the idle cluster's own API traffic for 10 s (subtracted from the counts)");
    env.measure_background(Duration::from_secs(10)).await?;
    let env = env;
    if env.kle_driver.is_none() && lib_selected(KLE) {
        r.problems.push("kube-leader-election: benches/kle-driver was not built, its columns are empty".into());
    }
    let ms = Duration::from_millis;
    let competitor_hold = ms(cfg.competitor_hold_ms);
    let klm_on = lib_selected(KLM);
    let kle_on = lib_selected(KLE) && env.kle_driver.is_some();

    // Leasehold's scenarios first, each alone on the cluster.
    if lib_selected(OURS) {
        if selected("handover")
            && let Some(v) =
                step(&mut r, "handover/leasehold", ours::handover(&env, cfg.handovers, ms(cfg.hold_ms))).await
        {
            r.handover.insert(OURS.into(), v);
        }
        if selected("pods") {
            r.pod_handover =
                step(&mut r, "pod-handover/leasehold", ours::pod_handover(&env, cfg.pods, &cfg.pod_run_for)).await;
        }
        if selected("failover")
            && let Some(v) = step(&mut r, "failover/leasehold", ours::failover(&env, cfg.failover_locks)).await
        {
            r.failover.insert(OURS.into(), v);
        }
        if selected("herd")
            && let Some(v) =
                step(&mut r, "herd/leasehold", ours::herd(&env, cfg.herd_waiters, ms(cfg.herd_hold_ms))).await
        {
            r.herd.insert(OURS.into(), v);
        }
        if selected("throughput") {
            let (warmup, window) =
                (Duration::from_secs(cfg.throughput_warmup_s), Duration::from_secs(cfg.throughput_secs));
            r.throughput =
                step(&mut r, "throughput/leasehold", ours::throughput(&env, cfg.throughput_locks, warmup, window))
                    .await;
        }
    }
    // The herds count API requests on Leases: alone too.
    if selected("herd") {
        let hold = ms(cfg.herd_hold_ms);
        if klm_on
            && let Some(v) = step(
                &mut r,
                "herd/kube-lease-manager",
                klm::herd(&env, cfg.herd_waiters, hold, cfg.klm_herd_handovers, Duration::from_secs(cfg.klm_herd_secs)),
            )
            .await
        {
            r.herd.insert(KLM.into(), v);
        }
        if kle_on
            && let Some(v) = step(
                &mut r,
                "herd/kube-leader-election",
                kle::herd(&env, cfg.herd_waiters, hold, cfg.kle_herd_handovers, Duration::from_secs(cfg.kle_herd_secs)),
            )
            .await
        {
            r.herd.insert(KLE.into(), v);
        }
    }
    // The Lease crates' handover and failover wait for their timers (seconds), not for the API
    // server: they run side by side with each other; then, alone, the scale scenario's setup
    // (10,000 locks created at once), which is bounded by the API server's write rate.
    eprintln!(
        "[bench] ---- the Lease crates' handover and failover, side by side, then scale setup (load {})",
        loadavg()
    );
    let t = Instant::now();
    let setup = async {
        if selected("scale") && lib_selected(OURS) {
            let t = Instant::now();
            let budget = Duration::from_secs(cfg.scale_setup_budget_s);
            Some((ours::scale_setup(&env, cfg.scale_locks, cfg.scale_batch, budget).await, t.elapsed().as_secs_f64()))
        } else {
            None
        }
    };
    let competitors = async {
        let mut out = vec![];
        if selected("handover") {
            let t = Instant::now();
            let (a, b) = tokio::join!(
                async {
                    if klm_on {
                        Some(klm::handover(&env, cfg.klm_pairs, cfg.klm_rounds, competitor_hold).await)
                    } else {
                        None
                    }
                },
                async {
                    if kle_on {
                        Some(kle::handover(&env, cfg.kle_pairs, cfg.kle_rounds, competitor_hold).await)
                    } else {
                        None
                    }
                }
            );
            out.push(("handover", a.map(|x| x.map(Res::L)), b.map(|x| x.map(Res::L)), t.elapsed().as_secs_f64()));
        }
        if selected("failover") {
            let t = Instant::now();
            let (a, b) = tokio::join!(
                async { if klm_on { Some(klm::failover(&env, cfg.failover_locks).await) } else { None } },
                async { if kle_on { Some(kle::failover(&env, cfg.failover_locks).await) } else { None } }
            );
            out.push(("failover", a.map(|x| x.map(Res::F)), b.map(|x| x.map(Res::F)), t.elapsed().as_secs_f64()));
        }
        out
    };
    // One after the other: the burst saturates the API server's writes, which would slow the
    // crates' requests (and theirs would slow it).
    let competitors = competitors.await;
    let setup = setup.await;
    r.wall_s.insert("Lease crates' handover + failover, then scale setup".into(), t.elapsed().as_secs_f64());
    for (kind, a, b, secs) in competitors {
        r.wall_s.insert(format!("{kind}/Lease crates, side by side"), secs);
        for (lib, res) in [(KLM, a), (KLE, b)] {
            match record(&mut r, &format!("{kind}/{lib}"), res) {
                Some(Res::L(v)) => {
                    r.handover.insert(lib.into(), v);
                }
                Some(Res::F(v)) => {
                    r.failover.insert(lib.into(), v);
                }
                None => {}
            }
        }
    }
    if let Some((setup, secs)) = setup {
        r.wall_s.insert("scale/leasehold setup".into(), secs);
        if let Some(setup) = record(&mut r, "scale/leasehold setup", Some(setup)) {
            r.scale =
                step(&mut r, "scale/leasehold", ours::scale(&env, setup, Duration::from_secs(cfg.scale_idle_s))).await;
        }
    }

    env.delete_finished().await;
    r.machine.insert("load_end".into(), loadavg());
    r.wall_s.insert("total".into(), started.elapsed().as_secs_f64());
    std::fs::write(env.out_dir.join("results.json"), serde_json::to_string_pretty(&r)?)?;
    let png = env.out_dir.join("handover-cdf.png");
    if let Err(e) = report::plot(&r, &png) {
        r.problems.push(format!("plot: {e:#}"));
    }
    let md = report::markdown(&r);
    std::fs::write(env.out_dir.join("report.md"), &md)?;
    println!("\n{md}");
    println!("Written: {}/{{report.md,results.json,handover-cdf.png}}", env.out_dir.display());
    Ok(())
}
