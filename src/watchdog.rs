//! The watchdog `leasehold lock` starts beside its command, so the command never runs on
//! unrenewed when `leasehold lock` itself dies (SIGKILL, OOM kill) or stops (SIGSTOP) and can no
//! longer stop it.
//!
//! `leasehold lock` starts it as `leasehold lock-watchdog --target PID --renewed-at-ns T ...` with
//! a pipe as its standard input, and writes a line when the last successful renewal changes
//! (the first repeats `T`; renewals close together may make one line): the moment that renewal
//! *started*, in nanoseconds of the machine's `CLOCK_MONOTONIC` ([`monotonic_of`]), which
//! both processes read alike. `T` is the last renewal's start when the watchdog is started: for a
//! grant held at once, the send of its claim's create or request, which may be seconds before
//! (`holder::holds_at_once`). An absolute moment, not an age: a line written late (`leasehold
//! lock` paused between reading the clock and writing) cannot move the watchdog's clock past the
//! truth. The watchdog keeps the latest moment it was told and:
//! - kills the target (SIGKILL) at last renewal start + renew deadline + kill grace, the moment
//!   `leasehold lock` itself would have killed it, in case that one is paused or hung;
//! - on end of input (`leasehold lock` is gone), sends SIGTERM at once and SIGKILL after the kill
//!   grace, or at the deadline above if that comes first.
//!
//! A PID target (the command has no process group of its own: a terminal) is signalled with every
//! process below it ([`kill_tree`]). The watchdog then runs in a process group of its own, so
//! that Ctrl-Z, which stops the terminal's foreground group (`leasehold lock` and its command),
//! does not stop it: a command stopped past its deadline is killed, not resumed by `fg` beside
//! the next holder (a newcomer trial's finding).
//!
//! Both moments are before the operator may grant the lock to anyone else, because
//! `leasehold lock` refuses a kill grace with `renew deadline + kill grace >= lease duration`.
//! The target is a process group (negative PID, as in kill(2)) when the command runs in one; the
//! watchdog runs in that group, so a group kill also ends it. A PID target: it exits when the
//! process is gone. A group target always has the watchdog in it, so it ends with the group's
//! SIGKILL, its own or `leasehold lock`'s (which also kills it when it exits: `kill_on_drop`).
//! A line that is not a number is ignored; a read error counts as end of input.

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
    /// When the holder's last renewal started, as the watchdog starts: nanoseconds of
    /// `CLOCK_MONOTONIC` ([`monotonic_of`]).
    #[arg(long)]
    pub renewed_at_ns: u64,
}

/// The machine's `CLOCK_MONOTONIC` now, as a [`Duration`] since its (boot-time) origin: the clock
/// `leasehold lock` and its watchdog share. `None` if it cannot be read (on Linux only for an
/// invalid clock id or address, so never in practice); every caller then fails safe.
pub fn monotonic_now() -> Option<Duration> {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).ok().map(Duration::from)
}

/// Instant `t` of this process on `CLOCK_MONOTONIC` ([`monotonic_now`]): that clock read first,
/// `t`'s age after it, so the result is never later than `t`. On Linux std's [`Instant`] is that
/// clock (rust-lang/rust `library/std/src/sys/pal/unix/time.rs`); on Apple platforms it is
/// `CLOCK_UPTIME_RAW`, which stops during sleep, and this would be later than `t` after one (the
/// lock command is built for Linux). Zero when the clock cannot be read: the watchdog then kills
/// at once.
pub fn monotonic_of(t: Instant) -> Duration {
    monotonic_now().map_or(Duration::ZERO, |now| now.saturating_sub(t.elapsed()))
}

/// Runs the watchdog until its target is gone (or killed). Never returns an error: it is the
/// last line of defence; a line that is not a number is ignored, and a read error counts as end
/// of input (`leasehold lock` gone: the command is stopped).
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
    let mut last_renewal = Duration::from_nanos(args.renewed_at_ns);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let Ok(started_ns) = line.trim().parse::<u64>() else { continue };
            if tx.send(Some(started_ns)).is_err() {
                return;
            }
        }
        let _ = tx.send(None);
    });
    // Deadlines on `CLOCK_MONOTONIC`, as the renewals' starts are.
    let mut kill_at = None::<Duration>;
    // The processes below the target found when it was signalled (PID, start time).
    let mut seen = vec![];
    loop {
        let deadline = last_renewal + budget;
        let deadline = kill_at.map_or(deadline, |k| k.min(deadline));
        // A clock that cannot be read counts as the deadline passed.
        let left = monotonic_now().map_or(Duration::ZERO, |now| deadline.saturating_sub(now));
        if left.is_zero() {
            kill_tree(target, Signal::SIGKILL, &mut seen);
            return;
        }
        if kill(target, None).is_err() {
            return; // the command is gone
        }
        match rx.recv_timeout(POLL.min(left)) {
            Ok(Some(started_ns)) => last_renewal = last_renewal.max(Duration::from_nanos(started_ns)),
            Ok(None) | Err(RecvTimeoutError::Disconnected) if kill_at.is_none() => {
                // `leasehold lock` is gone: nobody renews; stop the command now.
                kill_tree(target, Signal::SIGTERM, &mut seen);
                kill_at = Some(monotonic_now().unwrap_or_default() + grace);
            }
            Ok(None) | Err(RecvTimeoutError::Disconnected) => std::thread::sleep(POLL.min(grace)),
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// Sends `sig` to `target`: a process group (negative) as a whole; a process with every live
/// process below it first (its children, theirs, ..., by `ppid` from `/proc`, the `procfs`
/// crate), found while it still runs, so that they are not left to init (with a terminal the
/// command has no process group of its own, and `leasehold lock`, their subreaper, may be the
/// one that died: a newcomer trial found a command's children running on beside the next holder
/// after `kill -9` of `leasehold lock`). `seen` keeps what earlier calls found (PID and start
/// time): a child whose parent died of the SIGTERM is re-parented to init, out of the target's
/// tree, and still gets the SIGKILL (if that PID still is the same process).
pub fn kill_tree(target: Pid, sig: Signal, seen: &mut Vec<(i32, u64)>) {
    if target.as_raw() > 0 {
        for b in below(target.as_raw(), None).unwrap_or_default().into_iter().filter(|b| !b.zombie) {
            if !seen.contains(&(b.pid, b.start)) {
                seen.push((b.pid, b.start));
            }
        }
        for &(pid, start) in seen.iter() {
            let same = procfs::process::Process::new(pid).and_then(|p| p.stat()).is_ok_and(|st| st.starttime == start);
            if same {
                let _ = kill(Pid::from_raw(pid), sig);
            }
        }
    }
    let _ = kill(target, sig);
}

/// A process below another, as [`below`] finds it.
#[derive(Clone, Copy, Debug)]
pub struct Below {
    /// Its PID.
    pub pid: i32,
    /// Its process group.
    pub pgrp: i32,
    /// Exited, not yet reaped.
    pub zombie: bool,
    /// Its parent.
    pub ppid: i32,
    /// When it started (clock ticks after boot, `/proc/<pid>/stat` field 22): with the PID, names
    /// the process even after the PID is reused.
    pub start: u64,
}

/// Every process below `root` (its children, theirs, and so on, by `ppid` from `/proc`, the
/// `procfs` crate), zombies included, but `spared` and what runs below it.
///
/// # Errors
/// `/proc` cannot be read.
pub fn below(root: i32, spared: Option<i32>) -> procfs::ProcResult<Vec<Below>> {
    let mut children: std::collections::HashMap<i32, Vec<Below>> = std::collections::HashMap::new();
    for stat in procfs::process::all_processes()?.flatten().filter_map(|p| p.stat().ok()) {
        let b =
            Below { pid: stat.pid, pgrp: stat.pgrp, zombie: stat.state == 'Z', ppid: stat.ppid, start: stat.starttime };
        children.entry(stat.ppid).or_default().push(b);
    }
    let (mut out, mut todo) = (vec![], vec![root]);
    while let Some(parent) = todo.pop() {
        for b in children.get(&parent).map_or(&[][..], Vec::as_slice) {
            if Some(b.pid) != spared {
                out.push(*b);
                todo.push(b.pid);
            }
        }
    }
    Ok(out)
}
