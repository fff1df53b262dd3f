//! Locates the Kubernetes test binaries that `scripts/k8s-bins.sh` builds.

use std::path::{Path, PathBuf};

use super::HarnessError;

/// Environment variable naming the directory that holds the binaries.
pub const BIN_DIR_ENV: &str = "PROXY_POOL_K8S_BIN_DIR";

/// A directory holding `etcd`, `kube-apiserver`, `kubectl` and, if built,
/// `kube-controller-manager`.
#[derive(Clone, Debug)]
pub struct K8sBins {
    dir: PathBuf,
}

impl K8sBins {
    /// Uses `dir`, checking that etcd, kube-apiserver and kubectl are there.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self, HarnessError> {
        let bins = Self { dir: dir.into() };
        bins.etcd()?;
        bins.kube_apiserver()?;
        bins.kubectl()?;
        Ok(bins)
    }

    /// Uses the directory named by [`BIN_DIR_ENV`]. Fails, never skips, when it is
    /// unset or incomplete; the error says how to build the binaries.
    pub fn from_env() -> Result<Self, HarnessError> {
        match std::env::var_os(BIN_DIR_ENV) {
            Some(dir) if !dir.is_empty() => Self::new(dir),
            _ => Err(HarnessError::BinDirUnset),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of `etcd`.
    pub fn etcd(&self) -> Result<PathBuf, HarnessError> {
        self.find("etcd", "")
    }

    /// Path of `kube-apiserver`.
    pub fn kube_apiserver(&self) -> Result<PathBuf, HarnessError> {
        self.find("kube-apiserver", "")
    }

    /// Path of `kubectl`.
    pub fn kubectl(&self) -> Result<PathBuf, HarnessError> {
        self.find("kubectl", "")
    }

    /// Path of `kube-controller-manager` (built only with `--with-controller-manager`).
    pub fn kube_controller_manager(&self) -> Result<PathBuf, HarnessError> {
        self.find("kube-controller-manager", " --with-controller-manager")
    }

    fn find(&self, binary: &'static str, flag: &'static str) -> Result<PathBuf, HarnessError> {
        let path = self.dir.join(binary);
        if path.is_file() {
            Ok(path)
        } else {
            Err(HarnessError::MissingBinary { binary, path, flag })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binaries_name_the_build_script() {
        let err = K8sBins::new("/nonexistent/proxy-pool-k8s-bins").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("scripts/k8s-bins.sh"), "{msg}");
        assert!(msg.contains("etcd"), "{msg}");
    }

    #[test]
    fn controller_manager_error_names_its_flag() {
        let bins = K8sBins {
            dir: PathBuf::from("/nonexistent"),
        };
        let msg = bins.kube_controller_manager().unwrap_err().to_string();
        assert!(msg.contains("--with-controller-manager"), "{msg}");
    }

    #[test]
    fn unset_variable_error_says_how_to_fix_it() {
        let msg = HarnessError::BinDirUnset.to_string();
        assert!(
            msg.contains("scripts/k8s-bins.sh") && msg.contains(BIN_DIR_ENV),
            "{msg}"
        );
    }
}
