//! `leasehold status` and `leasehold why`: an operator's read-only view of locks and waiting pods
//! and claims.
//!
//! The decisions of what to show are pure functions of the objects ([`lock_report_slots`],
//! [`render_table`], [`explain_slots`], [`explain_claim`], [`explain_set`]); [`status`] and
//! [`why`] only fetch the objects and print. A semaphore (`spec.maxHolders`) is read slot by slot:
//! slot k's holder is whoever its Lease names ([`lease::slot_lease_name`], [`slot_reads`]). A pod
//! with a lock set (`leasehold.dev/locks`) is explained lock by lock ([`explain_set`],
//! [`SetLockState`]); whether its set is served is the operator's own rule
//! ([`crate::controller::lock_set_unservable_among`]). The queue is the operator's own: the same
//! candidate conversion ([`crate::controller::candidate_of_pod`],
//! [`crate::controller::candidate_of_claim`]) and the same order ([`grant::queue_of`]), without the
//! holder.
//!
//! Waiting times are measured from the waiter's `metadata.creationTimestamp` (a pod waits at its
//! gate from creation, a claim is created when it joins the queue). The operator's own clock for
//! `max-wait` starts when it first saw the waiter, so it can be shorter.

use std::io::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use crate::cli::{OutputFormat, StatusArgs, WhyArgs};
use crate::controller::{
    candidate_of_claim, candidate_of_pod, lock_set_not_served_note, lock_set_unservable_among, pod_concerns_lock,
};
use crate::crd::{ClaimPhase, DistributedLock, DistributedLockClaim, condition};
use crate::lease;
use crate::lock::fencing::parse_token;
use crate::lock::grant::{self, Candidate, HolderKind, LeaseView, Phase, RejectReason};
use crate::lock::policy::{self, BusyPolicy};
use crate::lock::{
    GRANTED_LOCK_ANNOTATION, LEASE_LABEL, LOCK_ANNOTATION, LOCKS_ANNOTATION, SCHEDULING_GATE, SLOT_ANNOTATION,
    TOKEN_ANNOTATION, lock_set, lock_token_annotation, lock_withdrawn_annotation,
};
use crate::lock_cli::error_text;

/// Exit status of `status` / `why` when the lock or pod does not exist, or the API fails.
pub const EXIT_ERROR: i32 = 1;

/// One lock as `leasehold status` shows it (also its `-o json` form).
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LockReport {
    /// Namespace of the lock.
    pub namespace: String,
    /// Name of the lock.
    pub name: String,
    /// The `Ready` condition.
    pub ready: ReadyReport,
    /// The holder as the lock's status records it (`status.holder`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<HolderReport>,
    /// The Lease backing the lock; `None` when it does not exist or cannot be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseReport>,
    /// The caller may not read the Lease (403); `holder` is then all there is.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub lease_forbidden: bool,
    /// `status.highestToken`.
    pub highest_token: i64,
    /// The waiters in grant order (the operator's queue, without the holder).
    pub waiters: Vec<WaiterReport>,
    /// A semaphore's `spec.maxHolders`; absent for a single-holder lock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_holders: Option<i32>,
    /// A semaphore's holders, one per slot whose Lease names a holder, lowest slot first (from
    /// the lock's `status.holders` when the Leases cannot be read). Empty, and left out of the
    /// JSON, for a single-holder lock: `holder` and `lease` describe it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<SlotHolderReport>,
}

/// One holder of a semaphore slot (`leasehold status`, semaphores only).
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SlotHolderReport {
    /// The slot (0-based): slot 0 is the lock's own Lease, slot k >= 1 the Lease `<lock>-slot-<k>`.
    pub slot: u32,
    /// Name of that slot's Lease ([`lease::slot_lease_name`]).
    pub lease_name: String,
    /// Pod name or claim identity (the Lease's `holderIdentity`).
    pub name: String,
    /// `Pod` or `Claim`; absent when the holder comes from the lock's status (Leases unreadable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Fencing token of the grant.
    pub token: i64,
    /// The Lease's `spec.acquireTime` (RFC 3339): when the slot was granted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Seconds since `since`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_seconds: Option<i64>,
    /// Seconds since the Lease's `spec.renewTime`, by this machine's clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renewed_seconds_ago: Option<i64>,
}

/// The `Ready` condition of a lock.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReadyReport {
    /// `True`, `False`, or `Unknown` (no condition yet: the operator has not reconciled the lock).
    pub status: String,
    /// The condition's reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The condition's message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The holder of a lock (`status.holder`).
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HolderReport {
    /// Pod name or claim identity.
    pub name: String,
    /// Fencing token of the grant.
    pub token: i64,
    /// When the grant was written (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Seconds since `since`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_seconds: Option<i64>,
    /// A tentative grant: the holder is a multi-lock pod that is still gated, waiting for the
    /// other locks of its set (`docs/multi-lock.md`); the lock serves nobody else meanwhile, and
    /// the grant may be taken back. The table shows `<name> (reserved)`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tentative: bool,
}

/// The Lease backing a lock, the source of truth for who holds it.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LeaseReport {
    /// `spec.holderIdentity`; `None` when the lock is free.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder_identity: Option<String>,
    /// `Pod` or `Claim` (`leasehold.dev/holder-kind`), when held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder_kind: Option<String>,
    /// The token annotation (the current or last grant's token).
    pub token: i64,
    /// `spec.renewTime` (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renew_time: Option<String>,
    /// Seconds since `renewTime`, by this machine's clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renewed_seconds_ago: Option<i64>,
}

/// One waiter in the queue.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WaiterReport {
    /// 1 = next to be granted.
    pub position: usize,
    /// `Pod` or `Claim`.
    pub kind: String,
    /// Object name.
    pub name: String,
    /// The identity it would hold under (the pod name, or the claim's `spec.identity`).
    pub identity: String,
    /// A standing claim's request that waits (`spec.request`, issue 12); absent for a pod or a
    /// one-shot claim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<i64>,
    /// Its `metadata.creationTimestamp` (a standing claim: its `spec.requestTime`), RFC 3339:
    /// what the wait is measured from.
    pub created: String,
    /// Seconds since `created`.
    pub waited_seconds: i64,
}

/// What could be read of a lock's Lease.
#[derive(Clone, Copy, Debug)]
pub enum LeaseRead<'a> {
    /// The Lease.
    Found(&'a Lease),
    /// It does not exist.
    Missing,
    /// The caller may not read it (403): the lock's `status.holder` stands in for it.
    Forbidden,
}

impl<'a> LeaseRead<'a> {
    /// From the answer of a GET.
    pub fn of(lease: Option<&'a Lease>) -> Self {
        lease.map_or(LeaseRead::Missing, LeaseRead::Found)
    }

    fn lease(self) -> Option<&'a Lease> {
        match self {
            LeaseRead::Found(l) => Some(l),
            _ => None,
        }
    }
}

/// The holder of a lock: the Lease's, or the lock status's when the Lease cannot be read.
#[derive(Clone, Debug, PartialEq)]
struct CurrentHolder {
    name: String,
    uid: Option<String>,
    kind: HolderKind,
    token: i64,
}

fn current_holder(lock: Option<&DistributedLock>, lease: LeaseRead<'_>) -> Option<CurrentHolder> {
    match lease {
        LeaseRead::Found(l) => {
            let view = lease::view(l);
            view.holder.map(|h| CurrentHolder { name: h.name, uid: h.uid, kind: h.kind, token: view.token })
        }
        LeaseRead::Missing => None,
        LeaseRead::Forbidden => lock.and_then(|l| l.status.as_ref()?.holder.as_ref()).map(|h| CurrentHolder {
            name: h.name.clone(),
            uid: h.uid.clone(),
            kind: HolderKind::Pod,
            token: h.token,
        }),
    }
}

/// What could be read of each slot's Lease of the lock named `lock` in namespace `ns`
/// (`result[k]` is slot k, [`lease::slot_lease_name`]), picked by name out of `leases` (Leases
/// of any namespace and lock; `None`: the caller may not read Leases, 403). A single-holder lock
/// (or a missing one) has slot 0 only; a semaphore every slot below the highest of its
/// `spec.maxHolders`, the slots of its `status.holders`, and the slot Leases found (after
/// `maxHolders` was lowered, holders can remain in slots above it).
pub fn slot_reads<'a>(
    ns: &str,
    lock: &str,
    lock_obj: Option<&DistributedLock>,
    leases: Option<&'a [Lease]>,
) -> Vec<LeaseRead<'a>> {
    let find = |k: u32| match leases {
        Some(ls) => LeaseRead::of(
            ls.iter().find(|l| l.namespace().as_deref() == Some(ns) && l.name_any() == lease::slot_lease_name(lock, k)),
        ),
        None => LeaseRead::Forbidden,
    };
    let Some(limit) = lock_obj.and_then(|l| l.spec.max_holders) else { return vec![find(0)] };
    let in_status =
        lock_obj.and_then(|l| l.status.as_ref()).and_then(|s| s.holders.iter().map(|h| h.slot + 1).max()).unwrap_or(0);
    let in_leases = leases
        .unwrap_or_default()
        .iter()
        .filter(|l| l.namespace().as_deref() == Some(ns))
        .filter_map(|l| lease::slot_of_lease_name(lock, &l.name_any()))
        .map(|k| k + 1)
        .max()
        .unwrap_or(0);
    let slots = (limit.max(1) as u32).max(in_status).max(in_leases);
    (0..slots).map(find).collect()
}

/// The holder of each slot that has one, lowest slot first: the slot's Lease's, or, when the
/// Leases cannot be read, the lock's status's (`status.holders` for a semaphore, `status.holder`
/// for slot 0 of a single-holder lock; the kind is then a claim's when a claim in `claims` has
/// the holder's UID).
fn slot_holders(
    lock: Option<&DistributedLock>,
    slots: &[LeaseRead<'_>],
    claims: &[DistributedLockClaim],
) -> Vec<(u32, CurrentHolder)> {
    let semaphore = lock.is_some_and(|l| l.spec.max_holders.is_some());
    slots
        .iter()
        .enumerate()
        .filter_map(|(k, read)| {
            let k = k as u32;
            let holder = match (read, semaphore) {
                (LeaseRead::Forbidden, true) => {
                    let h = lock?.status.as_ref()?.holders.iter().find(|h| h.slot == k)?;
                    let object_uid = h.uid.as_deref().map(|u| grant::split_request_uid(u).0);
                    let is_claim =
                        claims.iter().any(|c| c.metadata.uid.is_some() && c.metadata.uid.as_deref() == object_uid);
                    Some(CurrentHolder {
                        name: h.name.clone(),
                        uid: h.uid.clone(),
                        kind: if is_claim { HolderKind::Claim } else { HolderKind::Pod },
                        token: h.token,
                    })
                }
                (read, _) if k == 0 || !matches!(read, LeaseRead::Forbidden) => current_holder(lock, *read),
                _ => None,
            };
            holder.map(|h| (k, h))
        })
        .collect()
}

/// `leasehold status`'s JSON document.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct StatusDocument {
    /// Every lock shown.
    pub locks: Vec<LockReport>,
}

/// The operator's queue for `lock` (in namespace `ns`): every pod and claim of that namespace
/// that is a candidate for it, converted as the operator converts them, in grant order
/// ([`grant::queue_of`]), without the holders with UIDs `holder_uids` (the operator never lists
/// a holder as a waiter; a semaphore has one per slot). With `locks` (the namespace's
/// DistributedLocks), also without the multi-lock pods the operator leaves out of the queue: gated,
/// no token of `lock` recorded, and a set it does not serve
/// ([`crate::controller::lock_set_unservable_among`]); with `None` nobody is left out.
///
/// `lease` is the lock's own (slot-0) Lease when it could be read: a standing claim is then
/// queued at the request that Lease names for it when that is above its claim object's (a waiter
/// that arrived by the Lease, [`crate::controller::at_lease_request`]), as the operator does.
pub fn queue(
    ns: &str,
    lock: &str,
    holder_uids: &[&str],
    pods: &[Pod],
    claims: &[DistributedLockClaim],
    locks: Option<&[DistributedLock]>,
    lease: Option<&LeaseView>,
) -> Vec<Candidate> {
    let candidates: Vec<Candidate> = pods
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(ns) && pod_concerns_lock(p, lock))
        .filter_map(|p| Some((candidate_of_pod(p, lock, false)?, p)))
        .filter(|(c, p)| {
            let Some(locks) = locks.filter(|_| c.multi.is_some() && c.gated && c.token.is_none()) else { return true };
            let find = |l: &str| locks.iter().find(|x| x.name_any() == l && x.namespace().as_deref() == Some(ns));
            lock_set_unservable_among(ns, &lock_set(p.annotations()), find).is_none()
        })
        .map(|(c, _)| c)
        .chain(
            claims
                .iter()
                .filter(|c| c.namespace().as_deref() == Some(ns))
                .filter_map(|c| candidate_of_claim(c, lock, lease)),
        )
        .collect();
    grant::queue_of(&candidates).into_iter().filter(|c| !holder_uids.contains(&c.uid.as_str())).cloned().collect()
}

/// The request UIDs that the Leases read in `slots` list as released
/// (`leasehold.dev/released`, [`lease::released`]).
fn released_requests(slots: &[LeaseRead<'_>]) -> Vec<String> {
    slots
        .iter()
        .flat_map(|s| match s {
            LeaseRead::Found(l) => lease::released(l),
            _ => vec![],
        })
        .collect()
}

/// What `leasehold status` shows for one lock, at time `now`. `pods` and `claims` may contain
/// objects of other locks and namespaces: only the lock's candidates are kept.
pub fn lock_report(
    lock: &DistributedLock,
    lease: LeaseRead<'_>,
    pods: &[Pod],
    claims: &[DistributedLockClaim],
    now: Timestamp,
) -> LockReport {
    lock_report_slots(lock, &[lease], pods, claims, None, now)
}

/// [`lock_report`] with what could be read of every slot's Lease (`slots[k]`: slot k, see
/// [`slot_reads`]; `slots[0]` is the lock's own Lease and fills `lease`). For a semaphore
/// (`spec.maxHolders` set) it lists every slot's holder in `holders`, and none of them is a
/// waiter.
pub fn lock_report_slots(
    lock: &DistributedLock,
    slots: &[LeaseRead<'_>],
    pods: &[Pod],
    claims: &[DistributedLockClaim],
    locks: Option<&[DistributedLock]>,
    now: Timestamp,
) -> LockReport {
    let lease = slots.first().copied().unwrap_or(LeaseRead::Missing);
    let ns = lock.namespace().unwrap_or_default();
    let name = lock.name_any();
    let status = lock.status.clone().unwrap_or_default();
    let ready = match status.conditions.iter().find(|c| c.type_ == condition::READY) {
        Some(c) => ReadyReport {
            status: c.status.clone(),
            reason: Some(c.reason.clone()).filter(|r| !r.is_empty()),
            message: Some(c.message.clone()).filter(|m| !m.is_empty()),
        },
        None => ReadyReport { status: "Unknown".into(), reason: None, message: None },
    };
    let reserved_for = |holder: &str| {
        pods.iter().any(|p| {
            p.name_any() == holder
                && p.namespace().as_deref() == Some(ns.as_str())
                && is_gated(p)
                && lock_set(p.annotations()).contains(&name)
        })
    };
    let holder = status.holder.as_ref().map(|h| HolderReport {
        name: h.name.clone(),
        token: h.token,
        since: h.since.as_ref().map(|t| rfc3339(t.0)),
        held_seconds: h.since.as_ref().map(|t| seconds_since(t.0, now)),
        tentative: reserved_for(&h.name),
    });
    let lease_report = lease.lease().map(|l| {
        let view = lease::view(l);
        let renew = l.spec.as_ref().and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
        LeaseReport {
            holder_identity: view.holder.as_ref().map(|h| h.name.clone()),
            holder_kind: view.holder.as_ref().map(|h| h.kind.as_str().to_string()),
            token: view.token,
            renew_time: renew.map(rfc3339),
            renewed_seconds_ago: renew.map(|t| seconds_since(t, now)),
        }
    });
    let holding = slot_holders(Some(lock), slots, claims);
    // Not queued: the holders, and the requests a Lease lists as released by their holders
    // (an idle standing claim keeps its last request: `leasehold.dev/released`).
    let released: Vec<String> = released_requests(slots);
    let holder_uids: Vec<&str> =
        holding.iter().filter_map(|(_, h)| h.uid.as_deref()).chain(released.iter().map(String::as_str)).collect();
    let holders = match lock.spec.max_holders {
        None => vec![],
        Some(_) => holding
            .iter()
            .map(|(k, h)| {
                let spec = slots[*k as usize].lease().and_then(|l| l.spec.as_ref());
                let acquired = spec.and_then(|s| s.acquire_time.as_ref()).map(|t| t.0);
                let renewed = spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
                let from_lease = matches!(slots[*k as usize], LeaseRead::Found(_));
                SlotHolderReport {
                    slot: *k,
                    lease_name: lease::slot_lease_name(&name, *k),
                    name: h.name.clone(),
                    kind: from_lease.then(|| h.kind.as_str().to_string()),
                    token: h.token,
                    since: acquired.map(rfc3339),
                    held_seconds: acquired.map(|t| seconds_since(t, now)),
                    renewed_seconds_ago: renewed.map(|t| seconds_since(t, now)),
                }
            })
            .collect(),
    };
    let lease0 = lease.lease().map(lease::view);
    let waiters = queue(&ns, &name, &holder_uids, pods, claims, locks, lease0.as_ref())
        .iter()
        .enumerate()
        .map(|(i, c)| WaiterReport {
            position: i + 1,
            kind: c.kind.as_str().to_string(),
            name: c.name.clone(),
            identity: c.identity.clone(),
            request: grant::split_request_uid(&c.uid).1,
            created: rfc3339(c.created),
            waited_seconds: seconds_since(c.created, now),
        })
        .collect();
    LockReport {
        namespace: ns,
        name,
        ready,
        holder,
        lease: lease_report,
        lease_forbidden: matches!(lease, LeaseRead::Forbidden),
        highest_token: status.highest_token,
        waiters,
        max_holders: lock.spec.max_holders,
        holders,
    }
}

/// The table `leasehold status` prints: one row per lock (a semaphore's shows `<holders>/<limit>
/// holders` instead of one holder), then (when a semaphore has holders) one row per held slot
/// (slot, holder, kind, token, Lease, held for, renewed), then (when anyone waits) one row per
/// waiter in grant order. `namespaces` adds a NAMESPACE column (`-A`).
pub fn render_table(reports: &[LockReport], namespaces: bool) -> String {
    let mut tw = tabwriter::TabWriter::new(vec![]).padding(3);
    let ns_col = |r: &LockReport| if namespaces { format!("{}\t", r.namespace) } else { String::new() };
    let ns_head = if namespaces { "NAMESPACE\t" } else { "" };
    let _ = writeln!(tw, "{ns_head}LOCK\tHOLDER\tTOKEN\tHELD SINCE\tHELD FOR\tLEASE HOLDER\tRENEWED\tREADY\tWAITING");
    for r in reports {
        let (holder, token, since, held) = match (&r.holder, r.max_holders) {
            // A semaphore: its occupancy here, each holder in the SLOT table below.
            (_, Some(max)) => (format!("{}/{max} holders", r.holders.len()), "-".into(), "-".into(), "-".into()),
            (Some(h), None) => (
                if h.tentative { format!("{} (reserved)", h.name) } else { h.name.clone() },
                h.token.to_string(),
                h.since.clone().unwrap_or_else(|| "-".into()),
                h.held_seconds.map(age).unwrap_or_else(|| "-".into()),
            ),
            (None, None) => ("<none>".into(), "-".into(), "-".into(), "-".into()),
        };
        let (lease_holder, renewed) = match &r.lease {
            _ if r.max_holders.is_some() => ("-".into(), "-".into()),
            Some(l) => (
                l.holder_identity.clone().unwrap_or_else(|| "<none>".into()),
                l.renewed_seconds_ago.map(|s| format!("{} ago", age(s))).unwrap_or_else(|| "-".into()),
            ),
            None if r.lease_forbidden => ("<forbidden>".into(), "-".into()),
            None => ("<no Lease>".into(), "-".into()),
        };
        let ready = match (&r.ready.status[..], &r.ready.reason) {
            ("True", _) | (_, None) => r.ready.status.clone(),
            (s, Some(reason)) => format!("{s} ({reason})"),
        };
        let _ = writeln!(
            tw,
            "{}{}\t{holder}\t{token}\t{since}\t{held}\t{lease_holder}\t{renewed}\t{ready}\t{}",
            ns_col(r),
            r.name,
            r.waiters.len()
        );
    }
    let mut out = String::from_utf8(tw.into_inner().unwrap_or_default()).unwrap_or_default();
    if reports.iter().any(|r| !r.holders.is_empty()) {
        let mut tw = tabwriter::TabWriter::new(vec![]).padding(3);
        let _ = writeln!(tw, "{ns_head}LOCK\tSLOT\tHOLDER\tKIND\tTOKEN\tLEASE\tHELD FOR\tRENEWED");
        for r in reports {
            for h in &r.holders {
                let _ = writeln!(
                    tw,
                    "{}{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                    ns_col(r),
                    r.name,
                    h.slot,
                    h.name,
                    h.kind.as_deref().unwrap_or("?"),
                    h.token,
                    if r.lease_forbidden { "<forbidden>" } else { &h.lease_name },
                    h.held_seconds.map(age).unwrap_or_else(|| "-".into()),
                    h.renewed_seconds_ago.map(|s| format!("{} ago", age(s))).unwrap_or_else(|| "-".into()),
                );
            }
        }
        out.push('\n');
        out.push_str(&String::from_utf8(tw.into_inner().unwrap_or_default()).unwrap_or_default());
    }
    if reports.iter().any(|r| !r.waiters.is_empty()) {
        let mut tw = tabwriter::TabWriter::new(vec![]).padding(3);
        let _ = writeln!(tw, "{ns_head}LOCK\tPOSITION\tWAITER\tKIND\tCREATED\tWAITED (SINCE CREATED)");
        for r in reports {
            for w in &r.waiters {
                let who = match (w.kind.as_str(), w.request) {
                    ("Claim", Some(r)) => format!("{} request {r} ({})", w.name, w.identity),
                    ("Claim", None) => format!("{} ({})", w.name, w.identity),
                    _ => w.name.clone(),
                };
                let _ = writeln!(
                    tw,
                    "{}{}\t{}\t{who}\t{}\t{}\t{}",
                    ns_col(r),
                    r.name,
                    w.position,
                    w.kind,
                    w.created,
                    age(w.waited_seconds)
                );
            }
        }
        out.push('\n');
        out.push_str(&String::from_utf8(tw.into_inner().unwrap_or_default()).unwrap_or_default());
    }
    // Non-ready locks: their message, which does not fit in a column.
    for r in reports.iter().filter(|r| r.ready.status == "False") {
        let ns = if namespaces { format!("{}/", r.namespace) } else { String::new() };
        let reason = r.ready.reason.as_deref().unwrap_or("");
        out.push_str(&format!(
            "\nlock {ns}{} is not Ready ({reason}): {}\n",
            r.name,
            r.ready.message.as_deref().unwrap_or("")
        ));
    }
    out
}

/// Where a pod stands, as `leasehold why` decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The pod holds `lock` with this fencing token.
    Holds {
        /// The lock.
        lock: String,
        /// Its fencing token.
        token: i64,
    },
    /// The pod or claim holds slot `slot` of the semaphore `lock` with this fencing token (the
    /// slot's Lease names it).
    HoldsSlot {
        /// The lock.
        lock: String,
        /// Its fencing token.
        token: i64,
        /// The slot (0-based); its Lease is [`lease::slot_lease_name`]`(lock, slot)`.
        slot: u32,
    },
    /// The pod or claim was granted slot `slot` of the semaphore `lock`, but that slot's Lease
    /// names someone else now, or nobody, or is gone.
    LostSlot {
        /// The lock.
        lock: String,
        /// The token it was granted.
        token: i64,
        /// The slot it was granted.
        slot: u32,
    },
    /// The pod (or claim) waits in the queue of `lock` at this position (1 = next).
    Waiting {
        /// The lock.
        lock: String,
        /// 1-based position in the queue.
        position: usize,
    },
    /// The Lease names the pod but the operator has not ungated it yet.
    GrantInProgress {
        /// The lock.
        lock: String,
    },
    /// The pod names a lock that does not exist.
    LockMissing {
        /// The lock.
        lock: String,
    },
    /// The pod is gated but names no lock (or an empty one): nothing will ever ungate it.
    NoLockAnnotation,
    /// The pod names a lock but is neither gated nor holding: it runs without the lock.
    UngatedWithoutGrant {
        /// The lock.
        lock: String,
    },
    /// The pod was granted `lock` but the Lease names someone else now.
    LostGrant {
        /// The lock.
        lock: String,
        /// The token it was granted.
        token: i64,
    },
    /// A pod with a lock set (`leasehold.dev/locks`) is ungated and every lock of its set's Lease
    /// names it: it holds them all and runs.
    HoldsSet {
        /// (lock, fencing token) for every lock of the set, in set order (sorted by lock name).
        tokens: Vec<(String, i64)>,
    },
    /// A gated pod with a lock set that the operator serves waits for (some of) its locks; when
    /// every lock is [`SetLockState::Reserved`] the operator ungates it on its next step.
    WaitsForSet {
        /// Where each lock of the set stands, in set order.
        locks: Vec<SetLock>,
    },
    /// A gated pod's lock set is not served (a lock of it does not exist, is a semaphore, or has a
    /// name too long): it is in no queue of its locks, and any lock reserved for it is taken back.
    SetNotServed {
        /// The note of the operator's `LockSetNotServed` Event
        /// ([`crate::controller::lock_set_not_served_note`]).
        reason: String,
        /// Where each lock of the set stands, in set order.
        locks: Vec<SetLock>,
    },
    /// Succeeded or Failed (possibly by giving up waiting), or being deleted: it neither waits nor
    /// holds.
    Done,
    /// Not gated and names no lock: Leasehold does not concern it.
    NotGated,
}

/// One lock of a pod's lock set and where it stands ([`explain_set`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetLock {
    /// The lock's name.
    pub lock: String,
    /// Where it stands.
    pub state: SetLockState,
}

/// Where one lock of a pod's lock set (`leasehold.dev/locks`) stands, as [`explain_set`] decides
/// it from the lock, its Lease (slot 0) and the pod's per-lock annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetLockState {
    /// The lock's Lease names the ungated pod: it holds the lock.
    Holds {
        /// The fencing token recorded on the pod (`<lock>.locks.leasehold.dev/fencing-token`),
        /// else the Lease's.
        token: i64,
    },
    /// The lock's Lease names the pod while it is gated: a tentative grant, a reservation that
    /// keeps the lock from everyone else while the pod waits for the other locks of its set (or
    /// until the grant is taken back for an older waiter, or because the set is not served).
    Reserved {
        /// The Lease's fencing token.
        token: i64,
        /// The token is recorded on the pod already (`<lock>.locks.leasehold.dev/fencing-token`).
        recorded: bool,
    },
    /// The gated pod waits in the lock's queue.
    Waiting {
        /// 1-based position in the lock's queue (1 = next to be granted), as [`queue`] rebuilds it.
        position: usize,
        /// How many wait in that queue.
        of: usize,
        /// The highest token of this lock whose tentative grant was taken back from the pod
        /// (`<lock>.locks.leasehold.dev/withdrawn`), when one was: it waits again.
        withdrawn: Option<i64>,
    },
    /// This lock keeps the set from being served.
    NotServed {
        /// Why ([`crate::controller::lock_set_unservable_among`] for this lock alone): it does not
        /// exist, is a semaphore, or its name is too long.
        why: String,
    },
    /// The gated pod is in none of the lock's queue and its Lease does not name it: the operator
    /// leaves it out while its set is not served (or cannot queue it: no uid or
    /// creationTimestamp).
    NotQueued,
    /// The ungated pod records this token of the lock, but the lock's Lease names someone else,
    /// nobody, or is gone: it no longer holds the lock while it may still run.
    Lost {
        /// The token recorded on the pod.
        token: i64,
    },
    /// The ungated pod was never granted the lock (no token recorded, the Lease does not name
    /// it): it runs without it.
    NotGranted,
}

/// `leasehold why`'s answer: the verdict and one paragraph a person can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The verdict.
    pub verdict: Verdict,
    /// The paragraph.
    pub text: String,
}

/// Why `pod` is (or is not) gated, at time `now`. `lock` and `lease` are the lock its
/// `leasehold.dev/lock` annotation names (`None` when missing) and what could be read of that
/// lock's Lease; `pods` and `claims` are those of the pod's namespace (to rebuild the queue).
pub fn explain(
    pod: &Pod,
    lock: Option<&DistributedLock>,
    lease: LeaseRead<'_>,
    pods: &[Pod],
    claims: &[DistributedLockClaim],
    now: Timestamp,
) -> Explanation {
    explain_slots(pod, lock, &[lease], pods, claims, None, now)
}

/// [`explain`] with what could be read of every slot's Lease of the lock (`slots[k]`: slot k,
/// see [`slot_reads`]). For a semaphore, a holder is told its slot, token and slot Lease
/// ([`Verdict::HoldsSlot`], or [`Verdict::LostSlot`] when that Lease no longer names it), and a
/// waiter who holds the slots.
pub fn explain_slots(
    pod: &Pod,
    lock: Option<&DistributedLock>,
    slots: &[LeaseRead<'_>],
    pods: &[Pod],
    claims: &[DistributedLockClaim],
    locks: Option<&[DistributedLock]>,
    now: Timestamp,
) -> Explanation {
    let lease = slots.first().copied().unwrap_or(LeaseRead::Missing);
    let name = pod.name_any();
    let ns = pod.namespace().unwrap_or_default();
    let ann = |k: &str| pod.annotations().get(k).map(String::as_str);
    let gated = is_gated(pod);
    let lock_name = ann(LOCK_ANNOTATION).map(str::trim);
    let granted_lock = ann(GRANTED_LOCK_ANNOTATION);
    let token = ann(TOKEN_ANNOTATION).and_then(parse_token);
    let phase = Phase::parse(pod.status.as_ref().and_then(|s| s.phase.as_deref()));

    // What is wrong with the policy annotations (the operator then uses the defaults).
    let mut notes: Vec<String> = [
        policy::parse_on_busy(ann(policy::ON_BUSY_ANNOTATION)).err(),
        policy::parse_max_wait(ann(policy::MAX_WAIT_ANNOTATION)).err(),
    ]
    .into_iter()
    .flatten()
    .map(|e| format!("Its {e}; the operator uses the default (wait in FIFO order, no time limit)."))
    .collect();

    if matches!(phase, Phase::Succeeded | Phase::Failed) {
        let status = pod.status.as_ref();
        let reason = status.and_then(|s| s.reason.as_deref());
        let first = match reason {
            Some(r) if [RejectReason::LockBusy, RejectReason::LockWaitTimeout].iter().any(|x| x.as_str() == r) => {
                format!(
                    "Pod {name} gave up waiting for lock {} ({r}: {}): it did not run and is not waiting any more.",
                    lock_name.unwrap_or("?"),
                    status.and_then(|s| s.message.as_deref()).unwrap_or("")
                )
            }
            _ => {
                let held = match (granted_lock, token) {
                    (Some(l), Some(t)) => format!(" It held lock {l} with fencing token {t}."),
                    _ => String::new(),
                };
                format!("Pod {name} has finished ({phase:?}): it neither waits nor holds a lock.{held}")
            }
        };
        return say(Verdict::Done, first, &[]);
    }
    if pod.metadata.deletion_timestamp.is_some() {
        let first = if gated {
            format!("Pod {name} is being deleted before it was granted: it left the queue and will never start.")
        } else {
            format!(
                "Pod {name} is being deleted; while its containers may still run it keeps any lock it holds, \
                 which is released once the pod object is gone."
            )
        };
        return say(Verdict::Done, first, &[]);
    }

    let Some(lock_name) = lock_name.filter(|l| !l.is_empty()) else {
        if gated {
            let what = if lock_name.is_some() {
                "an empty leasehold.dev/lock annotation"
            } else {
                "no leasehold.dev/lock annotation"
            };
            let first = format!(
                "Pod {name} waits at the {SCHEDULING_GATE} scheduling gate but has {what}, so no operator will ever \
                 ungate it: set the annotation to the name of a DistributedLock in namespace {ns}, or remove the gate \
                 (the pod then runs without a lock)."
            );
            return say(Verdict::NoLockAnnotation, first, &notes);
        }
        let first = format!("Pod {name} is not gated by Leasehold and names no lock: Leasehold does not hold it back.");
        return say(Verdict::NotGated, first, &notes);
    };

    let semaphore = lock.and_then(|l| l.spec.max_holders);
    let holding = slot_holders(lock, slots, claims);
    let uid = pod.metadata.uid.clone();
    let names_me = |h: &CurrentHolder| h.name == name && h.uid.is_some() && h.uid == uid;
    // The slot the pod holds: the one whose Lease names it, else the one it was granted.
    let my_slot = match semaphore {
        None => 0,
        Some(_) => holding.iter().find(|(_, h)| names_me(h)).map(|(k, _)| *k).unwrap_or_else(|| {
            let granted_here = granted_lock == Some(lock_name);
            ann(SLOT_ANNOTATION).filter(|_| granted_here).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
        }),
    };
    let lease_holder = holding.iter().find(|(k, _)| *k == my_slot).map(|(_, h)| h.clone());
    let named_by_lease = lease_holder.as_ref().is_some_and(names_me);
    let lease_token = lease_holder.as_ref().map(|h| h.token).unwrap_or(0);
    if matches!(lease, LeaseRead::Forbidden) {
        notes.push(match semaphore {
            None => format!(
                "(The Lease {lock_name} could not be read, 403 Forbidden: the holder is as the lock's status records it.)"
            ),
            Some(_) => format!(
                "(The Leases of lock {lock_name} could not be read, 403 Forbidden: the holders are as the lock's status \
                 records them.)"
            ),
        });
    }
    if granted_lock.is_some_and(|g| g != lock_name) {
        notes.push(format!(
            "It was granted lock {} (annotation {GRANTED_LOCK_ANNOTATION}) but its {LOCK_ANNOTATION} annotation now \
             names {lock_name}.",
            granted_lock.unwrap_or_default()
        ));
    }

    if !gated {
        if named_by_lease {
            let t = token.unwrap_or(lease_token);
            if semaphore.is_some() {
                let first = format!(
                    "Pod {name} holds lock {lock_name} with fencing token {t}{}; it keeps it until it succeeds, fails or \
                     is deleted.",
                    slot_phrase(lock, lock_name, my_slot, slots, now)
                );
                return say(Verdict::HoldsSlot { lock: lock_name.to_string(), token: t, slot: my_slot }, first, &notes);
            }
            let since = lock
                .and_then(|l| l.status.as_ref()?.holder.as_ref()?.since.as_ref())
                .map(|s| format!(" (granted {} ago)", age(seconds_since(s.0, now))))
                .unwrap_or_default();
            let first = format!(
                "Pod {name} holds lock {lock_name} with fencing token {t}{since}; it keeps it until it succeeds, \
                 fails or is deleted."
            );
            return say(Verdict::Holds { lock: lock_name.to_string(), token: t }, first, &notes);
        }
        if let (Some(t), Some(_)) = (token, granted_lock) {
            let read = slots.get(my_slot as usize).copied().unwrap_or(LeaseRead::Missing);
            let lease_name = lease::slot_lease_name(lock_name, my_slot);
            if semaphore.is_some() {
                let first = format!(
                    "Pod {name} was granted lock {} with fencing token {t} in slot {my_slot}, but {}: it no longer \
                     holds the lock (taken back after its node was lost, or the Lease was edited) while it may still \
                     run. Only the fencing token protects the data now; stop the pod if it should not run on.",
                    granted_lock.unwrap_or(lock_name),
                    lease_now(&lease_name, lease_holder.as_ref(), read)
                );
                return say(Verdict::LostSlot { lock: lock_name.to_string(), token: t, slot: my_slot }, first, &notes);
            }
            let now_held = match &lease_holder {
                Some(h) => format!("the Lease now names {}", h.name),
                None if matches!(lease, LeaseRead::Found(_)) => "the Lease now names nobody".to_string(),
                None => "the lock's Lease does not exist".to_string(),
            };
            let first = format!(
                "Pod {name} was granted lock {} with fencing token {t}, but {now_held}: it no longer holds the lock \
                 (taken back after its node was lost, or the Lease was edited) while it may still run. Only the \
                 fencing token protects the data now; stop the pod if it should not run on.",
                granted_lock.unwrap_or(lock_name)
            );
            return say(Verdict::LostGrant { lock: lock_name.to_string(), token: t }, first, &notes);
        }
        let first = format!(
            "Pod {name} names lock {lock_name} but is not waiting at the {SCHEDULING_GATE} scheduling gate and was \
             never granted the lock: it runs without it (created without the gate, or spec.nodeName bypasses the \
             scheduler). Recreate it with the gate (the chart's admission policy adds it) to make it wait its turn."
        );
        return say(Verdict::UngatedWithoutGrant { lock: lock_name.to_string() }, first, &notes);
    }

    // Gated and names a lock.
    let Some(lock) = lock else {
        let first = format!(
            "Pod {name} waits for lock {lock_name}, which does not exist in namespace {ns}: create the \
             DistributedLock {lock_name} (spec: {{}} is enough) or fix the pod's {LOCK_ANNOTATION} annotation."
        );
        return say(Verdict::LockMissing { lock: lock_name.to_string() }, first, &notes);
    };
    ready_notes(lock, &ns, &mut notes);
    if named_by_lease {
        let first = match semaphore {
            None => format!(
                "Pod {name} has been granted lock {lock_name} (the Lease names it, token {lease_token}) but is still \
                 gated: the operator removes the gate on its next step; if it stays gated, check the operator's log."
            ),
            Some(_) => format!(
                "Pod {name} has been granted lock {lock_name} (the Lease {} of slot {my_slot} names it, token \
                 {lease_token}) but is still gated: the operator removes the gate on its next step; if it stays \
                 gated, check the operator's log.",
                lease::slot_lease_name(lock_name, my_slot)
            ),
        };
        return say(Verdict::GrantInProgress { lock: lock_name.to_string() }, first, &notes);
    }
    let who = Waiter {
        intro: format!("Pod {name} waits at the {SCHEDULING_GATE} scheduling gate for lock {lock_name}"),
        kind: HolderKind::Pod,
        uid: uid.as_deref(),
        not_granted: "gated",
        cannot_queue: format!("Pod {name} is gated for lock {lock_name}"),
    };
    explain_waiter(&who, lock, lock_name, slots, &holding, pods, claims, locks, now, notes)
}

/// Why the claim `claim` (of the `leasehold lock` command or the holder library) waits, holds or
/// neither, at time `now`: as [`explain_slots`] for a pod. `lock` is the lock its `spec.lock`
/// names (`None` when missing), `slots` what could be read of that lock's Leases
/// ([`slot_reads`]), `pods` and `claims` those of its namespace (to rebuild the queue).
pub fn explain_claim(
    claim: &DistributedLockClaim,
    lock: Option<&DistributedLock>,
    slots: &[LeaseRead<'_>],
    pods: &[Pod],
    claims: &[DistributedLockClaim],
    locks: Option<&[DistributedLock]>,
    now: Timestamp,
) -> Explanation {
    let name = claim.name_any();
    let ns = claim.namespace().unwrap_or_default();
    let identity = &claim.spec.identity;
    let lock_name = claim.spec.lock.as_str();
    // A standing claim (`spec.request`, issue 12) is explained for its current request: the
    // Lease names it by request UID, and a status of an older request says nothing about it.
    // Its current request is the highest of its spec's, its status's and the one the lock's
    // Lease names (a waiter that arrived by the Lease, `grant::current_request`).
    let lease0 = slots.first().and_then(|s| s.lease()).map(lease::view);
    let request = claim.spec.request.map(|spec| {
        let status = claim.status.as_ref().and_then(|s| s.request);
        grant::current_request(
            spec,
            status,
            lease0.as_ref(),
            claim.metadata.uid.as_deref().unwrap_or_default(),
            &claim.spec.identity,
        )
    });
    let by_lease = request.is_some_and(|r| {
        r > claim.spec.request.unwrap_or(0).max(claim.status.as_ref().and_then(|s| s.request).unwrap_or(0))
    });
    let status = match request {
        Some(r) => claim.status.clone().filter(|s| s.request == Some(r)).unwrap_or_default(),
        None => claim.status.clone().unwrap_or_default(),
    };
    let name = match request {
        Some(r) => format!("{name} (request {r})"),
        None => name,
    };
    let request_uid = claim.metadata.uid.as_deref().map(|u| match request {
        Some(r) => grant::request_uid(u, r),
        None => u.to_string(),
    });
    let why = |s: &crate::crd::DistributedLockClaimStatus| {
        format!("{}: {}", s.reason.as_deref().unwrap_or("?"), s.message.as_deref().unwrap_or(""))
    };
    let mut notes = vec![];
    match status.phase {
        Some(ClaimPhase::Rejected) => {
            let first = format!(
                "Claim {name} ({identity}) gave up waiting for lock {lock_name} ({}): it is not waiting any more.",
                why(&status)
            );
            return say(Verdict::Done, first, &[]);
        }
        Some(ClaimPhase::Expired) => {
            let first = format!(
                "Claim {name} ({identity}) held lock {lock_name} with fencing token {} until the operator took it \
                 back ({}); a claim is never granted again: its holder must stop, and acquire anew (a new claim).",
                status.token.unwrap_or(0),
                why(&status)
            );
            return say(Verdict::Done, first, &[]);
        }
        _ => {}
    }
    if claim.metadata.deletion_timestamp.is_some() {
        let first = format!("Claim {name} ({identity}) is being deleted: it neither waits nor will be granted.");
        return say(Verdict::Done, first, &[]);
    }
    let Some(lock_obj) = lock else {
        let first = format!(
            "Claim {name} ({identity}) waits for lock {lock_name}, which does not exist in namespace {ns}: create the \
             DistributedLock {lock_name} (spec: {{}} is enough)."
        );
        return say(Verdict::LockMissing { lock: lock_name.to_string() }, first, &[]);
    };
    let semaphore = lock_obj.spec.max_holders;
    let holding = slot_holders(lock, slots, claims);
    let uid = request_uid.as_deref();
    if let Some(r) = request
        && let Some(l) =
            slots.iter().find_map(|s| s.lease().filter(|l| lease::released(l).iter().any(|e| Some(e.as_str()) == uid)))
    {
        let first = format!(
            "Claim {name} ({identity}) released request {r} of lock {lock_name} (the Lease {} lists it in {}): its \
             process holds nothing and has not asked again; the claim stays for its next acquire (a standing claim).",
            l.name_any(),
            crate::lock::RELEASED_ANNOTATION
        );
        return say(Verdict::Done, first, &[]);
    }
    if slots.first().is_some_and(|r| matches!(r, LeaseRead::Forbidden)) {
        notes.push(format!(
            "(The Leases of lock {lock_name} could not be read, 403 Forbidden: the holders are as the lock's status \
             records them.)"
        ));
    }
    if let Some(t) = status.token {
        let slot = status.slot.unwrap_or(0);
        let lease_name = status.lease_name.clone().unwrap_or_else(|| lease::slot_lease_name(lock_name, slot));
        let in_slot = holding.iter().find(|(k, _)| *k == slot).map(|(_, h)| h.clone());
        let named = in_slot.as_ref().is_some_and(|h| h.uid.is_some() && h.uid.as_deref() == uid);
        let renew = format!(
            "its holder renews the Lease {lease_name}; the operator takes the lock back when it sees no renewal for \
             {} s (the lock's leaseDurationSeconds)",
            lock_obj.spec.lease_duration_seconds
        );
        if named {
            let (verdict, place) = match semaphore {
                Some(_) => (
                    Verdict::HoldsSlot { lock: lock_name.to_string(), token: t, slot },
                    slot_phrase(lock, lock_name, slot, slots, now),
                ),
                None => (Verdict::Holds { lock: lock_name.to_string(), token: t }, String::new()),
            };
            let first =
                format!("Claim {name} ({identity}) holds lock {lock_name} with fencing token {t}{place}; {renew}.");
            return say(verdict, first, &notes);
        }
        let read = slots.get(slot as usize).copied().unwrap_or(LeaseRead::Missing);
        let (verdict, where_) = match semaphore {
            Some(_) => (Verdict::LostSlot { lock: lock_name.to_string(), token: t, slot }, format!(" in slot {slot}")),
            None => (Verdict::LostGrant { lock: lock_name.to_string(), token: t }, String::new()),
        };
        let first = format!(
            "Claim {name} ({identity}) was granted lock {lock_name} with fencing token {t}{where_}, but {}: it no \
             longer holds the lock (its renewals stopped, or the Lease was edited); the operator marks it Expired, \
             and its holder must stop writing with token {t}.",
            lease_now(&lease_name, in_slot.as_ref(), read)
        );
        return say(verdict, first, &notes);
    }
    ready_notes(lock_obj, &ns, &mut notes);
    if let Some((k, _)) = holding.iter().find(|(_, h)| h.uid.is_some() && h.uid.as_deref() == uid) {
        let first = format!(
            "Claim {name} ({identity}) has been granted lock {lock_name} (the Lease {} names it) but its status does \
             not say so yet: the operator writes it on its next step; if it stays so, check the operator's log.",
            lease::slot_lease_name(lock_name, *k)
        );
        return say(Verdict::GrantInProgress { lock: lock_name.to_string() }, first, &notes);
    }
    if let Some(n) = lease0.as_ref().and_then(|l| l.next.as_ref()).filter(|n| Some(n.uid.as_str()) == uid) {
        let how =
            if by_lease { "its process wrote that itself (an arrival by the Lease)" } else { "the operator wrote it" };
        notes.push(format!(
            "(The Lease {lock_name} names it as the next holder ({}, token {}; {how}): the holder's release hands the \
             lock to it.)",
            crate::lock::NEXT_HOLDER_ANNOTATION,
            n.token
        ));
    }
    let who = Waiter {
        intro: format!("Claim {name} ({identity}) waits for lock {lock_name}"),
        kind: HolderKind::Claim,
        uid,
        not_granted: "waiting",
        cannot_queue: format!("Claim {name} ({identity}) waits for lock {lock_name}"),
    };
    explain_waiter(&who, lock_obj, lock_name, slots, &holding, pods, claims, locks, now, notes)
}

/// Why `pod`, which asks for a lock set (`leasehold.dev/locks`, [`lock_set`]), is (or is not)
/// gated, at time `now`: a first line, one line per lock of its set in set order (`- lock a: ...`,
/// [`SetLockState`]), then the verdict for the set ([`Verdict::HoldsSet`],
/// [`Verdict::WaitsForSet`], [`Verdict::SetNotServed`], or as for one lock
/// [`Verdict::LostGrant`], [`Verdict::UngatedWithoutGrant`], [`Verdict::Done`]), lines separated
/// by `\n`. `locks` are the DistributedLocks of the pod's namespace (a lock of the set not among
/// them does not exist), `leases` the Leases of the set's locks (`None`: the caller may not read
/// Leases, and each lock's `status.holder` stands in), `pods` and `claims` those of the namespace
/// (to rebuild each lock's queue). A pod without a set is explained as [`explain_slots`] does, for
/// the lock its `leasehold.dev/lock` annotation names.
pub fn explain_set(
    pod: &Pod,
    locks: &[DistributedLock],
    leases: Option<&[Lease]>,
    pods: &[Pod],
    claims: &[DistributedLockClaim],
    now: Timestamp,
) -> Explanation {
    let name = pod.name_any();
    let ns = pod.namespace().unwrap_or_default();
    let find = |l: &str| locks.iter().find(|x| x.name_any() == l && x.namespace().as_deref() == Some(ns.as_str()));
    let set = lock_set(pod.annotations());
    if set.is_empty() {
        let lock_name = pod.annotations().get(LOCK_ANNOTATION).map(|l| l.trim()).unwrap_or_default();
        let lock = find(lock_name);
        return explain_slots(pod, lock, &slot_reads(&ns, lock_name, lock, leases), pods, claims, Some(locks), now);
    }
    let ann = |k: &str| pod.annotations().get(k).map(String::as_str);
    let recorded = |l: &str| ann(&lock_token_annotation(l)).and_then(parse_token);
    let gated = is_gated(pod);
    let uid = pod.metadata.uid.clone();
    let listed = set.join(", ");
    let phase = Phase::parse(pod.status.as_ref().and_then(|s| s.phase.as_deref()));
    if matches!(phase, Phase::Succeeded | Phase::Failed) {
        let held: Vec<String> =
            set.iter().filter_map(|l| Some(format!("{l} with fencing token {}", recorded(l)?))).collect();
        let held = if held.is_empty() { String::new() } else { format!(" It held {}.", held.join(", ")) };
        let first = format!("Pod {name} has finished ({phase:?}): it neither waits nor holds a lock.{held}");
        return say(Verdict::Done, first, &[]);
    }
    if pod.metadata.deletion_timestamp.is_some() {
        let first = if gated {
            format!("Pod {name} is being deleted before it was granted: it left the queues and will never start.")
        } else {
            format!(
                "Pod {name} is being deleted; while its containers may still run it keeps the locks it holds, \
                 which are released once the pod object is gone."
            )
        };
        return say(Verdict::Done, first, &[]);
    }

    let whole = lock_set_unservable_among(&ns, &set, find);
    let mut lines = vec![if gated {
        format!(
            "Pod {name} waits at the {SCHEDULING_GATE} scheduling gate for its lock set {listed} ({LOCKS_ANNOTATION}): \
             it starts only once it holds every lock of the set."
        )
    } else {
        format!(
            "Pod {name} asks for the lock set {listed} ({LOCKS_ANNOTATION}) and is past the {SCHEDULING_GATE} scheduling gate."
        )
    }];
    let mut states: Vec<SetLock> = vec![];
    for l in &set {
        let lock = find(l);
        let reads = slot_reads(&ns, l, lock, leases);
        // A lock set is served with single-holder locks only: slot 0, the lock's own Lease.
        let reads = &reads[..reads.len().min(1)];
        let read = reads.first().copied().unwrap_or(LeaseRead::Missing);
        let holding = slot_holders(lock, reads, claims);
        let holder = holding.first().map(|(_, h)| h);
        let withdrawn = ann(&lock_withdrawn_annotation(l)).and_then(parse_token).filter(|t| *t > 0);
        // A Lease that names the pod with a token at or below the withdrawn one was taken back
        // (the operator moves it on): it does not count as the pod's.
        let named =
            holder.filter(|h| h.name == name && h.uid.is_some() && h.uid == uid && h.token > withdrawn.unwrap_or(0));
        let own = lock_set_unservable_among(&ns, std::slice::from_ref(l), find);
        let since = || {
            lock.and_then(|x| x.status.as_ref()?.holder.as_ref())
                .filter(|h| h.name == name)
                .and_then(|h| h.since.as_ref())
                .map(|t| format!(" (granted {} ago)", age(seconds_since(t.0, now))))
                .unwrap_or_default()
        };
        let (state, line) = match (gated, named, own, lock) {
            (false, Some(h), _, _) => {
                let t = recorded(l).unwrap_or(h.token);
                (SetLockState::Holds { token: t }, format!("- lock {l}: held, fencing token {t}{}.", since()))
            }
            (false, None, _, _) => match recorded(l) {
                Some(t) => (
                    SetLockState::Lost { token: t },
                    format!("- lock {l}: granted with fencing token {t}, but {}.", lease_now(l, holder, read)),
                ),
                None => (
                    SetLockState::NotGranted,
                    format!(
                        "- lock {l}: never granted (no {} on the pod, its Lease does not name it).",
                        lock_token_annotation(l)
                    ),
                ),
            },
            (true, _, Some(why), _) => {
                (SetLockState::NotServed { why: why.clone() }, format!("- lock {l}: not served: {why}."))
            }
            (true, Some(h), None, _) => {
                let is_recorded = recorded(l) == Some(h.token);
                let record = match is_recorded {
                    true => format!("the token is recorded on the pod in {}", lock_token_annotation(l)),
                    false => "the operator records the token on the pod next".to_string(),
                };
                let mut line = format!(
                    "- lock {l}: reserved for it, tentative token {} (its Lease names the pod, which stays gated; \
                     {record}): a tentative grant, the lock serves nobody else while the pod waits for the other locks \
                     of its set.",
                    h.token
                );
                let head = queue(&ns, l, &[], pods, claims, Some(locks), None).into_iter().next();
                if whole.is_some() {
                    line.push_str(
                        " Its set is not served, so the operator takes this grant back (withdrawn on the pod first, \
                         then the Lease moves on).",
                    );
                } else if let Some(head) = head.filter(|c| Some(&c.uid) != uid.as_ref()) {
                    line.push_str(&format!(
                        " An older waiter, {}, is first in lock {l}'s queue: the operator takes this grant back \
                         (wound-wait) and the pod waits again.",
                        describe_waiter(&head)
                    ));
                }
                (SetLockState::Reserved { token: h.token, recorded: is_recorded }, line)
            }
            (true, None, None, _) if whole.is_some() => (
                SetLockState::NotQueued,
                format!(
                    "- lock {l}: not queued: the operator leaves the pod out of lock {l}'s queue while its set is not served."
                ),
            ),
            // (A lock that does not exist is not served: the arm above.)
            (true, None, None, None) => (SetLockState::NotQueued, format!("- lock {l}: not queued.")),
            (true, None, None, Some(lock)) => {
                let others: Vec<(u32, CurrentHolder)> =
                    holding.iter().filter(|(_, h)| h.uid.is_none() || h.uid != uid).cloned().collect();
                let holder_uids: Vec<&str> = others.iter().filter_map(|(_, h)| h.uid.as_deref()).collect();
                let q = queue(&ns, l, &holder_uids, pods, claims, Some(locks), None);
                let again = withdrawn
                    .map(|t| {
                        format!(
                            " again (a tentative grant of it, token {t}, was taken back: {})",
                            lock_withdrawn_annotation(l)
                        )
                    })
                    .unwrap_or_default();
                let who = Waiter {
                    intro: format!("- lock {l}: waiting{again}"),
                    kind: HolderKind::Pod,
                    uid: uid.as_deref(),
                    not_granted: "gated",
                    cannot_queue: format!("- lock {l}: not queued: the pod is gated for it"),
                };
                let mut notes = vec![];
                ready_notes(lock, &ns, &mut notes);
                let e = explain_waiter(&who, lock, l, reads, &others, pods, claims, Some(locks), now, notes);
                match q.iter().position(|c| c.kind == HolderKind::Pod && Some(&c.uid) == uid.as_ref()) {
                    Some(i) => (SetLockState::Waiting { position: i + 1, of: q.len(), withdrawn }, e.text),
                    None => (SetLockState::NotQueued, e.text),
                }
            }
        };
        lines.push(line);
        states.push(SetLock { lock: l.clone(), state });
    }

    let first_with = |f: &dyn Fn(&SetLockState) -> bool| states.iter().find(|s| f(&s.state));
    let (verdict, last) = if !gated {
        if let Some(SetLock { lock, state: SetLockState::Lost { token } }) =
            first_with(&|s| matches!(s, SetLockState::Lost { .. }))
        {
            (
                Verdict::LostGrant { lock: lock.clone(), token: *token },
                format!(
                    "It no longer holds lock {lock} (taken back after its node was lost, or the Lease was edited) while \
                     it may still run. Only the fencing token {token} protects that lock's data now; stop the pod if it \
                     should not run on."
                ),
            )
        } else if let Some(missing) = first_with(&|s| matches!(s, SetLockState::NotGranted)) {
            (
                Verdict::UngatedWithoutGrant { lock: missing.lock.clone() },
                format!(
                    "It runs without lock {} (created without the gate, or spec.nodeName bypasses the scheduler). \
                     Recreate it with the gate (the chart's admission policy adds it) to make it wait for its set.",
                    missing.lock
                ),
            )
        } else {
            let tokens: Vec<(String, i64)> = states
                .iter()
                .filter_map(|s| match s.state {
                    SetLockState::Holds { token } => Some((s.lock.clone(), token)),
                    _ => None,
                })
                .collect();
            let list: Vec<String> = tokens.iter().map(|(l, t)| format!("{l} with fencing token {t}")).collect();
            let last = format!(
                "It holds every lock of its set ({}) and runs; it keeps them until it succeeds, fails or is deleted.",
                list.join(", ")
            );
            (Verdict::HoldsSet { tokens }, last)
        }
    } else if let Some(why) = &whole {
        let reason = lock_set_not_served_note(&set, why);
        let last = format!(
            "The operator does not serve its set (Warning Event LockSetNotServed: {reason}). To have it served, make \
             every lock of the list exist as a single-holder lock (no spec.maxHolders), or fix the pod's \
             {LOCKS_ANNOTATION} list (recreate the pod if a lock is already recorded on it: the list cannot change \
             then)."
        );
        (Verdict::SetNotServed { reason, locks: states.clone() }, last)
    } else if states.iter().all(|s| matches!(s.state, SetLockState::Reserved { .. })) {
        let last = "Every lock of its set is reserved for it: the operator records the last token and removes the \
                    gate on its next step; if it stays gated, check the operator's log."
            .to_string();
        (Verdict::WaitsForSet { locks: states.clone() }, last)
    } else {
        let waits: Vec<String> = states
            .iter()
            .filter_map(|s| match &s.state {
                SetLockState::Waiting { position, of, .. } => {
                    Some(format!("{} (position {position} of {of} in its queue)", s.lock))
                }
                SetLockState::NotQueued => Some(format!("{} (not queued)", s.lock)),
                _ => None,
            })
            .collect();
        let reserved: Vec<&str> = states
            .iter()
            .filter(|s| matches!(s.state, SetLockState::Reserved { .. }))
            .map(|s| s.lock.as_str())
            .collect();
        let mut last = format!("It waits for {} of its {} locks: {}.", waits.len(), set.len(), waits.join(", "));
        match reserved.len() {
            0 => {}
            1 => last.push_str(&format!(" Lock {} is reserved for it meanwhile.", reserved[0])),
            _ => last.push_str(&format!(" Locks {} are reserved for it meanwhile.", reserved.join(", "))),
        }
        (Verdict::WaitsForSet { locks: states.clone() }, last)
    };
    lines.push(last);
    if leases.is_none() {
        lines.push(
            "(The Leases could not be read, 403 Forbidden: the holders are as the locks' status records them.)".into(),
        );
    }
    let ignored: Vec<&str> = [LOCK_ANNOTATION, policy::ON_BUSY_ANNOTATION, policy::MAX_WAIT_ANNOTATION]
        .into_iter()
        .filter(|k| ann(k).is_some())
        .collect();
    if !ignored.is_empty() && ann(GRANTED_LOCK_ANNOTATION).is_none() {
        lines.push(format!(
            "(Its {} annotation{} ignored: a pod with a lock set waits in FIFO order for the locks of its set.)",
            ignored.join(", "),
            if ignored.len() == 1 { " is" } else { "s are" }
        ));
    }
    Explanation { verdict, text: lines.join("\n") }
}

fn say(verdict: Verdict, first: String, notes: &[String]) -> Explanation {
    let mut text = first;
    for n in notes {
        text.push(' ');
        text.push_str(n);
    }
    Explanation { verdict, text }
}

/// The notes on a lock that is not Ready, or has no Ready condition yet, first in `notes`.
fn ready_notes(lock: &DistributedLock, ns: &str, notes: &mut Vec<String>) {
    match ready_condition(lock) {
        Some(c) if c.status == "False" => notes.insert(
            0,
            format!(
                "The lock is not Ready ({}: {}): the operator grants nothing until that is resolved.",
                c.reason, c.message
            ),
        ),
        None => notes.insert(
            0,
            format!(
                "The lock has no Ready condition yet: no operator has reconciled it; check that one runs and \
                 serves namespace {ns}."
            ),
        ),
        _ => {}
    }
}

fn ready_condition(lock: &DistributedLock) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    lock.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == condition::READY))
}

/// " in slot k of N (Lease <name>, granted 1m ago)": where a semaphore's holder holds.
fn slot_phrase(
    lock: Option<&DistributedLock>,
    lock_name: &str,
    slot: u32,
    slots: &[LeaseRead<'_>],
    now: Timestamp,
) -> String {
    let of = lock.and_then(|l| l.spec.max_holders).map(|n| format!(" of {n}")).unwrap_or_default();
    let granted = slots
        .get(slot as usize)
        .and_then(|r| r.lease())
        .and_then(|l| l.spec.as_ref()?.acquire_time.as_ref())
        .map(|t| format!(", granted {} ago", age(seconds_since(t.0, now))))
        .unwrap_or_default();
    format!(" in slot {slot}{of} (Lease {}{granted})", lease::slot_lease_name(lock_name, slot))
}

/// What the Lease `lease_name` says now, for a holder it no longer names.
fn lease_now(lease_name: &str, holder: Option<&CurrentHolder>, read: LeaseRead<'_>) -> String {
    match (holder, read) {
        (Some(h), _) => format!("its Lease {lease_name} now names {}", h.name),
        (None, LeaseRead::Found(_)) => format!("its Lease {lease_name} now names nobody"),
        (None, LeaseRead::Forbidden) => format!("the lock's status no longer records it in Lease {lease_name}"),
        (None, LeaseRead::Missing) => format!("its Lease {lease_name} does not exist"),
    }
}

/// A waiter as [`explain_waiter`] describes it.
struct Waiter<'a> {
    /// "Pod p waits at the ... gate for lock l" / "Claim c (identity) waits for lock l" / "lock l:
    /// waiting" (a line of [`explain_set`]): what comes before ", held by ...".
    intro: String,
    kind: HolderKind,
    uid: Option<&'a str>,
    /// What it stays while not granted: "gated" / "waiting".
    not_granted: &'static str,
    /// The start of the sentence when it cannot be queued.
    cannot_queue: String,
}

/// A waiter's place in the queue of `lock` and who holds it (every slot of a semaphore).
#[allow(clippy::too_many_arguments)]
fn explain_waiter(
    who: &Waiter<'_>,
    lock: &DistributedLock,
    lock_name: &str,
    slots: &[LeaseRead<'_>],
    holding: &[(u32, CurrentHolder)],
    pods: &[Pod],
    claims: &[DistributedLockClaim],
    locks: Option<&[DistributedLock]>,
    now: Timestamp,
    notes: Vec<String>,
) -> Explanation {
    let ns = lock.namespace().unwrap_or_default();
    let lease = slots.first().copied().unwrap_or(LeaseRead::Missing);
    let semaphore = lock.spec.max_holders;
    // Not queued: the holders, and the requests a Lease lists as released by their holders
    // (an idle standing claim keeps its last request: `leasehold.dev/released`).
    let released: Vec<String> = released_requests(slots);
    let holder_uids: Vec<&str> =
        holding.iter().filter_map(|(_, h)| h.uid.as_deref()).chain(released.iter().map(String::as_str)).collect();
    let lease0 = lease.lease().map(lease::view);
    let queue = queue(&ns, lock_name, &holder_uids, pods, claims, locks, lease0.as_ref());
    let Some(index) = queue.iter().position(|c| c.kind == who.kind && Some(c.uid.as_str()) == who.uid) else {
        // Not deleting, not terminal: always a waiter, unless the operator could not read it.
        let first = format!("{} but the operator cannot queue it (no uid or creationTimestamp).", who.cannot_queue);
        return say(Verdict::Done, first, &notes);
    };
    let me = &queue[index];
    let holder_text = |h: &CurrentHolder| if h.kind == HolderKind::Claim { "claim holder" } else { "pod" };
    // Slots free now: a semaphore's limit minus its holders (none after maxHolders was lowered).
    let free = match semaphore {
        Some(n) => (n.max(1) as usize).saturating_sub(holding.len()),
        None => usize::from(holding.is_empty()),
    };
    let held_by = match (semaphore, holding.first()) {
        (None, Some((_, h))) => {
            let since = lock
                .status
                .as_ref()
                .and_then(|s| s.holder.as_ref())
                .filter(|s| s.name == h.name)
                .and_then(|s| s.since.as_ref())
                .map(|s| format!(" for {}", age(seconds_since(s.0, now))))
                .unwrap_or_default();
            match reserved_for_set(h, pods) {
                true => format!(
                    "reserved for pod {} (it waits for the other locks of its set), tentative token {}{since}",
                    h.name, h.token
                ),
                false => format!("held by {} {} with fencing token {}{since}", holder_text(h), h.name, h.token),
            }
        }
        (None, None) => match lease {
            LeaseRead::Found(_) | LeaseRead::Forbidden => "which is free".to_string(),
            LeaseRead::Missing => "which has no Lease yet".to_string(),
        },
        (Some(n), _) => {
            let list: Vec<String> = holding
                .iter()
                .map(|(k, h)| format!("slot {k} by {} {} (token {})", holder_text(h), h.name, h.token))
                .collect();
            match (holding.len(), free) {
                (0, _) => format!("a semaphore of {n} slots, none of them held"),
                (_, 0) => format!("a semaphore whose {n} slots are all held: {}", list.join(", ")),
                (held, _) => format!("a semaphore with {held} of its {n} slots held: {}", list.join(", ")),
            }
        }
    };
    let place = if index == 0 {
        let when = if semaphore.is_some() && free == 0 { " when a slot is released" } else { "" };
        format!("It is at position 1 of {} in the queue: next to be granted{when}", queue.len())
    } else {
        let ahead: Vec<String> = queue[..index].iter().take(5).map(describe_waiter).collect();
        let more = if index > 5 { format!(" and {} more", index - 5) } else { String::new() };
        format!("It is at position {} of {} in the queue, behind {}{more}", index + 1, queue.len(), ahead.join(", "))
    };
    let mut first = format!(
        "{}, {held_by}. {place} (waiting {} since it was created).",
        who.intro,
        age(seconds_since(me.created, now))
    );
    let ready = ready_condition(lock).is_some_and(|c| c.status == "True");
    if index < free && ready {
        let what = if semaphore.is_some() { "A slot is free" } else { "The lock is free" };
        first.push_str(&format!(
            " {what}, so the operator grants it on its next step; if it stays {}, check that an operator serves this \
             namespace.",
            who.not_granted
        ));
    }
    if me.on_busy == BusyPolicy::Skip {
        let marked = if who.kind == HolderKind::Claim { "Rejected" } else { "Failed" };
        first.push_str(&format!(
            " It asked to skip when busy (on-busy: skip): it is marked {marked} (LockBusy) instead of waiting once the \
             operator sees the lock held."
        ));
    }
    if let Some(max) = me.max_wait {
        first.push_str(&format!(
            " It gives up after max-wait {} (LockWaitTimeout), counted from when the operator first saw it waiting.",
            humantime::format_duration(max)
        ));
    }
    say(Verdict::Waiting { lock: lock_name.to_string(), position: index + 1 }, first, &notes)
}

/// Whether `holder` (a lock's Lease holder) is a gated pod of `pods` with a lock set: its grant
/// is tentative, a reservation kept while it waits for the other locks of its set.
fn reserved_for_set(holder: &CurrentHolder, pods: &[Pod]) -> bool {
    holder.kind == HolderKind::Pod
        && holder.uid.is_some()
        && pods.iter().any(|p| p.metadata.uid == holder.uid && is_gated(p) && !lock_set(p.annotations()).is_empty())
}

fn is_gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == SCHEDULING_GATE))
}

fn describe_waiter(c: &Candidate) -> String {
    match c.kind {
        HolderKind::Pod => c.name.clone(),
        HolderKind::Claim => format!("claim {} ({})", c.name, c.identity),
    }
}

fn rfc3339(t: Timestamp) -> String {
    Timestamp::from_second(t.as_second()).unwrap_or(t).to_string()
}

fn seconds_since(t: Timestamp, now: Timestamp) -> i64 {
    (now.as_second() - t.as_second()).max(0)
}

/// A whole-second age as kubectl prints it: `45s`, `2m3s`, `1h0m5s` style, without spaces.
fn age(seconds: i64) -> String {
    humantime::format_duration(Duration::from_secs(seconds.max(0) as u64)).to_string().replace(' ', "")
}

/// Runs `leasehold status`; returns the exit status.
pub async fn status(args: StatusArgs) -> i32 {
    match status_inner(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("leasehold status: {}", error_text(&e));
            EXIT_ERROR
        }
    }
}

async fn status_inner(args: StatusArgs) -> anyhow::Result<i32> {
    let client = args.kube.client().await?;
    let ns = args.namespace.clone().unwrap_or_else(|| client.default_namespace().to_string());
    let scope = if args.all_namespaces { None } else { Some(ns.as_str()) };
    let where_ = scope.map(|n| format!("in namespace {n}")).unwrap_or_else(|| "in any namespace".into());
    let locks_api: Api<DistributedLock> = api(&client, scope);
    let locks = match &args.lock {
        Some(name) => match locks_api.get_opt(name).await.with_context(|| format!("get DistributedLock {name}"))? {
            Some(l) => vec![l],
            None => {
                eprintln!("leasehold status: DistributedLock {name} not found in namespace {ns}");
                return Ok(EXIT_ERROR);
            }
        },
        None => locks_api.list(&ListParams::default()).await.context("list DistributedLocks")?.items,
    };
    if locks.is_empty() {
        eprintln!("No DistributedLocks found {where_}.");
        return Ok(0);
    }
    // Leases are not in the built-in `view` role: without them, show what the locks' status says.
    let leases_api = api::<Lease>(&client, scope);
    let leases = match (&args.lock, locks.first()) {
        (Some(name), Some(lock)) => lock_leases(&leases_api, name, lock.spec.max_holders.is_some()).await,
        _ => leases_api.list(&ListParams::default()).await.map(|l| l.items),
    };
    let leases: Option<Vec<Lease>> = match leases {
        Ok(l) => Some(l),
        Err(e) if is_forbidden(&e) => {
            eprintln!(
                "leasehold status: may not read Leases {where_} (403 Forbidden); holders are as the locks' status records them"
            );
            None
        }
        Err(e) => return Err(anyhow::Error::new(e).context(format!("read Leases {where_}"))),
    };
    let pods = api::<Pod>(&client, scope)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("list pods {where_}"))?
        .items;
    let claims = api::<DistributedLockClaim>(&client, scope)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("list DistributedLockClaims {where_}"))?
        .items;
    // The queue leaves out pods whose lock set is not served, which takes every lock of the
    // scope: one more LIST when only one lock was asked for and some pod has a set.
    let all_locks = match &args.lock {
        Some(_) if pods.iter().any(|p| !lock_set(p.annotations()).is_empty()) => {
            locks_api.list(&ListParams::default()).await.context("list DistributedLocks")?.items
        }
        _ => locks.clone(),
    };
    let now = Timestamp::now();
    let reports: Vec<LockReport> = locks
        .iter()
        .map(|l| {
            let slots = slot_reads(&l.namespace().unwrap_or_default(), &l.name_any(), Some(l), leases.as_deref());
            lock_report_slots(l, &slots, &pods, &claims, Some(&all_locks), now)
        })
        .collect();
    match args.output {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&StatusDocument { locks: reports })?),
        OutputFormat::Table => print!("{}", render_table(&reports, args.all_namespaces)),
    }
    Ok(0)
}

/// Runs `leasehold why`; returns the exit status.
pub async fn why(args: WhyArgs) -> i32 {
    match why_inner(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("leasehold why: {}", error_text(&e));
            EXIT_ERROR
        }
    }
}

async fn why_inner(args: WhyArgs) -> anyhow::Result<i32> {
    let client = args.kube.client().await?;
    let ns = args.namespace.clone().unwrap_or_else(|| client.default_namespace().to_string());
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let claims_api: Api<DistributedLockClaim> = Api::namespaced(client.clone(), &ns);
    let pod = pods_api.get_opt(&args.name).await.with_context(|| format!("get pod {}", args.name))?;
    let claim = match &pod {
        Some(_) => None,
        None => {
            claims_api.get_opt(&args.name).await.with_context(|| format!("get DistributedLockClaim {}", args.name))?
        }
    };
    if let Some(pod) = pod.as_ref().filter(|p| !lock_set(p.annotations()).is_empty()) {
        let explanation = why_set(&client, &ns, pod).await?;
        println!("{}", explanation.text);
        return Ok(0);
    }
    let lock_name = match (&pod, &claim) {
        (Some(pod), _) => {
            pod.annotations().get(LOCK_ANNOTATION).map(|l| l.trim().to_string()).filter(|l| !l.is_empty())
        }
        (None, Some(claim)) => Some(claim.spec.lock.clone()),
        (None, None) => {
            eprintln!(
                "leasehold why: pod {} not found in namespace {ns}, and no DistributedLockClaim of that name either",
                args.name
            );
            return Ok(EXIT_ERROR);
        }
    };
    let (lock, leases, pods, claims) = match &lock_name {
        None => (None, Some(vec![]), vec![], vec![]),
        Some(l) => {
            let lock = Api::<DistributedLock>::namespaced(client.clone(), &ns)
                .get_opt(l)
                .await
                .with_context(|| format!("get DistributedLock {l}"))?;
            let semaphore = lock.as_ref().is_some_and(|l| l.spec.max_holders.is_some());
            let leases = match lock_leases(&Api::namespaced(client.clone(), &ns), l, semaphore).await {
                Ok(leases) => Some(leases),
                Err(e) if is_forbidden(&e) => None,
                Err(e) => return Err(anyhow::Error::new(e).context(format!("read the Leases of lock {l}"))),
            };
            let pods =
                pods_api.list(&ListParams::default()).await.with_context(|| format!("list pods in namespace {ns}"))?;
            let claims = claims_api
                .list(&ListParams::default())
                .await
                .with_context(|| format!("list DistributedLockClaims in namespace {ns}"))?;
            (lock, leases, pods.items, claims.items)
        }
    };
    let slots = slot_reads(&ns, lock_name.as_deref().unwrap_or_default(), lock.as_ref(), leases.as_deref());
    // The queue leaves out pods whose lock set is not served: that takes the namespace's locks.
    let ns_locks = match pods.iter().any(|p| !lock_set(p.annotations()).is_empty()) {
        true => {
            Api::<DistributedLock>::namespaced(client.clone(), &ns)
                .list(&ListParams::default())
                .await
                .with_context(|| format!("list DistributedLocks in namespace {ns}"))?
                .items
        }
        false => lock.iter().cloned().collect(),
    };
    let explanation = match (&pod, &claim) {
        (Some(pod), _) => explain_slots(pod, lock.as_ref(), &slots, &pods, &claims, Some(&ns_locks), Timestamp::now()),
        (None, Some(claim)) => {
            explain_claim(claim, lock.as_ref(), &slots, &pods, &claims, Some(&ns_locks), Timestamp::now())
        }
        (None, None) => unreachable!("answered above"),
    };
    println!("{}", explanation.text);
    Ok(0)
}

/// [`explain_set`] for `pod` (in namespace `ns`), which asks for a lock set: reads the locks of
/// the namespace (one LIST), each lock's Lease of the set (one GET each; `None` on 403), and the
/// namespace's pods and claims.
async fn why_set(client: &Client, ns: &str, pod: &Pod) -> anyhow::Result<Explanation> {
    let locks = Api::<DistributedLock>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("list DistributedLocks in namespace {ns}"))?
        .items;
    let leases_api: Api<Lease> = Api::namespaced(client.clone(), ns);
    let mut leases = Some(vec![]);
    // Only the Leases of locks that exist (a lock's Lease goes with it); the others are not served.
    let existing = lock_set(pod.annotations()).into_iter().filter(|l| locks.iter().any(|x| x.name_any() == *l));
    for l in existing {
        match leases_api.get_opt(&l).await {
            Ok(found) => leases.iter_mut().for_each(|ls| ls.extend(found.clone())),
            Err(e) if is_forbidden(&e) => leases = None,
            Err(e) => return Err(anyhow::Error::new(e).context(format!("read the Lease of lock {l}"))),
        }
    }
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("list pods in namespace {ns}"))?
        .items;
    let claims = Api::<DistributedLockClaim>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("list DistributedLockClaims in namespace {ns}"))?
        .items;
    Ok(explain_set(pod, &locks, leases.as_deref(), &pods, &claims, Timestamp::now()))
}

/// The Leases of the lock named `lock` (in `api`'s namespace): its own (a GET, found even when
/// someone else made it), and for a semaphore every Lease labelled `leasehold.dev/lock: <lock>`
/// (its slot Leases, one LIST).
///
/// # Errors
/// The API's error; 403 when the caller may not read Leases.
async fn lock_leases(api: &Api<Lease>, lock: &str, semaphore: bool) -> Result<Vec<Lease>, kube::Error> {
    let mut leases: Vec<Lease> = api.get_opt(lock).await?.into_iter().collect();
    if semaphore {
        let labelled = api.list(&ListParams::default().labels(&format!("{LEASE_LABEL}={lock}"))).await?;
        leases.extend(labelled.items.into_iter().filter(|l| l.name_any() != lock));
    }
    Ok(leases)
}

fn is_forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403)
}

fn api<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    const NS: &str = "ns";

    fn ts(s: i64) -> String {
        Timestamp::from_second(1_800_000_000 + s).unwrap().to_string()
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_100).unwrap()
    }

    /// A pod created at `created` (seconds after the epoch of these tests).
    fn pod(name: &str, created: i64, annotations: Value, gated: bool) -> Pod {
        let gates = if gated { json!([{"name": SCHEDULING_GATE}]) } else { json!([]) };
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
                         "creationTimestamp": ts(created), "annotations": annotations},
            "spec": {"schedulingGates": gates, "containers": [{"name": "c"}]},
        }))
        .unwrap()
    }

    fn waiter(name: &str, created: i64) -> Pod {
        pod(name, created, json!({LOCK_ANNOTATION: "l"}), true)
    }

    fn holder_pod(name: &str, token: i64) -> Pod {
        let mut p = pod(
            name,
            0,
            json!({LOCK_ANNOTATION: "l", GRANTED_LOCK_ANNOTATION: "l", TOKEN_ANNOTATION: token.to_string()}),
            false,
        );
        p.status = Some(serde_json::from_value(json!({"phase": "Running"})).unwrap());
        p
    }

    fn lock(holder: Option<(&str, i64)>, ready: (&str, &str, &str)) -> DistributedLock {
        let holder = holder.map(|(n, t)| json!({"name": n, "uid": format!("uid-{n}"), "token": t, "since": ts(40)}));
        serde_json::from_value(json!({
            "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLock",
            "metadata": {"name": "l", "namespace": NS, "uid": "lock-uid"},
            "spec": {},
            "status": {"holder": holder, "highestToken": 3, "conditions": [{
                "type": "Ready", "status": ready.0, "reason": ready.1, "message": ready.2,
                "lastTransitionTime": ts(0)}]},
        }))
        .unwrap()
    }

    fn ready_lock(holder: Option<(&str, i64)>) -> DistributedLock {
        lock(holder, ("True", "Reconciled", ""))
    }

    fn lease(holder: Option<(&str, i64)>) -> Lease {
        let mut annotations = json!({TOKEN_ANNOTATION: "3", "leasehold.dev/token-floor": "0"});
        let mut identity = Value::Null;
        if let Some((n, t)) = holder {
            annotations[TOKEN_ANNOTATION] = json!(t.to_string());
            annotations["leasehold.dev/holder-uid"] = json!(format!("uid-{n}"));
            identity = json!(n);
        }
        serde_json::from_value(json!({
            "metadata": {"name": "l", "namespace": NS, "annotations": annotations},
            "spec": {"holderIdentity": identity, "renewTime": "2027-01-15T08:01:30.000000Z"},
        }))
        .unwrap()
    }

    fn claim(name: &str, identity: &str, created: i64) -> DistributedLockClaim {
        serde_json::from_value(json!({
            "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLockClaim",
            "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "creationTimestamp": ts(created)},
            "spec": {"lock": "l", "identity": identity},
        }))
        .unwrap()
    }

    fn world() -> (DistributedLock, Lease, Vec<Pod>, Vec<DistributedLockClaim>) {
        let mut finished = waiter("done", 1);
        finished.status = Some(serde_json::from_value(json!({"phase": "Failed", "reason": "LockBusy"})).unwrap());
        let other_lock = pod("other", 2, json!({LOCK_ANNOTATION: "m"}), true);
        // Created in the same second as `b`: the name breaks the tie, as in the operator.
        let pods = vec![waiter("c", 30), holder_pod("h", 3), waiter("b", 20), waiter("a", 20), finished, other_lock];
        (ready_lock(Some(("h", 3))), lease(Some(("h", 3))), pods, vec![claim("cl", "laptop", 25)])
    }

    /// A standing claim at request 1 (released) whose request 2 only the Lease knows.
    fn standing(name: &str) -> DistributedLockClaim {
        serde_json::from_value(json!({
            "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLockClaim",
            "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "creationTimestamp": ts(5)},
            "spec": {"lock": "l", "identity": "me", "request": 1, "requestTime": ts(5)},
            "status": {"phase": "Granted", "token": 2, "request": 1},
        }))
        .unwrap()
    }

    /// `leasehold status` and `why` read a standing claim's request from the Lease when only the
    /// Lease knows it (an arrival by the Lease, issue 12): hinted, it waits; as holder, it holds.
    #[test]
    fn a_request_known_only_from_the_lease_shows_as_waiting_or_holding() {
        let claims = vec![standing("s")];
        let mut hinted = lease(Some(("h", 3)));
        lease::put_released(&mut hinted, &["uid-s/1".into()]);
        lease::put_next(&mut hinted, Some(&grant::Next { identity: "me".into(), uid: "uid-s/2".into(), token: 4 }));
        let lock = ready_lock(Some(("h", 3)));
        let r = lock_report(&lock, LeaseRead::Found(&hinted), &[holder_pod("h", 3)], &claims, now());
        let w: Vec<(&str, Option<i64>)> = r.waiters.iter().map(|w| (w.name.as_str(), w.request)).collect();
        assert_eq!(w, vec![("s", Some(2))]);
        let slots = [LeaseRead::Found(&hinted)];
        let e = explain_claim(&claims[0], Some(&lock), &slots, &[holder_pod("h", 3)], &claims, None, now());
        assert!(e.text.contains("(request 2)") && e.text.contains("waits for lock l"), "{}", e.text);
        assert!(e.text.contains("names it as the next holder") && e.text.contains("by the Lease"), "{}", e.text);
        // Taken by the Lease: granted, its status not written yet.
        let mut taken = lease(None);
        lease::put_released(&mut taken, &["uid-s/1".into()]);
        let spec = taken.spec.as_mut().unwrap();
        spec.holder_identity = Some("me".into());
        let ann = taken.metadata.annotations.as_mut().unwrap();
        ann.insert("leasehold.dev/holder-uid".into(), "uid-s/2".into());
        ann.insert("leasehold.dev/holder-kind".into(), "Claim".into());
        ann.insert(TOKEN_ANNOTATION.into(), "4".into());
        let slots = [LeaseRead::Found(&taken)];
        let e = explain_claim(&claims[0], Some(&ready_lock(None)), &slots, &[], &claims, None, now());
        assert!(matches!(e.verdict, Verdict::GrantInProgress { .. }), "{}", e.text);
        assert!(e.text.contains("(request 2)"), "{}", e.text);
        let r = lock_report(&ready_lock(None), LeaseRead::Found(&taken), &[], &claims, now());
        assert!(r.waiters.is_empty());
        assert_eq!(r.lease.and_then(|l| l.holder_identity).as_deref(), Some("me"));
    }

    #[test]
    fn the_report_lists_the_holder_and_the_waiters_in_the_operators_order() {
        let (lock, lease, pods, claims) = world();
        let r = lock_report(&lock, LeaseRead::Found(&lease), &pods, &claims, now());
        let h = r.holder.as_ref().unwrap();
        assert_eq!((h.name.as_str(), h.token, h.held_seconds), ("h", 3, Some(60)));
        let l = r.lease.as_ref().unwrap();
        assert_eq!((l.holder_identity.as_deref(), l.token), (Some("h"), 3));
        let order: Vec<(&str, &str, i64)> =
            r.waiters.iter().map(|w| (w.name.as_str(), w.kind.as_str(), w.waited_seconds)).collect();
        assert_eq!(order, [("a", "Pod", 80), ("b", "Pod", 80), ("cl", "Claim", 75), ("c", "Pod", 70)]);
        assert_eq!(r.waiters.iter().map(|w| w.position).collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert_eq!(r.ready.status, "True");
    }

    #[test]
    fn a_holder_the_lease_names_but_still_gated_is_not_a_waiter() {
        let pods = vec![waiter("h", 0), waiter("w", 5)];
        let r = lock_report(&ready_lock(Some(("h", 1))), LeaseRead::Found(&lease(Some(("h", 1)))), &pods, &[], now());
        assert_eq!(r.waiters.iter().map(|w| w.name.as_str()).collect::<Vec<_>>(), ["w"]);
    }

    #[test]
    fn the_table_shows_holder_lease_and_queue() {
        let (lock, lease, pods, claims) = world();
        let r = lock_report(&lock, LeaseRead::Found(&lease), &pods, &claims, now());
        let table = render_table(std::slice::from_ref(&r), false);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("LOCK "), "{table}");
        let row: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(&row[..5], ["l", "h", "3", &ts(40), "1m"], "{table}");
        assert_eq!(row.last(), Some(&"4"), "{table}");
        assert!(lines[1].contains("True"), "{table}");
        let queue: Vec<Vec<&str>> = lines[4..].iter().map(|l| l.split_whitespace().take(3).collect()).collect();
        assert_eq!(queue, [["l", "1", "a"], ["l", "2", "b"], ["l", "3", "cl"], ["l", "4", "c"]], "{table}");
        let all = render_table(&[r], true);
        assert!(all.lines().nth(1).unwrap().starts_with("ns "), "{all}");
    }

    #[test]
    fn the_table_says_why_a_lock_is_not_ready() {
        let lock = lock(None, ("False", "LeaseNotOwned", "Lease l is not controlled by this lock"));
        let table = render_table(&[lock_report(&lock, LeaseRead::Missing, &[], &[], now())], false);
        assert!(table.contains("False (LeaseNotOwned)"), "{table}");
        assert!(table.contains("<no Lease>"), "{table}");
        assert!(
            table.contains("lock l is not Ready (LeaseNotOwned): Lease l is not controlled by this lock"),
            "{table}"
        );
        assert!(!table.contains("POSITION"), "no queue table without waiters: {table}");
    }

    fn why(name: &str, lock: Option<&DistributedLock>, lease: Option<&Lease>, pods: &[Pod]) -> Explanation {
        let pod = pods.iter().find(|p| p.name_any() == name).unwrap();
        explain(pod, lock, LeaseRead::of(lease), pods, &[], now())
    }

    #[test]
    fn a_waiter_is_told_its_position_and_who_is_ahead() {
        let (lock, lease, pods, claims) = world();
        let pod = pods.iter().find(|p| p.name_any() == "c").unwrap();
        let e = explain(pod, Some(&lock), LeaseRead::Found(&lease), &pods, &claims, now());
        assert_eq!(e.verdict, Verdict::Waiting { lock: "l".into(), position: 4 });
        assert!(e.text.contains("for lock l, held by pod h with fencing token 3 for 1m"), "{}", e.text);
        assert!(e.text.contains("position 4 of 4 in the queue, behind a, b, claim cl (laptop)"), "{}", e.text);
        assert!(e.text.contains("waiting 1m10s since it was created"), "{}", e.text);
        let first = why("a", Some(&lock), Some(&lease), &pods);
        assert!(first.text.contains("position 1 of 3 in the queue: next to be granted"), "{}", first.text);
    }

    #[test]
    fn the_holder_is_told_its_token() {
        let (lock, lease, pods, _) = world();
        let e = why("h", Some(&lock), Some(&lease), &pods);
        assert_eq!(e.verdict, Verdict::Holds { lock: "l".into(), token: 3 });
        assert!(e.text.contains("holds lock l with fencing token 3 (granted 1m ago)"), "{}", e.text);
    }

    #[test]
    fn a_missing_lock_is_named() {
        let pods = vec![waiter("w", 0)];
        let e = why("w", None, None, &pods);
        assert_eq!(e.verdict, Verdict::LockMissing { lock: "l".into() });
        assert!(e.text.contains("lock l, which does not exist in namespace ns"), "{}", e.text);
    }

    #[test]
    fn a_gate_without_a_lock_annotation_never_opens() {
        let pods = vec![pod("g", 0, json!({}), true), pod("e", 0, json!({LOCK_ANNOTATION: " "}), true)];
        let e = why("g", None, None, &pods);
        assert_eq!(e.verdict, Verdict::NoLockAnnotation);
        assert!(
            e.text.contains("has no leasehold.dev/lock annotation, so no operator will ever ungate it"),
            "{}",
            e.text
        );
        assert!(why("e", None, None, &pods).text.contains("an empty leasehold.dev/lock annotation"));
    }

    #[test]
    fn a_lock_annotation_without_gate_or_grant_runs_unlocked() {
        let (lock, lease, mut pods, _) = world();
        pods.push(pod("free", 0, json!({LOCK_ANNOTATION: "l"}), false));
        pods.push(pod("plain", 0, json!({}), false));
        let e = why("free", Some(&lock), Some(&lease), &pods);
        assert_eq!(e.verdict, Verdict::UngatedWithoutGrant { lock: "l".into() });
        assert!(e.text.contains("runs without it"), "{}", e.text);
        assert_eq!(why("plain", None, None, &pods).verdict, Verdict::NotGated);
    }

    #[test]
    fn a_holder_the_lease_no_longer_names_has_lost_its_grant() {
        let (lock, _, pods, _) = world();
        let e = why("h", Some(&lock), Some(&lease(Some(("c", 4)))), &pods);
        assert_eq!(e.verdict, Verdict::LostGrant { lock: "l".into(), token: 3 });
        assert!(e.text.contains("granted lock l with fencing token 3, but the Lease now names c"), "{}", e.text);
    }

    #[test]
    fn malformed_policy_annotations_are_reported() {
        let (lock, lease, mut pods, _) = world();
        pods.push(pod(
            "bad",
            50,
            json!({LOCK_ANNOTATION: "l", policy::ON_BUSY_ANNOTATION: "later", policy::MAX_WAIT_ANNOTATION: "banana"}),
            true,
        ));
        let e = why("bad", Some(&lock), Some(&lease), &pods);
        assert!(matches!(e.verdict, Verdict::Waiting { position: 4, .. }), "{e:?}");
        assert!(e.text.contains(r#"on-busy must be "wait" or "skip", got "later""#), "{}", e.text);
        assert!(
            e.text.contains(r#"max-wait must be a positive duration such as "90s" or "10m", got "banana""#),
            "{}",
            e.text
        );
        assert!(e.text.contains("the operator uses the default"), "{}", e.text);
    }

    #[test]
    fn a_lock_that_is_not_ready_says_why() {
        let lock = lock(None, ("False", "NamespaceTerminating", "namespace ns is being deleted"));
        let pods = vec![waiter("w", 0)];
        let e = why("w", Some(&lock), Some(&lease(None)), &pods);
        assert!(matches!(e.verdict, Verdict::Waiting { position: 1, .. }), "{e:?}");
        assert!(e.text.contains("which is free"), "{}", e.text);
        assert!(e.text.contains("not Ready (NamespaceTerminating: namespace ns is being deleted)"), "{}", e.text);
        assert!(!e.text.contains("grants it on its next step"), "a lock that is not Ready grants nothing: {}", e.text);
    }

    #[test]
    fn a_waiter_that_gave_up_is_done() {
        let (lock, lease, pods, _) = world();
        let e = why("done", Some(&lock), Some(&lease), &pods);
        assert_eq!(e.verdict, Verdict::Done);
        assert!(e.text.contains("gave up waiting for lock l (LockBusy"), "{}", e.text);
    }

    #[test]
    fn without_read_access_to_the_lease_the_locks_status_names_the_holder() {
        let (lock, _, mut pods, claims) = world();
        // The holder, granted but still gated: only the holder's UID keeps it out of the queue.
        pods.push(waiter("h", 0));
        pods.retain(|p| p.name_any() != "h" || p.status.is_none());
        let r = lock_report(&lock, LeaseRead::Forbidden, &pods, &claims, now());
        assert!(r.lease_forbidden && r.lease.is_none());
        assert_eq!(r.waiters.iter().map(|w| w.name.as_str()).collect::<Vec<_>>(), ["a", "b", "cl", "c"]);
        let table = render_table(std::slice::from_ref(&r), false);
        assert!(table.contains("<forbidden>"), "{table}");
        assert_eq!(serde_json::to_value(&r).unwrap()["leaseForbidden"], true);
        let c = pods.iter().find(|p| p.name_any() == "c").unwrap();
        let e = explain(c, Some(&lock), LeaseRead::Forbidden, &pods, &claims, now());
        assert!(e.text.contains("held by pod h with fencing token 3"), "{}", e.text);
        assert!(e.text.contains("could not be read, 403 Forbidden"), "{}", e.text);
    }

    // Semaphores (`spec.maxHolders`): slot k's Lease is `l-slot-k` (slot 0: `l`).

    fn sem_lock(max: i32, holders: &[(&str, i64, u32)]) -> DistributedLock {
        let mut l = ready_lock(holders.first().map(|(n, t, _)| (*n, *t)));
        l.spec.max_holders = Some(max);
        let status = l.status.as_mut().unwrap();
        status.holders = holders
            .iter()
            .map(|(n, t, k)| crate::crd::SlotHolderStatus {
                name: n.to_string(),
                uid: Some(format!("uid-{n}")),
                token: *t,
                slot: *k,
            })
            .collect();
        l
    }

    /// Slot `k`'s Lease, granted at second 40 (acquireTime).
    fn slot_lease(k: u32, holder: Option<(&str, i64)>) -> Lease {
        let mut l = lease(holder);
        l.metadata.name = Some(lease::slot_lease_name("l", k));
        l.spec.as_mut().unwrap().acquire_time = holder.map(|_| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(Timestamp::from_second(1_800_000_040).unwrap())
        });
        l
    }

    fn claim_lease(k: u32, claim: &str, identity: &str, token: i64) -> Lease {
        let mut l = slot_lease(k, Some((identity, token)));
        let ann = l.metadata.annotations.as_mut().unwrap();
        ann.insert("leasehold.dev/holder-uid".into(), format!("uid-{claim}"));
        ann.insert("leasehold.dev/holder-kind".into(), "Claim".into());
        l
    }

    fn slot_holder_pod(name: &str, token: i64, slot: u32) -> Pod {
        let mut p = holder_pod(name, token);
        p.metadata.annotations.as_mut().unwrap().insert(SLOT_ANNOTATION.into(), slot.to_string());
        p
    }

    fn granted_claim(name: &str, identity: &str, token: i64, slot: u32) -> DistributedLockClaim {
        let mut c = claim(name, identity, 0);
        c.status = Some(
            serde_json::from_value(json!({"phase": "Granted", "token": token, "slot": slot,
                "leaseName": lease::slot_lease_name("l", slot)}))
            .unwrap(),
        );
        c
    }

    /// maxHolders 2: h0 in slot 0 (token 4), h1 in slot 1 (token 5), waiters w1 (20 s), claim cl
    /// (25 s), w2 (30 s).
    fn sem_world() -> (DistributedLock, Vec<Lease>, Vec<Pod>, Vec<DistributedLockClaim>) {
        let lock = sem_lock(2, &[("h0", 4, 0), ("h1", 5, 1)]);
        let leases = vec![slot_lease(0, Some(("h0", 4))), slot_lease(1, Some(("h1", 5)))];
        let pods = vec![slot_holder_pod("h0", 4, 0), slot_holder_pod("h1", 5, 1), waiter("w2", 30), waiter("w1", 20)];
        (lock, leases, pods, vec![claim("cl", "laptop", 25)])
    }

    fn slots<'a>(lock: &DistributedLock, leases: &'a [Lease]) -> Vec<LeaseRead<'a>> {
        slot_reads(NS, "l", Some(lock), Some(leases))
    }

    #[test]
    fn a_semaphores_report_lists_every_slots_holder_and_none_of_them_waits() {
        let (lock, leases, mut pods, claims) = sem_world();
        // h1 granted but still gated: the slot Lease naming it keeps it out of the queue.
        pods.retain(|p| p.name_any() != "h1");
        pods.push(waiter("h1", 0));
        let r = lock_report_slots(&lock, &slots(&lock, &leases), &pods, &claims, None, now());
        let holders: Vec<(u32, &str, i64, &str, Option<&str>)> = r
            .holders
            .iter()
            .map(|h| (h.slot, h.name.as_str(), h.token, h.lease_name.as_str(), h.kind.as_deref()))
            .collect();
        assert_eq!(holders, [(0, "h0", 4, "l", Some("Pod")), (1, "h1", 5, "l-slot-1", Some("Pod"))]);
        assert_eq!(r.holders[1].held_seconds, Some(60));
        assert_eq!(r.waiters.iter().map(|w| w.name.as_str()).collect::<Vec<_>>(), ["w1", "cl", "w2"]);
        let doc = serde_json::to_value(&r).unwrap();
        assert_eq!(doc["maxHolders"], 2, "{doc}");
        assert_eq!(
            doc["holders"][1],
            json!({"slot": 1, "leaseName": "l-slot-1", "name": "h1", "kind": "Pod",
            "token": 5, "since": ts(40), "heldSeconds": 60, "renewedSecondsAgo": 10}),
            "{doc}"
        );
    }

    #[test]
    fn a_single_holder_locks_json_has_no_semaphore_fields() {
        let (lock, lease, pods, claims) = world();
        let doc = serde_json::to_value(lock_report(&lock, LeaseRead::Found(&lease), &pods, &claims, now())).unwrap();
        assert!(doc.get("maxHolders").is_none() && doc.get("holders").is_none(), "{doc}");
    }

    #[test]
    fn the_table_shows_a_semaphores_occupancy_and_a_row_per_slot() {
        let (lock, leases, pods, claims) = sem_world();
        let r = lock_report_slots(&lock, &slots(&lock, &leases), &pods, &claims, None, now());
        let table = render_table(std::slice::from_ref(&r), false);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[1].starts_with("l ") && lines[1].contains(" 2/2 holders "), "{table}");
        assert!(lines[1].trim_end().ends_with(" 3"), "three waiting: {table}");
        let at = lines.iter().position(|l| l.starts_with("LOCK   SLOT   HOLDER")).expect("a slot table");
        let rows: Vec<Vec<&str>> =
            lines[at + 1..at + 3].iter().map(|l| l.split_whitespace().take(6).collect()).collect();
        assert_eq!(rows, [["l", "0", "h0", "Pod", "4", "l"], ["l", "1", "h1", "Pod", "5", "l-slot-1"]], "{table}");
        assert!(table.contains("WAITER"), "{table}");
        // A single-holder lock beside it keeps its own row, and has no slot rows.
        let (single, lease, pods, claims) = world();
        let both = render_table(&[lock_report(&single, LeaseRead::Found(&lease), &pods, &claims, now()), r], false);
        assert_eq!(both.lines().filter(|l| l.starts_with("l ") && l.contains(" h ")).count(), 1, "{both}");
        assert_eq!(both.lines().filter(|l| l.split_whitespace().nth(2) == Some("h")).count(), 0, "{both}");
    }

    #[test]
    fn a_semaphore_holder_is_told_its_slot_token_and_lease() {
        let (lock, leases, pods, claims) = sem_world();
        let h1 = pods.iter().find(|p| p.name_any() == "h1").unwrap();
        let e = explain_slots(h1, Some(&lock), &slots(&lock, &leases), &pods, &claims, None, now());
        assert_eq!(e.verdict, Verdict::HoldsSlot { lock: "l".into(), token: 5, slot: 1 });
        assert!(
            e.text.contains("holds lock l with fencing token 5 in slot 1 of 2 (Lease l-slot-1, granted 1m ago)"),
            "{}",
            e.text
        );
    }

    #[test]
    fn a_semaphore_holder_whose_slot_lease_moved_on_has_lost_its_grant() {
        let (lock, mut leases, pods, claims) = sem_world();
        let h1 = pods.iter().find(|p| p.name_any() == "h1").unwrap();
        let lost = Verdict::LostSlot { lock: "l".into(), token: 5, slot: 1 };
        leases[1] = slot_lease(1, Some(("w1", 6)));
        let e = explain_slots(h1, Some(&lock), &slots(&lock, &leases), &pods, &claims, None, now());
        assert_eq!(e.verdict, lost);
        assert!(e.text.contains("fencing token 5 in slot 1, but its Lease l-slot-1 now names w1"), "{}", e.text);
        leases[1] = slot_lease(1, None);
        let e = explain_slots(h1, Some(&lock), &slots(&lock, &leases), &pods, &claims, None, now());
        assert!(e.verdict == lost && e.text.contains("its Lease l-slot-1 now names nobody"), "{}", e.text);
        leases.truncate(1);
        let e = explain_slots(h1, Some(&lock), &slots(&lock, &leases), &pods, &claims, None, now());
        assert!(e.verdict == lost && e.text.contains("its Lease l-slot-1 does not exist"), "{}", e.text);
    }

    #[test]
    fn a_semaphore_waiter_is_told_its_place_and_who_holds_every_slot() {
        let (lock, leases, pods, claims) = sem_world();
        let w2 = pods.iter().find(|p| p.name_any() == "w2").unwrap();
        let e = explain_slots(w2, Some(&lock), &slots(&lock, &leases), &pods, &claims, None, now());
        assert_eq!(e.verdict, Verdict::Waiting { lock: "l".into(), position: 3 });
        assert!(
            e.text.contains(
                "for lock l, a semaphore whose 2 slots are all held: slot 0 by pod h0 (token 4), slot 1 by pod h1 (token 5). It is at position 3 of 3 in the queue, behind w1, claim cl (laptop)"
            ),
            "{}",
            e.text
        );
        let w1 = pods.iter().find(|p| p.name_any() == "w1").unwrap();
        let e = explain_slots(w1, Some(&lock), &slots(&lock, &leases), &pods, &claims, None, now());
        assert!(
            e.text.contains("position 1 of 3 in the queue: next to be granted when a slot is released"),
            "{}",
            e.text
        );
        assert!(!e.text.contains("is free"), "{}", e.text);
    }

    #[test]
    fn a_semaphore_with_a_free_slot_grants_the_first_waiter_next() {
        let (_, mut leases, mut pods, claims) = sem_world();
        leases[1] = slot_lease(1, None);
        pods.retain(|p| p.name_any() != "h1");
        let lock = sem_lock(2, &[("h0", 4, 0)]);
        let w1 = pods.iter().find(|p| p.name_any() == "w1").unwrap();
        let e = explain_slots(w1, Some(&lock), &slots(&lock, &leases), &pods, &claims, None, now());
        assert!(e.text.contains("a semaphore with 1 of its 2 slots held: slot 0 by pod h0 (token 4)"), "{}", e.text);
        assert!(e.text.contains("next to be granted (waiting"), "{}", e.text);
        assert!(e.text.contains("A slot is free, so the operator grants it on its next step"), "{}", e.text);
        let w2 = pods.iter().find(|p| p.name_any() == "w2").unwrap();
        let e = explain_slots(w2, Some(&lock), &slots(&lock, &leases), &pods, &claims, None, now());
        assert!(!e.text.contains("A slot is free"), "only the first waiter takes the one free slot: {}", e.text);
    }

    #[test]
    fn a_claim_is_explained_like_a_pod() {
        let (lock, mut leases, pods, mut claims) = sem_world();
        let cl = claims[0].clone();
        let e = explain_claim(&cl, Some(&lock), &slots(&lock, &leases), &pods, &claims, None, now());
        assert_eq!(e.verdict, Verdict::Waiting { lock: "l".into(), position: 2 });
        assert!(
            e.text.starts_with("Claim cl (laptop) waits for lock l, a semaphore whose 2 slots are all held"),
            "{}",
            e.text
        );
        assert!(e.text.contains("position 2 of 3 in the queue, behind w1 (waiting 1m15s"), "{}", e.text);
        // The claim holds slot 1 instead of h1.
        let held = granted_claim("cl", "laptop", 6, 1);
        claims[0] = held.clone();
        leases[1] = claim_lease(1, "cl", "laptop", 6);
        let pods: Vec<Pod> = pods.into_iter().filter(|p| p.name_any() != "h1").collect();
        let e = explain_claim(&held, Some(&lock), &slots(&lock, &leases), &pods, &claims, None, now());
        assert_eq!(e.verdict, Verdict::HoldsSlot { lock: "l".into(), token: 6, slot: 1 });
        assert!(
            e.text.contains("Claim cl (laptop) holds lock l with fencing token 6 in slot 1 of 2 (Lease l-slot-1"),
            "{}",
            e.text
        );
        assert!(e.text.contains("no renewal for 15 s"), "{}", e.text);
        let w1 = pods.iter().find(|p| p.name_any() == "w1").unwrap();
        let e = explain_slots(w1, Some(&lock), &slots(&lock, &leases), &pods, &claims, None, now());
        assert!(e.text.contains("slot 1 by claim holder laptop (token 6)"), "{}", e.text);
        // Its slot Lease moved on.
        leases[1] = slot_lease(1, Some(("w1", 7)));
        let e = explain_claim(&held, Some(&lock), &slots(&lock, &leases), &pods, &claims, None, now());
        assert_eq!(e.verdict, Verdict::LostSlot { lock: "l".into(), token: 6, slot: 1 });
        assert!(e.text.contains("but its Lease l-slot-1 now names w1"), "{}", e.text);
        // Rejected: done.
        let mut rejected = claim("r", "ci", 1);
        rejected.status = Some(serde_json::from_value(json!({"phase": "Rejected", "reason": "LockBusy"})).unwrap());
        let e = explain_claim(&rejected, Some(&lock), &slots(&lock, &leases), &pods, &claims, None, now());
        assert_eq!(e.verdict, Verdict::Done);
        assert!(e.text.contains("Claim r (ci) gave up waiting for lock l (LockBusy"), "{}", e.text);
    }

    #[test]
    fn without_read_access_to_leases_a_semaphores_holders_come_from_its_status() {
        let (lock, _, pods, claims) = sem_world();
        let forbidden = slot_reads(NS, "l", Some(&lock), None);
        assert_eq!(forbidden.len(), 2);
        let r = lock_report_slots(&lock, &forbidden, &pods, &claims, None, now());
        let holders: Vec<(u32, &str, Option<&str>)> =
            r.holders.iter().map(|h| (h.slot, h.name.as_str(), h.kind.as_deref())).collect();
        assert_eq!(holders, [(0, "h0", None), (1, "h1", None)]);
        assert_eq!(r.waiters.len(), 3);
        let table = render_table(&[r], false);
        assert!(table.contains("<forbidden>"), "{table}");
        let w1 = pods.iter().find(|p| p.name_any() == "w1").unwrap();
        let e = explain_slots(w1, Some(&lock), &forbidden, &pods, &claims, None, now());
        assert!(e.text.contains("slot 1 by pod h1 (token 5)"), "{}", e.text);
        assert!(e.text.contains("Leases of lock l could not be read, 403 Forbidden"), "{}", e.text);
    }

    #[test]
    fn slot_reads_cover_holders_above_a_lowered_limit_and_only_this_locks_leases() {
        let lock = sem_lock(1, &[("h0", 4, 0)]);
        let mut other_ns = slot_lease(1, None);
        other_ns.metadata.namespace = Some("elsewhere".into());
        let mut other_lock = slot_lease(1, None);
        other_lock.metadata.name = Some("m-slot-1".into());
        let leases = vec![slot_lease(0, Some(("h0", 4))), slot_lease(2, Some(("h2", 6))), other_ns, other_lock];
        let reads = slots(&lock, &leases);
        assert_eq!(reads.len(), 3, "slots 0..=2: slot 2 still holds after maxHolders was lowered to 1");
        assert!(matches!(reads[1], LeaseRead::Missing), "{:?}", reads[1]);
        assert!(matches!(reads[2], LeaseRead::Found(l) if l.name_any() == "l-slot-2"));
        // A single-holder lock reads slot 0 only.
        assert_eq!(slot_reads(NS, "l", Some(&ready_lock(None)), Some(&leases)).len(), 1);
    }

    // Lock sets (`leasehold.dev/locks`): locks a and b, their Leases named like them.

    fn set_lock(name: &str, holder: Option<(&str, i64)>) -> DistributedLock {
        let mut l = ready_lock(holder);
        l.metadata.name = Some(name.into());
        l
    }

    fn set_lease(name: &str, holder: Option<(&str, i64)>) -> Lease {
        let mut l = lease(holder);
        l.metadata.name = Some(name.into());
        l
    }

    /// A pod created at `created` that asks for the lock set `set`, with these per-lock tokens
    /// recorded (`<lock>.locks.leasehold.dev/fencing-token`); running when not gated.
    fn set_pod(name: &str, created: i64, set: &str, tokens: &[(&str, i64)], gated: bool) -> Pod {
        let mut ann = json!({LOCKS_ANNOTATION: set});
        for (l, t) in tokens {
            ann[lock_token_annotation(l)] = json!(t.to_string());
        }
        let mut p = pod(name, created, ann, gated);
        if !gated {
            p.status = Some(serde_json::from_value(json!({"phase": "Running"})).unwrap());
        }
        p
    }

    /// A running pod that holds lock `lock` alone with `token`.
    fn single_holder(name: &str, lock: &str, token: i64) -> Pod {
        let mut p = holder_pod(name, token);
        let ann = p.metadata.annotations.as_mut().unwrap();
        ann.insert(LOCK_ANNOTATION.into(), lock.into());
        ann.insert(GRANTED_LOCK_ANNOTATION.into(), lock.into());
        p
    }

    fn set_why(name: &str, locks: &[DistributedLock], leases: Option<&[Lease]>, pods: &[Pod]) -> Explanation {
        let pod = pods.iter().find(|p| p.name_any() == name).unwrap();
        explain_set(pod, locks, leases, pods, &[], now())
    }

    fn lock_state(e: &Explanation, lock: &str) -> SetLockState {
        let locks = match &e.verdict {
            Verdict::WaitsForSet { locks } | Verdict::SetNotServed { locks, .. } => locks,
            v => panic!("no per-lock states in {v:?}"),
        };
        locks.iter().find(|s| s.lock == lock).map(|s| s.state.clone()).expect("the lock is in the set")
    }

    /// m wants {a, b} (created at 10): a is reserved for it (token 4, recorded), b is held by the
    /// running h (token 3); w waits for b (created at 20), v for a (created at 30).
    fn set_world() -> (Vec<DistributedLock>, Vec<Lease>, Vec<Pod>) {
        let locks = vec![set_lock("a", Some(("m", 4))), set_lock("b", Some(("h", 3)))];
        let leases = vec![set_lease("a", Some(("m", 4))), set_lease("b", Some(("h", 3)))];
        let mut w = waiter("w", 20);
        w.metadata.annotations.as_mut().unwrap().insert(LOCK_ANNOTATION.into(), "b".into());
        let mut v = waiter("v", 30);
        v.metadata.annotations.as_mut().unwrap().insert(LOCK_ANNOTATION.into(), "a".into());
        let pods = vec![set_pod("m", 10, "a, b", &[("a", 4)], true), single_holder("h", "b", 3), w, v];
        (locks, leases, pods)
    }

    /// `leasehold status` marks a lock reserved for a gated multi-lock pod as tentative.
    #[test]
    fn status_shows_a_tentative_holder_as_reserved() {
        let (locks, leases, pods) = set_world();
        let report = |i: usize| {
            let slots = [LeaseRead::Found(&leases[i])];
            lock_report_slots(&locks[i], &slots, &pods, &[], Some(&locks), now())
        };
        let (a, b) = (report(0), report(1));
        assert!(a.holder.as_ref().is_some_and(|h| h.name == "m" && h.tentative), "{:?}", a.holder);
        assert!(b.holder.as_ref().is_some_and(|h| h.name == "h" && !h.tentative), "{:?}", b.holder);
        let table = render_table(&[a.clone(), b], false);
        assert!(table.lines().any(|l| l.starts_with("a ") && l.contains("m (reserved)")), "{table}");
        assert!(table.lines().any(|l| l.starts_with("b ") && !l.contains("reserved")), "{table}");
        assert_eq!(serde_json::to_value(&a).unwrap()["holder"]["tentative"], json!(true));
    }

    /// The queue leaves out what the operator leaves out: a gated pod wanting {b, x} with x
    /// missing (and nothing of b recorded) is not ahead of w in b's queue, nor counted in it.
    #[test]
    fn queue_positions_skip_pods_whose_set_is_not_served() {
        let (locks, leases, mut pods) = set_world();
        pods.push(set_pod("unserved", 5, "b,x", &[], true));
        let q = |locks: Option<&[DistributedLock]>| -> Vec<String> {
            queue("ns", "b", &["uid-h"], &pods, &[], locks, None).into_iter().map(|c| c.name).collect()
        };
        assert_eq!(q(Some(&locks)), ["m", "w"]);
        assert_eq!(q(None), ["unserved", "m", "w"], "without the locks nobody is left out");
        // Once x exists, it is served, and first.
        let mut with_x = locks.clone();
        with_x.push(set_lock("x", None));
        assert_eq!(q(Some(&with_x)), ["unserved", "m", "w"]);
        // w's explanation counts the same queue.
        let e = set_why("w", &locks, Some(&leases), &pods);
        assert!(matches!(e.verdict, Verdict::Waiting { position: 2, .. }), "{e:?}");
    }

    #[test]
    fn a_set_pod_is_told_lock_by_lock_that_a_is_reserved_and_where_it_waits_for_b() {
        let (locks, leases, pods) = set_world();
        let e = set_why("m", &locks, Some(&leases), &pods);
        let reserved = SetLockState::Reserved { token: 4, recorded: true };
        let waiting = SetLockState::Waiting { position: 1, of: 2, withdrawn: None };
        assert_eq!(
            e.verdict,
            Verdict::WaitsForSet {
                locks: vec![
                    SetLock { lock: "a".into(), state: reserved },
                    SetLock { lock: "b".into(), state: waiting }
                ]
            }
        );
        let lines: Vec<&str> = e.text.lines().collect();
        assert_eq!(lines.len(), 4, "a first line, one per lock, the verdict: {}", e.text);
        assert!(lines[0].starts_with("Pod m waits at the leasehold.dev/lock scheduling gate for its lock set a, b"));
        assert!(
            lines[1].starts_with("- lock a: reserved for it, tentative token 4 (its Lease names the pod"),
            "{}",
            e.text
        );
        assert!(lines[1].contains("recorded on the pod in a.locks.leasehold.dev/fencing-token"), "{}", e.text);
        assert!(
            lines[2].starts_with(
                "- lock b: waiting, held by pod h with fencing token 3 for 1m. It is at position 1 of 2 in the queue: \
                 next to be granted"
            ),
            "{}",
            e.text
        );
        assert_eq!(
            lines[3],
            "It waits for 1 of its 2 locks: b (position 1 of 2 in its queue). Lock a is reserved for it meanwhile."
        );
        // Not recorded on the pod yet: the operator records it next.
        let mut pods = pods;
        pods[0] = set_pod("m", 10, "a, b", &[], true);
        let e = set_why("m", &locks, Some(&leases), &pods);
        assert_eq!(lock_state(&e, "a"), SetLockState::Reserved { token: 4, recorded: false });
        assert!(e.text.contains("the operator records the token on the pod next"), "{}", e.text);
    }

    #[test]
    fn a_single_lock_waiter_is_told_its_lock_is_reserved_for_a_set_pod_not_held() {
        let (locks, leases, pods) = set_world();
        let v = pods.iter().find(|p| p.name_any() == "v").unwrap().clone();
        let e = explain(&v, Some(&locks[0]), LeaseRead::Found(&leases[0]), &pods, &[], now());
        assert_eq!(e.verdict, Verdict::Waiting { lock: "a".into(), position: 1 });
        assert!(
            e.text.contains(
                "for lock a, reserved for pod m (it waits for the other locks of its set), tentative token 4 for 1m"
            ),
            "{}",
            e.text
        );
        assert!(!e.text.contains("held by"), "{}", e.text);
        // Ungated, m holds a: held by, as for any holder.
        let mut pods = pods;
        pods[0] = set_pod("m", 10, "a, b", &[("a", 4), ("b", 5)], false);
        let e = explain(&v, Some(&locks[0]), LeaseRead::Found(&leases[0]), &pods, &[], now());
        assert!(e.text.contains("for lock a, held by pod m with fencing token 4"), "{}", e.text);
    }

    #[test]
    fn a_set_pod_holding_every_lock_is_told_each_token() {
        let locks = vec![set_lock("a", Some(("m", 4))), set_lock("b", Some(("m", 5)))];
        let leases = vec![set_lease("a", Some(("m", 4))), set_lease("b", Some(("m", 5)))];
        let pods = vec![set_pod("m", 10, "b,a", &[("a", 4), ("b", 5)], false)];
        let e = set_why("m", &locks, Some(&leases), &pods);
        assert_eq!(e.verdict, Verdict::HoldsSet { tokens: vec![("a".into(), 4), ("b".into(), 5)] });
        let lines: Vec<&str> = e.text.lines().collect();
        assert_eq!(lines[1], "- lock a: held, fencing token 4 (granted 1m ago).", "{}", e.text);
        assert_eq!(lines[2], "- lock b: held, fencing token 5 (granted 1m ago).", "{}", e.text);
        assert!(
            lines[3].starts_with(
                "It holds every lock of its set (a with fencing token 4, b with fencing token 5) and runs"
            ),
            "{}",
            e.text
        );
        // Finished: done, with the tokens it held.
        let mut done = pods[0].clone();
        done.status = Some(serde_json::from_value(json!({"phase": "Succeeded"})).unwrap());
        let e = explain_set(&done, &locks, Some(&leases), &[], &[], now());
        assert_eq!(e.verdict, Verdict::Done);
        assert!(e.text.contains("It held a with fencing token 4, b with fencing token 5."), "{}", e.text);
    }

    #[test]
    fn a_running_set_pod_whose_lease_moved_on_or_that_was_never_gated_is_told_so() {
        let locks = vec![set_lock("a", Some(("m", 4))), set_lock("b", Some(("x", 6)))];
        let leases = vec![set_lease("a", Some(("m", 4))), set_lease("b", Some(("x", 6)))];
        let pods = vec![set_pod("m", 10, "a,b", &[("a", 4), ("b", 5)], false)];
        let e = set_why("m", &locks, Some(&leases), &pods);
        assert_eq!(e.verdict, Verdict::LostGrant { lock: "b".into(), token: 5 });
        assert!(e.text.contains("- lock b: granted with fencing token 5, but its Lease b now names x."), "{}", e.text);
        // Never gated: a's Lease names it (held), b was never granted.
        let pods = vec![set_pod("m", 10, "a,b", &[], false)];
        let e = set_why("m", &locks, Some(&leases), &pods);
        assert_eq!(e.verdict, Verdict::UngatedWithoutGrant { lock: "b".into() });
        assert!(
            e.text.contains("- lock b: never granted (no b.locks.leasehold.dev/fencing-token on the pod"),
            "{}",
            e.text
        );
        assert!(e.text.contains("It runs without lock b"), "{}", e.text);
    }

    #[test]
    fn a_withdrawn_grant_is_named_and_the_pod_waits_again() {
        // a was reserved for m with token 4 and taken back for the older o, who holds it now.
        let locks = vec![set_lock("a", Some(("o", 5))), set_lock("b", Some(("h", 3)))];
        let mut leases = vec![set_lease("a", Some(("o", 5))), set_lease("b", Some(("h", 3)))];
        let mut m = set_pod("m", 10, "a,b", &[], true);
        m.metadata.annotations.as_mut().unwrap().insert(lock_withdrawn_annotation("a"), "4".into());
        let pods = vec![m, single_holder("o", "a", 5), single_holder("h", "b", 3)];
        let e = set_why("m", &locks, Some(&leases), &pods);
        assert_eq!(lock_state(&e, "a"), SetLockState::Waiting { position: 1, of: 1, withdrawn: Some(4) });
        assert!(
            e.text.contains(
                "- lock a: waiting again (a tentative grant of it, token 4, was taken back: \
                 a.locks.leasehold.dev/withdrawn), held by pod o with fencing token 5"
            ),
            "{}",
            e.text
        );
        assert!(e.text.contains("It waits for 2 of its 2 locks: a (position 1 of 1 in its queue), b ("), "{}", e.text);
        // Withdrawn on the pod while the Lease still names it with that token: not reserved any more.
        leases[0] = set_lease("a", Some(("m", 4)));
        let e = set_why("m", &locks, Some(&leases), &pods);
        assert!(matches!(lock_state(&e, "a"), SetLockState::Waiting { withdrawn: Some(4), .. }), "{:?}", e.verdict);
    }

    #[test]
    fn a_reservation_an_older_waiter_is_ahead_of_is_taken_back() {
        let (locks, leases, mut pods) = set_world();
        let mut o = waiter("o", 1);
        o.metadata.annotations.as_mut().unwrap().insert(LOCK_ANNOTATION.into(), "a".into());
        pods.push(o);
        let e = set_why("m", &locks, Some(&leases), &pods);
        assert!(
            e.text.contains("An older waiter, o, is first in lock a's queue: the operator takes this grant back"),
            "{}",
            e.text
        );
    }

    #[test]
    fn every_lock_reserved_means_the_operator_ungates_next() {
        let locks = vec![set_lock("a", Some(("m", 4))), set_lock("b", Some(("m", 5)))];
        let leases = vec![set_lease("a", Some(("m", 4))), set_lease("b", Some(("m", 5)))];
        let pods = vec![set_pod("m", 10, "a,b", &[("a", 4)], true)];
        let e = set_why("m", &locks, Some(&leases), &pods);
        assert_eq!(lock_state(&e, "b"), SetLockState::Reserved { token: 5, recorded: false });
        assert!(matches!(e.verdict, Verdict::WaitsForSet { .. }), "{:?}", e.verdict);
        assert!(e.text.ends_with("removes the gate on its next step; if it stays gated, check the operator's log."));
    }

    #[test]
    fn a_set_with_a_missing_lock_or_a_semaphore_is_not_served_with_the_operators_message() {
        let locks = vec![set_lock("a", None)];
        let leases = vec![set_lease("a", None)];
        let pods = vec![set_pod("m", 10, "a,x", &[], true)];
        let e = set_why("m", &locks, Some(&leases), &pods);
        let why = "DistributedLock x does not exist in namespace ns";
        let reason = crate::controller::lock_set_not_served_note(&["a".into(), "x".into()], why);
        assert_eq!(
            e.verdict,
            Verdict::SetNotServed {
                reason: reason.clone(),
                locks: vec![
                    SetLock { lock: "a".into(), state: SetLockState::NotQueued },
                    SetLock { lock: "x".into(), state: SetLockState::NotServed { why: why.into() } },
                ]
            }
        );
        assert!(e.text.contains(&format!("(Warning Event LockSetNotServed: {reason})")), "{}", e.text);
        assert!(e.text.contains("- lock a: not queued: the operator leaves the pod out"), "{}", e.text);
        assert!(e.text.contains(&format!("- lock x: not served: {why}.")), "{}", e.text);
        // a reserved for it before x went away: taken back.
        let leases = vec![set_lease("a", Some(("m", 4)))];
        let e = set_why("m", &locks, Some(&leases), &pods);
        assert_eq!(lock_state(&e, "a"), SetLockState::Reserved { token: 4, recorded: false });
        assert!(e.text.contains("Its set is not served, so the operator takes this grant back"), "{}", e.text);
        // x a semaphore.
        let mut x = set_lock("x", None);
        x.spec.max_holders = Some(2);
        let e = set_why("m", &[set_lock("a", None), x], Some(&[]), &pods);
        assert!(
            matches!(&e.verdict, Verdict::SetNotServed { reason, .. } if reason.contains("DistributedLock x is a semaphore")),
            "{:?}",
            e.verdict
        );
    }

    #[test]
    fn without_read_access_to_leases_a_set_pods_locks_come_from_their_status() {
        let (locks, _, pods) = set_world();
        let e = set_why("m", &locks, None, &pods);
        assert_eq!(lock_state(&e, "a"), SetLockState::Reserved { token: 4, recorded: true });
        assert!(e.text.contains("- lock b: waiting, held by pod h with fencing token 3"), "{}", e.text);
        assert!(e.text.contains("403 Forbidden"), "{}", e.text);
        // A pod without a set is explained for its one lock.
        let e = set_why("w", &locks, None, &pods);
        assert_eq!(e.verdict, Verdict::Waiting { lock: "b".into(), position: 2 });
    }

    #[test]
    fn ages_print_like_kubectl() {
        assert_eq!(age(0), "0s");
        assert_eq!(age(70), "1m10s");
        assert_eq!(age(3605), "1h5s");
    }
}
