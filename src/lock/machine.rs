//! The per-lock state machine: the whole grant protocol as one pure function, [`step`].
//!
//! The controller (`controller::distributed_lock`) and the model checker (`tests/model.rs`) run
//! the same code: observe -> [`step`] -> apply the one write of the returned plan -> fold the
//! object the API server answered into the [`Snapshot`] ([`Snapshot::absorb_candidate`]) ->
//! step again. Nothing here reads a clock, a cache or the network; everything that the protocol
//! remembers between two steps is in [`Clocks`], which the caller keeps per lock (by lock UID)
//! and hands back at the next step.
//!
//! Time is an explicit [`Duration`] on the caller's monotonic clock (any origin: the operator
//! uses the time since its process started). Timeouts run from when *this* process first
//! observed a state (a holder granted, a renewal, a node not Ready, a waiter queued), as
//! client-go's leader election does: after a restart the clocks start over, so a timeout can
//! only fire later than it would have, never earlier.
//!
//! Ordering is deterministic: candidates are sorted by (creationTimestamp, name, UID) before
//! anything is decided, so two operator processes that observe the same objects make the same
//! decision whatever order their caches list them in.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::fencing::{self, TokenExhausted};
use super::grant::{self, Candidate, Decision, Grant, HolderKind, LeaseView, Next, Observation, Phase, Plan, Settings};
use super::policy::BusyPolicy;

/// One semaphore slot's Lease, as observed.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct SlotLease {
    /// The slot's Lease, `None` if it does not exist.
    pub lease: Option<LeaseView>,
    /// Its `spec.renewTime` as written (see [`Snapshot::renew_marker`]).
    pub renew_marker: Option<String>,
}

/// What one step needs to know about one lock: one consistent view of its objects.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// The lock's timeouts.
    pub settings: Settings,
    /// The lock's Lease (slot 0 of a semaphore), `None` if it does not exist.
    pub lease: Option<LeaseView>,
    /// The Lease's `spec.renewTime` as written (any text that changes with every renewal; the
    /// model uses a counter). A change restarts a claim holder's expiry clock.
    pub renew_marker: Option<String>,
    /// The Leases of slots 1, 2, ... of a semaphore (`extra_slots[k - 1]` is slot k), as far as
    /// they exist; empty for a single-holder lock.
    pub extra_slots: Vec<SlotLease>,
    /// `spec.maxHolders`: `None` for a single-holder lock (one Lease, tokens taken from a
    /// reserved block), `Some(n)` for a semaphore (up to n holders, one Lease per slot, each
    /// grant's token reserved by its own compare-and-swap on the ceiling). 0 counts as 1.
    pub max_holders: Option<u32>,
    /// Pods and claims that ask for (or hold) the lock, in any order.
    pub candidates: Vec<Candidate>,
    /// The lock's `status.tokenCeiling`.
    pub ceiling: i64,
    /// A semaphore's `status.slotTokens`: `slot_tokens[k]` is the last token reserved for a
    /// grant in slot k (missing or 0: none). Written by the same compare-and-swap that raises
    /// the ceiling ([`Step::reserved_slot`]), so every operator that reserves next has seen it.
    /// Slot k counts as held while its Lease (token or floor) is below it: a grant reserved
    /// there may still land, even if no cache shows it yet. Empty for a single-holder lock.
    pub slot_tokens: Vec<i64>,
    /// The lock's `status.highestToken`.
    pub highest_token: i64,
    /// `Some(c)` right after this reconcile raised the ceiling from `c` (see
    /// [`grant::Observation::fresh_reservation`]); `None` at the start of every reconcile.
    pub fresh_reservation: Option<i64>,
}

impl Snapshot {
    /// Replaces (or adds) the candidate with `c`'s UID by `c`: the object a write returned is
    /// newer than the cache the snapshot was built from.
    pub fn absorb_candidate(&mut self, c: Candidate) {
        match self.candidates.iter_mut().find(|x| x.uid == c.uid) {
            Some(x) => {
                // No object records that a pod's set is not served (the caller derives it from
                // its lock cache): the pod's new version keeps it, or the withdrawn pod would be
                // queued, and granted, again in the same reconcile.
                let unservable = x.multi.as_ref().is_some_and(|m| m.unservable);
                *x = c;
                if let Some(m) = x.multi.as_mut() {
                    m.unservable |= unservable;
                }
            }
            None => self.candidates.push(c),
        }
    }

    /// Slot `k`'s Lease and renew marker.
    fn slot(&self, k: u32) -> (Option<&LeaseView>, Option<&String>) {
        match k {
            0 => (self.lease.as_ref(), self.renew_marker.as_ref()),
            k => self
                .extra_slots
                .get(k as usize - 1)
                .map_or((None, None), |s| (s.lease.as_ref(), s.renew_marker.as_ref())),
        }
    }
}

/// The clock state one operator process remembers for one lock between steps. Starts empty
/// ([`Clocks::default`]) for a new lock and after a restart. Times are on the caller's monotonic
/// clock, in the same units as the `now` given to [`step`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Clocks {
    /// Per slot (0 for a single-holder lock): its holder's clocks.
    slots: BTreeMap<u32, SlotClocks>,
    /// Waiter UID -> when first seen waiting (for `max-wait`).
    waiting_since: BTreeMap<String, Duration>,
}

impl Clocks {
    /// Whether these clocks time nothing: no holder, no lost node, no waiter. A caller may forget
    /// such clocks and pass [`Clocks::default`] next time: the next [`step`] decides the same.
    pub fn is_empty(&self) -> bool {
        self.waiting_since.is_empty() && self.slots.values().all(|s| *s == SlotClocks::default())
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct SlotClocks {
    /// The holder being timed, if the slot's Lease names one that is among the candidates.
    holder: Option<HolderClock>,
    /// Node name -> when the holder's node was first seen not Ready (or missing).
    node_lost_since: BTreeMap<String, Duration>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct HolderClock {
    uid: String,
    renew_marker: Option<String>,
    /// When this process first saw this holder named by the Lease.
    since: Duration,
    /// When this process last saw the renew marker change (or first saw the holder).
    renewed_at: Duration,
}

/// The result of one step: the plan (the one write to do next, with its precondition in the
/// decision, and what status shows) and the clock state to remember.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The decision and the status view. `plan.holder` is the lowest slot's holder; every
    /// holder is in [`Step::holders`].
    pub plan: Plan,
    /// The slot whose Lease the decision's Lease write (create, update, repair) goes to; 0 for a
    /// single-holder lock and for decisions that write no Lease.
    pub slot: u32,
    /// Every holder, by slot (at most one per slot).
    pub holders: Vec<Grant>,
    /// `Some(k)` when the decision is a semaphore's [`Decision::Reserve`] for a grant in slot
    /// k: the caller's compare-and-swap that raises `status.tokenCeiling` to `to` also sets
    /// `status.slotTokens[k]` to `to` (see [`Snapshot::slot_tokens`]). `None` otherwise.
    pub reserved_slot: Option<u32>,
    /// The next-holder hint ([`Next`]) that this step's Lease write records
    /// (`leasehold.dev/next-holder`, ...); `None`: the write removes any hint. Only a
    /// single-holder lock's grant to a claim, or [`Decision::SetNext`] while a claim holds, has
    /// one ([`next_holder`]).
    pub next: Option<Next>,
    /// Clock state to pass to the next step for this lock.
    pub clocks: Clocks,
}

/// What the clocks say about one slot's holder.
#[derive(Clone, Copy, Default)]
struct Timers {
    pending_for: Option<Duration>,
    node_lost_for: Option<Duration>,
    renewed_ago: Option<Duration>,
    named_for: Option<Duration>,
}

/// Decides the next write for one lock.
///
/// `now` is the caller's monotonic time (never goes backwards within one process); `clocks`
/// is what the previous step for this lock returned (or the default).
///
/// A single-holder lock (`max_holders` `None`) is decided by [`grant::decide`] on its one Lease.
/// A semaphore (issue 14) is decided slot by slot, each slot by [`grant::decide`] on its own
/// Lease and a view of the candidates that holds that slot's holders (their `slot`) and the
/// waiters (a waiter some slot's Lease already names, its grant not finished yet, only in the
/// lowest such slot's view); the first slot that has a write to do gets the step. On top of
/// what each slot decides:
/// - a slot grants only while its number is below `max_holders` and fewer than `max_holders`
///   other slots hold. A slot holds while its Lease's decision says so, while a candidate granted
///   in it runs (whatever its Lease shows), and while its reservation is unsettled (below).
///   Lowering `maxHolders` revokes nobody: slots above it grant nothing more;
/// - every grant's token is reserved by itself: the step first raises the ceiling to exactly
///   that token by compare-and-swap ([`Decision::Reserve`], with [`Step::reserved_slot`]: the
///   same write records it as the slot's reserved token, [`Snapshot::slot_tokens`]), then grants
///   that token in that slot, above every token in view. Two slots (or two operator processes)
///   therefore never issue the same token, each token is above every token whose grant finished
///   before it was reserved, and a later reservation has seen every earlier one's slot;
/// - a slot whose Lease (token or floor) is below its reserved token has a grant in flight (or a
///   cache that has not seen it land): it counts as held, and its Lease is written free with the
///   floor raised to that token (created if missing) before it grants, so the in-flight write's
///   compare-and-swap fails;
/// - a running token above the ceiling (an earlier lock object's holder) is reserved above first;
///   a holder in a slot above 0 keeps the lock on the semaphore path if `max_holders` is removed;
/// - a waiter with `on-busy: skip` finds the lock busy only when every slot it may grant holds,
///   and skip and max-wait waiters are answered at lock level when no slot may serve them.
///
/// Model-checked (README, "What the model checker proves"). The controller
/// (`controller::distributed_lock`) serves it: `max_holders` from `spec.maxHolders`, slot k's
/// Lease named `<lock>-slot-<k>` (`lease::slot_lease_name`), `slot_tokens` from
/// `status.slotTokens`, written by the reservation's own compare-and-swap.
///
/// # Errors
/// [`TokenExhausted`] when the next token would not fit in an `int64`.
pub fn step(snapshot: &Snapshot, now: Duration, clocks: &Clocks) -> Result<Step, TokenExhausted> {
    let mut clocks = clocks.clone();
    let mut candidates = snapshot.candidates.clone();
    // A request its holder released (`leasehold.dev/released`, written by the release itself)
    // is over: as if its one-shot claim were deleted. A Lease that still named it would keep
    // it timed as an orphan claim holder (`time_holder`), but no release writes that.
    let released: BTreeSet<&str> = std::iter::once(&snapshot.lease)
        .chain(snapshot.extra_slots.iter().map(|s| &s.lease))
        .flatten()
        .flat_map(|l| l.released.iter().map(String::as_str))
        .collect();
    candidates.retain(|c| !released.contains(c.uid.as_str()));
    candidates.sort_by(|a, b| (a.created, &a.name, &a.uid).cmp(&(b.created, &b.name, &b.uid)));

    for c in &mut candidates {
        if c.is_waiter() {
            let since = *clocks.waiting_since.entry(c.uid.clone()).or_insert(now);
            c.waiting_for = Some(now.saturating_sub(since));
        }
    }
    let waiting: BTreeSet<&str> = candidates.iter().filter(|c| c.is_waiter()).map(|c| c.uid.as_str()).collect();
    clocks.waiting_since.retain(|uid, _| waiting.contains(uid.as_str()));

    // A holder recorded in a slot above 0 (a semaphore whose maxHolders was removed; the CRD
    // forbids that, a hand edit does not) keeps the lock on the semaphore path, with one slot.
    let slot_holders = candidates.iter().any(|c| !c.gated && !c.is_terminal() && c.slot > 0)
        || snapshot.extra_slots.iter().any(|s| s.lease.as_ref().is_some_and(|l| l.holder.is_some()));
    let Some(max_holders) = snapshot.max_holders.or(slot_holders.then_some(1)) else {
        clocks.slots.retain(|k, _| *k == 0);
        let (lease, marker) = snapshot.slot(0);
        let timers = time_holder(lease, marker, &candidates, now, clocks.slots.entry(0).or_default());
        let plan = decide_slot(snapshot, lease, &candidates, timers, true)?;
        let holders = plan.holder.iter().cloned().collect();
        let (plan, next) = with_next(snapshot, &candidates, plan);
        return Ok(Step { plan, slot: 0, holders, clocks, reserved_slot: None, next });
    };
    let limit = max_holders.max(1);
    let top_slot = candidates.iter().filter(|c| !c.gated && !c.is_terminal()).map(|c| c.slot).max().unwrap_or(0);
    let top_reserved = snapshot.slot_tokens.iter().rposition(|t| *t > 0).map_or(0, |k| k as u32);
    let slots = limit.max(1 + snapshot.extra_slots.len() as u32).max(top_slot + 1).max(top_reserved + 1);
    clocks.slots.retain(|k, _| *k < slots);
    // A holder that runs with a token above the ceiling (granted by an earlier lock object with
    // the same name) may be in any slot: reserve above it before any slot decides, so no slot
    // hands out its token again.
    let running_max = candidates.iter().filter(|c| !c.gated && !c.is_terminal()).filter_map(|c| c.token).max();
    if let Some(t) = running_max.filter(|t| *t > snapshot.ceiling) {
        let decision = Decision::Reserve { from: snapshot.ceiling, to: fencing::reserve(snapshot.ceiling, t)? };
        let waiters = grant::queue_of(&candidates).into_iter().map(|w| w.name.clone()).collect();
        return Ok(Step {
            plan: Plan { decision, holder: None, waiters },
            slot: 0,
            holders: vec![],
            clocks,
            reserved_slot: None,
            next: None,
        });
    }

    // Which slot a waiter belongs to while its grant is half done: the lowest whose Lease names it.
    let named_in = |c: &Candidate| {
        (0..slots).find(|k| {
            snapshot
                .slot(*k)
                .0
                .and_then(|l| l.holder.as_ref())
                .is_some_and(|h| h.name == c.identity && h.uid.as_ref() == Some(&c.uid))
        })
    };
    let in_slot = |c: &Candidate, k: u32| if c.gated { named_in(c).is_none_or(|j| j == k) } else { c.slot == k };
    let views: Vec<Vec<Candidate>> =
        (0..slots).map(|k| candidates.iter().filter(|c| in_slot(c, k)).cloned().collect()).collect();
    let timers: Vec<Timers> = (0..slots)
        .map(|k| {
            let (lease, marker) = snapshot.slot(k);
            let t = time_holder(lease, marker, &views[k as usize], now, clocks.slots.entry(k).or_default());
            // A semaphore's claim learns its slot from its status: recorded at once.
            Timers { named_for: None, ..t }
        })
        .collect();
    // The token last reserved for slot k, and whether slot k's Lease has caught up with it
    // (its token or floor at or above it). An unsettled slot has a grant in flight (or a cache
    // that has not seen it land); this step's own fresh reservation is the one it may grant.
    let reserved = |k: u32| snapshot.slot_tokens.get(k as usize).copied().unwrap_or(0);
    let settled = |k: u32| snapshot.slot(k).0.map_or(0, |l| l.token.max(l.floor)) >= reserved(k);
    let mine = |k: u32| snapshot.fresh_reservation.is_some() && reserved(k) == snapshot.ceiling && !settled(k);
    // First pass: who holds which slot. A slot holds while its Lease's decision says so, while a
    // candidate granted in it still runs, whatever the Lease shows (missing, free in a stale
    // cache, being repaired), and while a grant reserved for it may still land.
    let mut held = vec![false; slots as usize];
    for k in 0..slots {
        let plan = decide_slot(snapshot, snapshot.slot(k).0, &views[k as usize], timers[k as usize], true)?;
        let runs = views[k as usize].iter().any(|c| !c.gated && !c.is_terminal() && c.token.is_some());
        held[k as usize] = plan.holder.is_some() || runs || !settled(k);
    }
    let holding = held.iter().filter(|h| **h).count() as u32;
    // Second pass: each slot decides with what it may do.
    let mut plans = Vec::with_capacity(slots as usize);
    for k in 0..slots {
        let others = holding - u32::from(held[k as usize]);
        // Another reservation in flight for this slot: no grant until it is fenced off below.
        let in_flight = !settled(k) && !mine(k);
        let may_grant = k < limit && others < limit && !in_flight;
        // A slot that may not grant does not see the waiters: it neither reserves nor creates a
        // Lease for them.
        let view: Vec<Candidate> = if may_grant {
            views[k as usize].clone()
        } else {
            views[k as usize].iter().filter(|c| !c.is_waiter()).cloned().collect()
        };
        let mut plan = decide_slot(snapshot, snapshot.slot(k).0, &view, timers[k as usize], holding >= limit)?;
        if let Some(h) = &mut plan.holder {
            h.slot = k;
        }
        let mut reserves_for = None;
        // Above every token in view (any slot's Lease and floor, any candidate, the highest
        // issued): the slot's own decision saw only its slot.
        let seen = candidates
            .iter()
            .filter_map(|c| c.token)
            .chain((0..slots).filter_map(|j| snapshot.slot(j).0.map(|l| l.token.max(l.floor))))
            .chain([snapshot.highest_token])
            .max()
            .unwrap_or(0);
        // A grant to a waiter takes only the token this step itself reserved for this slot, by
        // one compare-and-swap that also recorded the slot (every other reservation then sees
        // this grant coming); otherwise it reserves that token first, for this slot.
        let wanted = |token: i64| token.max(seen.saturating_add(1));
        let own = |token: i64| (mine(k) && reserved(k) >= wanted(token)).then(|| reserved(k));
        let per_slot = |token: i64| -> Result<Decision, TokenExhausted> {
            Ok(Decision::Reserve { from: snapshot.ceiling, to: fencing::reserve_one(snapshot.ceiling, wanted(token))? })
        };
        let is_waiter = |g: &Grant| view.iter().any(|c| c.uid == g.uid && c.is_waiter());
        let decision = match plan.decision {
            Decision::UpdateLease { holder: Some(mut g), released, floor } => match own(g.token) {
                Some(token) => {
                    (g.token, g.slot) = (token, k);
                    Decision::UpdateLease { holder: Some(g), released, floor }
                }
                None => {
                    reserves_for = Some(k);
                    per_slot(g.token)?
                }
            },
            // The slot's first grant creates its Lease: the same exact token.
            Decision::CreateLease { holder: Some(mut g), floor } if !in_flight && is_waiter(&g) => match own(g.token) {
                Some(token) => {
                    (g.token, g.slot) = (token, k);
                    Decision::CreateLease { holder: Some(g), floor }
                }
                None => {
                    reserves_for = Some(k);
                    per_slot(g.token)?
                }
            },
            // The slot's decision wants a fresh reservation before it grants (a block, in the
            // single-holder way): a semaphore reserves exactly the token it will grant instead.
            Decision::Reserve { .. } if may_grant && view.iter().any(Candidate::is_waiter) => {
                reserves_for = own(0).is_none().then_some(k);
                per_slot(0)?
            }
            // A grant reserved for this slot by another step may still land: fence it off with
            // a Lease write (its compare-and-swap fails once this lands) that raises the floor to
            // its token, releasing what the slot's decision releases.
            Decision::UpdateLease { holder: None, released, floor } if in_flight => {
                Decision::UpdateLease { holder: None, released, floor: Some(floor.unwrap_or(0).max(reserved(k))) }
            }
            Decision::Idle { .. } if in_flight && snapshot.slot(k).0.is_some_and(|l| l.holder.is_none()) => {
                Decision::UpdateLease { holder: None, released: None, floor: Some(reserved(k)) }
            }
            // Its Lease is gone (deleted by someone, or not created yet): create it free, floored
            // at the reserved token (an in-flight create then finds it exists).
            Decision::Idle { .. } if in_flight && snapshot.slot(k).0.is_none() => {
                Decision::CreateLease { holder: None, floor: reserved(k) }
            }
            Decision::CreateLease { holder, floor } if in_flight => {
                Decision::CreateLease { holder: holder.map(|g| Grant { slot: k, ..g }), floor: floor.max(reserved(k)) }
            }
            Decision::CreateLease { holder, floor } => {
                Decision::CreateLease { holder: holder.map(|g| Grant { slot: k, ..g }), floor }
            }
            Decision::RepairLease { holder, floor } => {
                Decision::RepairLease { holder: Grant { slot: k, ..holder }, floor }
            }
            Decision::PatchHolder(g) => Decision::PatchHolder(Grant { slot: k, ..g }),
            Decision::RecordTentative(g) => Decision::RecordTentative(Grant { slot: k, ..g }),
            Decision::Withdraw(g) => Decision::Withdraw(Grant { slot: k, ..g }),
            other => other,
        };
        plan.decision = decision;
        plans.push((plan, reserves_for));
    }
    let holders: Vec<Grant> = plans.iter().filter_map(|(p, _)| p.holder.clone()).collect();
    let waiters: Vec<String> = grant::queue_of(&candidates)
        .into_iter()
        .filter(|w| holders.iter().all(|h| h.uid != w.uid))
        .map(|w| w.name.clone())
        .collect();
    let first_holder = holders.first().cloned();
    let act = plans.iter().position(|(p, _)| !matches!(p.decision, Decision::Idle { .. }));
    let (slot, decision, reserved_slot) = match act {
        Some(k) => {
            let (plan, reserves_for) = plans.swap_remove(k);
            (k as u32, plan.decision, reserves_for)
        }
        None => {
            // Waiters no slot may serve now (the lock is over a lowered limit) still give up on
            // time: skip while the lock is full, max-wait when it runs out.
            let queue: Vec<&Candidate> = grant::queue_of(&candidates)
                .into_iter()
                .filter(|w| holders.iter().all(|h| h.uid != w.uid) && named_in(w).is_none())
                .collect();
            let nobody = Grant {
                kind: HolderKind::Pod,
                name: String::new(),
                identity: String::new(),
                uid: String::new(),
                resource_version: String::new(),
                token: 0,
                slot: 0,
            };
            let rejects = grant::rejections(&queue, &nobody, holding >= limit);
            if rejects.is_empty() {
                let requeue_after = plans
                    .iter()
                    .filter_map(|(p, _)| match p.decision {
                        Decision::Idle { requeue_after } => requeue_after,
                        _ => None,
                    })
                    .fold(grant::next_wait_expiry(&queue), |a, b| grant::min_some(a, Some(b)));
                (0, Decision::Idle { requeue_after }, None)
            } else {
                (0, Decision::RejectWaiters(rejects), None)
            }
        }
    };
    Ok(Step {
        plan: Plan { decision, holder: first_holder, waiters },
        slot,
        holders,
        clocks,
        reserved_slot,
        next: None,
    })
}

/// A single-holder lock's next-holder hint ([`Next`]): with a grant to a claim, the hint its
/// Lease write carries; while a claim holds and the Lease's hint is not the wanted one, a
/// [`Decision::SetNext`] in place of the idle decision. Semaphores have none (their tokens are
/// reserved one grant at a time, [`step`]).
fn with_next(snapshot: &Snapshot, candidates: &[Candidate], mut plan: Plan) -> (Plan, Option<Next>) {
    let lease = snapshot.lease.as_ref();
    match (&plan.decision, &plan.holder, lease) {
        (Decision::UpdateLease { holder: Some(g), floor: None, .. }, _, Some(_)) => {
            let next = next_holder(snapshot, candidates, g, g.token);
            (plan, next)
        }
        (Decision::Idle { .. }, Some(h), Some(l))
            if l.trusted && l.holder.as_ref().is_some_and(|x| x.name == h.identity) =>
        {
            let next = next_holder(snapshot, candidates, h, l.token);
            // An operator's hint carries the lock's lease duration for the handover to write: one
            // written before the lock's changed is written again (a waiter's own hint carries none,
            // and is left alone).
            let stale = l.next_lease_duration.is_some_and(|d| d != snapshot.settings.lease_duration);
            if l.next == next && !(next.is_some() && stale) {
                return (plan, None);
            }
            plan.decision = Decision::SetNext;
            (plan, next)
        }
        _ => (plan, None),
    }
}

/// Whom claim holder `holder` (holding with `token`) hands the lock to when it releases: the
/// head of the queue when that is a claim that waits without a busy policy (`on-busy: wait`, no
/// `max-wait`: a waiter that may be rejected is left to the operator), with the token the
/// operator would grant it now (above every token in view, within the reserved ceiling). `None`
/// when the holder is a pod (it releases by ending: the operator grants) or a claim with a lock
/// set, the head is a pod or a multi-lock waiter, or the token needs a reservation first.
pub fn next_holder(snapshot: &Snapshot, candidates: &[Candidate], holder: &Grant, token: i64) -> Option<Next> {
    // A claim holding a lock set (issue 14) releases its Leases one by one and hands over none:
    // the handover is model-checked for single-lock claims only (`tests/model.rs`, "handover").
    let set_holder = candidates.iter().any(|c| c.uid == holder.uid && c.multi.is_some());
    // The recovery holder of a recreated Lease (`grant::RECOVERY_HOLDER`, no UID) never releases.
    if holder.kind != HolderKind::Claim || set_holder || holder.uid.is_empty() {
        return None;
    }
    let head = grant::queue_of(candidates).into_iter().find(|w| w.uid != holder.uid)?;
    let plain = head.on_busy == BusyPolicy::Wait && head.max_wait.is_none() && head.multi.is_none();
    if head.kind != HolderKind::Claim || !plain {
        return None;
    }
    let seen = candidates.iter().filter_map(|c| c.token).max().unwrap_or(0);
    let floor = snapshot.lease.as_ref().map_or(0, |l| l.floor);
    let next = fencing::next_token(token.max(snapshot.highest_token).max(seen), floor).ok()?;
    if fencing::needs_reservation(next, snapshot.ceiling) {
        return None;
    }
    Some(Next { identity: head.identity.clone(), uid: head.uid.clone(), token: next })
}

/// Runs the slot's holder clocks forward: what they say about the holder the slot's Lease
/// names (found among `candidates`, or an orphan claim holder whose claim object is gone).
fn time_holder(
    lease: Option<&LeaseView>,
    marker: Option<&String>,
    candidates: &[Candidate],
    now: Duration,
    clocks: &mut SlotClocks,
) -> Timers {
    let lease_holder = lease.and_then(|l| l.holder.as_ref());
    let found =
        lease_holder.and_then(|h| candidates.iter().find(|c| c.identity == h.name && Some(&c.uid) == h.uid.as_ref()));
    // A claim holder whose claim object is gone is still timed: it holds until its lease expires.
    let orphan = lease_holder.filter(|h| found.is_none() && h.kind == HolderKind::Claim);
    let holder =
        found.map(|c| (c.uid.as_str(), c.kind, c.phase, c.node_name.as_ref(), c.node_lost, c.gated)).or_else(|| {
            orphan
                .map(|h| (h.uid.as_deref().unwrap_or_default(), HolderKind::Claim, Phase::Running, None, false, false))
        });
    let mut t = Timers::default();
    let Some((uid, kind, phase, node_name, node_lost, gated)) = holder else {
        clocks.holder = None;
        clocks.node_lost_since.clear();
        return t;
    };
    let marker = marker.cloned();
    let mut clock = match clocks.holder.take() {
        Some(mut c) if c.uid == uid => {
            if c.renew_marker != marker {
                c.renew_marker = marker;
                c.renewed_at = now;
            }
            c
        }
        _ => HolderClock { uid: uid.to_string(), renew_marker: marker, since: now, renewed_at: now },
    };
    match kind {
        // The start timeout runs from when the pod was first seen ungated: a multi-lock pod may
        // stay gated, tentatively named, for as long as its other locks are busy.
        HolderKind::Pod if gated => {
            clock.since = now;
            clocks.node_lost_since.clear();
        }
        HolderKind::Pod => {
            t.pending_for = (phase == Phase::Pending).then(|| now.saturating_sub(clock.since));
            match (node_name, node_lost) {
                (Some(node), true) => {
                    let since = *clocks.node_lost_since.entry(node.clone()).or_insert(now);
                    clocks.node_lost_since.retain(|n, _| n == node);
                    t.node_lost_for = Some(now.saturating_sub(since));
                }
                _ => clocks.node_lost_since.clear(),
            }
        }
        HolderKind::Claim => {
            t.renewed_ago = Some(now.saturating_sub(clock.renewed_at));
            t.named_for = Some(now.saturating_sub(clock.since));
            clocks.node_lost_since.clear();
        }
    }
    clocks.holder = Some(clock);
    t
}

/// [`grant::decide`] on one slot's Lease and candidates.
fn decide_slot(
    snapshot: &Snapshot,
    lease: Option<&LeaseView>,
    candidates: &[Candidate],
    timers: Timers,
    at_capacity: bool,
) -> Result<Plan, TokenExhausted> {
    grant::decide(&Observation {
        settings: snapshot.settings,
        lease,
        pods: candidates,
        ceiling: snapshot.ceiling,
        highest_token: snapshot.highest_token,
        fresh_reservation: snapshot.fresh_reservation,
        holder_pending_for: timers.pending_for,
        holder_node_lost_for: timers.node_lost_for,
        holder_renewed_ago: timers.renewed_ago,
        holder_named_for: timers.named_for,
        at_capacity,
    })
}

/// A claim for unit tests: `name` is also its identity, its UID is `uid-<name>`, created
/// `created` seconds after the epoch; granted with `token` (phase `Running`, ungated) or waiting
/// (`None`: gated, `Pending`). Other fields are defaults (no resourceVersion, on-busy `Wait`).
#[cfg(test)]
pub(crate) fn test_claim(name: &str, created: i64, token: Option<i64>) -> Candidate {
    Candidate {
        kind: HolderKind::Claim,
        name: name.into(),
        identity: name.into(),
        uid: format!("uid-{name}"),
        resource_version: String::new(),
        created: k8s_openapi::jiff::Timestamp::from_second(created).unwrap(),
        gated: token.is_none(),
        node_name: None,
        node_lost: false,
        phase: if token.is_some() { Phase::Running } else { Phase::Pending },
        deleting: false,
        token,
        on_busy: super::policy::BusyPolicy::Wait,
        max_wait: None,
        waiting_for: None,
        slot: 0,
        multi: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::grant::{Decision, Holder, ReleaseReason};

    const SETTINGS: Settings = Settings {
        start_timeout: Duration::from_secs(300),
        node_loss_timeout: Duration::from_secs(60),
        lease_duration: Duration::from_secs(15),
        claim_record_delay: Duration::ZERO,
    };

    use super::test_claim as claim;

    /// A request its holder released (`leasehold.dev/released`) is never granted again, even
    /// while the claim (its status unrecorded) still shows it waiting: the free lock goes to the
    /// next waiter, and with nobody else waiting it stays free.
    #[test]
    fn a_released_request_is_never_granted_again() {
        let x = Candidate { uid: grant::request_uid("x", 1), ..claim("x", 1, None) };
        let y = Candidate { uid: grant::request_uid("y", 1), ..claim("y", 2, None) };
        let free = LeaseView { token: 4, trusted: true, released: vec!["x/1".into()], ..LeaseView::default() };
        let mut snap = Snapshot {
            settings: SETTINGS,
            lease: Some(free),
            renew_marker: None,
            extra_slots: vec![],
            max_holders: None,
            candidates: vec![x.clone(), y],
            ceiling: 1000,
            slot_tokens: vec![],
            highest_token: 4,
            fresh_reservation: None,
        };
        let s = step(&snap, Duration::ZERO, &Clocks::default()).unwrap();
        match s.plan.decision {
            Decision::UpdateLease { holder: Some(g), .. } => assert_eq!((g.uid.as_str(), g.token), ("y/1", 5)),
            other => panic!("expected a grant to y's request, got {other:?}"),
        }
        snap.candidates = vec![x];
        let s = step(&snap, Duration::ZERO, &Clocks::default()).unwrap();
        assert!(matches!(s.plan.decision, Decision::Idle { .. }), "{:?}", s.plan.decision);
    }

    fn snapshot(marker: &str) -> Snapshot {
        Snapshot {
            settings: SETTINGS,
            lease: Some(LeaseView {
                holder: Some(Holder { name: "a".into(), uid: Some("uid-a".into()), kind: HolderKind::Claim }),
                token: 4,
                floor: 0,
                trusted: true,
                // b waits at the head: the hint the operator keeps while a holds.
                next: Some(Next { identity: "b".into(), uid: "uid-b".into(), token: 5 }),
                released: vec![],
                ceiling: None,
                lease_duration: None,
                next_lease_duration: None,
            }),
            renew_marker: Some(marker.into()),
            extra_slots: vec![],
            max_holders: None,
            candidates: vec![claim("b", 2, None), claim("a", 1, Some(4))],
            ceiling: 1000,
            highest_token: 4,
            slot_tokens: vec![],
            fresh_reservation: None,
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_claim_expires_a_lease_duration_after_the_last_renewal_this_process_saw() {
        let s = step(&snapshot("r1"), secs(100), &Clocks::default()).unwrap();
        assert!(matches!(s.plan.decision, Decision::Idle { requeue_after: Some(d) } if d == secs(15)));
        // A renewal seen at 110 restarts the clock: not expired at 120 ...
        let s = step(&snapshot("r2"), secs(110), &s.clocks).unwrap();
        let s = step(&snapshot("r2"), secs(124), &s.clocks).unwrap();
        assert!(matches!(s.plan.decision, Decision::Idle { .. }));
        // ... expired 15 s after it, and b is next.
        let s = step(&snapshot("r2"), secs(125), &s.clocks).unwrap();
        match s.plan.decision {
            Decision::UpdateLease { holder: Some(g), released: Some(r), .. } => {
                assert_eq!((g.name.as_str(), g.token, r.reason), ("b", 5, ReleaseReason::Expired));
            }
            other => panic!("expected a handover to b, got {other:?}"),
        }
    }

    /// An operator's hint written before the lock's lease duration changed (20 s on the Lease,
    /// 15 s on the lock) is written again, so the handover passes the new value on; a waiter's own
    /// hint (no duration) and an up-to-date one are left alone (no write).
    #[test]
    fn a_hint_carrying_an_old_lease_duration_is_written_again() {
        let with = |d: Option<u64>| {
            let mut snap = snapshot("r1");
            snap.lease.as_mut().unwrap().next_lease_duration = d.map(secs);
            step(&snap, secs(100), &Clocks::default()).unwrap()
        };
        let s = with(Some(20));
        assert_eq!((s.plan.decision, s.next.map(|n| n.token)), (Decision::SetNext, Some(5)));
        for d in [Some(15), None] {
            assert!(matches!(with(d).plan.decision, Decision::Idle { .. }), "{d:?}");
        }
    }

    /// The lock's lease duration lowered under a running claim holder (15 s to 3 s): the holder
    /// renews against its grant's Lease (15 s), so the operator expires it by that, not by the
    /// lock's new value; its timer is armed for the same (no wake-up loop at 3 s).
    #[test]
    fn a_lowered_lease_duration_does_not_expire_the_running_grant_sooner() {
        let lowered = |marker: &str| {
            let mut snap = snapshot(marker);
            snap.settings.lease_duration = secs(3);
            snap.lease.as_mut().unwrap().lease_duration = Some(secs(15));
            snap
        };
        let s = step(&lowered("r1"), secs(100), &Clocks::default()).unwrap();
        assert!(matches!(s.plan.decision, Decision::Idle { requeue_after: Some(d) } if d == secs(15)), "{:?}", s.plan);
        let s = step(&lowered("r1"), secs(114), &s.clocks).unwrap();
        assert!(matches!(s.plan.decision, Decision::Idle { requeue_after: Some(d) } if d == secs(1)), "{:?}", s.plan);
        let s = step(&lowered("r1"), secs(115), &s.clocks).unwrap();
        match s.plan.decision {
            Decision::UpdateLease { holder: Some(g), released: Some(r), .. } => {
                assert_eq!((g.name.as_str(), r.reason), ("b", ReleaseReason::Expired));
            }
            other => panic!("expected a handover to b, got {other:?}"),
        }
    }

    /// Issue 12: a grant to a claim is recorded in its status `claim_record_delay` after this
    /// process first saw the Lease name it (the claim's process acts on the Lease); a claim that
    /// is gone by then costs no write; a semaphore's claim is recorded at once.
    #[test]
    fn a_claim_s_status_record_waits_for_the_record_delay() {
        let delayed = |mut snap: Snapshot| {
            snap.settings.claim_record_delay = secs(1);
            // a holds by the Lease alone (its status not recorded yet); b waits, hinted.
            snap.candidates[1] = claim("a", 1, None);
            snap
        };
        let s = step(&delayed(snapshot("r1")), secs(100), &Clocks::default()).unwrap();
        assert_eq!(s.plan.decision, Decision::Idle { requeue_after: Some(secs(1)) });
        assert_eq!(s.plan.holder.as_ref().map(|h| h.name.as_str()), Some("a"));
        assert_eq!(s.plan.waiters, vec!["b".to_string()], "the holder is not listed as waiting");
        let s = step(&delayed(snapshot("r2")), Duration::from_millis(100_400), &s.clocks).unwrap();
        assert_eq!(s.plan.decision, Decision::Idle { requeue_after: Some(Duration::from_millis(600)) });
        let s = step(&delayed(snapshot("r2")), secs(101), &s.clocks).unwrap();
        assert!(
            matches!(&s.plan.decision, Decision::PatchHolder(g) if g.name == "a" && g.token == 4),
            "{:?}",
            s.plan.decision
        );
        // Released and deleted within the delay: nothing to record, the lock goes to b.
        let mut gone = delayed(snapshot("r1"));
        gone.lease.as_mut().unwrap().holder = None;
        gone.candidates.retain(|c| c.name != "a");
        let s = step(&gone, secs(100), &Clocks::default()).unwrap();
        assert!(
            matches!(&s.plan.decision, Decision::UpdateLease { holder: Some(g), .. } if g.name == "b"),
            "{:?}",
            s.plan.decision
        );
        // A semaphore (slot 0 of two): recorded at once.
        let mut sem = delayed(snapshot("r1"));
        sem.max_holders = Some(2);
        sem.slot_tokens = vec![4];
        let s = step(&sem, secs(100), &Clocks::default()).unwrap();
        assert!(matches!(&s.plan.decision, Decision::PatchHolder(g) if g.name == "a"), "{:?}", s.plan.decision);
    }

    /// Issue 12: while a claim holds, the Lease names the claim at the head of the queue as next
    /// holder with the next token; a grant carries the hint for the waiter after it.
    #[test]
    fn a_claim_holder_s_lease_names_the_head_claim_as_next_holder() {
        let b5 = Next { identity: "b".into(), uid: "uid-b".into(), token: 5 };
        // The hint is there: nothing to write.
        let s = step(&snapshot("r1"), secs(1), &Clocks::default()).unwrap();
        assert!(matches!(s.plan.decision, Decision::Idle { .. }), "{:?}", s.plan.decision);
        // No hint yet (b arrived after a's grant): write it, and only it.
        let mut snap = snapshot("r1");
        snap.lease.as_mut().unwrap().next = None;
        let s = step(&snap, secs(1), &Clocks::default()).unwrap();
        assert_eq!((s.plan.decision, s.next), (Decision::SetNext, Some(b5.clone())));
        // A stale hint (b left, c waits): replaced; above every token in view.
        let mut snap = snapshot("r1");
        snap.candidates = vec![claim("a", 1, Some(4)), claim("c", 3, None), claim("old", 0, Some(9))];
        snap.ceiling = 1000;
        let s = step(&snap, secs(1), &Clocks::default()).unwrap();
        let c10 = Next { identity: "c".into(), uid: "uid-c".into(), token: 10 };
        assert_eq!((s.plan.decision, s.next), (Decision::SetNext, Some(c10)));
        // Nobody waits any more: the hint is removed.
        let mut snap = snapshot("r1");
        snap.candidates.retain(|c| c.name == "a");
        let s = step(&snap, secs(1), &Clocks::default()).unwrap();
        assert_eq!((s.plan.decision, s.next), (Decision::SetNext, None));
        // A grant to b carries the hint for c, the next in the queue.
        let mut snap = snapshot("r1");
        snap.lease = Some(LeaseView {
            holder: None,
            token: 4,
            floor: 0,
            trusted: true,
            next: None,
            released: vec![],
            ceiling: None,
            lease_duration: None,
            next_lease_duration: None,
        });
        snap.candidates = vec![claim("b", 2, None), claim("c", 3, None)];
        let s = step(&snap, secs(1), &Clocks::default()).unwrap();
        assert!(
            matches!(&s.plan.decision, Decision::UpdateLease { holder: Some(g), .. } if g.name == "b" && g.token == 5)
        );
        assert_eq!(s.next, Some(Next { identity: "c".into(), uid: "uid-c".into(), token: 6 }));
    }

    /// No hint when the operator must act itself: the head is a pod (ungated by the operator), a
    /// waiter with a busy policy (it may be rejected), the holder is a pod (it releases by
    /// ending), or the next token needs a reservation first.
    #[test]
    fn no_next_holder_hint_when_the_operator_must_grant() {
        let no_hint = |snap: &Snapshot| {
            let s = step(snap, secs(1), &Clocks::default()).unwrap();
            assert_eq!(s.next, None, "{:?}", s.plan.decision);
        };
        let mut snap = snapshot("r1");
        snap.lease.as_mut().unwrap().next = None;
        snap.candidates[0].kind = HolderKind::Pod;
        no_hint(&snap);
        let mut snap = snapshot("r1");
        snap.lease.as_mut().unwrap().next = None;
        snap.candidates[0].max_wait = Some(secs(60));
        no_hint(&snap);
        let mut snap = snapshot("r1");
        snap.lease.as_mut().unwrap().next = None;
        snap.ceiling = 4;
        no_hint(&snap);
        let mut snap = snapshot("r1");
        let lease = snap.lease.as_mut().unwrap();
        (lease.next, lease.holder.as_mut().unwrap().kind) = (None, HolderKind::Pod);
        snap.candidates[1].kind = HolderKind::Pod;
        no_hint(&snap);
    }

    #[test]
    fn a_restarted_process_times_from_scratch() {
        let s = step(&snapshot("r1"), secs(100), &Clocks::default()).unwrap();
        let later = step(&snapshot("r1"), secs(200), &Clocks::default()).unwrap();
        assert!(matches!(later.plan.decision, Decision::Idle { .. }), "fresh clocks must not expire at once");
        assert_ne!(s.clocks, Clocks::default());
    }

    /// The controller forgets clocks that time nothing (an idle lock keeps no entry): they must be
    /// empty only when forgetting them cannot change a later decision.
    #[test]
    fn clocks_are_empty_only_when_they_time_nothing() {
        let held = step(&snapshot("r1"), secs(100), &Clocks::default()).unwrap();
        assert!(!held.clocks.is_empty(), "a renewing claim holder and a waiter are timed");
        let mut free = snapshot("r1");
        free.lease.as_mut().unwrap().holder = None;
        free.candidates.clear();
        let idle = step(&free, secs(100), &held.clocks).unwrap();
        assert!(matches!(idle.plan.decision, Decision::Idle { requeue_after: None }));
        assert!(idle.clocks.is_empty(), "a free lock with no candidate times nothing: {:?}", idle.clocks);
        assert_eq!(
            step(&free, secs(200), &Clocks::default()).unwrap().plan,
            step(&free, secs(200), &idle.clocks).unwrap().plan
        );
        let mut waiting = free.clone();
        waiting.lease.as_mut().unwrap().holder =
            Some(Holder { name: "a".into(), uid: Some("uid-a".into()), kind: HolderKind::Claim });
        waiting.candidates = vec![claim("a", 1, Some(4))];
        assert!(!step(&waiting, secs(100), &Clocks::default()).unwrap().clocks.is_empty());
    }

    #[test]
    fn the_decision_does_not_depend_on_the_order_the_cache_lists_candidates() {
        let mut a = snapshot("r1");
        a.lease.as_mut().unwrap().holder = None;
        a.candidates = vec![claim("x", 1, None), claim("y", 1, None), claim("w", 1, None)];
        let mut b = a.clone();
        b.candidates.reverse();
        let (sa, sb) = (step(&a, secs(1), &Clocks::default()).unwrap(), step(&b, secs(1), &Clocks::default()).unwrap());
        assert_eq!(sa.plan, sb.plan);
        assert_eq!(sa.plan.waiters, ["w", "x", "y"]);
    }

    #[test]
    fn waiters_are_timed_from_when_first_seen_and_forgotten_when_they_stop_waiting() {
        let mut s = snapshot("r1");
        s.candidates[0].max_wait = Some(secs(30));
        let first = step(&s, secs(10), &Clocks::default()).unwrap();
        // The holder renewed meanwhile, so it still holds at 40.
        let mut s = Snapshot { renew_marker: Some("r2".into()), ..s };
        let st = step(&s, secs(40), &first.clocks).unwrap();
        assert!(matches!(st.plan.decision, Decision::RejectWaiters(ref r) if r[0].name == "b"));
        s.candidates.remove(0);
        let st = step(&s, secs(41), &st.clocks).unwrap();
        assert!(st.clocks.waiting_since.is_empty());
    }

    /// A semaphore of `max` slots, every slot's Lease free, these candidates.
    fn semaphore(max: u32, candidates: Vec<Candidate>) -> Snapshot {
        let free = LeaseView { holder: None, token: 0, floor: 0, trusted: true, ..LeaseView::default() };
        let extra = (1..max).map(|_| SlotLease { lease: Some(free.clone()), renew_marker: None }).collect();
        Snapshot {
            lease: Some(free),
            renew_marker: None,
            extra_slots: extra,
            max_holders: Some(max),
            candidates,
            highest_token: 0,
            ..snapshot("r1")
        }
    }

    /// Slot `k`'s Lease names candidate `i` (a granted claim) with its token.
    fn hold(s: &mut Snapshot, k: u32, i: usize) {
        let c = s.candidates[i].clone();
        let view = LeaseView {
            holder: Some(Holder { name: c.identity.clone(), uid: Some(c.uid.clone()), kind: HolderKind::Claim }),
            token: c.token.unwrap(),
            floor: 0,
            trusted: true,
            next: None,
            released: vec![],
            ceiling: None,
            lease_duration: None,
            next_lease_duration: None,
        };
        match k {
            0 => s.lease = Some(view),
            k => s.extra_slots[k as usize - 1].lease = Some(view),
        }
    }

    fn granted_in(slot: u32, name: &str, created: i64, token: i64) -> Candidate {
        Candidate { slot, ..claim(name, created, Some(token)) }
    }

    #[test]
    fn a_semaphore_grant_reserves_its_own_token_then_grants_it_in_the_lowest_free_slot() {
        let mut s = semaphore(2, vec![granted_in(0, "a", 1, 4), claim("b", 2, None), claim("c", 3, None)]);
        hold(&mut s, 0, 0);
        s.ceiling = 1000;
        let st = step(&s, secs(1), &Clocks::default()).unwrap();
        assert_eq!(st.plan.decision, Decision::Reserve { from: 1000, to: 1001 }, "one token, by compare-and-swap");
        assert_eq!(st.reserved_slot, Some(1), "reserved for slot 1, recorded by the same write");
        s.ceiling = 1001;
        s.fresh_reservation = Some(1000);
        s.slot_tokens = vec![0, 1001];
        let st = step(&s, secs(1), &st.clocks).unwrap();
        match st.plan.decision {
            Decision::UpdateLease { holder: Some(g), released: None, .. } => {
                assert_eq!((g.name.as_str(), g.token, g.slot), ("b", 1001, 1));
            }
            other => panic!("expected b granted in slot 1, got {other:?}"),
        }
        assert_eq!(st.slot, 1);
        assert_eq!(st.holders.iter().map(|h| (h.name.as_str(), h.slot)).collect::<Vec<_>>(), [("a", 0)]);
        assert_eq!(st.plan.waiters, ["b", "c"]);
    }

    #[test]
    fn a_semaphore_never_grants_without_a_fresh_reservation_of_its_own() {
        // Decided right after another reconcile's reservation (the ceiling moved, but not by
        // this step): no grant from that ceiling, a reservation of its own first.
        let mut s = semaphore(2, vec![claim("b", 2, None)]);
        s.ceiling = 1001;
        let st = step(&s, secs(1), &Clocks::default()).unwrap();
        assert_eq!(st.plan.decision, Decision::Reserve { from: 1001, to: 1002 });
    }

    #[test]
    fn a_skip_waiter_is_rejected_only_when_every_slot_holds() {
        let skipper = Candidate { on_busy: crate::lock::policy::BusyPolicy::Skip, ..claim("s", 5, None) };
        let mut s = semaphore(2, vec![granted_in(0, "a", 1, 4), skipper.clone()]);
        hold(&mut s, 0, 0);
        let st = step(&s, secs(1), &Clocks::default()).unwrap();
        assert!(matches!(st.plan.decision, Decision::Reserve { .. }), "a slot is free: {:?}", st.plan.decision);
        let mut s = semaphore(2, vec![granted_in(0, "a", 1, 4), granted_in(1, "b", 2, 5), skipper]);
        hold(&mut s, 0, 0);
        hold(&mut s, 1, 1);
        let st = step(&s, secs(1), &Clocks::default()).unwrap();
        assert!(matches!(st.plan.decision, Decision::RejectWaiters(ref r) if r[0].name == "s"));
        assert_eq!(st.holders.len(), 2);
    }

    #[test]
    fn a_lowered_max_holders_revokes_nobody_and_grants_nothing_until_below_it() {
        // maxHolders lowered from 2 to 1 while a holds slot 1 and slot 0 is free: a keeps
        // holding, c waits.
        let mut s = semaphore(2, vec![granted_in(1, "a", 1, 4), claim("c", 3, None)]);
        hold(&mut s, 1, 0);
        s.max_holders = Some(1);
        let st = step(&s, secs(1), &Clocks::default()).unwrap();
        assert!(matches!(st.plan.decision, Decision::Idle { .. }), "{:?}", st.plan.decision);
        assert_eq!(st.holders.iter().map(|h| (h.name.as_str(), h.slot)).collect::<Vec<_>>(), [("a", 1)]);
        assert_eq!(st.plan.waiters, ["c"]);
        // Once a released slot 1, c is granted in slot 0, never in slot 1.
        s.candidates.remove(0);
        s.extra_slots[0].lease.as_mut().unwrap().holder = None;
        (s.fresh_reservation, s.ceiling, s.slot_tokens) = (Some(1000), 1001, vec![1001]);
        let st = step(&s, secs(2), &st.clocks).unwrap();
        assert!(
            matches!(st.plan.decision, Decision::UpdateLease { holder: Some(ref g), .. } if g.name == "c" && g.slot == 0)
        );
    }
}
