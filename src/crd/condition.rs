//! Condition types and reasons for `DistributedLock.status.conditions`, and a merge helper that
//! follows the Kubernetes API conventions (`lastTransitionTime` only moves when `status` changes;
//! every condition carries the `observedGeneration` it was computed from).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Condition type: the operator serves this lock and its Lease is consistent.
pub const READY: &str = "Ready";
/// Condition type: somebody holds the lock.
pub const HELD: &str = "Held";

/// Reasons (PascalCase, stable: used in conditions, Events and metric labels).
pub mod reason {
    /// The lock was reconciled and its Lease is in sync.
    pub const RECONCILED: &str = "Reconciled";
    /// The Lease with the lock's name exists but is not controlled by this lock.
    pub const LEASE_NOT_OWNED: &str = "LeaseNotOwned";
    /// The next fencing token would not fit in an int64 (a Lease token set by hand near the top).
    pub const TOKEN_EXHAUSTED: &str = "TokenExhausted";
    /// The lock's namespace is being deleted: nothing is granted in it any more.
    pub const NAMESPACE_TERMINATING: &str = "NamespaceTerminating";
    /// The lock's name is longer than 63 characters (the CRD refuses such names; one created
    /// before that rule cannot be served): its Lease's `leasehold.dev/lock` label could not hold
    /// it.
    pub const INVALID_NAME: &str = "InvalidName";
    /// A write failed; the message says which.
    pub const RECONCILE_ERROR: &str = "ReconcileError";
    /// The API server denied a write with 403 Forbidden (RBAC, or an admission policy); the
    /// message names the write and the denial.
    pub const WRITE_FORBIDDEN: &str = "Forbidden";
    /// A pod holds the lock.
    pub const GRANTED: &str = "Granted";
    /// Nobody holds the lock.
    pub const FREE: &str = "Free";
}

/// Sets condition `type_` in `conditions` to the given status/reason/message.
///
/// Keeps `lastTransitionTime` when the status is unchanged, stamps `observedGeneration`.
/// Returns `true` if anything changed (so callers can skip no-op status writes).
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> bool {
    let status = if status { "True" } else { "False" }.to_string();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            let changed =
                c.status != status || c.reason != reason || c.message != message || c.observed_generation != generation;
            if c.status != status {
                c.last_transition_time = Time(now);
            }
            c.status = status;
            c.reason = reason.to_string();
            c.message = message.to_string();
            c.observed_generation = generation;
            changed
        }
        None => {
            conditions.push(Condition {
                type_: type_.to_string(),
                status,
                reason: reason.to_string(),
                message: message.to_string(),
                observed_generation: generation,
                last_transition_time: Time(now),
            });
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let t0 = Timestamp::from_second(1_000).unwrap();
        let t1 = Timestamp::from_second(2_000).unwrap();
        let mut cs = vec![];
        assert!(set(&mut cs, HELD, true, reason::GRANTED, "a", Some(1), t0));
        assert!(set(&mut cs, HELD, true, reason::GRANTED, "b", Some(1), t1));
        assert_eq!(cs[0].last_transition_time, Time(t0));
        assert!(!set(&mut cs, HELD, true, reason::GRANTED, "b", Some(1), t1));
        assert!(set(&mut cs, HELD, false, reason::FREE, "", Some(1), t1));
        assert_eq!(cs[0].last_transition_time, Time(t1));
        assert_eq!(cs.len(), 1);
    }
}
