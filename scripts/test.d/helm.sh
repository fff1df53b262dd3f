# shellcheck shell=bash
# Sourced by scripts/test.sh before the tests run: builds helm from its Go module once
# (cached under ${PROXY_POOL_CACHE_DIR:-.cache}/helm/) and tells the chart tests where
# it is. A caller that already has a current helm can set PROXY_POOL_HELM_BIN.
if [ -z "${PROXY_POOL_HELM_BIN:-}" ]; then
  PROXY_POOL_HELM_BIN="$(bash "$(dirname "${BASH_SOURCE[0]}")/../helm-bin.sh")"
fi
export PROXY_POOL_HELM_BIN
echo "helm: $PROXY_POOL_HELM_BIN"
