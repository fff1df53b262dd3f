//! The Redis working set under `<prefix>:analytics:v1:`: daily and cumulative counter
//! hashes, daily and cumulative HyperLogLogs, the snapshot sequence and the dirty
//! markers, and the degraded-day notes of replicas that do not flush. Plain commands and
//! MULTI pipelines, and one script: the compare-and-delete of a dirty marker after a
//! commit. Every controller replica applies its events here; only the leader's worker
//! flushes (reads, commits, clears markers, rebuilds). A dirty marker holds the unique
//! token of the last batch that touched it, so a flush clears only the markers no
//! batch touched since it read them (an increment applied by another replica between
//! the read and the clear keeps its marker and reaches the next flush).
//!
//! Longer than 600 lines on purpose: every key and command of the working set is in this
//! one file, so the key layout and the commands that depend on it are read and changed
//! together.

use std::collections::BTreeSet;

use jiff::Timestamp;
use jiff::civil::Date;
use redis::{RedisError, Value};
use sha2::{Digest, Sha256};

use crate::day::Days;
use crate::error::AnalyticsError;
use crate::link::RedisConn;
use crate::model::{Event, Kind, Subject};
use crate::pg::{DailyRow, TotalRow};

/// Keys one SCAN/UNLINK round handles.
const SCAN_BATCH: usize = 500;
/// Dirty entries read per pipeline.
pub const READ_BATCH: usize = 200;

/// Clears each dirty marker whose token is still the one read before the commit and
/// sets the expiry of its daily keys. KEYS: the dirty hash, then per marker its daily
/// hash and daily HLL; ARGV: per marker its field, token and TTL in seconds.
const CLEAR_MARKERS: &str = r"
local n = 0
for i = 0, (#ARGV / 3) - 1 do
  local field, token, ttl = ARGV[i * 3 + 1], ARGV[i * 3 + 2], ARGV[i * 3 + 3]
  if redis.call('HGET', KEYS[1], field) == token then
    redis.call('HDEL', KEYS[1], field)
    redis.call('EXPIRE', KEYS[i * 2 + 2], ttl)
    redis.call('EXPIRE', KEYS[i * 2 + 3], ttl)
    n = n + 1
  end
end
return n
";

/// One dirty (subject, day) as read, with the token of the batch that last touched it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirty {
    /// The subject.
    pub subject: Subject,
    /// The day.
    pub day: Date,
    /// The marker's token when it was read.
    pub token: String,
}

/// The working set of one deployment.
#[derive(Clone)]
pub struct WorkingSet {
    conn: RedisConn,
    prefix: String,
    id_key: Vec<u8>,
}

impl std::fmt::Debug for WorkingSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkingSet")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// One increment of one subject's day.
#[derive(Debug)]
struct Incr {
    subject: Subject,
    day: Date,
    requests: i64,
    proxies: i64,
    /// Gateway bytes (up, down).
    bytes: (i64, i64),
    /// The identity digest joining the HLLs (`None`: bytes only, no identity).
    member: Option<String>,
}

/// Bytes as a Redis increment (Redis integers are signed 64-bit).
fn incr_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Classifies a Redis error: transport problems are "unavailable", anything the server
/// refused (WRONGTYPE, INVALIDOBJ, …) means the state is not what we wrote.
pub fn classify(e: RedisError) -> AnalyticsError {
    if e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.code(),
            Some("READONLY" | "LOADING" | "MASTERDOWN" | "TRYAGAIN")
        )
    {
        AnalyticsError::Redis(e)
    } else {
        AnalyticsError::Corrupt(format!("redis state: {}", e.kind_str()))
    }
}

trait KindStr {
    fn kind_str(&self) -> String;
}
impl KindStr for RedisError {
    fn kind_str(&self) -> String {
        self.code().unwrap_or("error").to_owned()
    }
}

/// A dirty marker's field: `<subject>|<day>` ([`parse_member`] reads it back).
fn member(s: &Subject, day: Date) -> String {
    format!("{s}|{day}")
}

fn parse_member(m: &str) -> Option<(Subject, Date)> {
    let mut it = m.split('|');
    let kind = Kind::parse(it.next()?)?;
    let name = it.next()?.to_owned();
    let day = it.next()?.parse().ok()?;
    it.next().is_none().then_some((Subject { kind, name }, day))
}

/// A degraded-day note's field: `<day>|<reason>`.
fn note(day: Date, why: &str) -> String {
    format!("{day}|{why}")
}

/// A degraded-day note as stored back into its day and reason (`None`: not a note).
pub(crate) fn parse_note(n: &str) -> Option<(Date, &str)> {
    let (day, why) = n.split_once('|')?;
    Some((day.parse().ok()?, why))
}

fn int_of(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

fn hash_of(v: &Value) -> Option<Vec<(String, Value)>> {
    match v {
        Value::Map(m) => Some(
            m.iter()
                .filter_map(|(k, v)| match k {
                    Value::BulkString(k) => {
                        Some((String::from_utf8_lossy(k).into_owned(), v.clone()))
                    }
                    _ => None,
                })
                .collect(),
        ),
        Value::Array(a) => Some(
            a.chunks(2)
                .filter_map(|c| match c {
                    [Value::BulkString(k), v] => {
                        Some((String::from_utf8_lossy(k).into_owned(), v.clone()))
                    }
                    _ => None,
                })
                .collect(),
        ),
        _ => None,
    }
}

fn field(h: &[(String, Value)], name: &str) -> Option<i64> {
    h.iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| int_of(v))
}

fn corrupt(what: &str) -> AnalyticsError {
    AnalyticsError::Corrupt(what.to_owned())
}

/// Queues the reads of one counter hash and its HLL: HGETALL, GET, PFCOUNT.
fn queue_read(pipe: &mut redis::Pipeline, hash: String, hll: String) {
    pipe.hgetall(hash).get(&hll).pfcount(hll);
}

/// One counter hash and its HLL as [`queue_read`]'s three replies returned them.
struct Counters {
    hash: Vec<(String, Value)>,
    requests: i64,
    proxies: i64,
    bytes_up: i64,
    bytes_down: i64,
    uv: i64,
    hll: Vec<u8>,
}

impl Counters {
    /// Parses the replies; `what` (`total`, `daily`) names a missing or wrong-typed
    /// part in the `Corrupt` error.
    fn of(replies: &[Value], what: &str) -> Result<Self, AnalyticsError> {
        let [h, hll, uv] = replies else {
            return Err(corrupt("short reply"));
        };
        let hash = hash_of(h).ok_or_else(|| corrupt(&format!("{what} not a hash")))?;
        Ok(Self {
            requests: field(&hash, "req").ok_or_else(|| corrupt(&format!("{what} missing")))?,
            proxies: field(&hash, "prx").unwrap_or(0),
            bytes_up: field(&hash, "bup").unwrap_or(0),
            bytes_down: field(&hash, "bdn").unwrap_or(0),
            uv: int_of(uv).ok_or_else(|| corrupt(&format!("{what} hll")))?,
            hll: match hll {
                Value::BulkString(b) => b.clone(),
                _ => return Err(corrupt(&format!("{what} hll missing"))),
            },
            hash,
        })
    }
}

impl WorkingSet {
    /// A working set under `<key_prefix>:analytics:v1:`; `id_key` is mixed into identity
    /// digests so raw identities never reach Redis.
    pub fn new(conn: impl Into<RedisConn>, key_prefix: &str, id_key: Vec<u8>) -> Self {
        Self {
            conn: conn.into(),
            prefix: format!("{key_prefix}:analytics:v1:"),
            id_key,
        }
    }

    fn k_daily(&self, s: &Subject, day: Date) -> String {
        format!("{}d:{s}|{day}", self.prefix)
    }
    fn k_daily_hll(&self, s: &Subject, day: Date) -> String {
        format!("{}dh:{s}|{day}", self.prefix)
    }
    fn k_total(&self, s: &Subject) -> String {
        format!("{}t:{s}", self.prefix)
    }
    fn k_total_hll(&self, s: &Subject) -> String {
        format!("{}th:{s}", self.prefix)
    }
    fn k_seq(&self) -> String {
        format!("{}seq", self.prefix)
    }
    fn k_dirty(&self) -> String {
        format!("{}dirty", self.prefix)
    }
    fn k_degraded(&self) -> String {
        format!("{}degraded", self.prefix)
    }

    fn digest(&self, s: &Subject, identity: &str) -> String {
        let mut h = Sha256::new();
        h.update(&self.id_key);
        h.update(s.to_string().as_bytes());
        h.update([0]);
        h.update(identity.as_bytes());
        hex::encode(&h.finalize()[..16])
    }

    fn incrs(&self, events: &[Event], days: &Days) -> Vec<Incr> {
        let mut out = Vec::new();
        for e in events {
            let day = days.day_of(e.at());
            // `who` is counted once per subject and day (its digest joins the HLL).
            let mut count = |kind: Kind, name: &str, who: &str, requests: i64, proxies: i64| {
                let subject = Subject {
                    kind,
                    name: name.to_owned(),
                };
                out.push(Incr {
                    member: Some(self.digest(&subject, who)),
                    subject,
                    day,
                    requests,
                    proxies,
                    bytes: (0, 0),
                });
            };
            match e {
                Event::Extraction {
                    client,
                    identity,
                    per_upstream,
                    ..
                } => {
                    let total: i64 = per_upstream.iter().map(|(_, n)| i64::from(*n)).sum();
                    count(Kind::Clients, client, identity, 1, total);
                    for (u, n) in per_upstream {
                        count(Kind::Upstreams, u, client, 1, i64::from(*n));
                    }
                }
                Event::GatewayRequests {
                    routing,
                    identity,
                    requests,
                    ..
                } => count(Kind::Routings, routing, identity, i64::from(*requests), 0),
                Event::GatewayBytes {
                    kind,
                    name,
                    bytes_up,
                    bytes_down,
                    ..
                } => out.push(Incr {
                    subject: Subject {
                        kind: *kind,
                        name: name.clone(),
                    },
                    day,
                    requests: 0,
                    proxies: 0,
                    bytes: (incr_of(*bytes_up), incr_of(*bytes_down)),
                    member: None,
                }),
            }
        }
        out
    }

    /// Applies `events` in one MULTI pipeline; returns the days they touched.
    pub async fn apply(
        &self,
        events: &[Event],
        days: &Days,
    ) -> Result<BTreeSet<Date>, AnalyticsError> {
        let incrs = self.incrs(events, days);
        // Unique per batch: a flush that read an older token leaves this marker alone.
        let token = uuid::Uuid::new_v4().simple().to_string();
        let mut pipe = redis::pipe();
        pipe.atomic();
        let mut touched = BTreeSet::new();
        for i in &incrs {
            touched.insert(i.day);
            let (d, t) = (self.k_daily(&i.subject, i.day), self.k_total(&i.subject));
            pipe.hincr(&d, "req", i.requests).ignore();
            pipe.hincr(&d, "prx", i.proxies).ignore();
            // Bytes fields only when there are bytes (a hash without them reads zero).
            if i.bytes != (0, 0) {
                pipe.hincr(&d, "bup", i.bytes.0).ignore();
                pipe.hincr(&d, "bdn", i.bytes.1).ignore();
                pipe.hincr(&t, "bup", i.bytes.0).ignore();
                pipe.hincr(&t, "bdn", i.bytes.1).ignore();
            }
            pipe.persist(&d).ignore();
            // PFADD without an element creates an empty HLL (read back as one).
            let (dh, th) = (
                self.k_daily_hll(&i.subject, i.day),
                self.k_total_hll(&i.subject),
            );
            pipe.cmd("PFADD").arg(&dh).arg(i.member.as_slice()).ignore();
            pipe.persist(&dh).ignore();
            pipe.hincr(&t, "req", i.requests).ignore();
            pipe.hincr(&t, "prx", i.proxies).ignore();
            pipe.hset_nx(&t, "first", i.day.to_string()).ignore();
            pipe.cmd("PFADD").arg(&th).arg(i.member.as_slice()).ignore();
            pipe.hset(self.k_dirty(), member(&i.subject, i.day), token.as_str())
                .ignore();
        }
        let mut conn = self.conn.clone();
        pipe.query_async::<()>(&mut conn).await.map_err(classify)?;
        Ok(touched)
    }

    /// Runs one command on a clone of the connection; a failure is classified.
    async fn run<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, AnalyticsError> {
        let mut conn = self.conn.clone();
        cmd.query_async(&mut conn).await.map_err(classify)
    }

    /// The stored sequence: `None` when missing; `Corrupt` when wrong-typed.
    pub async fn seq(&self) -> Result<Option<i64>, AnalyticsError> {
        let v: Value = self.run(redis::cmd("GET").arg(self.k_seq())).await?;
        match v {
            Value::Nil => Ok(None),
            other => int_of(&other)
                .map(Some)
                .ok_or_else(|| corrupt("sequence not an integer")),
        }
    }

    /// The next snapshot sequence.
    pub async fn next_seq(&self) -> Result<i64, AnalyticsError> {
        self.run(redis::cmd("INCR").arg(self.k_seq())).await
    }

    /// Every dirty (subject, day), with the marker's token as read.
    pub async fn dirty(&self) -> Result<Vec<Dirty>, AnalyticsError> {
        let marks: Vec<(String, String)> =
            self.run(redis::cmd("HGETALL").arg(self.k_dirty())).await?;
        Ok(marks
            .into_iter()
            .filter_map(|(k, token)| {
                let (subject, day) = parse_member(&k)?;
                Some(Dirty {
                    subject,
                    day,
                    token,
                })
            })
            .collect())
    }

    /// Notes degraded days (`day|reason`) for the flushing replica to commit; a replica
    /// that does not flush hands its notes over this way.
    pub async fn note_degraded(&self, notes: &[(Date, &str)]) -> Result<(), AnalyticsError> {
        if notes.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (d, why) in notes {
            pipe.hset(self.k_degraded(), note(*d, why), 1).ignore();
        }
        let mut conn = self.conn.clone();
        pipe.query_async::<()>(&mut conn).await.map_err(classify)
    }

    /// The degraded-day notes handed over by other replicas, as stored (`day|reason`).
    pub async fn degraded_notes(&self) -> Result<Vec<String>, AnalyticsError> {
        self.run(redis::cmd("HKEYS").arg(self.k_degraded())).await
    }

    /// Removes notes that a commit carried.
    pub async fn clear_degraded(&self, notes: &[String]) -> Result<(), AnalyticsError> {
        if notes.is_empty() {
            return Ok(());
        }
        self.run(redis::cmd("HDEL").arg(self.k_degraded()).arg(notes))
            .await
    }

    /// Reads the dirty entries' daily and cumulative values with their HLL bytes.
    /// A missing or wrong-typed key is `Corrupt` (the caller rebuilds from SQL).
    pub async fn read(
        &self,
        items: &[Dirty],
    ) -> Result<(Vec<TotalRow>, Vec<DailyRow>), AnalyticsError> {
        let mut totals = Vec::new();
        let mut days = Vec::new();
        let subjects: BTreeSet<&Subject> = items.iter().map(|m| &m.subject).collect();
        let mut conn = self.conn.clone();
        for chunk in subjects.into_iter().collect::<Vec<_>>().chunks(READ_BATCH) {
            let mut pipe = redis::pipe();
            for s in chunk {
                queue_read(&mut pipe, self.k_total(s), self.k_total_hll(s));
            }
            let vals: Vec<Value> = pipe.query_async(&mut conn).await.map_err(classify)?;
            for (s, v) in chunk.iter().zip(vals.chunks(3)) {
                let c = Counters::of(v, "total")?;
                let first = c
                    .hash
                    .iter()
                    .find(|(k, _)| k == "first")
                    .and_then(|(_, v)| match v {
                        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse::<Date>().ok(),
                        _ => None,
                    })
                    .ok_or_else(|| corrupt("total missing"))?;
                totals.push(TotalRow {
                    subject: (*s).clone(),
                    requests: c.requests,
                    proxies: c.proxies,
                    bytes_up: c.bytes_up,
                    bytes_down: c.bytes_down,
                    uv: c.uv,
                    hll: c.hll,
                    first_day: first,
                });
            }
        }
        for chunk in items.chunks(READ_BATCH) {
            let mut pipe = redis::pipe();
            for Dirty {
                subject: s, day: d, ..
            } in chunk
            {
                queue_read(&mut pipe, self.k_daily(s, *d), self.k_daily_hll(s, *d));
            }
            let vals: Vec<Value> = pipe.query_async(&mut conn).await.map_err(classify)?;
            for (
                Dirty {
                    subject: s, day: d, ..
                },
                v,
            ) in chunk.iter().zip(vals.chunks(3))
            {
                let c = Counters::of(v, "daily")?;
                days.push(DailyRow {
                    subject: s.clone(),
                    day: *d,
                    requests: c.requests,
                    proxies: c.proxies,
                    bytes_up: c.bytes_up,
                    bytes_down: c.bytes_down,
                    uv: c.uv,
                    hll: c.hll,
                    degraded: false,
                });
            }
        }
        Ok((totals, days))
    }

    /// After a commit: clears the committed dirty markers that still hold the token
    /// read before the commit, and lets those persisted daily keys expire `hot_days`
    /// after their day ends. A marker touched since (by any replica) stays. Returns how
    /// many markers were cleared.
    pub async fn committed(
        &self,
        items: &[Dirty],
        days: &Days,
        hot_days: u16,
        now: Timestamp,
    ) -> Result<u64, AnalyticsError> {
        let script = redis::Script::new(CLEAR_MARKERS);
        let mut conn = self.conn.clone();
        let mut cleared = 0;
        for chunk in items.chunks(READ_BATCH) {
            let mut inv = script.prepare_invoke();
            inv.key(self.k_dirty());
            for m in chunk {
                let ttl = days.secs_until_end_plus(m.day, i64::from(hot_days), now);
                inv.key(self.k_daily(&m.subject, m.day))
                    .key(self.k_daily_hll(&m.subject, m.day))
                    .arg(member(&m.subject, m.day))
                    .arg(&m.token)
                    .arg(ttl);
            }
            let n: u64 = inv.invoke_async(&mut conn).await.map_err(classify)?;
            cleared += n;
        }
        Ok(cleared)
    }

    /// Removes every key of the working set (SCAN + UNLINK in batches).
    pub async fn wipe(&self) -> Result<u64, AnalyticsError> {
        let mut conn = self.conn.clone();
        let mut cursor: u64 = 0;
        let mut n = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{}*", self.prefix))
                .arg("COUNT")
                .arg(SCAN_BATCH)
                .query_async(&mut conn)
                .await
                .map_err(classify)?;
            if !keys.is_empty() {
                n += keys.len() as u64;
                let _: () = redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async(&mut conn)
                    .await
                    .map_err(classify)?;
            }
            if next == 0 {
                return Ok(n);
            }
            cursor = next;
        }
    }

    /// Restores totals and daily rows (HLL bytes included) from SQL and sets the sequence.
    pub async fn restore(
        &self,
        totals: &[TotalRow],
        daily: &[DailyRow],
        seq: i64,
    ) -> Result<(), AnalyticsError> {
        let mut conn = self.conn.clone();
        for chunk in totals.chunks(READ_BATCH) {
            let mut pipe = redis::pipe();
            pipe.atomic();
            for t in chunk {
                pipe.hset_multiple(
                    self.k_total(&t.subject),
                    &[
                        ("req", t.requests.to_string()),
                        ("prx", t.proxies.to_string()),
                        ("bup", t.bytes_up.to_string()),
                        ("bdn", t.bytes_down.to_string()),
                        ("first", t.first_day.to_string()),
                    ],
                )
                .ignore();
                pipe.set(self.k_total_hll(&t.subject), &t.hll).ignore();
            }
            pipe.query_async::<()>(&mut conn).await.map_err(classify)?;
        }
        for chunk in daily.chunks(READ_BATCH) {
            let mut pipe = redis::pipe();
            pipe.atomic();
            for d in chunk {
                pipe.hset_multiple(
                    self.k_daily(&d.subject, d.day),
                    &[
                        ("req", d.requests),
                        ("prx", d.proxies),
                        ("bup", d.bytes_up),
                        ("bdn", d.bytes_down),
                    ],
                )
                .ignore();
                pipe.set(self.k_daily_hll(&d.subject, d.day), &d.hll)
                    .ignore();
            }
            pipe.query_async::<()>(&mut conn).await.map_err(classify)?;
        }
        let _: () = self
            .run(redis::cmd("SET").arg(self.k_seq()).arg(seq))
            .await?;
        Ok(())
    }

    /// The estimate of the union of `hlls` (raw bytes from SQL), computed by Redis on
    /// short-lived scratch keys; nothing of the working set is read or changed.
    pub async fn union_count(&self, hlls: &[Vec<u8>]) -> Result<i64, AnalyticsError> {
        if hlls.is_empty() {
            return Ok(0);
        }
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let keys: Vec<String> = (0..hlls.len())
            .map(|i| format!("{}tmp:{tag}:{i}", self.prefix))
            .collect();
        let mut pipe = redis::pipe();
        for (k, b) in keys.iter().zip(hlls) {
            pipe.cmd("SET").arg(k).arg(b).arg("PX").arg(10_000).ignore();
        }
        pipe.cmd("PFCOUNT").arg(&keys);
        pipe.cmd("UNLINK").arg(&keys).ignore();
        let mut conn = self.conn.clone();
        let (n,): (i64,) = pipe.query_async(&mut conn).await.map_err(classify)?;
        Ok(n)
    }
}
