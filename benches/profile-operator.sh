#!/usr/bin/env bash
# A `BENCH_OPERATOR_BIN` for the bench: profiles some of the operators the bench starts and runs
# the others unchanged. Every operator the bench starts gets `--instance bench-<tag>` (tags:
# scale-cold, scale, scale-held, failover, ...); those whose tag is in PROFILE_TAG (a comma list,
# default scale-held) are profiled into files $PROFILE_OUT-<tag>.*, in the mode PROFILE_MODE:
# - heaptrack: PROFILE_BIN (a build WITHOUT the jemalloc feature: heaptrack sees malloc only)
#   under heaptrack's preload library, raw data in $PROFILE_OUT-<tag>.raw. The process keeps this
#   script's pid (exec, no heaptrack wrapper process), so the bench reads the operator's own RSS
#   and its SIGKILL stops the operator; the raw file is complete up to the last buffer. Then:
#     /usr/lib/heaptrack/libexec/heaptrack_interpret < X.raw | zstd > X.zst
#     heaptrack_print -f X.zst --print-flamegraph X.folded --flamegraph-cost-type peak
#     benches/heap-categories.py X.folded
# - smaps: PROFILE_BIN as it is (the jemalloc release build, say); a sampler copies
#   /proc/PID/smaps and status every second while the process lives and keeps the copy taken at
#   the highest VmRSS (<prefix>.smaps-peak, <prefix>.status-peak) and the last one.
# Every other operator (and `leasehold lock`, which the failover scenario starts from the same
# path) runs OTHER_BIN (default target/release/leasehold).
# Usage (held RSS, issue 12):
#   cargo build --release --bin leasehold --no-default-features --features operator
#   cp target/release/leasehold target/leasehold-nojemalloc
#   cargo build --release --bin leasehold
#   BENCH_OPERATOR_BIN=$PWD/benches/profile-operator.sh PROFILE_MODE=heaptrack \
#     PROFILE_BIN=$PWD/target/leasehold-nojemalloc PROFILE_OUT=/tmp/prof/held \
#     BENCH_ONLY=held BENCH_LIBS=leasehold BENCH_REPEATS=1 cargo bench --bench leasehold-bench
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
other=${OTHER_BIN:-$here/target/release/leasehold}
tag=
for t in $(tr , " " <<<"${PROFILE_TAG:-scale-held}"); do
    case " $* " in *" --instance bench-$t "*) tag=$t ;; esac
done
[ -n "$tag" ] || exec "$other" "$@"
out=${PROFILE_OUT:?set PROFILE_OUT, a path prefix for the profile files}-$tag
bin=${PROFILE_BIN:?set PROFILE_BIN, the operator build to profile}
mkdir -p "$(dirname "$out")"
case ${PROFILE_MODE:-heaptrack} in
heaptrack)
    echo "$(date -u +%FT%T.%NZ) profile-operator: heaptrack of $bin $*, raw data in $out.raw" >&2
    exec env LD_PRELOAD=/usr/lib/heaptrack/libheaptrack_preload.so DUMP_HEAPTRACK_OUTPUT="$out.raw" "$bin" "$@"
    ;;
smaps)
    pid=$$
    (
        max=0
        while [ -r /proc/$pid/status ]; do
            s=$(cat /proc/$pid/status 2>/dev/null) || break
            r=$(awk '/^VmRSS:/{print $2}' <<<"$s")
            m=$(cat /proc/$pid/smaps 2>/dev/null) || break
            printf '%s\n' "$s" >"$out.status-last"
            printf '%s\n' "$m" >"$out.smaps-last"
            if [ -n "$r" ] && [ "$r" -gt "$max" ]; then
                max=$r
                printf '%s\n' "$s" >"$out.status-peak"
                printf '%s\n' "$m" >"$out.smaps-peak"
            fi
            echo "$(date -u +%T) $r" >>"$out.rss"
            sleep 1
        done
    ) </dev/null >/dev/null 2>&1 &
    echo "$(date -u +%FT%T.%NZ) profile-operator: smaps of $bin $*, in $out.*" >&2
    exec "$bin" "$@"
    ;;
*)
    echo "profile-operator: PROFILE_MODE must be heaptrack or smaps" >&2
    exit 2
    ;;
esac
