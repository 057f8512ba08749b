#!/usr/bin/env bash
# What can be checked of the image without a container engine:
#  1. hadolint on the Dockerfile;
#  2. the Dockerfile's build steps, run outside a container in a copy of the build context
#     (target/image-check/ctx: the files .dockerignore lets through): `cargo-build.sh deps` on
#     stub sources, then the real sources and `cargo-build.sh release`;
#  3. the binary it produced runs: --version, `operator --help`, and `crd` prints exactly crds/.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "[image-check] $*" >&2; }

log "hadolint Dockerfile"
docker/hadolint.sh Dockerfile

ctx=target/image-check/ctx
log "staging the build context in $ctx"
mkdir -p "$ctx"
rm -rf "$ctx/src" "$ctx/e2e" "$ctx/docker"
cp Cargo.toml Cargo.lock "$ctx/"
cp -r docker "$ctx/docker"
t0=$SECONDS
log "RUN cargo-build deps"
(cd "$ctx" && sh docker/cargo-build.sh deps)
log "COPY src; RUN cargo-build release"
cp -r src "$ctx/src"
(cd "$ctx" && sh docker/cargo-build.sh release)
log "release build done in $((SECONDS - t0)) s"

bin=$ctx/target/release/leasehold
"$bin" --version
"$bin" operator --help | grep -q -- --leader-elect
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$bin" crd --out-dir "$out"
diff -r crds "$out"
log "OK: $(du -h "$bin" | cut -f1) binary; it prints the committed CRDs"
