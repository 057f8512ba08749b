//! The pure lock domain: who holds next, which token, what to write. No I/O and no
//! `kube::Client` in here; the controller observes, calls [`machine::step`], and applies.

pub mod fencing;
pub mod grant;
pub mod machine;
pub mod policy;
pub mod queue;

/// Annotation on a pod that names the lock it asks for: `leasehold.dev/lock: <lock-name>`.
pub const LOCK_ANNOTATION: &str = "leasehold.dev/lock";
/// Scheduling gate (`spec.schedulingGates[].name`) that keeps a waiting pod from starting.
pub const SCHEDULING_GATE: &str = "leasehold.dev/lock";
/// Annotation the operator sets on a granted pod (and on the Lease): the decimal fencing token.
pub const TOKEN_ANNOTATION: &str = "leasehold.dev/fencing-token";
/// Annotation the operator sets on a granted pod: the lock the grant (and its token) is for.
pub const GRANTED_LOCK_ANNOTATION: &str = "leasehold.dev/granted-lock";
/// Annotation the operator sets on a granted pod, beside the token: the decimal number of the
/// semaphore slot whose Lease records the grant (`"0"` for a single-holder lock; see
/// [`grant::Candidate::slot`]). Missing or unreadable reads as slot 0.
pub const SLOT_ANNOTATION: &str = "leasehold.dev/slot";
/// Lease annotation: UID of the holder pod, so a new pod with the same name is not the holder.
pub const HOLDER_UID_ANNOTATION: &str = "leasehold.dev/holder-uid";
/// Lease annotation: the holder's kind, `Pod` or `Claim` (missing: `Pod`, as Leases written
/// before it existed). A claim holder whose claim object is gone still holds until its lease
/// expires: its process may still run.
pub const HOLDER_KIND_ANNOTATION: &str = "leasehold.dev/holder-kind";
/// Lease annotation: every token issued before the Lease was (re)created is <= this number.
pub const TOKEN_FLOOR_ANNOTATION: &str = "leasehold.dev/token-floor";
/// Label on every Lease the operator manages: the lock's name.
pub const LEASE_LABEL: &str = "leasehold.dev/lock";
