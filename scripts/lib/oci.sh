# OCI image building without a container engine or a registry (sourced, not run), shared
# by scripts/images.sh and scripts/cluster-up.sh. An image is a root filesystem staged
# in a directory — binaries, the shared libraries `ldd` lists for them, a passwd/group
# with the non-root user 65532 — turned into a one-layer OCI image by `umoci` and
# written as an OCI archive by `skopeo` under its full reference name, which
# `ctr images import` keeps. Needs umoci and skopeo (Debian packages of those names).
#
#   oci_rootfs DIR                          empty rootfs with /etc/passwd, /etc/group, /tmp
#   oci_add_binary DIR SRC DEST [--strip]   SRC at DEST plus the libraries ldd lists
#   oci_add_file DIR SRC DEST               a plain file (mode kept)
#   oci_archive DIR REF OUT ENTRYPOINT [KEY=VALUE label]...
#                                           OCI archive OUT holding image REF (user 65532)

oci_say() { printf 'oci: %s\n' "$*" >&2; }

oci_rootfs() {
    local dir=$1
    rm -rf "$dir"
    mkdir -p "$dir/etc" "$dir/tmp"
    chmod 1777 "$dir/tmp"
    # No shell anywhere: the users' shells point at a path that does not exist.
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
        >"$dir/etc/passwd"
    printf 'root:x:0:\nnonroot:x:65532:\n' >"$dir/etc/group"
    printf 'hosts: files dns\n' >"$dir/etc/nsswitch.conf"
    mkdir -p "$dir/home/nonroot"
    chown 65532:65532 "$dir/home/nonroot"
}

oci_add_file() {
    local dir=$1 src=$2 dest=$3
    mkdir -p "$dir$(dirname "$dest")"
    cp -L --preserve=mode "$src" "$dir$dest"
}

# A dynamically linked binary runs from the libraries ldd resolves on this machine
# (the build machine's glibc: the same Debian release as the Containerfile's base).
oci_add_binary() {
    local dir=$1 src=$2 dest=$3 strip=${4:-}
    mkdir -p "$dir$(dirname "$dest")"
    if [ "$strip" = --strip ]; then
        strip --strip-all -o "$dir$dest" "$src"
    else
        cp -L "$src" "$dir$dest"
    fi
    chmod 0755 "$dir$dest"
    local lib
    # `ldd` prints "name => /path (addr)" and "/path (addr)" for the loader; a static
    # binary prints "not a dynamic executable" (and exits 1).
    for lib in $(ldd "$src" 2>/dev/null | awk '/=> \// { print $3 } /^[[:space:]]*\// { print $1 }'); do
        [ -e "$dir$lib" ] || oci_add_file "$dir" "$lib" "$lib"
    done
}

# In a subshell, so its scratch dir goes away however it ends.
oci_archive() (
    set -euo pipefail
    local dir=$1 ref=$2 out=$3 entrypoint=$4
    shift 4
    local work
    work=$(mktemp -d "${TMPDIR:-/tmp}/oci-build.XXXXXX")
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" EXIT
    umoci init --layout "$work/layout" >&2
    umoci new --image "$work/layout:build" >&2
    umoci unpack --image "$work/layout:build" "$work/bundle" >&2
    cp -a "$dir/." "$work/bundle/rootfs/"
    umoci repack --image "$work/layout:build" "$work/bundle" >&2
    local config=(--config.user 65532:65532 --config.entrypoint "$entrypoint"
        --config.workingdir / --config.env PATH=/usr/local/bin
        --os linux --architecture amd64 --author proxy-pool)
    local label
    for label in "$@"; do
        config+=(--config.label "$label" --manifest.annotation "$label")
    done
    umoci config --image "$work/layout:build" "${config[@]}" >&2
    umoci gc --layout "$work/layout" >&2
    mkdir -p "$(dirname "$out")"
    rm -f "$out.partial"
    skopeo copy --quiet "oci:$work/layout:build" "oci-archive:$out.partial:$ref" >&2
    mv -f "$out.partial" "$out"
)
