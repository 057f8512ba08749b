//! Model checker over all-or-nothing multi-lock grants (issue 14, `docs/multi-lock.md`): the
//! real [`leasehold::lock::machine::step`], run per lock by operator processes against a
//! modelled API server that holds two locks, and pods that want one or both, explored over every
//! interleaving by stateright (breadth first, to a bound).
//!
//! The single-lock protocol (claims, renewals, node loss, start timeouts, third-party edits, lock
//! recreation, semaphores) is `tests/model.rs`'s. This model adds what only several locks have:
//! a pod named by some of its locks' Leases and not the others, the pod as the commit point of
//! the all-or-nothing grant ([`leasehold::lock::grant::MultiLock`]), and the take-back of a
//! tentative grant (wound-wait) when an older waiter queues.
//!
//! What is modelled (and how each part maps to Kubernetes):
//! - **API server**: locks `a` and `b` (status `tokenCeiling`), one Lease each, pods; every
//!   object has a resourceVersion. The reservation and every Lease update are compare-and-swaps
//!   on the resourceVersion the writer read (409 otherwise); a Lease create fails if one exists;
//!   every pod patch (record a token, withdraw one, ungate) carries the pod's UID and
//!   resourceVersion as preconditions, as the controller's patches do.
//! - **Pods**: each wants `a`, `b` or both (`leasehold.dev/locks`), created at a given second;
//!   a pod may be created late (its operator sees it whenever its cache catches up), so a pod
//!   created in the same second with a name that sorts first can arrive after another was
//!   granted. Ungated pods start and succeed; a gated pod may be deleted (gone at once). Per lock
//!   the pod carries this lock's token annotation and its withdrawn token.
//! - **Operators** (1 or 2): a cache per kind (Leases, locks, pods) that lags independently
//!   (each refreshed to the API server at any time, in any order), a reconcile per lock that steps on its cache
//!   plus the answers of its own writes (one write per action, so another writer, a cache
//!   refresh or a restart can come between any two), and a restart that drops caches and clocks.
//!
//! - **A set the operator does not serve yet**: one pod's set may also hold a lock `x` that does
//!   not exist at first (created by an action; each operator sees it when its lock cache catches
//!   up). While an operator's lock cache lacks `x`, it leaves the pod out of the queues of `a` and
//!   `b` unless that lock granted it (gated, no token of the lock recorded, the cached Lease does
//!   not name it), as `controller::distributed_lock::leave_out_unservable_sets` does. `x` itself is
//!   abstract: only this pod wants it, so once it exists its grant is recorded on the pod at any
//!   time (one pod patch), never withdrawn.
//!
//! Not modelled here: `highestToken` (never written: the step's lower bound is the Lease's token
//! and the candidates' tokens alone, a weaker view), timeouts (`tests/model.rs`'s), semaphores as
//! members of a lock set (the controller refuses them).
//!
//! - **A claim with a lock set** ([`Config::claim`]): one entry may be a `DistributedLockClaim`
//!   instead of a pod, its status the commit point (`status.tokens`, `status.withdrawn`, phase
//!   Granted, Rejected), patched with the same preconditions; its process ([`Proc`]) acts only once
//!   it sees the commit and each Lease still names the claim, renews while alive, frees its Leases
//!   one by one and deletes the claim (also once it sees the claim rejected), and may crash or
//!   pause while it waits. Time passes (a lease duration, [`Action::Tick`]) only while the process
//!   renews nothing, so a live claim is never overdue; a process paused past its renew deadline
//!   after the commit is `tests/model.rs`'s case (per lock it is a single claim).
//!
//! Invariants:
//! - **I1** per lock, at most one pod whose work runs (ungated, not finished);
//! - **I2** per lock, tokens named in its Lease strictly increase (a tentative grant counts:
//!   its token is never reused);
//! - **I5** a running pod is named, for every lock of its set, by that lock's Lease with the token
//!   its annotation carries (no pod runs on a partial or stale set);
//! - **I6** (deadlock freedom and no lost waiter, in a settled form like `tests/model.rs`'s I4)
//!   in every reachable settled state (caches equal the API server, no reconcile half way, every
//!   operator's step on every lock idle), every waiting pod has a lock of its set that a running
//!   pod holds. A settled state in which a waiter waits only for tentative grants to other
//!   waiters (or for nothing) is a deadlock or a lost waiter.
//!
//! Each run also asserts that its bound reaches a multi-lock pod running and the events it is for
//! (a take-back). Each planted bug must produce its counterexample.

mod checking;

use std::fmt::Write as _;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use leasehold::lock::grant::{
    Candidate, Decision, Grant, Holder, HolderKind, LeaseView, MultiLock, Phase, RejectReason, Settings,
};
use leasehold::lock::machine::{self, Clocks, Snapshot};
use leasehold::lock::policy::BusyPolicy;
use stateright::{Checker, Model, Property};

const LOCKS: usize = 2;
const POD_NAMES: [&str; 3] = ["pod-a", "pod-b", "pod-c"];
const I1: &str = "I1 per lock at most one pod whose work runs";
const I2: &str = "I2 per lock the tokens its Lease names strictly increase";
const I5: &str = "I5 a running pod is named by every lock of its set with the token it carries";
const I6: &str = "I6 in a settled state every waiter waits for a running holder (no deadlock, no lost waiter)";
const BOTH_RUN: &str = "a pod holding both locks runs";
const TAKEN_BACK: &str = "a tentative grant is taken back";
const ALL_RAN: &str = "every pod ran, one after another";
const CLAIM_RAN: &str = "a claim's process acts with every lock of its set";
const CLAIM_REJECTED_MOVED: &str = "a crashed claim's tentative grant is rejected and a pod runs on that lock";

/// A fault planted in the operator, to prove the checker can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Bug {
    /// The pod is ungated by the first lock that names it (the others are taken as recorded).
    UngateOnFirstLease,
    /// A tentative grant is never taken back (`Withdraw` is dropped).
    NoTakeBack,
    /// The take-back moves the Lease first, without recording the withdrawal on the pod: an
    /// operator with a stale Lease cache records the old grant on the pod afterwards.
    WithdrawWithoutPodWrite,
    /// Lock `b` orders its queue by its own key (names reversed), not the global one.
    PerLockQueueOrder,
    /// A lock keeps its tentative grant to a pod whose set is no longer served (`x` deleted):
    /// no [`MultiLock::unservable`], so nothing takes the grant back while the pod is the head
    /// of the lock's queue, and the waiters behind it wait for a pod that cannot run.
    KeepReservedForUnserved,
    /// The claim's process acts once every lock's Lease names its claim (tentative grants), not
    /// on the commit (`status.phase: Granted`).
    ActOnLeases,
    /// A tentative grant to a claim whose renewal is overdue is freed at once, without rejecting
    /// the claim first: its record in the claim's status stays, and a process that resumes can
    /// be committed on it.
    ExpireWithoutReject,
    /// A gated pod whose set is not served is left out of a lock's queue even when that lock's
    /// Lease names it (nothing recorded on the pod yet): the Lease is freed as if the pod were
    /// gone, while another operator's reconcile, on a view in which the Lease names it, still
    /// records the grant and ungates the pod.
    LeaveOutNamed,
}

#[derive(Clone, Debug)]
struct Config {
    /// Per pod: the locks it wants (bit i: lock i), its creationTimestamp (s) and whether it
    /// exists from the start (else it is created by an action, at most once).
    pods: &'static [(u8, i64, bool)],
    operators: usize,
    restarts: u8,
    /// Gated pods may be deleted (each at most once).
    deletes: bool,
    /// The pod whose set also holds the lock `x`, which does not exist at first.
    unservable: Option<usize>,
    /// `x` exists at first instead, and may be deleted (at most once; created again by
    /// [`Action::CreateX`]).
    delete_x: bool,
    /// The entry of [`Config::pods`] that is a `DistributedLockClaim` with a lock set instead of
    /// a pod (its process: [`Proc`]); it never crashes unless `crash` is set.
    claim: Option<usize>,
    /// The claim's process may crash (once), after which up to [`TICKS`] lease durations pass.
    crash: bool,
    /// A third party may delete one lock's Lease, once ([`Action::LeaseDeleted`]).
    lease_delete: bool,
    bug: Option<Bug>,
}

/// Runs with a claim whose process may crash: at most this many [`Action::Tick`]s afterwards.
const TICKS: u8 = 1;

/// Where the process of a claim with a lock set stands (`holder_set::SetTicket::wait` and
/// `SetGuard`): it acts only once it has seen its claim committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Proc {
    /// Waits for the commit, renewing every Lease that names the claim.
    Waiting,
    /// Saw the commit: its work runs (on every lock of its set).
    Acting,
    /// Stopped its work, or saw its claim rejected (it never acts then); frees its Leases one by
    /// one, then deletes the claim.
    Releasing,
    /// Claim deleted.
    Done,
    /// Crashed (or stopped renewing for good): never acts or renews again.
    Crashed,
    /// Paused while it waits (SIGSTOP, a long GC): renews nothing until it resumes.
    Paused,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct LeaseObj {
    rv: u16,
    /// The pod it names (index, UID).
    holder: Option<(usize, u8)>,
    token: i64,
    /// `leasehold.dev/token-floor` (set when the Lease is created).
    floor: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct LockObj {
    rv: u16,
    ceiling: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum PodPhase {
    Pending,
    Running,
    Succeeded,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PodObj {
    rv: u16,
    uid: u8,
    gated: bool,
    phase: PodPhase,
    /// Per lock: its `<lock>.locks.leasehold.dev/fencing-token` annotation.
    tokens: [Option<i64>; LOCKS],
    /// Per lock: its `<lock>.locks.leasehold.dev/withdrawn` annotation (0: none).
    withdrawn: [i64; LOCKS],
    /// `x.locks.leasehold.dev/fencing-token` is recorded (only for [`Config::unservable`]'s pod).
    x_token: bool,
    /// The claim's `status.phase: Rejected` (only for [`Config::claim`]).
    rejected: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct View {
    leases: [Option<LeaseObj>; LOCKS],
    locks: [LockObj; LOCKS],
    /// The lock `x` of [`Config::unservable`]'s set exists (part of the lock cache).
    x_exists: bool,
    pods: Vec<Option<PodObj>>,
}

/// One reconcile of one lock in progress: the view it started from plus its own writes'
/// answers, and the reservation it made.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Session {
    view: View,
    fresh: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Operator {
    cache: View,
    sessions: [Option<Session>; LOCKS],
    clocks: [Clocks; LOCKS],
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct World {
    next_rv: u16,
    api: View,
    ops: Vec<Operator>,
    /// Per lock: the last (pod, token) a Lease write named.
    named: [Option<(usize, i64)>; LOCKS],
    /// Pods created (bit i), deleted (bit i).
    created: u8,
    deleted: u8,
    restarts: u8,
    /// `x` was deleted (once at most).
    x_deleted: bool,
    /// The claim's process ([`Config::claim`]).
    proc: Proc,
    /// Whole lease durations that passed (only after the claim's process crashed).
    ticks: u8,
    /// A Lease was deleted ([`Action::LeaseDeleted`], once at most).
    lease_deleted: bool,
    /// Events the bound must reach: bit 0 a take-back, bit 1 a multi-lock pod ungated.
    events: u8,
    broken: Option<&'static str>,
}

/// A kind the operator watches: each kind's cache lags on its own (its own watch), and catches
/// up to the API server at once (a watch delivers a kind's events in order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Leases,
    Locks,
    Pods,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Action {
    /// Operator n steps lock l.
    Step(usize, usize),
    /// Operator n's cache of one kind catches up.
    Sync(usize, Kind),
    Restart(usize),
    Created(usize),
    Starts(usize),
    Succeeds(usize),
    Deleted(usize),
    /// The missing lock `x` is created.
    CreateX,
    /// The lock `x` is deleted ([`Config::delete_x`]).
    DeleteX,
    /// `x`'s grant is recorded on the pod that wants it (it exists, the pod waits).
    RecordX(usize),
    /// The claim's process sees its claim committed and starts its work.
    SeesCommit,
    /// The claim's process sees its claim rejected and gives up.
    SeesRejected,
    /// The claim's process finishes its work and starts releasing.
    Finish,
    /// The claim's process frees lock l's Lease (owner-verified compare-and-swap).
    Release(usize),
    /// The claim's process deletes its claim (every Lease freed).
    DeleteClaim,
    /// The claim's process crashes.
    Crash,
    /// The claim's process is paused while it waits, or resumes.
    Pause,
    Resume,
    /// A lease duration passes (the crashed process's grants become overdue).
    Tick,
    /// A third party deletes lock l's Lease ([`Config::lease_delete`]): the operator recreates it
    /// above a fresh reservation, adopting the pod that holds (found by the chaos run,
    /// 2026-12-06: a multi-lock pod running on a grant the recreated Lease did not name).
    LeaseDeleted(usize),
}

const TAKE_BACK: u8 = 1;
const MULTI_RAN: u8 = 2;
const CLAIM_ACTED: u8 = 4;
const CLAIM_REJECTED: u8 = 8;

struct MultiModel {
    cfg: Config,
}

fn wants(cfg: &Config, i: usize, l: usize) -> bool {
    cfg.pods[i].0 & (1 << l) != 0
}

fn is_multi(cfg: &Config, i: usize) -> bool {
    cfg.pods[i].0.count_ones() > 1 || cfg.unservable == Some(i)
}

/// What the controller's conversion functions make of the modelled objects for lock `l`.
fn snapshot(view: &View, l: usize, fresh: Option<i64>, cfg: &Config, renewing: bool, ticks: u8) -> Snapshot {
    let ts = |s: i64| Timestamp::from_second(1_700_000_000 + s).unwrap();
    let mut candidates = vec![];
    for (i, p) in view.pods.iter().enumerate() {
        let Some(p) = p.as_ref().filter(|_| wants(cfg, i, l)) else { continue };
        let wants_x = cfg.unservable == Some(i);
        // The controller's leave-out rule for a set it does not serve (x missing from the lock
        // cache): only a pod this lock has not granted (the planted bug: also one its Lease
        // names, with nothing recorded on the pod yet).
        let named = view.leases[l].as_ref().is_some_and(|x| x.holder.is_some_and(|(h, uid)| h == i && uid == p.uid));
        let not_granted = p.gated && p.tokens[l].is_none() && (!named || cfg.bug == Some(Bug::LeaveOutNamed));
        if wants_x && !view.x_exists && not_granted {
            continue;
        }
        let others_recorded = (0..LOCKS).filter(|o| *o != l && wants(cfg, i, *o)).all(|o| p.tokens[o].is_some())
            && (!wants_x || p.x_token);
        // A pod this lock granted stays while its set is not served, marked so (the planted bug
        // leaves the mark off).
        let unservable = wants_x && !view.x_exists && cfg.bug != Some(Bug::KeepReservedForUnserved);
        let multi = is_multi(cfg, i).then(|| MultiLock {
            withdrawn: p.withdrawn[l],
            others_recorded: others_recorded || cfg.bug == Some(Bug::UngateOnFirstLease),
            unservable,
        });
        // The planted per-lock order: lock b sorts names backwards (same second).
        let name = if cfg.bug == Some(Bug::PerLockQueueOrder) && l == 1 {
            POD_NAMES[POD_NAMES.len() - 1 - i]
        } else {
            POD_NAMES[i]
        };
        let is_claim = cfg.claim == Some(i);
        candidates.push(Candidate {
            kind: if is_claim { HolderKind::Claim } else { HolderKind::Pod },
            name: name.into(),
            identity: POD_NAMES[i].into(),
            uid: uid_of(i, p.uid),
            resource_version: p.rv.to_string(),
            created: ts(cfg.pods[i].1),
            gated: p.gated,
            node_name: (!p.gated && !is_claim).then(|| "node-1".to_string()),
            node_lost: false,
            // `candidate_of_claim`: Rejected is Failed, committed is Running.
            phase: match p.phase {
                _ if p.rejected => Phase::Failed,
                _ if is_claim && !p.gated => Phase::Running,
                PodPhase::Pending => Phase::Pending,
                PodPhase::Running => Phase::Running,
                PodPhase::Succeeded => Phase::Succeeded,
            },
            deleting: false,
            token: p.tokens[l],
            on_busy: BusyPolicy::Wait,
            max_wait: None,
            waiting_for: None,
            slot: 0,
            multi,
        });
    }
    let lease = view.leases[l].as_ref().map(|x| LeaseView {
        holder: x.holder.map(|(i, uid)| Holder {
            name: POD_NAMES[i].into(),
            uid: Some(uid_of(i, uid)),
            kind: if cfg.claim == Some(i) { HolderKind::Claim } else { HolderKind::Pod },
        }),
        token: x.token,
        floor: x.floor,
        trusted: true,
        next: None,
        released: vec![],
        ceiling: None,
        lease_duration: None,
        next_lease_duration: None,
    });
    Snapshot {
        settings: Settings {
            start_timeout: Duration::from_secs(10_000),
            node_loss_timeout: Duration::from_secs(10_000),
            lease_duration: Duration::from_secs(15),
            // Claims with a lock set record at once whatever this says; the real operator's.
            claim_record_delay: leasehold::controller::CLAIM_RECORD_DELAY,
        },
        // A live claim process renews every Lease that names its claim, and its renewals are
        // seen: the marker changes with every tick (so `renewed_ago` stays 0); a crashed one's
        // stays as it was.
        renew_marker: Some(if renewing { format!("t{ticks}") } else { "crashed".into() }),
        lease,
        extra_slots: vec![],
        max_holders: None,
        candidates,
        ceiling: view.locks[l].ceiling,
        slot_tokens: vec![],
        highest_token: 0,
        fresh_reservation: fresh,
    }
}

fn uid_of(i: usize, uid: u8) -> String {
    format!("{}-{uid}", POD_NAMES[i])
}

fn pod_of(name: &str) -> usize {
    POD_NAMES.iter().position(|n| *n == name).unwrap()
}

impl World {
    fn rv(&mut self) -> u16 {
        self.next_rv += 1;
        self.next_rv
    }

    /// Pods whose work runs, and the claim while its process acts.
    fn running<'a>(&'a self, cfg: &'a Config) -> impl Iterator<Item = (usize, &'a PodObj)> + 'a {
        self.api.pods.iter().enumerate().filter_map(|(i, p)| p.as_ref().map(|p| (i, p))).filter(move |(i, p)| {
            if cfg.claim == Some(*i) { self.proc == Proc::Acting } else { !p.gated && p.phase != PodPhase::Succeeded }
        })
    }

    /// Operator `n`'s next decision on lock `l`, with a planted bug applied.
    fn decide(&self, n: usize, l: usize, cfg: &Config) -> (Session, machine::Step) {
        let session =
            self.ops[n].sessions[l].clone().unwrap_or(Session { view: self.ops[n].cache.clone(), fresh: None });
        let renewing = !matches!(self.proc, Proc::Crashed | Proc::Paused);
        let snap = snapshot(&session.view, l, session.fresh, cfg, renewing, self.ticks);
        let now = Duration::from_secs(20 * u64::from(self.ticks));
        let mut step = machine::step(&snap, now, &self.ops[n].clocks[l]).expect("tokens fit");
        if cfg.bug == Some(Bug::NoTakeBack) && matches!(step.plan.decision, Decision::Withdraw(_)) {
            step.plan.decision = Decision::Idle { requeue_after: None };
        }
        (session, step)
    }

    /// I2: a Lease write that names a pod names a token above every earlier one of this lock,
    /// or repeats the last grant (a repair writes the same holder and token again).
    fn name_in_lease(&mut self, l: usize, g: Option<&Grant>) {
        let Some(g) = g else { return };
        let named = (pod_of(&g.identity), g.token);
        match self.named[l] {
            Some(last) if last == named => return,
            Some(last) if g.token <= last.1 => {
                self.broken.get_or_insert("I2: a Lease named a token not above an earlier one");
            }
            _ => {}
        }
        self.named[l] = Some(named);
    }

    /// A pod patch with UID and resourceVersion preconditions: `f` changes the pod.
    fn patch_pod(&mut self, view: &mut View, g: &Grant, f: impl FnOnce(&mut PodObj)) -> bool {
        let i = pod_of(&g.identity);
        let rv = self.rv();
        match (self.api.pods[i].as_mut(), view.pods[i].as_ref()) {
            (Some(p), Some(seen)) if uid_of(i, p.uid) == g.uid && p.rv == seen.rv => {
                f(p);
                p.rv = rv;
                view.pods[i] = Some(p.clone());
                true
            }
            _ => false,
        }
    }

    fn cas_lease(&mut self, l: usize, view: &mut View, holder: Option<&Grant>) -> bool {
        let rv = self.rv();
        let (Some(api), Some(seen)) = (self.api.leases[l].as_ref(), view.leases[l].as_ref()) else { return false };
        if api.rv != seen.rv {
            return false;
        }
        let token = holder.map_or(api.token, |g| g.token);
        let holder_of = holder.map(|g| (pod_of(&g.identity), self.uid_in(&g.uid)));
        let lease = LeaseObj { rv, holder: holder_of, token, floor: api.floor };
        self.name_in_lease(l, holder);
        self.api.leases[l] = Some(lease.clone());
        view.leases[l] = Some(lease);
        true
    }

    fn uid_in(&self, uid: &str) -> u8 {
        uid.rsplit('-').next().unwrap().parse().unwrap()
    }

    /// One step of operator `n` on lock `l`: decide on its session view, apply the one write.
    fn step(&mut self, n: usize, l: usize, cfg: &Config) {
        let (session, step) = self.decide(n, l, cfg);
        self.ops[n].clocks[l] = step.clocks;
        let mut view = session.view;
        let mut fresh = None;
        let ok = match step.plan.decision {
            Decision::Reserve { from, to } => {
                let seen = view.locks[l].rv;
                if self.api.locks[l].rv == seen {
                    let rv = self.rv();
                    self.api.locks[l] = LockObj { rv, ceiling: to };
                    view.locks[l] = self.api.locks[l].clone();
                    fresh = Some(from);
                    true
                } else {
                    false
                }
            }
            Decision::CreateLease { holder, floor } => {
                if self.api.leases[l].is_none() {
                    let rv = self.rv();
                    let token = holder.as_ref().map_or(floor, |g| g.token);
                    let h = holder.as_ref().map(|g| (pod_of(&g.identity), self.uid_in(&g.uid)));
                    self.name_in_lease(l, holder.as_ref());
                    self.api.leases[l] = Some(LeaseObj { rv, holder: h, token, floor });
                    view.leases[l] = self.api.leases[l].clone();
                    true
                } else {
                    false
                }
            }
            Decision::UpdateLease { holder, .. } => self.cas_lease(l, &mut view, holder.as_ref()),
            Decision::RepairLease { holder, .. } => self.cas_lease(l, &mut view, Some(&holder)),
            Decision::PatchHolder(g) => {
                let multi = is_multi(cfg, pod_of(&g.identity));
                let ok = self.patch_pod(&mut view, &g, |p| {
                    p.tokens[l] = Some(g.token);
                    p.gated = false;
                });
                if ok && multi {
                    self.events |= MULTI_RAN;
                }
                ok
            }
            Decision::RecordTentative(g) => self.patch_pod(&mut view, &g, |p| p.tokens[l] = Some(g.token)),
            Decision::Withdraw(_) if cfg.bug == Some(Bug::WithdrawWithoutPodWrite) => {
                // The planted bug: straight to the Lease, nothing recorded on the pod (the
                // next grant goes to whoever is head at the next step).
                self.events |= TAKE_BACK;
                self.cas_lease(l, &mut view, None)
            }
            Decision::Withdraw(g) => {
                let ok = self.patch_pod(&mut view, &g, |p| {
                    p.tokens[l] = None;
                    p.withdrawn[l] = p.withdrawn[l].max(g.token);
                });
                if ok {
                    self.events |= TAKE_BACK;
                }
                ok
            }
            Decision::RejectWaiters(rs)
                if cfg.bug == Some(Bug::ExpireWithoutReject)
                    && rs.iter().all(|r| r.reason == RejectReason::LeaseExpired) =>
            {
                self.cas_lease(l, &mut view, None)
            }
            Decision::RejectWaiters(rs)
                if rs.len() == 1
                    && rs[0].reason == RejectReason::LeaseExpired
                    && cfg.claim == Some(pod_of(&rs[0].name)) =>
            {
                let g = Grant {
                    kind: HolderKind::Claim,
                    name: rs[0].name.clone(),
                    identity: rs[0].name.clone(),
                    uid: rs[0].uid.clone(),
                    resource_version: rs[0].resource_version.clone(),
                    token: 0,
                    slot: 0,
                };
                let ok = self.patch_pod(&mut view, &g, |p| p.rejected = true);
                if ok {
                    self.events |= CLAIM_REJECTED;
                }
                ok
            }
            Decision::DeletePod { .. } | Decision::RejectWaiters(_) => {
                self.broken.get_or_insert("no timeout or busy policy is configured: unexpected decision");
                false
            }
            // A next-holder hint needs a claim holder: only pods here (tests/model.rs has claims).
            Decision::SetNext => {
                self.broken.get_or_insert("no claim holds here: unexpected next-holder hint");
                false
            }
            Decision::Idle { .. } => false,
        };
        // The reconcile goes on with its answers, or ends (idle, or a 409: requeued, re-read).
        self.ops[n].sessions[l] = ok.then_some(Session { view, fresh });
    }

    /// The state is settled: every cache equals the API server, no reconcile is half way, and
    /// every operator's step on every lock writes nothing.
    fn settled(&self, cfg: &Config) -> bool {
        self.ops.iter().all(|o| o.cache == self.api && o.sessions.iter().all(Option::is_none))
            && (0..self.ops.len())
                .all(|n| (0..LOCKS).all(|l| matches!(self.decide(n, l, cfg).1.plan.decision, Decision::Idle { .. })))
    }

    /// Pod `i` wants the lock `x`, and `x` does not exist or its grant is not recorded on it.
    fn cfg_waits_for_x(&self, cfg: &Config, i: usize) -> bool {
        cfg.unservable == Some(i) && !(self.api.x_exists && self.api.pods[i].as_ref().is_some_and(|p| p.x_token))
    }

    /// Waiters that wait for no running holder in a settled state.
    fn stuck(&self, cfg: &Config) -> Vec<&'static str> {
        if !self.settled(cfg) {
            return vec![];
        }
        // A pod that waits only for `x`'s grant to be recorded (an action always enabled once
        // `x` exists) makes progress like a running one: waiting behind it is no deadlock.
        let x_pending = (0..cfg.pods.len())
            .filter(|i| self.api.x_exists && self.api.pods[*i].is_some() && self.cfg_waits_for_x(cfg, *i));
        // The claim makes progress (or waits for time to pass) while it has seen no commit yet
        // that is there, releases, or crashed (its Leases expire as time passes).
        let claim_moves = cfg.claim.filter(|i| {
            let committed = self.api.pods[*i].as_ref().is_some_and(|p| !p.gated);
            let rejected = self.api.pods[*i].as_ref().is_some_and(|p| p.rejected);
            matches!(self.proc, Proc::Releasing | Proc::Crashed | Proc::Paused)
                || (self.proc == Proc::Waiting && (committed || rejected))
        });
        let moving: Vec<usize> = self.running(cfg).map(|(i, _)| i).chain(x_pending).chain(claim_moves).collect();
        // The waiters, and which of them wait for a holder that moves: a lock of their set is
        // held by a running holder, or named (tentatively) by the Lease for a waiter that itself
        // waits for one that moves (pod-c behind a claim reserved a while it waits for b, which a
        // running pod holds), to a fixpoint. A cycle of tentative holders never gets there.
        let waiters: Vec<usize> = (0..self.api.pods.len())
            .filter(|i| self.api.pods[*i].as_ref().is_some_and(|p| p.gated && !p.rejected))
            .filter(|i| !(cfg.claim == Some(*i) && self.proc != Proc::Waiting))
            .filter(|i| !self.cfg_waits_for_x(cfg, *i))
            .collect();
        let mut ok: Vec<usize> = vec![];
        loop {
            let before = ok.len();
            for &i in &waiters {
                if ok.contains(&i) {
                    continue;
                }
                let behind_mover = (0..LOCKS).any(|l| {
                    wants(cfg, i, l)
                        && (moving.iter().any(|r| wants(cfg, *r, l))
                            || self.api.leases[l]
                                .as_ref()
                                .and_then(|x| x.holder)
                                .is_some_and(|(h, _)| h != i && ok.contains(&h)))
                });
                if behind_mover {
                    ok.push(i);
                }
            }
            if ok.len() == before {
                break;
            }
        }
        waiters.into_iter().filter(|i| !ok.contains(i)).map(|i| POD_NAMES[i]).collect()
    }
}

fn mutual_exclusion(w: &World, cfg: &Config) -> bool {
    (0..LOCKS).all(|l| w.running(cfg).filter(|(i, _)| wants(cfg, *i, l)).count() <= 1)
}

fn named_consistently(w: &World, cfg: &Config) -> bool {
    w.running(cfg).all(|(i, p)| {
        (0..LOCKS).filter(|l| wants(cfg, i, *l)).all(|l| {
            // A Lease a third party deleted names nobody until the operator recreates it.
            w.api.leases[l].as_ref().is_none_or(|x| x.holder == Some((i, p.uid)) && Some(x.token) == p.tokens[l])
        })
    })
}

impl Model for MultiModel {
    type State = World;
    type Action = Action;

    fn init_states(&self) -> Vec<World> {
        // Every lock after its first reconcile: tokens reserved (ceiling 1000), Lease free.
        let lease = LeaseObj { rv: 1, holder: None, token: 0, floor: 0 };
        let lock = LockObj { rv: 1, ceiling: 1000 };
        let pod = PodObj {
            rv: 1,
            uid: 0,
            gated: true,
            phase: PodPhase::Pending,
            tokens: [None; LOCKS],
            withdrawn: [0; LOCKS],
            x_token: false,
            rejected: false,
        };
        let pods = self.cfg.pods.iter().map(|(_, _, present)| present.then(|| pod.clone())).collect();
        let created = self.cfg.pods.iter().enumerate().filter(|(_, p)| p.2).fold(0, |m, (i, _)| m | (1 << i));
        let x_exists = self.cfg.unservable.is_none() || self.cfg.delete_x;
        let api = View { leases: [Some(lease.clone()), Some(lease)], locks: [lock.clone(), lock], x_exists, pods };
        let op =
            Operator { cache: api.clone(), sessions: [None, None], clocks: [Clocks::default(), Clocks::default()] };
        vec![World {
            next_rv: 2,
            api,
            ops: vec![op; self.cfg.operators],
            named: [None, None],
            created,
            deleted: 0,
            restarts: 0,
            x_deleted: false,
            proc: Proc::Waiting,
            ticks: 0,
            lease_deleted: false,
            events: 0,
            broken: None,
        }]
    }

    fn actions(&self, w: &World, out: &mut Vec<Action>) {
        if w.broken.is_some() {
            return;
        }
        for (n, op) in w.ops.iter().enumerate() {
            for l in 0..LOCKS {
                out.push(Action::Step(n, l));
            }
            if op.cache.leases != w.api.leases {
                out.push(Action::Sync(n, Kind::Leases));
            }
            if op.cache.locks != w.api.locks || op.cache.x_exists != w.api.x_exists {
                out.push(Action::Sync(n, Kind::Locks));
            }
            if op.cache.pods != w.api.pods {
                out.push(Action::Sync(n, Kind::Pods));
            }
            if w.restarts < self.cfg.restarts {
                out.push(Action::Restart(n));
            }
        }
        if self.cfg.lease_delete && !w.lease_deleted {
            for l in (0..LOCKS).filter(|l| w.api.leases[*l].is_some()) {
                out.push(Action::LeaseDeleted(l));
            }
        }
        if !w.api.x_exists {
            out.push(Action::CreateX);
        } else if self.cfg.delete_x && !w.x_deleted {
            out.push(Action::DeleteX);
        }
        if let Some(c) = self.cfg.claim {
            let obj = w.api.pods[c].as_ref();
            let names =
                |l: usize| obj.is_some_and(|p| w.api.leases[l].as_ref().is_some_and(|x| x.holder == Some((c, p.uid))));
            let wanted = || (0..LOCKS).filter(|l| wants(&self.cfg, c, *l));
            match w.proc {
                Proc::Waiting => {
                    // `SetTicket::wait`: the commit, then a first renewal of every lock that
                    // proves it (`LockGuard::start`: the Lease still names the claim).
                    let proved = wanted().all(names);
                    let committed = obj.is_some_and(|p| !p.gated && !p.rejected) && proved;
                    let on_leases = self.cfg.bug == Some(Bug::ActOnLeases) && wanted().all(names);
                    if committed || on_leases {
                        out.push(Action::SeesCommit);
                    }
                    if obj.is_some_and(|p| p.rejected) {
                        out.push(Action::SeesRejected);
                    }
                }
                Proc::Acting => out.push(Action::Finish),
                Proc::Releasing => {
                    let named: Vec<usize> = wanted().filter(|l| names(*l)).collect();
                    match named.first() {
                        Some(l) => out.push(Action::Release(*l)),
                        None => out.push(Action::DeleteClaim),
                    }
                }
                _ => {}
            }
            if self.cfg.crash && matches!(w.proc, Proc::Waiting | Proc::Acting) {
                out.push(Action::Crash);
            }
            if self.cfg.crash && w.proc == Proc::Waiting && w.ticks == 0 {
                out.push(Action::Pause);
            }
            if w.proc == Proc::Paused {
                out.push(Action::Resume);
            }
            if matches!(w.proc, Proc::Crashed | Proc::Paused) && w.ticks < TICKS {
                out.push(Action::Tick);
            }
        }
        for (i, p) in w.api.pods.iter().enumerate() {
            if self.cfg.claim == Some(i) {
                continue;
            }
            if w.api.x_exists && self.cfg.unservable == Some(i) && p.as_ref().is_some_and(|p| p.gated && !p.x_token) {
                out.push(Action::RecordX(i));
            }
            match p {
                None if w.created & (1 << i) == 0 => out.push(Action::Created(i)),
                None => {}
                Some(p) if p.gated && self.cfg.deletes && w.deleted & (1 << i) == 0 => out.push(Action::Deleted(i)),
                Some(p) if p.gated => {}
                Some(p) if p.phase == PodPhase::Pending => out.push(Action::Starts(i)),
                Some(p) if p.phase == PodPhase::Running => out.push(Action::Succeeds(i)),
                Some(_) => {}
            }
        }
    }

    fn next_state(&self, w: &World, a: Action) -> Option<World> {
        let mut w = w.clone();
        match a {
            Action::Step(n, l) => w.step(n, l, &self.cfg),
            Action::Sync(n, kind) => {
                let (api, op) = (&w.api, &mut w.ops[n]);
                match kind {
                    Kind::Leases => op.cache.leases = api.leases.clone(),
                    Kind::Locks => (op.cache.locks, op.cache.x_exists) = (api.locks.clone(), api.x_exists),
                    Kind::Pods => op.cache.pods = api.pods.clone(),
                }
            }
            Action::Restart(n) => {
                w.restarts += 1;
                let api = w.api.clone();
                let op = &mut w.ops[n];
                (op.cache, op.sessions, op.clocks) = (api, [None, None], Default::default());
            }
            Action::Created(i) => {
                w.created |= 1 << i;
                let rv = w.rv();
                w.api.pods[i] = Some(PodObj {
                    rv,
                    uid: 0,
                    gated: true,
                    phase: PodPhase::Pending,
                    tokens: [None; LOCKS],
                    withdrawn: [0; LOCKS],
                    x_token: false,
                    rejected: false,
                });
            }
            Action::Starts(i) => {
                let rv = w.rv();
                let p = w.api.pods[i].as_mut()?;
                (p.phase, p.rv) = (PodPhase::Running, rv);
            }
            Action::Succeeds(i) => {
                let rv = w.rv();
                let p = w.api.pods[i].as_mut()?;
                (p.phase, p.rv) = (PodPhase::Succeeded, rv);
            }
            Action::Deleted(i) => {
                w.deleted |= 1 << i;
                w.api.pods[i] = None;
            }
            Action::CreateX => w.api.x_exists = true,
            Action::DeleteX => (w.api.x_exists, w.x_deleted) = (false, true),
            Action::RecordX(i) => {
                let rv = w.rv();
                let p = w.api.pods[i].as_mut()?;
                (p.x_token, p.rv) = (true, rv);
            }
            Action::SeesCommit => {
                w.proc = Proc::Acting;
                w.events |= CLAIM_ACTED;
            }
            // `SetHolder::acquire` cancels: it frees every Lease that names the claim, then
            // deletes it.
            Action::SeesRejected => w.proc = Proc::Releasing,
            Action::Finish => w.proc = Proc::Releasing,
            Action::Release(l) => {
                let rv = w.rv();
                let x = w.api.leases[l].as_mut()?;
                (x.holder, x.rv) = (None, rv);
            }
            Action::DeleteClaim => {
                w.api.pods[self.cfg.claim?] = None;
                w.proc = Proc::Done;
            }
            Action::Crash => w.proc = Proc::Crashed,
            Action::Pause => w.proc = Proc::Paused,
            Action::Resume => w.proc = Proc::Waiting,
            Action::Tick => w.ticks += 1,
            Action::LeaseDeleted(l) => {
                w.api.leases[l] = None;
                w.lease_deleted = true;
            }
        }
        Some(w)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(I1, |m: &MultiModel, w: &World| mutual_exclusion(w, &m.cfg)),
            Property::always(I2, |_, w: &World| w.broken.is_none()),
            Property::always(I5, |m: &MultiModel, w: &World| named_consistently(w, &m.cfg)),
            Property::always(I6, |m: &MultiModel, w: &World| w.stuck(&m.cfg).is_empty()),
            Property::sometimes(BOTH_RUN, |_, w: &World| w.events & MULTI_RAN != 0),
            Property::sometimes(TAKEN_BACK, |_, w: &World| w.events & TAKE_BACK != 0),
            Property::sometimes(ALL_RAN, |_, w: &World| {
                w.api.pods.iter().all(|p| p.as_ref().is_some_and(|p| p.phase == PodPhase::Succeeded))
            }),
            Property::sometimes(CLAIM_RAN, |_, w: &World| w.events & CLAIM_ACTED != 0),
            Property::sometimes(CLAIM_REJECTED_MOVED, |m: &MultiModel, w: &World| {
                w.events & CLAIM_REJECTED != 0
                    && w.running(&m.cfg).any(|(i, _)| m.cfg.claim != Some(i) && wants(&m.cfg, i, 0))
            }),
        ]
    }
}

/// Runs the checker breadth first to `depth` (see [`checking::run`]) and returns it.
fn check(name: &str, cfg: Config, depth: usize) -> impl Checker<MultiModel> + use<> {
    checking::run(&format!("multilock {name}: {cfg:?}"), MultiModel { cfg }, depth)
}

fn trace(checker: &impl Checker<MultiModel>, property: &'static str) -> Option<String> {
    let path = checker.discovery(property)?;
    let mut out = String::new();
    for (state, action) in path.into_vec() {
        if let Some(a) = action {
            let _ = writeln!(out, "  {a:?}   (Leases={:?} pods={:?})", state.api.leases, state.api.pods);
        }
    }
    let last = checker.discovery(property)?.last_state().clone();
    let _ = writeln!(
        out,
        "  final: leases={:?} pods={:?} named={:?} broken={:?} stuck={:?}",
        last.api.leases,
        last.api.pods,
        last.named,
        last.broken,
        last.stuck(&checker.model().cfg)
    );
    Some(out)
}

fn assert_safe(name: &str, cfg: Config, depth: usize, reaches: &[&'static str]) {
    let checker = check(name, cfg, depth);
    for property in [I1, I2, I5, I6] {
        if let Some(t) = trace(&checker, property) {
            panic!("multilock {name}: {property} violated:\n{t}");
        }
    }
    for goal in [BOTH_RUN].iter().chain(reaches) {
        assert!(
            checker.discovery(goal).is_some(),
            "multilock {name}: the bound never reaches \"{goal}\": it explores too little"
        );
    }
}

fn planted(bug: Bug, cfg: Config, depth: usize, property: &'static str) {
    let checker = check(&format!("planted {bug:?}"), Config { bug: Some(bug), ..cfg }, depth);
    let t = trace(&checker, property)
        .unwrap_or_else(|| panic!("the checker must find the counterexample to {property} that {bug:?} allows"));
    eprintln!("counterexample found, as it must be:\n{t}");
}

/// pod-a wants {a, b}, pod-b wants {b, a} (the same set: order does not matter), pod-c wants a
/// alone; all created in the same second, so the names decide the order (a, b, c).
const CROSS: &[(u8, i64, bool)] = &[(0b11, 1, true), (0b11, 1, true), (0b01, 1, true)];

/// The one-second tie: pod-a (wants {a, b}) and pod-b (wants {a, b}) created in the same
/// second; pod-a sorts first but is created after pod-b may have been granted.
const TIE: &[(u8, i64, bool)] = &[(0b11, 1, false), (0b11, 1, true)];

/// pod-a and pod-b both want {a, b}, both there from the start, created in the same second.
const SAME_SECOND: &[(u8, i64, bool)] = &[(0b11, 1, true), (0b11, 1, true)];

/// Two multi-lock pods and a single-lock waiter, two operators with lagging caches and a
/// restart (a crash between the two Lease writes of one grant among them).
#[test]
fn cross_order_pods_and_a_single_lock_waiter_two_operators() {
    let cfg = Config {
        pods: CROSS,
        operators: 2,
        restarts: 1,
        deletes: false,
        unservable: None,
        delete_x: false,
        claim: None,
        crash: false,
        lease_delete: false,
        bug: None,
    };
    assert_safe("cross", cfg, 10, &[]);
}

/// The one-second tie, and the take-back it needs: two operators, lagging caches, a deletion.
#[test]
fn a_later_pod_that_sorts_first_takes_back_a_tentative_grant() {
    let cfg = Config {
        pods: TIE,
        operators: 2,
        restarts: 0,
        deletes: true,
        unservable: None,
        delete_x: false,
        claim: None,
        crash: false,
        lease_delete: false,
        bug: None,
    };
    assert_safe("tie", cfg, 9, &[TAKEN_BACK]);
}

/// The checker can fail: ungating on the first lock's grant lets a pod run without its second
/// lock, beside the pod that holds it.
#[test]
fn a_planted_bug_ungate_on_the_first_lease_is_caught() {
    planted(
        Bug::UngateOnFirstLease,
        Config {
            pods: CROSS,
            operators: 1,
            restarts: 0,
            deletes: false,
            unservable: None,
            delete_x: false,
            claim: None,
            crash: false,
            lease_delete: false,
            bug: None,
        },
        9,
        I5,
    );
}

/// The checker can fail: without the take-back, the tie leaves pod-a holding a tentatively
/// while pod-b, its head, holds b tentatively: a deadlock.
#[test]
fn a_planted_bug_no_take_back_deadlocks() {
    planted(
        Bug::NoTakeBack,
        Config {
            pods: TIE,
            operators: 1,
            restarts: 0,
            deletes: false,
            unservable: None,
            delete_x: false,
            claim: None,
            crash: false,
            lease_delete: false,
            bug: None,
        },
        14,
        I6,
    );
}

/// The checker can fail: per-lock queue orders that disagree deadlock two multi-lock pods.
#[test]
fn a_planted_bug_per_lock_queue_order_deadlocks() {
    planted(
        Bug::PerLockQueueOrder,
        Config {
            pods: SAME_SECOND,
            operators: 1,
            restarts: 0,
            deletes: false,
            unservable: None,
            delete_x: false,
            claim: None,
            crash: false,
            lease_delete: false,
            bug: None,
        },
        11,
        I6,
    );
}

/// pod-a wants a alone and is created late, in the same second as pod-b, which wants {a, b}:
/// pod-a sorts first, so a tentative grant of a to pod-b is taken back.
const LATE_SINGLE: &[(u8, i64, bool)] = &[(0b01, 1, false), (0b11, 1, true)];

/// The checker can fail: a take-back that moves the Lease without first withdrawing the grant
/// on the pod leaves the pod's record of it, and the pod runs on it once its other lock comes.
#[test]
fn a_planted_bug_withdraw_without_pod_write_is_caught() {
    let cfg = Config {
        pods: LATE_SINGLE,
        operators: 1,
        restarts: 0,
        deletes: false,
        unservable: None,
        delete_x: false,
        claim: None,
        crash: false,
        lease_delete: false,
        bug: None,
    };
    planted(Bug::WithdrawWithoutPodWrite, cfg, 11, I5);
}

/// One operator, deeper: two pods that want {a, b} run one after the other, to the end (the
/// second is granted both locks as the first releases them), with a restart.
#[test]
fn one_operator_serves_both_multi_lock_pods_in_turn() {
    let cfg = Config {
        pods: SAME_SECOND,
        operators: 1,
        restarts: 1,
        deletes: false,
        unservable: None,
        delete_x: false,
        claim: None,
        crash: false,
        lease_delete: false,
        bug: None,
    };
    assert_safe("in-turn", cfg, 20, &[ALL_RAN]);
}

/// pod-a wants a and the lock x, which does not exist at first; pod-b, created a second later,
/// wants {a, b}; pod-c, the oldest, wants b alone. While x is missing, a is reserved for pod-b;
/// once x exists, pod-a (older) takes a back from pod-b.
const UNSERVED: &[(u8, i64, bool)] = &[(0b01, 1, true), (0b11, 2, true), (0b10, 0, true)];

/// A set the operator does not serve yet (a lock of it missing) is left out of the queues, then
/// served once the lock exists, taking back a younger pod's tentative grant: one operator.
#[test]
fn a_set_with_a_missing_lock_waits_unserved_then_takes_back_a_younger_grant() {
    let cfg = Config {
        pods: UNSERVED,
        operators: 1,
        restarts: 0,
        deletes: false,
        unservable: Some(0),
        delete_x: false,
        claim: None,
        crash: false,
        lease_delete: false,
        bug: None,
    };
    assert_safe("unserved", cfg, 13, &[TAKEN_BACK]);
}

/// pod-a wants a and the missing lock x; pod-b, a second younger, wants a alone.
const UNSERVED_SINGLE: &[(u8, i64, bool)] = &[(0b01, 1, true), (0b01, 2, true)];

/// Two operators whose lock caches disagree about x: the leave-out rule is safe with one that
/// has not seen x while the other serves pod-a.
#[test]
fn a_set_with_a_missing_lock_two_operators_with_lagging_lock_caches() {
    let cfg = Config {
        pods: UNSERVED_SINGLE,
        operators: 2,
        restarts: 0,
        deletes: false,
        unservable: Some(0),
        delete_x: false,
        claim: None,
        crash: false,
        lease_delete: false,
        bug: None,
    };
    assert_safe("unserved-two", cfg, 12, &[]);
}

/// The checker can fail: leaving out a pod that a lock's Lease names frees that lock as if the
/// pod were gone, while the other operator, mid-reconcile, ungates the pod on its record.
#[test]
fn a_planted_bug_leaving_out_a_granted_pod_is_caught() {
    let cfg = Config {
        pods: UNSERVED_SINGLE,
        operators: 2,
        restarts: 0,
        deletes: false,
        unservable: Some(0),
        delete_x: false,
        claim: None,
        crash: false,
        lease_delete: false,
        bug: None,
    };
    planted(Bug::LeaveOutNamed, cfg, 12, I1);
}

/// pod-a wants a and the lock x, which exists at first and may be deleted; pod-b, a second
/// younger, wants a alone. Once x is gone, a tentative grant of a to pod-a (the head of a's
/// queue) is taken back, so pod-b is not kept waiting for a pod that cannot run.
const UNSERVED_LATER: &[(u8, i64, bool)] = &[(0b01, 1, true), (0b01, 2, true)];

/// A set that stops being served after a lock granted it tentatively (a lock of the set deleted)
/// has that grant taken back (withdrawn on the pod first), and the lock serves the next waiter:
/// one operator, x created again later.
#[test]
fn a_reservation_for_a_set_no_longer_served_is_taken_back() {
    let cfg = Config {
        pods: UNSERVED_LATER,
        operators: 1,
        restarts: 0,
        deletes: false,
        unservable: Some(0),
        delete_x: true,
        claim: None,
        crash: false,
        lease_delete: false,
        bug: None,
    };
    assert_safe("unserved-later", cfg, 18, &[TAKEN_BACK, ALL_RAN]);
}

/// The same with two operators whose lock caches disagree about x: one takes the grant back
/// while the other may still see the set served.
#[test]
fn a_reservation_for_a_set_no_longer_served_two_operators() {
    let cfg = Config {
        pods: UNSERVED_LATER,
        operators: 2,
        restarts: 0,
        deletes: false,
        unservable: Some(0),
        delete_x: true,
        claim: None,
        crash: false,
        lease_delete: false,
        bug: None,
    };
    assert_safe("unserved-later-two", cfg, 11, &[TAKEN_BACK]);
}

/// The checker can fail: a lock that keeps its tentative grant to a pod whose set is no longer
/// served keeps pod-b waiting for ever (I6).
#[test]
fn a_planted_bug_keeping_a_reservation_for_an_unserved_set_is_caught() {
    let cfg = Config {
        pods: UNSERVED_LATER,
        operators: 1,
        restarts: 0,
        deletes: false,
        unservable: Some(0),
        delete_x: true,
        claim: None,
        crash: false,
        lease_delete: false,
        bug: None,
    };
    planted(Bug::KeepReservedForUnserved, cfg, 12, I6);
}

/// pod-a is a claim (a process, `leasehold lock a,b`) that wants {a, b}; pod-b, a pod, wants
/// {b, a}; pod-c wants a alone; all in the same second (the names decide: the claim first).
const CLAIM_CROSS: &[(u8, i64, bool)] = &[(0b11, 1, true), (0b11, 1, true), (0b01, 1, true)];

/// A claim with a lock set among multi-lock and single-lock pods, two operators with lagging
/// caches and a restart: the claim's status is the commit point and its process acts only on
/// the commit.
#[test]
fn a_claim_with_a_lock_set_among_pods_two_operators() {
    let cfg = Config {
        pods: CLAIM_CROSS,
        operators: 2,
        restarts: 1,
        deletes: false,
        unservable: None,
        delete_x: false,
        claim: Some(0),
        crash: false,
        lease_delete: false,
        bug: None,
    };
    assert_safe("claim-cross", cfg, 10, &[CLAIM_RAN]);
}

/// pod-a wants a alone and is created late, in the same second as the claim pod-b, which wants
/// {a, b}: pod-a sorts first, so a tentative grant of a to the claim is taken back (recorded in
/// the claim's status first), unless the claim was committed already.
const CLAIM_LATE_SINGLE: &[(u8, i64, bool)] = &[(0b01, 1, false), (0b11, 1, true)];

/// The take-back from a claim, one operator, deeper.
#[test]
fn a_tentative_grant_is_taken_back_from_a_claim_for_an_older_pod() {
    let cfg = Config {
        pods: CLAIM_LATE_SINGLE,
        operators: 1,
        restarts: 0,
        deletes: false,
        unservable: None,
        delete_x: false,
        claim: Some(1),
        crash: false,
        lease_delete: false,
        bug: None,
    };
    assert_safe("claim-take-back", cfg, 13, &[TAKEN_BACK, CLAIM_RAN]);
}

/// The checker can fail: a claim's process that acts once every Lease names its claim (its
/// tentative grants) works beside the older pod that the take-back hands a to.
#[test]
fn a_planted_bug_a_claim_acting_on_its_leases_is_caught() {
    let cfg = Config {
        pods: CLAIM_LATE_SINGLE,
        operators: 1,
        restarts: 0,
        deletes: false,
        unservable: None,
        delete_x: false,
        claim: Some(1),
        crash: false,
        lease_delete: false,
        bug: None,
    };
    planted(Bug::ActOnLeases, cfg, 13, I1);
}

/// pod-a is a claim that wants {a, b} and may crash; pod-b, older, wants b alone; pod-c, younger,
/// wants a alone. A crashed claim's tentative grant of a is rejected once it is overdue (the claim
/// first, then the Lease), and pod-c runs on a.
const CLAIM_CRASH: &[(u8, i64, bool)] = &[(0b11, 1, true), (0b10, 0, true), (0b01, 2, true)];

/// A claim whose process crashes while it waits (or holds): no waiter is left behind it once
/// its Leases are overdue.
#[test]
fn a_crashed_claims_tentative_grant_is_rejected_and_its_lock_moves_on() {
    let cfg = Config {
        pods: CLAIM_CRASH,
        operators: 1,
        restarts: 0,
        deletes: false,
        unservable: None,
        delete_x: false,
        claim: Some(0),
        crash: true,
        lease_delete: false,
        bug: None,
    };
    assert_safe("claim-crash", cfg, 14, &[CLAIM_REJECTED_MOVED]);
}

/// The checker can fail: freeing an overdue tentative grant without rejecting the claim first
/// leaves a's record in the claim's status; a paused process that resumes is committed on that
/// stale record once b is granted, and acts with a token a's Lease no longer carries.
#[test]
fn a_planted_bug_expiring_a_tentative_claim_grant_without_rejecting_the_claim_is_caught() {
    let cfg = Config {
        pods: CLAIM_CRASH,
        operators: 1,
        restarts: 0,
        deletes: false,
        unservable: None,
        delete_x: false,
        claim: Some(0),
        crash: true,
        lease_delete: false,
        bug: None,
    };
    let cfg = Config { bug: Some(Bug::ExpireWithoutReject), ..cfg };
    let checker = checking::run_until_counterexample("planted ExpireWithoutReject", MultiModel { cfg }, 22, I5);
    let t = trace(&checker, I5).expect("the checker must find the stale commit the planted bug allows");
    eprintln!("counterexample found, as it must be:\n{t}");
}

/// pod-a wants {a, b}, pod-b wants b alone and comes a second later.
const HELD_THEN_DELETED: &[(u8, i64, bool)] = &[(0b11, 1, true), (0b10, 2, true)];

/// A third party deletes a Lease while the multi-lock pod it named holds (found by the chaos run
/// of 2026-12-06, `mpod-8` and `pod-l1-7` on lock l1): the operator, whose pod cache may still
/// show the pod gated with its tentative tokens, recreates the Lease naming that pod
/// (`grant::adoptable_holder`), and grants nobody else while it runs: I1, I2 and I6 hold.
///
/// **I5 does not (open, 2026-12-06):** an operator whose pod cache does not show the tentative
/// token it recorded a moment before the deletion recreates the Lease free and grants the pod
/// again with a new token (1001), while the pod's record keeps the old one (1); the other lock's
/// reconcile then ungates the pod on its record. The pod runs holding the Lease, with a lower
/// token than the Lease names (no second holder: I1 holds). Checked here so that it stays known:
/// the run asserts the properties that hold; the I5 counterexample prints with `--nocapture`.
#[test]
fn a_deleted_lease_is_recreated_for_the_multi_lock_pod_that_holds() {
    let cfg = Config {
        pods: HELD_THEN_DELETED,
        operators: 1,
        restarts: 0,
        deletes: false,
        unservable: None,
        delete_x: false,
        claim: None,
        crash: false,
        lease_delete: true,
        bug: None,
    };
    let checker = check("lease-deleted", cfg, LEASE_DELETED_DEPTH);
    for property in [I1, I2, I6] {
        if let Some(t) = trace(&checker, property) {
            panic!("multilock lease-deleted: {property} violated:\n{t}");
        }
    }
    assert!(checker.discovery(BOTH_RUN).is_some(), "the bound reaches a multi-lock pod running");
    if let Some(t) = trace(&checker, I5) {
        eprintln!("open (see the doc comment): {I5} violated:\n{t}");
    }
}

const LEASE_DELETED_DEPTH: usize = 16;
