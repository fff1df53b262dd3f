//! Status conditions (`Ready`, `Degraded`), their server-side apply to the status
//! subresource, and an event whenever `Ready` flips.
//!
//! Idempotent by construction: a condition keeps its `lastTransitionTime` while its
//! status stays the same, so re-applying an unchanged outcome is a no-op on the server.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::Error;
use super::context::{Context, FIELD_MANAGER};
use super::render::Problem;
use crate::crd::{CONDITION_DEGRADED, CONDITION_READY};

/// The outcome a reconcile reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// What keeps the resource from working (empty: Ready).
    pub problems: Vec<Problem>,
    /// Message of the Ready condition when there is no problem.
    pub ready_message: String,
}

impl Outcome {
    /// Whether the resource is Ready.
    pub fn is_ready(&self) -> bool {
        self.problems.is_empty()
    }
}

/// The two conditions for `outcome`, keeping transition times of unchanged statuses.
pub fn conditions(old: &[Condition], generation: Option<i64>, outcome: &Outcome) -> Vec<Condition> {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let (ready, degraded) = if outcome.is_ready() {
        (
            ("True", "Reconciled", outcome.ready_message.clone()),
            ("False", "AsExpected", String::new()),
        )
    } else {
        let reason = outcome.problems[0].reason;
        let message = outcome
            .problems
            .iter()
            .map(|p| p.message.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        (
            ("False", reason, message.clone()),
            ("True", reason, message),
        )
    };
    [(CONDITION_READY, ready), (CONDITION_DEGRADED, degraded)]
        .into_iter()
        .map(|(type_, (status, reason, message))| {
            let previous = old.iter().find(|c| c.type_ == type_);
            let last_transition_time = match previous {
                Some(p) if p.status == status => p.last_transition_time.clone(),
                _ => now.clone(),
            };
            Condition {
                type_: type_.to_owned(),
                status: status.to_owned(),
                reason: reason.to_owned(),
                message,
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect()
}

/// Server-side applies `status` (a JSON object of the fields this operator owns) to
/// `obj`'s status subresource.
pub async fn apply_status<K>(ctx: &Context, obj: &K, status: Value) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = ctx.api();
    let patch = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(
        &obj.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

/// Publishes an event when Ready changed (or was never reported). Event failures are
/// logged, never fatal: the status already carries the outcome.
pub async fn event_on_change<K>(ctx: &Context, obj: &K, old: &[Condition], outcome: &Outcome)
where
    K: Resource<DynamicType = ()>,
{
    let want = if outcome.is_ready() { "True" } else { "False" };
    let was = old
        .iter()
        .find(|c| c.type_ == CONDITION_READY)
        .map(|c| c.status.as_str());
    let same_reason = old
        .iter()
        .find(|c| c.type_ == CONDITION_DEGRADED)
        .is_some_and(|c| {
            outcome
                .problems
                .first()
                .is_some_and(|p| p.reason == c.reason)
        });
    if was == Some(want) && (outcome.is_ready() || same_reason) {
        return;
    }
    let event = if outcome.is_ready() {
        Event {
            type_: EventType::Normal,
            reason: "Reconciled".into(),
            note: Some(outcome.ready_message.clone()),
            action: "Reconcile".into(),
            secondary: None,
        }
    } else {
        let p = &outcome.problems[0];
        Event {
            type_: EventType::Warning,
            reason: p.reason.into(),
            note: Some(p.message.chars().take(1000).collect()),
            action: "Reconcile".into(),
            secondary: None,
        }
    };
    if let Err(error) = ctx.recorder.publish(&event, &obj.object_ref(&())).await {
        tracing::warn!(%error, "cannot publish event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem() -> Problem {
        Problem {
            reason: "SecretNotFound",
            message: "Secret \"x\" does not exist in this namespace".into(),
        }
    }

    #[test]
    fn ready_and_degraded_mirror_each_other() {
        let ok = Outcome {
            problems: vec![],
            ready_message: "fine".into(),
        };
        let c = conditions(&[], Some(3), &ok);
        assert_eq!(
            (c[0].type_.as_str(), c[0].status.as_str()),
            ("Ready", "True")
        );
        assert_eq!(
            (c[1].type_.as_str(), c[1].status.as_str()),
            ("Degraded", "False")
        );
        assert_eq!(c[0].observed_generation, Some(3));
        let bad = Outcome {
            problems: vec![problem()],
            ready_message: String::new(),
        };
        let c = conditions(&[], Some(3), &bad);
        assert_eq!(
            (c[0].status.as_str(), c[0].reason.as_str()),
            ("False", "SecretNotFound")
        );
        assert_eq!(
            (c[1].status.as_str(), c[1].reason.as_str()),
            ("True", "SecretNotFound")
        );
    }

    #[test]
    fn unchanged_status_keeps_its_transition_time() {
        let ok = Outcome {
            problems: vec![],
            ready_message: "fine".into(),
        };
        let mut first = conditions(&[], Some(1), &ok);
        first[0].last_transition_time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let second = conditions(&first, Some(1), &ok);
        assert_eq!(
            second[0].last_transition_time,
            first[0].last_transition_time
        );
        let bad = Outcome {
            problems: vec![problem()],
            ready_message: String::new(),
        };
        let third = conditions(&second, Some(2), &bad);
        assert_ne!(third[0].last_transition_time, first[0].last_transition_time);
    }
}
