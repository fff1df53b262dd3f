#!/usr/bin/env bash
# Builds helm from its Go module (Debian ships no current helm; no prebuilt downloads)
# into ${PROXY_POOL_CACHE_DIR:-<repo>/.cache}/helm/<version>/helm, skipping the build
# when that binary already exists, and prints the binary's path on stdout (progress
# goes to stderr). Override the version with PROXY_POOL_HELM_VERSION.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${PROXY_POOL_HELM_VERSION:-v3.22.0}"

# shellcheck source=scripts/lib/go.sh
. "$repo/scripts/lib/go.sh"
go_tool_init helm-bin

out_dir="$cache_root/helm/$version"
out="$out_dir/helm"
mkdir -p "$out_dir"

# Like helm's Makefile: the Kubernetes version helm assumes for `helm template` and
# `helm lint` (Capabilities.KubeVersion) follows its client-go module (v0.X → 1.X);
# without it helm claims Kubernetes 1.20.
mod_dir="$(go_mod_dir "helm.sh/helm/v3@$version")"
client_go="$(awk '$1 == "k8s.io/client-go" { print $2; exit }' "$mod_dir/go.mod")"
k8s_minor="$(echo "$client_go" | cut -d. -f2)"
[ -n "$k8s_minor" ] || { say "cannot read the client-go version of helm $version"; exit 1; }
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags="$ldflags -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done
stamp="$(printf '%s\n%s\n' "$ldflags" "$(go version)" | sha256sum | cut -d' ' -f1)"
# A binary built with other flags or another Go is stale: build it again.
[ "$(cat "$out_dir/.stamp" 2>/dev/null)" = "$stamp" ] || rm -f "$out"

# `go install pkg@version` builds the module exactly as its own go.mod/go.sum pin it.
build_helm() {
  CGO_ENABLED=0 GOBIN="$1" GOFLAGS="${GOFLAGS:-}" \
    go install -trimpath -buildvcs=false -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$version"
}
go_build_once "helm $version" "$out" build_helm
printf '%s\n' "$stamp" > "$out_dir/.stamp"
echo "$out"
