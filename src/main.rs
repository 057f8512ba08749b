//! The `leasehold` binary: parse the command line, init logging, dispatch.

use clap::Parser;
use leasehold::cli::{Cli, Command};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => print!("{}", leasehold::crd::crds_yaml()?),
        Command::Operator(args) => {
            leasehold::telemetry::init(args.log_format);
            leasehold::controller::run(args).await?;
        }
    }
    Ok(())
}
