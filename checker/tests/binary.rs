//! The `proxy-pool-checker` binary: one-shot probes of a live simulator proxy, and a
//! clean exit on SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use proxy_pool_e2e::procs::terminate;
use proxy_pool_e2e::sim::{FailureMode, Protocol, SimConfig, SimProxy, Simulator};

const BIN: &str = env!("CARGO_BIN_EXE_proxy-pool-checker");

/// A simulator with one working `protocol` proxy of a minute's TTL.
async fn sim_with_proxy(protocol: Protocol) -> (Simulator, SimProxy) {
    let sim = Simulator::start(SimConfig::default()).await.unwrap();
    let p = sim
        .spawn_proxy(protocol, Duration::from_secs(60), FailureMode::None)
        .await
        .unwrap();
    (sim, p)
}

/// Runs `proxy-pool-checker probe --proxy <url> --echo <echo> <extra>` to its end.
async fn probe(url: String, echo: String, extra: &'static [&'static str]) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(BIN)
            .args(["probe", "--proxy", &url, "--echo", &echo])
            .args(extra)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_prints_observations_without_secrets() {
    let (sim, p) = sim_with_proxy(Protocol::Socks5).await;
    let echo = sim.echo_http_addr().to_string();
    let url = p.url();
    let out = probe(url, echo, &["--egress-allow-cidr", "127.0.0.0/8"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["tier"], "basic");
    assert_eq!(lines[1]["tier"], "egress");
    let egress = sim.live_proxies()[0].egress_ip.to_string();
    assert_eq!(lines[1]["egress"], egress.as_str());
    assert!(!stdout.contains(&p.password) && !stderr.contains(&p.password));

    sim.set_failure(&p.id, FailureMode::BadAuth).unwrap();
    let (url, echo) = (p.url(), sim.echo_http_addr().to_string());
    let out = probe(url, echo, &["--egress-allow-cidr", "127.0.0.0/8"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("auth_rejected"));
}

#[test]
fn run_exits_cleanly_on_sigterm() {
    let mut child = Command::new(BIN)
        .args([
            "run",
            "--loopback-plaintext",
            "--controller",
            "http://127.0.0.1:1",
            "--checker-id",
            "chk-test",
            "--echo",
            "127.0.0.1:9",
            "--grace",
            "2",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(child.try_wait().unwrap().is_none(), "still running");
    let status = terminate(&mut child, Duration::from_secs(5)).expect("no exit after SIGTERM");
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn probe_refuses_a_proxy_the_egress_policy_denies() {
    let (sim, p) = sim_with_proxy(Protocol::Http).await;
    // No opt-in: the simulator's proxy listens on loopback, which is refused.
    let (url, echo) = (p.url(), sim.echo_http_addr().to_string());
    let out = probe(url, echo, &[]).await;
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Refused before any connect: the failure is the policy's, not the proxy's.
    assert!(stdout.contains("egress_denied"), "{stdout}");
    assert!(!stdout.contains("connect_refused"), "{stdout}");
}
