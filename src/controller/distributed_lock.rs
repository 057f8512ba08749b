//! DistributedLock reconcile: observe (caches) -> decide ([`crate::lock::machine::step`]) ->
//! apply (one write) -> repeat on the written objects -> report (status, Events, metrics).
//!
//! A semaphore (`spec.maxHolders: N`, issue 14) has one Lease per slot: slot 0 is the Lease
//! named like the lock, slot k >= 1 the Lease `<lock>-slot-<k>` ([`lease::slot_lease_name`]),
//! with the same label and controller ownerReference. Each Lease write of a step goes to the
//! step's slot; a grant's reservation also records its slot in `status.slotTokens` (same
//! compare-and-swap as `tokenCeiling`); a holder records its slot in the pod annotation
//! `leasehold.dev/slot` or the claim's `status.slot` (and `status.leaseName`, which the holder
//! library renews).
//!
//! A multi-lock pod (`leasehold.dev/locks`, issue 14, `docs/multi-lock.md`) is a candidate of
//! every lock of its set; each lock's reconcile decides on its own Lease, and the pod is the
//! commit point: [`Decision::RecordTentative`], [`Decision::Withdraw`] and the final
//! [`Decision::PatchHolder`] are pod patches with UID and resourceVersion preconditions.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::Context;
use crate::crd::condition::{self, reason};
use crate::crd::{ClaimPhase, DistributedLockClaim, OnBusy};
use crate::crd::{DistributedLock, DistributedLockStatus, HolderStatus, SlotHolderStatus};
use crate::error::{Error, Result, call};
use crate::lease;
use crate::lock::fencing::parse_token;
use crate::lock::grant::{
    self, Candidate, Decision, Grant, HolderKind, LeaseView, MultiLock, Phase, Reject, RejectReason, Release, Settings,
    queue_of,
};
use crate::lock::machine::{self, SlotLease, Snapshot};
use crate::lock::policy;
use crate::lock::{
    GRANTED_LOCK_ANNOTATION, LOCK_ANNOTATION, MAX_MULTI_LOCK_NAME, SCHEDULING_GATE, SLOT_ANNOTATION, TOKEN_ANNOTATION,
    lock_set, lock_token_annotation, lock_withdrawn_annotation,
};
use crate::metrics::{LockState, Metrics};

/// Field manager of `status.tokenCeiling` (the only field the reservation patch writes).
const TOKEN_FIELD_MANAGER: &str = "leasehold.dev/tokens";
/// Most writes one reconcile does before handing back to the controller (reserve, create,
/// grant, patch pod, status). A loop that does not settle is a bug; this bounds its cost.
const MAX_STEPS: usize = 8;
/// How often a lock whose Lease belongs to someone else looks again (that Lease is not watched).
const FOREIGN_LEASE_RECHECK: Duration = Duration::from_secs(60);
/// How often a lock with a holder or a candidate is reconciled even when no watch event names
/// it: the bound on how long such a lock can sit on a missed event (a watch relist does not
/// report the objects deleted in between; the relist itself also triggers every lock with a
/// Lease, see `controller::trigger_locks`).
///
/// A lock with no holder in any slot, no candidate and no timer waits for a change instead
/// (`Action::await_change`): what could wake it is a new waiter (a pod or claim naming it, which
/// a relist reports as present and maps to the lock), its own spec, or its Lease (watched); none
/// of these is a deletion a relist could hide. It saves a pending requeue per idle lock in
/// kube-runtime's scheduler (0.8 KiB each, 7.9 MiB at 10,000 locks in the heap profile of
/// `benches/results/2026-12-02-a82d5ac-held-heap-profile.md`).
const RESYNC: Duration = Duration::from_secs(300);
/// Longest lock name the operator serves: the name is the value of the `leasehold.dev/lock` label
/// on the lock's Lease, and a label value is at most 63 characters (Kubernetes, "Labels and
/// Selectors", syntax). The CRD refuses longer names.
pub const MAX_LOCK_NAME: usize = 63;

/// How many waiters `status.waiters` lists.
const STATUS_WAITERS: usize = 10;

/// Reconciles one lock, once [`Context::gate`] lets it (at most `--max-concurrent-reconciles`
/// at once, in the order they became due). The lock is read again from the lock cache after the
/// wait (kube-runtime hands over the object as it was when the reconcile started, which a wait
/// of seconds makes stale: a token reservation from it would meet a conflict); a lock deleted
/// meanwhile is not reconciled. Errors are retried by [`error_policy`]. The wait is observed in
/// `leasehold_reconcile_queue_seconds`, the reconcile from the gate on in
/// `leasehold_reconcile_duration_seconds`.
pub async fn reconcile(lock: Arc<DistributedLock>, ctx: Arc<Context>) -> Result<Action> {
    let due = Instant::now();
    ctx.gate
        .run(|| async {
            ctx.metrics.reconcile_queue.observe(due.elapsed().as_secs_f64());
            let lock = match ctx.locks.get(&ObjectRef::from_obj(&*lock)) {
                Some(now) if now.uid() == lock.uid() => now,
                // Deleted (or replaced under the same name) while it waited: its own events
                // reconcile the new one.
                _ => return Ok(Action::await_change()),
            };
            let started = Instant::now();
            let result = reconcile_lock(lock, ctx.clone(), started).await;
            ctx.metrics.reconcile_duration.observe(started.elapsed().as_secs_f64());
            result
        })
        .await
}

async fn reconcile_lock(lock: Arc<DistributedLock>, ctx: Arc<Context>, started: Instant) -> Result<Action> {
    let ns = lock.namespace().ok_or(Error::MissingField("metadata.namespace"))?;
    let name = lock.name_any();
    let lease_api: Api<Lease> = Api::namespaced(ctx.client.clone(), &ns);
    let pod_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let lock_api: Api<DistributedLock> = Api::namespaced(ctx.client.clone(), &ns);

    if ctx.namespace_terminating(&ns) {
        // No write that could grant: the namespace controller is deleting the lock, its Lease,
        // and every holder and waiter. Not writing is always safe (it is what an operator that
        // is down does); the lock says why until it is gone.
        let message = format!("namespace {ns} is being deleted: nothing is granted in it any more");
        let waiters = waiters_of(&candidates_of(&ctx, &ns, &name));
        report_not_ready(&lock_api, &lock, &ctx, reason::NAMESPACE_TERMINATING, &message, Some(&waiters)).await?;
        return Ok(Action::await_change());
    }
    if name.len() > MAX_LOCK_NAME {
        // Its Lease could never be created (the label value would be refused): every try would
        // reserve tokens and fail. The CRD refuses such names; this lock predates that rule.
        let message = format!(
            "the lock's name is {} characters long, more than {MAX_LOCK_NAME}: it is the value of the leasehold.dev/lock \
             label on its Lease, and a label value is at most 63 characters. Nothing is granted: create the lock again \
             under a shorter name",
            name.len()
        );
        let waiters = waiters_of(&candidates_of(&ctx, &ns, &name));
        report_not_ready(&lock_api, &lock, &ctx, reason::INVALID_NAME, &message, Some(&waiters)).await?;
        return Ok(Action::await_change());
    }
    let mut lock = (*lock).clone();
    let mut candidates = candidates_of(&ctx, &ns, &name);
    let set_recheck = leave_out_unservable_sets(&ctx, &ns, &name, &mut candidates).then_some(SET_RECHECK);
    // Slot 0's Lease (the lock's own), then a semaphore's slot Leases (`leases[k]`: slot k).
    let cached = ctx.leases.get(&ObjectRef::new(&name).within(&ns)).map(|l| (*l).clone());
    let mut leases: Vec<Option<Lease>> = vec![newest_lease(&ctx, &ns, &name, cached)];
    if leases[0].is_none() && grant::needs_lease(&candidates) {
        // The Lease cache holds only Leases labelled leasehold.dev/lock: one that someone else
        // made with the lock's name is invisible there, and creating ours would fail with 409
        // again and again (each try reserving a new block of tokens). One read before anything
        // is reserved or created (not for a lock nobody waits for: its Lease is created at the
        // first grant, and an idle lock costs no request).
        leases[0] = call("get Lease", lease_api.get_opt(&name)).await?;
    }
    let status = lock.status.clone().unwrap_or_default();
    leases.extend(slot_leases_of(&ctx, &ns, &lock, &candidates, &status.slot_tokens));
    let limit = lock.spec.max_holders.map_or(1, |n| n.max(1) as usize);
    let next_missing = (1..limit.min(leases.len())).find(|k| leases[*k].is_none());
    if let Some(k) = next_missing
        && leases[..k].iter().all(|l| l.as_ref().is_some_and(|l| lease::view(l).holder.is_some()))
        && candidates.iter().any(Candidate::is_waiter)
    {
        // The same read for the slot Lease the next grant creates (every lower slot's Lease names
        // a holder, someone waits): one that someone else made under its name
        // (`<lock>-slot-<k>`, unlabelled, so not cached) is found before a reservation is spent
        // on a create that would fail with 409. One GET per slot, before its first grant.
        leases[k] = call("get Lease", lease_api.get_opt(&lease::slot_lease_name(&name, k as u32))).await?;
    }
    if let Some((slot, _)) =
        leases.iter().enumerate().find(|(_, l)| l.as_ref().is_some_and(|l| !lease::is_owned_by(l, &lock)))
    {
        let message = Error::LeaseNotOwned(lease::slot_lease_name(&name, slot as u32)).to_string();
        let waiters = waiters_of(&candidates_of(&ctx, &ns, &name));
        report_not_ready(&lock_api, &lock, &ctx, reason::LEASE_NOT_OWNED, &message, Some(&waiters)).await?;
        // Changes to an unlabelled Lease are not watched: look again in a while.
        return Ok(Action::requeue(FOREIGN_LEASE_RECHECK));
    }
    let settings = Settings {
        start_timeout: Duration::from_secs(lock.spec.start_timeout_seconds.max(1) as u64),
        node_loss_timeout: Duration::from_secs(lock.spec.node_loss_timeout_seconds.max(1) as u64),
        lease_duration: Duration::from_secs(lock.spec.lease_duration_seconds.max(1) as u64),
        claim_record_delay: super::CLAIM_RECORD_DELAY,
    };
    let lock_uid = lock.uid().unwrap_or_default();
    let mut snapshot = Snapshot {
        settings,
        lease: None,
        renew_marker: None,
        extra_slots: vec![],
        max_holders: lock.spec.max_holders.map(|n| n.max(1) as u32),
        candidates: vec![],
        ceiling: 0,
        highest_token: 0,
        slot_tokens: vec![],
        fresh_reservation: None,
    };
    // The candidates as their objects have them (a standing claim at its claim object's own
    // request: what `with_released` keeps the released list for); each step decides on them at
    // the requests the lock's Lease names (`at_lease_request`: a standing claim that arrived by
    // the Lease), recomputed from the Lease as this reconcile last read or wrote it.
    let mut base = candidates;
    // Whether this reconcile has re-read a Lease after a 409 (once per reconcile).
    let mut reread = false;
    for _ in 0..MAX_STEPS {
        // Observe: the cached objects, overridden by what this reconcile's writes returned.
        let status = lock.status.clone().unwrap_or_default();
        snapshot.lease = leases[0].as_ref().map(lease::view);
        snapshot.candidates = at_lease(&base, snapshot.lease.as_ref());
        snapshot.renew_marker = leases[0].as_ref().and_then(lease::renew_marker);
        snapshot.extra_slots = leases[1..]
            .iter()
            .map(|l| SlotLease {
                lease: l.as_ref().map(lease::view),
                renew_marker: l.as_ref().and_then(lease::renew_marker),
            })
            .collect();
        (snapshot.ceiling, snapshot.highest_token) = (status.token_ceiling, status.highest_token);
        snapshot.slot_tokens = status.slot_tokens.clone();
        let now = ctx.started.elapsed();
        let clocks = ctx.clocks.lock().unwrap_or_else(|e| e.into_inner()).get(&lock_uid).cloned().unwrap_or_default();
        let step = match machine::step(&snapshot, now, &clocks) {
            Ok(s) => s,
            Err(e) => {
                // Nothing more can be granted (a Lease token set near i64::MAX by hand): say so
                // once, and wait for someone to fix the Lease or recreate the lock.
                let message = format!("{e}: no further grant is possible; delete the lock's Lease or the lock");
                let waiters = waiters_of(&snapshot.candidates);
                report_not_ready(&lock_api, &lock, &ctx, reason::TOKEN_EXHAUSTED, &message, Some(&waiters)).await?;
                return Ok(Action::await_change());
            }
        };
        {
            // An idle lock's clocks are empty: keep no entry for it (10,000 idle locks cost
            // 2.4 MiB of entries otherwise, README "Performance").
            let mut all = ctx.clocks.lock().unwrap_or_else(|e| e.into_inner());
            if step.clocks.is_empty() {
                all.remove(&lock_uid);
            } else {
                all.insert(lock_uid.clone(), step.clocks);
            }
        }
        let (plan, slot, all_holders, next) = (step.plan, step.slot, step.holders, step.next);
        // The token ceiling every Lease write of this step records (`leasehold.dev/token-ceiling`,
        // what a standing claim's arrival by the Lease may take a token up to): the lock's
        // reserved `status.tokenCeiling` this step decided with (after this reconcile's own
        // Reserve, the fresh one), on the lock object that owns the Lease. None on a semaphore's
        // slot Leases (each grant there reserves its own token).
        let ceiling = lease_ceiling(&lock, &snapshot, slot);
        if leases.len() <= slot as usize {
            leases.resize(slot as usize + 1, None);
        }
        tracing::debug!(lock = %name, namespace = %ns, decision = ?plan.decision, "decided");
        // Apply the one write; fold what the API server answered into the snapshot.
        snapshot.fresh_reservation = None;
        match plan.decision {
            Decision::Reserve { from, to } => {
                lock = reserve_tokens(&lock_api, &lock, to, step.reserved_slot).await?;
                snapshot.fresh_reservation = Some(from);
            }
            Decision::CreateLease { holder, floor } => {
                let created = match lease::create(&lease_api, &lock, slot, holder.as_ref(), floor, ceiling).await {
                    Ok(l) => l,
                    Err(e) if e.is_conflict() && slot > 0 => {
                        // A slot Lease that exists but is not in the cache: our own, not seen yet
                        // (409, re-observe), or someone else's (unlabelled, so never cached):
                        // say so, as for the lock's own Lease above.
                        let lease_name = lease::slot_lease_name(&name, slot);
                        let found = call("get Lease", lease_api.get_opt(&lease_name)).await?;
                        if found.as_ref().is_some_and(|l| !lease::is_owned_by(l, &lock)) {
                            let message = Error::LeaseNotOwned(lease_name).to_string();
                            let waiters = waiters_of(&snapshot.candidates);
                            report_not_ready(&lock_api, &lock, &ctx, reason::LEASE_NOT_OWNED, &message, Some(&waiters))
                                .await?;
                            return Ok(Action::requeue(FOREIGN_LEASE_RECHECK));
                        }
                        return Err(e);
                    }
                    Err(e) => return Err(e),
                };
                leases[slot as usize] = Some(created);
                if let Some(h) = holder {
                    let note = format!("Lease was recreated; {} keeps holding with token {}", h.name, h.token);
                    ctx.event(&lock.object_ref(&()), EventType::Warning, "LeaseRecreated", note, "Recreate").await;
                }
            }
            Decision::UpdateLease { holder, released, floor } => {
                if holder.is_some() && released.is_some() {
                    ctx.failpoint("stop-before-lease-handover");
                }
                let observed = leases[slot as usize].as_ref().ok_or(Error::MissingField("Lease"))?;
                let replaced = observed.metadata.resource_version.clone();
                let kept = with_released(observed, &base);
                let written =
                    match lease::update(&lease_api, &lock, &kept, holder.as_ref(), floor, next.as_ref(), ceiling).await
                    {
                        Ok(w) => w,
                        Err(e) if e.is_conflict() && !reread => {
                            // The cache lagged behind the Lease (a holder released it right after
                            // the watch event that woke us, or our own last write is not cached
                            // yet): read it and decide again now, instead of 200 ms later. Safe: a
                            // fresher view of one object (the model's caches catch up per kind at
                            // any time), and the next write is again a compare-and-swap.
                            count_conflict(&ctx.metrics, &e);
                            reread = true;
                            let lease_name = observed.name_any();
                            leases[slot as usize] = call("get Lease", lease_api.get_opt(&lease_name)).await?;
                            continue;
                        }
                        Err(e) => {
                            count_conflict(&ctx.metrics, &e);
                            return Err(e);
                        }
                    };
                remember_lease(&ctx, &ns, slot, replaced, &written);
                leases[slot as usize] = Some(written);
                // A claim whose grant this write took back shows `Expired` before the next
                // holder's claim shows `Granted`, so no two claims show `Granted` at once (issue
                // 10). No write when the released holder is a pod or its claim is gone (a
                // voluntary release frees the Lease itself and takes no `released` here), so a
                // handover's path carries no extra write; the release's Event comes after the grant.
                if let Some(r) = &released {
                    let view = leases[slot as usize].as_ref().map(lease::view).unwrap_or_default();
                    for c in expire_claims(&ctx, &ns, &lock, &snapshot, slot, &view, Some(r)).await? {
                        absorb(&mut snapshot, &mut base, c, leases[0].as_ref());
                    }
                }
                let granted = match holder {
                    Some(g) => {
                        ctx.metrics.grants.inc();
                        if released.is_some() {
                            ctx.metrics.handover.observe(started.elapsed().as_secs_f64());
                        }
                        tracing::info!(lock = %name, namespace = %ns, pod = %g.name, token = g.token, "granted");
                        ctx.failpoint("exit-after-lease-grant");
                        let lease_rv = leases[slot as usize].as_ref().and_then(|l| l.metadata.resource_version.clone());
                        // A single-holder lock's grant to a claim that asks for it alone is
                        // recorded in the claim's status `CLAIM_RECORD_DELAY` later, by the step
                        // that decides `PatchHolder` then (the claim's process acts on the Lease).
                        let record_later = g.kind == HolderKind::Claim
                            && snapshot.max_holders.is_none()
                            && slot == 0
                            && !snapshot.settings.claim_record_delay.is_zero();
                        match multi_of(&snapshot, &g) {
                            // A multi-lock pod's grant is tentative until every lock of its set is
                            // recorded on the pod: the next step records it or ungates it.
                            Some(_) => None,
                            None if record_later => None,
                            None => Some(patch_holder(&ctx, &ns, &lock, &g, lease_rv, false).await),
                        }
                    }
                    None => None,
                };
                if let Some(r) = &released {
                    // Also when the holder patch failed: the Lease records the release.
                    record_release(&ctx, &lock, r).await;
                }
                if let Some(patched) = granted {
                    absorb(&mut snapshot, &mut base, patched?, leases[0].as_ref());
                }
            }
            Decision::RepairLease { holder, floor } => {
                let observed = leases[slot as usize].as_ref().ok_or(Error::MissingField("Lease"))?;
                let replaced = observed.metadata.resource_version.clone();
                let kept = with_released(observed, &base);
                let written = lease::update(&lease_api, &lock, &kept, Some(&holder), floor, None, ceiling)
                    .await
                    .inspect_err(|e| count_conflict(&ctx.metrics, e))?;
                remember_lease(&ctx, &ns, slot, replaced, &written);
                leases[slot as usize] = Some(written);
                let note = format!(
                    "the Lease disagreed with the running holder (edited by hand, or the holder's lock annotation changed); \
                     repaired it to name {} with its token {}",
                    holder.identity, holder.token
                );
                tracing::warn!(lock = %name, holder = %holder.identity, token = holder.token, "Lease repaired");
                ctx.event(&lock.object_ref(&()), EventType::Warning, "LeaseRepaired", note, "Repair").await;
            }
            Decision::SetNext => {
                let observed = leases[slot as usize].as_ref().ok_or(Error::MissingField("Lease"))?;
                let replaced = observed.metadata.resource_version.clone();
                let kept = with_released(observed, &base);
                match lease::set_next(&lease_api, &lock, &kept, next.as_ref(), ceiling).await {
                    Ok(written) => {
                        remember_lease(&ctx, &ns, slot, replaced, &written);
                        leases[slot as usize] = Some(written);
                    }
                    Err(e) if e.is_conflict() && !reread => {
                        // As for a grant above: read the Lease and decide again now.
                        count_conflict(&ctx.metrics, &e);
                        reread = true;
                        let lease_name = observed.name_any();
                        leases[slot as usize] = call("get Lease", lease_api.get_opt(&lease_name)).await?;
                        continue;
                    }
                    Err(e) => {
                        count_conflict(&ctx.metrics, &e);
                        return Err(e);
                    }
                }
                tracing::debug!(lock = %name, namespace = %ns, next = ?next, "next-holder hint written");
            }
            Decision::PatchHolder(g) => {
                tracing::info!(lock = %name, holder = %g.name, token = g.token, "finishing a grant recorded in the Lease");
                // The Lease names this holder (that is the decision), at this version.
                let lease_rv = leases[slot as usize].as_ref().and_then(|l| l.metadata.resource_version.clone());
                let multi = multi_of(&snapshot, &g).is_some();
                let patched = patch_holder(&ctx, &ns, &lock, &g, lease_rv, multi).await?;
                if g.kind == HolderKind::Claim {
                    // Most often a releasing holder's handover to the next-holder hint (its Lease
                    // write is the grant); otherwise a grant whose claim status a crash left out.
                    ctx.metrics.grants.inc();
                }
                absorb(&mut snapshot, &mut base, patched, leases[0].as_ref());
            }
            Decision::RecordTentative(g) => {
                let written = record_on_holder(&ctx, &ns, &lock, &g, PodRecord::Tentative).await?;
                absorb(&mut snapshot, &mut base, written, leases[0].as_ref());
            }
            Decision::Withdraw(g) => {
                let unserved = snapshot
                    .candidates
                    .iter()
                    .any(|c| c.uid == g.uid && c.multi.as_ref().is_some_and(|m| m.unservable));
                let why = match queue_of(&snapshot.candidates).first() {
                    _ if unserved => {
                        let set = set_of(&ctx, &ns, g.kind, &g.name);
                        let why = set.and_then(|set| lock_set_unservable(&ctx.locks, &ns, &set));
                        format!(
                            "because its lock set is not served any more ({})",
                            why.unwrap_or_else(|| "changed".into())
                        )
                    }
                    Some(head) => format!(
                        "for {}, which comes first in the queue order every lock uses (older, or created in the same \
                         second with a name that sorts first)",
                        head.name
                    ),
                    None => "for a waiter that comes first in the queue order".into(),
                };
                let written = record_on_holder(&ctx, &ns, &lock, &g, PodRecord::Withdrawn { why }).await?;
                absorb(&mut snapshot, &mut base, written, leases[0].as_ref());
            }
            Decision::DeletePod { name: pod_name, uid } => {
                let dp = DeleteParams {
                    preconditions: Some(Preconditions { uid: Some(uid.clone()), resource_version: None }),
                    ..DeleteParams::default()
                };
                let deleted = match call("delete Pod", pod_api.delete(&pod_name, &dp)).await {
                    Ok(either) => either.left(),
                    Err(e) if e.is_not_found() || e.is_conflict() => None,
                    Err(e) => return Err(e),
                };
                Metrics::inc(&ctx.metrics.reclaims, "StartTimeout");
                let note = format!(
                    "{pod_name} was granted the lock but did not start within {} s; deleting it so the next waiter can hold the lock once it is gone",
                    lock.spec.start_timeout_seconds
                );
                ctx.event(&lock.object_ref(&()), EventType::Warning, "StartTimeout", note, "Reclaim").await;
                match deleted.as_ref().and_then(|p| candidate_of_pod(p, &name, node_lost(&ctx, p))) {
                    Some(c) => absorb(&mut snapshot, &mut base, c, leases[0].as_ref()),
                    // Gone (or replaced): nothing more to decide until the watch says so.
                    None => forget(&mut snapshot, &mut base, &uid),
                }
            }
            Decision::RejectWaiters(rejects) => {
                for r in rejects {
                    let kind = snapshot.candidates.iter().find(|p| p.uid == r.uid).map_or(HolderKind::Pod, |p| p.kind);
                    match reject_waiter(&ctx, &ns, kind, &lock, &r).await? {
                        Some(c) => absorb(&mut snapshot, &mut base, c, leases[0].as_ref()),
                        None => forget(&mut snapshot, &mut base, &r.uid),
                    }
                }
            }
            Decision::Idle { requeue_after } => {
                // A claim still showing Granted for a grant the Lease no longer records (the
                // expiry write above failed, or an operator restarted in between).
                for (k, l) in leases.iter().enumerate() {
                    let Some(view) = l.as_ref().map(lease::view).filter(|v| v.trusted) else { continue };
                    for c in expire_claims(&ctx, &ns, &lock, &snapshot, k as u32, &view, None).await? {
                        absorb(&mut snapshot, &mut base, c, leases[0].as_ref());
                    }
                }
                ctx.failures.lock().unwrap_or_else(|e| e.into_inner()).remove(&lock_uid);
                // Requests their holders released are over, as in `machine::step`: no waiter, no
                // reason to stay awake (an idle standing claim keeps its released request).
                let live = unreleased(&snapshot.candidates, &leases);
                let first_waiter = queue_of(&live)
                    .into_iter()
                    .find(|c| plan.holder.as_ref().is_none_or(|h| h.uid != c.uid))
                    .map(|c| c.created)
                    // A request known only from the Lease has no time of its own (it queues at
                    // LEASE_ARRIVAL_QUEUED, the end of time): no oldest-waiter time for it.
                    .filter(|t| *t != grant::LEASE_ARRIVAL_QUEUED);
                let tentative = plan.holder.as_ref().and_then(|h| multi_of(&snapshot, h)).is_some_and(|c| c.gated);
                let view = StatusView {
                    holder: &plan.holder,
                    holders: &all_holders,
                    waiters: &plan.waiters,
                    first_waiter,
                    tentative,
                };
                let status_due = write_status(&lock_api, &lock, &leases, &view, &ctx).await?;
                announce_waiters(&ctx, &ns, &lock, plan.holder.as_ref(), &live).await;
                let timeout = requeue_after.map(|d| d + Duration::from_millis(50));
                let next = [timeout, status_due, set_recheck].into_iter().flatten().min();
                let idle = all_holders.is_empty() && live.is_empty();
                return Ok(match next {
                    Some(after) => Action::requeue(after),
                    None if idle => Action::await_change(),
                    None => Action::requeue(RESYNC),
                });
            }
        }
        // The decision's write was answered (failures returned above): the operator can write.
        ctx.writes.succeeded();
    }
    // Not settled: let the controller run again on the events our own writes caused.
    Ok(Action::requeue(Duration::from_millis(100)))
}

/// Requeues after an error with a per-lock exponential backoff with jitter (200 ms for a
/// conflict or NotFound, which re-observing fixes; otherwise from 1 s, doubling up to 5 min), and
/// counts it. Anything but a conflict also turns the lock `Ready=False` (reason `Forbidden` for a
/// 403, else `ReconcileError`) with the error as message
/// (one Warning Event when the condition changes, not one per failure), so `kubectl wait
/// --for=condition=Ready` tells the truth; the next successful reconcile sets it back. The failure
/// also counts against the operator's readiness ([`crate::health`]).
pub fn error_policy(lock: Arc<DistributedLock>, error: &Error, ctx: Arc<Context>) -> Action {
    Metrics::inc(&ctx.metrics.reconcile_errors, error.reason());
    if error.is_conflict() || error.is_not_found() {
        return Action::requeue(Duration::from_millis(200));
    }
    tracing::warn!(lock = %lock.name_any(), error = %error, "reconcile failed");
    ctx.writes.failed(&error.to_string(), Instant::now());
    let why = if error.is_forbidden() { reason::WRITE_FORBIDDEN } else { reason::RECONCILE_ERROR };
    let uid = lock.uid().unwrap_or_default();
    let failures = {
        let mut f = ctx.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = f.entry(uid).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    let message = error.to_string();
    tokio::spawn(async move {
        let Some(ns) = lock.namespace() else { return };
        let api: Api<DistributedLock> = Api::namespaced(ctx.client.clone(), &ns);
        if let Err(e) = report_not_ready(&api, &lock, &ctx, why, &message, None).await {
            tracing::debug!(error = %e, "could not report the failure in status");
        }
    });
    Action::requeue(backoff(failures))
}

/// `failures`-th consecutive failure: 1 s doubling up to 5 min, each with up to 50 % random
/// jitter so that many failing locks (a namespace being deleted) do not retry in step.
fn backoff(failures: u32) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let doubling = 1u32 << failures.saturating_sub(1).min(9);
    let base = Duration::from_secs(1).saturating_mul(doubling).min(Duration::from_secs(300));
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    base + base.mul_f64((random % 1000) as f64 / 2000.0)
}

fn count_conflict(m: &Metrics, e: &Error) {
    if e.is_conflict() {
        m.conflicts.inc();
    }
}

/// The `leasehold.dev/token-ceiling` of a Lease write to slot `slot` of `lock` decided on
/// `snapshot` ([`lease::put_ceiling`]): the reserved `status.tokenCeiling` the decision was made
/// with (`snapshot.ceiling`, read from `lock`, the object that owns the Lease, or written by this
/// reconcile's own reservation) for a single-holder lock's Lease; `None` (removed) for a
/// semaphore (`spec.maxHolders`) and any slot above 0, and while nothing is reserved.
fn lease_ceiling(lock: &DistributedLock, snapshot: &Snapshot, slot: u32) -> Option<i64> {
    let reserved = lock.status.as_ref().map_or(0, |s| s.token_ceiling);
    (lock.spec.max_holders.is_none() && snapshot.max_holders.is_none() && slot == 0 && snapshot.ceiling > 0)
        .then_some(snapshot.ceiling.min(reserved))
        .filter(|c| *c > 0)
}

/// Candidates for `lock` in `ns`, from the caches: pods whose `leasehold.dev/lock` annotation
/// names it (or that were granted it) and `DistributedLockClaim`s for it, in cache order
/// ([`machine::step`] sorts them).
fn candidates_of(ctx: &Context, ns: &str, lock: &str) -> Vec<Candidate> {
    let pods = ctx
        .pods
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(ns))
        .filter(|p| pod_concerns_lock(p, lock))
        .filter_map(|p| candidate_of_pod(&p, lock, node_lost(ctx, &p)));
    let claims = ctx
        .claims
        .state()
        .into_iter()
        .filter(|c| c.namespace().as_deref() == Some(ns))
        .filter_map(|c| candidate_of_claim(&c, lock, None));
    let mut written = ctx.holders_written.lock().unwrap_or_else(|e| e.into_inner());
    written.retain(|_, (_, _, at)| at.elapsed() < HOLDER_CACHE_LAG);
    pods.chain(claims).map(|c| newest(c, lock, &written)).collect()
}

/// How often a lock that leaves out a multi-lock pod ([`leave_out_unservable_sets`]) looks
/// again: the missing lock of its set may have been created meanwhile, and that lock's creation
/// wakes only itself.
const SET_RECHECK: Duration = Duration::from_secs(5);

/// Why the operator does not serve a multi-lock pod whose set is `set` (in namespace `ns`), as a
/// sentence; `None` when it does: [`lock_set_unservable_among`] the locks of the operator's lock
/// cache.
pub fn lock_set_unservable(
    locks: &kube::runtime::reflector::Store<DistributedLock>,
    ns: &str,
    set: &[String],
) -> Option<String> {
    lock_set_unservable_among(ns, set, |l| locks.get(&ObjectRef::new(l).within(ns)))
}

/// Why a multi-lock pod whose set is `set` (in namespace `ns`) is not served, as a sentence about
/// the first lock of `set` (in its order) that makes it so; `None` when it is served. `find(name)`
/// is the existing DistributedLock of that name in `ns` (`None`: it does not exist); `L` is
/// whatever the caller holds the lock as (`Arc` from the operator's cache, `&` from a list).
/// Not served: a lock of the set that does not exist, a semaphore (`spec.maxHolders` set: the
/// protocol of `docs/multi-lock.md` is model-checked for single-holder locks only), or a lock name
/// longer than [`MAX_MULTI_LOCK_NAME`] characters (its per-lock annotation key would be invalid).
/// Pure: the operator (`lock_set_unservable`, on its lock cache) and `leasehold why` decide alike.
pub fn lock_set_unservable_among<L: std::borrow::Borrow<DistributedLock>>(
    ns: &str,
    set: &[String],
    find: impl Fn(&str) -> Option<L>,
) -> Option<String> {
    set.iter().find_map(|l| {
        if l.len() > MAX_MULTI_LOCK_NAME {
            return Some(format!(
                "lock name {l} is longer than {MAX_MULTI_LOCK_NAME} characters, too long for its per-lock annotation"
            ));
        }
        match find(l) {
            None => Some(format!("DistributedLock {l} does not exist in namespace {ns}")),
            Some(x) if x.borrow().spec.max_holders.is_some() => Some(format!(
                "DistributedLock {l} is a semaphore (spec.maxHolders); a lock set cannot include a semaphore yet"
            )),
            Some(_) => None,
        }
    })
}

/// The note of the Warning Event `LockSetNotServed` on a pod whose lock set `set` is not served,
/// `why` being [`lock_set_unservable_among`]'s sentence; `leasehold why` says the same.
pub fn lock_set_not_served_note(set: &[String], why: &str) -> String {
    format!(
        "lock set {}: {why}; no lock of the set is reserved for the pod until every one can be (it waits)",
        set.join(",")
    )
}

/// Leaves out of `candidates` (lock `lock` in `ns`) every multi-lock pod whose set the operator
/// does not serve ([`lock_set_unservable`]) and that this lock has not granted: gated, no token of
/// this lock recorded on the pod, and none of this lock's cached Leases names it. Such a pod would
/// otherwise be granted this lock tentatively and keep it from everyone behind it while it waits
/// for a lock it cannot get. A pod this lock did grant stays, marked
/// [`MultiLock::unservable`](crate::lock::grant::MultiLock::unservable), so the protocol takes
/// the grant back the usual way (withdrawn on the pod first, then the Lease moves) and never
/// grants it again while the set is not served: dropping it would free the Lease as if the pod
/// were gone, and a record of the grant still on the pod could then ungate it beside the next
/// holder. (A stale Lease cache that misses a grant only makes this reconcile's writes fail on
/// their compare-and-swap.)
///
/// Returns whether the lock should look again in [`SET_RECHECK`]: it left out a pod (the missing
/// lock's creation wakes only that lock), or a gated multi-lock pod holds a grant of it (a lock of
/// the pod's set deleted or made a semaphore wakes only itself).
fn leave_out_unservable_sets(ctx: &Context, ns: &str, lock: &str, candidates: &mut Vec<Candidate>) -> bool {
    let mut recheck = false;
    candidates.retain_mut(|c| {
        if c.multi.is_none() || !c.gated {
            return true;
        }
        let named = || {
            ctx.leases.state().iter().any(|l| {
                l.namespace().as_deref() == Some(ns)
                    && l.labels().get(crate::lock::LEASE_LABEL).map(String::as_str) == Some(lock)
                    && lease::view(l).holder.is_some_and(|h| h.uid.as_deref() == Some(c.uid.as_str()))
            })
        };
        let granted = c.token.is_some() || named();
        let Some(set) = set_of(ctx, ns, c.kind, &c.name) else { return true };
        let unservable = lock_set_unservable(&ctx.locks, ns, &set).is_some();
        recheck |= unservable || granted;
        match (unservable, granted) {
            (false, _) => true,
            (true, true) => {
                if let Some(m) = c.multi.as_mut() {
                    m.unservable = true;
                }
                true
            }
            (true, false) => false,
        }
    });
    recheck
}

/// The lock set of the pod or claim `name` in `ns` as the operator's cache has it
/// ([`crate::lock::lock_set`] for a pod, [`crate::crd::DistributedLockClaimSpec::lock_set`] for
/// a claim); `None` when it is not in the cache.
fn set_of(ctx: &Context, ns: &str, kind: HolderKind, name: &str) -> Option<Vec<String>> {
    match kind {
        HolderKind::Pod => ctx.pods.get(&ObjectRef::new(name).within(ns)).map(|p| lock_set(p.annotations())),
        HolderKind::Claim => ctx.claims.get(&ObjectRef::new(name).within(ns)).map(|c| c.spec.lock_set()),
    }
}

/// The multi-lock state of the candidate a grant is for, `None` for a single-lock holder.
fn multi_of<'a>(snapshot: &'a Snapshot, g: &Grant) -> Option<&'a Candidate> {
    snapshot.candidates.iter().find(|c| c.uid == g.uid).filter(|c| c.multi.is_some())
}

/// A semaphore's slot Leases from the cache, slot 1 first (`result[k - 1]` is slot k, `None`
/// where it does not exist): every slot up to the highest of `spec.maxHolders - 1`, the highest
/// slot Lease of this lock that exists (name `<lock>-slot-<k>`, label `leasehold.dev/lock:
/// <lock>`, see [`lease::slot_lease_name`]), the highest slot a running candidate holds, and the
/// highest slot with a reservation in `slot_tokens`. Empty for a single-holder lock with no slot
/// Lease and no holder or reservation above slot 0. A semaphore costs one pass over the Lease
/// cache (`O(Leases)`, like [`candidates_of`] over pods); a single-holder lock one lookup (its
/// `<lock>-slot-1`), so thousands of plain locks do not scan thousands of Leases each.
fn slot_leases_of(
    ctx: &Context,
    ns: &str,
    lock: &DistributedLock,
    candidates: &[Candidate],
    slot_tokens: &[i64],
) -> Vec<Option<Lease>> {
    let name = lock.name_any();
    let limit = lock.spec.max_holders.map_or(1, |n| n.max(1) as u32);
    let top_running = candidates.iter().filter(|c| !c.gated && !c.is_terminal()).map(|c| c.slot + 1).max();
    let top_reserved = slot_tokens.iter().rposition(|t| *t > 0).map_or(0, |k| k as u32 + 1);
    let slot_1 = ObjectRef::new(&lease::slot_lease_name(&name, 1)).within(ns);
    let plain = limit == 1
        && top_running.unwrap_or(0) <= 1
        && top_reserved <= 1
        && lock.spec.max_holders.is_none()
        && ctx.leases.get(&slot_1).is_none();
    if plain {
        return vec![];
    }
    let mut found: std::collections::BTreeMap<u32, Lease> = ctx
        .leases
        .state()
        .into_iter()
        .filter(|l| l.namespace().as_deref() == Some(ns))
        .filter(|l| l.labels().get(crate::lock::LEASE_LABEL).map(String::as_str) == Some(name.as_str()))
        .filter_map(|l| Some((lease::slot_of_lease_name(&name, &l.name_any())?, (*l).clone())))
        .collect();
    let top_lease = found.keys().next_back().map_or(0, |k| k + 1);
    let slots = limit.max(top_lease).max(top_running.unwrap_or(0)).max(top_reserved);
    (1..slots).map(|k| found.remove(&k)).collect()
}

/// The key of [`Context::holders_written`]: the holder's object UID and the lock (a multi-lock
/// pod is a different candidate for each lock of its set). A standing claim's requests share one entry (the claim object's), as the claim object moves
/// from request to request.
fn written_key(holder_uid: &str, lock: &str) -> String {
    format!("{}/{lock}", grant::split_request_uid(holder_uid).0)
}

/// `cached`, or the holder as this operator's grant patch returned it when the cache still
/// shows the version that patch replaced ([`Context::holders_written`]).
fn newest(cached: Candidate, lock: &str, written: &HashMap<String, (String, Candidate, Instant)>) -> Candidate {
    match written.get(&written_key(&cached.uid, lock)) {
        Some((replaced, newer, _)) if *replaced == cached.resource_version => newer.clone(),
        _ => cached,
    }
}

/// Remembers `written`, the lock's own Lease (slot 0) as this operator's write returned it, and
/// the version it replaced ([`Context::leases_written`]).
fn remember_lease(ctx: &Context, ns: &str, slot: u32, replaced: Option<String>, written: &Lease) {
    if let (0, Some(replaced)) = (slot, replaced) {
        let key = format!("{ns}/{}", written.name_any());
        let entry = (replaced, written.clone(), Instant::now());
        ctx.leases_written.lock().unwrap_or_else(|e| e.into_inner()).insert(key, entry);
    }
}

/// `cached`, or the Lease as this operator's own last write returned it while the cache still
/// shows the version that write replaced ([`Context::leases_written`]), for at most
/// [`HOLDER_CACHE_LAG`]. A version the Lease had: a lagging cache could show it too, so the
/// protocol sees nothing it could not see otherwise (the model's caches lag by any amount).
fn newest_lease(ctx: &Context, ns: &str, name: &str, cached: Option<Lease>) -> Option<Lease> {
    let mut written = ctx.leases_written.lock().unwrap_or_else(|e| e.into_inner());
    written.retain(|_, (_, _, at)| at.elapsed() < HOLDER_CACHE_LAG);
    let cached = cached?;
    match written.get(&format!("{ns}/{name}")) {
        Some((replaced, newer, _)) if Some(replaced) == cached.metadata.resource_version.as_ref() => {
            Some(newer.clone())
        }
        _ => Some(cached),
    }
}

/// How long a holder as returned by the operator's own grant patch stands in for the cached one
/// that the patch replaced ([`Context::holders_written`]): longer than a watch event takes to
/// arrive; after it the cache is trusted again, whatever it shows.
pub const HOLDER_CACHE_LAG: Duration = Duration::from_secs(10);

/// Whether `pod` is a candidate for `lock`: its `leasehold.dev/lock` annotation names it, it
/// was granted it (`leasehold.dev/granted-lock`), or its multi-lock set has it
/// ([`crate::lock::lock_set`]).
pub fn pod_concerns_lock(pod: &Pod, lock: &str) -> bool {
    pod.annotations().get(LOCK_ANNOTATION).map(|v| v.trim()) == Some(lock)
        || pod.annotations().get(GRANTED_LOCK_ANNOTATION).map(String::as_str) == Some(lock)
        || lock_set(pod.annotations()).iter().any(|l| l == lock)
}

/// Whether `pod` is bound to a node that is not Ready (NotReady, Unknown, or missing from the
/// node cache).
fn node_lost(ctx: &Context, pod: &Pod) -> bool {
    let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty()) else {
        return false;
    };
    !ctx.nodes.get(&ObjectRef::new(node)).is_some_and(|n| {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == "True")
    })
}

/// The decision's view of a pod for `lock`; `None` for pods without name/uid/creationTimestamp.
/// Its token counts only if it was granted for this lock (`leasehold.dev/granted-lock`), so a pod
/// that holds another lock, or forged a token annotation, is never taken for this lock's holder.
///
/// A multi-lock pod (a lock set, [`crate::lock::lock_set`], and not granted this lock as a single
/// lock) is a candidate only for the locks of its set, with [`Candidate::multi`] set: its token is
/// `<lock>.locks.leasehold.dev/fencing-token`, `withdrawn` is
/// `<lock>.locks.leasehold.dev/withdrawn` (0 when missing or unreadable), and `others_recorded`
/// says every other lock of the set has a readable token annotation. Its slot is always 0.
pub fn candidate_of_pod(p: &Pod, lock: &str, node_lost: bool) -> Option<Candidate> {
    let spec = p.spec.as_ref();
    let name = p.metadata.name.clone()?;
    let ann = |k: &str| p.annotations().get(k).map(String::as_str);
    let set = lock_set(p.annotations());
    let multi = match (ann(GRANTED_LOCK_ANNOTATION) == Some(lock), set.is_empty()) {
        (false, false) if !set.iter().any(|l| l == lock) => return None,
        (false, false) => Some(MultiLock {
            unservable: false,
            withdrawn: ann(&lock_withdrawn_annotation(lock)).and_then(parse_token).unwrap_or(0),
            others_recorded: set
                .iter()
                .filter(|l| *l != lock)
                .all(|l| ann(&lock_token_annotation(l)).and_then(parse_token).is_some()),
        }),
        _ => None,
    };
    let token = match multi {
        Some(_) => ann(&lock_token_annotation(lock)).and_then(parse_token),
        None => ann(TOKEN_ANNOTATION).and_then(parse_token).filter(|_| ann(GRANTED_LOCK_ANNOTATION) == Some(lock)),
    };
    let slot = match multi {
        Some(_) => 0,
        None => ann(SLOT_ANNOTATION).and_then(|v| v.trim().parse().ok()).unwrap_or(0),
    };
    Some(Candidate {
        kind: HolderKind::Pod,
        identity: name.clone(),
        name,
        uid: p.metadata.uid.clone()?,
        resource_version: p.metadata.resource_version.clone().unwrap_or_default(),
        created: p.metadata.creation_timestamp.as_ref()?.0,
        gated: spec
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_some_and(|g| g.iter().any(|g| g.name == SCHEDULING_GATE)),
        node_name: spec.and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty()),
        node_lost,
        phase: Phase::parse(p.status.as_ref().and_then(|s| s.phase.as_deref())),
        deleting: p.metadata.deletion_timestamp.is_some(),
        token,
        // Busy policies are not served for lock sets (not model-checked with them; the pod
        // checks warn): a multi-lock pod waits in FIFO order with no time limit.
        on_busy: match multi {
            Some(_) => policy::BusyPolicy::Wait,
            None => policy::parse_on_busy(ann(policy::ON_BUSY_ANNOTATION)).unwrap_or_default(),
        },
        max_wait: match multi {
            Some(_) => None,
            None => policy::parse_max_wait(ann(policy::MAX_WAIT_ANNOTATION)).unwrap_or_default(),
        },
        waiting_for: None,
        slot,
        multi,
    })
}

/// The decision's view of a claim for lock `lock`: not granted yet = gated; granted = Running;
/// rejected = Failed. `None` for a claim without name/uid/creationTimestamp, or one that does not
/// ask for `lock`.
///
/// A claim with a lock set (`spec.locks`, [`crate::crd::DistributedLockClaimSpec::lock_set`])
/// is a candidate of each lock of its set with [`Candidate::multi`] set, as a multi-lock pod is
/// (`docs/multi-lock.md`, the claim as the commit point): its token is `status.tokens[lock]`,
/// `withdrawn` is `status.withdrawn[lock]`, `others_recorded` says every other lock of the set
/// has a token in `status.tokens`, and it is gated until `status.phase` is `Granted` (or
/// `Expired`, a granted set whose grant ended). It waits in FIFO order with no time limit.
///
/// A standing claim (`spec.request = Some(_)`, issue 12) is the candidate of its current request
/// r only ([`grant::current_request`]: the highest of `spec.request`, `status.request` and the
/// request the lock's slot-0 Lease `lease` names): UID [`grant::request_uid`]`(metadata.uid, r)`,
/// and its status counts only when `status.request == Some(r)`; a status of an older request
/// leaves request r waiting (no token, not rejected, not granted). It queues from
/// `spec.requestTime` (fallback `metadata.creationTimestamp`), except a request known only from
/// the Lease (a waiter that arrived by the Lease, [`grant::lease_arrival`]), which queues at
/// [`grant::LEASE_ARRIVAL_QUEUED`] ([`at_lease_request`]). Without `lease` (`None`) it is the
/// claim object's own request, max(`spec.request`, `status.request`): what
/// [`grant::keep_released`] must be given ([`with_released`]).
pub fn candidate_of_claim(c: &DistributedLockClaim, lock: &str, lease: Option<&LeaseView>) -> Option<Candidate> {
    Some(at_lease_request(claim_object_candidate(c, lock)?, lease))
}

/// A standing claim's candidate `c` as the claim object has it (request max(`spec.request`,
/// `status.request`)), moved to the request that `lease` (its lock's slot-0 Lease) names for it
/// when that is higher ([`grant::lease_request`], as holder, next-holder hint or released
/// request): a request its process made by writing the Lease itself, which the claim object
/// does not show. That request is waiting (gated, no token; its status, of an older request,
/// does not count) and queues at [`grant::LEASE_ARRIVAL_QUEUED`], after every request known from
/// a claim object. Pods, one-shot claims and every other candidate are returned as they are.
pub fn at_lease_request(c: Candidate, lease: Option<&LeaseView>) -> Candidate {
    if c.kind != HolderKind::Claim || c.multi.is_some() {
        return c;
    }
    let (object, Some(r)) = grant::split_request_uid(&c.uid) else { return c };
    match lease.and_then(|l| grant::lease_request(l, object, &c.identity)) {
        Some(known) if known > r => Candidate {
            uid: grant::request_uid(object, known),
            created: grant::LEASE_ARRIVAL_QUEUED,
            gated: true,
            phase: Phase::Pending,
            token: None,
            slot: 0,
            waiting_for: None,
            ..c
        },
        _ => c,
    }
}

/// [`at_lease_request`] for every candidate.
fn at_lease(base: &[Candidate], lease: Option<&LeaseView>) -> Vec<Candidate> {
    base.iter().cloned().map(|c| at_lease_request(c, lease)).collect()
}

/// Folds `c`, as a write of this reconcile returned it (a claim at its object's own request, a
/// pod), into `base`, and recomputes what the snapshot decides on from it at the requests that
/// the lock's slot-0 Lease `lease0` (as last read or written) names ([`at_lease`]).
fn absorb(snapshot: &mut Snapshot, base: &mut Vec<Candidate>, c: Candidate, lease0: Option<&Lease>) {
    absorb_base(base, c);
    snapshot.candidates = at_lease(base, lease0.map(lease::view).as_ref());
}

/// Drops the candidate of the object that candidate UID `uid` stands for (a pod, a claim, or a
/// standing claim's request) from `base` and the snapshot.
fn forget(snapshot: &mut Snapshot, base: &mut Vec<Candidate>, uid: &str) {
    let object = grant::split_request_uid(uid).0;
    base.retain(|c| grant::split_request_uid(&c.uid).0 != object);
    snapshot.candidates.retain(|c| grant::split_request_uid(&c.uid).0 != object);
}

/// Replaces in `base` the candidate of the same object as `c` (a standing claim's candidate
/// moves from request to request) by `c`, or adds it.
fn absorb_base(base: &mut Vec<Candidate>, c: Candidate) {
    let object = |x: &Candidate| (x.kind, grant::split_request_uid(&x.uid).0.to_string());
    match base.iter_mut().find(|x| object(x) == object(&c)) {
        Some(x) => {
            let unservable = x.multi.as_ref().is_some_and(|m| m.unservable);
            *x = c;
            if let Some(m) = x.multi.as_mut() {
                m.unservable |= unservable;
            }
        }
        None => base.push(c),
    }
}

/// The candidate of claim `c` for `lock` as the claim object alone has it ([`candidate_of_claim`]
/// without the Lease).
fn claim_object_candidate(c: &DistributedLockClaim, lock: &str) -> Option<Candidate> {
    if !c.spec.concerns(lock) {
        return None;
    }
    let object_uid = c.metadata.uid.clone()?;
    let (uid, created, status) = match c.spec.request {
        // A standing claim's request r: its own candidate, under its request UID, queued from
        // when the process made it; the status counts only if it is that request's. A status
        // above `spec.request` records a request that arrived by the Lease (its grant, or its
        // rejection): that is the claim's request now.
        Some(spec) => {
            let r = spec.max(c.status.as_ref().and_then(|s| s.request).unwrap_or(0));
            (
                grant::request_uid(&object_uid, r),
                c.spec.request_time.as_ref().map(|t| t.0).or(c.metadata.creation_timestamp.as_ref().map(|t| t.0))?,
                c.status.clone().filter(|s| s.request == Some(r)).unwrap_or_default(),
            )
        }
        None => (object_uid, c.metadata.creation_timestamp.as_ref()?.0, c.status.clone().unwrap_or_default()),
    };
    let set = c.spec.lock_set();
    let multi = (!set.is_empty()).then(|| MultiLock {
        unservable: false,
        withdrawn: status.withdrawn.get(lock).copied().unwrap_or(0),
        others_recorded: set.iter().filter(|l| *l != lock).all(|l| status.tokens.contains_key(l)),
    });
    let (token, granted) = match multi {
        Some(_) => {
            (status.tokens.get(lock).copied(), matches!(status.phase, Some(ClaimPhase::Granted | ClaimPhase::Expired)))
        }
        None => (status.token, status.token.is_some()),
    };
    let phase = match status.phase {
        // `Expired` is status only: for the decision an expired claim stays what it was (a grant,
        // with its token, that the Lease no longer records), so the protocol the model checker
        // explores (tests/model.rs) is unchanged by it.
        Some(ClaimPhase::Rejected) => Phase::Failed,
        _ if granted => Phase::Running,
        _ => Phase::Pending,
    };
    Some(Candidate {
        kind: HolderKind::Claim,
        name: c.metadata.name.clone()?,
        identity: c.spec.identity.clone(),
        uid,
        resource_version: c.metadata.resource_version.clone().unwrap_or_default(),
        created,
        gated: !granted,
        node_name: None,
        node_lost: false,
        phase,
        deleting: c.metadata.deletion_timestamp.is_some(),
        token,
        on_busy: match (c.spec.on_busy, &multi) {
            (OnBusy::Skip, None) => policy::BusyPolicy::Skip,
            _ => policy::BusyPolicy::Wait,
        },
        max_wait: c.spec.max_wait_seconds.filter(|s| *s > 0 && multi.is_none()).map(|s| Duration::from_secs(s as u64)),
        waiting_for: None,
        slot: if multi.is_some() { 0 } else { status.slot.unwrap_or(0) },
        multi,
    })
}

/// The claim object a candidate, Grant or Reject UID `uid` stands for, as the preconditions of
/// a claim status patch: `{"uid": <object UID>, "resourceVersion": resource_version}`, and the
/// standing claim's request that the status written describes (`status.request`), `None` for a
/// one-shot claim or a pod ([`grant::split_request_uid`]).
fn claim_target(uid: &str, resource_version: &str) -> (serde_json::Value, Option<i64>) {
    let (object, request) = grant::split_request_uid(uid);
    (json!({ "uid": object, "resourceVersion": resource_version }), request)
}

/// `status` (a claim status merge patch's `status` object) with `status.request = request` for
/// a standing claim's request; unchanged for a one-shot claim (`None`).
fn for_request(mut status: serde_json::Value, request: Option<i64>) -> serde_json::Value {
    if let Some(r) = request {
        status["request"] = json!(r);
    }
    status
}

/// `candidates` without the requests that a Lease of `leases` lists as released by their
/// holders (`leasehold.dev/released`): what `machine::step` decides on.
fn unreleased(candidates: &[Candidate], leases: &[Option<Lease>]) -> Vec<Candidate> {
    let released: Vec<String> = leases.iter().flatten().flat_map(lease::released).collect();
    candidates.iter().filter(|c| !released.contains(&c.uid)).cloned().collect()
}

/// The claim status merge patch's `status` that rejects a waiting request: `phase: Rejected`,
/// `reason`, `message`, now; for a standing claim's request `request` (`Some(r)`), also
/// `status.request = r` and the grant fields of an earlier request removed (`token`, `slot`,
/// `leaseName`, `leaseResourceVersion`: a merge patch leaves what it does not name, and a
/// rejected request was never granted, I3), so neither the holder nor the operator reads request
/// r as granted with the token of request r - 1.
fn rejection_status(reason: &str, message: &str, request: Option<i64>) -> serde_json::Value {
    let mut status = json!({
        "phase": "Rejected", "reason": reason, "message": message, "lastTransitionTime": Timestamp::now(),
    });
    if request.is_some() {
        for field in ["token", "slot", "leaseName", "leaseResourceVersion"] {
            status[field] = serde_json::Value::Null;
        }
    }
    for_request(status, request)
}

/// `observed` with the `leasehold.dev/released` list that an operator write of it keeps
/// ([`grant::keep_released`] over `candidates`, every pod and claim candidate of the lock as the
/// snapshot has them): the base of every Lease update the operator makes, so a released request
/// stays listed while its claim may still be at that request, and the list stays short.
///
/// `candidates` must be the claim objects' own requests ([`candidate_of_claim`] without the
/// Lease), never moved to a request the Lease names ([`at_lease_request`]): a hint that a waiter
/// wrote itself (request r + 1) and that this write displaces must not drop that claim's entry
/// for request r, or request r, released, would look like a waiter again and be granted twice.
fn with_released(observed: &Lease, candidates: &[Candidate]) -> Lease {
    let mut lease = observed.clone();
    let kept = grant::keep_released(&lease::released(observed), candidates);
    lease::put_released(&mut lease, &kept);
    lease
}

/// Raises `status.tokenCeiling` to `to` with the lock's resourceVersion as precondition. For a
/// semaphore's grant in slot `k` (`slot` = [`machine::Step::reserved_slot`]) the same write sets
/// `status.slotTokens[k] = to` (the list as `lock` shows it, extended with zeros): one
/// compare-and-swap, so the next reservation, by any operator, has seen the slot this token may
/// still land in.
async fn reserve_tokens(
    api: &Api<DistributedLock>,
    lock: &DistributedLock,
    to: i64,
    slot: Option<u32>,
) -> Result<DistributedLock> {
    let patch = reservation_patch(lock, to, slot);
    let pp = PatchParams { field_manager: Some(TOKEN_FIELD_MANAGER.into()), ..PatchParams::default() };
    call("reserve fencing tokens", api.patch_status(&lock.name_any(), &pp, &Patch::Merge(&patch))).await
}

/// The merge patch of [`reserve_tokens`]: `metadata.resourceVersion` of `lock` (the
/// precondition), `status.tokenCeiling = to`, and with `slot = Some(k)` the whole
/// `status.slotTokens` list as `lock` shows it, extended with zeros to k + 1 entries, with entry
/// k set to `to` (a merge patch replaces a list whole; the precondition makes that safe).
fn reservation_patch(lock: &DistributedLock, to: i64, slot: Option<u32>) -> serde_json::Value {
    let mut status = json!({ "tokenCeiling": to });
    if let Some(k) = slot.map(|k| k as usize) {
        let mut tokens = lock.status.as_ref().map(|s| s.slot_tokens.clone()).unwrap_or_default();
        if tokens.len() <= k {
            tokens.resize(k + 1, 0);
        }
        tokens[k] = to;
        status["slotTokens"] = json!(tokens);
    }
    json!({
        "metadata": { "resourceVersion": lock.resource_version() },
        "status": status,
    })
}

/// Second write of a grant, after the Lease write: for a pod, the token annotation and the
/// removal of the scheduling gate; for a claim, its status (phase Granted, token). Both with the
/// holder's UID and the resourceVersion the decision saw as preconditions: a new object with the
/// same name, or one that changed since (deleted, re-annotated, rejected), is never granted from
/// a stale view (409; the next reconcile decides again). Found by the model checker
/// (`tests/model.rs`): a grant finished from a stale view ungated a deleted pod with a token
/// below one already handed out. `lease_rv`: the resourceVersion of a Lease that names the
/// holder, given to a claim (`status.leaseResourceVersion`) for its first compare-and-swap.
/// A multi-lock pod (`multi`, [`Candidate::multi`]) gets this lock's token in
/// `<lock>.locks.leasehold.dev/fencing-token` instead of the single-lock annotations; the patch
/// is decided only on a version of the pod that records every other lock of its set, so the
/// precondition makes it the all-or-nothing commit (`docs/multi-lock.md`).
/// Returns the holder as the API server answered.
async fn patch_holder(
    ctx: &Context,
    ns: &str,
    lock: &DistributedLock,
    g: &Grant,
    lease_rv: Option<String>,
    multi: bool,
) -> Result<Candidate> {
    let note = match multi {
        false => format!("{} holds the lock with fencing token {}", g.identity, g.token),
        true => {
            format!("{} holds the lock with fencing token {}, and every other lock of its set", g.identity, g.token)
        }
    };
    let (holder_ref, holder) = match g.kind {
        HolderKind::Pod => {
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
            let annotations = match multi {
                false => json!({
                    TOKEN_ANNOTATION: g.token.to_string(),
                    SLOT_ANNOTATION: g.slot.to_string(),
                    GRANTED_LOCK_ANNOTATION: lock.name_any(),
                }),
                true => json!({ (lock_token_annotation(&lock.name_any())): g.token.to_string() }),
            };
            let patch = json!({
                "metadata": { "uid": g.uid, "resourceVersion": g.resource_version, "annotations": annotations },
                "spec": { "schedulingGates": [ { "$patch": "delete", "name": SCHEDULING_GATE } ] },
            });
            let pod = call("patch Pod", api.patch(&g.name, &PatchParams::default(), &Patch::Strategic(&patch))).await?;
            (super::pod_ref(&pod), candidate_of_pod(&pod, &lock.name_any(), node_lost(ctx, &pod)))
        }
        HolderKind::Claim if multi => {
            // The commit of a claim's lock set: decided on a version that records every other
            // lock's token, so the precondition makes it all-or-nothing (docs/multi-lock.md).
            let api: Api<DistributedLockClaim> = Api::namespaced(ctx.client.clone(), ns);
            let patch = json!({
                "metadata": { "uid": g.uid, "resourceVersion": g.resource_version },
                "status": {
                    "phase": "Granted", "reason": "Granted", "message": note,
                    "tokens": { (lock.name_any()): g.token },
                    "lastTransitionTime": Timestamp::now(),
                },
            });
            let claim = call(
                "commit a claim's lock set",
                api.patch_status(&g.name, &PatchParams::default(), &Patch::Merge(&patch)),
            )
            .await?;
            (claim.object_ref(&()), candidate_of_claim(&claim, &lock.name_any(), None))
        }
        HolderKind::Claim => {
            let api: Api<DistributedLockClaim> = Api::namespaced(ctx.client.clone(), ns);
            let (metadata, request) = claim_target(&g.uid, &g.resource_version);
            let status = json!({
                "phase": "Granted", "token": g.token, "reason": "Granted", "message": note,
                "slot": g.slot, "leaseName": lease::slot_lease_name(&lock.name_any(), g.slot),
                "lastTransitionTime": Timestamp::now(), "leaseResourceVersion": lease_rv,
            });
            let patch = json!({ "metadata": metadata, "status": for_request(status, request) });
            let claim =
                call("patch claim status", api.patch_status(&g.name, &PatchParams::default(), &Patch::Merge(&patch)))
                    .await?;
            (claim.object_ref(&()), candidate_of_claim(&claim, &lock.name_any(), None))
        }
    };
    let holder = holder.ok_or(Error::MissingField("metadata"))?;
    remember_written(ctx, lock, g, &holder);
    // A pod grant is an Event on the lock and on the pod (the pod shows the grant only through
    // it: its gate just goes away). A claim grant is in the claim's status (Granted, the token,
    // this note) and the lock's status: no Event, which would be one more write per grant for
    // locks that change hands many times a second (issue 12, writes per grant). What goes wrong
    // with a claim (its lease expired, it was rejected) still is an Event.
    if g.kind == HolderKind::Pod {
        let lock_ref = lock.object_ref(&());
        ctx.event_related(&lock_ref, Some(holder_ref.clone()), EventType::Normal, "Granted", note.clone(), "Grant")
            .await;
        let pod_note = format!("lock {}: {note}", lock.name_any());
        ctx.event(&holder_ref, EventType::Normal, "LockGranted", pod_note, "Grant").await;
    }
    Ok(holder)
}

/// Remembers `holder` as the grant patch of `g` returned it ([`Context::holders_written`]).
fn remember_written(ctx: &Context, lock: &DistributedLock, g: &Grant, holder: &Candidate) {
    let entry = (g.resource_version.clone(), holder.clone(), Instant::now());
    ctx.holders_written.lock().unwrap_or_else(|e| e.into_inner()).insert(written_key(&g.uid, &lock.name_any()), entry);
}

/// "pod" or "claim's process", for Event notes about a multi-lock holder of `kind`.
fn holder_noun(kind: HolderKind) -> &'static str {
    match kind {
        HolderKind::Pod => "pod",
        HolderKind::Claim => "claim's process",
    }
}

/// [`record_on_holder`] for a claim with a lock set: one merge patch of the claim's status (UID
/// and the resourceVersion of the decision's view as preconditions; the phase stays `Waiting`)
/// that records this lock's token in `status.tokens`, or removes it and sets
/// `status.withdrawn[lock]` to it; `status.reason` and `status.message` say what happened. A
/// withdrawal is also a Normal Event `LockWithdrawn` on the claim; a reservation is not (one more
/// write per grant, issue 12: the status says it).
async fn record_on_claim(
    ctx: &Context,
    lock: &DistributedLock,
    g: &Grant,
    what: PodRecord,
    (reason, note): (&str, String),
) -> Result<Candidate> {
    let lock_name = lock.name_any();
    let (status, what_call) = match &what {
        PodRecord::Tentative => (
            json!({ "tokens": { (lock_name.clone()): g.token }, "reason": reason, "message": note }),
            "record a tentative grant on a claim",
        ),
        PodRecord::Withdrawn { .. } => (
            json!({
                "tokens": { (lock_name.clone()): null },
                "withdrawn": { (lock_name.clone()): g.token },
                "reason": reason, "message": note,
            }),
            "withdraw a tentative grant from a claim",
        ),
    };
    let patch = json!({ "metadata": { "uid": g.uid, "resourceVersion": g.resource_version }, "status": status });
    let ns = lock.namespace().unwrap_or_default();
    let api: Api<DistributedLockClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let claim = call(what_call, api.patch_status(&g.name, &PatchParams::default(), &Patch::Merge(&patch))).await?;
    let candidate = candidate_of_claim(&claim, &lock_name, None).ok_or(Error::MissingField("metadata"))?;
    remember_written(ctx, lock, g, &candidate);
    tracing::info!(lock = %lock_name, claim = %g.name, token = g.token, reason, "multi-lock claim updated");
    if matches!(what, PodRecord::Withdrawn { .. }) {
        ctx.event(&claim.object_ref(&()), EventType::Normal, reason, note, "Grant").await;
    }
    Ok(candidate)
}

/// What [`record_on_holder`] writes on a gated multi-lock pod.
enum PodRecord {
    /// [`Decision::RecordTentative`]: this lock's token; the gate stays.
    Tentative,
    /// [`Decision::Withdraw`]: this lock's token removed and recorded as withdrawn; `why` says
    /// why, as a phrase ("for <pod>, an older waiter", or that the pod's set is not served any
    /// more); the gate stays.
    Withdrawn { why: String },
}

/// One pod patch (strategic merge, UID and the resourceVersion of the decision's view as
/// preconditions; the gate is not touched) on the gated multi-lock pod `g` names, for lock `lock`:
/// records the grant's token in `<lock>.locks.leasehold.dev/fencing-token`, or removes it and sets
/// `<lock>.locks.leasehold.dev/withdrawn` to the token (wound-wait take-back, `docs/multi-lock.md`).
/// A Normal Event on the pod says which. For a claim with a lock set the same record is one
/// patch of the claim's status ([`record_on_claim`]). Returns the holder's candidate for this lock
/// as the API server answered.
///
/// # Errors
/// 409 when the pod changed since the decision (decided again), 404 when it is gone.
async fn record_on_holder(
    ctx: &Context,
    ns: &str,
    lock: &DistributedLock,
    g: &Grant,
    what: PodRecord,
) -> Result<Candidate> {
    let lock_name = lock.name_any();
    let (annotations, reason, note) = match &what {
        PodRecord::Tentative => (
            json!({ (lock_token_annotation(&lock_name)): g.token.to_string() }),
            "LockReserved",
            format!(
                "lock {lock_name}: reserved with fencing token {}; the {} starts once it holds every lock of its set",
                g.token,
                holder_noun(g.kind)
            ),
        ),
        PodRecord::Withdrawn { why } => (
            json!({
                (lock_token_annotation(&lock_name)): null,
                (lock_withdrawn_annotation(&lock_name)): g.token.to_string(),
            }),
            "LockWithdrawn",
            format!(
                "lock {lock_name}: the reservation with fencing token {} was taken back {why} (the {} had not \
                 started); it waits again",
                g.token,
                holder_noun(g.kind)
            ),
        ),
    };
    if g.kind == HolderKind::Claim {
        return record_on_claim(ctx, lock, g, what, (reason, note)).await;
    }
    let patch =
        json!({ "metadata": { "uid": g.uid, "resourceVersion": g.resource_version, "annotations": annotations } });
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let what_call = match what {
        PodRecord::Tentative => "record a tentative grant on a Pod",
        PodRecord::Withdrawn { .. } => "withdraw a tentative grant from a Pod",
    };
    let pod = call(what_call, api.patch(&g.name, &PatchParams::default(), &Patch::Strategic(&patch))).await?;
    let candidate = candidate_of_pod(&pod, &lock_name, node_lost(ctx, &pod)).ok_or(Error::MissingField("metadata"))?;
    remember_written(ctx, lock, g, &candidate);
    tracing::info!(lock = %lock_name, pod = %g.name, token = g.token, reason, "multi-lock pod updated");
    ctx.event(&super::pod_ref(&pod), EventType::Normal, reason, note, "Grant").await;
    Ok(candidate)
}

/// Marks a waiter that gave up: a pod as `Failed` (status subresource), a claim as `Rejected`,
/// both with the UID and the resourceVersion the decision saw as preconditions (a waiter that a
/// newer view granted meanwhile is never rejected from a stale one: 409, decided again; found by
/// the model checker, `tests/model.rs`); Events on the waiter and the lock. Returns the waiter as
/// the API server answered, `None` when it is gone, was replaced or changed.
async fn reject_waiter(
    ctx: &Context,
    ns: &str,
    kind: HolderKind,
    lock: &DistributedLock,
    r: &Reject,
) -> Result<Option<Candidate>> {
    let message = match r.reason {
        RejectReason::LockBusy => {
            format!("lock {} is held and this waiter asked to skip when busy; it did not run", lock.name_any())
        }
        RejectReason::LockWaitTimeout => {
            format!("waited longer than its max wait for lock {}; it did not run", lock.name_any())
        }
        RejectReason::LeaseExpired => format!(
            "lock {} named this claim while it waited for the other locks of its set, and no renewal was seen for {} s              (leaseDurationSeconds): its process stopped; the claim gives up and the lock moves on",
            lock.name_any(),
            lock.spec.lease_duration_seconds
        ),
    };
    let pp = PatchParams::default();
    let written = match kind {
        HolderKind::Pod => {
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
            let patch = json!({
                "metadata": { "uid": r.uid, "resourceVersion": r.resource_version },
                "status": { "phase": "Failed", "reason": r.reason.as_str(), "message": message },
            });
            call("fail waiting Pod", api.patch_status(&r.name, &pp, &Patch::Merge(&patch)))
                .await
                .map(|p| (p.object_ref(&()), candidate_of_pod(&p, &lock.name_any(), node_lost(ctx, &p))))
        }
        HolderKind::Claim => {
            let api: Api<DistributedLockClaim> = Api::namespaced(ctx.client.clone(), ns);
            let (metadata, request) = claim_target(&r.uid, &r.resource_version);
            let status = rejection_status(r.reason.as_str(), &message, request);
            let patch = json!({ "metadata": metadata, "status": status });
            call("reject claim", api.patch_status(&r.name, &pp, &Patch::Merge(&patch)))
                .await
                .map(|c| (c.object_ref(&()), candidate_of_claim(&c, &lock.name_any(), None)))
        }
    };
    let (waiter_ref, waiter) = match written {
        Ok(r) => r,
        Err(e) if e.is_not_found() || e.is_conflict() => return Ok(None),
        Err(e) => return Err(e),
    };
    Metrics::inc(&ctx.metrics.rejections, r.reason.as_str());
    tracing::info!(lock = %lock.name_any(), waiter = %r.name, reason = r.reason.as_str(), "waiter gave up");
    ctx.event(&waiter_ref, EventType::Warning, r.reason.as_str(), message.clone(), "Reject").await;
    let lock_note = format!("{}: {message}", r.name);
    ctx.event(&lock.object_ref(&()), EventType::Normal, r.reason.as_str(), lock_note, "Reject").await;
    Ok(waiter)
}

/// Tells each waiting pod, once, by a Normal Event `Waiting`, what it waits for: the lock, who
/// holds it with which token, and its place in the queue when it joined. Only while someone holds
/// the lock (a waiter of a free lock is granted next). The place changes as the queue moves;
/// `status.waiters` and `leasehold status` show the current order. A claim gets no such Event:
/// its own `status.phase` says `Waiting`, and its process (`leasehold lock`, the library) is
/// the one waiting, not a person reading Events (one write less per queued claim, issue 12).
async fn announce_waiters(
    ctx: &Context,
    ns: &str,
    lock: &DistributedLock,
    holder: Option<&Grant>,
    candidates: &[Candidate],
) {
    let Some(holder) = holder else { return };
    let queue: Vec<&Candidate> = queue_of(candidates).into_iter().filter(|c| c.uid != holder.uid).collect();
    let fresh: Vec<(usize, &Candidate)> = {
        let mut announced = ctx.announced.lock().unwrap_or_else(|e| e.into_inner());
        let told = announced.entry(lock.uid().unwrap_or_default()).or_default();
        told.retain(|uid| queue.iter().any(|c| c.uid == *uid));
        queue
            .iter()
            .enumerate()
            .filter(|(_, c)| c.kind == HolderKind::Pod && told.insert(c.uid.clone()))
            .map(|(i, c)| (i, *c))
            .collect()
    };
    for (i, c) in fresh {
        let waiter = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(c.name.clone()),
            namespace: Some(ns.to_string()),
            uid: Some(c.uid.clone()),
            ..Default::default()
        };
        let note = format!(
            "waiting for lock {}, held by {} with fencing token {}: place {} of {} in the queue",
            lock.name_any(),
            holder.identity,
            holder.token,
            i + 1,
            queue.len()
        );
        ctx.event(&waiter, EventType::Normal, "Waiting", note, "Wait").await;
    }
}

/// Marks every claim of this lock granted in slot `slot` that still shows `Granted` for a grant
/// that slot's Lease (`lease`, as last written or observed) no longer records as `Expired`: its token is at most the Lease's
/// token and the Lease does not name it; except the claim whose holder freed the Lease itself
/// (the Lease names nobody and still carries that claim's token), which its holder deletes.
/// `released` is the release this reconcile just wrote (its reason goes into the status);
/// otherwise the reason is `GrantEnded`. The patch carries the claim's UID and the
/// resourceVersion it was seen with, so a claim that changed since is looked at again by the
/// next reconcile rather than overwritten (409 and 404 are ignored here). Returns the claims as
/// the expiry patches returned them (their objects' own requests), for the caller to absorb.
async fn expire_claims(
    ctx: &Context,
    ns: &str,
    lock: &DistributedLock,
    snapshot: &Snapshot,
    slot: u32,
    lease: &grant::LeaseView,
    released: Option<&Release>,
) -> Result<Vec<Candidate>> {
    let (lease_token, holder_uid) = (lease.token, lease.holder.as_ref().and_then(|h| h.uid.clone()));
    let expired: Vec<Candidate> = snapshot
        .candidates
        .iter()
        .filter(|c| c.kind == HolderKind::Claim && c.phase == Phase::Running && !c.gated && c.slot == slot)
        .filter(|c| c.token.is_some_and(|t| t <= lease_token) && holder_uid.as_deref() != Some(c.uid.as_str()))
        // The Lease names nobody, with this claim's token, and this reconcile released nothing:
        // the claim's holder freed the Lease itself (`LockGuard::release`) and deletes the claim
        // next. Not an expiry: left alone (if the claim stays, the next grant's higher token
        // marks it `GrantEnded`).
        .filter(|c| !(released.is_none() && lease.holder.is_none() && c.token == Some(lease_token)))
        // A standing claim's request that its holder released (listed in the Lease's
        // `leasehold.dev/released`): ended by its own holder, not expired; its claim stays and
        // asks again with its next request (no status write per grant for it).
        .filter(|c| !lease.released.contains(&c.uid))
        // A claim with a lock set releases its Leases one by one before it deletes itself, so
        // a lock it released may have moved on while it still releases the others: only a
        // grant this reconcile took back itself marks it `Expired` (its process learns any
        // loss from its own renewals).
        .filter(|c| c.multi.is_none() || released.is_some_and(|r| r.name == c.identity))
        // Only a claim that still shows Granted at the version decided on: as the cache has it,
        // or as this operator's own grant patch returned it (the cache lags behind that write).
        .filter(|c| {
            let written = ctx.holders_written.lock().unwrap_or_else(|e| e.into_inner());
            shows_granted(c, &lock.name_any(), &ctx.claims.state(), &written)
        })
        .cloned()
        .collect();
    let api: Api<DistributedLockClaim> = Api::namespaced(ctx.client.clone(), ns);
    let mut written = vec![];
    for c in expired {
        let (why, message) = match released.filter(|r| r.name == c.identity) {
            Some(r) if r.reason == grant::ReleaseReason::Expired => (
                r.reason.as_str(),
                format!(
                    "lock {}: no renewal seen for {} s (leaseDurationSeconds); the grant with token {} was taken back",
                    lock.name_any(),
                    lock.spec.lease_duration_seconds,
                    c.token.unwrap_or_default()
                ),
            ),
            Some(r) => (
                r.reason.as_str(),
                format!(
                    "lock {}: the grant with token {} ended: {}",
                    lock.name_any(),
                    c.token.unwrap_or_default(),
                    r.reason.as_str()
                ),
            ),
            None => (
                "GrantEnded",
                format!(
                    "lock {}: the Lease no longer records the grant with token {}",
                    lock.name_any(),
                    c.token.unwrap_or_default()
                ),
            ),
        };
        let (metadata, request) = claim_target(&c.uid, &c.resource_version);
        let status =
            json!({ "phase": "Expired", "reason": why, "message": message, "lastTransitionTime": Timestamp::now() });
        let patch = json!({ "metadata": metadata, "status": for_request(status, request) });
        match call("expire claim", api.patch_status(&c.name, &PatchParams::default(), &Patch::Merge(&patch))).await {
            Ok(claim) => {
                tracing::info!(lock = %lock.name_any(), claim = %c.name, reason = why, "claim grant expired");
                ctx.event(&claim.object_ref(&()), EventType::Warning, "GrantExpired", message, "Expire").await;
                written.extend(candidate_of_claim(&claim, &lock.name_any(), None));
            }
            Err(e) if e.is_conflict() || e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}

/// Whether claim candidate `c` (of lock `lock`) still shows `Granted` at the version it was
/// decided on (`c.resource_version`): the cached claim (`cached`) at that version with
/// `status.phase: Granted`, or the copy this operator's own grant patch returned
/// ([`Context::holders_written`], [`remember_written`]) at that version and granted. Without the
/// second, a grant written and taken back in the same reconcile (the cache has not seen the
/// grant yet) kept showing `Granted` beside the next holder's (chaos run, 2026-12-05: a recreated
/// Lease later adopted the stale grant and the waiter was answered 20 s late).
fn shows_granted(
    c: &Candidate,
    lock: &str,
    cached: &[Arc<DistributedLockClaim>],
    written: &HashMap<String, (String, Candidate, Instant)>,
) -> bool {
    let in_cache = cached.iter().any(|x| {
        x.metadata.uid.as_deref() == Some(grant::split_request_uid(&c.uid).0)
            && x.metadata.resource_version.as_deref() == Some(c.resource_version.as_str())
            && x.status.as_ref().and_then(|s| s.phase) == Some(ClaimPhase::Granted)
    });
    in_cache
        || written
            .get(&written_key(&c.uid, lock))
            .is_some_and(|(_, w, _)| w.resource_version == c.resource_version && !w.gated)
}

async fn record_release(ctx: &Context, lock: &DistributedLock, r: &Release) {
    let reason = r.reason.as_str();
    Metrics::inc(&ctx.metrics.releases, reason);
    if r.reason == grant::ReleaseReason::NodeLost {
        Metrics::inc(&ctx.metrics.reclaims, reason);
    }
    let type_ = if r.reason == grant::ReleaseReason::NodeLost { EventType::Warning } else { EventType::Normal };
    // A holder that stopped renewing, lost its node or was withdrawn did not release anything:
    // the operator took the lock back (a newcomer trial read "released" as the holder's doing).
    let note = match r.reason {
        grant::ReleaseReason::Expired | grant::ReleaseReason::NodeLost | grant::ReleaseReason::Withdrawn => {
            format!("the lock was taken back from {} (token {}): {reason}", r.name, r.token)
        }
        _ => format!("{} released the lock (token {}): {reason}", r.name, r.token),
    };
    tracing::info!(lock = %lock.name_any(), pod = %r.name, token = r.token, reason, "released");
    let pod = super::pod_ref_by_name(lock.namespace(), &r.name);
    ctx.event_related(&lock.object_ref(&()), Some(pod), type_, "Released", note, "Release").await;
}

/// How long a changed status view waits before it is written: the changes of one handover (the
/// new holder, then the releaser's new claim queueing, a few milliseconds apart) become one write
/// instead of two (issue 12, writes per grant). The status is a view for people and tools
/// (`kubectl get dlock`); no decision reads it back except `highestToken`, a lower bound that may
/// lag (the model checker's status apply may land late and stale).
pub const STATUS_DEBOUNCE: Duration = Duration::from_millis(250);

/// What the status shows, from one step ([`machine::Step`]).
struct StatusView<'a> {
    /// The lowest slot's holder (`plan.holder`).
    holder: &'a Option<Grant>,
    /// Every holder, lowest slot first (`Step::holders`).
    holders: &'a [Grant],
    /// Waiters' names in grant order.
    waiters: &'a [String],
    /// The creation time of the first waiter in the queue.
    first_waiter: Option<Timestamp>,
    /// The holder is a multi-lock pod that is still gated: reserved for it, waiting for the
    /// other locks of its set (`docs/multi-lock.md`).
    tentative: bool,
}

/// Writes the status view when it changed (no write when nothing changed: 0 writes when idle),
/// [`STATUS_DEBOUNCE`] after it first saw it change, and sets the lock's metric series at once.
/// `leases[k]` is slot k's Lease as last observed or written (slot 0: the lock's own). Returns
/// when to reconcile again to write a change that is still waiting, `None` if none is.
async fn write_status(
    api: &Api<DistributedLock>,
    lock: &DistributedLock,
    leases: &[Option<Lease>],
    view: &StatusView<'_>,
    ctx: &Context,
) -> Result<Option<Duration>> {
    let (holder, waiters, first_waiter_created) = (view.holder, view.waiters, view.first_waiter);
    let lease = leases.first().and_then(Option::as_ref);
    let old = lock.status.clone().unwrap_or_default();
    let lease_token = leases.iter().flatten().map(|l| lease::view(l).token).max().unwrap_or(0);
    // When the holder's grant was written: the acquireTime of its slot's Lease.
    let acquired = |g: &Grant| {
        leases
            .get(g.slot as usize)
            .and_then(Option::as_ref)
            .and_then(|l| l.spec.as_ref()?.acquire_time.as_ref())
            .map(|t| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t.0))
    };
    let holder_status = holder.as_ref().map(|g| HolderStatus {
        name: g.identity.clone(),
        uid: Some(g.uid.clone()),
        token: g.token,
        since: old
            .holder
            .as_ref()
            .filter(|h| h.uid.as_deref() == Some(&g.uid))
            .and_then(|h| h.since.clone())
            .or_else(|| acquired(g)),
    });
    let semaphore = lock.spec.max_holders.map(|n| n.max(1));
    let mut new = DistributedLockStatus {
        holder: holder_status,
        highest_token: old.highest_token.max(lease_token),
        token_ceiling: old.token_ceiling,
        slot_tokens: old.slot_tokens.clone(),
        holders: match semaphore {
            Some(_) => view
                .holders
                .iter()
                .map(|g| SlotHolderStatus {
                    name: g.identity.clone(),
                    uid: Some(g.uid.clone()),
                    token: g.token,
                    slot: g.slot,
                })
                .collect(),
            None => vec![],
        },
        occupancy: semaphore.map(|n| format!("{}/{n}", view.holders.len())),
        waiting: waiters.len() as i32,
        waiters: waiters.iter().take(STATUS_WAITERS).cloned().collect(),
        lease_name: lease.map(|l| l.name_any()),
        observed_generation: lock.meta().generation,
        conditions: old.conditions.clone(),
    };
    let gen_ = lock.meta().generation;
    let now = Timestamp::now();
    // The Lease is created at the first grant (`lock::grant::decide`): until then there is none.
    let ready =
        if lease.is_some() { "Lease is in sync" } else { "in service; its Lease is created at the first grant" };
    condition::set(&mut new.conditions, condition::READY, true, reason::RECONCILED, ready, gen_, now);
    match holder {
        Some(g) => {
            let message = match view.holders {
                [_, _, ..] => {
                    let all: Vec<String> = view
                        .holders
                        .iter()
                        .map(|h| format!("{} with token {} (slot {})", h.name, h.token, h.slot))
                        .collect();
                    format!("held by {}", all.join(", "))
                }
                _ if view.tentative => format!(
                    "reserved for {} with token {}: it waits for the other locks of its set (leasehold.dev/locks, or the claim's spec.locks) and has not started",
                    g.name, g.token
                ),
                _ => format!("held by {} with token {}", g.name, g.token),
            };
            condition::set(&mut new.conditions, condition::HELD, true, reason::GRANTED, &message, gen_, now)
        }
        None => condition::set(
            &mut new.conditions,
            condition::HELD,
            false,
            reason::FREE,
            "nobody holds the lock",
            gen_,
            now,
        ),
    };
    let state = LockState {
        held: holder.is_some(),
        held_since: new.holder.as_ref().and_then(|h| h.since.as_ref()).map(|t| t.0.as_millisecond() as f64 / 1000.0),
        waiters: waiters.len() as i64,
        oldest_waiter_since: first_waiter_created
            .filter(|_| !waiters.is_empty())
            .map(|t| t.as_millisecond() as f64 / 1000.0),
        highest_token: new.highest_token,
    };
    ctx.metrics.set_lock(&lock.namespace().unwrap_or_default(), &lock.name_any(), &state);
    let uid = lock.uid().unwrap_or_default();
    let settled = || {
        ctx.status_pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&uid);
        Ok(None)
    };
    if new == old {
        return settled();
    }
    let digest = status_digest(&new);
    let recently = |(at, d): &(Instant, u64)| *d == digest && at.elapsed() < STATUS_CACHE_LAG;
    if ctx.status_written.lock().unwrap_or_else(|e| e.into_inner()).get(&uid).is_some_and(recently) {
        // Written moments ago; the cache has not caught up with our own write yet.
        return settled();
    }
    let since =
        *ctx.status_pending.lock().unwrap_or_else(|e| e.into_inner()).entry(uid.clone()).or_insert_with(Instant::now);
    let wait = STATUS_DEBOUNCE.saturating_sub(since.elapsed());
    if !wait.is_zero() {
        return Ok(Some(wait));
    }
    patch_status_view(api, lock, &new, ctx).await?;
    settled()
}

/// How long a status the operator applied is taken as still current when the lock cache shows
/// something else: the cache lags the operator's own write by milliseconds; past this, the
/// cache is believed (a hand edit of the status is repaired by the next reconcile).
const STATUS_CACHE_LAG: Duration = Duration::from_secs(10);

/// Digest of the status fields the operator applies ([`patch_status_view`]), condition
/// timestamps left out: a stale cache makes a condition's `lastTransitionTime` look new, and
/// that alone is no reason to write again.
fn status_digest(status: &DistributedLockStatus) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut s = status.clone();
    s.token_ceiling = 0;
    s.slot_tokens.clear();
    s.conditions.retain(|c| c.type_ == condition::READY || c.type_ == condition::HELD);
    for c in &mut s.conditions {
        c.last_transition_time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH);
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(&s).unwrap_or_default().hash(&mut h);
    h.finish()
}

/// Applies every status field except `tokenCeiling` and `slotTokens`, which only
/// [`reserve_tokens`] moves (by compare-and-swap: this apply has no precondition, and a stale
/// one must not move a reservation back).
/// Every apply is remembered in `ctx.status_written` (see [`write_status`]).
async fn patch_status_view(
    api: &Api<DistributedLock>,
    lock: &DistributedLock,
    status: &DistributedLockStatus,
    ctx: &Context,
) -> Result<()> {
    let digest = status_digest(status);
    // Server-side apply under our own field manager: fields we stop sending (a holder that left,
    // an empty queue) are removed; conditions owned by other managers (the workload
    // controller's `Degraded`) and `tokenCeiling` (owned by the reservation patch) are untouched.
    let mut status = status.clone();
    status.conditions.retain(|c| c.type_ == condition::READY || c.type_ == condition::HELD);
    let mut value = serde_json::to_value(&status).map_err(|_| Error::MissingField("status"))?;
    if let Some(obj) = value.as_object_mut() {
        obj.remove("tokenCeiling");
        obj.remove("slotTokens");
    }
    let patch = json!({
        "apiVersion": "leasehold.dev/v1alpha1",
        "kind": "DistributedLock",
        "metadata": { "name": lock.name_any() },
        "status": value,
    });
    let pp = PatchParams::apply(super::CONTROLLER_NAME).force();
    call("apply DistributedLock status", api.patch_status(&lock.name_any(), &pp, &Patch::Apply(&patch))).await?;
    let written = (Instant::now(), digest);
    ctx.status_written.lock().unwrap_or_else(|e| e.into_inner()).insert(lock.uid().unwrap_or_default(), written);
    Ok(())
}

/// Waiting candidates' names in grant order.
fn waiters_of(candidates: &[Candidate]) -> Vec<String> {
    grant::queue_of(candidates).iter().map(|c| c.name.clone()).collect()
}

/// The lock cannot be served: `Ready=False` with `reason` and `message`, the waiters still
/// counted, and one Warning Event when the condition changes (not one per reconcile).
async fn report_not_ready(
    api: &Api<DistributedLock>,
    lock: &DistributedLock,
    ctx: &Context,
    why: &str,
    message: &str,
    waiters: Option<&[String]>,
) -> Result<()> {
    let old = lock.status.clone().unwrap_or_default();
    let mut status = old.clone();
    if let Some(waiters) = waiters {
        status.waiting = waiters.len() as i32;
        status.waiters = waiters.iter().take(STATUS_WAITERS).cloned().collect();
    }
    let now = Timestamp::now();
    let changed =
        condition::set(&mut status.conditions, condition::READY, false, why, message, lock.meta().generation, now);
    if changed {
        ctx.event(&lock.object_ref(&()), EventType::Warning, why, message.to_string(), "Reconcile").await;
    }
    if status != old {
        patch_status_view(api, lock, &status, ctx).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(rv: &str, token: Option<i64>) -> Candidate {
        Candidate { resource_version: rv.into(), ..crate::lock::machine::test_claim("c", 0, token) }
    }

    #[test]
    fn a_holder_just_granted_is_read_from_the_grant_patch_until_the_cache_moves_past_it() {
        let key = written_key("uid-c", "l");
        let written = HashMap::from([(key, ("5".to_string(), claim("6", Some(7)), Instant::now()))]);
        // The cache still shows version 5, waiting: the granted version 6 stands in for it.
        assert_eq!(newest(claim("5", None), "l", &written), claim("6", Some(7)));
        // The cache caught up, or moved on (the claim changed again): the cache is read.
        assert_eq!(newest(claim("6", Some(7)), "l", &written), claim("6", Some(7)));
        assert_eq!(newest(claim("8", None), "l", &written), claim("8", None));
        // Another object, or the same pod as another lock's candidate, is never replaced.
        let mut other = claim("5", None);
        other.uid = "uid-d".into();
        assert_eq!(newest(other.clone(), "l", &written), other);
        assert_eq!(newest(claim("5", None), "m", &written), claim("5", None));
    }

    /// A claim whose grant this reconcile just wrote (the cache still shows it waiting) counts as
    /// showing `Granted` at the written version, so taking that grant back marks it `Expired`.
    #[test]
    fn a_grant_written_in_this_reconcile_shows_granted_for_the_expiry() {
        let granted = claim("6", Some(7));
        let key = written_key(&granted.uid, "l");
        let written = HashMap::from([(key, ("5".to_string(), granted.clone(), Instant::now()))]);
        // The cache still has the claim waiting, at the version the grant patch replaced.
        let mut waiting = standing_claim(1, json!(null));
        waiting.metadata.uid = Some(granted.uid.clone());
        waiting.metadata.resource_version = Some("5".into());
        let cached_waiting = Arc::new(waiting);
        // Not in the cache at version 6: only the written copy says Granted.
        assert!(!shows_granted(&granted, "l", std::slice::from_ref(&cached_waiting), &HashMap::new()));
        assert!(shows_granted(&granted, "l", std::slice::from_ref(&cached_waiting), &written));
        // A different version than the written one, a gated written copy, or another lock: no.
        assert!(!shows_granted(&claim("8", Some(7)), "l", std::slice::from_ref(&cached_waiting), &written));
        let gated =
            HashMap::from([(written_key(&granted.uid, "l"), ("5".to_string(), claim("6", None), Instant::now()))]);
        assert!(!shows_granted(&granted, "l", std::slice::from_ref(&cached_waiting), &gated));
        assert!(!shows_granted(&granted, "m", &[cached_waiting], &written));
        // The cache at that version showing Granted is enough on its own.
        let mut cached = standing_claim(1, json!({"phase": "Granted", "token": 7, "request": 1}));
        cached.metadata.uid = Some(granted.uid.clone());
        cached.metadata.resource_version = Some("6".into());
        assert!(shows_granted(&granted, "l", &[Arc::new(cached)], &HashMap::new()));
    }

    /// A single-holder lock's Lease writes record the reserved ceiling decided with; a
    /// semaphore's (and any slot above 0) none.
    #[test]
    fn only_a_single_holder_locks_lease_records_the_reserved_ceiling() {
        let mut lock = DistributedLock::new("l", Default::default());
        lock.status = Some(DistributedLockStatus { token_ceiling: 120, ..Default::default() });
        let snapshot = Snapshot {
            settings: Settings {
                start_timeout: Duration::from_secs(1),
                node_loss_timeout: Duration::from_secs(1),
                lease_duration: Duration::from_secs(1),
                claim_record_delay: Duration::ZERO,
            },
            lease: None,
            renew_marker: None,
            extra_slots: vec![],
            max_holders: None,
            candidates: vec![],
            ceiling: 120,
            highest_token: 0,
            slot_tokens: vec![],
            fresh_reservation: None,
        };
        assert_eq!(lease_ceiling(&lock, &snapshot, 0), Some(120));
        assert_eq!(lease_ceiling(&lock, &snapshot, 1), None);
        let nothing_reserved = Snapshot { ceiling: 0, ..snapshot.clone() };
        lock.status = None;
        assert_eq!(lease_ceiling(&lock, &nothing_reserved, 0), None);
        lock.spec.max_holders = Some(2);
        assert_eq!(lease_ceiling(&lock, &Snapshot { max_holders: Some(2), ..snapshot }, 0), None);
    }

    #[test]
    fn the_status_digest_ignores_condition_times_and_the_token_ceiling_only() {
        let mut a = DistributedLockStatus { highest_token: 3, waiting: 1, ..Default::default() };
        let t0 = Timestamp::UNIX_EPOCH;
        condition::set(&mut a.conditions, condition::READY, true, reason::RECONCILED, "in sync", Some(1), t0);
        let mut b = a.clone();
        b.conditions[0].last_transition_time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now());
        b.token_ceiling = 99;
        assert_eq!(status_digest(&a), status_digest(&b));
        let mut c = a.clone();
        c.waiting = 2;
        assert_ne!(status_digest(&a), status_digest(&c));
        let mut d = a.clone();
        condition::set(&mut d.conditions, condition::READY, false, reason::RECONCILE_ERROR, "x", Some(1), t0);
        assert_ne!(status_digest(&a), status_digest(&d));
    }

    #[test]
    fn a_semaphore_reservation_records_its_slot_in_the_same_patch_as_the_ceiling() {
        let mut lock = DistributedLock::new("l", Default::default());
        lock.metadata.resource_version = Some("41".into());
        lock.status = Some(DistributedLockStatus { token_ceiling: 7, slot_tokens: vec![5], ..Default::default() });
        let p = reservation_patch(&lock, 8, Some(2));
        assert_eq!(
            p,
            json!({"metadata": {"resourceVersion": "41"}, "status": {"tokenCeiling": 8, "slotTokens": [5, 0, 8]}})
        );
        let p = reservation_patch(&lock, 9, Some(0));
        assert_eq!(p["status"]["slotTokens"], json!([9]));
        // A single-holder lock's block reservation leaves the slot list alone.
        let p = reservation_patch(&lock, 1007, None);
        assert_eq!(p, json!({"metadata": {"resourceVersion": "41"}, "status": {"tokenCeiling": 1007}}));
    }

    #[test]
    fn a_pod_holder_reads_its_slot_from_its_annotation_missing_or_garbage_is_slot_0() {
        let pod = |slot: Option<&str>| {
            let mut ann = json!({LOCK_ANNOTATION: "l", GRANTED_LOCK_ANNOTATION: "l", TOKEN_ANNOTATION: "3"});
            if let Some(s) = slot {
                ann[SLOT_ANNOTATION] = json!(s);
            }
            let p: Pod = serde_json::from_value(json!({
                "metadata": {"name": "p", "uid": "u", "creationTimestamp": "2026-12-02T00:00:00Z", "annotations": ann},
            }))
            .unwrap();
            candidate_of_pod(&p, "l", false).unwrap().slot
        };
        assert_eq!((pod(Some("1")), pod(Some(" 3 ")), pod(None), pod(Some("x")), pod(Some("-1"))), (1, 3, 0, 0, 0));
    }

    fn multi_pod(annotations: serde_json::Value, gated: bool) -> Pod {
        let gates = if gated { json!([{"name": SCHEDULING_GATE}]) } else { json!([]) };
        serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u", "creationTimestamp": "2026-12-02T00:00:00Z", "annotations": annotations},
            "spec": {"schedulingGates": gates, "containers": []},
        }))
        .unwrap()
    }

    #[test]
    fn a_multi_lock_pod_is_a_candidate_of_each_lock_of_its_set_with_that_locks_own_token() {
        let p = multi_pod(
            json!({
                crate::lock::LOCKS_ANNOTATION: "a, b",
                "a.locks.leasehold.dev/fencing-token": "7",
                "b.locks.leasehold.dev/withdrawn": "4",
                // Single-lock annotations and busy policies do not count for a lock set.
                TOKEN_ANNOTATION: "99",
                policy::ON_BUSY_ANNOTATION: "skip",
            }),
            true,
        );
        let a = candidate_of_pod(&p, "a", false).unwrap();
        assert_eq!(a.token, Some(7));
        assert_eq!(a.multi, Some(MultiLock { withdrawn: 0, others_recorded: false, unservable: false }));
        assert_eq!((a.on_busy, a.slot), (policy::BusyPolicy::Wait, 0));
        let b = candidate_of_pod(&p, "b", false).unwrap();
        assert_eq!(b.token, None);
        assert_eq!(b.multi, Some(MultiLock { withdrawn: 4, others_recorded: true, unservable: false }));
        // Not a candidate of a lock outside its set, even one its leasehold.dev/lock names.
        assert!(candidate_of_pod(&p, "c", false).is_none());
        assert!(pod_concerns_lock(&p, "a") && pod_concerns_lock(&p, "b") && !pod_concerns_lock(&p, "c"));
    }

    #[test]
    fn a_claim_with_a_lock_set_is_a_candidate_of_each_lock_and_runs_only_once_granted() {
        let claim = |status: serde_json::Value| -> DistributedLockClaim {
            serde_json::from_value(json!({
                "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLockClaim",
                "metadata": {"name": "s", "namespace": "ns", "uid": "uid-s", "resourceVersion": "9",
                             "creationTimestamp": "2026-12-04T00:00:00Z"},
                "spec": {"lock": "b", "identity": "host", "locks": ["b", "a"], "onBusy": "Skip"},
                "status": status,
            }))
            .unwrap()
        };
        // Waiting, a recorded (tentative), b withdrawn once: gated for both locks.
        let c = claim(json!({"phase": "Waiting", "tokens": {"a": 7}, "withdrawn": {"b": 4}}));
        let a = candidate_of_claim(&c, "a", None).unwrap();
        assert_eq!((a.token, a.gated, a.phase, a.kind), (Some(7), true, Phase::Pending, HolderKind::Claim));
        assert_eq!(a.multi, Some(MultiLock { withdrawn: 0, others_recorded: false, unservable: false }));
        let b = candidate_of_claim(&c, "b", None).unwrap();
        assert_eq!(b.token, None);
        assert_eq!(b.multi, Some(MultiLock { withdrawn: 4, others_recorded: true, unservable: false }));
        // A set waits in FIFO order whatever its busy policy says (the CRD refuses one anyway).
        assert_eq!(b.on_busy, policy::BusyPolicy::Wait);
        assert!(candidate_of_claim(&c, "c", None).is_none());
        // Granted (the commit): a holder of both, with each lock's own token; Expired stays one.
        for phase in ["Granted", "Expired"] {
            let c = claim(json!({"phase": phase, "tokens": {"a": 7, "b": 5}}));
            let b = candidate_of_claim(&c, "b", None).unwrap();
            assert_eq!((b.token, b.gated, b.phase), (Some(5), false, Phase::Running), "{phase}");
        }
        // Rejected (it stopped renewing a tentative grant): terminal, never a waiter again.
        let c = claim(json!({"phase": "Rejected", "tokens": {"a": 7}}));
        let a = candidate_of_claim(&c, "a", None).unwrap();
        assert!(a.is_terminal() && !a.is_waiter());
    }

    #[test]
    fn a_single_lock_grant_outlives_a_lock_set_added_later() {
        let p = multi_pod(
            json!({
                LOCK_ANNOTATION: "a", GRANTED_LOCK_ANNOTATION: "a", TOKEN_ANNOTATION: "5",
                crate::lock::LOCKS_ANNOTATION: "b,c",
            }),
            false,
        );
        let a = candidate_of_pod(&p, "a", false).unwrap();
        assert_eq!((a.token, a.multi.is_none()), (Some(5), true));
        assert!(candidate_of_pod(&p, "b", false).unwrap().multi.is_some());
    }

    #[test]
    fn a_lock_set_is_not_served_with_a_missing_lock_a_semaphore_or_a_name_too_long() {
        let lock = |name: &str, spec: serde_json::Value| -> DistributedLock {
            serde_json::from_value(json!({
                "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLock",
                "metadata": {"name": name, "namespace": "ns"}, "spec": spec,
            }))
            .unwrap()
        };
        let existing = [lock("a", json!({})), lock("b", json!({})), lock("pool", json!({"maxHolders": 2}))];
        let find = |l: &str| existing.iter().find(|x| x.name_any() == l);
        let set = |s: &[&str]| s.iter().map(|l| l.to_string()).collect::<Vec<_>>();
        assert_eq!(lock_set_unservable_among("ns", &set(&["a", "b"]), find), None);
        let why = lock_set_unservable_among("ns", &set(&["a", "x", "pool"]), find).unwrap();
        assert_eq!(why, "DistributedLock x does not exist in namespace ns", "the first lock that is not served");
        let why = lock_set_unservable_among("ns", &set(&["pool"]), find).unwrap();
        assert!(why.contains("DistributedLock pool is a semaphore"), "{why}");
        let long = "l".repeat(MAX_MULTI_LOCK_NAME + 1);
        let why = lock_set_unservable_among("ns", std::slice::from_ref(&long), |_| existing.first()).unwrap();
        assert!(why.starts_with(&format!("lock name {long} is longer than {MAX_MULTI_LOCK_NAME} characters")), "{why}");
        assert_eq!(
            lock_set_not_served_note(&set(&["a", "x"]), "DistributedLock x does not exist in namespace ns"),
            "lock set a,x: DistributedLock x does not exist in namespace ns; no lock of the set is reserved for the \
             pod until every one can be (it waits)"
        );
    }

    #[test]
    fn the_status_digest_ignores_slot_reservations() {
        let a = DistributedLockStatus { highest_token: 3, ..Default::default() };
        let b = DistributedLockStatus { slot_tokens: vec![1, 2], ..a.clone() };
        assert_eq!(status_digest(&a), status_digest(&b));
    }

    fn standing_claim(request: i64, status: serde_json::Value) -> DistributedLockClaim {
        serde_json::from_value(json!({
            "apiVersion": "leasehold.dev/v1alpha1", "kind": "DistributedLockClaim",
            "metadata": {"name": "l-abc", "namespace": "ns", "uid": "c1", "resourceVersion": "9",
                         "creationTimestamp": "2026-12-05T10:00:00Z"},
            "spec": {"lock": "l", "identity": "me", "request": request, "requestTime": "2026-12-05T10:05:00.250000Z"},
            "status": status,
        }))
        .unwrap()
    }

    /// A standing claim is the candidate of its current request: request UID, queued from
    /// `spec.requestTime`, and only its own request's status counts (an older request's grant or
    /// rejection leaves it waiting).
    #[test]
    fn a_standing_claim_is_the_candidate_of_its_current_request_only() {
        let c = candidate_of_claim(&standing_claim(2, json!(null)), "l", None).unwrap();
        assert_eq!(c.uid, "c1/2");
        assert_eq!(c.created, "2026-12-05T10:05:00.25Z".parse::<Timestamp>().unwrap());
        assert_eq!((c.phase, c.gated, c.token), (Phase::Pending, true, None));
        // Request 1's grant and rejection are not request 2's.
        for old in [json!({"phase": "Granted", "token": 4, "request": 1}), json!({"phase": "Rejected", "request": 1})] {
            let c = candidate_of_claim(&standing_claim(2, old.clone()), "l", None).unwrap();
            assert_eq!((c.phase, c.gated, c.token), (Phase::Pending, true, None), "{old}");
        }
        let c =
            candidate_of_claim(&standing_claim(2, json!({"phase": "Granted", "token": 5, "request": 2})), "l", None)
                .unwrap();
        assert_eq!((c.phase, c.gated, c.token), (Phase::Running, false, Some(5)));
        let c = candidate_of_claim(&standing_claim(2, json!({"phase": "Rejected", "request": 2})), "l", None).unwrap();
        assert_eq!(c.phase, Phase::Failed);
    }

    /// A status write for a standing claim's request is made on the claim object (its UID as
    /// precondition) and records the request; a one-shot claim's is as before.
    #[test]
    fn a_standing_requests_status_patch_targets_the_claim_object_and_records_the_request() {
        let (meta, request) = claim_target("c1/3", "9");
        assert_eq!((meta, request), (json!({"uid": "c1", "resourceVersion": "9"}), Some(3)));
        assert_eq!(for_request(json!({"phase": "Granted"}), request), json!({"phase": "Granted", "request": 3}));
        let (meta, request) = claim_target("c1", "9");
        assert_eq!((meta, request), (json!({"uid": "c1", "resourceVersion": "9"}), None));
        assert_eq!(for_request(json!({"phase": "Granted"}), request), json!({"phase": "Granted"}));
    }

    /// The rejection of a standing claim's request removes an earlier request's grant fields:
    /// applied as a merge patch to a status that recorded request 1's token, request 2 reads as
    /// rejected, not granted with request 1's token (reviewed 2026-12-05: `try_acquire` then
    /// waited for ever). A one-shot claim's rejection names no such field.
    #[test]
    fn a_standing_requests_rejection_removes_the_earlier_requests_grant() {
        let old = json!({"phase": "Granted", "token": 5, "slot": 0, "leaseName": "l", "leaseResourceVersion": "7", "request": 1});
        // A JSON merge patch (RFC 7386) of the flat status object: null removes.
        let mut status = old.as_object().unwrap().clone();
        for (k, v) in rejection_status("LockBusy", "busy", Some(2)).as_object().unwrap() {
            match v {
                serde_json::Value::Null => status.remove(k),
                v => status.insert(k.clone(), v.clone()),
            };
        }
        let mut claim = standing_claim(2, json!(null));
        claim.status = serde_json::from_value(serde_json::Value::Object(status)).unwrap();
        let c = candidate_of_claim(&claim, "l", None).unwrap();
        assert_eq!((c.phase, c.token, c.gated), (Phase::Failed, None, true));
        let one_shot = rejection_status("LockBusy", "busy", None);
        assert!(one_shot.get("token").is_none() && one_shot.get("request").is_none(), "{one_shot}");
    }

    /// Every operator Lease update keeps the released list, without the entries of claims seen
    /// at a later request.
    #[test]
    fn an_operator_lease_write_keeps_the_released_requests_that_still_matter() {
        let mut observed = Lease::default();
        lease::put_released(&mut observed, &["c1/1".into(), "c2/4".into()]);
        let c2 = candidate_of_claim(&standing_claim(5, json!(null)), "l", None).map(|mut c| {
            c.uid = "c2/5".into();
            c
        });
        let c1 = candidate_of_claim(&standing_claim(1, json!(null)), "l", None).unwrap();
        let written = with_released(&observed, &[c1, c2.unwrap()]);
        assert_eq!(lease::released(&written), vec!["c1/1".to_string()]);
    }

    /// The lock's Lease with holder `holder` (a request UID), the next-holder hint `next` and
    /// the released list `released`.
    fn lease_naming(holder: Option<&str>, next: Option<&str>, released: &[&str]) -> LeaseView {
        LeaseView {
            holder: holder.map(|u| grant::Holder { name: "me".into(), uid: Some(u.into()), kind: HolderKind::Claim }),
            token: 7,
            trusted: true,
            next: next.map(|u| grant::Next { identity: "me".into(), uid: u.into(), token: 8 }),
            released: released.iter().map(|r| r.to_string()).collect(),
            ceiling: Some(100),
            ..LeaseView::default()
        }
    }

    /// A standing claim that arrived by the Lease (a hint it wrote itself, request 3 while its
    /// claim object says 2) is the candidate of request 3: waiting, no token (request 2's grant
    /// is not request 3's), queued after every request known from a claim object.
    #[test]
    fn a_request_known_only_from_the_lease_is_a_waiter_queued_last() {
        let claim = standing_claim(2, json!({"phase": "Granted", "token": 5, "request": 2}));
        let hinted = lease_naming(Some("other/1"), Some("c1/3"), &["c1/2"]);
        let c = candidate_of_claim(&claim, "l", Some(&hinted)).unwrap();
        assert_eq!(c.uid, "c1/3");
        assert_eq!((c.phase, c.gated, c.token, c.created), (Phase::Pending, true, None, grant::LEASE_ARRIVAL_QUEUED));
        assert!(c.is_waiter());
        // Taken by the Lease (it is the holder there): the same, and the operator records it.
        let taken = lease_naming(Some("c1/3"), None, &["c1/2"]);
        assert_eq!(candidate_of_claim(&claim, "l", Some(&taken)).unwrap().uid, "c1/3");
        // Under another identity (a forged arrival naming this claim's UID): not this claim's.
        let mut forged = taken.clone();
        forged.holder.as_mut().unwrap().name = "mallory".into();
        assert_eq!(candidate_of_claim(&claim, "l", Some(&forged)).unwrap().uid, "c1/2");
        // A Lease that names only older requests, or none, or another claim's: the object's own.
        for l in [lease_naming(Some("c1/1"), None, &["c1/2"]), lease_naming(None, Some("c9/7"), &[])] {
            let c = candidate_of_claim(&claim, "l", Some(&l)).unwrap();
            assert_eq!((c.uid.as_str(), c.token), ("c1/2", Some(5)));
        }
        // Once recorded (status.request 3 above spec.request 2), the status counts and the
        // request queues from spec.requestTime again.
        let recorded = standing_claim(2, json!({"phase": "Granted", "token": 8, "request": 3}));
        for lease in [None, Some(&taken)] {
            let c = candidate_of_claim(&recorded, "l", lease).unwrap();
            assert_eq!((c.uid.as_str(), c.phase, c.token), ("c1/3", Phase::Running, Some(8)));
            assert_eq!(c.created, "2026-12-05T10:05:00.25Z".parse::<Timestamp>().unwrap());
        }
        // A request the Lease lists as released, above the object's: over (machine::step and
        // `unreleased` leave it out).
        let released = lease_naming(None, None, &["c1/3"]);
        let c = candidate_of_claim(&claim, "l", Some(&released)).unwrap();
        assert_eq!(c.uid, "c1/3");
        let mut l = Lease::default();
        lease::put_released(&mut l, &["c1/3".into()]);
        assert!(unreleased(&[c], &[Some(l)]).is_empty());
    }

    /// The released list an operator write keeps is decided on the claim objects' own requests,
    /// not on a request only the Lease names: when the operator replaces a hint that waiter c1
    /// wrote itself (request 3) by an older waiter's, c1's entry for request 2 stays; otherwise
    /// request 2, released, would look like a waiter again and be granted a second time.
    #[test]
    fn the_released_list_is_kept_for_the_claim_objects_requests_not_the_leases() {
        let claim = standing_claim(2, json!(null));
        let mut observed = Lease::default();
        lease::put_released(&mut observed, &["c1/2".into()]);
        lease::put_next(&mut observed, Some(&grant::Next { identity: "me".into(), uid: "c1/3".into(), token: 8 }));
        let base = candidate_of_claim(&claim, "l", None).unwrap();
        assert_eq!(base.uid, "c1/2");
        assert_eq!(lease::released(&with_released(&observed, std::slice::from_ref(&base))), vec!["c1/2".to_string()]);
        // What the bumped candidate would do (and why it is not given): drop the entry.
        let bumped = at_lease_request(base.clone(), Some(&lease::view(&observed)));
        assert_eq!(bumped.uid, "c1/3");
        assert!(lease::released(&with_released(&observed, &[bumped])).is_empty());
        // The reconcile's bookkeeping: a write's answer replaces the same object's candidate
        // whatever request it is at, and the snapshot is recomputed at the Lease's requests.
        let mut snapshot_base = vec![base];
        let recorded =
            candidate_of_claim(&standing_claim(2, json!({"phase": "Granted", "token": 8, "request": 3})), "l", None);
        absorb_base(&mut snapshot_base, recorded.unwrap());
        assert_eq!(snapshot_base.len(), 1);
        assert_eq!((snapshot_base[0].uid.as_str(), snapshot_base[0].token), ("c1/3", Some(8)));
    }

    #[test]
    fn backoff_doubles_with_jitter_up_to_five_minutes() {
        for (failures, base) in [(1, 1), (2, 2), (3, 4), (10, 300), (100, 300)] {
            let d = backoff(failures);
            let base = Duration::from_secs(base);
            assert!(d >= base && d <= base.mul_f64(1.5), "failure {failures}: {d:?}");
        }
    }
}
