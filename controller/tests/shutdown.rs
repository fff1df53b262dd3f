//! The shutdown protocol: signal → not ready and new requests refused with 503 →
//! in-flight requests finish → exit within the grace period; for the library and for
//! the binary under SIGTERM. Also: `validate-config` on the shipped example.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use proxy_pool_e2e::ports::free_ports;
use proxy_pool_e2e::procs::{succeeded, terminate};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Harness, Kind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_requests_finish_and_new_ones_get_503() {
    let (mut h, faulty) = Harness::start_faulty(Kind::Memory, "").await;
    h.seed("up-a", 5, "shanghai", "telecom").await;
    *faulty.delay.lock() = Duration::from_millis(800);
    let api = h.api;
    let in_flight = h.spawn_extract(r#"{"count":2}"#);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let started = Instant::now();
    let task = h.trigger_shutdown();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Draining (drainDelay 300ms): not ready, new requests refused.
    assert_eq!(h.admin_get("/readyz").await.status, 503);
    let refused = h.extract(r#"{"count":1}"#, &[]).await;
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (503, "SHUTTING_DOWN")
    );
    let done = in_flight.await.unwrap();
    assert_eq!(done.status, 200, "the in-flight request finished");
    assert_eq!(done.json()["returned"], 2);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("stopped within the grace period")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        tokio::net::TcpStream::connect(api).await.is_err(),
        "no longer accepting"
    );
}

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_proxy-pool-controller")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_drains_and_exits_on_sigterm() {
    let (api, admin) = (free_ports(1), free_ports(1));
    let dir = std::env::temp_dir().join(format!("pp-ctl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/controller.yaml"
    ))
    .unwrap();
    let yaml = example
        .replace("127.0.0.1:8081", &format!("127.0.0.1:{api}"))
        .replace("127.0.0.1:9090", &format!("127.0.0.1:{admin}"))
        .replace("gracePeriod: 20s", "gracePeriod: 3s");
    let path = dir.join("controller.yaml");
    std::fs::write(&path, yaml).unwrap();
    let mut child = Command::new(binary())
        .args(["run", "--config"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = common::client();
    let admin_addr = format!("127.0.0.1:{admin}").parse().unwrap();
    let api_addr = format!("127.0.0.1:{api}").parse().unwrap();
    let mut ready = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(admin_addr).await.is_ok()
            && common::send(&client, admin_addr, "GET", "/readyz", &[], String::new())
                .await
                .status
                == 200
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "the controller became ready");
    // The example's static upstream and API key work out of the box.
    let mut r = None;
    for _ in 0..20 {
        let resp = common::send(
            &client,
            api_addr,
            "POST",
            "/api/v1/proxies/extract",
            &[
                ("content-type", "application/json"),
                ("x-api-key", "demo-api-key-change-me"),
            ],
            r#"{"count":2}"#.to_owned(),
        )
        .await;
        if resp.status == 200 && resp.json()["returned"] == 2 {
            r = Some(resp);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = r.expect("the example's static upstream is extractable");
    assert!(
        r.json()["proxies"][0]["url"]
            .as_str()
            .unwrap()
            .starts_with("http://demo:demo-password@127.0.0.1:")
    );
    let exit =
        terminate(&mut child, Duration::from_secs(4)).expect("exited within the grace period");
    assert!(exit.success(), "{exit:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn validate_config_accepts_the_example_and_lists_every_problem() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/controller.yaml");
    succeeded(
        Command::new(binary())
            .args(["validate-config", example])
            .output()
            .unwrap(),
        "validate-config of the example",
    );
    let dir = std::env::temp_dir().join(format!("pp-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "distribution: {maxCountPerRequest: 0, listen: nowhere}\nshutdown: {gracePeriod: 0s}\n",
    )
    .unwrap();
    let out = Command::new(binary())
        .args(["validate-config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for path in [
        "distribution.maxCountPerRequest",
        "distribution.listen",
        "shutdown.gracePeriod",
    ] {
        assert!(err.contains(path), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hash_password_prints_a_salted_hash_the_config_accepts() {
    use std::io::Write as _;
    let hash = |input: &str| {
        let mut child = Command::new(binary())
            .arg("hash-password")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let first = hash("s3cret-pw\n");
    assert!(first.status.success(), "{first:?}");
    let first = String::from_utf8(first.stdout).unwrap().trim().to_owned();
    let second = String::from_utf8(hash("s3cret-pw\n").stdout).unwrap();
    assert!(first.starts_with("sha256:"), "{first}");
    assert_ne!(first, second.trim(), "a fresh salt each time");
    assert!(!first.contains("s3cret-pw"));
    // The printed hash is what a Basic client's passwordHash takes.
    let config = proxy_pool_api::config::load_yaml(&format!(
        "distribution: {{auth: {{mode: any, methods: [{{type: basic}}]}}}}\n\
         clients: [{{name: c, basic: {{username: u, passwordHash: \"{first}\"}}}}]\n"
    ));
    assert!(config.is_ok(), "{config:?}");
    let empty = hash("\n");
    assert_eq!(empty.status.code(), Some(2));
}
