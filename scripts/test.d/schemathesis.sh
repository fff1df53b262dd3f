# shellcheck shell=bash
# Sourced by scripts/test.sh before the tests run (or run directly, which prints the
# path): installs schemathesis from PyPI into a venv under
# ${PROXY_POOL_CACHE_DIR:-.cache}/schemathesis/ once, and exports
# PROXY_POOL_SCHEMATHESIS_BIN for controller/tests/schemathesis.rs, which runs it
# against a live controller (every documented Distribution and admin operation, every
# check). Needs python3 with venv (installed from Debian's packages when missing) and
# PyPI. A caller that already has schemathesis 4 can set PROXY_POOL_SCHEMATHESIS_BIN.
_pp_schemathesis_bin() {
  local root cache venv version
  version="4.32.5"
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  cache="${PROXY_POOL_CACHE_DIR:-$root/.cache}/schemathesis"
  venv="$cache/venv-$version"
  if [ ! -x "$venv/bin/st" ]; then
    mkdir -p "$cache"
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -m venv "$venv" >/dev/null 2>&1; then
      local sudo=""
      [ "$(id -u)" -eq 0 ] || sudo="sudo"
      $sudo apt-get update -qq >&2
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3 python3-venv >/dev/null
      rm -rf "$venv"
      python3 -m venv "$venv" >&2
    fi
    "$venv/bin/pip" install -q --disable-pip-version-check "schemathesis==$version" >&2
  fi
  printf '%s\n' "$venv/bin/st"
}

if [ -z "${PROXY_POOL_SCHEMATHESIS_BIN:-}" ]; then
  PROXY_POOL_SCHEMATHESIS_BIN="$(_pp_schemathesis_bin)"
fi
export PROXY_POOL_SCHEMATHESIS_BIN
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  printf '%s\n' "$PROXY_POOL_SCHEMATHESIS_BIN"
else
  echo "schemathesis: $PROXY_POOL_SCHEMATHESIS_BIN"
fi
