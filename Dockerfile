# syntax=docker/dockerfile:1
# The Leasehold operator image:  docker build -t leasehold:0.1.0 .
# Build stage: Rust toolchain (the version the project is developed and tested with). Runtime
# stage: distroless "cc" (glibc, libgcc, CA certificates; no shell, no package manager), as the
# non-root user 65532. The binary is built by docker/cargo-build.sh, the same script
# `make image-check` runs outside any container. Builder and runtime are both Debian 12
# (bookworm), so the binary needs no newer glibc than the runtime image has.
ARG RUST_VERSION=1.95.0

FROM docker.io/library/rust:${RUST_VERSION}-slim-bookworm AS build
WORKDIR /src
# The operator's allocator, jemalloc (tikv-jemalloc-sys), is built with make, which the slim
# image lacks (it has gcc and libc6-dev).
RUN apt-get update \
 && apt-get install -y --no-install-recommends make=4.3-4.1 \
 && rm -rf /var/lib/apt/lists/*
COPY docker/cargo-build.sh /usr/local/bin/cargo-build
# Dependencies only: this layer stays cached until Cargo.toml or Cargo.lock change.
COPY Cargo.toml Cargo.lock ./
RUN ["/usr/local/bin/cargo-build", "deps"]
# The operator: cargo build --release --locked --bin leasehold.
COPY src ./src
RUN ["/usr/local/bin/cargo-build", "release"]

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/leasehold /usr/local/bin/leasehold
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/leasehold"]
CMD ["operator"]
