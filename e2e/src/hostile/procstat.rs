//! What a process holds, read from `/proc/<pid>/status` (resident memory, threads) and
//! `/proc/<pid>/fd` (open descriptors), and a sampler that records the peaks while an
//! attack runs.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// One reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    /// Resident memory (`VmRSS`), KiB.
    pub rss_kib: u64,
    /// Open file descriptors.
    pub fds: u64,
    /// Threads.
    pub threads: u64,
}

/// The reading of `pid` now (`None`: the process is gone).
pub fn sample(pid: u32) -> Option<Stat> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    let fds = std::fs::read_dir(PathBuf::from(format!("/proc/{pid}/fd")))
        .ok()?
        .count() as u64;
    Some(Stat {
        rss_kib: field("VmRSS:")?,
        fds,
        threads: field("Threads:")?,
    })
}

/// CPU seconds `pid` (`"self"`: this process) has used so far, utime + stime of all its
/// threads (`/proc/<pid>/stat`, counted in `USER_HZ`, which Linux fixes at 100 for user
/// space); `None` once it is gone.
pub fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state …`: comm may hold spaces and parentheses; utime and stime are
    // the 12th and 13th fields after it.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    #[allow(clippy::cast_precision_loss)]
    Some((utime + stime) as f64 / 100.0)
}

/// Whether `pid` runs (and is not a zombie).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(|r| r.trim_start().to_owned()))
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

/// Samples a process every 50 ms on its own thread, keeping the peaks, until dropped.
#[derive(Debug)]
pub struct Sampler {
    peak_rss: Arc<AtomicU64>,
    peak_fds: Arc<AtomicU64>,
    peak_threads: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling `pid`.
    pub fn start(pid: u32) -> Self {
        let peak_rss = Arc::new(AtomicU64::new(0));
        let peak_fds = Arc::new(AtomicU64::new(0));
        let peak_threads = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, f, t, s) = (
            peak_rss.clone(),
            peak_fds.clone(),
            peak_threads.clone(),
            stop.clone(),
        );
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Some(st) = sample(pid) {
                    r.fetch_max(st.rss_kib, Ordering::Relaxed);
                    f.fetch_max(st.fds, Ordering::Relaxed);
                    t.fetch_max(st.threads, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Self {
            peak_rss,
            peak_fds,
            peak_threads,
            stop,
            thread: Some(thread),
        }
    }

    /// The peaks so far.
    pub fn peaks(&self) -> Stat {
        Stat {
            rss_kib: self.peak_rss.load(Ordering::Relaxed),
            fds: self.peak_fds.load(Ordering::Relaxed),
            threads: self.peak_threads.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Waits (up to `within`) until `pid` holds at most `fds` descriptors; returns how long
/// it took (`None`: not within the bound).
pub async fn fds_settle(pid: u32, fds: u64, within: Duration) -> Option<Duration> {
    let started = tokio::time::Instant::now();
    loop {
        if sample(pid).is_some_and(|s| s.fds <= fds) {
            return Some(started.elapsed());
        }
        if started.elapsed() >= within {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `pid`'s descriptor count holds still over two sampling intervals
/// (100 ms each), at most `within`; the last reading (`None`: the process is gone).
pub async fn steady(pid: u32, within: Duration) -> Option<Stat> {
    let started = tokio::time::Instant::now();
    let mut last = sample(pid)?;
    let mut still = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = sample(pid)?;
        still = if now.fds == last.fds { still + 1 } else { 0 };
        if still >= 2 || started.elapsed() >= within {
            return Some(now);
        }
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        let s = sample(me).expect("own /proc");
        assert!(s.rss_kib > 0 && s.fds >= 3 && s.threads >= 1, "{s:?}");
        assert!(alive(me));
        assert!(sample(u32::MAX).is_none());
    }

    #[test]
    fn cpu_seconds_grow_with_work_and_a_gone_process_has_none() {
        let before = cpu_seconds("self").expect("own /proc");
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        // Work until a clock tick (10 ms of CPU) is counted; bounded at 5 s.
        while cpu_seconds("self").expect("own /proc") <= before {
            assert!(spin.elapsed() < Duration::from_secs(5), "no CPU counted");
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        }
        assert!(cpu_seconds(&u32::MAX.to_string()).is_none());
    }

    #[tokio::test]
    async fn a_process_that_opens_nothing_is_steady_at_once() {
        let started = std::time::Instant::now();
        let s = steady(std::process::id(), Duration::from_secs(5)).await;
        assert!(s.is_some_and(|s| s.fds >= 3));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(steady(u32::MAX, Duration::from_secs(1)).await.is_none());
    }
}
