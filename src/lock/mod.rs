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
/// Lease annotation on a single-holder lock's Lease: the lock's reserved `status.tokenCeiling`
/// as the operator knew it when it wrote the Lease (decimal). A waiting standing claim that
/// arrives by the Lease (issue 12, [`grant::lease_arrival`]) takes a token only up to it. Only
/// the operator writes it (the chart's Lease admission policy); absent on semaphore slots.
pub const TOKEN_CEILING_ANNOTATION: &str = "leasehold.dev/token-ceiling";
/// Lease annotation: the next-holder hint's `holderIdentity`, the waiting claim a claim holder
/// hands the lock to when it releases ([`grant::Next`]).
pub const NEXT_HOLDER_ANNOTATION: &str = "leasehold.dev/next-holder";
/// Lease annotation: the next-holder hint's claim UID.
pub const NEXT_HOLDER_UID_ANNOTATION: &str = "leasehold.dev/next-holder-uid";
/// Lease annotation: the next-holder hint's fencing token (decimal).
pub const NEXT_TOKEN_ANNOTATION: &str = "leasehold.dev/next-token";
/// Lease annotation beside an operator's next-holder hint: the lock's `leaseDurationSeconds`
/// when the operator wrote the hint (decimal seconds). The holder's release that hands the lock
/// to the hint writes it into `spec.leaseDurationSeconds`, so a changed value reaches a grant
/// passed on from claim to claim, not only the operator's own grants; any value there is safe
/// (the new holder renews against the shorter of it and what it read, the operator expires it
/// by the longer of it and the lock's: [`grant::lease_duration_to_write`]). A waiter's own hint
/// carries none (the Lease's value is then kept).
pub const NEXT_LEASE_DURATION_ANNOTATION: &str = "leasehold.dev/next-lease-duration";
/// Lease annotation: the requests of standing claims whose holder released them (issue 12,
/// `docs/two-writes-per-grant.md`): comma-separated request UIDs ([`grant::request_uid`],
/// `<claim UID>/<request>`). The holder's release writes its own entry in the same
/// compare-and-swap that frees the Lease or hands it to the next holder, so every version of the
/// Lease that no longer names a request also says that it was served; the operator never grants
/// a request listed here ([`machine::step`]). Missing: none.
pub const RELEASED_ANNOTATION: &str = "leasehold.dev/released";
/// Label on every Lease the operator manages: the lock's name.
pub const LEASE_LABEL: &str = "leasehold.dev/lock";
/// Annotation on a pod that asks for several locks of its namespace at once (issue 14,
/// `docs/multi-lock.md`): `leasehold.dev/locks: db-writer,bucket-writer` (comma-separated lock
/// names; blanks and repeats ignored). The pod is ungated only once it holds all of them.
pub const LOCKS_ANNOTATION: &str = "leasehold.dev/locks";
/// Suffix of the per-lock annotations of a multi-lock pod: `<lock>.locks.leasehold.dev/...`.
const PER_LOCK_DOMAIN: &str = ".locks.leasehold.dev/";
/// Longest lock name a multi-lock pod can name: an annotation key's prefix is a DNS subdomain of
/// at most 253 characters (Kubernetes, "Syntax and character set" of annotations), and
/// `<lock>.locks.leasehold.dev` spends 20 of them (`.locks.leasehold.dev`).
pub const MAX_MULTI_LOCK_NAME: usize = 253 - ".locks.leasehold.dev".len();

/// The annotation in which the operator records lock `lock`'s fencing token on a multi-lock pod:
/// `<lock>.locks.leasehold.dev/fencing-token` (decimal). One per lock, so the downward API can
/// project each into its own file.
pub fn lock_token_annotation(lock: &str) -> String {
    format!("{lock}{PER_LOCK_DOMAIN}fencing-token")
}

/// The annotation in which the operator records, on a multi-lock pod, the highest token of lock
/// `lock` whose tentative grant it took back: `<lock>.locks.leasehold.dev/withdrawn` (decimal;
/// [`grant::MultiLock::withdrawn`]).
pub fn lock_withdrawn_annotation(lock: &str) -> String {
    format!("{lock}{PER_LOCK_DOMAIN}withdrawn")
}

/// The lock a per-lock token annotation key (`<lock>.locks.leasehold.dev/fencing-token`) is for;
/// `None` for any other key.
pub fn lock_of_token_annotation(key: &str) -> Option<&str> {
    key.strip_suffix("fencing-token")?.strip_suffix(PER_LOCK_DOMAIN).filter(|l| !l.is_empty())
}

/// Whether `key` is one of the per-lock annotations the operator writes on multi-lock pods.
pub fn is_per_lock_annotation(key: &str) -> bool {
    key.contains(PER_LOCK_DOMAIN) && (key.ends_with("/fencing-token") || key.ends_with("/withdrawn"))
}

/// The lock set of a pod from its annotations: the names in `leasehold.dev/locks` and every lock
/// a per-lock token annotation is recorded for (a pod granted a lock stays that lock's candidate
/// even if someone edits the list), plus, when there is any of those, the lock
/// `leasehold.dev/lock` names (a pod that names a lock never runs without it, whatever else it
/// asks for), sorted, without repeats. Empty for a pod that asks for one lock
/// (`leasehold.dev/lock` alone) or none.
pub fn lock_set<'a>(annotations: impl IntoIterator<Item = (&'a String, &'a String)>) -> Vec<String> {
    let mut set = std::collections::BTreeSet::new();
    let mut single = None;
    for (k, v) in annotations {
        if k == LOCKS_ANNOTATION {
            set.extend(v.split(',').map(str::trim).filter(|l| !l.is_empty()).map(String::from));
        } else if let Some(l) = lock_of_token_annotation(k) {
            set.insert(l.to_string());
        } else if k == LOCK_ANNOTATION {
            single = Some(v.trim()).filter(|l| !l.is_empty());
        }
    }
    if let Some(l) = single.filter(|_| !set.is_empty()) {
        set.insert(l.to_string());
    }
    set.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_lock_set_is_the_listed_locks_and_every_recorded_token_sorted_without_repeats() {
        let ann = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let a = ann(&[(LOCKS_ANNOTATION, " db , bucket,,db ")]);
        assert_eq!(lock_set(&a), ["bucket", "db"]);
        // A token recorded for a lock the list no longer names keeps that lock in the set.
        let a = ann(&[(LOCKS_ANNOTATION, "db"), ("old.locks.leasehold.dev/fencing-token", "4")]);
        assert_eq!(lock_set(&a), ["db", "old"]);
        // The lock leasehold.dev/lock names joins a set (a pod edited from a set to one lock keeps
        // the lock it was reserved and waits for the one it names).
        let a = ann(&[(LOCK_ANNOTATION, " ec "), ("ea.locks.leasehold.dev/fencing-token", "1")]);
        assert_eq!(lock_set(&a), ["ea", "ec"]);
        // A single-lock pod has no set; withdrawn records alone add nothing.
        let a = ann(&[(LOCK_ANNOTATION, "db"), ("x.locks.leasehold.dev/withdrawn", "3")]);
        assert!(lock_set(&a).is_empty());
    }

    #[test]
    fn per_lock_annotation_keys_round_trip() {
        assert_eq!(lock_token_annotation("db.v2"), "db.v2.locks.leasehold.dev/fencing-token");
        assert_eq!(lock_of_token_annotation(&lock_token_annotation("db.v2")), Some("db.v2"));
        assert_eq!(lock_of_token_annotation(TOKEN_ANNOTATION), None);
        assert_eq!(lock_of_token_annotation(".locks.leasehold.dev/fencing-token"), None);
        assert!(is_per_lock_annotation(&lock_withdrawn_annotation("db")));
        assert!(!is_per_lock_annotation(TOKEN_ANNOTATION));
        assert_eq!("a".repeat(MAX_MULTI_LOCK_NAME).len() + ".locks.leasehold.dev".len(), 253);
    }
}
