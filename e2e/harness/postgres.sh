#!/usr/bin/env bash
# A throwaway PostgreSQL server on loopback for the fencing example's tests.
# Usage: e2e/harness/postgres.sh up NAME    prints `export LEASEHOLD_PG_PORT=<port>` last
#        e2e/harness/postgres.sh down NAME
# Runs as the `postgres` user when started as root (initdb refuses root). Needs the PostgreSQL
# server binaries (Debian package `postgresql`; `.ci/run` installs it when missing).
set -euo pipefail
cmd=${1:?usage: $0 up|down NAME}; name=${2:-default}
root=${LEASEHOLD_RUN_DIR:-/tmp/leasehold-clusters}/pg-$name
bindir=$(dirname "$(command -v initdb 2>/dev/null || ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | tail -n 1)")
[ -x "$bindir/initdb" ] || { echo "PostgreSQL server binaries not found (install the postgresql package)" >&2; exit 1; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case $cmd in
up)
  if [ -f "$root/port" ] && as_pg "$bindir/pg_ctl" -D "$root/data" status >/dev/null 2>&1; then
    echo "export LEASEHOLD_PG_PORT=$(cat "$root/port")"; exit 0
  fi
  rm -rf "$root"; mkdir -p "$root"
  [ "$(id -u)" = 0 ] && chown postgres "$root"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  as_pg "$bindir/initdb" -D "$root/data" -U postgres --auth=trust >"$root/initdb.log" 2>&1 \
    || { cat "$root/initdb.log" >&2; exit 1; }
  as_pg "$bindir/pg_ctl" -D "$root/data" -l "$root/postgres.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$root -c fsync=off" start >&2
  echo "$port" >"$root/port"
  echo "export LEASEHOLD_PG_PORT=$port"
  ;;
down)
  [ -d "$root/data" ] && as_pg "$bindir/pg_ctl" -D "$root/data" -m fast -w stop >&2 || true
  rm -rf "$root"
  ;;
*) echo "usage: $0 up|down NAME" >&2; exit 2 ;;
esac
