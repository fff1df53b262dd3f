//! Loopback ports for the processes an end-to-end test starts: picked outside the
//! kernel's ephemeral range, so that an outgoing connection made meanwhile (by the
//! test's own traffic or anything else on the machine) cannot take a port before the
//! process that was given it binds it.

use std::net::{SocketAddr, TcpListener};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Where the kernel picks outgoing connections' local ports (`ip_local_port_range`).
pub fn ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|v| v.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32_768, 60_999))
}

/// A free loopback port outside the ephemeral range: the processes bind theirs only
/// after starting, and an outgoing connection of anything on the machine (the test's
/// own traffic included) may take an ephemeral port meanwhile. Never the same twice in
/// one test process.
pub fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_ports(1)))
}

/// The first of `n` consecutive free loopback ports outside the ephemeral range (for a
/// program given a base port), as [`free_addr`] picks one; none of them handed out
/// before in this test process.
pub fn free_ports(n: u16) -> u16 {
    static TAKEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let (lo, hi) = ephemeral_range();
    let (from, to) = if lo > 21_000 {
        (20_000, lo)
    } else {
        (hi.saturating_add(1), u16::MAX)
    };
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let seed = u64::from(std::process::id()).wrapping_mul(2_654_435_761) ^ now_ms;
    let span = u64::from(to.saturating_sub(from).saturating_sub(n.max(1) - 1));
    for i in 0..span {
        let base = from + ((seed.wrapping_add(i * 7_919)) % span) as u16;
        let run = base..base + n.max(1);
        if run
            .clone()
            .all(|p| !taken.contains(&p) && TcpListener::bind(("127.0.0.1", p)).is_ok())
        {
            taken.extend(run);
            return base;
        }
    }
    panic!("no {n} free consecutive ports outside the ephemeral range");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_and_outside_the_ephemeral_range() {
        let (lo, hi) = ephemeral_range();
        let a = free_addr();
        let b = free_addr();
        assert_ne!(a, b);
        for p in [a.port(), b.port()] {
            assert!(!(lo..=hi).contains(&p), "{p} in {lo}..={hi}");
        }
    }

    #[test]
    fn a_run_of_ports_is_free_outside_the_ephemeral_range_and_not_handed_out_again() {
        let (lo, hi) = ephemeral_range();
        let base = free_ports(10);
        for p in base..base + 10 {
            assert!(!(lo..=hi).contains(&p), "{p} in {lo}..={hi}");
            assert!(TcpListener::bind(("127.0.0.1", p)).is_ok(), "{p} free");
        }
        for _ in 0..20 {
            let p = free_addr().port();
            assert!(!(base..base + 10).contains(&p), "{p} handed out twice");
        }
    }
}
