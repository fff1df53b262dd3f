#!/usr/bin/env bash
# Runs CI as a brand-new machine would: `.ci/run` in a fresh clone of this repository's
# HEAD (or of REF), with an empty CARGO_HOME (no downloaded crates), empty Go module and
# build caches, empty project caches (Kubernetes binaries, helm, schemathesis, images)
# and an empty cargo target directory. Everything lives in one scratch directory outside
# the repository, removed afterwards (kept with --keep). Prints the wall time.
#
#   scripts/ci-fresh.sh [--keep] [--ref REF] [--dir DIR]
#
# What it cannot make fresh: Debian packages already installed on this machine (apt-get
# is not undone) and the Rust toolchain itself (RUSTUP_HOME is shared, as on CI).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
keep=0
ref="HEAD"
scratch=""
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --ref) ref="$2"; shift ;;
    --dir) scratch="$2"; shift ;;
    -h|--help) sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "ci-fresh.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done

if [ -z "$scratch" ]; then
  scratch="$(mktemp -d "${TMPDIR:-/tmp}/proxy-pool-ci-fresh.XXXXXX")"
else
  mkdir -p "$scratch"
  [ -z "$(ls -A "$scratch")" ] || { echo "ci-fresh.sh: $scratch is not empty" >&2; exit 2; }
fi
case "$scratch" in
  "$repo"|"$repo"/*) echo "ci-fresh.sh: the scratch directory must be outside the repository" >&2; exit 2 ;;
esac

cleanup() {
  if [ "$keep" = 1 ]; then
    echo "ci-fresh: kept $scratch" >&2
  else
    # Go's module cache is read-only on disk.
    chmod -R u+w "$scratch" 2>/dev/null || true
    rm -rf "$scratch"
  fi
}
trap cleanup EXIT

commit="$(git -C "$repo" rev-parse "$ref")"
git clone --quiet --no-local "$repo" "$scratch/clone"
git -C "$scratch/clone" checkout --quiet "$commit"

mkdir -p "$scratch/cargo-home" "$scratch/go" "$scratch/xdg-cache"
# Go's settings (GOFLAGS, GOTOOLCHAIN, GOPROXY) stay: they are configuration, not cache.
export RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}"
export CARGO_HOME="$scratch/cargo-home"
export GOPATH="$scratch/go"
export GOMODCACHE="$scratch/go/pkg/mod"
export GOCACHE="$scratch/go/build-cache"
export XDG_CACHE_HOME="$scratch/xdg-cache"
export PIP_NO_CACHE_DIR=1
export PROXY_POOL_CACHE_DIR="$scratch/cache"
export CARGO_TARGET_DIR="$scratch/target"
# Nothing of the caller's may short-cut a build.
unset PROXY_POOL_K8S_BIN_DIR PROXY_POOL_HELM_BIN PROXY_POOL_SCHEMATHESIS_BIN \
  PROXY_POOL_CLUSTER_BIN_DIR PROXY_POOL_IMAGES_DIR 2>/dev/null || true
export CI=true

echo "ci-fresh: commit $commit, scratch $scratch" >&2
start=$(date +%s)
set +e
(cd "$scratch/clone" && ./.ci/run)
rc=$?
set -e
end=$(date +%s)
wall=$((end - start))
printf 'ci-fresh: .ci/run exited %d after %dm%02ds (%d s) on a cold machine (commit %s)\n' \
  "$rc" $((wall / 60)) $((wall % 60)) "$wall" "${commit:0:12}"
exit "$rc"
