//! `coordination.k8s.io/v1` Lease I/O for one lock: read the grant state out of a Lease, create
//! it, and compare-and-swap it to a new holder.
//!
//! The Lease is the source of truth for who holds a lock. Its fields:
//! - `spec.holderIdentity`: the holder pod's name (absent when free);
//! - `spec.acquireTime` / `spec.renewTime`: when the grant was written (operator's wall clock,
//!   informational: expiry is never decided by comparing these with a clock);
//! - `spec.leaseDurationSeconds`: the lock's `spec.leaseDurationSeconds` when the grant was
//!   written, kept while that grant holds ([`crate::lock::grant::lease_duration_to_write`]);
//! - annotations `leasehold.dev/holder-uid`, `leasehold.dev/holder-kind`,
//!   `leasehold.dev/fencing-token`, `leasehold.dev/token-floor` (see [`crate::lock::fencing`]),
//!   and, while a claim holds and a claim waits, the next-holder hint
//!   `leasehold.dev/next-holder`, `leasehold.dev/next-holder-uid`, `leasehold.dev/next-token`
//!   ([`crate::lock::grant::Next`]);
//! - label `leasehold.dev/lock: <lock name>` and a controller ownerReference to the lock, so
//!   deleting the lock deletes the Lease.
//!
//! Every update is a `PUT` carrying the resourceVersion of the Lease the decision was made from
//! (optimistic concurrency, Kubernetes API conventions "Concurrency Control and Consistency"),
//! so a stale decision gets HTTP 409 instead of overwriting a newer grant.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::{Resource, ResourceExt};

use crate::crd::DistributedLock;
use crate::error::{Error, Result, call};
use crate::lock::fencing::parse_token;
use crate::lock::grant::{Grant, Holder, HolderKind, LeaseView, Next};
use crate::lock::{
    HOLDER_KIND_ANNOTATION, HOLDER_UID_ANNOTATION, LEASE_LABEL, NEXT_HOLDER_ANNOTATION, NEXT_HOLDER_UID_ANNOTATION,
    NEXT_LEASE_DURATION_ANNOTATION, NEXT_TOKEN_ANNOTATION, RELEASED_ANNOTATION, TOKEN_ANNOTATION,
    TOKEN_CEILING_ANNOTATION, TOKEN_FLOOR_ANNOTATION,
};

/// Reads the grant state from a Lease. Never fails: unreadable annotations make the view
/// untrusted ([`LeaseView::trusted`] = false), which the decision handles by re-flooring.
pub fn view(lease: &Lease) -> LeaseView {
    let ann = lease.annotations();
    let spec = lease.spec.as_ref();
    let holder = spec.and_then(|s| s.holder_identity.clone()).filter(|h| !h.is_empty()).map(|name| Holder {
        name,
        uid: ann.get(HOLDER_UID_ANNOTATION).cloned(),
        kind: match ann.get(HOLDER_KIND_ANNOTATION).map(String::as_str) {
            Some("Claim") => HolderKind::Claim,
            _ => HolderKind::Pod,
        },
    });
    let token = ann.get(TOKEN_ANNOTATION).map(|v| parse_token(v));
    let floor = ann.get(TOKEN_FLOOR_ANNOTATION).map(|v| v.trim().parse::<i64>().ok().filter(|f| *f >= 0));
    let trusted = matches!(floor, Some(Some(_)))
        && !matches!(token, Some(None))
        && (holder.is_none() || matches!(token, Some(Some(_))));
    LeaseView {
        holder,
        token: token.flatten().unwrap_or(0),
        floor: floor.flatten().unwrap_or(0),
        trusted,
        next: next(lease),
        released: released(lease),
        ceiling: ann.get(TOKEN_CEILING_ANNOTATION).and_then(|v| v.trim().parse::<i64>().ok()).filter(|c| *c > 0),
        lease_duration: spec
            .and_then(|s| s.lease_duration_seconds)
            .filter(|d| *d > 0)
            .map(|d| std::time::Duration::from_secs(d as u64)),
        next_lease_duration: next_lease_duration(lease),
    }
}

/// Sets (or, with `None`, removes) `leasehold.dev/token-ceiling` on `lease` in memory
/// ([`LeaseView::ceiling`]).
pub fn put_ceiling(lease: &mut Lease, ceiling: Option<i64>) {
    let ann = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
    match ceiling.filter(|c| *c > 0) {
        Some(c) => ann.insert(TOKEN_CEILING_ANNOTATION.into(), c.to_string()),
        None => ann.remove(TOKEN_CEILING_ANNOTATION),
    };
}

/// The Lease's `leasehold.dev/released` list ([`LeaseView::released`]): the comma-separated
/// request UIDs, blanks left out; empty when absent.
pub fn released(lease: &Lease) -> Vec<String> {
    lease
        .annotations()
        .get(RELEASED_ANNOTATION)
        .map(|v| v.split(',').map(str::trim).filter(|e| !e.is_empty()).map(String::from).collect())
        .unwrap_or_default()
}

/// Sets `leasehold.dev/released` on `lease` in memory to `released` (removed when empty).
pub fn put_released(lease: &mut Lease, released: &[String]) {
    let ann = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
    if released.is_empty() {
        ann.remove(RELEASED_ANNOTATION);
    } else {
        ann.insert(RELEASED_ANNOTATION.into(), released.join(","));
    }
}

/// The Lease's next-holder hint ([`Next`]): `None` unless all three annotations are there and
/// the token reads as a positive decimal.
pub fn next(lease: &Lease) -> Option<Next> {
    let ann = lease.annotations();
    let token = ann.get(NEXT_TOKEN_ANNOTATION).and_then(|v| parse_token(v)).filter(|t| *t > 0)?;
    Some(Next {
        identity: ann.get(NEXT_HOLDER_ANNOTATION).filter(|v| !v.is_empty())?.clone(),
        uid: ann.get(NEXT_HOLDER_UID_ANNOTATION).filter(|v| !v.is_empty())?.clone(),
        token,
    })
}

/// Sets (or, with `None`, removes) the next-holder hint annotations on `lease` in memory, and
/// removes the hint's lease duration ([`put_next_lease_duration`] sets it after this).
pub fn put_next(lease: &mut Lease, next: Option<&Next>) {
    let ann = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
    ann.remove(NEXT_LEASE_DURATION_ANNOTATION);
    match next {
        Some(n) => {
            ann.insert(NEXT_HOLDER_ANNOTATION.into(), n.identity.clone());
            ann.insert(NEXT_HOLDER_UID_ANNOTATION.into(), n.uid.clone());
            ann.insert(NEXT_TOKEN_ANNOTATION.into(), n.token.to_string());
        }
        None => {
            for k in [NEXT_HOLDER_ANNOTATION, NEXT_HOLDER_UID_ANNOTATION, NEXT_TOKEN_ANNOTATION] {
                ann.remove(k);
            }
        }
    }
}

/// The Lease's `spec.renewTime` as text: it changes with every renewal, which restarts a claim
/// holder's expiry clock ([`crate::lock::machine::Snapshot::renew_marker`]).
pub fn renew_marker(lease: &Lease) -> Option<String> {
    lease.spec.as_ref()?.renew_time.as_ref().map(|t| t.0.to_string())
}

/// Whether `lease` is controlled by `lock` (ownerReference with the lock's UID).
pub fn is_owned_by(lease: &Lease, lock: &DistributedLock) -> bool {
    let uid = lock.meta().uid.as_deref();
    lease.owner_references().iter().any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
}

/// The name of the Lease of semaphore slot `slot` of the lock named `lock`: slot 0 is the lock's
/// own Lease, named like the lock (every single-holder lock has only slot 0); slot k >= 1 is
/// `<lock>-slot-<k>`. Every slot's Lease has the same label (`leasehold.dev/lock: <lock>`) and
/// controller ownerReference as slot 0's ([`create`]), so it is cached, watched and deleted with
/// the lock. Lease names are not reserved: a lock named `<lock>-slot-<k>` has its own Lease under
/// that name, and whichever lock finds the other's Lease there reports `LeaseNotOwned` (fails
/// closed; nothing is granted in that slot).
pub fn slot_lease_name(lock: &str, slot: u32) -> String {
    match slot {
        0 => lock.to_string(),
        k => format!("{lock}-slot-{k}"),
    }
}

/// The slot (>= 1) whose Lease is named `lease` for the lock named `lock` (inverse of
/// [`slot_lease_name`] for k >= 1); `None` for the lock's own Lease and any other name.
pub fn slot_of_lease_name(lock: &str, lease: &str) -> Option<u32> {
    let text = lease.strip_prefix(lock)?.strip_prefix("-slot-")?;
    // Canonical decimal only ("01" is not slot 1's name).
    text.parse::<u32>().ok().filter(|k| *k >= 1 && k.to_string() == text)
}

/// Creates the Lease of slot `slot` of the lock ([`slot_lease_name`]; slot 0: same name as the
/// lock), in the lock's namespace.
///
/// # Errors
/// [`Error::Kube`] with 409 if it already exists (someone else created it: re-observe).
pub async fn create(
    api: &Api<Lease>,
    lock: &DistributedLock,
    slot: u32,
    holder: Option<&Grant>,
    floor: i64,
    ceiling: Option<i64>,
) -> Result<Lease> {
    let lease = created(lock, slot, holder, floor, ceiling, Timestamp::now())?;
    call("create Lease", api.create(&PostParams::default(), &lease)).await
}

/// The Lease [`create`] posts: slot `slot`'s Lease of `lock`, granted to `holder` (or free),
/// with floor `floor` and token ceiling `ceiling` ([`put_ceiling`]).
///
/// # Errors
/// [`Error::MissingField`] when the lock has no UID (no ownerReference can name it).
pub fn created(
    lock: &DistributedLock,
    slot: u32,
    holder: Option<&Grant>,
    floor: i64,
    ceiling: Option<i64>,
    now: Timestamp,
) -> Result<Lease> {
    let owner = lock.controller_owner_ref(&()).ok_or(Error::MissingField("metadata.uid"))?;
    let mut lease = Lease {
        metadata: ObjectMeta {
            name: Some(slot_lease_name(&lock.name_any(), slot)),
            namespace: lock.namespace(),
            labels: Some(BTreeMap::from([(LEASE_LABEL.to_string(), lock.name_any())])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec::default()),
    };
    apply_grant(&mut lease, lock, holder, Some(floor), None, now);
    put_ceiling(&mut lease, ceiling);
    Ok(lease)
}

/// Sets `leasehold.dev/next-lease-duration` ([`NEXT_LEASE_DURATION_ANNOTATION`]) on `lease`
/// in memory: `lock`'s `spec.leaseDurationSeconds` when it carries a next-holder hint, none
/// otherwise.
pub fn put_next_lease_duration(lease: &mut Lease, lock: &DistributedLock) {
    let hinted = next(lease).is_some();
    let ann = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
    if hinted {
        ann.insert(NEXT_LEASE_DURATION_ANNOTATION.into(), lock.spec.lease_duration_seconds.max(1).to_string());
    } else {
        ann.remove(NEXT_LEASE_DURATION_ANNOTATION);
    }
}

/// The hint's lease duration ([`NEXT_LEASE_DURATION_ANNOTATION`]); `None` when absent or not a
/// positive number of seconds.
pub fn next_lease_duration(lease: &Lease) -> Option<std::time::Duration> {
    let secs = lease.annotations().get(NEXT_LEASE_DURATION_ANNOTATION)?.trim().parse::<u64>().ok()?;
    (secs > 0).then(|| std::time::Duration::from_secs(secs))
}

/// Compare-and-swaps `observed` (with its resourceVersion) to `holder` (or to free), with the
/// next-holder hint `next` (`None` removes it) and the token ceiling `ceiling` ([`put_ceiling`]:
/// the lock's reserved `status.tokenCeiling` the decision was made with, `None` for a semaphore's
/// slot Lease). `floor` re-floors a hand-edited Lease. When freeing, the last token is kept.
///
/// # Errors
/// [`Error::Kube`] with 409 when the Lease changed since it was observed; 404 when it is gone.
pub async fn update(
    api: &Api<Lease>,
    lock: &DistributedLock,
    observed: &Lease,
    holder: Option<&Grant>,
    floor: Option<i64>,
    next: Option<&Next>,
    ceiling: Option<i64>,
) -> Result<Lease> {
    let lease = updated(lock, observed, holder, floor, next, ceiling, Timestamp::now());
    call("update Lease", api.replace(&lease.name_any(), &PostParams::default(), &lease)).await
}

/// The Lease [`update`] puts.
pub fn updated(
    lock: &DistributedLock,
    observed: &Lease,
    holder: Option<&Grant>,
    floor: Option<i64>,
    next: Option<&Next>,
    ceiling: Option<i64>,
    now: Timestamp,
) -> Lease {
    let mut lease = observed.clone();
    let observed = view(observed);
    apply_grant(&mut lease, lock, holder, floor, Some(&observed), now);
    put_next(&mut lease, next);
    put_next_lease_duration(&mut lease, lock);
    put_ceiling(&mut lease, ceiling);
    lease
}

/// Compare-and-swaps only the next-holder hint of `observed` to `next` (`None` removes it) and
/// the token ceiling to `ceiling` (as [`update`]); holder, token and times stay as they are
/// ([`crate::lock::grant::Decision::SetNext`]).
///
/// # Errors
/// [`Error::Kube`] with 409 when the Lease changed since it was observed; 404 when it is gone.
pub async fn set_next(
    api: &Api<Lease>,
    lock: &DistributedLock,
    observed: &Lease,
    next: Option<&Next>,
    ceiling: Option<i64>,
) -> Result<Lease> {
    let lease = with_next(lock, observed, next, ceiling);
    call("update Lease", api.replace(&lease.name_any(), &PostParams::default(), &lease)).await
}

/// The Lease [`set_next`] puts.
pub fn with_next(lock: &DistributedLock, observed: &Lease, next: Option<&Next>, ceiling: Option<i64>) -> Lease {
    let mut lease = observed.clone();
    put_next(&mut lease, next);
    put_next_lease_duration(&mut lease, lock);
    put_ceiling(&mut lease, ceiling);
    lease
}

fn apply_grant(
    lease: &mut Lease,
    lock: &DistributedLock,
    holder: Option<&Grant>,
    floor: Option<i64>,
    observed: Option<&LeaseView>,
    now: Timestamp,
) {
    let ann = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
    if let Some(f) = floor {
        ann.insert(TOKEN_FLOOR_ANNOTATION.into(), f.to_string());
    }
    match holder {
        Some(g) => {
            ann.insert(HOLDER_UID_ANNOTATION.into(), g.uid.clone());
            ann.insert(HOLDER_KIND_ANNOTATION.into(), g.kind.as_str().into());
            ann.insert(TOKEN_ANNOTATION.into(), g.token.to_string());
        }
        None => {
            ann.remove(HOLDER_UID_ANNOTATION);
            ann.remove(HOLDER_KIND_ANNOTATION);
            if let Some(t) = observed.map(|o| o.token).filter(|t| *t > 0) {
                ann.insert(TOKEN_ANNOTATION.into(), t.to_string());
            }
        }
    }
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    let lock_duration = std::time::Duration::from_secs(lock.spec.lease_duration_seconds.max(1) as u64);
    let duration = crate::lock::grant::lease_duration_to_write(observed, holder, lock_duration);
    spec.lease_duration_seconds = Some(i32::try_from(duration.as_secs()).unwrap_or(i32::MAX));
    let changed = spec.holder_identity.as_deref() != holder.map(|g| g.identity.as_str());
    spec.holder_identity = holder.map(|g| g.identity.clone());
    spec.acquire_time = holder.map(|_| MicroTime(now));
    spec.renew_time = holder.map(|_| MicroTime(now));
    if changed && holder.is_some() {
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn lease_with(ann: &[(&str, &str)], holder: Option<&str>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                annotations: Some(ann.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec { holder_identity: holder.map(Into::into), ..LeaseSpec::default() }),
        }
    }

    #[test]
    fn view_reads_holder_token_and_floor() {
        let l = lease_with(
            &[(TOKEN_ANNOTATION, "7"), (TOKEN_FLOOR_ANNOTATION, "0"), (HOLDER_UID_ANNOTATION, "u1")],
            Some("pod-a"),
        );
        let v = view(&l);
        assert_eq!(v.holder, Some(Holder { name: "pod-a".into(), uid: Some("u1".into()), kind: HolderKind::Pod }));
        assert_eq!((v.token, v.floor, v.trusted), (7, 0, true));
    }

    #[test]
    fn the_next_holder_hint_round_trips_and_a_partial_one_reads_as_none() {
        let mut l = lease_with(&[(TOKEN_ANNOTATION, "7"), (TOKEN_FLOOR_ANNOTATION, "0")], Some("a"));
        assert_eq!(view(&l).next, None);
        let n = Next { identity: "b".into(), uid: "u-b".into(), token: 8 };
        put_next(&mut l, Some(&n));
        assert_eq!(view(&l).next, Some(n));
        put_next(&mut l, None);
        assert_eq!(view(&l).next, None);
        assert!(l.annotations().keys().all(|k| !k.contains("next")));
        // Any part missing or unreadable: no hint (the holder then just releases).
        for (k, v) in [(NEXT_TOKEN_ANNOTATION, "x"), (NEXT_TOKEN_ANNOTATION, "0"), (NEXT_HOLDER_UID_ANNOTATION, "")] {
            let mut l = lease_with(
                &[(NEXT_HOLDER_ANNOTATION, "b"), (NEXT_HOLDER_UID_ANNOTATION, "u"), (NEXT_TOKEN_ANNOTATION, "8")],
                None,
            );
            l.metadata.annotations.as_mut().unwrap().insert(k.into(), v.into());
            assert_eq!(next(&l), None, "{k}={v}");
        }
    }

    /// Every Lease the operator writes carries the ceiling it was given (a single-holder
    /// lock's reserved `status.tokenCeiling`) or none (a semaphore's slot), which replaces
    /// whatever the observed Lease had.
    #[test]
    fn every_operator_lease_write_carries_the_ceiling_it_was_given() {
        let mut lock = DistributedLock::new("l", Default::default());
        lock.metadata.uid = Some("lock-uid".into());
        lock.metadata.namespace = Some("ns".into());
        let now = Timestamp::UNIX_EPOCH;
        let g = Grant {
            name: "c".into(),
            identity: "me".into(),
            uid: "c1/1".into(),
            kind: HolderKind::Claim,
            resource_version: "3".into(),
            token: 5,
            slot: 0,
        };
        let new = created(&lock, 0, Some(&g), 0, Some(20), now).unwrap();
        assert_eq!(view(&new).ceiling, Some(20));
        assert_eq!(new.annotations().get(TOKEN_CEILING_ANNOTATION).map(String::as_str), Some("20"));
        assert_eq!(view(&created(&lock, 1, None, 0, None, now).unwrap()).ceiling, None);
        // Update (grant, release, repair) and the hint alone: the given ceiling replaces the old.
        let freed = updated(&lock, &new, None, None, None, Some(30), now);
        assert_eq!((view(&freed).ceiling, view(&freed).holder, view(&freed).token), (Some(30), None, 5));
        let n = Next { identity: "b".into(), uid: "c2/4".into(), token: 6 };
        let hinted = with_next(&lock, &new, Some(&n), Some(40));
        assert_eq!((view(&hinted).ceiling, view(&hinted).next), (Some(40), Some(n)));
        // A semaphore's slot (or no reservation yet): removed.
        assert_eq!(view(&updated(&lock, &hinted, None, None, None, None, now)).ceiling, None);
        assert_eq!(view(&with_next(&lock, &hinted, None, Some(0))).ceiling, None);
    }

    /// `spec.leaseDurationSeconds` is the lock's value when a grant is written and stays while
    /// the same grant (holder UID and token) holds: a value lowered on the lock reaches the next
    /// grant, never the running one, whose holder renews against the value it was granted with.
    #[test]
    fn a_grant_keeps_the_lease_duration_it_was_written_with() {
        let mut lock = DistributedLock::new("l", Default::default());
        lock.metadata.uid = Some("lock-uid".into());
        lock.metadata.namespace = Some("ns".into());
        lock.spec.lease_duration_seconds = 60;
        let now = Timestamp::UNIX_EPOCH;
        let grant = |uid: &str, token| Grant {
            name: "c".into(),
            identity: "me".into(),
            uid: uid.into(),
            kind: HolderKind::Claim,
            resource_version: "3".into(),
            token,
            slot: 0,
        };
        let secs = |l: &Lease| l.spec.as_ref().and_then(|s| s.lease_duration_seconds);
        let held = created(&lock, 0, Some(&grant("c1/1", 5)), 0, Some(20), now).unwrap();
        assert_eq!((secs(&held), view(&held).lease_duration), (Some(60), Some(Duration::from_secs(60))));
        lock.spec.lease_duration_seconds = 3;
        // The same grant written again (a hint set, a repair): 60 stays, whoever the Lease shows
        // for its token (here a revoked holder's tombstone, with no holder UID).
        let again = updated(&lock, &held, Some(&grant("c1/1", 5)), None, None, Some(20), now);
        assert_eq!(secs(&again), Some(60));
        let mut tombstone = again.clone();
        tombstone.spec.as_mut().unwrap().holder_identity = Some("leasehold.dev/revoked-by-alice".into());
        tombstone.metadata.annotations.as_mut().unwrap().remove(HOLDER_UID_ANNOTATION);
        assert_eq!(secs(&updated(&lock, &tombstone, Some(&grant("", 5)), None, None, Some(20), now)), Some(60));
        // The next grant, or a free Lease: the lock's 3.
        assert_eq!(secs(&updated(&lock, &again, Some(&grant("c2/1", 6)), None, None, Some(20), now)), Some(3));
        assert_eq!(secs(&updated(&lock, &again, Some(&grant("c1/1", 6)), None, None, Some(20), now)), Some(3));
        assert_eq!(secs(&updated(&lock, &again, None, None, None, Some(20), now)), Some(3));
        // Raised: the running grant keeps its own value too (the operator expires it by the
        // longer of the two: `grant::expiry_of`).
        lock.spec.lease_duration_seconds = 90;
        assert_eq!(secs(&updated(&lock, &again, Some(&grant("c1/1", 5)), None, None, Some(20), now)), Some(60));
    }

    #[test]
    fn slot_lease_names_round_trip() {
        assert_eq!(slot_lease_name("db", 0), "db");
        assert_eq!(slot_lease_name("db", 2), "db-slot-2");
        assert_eq!(slot_of_lease_name("db", "db-slot-2"), Some(2));
        for other in ["db", "db-slot-0", "db-slot-01", "db-slot-x", "db-slot-", "dbx-slot-1", "db-slot-1-slot-2"] {
            assert_eq!(slot_of_lease_name("db", other), None, "{other}");
        }
    }

    #[test]
    fn hand_edited_leases_are_untrusted() {
        // No floor at all (created by someone else).
        assert!(!view(&lease_with(&[], None)).trusted);
        // Garbage token.
        assert!(!view(&lease_with(&[(TOKEN_ANNOTATION, "x"), (TOKEN_FLOOR_ANNOTATION, "0")], None)).trusted);
        // A holder without a token.
        assert!(!view(&lease_with(&[(TOKEN_FLOOR_ANNOTATION, "0")], Some("p"))).trusted);
        // Fresh Lease before its first grant is fine.
        assert!(view(&lease_with(&[(TOKEN_FLOOR_ANNOTATION, "10")], None)).trusted);
    }
}
