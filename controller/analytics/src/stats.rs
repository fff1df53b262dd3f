//! The stats API on the admin listener: committed SQL values only, `no-store`, unknown
//! and degraded days explicit, range PV summed, range UV from merged HLLs (never a sum
//! of daily UVs). Errors become `application/problem+json` here and only here.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use jiff::civil::Date;
use serde::{Deserialize, Serialize};

use crate::day::{Clock, Days, minus_days};
use crate::model::{Kind, Subject, valid_name};
use crate::pg::{DailyRow, DayCoverage, Meta, PgStore, TotalRow};
use crate::ws::WorkingSet;

const DASHBOARD: &str = include_str!("dashboard.html");

/// What the stats routes read.
#[derive(Debug, Clone)]
pub struct StatsState {
    /// A reader connection of its own (never the worker's).
    pub pg: Arc<PgStore>,
    /// Used only as a calculator for merged HLL counts of committed SQL bytes.
    pub ws: Option<WorkingSet>,
    /// Day calendar.
    pub days: Days,
    /// Clock.
    pub clock: Arc<dyn Clock>,
}

/// The stats API and the dashboard page; merge into the admin router.
pub fn router(state: StatsState) -> Router {
    Router::new()
        .route("/api/v1/stats/summary", get(summary))
        .route("/api/v1/stats/{kind}/{name}", get(subject))
        .route("/stats", get(dashboard))
        .with_state(Arc::new(state))
}

/// The only error type of the routes.
#[derive(Debug)]
enum ApiError {
    BadDays,
    BadName,
    NotFound,
    Unavailable,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, title) = match self {
            Self::BadDays => (StatusCode::BAD_REQUEST, "days must be 7, 30 or 90"),
            Self::BadName => (StatusCode::BAD_REQUEST, "invalid name"),
            Self::NotFound => (StatusCode::NOT_FOUND, "no statistics for this subject"),
            Self::Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "statistics store unavailable",
            ),
        };
        let body =
            serde_json::json!({"type": "about:blank", "title": title, "status": status.as_u16()});
        let mut r = (status, body.to_string()).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        no_store(r)
    }
}

fn no_store(mut r: Response) -> Response {
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DaysQuery {
    days: Option<String>,
}

fn parse_days(q: &Result<Query<DaysQuery>, QueryRejection>) -> Result<i64, ApiError> {
    let Ok(q) = q else {
        return Err(ApiError::BadDays);
    };
    match q.days.as_deref() {
        None => Ok(7),
        Some("7") => Ok(7),
        Some("30") => Ok(30),
        Some("90") => Ok(90),
        Some(_) => Err(ApiError::BadDays),
    }
}

/// Cumulative values.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Total {
    requests: i64,
    proxies: i64,
    /// Gateway bytes from the clients (Routings and clients; 0 for Upstreams).
    bytes_up: i64,
    /// Gateway bytes to the clients.
    bytes_down: i64,
    unique_identities: i64,
    since: String,
}

/// One day of one subject.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct DayPoint {
    date: String,
    /// `ok`, `degraded` or `unknown` (never collected / not yet committed).
    status: &'static str,
    requests: Option<i64>,
    proxies: Option<i64>,
    bytes_up: Option<i64>,
    bytes_down: Option<i64>,
    unique_identities: Option<i64>,
    reasons: Vec<String>,
}

/// Sums over the range.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Range {
    requests: i64,
    proxies: i64,
    bytes_up: i64,
    bytes_down: i64,
    /// Estimate of the union of the known days' HLLs; null when it cannot be computed.
    unique_identities: Option<i64>,
    known_days: usize,
    degraded_days: usize,
    unknown_days: usize,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SubjectStats {
    #[serde(flatten)]
    window: Window,
    kind: &'static str,
    name: String,
    total: Option<Total>,
    today: DayPoint,
    range: Range,
    series: Vec<DayPoint>,
}

/// What every stats answer says first: the window of days it covers (in the
/// configured zone) and the last committed snapshot it reads.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Window {
    enabled: bool,
    time_zone: String,
    days: i64,
    from: String,
    to: String,
    committed_seq: Option<i64>,
    committed_at: Option<String>,
}

impl Window {
    fn new(state: &StatsState, days: i64, (from, to): (Date, Date), meta: Option<&Meta>) -> Self {
        Self {
            enabled: true,
            time_zone: state.days.zone_name().to_owned(),
            days,
            from: from.to_string(),
            to: to.to_string(),
            committed_seq: meta.map(|m| m.last_seq),
            committed_at: meta.and_then(|m| committed_at(m.last_flush_ms)),
        }
    }
}

/// A failed read: logged, and answered as unavailable.
fn unavailable(e: crate::AnalyticsError) -> ApiError {
    tracing::warn!(error = %e, "stats read failed");
    ApiError::Unavailable
}

fn total_of(t: &TotalRow) -> Total {
    Total {
        requests: t.requests,
        proxies: t.proxies,
        bytes_up: t.bytes_up,
        bytes_down: t.bytes_down,
        unique_identities: t.uv,
        since: t.first_day.to_string(),
    }
}

fn point(day: Date, row: Option<&DailyRow>, cov: Option<&DayCoverage>) -> DayPoint {
    let reasons = cov.map(|c| c.reasons.clone()).unwrap_or_default();
    let degraded = row.is_some_and(|r| r.degraded) || cov.is_some_and(|c| c.degraded);
    match (row, cov) {
        (None, None) => DayPoint {
            date: day.to_string(),
            status: "unknown",
            requests: None,
            proxies: None,
            bytes_up: None,
            bytes_down: None,
            unique_identities: None,
            reasons,
        },
        (r, _) => DayPoint {
            date: day.to_string(),
            status: if degraded { "degraded" } else { "ok" },
            requests: Some(r.map_or(0, |r| r.requests)),
            proxies: Some(r.map_or(0, |r| r.proxies)),
            bytes_up: Some(r.map_or(0, |r| r.bytes_up)),
            bytes_down: Some(r.map_or(0, |r| r.bytes_down)),
            unique_identities: Some(r.map_or(0, |r| r.uv)),
            reasons,
        },
    }
}

fn window(state: &StatsState, n: i64) -> (Date, Date) {
    let today = state.days.day_of(state.clock.now());
    (minus_days(today, n - 1), today)
}

fn each_day(from: Date, to: Date) -> Vec<Date> {
    let mut out = Vec::new();
    let mut d = from;
    while d <= to && out.len() < 400 {
        out.push(d);
        match d.tomorrow() {
            Ok(n) => d = n,
            Err(_) => break,
        }
    }
    out
}

fn committed_at(ms: i64) -> Option<String> {
    jiff::Timestamp::from_millisecond(ms)
        .ok()
        .map(|t| t.to_string())
}

async fn subject(
    State(state): State<Arc<StatsState>>,
    Path((kind, name)): Path<(String, String)>,
    q: Result<Query<DaysQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let n = parse_days(&q)?;
    let kind = Kind::parse(&kind).ok_or(ApiError::NotFound)?;
    if !valid_name(&name) {
        return Err(ApiError::BadName);
    }
    let s = Subject { kind, name };
    let (from, to) = window(&state, n);
    let total = state.pg.total(&s).await.map_err(unavailable)?;
    let Some(total) = total else {
        return Err(ApiError::NotFound);
    };
    let meta = state.pg.meta().await.map_err(unavailable)?;
    let rows = state.pg.days(&s, from, to).await.map_err(unavailable)?;
    let cov = state.pg.coverage(from, to).await.map_err(unavailable)?;
    let rows: HashMap<Date, &DailyRow> = rows.iter().map(|r| (r.day, r)).collect();
    let cov: HashMap<Date, &DayCoverage> = cov.iter().map(|c| (c.day, c)).collect();
    let series: Vec<DayPoint> = each_day(from, to)
        .into_iter()
        .map(|d| point(d, rows.get(&d).copied(), cov.get(&d).copied()))
        .collect();
    let hlls: Vec<Vec<u8>> = rows
        .values()
        .filter(|r| !r.hll.is_empty())
        .map(|r| r.hll.clone())
        .collect();
    let uv = match &state.ws {
        Some(ws) => match ws.union_count(&hlls).await {
            Ok(n) => Some(n),
            Err(e) => {
                tracing::debug!(error = %e, "range uv unavailable");
                None
            }
        },
        None => None,
    };
    let range = Range {
        requests: series.iter().filter_map(|p| p.requests).sum(),
        proxies: series.iter().filter_map(|p| p.proxies).sum(),
        bytes_up: series.iter().filter_map(|p| p.bytes_up).sum(),
        bytes_down: series.iter().filter_map(|p| p.bytes_down).sum(),
        unique_identities: uv,
        known_days: series.iter().filter(|p| p.status != "unknown").count(),
        degraded_days: series.iter().filter(|p| p.status == "degraded").count(),
        unknown_days: series.iter().filter(|p| p.status == "unknown").count(),
    };
    let today = point(to, rows.get(&to).copied(), cov.get(&to).copied());
    let body = SubjectStats {
        window: Window::new(&state, n, (from, to), meta.as_ref()),
        kind: s.kind.as_str(),
        name: s.name,
        total: Some(total_of(&total)),
        today,
        range,
        series,
    };
    Ok(no_store(Json(body).into_response()))
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SummaryEntry {
    kind: &'static str,
    name: String,
    total: Total,
    today: DayPoint,
    range_requests: i64,
    range_proxies: i64,
    range_bytes_up: i64,
    range_bytes_down: i64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Summary {
    #[serde(flatten)]
    window: Window,
    subjects: Vec<SummaryEntry>,
}

async fn summary(
    State(state): State<Arc<StatsState>>,
    q: Result<Query<DaysQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let n = parse_days(&q)?;
    let (from, to) = window(&state, n);
    let meta = state.pg.meta().await.map_err(unavailable)?;
    let totals = state.pg.totals().await.map_err(unavailable)?;
    let rows = state.pg.days_since(from).await.map_err(unavailable)?;
    let cov = state.pg.coverage(to, to).await.map_err(unavailable)?;
    let mut by: BTreeMap<(Kind, String), Vec<&DailyRow>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.day <= to) {
        by.entry((r.subject.kind, r.subject.name.clone()))
            .or_default()
            .push(r);
    }
    let subjects = totals
        .iter()
        .map(|t| {
            let rs = by
                .get(&(t.subject.kind, t.subject.name.clone()))
                .cloned()
                .unwrap_or_default();
            SummaryEntry {
                kind: t.subject.kind.as_str(),
                name: t.subject.name.clone(),
                total: total_of(t),
                today: point(to, rs.iter().find(|r| r.day == to).copied(), cov.first()),
                range_requests: rs.iter().map(|r| r.requests).sum(),
                range_proxies: rs.iter().map(|r| r.proxies).sum(),
                range_bytes_up: rs.iter().map(|r| r.bytes_up).sum(),
                range_bytes_down: rs.iter().map(|r| r.bytes_down).sum(),
            }
        })
        .collect();
    Ok(no_store(
        Json(Summary {
            window: Window::new(&state, n, (from, to), meta.as_ref()),
            subjects,
        })
        .into_response(),
    ))
}

async fn dashboard() -> Response {
    no_store(Html(DASHBOARD).into_response())
}
