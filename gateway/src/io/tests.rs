use super::*;
use tokio::net::TcpListener;

async fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    let (s, _) = l.accept().await.unwrap();
    (c, s)
}

#[tokio::test]
async fn chunked_bodies_are_copied_verbatim() {
    let (mut w, r) = pair().await;
    let (mut out_r, mut out_w) = pair().await;
    let body = b"5;x=y\r\nhello\r\n0\r\nTrailer: 1\r\n\r\nNEXT";
    w.write_all(body).await.unwrap();
    let mut src = BufConn::new(r, 1024);
    let n = copy_body(&mut src, &mut out_w, BodyFraming::Chunked, waits())
        .await
        .unwrap();
    assert_eq!(n, 5);
    assert_eq!(src.buffered(), b"NEXT");
    drop(out_w);
    let mut got = Vec::new();
    out_r.read_to_end(&mut got).await.unwrap();
    // Trailers are checked and dropped: the other side sees an empty trailer section.
    assert_eq!(got, b"5;x=y\r\nhello\r\n0\r\n\r\n");
}

fn waits() -> Waits {
    Waits {
        read_idle: Duration::from_secs(5),
        write: Duration::from_secs(5),
        deadline: None,
    }
}

#[tokio::test]
async fn malformed_or_oversized_trailers_end_the_body() {
    for body in [
        &b"0\r\nX: a\r\n folded\r\n\r\n"[..],
        b"0\r\nContent-Length 5\r\n\r\n",
        b"0\r\n: x\r\n\r\n",
    ] {
        let (mut w, r) = pair().await;
        let (_out_r, mut out_w) = pair().await;
        w.write_all(body).await.unwrap();
        let mut src = BufConn::new(r, 1024);
        let res = copy_body(&mut src, &mut out_w, BodyFraming::Chunked, waits()).await;
        assert!(
            matches!(res, Err(CopyError::Malformed)),
            "{:?}: {res:?}",
            String::from_utf8_lossy(body)
        );
    }
    let mut many = b"0\r\n".to_vec();
    for i in 0..1000 {
        many.extend_from_slice(format!("X-{i}: {}\r\n", "v".repeat(20)).as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    let (mut w, r) = pair().await;
    let (_out_r, mut out_w) = pair().await;
    let writer = tokio::spawn(async move {
        let _ = w.write_all(&many).await;
        w
    });
    let mut src = BufConn::new(r, 1024);
    let res = copy_body(&mut src, &mut out_w, BodyFraming::Chunked, waits()).await;
    assert!(matches!(res, Err(CopyError::Malformed)), "{res:?}");
    drop(src);
    let _ = writer.await;
}

#[tokio::test(start_paused = true)]
async fn a_body_past_its_deadline_ends() {
    let (mut w, r) = pair().await;
    let (_out_r, mut out_w) = pair().await;
    let mut src = BufConn::new(r, 1024);
    let trickle = tokio::spawn(async move {
        for _ in 0..1000 {
            if w.write_all(b"x").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let waits = Waits {
        read_idle: Duration::from_secs(5),
        write: Duration::from_secs(5),
        deadline: Some(Instant::now() + Duration::from_secs(30)),
    };
    let started = Instant::now();
    let res = copy_body(&mut src, &mut out_w, BodyFraming::Length(10_000), waits).await;
    assert!(
        matches!(&res, Err(CopyError::Read(e)) if e.kind() == io::ErrorKind::TimedOut),
        "{res:?}"
    );
    assert!(
        started.elapsed() <= Duration::from_secs(31),
        "{:?}",
        started.elapsed()
    );
    trickle.abort();
}

#[tokio::test(start_paused = true)]
async fn a_reader_that_stops_reading_ends_the_write() {
    let (mut slow, peer) = pair().await;
    let mut peer = peer;
    let big = vec![7u8; 16 * 1024 * 1024];
    let res = write_all(&mut peer, &big, Duration::from_secs(5)).await;
    assert!(
        matches!(&res, Err(e) if e.kind() == io::ErrorKind::TimedOut),
        "{res:?}"
    );
    let _ = slow.flush().await;
}

#[tokio::test]
async fn a_trickled_head_costs_linear_work() {
    let (mut w, r) = pair().await;
    let mut head = b"GET http://example.com/ HTTP/1.1\r\n".to_vec();
    while head.len() < 16 * 1024 - 64 {
        head.extend_from_slice(b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    head.extend_from_slice(b"\r\n");
    let len = head.len();
    let writer = tokio::spawn(async move {
        for b in head {
            w.write_all(&[b]).await.unwrap();
            tokio::task::yield_now().await;
        }
        w
    });
    let mut conn = BufConn::new(r, 16 * 1024);
    let got = conn
        .read_head(16 * 1024, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(got, Some(len));
    let _w = writer.await.unwrap();
    // Each byte is looked at a bounded number of times (≤ 4 with the overlap),
    // not once per read (which would be ~len² / 2 for byte-by-byte reads).
    assert!(
        conn.head_bytes_scanned() <= 4 * len as u64,
        "scanned {} bytes for a {len}-byte head",
        conn.head_bytes_scanned()
    );
}

#[tokio::test]
async fn length_bodies_stop_at_the_length() {
    let (mut w, r) = pair().await;
    let (mut out_r, mut out_w) = pair().await;
    w.write_all(b"abcdefXYZ").await.unwrap();
    let mut src = BufConn::new(r, 1024);
    copy_body(&mut src, &mut out_w, BodyFraming::Length(6), waits())
        .await
        .unwrap();
    assert_eq!(src.buffered(), b"XYZ");
    drop(out_w);
    let mut got = Vec::new();
    out_r.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"abcdef");
}

#[tokio::test(start_paused = true)]
async fn idle_tunnels_end() {
    let (a, _a_peer) = pair().await;
    let (b, _b_peer) = pair().await;
    let (mut a, mut b) = (
        BufConn::new(super::ClientStream::new(a), 1024),
        BufConn::new(b, 1024),
    );
    let relayed = tunnel(
        &mut a,
        &mut b,
        Duration::from_secs(5),
        Duration::from_secs(5),
        std::future::pending(),
    )
    .await;
    assert_eq!(relayed.end, TunnelEnd::Idle);
}

/// `n` bytes of a pattern that shows a lost, doubled or reordered chunk.
fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add((i >> 12) as u8) ^ seed)
        .collect()
}

/// Bulk both ways at once: every byte arrives in order, the tunnel's totals and the
/// client's meter count exactly the bytes that went through, and on Linux both
/// directions moved to `splice` after their first [`SPLICE_AFTER`] bytes.
#[tokio::test]
async fn bulk_tunnels_are_relayed_and_metered_exactly() {
    const UP: usize = 3 * 1024 * 1024 + 17;
    const DOWN: usize = 5 * 1024 * 1024 + 3;
    let (app, gateway_side) = pair().await;
    let (gateway_out, vendor) = pair().await;
    let recorder = crate::usage::UsageRecorder::default();
    let mut client = BufConn::new(super::ClientStream::new(gateway_side), 16 * 1024);
    client
        .stream
        .attach(recorder.meter(&std::sync::Arc::from("r"), "c"));
    let mut upstream = BufConn::new(gateway_out, 8 * 1024);
    let (sent_up, sent_down) = (pattern(UP, 1), pattern(DOWN, 2));
    // Each far end writes its bytes, half-closes, and reads the other's to the end.
    let far = |mut s: TcpStream, out: Vec<u8>| async move {
        let (mut r, mut w) = s.split();
        let write = async {
            w.write_all(&out).await.unwrap();
            w.shutdown().await.unwrap();
        };
        let mut got = Vec::new();
        let read = r.read_to_end(&mut got);
        let ((), n) = tokio::join!(write, read);
        n.unwrap();
        got
    };
    let app_end = tokio::spawn(far(app, sent_up.clone()));
    let vendor_end = tokio::spawn(far(vendor, sent_down.clone()));
    let relayed = tunnel(
        &mut client,
        &mut upstream,
        Duration::from_secs(30),
        Duration::from_secs(30),
        std::future::pending(),
    )
    .await;
    drop((client, upstream));
    let (at_app, at_vendor) = (app_end.await.unwrap(), vendor_end.await.unwrap());
    assert_eq!(relayed.end, TunnelEnd::Closed);
    assert!(at_vendor == sent_up, "client → upstream bytes differ");
    assert!(at_app == sent_down, "upstream → client bytes differ");
    assert_eq!((relayed.up, relayed.down), (UP as u64, DOWN as u64));
    assert_eq!(recorder.take().bytes(), (UP as u64, DOWN as u64));
    #[cfg(target_os = "linux")]
    assert_eq!(relayed.spliced, 2, "both directions moved to splice");
}

/// A direction that moved to `splice` still keeps the tunnel alive while bytes flow
/// and lets it idle out once they stop.
#[tokio::test(start_paused = true)]
async fn spliced_tunnels_still_idle_out() {
    const N: usize = 200 * 1024;
    let (mut app, gateway_side) = pair().await;
    let (gateway_out, mut vendor) = pair().await;
    let mut client = BufConn::new(super::ClientStream::new(gateway_side), 16 * 1024);
    let mut upstream = BufConn::new(gateway_out, 8 * 1024);
    // The app sends N bytes and then nothing, its connection left open.
    let app_writes = tokio::spawn(async move {
        app.write_all(&pattern(N, 3)).await.unwrap();
        app
    });
    let vendor_reads = tokio::spawn(async move {
        let mut got = vec![0u8; N];
        vendor.read_exact(&mut got).await.unwrap();
        (vendor, got)
    });
    let relayed = tunnel(
        &mut client,
        &mut upstream,
        Duration::from_secs(5),
        Duration::from_secs(5),
        std::future::pending(),
    )
    .await;
    let (_vendor, got) = vendor_reads.await.unwrap();
    assert!(got == pattern(N, 3));
    assert_eq!(relayed.end, TunnelEnd::Idle);
    assert_eq!(relayed.up, N as u64);
    #[cfg(target_os = "linux")]
    assert_eq!(relayed.spliced, 1);
    drop(app_writes.await.unwrap());
}
