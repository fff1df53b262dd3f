# shellcheck shell=bash
# Sourced by scripts/test.sh before the tests run: builds etcd, kube-apiserver, kubectl
# and kube-controller-manager (one operator e2e test runs it) from Go source once,
# cached under ${PROXY_POOL_CACHE_DIR:-.cache}/k8s/, and tells the operator e2e tests
# where they are. A caller that already built them can set PROXY_POOL_K8S_BIN_DIR.
if [ -z "${PROXY_POOL_K8S_BIN_DIR:-}" ]; then
  PROXY_POOL_K8S_BIN_DIR="$(PROXY_POOL_K8S_WITH_KCM="${PROXY_POOL_K8S_WITH_KCM:-1}" \
    bash "$(dirname "${BASH_SOURCE[0]}")/../k8s-bins.sh")"
fi
export PROXY_POOL_K8S_BIN_DIR
echo "Kubernetes test binaries: $PROXY_POOL_K8S_BIN_DIR"
