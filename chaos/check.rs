//! The chaos run's checker: reads a history (critical sections, fenced writes, faults) and
//! reports what broke the promise. Pure: no I/O, so its verdicts have unit tests of their own.
//!
//! Times are nanoseconds of `CLOCK_MONOTONIC`, one clock for every process of the run.
//!
//! A lock with `maxHolders: N` (a semaphore; N = 1 for a plain lock) promises at most N holders at
//! once, at most one in each of its slots 0..N, tokens unique across the lock and strictly
//! increasing within a slot (not across slots: a grant reserved earlier can land later in another
//! slot). The checker holds every lock to that, per lock and per slot.

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
    /// Semaphore slot of the grant (0 for a single-holder lock; absent in older histories).
    #[serde(default)]
    pub slot: u32,
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
    /// The writer's slot: the sink fences each (lock, slot) on its own (see `sink`).
    #[serde(default)]
    pub slot: u32,
    /// When it was sent, ns.
    pub at: u64,
    /// Whether the sink accepted it (token >= the highest it had accepted for the lock's slot).
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

/// Two sections of one slot of a lock that overlapped, or more sections of one lock at once than
/// its limit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Overlap {
    /// Lock name.
    pub lock: String,
    /// `Some(k)`: two sections in slot k (for a single-holder lock, slot 0: any two sections).
    /// `None`: more sections than the lock's `maxHolders` ran at once (checked for N > 1).
    pub slot: Option<u32>,
    /// Two in a slot: the holder with the lower token. Over the limit: every holder already
    /// running when `newer` started, in start order, comma-separated.
    pub older: String,
    /// The holder whose start made the overlap.
    pub newer: String,
    /// Overlap length, ns (over the limit: until no more than the limit ran).
    pub ns: u64,
    /// `Some` when the overlap is allowed, and why; `None`: forbidden.
    pub allowed: Option<Allowed>,
    /// The holders the allowance excuses (paused or node lost, and every late write rejected).
    pub excused: Vec<String>,
    /// Why it is allowed or forbidden.
    pub why: String,
}

/// The checker's verdict.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// Sections (grants) per lock.
    pub grants: BTreeMap<String, usize>,
    /// Tokens that repeated anywhere in a lock (previous = the token itself), or went backwards
    /// in grant order within one slot: (lock, holder, token, previous).
    pub token_errors: Vec<(String, String, i64, i64)>,
    /// Sections in a slot at or above their lock's limit: (lock, holder, slot).
    pub slot_errors: Vec<(String, String, u32)>,
    /// The most sections of each lock that ran at once (excused ones included).
    pub peak: BTreeMap<String, usize>,
    /// Writes the sink accepted with a token below one it had accepted before for the same slot.
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

    /// True when the promise held: no bad token or slot, no bad sink write, no forbidden overlap.
    pub fn ok(&self) -> bool {
        self.token_errors.is_empty()
            && self.slot_errors.is_empty()
            && self.sink_errors.is_empty()
            && self.forbidden().next().is_none()
    }
}

/// Sections of the `leasehold lock` commands from the section log's lines (JSON: `ev`, `lock`,
/// `holder`, `token`, `slot` (absent: 0), `t`), and how many lines could not be read. A section ends at its `end`
/// line (the command recorded it); one killed before it could (SIGKILL by the watchdog or the
/// supervisor) ends when the runner saw its process gone (`dead`, polled every 10 ms: an upper
/// bound); one with neither ran until the run ended.
pub fn sections_from_log(text: &str) -> (Vec<Section>, usize) {
    let mut open: BTreeMap<(String, i64), (String, u32, u64)> = BTreeMap::new();
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
        let slot = v["slot"].as_u64().unwrap_or(0) as u32;
        match v["ev"].as_str() {
            Some("start") => {
                open.insert((holder, token), (lock, slot, t));
            }
            Some("end" | "dead") => {
                if let Some((lock, slot, start)) = open.remove(&(holder.clone(), token)) {
                    out.push(Section { lock, holder, kind: Kind::Cli, token, slot, start, end: t });
                }
            }
            _ => {}
        }
    }
    out.extend(open.into_iter().map(|((holder, token), (lock, slot, start))| Section {
        lock,
        holder,
        kind: Kind::Cli,
        token,
        slot,
        start,
        end: u64::MAX,
    }));
    (out, bad)
}

/// Checks a history. `limits` gives each semaphore's `maxHolders` (a lock not in it: 1).
///
/// Per lock: no token twice (across its slots), tokens strictly increasing in grant order within
/// each slot, no slot at or above the limit, and two sections of one slot never overlap; a
/// semaphore (limit N > 1) also never has more than N sections at once. Faults of kind
/// `holder-pause` (target: holder identity) and `node-loss` (target: `*`, every pod) are the only
/// ones that excuse a section from these (not `holder-cut`: a holder cut off from the API server
/// stops itself at its renew deadline, inside the lease), and only when every write it made after
/// the newer section started was rejected by the sink.
pub fn check(sections: &[Section], writes: &[Write], faults: &[Fault], limits: &BTreeMap<String, u32>) -> Report {
    let mut report = Report::default();
    let mut by_lock: BTreeMap<&str, Vec<&Section>> = BTreeMap::new();
    for s in sections {
        by_lock.entry(&s.lock).or_default().push(s);
    }
    for (lock, list) in &mut by_lock {
        let limit = limits.get(*lock).copied().unwrap_or(1).max(1);
        list.sort_by_key(|s| (s.start, s.token));
        report.grants.insert(lock.to_string(), list.len());
        // 1. Tokens never repeat in the lock and strictly increase in grant order per slot.
        let mut seen = BTreeSet::new();
        let mut prev: BTreeMap<u32, i64> = BTreeMap::new();
        for s in list.iter() {
            let before = prev.get(&s.slot).copied();
            if !seen.insert(s.token) {
                report.token_errors.push((lock.to_string(), s.holder.clone(), s.token, s.token));
            } else if before.is_some_and(|p| s.token <= p) {
                report.token_errors.push((lock.to_string(), s.holder.clone(), s.token, before.unwrap_or(0)));
            }
            prev.insert(s.slot, before.map_or(s.token, |p| p.max(s.token)));
            if s.slot >= limit {
                report.slot_errors.push((lock.to_string(), s.holder.clone(), s.slot));
            }
        }
        // 3. Overlaps: at each start, the sections still running.
        let mut peak = 0;
        for (i, b) in list.iter().enumerate() {
            let running: Vec<&Section> = list[..i].iter().filter(|a| a.end > b.start).copied().collect();
            peak = peak.max(running.len() + 1);
            for a in running.iter().filter(|a| a.slot == b.slot) {
                let (older, newer) = if a.token <= b.token { (*a, *b) } else { (*b, *a) };
                let overlap = a.end.min(b.end) - b.start;
                report.overlaps.push(classify(lock, older, newer, overlap, writes, faults));
            }
            if limit > 1 && running.len() + 1 > limit as usize {
                report.overlaps.push(over_limit(lock, limit as usize, &running, b, writes, faults));
            }
        }
        report.peak.insert(lock.to_string(), peak);
    }
    // 2. The sink never accepted a lower token than one it had accepted for the same slot.
    let mut highest: BTreeMap<(&str, u32), i64> = BTreeMap::new();
    let mut ordered: Vec<&Write> = writes.iter().collect();
    ordered.sort_by_key(|w| w.seq);
    for w in ordered {
        if !w.accepted {
            report.stale_rejected += 1;
            continue;
        }
        let h = highest.entry((&w.lock, w.slot)).or_insert(i64::MIN);
        if w.token < *h {
            report.sink_errors.push(w.clone());
        }
        *h = (*h).max(w.token);
    }
    report
}

/// Whether a fault excuses section `older` from a section that started at `from`: it was paused
/// (or its pod's node lost) while it ran, and the sink rejected every write it made from `from`
/// on. `Ok((cause, rejected late writes))`, or why not.
fn excuse(
    lock: &str,
    older: &Section,
    from: u64,
    writes: &[Write],
    faults: &[Fault],
) -> Result<(Allowed, usize), String> {
    let during = |f: &&Fault| f.start < older.end && f.end > older.start;
    let cause = faults.iter().filter(during).find_map(|f| match f.kind.as_str() {
        "holder-pause" if f.target == older.holder => Some(Allowed::PausedHolder),
        "node-loss" if older.kind == Kind::Pod => Some(Allowed::NodeLoss),
        _ => None,
    });
    let Some(cause) = cause else {
        return Err("no fault explains it".into());
    };
    let late: Vec<&Write> = writes
        .iter()
        .filter(|w| w.lock == lock && w.writer == older.holder && w.token == older.token && w.at >= from)
        .collect();
    match late.iter().find(|w| w.accepted) {
        Some(w) => Err(format!("a late write of the older holder (token {}) was accepted", w.token)),
        None => Ok((cause, late.len())),
    }
}

/// Two sections of one slot.
fn classify(lock: &str, older: &Section, newer: &Section, ns: u64, writes: &[Write], faults: &[Fault]) -> Overlap {
    let base = |allowed, excused: Vec<String>, why: String| Overlap {
        lock: lock.into(),
        slot: Some(newer.slot),
        older: older.holder.clone(),
        newer: newer.holder.clone(),
        ns,
        allowed,
        excused,
        why,
    };
    if older.token == newer.token {
        return base(None, vec![], format!("same token {}", older.token));
    }
    match excuse(lock, older, newer.start, writes, faults) {
        Ok((cause, late)) => base(Some(cause), vec![older.holder.clone()], format!("{late} late write(s) rejected")),
        Err(why) => base(None, vec![], format!("{why}: two holders ran at once in slot {}", newer.slot)),
    }
}

/// `newer` started while `running` ran, more than `limit` in all: allowed only when enough of
/// `running` are excused (see [`excuse`]) to leave no more than `limit`.
fn over_limit(
    lock: &str,
    limit: usize,
    running: &[&Section],
    newer: &Section,
    writes: &[Write],
    faults: &[Fault],
) -> Overlap {
    let count = running.len() + 1;
    let mut ends: Vec<u64> = running.iter().chain(std::iter::once(&newer)).map(|s| s.end).collect();
    ends.sort_unstable();
    let ns = ends[count - limit - 1].saturating_sub(newer.start);
    let (mut excused, mut causes, mut refused) = (vec![], vec![], vec![]);
    for a in running {
        match excuse(lock, a, newer.start, writes, faults) {
            Ok((cause, _)) => {
                excused.push(a.holder.clone());
                causes.push(cause);
            }
            Err(why) => refused.push(format!("{}: {why}", a.holder)),
        }
    }
    let ok = count - excused.len() <= limit;
    Overlap {
        lock: lock.into(),
        slot: None,
        older: running.iter().map(|a| a.holder.as_str()).collect::<Vec<_>>().join(","),
        newer: newer.holder.clone(),
        ns,
        allowed: if ok { causes.first().copied() } else { None },
        excused: if ok { excused } else { vec![] },
        why: if ok {
            format!("{count} holders at once (limit {limit}), the excess excused")
        } else {
            format!("{count} holders at once (limit {limit}); not excused: {}", refused.join("; "))
        },
    }
}

/// What a pod holds, read from its annotations: per lock of its lock set
/// (`leasehold.dev/locks`, [`leasehold::lock::lock_set`]) the token recorded for it
/// (`<lock>.locks.leasehold.dev/fencing-token`; `None` when missing) and slot 0; for a pod that
/// names one lock (`leasehold.dev/lock`), that lock, its `leasehold.dev/fencing-token` and its
/// `leasehold.dev/slot` (missing reads as slot 0, as the operator reads it).
pub fn pod_grants(ann: &BTreeMap<String, String>) -> Vec<(String, Option<i64>, u32)> {
    use leasehold::lock::{SLOT_ANNOTATION, TOKEN_ANNOTATION, lock_set, lock_token_annotation};
    let set = lock_set(ann);
    if !set.is_empty() {
        let token = |l: &str| ann.get(&lock_token_annotation(l)).and_then(|t| t.parse::<i64>().ok());
        return set.into_iter().map(|l| (l.clone(), token(&l), 0)).collect();
    }
    let token = ann.get(TOKEN_ANNOTATION).and_then(|t| t.parse::<i64>().ok());
    let slot = ann.get(SLOT_ANNOTATION).and_then(|t| t.parse::<u32>().ok()).unwrap_or(0);
    let lock = ann.get(leasehold::lock::LOCK_ANNOTATION).cloned().unwrap_or_default();
    vec![(lock, token, slot)]
}

/// A running pod's grants ([`pod_grants`]) that break all-or-nothing: a multi-lock pod that runs
/// without a token for some lock of its set. `Some(description)` when it does.
pub fn partial_set(pod: &str, ann: &BTreeMap<String, String>) -> Option<String> {
    let grants = pod_grants(ann);
    let multi = !leasehold::lock::lock_set(ann).is_empty();
    (multi && grants.iter().any(|g| g.1.is_none())).then(|| format!("{pod}: {grants:?}"))
}

// Run by tests/chaos_check.rs (the chaos binary itself has no test harness).
#[cfg(test)]
#[allow(dead_code)]
mod tests {
    use super::*;

    fn s(holder: &str, token: i64, start: u64, end: u64) -> Section {
        Section { lock: "l".into(), holder: holder.into(), kind: Kind::Cli, token, slot: 0, start, end }
    }
    fn w(seq: i64, writer: &str, token: i64, at: u64, accepted: bool) -> Write {
        Write { seq, lock: "l".into(), writer: writer.into(), token, slot: 0, at, accepted }
    }
    /// A section in semaphore slot `slot`.
    fn ss(holder: &str, slot: u32, token: i64, start: u64, end: u64) -> Section {
        Section { slot, ..s(holder, token, start, end) }
    }
    /// A write to slot `slot`.
    fn ws(seq: i64, writer: &str, slot: u32, token: i64, at: u64, accepted: bool) -> Write {
        Write { slot, ..w(seq, writer, token, at, accepted) }
    }
    /// Lock "l" is a plain lock.
    fn check_lock(sections: &[Section], writes: &[Write], faults: &[Fault]) -> Report {
        check(sections, writes, faults, &BTreeMap::new())
    }
    /// Lock "l" has `maxHolders: n`.
    fn check_semaphore(n: u32, sections: &[Section], writes: &[Write], faults: &[Fault]) -> Report {
        check(sections, writes, faults, &BTreeMap::from([("l".to_string(), n)]))
    }
    fn pause(target: &str, start: u64, end: u64) -> Fault {
        Fault { kind: "holder-pause".into(), target: target.into(), start, end }
    }

    #[test]
    fn one_holder_after_another_is_clean() {
        let r =
            check_lock(&[s("a", 1, 0, 10), s("b", 2, 10, 20)], &[w(1, "a", 1, 5, true), w(2, "b", 2, 15, true)], &[]);
        assert!(r.ok(), "{r:?}");
        assert_eq!(r.grants["l"], 2);
    }

    #[test]
    fn an_overlap_without_a_fault_is_forbidden() {
        let r = check_lock(&[s("a", 1, 0, 15), s("b", 2, 10, 20)], &[], &[]);
        assert!(!r.ok());
        assert_eq!(r.forbidden().count(), 1);
        assert_eq!(r.overlaps[0].ns, 5);
    }

    #[test]
    fn a_paused_holder_overlap_is_allowed_only_when_its_late_writes_were_rejected() {
        let sections = [s("a", 1, 0, 30), s("b", 2, 10, 20)];
        let faults = [pause("a", 5, 25)];
        let rejected = [w(1, "b", 2, 12, true), w(2, "a", 1, 26, false)];
        let r = check_lock(&sections, &rejected, &faults);
        assert!(r.ok(), "{r:?}");
        assert_eq!(r.overlaps[0].allowed, Some(Allowed::PausedHolder));
        assert_eq!(r.stale_rejected, 1);
        let accepted = [w(1, "a", 1, 26, true)];
        assert!(!check_lock(&sections, &accepted, &faults).ok(), "a late write that got through");
        assert!(!check_lock(&sections, &rejected, &[pause("b", 5, 25)]).ok(), "the pause hit the other holder");
    }

    #[test]
    fn a_holder_cut_off_from_the_api_server_excuses_no_overlap() {
        // Its supervisor must stop it at the renew deadline, before the lease lets anyone else in.
        let sections = [s("a", 1, 0, 30), s("b", 2, 10, 20)];
        let cut = [Fault { kind: "holder-cut".into(), target: "a".into(), start: 5, end: 25 }];
        let r = check_lock(&sections, &[w(1, "a", 1, 26, false)], &cut);
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
        let r = check_lock(&[s("a", 2, 0, 10), s("b", 2, 10, 20), s("c", 1, 20, 30)], &[], &[]);
        assert_eq!(r.token_errors.len(), 2, "{r:?}");
        let r = check_lock(&[], &[w(1, "a", 5, 0, true), w(2, "b", 4, 1, true)], &[]);
        assert_eq!(r.sink_errors.len(), 1);
    }

    #[test]
    fn a_semaphore_allows_n_holders_at_once_and_flags_the_n_plus_first() {
        // maxHolders 2: two at once in slots 0 and 1 are the promise, not an overlap.
        let two = [ss("a", 0, 1, 0, 30), ss("b", 1, 2, 5, 30)];
        let r = check_semaphore(2, &two, &[ws(1, "a", 0, 1, 1, true), ws(2, "b", 1, 2, 6, true)], &[]);
        assert!(r.ok(), "{r:?}");
        assert!(r.overlaps.is_empty(), "{r:?}");
        assert_eq!(r.peak["l"], 2);
        // The same history on a plain lock is a double grant.
        assert!(!check_lock(&[s("a", 1, 0, 30), s("b", 2, 5, 30)], &[], &[]).ok());

        // A third at once, in slot 1 beside b: over the limit, and two holders in slot 1.
        let three = [ss("a", 0, 1, 0, 30), ss("b", 1, 2, 5, 30), ss("c", 1, 3, 10, 20)];
        let r = check_semaphore(2, &three, &[], &[]);
        assert!(!r.ok());
        assert_eq!(r.peak["l"], 3);
        let over: Vec<&Overlap> = r.forbidden().filter(|o| o.slot.is_none()).collect();
        assert_eq!(over.len(), 1, "{r:?}");
        assert_eq!((over[0].older.as_str(), over[0].newer.as_str(), over[0].ns), ("a,b", "c", 10));
        assert!(r.forbidden().any(|o| o.slot == Some(1) && o.older == "b" && o.newer == "c"), "{r:?}");

        // A third in a slot of its own (2, beyond the limit): the limit alone catches it.
        let beside = [ss("a", 0, 1, 0, 30), ss("b", 1, 2, 5, 30), ss("c", 2, 3, 10, 20)];
        let r = check_semaphore(2, &beside, &[], &[]);
        assert_eq!(r.forbidden().count(), 1, "{r:?}");
        assert_eq!(r.forbidden().next().unwrap().slot, None);
        assert_eq!(r.slot_errors, [("l".to_string(), "c".to_string(), 2)]);
        // With a limit of 3 the same three are fine.
        assert!(check_semaphore(3, &beside, &[], &[]).ok());
    }

    #[test]
    fn a_semaphore_overlap_past_the_limit_is_allowed_only_for_a_paused_holder_whose_late_writes_were_rejected() {
        // a (slot 0) paused past its lease, slot 0 granted again to c while b holds slot 1.
        let sections = [ss("a", 0, 1, 0, 40), ss("b", 1, 2, 0, 50), ss("c", 0, 3, 10, 30)];
        let faults = [pause("a", 5, 35)];
        let rejected = [ws(1, "c", 0, 3, 11, true), ws(2, "a", 0, 1, 36, false)];
        let r = check_semaphore(2, &sections, &rejected, &faults);
        assert!(r.ok(), "{r:?}");
        assert_eq!(r.overlaps.len(), 2, "slot 0's pair and the limit: {r:?}");
        assert!(r.overlaps.iter().all(|o| o.allowed == Some(Allowed::PausedHolder) && o.excused == ["a"]));
        let accepted = [ws(1, "a", 0, 1, 36, true)];
        let r = check_semaphore(2, &sections, &accepted, &faults);
        assert_eq!(r.forbidden().count(), 2, "a late write that got through: {r:?}");
        assert!(!check_semaphore(2, &sections, &rejected, &[pause("b", 5, 35)]).ok(), "the pause hit b");
    }

    #[test]
    fn a_semaphore_token_repeated_across_slots_or_going_back_within_a_slot_is_reported() {
        // The same token in slots 0 and 1 (within the limit, so no overlap to report).
        let r = check_semaphore(2, &[ss("a", 0, 5, 0, 10), ss("b", 1, 5, 2, 12)], &[], &[]);
        assert_eq!(r.token_errors, [("l".to_string(), "b".to_string(), 5, 5)], "{r:?}");
        assert!(r.forbidden().next().is_none());
        // A lower token after a higher one in another slot is allowed (reserved earlier, landed
        // later); within one slot it is not.
        assert!(check_semaphore(2, &[ss("a", 0, 6, 0, 10), ss("b", 1, 5, 2, 12)], &[], &[]).ok());
        let r = check_semaphore(2, &[ss("a", 0, 6, 0, 10), ss("b", 0, 5, 12, 20)], &[], &[]);
        assert_eq!(r.token_errors, [("l".to_string(), "b".to_string(), 5, 6)], "{r:?}");
    }

    #[test]
    fn the_sink_is_checked_per_slot() {
        // Slot 1 takes token 4 after slot 0 took 5: two high-water marks, no error.
        let r = check_semaphore(2, &[], &[ws(1, "a", 0, 5, 0, true), ws(2, "b", 1, 4, 1, true)], &[]);
        assert!(r.ok(), "{r:?}");
        let r = check_semaphore(2, &[], &[ws(1, "a", 0, 5, 0, true), ws(2, "b", 0, 4, 1, true)], &[]);
        assert_eq!(r.sink_errors.len(), 1, "{r:?}");
    }
}
