//! The chart's alerting rules (`charts/proxy-pool/files/prometheus-rules.yaml`, the file
//! its PrometheusRule embeds) against real Prometheus tooling:
//!
//! - `promtool check rules` accepts them and `promtool test rules` passes their unit
//!   tests (`prometheus-rules.test.yaml`: each alert fires on its condition and stays
//!   silent otherwise);
//! - a real Prometheus on loopback (scrape and evaluation every second) scrapes the local
//!   stack — vendor simulator, controller (memory store), checker, gateway with a 3 s
//!   staleness window — with the shipped rules loaded: both targets are up and every alert is
//!   loaded; the controller is stopped and `ProxyPoolSnapshotStale` fires; the
//!   controller is started again and the alert resolves.
//!
//! Prometheus and promtool come from Debian's `prometheus` (scripts/test.d/prometheus.sh
//! installs it): `PROXY_POOL_PROMETHEUS` / `PROXY_POOL_PROMTOOL`, else `PATH`. The tests
//! fail, never skip, without them.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use proxy_pool_e2e::http::get;
use proxy_pool_e2e::ports::free_addr;
use proxy_pool_e2e::stack::{READY_WITHIN, SingleStack};

const RULES: &str = "charts/proxy-pool/files/prometheus-rules.yaml";
const RULE_TESTS: &str = "charts/proxy-pool/files/prometheus-rules.test.yaml";
const STALE_ALERT: &str = "ProxyPoolSnapshotStale";
/// The gateway gauge the alert reads.
const STALE_GAUGE: &str = "proxy_pool_gateway_snapshot_stale";
/// `controlPlane.maxStaleAge` of the stack: the gateway refuses new traffic this long
/// after its last snapshot delivery or refresh.
const MAX_STALE: &str = "3s";
/// Staleness (3 s) + the alert's `for: 1m` + scrape and evaluation, with room to spare.
const FIRES_WITHIN: Duration = Duration::from_secs(150);
/// The gateway's reconnect back-off and a new snapshot, then one evaluation.
const RESOLVES_WITHIN: Duration = Duration::from_secs(120);

fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// The tool `name`: `$env` when set, else the first `name` on `PATH`; panics saying how
/// to install it.
fn tool(env: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "{name} not found: set {env} or install Debian's `prometheus` \
                 (scripts/test.d/prometheus.sh does, as scripts/test.sh runs it)"
            )
        })
}

/// `promtool <args>`; panics with its output unless it succeeds.
fn promtool(args: &[&Path]) -> String {
    let out = Command::new(tool("PROXY_POOL_PROMTOOL", "promtool"))
        .args(args)
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

/// The alert names of the shipped rules file.
fn shipped_alerts() -> Vec<String> {
    let text = std::fs::read_to_string(repo_path(RULES)).expect("rules file");
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).expect("rules YAML");
    doc["groups"]
        .as_sequence()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().cloned().unwrap_or_default())
        .filter_map(|r| r["alert"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn shipped_rules_pass_promtool_check_and_unit_tests() {
    let (rules, tests) = (repo_path(RULES), repo_path(RULE_TESTS));
    let checked = promtool(&[Path::new("check"), Path::new("rules"), &rules]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&[Path::new("test"), Path::new("rules"), &tests]);
    assert!(tested.contains("SUCCESS"), "{tested}");

    // Every alert the issue asks for is shipped, each with a runbook line, and each has
    // unit tests.
    let alerts = shipped_alerts();
    for want in [
        STALE_ALERT,
        "ProxyPoolUpstreamEmpty",
        "ProxyPoolUpstreamLow",
        "ProxyPoolVendorFetchFailing",
        "ProxyPoolExtractionErrors",
        "ProxyPoolCertificateExpiring",
        "ProxyPoolLeaderMissing",
        "ProxyPoolGatewayCapacityExhausted",
        "ProxyPoolGatewayConnectionsExhausted",
    ] {
        assert!(alerts.iter().any(|a| a == want), "{want} not shipped");
    }
    let text = std::fs::read_to_string(&rules).unwrap();
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let unit_tests = std::fs::read_to_string(&tests).unwrap();
    for rule in doc["groups"][0]["rules"].as_sequence().unwrap() {
        let name = rule["alert"].as_str().unwrap();
        for key in ["summary", "description", "runbook"] {
            assert!(
                rule["annotations"][key]
                    .as_str()
                    .is_some_and(|s| !s.trim().is_empty()),
                "{name}: no {key} annotation"
            );
        }
        assert!(
            rule["labels"]["severity"].as_str().is_some(),
            "{name}: no severity"
        );
        assert!(
            unit_tests.contains(&format!("alertname: {name},"))
                || unit_tests.contains(&format!("alertname: {name}\n")),
            "{name}: no promtool unit test"
        );
    }
    // The docs explain every alert.
    let docs = std::fs::read_to_string(repo_path("docs/operations.md")).unwrap();
    for name in &alerts {
        assert!(
            docs.contains(&format!("`{name}`")),
            "docs/operations.md does not describe {name}"
        );
    }
}

/// `data` of a Prometheus API answer at `path` (`None` unless 200 and `success`).
fn api(prom: SocketAddr, path: &str) -> Option<serde_json::Value> {
    let (status, body) = get(prom, path);
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    (status == 200 && v["status"] == "success").then(|| v["data"].clone())
}

/// The state of `alert` among Prometheus's active alerts (`pending`, `firing`), `None`
/// when it is not active.
fn alert_state(prom: SocketAddr, alert: &str) -> Option<String> {
    let data = api(prom, "/api/v1/alerts")?;
    data["alerts"]
        .as_array()?
        .iter()
        .find(|a| a["labels"]["alertname"] == alert)
        .and_then(|a| a["state"].as_str().map(str::to_owned))
}

/// The value of the instant query `q` (its first sample).
fn query(prom: SocketAddr, q: &str) -> Option<f64> {
    let data = api(prom, &format!("/api/v1/query?query={q}"))?;
    data["result"].as_array()?.first()?["value"][1]
        .as_str()?
        .parse()
        .ok()
}

/// The local stack on the memory store, with a short staleness window: the gateway is
/// stale seconds after the controller stops.
fn start_stack() -> SingleStack {
    let mut stack = SingleStack::new("prometheus");
    stack.write_clients(&[("e2e", "e2e-prometheus-pw")]);
    stack.write_config(
        "{backend: memory}",
        &format!("maxStaleAge: {MAX_STALE}\nreportInterval: 500ms"),
        "routings:\n  - {name: e2e-prometheus, priority: 1, upstreams: [sim-http]}\n\
         shutdown: {gracePeriod: 2s}",
    );
    stack.start();
    stack
}

/// Prometheus on loopback scraping the controller and the gateway every second, with
/// the shipped rules evaluated every second; its HTTP address.
fn start_prometheus(stack: &mut SingleStack) -> SocketAddr {
    let prom = free_addr();
    let config = stack.dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            r#"global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files:
  - {rules}
scrape_configs:
  - job_name: controller
    static_configs: [{{targets: ["{admin}"]}}]
  - job_name: gateway
    static_configs: [{{targets: ["{gw_admin}"]}}]
"#,
            rules = repo_path(RULES)
                .canonicalize()
                .expect("rules file")
                .display(),
            admin = stack.at.admin,
            gw_admin = stack.at.gw_admin,
        ),
    )
    .expect("prometheus config");
    stack.procs.start(
        "prometheus",
        Command::new(tool("PROXY_POOL_PROMETHEUS", "prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                stack.dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={prom}")),
    );
    stack
        .procs
        .wait_until("prometheus ready", READY_WITHIN, || {
            get(prom, "/-/ready").0 == 200
        });
    prom
}

/// The scrape pools whose every target is up.
fn targets_up(prom: SocketAddr) -> Vec<String> {
    let Some(data) = api(prom, "/api/v1/targets") else {
        return Vec::new();
    };
    let mut up: Vec<String> = data["activeTargets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["health"] == "up")
        .filter_map(|t| t["scrapePool"].as_str().map(str::to_owned))
        .collect();
    up.sort();
    up
}

/// The alerting rules Prometheus has loaded.
fn loaded_alerts(prom: SocketAddr) -> Vec<String> {
    let Some(data) = api(prom, "/api/v1/rules?type=alert") else {
        return Vec::new();
    };
    data["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r["name"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn snapshot_stale_alert_fires_when_the_controller_stops_and_resolves_after_restart() {
    let mut stack = start_stack();
    let prom = start_prometheus(&mut stack);

    // Both targets are scraped and every shipped alert is loaded.
    stack
        .procs
        .wait_until("controller and gateway targets up", READY_WITHIN, || {
            targets_up(prom) == ["controller", "gateway"]
        });
    let mut shipped = shipped_alerts();
    shipped.sort();
    let mut loaded = loaded_alerts(prom);
    loaded.sort();
    assert_eq!(
        loaded, shipped,
        "Prometheus loaded other rules than the shipped file's"
    );

    // The gauge the alert reads is served and scraped (0: the gateway has a snapshot).
    let (_, metrics) = get(stack.at.gw_admin, "/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with(&format!("{STALE_GAUGE} "))),
        "the gateway does not export {STALE_GAUGE} (docs/operations.md, Gateway metrics):\n{metrics}"
    );
    stack
        .procs
        .wait_until("the stale gauge scraped as 0", READY_WITHIN, || {
            query(prom, STALE_GAUGE) == Some(0.0)
        });
    assert_eq!(alert_state(prom, STALE_ALERT), None);

    // The controller stops: the gateway's snapshot goes stale and the alert fires.
    let stopped = Instant::now();
    stack.procs.signal("controller", "TERM");
    assert!(
        stack
            .procs
            .wait_exit("controller", Duration::from_secs(30))
            .is_some(),
        "the controller did not stop\n{}",
        stack.procs.logs()
    );
    stack
        .procs
        .wait_until("the stale gauge scraped as 1", FIRES_WITHIN, || {
            query(prom, STALE_GAUGE) == Some(1.0)
        });
    stack
        .procs
        .wait_until(&format!("{STALE_ALERT} firing"), FIRES_WITHIN, || {
            alert_state(prom, STALE_ALERT).as_deref() == Some("firing")
        });
    println!(
        "{STALE_ALERT} fired {:?} after the controller stopped",
        stopped.elapsed()
    );

    // The controller is back (same config and listeners): the gateway gets a snapshot
    // again and the alert resolves.
    let restarted = Instant::now();
    stack.start_controller("controller-2");
    stack
        .procs
        .wait_until(&format!("{STALE_ALERT} resolved"), RESOLVES_WITHIN, || {
            query(prom, STALE_GAUGE) == Some(0.0) && alert_state(prom, STALE_ALERT).is_none()
        });
    println!(
        "{STALE_ALERT} resolved {:?} after the restart",
        restarted.elapsed()
    );

    stack.tear_down();
}
