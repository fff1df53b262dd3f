//! Allocation of per-proxy loopback source addresses (127.0.0.x): each live proxy
//! gets a distinct one so a target can tell which proxy carried a request. Owns only
//! the bookkeeping; never binds sockets.

use std::collections::HashSet;
use std::net::Ipv4Addr;

/// A cursor over an inclusive range of loopback addresses with an in-use set.
///
/// The cursor keeps moving forward, so a released address is reused as late as
/// possible and a target rarely sees two proxies with one address close together.
#[derive(Debug)]
pub(crate) struct EgressPool {
    first: u32,
    last: u32,
    cursor: u32,
    excluded: Ipv4Addr,
    in_use: HashSet<Ipv4Addr>,
}

impl EgressPool {
    /// A pool over `first..=last`, never handing out `excluded` (the shared address)
    /// nor addresses ending in `.0` or `.255`.
    pub(crate) fn new(first: Ipv4Addr, last: Ipv4Addr, excluded: Ipv4Addr) -> Self {
        Self {
            first: u32::from(first),
            last: u32::from(last),
            cursor: u32::from(first),
            excluded,
            in_use: HashSet::new(),
        }
    }

    /// Takes the next free address, or `None` when every usable one is in use.
    pub(crate) fn allocate(&mut self) -> Option<Ipv4Addr> {
        let span = u64::from(self.last - self.first) + 1;
        for _ in 0..span {
            let ip = Ipv4Addr::from(self.cursor);
            self.cursor = if self.cursor >= self.last {
                self.first
            } else {
                self.cursor + 1
            };
            let last_octet = ip.octets()[3];
            if last_octet == 0 || last_octet == 255 || ip == self.excluded {
                continue;
            }
            if self.in_use.insert(ip) {
                return Some(ip);
            }
        }
        None
    }

    /// Gives an address back.
    pub(crate) fn release(&mut self, ip: Ipv4Addr) {
        self.in_use.remove(&ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_out_distinct_addresses_and_skips_reserved_ones() {
        let mut pool = EgressPool::new(
            Ipv4Addr::new(127, 0, 0, 253),
            Ipv4Addr::new(127, 0, 1, 2),
            Ipv4Addr::new(127, 0, 1, 1),
        );
        let got: Vec<_> = std::iter::from_fn(|| pool.allocate()).collect();
        assert_eq!(
            got,
            vec![
                Ipv4Addr::new(127, 0, 0, 253),
                Ipv4Addr::new(127, 0, 0, 254),
                Ipv4Addr::new(127, 0, 1, 2)
            ]
        );
        pool.release(Ipv4Addr::new(127, 0, 0, 254));
        assert_eq!(pool.allocate(), Some(Ipv4Addr::new(127, 0, 0, 254)));
        assert_eq!(pool.allocate(), None);
    }

    #[test]
    fn released_addresses_are_reused_last() {
        let mut pool = EgressPool::new(
            Ipv4Addr::new(127, 0, 0, 2),
            Ipv4Addr::new(127, 0, 0, 10),
            Ipv4Addr::LOCALHOST,
        );
        let a = pool.allocate().unwrap();
        pool.release(a);
        assert_ne!(pool.allocate(), Some(a));
    }
}
