//! One of each product process on loopback — vendor simulator, controller, checker,
//! gateway — in one test directory: the stack of the end-to-end tests that watch one
//! gateway against one controller (metering, usage, alerting). The test says what the
//! controller's config holds beyond the plumbing (store, routings, clients, analytics)
//! and which identities the gateway's clients file lists; [`SingleStack::start`] starts
//! the processes in order and returns once the gateway holds a snapshot.
//! Test fixture: panics with the processes' log tails when something is wrong.
#![allow(
    clippy::expect_used,
    reason = "test fixture: a stack that cannot be set up fails the test with its logs"
)]

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;

use crate::http::{get, status_of};
use crate::ports::free_addr;
use crate::procs::{
    Procs, SimUpstream, bin, build_binaries, checker_command, controller_config_head_on,
    fresh_test_dir, gateway_command, vendor_sim_in,
};

/// Readiness bound of each process (and of the first proxied request).
pub const READY_WITHIN: Duration = Duration::from_secs(120);
/// The vendor simulator's API key.
const VENDOR_KEY: &str = "e2e-vendor-key";
/// The lifetimes of the simulator's proxies, in seconds: longer than any such test.
const PROXY_TTL: (u32, u32) = (300, 900);
/// Bound on one proxied request of [`SingleStack::wait_proxied`].
const PROXIED_WITHIN: Duration = Duration::from_secs(15);

/// The loopback listeners of the stack, picked when it is set up.
#[derive(Clone, Copy, Debug)]
pub struct Listeners {
    /// The simulator's vendor API.
    pub sim: SocketAddr,
    /// The simulator's HTTP echo server (`GET /bytes/N` streams N bytes; any other
    /// path is echoed).
    pub echo: SocketAddr,
    /// The simulator's HTTPS echo server.
    pub echo_tls: SocketAddr,
    /// The controller's Distribution API.
    pub dist: SocketAddr,
    /// The controller's admin listener (`/healthz`, `/metrics`, the stats API).
    pub admin: SocketAddr,
    /// The controller's control plane (plaintext).
    pub cp: SocketAddr,
    /// The gateway's HTTP proxy.
    pub gw_http: SocketAddr,
    /// The gateway's SOCKS5 proxy.
    pub gw_socks: SocketAddr,
    /// The gateway's admin listener (`/readyz`, `/metrics`).
    pub gw_admin: SocketAddr,
}

/// The stack of one test: its directory (files and process logs), its listeners and
/// its processes (stopped when it is dropped).
#[derive(Debug)]
pub struct SingleStack {
    /// The processes; their logs for failure messages.
    pub procs: Procs,
    /// The test directory.
    pub dir: PathBuf,
    /// The controller's config file ([`SingleStack::write_config`] writes it).
    pub config: PathBuf,
    /// Where everything listens.
    pub at: Listeners,
}

impl SingleStack {
    /// Builds the binaries and sets up a fresh directory `pp-e2e-<tag>-<pid>` and the
    /// listeners; nothing runs yet.
    pub fn new(tag: &str) -> Self {
        build_binaries();
        let dir = fresh_test_dir(tag);
        let at = Listeners {
            sim: free_addr(),
            echo: free_addr(),
            echo_tls: free_addr(),
            dist: free_addr(),
            admin: free_addr(),
            cp: free_addr(),
            gw_http: free_addr(),
            gw_socks: free_addr(),
            gw_admin: free_addr(),
        };
        Self {
            procs: Procs::new(&dir),
            config: dir.join("controller.yaml"),
            dir,
            at,
        }
    }

    /// Writes the gateway's clients file: one identity per `(name, password)`, the
    /// username being the client name.
    pub fn write_clients(&self, clients: &[(&str, &str)]) {
        let entries: Vec<String> = clients
            .iter()
            .map(|(c, p)| format!(r#"{{"client":"{c}","username":"{c}","password":"{p}"}}"#))
            .collect();
        std::fs::write(
            self.dir.join("gateway-clients.json"),
            format!("[{}]\n", entries.join(",")),
        )
        .expect("write the gateway clients file");
    }

    /// Writes the controller's config: `store` (a YAML flow mapping, e.g.
    /// `{backend: memory}`), the Distribution API without authentication, the admin
    /// listener, the plaintext control plane with the keys `control_plane` adds (YAML
    /// lines, indented here), the simulator's API as upstream `sim-http`, then `rest`
    /// (routings on `sim-http`, clients, analytics, shutdown…) and egress to loopback,
    /// where the simulator's proxies are.
    pub fn write_config(&self, store: &str, control_plane: &str, rest: &str) {
        let control_plane: String = control_plane.lines().map(|l| format!("  {l}\n")).collect();
        let at = &self.at;
        std::fs::write(
            &self.config,
            format!(
                r#"{head}controlPlane:
  enabled: true
  listen: {cp}
  loopbackPlaintext: true
{control_plane}upstreams:
{upstream}{rest}
# The simulator's proxies are on loopback: opted in explicitly.
egress: {{allowCidrs: [127.0.0.0/8]}}
"#,
                head = controller_config_head_on(store, at.dist, "{mode: none}", at.admin),
                cp = at.cp,
                upstream = SimUpstream::default().yaml(at.sim, &self.dir),
            ),
        )
        .expect("write the controller config");
    }

    /// `proxy-pool-controller <subcommand> --config <the config>` (`migrate`, `run`).
    pub fn controller_command(&self, subcommand: &str) -> Command {
        let mut cmd = Command::new(bin("proxy-pool-controller"));
        cmd.args([subcommand, "--config"]).arg(&self.config);
        cmd
    }

    /// Starts the simulator, the controller (as process `controller`), the checker
    /// (its health checks make the simulator's proxies available) and the gateway, each
    /// once the one before is ready; returns once the gateway holds a snapshot.
    pub fn start(&mut self) {
        let at = self.at;
        self.procs.start(
            "vendor-sim",
            &mut vendor_sim_in(
                &self.dir,
                bin("vendor-sim"),
                [at.sim, at.echo, at.echo_tls],
                VENDOR_KEY,
                PROXY_TTL,
            ),
        );
        self.procs.wait_until("vendor simulator", READY_WITHIN, || {
            get(at.sim, "/healthz").0 == 200
        });
        self.start_controller("controller");
        let controller = format!("http://{}", at.cp);
        self.procs.start(
            "checker",
            &mut checker_command(&controller, "e2e-checker", at.echo),
        );
        self.procs.start(
            "gateway",
            &mut gateway_command(
                [at.gw_http, at.gw_socks, at.gw_admin],
                &controller,
                "e2e-gateway",
                &self.dir.join("gateway-clients.json"),
            ),
        );
        self.procs.wait_until("gateway snapshot", READY_WITHIN, || {
            get(at.gw_admin, "/readyz").0 == 200
        });
    }

    /// Starts the controller as process `name` (a new name after the last one stopped)
    /// and waits until its admin listener answers.
    pub fn start_controller(&mut self, name: &str) {
        self.procs.start(name, &mut self.controller_command("run"));
        let admin = self.at.admin;
        self.procs
            .wait_until(name, READY_WITHIN, || get(admin, "/healthz").0 == 200);
    }

    /// Waits until a GET through the gateway's HTTP proxy as `(user, password)` is
    /// answered 200 (the checker has made a proxy available).
    pub fn wait_proxied(&mut self, (user, password): (&str, &str)) {
        let (gw, echo) = (self.at.gw_http, self.at.echo);
        self.procs
            .wait_until("a proxied request", READY_WITHIN, || {
                proxied_status(gw, echo, (user, password)) == 200
            });
    }

    /// Stops every process and removes the directory (a test that fails before this
    /// keeps it, logs included).
    pub fn tear_down(mut self) {
        self.procs.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The status of `GET http://<echo>/ready` through the gateway's HTTP proxy `gw` as
/// `(user, password)` (`Connection: close`); 0 when nothing answers.
fn proxied_status(gw: SocketAddr, echo: SocketAddr, (user, password): (&str, &str)) -> u16 {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let req = format!(
        "GET http://{echo}/ready HTTP/1.1\r\nHost: {echo}\r\nProxy-Authorization: Basic {auth}\r\nConnection: close\r\n\r\n"
    );
    let Ok(mut s) = TcpStream::connect_timeout(&gw, PROXIED_WITHIN) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(PROXIED_WITHIN));
    let mut raw = Vec::new();
    if s.write_all(req.as_bytes()).is_err() || s.read_to_end(&mut raw).is_err() {
        return 0;
    }
    status_of(&String::from_utf8_lossy(&raw))
}
