//! A real Kubernetes control plane for tests: etcd + kube-apiserver (and, when asked,
//! kube-controller-manager) built from Go source by `scripts/k8s-bins.sh`, started on
//! free loopback ports with freshly generated certificates, and torn down on drop.
//!
//! It owns its processes and temp dir and nothing else: it never reads a user's
//! kubeconfig, never talks to anything beyond loopback, and never skips: a missing
//! binary is an error that says how to build it.

mod apiserver;
mod bins;
mod pki;
mod process;
mod table;
mod workloads;

pub use apiserver::{KubeApiServer, SERVICE_ACCOUNT_ISSUER};
pub use bins::{BIN_DIR_ENV, K8sBins};
pub use table::{CLIENT_COLUMNS, GROUP_COLUMNS, ROUTING_COLUMNS, UPSTREAM_COLUMNS, kubectl_table};
pub use workloads::{PodRef, Workloads};

use std::path::PathBuf;

/// Why the test control plane could not be found, started or reached.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The bin dir variable is not set.
    #[error(
        "{BIN_DIR_ENV} is not set. Build the Kubernetes test binaries with `scripts/k8s-bins.sh` \
         and run `export {BIN_DIR_ENV}=<the directory it prints>` (scripts/test.sh does both)"
    )]
    BinDirUnset,
    /// A binary is missing from the bin dir.
    #[error(
        "{binary} not found at {}. Build it with `scripts/k8s-bins.sh{flag}` and set \
         {BIN_DIR_ENV} to the directory it prints",
        path.display()
    )]
    MissingBinary {
        /// Binary name.
        binary: &'static str,
        /// Where it was looked for.
        path: PathBuf,
        /// Extra flag the build script needs for this binary.
        flag: &'static str,
    },
    /// Certificate or key generation failed.
    #[error("generating test certificates: {0}")]
    Pki(#[from] rcgen::Error),
    /// File or process I/O failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A control-plane process exited while it should be running.
    #[error("{name} exited early ({status}); last lines of its log:\n{log}")]
    Exited {
        /// Process name.
        name: &'static str,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// Tail of its log.
        log: String,
    },
    /// A process did not become ready in time.
    #[error("{name} not ready after {secs}s (last check: {last}); last lines of its log:\n{log}")]
    NotReady {
        /// Process name.
        name: &'static str,
        /// How long we waited.
        secs: u64,
        /// The last readiness check's result.
        last: String,
        /// Tail of its log.
        log: String,
    },
    /// The generated kubeconfig could not be turned into a client config.
    #[error("loading the generated kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// The Kubernetes client failed.
    #[error("Kubernetes client: {0}")]
    Client(#[from] kube::Error),
    /// Serialising the kubeconfig failed.
    #[error("writing the kubeconfig: {0}")]
    Yaml(#[from] serde_yaml::Error),
    /// kubectl did not finish in time.
    #[error("kubectl {args:?} did not finish within {secs}s")]
    KubectlTimeout {
        /// Its arguments.
        args: Vec<String>,
        /// The limit.
        secs: u64,
    },
    /// kubectl failed, or succeeded with warnings on stderr.
    #[error("kubectl {args:?} {}:\n{stderr}\n{stdout}", if *.success { "warned" } else { "failed" })]
    Kubectl {
        /// Its arguments.
        args: Vec<String>,
        /// Whether it exited 0 (then stderr held warnings).
        success: bool,
        /// Its stdout.
        stdout: String,
        /// Its stderr.
        stderr: String,
    },
}

impl HarnessError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| Self::Io { what, source }
    }
}
