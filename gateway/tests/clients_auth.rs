//! A gateway whose clients come from a clients file laid out as the operator renders
//! it (credentials as mounted Secret files): the right credentials pass over real
//! sockets (HTTP CONNECT, plain HTTP, SOCKS5) and carry the file's client name into
//! routing; wrong ones get 407 / SOCKS5 status 0x01.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use common::*;
use proxy_pool_api::controlplane::model::{Checksum, Header, RoutingMatch, Snapshot};
use proxy_pool_api::gateway_clients::{self, ClientEntry};
use proxy_pool_e2e::procs::fresh_test_dir;
use proxy_pool_e2e::sim::Protocol;
use proxy_pool_gateway::SnapshotInput;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// A directory like the gateway pod's `/etc/proxy-pool-gateway` volume.
struct Volume(PathBuf);

impl Volume {
    fn new(tag: &str) -> Self {
        let root = fresh_test_dir(&format!("gateway-clients-auth-{tag}"));
        let write = |rel: &str, content: &str| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, content).expect("write");
        };
        // What a Secret key looks like when created with a trailing newline.
        write("secrets/crawler-basic/username", "crawlerbot\n");
        write("secrets/crawler-basic/password", "s3cret-from-secret\n");
        write("secrets/search-basic/username", "searcher");
        write("secrets/search-basic/password", "other-pass");
        let secret = |name: &str| root.join("secrets").join(name).display().to_string();
        let clients = gateway_clients::render(&[
            ClientEntry::from_secret_dir("team-crawler", &secret("crawler-basic")),
            ClientEntry::from_secret_dir("team-search", &secret("search-basic")),
        ]);
        write("clients.json", &clients);
        Self(root)
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn a_gateway_with_file_credentials_accepts_them_and_refuses_others() {
    let volume = Volume::new("sockets");
    let clients =
        proxy_pool_gateway::clients::load(&volume.0.join("clients.json")).expect("clients load");
    assert_eq!(clients.len(), 2);

    let h = Harness::start().await;
    let p = h.proxy(Protocol::Http).await;
    // Only team-crawler's traffic matches the routing: the client name comes from the
    // file entry the credentials matched.
    let mut routing = common::any_port(catch_all("crawler-only"));
    routing.matcher = RoutingMatch {
        clients: vec!["team-crawler".into()],
        ..RoutingMatch::default()
    };
    h.handle
        .install(SnapshotInput::new(
            Snapshot {
                header: Header {
                    version: 1,
                    ownership_epoch: 1,
                    generated_at_ms: unix_ms(SystemTime::now()),
                    valid_until_ms: unix_ms(SystemTime::now() + Duration::from_secs(600)),
                },
                routings: vec![routing],
                proxies: vec![upstream(&p, 10)],
                checksum: Checksum::default(),
            },
            clients,
        ))
        .expect("snapshot installs");
    let echo = h.echo();

    // HTTP CONNECT: right credentials (the newline of the Secret file is not part of
    // the password), with routing parameters appended to the user name.
    for user in ["crawlerbot", "crawlerbot-session-abc"] {
        let (resp, tunnel) = connect(h.http, user, "s3cret-from-secret", &echo.to_string()).await;
        assert_eq!(resp.status, 200, "{user}: {}", resp.head);
        let reply = echo_over(tunnel, "127.0.0.1", "/through").await;
        assert_eq!(reply.remote_ip(), h.egress(&p));
    }
    // Plain HTTP forwarding with the same credentials.
    let resp = ProxyClient::connect(h.http, "crawlerbot", "s3cret-from-secret")
        .await
        .get(echo, "/plain")
        .await;
    assert_eq!(resp.status, 200, "{}", resp.head);

    // Wrong password, the password with its newline, unknown user, the other client's
    // password: 407 auth-failed.
    for (user, pass) in [
        ("crawlerbot", "wrong"),
        ("crawlerbot", "s3cret-from-secret\n"),
        ("nobody", "s3cret-from-secret"),
        ("crawlerbot", "other-pass"),
    ] {
        let (resp, _) = connect(h.http, user, pass, &echo.to_string()).await;
        assert_eq!(resp.status, 407, "{user}/{pass:?}: {}", resp.head);
        assert_eq!(
            resp.header("x-proxy-pool-error").as_deref(),
            Some("auth-failed")
        );
        assert!(!resp.head.contains("s3cret"), "{}", resp.head);
    }

    // The second client authenticates but no routing takes its traffic.
    let (resp, _) = connect(h.http, "searcher", "other-pass", &echo.to_string()).await;
    assert_ne!(resp.status, 407, "{}", resp.head);
    assert_ne!(resp.status, 200, "{}", resp.head);

    // SOCKS5: right credentials connect, wrong ones fail the RFC 1929 step with 0x01.
    let stream = socks5(h.socks, "crawlerbot", "s3cret-from-secret", echo, 1)
        .await
        .expect("socks5 with the file credentials");
    let reply = echo_over(stream, "127.0.0.1", "/socks").await;
    assert_eq!(reply.remote_ip(), h.egress(&p));
    for (user, pass) in [("crawlerbot", "wrong"), ("searcher", "s3cret-from-secret")] {
        let err = socks5(h.socks, user, pass, echo, 1)
            .await
            .expect_err("refused");
        assert_eq!(err, ("auth".to_owned(), 1), "{user}");
    }
}

#[tokio::test]
async fn a_missing_secret_file_stops_the_load_with_field_and_path() {
    let volume = Volume::new("missing");
    std::fs::remove_file(volume.0.join("secrets/search-basic/password")).expect("rm");
    let err =
        proxy_pool_gateway::clients::load(&volume.0.join("clients.json")).expect_err("refused");
    let shown = err.to_string();
    assert!(
        shown.contains("clients[1].passwordFile: file ")
            && shown.contains("secrets/search-basic/password does not exist"),
        "{shown}"
    );
    assert!(!shown.contains("s3cret"), "{shown}");
}
