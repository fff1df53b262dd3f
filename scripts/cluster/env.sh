# Settings and helpers shared by scripts/cluster-up.sh and scripts/cluster-down.sh
# (sourced, not run). Everything the cluster owns on the host is named here: its
# address ranges, directories, process names, the nftables table and the sysctls it
# saves. Nothing else on the host is touched.

# Address plan. None of these ranges may overlap the host's networks (cluster-up.sh
# checks). Each range gets an `unreachable` route before anything starts, removed only
# after every process is gone, so a packet to a cluster address can never follow the
# default route off the machine; the more specific routes below sit inside them.
CLUSTER_NODE_RANGE=10.250.0.0/24       # unreachable; the node IP is one /32 on lo
CLUSTER_NODE_IP=10.250.0.1
CLUSTER_POD_RANGE=10.244.0.0/16        # unreachable; kube-proxy's clusterCIDR
CLUSTER_POD_SUBNET=10.244.0.0/24       # the node's pods, on the bridge
CLUSTER_POD_GATEWAY=10.244.0.1         # the bridge's address
CLUSTER_SERVICE_RANGE=10.96.0.0/16     # unreachable
CLUSTER_SERVICE_CIDR=10.96.0.0/24      # the API server's service range, routed to the bridge
CLUSTER_KUBERNETES_SERVICE_IP=10.96.0.1
CLUSTER_RANGES=("$CLUSTER_NODE_RANGE" "$CLUSTER_POD_RANGE" "$CLUSTER_SERVICE_RANGE")
CLUSTER_BRIDGE=ppcluster0
CLUSTER_NODE_NAME=proxy-pool-node
CLUSTER_DOMAIN=cluster.local
CLUSTER_NFT_TABLE=proxy_pool_cluster_guard

# Fixed ports, all below the ephemeral range (32768-60999) so they never collide with
# tests that bind free ports. Host-only services listen on 127.0.0.1 (pods cannot reach
# the host's loopback); what pods or the host's clients need listens on the node IP.
CLUSTER_APISERVER_PORT=6443            # node IP
CLUSTER_KUBELET_PORT=10250             # node IP
CLUSTER_INGRESS_HTTP_PORT=80           # node IP (Skipper)
CLUSTER_INGRESS_HTTPS_PORT=443         # node IP (Skipper)
CLUSTER_DNS_PORT=53                    # node IP (CoreDNS)
CLUSTER_ETCD_PORT=12379                # loopback
CLUSTER_ETCD_PEER_PORT=12380           # loopback
CLUSTER_KCM_PORT=10257                 # loopback
CLUSTER_SCHEDULER_PORT=10259           # loopback
CLUSTER_KUBELET_HEALTHZ_PORT=10248     # loopback
CLUSTER_PROXY_HEALTHZ_PORT=10256       # loopback
CLUSTER_PROXY_METRICS_PORT=10249       # loopback
CLUSTER_DNS_HEALTH_PORT=18080          # loopback
CLUSTER_DNS_READY_PORT=18181           # loopback
CLUSTER_SKIPPER_SUPPORT_PORT=19911     # loopback

# Directories: persistent state (configs, PKI, data, logs) and runtime state (sockets,
# pid files, containerd state). PROXY_POOL_CLUSTER_DIR moves the first.
CLUSTER_DIR=${PROXY_POOL_CLUSTER_DIR:-/var/lib/proxy-pool-cluster}
CLUSTER_RUN=/run/proxy-pool-cluster
CLUSTER_PKI=$CLUSTER_DIR/pki
CLUSTER_LOGS=$CLUSTER_DIR/logs
CLUSTER_PIDS=$CLUSTER_RUN/pids
CLUSTER_CONTAINERD_SOCK=$CLUSTER_RUN/containerd/containerd.sock
CLUSTER_CGROUP_ROOT=/proxy-pool-cluster
CLUSTER_KUBECONFIG=$CLUSTER_DIR/admin.kubeconfig
CLUSTER_NAMESPACE=proxy-pool
CLUSTER_RELEASE=proxy-pool
CLUSTER_INGRESS_HOST=proxy-pool.cluster.test
CLUSTER_INGRESS_CLASS=skipper
CLUSTER_PAUSE_IMAGE=localhost/proxy-pool-cluster/pause:1
CLUSTER_CLIENT_IMAGE=localhost/proxy-pool-cluster/e2e-client:1

# Sysctls the kubelet and kube-proxy change on their own (and cannot be told not to):
# saved before the first start, restored by cluster-down.sh.
CLUSTER_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
    kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.conf.all.route_localnet
    net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables net.ipv4.ip_forward
    net.ipv4.conf.all.forwarding)

# Host paths the kubelet, containerd and the CNI plugins write whatever their flags
# say. cluster-up.sh records which of them did not exist before; cluster-down.sh removes
# exactly those (leftovers of our own run), never one that was already there.
CLUSTER_HOST_PATHS=(/var/lib/kubelet /var/log/containers /var/log/pods /run/containerd
    /var/lib/cni /etc/cni /opt/cni /run/netns)

# Processes in start order; cluster-down.sh stops them in reverse (the add-ons that
# poll the API server first, the runtime and the data store last).
CLUSTER_PROCESSES=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd
    kubelet kube-proxy coredns skipper)

cluster_say() { printf '%s: %s\n' "${CLUSTER_TAG:-cluster}" "$*" >&2; }
cluster_die() { cluster_say "$*"; exit 1; }

# The pid of a process cluster-up.sh started, if it still runs that binary.
cluster_pid() {
    local name=$1 pid exe
    pid=$(cat "$CLUSTER_PIDS/$name.pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
    exe=$(cat "$CLUSTER_PIDS/$name.exe" 2>/dev/null) || return 1
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$exe" ] || return 1
    cluster_alive "$pid" || return 1
    echo "$pid"
}

# Running (not a zombie): this VM's PID 1 reaps orphans only every few seconds, so
# `kill -0` on an exited process still succeeds for a while.
cluster_alive() {
    local state
    case "$1" in '' | *[!0-9]*) return 1 ;; esac
    # The state follows the parenthesised command name (which may hold spaces).
    state=$(sed -n 's/^.*) \([A-Za-z]\).*$/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# SIGTERM, up to $2 seconds (default 20), then SIGKILL; returns once it is gone.
cluster_stop_pid() {
    local pid=$1 grace=${2:-20} what=${3:-process}
    cluster_alive "$pid" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + grace))
    while cluster_alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    if cluster_alive "$pid"; then
        cluster_say "$what (pid $pid) did not stop within ${grace}s, killing it"
        kill -KILL "$pid" 2>/dev/null || true
        deadline=$((SECONDS + 10))
        while cluster_alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    fi
}

cluster_kubectl() {
    "$CLUSTER_BIN_DIR/kubectl" --kubeconfig "$CLUSTER_KUBECONFIG" "$@"
}

# cidr_overlap A/LEN B/LEN: whether the two IPv4 prefixes share an address.
cluster_ip_int() {
    local IFS=.
    # shellcheck disable=SC2086
    set -- $1
    echo $(( ($1 << 24) | ($2 << 16) | ($3 << 8) | $4 ))
}
cluster_cidr_overlap() {
    local a=${1%/*} al=${1#*/} b=${2%/*} bl=${2#*/}
    [ "$al" = "$1" ] && al=32
    [ "$bl" = "$2" ] && bl=32
    local len=$(( al < bl ? al : bl ))
    local mask=$(( len == 0 ? 0 : (0xffffffff << (32 - len)) & 0xffffffff ))
    [ $(( $(cluster_ip_int "$a") & mask )) -eq $(( $(cluster_ip_int "$b") & mask )) ]
}

# The host's IPv4 prefixes in use: interface addresses and main-table routes (the
# default route aside).
cluster_host_prefixes() {
    ip -4 -o addr show | awk '{ print $4 }'
    ip -4 route show table main | awk '{
        d = $1
        if (d == "unreachable" || d == "blackhole" || d == "prohibit" || d == "throw") d = $2
        if (d != "default") print d
    }'
}

# Removes every KUBE-* chain, and the rules that jump to them, from the iptables
# tables (IPv4 and IPv6) the kubelet and kube-proxy write: KUBE-FIREWALL,
# KUBE-KUBELET-CANARY, KUBE-SERVICES, …
cluster_iptables_clean() {
    local cmd t rule ch rules chains
    for cmd in iptables ip6tables; do
        command -v "$cmd" >/dev/null 2>&1 || continue
        for t in filter nat mangle; do
            rules=$("$cmd" -t "$t" -S 2>/dev/null) || continue
            while IFS= read -r rule; do
                case "$rule" in
                    "-A KUBE-"*) ;;
                    "-A "*"-j KUBE-"*) eval "\"$cmd\" -t \"$t\" ${rule/#-A/-D}" 2>/dev/null ;;
                esac
            done <<<"$rules"
            chains=$(printf '%s\n' "$rules" | awk '$1 == "-N" && $2 ~ /^KUBE-/ { print $2 }')
            for ch in $chains; do "$cmd" -t "$t" -F "$ch" 2>/dev/null; done
            for ch in $chains; do "$cmd" -t "$t" -X "$ch" 2>/dev/null; done
        done
    done
}

# The iptables-nft tables (ip/ip6 filter, nat, mangle) the kubelet and kube-proxy make
# exist when they first write a rule; cluster-down.sh deletes those cluster-up.sh found
# absent, once they hold no rule (empty base chains only).
CLUSTER_IPTABLES_TABLES=("ip filter" "ip nat" "ip mangle" "ip6 filter" "ip6 nat" "ip6 mangle")

cluster_nft_table_empty() { # family name
    local body
    body=$(nft list table "$1" "$2" 2>/dev/null | grep -vE '^\s*(table|chain|type|\}|$)' || true)
    [ -z "$body" ]
}
