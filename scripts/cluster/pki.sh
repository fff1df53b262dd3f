# Throw-away PKI of the local cluster (sourced by scripts/cluster-up.sh): one CA for
# every serving and client certificate, the ServiceAccount token key pair, and a
# kubeconfig per client. ECDSA P-256 keys, one-year certificates, files mode 0600.

pki_key() { # file
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
    chmod 600 "$1"
}

pki_ca() { # dir
    pki_key "$1/ca.key"
    openssl req -x509 -new -key "$1/ca.key" -subj "/CN=proxy-pool-cluster-ca" -days 365 \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
        -out "$1/ca.crt" 2>/dev/null
}

# pki_cert DIR NAME SUBJECT USAGE [SAN]: NAME.key and NAME.crt signed by the CA;
# USAGE is serverAuth, clientAuth or both (comma-separated); SAN like
# "IP:10.250.0.1,DNS:kubernetes".
pki_cert() {
    local dir=$1 name=$2 subject=$3 usage=$4 san=${5:-}
    pki_key "$dir/$name.key"
    local ext
    ext=$(mktemp)
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$usage"
        [ -n "$san" ] && echo "subjectAltName=$san"
    } >"$ext"
    openssl req -new -key "$dir/$name.key" -subj "$subject" -out "$dir/$name.csr" 2>/dev/null
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
        -CAcreateserial -days 365 -extfile "$ext" -out "$dir/$name.crt" 2>/dev/null
    rm -f "$ext" "$dir/$name.csr"
}

# pki_kubeconfig FILE USER-CERT-NAME: a kubeconfig for the API server at the node IP.
pki_kubeconfig() {
    local file=$1 name=$2
    cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: proxy-pool-cluster
  cluster:
    server: https://$CLUSTER_NODE_IP:$CLUSTER_APISERVER_PORT
    certificate-authority: $CLUSTER_PKI/ca.crt
users:
- name: $name
  user:
    client-certificate: $CLUSTER_PKI/$name.crt
    client-key: $CLUSTER_PKI/$name.key
contexts:
- name: proxy-pool-cluster
  context: {cluster: proxy-pool-cluster, user: $name}
current-context: proxy-pool-cluster
EOF
    chmod 600 "$file"
}

pki_all() {
    local d=$CLUSTER_PKI
    mkdir -p "$d"
    chmod 700 "$d"
    pki_ca "$d"
    pki_cert "$d" apiserver "/CN=kube-apiserver" serverAuth \
        "IP:$CLUSTER_NODE_IP,IP:$CLUSTER_KUBERNETES_SERVICE_IP,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.$CLUSTER_DOMAIN"
    pki_cert "$d" kubelet-serving "/CN=system:node:$CLUSTER_NODE_NAME/O=system:nodes" serverAuth \
        "IP:$CLUSTER_NODE_IP,DNS:$CLUSTER_NODE_NAME"
    pki_cert "$d" admin "/CN=proxy-pool-cluster-admin/O=system:masters" clientAuth
    pki_cert "$d" apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client/O=system:masters" clientAuth
    pki_cert "$d" kubelet "/CN=system:node:$CLUSTER_NODE_NAME/O=system:nodes" clientAuth
    pki_cert "$d" controller-manager "/CN=system:kube-controller-manager" clientAuth
    pki_cert "$d" scheduler "/CN=system:kube-scheduler" clientAuth
    pki_cert "$d" kube-proxy "/CN=system:kube-proxy" clientAuth
    pki_cert "$d" coredns "/CN=proxy-pool-cluster:coredns" clientAuth
    # Skipper's Ingress listener (TLS), for the Ingress host.
    pki_cert "$d" ingress "/CN=$CLUSTER_INGRESS_HOST" serverAuth "DNS:$CLUSTER_INGRESS_HOST"
    pki_key "$d/sa.key"
    openssl pkey -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
    for n in admin kubelet controller-manager scheduler kube-proxy coredns; do
        pki_kubeconfig "$CLUSTER_DIR/$n.kubeconfig" "$n"
    done
}
