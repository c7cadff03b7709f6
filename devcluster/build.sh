#!/usr/bin/env bash
# Builds the dev control plane's upstream binaries (kube-apiserver,
# kube-controller-manager, kubectl, etcd) from the Go module proxy at the
# release pinned in gobuild/go.mod. Output and Go's build cache live under
# BERTH_CACHE (default ~/.cache/berth) so a second build on the same machine is
# a stamp check, and a changed pin rebuilds only what changed.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
K8S_VERSION="$(awk '$1=="k8s.io/kubernetes"{print $2; exit}' "$here/gobuild/go.mod")"
cache="${BERTH_CACHE:-$HOME/.cache/berth}"
out="$cache/devcluster/$K8S_VERSION/bin"
stamp="$out/.stamp"
want="$(cat "$here/gobuild/go.mod" "$here/gobuild/go.sum" "$here/build.sh" "$here"/gobuild/cmd/*/*.go | sha256sum | cut -d' ' -f1)"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "$out"
  exit 0
fi

command -v go >/dev/null || { echo "devcluster: Go is required (https://go.dev/dl)" >&2; exit 1; }
export GOCACHE="$cache/go-build"
export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0
mkdir -p "$out"

major="${K8S_VERSION#v}"; minor="${major#*.}"; major="${major%%.*}"; minor="${minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

cd "$here/gobuild"
start=$(date +%s)
echo "devcluster: building Kubernetes $K8S_VERSION and etcd into $out (cold builds take a while on 2 cores)" >&2
go build -trimpath -ldflags "$ldflags" -o "$out/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kubectl \
  ./cmd/etcd
echo "$want" > "$stamp"
echo "devcluster: built in $(( $(date +%s) - start ))s" >&2
echo "$out"
