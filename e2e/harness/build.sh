#!/usr/bin/env bash
# Builds (or reuses) the upstream binaries the local control plane runs, from the pinned Go wrapper
# modules under e2e/gomod/. Binaries are cached by version outside the repository, in
# ${LEASEHOLD_CACHE:-$HOME/.cache/leasehold}/bin/<version>/, so a second run takes seconds.
# Usage: e2e/harness/build.sh            prints the bin directory on stdout when everything is there
set -euo pipefail
root=$(cd "$(dirname "$0")/../gomod" && pwd)
cache=${LEASEHOLD_CACHE:-$HOME/.cache/leasehold}
modver() { awk -v m="$2" '$1==m {print $2; exit}' "$root/$1/go.mod"; }
kube=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$root/kubernetes/go.mod")
etcd=$(modver etcd go.etcd.io/etcd/server/v3)
kwok=$(modver kwok sigs.k8s.io/kwok)
helm=$(modver helm helm.sh/helm/v3)
bin="$cache/bin/kube-$kube-etcd-$etcd-kwok-$kwok-helm-$helm"
mkdir -p "$bin"
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local

log() { echo "[build] $*" >&2; }
build() { # build <module dir> <output name> <package> [ldflags]
  local dir=$1 out=$2 pkg=$3 ld=${4:-}
  [ -x "$bin/$out" ] && return 0
  log "building $out from $pkg (cold builds take minutes)"
  local t0=$SECONDS
  (cd "$root/$dir" && go build -trimpath -ldflags "-s -w $ld" -o "$bin/$out.tmp" "$pkg")
  mv "$bin/$out.tmp" "$bin/$out"
  log "built $out in $((SECONDS - t0)) s"
}

# Version stamping as hack/lib/version.sh does (kube::version::ldflags), so /version reports the
# real release and kubectl/helm skew logic works.
minor=${kube#v1.}; minor=${minor%%.*}
stamp=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=" -X '$pkg.gitVersion=$kube' -X '$pkg.gitMajor=1' -X '$pkg.gitMinor=$minor'"
  stamp+=" -X '$pkg.gitTreeState=clean' -X '$pkg.buildDate=2026-01-01T00:00:00Z'"
done
build etcd etcd go.etcd.io/etcd/server/v3
for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  build kubernetes "$c" "k8s.io/kubernetes/cmd/$c" "$stamp"
done
build kwok kwok sigs.k8s.io/kwok/cmd/kwok
hminor=$(awk '$1=="k8s.io/client-go" {print $2; exit}' "$root/helm/go.mod"); hminor=${hminor#v0.}; hminor=${hminor%%.*}
build helm helm helm.sh/helm/v3/cmd/helm \
  "-X helm.sh/helm/v3/internal/version.version=$helm -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$hminor -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$hminor"
echo "$bin"
