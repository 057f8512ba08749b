#!/usr/bin/env bash
# Prints the directory that holds the prometheus-operator CRDs (ServiceMonitor, PrometheusRule,
# ...), from the pinned release of its Go module (example/prometheus-operator-crd/ in the module
# zip, the same files the project's bundle.yaml is made of). The Go module proxy serves it and the
# module cache keeps it, so a second run takes milliseconds. The e2e test that validates the
# chart's monitoring objects server-side installs two of them.
set -euo pipefail
module=github.com/prometheus-operator/prometheus-operator
version=v0.94.0
export GOFLAGS=-mod=mod GOTOOLCHAIN=local
dir=$(go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -n "$dir" ] && [ -d "$dir/example/prometheus-operator-crd" ] || {
  echo "prometheus-crds: go mod download $module@$version gave no CRD directory" >&2
  exit 1
}
echo "$dir/example/prometheus-operator-crd"
