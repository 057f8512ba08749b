#!/usr/bin/env bash
# Heap profile of the operator serving N idle locks (issue 12: 10,000 locks in 64 MiB): starts
# the local control plane "prof", applies N DistributedLocks, runs the release operator under
# heaptrack (Debian package heaptrack) for 120 s, prints its RSS and how many locks are Ready, and
# stops the cluster. Then: heaptrack_print -f /tmp/prof/op.zst --print-peaks 1
# heaptrack sees malloc only, so the profiled build leaves jemalloc out (the `jemalloc` feature):
# the live heap is the same, the RSS is glibc's (README "Performance" has both).
# Usage: cargo build --release --bin leasehold --no-default-features --features operator \
#          --target-dir target/heap-profile && N=10000 benches/heap-profile.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p /tmp/prof
N=${N:-10000}
exp=$(e2e/cluster.sh up prof | tail -n1); eval "$exp"
K="$(e2e/harness/build.sh)/kubectl"
$K apply -f crds/ >/dev/null
$K create namespace prof >/dev/null 2>&1 || true
python3 - "$N" > /tmp/prof/locks.yaml <<'PY'
import sys
n=int(sys.argv[1])
for i in range(n):
    print("---\napiVersion: leasehold.dev/v1alpha1\nkind: DistributedLock\nmetadata:\n  name: l-%05d\n  namespace: prof\nspec: {}" % i)
PY
time $K apply --server-side -f /tmp/prof/locks.yaml > /dev/null
echo "locks: $($K -n prof get dlock --no-headers | wc -l)"
heaptrack -o /tmp/prof/op target/heap-profile/release/leasehold operator --namespace prof --admin-addr 127.0.0.1:18099 > /tmp/prof/op.log 2>&1 &
hp=$!
sleep 120
pid=$(pgrep -f "^target/heap-profile/release/leasehold operator --namespace prof" | head -1)
echo "rss: $(grep VmRSS /proc/$pid/status)"
echo "ready: $($K -n prof get dlock -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True)"
curl -s 127.0.0.1:18099/metrics | grep -E "^process_resident|^leasehold_locks" | head
kill -TERM $pid; wait $hp || true
e2e/cluster.sh down prof
