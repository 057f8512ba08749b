#!/bin/sh
# The release build of the `leasehold` binary, shared by the Dockerfile and `make image-check`
# (which runs it outside any container), so both build the binary the same way:
#   cargo-build.sh deps      build only the dependencies, from stub sources (the Docker layer
#                            that stays cached until Cargo.toml or Cargo.lock change)
#   cargo-build.sh release   cargo build --release --locked --bin leasehold (needs src/)
# Run it in the build context root (Cargo.toml, Cargo.lock; src/ for `release`).
set -eu
case "${1:-}" in
deps)
  [ ! -e src ] || { echo "cargo-build.sh deps: src/ exists; run it before copying the sources" >&2; exit 1; }
  # Every target Cargo.toml names must exist for cargo to read the manifest.
  mkdir -p src e2e
  echo 'fn main() {}' >src/main.rs
  echo '//! stub' >src/lib.rs
  echo 'fn main() {}' >e2e/main.rs
  cargo build --release --locked --bin leasehold
  # Drop the stub crate's artifacts and fingerprints so the real sources are always rebuilt
  # (their mtimes may be older than the stub build).
  rm -rf src e2e target/release/leasehold target/release/leasehold.d \
    target/release/.fingerprint/leasehold-* target/release/deps/leasehold-* target/release/deps/libleasehold-*
  ;;
release)
  cargo build --release --locked --bin leasehold
  ;;
*)
  echo "usage: cargo-build.sh deps|release" >&2
  exit 2
  ;;
esac
