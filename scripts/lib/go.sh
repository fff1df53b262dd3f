# shellcheck shell=bash
# Go toolchain helpers shared by the scripts that build tools from their published Go
# modules (scripts/k8s-bins.sh, scripts/helm-bin.sh, scripts/cluster/bins.sh); sourced,
# not run. They report through `say` (go_tool_init names the script).

# go_tool_init TAG [MESSAGE]: sets up a script that builds tools into the cache (it has
# set $repo): `say` reports progress as "TAG: ..." on stderr, $cache_root is
# ${PROXY_POOL_CACHE_DIR:-<repo>/.cache}, and the Go toolchain is required (go_require).
go_tool_init() {
  go_tool_tag="$1"
  cache_root="${PROXY_POOL_CACHE_DIR:-$repo/.cache}"
  go_require "${2:-}"
}
say() { printf '%s: %s\n' "$go_tool_tag" "$*" >&2; }

# go_require [MESSAGE]: puts the Go toolchain of the Debian-based images
# (/usr/local/go) on PATH when `go` is not on it; exits with MESSAGE when there is none.
go_require() {
  command -v go >/dev/null 2>&1 || PATH="$PATH:/usr/local/go/bin"
  command -v go >/dev/null 2>&1 || { say "${1:-the Go toolchain is required}"; exit 1; }
}

# go_mod_dir MODULE@VERSION: downloads the module into the (read-only) module cache and
# prints its source directory.
go_mod_dir() {
  go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

# go_build_once NAME OUT BUILD-COMMAND...: builds the binary OUT unless it is already
# there. BUILD-COMMAND runs with a scratch dir beside OUT as its last argument and leaves
# the binary there under OUT's file name; only a finished build is moved to OUT, so an
# interrupted one never leaves a half-written binary that a later run would take as done.
go_build_once() {
  local name="$1" out="$2"
  shift 2
  if [ -x "$out" ]; then
    say "$name: already built"
    return 0
  fi
  mkdir -p "$(dirname "$out")"
  say "$name: building (takes minutes on a small machine)"
  local start=$SECONDS tmp
  tmp="$(mktemp -d "$(dirname "$out")/.build.XXXXXX")"
  if ! "$@" "$tmp"; then
    rm -rf "$tmp"
    say "$name: build failed"
    exit 1
  fi
  mv -f "$tmp/$(basename "$out")" "$out"
  rm -rf "$tmp"
  say "$name: built in $((SECONDS - start))s"
}
