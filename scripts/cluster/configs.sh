# Configuration files of the cluster's processes (sourced by scripts/cluster-up.sh).
# Each function writes one file under $CLUSTER_DIR/config/.

config_containerd() {
    cat >"$CLUSTER_DIR/config/containerd.toml" <<EOF
version = 2
root = "$CLUSTER_DIR/containerd"
state = "$CLUSTER_RUN/containerd"
# Plugins that would write outside the two directories above, or that need kernel
# features this cluster does not use.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "$CLUSTER_CONTAINERD_SOCK"

[ttrpc]
  address = "$CLUSTER_CONTAINERD_SOCK.ttrpc"

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  # The locally built pause image (no registry is reachable).
  sandbox_image = "$CLUSTER_PAUSE_IMAGE"
  # The VM's capability set lacks CAP_SYS_RESOURCE: no process may lower an OOM score,
  # so containers keep the score they inherit instead of failing to start.
  restrict_oom_score_adj = true
  enable_selinux = false
  # Pod network namespaces under our state dir, not /run/netns.
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$CLUSTER_DIR/cni/net.d"
    max_conf_num = 1
EOF
}

# The bridge exists before the first pod (cluster-up.sh creates it with its address);
# pods get routes to the service range and the node IP only — no default route — and
# no masquerading, so a pod cannot address anything off the machine.
config_cni() {
    mkdir -p "$CLUSTER_DIR/cni/net.d" "$CLUSTER_DIR/cni/ipam"
    cat >"$CLUSTER_DIR/cni/net.d/10-proxy-pool-cluster.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "proxy-pool-cluster",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CLUSTER_BRIDGE",
      "isGateway": true,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$CLUSTER_DIR/cni/ipam",
        "ranges": [[{"subnet": "$CLUSTER_POD_SUBNET", "gateway": "$CLUSTER_POD_GATEWAY"}]],
        "routes": [{"dst": "$CLUSTER_SERVICE_CIDR"}, {"dst": "$CLUSTER_NODE_IP/32"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
}

config_kubelet() {
    # Pods with dnsPolicy Default get this (empty) resolver config: no host DNS server.
    : >"$CLUSTER_DIR/config/resolv.conf"
    cat >"$CLUSTER_DIR/config/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $CLUSTER_NODE_IP
port: $CLUSTER_KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $CLUSTER_KUBELET_HEALTHZ_PORT
tlsCertFile: $CLUSTER_PKI/kubelet-serving.crt
tlsPrivateKeyFile: $CLUSTER_PKI/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $CLUSTER_PKI/ca.crt}
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$CLUSTER_CONTAINERD_SOCK
# cgroup v1 on these machines: the kubelet refuses to start without this.
failCgroupV1: false
# containerd 1.6 cannot report its cgroup driver; this is the kubelet's fallback.
cgroupDriver: cgroupfs
cgroupRoot: $CLUSTER_CGROUP_ROOT
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
failSwapOn: false
# No CAP_SYS_RESOURCE: keep the inherited OOM score and the hard nofile limit.
oomScoreAdj: 0
maxOpenFiles: 20000
clusterDNS: [$CLUSTER_NODE_IP]
clusterDomain: $CLUSTER_DOMAIN
resolvConf: $CLUSTER_DIR/config/resolv.conf
podLogsDir: $CLUSTER_DIR/pod-logs
staticPodPath: ""
rotateCertificates: false
serverTLSBootstrap: false
registerNode: true
hairpinMode: hairpin-veth
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
serializeImagePulls: false
# A shared development machine: evict only when the node is really out of room, in
# absolute terms (a percentage of a large, busy disk is gigabytes that other builds use).
evictionHard:
  memory.available: 100Mi
  nodefs.available: 512Mi
  nodefs.inodesFree: 1%
  imagefs.available: 512Mi
# Never garbage-collect images: they are imported, not pullable, and an image a pod
# has not started yet counts as unused.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
shutdownGracePeriod: 0s
EOF
}

config_kube_proxy() {
    cat >"$CLUSTER_DIR/config/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $CLUSTER_DIR/kube-proxy.kubeconfig
hostnameOverride: $CLUSTER_NODE_NAME
bindAddress: $CLUSTER_NODE_IP
healthzBindAddress: 127.0.0.1:$CLUSTER_PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$CLUSTER_PROXY_METRICS_PORT
mode: iptables
clusterCIDR: $CLUSTER_POD_RANGE
detectLocalMode: ClusterCIDR
nodePortAddresses: [$CLUSTER_NODE_IP/32]
oomScoreAdj: 0
conntrack:
  # Leave the host's conntrack sysctls alone.
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
}

config_scheduler() {
    cat >"$CLUSTER_DIR/config/kube-scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $CLUSTER_DIR/scheduler.kubeconfig
leaderElection:
  leaderElect: false
EOF
}

# Cluster names only: every other name is NXDOMAIN, and nothing is forwarded.
config_coredns() {
    cat >"$CLUSTER_DIR/config/Corefile" <<EOF
$CLUSTER_DOMAIN:$CLUSTER_DNS_PORT in-addr.arpa:$CLUSTER_DNS_PORT ip6.arpa:$CLUSTER_DNS_PORT {
    bind $CLUSTER_NODE_IP
    errors
    health 127.0.0.1:$CLUSTER_DNS_HEALTH_PORT
    ready 127.0.0.1:$CLUSTER_DNS_READY_PORT
    kubernetes $CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
        kubeconfig $CLUSTER_DIR/coredns.kubeconfig
        pods insecure
        ttl 5
    }
    cache 5
    loop
}
.:$CLUSTER_DNS_PORT {
    bind $CLUSTER_NODE_IP
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
EOF
}
