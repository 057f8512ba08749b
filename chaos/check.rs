//! The chaos run's checker: reads a history (critical sections, fenced writes, faults) and
//! reports what broke the promise. Pure: no I/O, so its verdicts have unit tests of their own.
//!
//! Times are nanoseconds of `CLOCK_MONOTONIC`, one clock for every process of the run.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// What kind of holder a section belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A gated pod (kwok completes it); its section is "ungated until Succeeded/Failed/gone".
    Pod,
    /// A `leasehold lock` process and its command.
    Cli,
    /// A library holder (`Holder::acquire`) in the runner.
    Library,
}

/// One critical section: from the moment a holder believed it held to the moment it stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Section {
    /// Lock name.
    pub lock: String,
    /// Holder identity (pod name, or the claim identity).
    pub holder: String,
    /// Holder kind.
    pub kind: Kind,
    /// Fencing token it held with.
    pub token: i64,
    /// Start, ns.
    pub start: u64,
    /// End, ns (`u64::MAX` when it never ended within the run).
    pub end: u64,
}

/// One write to the fenced sink.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    /// Commit order at the sink (its sequence number).
    pub seq: i64,
    /// Lock name.
    pub lock: String,
    /// Writer (holder identity).
    pub writer: String,
    /// Token written with.
    pub token: i64,
    /// When it was sent, ns.
    pub at: u64,
    /// Whether the sink accepted it (token >= the highest it had accepted for the lock).
    pub accepted: bool,
}

/// A fault the nemesis injected, healed at `end`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// Fault kind (`operator-kill`, `holder-pause`, ...).
    pub kind: String,
    /// What it hit (a holder identity for `holder-pause`; a process name otherwise).
    pub target: String,
    /// Injected, ns.
    pub start: u64,
    /// Healed, ns.
    pub end: u64,
}

/// Why an overlap is allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Allowed {
    /// The older holder was paused (SIGSTOP) past its lease; all its late writes were rejected.
    PausedHolder,
    /// The older holder's node stopped reporting (node-loss takeover); all its late writes were
    /// rejected.
    NodeLoss,
}

/// Two sections of one lock that overlapped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Overlap {
    /// Lock name.
    pub lock: String,
    /// The holder with the lower token.
    pub older: String,
    /// The other one.
    pub newer: String,
    /// Overlap length, ns.
    pub ns: u64,
    /// `Some` when the overlap is allowed, and why; `None`: forbidden.
    pub allowed: Option<Allowed>,
    /// Why it is forbidden, when it is.
    pub why: String,
}

/// The checker's verdict.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// Sections (grants) per lock.
    pub grants: BTreeMap<String, usize>,
    /// Tokens that went backwards or repeated in grant order: (lock, holder, token, previous).
    pub token_errors: Vec<(String, String, i64, i64)>,
    /// Writes the sink accepted with a token below one it had accepted before.
    pub sink_errors: Vec<Write>,
    /// Writes the sink rejected (stale tokens stopped at the resource).
    pub stale_rejected: usize,
    /// Every overlap, allowed or not.
    pub overlaps: Vec<Overlap>,
}

impl Report {
    /// Overlaps that nothing allows.
    pub fn forbidden(&self) -> impl Iterator<Item = &Overlap> {
        self.overlaps.iter().filter(|o| o.allowed.is_none())
    }

    /// True when the promise held: no bad token, no bad sink write, no forbidden overlap.
    pub fn ok(&self) -> bool {
        self.token_errors.is_empty() && self.sink_errors.is_empty() && self.forbidden().next().is_none()
    }
}

/// Sections of the `leasehold lock` commands from the section log's lines (JSON: `ev`, `lock`,
/// `holder`, `token`, `t`), and how many lines could not be read. A section ends at its `end`
/// line (the command recorded it); one killed before it could (SIGKILL by the watchdog or the
/// supervisor) ends when the runner saw its process gone (`dead`, polled every 10 ms: an upper
/// bound); one with neither ran until the run ended.
pub fn sections_from_log(text: &str) -> (Vec<Section>, usize) {
    let mut open: BTreeMap<(String, i64), (String, u64)> = BTreeMap::new();
    let (mut out, mut bad) = (vec![], 0);
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            bad += 1;
            continue;
        };
        let (holder, token, t) = (
            v["holder"].as_str().unwrap_or("").to_string(),
            v["token"].as_i64().unwrap_or(0),
            v["t"].as_u64().unwrap_or(0),
        );
        let lock = v["lock"].as_str().unwrap_or("").to_string();
        match v["ev"].as_str() {
            Some("start") => {
                open.insert((holder, token), (lock, t));
            }
            Some("end" | "dead") => {
                if let Some((lock, start)) = open.remove(&(holder.clone(), token)) {
                    out.push(Section { lock, holder, kind: Kind::Cli, token, start, end: t });
                }
            }
            _ => {}
        }
    }
    out.extend(open.into_iter().map(|((holder, token), (lock, start))| Section {
        lock,
        holder,
        kind: Kind::Cli,
        token,
        start,
        end: u64::MAX,
    }));
    (out, bad)
}

/// Checks a history. Faults of kind `holder-pause` (target: holder identity) and `node-loss`
/// (target: `*`, every pod) are the only ones that allow an overlap (not `holder-cut`: a holder
/// cut off from the API server stops itself at its renew deadline, inside the lease), and only when every write
/// the older holder made after the newer one started was rejected by the sink.
pub fn check(sections: &[Section], writes: &[Write], faults: &[Fault]) -> Report {
    let mut report = Report::default();
    let mut by_lock: BTreeMap<&str, Vec<&Section>> = BTreeMap::new();
    for s in sections {
        by_lock.entry(&s.lock).or_default().push(s);
    }
    for (lock, list) in &mut by_lock {
        list.sort_by_key(|s| (s.start, s.token));
        report.grants.insert(lock.to_string(), list.len());
        // 1. Tokens strictly increase in grant order and never repeat.
        let mut seen = BTreeSet::new();
        let mut prev: Option<i64> = None;
        for s in list.iter() {
            if !seen.insert(s.token) || prev.is_some_and(|p| s.token <= p) {
                report.token_errors.push((lock.to_string(), s.holder.clone(), s.token, prev.unwrap_or(0)));
            }
            prev = Some(prev.map_or(s.token, |p| p.max(s.token)));
        }
        // 3. Overlaps.
        for (i, a) in list.iter().enumerate() {
            for b in &list[i + 1..] {
                if b.start >= a.end {
                    continue;
                }
                let (older, newer) = if a.token <= b.token { (a, b) } else { (b, a) };
                let overlap = a.end.min(b.end) - b.start;
                report.overlaps.push(classify(lock, older, newer, overlap, writes, faults));
            }
        }
    }
    // 2. The sink never accepted a lower token than one it had accepted.
    let mut highest: BTreeMap<&str, i64> = BTreeMap::new();
    let mut ordered: Vec<&Write> = writes.iter().collect();
    ordered.sort_by_key(|w| w.seq);
    for w in ordered {
        if !w.accepted {
            report.stale_rejected += 1;
            continue;
        }
        let h = highest.entry(&w.lock).or_insert(i64::MIN);
        if w.token < *h {
            report.sink_errors.push(w.clone());
        }
        *h = (*h).max(w.token);
    }
    report
}

fn classify(lock: &str, older: &Section, newer: &Section, ns: u64, writes: &[Write], faults: &[Fault]) -> Overlap {
    let base = |allowed, why: String| Overlap {
        lock: lock.into(),
        older: older.holder.clone(),
        newer: newer.holder.clone(),
        ns,
        allowed,
        why,
    };
    if older.token == newer.token {
        return base(None, format!("same token {}", older.token));
    }
    let during = |f: &&Fault| f.start < older.end && f.end > older.start;
    let cause = faults.iter().filter(during).find_map(|f| match f.kind.as_str() {
        "holder-pause" if f.target == older.holder => Some(Allowed::PausedHolder),
        "node-loss" if older.kind == Kind::Pod => Some(Allowed::NodeLoss),
        _ => None,
    });
    let Some(cause) = cause else {
        return base(None, "no fault explains it: two holders ran at once".into());
    };
    let late: Vec<&Write> = writes
        .iter()
        .filter(|w| w.lock == lock && w.writer == older.holder && w.token == older.token && w.at >= newer.start)
        .collect();
    match late.iter().find(|w| w.accepted) {
        Some(w) => base(None, format!("a late write of the older holder (token {}) was accepted", w.token)),
        None => base(Some(cause), format!("{} late write(s) rejected", late.len())),
    }
}

// Run by tests/chaos_check.rs (the chaos binary itself has no test harness).
#[cfg(test)]
#[allow(dead_code)]
mod tests {
    use super::*;

    fn s(holder: &str, token: i64, start: u64, end: u64) -> Section {
        Section { lock: "l".into(), holder: holder.into(), kind: Kind::Cli, token, start, end }
    }
    fn w(seq: i64, writer: &str, token: i64, at: u64, accepted: bool) -> Write {
        Write { seq, lock: "l".into(), writer: writer.into(), token, at, accepted }
    }
    fn pause(target: &str, start: u64, end: u64) -> Fault {
        Fault { kind: "holder-pause".into(), target: target.into(), start, end }
    }

    #[test]
    fn one_holder_after_another_is_clean() {
        let r = check(&[s("a", 1, 0, 10), s("b", 2, 10, 20)], &[w(1, "a", 1, 5, true), w(2, "b", 2, 15, true)], &[]);
        assert!(r.ok(), "{r:?}");
        assert_eq!(r.grants["l"], 2);
    }

    #[test]
    fn an_overlap_without_a_fault_is_forbidden() {
        let r = check(&[s("a", 1, 0, 15), s("b", 2, 10, 20)], &[], &[]);
        assert!(!r.ok());
        assert_eq!(r.forbidden().count(), 1);
        assert_eq!(r.overlaps[0].ns, 5);
    }

    #[test]
    fn a_paused_holder_overlap_is_allowed_only_when_its_late_writes_were_rejected() {
        let sections = [s("a", 1, 0, 30), s("b", 2, 10, 20)];
        let faults = [pause("a", 5, 25)];
        let rejected = [w(1, "b", 2, 12, true), w(2, "a", 1, 26, false)];
        let r = check(&sections, &rejected, &faults);
        assert!(r.ok(), "{r:?}");
        assert_eq!(r.overlaps[0].allowed, Some(Allowed::PausedHolder));
        assert_eq!(r.stale_rejected, 1);
        let accepted = [w(1, "a", 1, 26, true)];
        assert!(!check(&sections, &accepted, &faults).ok(), "a late write that got through");
        assert!(!check(&sections, &rejected, &[pause("b", 5, 25)]).ok(), "the pause hit the other holder");
    }

    #[test]
    fn a_holder_cut_off_from_the_api_server_excuses_no_overlap() {
        // Its supervisor must stop it at the renew deadline, before the lease lets anyone else in.
        let sections = [s("a", 1, 0, 30), s("b", 2, 10, 20)];
        let cut = [Fault { kind: "holder-cut".into(), target: "a".into(), start: 5, end: 25 }];
        let r = check(&sections, &[w(1, "a", 1, 26, false)], &cut);
        assert_eq!(r.forbidden().count(), 1, "{r:?}");
    }

    #[test]
    fn a_killed_section_ends_when_its_process_was_seen_gone() {
        let line = |ev: &str, holder: &str, t: u64| {
            format!(r#"{{"ev":"{ev}","lock":"l","holder":"{holder}","token":1,"t":{t}}}"#)
        };
        let log = [
            line("start", "killed", 10),
            line("dead", "killed", 25),
            line("start", "clean", 30),
            line("end", "clean", 40),
            line("dead", "clean", 41),
            line("start", "running", 50),
            "not json".to_string(),
        ]
        .join("\n");
        let (mut sections, bad) = sections_from_log(&log);
        sections.sort_by_key(|s| s.start);
        let ends: Vec<(&str, u64)> = sections.iter().map(|s| (s.holder.as_str(), s.end)).collect();
        assert_eq!(ends, [("killed", 25), ("clean", 40), ("running", u64::MAX)]);
        assert_eq!(bad, 1);
    }

    #[test]
    fn repeated_or_decreasing_tokens_and_a_sink_that_went_back_are_reported() {
        let r = check(&[s("a", 2, 0, 10), s("b", 2, 10, 20), s("c", 1, 20, 30)], &[], &[]);
        assert_eq!(r.token_errors.len(), 2, "{r:?}");
        let r = check(&[], &[w(1, "a", 5, 0, true), w(2, "b", 4, 1, true)], &[]);
        assert_eq!(r.sink_errors.len(), 1);
    }
}
