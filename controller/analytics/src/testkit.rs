//! Test fixtures: a private PostgreSQL server per test — `initdb` + `postgres` on a free
//! loopback port in a temp dir, run as the `postgres` user when the tests run as root
//! (postgres refuses root). Missing binaries fail the test: PostgreSQL tests never skip.
//!
//! Public only so this crate's and the controller's integration tests share it (like
//! `activity_pool::testkit`), behind the `testkit` feature that only dev-dependencies
//! enable; never in production builds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

static NEXT: AtomicU64 = AtomicU64::new(0);

fn bindir() -> PathBuf {
    if let Ok(d) = std::env::var("PROXY_POOL_PG_BINDIR") {
        return PathBuf::from(d);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|r| {
            r.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    found.retain(|p| p.join("initdb").exists());
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!(
            "PostgreSQL not found: install Debian's `postgresql` (scripts/test.d/postgres.sh does) \
             or set PROXY_POOL_PG_BINDIR; PostgreSQL tests never skip"
        )
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn as_pg(bin: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin);
        c
    } else {
        Command::new(bin)
    }
}

/// A running server; stopped and deleted on drop.
#[derive(Debug)]
pub struct Postgres {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Postgres {
    /// initdb + start.
    pub fn start() -> Self {
        let bin = bindir();
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("pp-analytics-pg-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        if is_root() {
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .status()
                .unwrap();
            assert!(ok.success(), "chown temp dir to postgres");
        }
        let out = as_pg(&bin.join("initdb"))
            .arg("-D")
            .arg(dir.join("data"))
            .args([
                "-U",
                "pp",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--locale=C",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut s = Self {
            dir,
            port,
            child: None,
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let bin = bindir();
        let child = as_pg(&bin.join("postgres"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(&self.dir)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
            ])
            .args([
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=30",
                "-c",
                "shared_buffers=16MB",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                let ready = Command::new(bindir().join("pg_isready"))
                    .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "pp"])
                    .stdout(Stdio::null())
                    .status()
                    .map(|s| s.success())
                    .unwrap_or(false);
                if ready {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("postgres did not start on port {}", self.port);
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A libpq key=value DSN of the `postgres` database (what a `dsnFile` holds).
    pub fn dsn(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=pp dbname=postgres connect_timeout=2",
            self.port
        )
    }

    /// A client config for the `postgres` database.
    pub fn config(&self) -> tokio_postgres::Config {
        let mut c = tokio_postgres::Config::new();
        c.host("127.0.0.1")
            .port(self.port)
            .user("pp")
            .dbname("postgres");
        c.connect_timeout(Duration::from_secs(2));
        c
    }

    /// Stops the server (fast shutdown: clients cut off, committed data kept), keeping its data.
    pub fn stop(&mut self) {
        let pidfile = self.dir.join("data/postmaster.pid");
        if let Ok(s) = std::fs::read_to_string(&pidfile)
            && let Some(pid) = s.lines().next()
        {
            let _ = Command::new("kill").args(["-INT", pid.trim()]).status();
        }
        if let Some(mut c) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(pidfile);
    }

    /// Starts it again on the same port.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The subjects of a stats summary body (`GET /api/v1/stats/summary`) as `kind/name`,
/// in the order the body lists them.
pub fn summary_subjects(summary: &serde_json::Value) -> Vec<String> {
    summary["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            format!(
                "{}/{}",
                s["kind"].as_str().unwrap(),
                s["name"].as_str().unwrap()
            )
        })
        .collect()
}
