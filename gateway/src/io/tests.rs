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
    let cancel = CancellationToken::new();
    let (_, _, end) = tunnel(
        &mut a,
        &mut b,
        Duration::from_secs(5),
        Duration::from_secs(5),
        &cancel,
        std::future::pending(),
    )
    .await;
    assert_eq!(end, TunnelEnd::Idle);
}
