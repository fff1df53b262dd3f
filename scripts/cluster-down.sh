#!/usr/bin/env bash
# Stops the local cluster scripts/cluster-up.sh started and removes everything it put on
# the host, also after a failed or interrupted run: processes (the add-ons first, then
# the kubelet, every container, containerd and its shims, the control plane), kube-proxy's
# iptables rules, mounts, the bridge and its veths, the node IP, the nftables guard,
# cgroups, the sysctls the kubelet changed, the host paths it created — and, last, once
# no process of the cluster is left, the `unreachable` routes of the cluster's ranges.
# Idempotent: safe to run when nothing is up. Logs stay in
# /var/lib/proxy-pool-cluster/logs (--purge removes them too).
#
#   sudo ./scripts/cluster-down.sh [--purge]
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
CLUSTER_TAG=cluster-down
# shellcheck source=scripts/cluster/env.sh
. "$ROOT/scripts/cluster/env.sh"

PURGE=0
for arg in "$@"; do
    case "$arg" in
        --purge) PURGE=1 ;;
        -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) cluster_die "unknown argument $arg" ;;
    esac
done
[ "$(id -u)" = 0 ] || cluster_die "needs root"
START=$SECONDS
STATE=$CLUSTER_DIR/state
problems=0
problem() { cluster_say "$*"; problems=$((problems + 1)); }

stop_named() { # name [grace]
    local pid
    if pid=$(cluster_pid "$1"); then
        cluster_stop_pid "$pid" "${2:-20}" "$1"
    fi
    rm -f "$CLUSTER_PIDS/$1.pid" "$CLUSTER_PIDS/$1.exe"
}

# Every process in the cluster's cgroups (the pods' containers), in any hierarchy.
cgroup_pids() {
    local d
    for d in /sys/fs/cgroup/*"$CLUSTER_CGROUP_ROOT"; do
        [ -d "$d" ] && find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null
    done | sort -un
}

# Processes whose command line names the cluster's directories or containerd socket
# (containerd shims, anything cluster-up.sh started whose pid file was lost).
stray_pids() {
    local p cmd
    for p in /proc/[0-9]*; do
        p=${p#/proc/}
        [ "$p" = $$ ] && continue
        cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline") || continue
        case "$cmd" in
            *"$CLUSTER_DIR/"*|*"$CLUSTER_RUN/"*) cluster_alive "$p" && echo "$p" ;;
        esac
    done
}

kill_all() { # what pids...
    local what=$1 pid
    shift
    [ $# -gt 0 ] || return 0
    cluster_say "stopping $# $what"
    for pid in "$@"; do kill -TERM "$pid" 2>/dev/null; done
    local deadline=$((SECONDS + 10))
    for pid in "$@"; do
        while cluster_alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
        cluster_alive "$pid" && kill -KILL "$pid" 2>/dev/null
    done
    deadline=$((SECONDS + 10))
    for pid in "$@"; do
        while cluster_alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
        cluster_alive "$pid" && problem "$what pid $pid does not die"
    done
}

# 1. Processes. The add-ons poll the API server at the node IP; they go first.
stop_named skipper 10
stop_named coredns 10
stop_named kube-proxy 10
stop_named kubelet 20
# shellcheck disable=SC2046
kill_all "container processes" $(cgroup_pids)
if [ -S "$CLUSTER_CONTAINERD_SOCK" ] && cluster_pid containerd >/dev/null; then
    for t in $(ctr -a "$CLUSTER_CONTAINERD_SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
        ctr -a "$CLUSTER_CONTAINERD_SOCK" -n k8s.io tasks delete -f "$t" >/dev/null 2>&1
    done
fi
stop_named containerd 20
stop_named kube-scheduler 10
stop_named kube-controller-manager 10
stop_named kube-apiserver 20
stop_named etcd 20
# shellcheck disable=SC2046
kill_all "stray processes" $(stray_pids)

# 2. The iptables rules of kube-proxy and the kubelet (KUBE-* chains), unless such
#    chains were there before the cluster started; then the tables they created.
if [ -d "$STATE" ] && [ ! -e "$STATE/kube-chains-existed" ]; then
    bin_dir=$(cat "$STATE/bin-dir" 2>/dev/null)
    if [ -x "$bin_dir/kube-proxy" ]; then
        "$bin_dir/kube-proxy" --cleanup >>"$CLUSTER_LOGS/kube-proxy-cleanup.log" 2>&1 ||
            problem "kube-proxy --cleanup failed (see $CLUSTER_LOGS/kube-proxy-cleanup.log)"
    fi
    cluster_iptables_clean
    left_rules=$( { iptables-save 2>/dev/null; ip6tables-save 2>/dev/null; } | grep -c KUBE- )
    [ "$left_rules" = 0 ] || problem "$left_rules iptables lines still name KUBE-* chains"
fi
if [ -f "$STATE/created-iptables-tables" ]; then
    while IFS= read -r table; do
        [ -n "$table" ] || continue
        # shellcheck disable=SC2086
        if nft list table $table >/dev/null 2>&1 && cluster_nft_table_empty $table; then
            nft delete table $table || problem "cannot delete nft table $table"
        fi
    done <"$STATE/created-iptables-tables"
fi

# 3. Mounts under the cluster's directories (pod volumes, container root filesystems,
#    network namespaces, shm), deepest first.
umount_under() {
    local dir=$1 m
    findmnt -rn -o TARGET 2>/dev/null | awk -v d="$dir/" 'index($0, d) == 1' | sort -r |
        while read -r m; do
            umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || problem "cannot unmount $m"
        done
}
umount_under "$CLUSTER_RUN"
umount_under "$CLUSTER_DIR"

# 4. Network: veths on the bridge, the bridge, the node IP, the nftables guard.
if ip link show "$CLUSTER_BRIDGE" >/dev/null 2>&1; then
    for v in $(ip -o link show master "$CLUSTER_BRIDGE" | awk -F': ' '{ print $2 }' | cut -d@ -f1); do
        ip link delete "$v" 2>/dev/null
    done
    ip link delete "$CLUSTER_BRIDGE" || problem "cannot delete bridge $CLUSTER_BRIDGE"
fi
lo_addrs=$(ip -4 -o addr show dev lo)
if [[ "$lo_addrs" == *" $CLUSTER_NODE_IP/32 "* ]]; then
    ip addr del "$CLUSTER_NODE_IP/32" dev lo || problem "cannot remove $CLUSTER_NODE_IP from lo"
fi
if nft list table inet "$CLUSTER_NFT_TABLE" >/dev/null 2>&1; then
    # The guard's counters, for the record: a leak shows here.
    nft list counters table inet "$CLUSTER_NFT_TABLE" >>"$CLUSTER_LOGS/guard-counters.log" 2>&1
    nft delete table inet "$CLUSTER_NFT_TABLE" || problem "cannot delete nft table $CLUSTER_NFT_TABLE"
fi

# 5. cgroups (empty now), sysctls, host paths the kubelet and containerd created.
for d in /sys/fs/cgroup/*"$CLUSTER_CGROUP_ROOT"; do
    [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    [ -d "$d" ] && problem "cannot remove cgroup $d"
done
if [ -f "$STATE/sysctls" ]; then
    while IFS= read -r line; do
        [ -n "$line" ] && { sysctl -qw "$line" >/dev/null || problem "cannot restore $line"; }
    done <"$STATE/sysctls"
fi
if [ -f "$STATE/created-paths" ]; then
    while IFS= read -r path; do
        case "$path" in
            /var/lib/kubelet|/var/log/containers|/var/log/pods|/run/containerd|/var/lib/cni|/etc/cni|/opt/cni|/run/netns)
                umount_under "$path"
                rm -rf --one-file-system "$path" ;;
            *) problem "not removing unexpected path $path" ;;
        esac
    done <"$STATE/created-paths"
fi

# The pods' logs (the kubelet's podLogsDir) join the processes' logs.
if [ -d "$CLUSTER_DIR/pod-logs" ]; then
    rm -rf "$CLUSTER_LOGS/pods"
    cp -r "$CLUSTER_DIR/pod-logs" "$CLUSTER_LOGS/pods" 2>/dev/null
fi

# 6. Last: the unreachable routes — only when no process of the cluster is left.
left=$( { for n in "${CLUSTER_PROCESSES[@]}"; do cluster_pid "$n"; done; cgroup_pids; stray_pids; } | sort -u)
if [ -n "$left" ]; then
    problem "processes still running ($(echo "$left" | tr '\n' ' ')): keeping the unreachable routes"
else
    for range in "${CLUSTER_RANGES[@]}"; do
        if [ -n "$(ip -4 route show type unreachable "$range" 2>/dev/null)" ]; then
            ip route del unreachable "$range" || problem "cannot remove route unreachable $range"
        fi
    done
    rm -rf --one-file-system "$CLUSTER_RUN"
    if [ "$PURGE" = 1 ]; then
        rm -rf --one-file-system "$CLUSTER_DIR"
    elif [ -d "$CLUSTER_DIR" ]; then
        find "$CLUSTER_DIR" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf --one-file-system {} +
    fi
fi

if [ "$problems" -gt 0 ]; then
    cluster_say "finished with $problems problem(s) in $((SECONDS - START))s"
    exit 1
fi
cluster_say "done in $((SECONDS - START))s"
