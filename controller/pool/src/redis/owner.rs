//! Worker leases: assign, renew, drain, acknowledge, read, expire.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use super::codec::{StoredAssignment, decode, lua_vec, ms};
use super::scripts::Script;
use super::{Call, RedisPool};
use crate::error::{PoolError, PoolResult};
use crate::model::{
    Assignment, Claim, DrainAck, ExpiredAssignments, LeasePage, LeaseRequest, ProxyId,
};
use crate::ports::OwnershipRepository;
use crate::validate::{check_ownership_batch, check_page_limit};

#[derive(Deserialize)]
struct AssignmentReply {
    a: Option<StoredAssignment>,
}

/// The reply of a batch: one entry per request, in input order.
#[derive(Deserialize)]
struct ManyReply {
    #[serde(deserialize_with = "lua_vec")]
    res: Vec<ItemReply>,
}

#[derive(Deserialize)]
struct ItemReply {
    a: Option<StoredAssignment>,
    err: Option<String>,
}

impl ItemReply {
    fn into_result(self) -> PoolResult<Assignment> {
        match (self.a, self.err) {
            (Some(a), None) => Ok(Assignment::from(a)),
            (None, Some(code)) => Err(super::error_code(&code)),
            _ => Err(super::codec::corrupt("assignment")),
        }
    }
}

#[derive(Deserialize)]
struct LeasesReply {
    c: String,
    #[serde(deserialize_with = "lua_vec")]
    l: Vec<StoredAssignment>,
}

#[derive(Deserialize)]
struct ExpireReply {
    #[serde(deserialize_with = "lua_vec")]
    rel: Vec<StoredAssignment>,
    more: bool,
}

/// The payload fields naming a claimed assignment (`P.id`, `P.w`, `P.e` of
/// `lua/owner.lua`); the epoch as a decimal string, as Lua numbers cannot hold every u64.
fn claim_json(claim: &Claim) -> serde_json::Value {
    json!({ "id": claim.proxy_id, "w": claim.worker_id, "e": claim.epoch.to_string() })
}

impl RedisPool {
    async fn assignment_call(
        &self,
        script: Script,
        payload: serde_json::Value,
    ) -> PoolResult<Assignment> {
        let r: AssignmentReply = decode(
            self.run(Call::new(script, self.write_keys(script), payload))
                .await?,
            "assignment",
        )?;
        r.a.map(Assignment::from)
            .ok_or_else(|| super::codec::corrupt("assignment"))
    }

    /// One batch script; `n` results expected, in input order.
    async fn many_call(
        &self,
        script: Script,
        n: usize,
        payload: serde_json::Value,
    ) -> PoolResult<Vec<PoolResult<Assignment>>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let r: ManyReply = decode(
            self.run(Call::new(script, self.write_keys(script), payload))
                .await?,
            "assignments",
        )?;
        if r.res.len() != n {
            return Err(super::codec::corrupt("assignments"));
        }
        Ok(r.res.into_iter().map(ItemReply::into_result).collect())
    }
}

/// The one result of a batch of one.
fn only(results: Vec<PoolResult<Assignment>>) -> PoolResult<Assignment> {
    results
        .into_iter()
        .next()
        .unwrap_or_else(|| Err(super::codec::corrupt("assignments")))
}

#[async_trait]
impl OwnershipRepository for RedisPool {
    async fn assign(&self, request: &LeaseRequest) -> PoolResult<Assignment> {
        // A batch of one: one script judges an assignment, alone or in a batch.
        only(self.assign_many(std::slice::from_ref(request)).await?)
    }

    async fn renew(&self, claim: &Claim, lease: Duration) -> PoolResult<Assignment> {
        only(self.renew_many(std::slice::from_ref(claim), lease).await?)
    }

    async fn assign_many(
        &self,
        requests: &[LeaseRequest],
    ) -> PoolResult<Vec<PoolResult<Assignment>>> {
        check_ownership_batch(requests.len())?;
        let q: Vec<serde_json::Value> = requests
            .iter()
            .map(|r| json!({ "id": r.proxy_id, "w": r.worker_id, "l": ms(r.lease) }))
            .collect();
        self.many_call(Script::AssignMany, requests.len(), json!({ "q": q }))
            .await
    }

    async fn renew_many(
        &self,
        claims: &[Claim],
        lease: Duration,
    ) -> PoolResult<Vec<PoolResult<Assignment>>> {
        check_ownership_batch(claims.len())?;
        let c: Vec<serde_json::Value> = claims.iter().map(claim_json).collect();
        self.many_call(
            Script::RenewMany,
            claims.len(),
            json!({ "c": c, "lease": ms(lease) }),
        )
        .await
    }

    async fn begin_drain(&self, claim: &Claim) -> PoolResult<Assignment> {
        self.assignment_call(Script::Drain, claim_json(claim)).await
    }

    async fn acknowledge_drain(&self, ack: &DrainAck) -> PoolResult<()> {
        let mut payload = claim_json(&ack.claim);
        payload["act"] = ack.active.into();
        payload["res"] = ack.reserved.into();
        self.run(Call::new(
            Script::AckDrain,
            self.write_keys(Script::AckDrain),
            payload,
        ))
        .await?;
        Ok(())
    }

    async fn get(&self, proxy: &ProxyId) -> PoolResult<Option<Assignment>> {
        let r: AssignmentReply = self
            .run_plain(Script::OwnerGet, json!({ "id": proxy }), "assignment")
            .await?;
        Ok(r.a.map(Assignment::from))
    }

    async fn expire(&self, limit: u32) -> PoolResult<ExpiredAssignments> {
        let mut out = ExpiredAssignments::default();
        self.sweep(Script::Expire, limit, "expire reply", |r: ExpireReply| {
            out.released.extend(r.rel.into_iter().map(Assignment::from));
            out.more = r.more;
            r.more
        })
        .await?;
        Ok(out)
    }

    async fn leases(&self, cursor: Option<&str>, limit: u32) -> PoolResult<LeasePage> {
        check_page_limit(limit)?;
        // The cursor is HSCAN's over the owners hash ("0": start and end).
        let c = match cursor {
            None => "0".to_owned(),
            Some(c) if !c.is_empty() && c.len() <= 20 && c.bytes().all(|b| b.is_ascii_digit()) => {
                c.to_owned()
            }
            Some(_) => return Err(PoolError::invalid("cursor", "not a cursor of this pool")),
        };
        let payload = json!({ "c": c, "lim": limit });
        let r: LeasesReply = self.run_plain(Script::Leases, payload, "leases").await?;
        Ok(LeasePage {
            leases: r.l.into_iter().map(Assignment::from).collect(),
            next: (r.c != "0").then_some(r.c),
        })
    }
}
