//! Model checker over the grant protocol: the real [`leasehold::lock::machine::step`], run by
//! operator processes against a modelled API server, explored over every interleaving by
//! stateright (breadth first, to a bound).
//!
//! What is modelled (and how each part maps to Kubernetes):
//! - **API server**: one lock (status `tokenCeiling`, `highestToken`), its Lease, pods and
//!   `DistributedLockClaim`s, each with a resourceVersion. Writes land as the operator sends
//!   them: the token reservation and every Lease update are compare-and-swaps on the
//!   resourceVersion it read (409 otherwise); Lease create fails if one exists; pod and claim
//!   patches carry only a UID precondition; the status view is a server-side apply without a
//!   precondition, so a stale writer overwrites a newer `highestToken`.
//! - **Operator processes** (1 or 2; nobody trusts leadership): a cache per object that lags
//!   independently (any object can be refreshed to its latest version at any time, in any
//!   order), a reconcile that steps on its cache plus the answers of its own writes, one write
//!   per action (so a crash or another writer can come between any two writes), and a restart at
//!   any point that drops the cache (re-listed) and the clocks (they start over).
//! - **Pods**: gated, Pending/Running/Succeeded, graceful deletion (the containers run until the
//!   object is gone), same-name recreate with a new UID, node loss (the pod keeps running, the
//!   API cannot tell). Ground truth "its work runs" = ungated and not finished.
//! - **Claims and their holder process**: learns its grant, renews the Lease (owner-verified),
//!   gives up `renewDeadline` after the start of its last successful renewal, can be paused
//!   (SIGSTOP) past its deadline, can have its claim deleted under it.
//! - **Third parties**: the Lease deleted, or edited to name a waiter with a plausible UID and
//!   token.
//! - **Time**: whole seconds; `leaseDurationSeconds` 3, renew deadline 2, node-loss timeout 3.
//!
//! Invariants:
//! - **I1** at most one holder whose work runs, except a holder on a lost node or a holder paused
//!   past its deadline, and then its token is lower than the other's (a fenced resource rejects
//!   its late writes);
//! - **I2** tokens handed to holders strictly increase in grant order (never repeat); no token is
//!   written above the reservation the API server holds; the operator never moves the Lease's
//!   token below one it handed out.
//!
//! Bounds: `LEASEHOLD_MODEL_DEPTH` (replaces each configuration's depth below),
//! `LEASEHOLD_MODEL_EXTRA_DEPTH` (adds to it; `make model` sets 1) and `LEASEHOLD_MODEL_STATES`. Not modelled yet: start timeout, skip /
//! max-wait rejections, a lock deleted and recreated, a foreign Lease, watch relists that drop
//! deletions, liveness (I4).

use std::fmt::Write as _;
use std::hash::Hash;
use std::io::Write as _;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use leasehold::lock::grant::{Candidate, Decision, Grant, Holder, HolderKind, LeaseView, Phase, Settings};
use leasehold::lock::machine::{self, Clocks, Snapshot};
use leasehold::lock::policy::BusyPolicy;
use stateright::{Checker, Model, Property};

const LEASE_SECS: u64 = 3;
const RENEW_DEADLINE: u8 = 2;
const SETTINGS: Settings = Settings {
    start_timeout: Duration::from_secs(10_000),
    node_loss_timeout: Duration::from_secs(3),
    lease_duration: Duration::from_secs(LEASE_SECS),
};
const I1: &str = "I1 at most one running holder (a lost or paused one only with a lower token)";
const I2: &str = "I2 tokens strictly increase and stay within the reservation";
const HANDOVER: &str = "a second grant happens (the bound reaches a handover)";
const POD_NAMES: [&str; 3] = ["pod-a", "pod-b", "pod-c"];
const CLAIM_NAMES: [&str; 2] = ["claim-x", "claim-y"];

/// A fault planted in the modelled API server, to prove the checker can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Bug {
    /// Lease updates land whatever resourceVersion they carry (no compare-and-swap).
    LeaseWithoutPrecondition,
    /// The patch that ungates a holder lands whatever resourceVersion it carries (UID only).
    HolderPatchWithoutPrecondition,
}

#[derive(Clone, Debug)]
struct Config {
    pods: usize,
    claims: usize,
    operators: usize,
    max_time: u8,
    /// Third-party faults (Lease deleted or forged, claim deleted) and node losses, in all.
    faults: u8,
    restarts: u8,
    /// Third parties may also rewrite the Lease's holder (what the chart's admission policy
    /// `<release>-lease-grants` forbids everyone but the operator).
    forge: bool,
    /// Start with the first pod already holding (granted token 1, running): reaches the states
    /// after a handover within a smaller bound.
    start_held: bool,
    /// `nodeLossTimeoutSeconds` (the lease stays 3 s).
    node_loss_secs: u64,
    bug: Option<Bug>,
}

impl Config {
    /// One operator, one fault, one restart, no time: each run says what it changes.
    const BASE: Config = Config {
        pods: 0,
        claims: 0,
        operators: 1,
        max_time: 0,
        faults: 1,
        restarts: 1,
        forge: false,
        start_held: false,
        node_loss_secs: 3,
        bug: None,
    };
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct LeaseObj {
    rv: u16,
    holder: Option<(String, String, HolderKind)>,
    token: i64,
    /// `leasehold.dev/token-floor`; `None` when missing (a Lease the operator did not write).
    floor: Option<i64>,
    renew: Option<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct LockObj {
    rv: u16,
    ceiling: i64,
    highest: i64,
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
    uid: String,
    created: i64,
    gated: bool,
    phase: PodPhase,
    deleting: bool,
    token: Option<i64>,
    node_lost: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ClaimObj {
    rv: u16,
    uid: String,
    created: i64,
    token: Option<i64>,
}

/// The process behind a claim (`leasehold lock` or a library holder).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
struct ClaimProc {
    /// Its work runs (it believes it holds): with this token.
    holding: Option<i64>,
    /// Start of its last successful renewal (seconds).
    last_renew: u8,
    paused: bool,
    /// It saw a grant once (a claim is used for one grant).
    done: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct View {
    lease: Option<LeaseObj>,
    lock: LockObj,
    pods: Vec<Option<PodObj>>,
    claims: Vec<Option<ClaimObj>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Session {
    view: View,
    fresh_reservation: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Operator {
    cache: View,
    session: Option<Session>,
    clocks: Clocks,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct World {
    now: u8,
    next_rv: u16,
    api: View,
    ops: Vec<Operator>,
    procs: Vec<ClaimProc>,
    /// Tokens handed to holders, in grant order.
    handed: Vec<i64>,
    faults: u8,
    restarts: u8,
    /// Bit per pod slot: its pod was recreated once (the bound).
    recreated: u8,
    /// A transition broke I2 (checked where it happens): what.
    broken: Option<&'static str>,
}

/// A kind the operator watches: each kind's cache lags on its own (its own watch).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Lease,
    Lock,
    Pods,
    Claims,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Action {
    /// Operator `n` takes one step of its reconcile (one write).
    Step(usize),
    /// Operator `n`'s cache of one kind catches up with the API server.
    Sync(usize, Kind),
    /// Operator `n` crashes and restarts: fresh list, fresh clocks.
    Restart(usize),
    /// One second passes.
    Tick,
    /// kube-scheduler + kubelet start an ungated pod.
    PodStarts(usize),
    /// The pod's containers finish.
    PodSucceeds(usize),
    /// Graceful deletion: the containers keep running until the object is gone.
    PodDeleted(usize),
    /// The deleted pod's containers stopped and the object is gone.
    PodGone(usize),
    /// A new pod with the same name (new UID) asks for the lock.
    PodRecreated(usize),
    /// The pod's node stops reporting; its containers may keep running.
    NodeLost(usize),
    /// The claim's process sees its grant and makes its first renewal.
    ClaimLearns(usize),
    /// The claim's process renews (owner-verified compare-and-swap on the Lease).
    ClaimRenews(usize),
    ClaimPaused(usize),
    ClaimResumed(usize),
    /// The process releases: frees the Lease if it still names it, stops its work.
    ClaimReleases(usize),
    /// Someone deletes the claim object; its process does not know.
    ClaimDeleted(usize),
    /// A third party deletes the Lease.
    LeaseDeleted,
    /// A third party edits the Lease to name waiting pod `n` with a plausible token.
    LeaseForged(usize),
}

struct LockModel {
    cfg: Config,
}

fn created(slot: usize, generation: i64) -> i64 {
    100 * generation + slot as i64
}

impl LockModel {
    fn initial(&self) -> World {
        let pods = (0..self.cfg.pods)
            .map(|i| {
                Some(PodObj {
                    rv: 1,
                    uid: format!("{}-0", POD_NAMES[i]),
                    created: created(i, 0),
                    gated: true,
                    phase: PodPhase::Pending,
                    deleting: false,
                    token: None,
                    node_lost: false,
                })
            })
            .collect();
        let claims = (0..self.cfg.claims)
            .map(|i| {
                Some(ClaimObj { rv: 1, uid: format!("{}-0", CLAIM_NAMES[i]), created: -10 + i as i64, token: None })
            })
            .collect();
        // Start where every lock is after its first reconcile: tokens reserved, the Lease
        // created free (the bootstrap path is explored again after a Lease deletion).
        let lease = LeaseObj { rv: 1, holder: None, token: 0, floor: Some(0), renew: None };
        let lock = LockObj { rv: 1, ceiling: 1000, highest: 0 };
        let mut api = View { lease: Some(lease), lock, pods, claims };
        let mut handed = vec![];
        if self.cfg.start_held {
            let p = api.pods[0].as_mut().unwrap();
            (p.gated, p.phase, p.token) = (false, PodPhase::Running, Some(1));
            let holder = Some((POD_NAMES[0].to_string(), p.uid.clone(), HolderKind::Pod));
            api.lease = Some(LeaseObj { rv: 1, holder, token: 1, floor: Some(0), renew: Some(1) });
            api.lock.highest = 1;
            handed.push(1);
        }
        let op = Operator { cache: api.clone(), session: None, clocks: Clocks::default() };
        World {
            now: 0,
            next_rv: 2,
            api,
            ops: vec![op; self.cfg.operators],
            procs: vec![ClaimProc::default(); self.cfg.claims],
            handed,
            faults: 0,
            restarts: 0,
            recreated: 0,
            broken: None,
        }
    }
}

/// What the operator's conversion functions (`candidate_of_pod`, `candidate_of_claim`,
/// `lease::view`) make of the modelled objects.
fn snapshot(view: &View, fresh_reservation: Option<i64>, settings: Settings) -> Snapshot {
    let ts = |s: i64| Timestamp::from_second(1_700_000_000 + s).unwrap();
    let mut candidates = vec![];
    for (i, p) in view.pods.iter().enumerate() {
        let Some(p) = p else { continue };
        let started = p.phase != PodPhase::Pending;
        candidates.push(Candidate {
            kind: HolderKind::Pod,
            name: POD_NAMES[i].into(),
            identity: POD_NAMES[i].into(),
            uid: p.uid.clone(),
            resource_version: p.rv.to_string(),
            created: ts(p.created),
            gated: p.gated,
            node_name: started.then(|| "node-1".to_string()),
            node_lost: started && p.node_lost,
            phase: match p.phase {
                PodPhase::Pending => Phase::Pending,
                PodPhase::Running => Phase::Running,
                PodPhase::Succeeded => Phase::Succeeded,
            },
            deleting: p.deleting,
            token: p.token,
            on_busy: BusyPolicy::Wait,
            max_wait: None,
            waiting_for: None,
        });
    }
    for (i, c) in view.claims.iter().enumerate() {
        let Some(c) = c else { continue };
        candidates.push(Candidate {
            kind: HolderKind::Claim,
            name: CLAIM_NAMES[i].into(),
            identity: CLAIM_NAMES[i].into(),
            uid: c.uid.clone(),
            resource_version: c.rv.to_string(),
            created: ts(c.created),
            gated: c.token.is_none(),
            node_name: None,
            node_lost: false,
            phase: if c.token.is_some() { Phase::Running } else { Phase::Pending },
            deleting: false,
            token: c.token,
            on_busy: BusyPolicy::Wait,
            max_wait: None,
            waiting_for: None,
        });
    }
    let lease = view.lease.as_ref().map(|l| LeaseView {
        holder: l.holder.as_ref().map(|(name, uid, kind)| Holder {
            name: name.clone(),
            uid: Some(uid.clone()),
            kind: *kind,
        }),
        token: l.token,
        floor: l.floor.unwrap_or(0),
        trusted: l.floor.is_some() && (l.holder.is_none() || l.token > 0),
    });
    Snapshot {
        settings,
        lease,
        renew_marker: view.lease.as_ref().and_then(|l| l.renew).map(|r| r.to_string()),
        candidates,
        ceiling: view.lock.ceiling,
        highest_token: view.lock.highest,
        fresh_reservation,
    }
}

impl World {
    fn rv(&mut self) -> u16 {
        self.next_rv += 1;
        self.next_rv
    }

    fn hand(&mut self, token: i64) {
        if self.handed.last().is_some_and(|last| token <= *last) {
            self.broken.get_or_insert("I2: a token handed to a holder is not above every earlier one");
        }
        if token > self.api.lock.ceiling {
            self.broken.get_or_insert("I2: a token above the reservation was handed out");
        }
        self.handed.push(token);
    }

    /// The Lease the operator writes: `holder` (or free), keeping the last token when free.
    fn write_lease(&mut self, base: Option<&LeaseObj>, holder: Option<&Grant>, floor: Option<i64>) -> LeaseObj {
        let rv = self.rv();
        let token = holder.map_or(base.map_or(0, |b| b.token), |g| g.token);
        if token > self.api.lock.ceiling || floor.is_some_and(|f| f > self.api.lock.ceiling) {
            self.broken.get_or_insert("I2: the Lease was written above the reservation");
        }
        if holder.is_some() && self.handed.last().is_some_and(|last| token < *last) {
            self.broken.get_or_insert("I2: the operator moved the Lease's token below one it handed out");
        }
        let lease = LeaseObj {
            rv,
            holder: holder.map(|g| (g.identity.clone(), g.uid.clone(), g.kind)),
            token,
            floor: floor.or(base.and_then(|b| b.floor)),
            renew: holder.map(|_| rv),
        };
        self.api.lease = Some(lease.clone());
        lease
    }

    /// One step of operator `n`: decide on its session view, apply the one write.
    fn step(&mut self, n: usize, bug: Option<Bug>, settings: Settings) {
        let session =
            self.ops[n].session.clone().unwrap_or(Session { view: self.ops[n].cache.clone(), fresh_reservation: None });
        let snap = snapshot(&session.view, session.fresh_reservation, settings);
        let now = Duration::from_secs(self.now.into());
        let step = match machine::step(&snap, now, &self.ops[n].clocks) {
            Ok(s) => s,
            Err(_) => {
                self.ops[n].session = None;
                return;
            }
        };
        self.ops[n].clocks = step.clocks;
        let mut view = session.view;
        let mut fresh = None;
        let ok = match step.plan.decision {
            Decision::Reserve { from, to } => {
                if self.api.lock.rv == view.lock.rv {
                    self.api.lock.ceiling = to;
                    self.api.lock.rv = self.rv();
                    view.lock = self.api.lock.clone();
                    fresh = Some(from);
                    true
                } else {
                    false
                }
            }
            Decision::CreateLease { holder, floor } => {
                if self.api.lease.is_none() {
                    view.lease = Some(self.write_lease(None, holder.as_ref(), Some(floor)));
                    true
                } else {
                    false
                }
            }
            Decision::UpdateLease { holder, floor, .. } => self.cas_lease(&mut view, holder.as_ref(), floor, bug),
            Decision::RepairLease { holder, floor } => self.cas_lease(&mut view, Some(&holder), floor, bug),
            Decision::PatchHolder(g) => self.patch_holder(&mut view, &g, bug),
            Decision::DeletePod { .. } | Decision::RejectWaiters(_) => {
                unreachable!("start timeout, skip and max-wait are not modelled")
            }
            Decision::Idle { .. } => {
                // The status view: server-side apply, no precondition (a stale writer wins).
                let lease_token = view.lease.as_ref().map_or(0, |l| l.token);
                let highest = view.lock.highest.max(lease_token);
                if highest != view.lock.highest {
                    self.api.lock.highest = highest;
                    self.api.lock.rv = self.rv();
                }
                false
            }
        };
        self.ops[n].session = ok.then_some(Session { view, fresh_reservation: fresh });
    }

    fn cas_lease(&mut self, view: &mut View, holder: Option<&Grant>, floor: Option<i64>, bug: Option<Bug>) -> bool {
        let (Some(seen), Some(current)) = (view.lease.clone(), self.api.lease.clone()) else { return false };
        if seen.rv != current.rv && bug != Some(Bug::LeaseWithoutPrecondition) {
            return false;
        }
        view.lease = Some(self.write_lease(Some(&seen), holder, floor));
        true
    }

    /// The pod patch (annotations + gate removal) or claim status patch, with UID and
    /// resourceVersion preconditions.
    fn patch_holder(&mut self, view: &mut View, g: &Grant, bug: Option<Bug>) -> bool {
        let rv_ok = |rv: u16| bug == Some(Bug::HolderPatchWithoutPrecondition) || rv.to_string() == g.resource_version;
        match g.kind {
            HolderKind::Pod => {
                let i = POD_NAMES.iter().position(|n| *n == g.name).unwrap();
                let rv = self.rv();
                let Some(p) = self.api.pods[i].as_mut().filter(|p| p.uid == g.uid && rv_ok(p.rv)) else { return false };
                let new_grant = p.gated || p.token != Some(g.token);
                (p.gated, p.token, p.rv) = (false, Some(g.token), rv);
                view.pods[i] = Some(p.clone());
                if new_grant {
                    self.hand(g.token);
                }
                true
            }
            HolderKind::Claim => {
                let i = CLAIM_NAMES.iter().position(|n| *n == g.name).unwrap();
                let rv = self.rv();
                let Some(c) = self.api.claims[i].as_mut().filter(|c| c.uid == g.uid && rv_ok(c.rv)) else {
                    return false;
                };
                let new_grant = c.token != Some(g.token);
                (c.token, c.rv) = (Some(g.token), rv);
                view.claims[i] = Some(c.clone());
                if new_grant {
                    self.hand(g.token);
                }
                true
            }
        }
    }

    fn kind_differs(&self, n: usize, k: &Kind) -> bool {
        let (c, a) = (&self.ops[n].cache, &self.api);
        match k {
            Kind::Lease => c.lease != a.lease,
            Kind::Lock => c.lock != a.lock,
            Kind::Pods => c.pods != a.pods,
            Kind::Claims => c.claims != a.claims,
        }
    }

    /// Renewal by claim `i`'s process: succeeds while the Lease names it.
    fn renew(&mut self, i: usize) -> bool {
        let uid = format!("{}-0", CLAIM_NAMES[i]);
        let names_it = self
            .api
            .lease
            .as_ref()
            .and_then(|l| l.holder.as_ref())
            .is_some_and(|(n, u, _)| n == CLAIM_NAMES[i] && *u == uid);
        if !names_it {
            return false;
        }
        let rv = self.rv();
        let lease = self.api.lease.as_mut().unwrap();
        (lease.rv, lease.renew) = (rv, Some(rv));
        self.procs[i].last_renew = self.now;
        true
    }

    /// Holders whose work runs now: (token, excused) where excused means a lost node or a
    /// process paused past its renew deadline. An ungated pod counts from the moment it is
    /// ungated (it may start at any time), unless it was deleted before it started:
    /// kube-scheduler never binds a terminating pod.
    fn running(&self) -> Vec<(i64, bool, String)> {
        let mut out = vec![];
        for (i, p) in self.api.pods.iter().enumerate() {
            if let Some(p) = p
                && !p.gated
                && (p.phase == PodPhase::Running || (p.phase == PodPhase::Pending && !p.deleting))
            {
                out.push((p.token.unwrap_or(0), p.node_lost, POD_NAMES[i].to_string()));
            }
        }
        for (i, c) in self.procs.iter().enumerate() {
            if let Some(t) = c.holding {
                out.push((t, self.now >= c.last_renew + RENEW_DEADLINE, CLAIM_NAMES[i].to_string()));
            }
        }
        out
    }
}

fn mutual_exclusion(w: &World) -> bool {
    let running = w.running();
    running.iter().enumerate().all(|(i, a)| running[i + 1..].iter().all(|b| (a.1 && a.0 < b.0) || (b.1 && b.0 < a.0)))
}

impl Model for LockModel {
    type State = World;
    type Action = Action;

    fn init_states(&self) -> Vec<World> {
        vec![self.initial()]
    }

    fn actions(&self, w: &World, out: &mut Vec<Action>) {
        if w.broken.is_some() {
            return;
        }
        for n in 0..w.ops.len() {
            out.push(Action::Step(n));
            for k in [Kind::Lease, Kind::Lock, Kind::Pods, Kind::Claims] {
                if w.kind_differs(n, &k) {
                    out.push(Action::Sync(n, k));
                }
            }
            if w.restarts < self.cfg.restarts {
                out.push(Action::Restart(n));
            }
        }
        if w.now < self.cfg.max_time {
            out.push(Action::Tick);
        }
        let fault = w.faults < self.cfg.faults;
        for (i, p) in w.api.pods.iter().enumerate() {
            match p {
                Some(p) => {
                    if !p.gated && !p.deleting && p.phase == PodPhase::Pending {
                        out.push(Action::PodStarts(i));
                    }
                    if p.phase == PodPhase::Running && !p.node_lost {
                        out.push(Action::PodSucceeds(i));
                    }
                    if !p.deleting && p.phase != PodPhase::Succeeded {
                        out.push(Action::PodDeleted(i));
                    }
                    if p.deleting && !p.node_lost {
                        out.push(Action::PodGone(i));
                    }
                    if fault && p.phase == PodPhase::Running && !p.node_lost {
                        out.push(Action::NodeLost(i));
                    }
                    if fault && self.cfg.forge && p.gated && !p.deleting {
                        out.push(Action::LeaseForged(i));
                    }
                }
                None if w.recreated & (1 << i) == 0 => out.push(Action::PodRecreated(i)),
                None => {}
            }
        }
        for (i, proc_) in w.procs.iter().enumerate() {
            let claim = w.api.claims[i].as_ref();
            if !proc_.done && claim.is_some_and(|c| c.token.is_some()) && !proc_.paused {
                out.push(Action::ClaimLearns(i));
            }
            if proc_.holding.is_some() && !proc_.paused {
                out.push(Action::ClaimRenews(i));
                out.push(Action::ClaimReleases(i));
                if fault {
                    out.push(Action::ClaimPaused(i));
                }
            }
            if proc_.paused {
                out.push(Action::ClaimResumed(i));
            }
            if fault && claim.is_some() {
                out.push(Action::ClaimDeleted(i));
            }
        }
        if fault && w.api.lease.is_some() {
            out.push(Action::LeaseDeleted);
        }
    }

    fn next_state(&self, w: &World, action: Action) -> Option<World> {
        let mut w = w.clone();
        match action {
            Action::Step(n) => {
                let settings = Settings { node_loss_timeout: Duration::from_secs(self.cfg.node_loss_secs), ..SETTINGS };
                w.step(n, self.cfg.bug, settings)
            }
            Action::Sync(n, o) => {
                let (api, cache) = (&w.api, &mut w.ops[n].cache);
                match o {
                    Kind::Lease => cache.lease = api.lease.clone(),
                    Kind::Lock => cache.lock = api.lock.clone(),
                    Kind::Pods => cache.pods = api.pods.clone(),
                    Kind::Claims => cache.claims = api.claims.clone(),
                }
            }
            Action::Restart(n) => {
                w.ops[n] = Operator { cache: w.api.clone(), session: None, clocks: Clocks::default() };
                w.restarts += 1;
            }
            Action::Tick => {
                w.now += 1;
                let now = w.now;
                for p in &mut w.procs {
                    // The holder's renew loop: no successful renewal for the deadline -> lost,
                    // its work stopped (a paused process notices only when it runs again).
                    if p.holding.is_some() && !p.paused && now >= p.last_renew + RENEW_DEADLINE {
                        p.holding = None;
                    }
                }
            }
            Action::PodStarts(i) => w.api.pods[i].as_mut()?.phase = PodPhase::Running,
            Action::PodSucceeds(i) => {
                let rv = w.rv();
                let p = w.api.pods[i].as_mut()?;
                (p.phase, p.rv) = (PodPhase::Succeeded, rv);
            }
            Action::PodDeleted(i) => {
                let rv = w.rv();
                let p = w.api.pods[i].as_mut()?;
                (p.deleting, p.rv) = (true, rv);
            }
            Action::PodGone(i) => w.api.pods[i] = None,
            Action::PodRecreated(i) => {
                w.recreated |= 1 << i;
                let rv = w.rv();
                w.api.pods[i] = Some(PodObj {
                    rv,
                    uid: format!("{}-1", POD_NAMES[i]),
                    created: created(i, 1),
                    gated: true,
                    phase: PodPhase::Pending,
                    deleting: false,
                    token: None,
                    node_lost: false,
                });
            }
            Action::NodeLost(i) => {
                w.faults += 1;
                let rv = w.rv();
                let p = w.api.pods[i].as_mut()?;
                (p.node_lost, p.rv) = (true, rv);
            }
            Action::ClaimLearns(i) => {
                let token = w.api.claims[i].as_ref()?.token?;
                w.procs[i].done = true;
                let start = w.now;
                if w.renew(i) {
                    w.procs[i].holding = Some(token);
                    w.procs[i].last_renew = start;
                }
            }
            Action::ClaimRenews(i) => {
                if !w.renew(i) {
                    w.procs[i].holding = None;
                }
            }
            Action::ClaimPaused(i) => {
                w.faults += 1;
                w.procs[i].paused = true;
            }
            Action::ClaimResumed(i) => {
                w.procs[i].paused = false;
                if w.now >= w.procs[i].last_renew + RENEW_DEADLINE {
                    w.procs[i].holding = None;
                }
            }
            Action::ClaimReleases(i) => {
                w.procs[i].holding = None;
                let names_it =
                    w.api.lease.as_ref().and_then(|l| l.holder.as_ref()).is_some_and(|(n, _, _)| n == CLAIM_NAMES[i]);
                if names_it {
                    let rv = w.rv();
                    let lease = w.api.lease.as_mut().unwrap();
                    (lease.holder, lease.renew, lease.rv) = (None, None, rv);
                }
            }
            Action::ClaimDeleted(i) => {
                w.faults += 1;
                w.api.claims[i] = None;
            }
            Action::LeaseDeleted => {
                w.faults += 1;
                w.api.lease = None;
            }
            Action::LeaseForged(i) => {
                w.faults += 1;
                let rv = w.rv();
                let p = w.api.pods[i].as_ref()?;
                let token = w.api.lock.highest + 1;
                let holder = Some((POD_NAMES[i].to_string(), p.uid.clone(), HolderKind::Pod));
                let floor = w.api.lease.as_ref().and_then(|l| l.floor).or(Some(0));
                w.api.lease = Some(LeaseObj { rv, holder, token, floor, renew: Some(rv) });
            }
        }
        Some(w)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(I1, |_, w: &World| mutual_exclusion(w)),
            Property::always(I2, |_, w: &World| w.broken.is_none()),
            Property::sometimes(HANDOVER, |_, w: &World| w.handed.len() >= 2),
        ]
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Runs the checker breadth first to `depth` (or `LEASEHOLD_MODEL_DEPTH`), prints what it
/// explored, and returns it.
fn check(name: &str, cfg: Config, depth: usize) -> impl Checker<LockModel> + use<> {
    let depth = env_usize("LEASEHOLD_MODEL_DEPTH", depth + env_usize("LEASEHOLD_MODEL_EXTRA_DEPTH", 0));
    let states = env_usize("LEASEHOLD_MODEL_STATES", 50_000_000);
    let started = Instant::now();
    let checker = LockModel { cfg: cfg.clone() }
        .checker()
        .threads(2)
        .target_max_depth(depth)
        .target_state_count(states)
        .spawn_bfs()
        .join();
    // Straight to stderr (not eprintln!, which the test harness captures): `make test` shows
    // what each model run explored.
    let _ = writeln!(
        std::io::stderr(),
        "model {name}: {cfg:?}: {} states ({} unique), depth {} (bound {depth}), {:.1} s",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed().as_secs_f64()
    );
    checker
}

fn trace(checker: &impl Checker<LockModel>, property: &'static str) -> Option<String> {
    let path = checker.discovery(property)?;
    let mut out = String::new();
    for (state, action) in path.into_vec() {
        if let Some(a) = action {
            let _ =
                writeln!(out, "  {a:?}   (now={} Lease={:?} handed={:?})", state.now, state.api.lease, state.handed);
        }
    }
    let last = checker.discovery(property)?.last_state().clone();
    let _ = writeln!(out, "  final: running={:?} handed={:?} broken={:?}", last.running(), last.handed, last.broken);
    Some(out)
}

fn assert_safe(name: &str, cfg: Config, depth: usize) {
    let checker = check(name, cfg, depth);
    for property in [I1, I2] {
        if let Some(t) = trace(&checker, property) {
            panic!("model {name}: {property} violated:\n{t}");
        }
    }
    assert!(
        checker.discovery(HANDOVER).is_some(),
        "model {name}: the bound never reaches a second grant: it explores nothing interesting"
    );
}

#[test]
fn pods_two_operators_lagging_caches_restarts_and_third_party_lease_edits() {
    let cfg = Config { pods: 2, operators: 2, max_time: 4, ..Config::BASE };
    assert_safe("pods", cfg, 9);
}

#[test]
fn claims_renewal_expiry_pause_and_claim_deletion() {
    let cfg = Config { pods: 1, claims: 1, max_time: 6, ..Config::BASE };
    assert_safe("claims", cfg, 11);
}

/// After a node-loss takeover: the zombie keeps running on its lost node while its successor
/// finishes (the interleaving where a repair once wrote the zombie back
/// into the Lease with its lower token).
#[test]
fn after_a_node_loss_takeover_the_zombie_is_never_written_back() {
    let cfg = Config { pods: 2, max_time: 1, restarts: 0, start_held: true, node_loss_secs: 1, ..Config::BASE };
    assert_safe("zombie", cfg, 14);
}

/// The checker can fail: with the resourceVersion precondition removed from the patch that
/// ungates a holder, an operator that finishes a grant from a stale view ungates a pod with a
/// token below one already handed out.
#[test]
fn a_planted_bug_holder_patch_without_precondition_is_caught() {
    planted(Bug::HolderPatchWithoutPrecondition, 9);
}

/// The checker can fail: without the Lease's compare-and-swap, two operators with different
/// views both change the holder.
#[test]
fn a_planted_bug_lease_update_without_precondition_is_caught() {
    planted(Bug::LeaseWithoutPrecondition, 9);
}

fn planted(bug: Bug, depth: usize) {
    let cfg = Config { pods: 2, operators: 2, faults: 0, bug: Some(bug), ..Config::BASE };
    let checker = check(&format!("planted {bug:?}"), cfg, depth);
    let t = trace(&checker, I1)
        .or_else(|| trace(&checker, I2))
        .expect("the checker must find the double grant the planted bug allows");
    eprintln!("counterexample found, as it must be:\n{t}");
}
