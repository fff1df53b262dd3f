#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use tokio::net::TcpListener;

const WAIT: Duration = Duration::from_secs(10);

/// A fake upstream proxy on loopback: for each connection, reads the CONNECT head,
/// sends it back through `heads`, answers `status_line` and then echoes the tunnel.
async fn fake_upstream(
    status_line: &'static [u8],
) -> (SocketAddr, tokio::sync::mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (heads, rx) = tokio::sync::mpsc::channel(8);
    tokio::spawn(async move {
        loop {
            let (mut conn, _) = listener.accept().await.unwrap();
            let heads = heads.clone();
            tokio::spawn(async move {
                let mut buf = Vec::with_capacity(MAX_HEAD);
                let head = read_head(&mut conn, &mut buf).await.unwrap();
                heads
                    .send(String::from_utf8(buf[..head].to_vec()).unwrap())
                    .await
                    .unwrap();
                conn.write_all(status_line).await.unwrap();
                // Echo the tunnel, including what came right behind the head.
                conn.write_all(&buf[head..]).await.unwrap();
                let (mut r, mut w) = conn.split();
                tokio::io::copy(&mut r, &mut w).await.unwrap();
                w.shutdown().await.unwrap();
            });
        }
    });
    (addr, rx)
}

/// The relay on an ephemeral port, one worker, in front of `upstreams`.
async fn relay(upstreams: Vec<Upstream>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let worker = Arc::new(Worker {
        upstreams: upstreams.into(),
        next: AtomicUsize::new(0),
    });
    tokio::spawn(accept_loop(listener.into_std().unwrap(), worker));
    addr
}

async fn read_to_end(conn: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    tokio::time::timeout(WAIT, conn.read_to_end(&mut out))
        .await
        .expect("the relay closed the connection")
        .unwrap();
    out
}

#[tokio::test]
async fn carries_a_tunnel_with_credentials_round_robin_and_early_bytes() {
    let (a, mut heads_a) = fake_upstream(b"HTTP/1.1 200 Connection established\r\n\r\n").await;
    let (b, mut heads_b) = fake_upstream(b"HTTP/1.0 200 OK\r\nX: y\r\n\r\n").await;
    let relay = relay(vec![
        parse_upstream(&format!("http://alice:s3cret@{a}")).unwrap(),
        parse_upstream(&format!("http://bob:pw@{b}")).unwrap(),
    ])
    .await;
    for (heads, credentials) in [(&mut heads_a, "alice:s3cret"), (&mut heads_b, "bob:pw")] {
        let mut conn = TcpStream::connect(relay).await.unwrap();
        // The first tunnel bytes in the same write as the head.
        conn.write_all(b"CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\nearly ")
            .await
            .unwrap();
        conn.write_all(b"late").await.unwrap();
        conn.shutdown().await.unwrap();
        let got = read_to_end(&mut conn).await;
        assert_eq!(
            String::from_utf8(got).unwrap(),
            "HTTP/1.1 200 Connection established\r\n\r\nearly late"
        );
        let head = heads.recv().await.unwrap();
        let expected = base64::engine::general_purpose::STANDARD.encode(credentials);
        assert_eq!(
            head,
            format!(
                "CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\
                 Proxy-Authorization: Basic {expected}\r\n\r\n"
            )
        );
    }
}

#[tokio::test]
async fn answers_400_to_anything_but_connect_and_502_to_an_upstream_refusal() {
    let (refusing, _heads) =
        fake_upstream(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n").await;
    let relay = relay(vec![
        parse_upstream(&format!("http://u:p@{refusing}")).unwrap(),
    ])
    .await;

    let mut conn = TcpStream::connect(relay).await.unwrap();
    conn.write_all(b"GET http://127.0.0.1/ HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    assert!(read_to_end(&mut conn).await.starts_with(b"HTTP/1.1 400 "));

    let mut conn = TcpStream::connect(relay).await.unwrap();
    conn.write_all(b"CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    assert!(read_to_end(&mut conn).await.starts_with(b"HTTP/1.1 502 "));
}

#[tokio::test]
async fn closes_a_client_whose_head_exceeds_the_bound() {
    let (a, _heads) = fake_upstream(b"HTTP/1.1 200 OK\r\n\r\n").await;
    let relay = relay(vec![parse_upstream(&format!("http://u:p@{a}")).unwrap()]).await;
    let mut conn = TcpStream::connect(relay).await.unwrap();
    let mut head = b"CONNECT 127.0.0.1:443 HTTP/1.1\r\nX: ".to_vec();
    head.resize(MAX_HEAD + 100, b'a');
    // The relay may close (and reset) before it has read everything.
    let _ = conn.write_all(&head).await;
    let mut out = Vec::new();
    let read = tokio::time::timeout(WAIT, conn.read_to_end(&mut out))
        .await
        .expect("the relay closed the connection");
    assert!(read.is_err() || out.is_empty(), "got {out:?}");
}

#[test]
fn parses_arguments_and_rejects_bad_ones() {
    let args = |s: &str| parse_args(s.split_whitespace().map(String::from));
    let ok = args("--listen 127.0.0.1:1 --upstream http://u:p@127.0.0.2:2/ --threads 2").unwrap();
    assert_eq!(ok.listen, "127.0.0.1:1".parse().unwrap());
    assert_eq!(ok.threads, Some(2));
    assert_eq!(ok.upstreams[0].addr, "127.0.0.2:2".parse().unwrap());
    assert_eq!(
        ok.upstreams[0].authorization,
        "Proxy-Authorization: Basic dTpw\r\n"
    );
    for bad in [
        "",
        "--listen 127.0.0.1:1",
        "--listen nowhere --upstream http://127.0.0.1:2",
        "--listen 127.0.0.1:1 --upstream socks5://127.0.0.1:2",
        "--listen 127.0.0.1:1 --upstream http://user@127.0.0.1:2",
        "--listen 127.0.0.1:1 --upstream http://127.0.0.1:2 --threads 0",
        "--listen 127.0.0.1:1 --upstream http://127.0.0.1:2 --threads",
        "--listen 127.0.0.1:1 --upstream http://127.0.0.1:2 --verbose yes",
    ] {
        assert!(args(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn recognises_connect_lines_and_200_status_lines() {
    assert_eq!(
        connect_target(b"CONNECT a.example:443 HTTP/1.1\r\n\r\n"),
        Some(b"a.example:443".as_slice())
    );
    assert_eq!(connect_target(b"CONNECT  HTTP/1.1\r\n\r\n"), None);
    assert_eq!(connect_target(b"CONNECT a:1 HTTP/2\r\n\r\n"), None);
    assert_eq!(connect_target(b"CONNECT a:1 b HTTP/1.1\r\n\r\n"), None);
    assert_eq!(connect_target(b"CONNECT a\x01:1 HTTP/1.1\r\n\r\n"), None);
    assert!(status_is_200(b"HTTP/1.1 200 OK\r\n\r\n"));
    assert!(status_is_200(b"HTTP/1.0 200\r\n\r\n"));
    assert!(!status_is_200(b"HTTP/1.1 2000 OK\r\n\r\n"));
    assert!(!status_is_200(b"HTTP/1.1 407 No\r\n\r\n"));
    assert!(!status_is_200(b"HTTP/1.1 20"));
}
