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

use super::common::FIELD_MANAGER;
use super::context::Context;
use super::error::Error;
use super::render::Problem;
use crate::crd::{CONDITION_DEGRADED, CONDITION_READY, HasConditions};

/// The outcome a reconcile reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// What keeps the resource from working (empty: not Degraded).
    pub problems: Vec<Problem>,
    /// Nothing is wrong but the resource is not working yet (gateway pods starting, no
    /// vendor fetch yet, the controller's inventory not readable): Ready is False with
    /// this reason and message, Degraded stays False.
    pub waiting: Option<(&'static str, String)>,
    /// Message of the Ready condition when there is no problem.
    pub ready_message: String,
}

impl Outcome {
    /// An outcome with these problems (nothing waited for).
    pub fn new(problems: Vec<Problem>, ready_message: String) -> Self {
        Self {
            problems,
            waiting: None,
            ready_message,
        }
    }

    /// Whether the resource is Ready.
    pub fn is_ready(&self) -> bool {
        self.problems.is_empty() && self.waiting.is_none()
    }

    /// Ready's (status, reason, message) and Degraded's.
    fn statuses(&self) -> [(&'static str, &'static str, String); 2] {
        if let Some(p) = self.problems.first() {
            let message = self
                .problems
                .iter()
                .map(|p| p.message.as_str())
                .collect::<Vec<_>>()
                .join("; ");
            return [
                ("False", p.reason, message.clone()),
                ("True", p.reason, message),
            ];
        }
        match &self.waiting {
            Some((reason, message)) => [
                ("False", reason, message.clone()),
                ("False", "AsExpected", String::new()),
            ],
            None => [
                ("True", "Reconciled", self.ready_message.clone()),
                ("False", "AsExpected", String::new()),
            ],
        }
    }
}

/// The two conditions for `outcome`, keeping transition times of unchanged statuses.
pub fn conditions(old: &[Condition], generation: Option<i64>, outcome: &Outcome) -> Vec<Condition> {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let [ready, degraded] = outcome.statuses();
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

/// Reports `outcome` on `obj`: server-side applies `status` (a JSON object of the
/// fields this operator owns) to its status subresource with `observedGeneration`
/// and the two conditions added (transition times kept from the conditions `obj`
/// carries) and publishes an event when Ready changed.
pub async fn report<K>(
    ctx: &Context,
    obj: &K,
    mut status: Value,
    outcome: &Outcome,
) -> Result<(), Error>
where
    K: HasConditions
        + Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let old = obj.conditions();
    let generation = obj.meta().generation;
    status["observedGeneration"] = json!(generation);
    status["conditions"] = json!(conditions(old, generation, outcome));
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
    event_on_change(ctx, obj, old, outcome).await;
    Ok(())
}

/// Publishes an event when Ready changed (or was never reported). Event failures are
/// logged, never fatal: the status already carries the outcome.
pub async fn event_on_change<K>(ctx: &Context, obj: &K, old: &[Condition], outcome: &Outcome)
where
    K: Resource<DynamicType = ()>,
{
    let [(want, reason, message), _] = outcome.statuses();
    let unchanged = old
        .iter()
        .find(|c| c.type_ == CONDITION_READY)
        .is_some_and(|c| c.status == want && c.reason == reason);
    if unchanged {
        return;
    }
    let type_ = if outcome.problems.is_empty() {
        EventType::Normal
    } else {
        EventType::Warning
    };
    publish(ctx, obj, type_, reason, &message, "Reconcile").await;
}

/// Publishes an event about `obj`, its note cut to 1000 characters. Failures are
/// logged, never fatal.
pub async fn publish<K>(
    ctx: &Context,
    obj: &K,
    type_: EventType,
    reason: &str,
    note: &str,
    action: &str,
) where
    K: Resource<DynamicType = ()>,
{
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: action.into(),
        secondary: None,
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

    /// `(type, status, reason)` of each condition, in order.
    fn summary(c: &[Condition]) -> Vec<(&str, &str, &str)> {
        c.iter()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
            .collect()
    }

    const PROBLEM: [(&str, &str, &str); 2] = [
        ("Ready", "False", "SecretNotFound"),
        ("Degraded", "True", "SecretNotFound"),
    ];

    #[test]
    fn ready_and_degraded_mirror_each_other() {
        let ok = Outcome::new(vec![], "fine".into());
        let c = conditions(&[], Some(3), &ok);
        assert_eq!(
            summary(&c),
            [
                ("Ready", "True", "Reconciled"),
                ("Degraded", "False", "AsExpected")
            ]
        );
        assert_eq!(c[0].observed_generation, Some(3));
        let bad = Outcome::new(vec![problem()], String::new());
        assert_eq!(summary(&conditions(&[], Some(3), &bad)), PROBLEM);
    }

    #[test]
    fn waiting_is_not_ready_and_not_degraded() {
        let mut waiting = Outcome::new(vec![], "fine".into());
        waiting.waiting = Some(("GatewayPodsNotReady", "0 of 2 gateway pods ready".into()));
        assert!(!waiting.is_ready());
        let c = conditions(&[], Some(1), &waiting);
        assert_eq!(
            summary(&c),
            [
                ("Ready", "False", "GatewayPodsNotReady"),
                ("Degraded", "False", "AsExpected")
            ]
        );
        assert_eq!(c[0].message, "0 of 2 gateway pods ready");
        // A problem wins over waiting.
        waiting.problems.push(problem());
        assert_eq!(summary(&conditions(&[], Some(1), &waiting)), PROBLEM);
    }

    #[test]
    fn unchanged_status_keeps_its_transition_time() {
        let ok = Outcome::new(vec![], "fine".into());
        let mut first = conditions(&[], Some(1), &ok);
        first[0].last_transition_time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let second = conditions(&first, Some(1), &ok);
        assert_eq!(
            second[0].last_transition_time,
            first[0].last_transition_time
        );
        let bad = Outcome::new(vec![problem()], String::new());
        let third = conditions(&second, Some(2), &bad);
        assert_ne!(third[0].last_transition_time, first[0].last_transition_time);
    }
}
