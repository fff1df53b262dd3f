//! HTTP request and response heads, framing and hop-by-hop rules, chunk sizes and
//! routing usernames: arbitrary bytes must never panic, and a parsed head never
//! claims more bytes than it was given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxy_pool_gateway::parse::chunked::parse_chunk_size;
use proxy_pool_gateway::parse::http_head::{
    HeadLimits, is_hop_by_hop, parse_request, parse_response, request_framing, response_framing,
    wants_keep_alive,
};
use proxy_pool_gateway::parse::username::parse_username;

fuzz_target!(|data: &[u8]| {
    let limits = HeadLimits::default();
    let mut ranges = Vec::new();
    if let Ok(Some(head)) = parse_request(data, limits, &mut ranges) {
        assert!(head.len <= data.len());
        let _ = request_framing(&head.headers);
        let _ = wants_keep_alive(head.version, &head.headers);
        for (name, _) in head.headers.iter() {
            let _ = is_hop_by_hop(&head.headers, name);
        }
    }
    let mut ranges = Vec::new();
    if let Ok(Some(head)) = parse_response(data, limits, &mut ranges) {
        assert!(head.len <= data.len());
        let _ = response_framing(false, head.status, &head.headers);
    }
    let _ = parse_chunk_size(data);
    let _ = parse_username(data);
});
