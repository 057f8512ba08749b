//! The operator: shared watches on locks, Leases, pods and nodes; the lock controller that
//! grants; the pod controller that explains why a pod is not served.

mod distributed_lock;
pub mod gate;
mod pod;
pub mod trim;
pub mod workload;

pub use distributed_lock::{
    at_lease_request, candidate_of_claim, candidate_of_pod, lock_set_not_served_note, lock_set_unservable_among,
    pod_concerns_lock,
};

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::channel::mpsc;
use futures::{StreamExt, future};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, ObjectReference, Pod};
use kube::api::Api;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use prometheus_client::registry::Registry;

use crate::admin::{self, AdminState};
use crate::cli::OperatorArgs;
use crate::crd::{DistributedLock, DistributedLockClaim};
use crate::error::Error;
use crate::health::WriteHealth;
use crate::lock::{GRANTED_LOCK_ANNOTATION, LEASE_LABEL, LOCK_ANNOTATION, lock_set};
use crate::metrics::Metrics;

/// Field manager / Event reporting controller name.
pub const CONTROLLER_NAME: &str = "leasehold.dev/operator";

/// How long after a grant to a claim (one lock, single-holder) the operator records it in the
/// claim's status: 1 second ([`crate::lock::grant::Settings::claim_record_delay`]). The claim's
/// process learns its grant from the Lease, so a claim released within this time costs no
/// status write (issue 12); a longer hold is recorded (`kubectl get dlclaim`) a second late.
pub const CLAIM_RECORD_DELAY: Duration = Duration::from_secs(1);

/// Everything a reconcile needs: the client, the shared caches, and the operator's own clock.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Every pod (in the served namespaces).
    pub pods: Store<Pod>,
    /// Every DistributedLock (in the served namespaces), the lock controller's own cache: a
    /// multi-lock pod is served only while every lock of its set exists and is not a semaphore
    /// ([`distributed_lock::lock_set_unservable`]).
    pub locks: Store<DistributedLock>,
    /// Leases labelled `leasehold.dev/lock`.
    pub leases: Store<Lease>,
    /// Nodes, to notice a holder's node that stopped reporting.
    pub nodes: Store<Node>,
    /// The served namespaces, to stop granting in one that is being deleted.
    pub namespaces: Store<Namespace>,
    /// Event recorder for Warning Events. kube-runtime's `Recorder` (kube-runtime 5.0,
    /// `events.rs`) keeps every Event it published in the last 6 minutes (`CACHE_TTL`), keyed by
    /// type, reason, action, reporter, regarding and related object but not the note, so that a
    /// repeat is patched into the first Event's series (count, last time; the note stays the
    /// first one). Entries go only when a later Event is published, and the table never shrinks.
    /// Only Warnings go through it (see [`Context::event_related`]).
    pub recorder: Recorder,
    /// Who reports the Events (controller [`CONTROLLER_NAME`], instance `--instance`), for the
    /// one-Event `Recorder` that publishes each Normal Event ([`Context::event_related`]).
    pub reporter: Reporter,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Outcomes of the protocol writes, for `/readyz` ([`crate::health`]).
    pub writes: Arc<WriteHealth>,
    /// `DistributedLockClaim`s.
    pub claims: Store<DistributedLockClaim>,
    /// The protocol's clock state per lock UID ([`crate::lock::machine::Clocks`]), on this
    /// process's monotonic clock, in memory: after a restart timeouts start over (later, never
    /// earlier), as client-go's leader election does.
    pub clocks: Mutex<HashMap<String, crate::lock::machine::Clocks>>,
    /// Consecutive reconcile failures per lock UID, for the backoff; cleared on success.
    pub failures: Mutex<HashMap<String, u32>>,
    /// Per lock UID, the UIDs of the waiters told by a `Waiting` Event that they queue (each
    /// once, while it stays in the queue).
    pub announced: Mutex<HashMap<String, std::collections::HashSet<String>>>,
    /// Per lock UID, when the operator last applied the lock's status and a digest of what it
    /// applied ([`status_digest`]), so a reconcile that runs on a cache which does not show that
    /// write yet (woken by the operator's own Lease write, whose watch event often arrives first)
    /// does not apply the same status again.
    pub status_written: Mutex<HashMap<String, (Instant, u64)>>,
    /// Per holder UID (pod or claim): the resourceVersion the cache showed when the operator
    /// patched it for a grant, the holder as that patch returned it, and when. Until the cache
    /// shows another version (the watch event of that patch arrived) or
    /// [`distributed_lock::HOLDER_CACHE_LAG`] passed, reconciles read the holder from here: a
    /// reconcile woken by the grant's own Lease write would otherwise see the holder still
    /// waiting and patch the same grant again from the older version (a 409 per such reconcile).
    pub holders_written: Mutex<HashMap<String, (String, crate::lock::grant::Candidate, Instant)>>,
    /// Per lock's own Lease (`<namespace>/<name>`): the resourceVersion the cache showed when the
    /// operator last wrote it (a grant, a release, a repair, a next-holder hint), the Lease as
    /// that write returned it, and when. Until the cache shows another version or
    /// [`distributed_lock::HOLDER_CACHE_LAG`] passed, reconciles read the Lease from here: a
    /// reconcile woken right after its own write would otherwise decide from the version that
    /// write replaced and write again, a 409 and a read each time (issue 12: a hint written
    /// twice per handover in the throughput bench).
    pub leases_written: Mutex<HashMap<String, (String, Lease, Instant)>>,
    /// Per lock UID, since when its status has differed from what the lock shows without being
    /// written: a status change waits [`distributed_lock::STATUS_DEBOUNCE`] so that the changes
    /// of one handover (the new holder, then the releaser queueing again) are one write.
    pub status_pending: Mutex<HashMap<String, Instant>>,
    /// At most `--max-concurrent-reconciles` lock reconciles at once, served in the order they
    /// became due ([`gate::ReconcileGate`]: kube-runtime's own bound starves locks behind busy
    /// ones).
    pub gate: gate::ReconcileGate,
    /// Origin of the monotonic time handed to [`crate::lock::machine::step`].
    pub started: Instant,
    /// Test-only crash point (`LEASEHOLD_FAILPOINT`), see [`Context::failpoint`].
    pub failpoint: Option<String>,
}

impl Context {
    /// Whether namespace `ns` is being deleted (`metadata.deletionTimestamp` set, phase
    /// `Terminating`). The namespace controller is then deleting everything in it; a grant there
    /// would hand a lock to a holder that is about to vanish, and creates are refused anyway.
    pub fn namespace_terminating(&self, ns: &str) -> bool {
        self.namespaces.get(&ObjectRef::new(ns)).is_some_and(|n| {
            n.metadata.deletion_timestamp.is_some()
                || n.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating")
        })
    }

    /// Test-only crash point: when the env var `LEASEHOLD_FAILPOINT` equals `name`, the process
    /// aborts (as SIGKILL would stop it), or, for a name starting with `stop-`, sends itself
    /// SIGSTOP (as a GC pause or a frozen VM would stop it) and carries on where it was once
    /// someone sends SIGCONT. Used by end-to-end tests to stop the operator between two writes.
    pub fn failpoint(&self, name: &str) {
        if self.failpoint.as_deref() == Some(name) {
            if name.starts_with("stop-") {
                tracing::warn!(failpoint = name, "failpoint hit: stopping (SIGSTOP) until SIGCONT");
                if let Err(e) = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP) {
                    tracing::error!(error = %e, "failpoint: SIGSTOP failed");
                }
                tracing::warn!(failpoint = name, "failpoint: resumed");
                return;
            }
            tracing::warn!(failpoint = name, "failpoint hit: aborting");
            std::process::abort();
        }
    }

    /// Publishes an Event about `reference`; failures are logged, never fatal.
    pub async fn event(&self, reference: &ObjectReference, type_: EventType, reason: &str, note: String, action: &str) {
        self.event_related(reference, None, type_, reason, note, action).await;
    }

    /// Publishes an Event about `reference` that also names `related` (a pod, for grants and
    /// releases on a lock). Events with different `related` objects are not folded into one
    /// series, so every grant keeps its own note (holder and token).
    ///
    /// A Normal Event goes through a new `Recorder` with an empty cache, dropped after it: it is
    /// always created as a new Event, never patched into a series, and nothing of it stays in
    /// memory. The operator publishes its Normal Events once per holder (`Granted`,
    /// `LockGranted`, `Released`, `Waiting`, a rejection) or once per workload (`LockCreated`),
    /// so the shared cache never folded them, except a lock's rejection Events, which it folded
    /// into a series that kept the first rejected waiter's note. In the held scenario of issue
    /// 12 the shared cache held about 2,100 such Events (6.5 MiB of heap, heap profile
    /// `benches/results/2026-12-02-a82d5ac-held-heap-profile.md`). A Warning goes through the
    /// shared [`Context::recorder`]: a Warning can repeat (`RollingUpdateDeadlock` at every
    /// reconcile of a deadlocked workload), and a repeat within 6 minutes is one Event with a
    /// count instead of one Event per repeat.
    pub async fn event_related(
        &self,
        reference: &ObjectReference,
        related: Option<ObjectReference>,
        type_: EventType,
        reason: &str,
        note: String,
        action: &str,
    ) {
        // The API server refuses a note over 1024 characters (and with it the Event).
        let note = match note.char_indices().nth(1021) {
            Some((cut, _)) => format!("{}...", &note[..cut]),
            None => note,
        };
        let ev = Event { type_, reason: reason.into(), note: Some(note), action: action.into(), secondary: related };
        let published = match type_ {
            EventType::Normal => {
                Recorder::new(self.client.clone(), self.reporter.clone()).publish(&ev, reference).await
            }
            EventType::Warning => self.recorder.publish(&ev, reference).await,
        };
        if let Err(e) = published {
            tracing::warn!(error = %e, reason, "failed to publish event");
        }
    }
}

/// Object reference of a pod by name (for Events about pods that may be gone).
pub fn pod_ref_by_name(ns: Option<String>, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(name.into()),
        namespace: ns,
        ..ObjectReference::default()
    }
}

/// Object reference of a pod (for Events).
pub fn pod_ref(pod: &Pod) -> ObjectReference {
    pod.object_ref(&())
}

fn api<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The lock a pod names, as a controller key.
pub fn lock_of(pod: &Pod) -> Option<ObjectRef<DistributedLock>> {
    let name = pod.annotations().get(LOCK_ANNOTATION)?;
    Some(ObjectRef::new(name.trim()).within(&pod.namespace()?))
}

/// Every lock a change of `pod` can concern: the one it names, the one it was granted
/// (`leasehold.dev/granted-lock`), and every lock of a multi-lock pod's set
/// ([`crate::lock::lock_set`]: a record on the pod for one lock can let another lock ungate it).
/// The first two differ when someone edited a holder's lock annotation: the holder's completion or
/// deletion must still wake the lock it holds.
pub fn locks_of(pod: &Pod) -> Vec<ObjectRef<DistributedLock>> {
    let Some(ns) = pod.namespace() else { return vec![] };
    let mut locks: Vec<ObjectRef<DistributedLock>> = [LOCK_ANNOTATION, GRANTED_LOCK_ANNOTATION]
        .iter()
        .filter_map(|k| pod.annotations().get(*k))
        .map(|name| ObjectRef::new(name.trim()).within(&ns))
        .chain(lock_set(pod.annotations()).iter().map(|name| ObjectRef::new(name).within(&ns)))
        .collect();
    locks.sort_by(|a, b| a.name.cmp(&b.name));
    locks.dedup();
    locks
}

/// The locks a claim concerns: its lock set, or `spec.lock` alone.
fn claim_locks(c: &DistributedLockClaim) -> Vec<String> {
    let set = c.spec.lock_set();
    if set.is_empty() { vec![c.spec.lock.clone()] } else { set }
}

/// Whether `pod` asks for any lock: `leasehold.dev/lock` or a multi-lock set.
pub fn asks_for_a_lock(pod: &Pod) -> bool {
    lock_of(pod).is_some() || !lock_set(pod.annotations()).is_empty()
}

/// Whether the pod waits at Leasehold's scheduling gate (`leasehold.dev/lock` in
/// `spec.schedulingGates`), whatever it asks for.
pub fn has_leasehold_gate(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == crate::lock::SCHEDULING_GATE))
}

/// Sends a reconcile trigger for every lock that has a Lease in the cache, or only for those in
/// namespace `only` when given. Used when a watch has re-listed (a relist replaces the cache
/// without reporting the objects deleted in between, so a lock whose holder vanished then would
/// otherwise wait for an unrelated event) and when a namespace starts terminating.
fn trigger_locks(tx: &mpsc::UnboundedSender<ObjectRef<DistributedLock>>, leases: &Store<Lease>, only: Option<&str>) {
    for l in leases.state() {
        let ns = l.namespace();
        if only.is_some_and(|o| ns.as_deref() != Some(o)) {
            continue;
        }
        if let (Some(name), Some(ns)) = (l.labels().get(LEASE_LABEL), ns) {
            let _ = tx.unbounded_send(ObjectRef::new(name).within(&ns));
        }
    }
}

/// Runs the operator until SIGINT/SIGTERM.
///
/// # Errors
/// Fails if no kubeconfig / in-cluster config is found or the admin address cannot be bound.
pub async fn run(args: OperatorArgs) -> anyhow::Result<()> {
    let client = crate::client::try_default().await?;
    // With --leader-elect: wait until this replica leads (exits non-zero if it loses the lead).
    crate::leader::elect(&client, &args).await?;
    let ns = args.namespace.as_deref();
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::new(&mut registry));
    let writes = Arc::new(WriteHealth::default());
    writes.register(&mut registry);
    let admin_state = Arc::new(AdminState { ready: false.into(), registry, writes: writes.clone() });

    let (pods, pod_writer) = reflector::store::<Pod>();
    let (leases, lease_writer) = reflector::store::<Lease>();
    let (nodes, node_writer) = reflector::store::<Node>();
    let (claims, claim_writer) = reflector::store::<DistributedLockClaim>();
    let (locks, lock_writer) = reflector::store::<DistributedLock>();
    let (namespaces, namespace_writer) = reflector::store::<Namespace>();
    // Every watch event that can change a lock's decision becomes a reconcile trigger for that
    // lock, deletions included (a holder pod that vanishes frees the lock at once).
    let (lock_tx, lock_rx) = mpsc::unbounded::<ObjectRef<DistributedLock>>();
    let (pod_tx, pod_rx) = mpsc::unbounded::<pod::PodEvent>();
    let claim_checks = pod_tx.clone();

    let (tx, leases_for_pods) = (lock_tx.clone(), leases.clone());
    spawn_watch(
        "pods",
        watcher(api::<Pod>(&client, ns), watcher::Config::default())
            .default_backoff()
            .modify(trim::pod)
            .reflect(pod_writer),
        move |ev| match ev {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                for r in locks_of(p) {
                    let _ = tx.unbounded_send(r);
                }
                if asks_for_a_lock(p) || has_leasehold_gate(p) {
                    let _ = pod_tx.unbounded_send(pod::PodEvent::Seen(Arc::new(p.clone())));
                }
            }
            watcher::Event::Delete(p) => {
                for r in locks_of(p) {
                    let _ = tx.unbounded_send(r);
                }
                if asks_for_a_lock(p) || has_leasehold_gate(p) {
                    let _ = pod_tx.unbounded_send(pod::PodEvent::Gone(p.uid().unwrap_or_default()));
                }
            }
            watcher::Event::InitDone => trigger_locks(&tx, &leases_for_pods, None),
            watcher::Event::Init => {}
        },
    );
    let tx = lock_tx.clone();
    spawn_watch(
        "leases",
        watcher(api::<Lease>(&client, ns), watcher::Config::default().labels(LEASE_LABEL))
            .default_backoff()
            .modify(trim::meta)
            .reflect(lease_writer),
        move |ev| match ev {
            watcher::Event::Apply(l) | watcher::Event::InitApply(l) | watcher::Event::Delete(l) => {
                if let (Some(name), Some(ns)) = (l.labels().get(LEASE_LABEL), l.namespace()) {
                    let _ = tx.unbounded_send(ObjectRef::new(name).within(&ns));
                }
            }
            _ => {}
        },
    );
    let (tx, leases_for_claims) = (lock_tx.clone(), leases.clone());
    spawn_watch(
        "claims",
        watcher(api::<DistributedLockClaim>(&client, ns), watcher::Config::default())
            .default_backoff()
            .modify(trim::meta)
            .reflect(claim_writer),
        move |ev| match ev {
            watcher::Event::Apply(c) | watcher::Event::InitApply(c) => {
                // A claim with a lock set wakes every lock of it: a record for one lock is what
                // lets the last one grant the set.
                if let Some(ns) = c.namespace() {
                    for l in claim_locks(c) {
                        let _ = tx.unbounded_send(ObjectRef::new(&l).within(&ns));
                    }
                }
                let _ = claim_checks.unbounded_send(pod::PodEvent::ClaimSeen(Arc::new(c.clone())));
            }
            watcher::Event::Delete(c) => {
                if let Some(ns) = c.namespace() {
                    for l in claim_locks(c) {
                        let _ = tx.unbounded_send(ObjectRef::new(&l).within(&ns));
                    }
                }
                let _ = claim_checks.unbounded_send(pod::PodEvent::ClaimGone(c.uid().unwrap_or_default()));
            }
            watcher::Event::InitDone => trigger_locks(&tx, &leases_for_claims, None),
            watcher::Event::Init => {}
        },
    );
    let tx = lock_tx.clone();
    let pods_for_nodes = pods.clone();
    spawn_watch(
        "nodes",
        watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
            .default_backoff()
            .modify(trim::node)
            .reflect(node_writer),
        move |ev| match ev {
            watcher::Event::Apply(n) | watcher::Event::Delete(n) => {
                // Locks whose holder runs on this node (holders carry the token annotation).
                let name = n.name_any();
                for p in pods_for_nodes.state() {
                    let on_node = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str());
                    let granted = p.annotations().keys().any(|k| {
                        k == crate::lock::TOKEN_ANNOTATION || crate::lock::lock_of_token_annotation(k).is_some()
                    });
                    if on_node && granted {
                        for r in locks_of(&p) {
                            let _ = tx.unbounded_send(r);
                        }
                    }
                }
            }
            _ => {}
        },
    );

    // The served namespaces (one, with --namespace): a namespace that starts terminating wakes
    // its locks, which then stop granting and say why.
    let (tx, leases_for_namespaces) = (lock_tx.clone(), leases.clone());
    let ns_config = match ns {
        Some(ns) => watcher::Config::default().fields(&format!("metadata.name={ns}")),
        None => watcher::Config::default(),
    };
    spawn_watch(
        "namespaces",
        watcher(Api::<Namespace>::all(client.clone()), ns_config)
            .default_backoff()
            .modify(trim::meta)
            .reflect(namespace_writer),
        move |ev| {
            if let watcher::Event::Apply(n) = ev
                && n.metadata.deletion_timestamp.is_some()
            {
                trigger_locks(&tx, &leases_for_namespaces, Some(&n.name_any()));
            }
        },
    );

    let reporter = Reporter { controller: CONTROLLER_NAME.into(), instance: Some(args.instance.clone()) };
    let ctx = Arc::new(Context {
        client: client.clone(),
        pods: pods.clone(),
        locks: locks.clone(),
        leases: leases.clone(),
        nodes: nodes.clone(),
        namespaces: namespaces.clone(),
        claims: claims.clone(),
        recorder: Recorder::new(client.clone(), reporter.clone()),
        reporter,
        metrics: metrics.clone(),
        writes,
        clocks: Mutex::default(),
        gate: gate::ReconcileGate::new(args.max_concurrent_reconciles),
        started: Instant::now(),
        failures: Mutex::default(),
        announced: Mutex::default(),
        status_written: Mutex::default(),
        holders_written: Mutex::default(),
        leases_written: Mutex::default(),
        status_pending: Mutex::default(),
        failpoint: std::env::var("LEASEHOLD_FAILPOINT").ok(),
    });

    // The lock controller's own cache, trimmed like the others; at most
    // `--max-concurrent-reconciles` locks are reconciled at once (`ctx.gate`, in the order they
    // became due), so a burst of new locks queues instead of flooding the API server (each
    // reconcile's writes would time out and be retried, and nothing would progress). The
    // controller's own bound, `gate::IN_FLIGHT`, is far above that: it serves waiting locks in
    // hash order and starves some ([`gate`]).
    let lock_stream = watcher(api::<DistributedLock>(&client, ns), watcher::Config::default())
        .modify(trim::meta)
        .reflect(lock_writer)
        .applied_objects();
    let lock_ctrl = Controller::for_stream(lock_stream, locks.clone())
        .with_config(controller::Config::default().concurrency(gate::in_flight(args.max_concurrent_reconciles)))
        .reconcile_on(lock_rx)
        .shutdown_on_signal();

    let cronjobs = workload_controller::<k8s_openapi::api::batch::v1::CronJob>(
        client.clone(),
        args.namespace.clone(),
        ctx.clone(),
    );
    let deployments = workload_controller::<k8s_openapi::api::apps::v1::Deployment>(
        client.clone(),
        args.namespace.clone(),
        ctx.clone(),
    );
    let statefulsets = workload_controller::<k8s_openapi::api::apps::v1::StatefulSet>(
        client.clone(),
        args.namespace.clone(),
        ctx.clone(),
    );

    let admin = tokio::spawn(admin::serve(args.admin_addr, admin_state.clone()));
    // Serve only once every cache is complete: a decision on a partial pod list could miss the
    // holder and grant a second pod.
    let _ = tokio::join!(
        pods.wait_until_ready(),
        leases.wait_until_ready(),
        nodes.wait_until_ready(),
        claims.wait_until_ready(),
        namespaces.wait_until_ready()
    );
    tracing::info!(namespace = ns.unwrap_or("<all>"), "starting controllers");

    let lock_loop =
        lock_ctrl.run(distributed_lock::reconcile, distributed_lock::error_policy, ctx.clone()).for_each(|r| {
            if let Err(e) = r {
                tracing::debug!(error = %e, "lock reconcile failed");
            }
            future::ready(())
        });
    let pod_ctx = Arc::new(pod::PodContext { ctx: ctx.clone(), locks: locks.clone(), warned: Mutex::default() });
    let (prune_ctx, prune_locks) = (ctx.clone(), locks.clone());
    let prune = async move {
        loop {
            tokio::time::sleep(PRUNE_EVERY).await;
            let live: std::collections::HashSet<String> = prune_locks.state().iter().filter_map(|l| l.uid()).collect();
            retain_live(&prune_ctx.clocks, &live);
            retain_live(&prune_ctx.failures, &live);
            retain_live(&prune_ctx.announced, &live);
            retain_live(&prune_ctx.status_written, &live);
            retain_live(&prune_ctx.status_pending, &live);
            let keys = prune_locks
                .state()
                .iter()
                .map(|l| format!("{}/{}", l.namespace().unwrap_or_default(), l.name_any()))
                .collect();
            prune_ctx.metrics.forget_locks_except(&keys);
        }
    };
    let ready = admin_state.clone();
    let pod_loop = async move {
        // Pod checks need the lock cache (a "lock not found" warning must not come from a cache
        // that is still filling); readiness means every cache has synced.
        let _ = locks.wait_until_ready().await;
        ready.ready.store(true, Ordering::Relaxed);
        tracing::info!("all caches synced; ready");
        pod::run_checks(pod_rx, pod_ctx).await;
    };
    // The controllers stop on SIGTERM/SIGINT (`shutdown_on_signal`); the process ends when the
    // lock controller has stopped, whatever the pod checks are doing.
    // All in this one task: kube-runtime 5.0's store readiness was seen never to wake a waiter
    // polled from a second task.
    let workloads = futures::future::join3(cronjobs, deployments, statefulsets);
    tokio::select! {
        _ = lock_loop => {}
        _ = pod_loop => {}
        _ = workloads => {}
        _ = prune => {}
        r = admin => { r??; }
    }
    tracing::info!("shut down");
    Ok(())
}

/// How often the per-lock memory of deleted locks (clocks, failure counts, announced waiters,
/// metric series) is dropped.
const PRUNE_EVERY: Duration = Duration::from_secs(300);

/// Keeps only the entries of `map` whose key (a lock UID) is in `live`.
fn retain_live<V>(map: &Mutex<HashMap<String, V>>, live: &std::collections::HashSet<String>) {
    map.lock().unwrap_or_else(|e| e.into_inner()).retain(|uid, _| live.contains(uid));
}

/// A controller for one singleton-workload kind, as a future that runs until shutdown.
fn workload_controller<W: workload::Workload>(
    client: Client,
    ns: Option<String>,
    ctx: Arc<Context>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    Controller::new(api::<W>(&client, ns.as_deref()), watcher::Config::default())
        .shutdown_on_signal()
        .run(workload::reconcile::<W>, workload::error_policy::<W>, ctx)
        .for_each(|_| future::ready(()))
}

/// Drives a reflector stream on its own task: `on_event` sees every event after the cache has
/// applied it; watch errors are logged (the backoff retries them).
fn spawn_watch<T: Send + 'static>(
    what: &'static str,
    stream: impl futures::Stream<Item = Result<watcher::Event<T>, watcher::Error>> + Send + 'static,
    on_event: impl Fn(&watcher::Event<T>) + Send + 'static,
) {
    tokio::spawn(stream.for_each(move |r| {
        match r {
            Err(e) => tracing::warn!(error = %e, what, "watch error (retrying)"),
            Ok(ev) => {
                if matches!(ev, watcher::Event::InitDone) {
                    tracing::debug!(what, "watch cache synced");
                }
                on_event(&ev);
            }
        }
        future::ready(())
    }));
}

/// Requeue delay after an error: quick for conflicts (someone else wrote first; re-observe), slow
/// for everything else.
pub fn backoff_for(error: &Error) -> Action {
    if error.is_conflict() || error.is_not_found() {
        Action::requeue(Duration::from_millis(200))
    } else {
        Action::requeue(Duration::from_secs(5))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_of_deleted_locks_is_dropped() {
        let map = Mutex::new(HashMap::from([("live".to_string(), 1u32), ("gone".to_string(), 2)]));
        retain_live(&map, &["live".to_string()].into_iter().collect());
        assert_eq!(map.into_inner().unwrap(), HashMap::from([("live".to_string(), 1)]));
    }
}
