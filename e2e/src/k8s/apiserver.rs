//! [`KubeApiServer`]: etcd + kube-apiserver on loopback, a kubeconfig for them, a
//! `kube::Client`, and `kubectl` pointed at them.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::process::{Spawned, TempDir, free_ports};
use super::{HarnessError, K8sBins, pki::Pki};
use crate::procs::CommandOutput;

/// Issuer (and default audience) of the ServiceAccount tokens this API server signs.
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// How long etcd may take to accept connections.
const ETCD_READY: Duration = Duration::from_secs(60);
/// How long kube-apiserver may take to report `/readyz` ok (a loaded 2-core box is slow).
const APISERVER_READY: Duration = Duration::from_secs(180);
/// How long kube-controller-manager may take to run its ServiceAccount controller.
const CONTROLLER_MANAGER_READY: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(250);
/// Start attempts; a retry covers a free port taken between choosing and binding it.
const START_ATTEMPTS: usize = 3;

/// A running test control plane. Dropping it kills the processes and deletes its files.
pub struct KubeApiServer {
    controller_manager: Option<Spawned>,
    apiserver: Spawned,
    etcd: Spawned,
    url: String,
    kubeconfig: PathBuf,
    kubectl: PathBuf,
    client: kube::Client,
    sa_key: PathBuf,
    ca: PathBuf,
    // Last: removed after the processes are gone.
    dir: TempDir,
}

impl fmt::Debug for KubeApiServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeApiServer")
            .field("url", &self.url)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl KubeApiServer {
    /// Starts etcd and kube-apiserver from `bins` and waits until the API server is ready.
    pub async fn start(bins: &K8sBins) -> Result<Self, HarnessError> {
        let mut attempt = 1;
        loop {
            match Self::start_once(bins).await {
                Err(HarnessError::Exited { log, .. })
                    if attempt < START_ATTEMPTS && log.contains("address already in use") =>
                {
                    tracing::warn!(attempt, "a chosen port was taken; starting again");
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// [`KubeApiServer::start`] for a test, which cannot go on without it: panics with
    /// what failed. With `controller_manager`, kube-controller-manager runs too
    /// ([`KubeApiServer::start_controller_manager`]).
    pub async fn start_for_test(bins: &K8sBins, controller_manager: bool) -> Self {
        let mut cluster = Self::start(bins)
            .await
            .unwrap_or_else(|e| panic!("starting etcd + kube-apiserver: {e}"));
        if controller_manager {
            cluster
                .start_controller_manager(bins)
                .await
                .unwrap_or_else(|e| panic!("starting kube-controller-manager: {e}"));
        }
        cluster
    }

    async fn start_once(bins: &K8sBins) -> Result<Self, HarnessError> {
        let dir = TempDir::new("proxy-pool-k8s")?;
        let files = write_pki(dir.path())?;
        let [etcd_port, peer_port, api_port] = free_ports::<3>()?;

        let mut etcd = Spawned::start(
            "etcd",
            etcd_command(&bins.etcd()?, dir.path(), etcd_port, peer_port),
            dir.path().join("etcd.log"),
        )?;
        wait_for_tcp(&mut etcd, etcd_port).await?;

        let mut apiserver = Spawned::start(
            "kube-apiserver",
            apiserver_command(
                &bins.kube_apiserver()?,
                dir.path(),
                &files,
                etcd_port,
                api_port,
            ),
            dir.path().join("kube-apiserver.log"),
        )?;
        let url = format!("https://127.0.0.1:{api_port}");
        let kubeconfig = dir.path().join("kubeconfig");
        let text = kubeconfig_yaml(&url, &files.pki)?;
        std::fs::write(&kubeconfig, &text).map_err(HarnessError::io("write kubeconfig"))?;
        let client = client_from(&text).await?;
        wait_ready(&client, &mut apiserver, &mut etcd).await?;
        tracing::info!(%url, dir = %dir.path().display(), "kube-apiserver ready");
        Ok(Self {
            controller_manager: None,
            apiserver,
            etcd,
            url,
            kubeconfig,
            kubectl: bins.kubectl()?,
            client,
            sa_key: files.sa_key,
            ca: files.ca,
            dir,
        })
    }

    /// Starts kube-controller-manager against this API server (garbage collector,
    /// ServiceAccount + token controllers, Deployment/ReplicaSet controllers, ...;
    /// no scheduler or kubelet, so Pods stay Pending) and waits until its
    /// ServiceAccount controller has created `default/default`. Needs the binary that
    /// `scripts/k8s-bins.sh --with-controller-manager` builds.
    pub async fn start_controller_manager(&mut self, bins: &K8sBins) -> Result<(), HarnessError> {
        if self.controller_manager.is_some() {
            return Ok(());
        }
        let bin = bins.kube_controller_manager()?;
        let [port] = free_ports::<1>()?;
        let kubeconfig = self.kubeconfig.display().to_string();
        let mut cmd = Command::new(bin);
        cmd.arg(format!("--kubeconfig={kubeconfig}"))
            .arg(format!("--authentication-kubeconfig={kubeconfig}"))
            .arg(format!("--authorization-kubeconfig={kubeconfig}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg(format!(
                "--cert-dir={}",
                self.dir.path().join("kcm-certs").display()
            ))
            .arg("--leader-elect=false")
            .arg(format!(
                "--service-account-private-key-file={}",
                self.sa_key.display()
            ))
            .arg(format!("--root-ca-file={}", self.ca.display()))
            .arg("--v=1");
        let mut kcm = Spawned::start(
            "kube-controller-manager",
            cmd,
            self.dir.path().join("kube-controller-manager.log"),
        )?;
        let sas: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
            kube::Api::namespaced(self.client.clone(), "default");
        wait_until(&mut [&mut kcm], CONTROLLER_MANAGER_READY, || async {
            match sas.get_opt("default").await {
                Ok(Some(_)) => Ok(()),
                Ok(None) => Err("ServiceAccount default/default not created yet".to_owned()),
                Err(e) => Err(e.to_string()),
            }
        })
        .await?;
        tracing::info!("kube-controller-manager ready");
        self.controller_manager = Some(kcm);
        Ok(())
    }

    /// A client authenticated as a cluster admin (`system:masters`).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Admin kubeconfig file.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The `kubectl` binary.
    pub fn kubectl_path(&self) -> &Path {
        &self.kubectl
    }

    /// `kubectl --kubeconfig <admin kubeconfig>`, ready for more arguments.
    pub fn kubectl(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.kubectl);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .kill_on_drop(true);
        cmd
    }

    /// Runs kubectl with `args` (and `stdin` piped in), at most `timeout`; a non-zero
    /// exit is a [`CommandOutput`] with `success: false`, not an error.
    pub async fn run_kubectl(
        &self,
        args: &[&str],
        stdin: Option<&str>,
        timeout: Duration,
    ) -> Result<CommandOutput, HarnessError> {
        use std::process::Stdio;
        use tokio::io::AsyncWriteExt as _;
        let mut cmd = self.kubectl();
        cmd.args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(HarnessError::io("spawning kubectl"))?;
        if let Some(input) = stdin
            && let Some(mut pipe) = child.stdin.take()
        {
            pipe.write_all(input.as_bytes())
                .await
                .map_err(HarnessError::io("writing kubectl's stdin"))?;
        }
        let owned = || args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
        let out = tokio::time::timeout(timeout, child.wait_with_output())
            .await
            .map_err(|_| HarnessError::KubectlTimeout {
                args: owned(),
                secs: timeout.as_secs(),
            })?
            .map_err(HarnessError::io("waiting for kubectl"))?;
        Ok(out.into())
    }

    /// Runs kubectl (at most 120 s) and returns its stdout; failing, or printing
    /// anything on stderr (a warning), is an error.
    pub async fn kubectl_ok(
        &self,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<String, HarnessError> {
        let out = self
            .run_kubectl(args, stdin, Duration::from_secs(120))
            .await?;
        if out.success && out.stderr.trim().is_empty() {
            return Ok(out.stdout);
        }
        Err(HarnessError::Kubectl {
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            success: out.success,
            stdout: out.stdout,
            stderr: out.stderr,
        })
    }

    /// Tails of the etcd and kube-apiserver logs, for test failure messages.
    pub fn logs(&self) -> String {
        [
            Some(&self.etcd),
            Some(&self.apiserver),
            self.controller_manager.as_ref(),
        ]
        .into_iter()
        .flatten()
        .map(|p| format!("--- {} ---\n{}\n", p.name(), p.log_tail()))
        .collect()
    }
}

impl Drop for KubeApiServer {
    fn drop(&mut self) {
        if let Some(kcm) = &mut self.controller_manager {
            kcm.stop();
        }
        self.apiserver.stop();
        self.etcd.stop();
    }
}

/// Where the PKI files were written.
struct PkiFiles {
    pki: Pki,
    ca: PathBuf,
    serving_cert: PathBuf,
    serving_key: PathBuf,
    sa_key: PathBuf,
    sa_pub: PathBuf,
}

fn write_pki(dir: &Path) -> Result<PkiFiles, HarnessError> {
    let pki = Pki::generate()?;
    let write = |name: &str, pem: &str| -> Result<PathBuf, HarnessError> {
        let path = dir.join(name);
        std::fs::write(&path, pem).map_err(HarnessError::io(format!("write {name}")))?;
        Ok(path)
    };
    Ok(PkiFiles {
        ca: write("ca.crt", &pki.ca_cert)?,
        serving_cert: write("apiserver.crt", &pki.serving_cert)?,
        serving_key: write("apiserver.key", &pki.serving_key)?,
        sa_key: write("sa.key", &pki.sa_key)?,
        sa_pub: write("sa.pub", &pki.sa_pub)?,
        pki,
    })
}

fn etcd_command(bin: &Path, dir: &Path, client: u16, peer: u16) -> Command {
    let client_url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let mut cmd = Command::new(bin);
    cmd.arg("--name=e2e")
        .arg(format!("--data-dir={}", dir.join("etcd-data").display()))
        .arg(format!("--listen-client-urls={client_url}"))
        .arg(format!("--advertise-client-urls={client_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=e2e={peer_url}"))
        // Throw-away data: durability buys nothing and fsync is slow on shared disks.
        .arg("--unsafe-no-fsync=true")
        .arg("--log-level=warn");
    cmd
}

fn apiserver_command(
    bin: &Path,
    dir: &Path,
    files: &PkiFiles,
    etcd_port: u16,
    port: u16,
) -> Command {
    let p = |path: &Path| path.display().to_string();
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--etcd-servers=http://127.0.0.1:{etcd_port}"))
        .arg("--bind-address=127.0.0.1")
        .arg("--advertise-address=127.0.0.1")
        .arg(format!("--secure-port={port}"))
        .arg(format!("--cert-dir={}", p(&dir.join("apiserver-certs"))))
        .arg(format!("--tls-cert-file={}", p(&files.serving_cert)))
        .arg(format!("--tls-private-key-file={}", p(&files.serving_key)))
        .arg(format!("--client-ca-file={}", p(&files.ca)))
        .arg(format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"))
        .arg(format!("--service-account-key-file={}", p(&files.sa_pub)))
        .arg(format!(
            "--service-account-signing-key-file={}",
            p(&files.sa_key)
        ))
        .arg(format!("--api-audiences={SERVICE_ACCOUNT_ISSUER}"))
        .arg("--service-cluster-ip-range=10.96.0.0/24")
        .arg("--authorization-mode=RBAC")
        .arg("--profiling=false")
        .arg("--v=1");
    cmd
}

fn kubeconfig_yaml(url: &str, pki: &Pki) -> Result<String, HarnessError> {
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "proxy-pool-e2e", "cluster": {
            "server": url,
            "certificate-authority-data": B64.encode(&pki.ca_cert),
        }}],
        "users": [{"name": "admin", "user": {
            "client-certificate-data": B64.encode(&pki.admin_cert),
            "client-key-data": B64.encode(&pki.admin_key),
        }}],
        "contexts": [{"name": "proxy-pool-e2e", "context": {
            "cluster": "proxy-pool-e2e", "user": "admin", "namespace": "default",
        }}],
        "current-context": "proxy-pool-e2e",
    });
    Ok(serde_yaml::to_string(&doc)?)
}

async fn client_from(kubeconfig: &str) -> Result<kube::Client, HarnessError> {
    // kube's rustls backend uses the process-wide provider; install ring (the one this
    // workspace builds) unless a provider is already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kc = Kubeconfig::from_yaml(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

async fn wait_for_tcp(etcd: &mut Spawned, port: u16) -> Result<(), HarnessError> {
    wait_until(&mut [etcd], ETCD_READY, || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    })
    .await
}

async fn wait_ready(
    client: &kube::Client,
    apiserver: &mut Spawned,
    etcd: &mut Spawned,
) -> Result<(), HarnessError> {
    wait_until(&mut [etcd, apiserver], APISERVER_READY, || async {
        let mut req = http::Request::new(Vec::new());
        *req.uri_mut() = http::Uri::from_static("/readyz");
        match client.request_text(req).await {
            Ok(body) if body.trim() == "ok" => Ok(()),
            Ok(body) => Err(body),
            Err(e) => Err(e.to_string()),
        }
    })
    .await
}

/// Polls `probe` every [`POLL`] until it is `Ok`, while every process in `watched`
/// keeps running; after `limit` the last probe error is a `NotReady` of the last
/// process in `watched` (the one being waited for).
async fn wait_until<F, Fut>(
    watched: &mut [&mut Spawned],
    limit: Duration,
    mut probe: F,
) -> Result<(), HarnessError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let start = Instant::now();
    loop {
        for p in watched.iter_mut() {
            p.check_running()?;
        }
        let last = match probe().await {
            Ok(()) => return Ok(()),
            Err(last) => last,
        };
        if start.elapsed() > limit
            && let Some(p) = watched.last()
        {
            return Err(HarnessError::NotReady {
                name: p.name(),
                secs: limit.as_secs(),
                last,
                log: p.log_tail(),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}
