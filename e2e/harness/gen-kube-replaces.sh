#!/usr/bin/env bash
# Regenerates e2e/gomod/kubernetes/go.mod for a Kubernetes release: k8s.io/kubernetes requires its
# staging modules at the fake version v0.0.0 and resolves them with local replace lines that only
# work when it is the main module (kubernetes/kubernetes#79384, golang/go#32776). We replace every
# staging module with its published v0.<minor>.<patch>, generated from the release's own go.mod.
# Usage: e2e/harness/gen-kube-replaces.sh v1.37.2   (run by hand when bumping; never implicitly)
set -euo pipefail
ver=${1:?usage: $0 vX.Y.Z}
dir=$(cd "$(dirname "$0")/../gomod/kubernetes" && pwd)
cd "$dir"
modfile=$(go mod download -json "k8s.io/kubernetes@$ver" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
staging_ver="v0.${ver#v1.}"
{
  printf 'module leasehold.dev/e2e/kubernetes\n\ngo 1.26.0\n\ngodebug default=go1.26\n\n'
  printf 'require k8s.io/kubernetes %s\n\nreplace (\n' "$ver"
  grep -E '^\s+k8s\.io/[a-z0-9-]+ => \./staging/' "$modfile" | awk -v v="$staging_ver" '{printf "\t%s => %s %s\n", $1, $1, v}'
  printf ')\n'
} > go.mod
n=$(grep -c "=> k8s.io" go.mod)
[ "$n" -ge 30 ] || { echo "only $n staging replaces generated from $modfile" >&2; exit 1; }
rm -f go.sum
go get "k8s.io/kubernetes/cmd/kube-apiserver@$ver" k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
# Fail loudly if any k8s.io module is still at the fake v0.0.0.
if go list -m all | grep -v ' => ' | grep -E '^k8s\.io/\S+ v0\.0\.0$'; then
  echo "some k8s.io modules resolve to v0.0.0 (see above)" >&2; exit 1
fi
echo "go.mod regenerated with $n replaces at $staging_ver"
