//! Child processes of the harness: spawned with their output in a log file, killed
//! and reaped on drop. Also picks free loopback ports.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::HarnessError;

/// How much of a log's end an error message quotes.
const LOG_TAIL_BYTES: u64 = 4096;

/// A running child process that is killed when dropped.
#[derive(Debug)]
pub(crate) struct Spawned {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Spawned {
    /// Starts `cmd` with stdout and stderr appended to `log`.
    pub(crate) fn start(
        name: &'static str,
        mut cmd: Command,
        log: PathBuf,
    ) -> Result<Self, HarnessError> {
        let out =
            File::create(&log).map_err(HarnessError::io(format!("create {}", log.display())))?;
        let err = out.try_clone().map_err(HarnessError::io("dup log file"))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(HarnessError::io(format!("start {name}")))?;
        tracing::debug!(name, pid = child.id(), log = %log.display(), "started");
        Ok(Self { name, child, log })
    }

    /// Errors if the process has already exited.
    pub(crate) fn check_running(&mut self) -> Result<(), HarnessError> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(HarnessError::Exited {
                name: self.name,
                status,
                log: self.log_tail(),
            }),
            Err(e) => Err(HarnessError::io(format!("wait for {}", self.name))(e)),
        }
    }

    /// The last few KiB of the process's log.
    pub(crate) fn log_tail(&self) -> String {
        tail(&self.log).unwrap_or_else(|e| format!("(cannot read {}: {e})", self.log.display()))
    }

    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// Kills (SIGKILL) and reaps the process. Idempotent.
    pub(crate) fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            tracing::debug!(name = self.name, "stopped");
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A private directory under the system temp dir, removed with its contents on drop.
#[derive(Debug)]
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(prefix: &str) -> Result<Self, HarnessError> {
        let path = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir(&path)
            .map_err(HarnessError::io(format!("create {}", path.display())))?;
        Ok(Self(path))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            tracing::warn!(dir = %self.0.display(), error = %e, "cannot remove temp dir");
        }
    }
}

fn tail(path: &Path) -> std::io::Result<String> {
    let mut f = File::open(path)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// `N` distinct free TCP ports on 127.0.0.1. The listeners are held until all ports
/// are chosen so none repeats; a port can still be taken by someone else before the
/// caller binds it, which a retry of the whole start covers.
pub(crate) fn free_ports<const N: usize>() -> Result<[u16; N], HarnessError> {
    let listeners = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(HarnessError::io("bind a free loopback port"))?;
    let mut ports = [0u16; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener
            .local_addr()
            .map_err(HarnessError::io("read a bound port"))?
            .port();
    }
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct() {
        let ports = free_ports::<3>().unwrap();
        assert!(ports[0] != ports[1] && ports[1] != ports[2] && ports[0] != ports[2]);
    }

    #[test]
    fn exited_process_is_reported_with_its_log() {
        let dir = std::env::temp_dir().join(format!("pp-spawn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo boom-from-child; exit 3"]);
        let mut p = Spawned::start("sh", cmd, dir.join("sh.log")).unwrap();
        let mut err = None;
        for _ in 0..100 {
            if let Err(e) = p.check_running() {
                err = Some(e);
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let msg = err.expect("child exits").to_string();
        assert!(msg.contains("boom-from-child"), "{msg}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
