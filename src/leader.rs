//! Leader election between operator replicas, on a `coordination.k8s.io/v1` Lease, with the
//! [`kube_lease_manager`] crate.
//!
//! `leasehold operator --leader-elect` runs [`elect`] before anything else: the process waits as a
//! standby until it holds the Lease `--leader-election-lease` in `--leader-election-namespace`
//! (default: the namespace of the client's config, i.e. the pod's own namespace in a cluster),
//! then runs the controllers. If it loses the Lease (another replica took it over because this
//! one could not renew in time), the process exits with status 1 so that Kubernetes restarts it
//! as a standby; on SIGTERM/SIGINT it releases the Lease (so a standby can take over without
//! waiting for it to expire) and exits with status 0.
//!
//! The crate alone does not stop a leader that cannot renew (found by reading
//! kube-lease-manager 0.13.1 and by `e2e/install.rs`): a failed renewal (403 from RBAC or an
//! admission policy, 5xx, timeout) is logged and retried with a backoff of up to 30 s while its
//! channel keeps saying "leading", long after the Lease expired and a standby may have taken it
//! over; and a deleted Lease is never recreated and never reported as lost (every later sync
//! fails with `NonexistentLease` before the state is compared). So this module does not take
//! the crate's word for it. While leading, it watches the Lease itself and stops leading (the
//! process exits 1, as on any loss):
//! - at once when the Lease is deleted or names another holder;
//! - when no renewal by this process was seen for [`RENEW_DEADLINE`] (client-go's 10 s), shorter
//!   than [`LEASE_DURATION_SECONDS`]: the crate renews every
//!   `LEASE_DURATION_SECONDS - RENEW_GRACE_SECONDS` = 5 s, so two or three renewals must fail in
//!   a row. The time of a renewal is its `renewTime`, which this process's own wall clock wrote,
//!   mapped onto the monotonic clock (a wall clock that jumps forward only makes it step down
//!   earlier).
//!
//! A standby (or a starting replica) that finds the Lease missing recreates it held by the
//! placeholder identity [`RECREATED_HOLDER`] for one lease duration, so that nobody can acquire
//! it before a leader that may not have noticed the deletion yet has passed its renew deadline.
//! (A fresh install pays that wait once.)
//!
//! Safety of the locks still does not depend on any of this: every write that changes who
//! holds a lock is a compare-and-swap on a resourceVersion, so two replicas that both believe
//! they lead (a paused leader, clock skew beyond the crate's grace) only duplicate work and get
//! conflicts. Leader election only keeps the standby replicas from doing that work.
//!
//! While it waits, a standby serves the admin endpoints itself: `/livez` (200), `/readyz` (200:
//! a standby is healthy and ready to take over, so a PodDisruptionBudget counts it) and a
//! `/metrics` with `leasehold_leader 0` and the build info, so its probes pass and it says that it
//! is a standby. It stops that server just before the operator binds the same address for the
//! real one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use kube_lease_manager::{DurationSeconds, LeaseCreateMode, LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::admin::{self, AdminState};
use crate::cli::OperatorArgs;

/// Default name of the leader-election Lease.
pub const DEFAULT_LEASE_NAME: &str = "leasehold-operator";
/// How long a leader's claim on the Lease is valid after its last renewal (client-go's default).
pub const LEASE_DURATION_SECONDS: DurationSeconds = 15;
/// How long before the claim expires the leader renews it: the crate renews every
/// `LEASE_DURATION_SECONDS - RENEW_GRACE_SECONDS` = 5 s, so that several renewals fit into
/// [`RENEW_DEADLINE`].
pub const RENEW_GRACE_SECONDS: DurationSeconds = 10;
/// A leader that has not seen one of its renewals land for this long stops leading (client-go's
/// `RenewDeadline`). Shorter than [`LEASE_DURATION_SECONDS`], so it stops before a standby may
/// take the Lease over.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// `holderIdentity` of a Lease recreated after it was deleted: nobody may acquire it before it
/// expires, one lease duration after it was recreated.
pub const RECREATED_HOLDER: &str = "leasehold.dev/recreated";

/// Leadership held by this process. Keep it alive while leading; see [`LeaderHandle::lost`] and
/// [`LeaderHandle::release`].
pub struct LeaderHandle {
    identity: String,
    state: watch::Receiver<bool>,
    task: JoinHandle<Result<LeaseManager, LeaseManagerError>>,
    observed: watch::Receiver<Observed>,
}

impl LeaderHandle {
    /// The identity written to the Lease's `holderIdentity`.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Resolves when this process is no longer the leader, with the reason: the Lease was
    /// deleted or names another holder (as this process's own watch of the Lease shows), no
    /// renewal landed for [`RENEW_DEADLINE`], or the lease manager says so or stopped. Never
    /// resolves while leadership is kept.
    pub async fn lost(&mut self) -> String {
        let mut tenure = Tenure::new(&self.identity, Instant::now());
        loop {
            let verdict = tenure.observe(&self.observed.borrow_and_update(), Instant::now(), SystemTime::now());
            if let Err(why) = verdict {
                return why;
            }
            let deadline = tenure.deadline();
            tokio::select! {
                // `wait_for` returns an error when the manager's task ended (the sender was dropped).
                r = self.state.wait_for(|leading| !*leading) => {
                    return match r {
                        Ok(_) => "the lease manager reports that another identity holds the Lease".into(),
                        Err(_) => "the lease manager stopped".into(),
                    };
                }
                _ = tokio::time::sleep_until(deadline.into()) => {
                    return format!("no renewal of the Lease landed for {} s (renew deadline)", RENEW_DEADLINE.as_secs());
                }
                r = self.observed.changed() => {
                    if r.is_err() {
                        return "the watch of the Lease stopped".into();
                    }
                }
            }
        }
    }

    /// Gives the Lease up (graceful shutdown), so a standby can take over without waiting for it
    /// to expire. Waits at most 5 s for the release to be written.
    ///
    /// # Errors
    /// Fails if the lease manager failed or the release could not be written in time.
    pub async fn release(self) -> anyhow::Result<()> {
        // Closing the channel makes the manager's task release the Lease and end.
        drop(self.state);
        let ended = tokio::time::timeout(Duration::from_secs(5), self.task).await;
        ended
            .context("releasing the leader-election Lease timed out")??
            .context("releasing the leader-election Lease")?;
        Ok(())
    }
}

/// Waits until this process holds the Lease `lease_name` in `namespace` under `identity`
/// (creating the Lease if needed), then returns the handle that tells when leadership is lost.
///
/// # Errors
/// Fails if the Lease cannot be read or created (for example, RBAC forbids it), or if the lease
/// manager stops before this process leads. Errors while competing for or renewing the Lease
/// (network, conflicts) are retried with backoff by the lease manager and logged.
pub async fn lead(client: Client, namespace: &str, lease_name: &str, identity: &str) -> anyhow::Result<LeaderHandle> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    recreate_if_missing(&api, lease_name)
        .await
        .with_context(|| format!("leader-election Lease {namespace}/{lease_name}"))?;
    let manager = LeaseManagerBuilder::new(client, lease_name)
        .with_namespace(namespace)
        .with_identity(identity)
        .with_duration(LEASE_DURATION_SECONDS)
        .with_grace(RENEW_GRACE_SECONDS)
        .with_create_mode(LeaseCreateMode::UseExistent)
        .build()
        .await
        .with_context(|| format!("leader-election Lease {namespace}/{lease_name}"))?;
    let observed = observe(api, lease_name);
    let (mut state, task) = manager.watch().await;
    tracing::info!(lease = %format!("{namespace}/{lease_name}"), identity, "waiting to lead");
    if state.wait_for(|leading| *leading).await.is_err() {
        let why = match task.await {
            Ok(Err(e)) => e.to_string(),
            Ok(Ok(_)) => "the lease manager stopped".to_string(),
            Err(e) => e.to_string(),
        };
        anyhow::bail!("leader election on Lease {namespace}/{lease_name} stopped before this process led: {why}");
    }
    tracing::info!(lease = %format!("{namespace}/{lease_name}"), identity, "leading");
    Ok(LeaderHandle { identity: identity.to_string(), state, task, observed })
}

/// What this process's watch of the leader-election Lease last showed.
#[derive(Clone, Debug, Default)]
enum Observed {
    /// Nothing listed yet.
    #[default]
    Unknown,
    /// The Lease does not exist.
    Absent,
    /// The Lease as last seen.
    Present(Box<Lease>),
}

/// Watches the Lease `name` (a watch of that one object) for the life of the process, and
/// recreates it ([`recreate_if_missing`]) whenever it is found missing, so standbys can compete
/// for it again. Watch errors are retried with backoff; the last state seen stays in place
/// (a leader that cannot see its renewals land then reaches its renew deadline).
fn observe(api: Api<Lease>, name: &str) -> watch::Receiver<Observed> {
    let (tx, rx) = watch::channel(Observed::Unknown);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let name = name.to_string();
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(api.clone(), config).default_backoff());
        let mut listed = None;
        while let Some(ev) = events.next().await {
            let now = match ev {
                Ok(watcher::Event::Init) => {
                    listed = Some(None);
                    continue;
                }
                Ok(watcher::Event::InitApply(l)) => {
                    listed = Some(Some(l));
                    continue;
                }
                Ok(watcher::Event::InitDone) => match listed.take().flatten() {
                    Some(l) => Observed::Present(Box::new(l)),
                    None => Observed::Absent,
                },
                Ok(watcher::Event::Apply(l)) => Observed::Present(Box::new(l)),
                Ok(watcher::Event::Delete(_)) => Observed::Absent,
                Err(e) => {
                    tracing::warn!(error = %e, lease = %name, "watch of the leader-election Lease failed (retrying)");
                    continue;
                }
            };
            let absent = matches!(now, Observed::Absent);
            if tx.send(now).is_err() {
                return;
            }
            if absent {
                tracing::warn!(lease = %name, "the leader-election Lease is gone; recreating it");
                if let Err(e) = recreate_if_missing(&api, &name).await {
                    tracing::warn!(error = %e, lease = %name, "could not recreate the leader-election Lease");
                }
            }
        }
    });
    rx
}

/// Creates the Lease `name` if it does not exist, held by [`RECREATED_HOLDER`] for
/// [`LEASE_DURATION_SECONDS`] from now: a leader that has not noticed that its Lease was deleted
/// stops at its renew deadline, before anyone can acquire the new one. Another replica creating
/// it at the same time is fine (409 AlreadyExists).
///
/// # Errors
/// The read or the create failed (RBAC, network).
async fn recreate_if_missing(api: &Api<Lease>, name: &str) -> Result<(), kube::Error> {
    if api.get_opt(name).await?.is_some() {
        return Ok(());
    }
    let now = MicroTime(Timestamp::now());
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "spec": {
            "holderIdentity": RECREATED_HOLDER,
            "acquireTime": now,
            "renewTime": now,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
        },
    }))
    .map_err(kube::Error::SerdeError)?;
    match api.create(&PostParams::default(), &lease).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// A leader's view of its own tenure: when its last renewal landed, on the monotonic clock.
#[derive(Debug)]
struct Tenure {
    identity: String,
    renewed: Instant,
    /// The watch has shown the Lease naming this process. Until then, what it shows may predate
    /// the acquisition (the watch lags behind the lease manager's writes), so only the deadline
    /// counts.
    seen_held: bool,
}

impl Tenure {
    /// Starts the tenure at `since` (the moment the lease manager reported leadership: its
    /// acquisition landed before that).
    fn new(identity: &str, since: Instant) -> Tenure {
        Tenure { identity: identity.to_string(), renewed: since, seen_held: false }
    }

    /// Folds in what the watch shows. `Err(reason)` when this process no longer holds the Lease:
    /// it is gone, or names someone else. A `renewTime` (written by this process's own wall
    /// clock) moves the last renewal to the matching monotonic instant.
    fn observe(&mut self, observed: &Observed, now: Instant, wall: SystemTime) -> Result<(), String> {
        let lease = match observed {
            Observed::Unknown => return Ok(()),
            Observed::Absent if !self.seen_held => return Ok(()),
            Observed::Absent => return Err("the Lease was deleted".into()),
            Observed::Present(l) => l,
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.unwrap_or_default();
        if holder != self.identity && !self.seen_held {
            return Ok(());
        }
        if holder != self.identity {
            let holder = if holder.is_empty() { "nobody".to_string() } else { holder };
            return Err(format!("the Lease {} names {holder}", lease.name_any()));
        }
        if let Some(renew) = spec.renew_time {
            let renew = SystemTime::from(renew.0);
            let ago = wall.duration_since(renew).unwrap_or(Duration::ZERO);
            self.renewed = now.checked_sub(ago).unwrap_or(now);
        }
        self.seen_held = true;
        Ok(())
    }

    /// When leadership ends unless another renewal is seen.
    fn deadline(&self) -> Instant {
        self.renewed + RENEW_DEADLINE
    }
}

/// A unique identity for this process: `<instance>_<random hex>` (as client-go uses
/// `<hostname>_<uuid>`), so a restarted replica with the same pod name never mistakes the
/// previous process's claim for its own.
pub fn identity(instance: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    format!("{instance}_{:016x}", h.finish())
}

/// What `leasehold operator` does first when `--leader-elect` is set (nothing otherwise): serve
/// standby admin endpoints, wait to lead, then watch leadership in the background. On loss the
/// process exits with status 1; on SIGTERM/SIGINT the Lease is released and the process exits
/// with status 0.
///
/// # Errors
/// Fails if the standby admin server cannot bind `--admin-addr`, or [`lead`] fails.
pub async fn elect(client: &Client, args: &OperatorArgs) -> anyhow::Result<()> {
    if !args.leader_elect {
        return Ok(());
    }
    let namespace = args.leader_election_namespace.clone().unwrap_or_else(|| client.default_namespace().to_string());
    let standby = Standby::serve(args.admin_addr).await?;
    let mut handle = lead(client.clone(), &namespace, &args.leader_election_lease, &identity(&args.instance)).await?;
    standby.stop().await;
    tokio::spawn(async move {
        tokio::select! {
            why = handle.lost() => {
                tracing::error!(identity = handle.identity(), reason = %why, "lost leadership; exiting so that this replica restarts as a standby");
                std::process::exit(1);
            }
            _ = shutdown_signal() => {
                let identity = handle.identity().to_string();
                match handle.release().await {
                    Ok(()) => tracing::info!(identity, "released leadership"),
                    Err(e) => tracing::warn!(identity, error = %e, "could not release leadership; a standby takes over when it expires"),
                }
                // Exit now rather than keep working without the lead. A write cut short here is
                // safe: every grant is a compare-and-swap, and the next leader finishes a grant
                // whose pod patch is missing from what the Lease says.
                std::process::exit(0);
            }
        }
    });
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// The admin endpoints of a standby: live, ready, no metrics.
struct Standby {
    stop: oneshot::Sender<()>,
    server: JoinHandle<std::io::Result<()>>,
}

impl Standby {
    async fn serve(addr: SocketAddr) -> anyhow::Result<Standby> {
        let listener =
            tokio::net::TcpListener::bind(addr).await.with_context(|| format!("bind admin address {addr}"))?;
        let state = Arc::new(AdminState {
            ready: AtomicBool::new(true),
            registry: crate::metrics::standby_registry(),
            writes: Default::default(),
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            axum::serve(listener, admin::router(state))
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
        });
        Ok(Standby { stop, server })
    }

    /// Stops serving and frees the address.
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.server.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_unique_per_process_start_and_name_the_instance() {
        let a = identity("leasehold-7d9f");
        let b = identity("leasehold-7d9f");
        assert!(a.starts_with("leasehold-7d9f_"), "{a}");
        assert_ne!(a, b);
    }

    fn lease(holder: &str, renewed: SystemTime) -> Observed {
        let renewed = Timestamp::try_from(renewed).unwrap();
        Observed::Present(Box::new(
            serde_json::from_value(serde_json::json!({
                "metadata": { "name": "le" },
                "spec": { "holderIdentity": holder, "renewTime": MicroTime(renewed), "leaseDurationSeconds": 15 },
            }))
            .unwrap(),
        ))
    }

    #[test]
    fn a_renewal_moves_the_deadline_to_its_own_renew_time_plus_the_renew_deadline() {
        // A whole second: renewTime has microsecond precision.
        let (now, wall) = (Instant::now(), SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000));
        let mut t = Tenure::new("me", now);
        assert_eq!(t.deadline(), now + RENEW_DEADLINE);
        // Seen 3 s after it was written: the deadline counts from the write, not the sighting.
        t.observe(&lease("me", wall - Duration::from_secs(3)), now, wall).unwrap();
        assert_eq!(t.deadline(), now - Duration::from_secs(3) + RENEW_DEADLINE);
        // A renewTime ahead of the wall clock (clock stepped back) counts as now, never later.
        t.observe(&lease("me", wall + Duration::from_secs(60)), now, wall).unwrap();
        assert_eq!(t.deadline(), now + RENEW_DEADLINE);
    }

    #[test]
    fn deleted_or_taken_over_lease_ends_the_tenure_once_it_was_seen_held() {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let mut t = Tenure::new("me", now);
        // What the watch shows before the acquisition reached it is not a loss.
        t.observe(&lease("previous", wall), now, wall).unwrap();
        t.observe(&Observed::Absent, now, wall).unwrap();
        t.observe(&lease("me", wall), now, wall).unwrap();
        assert!(t.observe(&lease("intruder", wall), now, wall).unwrap_err().contains("intruder"));
        let mut t = Tenure::new("me", now);
        t.observe(&lease("me", wall), now, wall).unwrap();
        assert!(t.observe(&Observed::Absent, now, wall).unwrap_err().contains("deleted"));
    }

    #[tokio::test]
    async fn standby_is_live_and_ready_and_frees_its_address() {
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let listener = std::net::TcpListener::bind(addr).unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let standby = Standby::serve(addr).await.unwrap();
        for path in ["/livez", "/readyz"] {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            assert!(out.starts_with("HTTP/1.1 200"), "{path}: {out}");
        }
        standby.stop().await;
        // The operator binds the same address right after.
        tokio::net::TcpListener::bind(addr).await.expect("address free again");
    }
}
