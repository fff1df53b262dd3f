use super::*;
use proptest::prelude::*;

fn done(buf: &[u8]) -> (ProxyHeader, usize) {
    match parse_proxy_header(buf) {
        Ok(Parsed::Done(h, n)) => (h, n),
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
    }
}

fn addr(s: &str) -> Option<SocketAddr> {
    Some(s.parse().unwrap())
}

/// A v2 header: `vc` version/command, `fam` family byte, then `body`.
fn v2(vc: u8, fam: u8, body: &[u8]) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    out.extend_from_slice(&[vc, fam]);
    out.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
    out.extend_from_slice(body);
    out
}

#[test]
fn v1_tcp4_tcp6_and_unknown() {
    let buf = b"PROXY TCP4 198.51.100.7 10.0.0.1 51234 3128\r\nCONNECT x:443";
    let (h, n) = done(buf);
    assert_eq!(h.source, addr("198.51.100.7:51234"));
    assert_eq!(h.destination, addr("10.0.0.1:3128"));
    assert_eq!(&buf[n..], b"CONNECT x:443");

    let (h, n) = done(b"PROXY TCP6 2001:db8::7 ::1 65535 1080\r\n\x05");
    assert_eq!(h.source, addr("[2001:db8::7]:65535"));
    assert_eq!(h.destination, addr("[::1]:1080"));
    assert_eq!(n, 39);

    // UNKNOWN: the rest of the line is ignored, no address.
    let (h, n) = done(b"PROXY UNKNOWN ffff::1 whatever\r\n");
    assert_eq!((h.source, h.destination), (None, None));
    assert_eq!(n, 32);
    assert_eq!(done(b"PROXY UNKNOWN\r\n").1, 15);
}

#[test]
fn v1_refusals() {
    let bad: &[&[u8]] = &[
        b"PROXY TCP4 198.51.100.7 10.0.0.1 51234\r\n",
        b"PROXY TCP4 198.51.100.7 10.0.0.1 51234 3128 9\r\n",
        b"PROXY TCP4 2001:db8::7 10.0.0.1 1 2\r\n",
        b"PROXY TCP6 198.51.100.7 ::1 1 2\r\n",
        b"PROXY TCP4 198.51.100.7 10.0.0.1 65536 1\r\n",
        b"PROXY TCP4 198.51.100.7 10.0.0.1 01 1\r\n",
        b"PROXY TCP4 198.51.100.7 10.0.0.1 +1 1\r\n",
        b"PROXY TCP4 198.51.100.7  10.0.0.1 1 1\r\n",
        b"PROXY UDP4 198.51.100.7 10.0.0.1 1 1\r\n",
        b"PROXY \r\n",
        b"PROXY TCP4 \xff 10.0.0.1 1 1\r\n",
    ];
    for b in bad {
        assert_eq!(
            parse_proxy_header(b),
            Err(ProxyProtocolError::MalformedV1),
            "{:?}",
            String::from_utf8_lossy(b)
        );
    }
    // No CRLF within the bound: refused, never buffered further.
    let long = [b"PROXY UNKNOWN ".as_slice(), &[b'a'; 200]].concat();
    assert_eq!(
        parse_proxy_header(&long),
        Err(ProxyProtocolError::MalformedV1)
    );
}

#[test]
fn not_a_header() {
    for b in [
        b"CONNECT example.com:443 HTTP/1.1\r\n".as_slice(),
        b"\x05\x01\x02",
        b"PROXx",
        b"\r\n\r\n\0\r\nQUIX\n",
    ] {
        assert_eq!(parse_proxy_header(b), Err(ProxyProtocolError::Missing));
    }
}

#[test]
fn prefixes_are_incomplete() {
    let full_v1 = b"PROXY TCP4 198.51.100.7 10.0.0.1 51234 3128\r\n".as_slice();
    let full_v2 = v2(
        0x21,
        0x11,
        &[192, 0, 2, 1, 10, 0, 0, 1, 0x1f, 0x90, 0x0c, 0x38],
    );
    for full in [full_v1, full_v2.as_slice()] {
        for n in 0..full.len() {
            assert_eq!(
                parse_proxy_header(&full[..n]),
                Ok(Parsed::Incomplete),
                "prefix of {n} bytes"
            );
        }
        assert!(matches!(parse_proxy_header(full), Ok(Parsed::Done(_, l)) if l == full.len()));
    }
}

#[test]
fn v2_proxy_ipv4_ipv6_with_tlvs() {
    let mut body = vec![192, 0, 2, 1, 10, 0, 0, 1, 0x1f, 0x90, 0x0c, 0x38];
    // A TLV (type 0xEA, an AWS VPC endpoint id) after the addresses is skipped.
    body.extend_from_slice(&[0xEA, 0x00, 0x03, b'v', b'p', b'c']);
    let mut buf = v2(0x21, 0x11, &body);
    buf.extend_from_slice(b"GET /");
    let (h, n) = done(&buf);
    assert_eq!(h.source, addr("192.0.2.1:8080"));
    assert_eq!(h.destination, addr("10.0.0.1:3128"));
    assert_eq!(&buf[n..], b"GET /");

    let mut six = Vec::new();
    six.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
    six.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
    six.extend_from_slice(&[0x04, 0x38, 0x00, 0x50]);
    let (h, _) = done(&v2(0x21, 0x21, &six));
    assert_eq!(h.source, addr("[2001:db8::1]:1080"));
    assert_eq!(h.destination, addr("[::1]:80"));
}

#[test]
fn v2_local_and_unspec_carry_no_address() {
    // LOCAL with an IPv4 block: the block is skipped, the peer address stays.
    let buf = v2(0x20, 0x11, &[1; 12]);
    assert_eq!(
        done(&buf),
        (
            ProxyHeader {
                source: None,
                destination: None
            },
            28
        )
    );
    assert_eq!(done(&v2(0x21, 0x00, &[])).0.source, None);
    // AF_UNIX: 216 bytes of paths, no IP address.
    assert_eq!(done(&v2(0x21, 0x31, &[0; 216])).0.source, None);
}

#[test]
fn v2_refusals() {
    // Version 1 in the v2 format, and command 2.
    assert_eq!(
        parse_proxy_header(&v2(0x11, 0x11, &[0; 12])),
        Err(ProxyProtocolError::UnsupportedV2)
    );
    assert_eq!(
        parse_proxy_header(&v2(0x22, 0x11, &[0; 12])),
        Err(ProxyProtocolError::UnsupportedV2)
    );
    // The version byte alone is enough to refuse.
    let mut early = V2_SIGNATURE.to_vec();
    early.push(0x31);
    assert_eq!(
        parse_proxy_header(&early),
        Err(ProxyProtocolError::UnsupportedV2)
    );
    // Too short for its family.
    assert_eq!(
        parse_proxy_header(&v2(0x21, 0x11, &[0; 11])),
        Err(ProxyProtocolError::BadV2Length)
    );
    assert_eq!(
        parse_proxy_header(&v2(0x21, 0x21, &[0; 35])),
        Err(ProxyProtocolError::BadV2Length)
    );
    // Longer than the bound: refused from the fixed part, before the body arrives.
    let mut huge = V2_SIGNATURE.to_vec();
    huge.extend_from_slice(&[0x21, 0x11]);
    huge.extend_from_slice(&u16::try_from(MAX_V2_LEN - 15).unwrap().to_be_bytes());
    assert_eq!(
        parse_proxy_header(&huge),
        Err(ProxyProtocolError::BadV2Length)
    );
    let mut at_bound = V2_SIGNATURE.to_vec();
    at_bound.extend_from_slice(&[0x21, 0x11]);
    at_bound.extend_from_slice(&u16::try_from(MAX_V2_LEN - 16).unwrap().to_be_bytes());
    assert_eq!(parse_proxy_header(&at_bound), Ok(Parsed::Incomplete));
}

proptest! {
    /// Never panics; a header never claims more bytes than it was given, and a v1
    /// header never more than 107.
    #[test]
    fn arbitrary_bytes(buf in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(Parsed::Done(_, n)) = parse_proxy_header(&buf) {
            prop_assert!(n <= buf.len());
            if buf.starts_with(V1_PREFIX) {
                prop_assert!(n <= MAX_V1_LEN);
            }
        }
    }

    /// Every v4 and v6 source survives a v1 and a v2 round trip.
    #[test]
    fn round_trip(src in any::<SocketAddr>(), dst_port in any::<u16>()) {
        // Neither form carries an IPv6 flow label or scope.
        let src = SocketAddr::new(src.ip(), src.port());
        let dst = match src {
            SocketAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), dst_port),
            SocketAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), dst_port),
        };
        let family = if src.is_ipv4() { "TCP4" } else { "TCP6" };
        let line = format!(
            "PROXY {family} {} {} {} {}\r\n",
            src.ip(), dst.ip(), src.port(), dst.port()
        );
        let (h, n) = done(line.as_bytes());
        prop_assert_eq!(n, line.len());
        prop_assert_eq!(h.source, Some(src));
        prop_assert_eq!(h.destination, Some(dst));

        let (fam, mut body) = match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => (0x11, [s.octets(), d.octets()].concat()),
            (IpAddr::V6(s), IpAddr::V6(d)) => (0x21, [s.octets(), d.octets()].concat()),
            _ => unreachable!(),
        };
        body.extend_from_slice(&src.port().to_be_bytes());
        body.extend_from_slice(&dst.port().to_be_bytes());
        let (h, _) = done(&v2(0x21, fam, &body));
        prop_assert_eq!(h.source, Some(src));
        prop_assert_eq!(h.destination, Some(dst));
    }
}
