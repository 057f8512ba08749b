//! What the scenarios measured, as written to `target/bench/results.json`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::env::ServerLoad;
use crate::stats::{Summary, summarize};

/// Library names used as keys.
pub const OURS: &str = "leasehold";
/// kube-lease-manager.
pub const KLM: &str = "kube-lease-manager";
/// kube-leader-election.
pub const KLE: &str = "kube-leader-election";

/// Latency samples of one library in one scenario.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    /// How it was measured.
    pub method: String,
    /// Summary of `samples_ms`.
    pub summary: Summary,
    /// Every sample, milliseconds.
    pub samples_ms: Vec<f64>,
    /// Failed attempts (API errors, timeouts).
    pub errors: u64,
    /// Wall time of the scenario, seconds.
    pub elapsed_s: f64,
    /// Where the time goes, phase by phase (as seen by the bench's own watches), if measured.
    pub phases: Vec<(String, Summary)>,
    /// API requests of the run, from `apiserver_request_total` (counted when the run was alone
    /// on the cluster), if measured.
    pub api: Option<ApiCost>,
}

/// API cost of a handover run: per handover and per second per contender.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ApiCost {
    /// Candidates (processes that hold or wait) in the run.
    pub contenders: usize,
    /// The counted window, seconds.
    pub window_s: f64,
    /// Per handover (requests, writes, 409s, breakdown by resource and verb).
    pub per_handover: Traffic,
    /// Requests (not WATCH) per second per contender.
    pub requests_per_s_per_contender: f64,
    /// Writes per second per contender.
    pub writes_per_s_per_contender: f64,
    /// What was counted (resources; what was left out).
    pub counted: String,
}

/// One row of the latency vs API cost table: a library in one configuration, voluntary
/// handover latency and what it costs the API server.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LeaseCost {
    /// Library.
    pub library: String,
    /// Its configuration ("defaults: lease 30 s, grace 5 s", "poll 1 s, ttl 15 s", ...).
    pub config: String,
    /// The handover run (samples, summary, `api` filled in).
    pub latency: Latency,
}

impl Latency {
    /// From samples.
    pub fn new(method: impl Into<String>, samples_ms: Vec<f64>, errors: u64, elapsed_s: f64) -> Self {
        Latency {
            method: method.into(),
            summary: summarize(&samples_ms),
            samples_ms,
            errors,
            elapsed_s,
            phases: vec![],
            api: None,
        }
    }
}

/// Crash failover of one library.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Failover {
    /// How it was measured.
    pub method: String,
    /// The configured lease duration, seconds.
    pub lease_duration_s: f64,
    /// Time from SIGKILL to the next holder's grant, minus the lease duration (ms).
    pub from_kill_minus_lease: Summary,
    /// Time from the dead holder's last renewal (Lease `renewTime`) to the next grant, minus the
    /// lease duration (ms): how long after expiry the takeover came.
    pub from_renewal_minus_lease: Summary,
    /// Raw samples: time from the kill (ms).
    pub from_kill_ms: Vec<f64>,
    /// Raw samples: time from the last renewal (ms).
    pub from_last_renewal_ms: Vec<f64>,
    /// Failed samples.
    pub errors: u64,
    /// Wall time, seconds.
    pub elapsed_s: f64,
}

impl Failover {
    /// From raw samples.
    pub fn new(
        method: impl Into<String>,
        lease_s: f64,
        from_kill: Vec<f64>,
        from_renew: Vec<f64>,
        errors: u64,
        elapsed_s: f64,
    ) -> Self {
        let minus = |v: &[f64]| summarize(&v.iter().map(|x| x - lease_s * 1e3).collect::<Vec<_>>());
        Failover {
            method: method.into(),
            lease_duration_s: lease_s,
            from_kill_minus_lease: minus(&from_kill),
            from_renewal_minus_lease: minus(&from_renew),
            from_kill_ms: from_kill,
            from_last_renewal_ms: from_renew,
            errors,
            elapsed_s,
        }
    }
}

/// API traffic of a window, normalised per event (grant or handover).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Traffic {
    /// Requests (all verbs but WATCH) per event, on the library's resources.
    pub requests_per: f64,
    /// Writes per event.
    pub writes_per: f64,
    /// HTTP 409 answers per event.
    pub conflicts_per: f64,
    /// "resource VERB [code]" -> count per event, biggest first.
    pub breakdown_per: Vec<(String, f64)>,
}

/// One-shot `leasehold lock` runs (claim, grant, release), one after another on a free lock.
#[derive(Clone, Debug, Default, Serialize)]
pub struct OneShot {
    /// How it was run.
    pub method: String,
    /// Runs counted.
    pub runs: usize,
    /// Runs that did not exit 0.
    pub failed: usize,
    /// Wall time of one run (process start -> exit), milliseconds.
    pub wall_ms: Summary,
    /// API traffic per run, every party (the CLI and the operator, status and Events included).
    pub per_run: Traffic,
}

/// Scenario 4.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Throughput {
    /// Locks.
    pub locks: usize,
    /// Clients per lock.
    pub clients_per_lock: usize,
    /// Measured window, seconds (after warm-up).
    pub window_s: f64,
    /// Grants in the window (acquire() calls that returned a guard).
    pub grants: u64,
    /// Grants per second.
    pub grants_per_s: f64,
    /// The operator's own `leasehold_grants_total` in the window.
    pub operator_grants: f64,
    /// API traffic per grant.
    pub traffic: Traffic,
    /// Operator CPU seconds per second of the window.
    pub operator_cpu_cores: f64,
    /// Acquire errors (timeouts, API errors) in the whole run.
    pub errors: u64,
    /// Client errors inside the measured window, by kind (`acquire: Kube create claim 500`).
    pub errors_in_window: std::collections::BTreeMap<String, u64>,
    /// The operator's own 409 answers (`leasehold_conflicts_total`) in the window; the rest of
    /// the 409s in `traffic` are the clients'.
    pub operator_conflicts: f64,
    /// API writes in the window divided by the operator's grants (`traffic.writes_per` divides
    /// by the clients' grants).
    pub writes_per_operator_grant: f64,
    /// Time to create the locks and for the operator to take them into service, seconds.
    pub setup_s: f64,
    /// Seconds from then until every client had created its first claim; the warm-up runs after
    /// that, so the window holds no client's first claim.
    pub all_queued_s: f64,
    /// Seconds from setup until every client had been granted once (the steady state: every lock
    /// handing over between its clients); the warm-up runs after that. Over 300 s fails the run.
    pub all_granted_s: f64,
    /// Clients that got no grant in the window (a waiter starved for the whole window: its
    /// acquire() may still have been waiting, within the bench's 120 s wait, when the window
    /// ended). The honest companion of `grants_per_s`: grants from a few locks look as fast.
    pub clients_unserved: usize,
    /// Locks whose clients got no grant in the window.
    pub locks_unserved: usize,
    /// Grants per lock in the window: median and highest.
    pub grants_per_lock_p50_max: (u64, u64),
    /// The servers in the window (API and etcd write rates, watches before and during).
    pub load: Option<ServerLoad>,
}

/// Scenario 4b: open loop below saturation. Acquire/hold/release cycles arrive at a fixed rate
/// (one every 1/rate s, each on the next lock round-robin, so a lock is free when its turn comes),
/// whatever the earlier ones are doing.
#[derive(Clone, Debug, Default, Serialize)]
pub struct OpenLoop {
    /// Locks.
    pub locks: usize,
    /// Offered arrivals per second.
    pub offered_per_s: f64,
    /// Where the offered rate came from.
    pub offered_from: String,
    /// Hold time of each cycle, ms.
    pub hold_ms: u64,
    /// Measured window, seconds.
    pub window_s: f64,
    /// Arrivals in the window.
    pub arrivals: u64,
    /// acquire() calls that returned a guard inside the window.
    pub grants: u64,
    /// `grants / window_s`.
    pub grants_per_s: f64,
    /// acquire() called -> returned, for arrivals in the window that got the lock.
    pub grant_latency: Summary,
    /// Every sample, ms.
    pub samples_ms: Vec<f64>,
    /// Cycles that had not finished 120 s after the window (counted as errors too).
    pub unfinished: u64,
    /// Most cycles in flight at once.
    pub max_in_flight: u64,
    /// Client errors of arrivals in the window, by kind.
    pub errors_in_window: BTreeMap<String, u64>,
    /// API traffic per grant (all clients and the operator, net of the idle cluster's traffic).
    pub traffic: Traffic,
    /// Operator CPU seconds per second of the window.
    pub operator_cpu_cores: f64,
    /// The servers in the window.
    pub load: ServerLoad,
}

/// Scenario 6b: the scale namespace's locks with holders and waiters, in a steady window.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ScaleHeld {
    /// Locks in the namespace.
    pub locks: usize,
    /// Locks held by running pods (gated pods the operator ungated; kwok runs them).
    pub pod_holders: usize,
    /// Locks held by `Holder::acquire()` guards with default timings, renewing.
    pub claim_holders: usize,
    /// Gated pods queued behind pod-held locks.
    pub pod_waiters: usize,
    /// Operator start to every holder and waiter in place, seconds.
    pub setup_s: f64,
    /// Pods Running when the window started.
    pub pods_running: usize,
    /// The operator's `leasehold_locks_held` / `leasehold_waiters` when the window started.
    pub locks_held_metric: f64,
    pub waiters_metric: f64,
    /// The steady window, seconds.
    pub window_s: f64,
    /// Operator RSS at the window's start / end, largest seen in the window, and VmHWM since its
    /// start (setup included), MiB.
    pub rss_start_mib: f64,
    pub rss_end_mib: f64,
    pub rss_window_max_mib: f64,
    pub rss_peak_mib: f64,
    /// Operator CPU seconds per second of the window.
    pub operator_cpu_cores: f64,
    /// Lock reconciles per second (`leasehold_reconcile_duration_seconds_count`).
    pub reconciles_per_s: f64,
    /// Failed reconciles, grants and Lease 409s the operator counted in the window.
    pub reconcile_errors: f64,
    pub grants: f64,
    pub operator_conflicts: f64,
    /// Claim holders that lost their lock in the window.
    pub claims_lost: usize,
    /// The servers in the window.
    pub load: ServerLoad,
    /// Writes per second in the window by resource and verb (net of the idle cluster's).
    pub writes_breakdown_per_s: Vec<(String, f64)>,
}

/// One headline figure over the repeats.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Spread {
    /// Figure.
    pub name: String,
    /// Unit.
    pub unit: String,
    /// One value per repeat, in run order (repeat 1 is the main run).
    pub values: Vec<f64>,
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Spread {
    /// From the values (NaN for a repeat that failed; left out of min/median/max).
    pub fn new(name: &str, unit: &str, values: Vec<f64>) -> Spread {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        let (min, median, max) = if v.is_empty() {
            (f64::NAN, f64::NAN, f64::NAN)
        } else {
            (v[0], crate::stats::percentile(&v, 0.5), v[v.len() - 1])
        };
        Spread { name: name.into(), unit: unit.into(), values, min, median, max }
    }
}

/// Repeats 2 and 3 of the headline scenarios (repeat 1 is the main run) and the spread.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Repeats {
    /// Sizes of the extra repeats.
    pub method: String,
    /// Repeats 2.. : Leasehold's handover, failover and closed-loop throughput.
    pub handover: Vec<Option<Latency>>,
    pub failover: Vec<Option<Failover>>,
    pub throughput: Vec<Option<Throughput>>,
    /// min / median / max of each headline figure over all repeats.
    pub spread: Vec<Spread>,
}

/// Scenario 5, per library.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Herd {
    /// Waiters.
    pub waiters: usize,
    /// Handovers observed.
    pub handovers: usize,
    /// Wall time of the measured window, seconds.
    pub elapsed_s: f64,
    /// API traffic per handover (whole window, including the waiters joining).
    pub traffic: Traffic,
    /// Grants made while another grant was still held (two holders at once).
    pub overlaps: u64,
    /// Time from a release to the next grant.
    pub handover: Summary,
    /// Errors.
    pub errors: u64,
    /// Bounds and notes.
    pub method: String,
}

/// A semaphore (`spec.maxHolders`) under contention: holder-library clients cycle through its
/// slots (acquire, hold, release, acquire again).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Semaphore {
    /// How it was run and what a sample is.
    pub method: String,
    /// The lock's `spec.maxHolders`.
    pub max_holders: usize,
    /// Clients (one claim at a time each, holding or waiting).
    pub clients: usize,
    /// Grants counted (every `acquire()` that returned in the window).
    pub grants: usize,
    /// Wall time of the counted window, seconds.
    pub elapsed_s: f64,
    /// A slot's `release()` called -> the next holder's `acquire()` returns (ms): the i-th
    /// grant (in time order, i >= maxHolders) against the (i − maxHolders)-th release.
    pub release_to_grant: Summary,
    /// `acquire()` called -> it returns (ms), for the acquires called after every client had
    /// queued (includes the wait for a slot).
    pub acquire_to_grant: Summary,
    /// The most holders at once as the clients saw them (acquire returned .. release called):
    /// at most `max_holders`, else a client held beyond its grant.
    pub max_concurrent: usize,
    /// API traffic per grant (whole window: claims created, grants, renewals, releases, status).
    pub traffic: Traffic,
    /// Failed acquires or releases.
    pub errors: u64,
    /// Raw samples of `release_to_grant`, ms.
    pub release_to_grant_ms: Vec<f64>,
    /// Raw samples of `acquire_to_grant`, ms.
    pub acquire_to_grant_ms: Vec<f64>,
}

/// Scenario 6.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Scale {
    /// Locks.
    pub locks: usize,
    /// Creating the locks and having them taken into service (paced batches), seconds.
    pub create_s: f64,
    /// Same (kept for the JSON's readers): operator start to every lock in service, seconds.
    pub cold_take_into_service_s: f64,
    /// Writes of the cold start, per lock.
    pub cold_writes_per_lock: f64,
    /// Restart with every lock in service: start to /readyz 200, seconds.
    pub ready_s: f64,
    /// RSS at /readyz, MiB.
    pub rss_ready_mib: f64,
    /// RSS after the restart wave and the idle window, MiB.
    pub rss_settled_mib: f64,
    /// Peak RSS (VmHWM) after the restart, MiB.
    pub rss_peak_mib: f64,
    /// Changes to the namespace's leasehold objects (locks, claims, Leases, Events; counted by
    /// watch) during the first `restart_window_s` after the restart.
    pub restart_writes: f64,
    /// Length of that window.
    pub restart_window_s: f64,
    /// Changes per second to those objects in the idle window (operator running).
    pub idle_writes_per_s: f64,
    /// Same, operator stopped (should be 0: nothing else writes them).
    pub baseline_writes_per_s: f64,
    /// Length of the idle window.
    pub idle_window_s: f64,
    /// Idle window breakdown (per second).
    pub idle_breakdown: Vec<(String, f64)>,
    /// Cold start breakdown (per lock).
    pub cold_breakdown: Vec<(String, f64)>,
    /// Operator CPU seconds during the idle window.
    pub idle_cpu_s: f64,
    /// The burst (all locks created at once; `None` when the setup was paced,
    /// `BENCH_SCALE_BATCH` < locks): first create → last create answered, seconds.
    pub burst_created_s: Option<f64>,
    /// First create → every lock `Ready=True` for its generation, seconds.
    pub burst_all_ready_s: Option<f64>,
    /// Operator RSS once the burst settled, MiB.
    pub burst_rss_settled_mib: Option<f64>,
    /// Operator peak RSS (VmHWM) through the burst, MiB.
    pub burst_rss_peak_mib: Option<f64>,
    /// Requests answered 5xx during the burst (all clients).
    pub burst_server_errors: Option<f64>,
    /// Requests answered 429 during the burst (all clients).
    pub burst_throttled: Option<f64>,
    /// Warning Events in the namespace after the burst.
    pub burst_warning_events: Option<usize>,
    /// Operator CPU seconds through the burst.
    pub burst_operator_cpu_s: Option<f64>,
    /// The same namespace afterwards with held locks and waiters, steady window.
    pub held: Option<ScaleHeld>,
}

/// Everything.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Results {
    /// When (UTC).
    pub date: String,
    /// The machine.
    pub machine: BTreeMap<String, String>,
    /// Scenario sizes used.
    pub config: BTreeMap<String, String>,
    /// Scenario 1, by library.
    pub handover: BTreeMap<String, Latency>,
    /// Scenario 2.
    pub pod_handover: Option<Latency>,
    /// Scenario 3, by library.
    pub failover: BTreeMap<String, Failover>,
    /// One-shot `leasehold lock` runs and their writes.
    pub oneshot: Option<OneShot>,
    /// Scenario 4 (closed loop: the saturation point).
    pub throughput: Option<Throughput>,
    /// Scenario 4b, open loop below saturation.
    pub throughput_open: Option<OpenLoop>,
    /// Latency vs API cost of the Lease crates in several configurations, Leasehold beside them.
    pub lease_cost: Vec<LeaseCost>,
    /// Repeats of the headline scenarios and their spread.
    pub repeats: Option<Repeats>,
    /// Scenario 5, by library.
    pub herd: BTreeMap<String, Herd>,
    /// Scenario 6.
    pub scale: Option<Scale>,
    /// A semaphore under contention (`BENCH_ONLY=semaphore`).
    pub semaphore: Option<Semaphore>,
    /// Wall time per scenario, seconds.
    pub wall_s: BTreeMap<String, f64>,
    /// What failed or could not be run.
    pub problems: Vec<String>,
}
