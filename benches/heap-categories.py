#!/usr/bin/env python3
"""Sums a heaptrack peak flamegraph (folded stacks) by what holds the memory.

    heaptrack_print -f op.zst --print-flamegraph peak.folded --flamegraph-cost-type peak
    benches/heap-categories.py peak.folded

Each stack ("frame;frame;...; bytes", outermost first) goes to the first category whose rule
matches one of its frames. Symbols in the v0 mangling (`_R...`, the leasehold crate built with
`-C symbol-mangling-version=v0`) are demangled with c++filt and carry their generic parameters, so
`Writer<Pod>::apply_watcher_event` tells which reflector store an allocation is in; with legacy
symbols the store is guessed from a `<Kind as Clone>::clone` frame, else "kind not named".
"""

import re
import subprocess
import sys
from collections import defaultdict

LEGACY = [("$LT$", "<"), ("$GT$", ">"), ("$u20$", " "), ("$C$", ","), ("$RF$", "&"), ("$u7b$", "{"),
          ("$u7d$", "}"), ("$BP$", "*"), ("$u27$", "'"), ("$u5b$", "["), ("$u5d$", "]"), ("..", "::")]
HASH = re.compile(r"::h[0-9a-f]{16}")
CRATE_HASH = re.compile(r"\[[0-9a-f]{16}\]")
KINDS = ["DistributedLockClaim", "DistributedLock", "Pod", "Lease", "Node", "Namespace"]


def demangle(frames):
    v0 = sorted({f for f in frames if f.startswith("_R")})
    out = {}
    if v0:
        r = subprocess.run(["c++filt"], input="\n".join(v0), capture_output=True, text=True, check=True)
        out = dict(zip(v0, r.stdout.splitlines()))

    def one(f):
        f = re.sub(r" \([^)]*\)$", "", f)
        f = out.get(f, f)
        if "$" in f or ".." in f:
            for a, b in LEGACY:
                f = f.replace(a, b)
        f = HASH.sub("", f)
        return CRATE_HASH.sub("", f)

    return {f: one(f) for f in frames}


STORE = re.compile(r"Writer<[\w:]*::(\w+)>>?::apply_watcher_event|ObjectRef<[\w:]*::(\w+)>, alloc::sync::Arc<|"
                   r"<[\w:]*::(\w+) as kube_runtime::reflector::object_ref::Lookup>::to_object_ref")
# (pattern on one frame, category), tried on each frame from the innermost outwards; the first
# frame that matches decides.
RULES = [
    (r"events::Recorder|K8sEvent|events::EventKey|Context>::event_related", "kube-runtime events::Recorder cache (Events published in the last 6 min)"),
    (r"prometheus_client::encoding", "/metrics text encoding (during a scrape)"),
    (r"LockLabels|ReasonLabels|prometheus_client::metrics|leasehold::metrics::Metrics", "per-lock metric families (prometheus-client)"),
    (r"delay_queue|kube_runtime::scheduler|ReconcileRequest<", "controller scheduler (kube-runtime: DelayQueue, pending and scheduled sets)"),
    (r"kube_runtime::controller::runner|kube_runtime::controller::", "controller runner (kube-runtime)"),
    (r"lock::machine::Clocks|reconcile_lock.*HashMap|HashMap.*reconcile_lock|, \(std::time::Instant, u64\)\)|, \(alloc::string::String, leasehold::lock::grant::Candidate", "per-lock maps in Context (clocks, status_written, ...)"),
    (r"^<?kube_runtime::watcher::|kube_runtime::watcher::step", "watcher (list pages, watch stream state)"),
    (r"leasehold::controller::distributed_lock::", "reconcile (other)"),
    (r"hyper|rustls|\bh2::|bytes::", "HTTP / TLS buffers (hyper, rustls)"),
    (r"serde_json|kube_client", "API client (decoding, requests)"),
    (r"tracing", "logging (tracing)"),
]


def category(stack):
    legacy_kind = None
    for f in reversed(stack):
        m = STORE.search(f)
        if m:
            return "reflector store: " + next(g for g in m.groups() if g)
        if "reflector::store" in f or "apply_watcher_event" in f:
            return "reflector store: " + (legacy_kind or "kind not named")
        m = re.search(r"<[\w:]*::(\w+) as core::clone::Clone>::clone", f)
        if m and m.group(1) in KINDS and legacy_kind is None:
            legacy_kind = m.group(1)
        for pat, cat in RULES:
            if re.search(pat, f):
                return cat
    if any("tokio::" in f for f in stack):
        return "tokio runtime"
    return "other"


def main():
    lines = [l.rstrip("\n") for l in open(sys.argv[1]) if l.strip()]
    stacks = []
    allf = set()
    for l in lines:
        body, _, cost = l.rpartition(" ")
        frames = [f for f in body.rstrip(";").split(";") if f]
        stacks.append((frames, int(cost)))
        allf.update(frames)
    names = demangle(allf)
    cats = defaultdict(int)
    tops = defaultdict(lambda: defaultdict(int))
    total = 0
    for frames, cost in stacks:
        st = [names[f] for f in frames]
        c = category(st)
        cats[c] += cost
        total += cost
        # The innermost frame that is not an allocator or container internal, for the detail.
        leaf = next(
            (f for f in reversed(st) if not re.match(r"(alloc::|hashbrown::|core::|<alloc::|<core::|__|0x|malloc|realloc|calloc|std::)", f)),
            st[-1] if st else "?",
        )
        tops[c][leaf[:150]] += cost
    mib = lambda b: b / 1048576
    print(f"{'MiB':>7}  {'share':>6}  what")
    for c, v in sorted(cats.items(), key=lambda kv: -kv[1]):
        print(f"{mib(v):7.2f}  {v / total:6.1%}  {c}")
        for leaf, lv in sorted(tops[c].items(), key=lambda kv: -kv[1])[:3]:
            if lv >= 64 * 1024:
                print(f"{'':17}{mib(lv):6.2f}  {leaf}")
    print(f"{mib(total):7.2f}  total at the peak ({len(stacks)} stacks)")


if __name__ == "__main__":
    main()
