//! The bound on concurrent lock reconciles, served in arrival order.
//!
//! kube-runtime's own bound (`controller::Config::concurrency`, kube-runtime 5.0) does not
//! serve waiting objects in order: once every slot is busy, its scheduler moves each due object
//! into a `HashSet` of pending ones, and a freed slot takes the first one *in hash order* that is
//! not running (`scheduler.rs`, `poll_pop_queue_message`). A few busy locks whose triggers come
//! back faster than a reconcile lasts stay in that set for good, and a lock that hashes after
//! them is never reconciled: in the throughput bench (1,000 locks, 2 clients each, the operator
//! at its default 16), 939 locks' waiters were not granted in a whole 60 s window while 61
//! locks handed over 2.4 times a second (issue 12, README "Performance").
//!
//! The operator therefore lets kube-runtime's controller start up to [`IN_FLIGHT`] reconciles
//! (it still never reconciles one object twice at once) and bounds the work itself with a
//! [`tokio::sync::Semaphore`], which gives out permits in the order they were asked for: a lock
//! triggered again after its reconcile queues behind every lock already waiting. Only past
//! [`IN_FLIGHT`] due locks does kube-runtime's hash order apply again.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::Semaphore;

/// How many lock reconciles kube-runtime's controller starts at once (`Config::concurrency`),
/// nearly all of them waiting at the [`ReconcileGate`]. Not unbounded: an operator restarted
/// with 10,000 locks, all started at once, settled 15 MiB higher (memory kept from that peak;
/// README "Performance", 2026-12-05 21:04). Past this many due locks, kube-runtime's own order
/// (hash order) applies again: more than 1,024 locks that re-trigger faster than a round of the
/// gate can starve others as before (not measured: the bench has 1,000).
pub const IN_FLIGHT: u16 = 1024;

/// kube-runtime's bound for a gate of `permits` (`--max-concurrent-reconciles`): [`IN_FLIGHT`],
/// or `permits` if that is higher; 0 (no bound) stays 0.
pub fn in_flight(permits: u16) -> u16 {
    if permits == 0 { 0 } else { IN_FLIGHT.max(permits) }
}

/// At most `n` reconciles at once, the others waiting in FIFO order; `n = 0` is no bound.
#[derive(Clone, Debug)]
pub struct ReconcileGate(Option<Arc<Semaphore>>);

impl ReconcileGate {
    /// A gate for at most `n` concurrent reconciles (`--max-concurrent-reconciles`); 0: no bound.
    pub fn new(n: u16) -> Self {
        Self((n > 0).then(|| Arc::new(Semaphore::new(n.into()))))
    }

    /// Runs `work()` once a permit is free, in the order the calls arrived. The future that
    /// `work` makes is boxed only after the wait, so a waiting reconcile holds a few words, not
    /// a whole reconcile's state (a burst of 10,000 new locks waits here).
    pub async fn run<F, Fut>(&self, work: F) -> Fut::Output
    where
        F: FnOnce() -> Fut,
        Fut: Future,
    {
        // `acquire_owned` fails only on a closed semaphore; this one is never closed.
        let _permit = match &self.0 {
            Some(s) => s.clone().acquire_owned().await.ok(),
            None => None,
        };
        Box::pin(work()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use futures::channel::mpsc;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::controller::{self, Action, Controller};
    use kube::runtime::reflector::{self, ObjectRef};
    use kube::runtime::watcher;
    use std::collections::HashSet;
    use std::sync::Mutex;
    use std::time::Duration;

    const HOT: usize = 48;
    const COLD: usize = 200;
    const SLOTS: u16 = 8;

    fn object(i: usize) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(format!("o-{i}"));
        c.metadata.namespace = Some("ns".into());
        c
    }

    /// What a run did.
    #[derive(Debug, Default)]
    struct Served {
        /// Cold objects reconciled at least once.
        cold: usize,
        /// Reconciles of hot objects.
        hot_runs: usize,
        /// Most reconciles doing their work at once.
        peak: usize,
    }

    /// Runs a controller over `HOT` objects that trigger themselves again after each reconcile
    /// (a lock handing over back to back) and `COLD` objects that need one reconcile each (a
    /// lock whose first waiter queued), for 3 s, bounded either by kube-runtime's
    /// `concurrency(SLOTS)` or by a [`ReconcileGate`] of `SLOTS` (kube-runtime at
    /// [`in_flight`], as the operator runs it).
    async fn run(gate: Option<ReconcileGate>) -> Served {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let objects: Vec<ConfigMap> = (0..HOT + COLD).map(object).collect();
        writer.apply_watcher_event(&watcher::Event::Init);
        for o in &objects {
            writer.apply_watcher_event(&watcher::Event::InitApply(o.clone()));
        }
        // The store is ready: the controller starts.
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let (tx, rx) = mpsc::unbounded::<ObjectRef<ConfigMap>>();
        let config = match gate {
            Some(_) => controller::Config::default().concurrency(in_flight(SLOTS)),
            None => controller::Config::default().concurrency(SLOTS),
        };
        struct Ctx {
            tx: mpsc::UnboundedSender<ObjectRef<ConfigMap>>,
            served: Mutex<(HashSet<String>, usize, usize, usize)>,
            gate: Option<ReconcileGate>,
        }
        let ctx = Arc::new(Ctx { tx, served: Mutex::default(), gate });
        async fn reconcile(o: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, std::convert::Infallible> {
            let work = || async {
                let name = o.metadata.name.clone().unwrap_or_default();
                let i: usize = name.trim_start_matches("o-").parse().unwrap_or(0);
                {
                    let mut s = ctx.served.lock().unwrap();
                    s.2 += 1;
                    s.3 = s.3.max(s.2);
                }
                // An API round trip or two.
                tokio::time::sleep(Duration::from_millis(5)).await;
                let mut s = ctx.served.lock().unwrap();
                s.2 -= 1;
                if i < HOT {
                    s.1 += 1;
                    let _ = ctx.tx.unbounded_send(ObjectRef::new(&name).within("ns"));
                } else {
                    s.0.insert(name);
                }
                Ok(Action::await_change())
            };
            match &ctx.gate {
                Some(g) => g.run(work).await,
                None => work().await,
            }
        }
        let run = Controller::for_stream(futures::stream::iter(objects.into_iter().map(Ok)), store)
            .with_config(config)
            .reconcile_on(rx)
            .run(reconcile, |_, _: &std::convert::Infallible, _| Action::await_change(), ctx.clone())
            .for_each(|_| async {});
        let _ = tokio::time::timeout(Duration::from_secs(3), run).await;
        let s = ctx.served.lock().unwrap();
        Served { cold: s.0.len(), hot_runs: s.1, peak: s.3 }
    }

    #[test]
    fn kube_runtime_starts_at_least_the_gate_s_permits_and_zero_stays_unbounded() {
        assert_eq!(in_flight(16), IN_FLIGHT);
        assert_eq!(in_flight(4096), 4096);
        assert_eq!(in_flight(0), 0);
    }

    #[tokio::test]
    async fn the_gate_serves_every_waiting_object_while_others_stay_busy() {
        let served = run(Some(ReconcileGate::new(SLOTS))).await;
        eprintln!("the gate: {served:?}");
        assert_eq!(served.cold, COLD, "objects starved behind busy ones");
        assert_eq!(served.peak, SLOTS as usize, "the gate let more (or never as many) reconciles work at once");
        assert!(served.hot_runs >= 5 * HOT, "the busy objects did not keep the gate busy: {served:?}");
    }

    /// Why the gate exists: the configuration it replaces (kube-runtime's own bound, no gate)
    /// fails the first test's assertion, leaving most cold objects unreconciled while the hot
    /// ones keep triggering.
    #[tokio::test]
    async fn kube_runtime_concurrency_alone_starves_objects_behind_busy_ones() {
        let served = run(None).await;
        eprintln!("kube-runtime's bound: {served:?}");
        assert!(served.peak <= SLOTS as usize);
        assert!(
            served.cold < COLD * 3 / 4,
            "kube-runtime served {} of {COLD} cold objects: did its scheduler become FIFO?",
            served.cold
        );
    }
}
