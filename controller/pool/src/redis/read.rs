//! Catalog reads: records by ID, assignable proxies of an upstream.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use super::codec::{StoredAssignment, StoredRecord, decode, lua_vec, u64_str};
use super::keys::CallKeys;
use super::scripts::Script;
use super::{Call, RedisPool};
use crate::error::PoolResult;
use crate::model::{Assignment, ChangePage, ProxyId, ProxyRecord, UpstreamId};
use crate::ports::ProxyCatalog;
use crate::validate::{check_id_batch, check_page_limit, check_sweep_limit};

#[derive(Deserialize)]
struct RecordsReply {
    now: i64,
    #[serde(deserialize_with = "lua_vec")]
    recs: Vec<(Option<StoredRecord>, Option<StoredAssignment>)>,
}

#[derive(Deserialize)]
struct ChangesReply {
    #[serde(deserialize_with = "lua_vec")]
    ids: Vec<ProxyId>,
    #[serde(deserialize_with = "u64_str")]
    next: u64,
    lost: bool,
    more: bool,
}

#[async_trait]
impl ProxyCatalog for RedisPool {
    async fn records(&self, ids: &[ProxyId]) -> PoolResult<Vec<Option<ProxyRecord>>> {
        check_id_batch(ids)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let r: RecordsReply = self
            .run_plain(Script::Records, json!({ "ids": ids }), "records")
            .await?;
        r.recs
            .into_iter()
            .map(|(rec, owner)| {
                rec.map(|rec| rec.into_record(owner.map(Assignment::from), r.now))
                    .transpose()
            })
            .collect()
    }

    async fn assignable(&self, upstream: &UpstreamId, limit: u32) -> PoolResult<Vec<ProxyId>> {
        check_sweep_limit(limit)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let r = self
            .run_combos(|book| {
                let mut ck = CallKeys::new(None, None);
                let mut payload = json!({ "up": upstream, "lim": limit });
                let combos = book.combos(|c| c.upstream == upstream.as_str());
                ck.pass_combos(book, combos, &mut payload);
                Call::new(Script::Assignable, ck, payload)
            })
            .await?;
        decode(r, "assignable")
    }

    async fn changes(&self, since: Option<u64>, limit: u32) -> PoolResult<ChangePage> {
        check_page_limit(limit)?;
        let c = since.map(|s| s.to_string()).unwrap_or_default();
        let r: ChangesReply = self
            .run_plain(Script::Changes, json!({ "c": c, "lim": limit }), "changes")
            .await?;
        Ok(ChangePage {
            ids: r.ids,
            next: r.next,
            lost: r.lost,
            more: r.more,
        })
    }
}
