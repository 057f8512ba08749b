use super::*;
use crate::lock::policy::BusyPolicy;

const SETTINGS: Settings = Settings {
    start_timeout: Duration::from_secs(300),
    node_loss_timeout: Duration::from_secs(60),
    lease_duration: Duration::from_secs(15),
    claim_record_delay: Duration::ZERO,
};

fn pod(name: &str, created: i64) -> Candidate {
    Candidate {
        kind: HolderKind::Pod,
        name: name.into(),
        identity: name.into(),
        uid: format!("uid-{name}"),
        resource_version: String::new(),
        created: Timestamp::from_second(created).unwrap(),
        gated: true,
        node_name: None,
        node_lost: false,
        phase: Phase::Pending,
        deleting: false,
        token: None,
        on_busy: BusyPolicy::Wait,
        max_wait: None,
        waiting_for: None,
        slot: 0,
        multi: None,
    }
}

fn running(name: &str, created: i64, token: i64) -> Candidate {
    Candidate {
        gated: false,
        node_name: Some("node-a".into()),
        phase: Phase::Running,
        token: Some(token),
        ..pod(name, created)
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

fn obs<'a>(lease: Option<&'a LeaseView>, pods: &'a [Candidate]) -> Observation<'a> {
    Observation {
        settings: SETTINGS,
        lease,
        pods,
        ceiling: 1000,
        highest_token: 0,
        fresh_reservation: None,
        holder_pending_for: None,
        holder_node_lost_for: None,
        holder_renewed_ago: None,
        holder_named_for: None,
        at_capacity: true,
    }
}

fn granted(name: &str, token: i64) -> Option<Grant> {
    Some(Grant {
        kind: HolderKind::Pod,
        name: name.into(),
        identity: name.into(),
        uid: format!("uid-{name}"),
        resource_version: String::new(),
        token,
        slot: 0,
    })
}

#[test]
fn new_lock_reserves_tokens_before_creating_its_lease() {
    let pods = [pod("a", 1)];
    let o = Observation { ceiling: 0, ..obs(None, &pods) };
    assert_eq!(decide(&o).unwrap().decision, Decision::Reserve { from: 0, to: 1 + fencing::RESERVATION_BLOCK });
    let o = Observation { fresh_reservation: Some(0), ..o };
    assert_eq!(decide(&o).unwrap().decision, Decision::CreateLease { holder: None, floor: 0 });
}

#[test]
fn a_lock_nobody_waits_for_or_holds_gets_no_lease_yet() {
    // Nothing to grant or adopt: no reservation, no Lease (one write per new lock: its status).
    let o = Observation { ceiling: 0, ..obs(None, &[]) };
    assert_eq!(decide(&o).unwrap().decision, Decision::Idle { requeue_after: None });
    // Finished pods and pods that gave up do not count; a running holder with a token does.
    let done = [Candidate { phase: Phase::Succeeded, ..running("old", 1, 3) }];
    assert_eq!(decide(&obs(None, &done)).unwrap().decision, Decision::Idle { requeue_after: None });
    let holds = [running("h", 1, 3)];
    assert!(matches!(decide(&obs(None, &holds)).unwrap().decision, Decision::Reserve { .. }));
}

#[test]
fn free_lock_goes_to_the_oldest_waiter_with_the_next_token() {
    let pods = [pod("late", 30), pod("b", 10), pod("a", 10)];
    let l = lease(None, 4);
    let plan = decide(&obs(Some(&l), &pods)).unwrap();
    assert_eq!(plan.decision, Decision::UpdateLease { holder: granted("a", 5), released: None, floor: None });
    assert_eq!(plan.waiters, ["a", "b", "late"]);
}

#[test]
fn first_grant_starts_above_the_floor() {
    let pods = [pod("a", 1)];
    let l = LeaseView { floor: 700, ..lease(None, 0) };
    let plan = decide(&obs(Some(&l), &pods)).unwrap();
    assert_eq!(plan.decision, Decision::UpdateLease { holder: granted("a", 701), released: None, floor: None });
}

#[test]
fn token_above_the_ceiling_needs_a_reservation_first() {
    let pods = [pod("a", 1)];
    let l = lease(None, 1000);
    let plan = decide(&obs(Some(&l), &pods)).unwrap();
    assert_eq!(plan.decision, Decision::Reserve { from: 1000, to: 1001 + fencing::RESERVATION_BLOCK });
}

#[test]
fn status_high_water_mark_is_a_lower_bound() {
    let pods = [pod("a", 1)];
    let l = lease(None, 3);
    let o = Observation { highest_token: 9, ..obs(Some(&l), &pods) };
    let plan = decide(&o).unwrap();
    assert_eq!(plan.decision, Decision::UpdateLease { holder: granted("a", 10), released: None, floor: None });
}

#[test]
fn running_holder_keeps_the_lock_and_is_not_a_waiter() {
    let pods = [running("h", 1, 3), pod("w", 2)];
    let l = lease(Some("h"), 3);
    let plan = decide(&obs(Some(&l), &pods)).unwrap();
    assert_eq!(plan.decision, Decision::Idle { requeue_after: None });
    assert_eq!(plan.holder, granted("h", 3));
    assert_eq!(plan.waiters, ["w"]);
}

#[test]
fn terminating_holder_still_holds() {
    let pods = [Candidate { deleting: true, ..running("h", 1, 3) }, pod("w", 2)];
    let l = lease(Some("h"), 3);
    assert_eq!(decide(&obs(Some(&l), &pods)).unwrap().decision, Decision::Idle { requeue_after: None });
}

#[test]
fn finished_holder_hands_over_in_one_lease_write() {
    for (phase, reason) in [(Phase::Succeeded, ReleaseReason::Succeeded), (Phase::Failed, ReleaseReason::Failed)] {
        let pods = [Candidate { phase, ..running("h", 1, 3) }, pod("w", 2)];
        let l = lease(Some("h"), 3);
        let plan = decide(&obs(Some(&l), &pods)).unwrap();
        let released = Some(Release { name: "h".into(), token: 3, reason });
        assert_eq!(plan.decision, Decision::UpdateLease { holder: granted("w", 4), released, floor: None });
    }
}

#[test]
fn vanished_holder_without_waiters_frees_the_lock() {
    let l = lease(Some("h"), 3);
    let plan = decide(&obs(Some(&l), &[])).unwrap();
    let released = Some(Release { name: "h".into(), token: 3, reason: ReleaseReason::Gone });
    assert_eq!(plan.decision, Decision::UpdateLease { holder: None, released, floor: None });
}

#[test]
fn a_new_pod_reusing_the_holders_name_is_not_the_holder() {
    // A StatefulSet-style replacement: same name, new UID, waiting at the gate.
    let pods = [Candidate { uid: "other".into(), ..pod("h", 5) }];
    let l = lease(Some("h"), 3);
    let plan = decide(&obs(Some(&l), &pods)).unwrap();
    let released = Some(Release { name: "h".into(), token: 3, reason: ReleaseReason::Gone });
    let next = Some(Grant { uid: "other".into(), ..granted("h", 4).unwrap() });
    assert_eq!(plan.decision, Decision::UpdateLease { holder: next, released, floor: None });
}

#[test]
fn grant_recorded_in_lease_but_pod_still_gated_is_finished() {
    let pods = [pod("h", 1), pod("w", 2)];
    let l = lease(Some("h"), 3);
    let plan = decide(&obs(Some(&l), &pods)).unwrap();
    assert_eq!(plan.decision, Decision::PatchHolder(granted("h", 3).unwrap()));
    assert_eq!(plan.waiters, ["w"]);
}

#[test]
fn holder_deleted_before_start_releases() {
    let pods = [Candidate { deleting: true, ..pod("h", 1) }, pod("w", 2)];
    let l = lease(Some("h"), 3);
    let plan = decide(&obs(Some(&l), &pods)).unwrap();
    let released = Some(Release { name: "h".into(), token: 3, reason: ReleaseReason::DeletedBeforeStart });
    assert_eq!(plan.decision, Decision::UpdateLease { holder: granted("w", 4), released, floor: None });
}

#[test]
fn start_timeout_deletes_the_pending_holder() {
    let pods = [Candidate { phase: Phase::Pending, node_name: None, ..running("h", 1, 3) }];
    let l = lease(Some("h"), 3);
    let o = Observation { holder_pending_for: Some(Duration::from_secs(100)), ..obs(Some(&l), &pods) };
    assert_eq!(decide(&o).unwrap().decision, Decision::Idle { requeue_after: Some(Duration::from_secs(200)) });
    let o = Observation { holder_pending_for: Some(Duration::from_secs(300)), ..o };
    assert_eq!(decide(&o).unwrap().decision, Decision::DeletePod { name: "h".into(), uid: "uid-h".into() });
}

#[test]
fn lost_node_without_waiters_keeps_the_holder() {
    let pods = [running("h", 1, 3)];
    let l = lease(Some("h"), 3);
    let o = Observation { holder_node_lost_for: Some(Duration::from_secs(600)), ..obs(Some(&l), &pods) };
    assert!(matches!(decide(&o).unwrap().decision, Decision::Idle { .. }));
}

#[test]
fn lease_naming_an_intruder_is_repaired_to_the_running_holder() {
    let pods = [running("a", 1, 3), pod("b", 2)];
    let mut l = lease(Some("a"), 3);
    l.holder = Some(Holder { name: "intruder".into(), uid: None, kind: HolderKind::Pod });
    let plan = decide(&obs(Some(&l), &pods)).unwrap();
    assert_eq!(plan.decision, Decision::RepairLease { holder: granted("a", 3).unwrap(), floor: None });
}

#[test]
fn lease_naming_a_waiter_with_the_running_holders_token_is_repaired() {
    let pods = [running("c", 1, 1002), pod("w", 2)];
    let l = lease(Some("w"), 1002);
    let plan = decide(&Observation { ceiling: 2000, ..obs(Some(&l), &pods) }).unwrap();
    assert_eq!(plan.decision, Decision::RepairLease { holder: granted("c", 1002).unwrap(), floor: None });
}

/// A claim's status is a record: a Lease that names the claim with another token (a stale
/// operator's grant, or its own status patch landing late) is kept, and the status is patched from
/// it; the Lease is never moved back to the status's token (model run "handover", depth 14).
#[test]
fn a_claim_status_that_disagrees_with_the_lease_is_patched_from_it() {
    let x = crate::lock::machine::test_claim("x", 1, Some(1));
    let mut l = lease(None, 3);
    l.holder = Some(Holder { name: "x".into(), uid: Some("uid-x".into()), kind: HolderKind::Claim });
    let plan = decide(&obs(Some(&l), &[x])).unwrap();
    assert!(matches!(&plan.decision, Decision::PatchHolder(g) if g.name == "x" && g.token == 3), "{:?}", plan.decision);
}

#[test]
fn edited_lease_token_is_repaired_never_pushed_to_the_pod() {
    let pods = [running("b", 1, 2), pod("w", 2)];
    let l = lease(Some("b"), 5);
    let plan = decide(&obs(Some(&l), &pods)).unwrap();
    assert_eq!(plan.decision, Decision::RepairLease { holder: granted("b", 2).unwrap(), floor: None });
    // Unreadable token: repaired above a fresh reservation.
    let l = LeaseView { trusted: false, ..lease(Some("b"), 0) };
    let o = obs(Some(&l), &pods);
    assert!(matches!(decide(&o).unwrap().decision, Decision::Reserve { .. }));
    let o = Observation { fresh_reservation: Some(1000), ..o };
    assert_eq!(
        decide(&o).unwrap().decision,
        Decision::RepairLease { holder: granted("b", 2).unwrap(), floor: Some(1000) }
    );
}

#[test]
fn new_grant_recorded_in_the_lease_is_finished_even_with_an_older_zombie_running() {
    // After a node-loss takeover: the zombie runs with token 3, the Lease names the new grant 4.
    let pods = [running("zombie", 1, 3), pod("next", 2)];
    let l = lease(Some("next"), 4);
    assert_eq!(decide(&obs(Some(&l), &pods)).unwrap().decision, Decision::PatchHolder(granted("next", 4).unwrap()));
}

/// A pod that runs with a token above the reservation (granted by an earlier lock object with
/// the same name, or a forged annotation) is never ignored, and its token never written above
/// the reservation: the ceiling is raised past it first, then it is adopted as the holder.
#[test]
fn a_running_holder_above_the_ceiling_is_reserved_past_then_adopted() {
    let pods = [running("old", 1, 99_999), pod("w", 2)];
    let o = obs(None, &pods);
    assert_eq!(decide(&o).unwrap().decision, Decision::Reserve { from: 1000, to: 99_999 + 1000 });
    let o = Observation { ceiling: 100_999, fresh_reservation: Some(1000), ..obs(None, &pods) };
    let adopted = granted("old", 99_999);
    assert_eq!(decide(&o).unwrap().decision, Decision::CreateLease { holder: adopted, floor: 1000 });
}

#[test]
fn lost_node_hands_the_lock_over_with_a_higher_token() {
    let pods = [running("h", 1, 3), pod("w", 2)];
    let l = lease(Some("h"), 3);
    let o = Observation { holder_node_lost_for: Some(Duration::from_secs(59)), ..obs(Some(&l), &pods) };
    assert_eq!(decide(&o).unwrap().decision, Decision::Idle { requeue_after: Some(Duration::from_secs(1)) });
    let o = Observation { holder_node_lost_for: Some(Duration::from_secs(60)), ..o };
    let released = Some(Release { name: "h".into(), token: 3, reason: ReleaseReason::NodeLost });
    assert_eq!(decide(&o).unwrap().decision, Decision::UpdateLease { holder: granted("w", 4), released, floor: None });
}

#[test]
fn pods_that_are_bound_terminal_or_deleting_never_wait() {
    let pods = [
        Candidate { gated: false, node_name: Some("n".into()), ..pod("bound", 1) },
        Candidate { phase: Phase::Succeeded, ..pod("done", 2) },
        Candidate { deleting: true, ..pod("deleting", 3) },
        pod("ok", 4),
    ];
    let l = lease(None, 0);
    let plan = decide(&obs(Some(&l), &pods)).unwrap();
    assert_eq!(plan.waiters, ["ok"]);
}

#[test]
fn deleted_lease_is_recreated_above_the_reservation_and_adopts_the_running_holder() {
    let pods = [running("zombie", 1, 2), running("h", 2, 5), pod("w", 3)];
    let o = Observation { ceiling: 1000, ..obs(None, &pods) };
    assert_eq!(decide(&o).unwrap().decision, Decision::Reserve { from: 1000, to: 1001 + fencing::RESERVATION_BLOCK });
    let o = Observation { fresh_reservation: Some(1000), ..o };
    let plan = decide(&o).unwrap();
    assert_eq!(plan.decision, Decision::CreateLease { holder: granted("h", 5), floor: 1000 });
    assert_eq!(plan.waiters, ["w"]);
}

#[test]
fn hand_edited_lease_is_refloored_before_any_grant() {
    let pods = [pod("w", 1)];
    let l = LeaseView { trusted: false, ..lease(None, 0) };
    let o = obs(Some(&l), &pods);
    assert!(matches!(decide(&o).unwrap().decision, Decision::Reserve { from: 1000, .. }));
    let o = Observation { fresh_reservation: Some(1000), ..o };
    assert_eq!(
        decide(&o).unwrap().decision,
        Decision::UpdateLease { holder: granted("w", 1001), released: None, floor: Some(1000) }
    );
}

#[test]
fn lease_entry_without_uid_is_repaired_to_the_running_holder() {
    let pods = [running("h", 1, 3)];
    let mut l = lease(Some("h"), 3);
    l.holder.as_mut().unwrap().uid = None;
    let plan = decide(&obs(Some(&l), &pods)).unwrap();
    assert_eq!(plan.decision, Decision::RepairLease { holder: granted("h", 3).unwrap(), floor: None });
}

#[test]
fn skip_waiters_give_up_while_the_lock_is_held() {
    let pods = [running("h", 1, 3), Candidate { on_busy: BusyPolicy::Skip, ..pod("skipper", 2) }, pod("patient", 3)];
    let l = lease(Some("h"), 3);
    let plan = decide(&obs(Some(&l), &pods)).unwrap();
    assert_eq!(
        plan.decision,
        Decision::RejectWaiters(vec![Reject {
            name: "skipper".into(),
            uid: "uid-skipper".into(),
            resource_version: String::new(),
            reason: RejectReason::LockBusy
        }])
    );
}

/// The rejection carries the resourceVersion the decision saw, as the grant does: a stale view
/// must not reject a waiter that another operator granted meanwhile (model checker, policies
/// run: a max-wait rejection from a lagging cache landed on the just-granted claim).
#[test]
fn a_rejection_is_conditional_on_the_waiter_as_seen() {
    let skipper = Candidate { on_busy: BusyPolicy::Skip, resource_version: "41".into(), ..claim("skipper", 2) };
    let pods = [running("h", 1, 3), skipper];
    let l = lease(Some("h"), 3);
    match decide(&obs(Some(&l), &pods)).unwrap().decision {
        Decision::RejectWaiters(r) => {
            assert_eq!((r[0].uid.as_str(), r[0].resource_version.as_str()), ("uid-skipper", "41"))
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[test]
fn skip_waiter_at_the_head_of_a_free_lock_is_granted() {
    let pods = [Candidate { on_busy: BusyPolicy::Skip, ..pod("skipper", 1) }];
    let l = lease(None, 0);
    let plan = decide(&obs(Some(&l), &pods)).unwrap();
    assert_eq!(plan.decision, Decision::UpdateLease { holder: granted("skipper", 1), released: None, floor: None });
}

#[test]
fn max_wait_gives_up_after_the_limit_and_requeues_until_then() {
    let wait = |secs| Candidate {
        max_wait: Some(Duration::from_secs(60)),
        waiting_for: Some(Duration::from_secs(secs)),
        ..pod("w", 2)
    };
    let l = lease(Some("h"), 3);
    let pods = [running("h", 1, 3), wait(45)];
    assert_eq!(
        decide(&obs(Some(&l), &pods)).unwrap().decision,
        Decision::Idle { requeue_after: Some(Duration::from_secs(15)) }
    );
    let pods = [running("h", 1, 3), wait(60)];
    assert_eq!(
        decide(&obs(Some(&l), &pods)).unwrap().decision,
        Decision::RejectWaiters(vec![Reject {
            name: "w".into(),
            uid: "uid-w".into(),
            resource_version: String::new(),
            reason: RejectReason::LockWaitTimeout
        }])
    );
}

fn claim(name: &str, created: i64) -> Candidate {
    Candidate { kind: HolderKind::Claim, identity: format!("{name}-host"), ..pod(name, created) }
}

#[test]
fn claims_queue_with_pods_and_hold_under_their_identity() {
    let pods = [claim("c", 1), pod("p", 2)];
    let l = lease(None, 0);
    let plan = decide(&obs(Some(&l), &pods)).unwrap();
    let want = Grant {
        kind: HolderKind::Claim,
        name: "c".into(),
        identity: "c-host".into(),
        uid: "uid-c".into(),
        resource_version: String::new(),
        token: 1,
        slot: 0,
    };
    assert_eq!(plan.decision, Decision::UpdateLease { holder: Some(want), released: None, floor: None });
}

#[test]
fn claim_holder_that_stops_renewing_expires_and_the_next_waiter_gets_a_higher_token() {
    let holder = Candidate { gated: false, phase: Phase::Running, token: Some(3), ..claim("c", 1) };
    let pods = [holder, pod("p", 2)];
    let mut l = lease(None, 3);
    l.holder = Some(Holder { name: "c-host".into(), uid: Some("uid-c".into()), kind: HolderKind::Claim });
    let o = Observation { holder_renewed_ago: Some(Duration::from_secs(14)), ..obs(Some(&l), &pods) };
    assert_eq!(decide(&o).unwrap().decision, Decision::Idle { requeue_after: Some(Duration::from_secs(1)) });
    let o = Observation { holder_renewed_ago: Some(Duration::from_secs(15)), ..o };
    let released = Some(Release { name: "c-host".into(), token: 3, reason: ReleaseReason::Expired });
    assert_eq!(decide(&o).unwrap().decision, Decision::UpdateLease { holder: granted("p", 4), released, floor: None });
}

#[test]
fn pod_holders_never_expire_by_time() {
    let pods = [running("h", 1, 3), pod("w", 2)];
    let l = lease(Some("h"), 3);
    let o = Observation { holder_renewed_ago: Some(Duration::from_secs(3600)), ..obs(Some(&l), &pods) };
    assert!(matches!(decide(&o).unwrap().decision, Decision::Idle { .. }));
}

/// A zombie (still running on a lost node, released long ago) is never repaired back into the
/// Lease once its successor is gone; the next waiter gets a token above both.
#[test]
fn a_released_zombie_is_never_written_back_with_its_lower_token() {
    let zombie = Candidate { node_lost: true, ..running("zombie", 1, 3) };
    let pods = [zombie, pod("w", 3)];
    let l = lease(Some("gone"), 4);
    let released = Some(Release { name: "gone".into(), token: 4, reason: ReleaseReason::Gone });
    let d = decide(&obs(Some(&l), &pods)).unwrap().decision;
    assert_eq!(d, Decision::UpdateLease { holder: granted("w", 5), released, floor: None });
}

/// The next token is above every token a candidate in view carries, even when the Lease and
/// the status high-water mark were rolled back.
#[test]
fn the_next_token_is_above_every_token_in_view() {
    let pods = [Candidate { phase: Phase::Succeeded, ..running("done", 1, 7) }, pod("w", 2)];
    let l = lease(None, 2);
    let d = decide(&obs(Some(&l), &pods)).unwrap().decision;
    assert_eq!(d, Decision::UpdateLease { holder: granted("w", 8), released: None, floor: None });
}

/// A gated pod that wants several locks (issue 14), as this lock sees it: `token` is this lock's
/// recorded token, `others` whether every other lock of its set is recorded on the pod.
fn multi(name: &str, created: i64, token: Option<i64>, withdrawn: i64, others: bool) -> Candidate {
    Candidate {
        token,
        multi: Some(MultiLock { withdrawn, others_recorded: others, unservable: false }),
        ..pod(name, created)
    }
}

#[test]
fn a_multi_lock_pod_named_tentatively_records_the_token_and_stays_gated() {
    let l = lease(Some("m"), 4);
    let pods = [multi("m", 1, None, 0, false), pod("late", 2)];
    let plan = decide(&obs(Some(&l), &pods)).unwrap();
    assert_eq!(plan.decision, Decision::RecordTentative(granted("m", 4).unwrap()));
    assert_eq!(plan.holder, granted("m", 4), "the lock is taken: the waiter behind it stays queued");
    // Recorded: nothing to write until the other locks are recorded too.
    let pods = [multi("m", 1, Some(4), 0, false), pod("late", 2)];
    assert!(matches!(decide(&obs(Some(&l), &pods)).unwrap().decision, Decision::Idle { .. }));
}

#[test]
fn a_multi_lock_pod_is_ungated_once_every_other_lock_is_recorded() {
    let l = lease(Some("m"), 4);
    for token in [None, Some(4)] {
        let pods = [multi("m", 1, token, 0, true)];
        assert_eq!(decide(&obs(Some(&l), &pods)).unwrap().decision, Decision::PatchHolder(granted("m", 4).unwrap()));
    }
}

#[test]
fn a_tentative_grant_is_withdrawn_on_the_pod_when_an_older_waiter_queues() {
    let l = lease(Some("m"), 4);
    // "older" was created in the same second, with a name that sorts first.
    let pods = [multi("m", 1, Some(4), 0, false), pod("aa-older", 1)];
    assert_eq!(decide(&obs(Some(&l), &pods)).unwrap().decision, Decision::Withdraw(granted("m", 4).unwrap()));
    // Also when every other lock is recorded: it has not run, and the older waiter goes first.
    let pods = [multi("m", 1, Some(4), 0, true), pod("aa-older", 1)];
    assert_eq!(decide(&obs(Some(&l), &pods)).unwrap().decision, Decision::Withdraw(granted("m", 4).unwrap()));
}

#[test]
fn a_tentative_grant_to_a_pod_whose_set_is_not_served_is_withdrawn_and_not_granted_again() {
    let l = lease(Some("m"), 4);
    let unservable = |token, withdrawn, others| {
        let mut c = multi("m", 1, token, withdrawn, others);
        c.multi.as_mut().unwrap().unservable = true;
        c
    };
    // The head of the queue, alone, even with every other lock recorded: taken back.
    for others in [false, true] {
        let pods = [unservable(Some(4), 0, others), pod("late", 2)];
        assert_eq!(decide(&obs(Some(&l), &pods)).unwrap().decision, Decision::Withdraw(granted("m", 4).unwrap()));
    }
    // Withdrawn: the Lease goes to the next waiter, never back to the pod.
    let pods = [unservable(None, 4, false), pod("late", 2)];
    match decide(&obs(Some(&l), &pods)).unwrap().decision {
        Decision::UpdateLease { holder: Some(g), released: Some(r), .. } => {
            assert_eq!((g.name.as_str(), g.token, r.reason), ("late", 5, ReleaseReason::Withdrawn));
        }
        other => panic!("expected the Lease handed to the next waiter, got {other:?}"),
    }
    let pods = [unservable(None, 4, true)];
    match decide(&obs(Some(&l), &pods)).unwrap().decision {
        Decision::UpdateLease { holder: None, released: Some(r), .. } => assert_eq!(r.reason, ReleaseReason::Withdrawn),
        other => panic!("expected the Lease freed, got {other:?}"),
    }
}

#[test]
fn a_withdrawn_grant_moves_the_lease_to_the_head_with_a_higher_token() {
    let l = lease(Some("m"), 4);
    let pods = [multi("m", 1, None, 4, false), pod("aa-older", 1)];
    match decide(&obs(Some(&l), &pods)).unwrap().decision {
        Decision::UpdateLease { holder: Some(g), released: Some(r), .. } => {
            assert_eq!((g.name.as_str(), g.token), ("aa-older", 5));
            assert_eq!((r.name.as_str(), r.token, r.reason), ("m", 4, ReleaseReason::Withdrawn));
        }
        other => panic!("expected the Lease handed to the head, got {other:?}"),
    }
    // A stale view of a Lease that names the pod at or below its withdrawn token never records it again.
    let pods = [multi("m", 1, None, 4, true)];
    assert!(matches!(
        decide(&obs(Some(&l), &pods)).unwrap().decision,
        Decision::UpdateLease { holder: Some(ref g), released: Some(_), .. } if g.name == "m" && g.token == 5
    ));
}

/// A claim that wants several locks (issue 14), named tentatively by this lock's Lease.
fn multi_claim(token: Option<i64>, others: bool) -> Candidate {
    Candidate { kind: HolderKind::Claim, identity: "s-host".into(), ..multi("s", 1, token, 0, others) }
}

#[test]
fn a_tentative_claim_whose_process_stopped_renewing_is_rejected_before_its_lease_moves() {
    let mut l = lease(None, 4);
    l.holder = Some(Holder { name: "s-host".into(), uid: Some("uid-s".into()), kind: HolderKind::Claim });
    let pods = [multi_claim(Some(4), false), pod("p", 2)];
    // Renewed recently: it keeps the lock reserved while it waits for the rest of its set.
    let o = Observation { holder_renewed_ago: Some(Duration::from_secs(3)), ..obs(Some(&l), &pods) };
    assert!(matches!(decide(&o).unwrap().decision, Decision::Idle { requeue_after: Some(_) }));
    // Overdue: the claim as a whole gives up first (a compare-and-swap on the claim), and the
    // Lease is left as it is by this step.
    let o = Observation { holder_renewed_ago: Some(Duration::from_secs(15)), ..o };
    let want = Reject {
        name: "s".into(),
        uid: "uid-s".into(),
        resource_version: String::new(),
        reason: RejectReason::LeaseExpired,
    };
    assert_eq!(decide(&o).unwrap().decision, Decision::RejectWaiters(vec![want]));
    // Even with every other lock recorded (the commit would be next): rejected, never committed.
    let pods = [multi_claim(Some(4), true), pod("p", 2)];
    let o = Observation { pods: &pods, ..o };
    assert!(matches!(decide(&o).unwrap().decision, Decision::RejectWaiters(_)));
    // Once it is rejected (terminal), the overdue Lease moves to the next waiter, with a higher token.
    let rejected = Candidate { phase: Phase::Failed, ..multi_claim(Some(4), false) };
    let pods = [rejected, pod("p", 2)];
    let o = Observation { pods: &pods, ..o };
    let released = Some(Release { name: "s-host".into(), token: 4, reason: ReleaseReason::Expired });
    assert_eq!(decide(&o).unwrap().decision, Decision::UpdateLease { holder: granted("p", 5), released, floor: None });
}

/// Found by the model checker (run "unseen-old-pod"): a claim's grant may be known only to the
/// deleted Lease and to its process (its status is written later). The recreated Lease is held
/// by the recovery holder, which nobody renews, for a lease duration; then the oldest waiter
/// gets a token above the floor. A brand-new lock (floor 0) and a Lease whose waiters are all
/// pods (a pod runs only once ungated, which is its record) grant at once.
#[test]
fn a_recreated_lease_is_held_for_a_lease_duration_while_a_claim_may_hold_unrecorded() {
    let x = crate::lock::machine::test_claim("x", 5, None);
    let pods = [pod("a", 1), x];
    let o = Observation { fresh_reservation: Some(1000), ..obs(None, &pods) };
    let recovery = Grant {
        kind: HolderKind::Claim,
        name: RECOVERY_HOLDER.into(),
        identity: RECOVERY_HOLDER.into(),
        uid: String::new(),
        resource_version: String::new(),
        token: 1000,
        slot: 0,
    };
    assert_eq!(decide(&o).unwrap().decision, Decision::CreateLease { holder: Some(recovery), floor: 1000 });
    // Brand new (floor 0), or only pods wait: created free, then granted.
    let o = Observation { ceiling: 1, fresh_reservation: Some(0), ..obs(None, &pods) };
    assert_eq!(decide(&o).unwrap().decision, Decision::CreateLease { holder: None, floor: 0 });
    let only_pods = [pod("a", 1)];
    let o = Observation { fresh_reservation: Some(1000), ..obs(None, &only_pods) };
    assert_eq!(decide(&o).unwrap().decision, Decision::CreateLease { holder: None, floor: 1000 });
    // The recreated Lease: held until it expires, then a goes first, above the floor.
    let held = LeaseView {
        holder: Some(Holder { name: RECOVERY_HOLDER.into(), uid: Some(String::new()), kind: HolderKind::Claim }),
        token: 1000,
        floor: 1000,
        trusted: true,
        next: None,
        released: vec![],
        ceiling: None,
        lease_duration: None,
        next_lease_duration: None,
    };
    let o = Observation { ceiling: 2000, holder_renewed_ago: Some(Duration::from_secs(14)), ..obs(Some(&held), &pods) };
    let plan = decide(&o).unwrap();
    assert!(matches!(plan.decision, Decision::Idle { requeue_after: Some(d) } if d == Duration::from_secs(1)));
    assert_eq!(plan.waiters, vec!["a".to_string(), "x".to_string()]);
    let o = Observation { holder_renewed_ago: Some(Duration::from_secs(15)), ..o };
    match decide(&o).unwrap().decision {
        Decision::UpdateLease { holder: Some(g), released: Some(r), .. } => {
            assert_eq!((g.name.as_str(), g.token, r.reason), ("a", 1001, ReleaseReason::Expired));
        }
        other => panic!("expected a grant to a after the recovery holder expired, got {other:?}"),
    }
}

/// A request UID reads back as the claim's UID and the request; a pod's or one-shot claim's UID
/// (no `/`, or an unreadable request) is taken whole.
#[test]
fn request_uids_read_back_as_claim_uid_and_request() {
    assert_eq!(request_uid("6f1c-9a", 3), "6f1c-9a/3");
    assert_eq!(split_request_uid("6f1c-9a/3"), ("6f1c-9a", Some(3)));
    assert_eq!(split_request_uid("6f1c-9a"), ("6f1c-9a", None));
    for odd in ["a/0", "a/-1", "a/x", "a/"] {
        assert_eq!(split_request_uid(odd), (odd, None), "{odd}");
    }
}

/// An operator's Lease write keeps a released request while its claim may still be at it: it
/// drops the entry once the claim is seen at a later request, keeps entries of claims it does
/// not see up to the bound, and drops those (only those) above it.
#[test]
fn keep_released_drops_requests_that_can_no_longer_matter() {
    let at = |uid: &str, r: i64| Candidate { uid: request_uid(uid, r), ..claim(uid, 1) };
    let list = |v: &[&str]| v.iter().map(|e| e.to_string()).collect::<Vec<_>>();
    let released = list(&["a/1", "b/4", "gone/2"]);
    // a moved on to request 2: a/1 no longer matters; b is still at 4; "gone" is not seen.
    assert_eq!(keep_released(&released, &[at("a", 2), at("b", 4)]), list(&["b/4", "gone/2"]));
    // A cache that still shows a at request 1 keeps a/1.
    assert_eq!(keep_released(&released, &[at("a", 1), at("b", 4)]), released);
    // Entries that are no request UID are dropped.
    assert_eq!(keep_released(&list(&["junk", "a/1"]), &[at("a", 1)]), list(&["a/1"]));
    // Above RELEASED_KEPT_UNSEEN entries of unseen claims, those go; a seen claim's stays.
    let mut many: Vec<String> = (0..=RELEASED_KEPT_UNSEEN).map(|i| format!("u{i}/1")).collect();
    many.push("a/1".into());
    assert_eq!(keep_released(&many, &[at("a", 1)]), list(&["a/1"]));
    many.remove(0);
    assert_eq!(keep_released(&many, &[at("a", 1)]).len(), RELEASED_KEPT_UNSEEN + 1);
}

/// A Lease held by standing claim request `x/1`, ceiling 10, token 4.
fn claim_held() -> LeaseView {
    LeaseView {
        holder: Some(Holder { name: "x".into(), uid: Some(request_uid("x", 1)), kind: HolderKind::Claim }),
        ceiling: Some(10),
        ..lease(None, 4)
    }
}

#[test]
fn the_lease_names_a_standing_claims_request_by_its_holder_hint_or_released_list() {
    let mut l = claim_held();
    l.next = Some(Next { identity: "y".into(), uid: request_uid("y", 3), token: 5 });
    l.released = vec![request_uid("y", 2), request_uid("z", 7), "not-a-request".into()];
    assert_eq!(lease_request(&l, "x", "x"), Some(1));
    assert_eq!(lease_request(&l, "y", "y"), Some(3));
    assert_eq!(lease_request(&l, "z", "z"), Some(7));
    assert_eq!(lease_request(&l, "w", "w"), None);
    // A holder or hint under another identity is not the claim's (a forged arrival).
    assert_eq!(lease_request(&l, "x", "mallory"), None);
    assert_eq!(lease_request(&l, "y", "mallory"), Some(2));
    // The highest of spec, status and Lease.
    assert_eq!(current_request(2, Some(1), Some(&l), "y", "y"), 3);
    assert_eq!(current_request(4, Some(1), Some(&l), "y", "y"), 4);
    assert_eq!(current_request(2, Some(5), None, "y", "y"), 5);
}

#[test]
fn a_waiter_arrives_by_the_lease_as_hint_or_taker_only_below_the_ceiling() {
    let me = request_uid("y", 2);
    let hint = Next { identity: "y".into(), uid: me.clone(), token: 5 };
    assert_eq!(lease_arrival(&claim_held(), "y", &me), Some(LeaseArrival::Hint(hint)));
    // Free: take it, above the token and the floor.
    let free = LeaseView { holder: None, floor: 6, ..claim_held() };
    assert_eq!(lease_arrival(&free, "y", &me), Some(LeaseArrival::Take(7)));
    // Not: a hint is there, no ceiling or the token above it, untrusted, a pod or the recovery
    // holder holds, or it holds itself.
    let taken = LeaseView { next: Some(Next { identity: "z".into(), uid: "z/1".into(), token: 5 }), ..claim_held() };
    assert_eq!(lease_arrival(&taken, "y", &me), None);
    assert_eq!(lease_arrival(&LeaseView { ceiling: None, ..claim_held() }, "y", &me), None);
    assert_eq!(lease_arrival(&LeaseView { ceiling: Some(4), ..claim_held() }, "y", &me), None);
    assert_eq!(lease_arrival(&LeaseView { floor: 10, ..claim_held() }, "y", &me), None);
    assert_eq!(lease_arrival(&LeaseView { trusted: false, ..claim_held() }, "y", &me), None);
    assert_eq!(lease_arrival(&LeaseView { ceiling: Some(10), ..lease(Some("pod"), 4) }, "y", &me), None);
    let recovery = Holder { name: RECOVERY_HOLDER.into(), uid: Some(String::new()), kind: HolderKind::Claim };
    assert_eq!(lease_arrival(&LeaseView { holder: Some(recovery), ..claim_held() }, "y", &me), None);
    assert_eq!(lease_arrival(&claim_held(), "x", &request_uid("x", 1)), None);
}

/// Found by the chaos run of 2026-12-06: a holder granted (ungated) but not scheduled yet, or a
/// multi-lock pod's tentative grant (gated, its token recorded), is adopted by the recreated
/// Lease; a token taken back from a multi-lock pod is not.
#[test]
fn deleted_lease_is_recreated_for_an_unscheduled_holder_or_a_tentative_multi_lock_grant() {
    let unscheduled = Candidate { gated: false, token: Some(5), ..pod("h", 1) };
    let claim = Candidate { kind: HolderKind::Claim, ..pod("c", 2) };
    let pods = [unscheduled, claim.clone()];
    let o = Observation { ceiling: 2000, fresh_reservation: Some(1000), ..obs(None, &pods) };
    assert_eq!(decide(&o).unwrap().decision, Decision::CreateLease { holder: granted("h", 5), floor: 1000 });

    let multi = |withdrawn| Some(MultiLock { withdrawn, others_recorded: false, unservable: false });
    let tentative = Candidate { token: Some(7), multi: multi(0), ..pod("m", 1) };
    let pods = [tentative.clone(), claim.clone()];
    let o = Observation { ceiling: 2000, fresh_reservation: Some(1000), ..obs(None, &pods) };
    assert_eq!(decide(&o).unwrap().decision, Decision::CreateLease { holder: granted("m", 7), floor: 1000 });

    // Taken back (withdrawn at 7): not a holder; the waiting claim gets the recovery holder.
    let taken_back = Candidate { multi: multi(7), ..tentative };
    let pods = [taken_back, claim];
    let o = Observation { ceiling: 2000, fresh_reservation: Some(1000), ..obs(None, &pods) };
    let Decision::CreateLease { holder: Some(g), .. } = decide(&o).unwrap().decision else { panic!("a Lease") };
    assert_eq!(g.name, RECOVERY_HOLDER);
}
