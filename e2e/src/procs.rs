//! The product's binaries as child processes for end-to-end tests: built like
//! `scripts/dev-up.sh` builds them, started with their output in per-process log files,
//! and stopped (SIGTERM, then kill after a grace period) when the set is dropped.
//! Test fixture: panics with the processes' log tails when something is wrong.
#![allow(
    clippy::expect_used,
    reason = "test fixture: a process that cannot be built or started fails the test with its logs"
)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a process gets between SIGTERM and kill.
const STOP_GRACE: Duration = Duration::from_secs(20);
/// Log lines shown per process in a failure message.
const LOG_TAIL: usize = 30;

/// What one command printed, and whether it succeeded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandOutput {
    /// Exit status 0.
    pub success: bool,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl From<Output> for CommandOutput {
    fn from(out: Output) -> Self {
        Self {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// The target directory the running test binary was built into.
pub fn target_dir() -> PathBuf {
    if let Ok(t) = std::env::var("CARGO_TARGET_DIR") {
        return PathBuf::from(t);
    }
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("target dir")
        .to_path_buf()
}

/// Directory of prebuilt binaries to run instead of building them
/// (`PROXY_POOL_E2E_BIN_DIR`): for long runs (the soak) on a target directory that other
/// builds may overwrite meanwhile.
fn prebuilt_dir() -> Option<PathBuf> {
    std::env::var_os("PROXY_POOL_E2E_BIN_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

/// Path of workspace binary `name`, in the profile the running test was built with
/// (or in `PROXY_POOL_E2E_BIN_DIR` when set).
pub fn bin(name: &str) -> PathBuf {
    if let Some(dir) = prebuilt_dir() {
        return dir.join(name);
    }
    let exe = std::env::current_exe().expect("current exe");
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .map_or_else(|| "debug".into(), |p| p.to_string_lossy().into_owned());
    target_dir().join(profile).join(name)
}

/// The vendor simulator's command line (`program`: its binary): the vendor API on
/// `listen`, the HTTP and HTTPS echo servers on `echo` and `echo_tls`, the API key
/// `api_key` and proxy TTLs from `ttl.0` to `ttl.1` seconds.
pub fn vendor_sim_command(
    program: impl AsRef<std::ffi::OsStr>,
    listen: SocketAddr,
    echo: SocketAddr,
    echo_tls: SocketAddr,
    api_key: &str,
    ttl: (u32, u32),
) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(["--listen", &listen.to_string()])
        .args(["--echo-http", &echo.to_string()])
        .args(["--echo-https", &echo_tls.to_string()])
        .args(["--api-key", api_key])
        .args(["--ttl-min", &ttl.0.to_string()])
        .args(["--ttl-max", &ttl.1.to_string()]);
    cmd
}

/// [`vendor_sim_command`] for a test directory `dir`: the API key is written to
/// `<dir>/vendor-api-key` first (for a controller's `apiKeyFile`), and the simulator
/// writes the CA of its HTTPS echo server to `<dir>/ca.pem`.
pub fn vendor_sim_in(
    dir: &Path,
    program: impl AsRef<std::ffi::OsStr>,
    [listen, echo, echo_tls]: [SocketAddr; 3],
    api_key: &str,
    ttl: (u32, u32),
) -> Command {
    std::fs::write(dir.join("vendor-api-key"), api_key).expect("write the vendor API key");
    let mut cmd = vendor_sim_command(program, listen, echo, echo_tls, api_key, ttl);
    cmd.arg("--ca-out").arg(dir.join("ca.pem"));
    cmd
}

/// An `upstreams` entry of a controller config that fetches HTTP proxies from the
/// vendor simulator's API, with the API key file that [`vendor_sim_in`] writes.
#[derive(Clone, Debug)]
pub struct SimUpstream {
    /// `name` (default `sim-http`).
    pub name: &'static str,
    /// Path and query of the vendor URL on the simulator.
    pub path: String,
    /// `ttl` of its proxies.
    pub ttl: String,
    /// `quarantine`.
    pub quarantine: String,
    /// `safetyMargin`.
    pub safety_margin: &'static str,
    /// `maxConcurrencyPerProxy`.
    pub max_concurrency_per_proxy: u32,
    /// `maxSize`.
    pub max_size: u32,
    /// `fetchInterval`.
    pub fetch_interval: &'static str,
}

impl Default for SimUpstream {
    fn default() -> Self {
        Self {
            name: "sim-http",
            path: "/v1/proxies?count=4&protocol=http".into(),
            ttl: "10m".into(),
            quarantine: "0s".into(),
            safety_margin: "10s",
            max_concurrency_per_proxy: 16,
            max_size: 8,
            fetch_interval: "10s",
        }
    }
}

impl SimUpstream {
    /// The entry (`  - name: …`, a YAML list item) for the simulator's API on `sim`,
    /// its key in `dir` (as [`vendor_sim_in`] wrote it).
    pub fn yaml(&self, sim: SocketAddr, dir: &Path) -> String {
        format!(
            "  - name: {name}
    protocol: http
    ttl: {ttl}
    quarantine: {quarantine}
    safetyMargin: {margin}
    maxConcurrencyPerProxy: {concurrency}
    maxSize: {max_size}
    fetchInterval: {fetch}
    source:
      vendorApi:
        url: http://{sim}{path}
        format: json
        apiKeyFile: {key}
        timeout: 5s
",
            name = self.name,
            ttl = self.ttl,
            quarantine = self.quarantine,
            margin = self.safety_margin,
            concurrency = self.max_concurrency_per_proxy,
            max_size = self.max_size,
            fetch = self.fetch_interval,
            path = self.path,
            key = dir.join("vendor-api-key").display(),
        )
    }
}

/// The start of a controller config of a test: the activity pool in the Redis at the
/// URL `redis`, the Distribution API on `dist` with `auth` (`distribution.auth`, a YAML
/// flow mapping) and the admin API on `admin`. The caller appends the rest.
pub fn controller_config_head(
    redis: &str,
    dist: SocketAddr,
    auth: &str,
    admin: SocketAddr,
) -> String {
    controller_config_head_on(
        &format!(r#"{{backend: redis, redis: {{address: "{redis}"}}}}"#),
        dist,
        auth,
        admin,
    )
}

/// [`controller_config_head`] on the store `store` (`store`, a YAML flow mapping such
/// as `{backend: memory}`).
pub fn controller_config_head_on(
    store: &str,
    dist: SocketAddr,
    auth: &str,
    admin: SocketAddr,
) -> String {
    format!(
        r#"store: {store}
distribution:
  listen: {dist}
  auth: {auth}
admin: {{listen: {admin}}}
"#
    )
}

/// The checker's command line on a plaintext loopback control plane: `run` against
/// `controller` as checker `id`, probing through the echo server `echo`, with loopback
/// (where the simulator's proxies are) allowed as egress.
pub fn checker_command(controller: &str, id: &str, echo: SocketAddr) -> Command {
    let mut cmd = Command::new(bin("proxy-pool-checker"));
    cmd.args(["run", "--controller", controller])
        .args(["--checker-id", id, "--echo", &echo.to_string()])
        .arg("--loopback-plaintext")
        .args(["--egress-allow-cidr", "127.0.0.0/8"]);
    cmd
}

/// The gateway's command line on a plaintext loopback control plane: its HTTP, SOCKS5
/// and admin listeners, `controller`, worker `id`, loopback allowed as egress and its
/// clients from `clients_file`.
pub fn gateway_command(
    [http, socks5, admin]: [SocketAddr; 3],
    controller: &str,
    id: &str,
    clients_file: &Path,
) -> Command {
    let mut cmd = Command::new(bin("proxy-pool-gateway"));
    cmd.args(["--http-listen", &http.to_string()])
        .args(["--socks5-listen", &socks5.to_string()])
        .args(["--admin-listen", &admin.to_string()])
        .args(["--controller", controller])
        .args(["--worker-id", id])
        .args(["--egress-allow-cidr", "127.0.0.0/8"])
        .arg("--clients-file")
        .arg(clients_file);
    cmd
}

/// Builds the binaries under test (vendor simulator, controller, checker, gateway),
/// as `scripts/dev-up.sh` does.
pub fn build_binaries() {
    build_packages(&[
        "proxy-pool-e2e",
        "proxy-pool-controller",
        "proxy-pool-checker",
        "proxy-pool-gateway",
    ]);
}

/// Builds the binaries of `packages` (`cargo build -p … --bins`); with
/// `PROXY_POOL_E2E_BIN_DIR` set, nothing is built (the binaries there are used).
pub fn build_packages(packages: &[&str]) {
    if prebuilt_dir().is_some() {
        return;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cmd = Command::new(cargo);
    without_test_env(&mut cmd);
    cmd.current_dir(root).arg("build");
    for p in packages {
        cmd.args(["-p", p]);
    }
    let status = cmd.arg("--bins").status().expect("cargo build");
    assert!(status.success(), "building {packages:?} failed");
}

/// Removes from `cmd`'s environment what `cargo test` sets for the running test
/// (`CARGO_PKG_*`, `CARGO_MANIFEST_DIR`, `CARGO_BIN_EXE_*`, …), so that a cargo run
/// from a test sees the environment of one run from a shell. Build scripts watch some
/// of these variables (`ring`'s watches `CARGO_PKG_NAME` and `CARGO_MANIFEST_DIR`): with
/// the test's values they would run again, and everything above them would be rebuilt
/// — here, and once more by the next cargo run from a shell.
pub fn without_test_env(cmd: &mut Command) -> &mut Command {
    const SET_FOR_TESTS: &[&str] = &[
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
        "OUT_DIR",
    ];
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if SET_FOR_TESTS.contains(&name)
            || name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_EXE_")
        {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// A fresh directory `<temp>/pp-e2e-<tag>-<pid>` (emptied if a run left it) for one
/// test's files and process logs.
pub fn fresh_test_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pp-e2e-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the test directory");
    dir
}

/// `out` of a command run to its end (`what`), when the command succeeded; panics with
/// its status and stderr otherwise.
pub fn succeeded(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Sends `signal` (`TERM`, `INT`, `STOP`, `CONT`, …) to process `pid` with `kill`;
/// panics when `kill` fails.
pub fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}: {status}");
}

/// Polls `child` until it exits (its status) or `within` passes (`None`).
pub fn wait_for_exit(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGTERM to `child`, then its exit status when it exits within `within` (`None` when
/// it is still running).
pub fn terminate(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    send_signal(child.id(), "TERM");
    wait_for_exit(child, within)
}

/// [`terminate`] for a child of tokio's `Command`.
pub async fn terminate_async(
    child: &mut tokio::process::Child,
    within: Duration,
) -> Option<ExitStatus> {
    send_signal(child.id().expect("the child is running"), "TERM");
    let status = tokio::time::timeout(within, child.wait()).await.ok()?;
    Some(status.expect("wait for the child"))
}

/// Child processes logging into one directory, stopped in reverse start order when
/// dropped.
#[derive(Debug)]
pub struct Procs {
    children: Vec<(String, Child)>,
    /// Killed on purpose (their logs are still shown).
    killed: Vec<String>,
    dir: PathBuf,
}

impl Procs {
    /// Processes whose logs go to `<dir>/<name>.log` (`dir` must exist).
    pub fn new(dir: &Path) -> Self {
        Self {
            children: Vec::new(),
            killed: Vec::new(),
            dir: dir.to_owned(),
        }
    }

    /// Starts `cmd` as `name` with `RUST_LOG=info`, stdout and stderr to its log file.
    pub fn start(&mut self, name: &str, cmd: &mut Command) {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).expect("log file");
        let err = log.try_clone().expect("log file");
        let child = cmd
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        self.children.push((name.to_owned(), child));
    }

    /// The process id of `name` (panics when no such process was started).
    pub fn pid(&self, name: &str) -> u32 {
        self.children
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c.id())
            .unwrap_or_else(|| panic!("no process {name}"))
    }

    /// SIGKILLs the process started as `name` (no shutdown of any kind) and reaps it;
    /// its log stays. Start it again under another name.
    pub fn kill(&mut self, name: &str) {
        if let Some(i) = self.children.iter().position(|(n, _)| n == name) {
            let (_, mut child) = self.children.remove(i);
            let _ = child.kill();
            let _ = child.wait();
            self.killed.push(name.to_owned());
        }
    }

    /// Sends `signal` (`STOP`, `CONT`, `TERM`, …) to the process started as `name`.
    pub fn signal(&mut self, name: &str, signal: &str) {
        let (_, child) = self
            .children
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no process {name}"));
        send_signal(child.id(), signal);
    }

    /// Waits up to `within` for the process started as `name` to exit; when it did,
    /// it leaves the set (its log stays) and its status is returned.
    pub fn wait_exit(&mut self, name: &str, within: Duration) -> Option<std::process::ExitStatus> {
        let i = self.children.iter().position(|(n, _)| n == name)?;
        let status = wait_for_exit(&mut self.children[i].1, within)?;
        self.children.remove(i);
        self.killed.push(name.to_owned());
        Some(status)
    }

    /// Polls `ok` every 300 ms until it holds; panics, with every process's log tail,
    /// when one of them exits first or `within` passes.
    pub fn wait_until(&mut self, what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
        let deadline = Instant::now() + within;
        while !ok() {
            self.all_alive();
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Panics, with every process's log tail, if one of them has exited.
    pub fn all_alive(&mut self) {
        let mut dead = None;
        for (name, child) in &mut self.children {
            if let Ok(Some(status)) = child.try_wait() {
                dead = Some(format!("{name} exited early: {status}"));
            }
        }
        if let Some(dead) = dead {
            panic!("{dead}\n{}", self.logs());
        }
    }

    /// The last lines of every process's log, for failure messages.
    pub fn logs(&self) -> String {
        self.killed
            .iter()
            .chain(self.children.iter().map(|(name, _)| name))
            .map(|name| {
                let text = std::fs::read_to_string(self.dir.join(format!("{name}.log")))
                    .unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(LOG_TAIL).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {name} ---\n{}\n", tail.join("\n"))
            })
            .collect()
    }

    /// SIGTERM to every process (last started first), then kill what is still running
    /// after the grace period.
    pub fn stop(&mut self) {
        for (_, child) in self.children.iter_mut().rev() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        for (_, child) in self.children.iter_mut().rev() {
            let _ = wait_for_exit(child, STOP_GRACE);
            let _ = child.kill();
            let _ = child.wait();
        }
        self.children.clear();
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The lower-case hex SHA-256 of `secret`, as the controller config's `sha256` fields take
/// it (computed by `sha256sum`, which every test machine has); panics when it cannot run.
pub fn sha256_hex(secret: &str) -> String {
    use std::io::Write as _;
    let out = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child
                .stdin
                .take()
                .expect("sha256sum's stdin")
                .write_all(secret.as_bytes())?;
            child.wait_with_output()
        })
        .expect("sha256sum");
    String::from_utf8(out.stdout)
        .expect("hex")
        .split_whitespace()
        .next()
        .expect("digest")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cargo_run_from_a_test_gets_none_of_the_test_s_cargo_variables() {
        // `cargo test` set these for this very process.
        assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let mut cmd = Command::new("cargo");
        without_test_env(&mut cmd);
        let removed: Vec<String> = cmd
            .get_envs()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        for name in ["CARGO_PKG_NAME", "CARGO_PKG_VERSION", "CARGO_MANIFEST_DIR"] {
            assert!(removed.iter().any(|r| r == name), "{name}: {removed:?}");
        }
        assert!(
            !removed
                .iter()
                .any(|r| r == "CARGO_TARGET_DIR" || r == "CARGO_HOME"),
            "the caller's own cargo settings stay: {removed:?}"
        );
    }
}
