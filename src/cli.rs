//! Command line: `leasehold operator` runs the controller, `leasehold lock` runs a command while
//! holding a lock, `leasehold crd` prints the CRDs.

use std::net::SocketAddr;

use clap::{Args, Parser, Subcommand};

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
}

/// Options of `leasehold lock`. Durations accept `90s`, `10m`, `1h30m`, `500ms`.
#[derive(Args, Debug, Clone)]
pub struct LockArgs {
    /// Name of the DistributedLock.
    pub lock: String,
    /// Namespace of the lock (default: the kubeconfig's namespace).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Identity written to the Lease's holderIdentity (default: $POD_NAME, else the authenticated
    /// user name, as `kubectl auth whoami` shows it, else <hostname>-<pid>).
    #[arg(long, env = "LEASEHOLD_IDENTITY")]
    pub identity: Option<String>,
    /// Give up (exit 4) when the lock is not granted within this time (default: wait forever).
    #[arg(long, conflicts_with = "try")]
    pub wait_timeout: Option<humantime::Duration>,
    /// Fail at once (exit 3) when the lock is busy.
    #[arg(long = "try")]
    pub r#try: bool,
    /// Consider the lock lost when no renewal succeeded for this long; must be shorter than the
    /// lock's leaseDurationSeconds (default: 2/3 of it, client-go's 10 s for 15 s).
    #[arg(long)]
    pub renew_deadline: Option<humantime::Duration>,
    /// Time between renewals (default: 2/15 of the lease duration, client-go's 2 s for 15 s).
    #[arg(long)]
    pub retry_period: Option<humantime::Duration>,
    /// After the lock is lost: time between SIGTERM and SIGKILL to the command. The renew
    /// deadline plus this must be shorter than the lock's lease duration, so the command is
    /// dead before anyone else can be granted (default: half of lease duration minus renew
    /// deadline, 2.5 s for a 15 s lease).
    #[arg(long)]
    pub kill_grace: Option<humantime::Duration>,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}
