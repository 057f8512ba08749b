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
//! - `BENCH_ONLY=handover,pods,failover,oneshot,throughput,open-loop,herd,lease-cost,repeats,scale,held,semaphore`
//!   a subset of the scenarios (`lease-cost`: the Lease crates' extra configurations; `repeats`:
//!   repeats 2.. of Leasehold's handover, failover and throughput; `held`: the scale namespace
//!   with held locks and waiters, after the scale setup; `semaphore`: one lock with
//!   `maxHolders`, Leasehold only);
//! - `BENCH_LIBS=leasehold,kube-lease-manager,kube-leader-election` a subset of the libraries;
//! - `BENCH_OPERATOR_BIN=path` runs another build of the operator (an A/B between commits whose
//!   holder library is the same);
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

use results::{KLE, KLM, LeaseCost, OURS, Results};

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
    oneshot_runs: usize,
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
    /// kube-leader-election's waiter poll periods for the latency vs API cost table (ms; 5000 is
    /// the documented one and is the scenario-1 run).
    kle_polls_ms: Vec<u64>,
    /// kube-lease-manager tuned: lease duration and grace, seconds.
    klm_tuned: (u64, u64),
    klm_tuned_pairs: usize,
    klm_tuned_rounds: usize,
    /// Open loop: offered cycles/s (0: half the closed-loop grants/s, else `open_rate_fallback`).
    open_rate: f64,
    open_rate_fallback: f64,
    open_hold_ms: u64,
    open_warmup_s: u64,
    open_secs: u64,
    /// Runs of the headline scenarios (1 = the main run only).
    repeats: usize,
    repeat_throughput_warmup_s: u64,
    repeat_throughput_secs: u64,
    held_pods: usize,
    held_claims: usize,
    held_waiters: usize,
    held_settle_s: u64,
    held_secs: u64,
    /// Semaphore: the lock's `maxHolders`, the clients cycling through it, cycles per client, and
    /// how long each holds (ms).
    semaphore_max_holders: usize,
    semaphore_clients: usize,
    semaphore_rounds: usize,
    semaphore_hold_ms: u64,
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
            oneshot_runs: n("ONESHOT_RUNS", 20, 3) as usize,
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
            kle_polls_ms: std::env::var("BENCH_KLE_POLLS_MS")
                .ok()
                .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
                .unwrap_or_else(|| vec![1000, 2000, 5000]),
            klm_tuned: (n("KLM_TUNED_DURATION_S", 5, 5), n("KLM_TUNED_GRACE_S", 2, 2)),
            klm_tuned_pairs: n("KLM_TUNED_PAIRS", 50, 4) as usize,
            klm_tuned_rounds: n("KLM_TUNED_ROUNDS", 3, 2) as usize,
            open_rate: std::env::var("BENCH_OPEN_RATE").ok().and_then(|v| v.parse().ok()).unwrap_or(0.0),
            open_rate_fallback: if quick { 5.0 } else { 24.0 },
            open_hold_ms: n("OPEN_HOLD_MS", 100, 100),
            open_warmup_s: n("OPEN_WARMUP_S", 10, 3),
            open_secs: n("OPEN_SECS", 60, 10),
            repeats: n("REPEATS", 3, 3) as usize,
            repeat_throughput_warmup_s: n("REPEAT_THROUGHPUT_WARMUP_S", 5, 2),
            repeat_throughput_secs: n("REPEAT_THROUGHPUT_SECS", 30, 5),
            held_pods: n("HELD_PODS", 1000, 30) as usize,
            held_claims: n("HELD_CLAIMS", 100, 10) as usize,
            held_waiters: n("HELD_WAITERS", 100, 10) as usize,
            held_settle_s: n("HELD_SETTLE_S", 10, 3),
            held_secs: n("HELD_SECS", 60, 10),
            semaphore_max_holders: n("SEMAPHORE_MAX_HOLDERS", 5, 5) as usize,
            semaphore_clients: n("SEMAPHORE_CLIENTS", 50, 20) as usize,
            semaphore_rounds: n("SEMAPHORE_ROUNDS", 5, 2) as usize,
            semaphore_hold_ms: n("SEMAPHORE_HOLD_MS", 100, 100),
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
        put("oneshot_runs", self.oneshot_runs.to_string());
        put("throughput", format!("{} locks, {} s", self.throughput_locks, self.throughput_secs));
        put("herd_waiters", self.herd_waiters.to_string());
        put("scale_locks", self.scale_locks.to_string());
        put(
            "lease_cost",
            format!(
                "kle polls {:?} ms ({}×{}), klm tuned {}/{} s ({}×{})",
                self.kle_polls_ms,
                self.kle_pairs,
                self.kle_rounds,
                self.klm_tuned.0,
                self.klm_tuned.1,
                self.klm_tuned_pairs,
                self.klm_tuned_rounds
            ),
        );
        put(
            "open_loop",
            format!(
                "{} locks, {} s after {} s warm-up, hold {} ms, rate {}",
                self.throughput_locks,
                self.open_secs,
                self.open_warmup_s,
                self.open_hold_ms,
                if self.open_rate > 0.0 { format!("{}/s", self.open_rate) } else { "half the closed loop".into() }
            ),
        );
        put(
            "repeats",
            format!(
                "{} (repeats 2.. : handover n={}, failover {} locks, throughput {} s after {} s)",
                self.repeats,
                self.handovers,
                self.failover_locks,
                self.repeat_throughput_secs,
                self.repeat_throughput_warmup_s
            ),
        );
        put(
            "held",
            format!(
                "{} pod holders, {} renewing claims, {} pod waiters; {} s window after {} s",
                self.held_pods, self.held_claims, self.held_waiters, self.held_secs, self.held_settle_s
            ),
        );
        put(
            "semaphore",
            format!(
                "maxHolders {}, {} clients × {} cycles, hold {} ms",
                self.semaphore_max_holders, self.semaphore_clients, self.semaphore_rounds, self.semaphore_hold_ms
            ),
        );
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
    // The bench's own clients (the `leasehold::holder` library) log to stderr when `RUST_LOG` is
    // set, e.g. `RUST_LOG=leasehold::holder=debug` to see why arrivals fall back to the claim.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
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

/// One Lease crate configuration of the latency vs API cost table: library, namespace tag,
/// label, kube-lease-manager's (duration, grace) if tuned, kube-leader-election's poll period (ms).
type CrateRun = (&'static str, String, String, Option<(u64, u64)>, u64);

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
                step(&mut r, "handover/leasehold", ours::handover(&env, "handover", cfg.handovers, ms(cfg.hold_ms)))
                    .await
        {
            r.lease_cost.push(LeaseCost {
                library: OURS.into(),
                config: "operator defaults, 15 s lease (holders renew every 5 s)".into(),
                latency: v.clone(),
            });
            r.handover.insert(OURS.into(), v);
        }
        if selected("pods") {
            r.pod_handover =
                step(&mut r, "pod-handover/leasehold", ours::pod_handover(&env, cfg.pods, &cfg.pod_run_for)).await;
        }
        if selected("failover")
            && let Some(v) =
                step(&mut r, "failover/leasehold", ours::failover(&env, "failover", cfg.failover_locks)).await
        {
            r.failover.insert(OURS.into(), v);
        }
        if selected("herd")
            && let Some(v) =
                step(&mut r, "herd/leasehold", ours::herd(&env, cfg.herd_waiters, ms(cfg.herd_hold_ms))).await
        {
            r.herd.insert(OURS.into(), v);
        }
        if selected("oneshot") {
            r.oneshot = step(
                &mut r,
                "oneshot/leasehold",
                ours::oneshot(&env, "oneshot", cfg.oneshot_runs, Duration::from_secs(1)),
            )
            .await;
        }
        if selected("throughput") {
            let (warmup, window) =
                (Duration::from_secs(cfg.throughput_warmup_s), Duration::from_secs(cfg.throughput_secs));
            r.throughput = step(
                &mut r,
                "throughput/leasehold",
                ours::throughput(&env, "throughput", cfg.throughput_locks, warmup, window),
            )
            .await;
        }
        if selected("open-loop") {
            let (rate, from) = if cfg.open_rate > 0.0 {
                (cfg.open_rate, "BENCH_OPEN_RATE".to_string())
            } else if let Some(t) = r.throughput.as_ref().filter(|t| t.grants_per_s > 0.0) {
                (
                    t.grants_per_s / 2.0,
                    format!("half the closed loop's {:.1} grants/s (the saturation point)", t.grants_per_s),
                )
            } else {
                (cfg.open_rate_fallback, "fixed (the closed loop was not run in this run)".to_string())
            };
            r.throughput_open = step(
                &mut r,
                "throughput-open-loop/leasehold",
                ours::throughput_open(
                    &env,
                    cfg.throughput_locks,
                    rate,
                    from,
                    ms(cfg.open_hold_ms),
                    Duration::from_secs(cfg.open_warmup_s),
                    Duration::from_secs(cfg.open_secs),
                ),
            )
            .await;
        }
    }
    // A semaphore under contention (Leasehold only: the Lease crates have no semaphore).
    if lib_selected(OURS) && selected("semaphore") {
        r.semaphore = step(
            &mut r,
            "semaphore/leasehold",
            ours::semaphore(
                &env,
                cfg.semaphore_max_holders,
                cfg.semaphore_clients,
                cfg.semaphore_rounds,
                ms(cfg.semaphore_hold_ms),
            ),
        )
        .await;
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
    // The Lease crates' voluntary handovers, one configuration at a time (each alone on the
    // cluster, so the API server's counters are its own): the defaults are scenario 1's columns;
    // with `lease-cost`, kube-leader-election at other poll periods and kube-lease-manager tuned.
    let default_poll = 5000;
    if selected("handover") || selected("lease-cost") {
        let mut runs: Vec<CrateRun> = vec![];
        if klm_on {
            if selected("handover") {
                runs.push((
                    KLM,
                    "klm-handover".into(),
                    "defaults: lease 30 s, grace 5 s (renews every 25 s)".into(),
                    None,
                    0,
                ));
            }
            if selected("lease-cost") {
                let (d, g) = cfg.klm_tuned;
                runs.push((
                    KLM,
                    "klm-handover-tuned".into(),
                    format!(
                        "tuned: lease {d} s, grace {g} s (renews every {} s; the crate's doc example)",
                        d.saturating_sub(g)
                    ),
                    Some((d, g)),
                    0,
                ));
            }
        }
        if kle_on {
            for &poll in &cfg.kle_polls_ms {
                let default = poll == default_poll;
                if (default && selected("handover")) || (!default && selected("lease-cost")) {
                    let label = format!(
                        "poll every {} s{}, ttl 15 s",
                        poll as f64 / 1000.0,
                        if default { " (documented)" } else { "" }
                    );
                    runs.push((KLE, format!("kle-handover-{poll}ms"), label, None, poll));
                }
            }
        }
        for (lib, tag, label, timing, poll) in runs {
            let name = format!("handover/{lib} ({label})");
            let out = if lib == KLM {
                let (pairs, rounds) = if timing.is_some() {
                    (cfg.klm_tuned_pairs, cfg.klm_tuned_rounds)
                } else {
                    (cfg.klm_pairs, cfg.klm_rounds)
                };
                step(&mut r, &name, klm::handover(&env, &tag, pairs, rounds, competitor_hold, timing)).await
            } else {
                step(&mut r, &name, kle::handover(&env, &tag, cfg.kle_pairs, cfg.kle_rounds, competitor_hold, ms(poll)))
                    .await
            };
            if let Some(v) = out {
                if timing.is_none() && (lib == KLM || poll == default_poll) {
                    r.handover.insert(lib.into(), v.clone());
                }
                r.lease_cost.push(LeaseCost { library: lib.into(), config: label, latency: v });
            }
        }
    }
    // The Lease crates' failovers wait for their timers (seconds), not for the API server: they
    // run side by side with each other.
    if selected("failover") && (klm_on || kle_on) {
        eprintln!("[bench] ---- failover/Lease crates, side by side (load {})", loadavg());
        let t = Instant::now();
        let (a, b) = tokio::join!(
            async { if klm_on { Some(klm::failover(&env, cfg.failover_locks).await) } else { None } },
            async { if kle_on { Some(kle::failover(&env, cfg.failover_locks).await) } else { None } }
        );
        r.wall_s.insert("failover/Lease crates, side by side".into(), t.elapsed().as_secs_f64());
        for (lib, res) in [(KLM, a), (KLE, b)] {
            if let Some(v) = record(&mut r, &format!("failover/{lib}"), res) {
                r.failover.insert(lib.into(), v);
            }
        }
    }
    // Repeats 2.. of Leasehold's headline scenarios (repeat 1 is the main run above).
    if lib_selected(OURS) && selected("repeats") && cfg.repeats > 1 {
        let mut rep = results::Repeats {
            method: format!(
                "repeat 1 is the main run; repeats 2..{}: handover n={}, failover {} locks, closed-loop throughput {} locks for {} s after {} s warm-up; each in its own namespace with its own operator process, one after the other",
                cfg.repeats,
                cfg.handovers,
                cfg.failover_locks,
                cfg.throughput_locks,
                cfg.repeat_throughput_secs,
                cfg.repeat_throughput_warmup_s
            ),
            ..Default::default()
        };
        for k in 2..=cfg.repeats {
            let h = step(
                &mut r,
                &format!("repeat {k}/handover"),
                ours::handover(&env, &format!("handover-r{k}"), cfg.handovers, ms(cfg.hold_ms)),
            )
            .await;
            rep.handover.push(h);
            let f = step(
                &mut r,
                &format!("repeat {k}/failover"),
                ours::failover(&env, &format!("failover-r{k}"), cfg.failover_locks),
            )
            .await;
            rep.failover.push(f);
            let t = step(
                &mut r,
                &format!("repeat {k}/throughput"),
                ours::throughput(
                    &env,
                    &format!("throughput-r{k}"),
                    cfg.throughput_locks,
                    Duration::from_secs(cfg.repeat_throughput_warmup_s),
                    Duration::from_secs(cfg.repeat_throughput_secs),
                ),
            )
            .await;
            rep.throughput.push(t);
        }
        rep.spread = spread(&r, &rep);
        r.repeats = Some(rep);
    }
    // Scale: the burst (alone: it saturates the API server's writes), the restart, then the same
    // namespace with held locks and waiters.
    if lib_selected(OURS) && (selected("scale") || selected("held")) {
        let budget = Duration::from_secs(cfg.scale_setup_budget_s);
        let setup =
            step(&mut r, "scale/leasehold setup", ours::scale_setup(&env, cfg.scale_locks, cfg.scale_batch, budget))
                .await;
        if let Some(setup) = setup {
            let ns = setup.ns();
            if selected("scale") {
                r.scale =
                    step(&mut r, "scale/leasehold", ours::scale(&env, setup, Duration::from_secs(cfg.scale_idle_s)))
                        .await;
            }
            if selected("held") {
                let sizes = ours::HeldSizes {
                    pod_holders: cfg.held_pods,
                    claim_holders: cfg.held_claims,
                    pod_waiters: cfg.held_waiters,
                    settle: Duration::from_secs(cfg.held_settle_s),
                    window: Duration::from_secs(cfg.held_secs),
                    timeout: Duration::from_secs(600),
                };
                if let Some(h) =
                    step(&mut r, "scale held/leasehold", ours::scale_held(&env, &ns, cfg.scale_locks, sizes)).await
                {
                    r.scale.get_or_insert_with(Default::default).held = Some(h);
                }
            }
            env.finished(&ns);
        }
    }

    env.delete_finished().await;
    r.machine.insert("load_end".into(), loadavg());
    let total = started.elapsed().as_secs_f64();
    r.wall_s.insert("total".into(), total);
    std::fs::write(env.out_dir.join("results.json"), serde_json::to_string_pretty(&r)?)?;
    let png = env.out_dir.join("handover-cdf.png");
    if let Err(e) = report::plot(&r, &png) {
        r.problems.push(format!("plot: {e:#}"));
    }
    let md = report::markdown(&r);
    std::fs::write(env.out_dir.join("report.md"), &md)?;
    println!("\n{md}");
    println!("Written: {}/{{report.md,results.json,handover-cdf.png}}", env.out_dir.display());
    println!("Total wall time: {total:.0} s ({:.1} min)", total / 60.0);
    Ok(())
}

/// min / median / max of the headline figures over repeat 1 (the main run) and the repeats.
fn spread(r: &Results, rep: &results::Repeats) -> Vec<results::Spread> {
    use results::Spread;
    let nan = f64::NAN;
    let hs: Vec<Option<&results::Latency>> =
        std::iter::once(r.handover.get(OURS)).chain(rep.handover.iter().map(Option::as_ref)).collect();
    let fs: Vec<Option<&results::Failover>> =
        std::iter::once(r.failover.get(OURS)).chain(rep.failover.iter().map(Option::as_ref)).collect();
    let ts: Vec<Option<&results::Throughput>> =
        std::iter::once(r.throughput.as_ref()).chain(rep.throughput.iter().map(Option::as_ref)).collect();
    vec![
        Spread::new("voluntary handover p50", "ms", hs.iter().map(|h| h.map_or(nan, |h| h.summary.p50)).collect()),
        Spread::new("voluntary handover p99", "ms", hs.iter().map(|h| h.map_or(nan, |h| h.summary.p99)).collect()),
        Spread::new(
            "failover from the last renewal − lease, p50",
            "ms",
            fs.iter().map(|f| f.map_or(nan, |f| f.from_renewal_minus_lease.p50)).collect(),
        ),
        Spread::new(
            "failover from the last renewal − lease, max",
            "ms",
            fs.iter().map(|f| f.map_or(nan, |f| f.from_renewal_minus_lease.max)).collect(),
        ),
        Spread::new("throughput grants/s", "grants/s", ts.iter().map(|t| t.map_or(nan, |t| t.grants_per_s)).collect()),
        Spread::new(
            "throughput writes per grant",
            "writes",
            ts.iter().map(|t| t.map_or(nan, |t| t.traffic.writes_per)).collect(),
        ),
    ]
}
