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
	cargo test --all-targets -- --test-threads=3

lint:
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings

# Regenerates crds/ from the Rust types.
crd:
	cargo run --quiet -- crd --out-dir crds

down:
	e2e/cluster.sh down e2e
