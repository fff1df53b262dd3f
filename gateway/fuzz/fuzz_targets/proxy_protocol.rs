//! A PROXY protocol header (v1 or v2) from arbitrary bytes, fed whole and in every
//! split the listener could read it in: never panics, never claims more bytes than it
//! was given, and every prefix of a complete header waits for more bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proxy_pool_gateway::parse::proxy_protocol::parse_proxy_header;
use proxy_pool_gateway::parse::socks5::Parsed;

fuzz_target!(|data: &[u8]| {
    let whole = parse_proxy_header(data);
    if let Ok(Parsed::Done(header, n)) = whole {
        assert!(n <= data.len());
        // The same header with nothing after it parses the same.
        assert_eq!(parse_proxy_header(&data[..n]), Ok(Parsed::Done(header, n)));
        // Every shorter prefix waits for more bytes: the listener reading it in pieces
        // reaches the same header.
        for cut in 0..n {
            assert_eq!(parse_proxy_header(&data[..cut]), Ok(Parsed::Incomplete));
        }
    }
});
