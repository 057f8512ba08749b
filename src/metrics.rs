//! Prometheus metrics (`/metrics`, text exposition format) with the `leasehold_` prefix.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
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

/// All metrics the operator exports.
pub struct Metrics {
    /// Grants written to a Lease (`leasehold_grants_total`).
    pub grants: Counter,
    /// Releases, by reason (`leasehold_releases_total{reason}`).
    pub releases: Family<ReasonLabels, Counter>,
    /// Holders taken back by a timeout, by reason: `StartTimeout`, `HolderNodeLost`
    /// (`leasehold_reclaims_total{reason}`).
    pub reclaims: Family<ReasonLabels, Counter>,
    /// Waiters that gave up, by reason: `LockBusy`, `LockWaitTimeout`
    /// (`leasehold_rejections_total{reason}`).
    pub rejections: Family<ReasonLabels, Counter>,
    /// HTTP 409 answers to our writes (`leasehold_conflicts_total`).
    pub conflicts: Counter,
    /// Failed reconciles, by reason (`leasehold_reconcile_errors_total{reason}`).
    pub reconcile_errors: Family<ReasonLabels, Counter>,
    /// Locks currently held (`leasehold_locks_held`).
    pub held: Gauge,
    /// Pods currently waiting, over all locks (`leasehold_waiters`).
    pub waiters: Gauge,
    /// Seconds from the reconcile that observed a release to the successful Lease write of the
    /// next grant (`leasehold_handover_seconds`).
    pub handover: Histogram,
    per_lock: Mutex<HashMap<String, (bool, i64)>>,
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
            held: Gauge::default(),
            waiters: Gauge::default(),
            handover: Histogram::new([0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]),
            per_lock: Mutex::default(),
        };
        let r = registry.sub_registry_with_prefix("leasehold");
        r.register("grants", "Grants written to a Lease", m.grants.clone());
        r.register("releases", "Holders released, by reason", m.releases.clone());
        r.register("reclaims", "Holders taken back by a timeout, by reason", m.reclaims.clone());
        r.register("rejections", "Waiters that gave up, by reason", m.rejections.clone());
        r.register("conflicts", "HTTP 409 answers to the operator's writes", m.conflicts.clone());
        r.register("reconcile_errors", "Failed reconciles, by reason", m.reconcile_errors.clone());
        r.register("locks_held", "Locks currently held", m.held.clone());
        r.register("waiters", "Pods waiting for a lock, over all locks", m.waiters.clone());
        r.register(
            "handover_seconds",
            "Seconds from observing a release to writing the next grant",
            m.handover.clone(),
        );
        m
    }

    /// Records the holder/waiter state of one lock (`key` = namespace/name) and updates the
    /// aggregate gauges. `None` forgets the lock (deleted).
    pub fn set_lock_state(&self, key: &str, state: Option<(bool, i64)>) {
        let mut map = self.per_lock.lock().unwrap_or_else(|e| e.into_inner());
        match state {
            Some(s) => map.insert(key.to_string(), s),
            None => map.remove(key),
        };
        self.held.set(map.values().filter(|(h, _)| *h).count() as i64);
        self.waiters.set(map.values().map(|(_, w)| *w).sum());
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
        m.set_lock_state("ns/l", Some((true, 2)));
        m.handover.observe(0.01);
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
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
    }
}
