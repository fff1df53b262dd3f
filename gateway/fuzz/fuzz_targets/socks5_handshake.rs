//! A whole SOCKS5 handshake from one byte stream (greeting, RFC 1929 credentials,
//! request), the way the listener consumes it: never panics, never consumes more
//! than it was given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxy_pool_gateway::parse::socks5::{Parsed, parse_greeting, parse_request, parse_user_pass};

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    match parse_greeting(rest) {
        Ok(Parsed::Done(_, n)) => rest = &rest[n..],
        _ => return,
    }
    match parse_user_pass(rest) {
        Ok(Parsed::Done(up, n)) => {
            assert!(!up.username.is_empty());
            rest = &rest[n..];
        }
        _ => return,
    }
    if let Ok(Parsed::Done(req, n)) = parse_request(rest) {
        assert!(n <= rest.len());
        let _ = req.host.to_string();
    }
});
