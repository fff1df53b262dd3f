//! The stats API and the dashboard on committed PostgreSQL data: gaps, degraded days,
//! merged range UV, `no-store`, problem+json; the page in headless Chromium.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http_body_util::BodyExt;
use proxy_pool_analytics::testkit::summary_subjects;
use proxy_pool_analytics::{PgStore, StatsState, WorkingSet, router};
use support::Rig;
use tower::ServiceExt;

/// The stats API's state on `rig`'s PostgreSQL, working set and clock.
fn stats_state(rig: &Rig) -> StatsState {
    StatsState {
        pg: Arc::new(PgStore::new(rig.pg.config())),
        ws: Some(WorkingSet::new(rig.conn.clone(), "test", Vec::new())),
        days: rig.settings.days.clone(),
        clock: Arc::new(rig.clock.clone()),
    }
}

/// Route `route-1`: 100 requests by 50 identities on 05-10, nothing known on 05-11
/// (collector down all day), 40 requests by 40 identities (20 seen before) on 05-12.
async fn seeded() -> (Rig, StatsState) {
    let mut rig = Rig::started("2026-05-10T08:00:00Z", "UTC").await;
    for i in 0..100 {
        rig.collector
            .gateway_requests("route-1", &format!("id{}", i % 50), 1);
    }
    rig.collector
        .extraction("client-a", "k1", &[("vendor-x", 3)]);
    rig.drain_and_flush().await;
    rig.clock.advance_secs(2 * 86_400);
    for i in 30..70 {
        rig.collector
            .gateway_requests("route-1", &format!("id{i}"), 1);
    }
    rig.drain_and_flush().await;
    let state = stats_state(&rig);
    (rig, state)
}

async fn get(state: &StatsState, uri: &str) -> (u16, String, String, serde_json::Value) {
    let r = router(state.clone())
        .oneshot(http::Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = r.status().as_u16();
    let cc = r
        .headers()
        .get("cache-control")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = r.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        cc,
        ct,
        serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
    )
}

#[tokio::test]
async fn subject_stats_show_gaps_degraded_days_and_merged_uv() {
    let (_rig, state) = seeded().await;
    let (status, cc, _, v) = get(&state, "/api/v1/stats/routings/route-1?days=7").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(cc, "no-store");
    let series = v["series"].as_array().unwrap();
    assert_eq!(series.len(), 7);
    let by = |d: &str| series.iter().find(|p| p["date"] == d).unwrap().clone();
    assert_eq!(by("2026-05-10")["requests"], 100);
    assert_eq!(
        by("2026-05-10")["status"],
        "degraded",
        "first day of a history is partial"
    );
    assert_eq!(by("2026-05-11")["status"], "unknown");
    assert!(
        by("2026-05-11")["requests"].is_null(),
        "an unknown day is not a zero"
    );
    assert_eq!(by("2026-05-12")["status"], "ok");
    assert_eq!(by("2026-05-12")["requests"], 40);
    assert_eq!(v["range"]["requests"], 140);
    assert_eq!(v["range"]["unknownDays"], 5);
    assert_eq!(v["range"]["degradedDays"], 1);
    let uv = v["range"]["uniqueIdentities"].as_i64().unwrap();
    assert!(
        (68..=72).contains(&uv),
        "merged HLL ≈ 70 distinct, not 50 + 40: {uv}"
    );
    assert_eq!(v["total"]["requests"], 140);
    assert_eq!(v["today"]["date"], "2026-05-12");
    for days in ["30", "90"] {
        let (s, _, _, v) = get(
            &state,
            &format!("/api/v1/stats/routings/route-1?days={days}"),
        )
        .await;
        assert_eq!(s, 200);
        assert_eq!(
            v["series"].as_array().unwrap().len(),
            days.parse::<usize>().unwrap()
        );
    }
}

#[tokio::test]
async fn bad_requests_are_problems_and_the_summary_lists_subjects() {
    let (_rig, state) = seeded().await;
    let (s, cc, ct, _) = get(&state, "/api/v1/stats/routings/route-1?days=8").await;
    assert_eq!(
        (s, cc.as_str(), ct.as_str()),
        (400, "no-store", "application/problem+json")
    );
    assert_eq!(get(&state, "/api/v1/stats/routings/nope").await.0, 404);
    let (s, _, ct, _) = get(&state, "/api/v1/stats/summary?days=7&x=1").await;
    assert_eq!((s, ct.as_str()), (400, "application/problem+json"));
    assert_eq!(get(&state, "/api/v1/stats/widgets/route-1").await.0, 404);
    assert_eq!(
        get(&state, "/api/v1/stats/routings/bad%7Cname").await.0,
        400
    );
    let (s, cc, _, v) = get(&state, "/api/v1/stats/summary?days=30").await;
    assert_eq!((s, cc.as_str()), (200, "no-store"));
    assert_eq!(
        summary_subjects(&v),
        vec!["clients/client-a", "routings/route-1", "upstreams/vendor-x"]
    );
    assert_eq!(v["subjects"][0]["total"]["proxies"], 3);
}

fn chromium() -> String {
    let bin = std::env::var("PROXY_POOL_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let ok = std::process::Command::new(&bin)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "`{bin}` not found: install Debian's chromium (scripts/test.d/postgres.sh does); this test never skips"
    );
    bin
}

async fn run_chromium(bin: &str, args: &[String]) -> String {
    let profile = std::env::temp_dir().join(format!(
        "pp-analytics-chromium-{}-{}",
        std::process::id(),
        uuid_like()
    ));
    let out = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new(bin)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
            ])
            .args([
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("chromium timed out")
    .unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn uuid_like() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_renders_trends_with_gaps_in_headless_chromium() {
    let bin = chromium();
    let (_rig, state) = seeded().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = router(state);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let url = format!("http://{addr}/stats?days=7");
    let dom = run_chromium(
        &bin,
        &[
            "--virtual-time-budget=20000".into(),
            "--dump-dom".into(),
            url.clone(),
        ],
    )
    .await;
    assert!(
        dom.contains(r#"data-loaded="true""#),
        "page finished loading: {}",
        &dom[..dom.len().min(2000)]
    );
    assert!(dom.contains("routings / route-1"));
    let gaps = dom.matches(r#"data-gap="unknown""#).count();
    assert!(
        gaps >= 3 * 5,
        "five unknown days per subject drawn as gaps, found {gaps}"
    );
    assert!(dom.contains(r#"data-status="degraded""#));
    assert!(dom.contains(r#"data-date="2026-05-11""#));
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("analytics-dashboard.png");
    let _ = std::fs::remove_file(&shot);
    run_chromium(
        &bin,
        &[
            "--virtual-time-budget=20000".into(),
            "--window-size=900,1100".into(),
            format!("--screenshot={}", shot.display()),
            url,
        ],
    )
    .await;
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 1000, "screenshot written");
    println!("dashboard screenshot: {}", shot.display());
}

/// `api/openapi/proxy-pool.yaml` documents exactly the stats routes the router serves.
#[test]
fn openapi_file_lists_the_served_routes() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../api/openapi/proxy-pool.yaml"
    ))
    .unwrap();
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let mut paths: Vec<String> = doc["paths"]
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap().to_owned())
        .filter(|p| p.starts_with("/api/v1/stats") || p == "/stats")
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        vec![
            "/api/v1/stats/summary",
            "/api/v1/stats/{kind}/{name}",
            "/stats"
        ]
    );
    let src = include_str!("../src/stats.rs");
    for p in &paths {
        assert!(src.contains(&format!(".route(\"{p}\"")), "{p} is routed");
    }
}

/// Gateway bytes in the stats answers: per day, the range sum, the total, and the
/// summary's range sums; an unknown day has no bytes (null), not zero.
#[tokio::test]
async fn gateway_bytes_show_per_day_in_the_range_and_in_total() {
    let mut rig = Rig::started("2026-05-10T08:00:00Z", "UTC").await;
    rig.collector.gateway_requests("route-1", "alice", 1);
    rig.collector.routing_bytes("route-1", 100, 2_000);
    rig.collector.client_bytes("alice", 100, 2_000);
    rig.drain_and_flush().await;
    rig.clock.advance_secs(2 * 86_400);
    rig.collector.routing_bytes("route-1", 30, 400);
    rig.drain_and_flush().await;
    let state = stats_state(&rig);
    let (status, _, _, v) = get(&state, "/api/v1/stats/routings/route-1?days=7").await;
    assert_eq!(status, 200, "{v}");
    let series = v["series"].as_array().unwrap();
    let by = |d: &str| series.iter().find(|p| p["date"] == d).unwrap().clone();
    assert_eq!(
        (
            by("2026-05-10")["bytesUp"].clone(),
            by("2026-05-10")["bytesDown"].clone()
        ),
        (100.into(), 2_000.into())
    );
    assert!(
        by("2026-05-11")["bytesUp"].is_null(),
        "an unknown day is not a zero"
    );
    assert_eq!(v["today"]["bytesUp"], 30);
    assert_eq!(v["today"]["bytesDown"], 400);
    assert_eq!(v["range"]["bytesUp"], 130);
    assert_eq!(v["range"]["bytesDown"], 2_400);
    assert_eq!(v["total"]["bytesUp"], 130);
    assert_eq!(v["total"]["bytesDown"], 2_400);
    let (status, _, _, c) = get(&state, "/api/v1/stats/clients/alice?days=7").await;
    assert_eq!(status, 200, "{c}");
    assert_eq!(c["total"]["bytesUp"], 100);
    assert_eq!(c["total"]["bytesDown"], 2_000);
    assert_eq!(c["total"]["requests"], 0, "no extraction by alice");
    let (status, _, _, s) = get(&state, "/api/v1/stats/summary?days=7").await;
    assert_eq!(status, 200, "{s}");
    let route = s["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "route-1")
        .unwrap()
        .clone();
    assert_eq!(route["rangeBytesUp"], 130);
    assert_eq!(route["rangeBytesDown"], 2_400);
}
