#!/usr/bin/env bash
# Builds the Proxy Pool container images as OCI archives, with no registry and no
# container engine: release-profile binaries, each in an image holding only the binary
# and the shared libraries it links (no shell, no package manager), running as the
# non-root user 65532, labelled with version and git revision.
#
#   ./scripts/images.sh [--no-build] [--registry REG] [--tag TAG] [--out DIR]
#
#   --no-build      use the release binaries already in $CARGO_TARGET_DIR/release
#   --registry REG  image name prefix (default ghcr.io/proxy-pool, the chart's default)
#   --tag TAG       image tag (default: the chart's appVersion)
#   --out DIR       also copy the archives into DIR
#
# Images: proxy-pool-operator, proxy-pool-controller, proxy-pool-gateway,
# proxy-pool-checker, and proxy-pool-vendor-sim (the vendor simulator, for demos and
# tests). Archives are cached under ${PROXY_POOL_CACHE_DIR:-<repo>/.cache}/images/,
# keyed by the content of everything that goes into them (binary, libraries, labels,
# this script), so an unchanged build is not repacked. Prints one "REF ARCHIVE" line per
# image on stdout; sizes and progress go to stderr. `Containerfile` builds the same
# images with docker/podman/buildah. Load an archive with
#   ctr -n k8s.io images import ARCHIVE      (containerd)
#   podman load -i ARCHIVE                    (podman)
#   skopeo copy oci-archive:ARCHIVE docker://REGISTRY/NAME:TAG   (push)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

build=1 registry=ghcr.io/proxy-pool tag="" out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --no-build) build=0; shift ;;
        --registry) registry=${2:?--registry needs a value}; shift 2 ;;
        --tag) tag=${2:?--tag needs a value}; shift 2 ;;
        --out) out=${2:?--out needs a directory}; shift 2 ;;
        -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "images.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

say() { printf 'images: %s\n' "$*" >&2; }
for tool in umoci skopeo strip sha256sum; do
    command -v "$tool" >/dev/null || {
        say "$tool is required (Debian: apt-get install umoci skopeo binutils)"; exit 1; }
done
# shellcheck source=scripts/lib/oci.sh
. "$root/scripts/lib/oci.sh"

version=$(awk '/^\[workspace.package\]/ { p = 1 } p && $1 == "version" { gsub(/"/, "", $3); print $3; exit }' Cargo.toml)
app_version=$(awk '$1 == "appVersion:" { gsub(/"/, "", $2); print $2; exit }' charts/proxy-pool/Chart.yaml)
tag=${tag:-$app_version}
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$revision" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    revision="$revision-dirty"
fi
created=$(git log -1 --format=%cI 2>/dev/null || echo 1970-01-01T00:00:00Z)

# image name, binary, description
images=(
    "proxy-pool-operator|proxy-pool-operator|Proxy Pool operator: custom resources to controller config, gateway Deployments and workload identities"
    "proxy-pool-controller|proxy-pool-controller|Proxy Pool controller: activity pool, Distribution API, control plane"
    "proxy-pool-gateway|proxy-pool-gateway|Proxy Pool gateway: HTTP and SOCKS5 forward proxy over the pool"
    "proxy-pool-checker|proxy-pool-checker|Proxy Pool checker: health probes of vendor proxies"
    "proxy-pool-vendor-sim|vendor-sim|Proxy Pool vendor simulator (demo and tests): vendor API with real short-lived proxies"
)

target=${CARGO_TARGET_DIR:-$root/target}
case "$target" in /*) ;; *) target=$root/$target ;; esac
if [ "$build" = 1 ]; then
    say "cargo build --release (operator, controller, gateway, checker, vendor-sim)"
    start=$SECONDS
    cargo build --release --locked -p proxy-pool-operator -p proxy-pool-controller \
        -p proxy-pool-gateway -p proxy-pool-checker -p proxy-pool-e2e \
        --bin proxy-pool-operator --bin proxy-pool-controller --bin proxy-pool-gateway \
        --bin proxy-pool-checker --bin vendor-sim >&2
    say "release build took $((SECONDS - start))s"
fi

cache=${PROXY_POOL_CACHE_DIR:-$root/.cache}/images
mkdir -p "$cache"
script_hash=$(cat scripts/images.sh scripts/lib/oci.sh | sha256sum | cut -c1-64)
stage=$(mktemp -d "${TMPDIR:-/tmp}/proxy-pool-images.XXXXXX")
trap 'rm -rf "$stage"' EXIT

for entry in "${images[@]}"; do
    IFS='|' read -r name bin description <<<"$entry"
    src=$target/release/$bin
    [ -x "$src" ] || { say "$src missing (run without --no-build)"; exit 1; }
    ref=$registry/$name:$tag
    labels=(
        "org.opencontainers.image.title=$name"
        "org.opencontainers.image.description=$description"
        "org.opencontainers.image.version=$version"
        "org.opencontainers.image.revision=$revision"
        "org.opencontainers.image.created=$created"
        "org.opencontainers.image.source=https://github.com/proxy-pool/proxy-pool"
        "org.opencontainers.image.licenses=Apache-2.0"
    )
    libs=$(ldd "$src" 2>/dev/null | awk '/=> \// { print $3 } /^[[:space:]]*\// { print $1 }' | sort)
    # shellcheck disable=SC2086
    key=$( { printf '%s\n' "$script_hash" "$ref" "${labels[@]}"; sha256sum "$src" $libs \
        /etc/ssl/certs/ca-certificates.crt | cut -c1-64; } | sha256sum | cut -c1-16)
    archive=$cache/$name-$key.oci.tar
    if [ -f "$archive" ]; then
        say "$name: cached ($archive)"
    else
        say "$name: packing $ref"
        rootfs=$stage/$name
        oci_rootfs "$rootfs"
        oci_add_binary "$rootfs" "$src" "/usr/local/bin/$bin" --strip
        # Trust roots for outbound HTTPS to vendor APIs (the cluster's own CAs come
        # from mounted trust bundles).
        oci_add_file "$rootfs" /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
        oci_archive "$rootfs" "$ref" "$archive" "/usr/local/bin/$bin" "${labels[@]}"
        say "$name: root filesystem $(du -sh --apparent-size "$rootfs" | cut -f1)"
        # Keep the three newest archives of this image (other checkouts may use them).
        ls -t "$cache/$name"-*.oci.tar | tail -n +4 | xargs -r rm -f
    fi
    say "$name: archive $(du -h "$archive" | cut -f1)"
    if [ -n "$out" ]; then
        mkdir -p "$out"
        cp -f "$archive" "$out/$name.oci.tar"
    fi
    printf '%s %s\n' "$ref" "$archive"
done
