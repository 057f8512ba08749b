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
    // 4
    if let Some(t) = &r.throughput {
        let _ = writeln!(
            o,
            "| 4 | throughput ({} locks × {} clients ping-pong, {:.0} s) | grants/s | {:.1} | n/a | n/a | | |",
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
    if let Some(s) = &r.scale {
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
    let _ = writeln!(o);
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
    if let Some(s) = &r.scale {
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
