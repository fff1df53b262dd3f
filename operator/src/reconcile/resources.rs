//! The Upstream and DistributionClient reconcilers: both only report whether the
//! resource made it into the controller config (the config reconciler writes it) and,
//! if not, why: a missing Secret or key, or a value the controller's validator rejects.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::Error;
use super::context::Context;
use super::render::Kind;
use super::status::{Outcome, apply_status, conditions, event_on_change};
use crate::crd::{DistributionClient, Upstream};

/// Reports an Upstream's status.
#[tracing::instrument(skip_all, fields(upstream = %u.name_any()))]
pub async fn reconcile_upstream(u: Arc<Upstream>, ctx: Arc<Context>) -> Result<Action, Error> {
    let old = u
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    measured(Kind::Upstream.as_str(), &ctx, async {
        let outcome = outcome(&ctx, Kind::Upstream, &u.name_any()).await?;
        let status = json!({
            "observedGeneration": u.meta().generation,
            "conditions": conditions(&old, u.meta().generation, &outcome),
        });
        apply_status(&ctx, &*u, status).await?;
        event_on_change(&ctx, &*u, &old, &outcome).await;
        Ok(action(&outcome))
    })
    .await
}

/// Reports a DistributionClient's status.
#[tracing::instrument(skip_all, fields(client = %c.name_any()))]
pub async fn reconcile_client(
    c: Arc<DistributionClient>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let old = c
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    measured(Kind::DistributionClient.as_str(), &ctx, async {
        let outcome = outcome(&ctx, Kind::DistributionClient, &c.name_any()).await?;
        let status = json!({
            "observedGeneration": c.meta().generation,
            "conditions": conditions(&old, c.meta().generation, &outcome),
        });
        apply_status(&ctx, &*c, status).await?;
        event_on_change(&ctx, &*c, &old, &outcome).await;
        Ok(action(&outcome))
    })
    .await
}

/// Times and counts a reconcile.
pub(crate) async fn measured<F>(kind: &'static str, ctx: &Context, fut: F) -> Result<Action, Error>
where
    F: Future<Output = Result<Action, Error>>,
{
    let timer = ctx.metrics.start(kind);
    let result = fut.await;
    timer.finish(result.is_ok());
    result
}

async fn outcome(ctx: &Context, kind: Kind, name: &str) -> Result<Outcome, Error> {
    let rendered = ctx.render().await?;
    let mut problems = rendered.problems_of(kind, name).to_vec();
    problems.extend(ctx.config_problems(&rendered).await?);
    // A client left out may be the reason nobody can extract: say so where it is read.
    if kind == Kind::DistributionClient && !problems.is_empty() {
        problems.extend(rendered.extraction_refused());
    }
    Ok(Outcome {
        problems,
        ready_message: format!("in the controller config {}", ctx.config.config_map),
    })
}

fn action(outcome: &Outcome) -> Action {
    if outcome.is_ready() {
        Action::requeue(Duration::from_secs(300))
    } else {
        Action::requeue(Duration::from_secs(60))
    }
}
