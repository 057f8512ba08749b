//! Logging: `tracing` with an `EnvFilter` (`RUST_LOG`, default `info`), plain or JSON lines.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Log output format.
#[derive(Clone, Copy, Debug, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Plain,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber, writing to stderr. Call once, from `main`. Plain lines are
/// coloured only when stderr is a terminal and `NO_COLOR` is not set (<https://no-color.org>):
/// a log file, `kubectl logs` or a pipe gets no escape codes.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,kube=warn"));
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let b = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Plain => b.init(),
        LogFormat::Json => b.json().init(),
    }
}
