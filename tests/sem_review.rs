//! The semaphore review's scenarios (F1-F4 in the README, "What the model checker proves"),
//! driving the real `machine::step`: each found a hole in the first semaphore protocol (9977e21)
//! and asserts the behaviour of its fix.
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use leasehold::lock::grant::{Candidate, Decision, Holder, HolderKind, LeaseView, Phase, Settings};
use leasehold::lock::machine::{Clocks, SlotLease, Snapshot, step};
use leasehold::lock::policy::BusyPolicy;

const SETTINGS: Settings = Settings {
    start_timeout: Duration::from_secs(300),
    node_loss_timeout: Duration::from_secs(60),
    lease_duration: Duration::from_secs(15),
    claim_record_delay: Duration::ZERO,
};

fn pod(name: &str, created: i64, slot: u32, token: Option<i64>) -> Candidate {
    Candidate {
        kind: HolderKind::Pod,
        name: name.into(),
        identity: name.into(),
        uid: format!("uid-{name}"),
        resource_version: "1".into(),
        created: Timestamp::from_second(1_700_000_000 + created).unwrap(),
        gated: token.is_none(),
        node_name: token.map(|_| "node-1".into()),
        node_lost: false,
        phase: if token.is_some() { Phase::Running } else { Phase::Pending },
        deleting: false,
        token,
        on_busy: BusyPolicy::Wait,
        max_wait: None,
        waiting_for: None,
        slot,
        multi: None,
    }
}

fn lease(holder: Option<&str>, token: i64) -> LeaseView {
    LeaseView {
        holder: holder.map(|h| Holder { name: h.into(), uid: Some(format!("uid-{h}")), kind: HolderKind::Pod }),
        token,
        floor: 0,
        trusted: true,
        next: None,
        released: vec![],
        ceiling: None,
        lease_duration: None,
        next_lease_duration: None,
    }
}

fn snap(
    max: Option<u32>,
    l0: Option<LeaseView>,
    extra: Vec<Option<LeaseView>>,
    c: Vec<Candidate>,
    ceiling: i64,
) -> Snapshot {
    Snapshot {
        settings: SETTINGS,
        lease: l0,
        renew_marker: None,
        extra_slots: extra.into_iter().map(|l| SlotLease { lease: l, renew_marker: None }).collect(),
        max_holders: max,
        candidates: c,
        ceiling,
        highest_token: 0,
        slot_tokens: vec![],
        fresh_reservation: None,
    }
}

/// Applies Reserve steps (as the CAS would land) until a non-Reserve decision; returns it.
fn run_to_write(mut s: Snapshot) -> (Snapshot, leasehold::lock::machine::Step) {
    let mut clocks = Clocks::default();
    for _ in 0..5 {
        let st = step(&s, Duration::from_secs(1), &clocks).unwrap();
        eprintln!("  step: slot {} -> {:?}", st.slot, st.plan.decision);
        clocks = st.clocks.clone();
        match st.plan.decision {
            Decision::Reserve { from, to } => {
                s.ceiling = to;
                s.fresh_reservation = Some(from);
                if let Some(k) = st.reserved_slot {
                    let k = k as usize;
                    s.slot_tokens.resize(s.slot_tokens.len().max(k + 1), 0);
                    s.slot_tokens[k] = to;
                }
            }
            _ => return (s, st),
        }
    }
    panic!("reserves for ever");
}

/// F1: maxHolders lowered 2 -> 1; pod-b still runs in slot 1 but slot 1's Lease is gone
/// (deleted by a third party, or not yet seen by this operator's cache); pod-a (slot 0) is done.
/// pod-b still counts: pod-c is not granted beside it (the first protocol granted it in slot 0).
#[test]
fn f1_a_lowered_limit_counts_a_holder_whose_slot_lease_is_missing() {
    let mut a = pod("pod-a", 0, 0, Some(1001));
    a.phase = Phase::Succeeded;
    let b = pod("pod-b", 1, 1, Some(1002));
    let c = pod("pod-c", 2, 0, None);
    let s = snap(Some(1), Some(lease(Some("pod-a"), 1001)), vec![None], vec![a, b, c], 1002);
    let (_, st) = run_to_write(s);
    eprintln!("holders: {:?}", st.holders.iter().map(|h| (&h.name, h.slot)).collect::<Vec<_>>());
    if let Decision::UpdateLease { holder: Some(g), .. } = &st.plan.decision {
        panic!(
            "granted {} (token {}) in slot {} while pod-b runs in slot 1 under maxHolders 1",
            g.name, g.token, st.slot
        );
    }
}

/// F1': same, slot 1's Lease present but free (stale cache, or a repair pending).
#[test]
fn f1b_a_lowered_limit_counts_a_holder_whose_slot_lease_looks_free() {
    let mut a = pod("pod-a", 0, 0, Some(1001));
    a.phase = Phase::Succeeded;
    let b = pod("pod-b", 1, 1, Some(1002));
    let c = pod("pod-c", 2, 0, None);
    let s = snap(Some(1), Some(lease(Some("pod-a"), 1001)), vec![Some(lease(None, 0))], vec![a, b, c], 1002);
    let (_, st) = run_to_write(s);
    if let Decision::UpdateLease { holder: Some(g), .. } = &st.plan.decision {
        panic!(
            "granted {} (token {}) in slot {} while pod-b runs in slot 1 under maxHolders 1",
            g.name, g.token, st.slot
        );
    }
}

/// F2: maxHolders lowered 2 -> 1 while both slots hold: a skip waiter and a max-wait waiter are
/// still answered (the first protocol answered neither: no slot saw the waiters, and no timer
/// was armed).
#[test]
fn f2_skip_and_max_wait_waiters_are_answered_over_a_lowered_limit() {
    let a = pod("pod-a", 0, 0, Some(1001));
    let b = pod("pod-b", 1, 1, Some(1002));
    let mut c = pod("pod-c", 2, 0, None);
    c.on_busy = BusyPolicy::Skip;
    let mut d = pod("pod-d", 3, 0, None);
    d.max_wait = Some(Duration::from_secs(5));
    let s =
        snap(Some(1), Some(lease(Some("pod-a"), 1001)), vec![Some(lease(Some("pod-b"), 1002))], vec![a, b, c, d], 1002);
    let mut clocks = Clocks::default();
    let mut last = None;
    for t in [1u64, 100, 10_000] {
        let st = step(&s, Duration::from_secs(t), &clocks).unwrap();
        clocks = st.clocks.clone();
        eprintln!("  t={t}: {:?} waiters {:?}", st.plan.decision, st.plan.waiters);
        last = Some(st.plan.decision);
    }
    assert!(
        matches!(last, Some(Decision::RejectWaiters(_))),
        "skip waiter pod-c (lock full) and max-wait waiter pod-d (waited 10 000 s > 5 s) never rejected: {last:?}"
    );
}

/// F3: maxHolders removed (Some(2) -> None) while pod-a (slot 0, 1001) and pod-b (slot 1, 1002)
/// run: the lock stays on the semaphore path, so Lease 0 is not repaired to name pod-b (the
/// first protocol's single-holder path did, and once pod-b was done granted pod-c in slot 0
/// while pod-a still ran).
#[test]
fn f3_removing_max_holders_does_not_repair_slot_0_to_the_slot_1_holder() {
    let a = pod("pod-a", 0, 0, Some(1001));
    let b = pod("pod-b", 1, 1, Some(1002));
    let c = pod("pod-c", 2, 0, None);
    let s = snap(
        None,
        Some(lease(Some("pod-a"), 1001)),
        vec![Some(lease(Some("pod-b"), 1002))],
        vec![a.clone(), b.clone(), c.clone()],
        1002,
    );
    let st = step(&s, Duration::from_secs(1), &Clocks::default()).unwrap();
    assert!(!matches!(st.plan.decision, Decision::RepairLease { .. }), "{:?}", st.plan.decision);
    assert_eq!(st.holders.iter().map(|h| (h.name.as_str(), h.slot)).collect::<Vec<_>>(), [("pod-a", 0), ("pod-b", 1)]);
}

/// F3': maxHolders removed, pod-a (slot 0, the higher token) done, pod-b runs in slot 1: pod-c
/// is not granted beside pod-b (the first protocol's single-holder path did not see slot 1).
#[test]
fn f3b_removing_max_holders_keeps_counting_the_slot_1_holder() {
    let mut a = pod("pod-a", 0, 0, Some(1002));
    a.phase = Phase::Succeeded;
    let b = pod("pod-b", 1, 1, Some(1001));
    let c = pod("pod-c", 2, 0, None);
    let s = snap(None, Some(lease(Some("pod-a"), 1002)), vec![Some(lease(Some("pod-b"), 1001))], vec![a, b, c], 1002);
    let (_, st) = run_to_write(s);
    if let Decision::UpdateLease { holder: Some(g), .. } = &st.plan.decision {
        panic!("granted {} token {} while pod-b (slot 1) still runs, maxHolders now unset (1)", g.name, g.token);
    }
}

/// F4: a holder in slot 1 carries a token above the ceiling (granted by an earlier lock object
/// with the same name, before it was deleted and recreated; or a forged slot Lease patched in):
/// pod-z is granted in slot 0 with a token above it (the first protocol's slot 0 looked only at
/// its own view and handed out 1002 again).
#[test]
fn f4_a_token_above_the_ceiling_in_another_slot_is_never_handed_again() {
    let y = pod("pod-y", 0, 1, Some(1002));
    let z = pod("pod-z", 1, 0, None);
    // Recreated lock after its first block reservation (0 -> 1001) and slot 0's Lease creation.
    let s = snap(Some(2), Some(lease(None, 0)), vec![None], vec![y, z], 1001);
    let (_, st) = run_to_write(s);
    match &st.plan.decision {
        Decision::UpdateLease { holder: Some(g), .. } => {
            assert_eq!((g.name.as_str(), st.slot), ("pod-z", 0));
            assert!(g.token > 1002, "pod-z's token {} is not above pod-y's 1002", g.token);
        }
        other => panic!("expected pod-z granted in slot 0, got {other:?}"),
    }
}

/// F1'': maxHolders lowered 3 -> 2 while a grant reserved under 3 is in flight in slot 2 (its
/// reservation, token 1003, is recorded on the lock; its Lease write is not in this operator's
/// cache, nor is the pod it went to). pod-a runs in slot 0, pod-b is done and slot 1's Lease
/// free, pod-d waits.
/// Slot 2 counts as held, so nothing is granted: the write fences slot 2 (floor 1003, the
/// in-flight write's compare-and-swap then fails), and only then may slot 1 grant.
#[test]
fn f1c_a_grant_in_flight_in_another_slot_counts_until_its_slot_is_fenced() {
    let a = pod("pod-a", 0, 0, Some(1001));
    let mut b = pod("pod-b", 1, 1, Some(1002));
    b.phase = Phase::Succeeded;
    let d = pod("pod-d", 3, 0, None);
    let mut s = snap(
        Some(2),
        Some(lease(Some("pod-a"), 1001)),
        vec![Some(lease(None, 1002)), Some(lease(None, 0))],
        vec![a, b, d],
        1003,
    );
    s.slot_tokens = vec![1001, 1002, 1003];
    let (s, st) = run_to_write(s);
    match &st.plan.decision {
        Decision::UpdateLease { holder: None, floor: Some(1003), .. } if st.slot == 2 => {}
        other => panic!("expected slot 2 fenced at 1003 before any grant, got slot {} {other:?}", st.slot),
    }
    // Fenced (the in-flight grant never landed): slot 2 is settled and free; slot 1 may grant.
    let mut s = s;
    s.extra_slots[1].lease = Some(LeaseView { floor: 1003, ..lease(None, 0) });
    s.fresh_reservation = None;
    let (_, st) = run_to_write(s);
    match &st.plan.decision {
        Decision::UpdateLease { holder: Some(g), .. } => {
            assert_eq!((g.name.as_str(), g.slot, g.token), ("pod-d", 1, 1004))
        }
        other => panic!("expected pod-d granted in slot 1 once slot 2 was fenced, got {other:?}"),
    }
}
