//! The `proxy-pool-checker` binary's metrics: `run` with an ops listener serves exactly
//! the metrics the Checker table of `docs/operations.md` lists (names and types), with
//! no reserved label; its log lines are at `info` without `RUST_LOG`, as JSON on
//! standard error when `PROXY_POOL_LOG_FORMAT=json`.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use proxy_pool_e2e::ports::free_addr;
use proxy_pool_e2e::procs::terminate;
use proxy_pool_runtime::telemetry::metrics::{
    documented, exported, reference_doc, reserved_labels_used,
};

const BIN: &str = env!("CARGO_BIN_EXE_proxy-pool-checker");

/// `GET path` on `addr`: the status code and the body (`None` when nothing answers).
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, head.to_owned(), body.to_owned()))
}

#[test]
fn the_run_command_exports_the_documented_metrics() {
    let ops = free_addr();
    let mut child = Command::new(BIN)
        .args([
            "run",
            "--loopback-plaintext",
            "--controller",
            "http://127.0.0.1:1",
            "--checker-id",
            "chk-metrics",
            "--echo",
            "127.0.0.1:9",
            "--grace",
            "1",
            "--ops-listen",
            &ops.to_string(),
        ])
        .env_remove("RUST_LOG")
        .env("PROXY_POOL_LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let metrics = loop {
        match get(ops, "/metrics") {
            Some((200, head, body)) => break (head, body),
            _ if Instant::now() > deadline => {
                let _ = child.kill();
                panic!("the ops listener never answered /metrics");
            }
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let ready = get(ops, "/readyz").map(|r| r.0);
    let status = terminate(&mut child, Duration::from_secs(10)).expect("exits on SIGTERM");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "{status}\n{stderr}");

    let (head, text) = metrics;
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    let doc = reference_doc().unwrap();
    let documented = documented(&doc, "checker");
    assert!(
        !documented.is_empty(),
        "docs/operations.md lists the checker's metrics"
    );
    assert_eq!(
        exported(&text),
        documented,
        "what the checker serves (left) and the Checker table of docs/operations.md (right)\n{text}"
    );
    assert_eq!(reserved_labels_used(&text), Vec::<String>::new(), "{text}");
    // No controller answers: not registered, not ready.
    assert_eq!(ready, Some(503));
    assert!(
        text.lines()
            .any(|l| l == "proxy_pool_checker_session_registered 0"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with(
            r#"proxy_pool_checker_probe_duration_seconds_count{tier="basic",result="ok"} "#
        )),
        "{text}"
    );

    // Without RUST_LOG the level is info: the start-up line is there, as JSON.
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["level"] == "INFO" && l["fields"]["message"] == "checker running"),
        "{stderr}"
    );
}
