#!/usr/bin/env bash
# Builds the Kubernetes test binaries from Go source (no prebuilt downloads):
#   etcd, kube-apiserver, kubectl            always
#   kube-controller-manager                   only with --with-controller-manager
#                                             (or PROXY_POOL_K8S_WITH_KCM=1)
#   kubelet, kube-scheduler, kube-proxy       only with --with-node (or
#                                             PROXY_POOL_K8S_WITH_NODE=1); implies
#                                             kube-controller-manager (a whole cluster)
# into ${PROXY_POOL_CACHE_DIR:-<repo>/.cache}/k8s/<k8s-version>-<stamp>/bin/, skipping binaries
# that are already built, and prints that bin dir on stdout (progress goes to stderr).
# The versions come from e2e/k8s/go.mod, the wrapper module that pins them.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mod_dir="$repo/e2e/k8s"

with_kcm="${PROXY_POOL_K8S_WITH_KCM:-0}"
with_node="${PROXY_POOL_K8S_WITH_NODE:-0}"
for arg in "$@"; do
  case "$arg" in
    --with-controller-manager) with_kcm=1 ;;
    --with-node) with_node=1 ;;
    -h|--help)
      sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
      exit 0 ;;
    *) echo "k8s-bins.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done
[ "$with_node" = 1 ] && with_kcm=1

# shellcheck source=scripts/lib/go.sh
. "$repo/scripts/lib/go.sh"
go_tool_init k8s-bins "the Go toolchain is required (go >= the version in e2e/k8s/go.mod)"

# Module versions, as written in the wrapper go.mod (the single source of truth).
mod_version() { awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$mod_dir/go.mod"; }
k8s_version="$(mod_version k8s.io/kubernetes)"
etcd_version="$(cd "$mod_dir" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
[ -n "$k8s_version" ] || { say "cannot read the k8s.io/kubernetes version from $mod_dir/go.mod"; exit 1; }

# Version stamps the upstream release build (hack/lib/version.sh) sets.
minor="${k8s_version#v1.}"; minor="${minor%%.*}"
stamp() {
  local pkg="$1"
  printf -- '-X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean -X %s.buildDate=1970-01-01T00:00:00Z ' \
    "$pkg" "$k8s_version" "$pkg" "$pkg" "$minor" "$pkg" "$pkg"
}
k8s_ldflags="-s -w $(stamp k8s.io/component-base/version)$(stamp k8s.io/client-go/pkg/version)"
etcd_ldflags="-s -w"

# The bin dir is named by a stamp of everything that goes into the binaries (go.mod,
# go.sum, the etcd wrapper, the Go version, the flags): binaries built from another
# wrapper module live in another dir, so two checkouts that pin different module sets
# (say a branch that adds a tool) never rebuild each other's binaries.
stamp_now="$(cat "$mod_dir/go.mod" "$mod_dir/go.sum" "$mod_dir/cmd/etcd/main.go" \
  <(go version) <(printf '%s\n%s\n' "$k8s_ldflags" "$etcd_ldflags") | sha256sum | cut -c1-12)"
bin_dir="$cache_root/k8s/$k8s_version-$stamp_now/bin"
mkdir -p "$bin_dir"

# build NAME PACKAGE LDFLAGS: the binary NAME in the bin dir.
build() {
  go_build_once "$1" "$bin_dir/$1" go_build_in_mod "$@"
}
go_build_in_mod() {
  local name="$1" pkg="$2" ldflags="$3" scratch="$4"
  (cd "$mod_dir" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" \
    go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$scratch/$name" "$pkg")
}

build etcd ./cmd/etcd "$etcd_ldflags"
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$k8s_ldflags"
build kubectl k8s.io/kubernetes/cmd/kubectl "$k8s_ldflags"
if [ "$with_kcm" = 1 ]; then
  build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$k8s_ldflags"
fi
if [ "$with_node" = 1 ]; then
  build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$k8s_ldflags"
  build kube-proxy k8s.io/kubernetes/cmd/kube-proxy "$k8s_ldflags"
  build kubelet k8s.io/kubernetes/cmd/kubelet "$k8s_ldflags"
fi

printf 'kubernetes %s\netcd %s\n' "$k8s_version" "$etcd_version" > "$bin_dir/VERSIONS"
echo "$bin_dir"
