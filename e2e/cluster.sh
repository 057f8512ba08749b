#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, as plain processes (no containers), for the
# end-to-end tests and the demo: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
# kwok (fake kubelet for two fake nodes). Binaries come from e2e/harness/build.sh.
#
# Usage:
#   e2e/cluster.sh up     [NAME]   start cluster NAME (default "default"), or do nothing if it is
#                                  already up and healthy; last stdout line: export KUBECONFIG=...
#   e2e/cluster.sh down   [NAME]   stop every process of NAME and remove its run directory
#   e2e/cluster.sh status [NAME]   one line per component; exit 1 if anything is not running
#   e2e/cluster.sh env    [NAME]   print the export line
#   e2e/cluster.sh restart NAME COMPONENT
#                                  start one component again with the arguments it was started
#                                  with (after it was killed; stops it first if it still runs),
#                                  and wait until it is healthy: the chaos run's restarts
#
# Environment:
#   LEASEHOLD_RUN_DIR     parent of the run directories (default /tmp/leasehold-clusters)
#   LEASEHOLD_UP_TIMEOUT  seconds to wait for each readiness step of `up` (default 120)
#
# Run directory <run dir>/<NAME>: kubeconfig (admin), pki/, pids/<component>.pid,
# logs/<component>.log, ports.env (the ports picked), etcd/ (data), kwok-home/.
# Progress goes to stderr; stdout only carries the export line.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# In start order (stop_all stops them the other way round).
components=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
timeout=${LEASEHOLD_UP_TIMEOUT:-120}

log() { echo "[cluster:${name:-?}] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

# ---------------------------------------------------------------------------------------------
# Process bookkeeping

pidfile() { echo "$dir/pids/$1.pid"; }

# Prints the pid of a component if its process is alive and really is that component (guards
# against a stale pid file whose pid was reused by something else).
live_pid() {
  local f pid exe
  f=$(pidfile "$1")
  [ -s "$f" ] || return 1
  pid=$(<"$f")
  alive "$pid" || return 1
  exe=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n1) || return 1
  [ "$(basename -- "$exe")" = "$1" ] || return 1
  echo "$pid"
}

# start <component> <binary> [args...]: runs it detached in its own session so it survives the
# calling shell (no SIGHUP, not in the caller's process group), stdin from /dev/null, output to
# logs/<component>.log. A backgrounded child of a non-interactive shell is not a process-group
# leader, so setsid(1) calls setsid(2) and execs in place: $! is the component's own pid.
start() {
  local comp=$1; shift
  printf '%s\0' "$@" >"$dir/pids/$comp.cmd" # for `restart`
  log "starting $comp"
  setsid "$@" </dev/null >>"$dir/logs/$comp.log" 2>&1 8>&- 9>&- & # 8, 9: the lock fds, see lock()
  local pid=$! i
  echo "$pid" >"$(pidfile "$comp")"
  disown "$pid" # not our job any more: no "Killed" notice if `up` has to stop it
  # Until the forked shell has exec'd setsid and setsid (or `env`, for kwok) the component,
  # /proc/$pid/cmdline names bash, setsid or env, and live_pid would say the component is not
  # running. wait_for checks live_pid right after its first probe: on a loaded machine that fell
  # in this window, and a CI run's `up` gave up on a kube-apiserver that was starting normally
  # ("exited while waiting", empty log, then "stopping kube-apiserver (pid ...)").
  for ((i = 0; i < 200; i++)); do # 10 s
    live_pid "$comp" >/dev/null && return 0
    alive "$pid" || return 0 # it died: wait_for reports it, with its log
    sleep 0.05
  done
}

# True while a process exists and is not a zombie. The components are orphans reparented to PID 1
# once `up` returns, and some inits (this sandbox's, for one) reap them only seconds after they
# exit; kill -0 alone would count those zombies as running.
alive() {
  local state
  state=$(sed -n 's/^.*) \(.\).*/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

# Stops every tracked process: SIGTERM, then SIGKILL to what is left after 10 s, then waits until
# all are gone. The clients of etcd go first and etcd last: an apiserver that loses etcd while it
# shuts down (or while it is still starting) can hang until the SIGKILL. Each component leads its
# own process group (setsid), so the group is signalled, which would also catch any child.
stop_all() {
  local stopped=() left=() i pid
  stop_some kwok kube-scheduler kube-controller-manager kube-apiserver
  stop_some etcd
  # All have exited; give init up to 5 s more to reap them, so that a `pgrep` right after `down`
  # does not see their zombies. (Not fatal: a zombie holds no port, file or memory.)
  for ((i = 0; i < 50; i++)); do
    left=()
    for pid in "${stopped[@]}"; do [ -e "/proc/$pid" ] && left+=("$pid"); done
    [ ${#left[@]} -eq 0 ] && return 0
    sleep 0.1
  done
}

# stop_some <component...>: stops those components (see stop_all), appending their pids to $stopped.
stop_some() {
  local comp pid pids=() left=()
  for comp in "$@"; do
    if pid=$(live_pid "$comp"); then
      log "stopping $comp (pid $pid)"
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  if [ ${#pids[@]} -gt 0 ] && ! wait_exit 100 "${pids[@]}"; then # 10 s
    log "still running after 10 s, sending SIGKILL: ${left[*]}"
    for pid in "${left[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; done
    wait_exit 100 "${pids[@]}" || die "processes survived SIGKILL: ${left[*]}"
  fi
  for comp in "$@"; do rm -f "$(pidfile "$comp")"; done
  stopped+=("${pids[@]}")
}

# wait_exit <tenths of a second> <pid...>: true once none is alive; else false, with the ones
# still alive in $left.
wait_exit() {
  local n=$1 i pid; shift
  for ((i = 0; i < n; i++)); do
    left=()
    for pid in "$@"; do alive "$pid" && left+=("$pid"); done
    [ ${#left[@]} -eq 0 ] && return 0
    sleep 0.1
  done
  return 1
}

# ---------------------------------------------------------------------------------------------
# Health

# Health endpoint of each component. kube-controller-manager and kube-scheduler answer /healthz
# without credentials (it is in their --authorization-always-allow-paths default).
probe() {
  local comp=$1
  # shellcheck disable=SC1091
  . "$dir/ports.env"
  local tls=(--cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key")
  case $comp in
    etcd) curl -fsS -m 3 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"' ;;
    kube-apiserver) [ "$(curl -fsS -m 3 "${tls[@]}" "https://127.0.0.1:$APISERVER_PORT/readyz")" = ok ] ;;
    # Their serving certs are self-signed (generated in memory at start), hence -k.
    kube-controller-manager) [ "$(curl -fsSk -m 3 "https://127.0.0.1:$KCM_PORT/healthz")" = ok ] ;;
    kube-scheduler) [ "$(curl -fsSk -m 3 "https://127.0.0.1:$SCHEDULER_PORT/healthz")" = ok ] ;;
    kwok) [ "$(curl -fsS -m 3 "http://127.0.0.1:$KWOK_PORT/healthz")" = ok ] ;;
  esac
}

# Prints one line per component, returns non-zero if any is not running and healthy.
check_status() {
  local comp pid rc=0
  for comp in "${components[@]}"; do
    if ! pid=$(live_pid "$comp"); then
      printf '%-24s stopped\n' "$comp"; rc=1
    elif [ -f "$dir/ports.env" ] && probe "$comp" 2>/dev/null; then
      printf '%-24s running (pid %s)\n' "$comp" "$pid"
    else
      printf '%-24s unhealthy (pid %s)\n' "$comp" "$pid"; rc=1
    fi
  done
  return $rc
}

# wait_for <component whose log explains failures> <description> <command...>
# Polls the command every 0.25 s until it succeeds; fails after $timeout s, or at once if the
# component's process died, printing the tail of its log.
wait_for() {
  local comp=$1 what=$2; shift 2
  local deadline=$((SECONDS + timeout)) said=false
  until "$@" >/dev/null 2>&1; do
    $said || { log "waiting for $what"; said=true; }
    if ! live_pid "$comp" >/dev/null; then
      fail "$comp exited while waiting for $what" "$comp"
    fi
    if ((SECONDS >= deadline)); then
      fail "timed out after ${timeout}s waiting for $what" "$comp"
    fi
    sleep 0.25
  done
}

# fail <message> <component>: log tail, stop what was started, keep the run dir for inspection.
fail() {
  log "ERROR: $1"
  log "last lines of $dir/logs/$2.log:"
  tail -n 30 "$dir/logs/$2.log" >&2 || true
  stop_all
  log "processes stopped; logs kept in $dir/logs (\`$0 down $name\` removes them)"
  exit 1
}

# ---------------------------------------------------------------------------------------------
# Set-up pieces

# Free TCP ports on 127.0.0.1, below the kernel's ephemeral range (32768-60999 by default) so an
# outgoing connection cannot grab one between picking and binding.
pick_ports() {
  local n=$1 used picked=() p
  used=$(ss -Htan | awk '{print $4}' | sed -n 's/.*:\([0-9]*\)$/\1/p' | sort -u)
  while [ ${#picked[@]} -lt "$n" ]; do
    p=$((20000 + RANDOM % 12000))
    grep -qx "$p" <<<"$used" && continue
    [[ " ${picked[*]} " == *" $p "* ]] && continue
    picked+=("$p")
  done
  echo "${picked[@]}"
}

# Throwaway PKI (hack/local-up-cluster.sh and controller-runtime envtest generate the same set):
# one CA; apiserver serving cert; admin client cert (O=system:masters bypasses RBAC, and every
# component uses it, as kwokctl does); RSA key that signs ServiceAccount tokens.
gen_pki() {
  local p=$dir/pki
  mkdir -p "$p"
  (
    cd "$p"
    exec 2>openssl.log # openssl is chatty on stderr; keep it out of the way unless it fails
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
      -subj "/CN=leasehold-e2e-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
    # SANs: 127.0.0.1 for us, 10.0.0.1 = first IP of --service-cluster-ip-range (the `kubernetes`
    # Service), and the in-cluster DNS names. rustls (kube-rs) matches an IP only against IP SANs.
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver"
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 3650 \
      -extfile <(printf '%s\n' \
        "basicConstraints=CA:FALSE" \
        "keyUsage=critical,digitalSignature,keyEncipherment" \
        "extendedKeyUsage=serverAuth" \
        "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local")
    openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=admin"
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out admin.crt -days 3650 \
      -extfile <(printf '%s\n' "basicConstraints=CA:FALSE" \
        "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=clientAuth")
    openssl genrsa -out sa.key 2048
    openssl rsa -in sa.key -pubout -out sa.pub
    rm -f ./*.csr ca.srl
  ) || { cat "$p/openssl.log" >&2; die "openssl failed"; }
}

write_kubeconfig() {
  local b64='base64 -w0'
  cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: leasehold-$name
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $($b64 <"$dir/pki/ca.crt")
users:
- name: admin
  user:
    client-certificate-data: $($b64 <"$dir/pki/admin.crt")
    client-key-data: $($b64 <"$dir/pki/admin.key")
contexts:
- name: leasehold-$name
  context:
    cluster: leasehold-$name
    user: admin
    namespace: default
current-context: leasehold-$name
EOF
  chmod 600 "$dir/kubeconfig"
}

# Two fake nodes for kwok. No taint, so ordinary pods schedule onto them.
create_nodes() {
  local n
  for n in kwok-node-0 kwok-node-1; do
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $n
  annotations:
    kwok.x-k8s.io/node: fake  # matched by kwok --manage-nodes-with-annotation-selector
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    kubernetes.io/hostname: $n
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    kubernetes.io/role: agent
    node-role.kubernetes.io/agent: ""
status:
  capacity: {cpu: "32", memory: 256Gi, pods: "500", ephemeral-storage: 1Ti}
  allocatable: {cpu: "32", memory: 256Gi, pods: "500", ephemeral-storage: 1Ti}
EOF
  done | kubectl apply -f - >/dev/null
}

kubectl() { "$bin/kubectl" --kubeconfig "$dir/kubeconfig" "$@"; }

nodes_ready() {
  [ "$(kubectl get nodes -l type=kwok \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' |
    grep -c '^True$')" -eq 2 ]
}

# ---------------------------------------------------------------------------------------------
# Commands

cmd_up() {
  if [ -d "$dir" ]; then
    local comp all_live=true
    for comp in "${components[@]}"; do live_pid "$comp" >/dev/null || all_live=false; done
    if $all_live && [ -s "$dir/bin-dir" ]; then
      # Running: just make sure it is (still) healthy, e.g. when a second `up` races a first.
      bin=$(<"$dir/bin-dir")
      for comp in "${components[@]}"; do wait_for "$comp" "$comp health" probe "$comp"; done
      log "already up"
      cmd_env
      return 0
    fi
    log "found a stale run directory (some component is not running); cleaning it up first"
    stop_all
    rm -rf "$dir"
  fi

  bin=$("$here/harness/build.sh")
  [ -x "$bin/kube-apiserver" ] || die "build.sh did not produce binaries in '$bin'"
  local t0=$SECONDS

  mkdir -p "$dir/pids" "$dir/logs" "$dir/etcd" "$dir/kwok-home"
  echo "$bin" >"$dir/bin-dir"
  gen_pki
  read -r ETCD_PORT ETCD_PEER_PORT APISERVER_PORT KCM_PORT SCHEDULER_PORT KWOK_PORT < <(pick_ports 6)
  cat >"$dir/ports.env" <<EOF
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
APISERVER_PORT=$APISERVER_PORT
KCM_PORT=$KCM_PORT
SCHEDULER_PORT=$SCHEDULER_PORT
KWOK_PORT=$KWOK_PORT
EOF
  write_kubeconfig
  local pki=$dir/pki kc=$dir/kubeconfig

  # etcd: one member on loopback. The peer URL is never used by a single member but etcd always
  # listens on it (default localhost:2380), so it gets its own port too.
  # --unsafe-no-fsync: no fsync of the WAL; data is throwaway (controller-runtime envtest does this).
  start etcd "$bin/etcd" \
    --name=default --data-dir="$dir/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="default=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync=true \
    --log-level=warn
  wait_for etcd "etcd health" probe etcd

  # kube-apiserver. Admission plugins: the default set (includes ServiceAccount and the webhook
  # plugins). --advertise-address: without it the apiserver looks for a default route and aborts
  # on machines that have none. --authorization-mode=RBAC: the Node authorizer is only useful with
  # real kubelets. Service-account issuer + signing key are mandatory since 1.20; the verifying
  # key is the public half. (No --cert-dir: it is ignored when --tls-cert-file is given.)
  # --endpoint-reconciler-type=none: the default "lease" reconciler publishes the advertise
  # address as the endpoint of Service default/kubernetes, and 1.37 refuses to start with a
  # loopback one ("cannot use public IP 127.0.0.1 with endpoint reconciler ... may not be in the
  # loopback range"). Nothing runs in-cluster here, so that Service keeps no endpoints.
  # --requestheader-*: as kubeadm sets them. Without a requestheader CA in the
  # kube-system/extension-apiserver-authentication ConfigMap, the delegated authentication of
  # kube-controller-manager and kube-scheduler logs "missing content for CA bundle
  # requestheader-client-ca-file" over and over. No front-proxy-client cert is issued, so no one
  # can actually authenticate through these headers.
  start kube-apiserver "$bin/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
    --advertise-address=127.0.0.1 --endpoint-reconciler-type=none \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" \
    --requestheader-client-ca-file="$pki/ca.crt" --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-signing-key-file="$pki/sa.key" \
    --service-account-key-file="$pki/sa.pub" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --allow-privileged=true
  wait_for kube-apiserver "kube-apiserver /readyz" probe kube-apiserver

  # kube-controller-manager with every default controller, as admin (system:masters, like
  # kwokctl). No --use-service-account-credentials: with it each controller first gets its own
  # kube-system ServiceAccount and token, one after the other, which made `up` take 11 s instead
  # of 6-7 s here; the controllers' RBAC is not what these tests are about.
  # --root-ca-file feeds the kube-root-ca.crt ConfigMaps; --service-account-private-key-file the
  # legacy token Secrets.
  # Node monitor period/grace: kwokctl's defaults (5 s / 40 s), faster than upstream's 5 s / 50 s.
  # --authentication/authorization-kubeconfig: delegated authn/z for its own HTTPS port.
  start kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
    --leader-elect=false \
    --controllers='*' \
    --root-ca-file="$pki/ca.crt" \
    --service-account-private-key-file="$pki/sa.key" \
    --node-monitor-period=5s --node-monitor-grace-period=40s

  start kube-scheduler "$bin/kube-scheduler" \
    --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" \
    --leader-elect=false

  # kwok, the fake kubelet. HOME points into the run dir because kwok always loads
  # ~/.kwok/kwok.yaml first if it exists (kwok pkg/config/flags.go), which would leak a
  # developer's own stages into the tests. --cidr: pod IPs (the default 10.0.0.0/24 collides with
  # the service range). --node-ip: the InternalIP/hostIP written into node and pod status.
  # --server-address: its HTTP server (/healthz), on a free port (kwokctl uses 10247).
  # --node-lease-duration-seconds=40: the flag defaults to 0 in standalone kwok, which turns node
  # Leases off (the 40 s default only exists in kwokctl's configuration). Without Leases the
  # node-lifecycle controller found both nodes not ready every ~45 s (grace period + monitor
  # period; "all Nodes are not-Ready. Entering master disruption mode") and kwok's node-initialize
  # stage flipped them back: flapping nodes. With it kwok renews each Lease every 40/4 = 10 s,
  # like a kubelet.
  start kwok env HOME="$dir/kwok-home" "$bin/kwok" \
    --kubeconfig="$kc" \
    --config="$here/harness/kwok-stages.yaml" \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --cidr=10.244.0.0/16 \
    --node-ip=127.0.0.1 \
    --server-address="127.0.0.1:$KWOK_PORT" \
    --node-lease-duration-seconds=40

  wait_for kube-controller-manager "kube-controller-manager /healthz" probe kube-controller-manager
  wait_for kube-scheduler "kube-scheduler /healthz" probe kube-scheduler
  wait_for kwok "kwok /healthz" probe kwok

  log "creating fake nodes"
  create_nodes
  wait_for kwok "both nodes Ready" nodes_ready
  wait_for kube-controller-manager "ServiceAccount default/default" kubectl get serviceaccount default -n default

  log "up in $((SECONDS - t0)) s (binaries: $bin)"
  cmd_env
}

cmd_down() {
  if [ ! -d "$dir" ]; then
    log "not running (no $dir)"
    return 0
  fi
  stop_all
  rm -rf "$dir"
  log "down"
}

cmd_status() {
  [ -d "$dir" ] || { log "no run directory $dir"; exit 1; }
  check_status
}

cmd_restart() {
  local comp=$1 args=() attempt pid deadline
  [ -s "$dir/pids/$comp.cmd" ] || die "no recorded command for '$comp' in $dir (is $name up?)"
  local stopped=() left=()
  stop_some "$comp"
  mapfile -d '' -t args <"$dir/pids/$comp.cmd"
  # A component may fail to come up while another one is unwell (an apiserver whose etcd is
  # paused exits): try again, up to 10 times, and never tear the control plane down from here.
  for attempt in 1 2 3 4 5 6 7 8 9 10; do
    # The controllers exit at once while the API server is down (being restarted itself): wait
    # for it first (a chaos run restarted kube-controller-manager during an API server restart
    # and used up every attempt).
    case $comp in
      etcd | kube-apiserver) ;;
      *)
        deadline=$((SECONDS + 60))
        until probe kube-apiserver 2>/dev/null || ((SECONDS >= deadline)); do sleep 0.5; done
        ;;
    esac
    start "$comp" "${args[@]}"
    deadline=$((SECONDS + timeout))
    while live_pid "$comp" >/dev/null && ((SECONDS < deadline)); do
      if probe "$comp" 2>/dev/null; then
        log "$comp restarted"
        return 0
      fi
      sleep 0.25
    done
    log "$comp did not come up (attempt $attempt); last lines of its log:"
    tail -n 5 "$dir/logs/$comp.log" >&2 || true
    if pid=$(live_pid "$comp"); then kill -KILL -- "-$pid" 2>/dev/null || true; fi
    sleep 1
  done
  die "$comp did not come back after 10 attempts"
}

cmd_env() {
  echo "export KUBECONFIG=$dir/kubeconfig"
}

# ---------------------------------------------------------------------------------------------

[ $# -ge 1 ] && [ $# -le 3 ] || usage
command=$1
component=${3:-}
name=${2:-default}
[[ $name =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || die "invalid cluster name '$name'"
root=${LEASEHOLD_RUN_DIR:-/tmp/leasehold-clusters}
dir=$root/$name

# up and down of one NAME are serialised (two test processes calling `up` at once get one cluster).
# The components must not inherit fds 8 and 9, or they would hold the locks for as long as they run.
lock() {
  mkdir -p "$root"
  exec 9>"$root/.$name.lock"
  flock 9
}

# restart of one component excludes up and down (shared lock on the cluster's lock) and another
# restart of the same component, not a restart of another one: a kube-controller-manager restart
# waits for the API server (see cmd_restart), and with one lock for all it held the lock while a
# kube-apiserver restart queued behind it, so the API server stayed down for ten minutes (a chaos
# run: "kube-controller-manager did not come back after 10 attempts").
lock_restart() {
  mkdir -p "$root"
  exec 9>"$root/.$name.lock"
  flock -s 9
  exec 8>"$root/.$name.$1.lock"
  flock 8
}

case $command in
  up) lock; cmd_up ;;
  down) lock; cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  restart)
    [[ " ${components[*]} " == *" $component "* ]] || usage
    lock_restart "$component"
    cmd_restart "$component"
    ;;
  *) usage ;;
esac
