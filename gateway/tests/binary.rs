//! The `proxy-pool-gateway` binary: serves from a snapshot file, answers the ops
//! endpoints, and on SIGTERM stops accepting, drains and exits 0.

mod common;

use common::*;
use proxy_pool_e2e::sim::Protocol;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn free_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

async fn wait_for(addr: SocketAddr) {
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{addr} never came up");
}

async fn admin_get(addr: SocketAddr, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test]
async fn binary_serves_a_snapshot_file_and_drains_on_sigterm() {
    let h = Harness::start().await;
    let p = h.proxy(Protocol::Socks5).await;
    let dir = std::env::temp_dir().join(format!("gw-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("snapshot.json");
    let snapshot = serde_json::json!({
        "routings": [{"name": "all", "connectPorts": ["1-65535"]}],
        "proxies": [{"id": p.id, "protocol": "socks5", "host": p.host.to_string(), "port": p.port,
                     "username": p.username, "password": p.password, "maxConcurrent": 4}],
        "clients": [{"client": "team-a", "username": USER, "password": PASS}]
    });
    std::fs::write(&file, snapshot.to_string()).unwrap();
    let (http, socks, admin) = (free_port(), free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_proxy-pool-gateway"))
        .args(["--http-listen", &http.to_string()])
        .args(["--socks5-listen", &socks.to_string()])
        .args(["--admin-listen", &admin.to_string()])
        .arg("--snapshot-file")
        .arg(&file)
        .args(["--drain-grace-seconds", "5"])
        // The simulator's proxies and targets are on loopback: opted in explicitly.
        .args(["--egress-allow-cidr", "127.0.0.0/8"])
        // Two data-plane workers whatever the machine: both listeners of each kind.
        .args(["--worker-threads", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("binary starts");
    wait_for(http).await;
    wait_for(admin).await;
    let mut ready = String::new();
    for _ in 0..100 {
        ready = admin_get(admin, "/readyz").await;
        if ready.starts_with("HTTP/1.1 200") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    let r = get_once(http, USER, h.echo(), "/through-binary").await;
    assert_eq!(r.remote_ip(), h.egress(&p));
    let (resp, tunnel) = connect(http, USER, PASS, &h.echo().to_string()).await;
    assert_eq!(resp.status, 200);
    let metrics = admin_get(admin, "/metrics").await;
    assert!(metrics.contains("gateway_forwarded_total 1"), "{metrics}");

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        tokio::net::TcpStream::connect(http).await.is_err(),
        "no new connections after SIGTERM"
    );
    // The open tunnel still carries a request, then closes; the process exits 0.
    let reply = echo_over(tunnel, "x", "/in-flight").await;
    assert_eq!(reply.echo().path, "/in-flight");
    let mut exited = None;
    for _ in 0..100 {
        if let Some(code) = child.try_wait().unwrap() {
            exited = Some(code);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let code = exited.unwrap_or_else(|| {
        let _ = child.kill();
        panic!("gateway did not exit after draining")
    });
    assert!(code.success(), "{code:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn binary_turns_unready_on_sigterm_and_serves_until_the_shutdown_delay_ends() {
    let h = Harness::start().await;
    let p = h.proxy(Protocol::Socks5).await;
    let dir = std::env::temp_dir().join(format!("gw-bin-delay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("snapshot.json");
    let snapshot = serde_json::json!({
        "routings": [{"name": "all"}],
        "proxies": [{"id": p.id, "protocol": "socks5", "host": p.host.to_string(), "port": p.port,
                     "username": p.username, "password": p.password, "maxConcurrent": 4}],
        "clients": [{"client": "team-a", "username": USER, "password": PASS}]
    });
    std::fs::write(&file, snapshot.to_string()).unwrap();
    let (http, socks, admin) = (free_port(), free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_proxy-pool-gateway"))
        .args(["--http-listen", &http.to_string()])
        .args(["--socks5-listen", &socks.to_string()])
        .args(["--admin-listen", &admin.to_string()])
        .arg("--snapshot-file")
        .arg(&file)
        .args(["--drain-grace-seconds", "5"])
        .args(["--shutdown-delay-seconds", "3"])
        // The simulator's proxies and echo are on loopback: opted in explicitly.
        .args(["--egress-allow-cidr", "127.0.0.0/8"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("binary starts");
    wait_for(http).await;
    wait_for(admin).await;
    let mut ready = String::new();
    for _ in 0..100 {
        ready = admin_get(admin, "/readyz").await;
        if ready.starts_with("HTTP/1.1 200") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");

    let signalled = std::time::Instant::now();
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // Readiness turns false first...
    let mut unready = String::new();
    for _ in 0..40 {
        unready = admin_get(admin, "/readyz").await;
        if unready.starts_with("HTTP/1.1 503") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        unready.starts_with("HTTP/1.1 503") && unready.contains("shutting down"),
        "{unready}"
    );
    // ...while the listeners still accept and serve new connections.
    let r = get_once(http, USER, h.echo(), "/while-unready").await;
    assert_eq!(r.echo().path, "/while-unready");
    assert!(
        signalled.elapsed() < Duration::from_secs(3),
        "checked within the delay"
    );
    // Once the delay is over the listeners close and the process exits 0.
    let mut exited = None;
    for _ in 0..200 {
        if let Some(code) = child.try_wait().unwrap() {
            exited = Some(code);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let code = exited.unwrap_or_else(|| {
        let _ = child.kill();
        panic!("gateway did not exit after the delay and the drain")
    });
    assert!(code.success(), "{code:?}");
    assert!(
        signalled.elapsed() >= Duration::from_secs(3),
        "listeners stayed open for the whole delay"
    );
    assert!(
        tokio::net::TcpStream::connect(http).await.is_err(),
        "no listener after exit"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A worker that could only refuse stays out of its Service: `/readyz` answers 503
/// while the snapshot holds no usable proxy (found on the real cluster: gateway pods
/// of a roll turned Ready before the controller had assigned them a proxy and answered
/// `503 no-capacity` to the Service's traffic), and 200 once one arrives.
#[tokio::test]
async fn binary_is_unready_without_a_usable_proxy() {
    let h = Harness::start().await;
    let p = h.proxy(Protocol::Socks5).await;
    let dir = std::env::temp_dir().join(format!("gw-bin-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("snapshot.json");
    let with = |proxies: serde_json::Value| {
        serde_json::json!({
            "routings": [{"name": "all"}],
            "proxies": proxies,
            "clients": [{"client": "team-a", "username": USER, "password": PASS}]
        })
        .to_string()
    };
    std::fs::write(&file, with(serde_json::json!([]))).unwrap();
    let (http, socks, admin) = (free_port(), free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_proxy-pool-gateway"))
        .args(["--http-listen", &http.to_string()])
        .args(["--socks5-listen", &socks.to_string()])
        .args(["--admin-listen", &admin.to_string()])
        .arg("--snapshot-file")
        .arg(&file)
        .args(["--reload-seconds", "1"])
        .args(["--egress-allow-cidr", "127.0.0.0/8"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("binary starts");
    wait_for(admin).await;
    // Wait for the (empty) snapshot to be installed: the answer changes from "no fresh
    // snapshot" to "no usable proxy", and stays 503.
    let mut answer = String::new();
    for _ in 0..100 {
        answer = admin_get(admin, "/readyz").await;
        if answer.contains("no usable proxy") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        answer.starts_with("HTTP/1.1 503") && answer.contains("no usable proxy"),
        "{answer}"
    );
    std::fs::write(
        &file,
        with(
            serde_json::json!([{"id": p.id, "protocol": "socks5", "host": p.host.to_string(),
            "port": p.port, "username": p.username, "password": p.password, "maxConcurrent": 4}]),
        ),
    )
    .unwrap();
    let mut ready = String::new();
    for _ in 0..100 {
        ready = admin_get(admin, "/readyz").await;
        if ready.starts_with("HTTP/1.1 200") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
