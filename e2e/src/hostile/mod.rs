//! The hostile-client suite's tools (`e2e/tests/hostile.rs`): attacks over real sockets
//! ([`attack`]) and what the attacked process holds, read from `/proc` ([`procstat`]).

pub mod attack;
pub mod procstat;

use std::fmt::Write as _;

/// One measured line of the figures table.
#[derive(Clone, Debug)]
pub struct Figure {
    /// `binary/listener`.
    pub listener: String,
    /// The attack.
    pub attack: &'static str,
    /// Connections attempted.
    pub attempted: u64,
    /// Closed (or refused) by the server within the bound, as the client saw it.
    pub closed: u64,
    /// Still open at the bound as the client saw it (the kernel completed the handshake
    /// but the listen queue overflowed: the process never had them — `fds.2` says so).
    pub unanswered: u64,
    /// Longest time a connection stayed open before the server closed it, ms.
    pub longest_ms: u64,
    /// Open descriptors of the server before, at the peak, and at the bound (with the
    /// unanswered connections still open on the client side).
    pub fds: (u64, u64, u64),
    /// Resident memory before and at the peak, MiB.
    pub rss_mib: (u64, u64),
    /// Legitimate requests served during the attack (ok / tried).
    pub legit: (u32, u32),
}

/// The figures as a Markdown table.
pub fn table(figures: &[Figure]) -> String {
    let mut out = String::from(
        "| listener | attack | conns | closed by server | unanswered | longest open (s) | server fds before / peak / at bound | RSS before / peak (MiB) | legit served |\n|---|---|---:|---:|---:|---:|---|---|---|\n",
    );
    for f in figures {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.1} | {} / {} / {} | {} / {} | {}/{} |",
            f.listener,
            f.attack,
            f.attempted,
            f.closed,
            f.unanswered,
            f.longest_ms as f64 / 1000.0,
            f.fds.0,
            f.fds.1,
            f.fds.2,
            f.rss_mib.0,
            f.rss_mib.1,
            f.legit.0,
            f.legit.1
        );
    }
    out
}
