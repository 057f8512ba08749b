#!/usr/bin/env bash
# The README demo: brings up the local control plane "demo", installs the CRD, starts the
# operator, creates a lock and three Jobs that claim it, and shows the lock changing hands.
# Usage: demo/demo.sh [seconds to watch at most, default 90]
#        demo/demo.sh down   (what `make demo-down` runs) stops the operator and the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = down ]; then
  # Stop the operator first (it is not one of the cluster's components), then the cluster.
  if export_line=$(e2e/cluster.sh env demo 2>/dev/null); then
    eval "$export_line"
    pidfile="$(dirname "$KUBECONFIG")/pids/leasehold.pid"
    if [ -f "$pidfile" ]; then
      kill "$(cat "$pidfile")" 2>/dev/null || true
    fi
  fi
  exec e2e/cluster.sh down demo
fi
watch_for=${1:-90}
echo "==> 1/5 the local control plane \"demo\": etcd, kube-apiserver, kube-controller-manager, kube-scheduler" >&2
echo "    and kwok, built from their Go modules on first use (minutes, once; cached in ~/.cache/leasehold)" >&2
export_line=$(e2e/cluster.sh up demo | tail -n 1)
eval "$export_line"
bin=$(e2e/harness/build.sh)
export PATH="$bin:$PATH"
run_dir=$(dirname "$KUBECONFIG")

echo "==> 2/5 building leasehold (cargo build; the first build takes a few minutes)" >&2
cargo build
target_dir=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)
echo "==> 3/5 installing the CRD (kubectl apply -f crds/)" >&2
kubectl apply -f crds/ >&2
kubectl wait --for condition=established --timeout=60s crd/distributedlocks.leasehold.dev >&2

if [ -f "$run_dir/pids/leasehold.pid" ] && kill -0 "$(cat "$run_dir/pids/leasehold.pid")" 2>/dev/null; then
  echo "==> operator already running" >&2
else
  echo "==> 4/5 starting the operator (log: $run_dir/logs/leasehold.log)" >&2
  setsid nohup "$target_dir/debug/leasehold" operator --admin-addr 127.0.0.1:0 >"$run_dir/logs/leasehold.log" 2>&1 &
  echo $! >"$run_dir/pids/leasehold.pid"
  sleep 1
  if ! kill -0 "$(cat "$run_dir/pids/leasehold.pid")" 2>/dev/null; then
    echo "the operator exited at once; its log ($run_dir/logs/leasehold.log) ends with:" >&2
    tail -n 20 "$run_dir/logs/leasehold.log" >&2
    exit 1
  fi
fi

echo "==> 5/5 creating lock nightly-report and three Jobs that claim it" >&2
kubectl delete job report-a report-b report-c --ignore-not-found --wait=true >/dev/null 2>&1 || true
kubectl apply -f demo/lock-and-jobs.yaml >&2

echo "==> watching (at most ${watch_for}s): one pod at a time holds the lock, tokens increase" >&2
deadline=$((SECONDS + watch_for))
# The first snapshot once the first grant is recorded (not an empty HOLDER column while the
# Jobs' pods are still being created).
while [ $SECONDS -lt $deadline ] && [ -z "$(kubectl get dlock nightly-report -o jsonpath='{.status.holder.name}' 2>/dev/null)" ]; do
  sleep 0.5
done
while [ $SECONDS -lt $deadline ]; do
  echo "---- $(date +%T)"
  kubectl get dlock nightly-report
  kubectl get pods -o custom-columns='POD:.metadata.name,PHASE:.status.phase,GATED:.spec.schedulingGates[*].name,TOKEN:.metadata.annotations.leasehold\.dev/fencing-token'
  done_jobs=$(kubectl get jobs report-a report-b report-c -o jsonpath='{range .items[*]}{.status.succeeded}{"\n"}{end}' | grep -c '^1$' || true)
  [ "$done_jobs" = 3 ] && break
  sleep 3
done
echo
echo "Events on the lock nightly-report:"
kubectl get events.events.k8s.io --field-selector regarding.kind=DistributedLock,regarding.name=nightly-report \
  --sort-by=.metadata.creationTimestamp -o custom-columns='TIME:.metadata.creationTimestamp,REASON:.reason,NOTE:.note' 
cat <<MSG

Try it yourself:
  $export_line
  export PATH=$target_dir/debug:$bin:\$PATH
  kubectl get dlock -w
  leasehold lock nightly-report -- sh -c 'echo "token \$LEASEHOLD_FENCING_TOKEN"; sleep 5'
  leasehold status nightly-report
Stop everything: make demo-down
MSG
