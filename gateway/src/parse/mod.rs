//! Hand-written, bounded parsers for every untrusted byte the gateway reads: HTTP
//! heads, request targets, chunk sizes, SOCKS5 handshakes and routing usernames.
//! Pure functions over byte slices (fuzzed by `gateway/fuzz`); no I/O here.

pub mod authority;
pub mod chunked;
pub mod http_head;
pub mod socks5;
pub mod username;
