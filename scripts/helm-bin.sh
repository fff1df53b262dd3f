#!/usr/bin/env bash
# Builds helm from its Go module (Debian ships no current helm; no prebuilt downloads)
# into ${PROXY_POOL_CACHE_DIR:-<repo>/.cache}/helm/<version>/helm, skipping the build
# when that binary already exists, and prints the binary's path on stdout (progress
# goes to stderr). Override the version with PROXY_POOL_HELM_VERSION.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${PROXY_POOL_HELM_VERSION:-v3.22.0}"

say() { printf 'helm-bin: %s\n' "$*" >&2; }

command -v go >/dev/null 2>&1 || PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null 2>&1 || { say "the Go toolchain is required"; exit 1; }

cache_dir="${PROXY_POOL_CACHE_DIR:-$repo/.cache}"
out_dir="$cache_dir/helm/$version"
out="$out_dir/helm"
if [ -x "$out" ]; then
  say "helm $version: already built"
  echo "$out"
  exit 0
fi
mkdir -p "$out_dir"
say "helm $version: building helm.sh/helm/v3/cmd/helm (takes minutes on a small machine)"
start=$SECONDS
# `go install pkg@version` builds the module exactly as its own go.mod/go.sum pin it;
# GOBIN is a scratch dir so an interrupted build never leaves a half-written binary.
tmp="$(mktemp -d "$out_dir/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS="${GOFLAGS:-}" \
  go install -trimpath -buildvcs=false -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$version"
mv -f "$tmp/helm" "$out"
say "helm $version: built in $((SECONDS - start))s"
echo "$out"
