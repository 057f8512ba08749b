#!/usr/bin/env python3
"""Splits each failover of the bench's failover scenario into phases.

Input: target/bench/failover-timeline-<tag>.json (written by the scenario: the bench's own
watches on the namespace's Leases and claims, and per sample the kill, the holder's last
renewal and acquire()'s return, all on the wall clock) and the operator's log of that run, with
RUST_LOG=info,kube=warn,leasehold=debug (the "decided" line of every reconcile step). Every
timestamp is this machine's wall clock (holder, operator and bench run on it).

Phases of one failover (R = the dead holder's last renewTime, which the holder stamps just before
its PUT):
  renewal -> op  R -> the operator's reconcile step that saw R (the last "decided" line before
                 the expiry with requeue_after exactly the lease duration: machine.rs starts the
                 expiry clock when THIS process sees the renew marker change): the holder's PUT,
                 the operator's Lease watch, the reconcile queue
  lease + 50 ms  -> the step that decides the expiry (UpdateLease), minus the lease duration: the
                 operator requeues at lease duration + 50 ms; the rest is timer and queue delay
  grant PUT      -> "granted" (the operator's Lease PUT answered)
  claim status   -> the bench's claim watch sees the waiter's claim with a token (the operator's
                 claim status PATCH and a watch delivery)
  waiter GET     -> the waiter's first renewal stamps its renewTime (its claim watch, then a GET of
                 the Lease)
  waiter PUT     -> acquire() returns (the first renewal's PUT)
  total          acquire() return - R - lease duration (the bench's from_renewal - lease)
Also shown: when the bench's own Lease watch saw R (a second watch, for comparison).

Usage: benches/failover-timeline.py TIMELINE.json [OPERATOR.log] [--lease 15] [--json ROWS.json]
Prints one line per sample and p50 / max per phase.
"""

import json
import re
import statistics
import sys
from datetime import datetime

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_ts(s):
    # 2026-12-02T05:18:31.053972Z (microseconds)
    return datetime.strptime(s.rstrip("Z")[:26], "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=__import__("datetime").timezone.utc
    ).timestamp()


def operator_lines(path):
    """(time, message, fields-text) of every line that names a lock."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            line = ANSI.sub("", line).rstrip("\n")
            parts = line.split(None, 3)
            if len(parts) < 4 or not parts[0].endswith("Z"):
                continue
            try:
                t = parse_ts(parts[0])
            except ValueError:
                continue
            rest = parts[3]
            m = re.search(r"\block=(\S+)", rest)
            if not m:
                continue
            msg = rest.split(" lock=")[0]
            out.append((t, msg.split(": ", 1)[-1].strip(), m.group(1), rest))
    return out


def requeue_of(rest):
    m = re.search(r"requeue_after: Some\(([0-9.]+)(ms|s|µs|us|ns)\)", rest)
    if not m:
        return None
    v, u = float(m.group(1)), m.group(2)
    return v * {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}[u]


def pct(v, p):
    v = sorted(v)
    if not v:
        return float("nan")
    k = (len(v) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def main():
    args = [a for a in sys.argv[1:]]
    if "--json" in args:
        i = args.index("--json")
        del args[i : i + 2]
    lease = 15.0
    if "--lease" in args:
        i = args.index("--lease")
        lease = float(args[i + 1])
        del args[i : i + 2]
    doc = json.load(open(args[0]))
    log = args[1] if len(args) > 1 else doc.get("operator_log")
    ops = operator_lines(log)
    events = sorted(doc["events"], key=lambda e: e["seen"])
    cols = ["renewal -> op", "lease + 50 ms", "grant PUT", "claim status", "waiter GET", "waiter PUT", "total"]
    rows = []
    notes = []
    for s in sorted(doc["samples"], key=lambda s: s["lock"]):
        lock, R, A = s["lock"], s["last_renewal"], s["acquired"]
        if R is None:
            continue
        holder, waiter = f"holder-{lock}", f"waiter-{lock}"
        lev = [e for e in events if e["kind"] == "lease" and e["name"] == lock]
        seen = next(
            (e["seen"] for e in lev if e["holder"] == holder and e["renew_time"] is not None and abs(e["renew_time"] - R) < 2e-6),
            None,
        )
        mine = [o for o in ops if o[2] == lock and o[0] > R]
        expiry = next((o for o in mine if o[1] == "decided" and "UpdateLease" in o[3]), None)
        # The step that saw R is the last one before the expiry with a fresh clock (requeue_after
        # exactly the lease): after R the marker cannot change again. The first such step after R
        # can be the one that saw the grant's own Lease write, when that event arrived after R.
        fresh = [o for o in mine if o[1] == "decided" and requeue_of(o[3]) == lease and (expiry is None or o[0] < expiry[0])]
        first = fresh[-1] if fresh else None
        granted = next((o for o in mine if o[1] == "granted"), None)
        claim = next(
            (e["seen"] for e in events if e["kind"] == "claim" and e["identity"] == waiter and e["token"] is not None and e["seen"] > R),
            None,
        )
        wl = [e for e in lev if e["holder"] == waiter and e["renew_time"] is not None]
        first_renew = next((e["renew_time"] for e in wl if e["renew_time"] != wl[0]["renew_time"]), None) if wl else None
        if None in (seen, first, expiry, granted, claim, first_renew):
            notes.append(
                f"{lock}: incomplete (seen={seen} first={first is not None} expiry={expiry is not None} "
                f"granted={granted is not None} claim={claim} first_renew={first_renew})"
            )
            continue
        between = [o for o in mine if o[1] == "decided" and first[0] < o[0] < expiry[0]]
        row = {
            "lock": lock,
            "renewal -> op": first[0] - R,
            "lease + 50 ms": expiry[0] - first[0] - lease,
            "grant PUT": granted[0] - expiry[0],
            "claim status": claim - granted[0],
            "waiter GET": first_renew - claim,
            "waiter PUT": A - first_renew,
            "total": A - R - lease,
            "bench saw R": seen - R,
            "reconciles between": len(between),
        }
        rows.append(row)
    hdr = f"{'lock':<6}" + "".join(f"{c:>15}" for c in cols) + f"{'bench saw R':>15}{'steps between':>15}"
    print(hdr)
    for r in rows:
        print(
            f"{r['lock']:<6}"
            + "".join(f"{r[c] * 1e3:>13.1f}ms" for c in cols + ["bench saw R"])
            + f"{r['reconciles between']:>15}"
        )
    for label, p in (("p50", 0.5), ("max", 1.0)):
        print(f"{label:<6}" + "".join(f"{pct([r[c] for r in rows], p) * 1e3:>13.1f}ms" for c in cols + ["bench saw R"]))
    print(f"n={len(rows)} of {len(doc['samples'])} samples")
    for n in notes:
        print(n)
    if "--json" in sys.argv:
        json.dump(rows, open(sys.argv[sys.argv.index("--json") + 1], "w"))


if __name__ == "__main__":
    main()
