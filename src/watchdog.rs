//! The watchdog `leasehold lock` starts beside its command, so the command never runs on
//! unrenewed when `leasehold lock` itself dies (SIGKILL, OOM kill) or stops (SIGSTOP) and can no
//! longer stop it.
//!
//! `leasehold lock` starts it as `leasehold lock-watchdog --target PID ...` with a pipe as its
//! standard input, and writes one line per successful renewal: how many milliseconds ago that
//! renewal *started*. The watchdog keeps its own copy of "last renewal start" on its own monotonic
//! clock (receipt time minus that age, so never later than the truth) and:
//! - kills the target (SIGKILL) at last renewal start + renew deadline + kill grace, the moment
//!   `leasehold lock` itself would have killed it, in case that one is paused or hung;
//! - on end of input (`leasehold lock` is gone), sends SIGTERM at once and SIGKILL after the kill
//!   grace, or at the deadline above if that comes first.
//!
//! Both moments are before the operator may grant the lock to anyone else, because
//! `leasehold lock` refuses a kill grace with `renew deadline + kill grace >= lease duration`.
//! The target is a process group (negative PID, as in kill(2)) when the command runs in one; the
//! watchdog runs in that group, so a group kill also ends it. It exits when the target is gone.

use std::io::BufRead;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How often the watchdog checks that its target still exists.
const POLL: Duration = Duration::from_millis(100);

/// Options of the hidden `leasehold lock-watchdog` subcommand.
#[derive(clap::Args, Debug, Clone)]
pub struct WatchdogArgs {
    /// What to kill: a PID, or a process group as a negative number.
    #[arg(long, allow_hyphen_values = true)]
    pub target: i32,
    /// The holder's renew deadline, in milliseconds.
    #[arg(long)]
    pub renew_deadline_ms: u64,
    /// The kill grace, in milliseconds.
    #[arg(long)]
    pub kill_grace_ms: u64,
}

/// Runs the watchdog until its target is gone (or killed). Never returns an error: it is the
/// last line of defence, and keeps going on unreadable input.
///
/// Must be called inside a Tokio runtime: the signals `leasehold lock` sends to the command's
/// group (SIGTERM, and the ones it forwards) reach the watchdog too, and are caught so that they
/// do not end it.
pub fn run(args: WatchdogArgs) {
    use tokio::signal::unix::{SignalKind, signal};
    let kinds = [
        SignalKind::terminate(),
        SignalKind::interrupt(),
        SignalKind::hangup(),
        SignalKind::quit(),
        SignalKind::user_defined1(),
        SignalKind::user_defined2(),
    ];
    let _caught: Vec<_> = kinds.into_iter().filter_map(|k| signal(k).ok()).collect();
    let target = Pid::from_raw(args.target);
    let budget = Duration::from_millis(args.renew_deadline_ms + args.kill_grace_ms);
    let grace = Duration::from_millis(args.kill_grace_ms);
    let (tx, rx) = mpsc::channel::<Option<u64>>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line.trim().parse().ok()).is_err() {
                return;
            }
        }
        let _ = tx.send(None);
    });
    // Until the first heartbeat: `leasehold lock` starts the watchdog right after the grant (its
    // first renewal, or its claim's create when it needed none), so "now" is later than that
    // start; the first line corrects it.
    let mut last_renewal = Instant::now();
    let mut kill_at = None::<Instant>;
    loop {
        let deadline = last_renewal + budget;
        let deadline = kill_at.map_or(deadline, |k| k.min(deadline));
        if Instant::now() >= deadline {
            let _ = kill(target, Signal::SIGKILL);
            return;
        }
        if kill(target, None).is_err() {
            return; // the command is gone
        }
        match rx.recv_timeout(POLL.min(deadline.saturating_duration_since(Instant::now()))) {
            Ok(Some(age_ms)) => {
                let started = Instant::now().checked_sub(Duration::from_millis(age_ms)).unwrap_or(last_renewal);
                last_renewal = last_renewal.max(started);
            }
            Ok(None) | Err(RecvTimeoutError::Disconnected) if kill_at.is_none() => {
                // `leasehold lock` is gone: nobody renews; stop the command now.
                let _ = kill(target, Signal::SIGTERM);
                kill_at = Some(Instant::now() + grace);
            }
            Ok(None) | Err(RecvTimeoutError::Disconnected) => std::thread::sleep(POLL.min(grace)),
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}
