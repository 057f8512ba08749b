//! `leasehold lock`: run a command while holding a lock, like `etcdctl lock` and `consul lock`.
//!
//! Waits for the grant (watch), starts the command with `LEASEHOLD_FENCING_TOKEN`,
//! `LEASEHOLD_SLOT` (the semaphore slot; 0 for a single-holder lock), `LEASEHOLD_HOLDER` and
//! `LEASEHOLD_LOCK` in its environment, renews while it runs, releases
//! (owner-verified) when it exits, and exits with the command's status. If the lock is lost
//! (renew deadline passed, or the Lease names someone else) it stops the command: SIGTERM, then
//! SIGKILL after `--kill-grace`, and exits with [`EXIT_LOST`]. SIGTERM, SIGINT, SIGHUP, SIGQUIT,
//! SIGUSR1 and SIGUSR2 sent to `leasehold lock` are forwarded to the command.

use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};

use kube::Api;

use crate::cli::LockArgs;
use crate::crd::{DistributedLock, OnBusy};
use crate::holder::{Holder, HolderError, LockGuard, LostReason, Timings};
use crate::holder_set::{SetGuard, SetHolder};

/// What `supervise` needs of a held lock or lock set.
trait Held {
    fn is_lost(&self) -> bool;
    fn last_renewal(&self) -> tokio::sync::watch::Receiver<std::time::Instant>;
    async fn lost(&self) -> LostReason;
    async fn release(self) -> Result<(), HolderError>;
    /// The grant's (lease duration, renew deadline).
    fn timings(&self) -> (Duration, Duration);
}

impl Held for LockGuard {
    fn is_lost(&self) -> bool {
        LockGuard::is_lost(self)
    }
    fn last_renewal(&self) -> tokio::sync::watch::Receiver<std::time::Instant> {
        LockGuard::last_renewal(self)
    }
    async fn lost(&self) -> LostReason {
        LockGuard::lost(self).await
    }
    async fn release(self) -> Result<(), HolderError> {
        LockGuard::release(self).await
    }
    fn timings(&self) -> (Duration, Duration) {
        (self.lease_duration(), self.renew_deadline())
    }
}

impl Held for SetGuard {
    fn is_lost(&self) -> bool {
        SetGuard::is_lost(self)
    }
    fn last_renewal(&self) -> tokio::sync::watch::Receiver<std::time::Instant> {
        SetGuard::last_renewal(self)
    }
    async fn lost(&self) -> LostReason {
        SetGuard::lost(self).await
    }
    async fn release(self) -> Result<(), HolderError> {
        SetGuard::release(self).await
    }
    fn timings(&self) -> (Duration, Duration) {
        (self.lease_duration(), self.renew_deadline())
    }
}

/// The environment variable that carries lock `lock`'s token with a lock set:
/// `LEASEHOLD_FENCING_TOKEN_<LOCK>`, the name upper-cased with every other character than
/// `A-Z` and `0-9` as `_` (`db-writer` -> `LEASEHOLD_FENCING_TOKEN_DB_WRITER`).
pub fn token_env_var(lock: &str) -> String {
    let name: String =
        lock.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
    format!("LEASEHOLD_FENCING_TOKEN_{name}")
}

/// Exit status: `--try` found the lock busy.
pub const EXIT_BUSY: i32 = 3;
/// Exit status: `--wait-timeout` passed before the grant.
pub const EXIT_WAIT_TIMEOUT: i32 = 4;
/// Exit status: the lock was lost while the command ran; the command was stopped.
pub const EXIT_LOST: i32 = 5;
/// Exit status: any other failure (API error, lock not found, bad timings). A command that
/// cannot be started gives 127 (not found) or 126, as in a shell; usage errors give 2.
pub const EXIT_ERROR: i32 = 1;

const FORWARDED: [(SignalKind, Signal); 6] = [
    (SignalKind::terminate(), Signal::SIGTERM),
    (SignalKind::interrupt(), Signal::SIGINT),
    (SignalKind::hangup(), Signal::SIGHUP),
    (SignalKind::quit(), Signal::SIGQUIT),
    (SignalKind::user_defined1(), Signal::SIGUSR1),
    (SignalKind::user_defined2(), Signal::SIGUSR2),
];

/// Runs `leasehold lock`; returns the process exit status.
pub async fn run(args: LockArgs) -> i32 {
    match run_inner(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("leasehold lock: {}", error_text(&e));
            EXIT_ERROR
        }
    }
}

/// The error and its causes, `: `-separated, leaving out a cause whose text the message before
/// it already contains (errors that print their source, as most here do, would repeat it).
pub(crate) fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
    }
    text
}

async fn run_inner(args: LockArgs) -> anyhow::Result<i32> {
    // Catch signals from the first moment: one that arrives while the claim is being created
    // must still take it out of the queue (and one between grant and spawn reaches the command).
    let mut signals = catch_signals()?;
    let client = args.kube.client().await?;
    let namespace = args.namespace.clone().unwrap_or_else(|| client.default_namespace().to_string());
    let identity = match args.identity.clone() {
        Some(id) => id,
        None => default_identity(&client).await,
    };
    let timings = Timings {
        renew_deadline: args.renew_deadline.map(Into::into),
        retry_period: args.retry_period.map(Into::into),
        renew_period: args.renew_period.map(Into::into),
    };
    let set: Vec<String> = args.lock.split(',').map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect();
    if set.len() > 1 {
        return run_set(
            args.clone(),
            SetHolder::new(client, &namespace, &set, &identity)?.with_timings(timings),
            signals,
        )
        .await;
    }
    let locks: Api<DistributedLock> = Api::namespaced(client.clone(), &namespace);
    // One acquire per process: a standing claim (issue 12) would save nothing and outlive it.
    let mut holder = Holder::new(client, &namespace, &args.lock, &identity)
        .with_timings(Timings {
            renew_deadline: args.renew_deadline.map(Into::into),
            retry_period: args.retry_period.map(Into::into),
            renew_period: args.renew_period.map(Into::into),
        })
        .one_shot();
    if let (Ok(name), Ok(uid)) = (std::env::var("POD_NAME"), std::env::var("POD_UID")) {
        holder = holder.owned_by_pod(&name, &uid);
    }
    let on_busy = if args.r#try { OnBusy::Skip } else { OnBusy::Wait };
    // Refuse a kill grace that outlasts the lease before claiming anything: a claim cancelled at
    // once could race its own grant and leave the lock held, by nobody, for a whole lease.
    let (lease, deadline) = holder.lease_timings().await?;
    if let Err(message) = kill_grace(args.kill_grace.map(Into::into), lease, deadline) {
        eprintln!("leasehold lock: {message}");
        return Ok(EXIT_ERROR);
    }
    let asked_wait: Option<Duration> = args.wait_timeout.map(Into::into);
    let wait_until = asked_wait.map(|t| tokio::time::Instant::now() + t);
    let (guard, kill_grace, ticket_deadline, queued_lease) = loop {
        let ticket = holder.enqueue(on_busy).await?;
        let (queued_lease, ticket_deadline) = (ticket.lease_duration(), ticket.renew_deadline());
        let kill_grace = match kill_grace(args.kill_grace.map(Into::into), queued_lease, ticket_deadline) {
            Ok(g) => g,
            Err(message) => {
                // The lock's lease changed between the two reads.
                ticket.cancel().await;
                eprintln!("leasehold lock: {message}");
                return Ok(EXIT_ERROR);
            }
        };
        // Leave the queue cleanly when a signal ends the wait (each of them would end the process).
        let grant_uid = ticket.grant_uid();
        let progress =
            report_progress(&locks, &args.lock, (ticket.claim_name(), &grant_uid), args.progress_interval.into());
        let left = wait_until.map(|u| u.saturating_duration_since(tokio::time::Instant::now()));
        let acquired = tokio::select! {
            r = ticket.wait(left) => r,
            Some(sig) = signals.recv() => { ticket.cancel().await; return Ok(128 + sig as i32) }
            never = progress => match never {},
        };
        if acquired.is_err() {
            ticket.cancel().await;
        }
        match acquired {
            Ok(g) => break (g, kill_grace, ticket_deadline, queued_lease),
            Err(HolderError::Busy(lock)) => {
                eprintln!("leasehold lock: lock {lock} is busy (--try)");
                return Ok(EXIT_BUSY);
            }
            Err(HolderError::WaitTimeout(_, lock)) => {
                let e = HolderError::WaitTimeout(asked_wait.unwrap_or_default(), lock);
                eprintln!("leasehold lock: {e}");
                return Ok(EXIT_WAIT_TIMEOUT);
            }
            // The grant was taken back before this process could take it up (it was paused, or
            // cut off, for a lease duration): it is someone else's turn now, and this process
            // waits again, last in line, rather than give up (a newcomer trial's finding).
            Err(e @ (HolderError::NotHolder(_) | HolderError::Expired(_) | HolderError::FirstRenewalTimeout(_))) => {
                eprintln!(
                    "leasehold lock: the grant of lock {} was taken back before this process took it up ({e}); queueing again",
                    args.lock
                );
            }
            Err(e) => return Err(e.into()),
        }
    };
    let (guard, kill_grace, deadline) =
        match grant_grace(guard, args.kill_grace.map(Into::into), (queued_lease, ticket_deadline, kill_grace)).await? {
            Ok(g) => g,
            Err(code) => return Ok(code),
        };
    tracing::info!(lock = %args.lock, identity = %identity, token = guard.token(), "lock granted; starting command");
    let env = vec![
        ("LEASEHOLD_FENCING_TOKEN".to_string(), guard.token().to_string()),
        ("LEASEHOLD_SLOT".to_string(), guard.slot().to_string()),
        ("LEASEHOLD_HOLDER".to_string(), guard.identity().to_string()),
        ("LEASEHOLD_LOCK".to_string(), args.lock.clone()),
    ];
    supervise(args, guard, env, kill_grace, deadline, signals).await
}

/// The kill grace and renew deadline of a grant, from its own timings ([`Held::timings`]): a
/// lease duration lowered on the lock while this process waited shortens the lease the grant is
/// held under (the operator expires it by its Lease's value, `holder::granted_timings`), maybe
/// not the renew deadline (one set by `--renew-deadline`), and the command must still be dead
/// before the lease runs out: `renew deadline + kill grace < lease duration` is checked again
/// ([`kill_grace`]) whenever the lease or the deadline is shorter than when it queued (`queued`:
/// lease duration, renew deadline and the grace checked then, kept otherwise). `asked` is
/// `--kill-grace`. A grace that no longer fits releases the grant at once and ends with
/// [`EXIT_ERROR`] (`Err`), before the command starts. Found by a review: a grace kept because
/// the set deadline had not changed outlasted a lowered lease.
async fn grant_grace<G: Held>(
    guard: G,
    asked: Option<Duration>,
    (queued_lease, queued_deadline, queued_grace): (Duration, Duration, Duration),
) -> anyhow::Result<Result<(G, Duration, Duration), i32>> {
    let (lease, deadline) = guard.timings();
    if lease >= queued_lease && deadline >= queued_deadline {
        return Ok(Ok((guard, queued_grace, queued_deadline)));
    }
    match kill_grace(asked, lease, deadline) {
        Ok(g) => {
            tracing::info!(lease = ?lease, renew_deadline = ?deadline, kill_grace = ?g, "the grant's lease duration is shorter than the lock's was when this process queued: holding under the grant's");
            Ok(Ok((guard, g, deadline)))
        }
        Err(message) => {
            eprintln!("leasehold lock: the lock's lease duration was lowered while this process waited: {message}");
            guard.release().await?;
            Ok(Err(EXIT_ERROR))
        }
    }
}

/// `leasehold lock a,b -- cmd`: the lock set path (issue 14, `crate::holder_set`). `--try` is
/// refused (a set waits in FIFO order; the CRD refuses a busy policy with a set). The command
/// gets `LEASEHOLD_LOCK` (the list as given), `LEASEHOLD_HOLDER`, one
/// `LEASEHOLD_FENCING_TOKEN_<LOCK>` per lock ([`token_env_var`]) and `LEASEHOLD_FENCING_TOKENS`
/// (`lock=token` pairs, comma-separated, in the set's order).
async fn run_set(
    args: LockArgs,
    holder: SetHolder,
    mut signals: tokio::sync::mpsc::UnboundedReceiver<Signal>,
) -> anyhow::Result<i32> {
    if args.r#try {
        eprintln!("leasehold lock: --try is not served for a lock set ({}): a set waits in FIFO order", args.lock);
        return Ok(EXIT_ERROR);
    }
    let ticket = holder.enqueue().await?;
    let deadline = ticket.renew_deadline();
    let queued_lease = ticket.lease_duration();
    let grace = match kill_grace(args.kill_grace.map(Into::into), queued_lease, deadline) {
        Ok(g) => g,
        Err(message) => {
            ticket.cancel().await;
            eprintln!("leasehold lock: {message}");
            return Ok(EXIT_ERROR);
        }
    };
    let acquired = tokio::select! {
        r = ticket.wait(args.wait_timeout.map(Into::into)) => r,
        Some(sig) = signals.recv() => { ticket.cancel().await; return Ok(128 + sig as i32) }
    };
    let guard = match acquired {
        Ok(g) => g,
        Err(e) => {
            ticket.cancel().await;
            eprintln!("leasehold lock: {e}");
            return Ok(if matches!(e, HolderError::WaitTimeout(..)) { EXIT_WAIT_TIMEOUT } else { EXIT_ERROR });
        }
    };
    let (guard, grace, deadline) =
        match grant_grace(guard, args.kill_grace.map(Into::into), (queued_lease, deadline, grace)).await? {
            Ok(g) => g,
            Err(code) => return Ok(code),
        };
    tracing::info!(locks = %args.lock, tokens = ?guard.tokens(), "lock set granted; starting command");
    let mut env = vec![
        ("LEASEHOLD_HOLDER".to_string(), guard.identity().to_string()),
        ("LEASEHOLD_LOCK".to_string(), args.lock.clone()),
    ];
    let pairs: Vec<String> =
        guard.locks().iter().map(|l| format!("{l}={}", guard.token(l).unwrap_or_default())).collect();
    env.push(("LEASEHOLD_FENCING_TOKENS".to_string(), pairs.join(",")));
    for l in guard.locks() {
        env.push((token_env_var(l), guard.token(l).unwrap_or_default().to_string()));
    }
    supervise(args, guard, env, grace, deadline, signals).await
}

/// While a claim waits, says on stderr why: who holds the lock and the claim's place in the
/// queue, as the lock's status shows them, or that no operator has queued the claim yet (the
/// status names the first 10 waiters). First after `every`, then whenever the text changes,
/// checked every `every`; never returns. `every` zero: silent. A failed read is skipped.
async fn report_progress(
    locks: &Api<DistributedLock>,
    lock: &str,
    (claim, uid): (&str, &str),
    every: Duration,
) -> std::convert::Infallible {
    let started = tokio::time::Instant::now();
    let mut said = String::new();
    loop {
        if every.is_zero() {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(every).await;
        let Ok(l) = locks.get(lock).await else { continue };
        let text = progress_text(&l, lock, (claim, uid), started.elapsed());
        if text != said {
            eprintln!("leasehold lock: {text}");
            said = text;
        }
    }
}

/// The progress line for a claim (name, and the UID its grant names: `Ticket::grant_uid`) that
/// waits for `lock` (see [`report_progress`]).
fn progress_text(l: &DistributedLock, lock: &str, (claim, uid): (&str, &str), waited: Duration) -> String {
    let status = l.status.clone().unwrap_or_default();
    let held = match &status.holder {
        // Granted, not yet taken up (a process paused through its grant, a newcomer trial saw it
        // named as the holder it waited for).
        Some(h) if h.uid.as_deref() == Some(uid) => {
            return format!("lock {lock} is granted to claim {claim} (fencing token {}): taking it up", h.token);
        }
        Some(h) => format!("held by {} (fencing token {})", h.name, h.token),
        None => "free".to_string(),
    };
    match status.waiters.iter().position(|w| w == claim) {
        Some(i) => {
            format!("waiting for lock {lock}, {held}; claim {claim} is {} of {} in the queue", i + 1, status.waiting)
        }
        None if status.waiters.len() >= 10 => {
            format!("waiting for lock {lock}, {held}; {} wait, claim {claim} is beyond the first 10", status.waiting)
        }
        None => format!(
            "waiting for lock {lock} for {}s, {held}; no operator has queued claim {claim} yet: is it running? \
             (kubectl get dlock {lock}; leasehold status {lock})",
            waited.as_secs()
        ),
    }
}

/// Every signal in [`FORWARDED`], from one channel, caught from now on (the default action, which
/// ends the process, no longer applies).
///
/// # Errors
/// When a signal handler cannot be installed.
fn catch_signals() -> std::io::Result<tokio::sync::mpsc::UnboundedReceiver<Signal>> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Signal>();
    for (kind, sig) in FORWARDED {
        let mut stream = signal(kind)?;
        let tx = tx.clone();
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                if tx.send(sig).is_err() {
                    break;
                }
            }
        });
    }
    Ok(rx)
}

/// The kill grace to use: the one asked for, or half of what the lease leaves after the renew
/// deadline. Loss is detected at the renew deadline (from the start of the last successful
/// renewal) and the operator grants no one else before a lease duration after it saw that
/// renewal, so the command is dead in time only if `renew deadline + kill grace < lease`.
///
/// # Errors
/// A message for the user when the asked-for grace does not fit.
fn kill_grace(asked: Option<Duration>, lease: Duration, deadline: Duration) -> Result<Duration, String> {
    let room = lease.saturating_sub(deadline);
    match asked {
        None => Ok(room / 2),
        Some(g) if g < room => Ok(g),
        Some(g) => Err(format!(
            "--kill-grace {} plus the renew deadline {} must be shorter than the lock's lease duration {}: \
             otherwise a command that ignores SIGTERM could still run when the next holder is granted",
            humantime::format_duration(g),
            humantime::format_duration(deadline),
            humantime::format_duration(lease)
        )),
    }
}

/// Runs the command under `guard`; stops it if the lock is lost. The signals from `sig_rx`
/// (see [`catch_signals`]) go on to the command.
///
/// Unless standard input is a terminal (an interactive command must stay in the terminal's
/// foreground process group), the command runs in a process group of its own, and signals go to
/// the whole group: the children of `sh -c` are stopped with it. Either way this process is a
/// child subreaper (prctl `PR_SET_CHILD_SUBREAPER`, Linux): what the command leaves behind (a
/// grandchild whose parent exited, a daemon that forked away or called `setsid`) is re-parented
/// here, not to init, and a lost lock or the command's exit stops every process below this one
/// ([`Descendants`]), whatever its process group: with a terminal, the command's
/// children too (found by a newcomer trial: they outlived the lease).
async fn supervise<G: Held>(
    args: LockArgs,
    guard: G,
    env: Vec<(String, String)>,
    grace: Duration,
    deadline: Duration,
    mut sig_rx: tokio::sync::mpsc::UnboundedReceiver<Signal>,
) -> anyhow::Result<i32> {
    use std::io::IsTerminal;
    let (program, rest) = args.command.split_first().ok_or_else(|| anyhow::anyhow!("no command given"))?;
    let own_group = !std::io::stdin().is_terminal();
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::warn!(error = %e, "cannot become a child subreaper: a process the command leaves behind may outlive the lock");
    }
    let mut command = Command::new(program);
    command.args(rest).envs(env);
    if own_group {
        command.process_group(0);
    }
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = guard.release().await;
            eprintln!("leasehold lock: cannot start {program}: {e}");
            // The shell's conventions: 127 command not found, 126 not executable.
            return Ok(if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 });
        }
    };
    let raw = child.id().map(|p| p as i32).unwrap_or(0);
    // kill(2) with a negative pid signals the process group.
    let pid = Pid::from_raw(if own_group { -raw } else { raw });
    let watchdog = start_watchdog(&guard, raw, own_group, deadline, grace);
    let spared = watchdog.as_ref().and_then(|w| w.id()).map(|p| p as i32);
    let below = Descendants { spared, group: own_group.then_some(raw), command: raw };
    // Orphans the command leaves behind while it runs are reaped now and then.
    let mut reap = tokio::time::interval(Duration::from_secs(5));
    reap.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            status = child.wait() => {
                let status = status?;
                if own_group {
                    // What the command left behind in its group must not run on without the lock.
                    let _ = kill(pid, Signal::SIGKILL);
                }
                // And what it left behind outside its group.
                below.kill_all().await;
                // Ended by the watchdog, or while this process was paused past the deadline:
                // the command did not finish under the lock.
                if guard.is_lost() || guard.last_renewal().borrow().elapsed() >= deadline {
                    eprintln!("leasehold lock: lost lock {} while the command ran; it was stopped", args.lock);
                    let _ = guard.release().await;
                    return Ok(EXIT_LOST);
                }
                if let Err(e) = guard.release().await {
                    eprintln!("leasehold lock: release failed: {e}");
                }
                return Ok(exit_code(status));
            }
            reason = guard.lost() => {
                eprintln!("leasehold lock: lost lock {} ({reason}); stopping the command", args.lock);
                let _ = kill(pid, Signal::SIGTERM);
                below.signal(Signal::SIGTERM, false);
                // The grace, for the command and everything it started.
                let all_gone = async {
                    let _ = child.wait().await;
                    while !below.live().is_empty() {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                };
                if tokio::time::timeout(grace, all_gone).await.is_err() {
                    let _ = kill(pid, Signal::SIGKILL);
                    let _ = child.wait().await;
                }
                if own_group {
                    // The command is gone; its group may not be (a child that ignored SIGTERM).
                    let _ = kill(pid, Signal::SIGKILL);
                }
                below.kill_all().await;
                let _ = guard.release().await;
                return Ok(EXIT_LOST);
            }
            Some(sig) = sig_rx.recv() => {
                let _ = kill(pid, sig);
            }
            _ = reap.tick() => below.reap(),
        }
    }
}

/// The processes below this one (its children, theirs, and so on) but `spared` (the watchdog)
/// and what runs below it: the command and, with this process a child subreaper, whatever the
/// command started, even after its parent exited. Read from `/proc` (the `procfs` crate: each
/// process's `ppid`, `pgrp` and state).
struct Descendants {
    spared: Option<i32>,
    /// The command's own process group, if it has one (its members get the group's signals).
    group: Option<i32>,
    /// The command's PID: reaped by its [`tokio::process::Child`], never here.
    command: i32,
}

impl Descendants {
    /// The processes below this one but the spared; empty, with a warning, when `/proc` cannot
    /// be read.
    fn scan(&self) -> Vec<crate::watchdog::Below> {
        crate::watchdog::below(std::process::id() as i32, self.spared).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read /proc: what the command left behind outside its process group is not stopped");
            vec![]
        })
    }

    /// The live processes (a zombie is not live).
    fn live(&self) -> Vec<i32> {
        self.scan().into_iter().filter(|p| !p.zombie).map(|p| p.pid).collect()
    }

    /// Sends `sig` to every live process below this one, but to those in the command's process
    /// group (`in_group` false: the caller signals the group, and a second SIGTERM makes some
    /// programs skip their clean exit). Reaps the zombies this process is the parent of (orphans
    /// it adopted as a subreaper; tokio waits only for the command), so a command that keeps
    /// double-forking does not pile them up.
    fn signal(&self, sig: Signal, in_group: bool) {
        self.each(Some(sig), in_group);
    }

    /// Reaps the zombies this process is the parent of, signalling nothing.
    fn reap(&self) {
        self.each(None, false);
    }

    fn each(&self, sig: Option<Signal>, in_group: bool) {
        let me = std::process::id() as i32;
        for p in self.scan() {
            if p.zombie {
                if p.ppid == me && p.pid != self.command {
                    let _ = nix::sys::wait::waitpid(Pid::from_raw(p.pid), Some(nix::sys::wait::WaitPidFlag::WNOHANG));
                }
            } else if let Some(sig) = sig.filter(|_| in_group || Some(p.pgrp) != self.group) {
                let _ = kill(Pid::from_raw(p.pid), sig);
            }
        }
    }

    /// SIGKILL to every process below, again until none is live (one may fork between a scan
    /// and its parent's death), for at most a second.
    async fn kill_all(&self) {
        let until = tokio::time::Instant::now() + Duration::from_secs(1);
        loop {
            self.signal(Signal::SIGKILL, true);
            if self.live().is_empty() || tokio::time::Instant::now() >= until {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Starts [`crate::watchdog`] for the command `pid` (for its process group, and inside it, when
/// it has one) and feeds it every renewal. `None` (with a warning) if it cannot be started: the
/// command then runs without the watchdog's protection against `leasehold lock` itself dying.
fn start_watchdog<G: Held>(
    guard: &G,
    pid: i32,
    own_group: bool,
    deadline: Duration,
    grace: Duration,
) -> Option<tokio::process::Child> {
    use tokio::io::AsyncWriteExt;
    let exe = std::env::current_exe().ok()?;
    let mut cmd = Command::new(exe);
    cmd.arg("lock-watchdog")
        .args(["--target", &(if own_group { -pid } else { pid }).to_string()])
        .args(["--renew-deadline-ms", &deadline.as_millis().to_string()])
        .args(["--kill-grace-ms", &grace.as_millis().to_string()])
        // The last renewal's start (for a grant held at once, its claim's send), not "now".
        .args([
            "--renewed-at-ns",
            &crate::watchdog::monotonic_of(*guard.last_renewal().borrow()).as_nanos().to_string(),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true);
    // In the command's group, or (a terminal) in one of its own: never in the terminal's
    // foreground group, which Ctrl-Z stops ([`crate::watchdog`]).
    cmd.process_group(if own_group { pid } else { 0 });
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("leasehold lock: cannot start the watchdog ({e}); the command runs without it");
            return None;
        }
    };
    let mut stdin = child.stdin.take()?;
    let mut renewed = guard.last_renewal();
    tokio::spawn(async move {
        loop {
            let started = crate::watchdog::monotonic_of(*renewed.borrow_and_update()).as_nanos();
            if stdin.write_all(format!("{started}\n").as_bytes()).await.is_err() || renewed.changed().await.is_err() {
                return;
            }
        }
    });
    Some(child)
}

/// The command's exit code, or 128 + signal number when a signal ended it (shell convention).
fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// `$POD_NAME` in a pod; else the user name the API server authenticates us as (a
/// SelfSubjectReview, like `kubectl auth whoami`), which is what the chart's Lease policy lets
/// renew a grant; else `<hostname>-<pid>`.
/// The authenticated user name, as `kubectl auth whoami` shows it (a `SelfSubjectReview`, which
/// every authenticated user may create); `None` when the API server does not answer it.
pub(crate) async fn whoami(client: &kube::Client) -> Option<String> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let api: kube::Api<SelfSubjectReview> = kube::Api::all(client.clone());
    let review = api.create(&kube::api::PostParams::default(), &SelfSubjectReview::default()).await;
    review.ok().and_then(|r| r.status?.user_info?.username).filter(|u| !u.is_empty())
}

async fn default_identity(client: &kube::Client) -> String {
    if let Some(pod) = std::env::var("POD_NAME").ok().filter(|n| !n.is_empty()) {
        return pod;
    }
    if let Some(user) = whoami(client).await {
        return user;
    }
    let host = nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "host".into());
    format!("{host}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A grant held under (lease duration, renew deadline), for [`grant_grace`].
    struct Granted(Duration, Duration);

    impl Held for Granted {
        fn is_lost(&self) -> bool {
            false
        }
        fn last_renewal(&self) -> tokio::sync::watch::Receiver<std::time::Instant> {
            tokio::sync::watch::channel(std::time::Instant::now()).1
        }
        async fn lost(&self) -> LostReason {
            std::future::pending().await
        }
        async fn release(self) -> Result<(), HolderError> {
            Ok(())
        }
        fn timings(&self) -> (Duration, Duration) {
            (self.0, self.1)
        }
    }

    /// The kill grace is checked again against the grant's own lease: a lease lowered while the
    /// process waited (60 s to 30 s) with a renew deadline set by flag (5 s, unchanged) refuses a
    /// 30 s grace that fitted 60 s (a review's finding: it was kept because the deadline had not
    /// changed); a default grace is recomputed; nothing shorter keeps what was checked.
    #[tokio::test]
    async fn the_kill_grace_is_checked_again_when_the_grant_s_lease_is_shorter() {
        let s = Duration::from_secs;
        let queued = (s(60), s(5), s(30));
        let kept = grant_grace(Granted(s(60), s(5)), Some(s(30)), queued).await.unwrap().ok().unwrap();
        assert_eq!((kept.1, kept.2), (s(30), s(5)));
        let refused = grant_grace(Granted(s(30), s(5)), Some(s(30)), queued).await.unwrap();
        assert_eq!(refused.err(), Some(EXIT_ERROR));
        let default = grant_grace(Granted(s(30), s(5)), None, (s(60), s(5), s(27))).await.unwrap().ok().unwrap();
        assert_eq!((default.1, default.2), (Duration::from_millis(12_500), s(5)), "half of 30 s - 5 s");
    }

    fn lock_with(holder: Option<(&str, i64)>, waiters: &[&str], waiting: i32) -> DistributedLock {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLock", "metadata": {"name": "l"}, "spec": {},
            "status": {
                "holder": holder.map(|(n, t)| serde_json::json!({"name": n, "token": t})),
                "waiters": waiters, "waiting": waiting,
            },
        }))
        .unwrap()
    }

    #[test]
    fn progress_names_the_holder_and_the_claims_place() {
        let l = lock_with(Some(("a", 7)), &["l-x", "l-me"], 2);
        assert_eq!(
            progress_text(&l, "l", ("l-me", "uid-me"), secs(10)),
            "waiting for lock l, held by a (fencing token 7); claim l-me is 2 of 2 in the queue"
        );
    }

    #[test]
    fn progress_says_when_no_operator_has_queued_the_claim() {
        let l = lock_with(None, &[], 0);
        let text = progress_text(&l, "l", ("l-me", "uid-me"), secs(10));
        assert!(text.starts_with("waiting for lock l for 10s, free; no operator has queued claim l-me yet"), "{text}");
        let full: Vec<String> = (0..10).map(|i| format!("l-{i}")).collect();
        let l = lock_with(Some(("a", 7)), &full.iter().map(String::as_str).collect::<Vec<_>>(), 12);
        assert!(
            progress_text(&l, "l", ("l-me", "uid-me"), secs(10))
                .ends_with("12 wait, claim l-me is beyond the first 10")
        );
        // Granted to this claim, not yet taken up: not "held by" itself, not "no operator".
        let mut l = lock_with(Some(("me", 22)), &[], 0);
        l.status.as_mut().unwrap().holder.as_mut().unwrap().uid = Some("uid-me".into());
        assert_eq!(
            progress_text(&l, "l", ("l-me", "uid-me"), secs(10)),
            "lock l is granted to claim l-me (fencing token 22): taking it up"
        );
    }

    #[test]
    fn an_error_that_prints_its_source_is_not_repeated() {
        #[derive(Debug, thiserror::Error)]
        #[error("renew Lease failed: {0}")]
        struct Outer(#[source] std::io::Error);
        let e = anyhow::Error::new(Outer(std::io::Error::other("forbidden"))).context("lock l");
        assert_eq!(error_text(&e), "lock l: renew Lease failed: forbidden");
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn the_default_kill_grace_fits_inside_the_lease() {
        assert_eq!(kill_grace(None, secs(15), secs(10)), Ok(Duration::from_millis(2500)));
        assert_eq!(kill_grace(None, secs(3), secs(2)), Ok(Duration::from_millis(500)));
        assert_eq!(kill_grace(Some(secs(4)), secs(15), secs(10)), Ok(secs(4)));
    }

    #[test]
    fn a_kill_grace_that_outlasts_the_lease_is_refused() {
        let err = kill_grace(Some(secs(10)), secs(15), secs(10)).unwrap_err();
        assert!(err.contains("--kill-grace 10s plus the renew deadline 10s"), "{err}");
        assert!(kill_grace(Some(secs(5)), secs(15), secs(10)).is_err());
    }
}
