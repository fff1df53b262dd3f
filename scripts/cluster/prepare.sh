# Everything the local cluster needs before it starts (sourced by scripts/cluster-up.sh
# and scripts/test.d/cluster.sh): Debian packages, the Kubernetes node binaries, CoreDNS,
# Skipper and helm from their Go modules, and the images. Builds are cached under
# ${PROXY_POOL_CACHE_DIR:-.cache}; a warm run only checks stamps. Call
#   cluster_prepare ROOT [--no-build | --no-images]
# which sets CLUSTER_BIN_DIR, COREDNS_DIR, SKIPPER_DIR, HELM and writes the image list
# to $CLUSTER_IMAGES (REF ARCHIVE per line). --no-build packs the release binaries
# already built instead of running cargo; --no-images stops before the images (the
# test suite builds them beside the other tests, scripts/test.sh).

cluster_prepare() {
    local root=$1 build_flag=()
    [ "${2:-}" = --no-build ] && build_flag=(--no-build)
    local need=() pair tool pkg
    for pair in containerd:containerd runc:runc /usr/lib/cni/bridge:containernetworking-plugins \
        iptables:iptables nft:nftables conntrack:conntrack umoci:umoci skopeo:skopeo \
        openssl:openssl gcc:gcc curl:curl strip:binutils; do
        tool=${pair%%:*} pkg=${pair#*:}
        if [ "${tool#/}" != "$tool" ]; then [ -e "$tool" ] || need+=("$pkg")
        else command -v "$tool" >/dev/null 2>&1 || need+=("$pkg"); fi
    done
    [ -e /usr/lib/x86_64-linux-gnu/libc.a ] || need+=(libc6-dev)
    if [ ${#need[@]} -gt 0 ]; then
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        cluster_say "installing ${need[*]} from Debian's packages"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    fi
    CLUSTER_BIN_DIR=$(PROXY_POOL_K8S_WITH_NODE=1 bash "$root/scripts/k8s-bins.sh")
    { read -r COREDNS_DIR; read -r SKIPPER_DIR; } < <(bash "$root/scripts/cluster/bins.sh")
    HELM=${PROXY_POOL_HELM_BIN:-$(bash "$root/scripts/helm-bin.sh")}
    [ "${2:-}" = --no-images ] && return 0
    # The product images, then the cluster's own: the pause image (one static binary)
    # and the e2e client image (that binary as its idle entrypoint, plus the host's curl
    # and its libraries, for tests that run requests inside a pod).
    local images=${PROXY_POOL_CACHE_DIR:-$root/.cache}/cluster-images
    mkdir -p "$images"
    CLUSTER_IMAGES=$images/images.list
    (cd "$root" && scripts/images.sh "${build_flag[@]}") >"$CLUSTER_IMAGES.partial"
    (
        set -euo pipefail
        # shellcheck source=scripts/lib/oci.sh
        . "$root/scripts/lib/oci.sh"
        local key stage
        key=$( { cat "$root/scripts/cluster/pause.c" "$root/scripts/lib/oci.sh"; gcc --version;
            sha256sum "$(command -v curl)" $(ldd "$(command -v curl)" | awk '/=> \// { print $3 }') | cut -c1-64; } |
            sha256sum | cut -c1-16)
        if [ ! -f "$images/pause-$key.oci.tar" ] || [ ! -f "$images/e2e-client-$key.oci.tar" ]; then
            stage=$(mktemp -d)
            trap 'rm -rf "$stage"' EXIT
            gcc -Os -static -o "$stage/pause" "$root/scripts/cluster/pause.c"
            strip "$stage/pause"
            oci_rootfs "$stage/pause-root"
            oci_add_binary "$stage/pause-root" "$stage/pause" /pause
            oci_archive "$stage/pause-root" "$CLUSTER_PAUSE_IMAGE" "$images/pause-$key.oci.tar" /pause
            oci_rootfs "$stage/client-root"
            oci_add_binary "$stage/client-root" "$stage/pause" /usr/local/bin/pause
            oci_add_binary "$stage/client-root" "$(command -v curl)" /usr/local/bin/curl
            oci_archive "$stage/client-root" "$CLUSTER_CLIENT_IMAGE" "$images/e2e-client-$key.oci.tar" \
                /usr/local/bin/pause
            find "$images" -maxdepth 1 -name '*.oci.tar' ! -name "*-$key.oci.tar" -delete
        fi
        echo "$CLUSTER_PAUSE_IMAGE $images/pause-$key.oci.tar"
        echo "$CLUSTER_CLIENT_IMAGE $images/e2e-client-$key.oci.tar"
    ) >>"$CLUSTER_IMAGES.partial"
    mv -f "$CLUSTER_IMAGES.partial" "$CLUSTER_IMAGES"
}
