//! CONNECT authorities and absolute URIs: arbitrary bytes must never panic, and an
//! accepted authority prints back to something that parses to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxy_pool_gateway::parse::authority::{parse_absolute_uri, parse_authority};

fuzz_target!(|data: &[u8]| {
    if let Ok(a) = parse_authority(data) {
        assert_ne!(a.port, 0);
        let printed = a.to_string();
        assert_eq!(parse_authority(printed.as_bytes()), Ok(a));
    }
    if let Ok(uri) = parse_absolute_uri(data) {
        assert!(uri.path_and_query.starts_with(b"/"));
    }
});
