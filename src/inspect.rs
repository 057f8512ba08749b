//! `leasehold status` and `leasehold why`: an operator's read-only view of locks and waiting pods.
//!
//! The decisions of what to show are pure functions of the objects ([`lock_report`],
//! [`render_table`], [`explain`]); [`status`] and [`why`] only fetch the objects and print. The
//! queue is the operator's own: the same candidate conversion
//! ([`crate::controller::candidate_of_pod`], [`crate::controller::candidate_of_claim`]) and the
//! same order ([`grant::queue_of`]), without the holder.
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
use crate::controller::{candidate_of_claim, candidate_of_pod, pod_concerns_lock};
use crate::crd::{DistributedLock, DistributedLockClaim, condition};
use crate::lease;
use crate::lock_cli::error_text;
use crate::lock::fencing::parse_token;
use crate::lock::grant::{self, Candidate, HolderKind, Phase};
use crate::lock::policy::{self, BusyPolicy};
use crate::lock::{GRANTED_LOCK_ANNOTATION, LOCK_ANNOTATION, SCHEDULING_GATE, TOKEN_ANNOTATION};

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
    /// The Lease backing the lock; `None` when it does not exist.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseReport>,
    /// `status.highestToken`.
    pub highest_token: i64,
    /// The waiters in grant order (the operator's queue, without the holder).
    pub waiters: Vec<WaiterReport>,
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
    /// Its `metadata.creationTimestamp` (RFC 3339): what the wait is measured from.
    pub created: String,
    /// Seconds since `created`.
    pub waited_seconds: i64,
}

/// `leasehold status`'s JSON document.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct StatusDocument {
    /// Every lock shown.
    pub locks: Vec<LockReport>,
}

/// The operator's queue for `lock` (in namespace `ns`): every pod and claim of that namespace
/// that is a candidate for it, converted as the operator converts them, in grant order
/// ([`grant::queue_of`]), without the Lease's holder (the operator never lists it as a waiter).
pub fn queue(ns: &str, lock: &str, lease: Option<&Lease>, pods: &[Pod], claims: &[DistributedLockClaim]) -> Vec<Candidate> {
    let candidates: Vec<Candidate> = pods
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(ns) && pod_concerns_lock(p, lock))
        .filter_map(|p| candidate_of_pod(p, lock, false))
        .chain(
            claims
                .iter()
                .filter(|c| c.namespace().as_deref() == Some(ns) && c.spec.lock == lock)
                .filter_map(candidate_of_claim),
        )
        .collect();
    let holder_uid = lease.and_then(|l| lease::view(l).holder).and_then(|h| h.uid);
    grant::queue_of(&candidates).into_iter().filter(|c| Some(&c.uid) != holder_uid.as_ref()).cloned().collect()
}

/// What `leasehold status` shows for one lock, at time `now`. `pods` and `claims` may contain
/// objects of other locks and namespaces: only the lock's candidates are kept.
pub fn lock_report(
    lock: &DistributedLock,
    lease: Option<&Lease>,
    pods: &[Pod],
    claims: &[DistributedLockClaim],
    now: Timestamp,
) -> LockReport {
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
    let holder = status.holder.as_ref().map(|h| HolderReport {
        name: h.name.clone(),
        token: h.token,
        since: h.since.as_ref().map(|t| rfc3339(t.0)),
        held_seconds: h.since.as_ref().map(|t| seconds_since(t.0, now)),
    });
    let lease_report = lease.map(|l| {
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
    let waiters = queue(&ns, &name, lease, pods, claims)
        .iter()
        .enumerate()
        .map(|(i, c)| WaiterReport {
            position: i + 1,
            kind: c.kind.as_str().to_string(),
            name: c.name.clone(),
            identity: c.identity.clone(),
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
        highest_token: status.highest_token,
        waiters,
    }
}

/// The table `leasehold status` prints: one row per lock, then (when anyone waits) one row per
/// waiter in grant order. `namespaces` adds a NAMESPACE column (`-A`).
pub fn render_table(reports: &[LockReport], namespaces: bool) -> String {
    let mut tw = tabwriter::TabWriter::new(vec![]).padding(3);
    let ns_col = |r: &LockReport| if namespaces { format!("{}\t", r.namespace) } else { String::new() };
    let ns_head = if namespaces { "NAMESPACE\t" } else { "" };
    let _ = writeln!(tw, "{ns_head}LOCK\tHOLDER\tTOKEN\tHELD SINCE\tHELD FOR\tLEASE HOLDER\tRENEWED\tREADY\tWAITING");
    for r in reports {
        let (holder, token, since, held) = match &r.holder {
            Some(h) => (
                h.name.clone(),
                h.token.to_string(),
                h.since.clone().unwrap_or_else(|| "-".into()),
                h.held_seconds.map(age).unwrap_or_else(|| "-".into()),
            ),
            None => ("<none>".into(), "-".into(), "-".into(), "-".into()),
        };
        let (lease_holder, renewed) = match &r.lease {
            Some(l) => (
                l.holder_identity.clone().unwrap_or_else(|| "<none>".into()),
                l.renewed_seconds_ago.map(|s| format!("{} ago", age(s))).unwrap_or_else(|| "-".into()),
            ),
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
    if reports.iter().any(|r| !r.waiters.is_empty()) {
        let mut tw = tabwriter::TabWriter::new(vec![]).padding(3);
        let _ = writeln!(tw, "{ns_head}LOCK\tPOSITION\tWAITER\tKIND\tCREATED\tWAITED (SINCE CREATED)");
        for r in reports {
            for w in &r.waiters {
                let who = if w.kind == "Claim" { format!("{} ({})", w.name, w.identity) } else { w.name.clone() };
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
        out.push_str(&format!("\nlock {ns}{} is not Ready ({reason}): {}\n", r.name, r.ready.message.as_deref().unwrap_or("")));
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
    /// The pod waits in the queue of `lock` at this position (1 = next).
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
    /// Succeeded or Failed (possibly by giving up waiting), or being deleted: it neither waits nor
    /// holds.
    Done,
    /// Not gated and names no lock: Leasehold does not concern it.
    NotGated,
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
/// `leasehold.dev/lock` annotation names and that lock's Lease (`None` when missing); `pods` and
/// `claims` are those of the pod's namespace (to rebuild the queue).
pub fn explain(
    pod: &Pod,
    lock: Option<&DistributedLock>,
    lease: Option<&Lease>,
    pods: &[Pod],
    claims: &[DistributedLockClaim],
    now: Timestamp,
) -> Explanation {
    let name = pod.name_any();
    let ns = pod.namespace().unwrap_or_default();
    let ann = |k: &str| pod.annotations().get(k).map(String::as_str);
    let gated = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == SCHEDULING_GATE));
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

    let say = |verdict: Verdict, first: String, notes: &[String]| {
        let mut text = first;
        for n in notes {
            text.push(' ');
            text.push_str(n);
        }
        Explanation { verdict, text }
    };

    if matches!(phase, Phase::Succeeded | Phase::Failed) {
        let status = pod.status.as_ref();
        let reason = status.and_then(|s| s.reason.as_deref());
        let first = match reason {
            Some(r @ ("LockBusy" | "LockWaitTimeout")) => format!(
                "Pod {name} gave up waiting for lock {} ({r}: {}); it did not run and is not gated any more.",
                lock_name.unwrap_or("?"),
                status.and_then(|s| s.message.as_deref()).unwrap_or("")
            ),
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
            let what = if lock_name.is_some() { "an empty leasehold.dev/lock annotation" } else { "no leasehold.dev/lock annotation" };
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

    let lease_view = lease.map(lease::view);
    let lease_holder = lease_view.as_ref().and_then(|v| v.holder.clone());
    let uid = pod.metadata.uid.clone();
    let named_by_lease = lease_holder.as_ref().is_some_and(|h| h.name == name && h.uid.is_some() && h.uid == uid);
    let lease_token = lease_view.as_ref().map(|v| v.token).unwrap_or(0);
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
            let now_held = match &lease_holder {
                Some(h) => format!("the Lease now names {}", h.name),
                None if lease.is_some() => "the Lease now names nobody".to_string(),
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
    let ready = lock.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == condition::READY));
    match ready {
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
    if named_by_lease {
        let first = format!(
            "Pod {name} has been granted lock {lock_name} (the Lease names it, token {lease_token}) but is still \
             gated: the operator removes the gate on its next step; if it stays gated, check the operator's log."
        );
        return say(Verdict::GrantInProgress { lock: lock_name.to_string() }, first, &notes);
    }

    let queue = queue(&ns, lock_name, lease, pods, claims);
    let Some(index) = queue.iter().position(|c| c.kind == HolderKind::Pod && Some(&c.uid) == uid.as_ref()) else {
        // Gated, not deleting, not terminal: always a waiter, unless the operator could not read it.
        let first = format!("Pod {name} is gated for lock {lock_name} but the operator cannot queue it (no uid or creationTimestamp).");
        return say(Verdict::Done, first, &notes);
    };
    let me = &queue[index];
    let held_by = match &lease_holder {
        Some(h) => {
            let kind = if h.kind == HolderKind::Claim { "claim holder" } else { "pod" };
            let since = lock
                .status
                .as_ref()
                .and_then(|s| s.holder.as_ref())
                .filter(|s| s.name == h.name)
                .and_then(|s| s.since.as_ref())
                .map(|s| format!(" for {}", age(seconds_since(s.0, now))))
                .unwrap_or_default();
            format!("held by {kind} {} with fencing token {lease_token}{since}", h.name)
        }
        None if lease.is_some() => "which is free".to_string(),
        None => "which has no Lease yet".to_string(),
    };
    let place = if index == 0 {
        format!("It is at position 1 of {} in the queue: next to be granted", queue.len())
    } else {
        let ahead: Vec<String> = queue[..index].iter().take(5).map(describe_waiter).collect();
        let more = if index > 5 { format!(" and {} more", index - 5) } else { String::new() };
        format!("It is at position {} of {} in the queue, behind {}{more}", index + 1, queue.len(), ahead.join(", "))
    };
    let mut first = format!(
        "Pod {name} waits at the {SCHEDULING_GATE} scheduling gate for lock {lock_name}, {held_by}. {place} \
         (waiting {} since it was created).",
        age(seconds_since(me.created, now))
    );
    if lease_holder.is_none() && index == 0 && ready.is_some_and(|c| c.status == "True") {
        first.push_str(" The lock is free, so the operator grants it on its next step; if it stays gated, check that an operator serves this namespace.");
    }
    if me.on_busy == BusyPolicy::Skip {
        first.push_str(" It asked to skip when busy (on-busy: skip): it is marked Failed (LockBusy) instead of waiting once the operator sees the lock held.");
    }
    if let Some(max) = me.max_wait {
        first.push_str(&format!(
            " It gives up after max-wait {} (LockWaitTimeout), counted from when the operator first saw it waiting.",
            humantime::format_duration(max)
        ));
    }
    say(Verdict::Waiting { lock: lock_name.to_string(), position: index + 1 }, first, &notes)
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
    let leases = match &args.lock {
        Some(name) => api::<Lease>(&client, scope).get_opt(name).await.context("get Lease")?.into_iter().collect(),
        None => api::<Lease>(&client, scope).list(&ListParams::default()).await.context("list Leases")?.items,
    };
    let pods = api::<Pod>(&client, scope).list(&ListParams::default()).await.with_context(|| format!("list pods {where_}"))?.items;
    let claims = api::<DistributedLockClaim>(&client, scope)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("list DistributedLockClaims {where_}"))?
        .items;
    let now = Timestamp::now();
    let reports: Vec<LockReport> = locks
        .iter()
        .map(|l| {
            let lease = leases.iter().find(|x| x.namespace() == l.namespace() && x.name_any() == l.name_any());
            lock_report(l, lease, &pods, &claims, now)
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
    let Some(pod) = pods_api.get_opt(&args.pod).await.with_context(|| format!("get pod {}", args.pod))? else {
        eprintln!("leasehold why: pod {} not found in namespace {ns}", args.pod);
        return Ok(EXIT_ERROR);
    };
    let lock_name = pod.annotations().get(LOCK_ANNOTATION).map(|l| l.trim().to_string()).filter(|l| !l.is_empty());
    let (lock, lease, pods, claims) = match &lock_name {
        None => (None, None, vec![], vec![]),
        Some(l) => {
            let lock = Api::<DistributedLock>::namespaced(client.clone(), &ns)
                .get_opt(l)
                .await
                .with_context(|| format!("get DistributedLock {l}"))?;
            let lease = Api::<Lease>::namespaced(client.clone(), &ns).get_opt(l).await.context("get Lease")?;
            let pods = pods_api.list(&ListParams::default()).await.with_context(|| format!("list pods in namespace {ns}"))?;
            let claims = Api::<DistributedLockClaim>::namespaced(client.clone(), &ns)
                .list(&ListParams::default())
                .await
                .with_context(|| format!("list DistributedLockClaims in namespace {ns}"))?;
            (lock, lease, pods.items, claims.items)
        }
    };
    let explanation = explain(&pod, lock.as_ref(), lease.as_ref(), &pods, &claims, Timestamp::now());
    println!("{}", explanation.text);
    Ok(0)
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
