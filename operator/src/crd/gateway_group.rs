//! `GatewayGroup`: one gateway fleet (Deployment + Service, with its autoscaler,
//! disruption budget and spread) that serves every Routing naming it in
//! `spec.gatewayGroup` — one endpoint for many Routings, as Gateway API splits a
//! Gateway from its routes.
//!
//! Wire format only; the operator turns it into the workload objects.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceRequirements, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{DURATION_MAX_LEN, DURATION_PATTERN, ObservedConditions};
use super::routing::GatewayListeners;

/// An IPv4 or IPv6 CIDR (`203.0.113.0/24`, `2001:db8::/32`); the API server checks
/// it with CEL's `isCIDR`.
const CIDR_MAX_LEN: u32 = 43;

custom_resource! {
    #[kube(
        kind = "GatewayGroup",
        doc = "A gateway fleet (Deployment + Service) serving every Routing that names it.",
        status = "GatewayGroupStatus",
        shortname = "gwg",
        printcolumn(name = "Service Type", type_ = "string", json_path = ".spec.service.type"),
        printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.replicas"),
        printcolumn(
            name = "Ready Replicas",
            type_ = "integer",
            json_path = ".status.readyReplicas"
        )
    )]
    /// A gateway fleet serving every Routing whose `spec.gatewayGroup` names it.
    #[derive(JsonSchema)]
    #[serde(rename_all = "camelCase")]
    pub struct GatewayGroupSpec {
        /// Gateway pods; ignored while `autoscaling` is set (the autoscaler owns it).
        #[serde(default = "default_replicas")]
        #[schemars(range(min = 0, max = 1000))]
        pub replicas: i32,
        /// Listeners the gateway Service exposes.
        pub listeners: GatewayListeners,
        /// Compute resources of each gateway container (default: the chart's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub resources: Option<ResourceRequirements>,
        /// How the gateway Service is exposed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub service: Option<GatewayService>,
        /// Connections from these sources must start with a PROXY protocol (v1 or v2)
        /// header, whose source address the gateway then uses (a load balancer that
        /// speaks it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub proxy_protocol: Option<ProxyProtocol>,
        /// A HorizontalPodAutoscaler on CPU; while set the operator leaves the
        /// Deployment's `replicas` alone.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub autoscaling: Option<Autoscaling>,
        /// The group's PodDisruptionBudget (default: the chart's, `maxUnavailable: 1`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub pod_disruption_budget: Option<DisruptionBudget>,
        /// Topology spread of the gateway pods (default: the chart's, a soft spread
        /// over nodes). A constraint without `labelSelector` selects the group's pods.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(length(max = 8))]
        pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
        /// Gateway limits (flags of the gateway binary).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub limits: Option<GatewayLimits>,
    }
}

/// The Service's type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ServiceType {
    /// In-cluster address only.
    #[default]
    ClusterIP,
    /// A port on every node.
    NodePort,
    /// A cloud load balancer.
    LoadBalancer,
}

impl ServiceType {
    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClusterIP => "ClusterIP",
            Self::NodePort => "NodePort",
            Self::LoadBalancer => "LoadBalancer",
        }
    }
}

/// `externalTrafficPolicy` of a NodePort or LoadBalancer Service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TrafficPolicy {
    /// Any node forwards to any pod (the client address is lost).
    Cluster,
    /// Only nodes with a gateway pod take traffic; the client address is kept.
    Local,
}

impl TrafficPolicy {
    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cluster => "Cluster",
            Self::Local => "Local",
        }
    }
}

/// Exposure of the gateway Service.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[x_kube(validation = Rule::new("!has(self.externalTrafficPolicy) || self.type != 'ClusterIP'")
    .message("service.externalTrafficPolicy needs service.type NodePort or LoadBalancer"))]
#[x_kube(validation = Rule::new("!has(self.loadBalancerSourceRanges) || self.type == 'LoadBalancer'")
    .message("service.loadBalancerSourceRanges needs service.type LoadBalancer"))]
#[x_kube(validation = Rule::new("!has(self.nodePorts) || self.type != 'ClusterIP'")
    .message("service.nodePorts needs service.type NodePort or LoadBalancer"))]
#[serde(rename_all = "camelCase")]
pub struct GatewayService {
    /// `ClusterIP` (default), `NodePort` or `LoadBalancer`.
    #[serde(default, rename = "type")]
    pub type_: ServiceType,
    /// Annotations of the Service (load-balancer settings of a cloud, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub annotations: BTreeMap<String, String>,
    /// `Cluster` or `Local` (keeps the client address; NodePort / LoadBalancer only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_traffic_policy: Option<TrafficPolicy>,
    /// Client ranges a LoadBalancer admits (CIDRs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = CIDR_MAX_LEN)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.all(c, isCIDR(c))", "message": "service.loadBalancerSourceRanges holds CIDRs"}]))]
    pub load_balancer_source_ranges: Vec<String>,
    /// Fixed node ports per listener (NodePort / LoadBalancer; default: allocated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ports: Option<NodePorts>,
}

/// Node ports of the listeners.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePorts {
    /// Node port of the HTTP listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub http: Option<i32>,
    /// Node port of the SOCKS5 listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub socks5: Option<i32>,
}

/// PROXY protocol on the listeners.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxyProtocol {
    /// Sources (CIDRs) whose connections carry a PROXY header: the load balancer's
    /// addresses. Others are served as plain clients.
    #[schemars(length(min = 1, max = 64), inner(length(max = CIDR_MAX_LEN)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.all(c, isCIDR(c))", "message": "proxyProtocol.trustedSources holds CIDRs"}]))]
    pub trusted_sources: Vec<String>,
}

/// A CPU-based HorizontalPodAutoscaler (`autoscaling/v2`).
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[x_kube(validation = Rule::new("self.minReplicas <= self.maxReplicas")
    .message("autoscaling.minReplicas must not exceed autoscaling.maxReplicas"))]
#[serde(rename_all = "camelCase")]
pub struct Autoscaling {
    /// Fewest pods.
    #[serde(default = "default_min_replicas")]
    #[schemars(range(min = 1, max = 1000))]
    pub min_replicas: i32,
    /// Most pods.
    #[schemars(range(min = 1, max = 1000))]
    pub max_replicas: i32,
    /// Average CPU use (percent of the request) the autoscaler aims at.
    #[serde(
        default = "default_cpu_target",
        rename = "targetCPUUtilizationPercentage"
    )]
    #[schemars(range(min = 1, max = 100))]
    pub target_cpu_utilization_percentage: i32,
}

/// The group's PodDisruptionBudget: at most one of the two.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[x_kube(validation = Rule::new("!(has(self.minAvailable) && has(self.maxUnavailable))")
    .message("podDisruptionBudget takes minAvailable or maxUnavailable, not both"))]
#[serde(rename_all = "camelCase")]
pub struct DisruptionBudget {
    /// Pods that must stay up (a count or `N%`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<IntOrString>,
    /// Pods that may be down at once (a count or `N%`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
}

/// Limits of each gateway process, as its flags (durations in whole seconds, rounded
/// up; the gateway's defaults when unset).
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[x_kube(validation = Rule::new("!has(self.writeTimeout) || (duration(self.writeTimeout) >= duration('1s') && duration(self.writeTimeout) <= duration('24h'))")
    .message("limits.writeTimeout must be 1s to 24h"))]
#[x_kube(validation = Rule::new("!has(self.requestBodyTimeout) || (duration(self.requestBodyTimeout) >= duration('1s') && duration(self.requestBodyTimeout) <= duration('24h'))")
    .message("limits.requestBodyTimeout must be 1s to 24h"))]
#[x_kube(validation = Rule::new("!has(self.handshakeTimeout) || (duration(self.handshakeTimeout) >= duration('1s') && duration(self.handshakeTimeout) <= duration('1h'))")
    .message("limits.handshakeTimeout must be 1s to 1h"))]
#[x_kube(validation = Rule::new("!has(self.clientIdleTimeout) || (duration(self.clientIdleTimeout) >= duration('1s') && duration(self.clientIdleTimeout) <= duration('24h'))")
    .message("limits.clientIdleTimeout must be 1s to 24h"))]
#[x_kube(validation = Rule::new("!has(self.idleTimeout) || (duration(self.idleTimeout) >= duration('1s') && duration(self.idleTimeout) <= duration('24h'))")
    .message("limits.idleTimeout must be 1s to 24h"))]
#[serde(rename_all = "camelCase")]
pub struct GatewayLimits {
    /// Open client connections per listener (`--max-connections`, default 10,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub max_connections: Option<i32>,
    /// Open client connections from one source address
    /// (`--max-connections-per-source`, default 2,500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub max_connections_per_source: Option<i32>,
    /// Time a client has to send its first request head or SOCKS5 handshake
    /// (`--handshake-timeout-seconds`, default 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = DURATION_MAX_LEN), pattern(DURATION_PATTERN))]
    pub handshake_timeout: Option<String>,
    /// Time a kept-alive client connection may sit idle between requests
    /// (`--client-idle-timeout-seconds`, default 60s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = DURATION_MAX_LEN), pattern(DURATION_PATTERN))]
    pub client_idle_timeout: Option<String>,
    /// Time a tunnel or body transfer may see no byte in either direction
    /// (`--io-idle-timeout-seconds`, default 5m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = DURATION_MAX_LEN), pattern(DURATION_PATTERN))]
    pub idle_timeout: Option<String>,
    /// Longest time one write to a client or a vendor proxy may make no progress
    /// (`--write-timeout-seconds`, default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = DURATION_MAX_LEN), pattern(DURATION_PATTERN))]
    pub write_timeout: Option<String>,
    /// Longest time a client may take to send one request body
    /// (`--request-body-timeout-seconds`, default 2m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = DURATION_MAX_LEN), pattern(DURATION_PATTERN))]
    pub request_body_timeout: Option<String>,
    /// Largest request head, bytes (`--max-request-head-bytes`, default 16 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1024, max = 1_048_576))]
    pub max_request_head_bytes: Option<i32>,
    /// Most header fields in a request head (`--max-request-headers`, default 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 256))]
    pub max_request_headers: Option<i32>,
}

impl GatewayLimits {
    /// The gateway flags these limits set, as `(flag, value)`; durations are whole
    /// seconds rounded up (a value the API server would not admit is left out).
    pub fn flags(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for (flag, n) in [
            ("max-connections", self.max_connections),
            (
                "max-connections-per-source",
                self.max_connections_per_source,
            ),
            ("max-request-head-bytes", self.max_request_head_bytes),
            ("max-request-headers", self.max_request_headers),
        ] {
            if let Some(n) = n {
                out.push((flag, n.to_string()));
            }
        }
        for (flag, d) in [
            ("handshake-timeout-seconds", &self.handshake_timeout),
            ("client-idle-timeout-seconds", &self.client_idle_timeout),
            ("io-idle-timeout-seconds", &self.idle_timeout),
            ("write-timeout-seconds", &self.write_timeout),
            ("request-body-timeout-seconds", &self.request_body_timeout),
        ] {
            if let Some(secs) = d.as_deref().and_then(whole_seconds) {
                out.push((flag, secs.to_string()));
            }
        }
        out
    }
}

/// A duration as whole seconds for a gateway flag, rounded up (at least 1).
fn whole_seconds(text: &str) -> Option<u64> {
    let d = super::parse_duration(text).ok()?;
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    Some(secs.max(1))
}

/// What the operator last reported about a gateway group.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayGroupStatus {
    /// Generation and conditions.
    #[serde(flatten)]
    pub observed: ObservedConditions,
    /// The Routings served, in match order (highest priority first, ties by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routings: Vec<String>,
    /// Desired pods of the gateway Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Ready pods of the gateway Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Name of the gateway Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
}

impl AsRef<ObservedConditions> for GatewayGroupStatus {
    fn as_ref(&self) -> &ObservedConditions {
        &self.observed
    }
}

fn default_replicas() -> i32 {
    2
}
fn default_min_replicas() -> i32 {
    2
}
fn default_cpu_target() -> i32 {
    80
}
