//! Command line: `leasehold operator` runs the controller, `leasehold lock` runs a command while
//! holding a lock, `leasehold status` and `leasehold why` show locks and waiting pods (read-only),
//! `leasehold crd` prints the CRDs.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand, ValueEnum};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::telemetry::LogFormat;

/// Leasehold: distributed locks with fencing tokens for Kubernetes.
#[derive(Parser, Debug)]
#[command(version, about)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the operator (reconciles DistributedLocks, grants them to pods).
    Operator(OperatorArgs),
    /// Run a command while holding a lock (waits for the grant, renews, releases on exit).
    Lock(LockArgs),
    /// Show locks: holder, Lease, Ready condition and the waiters in grant order (read-only).
    Status(StatusArgs),
    /// Explain why a pod is still gated, or a claim still waits (or that it holds its lock, with
    /// its slot for a semaphore, or is not gated).
    Why(WhyArgs),
    /// Break-glass: revoke a stuck claim holder's grant (--force); the next waiter is granted
    /// after the lease duration. Refused for a running pod holder (delete the pod).
    Release(crate::release_cli::ReleaseArgs),
    /// Leave Leasehold: take the claims out of workloads and ungate waiting pods (mutual
    /// exclusion ends; see docs/install.md, "Uninstall"). Prints what it would do unless --yes.
    Ungate(crate::ungate::UngateArgs),
    /// Internal: the watchdog `leasehold lock` starts beside its command ([`crate::watchdog`]).
    #[command(hide = true)]
    LockWatchdog(crate::watchdog::WatchdogArgs),
    /// Print the CustomResourceDefinitions as YAML (what `crds/` contains).
    Crd {
        /// Write one file per CRD (`<group>_<plural>.yaml`) into this directory instead.
        #[arg(long)]
        out_dir: Option<std::path::PathBuf>,
    },
}

/// Options of `leasehold operator`.
#[derive(Args, Debug, Clone)]
pub struct OperatorArgs {
    /// Address of the admin server (/livez, /readyz, /metrics).
    #[arg(long, env = "LEASEHOLD_ADMIN_ADDR", default_value = "0.0.0.0:8080")]
    pub admin_addr: SocketAddr,
    /// Only serve locks and pods in this namespace (default: all namespaces).
    #[arg(long, env = "LEASEHOLD_NAMESPACE")]
    pub namespace: Option<String>,
    /// Name reported in Events (`reportingInstance`); the pod name when run in a cluster.
    #[arg(long, env = "POD_NAME", default_value = "leasehold-operator")]
    pub instance: String,
    /// Log format.
    #[arg(long, env = "LEASEHOLD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
    /// Run only while holding the leader-election Lease (for several replicas): standbys wait,
    /// serving /livez and /readyz, and take over when the leader stops renewing it.
    #[arg(long, env = "LEASEHOLD_LEADER_ELECT")]
    pub leader_elect: bool,
    /// Namespace of the leader-election Lease (default: the namespace of the kubeconfig context,
    /// or the pod's own namespace in a cluster).
    #[arg(long, env = "LEASEHOLD_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(long, env = "LEASEHOLD_LEADER_ELECTION_LEASE", default_value = crate::leader::DEFAULT_LEASE_NAME)]
    pub leader_election_lease: String,
    /// Most locks reconciled at once (controller-runtime calls it MaxConcurrentReconciles).
    /// Others wait, in the order they became due (`controller::gate`); the events that name a
    /// lock while it waits or runs are served by one more reconcile after it. 0 means no bound
    /// (kube-runtime's controller then starts every due lock at once).
    #[arg(long, env = "LEASEHOLD_MAX_CONCURRENT_RECONCILES", default_value_t = 16)]
    pub max_concurrent_reconciles: u16,
}

/// Options of `leasehold lock`. Durations accept `90s`, `10m`, `1h30m`, `500ms`.
#[derive(Args, Debug, Clone)]
pub struct LockArgs {
    /// Name of the DistributedLock; or a lock set, comma-separated (`db-writer,bucket-writer`,
    /// 2 to 8 locks): the command runs only once every lock is held, with each lock's token in
    /// `LEASEHOLD_FENCING_TOKEN_<LOCK>` (upper-cased, other characters as `_`) and all of them in
    /// `LEASEHOLD_FENCING_TOKENS` (`lock=token,...`). `--try` is refused with a set.
    pub lock: String,
    /// Namespace of the lock (default: the kubeconfig's namespace).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Which cluster (`--kubeconfig`, `--context`).
    #[command(flatten)]
    pub kube: KubeArgs,
    /// Identity written to the Lease's holderIdentity (default: $POD_NAME, else the authenticated
    /// user name, as `kubectl auth whoami` shows it, else <hostname>-<pid>).
    #[arg(long, env = "LEASEHOLD_IDENTITY")]
    pub identity: Option<String>,
    /// Give up (exit 4) when the lock is not granted within this time (default: wait forever).
    /// Must be positive: `--try` is the way not to wait.
    #[arg(long, conflicts_with = "try", value_parser = positive_duration)]
    pub wait_timeout: Option<humantime::Duration>,
    /// Fail at once (exit 3) when the lock is busy.
    #[arg(long = "try")]
    pub r#try: bool,
    /// While waiting, say on stderr who holds the lock and this claim's place in the queue (or
    /// that no operator has queued it yet): first after this long, then whenever it changes,
    /// checked as often. 0 turns it off.
    #[arg(long, value_parser = duration, default_value = "10s")]
    pub progress_interval: humantime::Duration,
    /// Consider the lock lost when no renewal succeeded for this long; must be shorter than the
    /// lock's leaseDurationSeconds (default: 2/3 of it, client-go's 10 s for 15 s).
    #[arg(long, value_parser = duration)]
    pub renew_deadline: Option<humantime::Duration>,
    /// Time before the next try after a renewal failed (default: 2/15 of the lease duration,
    /// client-go's 2 s for 15 s).
    #[arg(long, value_parser = duration)]
    pub retry_period: Option<humantime::Duration>,
    /// Time between renewals while they succeed (default: 1/3 of the lease duration, 5 s for
    /// 15 s; at least the retry period, shorter than the renew deadline).
    #[arg(long, value_parser = duration)]
    pub renew_period: Option<humantime::Duration>,
    /// After the lock is lost: time between SIGTERM and SIGKILL to the command. The renew
    /// deadline plus this must be shorter than the lock's lease duration, so the command is
    /// dead before anyone else can be granted (default: half of lease duration minus renew
    /// deadline, 2.5 s for a 15 s lease).
    #[arg(long, value_parser = duration)]
    pub kill_grace: Option<humantime::Duration>,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Which cluster to talk to, chosen as kubectl chooses it.
#[derive(Args, Debug, Clone, Default)]
pub struct KubeArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config; in a pod without
    /// either, the in-cluster service account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current-context).
    #[arg(long)]
    pub context: Option<String>,
}

impl KubeArgs {
    /// A client for the chosen cluster; its `default_namespace()` is the context's namespace.
    /// Without `--kubeconfig` and `--context` this is [`kube::Client::try_default`]'s choice
    /// (kubeconfig, else in-cluster). Built by [`crate::client::from_config`] (`TCP_NODELAY`).
    ///
    /// # Errors
    /// When the kubeconfig cannot be read, the context does not exist, or no configuration is
    /// found.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        let options = KubeConfigOptions { context: self.context.clone(), ..Default::default() };
        let config = match (&self.kubeconfig, &self.context) {
            (None, None) => kube::Config::infer().await.context("no Kubernetes configuration found")?,
            (None, Some(context)) => kube::Config::from_kubeconfig(&options)
                .await
                .with_context(|| format!("cannot use kubeconfig context {context}"))?,
            (Some(path), _) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .with_context(|| format!("cannot use kubeconfig {}", path.display()))?
            }
        };
        Ok(crate::client::from_config(config)?)
    }
}

/// Output format of `leasehold status`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// Aligned columns for people.
    #[default]
    Table,
    /// One JSON document for scripts.
    Json,
}

/// Options of `leasehold status`.
#[derive(Args, Debug, Clone)]
pub struct StatusArgs {
    /// Name of one DistributedLock (default: every lock in the namespace).
    pub lock: Option<String>,
    /// Namespace (default: the kubeconfig context's namespace).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Every namespace.
    #[arg(long, short = 'A', conflicts_with_all = ["namespace", "lock"])]
    pub all_namespaces: bool,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Which cluster (`--kubeconfig`, `--context`).
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// Options of `leasehold why`.
#[derive(Args, Debug, Clone)]
pub struct WhyArgs {
    /// Name of the pod, or of a DistributedLockClaim (`kubectl get dlclaim`) when no pod has
    /// that name.
    #[arg(value_name = "POD_OR_CLAIM")]
    pub name: String,
    /// Namespace of the pod or claim (default: the kubeconfig context's namespace).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Which cluster (`--kubeconfig`, `--context`).
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// Parses a command-line duration (`humantime` syntax: `30s`, `1500ms`, `5m`, `1h30m`); the error
/// names the expected form, not only humantime's position ("expected number at 0").
fn duration(value: &str) -> Result<humantime::Duration, String> {
    value
        .parse::<humantime::Duration>()
        .map_err(|e| format!("{e}: expected a duration such as 30s, 1500ms, 5m or 1h30m"))
}

/// [`duration`], refusing zero (a wait that times out before its claim can be granted, even on
/// a free lock: a newcomer trial's finding).
fn positive_duration(value: &str) -> Result<humantime::Duration, String> {
    let d = duration(value)?;
    if d.is_zero() {
        return Err("must be positive; to give up at once when the lock is busy, use --try".into());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Cli;

    #[test]
    fn a_malformed_duration_is_refused_with_the_expected_form() {
        let err =
            Cli::try_parse_from(["leasehold", "lock", "l", "--wait-timeout", "banana", "--", "true"]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("'banana'") && text.contains("--wait-timeout"), "{text}");
        assert!(text.contains("expected a duration such as 30s, 1500ms, 5m or 1h30m"), "{text}");
        let ok = Cli::try_parse_from(["leasehold", "lock", "l", "--kill-grace", "1500ms", "--", "true"]);
        assert!(ok.is_ok(), "{:?}", ok.err());
        let zero = Cli::try_parse_from(["leasehold", "lock", "l", "--wait-timeout", "0s", "--", "true"]).unwrap_err();
        assert!(
            zero.to_string().contains("must be positive; to give up at once when the lock is busy, use --try"),
            "{zero}"
        );
    }
}
