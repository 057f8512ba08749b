//! The benchmark's world: the local control plane (`e2e/cluster.sh up bench`), clients,
//! namespaces, operator processes, and the API server's own request counters.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Everything the scenarios share.
pub struct Env {
    /// Admin kubeconfig of the bench cluster.
    pub kubeconfig: PathBuf,
    /// A client for setup and observation (scenarios make their own for the holders).
    pub client: Client,
    /// The operator binary under test: `target/release/leasehold`, or `BENCH_OPERATOR_BIN` (an
    /// A/B against another commit's operator; the holders stay this tree's library).
    pub leasehold_bin: PathBuf,
    /// `target/kle-driver/release/kle-driver` (None when it was not built).
    pub kle_driver: Option<PathBuf>,
    /// `target/bench`.
    pub out_dir: PathBuf,
    /// Requests per second of the idle cluster, by (verb, resource, code).
    pub background: ApiCounts,
    finished: std::sync::Mutex<Vec<String>>,
}

impl Env {
    /// Brings up (or reuses) the local control plane `name`, installs the CRDs.
    pub async fn up(name: &str) -> anyhow::Result<Env> {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let started = Instant::now();
        let out = Command::new("bash")
            .arg(repo.join("e2e/cluster.sh"))
            .args(["up", name])
            .stderr(Stdio::inherit())
            .output()
            .context("run e2e/cluster.sh")?;
        if !out.status.success() {
            bail!("e2e/cluster.sh up {name} failed");
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .rev()
            .find(|l| l.starts_with("export KUBECONFIG="))
            .context("no export line from cluster.sh")?;
        let kubeconfig = PathBuf::from(line.trim_start_matches("export KUBECONFIG=").trim());
        eprintln!(
            "[bench] control plane {name} up in {:.1} s ({})",
            started.elapsed().as_secs_f64(),
            kubeconfig.display()
        );
        let client = client_for(&kubeconfig).await?;
        install_crds(&client).await?;
        let target = repo.join("target");
        let leasehold_bin =
            std::env::var_os("BENCH_OPERATOR_BIN").map_or_else(|| target.join("release/leasehold"), PathBuf::from);
        if !leasehold_bin.exists() {
            bail!("{} missing: run `cargo build --release` first (make bench does)", leasehold_bin.display());
        }
        let kle = target.join("kle-driver/release/kle-driver");
        let out_dir = target.join("bench");
        std::fs::create_dir_all(out_dir.join("logs"))?;
        Ok(Env {
            kubeconfig,
            client,
            leasehold_bin,
            kle_driver: kle.exists().then_some(kle),
            out_dir,
            background: ApiCounts::default(),
            finished: std::sync::Mutex::default(),
        })
    }

    /// A new client with its own connection pool (one per simulated process).
    pub async fn new_client(&self) -> anyhow::Result<Client> {
        client_for(&self.kubeconfig).await
    }

    /// Creates namespace `bench-<name>` (deleting a leftover one first) and waits for its
    /// `default` ServiceAccount (pods need it).
    pub async fn namespace(&self, name: &str) -> anyhow::Result<String> {
        let ns = format!("bench-{name}");
        let api: Api<Namespace> = Api::all(self.client.clone());
        if api.get_opt(&ns).await?.is_some() {
            let _ = api.delete(&ns, &DeleteParams::default()).await;
            let t = Instant::now();
            while api.get_opt(&ns).await?.is_some() {
                if t.elapsed() > Duration::from_secs(180) {
                    bail!("namespace {ns} from an earlier run is still terminating");
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        api.create(&PostParams::default(), &obj).await?;
        let sas: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &ns);
        let t = Instant::now();
        while sas.get_opt("default").await?.is_none() {
            if t.elapsed() > Duration::from_secs(60) {
                bail!("no default ServiceAccount in {ns}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(ns)
    }

    /// Marks a scenario's namespace for deletion at the end of the run: deleting it now would
    /// put the namespace controller's LISTs and DELETEs into the next scenario's API counts.
    pub fn finished(&self, ns: &str) {
        self.finished.lock().unwrap_or_else(|e| e.into_inner()).push(ns.to_string());
    }

    /// Deletes the namespaces of every finished scenario (without waiting).
    pub async fn delete_finished(&self) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let names = std::mem::take(&mut *self.finished.lock().unwrap_or_else(|e| e.into_inner()));
        for ns in names {
            let _ = api.delete(&ns, &DeleteParams::background()).await;
        }
    }

    /// Measures the API traffic of the idle cluster (node heartbeats, controllers) for `window`;
    /// [`Env::net`] subtracts it from the scenarios' counts.
    pub async fn measure_background(&mut self, window: Duration) -> anyhow::Result<()> {
        let a = self.api_counts().await?;
        let t = Instant::now();
        tokio::time::sleep(window).await;
        let d = self.api_counts().await?.since(&a);
        let secs = t.elapsed().as_secs_f64();
        self.background = ApiCounts(d.0.into_iter().map(|(k, v)| (k, v / secs)).collect());
        Ok(())
    }

    /// `after - before` minus the idle cluster's traffic over the same time (clamped at 0).
    pub fn net(&self, before: &ApiCounts, after: &ApiCounts, secs: f64) -> ApiCounts {
        let mut d = after.since(before);
        for (k, rate) in &self.background.0 {
            if let Some(v) = d.0.get_mut(k) {
                *v = (*v - rate * secs).max(0.0);
            }
        }
        d.0.retain(|_, v| *v > 0.0);
        d
    }

    /// Starts `leasehold operator --namespace ns` on a free admin port (default log level).
    pub fn start_operator(&self, ns: &str, tag: &str) -> anyhow::Result<Operator> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let log = self.out_dir.join("logs").join(format!("operator-{tag}.log"));
        let file = std::fs::File::create(&log)?;
        let child = Command::new(&self.leasehold_bin)
            .args(["operator", "--namespace", ns, "--admin-addr", &format!("127.0.0.1:{port}")])
            .args(["--instance", &format!("bench-{tag}")])
            .env("KUBECONFIG", &self.kubeconfig)
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .context("start operator")?;
        Ok(Operator { child: Some(child), port, log })
    }

    /// The API server's `apiserver_request_total` counters.
    pub async fn api_counts(&self) -> anyhow::Result<ApiCounts> {
        Ok(ApiCounts::parse(&self.apiserver_metrics().await?))
    }

    /// The API server's `/metrics`, as text.
    pub async fn apiserver_metrics(&self) -> anyhow::Result<String> {
        let req = http::Request::get("/metrics").body(Vec::new())?;
        Ok(self.client.request_text(req).await?)
    }

    /// etcd's own `/metrics` (its client URL, plain HTTP on loopback; the port is in the run
    /// directory's `ports.env` next to the kubeconfig, see e2e/cluster.sh). None if unreachable.
    pub async fn etcd_metrics(&self) -> Option<String> {
        let ports = std::fs::read_to_string(self.kubeconfig.parent()?.join("ports.env")).ok()?;
        let port: u16 = ports.lines().find_map(|l| l.strip_prefix("ETCD_PORT="))?.trim().parse().ok()?;
        let get = async {
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
            s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").await?;
            let mut out = String::new();
            s.read_to_string(&mut out).await?;
            Ok::<_, std::io::Error>(out)
        };
        let out = tokio::time::timeout(Duration::from_secs(10), get).await.ok()?.ok()?;
        let (head, body) = out.split_once("\r\n\r\n")?;
        (head.split_whitespace().nth(1) == Some("200")).then(|| body.to_string())
    }

    /// Both servers' counters and the API server's watch gauges, at one moment.
    pub async fn server_snapshot(&self) -> anyhow::Result<ServerSnapshot> {
        let text = self.apiserver_metrics().await?;
        let etcd = self.etcd_metrics().await;
        Ok(ServerSnapshot {
            at: Instant::now(),
            api: ApiCounts::parse(&text),
            etcd_requests: metric_by_label(&text, "etcd_request_duration_seconds_count", "operation"),
            etcd_mvcc: etcd.as_deref().map(|t| {
                ["put", "delete", "txn", "range"]
                    .iter()
                    .map(|op| (op.to_string(), metric_sum(t, &format!("etcd_mvcc_{op}_total"), &[])))
                    .collect()
            }),
            watches: Watches::of(&text),
        })
    }

    /// What the servers did between two snapshots: API writes/s (net of the idle cluster's own
    /// traffic), 5xx and 429 answers, etcd requests/s by operation (the API server's count and
    /// etcd's own), and the watch gauges at both ends.
    pub fn server_load(&self, a: &ServerSnapshot, b: &ServerSnapshot, before: Option<&ServerSnapshot>) -> ServerLoad {
        let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
        let raw = b.api.since(&a.api);
        let net = self.net(&a.api, &b.api, secs);
        let codes = |p: &dyn Fn(&str) -> bool| raw.0.iter().filter(|((_, _, c), _)| p(c)).map(|(_, v)| v).sum::<f64>();
        let rate = |x: &BTreeMap<String, f64>, y: &BTreeMap<String, f64>| -> BTreeMap<String, f64> {
            y.iter().map(|(k, v)| (k.clone(), (v - x.get(k).copied().unwrap_or(0.0)).max(0.0) / secs)).collect()
        };
        ServerLoad {
            window_s: secs,
            api_writes_per_s: net.all_writes() / secs,
            api_writes_per_s_leasehold: net.writes(&OUR_RESOURCES) / secs,
            api_requests_per_s: net.all_requests() / secs,
            server_errors: codes(&|c| c.starts_with('5')),
            throttled: codes(&|c| c == "429"),
            server_errors_by_request: raw
                .0
                .iter()
                .filter(|((_, _, c), _)| c.starts_with('5') || c == "429")
                .map(|((verb, r, c), v)| (format!("{r} {verb} {c}"), *v))
                .collect(),
            etcd_requests_per_s: rate(&a.etcd_requests, &b.etcd_requests),
            etcd_mvcc_per_s: a.etcd_mvcc.as_ref().zip(b.etcd_mvcc.as_ref()).map(|(x, y)| rate(x, y)),
            watches_before: before.map(|s| s.watches.clone()),
            watches_start: a.watches.clone(),
            watches_end: b.watches.clone(),
        }
    }

    /// Creates `DistributedLock`s `<prefix>-<i>` for i in 0..n, `concurrency` at a time.
    pub async fn create_locks(
        &self,
        ns: &str,
        names: &[String],
        spec: serde_json::Value,
        concurrency: usize,
    ) -> anyhow::Result<()> {
        use futures::StreamExt;
        let api: Api<leasehold::crd::DistributedLock> = Api::namespaced(self.client.clone(), ns);
        let results: Vec<anyhow::Result<()>> = futures::stream::iter(names.iter().cloned())
            .map(|name| {
                let api = api.clone();
                let spec = spec.clone();
                async move {
                    let lock: leasehold::crd::DistributedLock = serde_json::from_value(json!({
                        "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLock",
                        "metadata": {"name": name}, "spec": spec,
                    }))?;
                    for attempt in 0..5 {
                        match api.create(&PostParams::default(), &lock).await {
                            Ok(_) => return Ok(()),
                            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
                            Err(e) if attempt == 4 => return Err(e.into()),
                            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                        }
                    }
                    Ok(())
                }
            })
            .buffer_unordered(concurrency)
            .collect()
            .await;
        results.into_iter().collect()
    }

    /// How many locks in `ns` show `Ready=True` for their current generation (taken into
    /// service; since 0d8788e the operator creates a lock's Lease only at its first grant, so
    /// Leases no longer tell).
    pub async fn count_ready(&self, ns: &str) -> anyhow::Result<usize> {
        let api: Api<leasehold::crd::DistributedLock> = Api::namespaced(self.client.clone(), ns);
        let l = api.list(&kube::api::ListParams::default()).await?;
        Ok(l.items
            .iter()
            .filter(|x| {
                x.status.as_ref().is_some_and(|s| {
                    s.conditions.iter().any(|c| {
                        c.type_ == "Ready" && c.status == "True" && c.observed_generation == x.metadata.generation
                    })
                })
            })
            .count())
    }

    /// Creates the locks `batch` at a time, each batch after the operator has taken the previous
    /// one into service (Ready; Leasehold's operator reconciles every pending lock at once, without a
    /// concurrency bound: thousands of new locks at once make its API calls time out and retry,
    /// see the README's Performance section). Stops early when `budget` is spent; returns how
    /// many locks are in service.
    pub async fn create_locks_paced(
        &self,
        ns: &str,
        names: &[String],
        batch: usize,
        budget: Duration,
    ) -> anyhow::Result<usize> {
        let t = Instant::now();
        let mut done = 0;
        for chunk in names.chunks(batch.max(1)) {
            if t.elapsed() > budget {
                eprintln!("[bench] setup budget of {budget:?} spent after {done} locks");
                break;
            }
            self.create_locks(ns, chunk, json!({}), 32).await?;
            done += chunk.len();
            loop {
                if self.count_ready(ns).await.unwrap_or(0) >= done {
                    break;
                }
                if t.elapsed() > budget + Duration::from_secs(120) {
                    bail!("the operator did not take {done} locks into service in time");
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        Ok(done)
    }

    /// Waits until `n` locks in `ns` are Ready (the operator has taken every lock into service).
    pub async fn wait_locks_ready(&self, ns: &str, n: usize, timeout: Duration) -> anyhow::Result<Duration> {
        let t = Instant::now();
        loop {
            let have = self.count_ready(ns).await.unwrap_or(0);
            if have >= n {
                return Ok(t.elapsed());
            }
            if t.elapsed() > timeout {
                bail!("only {have} of {n} locks Ready after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(if n > 100 { 1000 } else { 100 })).await;
        }
    }
}

/// Client from a kubeconfig file.
pub async fn client_for(path: &Path) -> anyhow::Result<Client> {
    let kc = Kubeconfig::read_from(path)?;
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    // As a user of the library would (README "Holding a lock from a running process").
    Ok(leasehold::client::from_config(cfg)?)
}

async fn install_crds(client: &Client) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in leasehold::crd::all_crds() {
        let name = crd.name_any();
        api.patch(&name, &PatchParams::apply("leasehold-bench").force(), &Patch::Apply(&crd)).await?;
        let established = kube::runtime::wait::conditions::is_crd_established();
        tokio::time::timeout(
            Duration::from_secs(60),
            kube::runtime::wait::await_condition(api.clone(), &name, established),
        )
        .await
        .context("CRD established")??;
    }
    Ok(())
}

/// A `leasehold operator` child process, killed on drop.
pub struct Operator {
    child: Option<Child>,
    /// Admin port (/readyz, /metrics).
    pub port: u16,
    /// Its log file.
    pub log: PathBuf,
}

impl Operator {
    /// Polls `/readyz` every 20 ms; returns how long it took from `since`.
    pub async fn wait_ready(&self, since: Instant, timeout: Duration) -> anyhow::Result<Duration> {
        loop {
            if let Ok((200, _)) = self.get("/readyz").await {
                return Ok(since.elapsed());
            }
            if since.elapsed() > timeout {
                bail!("operator not ready after {timeout:?}; log: {}", self.log.display());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// GET on the admin port: (status, body).
    pub async fn get(&self, path: &str) -> anyhow::Result<(u16, String)> {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        let code = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        Ok((code, body))
    }

    /// A counter or gauge from its `/metrics` (sum over label sets), 0 if absent.
    pub async fn metric(&self, name: &str) -> f64 {
        let Ok((_, body)) = self.get("/metrics").await else { return 0.0 };
        body.lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| l.split(['{', ' ']).next() == Some(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// (VmRSS, VmHWM) in KiB from /proc.
    pub fn memory_kib(&self) -> Option<(u64, u64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        let field = |k: &str| status.lines().find(|l| l.starts_with(k))?.split_whitespace().nth(1)?.parse::<u64>().ok();
        Some((field("VmRSS:")?, field("VmHWM:")?))
    }

    /// CPU time (user + system) in seconds from /proc/PID/stat.
    pub fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()?)).ok()?;
        let rest = stat.rsplit_once(')')?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
        Some(ticks / 100.0)
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Samples of a Prometheus text exposition: (name, labels, value).
pub fn samples(text: &str) -> impl Iterator<Item = (&str, BTreeMap<&str, &str>, f64)> {
    text.lines().filter(|l| !l.starts_with('#')).filter_map(|line| {
        let (head, value) = line.rsplit_once(' ')?;
        let value: f64 = value.trim().parse().ok()?;
        let (name, labels) = match head.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (head, ""),
        };
        let mut m = BTreeMap::new();
        for kv in labels.split("\",") {
            if let Some((k, v)) = kv.split_once("=\"") {
                m.insert(k.trim_start_matches(','), v.trim_end_matches('"'));
            }
        }
        Some((name, m, value))
    })
}

/// Sum of a metric's samples whose labels include every pair of `want`.
pub fn metric_sum(text: &str, name: &str, want: &[(&str, &str)]) -> f64 {
    samples(text)
        .filter(|(n, l, _)| *n == name && want.iter().all(|(k, v)| l.get(k) == Some(v)))
        .map(|(_, _, v)| v)
        .sum()
}

/// A metric summed by the value of one label.
pub fn metric_by_label(text: &str, name: &str, label: &str) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    for (n, l, v) in samples(text) {
        if n == name {
            *m.entry(l.get(label).copied().unwrap_or("").to_string()).or_insert(0.0) += v;
        }
    }
    m
}

/// The API server's and etcd's counters at one moment ([`Env::server_snapshot`]).
#[derive(Clone, Debug)]
pub struct ServerSnapshot {
    pub at: Instant,
    pub api: ApiCounts,
    /// The API server's requests to etcd by operation (`etcd_request_duration_seconds_count`;
    /// 1.37 has no `etcd_requests_total`).
    pub etcd_requests: BTreeMap<String, f64>,
    /// etcd's own `etcd_mvcc_{put,delete,txn,range}_total` (None if its /metrics was unreachable).
    pub etcd_mvcc: Option<BTreeMap<String, f64>>,
    pub watches: Watches,
}

/// Open watches on the API server.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Watches {
    /// `apiserver_longrunning_requests{verb="WATCH"}` (a gauge, summed over resources).
    pub longrunning_watch: f64,
    /// `apiserver_registered_watchers` (summed), if the API server still exports it.
    pub registered_watchers: Option<f64>,
}

impl Watches {
    fn of(text: &str) -> Watches {
        let registered = samples(text).any(|(n, _, _)| n == "apiserver_registered_watchers");
        Watches {
            longrunning_watch: metric_sum(text, "apiserver_longrunning_requests", &[("verb", "WATCH")]),
            registered_watchers: registered.then(|| metric_sum(text, "apiserver_registered_watchers", &[])),
        }
    }
}

/// The servers' load over a window ([`Env::server_load`]).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ServerLoad {
    pub window_s: f64,
    /// API writes per second, every resource and client, net of the idle cluster's own traffic.
    pub api_writes_per_s: f64,
    /// The same, on Leasehold's resources (locks, claims, Leases, Events, pods).
    pub api_writes_per_s_leasehold: f64,
    /// API requests (not WATCH) per second, net of the idle cluster's own traffic.
    pub api_requests_per_s: f64,
    /// Requests answered 5xx / 429 in the window (every client).
    pub server_errors: f64,
    pub throttled: f64,
    /// The 5xx and 429 answers by "resource VERB code".
    pub server_errors_by_request: Vec<(String, f64)>,
    /// The API server's requests to etcd per second, by operation
    /// (`etcd_request_duration_seconds_count`).
    pub etcd_requests_per_s: BTreeMap<String, f64>,
    /// etcd's own operations per second (`etcd_mvcc_*_total`: put, delete, txn, range), if its
    /// /metrics was reachable.
    pub etcd_mvcc_per_s: Option<BTreeMap<String, f64>>,
    /// Open watches before the load started, at the window's start and at its end.
    pub watches_before: Option<Watches>,
    pub watches_start: Watches,
    pub watches_end: Watches,
}

/// `apiserver_request_total` by (verb, resource, code).
#[derive(Clone, Debug, Default)]
pub struct ApiCounts(pub BTreeMap<(String, String, String), f64>);

/// Verbs that change state.
pub const WRITE_VERBS: [&str; 6] = ["POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"];

impl ApiCounts {
    fn parse(text: &str) -> ApiCounts {
        let mut m = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("apiserver_request_total{") else { continue };
            let Some((labels, value)) = rest.rsplit_once("} ") else { continue };
            let Ok(value) = value.trim().parse::<f64>() else { continue };
            let mut verb = String::new();
            let mut resource = String::new();
            let mut code = String::new();
            for kv in labels.split("\",") {
                let Some((k, v)) = kv.split_once("=\"") else { continue };
                let v = v.trim_end_matches('"').to_string();
                match k {
                    "verb" => verb = v,
                    "resource" => resource = v,
                    "code" => code = v,
                    _ => {}
                }
            }
            *m.entry((verb, resource, code)).or_insert(0.0) += value;
        }
        ApiCounts(m)
    }

    /// `self - before`.
    pub fn since(&self, before: &ApiCounts) -> ApiCounts {
        let mut m = BTreeMap::new();
        for (k, v) in &self.0 {
            let d = v - before.0.get(k).copied().unwrap_or(0.0);
            if d > 0.0 {
                m.insert(k.clone(), d);
            }
        }
        ApiCounts(m)
    }

    /// Requests on `resources` (all verbs except WATCH, which are long-running connections).
    pub fn requests(&self, resources: &[&str]) -> f64 {
        self.0
            .iter()
            .filter(|((verb, r, _), _)| verb != "WATCH" && resources.contains(&r.as_str()))
            .map(|(_, v)| v)
            .sum()
    }

    /// Requests (not WATCH) on every resource.
    pub fn all_requests(&self) -> f64 {
        self.0.iter().filter(|((verb, _, _), _)| verb != "WATCH").map(|(_, v)| v).sum()
    }

    /// Writes on every resource.
    pub fn all_writes(&self) -> f64 {
        self.0.iter().filter(|((verb, _, _), _)| WRITE_VERBS.contains(&verb.as_str())).map(|(_, v)| v).sum()
    }

    /// Writes on `resources`.
    pub fn writes(&self, resources: &[&str]) -> f64 {
        self.0
            .iter()
            .filter(|((verb, r, _), _)| WRITE_VERBS.contains(&verb.as_str()) && resources.contains(&r.as_str()))
            .map(|(_, v)| v)
            .sum()
    }

    /// HTTP 409 answers on `resources`.
    pub fn conflicts(&self, resources: &[&str]) -> f64 {
        self.0.iter().filter(|((_, r, code), _)| code == "409" && resources.contains(&r.as_str())).map(|(_, v)| v).sum()
    }

    /// "resource VERB: n" lines for `resources`, biggest first (for the report's "why").
    pub fn breakdown(&self, resources: &[&str]) -> Vec<(String, f64)> {
        let mut agg: BTreeMap<String, f64> = BTreeMap::new();
        for ((verb, r, code), v) in &self.0 {
            if resources.contains(&r.as_str()) {
                let key = if code.starts_with('2') { format!("{r} {verb}") } else { format!("{r} {verb} {code}") };
                *agg.entry(key).or_insert(0.0) += v;
            }
        }
        let mut v: Vec<_> = agg.into_iter().collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        v
    }
}

/// The resources Leasehold's operator and holder library touch.
pub const OUR_RESOURCES: [&str; 5] = ["distributedlocks", "distributedlockclaims", "leases", "events", "pods"];
/// The resources the Lease crates touch.
pub const LEASE_RESOURCES: [&str; 1] = ["leases"];
