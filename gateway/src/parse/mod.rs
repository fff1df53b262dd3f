//! Hand-written, bounded parsers for every untrusted byte the gateway reads: HTTP
//! heads, request targets, chunk sizes, SOCKS5 handshakes, routing usernames and the
//! PROXY protocol header of a load balancer.
//! Pure functions over byte slices (fuzzed by `gateway/fuzz`); no I/O here.

pub mod authority;
pub mod chunked;
pub mod http_head;
pub mod proxy_protocol;
pub mod socks5;
pub mod username;

/// Client credentials as presented (`Proxy-Authorization: Basic` or RFC 1929; in
/// SOCKS5 a username of 1..=255 bytes, a password of 0..=255). `Debug` shows only the
/// username's length.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Credentials<'a> {
    /// Username, possibly with routing parameters.
    pub username: &'a [u8],
    /// Password.
    pub password: &'a [u8],
}

impl std::fmt::Debug for Credentials<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username_len", &self.username.len())
            .finish_non_exhaustive()
    }
}

/// Asserts that `parse` refuses every one of `inputs` (the failing input shown).
#[cfg(test)]
pub(crate) fn assert_refused_all<T, E>(parse: impl Fn(&[u8]) -> Result<T, E>, inputs: &[&[u8]]) {
    for input in inputs {
        assert!(
            parse(input).is_err(),
            "accepted {:?}",
            String::from_utf8_lossy(input)
        );
    }
}
