//! The gateway's hot path must never reach Redis or a database: this fails if the
//! gateway depends on a Redis or SQL client, directly or transitively (normal and
//! build dependencies; dev-dependencies never ship in the binary).
//!
//! The graph is resolved for the host platform only (`--filter-platform`): a plain
//! `cargo metadata --offline` needs the manifest of every package in the lock file,
//! Windows- and macOS-only ones included, which a Linux build never downloads, so it
//! failed on a fresh machine. The shipped binary is built for the host, so the host's
//! graph is the one that matters.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::collections::{BTreeSet, HashMap};
use std::process::Command;

use proxy_pool_e2e::procs::succeeded;

const FORBIDDEN: [&str; 8] = [
    "redis",
    "sqlx",
    "postgres",
    "tokio-postgres",
    "diesel",
    "deadpool-redis",
    "bb8-redis",
    "fred",
];

/// The host's target triple, as `rustc -vV` reports it.
fn host_triple() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc).arg("-vV").output().expect("rustc runs");
    assert!(out.status.success(), "rustc -vV failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(|h| h.trim().to_owned())
        .expect("rustc -vV names the host")
}

#[test]
fn the_gateway_depends_on_no_redis_or_database_client() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline"])
        .args(["--filter-platform", &host_triple()])
        .arg("--manifest-path")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    let out = succeeded(out, "cargo metadata");
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: HashMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let nodes: HashMap<&str, &serde_json::Value> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();
    let root = names
        .iter()
        .find(|(_, name)| **name == "proxy-pool-gateway")
        .map(|(id, _)| *id)
        .expect("gateway package");
    // Walk normal and build edges only.
    let mut seen = BTreeSet::new();
    let mut stack = vec![root];
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        for dep in nodes[id]["deps"].as_array().unwrap() {
            let shipped = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].is_null() || k["kind"] == "build");
            if shipped {
                stack.push(dep["pkg"].as_str().unwrap());
            }
        }
    }
    let reached: BTreeSet<&str> = seen.iter().map(|id| names[id]).collect();
    assert!(reached.contains("tokio"), "walk works: {reached:?}");
    let bad: Vec<_> = FORBIDDEN.iter().filter(|f| reached.contains(**f)).collect();
    assert!(bad.is_empty(), "gateway reaches {bad:?}");
    let bad_prefix: Vec<_> = reached
        .iter()
        .filter(|n| n.starts_with("redis") || n.starts_with("sqlx") || n.contains("postgres"))
        .collect();
    assert!(bad_prefix.is_empty(), "gateway reaches {bad_prefix:?}");
}
