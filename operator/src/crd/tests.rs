//! Drift check of the committed CRD YAML, and checks that the examples and the
//! generated schemas say what the docs promise.

use super::*;
use serde_json::Value;

const COMMITTED_YAML: &str = include_str!("../../../crds/proxy-pool.yaml");

fn example_docs(file: &str) -> Vec<Value> {
    let path = format!("{}/../examples/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("parse {path}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

fn docs_of_kind(file: &str, kind: &str) -> Vec<Value> {
    example_docs(file)
        .into_iter()
        .filter(|d| d["kind"] == kind)
        .collect()
}

fn crd_json(kind: &str) -> Value {
    let crd = all()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"));
    serde_json::to_value(crd).expect("CRD serialises")
}

use serde::Deserialize;

#[test]
fn committed_crds_match_the_types() {
    let generated = to_yaml().expect("CRDs render");
    assert!(
        generated == COMMITTED_YAML,
        "crds/proxy-pool.yaml is out of date with operator/src/crd/. Regenerate it with:\n\
         \x20   cargo run -p proxy-pool-operator --bin crdgen > crds/proxy-pool.yaml"
    );
}

#[test]
fn examples_deserialize_into_the_types() {
    let ups = docs_of_kind("upstream.yaml", "Upstream");
    assert!(!ups.is_empty(), "examples/upstream.yaml holds an Upstream");
    for doc in ups {
        let u: Upstream = serde_json::from_value(doc).expect("example Upstream deserialises");
        assert_eq!(u.spec.protocol, Protocol::Http);
    }
    let rts = docs_of_kind("routing.yaml", "Routing");
    assert!(!rts.is_empty(), "examples/routing.yaml holds a Routing");
    for doc in rts {
        let _: Routing = serde_json::from_value(doc).expect("example Routing deserialises");
    }
    let groups = docs_of_kind("gateway-group.yaml", "GatewayGroup");
    assert!(
        !groups.is_empty(),
        "examples/gateway-group.yaml holds a GatewayGroup"
    );
    for doc in groups {
        let g: GatewayGroup =
            serde_json::from_value(doc).expect("example GatewayGroup deserialises");
        assert!(g.spec.listeners.http.is_some());
    }
    for doc in docs_of_kind("routing.yaml", "Routing") {
        let r: Routing = serde_json::from_value(doc).expect("Routing");
        assert_eq!(
            (r.spec.gateway_group.as_deref(), r.spec.gateway.is_none()),
            (Some("edge"), true),
            "the example Routing uses the example group, not the deprecated inline gateway"
        );
    }
    let dcs = docs_of_kind("distribution-client.yaml", "DistributionClient");
    assert!(
        !dcs.is_empty(),
        "examples/distribution-client.yaml holds a DistributionClient"
    );
    for doc in dcs {
        let d: DistributionClient =
            serde_json::from_value(doc).expect("example DistributionClient deserialises");
        assert!(
            d.spec
                .permissions
                .contains(&Permission::DistributionExtract)
        );
    }
}

#[test]
fn every_crd_has_status_subresource_and_ready_column() {
    for crd in all() {
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, VERSION);
        assert_eq!(crd.spec.group, GROUP);
        let sub = version.subresources.as_ref().expect("subresources");
        assert!(
            sub.status.is_some(),
            "{} has a status subresource",
            crd.spec.names.kind
        );
        let cols = version
            .additional_printer_columns
            .as_ref()
            .expect("printer columns");
        assert!(
            cols.iter().any(|c| c.name == "Ready"),
            "{} shows Ready",
            crd.spec.names.kind
        );
        assert!(
            cols.iter().any(|c| c.name == "Age"),
            "{} shows Age",
            crd.spec.names.kind
        );
    }
}

#[test]
fn upstream_schema_carries_cross_field_rule_and_enums() {
    let crd = crd_json("Upstream");
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let rules = spec["x-kubernetes-validations"]
        .as_array()
        .expect("spec rules");
    assert!(rules.iter().any(|r| {
        r["rule"]
            .as_str()
            .is_some_and(|s| s.contains("safetyMargin"))
    }));
    assert_eq!(
        spec["properties"]["protocol"]["enum"],
        serde_json::json!(["http", "socks5"])
    );
    assert_eq!(spec["properties"]["ttl"]["pattern"], DURATION_PATTERN);
}

/// The city is bounded like the region: the same label pattern and length, and a
/// Routing's list of cities is a set of at most 64.
#[test]
fn city_labels_are_bounded_like_regions() {
    let spec = |kind: &str| {
        crd_json(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            .clone()
    };
    let routing = &spec("Routing")["properties"]["labels"]["properties"];
    let (regions, cities) = (&routing["regions"], &routing["cities"]);
    assert_eq!(cities["maxItems"], 64);
    assert_eq!(cities["x-kubernetes-list-type"], "set");
    assert_eq!(cities["items"]["pattern"], common::LABEL_VALUE_PATTERN);
    assert_eq!(cities["items"], regions["items"]);
    let upstream = &spec("Upstream")["properties"]["labels"]["properties"];
    assert_eq!(upstream["city"]["pattern"], common::LABEL_VALUE_PATTERN);
    assert_eq!(upstream["city"]["maxLength"], 63);
}

#[test]
fn schemas_hold_no_constructs_a_structural_schema_forbids() {
    for kind in ["Upstream", "Routing", "DistributionClient"] {
        let text = crd_json(kind).to_string();
        // Unsigned counts carry `format: int32` (their ranges fit): the API server warns
        // "unrecognized format" about the `uint32` schemars emits by default.
        for bad in [
            "\"format\":\"uint",
            "\"$ref\"",
            "\"anyOf\"",
            "\"oneOf\"",
            "\"allOf\"",
            "\"type\":[",
            "\"const\"",
        ] {
            assert!(!text.contains(bad), "{kind} CRD schema contains {bad}");
        }
    }
}

#[test]
fn minimal_spec_serialises_without_nulls() {
    // The least a user writes; everything else takes its serde default.
    let spec: UpstreamSpec = serde_json::from_value(serde_json::json!({
        "source": {"static": {"proxies": ["127.0.0.1:8080"]}},
        "protocol": "socks5",
        "ttl": "60s",
        "maxSize": 10,
    }))
    .expect("minimal spec");
    assert_eq!(spec.protocol, Protocol::Socks5);
    assert_eq!(spec.source.vendor_api, None);
    let mut u = Upstream::new("u", spec);
    u.status = Some(UpstreamStatus::default());
    let text = serde_json::to_string(&u).expect("serialises");
    assert!(
        !text.contains("null"),
        "server-side apply breaks on nulls: {text}"
    );
}
