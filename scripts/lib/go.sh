# shellcheck shell=bash
# Go toolchain helpers shared by the scripts that build tools from their published Go
# modules (scripts/k8s-bins.sh, scripts/helm-bin.sh, scripts/cluster/bins.sh); sourced,
# not run. They report through the caller's `say`.

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
