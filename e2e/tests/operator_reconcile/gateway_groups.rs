//! Gateway groups on the real cluster: one GatewayGroup's Deployment + Service serves
//! several Routings; its Service is exposed as the group says; its autoscaler owns
//! `replicas` (a `kubectl scale` is not reverted by a reconcile); its
//! PodDisruptionBudget; a Routing moving from its inline gateway to the group; the
//! gateway going with the group's last Routing and with the group itself.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ListParams};
use kube::{Resource, ResourceExt};
use proxy_pool_e2e::k8s::KubeApiServer;
use proxy_pool_operator::crd::{GatewayGroup, HasConditions, Routing};
use proxy_pool_operator::reconcile::{self, Context, Metrics};

use super::{
    NS, condition, config_when, created, eventually, get, kubectl_ok, operator_config, wait_ready,
};

const GROUP: &str = "lb";
const OBJECT: &str = "lb-gateway";

const MANIFESTS: &str = r#"
apiVersion: proxypool.io/v1alpha1
kind: GatewayGroup
metadata: {name: lb}
spec:
  listeners: {http: {port: 3128}, socks5: {port: 1080}}
  service:
    type: LoadBalancer
    annotations: {service.beta.kubernetes.io/aws-load-balancer-type: nlb}
    externalTrafficPolicy: Local
    loadBalancerSourceRanges: [203.0.113.0/24, 198.51.100.0/24]
  autoscaling: {minReplicas: 2, maxReplicas: 6, targetCPUUtilizationPercentage: 70}
  podDisruptionBudget: {minAvailable: 1}
  proxyProtocol: {trustedSources: [10.0.0.0/8]}
  limits: {writeTimeout: 45s}
---
apiVersion: proxypool.io/v1alpha1
kind: Routing
metadata: {name: lb-a}
spec:
  priority: 5
  gatewayGroup: lb
  match: {usernameParams: {region: a}}
  upstreams: [vendor-sim]
---
apiVersion: proxypool.io/v1alpha1
kind: Routing
metadata: {name: lb-b}
spec:
  priority: 50
  gatewayGroup: lb
  match: {usernameParams: {region: b}}
  upstreams: [vendor-sim]
"#;

pub(super) async fn one_group_serves_many_routings(
    cluster: &KubeApiServer,
    client: &kube::Client,
    base_yaml: &str,
) {
    kubectl_ok(cluster, &["apply", "-n", NS, "-f", "-"], Some(MANIFESTS)).await;
    let group: GatewayGroup = get(client, GROUP).await;

    // One Deployment and one Service for both Routings, none of their own.
    let d: Deployment = created(client, OBJECT, 60).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let of_group = deployments
        .list(&ListParams::default().labels(&format!("proxypool.io/gateway-group={OBJECT}")))
        .await
        .expect("list");
    assert_eq!(of_group.items.len(), 1);
    for name in ["lb-a-gateway", "lb-b-gateway"] {
        assert!(
            deployments.get_opt(name).await.expect("get").is_none(),
            "{name}"
        );
    }
    let owner = &d.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("GatewayGroup", group.uid().expect("uid").as_str())
    );
    let args = d
        .spec
        .as_ref()
        .expect("spec")
        .template
        .spec
        .as_ref()
        .expect("pod")
        .containers[0]
        .args
        .clone()
        .expect("args");
    for want in [
        "--gateway-group=lb",
        "--proxy-protocol-from=10.0.0.0/8",
        "--write-timeout-seconds=45",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} not in {args:?}");
    }
    // Both reach the config for the group's gateways, in match order.
    let (_, text) = config_when(client, "the group's routings in the config", 30, |t| {
        t.contains("lb-a") && t.contains("lb-b")
    })
    .await;
    let config = proxy_pool_api::config::load_yaml(&text).expect("config");
    let of_lb: Vec<&str> = config
        .routings
        .iter()
        .filter(|r| r.gateway_groups == [GROUP])
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(of_lb, ["lb-b", "lb-a"], "highest priority first");

    // Exposure.
    let s: Service = created(client, OBJECT, 30).await;
    assert_eq!(
        s.annotations()["service.beta.kubernetes.io/aws-load-balancer-type"],
        "nlb"
    );
    let spec = s.spec.expect("spec");
    assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
    assert_eq!(spec.external_traffic_policy.as_deref(), Some("Local"));
    assert_eq!(
        spec.load_balancer_source_ranges,
        Some(vec![
            "203.0.113.0/24".to_owned(),
            "198.51.100.0/24".to_owned()
        ])
    );
    assert_eq!(
        spec.selector,
        d.spec.as_ref().expect("spec").selector.match_labels
    );

    // The budget and the autoscaler.
    let pdb: PodDisruptionBudget = created(client, OBJECT, 30).await;
    let pdb_spec = pdb.spec.expect("spec");
    assert_eq!(
        (pdb_spec.min_available, pdb_spec.max_unavailable),
        (Some(IntOrString::Int(1)), None)
    );
    let hpa: HorizontalPodAutoscaler = created(client, OBJECT, 30).await;
    assert_eq!(
        (
            hpa.spec.scale_target_ref.name.as_str(),
            hpa.spec.min_replicas,
            hpa.spec.max_replicas
        ),
        (OBJECT, Some(2), 6)
    );

    // Replicas start at the minimum and belong to no operator apply; a scale (what the
    // autoscaler does) survives the next reconcile.
    // (The count is a second apply after the Deployment's: wait for it.)
    let d: Deployment = eventually("replicas at the autoscaler's minimum", 30, || async {
        let d: Deployment = get(client, OBJECT).await;
        (d.spec.as_ref().and_then(|s| s.replicas) == Some(2)).then_some(d)
    })
    .await;
    assert!(!reconcile::gateway::owns_replicas(
        &d,
        reconcile::FIELD_MANAGER
    ));
    kubectl_ok(
        cluster,
        &["scale", "-n", NS, "deployment", OBJECT, "--replicas=4"],
        None,
    )
    .await;
    let ctx = Arc::new(Context::new(
        client.clone(),
        operator_config(base_yaml),
        Arc::new(Metrics::new()),
    ));
    reconcile::gateway::reconcile_group(Arc::new(get(client, GROUP).await), ctx.clone())
        .await
        .expect("group reconcile");
    // Also what the running operator does on a change of the group.
    kubectl_ok(
        cluster,
        &[
            "patch",
            "-n",
            NS,
            "gatewaygroup",
            GROUP,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"limits":{"writeTimeout":"50s"}}}"#,
        ],
        None,
    )
    .await;
    let d: Deployment = eventually("the group change applied", 30, || async {
        let d: Deployment = get(client, OBJECT).await;
        let args = d.spec.as_ref()?.template.spec.as_ref()?.containers[0]
            .args
            .clone()?;
        args.iter()
            .any(|a| a == "--write-timeout-seconds=50")
            .then_some(d)
    })
    .await;
    assert_eq!(
        d.spec.as_ref().and_then(|s| s.replicas),
        Some(4),
        "the operator reverted a scale of an autoscaled group"
    );

    // Status: the group lists its Routings in match order; each Routing names its
    // group's Service.
    let g = eventually("the group's status", 30, || async {
        let g: GatewayGroup = get(client, GROUP).await;
        let s = g.status.clone()?;
        (s.routings == ["lb-b", "lb-a"] && s.replicas == Some(4)).then_some(g)
    })
    .await;
    assert_eq!(g.status.expect("status").service.as_deref(), Some(OBJECT));
    for name in ["lb-a", "lb-b"] {
        let r: Routing = eventually(&format!("{name}'s status"), 30, || async {
            let r: Routing = get(client, name).await;
            (r.status.as_ref()?.service.as_deref() == Some(OBJECT)).then_some(r)
        })
        .await;
        assert_eq!(
            r.status.expect("status").gateway_group.as_deref(),
            Some(GROUP)
        );
    }

    a_routing_moves_from_its_inline_gateway_to_the_group(cluster, client).await;
    a_group_named_like_an_inline_routing_conflicts(cluster, client).await;
    the_gateway_goes_with_the_last_routing_and_with_the_group(cluster, client).await;
}

/// A group with the name of a Routing that still has an inline gateway would share
/// its objects and `--gateway-group`: Degraded `NameConflict`, nothing applied, the
/// Routing's gateway untouched.
async fn a_group_named_like_an_inline_routing_conflicts(
    cluster: &KubeApiServer,
    client: &kube::Client,
) {
    let clash = r#"
apiVersion: proxypool.io/v1alpha1
kind: Routing
metadata: {name: clash}
spec:
  upstreams: [vendor-sim]
  gateway: {replicas: 1, listeners: {http: {port: 3128}}}
---
apiVersion: proxypool.io/v1alpha1
kind: Routing
metadata: {name: clash-member}
spec:
  gatewayGroup: clash
  upstreams: [vendor-sim]
---
apiVersion: proxypool.io/v1alpha1
kind: GatewayGroup
metadata: {name: clash}
spec:
  listeners: {socks5: {port: 1080}}
"#;
    kubectl_ok(cluster, &["apply", "-n", NS, "-f", "-"], Some(clash)).await;
    let g: GatewayGroup = eventually("the clash group Degraded", 60, || async {
        let g: GatewayGroup = get(client, "clash").await;
        let degraded = condition(g.conditions(), "Degraded")?;
        (degraded.status == "True" && degraded.reason == "NameConflict").then_some(g)
    })
    .await;
    assert!(g.status.expect("status").service.is_none());
    let d: Deployment = created(client, "clash-gateway", 30).await;
    assert_eq!(
        d.owner_references()[0].kind,
        "Routing",
        "the inline gateway stays"
    );
    kubectl_ok(cluster, &["delete", "-n", NS, "-f", "-"], Some(clash)).await;
}

/// Migration: a Routing with an inline gateway names the group instead; its own
/// gateway goes, the group serves it.
async fn a_routing_moves_from_its_inline_gateway_to_the_group(
    cluster: &KubeApiServer,
    client: &kube::Client,
) {
    let inline = r#"
apiVersion: proxypool.io/v1alpha1
kind: Routing
metadata: {name: mover}
spec:
  upstreams: [vendor-sim]
  gateway: {replicas: 1, listeners: {http: {port: 3128}}}
"#;
    kubectl_ok(cluster, &["apply", "-n", NS, "-f", "-"], Some(inline)).await;
    let _: Deployment = created(client, "mover-gateway", 60).await;
    kubectl_ok(
        cluster,
        &["patch", "-n", NS, "routing", "mover", "--type", "json", "-p",
          r#"[{"op":"remove","path":"/spec/gateway"},{"op":"add","path":"/spec/gatewayGroup","value":"lb"}]"#],
        None,
    )
    .await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    eventually("the inline gateway of mover removed", 60, || {
        let (d, s) = (deployments.clone(), services.clone());
        async move {
            let gone = d.get_opt("mover-gateway").await.ok()?.is_none()
                && s.get_opt("mover-gateway").await.ok()?.is_none();
            gone.then_some(())
        }
    })
    .await;
    eventually("the group serving mover", 30, || async {
        let g: GatewayGroup = get(client, GROUP).await;
        (g.status?.routings == ["lb-b", "lb-a", "mover"]).then_some(())
    })
    .await;
}

/// With its last Routing gone the group's gateway goes (the group stays, NoRoutings);
/// a Routing brings it back; deleting the group lets the garbage collector take its
/// objects, and the Routing naming it says so.
async fn the_gateway_goes_with_the_last_routing_and_with_the_group(
    cluster: &KubeApiServer,
    client: &kube::Client,
) {
    let routings: Api<Routing> = Api::namespaced(client.clone(), NS);
    for name in ["lb-a", "lb-b", "mover"] {
        routings
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete");
    }
    gone(client, "the group's gateway removed with its last Routing").await;
    let g: GatewayGroup = wait_ready(client, GROUP, "False").await;
    let ready = condition(g.conditions(), "Ready").expect("Ready");
    assert_eq!(ready.reason, "NoRoutings", "{ready:?}");

    kubectl_ok(cluster, &["apply", "-n", NS, "-f", "-"], Some(MANIFESTS)).await;
    let _: HorizontalPodAutoscaler = created(client, OBJECT, 60).await;
    let _: ConfigMap = created(client, &format!("{OBJECT}-clients"), 30).await;
    let groups: Api<GatewayGroup> = Api::namespaced(client.clone(), NS);
    groups
        .delete(GROUP, &DeleteParams::default())
        .await
        .expect("delete group");
    gone(
        client,
        "the garbage collector to remove the deleted group's objects",
    )
    .await;
    let r: Routing = eventually("lb-a without its group", 60, || async {
        let r: Routing = get(client, "lb-a").await;
        let degraded = condition(r.conditions(), "Degraded")?;
        (degraded.reason == "GatewayGroupNotFound").then_some(r)
    })
    .await;
    assert!(r.meta().deletion_timestamp.is_none());
    for name in ["lb-a", "lb-b"] {
        routings
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete");
    }
}

/// Waits until none of the group's objects exists.
async fn gone(client: &kube::Client, what: &str) {
    let c = client.clone();
    eventually(what, 90, || {
        let c = c.clone();
        async move {
            let d = Api::<Deployment>::namespaced(c.clone(), NS);
            let s = Api::<Service>::namespaced(c.clone(), NS);
            let p = Api::<PodDisruptionBudget>::namespaced(c.clone(), NS);
            let h = Api::<HorizontalPodAutoscaler>::namespaced(c.clone(), NS);
            let m = Api::<ConfigMap>::namespaced(c, NS);
            let none = d.get_opt(OBJECT).await.ok()?.is_none()
                && s.get_opt(OBJECT).await.ok()?.is_none()
                && p.get_opt(OBJECT).await.ok()?.is_none()
                && h.get_opt(OBJECT).await.ok()?.is_none()
                && m.get_opt(&format!("{OBJECT}-clients"))
                    .await
                    .ok()?
                    .is_none();
            none.then_some(())
        }
    })
    .await;
}
