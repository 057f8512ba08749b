//! What a waiter wants when the lock is busy, from its pod annotations:
//!
//! - `leasehold.dev/on-busy: wait` (default): queue in FIFO order;
//! - `leasehold.dev/on-busy: skip`: fail fast when the lock cannot be granted at once
//!   ("do not queue a second nightly report");
//! - `leasehold.dev/max-wait: 10m`: wait at most this long (a duration such as `90s`, `10m`,
//!   `1h30m`), measured on the operator's monotonic clock from when it first saw the pod waiting.
//!
//! A waiter that gives up is marked `Failed` with reason `LockBusy` or `LockWaitTimeout`, which
//! frees its place in the queue.

use std::time::Duration;

/// Annotation: `wait` (default) or `skip`.
pub const ON_BUSY_ANNOTATION: &str = "leasehold.dev/on-busy";
/// Annotation: the longest a pod waits for the lock, e.g. `10m`.
pub const MAX_WAIT_ANNOTATION: &str = "leasehold.dev/max-wait";

/// A waiter's policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BusyPolicy {
    /// Queue; give up after `max_wait` if set.
    #[default]
    Wait,
    /// Give up at once when the lock cannot be granted.
    Skip,
}

/// A policy annotation that could not be read. The pod keeps the default (wait, no limit); the
/// error becomes a Warning Event on the pod.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    /// `leasehold.dev/on-busy` is neither `wait` nor `skip`.
    #[error("annotation leasehold.dev/on-busy must be \"wait\" or \"skip\", got {0:?}")]
    OnBusy(String),
    /// `leasehold.dev/max-wait` is not a positive duration.
    #[error("annotation leasehold.dev/max-wait must be a positive duration such as \"90s\" or \"10m\", got {0:?}")]
    MaxWait(String),
}

/// Parses `leasehold.dev/on-busy`; `None` means the default (wait).
///
/// # Errors
/// [`PolicyError::OnBusy`] for anything but `wait`/`skip` (case-insensitive).
pub fn parse_on_busy(value: Option<&str>) -> Result<BusyPolicy, PolicyError> {
    match value.map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(BusyPolicy::Wait),
        Some(v) if v == "wait" => Ok(BusyPolicy::Wait),
        Some(v) if v == "skip" => Ok(BusyPolicy::Skip),
        Some(_) => Err(PolicyError::OnBusy(value.unwrap_or_default().to_string())),
    }
}

/// Parses `leasehold.dev/max-wait`; `None` means no limit.
///
/// # Errors
/// [`PolicyError::MaxWait`] when the value is not a positive duration.
pub fn parse_max_wait(value: Option<&str>) -> Result<Option<Duration>, PolicyError> {
    let Some(v) = value else { return Ok(None) };
    match humantime::parse_duration(v.trim()) {
        Ok(d) if !d.is_zero() => Ok(Some(d)),
        _ => Err(PolicyError::MaxWait(v.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_busy_values() {
        assert_eq!(parse_on_busy(None), Ok(BusyPolicy::Wait));
        assert_eq!(parse_on_busy(Some("Skip")), Ok(BusyPolicy::Skip));
        assert_eq!(parse_on_busy(Some(" wait ")), Ok(BusyPolicy::Wait));
        assert!(parse_on_busy(Some("later")).is_err());
    }

    #[test]
    fn max_wait_values() {
        assert_eq!(parse_max_wait(None), Ok(None));
        assert_eq!(parse_max_wait(Some("10m")), Ok(Some(Duration::from_secs(600))));
        assert_eq!(parse_max_wait(Some("1h30m")), Ok(Some(Duration::from_secs(5400))));
        assert_eq!(parse_max_wait(Some("90s")), Ok(Some(Duration::from_secs(90))));
        assert!(parse_max_wait(Some("0s")).is_err());
        assert!(parse_max_wait(Some("soon")).is_err());
        assert!(parse_max_wait(Some("-5m")).is_err());
    }
}
