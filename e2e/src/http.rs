//! HTTP/1 by hand for tests that speak to proxies byte by byte: a response head read
//! without consuming anything after it, and its status code.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

/// How long one byte of a response head may take.
const BYTE_LIMIT: Duration = Duration::from_secs(10);
/// Longest head accepted (a test fails beyond it).
const MAX_HEAD: usize = 64 * 1024;

/// Reads a response head byte by byte, up to and including its blank line (nothing
/// after it is consumed); panics when it grows past 64 KiB.
pub async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> std::io::Result<String> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let b = tokio::time::timeout(BYTE_LIMIT, stream.read_u8()).await??;
        head.push(b);
        assert!(head.len() < MAX_HEAD, "response head too long");
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// The status code of a response head (`0` when its status line has none).
pub fn status_of(head: &str) -> u16 {
    head.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// How long [`get`] waits to connect and for its response.
const GET_CONNECT: Duration = Duration::from_secs(2);
const GET_READ: Duration = Duration::from_secs(5);

/// `GET http://addr/path` as HTTP/1.0 (so that the answer is never chunked, whoever
/// serves it) read to its end, on a blocking socket: the status and body; `(0, "")` when
/// nothing answers.
pub fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, GET_CONNECT) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(GET_READ));
    let req = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return (0, String::new());
    }
    let mut raw = Vec::new();
    if s.read_to_end(&mut raw).is_err() {
        return (0, String::new());
    }
    let text = String::from_utf8_lossy(&raw);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status_of(&text), body.to_owned())
}
