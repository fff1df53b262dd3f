# shellcheck shell=bash
# Sourced by scripts/test.sh before the tests run. Installs Debian's `prometheus` (the
# server and promtool) when either is missing, and exports what the chart's alert tests
# (`cargo test -p proxy-pool-e2e --test prometheus`) need:
#   PROXY_POOL_PROMTOOL    – `promtool check rules` / `promtool test rules` of
#                            charts/proxy-pool/files/prometheus-rules*.yaml
#   PROXY_POOL_PROMETHEUS  – a real Prometheus the e2e test runs on loopback against the
#                            local stack
# The tests fail (never skip) when either is missing.
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  _pp_sudo=""
  [ "$(id -u)" -eq 0 ] || _pp_sudo="sudo"
  $_pp_sudo apt-get update -qq
  # No recommends: the node exporter and the like are not wanted.
  DEBIAN_FRONTEND=noninteractive $_pp_sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  # The package enables a system-wide server; the tests run their own.
  if [ -d /run/systemd/system ]; then
    $_pp_sudo systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
  unset _pp_sudo
fi
export PROXY_POOL_PROMTOOL="${PROXY_POOL_PROMTOOL:-$(command -v promtool)}"
export PROXY_POOL_PROMETHEUS="${PROXY_POOL_PROMETHEUS:-$(command -v prometheus)}"
echo "promtool: $PROXY_POOL_PROMTOOL; prometheus: $PROXY_POOL_PROMETHEUS"
