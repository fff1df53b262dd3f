//! The README's first command: `scripts/dev-up.sh` starts the whole stack, the curl
//! commands it prints work (HTTP and SOCKS5 through the gateway reach the simulator's
//! echo server through a simulator proxy; the Distribution API hands out proxies), and
//! SIGTERM — or Ctrl-C, SIGINT to the whole process group — stops every process.
//!
//! Builds the four binaries through the script (a no-op when they are fresh) into the
//! target directory this test runs from; ports come from a free random range. Without
//! curl the tests are skipped with a message, except under CI (`CI` set), where they fail.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};

use activity_pool::testkit::RedisServer;
use proxy_pool_e2e::ports::free_ports;
use proxy_pool_e2e::procs::{target_dir, without_test_env};

const PORTS: u16 = 10;

/// One stack at a time: the tests share the process id (state directory) and the
/// port picker, and two stacks would only compete for the machine's cores.
static ONE_STACK: Mutex<()> = Mutex::new(());

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether the tests can run: curl is needed. Outside CI a missing curl skips them
/// (with a message); under CI (`CI` set, and `scripts/test.sh` installs curl) it fails.
fn curl_or_skip(stack: &str) -> bool {
    if have("curl") {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "stack {stack}: curl is not installed, and CI is set (scripts/test.sh installs curl)"
    );
    eprintln!("skipping stack {stack}: curl is not installed (scripts/test.sh installs it)");
    false
}

/// How the test stops the stack.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// SIGTERM to the script (a supervisor's stop).
    Term,
    /// SIGINT to the script's whole process group (Ctrl-C in its terminal).
    CtrlC,
}

/// The script, in its own process group; SIGTERM to it if the test ends early.
struct Stack {
    child: Child,
    done: bool,
}

impl Stack {
    fn sigterm(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }

    fn ctrl_c(&self) {
        // The script leads its process group (`process_group(0)`): the group's id is
        // its pid, and a terminal's Ctrl-C reaches every process of the group.
        let status = Command::new("kill")
            .args(["-INT", "--", &format!("-{}", self.child.id())])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -INT of the process group: {status}");
    }

    fn stop(&mut self, how: Stop) -> ExitStatus {
        match how {
            Stop::Term => self.sigterm(),
            Stop::CtrlC => self.ctrl_c(),
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s;
            }
            assert!(Instant::now() < deadline, "dev-up.sh did not exit");
            std::thread::sleep(Duration::from_millis(100));
        };
        self.done = true;
        status
    }
}

/// A process seen in `/proc`: its pid, start time (pids are reused), name and
/// process group.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Proc {
    pid: u32,
    start: u64,
    name: String,
    group: u32,
}

/// `(parent pid, process)` from `/proc/<pid>/stat`; `None` once it is gone or a zombie.
fn proc_stat(pid: u32) -> Option<(u32, Proc)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`: comm may hold spaces and parentheses.
    let (head, rest) = stat.rsplit_once(')')?;
    let name = head.split_once('(')?.1.to_string();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
        return None;
    }
    let ppid = fields.get(1)?.parse().ok()?;
    let group = fields.get(2)?.parse().ok()?;
    // Field 22 of stat (starttime) is the 20th after the comm.
    let start = fields.get(19)?.parse().ok()?;
    Some((
        ppid,
        Proc {
            pid,
            start,
            name,
            group,
        },
    ))
}

/// Every live descendant of `root`.
fn descendants(root: u32) -> Vec<Proc> {
    let all: Vec<(u32, Proc)> = std::fs::read_dir("/proc")
        .expect("read /proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(proc_stat)
        .collect();
    let mut found: Vec<Proc> = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for (ppid, p) in &all {
            if *ppid == parent && !found.contains(p) {
                parents.push(p.pid);
                found.push(p.clone());
            }
        }
    }
    found
}

fn still_running(p: &Proc) -> bool {
    proc_stat(p.pid).is_some_and(|(_, now)| now.start == p.start)
}

impl Drop for Stack {
    fn drop(&mut self) {
        if !self.done {
            self.sigterm();
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Splits a printed `curl …` line into arguments (single quotes only, as printed).
fn shell_words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

fn curl(args: &[String]) -> serde_json::Value {
    assert_eq!(args[0], "curl");
    let out = Command::new("curl")
        .args(["-sS", "--fail-with-body", "--max-time", "10"])
        .args(&args[1..])
        .output()
        .expect("run curl");
    let body = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "curl {:?} failed: {} {}",
        &args[1..args.len().min(3)],
        body,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

fn assert_egress(answer: &serde_json::Value) {
    let remote = answer["remote"].as_str().expect("remote");
    let ip = remote.rsplit_once(':').expect("ip:port").0;
    assert!(
        ip.starts_with("127.0.") && ip != "127.0.0.1",
        "the echo server should see a simulator proxy's egress, saw {remote}"
    );
}

/// A running stack and what it printed.
struct Up {
    stack: Stack,
    base: u16,
    dev_dir: PathBuf,
    printed: Vec<String>,
    /// When it printed `dev-up: ready`.
    started: Instant,
    /// The [`ONE_STACK`] lock, held until the stack is gone (dropped last).
    _one: MutexGuard<'static, ()>,
}

/// Starts `scripts/dev-up.sh` in its own process group, once no other stack runs, and
/// waits until it is ready; `None` when the test is to be skipped ([`curl_or_skip`]).
fn dev_up(name: &str) -> Option<Up> {
    dev_up_with(name, &[])
}

/// [`dev_up`] with extra arguments for the script (e.g. `--redis URL`).
fn dev_up_with(name: &str, args: &[&str]) -> Option<Up> {
    if !curl_or_skip(name) {
        return None;
    }
    let one = ONE_STACK.lock().unwrap_or_else(|e| e.into_inner());
    let root = repo_root();
    let base = free_ports(PORTS);
    let dev_dir = std::env::temp_dir().join(format!(
        "proxy-pool-quickstart-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dev_dir);
    // As from a terminal: SIGINT at its default. A suite started in the background
    // (`nohup … &`, a non-interactive shell's `&`) runs with SIGINT ignored, which every
    // child inherits, and a shell cannot trap a signal ignored when it started: the
    // script would sleep through the Ctrl-C (GNU env resets it before bash starts).
    let mut cmd = Command::new("env");
    // Its `cargo build` as from a shell (the test's cargo variables would rebuild).
    without_test_env(&mut cmd)
        .args(["--default-signal=INT", "bash"])
        .arg(root.join("scripts/dev-up.sh"))
        .current_dir(&root)
        .env("DEV_PORT_BASE", base.to_string())
        .env("DEV_DIR", &dev_dir)
        .env("DEV_READY_TIMEOUT", "90")
        .env("CARGO_TARGET_DIR", target_dir())
        .env_remove("PROXY_POOL_REDIS_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if std::env::var_os("QUICKSTART_NO_BUILD").is_some() {
        cmd.arg("--no-build");
    }
    cmd.args(args);
    cmd.process_group(0);
    let mut child = cmd.spawn().expect("start dev-up.sh");
    let stdout = child.stdout.take().expect("stdout");
    let stack = Stack { child, done: false };

    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("dev-up> {line}");
            // Keep reading after the receiver is gone: a closed pipe must not cut
            // the script's shutdown short.
            let _ = tx.send(line);
        }
    });
    // The build may take long on a cold machine; the stack itself must come up fast.
    let deadline = Instant::now() + Duration::from_secs(1_800);
    let mut printed = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line == "dev-up: ready" => break,
            Ok(line) => printed.push(line),
            Err(e) => panic!("dev-up.sh did not get ready: {e}; printed: {printed:#?}"),
        }
    }
    Some(Up {
        stack,
        base,
        dev_dir,
        printed,
        started: Instant::now(),
        _one: one,
    })
}

/// Stops the stack `how`, then checks the script's exit status, that every process it
/// started has exited, that the stack's ports are closed and that the controller and
/// the gateway logged a clean stop.
fn stop_and_check(mut up: Up, how: Stop) {
    let children = descendants(up.stack.child.id());
    // The services' process names (comm is cut to 15 bytes).
    let services = [
        "vendor-sim",
        "proxy-pool-cont",
        "proxy-pool-chec",
        "proxy-pool-gate",
    ];
    for name in services {
        assert!(
            children.iter().any(|p| p.name == name),
            "{name} is not a child of dev-up.sh: {children:?}"
        );
    }
    // The services run outside the script's process group (it leads its own): a
    // terminal's Ctrl-C reaches only the script, which stops them newest first. In its
    // group each service got the Ctrl-C too and stopped on its own, in no order; when
    // the script missed the signal (started with SIGINT ignored) the supervision loop
    // saw a service gone and exited 1 ("exited unexpectedly").
    let script_group = up.stack.child.id();
    let in_group: Vec<_> = children
        .iter()
        .filter(|p| services.contains(&p.name.as_str()) && p.group == script_group)
        .collect();
    assert!(
        in_group.is_empty(),
        "services in dev-up.sh's process group: {in_group:?}"
    );
    let status = up.stack.stop(how);
    let (code, signal) = match how {
        Stop::Term => (143, "SIGTERM"),
        Stop::CtrlC => (130, "SIGINT"),
    };
    assert_eq!(
        status.code(),
        Some(code),
        "dev-up.sh should exit {code} on {signal}, got {status}"
    );
    let left: Vec<&Proc> = children
        .iter()
        .filter(|p| services.contains(&p.name.as_str()) && still_running(p))
        .collect();
    assert!(left.is_empty(), "still running after {signal}: {left:?}");
    // Anything else the script had running (its watch loop's `sleep 1`) ends by itself
    // within a second or so; it must not be left behind.
    let deadline = Instant::now() + Duration::from_secs(5);
    let left = loop {
        let left: Vec<&Proc> = children.iter().filter(|p| still_running(p)).collect();
        if left.is_empty() || Instant::now() > deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(left.is_empty(), "left behind after {signal}: {left:?}");
    for i in [0, 1, 3, 4, 5, 6, 7, 8] {
        assert!(
            TcpStream::connect_timeout(
                &(std::net::Ipv4Addr::LOCALHOST, up.base + i).into(),
                Duration::from_millis(500)
            )
            .is_err(),
            "port {} still open after {signal}",
            up.base + i
        );
    }
    let log = std::fs::read_to_string(up.dev_dir.join("logs/controller.log")).expect("log");
    assert!(
        log.contains("controller stopped"),
        "controller did not stop cleanly"
    );
    let log = std::fs::read_to_string(up.dev_dir.join("logs/gateway.log")).expect("log");
    assert!(
        log.contains("gateway stopped"),
        "gateway did not stop cleanly"
    );
    assert!(
        up.started.elapsed() < Duration::from_secs(60),
        "took {:?} after the stack was up",
        up.started.elapsed()
    );
    let _ = std::fs::remove_dir_all(&up.dev_dir);
}

/// The `curl` commands the script printed, split into words.
fn printed_curls(printed: &[String]) -> impl Iterator<Item = Vec<String>> + '_ {
    printed
        .iter()
        .map(|l| l.trim())
        .filter(|l| l.starts_with("curl "))
        .map(shell_words)
}

/// The printed `curl -x <scheme>…` command.
fn via(printed: &[String], scheme: &str) -> Vec<String> {
    printed_curls(printed)
        .find(|c| c.len() > 2 && c[1] == "-x" && c[2].starts_with(scheme))
        .unwrap_or_else(|| panic!("no printed `curl -x {scheme}…`: {printed:#?}"))
}

/// The printed `curl` command with an argument containing `needle`.
fn printed_with(printed: &[String], needle: &str) -> Vec<String> {
    printed_curls(printed)
        .find(|c| c.iter().any(|a| a.contains(needle)))
        .unwrap_or_else(|| panic!("no printed command with {needle}: {printed:#?}"))
}

#[test]
fn dev_up_serves_the_printed_commands_and_stops_on_sigterm() {
    let Some(up) = dev_up("term") else { return };
    let printed = &up.printed;
    let find = |needle: &str| printed_with(printed, needle);

    // HTTP and SOCKS5 through the gateway, to the echo server, through a sim proxy.
    let http = via(printed, "http://");
    let socks = via(printed, "socks5h://");
    for _ in 0..3 {
        assert_egress(&curl(&http));
        assert_egress(&curl(&socks));
    }
    let echo = curl(&http);
    assert_eq!(echo["path"], "/hello");

    // The Distribution API hands out two proxies with working credentials.
    let extract = curl(&find("/api/v1/proxies/extract"));
    assert_eq!(extract["returned"], 2, "{extract}");
    let proxies = extract["proxies"].as_array().expect("proxies");
    assert_eq!(proxies.len(), 2);
    let echo_url = http.last().expect("echo url").clone();
    for p in proxies {
        let url = p["url"]
            .as_str()
            .expect("url")
            .replace("socks5://", "socks5h://");
        let answer = curl(&["curl".into(), "-x".into(), url, echo_url.clone()]);
        assert_egress(&answer);
    }
    let inventory = curl(&find("/api/v1/inventory"));
    assert!(
        inventory["upstreams"]
            .as_array()
            .is_some_and(|u| u.len() == 2)
    );

    // SIGTERM stops everything.
    stop_and_check(up, Stop::Term);
}

#[test]
fn dev_up_stops_every_process_on_ctrl_c() {
    let Some(up) = dev_up("int") else { return };
    // The stack serves (a tunnel through the gateway) before it is stopped.
    assert_egress(&curl(&via(&up.printed, "socks5h://")));
    stop_and_check(up, Stop::CtrlC);
}

/// `DBSIZE` of the Redis server on `port`, over a raw RESP exchange.
fn redis_dbsize(port: u16) -> u64 {
    use std::io::{Read, Write};
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("redis connects");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"*1\r\n$6\r\nDBSIZE\r\n").unwrap();
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).expect("redis answers");
    let reply = String::from_utf8_lossy(&buf[..n]);
    reply
        .strip_prefix(':')
        .and_then(|r| r.trim().parse().ok())
        .unwrap_or_else(|| panic!("unexpected DBSIZE reply {reply:?}"))
}

/// `dev-up.sh --redis URL`: the controller keeps its activity pool in that Redis (a real
/// redis-server here), and the stack serves extraction and traffic the same way.
#[test]
fn dev_up_with_redis_keeps_the_pool_in_redis() {
    let redis = RedisServer::start();
    assert_eq!(redis_dbsize(redis.port()), 0, "a fresh server");
    let url = redis.url();
    let Some(up) = dev_up_with("redis", &["--redis", &url]) else {
        return;
    };
    let extract = printed_with(&up.printed, "/api/v1/proxies/extract");
    let answer = curl(&extract);
    assert_eq!(answer["returned"], 2, "{answer}");
    assert!(
        redis_dbsize(redis.port()) > 0,
        "the pool lives in the given Redis"
    );
    assert_egress(&curl(&via(&up.printed, "http://")));
    stop_and_check(up, Stop::Term);
}
