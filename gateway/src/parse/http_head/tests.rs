use super::*;
use proptest::prelude::*;

type Summary = (String, Vec<u8>, usize, usize);

fn req(raw: &[u8]) -> Result<Option<Summary>, HeadError> {
    let mut ranges = Vec::new();
    parse_request(raw, HeadLimits::default(), &mut ranges).map(|h| {
        h.map(|h| {
            (
                h.method.to_owned(),
                h.target.to_vec(),
                h.headers.len(),
                h.len,
            )
        })
    })
}

#[test]
fn parses_connect_and_absolute_requests() {
    let raw = b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: Basic eDp5\r\n\r\nextra";
    let (method, target, n, len) = req(raw).unwrap().unwrap();
    assert_eq!(method, "CONNECT");
    assert_eq!(target, b"example.com:443");
    assert_eq!(n, 2);
    assert_eq!(&raw[len..], b"extra");
}

#[test]
fn header_lookup_is_case_insensitive_and_trimmed() {
    let raw = b"GET http://a/ HTTP/1.1\r\nX-A:  one \r\nconnection: close, X-A\r\n\r\n";
    let mut ranges = Vec::new();
    let head = parse_request(raw, HeadLimits::default(), &mut ranges)
        .unwrap()
        .unwrap();
    assert_eq!(head.headers.get(b"x-a"), Some(&b"one"[..]));
    assert!(head.headers.has_token(b"Connection", b"close"));
    assert!(is_hop_by_hop(&head.headers, b"x-a"));
    assert!(is_hop_by_hop(&head.headers, b"Proxy-Authorization"));
    assert!(!is_hop_by_hop(&head.headers, b"accept"));
    assert!(!wants_keep_alive(head.version, &head.headers));
}

#[test]
fn incomplete_heads_ask_for_more_and_big_ones_fail() {
    assert_eq!(req(b"GET / HTTP/1.1\r\nHost: a\r\n").unwrap(), None);
    let mut big = b"GET / HTTP/1.1\r\n".to_vec();
    big.resize(HeadLimits::default().max_head_bytes, b'a');
    assert_eq!(req(&big), Err(HeadError::TooLarge));
}

#[test]
fn rejects_malformed_heads() {
    crate::parse::assert_refused_all(
        req,
        &[
            b"GET / HTTP/2.0\r\n\r\n",
            b"GET  / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\n folded\r\n\r\n",
            b"GET / HTTP/1.1\r\nNo colon\r\n\r\n",
            b"G(T / HTTP/1.1\r\n\r\n",
            b"GET /\x01 HTTP/1.1\r\n\r\n",
        ],
    );
}

#[test]
fn header_count_is_limited() {
    let mut raw = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..70 {
        raw.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    raw.extend_from_slice(b"\r\n");
    assert_eq!(req(&raw), Err(HeadError::TooManyHeaders));
}

#[test]
fn framing_rules() {
    let framing = |raw: &[u8]| {
        let mut ranges = Vec::new();
        let head = parse_request(raw, HeadLimits::default(), &mut ranges)
            .unwrap()
            .unwrap();
        request_framing(&head.headers)
    };
    assert_eq!(framing(b"GET / HTTP/1.1\r\n\r\n"), Ok(BodyFraming::None));
    assert_eq!(
        framing(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n"),
        Ok(BodyFraming::Length(5))
    );
    assert_eq!(
        framing(b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
        Ok(BodyFraming::Chunked)
    );
    assert!(
        framing(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n")
            .is_err()
    );
    assert!(framing(b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n").is_err());
    assert!(framing(b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n").is_err());
}

#[test]
fn parses_responses() {
    let mut ranges = Vec::new();
    let raw = b"HTTP/1.1 200 Connection established\r\n\r\n";
    let head = parse_response(raw, HeadLimits::default(), &mut ranges)
        .unwrap()
        .unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(head.len, raw.len());
    let raw = b"HTTP/1.0 407\r\nProxy-Authenticate: Basic\r\n\r\n";
    let head = parse_response(raw, HeadLimits::default(), &mut ranges)
        .unwrap()
        .unwrap();
    assert_eq!(head.status, 407);
    assert_eq!(
        response_framing(false, 407, &head.headers),
        Ok(BodyFraming::UntilClose)
    );
    assert!(
        parse_response(
            b"HTTP/1.1 20x OK\r\n\r\n",
            HeadLimits::default(),
            &mut ranges
        )
        .is_err()
    );
}

proptest! {
    #[test]
    fn searching_in_pieces_finds_what_one_search_finds(
        bytes in proptest::collection::vec(prop_oneof![Just(b'\r'), Just(b'\n'), Just(b'a')], 0..64),
        cuts in proptest::collection::vec(0usize..64, 0..8),
    ) {
        // Resuming at `len - 3` after every partial read never misses an end.
        let whole = head_len(&bytes, 1024);
        let mut cuts: Vec<usize> = cuts.into_iter().filter(|c| *c <= bytes.len()).collect();
        cuts.sort_unstable();
        cuts.push(bytes.len());
        let mut scanned = 0;
        let mut got = Ok(None);
        for c in cuts {
            let (r, _) = head_len_from(&bytes[..c], scanned, 1024);
            if let Ok(Some(_)) = r {
                got = r;
                break;
            }
            scanned = c.saturating_sub(3);
        }
        prop_assert_eq!(got, whole);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let mut ranges = Vec::new();
        if let Ok(Some(head)) = parse_request(&bytes, HeadLimits::default(), &mut ranges) {
            let _ = request_framing(&head.headers);
            prop_assert!(head.len <= bytes.len());
        }
        let mut ranges = Vec::new();
        if let Ok(Some(head)) = parse_response(&bytes, HeadLimits::default(), &mut ranges) {
            let _ = response_framing(false, head.status, &head.headers);
        }
    }

    #[test]
    fn well_formed_heads_round_trip(
        name in "[A-Za-z][A-Za-z0-9-]{0,20}",
        value in "[ -~]{0,40}",
    ) {
        let raw = format!("GET http://h/ HTTP/1.1\r\n{name}: {value}\r\n\r\n");
        let mut ranges = Vec::new();
        let head = parse_request(raw.as_bytes(), HeadLimits::default(), &mut ranges).unwrap().unwrap();
        prop_assert_eq!(head.headers.get(name.as_bytes()), Some(trim(value.as_bytes())));
    }
}
