//! The `leasehold` binary: parse the command line, init logging, dispatch.

use clap::Parser;
use leasehold::cli::{Cli, Command};

/// jemalloc (tikv-jemallocator) instead of glibc's malloc: the operator's many small, long-lived
/// cache objects settle in less resident memory (README "Performance": 10,000 idle locks in
/// 54.6 MiB instead of 67.4 MiB). The `jemalloc` feature, on by default.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd { out_dir: None } => print!("{}", leasehold::crd::crds_yaml()?),
        Command::Crd { out_dir: Some(dir) } => {
            for crd in leasehold::crd::all_crds() {
                std::fs::write(dir.join(leasehold::crd::crd_file_name(&crd)), leasehold::crd::crd_yaml(&crd)?)?;
            }
        }
        Command::Lock(args) => {
            leasehold::telemetry::init(leasehold::telemetry::LogFormat::Plain);
            std::process::exit(leasehold::lock_cli::run(args).await);
        }
        Command::Status(args) => std::process::exit(leasehold::inspect::status(args).await),
        Command::Why(args) => std::process::exit(leasehold::inspect::why(args).await),
        Command::LockWatchdog(args) => leasehold::watchdog::run(args),
        Command::Release(args) => std::process::exit(leasehold::release_cli::run(args).await?),
        Command::Ungate(args) => std::process::exit(leasehold::ungate::run(args).await?),
        Command::Operator(args) => {
            leasehold::telemetry::init(args.log_format);
            leasehold::controller::run(args).await?;
        }
    }
    Ok(())
}
