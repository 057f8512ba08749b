//! Test support: the local control plane (started once per test run by `e2e/cluster.sh`), a
//! namespace per test, operator processes, waits with timeouts, and a dump of the namespace's
//! objects and events when a test fails.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::{Client, Config, ResourceExt};
use leasehold::crd::DistributedLock;
use leasehold::lock::{LOCK_ANNOTATION, LOCKS_ANNOTATION, SCHEDULING_GATE, TOKEN_ANNOTATION};
use serde_json::json;
use tokio::sync::OnceCell;

/// Default timeout for waits.
pub const WAIT: Duration = Duration::from_secs(60);

static CLUSTER: OnceCell<PathBuf> = OnceCell::const_new();

pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The local control plane to use: the one `KUBECONFIG` points at when it is one of ours
/// (`.../leasehold-clusters/<name>/kubeconfig`), else `e2e`.
fn cluster_name() -> String {
    std::env::var("KUBECONFIG")
        .ok()
        .map(PathBuf::from)
        .filter(|p| p.to_string_lossy().contains("/leasehold-clusters/"))
        .and_then(|p| p.parent()?.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "e2e".to_string())
}

/// Starts (or reuses) the local control plane and installs the CRD. Returns the admin
/// kubeconfig path. Runs once per test binary.
pub async fn kubeconfig() -> PathBuf {
    CLUSTER
        .get_or_init(|| async {
            let out = Command::new("bash")
                .arg(repo().join("e2e/cluster.sh"))
                .args(["up", &cluster_name()])
                .stderr(Stdio::inherit())
                .output()
                .expect("run e2e/cluster.sh");
            assert!(out.status.success(), "e2e/cluster.sh up failed");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let line = stdout.lines().rev().find(|l| l.starts_with("export KUBECONFIG=")).expect("export line");
            let path = PathBuf::from(line.trim_start_matches("export KUBECONFIG=").trim());
            let client = client_for(&path).await;
            install_crds(&client).await;
            // The fenced-objects admission policy (cluster-wide; only affects annotated objects).
            let out = Command::new(kubectl())
                .env("KUBECONFIG", &path)
                .args(["apply", "-f"])
                .arg(repo().join("deploy/fenced-objects-policy.yaml"))
                .output()
                .expect("kubectl apply policy");
            assert!(out.status.success(), "apply policy: {}", String::from_utf8_lossy(&out.stderr));
            path
        })
        .await
        .clone()
}

async fn client_for(path: &std::path::Path) -> Client {
    Client::try_from(config_for(path).await).expect("client")
}

/// The client configuration of kubeconfig `path`.
async fn config_for(path: &std::path::Path) -> Config {
    let kc = Kubeconfig::read_from(path).expect("read kubeconfig");
    Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.expect("kubeconfig")
}

async fn install_crds(client: &Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in leasehold::crd::all_crds() {
        let name = crd.name_any();
        api.patch(&name, &PatchParams::apply("leasehold-e2e").force(), &Patch::Apply(&crd)).await.expect("apply CRD");
        let established = kube::runtime::wait::conditions::is_crd_established();
        tokio::time::timeout(WAIT, kube::runtime::wait::await_condition(api.clone(), &name, established))
            .await
            .expect("CRD established in time")
            .expect("watch CRD");
    }
}

/// The path of the `kubectl` the harness built (for dumps and CLI checks).
pub fn kubectl() -> PathBuf {
    let out = Command::new("bash").arg(repo().join("e2e/harness/build.sh")).output().expect("build.sh");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("kubectl")
}

/// One test's world: a client, a fresh namespace, operators started for it.
pub struct TestNs {
    /// Admin client.
    pub client: Client,
    /// The test's namespace.
    pub ns: String,
    /// Admin kubeconfig.
    pub kubeconfig: PathBuf,
    operators: Vec<Operator>,
}

impl TestNs {
    /// Creates namespace `lh-<name>-<random>` and waits for its `default` ServiceAccount.
    pub async fn new(name: &str) -> TestNs {
        let kubeconfig = kubeconfig().await;
        let client = client_for(&kubeconfig).await;
        let ns = format!("lh-{name}-{:x}", std::process::id() as u64 * 1000 + rand_suffix());
        let nss: Api<Namespace> = Api::all(client.clone());
        let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        nss.create(&PostParams::default(), &obj).await.expect("create namespace");
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
        wait_until("default ServiceAccount", WAIT, || async { sas.get_opt("default").await.ok().flatten().is_some() })
            .await;
        TestNs { client, ns, kubeconfig, operators: vec![] }
    }

    /// Typed API in the test namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Starts an operator process serving only this namespace; `env` adds variables.
    pub fn start_operator(&mut self, env: &[(&str, &str)]) -> usize {
        self.start_operator_with(env, &[])
    }

    /// Like [`TestNs::start_operator`], with extra command-line arguments.
    pub fn start_operator_with(&mut self, env: &[(&str, &str)], args: &[&str]) -> usize {
        let idx = self.operators.len();
        self.operators.push(Operator::start(&self.kubeconfig, &self.ns, idx, env, args));
        idx
    }

    /// The process ID of operator `idx` (it must be running).
    pub fn operator_pid(&self, idx: usize) -> u32 {
        self.operators[idx].child.as_ref().expect("operator running").id()
    }

    /// Waits until operator `idx` has exited by itself.
    pub async fn wait_operator_exit(&mut self, idx: usize) {
        let op = &mut self.operators[idx];
        wait_until("operator exit", WAIT, || {
            let done = op.child.as_mut().map(|c| c.try_wait().ok().flatten().is_some()).unwrap_or(true);
            async move { done }
        })
        .await;
    }

    /// Everything operator `idx` logged so far.
    pub fn operator_log(&self, idx: usize) -> String {
        std::fs::read_to_string(&self.operators[idx].log).unwrap_or_default()
    }

    /// Whether operator `idx` is still running.
    pub fn operator_alive(&mut self, idx: usize) -> bool {
        self.operators[idx].child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Waits (at most `WAIT`) for an Event in this namespace with reason `reason` about an object
    /// of kind `kind` (its `regarding`), and returns the first such Event.
    pub async fn wait_event(&self, kind: &str, reason: &str) -> k8s_openapi::api::events::v1::Event {
        let events = self.api::<k8s_openapi::api::events::v1::Event>();
        let find = || async {
            events.list(&Default::default()).await.unwrap().items.into_iter().find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().is_some_and(|r| r.kind.as_deref() == Some(kind))
            })
        };
        wait_until(&format!("a {reason} Event on a {kind}"), WAIT, || async { find().await.is_some() }).await;
        find().await.unwrap()
    }

    /// Creates a lock with the given spec.
    pub async fn create_lock(&self, name: &str, spec: serde_json::Value) -> DistributedLock {
        let lock: DistributedLock = serde_json::from_value(json!({
            "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLock",
            "metadata": {"name": name}, "spec": spec,
        }))
        .expect("lock object");
        self.api::<DistributedLock>().create(&PostParams::default(), &lock).await.expect("create lock")
    }

    /// Creates a pod that waits for `lock` at the scheduling gate and, once running, finishes
    /// after `run_for` (a Go duration, applied by the fake kubelet's stage config).
    pub async fn create_gated_pod(&self, name: &str, lock: &str, run_for: &str) -> Pod {
        self.create_pod(gated_pod(name, lock, run_for)).await
    }

    /// Creates any pod.
    pub async fn create_pod(&self, pod: Pod) -> Pod {
        self.api::<Pod>().create(&PostParams::default(), &pod).await.expect("create pod")
    }

    /// Runs the harness's `kubectl` in the test namespace; panics with its stderr on failure.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let out = Command::new(kubectl())
            .env("KUBECONFIG", &self.kubeconfig)
            .args(["-n", &self.ns])
            .args(args)
            .output()
            .expect("run kubectl");
        assert!(out.status.success(), "kubectl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Deletes the namespace (everything in it goes with it).
    pub async fn cleanup(self) {
        let nss: Api<Namespace> = Api::all(self.client.clone());
        let _ = nss.delete(&self.ns, &DeleteParams::default()).await;
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        for op in &mut self.operators {
            op.kill();
        }
        if std::thread::panicking() {
            eprintln!("==== test failed: objects and events in namespace {} ====", self.ns);
            let kubectl = kubectl();
            for args in [
                vec!["get", "distributedlocks,leases,pods", "-o", "wide"],
                vec!["get", "distributedlocks,leases", "-o", "yaml"],
                vec!["get", "events", "--sort-by=.lastTimestamp"],
            ] {
                let _ = Command::new(&kubectl)
                    .env("KUBECONFIG", &self.kubeconfig)
                    .args(&args)
                    .args(["-n", &self.ns])
                    .status();
            }
            for op in &self.operators {
                eprintln!("==== operator log {} ====", op.log.display());
                let log = std::fs::read_to_string(&op.log).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                eprintln!("{}", lines[lines.len().saturating_sub(80)..].join("\n"));
            }
        }
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos() as u64;
    (nanos % 1000) * 100 + N.fetch_add(1, Ordering::Relaxed)
}

/// An operator child process (the real `leasehold` binary), killed on drop.
pub struct Operator {
    child: Option<Child>,
    /// Its log file.
    pub log: PathBuf,
}

impl Operator {
    fn start(kubeconfig: &PathBuf, ns: &str, idx: usize, env: &[(&str, &str)], args: &[&str]) -> Operator {
        let dir = repo().join("target/e2e-logs");
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join(format!("{ns}-operator-{idx}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold"));
        cmd.args(["operator", "--namespace", ns, "--admin-addr", &format!("127.0.0.1:{port}")])
            .args(["--instance", &format!("operator-{idx}")])
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,leasehold=debug")
            .stdout(file.try_clone().unwrap())
            .stderr(file);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Operator { child: Some(cmd.spawn().expect("start operator")), log }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Polls `cond` every 100 ms until it holds; panics with `what` after `timeout`.
pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !cond().await {
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A pod that asks for `lock`, waits at the gate, and finishes `run_for` after it starts.
pub fn gated_pod(name: &str, lock: &str, run_for: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "annotations": {
                LOCK_ANNOTATION: lock,
                "pod-complete.stage.kwok.x-k8s.io/delay": run_for,
            },
        },
        "spec": {
            "schedulingGates": [{"name": SCHEDULING_GATE}],
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }))
    .unwrap()
}

/// A pod that waits at the gate for every lock of `locks` (a lock set, as written in the
/// `leasehold.dev/locks` annotation) and finishes `run_for` after it starts.
pub(crate) fn set_pod(name: &str, locks: &str, run_for: &str) -> Pod {
    let mut p = gated_pod(name, "unused", run_for);
    let ann = p.metadata.annotations.get_or_insert_default();
    ann.remove(LOCK_ANNOTATION);
    ann.insert(LOCKS_ANNOTATION.into(), locks.into());
    p
}

/// What a test observed about the pods of one namespace, from a watch: the order in which pods
/// were ungated with their tokens, and every moment two pods held one lock at once.
#[derive(Default, Debug, Clone)]
pub struct HolderLog {
    /// (pod, token) in the order the pods were first seen ungated.
    pub grants: Vec<(String, i64)>,
    /// Descriptions of observed overlaps (two ungated, non-terminal pods at once).
    pub overlaps: Vec<String>,
    /// pod -> (lock it names, holding now)
    state: BTreeMap<String, (String, bool)>,
}

/// A copy of what was observed so far.
pub fn snapshot(log: &Arc<Mutex<HolderLog>>) -> HolderLog {
    log.lock().unwrap().clone()
}

/// Watches the namespace's pods that name a lock and records [`HolderLog`].
pub fn watch_holders(ns: &TestNs) -> Arc<Mutex<HolderLog>> {
    let log = Arc::new(Mutex::new(HolderLog::default()));
    let log2 = log.clone();
    on_pod_changes(ns, move |p, deleted| record(&mut log2.lock().unwrap(), p, deleted));
    log
}

/// Calls `f(pod, deleted)` for every version of every pod of the namespace a watch delivers, in
/// watch order, from a background task (for the test's lifetime).
pub fn on_pod_changes(ns: &TestNs, mut f: impl FnMut(&Pod, bool) + Send + 'static) {
    let api: Api<Pod> = ns.api();
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Some(ev) = events.next().await {
            match ev {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => f(&p, false),
                Ok(watcher::Event::Delete(p)) => f(&p, true),
                _ => {}
            }
        }
    });
}

fn record(log: &mut HolderLog, p: &Pod, deleted: bool) {
    let Some(lock) = p.annotations().get(LOCK_ANNOTATION).cloned() else { return };
    let name = p.name_any();
    let gated = p.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref()).is_some_and(|g| !g.is_empty());
    let phase = p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
    let holding = !deleted && !gated && phase != "Succeeded" && phase != "Failed";
    if holding && !log.grants.iter().any(|(n, _)| n == &name) {
        let token = p.annotations().get(TOKEN_ANNOTATION).and_then(|t| t.parse().ok()).unwrap_or(-1);
        log.grants.push((name.clone(), token));
    }
    log.state.insert(name, (lock.clone(), holding));
    let holders: Vec<_> = log.state.iter().filter(|(_, (l, h))| *h && *l == lock).map(|(n, _)| n.clone()).collect();
    if holders.len() > 1 {
        log.overlaps.push(format!("lock {lock}: {holders:?}"));
    }
}

/// Reads a pod's fencing token annotation.
pub fn token_of(p: &Pod) -> Option<i64> {
    p.annotations().get(TOKEN_ANNOTATION).and_then(|t| t.parse().ok())
}

/// Whether the pod still waits at our scheduling gate.
pub fn is_gated(p: &Pod) -> bool {
    p.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == SCHEDULING_GATE))
}

/// Waits until pod `name` exists and satisfies `cond`; returns it.
pub async fn wait_pod(ns: &TestNs, name: &str, what: &str, cond: impl Fn(&Pod) -> bool) -> Pod {
    let api: Api<Pod> = ns.api();
    let found: Arc<Mutex<Option<Pod>>> = Arc::default();
    wait_until(&format!("pod {name}: {what}"), WAIT, || {
        let api = api.clone();
        let found = found.clone();
        let ok = |p: &Pod| cond(p);
        let f = async move { api.get_opt(name).await.ok().flatten() };
        async move {
            match f.await {
                Some(p) if ok(&p) => {
                    *found.lock().unwrap() = Some(p);
                    true
                }
                _ => false,
            }
        }
    })
    .await;
    found.lock().unwrap().take().unwrap()
}

/// Pod phase.
pub fn phase(p: &Pod) -> String {
    p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default()
}

/// A `leasehold lock` process (its own process group, so a test can stop or kill the group).
pub struct LockProcess {
    /// The child.
    pub child: Child,
    /// Combined stdout/stderr.
    pub log: PathBuf,
    /// The controller side of the pseudo-terminal its standard input is, if it is one
    /// ([`TestNs::lock_process_on_terminal`]): kept open while the process runs.
    pub terminal: Option<std::os::fd::OwnedFd>,
}

impl LockProcess {
    /// Sends `sig` to the process group of `leasehold lock` (its command and the watchdog run in a
    /// group of their own).
    pub fn signal_group(&self, sig: &str) {
        let status = Command::new("kill").args([&format!("-{sig}"), "--", &format!("-{}", self.child.id())]).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{sig} group");
    }

    /// Sends `sig` to `leasehold lock` only.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill").args([&format!("-{sig}"), &self.child.id().to_string()]).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{sig}");
    }

    /// Waits for exit (at most `WAIT`); returns the exit code.
    pub async fn wait_exit(&mut self) -> i32 {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                use std::os::unix::process::ExitStatusExt;
                return status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
            }
            assert!(start.elapsed() < WAIT, "leasehold lock did not exit; log:\n{}", self.output());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (at most `WAIT`) until its output contains `needle`.
    pub async fn wait_output(&self, what: &str, needle: &str) {
        wait_until(what, WAIT, || {
            let found = self.output().contains(needle);
            async move { found }
        })
        .await;
    }

    /// What it printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for LockProcess {
    fn drop(&mut self) {
        let _ =
            Command::new("kill").args(["-KILL", "--", &format!("-{}", self.child.id())]).stderr(Stdio::null()).status();
        let _ = self.child.wait();
    }
}

impl TestNs {
    /// Starts `leasehold lock <args>` in this namespace with the admin kubeconfig; `kubectl` is
    /// on its PATH.
    pub fn lock_process(&self, tag: &str, args: &[&str]) -> LockProcess {
        self.lock_process_as(tag, &self.kubeconfig, args)
    }

    /// Like [`TestNs::lock_process`], with a pseudo-terminal (nix `openpty`) as standard input:
    /// `leasehold lock` then takes the command for an interactive one (same process group).
    pub fn lock_process_on_terminal(&self, tag: &str, args: &[&str]) -> LockProcess {
        let pty = nix::pty::openpty(None, None).expect("openpty");
        let mut p = self.lock_process_with(tag, &self.kubeconfig, args, Stdio::from(pty.slave));
        p.terminal = Some(pty.master);
        p
    }

    /// Like [`TestNs::lock_process`], authenticated by `kubeconfig` (another identity).
    pub fn lock_process_as(&self, tag: &str, kubeconfig: &std::path::Path, args: &[&str]) -> LockProcess {
        self.lock_process_with(tag, kubeconfig, args, Stdio::null())
    }

    fn lock_process_with(&self, tag: &str, kubeconfig: &std::path::Path, args: &[&str], stdin: Stdio) -> LockProcess {
        use std::os::unix::process::CommandExt;
        let dir = repo().join("target/e2e-logs");
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join(format!("{}-lock-{tag}.log", self.ns));
        let file = std::fs::File::create(&log).unwrap();
        let bin = kubectl().parent().unwrap().to_path_buf();
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
        let child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .arg("lock")
            .args(["--namespace", &self.ns])
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("PATH", path)
            .env("RUST_LOG", "info")
            .stdin(stdin)
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .process_group(0)
            .spawn()
            .expect("start leasehold lock");
        LockProcess { child, log, terminal: None }
    }
}

static POSTGRES: std::sync::OnceLock<u16> = std::sync::OnceLock::new();

/// Starts (or reuses) the throwaway PostgreSQL server `e2e/harness/postgres.sh up <cluster>` (the
/// control plane's name, `e2e` unless `KUBECONFIG` names another of ours); returns
/// its port on 127.0.0.1 (user `postgres`, trust auth).
pub fn postgres_port() -> u16 {
    *POSTGRES.get_or_init(|| {
        let name = cluster_name();
        let out = Command::new("bash")
            .arg(repo().join("e2e/harness/postgres.sh"))
            .args(["up", &name])
            .stderr(Stdio::inherit())
            .output()
            .expect("run postgres.sh");
        assert!(out.status.success(), "e2e/harness/postgres.sh up {name} failed");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout.lines().rev().find(|l| l.starts_with("export LEASEHOLD_PG_PORT=")).expect("port line");
        line.trim_start_matches("export LEASEHOLD_PG_PORT=").trim().parse().expect("port")
    })
}

/// Runs `psql` against database `db` on the test server; returns (success, stdout+stderr).
pub fn psql(db: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new("psql")
        .args(["-X", "-h", "127.0.0.1", "-p", &postgres_port().to_string(), "-U", "postgres", "-d", db])
        .args(args)
        .output()
        .expect("run psql");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// One answered request of a [`TestNs::recording_client`]: method, URI path, HTTP status.
pub type Answered = (http::Method, String, u16);

/// The requests a [`TestNs::recording_client`] sent and got an answer to, in answer order.
#[derive(Clone, Default)]
pub struct Recorded {
    seen: Arc<Mutex<Vec<Answered>>>,
}

impl Recorded {
    /// Everything answered so far.
    pub fn all(&self) -> Vec<Answered> {
        self.seen.lock().unwrap().clone()
    }

    /// The Lease requests answered so far, from the `from`-th answer on: (method, status).
    pub fn lease_requests(&self, from: usize) -> Vec<(String, u16)> {
        self.all()[from..]
            .iter()
            .filter(|(_, path, _)| path.contains("/leases/"))
            .map(|(m, _, s)| (m.to_string(), *s))
            .collect()
    }
}

/// The service of [`TestNs::client_with_short_lease_watches`].
#[derive(Clone)]
pub struct ShortLeaseWatches<S> {
    inner: S,
    secs: u32,
}

impl<S, B> tower::Service<http::Request<B>> for ShortLeaseWatches<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let uri = req.uri().clone();
        if let (true, Some(query)) = (uri.path().ends_with("/leases"), uri.query())
            && query.split('&').any(|kv| kv == "watch=true")
        {
            let query: Vec<String> = query
                .split('&')
                .filter(|kv| !kv.starts_with("timeoutSeconds="))
                .map(str::to_string)
                .chain([format!("timeoutSeconds={}", self.secs)])
                .collect();
            let pq = format!("{}?{}", uri.path(), query.join("&"));
            let mut parts = uri.into_parts();
            parts.path_and_query = Some(pq.parse().expect("path and query"));
            *req.uri_mut() = http::Uri::from_parts(parts).expect("uri");
        }
        self.inner.call(req)
    }
}

/// A tower layer that records every answer of the client it wraps ([`Recorded`]).
struct RecordLayer(Recorded);

impl<S> tower::Layer<S> for RecordLayer {
    type Service = RecordService<S>;
    fn layer(&self, inner: S) -> RecordService<S> {
        RecordService { inner, seen: self.0.clone() }
    }
}

/// The service of [`RecordLayer`].
#[derive(Clone)]
pub struct RecordService<S> {
    inner: S,
    seen: Recorded,
}

impl<S, B, R> tower::Service<http::Request<B>> for RecordService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    R: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let (method, path) = (req.method().clone(), req.uri().path().to_string());
        let seen = self.seen.clone();
        let answer = self.inner.call(req);
        Box::pin(async move {
            let r = answer.await;
            if let Ok(resp) = &r {
                seen.seen.lock().unwrap().push((method, path, resp.status().as_u16()));
            }
            r
        })
    }
}

impl TestNs {
    /// An admin client (kube's own stack) that records every request it sends with its answer's
    /// status: what a holder built on it asked the API server, and what it was told.
    pub async fn recording_client(&self) -> (Client, Recorded) {
        self.recording_client_as(&self.kubeconfig).await
    }

    /// A client (this namespace's admin credentials) whose Lease watches the API server ends
    /// after `secs` seconds: the `timeoutSeconds` of every Lease WATCH request is rewritten
    /// (kube-rs sends 290), as a watch the server closes early or a proxy cuts would end.
    pub async fn client_with_short_lease_watches(&self, secs: u32) -> Client {
        let builder =
            kube::client::ClientBuilder::try_from(config_for(&self.kubeconfig).await).expect("client builder");
        builder.with_layer(&tower::layer::layer_fn(move |inner| ShortLeaseWatches { inner, secs })).build()
    }

    /// [`TestNs::recording_client`] with the credentials of `kubeconfig`.
    pub async fn recording_client_as(&self, kubeconfig: &std::path::Path) -> (Client, Recorded) {
        let seen = Recorded::default();
        let builder = kube::client::ClientBuilder::try_from(config_for(kubeconfig).await).expect("client builder");
        (builder.with_layer(&RecordLayer(seen.clone())).build(), seen)
    }
}
