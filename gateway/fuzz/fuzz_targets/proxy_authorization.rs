//! `Proxy-Authorization: Basic …` decoding, as the HTTP listener does it on the
//! header of a parsed request head. The first byte picks the input: an arbitrary header
//! value (never panics; accepted credentials are the decoded bytes split at their first
//! colon), or `Basic ` and the base64 of the rest (which must come back exactly,
//! split at its first colon, or be refused when it has no colon or is too long).
#![no_main]

use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use proxy_pool_gateway::listener::proxy_credentials;
use proxy_pool_gateway::parse::http_head::{HeadLimits, parse_request};

/// The listener's cap on the header value.
const MAX_AUTH_HEADER: usize = 1024;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let encoded = mode & 1 == 1;
    let value = if encoded {
        let mut v = b"Basic ".to_vec();
        v.extend_from_slice(
            base64::engine::general_purpose::STANDARD
                .encode(rest)
                .as_bytes(),
        );
        v
    } else {
        rest.to_vec()
    };
    let mut head = b"GET http://example.com/ HTTP/1.1\r\nProxy-Authorization: ".to_vec();
    head.extend_from_slice(&value);
    head.extend_from_slice(b"\r\n\r\n");
    let mut ranges = Vec::new();
    let limits = HeadLimits::default();
    let Ok(Some(req)) = parse_request(&head, limits, &mut ranges) else {
        assert!(
            !encoded || head.len() > limits.max_head_bytes,
            "a Basic header of base64 must parse"
        );
        return;
    };
    let present = req.headers.get(b"proxy-authorization").is_some();
    let mut buf = Vec::new();
    let got = proxy_credentials(&req.headers, &mut buf)
        .map(|c| c.map(|c| (c.username.to_vec(), c.password.to_vec())));
    match got {
        Ok(Some((username, password))) => {
            assert!(!username.contains(&b':'));
            let mut joined = username.clone();
            joined.push(b':');
            joined.extend_from_slice(&password);
            assert_eq!(joined, buf);
            if encoded {
                assert_eq!(joined, rest);
            }
        }
        Ok(None) => assert!(!present),
        Err(_) => {
            if encoded {
                assert!(value.len() > MAX_AUTH_HEADER || !rest.contains(&b':'));
            }
        }
    }
});
