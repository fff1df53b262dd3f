#!/usr/bin/env bash
# Builds the cluster add-ons that are not part of Kubernetes from their published Go
# modules (no prebuilt downloads):
#   coredns   github.com/coredns/coredns   (cluster DNS)
#   skipper   github.com/zalando/skipper   (the Ingress controller)
# into ${PROXY_POOL_CACHE_DIR:-<repo>/.cache}/cluster-bins/<name>-<version>/<name>, skipping
# binaries already built, and prints the directory holding both on stdout (one per
# line: coredns's dir, then skipper's; progress goes to stderr). Override the versions
# with PROXY_POOL_COREDNS_VERSION / PROXY_POOL_SKIPPER_VERSION.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
coredns_version="${PROXY_POOL_COREDNS_VERSION:-v1.15.0}"
skipper_version="${PROXY_POOL_SKIPPER_VERSION:-v0.23.0}"

# shellcheck source=scripts/lib/go.sh
. "$repo/scripts/lib/go.sh"
go_tool_init cluster-bins

cache_dir="$cache_root/cluster-bins"
ldflags="-s -w"
stamp="$(printf '%s\n%s\n' "$ldflags" "$(go version)" | sha256sum | cut -c1-12)"

# done_or_build NAME VERSION BUILD-FUNCTION: the binary's dir on stdout.
done_or_build() {
  local name="$1" version="$2" fn="$3"
  local out_dir="$cache_dir/$name-$version-$stamp"
  go_build_once "$name $version" "$out_dir/$name" "$fn" "$version"
  printf '%s\n' "$out_dir"
}

# `go install pkg@version` builds CoreDNS exactly as its go.mod/go.sum pin it, with
# its default plugin set (the cluster's Corefile uses kubernetes, template, errors,
# health, ready, cache and loop detection only).
build_coredns() {
  CGO_ENABLED=0 GOBIN="$2" GOFLAGS="${GOFLAGS:-}" \
    go install -trimpath -buildvcs=false -ldflags "$ldflags" "github.com/coredns/coredns@$1" >&2
}

# Skipper's `go install …@version` asks the module proxy for its version list, which
# is refused here; building ./cmd/skipper as the main module from a copy of the module
# source (the module cache is read-only) uses its own go.mod/go.sum the same way.
build_skipper() {
  local dir
  dir="$(go_mod_dir "github.com/zalando/skipper@$1")"
  [ -d "$dir" ] || { say "skipper $1: module source not found"; return 1; }
  cp -r "$dir" "$2/src"
  chmod -R u+w "$2/src"
  (cd "$2/src" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" \
    go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$2/skipper" ./cmd/skipper >&2)
  rm -rf "$2/src"
}

done_or_build coredns "$coredns_version" build_coredns
done_or_build skipper "$skipper_version" build_skipper
