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
    /// `target/release/leasehold`.
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
        let leasehold_bin = target.join("release/leasehold");
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
        let req = http::Request::get("/metrics").body(Vec::new())?;
        let text = self.client.request_text(req).await?;
        Ok(ApiCounts::parse(&text))
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

    /// How many Leases exist in `ns` (the scenario namespaces hold only the operator's): one LIST
    /// with limit=1 and its `remainingItemCount`, which the API server leaves out when the
    /// LIST has a label selector.
    pub async fn count_leases(&self, ns: &str) -> anyhow::Result<usize> {
        let api: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(self.client.clone(), ns);
        let lp = kube::api::ListParams::default().limit(1);
        let l = api.list_metadata(&lp).await?;
        Ok(l.items.len() + l.metadata.remaining_item_count.unwrap_or(0).max(0) as usize)
    }

    /// Creates the locks `batch` at a time, each batch after the operator has given the previous
    /// one its Leases (Leasehold's operator reconciles every pending lock at once, without a
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
                if self.count_leases(ns).await.unwrap_or(0) >= done {
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

    /// Waits until `n` Leases labelled `leasehold.dev/lock` exist in `ns` (the operator has
    /// taken every lock into service).
    pub async fn wait_leases(&self, ns: &str, n: usize, timeout: Duration) -> anyhow::Result<Duration> {
        let api: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(self.client.clone(), ns);
        let t = Instant::now();
        loop {
            let lp = kube::api::ListParams::default().labels(leasehold::lock::LEASE_LABEL);
            let have = api.list_metadata(&lp).await.map(|l| l.items.len()).unwrap_or(0);
            if have >= n {
                return Ok(t.elapsed());
            }
            if t.elapsed() > timeout {
                bail!("only {have} of {n} Leases after {timeout:?}");
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
