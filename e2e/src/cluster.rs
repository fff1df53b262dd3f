//! The local single-node cluster of `scripts/cluster-up.sh` for end-to-end tests: brings
//! it up (with Proxy Pool installed), runs kubectl and helm against it, and always tears
//! it down with `scripts/cluster-down.sh` — on drop too, so a failing test cleans up.
//!
//! The cluster's settings (addresses, names) are read from `scripts/cluster/env.sh`, the
//! one place they are defined. Needs root and the preparation `scripts/test.d/cluster.sh`
//! does (binaries and images); [`LocalCluster::prepared`] says whether a test can run:
//! without it a test fails under CI and is skipped (with a message) otherwise.
//! Test fixture: panics with the cluster's log tails when a command it needs fails.
#![allow(
    clippy::expect_used,
    reason = "test fixture: a cluster command that fails fails the test with the cluster logs"
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use proxy_pool_api::controlplane::model::Secret;

use crate::procs::CommandOutput;

/// Set by `scripts/test.d/cluster.sh` once binaries and images are built.
pub const PREPARED_ENV: &str = "PROXY_POOL_CLUSTER_PREPARED";
/// How long `cluster-up.sh` may take (it builds nothing with `--no-build`).
const UP_LIMIT: Duration = Duration::from_secs(900);
/// How long `cluster-down.sh` may take.
const DOWN_LIMIT: Duration = Duration::from_secs(180);
/// Log lines quoted per file in a failure message.
const LOG_TAIL: usize = 25;

/// The per-run credentials `cluster-up.sh` created (`credentials.env`); `Debug` shows
/// only the user name.
#[derive(Clone, Debug)]
pub struct Credentials {
    /// The vendor simulator's API key.
    pub vendor_api_key: Secret,
    /// The example DistributionClient's API key.
    pub client_api_key: Secret,
    /// Its gateway user name (before routing parameters).
    pub gateway_username: String,
    /// Its gateway password.
    pub gateway_password: Secret,
}

/// A running local cluster with Proxy Pool installed.
#[derive(Debug)]
pub struct LocalCluster {
    root: PathBuf,
    settings: BTreeMap<String, String>,
    kubectl: PathBuf,
    helm: PathBuf,
    /// Credentials of the installation.
    pub credentials: Credentials,
    /// Seconds `cluster-up.sh` took.
    pub up_seconds: f64,
    /// What `cluster-up.sh` printed on stdout (how to reach the installation).
    pub up_stdout: String,
    down: bool,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

/// `NAME=value` lines of `scripts/cluster/env.sh`: plain values, and
/// `${VAR:-default}` (the environment's `VAR`, else the default); values built from
/// other settings are left out.
pub fn settings() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(repo_root().join("scripts/cluster/env.sh"))
        .expect("read scripts/cluster/env.sh");
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once('=')?;
            if !name.starts_with("CLUSTER_") || name.contains(' ') {
                return None;
            }
            let value = rest.split_whitespace().next()?.trim_matches('"');
            let value = match value
                .strip_prefix("${")
                .and_then(|v| v.strip_suffix('}'))
                .and_then(|v| v.split_once(":-"))
            {
                Some((var, default)) if !default.contains('$') => {
                    std::env::var(var).unwrap_or_else(|_| default.to_owned())
                }
                _ if value.contains('$') || value.starts_with('(') => return None,
                _ => value.to_owned(),
            };
            Some((name.to_owned(), value))
        })
        .collect()
}

async fn run(program: &Path, args: &[&str], cwd: &Path, limit: Duration) -> CommandOutput {
    let child = tokio::process::Command::new(program)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
    let out = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{} {args:?} did not finish within {limit:?}",
                program.display()
            )
        })
        .unwrap_or_else(|e| panic!("waiting for {}: {e}", program.display()));
    out.into()
}

impl LocalCluster {
    /// Whether a cluster test can run here: root and the preparation done. Under CI
    /// (`CI` set) anything missing is a failure; otherwise the test is skipped with a
    /// message saying what is missing.
    pub fn prepared(test: &str) -> bool {
        // SAFETY-free check of the effective user: the owner of /proc/self.
        let root = std::fs::metadata("/proc/self")
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
            .unwrap_or(false);
        let prepared = std::env::var_os(PREPARED_ENV).is_some_and(|v| v == "1");
        if root && prepared {
            return true;
        }
        let why = if root {
            format!(
                "{PREPARED_ENV} is not set: run `source scripts/test.d/cluster.sh` (scripts/test.sh does)"
            )
        } else {
            "it needs root (it runs containerd, the kubelet and kube-proxy)".to_owned()
        };
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: {why}, and CI is set"
        );
        eprintln!("skipping {test}: {why}");
        false
    }

    /// Runs `scripts/cluster-up.sh --no-build`; panics with its output and the logs
    /// when it fails (it has already torn down what it set up).
    pub async fn up() -> Self {
        let root = repo_root();
        let started = Instant::now();
        let out = run(
            &root.join("scripts/cluster-up.sh"),
            &["--no-build"],
            &root,
            UP_LIMIT,
        )
        .await;
        let settings = settings();
        if !out.success {
            panic!(
                "cluster-up.sh failed:\n{}\n{}\n{}",
                out.stdout,
                out.stderr,
                logs_of(&settings)
            );
        }
        let dir = PathBuf::from(&settings["CLUSTER_DIR"]);
        let bin_dir = std::fs::read_to_string(dir.join("state/bin-dir"))
            .expect("state/bin-dir")
            .trim()
            .to_owned();
        let helm = PathBuf::from(
            std::fs::read_to_string(dir.join("state/helm"))
                .expect("state/helm")
                .trim(),
        );
        let env = std::fs::read_to_string(dir.join("credentials.env")).expect("credentials.env");
        let value = |name: &str| {
            env.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
                .unwrap_or_else(|| panic!("{name} missing from credentials.env"))
                .to_owned()
        };
        Self {
            credentials: Credentials {
                vendor_api_key: Secret::new(value("VENDOR_API_KEY")),
                client_api_key: Secret::new(value("CLIENT_API_KEY")),
                gateway_username: value("GATEWAY_USERNAME"),
                gateway_password: Secret::new(value("GATEWAY_PASSWORD")),
            },
            kubectl: PathBuf::from(bin_dir).join("kubectl"),
            helm,
            root,
            settings,
            up_seconds: started.elapsed().as_secs_f64(),
            up_stdout: out.stdout,
            down: false,
        }
    }

    /// A value of `scripts/cluster/env.sh`, e.g. `setting("CLUSTER_NODE_IP")`.
    pub fn setting(&self, name: &str) -> &str {
        self.settings
            .get(name)
            .unwrap_or_else(|| panic!("{name} is not in scripts/cluster/env.sh"))
    }

    /// The admin kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        PathBuf::from(self.setting("CLUSTER_DIR")).join("admin.kubeconfig")
    }

    /// The cluster CA (it signed the Ingress certificate).
    pub fn ca_file(&self) -> PathBuf {
        PathBuf::from(self.setting("CLUSTER_DIR")).join("pki/ca.crt")
    }

    /// kubectl with the admin kubeconfig, at most `limit`.
    pub async fn kubectl(&self, args: &[&str], limit: Duration) -> CommandOutput {
        let kubeconfig = self.kubeconfig().display().to_string();
        let mut all = vec!["--kubeconfig", kubeconfig.as_str()];
        all.extend_from_slice(args);
        run(&self.kubectl, &all, &self.root, limit).await
    }

    /// kubectl that must succeed (120 s at most); its stdout.
    pub async fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args, Duration::from_secs(120)).await;
        assert!(
            out.success,
            "kubectl {args:?} failed:\n{}\n{}\n{}",
            out.stderr,
            out.stdout,
            self.logs()
        );
        out.stdout
    }

    /// kubectl … -o json, parsed.
    pub async fn kubectl_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend_from_slice(&["-o", "json"]);
        let text = self.kubectl_ok(&all).await;
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("kubectl {args:?}: {e}\n{text}"))
    }

    /// helm with the admin kubeconfig, at most `limit`.
    pub async fn helm(&self, args: &[&str], limit: Duration) -> CommandOutput {
        let kubeconfig = self.kubeconfig().display().to_string();
        let mut all = vec!["--kubeconfig", kubeconfig.as_str()];
        all.extend_from_slice(args);
        run(&self.helm, &all, &self.root, limit).await
    }

    /// The tails of every log of the cluster's processes, for failure messages.
    pub fn logs(&self) -> String {
        logs_of(&self.settings)
    }

    /// Runs `scripts/cluster-down.sh`; its output. Panics when it fails.
    pub async fn down(mut self) -> CommandOutput {
        self.down = true;
        let out = run(
            &self.root.join("scripts/cluster-down.sh"),
            &[],
            &self.root,
            DOWN_LIMIT,
        )
        .await;
        assert!(
            out.success,
            "cluster-down.sh failed:\n{}\n{}",
            out.stdout, out.stderr
        );
        out
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        if self.down {
            return;
        }
        eprintln!("tearing the cluster down (cluster-down.sh)");
        let status = std::process::Command::new(self.root.join("scripts/cluster-down.sh"))
            .current_dir(&self.root)
            .stdin(Stdio::null())
            .status();
        if !status.as_ref().is_ok_and(|s| s.success()) {
            eprintln!("cluster-down.sh failed: {status:?}");
        }
    }
}

fn logs_of(settings: &BTreeMap<String, String>) -> String {
    let Some(dir) = settings.get("CLUSTER_DIR") else {
        return String::new();
    };
    let logs = Path::new(dir).join("logs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&logs)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(LOG_TAIL)..].join("\n");
            format!("--- {} ---\n{tail}\n", f.display())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_come_from_env_sh() {
        let s = settings();
        assert_eq!(s["CLUSTER_NODE_IP"], "10.250.0.1");
        assert_eq!(s["CLUSTER_NAMESPACE"], "proxy-pool");
        assert!(s.contains_key("CLUSTER_INGRESS_HOST"), "{s:?}");
        assert!(
            s.contains_key("CLUSTER_DIR"),
            "defaults of ${{VAR:-default}} are read"
        );
        assert!(
            !s.contains_key("CLUSTER_PKI"),
            "values built from others are left out"
        );
    }
}
