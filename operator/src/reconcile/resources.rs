//! The Upstream and DistributionClient reconcilers: both only report whether the
//! resource made it into the controller config (the config reconciler writes it) and,
//! if not, why: a missing Secret or key, or a value the controller's validator rejects.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use serde_json::json;

use super::context::{Context, measured};
use super::error::Error;
use super::inventory::{InventoryCache, condition_reason};
use super::render::{Kind, Problem};
use super::status::{Outcome, report};
use crate::crd::{DistributionClient, Upstream};

/// Reports an Upstream's status.
#[tracing::instrument(skip_all, fields(upstream = %u.name_any()))]
pub async fn reconcile_upstream(u: Arc<Upstream>, ctx: Arc<Context>) -> Result<Action, Error> {
    measured(Kind::Upstream.as_str(), &ctx, async {
        let mut outcome = outcome(&ctx, Kind::Upstream, &u.name_any()).await?;
        let mut status = json!({});
        if let Some(admin) = ctx.config.controller_admin.as_deref()
            && outcome.problems.is_empty()
        {
            from_controller(
                &ctx.inventory,
                admin,
                &u.name_any(),
                &mut outcome,
                &mut status,
            )
            .await;
        }
        report(&ctx, &*u, status, &outcome).await?;
        Ok(if ctx.config.controller_admin.is_some() {
            // Inventory changes all the time: keep `kubectl get upstreams` current.
            Action::requeue(INVENTORY_REFRESH)
        } else {
            action(&outcome)
        })
    })
    .await
}

/// How often an Upstream's status re-reads the controller's inventory.
const INVENTORY_REFRESH: Duration = Duration::from_secs(15);

/// Fills `status.inventory` / `status.lastFetchTime` from the controller's admin
/// inventory, and what it says into `outcome`: a failing vendor fetch is a problem
/// (Degraded, with its reason); no successful fetch yet, an upstream the controller
/// does not serve yet, or an unreadable inventory keep it not Ready.
async fn from_controller(
    inventory: &InventoryCache,
    admin: &str,
    name: &str,
    outcome: &mut Outcome,
    status: &mut serde_json::Value,
) {
    let report = match &*inventory.get(admin).await {
        Ok(all) => all.get(name).cloned(),
        Err(e) => {
            outcome.waiting = Some((
                "InventoryUnavailable",
                format!("the controller's inventory could not be read: {e}"),
            ));
            return;
        }
    };
    let Some(r) = report else {
        outcome.waiting = Some((
            "NotServedYet",
            "the controller does not serve this upstream yet".to_owned(),
        ));
        return;
    };
    status["inventory"] = json!({
        "managed": r.managed,
        "available": r.available,
        "availableSlots": r.available_slots,
    });
    if let Some(t) = &r.quarantined_until {
        status["inventory"]["quarantinedUntil"] = json!(t);
    }
    if let Some(t) = &r.last_fetch_time {
        status["lastFetchTime"] = json!(t);
    }
    match (&r.fetch_error, &r.last_fetch_time) {
        (Some(e), _) => outcome.problems.push(Problem {
            reason: condition_reason(e),
            message: format!(
                "fetching from the vendor fails: {} ({} in a row, last at {})",
                e.reason.as_str(),
                e.consecutive_failures,
                e.at
            ),
        }),
        (None, None) => {
            outcome.waiting = Some((
                "AwaitingFirstFetch",
                "no successful fetch from the source yet".to_owned(),
            ));
        }
        (None, Some(_)) => {
            outcome.ready_message = format!(
                "{}; {} managed, {} available, last fetched {}",
                outcome.ready_message,
                r.managed,
                r.available,
                r.last_fetch_time.as_deref().unwrap_or("")
            );
            if let Some(t) = &r.quarantined_until {
                outcome.ready_message = format!(
                    "{}; held back until {t} (a new pool generation: spec.quarantine)",
                    outcome.ready_message
                );
            }
        }
    }
}

/// Reports a DistributionClient's status.
#[tracing::instrument(skip_all, fields(client = %c.name_any()))]
pub async fn reconcile_client(
    c: Arc<DistributionClient>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    measured(Kind::DistributionClient.as_str(), &ctx, async {
        let outcome = outcome(&ctx, Kind::DistributionClient, &c.name_any()).await?;
        report(&ctx, &*c, json!({}), &outcome).await?;
        Ok(action(&outcome))
    })
    .await
}

async fn outcome(ctx: &Context, kind: Kind, name: &str) -> Result<Outcome, Error> {
    let rendered = ctx.render().await?;
    let mut problems = rendered.problems_of(kind, name).to_vec();
    problems.extend(ctx.config_problems(&rendered).await?);
    // A client left out may be the reason nobody can extract: say so where it is read.
    if kind == Kind::DistributionClient && !problems.is_empty() {
        problems.extend(rendered.extraction_refused());
    }
    Ok(Outcome::new(
        problems,
        format!("in the controller config {}", ctx.config.config_map),
    ))
}

fn action(outcome: &Outcome) -> Action {
    if outcome.is_ready() {
        Action::requeue(Duration::from_secs(300))
    } else {
        Action::requeue(Duration::from_secs(60))
    }
}
