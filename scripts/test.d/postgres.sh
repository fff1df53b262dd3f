# shellcheck shell=bash
# Sourced by scripts/test.sh before the tests run. Installs Debian's `postgresql` and
# `chromium` when missing and exports what the analytics tests need:
#   PROXY_POOL_PG_BINDIR  – directory with initdb/postgres/pg_isready (the tests run a
#                           private server per test on a free loopback port; as root they
#                           run it as the `postgres` user)
#   PROXY_POOL_CHROMIUM   – headless Chromium for the dashboard test
# The tests fail (never skip) when either is missing.
_pp_pg_need=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || _pp_pg_need+=(postgresql)
command -v chromium >/dev/null 2>&1 || _pp_pg_need+=(chromium)
if [ ${#_pp_pg_need[@]} -gt 0 ]; then
  _pp_sudo=""
  [ "$(id -u)" -eq 0 ] || _pp_sudo="sudo"
  $_pp_sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $_pp_sudo apt-get install -y -qq "${_pp_pg_need[@]}" >/dev/null
  unset _pp_sudo
fi
if [ -z "${PROXY_POOL_PG_BINDIR:-}" ]; then
  PROXY_POOL_PG_BINDIR="$(dirname "$(ls -d /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)")"
fi
export PROXY_POOL_PG_BINDIR
export PROXY_POOL_CHROMIUM="${PROXY_POOL_CHROMIUM:-$(command -v chromium)}"
unset _pp_pg_need
echo "postgres: $PROXY_POOL_PG_BINDIR; chromium: $PROXY_POOL_CHROMIUM"
