//! The issuance decision: verify the CSR, authenticate the token (TokenReview, our
//! audience), authorise the pod (managed gateway Deployment, or the configured checker
//! Deployment), and sign a leaf whose only SAN is
//! `spiffe://<trust-domain>/<environment>/worker/<pod-name>` for gateways or
//! `spiffe://<trust-domain>/<environment>/checker/<pod-name>` for checkers — the kind
//! and name taken from the authenticated caller, never from the CSR. These are the
//! paths the controller's control plane requires for worker and checker messages
//! (`proxy_pool_api::controlplane::spiffe`).

use std::sync::Arc;
use std::time::Duration;

use super::authority::Authority;
use super::authz::{self, CheckerWorkload, PodCaller, WorkloadKind, Workloads};
use super::ca::unix_secs;
use super::csr;
use super::error::IssueError;
use super::metrics::IdentityMetrics;
use super::review::{Review, TokenReviewer};
use super::wire::{DEFAULT_AUDIENCE, IssueResponse};

const SA_PREFIX: &str = "system:serviceaccount:";

/// What the issuer signs and whom it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuerConfig {
    /// SPIFFE trust domain, e.g. `proxy-pool.local`.
    pub trust_domain: String,
    /// Environment path segment, e.g. `prod`.
    pub environment: String,
    /// Audience the projected token must carry.
    pub audience: String,
    /// Leaf lifetime (capped by the signing CA's expiry).
    pub leaf_lifetime: Duration,
    /// Namespaces whose pods may be served; `None` = any.
    pub namespaces: Option<Vec<String>>,
    /// The checker Deployment whose pods get checker identities; `None` = checkers
    /// are refused like any other unmanaged pod.
    pub checker: Option<CheckerWorkload>,
    /// The ServiceAccount gateway pods run under (the operator renders it into every
    /// gateway Deployment); a pod of a gateway Deployment under another one is
    /// refused. `None`: not checked.
    pub gateway_service_account: Option<String>,
}

impl IssuerConfig {
    /// Defaults: audience `proxy-pool-identity`, 24 h leaves, any namespace, no checker.
    pub fn new(trust_domain: impl Into<String>, environment: impl Into<String>) -> Self {
        Self {
            trust_domain: trust_domain.into(),
            environment: environment.into(),
            audience: DEFAULT_AUDIENCE.into(),
            leaf_lifetime: Duration::from_secs(24 * 3600),
            namespaces: None,
            checker: None,
            gateway_service_account: None,
        }
    }

    /// Every problem at once.
    pub fn validate(&self) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        if !segment_ok(&self.trust_domain) {
            problems.push("trustDomain: lowercase letters, digits, '.', '-', '_' (1-63)".into());
        }
        if !segment_ok(&self.environment) {
            problems.push("environment: lowercase letters, digits, '.', '-', '_' (1-63)".into());
        }
        if self.audience.trim().is_empty() {
            problems.push("audience: must not be empty".into());
        }
        if self.leaf_lifetime < Duration::from_secs(60) {
            problems.push("leafLifetime: at least 1m".into());
        }
        if let Some(c) = &self.checker {
            for (field, value) in [
                ("checker namespace", &c.namespace),
                ("checker deployment", &c.deployment),
                ("checker serviceAccount", &c.service_account),
            ] {
                if !is_dns_subdomain(value) {
                    problems.push(format!("{field}: a Kubernetes object name, got {value:?}"));
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

fn segment_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.' | b'_')
        })
}

/// Issues worker certificates.
#[derive(Debug)]
pub struct Issuer {
    config: IssuerConfig,
    reviewer: Arc<dyn TokenReviewer>,
    workloads: Arc<dyn Workloads>,
    authority: Arc<Authority>,
    metrics: IdentityMetrics,
}

impl Issuer {
    /// An issuer; `config` must have passed [`IssuerConfig::validate`].
    pub fn new(
        config: IssuerConfig,
        reviewer: Arc<dyn TokenReviewer>,
        workloads: Arc<dyn Workloads>,
        authority: Arc<Authority>,
    ) -> Self {
        Self {
            config,
            reviewer,
            workloads,
            authority,
            metrics: IdentityMetrics::default(),
        }
    }

    /// Counts requests into `metrics` (by default, into metrics nobody registered).
    #[must_use]
    pub fn with_metrics(mut self, metrics: IdentityMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Where requests are counted.
    pub fn metrics(&self) -> &IdentityMetrics {
        &self.metrics
    }

    /// The SPIFFE ID of a `kind` pod: `spiffe://<td>/<env>/<worker|checker>/<pod>`.
    pub fn spiffe_id(&self, kind: WorkloadKind, pod_name: &str) -> String {
        format!(
            "spiffe://{}/{}/{}/{pod_name}",
            self.config.trust_domain,
            self.config.environment,
            kind.as_str()
        )
    }

    /// Handles one request. `token` is never logged.
    #[tracing::instrument(skip_all, fields(namespace, pod))]
    pub async fn issue(&self, token: &str, csr_pem: &str) -> Result<IssueResponse, IssueError> {
        let public_key =
            csr::public_key_of(csr_pem).map_err(|e| IssueError::BadRequest(e.to_string()))?;
        let caller = self.authenticate(token).await?;
        let span = tracing::Span::current();
        span.record("namespace", caller.namespace.as_str());
        span.record("pod", caller.pod_name.as_str());

        let decision = authz::authorize(
            self.workloads.as_ref(),
            &caller,
            self.config.namespaces.as_deref(),
            self.config.checker.as_ref(),
            self.config.gateway_service_account.as_deref(),
        )
        .await
        .map_err(|e| IssueError::Unavailable(e.to_string()))?;
        let kind = match decision {
            Ok(kind) => kind,
            Err(denial) => {
                tracing::info!(reason = %denial, "worker certificate refused");
                return Err(IssueError::Forbidden(denial.to_string()));
            }
        };

        let spiffe_id = self.spiffe_id(kind, &caller.pod_name);
        let cas = self.authority.cas();
        let now = self.authority.now();
        let leaf = cas
            .sign_workload(
                now,
                self.authority.params(),
                &public_key,
                &spiffe_id,
                self.config.leaf_lifetime,
            )
            .map_err(|e| IssueError::Internal(e.to_string()))?;
        tracing::info!(
            spiffe_id,
            not_after = unix_secs(leaf.not_after),
            "worker certificate issued"
        );
        Ok(IssueResponse {
            spiffe_id,
            certificate: leaf.pem,
            trust_bundle: cas.bundle_pem(now),
            not_before: unix_secs(leaf.not_before),
            not_after: unix_secs(leaf.not_after),
        })
    }

    async fn authenticate(&self, token: &str) -> Result<PodCaller, IssueError> {
        let audience = self.config.audience.as_str();
        let reviewed = match self.reviewer.review(token, audience).await {
            Ok(Review::Authenticated(r)) => r,
            Ok(Review::Rejected) => {
                return Err(IssueError::Unauthenticated(
                    "token is invalid, expired or not for this audience",
                ));
            }
            Err(e) => return Err(IssueError::Unavailable(e.to_string())),
        };
        if !reviewed.audiences.iter().any(|a| a == audience) {
            return Err(IssueError::Unauthenticated(
                "token is not for this audience",
            ));
        }
        let (namespace, service_account) = reviewed
            .username
            .strip_prefix(SA_PREFIX)
            .and_then(|rest| rest.split_once(':'))
            .ok_or_else(|| IssueError::Forbidden("not a ServiceAccount token".into()))?;
        let (Some(pod_name), Some(pod_uid)) = (reviewed.pod_name, reviewed.pod_uid) else {
            return Err(IssueError::Forbidden("token is not bound to a pod".into()));
        };
        if !is_dns_subdomain(&pod_name) {
            return Err(IssueError::Forbidden(
                "pod name is not a DNS subdomain".into(),
            ));
        }
        Ok(PodCaller {
            namespace: namespace.to_owned(),
            service_account: service_account.to_owned(),
            pod_name,
            pod_uid,
        })
    }
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checker_rule_must_name_real_objects() {
        let ok = IssuerConfig {
            checker: Some(CheckerWorkload {
                namespace: "proxy-pool".into(),
                deployment: "proxy-pool-checker".into(),
                service_account: "proxy-pool-checker".into(),
            }),
            ..IssuerConfig::new("proxy-pool.local", "prod")
        };
        assert_eq!(ok.validate(), Ok(()));
        let bad = IssuerConfig {
            checker: Some(CheckerWorkload {
                namespace: String::new(),
                deployment: "Checker".into(),
                service_account: "a/b".into(),
            }),
            ..ok
        };
        let problems = bad.validate().unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[1].contains("checker deployment"), "{problems:?}");
    }
}
