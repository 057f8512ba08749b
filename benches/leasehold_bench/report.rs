//! The Markdown table (`target/bench/report.md`, also printed) and the CDF plot
//! (`target/bench/handover-cdf.png`).

use std::fmt::Write as _;
use std::path::Path;

use crate::results::{Failover, KLE, KLM, Latency, OURS, Results};
use crate::stats::Summary;

/// Turns -0.0 into 0.0 for printing.
fn z(v: f64) -> f64 {
    v + 0.0
}

fn fmt_ms(v: f64) -> String {
    if !v.is_finite() {
        "–".into()
    } else if v.abs() >= 1000.0 {
        format!("{:.2} s", v / 1000.0)
    } else if v.abs() >= 10.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v:.1} ms")
    }
}

fn signed_ms(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let s = fmt_ms(v.abs());
    if v < 0.0 { format!("−{s}") } else { format!("+{s}") }
}

fn lat(s: &Summary) -> String {
    if s.n == 0 {
        return "no samples".into();
    }
    format!("{} / {} / {} (n={})", fmt_ms(s.p50), fmt_ms(s.p99), fmt_ms(s.max), s.n)
}

fn fo(f: &Failover) -> (String, String) {
    let k = &f.from_kill_minus_lease;
    let r = &f.from_renewal_minus_lease;
    (
        format!("{} / {} (n={}, lease {} s)", signed_ms(k.p50), signed_ms(k.max), k.n, f.lease_duration_s),
        format!("{} / {}", signed_ms(r.p50), signed_ms(r.max)),
    )
}

/// ours / theirs, and "N× <better>" when ours is smaller.
fn ratio(ours: f64, theirs: f64, better: &str) -> String {
    if !(ours.is_finite() && theirs.is_finite()) || theirs == 0.0 || ours == 0.0 {
        return "–".into();
    }
    let r = ours / theirs;
    if r < 0.5 { format!("{r:.4} ({:.0}× {better})", theirs / ours) } else { format!("{r:.2}") }
}

fn cell<T>(m: &std::collections::BTreeMap<String, T>, k: &str, f: impl Fn(&T) -> String) -> String {
    m.get(k).map(f).unwrap_or_else(|| "not run".into())
}

/// Verdict text for "value <= target".
fn verdict(value: f64, target: f64, unit: &str) -> String {
    if !value.is_finite() {
        "not measured".into()
    } else if value <= target {
        "met".into()
    } else {
        format!("**missed** by {:.1}{unit}", value - target)
    }
}

/// The report as Markdown.
pub fn markdown(r: &Results) -> String {
    let mut o = String::new();
    let m = &r.machine;
    let get = |k: &str| m.get(k).cloned().unwrap_or_default();
    let _ = writeln!(o, "### Measured {}\n", r.date);
    let _ = writeln!(
        o,
        "Commit {}. Machine: {} cores ({}), {} memory, Linux {}; load average {} at the start, {} at the end. \
         Control plane: `e2e/cluster.sh up bench` (etcd, kube-apiserver and kwok on the same machine). \
         Operator: release build, one process per scenario, `--namespace` of the scenario. Sizes: {}.\n",
        get("commit"),
        get("cores"),
        get("cpu"),
        get("memory"),
        get("kernel"),
        get("load_start"),
        get("load_end"),
        r.config.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
    );
    let _ = writeln!(o, "| # | scenario | metric | Leasehold | kube-lease-manager | kube-leader-election | target | |");
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|");
    // 1
    let h = &r.handover;
    if !h.is_empty() {
        let ours_h = h.get(OURS).map(|l| l.summary.clone());
        let p50 = ours_h.as_ref().map_or(f64::NAN, |s| s.p50);
        let p99 = ours_h.as_ref().map_or(f64::NAN, |s| s.p99);
        let _ = writeln!(
            o,
            "| 1 | voluntary handover | p50 / p99 / max | {} | {} | {} | p50 ≤ 10 ms, p99 ≤ 50 ms | p50 {}; p99 {} |",
            cell(h, OURS, |l: &Latency| lat(&l.summary)),
            cell(h, KLM, |l: &Latency| lat(&l.summary)),
            cell(h, KLE, |l: &Latency| lat(&l.summary)),
            verdict(p50, 10.0, " ms"),
            verdict(p99, 50.0, " ms"),
        );
        let theirs_p50 = |k: &str| h.get(k).map_or(f64::NAN, |l| l.summary.p50);
        let theirs_p99 = |k: &str| h.get(k).map_or(f64::NAN, |l| l.summary.p99);
        let min_speedup = [KLM, KLE].iter().map(|k| theirs_p50(k) / p50).fold(f64::INFINITY, f64::min);
        let _ = writeln!(
            o,
            "| 1 | | ours / theirs, p50 (p99) | 1 | {} ({}) | {} ({}) | ≥ 50× faster | {} |",
            ratio(p50, theirs_p50(KLM), "faster"),
            ratio(p99, theirs_p99(KLM), "faster"),
            ratio(p50, theirs_p50(KLE), "faster"),
            ratio(p99, theirs_p99(KLE), "faster"),
            if min_speedup.is_finite() {
                if min_speedup >= 50.0 {
                    format!("met ({min_speedup:.0}×)")
                } else {
                    format!("**missed** ({min_speedup:.1}×)")
                }
            } else {
                "not measured".into()
            }
        );
    }
    // 2
    if let Some(p) = &r.pod_handover {
        let _ = writeln!(
            o,
            "| 2 | pod handover (Succeeded → next pod ungated) | p50 / p99 / max | {} | n/a | n/a | p99 ≤ 200 ms | {} |",
            lat(&p.summary),
            verdict(p.summary.p99, 200.0, " ms")
        );
    }
    // 3
    let f = &r.failover;
    if !f.is_empty() {
        let ours_f = f.get(OURS).map_or(f64::NAN, |x| x.from_kill_minus_lease.max);
        let _ = writeln!(
            o,
            "| 3 | crash failover (SIGKILL) | from kill − lease duration: p50 / max | {} | {} | {} | ≤ +500 ms | {} |",
            cell(f, OURS, |x| fo(x).0),
            cell(f, KLM, |x| fo(x).0),
            cell(f, KLE, |x| fo(x).0),
            verdict(ours_f, 500.0, " ms"),
        );
        let _ = writeln!(
            o,
            "| 3 | | from last renewal − lease duration: p50 / max | {} | {} | {} | | |",
            cell(f, OURS, |x| fo(x).1),
            cell(f, KLM, |x| fo(x).1),
            cell(f, KLE, |x| fo(x).1),
        );
        let fk = |k: &str| f.get(k).map_or(f64::NAN, |x| x.from_kill_minus_lease.p50 + x.lease_duration_s * 1e3);
        let _ = writeln!(
            o,
            "| 3 | | ours / theirs, p50 time from kill to takeover | 1 | {} | {} | | |",
            ratio(fk(OURS), fk(KLM), "faster"),
            ratio(fk(OURS), fk(KLE), "faster")
        );
    }
    // 4c
    if let Some(x) = &r.oneshot {
        let by: Vec<String> = x.per_run.breakdown_per.iter().map(|(k, v)| format!("{k} {v:.2}")).collect();
        let _ = writeln!(
            o,
            "| 4c | one-shot `leasehold lock -- true` on a free lock (n={}, {} failed) | writes / requests per run; wall time p50 / p99 | {:.1} / {:.1}; {:.0} ms / {:.0} ms | | | states its own total | by request: {} |",
            x.runs,
            x.failed,
            z(x.per_run.writes_per),
            z(x.per_run.requests_per),
            x.wall_ms.p50,
            x.wall_ms.p99,
            by.join(", ")
        );
    }
    // 4
    if let Some(t) = &r.throughput {
        let _ = writeln!(
            o,
            "| 4 | throughput, closed loop: the saturation point ({} locks × {} clients ping-pong, {:.0} s) | grants/s | {:.1} | n/a | n/a | | |",
            t.locks, t.clients_per_lock, t.window_s, t.grants_per_s
        );
        let _ = writeln!(
            o,
            "| 4 | | API requests / writes / 409s per grant | {:.1} / {:.1} / {:.2} | | | ≤ 2 writes per grant | {} |",
            z(t.traffic.requests_per),
            z(t.traffic.writes_per),
            z(t.traffic.conflicts_per),
            verdict(t.traffic.writes_per, 2.0, " writes")
        );
        let _ = writeln!(
            o,
            "| 4 | | writes per operator grant; 409s per grant by request (claim status is written by the operator only; Lease 409s the operator counted itself: {:.0}) | {:.1}; {} | | | | |",
            t.operator_conflicts,
            z(t.writes_per_operator_grant),
            {
                let c: Vec<String> = t
                    .traffic
                    .breakdown_per
                    .iter()
                    .filter(|(k, _)| k.ends_with(" 409"))
                    .map(|(k, v)| format!("{k} {v:.2}"))
                    .collect();
                if c.is_empty() { "none".to_string() } else { c.join(", ") }
            }
        );
        let _ = writeln!(
            o,
            "| 4 | | clients / locks with no grant in the window; grants per lock, median / highest | {} / {}; {} / {} | | | 0 / 0 | {} |",
            t.clients_unserved,
            t.locks_unserved,
            t.grants_per_lock_p50_max.0,
            t.grants_per_lock_p50_max.1,
            if t.clients_unserved == 0 { "met" } else { "**missed**: waiters starved" }
        );
        let errors = if t.errors_in_window.is_empty() {
            "none".to_string()
        } else {
            t.errors_in_window.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", ")
        };
        let _ = writeln!(
            o,
            "| 4 | | client errors in the window, by kind | {errors} | | | 0 | {} |",
            if t.errors_in_window.is_empty() { "met" } else { "**missed**" }
        );
    }
    if let Some(t) = &r.throughput_open {
        let _ = writeln!(
            o,
            "| 4b | throughput below saturation, open loop ({:.1} cycles/s offered, {:.0} s) | grants/s; grant latency p50 / p99; 5xx; client errors; writes per grant | {:.1}; {} / {}; {:.0}; {}; {:.1} | n/a | n/a | no 5xx, no client errors | {} |",
            t.offered_per_s,
            t.window_s,
            t.grants_per_s,
            fmt_ms(t.grant_latency.p50),
            fmt_ms(t.grant_latency.p99),
            z(t.load.server_errors),
            t.errors_in_window.values().sum::<u64>(),
            z(t.traffic.writes_per),
            if t.load.server_errors == 0.0 && t.errors_in_window.is_empty() { "met" } else { "**missed**" }
        );
    }
    // 5
    let hd = &r.herd;
    if !hd.is_empty() {
        let herd_cell = |k: &str| {
            cell(hd, k, |x| {
                format!(
                    "{:.1} / {:.2} ({} handovers)",
                    z(x.traffic.requests_per),
                    z(x.traffic.conflicts_per),
                    x.handovers
                )
            })
        };
        let herd_n = hd.values().next().map_or(0, |x| x.waiters);
        let _ = writeln!(
            o,
            "| 5 | herd ({herd_n} waiters, one lock) | API requests / 409s per handover | {} | {} | {} | | |",
            herd_cell(OURS),
            herd_cell(KLM),
            herd_cell(KLE)
        );
        let _ = writeln!(
            o,
            "| 5 | | handover p50 / p99; grants while another was held | {} | {} | {} | | |",
            cell(hd, OURS, |x| format!("{} / {}; {}", fmt_ms(x.handover.p50), fmt_ms(x.handover.p99), x.overlaps)),
            cell(hd, KLM, |x| format!("{} / {}; {}", fmt_ms(x.handover.p50), fmt_ms(x.handover.p99), x.overlaps)),
            cell(hd, KLE, |x| format!("{} / {}; {}", fmt_ms(x.handover.p50), fmt_ms(x.handover.p99), x.overlaps)),
        );
        let rq = |k: &str| hd.get(k).map_or(f64::NAN, |x| x.traffic.requests_per);
        let _ = writeln!(
            o,
            "| 5 | | ours / theirs, requests per handover | 1 | {} | {} | | |",
            ratio(rq(OURS), rq(KLM), "fewer"),
            ratio(rq(OURS), rq(KLE), "fewer")
        );
    }
    // 6
    if let Some(s) = r.scale.as_ref().filter(|s| s.locks > 0) {
        let _ = writeln!(
            o,
            "| 6 | scale ({} idle locks) | operator RSS: ready / settled / peak | {:.1} / {:.1} / {:.1} MiB | n/a | n/a | ≤ 64 MiB | {} |",
            s.locks,
            s.rss_ready_mib,
            s.rss_settled_mib,
            s.rss_peak_mib,
            verdict(s.rss_peak_mib.max(s.rss_settled_mib), 64.0, " MiB")
        );
        if let (Some(ready), Some(peak), Some(settled)) =
            (s.burst_all_ready_s, s.burst_rss_peak_mib, s.burst_rss_settled_mib)
        {
            let _ = writeln!(
                o,
                "| 6 | burst: {} locks created at once (created in {:.1} s) | every lock Ready | {:.1} s | n/a | n/a | ≤ 60 s | {} |",
                s.locks,
                s.burst_created_s.unwrap_or(f64::NAN),
                ready,
                verdict(ready, 60.0, " s")
            );
            let _ = writeln!(
                o,
                "| 6 | | operator RSS settled / peak; 5xx / 429 answers; Warning Events; operator CPU | {:.1} / {:.1} MiB; {:.0} / {:.0}; {}; {:.1} s | | | peak ≤ 2 × settled, no 5xx storm, no Warning per lock | {} |",
                settled,
                peak,
                z(s.burst_server_errors.unwrap_or(f64::NAN)),
                z(s.burst_throttled.unwrap_or(f64::NAN)),
                s.burst_warning_events.unwrap_or(0),
                s.burst_operator_cpu_s.unwrap_or(f64::NAN),
                if peak <= 2.0 * settled {
                    "met (peak)".to_string()
                } else {
                    format!("**missed**: peak {:.1}× settled", peak / settled)
                }
            );
        }
        let _ = writeln!(
            o,
            "| 6 | | restart → /readyz (all watches synced) | {:.2} s | | | ≤ 10 s | {} |",
            s.ready_s,
            verdict(s.ready_s, 10.0, " s")
        );
        let _ = writeln!(
            o,
            "| 6 | | writes/s while idle ({:.0} s window; changes to the namespace's locks, claims, Leases, Events, by watch) | {:.2} (operator stopped: {:.2}) | | | 0 | {} |",
            s.idle_window_s,
            z(s.idle_writes_per_s),
            z(s.baseline_writes_per_s),
            if s.idle_writes_per_s == 0.0 {
                "met".to_string()
            } else {
                format!("**missed** by {:.2} writes/s", s.idle_writes_per_s)
            }
        );
        let _ = writeln!(
            o,
            "| 6 | | writes in the first {:.0} s after the restart; setup: {} locks taken into service | {:.0}; {:.1} s, {:.1} writes per lock | | | | |",
            s.restart_window_s,
            s.locks,
            z(s.restart_writes),
            s.cold_take_into_service_s,
            s.cold_writes_per_lock
        );
    }
    if let Some(h) = r.scale.as_ref().and_then(|s| s.held.as_ref()) {
        let _ = writeln!(
            o,
            "| 6 | held: {} locks, {} held by pods, {} by renewing claims, {} pods waiting ({:.0} s window) | operator RSS end / peak; CPU; reconciles/s; API writes/s (Leasehold's) | {:.1} / {:.1} MiB; {} cores; {}; {} | n/a | n/a | no reconcile storm | |",
            h.locks,
            h.pod_holders,
            h.claim_holders,
            h.pod_waiters,
            h.window_s,
            h.rss_end_mib,
            h.rss_peak_mib,
            num(h.operator_cpu_cores, 3),
            num(h.reconciles_per_s, 2),
            num(h.load.api_writes_per_s_leasehold, 1)
        );
    }
    if let Some(x) = &r.semaphore {
        let _ = writeln!(
            o,
            "| 7 | semaphore (maxHolders {}, {} clients, {} grants) | release → next grant p50 / p99 / max; acquire() → grant p50 / p99; API writes / requests per grant; most holders at once | {}; {} / {}; {:.1} / {:.1}; {} | n/a | n/a | ≤ {} at once | {} |",
            x.max_holders,
            x.clients,
            x.grants,
            lat(&x.release_to_grant),
            fmt_ms(x.acquire_to_grant.p50),
            fmt_ms(x.acquire_to_grant.p99),
            z(x.traffic.writes_per),
            z(x.traffic.requests_per),
            x.max_concurrent,
            x.max_holders,
            if x.max_concurrent <= x.max_holders && x.errors == 0 { "met" } else { "**missed**" }
        );
    }
    let _ = writeln!(o);
    extra_tables(&mut o, r);
    if let Some(t) = &r.throughput {
        let _ = writeln!(
            o,
            "Throughput, API calls per grant by resource and verb (all clients and the operator): {}. \
             Operator CPU {:.2} cores; {} acquire errors; the operator counted {:.0} grants in the window.\n",
            t.traffic.breakdown_per.iter().take(12).map(|(k, v)| format!("{k} {v:.2}")).collect::<Vec<_>>().join(", "),
            t.operator_cpu_cores,
            t.errors,
            t.operator_grants
        );
    }
    for (k, x) in &r.herd {
        let _ = writeln!(
            o,
            "Herd, {k}: per handover {}. {}\n",
            x.traffic.breakdown_per.iter().take(8).map(|(k, v)| format!("{k} {v:.2}")).collect::<Vec<_>>().join(", "),
            x.method
        );
    }
    if let Some(x) = &r.semaphore {
        let _ = writeln!(
            o,
            "Semaphore: per grant {}; {} errors. {}\n",
            x.traffic.breakdown_per.iter().take(10).map(|(k, v)| format!("{k} {v:.2}")).collect::<Vec<_>>().join(", "),
            x.errors,
            x.method
        );
    }
    if let Some(s) = r.scale.as_ref().filter(|s| s.locks > 0) {
        let _ = writeln!(
            o,
            "Scale: cold start writes per lock: {}. Idle window writes/s: {}.\n",
            s.cold_breakdown.iter().map(|(k, v)| format!("{k} {v:.2}")).collect::<Vec<_>>().join(", "),
            if s.idle_breakdown.is_empty() {
                "none".to_string()
            } else {
                s.idle_breakdown.iter().map(|(k, v)| format!("{k} {v:.3}")).collect::<Vec<_>>().join(", ")
            }
        );
    }
    if let Some(l) = r.handover.get(OURS).filter(|l| !l.phases.is_empty()) {
        let _ = writeln!(
            o,
            "Where a Leasehold handover's time goes (p50 / p99 per phase, from the bench's own watches):\n"
        );
        for (name, sm) in &l.phases {
            let _ = writeln!(o, "- {name}: {} / {}", fmt_ms(sm.p50), fmt_ms(sm.p99));
        }
        let _ = writeln!(o);
    }
    let _ = writeln!(o, "How each figure was measured:\n");
    for (k, l) in &r.handover {
        let _ = writeln!(o, "- handover, {k}: {} ({:.0} s).", l.method, l.elapsed_s);
    }
    if let Some(p) = &r.pod_handover {
        let _ = writeln!(o, "- pod handover: {}.", p.method);
    }
    for (k, x) in &r.failover {
        let _ = writeln!(o, "- failover, {k}: {} ({} failed samples).", x.method, x.errors);
    }
    let _ = writeln!(o);
    if !r.problems.is_empty() {
        let _ = writeln!(o, "Problems in this run:\n");
        for p in &r.problems {
            let _ = writeln!(o, "- {p}");
        }
        let _ = writeln!(o);
    }
    let _ = writeln!(
        o,
        "Wall time per scenario: {}.",
        r.wall_s.iter().map(|(k, v)| format!("{k} {v:.0} s")).collect::<Vec<_>>().join(", ")
    );
    o
}

fn num(v: f64, digits: usize) -> String {
    if v.is_finite() { format!("{:.*}", digits, z(v)) } else { "–".into() }
}

fn watches(w: &crate::env::Watches) -> String {
    match w.registered_watchers {
        Some(r) => format!("{:.0} (registered watchers {:.0})", w.longrunning_watch, r),
        None => format!("{:.0}", w.longrunning_watch),
    }
}

fn rates(m: &std::collections::BTreeMap<String, f64>) -> String {
    let v: Vec<String> = m.iter().filter(|(_, v)| **v >= 0.05).map(|(k, v)| format!("{k} {v:.1}")).collect();
    if v.is_empty() { "none".into() } else { v.join(", ") }
}

/// One column of the servers' load.
fn load_rows(l: &crate::env::ServerLoad) -> Vec<(&'static str, String)> {
    vec![
        (
            "API writes/s: all resources / Leasehold's (net of the idle cluster)",
            format!("{} / {}", num(l.api_writes_per_s, 1), num(l.api_writes_per_s_leasehold, 1)),
        ),
        ("API requests/s (not WATCH, net)", num(l.api_requests_per_s, 1)),
        (
            "5xx / 429 answers in the window (by request)",
            format!(
                "{:.0} / {:.0}{}",
                z(l.server_errors),
                z(l.throttled),
                if l.server_errors_by_request.is_empty() {
                    String::new()
                } else {
                    let v: Vec<String> =
                        l.server_errors_by_request.iter().map(|(k, n)| format!("{k}: {n:.0}")).collect();
                    format!(" ({})", v.join(", "))
                }
            ),
        ),
        (
            "API server → etcd requests/s by operation (etcd_request_duration_seconds_count)",
            rates(&l.etcd_requests_per_s),
        ),
        (
            "etcd's own ops/s (etcd_mvcc_*_total)",
            l.etcd_mvcc_per_s.as_ref().map_or("etcd /metrics not reachable".into(), rates),
        ),
        (
            "open WATCHes (apiserver_longrunning_requests): before the load / window start / end",
            format!(
                "{} / {} / {}",
                l.watches_before.as_ref().map_or("–".into(), watches),
                watches(&l.watches_start),
                watches(&l.watches_end)
            ),
        ),
    ]
}

/// The tables of the latency vs API cost comparison, throughput below saturation, scale with
/// held locks and the repeats.
fn extra_tables(o: &mut String, r: &Results) {
    if !r.lease_cost.is_empty() {
        let _ = writeln!(
            o,
            "**Latency vs API cost** (voluntary handover; each configuration alone on the cluster, \
             requests from apiserver_request_total, net of the idle cluster's own traffic):\n"
        );
        let _ = writeln!(
            o,
            "| library | configuration | handovers (errors) | p50 | p99 | requests / writes per handover | requests / writes per s per contender | contenders, window |"
        );
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|");
        for row in &r.lease_cost {
            let l = &row.latency;
            let (per_h, per_s, who) = match &l.api {
                Some(a) => (
                    format!("{} / {}", num(a.per_handover.requests_per, 1), num(a.per_handover.writes_per, 1)),
                    format!("{} / {}", num(a.requests_per_s_per_contender, 3), num(a.writes_per_s_per_contender, 3)),
                    format!("{}, {:.0} s", a.contenders, a.window_s),
                ),
                None => ("–".into(), "–".into(), "–".into()),
            };
            let _ = writeln!(
                o,
                "| {} | {} | {} ({}) | {} | {} | {per_h} | {per_s} | {who} |",
                row.library,
                row.config,
                l.summary.n,
                l.errors,
                fmt_ms(l.summary.p50),
                fmt_ms(l.summary.p99)
            );
        }
        let _ = writeln!(
            o,
            "\nLeasehold's row counts both clients and the operator (locks, claims, Leases, Events); its \
             per-second figure is for a lock handed over back to back, the crates' for locks handed over \
             every hold + wait. The crates' rows count Leases only.\n"
        );
    }
    if r.throughput.is_some() || r.throughput_open.is_some() {
        let _ = writeln!(o, "**Throughput: the saturation point (closed loop) and below it (open loop):**\n");
        let closed = r.throughput.as_ref();
        let open = r.throughput_open.as_ref();
        let _ = writeln!(o, "| | closed loop (saturation point) | open loop |");
        let _ = writeln!(o, "|---|---|---|");
        let c = |f: &dyn Fn(&crate::results::Throughput) -> String| closed.map_or("not run".into(), f);
        let op = |f: &dyn Fn(&crate::results::OpenLoop) -> String| open.map_or("not run".into(), f);
        let _ = writeln!(
            o,
            "| load | {} | {} |",
            c(&|t| {
                format!(
                    "{} locks × {} clients ping-pong, {:.0} s, from the steady state (every client queued once {:.1} s and granted once {:.1} s after setup, then the warm-up)",
                    t.locks, t.clients_per_lock, t.window_s, t.all_queued_s, t.all_granted_s
                )
            }),
            op(&|t| format!(
                "{:.1} cycles/s offered ({}), {} locks round-robin, hold {} ms, {:.0} s",
                t.offered_per_s, t.offered_from, t.locks, t.hold_ms, t.window_s
            ))
        );
        let _ = writeln!(
            o,
            "| grants/s | {} | {} |",
            c(&|t| num(t.grants_per_s, 1)),
            op(&|t| format!(
                "{} ({} acquire() calls returned in the window; {} arrived in it, {} of those granted)",
                num(t.grants_per_s, 1),
                t.grants,
                t.arrivals,
                t.grant_latency.n
            ))
        );
        let _ = writeln!(
            o,
            "| grant latency, acquire() called → returned: p50 / p99 / max | not measured (closed loop) | {} |",
            op(&|t| lat(&t.grant_latency))
        );
        let _ = writeln!(
            o,
            "| writes / requests per grant | {} | {} |",
            c(&|t| format!("{} / {}", num(t.traffic.writes_per, 1), num(t.traffic.requests_per, 1))),
            op(&|t| format!("{} / {}", num(t.traffic.writes_per, 1), num(t.traffic.requests_per, 1)))
        );
        let errs = |m: &std::collections::BTreeMap<String, u64>| {
            if m.is_empty() {
                "none".to_string()
            } else {
                m.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", ")
            }
        };
        let _ = writeln!(
            o,
            "| client errors in the window, by kind | {} | {} |",
            c(&|t| errs(&t.errors_in_window)),
            op(&|t| format!("{}; most cycles in flight: {}", errs(&t.errors_in_window), t.max_in_flight))
        );
        let _ = writeln!(
            o,
            "| operator CPU (cores) | {} | {} |",
            c(&|t| num(t.operator_cpu_cores, 2)),
            op(&|t| num(t.operator_cpu_cores, 2))
        );
        let cl = closed.and_then(|t| t.load.as_ref()).map(load_rows);
        let ol = open.map(|t| load_rows(&t.load));
        let n = cl.as_ref().or(ol.as_ref()).map_or(0, Vec::len);
        for i in 0..n {
            let name = cl.as_ref().or(ol.as_ref()).map_or("", |v| v[i].0);
            let _ = writeln!(
                o,
                "| {name} | {} | {} |",
                cl.as_ref().map_or("–".into(), |v| v[i].1.clone()),
                ol.as_ref().map_or("–".into(), |v| v[i].1.clone())
            );
        }
        if let Some(t) = open {
            let verdict = if t.load.server_errors == 0.0 { "0 5xx: met" } else { "5xx answers: **missed**" };
            let _ = writeln!(o, "\nOpen loop: {verdict} (target: no 5xx below saturation).\n");
        } else {
            let _ = writeln!(o);
        }
    }
    if let Some(h) = r.scale.as_ref().and_then(|s| s.held.as_ref()) {
        let _ = writeln!(
            o,
            "**Scale with held locks** ({} locks; {} held by running pods, {} by renewing claims (Holder::acquire, default timings), {} pods queued behind held locks; {:.0} s steady window after {:.1} s setup):\n",
            h.locks, h.pod_holders, h.claim_holders, h.pod_waiters, h.window_s, h.setup_s
        );
        let _ = writeln!(o, "| metric | Leasehold |");
        let _ = writeln!(o, "|---|---|");
        let mut row = |k: &str, v: String| {
            let _ = writeln!(o, "| {k} | {v} |");
        };
        row(
            "in place at the window's start: pods Running; operator's locks held / waiters",
            format!("{}; {:.0} / {:.0}", h.pods_running, h.locks_held_metric, h.waiters_metric),
        );
        row(
            "operator RSS: window start / end / max in window; peak since start (VmHWM)",
            format!(
                "{:.1} / {:.1} / {:.1} MiB; {:.1} MiB",
                h.rss_start_mib, h.rss_end_mib, h.rss_window_max_mib, h.rss_peak_mib
            ),
        );
        row("operator CPU (cores)", num(h.operator_cpu_cores, 3));
        row(
            "lock reconciles/s; failed reconciles, grants, operator Lease 409s in the window",
            format!(
                "{}; {:.0}, {:.0}, {:.0}",
                num(h.reconciles_per_s, 2),
                z(h.reconcile_errors),
                z(h.grants),
                z(h.operator_conflicts)
            ),
        );
        row("claims that lost their lock in the window", h.claims_lost.to_string());
        for (k, v) in load_rows(&h.load) {
            row(k, v);
        }
        row(
            "writes/s by resource and verb (net)",
            if h.writes_breakdown_per_s.is_empty() {
                "none".into()
            } else {
                h.writes_breakdown_per_s.iter().map(|(k, v)| format!("{k} {v:.2}")).collect::<Vec<_>>().join(", ")
            },
        );
        let _ = writeln!(o);
    }
    if let Some(rep) = &r.repeats {
        let runs = rep.spread.iter().map(|s| s.values.len()).max().unwrap_or(0);
        let _ = writeln!(o, "**Repeats** ({}):\n", rep.method);
        let head: Vec<String> = (1..=runs).map(|i| format!("run {i}")).collect();
        let _ = writeln!(o, "| figure | {} | min | median | max |", head.join(" | "));
        let _ = writeln!(o, "|---|{}---|---|---|", "---|".repeat(runs));
        for s in &rep.spread {
            let f = |v: f64| match s.unit.as_str() {
                "ms" if s.name.starts_with("failover") => signed_ms(v),
                "ms" => fmt_ms(v),
                _ => num(v, 1),
            };
            let vals: Vec<String> = s.values.iter().map(|v| f(*v)).collect();
            let _ = writeln!(
                o,
                "| {} ({}) | {} | {} | {} | {} |",
                s.name,
                s.unit,
                vals.join(" | "),
                f(s.min),
                f(s.median),
                f(s.max)
            );
        }
        let _ = writeln!(o);
    }
}

/// Empirical CDFs of the handover latencies (log x axis) as a PNG. Needs a TrueType font for the
/// labels (DejaVu Sans or any other found under /usr/share/fonts).
pub fn plot(r: &Results, path: &Path) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let font = find_font().ok_or_else(|| anyhow::anyhow!("no .ttf font under /usr/share/fonts"))?;
    let bytes: &'static [u8] = Box::leak(std::fs::read(font)?.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow::anyhow!("font not usable"))?;
    let mut series: Vec<(String, Vec<f64>, RGBColor)> = vec![];
    let colors = [RGBColor(0, 114, 178), RGBColor(213, 94, 0), RGBColor(0, 158, 115), RGBColor(204, 121, 167)];
    for (i, (name, lat)) in r.handover.iter().enumerate() {
        series.push((format!("voluntary handover, {name}"), lat.samples_ms.clone(), colors[i % 4]));
    }
    if let Some(p) = &r.pod_handover {
        series.push(("pod handover, leasehold".into(), p.samples_ms.clone(), colors[3]));
    }
    series.retain(|s| !s.1.is_empty());
    if series.is_empty() {
        anyhow::bail!("no handover samples to plot");
    }
    let all: Vec<f64> = series.iter().flat_map(|s| s.1.iter().copied()).filter(|v| *v > 0.0).collect();
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min).max(0.1) / 1.5;
    let hi = (all.iter().copied().fold(0.0, f64::max) * 1.5).max(lo * 10.0);
    let root = BitMapBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("Handover latency CDF ({})", r.date), ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0)?;
    chart
        .configure_mesh()
        .x_desc("milliseconds (log scale)")
        .y_desc("fraction of handovers ≤ x")
        .label_style(("sans-serif", 14))
        .draw()?;
    for (name, samples, color) in &series {
        let mut s = samples.clone();
        s.sort_by(f64::total_cmp);
        let n = s.len() as f64;
        let pts: Vec<(f64, f64)> = s
            .iter()
            .enumerate()
            .flat_map(|(i, v)| [(v.max(lo), i as f64 / n), (v.max(lo), (i + 1) as f64 / n)])
            .collect();
        let c = *color;
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))?
            .label(format!("{name} (n={})", s.len()))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::LowerRight)
        .draw()?;
    root.present()?;
    Ok(())
}

fn find_font() -> Option<std::path::PathBuf> {
    let preferred = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    ];
    if let Some(p) = preferred.iter().map(std::path::PathBuf::from).find(|p| p.exists()) {
        return Some(p);
    }
    let mut stack = vec![std::path::PathBuf::from("/usr/share/fonts")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).ok()?.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "ttf") {
                return Some(p);
            }
        }
    }
    None
}
