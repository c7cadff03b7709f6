#!/usr/bin/env bash
# Builds the dev tools from the Go module proxy, each at the release pinned in its own Go module:
#
#   build.sh [kubernetes]   kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl, kube-proxy,
#                           etcd (gobuild/; with K8S_VERSION=v1.37.2, gobuild-1.37/)
#   build.sh virtual-kubernetes  the same from gobuild/ whatever K8S_VERSION says: the vclusters' control plane
#   build.sh helm           helm                                                    (gobuild-helm/)
#   build.sh promtool       promtool, which tests the chart's alert rules           (gobuild-prometheus/)
#   build.sh prometheus     Prometheus, which scrapes the dev nodes' kubelets and Berth  (gobuild-prometheus/)
#   build.sh prom-label-proxy  prom-label-proxy, which holds a query to one namespace  (gobuild-prom-label-proxy/)
#   build.sh alertmanager   Alertmanager, which routes the tenant alerts Prometheus fires to Berth  (gobuild-alertmanager/)
#   build.sh metrics-server  metrics-server, which serves `kubectl top` (metrics.k8s.io)  (gobuild-metrics-server/)
#   build.sh crds           the CRDs of the chart's optional monitoring objects (PrometheusRule, ServiceMonitor)
#   build.sh coredns        coredns, the cluster DNS, with only the plugins a cluster needs  (gobuild-coredns/)
#   build.sh local-path     local-path-provisioner, the dev cluster's StorageClass           (gobuild-local-path/)
#   build.sh netpol         kube-network-policies' netpol, patched (see build_netpol)         (patches/)
#   build.sh e2e            e2e.test, the upstream end-to-end suite, and agnhost             (gobuild/)
#   build.sh vcluster       vcluster's syncer (/vcluster of its release image)             (gobuild-vcluster/)
#   build.sh kine           kine with SQLite (cgo, static), the syncer's embedded store      (gobuild-kine/)
#
# and prints the directory holding them as its last line. One module per tool, so helm's or
# Prometheus's dependency versions never move the Kubernetes pins. Output and Go's build cache live under
# BERTH_CACHE (default ~/.cache/berth): a second build on the same machine is a stamp check, and a changed
# pin rebuilds only its own tool.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
cache="${BERTH_CACHE:-$HOME/.cache/berth}"
target="${1:-kubernetes}"

# pinned <module dir> <module path>: the version of <module path> that <module dir>/go.mod requires.
pinned() { awk -v m="$2" '$1==m{print $2; exit} $1=="require" && $2==m{print $3; exit}' "$here/$1/go.mod"; }

# inputs_hash <module dir>: everything the build reads from this checkout (the module, its sources, this script).
inputs_hash() {
  (cd "$here" && find "$1" -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) | LC_ALL=C sort |
    xargs cat build.sh) | sha256sum | cut -d' ' -f1
}

# require_go: stops with a readable message where Go is missing.
require_go() { command -v go >/dev/null || { echo "devcluster: Go is required (https://go.dev/dl)" >&2; exit 1; }; }

# fresh <output dir> <inputs hash>: whether <output dir> holds a build of exactly these inputs.
fresh() { [[ -f "$1/.stamp" && "$(cat "$1/.stamp")" == "$2" ]]; }

# go_in <source dir> <go arguments...>: runs go in <source dir>: static binaries, Go's build cache under BERTH_CACHE.
go_in() {
  local src="$1"
  shift
  (cd "$src" && GOCACHE="$cache/go-build" GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 go "$@")
}

# compile <output dir> <inputs hash> <name> <version> <command...>: runs the command (which builds into
# <output dir>), then stamps <output dir> with the inputs' hash.
compile() {
  local out="$1" want="$2" name="$3" version="$4" start
  shift 4
  require_go
  mkdir -p "$out"
  start=$(date +%s)
  echo "devcluster: building $name $version into $out (cold builds take a while on 2 cores)" >&2
  "$@"
  echo "$want" > "$out/.stamp"
  echo "devcluster: built $name in $(( $(date +%s) - start ))s" >&2
}

# build <module dir> <output name> <version> <ldflags> <go build args...>: builds into a directory keyed by the
# inputs' hash, so checkouts with different pins (branches, worktrees) never rebuild each other's binaries; Go's
# build cache is shared, so a second set is mostly a relink. Prints the directory.
build() {
  local dir="$1" name="$2" version="$3" ldflags="$4"
  shift 4
  local want out
  want="$(inputs_hash "$dir")"
  out="$cache/devcluster/$name-$version-${want:0:12}/bin"
  fresh "$out" "$want" ||
    compile "$out" "$want" "$name" "$version" go_in "$here/$dir" build -trimpath -ldflags "$ldflags" -o "$out/" "$@"
  echo "$out"
}

# module_dir <module>@<version>: where `go mod download` put that module's source (read-only).
module_dir() {
  local dir
  dir="$(cd "$cache" && GOFLAGS=-mod=mod go mod download -json "$1" | awk -F'"' '$2=="Dir"{print $4}')"
  [[ -n "$dir" ]] || { echo "devcluster: could not download $1" >&2; exit 1; }
  echo "$dir"
}

# kubernetes_ldflags <version>: the version stamps of Kubernetes' own build (hack/lib/version.sh).
kubernetes_ldflags() {
  local version="$1" major minor ldflags="-s -w" pkg
  major="${version#v}"; minor="${major#*.}"; major="${major%%.*}"; minor="${minor%%.*}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$ldflags"
}

# kubernetes_module: the module dir of the Kubernetes release to build: gobuild/ (the default), or with K8S_VERSION
# set, the gobuild*/ dir that pins that release (gobuild-1.37/: the newer release the cluster tests also pass on).
kubernetes_module() {
  local dir dirs
  dirs="gobuild $(cd "$here" && echo gobuild-1.*)"
  for dir in $dirs; do
    if [[ -z "${K8S_VERSION:-}" || "$(pinned "$dir" k8s.io/kubernetes)" == "$K8S_VERSION" ]]; then
      echo "$dir"
      return
    fi
  done
  echo "devcluster: no module pins Kubernetes $K8S_VERSION; K8S_VERSION may be one of:" \
    "$(for dir in $dirs; do pinned "$dir" k8s.io/kubernetes; done | xargs)" >&2
  exit 1
}

build_kubernetes() {
  local version module
  module="$(kubernetes_module)"
  version="$(pinned "$module" k8s.io/kubernetes)"
  build "$module" kubernetes "$version" "$(kubernetes_ldflags "$version")" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kubectl \
    k8s.io/kubernetes/cmd/kube-proxy \
    ./cmd/etcd
}

build_e2e() {
  # The upstream end-to-end suite and the agnhost test image's binary, from the same module and pin as the
  # cluster's binaries (gobuild/, tools_e2e.go). Heavy (the whole suite compiles in), so `make e2e-build` builds it,
  # not `make devcluster`.
  local version ldflags want out
  version="$(pinned gobuild k8s.io/kubernetes)"
  ldflags="$(kubernetes_ldflags "$version")"
  want="$(inputs_hash gobuild)"
  out="$cache/devcluster/e2e-$version-${want:0:12}/bin"
  fresh "$out" "$want" || compile "$out" "$want" "e2e.test and agnhost" "$version" e2e_binaries "$out" "$ldflags"
  echo "$out"
}

# e2e_binaries <output dir> <ldflags>: e2e.test, agnhost, and the suite's image list (test/utils/image/manifest.go),
# from which devcluster/images.py names the images the suite will ask for.
e2e_binaries() {
  local kubernetes
  go_in "$here/gobuild" test -c -trimpath -ldflags "$2" -o "$1/e2e.test" k8s.io/kubernetes/test/e2e
  go_in "$here/gobuild" build -trimpath -ldflags "$2" -o "$1/agnhost" k8s.io/kubernetes/test/images/agnhost
  kubernetes="$(go_in "$here/gobuild" list -m -f '{{.Dir}}' k8s.io/kubernetes)"
  cp "$kubernetes/test/utils/image/manifest.go" "$1/image-manifest.go"
}

build_helm() {
  # The version flags of helm's own Makefile: `helm version`, and the Kubernetes version `helm lint` and
  # `helm template` assume (client-go v0.X.Y is Kubernetes 1.X).
  local version client_go k8s_minor ldflags pkg
  version="$(pinned gobuild-helm helm.sh/helm/v3)"
  client_go="$(pinned gobuild-helm k8s.io/client-go)"
  k8s_minor="$(cut -d. -f2 <<<"$client_go")"
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
  done
  build gobuild-helm helm "$version" "$ldflags" helm.sh/helm/v3/cmd/helm
}

# prometheus_ldflags <version>: the version stamps the Prometheus projects' own builds set (prometheus/common).
prometheus_ldflags() {
  local pkg="github.com/prometheus/common/version"
  echo "-s -w -X $pkg.Version=$1 -X $pkg.Branch=release -X $pkg.BuildDate=19700101-00:00:00"
}

build_promtool() {
  # remove_all_sd: Prometheus's own build tag for leaving out service discovery, which rule tests never use
  # (and some of whose client libraries the module proxy no longer serves).
  local version
  version="$(pinned gobuild-prometheus github.com/prometheus/prometheus)"
  build gobuild-prometheus promtool "$version" "$(prometheus_ldflags "$version")" -tags remove_all_sd \
    github.com/prometheus/prometheus/cmd/promtool
}

build_prometheus() {
  # The server, from the same module and pin as promtool, without service discovery (remove_all_sd): the dev
  # cluster names its scrape targets in files (file_sd), as the chart's Prometheus finds them by its own means.
  # Without the builtinassets tag the web UI is left out; the HTTP API, which is all Berth uses, is whole.
  local version
  version="$(pinned gobuild-prometheus github.com/prometheus/prometheus)"
  build gobuild-prometheus prometheus "$version" "$(prometheus_ldflags "${version#v}")" -tags remove_all_sd \
    github.com/prometheus/prometheus/cmd/prometheus
}

build_prom_label_proxy() {
  local version
  version="$(pinned gobuild-prom-label-proxy github.com/prometheus-community/prom-label-proxy)"
  build gobuild-prom-label-proxy prom-label-proxy "$version" "$(prometheus_ldflags "${version#v}")" \
    github.com/prometheus-community/prom-label-proxy
}

build_alertmanager() {
  # As Alertmanager's release build (promu) builds cmd/alertmanager: its own go.mod and go.sum (its pins, among
  # them automemlimit, differ from Prometheus's), CGO off, the version stamps of prometheus/common. The module
  # proxy's copy has no web UI (ui/app/dist is built with npm and not in the module), which the binary embeds:
  # a placeholder page stands in for it; the API Prometheus posts alerts to is whole.
  local version want out src dir ui
  version="$(pinned gobuild-alertmanager github.com/prometheus/alertmanager)"
  want="$(inputs_hash gobuild-alertmanager)"
  out="$cache/devcluster/alertmanager-$version-${want:0:12}/bin"
  if ! fresh "$out" "$want"; then
    require_go
    src="$cache/devcluster/alertmanager-$version-${want:0:12}/src"
    rm -rf "$src"
    mkdir -p "$(dirname "$src")"
    dir="$(module_dir "github.com/prometheus/alertmanager@$version")"
    cp -R "$dir" "$src"
    chmod -R u+w "$src"
    for ui in elm mantine; do
      mkdir -p "$src/ui/app/dist/$ui"
      echo "<!doctype html><title>Alertmanager</title><p>No web UI in this build (Berth's dev cluster)." \
        > "$src/ui/app/dist/$ui/index.html"
    done
    compile "$out" "$want" alertmanager "$version" go_in "$src" build -trimpath \
      -ldflags "$(prometheus_ldflags "${version#v}")" -o "$out/alertmanager" ./cmd/alertmanager
  fi
  echo "$out"
}

build_metrics_server() {
  # As metrics-server's Makefile builds it (CGO off, -trimpath), with its version stamps on client-go's version
  # package (what `metrics-server --version` and its User-Agent show); stripped like the other tools.
  local version ldflags pkg="k8s.io/client-go/pkg/version"
  version="$(pinned gobuild-metrics-server sigs.k8s.io/metrics-server)"
  ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  build gobuild-metrics-server metrics-server "$version" "$ldflags" sigs.k8s.io/metrics-server/cmd/metrics-server
}

build_coredns() {
  local version ldflags
  version="$(pinned gobuild-coredns github.com/coredns/coredns)"
  ldflags="-s -w -X github.com/coredns/coredns/coremain.GitCommit=$version"
  build gobuild-coredns coredns "$version" "$ldflags" .
}

build_local_path() {
  local version
  version="$(pinned gobuild-local-path github.com/rancher/local-path-provisioner)"
  build gobuild-local-path local-path-provisioner "$version" "-s -w -X main.VERSION=$version" \
    github.com/rancher/local-path-provisioner
}

build_netpol() {
  # kube-network-policies, built as its upstream image builds it (its own go.mod and go.sum, `go build ./cmd`
  # into /bin/netpol), from a copy of its module source with our patch applied: the patch's header says what it
  # changes and why (NFQUEUE through nft_compat on kernels without nft_queue; --disable-nri).
  local module=sigs.k8s.io/kube-network-policies version=v0.8.0
  local patch="$here/patches/kube-network-policies-$version-nfqueue-compat.patch" want out src dir
  want="$(cat "$here/build.sh" "$patch" | sha256sum | cut -d' ' -f1)"
  out="$cache/devcluster/netpol-$version-${want:0:12}/bin"
  if ! fresh "$out" "$want"; then
    require_go
    src="$cache/devcluster/netpol-$version-${want:0:12}/src"
    rm -rf "$src"
    mkdir -p "$(dirname "$src")"
    dir="$(module_dir "$module@$version")"
    cp -R "$dir" "$src"
    chmod -R u+w "$src"
    patch --quiet --forward -p1 -d "$src" < "$patch"
    compile "$out" "$want" netpol "$version" go_in "$src" build -trimpath -ldflags "-s -w" -o "$out/netpol" ./cmd
  fi
  echo "$out"
}

build_vcluster() {
  # As vcluster's Dockerfile builds cmd/vcluster (CGO off), with the version stamp and no telemetry key: the
  # chart's values turn telemetry off as well.
  local version
  version="$(pinned gobuild-vcluster github.com/loft-sh/vcluster)"
  build gobuild-vcluster vcluster "$version" \
    "-s -w -X github.com/loft-sh/vcluster/pkg/telemetry.SyncerVersion=$version" \
    github.com/loft-sh/vcluster/cmd/vcluster
}

build_kine() {
  # As kine's scripts/build builds it: cgo for mattn/go-sqlite3 with its tags and SQLite options, linked
  # statically (gcc and libc6-dev), so the binary runs in any image.
  local version want out tags cflags
  version="$(pinned gobuild-kine github.com/k3s-io/kine)"
  want="$(inputs_hash gobuild-kine)"
  out="$cache/devcluster/kine-$version-${want:0:12}/bin"
  tags="nats,sqlite_unlock_notify,sqlite_vtable,sqlite_stat4,sqlite_preupdate_hook,sqlite_math_functions"
  tags+=",sqlite_dbstat,sqlite_column_metadata"
  cflags="-DSQLITE_DEFAULT_MEMSTATUS=0 -DSQLITE_DISABLE_INTRINSIC -DSQLITE_ENABLE_COLUMN_METADATA"
  cflags+=" -DSQLITE_ENABLE_DBPAGE_VTAB -DSQLITE_ENABLE_DBSTAT_VTAB -DSQLITE_ENABLE_MATH_FUNCTIONS"
  cflags+=" -DSQLITE_ENABLE_MEMORY_MANAGEMENT -DSQLITE_ENABLE_OFFSET_SQL_FUNC -DSQLITE_ENABLE_PREUPDATE_HOOK"
  cflags+=" -DSQLITE_ENABLE_RBU -DSQLITE_ENABLE_RTREE -DSQLITE_ENABLE_SESSION -DSQLITE_ENABLE_SNAPSHOT"
  cflags+=" -DSQLITE_ENABLE_STAT4 -DSQLITE_ENABLE_UNLOCK_NOTIFY -DSQLITE_LIKE_DOESNT_MATCH_BLOBS"
  cflags+=" -DSQLITE_THREADSAFE=1 -DSQLITE_WITHOUT_ZONEMALLOC"
  fresh "$out" "$want" ||
    compile "$out" "$want" kine "$version" kine_binary "$out" "$version" "$tags" "$cflags"
  echo "$out"
}

# kine_binary <output dir> <version> <tags> <cflags>: go_in, but with cgo on (SQLite is C).
kine_binary() {
  command -v gcc >/dev/null || { echo "devcluster: kine needs gcc and libc6-dev (make deps)" >&2; exit 1; }
  (cd "$here/gobuild-kine" && GOCACHE="$cache/go-build" GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=1 \
    CGO_CFLAGS="$4" go build -trimpath -tags "$3" \
    -ldflags "-s -w -extldflags -static -X github.com/k3s-io/kine/pkg/version.Version=$2" \
    -o "$1/kine" github.com/k3s-io/kine)
}

build_crds() {
  # Nothing to compile: prometheus-operator's CRDs, from its Go module (verified against the Go checksum
  # database), so the server-side dry run of the rendered chart knows PrometheusRule and ServiceMonitor.
  local module=github.com/prometheus-operator/prometheus-operator version=v0.85.0 want out dir
  want="$(sha256sum < "$here/build.sh" | cut -d' ' -f1)"
  out="$cache/devcluster/crds-$version-${want:0:12}"
  if fresh "$out" "$want"; then
    echo "$out"
    return
  fi
  require_go
  mkdir -p "$out"
  dir="$(module_dir "$module@$version")"
  cp "$dir"/example/prometheus-operator-crd/monitoring.coreos.com_{prometheusrules,servicemonitors}.yaml "$out/"
  echo "$want" > "$out/.stamp"
  echo "$out"
}

case "$target" in
  kubernetes) build_kubernetes ;;
  # The virtual clusters' control plane stays at gobuild/'s release (vcluster v0.30 supports it), whatever
  # K8S_VERSION the host cluster runs.
  virtual-kubernetes) K8S_VERSION="" build_kubernetes ;;
  helm) build_helm ;;
  promtool) build_promtool ;;
  prometheus) build_prometheus ;;
  prom-label-proxy) build_prom_label_proxy ;;
  alertmanager) build_alertmanager ;;
  metrics-server) build_metrics_server ;;
  crds) build_crds ;;
  coredns) build_coredns ;;
  local-path) build_local_path ;;
  netpol) build_netpol ;;
  e2e) build_e2e ;;
  vcluster) build_vcluster ;;
  kine) build_kine ;;
  *) echo "usage: $0 [kubernetes|helm|promtool|prometheus|prom-label-proxy|alertmanager|metrics-server|crds|coredns|local-path|netpol|e2e|vcluster|kine]" >&2; exit 2 ;;
esac
