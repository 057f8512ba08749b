//! Command line: `leasehold operator` runs the controller, `leasehold crd` prints the CRDs.

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
}
