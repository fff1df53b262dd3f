//! Runs schemathesis (from PyPI, installed by `scripts/test.d/schemathesis.sh` into
//! `.cache/`) against a live controller: every documented operation of the
//! Distribution listener (memory and Redis stores) and of the admin listener, with
//! every check. The pool is a self-refilling static upstream so extractions keep
//! succeeding. The admin run uses the controller as `main` builds it with usage
//! analytics on (Redis store, a private migrated PostgreSQL), so the stats API and the
//! dashboard are served and hold committed data. Fails on any schemathesis failure.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use std::process::Command;

use activity_pool::testkit::RedisServer;
use common::{Harness, Kind};
use proxy_pool_analytics::PgStore;
use proxy_pool_analytics::testkit::Postgres;
use proxy_pool_e2e::procs::succeeded;

const KEY: &str = "schemathesis-key";

fn schemathesis() -> String {
    if let Ok(bin) = std::env::var("PROXY_POOL_SCHEMATHESIS_BIN")
        && !bin.is_empty()
    {
        return bin;
    }
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/test.d/schemathesis.sh"
    );
    let out = succeeded(
        Command::new("bash")
            .arg(script)
            .output()
            .expect("run the install script"),
        "installing schemathesis",
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .last()
        .expect("a path")
        .to_owned()
}

fn config(store: &str) -> String {
    let proxies: Vec<String> = (0..10_000)
        .map(|i| format!("\"127.1.{}.{}:{}\"", i / 250, i % 250 + 1, 3000 + i % 1000))
        .collect();
    format!(
        r#"
store: {store}
distribution:
  listen: 127.0.0.1:0
  maxCountPerRequest: 1000
  minRemainingTtl: 1s
admin: {{listen: 127.0.0.1:0}}
upstreams:
  - name: st
    ttl: 4s
    quarantine: 0s
    safetyMargin: 1s
    fetchInterval: 1s
    maxSize: 100000
    labels: {{region: shanghai, carrier: telecom}}
    source: {{static: {{proxies: [{}], credentials: {{username: u, password: p}}}}}}
clients:
  - name: st
    apiKeys: [{{sha256: {}}}]
# The static proxies are on loopback: opted in explicitly.
egress: {{allowCidrs: [127.0.0.0/8]}}
"#,
        proxies.join(","),
        proxy_pool_controller::distribution::hash_secret(KEY)
    )
}

fn run(bin: &str, url: &str, tag: &str, headers: &[&str]) {
    let spec = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../api/openapi/proxy-pool.yaml"
    );
    let report = std::env::temp_dir().join(format!("pp-schemathesis-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&report).expect("report dir");
    let mut cmd = Command::new(bin);
    // Schemathesis keeps a cache in its working directory: keep it out of the tree.
    cmd.current_dir(&report)
        .args([
            "--no-color",
            "run",
            spec,
            "--url",
            url,
            "--include-tag",
            tag,
            "--checks",
            "all",
        ])
        .args([
            "--max-examples",
            "60",
            "--workers",
            "1",
            "--seed",
            "1",
            "--generation-database",
            "none",
        ])
        .arg("--report-dir")
        .arg(&report);
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd.output().expect("run schemathesis");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found problems ({tag} at {url}):\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("No issues found"), "{text}");
    let _ = std::fs::remove_dir_all(report);
}

async fn live(kind: Kind, bin: &str, admin_too: bool) {
    let redis = (kind == Kind::Redis).then(RedisServer::start);
    let yaml = config(&common::store_yaml(kind, redis.as_ref()));
    // The admin run needs analytics (Redis store + PostgreSQL) for the stats paths.
    let pg = admin_too.then(Postgres::start);
    let h = match &pg {
        Some(pg) => {
            PgStore::new(pg.config()).migrate().await.expect("migrate");
            let (section, _) = common::usage::analytics_yaml(pg, ", flushInterval: 1s");
            let h = common::usage::start_built(&format!("{yaml}{section}"), redis).await;
            // Some committed usage, so the stats answers carry real series.
            let r = h.extract(r#"{"count":1}"#, &[("x-api-key", KEY)]).await;
            assert_eq!(r.status, 200);
            h
        }
        None => Harness::start_yaml(&yaml, redis, |p| p).await,
    };
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let api = format!("http://{}", h.api);
    let admin = format!("http://{}", h.admin);
    let bin = bin.to_owned();
    let admin_too_ = admin_too;
    tokio::task::spawn_blocking(move || {
        run(&bin, &api, "distribution", &[&format!("X-API-Key: {KEY}")]);
        if admin_too_ {
            // The stats routes need `stats:read`: the client's key (no permissions
            // listed: every permission).
            run(&bin, &admin, "admin", &[&format!("X-API-Key: {KEY}")]);
        }
    })
    .await
    .unwrap();
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_problem() {
    let bin = schemathesis();
    live(Kind::Memory, &bin, false).await;
    live(Kind::Redis, &bin, true).await;
}
