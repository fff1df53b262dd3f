# shellcheck shell=bash
# Sourced by scripts/test.sh before the tests run: prepares the cluster e2e test
# (`cargo test -p proxy-pool-e2e --test cluster`) — Debian's containerd, runc, CNI
# plugins, nftables, umoci and skopeo; kubelet, kube-scheduler and kube-proxy beside the
# other Kubernetes binaries; CoreDNS and Skipper — all cached under
# ${PROXY_POOL_CACHE_DIR:-.cache}, and exports PROXY_POOL_CLUSTER_PREPARED=1:
# scripts/test.sh then builds the release images and runs the cluster test in a lane of
# its own beside the other tests. The test itself runs
# scripts/cluster-up.sh --no-build and scripts/cluster-down.sh, so it needs root;
# without this preparation it fails under CI and is skipped (with a message) otherwise.
if [ "$(id -u)" -eq 0 ]; then
  _pp_cluster_start=$SECONDS
  # shellcheck source=scripts/cluster/env.sh
  . "$(dirname "${BASH_SOURCE[0]}")/../cluster/env.sh"
  # shellcheck source=scripts/cluster/prepare.sh
  . "$(dirname "${BASH_SOURCE[0]}")/../cluster/prepare.sh"
  CLUSTER_TAG=cluster-prepare cluster_prepare "$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)" --no-images
  export PROXY_POOL_CLUSTER_PREPARED=1
  echo "cluster: prepared in $((SECONDS - _pp_cluster_start))s (the images are built in the cluster lane)"
  unset _pp_cluster_start
else
  echo "cluster: not root, the cluster e2e test cannot run (it fails under CI)"
fi
