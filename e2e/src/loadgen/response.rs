//! A minimal HTTP/1.x response reader for the load generator: parses the head with
//! `httparse`, then discards the body by its framing (`Content-Length`, chunked, or to
//! EOF). One fixed buffer per connection; nothing grows with the response.

use tokio::io::{AsyncRead, AsyncReadExt as _};

use super::OpError;

/// Read buffer per connection, and so the largest response head (and chunk-size line).
pub const READ_BUFFER: usize = 16 * 1024;
/// Largest response body the load generator reads before giving up.
pub const MAX_BODY: u64 = 64 * 1024 * 1024;
/// Header fields parsed per response head.
const MAX_HEADERS: usize = 64;
/// Interim (1xx) responses skipped before the final one.
const MAX_INTERIM: usize = 8;

/// What a response head said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Status code.
    pub status: u16,
    /// Whether the connection can carry another request afterwards.
    pub keep_alive: bool,
    framing: Framing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    ToEof,
}

/// A connection's read side: the stream's buffered bytes not consumed yet.
#[derive(Debug)]
pub struct ReadBuf {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Default for ReadBuf {
    fn default() -> Self {
        Self {
            buf: vec![0; READ_BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }
}

impl ReadBuf {
    fn buffered(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Bytes received but not consumed (after a CONNECT head: the tunnel's first bytes).
    pub fn pending(&self) -> usize {
        self.end - self.start
    }

    /// Reads more bytes; `Ok(false)` on EOF. Makes room by compacting first.
    async fn fill<S: AsyncRead + Unpin>(&mut self, stream: &mut S) -> Result<bool, OpError> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            if self.start == 0 {
                return Err(OpError::TooLarge);
            }
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let n = stream
            .read(&mut self.buf[self.end..])
            .await
            .map_err(|_| OpError::Io)?;
        self.end += n;
        Ok(n > 0)
    }

    /// Reads one response head (skipping 1xx interim responses).
    pub async fn read_head<S: AsyncRead + Unpin>(
        &mut self,
        stream: &mut S,
        request_was_head: bool,
    ) -> Result<Head, OpError> {
        for _ in 0..=MAX_INTERIM {
            let head = loop {
                match parse_head(self.buffered(), request_was_head)? {
                    Some((head, used)) => {
                        self.start += used;
                        break head;
                    }
                    None => {
                        if !self.fill(stream).await? {
                            return Err(OpError::Closed);
                        }
                    }
                }
            };
            if (100..200).contains(&head.status) && head.status != 101 {
                continue;
            }
            return Ok(head);
        }
        Err(OpError::BadResponse)
    }

    /// Reads and discards the body that `head` announced.
    pub async fn skip_body<S: AsyncRead + Unpin>(
        &mut self,
        stream: &mut S,
        head: &Head,
    ) -> Result<u64, OpError> {
        match head.framing {
            Framing::None => Ok(0),
            Framing::Length(n) => {
                self.skip_exact(stream, n).await?;
                Ok(n)
            }
            Framing::ToEof => {
                let mut total = 0u64;
                loop {
                    total += self.pending() as u64;
                    self.start = self.end;
                    if total > MAX_BODY {
                        return Err(OpError::TooLarge);
                    }
                    if !self.fill(stream).await? {
                        return Ok(total);
                    }
                }
            }
            Framing::Chunked => self.skip_chunked(stream).await,
        }
    }

    async fn skip_exact<S: AsyncRead + Unpin>(
        &mut self,
        stream: &mut S,
        mut remaining: u64,
    ) -> Result<(), OpError> {
        while remaining > 0 {
            if self.pending() == 0 && !self.fill(stream).await? {
                return Err(OpError::Closed);
            }
            let take = remaining.min(self.pending() as u64);
            // `take` ≤ pending(), a usize.
            self.start += usize::try_from(take).map_err(|_| OpError::TooLarge)?;
            remaining -= take;
        }
        Ok(())
    }

    /// One CRLF-terminated line (without the CRLF), consumed.
    async fn line<S: AsyncRead + Unpin>(&mut self, stream: &mut S) -> Result<Vec<u8>, OpError> {
        loop {
            if let Some(pos) = self.buffered().windows(2).position(|w| w == b"\r\n") {
                let line = self.buffered()[..pos].to_vec();
                self.start += pos + 2;
                return Ok(line);
            }
            if !self.fill(stream).await? {
                return Err(OpError::Closed);
            }
        }
    }

    async fn skip_chunked<S: AsyncRead + Unpin>(&mut self, stream: &mut S) -> Result<u64, OpError> {
        let mut total = 0u64;
        loop {
            let line = self.line(stream).await?;
            let size = parse_chunk_size(&line)?;
            if size == 0 {
                // Trailers until the empty line.
                for _ in 0..MAX_HEADERS {
                    if self.line(stream).await?.is_empty() {
                        return Ok(total);
                    }
                }
                return Err(OpError::BadResponse);
            }
            total = total.saturating_add(size);
            if total > MAX_BODY {
                return Err(OpError::TooLarge);
            }
            self.skip_exact(stream, size).await?;
            if !self.line(stream).await?.is_empty() {
                return Err(OpError::BadResponse);
            }
        }
    }
}

fn parse_chunk_size(line: &[u8]) -> Result<u64, OpError> {
    let digits = line.split(|&b| b == b';').next().unwrap_or_default();
    let digits = std::str::from_utf8(digits).map_err(|_| OpError::BadResponse)?;
    let digits = digits.trim();
    if digits.is_empty() || digits.len() > 15 {
        return Err(OpError::BadResponse);
    }
    u64::from_str_radix(digits, 16).map_err(|_| OpError::BadResponse)
}

/// Parses a complete head at the start of `buf`: `Ok(None)` when more bytes are needed.
fn parse_head(buf: &[u8], request_was_head: bool) -> Result<Option<(Head, usize)>, OpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let used = match resp.parse(buf) {
        Ok(httparse::Status::Complete(used)) => used,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(OpError::TooLarge),
        Err(_) => return Err(OpError::BadResponse),
    };
    let status = resp.code.ok_or(OpError::BadResponse)?;
    let http10 = resp.version == Some(0);
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut close = http10;
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or(OpError::BadResponse)?;
            if length.is_some_and(|l| l != v) {
                return Err(OpError::BadResponse);
            }
            length = Some(v);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = h
                .value
                .split(|&b| b == b',')
                .next_back()
                .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if h.name.eq_ignore_ascii_case("connection")
            || h.name.eq_ignore_ascii_case("proxy-connection")
        {
            for token in h.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && http10 {
                    close = false;
                }
            }
        }
    }
    let bodiless =
        request_was_head || (100..200).contains(&status) || status == 204 || status == 304;
    let framing = if bodiless {
        Framing::None
    } else if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        if n > MAX_BODY {
            return Err(OpError::TooLarge);
        }
        Framing::Length(n)
    } else {
        Framing::ToEof
    };
    let keep_alive = !close && framing != Framing::ToEof;
    Ok(Some((
        Head {
            status,
            keep_alive,
            framing,
        },
        used,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_all(input: &[u8]) -> Result<Vec<(Head, u64)>, OpError> {
        let mut stream = input;
        let mut rb = ReadBuf::default();
        let mut out = Vec::new();
        loop {
            let head = match rb.read_head(&mut stream, false).await {
                Ok(head) => head,
                Err(OpError::Closed) if rb.pending() == 0 && !out.is_empty() => return Ok(out),
                Err(e) => return Err(e),
            };
            let n = rb.skip_body(&mut stream, &head).await?;
            out.push((head, n));
            if !head.keep_alive {
                return Ok(out);
            }
        }
    }

    #[tokio::test]
    async fn framings() {
        let input = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello\
HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3;x=1\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nT: v\r\n\r\n\
HTTP/1.1 204 No Content\r\n\r\n\
HTTP/1.0 200 OK\r\n\r\nto the end";
        let got = read_all(input).await.unwrap();
        let summary: Vec<(u16, bool, u64)> = got
            .iter()
            .map(|(h, n)| (h.status, h.keep_alive, *n))
            .collect();
        assert_eq!(
            summary,
            vec![
                (200, true, 5),
                (404, true, 19),
                (204, true, 0),
                (200, false, 10)
            ]
        );
    }

    #[tokio::test]
    async fn errors() {
        for (answer, want) in [
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc".as_slice(),
                OpError::Closed,
            ),
            (b"NOT HTTP\r\n\r\n", OpError::BadResponse),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                OpError::BadResponse,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                OpError::BadResponse,
            ),
        ] {
            assert_eq!(
                read_all(answer).await,
                Err(want),
                "{}",
                String::from_utf8_lossy(answer)
            );
        }
        let huge = [b"HTTP/1.1 200 OK\r\nX: ".as_slice(), &[b'a'; READ_BUFFER]].concat();
        assert_eq!(read_all(&huge).await, Err(OpError::TooLarge));
        let close = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
        let got = read_all(close).await.unwrap();
        assert!(!got[0].0.keep_alive);
    }
}
