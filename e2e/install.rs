//! Installing Leasehold like a real operator, against the real local control plane: the Helm
//! chart (install, upgrade, uninstall, values errors, server-side validation of everything it
//! renders), the operator running as the chart's ServiceAccount (so every permission it uses
//! comes from the chart's RBAC), and the tamper-protection admission policies.
//!
//! Every release here is installed into its test's namespace with the admission policies scoped
//! to that namespace (`admissionPolicies.namespaceSelector`), so tests running side by side on the
//! same control plane (with operators that run as the admin) are not affected; a release is
//! uninstalled when its test ends, pass or fail.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Container, Pod, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use leasehold::crd::{DistributedLock, DistributedLockClaim};
use serde_json::{Value, json};

use crate::support::{
    TestNs, WAIT, gated_pod, is_gated, kubectl, phase, snapshot, token_of, wait_pod, wait_until, watch_holders,
};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> String {
    repo().join("charts/leasehold").display().to_string()
}

/// Runs the harness's `helm` (same directory as its `kubectl`) with `kubeconfig`; helm's own
/// cache and config live under target/, not in $HOME.
pub(crate) fn helm(kubeconfig: &Path, args: &[&str]) -> Output {
    let home = repo().join("target/e2e-helm");
    Command::new(kubectl().parent().unwrap().join("helm"))
        .env("KUBECONFIG", kubeconfig)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .args(args)
        .output()
        .expect("run helm")
}

fn helm_ok(kubeconfig: &Path, args: &[&str]) -> String {
    let out = helm(kubeconfig, args);
    assert!(out.status.success(), "helm {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A release of the chart in a test's namespace, named after it. Uninstalled on drop, so the
/// shared control plane keeps none of its cluster-scoped objects (ClusterRole, policies).
pub(crate) struct Release {
    /// Release name (= the namespace).
    pub name: String,
    kubeconfig: PathBuf,
    uninstalled: bool,
}

impl Release {
    /// `helm install --wait` into `ns.ns`, the admission policies scoped to that namespace.
    pub fn install(ns: &TestNs, values: &[&str]) -> Release {
        ns.kubectl(&["label", "namespace", &ns.ns, &format!("leasehold.dev/e2e-scope={}", ns.ns)]);
        let release = Release { name: ns.ns.clone(), kubeconfig: ns.kubeconfig.clone(), uninstalled: false };
        let (scope, chart) = (release.scope(), chart());
        let mut args = vec!["install", &release.name, &chart, "-n", &ns.ns, "--wait", "--timeout", "120s"];
        args.extend(["--set-json", &scope]);
        args.extend(values);
        helm_ok(&release.kubeconfig, &args);
        release
    }

    fn scope(&self) -> String {
        format!(
            r#"admissionPolicies.namespaceSelector={{"matchLabels":{{"leasehold.dev/e2e-scope":"{}"}}}}"#,
            self.name
        )
    }

    /// `helm upgrade --wait` with the same policy scope plus `values` (nothing else is reused).
    pub fn upgrade(&self, values: &[&str]) -> Output {
        let scope = self.scope();
        let chart = chart();
        let mut args = vec!["upgrade", &self.name, &chart, "-n", &self.name, "--wait", "--timeout", "120s"];
        args.extend(["--set-json", &scope]);
        args.extend(values);
        helm(&self.kubeconfig, &args)
    }

    /// Object-name prefix (release names here never contain "leasehold").
    pub fn fullname(&self) -> String {
        format!("{}-leasehold", self.name)
    }

    /// The user name the operator has when it runs as the chart's ServiceAccount.
    pub fn operator_username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.name, self.fullname())
    }

    /// `helm uninstall --wait`.
    pub fn uninstall(mut self) {
        self.uninstalled = true;
        helm_ok(&self.kubeconfig, &["uninstall", &self.name, "-n", &self.name, "--wait", "--timeout", "120s"]);
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        if !self.uninstalled {
            let out =
                helm(&self.kubeconfig, &["uninstall", &self.name, "-n", &self.name, "--wait", "--timeout", "120s"]);
            if !out.status.success() {
                eprintln!("helm uninstall {} failed: {}", self.name, String::from_utf8_lossy(&out.stderr));
            }
        }
    }
}

/// A token for ServiceAccount `sa` of the test namespace (`kubectl create token`), bound to pod
/// `pod` when given (the API server then puts the pod's name and UID into the user's extra info).
pub(crate) fn create_token(ns: &TestNs, sa: &str, pod: Option<&str>) -> String {
    let mut args = vec!["create", "token", sa, "--duration", "1h"];
    if let Some(p) = pod {
        args.extend(["--bound-object-kind", "Pod", "--bound-object-name", p]);
    }
    ns.kubectl(&args).trim().to_string()
}

/// Writes a kubeconfig that authenticates with `token` (same server and CA as the admin one).
pub(crate) fn token_kubeconfig(ns: &TestNs, tag: &str, token: &str) -> PathBuf {
    let kc = Kubeconfig::read_from(&ns.kubeconfig).expect("read admin kubeconfig");
    let cluster = kc.clusters[0].cluster.as_ref().expect("cluster");
    let server = cluster.server.clone().expect("server");
    let ca = cluster.certificate_authority_data.clone().expect("CA data");
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
         users:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n    namespace: {}\n\
         current-context: c\n",
        ns.ns
    );
    let dir = repo().join("target/e2e-logs");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}-{tag}.kubeconfig", ns.ns));
    std::fs::write(&path, yaml).unwrap();
    path
}

/// A client for a kubeconfig file.
pub(crate) async fn client_for(path: &Path) -> Client {
    let kc = Kubeconfig::read_from(path).expect("read kubeconfig");
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.expect("kubeconfig");
    Client::try_from(cfg).expect("client")
}

/// A client for ServiceAccount `sa` (its token bound to `pod` when given).
pub(crate) async fn client_as(ns: &TestNs, tag: &str, sa: &str, pod: Option<&str>) -> Client {
    client_for(&token_kubeconfig(ns, tag, &create_token(ns, sa, pod))).await
}

/// The admin client impersonating `user` with exactly `groups` (as `kubectl --as --as-group`).
pub(crate) async fn client_impersonating(ns: &TestNs, user: &str, groups: &[&str]) -> Client {
    let kc = Kubeconfig::read_from(&ns.kubeconfig).expect("read kubeconfig");
    let mut cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.expect("kubeconfig");
    cfg.auth_info.impersonate = Some(user.to_string());
    cfg.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    Client::try_from(cfg).expect("client")
}

/// A `leasehold operator` process with its own kubeconfig and arguments; killed on drop, and its
/// log printed when the test fails.
pub(crate) struct OperatorProc {
    child: Child,
    /// Its log file.
    pub log: PathBuf,
    /// Port of its admin server on 127.0.0.1.
    pub admin_port: u16,
}

impl OperatorProc {
    /// Starts `leasehold operator --namespace <ns> --admin-addr 127.0.0.1:<free port>
    /// --instance <tag> <extra...>` with `KUBECONFIG=kubeconfig`.
    pub fn start(ns: &str, tag: &str, kubeconfig: &Path, extra: &[&str]) -> OperatorProc {
        let dir = repo().join("target/e2e-logs");
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join(format!("{ns}-operator-{tag}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let admin_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args(["operator", "--namespace", ns, "--admin-addr", &format!("127.0.0.1:{admin_port}")])
            .args(["--instance", tag])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,leasehold=debug")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start operator");
        OperatorProc { child, log, admin_port }
    }

    /// Its exit code once it has exited (128 + signal when killed by one).
    pub fn exit_code(&mut self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        let status = self.child.try_wait().expect("try_wait")?;
        Some(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
    }

    /// Waits (at most `timeout`) until it exits; returns the exit code.
    pub async fn wait_exit(&mut self, timeout: Duration) -> i32 {
        let start = std::time::Instant::now();
        loop {
            if let Some(code) = self.exit_code() {
                return code;
            }
            assert!(start.elapsed() < timeout, "operator did not exit; log:\n{}", self.log_text());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Sends a signal (`TERM`, `KILL`, ...).
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill").args([&format!("-{sig}"), &self.child.id().to_string()]).status();
        assert!(ok.is_ok_and(|s| s.success()), "kill -{sig}");
    }

    /// Everything it logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Status code and body of `GET path` on its admin server (`None` when nothing answers).
    pub async fn request(&self, path: &str) -> Option<(u16, String)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", self.admin_port)).await.ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).await.ok()?;
        let code = out.split_whitespace().nth(1)?.parse().ok()?;
        let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        Some((code, body))
    }

    /// HTTP status of `GET path` on its admin server (`None` when nothing answers).
    pub async fn http_status(&self, path: &str) -> Option<u16> {
        self.request(path).await.map(|(code, _)| code)
    }

    /// The body of `GET path` on its admin server (`None` when nothing answers).
    pub async fn get(&self, path: &str) -> Option<String> {
        self.request(path).await.map(|(_, body)| body)
    }
}

impl Drop for OperatorProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log_text();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!(
                "==== operator log {} ====\n{}",
                self.log.display(),
                lines[lines.len().saturating_sub(80)..].join("\n")
            );
        }
    }
}

/// Waits until the admission policy `policy` denies `probe` (a server-side dry run: it changes
/// nothing). The API server loads ValidatingAdmissionPolicies and their bindings through an
/// informer, so a policy that `helm install --wait` has just created is in force only a moment
/// later; a test that asserts a denial before then fails at random.
pub(crate) async fn wait_in_force<T, F, Fut>(policy: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    wait_until(&format!("{policy} in force"), WAIT, || {
        let request = probe();
        async move { matches!(request.await, Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(policy)) }
    })
    .await;
}

/// Parameters of a server-side dry run, for [`wait_in_force`] probes.
fn dry_run() -> PatchParams {
    PatchParams { dry_run: true, ..PatchParams::default() }
}

/// Asserts that `r` was denied by the admission policy `policy` with a message containing `words`.
#[track_caller]
pub(crate) fn assert_denied<T: std::fmt::Debug>(r: Result<T, kube::Error>, policy: &str, words: &str) {
    match r {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "expected 403 Forbidden: {}", s.message);
            assert!(s.message.contains(policy), "denied, but not by {policy}: {}", s.message);
            assert!(s.message.contains(words), "message lacks {words:?}: {}", s.message);
        }
        other => panic!("expected {policy} to deny the request ({words}), got {other:?}"),
    }
}

/// Asserts that `r` succeeded.
#[track_caller]
pub(crate) fn assert_allowed<T>(r: Result<T, kube::Error>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what}: expected success, got {e}"),
    }
}

/// Waits until the ValidatingAdmissionPolicies of a release report their type check, and returns its warnings
/// (none expected: every CEL expression type-checks against the real schemas).
async fn policy_type_warnings(client: &Client, release: &Release) -> Vec<String> {
    let api: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let mut warnings = vec![];
    for suffix in ["pod-grants", "lease-grants", "claim-values", "gated-pods"] {
        let name = format!("{}-{suffix}", release.fullname());
        wait_until(&format!("type check of {name}"), WAIT, || async {
            api.get(&name).await.ok().is_some_and(|p| {
                let generation = p.metadata.generation;
                p.status.is_some_and(|s| s.type_checking.is_some() && s.observed_generation == generation)
            })
        })
        .await;
        let p = api.get(&name).await.unwrap();
        let tc = p.status.and_then(|s| s.type_checking).unwrap_or_default();
        warnings.extend(
            tc.expression_warnings
                .unwrap_or_default()
                .into_iter()
                .map(|w| format!("{name}: {} {}", w.field_ref, w.warning)),
        );
    }
    warnings
}

fn operator_container(d: &Deployment) -> Container {
    d.spec.template.spec.as_ref().unwrap().containers.iter().find(|c| c.name == "operator").unwrap().clone()
}

/// Suffixes of the ClusterRoles for the users of locks (docs/install.md, "RBAC: holders and
/// users"): the holder role and the two aggregated into view / edit / admin.
const USER_ROLES: [&str; 3] = ["holder", "view", "edit"];

#[tokio::test]
async fn chart_installs_upgrades_and_uninstalls() {
    let ns = TestNs::new("install").await;
    // The operator's pods must pass the "restricted" Pod Security Standard.
    ns.kubectl(&["label", "namespace", &ns.ns, "pod-security.kubernetes.io/enforce=restricted"]);
    let release = Release::install(&ns, &[]);
    let c = &ns.client;
    let full = release.fullname();

    // Install: every object is there, and the Deployment's 2 replicas become ready. `helm
    // --wait` reads the ReplicaSet's ready count; the Deployment's status follows a moment later
    // (a run read Some(1) here).
    let status: Value =
        serde_json::from_str(&helm_ok(&ns.kubeconfig, &["status", &release.name, "-n", &ns.ns, "-o", "json"])).unwrap();
    assert_eq!(status["info"]["status"], "deployed");
    assert_eq!(status["version"], 1);
    let deployments = ns.api::<Deployment>();
    wait_until("both replicas ready", WAIT, || async {
        deployments.get(&full).await.ok().and_then(|d| d.status).and_then(|s| s.ready_replicas) == Some(2)
    })
    .await;
    let dep = deployments.get(&full).await.expect("Deployment");
    assert_eq!(dep.spec.replicas, Some(2));
    let pod_spec = dep.spec.template.spec.clone().unwrap();
    assert_eq!(pod_spec.service_account_name.as_deref(), Some(full.as_str()));
    let psc = pod_spec.security_context.clone().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(psc.seccomp_profile.unwrap().type_, "RuntimeDefault");
    let op = operator_container(&dep);
    let sc = op.security_context.clone().unwrap();
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.capabilities.unwrap().drop, Some(vec!["ALL".to_string()]));
    let res = op.resources.clone().unwrap();
    for key in ["cpu", "memory"] {
        assert!(
            res.requests.as_ref().unwrap().contains_key(key) && res.limits.as_ref().unwrap().contains_key(key),
            "{key} request and limit"
        );
    }
    let probe_path =
        |p: Option<k8s_openapi::api::core::v1::Probe>| p.and_then(|p| p.http_get).map(|h| h.path.unwrap_or_default());
    assert_eq!(probe_path(op.liveness_probe.clone()).as_deref(), Some("/livez"));
    assert_eq!(probe_path(op.readiness_probe.clone()).as_deref(), Some("/readyz"));
    let args = op.args.clone().unwrap();
    assert!(args.contains(&"--leader-elect".to_string()), "{args:?}");
    assert!(args.contains(&format!("--leader-election-namespace={}", ns.ns)), "{args:?}");
    let pods = ns
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={}", release.name)))
        .await
        .unwrap();
    assert_eq!(
        pods.items.iter().filter(|p| phase(p) == "Running").count(),
        2,
        "admitted under PSA restricted and running"
    );

    let pdb = ns.api::<PodDisruptionBudget>().get(&full).await.expect("PodDisruptionBudget");
    assert_eq!(
        pdb.spec.unwrap().min_available,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
    let svc = ns.api::<Service>().get(&format!("{full}-metrics")).await.expect("metrics Service");
    assert_eq!(svc.spec.unwrap().ports.unwrap()[0].port, 8080);
    ns.api::<ServiceAccount>().get(&full).await.expect("ServiceAccount");
    ns.api::<Role>().get(&format!("{full}-leader-election")).await.expect("leader-election Role");
    ns.api::<RoleBinding>().get(&format!("{full}-leader-election")).await.expect("leader-election RoleBinding");
    Api::<ClusterRole>::all(c.clone()).get(&full).await.expect("ClusterRole");
    Api::<ClusterRoleBinding>::all(c.clone()).get(&full).await.expect("ClusterRoleBinding");
    for suffix in USER_ROLES {
        Api::<ClusterRole>::all(c.clone()).get(&format!("{full}-{suffix}")).await.expect("user-facing ClusterRole");
    }
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(c.clone());
    for suffix in ["pod-grants", "lease-grants", "claim-values", "gated-pods"] {
        let b = bindings.get(&format!("{full}-{suffix}")).await.expect("policy binding");
        assert_eq!(b.spec.validation_actions, ["Deny"]);
    }
    let warnings = policy_type_warnings(c, &release).await;
    assert!(warnings.is_empty(), "CEL type-check warnings: {warnings:?}");

    // Upgrade with changed values.
    let out = release.upgrade(&[
        "--set",
        "replicaCount=3",
        "--set",
        "logFormat=plain",
        "--set",
        "resources.limits.memory=512Mi",
        "--set",
        "podDisruptionBudget.minAvailable=2",
        "--set",
        "admissionPolicies.validationActions={Warn,Audit}",
    ]);
    assert!(out.status.success(), "helm upgrade: {}", String::from_utf8_lossy(&out.stderr));
    let dep = ns.api::<Deployment>().get(&full).await.unwrap();
    assert_eq!(dep.spec.replicas, Some(3));
    // `helm upgrade --wait` returns once the new pods are ready; an old pod can still be
    // counted ready while it terminates (a CI run saw 4), so wait for the rollout to settle.
    wait_until("3 updated replicas, all ready, no old pod left", WAIT, || async {
        deployments
            .get(&full)
            .await
            .ok()
            .and_then(|d| d.status)
            .is_some_and(|s| (s.replicas, s.updated_replicas, s.ready_replicas) == (Some(3), Some(3), Some(3)))
    })
    .await;
    let op = operator_container(&dep);
    assert!(op.args.unwrap().contains(&"--log-format=plain".to_string()));
    assert_eq!(op.resources.unwrap().limits.unwrap()["memory"].0, "512Mi");
    let pdb = ns.api::<PodDisruptionBudget>().get(&full).await.unwrap();
    assert_eq!(
        pdb.spec.unwrap().min_available,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2))
    );
    let b = bindings.get(&format!("{full}-pod-grants")).await.unwrap();
    assert_eq!(b.spec.validation_actions, ["Warn", "Audit"]);

    // A wrong value fails the upgrade with the path of the value, and changes nothing.
    for (values, expected) in [
        (vec!["--set", "replicaCount=three"], "at '/replicaCount': got string, want integer"),
        (vec!["--set", "logFormat=xml"], "at '/logFormat': value must be one of 'json', 'plain'"),
        (vec!["--set", "replicas=2"], "additional properties 'replicas' not allowed"),
        (vec!["--set", "admissionPolicies.validationActions={Deny,Warn}"], "Deny and Warn cannot be combined"),
    ] {
        let out = release.upgrade(&values);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{values:?} should fail");
        assert!(stderr.contains(expected), "{values:?}: message should say {expected:?}, got:\n{stderr}");
    }
    let status: Value =
        serde_json::from_str(&helm_ok(&ns.kubeconfig, &["status", &release.name, "-n", &ns.ns, "-o", "json"])).unwrap();
    assert_eq!(status["version"], 2, "failed upgrades leave no revision");

    // Uninstall: every object goes, cluster-scoped ones included; the CRDs stay (like every
    // chart's crds/ directory: deleting a CRD would delete every lock).
    release.uninstall();
    assert!(ns.api::<Deployment>().get_opt(&full).await.unwrap().is_none());
    assert!(ns.api::<ServiceAccount>().get_opt(&full).await.unwrap().is_none());
    assert!(ns.api::<PodDisruptionBudget>().get_opt(&full).await.unwrap().is_none());
    assert!(ns.api::<Service>().get_opt(&format!("{full}-metrics")).await.unwrap().is_none());
    assert!(ns.api::<Role>().get_opt(&format!("{full}-leader-election")).await.unwrap().is_none());
    assert!(Api::<ClusterRole>::all(c.clone()).get_opt(&full).await.unwrap().is_none());
    for suffix in USER_ROLES {
        assert!(Api::<ClusterRole>::all(c.clone()).get_opt(&format!("{full}-{suffix}")).await.unwrap().is_none());
    }
    assert!(Api::<ClusterRoleBinding>::all(c.clone()).get_opt(&full).await.unwrap().is_none());
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(c.clone());
    for suffix in ["pod-grants", "lease-grants", "claim-values", "gated-pods"] {
        assert!(policies.get_opt(&format!("{full}-{suffix}")).await.unwrap().is_none());
        assert!(bindings.get_opt(&format!("{full}-{suffix}")).await.unwrap().is_none());
    }
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    assert!(crds.get_opt("distributedlocks.leasehold.dev").await.unwrap().is_some());
    ns.cleanup().await;
}

/// Renders the chart with `values` and has the API server validate every object it renders
/// (`kubectl apply --dry-run=server`); returns the rendering.
fn server_dry_run_of_the_chart(ns: &TestNs, values: &[&str]) -> String {
    let mut args = vec!["template", "lh-render", "charts/leasehold", "-n", &ns.ns, "--include-crds"];
    args.extend(values);
    let out = Command::new(kubectl().parent().unwrap().join("helm")).current_dir(repo()).args(&args).output().unwrap();
    assert!(out.status.success(), "helm template {values:?}: {}", String::from_utf8_lossy(&out.stderr));
    let rendered = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut child = Command::new(kubectl())
        .env("KUBECONFIG", &ns.kubeconfig)
        .args(["apply", "--dry-run=server", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(rendered.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "API server rejected the chart rendered with {values:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let objects = rendered.matches("\nkind: ").count() + usize::from(rendered.starts_with("kind: "));
    let accepted = String::from_utf8_lossy(&out.stdout).matches("(server dry run)").count();
    assert_eq!(accepted, objects, "every rendered object was validated: {}", String::from_utf8_lossy(&out.stdout));
    rendered
}

/// The optional ServiceMonitor and PrometheusRule against the real prometheus-operator CRDs
/// (their OpenAPI schemas, from the pinned release's Go module, `e2e/harness/prometheus-crds.sh`),
/// installed into the cluster for this test; the dashboard ConfigMap beside them.
#[tokio::test]
async fn the_monitoring_objects_are_accepted_by_the_prometheus_operator_crds() {
    let ns = TestNs::new("promcrds").await;
    let out = Command::new(repo().join("e2e/harness/prometheus-crds.sh")).output().unwrap();
    assert!(out.status.success(), "prometheus-crds.sh: {}", String::from_utf8_lossy(&out.stderr));
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    for kind in ["servicemonitors", "prometheusrules"] {
        let file = dir.join(format!("monitoring.coreos.com_{kind}.yaml"));
        ns.kubectl(&["apply", "--server-side", "--force-conflicts", "-f", file.to_str().unwrap()]);
        ns.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("crd/{kind}.monitoring.coreos.com"),
        ]);
    }
    let values = [
        "--set",
        "monitoring.serviceMonitor.enabled=true",
        "--set",
        "monitoring.serviceMonitor.labels.release=prometheus",
        "--set",
        "monitoring.prometheusRule.enabled=true",
        "--set",
        "monitoring.prometheusRule.labels.release=prometheus",
        "--set",
        "monitoring.dashboard.enabled=true",
    ];
    let rendered = server_dry_run_of_the_chart(&ns, &values);
    for kind in ["ServiceMonitor", "PrometheusRule", "ConfigMap"] {
        assert!(rendered.contains(&format!("\nkind: {kind}\n")), "the rendering has a {kind}");
    }
    ns.cleanup().await;
}

#[tokio::test]
async fn everything_the_chart_renders_is_accepted_by_the_api_server() {
    let ns = TestNs::new("render").await;
    // Value sets that switch every template branch on or off.
    let sets: Vec<Vec<&str>> = vec![
        vec![],
        vec![
            "--set",
            "replicaCount=1",
            "--set",
            "leaderElection.enabled=false",
            "--set",
            "metricsService.enabled=false",
            "--set",
            "admissionPolicies.enabled=false",
            "--set",
            "podDisruptionBudget.enabled=false",
            "--set",
            "serviceAccount.create=false",
            "--set",
            "serviceAccount.name=existing",
            "--set",
            "rbac.aggregateRoles=false",
            "--set",
            "rbac.holderRole=false",
        ],
        vec![
            "--set",
            "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "--set",
            "admissionPolicies.validationActions={Deny,Audit}",
            "--set-json",
            r#"admissionPolicies.namespaceSelector={"matchExpressions":[{"key":"leasehold.dev/protect","operator":"Exists"}]}"#,
            "--set-json",
            r#"tolerations=[{"key":"dedicated","operator":"Exists","effect":"NoSchedule"}]"#,
            "--set-json",
            r#"imagePullSecrets=[{"name":"registry"}]"#,
            "--set",
            "podAnnotations.team=platform",
            "--set",
            "priorityClassName=system-cluster-critical",
            "--set",
            "fullnameOverride=lock-operator",
            "--set",
            "leaderElection.leaseName=lock-operator-leader",
            "--set-json",
            r#"extraArgs=["--namespace=team-a"]"#,
            "--set-json",
            r#"extraEnv=[{"name":"LEASEHOLD_EXTRA","value":"1"}]"#,
            "--set",
            "podSecurityContext.runAsUser=null",
            "--set",
            "podSecurityContext.runAsGroup=null",
            "--set",
            "networkPolicy.enabled=true",
            "--set-json",
            r#"networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"name":"monitoring"}}}]"#,
            "--set",
            "global.imageRegistry=registry.example",
        ],
    ];
    for values in sets {
        server_dry_run_of_the_chart(&ns, &values);
    }
    ns.cleanup().await;
}

/// A singleton CronJob that never fires during a test (runs are started by hand with
/// `kubectl create job --from`); each run "works" for `run_for`.
fn singleton_cronjob(name: &str, run_for: &str) -> CronJob {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {"leasehold.dev/singleton": "true"}},
        "spec": {
            "schedule": "0 0 1 1 *",
            // Runs are started by hand; suspended, the schedule never adds one.
            "suspend": true,
            "concurrencyPolicy": "Forbid",
            "jobTemplate": {"spec": {"backoffLimit": 0, "template": {
                "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": run_for}},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "task", "image": "busybox"}]},
            }}},
        },
    }))
    .unwrap()
}

fn template_claimed(t: &k8s_openapi::api::core::v1::PodTemplateSpec) -> bool {
    let gated = t
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == "leasehold.dev/lock"));
    let annotated =
        t.metadata.as_ref().and_then(|m| m.annotations.as_ref()).is_some_and(|a| a.contains_key("leasehold.dev/lock"));
    gated && annotated
}

async fn job_pod(ns: &TestNs, job: &str) -> Option<Pod> {
    let pods = ns.api::<Pod>().list(&ListParams::default().labels(&format!("job-name={job}"))).await.ok()?;
    pods.items.into_iter().next()
}

/// The RBAC proof: the operator runs with a token of the chart's ServiceAccount (`kubectl create
/// token`), so it has exactly the chart's ClusterRole and leader-election Role, and the
/// admission policies are enforced in the namespace. It goes through the core scenario, the
/// singleton CronJob scenario, and the paths that use every other granted verb. A missing
/// permission shows up as a 403 in its log or as a scenario that never finishes.
#[tokio::test]
async fn operator_runs_as_the_charts_service_account() {
    let ns = TestNs::new("rbac").await;
    let release = Release::install(&ns, &["--set", "replicaCount=1"]);
    let kc = token_kubeconfig(&ns, "operator", &create_token(&ns, &release.fullname(), None));
    let lease_name = release.fullname();
    let mut op = OperatorProc::start(
        &ns.ns,
        "chart-sa",
        &kc,
        &["--leader-elect", "--leader-election-namespace", &ns.ns, "--leader-election-lease", &lease_name],
    );
    let leases = ns.api::<Lease>();
    wait_until("the operator leads (leader-election Role)", WAIT, || async {
        let lease = leases.get_opt(&lease_name).await.ok().flatten();
        lease.and_then(|l| l.spec?.holder_identity).is_some_and(|h| h.starts_with("chart-sa_"))
    })
    .await;
    let opr = &op;
    // Ready = every watch (locks, claims, pods, Leases, nodes, workloads) listed and synced.
    wait_until("the operator ready", WAIT, || async move { opr.http_status("/readyz").await == Some(200) }).await;

    // Core: three gated pods, one at a time, FIFO, increasing tokens.
    let log = watch_holders(&ns);
    ns.create_lock("report", json!({})).await;
    for name in ["first", "second", "third"] {
        ns.create_gated_pod(name, "report", "2s").await;
        tokio::time::sleep(Duration::from_millis(1100)).await; // creationTimestamp has 1 s resolution
    }
    wait_pod(&ns, "third", "Succeeded", |p| phase(p) == "Succeeded").await;
    let seen = snapshot(&log);
    assert!(seen.overlaps.is_empty(), "two holders at once: {:?}", seen.overlaps);
    let order: Vec<&str> = seen.grants.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(order, ["first", "second", "third"]);
    let tokens: Vec<i64> = seen.grants.iter().map(|(_, t)| *t).collect();
    assert!(tokens[0] > 0 && tokens.windows(2).all(|w| w[0] < w[1]), "tokens increase: {tokens:?}");
    let locks = ns.api::<DistributedLock>();
    wait_until("status of report written", WAIT, || async {
        locks
            .get("report")
            .await
            .ok()
            .and_then(|l| l.status)
            .is_some_and(|s| s.highest_token == tokens[2] && s.holder.is_none())
    })
    .await;

    // Singleton CronJob: the claim is added to its pod template, its lock created; two manual
    // runs hold the lock one after the other.
    ns.api::<CronJob>().create(&PostParams::default(), &singleton_cronjob("nightly", "2s")).await.unwrap();
    let cronjobs = ns.api::<CronJob>();
    // (The claim is written at admission already; the lock comes from the operator.)
    wait_until("claim in the CronJob's pod template and its lock created", WAIT, || async {
        cronjobs
            .get("nightly")
            .await
            .ok()
            .is_some_and(|cj| template_claimed(&cj.spec.job_template.spec.unwrap().template))
            && locks.get_opt("nightly").await.ok().flatten().is_some()
    })
    .await;
    let lock = locks.get("nightly").await.expect("the CronJob's lock");
    assert!(lock.owner_references().iter().any(|o| o.kind == "CronJob" && o.name == "nightly"));
    for run in ["run-0", "run-1"] {
        ns.kubectl(&["create", "job", run, "--from=cronjob/nightly"]);
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    for run in ["run-0", "run-1"] {
        wait_until(&format!("{run} succeeded"), WAIT, || async {
            ns.api::<Job>().get(run).await.ok().and_then(|j| j.status).and_then(|s| s.succeeded) == Some(1)
        })
        .await;
    }
    let (p0, p1) = (job_pod(&ns, "run-0").await.unwrap(), job_pod(&ns, "run-1").await.unwrap());
    assert!(token_of(&p0).unwrap() < token_of(&p1).unwrap(), "the second run holds with a higher token");
    let seen = snapshot(&log);
    assert!(seen.overlaps.is_empty(), "two holders at once: {:?}", seen.overlaps);
    // Removing the annotation removes the claim from the template and deletes the CronJob's lock.
    let unannotate = json!({"metadata": {"annotations": {"leasehold.dev/singleton": null}}});
    cronjobs.patch("nightly", &PatchParams::default(), &Patch::Merge(&unannotate)).await.unwrap();
    wait_until("claim removed and lock deleted", WAIT, || async {
        let cj = cronjobs.get("nightly").await.unwrap();
        !template_claimed(&cj.spec.job_template.spec.unwrap().template)
            && locks.get_opt("nightly").await.unwrap().is_none()
    })
    .await;

    // Deployments and StatefulSets get the claim too (patch on apps).
    let dep: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "annotations": {"leasehold.dev/singleton": "true"}},
        "spec": {"replicas": 0, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }))
    .unwrap();
    ns.api::<Deployment>().create(&PostParams::default(), &dep).await.unwrap();
    let sts: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "db", "annotations": {"leasehold.dev/singleton": "true"}},
        "spec": {"replicas": 0, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }))
    .unwrap();
    ns.api::<StatefulSet>().create(&PostParams::default(), &sts).await.unwrap();
    wait_until("claim in the Deployment's and StatefulSet's templates", WAIT, || async {
        let d = ns.api::<Deployment>().get("web").await.unwrap();
        let s = ns.api::<StatefulSet>().get("db").await.unwrap();
        template_claimed(&d.spec.template) && template_claimed(&s.spec.template)
    })
    .await;

    // A claim is granted: its status carries the token (distributedlockclaims/status).
    ns.create_lock("claimed", json!({})).await;
    let claim: DistributedLockClaim = serde_json::from_value(json!({
        "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLockClaim",
        "metadata": {"name": "ci"}, "spec": {"lock": "claimed", "identity": "ci-runner"},
    }))
    .unwrap();
    let claims = ns.api::<DistributedLockClaim>();
    claims.create(&PostParams::default(), &claim).await.unwrap();
    wait_until("claim granted", WAIT, || async {
        claims.get("ci").await.ok().and_then(|c| c.status).and_then(|s| s.token).is_some()
    })
    .await;

    // A waiter with on-busy: skip is marked Failed (pods/status).
    ns.create_lock("busy", json!({})).await;
    ns.create_gated_pod("busy-holder", "busy", "600s").await;
    wait_pod(&ns, "busy-holder", "granted", |p| !is_gated(p)).await;
    let mut skipper = gated_pod("skipper", "busy", "1s");
    skipper
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(leasehold::lock::policy::ON_BUSY_ANNOTATION.into(), "skip".into());
    ns.create_pod(skipper).await;
    wait_pod(&ns, "skipper", "marked Failed", |p| phase(p) == "Failed").await;

    // A holder that can never start is deleted after startTimeoutSeconds (delete pods).
    ns.create_lock("stuck", json!({"startTimeoutSeconds": 1})).await;
    let mut stuck = gated_pod("unschedulable", "stuck", "1s");
    stuck.spec.as_mut().unwrap().node_selector =
        Some([("leasehold.dev/no-such-node".to_string(), "true".to_string())].into());
    ns.create_pod(stuck).await;
    let pods = ns.api::<Pod>();
    wait_until("the stuck holder deleted", WAIT, || async { pods.get_opt("unschedulable").await.unwrap().is_none() })
        .await;

    // Events were published (events.k8s.io create) by the operator.
    // (A release's Event follows the next grant, off the handover's path: wait for it.)
    let events = ns.api::<Event>();
    let reasons = ["Granted", "Released", "LockCreated", "StartTimeout"];
    let ours = || async {
        let list = events.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
        list.iter()
            .filter(|e| e.reporting_controller.as_deref() == Some("leasehold.dev/operator"))
            .filter_map(|e| e.reason.clone())
            .collect::<Vec<String>>()
    };
    wait_until("Granted, Released, LockCreated and StartTimeout Events from the operator", WAIT, || async {
        let ours = ours().await;
        reasons.iter().all(|r| ours.iter().any(|o| o == r))
    })
    .await;

    // Nothing was refused along the way, and the operator is still running.
    let text = op.log_text();
    let refused: Vec<&str> =
        text.lines().filter(|l| l.contains("forbidden") || l.contains("Forbidden") || l.contains(" 403")).collect();
    assert!(refused.is_empty(), "requests refused to the chart's ServiceAccount:\n{}", refused.join("\n"));
    assert_eq!(op.exit_code(), None, "operator exited");
    drop(op);
    drop(release);
    ns.cleanup().await;
}

/// ServiceAccount `name` with a Role that may change pods (and their status) and Leases in the
/// namespace, as an ordinary user of it (a CI job, a developer) typically may: RBAC allows the
/// changes below, only the admission policies stand in the way.
fn ordinary_user(ns: &TestNs, name: &str) {
    ns.kubectl(&["create", "serviceaccount", name]);
    let role = format!("{name}-edit");
    ns.kubectl(&[
        "create",
        "role",
        &role,
        "--verb=get,list,watch,create,update,patch,delete",
        "--resource=pods,pods/status,leases",
    ]);
    ns.kubectl(&[
        "create",
        "rolebinding",
        &role,
        &format!("--role={role}"),
        &format!("--serviceaccount={}:{name}", ns.ns),
    ]);
}

const GATE: &str = "leasehold.dev/lock";
const TOKEN: &str = "leasehold.dev/fencing-token";
const GRANTED_LOCK: &str = "leasehold.dev/granted-lock";
const SLOT: &str = "leasehold.dev/slot";

fn ungate_patch() -> Value {
    json!({"spec": {"schedulingGates": [{"$patch": "delete", "name": GATE}]}})
}

#[tokio::test]
async fn only_the_operator_may_ungate_pods_or_set_fencing_tokens() {
    let ns = TestNs::new("tamperpod").await;
    let release = Release::install(&ns, &["--set", "replicaCount=1"]);
    ordinary_user(&ns, "mallory");
    let policy = format!("{}-pod-grants", release.fullname());
    let pp = PatchParams::default();
    let mallory: Api<Pod> = Api::namespaced(client_as(&ns, "mallory", "mallory", None).await, &ns.ns);
    let operator: Api<Pod> = Api::namespaced(client_as(&ns, "operator", &release.fullname(), None).await, &ns.ns);
    ns.create_gated_pod("victim", "report", "600s").await;
    let (dry, ungate) = (dry_run(), Patch::Strategic(ungate_patch()));
    wait_in_force(&policy, || mallory.patch("victim", &dry, &ungate)).await;

    // Removing the gate: as the operator does (strategic merge), or by replacing the list.
    assert_denied(mallory.patch("victim", &pp, &Patch::Strategic(&ungate_patch())).await, &policy, "scheduling gate");
    // The message names the one identity that may.
    assert_denied(
        mallory.patch("victim", &pp, &Patch::Strategic(&ungate_patch())).await,
        &policy,
        &release.operator_username(),
    );
    let no_gates = json!({"spec": {"schedulingGates": null}});
    assert_denied(mallory.patch("victim", &pp, &Patch::Merge(&no_gates)).await, &policy, "scheduling gate");
    // Forging a token: on the pod, through pods/status, or in a new pod.
    let forge = json!({"metadata": {"annotations": {TOKEN: "999"}}});
    assert_denied(mallory.patch("victim", &pp, &Patch::Merge(&forge)).await, &policy, "fencing-token");
    assert_denied(mallory.patch_status("victim", &pp, &Patch::Merge(&forge)).await, &policy, "fencing-token");
    let mut forged = gated_pod("forged", "report", "1s");
    forged.metadata.annotations.get_or_insert_default().insert(TOKEN.into(), "5".into());
    assert_denied(mallory.create(&PostParams::default(), &forged).await, &policy, "fencing-token");
    // Or making a token count for another lock.
    let forge = json!({"metadata": {"annotations": {GRANTED_LOCK: "report"}}});
    assert_denied(mallory.patch("victim", &pp, &Patch::Merge(&forge)).await, &policy, "granted-lock");
    // Changes that concern no grant go through.
    let label = json!({"metadata": {"labels": {"team": "a"}}});
    assert_allowed(mallory.patch("victim", &pp, &Patch::Merge(&label)).await, "an unrelated label");
    let victim = ns.api::<Pod>().get("victim").await.unwrap();
    assert!(is_gated(&victim) && token_of(&victim).is_none(), "the pod is untouched");

    // The operator may: the very patch a grant writes.
    let grant = json!({
        "metadata": {"annotations": {TOKEN: "1", GRANTED_LOCK: "report", SLOT: "1"}},
        "spec": {"schedulingGates": [{"$patch": "delete", "name": GATE}]},
    });
    let p = assert_allowed(operator.patch("victim", &pp, &Patch::Strategic(&grant)).await, "the operator grants");
    assert!(!is_gated(&p) && token_of(&p) == Some(1));
    // Once granted, nobody else may point the grant at another lock, or change or remove the token.
    let other_lock = json!({"metadata": {"annotations": {GRANTED_LOCK: "other-lock"}}});
    assert_denied(mallory.patch("victim", &pp, &Patch::Merge(&other_lock)).await, &policy, "granted-lock");
    let change = json!({"metadata": {"annotations": {TOKEN: "2"}}});
    assert_denied(mallory.patch("victim", &pp, &Patch::Merge(&change)).await, &policy, "fencing-token");
    let remove = json!({"metadata": {"annotations": {TOKEN: null}}});
    assert_denied(mallory.patch("victim", &pp, &Patch::Merge(&remove)).await, &policy, "fencing-token");
    // Nor move a semaphore holder to another slot (its own slot would be granted again).
    let slot = json!({"metadata": {"annotations": {SLOT: "0"}}});
    assert_denied(mallory.patch("victim", &pp, &Patch::Merge(&slot)).await, &policy, "leasehold.dev/slot");
    let no_slot = json!({"metadata": {"annotations": {SLOT: null}}});
    assert_denied(mallory.patch("victim", &pp, &Patch::Merge(&no_slot)).await, &policy, "leasehold.dev/slot");
    assert_allowed(operator.patch("victim", &pp, &Patch::Merge(&change)).await, "the operator changes the token");

    // A multi-lock pod (leasehold.dev/locks): nobody but the operator records or withdraws a lock
    // of its set, on the pod or in a new pod, and its list stays put once a lock is recorded.
    let b_token = leasehold::lock::lock_token_annotation("b");
    let b_withdrawn = leasehold::lock::lock_withdrawn_annotation("b");
    let mut set = gated_pod("set", "unused", "600s");
    let ann = set.metadata.annotations.get_or_insert_default();
    ann.remove(leasehold::lock::LOCK_ANNOTATION);
    ann.insert(leasehold::lock::LOCKS_ANNOTATION.into(), "a,b".into());
    let mut forged = set.clone();
    forged.metadata.name = Some("set-forged".into());
    forged.metadata.annotations.get_or_insert_default().insert(b_token.clone(), "5".into());
    assert_denied(mallory.create(&PostParams::default(), &forged).await, &policy, "locks.leasehold.dev/fencing-token");
    assert_allowed(mallory.create(&PostParams::default(), &set).await, "a multi-lock pod with nothing recorded");
    let record = json!({"metadata": {"annotations": {(b_token.clone()): "5"}}});
    assert_denied(
        mallory.patch("set", &pp, &Patch::Merge(&record)).await,
        &policy,
        "locks.leasehold.dev/fencing-token",
    );
    assert_allowed(operator.patch("set", &pp, &Patch::Strategic(&record)).await, "the operator records b");
    let relist = json!({"metadata": {"annotations": {(leasehold::lock::LOCKS_ANNOTATION): "a"}}});
    assert_denied(mallory.patch("set", &pp, &Patch::Merge(&relist)).await, &policy, "leasehold.dev/locks");
    let withdraw = json!({"metadata": {"annotations": {(b_token.clone()): null, (b_withdrawn.clone()): "5"}}});
    assert_denied(mallory.patch("set", &pp, &Patch::Merge(&withdraw)).await, &policy, "withdrawn");
    assert_allowed(operator.patch("set", &pp, &Patch::Strategic(&withdraw)).await, "the operator withdraws b");
    let forget = json!({"metadata": {"annotations": {(b_withdrawn.clone()): null}}});
    assert_denied(mallory.patch("set", &pp, &Patch::Merge(&forget)).await, &policy, "withdrawn");
    // With no lock recorded (only a withdrawal), the list may change.
    assert_allowed(mallory.patch("set", &pp, &Patch::Merge(&relist)).await, "a new list before any record");
    drop(release);
    ns.cleanup().await;
}

/// Applies a JSON merge patch to a typed object.
fn json_merge<K: serde::Serialize + serde::de::DeserializeOwned>(obj: &mut K, patch: &Value) {
    fn merge(a: &mut Value, b: &Value) {
        match (a, b) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    if v.is_null() {
                        a.remove(k);
                    } else {
                        merge(a.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
            (a, b) => *a = b.clone(),
        }
    }
    let mut v = serde_json::to_value(&*obj).unwrap();
    merge(&mut v, patch);
    *obj = serde_json::from_value(v).unwrap();
}

fn micro_now() -> Value {
    serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(k8s_openapi::jiff::Timestamp::now()))
        .unwrap()
}

fn renew_patch() -> Value {
    json!({"spec": {"renewTime": micro_now()}})
}

#[tokio::test]
async fn only_the_operator_may_change_lease_holders_and_holders_renew_only_their_own_grant() {
    use leasehold::lock::{HOLDER_UID_ANNOTATION, LEASE_LABEL, TOKEN_FLOOR_ANNOTATION};
    let ns = TestNs::new("tamperlease").await;
    let release = Release::install(&ns, &["--set", "replicaCount=1"]);
    ordinary_user(&ns, "mallory");
    ordinary_user(&ns, "worker");
    let policy = format!("{}-lease-grants", release.fullname());
    let pp = PatchParams::default();
    // Two pods of the same ServiceAccount: only the pod name in their bound tokens tells them apart.
    for name in ["holder", "other"] {
        let mut p = gated_pod(name, "l", "600s");
        p.spec.as_mut().unwrap().service_account_name = Some("worker".into());
        ns.create_pod(p).await;
    }
    let holder_uid = ns.api::<Pod>().get("holder").await.unwrap().uid().unwrap();
    let operator: Api<Lease> = Api::namespaced(client_as(&ns, "operator", &release.fullname(), None).await, &ns.ns);
    let mallory: Api<Lease> = Api::namespaced(client_as(&ns, "mallory", "mallory", None).await, &ns.ns);
    let holder: Api<Lease> = Api::namespaced(client_as(&ns, "holder", "worker", Some("holder")).await, &ns.ns);
    let other: Api<Lease> = Api::namespaced(client_as(&ns, "other", "worker", Some("other")).await, &ns.ns);
    let probe =
        json!({"metadata": {"name": "probe", "labels": {LEASE_LABEL: "probe"}}, "spec": {"holderIdentity": "x"}});
    let probe: Lease = serde_json::from_value(probe).unwrap();
    let dry_create = PostParams { dry_run: true, ..PostParams::default() };
    wait_in_force(&policy, || mallory.create(&dry_create, &probe)).await;

    // The operator writes a grant: pod "holder" holds lock l with token 7.
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "l", "labels": {LEASE_LABEL: "l"},
                     "annotations": {TOKEN: "7", TOKEN_FLOOR_ANNOTATION: "0", HOLDER_UID_ANNOTATION: holder_uid}},
        "spec": {"holderIdentity": "holder", "leaseDurationSeconds": 15, "acquireTime": micro_now(), "renewTime": micro_now()},
    }))
    .unwrap();
    assert_allowed(operator.create(&PostParams::default(), &lease).await, "the operator creates a held Lease");

    // The holder renews its own grant; the other pod of the same ServiceAccount and mallory may not.
    assert_allowed(holder.patch("l", &pp, &Patch::Merge(&renew_patch())).await, "the holder renews");
    assert_denied(other.patch("l", &pp, &Patch::Merge(&renew_patch())).await, &policy, "may renew its grant");
    assert_denied(mallory.patch("l", &pp, &Patch::Merge(&renew_patch())).await, &policy, "may renew its grant");
    // Nobody but the operator changes the holder: not to themselves, not by handing it over.
    for (who, api) in [("other", &other), ("mallory", &mallory)] {
        let take = json!({"spec": {"holderIdentity": who}});
        assert_denied(api.patch("l", &pp, &Patch::Merge(&take)).await, &policy, "may change the holder");
    }
    let hand_over = json!({"spec": {"holderIdentity": "other"}});
    assert_denied(holder.patch("l", &pp, &Patch::Merge(&hand_over)).await, &policy, "may change the holder");
    // ...nor the token, the floor, the holder UID, the lock label.
    for (key, value) in [(TOKEN, json!("99")), (TOKEN_FLOOR_ANNOTATION, json!("1000")), (TOKEN, Value::Null)] {
        let p = json!({"metadata": {"annotations": {key: value}}});
        assert_denied(mallory.patch("l", &pp, &Patch::Merge(&p)).await, &policy, "fencing token");
    }
    let p = json!({"metadata": {"annotations": {HOLDER_UID_ANNOTATION: "forged"}}});
    assert_denied(mallory.patch("l", &pp, &Patch::Merge(&p)).await, &policy, "holder-uid");
    let p = json!({"metadata": {"annotations": {leasehold::lock::HOLDER_KIND_ANNOTATION: "Pod"}}});
    assert_denied(mallory.patch("l", &pp, &Patch::Merge(&p)).await, &policy, "holder-kind");
    let p = json!({"metadata": {"labels": {LEASE_LABEL: null}}});
    assert_denied(mallory.patch("l", &pp, &Patch::Merge(&p)).await, &policy, "label");
    // ...nor create a Leasehold Lease that names a holder.
    let mut fake = lease.clone();
    fake.metadata = serde_json::from_value(json!({"name": "l2", "labels": {LEASE_LABEL: "l2"}})).unwrap();
    assert_denied(mallory.create(&PostParams::default(), &fake).await, &policy, "create a Leasehold Lease");
    // Leases that are not Leasehold's are not affected.
    let mut plain = fake.clone();
    plain.metadata = serde_json::from_value(json!({"name": "not-ours"})).unwrap();
    assert_allowed(mallory.create(&PostParams::default(), &plain).await, "an unrelated Lease");

    // Release: only the holder may clear itself (as `leasehold lock` does on exit).
    let release_patch = json!({
        "metadata": {"annotations": {HOLDER_UID_ANNOTATION: null}},
        "spec": {"holderIdentity": null, "acquireTime": null, "renewTime": null},
    });
    assert_denied(other.patch("l", &pp, &Patch::Merge(&release_patch)).await, &policy, "may change the holder");
    let freed = assert_allowed(holder.patch("l", &pp, &Patch::Merge(&release_patch)).await, "the holder releases");
    assert_eq!(freed.spec.unwrap().holder_identity, None);
    assert_eq!(freed.metadata.annotations.unwrap().get(TOKEN).map(String::as_str), Some("7"), "the token stays");

    // A holder outside any pod is known by its user name: the operator grants to mallory's
    // ServiceAccount user name; then mallory may renew, the pods may not.
    let mallory_user = format!("system:serviceaccount:{}:mallory", ns.ns);
    let grant = json!({
        "metadata": {"annotations": {TOKEN: "8", HOLDER_UID_ANNOTATION: "claim-uid"}},
        "spec": {"holderIdentity": mallory_user, "acquireTime": micro_now(), "renewTime": micro_now()},
    });
    // The operator writes Leases as it does in its code: PUT with the resourceVersion read
    // (it has update but neither get nor patch on Leases; it reads them from its watch cache).
    let mut granted = ns.api::<Lease>().get("l").await.unwrap();
    json_merge(&mut granted, &grant);
    assert_allowed(operator.replace("l", &PostParams::default(), &granted).await, "the operator grants");
    let p = json!({"spec": {"holderIdentity": "other"}});
    assert!(
        matches!(operator.patch("l", &pp, &Patch::Merge(&p)).await, Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("cannot patch")),
        "least privilege: no patch on Leases"
    );
    assert_allowed(mallory.patch("l", &pp, &Patch::Merge(&renew_patch())).await, "a user-name holder renews");
    assert_denied(holder.patch("l", &pp, &Patch::Merge(&renew_patch())).await, &policy, "may renew its grant");
    drop(release);
    ns.cleanup().await;
}

#[tokio::test]
async fn cluster_admins_have_escape_hatches() {
    let ns = TestNs::new("breakglass").await;
    let release = Release::install(&ns, &["--set", "replicaCount=1"]);
    ordinary_user(&ns, "mallory");
    let policy = format!("{}-pod-grants", release.fullname());
    let pp = PatchParams::default();
    for name in ["a", "b", "c"] {
        ns.create_gated_pod(name, "report", "600s").await;
    }
    // 1. system:masters (the admin kubeconfig here) is exempt.
    assert_allowed(ns.api::<Pod>().patch("a", &pp, &Patch::Strategic(&ungate_patch())).await, "system:masters");
    // 2. Break glass for one command: act as yourself plus the group leasehold.dev:lock-admins
    //    (`kubectl --as=<you> --as-group=leasehold.dev:lock-admins`); without it, denied.
    let mallory_user = format!("system:serviceaccount:{}:mallory", ns.ns);
    let plain =
        Api::<Pod>::namespaced(client_impersonating(&ns, &mallory_user, &["system:serviceaccounts"]).await, &ns.ns);
    let (dry, ungate) = (dry_run(), Patch::Strategic(ungate_patch()));
    wait_in_force(&policy, || plain.patch("b", &dry, &ungate)).await;
    assert_denied(plain.patch("b", &pp, &Patch::Strategic(&ungate_patch())).await, &policy, "scheduling gate");
    let glass =
        Api::<Pod>::namespaced(client_impersonating(&ns, &mallory_user, &["leasehold.dev:lock-admins"]).await, &ns.ns);
    assert_allowed(glass.patch("b", &pp, &Patch::Strategic(&ungate_patch())).await, "leasehold.dev:lock-admins");
    // 3. The whole policy in report-only mode: helm upgrade ... validationActions={Warn,Audit}.
    let out =
        release.upgrade(&["--set", "replicaCount=1", "--set", "admissionPolicies.validationActions={Warn,Audit}"]);
    assert!(out.status.success(), "helm upgrade: {}", String::from_utf8_lossy(&out.stderr));
    let mallory: Api<Pod> = Api::namespaced(client_as(&ns, "mallory", "mallory", None).await, &ns.ns);
    let m = &mallory;
    wait_until("report-only mode in effect", WAIT, || async move {
        m.patch("c", &PatchParams::default(), &Patch::Strategic(&ungate_patch())).await.is_ok()
    })
    .await;
    drop(release);
    ns.cleanup().await;
}

/// Leader election between replicas, with the admin kubeconfig (the RBAC test above runs it as
/// the chart's ServiceAccount).
#[tokio::test]
async fn one_replica_leads_a_standby_takes_over_and_a_deposed_leader_exits() {
    let ns = TestNs::new("leader").await;
    let le = ["--leader-elect", "--leader-election-namespace", ns.ns.as_str(), "--leader-election-lease", "le"];
    let leases = ns.api::<Lease>();
    let holder = || async {
        leases.get_opt("le").await.ok().flatten().and_then(|l| l.spec?.holder_identity).unwrap_or_default()
    };
    let mut a = OperatorProc::start(&ns.ns, "replica-a", &ns.kubeconfig, &le);
    wait_until("replica-a leads", WAIT, || async { holder().await.starts_with("replica-a_") }).await;
    let mut b = OperatorProc::start(&ns.ns, "replica-b", &ns.kubeconfig, &le);
    let bref = &b;
    // The standby is live and ready (it can take over) while it waits.
    wait_until("standby live and ready", WAIT, || async move {
        bref.http_status("/livez").await == Some(200) && bref.http_status("/readyz").await == Some(200)
    })
    .await;
    ns.create_lock("l1", json!({})).await;
    ns.create_gated_pod("p1", "l1", "600s").await;
    wait_pod(&ns, "p1", "granted by the leader", |p| !is_gated(p)).await;
    assert!(
        b.log_text().contains("waiting to lead") && !b.log_text().contains("starting controllers"),
        "standby did work"
    );

    // SIGTERM: the leader stops cleanly; the standby takes over and serves.
    a.signal("TERM");
    assert_eq!(a.wait_exit(WAIT).await, 0, "a stopped leader exits 0");
    wait_until("replica-b leads", WAIT, || async { holder().await.starts_with("replica-b_") }).await;
    ns.create_lock("l2", json!({})).await;
    ns.create_gated_pod("p2", "l2", "600s").await;
    wait_pod(&ns, "p2", "granted by the new leader", |p| !is_gated(p)).await;

    // Someone else takes the Lease: the deposed leader exits 1 (Kubernetes restarts it as a standby).
    let intruder =
        json!({"spec": {"holderIdentity": "intruder", "renewTime": micro_now(), "leaseDurationSeconds": 60}});
    leases.patch("le", &PatchParams::default(), &Patch::Merge(&intruder)).await.unwrap();
    assert_eq!(b.wait_exit(WAIT).await, 1, "a replica that lost the lead exits 1");
    assert!(b.log_text().contains("lost leadership"));
    ns.cleanup().await;
}

/// Fail closed (issue 10): with the chart's MutatingAdmissionPolicies, the API server writes the
/// claim into a workload's pod template when the workload is admitted, and gates a bare pod that
/// names a lock. Everything here is created while **no operator runs**: a singleton CronJob and
/// a manual run of it, a singleton Deployment, and a pod with only the lock annotation. None of
/// their pods starts until an operator (as the chart's ServiceAccount) grants the locks, one
/// holder per lock. Removing the annotation takes the claim out again, also without an operator.
#[tokio::test]
async fn workloads_created_while_the_operator_is_down_never_run_unlocked() {
    let ns = TestNs::new("failclosed").await;
    let release = Release::install(&ns, &["--set", "replicaCount=1"]);
    let cronjobs = ns.api::<CronJob>();
    let create = PostParams::default();
    // The API server loads the policies through an informer: wait until a dry run is mutated.
    let dry = PostParams { dry_run: true, ..PostParams::default() };
    wait_until("claim-injection policies in force", WAIT, || async {
        let (cj, pod) = (singleton_cronjob("probe", "1s"), bare_claim_pod("probe", "probe"));
        let cj = cronjobs.create(&dry, &cj).await;
        let pod = ns.api::<Pod>().create(&dry, &pod).await;
        cj.is_ok_and(|c| template_claimed(&c.spec.job_template.spec.unwrap().template))
            && pod.is_ok_and(|p| is_gated(&p))
    })
    .await;

    // Admitted with the claim, no operator involved.
    let cj = cronjobs.create(&create, &singleton_cronjob("nightly", "2s")).await.unwrap();
    assert!(template_claimed(&cj.spec.job_template.spec.unwrap().template), "claim written at admission");
    let dep: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "annotations": {"leasehold.dev/singleton": "true"}},
        "spec": {"replicas": 1, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }))
    .unwrap();
    let dep = ns.api::<Deployment>().create(&create, &dep).await.unwrap();
    assert!(template_claimed(&dep.spec.template), "claim written at admission");
    let bare = ns.api::<Pod>().create(&create, &bare_claim_pod("bare", "shared")).await.unwrap();
    assert!(is_gated(&bare), "a pod naming a lock is gated at admission");
    ns.kubectl(&["create", "job", "run-0", "--from=cronjob/nightly"]);

    // Their controllers create the first pods at once: all gated, and they stay gated while
    // nobody can grant (3 s of observation; the real check is the watch below, which sees every
    // ungating).
    let log = watch_holders(&ns);
    // (The release's own operator pods are not among them: they name no lock.)
    let pods = ns.api::<Pod>();
    let claiming = || async {
        let l = pods.list(&ListParams::default()).await.unwrap();
        l.items.into_iter().filter(|p| p.annotations().contains_key("leasehold.dev/lock")).collect::<Vec<_>>()
    };
    wait_until("the Job's and the Deployment's first pods", WAIT, || async {
        let l = claiming().await;
        l.iter().any(|p| p.labels().contains_key("job-name"))
            && l.iter().any(|p| p.labels().get("app").is_some_and(|a| a == "web"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let l = claiming().await;
    assert_eq!(l.len(), 3, "{:?}", l.iter().map(|p| p.name_any()).collect::<Vec<_>>());
    for p in &l {
        assert!(is_gated(p) && phase(p) == "Pending", "{} ran without its lock", p.name_any());
    }
    assert!(snapshot(&log).grants.is_empty(), "nothing granted without an operator");

    // The operator comes up: it creates the singletons' locks and grants each lock to one pod.
    ns.create_lock("shared", json!({})).await;
    let kc = token_kubeconfig(&ns, "operator", &create_token(&ns, &release.fullname(), None));
    let op = OperatorProc::start(&ns.ns, "chart-sa", &kc, &[]);
    wait_until("every pod granted", WAIT, || async {
        let l = claiming().await;
        l.len() == 3 && l.iter().all(|p| !is_gated(p) && token_of(p).is_some())
    })
    .await;
    let seen = snapshot(&log);
    assert!(seen.overlaps.is_empty(), "two holders at once: {:?}", seen.overlaps);
    let locks = ns.api::<DistributedLock>();
    for lock in ["nightly", "web"] {
        let l = locks.get(lock).await.unwrap_or_else(|e| panic!("lock {lock} created by the operator: {e}"));
        assert_eq!(l.owner_references().len(), 1, "{lock} owned by its workload");
    }

    // A lock set (issue 14): the policy writes "<own lock>,<list>" into the template and leaves
    // out the single-lock annotation and the busy policy; the operator applies the same string.
    let template_ann = |cj: CronJob| {
        cj.spec.job_template.spec.unwrap().template.metadata.and_then(|m| m.annotations).unwrap_or_default()
    };
    let mut pair = singleton_cronjob("pair", "1s");
    let ann = pair.metadata.annotations.get_or_insert_default();
    ann.insert("leasehold.dev/locks".into(), "shared".into());
    ann.insert("leasehold.dev/max-wait".into(), "1h".into());
    let t = template_ann(cronjobs.create(&create, &pair).await.unwrap());
    assert_eq!(t.get("leasehold.dev/locks").map(String::as_str), Some("pair,shared"), "{t:?}");
    assert!(!t.contains_key("leasehold.dev/lock") && !t.contains_key("leasehold.dev/max-wait"), "{t:?}");
    wait_until("the operator creates pair's own lock", WAIT, || async {
        locks.get_opt("pair").await.ok().flatten().is_some()
    })
    .await;
    let t = template_ann(cronjobs.get("pair").await.unwrap());
    assert_eq!(t.get("leasehold.dev/locks").map(String::as_str), Some("pair,shared"), "after the operator: {t:?}");
    // A bare pod with a lock set and no gate is gated at admission too.
    let mut bare_set = bare_claim_pod("bare-set", "unused");
    let ann = bare_set.metadata.annotations.get_or_insert_default();
    ann.remove("leasehold.dev/lock");
    ann.insert("leasehold.dev/locks".into(), "shared,pair".into());
    assert!(is_gated(&ns.api::<Pod>().create(&dry, &bare_set).await.unwrap()), "a pod with a lock set is gated");
    // A single-lock workload that gains a list switches to the set: the single-lock annotation
    // goes, the set comes, still gated.
    let add = json!({"metadata": {"annotations": {"leasehold.dev/locks": "shared"}}});
    let cj = cronjobs.patch("nightly", &PatchParams::default(), &Patch::Merge(&add)).await.unwrap();
    let template = cj.spec.job_template.spec.unwrap().template;
    let t = template.metadata.clone().and_then(|m| m.annotations).unwrap_or_default();
    assert_eq!(t.get("leasehold.dev/locks").map(String::as_str), Some("nightly,shared"), "{t:?}");
    assert!(!t.contains_key("leasehold.dev/lock"), "{t:?}");
    assert!(is_gated(&Pod { spec: template.spec, ..Pod::default() }), "still gated");

    // Removing the annotations takes the claim out at admission, operator or not.
    drop(op);
    let unannotate =
        json!({"metadata": {"annotations": {"leasehold.dev/singleton": null, "leasehold.dev/locks": null}}});
    let cj = cronjobs.patch("nightly", &PatchParams::default(), &Patch::Merge(&unannotate)).await.unwrap();
    let template = cj.spec.job_template.spec.unwrap().template;
    assert!(!template_claimed(&template), "claim removed with the annotation: {template:?}");
    assert!(!is_gated(&Pod { spec: template.spec.clone(), ..Pod::default() }), "gate removed: {template:?}");
    let annotations = template.metadata.and_then(|m| m.annotations).unwrap_or_default();
    assert!(!annotations.contains_key("leasehold.dev/locks"), "lock set removed: {annotations:?}");
    assert!(
        annotations.contains_key("pod-complete.stage.kwok.x-k8s.io/delay"),
        "the template's own annotations stay: {annotations:?}"
    );
    release.uninstall();
    ns.cleanup().await;
}

/// A pod that names `lock` by annotation only: no scheduling gate of its own.
fn bare_claim_pod(name: &str, lock: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {"leasehold.dev/lock": lock}},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "main", "image": "busybox"}]},
    }))
    .unwrap()
}

/// Misconfiguration is refused at admission (issue 13), by the chart's claim-values and
/// gated-pods policies, with a message that says what is accepted: a malformed
/// `leasehold.dev/on-busy` or `leasehold.dev/max-wait` on a pod, a Deployment, a StatefulSet or a
/// CronJob, and a pod with the lock's scheduling gate but no lock annotation. Well-formed values
/// are admitted, and so is an update that leaves a value as it was.
#[tokio::test]
async fn malformed_claim_annotations_and_a_gate_without_a_lock_are_refused_at_admission() {
    let ns = TestNs::new("claimvalues").await;
    let release = Release::install(&ns, &["--set", "replicaCount=1"]);
    let (claim_values, gated_pods) =
        (format!("{}-claim-values", release.fullname()), format!("{}-gated-pods", release.fullname()));
    let pods = ns.api::<Pod>();
    let dry = PostParams { dry_run: true, ..PostParams::default() };
    let pod = |name: &str, ann: serde_json::Value, gated: bool| -> Pod {
        let gates = if gated { json!([{"name": "leasehold.dev/lock"}]) } else { json!([]) };
        serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": ann},
            "spec": {"schedulingGates": gates, "containers": [{"name": "main", "image": "busybox"}]},
        }))
        .unwrap()
    };
    // Reason Invalid: 422, with the policy's name and message.
    let refused = |r: Result<Pod, kube::Error>, policy: &str| match r {
        Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains(policy) => Some(s.message),
        _ => None,
    };
    // The API server loads the policies through an informer: wait until both refuse a dry run.
    wait_until("claim-values and gated-pods in force", WAIT, || async {
        let bad = pod("probe", json!({"leasehold.dev/lock": "l", "leasehold.dev/on-busy": "x"}), false);
        let ungated = pod("probe", json!({}), true);
        refused(pods.create(&dry, &bad).await, &claim_values).is_some()
            && refused(pods.create(&dry, &ungated).await, &gated_pods).is_some()
    })
    .await;

    let bad_on_busy = pod("a", json!({"leasehold.dev/lock": "l", "leasehold.dev/on-busy": "later"}), false);
    let m = refused(pods.create(&dry, &bad_on_busy).await, &claim_values).expect("on-busy: later refused");
    assert!(m.contains(r#"leasehold.dev/on-busy must be "wait""#) && m.contains(r#"got "later""#), "{m}");
    let bad_max_wait = pod("b", json!({"leasehold.dev/lock": "l", "leasehold.dev/max-wait": "banana"}), false);
    let m = refused(pods.create(&dry, &bad_max_wait).await, &claim_values).expect("max-wait: banana refused");
    assert!(m.contains("leasehold.dev/max-wait must be a positive duration") && m.contains(r#"got "banana""#), "{m}");
    let zero = pod("c", json!({"leasehold.dev/lock": "l", "leasehold.dev/max-wait": "0s"}), false);
    assert!(refused(pods.create(&dry, &zero).await, &claim_values).is_some(), "max-wait 0s refused");
    let no_lock = pod("d", json!({"leasehold.dev/on-busy": "skip"}), true);
    let m = refused(pods.create(&dry, &no_lock).await, &gated_pods).expect("a gate without a lock refused");
    assert!(m.contains("needs the annotation leasehold.dev/lock"), "{m}");
    // A lock set (issue 14) names its locks too; a list of blanks names none.
    let blank_set = pod("e", json!({"leasehold.dev/locks": " , "}), true);
    assert!(refused(pods.create(&dry, &blank_set).await, &gated_pods).is_some(), "a blank lock set refused");
    let set = pod("f", json!({"leasehold.dev/locks": "a,b"}), true);
    assert!(pods.create(&dry, &set).await.is_ok(), "a gated pod with a lock set is admitted");

    // The same on the workloads the claim injection reads.
    let dep: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "annotations": {"leasehold.dev/singleton": "true", "leasehold.dev/max-wait": "10 parsecs"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }))
    .unwrap();
    match ns.api::<Deployment>().create(&dry, &dep).await {
        Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains(&claim_values) => {}
        other => panic!("a Deployment with max-wait 10 parsecs: expected 422 from {claim_values}, got {other:?}"),
    }
    let mut cj = singleton_cronjob("nightly", "1s");
    cj.metadata.annotations.get_or_insert_default().insert("leasehold.dev/on-busy".into(), "SKIPP".into());
    match ns.api::<CronJob>().create(&dry, &cj).await {
        Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains(r#"got "SKIPP""#) => {}
        other => panic!("a CronJob with on-busy SKIPP: expected 422, got {other:?}"),
    }

    // Well-formed values are admitted (any case, spaces, humantime spans), and an update that
    // does not touch them is not checked again.
    let good = pod(
        "good",
        json!({"leasehold.dev/lock": "l", "leasehold.dev/on-busy": " Skip ", "leasehold.dev/max-wait": "1h 30m"}),
        true,
    );
    assert_allowed(pods.create(&PostParams::default(), &good).await, "well-formed claim annotations");
    let label = json!({"metadata": {"labels": {"team": "a"}}});
    assert_allowed(pods.patch("good", &PatchParams::default(), &Patch::Merge(&label)).await, "an unrelated update");
    let worse = json!({"metadata": {"annotations": {"leasehold.dev/max-wait": "soon"}}});
    match pods.patch("good", &PatchParams::default(), &Patch::Merge(&worse)).await {
        Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains(&claim_values) => {}
        other => panic!("changing max-wait to soon: expected 422, got {other:?}"),
    }
    drop(release);
    ns.cleanup().await;
}

/// Runs `leasehold <args>` with `kubeconfig`; returns the exit status and stdout + stderr.
pub(crate) fn leasehold_cli(kubeconfig: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("run leasehold");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// The uninstall runbook of docs/install.md, followed to the end (issue 13: leaving is safe):
/// with a singleton CronJob whose second run waits behind the first and a bare pod waiting for a
/// lock that does not exist, `leasehold ungate` first only lists what it would change; while the
/// chart's admission policies are installed it cannot ungate pods and says why; after `helm
/// uninstall` it takes the claim out of the CronJob and ungates every waiting pod, and a run
/// created afterwards is not gated. Nothing is left gated for ever.
#[tokio::test]
async fn the_uninstall_runbook_leaves_no_pod_gated() {
    let mut ns = TestNs::new("uninstall").await;
    let release = Release::install(&ns, &["--set", "replicaCount=1"]);
    let cronjobs = ns.api::<CronJob>();
    let dry = PostParams { dry_run: true, ..PostParams::default() };
    wait_until("claim-injection policies in force", WAIT, || async {
        cronjobs
            .create(&dry, &singleton_cronjob("probe", "1s"))
            .await
            .is_ok_and(|c| template_claimed(&c.spec.job_template.spec.unwrap().template))
    })
    .await;
    ns.start_operator(&[]);
    cronjobs.create(&PostParams::default(), &singleton_cronjob("nightly", "600s")).await.unwrap();
    ns.kubectl(&["create", "job", "run-0", "--from=cronjob/nightly"]);
    let first = wait_job_pod(&ns, "run-0").await;
    wait_pod(&ns, &first, "granted", |p| !is_gated(p)).await;
    ns.kubectl(&["create", "job", "run-1", "--from=cronjob/nightly"]);
    let second = wait_job_pod(&ns, "run-1").await;
    ns.api::<Pod>().create(&PostParams::default(), &bare_claim_pod("orphan", "no-such-lock")).await.unwrap();
    let pods = ns.api::<Pod>();
    let gated = || async {
        let list = pods.list(&ListParams::default()).await.unwrap().items;
        let mut names: Vec<String> = list.iter().filter(|p| is_gated(p)).map(|p| p.name_any()).collect();
        names.sort();
        names
    };
    let mut waiting = vec![second.clone(), "orphan".to_string()];
    waiting.sort();
    wait_until("run-1's pod and the orphan wait at the gate", WAIT, || async { gated().await == waiting }).await;

    // 1. Without --yes: a list, no change.
    let admin = ns.kubeconfig.clone();
    let (code, out) = leasehold_cli(&admin, &["ungate", "-n", &ns.ns]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("mutual exclusion ends"), "{out}");
    assert!(out.contains(&format!("would take the claim out of CronJob {}/nightly", ns.ns)), "{out}");
    assert!(out.contains(&format!("would remove the scheduling gate of pod {}/{second}", ns.ns)), "{out}");
    assert!(out.contains("run again with --yes"), "{out}");
    assert_eq!(gated().await, waiting, "nothing changed");

    // 2. While the chart's policies are in force, only the operator (and the exempt groups, such
    // as system:masters) may ungate: a namespace editor is refused, and told the way out.
    ns.kubectl(&["create", "serviceaccount", "editor"]);
    let sa = format!("--serviceaccount={}:editor", ns.ns);
    ns.kubectl(&["create", "rolebinding", "editor", "--clusterrole=edit", &sa]);
    let editor = token_kubeconfig(&ns, "editor", &create_token(&ns, "editor", None));
    let editor_pods: Api<Pod> = Api::namespaced(client_for(&editor).await, &ns.ns);
    wait_until("the editor may list pods", WAIT, || async { editor_pods.list(&ListParams::default()).await.is_ok() })
        .await;
    let (code, out) = leasehold_cli(&editor, &["ungate", "-n", &ns.ns, "--yes"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("uninstall the chart first"), "{out}");
    assert_eq!(gated().await, waiting, "the admission policy kept the gates");

    // 3. The runbook: helm uninstall (policies and operator gone), then ungate.
    drop(release);
    let (code, out) = leasehold_cli(&admin, &["ungate", "-n", &ns.ns, "--yes"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("removed the scheduling gate of pod {}/orphan", ns.ns)), "{out}");
    assert!(gated().await.is_empty(), "pods still gated: {:?}", gated().await);
    let cj = cronjobs.get("nightly").await.unwrap();
    assert!(!cj.annotations().contains_key("leasehold.dev/singleton"), "{:?}", cj.annotations());
    let template = cj.spec.job_template.spec.unwrap().template;
    let gates = template.spec.as_ref().and_then(|s| s.scheduling_gates.clone()).unwrap_or_default();
    assert!(gates.iter().all(|g| g.name != "leasehold.dev/lock"), "gate left in the template: {gates:?}");
    let ann = template.metadata.and_then(|m| m.annotations).unwrap_or_default();
    assert!(!ann.contains_key("leasehold.dev/lock"), "lock annotation left in the template: {ann:?}");
    // A run created now is not gated; nothing is left to ungate.
    ns.kubectl(&["create", "job", "run-2", "--from=cronjob/nightly"]);
    let third = wait_job_pod(&ns, "run-2").await;
    assert!(!is_gated(&pods.get(&third).await.unwrap()), "a run after ungate is not gated");
    let (code, out) = leasehold_cli(&admin, &["ungate", "-n", &ns.ns, "--yes"]);
    assert_eq!((code, out.contains("nothing to ungate")), (0, true), "{out}");
    ns.cleanup().await;
}

/// The name of the pod of Job `job`, once it exists.
async fn wait_job_pod(ns: &TestNs, job: &str) -> String {
    wait_until(&format!("a pod of job {job}"), WAIT, || async { job_pod(ns, job).await.is_some() }).await;
    job_pod(ns, job).await.unwrap().name_any()
}

/// The names of the `leasehold_*` metrics a PromQL text uses.
fn promql_metrics(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("leasehold_") {
        let tail = &rest[i..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// Whether the scrape `text` exports `name`: a sample line of it, or the `# TYPE` line of its
/// family (a counter family `x` is sampled as `x_total`, a histogram `x` as `x_bucket`,
/// `x_sum`, `x_count`; a family with no labelled child yet has only its TYPE line).
fn exports(text: &str, name: &str) -> bool {
    let base = ["_total", "_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
    text.lines().any(|l| {
        l.strip_prefix(name).is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
            || l.starts_with(&format!("# TYPE {name} "))
            || l.starts_with(&format!("# TYPE {base} "))
    })
}

/// Monitoring people can alert on (issue 13): every metric that the chart's PrometheusRule and
/// Grafana dashboard name is exported by the real operator's `/metrics`, with a lock held and a
/// waiter queued so the per-lock series exist; a name that is not exported makes the check fail.
#[tokio::test]
async fn every_metric_the_alerts_and_the_dashboard_name_is_exported() {
    let ns = TestNs::new("monitoring").await;
    let args = [
        "template",
        "lh-mon",
        "charts/leasehold",
        "--set",
        "monitoring.prometheusRule.enabled=true",
        "--set",
        "monitoring.dashboard.enabled=true",
        "--set",
        "monitoring.serviceMonitor.enabled=true",
    ];
    let rendered = helm_ok(&ns.kubeconfig, &args);
    assert!(rendered.contains("kind: PrometheusRule") && rendered.contains("kind: ServiceMonitor"), "{rendered}");
    let named = promql_metrics(&rendered);
    for expected in ["leasehold_lock_held_since_seconds", "leasehold_leader", "leasehold_handover_seconds_bucket"] {
        assert!(named.contains(expected), "the rules and dashboard name {expected}: {named:?}");
    }

    ns.create_lock("l", json!({})).await;
    let op = OperatorProc::start(&ns.ns, "op", &ns.kubeconfig, &[]);
    ns.create_gated_pod("holder", "l", "600s").await;
    wait_pod(&ns, "holder", "granted", |p| !is_gated(p)).await;
    ns.create_gated_pod("waiter", "l", "1s").await;
    let lock_series = format!("leasehold_lock_waiters{{namespace=\"{}\",lock=\"l\"}} 1", ns.ns);
    wait_until("the lock's series show one waiter", WAIT, || async {
        op.get("/metrics").await.is_some_and(|t| t.contains(lock_series.as_str()))
    })
    .await;
    let text = op.get("/metrics").await.unwrap();
    let missing: Vec<&String> = named.iter().filter(|n| !exports(&text, n)).collect();
    assert!(missing.is_empty(), "named by the alerts or the dashboard but not exported: {missing:?}\n{text}");
    assert!(!exports(&text, "leasehold_not_a_metric"), "the check can fail");
    for series in ["leasehold_lock_held{", "leasehold_lock_held_since_seconds{", "leasehold_lock_highest_token{"] {
        assert!(text.contains(&format!("{series}namespace=\"{}\",lock=\"l\"}}", ns.ns)), "{series}\n{text}");
    }
    assert!(text.contains("leasehold_leader 1"), "{text}");
    ns.cleanup().await;
}

/// `rbac.scope=Namespace` (docs/install.md, "Namespace scope"): the chart's ServiceAccount may
/// read and write in the served namespace only, plus nodes and that one namespace object; the
/// operator, run with a token of that ServiceAccount and the chart's `--namespace`, gets ready
/// (every watch listed, the namespace watch through `resourceNames`) and grants there, with no
/// 403 in its log.
#[tokio::test]
async fn a_namespace_scoped_install_serves_its_namespace_with_a_role() {
    let ns = TestNs::new("nsscope").await;
    let release = Release::install(&ns, &["--set", "replicaCount=1", "--set", "rbac.scope=Namespace"]);
    let user = release.operator_username();
    let can_i = |args: &[&str]| -> bool {
        let out = Command::new(kubectl())
            .env("KUBECONFIG", &ns.kubeconfig)
            .args(["auth", "can-i", "--as", &user])
            .args(args)
            .output()
            .expect("run kubectl auth can-i");
        String::from_utf8_lossy(&out.stdout).trim() == "yes"
    };
    assert!(can_i(&["patch", "pods", "-n", &ns.ns]) && can_i(&["update", "leases", "-n", &ns.ns]));
    assert!(!can_i(&["patch", "pods", "-n", "default"]), "pods of another namespace");
    assert!(!can_i(&["list", "pods", "--all-namespaces"]), "pods of every namespace");
    assert!(!can_i(&["list", "distributedlocks.leasehold.dev", "-n", "default"]));
    assert!(can_i(&["list", "nodes"]), "nodes");
    assert!(can_i(&["watch", &format!("namespaces/{}", ns.ns)]), "its own namespace object");
    assert!(!can_i(&["list", "namespaces"]), "every namespace object");

    let kc = token_kubeconfig(&ns, "operator", &create_token(&ns, &release.fullname(), None));
    let op = OperatorProc::start(&ns.ns, "ns-scope", &kc, &[]);
    let opr = &op;
    wait_until("the operator ready", WAIT, || async move { opr.http_status("/readyz").await == Some(200) }).await;
    ns.create_lock("l", json!({})).await;
    ns.create_gated_pod("a", "l", "1s").await;
    ns.create_gated_pod("b", "l", "1s").await;
    wait_pod(&ns, "b", "Succeeded", |p| phase(p) == "Succeeded").await;
    let log = op.log_text();
    // (Not "403": that matches timestamps, as in 19:57:10.874034Z. A refusal says "forbidden".)
    assert!(!log.to_lowercase().contains("forbidden"), "a request was refused:\n{log}");
    drop(op);
    release.uninstall();
    ns.cleanup().await;
}
