//! Pod settings of the gateway Deployments the operator makes, as the chart gives them
//! (`--gateway-pod-settings FILE`, YAML): hardening, pull secrets, default resources,
//! scheduling, the shutdown timing and the PodDisruptionBudget. Parsed and checked once
//! at start-up ([`GatewayPodSettings::from_yaml`]); the Routing reconciler trusts them.
//! Owns no I/O.

use proxy_pool_runtime::telemetry::logging::LogFormat;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, LocalObjectReference, PodSecurityContext, ResourceRequirements,
    SeccompProfile, SecurityContext, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};

/// Longest `shutdownDelaySeconds` (the gateway's own limit).
pub const MAX_SHUTDOWN_DELAY_SECONDS: u32 = 300;
/// Longest `drainGraceSeconds`.
pub const MAX_DRAIN_GRACE_SECONDS: u32 = 3600;
/// What `terminationGracePeriodSeconds` adds to the delay and the drain: time to exit
/// after the drain's forced end.
pub const TERMINATION_MARGIN_SECONDS: u32 = 5;

/// How gateway pods are built beyond what a Routing says.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GatewayPodSettings {
    /// Pull secrets of the gateway image.
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// The pod's security context.
    pub pod_security_context: Option<PodSecurityContext>,
    /// The gateway container's security context.
    pub security_context: Option<SecurityContext>,
    /// Resources of a gateway whose Routing sets none (`spec.gateway.resources`).
    pub resources: Option<ResourceRequirements>,
    /// Extra pod annotations.
    pub pod_annotations: BTreeMap<String, String>,
    /// Node selector.
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Affinity.
    pub affinity: Option<Affinity>,
    /// Topology spread constraints; one without a `labelSelector` gets the gateway's
    /// own pod selector.
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    /// Priority class.
    pub priority_class_name: Option<String>,
    /// Seconds a terminating gateway stays unready but serving before it closes its
    /// listeners (`--shutdown-delay-seconds`).
    pub shutdown_delay_seconds: u32,
    /// Seconds in-flight work gets after the listeners close (`--drain-grace-seconds`).
    pub drain_grace_seconds: u32,
    /// The PodDisruptionBudget made beside each gateway Deployment.
    pub pod_disruption_budget: PdbSettings,
    /// The gateways' log format (`PROXY_POOL_LOG_FORMAT`: `text` or `json`).
    #[serde(with = "log_format")]
    pub log_format: LogFormat,
    /// The gateways' `RUST_LOG` (empty: `info`).
    pub log_level: String,
}

/// `logFormat` as the binaries spell it (`text`, `json`): runtime's [`LogFormat`].
mod log_format {
    use super::LogFormat;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(f: &LogFormat, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(f)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<LogFormat, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// `podDisruptionBudget`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PdbSettings {
    /// Make one (an existing one is deleted when off).
    pub enabled: bool,
    /// Pods that may be down at once for voluntary disruptions (a count or `N%`).
    pub max_unavailable: IntOrString,
}

impl Default for PdbSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            max_unavailable: IntOrString::Int(1),
        }
    }
}

/// The defaults are the chart's: Pod Security `restricted` hardening, a spread over
/// nodes, a 5 s unready delay and a 30 s drain, and a PodDisruptionBudget.
impl Default for GatewayPodSettings {
    fn default() -> Self {
        Self {
            image_pull_secrets: Vec::new(),
            pod_security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(65532),
                run_as_group: Some(65532),
                fs_group: Some(65532),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    localhost_profile: None,
                }),
                ..PodSecurityContext::default()
            }),
            security_context: Some(SecurityContext {
                allow_privilege_escalation: Some(false),
                read_only_root_filesystem: Some(true),
                capabilities: Some(Capabilities {
                    drop: Some(vec!["ALL".into()]),
                    add: None,
                }),
                ..SecurityContext::default()
            }),
            resources: None,
            pod_annotations: BTreeMap::new(),
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            affinity: None,
            topology_spread_constraints: vec![TopologySpreadConstraint {
                max_skew: 1,
                topology_key: "kubernetes.io/hostname".into(),
                when_unsatisfiable: "ScheduleAnyway".into(),
                ..TopologySpreadConstraint::default()
            }],
            priority_class_name: None,
            shutdown_delay_seconds: 5,
            drain_grace_seconds: 30,
            pod_disruption_budget: PdbSettings::default(),
            log_format: LogFormat::Text,
            log_level: String::new(),
        }
    }
}

/// Why the settings file was refused: every problem, with its field path.
#[derive(Debug, thiserror::Error)]
#[error("gateway pod settings: {}", .problems.join("; "))]
pub struct SettingsError {
    /// One message per problem.
    pub problems: Vec<String>,
}

impl GatewayPodSettings {
    /// Parses and checks the settings file.
    pub fn from_yaml(text: &str) -> Result<Self, SettingsError> {
        let settings: Self = serde_yaml::from_str(text).map_err(|e| SettingsError {
            problems: vec![e.to_string()],
        })?;
        settings.validate()?;
        Ok(settings)
    }

    /// Every problem at once.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let mut problems = Vec::new();
        if self.shutdown_delay_seconds > MAX_SHUTDOWN_DELAY_SECONDS {
            problems.push(format!(
                "shutdownDelaySeconds: at most {MAX_SHUTDOWN_DELAY_SECONDS}"
            ));
        }
        if !(1..=MAX_DRAIN_GRACE_SECONDS).contains(&self.drain_grace_seconds) {
            problems.push(format!(
                "drainGraceSeconds: must be 1..={MAX_DRAIN_GRACE_SECONDS}"
            ));
        }
        for (i, c) in self.topology_spread_constraints.iter().enumerate() {
            let at = format!("topologySpreadConstraints[{i}]");
            if c.max_skew < 1 {
                problems.push(format!("{at}.maxSkew: at least 1"));
            }
            if c.topology_key.is_empty() {
                problems.push(format!("{at}.topologyKey: required"));
            }
            if !matches!(
                c.when_unsatisfiable.as_str(),
                "DoNotSchedule" | "ScheduleAnyway"
            ) {
                problems.push(format!(
                    "{at}.whenUnsatisfiable: DoNotSchedule or ScheduleAnyway"
                ));
            }
        }
        if self.pod_disruption_budget.enabled {
            let ok = match &self.pod_disruption_budget.max_unavailable {
                IntOrString::Int(n) => *n >= 1,
                IntOrString::String(s) => s
                    .strip_suffix('%')
                    .and_then(|n| n.parse::<u8>().ok())
                    .is_some_and(|n| (1..=100).contains(&n)),
            };
            if !ok {
                problems.push(
                    "podDisruptionBudget.maxUnavailable: a count >= 1 or a percentage 1%-100%"
                        .into(),
                );
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(SettingsError { problems })
        }
    }

    /// `terminationGracePeriodSeconds`: longer than the unready delay plus the drain.
    pub fn termination_grace_seconds(&self) -> i64 {
        i64::from(
            self.shutdown_delay_seconds + self.drain_grace_seconds + TERMINATION_MARGIN_SECONDS,
        )
    }

    /// The spread constraints, each selecting the gateway's pods unless it names its
    /// own selector.
    pub fn spread_for(&self, selector: &BTreeMap<String, String>) -> Vec<TopologySpreadConstraint> {
        self.topology_spread_constraints
            .iter()
            .cloned()
            .map(|mut c| {
                if c.label_selector.is_none() {
                    c.label_selector = Some(LabelSelector {
                        match_labels: Some(selector.clone()),
                        match_expressions: None,
                    });
                }
                c
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_restricted_and_valid() {
        let s = GatewayPodSettings::default();
        s.validate().expect("valid");
        let pod = s.pod_security_context.as_ref().expect("pod context");
        assert_eq!(pod.run_as_non_root, Some(true));
        let c = s.security_context.as_ref().expect("container context");
        assert_eq!(c.allow_privilege_escalation, Some(false));
        assert_eq!(s.termination_grace_seconds(), 40);
    }

    #[test]
    fn the_chart_file_parses_and_unknown_keys_are_refused() {
        let s = GatewayPodSettings::from_yaml(
            "imagePullSecrets: [{name: regcred}]\nshutdownDelaySeconds: 2\ndrainGraceSeconds: 10\n\
             nodeSelector: {pool: gateways}\npodDisruptionBudget: {enabled: true, maxUnavailable: 25%}\n",
        )
        .expect("parses");
        assert_eq!(s.image_pull_secrets[0].name, "regcred");
        assert_eq!(s.termination_grace_seconds(), 17);
        assert_eq!(s.node_selector["pool"], "gateways");
        let err = GatewayPodSettings::from_yaml("drainGrace: 3\n").unwrap_err();
        assert!(err.to_string().contains("drainGrace"), "{err}");
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let err = GatewayPodSettings::from_yaml(
            "shutdownDelaySeconds: 301\ndrainGraceSeconds: 0\n\
             topologySpreadConstraints: [{maxSkew: 0, topologyKey: '', whenUnsatisfiable: Maybe}]\n\
             podDisruptionBudget: {maxUnavailable: 0}\n",
        )
        .unwrap_err();
        let text = err.to_string();
        for path in [
            "shutdownDelaySeconds",
            "drainGraceSeconds",
            "topologySpreadConstraints[0].maxSkew",
            "topologySpreadConstraints[0].topologyKey",
            "topologySpreadConstraints[0].whenUnsatisfiable",
            "podDisruptionBudget.maxUnavailable",
        ] {
            assert!(text.contains(path), "{path} missing from {text}");
        }
    }

    #[test]
    fn spread_constraints_get_the_gateway_selector() {
        let s = GatewayPodSettings::default();
        let sel = BTreeMap::from([("proxypool.io/routing".to_owned(), "g".to_owned())]);
        let spread = s.spread_for(&sel);
        assert_eq!(
            spread[0]
                .label_selector
                .as_ref()
                .and_then(|l| l.match_labels.clone()),
            Some(sel)
        );
    }
}
