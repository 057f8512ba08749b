//! The `DistributedLock` custom resource (`leasehold.dev/v1alpha1`, short name `dlock`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Default `spec.leaseDurationSeconds`: 15 s, client-go's leader-election default.
pub const DEFAULT_LEASE_DURATION_SECONDS: i32 = 15;
/// Default `spec.startTimeoutSeconds`: 300 s (5 min) for a granted pod to reach phase Running.
pub const DEFAULT_START_TIMEOUT_SECONDS: i32 = 300;
/// Default `spec.nodeLossTimeoutSeconds`: 300 s, the same bound as the NoExecute toleration that
/// Kubernetes adds for `node.kubernetes.io/unreachable` (DefaultTolerationSeconds admission).
pub const DEFAULT_NODE_LOSS_TIMEOUT_SECONDS: i32 = 300;

/// Desired behaviour of a lock. Every field has a default, so `spec: {}` is a valid lock.
///
/// All durations are whole seconds. Limits are enforced by the API server through the CRD's
/// OpenAPI schema and CEL rules, so a bad value is rejected at `kubectl apply` time.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "leasehold.dev",
    version = "v1alpha1",
    kind = "DistributedLock",
    plural = "distributedlocks",
    shortname = "dlock",
    namespaced,
    status = "DistributedLockStatus",
    printcolumn = r#"{"name":"Holder","type":"string","jsonPath":".status.holder.name","description":"Pod (or identity) that holds the lock"}"#,
    printcolumn = r#"{"name":"Token","type":"integer","jsonPath":".status.holder.token","description":"Fencing token of the current grant"}"#,
    printcolumn = r#"{"name":"Holders","type":"string","jsonPath":".status.occupancy","description":"A semaphore's holders out of spec.maxHolders, e.g. 2/2"}"#,
    printcolumn = r#"{"name":"Waiting","type":"integer","jsonPath":".status.waiting","description":"Number of waiters in the queue"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new("size(self.metadata.name) <= 63").message("a DistributedLock's name is at most 63 characters: it is the value of the leasehold.dev/lock label on the lock's Lease, and a label value is at most 63 characters")
)]
// No `deny_unknown_fields` (here and on the claim): fields this version does not know are
// ignored when reading, not refused, so an object written under a newer CRD (an upgrade, then a
// rollback of the operator) does not stop an older operator from serving it. Misspelt fields are
// still caught at admission: the API server prunes unknown fields (structural schema) and
// kubectl's default server-side field validation (`--validate=strict`) rejects them.
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(oldSelf.maxHolders) || has(self.maxHolders)").message("maxHolders cannot be removed once set (set it to 1 instead): a semaphore issues fencing tokens differently from a plain lock"))]
#[x_kube(validation = Rule::new("self.nodeLossTimeoutSeconds >= self.leaseDurationSeconds").message("nodeLossTimeoutSeconds must be at least leaseDurationSeconds (it is 300 when not set, so a lease longer than 300 s needs it set too): a holder's node cannot be declared lost faster than its lease could expire"))]
pub struct DistributedLockSpec {
    /// Lease duration in seconds (1..=3600), written to the Lease's `spec.leaseDurationSeconds`.
    /// Holders that renew the Lease themselves must renew within this period.
    #[serde(default = "default_lease_duration")]
    #[schemars(range(min = 1, max = 3600))]
    pub lease_duration_seconds: i32,

    /// Seconds (1..=86400) a granted pod may stay in phase Pending (unscheduled, pulling images,
    /// creating containers) before the operator deletes it and grants the next waiter.
    #[serde(default = "default_start_timeout")]
    #[schemars(range(min = 1, max = 86400))]
    pub start_timeout_seconds: i32,

    /// Seconds (1..=86400) the holder's node may be NotReady, Unknown or missing before the
    /// operator takes the lock back and grants the next waiter a higher fencing token. The old
    /// holder may still be running (a partitioned node): only the fencing token protects data.
    #[serde(default = "default_node_loss_timeout")]
    #[schemars(range(min = 1, max = 86400))]
    pub node_loss_timeout_seconds: i32,

    /// Makes the lock a semaphore: up to this many holders (1..=100) at once, granted in the
    /// same FIFO order, each with a fencing token above every token whose grant finished before
    /// (issue 14). Absent: a plain lock, one holder. Lowering it revokes nobody: the lock grants
    /// again once fewer than the new number hold. Once set it cannot be removed (set 1 instead):
    /// the two kinds issue tokens differently.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub max_holders: Option<i32>,
}

impl Default for DistributedLockSpec {
    fn default() -> Self {
        Self {
            lease_duration_seconds: DEFAULT_LEASE_DURATION_SECONDS,
            start_timeout_seconds: DEFAULT_START_TIMEOUT_SECONDS,
            node_loss_timeout_seconds: DEFAULT_NODE_LOSS_TIMEOUT_SECONDS,
            max_holders: None,
        }
    }
}

fn default_lease_duration() -> i32 {
    DEFAULT_LEASE_DURATION_SECONDS
}
fn default_start_timeout() -> i32 {
    DEFAULT_START_TIMEOUT_SECONDS
}
fn default_node_loss_timeout() -> i32 {
    DEFAULT_NODE_LOSS_TIMEOUT_SECONDS
}

/// Observed state of a lock: a readable view of its Lease, written only by the operator.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DistributedLockStatus {
    /// The current holder, absent when the lock is free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<HolderStatus>,
    /// Highest fencing token issued for this lock so far (0 before the first grant).
    #[serde(default)]
    pub highest_token: i64,
    /// Fencing tokens up to and including this number are reserved for this lock. The operator
    /// moves it forward with a compare-and-swap before it issues a token above it, so a token is
    /// never issued twice even when the Lease is deleted. Never decreases. Not for humans.
    #[serde(default)]
    pub token_ceiling: i64,
    /// A semaphore's slot reservations: `slotTokens[k]` is the last fencing token reserved for a
    /// grant in slot k (0: none). Written only by the same compare-and-swap that raises
    /// `tokenCeiling` (resourceVersion precondition), so the operator that reserves next knows
    /// which slot may still receive an earlier grant. Empty for a single-holder lock. Not for
    /// humans.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slot_tokens: Vec<i64>,
    /// A semaphore's holders (`spec.maxHolders` set), one per slot in use, lowest slot first;
    /// `holder` is the first of them. Empty for a single-holder lock.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<SlotHolderStatus>,
    /// A semaphore's holders out of its limit, as text for `kubectl get`: `"<holders>/<maxHolders>"`,
    /// e.g. `"2/2"` (after `maxHolders` is lowered it can read `"2/1"` until holders finish).
    /// Absent for a single-holder lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occupancy: Option<String>,
    /// Number of pods waiting for the lock.
    #[serde(default)]
    pub waiting: i32,
    /// The first waiters (at most 10), in grant order: oldest first (creationTimestamp, then name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiters: Vec<String>,
    /// Name of the `coordination.k8s.io/v1` Lease backing this lock (same namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_name: Option<String>,
    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions: `Ready` (the operator serves the lock and its Lease is consistent) and `Held`
    /// (someone holds the lock), following the Kubernetes API conventions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The holder of a lock.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HolderStatus {
    /// Pod name (the Lease's `holderIdentity`).
    pub name: String,
    /// Pod or claim UID, so a new pod that reuses the name is not mistaken for the holder; for a
    /// standing claim's request, its request UID `<claim UID>/<request>`
    /// ([`crate::lock::grant::request_uid`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Fencing token of this grant.
    pub token: i64,
    /// When the grant was written (the Lease's `acquireTime`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
}

/// One holder of a semaphore (`status.holders`).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SlotHolderStatus {
    /// Pod name or claim identity (the slot Lease's `holderIdentity`).
    pub name: String,
    /// Pod or claim UID; for a standing claim's request, its request UID `<claim UID>/<request>`
    /// ([`crate::lock::grant::request_uid`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Fencing token of this grant.
    pub token: i64,
    /// The slot (0 ..= 99) whose Lease records the grant: slot 0 is the Lease named like the lock,
    /// slot k >= 1 the Lease `<lock>-slot-<k>`.
    // `format: int32`: the API server does not know schemars' `uint32` and warns on apply.
    #[schemars(extend("format" = "int32"))]
    pub slot: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field from a newer version is ignored, not an error, and the known fields are kept
    /// (rollback after a CRD upgrade).
    #[test]
    fn fields_of_a_newer_version_are_ignored_when_reading() {
        let lock: DistributedLock = serde_json::from_value(serde_json::json!({
            "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLock",
            "metadata": {"name": "l", "namespace": "ns"},
            "spec": {"leaseDurationSeconds": 7, "maxHolders": 3},
            "status": {"highestToken": 5, "holders": []}
        }))
        .expect("an object with unknown fields must be readable");
        assert_eq!(lock.spec.lease_duration_seconds, 7);
        assert_eq!(lock.status.unwrap().highest_token, 5);
    }
}
