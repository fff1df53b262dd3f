//! A controller built the way `main` builds it ([`Controller::build`]: store, control
//! plane, usage analytics) on `127.0.0.1:0`, with usage analytics on a private
//! PostgreSQL (`proxy_pool_analytics::testkit`) and the harness's Redis.

use std::path::PathBuf;

use activity_pool::testkit::RedisServer;
use proxy_pool_analytics::testkit::Postgres;
use proxy_pool_controller::{Controller, Listeners};

use super::Harness;

/// The `analytics:` section for `pg`, writing its DSN file into a temp dir.
pub fn analytics_yaml(pg: &Postgres, extra: &str) -> (String, PathBuf) {
    let dir = std::env::temp_dir().join(format!("pp-usage-{}-{}", std::process::id(), pg.port()));
    std::fs::create_dir_all(&dir).unwrap();
    let dsn = dir.join("dsn");
    std::fs::write(&dsn, format!("{}\n", pg.dsn())).unwrap();
    (
        format!(
            "analytics: {{enabled: true, dsnFile: \"{}\", keyPrefix: \"pp-test\"{extra}}}\n",
            dsn.display()
        ),
        dsn,
    )
}

/// Builds and runs the controller of `yaml` (must be valid); panics if building fails.
pub async fn start_built(yaml: &str, redis: Option<RedisServer>) -> Harness {
    let config = proxy_pool_api::config::load_yaml(yaml).expect("valid test config");
    let listeners = Listeners::bind(&config).await.expect("bind");
    // The test seeds the pool as an outside writer would: the controller's own ports
    // carry its leader fencing token (Redis), which a test must not borrow.
    let ports = proxy_pool_controller::store::build(&config)
        .await
        .expect("seeding store")
        .ports;
    let controller = Controller::build(config).await.expect("controller builds");
    Harness::run(controller, listeners, ports, redis)
}
