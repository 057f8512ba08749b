# The two commands a newcomer needs: `make demo` and `make test`.
.PHONY: demo demo-down test lint crd down

# Brings up the local control plane "demo", starts the operator, and shows a lock changing hands.
demo:
	demo/demo.sh

demo-down:
	demo/demo.sh down

# Unit tests, the CRD drift test, and the end-to-end suite against the local control plane
# "e2e" (built and started by the tests themselves; stop it with `make down`).
test:
	cargo test --lib --bins --tests -- --test-threads=3

lint: chart-lint image-check lib-check
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings

# The model checker over lock::machine::step, one level deeper than in `make test` (README,
# "What the model checker proves"; measured: 8 min with the release build, 11.3 GB peak RSS).
# Chaos run (issue 11): DURATION (default 10m) and SEED (default 1); the same seed gives the
# same fault schedule. Writes target/chaos/ (history.json, summary.json, grants.png).
.PHONY: chaos
DURATION ?= 10m
SEED ?= 1
chaos:
	cargo test --test chaos -- --duration $(DURATION) --seed $(SEED)

# The holder library on its own (README "Holding a lock from a process"): a downstream crate that
# depends on leasehold with `default-features = false` (tests/downstream/) builds, and its
# dependency tree has none of the operator's dependencies.
.PHONY: lib-check
lib-check:
	mkdir -p target/lib-check/src
	sed "s|@REPO@|$(CURDIR)|" tests/downstream/Cargo.toml.in > target/lib-check/Cargo.toml
	cp tests/downstream/lib.rs target/lib-check/src/lib.rs
	cp Cargo.lock target/lib-check/Cargo.lock
	cargo check --manifest-path target/lib-check/Cargo.toml --target-dir target/lib-check/target
	cargo tree --manifest-path target/lib-check/Cargo.toml --edges normal --prefix none > target/lib-check/deps.txt
	grep -q -x 'leasehold v0.1.0 ($(CURDIR))' target/lib-check/deps.txt
	@if awk '{print $$1}' target/lib-check/deps.txt | \
	  grep -E -x 'anyhow|axum|clap|kube-lease-manager|nix|prometheus-client|tabwriter|tikv-jemallocator|tracing-subscriber'; then \
	  echo "lib-check: the holder library pulls in the operator's dependencies above" >&2; exit 1; fi

.PHONY: model
model:
	LEASEHOLD_MODEL_EXTRA_DEPTH=1 cargo test --release --test model -- --nocapture --test-threads=1

# Regenerates crds/ from the Rust types.
crd:
	cargo run --quiet -- crd --out-dir crds
	cp crds/*.yaml charts/leasehold/crds/

down:
	e2e/cluster.sh down e2e
	e2e/harness/postgres.sh down e2e
	e2e/cluster.sh down chaos
	e2e/harness/postgres.sh down chaos

# Install like a real operator (docs/install.md). Part of `make lint`:
#   chart-lint   helm lint --strict of charts/leasehold
#   image-check  hadolint on the Dockerfile, then the Dockerfile's release build run outside a
#                container and a smoke test of the binary (cold: ~8 min on 2 idle cores)
# manifests regenerates the plain manifests deploy/leasehold.yaml from the chart.
.PHONY: chart-lint image-check manifests
chart-lint:
	"$$(e2e/harness/build.sh)/helm" lint --strict charts/leasehold

image-check:
	docker/image-check.sh

manifests:
	deploy/render.sh > deploy/leasehold.yaml

# Benchmarks against the local control plane "bench" (README "Performance"): builds the operator
# and the kube-leader-election driver in release mode, runs every scenario side by side with the
# Lease crates, prints the table, writes target/bench/ (report.md, results.json,
# handover-cdf.png, logs/), and stops the cluster. BENCH_SIZE=quick for a short run.
.PHONY: bench
bench:
	cargo build --release --bin leasehold
	cargo build --release --locked --manifest-path benches/kle-driver/Cargo.toml --target-dir target/kle-driver
	status=0; cargo bench --bench leasehold-bench || status=$$?; e2e/cluster.sh down bench; exit $$status
