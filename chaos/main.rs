//! Chaos run (`make chaos`): real holders of every kind on several locks, a nemesis that injects
//! real faults into the local control plane, the operator and the holders, and a checker that
//! reads the history afterwards ([`check`]). Jepsen's shape: workload, nemesis, checker.
//!
//! `cargo test --test chaos -- [--duration 10m] [--seed N] [--locks N] [--semaphore N]
//! [--plant ignore-release] [--out DIR] [--cluster NAME]`
//! runs one run. The last lock is a semaphore with `maxHolders` N (`--semaphore`, 2 by default;
//! 0: none) when there are at least two locks; the others are plain locks. When there are two
//! plain locks or more, gated pods that want the first two at once (`leasehold.dev/locks`, issue
//! 14) join the workload; each of their grants is a section on both locks, and one seen running
//! without a token for every lock of its set fails the run. Without `--duration` (as `make test` runs it) it runs the CI pair: a short run
//! that must be clean, and a short run with a planted bug (a library holder that keeps writing
//! after its release) that the checker must catch. Exit status 1 when a verdict is wrong.
//!
//! Everything runs on its own control plane (`e2e/cluster.sh up chaos`, or `--cluster NAME`) and
//! PostgreSQL (`e2e/harness/postgres.sh up chaos`), both stopped at the end. Output in `target/chaos/`:
//! `history.json` (sections, fenced writes, faults), `summary.json`, `grants.png`.

mod check;
mod sink;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use check::{Fault, Kind, Section};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, Config, ResourceExt};
use leasehold::crd::{DistributedLock, DistributedLockClaim};
use leasehold::holder::Holder;
use leasehold::lock::LOCKS_ANNOTATION;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

/// How long a critical section works, ms: usually a random time in `short`, one time in twenty
/// 2-4 s, past the renew deadline (2 s for the 3 s lease), so that a holder cut off from the
/// API server in its section has to notice the loss and stop.
fn work_ms(short: std::ops::Range<u64>) -> u64 {
    let mut rng = rand::rng();
    if rng.random_bool(0.05) { rng.random_range(2000..4000) } else { rng.random_range(short) }
}

/// Nanoseconds of `CLOCK_MONOTONIC`: one clock for the runner and every section process.
fn now_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Lease duration of every lock, seconds (short, so that pauses outlast it).
const LEASE_SECS: u64 = 3;
/// The operator's leader-election lease (`leader::LEASE_DURATION_SECONDS`).
const LEADER_LEASE_SECS: u64 = 15;

#[derive(Clone, Debug)]
struct Args {
    duration: Duration,
    seed: u64,
    plant: bool,
    out: PathBuf,
    locks: usize,
    /// Control plane and PostgreSQL run name (`e2e/cluster.sh up <cluster>`).
    cluster: String,
    /// `maxHolders` of the last lock (0: no semaphore).
    semaphore: u32,
}

impl Args {
    /// `maxHolders` of the semaphore locks: the last lock, when there are two or more.
    fn limits(&self) -> BTreeMap<String, u32> {
        let mut limits = BTreeMap::new();
        if self.semaphore > 0 && self.locks >= 2 {
            limits.insert(format!("l{}", self.locks - 1), self.semaphore);
        }
        limits
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("section") {
        return section_main(&argv[2..]);
    }
    let value = |flag: &str| argv.iter().position(|a| a == flag).and_then(|i| argv.get(i + 1)).cloned();
    let seed = value("--seed").or(std::env::var("CHAOS_SEED").ok()).map_or(1, |s| s.parse().expect("--seed N"));
    let out = value("--out").map_or(repo().join("target/chaos"), PathBuf::from);
    let locks = value("--locks").map_or(3, |s| s.parse().expect("--locks N"));
    let cluster = value("--cluster").unwrap_or_else(|| "chaos".into());
    let semaphore = value("--semaphore").map_or(2, |s| s.parse().expect("--semaphore N"));
    let duration = value("--duration").or(std::env::var("CHAOS_DURATION").ok());
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let code = match duration {
        Some(d) => {
            let duration = *d.parse::<humantime::Duration>().expect("--duration like 10m");
            let plant = value("--plant").is_some_and(|p| p == "ignore-release");
            let args = Args { duration, seed, plant, out, locks, cluster, semaphore };
            let report = rt.block_on(run(&args));
            i32::from(!report.ok())
        }
        None => {
            // The CI pair: a clean short run, then the same checker must catch a planted bug.
            let clean = Args {
                duration: Duration::from_secs(100),
                seed,
                plant: false,
                out: out.clone(),
                locks,
                cluster,
                semaphore,
            };
            let clean_ok = rt.block_on(run(&clean)).ok();
            let planted = Args { duration: Duration::from_secs(40), plant: true, out: out.join("planted"), ..clean };
            let caught = !rt.block_on(run(&planted)).ok();
            println!(
                "chaos CI: clean run {}, planted bug {}",
                verdict(clean_ok),
                if caught { "caught" } else { "MISSED" }
            );
            i32::from(!(clean_ok && caught))
        }
    };
    std::process::exit(code);
}

fn verdict(ok: bool) -> &'static str {
    if ok { "passed" } else { "FAILED" }
}

// ------------------------------------------------------------------------------------------
// The section process: the command a `leasehold lock` holder runs.

/// Appends one event line (`start`, `end`, `dead`) of a section to the section log: one write(2)
/// per line on an O_APPEND file, so lines of concurrent processes never interleave (`writeln!`
/// would write the pieces one by one, and did). The section's slot is read from its `start` line.
fn append_event(log: &Path, ev: &str, lock: &str, holder: &str, token: i64, slot: u32) {
    let mut line =
        json!({"ev": ev, "lock": lock, "holder": holder, "token": token, "slot": slot, "t": now_ns()}).to_string();
    line.push('\n');
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
    f.write_all(line.as_bytes()).expect("section log");
}

/// A section's pid file: `<pid> <token>`.
fn read_pid_file(path: &Path) -> Option<(u32, i64)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut parts = text.split_whitespace();
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Whether process `pid` is gone or a zombie (it can run no code any more).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()) == Some('Z'),
    }
}

/// `section --lock L --pg PORT --log FILE --pids DIR`: records its start, writes to the fenced
/// sink with `$LEASEHOLD_FENCING_TOKEN` in slot `$LEASEHOLD_SLOT`, works 300-900 ms, writes again, records its end. On
/// SIGTERM (the lock was lost) it records its end and exits 143.
fn section_main(args: &[String]) {
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned().unwrap();
    let (lock, port, log, pids) = (value("--lock"), value("--pg"), value("--log"), value("--pids"));
    let token: i64 = std::env::var("LEASEHOLD_FENCING_TOKEN").expect("token").parse().expect("token");
    let holder = std::env::var("LEASEHOLD_HOLDER").expect("holder identity");
    let slot: u32 = std::env::var("LEASEHOLD_SLOT").expect("slot").parse().expect("slot");
    let record = |ev: &str| append_event(Path::new(&log), ev, &lock, &holder, token, slot);
    // The start first, then the pid file: the nemesis picks holders to pause by their pid file,
    // so a pause can never fall between the two and make the start look later than it was
    // (a run once saw a paused holder's start recorded after the next holder's).
    record("start");
    let _ = std::fs::write(Path::new(&pids).join(&holder), format!("{} {token}", std::process::id()));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
        let work = async {
            let db = sink::connect(port.parse().unwrap()).await.ok()?;
            sink::write(&db, &lock, slot, &holder, token, now_ns()).await.ok()?;
            let ms = work_ms(300..900);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            sink::write(&db, &lock, slot, &holder, token, now_ns()).await.ok()
        };
        let code = tokio::select! {
            _ = work => 0,
            _ = term.recv() => 143,
        };
        record("end");
        std::process::exit(code);
    });
}

// ------------------------------------------------------------------------------------------
// The run.

/// Everything the workers and the nemesis share.
struct World {
    client: Client,
    cluster: String,
    ns: String,
    locks: Vec<String>,
    /// `maxHolders` of the semaphore locks (a lock not in it: a plain lock).
    limits: BTreeMap<String, u32>,
    pg_port: u16,
    out: PathBuf,
    kubeconfig: PathBuf,
    cluster_dir: PathBuf,
    /// Stop starting new work.
    stopping: AtomicBool,
    sections: Mutex<Vec<Section>>,
    faults: Mutex<Vec<Fault>>,
    /// Waiters still waiting: identity -> lock.
    waiting: Mutex<BTreeMap<String, String>>,
    /// Waits that ended with an error (the waiter was told why) after the faults healed:
    /// reported, not a failure ("granted or told why not").
    lost: AtomicU64,
    /// `leasehold lock` supervisors: identity -> pid.
    cli_pids: Mutex<BTreeMap<String, u32>>,
    operators: Mutex<Vec<Operator>>,
    /// Faults the harness could not heal: the run proves nothing then, and fails.
    harness_errors: Mutex<Vec<String>>,
    plant: bool,
    seq: AtomicU64,
    /// The API server's address (`127.0.0.1:PORT`), for the cut points.
    apiserver: String,
    /// The client configuration the library holders start from.
    config: Config,
    /// A cut point per holder slot (`cli-l0-1`, `lib-l0-0`): `true` cuts it off.
    cuts: Mutex<BTreeMap<String, tokio::sync::watch::Sender<bool>>>,
    /// Library holder slots inside their critical section now.
    holding: Mutex<BTreeSet<String>>,
    /// Multi-lock pods seen running without a token for every lock of their set.
    partial: Mutex<Vec<String>>,
}

struct Operator {
    instance: String,
    child: Option<Child>,
    admin_port: u16,
    /// Killed on purpose; restart at this time (ns).
    restart_at: Option<u64>,
}

impl World {
    fn record(&self, s: Section) {
        self.sections.lock().unwrap().push(s);
    }
    fn next(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }
}

fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0]).args(&args[1..]).current_dir(repo()).stderr(Stdio::inherit()).output().unwrap();
    assert!(out.status.success(), "{args:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn export_value(out: &str, var: &str) -> String {
    let prefix = format!("export {var}=");
    out.lines().rev().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_else(|| panic!("no {var}")).trim().to_string()
}

async fn run(args: &Args) -> check::Report {
    std::fs::create_dir_all(&args.out).unwrap();
    let cluster = args.cluster.as_str();
    let kubeconfig = PathBuf::from(export_value(&sh(&["bash", "e2e/cluster.sh", "up", cluster]), "KUBECONFIG"));
    let pg_port: u16 =
        export_value(&sh(&["bash", "e2e/harness/postgres.sh", "up", cluster]), "LEASEHOLD_PG_PORT").parse().unwrap();
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let cfg = Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
    let apiserver = cfg.cluster_url.authority().expect("API server address").to_string();
    let client = Client::try_from(cfg.clone()).unwrap();
    install_crds(&client).await;
    let ns = format!("chaos-{}-{}", args.seed, std::process::id());
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
        .await
        .unwrap();
    let locks: Vec<String> = (0..args.locks).map(|i| format!("l{i}")).collect();
    let limits = args.limits();
    let slots = |l: &String| limits.get(l).copied().unwrap_or(1);
    let db = sink::connect(pg_port).await.expect("PostgreSQL");
    sink::reset(&db, &locks.iter().map(|l| (l.clone(), slots(l))).collect::<Vec<_>>()).await.unwrap();
    let lock_api: Api<DistributedLock> = Api::namespaced(client.clone(), &ns);
    for l in &locks {
        let mut spec = json!({"leaseDurationSeconds": LEASE_SECS, "nodeLossTimeoutSeconds": LEASE_SECS + 2});
        if let Some(n) = limits.get(l) {
            spec["maxHolders"] = json!(n);
        }
        let lock = json!({"apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLock", "metadata": {"name": l},
                          "spec": spec});
        lock_api.create(&PostParams::default(), &serde_json::from_value(lock).unwrap()).await.unwrap();
    }
    let _ = std::fs::remove_dir_all(args.out.join("pids"));
    std::fs::create_dir_all(args.out.join("pids")).unwrap();
    let _ = std::fs::remove_file(args.out.join("sections.jsonl"));
    for i in 0..2 {
        let _ = std::fs::remove_file(args.out.join(format!("op-{i}.log")));
    }
    let operators =
        (0..2).map(|i| start_operator_proc(&format!("op-{i}"), &ns, &args.out, &kubeconfig, None)).collect();
    let world = Arc::new(World {
        client: client.clone(),
        cluster: args.cluster.clone(),
        ns: ns.clone(),
        locks: locks.clone(),
        limits: limits.clone(),
        pg_port,
        out: args.out.clone(),
        cluster_dir: kubeconfig.parent().unwrap().to_path_buf(),
        kubeconfig,
        stopping: AtomicBool::new(false),
        sections: Mutex::default(),
        faults: Mutex::default(),
        waiting: Mutex::default(),
        lost: AtomicU64::new(0),
        cli_pids: Mutex::default(),
        operators: Mutex::new(operators),
        harness_errors: Mutex::default(),
        plant: args.plant,
        seq: AtomicU64::new(0),
        apiserver,
        config: cfg,
        cuts: Mutex::default(),
        holding: Mutex::default(),
        partial: Mutex::default(),
    });
    let started = now_ns();
    println!(
        "chaos: namespace {ns}, {} locks (semaphores: {limits:?}), {:?}, seed {}, plant {}",
        locks.len(),
        args.duration,
        args.seed,
        args.plant
    );

    let mut tasks = vec![tokio::spawn(supervise_operators(world.clone()))];
    tasks.push(tokio::spawn(watch_pods(world.clone())));
    for l in &locks {
        // A semaphore of N gets N + 1 library holders, so that they contend among themselves too.
        let library = if limits.contains_key(l) { slots(l) as usize + 1 } else { 2 };
        for i in 0..library {
            tasks.push(tokio::spawn(library_worker(world.clone(), l.clone(), i)));
        }
        for i in 0..2 {
            tasks.push(tokio::spawn(cli_worker(world.clone(), l.clone(), i)));
        }
        tasks.push(tokio::spawn(pod_worker(world.clone(), l.clone())));
    }
    let plain: Vec<String> = locks.iter().filter(|l| !limits.contains_key(*l)).cloned().collect();
    if let [a, b, ..] = plain.as_slice() {
        tasks.push(tokio::spawn(multi_pod_worker(world.clone(), vec![a.clone(), b.clone()])));
    }
    nemesis(world.clone(), args.duration, args.seed).await;
    let healed = now_ns();
    // Every fault has healed: stop starting work; every waiter must now be served or told why.
    world.stopping.store(true, Ordering::SeqCst);
    let bound = Duration::from_secs(90);
    let deadline = tokio::time::Instant::now() + bound;
    while tokio::time::Instant::now() < deadline && !world.waiting.lock().unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let left: Vec<(String, String)> = world.waiting.lock().unwrap().clone().into_iter().collect();
    tokio::time::sleep(Duration::from_secs(2)).await; // last sections end, last writes land
    for t in &tasks {
        t.abort();
    }
    for op in world.operators.lock().unwrap().iter_mut() {
        if let Some(c) = op.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    // The history.
    let mut sections = world.sections.lock().unwrap().clone();
    let (cli, bad) = cli_sections(&args.out.join("sections.jsonl"));
    sections.extend(cli);
    if bad > 0 {
        world.harness_errors.lock().unwrap().push(format!("{bad} unreadable lines in sections.jsonl"));
    }
    let writes = sink::history(&db).await.unwrap();
    let faults = world.faults.lock().unwrap().clone();
    let report = check::check(&sections, &writes, &faults, &limits);
    for (l, n) in &limits {
        // The run proves nothing about a semaphore that never had its N holders at once.
        let peak = report.peak.get(l).copied().unwrap_or(0);
        if peak < *n as usize {
            let why = format!("semaphore {l} (maxHolders {n}) never had more than {peak} holder(s) at once");
            eprintln!("chaos: {why}");
            world.harness_errors.lock().unwrap().push(why);
        }
    }
    let harness = world.harness_errors.lock().unwrap().clone();
    let lost = world.lost.load(Ordering::Relaxed);
    let summary = summarize(&report, &sections, &faults, &left, lost, &harness, started, healed, args);
    std::fs::write(
        args.out.join("history.json"),
        serde_json::to_string(&json!({"sections": sections, "writes": writes, "faults": faults})).unwrap(),
    )
    .unwrap();
    std::fs::write(args.out.join("summary.json"), serde_json::to_string_pretty(&summary).unwrap()).unwrap();
    plot(&args.out.join("grants.png"), &sections, &faults, started);
    println!("{}", serde_json::to_string_pretty(&summary).unwrap());
    let _ = nss.delete(&ns, &DeleteParams::default()).await;
    sh(&["bash", "e2e/cluster.sh", "down", cluster]);
    sh(&["bash", "e2e/harness/postgres.sh", "down", cluster]);
    let lost_waiters = !left.is_empty();
    let mut report = report;
    if lost_waiters {
        // Folded into the verdict: a lost waiter fails the run like a forbidden overlap.
        report.token_errors.push(("*".into(), format!("lost waiters: {left:?}"), 0, 0));
    }
    for p in world.partial.lock().unwrap().iter() {
        report.token_errors.push(("*".into(), format!("ran with a partial lock set: {p}"), 0, 0));
    }
    for e in world.harness_errors.lock().unwrap().iter() {
        report.token_errors.push(("*".into(), format!("harness: {e}"), 0, 0));
    }
    report
}

async fn install_crds(client: &Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in leasehold::crd::all_crds() {
        let name = crd.name_any();
        api.patch(&name, &PatchParams::apply("leasehold-chaos").force(), &Patch::Apply(&crd)).await.unwrap();
        let established = kube::runtime::wait::conditions::is_crd_established();
        kube::runtime::wait::await_condition(api.clone(), &name, established).await.unwrap();
    }
}

fn start_operator_proc(instance: &str, ns: &str, out: &Path, kubeconfig: &Path, port: Option<u16>) -> Operator {
    let admin_port =
        port.unwrap_or_else(|| std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port());
    let log = std::fs::OpenOptions::new().create(true).append(true).open(out.join(format!("{instance}.log"))).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["operator", "--namespace", ns, "--instance", instance])
        .args(["--admin-addr", &format!("127.0.0.1:{admin_port}")])
        .args(["--leader-elect", "--leader-election-namespace", ns, "--leader-election-lease", "le"])
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "info,kube=warn")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start operator");
    Operator { instance: instance.into(), child: Some(child), admin_port, restart_at: None }
}

/// Restarts an operator replica that exited (a deposed leader exits 1 by design; a killed one
/// comes back when the nemesis says).
async fn supervise_operators(w: Arc<World>) {
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut ops = w.operators.lock().unwrap();
        for op in ops.iter_mut() {
            let exited = op.child.as_mut().is_none_or(|c| c.try_wait().ok().flatten().is_some());
            let due = op.restart_at.is_none_or(|t| now_ns() >= t);
            if exited && due {
                *op = start_operator_proc(&op.instance, &w.ns, &w.out, &w.kubeconfig, Some(op.admin_port));
            }
        }
    }
}

// ------------------------------------------------------------------------------------------
// Workers.

/// A library holder: acquire, write, work, write, release; again.
async fn library_worker(w: Arc<World>, lock: String, i: usize) {
    let slot = format!("lib-{lock}-{i}");
    let mut config = w.config.clone();
    config.cluster_url = format!("https://127.0.0.1:{}", cut_point(&w, &slot).await).parse().unwrap();
    let client = Client::try_from(config).unwrap();
    let mut n = 0;
    // One `Holder` per worker, kept across its acquires: a standing claim on a single-holder
    // lock (issue 12), whose later acquires arrive by the Lease when they can.
    let standing_id = format!("{slot}-0");
    let holder = Holder::new(client.clone(), &w.ns, &lock, &standing_id);
    while !w.stopping.load(Ordering::SeqCst) {
        n += 1;
        let id = format!("{slot}-{n}");
        w.waiting.lock().unwrap().insert(standing_id.clone(), lock.clone());
        let result = holder.acquire(Some(Duration::from_secs(60))).await;
        w.waiting.lock().unwrap().remove(&standing_id);
        let guard = match result {
            Ok(g) => g,
            Err(e) => {
                if w.stopping.load(Ordering::SeqCst) {
                    eprintln!("chaos: {id} told why it was not served, after the faults healed: {e}");
                    w.lost.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let (token, held_slot) = (guard.token(), guard.slot());
        let start = now_ns();
        w.holding.lock().unwrap().insert(slot.clone());
        let db = sink::connect(w.pg_port).await.ok();
        let work = async {
            if let Some(db) = &db {
                let _ = sink::write(db, &lock, held_slot, &id, token, now_ns()).await;
            }
            let ms = work_ms(100..300);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            if let Some(db) = &db {
                let _ = sink::write(db, &lock, held_slot, &id, token, now_ns()).await;
            }
        };
        tokio::select! {
            _ = work => {}
            _ = guard.lost() => {}
        }
        let mut end = now_ns();
        w.holding.lock().unwrap().remove(&slot);
        // On l0 and on every semaphore lock.
        let planted = w.plant && (lock == "l0" || w.limits.contains_key(&lock)) && i == 0;
        let _ = guard.release().await;
        if planted {
            // The planted bug: this holder goes on working after it released the lock.
            tokio::time::sleep(Duration::from_millis(400)).await;
            if let Some(db) = &db {
                let _ = sink::write(db, &lock, held_slot, &id, token, now_ns()).await;
            }
            end = now_ns();
        }
        w.record(Section { lock: lock.clone(), holder: id, kind: Kind::Library, token, slot: held_slot, start, end });
    }
}

/// A `leasehold lock` holder running the section process; again.
async fn cli_worker(w: Arc<World>, lock: String, i: usize) {
    let slot = format!("cli-{lock}-{i}");
    let port = cut_point(&w, &slot).await;
    let kubeconfig = w.out.join(format!("kubeconfig-{slot}"));
    let text = std::fs::read_to_string(&w.kubeconfig).unwrap();
    std::fs::write(&kubeconfig, text.replace(&w.apiserver, &format!("127.0.0.1:{port}"))).unwrap();
    let mut n = 0;
    while !w.stopping.load(Ordering::SeqCst) {
        n += 1;
        let id = format!("{slot}-{n}");
        let exe = std::env::current_exe().unwrap();
        let (log, pids) = (w.out.join("sections.jsonl"), w.out.join("pids"));
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args(["lock", &lock, "-n", &w.ns, "--identity", &id, "--wait-timeout", "60s", "--"])
            .arg(&exe)
            .args(["section", "--lock", &lock, "--pg", &w.pg_port.to_string()])
            .arg("--log")
            .arg(&log)
            .arg("--pids")
            .arg(&pids)
            .env("KUBECONFIG", &kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("leasehold lock");
        w.waiting.lock().unwrap().insert(id.clone(), lock.clone());
        w.cli_pids.lock().unwrap().insert(id.clone(), child.id().unwrap_or(0));
        let watch_grant = {
            let (w, id, pids, log, lock) = (w.clone(), id.clone(), pids.clone(), log.clone(), lock.clone());
            tokio::spawn(async move {
                while !pids.join(&id).exists() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                w.waiting.lock().unwrap().remove(&id);
                // When the section process dies: the end of its critical section when it was
                // killed (SIGKILL by the watchdog or the supervisor) and could not record one.
                // Its own task, not aborted when the supervisor exits.
                let pid = read_pid_file(&pids.join(&id));
                if let Some((pid, token)) = pid {
                    tokio::spawn(async move {
                        while !process_gone(pid) {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        append_event(&log, "dead", &lock, &id, token, 0);
                    });
                }
            })
        };
        let out = child.wait_with_output().await.unwrap();
        watch_grant.abort();
        let was_waiting = w.waiting.lock().unwrap().remove(&id).is_some();
        w.cli_pids.lock().unwrap().remove(&id);
        // Exit 1 with a reason (wait timeout, claim deleted, grant expired) is "told why":
        // reported when it happens after the faults healed, not a lost waiter.
        if was_waiting && w.stopping.load(Ordering::SeqCst) {
            eprintln!(
                "chaos: {id} told why it was not served, after the faults healed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            w.lost.fetch_add(1, Ordering::Relaxed);
        }
        if !was_waiting {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A cut point for one holder slot: a TCP relay on loopback between the holder and the API
/// server, returning its port. While the slot's switch in `w.cuts` is on, the relay moves no byte
/// either way and new connections wait: a partition, as the holder sees it (requests and
/// watches hang, nothing is reset). When it heals, what was held back is delivered late, as TCP
/// retransmission would deliver it (a late renewal or release then meets the resourceVersion
/// precondition).
async fn cut_point(w: &World, slot: &str) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("cut point");
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::watch::channel(false);
    w.cuts.lock().unwrap().insert(slot.to_string(), tx);
    let upstream = w.apiserver.clone();
    tokio::spawn(async move {
        while let Ok((down, _)) = listener.accept().await {
            let (upstream, mut rx) = (upstream.clone(), rx.clone());
            tokio::spawn(async move {
                if rx.wait_for(|cut| !cut).await.is_err() {
                    return;
                }
                let Ok(up) = tokio::net::TcpStream::connect(&upstream).await else { return };
                let (down_r, down_w) = down.into_split();
                let (up_r, up_w) = up.into_split();
                tokio::join!(relay(down_r, up_w, rx.clone()), relay(up_r, down_w, rx));
            });
        }
    });
    port
}

/// Copies `from` to `to`, holding the bytes while the cut is on.
async fn relay(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut cut: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if cut.wait_for(|c| !c).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        // Read before the cut, delivered after it heals.
        if cut.wait_for(|c| !c).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Keeps one gated pod waiting per lock (N on a semaphore of N); kwok completes each 100-400 ms
/// after it starts.
async fn pod_worker(w: Arc<World>, lock: String) {
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), &w.ns);
    let (mut n, most) = (0, w.limits.get(&lock).copied().unwrap_or(1) as usize);
    while !w.stopping.load(Ordering::SeqCst) {
        let waiting = w.waiting.lock().unwrap().values().filter(|l| **l == lock).count();
        let pending = w.waiting.lock().unwrap().keys().filter(|k| k.starts_with(&format!("pod-{lock}-"))).count();
        if pending < most && waiting < 3 + most {
            n += 1;
            let name = format!("pod-{lock}-{n}");
            let ms = rand::rng().random_range(100..400);
            let pod = json!({
                "metadata": {"name": name, "annotations": {"leasehold.dev/lock": lock, "pod-complete.stage.kwok.x-k8s.io/delay": format!("{ms}ms")}},
                "spec": {"schedulingGates": [{"name": "leasehold.dev/lock"}], "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "main", "image": "busybox"}]},
            });
            if pods.create(&PostParams::default(), &serde_json::from_value(pod).unwrap()).await.is_ok() {
                w.waiting.lock().unwrap().insert(name, lock.clone());
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Keeps one gated pod waiting that wants every lock of `set` at once (`leasehold.dev/locks`);
/// kwok completes it 100-400 ms after it starts.
async fn multi_pod_worker(w: Arc<World>, set: Vec<String>) {
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), &w.ns);
    let mut n = 0;
    while !w.stopping.load(Ordering::SeqCst) {
        let pending = w.waiting.lock().unwrap().keys().filter(|k| k.starts_with("mpod-")).count();
        if pending == 0 {
            n += 1;
            let name = format!("mpod-{n}");
            let ms = rand::rng().random_range(100..400);
            let pod = json!({
                "metadata": {"name": name, "annotations": {LOCKS_ANNOTATION: set.join(","), "pod-complete.stage.kwok.x-k8s.io/delay": format!("{ms}ms")}},
                "spec": {"schedulingGates": [{"name": "leasehold.dev/lock"}], "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "main", "image": "busybox"}]},
            });
            if pods.create(&PostParams::default(), &serde_json::from_value(pod).unwrap()).await.is_ok() {
                w.waiting.lock().unwrap().insert(name, set.join(","));
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Pod sections as a watch sees them: ungated with a token until Succeeded/Failed or gone (a
/// multi-lock pod: one section per lock of its set). The fenced write is done on the pod's
/// behalf when it is first seen ungated, once per lock.
async fn watch_pods(w: Arc<World>) {
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), &w.ns);
    let db = sink::connect(w.pg_port).await.expect("PostgreSQL");
    let mut open: BTreeMap<String, Vec<(String, i64, u32, u64)>> = BTreeMap::new();
    let mut done: std::collections::BTreeSet<String> = Default::default();
    let mut stream = watcher(pods.clone(), watcher::Config::default()).boxed();
    while let Some(ev) = stream.next().await {
        let now = now_ns();
        let (seen, gone): (Vec<Pod>, Vec<Pod>) = match ev {
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => (vec![p], vec![]),
            Ok(watcher::Event::Delete(p)) => (vec![], vec![p]),
            _ => continue,
        };
        for p in seen {
            let name = p.name_any();
            let gated = p.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref()).is_some_and(|g| !g.is_empty());
            let grants = check::pod_grants(p.annotations());
            let phase = p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
            let terminal = phase == "Succeeded" || phase == "Failed";
            let seen_before = open.contains_key(&name) || done.contains(&name);
            if let (false, false, false, Some(partial)) =
                (gated, seen_before, terminal, check::partial_set(&name, p.annotations()))
            {
                w.partial.lock().unwrap().push(partial);
            }
            if !gated && !seen_before && grants.iter().all(|g| g.1.is_some()) {
                w.waiting.lock().unwrap().remove(&name);
                let held: Vec<(String, i64, u32, u64)> =
                    grants.into_iter().map(|(l, t, slot)| (l, t.unwrap_or_default(), slot, now)).collect();
                for (lock, token, slot, _) in &held {
                    let _ = sink::write(&db, lock, *slot, &name, *token, now).await;
                }
                open.insert(name.clone(), held);
            }
            if terminal {
                w.waiting.lock().unwrap().remove(&name);
                for (lock, token, slot, start) in open.remove(&name).unwrap_or_default() {
                    w.record(Section { lock, holder: name.clone(), kind: Kind::Pod, token, slot, start, end: now });
                }
                if done.insert(name.clone()) {
                    let pods = pods.clone();
                    tokio::spawn(async move { pods.delete(&name, &DeleteParams::default()).await });
                }
            }
        }
        for p in gone {
            let name = p.name_any();
            w.waiting.lock().unwrap().remove(&name);
            for (lock, token, slot, start) in open.remove(&name).unwrap_or_default() {
                w.record(Section { lock, holder: name.clone(), kind: Kind::Pod, token, slot, start, end: now });
            }
        }
    }
}

/// Sections of the `leasehold lock` commands from the section log ([`check::sections_from_log`]),
/// and how many lines could not be read (the harness's own fault; it voids the run).
fn cli_sections(path: &Path) -> (Vec<Section>, usize) {
    check::sections_from_log(&std::fs::read_to_string(path).unwrap_or_default())
}

// ------------------------------------------------------------------------------------------
// The nemesis.

const FAULTS: &[(&str, u32)] = &[
    ("operator-kill", 3),
    ("leader-pause", 2),
    ("apiserver-restart", 2),
    ("etcd-pause", 3),
    ("kcm-restart", 2),
    ("holder-pause", 5),
    ("supervisor-pause", 3),
    ("node-loss", 1),
    ("lease-delete", 3),
    ("lease-edit", 3),
    ("claim-delete", 3),
    ("holder-cut", 4),
];

/// Injects faults at random times (seeded: the same seed gives the same schedule of kinds,
/// gaps and durations) until `duration` has passed, each healed after a random time; several
/// may be active at once. Returns when every fault has healed.
async fn nemesis(w: Arc<World>, duration: Duration, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let end = tokio::time::Instant::now() + duration;
    let total: u32 = FAULTS.iter().map(|f| f.1).sum();
    let mut active = vec![];
    // The first seconds without faults: the workload gets going.
    tokio::time::sleep(Duration::from_secs(5)).await;
    while tokio::time::Instant::now() < end {
        let mut pick = rng.random_range(0..total);
        let kind = FAULTS
            .iter()
            .find(|(_, weight)| {
                if pick < *weight {
                    true
                } else {
                    pick -= weight;
                    false
                }
            })
            .unwrap()
            .0;
        // Long faults only when the run is long enough to see the system recover from them.
        let long = matches!(kind, "node-loss" | "leader-pause");
        if long && duration < Duration::from_secs(300) {
            continue;
        }
        let hold = Duration::from_millis(match kind {
            "leader-pause" => (LEADER_LEASE_SECS + 2) * 1000 + rng.random_range(0..3000),
            "node-loss" => 45_000 + rng.random_range(0..5000),
            "holder-pause" | "supervisor-pause" | "holder-cut" => (LEASE_SECS + 1) * 1000 + rng.random_range(0..2000),
            "etcd-pause" => rng.random_range(500..4000),
            _ => rng.random_range(200..3000),
        });
        let pick_index = rng.random_range(0..1000usize);
        active.push(tokio::spawn(inject(w.clone(), kind, hold, pick_index)));
        active.retain(|t| !t.is_finished());
        tokio::time::sleep(Duration::from_millis(rng.random_range(1000..6000))).await;
    }
    for t in active {
        let _ = t.await;
    }
}

/// The worker slot of a holder identity: `cli-l0-1-17` -> `cli-l0-1`.
fn slot_of(id: &str) -> String {
    id.rsplit_once('-').map_or(id, |(slot, _)| slot).to_string()
}

fn pid_of(w: &World, component: &str) -> Option<i32> {
    std::fs::read_to_string(w.cluster_dir.join(format!("pids/{component}.pid"))).ok()?.trim().parse().ok()
}

fn signal(pid: i32, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
}

/// The replica that leads now (from the leader-election Lease), as an index.
async fn leader(w: &World) -> Option<usize> {
    let leases: Api<Lease> = Api::namespaced(w.client.clone(), &w.ns);
    let holder = leases.get_opt("le").await.ok().flatten()?.spec?.holder_identity?;
    w.operators.lock().unwrap().iter().position(|o| holder.starts_with(&format!("{}_", o.instance)))
}

async fn inject(w: Arc<World>, kind: &'static str, hold: Duration, pick: usize) {
    use nix::sys::signal::Signal::{SIGCONT, SIGKILL, SIGSTOP};
    // When the fault takes effect (reset after a wait for a target: the window the checker
    // excuses must not include that wait).
    let mut start = now_ns();
    let mut target = String::from("-");
    match kind {
        "operator-kill" | "leader-pause" => {
            let idx = leader(&w).await.unwrap_or(pick % 2);
            let pid = {
                let mut ops = w.operators.lock().unwrap();
                let op = &mut ops[idx];
                target = op.instance.clone();
                if kind == "operator-kill" {
                    op.restart_at = Some(now_ns() + hold.as_nanos() as u64);
                }
                op.child.as_ref().map(|c| c.id() as i32)
            };
            let Some(pid) = pid else { return };
            if kind == "operator-kill" {
                signal(pid, SIGKILL);
                tokio::time::sleep(hold).await;
            } else {
                signal(pid, SIGSTOP);
                tokio::time::sleep(hold).await;
                signal(pid, SIGCONT);
            }
        }
        "apiserver-restart" | "kcm-restart" => {
            let comp = if kind == "apiserver-restart" { "kube-apiserver" } else { "kube-controller-manager" };
            target = comp.into();
            if let Some(pid) = pid_of(&w, comp) {
                signal(-pid, SIGKILL);
            }
            tokio::time::sleep(hold).await;
            // The same process again, with the same arguments and data (not `up`: that starts
            // a fresh control plane when one component is missing).
            let cluster = w.cluster.clone();
            let restart = move || {
                Command::new("bash").args(["e2e/cluster.sh", "restart", &cluster, comp]).current_dir(repo()).output()
            };
            let out = tokio::task::spawn_blocking(restart).await.unwrap().expect("cluster.sh restart");
            if !out.status.success() {
                let why = format!("could not restart {comp}: {}", String::from_utf8_lossy(&out.stderr));
                eprintln!("chaos: {why}");
                w.harness_errors.lock().unwrap().push(why);
            }
        }
        "etcd-pause" | "node-loss" => {
            let comp = if kind == "etcd-pause" { "etcd" } else { "kwok" };
            target = if kind == "node-loss" { "*".into() } else { comp.into() };
            let Some(pid) = pid_of(&w, comp) else { return };
            signal(pid, SIGSTOP);
            tokio::time::sleep(hold).await;
            signal(pid, SIGCONT);
        }
        "holder-pause" | "supervisor-pause" => {
            // A holder that runs its command now (its section has started): wait for one.
            let mut running: Vec<(String, u32)> = vec![];
            for _ in 0..300 {
                running = {
                    let pids = w.cli_pids.lock().unwrap();
                    pids.iter()
                        .filter(|(id, _)| w.out.join("pids").join(id).exists())
                        .map(|(k, v)| (k.clone(), *v))
                        .collect()
                };
                if !running.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if running.is_empty() {
                return;
            }
            let (id, supervisor) = running[pick % running.len()].clone();
            target = id.clone();
            let command: Option<i32> = read_pid_file(&w.out.join("pids").join(&id)).map(|(pid, _)| pid as i32);
            start = now_ns();
            signal(supervisor as i32, SIGSTOP);
            if kind == "holder-pause"
                && let Some(c) = command
            {
                signal(-c, SIGSTOP); // the command's process group: the command and its watchdog
            }
            tokio::time::sleep(hold).await;
            if let Some(c) = command {
                signal(-c, SIGCONT);
            }
            signal(supervisor as i32, SIGCONT);
        }
        "holder-cut" => {
            // A holder inside its critical section now, if one comes within 15 s; else any slot
            // (a waiter cut off).
            let mut inside: Vec<String> = vec![];
            for _ in 0..300 {
                inside = w.holding.lock().unwrap().iter().cloned().collect();
                let cli: Vec<String> = w.cli_pids.lock().unwrap().keys().cloned().collect();
                inside.extend(cli.iter().filter(|id| w.out.join("pids").join(id).exists()).map(|id| slot_of(id)));
                if !inside.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let switch = {
                let cuts = w.cuts.lock().unwrap();
                let slot = if inside.is_empty() {
                    cuts.keys().nth(pick % cuts.len().max(1)).cloned()
                } else {
                    Some(inside[pick % inside.len()].clone())
                };
                slot.and_then(|s| cuts.get(&s).map(|tx| (s, tx.clone())))
            };
            let Some((slot, tx)) = switch else { return };
            target = slot;
            start = now_ns();
            tx.send_replace(true);
            tokio::time::sleep(hold).await;
            tx.send_replace(false);
        }
        "lease-delete" | "lease-edit" => {
            let lock = &w.locks[pick % w.locks.len()];
            // On a semaphore, any slot's Lease: slot 0's is the lock's own, slot k's `<lock>-slot-<k>`.
            let slot = (pick / w.locks.len()) as u32 % w.limits.get(lock).copied().unwrap_or(1);
            let lease = if slot == 0 { lock.clone() } else { format!("{lock}-slot-{slot}") };
            target = lease.clone();
            let leases: Api<Lease> = Api::namespaced(w.client.clone(), &w.ns);
            if kind == "lease-delete" {
                let _ = leases.delete(&lease, &DeleteParams::default()).await;
            } else {
                let patch = json!({"spec": {"holderIdentity": "intruder"}});
                let _ = leases.patch(&lease, &PatchParams::default(), &Patch::Merge(&patch)).await;
            }
            tokio::time::sleep(hold).await;
        }
        "claim-delete" => {
            let claims: Api<DistributedLockClaim> = Api::namespaced(w.client.clone(), &w.ns);
            let list = claims.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
            if let Some(c) = list.get(pick % list.len().max(1)) {
                target = c.spec.identity.clone();
                let _ = claims.delete(&c.name_any(), &DeleteParams::default()).await;
            }
            tokio::time::sleep(hold).await;
        }
        _ => unreachable!("{kind}"),
    }
    let end = now_ns();
    w.faults.lock().unwrap().push(Fault { kind: kind.into(), target, start, end });
    let _ = w.next();
}

// ------------------------------------------------------------------------------------------
// Summary and plot.

#[allow(clippy::too_many_arguments)]
fn summarize(
    report: &check::Report,
    sections: &[Section],
    faults: &[Fault],
    left: &[(String, String)],
    lost: u64,
    harness: &[String],
    started: u64,
    healed: u64,
    args: &Args,
) -> serde_json::Value {
    let mut starts: Vec<u64> = sections.iter().map(|s| s.start).collect();
    starts.sort_unstable();
    // Recovery per fault kind: from the heal to the next grant on any lock, ms.
    // Only faults that had the system to themselves (no other fault active from their start
    // to that next grant), so that one fault's figure is not another's.
    let mut recovery: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for f in faults {
        let Some(next) = starts.iter().find(|s| **s >= f.end) else { continue };
        let alone = faults.iter().all(|g| std::ptr::eq(f, g) || g.end <= f.start || g.start >= *next);
        if alone {
            recovery.entry(&f.kind).or_default().push((next - f.end) as f64 / 1e6);
        }
    }
    let recovery: BTreeMap<&str, serde_json::Value> = recovery
        .into_iter()
        .map(|(k, mut v)| {
            v.sort_by(f64::total_cmp);
            (k, json!({"faults": v.len(), "p50_ms": v[v.len() / 2].round(), "max_ms": v[v.len() - 1].round()}))
        })
        .collect();
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for f in faults {
        *by_kind.entry(f.kind.clone()).or_default() += 1;
    }
    // Allowed overlaps counted once per excused section (a holder paused for 5 s overlaps every
    // section granted meanwhile).
    let mut allowed: BTreeMap<String, std::collections::BTreeSet<(String, String)>> = BTreeMap::new();
    for o in &report.overlaps {
        if let Some(a) = o.allowed {
            for e in &o.excused {
                allowed.entry(format!("{a:?}")).or_default().insert((o.lock.clone(), e.clone()));
            }
        }
    }
    let allowed: BTreeMap<String, usize> = allowed.into_iter().map(|(k, v)| (k, v.len())).collect();
    let kinds: BTreeMap<String, usize> = sections.iter().fold(BTreeMap::new(), |mut m, s| {
        *m.entry(format!("{:?}", s.kind)).or_default() += 1;
        m
    });
    json!({
        "seed": args.seed,
        "duration_s": args.duration.as_secs(),
        "planted_bug": args.plant,
        "run_s": (healed - started) / 1_000_000_000,
        "grants": sections.len(),
        "grants_by_kind": kinds,
        "grants_by_lock": report.grants,
        "semaphores_max_holders": args.limits(),
        "most_holders_at_once_by_lock": report.peak,
        "slots_at_or_above_the_limit": report.slot_errors,
        "faults": faults.len(),
        "faults_by_kind": by_kind,
        "forbidden_overlaps": report.forbidden().collect::<Vec<_>>(),
        "repeated_or_decreasing_tokens": report.token_errors,
        "sink_went_back": report.sink_errors.len(),
        "stale_writes_rejected": report.stale_rejected,
        "allowed_overlaps_by_cause": allowed,
        "waiters_left": left,
        "waits_answered_with_an_error_after_heal": lost,
        "recovery_after_heal_isolated_faults": recovery,
        "harness_errors": harness,
        "verdict": verdict(report.ok() && left.is_empty() && harness.is_empty()),
    })
}

/// Cumulative grants over time, one line per lock, faults as red bars on the time axis.
fn plot(path: &Path, sections: &[Section], faults: &[Fault], t0: u64) {
    use plotters::prelude::*;
    let secs = |t: u64| t.saturating_sub(t0) as f64 / 1e9;
    let end = sections.iter().map(|s| secs(s.start)).fold(1.0, f64::max);
    let mut by_lock: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for s in sections {
        by_lock.entry(&s.lock).or_default().push(secs(s.start));
    }
    let top = by_lock.values().map(Vec::len).max().unwrap_or(1) as f64;
    let root = BitMapBackend::new(path, (1200, 500)).into_drawing_area();
    let _ = root.fill(&WHITE);
    let Ok(mut chart) = ChartBuilder::on(&root)
        .caption("grants per lock over time; faults in red", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..end, 0.0..top * 1.05)
    else {
        return;
    };
    let _ = chart.configure_mesh().x_desc("seconds").y_desc("grants").draw();
    for f in faults {
        let bar = Rectangle::new([(secs(f.start), 0.0), (secs(f.end), top * 0.03)], RED.mix(0.5).filled());
        let _ = chart.draw_series(std::iter::once(bar));
    }
    for (i, (_, mut starts)) in by_lock.into_iter().enumerate() {
        starts.sort_by(f64::total_cmp);
        let color = Palette99::pick(i);
        let _ =
            chart.draw_series(LineSeries::new(starts.iter().enumerate().map(|(n, t)| (*t, n as f64 + 1.0)), &color));
    }
    let _ = root.present();
}
