//! A whole SOCKS5 handshake from one byte stream (greeting, then RFC 1929 credentials
//! when offered, else — as an open gateway takes it — no authentication, then the
//! request), the way the listener consumes it: never panics, never consumes more than
//! it was given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxy_pool_gateway::parse::socks5::{Parsed, parse_greeting, parse_request, parse_user_pass};

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    let greeting = match parse_greeting(rest) {
        Ok(Parsed::Done(g, n)) => {
            assert!(n <= rest.len());
            rest = &rest[n..];
            g
        }
        _ => return,
    };
    // The listener's method choice: username/password when offered, else no
    // authentication (an open gateway), else refused.
    if greeting.user_pass {
        match parse_user_pass(rest) {
            Ok(Parsed::Done(up, n)) => {
                assert!(n <= rest.len());
                assert!(!up.username.is_empty());
                rest = &rest[n..];
            }
            _ => return,
        }
    } else if !greeting.no_auth {
        return;
    }
    if let Ok(Parsed::Done(req, n)) = parse_request(rest) {
        assert!(n <= rest.len());
        let _ = req.host.to_string();
    }
});
