//! Prometheus metrics (`/metrics`, text exposition format) with the `leasehold_` prefix.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Label set with one `reason` label (stable PascalCase values).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Why (release reason, reclaim reason, or error reason).
    pub reason: String,
}

/// One lock's state as the last reconcile saw it, for the per-lock series.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LockState {
    /// Someone holds the lock.
    pub held: bool,
    /// When the current grant was written (Unix time, seconds); `None` when free.
    pub held_since: Option<f64>,
    /// Waiters in the queue.
    pub waiters: i64,
    /// Creation time of the longest-waiting waiter (Unix time, seconds); `None` when none waits.
    pub oldest_waiter_since: Option<f64>,
    /// The highest fencing token the lock has issued.
    pub highest_token: i64,
}

/// Registers what every replica exports, leader or standby: `leasehold_build_info{version}` (1)
/// and `leasehold_leader` (1 on the replica that serves locks, 0 on a standby waiting for the
/// leader-election Lease).
fn register_process(r: &mut Registry, leader: bool) {
    let build = Family::<Vec<(String, String)>, Gauge>::default();
    build.get_or_create(&vec![("version".to_string(), env!("CARGO_PKG_VERSION").to_string())]).set(1);
    r.register("build_info", "The operator's version (always 1)", build);
    let leading = Gauge::<i64>::default();
    leading.set(i64::from(leader));
    r.register("leader", "1 on the replica that serves locks, 0 on a standby", leading);
}

/// The registry a standby serves at `/metrics` while it waits to lead: build info and
/// `leasehold_leader 0`.
pub fn standby_registry() -> Registry {
    let mut registry = Registry::default();
    register_process(registry.sub_registry_with_prefix("leasehold"), false);
    registry
}

/// All metrics the operator exports.
pub struct Metrics {
    /// Grants written to a Lease (`leasehold_grants_total`): by the operator, or by a releasing
    /// claim holder that handed the lock to the next-holder hint (counted when the operator
    /// finishes that grant).
    pub grants: Counter,
    /// Releases, by reason (`leasehold_releases_total{reason}`).
    pub releases: Family<ReasonLabels, Counter>,
    /// Holders taken back by a timeout, by reason: `StartTimeout`, `HolderNodeLost`
    /// (`leasehold_reclaims_total{reason}`).
    pub reclaims: Family<ReasonLabels, Counter>,
    /// Waiters that gave up, by reason: `LockBusy`, `LockWaitTimeout`
    /// (`leasehold_rejections_total{reason}`).
    pub rejections: Family<ReasonLabels, Counter>,
    /// HTTP 409 answers to our Lease writes (`leasehold_conflicts_total`); a claim or pod patch
    /// answered 409 is a failed reconcile (`leasehold_reconcile_errors_total{reason="Conflict"}`)
    /// or, for a claim expiry or a waiter rejection, looked at again by the next reconcile.
    pub conflicts: Counter,
    /// Failed reconciles, by reason (`leasehold_reconcile_errors_total{reason}`).
    pub reconcile_errors: Family<ReasonLabels, Counter>,
    /// Seconds from the reconcile that observed a release to the successful Lease write of the
    /// next grant (`leasehold_handover_seconds`).
    pub handover: Histogram,
    /// Seconds one lock reconcile took, errors included, from the gate on
    /// (`leasehold_reconcile_duration_seconds`).
    pub reconcile_duration: Histogram,
    /// Seconds a due lock reconcile waited for a permit of `--max-concurrent-reconciles`
    /// (`leasehold_reconcile_queue_seconds`; `controller::gate`): high while the operator is
    /// behind, whatever `reconcile_duration` says.
    pub reconcile_queue: Histogram,
    /// The per-lock series and the two sums over them, encoded at each scrape from one map
    /// ([`PerLockSeries`]).
    per_lock: Arc<PerLockSeries>,
}

/// The per-lock series, one [`LockState`] per lock keyed by `namespace/name`, encoded at each
/// scrape by prometheus-client's [`Collector`] (prometheus-client 0.26, `collector.rs`) instead
/// of five `Family` maps of gauges. Per lock it keeps one key and one `LockState` where the
/// families kept up to five label sets of two `String`s each, five gauges, and a second map for
/// the totals; with 10,000 locks the families and that map were 4.9 MiB of heap at the peak
/// (`benches/results/2026-12-02-a82d5ac-held-heap-profile.md`). Every reconcile summed that
/// second map for the two totals; a scrape now sums once.
///
/// Exported, for each lock the operator has reconciled and not seen deleted:
/// - `leasehold_lock_held{namespace,lock}`: 1 while the lock is held, else 0;
/// - `leasehold_lock_held_since_seconds{namespace,lock}`: Unix time (seconds) of the current
///   grant; no series while free (held for `time() - ` it);
/// - `leasehold_lock_waiters{namespace,lock}`: waiters in the lock's queue;
/// - `leasehold_lock_oldest_waiter_since_seconds{namespace,lock}`: Unix time (seconds) the
///   longest-waiting waiter was created; no series while none waits;
/// - `leasehold_lock_highest_token{namespace,lock}`: the highest fencing token issued;
///
/// and over all locks `leasehold_locks_held` (locks held) and `leasehold_waiters` (waiters).
#[derive(Debug, Default)]
pub struct PerLockSeries {
    locks: Mutex<HashMap<String, LockState>>,
}

impl PerLockSeries {
    fn locks(&self) -> std::sync::MutexGuard<'_, HashMap<String, LockState>> {
        self.locks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One series' value: the integer gauges stay integers in the text (a fencing token above 2^53
/// would not survive an `f64`).
enum Value {
    Int(i64),
    Float(f64),
}

impl Collector for PerLockSeries {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let locks = self.locks();
        let held = locks.values().filter(|s| s.held).count() as i64;
        let waiters: i64 = locks.values().map(|s| s.waiters).sum();
        encoder
            .encode_descriptor("locks_held", "Locks currently held", None, MetricType::Gauge)?
            .encode_gauge(&held)?;
        encoder
            .encode_descriptor("waiters", "Pods waiting for a lock, over all locks", None, MetricType::Gauge)?
            .encode_gauge(&waiters)?;
        type Series = (&'static str, &'static str, fn(&LockState) -> Option<Value>);
        let series: [Series; 5] = [
            ("lock_held", "1 while the lock is held", |s| Some(Value::Int(i64::from(s.held)))),
            ("lock_held_since_seconds", "Unix time of the current grant (absent while free)", |s| {
                s.held_since.map(Value::Float)
            }),
            ("lock_waiters", "Waiters in the lock's queue", |s| Some(Value::Int(s.waiters))),
            (
                "lock_oldest_waiter_since_seconds",
                "Unix time the longest-waiting waiter was created (absent while none waits)",
                |s| s.oldest_waiter_since.map(Value::Float),
            ),
            ("lock_highest_token", "The highest fencing token the lock has issued", |s| {
                Some(Value::Int(s.highest_token))
            }),
        ];
        for (name, help, value) in series {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (key, state) in locks.iter() {
                let Some(v) = value(state) else { continue };
                let (namespace, lock) = key.split_once('/').unwrap_or(("", key));
                let labels = [("namespace", namespace), ("lock", lock)];
                let mut metric = family.encode_family(&labels)?;
                match v {
                    Value::Int(v) => metric.encode_gauge(&v)?,
                    Value::Float(v) => metric.encode_gauge(&v)?,
                }
            }
        }
        Ok(())
    }
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Metrics {
            grants: Counter::default(),
            releases: Family::default(),
            reclaims: Family::default(),
            rejections: Family::default(),
            conflicts: Counter::default(),
            reconcile_errors: Family::default(),
            handover: Histogram::new([0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]),
            reconcile_duration: Histogram::new([
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            reconcile_queue: Histogram::new([0.001, 0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0]),
            per_lock: Arc::default(),
        };

        // Known reasons start at 0 (Prometheus practice): a family with no series yet is not
        // exported at all, and an alert on it could not tell "none yet" from "not exported".
        for (family, reasons) in [
            (&m.rejections, &["LockBusy", "LockWaitTimeout"][..]),
            (&m.reclaims, &["StartTimeout", "HolderNodeLost"][..]),
            (
                &m.reconcile_errors,
                &[
                    "Conflict",
                    "Forbidden",
                    "ApiError",
                    "ApiTimeout",
                    "LeaseNotOwned",
                    "TokenExhausted",
                    "MalformedObject",
                ][..],
            ),
        ] {
            for reason in reasons {
                let _ = family.get_or_create(&ReasonLabels { reason: reason.to_string() });
            }
        }
        let r = registry.sub_registry_with_prefix("leasehold");
        r.register(
            "grants",
            "Grants written to a Lease (by the operator, or by a releasing holder's handover)",
            m.grants.clone(),
        );
        r.register("releases", "Holders released, by reason", m.releases.clone());
        r.register("reclaims", "Holders taken back by a timeout, by reason", m.reclaims.clone());
        r.register("rejections", "Waiters that gave up, by reason", m.rejections.clone());
        r.register(
            "conflicts",
            "HTTP 409 answers to the operator's Lease writes (a grant, release or repair that lost a race)",
            m.conflicts.clone(),
        );
        r.register("reconcile_errors", "Failed reconciles, by reason", m.reconcile_errors.clone());
        r.register(
            "handover_seconds",
            "Seconds from observing a release to writing the next grant",
            m.handover.clone(),
        );
        r.register("reconcile_duration_seconds", "Seconds one lock reconcile took", m.reconcile_duration.clone());
        r.register(
            "reconcile_queue_seconds",
            "Seconds a due lock reconcile waited for a permit of --max-concurrent-reconciles",
            m.reconcile_queue.clone(),
        );
        register_process(r, true);
        r.register_collector(Box::new(m.per_lock.clone()));
        m
    }

    /// Sets the per-lock series of `namespace`/`lock` from `state` (the totals follow).
    pub fn set_lock(&self, namespace: &str, lock: &str, state: &LockState) {
        self.per_lock.locks().insert(format!("{namespace}/{lock}"), state.clone());
    }

    /// Drops the series of every lock whose `namespace/name` is not in `live` (deleted locks).
    pub fn forget_locks_except(&self, live: &std::collections::HashSet<String>) {
        self.per_lock.locks().retain(|k, _| live.contains(k));
    }

    /// Counts one reason in a family.
    pub fn inc(family: &Family<ReasonLabels, Counter>, reason: &str) {
        family.get_or_create(&ReasonLabels { reason: reason.to_string() }).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every metric the code records is exported under the name its docstring gives.
    #[test]
    fn every_recorded_metric_is_exported() {
        let mut registry = Registry::default();
        let m = Metrics::new(&mut registry);
        m.grants.inc();
        m.conflicts.inc();
        for family in [&m.releases, &m.reclaims, &m.rejections, &m.reconcile_errors] {
            Metrics::inc(family, "Test");
        }
        let state = LockState {
            held: true,
            held_since: Some(1.7e9),
            waiters: 2,
            oldest_waiter_since: Some(1.7e9 + 5.0),
            highest_token: 1002,
        };
        m.set_lock("ns", "l", &state);
        m.handover.observe(0.01);
        m.reconcile_duration.observe(0.02);
        m.reconcile_queue.observe(0.5);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for name in [
            "leasehold_grants_total 1",
            "leasehold_releases_total{reason=\"Test\"} 1",
            "leasehold_reclaims_total{reason=\"Test\"} 1",
            "leasehold_rejections_total{reason=\"Test\"} 1",
            "leasehold_conflicts_total 1",
            "leasehold_reconcile_errors_total{reason=\"Test\"} 1",
            "leasehold_locks_held 1",
            "leasehold_waiters 2",
            "leasehold_handover_seconds_count 1",
            "leasehold_reconcile_duration_seconds_count 1",
            "leasehold_reconcile_queue_seconds_count 1",
            "leasehold_build_info{version=",
            "leasehold_leader 1",
            "leasehold_lock_held{namespace=\"ns\",lock=\"l\"} 1",
            "leasehold_lock_held_since_seconds{namespace=\"ns\",lock=\"l\"} 1700000000",
            "leasehold_lock_waiters{namespace=\"ns\",lock=\"l\"} 2",
            "leasehold_lock_oldest_waiter_since_seconds{namespace=\"ns\",lock=\"l\"} 1700000005",
            "leasehold_lock_highest_token{namespace=\"ns\",lock=\"l\"} 1002",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
        let mut standby = String::new();
        prometheus_client::encoding::text::encode(&mut standby, &standby_registry()).unwrap();
        assert!(standby.contains("leasehold_leader 0") && standby.contains("leasehold_build_info{"), "{standby}");
        // Freed, nobody waiting: the timestamps go; deleted: every series of the lock goes.
        // A token above 2^53 is exported exactly (an f64 gauge would round it to ...992).
        m.set_lock("ns", "l", &LockState { highest_token: (1 << 53) + 1, ..LockState::default() });
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(!text.contains("leasehold_lock_held_since_seconds{"), "{text}");
        assert!(text.contains("leasehold_lock_held{namespace=\"ns\",lock=\"l\"} 0"), "{text}");
        assert!(text.contains("leasehold_lock_highest_token{namespace=\"ns\",lock=\"l\"} 9007199254740993"), "{text}");
        assert!(text.contains("leasehold_locks_held 0") && text.contains("leasehold_waiters 0"), "{text}");
        m.forget_locks_except(&std::collections::HashSet::from(["ns/other".to_string()]));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(!text.contains("lock=\"l\""), "{text}");
    }
}
