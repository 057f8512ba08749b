//! Whether the operator can do its job: the health of its protocol API calls, behind `/readyz`.
//!
//! The rule: the operator is **unready** while its protocol calls (the Lease, pod, claim and
//! token-reservation writes of a reconcile, and the reads they depend on) have failed with
//! anything but a conflict or NotFound (which re-observing fixes) for at least
//! [`UNREADY_AFTER`] with no successful write since the first failure of that run. One write
//! that succeeds makes it ready again. So one lock that cannot be written (a Lease that an
//! admission policy protects) does not take a working operator out of its Service, but an
//! operator whose every write is denied (RBAC removed, a policy against its user, the API server
//! answering 5xx) says so. A failed lock also turns its own `Ready` condition `False`.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// How long protocol calls must keep failing, with no success, before `/readyz` turns 503.
pub const UNREADY_AFTER: Duration = Duration::from_secs(10);

/// Outcomes of the protocol calls, shared by the reconcilers and the admin server.
#[derive(Debug, Default)]
pub struct WriteHealth {
    run: Mutex<Option<FailingRun>>,
    /// `leasehold_protocol_writes_failing_seconds`.
    failing_seconds: Gauge<f64, AtomicU64>,
}

/// An unbroken run of failures.
#[derive(Debug, Clone)]
struct FailingRun {
    since: Instant,
    failures: u64,
    last_error: String,
}

impl WriteHealth {
    /// Registers `leasehold_protocol_writes_failing_seconds` in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.sub_registry_with_prefix("leasehold").register(
            "protocol_writes_failing_seconds",
            "Seconds since the first of an unbroken run of failed protocol writes (0 after a write succeeded)",
            self.failing_seconds.clone(),
        );
    }

    /// A protocol write succeeded: the failing run (if any) ends.
    pub fn succeeded(&self) {
        *self.run.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.failing_seconds.set(0.0);
    }

    /// A protocol call failed with `error` (not a conflict or NotFound), at `now`.
    pub fn failed(&self, error: &str, now: Instant) {
        let mut run = self.run.lock().unwrap_or_else(|e| e.into_inner());
        let r = run.get_or_insert_with(|| FailingRun { since: now, failures: 0, last_error: String::new() });
        r.failures += 1;
        r.last_error = error.to_string();
    }

    /// `Err(why)` while the operator is unready by the rule above, at `now`; refreshes the gauge.
    ///
    /// # Errors
    /// The message `/readyz` answers with: for how long and how many calls failed, and the last
    /// error.
    pub fn check(&self, now: Instant) -> Result<(), String> {
        let run = self.run.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(r) = run else {
            self.failing_seconds.set(0.0);
            return Ok(());
        };
        let failing_for = now.saturating_duration_since(r.since);
        self.failing_seconds.set(failing_for.as_secs_f64());
        if failing_for < UNREADY_AFTER {
            return Ok(());
        }
        Err(format!(
            "protocol writes failing: {} failed in the last {} s and none succeeded; last error: {}",
            r.failures,
            failing_for.as_secs(),
            r.last_error
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unready_only_after_failures_without_success_for_the_whole_window() {
        let h = WriteHealth::default();
        let t0 = Instant::now();
        assert!(h.check(t0).is_ok());
        h.failed("update Lease failed: forbidden", t0);
        assert!(h.check(t0 + UNREADY_AFTER - Duration::from_millis(1)).is_ok(), "not yet persistent");
        h.failed("update Lease failed: forbidden again", t0 + Duration::from_secs(3));
        let why = h.check(t0 + UNREADY_AFTER).unwrap_err();
        assert!(why.contains("2 failed") && why.contains("forbidden again"), "{why}");
        // One success ends the run; the next failure starts a new window.
        h.succeeded();
        assert!(h.check(t0 + UNREADY_AFTER).is_ok());
        h.failed("timeout", t0 + UNREADY_AFTER);
        assert!(h.check(t0 + UNREADY_AFTER + Duration::from_secs(9)).is_ok());
        assert!(h.check(t0 + UNREADY_AFTER * 2).is_err());
    }
}
