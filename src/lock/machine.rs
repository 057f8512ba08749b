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

use super::fencing::TokenExhausted;
use super::grant::{self, Candidate, HolderKind, LeaseView, Observation, Phase, Plan, Settings};

/// What one step needs to know about one lock: one consistent view of its objects.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// The lock's timeouts.
    pub settings: Settings,
    /// The lock's Lease, `None` if it does not exist.
    pub lease: Option<LeaseView>,
    /// The Lease's `spec.renewTime` as written (any text that changes with every renewal; the
    /// model uses a counter). A change restarts a claim holder's expiry clock.
    pub renew_marker: Option<String>,
    /// Pods and claims that ask for (or hold) the lock, in any order.
    pub candidates: Vec<Candidate>,
    /// The lock's `status.tokenCeiling`.
    pub ceiling: i64,
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
            Some(x) => *x = c,
            None => self.candidates.push(c),
        }
    }
}

/// The clock state one operator process remembers for one lock between steps. Starts empty
/// ([`Clocks::default`]) for a new lock and after a restart. Times are on the caller's monotonic
/// clock, in the same units as the `now` given to [`step`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Clocks {
    /// The holder being timed, if the Lease names one that is among the candidates.
    holder: Option<HolderClock>,
    /// Waiter UID -> when first seen waiting (for `max-wait`).
    waiting_since: BTreeMap<String, Duration>,
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
    /// The decision and the status view.
    pub plan: Plan,
    /// Clock state to pass to the next step for this lock.
    pub clocks: Clocks,
}

/// Decides the next write for one lock.
///
/// `now` is the caller's monotonic time (never goes backwards within one process); `clocks`
/// is what the previous step for this lock returned (or the default).
///
/// # Errors
/// [`TokenExhausted`] when the next token would not fit in an `int64`.
pub fn step(snapshot: &Snapshot, now: Duration, clocks: &Clocks) -> Result<Step, TokenExhausted> {
    let mut clocks = clocks.clone();
    let mut candidates = snapshot.candidates.clone();
    candidates.sort_by(|a, b| (a.created, &a.name, &a.uid).cmp(&(b.created, &b.name, &b.uid)));

    for c in &mut candidates {
        if c.is_waiter() {
            let since = *clocks.waiting_since.entry(c.uid.clone()).or_insert(now);
            c.waiting_for = Some(now.saturating_sub(since));
        }
    }
    let waiting: BTreeSet<&str> = candidates.iter().filter(|c| c.is_waiter()).map(|c| c.uid.as_str()).collect();
    clocks.waiting_since.retain(|uid, _| waiting.contains(uid.as_str()));

    let lease_holder = snapshot.lease.as_ref().and_then(|l| l.holder.as_ref());
    let found =
        lease_holder.and_then(|h| candidates.iter().find(|c| c.identity == h.name && Some(&c.uid) == h.uid.as_ref()));
    // A claim holder whose claim object is gone is still timed: it holds until its lease expires.
    let orphan = lease_holder.filter(|h| found.is_none() && h.kind == HolderKind::Claim);
    let holder = found.map(|c| (c.uid.as_str(), c.kind, c.phase, c.node_name.as_ref(), c.node_lost)).or_else(|| {
        orphan.map(|h| (h.uid.as_deref().unwrap_or_default(), HolderKind::Claim, Phase::Running, None, false))
    });
    let (mut pending_for, mut node_lost_for, mut renewed_ago) = (None, None, None);
    match holder {
        None => {
            clocks.holder = None;
            clocks.node_lost_since.clear();
        }
        Some((uid, kind, phase, node_name, node_lost)) => {
            let marker = snapshot.renew_marker.clone();
            let clock = match clocks.holder.take() {
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
                HolderKind::Pod => {
                    pending_for = (phase == Phase::Pending).then(|| now.saturating_sub(clock.since));
                    match (node_name, node_lost) {
                        (Some(node), true) => {
                            let since = *clocks.node_lost_since.entry(node.clone()).or_insert(now);
                            clocks.node_lost_since.retain(|n, _| n == node);
                            node_lost_for = Some(now.saturating_sub(since));
                        }
                        _ => clocks.node_lost_since.clear(),
                    }
                }
                HolderKind::Claim => {
                    renewed_ago = Some(now.saturating_sub(clock.renewed_at));
                    clocks.node_lost_since.clear();
                }
            }
            clocks.holder = Some(clock);
        }
    }

    let plan = grant::decide(&Observation {
        settings: snapshot.settings,
        lease: snapshot.lease.as_ref(),
        pods: &candidates,
        ceiling: snapshot.ceiling,
        highest_token: snapshot.highest_token,
        fresh_reservation: snapshot.fresh_reservation,
        holder_pending_for: pending_for,
        holder_node_lost_for: node_lost_for,
        holder_renewed_ago: renewed_ago,
    })?;
    Ok(Step { plan, clocks })
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
    };

    use super::test_claim as claim;

    fn snapshot(marker: &str) -> Snapshot {
        Snapshot {
            settings: SETTINGS,
            lease: Some(LeaseView {
                holder: Some(Holder { name: "a".into(), uid: Some("uid-a".into()), kind: HolderKind::Claim }),
                token: 4,
                floor: 0,
                trusted: true,
            }),
            renew_marker: Some(marker.into()),
            candidates: vec![claim("b", 2, None), claim("a", 1, Some(4))],
            ceiling: 1000,
            highest_token: 4,
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

    #[test]
    fn a_restarted_process_times_from_scratch() {
        let s = step(&snapshot("r1"), secs(100), &Clocks::default()).unwrap();
        let later = step(&snapshot("r1"), secs(200), &Clocks::default()).unwrap();
        assert!(matches!(later.plan.decision, Decision::Idle { .. }), "fresh clocks must not expire at once");
        assert_ne!(s.clocks, Clocks::default());
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
}
