#!/usr/bin/env bash
# Brings up a real single-node Kubernetes cluster on this machine, the way Kubernetes'
# own hack/local-up-cluster.sh does — etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet and kube-proxy as local processes over containerd and runc,
# CoreDNS and Skipper (the Ingress controller) beside them — then installs Proxy Pool
# into it: the vendor simulator, `helm install` of charts/proxy-pool, and the example
# Upstream, Routing and DistributionClient. Prints how to reach the gateway and the
# extract API. Stop it with scripts/cluster-down.sh.
#
#   sudo ./scripts/cluster-up.sh [--no-install] [--no-build] [--values FILE]
#
#   --no-install    the cluster and its add-ons only (no simulator, chart or resources)
#   --no-build      use the release binaries already built (scripts/images.sh --no-build)
#   --values FILE   extra Helm values, after scripts/cluster/values.yaml
#   --keep-on-failure  leave a failed cluster running for inspection (cluster-down.sh
#                   removes it); by default a failed start tears everything down
#
# Needs root, Debian 12 packages (installed when missing: containerd, runc,
# containernetworking-plugins, iptables, nftables, conntrack, umoci, skopeo, openssl,
# gcc) and Go (Kubernetes, CoreDNS, Skipper and helm are built from their Go modules and
# cached under ${PROXY_POOL_CACHE_DIR:-.cache}). Every address stays on this machine:
# see docs/kubernetes.md ("The local cluster") for the address plan and the guard.
# State: /var/lib/proxy-pool-cluster (logs in logs/), /run/proxy-pool-cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
CLUSTER_TAG=cluster-up
# shellcheck source=scripts/cluster/env.sh
. "$ROOT/scripts/cluster/env.sh"
# shellcheck source=scripts/cluster/pki.sh
. "$ROOT/scripts/cluster/pki.sh"
# shellcheck source=scripts/cluster/configs.sh
. "$ROOT/scripts/cluster/configs.sh"
# shellcheck source=scripts/cluster/prepare.sh
. "$ROOT/scripts/cluster/prepare.sh"

INSTALL=1 BUILD=1 KEEP=0 EXTRA_VALUES=()
while [ $# -gt 0 ]; do
    case "$1" in
        --no-install) INSTALL=0; shift ;;
        --no-build) BUILD=0; shift ;;
        --keep-on-failure) KEEP=1; shift ;;
        --values) EXTRA_VALUES+=(--values "${2:?--values needs a file}"); shift 2 ;;
        -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) cluster_die "unknown argument $1" ;;
    esac
done

[ "$(id -u)" = 0 ] || cluster_die "needs root (it runs containerd, the kubelet and kube-proxy)"
# The kubelet evicts every pod below 512 MiB free (evictionHard); images, container
# layers and logs need about 1 GiB more.
free_mib=$(df --output=avail -BM "$(dirname "$CLUSTER_DIR")" | tail -n 1 | tr -dc 0-9)
[ "${free_mib:-0}" -ge 1536 ] ||
    cluster_die "only ${free_mib:-0} MiB free on $(dirname "$CLUSTER_DIR"); the cluster needs 1.5 GiB"
START=$SECONDS
elapsed() { echo "$((SECONDS - START))s"; }

# --- tools, binaries, images (cached) ---------------------------------------------------
if [ "$BUILD" = 1 ]; then cluster_prepare "$ROOT"; else cluster_prepare "$ROOT" --no-build; fi
cluster_say "binaries and images ready ($(elapsed))"

# --- leftovers of an earlier run --------------------------------------------------------
if [ -e "$CLUSTER_RUN" ] || [ -e "$CLUSTER_DIR/state" ]; then
    cluster_say "cleaning up an earlier cluster first"
    bash "$ROOT/scripts/cluster-down.sh"
fi

# From here on, a failure tears down whatever was set up (logs are kept).
up_failed() {
    local rc=$?
    trap - EXIT INT TERM
    if [ $rc -ne 0 ] && [ "$KEEP" = 1 ]; then
        cluster_say "failed after $(elapsed); left running (--keep-on-failure); logs in $CLUSTER_LOGS/"
    elif [ $rc -ne 0 ]; then
        cluster_say "failed after $(elapsed); logs in $CLUSTER_LOGS/; tearing down"
        bash "$ROOT/scripts/cluster-down.sh" || true
    fi
    exit $rc
}
trap up_failed EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$CLUSTER_DIR"/{config,state} "$CLUSTER_LOGS" "$CLUSTER_PIDS"
rm -f "$CLUSTER_LOGS"/*.log
chmod 700 "$CLUSTER_DIR" "$CLUSTER_RUN"
echo "$CLUSTER_BIN_DIR" >"$CLUSTER_DIR/state/bin-dir"
echo "$HELM" >"$CLUSTER_DIR/state/helm"

# --- images -----------------------------------------------------------------------------
images_import() {
    local ref archive
    while read -r ref archive; do
        ctr -a "$CLUSTER_CONTAINERD_SOCK" -n k8s.io images import "$archive" >/dev/null
        cluster_say "image $ref imported"
    done <"$CLUSTER_IMAGES"
}

# --- the guard: routes and nftables before any process ------------------------------------
guard_up() {
    local range prefix
    for range in "${CLUSTER_RANGES[@]}"; do
        for prefix in $(cluster_host_prefixes); do
            # 127.0.0.0/8 on lo never overlaps; anything else the host uses must not.
            cluster_cidr_overlap "$range" "$prefix" &&
                cluster_die "$range overlaps the host's $prefix; not starting"
        done
    done
    for range in "${CLUSTER_RANGES[@]}"; do
        ip route add unreachable "$range"
        echo "$range" >>"$CLUSTER_DIR/state/unreachable-routes"
    done
    local name
    : >"$CLUSTER_DIR/state/sysctls"
    for name in "${CLUSTER_SYSCTLS[@]}"; do
        [ -e "/proc/sys/${name//.//}" ] || continue
        printf '%s=%s\n' "$name" "$(sysctl -n "$name")" >>"$CLUSTER_DIR/state/sysctls"
    done
    for name in "${CLUSTER_HOST_PATHS[@]}"; do
        [ -e "$name" ] || echo "$name" >>"$CLUSTER_DIR/state/created-paths"
    done
    # The iptables tables and KUBE-* chains the kubelet and kube-proxy will write:
    # cluster-down.sh removes them only if they were not there before.
    : >"$CLUSTER_DIR/state/created-iptables-tables"
    for name in "${CLUSTER_IPTABLES_TABLES[@]}"; do
        # shellcheck disable=SC2086
        nft list table $name >/dev/null 2>&1 || echo "$name" >>"$CLUSTER_DIR/state/created-iptables-tables"
    done
    local saved
    saved=$( { iptables-save; ip6tables-save; } 2>/dev/null || true)
    [[ "$saved" != *KUBE-* ]] || touch "$CLUSTER_DIR/state/kube-chains-existed"
    nft -f - <<EOF
table inet $CLUSTER_NFT_TABLE {
    counter pod_egress_dropped {}
    counter leak_dropped {}
    set cluster_ranges {
        type ipv4_addr
        flags interval
        elements = { $CLUSTER_NODE_RANGE, $CLUSTER_POD_RANGE, $CLUSTER_SERVICE_RANGE }
    }
    # Before the filter chains kube-proxy programs (priority 0): pods talk to pods and
    # Services on the bridge only; nothing is routed between the bridge and any other
    # interface, in either direction.
    chain forward {
        type filter hook forward priority -10; policy accept;
        iifname "$CLUSTER_BRIDGE" oifname "$CLUSTER_BRIDGE" accept
        iifname "$CLUSTER_BRIDGE" counter name pod_egress_dropped drop
        oifname "$CLUSTER_BRIDGE" counter name pod_egress_dropped drop
    }
    # Last line: a packet from or to a cluster address leaving by any interface but the
    # bridge or lo is dropped and counted (the counter must stay at zero).
    chain postrouting {
        type filter hook postrouting priority 100; policy accept;
        oifname { "$CLUSTER_BRIDGE", "lo" } accept
        ip daddr @cluster_ranges counter name leak_dropped drop
        ip saddr @cluster_ranges counter name leak_dropped drop
    }
}
EOF
    echo "$CLUSTER_NFT_TABLE" >"$CLUSTER_DIR/state/nft-table"
    # The kubelet's cgroup root, in every v1 hierarchy (cpuset needs its CPUs and
    # memory nodes before any task may join a child).
    local h
    for h in /sys/fs/cgroup/*/; do
        h=${h%/}
        [ -e "$h/cgroup.procs" ] || continue
        mkdir -p "$h$CLUSTER_CGROUP_ROOT"
        if [ -e "$h/cpuset.cpus" ]; then
            cat "$h/cpuset.cpus" >"$h$CLUSTER_CGROUP_ROOT/cpuset.cpus"
            cat "$h/cpuset.mems" >"$h$CLUSTER_CGROUP_ROOT/cpuset.mems"
        fi
    done
    ip addr add "$CLUSTER_NODE_IP/32" dev lo
    echo lo >"$CLUSTER_DIR/state/node-ip"
    ip link add "$CLUSTER_BRIDGE" type bridge
    echo "$CLUSTER_BRIDGE" >"$CLUSTER_DIR/state/bridge"
    ip addr add "$CLUSTER_POD_GATEWAY/${CLUSTER_POD_SUBNET#*/}" dev "$CLUSTER_BRIDGE"
    ip link set "$CLUSTER_BRIDGE" up
    # Forwarding on the bridge only (pod → Service → pod is routed through the host);
    # the host's other interfaces keep their setting.
    sysctl -qw "net.ipv4.conf.$CLUSTER_BRIDGE.forwarding=1"
    ip route add "$CLUSTER_SERVICE_CIDR" dev "$CLUSTER_BRIDGE" src "$CLUSTER_POD_GATEWAY"
    cluster_say "guard in place: unreachable ${CLUSTER_RANGES[*]}, nft table $CLUSTER_NFT_TABLE ($(elapsed))"
}

# --- processes --------------------------------------------------------------------------
# start NAME BINARY ARGS...: in its own session, detached from this script, logging to
# $CLUSTER_LOGS/NAME.log; the pid and binary are recorded for cluster-down.sh.
start() {
    local name=$1 bin
    bin=$(readlink -f "$(command -v "$2")")
    shift 2
    setsid "$bin" "$@" </dev/null >>"$CLUSTER_LOGS/$name.log" 2>&1 &
    local pid=$!
    disown "$pid"
    echo "$pid" >"$CLUSTER_PIDS/$name.pid"
    echo "$bin" >"$CLUSTER_PIDS/$name.exe"
    # setsid execs the binary in the same process; wait for that (or an early exit).
    local i
    for i in $(seq 50); do
        [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$bin" ] && return 0
        cluster_alive "$pid" || return 0
        sleep 0.05
    done
}

# wait_until WHAT SECONDS NAME COMMAND...: until COMMAND succeeds; fails when NAME exits.
wait_until() {
    local what=$1 limit=$2 name=$3
    shift 3
    local deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        cluster_pid "$name" >/dev/null || {
            tail -n 30 "$CLUSTER_LOGS/$name.log" >&2 || true
            cluster_die "$name exited while waiting for $what (log: $CLUSTER_LOGS/$name.log)"
        }
        [ $SECONDS -lt $deadline ] || {
            tail -n 30 "$CLUSTER_LOGS/$name.log" >&2 || true
            cluster_die "timed out after ${limit}s waiting for $what"
        }
        sleep 0.5
    done
    cluster_say "$what ($(elapsed))"
}

admin_curl() {
    curl -fsS --max-time 5 --cacert "$CLUSTER_PKI/ca.crt" --cert "$CLUSTER_PKI/admin.crt" \
        --key "$CLUSTER_PKI/admin.key" "$@"
}

start_control_plane() {
    start etcd "$CLUSTER_BIN_DIR/etcd" --name=proxy-pool-cluster \
        --data-dir="$CLUSTER_DIR/etcd" \
        --listen-client-urls="http://127.0.0.1:$CLUSTER_ETCD_PORT" \
        --advertise-client-urls="http://127.0.0.1:$CLUSTER_ETCD_PORT" \
        --listen-peer-urls="http://127.0.0.1:$CLUSTER_ETCD_PEER_PORT" \
        --initial-advertise-peer-urls="http://127.0.0.1:$CLUSTER_ETCD_PEER_PORT" \
        --initial-cluster="proxy-pool-cluster=http://127.0.0.1:$CLUSTER_ETCD_PEER_PORT" \
        --unsafe-no-fsync=true --log-level=warn
    wait_until "etcd serving" 60 etcd curl -fsS "http://127.0.0.1:$CLUSTER_ETCD_PORT/health"

    local p=$CLUSTER_PKI
    start kube-apiserver "$CLUSTER_BIN_DIR/kube-apiserver" \
        --etcd-servers="http://127.0.0.1:$CLUSTER_ETCD_PORT" \
        --bind-address="$CLUSTER_NODE_IP" --advertise-address="$CLUSTER_NODE_IP" \
        --secure-port="$CLUSTER_APISERVER_PORT" \
        --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
        --client-ca-file="$p/ca.crt" \
        --kubelet-client-certificate="$p/apiserver-kubelet-client.crt" \
        --kubelet-client-key="$p/apiserver-kubelet-client.key" \
        --kubelet-certificate-authority="$p/ca.crt" \
        --kubelet-preferred-address-types=InternalIP \
        --service-account-issuer="https://kubernetes.default.svc.$CLUSTER_DOMAIN" \
        --service-account-key-file="$p/sa.pub" \
        --service-account-signing-key-file="$p/sa.key" \
        --api-audiences="https://kubernetes.default.svc.$CLUSTER_DOMAIN" \
        --service-cluster-ip-range="$CLUSTER_SERVICE_CIDR" \
        --authorization-mode=Node,RBAC \
        --enable-admission-plugins=NodeRestriction \
        --allow-privileged=false \
        --profiling=false --v=1
    wait_until "kube-apiserver ready" 180 kube-apiserver \
        admin_curl "https://$CLUSTER_NODE_IP:$CLUSTER_APISERVER_PORT/readyz"

    start kube-controller-manager "$CLUSTER_BIN_DIR/kube-controller-manager" \
        --kubeconfig="$CLUSTER_DIR/controller-manager.kubeconfig" \
        --authentication-kubeconfig="$CLUSTER_DIR/controller-manager.kubeconfig" \
        --authorization-kubeconfig="$CLUSTER_DIR/controller-manager.kubeconfig" \
        --bind-address=127.0.0.1 --secure-port="$CLUSTER_KCM_PORT" \
        --cert-dir="$CLUSTER_DIR/kcm-certs" --leader-elect=false \
        --use-service-account-credentials=true \
        --service-account-private-key-file="$p/sa.key" --root-ca-file="$p/ca.crt" \
        --cluster-signing-cert-file="$p/ca.crt" --cluster-signing-key-file="$p/ca.key" \
        --allocate-node-cidrs=false --v=1
    start kube-scheduler "$CLUSTER_BIN_DIR/kube-scheduler" \
        --config="$CLUSTER_DIR/config/kube-scheduler.yaml" \
        --authentication-kubeconfig="$CLUSTER_DIR/scheduler.kubeconfig" \
        --authorization-kubeconfig="$CLUSTER_DIR/scheduler.kubeconfig" \
        --bind-address=127.0.0.1 --secure-port="$CLUSTER_SCHEDULER_PORT" \
        --cert-dir="$CLUSTER_DIR/scheduler-certs" --v=1
    wait_until "ServiceAccount default/default (kube-controller-manager)" 120 \
        kube-controller-manager cluster_kubectl -n default get serviceaccount default
}

start_node() {
    start containerd containerd --config "$CLUSTER_DIR/config/containerd.toml"
    wait_until "containerd serving" 60 containerd \
        ctr -a "$CLUSTER_CONTAINERD_SOCK" version
    images_import
    start kubelet "$CLUSTER_BIN_DIR/kubelet" --config="$CLUSTER_DIR/config/kubelet.yaml" \
        --kubeconfig="$CLUSTER_DIR/kubelet.kubeconfig" \
        --root-dir="$CLUSTER_DIR/kubelet" --cert-dir="$CLUSTER_DIR/kubelet/pki" \
        --hostname-override="$CLUSTER_NODE_NAME" --node-ip="$CLUSTER_NODE_IP" --v=1
    wait_until "node $CLUSTER_NODE_NAME registered" 120 kubelet \
        cluster_kubectl get node "$CLUSTER_NODE_NAME"
    wait_until "node $CLUSTER_NODE_NAME Ready" 120 kubelet \
        cluster_kubectl wait --for=condition=Ready --timeout=5s node "$CLUSTER_NODE_NAME"
    start kube-proxy "$CLUSTER_BIN_DIR/kube-proxy" \
        --config="$CLUSTER_DIR/config/kube-proxy.yaml" --v=1
    wait_until "kube-proxy synced" 60 kube-proxy \
        curl -fsS "http://127.0.0.1:$CLUSTER_PROXY_HEALTHZ_PORT/healthz"
}

start_addons() {
    cluster_kubectl apply -f scripts/cluster/addons.yaml >/dev/null
    start coredns "$COREDNS_DIR/coredns" -conf "$CLUSTER_DIR/config/Corefile"
    wait_until "CoreDNS ready" 60 coredns curl -fsS "http://127.0.0.1:$CLUSTER_DNS_READY_PORT/ready"
    wait_until "Skipper's token" 60 kube-controller-manager sh -c \
        "$(printf '%q ' "$CLUSTER_BIN_DIR/kubectl" --kubeconfig "$CLUSTER_KUBECONFIG") -n ingress-skipper get secret skipper-token -o jsonpath='{.data.token}' | base64 -d > '$CLUSTER_DIR/skipper.token' && test -s '$CLUSTER_DIR/skipper.token'"
    chmod 600 "$CLUSTER_DIR/skipper.token"
    SSL_CERT_FILE="$CLUSTER_PKI/ca.crt" start skipper "$SKIPPER_DIR/skipper" \
        -kubernetes -kubernetes-url="https://$CLUSTER_NODE_IP:$CLUSTER_APISERVER_PORT" \
        -kubernetes-token-file="$CLUSTER_DIR/skipper.token" \
        -kubernetes-ingress-class="$CLUSTER_INGRESS_CLASS" \
        -enable-kubernetes-endpointslices=true \
        -address="$CLUSTER_NODE_IP:$CLUSTER_INGRESS_HTTPS_PORT" \
        -tls-cert="$CLUSTER_PKI/ingress.crt" -tls-key="$CLUSTER_PKI/ingress.key" \
        -insecure-address="$CLUSTER_NODE_IP:$CLUSTER_INGRESS_HTTP_PORT" \
        -support-listener="127.0.0.1:$CLUSTER_SKIPPER_SUPPORT_PORT" \
        -wait-for-healthcheck-interval=0s
    wait_until "Skipper serving" 60 skipper \
        curl -fsS "http://127.0.0.1:$CLUSTER_SKIPPER_SUPPORT_PORT/metrics"
}

# --- Proxy Pool -------------------------------------------------------------------------
random_token() { od -An -N12 -tx1 /dev/urandom | tr -d ' \n'; }

install_proxy_pool() {
    local ns=$CLUSTER_NAMESPACE
    # Pods of the release run under Pod Security "restricted", enforced.
    cluster_kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $ns
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
    pod-security.kubernetes.io/warn: restricted
    pod-security.kubernetes.io/audit: restricted
EOF
    # Per-run credentials (the examples' Secrets hold placeholders).
    local vendor_key api_key gw_user gw_pass
    vendor_key=sim-$(random_token) api_key=key-$(random_token)
    gw_user=crawlerbot gw_pass=pw-$(random_token)
    umask 077
    cat >"$CLUSTER_DIR/credentials.env" <<EOF
VENDOR_API_KEY=$vendor_key
CLIENT_API_KEY=$api_key
GATEWAY_USERNAME=$gw_user
GATEWAY_PASSWORD=$gw_pass
EOF
    umask 022
    cluster_kubectl -n "$ns" create secret generic vendor-sim-credentials \
        --from-literal=apiKey="$vendor_key" >/dev/null
    cluster_kubectl -n "$ns" create secret generic team-crawler-credentials \
        --from-literal=apiKey="$api_key" --from-literal=username="$gw_user" \
        --from-literal=password="$gw_pass" >/dev/null
    cluster_kubectl -n "$ns" apply -f examples/vendor-sim.yaml --selector='!proxypool.io/example-secret' >/dev/null
    wait_until "vendor simulator Ready" 120 kube-apiserver \
        cluster_kubectl -n "$ns" rollout status deployment/vendor-sim --timeout=5s
    "$HELM" --kubeconfig "$CLUSTER_KUBECONFIG" install "$CLUSTER_RELEASE" charts/proxy-pool \
        --namespace "$ns" --values scripts/cluster/values.yaml "${EXTRA_VALUES[@]}" \
        --wait --timeout 5m >"$CLUSTER_LOGS/helm-install.log"
    cluster_say "helm install $CLUSTER_RELEASE: every pod Ready ($(elapsed))"
    local f
    for f in upstream distribution-client gateway-group routing; do
        cluster_kubectl -n "$ns" apply -f "examples/$f.yaml" --selector='!proxypool.io/example-secret' >/dev/null
    done
    wait_until "gateway Deployment edge-gateway created" 120 kube-apiserver \
        cluster_kubectl -n "$ns" get deployment edge-gateway
    wait_until "gateway pods Ready" 240 kube-apiserver \
        cluster_kubectl -n "$ns" rollout status deployment/edge-gateway --timeout=5s
    # Ready pods are not yet a working installation: the controller rolls when the
    # resources change its config, and the gateways need proxies the checker passed.
    # Wait for what the printed commands do: a request through the gateway Service,
    # and the extract API answering through the Ingress (401 without a key: nothing
    # is taken from the pool).
    local gw_ip
    gw_ip=$(cluster_kubectl -n "$ns" get service edge-gateway -o jsonpath='{.spec.clusterIP}')
    wait_until "a request through the gateway" 300 kube-apiserver \
        curl -fsS --max-time 5 -x "http://$gw_user-region-shanghai:$gw_pass@$gw_ip:3128" \
        http://localhost:8901/cluster-up
    wait_until "the extract API through the Ingress" 120 skipper sh -c \
        "test \"\$(curl -sS --max-time 5 -o /dev/null -w '%{http_code}' --cacert '$CLUSTER_PKI/ca.crt' \
        --resolve '$CLUSTER_INGRESS_HOST:443:$CLUSTER_NODE_IP' -X POST \
        'https://$CLUSTER_INGRESS_HOST/api/v1/proxies/extract')\" = 401"
}

print_usage() {
    # shellcheck source=/dev/null
    . "$CLUSTER_DIR/credentials.env"
    local ns=$CLUSTER_NAMESPACE gw_ip
    gw_ip=$(cluster_kubectl -n "$ns" get service edge-gateway -o jsonpath='{.spec.clusterIP}')
    local k="$CLUSTER_BIN_DIR/kubectl --kubeconfig $CLUSTER_KUBECONFIG"
    cat <<EOF

Proxy Pool runs in a local Kubernetes cluster ($(elapsed); logs: $CLUSTER_LOGS/).

  export KUBECONFIG=$CLUSTER_KUBECONFIG   # kubectl: $CLUSTER_BIN_DIR/kubectl
  $k -n $ns get pods,upstreams,routings,distributionclients

Through the gateway Service (HTTP and SOCKS5), with the DistributionClient's gateway
credentials. The target is the simulator's echo server, which its proxies reach on their
own loopback (they refuse any other target); "remote" is the proxy's egress address:

  curl -x http://$GATEWAY_USERNAME-region-shanghai:$GATEWAY_PASSWORD@$gw_ip:3128 http://localhost:8901/hello
  curl -x socks5h://$GATEWAY_USERNAME-region-shanghai:$GATEWAY_PASSWORD@$gw_ip:1080 http://localhost:8901/hello

The extract API through the Ingress (Skipper, TLS with the cluster's CA):

  curl --cacert $CLUSTER_PKI/ca.crt --resolve $CLUSTER_INGRESS_HOST:443:$CLUSTER_NODE_IP \\
    -X POST https://$CLUSTER_INGRESS_HOST/api/v1/proxies/extract \\
    -H 'X-API-Key: $CLIENT_API_KEY' -H 'Content-Type: application/json' -d '{"count":2}'

Stop and remove everything: sudo ./scripts/cluster-down.sh
EOF
}

guard_up
pki_all
config_containerd
config_cni
config_kubelet
config_kube_proxy
config_scheduler
config_coredns
start_control_plane
start_node
start_addons
if [ "$INSTALL" = 1 ]; then
    install_proxy_pool
    print_usage
else
    cat <<EOF

The cluster is up ($(elapsed); logs: $CLUSTER_LOGS/):
  export KUBECONFIG=$CLUSTER_KUBECONFIG   # kubectl: $CLUSTER_BIN_DIR/kubectl
Stop and remove everything: sudo ./scripts/cluster-down.sh
EOF
fi
trap - EXIT INT TERM
cluster_say "ready"
