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
//! Safety does not depend on this: every write that changes who holds a lock is a
//! compare-and-swap on a resourceVersion, so two replicas that both believe they lead (for
//! instance while the API server is unreachable, or with clock skew: the crate compares the
//! Lease's `renewTime` with the local wall clock) only duplicate work and get conflicts.
//! Leader election only keeps the standby replicas from doing that work.
//!
//! While it waits, a standby serves the admin endpoints itself: `/livez` (200), `/readyz` (200:
//! a standby is healthy and ready to take over, so a PodDisruptionBudget counts it) and an empty
//! `/metrics`, so its probes pass. It stops that server just before the operator binds the same
//! address for the real one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Context as _;
use kube::Client;
use kube_lease_manager::{DurationSeconds, LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use prometheus_client::registry::Registry;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::admin::{self, AdminState};
use crate::cli::OperatorArgs;

/// Default name of the leader-election Lease.
pub const DEFAULT_LEASE_NAME: &str = "leasehold-operator";
/// How long a leader's claim on the Lease is valid after its last renewal (client-go's default).
pub const LEASE_DURATION_SECONDS: DurationSeconds = 15;
/// How long before the claim expires the leader renews it.
pub const RENEW_GRACE_SECONDS: DurationSeconds = 5;

/// Leadership held by this process. Keep it alive while leading; see [`LeaderHandle::lost`] and
/// [`LeaderHandle::release`].
pub struct LeaderHandle {
    identity: String,
    state: watch::Receiver<bool>,
    task: JoinHandle<Result<LeaseManager, LeaseManagerError>>,
}

impl LeaderHandle {
    /// The identity written to the Lease's `holderIdentity`.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Resolves when this process is no longer the leader: another identity holds the Lease, or
    /// the lease manager stopped. Never resolves while leadership is kept.
    pub async fn lost(&mut self) {
        // `wait_for` returns an error when the manager's task ended (the sender was dropped).
        let _ = self.state.wait_for(|leading| !*leading).await;
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
    let manager = LeaseManagerBuilder::new(client, lease_name)
        .with_namespace(namespace)
        .with_identity(identity)
        .with_duration(LEASE_DURATION_SECONDS)
        .with_grace(RENEW_GRACE_SECONDS)
        .build()
        .await
        .with_context(|| format!("leader-election Lease {namespace}/{lease_name}"))?;
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
    Ok(LeaderHandle { identity: identity.to_string(), state, task })
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
            _ = handle.lost() => {
                tracing::error!(identity = handle.identity(), "lost leadership; exiting so that this replica restarts as a standby");
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
        let state = Arc::new(AdminState { ready: AtomicBool::new(true), registry: Registry::default() });
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
