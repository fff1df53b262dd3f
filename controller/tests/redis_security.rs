//! Redis as production runs it, on real `redis-server` / `redis-sentinel` processes:
//! `rediss://` (TLS, a private trust bundle) with an ACL user, Sentinel with its own ACL
//! user, and the start-up refusal of a Redis whose `maxmemory-policy` could evict pool
//! keys.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use proxy_pool_e2e::ports::free_ports;
use std::path::{Path, PathBuf};
use std::time::Duration;

use activity_pool::testkit::{RedisSentinel, RedisServer};
use proxy_pool_controller::store::{self, BuildError};

/// A private directory, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("pp-redis-sec-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }

    fn write(&self, name: &str, content: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, content).unwrap();
        p
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A CA and a server certificate for `localhost` / 127.0.0.1 signed by it: (ca, cert, key).
fn pki() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::from_params(&ca, &ca_key);
    let key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

fn load(yaml: &str) -> proxy_pool_api::config::Config {
    proxy_pool_api::config::load_yaml(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

async fn redis_cli(port: u16, args: &[&str]) -> String {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let v: redis::Value = cmd.query_async(&mut conn).await.unwrap();
    format!("{v:?}")
}

async fn pool_works(config: &proxy_pool_api::config::Config) {
    let built = store::build(config)
        .await
        .unwrap_or_else(|e| panic!("store: {e}"));
    let up = activity_pool::model::UpstreamId::new("u").unwrap();
    let inv = tokio::time::timeout(
        Duration::from_secs(10),
        built.ports.inventory.inventory(&up),
    )
    .await
    .expect("in time")
    .expect("inventory through the pool");
    assert_eq!(inv.managed, 0);
    assert!(built.redis.expect("link").ping().await.is_ok());
}

#[tokio::test]
async fn a_redis_that_may_evict_pool_keys_is_refused_at_start() {
    for policy in ["allkeys-lru", "volatile-ttl", "allkeys-random"] {
        let server = RedisServer::start_with(vec!["--maxmemory-policy".into(), policy.into()]);
        let config = load(&format!(
            "store: {{backend: redis, redis: {{address: '{}'}}}}",
            server.url()
        ));
        let err = store::build(&config).await.unwrap_err();
        assert!(
            matches!(&err, BuildError::EvictionPolicy(p) if p == policy),
            "{policy}: {err}"
        );
        let text = err.to_string();
        assert!(
            text.contains("noeviction") && text.contains(policy),
            "{text}"
        );
        // The whole controller refuses to start the same way.
        let err = proxy_pool_controller::Controller::build(config)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("noeviction"), "{err}");
    }
    let ok = RedisServer::start();
    pool_works(&load(&format!(
        "store: {{backend: redis, redis: {{address: '{}'}}}}",
        ok.url()
    )))
    .await;
}

#[tokio::test]
async fn rediss_with_a_private_trust_bundle_and_an_acl_user() {
    let dir = Dir::new("tls");
    let (ca, cert, key) = pki();
    let ca_file = dir.write("ca.pem", &ca);
    let cert_file = dir.write("cert.pem", &cert);
    let key_file = dir.write("key.pem", &key);
    let tls_port = free_ports(1);
    let arg = |p: &Path| p.display().to_string();
    let server = RedisServer::start_with(vec![
        "--tls-port".into(),
        tls_port.to_string(),
        "--tls-cert-file".into(),
        arg(&cert_file),
        "--tls-key-file".into(),
        arg(&key_file),
        "--tls-ca-cert-file".into(),
        arg(&ca_file),
        "--tls-auth-clients".into(),
        "no".into(),
    ]);
    // An ACL user with a password; the default user stays usable on the plain port for
    // this test's own setup only.
    redis_cli(
        server.port(),
        &[
            "ACL",
            "SETUSER",
            "pool",
            "on",
            ">pool-pw-7c1",
            "~*",
            "&*",
            "+@all",
        ],
    )
    .await;
    let pw = dir.write("password", "pool-pw-7c1\n");
    let yaml = |url: &str, ca: &Path| {
        format!(
            "store: {{backend: redis, redis: {{address: '{url}', username: pool, passwordFile: '{}', tls: {{caFile: '{}'}}}}}}",
            pw.display(),
            ca.display()
        )
    };
    pool_works(&load(&yaml(
        &format!("rediss://localhost:{tls_port}/0"),
        &ca_file,
    )))
    .await;
    // Another CA: the server is not trusted, nothing is served.
    let (other_ca, _, _) = pki();
    let other = dir.write("other-ca.pem", &other_ca);
    let err = store::build(&load(&yaml(
        &format!("rediss://localhost:{tls_port}/0"),
        &other,
    )))
    .await
    .unwrap_err();
    assert!(
        matches!(err, BuildError::EvictionPolicyUnknown | BuildError::Pool(_)),
        "{err}"
    );
    // A wrong ACL password over TLS is refused too.
    let bad = dir.write("bad", "nope\n");
    let yaml_bad = format!(
        "store: {{backend: redis, redis: {{address: 'rediss://localhost:{tls_port}/0', username: pool, passwordFile: '{}', tls: {{caFile: '{}'}}}}}}",
        bad.display(),
        ca_file.display()
    );
    assert!(store::build(&load(&yaml_bad)).await.is_err());
}

#[tokio::test]
async fn sentinel_with_its_own_acl_user() {
    let master = RedisServer::start();
    redis_cli(
        master.port(),
        &[
            "ACL", "SETUSER", "pool", "on", ">pool-pw", "~*", "&*", "+@all",
        ],
    )
    .await;
    let sentinel = RedisSentinel::start_with(
        "mymaster",
        master.port(),
        "user default off\nuser watcher on >watch-pw-3e9 ~* &* +@all",
    );
    let dir = Dir::new("sentinel");
    let pw = dir.write("pool", "pool-pw");
    let spw = dir.write("watcher", "watch-pw-3e9");
    let yaml = |user: &str, file: &Path| {
        format!(
            "store: {{backend: redis, redis: {{username: pool, passwordFile: '{}', sentinel: {{masterName: mymaster, addresses: ['{}'], username: {user}, passwordFile: '{}'}}}}}}",
            pw.display(),
            sentinel.addr(),
            file.display()
        )
    };
    pool_works(&load(&yaml("watcher", &spw))).await;
    // Without the sentinel's user the master cannot be found: nothing is served.
    let wrong = dir.write("wrong", "nope");
    assert!(store::build(&load(&yaml("watcher", &wrong))).await.is_err());
}
